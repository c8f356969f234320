#include "runtime/source_line.h"

#include <mutex>
#include <set>

namespace parhelion {
namespace {

thread_local const char* t_file = nullptr;
thread_local int t_line = 0;

// Interned file names: a trace keeps `const char*` file names (as std::source_location gives
// them), so an override's name must outlive the trace. A program has few source files.
const char* intern(const std::string& file) {
  static std::mutex mu;
  static std::set<std::string> names;
  std::lock_guard<std::mutex> lock(mu);
  return names.insert(file).first->c_str();
}

}  // namespace

ScopedSourceLine::ScopedSourceLine(const std::string& file, int line) : previous_file_(t_file), previous_line_(t_line) {
  t_file = intern(file);
  t_line = line;
}

ScopedSourceLine::~ScopedSourceLine() {
  t_file = previous_file_;
  t_line = previous_line_;
}

const char* source_file(const std::source_location& loc) { return t_file ? t_file : loc.file_name(); }
int source_line(const std::source_location& loc) { return t_file ? t_line : static_cast<int>(loc.line()); }

}  // namespace parhelion
