"""Runs emitted Pallas attention modules in JAX's TPU interpret mode against a jnp reference.

    pallas_attention_demo.py MODULE.py [MODULE.py ...]

Each module is specialized on SIGNATURE; inputs are random in that shape and dtype, scale
1/sqrt(D). Prints the strategy, the max error against softmax(q k^T scale) v, and whether the
interpreter saw a race.
"""
import importlib.util
import math
import sys
import time

import jax
import jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc


def main():
    for path in sys.argv[1:]:
        spec = importlib.util.spec_from_file_location("emitted", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        shape, dtype = mod.SIGNATURE[0]
        jdt = {"f32": jnp.float32, "bf16": jnp.bfloat16}[dtype]
        keys = jax.random.split(jax.random.key(0), 3)
        q, k, v = (jax.random.uniform(kk, shape, jnp.float32, -1, 1).astype(jdt) for kk in keys)
        scale = 1 / math.sqrt(shape[-1])
        t0 = time.time()
        params = pltpu.InterpretParams(detect_races=True, uninitialized_memory="nan")
        out = jax.block_until_ready(getattr(mod, mod.KERNEL)(q, k, v, scale, interpret=params))
        seconds = time.time() - t0
        q32, k32, v32 = (x.astype(jnp.float32) for x in (q, k, v))
        s = jnp.einsum("...qd,...kd->...qk", q32, k32) * scale
        if mod.KERNEL == "causal_attention":
            n = shape[-2]
            s = jnp.where(jnp.arange(n)[:, None] >= jnp.arange(n)[None, :], s, -jnp.inf)
        ref = jnp.einsum("...qk,...kd->...qd", jax.nn.softmax(s, axis=-1), v32)
        err = float(jnp.max(jnp.abs(out.astype(jnp.float32) - ref)))
        strategy = ", ".join(l["strategy"] for l in mod.CONFIG.get("inner_loops", []))
        print(f"{path}: {mod.KERNEL} {shape} {dtype}, inner loop {strategy}: max abs error {err:.2e} "
              f"vs jnp, races {'FOUND' if ipc.races.races_found else 'none'} ({seconds:.1f} s in interpret mode)")


if __name__ == "__main__":
    main()
