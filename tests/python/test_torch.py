"""The library as PyTorch operators: schemas and fake implementations (torch.library.opcheck),
autograd where a backward kernel exists (torch.autograd.gradcheck), and torch.compile graphs
without graph breaks."""

import pytest
import torch

import parhelion as ph
import parhelion.ops  # noqa: F401  (registers torch.ops.parhelion.*)
from parhelion import _core

from test_library import CASES, as_torch, shape_for


@pytest.mark.parametrize("name,dtype", [c for c in CASES if c[1] in ("f32", "i32") or c[0].startswith("fp8")])
def test_every_library_operator_passes_opcheck(name, dtype):
    shape = shape_for(name, 2)
    args, _ = _core.sample(name, shape, dtype, 3)
    targs = tuple(as_torch(a) for a in args)
    op = getattr(torch.ops.parhelion, name).default
    # opcheck runs the schema, fake tensor, autograd-registration and AOT dispatch checks. The
    # schema and AOT checks compute on the outputs with torch ops that fp8 lacks (mul).
    utils = ("test_faketensor", "test_autograd_registration") if dtype.startswith("f8") else None
    torch.library.opcheck(op, targs, test_utils=utils) if utils else torch.library.opcheck(op, targs)


def test_fake_tensors_get_the_kernels_shapes_and_dtypes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(7, 40, dtype=torch.bfloat16)
        y = torch.empty(7, 13, dtype=torch.bfloat16)
        out = torch.ops.parhelion.concat(x, y)
        mean, var = torch.ops.parhelion.welford(torch.empty(5, 9))
    assert out.shape == (7, 53) and out.dtype == torch.bfloat16
    assert mean.shape == (5,) and var.shape == (5,) and mean.dtype == torch.float32


def _grad_inputs(*shapes):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*s, generator=g, requires_grad=True) for s in shapes]


# gradcheck in f32 (kernels take no f64), with tolerances to match.
pytestmark = pytest.mark.filterwarnings("ignore:Input #.* is not a double precision")


def test_rms_norm_gradients():
    x, w = _grad_inputs((4, 24), (24,))
    assert torch.autograd.gradcheck(lambda a, b: torch.ops.parhelion.rms_norm(a, b, 1e-5), (x, w),
                                    eps=1e-3, atol=2e-2, rtol=2e-2, nondet_tol=1e-5)


def test_layer_norm_gradients():
    x, w, b = _grad_inputs((4, 24), (24,), (24,))
    assert torch.autograd.gradcheck(lambda a, c, d: torch.ops.parhelion.layer_norm(a, c, d, 1e-5), (x, w, b),
                                    eps=1e-3, atol=2e-2, rtol=2e-2, nondet_tol=1e-5)


def test_rotary_gradients():
    (x,) = _grad_inputs((1, 5, 2, 8))
    cos, sin = torch.randn(5, 4), torch.randn(5, 4)
    assert torch.autograd.gradcheck(lambda a: torch.ops.parhelion.rotary(a, cos, sin), (x,),
                                    eps=1e-3, atol=2e-2, rtol=2e-2)


def test_dropout_gradients_reuse_the_forward_mask():
    x = torch.randn(6, 33, requires_grad=True)
    y = torch.ops.parhelion.dropout(x, 0.25, 1234)
    y.backward(torch.ones_like(y))
    keep = y != 0
    torch.testing.assert_close(x.grad, keep.float() / 0.75)


def test_grads_match_eager_pytorch():
    x, w, b = _grad_inputs((8, 64), (64,), (64,))
    ours = torch.ops.parhelion.layer_norm(x, w, b, 1e-5)
    ours.square().sum().backward()
    got = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    torch.nn.functional.layer_norm(x, (64,), w, b, 1e-5).square().sum().backward()
    for g, t in zip(got, (x, w, b)):
        torch.testing.assert_close(g, t.grad, rtol=1e-4, atol=1e-4)


def test_an_operator_without_a_backward_says_so():
    q, k, v = (torch.randn(1, 1, 8, 4, requires_grad=True) for _ in range(3))
    out = torch.ops.parhelion.attention(q, k, v, 0.5)
    with pytest.raises(RuntimeError, match="autograd"):
        out.sum().backward()


def test_torch_compile_takes_the_operators_without_graph_breaks():
    def block(x, w, a, b):
        return torch.ops.parhelion.swiglu(a, b) + torch.ops.parhelion.rms_norm(x, w, 1e-6)

    args = (torch.randn(16, 128), torch.randn(128), torch.randn(16, 128), torch.randn(16, 128))
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(*args), block(*args))
    # A new shape compiles again (sizes specialize) and is still right.
    args2 = (torch.randn(8, 64), torch.randn(64), torch.randn(8, 64), torch.randn(8, 64))
    torch.testing.assert_close(compiled(*args2), block(*args2))


def test_a_python_kernel_registers_as_an_operator():
    @ph.kernel
    def scaled_add(x, y, alpha: float):
        out = ph.empty_like(x)
        for t in ph.tile(x.shape):
            out[t] = x[t] + y[t] * alpha
        return out

    op = ph.ops.register(scaled_add)
    x, y = torch.randn(10, 7), torch.randn(10, 7)
    torch.testing.assert_close(torch.ops.parhelion.scaled_add(x, y, 0.5), x + 0.5 * y)
    torch.library.opcheck(op, (x, y, 0.5))
    compiled = torch.compile(lambda a, b: op(a, b, 2.0).relu(), fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x, y), (x + 2 * y).relu())


def test_the_transformer_block_example_matches_eager_pytorch():
    import os
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python", "transformer_block.py")
    for dtype in ("f32", "bf16"):
        r = subprocess.run([sys.executable, script, "--dtype", dtype, "--seq", "64", "--dim", "128", "--hidden", "256"],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.strip().endswith("ok"), r.stdout
