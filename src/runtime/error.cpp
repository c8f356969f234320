#include "parhelion/error.h"

#include <string_view>

#include "runtime/source_line.h"

namespace parhelion {

std::string UserError::format_location(const std::source_location& loc) {
  std::string_view file = source_file(loc);
  return std::string(file) + ":" + std::to_string(source_line(loc));
}

}  // namespace parhelion
