#include "lower/strategy.h"

namespace parhelion::lower {

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::Stream:
      return "stream";
    case Strategy::Pipeline:
      return "pipeline";
    case Strategy::Resident:
      return "resident";
    case Strategy::Grid:
      return "grid";
  }
  return "?";
}

std::optional<Strategy> parse_strategy(const std::string& name) {
  for (Strategy s : {Strategy::Stream, Strategy::Pipeline, Strategy::Resident, Strategy::Grid})
    if (name == strategy_name(s)) return s;
  return std::nullopt;
}

}  // namespace parhelion::lower
