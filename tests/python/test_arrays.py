"""Arrays in and out of kernels without copies (DLPack), and the errors for arrays kernels cannot take."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import parhelion as ph
from parhelion import _core


@ph.kernel
def scale(x, s: float):
    out = ph.empty_like(x)
    for t in ph.tile(out.shape):
        out[t] = x[t] * s
    return out


@ph.kernel
def add_inplace(x, y):
    for t in ph.tile(x.shape):
        x[t] = x[t] + y[t]


def test_inputs_are_not_copied():
    x = torch.arange(12, dtype=torch.float32)
    back = torch.from_dlpack(_core._roundtrip(x))
    assert back.data_ptr() == x.data_ptr()
    n = np.arange(6, dtype=np.int32)
    assert np.from_dlpack(_core._roundtrip(n)).ctypes.data == n.ctypes.data


def test_in_place_kernels_write_the_callers_memory():
    x = torch.ones(5, 7)
    add_inplace(x, torch.full((5, 7), 2.0))
    assert torch.equal(x, torch.full((5, 7), 3.0))


def test_outputs_come_back_in_the_callers_framework():
    x = np.linspace(-1, 1, 35, dtype=np.float32).reshape(5, 7)
    assert isinstance(scale(torch.from_numpy(x), 2.0), torch.Tensor)
    assert isinstance(scale(x, 2.0), np.ndarray)
    j = scale(jnp.asarray(x), 2.0)
    assert type(j).__module__.startswith("jax")
    np.testing.assert_allclose(np.asarray(j), x * 2)


def test_strided_inputs_keep_their_strides():
    base = torch.randn(9, 16)
    for x in (base.t(), base[::2], base[:, 3:11], base.t()[1:5]):
        assert torch.equal(scale(x, 3.0), x * 3.0), x.stride()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.int8, torch.uint8])
def test_dtypes_cross_as_themselves(dtype):
    x = (torch.arange(24) % 7).to(dtype).reshape(4, 6)
    y = scale(x, 1.0)
    assert y.dtype == dtype
    assert torch.equal(y, x)


def test_float8_crosses_as_itself():
    x = torch.tensor([0.5, -2.0, 448.0, 1.25], dtype=torch.float8_e4m3fn)
    y = scale(x, 1.0)
    assert y.dtype == torch.float8_e4m3fn
    assert torch.equal(y.float(), x.float())


def test_a_dtype_kernels_do_not_take_is_refused_by_name():
    with pytest.raises(ph.UserError, match=r"argument 'x' has dtype float64.*convert it first"):
        scale(torch.zeros(3, dtype=torch.float64), 1.0)
    with pytest.raises(ph.UserError, match=r"argument 'x' has dtype complex64"):
        scale(torch.zeros(3, dtype=torch.complex64), 1.0)


def test_a_non_array_is_refused():
    with pytest.raises(ph.UserError, match=r"parameter 'x' is a list"):
        scale([1.0, 2.0], 1.0)


def test_shapes_must_match_the_kernels_checks():
    with pytest.raises(ph.UserError):
        add_inplace(torch.ones(3, 4), torch.ones(4, 3))


def test_read_only_arrays_are_read():
    x = np.ones((3, 3), dtype=np.float32)
    x.setflags(write=False)
    np.testing.assert_array_equal(scale(x, 2.0), np.full((3, 3), 2.0, dtype=np.float32))


def test_a_read_only_array_the_kernel_stores_to_is_refused():
    x = np.ones((3, 3), dtype=np.float32)
    x.setflags(write=False)
    with pytest.raises(ph.UserError, match=r"argument 'x' is read-only .* add_inplace stores to it"):
        add_inplace(x, np.ones((3, 3), dtype=np.float32))
    with pytest.raises(ph.UserError, match=r"read-only"):
        add_inplace(jnp.ones((3, 3)), np.ones((3, 3), dtype=np.float32))
    add_inplace(np.ones((3, 3), dtype=np.float32), x)  # read-only and only read: fine
