/* s2c — ahead-of-time artifacts: C sources that embed a cubin and launch its
 * kernels through the CUDA Driver API, in the shape of Triton's AOT compiler.
 *
 * s2_aot_emit() writes, for a module called NAME:
 *
 *   NAME.h   #include <cuda.h>, then
 *              extern const unsigned char NAME_cubin[];   (the cubin image)
 *              extern const size_t NAME_cubin_size;
 *              extern const char NAME_manifest[];         (the s2c manifest text)
 *              CUresult load_NAME(void);
 *              CUresult unload_NAME(void);
 *              CUresult NAME_KERNEL(CUstream stream, <kernel params>, <launch args>);
 *   NAME.c   the definitions.
 *
 * load_NAME() loads the embedded image into the current context
 * (cuModuleLoadData), looks up every kernel (cuModuleGetFunction) and raises
 * each kernel's dynamic shared memory limit to what it launches with
 * (cuFuncSetAttribute); on failure it unloads what it loaded and returns the
 * driver's CUresult.  Calling it again while loaded does nothing.
 * unload_NAME() returns cuModuleUnload's result (CUDA_SUCCESS when not loaded).
 * Kernels whose ABI has tensor-map parameters (S2_AOT_TMAP: the sm_90a
 * forward, s2_aot_abi_attn_fwd_tma) get them built inside the launcher with
 * cuTensorMapEncodeTiled, after the grid checks; a failing encode's result is
 * returned and nothing is launched.  NAME_combine's by-value pointer table
 * (S2_AOT_BYTES) is likewise built inside the launcher, from two lists of
 * device pointers it takes instead (s2_aot_abi_attn_combine).
 * A launcher returns CUDA_ERROR_NOT_INITIALIZED before load_NAME(), computes
 * its grid from its arguments (a zero dimension launches nothing and returns
 * CUDA_SUCCESS; a negative or too large one returns CUDA_ERROR_INVALID_VALUE),
 * and returns cuLaunchKernel's result.  Load, unload and launches share
 * unsynchronised module state: load before launching from several threads.
 * The generated code never prints, exits or aborts.
 */
#ifndef S2C_AOT_H
#define S2C_AOT_H

#include "s2c/common.h"

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum s2_aot_type {
    S2_AOT_PTR = 0, /* CUdeviceptr */
    S2_AOT_I32,     /* int32_t */
    S2_AOT_I64,     /* int64_t */
    S2_AOT_F32,     /* float */
    S2_AOT_TMAP,    /* CUtensorMap (128 bytes, by value): built by the launcher
                       (s2_aot_maps), not one of its arguments */
    S2_AOT_BYTES,   /* a by-value table built by the launcher (s2_aot_table),
                       not one of its arguments */
    S2_AOT_PTR_LIST, /* const CUdeviceptr * (launch arguments only): read by
                        the launcher to build its table */
    S2_AOT_TYPE_COUNT_
} s2_aot_type;

typedef struct s2_aot_param {
    const char *name;   /* a C identifier, unique in the launcher, not "stream" */
    s2_aot_type type;
} s2_aot_param;

/* How a launcher builds its S2_AOT_TMAP parameters. */
typedef enum s2_aot_maps {
    S2_AOT_MAPS_NONE = 0,
    /* the sm_90a forward's q_map, k_map, v_map (launch.h): 4-D
     * cuTensorMapEncodeTiled maps of q, k, v, dims {D, rows, heads, tensor batch},
     * byte strides {seq, head, batch} (a stride over an extent of 1 or <= 0
     * becomes D * element size, as s2_attn_fwd_tensor_maps does), box
     * {64, rows, 1, 1} with rows 64 for q and the kernel's kv_box_rows for k
     * and v, SWIZZLE_128B, interleave none, L2 promotion 256B, OOB fill none.
     * q rows = q_len, k/v rows = kv_rows, heads / kv_heads, tensor batch =
     * batch (1 when seqinfo != 0).  The ABI must name those parameters and
     * launch arguments; a failing encode's CUresult is returned unlaunched. */
    S2_AOT_MAPS_ATTN_FWD,
    /* the sm_90a backward's q_map and do_map (ABI bwd_tma, launch.h
     * parameters 51 and 52): the forward's q map rule for q and for d_o, rows
     * q_len, heads, tensor batch = batch (1 when seqinfo != 0), box
     * {64, kv_box_rows, 1, 1} (the spec's block_m). */
    S2_AOT_MAPS_ATTN_BWD
} s2_aot_maps;

/* How a launcher builds its S2_AOT_BYTES parameter. */
typedef enum s2_aot_table {
    S2_AOT_TABLE_NONE = 0,
    /* NAME_combine's `inputs` (decode.h): {uint64 o[64]; uint64 lse[64]},
     * o[i] = o_in[i] and lse[i] = lse_in[i] for i < n_in (a NULL list gives
     * zeros: inputs at o_base / lse_base), the rest zero, as s2_combine fills
     * it.  n_in outside 1..64 returns CUDA_ERROR_INVALID_VALUE unlaunched. */
    S2_AOT_TABLE_COMBINE
} s2_aot_table;

/* A kernel's launch ABI: its parameters in order, the launcher's extra
 * arguments that are not passed to the kernel, and where each grid
 * dimension comes from (the name of an integer parameter or launch argument;
 * NULL = 1). */
typedef struct s2_aot_abi {
    const char *name;                   /* for messages */
    const s2_aot_param *params;
    int num_params;
    const s2_aot_param *launch_args;
    int num_launch_args;
    const char *grid[3];
    s2_aot_maps maps;                   /* who builds the S2_AOT_TMAP parameters */
    /* grid (x, 1, 1) with x = the current device's SMs times the kernel's
     * resident CTAs per SM (registers, shared memory, threads: the runtime's
     * rule), at most the product of the integer parameters n_work and batch,
     * at least 1; grid[] unused */
    bool grid_persistent;
    s2_aot_table table;                 /* who builds the S2_AOT_BYTES parameter */
} s2_aot_abi;

/* The forward attention kernel (S2_KERNEL_FWD):
 *   params  q, k, v, o, lse                               CUdeviceptr
 *           q_stride_b, q_stride_s, q_stride_h, k_stride_*, v_stride_*, o_stride_*   int64
 *           q_len, kv_len                                 int32
 *           scale_log2                                    float
 *           class_of_head, offsets, entries               CUdeviceptr (packed schedule)
 *           first_q_tile, q_tiles                         int32
 *           seqinfo                                       CUdeviceptr (s2_attn_seq [batch], or 0)
 *   launch  heads, batch                                  int32
 *   grid    (q_tiles, heads, batch) */
S2_API const s2_aot_abi *s2_aot_abi_attn_fwd(void);

/* The sm_90a tensor-map forward (manifest record ABI fwd_tma):
 *   params  q .. q_tiles as s2_aot_abi_attn_fwd (0..24),
 *           q_map, k_map, v_map      CUtensorMap, built by the launcher (S2_AOT_MAPS_ATTN_FWD)
 *           seqinfo                  CUdeviceptr (s2_attn_seq [batch], or 0)
 *   launch  heads, batch, kv_heads   int32
 *           kv_rows                  int64: the rows of k and v (= kv_len for a
 *                                    uniform batch; with seqinfo, the token rows of
 *                                    the packed k/v, while kv_len is the longest kv_len)
 *   grid    (q_tiles, heads, batch)
 * The launcher signature is therefore
 *   CUresult NAME_KERNEL(CUstream stream, CUdeviceptr q, k, v, o, lse,
 *                        int64_t q_stride_b .. o_stride_h, int32_t q_len, kv_len,
 *                        float scale_log2, CUdeviceptr class_of_head, offsets, entries,
 *                        int32_t first_q_tile, q_tiles, CUdeviceptr seqinfo,
 *                        int32_t heads, batch, kv_heads, int64_t kv_rows);
 * i.e. the pointer forward's plus kv_heads and kv_rows; the schedule buffers
 * are the caller's, as there. */
S2_API const s2_aot_abi *s2_aot_abi_attn_fwd_tma(void);

/* The persistent sm_90a forward (manifest record ABI fwd_tma_persistent,
 * also a module's wide variant NAME_w, role fwd_wide, on that ABI):
 *   params  q .. v_map as s2_aot_abi_attn_fwd_tma (0..27),
 *           work                     CUdeviceptr: int32 [n_work], the longest-first
 *                                    work list (s2_schedule_work_list)
 *           n_work, batch            int32
 *           counter                  CUdeviceptr: 2 int32, zero before the first
 *                                    launch (each launch leaves them zero); one pair
 *                                    per stream that may run a launch at a time
 *           seqinfo                  CUdeviceptr (s2_attn_seq [batch], or 0)
 *   launch  heads, kv_heads          int32
 *           kv_rows                  int64 (as the tensor-map forward)
 *   grid    persistent (grid_persistent above)
 * i.e. CUresult NAME_KERNEL(CUstream stream, CUdeviceptr q, k, v, o, lse,
 *                           int64_t q_stride_b .. o_stride_h, int32_t q_len, kv_len,
 *                           float scale_log2, CUdeviceptr class_of_head, offsets,
 *                           entries, int32_t first_q_tile, q_tiles, CUdeviceptr work,
 *                           int32_t n_work, batch, CUdeviceptr counter, seqinfo,
 *                           int32_t heads, kv_heads, int64_t kv_rows);
 * The schedule is packed for the kernel's own tile shape and format:
 * NAME_w's in owned pairs (block_m 128, key tiles of one 64-token block),
 * by s2_manifest_schedule_pack (s2c/manifest.h), as the runtime does. */
S2_API const s2_aot_abi *s2_aot_abi_attn_fwd_tma_persistent(void);

/* The backward module (S2_KERNEL_BWD, launch.h): three kernels NAME_pre,
 * NAME_dkdv, NAME_dq with the same 52 parameters, so one ABI each with the
 * same launcher arguments; call the three launchers in that order on one
 * stream (the _tma ABIs below for modules with tensor-map parameters).
 *   params  q, k, v, o, d_o, lse, dlse, delta, lse2, dq, dk, dv     CUdeviceptr
 *             (delta and lse2: fp32 [B][H][Sq] workspaces; the runtime's
 *             s2_attn_bwd_workspace_bytes workspace is delta, then lse2 at half)
 *           {q,k,v,o,d_o,dq,dk,dv}_stride_{b,s,h}                  int64
 *           q_len, kv_len                                         int32
 *           scale_log2                                            float
 *           class_of_head, offsets, entries                       CUdeviceptr (packed forward schedule)
 *           first_q_tile, q_tiles                                 int32
 *           t_class_of_head, t_offsets, t_entries                 CUdeviceptr (packed transposed schedule)
 *           kv_tiles                                              int32
 *           ds, ds_head, ds_map                                   CUdeviceptr (the dS workspace, or 0)
 *           seqinfo                                               CUdeviceptr (s2_attn_seq [batch], or 0:
 *             launch.h; with it q_len is the token rows and NAME_pre is launched with batch 1)
 *   launch  heads, kv_heads, batch                                int32
 *   grid    pre (cdiv(q_len, grid_div), heads, batch), no shared memory;
 *           dkdv (kv_tiles, kv_heads, batch); dq (q_tiles, heads, batch) */
S2_API const s2_aot_abi *s2_aot_abi_attn_bwd_pre(void);
S2_API const s2_aot_abi *s2_aot_abi_attn_bwd_dkdv(void);
S2_API const s2_aot_abi *s2_aot_abi_attn_bwd_dq(void);
/* NAME_dqds (modules whose manifest lists it): launch it instead of
 * NAME_dq with ds, ds_head and ds_map given (the s2_ds_map of the two
 * schedules, layout.h) after NAME_dkdv wrote the dS tiles, with its manifest
 * record's shared memory.  NAME_dqds2 takes the same ABI with its record's
 * block and a grid of cdiv(q_tiles, 2) (grid_div 2). */
S2_API const s2_aot_abi *s2_aot_abi_attn_bwd_dqds(void);
/* The same four for a module with the tensor-map parameters (manifest records
 * of ABI bwd_tma): params as above then q_map, do_map
 * (CUtensorMap, built by the launcher: S2_AOT_MAPS_ATTN_BWD). */
S2_API const s2_aot_abi *s2_aot_abi_attn_bwd_pre_tma(void);
S2_API const s2_aot_abi *s2_aot_abi_attn_bwd_dkdv_tma(void);
S2_API const s2_aot_abi *s2_aot_abi_attn_bwd_dq_tma(void);
S2_API const s2_aot_abi *s2_aot_abi_attn_bwd_dqds_tma(void);

/* The paged decode kernel NAME of a decode module (S2_KERNEL_DECODE,
 * decode.h); NAME_combine's is s2_aot_abi_attn_combine.
 *   params  q, k_pages, v_pages, o, lse, ws_o, ws_lse                  CUdeviceptr
 *           q_stride_{b,s,h}, k_stride_{page,slot,h}, v_stride_{page,slot,h}, o_stride_{b,s,h}   int64
 *           block_table CUdeviceptr, table_stride_b, table_stride_h int64
 *           seq_lens CUdeviceptr, n, page_size int32, scale_log2 float
 *           class_of_kv_head, offsets, entries CUdeviceptr, q_blocks int32   (packed kept-block lists,
 *             s2_decode_lists_pack, decode.h)
 *           splits int32, counters CUdeviceptr (i32 [B][kv_heads], zeroed once; splits > 1)
 *   launch  kv_heads, batch                                              int32
 *   grid    (splits, kv_heads, batch)
 * With splits > 1, ws_o / ws_lse / counters are the caller's workspace
 * (decode.h gives their shapes; s2_attn_decode carves them from one buffer). */
S2_API const s2_aot_abi *s2_aot_abi_attn_decode(void);

/* NAME_combine of a decode module (decode.h): merges n_in 16-bit outputs of
 * disjoint key sets by their LSE, as s2_combine.
 *   params  inputs                   {uint64 o[64]; uint64 lse[64]} by value, built by
 *                                    the launcher from o_in and lse_in (S2_AOT_TABLE_COMBINE)
 *           o_base, lse_base         CUdeviceptr: when o_base is set, input i is at
 *                                    o_base + i * o_part elements (lse likewise)
 *           o_part, lse_part         int64
 *           in_stride_{b,s,h}        int64
 *           out                      CUdeviceptr (16-bit [B, S, H, D])
 *           out_stride_{b,s,h}       int64
 *           lse_out                  CUdeviceptr (fp32 [B][H][S], or 0)
 *           n_in, s, h, rows         int32 (rows = B * S * H)
 *   launch  o_in, lse_in             const CUdeviceptr *: n_in inputs each, or NULL
 *   grid    (cdiv(rows, grid_div), 1, 1), grid_div = threads / (head_dim / 8)
 * i.e. CUresult NAME_KERNEL(CUstream stream, CUdeviceptr o_base, lse_base,
 *                           int64_t o_part, lse_part, in_stride_b .. in_stride_h,
 *                           CUdeviceptr out, int64_t out_stride_b .. out_stride_h,
 *                           CUdeviceptr lse_out, int32_t n_in, s, h, rows,
 *                           const CUdeviceptr *o_in, const CUdeviceptr *lse_in); */
S2_API const s2_aot_abi *s2_aot_abi_attn_combine(void);

/* NAME_seqs of a forward module (launch.h, ABI seqs): the records of a
 * variable-length batch from cumulative lengths on the device.
 *   params  cu_q, cu_k               CUdeviceptr: int32 [n + 1] (cu_k 0: cu_q)
 *           seqinfo                  CUdeviceptr: s2_attn_seq [n], written
 *           n, max_kv_len            int32
 *   grid    (cdiv(n, grid_div), 1, 1), grid_div = threads */
S2_API const s2_aot_abi *s2_aot_abi_attn_seqs(void);

typedef struct s2_aot_kernel {
    const char *name;        /* launcher NAME_<name>; a C identifier */
    const char *symbol;      /* the kernel's symbol in the cubin */
    const s2_aot_abi *abi;
    int threads;             /* blockDim.x, 1..1024 (from the manifest) */
    int smem_bytes;          /* dynamic shared memory, >= 0 (from the manifest) */
    /* ABIs with tensor maps only (from the manifest's spec): */
    s2_dtype dtype;          /* S2_DTYPE_BF16 or S2_DTYPE_F16 */
    int head_dim;            /* D, a positive multiple of 64 */
    int kv_box_rows;         /* ATTN_FWD: k/v box rows, block_n / kv_gather; ATTN_BWD: q/do box
                              * rows, block_m; 1..256 */
    /* grid_div[d] > 1: grid dimension d is ceil(its source / grid_div[d])
     * (the backward's NAME_pre and NAME_combine: threads / (head_dim / 8)
     * rows per CTA; NAME_dqds2: 2 query tiles per CTA) */
    int grid_div[3];
} s2_aot_kernel;

typedef struct s2_aot_module {
    const char *name;        /* file and symbol prefix; a C identifier */
    const uint8_t *cubin;
    size_t cubin_size;
    const char *manifest;    /* NUL-terminated; NULL = "" */
    const s2_aot_kernel *kernels;
    int num_kernels;         /* >= 1 */
} s2_aot_module;

/* The two files' text (malloc'd, NUL-terminated; free()).  S2_ERR_INVALID
 * with a message for a bad name, type, ABI or launch shape. */
S2_API s2_status s2_aot_emit(s2_ctx *ctx, const s2_aot_module *m, char **header, char **source);
/* Emit and write DIR/NAME.h and DIR/NAME.c (each atomically). */
S2_API s2_status s2_aot_write(s2_ctx *ctx, const s2_aot_module *m, const char *dir);

#ifdef __cplusplus
}
#endif
#endif
