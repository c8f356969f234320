"""Runs Parhelion's Triton modules on an NVIDIA GPU beside PyTorch, and writes a Markdown table.

    python scripts/gpu_check.py emit DIR [--gpu h200] [--small]     (here: needs build/parhelion)
    python scripts/gpu_check.py run DIR [--out DIR/gpu-check.md] [--budget 420] [--reps 20]

`emit` writes one module per case of bench/suite.json that the triton backend supports
(`parhelion emit --target triton`), the refused ones' reasons, candidate modules of a short
autotuning of attention and matmul, and manifest.json. `run` needs only torch (with CUDA) and
triton, not Parhelion: each case runs on seeded inputs, is checked against torch
eager (bench/torch_server.py's baselines), and is timed with CUDA events (median of --reps after
warm-up) beside torch eager, torch.compile and the vendor library where there is one (SDPA for
attention; cuBLAS is torch's matmul, so the matmul family's eager column is cuBLAS). Needs torch
with CUDA and triton; nothing else from Parhelion.

--interpret runs the same path on the CPU in Triton's interpreter (small shapes, no timing
worth reading): what `make test` checks of this script.
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["emit", "run"])
    ap.add_argument("dir")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--small", action="store_true", help="emit: small shapes (for the interpreter)")
    ap.add_argument("--parhelion", default=os.path.join(HERE, "..", "build", "parhelion"))
    ap.add_argument("--out")
    ap.add_argument("--budget", type=float, default=420, help="seconds; past it, torch.compile baselines are skipped")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--interpret", action="store_true", help="run: CPU, Triton's interpreter (for the tests)")
    return ap.parse_args()


ARGS = parse()

# Small shapes of the suite's kernels (emit --small): ragged, and quick in the interpreter.
SMALL = {"attention": [1, 2, 100, 64], "causal_attention": [1, 2, 100, 64], "softmax": [37, 300],
         "batch_softmax": [3, 37, 300], "softmax_two_pass": [37, 777], "bmm": [2, 64, 128, 128],
         "rms_norm_backward": [24, 256], "epilogue_subtiling": [64, 256, 128], "matmul_layernorm": [64, 256, 128],
         "welford": [37, 300], "swiglu": [37, 300], "matmul": [100, 300, 70], "geglu": [37, 300],
         "cross_entropy": [16, 384], "broadcast_matmul": [2, 64, 128, 128], "layer_norm": [37, 300],
         "rms_norm": [37, 300], "cross_entropy_ignore_index": [16, 384], "fp8_matmul": [48, 256, 128]}


def emit():
    """Modules for the suite's cases (or SMALL shapes), the refusals, tuning candidates, manifest."""
    import subprocess
    os.makedirs(ARGS.dir, exist_ok=True)
    suite = json.load(open(os.path.join(HERE, "..", "bench", "suite.json")))
    manifest = {"gpu": ARGS.gpu, "cases": [], "refused": [], "tuning": {}}

    def one(kernel, shape, dtype, config=None, name=None):
        path = os.path.join(ARGS.dir, (name or f"{kernel}_{dtype}") + ".py")
        cmd = [ARGS.parhelion, "emit", kernel, "--target", "triton", "--gpu", ARGS.gpu,
               "--shape", ",".join(map(str, shape)), "--dtype", dtype, "-o", path]
        if config:
            cmd += ["--config", config]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
        return {"kernel": kernel, "shape": shape, "dtype": dtype, "module": path}, None

    for c in suite["cases"]:
        if ARGS.small and c["kernel"] not in SMALL:
            continue
        shape = SMALL[c["kernel"]] if ARGS.small else c["shape"]
        dtypes = [d for d in c["dtypes"] if not (ARGS.small and d == "bf16")] or c["dtypes"][:1]
        for dtype in dtypes:
            case, why = one(c["kernel"], shape, dtype)
            if case:
                manifest["cases"].append(case)
            else:
                manifest["refused"].append(f"{c['kernel']} {dtype}: {why}")
    # A short autotuning: a few blocks, warps and stages per kernel, timed on the GPU.
    candidates = {"attention": ([[64, 32], [64, 64], [128, 32], [128, 64]], [4, 8], [2, 3]),
                  "matmul": ([[128, 128, 32], [128, 64, 32], [64, 128, 32], [128, 128, 64]], [4, 8], [3, 4])}
    if ARGS.small:  # (one candidate each, blocks that fit the small shapes in f32)
        candidates = {"attention": ([[32, 32]], [4], [2]), "matmul": ([[64, 32, 32]], [4], [3])}
    for kernel, (blocks, warps, stages) in candidates.items():
        shape = SMALL[kernel] if ARGS.small else next(c["shape"] for c in suite["cases"] if c["kernel"] == kernel)
        dtype = "f32" if ARGS.small else "bf16"
        spec = subprocess.run([ARGS.parhelion, "emit", kernel, "--target", "triton", "--gpu", ARGS.gpu, "--shape",
                               ",".join(map(str, shape)), "--dtype", dtype, "--stage", "spec"],
                              capture_output=True, text=True, check=True).stdout
        default = json.loads(spec.split("default: ", 1)[1].strip())
        cands = []
        for b in blocks:
            for w in warps:
                for st in stages:
                    cfg = dict(default, block_sizes=b, num_warps=w)
                    cfg["inner_loops"] = [dict(l, buffers=st) for l in default.get("inner_loops", [])]
                    case, why = one(kernel, shape, dtype, json.dumps(cfg), f"tune_{kernel}_{len(cands)}")
                    if case:
                        cands.append(case)
                    else:  # (a candidate that does not fit this GPU is left out, with the reason)
                        manifest["refused"].append(f"{kernel} candidate {json.dumps(cfg)}: {why}")
        manifest["tuning"][f"{kernel} {shape} {dtype}"] = cands
    json.dump(manifest, open(os.path.join(ARGS.dir, "manifest.json"), "w"), indent=1)
    print(f"gpu-check: {len(manifest['cases'])} cases, {len(manifest['refused'])} refused, "
          f"{sum(len(c) for c in manifest['tuning'].values())} tuning candidates in {ARGS.dir}")


if ARGS.command == "emit":
    emit()
    sys.exit(0)

if ARGS.interpret:
    os.environ["TRITON_INTERPRET"] = "1"
import torch  # noqa: E402  (after TRITON_INTERPRET)

sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import torch_server  # noqa: E402  (the benchmark's torch baselines)

DEVICE = "cpu" if ARGS.interpret else "cuda"
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "i64": torch.int64, "i32": torch.int32,
          "f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2}
# Tolerance on max |out - eager| / max |eager|, by the inputs' dtype.
TOLERANCE = {"f32": 2e-3, "f16": 1e-2, "bf16": 3e-2, "f8e4m3": 6e-2, "f8e5m2": 1e-1}


def scalars_of(kernel, shape):
    """The scalar arguments of each library kernel with some (kernels/registry.cpp's values)."""
    if kernel in ("attention", "causal_attention"):
        return [shape[-1] ** -0.5]
    if kernel in ("layer_norm", "layer_norm_looped", "rms_norm", "rms_norm_backward"):
        return [1e-5]
    if kernel == "cross_entropy_ignore_index":
        return [-100]
    if kernel == "fp8_matmul":
        return [1.0, 1.0]
    return []


def make_inputs(signature, seed):
    """Seeded inputs of the module's SIGNATURE: floats in N(0, 1/4); an integer tensor indexes the
    last dim of the float tensor before it (labels of logits)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    out, last = [], 2
    for shape, dtype in signature:
        if dtype in ("i64", "i32"):
            t = torch.randint(0, last, shape, generator=g).to(DTYPES[dtype])
        else:
            t = (torch.randn(shape, generator=g) * 0.5).to(DTYPES[dtype])
            last = shape[-1]
        out.append(t.to(DEVICE))
    return out


def load(path):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def time_ms(fn, reps):
    """Median of `reps` calls, each between two CUDA events, after three warm-up calls."""
    for _ in range(3):
        fn()
    sync()
    times = []
    for _ in range(reps):
        if DEVICE == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def error_of(got, want):
    worst = 0.0
    for g, w in zip(as_tuple(got), as_tuple(want)):
        g, w = g.float(), w.float()
        scale = max(w.abs().max().item(), 1e-6)
        worst = max(worst, (g - w).abs().max().item() / scale)
    return worst


def run_case(case, reps, deadline):
    mod = load(case["module"])
    inputs = make_inputs(mod.SIGNATURE, 7)
    scalars = scalars_of(case["kernel"], case["shape"])
    ours = lambda: mod.__dict__[mod.KERNEL](*inputs, *scalars)  # noqa: E731
    eager_fn = torch_server.KERNELS[case["kernel"]]
    with torch.no_grad():
        want = eager_fn(inputs, scalars)
        got = ours()
        sync()
        err = error_of(got, want)
        row = {"kernel": case["kernel"], "shape": case["shape"], "dtype": case["dtype"], "config": mod.CONFIG,
               "error": err, "ok": err <= TOLERANCE.get(case["dtype"], 3e-2)}
        row["parhelion_ms"] = time_ms(ours, reps)
        row["eager_ms"] = time_ms(lambda: eager_fn(inputs, scalars), reps)
        if case["kernel"] in torch_server.SDPA:
            sdpa = torch_server.SDPA[case["kernel"]]
            row["vendor_ms"] = time_ms(lambda: sdpa(inputs, scalars), reps)
            row["vendor"] = "SDPA"
        if time.time() < deadline and not ARGS.interpret:
            compiled = torch.compile(eager_fn, dynamic=False)
            row["compile_ms"] = time_ms(lambda: compiled(inputs, scalars), reps)
    return row


def tune(cases, reps):
    """The candidates of one kernel and dtype: each checked, timed; the fastest correct one."""
    best = None
    for case in cases:
        try:
            r = run_case(case, reps, 0)
        except Exception as e:  # a candidate that fails is reported, not fatal
            print(f"gpu-check: candidate {case['module']} failed: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        if r["ok"] and (best is None or r["parhelion_ms"] < best["parhelion_ms"]):
            best = r
    return best


def fmt(x):
    return "-" if x is None else f"{x:.3f}"


def main():
    start = time.time()
    deadline = start + ARGS.budget
    manifest = json.load(open(os.path.join(ARGS.dir, "manifest.json")))
    rows, failures = [], []
    for case in manifest["cases"]:
        try:
            rows.append(run_case(case, ARGS.reps, deadline))
        except Exception as e:
            failures.append(f"{case['kernel']} {case['dtype']}: {type(e).__name__}: {str(e)[:300]}")
        print(f"gpu-check: {case['kernel']} {case['dtype']} done at {time.time() - start:.0f} s", file=sys.stderr)
    tuned = {}
    for name, cands in manifest.get("tuning", {}).items():
        tuned[name] = tune(cands, ARGS.reps)
    device = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU (Triton interpreter)"
    lines = [f"# Parhelion's Triton modules on {device}", "",
             f"torch {torch.__version__}, triton {__import__('triton').__version__}; CUDA events, median of "
             f"{ARGS.reps} calls after 3 warm-ups; error = max |out - eager| / max |eager|.", "",
             "| kernel | shape | dtype | Parhelion ms | eager ms | torch.compile ms | vendor ms | best torch / Parhelion | error | ok |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        torch_best = min(x for x in (r.get("eager_ms"), r.get("compile_ms"), r.get("vendor_ms")) if x is not None)
        vendor = f"{fmt(r.get('vendor_ms'))} ({r['vendor']})" if "vendor" in r else "-"
        lines.append(f"| {r['kernel']} | {r['shape']} | {r['dtype']} | {fmt(r['parhelion_ms'])} | {fmt(r['eager_ms'])} | "
                     f"{fmt(r.get('compile_ms'))} | {vendor} | {torch_best / r['parhelion_ms']:.2f}x | "
                     f"{r['error']:.2e} | {'yes' if r['ok'] else 'NO'} |")
    if tuned:
        lines += ["", "Short autotuning (candidate configs timed on the GPU, the fastest correct one):", ""]
        for name, best in tuned.items():
            lines.append(f"- {name}: " + ("no candidate ran correctly" if best is None else
                                          f"{fmt(best['parhelion_ms'])} ms with {best['config']}"))
    if failures:
        lines += ["", "Failed:", ""] + [f"- {f}" for f in failures]
    if manifest.get("refused"):
        lines += ["", "Not emitted (the triton backend refuses them):", ""] + [f"- {r}" for r in manifest["refused"]]
    lines += ["", f"{len(rows)} cases in {time.time() - start:.0f} s."]
    out = ARGS.out or os.path.join(ARGS.dir, "gpu-check.md")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    bad = failures or any(not r["ok"] for r in rows)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
