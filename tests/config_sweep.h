// Test helper: a kernel checked against an expected output at its default config and at
// configs spread over its block-size domains, with one and two threads, and in the interpreter.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "parhelion/parhelion.h"

// Output 0 of `k` on `args` must match `want` within `tol` in the interpreter and at `trials`
// configs: the default, then block sizes drawn across each domain (threads 1 and 2 in turn).
template <class K>
void check_configs(K& k, const std::vector<parhelion::Arg>& args, const parhelion::Array& want, double tol = 1e-4,
                   int trials = 5) {
  EXPECT_LT(parhelion::max_abs_diff(k.interpret(args).at(0), want), tol) << "interpreter";
  parhelion::CompiledKernel def = k.compile(args);
  const parhelion::ConfigSpec& spec = def.config_spec();
  for (int trial = 0; trial < trials; ++trial) {
    parhelion::Config c = def.config();
    if (trial > 0) {
      for (size_t i = 0; i < spec.block_sizes.size(); ++i) {
        const auto& ch = spec.block_sizes[i].choices;
        c.block_sizes[i] = ch[(trial * 5 + i * 3) % ch.size()];
      }
      c.num_threads = 1 + trial % 2;
    }
    SCOPED_TRACE(c.to_json());
    EXPECT_LT(parhelion::max_abs_diff(k.compile(args, &c).run(args).at(0), want), tol);
  }
}
