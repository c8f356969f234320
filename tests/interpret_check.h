// What every test of emitted Pallas modules asks of a batch run in TPU interpret mode: each
// module ran, interpret mode saw no race, each lowered for a TPU where the case asked, and each
// returned `outputs` arrays; then the test's own comparison of case i's result.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "backend/pallas/interpret.h"

template <class Compare>
void check_interpreted(const std::vector<parhelion::backend::pallas::InterpretCase>& runs, size_t outputs,
                       Compare compare) {
  namespace pallas = parhelion::backend::pallas;
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  const std::vector<pallas::InterpretResult> results = pallas::run_in_interpret_mode(runs);
  ASSERT_EQ(results.size(), runs.size());
  for (size_t i = 0; i < results.size(); ++i) {
    SCOPED_TRACE(runs[i].name);
    ASSERT_TRUE(results[i].ok) << results[i].error << "\n" << runs[i].source;
    EXPECT_FALSE(results[i].races);
    if (runs[i].export_for_tpu) {
      EXPECT_EQ(results[i].export_status, "ok");
    }
    ASSERT_EQ(results[i].outputs.size(), outputs);
    compare(i, results[i]);
  }
}
