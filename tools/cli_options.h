// The CLI's command line: parsing, which flags each command takes, and typed flag values.
//
// Every flag a command accepts must change what it does: a flag that does not apply to the
// command (or to its --target) is refused with a message saying what it needs, rather than
// accepted and silently ignored. Numeric flags are parsed strictly (runtime/parse_number.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "parhelion/array.h"
#include "parhelion/mesh.h"

namespace parhelion::tools {

extern const char* const kUsage;

struct Options {
  std::string command, kernel;
  std::map<std::string, std::string> flags;  // "--name value" and "--name=value"; switches map to "1"
  std::vector<std::string> extra;            // bench: kernel names
  bool json = false;

  bool has(const std::string& flag) const { return flags.count(flag) > 0; }
  std::string get(const std::string& flag, const std::string& fallback) const;
  // The flag as an integer in [lo, hi], or `fallback` if absent; a UserError names the flag.
  int64_t integer(const std::string& flag, int64_t lo, int64_t hi, int64_t fallback) const;
  std::optional<uint64_t> seed() const;
  // --budget: a positive number of seconds, or `fallback` if absent.
  double seconds(const std::string& flag, double fallback) const;
  // The flag as a comma-separated list of integers in [lo, hi] (bench --threads 1,2).
  std::vector<int> integer_list(const std::string& flag, int64_t lo, int64_t hi) const;
};

// Parses argv; throws UserError on an unknown flag or a missing value.
Options parse_options(int argc, char** argv);

// Throws UserError for a flag the command (or its --target) does not use.
void check_flags_apply(const Options& o);

// --shape D0,D1,...: positive dimensions.
Shape parse_shape(const std::string& text);
// "x=4" or "x=2,y=4" (throws UserError naming what is wrong).
Mesh parse_mesh(const std::string& text);

// The most threads a flag may ask for: more than any host has, so a larger number is a typo.
constexpr int64_t kMaxThreadsFlag = 4096;

}  // namespace parhelion::tools
