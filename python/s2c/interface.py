"""A drop-in for the S2 Triton library's API (dkernel.interface): the same
classes, arguments and defaults, on s2c's kernels.

Where that library is wrong, s2c is right (README, "PyTorch"): a
bidirectional pattern whose length is not a multiple of the block keeps the
padding keys of the last block out of the softmax; for 1 < Sq < Sk the
queries are the last Sq positions (that library offsets them only when
Sq = 1)."""
import warnings
from typing import Callable, Optional, Tuple

import torch
from torch import Tensor

from . import ops
from .pattern import Pattern


def _check_power_of_2(x, name):
    if x is not None and (x < 16 or x & (x - 1)):
        raise ValueError(f"{name} must be a power of 2 and at least 16, got {x}")


def _kv_cache_efficient(mask: Tensor) -> bool:
    """A causal mask drops a key block for good once a later query block drops it."""
    m = (mask != 0)
    m = m[None] if m.dim() == 2 else m
    if m.shape[-2] < 2:
        return True
    below_diag = torch.ones(m.shape[-2:], dtype=torch.bool, device=m.device).tril(-1)[1:]
    regained = m[:, 1:] & ~m[:, :-1] & below_diag
    return not bool(regained.any())


class SparseAttention(torch.nn.Module):
    """S2 attention with an arbitrary block mask `sparse_pattern` of [M, N]
    (every head) or [H, M, N] blocks of `block_size` tokens (dkernel's
    SparseAttention).  `block_m`, `block_n` and kernel kwargs such as
    `d_splits` are accepted; s2c picks its own tiles (Merge-Q for blocks
    below 64)."""

    def __init__(self, block_size: int, sparse_pattern: Tensor, *, causal: bool = True,
                 seq_dim: Optional[int] = None, block_m: Optional[int] = None, block_n: Optional[int] = None,
                 **kwargs):
        super().__init__()
        for v, name in ((block_size, "block_size"), (block_m, "block_m"), (block_n, "block_n")):
            _check_power_of_2(v, name)
        if block_size > 128:
            raise NotImplementedError(f"s2c: block_size {block_size} is not covered: 16, 32, 64 or 128")
        mask = torch.as_tensor(sparse_pattern).to(torch.uint8)
        if mask.dim() not in (2, 3):
            raise ValueError(f"sparse_pattern must be 2-D or 3-D, got {mask.dim()} dimensions")
        if causal and not _kv_cache_efficient(mask):
            warnings.warn("The provided sparse_pattern is not efficient for KV cache, i.e., KV cache needed for "
                          "later tokens are not used in earlier tokens. This may result in unexpected larger KV "
                          "cache.")
        self.block_size, self.seq_dim, self.causal = block_size, seq_dim, causal
        self.block_m = block_m or (max(block_size, 64) if causal else block_size)
        self.block_n = block_n or block_size
        self.max_seqlen = max(mask.shape[-2:]) * block_size
        self.kwargs = dict(kwargs, max_seqlen=self.max_seqlen, causal=causal)
        self._mask = mask
        self._patterns, self._pids = {}, {}
        self._sd = 1 if seq_dim is None else seq_dim

    def _pattern_for(self, heads: int, kv_heads: int, q_len: int = 0, kv_len: int = 0) -> Pattern:
        key = (heads, kv_heads, self._row_offset(q_len, kv_len))
        p = self._patterns.get(key)
        if p is None:
            p = self._patterns[key] = self._make_pattern(*key)
        return p

    def _row_offset(self, q_len, kv_len):
        """Blocks between the mask's first row and the first query.  The kernels
        put the queries last (position kv_len - q_len + i); a mask with fewer
        rows than kv_len needs, but enough for the queries, holds the queries'
        rows only (a chunk's mask, as get_sparse_attn_mask makes with
        q_start_position), so its rows start at the first query's block."""
        bs, rows = self.block_size, self._mask.shape[-2]
        need, q_blocks = -(-kv_len // bs), -(-q_len // bs)
        if rows < need and rows >= q_blocks and (kv_len - q_len) % bs == 0:
            return (kv_len - q_len) // bs
        return 0

    def _make_pattern(self, heads, kv_heads, row_offset):
        mask = self._mask
        if mask.dim() == 3 and mask.shape[0] not in (1, heads):
            if mask.shape[0] == kv_heads:       # one slice per kv head: each serves its group
                mask = mask.repeat_interleave(heads // kv_heads, dim=0)
            else:
                raise ValueError(f"Input (q, k) have ({heads}, {kv_heads}) heads but the number of heads in the "
                                 f"sparse pattern is {mask.shape[0]}")
        if row_offset:
            m3 = mask if mask.dim() == 3 else mask[None]
            mask = torch.cat([m3.new_zeros((m3.shape[0], row_offset, m3.shape[2])), m3], dim=1)
        return Pattern.from_mask(self.block_size, mask, causal=self.causal, num_heads=heads,
                                 num_kv_heads=kv_heads)

    def _pid(self, q, k, sd):
        """(pattern id, default scale) of inputs shaped like q, k (checked once per shape)."""
        key = (q.shape, k.shape)
        hit = self._pids.get(key)
        if hit is None:
            if q.dim() != 4 or k.dim() != 4:
                raise ValueError(f"q and k must both be 4-D, got {q.dim()} and {k.dim()} dimensions")
            if k.size(sd) > self.max_seqlen:
                raise ValueError(f"Input length {k.size(sd)} is larger than the maximum length allowed "
                                 f"({self.max_seqlen})")
            hd = 3 - sd
            pat = self._pattern_for(q.shape[hd], k.shape[hd], q.shape[sd], k.shape[sd])
            hit = self._pids[key] = (ops.pattern_id(pat), q.shape[-1] ** -0.5)
        return hit

    def forward(self, q: Tensor, k: Optional[Tensor] = None, v: Optional[Tensor] = None,
                sm_scale: Optional[float] = None, *, cu_seqlen_k: Optional[Tensor] = None,
                cu_seqlen_q: Optional[Tensor] = None, left_paddings: Optional[Tensor] = None,
                seqlens: Optional[Tensor] = None, return_lse: bool = False,
                split_qkv: Optional[Callable] = None):
        if v is None:
            if split_qkv is None:
                raise ValueError("Callable `split_qkv` must be specified if qkv or kv are packed.")
            if k is None:
                q, k, v = split_qkv(q)
            else:
                k, v = split_qkv(k)
        sd = self._sd
        if cu_seqlen_k is None and left_paddings is None and seqlens is None and q.dim() == 4:
            # the common call: one dict lookup, then the launch
            hit = self._pids.get((q.shape, k.shape)) or self._pid(q, k, sd)
            o, lse = ops._attention(q, k, v, hit[0], sm_scale or hit[1], sd, sd, return_lse,
                                    self.kwargs.get("out"))
            return (o, lse) if return_lse else o
        scale = sm_scale or q.shape[-1] ** -0.5
        if q.dim() == 3:
            if cu_seqlen_k is None:
                raise ValueError("3-D (packed) inputs need cu_seqlen_k")
            pat = self._pattern_for(q.shape[1], k.shape[1])
            r = ops.sparse_attn_varlen_func(q, k, v, cu_seqlen_q if cu_seqlen_q is not None else cu_seqlen_k,
                                            cu_seqlen_k, self.max_seqlen, self.max_seqlen, pat, scale,
                                            return_lse=return_lse)
        elif q.dim() == 4:
            if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
                raise NotImplementedError("s2c: padded batches are inference only (as in the S2 library)")
            if k.size(sd) > self.max_seqlen:
                raise ValueError(f"Input length {k.size(sd)} is larger than the maximum length allowed "
                                 f"({self.max_seqlen})")
            pat = self._pattern_for(q.size(3 - sd), k.size(3 - sd), k.size(sd), k.size(sd))
            r = ops.padded_attn(q, k, v, pat, scale, sd, left_paddings, seqlens, return_lse)
        else:
            raise ValueError(f"q must be 3-D (packed) or 4-D, got {q.dim()} dimensions")
        out = self.kwargs.get("out")
        return r if out is None else _into(out, r, return_lse)


def _into(out, r, return_lse):
    if out is None:
        return r
    o = r[0] if return_lse else r
    out.copy_(o)
    return (out, r[1]) if return_lse else out


class LocalStrideSparseAttention(SparseAttention):
    """The S2 local-stride pattern (dkernel's LocalStrideSparseAttention): every
    head keeps `local_blocks` blocks before it and every `vert_stride`-th
    block, shifted per kv head; the last `num_dense_heads` kv heads are dense.
    The pattern goes to the kernels as rules (no mask is materialised)."""

    def __init__(self, num_heads: int, max_seq_len: int, block_size: int, local_blocks: int, vert_stride: int,
                 *, homo_head: bool = False, num_dense_heads: int = 0, num_kv_heads: Optional[int] = None,
                 active_head_range: Optional[Tuple[int, int]] = None, head_sliding_offset: int = 0,
                 block_m: Optional[int] = None, block_n: Optional[int] = None, causal: bool = True, **kwargs):
        torch.nn.Module.__init__(self)
        if vert_stride < 1:
            raise ValueError("Vertical stride should be position integer. Value 1 will collapse to dense attention.")
        if vert_stride > 1 and causal and local_blocks < 1:
            raise ValueError("Token in the first block will attend to nothing in some blocks.")
        for v, name in ((block_size, "block_size"), (block_m, "block_m"), (block_n, "block_n")):
            _check_power_of_2(v, name)
        if block_size > 128:
            raise NotImplementedError(f"s2c: block_size {block_size} is not covered: 16, 32, 64 or 128")
        mult = max(block_size, block_m or 1, block_n or 1, 64)
        self.max_seq_len = _cdiv(max_seq_len, mult) * mult
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.local_blocks, self.vert_stride = local_blocks, vert_stride
        self.homo_head, self.num_dense_heads = homo_head, num_dense_heads
        self.block_size, self.seq_dim, self.causal = block_size, kwargs.pop("seq_dim", None), causal
        self.block_m = block_m or (max(block_size, 64) if causal else block_size)
        self.block_n = block_n or block_size
        self.max_seqlen = self.max_seq_len
        self.kwargs = dict(kwargs, max_seqlen=self.max_seqlen, causal=causal)
        self._base = Pattern.local_stride(num_heads, block_size, local_blocks, vert_stride,
                                          num_kv_heads=num_kv_heads, homo_head=homo_head,
                                          num_dense_heads=num_dense_heads, head_sliding_offset=head_sliding_offset,
                                          causal=causal, active_head_range=active_head_range,
                                          max_seq_len=self.max_seq_len, name="local_stride")
        self._patterns, self._pids = {}, {}
        self._sd = 1 if self.seq_dim is None else self.seq_dim

    def _row_offset(self, q_len, kv_len):
        return 0      # rules are positional: no mask rows to place

    def _make_pattern(self, heads, kv_heads, row_offset=0):
        base = self._base
        if heads == base.heads and kv_heads != base.kv_heads:
            # inputs grouped unlike the declared kv heads (k, v repeated, say): same rules per query head
            return Pattern(base.rules, block_size=base.block_size, causal=base.causal, kv_heads=kv_heads,
                           vert_position=base.vert_position, max_seq_len=base.max_seq_len, name=base.name)
        if heads != base.heads and not base.uniform:
            raise ValueError(f"Input (q, k) have ({heads}, {kv_heads}) heads but the number of heads in the "
                             f"sparse pattern is {base.heads}")
        return base.for_heads(heads, kv_heads)


def _cdiv(a, b):
    return -(-a // b)


def combine_attn_partitions(*x: Tuple[Tensor, Tensor], hdim: int = 1) -> Tensor:
    """Merge attention outputs over disjoint key sets from (output, lse) pairs
    (context parallelism): a softmax over the partitions' LSEs weighs their
    outputs.  Each lse has its output's shape without the last dimension
    (output [B, H, S, D] with lse [B, H, S]); `hdim` is accepted and unused,
    as in the S2 library."""
    if len(x) < 2 or any(len(p) != 2 for p in x):
        raise ValueError("combine_attn_partitions takes two or more (output, lse) pairs")
    outs, lses = zip(*x)
    w = torch.stack(lses, 0).softmax(0)
    return (torch.stack(outs, 0) * w.unsqueeze(-1)).sum(0).type_as(outs[0])


__all__ = ["SparseAttention", "LocalStrideSparseAttention", "combine_attn_partitions"]
