"""Times an emitted Pallas module on a TPU and prints the TPU model's prediction beside it.

    parhelion emit KERNEL --target pallas --tpu v7x --shape ... [--config ...] -o kernel.py
    parhelion emit KERNEL --target pallas --tpu v7x --shape ... [--config ...] --predict --json > predicted.json
    python scripts/tpu_time.py kernel.py --predicted predicted.json [--reps 50] [--json]

On a TPU VM with jax[tpu] (no Parhelion needed there). Inputs are random in SIGNATURE's shapes
and dtypes (uniform in [-1, 1); integer tensors are zeros, which every index and offset input
accepts; scalars are 1/sqrt(last dim of the first input), the softmax scale, unless --scalars
gives them). Each call is jitted once, warmed up, then timed `--reps` times, each between
two `jax.block_until_ready` (as Helion's benchmark times a call: device time plus one dispatch
and sync); the median is reported, with the minimum. Device time is estimated as that median
less the median of a one-element jitted call timed the same way (this stack's dispatch floor).

`--interpret` runs in TPU interpret mode instead (any machine; the times are then meaningless,
but the script's own path is checked: `make test` does so).

The printed line (and --json) holds what a user sends back to recalibrate the model: the
kernel, shape, config, TPU, predicted device and call ms, measured call and device ms, and
their ratios.
"""
import argparse
import importlib.util
import inspect
import json
import math
import statistics
import sys
import time

import jax
import jax.numpy as jnp

DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16, "f16": jnp.float16, "i32": jnp.int32, "i64": jnp.int32,
          "i8": jnp.int8, "u8": jnp.uint8, "bool": jnp.bool_, "f8e4m3": jnp.float8_e4m3fn, "f8e5m2": jnp.float8_e5m2}


def load(path):
    spec = importlib.util.spec_from_file_location("emitted", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_inputs(mod, scalars):
    keys = jax.random.split(jax.random.key(0), max(1, len(mod.SIGNATURE)))
    arrays = []
    for key, (shape, dtype) in zip(keys, mod.SIGNATURE):
        if dtype not in DTYPES:
            sys.exit(f"tpu_time: unknown dtype {dtype} in SIGNATURE")
        jdt = DTYPES[dtype]
        if jnp.issubdtype(jdt, jnp.integer) or jdt == jnp.bool_:
            arrays.append(jnp.zeros(shape, jdt))
        else:
            arrays.append(jax.random.uniform(key, shape, jnp.float32, -1, 1).astype(jdt))
    fn = getattr(mod, mod.KERNEL)
    params = [p for p in inspect.signature(fn).parameters.values() if p.kind == p.POSITIONAL_OR_KEYWORD]
    n_scalars = len(params) - len(arrays)
    if scalars is None:
        first = mod.SIGNATURE[0][0] if mod.SIGNATURE else (1,)
        scalars = [1 / math.sqrt(first[-1])] * n_scalars
    if len(scalars) != n_scalars:
        sys.exit(f"tpu_time: {mod.KERNEL} takes {n_scalars} scalar(s), --scalars gave {len(scalars)}")
    return fn, arrays, scalars


def time_calls(call, reps):
    jax.block_until_ready(call())  # compile and warm up
    jax.block_until_ready(call())
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(call())
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples), min(samples)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("module")
    ap.add_argument("--predicted", help="the JSON of `parhelion emit ... --predict --json`")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--scalars", type=float, nargs="*")
    ap.add_argument("--interpret", action="store_true", help="TPU interpret mode (no TPU needed; times meaningless)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.reps < 1:
        sys.exit("tpu_time: --reps must be at least 1")
    mod = load(a.module)
    on_tpu = jax.default_backend() == "tpu"
    if not on_tpu and not a.interpret:
        sys.exit(f"tpu_time: JAX sees no TPU (backend {jax.default_backend()}); run on a TPU VM, or pass --interpret")
    fn, arrays, scalars = make_inputs(mod, a.scalars)
    kwargs = {"interpret": True} if a.interpret else {}
    one = jax.jit(lambda *xs: fn(*xs, *scalars, **kwargs))
    call_ms, call_min = time_calls(lambda: one(*arrays), a.reps)

    # Device time: the call's time less this stack's dispatch and sync, measured the same way
    # on a call that does nearly nothing (one element).
    tiny = jax.jit(lambda x: x + 1)
    floor_ms, _ = time_calls(lambda: tiny(jnp.zeros((1,), jnp.float32)), a.reps)
    device_ms = max(call_ms - floor_ms, 0.0)

    row = {"kernel": mod.KERNEL, "tpu": mod.TPU, "config": mod.CONFIG,
           "shapes": [list(s) for s, _ in mod.SIGNATURE], "dtypes": [d for _, d in mod.SIGNATURE],
           "backend": jax.default_backend(), "device_kind": jax.devices()[0].device_kind,
           "interpret": a.interpret, "reps": a.reps,
           "measured_call_ms": call_ms, "measured_call_min_ms": call_min, "measured_dispatch_ms": floor_ms,
           "measured_device_ms": device_ms}
    if a.predicted:
        with open(a.predicted) as f:
            p = json.load(f)
        row.update({"predicted_device_ms": p["predicted_ms"], "predicted_call_ms": p.get("call_ms"),
                    "device_ratio": device_ms / p["predicted_ms"] if p["predicted_ms"] > 0 else None})
    if a.json:
        print(json.dumps(row))
        return
    where = "interpret mode (not a timing)" if a.interpret else row["device_kind"]
    print(f"{mod.KERNEL} {row['shapes'][0] if row['shapes'] else ''} on {where}: call {call_ms:.4f} ms "
          f"(median of {a.reps}, min {call_min:.4f}), dispatch and sync {floor_ms:.4f} ms, device {device_ms:.4f} ms")
    if a.predicted:
        ratio = row["device_ratio"]
        print(f"model: device {row['predicted_device_ms']:.4f} ms, call {row['predicted_call_ms']:.4f} ms; "
              f"measured / predicted device time = {ratio:.3f}" if ratio is not None else "model: no prediction")


if __name__ == "__main__":
    main()
