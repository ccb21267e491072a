"""ctypes mirrors of the C API's structs and enums (include/s2c/*.h).

tests/test_abi.py compiles the headers and checks every size, offset and
enum value given here, so a header change that is not mirrored fails CI."""
import ctypes as C

c_devptr = C.c_uint64

# s2_status (common.h), in order
STATUS_NAMES = [
    "S2_OK", "S2_ERR_NOMEM", "S2_ERR_IO", "S2_ERR_PARSE", "S2_ERR_INVALID", "S2_ERR_UNSUPPORTED",
    "S2_ERR_NOT_FOUND", "S2_ERR_TOOLCHAIN", "S2_ERR_NO_DRIVER", "S2_ERR_NO_DEVICE", "S2_ERR_CUDA",
    "S2_ERR_INTERNAL", "S2_ERR_NULL_ARG", "S2_ERR_ALIGNMENT", "S2_ERR_SHAPE", "S2_ERR_STRIDE",
    "S2_ERR_HEADS", "S2_ERR_SEQ_LEN", "S2_ERR_DTYPE", "S2_ERR_HEAD_DIM", "S2_ERR_DEVICE_DATA",
    "S2_ERR_CAPTURE",
]
STATUS = {name: i for i, name in enumerate(STATUS_NAMES)}

# s2_dtype (common.h)
DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_F64, DTYPE_E4M3, DTYPE_E5M2 = 0, 1, 2, 3, 4, 5
# s2_kernel_kind, s2_arch (spec.h); s2_cubin_backend (codegen.h); s2_vert_position (pattern.h)
KIND_FWD, KIND_BWD, KIND_DECODE = 0, 1, 2
ARCH_SM80, ARCH_SM90, ARCH_SM90A = 0, 1, 2
CUBIN_AUTO, CUBIN_PTXAS, CUBIN_NVJITLINK = 0, 1, 2
VERT_ABSOLUTE, VERT_RELATIVE = 0, 1
# s2_cp_sharding (cpplan.h)
CP_CONTIGUOUS, CP_ZIGZAG = 0, 1
COMBINE_MAX_INPUTS = 64   # S2_COMBINE_MAX_INPUTS (decode.h)

ENUMS = {  # C name -> value, checked against the headers
    "S2_DTYPE_F32": DTYPE_F32, "S2_DTYPE_F16": DTYPE_F16, "S2_DTYPE_BF16": DTYPE_BF16, "S2_DTYPE_F64": DTYPE_F64,
    "S2_DTYPE_E4M3": DTYPE_E4M3, "S2_DTYPE_E5M2": DTYPE_E5M2,
    "S2_KERNEL_FWD": KIND_FWD, "S2_KERNEL_BWD": KIND_BWD, "S2_KERNEL_DECODE": KIND_DECODE,
    "S2_ARCH_SM80": ARCH_SM80, "S2_ARCH_SM90": ARCH_SM90, "S2_ARCH_SM90A": ARCH_SM90A,
    "S2_CUBIN_AUTO": CUBIN_AUTO, "S2_CUBIN_PTXAS": CUBIN_PTXAS, "S2_CUBIN_NVJITLINK": CUBIN_NVJITLINK,
    "S2_VERT_ABSOLUTE": VERT_ABSOLUTE, "S2_VERT_RELATIVE": VERT_RELATIVE,
    "S2_CP_CONTIGUOUS": CP_CONTIGUOUS, "S2_CP_ZIGZAG": CP_ZIGZAG, "S2_COMBINE_MAX_INPUTS": COMBINE_MAX_INPUTS,
    **STATUS,
}

I64x3 = C.c_int64 * 3


class HeadRule(C.Structure):            # s2_head_rule
    _fields_ = [("dense", C.c_bool), ("local_left", C.c_int), ("local_right", C.c_int),
                ("vert_stride", C.c_int), ("shift", C.c_int64), ("mask", C.c_int), ("mask_head", C.c_int)]


class BlockMask(C.Structure):           # s2_block_mask
    _fields_ = [("name", C.c_char_p), ("heads", C.c_int), ("rows", C.c_int64), ("cols", C.c_int64),
                ("bits", C.POINTER(C.c_uint8)), ("file", C.c_char_p)]


class PatternDef(C.Structure):          # s2_pattern_def
    _fields_ = [("name", C.c_char_p), ("heads", C.c_int), ("kv_heads", C.c_int), ("block_size", C.c_int),
                ("causal", C.c_bool), ("vert_position", C.c_int), ("max_seq_len", C.c_int64),
                ("rules", C.POINTER(HeadRule)), ("mask", C.POINTER(BlockMask))]


class KernelSpec(C.Structure):          # s2_kernel_spec
    _fields_ = [("kind", C.c_int), ("dtype", C.c_int), ("head_dim", C.c_int), ("arch", C.c_int),
                ("block_m", C.c_int), ("block_n", C.c_int), ("num_warps", C.c_int), ("num_stages", C.c_int),
                ("kv_dtype", C.c_int)]


class JitOpts(C.Structure):             # s2_jit_opts
    _fields_ = [("cache_dir", C.c_char_p), ("no_cache", C.c_bool), ("backend", C.c_int),
                ("trust_cache_dir", C.c_bool)]


class FwdArgs(C.Structure):             # s2_attn_fwd_args (launch.h)
    _fields_ = [("batch", C.c_int), ("q_len", C.c_int64), ("kv_len", C.c_int64), ("heads", C.c_int),
                ("kv_heads", C.c_int), ("head_dim", C.c_int), ("dtype", C.c_int),
                ("q", c_devptr), ("k", c_devptr), ("v", c_devptr), ("o", c_devptr), ("lse", c_devptr),
                ("q_stride", I64x3), ("k_stride", I64x3), ("v_stride", I64x3), ("o_stride", I64x3),
                ("scale", C.c_float), ("seqs", C.c_void_p),
                ("q_descale", c_devptr), ("k_descale", c_devptr), ("v_descale", c_devptr)]


class BwdArgs(C.Structure):             # s2_attn_bwd_args (launch.h)
    _fields_ = [("batch", C.c_int), ("q_len", C.c_int64), ("kv_len", C.c_int64), ("heads", C.c_int),
                ("kv_heads", C.c_int), ("head_dim", C.c_int), ("dtype", C.c_int),
                ("q", c_devptr), ("k", c_devptr), ("v", c_devptr), ("o", c_devptr), ("d_o", c_devptr),
                ("lse", c_devptr), ("d_lse", c_devptr), ("dq", c_devptr), ("dk", c_devptr), ("dv", c_devptr),
                ("workspace", c_devptr),
                ("q_stride", I64x3), ("k_stride", I64x3), ("v_stride", I64x3), ("o_stride", I64x3),
                ("do_stride", I64x3), ("dq_stride", I64x3), ("dk_stride", I64x3), ("dv_stride", I64x3),
                ("scale", C.c_float), ("workspace_bytes", C.c_size_t), ("seqs", C.c_void_p)]


class DecodeArgs(C.Structure):          # s2_attn_decode_args (decode.h)
    _fields_ = [("batch", C.c_int), ("n_new", C.c_int), ("heads", C.c_int), ("kv_heads", C.c_int),
                ("head_dim", C.c_int), ("dtype", C.c_int), ("q", c_devptr), ("o", c_devptr), ("lse", c_devptr),
                ("k_pages", c_devptr), ("v_pages", c_devptr), ("num_pages", C.c_int64), ("page_size", C.c_int),
                ("q_stride", I64x3), ("o_stride", I64x3), ("k_stride", I64x3), ("v_stride", I64x3),
                ("block_table", c_devptr), ("table_stride", C.c_int64 * 2), ("max_pages_per_seq", C.c_int64),
                ("seq_lens", c_devptr), ("max_seq_len", C.c_int64), ("workspace", c_devptr),
                ("splits", C.c_int), ("scale", C.c_float), ("kv_dtype", C.c_int), ("k_scale", c_devptr),
                ("v_scale", c_devptr)]


class AttnSeq(C.Structure):             # s2_attn_seq (launch.h)
    _fields_ = [("q_start", C.c_int32), ("q_len", C.c_int32), ("k_start", C.c_int32), ("kv_len", C.c_int32)]


class CombineArgs(C.Structure):         # s2_combine_args (decode.h)
    _fields_ = [("n", C.c_int), ("batch", C.c_int), ("heads", C.c_int), ("head_dim", C.c_int),
                ("seq", C.c_int64), ("dtype", C.c_int), ("o_in", c_devptr * COMBINE_MAX_INPUTS),
                ("lse_in", c_devptr * COMBINE_MAX_INPUTS), ("in_stride", I64x3), ("o", c_devptr),
                ("lse", c_devptr), ("o_stride", I64x3), ("sinks", c_devptr)]


class TileSpec(C.Structure):            # s2_tile_spec (layout.h)
    _fields_ = [("block_m", C.c_int), ("block_n", C.c_int)]


class TileEntry(C.Structure):           # s2_tile_entry (layout.h)
    _fields_ = [("tile", C.c_int64), ("live", C.c_uint64), ("row_mask", C.c_uint32), ("flags", C.c_uint32)]


class TileGeom(C.Structure):            # s2_tile_geom (layout.h)
    _fields_ = [("block_m", C.c_int), ("block_n", C.c_int), ("sub_m", C.c_int), ("sub_n", C.c_int),
                ("sub_m_size", C.c_int), ("sub_n_size", C.c_int), ("first_q_tile", C.c_int64),
                ("q_tiles", C.c_int64), ("kv_tiles", C.c_int64)]


class Schedule(C.Structure):            # s2_schedule (layout.h)
    _fields_ = [("geom", TileGeom), ("num_classes", C.c_int), ("heads", C.c_int),
                ("class_of_head", C.POINTER(C.c_int)), ("offsets", C.POINTER(C.c_int64)),
                ("entries", C.POINTER(TileEntry)), ("transposed", C.c_bool)]


class CpPlanArgs(C.Structure):          # s2_cp_plan_args (cpplan.h)
    _fields_ = [("seq_len", C.c_int64), ("ranks", C.c_int), ("sharding", C.c_int), ("spec", TileSpec),
                ("schedules", C.c_bool), ("max_entries", C.c_int64)]


class CpBlock(C.Structure):             # s2_cp_block (cpplan.h)
    _fields_ = [("block", C.c_int64), ("slot", C.c_int64), ("peer", C.c_int)]


class CpRankStats(C.Structure):         # s2_cp_rank_stats (cpplan.h)
    _fields_ = [("recv_blocks", C.c_int64), ("send_blocks", C.c_int64), ("recv_bytes", C.c_double),
                ("send_bytes", C.c_double), ("ring_bytes", C.c_double), ("kept_pairs", C.c_double),
                ("fwd_flops", C.c_double)]


ALLOC_FN = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_size_t, C.c_void_p, C.POINTER(c_devptr))
FREE_FN = C.CFUNCTYPE(None, C.c_void_p, c_devptr, C.c_void_p)


class Allocator(C.Structure):           # s2_allocator (runtime.h)
    _fields_ = [("alloc", ALLOC_FN), ("free", FREE_FN), ("user", C.c_void_p)]


# C name of each mirror, for the ABI test
STRUCTS = {
    "s2_head_rule": HeadRule, "s2_block_mask": BlockMask, "s2_pattern_def": PatternDef,
    "s2_kernel_spec": KernelSpec, "s2_jit_opts": JitOpts, "s2_attn_fwd_args": FwdArgs,
    "s2_attn_bwd_args": BwdArgs, "s2_attn_decode_args": DecodeArgs, "s2_attn_seq": AttnSeq,
    "s2_allocator": Allocator, "s2_combine_args": CombineArgs, "s2_tile_spec": TileSpec,
    "s2_tile_entry": TileEntry, "s2_tile_geom": TileGeom, "s2_schedule": Schedule, "s2_cp_plan_args": CpPlanArgs,
    "s2_cp_block": CpBlock, "s2_cp_rank_stats": CpRankStats,
}
