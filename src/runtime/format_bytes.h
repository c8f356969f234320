// Byte counts for people: "512 B", "8.0 KiB", "2.0 MiB", "1.5 GiB".
#pragma once

#include <cstdint>
#include <string>

namespace parhelion {

std::string format_bytes(int64_t bytes);

}  // namespace parhelion
