"""The GPU side: one s2_device per torch device (torch's primary context, its
caching allocator), kernels JIT-compiled through the disk cache, and plans
prepared per shape so that launches only launch (CUDA-graph capturable)."""
import ctypes as C
import importlib.util
import os
import shutil
import threading

import torch

from . import _lib
from . import _structs as S
from ._lib import check

_DTYPES = {torch.float16: S.DTYPE_F16, torch.bfloat16: S.DTYPE_BF16, torch.float32: S.DTYPE_F32}
# What the kernels cover (the kernel-coverage work widens it).
FWD_HEAD_DIMS = tuple(range(16, 257, 16))
# fp32 tensors: the tf32 forward takes every multiple of 16 up to 256; their
# backward runs the bf16 kernels on converted copies (ops._bwd_impl), decode has none.
FP32_FWD_HEAD_DIMS = tuple(range(16, 257, 16))
BWD_HEAD_DIMS = tuple(range(16, 257, 16))
DECODE_HEAD_DIMS = tuple(range(16, 257, 16))
# float8_e4m3fn q, k, v: the sm_90a forward only (ops._fp8_check), o in bf16
FP8_FWD_HEAD_DIMS = tuple(range(32, 257, 32))
E4M3 = getattr(torch, "float8_e4m3fn", None)     # torch >= 2.1

_lock = threading.RLock()
_devices = {}


def dtype_code(t):
    try:
        return _DTYPES[t.dtype]
    except KeyError:
        raise NotImplementedError(f"s2c: dtype {t.dtype} is not covered yet: the kernels take torch.float16, "
                                  f"torch.bfloat16 and torch.float32 (torch.float8_e4m3fn: sparse_attn_func and "
                                  f"sparse_attn_varlen_func, sm_90a)") from None


def check_head_dim(d, kind="forward", dtype=None):
    if dtype == torch.float32 and kind == "decode":
        raise NotImplementedError("s2c: the decode kernels take torch.float16 and torch.bfloat16, not torch.float32")
    if E4M3 is not None and dtype == E4M3 and kind != "forward":
        raise NotImplementedError(f"s2c: the {kind} kernels do not take torch.float8_e4m3fn q, k, v")
    dims = {"forward": FWD_HEAD_DIMS, "backward": BWD_HEAD_DIMS, "decode": DECODE_HEAD_DIMS}[kind]
    if dtype == torch.float32 and kind == "forward":
        dims = FP32_FWD_HEAD_DIMS
    elif E4M3 is not None and dtype == E4M3:
        dims = FP8_FWD_HEAD_DIMS
    if d not in dims:
        raise NotImplementedError(f"s2c: head_dim {d} is not covered yet by the {kind} kernels: they take "
                                  f"{', '.join(map(str, dims))}")


def _find_ptxas():
    """ptxas for the JIT: the C library looks at $S2C_PTXAS, $PATH and the CUDA
    toolkit; on a machine with only torch, Triton's bundled ptxas serves."""
    if os.environ.get("S2C_PTXAS") or shutil.which("ptxas"):
        return
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    if os.path.exists(os.path.join(home, "bin", "ptxas")):
        return
    spec = importlib.util.find_spec("triton")
    if spec and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            cand = os.path.join(root, "backends", "nvidia", "bin", "ptxas")
            if os.access(cand, os.X_OK):
                os.environ["S2C_PTXAS"] = cand
                return


class Device:
    """s2c's view of one torch CUDA device."""

    def __init__(self, index):
        self.index = index
        torch.cuda.init()
        with torch.cuda.device(index):
            torch.cuda.current_stream(index).synchronize()   # the primary context exists from here
            L, ctx = _lib.lib(), _lib.ctx()
            out = C.c_void_p()
            check(L.s2_device_open(ctx, index, C.byref(out)), f"cuda:{index}")
            self.ptr = out.value
            self._set_allocator(L, ctx)
        self.cc = torch.cuda.get_device_capability(index)
        self.kernels = {}

    def _set_allocator(self, L, ctx):
        index = self.index

        def alloc(user, nbytes, stream, out):
            try:
                out[0] = torch.cuda.caching_allocator_alloc(max(int(nbytes), 1), index, stream or 0)
                return 0
            except Exception:   # the C side reports the failure
                return 1

        def free(user, ptr, stream):
            try:
                torch.cuda.caching_allocator_delete(ptr)
            except Exception:
                pass

        self._callbacks = (S.ALLOC_FN(alloc), S.FREE_FN(free))   # kept alive with the device
        a = S.Allocator(alloc=self._callbacks[0], free=self._callbacks[1], user=None)
        check(L.s2_device_set_allocator(ctx, self.ptr, C.byref(a)), "allocator")

    def kernel(self, pattern, kind, dtype, head_dim, kv_dtype=0):
        key = (pattern.key, kind, dtype, head_dim, kv_dtype)
        k = self.kernels.get(key)
        if k is None:
            with _lock:
                k = self.kernels.get(key)
                if k is None:
                    k = Kernel(self, pattern, kind, dtype, head_dim, kv_dtype)
                    self.kernels[key] = k
        return k


def device(index):
    d = _devices.get(index)
    if d is None:
        with _lock:
            d = _devices.get(index)
            if d is None:
                d = _devices[index] = Device(index)
    return d


_is_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)


def capturing():
    return _is_capturing() if _is_capturing is not None else torch.cuda.is_current_stream_capturing()


MAX_PLANS = 64   # per kernel


class Plan:
    """A prepared s2_attn_plan.  `captured`: a graph may hold its launches,
    so it is never freed; `alive` is false once freed (entries drop it)."""
    __slots__ = ("ptr", "captured", "alive")

    def __init__(self, ptr):
        self.ptr, self.captured, self.alive = ptr, False, True

    def free(self):
        self.alive = False
        _lib.lib().s2_attn_plan_free(self.ptr)


class Kernel:
    """A JIT-compiled kernel (s2_attn_kernel) with its prepared plans."""

    def __init__(self, dev, pattern, kind, dtype, head_dim, kv_dtype=0):
        if capturing():
            raise RuntimeError("s2c: a kernel would be compiled inside CUDA-graph capture; run the model once "
                               "before capturing")
        _find_ptxas()
        L, ctx = _lib.lib(), _lib.ctx()
        self.dev, self.pattern, self.kind = dev, pattern, kind
        spec = S.KernelSpec(kind=kind, dtype=dtype, head_dim=head_dim, kv_dtype=kv_dtype)
        out = C.c_void_p()
        opts = S.JitOpts(cache_dir=os.environ["S2C_CACHE_DIR"].encode() if os.environ.get("S2C_CACHE_DIR")
                         else None)
        with torch.cuda.device(dev.index):
            check(L.s2_jit_compile(ctx, dev.ptr, pattern.c_pattern(), C.byref(spec), C.byref(opts), C.byref(out),
                                   None), f"compiling {pattern.name}")
        self.ptr = out.value
        self.max_kv_len = L.s2_attn_kernel_max_kv_len(self.ptr)
        self.plans = {}
        self.seqs = {}

    def plan(self, key, declare):
        """The plan of shape `key`, prepared on the current stream at first use;
        `declare(plan_ptr)` declares the shape.  Inside capture an unprepared
        shape is an error (preparing allocates and copies).  Past MAX_PLANS
        shapes (generation makes a new key length each step) the oldest plan
        no capture has launched is freed."""
        p = self.plans.get(key)
        if p is not None and p.alive:
            return p
        if capturing():
            raise RuntimeError(f"s2c: shape {key} was not launched before CUDA-graph capture; run one step "
                               "(a warm-up) with these shapes first")
        with _lock:
            p = self.plans.get(key)
            if p is None:
                L, ctx = _lib.lib(), _lib.ctx()
                out = C.c_void_p()
                check(L.s2_attn_plan_new(ctx, self.ptr, C.byref(out)), "plan")
                try:
                    declare(out)
                    check(L.s2_attn_plan_prepare(ctx, out, raw_stream(self.dev.index)), "plan prepare")
                except BaseException:
                    L.s2_attn_plan_free(out)
                    raise
                p = self.plans[key] = Plan(out.value)
                self._evict()
        return p

    def _evict(self):
        if len(self.plans) <= MAX_PLANS:
            return
        for key, p in list(self.plans.items()):
            if not p.captured:
                del self.plans[key]
                p.free()
                if len(self.plans) <= MAX_PLANS:
                    return

    def device_seqs(self, n, max_kv_len):
        """A device-only varlen batch of n sequences (records written on the stream)."""
        key = (n, max_kv_len)
        s = self.seqs.get(key)
        if s is None:
            if capturing():
                raise RuntimeError("s2c: a new varlen batch size inside CUDA-graph capture; warm up first")
            L, ctx = _lib.lib(), _lib.ctx()
            out = C.c_void_p()
            check(L.s2_attn_seqs_new_device(ctx, self.dev.ptr, n, max_kv_len, C.byref(out)), "varlen batch")
            s = self.seqs[key] = out.value
        return s


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def raw_stream(index):
    """The current CUstream of device `index`, without making a Stream object."""
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream


def stream_of(t):
    return raw_stream(t.device.index)


def bsh_strides(t, seq_dim):
    """(batch, seq, head) strides in elements of a 4-D tensor whose sequence
    dimension is seq_dim (1: [B, S, H, D], 2: [B, H, S, D])."""
    return (t.stride(0), t.stride(seq_dim), t.stride(3 - seq_dim))
