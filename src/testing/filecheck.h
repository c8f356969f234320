// A FileCheck for golden tests: the subset of LLVM's FileCheck that compiler pass tests use.
//
// Directives are read from any line of the check text (usually `// CHECK...` comments):
//   CHECK: P        P occurs at or after the end of the previous match
//   CHECK-NEXT: P   ... on the line right after the previous match's line
//   CHECK-SAME: P   ... on the previous match's line, after it
//   CHECK-NOT: P    P does not occur between the previous match and the next one (or the end)
//   CHECK-LABEL: P  P occurs once in order; it splits the input into blocks, and the checks
//                   after a label only look inside its block (so one failure stays local)
// A pattern is a substring: runs of spaces and tabs, in the pattern and in the input, match
// any run of them, and the pattern's ends are trimmed. `{{...}}` is a regular expression
// (ECMAScript) inside the pattern, as in LLVM. Not supported: variables ([[X:...]]), -DAG,
// -COUNT, -EMPTY and other prefixes; they (and misspelled directives such as CHECK-NXT:) are
// refused, so that a check that would silently never run cannot be written.
#pragma once

#include <string>

namespace parhelion::testing {

struct CheckResult {
  bool ok = true;
  // On failure: the check's file:line, the directive and pattern, where it searched, and the
  // input near where it looked.
  std::string message;
};

// Checks `input` (named `input_name` in messages) against the directives in `checks` (read
// from `check_file`). Throws UserError for a malformed check text: no directive at all, an
// empty pattern, CHECK-NEXT/SAME with no previous match, an unsupported directive.
CheckResult filecheck(const std::string& checks, const std::string& check_file, const std::string& input,
                      const std::string& input_name = "output");

}  // namespace parhelion::testing
