"""Kernels written in Python: the language traced into the same Tile IR as C++ kernels, checked
against torch and against the reference interpreter, with errors at the user's Python line."""

import inspect

import numpy as np
import pytest
import torch

import parhelion as ph


def line_of(fn, text):
    """The file line of the first line of `fn`'s source that contains `text`."""
    lines, start = inspect.getsourcelines(fn)
    for i, l in enumerate(lines):
        if text in l:
            return start + i
    raise AssertionError(f"{text!r} not in {fn.__name__}")


@ph.kernel
def matmul(x, y):
    m, k = x.shape
    _, n = y.shape
    out = ph.empty([m, n], x.dtype)
    for tm, tn in ph.tile(m, n):
        acc = ph.Var(ph.zeros([tm, tn]))
        for tk in ph.tile(k):
            acc += x[tm, tk] @ y[tk, tn]
        out[tm, tn] = acc
    return out


@ph.kernel
def softmax(x):
    m, n = x.shape
    out = ph.empty_like(x)
    for tm in ph.tile(m):
        row = x[tm, :].to("f32")
        e = ph.exp(row - ph.amax(row, 1, keepdim=True))
        out[tm, :] = e / ph.sum(e, 1, keepdim=True)
    return out


@ph.kernel
def rms_norm(x, w, eps: float):
    m, n = x.shape
    out = ph.empty_like(x)
    for tm in ph.tile(m):
        row = x[tm, :].to("f32")
        inv = ph.rsqrt(ph.mean(row * row, 1, keepdim=True) + eps)
        out[tm, :] = row * inv * w[:].to("f32")
    return out


@ph.kernel
def first_rows(x, n: ph.constexpr):
    out = ph.empty([n, x.shape[1]], x.dtype)
    for t in ph.tile(out.shape):
        out[t] = x[t]
    return out


@ph.kernel
def gather_rows(ids, table):
    (n,) = ids.shape
    _, e = table.shape
    out = ph.empty([n, e], table.dtype)
    for tn, te in ph.tile(n, e):
        out[tn, te] = table[ids[tn].to("i64"), te]
    return out


@ph.kernel
def clipped_scan(x, limit: int):
    (n,) = x.shape
    out = ph.empty_like(x)
    for t in ph.grid(1):
        for tn in ph.tile(ph.range(0, n).block(n)):
            s = ph.associative_scan(x[tn], 0, lambda a, b: ph.minimum(a + b, limit))
            out[tn] = s
    return out


@ph.kernel
def histogram(ids, bins: ph.constexpr):
    (n,) = ids.shape
    out = ph.zeros([bins], "i32")
    for t in ph.tile(n):
        ph.atomic_add(out, ids[t].to("i64"), 1)
    return out


@ph.kernel
def positive_part(x):
    out = ph.zeros_like(x)
    for t in ph.tile(x.shape):
        v = x[t]
        ph.store(out, t, v, v > 0)
    return out


def test_matmul_with_a_var():
    a, b = torch.randn(70, 50), torch.randn(50, 30)
    torch.testing.assert_close(matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)
    ab, bb = a.bfloat16(), b.bfloat16()
    out = matmul(ab, bb)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), (ab.float() @ bb.float()), rtol=2e-2, atol=2e-2)


def test_rowwise_kernels_match_torch():
    x = torch.randn(37, 1009)
    torch.testing.assert_close(softmax(x), torch.softmax(x, -1))
    w = torch.randn(1009)
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(rms_norm(x, w, 1e-6), want, rtol=1e-5, atol=1e-5)


def test_the_interpreter_agrees_with_the_compiled_kernel():
    x = torch.randn(9, 130)
    torch.testing.assert_close(softmax.interpret(x), softmax(x))
    a, b = torch.randn(13, 29), torch.randn(29, 7)
    torch.testing.assert_close(matmul.interpret(a, b), matmul(a, b), rtol=1e-5, atol=1e-5)


def test_constexpr_ints_and_runtime_ints():
    x = torch.randn(10, 6)
    assert torch.equal(first_rows(x, 3), x[:3])
    assert torch.equal(first_rows(x, 7), x[:7])
    v = torch.tensor([3.0, 4.0, 1.0, 5.0])
    assert torch.equal(clipped_scan(v, 9), torch.tensor([3.0, 7.0, 8.0, 9.0]))


def test_gathers_atomics_and_masked_stores():
    ids = torch.tensor([4, 0, 4, 2], dtype=torch.int32)
    table = torch.randn(5, 33)
    assert torch.equal(gather_rows(ids, table), table[ids.long()])
    hist = histogram(torch.tensor([1, 1, 3, 0, 1], dtype=torch.int32), 4)
    assert torch.equal(hist, torch.tensor([1, 3, 0, 1], dtype=torch.int32))
    x = torch.randn(50)
    assert torch.equal(positive_part(x), torch.clamp(x, min=0))


def test_when_runs_a_region():
    @ph.kernel
    def first_half(x):
        (n,) = x.shape
        out = ph.zeros_like(x)
        for t in ph.grid(n):

            @ph.when(t.begin < n // 2)
            def _():
                out[t] = x[t]

        return out

    @ph.kernel
    def sign(x):
        (n,) = x.shape
        out = ph.empty_like(x)
        for t in ph.grid(n):
            v = x[t]

            def pos():
                out[t] = 1.0

            def neg():
                out[t] = -1.0

            ph.when(v >= 0, pos, neg)
        return out

    x = torch.randn(65)
    got = first_half(x)
    assert torch.equal(got[:32], x[:32]) and not got[32:].any()
    assert torch.equal(sign(x), torch.where(x >= 0, 1.0, -1.0))


def test_every_backend_emits_a_python_kernel():
    x = torch.randn(64, 256, dtype=torch.bfloat16)
    pallas = softmax.emit(x, target="pallas", tpu="v7x")
    assert pallas.language == "python" and "pallas_call" in pallas.source
    assert pallas.config["block_sizes"]
    triton = softmax.emit(x, target="triton", gpu="h100")
    assert "@triton.jit" in triton.source
    assert "Tile" not in softmax.ir(x) and "exp" in softmax.ir(x)


def test_an_emitted_pallas_module_loads_as_a_jax_function():
    import jax.numpy as jnp

    x = torch.randn(16, 256)
    fn = softmax.emit(x, target="pallas", tpu="v7x").load()
    got = fn(jnp.asarray(x.numpy()), interpret=True)
    got = got[0] if isinstance(got, (tuple, list)) else got
    np.testing.assert_allclose(np.asarray(got), torch.softmax(x, -1).numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ph.UserError, match="not a Python module"):
        softmax.emit(x).load()


def test_pinned_configs_apply_and_bad_ones_are_refused():
    a, b = torch.randn(40, 20), torch.randn(20, 24)
    k = ph.kernel(matmul.fn, name="matmul_pinned")
    k.pin_config({"block_sizes": [8, 8, 4]})
    torch.testing.assert_close(k(a, b), a @ b, rtol=1e-5, atol=1e-5)
    k.pin_config({"block_sizes": [7, 8, 4]})
    with pytest.raises(ph.UserError, match="block"):
        k(a, b)


# --- errors name the user's Python line -------------------------------------------------------


def test_an_indexing_error_names_the_line():
    @ph.kernel
    def bad(x, y):
        out = ph.empty_like(x)
        for t in ph.tile(out.shape):
            out[t] = x[t] + y[t, 0]
        return out

    with pytest.raises(ph.UserError) as e:
        bad(torch.ones(10, 4), torch.ones(10, 4))
    assert f"{__file__}:{line_of(bad.fn, 'y[t, 0]')}:" in str(e.value)
    assert "indexed with 3 indices" in str(e.value)


def test_a_shape_mismatch_names_the_line():
    @ph.kernel
    def bad(x, y):
        out = ph.empty_like(x)
        for tm, tn in ph.tile(x.shape):
            out[tm, tn] = x[tm, tn] + y[tn, tm]
        return out

    with pytest.raises(ph.UserError) as e:
        bad(torch.ones(6, 4), torch.ones(4, 6))
    assert f":{line_of(bad.fn, 'y[tn, tm]')}:" in str(e.value)


def test_rebinding_loop_state_is_refused_at_the_loop():
    @ph.kernel
    def bad(x, y):
        m, k = x.shape
        _, n = y.shape
        out = ph.empty([m, n])
        for tm, tn in ph.tile(m, n):
            acc = ph.zeros([tm, tn])
            for tk in ph.tile(k):
                acc = acc + x[tm, tk] @ y[tk, tn]
            out[tm, tn] = acc
        return out

    with pytest.raises(ph.UserError, match=r"'acc' held a block before this loop .* parhelion.Var") as e:
        bad(torch.ones(4, 4), torch.ones(4, 4))
    assert f":{line_of(bad.fn, 'for tk in')}:" in str(e.value)

    @ph.kernel
    def bad_var(x, y):
        m, k = x.shape
        _, n = y.shape
        out = ph.empty([m, n])
        for tm, tn in ph.tile(m, n):
            acc = ph.Var(ph.zeros([tm, tn]))
            for tk in ph.tile(k):
                acc = acc + x[tm, tk] @ y[tk, tn]
            out[tm, tn] = acc
        return out

    with pytest.raises(ph.UserError, match=r"'acc' was a parhelion.Var .* `acc \+= \.\.\.`"):
        bad_var(torch.ones(4, 4), torch.ones(4, 4))


def test_python_truth_of_a_traced_value_is_refused():
    @ph.kernel
    def bad(x):
        out = ph.empty_like(x)
        for t in ph.tile(x.shape):
            v = x[t]
            if v > 0:
                out[t] = v
        return out

    with pytest.raises(ph.UserError, match="no Python truth value.*parhelion.where") as e:
        bad(torch.ones(8))
    assert f":{line_of(bad.fn, 'if v > 0')}:" in str(e.value)


def test_a_whole_tensor_as_a_value_is_refused():
    @ph.kernel
    def bad(x):
        y = ph.exp(x)
        return y

    with pytest.raises(ph.UserError, match=r"whole tensor \(arg0\) used as a value; index it with tiles") as e:
        bad(torch.ones(8))
    assert f":{line_of(bad.fn, 'ph.exp(x)')}:" in str(e.value)


def test_bad_operands_and_returns():
    @ph.kernel
    def bad_operand(x):
        out = ph.empty_like(x)
        for t in ph.tile(x.shape):
            out[t] = x[t] + "one"
        return out

    with pytest.raises(ph.UserError, match="expected a block.*got a str"):
        bad_operand(torch.ones(8))

    @ph.kernel
    def bad_return(x):
        return 3

    with pytest.raises(ph.UserError, match="returns a tensor it allocated"):
        bad_return(torch.ones(8))


def test_kernels_run_on_numpy_and_keep_their_cache():
    x = np.random.default_rng(0).standard_normal((5, 300)).astype(np.float32)
    got = softmax(x)
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, torch.softmax(torch.from_numpy(x), -1).numpy(), rtol=1e-5, atol=1e-6)


@ph.kernel
def ring_all_gather(x):
    n = ph.mesh_size("x")
    m, k = x.shape
    out = ph.empty([n * m, k], x.dtype)
    for g in ph.grid(1):
        me = ph.device_index("x")
        out[ph.slice(me * m, m), :] = x[:, :]
        for step in ph.grid(n - 1):
            rows = ph.slice(ph.remainder(me - step.begin, n) * m, m)
            send = ph.remote_copy(out, (rows, slice(None)), out[rows, :], ph.ring_next("x"))
            send.start()
            send.wait()
            ph.barrier("x")  # one copy in flight towards a device at a time
    return out


@ph.kernel
def read_before_landing(x):
    buf = ph.zeros(list(x.shape))
    out = ph.empty_like(x)
    for g in ph.grid(1):
        send = ph.remote_copy(buf, (slice(None), slice(None)), x[:, :], ph.ring_next("x"))
        send.start()
        out[:, :] = buf[:, :]
        send.wait()
    return out


def test_collectives_on_a_mesh_in_the_interpreter_and_on_the_cpu():
    """A ring all-gather written in Python, on 4 simulated devices: the interpreter and the cpu
    backend (devices as threads) against numpy; a read of a landing region that a copy is not
    ordered after is a race, reported at the user's lines (docs/distributed.md)."""
    shards = [np.random.RandomState(d).randn(3, 5).astype(np.float32) for d in range(4)]
    want = np.concatenate(shards)
    for outs in (ring_all_gather.interpret_on({"x": 4}, [(s,) for s in shards]),
                 ring_all_gather.run_on({"x": 4}, [(s,) for s in shards])):
        assert len(outs) == 4
        for o in outs:
            np.testing.assert_array_equal(np.asarray(o), want)
    with pytest.raises(ph.UserError) as e:
        read_before_landing.interpret_on([("x", 2)], [(s,) for s in shards[:2]])
    # (device 0 read its buffer; device 1's copy then lands there unordered: both lines named)
    msg = str(e.value)
    assert f"test_language.py:{line_of(read_before_landing, 'send.start()')}: race: device 1" in msg
    assert f"test_language.py:{line_of(read_before_landing, 'out[:, :] = buf')})" in msg
    assert "with nothing ordering that access before this copy" in msg


def test_a_kernel_on_a_mesh_emits_a_pallas_module_under_shard_map():
    """emit_on: the ring all-gather as a Pallas module for 4 TPU devices (remote DMAs under
    jax.shard_map; tests/test_pallas_collectives.cpp runs such modules in interpret mode)."""
    x = np.zeros((8, 128), np.float32)
    m = ring_all_gather.emit_on({"x": 4}, x, target="pallas", tpu="v7x")
    assert "pltpu.make_async_remote_copy(" in m.source
    assert "jax.shard_map(" in m.source
    assert 'MESH = (("x",), (4,))' in m.source
    compile(m.source, "ring_all_gather.py", "exec")  # (valid Python)
