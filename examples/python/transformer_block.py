"""A transformer block (RMSNorm, causal attention, SwiGLU MLP) built from Parhelion kernels as
PyTorch operators inside a torch.nn.Module, checked against the same block in eager PyTorch,
called eagerly and under torch.compile(fullgraph=True).

    python examples/python/transformer_block.py [--dtype bf16] [--compile-backend inductor]
"""

from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F

import parhelion.ops  # noqa: F401  (torch.ops.parhelion.*)

ph = torch.ops.parhelion


class Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int, dtype: torch.dtype, use_parhelion: bool):
        super().__init__()
        g = torch.Generator().manual_seed(0)

        def w(*shape: int) -> torch.nn.Parameter:
            return torch.nn.Parameter((torch.randn(*shape, generator=g) / math.sqrt(shape[0])).to(dtype))

        self.heads, self.use_parhelion = heads, use_parhelion
        self.wq, self.wk, self.wv, self.wo = w(dim, dim), w(dim, dim), w(dim, dim), w(dim, dim)
        self.w1, self.w3, self.w2 = w(dim, hidden), w(dim, hidden), w(hidden, dim)
        self.norm1 = torch.nn.Parameter(torch.ones(dim, dtype=dtype))
        self.norm2 = torch.nn.Parameter(torch.ones(dim, dtype=dtype))

    def copy_from(self, other: "Block") -> "Block":
        self.load_state_dict(other.state_dict())
        return self

    # The three kernels, from Parhelion or from PyTorch.
    def rms_norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if self.use_parhelion:
            return ph.rms_norm(x, w, 1e-6)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)

    def matmul(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return ph.matmul(a, b) if self.use_parhelion else a @ b

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scale = 1.0 / math.sqrt(q.shape[-1])
        if self.use_parhelion:
            return ph.causal_attention(q, k, v, scale)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)

    def swiglu(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return ph.swiglu(a, b) if self.use_parhelion else F.silu(a) * b

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, dim = x.shape
        hd = dim // self.heads
        rows = x.reshape(b * s, dim)
        h = self.rms_norm(rows, self.norm1)

        def heads(t: torch.Tensor) -> torch.Tensor:  # [b*s, dim] -> [b, heads, s, hd]
            return t.reshape(b, s, self.heads, hd).transpose(1, 2).contiguous()

        q, k, v = heads(self.matmul(h, self.wq)), heads(self.matmul(h, self.wk)), heads(self.matmul(h, self.wv))
        a = self.attention(q, k, v).transpose(1, 2).reshape(b * s, dim)
        rows = rows + self.matmul(a, self.wo)
        h = self.rms_norm(rows, self.norm2)
        rows = rows + self.matmul(self.swiglu(self.matmul(h, self.w1), self.matmul(h, self.w3)), self.w2)
        return rows.reshape(b, s, dim)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("--compile-backend", default="aot_eager",
                   help="torch.compile's backend for the compiled run (aot_eager, inductor)")
    args = p.parse_args()
    dtype = torch.float32 if args.dtype == "f32" else torch.bfloat16
    tol = 2e-3 if dtype == torch.float32 else 3e-2

    eager = Block(args.dim, args.heads, args.hidden, dtype, use_parhelion=False)
    ours = Block(args.dim, args.heads, args.hidden, dtype, use_parhelion=True).copy_from(eager)
    x = torch.randn(args.batch, args.seq, args.dim, generator=torch.Generator().manual_seed(1)).to(dtype)

    with torch.no_grad():
        want = eager(x)
        t0 = time.perf_counter()
        got = ours(x)
        t1 = time.perf_counter()
        compiled = torch.compile(ours, fullgraph=True, backend=args.compile_backend)
        got_compiled = compiled(x)
    err = (got.float() - want.float()).abs().max().item()
    err_c = (got_compiled.float() - want.float()).abs().max().item()
    scale = want.float().abs().max().item()
    print(f"transformer block [{args.batch},{args.seq},{args.dim}] {args.dtype}: "
          f"max |parhelion - eager| = {err:.3g} (eager's max |y| {scale:.3g}), "
          f"under torch.compile({args.compile_backend}, fullgraph=True) {err_c:.3g}; first call {t1 - t0:.2f} s")
    assert err <= tol * max(1.0, scale), f"the Parhelion block differs from eager PyTorch by {err}"
    assert err_c <= tol * max(1.0, scale), f"the compiled Parhelion block differs from eager PyTorch by {err_c}"
    print("ok")


if __name__ == "__main__":
    main()
