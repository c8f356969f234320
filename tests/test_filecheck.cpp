// The FileCheck of the golden pass tests (src/testing/filecheck.h): each directive passes when
// it should and, just as important, fails when it should, with a message that shows the check
// line, the pattern and the input where it looked.
#include "testing/filecheck.h"

#include <gtest/gtest.h>

#include "tests/user_error.h"

namespace tst = parhelion::testing;

namespace {

const char* const kInput = R"(launch 0 over t0
  %0 load f32[t0,128]: fused
  %1 amax f32[t0,1]: materialized (reduction)
  %2 sub f32[t0,128]: fused
launch 1 over t1
  %4 load f32[t1,128]: fused
  %5 sum f32[t1,1]: materialized (reduction)
)";

tst::CheckResult check(const std::string& checks) { return tst::filecheck(checks, "t.tir", kInput); }

#define EXPECT_PASSES(checks)            \
  do {                                   \
    tst::CheckResult r_ = check(checks); \
    EXPECT_TRUE(r_.ok) << r_.message;    \
  } while (0)

// Fails, and the message contains `needle`.
#define EXPECT_FAILS_WITH(checks, needle)                                \
  do {                                                                   \
    tst::CheckResult r_ = check(checks);                                 \
    EXPECT_FALSE(r_.ok) << "the checks passed:\n" << (checks);           \
    EXPECT_NE(r_.message.find(needle), std::string::npos) << r_.message; \
  } while (0)

TEST(FileCheck, CheckFindsSubstringsInOrder) {
  EXPECT_PASSES("// CHECK: %1 amax\n// CHECK: %5 sum");
  // In order only: %1 comes before %0 is not.
  EXPECT_FAILS_WITH("// CHECK: %1 amax\n// CHECK: %0 load", "t.tir:2: CHECK: expected string not found in output");
  EXPECT_FAILS_WITH("// CHECK: %9 dot", "pattern: \"%9 dot\"");
}

TEST(FileCheck, TwoChecksCanMatchOneLineLeftToRight) {
  EXPECT_PASSES("// CHECK: %1\n// CHECK: materialized");
  EXPECT_FAILS_WITH("// CHECK: materialized (reduction)\n// CHECK: %1 amax", "expected string not found");
}

TEST(FileCheck, NextMustBeOnTheFollowingLine) {
  EXPECT_PASSES("// CHECK: %1 amax\n// CHECK-NEXT: %2 sub");
  EXPECT_FAILS_WITH(
      "// CHECK: %0 load\n// CHECK-NEXT: %2 sub",
      "t.tir:2: CHECK-NEXT: found on line 4 of output, not on the line after the previous match (line 2)");
}

TEST(FileCheck, SameMustBeOnThePreviousMatchsLine) {
  EXPECT_PASSES("// CHECK: %1 amax\n// CHECK-SAME: (reduction)");
  EXPECT_FAILS_WITH("// CHECK: %0 load\n// CHECK-SAME: (reduction)",
                    "CHECK-SAME: not found on the previous match's line 2");
}

TEST(FileCheck, NotExcludesBetweenMatches) {
  EXPECT_PASSES("// CHECK: launch 0\n// CHECK-NOT: sum\n// CHECK: launch 1");
  EXPECT_FAILS_WITH("// CHECK: launch 0\n// CHECK-NOT: amax\n// CHECK: launch 1",
                    "t.tir:2: CHECK-NOT: excluded string found in output at line 3");
  // A trailing CHECK-NOT covers the rest of the input.
  EXPECT_FAILS_WITH("// CHECK: launch 1\n// CHECK-NOT: sum", "excluded string found in output at line 7");
  EXPECT_PASSES("// CHECK: launch 1\n// CHECK-NOT: amax");
}

TEST(FileCheck, LabelsConfineTheChecksToTheirBlock) {
  EXPECT_PASSES("// CHECK-LABEL: launch 0\n// CHECK: materialized\n// CHECK-LABEL: launch 1\n// CHECK: sum");
  // `sum` is in launch 1's block, not launch 0's: the check fails there, even though it occurs later.
  EXPECT_FAILS_WITH("// CHECK-LABEL: launch 0\n// CHECK: sum\n// CHECK-LABEL: launch 1",
                    "t.tir:2: CHECK: expected string not found");
  EXPECT_FAILS_WITH("// CHECK-LABEL: launch 7", "t.tir:1: CHECK-LABEL: expected string not found");
  // CHECK-NEXT right after a label follows the label's line.
  EXPECT_PASSES("// CHECK-LABEL: launch 1\n// CHECK-NEXT: %4 load");
}

TEST(FileCheck, WhitespaceRunsMatchAnyRun) {
  EXPECT_PASSES("// CHECK:     %2    sub   f32[t0,128]");
  EXPECT_FAILS_WITH("// CHECK: %2sub", "expected string not found");
}

TEST(FileCheck, RegexBlocks) {
  EXPECT_PASSES("// CHECK: %{{[0-9]+}} amax f32[t0,{{[0-9]}}]");
  EXPECT_FAILS_WITH("// CHECK: %{{[0-9]+}} amin", "expected string not found");
  // Outside {{ }}, regex characters are literal.
  EXPECT_FAILS_WITH("// CHECK: f32.t0", "expected string not found");
}

TEST(FileCheck, TheFailureShowsTheInputWhereItLooked) {
  tst::CheckResult r = check("// CHECK: %4 load\n// CHECK-NEXT: %6 mul");
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.message.find("check:   // CHECK-NEXT: %6 mul"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("7 |   %5 sum f32[t1,1]: materialized (reduction)"), std::string::npos) << r.message;
}

TEST(FileCheck, MalformedChecksAreRefused) {
  EXPECT_HAS(user_error_of([] { check("// nothing to check here"); }), "t.tir: no CHECK directive found");
  EXPECT_HAS(user_error_of([] { check("// CHECK:   "); }), "t.tir:1: found an empty check string with CHECK");
  EXPECT_HAS(user_error_of([] { check("// CHECK-NEXT: %0"); }),
             "t.tir:1: found CHECK-NEXT without a previous CHECK or CHECK-LABEL to follow");
  EXPECT_HAS(user_error_of([] { check("// CHECK: %0\n// CHECK-NXT: %1"); }),
             "t.tir:2: unsupported or misspelled directive CHECK-NXT");
  EXPECT_HAS(user_error_of([] { check("// CHECK: [[X:%[0-9]+]]"); }), "variables ([[...]]) are not supported");
  EXPECT_HAS(user_error_of([] { check("// CHECK: {{[0-9}}"); }), "t.tir:1: bad regular expression");
}

}  // namespace
