// `parhelion fuzz`: the differential tester from the command line (src/fuzz/differential.h).
#pragma once

#include "tools/cli_options.h"

namespace parhelion::tools {

// Runs the tester; prints progress on stderr and each finding (a minimized C++ kernel with its
// shapes and config) on stdout, then a summary. Exit status 0 when nothing was found, 1 when
// something was.
int run_fuzz(const Options& o);

}  // namespace parhelion::tools
