"""Sparsity patterns: the S2 library's keyword arguments, a block mask, per-head
rules, or a pattern file, held as per-query-head rules the C library checks
(s2_pattern_build / s2_pattern_load)."""
import ctypes as C
import hashlib
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

from . import _lib
from . import _structs as S

BLOCK_SIZES = (16, 32, 64, 128)


@dataclass(frozen=True)
class Rule:
    """The rule of one query head (s2_head_rule): a local window of
    `local_left` blocks (and `local_right` when bidirectional), every
    `vert_stride`-th block shifted by `shift`, dense, or the mask's slice."""
    local_left: int = 0
    local_right: int = 0
    vert_stride: int = 0
    shift: int = 0
    dense: bool = False
    mask_head: int = -1          # -1: no mask; else the mask's head slice


class Pattern:
    """A resolved S2 pattern.  Build one with `Pattern.local_stride`,
    `Pattern.from_mask`, `Pattern.from_file` or `Pattern(rules=...)`."""

    def __init__(self, rules: Sequence[Rule], *, block_size: int, causal: bool = True,
                 kv_heads: Optional[int] = None, vert_position: Optional[str] = None, max_seq_len: int = 0,
                 mask=None, name: str = "pattern"):
        if block_size not in BLOCK_SIZES:
            raise ValueError(f"block_size must be one of {BLOCK_SIZES}, got {block_size}")
        if vert_position not in (None, "absolute", "relative"):
            raise ValueError(f"vert_position must be 'absolute' or 'relative', got {vert_position!r}")
        self.rules = tuple(rules)
        self.heads = len(self.rules)
        self.kv_heads = kv_heads or self.heads
        self.block_size = block_size
        self.causal = bool(causal)
        self.vert_position = vert_position or ("absolute" if causal else "relative")
        self.max_seq_len = int(max_seq_len)
        self.name = name
        self.mask = None
        if mask is not None:
            import numpy as np
            m = np.ascontiguousarray(_to_numpy(mask) != 0, dtype=np.uint8)
            if m.ndim == 2:
                m = m[None]
            if m.ndim != 3:
                raise ValueError(f"a block mask has 2 or 3 dimensions, got shape {tuple(m.shape)}")
            self.mask = m
        self._set = None
        self._ptr = None
        self.key = self._digest()
        self._check()

    # ---- constructors -------------------------------------------------------------
    @classmethod
    def local_stride(cls, num_heads: int, block_size: int, local_blocks: Union[int, Tuple[int, int]],
                     vert_stride: int, *, num_kv_heads: Optional[int] = None, homo_head: bool = False,
                     num_dense_heads: int = 0, head_sliding_step: Optional[int] = None,
                     head_sliding_offset: int = 0, causal: bool = True, vert_position: Optional[str] = None,
                     active_head_range: Optional[Tuple[int, int]] = None, max_seq_len: int = 0,
                     name: str = "pattern") -> "Pattern":
        """The S2 library's local-stride pattern (get_sparse_attn_mask's
        arguments).  Heads of one kv group share a shift; the last
        `num_dense_heads` kv heads are dense; `active_head_range` keeps the
        query heads [a, b) of the full pattern (tensor or head parallelism)."""
        if vert_stride < 1:
            raise ValueError(f"vert_stride must be >= 1, got {vert_stride}")
        kv = num_kv_heads or num_heads
        if num_heads < 1 or kv < 1 or num_heads % kv:
            raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({kv})")
        if homo_head and num_dense_heads:
            raise ValueError("homo_head patterns cannot have dense heads")
        if not 0 <= num_dense_heads <= kv:
            raise ValueError(f"num_dense_heads must be in 0..{kv}, got {num_dense_heads}")
        if causal:
            if isinstance(local_blocks, tuple):
                raise ValueError("a causal pattern takes one local_blocks count")
            left, right = int(local_blocks), 0
        else:
            left, right = (local_blocks, local_blocks) if isinstance(local_blocks, int) else local_blocks
        if head_sliding_step is None:   # the library: max(1, int(vert_stride / heads)), heads 1 when homo
            head_sliding_step = max(1, int(vert_stride / (1 if homo_head else num_heads)))
        group = num_heads // kv
        rules = []
        for q in range(num_heads):
            h = 0 if homo_head else q // group
            rules.append(Rule(local_left=left, local_right=right, vert_stride=vert_stride,
                              shift=h * head_sliding_step + head_sliding_offset,
                              dense=h >= kv - num_dense_heads))
        if active_head_range is not None and not homo_head:
            a, b = active_head_range
            if not 0 <= a < b <= num_heads:
                raise ValueError(f"active_head_range must lie in [0, {num_heads}], got {active_head_range}")
            if a % group or b % group:
                raise ValueError(f"active_head_range {active_head_range} splits a kv group of {group} heads")
            rules, kv = rules[a:b], (b - a) // group
        return cls(rules, block_size=block_size, causal=causal, kv_heads=kv, vert_position=vert_position,
                   max_seq_len=max_seq_len, name=name)

    @classmethod
    def from_mask(cls, block_size: int, mask, *, causal: bool = True, num_heads: Optional[int] = None,
                  num_kv_heads: Optional[int] = None, name: str = "mask") -> "Pattern":
        """A block mask of (M, N) (every head) or (H, M, N) blocks; a nonzero
        entry keeps its block.  `num_heads` says how many query heads a 2-D
        mask serves (default 1; `for_heads` widens it)."""
        m = _to_numpy(mask)
        heads = num_heads or (m.shape[0] if m.ndim == 3 else 1)
        if m.ndim == 3 and m.shape[0] not in (1, heads):
            raise ValueError(f"a mask of {m.shape[0]} heads cannot serve {heads} heads")
        per_head = m.ndim == 3 and m.shape[0] == heads and heads > 1
        rules = [Rule(mask_head=q if per_head else 0) for q in range(heads)]
        return cls(rules, block_size=block_size, causal=causal, kv_heads=num_kv_heads, mask=m, name=name)

    @classmethod
    def from_file(cls, path: str, name: Optional[str] = None) -> "FilePattern":
        """A pattern of a YAML pattern file (the first, or the one named)."""
        return FilePattern(path, name)

    # ---- derived patterns ---------------------------------------------------------
    @property
    def uniform(self) -> bool:
        return len(set(self.rules)) <= 1

    def for_heads(self, heads: int, kv_heads: int) -> "Pattern":
        """This pattern for tensors of `heads` query and `kv_heads` kv heads:
        itself when they agree, a widened copy when every head has one rule."""
        if heads == self.heads and kv_heads == self.kv_heads:
            return self
        if heads % kv_heads:
            raise ValueError(f"{heads} query heads are not a multiple of {kv_heads} kv heads")
        if heads != self.heads and not self.uniform:
            raise ValueError(f"the pattern has {self.heads} heads, the inputs have {heads}")
        rules = self.rules if heads == self.heads else self.rules[:1] * heads
        p = Pattern.__new__(Pattern)
        p.__dict__.update(self.__dict__)
        p.rules, p.heads, p.kv_heads, p._set, p._ptr = tuple(rules), heads, kv_heads, None, None
        p.key = p._digest()
        return p

    # ---- C side ---------------------------------------------------------------
    def _digest(self) -> str:
        h = hashlib.sha256()
        h.update(repr((self.rules, self.kv_heads, self.block_size, self.causal, self.vert_position,
                       self.max_seq_len)).encode())
        if self.mask is not None:
            h.update(repr(self.mask.shape).encode())
            h.update(self.mask.tobytes())
        return h.hexdigest()

    def _check(self):
        self.c_pattern()

    def c_pattern(self) -> int:
        """The s2_pattern pointer (built and checked by the C library once)."""
        if self._ptr is not None:
            return self._ptr
        L, ctx = _lib.lib(), _lib.ctx()
        rules = (S.HeadRule * self.heads)()
        for i, r in enumerate(self.rules):
            rules[i] = S.HeadRule(dense=r.dense, local_left=r.local_left, local_right=r.local_right,
                                  vert_stride=r.vert_stride, shift=r.shift, mask=0 if r.mask_head >= 0 else -1,
                                  mask_head=max(r.mask_head, 0))
        d = S.PatternDef(name=self.name.encode(), heads=self.heads, kv_heads=self.kv_heads,
                         block_size=self.block_size, causal=self.causal,
                         vert_position=S.VERT_ABSOLUTE if self.vert_position == "absolute" else S.VERT_RELATIVE,
                         max_seq_len=self.max_seq_len, rules=rules)
        if self.mask is not None:
            m = self.mask
            bm = S.BlockMask(name=self.name.encode(), heads=m.shape[0], rows=m.shape[1], cols=m.shape[2],
                             bits=m.ctypes.data_as(C.POINTER(C.c_uint8)))
            d.mask = C.pointer(bm)
        out = C.c_void_p()
        _lib.check(L.s2_pattern_build(ctx, C.byref(d), C.byref(out)), "pattern")
        self._set = _SetHandle(out.value)
        self._ptr = L.s2_pattern_set_get(out, 0)
        return self._ptr

    def block_mask(self, q_blocks: int, kv_blocks: Optional[int] = None):
        """The blocks each head keeps, (heads, q_blocks, kv_blocks) uint8,
        as the C library decides them (s2_block_kept); for tests and plots."""
        import numpy as np
        kv_blocks = q_blocks if kv_blocks is None else kv_blocks
        fn, p = _lib.lib().s2_block_kept, self.c_pattern()
        out = np.zeros((self.heads, q_blocks, kv_blocks), dtype=np.uint8)
        for q in range(self.heads):
            for m in range(q_blocks):
                for n in range(kv_blocks):
                    out[q, m, n] = fn(p, q, m, n)
        return out

    def __repr__(self):
        return (f"Pattern({self.name!r}, heads={self.heads}, kv_heads={self.kv_heads}, "
                f"block_size={self.block_size}, causal={self.causal})")


class FilePattern(Pattern):
    """A pattern read from a YAML file by the C parser."""

    def __init__(self, path: str, name: Optional[str] = None):
        import os
        L, ctx = _lib.lib(), _lib.ctx()
        out = C.c_void_p()
        _lib.check(L.s2_pattern_load(ctx, os.fsencode(path), C.byref(out)), path)
        self._set = _SetHandle(out.value)
        ptr = L.s2_pattern_set_find(out, name.encode()) if name else L.s2_pattern_set_get(out, 0)
        if not ptr:
            raise ValueError(f"{path}: no pattern named {name!r}")
        self._ptr = ptr
        f = _PatternFields.from_address(ptr)
        self.heads, self.kv_heads, self.block_size = f.heads, f.kv_heads, f.block_size
        self.causal, self.max_seq_len = bool(f.causal), f.max_seq_len
        self.vert_position = "relative" if f.vert_position == S.VERT_RELATIVE else "absolute"
        self.name = f.name.decode()
        rules = C.cast(f.rules, C.POINTER(S.HeadRule))
        self.rules = tuple(Rule(local_left=rules[q].local_left, local_right=rules[q].local_right,
                                vert_stride=rules[q].vert_stride, shift=rules[q].shift, dense=rules[q].dense,
                                mask_head=rules[q].mask_head if rules[q].mask >= 0 else -1)
                           for q in range(self.heads))
        self.mask = None
        self.path = path
        h = hashlib.sha256(open(path, "rb").read())
        h.update((name or "").encode())
        self.key = "file:" + h.hexdigest()

    def for_heads(self, heads, kv_heads):
        if heads == self.heads and kv_heads == self.kv_heads:
            return self
        raise ValueError(f"pattern {self.name!r} of {self.path} has {self.heads} heads and {self.kv_heads} "
                         f"kv heads, the inputs have {heads} and {kv_heads}")


class _PatternFields(C.Structure):   # the leading fields of s2_pattern (pattern.h), read-only
    _fields_ = [("name", C.c_char_p), ("heads", C.c_int), ("kv_heads", C.c_int), ("block_size", C.c_int),
                ("causal", C.c_bool), ("max_seq_len", C.c_int64), ("vert_position", C.c_int),
                ("local_left", C.c_int), ("local_right", C.c_int), ("vert_stride", C.c_int),
                ("head_sliding_step", C.c_int), ("head_sliding_step_auto", C.c_bool),
                ("head_sliding_offset", C.c_int), ("homo_head", C.c_bool), ("num_dense_heads", C.c_int),
                ("rules", C.c_void_p)]


S.STRUCTS["s2_pattern"] = _PatternFields


class _SetHandle:
    """Owns an s2_pattern_set."""

    def __init__(self, ptr):
        self.ptr = ptr

    def __del__(self):
        if self.ptr and _lib._lib is not None:
            _lib._lib.s2_pattern_set_free(self.ptr)
            self.ptr = None


def _to_numpy(x):
    import numpy as np
    if hasattr(x, "detach"):
        x = x.detach().to("cpu")
        if str(x.dtype) == "torch.bool":
            x = x.to(dtype=__import__("torch").uint8)
        return x.numpy()
    return np.asarray(x)
