"""Context parallelism: one sequence sharded over the ranks of a
torch.distributed group, each rank receiving only the KV blocks its query
heads read (the C plan, s2c/cpplan.h), not every block as ring attention.

    o_local = s2c.cp.sparse_attn_cp(q_local, k_local, v_local, pattern, group, sharding="zigzag")

q_local, k_local, v_local are the rank's tokens (`shard`): contiguous (rank r
holds chunk r of P) or zigzag (2P chunks; rank r holds chunks r and 2P-1-r,
the causal load balance).  Per call the planned blocks travel with
batch_isend_irecv on a side stream while the local keys' attention runs; the
received keys' attention follows and the two are merged by the LSE combine.
The backward sends the dK/dV of received blocks back to their owners, which
add them in rank order (deterministic).  Run one process per GPU with the
NCCL backend; NVLink multicast stays off (NCCL_NVLS_ENABLE=0, set here before
any process group exists unless the environment says otherwise)."""
import os

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import ctypes as C  # noqa: E402
import threading  # noqa: E402
from typing import Dict, List, Optional, Sequence, Tuple  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import Tensor  # noqa: E402

from . import _lib  # noqa: E402
from . import _structs as S  # noqa: E402
from .pattern import Pattern  # noqa: E402

SHARDINGS = {"contiguous": S.CP_CONTIGUOUS, "zigzag": S.CP_ZIGZAG}


def _sharding_code(sharding: str) -> int:
    try:
        return SHARDINGS[sharding]
    except (KeyError, TypeError):
        raise ValueError(f"s2c: sharding must be 'contiguous' or 'zigzag', got {sharding!r}") from None


# ---- sharding a sequence ----------------------------------------------------------------

def shard_ranges(seq_len: int, world: int, rank: int, sharding: str = "zigzag") -> List[Tuple[int, int]]:
    """The (start, length) token ranges rank holds, in the order its shard
    lays them out (the C plan's s2_cp_plan_shard)."""
    code = _sharding_code(sharding)
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"s2c: rank {rank} of a world of {world}")
    chunks = world * (2 if code == S.CP_ZIGZAG else 1)
    if seq_len < chunks or seq_len % chunks:
        raise ValueError(f"s2c: {seq_len} tokens do not split into {chunks} equal chunks ({sharding}, {world} ranks)")
    c = seq_len // chunks
    if code == S.CP_CONTIGUOUS:
        return [(rank * c, c)]
    return [(rank * c, c), ((2 * world - 1 - rank) * c, c)]


def shard(x: Tensor, world: int, rank: int, sharding: str = "zigzag", seq_dim: int = 1) -> Tensor:
    """Rank's tokens of a full sequence x along seq_dim (a new tensor)."""
    parts = [x.narrow(seq_dim, s, n) for s, n in shard_ranges(x.shape[seq_dim], world, rank, sharding)]
    return torch.cat(parts, dim=seq_dim) if len(parts) > 1 else parts[0].clone()


def unshard(parts: Sequence[Tensor], sharding: str = "zigzag", seq_dim: int = 1) -> Tensor:
    """The full sequence from every rank's shard (parts[r] is rank r's), the
    inverse of `shard`."""
    world = len(parts)
    if world < 1 or any(p.shape != parts[0].shape for p in parts):
        raise ValueError(f"s2c: unshard takes one shard per rank, all of one shape, got "
                         f"{[tuple(p.shape) for p in parts]}")
    local = parts[0].shape[seq_dim]
    seq_len = local * world
    pieces = []
    for r, p in enumerate(parts):
        off = 0
        for start, n in shard_ranges(seq_len, world, r, sharding):
            pieces.append((start, p.narrow(seq_dim, off, n)))
            off += n
    pieces.sort(key=lambda t: t[0])
    return torch.cat([t for _, t in pieces], dim=seq_dim)


# ---- the plan ---------------------------------------------------------------------------

def _blocks(ptr, n):
    """An s2_cp_block list as an int64 array [n, 3]: block, slot, peer."""
    out = np.zeros((n, 3), dtype=np.int64)
    for i in range(n):
        b = ptr[i]
        out[i] = (b.block, b.slot, b.peer)
    return out


class Sched:
    """A schedule on the host (layout.h's s2_schedule, copied): geometry,
    class_of_head, CSR offsets and entries (a structured array of
    s2_tile_entry's fields)."""
    ENTRY = np.dtype([("tile", "<i8"), ("live", "<u8"), ("row_mask", "<u4"), ("flags", "<u4")])

    def __init__(self, geom, num_classes, class_of_head, offsets, entries, transposed=False):
        self.geom, self.num_classes, self.transposed = geom, num_classes, transposed
        self.class_of_head = np.ascontiguousarray(class_of_head, dtype=np.int32)
        self.offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        self.entries = np.ascontiguousarray(entries, dtype=self.ENTRY)

    @classmethod
    def from_c(cls, s):
        c = s.contents
        g = c.geom
        geom = S.TileGeom.from_buffer_copy(g)
        lists = g.kv_tiles if c.transposed else g.q_tiles
        offsets = np.ctypeslib.as_array(c.offsets, shape=(c.num_classes * lists + 1,)).copy()
        n = int(offsets[-1])
        entries = np.zeros(n, dtype=cls.ENTRY)
        if n:
            raw = np.frombuffer((S.TileEntry * n).from_address(C.addressof(c.entries.contents)), dtype=np.uint8)
            entries = raw.view(cls.ENTRY).copy()
        coh = np.ctypeslib.as_array(c.class_of_head, shape=(c.heads,)).copy()
        return cls(geom, c.num_classes, coh, offsets, entries, bool(c.transposed))

    @property
    def num_entries(self):
        return int(self.offsets[-1])

    def split_keys(self, cut_tile: int) -> Tuple["Sched", "Sched"]:
        """(entries of key tiles below cut_tile, the rest): every list keeps
        its order, so each part is a schedule of the same layout."""
        assert not self.transposed
        low = self.entries["tile"] < cut_tile
        cum = np.concatenate([[0], np.cumsum(low, dtype=np.int64)])
        lo_off = cum[self.offsets]
        hi_off = self.offsets - lo_off
        return (Sched(self.geom, self.num_classes, self.class_of_head, lo_off, self.entries[low]),
                Sched(self.geom, self.num_classes, self.class_of_head, hi_off, self.entries[~low]))

    def c_struct(self):
        """An s2_schedule over this object's arrays (alive while self is)."""
        s = S.Schedule(geom=self.geom, num_classes=self.num_classes, heads=len(self.class_of_head),
                       transposed=self.transposed)
        s.class_of_head = self.class_of_head.ctypes.data_as(C.POINTER(C.c_int))
        s.offsets = self.offsets.ctypes.data_as(C.POINTER(C.c_int64))
        s.entries = self.entries.ctypes.data_as(C.POINTER(S.TileEntry)) if self.num_entries else \
            C.cast(self.offsets.ctypes.data, C.POINTER(S.TileEntry))   # not read: no entry
        return s


class CPPlan:
    """The C plan (s2_cp_plan_new) of `pattern` over `world` ranks: per rank
    and kv head the KV blocks received (block, slot, owner) and sent (block,
    receiver's slot, receiver), the receive buffer's tokens, and with
    `schedules` each rank's forward schedule over its layout (the receive
    buffer, then its own tokens), in tiles `tile` = (block_m, block_n)."""

    def __init__(self, pattern: Pattern, seq_len: int, world: int, sharding: str = "zigzag",
                 tile: Optional[Tuple[int, int]] = None, schedules: bool = True):
        if not isinstance(pattern, Pattern):
            raise TypeError(f"s2c: pattern must be an s2c.Pattern, got {type(pattern).__name__}")
        code = _sharding_code(sharding)
        bm, bn = tile or (max(64, pattern.block_size),) * 2
        self.pattern, self.seq_len, self.world, self.sharding = pattern, int(seq_len), int(world), sharding
        self.tile, self.block_size, self.kv_heads = (int(bm), int(bn)), pattern.block_size, pattern.kv_heads
        L, ctx = _lib.lib(), _lib.ctx()
        a = S.CpPlanArgs(seq_len=self.seq_len, ranks=self.world, sharding=code,
                         spec=S.TileSpec(block_m=int(bm), block_n=int(bn)), schedules=bool(schedules))
        out = C.c_void_p()
        _lib.check(L.s2_cp_plan_new(ctx, pattern.c_pattern(), C.byref(a), C.byref(out)), "context-parallel plan")
        self._ptr = out.value
        self._free = L.s2_cp_plan_free

    def __del__(self):
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr:
            self._free(ptr)

    def _rank(self, rank):
        if not 0 <= rank < self.world:
            raise ValueError(f"s2c: rank {rank} of a world of {self.world}")
        return rank

    def shard(self, rank: int) -> List[Tuple[int, int]]:
        start, n = (C.c_int64 * 2)(), (C.c_int64 * 2)()
        k = _lib.lib().s2_cp_plan_shard(self._ptr, self._rank(rank), start, n)
        return [(start[i], n[i]) for i in range(k)]

    def local_tokens(self, rank: int) -> int:
        return sum(n for _, n in self.shard(rank))

    def owner(self, block: int) -> int:
        return _lib.lib().s2_cp_plan_owner(self._ptr, int(block))

    def recv_tokens(self, rank: int) -> int:
        return _lib.lib().s2_cp_plan_recv_tokens(self._ptr, self._rank(rank))

    def _list(self, fn, rank, kv_head):
        ptr, n = C.POINTER(S.CpBlock)(), C.c_int64()
        _lib.check(fn(_lib.ctx(), self._ptr, int(rank), int(kv_head), C.byref(ptr), C.byref(n)), "cp plan list")
        return _blocks(ptr, n.value)

    def recv(self, rank: int, kv_head: int) -> np.ndarray:
        """[n, 3]: block, slot, owner, by increasing block."""
        return self._list(_lib.lib().s2_cp_plan_recv, rank, kv_head)

    def send(self, rank: int, kv_head: int) -> np.ndarray:
        """[n, 3]: block, the receiver's slot, receiver; by receiver, then block."""
        return self._list(_lib.lib().s2_cp_plan_send, rank, kv_head)

    def schedule(self, rank: int) -> Optional[Sched]:
        """Rank's forward schedule over its layout (None: planned without)."""
        s = _lib.lib().s2_cp_plan_schedule(self._ptr, self._rank(rank), False)
        return Sched.from_c(s) if s else None

    def stats(self, rank: int, head_dim: int = 128, dtype: torch.dtype = torch.bfloat16) -> Dict[str, float]:
        """Rank's traffic (bytes of K and V received, sent; ring attention's)
        and work (kept pairs, forward FLOPs) as the plan counts them."""
        code = {torch.float16: S.DTYPE_F16, torch.bfloat16: S.DTYPE_BF16, torch.float32: S.DTYPE_F32}[dtype]
        st = S.CpRankStats()
        _lib.check(_lib.lib().s2_cp_plan_rank_stats(_lib.ctx(), self._ptr, self._rank(rank), head_dim, code,
                                                    C.byref(st)), "cp plan stats")
        return {name: getattr(st, name) for name, _ in S.CpRankStats._fields_}

    def local_index(self, rank: int, pos: np.ndarray) -> np.ndarray:
        """Index in rank's shard of its tokens at sequence positions pos."""
        pos = np.asarray(pos, dtype=np.int64)
        out = np.full(pos.shape, -1, dtype=np.int64)
        off = 0
        for start, n in self.shard(rank):
            inside = (pos >= start) & (pos < start + n)
            out[inside] = pos[inside] - start + off
            off += n
        if (out < 0).any():
            raise ValueError(f"s2c: positions not held by rank {rank}")
        return out


# ---- the exchange's bookkeeping ------------------------------------------------------------

class Exchange:
    """Rank's traffic in buffer positions.  A rank's K/V buffer is [.., R + L,
    kv_heads, D]: its receive slots (R tokens), then its L own tokens.
    send[p] = (tokens, heads): the buffer rows it sends to peer p, in the
    order p's recv[rank] = (tokens, heads) names where they land in p's
    buffer.  The backward returns the same rows the other way."""

    def __init__(self, plan: CPPlan, rank: int):
        bs, R = plan.block_size, plan.recv_tokens(rank)
        self.rank, self.world, self.R, self.L = rank, plan.world, R, plan.local_tokens(rank)
        ar = np.arange(bs, dtype=np.int64)
        send: Dict[int, List[Tuple[np.ndarray, np.ndarray]]] = {}
        recv: Dict[int, List[Tuple[np.ndarray, np.ndarray]]] = {}
        for g in range(plan.kv_heads):
            for lst, out, is_send in ((plan.send(rank, g), send, True), (plan.recv(rank, g), recv, False)):
                for p in np.unique(lst[:, 2]) if len(lst) else ():
                    rows = lst[lst[:, 2] == p]      # by block (the plan's order within a peer)
                    if is_send:
                        tok = R + plan.local_index(rank, rows[:, 0] * bs)[:, None] + ar
                    else:
                        tok = rows[:, 1][:, None] * bs + ar
                    tok = tok.reshape(-1)
                    out.setdefault(int(p), []).append((tok, np.full(tok.shape, g, dtype=np.int64)))
        cat = lambda d: {p: (np.concatenate([t for t, _ in v]), np.concatenate([h for _, h in v]))  # noqa: E731
                         for p, v in sorted(d.items())}
        self.send, self.recv = cat(send), cat(recv)
        self.peers = sorted(set(self.send) | set(self.recv))
        self._dev = {}

    def rows(self, device):
        """The index tensors on device: {peer: (send_tok, send_head, recv_tok, recv_head)} (None where absent)."""
        key = str(device)
        d = self._dev.get(key)
        if d is None:
            t = lambda a: None if a is None else torch.from_numpy(a).to(device)  # noqa: E731
            d = self._dev[key] = {p: (*map(t, self.send.get(p, (None, None))), *map(t, self.recv.get(p, (None, None))))
                                  for p in self.peers}
        return d


def _global_rank(group, r):
    if group is None:
        return r
    fn = getattr(dist, "get_global_rank", None) or dist.distributed_c10d._get_global_rank
    return fn(group, r)


def _p2p(ex: Exchange, group, outgoing: Dict[int, Tensor], incoming_shape, dtype, device) -> Dict[int, Tensor]:
    """One grouped exchange: outgoing[p] to each peer p, and from each peer
    a tensor of incoming_shape(p); all posted together, waited on (for NCCL:
    the current stream waits)."""
    ops, got = [], {}
    for p in ex.peers:
        shape = incoming_shape(p)
        if shape is not None:
            got[p] = torch.empty(shape, dtype=dtype, device=device)
            ops.append(dist.P2POp(dist.irecv, got[p], _global_rank(group, p), group))
        if p in outgoing:
            ops.append(dist.P2POp(dist.isend, outgoing[p], _global_rank(group, p), group))
    if ops:
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    return got


def exchange_kv(ex: Exchange, kv: Tensor, group=None) -> None:
    """Fill kv's receive slots ([..., R + L, kv_heads, D], own tokens at R..)
    with the planned blocks of the other ranks.  Leading dimensions (K and
    V, batch) travel together."""
    rows = ex.rows(kv.device)
    lead = kv.shape[:-3]
    out = {p: kv[..., r[0], r[1], :].contiguous() for p, r in rows.items() if r[0] is not None}
    got = _p2p(ex, group, out, lambda p: (*lead, len(ex.recv[p][0]), kv.shape[-1]) if p in ex.recv else None,
               kv.dtype, kv.device)
    for p in ex.peers:
        if p in got:
            r = rows[p]
            kv[..., r[2], r[3], :] = got[p]


def _send_grads_home(ex: Exchange, dkv: Optional[Tensor], lead, d, dtype, device, group=None) -> Dict[int, Tensor]:
    """The backward's exchange: the rows of dkv ([*lead, R + L, kv_heads, d])
    at this rank's receive slots go back to their owners; returns what each
    peer sends back to this rank (its rows of this rank's own tokens)."""
    rows = ex.rows(device)
    out = {p: dkv[..., r[2], r[3], :].contiguous() for p, r in rows.items() if r[2] is not None}
    return _p2p(ex, group, out, lambda p: (*lead, len(ex.send[p][0]), d) if p in ex.send else None, dtype, device)


def _add_grads(ex: Exchange, acc: Tensor, got: Dict[int, Tensor]) -> None:
    """acc ([..., L, kv_heads, D], this rank's tokens) += what each peer sent
    back, peer by peer in rank order: the same sum on every run (no two rows
    of one peer's message land on one row)."""
    rows = ex.rows(acc.device)
    for p in ex.peers:
        if p in got:
            tok, head = rows[p][0] - ex.R, rows[p][1]
            acc[..., tok, head, :] = acc[..., tok, head, :] + got[p].to(acc.dtype)


def return_grads(ex: Exchange, dkv: Tensor, acc: Tensor, group=None) -> None:
    """dkv ([..., R + L, kv_heads, D]) holds the gradients of this rank's
    receive slots: each goes back to its owner, which adds what it gets into
    acc ([..., L, kv_heads, D], its own tokens)."""
    got = _send_grads_home(ex, dkv, dkv.shape[:-3], dkv.shape[-1], dkv.dtype, dkv.device, group)
    _add_grads(ex, acc, got)


# ---- the GPU path -------------------------------------------------------------------------

_lock = threading.RLock()
_states = {}
_streams = {}


def _comm_stream(index):
    s = _streams.get(index)
    if s is None:
        s = _streams[index] = torch.cuda.Stream(index)
    return s


def kernel_tile(kern) -> Tuple[int, int]:
    """The tile of the forward schedule a kernel reads (its own schedule's geometry)."""
    L, ctx = _lib.lib(), _lib.ctx()
    n = min(256, kern.max_kv_len)
    out = C.POINTER(S.Schedule)()
    _lib.check(L.s2_attn_kernel_schedule(ctx, kern.ptr, n, n, C.byref(out)), "kernel schedule")
    g = out.contents.geom
    tile = (g.block_m, g.block_n)
    L.s2_schedule_free(out)
    return tile


class _KernelScheds:
    """One kernel's uploaded schedules over a rank's layout: its keys split
    at the receive buffer (remote: tiles below R; local: the rest)."""

    def __init__(self, kern, plan: CPPlan, rank: int):
        self.kern = kern
        self.R, self.L = plan.recv_tokens(rank), plan.local_tokens(rank)
        whole = plan.schedule(rank)
        remote, local = whole.split_keys(self.R // whole.geom.block_n)
        self.counts = (remote.num_entries, local.num_entries)
        self.remote = self._upload(remote) if remote.num_entries else None
        self.local = self._upload(local) if local.num_entries else None

    def workspace(self, batch):
        """Bytes of a backward workspace that takes the dS path in both launches."""
        most = 16
        for s in (self.remote, self.local):
            if s:
                n = C.c_size_t()
                _lib.check(_lib.lib().s2_attn_sched_backward_workspace(_lib.ctx(), s, batch, C.byref(n)), "workspace")
                most = max(most, n.value)
        return most

    def _upload(self, sched):
        L, ctx = _lib.lib(), _lib.ctx()
        cs = sched.c_struct()
        out = C.c_void_p()
        _lib.check(L.s2_attn_sched_new(ctx, self.kern.ptr, self.L, self.R + self.L, C.byref(cs), C.byref(out)),
                   "context-parallel schedule")
        return out.value

    def __del__(self):
        L = _lib._lib
        for s in (getattr(self, "remote", None), getattr(self, "local", None)):
            if s and L is not None:
                L.s2_attn_sched_free(s)


class _State:
    """Everything one rank's calls of one signature reuse: the plans (one per
    kernel tile), the exchange's rows and the uploaded schedules."""

    def __init__(self, pat, seq_len, world, rank, sharding, fwd_kern, bwd_kern):
        self.pat, self.world, self.rank = pat, world, rank
        self.fwd_kern, self.bwd_kern = fwd_kern, bwd_kern
        tf = kernel_tile(fwd_kern)
        self.plan = CPPlan(pat, seq_len, world, sharding, tf)
        self.ex = Exchange(self.plan, rank)
        self.R, self.L = self.ex.R, self.ex.L
        self.fwd = _KernelScheds(fwd_kern, self.plan, rank)
        self.bwd = None
        self.sharding, self.seq_len = sharding, seq_len

    def backward_scheds(self):
        if self.bwd is None:
            tb = kernel_tile(self.bwd_kern)
            plan = self.plan if tb == self.plan.tile else CPPlan(self.pat, self.seq_len, self.world, self.sharding, tb)
            for g in range(self.pat.kv_heads):   # one receive order: the forward's buffer serves
                if not np.array_equal(plan.recv(self.rank, g), self.plan.recv(self.rank, g)):
                    raise RuntimeError("s2c: the backward's plan receives other blocks than the forward's")
            self.bwd = _KernelScheds(self.bwd_kern, plan, self.rank)
            self.bwd_plan = plan
        return self.bwd


def _state(pat, seq_len, world, rank, sharding, dtype_code, D, device_index):
    from . import _runtime as R
    key = (pat.key, seq_len, world, rank, sharding, dtype_code, D, device_index)
    st = _states.get(key)
    if st is None:
        with _lock:
            st = _states.get(key)
            if st is None:
                dev = R.device(device_index)
                fk = dev.kernel(pat, S.KIND_FWD, dtype_code, D)
                bk = dev.kernel(pat, S.KIND_BWD, dtype_code, D) if D in R.BWD_HEAD_DIMS else None
                st = _states[key] = _State(pat, seq_len, world, rank, sharding, fk, bk)
    return st


def _bsh(t):
    return (t.stride(0), t.stride(1), t.stride(2))


def _fwd_launch(st, sched, q, k, v, scale):
    from . import _runtime as R
    B, Lq, H, D = q.shape
    o = torch.empty((B, Lq, H, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, Lq), dtype=torch.float32, device=q.device)
    a = S.FwdArgs(batch=B, q_len=Lq, kv_len=k.shape[1], heads=H, kv_heads=k.shape[2], head_dim=D,
                  dtype=R.dtype_code(q), q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(),
                  lse=lse.data_ptr(), scale=scale)
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        getattr(a, name + "_stride")[:] = _bsh(t)
    _lib.check(_lib.lib().s2_attn_forward_sched(_lib.ctx(), st.fwd_kern.ptr, R.stream_of(q), C.byref(a), sched),
               "context-parallel forward")
    return o, lse


def _combine(st, parts, q):
    from . import _runtime as R
    B, Lq, H, D = q.shape
    o = torch.empty_like(parts[0][0])
    lse = torch.empty_like(parts[0][1])
    a = S.CombineArgs(n=len(parts), batch=B, heads=H, head_dim=D, seq=Lq, dtype=R.dtype_code(q), o=o.data_ptr(),
                      lse=lse.data_ptr())
    for i, (oi, li) in enumerate(parts):
        a.o_in[i], a.lse_in[i] = oi.data_ptr(), li.data_ptr()
    a.in_stride[:] = _bsh(parts[0][0])
    a.o_stride[:] = _bsh(o)
    _lib.check(_lib.lib().s2_combine(_lib.ctx(), st.fwd_kern.ptr, R.stream_of(q), C.byref(a)), "LSE combine")
    return o, lse


def _bwd_launch(st, sched, do, q, k, v, o, lse, scale, ws):
    from . import _runtime as R
    B, Lq, H, D = q.shape
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    dkv = torch.empty((2, *k.shape), dtype=k.dtype, device=k.device)
    a = S.BwdArgs(batch=B, q_len=Lq, kv_len=k.shape[1], heads=H, kv_heads=k.shape[2], head_dim=D,
                  dtype=R.dtype_code(q), q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(),
                  d_o=do.data_ptr(), lse=lse.data_ptr(), dq=dq.data_ptr(), dk=dkv[0].data_ptr(),
                  dv=dkv[1].data_ptr(), workspace=ws.data_ptr(), workspace_bytes=ws.numel(), scale=scale)
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do), ("dq", dq), ("dk", dkv[0]),
                    ("dv", dkv[1])):
        getattr(a, name + "_stride")[:] = _bsh(t)
    _lib.check(_lib.lib().s2_attn_backward_sched(_lib.ctx(), st.bwd_kern.ptr, R.stream_of(q), C.byref(a), sched),
               "context-parallel backward")
    return dq, dkv


class _CPAttention(torch.autograd.Function):

    @staticmethod
    def forward(ctx, q, k, v, st, scale, group):
        B, Lq, Hkv, D = k.shape
        R = st.R
        cur = torch.cuda.current_stream(q.device)
        kv = torch.empty((2, B, R + Lq, Hkv, D), dtype=k.dtype, device=k.device)
        kv[0, :, R:] = k
        kv[1, :, R:] = v
        comm = None
        if st.ex.peers:
            comm = _comm_stream(q.device.index)
            comm.wait_stream(cur)
            kv.record_stream(comm)
            with torch.cuda.stream(comm):
                exchange_kv(st.ex, kv, group)
        parts = []
        if st.fwd.local:
            parts.append(_fwd_launch(st, st.fwd.local, q, kv[0], kv[1], scale))   # overlaps the exchange
        if comm is not None:
            cur.wait_stream(comm)
        if st.fwd.remote:
            parts.append(_fwd_launch(st, st.fwd.remote, q, kv[0], kv[1], scale))
        o, lse = parts[0] if len(parts) == 1 else _combine(st, parts, q)
        ctx.save_for_backward(q, kv, o, lse)
        ctx.st, ctx.scale, ctx.group = st, scale, group
        return o

    @staticmethod
    def backward(ctx, do):
        q, kv, o, lse = ctx.saved_tensors
        st, scale, group = ctx.st, ctx.scale, ctx.group
        if st.bwd_kern is None:
            raise NotImplementedError(f"s2c: head_dim {q.shape[-1]} is not covered by the backward kernels")
        sch = st.backward_scheds()
        do = do.contiguous()
        if sch.R != st.R:   # the backward kernel's tiles align the receive buffer otherwise
            kv = torch.cat([kv[:, :, :sch.R], kv[:, :, st.R:]], dim=2)
        B, Lq = q.shape[0], q.shape[1]
        ws = torch.empty(sch.workspace(B), dtype=torch.uint8, device=q.device)   # one for both launches
        cur = torch.cuda.current_stream(q.device)
        comm = _comm_stream(q.device.index) if st.ex.peers else None
        dqs, dkv_r, got = [], None, {}
        if sch.remote:
            dq_r, dkv_r = _bwd_launch(st, sch.remote, do, q, kv[0], kv[1], o, lse, scale, ws)
            dqs.append(dq_r)
        if comm is not None:
            # the received blocks' gradients go home while the local keys' backward runs
            comm.wait_stream(cur)
            with torch.cuda.stream(comm):
                if dkv_r is not None:
                    dkv_r.record_stream(comm)
                got = _send_grads_home(st.ex, dkv_r, (2, B), q.shape[-1], kv.dtype, q.device, group)
        if sch.local:
            dq_l, dkv_l = _bwd_launch(st, sch.local, do, q, kv[0], kv[1], o, lse, scale, ws)
            dqs.append(dq_l)
            acc = dkv_l[:, :, sch.R:].float()
        else:
            acc = torch.zeros((2, B, Lq) + tuple(kv.shape[3:]), dtype=torch.float32, device=q.device)
        if comm is not None:
            cur.wait_stream(comm)
            for t in got.values():
                t.record_stream(cur)
            _add_grads(st.ex, acc, got)
        dq = dqs[0] if len(dqs) == 1 else (dqs[0].float() + dqs[1].float()).to(q.dtype)
        dkv_out = acc.to(q.dtype)
        return dq, dkv_out[0], dkv_out[1], None, None, None


def _group_info(group):
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("s2c: context parallelism needs torch.distributed initialised (init_process_group)")
    return dist.get_world_size(group), dist.get_rank(group)


def sparse_attn_cp(q: Tensor, k: Tensor, v: Tensor, pattern: Pattern, group=None, sharding: str = "zigzag",
                   softmax_scale: Optional[float] = None, layout: str = "bshd") -> Tensor:
    """S2 attention of one sequence sharded over the ranks of `group` (None:
    the default group): q [B, L, H, D] and k, v [B, L, Hkv, D] (layout
    "bshd"; "bhsd" takes [B, H, L, D]) are this rank's L tokens as
    `shard(x, world, rank, sharding)` cuts them; the sequence is L x world
    tokens, each chunk whole tiles (the plan says which size).  Returns this
    rank's o in the input layout; differentiable in q, k, v (every rank must
    run the backward: it exchanges dK/dV).  The plan, the exchange's rows and
    the schedules are built at the first call of a signature and kept."""
    from . import _runtime as R
    from .ops import _scale
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f"s2c: layout must be 'bshd' or 'bhsd', got {layout!r}")
    if not isinstance(pattern, Pattern):
        raise TypeError(f"s2c: pattern must be an s2c.Pattern, got {type(pattern).__name__}")
    _sharding_code(sharding)
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"s2c: q, k, v must be 4-D, got {q.dim()}, {k.dim()}, {v.dim()} dimensions")
    if layout == "bhsd":
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[1] != k.shape[1] or q.shape[3] != k.shape[3]:
        raise ValueError(f"s2c: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: one batch, local length "
                         "and head_dim; k and v of one shape")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"s2c: q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.is_cuda or k.device != q.device or v.device != q.device:
        raise ValueError(f"s2c: q, k, v must be on one CUDA device, got {q.device}, {k.device}, {v.device}")
    code = R.dtype_code(q)
    R.check_head_dim(q.shape[3])
    world, rank = _group_info(group)
    B, Lq, H, D = q.shape
    pat = pattern.for_heads(H, k.shape[2])
    st = _state(pat, Lq * world, world, rank, sharding, code, D, q.device.index)
    if q.stride(-1) != 1 or any(s % 8 for s in q.stride()[:3]) or q.data_ptr() % 16:
        q = q.contiguous()
    o = _CPAttention.apply(q, k, v, st, _scale(softmax_scale, D), group)
    return o.transpose(1, 2) if layout == "bhsd" else o


__all__ = ["sparse_attn_cp", "shard", "unshard", "shard_ranges", "CPPlan", "Exchange", "Sched", "exchange_kv",
           "return_grads", "kernel_tile"]
