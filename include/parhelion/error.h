// Errors. A UserError is the user's mistake (a bad kernel, a bad shape, an impossible config):
// its message names the user's source line where one is known. An InternalError is a bug in
// Parhelion itself. A CompileError is the system compiler failing on generated code.
#pragma once

#include <source_location>
#include <stdexcept>
#include <string>

namespace parhelion {

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& msg) : std::runtime_error(msg) {}
  UserError(const std::string& msg, const std::source_location& loc)
      : std::runtime_error(format_location(loc) + ": " + msg) {}
  static std::string format_location(const std::source_location& loc);
};

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& msg) : std::logic_error("internal error (a bug in Parhelion): " + msg) {}
};

class CompileError : public std::runtime_error {
 public:
  CompileError(const std::string& msg, std::string source_path)
      : std::runtime_error(msg), source_path_(std::move(source_path)) {}
  const std::string& source_path() const { return source_path_; }

 private:
  std::string source_path_;
};

// Asserts an invariant of Parhelion's own code.
#define PH_CHECK(cond, msg)                                                                                    \
  do {                                                                                                         \
    if (!(cond))                                                                                               \
      throw ::parhelion::InternalError(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + (msg)); \
  } while (0)

}  // namespace parhelion
