"""Host cost of one attention call through the Python package, against the bare ctypes
launch of the same prepared plan.  Tiny shape (B 1, S 128, H 2, D 64, bf16, bshd,
Pattern.local_stride(2, 64, 2, 2)) so that the GPU never holds the host back; each
figure is the median over 5 batches of 2000 calls (time.perf_counter, one
torch.cuda.synchronize at each end) in microseconds per call:

  (a) s2c.sparse_attn_func, gradients off (the batch runs inside one torch.no_grad(),
      as an inference loop does)
  (b) the same with grad enabled (q.requires_grad), forward only
  (c) the drop-in LocalStrideSparseAttention forward, gradients off likewise
  (d) lib.s2_attn_plan_forward(ctx, plan, stream, byref(args)), the plan and args of
      (a)'s launch cache (s2c.ops._fwd_cache), pointers preset
  (e) (a) with out= a preallocated o (no allocation in the call)
and, for reference, what a caller pays around them: torch.no_grad() entered and left
once per call, and one torch.empty of the output's shape (inside (a) and (c)).

Prints each, (a)-(d) and (c)-(d), and whether each difference is <= 15 us.  With --parts,
also the host cost of each step of (a)'s path alone (the launch signature's key, its lookup,
the output's allocation, the five pointers, the capture query, the stream query).
Run on the GPU machine (S2C_LIBDIR: the libs2c build):  python3 bench/py_overhead.py"""
import ctypes as C
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import s2c  # noqa: E402

CALLS, BATCHES, LIMIT_US = 2000, 5, 15.0
B, S, H, D = 1, 128, 2, 64


def host_us(fn, grad=True):
    """Median over BATCHES of the host time per call of CALLS calls, in us
    (grad=False: each batch runs inside one torch.no_grad())."""
    with torch.set_grad_enabled(grad):
        for _ in range(200):   # warm-up: compile, plan, caches
            fn()
        torch.cuda.synchronize()
        per = []
        for _ in range(BATCHES):
            t0 = time.perf_counter()
            for _ in range(CALLS):
                fn()
            torch.cuda.synchronize()
            per.append((time.perf_counter() - t0) / CALLS * 1e6)
    return statistics.median(per)


def main():
    if not torch.cuda.is_available():
        print("no CUDA device: skipped"); sys.exit(77)
    from s2c import _lib, ops
    from s2c import _runtime as R

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    pat = s2c.Pattern.local_stride(H, 64, 2, 2)

    # one call of (a) leaves exactly one forward entry in the launch cache: take its plan and args
    ops._fwd_cache.clear()
    with torch.no_grad():
        ref = s2c.sparse_attn_func(q, k, v, pat)
    fwd = list(ops._fwd_cache.values())
    assert len(fwd) == 1, f"expected one forward launch entry, got {len(fwd)}"
    args, plan = fwd[0].args, fwd[0].plan.ptr
    o = torch.empty_like(q)   # live buffers for the raw launch (the call's own o and lse are freed)
    lse = torch.empty((B, H, S), dtype=torch.float32, device="cuda")
    L, ctx, stream = _lib.lib(), _lib.ctx(), R.stream_of(q)
    launch, pargs = L.s2_attn_plan_forward, C.byref(args)

    def raw():
        launch(ctx, plan, stream, pargs)

    def preset():    # (a) rewrites the pointers on every call; (d) wants them on its buffers
        args.q, args.k, args.v, args.o, args.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()

    preset()
    st = launch(ctx, plan, stream, pargs)
    _lib.check(st, "raw forward")
    torch.cuda.synchronize()
    err = (o.float() - ref.float()).abs().max().item()
    assert err < 1e-2, f"the raw launch differs from sparse_attn_func by {err}"

    qg = q.clone().requires_grad_(True)
    mod = s2c.LocalStrideSparseAttention(H, S, 64, 2, 2)

    def a():
        s2c.sparse_attn_func(q, k, v, pat)

    def b():
        s2c.sparse_attn_func(qg, k, v, pat)

    def c():
        mod(q, k, v)

    o_out = torch.empty_like(q)

    def e():
        s2c.sparse_attn_func(q, k, v, pat, out=o_out)

    def alloc():
        torch.empty((B, S, H, D), dtype=q.dtype, device=q.device)

    res = {"a": host_us(a, grad=False), "b": host_us(b), "c": host_us(c, grad=False), "e": host_us(e, grad=False),
           "empty": host_us(alloc)}
    preset()
    res["d"] = host_us(raw)

    # what a caller who enters torch.no_grad() around each call pays on top, for reference
    def ng():
        with torch.no_grad():
            pass
    res["no_grad"] = host_us(ng)

    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, custom op "
          f"{ops.HAVE_CUSTOM_OP}, {CALLS} calls x {BATCHES} batches (median), us per call")
    labels = {"a": "(a) sparse_attn_func, no_grad", "b": "(b) sparse_attn_func, grad on, fwd only",
              "c": "(c) LocalStrideSparseAttention, no_grad", "d": "(d) raw s2_attn_plan_forward",
              "e": "(e) sparse_attn_func, no_grad, out=",
              "no_grad": "    torch.no_grad() enter/exit alone", "empty": "    torch.empty of o alone"}
    for key, label in labels.items():
        print(f"  {label:<42} {res[key]:8.2f}")
    verdict = []
    for key in ("a", "c", "e"):
        diff = res[key] - res["d"]
        ok = diff <= LIMIT_US
        verdict.append(ok)
        print(f"  ({key})-(d) = {diff:6.2f} us: {'<=' if ok else '>'} {LIMIT_US:.0f} us {'ok' if ok else 'OVER'}")
    if "--parts" in sys.argv:
        parts(q, k, v, pat, ops, R)
    print(f"overhead (a)-(d) {res['a'] - res['d']:.2f} us, (c)-(d) {res['c'] - res['d']:.2f} us, "
          f"(e)-(d) {res['e'] - res['d']:.2f} us: "
          f"{'PASS' if all(verdict) else 'FAIL'} (limit {LIMIT_US:.0f} us)")


def parts(q, k, v, pat, ops, R):
    """The steps of (a)'s path, each timed alone (us per call)."""
    e = next(iter(ops._fwd_cache.values()))
    pid, a = ops.pattern_id(pat), e.args
    steps = {
        "key": lambda: (pid, q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype,
                        q.get_device(), k.get_device(), v.get_device(), 1, 1, 0.125),
        "pattern_id + scale": lambda: (ops.pattern_id(pat), ops._scale(None, 64)),
        "torch.empty(o)": lambda: torch.empty(e.shapes[0], dtype=e.dtype, device=e.device),
        "5 pointers": lambda: (setattr(a, "q", q.data_ptr()), setattr(a, "k", k.data_ptr()),
                               setattr(a, "v", v.data_ptr()), setattr(a, "o", q.data_ptr()), setattr(a, "lse", 0)),
        "capture query": ops._capturing,
        "stream query": lambda: ops._raw_stream(0),
        "is_compiling": ops._compiling,
        "is_grad_enabled": torch.is_grad_enabled,
    }
    with torch.no_grad():
        for name, fn in steps.items():
            print(f"  part {name:<24} {host_us(fn, grad=False):8.2f}")


if __name__ == "__main__":
    main()
