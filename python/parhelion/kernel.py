"""`@parhelion.kernel`: a Python function in the kernel language as a callable, compiled kernel;
and what every kernel (the library's too) offers: run, interpret, emit, tune, configs."""

from __future__ import annotations

import functools
import inspect
import json
import os
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


def _target(target: str, tpu: str | None, gpu: str | None) -> str:
    if tpu is not None:
        return f"{target}:{tpu}"
    if gpu is not None:
        return f"{target}:{gpu}"
    return target


def load_config_table(path: str | os.PathLike) -> _core.ConfigTable:
    """A table of tuned configs (`parhelion tune KERNEL --shapes ... -o FILE`, `tune_table`)."""
    return _core.ConfigTable.load(os.fspath(path))


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

    def load(self) -> Callable[..., Any]:
        """The module's entry function, for the Python targets: for pallas a JAX function of jax
        arrays (`interpret=True` runs it on the CPU in TPU interpret mode), for triton a
        function of CUDA torch tensors. The module is imported from its source, as its own."""
        if self.language != "python":
            raise _core.UserError(f"a {self.target} kernel is {self.language} code, not a Python module to load")
        import types

        module = types.ModuleType(f"parhelion_emitted_{self.target.replace(':', '_')}")
        exec(compile(self.source, f"<parhelion {self.target} module>", "exec"), module.__dict__)
        return getattr(module, module.KERNEL)


class KernelAPI:
    """What a kernel offers; subclasses say how a call's values map to a C++ kernel."""

    name: str
    _names: list[str]
    _table: Any = None

    def _values(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        raise NotImplementedError

    def _core_for(self, values: list[Any]) -> Any:
        raise NotImplementedError

    def _cores(self) -> list[Any]:
        raise NotImplementedError

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

    def interpret_on(self, mesh: Any, devices: Any) -> list:
        """A kernel on a device mesh (docs/distributed.md), run by the reference interpreter on
        every device: `mesh` is {"x": 4} (or (name, size) pairs), `devices` one argument tuple
        per device (row-major over the axes); the result is each device's outputs."""
        axes, values = self._mesh_values(mesh, devices)
        outs = self._core_for(values[0]).interpret_on(axes, values, self._names)
        return [self._wrap(o, v) for o, v in zip(outs, values)]

    def run_on(self, mesh: Any, devices: Any, config: Any = None) -> list:
        """As interpret_on, compiled for the cpu backend: every device a thread of this process."""
        axes, values = self._mesh_values(mesh, devices)
        outs = self._core_for(values[0]).run_on(axes, values, _config_json(config), self._names)
        return [self._wrap(o, v) for o, v in zip(outs, values)]

    def _mesh_values(self, mesh: Any, devices: Any) -> tuple[list, list]:
        axes = list(mesh.items()) if isinstance(mesh, dict) else [tuple(a) for a in mesh]
        values = [self._values(tuple(d) if isinstance(d, (tuple, list)) else (d,), {}) for d in devices]
        if not values:
            raise _core.UserError(f"{self.name} on a mesh needs the arguments of every device")
        return axes, values

    def emit(self, *args: Any, target: str = "cpu", tpu: str | None = None, gpu: str | None = None,
             config: Any = None, **kwargs: Any) -> Emitted:
        """The kernel's code for `target` ("cpu", "pallas", "triton") at these arguments' shapes;
        `tpu` names the TPU generation (v5e, v6e, v5p, v7x), `gpu` the GPU (h100, h200, b200).
        Without `config`: a config table's entry for the target, else the target's default."""
        values = self._values(args, kwargs)
        d = self._core_for(values).emit(values, _target(target, tpu, gpu), _config_json(config), self._names)
        d["config"] = json.loads(d["config"])
        return Emitted(**d)

    def emit_on(self, mesh: Any, *args: Any, target: str = "cpu", tpu: str | None = None, config: Any = None,
                **kwargs: Any) -> Emitted:
        """emit() for a kernel on `mesh` ({"x": 4}, or (name, size) pairs) at one device's arguments:
        for pallas, a module whose kernel function takes every tensor stacked over the devices
        and runs under jax.shard_map (docs/distributed.md)."""
        values = self._values(args, kwargs)
        axes = list(mesh.items()) if isinstance(mesh, dict) else [tuple(a) for a in mesh]
        d = self._core_for(values).emit_on(axes, values, _target(target, tpu, None), _config_json(config), self._names)
        d["config"] = json.loads(d["config"])
        return Emitted(**d)

    def ir(self, *args: Any, **kwargs: Any) -> str:
        """The traced Tile IR for these arguments' signature."""
        values = self._values(args, kwargs)
        return self._core_for(values).compile(values, "", self._names)["ir"]

    def tune(self, *args: Any, effort: str = "quick", budget_seconds: float = 0.0, progress: bool = False,
             **kwargs: Any) -> dict:
        """Searches the config space at these arguments' shapes on this machine (or returns the
        cached winner); the report as a dict: best_config, best_ms, default_ms, ..."""
        values = self._values(args, kwargs)
        return json.loads(self._core_for(values).tune(values, effort, budget_seconds, progress, self._names))

    def pin_config(self, config: Any, *args: Any, **kwargs: Any) -> None:
        """Later calls use `config` (a dict, its JSON; keys left out take the default's values):
        every call, or, given arguments, calls with their signature only (shapes, dtypes,
        compile-time ints), which then take precedence."""
        if args or kwargs:
            values = self._values(args, kwargs)
            self._core_for(values).pin_config_for(_config_json(config), values, self._names)
            return
        self._pinned = _config_json(config)
        for core in self._cores():
            core.pin_config(self._pinned)

    def unpin_config(self) -> None:
        self._pinned = ""
        for core in self._cores():
            core.unpin_config()

    def use_configs(self, table: Any) -> None:
        """Takes configs from a table of tuned ones (a ConfigTable or its file): per call, the
        entry for the call's shapes, else the nearest tuned shape whose config is legal, else the
        default. No tuning at call time. None drops it."""
        if isinstance(table, (str, os.PathLike)):
            table = load_config_table(table)
        self._table = table
        for core in self._cores():
            core.use_config_table(table)

    def config_for(self, *args: Any, target: str = "cpu", **kwargs: Any) -> tuple[dict, str]:
        """The config a call on these arguments takes (for `target`) and where it comes from."""
        values = self._values(args, kwargs)
        config, source = self._core_for(values).config_for(values, target, self._names)
        return json.loads(config), source


class Kernel(KernelAPI):
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
        self._by_kinds: dict[tuple[str, ...], Any] = {}
        self._pinned = _config_json(config)
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
        core = self._by_kinds.get(kinds)
        if core is None:
            # The C++ kernel holds its trace function for as long as it lives; through a weak
            # reference to this object, so that no cycle (fn's globals -> this -> the C++ kernel ->
            # fn) outlives the module.
            core = _core.PythonKernel(self.name, list(kinds), functools.partial(_trace, weakref.ref(self)))
            if self._pinned:
                core.pin_config(self._pinned)
            if self._table is not None:
                core.use_config_table(self._table)
            self._by_kinds[kinds] = core
        return core

    def _cores(self) -> list[Any]:
        return list(self._by_kinds.values())


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


def tune_table(kernel: KernelAPI, calls: list[tuple[Any, ...]], *, effort: str = "quick", budget_seconds: float = 0.0,
               target: str = "cpu", tpu: str | None = None) -> _core.ConfigTable:
    """Tunes `kernel` once per call in `calls` (tuples of its arguments, one per shape) and
    returns the table of winners, to save (`table.save(path)`) and ship: `target` "cpu" measures
    on this machine, "pallas" (with `tpu`) ranks configs with the TPU timing model."""
    if not calls:
        raise _core.UserError("tune_table: no calls to tune")
    values = [kernel._values(tuple(c), {}) for c in calls]
    core = kernel._core_for(values[0])
    return _core.tune_table(core, values, effort, budget_seconds, _target(target, tpu, None), kernel._names)


class LoadedKernel(KernelAPI):
    """A kernel from a user's C++ library (parhelion.load_library): arguments by position."""

    def __init__(self, core: Any):
        self.core = core
        self.name = core.name
        self._names = [f"arg{i}" for i in range(core.num_args)]

    def _values(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        if kwargs:
            raise TypeError(f"{self.name}() takes its arguments by position (a C++ kernel has no parameter names)")
        if len(args) != self.core.num_args:
            raise TypeError(f"{self.name}() takes {self.core.num_args} arguments, got {len(args)}")
        return list(args)

    def _core_for(self, values: list[Any]) -> Any:
        return self.core

    def _cores(self) -> list[Any]:
        return [self.core]


class KernelLibrary:
    """The kernels of a user's C++ library, as attributes by their names."""

    def __init__(self, path: str, kernels: list[LoadedKernel]):
        self.path = path
        self.kernels = {k.name: k for k in kernels}

    def __getattr__(self, name: str) -> LoadedKernel:
        if name in self.kernels:
            return self.kernels[name]
        raise AttributeError(f"{self.path} exports no kernel '{name}' (it has: {', '.join(sorted(self.kernels))})")

    def __dir__(self) -> list[str]:
        return sorted(self.kernels)


def load_library(path: str | os.PathLike) -> KernelLibrary:
    """Loads kernels written in C++ and compiled into a shared library that links libparhelion
    (include/parhelion/export.h says how)."""
    path = os.fspath(path)
    return KernelLibrary(path, [LoadedKernel(c) for c in _core.load_library(os.path.abspath(path))])


def include_dir() -> str:
    """The directory of Parhelion's C++ headers (-I for a kernel library of one's own)."""
    here = os.path.dirname(os.path.abspath(__file__))
    shipped = os.path.join(here, "include")
    if os.path.isdir(os.path.join(shipped, "parhelion")):
        return shipped
    # A development tree: BUILD/python/parhelion links to the sources' python/parhelion.
    source = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    return os.path.join(source, "include")


def library_dir() -> str:
    """The directory of libparhelion.so (-L for a kernel library of one's own)."""
    return os.path.dirname(_core.library_path())
