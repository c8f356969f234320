"""The kernel library (kernels/ in C++), callable on torch, numpy and jax arrays.

    out = parhelion.kernels.attention(q, k, v)            # scale defaults to 1/sqrt(D)
    y = parhelion.kernels.rms_norm(x, weight, eps=1e-6)

Every kernel of the library is here by its name; `parhelion.kernels.names()` lists them, and
`parhelion.kernels.get(name)` is the kernel object (emit, tune, pin_config, interpret)."""

from __future__ import annotations

import math
from typing import Any, Callable

from . import _core
from .kernel import KernelAPI

# name -> (parameters, defaults): the C++ kernels' argument order (kernels/kernels.h).
_SIGNATURES: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "add": (("x", "y"), {}),
    "exp": (("x",), {}),
    "swiglu": (("a", "b"), {}),
    "geglu": (("a", "b"), {}),
    "softmax": (("x",), {}),
    "softmax_two_pass": (("x",), {}),
    "batch_softmax": (("x",), {}),
    "layer_norm": (("x", "weight", "bias", "eps"), {"eps": 1e-5}),
    "rms_norm": (("x", "weight", "eps"), {"eps": 1e-5}),
    "welford": (("x",), {}),
    "layer_norm_looped": (("x", "weight", "bias", "eps"), {"eps": 1e-5}),
    "rms_norm_backward": (("grad_out", "x", "weight", "eps"), {"eps": 1e-5}),
    "layer_norm_backward": (("grad_out", "x", "mean", "rstd", "weight"), {}),
    "rotary": (("x", "cos", "sin"), {}),
    "rotary_backward": (("grad", "cos", "sin"), {}),
    "attention": (("q", "k", "v", "scale"), {"scale": None}),
    "causal_attention": (("q", "k", "v", "scale"), {"scale": None}),
    "matmul": (("a", "b"), {}),
    "bmm": (("a", "b"), {}),
    "broadcast_matmul": (("a", "b"), {}),
    "epilogue_subtiling": (("x", "w", "bias", "residual"), {}),
    "matmul_layernorm": (("x", "w", "gamma", "beta"), {}),
    "split_k_matmul": (("a", "b"), {}),
    "fp8_matmul": (("a", "b", "scale_a", "scale_b"), {"scale_a": 1.0, "scale_b": 1.0}),
    "int4_matmul": (("a", "w", "scales"), {}),
    "cross_entropy": (("logits", "labels"), {}),
    "cross_entropy_ignore_index": (("logits", "labels", "ignore_index"), {"ignore_index": -100}),
    "embedding": (("ids", "weight"), {}),
    "concat": (("x", "y"), {}),
    "segment_sum": (("x", "ids", "segments"), {}),
    "segment_cumsum": (("x", "ids"), {}),
    "dropout": (("x", "p", "seed"), {}),
    "dropout_backward": (("grad_out", "p", "seed"), {}),
    "jagged_mean": (("values", "offsets"), {}),
    "grouped_gemm": (("x", "w", "offsets"), {}),
    "moe_matmul": (("x", "w", "ids", "gates", "offsets"), {}),
}


def _default_scale(values: dict[str, Any]) -> float:
    return 1.0 / math.sqrt(values["q"].shape[-1])


_COMPUTED_DEFAULTS: dict[str, Callable[[dict[str, Any]], Any]] = {"scale": _default_scale}


class LibraryKernel(KernelAPI):
    """One kernel of the library: call it like a function."""

    def __init__(self, name: str, core: Any, summary: str, shape_help: str, dtypes: list[str]):
        self.name = name
        self.core = core
        self.summary = summary
        self.shape_help = shape_help
        self.dtypes = dtypes
        params, defaults = _SIGNATURES.get(name, (tuple(f"arg{i}" for i in range(core.num_args)), {}))
        if len(params) != core.num_args:  # the table and the C++ kernel disagree: a bug here
            raise RuntimeError(f"parhelion.kernels: {name} takes {core.num_args} arguments, the table says {params}")
        self.params = params
        self._names = list(params)
        self.defaults = defaults
        self.__doc__ = f"{name}({', '.join(params)}): {summary}. Dtypes: {', '.join(dtypes)}."

    def _values(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        if len(args) > len(self.params):
            raise TypeError(f"{self.name}() takes {len(self.params)} arguments ({', '.join(self.params)}), "
                            f"got {len(args)}")
        values = dict(zip(self.params, args))
        for k, v in kwargs.items():
            if k not in self.params:
                raise TypeError(f"{self.name}() has no parameter '{k}' (it takes {', '.join(self.params)})")
            if k in values:
                raise TypeError(f"{self.name}() got '{k}' twice")
            values[k] = v
        for p in self.params:
            if p not in values:
                if p not in self.defaults:
                    raise TypeError(f"{self.name}() is missing its argument '{p}'")
                values[p] = self.defaults[p]
        for p in self.params:
            if values[p] is None and p in _COMPUTED_DEFAULTS:
                values[p] = _COMPUTED_DEFAULTS[p](values)
        return [values[p] for p in self.params]

    def _core_for(self, values: list[Any]) -> Any:
        return self.core

    def _cores(self) -> list[Any]:
        return [self.core]


_LIBRARY: dict[str, LibraryKernel] = {
    name: LibraryKernel(name, core, summary, shape_help, dtypes)
    for name, (core, summary, shape_help, dtypes) in _core.library().items()
}


def names() -> list[str]:
    """The library's kernels, by name."""
    return sorted(_LIBRARY)


def get(name: str) -> LibraryKernel:
    if name not in _LIBRARY:
        raise _core.UserError(f"no kernel '{name}' in the library: {', '.join(names())}")
    return _LIBRARY[name]


def __getattr__(name: str) -> LibraryKernel:
    if name in _LIBRARY:
        return _LIBRARY[name]
    raise AttributeError(f"parhelion.kernels has no kernel '{name}' (see parhelion.kernels.names())")


def __dir__() -> list[str]:
    return names() + ["names", "get", "LibraryKernel"]
