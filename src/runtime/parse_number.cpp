#include "runtime/parse_number.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>

#include "parhelion/error.h"

namespace parhelion {
namespace {

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

// from_chars parses a prefix; the whole string must be the number (no sign-less "+", no spaces).
template <class T>
bool parse_whole(std::string_view text, T* value, std::errc* error) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *value);
  *error = ec;
  return ec == std::errc() && ptr == end;
}

}  // namespace

int64_t parse_integer(std::string_view text, std::string_view what, int64_t lo, int64_t hi) {
  int64_t v = 0;
  std::errc ec;
  if (!parse_whole(text, &v, &ec) || v < lo || v > hi) {
    std::string range = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
    if (ec == std::errc::result_out_of_range || (ec == std::errc() && (v < lo || v > hi)))
      throw UserError(std::string(what) + " " + quoted(text) + " is out of range: it must be " + range);
    throw UserError(std::string(what) + " must be " + range + "; got " + quoted(text));
  }
  return v;
}

uint64_t parse_unsigned(std::string_view text, std::string_view what) {
  uint64_t v = 0;
  std::errc ec;
  if (!parse_whole(text, &v, &ec)) {
    std::string range = "an integer from 0 to " + std::to_string(std::numeric_limits<uint64_t>::max());
    if (ec == std::errc::result_out_of_range)
      throw UserError(std::string(what) + " " + quoted(text) + " is out of range: it must be " + range);
    throw UserError(std::string(what) + " must be " + range + "; got " + quoted(text));
  }
  return v;
}

double parse_real(std::string_view text, std::string_view what, double lo, double hi) {
  double v = 0;
  std::errc ec;
  bool ok = parse_whole(text, &v, &ec) && std::isfinite(v) && v >= lo && v <= hi;
  if (!ok) {
    // to_string prints doubles with six decimals; a range is easier to read without them.
    auto show = [](double x) {
      std::string s = std::to_string(x);
      s.erase(s.find_last_not_of('0') + 1);
      if (!s.empty() && s.back() == '.') s.pop_back();
      return s;
    };
    throw UserError(std::string(what) + " must be a number from " + show(lo) + " to " + show(hi) + "; got " +
                    quoted(text));
  }
  return v;
}

int64_t parse_byte_size(std::string_view text, std::string_view what) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  std::string_view suffix = text.substr(digits);
  int shift = -1;
  if (suffix.empty() || suffix == "B") shift = 0;
  if (suffix == "K" || suffix == "k" || suffix == "KiB") shift = 10;
  if (suffix == "M" || suffix == "MiB") shift = 20;
  if (suffix == "G" || suffix == "GiB") shift = 30;
  constexpr int64_t kMax = int64_t{1} << 62;
  if (digits == 0 || shift < 0)
    throw UserError(std::string(what) + " must be a byte count like 1048576, 1024K, 2M or 1G; got " + quoted(text));
  int64_t count = parse_integer(text.substr(0, digits), what, 1, kMax >> shift);
  return count << shift;
}

}  // namespace parhelion
