// Strict parsing of numbers that users type: command-line flags and environment variables.
//
// std::stoi and friends accept "1x" as 1 and throw std::invalid_argument("stoi") on "abc",
// and atoi returns 0 for both; either way a typo silently changes what runs, or the user sees
// a library function's name instead of their mistake. These parse the whole string, check a
// range, and throw a UserError that names the flag or variable (`what`) and the accepted range.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace parhelion {

// A base-10 integer in [lo, hi], nothing before or after it.
int64_t parse_integer(std::string_view text, std::string_view what, int64_t lo, int64_t hi);

// A base-10 unsigned 64-bit integer (e.g. a random seed), nothing before or after it.
uint64_t parse_unsigned(std::string_view text, std::string_view what);

// A finite decimal number in [lo, hi], nothing before or after it.
double parse_real(std::string_view text, std::string_view what, double lo, double hi);

// A byte count: an integer with an optional K/KiB, M/MiB or G/GiB suffix (powers of 1024), in
// [1, 2^62].
int64_t parse_byte_size(std::string_view text, std::string_view what);

}  // namespace parhelion
