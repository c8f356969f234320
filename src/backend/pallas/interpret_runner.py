"""Runs emitted Pallas modules in JAX's TPU interpret mode (embedded in the library; see interpret.h).

Reads a manifest (JSON list of cases) from argv[1]; for each case imports the module, calls its
kernel function on the given raw inputs with race detection on and uninitialized memory
poisoned with NaN, and writes each output as raw f32 to `<outputs>.<i>`. With "export", it also
lowers the kernel for a TPU (jax.export, platforms=["tpu"]), which checks block shapes and
layouts that interpret mode accepts. Prints one JSON result per case.

A case with a "mesh" runs a kernel on every device of it (src/backend/pallas/collectives.h): its
"device_inputs" are stacked over the devices, and each device's outputs are written in turn. Such
devices are simulated CPU devices (jax_num_cpu_devices), each of which blocks one thread of XLA's
CPU client in interpret mode: the client is sized by NPROC, set here before JAX starts. A case
that deadlocks is stopped by its timeout (watchdog).
"""
import faulthandler
import importlib.util
import json
import math
import os
import sys
import threading
import traceback


def devices_wanted(path):
    """The most devices a case's mesh has (1 without one)."""
    try:
        return max([math.prod(n for _, n in c.get("mesh", [])) for c in json.load(open(path))] + [1])
    except Exception:
        return 1


DEVICES = devices_wanted(sys.argv[1]) if __name__ == "__main__" and len(sys.argv) > 1 else 1
if DEVICES > 1:  # (before JAX starts: XLA's CPU client reads both once)
    os.environ["NPROC"] = str(max(int(os.environ.get("NPROC", "0") or 0), DEVICES + 1))

import numpy as np
import jax

if DEVICES > 1:
    jax.config.update("jax_num_cpu_devices", DEVICES)
import jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
from jax._src.pallas.mosaic import tpu_info
from jax._src import config as jax_config

DTYPES = {"f32": (np.float32, jnp.float32), "bf16": (np.uint16, jnp.bfloat16), "f16": (np.float16, jnp.float16),
          "i64": (np.int64, jnp.int32), "i32": (np.int32, jnp.int32), "i8": (np.int8, jnp.int8),
          "u8": (np.uint8, jnp.uint8), "f8e4m3": (np.uint8, jnp.float8_e4m3fn), "f8e5m2": (np.uint8, jnp.float8_e5m2)}


def load_array(spec):
    np_dt, j_dt = DTYPES[spec["dtype"]]
    a = np.fromfile(spec["path"], dtype=np_dt).reshape(spec["shape"])
    if spec["dtype"] in ("bf16", "f8e4m3", "f8e5m2"):  # raw bits, reinterpreted
        return jax.lax.bitcast_convert_type(jnp.asarray(a), j_dt)
    return jnp.asarray(a).astype(j_dt)


def simulate(device_kind):
    """Interpret mode pads each buffer by the tiling of the TPU it simulates, which it asks of
    tpu_info from a callback: outside the module's abstract mesh (_tpu_context), where the device
    is this host's. Answer for the host's device kind with the module's target."""
    chip = tpu_info.chip_version_from_device_kind(device_kind)
    tpu_info.registry[jax.devices()[0].device_kind] = lambda: tpu_info.get_tpu_info_for_chip(chip, 1)


def run_on_mesh(case, mod):
    """A kernel on a mesh: the devices' inputs stacked, the devices' outputs written in turn
    (`<outputs>.<device * outputs + k>`), and exported with the target TPU's abstract mesh."""
    fn = getattr(mod, case["function"])
    per_device = [[load_array(s) for s in d] for d in case["device_inputs"]]
    args = [jnp.stack([d[i] for d in per_device]) for i in range(len(per_device[0]))] if per_device[0] else []
    scal = list(case["scalars"])
    params = pltpu.InterpretParams(detect_races=True, uninitialized_memory="nan", buffer_bounds="padded")
    outs = fn(*args, *scal, interpret=params)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    n = len(per_device)
    for d in range(n):
        for k, o in enumerate(outs):
            np.asarray(o[d].astype(jnp.float32)).tofile(case["outputs"] + "." + str(d * len(outs) + k))
    result = {"ok": True, "outputs": n * len(outs), "outputs_per_device": len(outs),
              "shapes": [list(o.shape[1:]) for _ in range(n) for o in outs],
              "races": bool(ipc.races is not None and ipc.races.races_found)}
    if case.get("export"):
        structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
        try:
            jax.export.export(jax.jit(lambda *t: fn(*t, *scal, interpret=False, mesh=mod._mesh(abstract=True))),
                              platforms=["tpu"])(*structs)
            result["export"] = "ok"
        except Exception as e:  # reported, the C++ test decides
            result["export"] = f"{type(e).__name__}: {str(e)[:400]}"
    return result


def run(case):
    spec = importlib.util.spec_from_file_location("emitted", case["module"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    simulate(mod.DEVICE_KIND)
    if case.get("mesh"):
        return run_on_mesh(case, mod)
    fn = getattr(mod, case["function"])
    args = [load_array(s) for s in case["inputs"]] + list(case["scalars"])
    # HBM buffers padded to whole tiles of the target's layout, as on a TPU: a ragged last block
    # (or emit_pipeline's copy of it, rounded up to the tiling) reads the padding (NaN here) and
    # writes into it, and only reads or writes past the padding are out of bounds.
    params = pltpu.InterpretParams(detect_races=True, uninitialized_memory="nan", buffer_bounds="padded")
    with mod._tpu_context(params):
        outs = fn(*args, interpret=params)
        outs = outs if isinstance(outs, tuple) else (outs,)
        for i, o in enumerate(outs):
            np.asarray(o.astype(jnp.float32)).tofile(case["outputs"] + "." + str(i))
    result = {"ok": True, "outputs": len(outs), "shapes": [list(o.shape) for o in outs],
              "races": bool(ipc.races is not None and ipc.races.races_found)}
    if case.get("export"):
        structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args[:len(case["inputs"])]]
        scal = list(case["scalars"])
        # Lowered for the target's device kind (block checks and tiling ask for it); a module with
        # pipelines also with emit_pipeline as a primitive, which JAX marks as the future default
        # (its interpret mode fails with it in jax 0.10.2: docs/pallas.md).
        modes = [False, True] if "emit_pipeline(" in open(case["module"]).read() else [False]
        result["export"] = "ok"
        for primitive in modes:
            try:
                with mod._tpu_context(False), jax_config.use_emit_pipeline_primitive(primitive):
                    jax.export.export(jax.jit(lambda *t: fn(*t, *scal, interpret=False)), platforms=["tpu"])(*structs)
            except Exception as e:  # reported, the C++ test decides
                result["export"] = ("with jax_use_emit_pipeline_primitive: " if primitive else "") + \
                    f"{type(e).__name__}: {str(e)[:400]}"
                break
    return result


def watchdog(case):
    """Reports a case still running after its timeout (a deadlock: interpret mode's devices wait
    forever) as failed, with every thread's stack on stderr, and ends the runner (the waiting
    threads cannot be stopped); cancelled when the case ends."""
    seconds = case.get("timeout", 600)

    def expire():
        print(json.dumps({"ok": False, "name": case["name"],
                          "error": f"timed out after {seconds} s: a deadlock? (the runner's stacks are on its stderr)"}),
              flush=True)
        faulthandler.dump_traceback(all_threads=True)
        os._exit(3)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer


def main():
    cases = json.load(open(sys.argv[1]))
    for case in cases:
        timer = watchdog(case)
        try:
            r = run(case)
        except Exception as e:
            r = {"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=4)}
        try:  # each case starts with no races recorded and fresh interpreter state
            pltpu.reset_tpu_interpret_mode_state()
        except Exception:
            pass
        timer.cancel()
        r["name"] = case["name"]
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
