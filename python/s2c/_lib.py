"""Finding and loading libs2rt and libs2c, their prototypes, and errors.

Search order: $S2C_LIBDIR (an install's libdir or a build directory), the
wheel's own copy (s2c/_libs), `pkg-config --variable=libdir s2c`, then the
dynamic linker's default path.  libs2rt is loaded first, by its path, so
libs2c finds it whatever its RUNPATH says."""
import ctypes as C
import glob
import os
import shutil
import subprocess
import threading

from . import _structs as S

_HERE = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()
_lib = None
_load_error = None


class S2Error(RuntimeError):
    """A libs2c / libs2rt call failed; .status is the C status name."""

    def __init__(self, status, message):
        self.status = status
        super().__init__(f"s2c: {message} ({status})" if message else f"s2c: {status}")


class S2ValueError(S2Error, ValueError):
    """Arguments the kernels refuse (shapes, strides, heads, dtype...)."""


class S2NotImplementedError(S2Error, NotImplementedError):
    """Valid, but not covered by the kernels (S2_ERR_UNSUPPORTED)."""


_VALUE_STATUSES = {"S2_ERR_INVALID", "S2_ERR_NULL_ARG", "S2_ERR_ALIGNMENT", "S2_ERR_SHAPE", "S2_ERR_STRIDE",
                   "S2_ERR_HEADS", "S2_ERR_SEQ_LEN", "S2_ERR_DTYPE", "S2_ERR_HEAD_DIM", "S2_ERR_PARSE"}


def _candidates():
    env = os.environ.get("S2C_LIBDIR")
    if env:
        # an install's libdir, or a build directory (jit/ and runtime/ below it)
        yield [env, os.path.join(env, "jit"), os.path.join(env, "runtime")]
        return
    yield [os.path.join(_HERE, "_libs")]
    if shutil.which("pkg-config"):
        try:
            out = subprocess.run(["pkg-config", "--variable=libdir", "s2c"], capture_output=True, text=True,
                                 timeout=10)
            if out.returncode == 0 and out.stdout.strip():
                yield [out.stdout.strip()]
        except (OSError, subprocess.SubprocessError):
            pass
    yield [None]


def _find(dirs, name):
    for d in dirs:
        if d is None:
            return name + ".so.0.2"       # the linker's search path
        hits = sorted(glob.glob(os.path.join(d, name + ".so*")), key=len)
        if hits:
            return hits[0]
    return None


def _declare(lib):
    """Prototypes of every C function the package calls."""
    P, I, I64, Z, B = C.c_void_p, C.c_int, C.c_int64, C.c_size_t, C.c_bool
    PP = C.POINTER(C.c_void_p)
    protos = {
        "s2_version": (C.c_char_p, []),
        "s2_status_name": (C.c_char_p, [I]),
        "s2_ctx_new": (P, []), "s2_ctx_free": (None, [P]), "s2_ctx_message": (C.c_char_p, [P]),
        "s2_pattern_build": (I, [P, C.POINTER(S.PatternDef), PP]),
        "s2_pattern_load": (I, [P, C.c_char_p, PP]),
        "s2_pattern_set_free": (None, [P]), "s2_pattern_set_count": (I, [P]),
        "s2_pattern_set_get": (P, [P, I]), "s2_pattern_set_find": (P, [P, C.c_char_p]),
        "s2_block_kept": (B, [P, I, I64, I64]),
        "s2_device_open": (I, [P, I, PP]), "s2_device_free": (None, [P]),
        "s2_device_set_allocator": (I, [P, P, C.POINTER(S.Allocator)]),
        "s2_cuda_driver_version": (I, [P, C.POINTER(I)]),
        "s2_jit_compile": (I, [P, P, P, C.POINTER(S.KernelSpec), C.POINTER(S.JitOpts), PP, P]),
        "s2_attn_kernel_free": (None, [P]),
        "s2_attn_kernel_max_kv_len": (I64, [P]),
        "s2_attn_forward": (I, [P, P, P, C.POINTER(S.FwdArgs)]),
        "s2_attn_backward": (I, [P, P, P, C.POINTER(S.BwdArgs)]),
        "s2_attn_decode": (I, [P, P, P, C.POINTER(S.DecodeArgs)]),
        "s2_attn_decode_workspace": (I, [P, P, C.POINTER(S.DecodeArgs), C.POINTER(Z)]),
        "s2_attn_plan_new": (I, [P, P, PP]), "s2_attn_plan_free": (None, [P]),
        "s2_attn_plan_add_forward": (I, [P, P, C.POINTER(S.FwdArgs)]),
        "s2_attn_plan_add_backward": (I, [P, P, C.POINTER(S.BwdArgs)]),
        "s2_attn_plan_add_decode": (I, [P, P, C.POINTER(S.DecodeArgs)]),
        "s2_attn_plan_prepare": (I, [P, P, P]),
        "s2_attn_plan_device_bytes": (I, [P, P, C.POINTER(Z)]),
        "s2_attn_plan_forward": (I, [P, P, P, C.POINTER(S.FwdArgs)]),
        "s2_attn_plan_backward": (I, [P, P, P, C.POINTER(S.BwdArgs)]),
        "s2_attn_plan_decode": (I, [P, P, P, C.POINTER(S.DecodeArgs)]),
        "s2_attn_seqs_new_device": (I, [P, P, I, I64, PP]),
        "s2_attn_seqs_new": (I, [P, P, C.POINTER(S.AttnSeq), I, PP]),
        "s2_attn_seqs_free": (None, [P]),
        "s2_attn_seqs_device": (C.c_uint64, [P]),
        "s2_attn_seqs_write_cu": (I, [P, P, P, C.c_uint64, C.c_uint64, P]),
        "s2_attn_bwd_workspace_bytes": (Z, [I, I, I64]),
        "s2_combine": (I, [P, P, P, C.POINTER(S.CombineArgs)]),
        # context parallelism: the plan (cpplan.h), launches over a caller's schedule
        "s2_cp_plan_new": (I, [P, P, C.POINTER(S.CpPlanArgs), PP]), "s2_cp_plan_free": (None, [P]),
        "s2_cp_plan_shard": (I, [P, I, C.POINTER(I64), C.POINTER(I64)]),
        "s2_cp_plan_owner": (I, [P, I64]), "s2_cp_plan_recv_tokens": (I64, [P, I]),
        "s2_cp_plan_recv": (I, [P, P, I, I, C.POINTER(C.POINTER(S.CpBlock)), C.POINTER(I64)]),
        "s2_cp_plan_send": (I, [P, P, I, I, C.POINTER(C.POINTER(S.CpBlock)), C.POINTER(I64)]),
        "s2_cp_plan_schedule": (C.POINTER(S.Schedule), [P, I, B]),
        "s2_cp_plan_rank_stats": (I, [P, P, I, I, I, C.POINTER(S.CpRankStats)]),
        "s2_attn_kernel_schedule": (I, [P, P, I64, I64, C.POINTER(C.POINTER(S.Schedule))]),
        "s2_schedule_free": (None, [P]),
        "s2_attn_sched_new": (I, [P, P, I64, I64, C.POINTER(S.Schedule), PP]), "s2_attn_sched_free": (None, [P]),
        "s2_attn_forward_sched": (I, [P, P, P, C.POINTER(S.FwdArgs), P]),
        "s2_attn_backward_sched": (I, [P, P, P, C.POINTER(S.BwdArgs), P]),
        "s2_attn_sched_backward_workspace": (I, [P, P, I, C.POINTER(Z)]),
    }
    for name, (res, args) in protos.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def lib():
    """The loaded libs2c (libs2rt's symbols through it), loaded once."""
    global _lib, _load_error
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        errors = []
        for dirs in _candidates():
            rt, gen = _find(dirs, "libs2rt"), _find(dirs, "libs2c")
            if not rt or not gen:
                continue
            try:
                C.CDLL(rt, mode=C.RTLD_GLOBAL)
                handle = C.CDLL(gen, mode=C.RTLD_GLOBAL)
            except OSError as e:
                errors.append(f"{gen}: {e}")
                continue
            _declare(handle)
            _lib = handle
            return _lib
        where = "; ".join(errors) or "not found (set S2C_LIBDIR, install s2c, or use the wheel)"
        _load_error = f"cannot load libs2c: {where}"
        raise OSError(_load_error)


class _Ctx(threading.local):
    ptr = None


_tls = _Ctx()


def ctx():
    """This thread's s2_ctx (the C messages are per thread)."""
    if _tls.ptr is None:
        _tls.ptr = lib().s2_ctx_new()
        if not _tls.ptr:
            raise MemoryError("s2_ctx_new")
    return _tls.ptr


def status_name(st):
    return S.STATUS_NAMES[st] if 0 <= st < len(S.STATUS_NAMES) else f"status {st}"


def check(st, what=None):
    """Raise the exception that fits a failed C call's status."""
    if st == 0:
        return
    name = status_name(st)
    msg = lib().s2_ctx_message(ctx()).decode("utf-8", "replace")
    if what:
        msg = f"{what}: {msg}" if msg else what
    if name == "S2_ERR_UNSUPPORTED":
        raise S2NotImplementedError(name, msg)
    if name in _VALUE_STATUSES:
        raise S2ValueError(name, msg)
    raise S2Error(name, msg)


def version():
    return lib().s2_version().decode()
