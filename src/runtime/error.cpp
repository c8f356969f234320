#include "parhelion/error.h"

#include <string_view>

namespace parhelion {

std::string UserError::format_location(const std::source_location& loc) {
  std::string_view file = loc.file_name();
  return std::string(file) + ":" + std::to_string(loc.line());
}

}  // namespace parhelion
