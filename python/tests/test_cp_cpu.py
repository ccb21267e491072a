"""CPU tests of context parallelism (s2c.cp): the plan's bindings against the
C library's block decisions, the sharding helpers, the schedules' split at
the receive buffer, and the exchange's bookkeeping run for real between
processes over torch.distributed's gloo backend (K/V rows that name their
own position, and gradients sent home and summed)."""
import os
import tempfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import s2c  # noqa: E402
from s2c import cp  # noqa: E402
from s2c.pattern import Pattern  # noqa: E402

# a small S2 pattern: 8 query heads over 2 kv heads (a shift per kv group), block 16
PAT = dict(num_heads=8, block_size=16, local_blocks=2, vert_stride=4, num_kv_heads=2, head_sliding_offset=1)
TILE = (32, 32)   # wider than a block: receive buffers padded to whole tiles


def pattern():
    return Pattern.local_stride(**PAT)


def needed(p, plan, rank, g, masks={}):
    """Remote key blocks rank's queries of kv head g read, from s2_block_kept."""
    nb = plan.seq_len // p.block_size
    mask = masks.get(nb)
    if mask is None:
        mask = masks[nb] = p.block_mask(nb, nb)
    group = p.heads // p.kv_heads
    mine = [m for m in range(nb) if plan.owner(m) == rank]
    heads = range(g * group, (g + 1) * group)
    return sorted({n for h in heads for m in mine for n in range(nb) if mask[h, m, n] and plan.owner(n) != rank})


@pytest.mark.parametrize("sharding,world,seq", [("zigzag", 2, 512), ("contiguous", 2, 512), ("zigzag", 3, 768),
                                                ("contiguous", 4, 512)])
def test_plan_lists_are_the_needed_blocks(sharding, world, seq):
    p = pattern()
    plan = cp.CPPlan(p, seq, world, sharding, TILE)
    total_recv = 0
    for r in range(world):
        assert sum(n for _, n in plan.shard(r)) == seq // world
        assert plan.recv_tokens(r) % max(TILE) == 0
        for g in range(p.kv_heads):
            rv = plan.recv(r, g)
            want = needed(p, plan, r, g)
            assert rv[:, 0].tolist() == want, f"rank {r} kv head {g}: receives {rv[:, 0].tolist()}, needs {want}"
            assert rv[:, 1].tolist() == list(range(len(want)))          # slots in order, each once
            assert all(plan.owner(b) == o for b, _, o in rv)
            assert len(want) * p.block_size <= plan.recv_tokens(r)
            total_recv += len(rv)
            # what r sends to each receiver is that receiver's list from r, slots included
            sd = plan.send(r, g)
            for peer in range(world):
                theirs = plan.recv(peer, g)
                assert sd[sd[:, 2] == peer][:, :2].tolist() == theirs[theirs[:, 2] == r][:, :2].tolist()
    st = [plan.stats(r, 64, torch.bfloat16) for r in range(world)]
    assert sum(s["recv_blocks"] for s in st) == total_recv == sum(s["send_blocks"] for s in st)
    assert all(0 < s["recv_bytes"] < s["ring_bytes"] for s in st[1:])


def test_shard_round_trip_and_ranges():
    g = torch.Generator().manual_seed(7)
    for sharding in ("zigzag", "contiguous"):
        for world in (1, 2, 3, 4):
            seq = 48 * world
            x = torch.randn(2, seq, 3, 4, generator=g)
            parts = [cp.shard(x, world, r, sharding) for r in range(world)]
            assert all(t.shape == (2, seq // world, 3, 4) for t in parts)
            assert torch.equal(cp.unshard(parts, sharding), x)
            xt = x.transpose(1, 2).contiguous()
            pt = [cp.shard(xt, world, r, sharding, seq_dim=2) for r in range(world)]
            assert torch.equal(cp.unshard(pt, sharding, seq_dim=2), xt)
            covered = sorted(t for r in range(world) for s, n in cp.shard_ranges(seq, world, r, sharding)
                             for t in range(s, s + n))
            assert covered == list(range(seq))
    # the helpers cut as the C plan does
    plan = cp.CPPlan(pattern(), 512, 2, "zigzag", TILE)
    assert [plan.shard(r) for r in range(2)] == [cp.shard_ranges(512, 2, r, "zigzag") for r in range(2)]
    assert cp.shard_ranges(512, 2, 1, "zigzag") == [(128, 128), (256, 128)]


def test_schedule_split_at_the_receive_buffer():
    p = pattern()
    plan = cp.CPPlan(p, 768, 3, "zigzag", TILE)
    group = p.heads // p.kv_heads
    for r in range(3):
        s = plan.schedule(r)
        R = plan.recv_tokens(r)
        g = s.geom
        assert g.q_tiles * g.block_m == plan.local_tokens(r) and g.kv_tiles * g.block_n == R + plan.local_tokens(r)
        lo, hi = s.split_keys(R // g.block_n)
        assert lo.num_entries + hi.num_entries == s.num_entries and lo.num_entries > 0 and hi.num_entries > 0
        assert (lo.entries["tile"] < R // g.block_n).all() and (hi.entries["tile"] >= R // g.block_n).all()
        assert np.array_equal(np.sort(np.concatenate([lo.entries, hi.entries]), order=["tile", "live"]),
                              np.sort(s.entries, order=["tile", "live"]))
        # the remote part reads exactly the received slots of each class's kv head
        for c in range(s.num_classes):
            kvh = {h // group for h in range(p.heads) if s.class_of_head[h] == c}
            assert len(kvh) == 1
            kv = kvh.pop()
            blocks = set()
            lists = g.q_tiles
            for e in lo.entries[lo.offsets[c * lists]:lo.offsets[(c + 1) * lists]]:
                for j in range(g.sub_n):
                    if any(int(e["live"]) >> (i * g.sub_n + j) & 1 for i in range(g.sub_m)):
                        blocks.add((int(e["tile"]) * g.block_n + j * g.sub_n_size) // p.block_size)
            slots = set(range(len(plan.recv(r, kv))))
            assert blocks <= slots
            if c == s.class_of_head[kv * group]:
                assert blocks, f"rank {r}: class {c} reads no received block"
        assert lo.c_struct().geom.q_tiles == g.q_tiles


def test_argument_errors():
    p = pattern()
    with pytest.raises(ValueError, match="sharding"):
        cp.CPPlan(p, 512, 2, "striped", TILE)
    with pytest.raises(s2c.S2ValueError):
        cp.CPPlan(p, 500, 2, "zigzag", TILE)        # not whole tiles per chunk
    with pytest.raises(s2c.S2ValueError):
        cp.CPPlan(p, 512, 0, "zigzag", TILE)
    with pytest.raises(TypeError):
        cp.CPPlan("pattern", 512, 2)
    with pytest.raises(ValueError, match="rank"):
        cp.CPPlan(p, 512, 2, "zigzag", TILE).recv_tokens(2)
    with pytest.raises(ValueError, match="equal chunks"):
        cp.shard(torch.zeros(1, 10, 1, 1), 3, 0, "zigzag")
    with pytest.raises(ValueError, match="one shard per rank"):
        cp.unshard([torch.zeros(1, 4, 1, 1), torch.zeros(1, 5, 1, 1)])
    q = torch.zeros(1, 128, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="CUDA"):
        cp.sparse_attn_cp(q, q[:, :, :2], q[:, :, :2], p)
    with pytest.raises(ValueError, match="sharding"):
        cp.sparse_attn_cp(q, q[:, :, :2], q[:, :, :2], p, sharding="ring")
    with pytest.raises(ValueError, match="4-D"):
        cp.sparse_attn_cp(q[0], q[0], q[0], p)
    with pytest.raises(ValueError, match="local length"):
        cp.sparse_attn_cp(q, q[:, :64, :2], q[:, :64, :2], p)


# ---- the exchange between processes (gloo) ---------------------------------------------------

def _worker(rank, world, init, cases, errors):
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
        for sharding, seq in cases:
            _exchange_case(rank, world, sharding, seq)
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as e:   # reported by the parent
        errors.put(f"rank {rank}: {type(e).__name__}: {e}")
        raise


def _exchange_case(rank, world, sharding, seq):
    p = pattern()
    plan = cp.CPPlan(p, seq, world, sharding, TILE)
    ex = cp.Exchange(plan, rank)
    B, Hkv, D, R, L = 2, p.kv_heads, 4, ex.R, ex.L
    pos = torch.tensor([t for s, n in plan.shard(rank) for t in range(s, s + n)], dtype=torch.float64)
    b = torch.arange(B, dtype=torch.float64)[:, None, None, None]
    h = torch.arange(Hkv, dtype=torch.float64)[None, None, :, None]
    d = torch.arange(D, dtype=torch.float64)[None, None, None, :] % 10
    own = b * 1e6 + pos[None, :, None, None] * 100 + h * 10 + d
    kv = torch.full((2, B, R + L, Hkv, D), float("nan"), dtype=torch.float64)
    kv[0, :, R:] = own
    kv[1, :, R:] = -own
    cp.exchange_kv(ex, kv, None)
    bs = p.block_size
    filled = torch.zeros(R, Hkv, dtype=torch.bool)
    for g in range(Hkv):
        for blk, slot, owner in plan.recv(rank, g):
            rows = torch.arange(bs) + slot * bs
            want = b[:, :, 0] * 1e6 + (torch.arange(bs, dtype=torch.float64) + blk * bs)[None, :, None] * 100 \
                + g * 10 + d[:, :, 0]
            assert torch.equal(kv[0, :, rows, g], want), f"rank {rank} kv head {g} block {blk}: wrong K"
            assert torch.equal(kv[1, :, rows, g], -want), f"rank {rank} kv head {g} block {blk}: wrong V"
            filled[rows, g] = True
    assert torch.isnan(kv[:, :, :R][:, :, ~filled]).all(), "an unplanned receive row was written"
    assert not torch.isnan(kv[:, :, R:]).any()
    # backward: receiver r sends back (r + 1) * K for each received row; the owner gets its own tokens'
    # rows summed over the receivers, on top of its own
    acc = torch.ones((2, B, L, Hkv, D), dtype=torch.float64)
    grads = kv.clone()
    grads[:, :, :R] *= rank + 1
    cp.return_grads(ex, grads, acc, None)
    want = torch.ones((2, B, L, Hkv, D), dtype=torch.float64)
    for peer in range(world):
        for g in range(Hkv):
            for blk, slot, owner in plan.recv(peer, g):
                if owner != rank:
                    continue
                li = plan.local_index(rank, np.arange(bs) + blk * bs)
                want[0, :, li, g] += (peer + 1) * own[:, li, g]
                want[1, :, li, g] -= (peer + 1) * own[:, li, g]
    assert torch.equal(acc, want), f"rank {rank} ({sharding}): gradients sent home sum wrong " \
        f"({int((acc != want).sum())} elements)"


@pytest.mark.parametrize("world,cases", [(2, [("zigzag", 512), ("contiguous", 512)]), (3, [("zigzag", 768)])])
def test_exchange_over_gloo(world, cases):
    ctx = mp.get_context("spawn")
    errors = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as d:
        init = "file://" + os.path.join(d, "rendezvous")
        procs = [ctx.Process(target=_worker, args=(r, world, init, cases, errors)) for r in range(world)]
        for pr in procs:
            pr.start()
        for pr in procs:
            pr.join(120)
    msgs = []
    while not errors.empty():
        msgs.append(errors.get())
    assert not msgs and all(pr.exitcode == 0 for pr in procs), "\n".join(msgs) or \
        f"exit codes {[pr.exitcode for pr in procs]}"


def test_cp_timeline_arithmetic():
    """bench/e2e/cp_timeline.py's step, NCCL and exposed times on a made-up trace."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "bench" / "e2e" / "cp_timeline.py"
    spec = importlib.util.spec_from_file_location("cp_timeline", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.selftest() == 0
