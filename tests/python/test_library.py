"""Every library kernel, called from Python on torch tensors, against the library's own
reference (kernels/references.cpp) at small, ragged shapes, in each dtype it takes."""

import math

import pytest
import torch

import parhelion as ph
from parhelion import _core

# One small shape per kernel, in the registry's shape language (`parhelion list` shows it):
# sizes that are no multiple of any block.
SHAPES = {
    "matmul": [37, 53, 29], "epilogue_subtiling": [37, 53, 29], "matmul_layernorm": [37, 53, 29],
    "fp8_matmul": [37, 53, 29], "split_k_matmul": [37, 530, 29], "moe_matmul": [37, 13, 29, 5, 2],
    "int4_matmul": [13, 64, 29, 32], "bmm": [3, 13, 29, 37], "broadcast_matmul": [3, 13, 29, 37],
    "grouped_gemm": [37, 13, 29, 5], "segment_sum": [37, 5, 9], "segment_cumsum": [37, 5, 9],
    "attention": [2, 3, 67, 40], "causal_attention": [1, 2, 67, 24], "rotary": [2, 37, 3, 10],
    "rotary_backward": [2, 37, 3, 10],
    "embedding": [37, 100, 24], "concat": [37, 20, 13], "jagged_mean": [5, 24, 9],
    "batch_softmax": [3, 7, 130],
}


def shape_for(name, min_rank):
    if name in SHAPES:
        return SHAPES[name]
    return [7, 1009] if min_rank <= 2 else [3, 7, 130]


CASES = [
    (name, dtype)
    for name in ph.kernels.names()
    for dtype in ph.kernels.get(name).dtypes[:2]  # the first two: f32 and bf16 for most
]


def as_torch(v):
    return torch.from_dlpack(v) if hasattr(v, "__dlpack__") else v


@pytest.mark.parametrize("name,dtype", CASES)
def test_library_kernel_from_python_matches_its_reference(name, dtype):
    k = ph.kernels.get(name)
    shape = shape_for(name, 2)
    args, refs = _core.sample(name, shape, dtype, 7)
    out = k(*[as_torch(a) for a in args])
    outs = list(out) if isinstance(out, tuple) else [out]
    assert all(isinstance(o, torch.Tensor) for o in outs)
    for i, (ok, err) in enumerate(_core.compare(name, shape, dtype, outs, refs)):
        assert ok, f"{name} {dtype} {shape}: output {i} is off by {err}"


def test_keywords_and_defaults():
    q, k, v = (torch.randn(1, 2, 33, 16) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert torch.allclose(ph.kernels.attention(q, k, v), ref, atol=1e-5)
    assert torch.allclose(ph.kernels.attention(q, k=k, v=v, scale=1 / math.sqrt(16)), ref, atol=1e-5)
    x, w = torch.randn(5, 64), torch.randn(64)
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    assert torch.allclose(ph.kernels.rms_norm(x, w, eps=1e-6), want, atol=1e-5)
    with pytest.raises(TypeError, match="has no parameter 'epsilon'"):
        ph.kernels.rms_norm(x, w, epsilon=1e-6)
    with pytest.raises(TypeError, match="missing its argument 'weight'"):
        ph.kernels.rms_norm(x)


def test_every_kernel_is_an_attribute_with_a_docstring():
    for name in ph.kernels.names():
        k = getattr(ph.kernels, name)
        assert name in k.__doc__
    with pytest.raises(AttributeError, match="no kernel 'atention'"):
        ph.kernels.atention


def test_library_kernels_emit_for_every_target():
    x = torch.randn(64, 256, dtype=torch.bfloat16)
    pallas = ph.kernels.softmax.emit(x, target="pallas", tpu="v7x")
    assert pallas.language == "python" and "pallas_call" in pallas.source
    triton = ph.kernels.softmax.emit(x, target="triton", gpu="h100")
    assert "@triton.jit" in triton.source
    cpu = ph.kernels.softmax.emit(x)
    assert cpu.language == "c++"
