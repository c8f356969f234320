// Test helpers for user mistakes: the message of the UserError a call throws, and a check that
// a message contains a phrase.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "parhelion/error.h"

// The UserError's message; a test failure (and "") if `f` throws none.
template <class F>
std::string user_error_of(F&& f) {
  try {
    f();
  } catch (const parhelion::UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a UserError";
  return "";
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)
