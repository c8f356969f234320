"""Runs emitted Triton modules without a GPU (embedded in the library; see run.h).

Reads a manifest (JSON list of cases) from argv[1]. Mode "interpret" (started with
TRITON_INTERPRET=1): imports each module, calls its kernel function on torch CPU tensors made
from the given raw inputs, and writes each output as raw f32 to `<outputs>.<i>`. Mode "compile":
compiles every kernel of each module ahead of time (triton.compile on an ASTSource with the
module's KERNELS signatures) for each requested CUDA architecture, and reports the sizes of the
PTX and cubin it produced. Prints one JSON result per case.
"""
import importlib.util
import json
import os
import sys
import traceback

import numpy as np
import torch

DTYPES = {"f32": (np.float32, torch.float32), "bf16": (np.uint16, torch.bfloat16), "f16": (np.float16, torch.float16),
          "i64": (np.int64, torch.int64), "i32": (np.int32, torch.int32), "i8": (np.int8, torch.int8),
          "u8": (np.uint8, torch.uint8), "bool": (np.bool_, torch.bool),
          "f8e4m3": (np.uint8, torch.float8_e4m3fn), "f8e5m2": (np.uint8, torch.float8_e5m2)}


def load_array(spec):
    np_dt, t_dt = DTYPES[spec["dtype"]]
    a = torch.from_numpy(np.fromfile(spec["path"], dtype=np_dt).reshape(spec["shape"]).copy())
    if spec["dtype"] in ("bf16", "f8e4m3", "f8e5m2"):  # raw bits, reinterpreted
        return a.view(t_dt)
    return a


def import_module(path):
    spec = importlib.util.spec_from_file_location("emitted_" + str(abs(hash(path))), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def interpret(case):
    mod = import_module(case["module"])
    fn = getattr(mod, case["function"])
    args = [load_array(s) for s in case["inputs"]] + list(case["scalars"])
    outs = fn(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    for i, o in enumerate(outs):
        o.to(torch.float32).contiguous().numpy().tofile(case["outputs"] + "." + str(i))
    return {"ok": True, "shapes": [list(o.shape) for o in outs]}


def compile_ahead(case):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    mod = import_module(case["module"])
    sizes = []
    for arch in case["archs"]:
        for k in mod.KERNELS:
            src = ASTSource(fn=k["fn"], signature=k["signature"], constexprs={})
            c = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": k["num_warps"]})
            sizes.append({"kernel": k["name"], "arch": arch, "ptx": len(c.asm["ptx"]), "cubin": len(c.asm["cubin"])})
    return {"ok": True, "compiled": sizes}


def main():
    cases = json.load(open(sys.argv[1]))
    for case in cases:
        try:
            r = interpret(case) if case["mode"] == "interpret" else compile_ahead(case)
        except Exception as e:
            r = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:2000]}", "trace": traceback.format_exc(limit=6)}
        r["name"] = case["name"]
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    main()
