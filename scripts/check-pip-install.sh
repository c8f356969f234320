#!/usr/bin/env bash
# `pip install` of the project, as a user runs it, into a scratch directory; then the package is
# imported from outside the source tree and runs a library kernel and a Python kernel.
#   check-pip-install.sh PYTHON WORKDIR
# PYTHON is the project venv's (scikit-build-core and nanobind installed: no build isolation, so
# the test needs no network); WORKDIR/build keeps CMake's build between runs.
set -euo pipefail
py=$1 work=$2
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$work/target"
mkdir -p "$work"
"$py" -m pip install -q --no-build-isolation --no-deps --target "$work/target" -C build-dir="$work/build" "$src"
cd "$work"
PYTHONPATH="$work/target" PH_TARGET="$work/target" "$py" - <<'PY'
import os

import numpy as np

import parhelion as ph

assert ph.__file__.startswith(os.environ["PH_TARGET"]), ph.__file__
x = np.arange(10, dtype=np.float32)
assert (ph.kernels.add(x, x) == 2 * x).all()


@ph.kernel
def twice(x):
    out = ph.empty_like(x)
    for t in ph.tile(out.shape):
        out[t] = x[t] * 2
    return out


assert (twice(x) == 2 * x).all()
# The wheel ships the headers and libparhelion for users' own C++ kernel libraries.
assert os.path.isfile(os.path.join(ph.include_dir(), "parhelion", "export.h")), ph.include_dir()
assert ph.library_dir() == os.path.dirname(ph.__file__), ph.library_dir()
print("check-pip-install: parhelion", ph.__version__, "installed and ran from", os.path.dirname(ph.__file__))
PY
