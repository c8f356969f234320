// The CPU autotuner: searches a kernel's config space for the signature of `args`, checks and
// times each candidate in an isolated child process, and caches the winner (docs/autotuning.md).
// KernelBase::tune is its public face.
#pragma once

#include <vector>

#include "parhelion/kernel.h"
#include "parhelion/tune.h"

namespace parhelion::tune {

TuneReport tune(KernelBase& kernel, const std::vector<Arg>& args, const TuneOptions& options);

}  // namespace parhelion::tune
