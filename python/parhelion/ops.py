"""Parhelion kernels as PyTorch operators: `torch.ops.parhelion.<name>`, registered through
`torch.library.custom_op` with a fake (meta) implementation, so that they run inside
`torch.compile` graphs without graph breaks, and with autograd where the library has the
backward kernel.

    import parhelion.ops
    y = torch.ops.parhelion.rms_norm(x, w, 1e-6)     # or parhelion.ops.rms_norm(x, w, 1e-6)
    y.sum().backward()                                # rms_norm_backward computes dx and dw

Every library kernel is registered on import; `register(kernel)` registers a kernel written in
Python (its parameters annotated: unannotated ones are tensors). The fake implementation traces
the kernel on memory-less arrays of the fake tensors' shapes: the output shapes and dtypes are
the kernel's own, for any shape. Symbolic sizes (torch.compile's dynamic shapes) are
specialized to their values: a new shape traces and compiles a new kernel anyway.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch

from . import _core
from . import kernels as _library
from .kernel import Kernel, KernelAPI
from .language import Tensor, constexpr

NAMESPACE = "parhelion"

_DTYPES = {
    "f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "i32": torch.int32,
    "i64": torch.int64, "bool": torch.bool, "i8": torch.int8, "u8": torch.uint8,
    "f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2,
}
_NAMES = {v: k for k, v in _DTYPES.items()}

_registered: dict[str, Any] = {}


def _parameters(kernel: KernelAPI) -> list[tuple[str, str]]:
    """(name, kind) per parameter: "tensor", "float", "int"."""
    if isinstance(kernel, Kernel):
        out = []
        for p in kernel.signature.parameters.values():
            kind = {float: "float", int: "int", constexpr: "int"}.get(p.annotation, "tensor")
            if p.annotation not in (inspect.Parameter.empty, Tensor, float, int, constexpr):
                raise _core.UserError(f"{kernel.name}: parameter '{p.name}' is annotated {p.annotation!r}; a torch "
                                      "operator's parameters are tensors, floats or ints")
            out.append((p.name, kind))
        return out
    core = kernel.core
    return [
        (n, "tensor" if core.arg_is_tensor(i) else "int" if core.arg_is_integer(i) else "float")
        for i, n in enumerate(kernel.params)
    ]


def _fake(kernel: KernelAPI, kinds: list[str]) -> Callable[..., Any]:
    def fake(*args: Any) -> Any:
        specs = []
        device = None
        for a, kind in zip(args, kinds):
            if kind == "tensor":
                device = device or a.device
                specs.append(([int(s) for s in a.shape], _NAMES[a.dtype]))
            else:
                specs.append(float(a))
        core = kernel._core_for(list(args))
        outs = [torch.empty(shape, dtype=_DTYPES[dtype], device=device) for shape, dtype in core.output_specs(specs)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    return fake


def register(kernel: KernelAPI, name: str | None = None, *, outputs: int | None = None) -> Any:
    """Registers `kernel` as the torch operator `torch.ops.parhelion.<name>` (CPU tensors) and
    returns it. `outputs`: how many tensors a Python kernel returns (default 1); the library's
    kernels know theirs."""
    name = name or kernel.name
    if name in _registered:
        return _registered[name]
    params = _parameters(kernel)
    kinds = [k for _, k in params]
    n_out = outputs if outputs is not None else (kernel.core.num_outputs if not isinstance(kernel, Kernel) else 1)
    if n_out < 1:
        raise _core.UserError(f"{name}: a torch operator returns tensors; this kernel returns none (it writes its "
                              "arguments in place)")
    annotation = {"tensor": torch.Tensor, "float": float, "int": int}

    def impl(*args: Any) -> Any:
        # torch hands operators any strides, broadcast (stride-0) views included, which kernels
        # refuse: those are copied. The outputs are fresh arrays that torch owns through DLPack.
        args = tuple(
            a.contiguous() if isinstance(a, torch.Tensor) and 0 in a.stride() and a.numel() > 1 else a for a in args
        )
        return kernel(*args)

    impl.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation[k]) for n, k in params],
        return_annotation=torch.Tensor if n_out == 1 else tuple[(torch.Tensor,) * n_out],
    )
    impl.__name__ = name
    op = torch.library.custom_op(f"{NAMESPACE}::{name}", impl, mutates_args=(), device_types="cpu")
    op.register_fake(_fake(kernel, kinds))
    _registered[name] = op
    return op


# --- autograd for the library's kernels with a backward kernel ---------------------------------


def _ctx_save(ctx: Any, inputs: tuple[Any, ...], output: Any, keep: tuple[int, ...], scalars: tuple[int, ...]) -> None:
    ctx.save_for_backward(*(inputs[i] for i in keep))
    ctx.scalars = tuple(inputs[i] for i in scalars)


def _register_autograd() -> None:
    ops = torch.ops.parhelion

    def rms_norm_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, w = ctx.saved_tensors
        (eps,) = ctx.scalars
        dx, dw = ops.rms_norm_backward(grad.contiguous(), x, w, eps)
        return dx, dw.to(w.dtype), None

    torch.library.register_autograd(
        "parhelion::rms_norm", rms_norm_backward,
        setup_context=lambda ctx, inputs, output: _ctx_save(ctx, inputs, output, (0, 1), (2,)))

    def layer_norm_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, w = ctx.saved_tensors
        (eps,) = ctx.scalars
        mean, var = ops.welford(x)
        rstd = torch.rsqrt(var + eps)
        dx, dw, db = ops.layer_norm_backward(grad.contiguous(), x, mean, rstd, w)
        return dx, dw.to(w.dtype), db.to(w.dtype), None

    torch.library.register_autograd(
        "parhelion::layer_norm", layer_norm_backward,
        setup_context=lambda ctx, inputs, output: _ctx_save(ctx, inputs, output, (0, 1), (3,)))

    def rotary_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        cos, sin = ctx.saved_tensors
        return ops.rotary_backward(grad.contiguous(), cos, sin), None, None

    torch.library.register_autograd(
        "parhelion::rotary", rotary_backward,
        setup_context=lambda ctx, inputs, output: _ctx_save(ctx, inputs, output, (1, 2), ()))

    def dropout_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        p, seed = ctx.scalars
        return ops.dropout_backward(grad.contiguous(), p, seed), None, None

    torch.library.register_autograd(
        "parhelion::dropout", dropout_backward,
        setup_context=lambda ctx, inputs, output: _ctx_save(ctx, inputs, output, (), (1, 2)))


for _name in _library.names():
    register(_library.get(_name))
_register_autograd()


def __getattr__(name: str) -> Any:
    if name in _registered:
        return _registered[name]
    raise AttributeError(f"parhelion.ops has no operator '{name}' (the library's kernels, and those register()ed)")
