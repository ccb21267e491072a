"""s2c's Python API against the S2 Triton library (dkernel) on the same
attention calls, in one process, timed as triton.testing.do_bench times them
(L2 flushed between repetitions, median): forward, and forward + backward.

    DKERNEL_DIR=DIR S2C_LIBDIR=... python3 bench/py_kernels.py   (ROWS=name,...)

HEAD_DIM=D sets the head dim (default 128).  DTYPE=float32 times fp32 inputs (s2c's tf32 forward against the library's
fp32 path, tf32 by default in both); the default is bfloat16."""
import importlib.metadata as md
import json
import os
import sys

import torch
import triton.testing

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import s2c  # noqa: E402

dk = None
if os.environ.get("DKERNEL_DIR"):
    _orig = md.version
    md.version = lambda name: "0.0.2" if name == "dkernel" else _orig(name)
    sys.path.insert(0, os.environ["DKERNEL_DIR"])
    import dkernel as dk  # noqa: E402

# name: B, H, Hkv, S, block, local, stride
ROWS = {
    "8k_b64": (4, 16, 16, 8192, 64, 8, 16),
    "8k_b16": (4, 16, 16, 8192, 16, 32, 16),
    "32k_b64": (1, 16, 16, 32768, 64, 8, 16),
    "16k_gqa": (2, 32, 8, 16384, 64, 16, 8),
    "128k_b64": (1, 16, 16, 131072, 64, 8, 16),
}


def bench(fn):
    fn()                      # compile and prepare outside do_bench's estimate
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def main():
    names = os.environ.get("ROWS", ",".join(ROWS)).split(",")
    dtype = getattr(torch, os.environ.get("DTYPE", "bfloat16"))
    D = int(os.environ.get("HEAD_DIM", "128"))
    out = []
    for name in names:
        B, H, Hkv, S, bs, local, stride = ROWS[name]
        torch.manual_seed(0)
        q = torch.randn(B, S, H, D, device="cuda", dtype=dtype, requires_grad=True)
        k = torch.randn(B, S, Hkv, D, device="cuda", dtype=dtype, requires_grad=True)
        v = torch.randn(B, S, Hkv, D, device="cuda", dtype=dtype, requires_grad=True)
        do = torch.randn_like(q)
        ours = s2c.LocalStrideSparseAttention(H, S, bs, local, stride, num_kv_heads=Hkv)
        mods = {"s2c": ours}
        if dk is not None:
            mods["dkernel"] = dk.LocalStrideSparseAttention(H, S, bs, local, stride, num_kv_heads=Hkv).cuda()
        r = dict(row=name, dtype=str(dtype), D=D, B=B, H=H, Hkv=Hkv, S=S, block=bs, local=local, stride=stride)
        for prov, m in mods.items():
            try:
                with torch.no_grad():
                    r[prov + "_fwd_ms"] = bench(lambda: m(q, k, v))
                if S <= 32768:
                    def step():
                        q.grad = k.grad = v.grad = None
                        m(q, k, v).backward(do)
                    r[prov + "_fwdbwd_ms"] = bench(step)
            except Exception as e:   # the Triton library fails on some shapes: say so, go on
                r[prov + "_error"] = repr(e)[:200]
            torch.cuda.empty_cache()
        for kind in ("fwd", "fwdbwd"):
            a, b = r.get(f"dkernel_{kind}_ms"), r.get(f"s2c_{kind}_ms")
            if a and b:
                r[f"ratio_{kind}"] = a / b
        print(json.dumps(r), flush=True)
        out.append(r)
    print(f"{'row':10} {'s2c fwd':>9} {'dk fwd':>9} {'ratio':>6} {'s2c f+b':>9} {'dk f+b':>9} {'ratio':>6}")
    for r in out:
        f = lambda key: f"{r[key]:9.3f}" if key in r else f"{'-':>9}"          # noqa: E731
        g = lambda key: f"{r[key]:6.2f}" if key in r else f"{'-':>6}"          # noqa: E731
        print(f"{r['row']:10} {f('s2c_fwd_ms')} {f('dkernel_fwd_ms')} {g('ratio_fwd')} {f('s2c_fwdbwd_ms')} "
              f"{f('dkernel_fwdbwd_ms')} {g('ratio_fwdbwd')}")
    if os.environ.get("OUT"):
        json.dump(out, open(os.path.join(os.environ["OUT"], "py_kernels.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
