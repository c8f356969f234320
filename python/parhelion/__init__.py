"""Parhelion: a tile-style kernel language and autotuning compiler (docs/python.md).

    import parhelion as ph

    @ph.kernel
    def add(x, y):
        out = ph.empty_like(x)
        for t in ph.tile(out.shape):
            out[t] = x[t] + y[t]
        return out

    z = add(torch.randn(1000), torch.randn(1000))     # a torch tensor, no copies
    ph.kernels.attention(q, k, v)                       # the kernel library
    add.emit(x, y, target="pallas", tpu="v7x").source    # the same kernel for a TPU
"""

from __future__ import annotations

import os as _os
import sys as _sys

from . import _core

_core._set_package_dir(_os.path.dirname(_os.path.abspath(__file__)) + _os.sep)
# The pallas and triton backends run their modules with a Python that has jax / triton: this one.
_os.environ.setdefault("PARHELION_PYTHON", _sys.executable)

from ._core import CompileError, ConfigTable, UserError  # noqa: E402
from .kernel import (  # noqa: E402
    Emitted,
    Kernel,
    include_dir,
    kernel,
    library_dir,
    load_config_table,
    load_library,
    tune_table,
)
from .language import *  # noqa: E402,F401,F403
from .language import constexpr, grid, matmul, tile  # noqa: E402,F401
from . import kernels  # noqa: E402

__version__ = "0.1.0"
