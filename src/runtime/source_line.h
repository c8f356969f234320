// The user's source line, when the user's source is not C++.
//
// Every operation of the language records std::source_location::current() of its C++ caller.
// A frontend in another language (the Python one, python/src/language.cpp) calls the same
// operations from its bindings, whose C++ lines mean nothing to its user: it names the user's
// file and line with a ScopedSourceLine around each call, and while one lives on a thread,
// every location recorded in the trace or reported in an error on that thread is that line.
#pragma once

#include <source_location>
#include <string>

namespace parhelion {

class ScopedSourceLine {
 public:
  ScopedSourceLine(const std::string& file, int line);
  ~ScopedSourceLine();
  ScopedSourceLine(const ScopedSourceLine&) = delete;
  ScopedSourceLine& operator=(const ScopedSourceLine&) = delete;

 private:
  const char* previous_file_;
  int previous_line_;
};

// The file and line to record for `loc`: the innermost ScopedSourceLine's on this thread, else
// loc's own. The file name lives as long as the program (names are interned).
const char* source_file(const std::source_location& loc);
int source_line(const std::source_location& loc);

}  // namespace parhelion
