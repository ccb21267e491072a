"""GPU tests of context parallelism (s2c.cp.sparse_attn_cp) on two GPUs:
two ranks (torch.multiprocessing spawn, NCCL backend, NVLink multicast off)
shard one sequence, and each rank's output and gradients must equal the
single-GPU s2c result for its tokens (the same kernels over the whole
sequence on that rank's GPU) to bf16 tolerance, for both shardings at 8K and
64K tokens; a second backward must give the same bits (deterministic).
Target shape: bf16, D 128, 32 heads, 8 kv heads, local 16, stride 8, block
64, the heads of a kv group sharing one shift.  Skipped without two CUDA
devices, NCCL or torch >= 2.4."""
import json
import os
import tempfile

import pytest

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")   # never NVLink multicast

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
    pytest.skip("needs two CUDA devices", allow_module_level=True)
if not hasattr(torch.library, "custom_op"):
    pytest.skip(f"torch {torch.__version__} is older than 2.4", allow_module_level=True)
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

if not dist.is_nccl_available():
    pytest.skip("torch.distributed has no NCCL", allow_module_level=True)

CASES = [("zigzag", 8192), ("contiguous", 8192), ("zigzag", 65536), ("contiguous", 65536)]
# max |error| / max |reference|, and the normwise relative error, per output
TOL_MAX, TOL_NORM = 3e-2, 1e-2


def _errs(got, want):
    g, w = got.double(), want.double()
    scale = max(w.abs().max().item(), 1e-6)
    return (g - w).abs().max().item() / scale, ((g - w).norm() / max(w.norm().item(), 1e-12)).item()


def _rank_main(rank, world, init, out_dir):
    import s2c
    from s2c import cp
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world)
    dev = torch.device("cuda", rank)
    pat = s2c.Pattern.local_stride(32, 64, 16, 8, num_kv_heads=8, head_sliding_offset=1)
    results = []
    for sharding, seq in CASES:
        g = torch.Generator(device=dev).manual_seed(1234 + seq)     # the same inputs on both ranks
        mk = lambda *s: torch.randn(*s, device=dev, dtype=torch.bfloat16, generator=g)  # noqa: E731
        q, k, v, do = mk(1, seq, 32, 128), mk(1, seq, 8, 128), mk(1, seq, 8, 128), mk(1, seq, 32, 128)
        # the single-GPU result on this rank's GPU
        qf, kf, vf = (t.clone().requires_grad_() for t in (q, k, v))
        of = s2c.sparse_attn_func(qf, kf, vf, pat)
        of.backward(do)
        want = {n: cp.shard(t.detach(), world, rank, sharding) for n, t in
                (("o", of), ("dq", qf.grad), ("dk", kf.grad), ("dv", vf.grad))}
        del qf, kf, vf, of
        # context-parallel: this rank's shard only
        got_runs = []
        for _ in range(2):
            ql, kl, vl = (cp.shard(t, world, rank, sharding).requires_grad_() for t in (q, k, v))
            ol = cp.sparse_attn_cp(ql, kl, vl, pat, sharding=sharding)
            ol.backward(cp.shard(do, world, rank, sharding))
            torch.cuda.synchronize()
            got_runs.append({"o": ol.detach(), "dq": ql.grad, "dk": kl.grad, "dv": vl.grad})
        row = {"rank": rank, "case": f"{sharding}_{seq // 1024}k", "deterministic":
               all(torch.equal(got_runs[0][n], got_runs[1][n]) for n in got_runs[0])}
        for n in ("o", "dq", "dk", "dv"):
            got = got_runs[0][n]
            row[n] = _errs(got, want[n]) if torch.isfinite(got).all() else (float("inf"), float("inf"))
        results.append(row)
        del q, k, v, do, want, got_runs
        torch.cuda.empty_cache()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


def test_cp_two_gpus_equal_single_gpu():
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(_rank_main, args=(2, "file://" + os.path.join(d, "rendezvous"), d), nprocs=2, join=True)
        rows = [r for rank in range(2) for r in json.load(open(os.path.join(d, f"rank{rank}.json")))]
    failed = []
    for r in rows:
        ok = r["deterministic"] and all(r[n][0] <= TOL_MAX and r[n][1] <= TOL_NORM for n in ("o", "dq", "dk", "dv"))
        errs = " ".join(f"{n} max {r[n][0]:.2e} norm {r[n][1]:.2e}" for n in ("o", "dq", "dk", "dv"))
        print(f"{'PASS' if ok else 'FAIL'} cp {r['case']} rank {r['rank']}: {errs} (tol max {TOL_MAX:g}, "
              f"norm {TOL_NORM:g}); rerun bitwise equal: {r['deterministic']}")
        if not ok:
            failed.append(f"{r['case']} rank {r['rank']}")
    assert not failed, f"context parallel differs from one GPU: {failed}"
