"""The attention ops: torch.library custom ops (fake tensors for
torch.compile, autograd) over launches of prepared plans, and the plain
functional API in the style of flash_attn_func."""
import ctypes as C
import math
import struct
import threading
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _lib
from . import _runtime as R
from . import _structs as S
from .pattern import Pattern

_patterns = {}      # id -> Pattern: ops take patterns as ints
_ids = {}           # Pattern.key -> id


def pattern_id(p: Pattern) -> int:
    i = _ids.get(p.key)
    if i is None:
        i = _ids[p.key] = len(_patterns) + 1
        _patterns[i] = p
    return i


def _pattern(pid: int) -> Pattern:
    try:
        return _patterns[pid]
    except KeyError:
        raise ValueError(f"s2c: unknown pattern id {pid}") from None


def _inner_contiguous(t: Tensor, m: int = 8) -> Tensor:
    """The kernels want the head dimension contiguous and the other strides
    multiples of m elements (8; fp8's TMA: 16); anything else is copied once here."""
    if t.stride(-1) == 1 and all(s % m == 0 for s in t.stride()[:-1]) and t.data_ptr() % 16 == 0:
        return t
    return t.contiguous()


def _layout_empty(like: Tensor, shape_bshd, seq_dim: int, dtype=None) -> Tensor:
    """A contiguous tensor of [B, S, H, D] logical shape laid out with its
    sequence dimension at seq_dim (1: [B, S, H, D], 2: [B, H, S, D])."""
    b, s, h, d = shape_bshd
    shape = (b, s, h, d) if seq_dim == 1 else (b, h, s, d)
    return torch.empty(shape, dtype=dtype or like.dtype, device=like.device)


def _dims(q: Tensor, k: Tensor, sd: int):
    hd = 3 - sd
    return q.shape[0], q.shape[sd], k.shape[sd], q.shape[hd], k.shape[hd], q.shape[3]


def _check_inputs(q, k, v, sd, kind="forward", descales=None):
    """Shapes, dtypes, head_dim and device; fp8 inputs (descales: the three
    descales or Nones) have theirs checked instead of a 16-bit dtype."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"s2c: q, k, v must be 4-D, got {q.dim()}, {k.dim()}, {v.dim()} dimensions")
    if sd not in (1, 2):
        raise ValueError(f"s2c: seq_dim must be 1 or 2, got {sd}")
    if k.shape != v.shape:
        raise ValueError(f"s2c: k and v must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"s2c: q {tuple(q.shape)} and k {tuple(k.shape)} differ in batch or head_dim")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"s2c: q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if descales is None:
        R.dtype_code(q)
    else:
        _check_descales(descales, q.shape[0], k.shape[3 - sd], q.device)
    R.check_head_dim(q.shape[3], kind, q.dtype)
    if not q.is_cuda or k.device != q.device or v.device != q.device:
        raise ValueError(f"s2c: q, k, v must be on one CUDA device, got {q.device}, {k.device}, {v.device}")


def _set3(arr, vals):
    arr[0], arr[1], arr[2] = vals


# ---- launches ----------------------------------------------------------------------
# A launch signature (pattern, shapes, strides, dtype, device, layouts, scale)
# is checked and its plan prepared once; later calls of that signature only
# allocate the outputs, set five pointers and launch.

class _Entry:
    """One launch signature: its argument struct (pointers rewritten per call),
    prepared plan, launch function, device and output shapes.  `ref` and `ctx`
    serve the thread that made it; another thread copies the struct."""
    __slots__ = ("args", "ref", "ctx", "plan", "index", "fn", "shapes", "tid", "device", "dtype", "buf")

    def __init__(self):
        self.tid = threading.get_ident()
        self.ctx = _lib.ctx()

    def bind(self, args, plan, fn, like):
        self.args, self.ref, self.plan, self.fn = args, C.byref(args), plan, fn
        self.index, self.device, self.dtype = like.device.index, like.device, like.dtype
        self.buf = memoryview(args).cast("B")     # the pointers q, k, v, o, lse written at once
        return self


def _fwd_entry(pid, q, k, v, scale, sd, osd, code=None):
    pat = _pattern(pid)
    B, Sq, Sk, H, Hkv, D = _dims(q, k, sd)
    if Sq > Sk:
        raise ValueError(f"s2c: q has more tokens ({Sq}) than k ({Sk})")
    code = R.dtype_code(q) if code is None else code
    kern = R.device(q.device.index).kernel(pat.for_heads(H, Hkv), S.KIND_FWD, code, D)
    a = S.FwdArgs(batch=B, q_len=Sq, kv_len=Sk, heads=H, kv_heads=Hkv, head_dim=D, dtype=code, scale=scale)
    o_shape = (B, Sq, H, D) if osd == 1 else (B, H, Sq, D)
    o_stride = torch.empty(o_shape, device="meta").stride()
    _set3(a.q_stride, R.bsh_strides(q, sd))
    _set3(a.k_stride, R.bsh_strides(k, sd))
    _set3(a.v_stride, R.bsh_strides(v, sd))
    _set3(a.o_stride, (o_stride[0], o_stride[osd], o_stride[3 - osd]))
    L = _lib.lib()
    plan = kern.plan(("fwd", B, Sq, Sk),
                     lambda p: _lib.check(L.s2_attn_plan_add_forward(_lib.ctx(), p, C.byref(a)), "forward"))
    e = _Entry().bind(a, plan, L.s2_attn_plan_forward, q)
    e.shapes = (o_shape, (B, H, Sq))
    if code == S.DTYPE_E4M3:
        e.dtype = torch.bfloat16       # the e4m3 forward writes o in bf16
    return e


_capturing = R._is_capturing or R.capturing
_f32 = torch.float32
# s2_attn_fwd_args's q, k, v, o, lse: five adjacent device pointers
_put_qkvol = struct.Struct("=5Q").pack_into
_QKVOL_OFFSET = S.FwdArgs.q.offset
assert [getattr(S.FwdArgs, n).offset for n in ("q", "k", "v", "o", "lse")] == \
    [_QKVOL_OFFSET + 8 * i for i in range(5)]
_raw_stream = R._raw_stream or R.raw_stream
_get_ident = threading.get_ident
_empty = torch.empty


def _args(e):
    """The entry's argument struct and a reference to it: its own on the thread
    that made it, a copy on any other (launches may come from several threads)."""
    if _get_ident() == e.tid:
        return e.args, e.ref, e.ctx
    a = type(e.args).from_buffer_copy(e.args)
    return a, C.byref(a), _lib.ctx()


def _launch(e, ref, ctx, what):
    p = e.plan
    if _capturing():
        p.captured = True         # a graph holds it now: never freed
    st = e.fn(ctx, p.ptr, _raw_stream(e.index), ref)
    if st:
        _lib.check(st, what)


def _fwd_run(e, q, k, v, need_lse=True, out=None, descales=None):
    o_shape, lse_shape = e.shapes
    if out is None:
        o = _empty(o_shape, dtype=e.dtype, device=e.device)
    else:
        o = _check_out(out, e)
    lse = _empty(lse_shape, dtype=torch.float32, device=e.device) if need_lse else None
    a, ref, ctx = _args(e)
    a.q, a.k, a.v, a.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    a.lse = lse.data_ptr() if need_lse else 0
    if descales is not None:     # fp8: the descales' pointers (0: 1.0)
        a.q_descale, a.k_descale, a.v_descale = descales
    _launch(e, ref, ctx, "forward")
    return o, lse


def _check_out(out, e):
    """`out` must be what the launch would allocate: o's shape and dtype on the
    inputs' device, contiguous in the output layout."""
    o_shape = e.shapes[0]
    if out.shape != o_shape or out.dtype != e.dtype or out.device != e.device or not out.is_contiguous():
        raise ValueError(f"s2c: out must be a contiguous {e.dtype} tensor of shape {tuple(o_shape)} on {e.device}, "
                         f"got {out.dtype} {tuple(out.shape)} on {out.device}"
                         + ("" if out.is_contiguous() else " (not contiguous)"))
    return out


def _bwd_entry(pid, do, q, k, v, o, scale, sd, osd):
    pat = _pattern(pid)
    B, Sq, Sk, H, Hkv, D = _dims(q, k, sd)
    kern = R.device(q.device.index).kernel(pat.for_heads(H, Hkv), S.KIND_BWD, R.dtype_code(q), D)
    a = S.BwdArgs(batch=B, q_len=Sq, kv_len=Sk, heads=H, kv_heads=Hkv, head_dim=D, dtype=R.dtype_code(q),
                  scale=scale)
    grads = tuple((tuple(t.shape), _grad_strides(t)) for t in (q, k, v))
    for name, t, d in (("q", q, sd), ("k", k, sd), ("v", v, sd), ("o", o, osd), ("do", do, osd)):
        _set3(getattr(a, name + "_stride"), R.bsh_strides(t, d))
    for name, (_, st) in zip(("dq", "dk", "dv"), grads):
        _set3(getattr(a, name + "_stride"), (st[0], st[sd], st[3 - sd]))
    L = _lib.lib()
    plan = kern.plan(("bwd", B, Sq, Sk),
                     lambda p: _lib.check(L.s2_attn_plan_add_backward(_lib.ctx(), p, C.byref(a)), "backward"))
    e = _Entry().bind(a, plan, L.s2_attn_plan_backward, q)
    e.shapes = grads
    return e


def _meta(shape):
    return torch.empty(shape, device="meta")


def _grad_strides(t):
    """A gradient's strides: its input's where that is dense (as torch.empty_like
    keeps them: a [B, H, S, D] view of a [B, S, H, D] projection gets its
    gradient in the projection's order, so autograd's reshapes copy nothing),
    else contiguous; the kernels want the head dimension innermost."""
    st = torch.empty_like(t, device="meta").stride()
    if st[-1] == 1 and all(x % 8 == 0 for x in st[:-1]):
        return st
    return _meta(t.shape).stride()


def _bwd_run(e, do, q, k, v, o, lse, dlse):
    dq, dk, dv = (torch.empty_strided(sh, st, dtype=e.dtype, device=e.device) for sh, st in e.shapes)
    a, ref, ctx = _args(e)
    a.q, a.k, a.v, a.o, a.d_o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), do.data_ptr()
    a.lse, a.d_lse = lse.data_ptr(), dlse.data_ptr() if dlse is not None else 0
    a.dq, a.dk, a.dv = dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    _launch(e, ref, ctx, "backward")     # workspace 0: the plan's own
    return dq, dk, dv


class _DeviceArray:
    """__cuda_array_interface__ over device memory the runtime owns."""

    def __init__(self, ptr, shape, typestr):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False), "version": 3,
                                         "strides": None}


def launch_varlen(pid, q, k, v, o, lse, scale, seqs_fill, n, max_kv_len, descales=None):
    """A forward over [rows, H, D] tensors whose sequences come from device
    records; seqs_fill(kernel, seqs_ptr) writes them on the current stream.
    descales: fp8 q, k, v's descale pointers (the e4m3 kernel), else None."""
    pat = _pattern(pid)
    T, H, D = q.shape
    Tk, Hkv = k.shape[0], k.shape[1]
    code = R.dtype_code(q) if descales is None else S.DTYPE_E4M3
    kern = R.device(q.device.index).kernel(pat.for_heads(H, Hkv), S.KIND_FWD, code, D)
    seqs = kern.device_seqs(n, max_kv_len)
    a = S.FwdArgs(batch=n, q_len=T, kv_len=Tk, heads=H, kv_heads=Hkv, head_dim=D, dtype=code,
                  scale=scale, seqs=seqs)
    if descales is not None:
        a.q_descale, a.k_descale, a.v_descale = descales
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        _set3(getattr(a, name + "_stride"), (0, t.stride(0), t.stride(1)))
    L = _lib.lib()
    plan = kern.plan(("varlen", n, max_kv_len),
                     lambda p: _lib.check(L.s2_attn_plan_add_forward(_lib.ctx(), p, C.byref(a)), "varlen"))
    e = _Entry().bind(a, plan, L.s2_attn_plan_forward, q)
    seqs_fill(kern, seqs)
    a.q, a.k, a.v, a.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    a.lse = lse.data_ptr() if lse is not None else 0
    _launch(e, e.ref, e.ctx, "varlen forward")


def launch_varlen_bwd(pid, q, k, v, o, do, lse, dlse, scale, seqs_fill, n, max_kv_len):
    """The backward of launch_varlen: dq, dk, dv [rows, H(kv), D] (rows outside
    every sequence zero), the records written again from the device's
    cu_seqlens by seqs_fill(forward kernel, seqs) on the current stream."""
    pat = _pattern(pid)
    T, H, D = q.shape
    Tk, Hkv = k.shape[0], k.shape[1]
    dev = R.device(q.device.index)
    kern = dev.kernel(pat.for_heads(H, Hkv), S.KIND_BWD, R.dtype_code(q), D)
    fkern = dev.kernel(pat.for_heads(H, Hkv), S.KIND_FWD, R.dtype_code(q), D)
    seqs = kern.device_seqs(n, max_kv_len)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    a = S.BwdArgs(batch=n, q_len=T, kv_len=Tk, heads=H, kv_heads=Hkv, head_dim=D, dtype=R.dtype_code(q),
                  scale=scale, seqs=seqs)
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do), ("dq", dq), ("dk", dk), ("dv", dv)):
        _set3(getattr(a, name + "_stride"), (0, t.stride(0), t.stride(1)))
    L = _lib.lib()
    # the plan's workspace holds T token rows of stats: T is part of the key
    plan = kern.plan(("varlen_bwd", n, max_kv_len, T, Tk),
                     lambda p: _lib.check(L.s2_attn_plan_add_backward(_lib.ctx(), p, C.byref(a)), "varlen backward"))
    e = _Entry().bind(a, plan, L.s2_attn_plan_backward, q)
    seqs_fill(fkern, seqs)
    a.q, a.k, a.v, a.o, a.d_o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), do.data_ptr()
    a.lse, a.d_lse = lse.data_ptr(), dlse.data_ptr() if dlse is not None else 0
    a.dq, a.dk, a.dv = dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    _launch(e, e.ref, e.ctx, "varlen backward")
    return dq, dk, dv


class _VarlenAttention(torch.autograd.Function):
    """sparse_attn_varlen_func with gradients: the forward keeps q, k, v, o,
    lse and the cumulative lengths; the backward rewrites the records from
    them on the device (no host sync) and runs the varlen backward."""

    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, pid, scale, n, max_kv_len):
        o = torch.zeros_like(q, memory_format=torch.contiguous_format)
        lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
        launch_varlen(pid, q, k, v, o, lse, scale, _write_cu(cu_q, cu_k, n), n, max_kv_len)
        ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k)
        ctx.args = (pid, scale, n, max_kv_len)
        return o, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
        pid, scale, n, max_kv_len = ctx.args
        do = _inner_contiguous(do)
        if dlse is not None:
            dlse = dlse.contiguous()
        dq, dk, dv = launch_varlen_bwd(pid, q, k, v, o, do, lse, dlse, scale, _write_cu(cu_q, cu_k, n), n,
                                       max_kv_len)
        return dq, dk, dv, None, None, None, None, None, None


# ---- the forward and backward, custom ops ------------------------------------------------

_fwd_cache = {}     # launch signature -> _Entry
_bwd_cache = {}


_CACHE_MAX = 1024    # launch signatures kept (entries are cheap to rebuild; plans stay)


def _fwd_impl(q, k, v, pattern, scale, seq_dim, out_seq_dim, need_lse=True, out=None):
    key = (pattern, q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype,
           q.get_device(), k.get_device(), v.get_device(), seq_dim, out_seq_dim, scale)
    e = _fwd_cache.get(key)
    if e is None or not e.plan.alive:
        _check_inputs(q, k, v, seq_dim)
        q2, k2, v2 = _inner_contiguous(q), _inner_contiguous(k), _inner_contiguous(v)
        if q2 is not q or k2 is not k or v2 is not v:     # copied: their own signature
            return _fwd_impl(q2, k2, v2, pattern, scale, seq_dim, out_seq_dim, need_lse, out)
        if len(_fwd_cache) >= _CACHE_MAX:
            _fwd_cache.clear()
        e = _fwd_cache[key] = _fwd_entry(pattern, q, k, v, scale, seq_dim, out_seq_dim)
    if _get_ident() != e.tid:
        return _fwd_run(e, q, k, v, need_lse, out)
    # the hot path, inline: allocate, write the five pointers at once, launch
    o_shape, lse_shape = e.shapes
    o = _empty(o_shape, dtype=e.dtype, device=e.device) if out is None else _check_out(out, e)
    lse = _empty(lse_shape, dtype=_f32, device=e.device) if need_lse else None
    _put_qkvol(e.buf, _QKVOL_OFFSET, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
               lse.data_ptr() if need_lse else 0)
    p = e.plan
    if _capturing():
        p.captured = True         # a graph holds it now: never freed
    st = e.fn(e.ctx, p.ptr, _raw_stream(e.index), e.ref)
    if st:
        _lib.check(st, "forward")
    return o, lse


def _fwd_fake(q, k, v, pattern, scale, seq_dim, out_seq_dim):
    B, Sq, Sk, H, Hkv, D = _dims(q, k, seq_dim)
    return _layout_empty(q, (B, Sq, H, D), out_seq_dim), q.new_empty((B, H, Sq), dtype=torch.float32)


def _bwd_impl(do, q, k, v, o, lse, dlse, pattern, scale, seq_dim, out_seq_dim):
    if q.dtype == _f32:
        # fp32 tensors: the bf16 backward on converted copies (the forward's
        # fp32 LSE as it is), gradients returned in fp32
        bf = [t.to(torch.bfloat16) for t in (do, q, k, v, o)]
        return tuple(g.to(_f32) for g in _bwd_impl(*bf, lse, dlse, pattern, scale, seq_dim, out_seq_dim))
    do = _inner_contiguous(do)
    if dlse is not None:
        dlse = dlse.contiguous()
    key = (pattern, q.shape, k.shape, q.stride(), k.stride(), v.stride(), o.stride(), do.stride(), q.dtype,
           q.device, seq_dim, out_seq_dim, scale)
    e = _bwd_cache.get(key)
    if e is None or not e.plan.alive:
        _check_inputs(q, k, v, seq_dim, "backward")
        if len(_bwd_cache) >= _CACHE_MAX:
            _bwd_cache.clear()
        e = _bwd_cache[key] = _bwd_entry(pattern, do, q, k, v, o, scale, seq_dim, out_seq_dim)
    return _bwd_run(e, do, q, k, v, o, lse, dlse)


def _bwd_fake(do, q, k, v, o, lse, dlse, pattern, scale, seq_dim, out_seq_dim):
    return tuple(torch.empty_strided(t.shape, _grad_strides(t), dtype=t.dtype, device=t.device) for t in (q, k, v))


class _AttentionFn(torch.autograd.Function):
    """Eager autograd (the custom op's autograd serves torch.compile)."""

    @staticmethod
    def forward(ctx, q, k, v, pattern, scale, seq_dim, out_seq_dim):
        o, lse = _fwd_impl(q, k, v, pattern, scale, seq_dim, out_seq_dim)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.args = (pattern, scale, seq_dim, out_seq_dim)
        ctx.set_materialize_grads(False)
        return o, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, lse = ctx.saved_tensors
        if do is None:
            do = torch.zeros_like(o)
        return _bwd_impl(do, q, k, v, o, lse, dlse, *ctx.args) + (None,) * 4


HAVE_CUSTOM_OP = hasattr(torch, "library") and hasattr(torch.library, "custom_op")
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)

if HAVE_CUSTOM_OP:
    @torch.library.custom_op("s2c::fwd", mutates_args=(), device_types="cuda")
    def _fwd_op(q: Tensor, k: Tensor, v: Tensor, pattern: int, scale: float, seq_dim: int,
                out_seq_dim: int) -> Tuple[Tensor, Tensor]:
        return _fwd_impl(q, k, v, pattern, scale, seq_dim, out_seq_dim)

    @torch.library.custom_op("s2c::bwd", mutates_args=(), device_types="cuda")
    def _bwd_op(do: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, dlse: Optional[Tensor],
                pattern: int, scale: float, seq_dim: int, out_seq_dim: int) -> Tuple[Tensor, Tensor, Tensor]:
        return _bwd_impl(do, q, k, v, o, lse, dlse, pattern, scale, seq_dim, out_seq_dim)

    _fwd_op.register_fake(_fwd_fake)
    _bwd_op.register_fake(_bwd_fake)

    def _setup(ctx, inputs, output):
        q, k, v, pattern, scale, seq_dim, out_seq_dim = inputs
        o, lse = output
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.args = (pattern, scale, seq_dim, out_seq_dim)

    def _backward(ctx, do, dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _bwd_op(do, q, k, v, o, lse, dlse, *ctx.args)
        return dq, dk, dv, None, None, None, None

    _fwd_op.register_autograd(_backward, setup_context=_setup)


def _attention(q, k, v, pattern, scale, seq_dim, out_seq_dim, need_lse=True, out=None):
    """Traced (torch.compile): the custom op.  Eager: the autograd function when
    a gradient is wanted, else the launch itself (the op's dispatch costs more
    than the launch).  `out`: where o goes (written by the kernel when no
    gradient is wanted, else copied there)."""
    if HAVE_CUSTOM_OP and _compiling():
        _check_inputs(q, k, v, seq_dim)
        o, lse = _fwd_op(q, k, v, pattern, scale, seq_dim, out_seq_dim)
    elif torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        o, lse = _AttentionFn.apply(q, k, v, pattern, scale, seq_dim, out_seq_dim)
    else:
        return _fwd_impl(q, k, v, pattern, scale, seq_dim, out_seq_dim, need_lse, out)
    if out is not None:
        out.copy_(o)
        o = out
    return o, lse


# ---- the fp8 (e4m3) forward: FlashAttention-3's FP8 API, sm_90a, no backward ----------

_E4M3 = R.E4M3
_fp8_cache = {}     # launch signature -> _Entry (its descale pointers rewritten per call)


def _fp8_check(q, k, v):
    """An fp8 call: q, k, v all float8_e4m3fn, none wanting a gradient."""
    dts = (q.dtype, k.dtype, v.dtype)
    if _E4M3 is None or dts != (_E4M3,) * 3:
        if _E4M3 is not None and _E4M3 in dts:
            raise ValueError(f"s2c: fp8 attention takes q, k, v all torch.float8_e4m3fn, got {q.dtype}, {k.dtype}, "
                             f"{v.dtype}")
        raise ValueError(f"s2c: q_descale, k_descale, v_descale are for torch.float8_e4m3fn inputs, not {q.dtype}")
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise NotImplementedError("s2c: the fp8 forward has no backward (as FlashAttention-3's FP8 API): pass "
                                  "inputs without requires_grad or call it under torch.no_grad()")


def _check_descales(descales, batch, kv_heads, device):
    """Each descale None (1.0) or a contiguous float32 [batch, kv_heads] tensor
    on the inputs' device."""
    for name, d in zip(("q_descale", "k_descale", "v_descale"), descales):
        if d is not None and (not isinstance(d, Tensor) or d.dtype != _f32 or tuple(d.shape) != (batch, kv_heads)
                or d.device != device or not d.is_contiguous()):
            got = (f"{d.dtype} {tuple(d.shape)} on {d.device}" + ("" if d.is_contiguous() else " (not contiguous)")
                   if isinstance(d, Tensor) else type(d).__name__)
            raise ValueError(f"s2c: {name} must be a contiguous float32 tensor of shape ({batch}, {kv_heads}) "
                             f"[batch, kv_heads] on {device}, got {got}")


def _descale_ptrs(descales, batch, kv_heads, device):
    """The checked descales' device pointers (0: None, 1.0)."""
    _check_descales(descales, batch, kv_heads, device)
    return tuple(0 if d is None else d.data_ptr() for d in descales)


def _require_sm90a(dev):
    cc = R.device(dev.index).cc if dev.type == "cuda" else None
    if cc != (9, 0):
        raise NotImplementedError("s2c: the fp8 (e4m3) forward runs on sm_90a (capability 9.0) only; "
                                  + (f"{dev} is sm_{cc[0]}{cc[1]}" if cc else f"{dev} is not a CUDA device"))


def _fp8_impl(q, k, v, descales, pattern, scale, seq_dim, out_seq_dim, need_lse=True, out=None):
    key = (pattern, q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.get_device(), k.get_device(),
           v.get_device(), seq_dim, out_seq_dim, scale)
    e = _fp8_cache.get(key)
    if e is None or not e.plan.alive:
        _check_inputs(q, k, v, seq_dim, descales=descales)
        q2, k2, v2 = _inner_contiguous(q, 16), _inner_contiguous(k, 16), _inner_contiguous(v, 16)
        if q2 is not q or k2 is not k or v2 is not v:     # copied: their own signature
            return _fp8_impl(q2, k2, v2, descales, pattern, scale, seq_dim, out_seq_dim, need_lse, out)
        _require_sm90a(q.device)
        if len(_fp8_cache) >= _CACHE_MAX:
            _fp8_cache.clear()
        e = _fp8_cache[key] = _fwd_entry(pattern, q, k, v, scale, seq_dim, out_seq_dim, S.DTYPE_E4M3)
    ptrs = _descale_ptrs(descales, q.shape[0], k.shape[3 - seq_dim], q.device)
    return _fwd_run(e, q, k, v, need_lse, out, ptrs)


def _fp8_fake(q, k, v, q_descale, k_descale, v_descale, pattern, scale, seq_dim, out_seq_dim):
    B, Sq, Sk, H, Hkv, D = _dims(q, k, seq_dim)
    return (_layout_empty(q, (B, Sq, H, D), out_seq_dim, torch.bfloat16),
            q.new_empty((B, H, Sq), dtype=torch.float32))


if HAVE_CUSTOM_OP:
    @torch.library.custom_op("s2c::fwd_fp8", mutates_args=(), device_types="cuda")
    def _fp8_op(q: Tensor, k: Tensor, v: Tensor, q_descale: Optional[Tensor], k_descale: Optional[Tensor],
                v_descale: Optional[Tensor], pattern: int, scale: float, seq_dim: int,
                out_seq_dim: int) -> Tuple[Tensor, Tensor]:
        return _fp8_impl(q, k, v, (q_descale, k_descale, v_descale), pattern, scale, seq_dim, out_seq_dim)

    _fp8_op.register_fake(_fp8_fake)


def _fp8_attention(q, k, v, descales, pattern, scale, seq_dim, out_seq_dim, need_lse, out):
    """_attention of float8_e4m3fn q, k, v: o in bf16, no autograd."""
    _fp8_check(q, k, v)
    if HAVE_CUSTOM_OP and _compiling():
        _check_inputs(q, k, v, seq_dim, descales=descales)
        o, lse = _fp8_op(q, k, v, *descales, pattern, scale, seq_dim, out_seq_dim)
        if out is not None:
            out.copy_(o)
            o = out
        return o, lse
    return _fp8_impl(q, k, v, descales, pattern, scale, seq_dim, out_seq_dim, need_lse, out)


# ---- the functional API ----------------------------------------------------------------

_LAYOUTS = {"bshd": 1, "bhsd": 2}


_default_scales = {}


def _scale(softmax_scale, d):
    if not softmax_scale:
        s = _default_scales.get(d)
        if s is None:
            s = _default_scales[d] = 1.0 / math.sqrt(d)
        return s
    s = float(softmax_scale)
    if not math.isfinite(s) or s <= 0:
        raise ValueError(f"s2c: softmax_scale must be finite and positive, got {softmax_scale}")
    return s


def sparse_attn_func(q: Tensor, k: Tensor, v: Tensor, pattern: Pattern, softmax_scale: Optional[float] = None,
                     return_lse: bool = False, layout: str = "bshd", out_layout: Optional[str] = None, *,
                     out: Optional[Tensor] = None, fp32_compute: str = "tf32", q_descale: Optional[Tensor] = None,
                     k_descale: Optional[Tensor] = None, v_descale: Optional[Tensor] = None):
    """S2 attention of q [B, Sq, H, D] and k, v [B, Sk, Hkv, D] (layout
    "bshd", flash_attn_func's) or [B, H, S, D] ("bhsd", SDPA's) under
    `pattern`; views with any strides are read in place.  Sq < Sk puts the
    queries at the end (chunked prefill).  Returns o in `out_layout` (default:
    `layout`), and the natural-log LSE [B, H, Sq] in float32 with return_lse.
    `out`: a contiguous tensor of o's shape and dtype to write o into (the
    kernel writes it directly when no gradient is wanted).  Differentiable in
    q, k, v.  float32 inputs: `fp32_compute` "tf32" (default, as the S2
    Triton library) runs the tf32 forward on them; "bf16" runs the bf16
    kernels on bf16 copies (faster, bf16 accuracy).  Either way o comes back
    in float32, and the backward of float32 inputs runs the bf16 kernels on
    converted copies, gradients returned in float32.
    torch.float8_e4m3fn q, k, v (all three; sm_90a): FlashAttention-3's FP8
    forward, `q_descale`, `k_descale`, `v_descale` contiguous float32
    [batch, kv_heads] tensors that dequantize them (None: 1.0); o in bfloat16;
    no backward (inputs requiring grad: NotImplementedError)."""
    if fp32_compute not in ("tf32", "bf16"):
        raise ValueError(f"s2c: fp32_compute must be 'tf32' or 'bf16', got {fp32_compute!r}")
    if fp32_compute == "bf16" and q.dtype == _f32:
        res = sparse_attn_func(q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16), pattern,
                               softmax_scale, return_lse, layout, out_layout, q_descale=q_descale,
                               k_descale=k_descale, v_descale=v_descale)
        o = res[0] if return_lse else res
        if out is not None:
            out.copy_(o)
            o = out
        else:
            o = o.to(_f32)
        return (o, res[1]) if return_lse else o
    sd, osd = _LAYOUTS.get(layout), _LAYOUTS.get(out_layout or layout)
    if sd is None or osd is None:
        raise ValueError(f"s2c: layout must be 'bshd' or 'bhsd', got {layout!r} / {out_layout!r}")
    if not isinstance(pattern, Pattern):
        raise TypeError(f"s2c: pattern must be an s2c.Pattern, got {type(pattern).__name__}")
    if q.dtype == _E4M3 or not (q_descale is None and k_descale is None and v_descale is None):
        o, lse = _fp8_attention(q, k, v, (q_descale, k_descale, v_descale), pattern_id(pattern),
                                _scale(softmax_scale, q.shape[-1]), sd, osd, return_lse, out)
    else:
        o, lse = _attention(q, k, v, pattern_id(pattern), _scale(softmax_scale, q.shape[-1]), sd, osd, return_lse,
                            out)
    return (o, lse) if return_lse else o


def _write_cu(cu_q, cu_k, n):
    def fill(kern, seqs):
        L = _lib.lib()
        _lib.check(L.s2_attn_seqs_write_cu(_lib.ctx(), kern.ptr, seqs, cu_q.data_ptr(),
                                           cu_k.data_ptr() if cu_k is not None else 0, R.stream_of(cu_q)),
                   "cu_seqlens")
    return fill


def _check_cu(cu, name, q):
    if cu.dtype != torch.int32 or cu.dim() != 1 or cu.device != q.device or cu.numel() < 2:
        raise ValueError(f"s2c: {name} must be a 1-D int32 tensor of batch + 1 entries on {q.device}, got "
                         f"{cu.dtype} {tuple(cu.shape)} on {cu.device}")
    return cu.contiguous()


def sparse_attn_varlen_func(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                            max_seqlen_q: int, max_seqlen_k: int, pattern: Pattern,
                            softmax_scale: Optional[float] = None, return_lse: bool = False, *,
                            q_descale: Optional[Tensor] = None, k_descale: Optional[Tensor] = None,
                            v_descale: Optional[Tensor] = None):
    """Packed sequences (flash_attn_varlen_func): q [Tq, H, D], k, v [Tk, Hkv, D],
    int32 cumulative lengths on the device (read there: no host sync, so the
    call can be captured in a CUDA graph).  Sequences longer than
    max_seqlen_k, or with more queries than keys, are left unwritten
    (zeros).  Differentiable in q, k, v: the deterministic varlen backward
    (the key rows of two sequences must not overlap: cu_seqlens_k increasing).
    torch.float8_e4m3fn q, k, v: as sparse_attn_func's, descales of shape
    [sequences, kv_heads], o in bfloat16, no backward."""
    if q.dim() != 3 or k.dim() != 3 or k.shape != v.shape:
        raise ValueError(f"s2c: varlen q, k, v are [tokens, heads, head_dim], got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    descales = (q_descale, k_descale, v_descale)
    fp8 = q.dtype == _E4M3 or not (q_descale is None and k_descale is None and v_descale is None)
    if fp8:
        _fp8_check(q, k, v)
    else:
        R.dtype_code(q)
    R.check_head_dim(q.shape[-1], "forward", q.dtype)
    cu_q = _check_cu(cu_seqlens_q, "cu_seqlens_q", q)
    cu_k = _check_cu(cu_seqlens_k, "cu_seqlens_k", q) if cu_seqlens_k is not None else None
    n = cu_q.numel() - 1
    if cu_k is not None and cu_k.numel() != n + 1:
        raise ValueError(f"s2c: cu_seqlens_k has {cu_k.numel()} entries, cu_seqlens_q {n + 1}")
    pid, scale, max_kv = pattern_id(pattern), _scale(softmax_scale, q.shape[-1]), int(max(max_seqlen_k, max_seqlen_q))
    if fp8:
        ptrs = _descale_ptrs(descales, n, k.shape[1], q.device)
        _require_sm90a(q.device)
        q, k, v = _inner_contiguous(q, 16), _inner_contiguous(k, 16), _inner_contiguous(v, 16)
        o = torch.zeros(q.shape, dtype=torch.bfloat16, device=q.device)
        lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
        launch_varlen(pid, q, k, v, o, lse, scale, _write_cu(cu_q, cu_k, n), n, max_kv, ptrs)
        return (o, lse) if return_lse else o
    q, k, v = _inner_contiguous(q), _inner_contiguous(k), _inner_contiguous(v)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        o, lse = _VarlenAttention.apply(q, k, v, cu_q, cu_k, pid, scale, n, max_kv)
        return (o, lse) if return_lse else o
    o = torch.zeros_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
    launch_varlen(pid, q, k, v, o, lse, scale, _write_cu(cu_q, cu_k, n), n, max_kv)
    return (o, lse) if return_lse else o


def padded_attn(q: Tensor, k: Tensor, v: Tensor, pattern: Pattern, scale: float, seq_dim: int,
                left_paddings: Optional[Tensor] = None, seqlens: Optional[Tensor] = None,
                return_lse: bool = False):
    """Inference over a padded batch [B, S, H, D] (or seq_dim 2): left
    paddings, or the real lengths of right-padded sequences (device tensors,
    read on the device).  Padding rows of o are zero; o is in the input layout."""
    _check_inputs(q, k, v, seq_dim)
    B, Sq, Sk, H, Hkv, D = _dims(q, k, seq_dim)
    qb, kb, vb = (t.transpose(1, 2) if seq_dim == 2 else t for t in (q, k, v))
    qb, kb, vb = qb.contiguous(), kb.contiguous(), vb.contiguous()
    past = Sk - Sq
    ar = torch.arange(B, device=q.device, dtype=torch.int32)
    if left_paddings is not None:
        lp = left_paddings.to(device=q.device, dtype=torch.int32).clamp(0, Sk)
        q_off = (lp - past).clamp(0, Sq)
        rec = torch.stack([ar * Sq + q_off, Sq - q_off, ar * Sk + lp, Sk - lp], dim=1)
    else:
        sl = seqlens.to(device=q.device, dtype=torch.int32).clamp(0, Sk)
        rec = torch.stack([ar * Sq, (sl - past).clamp(0, Sq), ar * Sk, sl], dim=1)
    rec = rec.to(torch.int32).contiguous()

    def fill(kern, seqs):
        ptr = _lib.lib().s2_attn_seqs_device(seqs)
        torch.as_tensor(_DeviceArray(ptr, (B, 4), "<i4"), device=q.device).copy_(rec)

    o = torch.zeros((B * Sq, H, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((H, B * Sq), dtype=torch.float32, device=q.device)
    launch_varlen(pattern_id(pattern), qb.view(B * Sq, H, D), kb.view(B * Sk, Hkv, D), vb.view(B * Sk, Hkv, D),
                  o, lse, scale, fill, B, Sk)
    o = o.view(B, Sq, H, D)
    if seq_dim == 2:
        o = o.transpose(1, 2).contiguous()
    lse = lse.view(H, B, Sq).transpose(0, 1)
    return (o, lse) if return_lse else o


# ---- paged decode ------------------------------------------------------------------------

_decode_cache = {}   # decode launch signature -> _Entry


def _decode_kv(q: Tensor, k_cache: Tensor, v_cache: Tensor, k_scale, v_scale):
    """The pools' dtype code (0: q's 16-bit dtype; DTYPE_E4M3: fp8 pages) and
    the scales as float32 [Hkv] tensors on the pools' device (or None)."""
    if k_cache.dtype != v_cache.dtype:
        raise ValueError(f"s2c: decode takes k_cache and v_cache of one dtype, got {k_cache.dtype} and "
                         f"{v_cache.dtype}")
    f8 = getattr(torch, "float8_e4m3fn", None)
    if f8 is None or k_cache.dtype != f8:
        if k_cache.dtype != q.dtype:
            if str(k_cache.dtype).startswith("torch.float8"):
                raise NotImplementedError(f"s2c: decode takes float8_e4m3fn caches, not {k_cache.dtype}")
            raise ValueError(f"s2c: decode takes caches of q's dtype ({q.dtype}) or torch.float8_e4m3fn, "
                             f"got {k_cache.dtype}")
        if k_scale is not None or v_scale is not None:
            raise ValueError(f"s2c: k_scale and v_scale are for torch.float8_e4m3fn caches, not {k_cache.dtype}")
        return 0, None, None
    hkv = k_cache.shape[2]
    scales = []
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if s is None:
            scales.append(None)
            continue
        if not isinstance(s, Tensor):
            s = torch.full((hkv,), float(s), dtype=torch.float32, device=k_cache.device)
        if s.dtype != torch.float32 or s.numel() not in (1, hkv) or s.device != k_cache.device:
            raise ValueError(f"s2c: {name} must be a float32 tensor of 1 or {hkv} (kv heads) elements on "
                             f"{k_cache.device}, got {s.dtype} {tuple(s.shape)} on {s.device}")
        scales.append(s.reshape(-1).expand(hkv).contiguous())
    return S.DTYPE_E4M3, scales[0], scales[1]


def decode(q: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Tensor, seq_lens: Tensor,
           pattern: Pattern, max_seq_len: int, softmax_scale: Optional[float] = None, splits: int = 0,
           return_lse: bool = False, *, k_scale=None, v_scale=None):
    """Paged decode (vLLM's layout): q [B, n_new, H, D]; pools k_cache,
    v_cache [num_pages, page_size, Hkv, D] of q's dtype, or torch.float8_e4m3fn
    (vLLM's fp8 KV cache: a stored value x stands for x * k_scale[kv head],
    V likewise; k_scale, v_scale float32 tensors of Hkv or 1 elements, or
    floats, None = 1.0; sm_90 and up); block_table int32 [B, pages]
    (page ids); seq_lens int32 [B] on the device, each in
    n_new..max_seq_len (trusted, as vLLM's).  Blocks the pattern drops are
    never read.  Splits the keys across CTAs as the GPU needs (split-KV)."""
    if q.dim() != 4 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(f"s2c: decode takes q [B, n, H, D] and pools [pages, page_size, Hkv, D], got "
                         f"{tuple(q.shape)}, {tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    if block_table.dtype != torch.int32 or seq_lens.dtype != torch.int32:
        raise ValueError("s2c: block_table and seq_lens must be int32")
    R.dtype_code(q)
    R.check_head_dim(q.shape[-1], "decode", q.dtype)
    kv_dtype, k_scale, v_scale = _decode_kv(q, k_cache, v_cache, k_scale, v_scale)
    q, k_cache, v_cache = _inner_contiguous(q), _inner_contiguous(k_cache), _inner_contiguous(v_cache)
    if kv_dtype and any(s % 16 for t in (k_cache, v_cache) for s in t.stride()[:-1]):
        # fp8 rows are read as 16-byte vectors of 16 elements
        k_cache, v_cache = k_cache.contiguous(), v_cache.contiguous()
    block_table, seq_lens = block_table.contiguous(), seq_lens.contiguous()
    key = (pattern_id(pattern), q.shape, q.stride(), k_cache.shape, k_cache.stride(), v_cache.stride(),
           block_table.shape, block_table.stride(), q.dtype, q.device, int(max_seq_len), splits, softmax_scale,
           kv_dtype)
    e = _decode_cache.get(key)
    if e is None or not e.plan.alive:
        if len(_decode_cache) >= _CACHE_MAX:
            _decode_cache.clear()
        e = _decode_cache[key] = _decode_entry(q, k_cache, v_cache, block_table, pattern, int(max_seq_len),
                                               splits, softmax_scale, kv_dtype)
    o = _empty(q.shape, dtype=e.dtype, device=e.device)
    lse = _empty(e.shapes, dtype=torch.float32, device=e.device) if return_lse else None
    a, ref, ctx = _args(e)
    a.q, a.o, a.lse = q.data_ptr(), o.data_ptr(), lse.data_ptr() if lse is not None else 0
    a.k_pages, a.v_pages = k_cache.data_ptr(), v_cache.data_ptr()
    a.block_table, a.seq_lens = block_table.data_ptr(), seq_lens.data_ptr()
    a.k_scale = k_scale.data_ptr() if k_scale is not None else 0
    a.v_scale = v_scale.data_ptr() if v_scale is not None else 0
    _launch(e, ref, ctx, "decode")     # workspace 0: the plan's own
    return (o, lse) if return_lse else o


def _decode_entry(q, k_cache, v_cache, block_table, pattern, max_seq_len, splits, softmax_scale, kv_dtype=0):
    B, n_new, H, D = q.shape
    P, page, Hkv = k_cache.shape[0], k_cache.shape[1], k_cache.shape[2]
    kern = R.device(q.device.index).kernel(pattern.for_heads(H, Hkv), S.KIND_DECODE, R.dtype_code(q), D, kv_dtype)
    a = S.DecodeArgs(batch=B, n_new=n_new, heads=H, kv_heads=Hkv, head_dim=D, dtype=R.dtype_code(q),
                     num_pages=P, page_size=page, max_pages_per_seq=block_table.shape[1],
                     max_seq_len=max_seq_len, splits=splits, scale=_scale(softmax_scale, D), kv_dtype=kv_dtype)
    _set3(a.q_stride, q.stride()[:3])
    _set3(a.o_stride, _meta(q.shape).stride()[:3])     # o: a contiguous [B, n, H, D]
    _set3(a.k_stride, k_cache.stride()[:3])
    _set3(a.v_stride, v_cache.stride()[:3])
    a.table_stride[0], a.table_stride[1] = block_table.stride(0), 0
    L = _lib.lib()
    plan = kern.plan(("decode", B, n_new, max_seq_len, splits),
                     lambda p: _lib.check(L.s2_attn_plan_add_decode(_lib.ctx(), p, C.byref(a)), "decode"))
    e = _Entry().bind(a, plan, L.s2_attn_plan_decode, q)
    e.shapes = (B, H, n_new)
    return e
