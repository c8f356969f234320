"""Kernels written in C++ by a user, compiled into a shared library of theirs against the
package's headers and libparhelion, loaded and called from Python."""

import os
import subprocess
import textwrap

import pytest
import torch

import parhelion as ph

SOURCE = textwrap.dedent("""
    #include <parhelion/parhelion.h>
    #include <parhelion/export.h>

    namespace ph = parhelion;

    ph::Tensor scale_body(ph::Tensor x, ph::Scalar s) {
      auto out = ph::empty_like(x);
      for (auto t : ph::tile(x.sizes())) out[t] = x[t] * s;
      return out;
    }
    ph::Tensor row_sum_body(ph::Tensor x) {
      auto [m, n] = x.sizes<2>();
      auto out = ph::empty({m}, ph::DType::f32);
      for (auto tm : ph::tile(m)) out[tm] = ph::sum(x[tm, ph::all], 1);
      return out;
    }
    ph::Tensor bad_body(ph::Tensor x) {
      auto out = ph::empty_like(x);
      for (auto t : ph::tile(x.sizes())) out[t] = x[t, t];
      return out;
    }
    ph::Kernel scale("scale", scale_body);
    ph::Kernel row_sum("row_sum", row_sum_body);
    ph::Kernel bad("bad", bad_body);
    PARHELION_EXPORT_KERNELS(scale, row_sum, bad)
""")


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    d = tmp_path_factory.mktemp("userlib")
    (d / "mykernels.cpp").write_text(SOURCE)
    so = d / "libmykernels.so"
    cmd = ["g++", "-std=c++23", "-O1", "-shared", "-fPIC", str(d / "mykernels.cpp"), "-o", str(so),
           "-I" + ph.include_dir(), "-L" + ph.library_dir(), "-lparhelion", "-Wl,-rpath," + ph.library_dir()]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return ph.load_library(so)


def test_a_users_cpp_kernels_run_from_python(library):
    x = torch.randn(9, 70)
    torch.testing.assert_close(library.scale(x, 3.0), x * 3)
    torch.testing.assert_close(library.row_sum(x), x.sum(1), rtol=1e-5, atol=1e-5)
    assert sorted(dir(library)) == ["bad", "row_sum", "scale"]
    # Every kernel API: the interpreter, emitting for a TPU, a pinned config.
    torch.testing.assert_close(library.row_sum.interpret(x), x.sum(1), rtol=1e-5, atol=1e-5)
    assert "pallas_call" in library.scale.emit(x, 2.0, target="pallas").source


def test_their_errors_name_their_cpp_line(library):
    with pytest.raises(ph.UserError, match=r"mykernels.cpp:\d+: .*indexed with 2 indices"):
        library.bad(torch.ones(4))
    with pytest.raises(AttributeError, match="exports no kernel 'scal'"):
        library.scal


def test_a_library_without_exports_is_refused(tmp_path):
    (tmp_path / "empty.cpp").write_text("int nothing() { return 0; }\n")
    so = tmp_path / "libempty.so"
    subprocess.run(["g++", "-shared", "-fPIC", str(tmp_path / "empty.cpp"), "-o", str(so)], check=True)
    with pytest.raises(ph.UserError, match="exports no Parhelion kernels: add PARHELION_EXPORT_KERNELS"):
        ph.load_library(so)
    with pytest.raises(ph.UserError, match="cannot load the kernel library"):
        ph.load_library(tmp_path / "missing.so")
