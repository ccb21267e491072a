"""Context-parallel S2 attention on two GPUs against one (s2c.cp.sparse_attn_cp
vs s2c.sparse_attn_func): forward and forward + backward times per sequence
length, and the K/V bytes the plan moves against ring attention's.  Target
shape: bf16, D 128, 32 heads, 8 kv heads, local 16, stride 8, block 64, the
heads of a kv group sharing one shift (phi3-small without dense heads).

    NCCL_NVLS_ENABLE=0 python3 bench/e2e/cp.py [--seqs 65536,131072,...] [--sharding zigzag]

One process per GPU (spawned here, NCCL backend, NVLink multicast off).  The
one-GPU column runs on rank 0 while rank 1 waits; a length one GPU cannot
hold prints "oom" there.  Times are medians of CUDA-event timings, the
slower rank's."""
import argparse
import os
import statistics
import sys
import tempfile

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")   # never NVLink multicast
# the tree's package (S2C_LIBDIR: its libraries), in the spawned ranks too
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def timed(fn, reps):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def main(rank, world, init, args):
    import s2c
    from s2c import cp
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world)
    dev = torch.device("cuda", rank)
    pat = s2c.Pattern.local_stride(32, 64, 16, 8, num_kv_heads=8, head_sliding_offset=1)
    H, HK, D = 32, 8, 128
    rows = []
    for seq in args.seqs:
        row = {"seq": seq}
        mk = lambda n, h, g=False: torch.randn(1, n, h, D, device=dev, dtype=torch.bfloat16, requires_grad=g)  # noqa
        # one GPU (rank 0)
        one = [None, None]
        if rank == 0:
            try:
                q, k, v = mk(seq, H, True), mk(seq, HK, True), mk(seq, HK, True)
                with torch.no_grad():
                    one[0] = timed(lambda: s2c.sparse_attn_func(q, k, v, pat), args.reps)
                do = torch.randn_like(q)
                one[1] = timed(lambda: torch.autograd.backward(s2c.sparse_attn_func(q, k, v, pat), do), args.reps)
                del q, k, v, do
            except (torch.cuda.OutOfMemoryError, RuntimeError, s2c.S2Error) as e:
                # what one GPU cannot hold (memory, or its schedules past S2_ATTN_MAX_SCHEDULE_BYTES)
                if "out of memory" not in str(e).lower() and not isinstance(e, s2c.S2Error):
                    raise
                print(f"  {seq} on one GPU: {str(e)[:160]}", flush=True)
            torch.cuda.empty_cache()
        dist.barrier()
        # two GPUs
        torch.cuda.reset_peak_memory_stats(dev)
        L = seq // world
        ql, kl, vl = mk(L, H, True), mk(L, HK, True), mk(L, HK, True)
        dol = torch.randn_like(ql)
        f = lambda: cp.sparse_attn_cp(ql, kl, vl, pat, sharding=args.sharding)  # noqa: E731
        with torch.no_grad():
            t_f = timed(f, args.reps)
        t_fb = timed(lambda: torch.autograd.backward(f(), dol), args.reps)
        t = torch.tensor([t_f, t_fb], device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        # bytes: the plan's (every rank's K/V received) and the messages this code posts
        plan = cp.CPPlan(pat, seq, world, args.sharding, schedules=False)
        st = [plan.stats(r, D, torch.bfloat16) for r in range(world)]
        exs = [cp.Exchange(plan, r) for r in range(world)]
        moved = sum(len(tok) for ex in exs for tok, _ in ex.recv.values()) * 2 * D * 2   # rows x (K, V) x D x bf16
        row.update(one_f=one[0], one_fb=one[1], cp_f=t[0].item(), cp_fb=t[1].item(),
                   plan_bytes=sum(s["recv_bytes"] for s in st), ring_bytes=sum(s["ring_bytes"] for s in st),
                   moved=moved, mem=torch.cuda.max_memory_allocated(dev) / 2**30)
        rows.append(row)
        ql = kl = vl = dol = f = None   # freed before the next length
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
    if rank == 0:
        fmt = lambda x: "oom" if x is None else f"{x:.2f}"  # noqa: E731
        print(f"context parallel, {world} GPUs vs 1, {args.sharding}; bf16 H {H} Hkv {HK} D {D}, local 16, stride 8, "
              "block 64; ms (median), bytes of K/V over all ranks")
        print(f"{'tokens':>8} {'1 GPU fwd':>10} {'2 GPU fwd':>10} {'x':>5} {'1 GPU f+b':>10} {'2 GPU f+b':>10} {'x':>5} "
              f"{'plan MB':>9} {'sent MB':>9} {'ring MB':>9} {'ring/plan':>9} {'peak GiB':>8}")
        for r in rows:
            sp = lambda a, b: "-" if a is None else f"{a / b:.2f}"  # noqa: E731
            print(f"{r['seq']:>8} {fmt(r['one_f']):>10} {r['cp_f']:>10.2f} {sp(r['one_f'], r['cp_f']):>5} "
                  f"{fmt(r['one_fb']):>10} {r['cp_fb']:>10.2f} {sp(r['one_fb'], r['cp_fb']):>5} "
                  f"{r['plan_bytes'] / 1e6:>9.1f} {r['moved'] / 1e6:>9.1f} {r['ring_bytes'] / 1e6:>9.1f} "
                  f"{r['ring_bytes'] / max(r['plan_bytes'], 1):>9.1f} {r['mem']:>8.1f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqs", default="65536,131072,262144,524288",
                    type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--sharding", default="zigzag", choices=("zigzag", "contiguous"))
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    if torch.cuda.device_count() < 2:
        raise SystemExit("cp.py needs two CUDA devices")
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(main, args=(2, "file://" + os.path.join(d, "rendezvous"), args), nprocs=2, join=True)
