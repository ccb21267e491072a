"""The S2 library's mask helpers (dkernel.utils' public ones), written from the
pattern semantics of include/s2c/pattern.h; tests check them against the
golden masks and against the C library."""
from typing import Tuple, Union

import torch
from torch import Tensor


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def dense_to_crow_col(x: Tensor) -> Tuple[Tensor, Tensor]:
    """CSR indices of a 2-D or 3-D block mask: crow [.., M + 1] and col [.., nnz_max]
    (padded with -1), int32, on x's device."""
    squeeze = x.dim() == 2
    xs = (x[None] if squeeze else x).to("cpu") != 0
    counts = xs.sum(-1).to(torch.int32)
    crow = torch.cat([torch.zeros(xs.shape[0], 1, dtype=torch.int32), counts.cumsum(-1).to(torch.int32)], dim=1)
    width = int(crow[:, -1].max()) if xs.numel() else 0
    col = torch.full((xs.shape[0], width), -1, dtype=torch.int32)
    for h in range(xs.shape[0]):
        idx = xs[h].nonzero()[:, 1].to(torch.int32)
        col[h, :idx.numel()] = idx
    if squeeze:
        crow, col = crow[0], col[0]
    return crow.to(x.device), col.to(x.device)


def get_sparse_attn_mask(num_heads: int, seqlen: int, block_size: int = 64,
                         local_blocks: Union[int, Tuple[int, int]] = 4, vert_stride: int = 4, homo_head=False,
                         num_kv_heads=None, past_len=None, dtype=torch.bfloat16, device=None, return_dense=False,
                         head_sliding_step=None, head_sliding_offset=0, num_dense_heads=0, kv_seqlen: int = None,
                         q_start_position=None, kv_start_position=None, vert_position_type=None, causal=True):
    """The S2 library's mask: ((crow, col), block_mask, dense_mask or None).

    block_mask is [heads, q_blocks, kv_blocks] (heads is 1 for homo_head, and
    for a relative-position pattern without dense heads), its q rows starting
    at past_len's block; dense_mask (return_dense) is per token, [heads,
    seqlen - past_len, kv_seqlen], with the causal limit applied per token."""
    past_len = past_len or 0
    kv_seqlen = kv_seqlen or seqlen
    if homo_head:
        if num_dense_heads:
            raise ValueError("homo_head patterns cannot have dense heads")
        num_heads = 1
    if vert_position_type is None:
        vert_position_type = "absolute" if causal else "relative"
    elif vert_position_type not in ("absolute", "relative"):
        raise ValueError(f"vert_position_type must be 'absolute' or 'relative', got {vert_position_type!r}")
    kv_heads = num_kv_heads or num_heads
    group = max(num_heads // kv_heads, 1)
    q0 = k0 = 0
    if q_start_position is not None:
        if q_start_position % block_size or past_len:
            raise ValueError("q_start_position must be a multiple of block_size, without past_len")
        q0 = q_start_position // block_size
    if kv_start_position is not None:
        if kv_start_position % block_size:
            raise ValueError("kv_start_position must be a multiple of block_size")
        k0 = kv_start_position // block_size
    if causal:
        if not isinstance(local_blocks, int) or local_blocks < 1:
            raise ValueError(f"a causal pattern takes local_blocks >= 1, got {local_blocks!r}")
        left, right = local_blocks, 1
    elif isinstance(local_blocks, int):
        if local_blocks < 0:
            raise ValueError(f"local_blocks must be >= 0, got {local_blocks}")
        left = right = local_blocks
    else:
        left, right = local_blocks
    if device is None:
        device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"

    m = q0 + torch.arange(_cdiv(seqlen, block_size))[:, None]          # query blocks
    n = k0 + torch.arange(_cdiv(kv_seqlen, block_size))[None, :]       # key blocks
    sparse = kv_heads - num_dense_heads
    kv_of_head = torch.arange(num_heads) // group                     # [H]
    dense_head = kv_of_head >= sparse
    if vert_position_type == "absolute":
        step = head_sliding_step or max(1, int(vert_stride / num_heads))
        shift = kv_of_head * step + head_sliding_offset
        stripe = (n[None] + shift[:, None, None]) % vert_stride == 0   # [H, 1, N]
        local = ((m - n) < left) & ((n - m) < right)                    # [M, N]
        keep = stripe | local[None] | dense_head[:, None, None]
    else:
        dist = (m - n - left + 1).clamp(min=0) + (n - m - right + 1).clamp(min=0)
        rel = (dist % vert_stride == 0)[None]                           # [1, M, N]
        keep = rel if sparse == kv_heads else rel | dense_head[:, None, None]
    if causal:
        keep = keep & (m >= n)[None]
    block_mask = keep.to(dtype).to(device)
    trimmed = block_mask[:, _cdiv(past_len, block_size):]
    dense = None
    if return_dense:
        ones = block_mask.new_ones((block_size, block_size))
        dense = torch.kron(block_mask, ones)[..., :seqlen, :kv_seqlen][..., past_len:, :]
        if causal:
            tok = torch.tril(torch.ones(seqlen, kv_seqlen))[past_len:].to(dense)
            dense = dense * tok[None]
    return dense_to_crow_col(trimmed), trimmed, dense


__all__ = ["get_sparse_attn_mask", "dense_to_crow_col"]
