"""How much of a context-parallel step is visible communication, for the
PyTorch executor (s2c.cp.sparse_attn_cp) on two GPUs: torch.profiler (CUDA
activities) records a few steps per sequence length, and from the GPU's
kernel intervals each rank gets, per step:

  step     the span of its kernels (first start to last end)
  nccl     the union of its NCCL kernels
  exposed  the part of nccl when no other kernel of that GPU runs

printed as medians over the profiled steps, the slower rank's exposed share
last.  Target (issue 33): at most 10% of the step.  Shape: bf16, D 128, 32
heads, 8 kv heads, local 16, stride 8, block 64 (as bench/e2e/cp.py).

    NCCL_NVLS_ENABLE=0 python3 bench/e2e/cp_timeline.py [--seqs 65536,...,524288] [--sharding zigzag]
        [--steps 3] [--mode both|fwd|fwdbwd]
    python3 bench/e2e/cp_timeline.py --selftest     (the interval arithmetic on a made-up trace, CPU only)

One process per GPU, spawned here (torch.multiprocessing, a file rendezvous,
NCCL backend), as bench/e2e/cp.py starts its ranks; NVLink multicast off.
Before each step the ranks meet (barrier, synchronize), so a step's kernels
are those that start inside its annotation."""
import argparse
import json
import os
import statistics
import sys
import tempfile

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")   # never NVLink multicast
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import torch  # noqa: E402


def union(iv):
    """Sorted disjoint intervals covering iv [(start, end)]."""
    out = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(iv):
    return sum(e - s for s, e in iv)


def minus(a, b):
    """Length of the union a outside the union b (both from union())."""
    left, j = 0.0, 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                left += b[k][0] - cur
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            left += e - cur
    return left


def is_nccl(name):
    return name.lower().startswith("nccl")


def analyse(trace, steps, device=None):
    """Per step annotation (name in steps): (step, nccl, exposed) in ms from a
    chrome trace's events (ts and dur in us)."""
    evs = trace["traceEvents"] if isinstance(trace, dict) else trace
    marks = {}
    for e in evs:   # the CPU annotation (user_annotation) over its GPU copy where both are there
        name = e.get("name")
        if e.get("ph") == "X" and name in steps and (name not in marks or e.get("cat") == "user_annotation"):
            marks[name] = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
    kernels = [e for e in evs if e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel"
               and (device is None or e.get("args", {}).get("device", device) == device)]
    out = []
    for name in steps:
        if name not in marks:
            raise RuntimeError(f"cp_timeline: no annotation {name} in the trace")
        lo, hi = marks[name]
        ks = [(float(k["ts"]), float(k["ts"]) + float(k["dur"]), is_nccl(k["name"])) for k in kernels
              if lo <= float(k["ts"]) < hi]
        if not ks:
            raise RuntimeError(f"cp_timeline: no kernel in {name}")
        span = max(e for _, e, _ in ks) - min(s for s, _, _ in ks)
        nccl = union([(s, e) for s, e, n in ks if n])
        other = union([(s, e) for s, e, n in ks if not n])
        out.append((span / 1e3, length(nccl) / 1e3, minus(nccl, other) / 1e3))
    return out


def selftest():
    # step 1: compute [0,10], nccl [2,5] (hidden) and [9,12] (2 exposed); step 2: nccl alone [20,21], compute [21,30]
    k = lambda n, ts, d: {"ph": "X", "cat": "kernel", "name": n, "ts": ts, "dur": d, "args": {"device": 0}}  # noqa
    tr = {"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "s1", "ts": 0, "dur": 15},
        {"ph": "X", "cat": "user_annotation", "name": "s2", "ts": 19, "dur": 15},
        k("attn_fwd", 0, 6), k("attn_fwd", 6, 4), k("ncclDevKernel_SendRecv", 2, 3), k("ncclKernel_x", 9, 3),
        k("ncclDevKernel_SendRecv", 20, 1), k("attn_bwd", 21, 9), k("other_gpu", 21, 1e9),
        {"ph": "X", "cat": "kernel", "name": "attn", "ts": 0, "dur": 100, "args": {"device": 1}}]}
    tr["traceEvents"][-2]["args"]["device"] = 1
    got = analyse(tr, ["s1", "s2"], device=0)
    want = [(12e-3, 6e-3, 2e-3), (10e-3, 1e-3, 1e-3)]
    ok = all(abs(a - b) < 1e-12 for g, w in zip(got, want) for a, b in zip(g, w))
    assert minus(union([(0, 10)]), union([(1, 2), (3, 4), (9, 20)])) == 7
    assert minus(union([(0, 1), (5, 6)]), []) == 2
    print("selftest", "PASS" if ok else f"FAIL: {got} != {want}")
    return 0 if ok else 1


def main(rank, world, init, args, out_dir):
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function
    import s2c
    from s2c import cp
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world)
    dev = torch.device("cuda", rank)
    pat = s2c.Pattern.local_stride(32, 64, 16, 8, num_kv_heads=8, head_sliding_offset=1)
    H, HK, D = 32, 8, 128
    modes = {"both": ["fwd", "fwd+bwd"], "fwd": ["fwd"], "fwdbwd": ["fwd+bwd"]}[args.mode]
    rows = []
    for seq in args.seqs:
        L = seq // world
        mk = lambda h: torch.randn(1, L, h, D, device=dev, dtype=torch.bfloat16, requires_grad=True)  # noqa: E731
        q, k, v = mk(H), mk(HK), mk(HK)
        do = torch.randn_like(q)
        for mode in modes:
            def step():
                if mode == "fwd":
                    with torch.no_grad():
                        cp.sparse_attn_cp(q, k, v, pat, sharding=args.sharding)
                else:
                    torch.autograd.backward(cp.sparse_attn_cp(q, k, v, pat, sharding=args.sharding), do)
            for _ in range(2):   # warm: plans, schedules, NCCL channels
                step()
            torch.cuda.synchronize()
            names = [f"cp_step_{seq}_{mode}_{i}" for i in range(args.steps)]
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for name in names:
                    dist.barrier()
                    torch.cuda.synchronize()
                    with record_function(name):
                        step()
                        torch.cuda.synchronize()
            path = os.path.join(out_dir, f"trace_{rank}_{seq}_{mode.replace('+', '')}.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                per = analyse(json.load(f), names, device=rank)
            os.remove(path)
            med = [statistics.median(x[i] for x in per) for i in range(3)]
            rows.append((seq, mode, med))
        q = k = v = do = None
        torch.cuda.empty_cache()
    # every rank's rows to rank 0
    got = [None] * world
    dist.all_gather_object(got, rows)
    if rank == 0:
        print(f"context parallel timeline, {world} GPUs, {args.sharding}, torch.profiler kernels; medians of "
              f"{args.steps} steps; exposed = NCCL kernel time with no other kernel on that GPU")
        print(f"{'tokens':>8} {'step':>8} " + " ".join(f"{'r%d ms' % r:>9} {'nccl':>7} {'exposed':>7} {'%':>5}"
                                                     for r in range(world)) + f" {'worst %':>7}")
        for i, (seq, mode, _) in enumerate(rows):
            cells, worst = [], 0.0
            for r in range(world):
                s, n, x = got[r][i][2]
                pct = 100.0 * x / s if s > 0 else 0.0
                worst = max(worst, pct)
                cells.append(f"{s:>9.2f} {n:>7.2f} {x:>7.2f} {pct:>5.1f}")
            print(f"{seq:>8} {mode:>8} " + " ".join(cells) + f" {worst:>7.1f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqs", default="65536,131072,262144,524288", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--sharding", default="zigzag", choices=("zigzag", "contiguous"))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--mode", default="both", choices=("both", "fwd", "fwdbwd"))
    ap.add_argument("--selftest", action="store_true")
    args = ap.parse_args()
    if args.selftest:
        raise SystemExit(selftest())
    if torch.cuda.device_count() < 2:
        raise SystemExit("cp_timeline.py needs two CUDA devices")
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(main, args=(2, "file://" + os.path.join(d, "rendezvous"), args, d), nprocs=2, join=True)
