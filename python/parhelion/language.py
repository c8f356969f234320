"""The kernel language in Python: the operations of include/parhelion/lang.h, traced into the
same Tile IR (python/src/language.cpp binds them at the user's Python line).

    @parhelion.kernel
    def add(x, y):
        out = parhelion.empty_like(x)
        for t in parhelion.tile(out.shape):
            out[t] = x[t] + y[t]
        return out

Loop-carried state is a `Var`: declare it in a tile loop, update it in a nested loop with
`acc += ...` or `acc.assign(...)`. Rebinding a name (`acc = acc + ...`) inside a nested loop
would keep the value of the first trip only, so it is refused at the loop's line.
"""

from __future__ import annotations

import sys
from typing import Any, Iterator

from . import _core
from ._core import (  # noqa: F401  (the language's names, re-exported)
    Extent,
    Int,
    Peer,
    RemoteCopy,
    Scalar,
    Semaphore,
    Tensor,
    Tile,
    UserError,
    Var,
    abs,
    amax,
    amin,
    arange,
    associative_scan,
    atomic_add,
    atomic_max,
    atomic_min,
    barrier,
    cast,
    cat,
    ceil,
    clamp,
    cumprod,
    cumsum,
    device_index,
    dot,
    empty,
    empty_like,
    erf,
    exp,
    exp2,
    expand,
    expect,
    floor,
    floordiv,
    full,
    gelu,
    jagged,
    join,
    load,
    log,
    maximum,
    mean,
    mesh_size,
    minimum,
    num_blocks,
    peer,
    permute,
    pow,
    rand,
    randn,
    range,
    register_block_size,
    remainder,
    remote_copy,
    reshape,
    ring_next,
    ring_prev,
    round,
    rsqrt,
    semaphore,
    sigmoid,
    signal,
    silu,
    slice,
    split,
    sqrt,
    squeeze,
    stack,
    store,
    sum,
    tanh,
    transpose,
    trunc,
    unsqueeze,
    wait,
    where,
    zeros,
    zeros_like,
)

matmul = dot


class constexpr:
    """Annotates a kernel parameter as a compile-time integer: the kernel is traced once per
    value, which host code may use for shapes and loop ranges (`def f(x, n: parhelion.constexpr)`)."""


def _state(frame: Any) -> dict[str, Any]:
    """The frame's names bound to Vars and blocks, with the objects they are bound to."""
    return {k: v for k, v in frame.f_locals.items() if isinstance(v, Var) or (isinstance(v, Tensor) and v.is_block)}


def _loop(dims: tuple[Any, ...], grid: bool) -> Iterator[Any]:
    shape_form = len(dims) == 1 and isinstance(dims[0], (list, tuple))
    extents = tuple(dims[0]) if shape_form else dims
    frame = sys._getframe(1)  # the user's frame: its `for` runs this generator
    before = _state(frame)
    tiles = _core._open_loop(list(extents), grid)
    yield tuple(tiles) if shape_form or len(tiles) > 1 else tiles[0]
    _core._close_loop()
    after = frame.f_locals
    for name, old in before.items():
        new = after.get(name)
        if new is old:
            continue
        line = frame.f_lineno
        where_ = f"{frame.f_code.co_filename}:{line}"
        if isinstance(old, Var):
            raise UserError(
                f"{where_}: '{name}' was a parhelion.Var before this loop and was rebound inside it: "
                f"update it with `{name} += ...` or `{name}.assign(...)` (a rebinding keeps the first "
                "trip's value only)"
            )
        if isinstance(new, Tensor):
            raise UserError(
                f"{where_}: '{name}' held a block before this loop and was rebound to another inside it: "
                f"state carried across the trips of a loop is a parhelion.Var "
                f"(`{name} = parhelion.Var(...)` before the loop, `{name} += ...` inside it)"
            )


def when(cond: Any, then: Any = None, otherwise: Any = None) -> Any:
    """Runs `then` only where the bool scalar `cond` is true (and `otherwise` where it is false);
    each is traced once, as a region. Values they compute do not escape them (store, or assign a
    Var). As a decorator, the function runs at once:

        @parhelion.when(t.begin + 8 <= n)
        def _():
            out[t] = x[t]
    """
    if then is None:
        return lambda fn: _core.when(cond, fn, otherwise)
    return _core.when(cond, then, otherwise)


def tile(*dims: Any) -> Iterator[Any]:
    """A tile loop: `for t in tile(n)`, `for tm, tn in tile(m, n)`, `for t in tile(x.shape)`
    (a tuple of tiles), `tile(range(b, e))`, `tile(outer)` (over an enclosing tile's block),
    `tile(range(0, n).block(64))` (a fixed block). At the top level of a kernel a tile loop is
    one launch over a grid; nested, a device loop."""
    return _loop(dims, grid=False)


def grid(*dims: Any) -> Iterator[Any]:
    """A loop over single indices: each trip's tile is one element (an index, or `.begin`)."""
    return _loop(dims, grid=True)

__all__ = [n for n in dir() if not n.startswith("_") and n not in ("sys", "Any", "Iterator", "annotations")]
