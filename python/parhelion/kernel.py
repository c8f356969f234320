"""`@parhelion.kernel`: a Python function in the kernel language as a callable, compiled kernel."""

from __future__ import annotations

import functools
import inspect
import json
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from . import _core
from ._arrays import framework_of, is_array, to_framework
from .language import Tensor, constexpr

_KINDS = {Tensor: "tensor", float: "float", int: "int", constexpr: "constexpr"}


def _config_json(config: Any) -> str:
    if config is None:
        return ""
    return config if isinstance(config, str) else json.dumps(config)


@dataclass
class Emitted:
    """A kernel's code for one target: `source` (C++ for cpu, a Python module for pallas and
    triton), the config it was generated for (completed with defaults), the target's config
    space, the Block IR, and the fast memory the largest launch needs."""

    target: str
    language: str
    source: str
    config: dict
    config_spec: str
    block_ir: str
    footprint_bytes: int

    def __str__(self) -> str:
        return self.source


class Kernel:
    """A kernel: call it on arrays (torch, numpy, jax: CPU, shared without copies); it is traced
    and compiled once per signature (shapes, strides, dtypes, compile-time ints) and cached on
    disk across processes. Outputs come back as arrays of the first array argument's framework.

    Parameters are tensors, floats (runtime scalars), ints (runtime integers) or
    `parhelion.constexpr` (compile-time integers), from their annotations, else from the first
    call's values."""

    def __init__(self, fn: Callable[..., Any], *, config: Any = None, name: str | None = None):
        self.fn = fn
        self.name = name or fn.__name__
        self.signature = inspect.signature(fn)
        self._names = list(self.signature.parameters)
        self._cores: dict[tuple[str, ...], Any] = {}
        self._config = _config_json(config)
        functools.update_wrapper(self, fn)

    def _values(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return list(bound.arguments.values())

    def _kinds(self, values: list[Any]) -> tuple[str, ...]:
        kinds = []
        for p, v in zip(self.signature.parameters.values(), values):
            kind = _KINDS.get(p.annotation)
            if kind is None:
                if is_array(v):
                    kind = "tensor"
                elif isinstance(v, bool):
                    raise _core.UserError(f"{self.name}: parameter '{p.name}' is a bool; pass an int or a float")
                elif isinstance(v, int):
                    kind = "int"
                elif isinstance(v, float):
                    kind = "float"
                else:
                    raise _core.UserError(
                        f"{self.name}: parameter '{p.name}' is a {type(v).__name__}; a kernel takes arrays, "
                        "floats and ints"
                    )
            kinds.append(kind)
        return tuple(kinds)

    def _core_for(self, values: list[Any]) -> Any:
        kinds = self._kinds(values)
        core = self._cores.get(kinds)
        if core is None:
            # The C++ kernel holds its trace function for as long as it lives; through a weak
            # reference to this object, so that no cycle (fn's globals -> this -> the C++ kernel ->
            # fn) outlives the module.
            core = _core.PythonKernel(self.name, list(kinds), functools.partial(_trace, weakref.ref(self)))
            if self._config:
                core.pin_config(self._config)
            self._cores[kinds] = core
        return core

    def _wrap(self, outs: list[Any], values: list[Any]) -> Any:
        fw = framework_of(values)
        res = [to_framework(o, fw) for o in outs]
        if not res:
            return None
        return res[0] if len(res) == 1 else tuple(res)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        values = self._values(args, kwargs)
        return self._wrap(self._core_for(values).run(values, self._names), values)

    def interpret(self, *args: Any, **kwargs: Any) -> Any:
        """The reference interpreter's result (the Tile IR op by op in double precision)."""
        values = self._values(args, kwargs)
        return self._wrap(self._core_for(values).interpret(values, self._names), values)

    def emit(self, *args: Any, target: str = "cpu", tpu: str | None = None, gpu: str | None = None,
             config: Any = None, **kwargs: Any) -> Emitted:
        """The kernel's code for `target` ("cpu", "pallas", "triton") at these arguments' shapes;
        `tpu` names the TPU generation (v5e, v6e, v5p, v7x), `gpu` the GPU (e.g. h100)."""
        values = self._values(args, kwargs)
        full_target = target
        if tpu is not None:
            full_target = f"{target}:{tpu}"
        elif gpu is not None:
            full_target = f"{target}:{gpu}"
        d = self._core_for(values).emit(values, full_target, _config_json(config), self._names)
        d["config"] = json.loads(d["config"])
        return Emitted(**d)

    def ir(self, *args: Any, **kwargs: Any) -> str:
        """The traced Tile IR for these arguments' signature."""
        values = self._values(args, kwargs)
        return self._core_for(values).compile(values, "", self._names)["ir"]

    def tune(self, *args: Any, effort: str = "quick", budget_seconds: float = 0.0, progress: bool = False,
             **kwargs: Any) -> dict:
        """Searches the config space at these arguments' shapes (or returns the cached winner);
        the report as a dict: best_config, best_ms, default_ms, ..."""
        values = self._values(args, kwargs)
        return json.loads(self._core_for(values).tune(values, effort, budget_seconds, progress, self._names))

    def pin_config(self, config: Any) -> None:
        """Every later call uses `config` (a dict or its JSON), validated per signature."""
        self._config = _config_json(config)
        for core in self._cores.values():
            core.pin_config(self._config)

    def unpin_config(self) -> None:
        self._config = ""
        for core in self._cores.values():
            core.unpin_config()


def _trace(ref: "weakref.ref[Kernel]", *args: Any) -> Any:
    k = ref()
    if k is None:
        raise RuntimeError("parhelion: a kernel was traced after its Python object was deleted")
    return k.fn(*args)


def kernel(fn: Callable[..., Any] | None = None, *, config: Any = None, name: str | None = None) -> Any:
    """Decorates a function in the kernel language: `@parhelion.kernel` or
    `@parhelion.kernel(config={...})`."""
    if fn is None:
        return lambda f: Kernel(f, config=config, name=name)
    return Kernel(fn, config=config, name=name)
