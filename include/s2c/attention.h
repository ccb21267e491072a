/* s2c — sparse attention kernels: what is generated, what an artifact
 * carries, and how it is launched.
 *
 * Generation (needs LLVM; libs2c):   s2_compile_attention()  -> s2_artifact
 * Loading and launching (no LLVM; libs2rt): s2_attn_load() -> s2_attn_forward()
 * JIT (libs2c, with an on-disk cache):  s2_jit_compile()
 *
 * Tensors follow the S2 Triton library: q [B, Sq, H, D], k/v [B, Sk, Hkv, D],
 * o like q, any strides in elements for (batch, seq, head) with the head
 * dimension contiguous — (B,S,H,D) and (B,H,S,D) are both just strides.
 * Queries are the last Sq of the Sk positions.  The softmax scale defaults to
 * 1/sqrt(D).  LSE is fp32, natural log, contiguous [B][H][Sq]; a row with
 * nothing to attend gives o = 0 and lse = -inf.
 */
#ifndef S2C_ATTENTION_H
#define S2C_ATTENTION_H

#include "s2c/common.h"
#include "s2c/layout.h"
#include "s2c/pattern.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum s2_kernel_kind {
    S2_KERNEL_FWD = 0,   /* forward with LSE */
    S2_KERNEL_BWD = 1,   /* backward: NAME_pre, NAME_dq, NAME_dkdv in one module */
    S2_KERNEL_DECODE = 2, /* paged decode: NAME, NAME_combine (s2c/decode.h) */
    S2_KERNEL_KIND_COUNT_
} s2_kernel_kind;

/* What to generate.  Zero fields take the per-architecture heuristic
 * (s2_kernel_spec_resolve); every resolved value is recorded in the manifest. */
typedef struct s2_kernel_spec {
    s2_kernel_kind kind;
    s2_dtype dtype;        /* S2_DTYPE_BF16 or S2_DTYPE_F16 */
    int head_dim;          /* 32, 64, 96, 128, 256 */
    int arch;              /* an s2_arch (codegen.h): sm_80, sm_90, sm_90a */
    /* Triton-style tunables (0 = heuristic) */
    int block_m;           /* query rows per CTA tile */
    int block_n;           /* key rows per tile */
    int num_warps;
    int num_stages;        /* K/V shared-memory pipeline depth */
    /* sm_90a forward only: 1 persistent grid over a longest-first work list
     * (S2_FWD_ABI_TMA_PERSISTENT), -1 one CTA per (q tile, head, batch);
     * 0 = heuristic (resolved to -1 there, the faster measured, and 0 on the other paths) */
    int persistent;
    /* sm_90a backward, head_dim 64 or 128: 1 the wgmma dK/dV and dQ bodies
     * (templates/bwd_sm90.c), -1 the mma.sync ones; 0 = heuristic (resolved
     * to 1 there when num_warps is 4, else -1; 0 on the other paths).  Same
     * kernels, parameters and launch either way. */
    int bwd_wgmma;
    /* Key tiles gathered from kv_gather pattern blocks (block_n = kv_gather *
     * block_size, not necessarily adjacent; manifest `kernel.kv_gather`).
     * sm_90a forward: 2..4 blocks, the packed schedule is
     * s2_schedule_pack_gathered's, the k and v tensor maps have boxes of
     * block_size rows; 0 = heuristic: 4 for block-16 patterns (block_n 64).
     * sm_90a wgmma backward: 4 blocks of 16 tokens, block_m = block_n = 64:
     * the dQ kernel's key tiles as the forward's, the dK/dV kernel's resident
     * key tile from s2_schedule_pack_gathered_kv (see the backward ABI);
     * 0 = heuristic: 4 for block-16 patterns.  1 = one key tile per entry.
     * Resolved to 1 or more on the sm_90a forward, 0 or 4 on the backward,
     * 0 elsewhere. */
    int kv_gather;
    /* sm_90a wgmma backward: 1 the dK/dV kernel copies its Q and dO tiles by
     * TMA, from two tensor maps the backward kernels take as parameters 51
     * and 52 (see the backward ABI); -1 by cp.async (parameters 0..50 only);
     * 0 = heuristic (resolved to 1 there, 0 on the other paths). */
    int bwd_tma;
} s2_kernel_spec;

/* Fill the zero tunables of *spec for pattern p and check the result:
 * block_m = 16 * num_warps (each warp owns a 16-row slab; default 64 rows,
 * 4 warps), block_n 64 (16 for patterns of block size 16), num_stages 2;
 * the tile must hold at most 64
 * sub-blocks of the pattern's block size and its shared memory must fit the
 * arch.  dtype (bf16/f16) and head_dim (32, 64, 96, 128) must be given.
 * S2_ERR_UNSUPPORTED names what does not fit. */
s2_status s2_kernel_spec_resolve(s2_ctx *ctx, s2_kernel_spec *spec, const s2_pattern *p);

/* Whether a resolved sm_90a forward spec takes owned pairs
 * (s2_schedule_pack_gathered_owned) instead of s2_schedule_pack_gathered's:
 * two 64-row warpgroups over two gathered 64-token blocks. */
static inline bool s2_kernel_spec_owned_pairs(const s2_kernel_spec *spec)
{
    /* (kv_gather above 1 is resolved on the sm_90a forward and backward only) */
    return spec->kind == S2_KERNEL_FWD && spec->block_m == 128 &&
           spec->kv_gather == 2 && spec->block_n == 128;
}

/* A forward schedule s (tile shape {block_m, block_n / kv_gather}) packed
 * for spec's kernel: owned pairs for the two-slab shape, gathered key tiles
 * when the spec gathers, else plain. */
static inline s2_status s2_kernel_spec_pack_forward(s2_ctx *ctx, const s2_kernel_spec *spec, const s2_schedule *s,
                                                    s2_packed_schedule *out)
{
    if (s2_kernel_spec_owned_pairs(spec))
        return s2_schedule_pack_gathered_owned(ctx, s, out);
    return spec->kv_gather > 1 ? s2_schedule_pack_gathered(ctx, s, spec->kv_gather, out) : s2_schedule_pack(ctx, s, out);
}

/* One dS tile of the backward's dS workspace: 64 x 64 16-bit values. */
enum { S2_BWD_DS_TILE_BYTES = 64 * 64 * 2 };

/* Whether the backward module of a resolved spec holds NAME_dqds (dQ from
 * the dS tiles the dK/dV kernel writes, backward ABI 48..50): the wgmma
 * bodies, no gathered key tiles, block_m = block_n = 64, block_size >= 64. */
bool s2_bwd_ds_capable(const s2_pattern *p, const s2_kernel_spec *spec);
/* NAME_dqds's ring (stages of a K tile and a dS tile) and the dynamic shared
 * memory it is launched with (less than the module's smem_bytes, so that
 * more CTAs share an SM). */
int s2_bwd_dqds_stages(void);
int s2_bwd_dqds_smem_bytes(const s2_kernel_spec *spec);
/* NAME_dqds2, its paired form: one CTA of 256 threads per two adjacent
 * query tiles of a head (query tiles q_tiles-1-2x and q_tiles-2-2x for
 * blockIdx.x = x; grid.x = ceil(q_tiles / 2)), over the union of their
 * lists, each K tile read once for both.  Only for forward lists of at most
 * S2_BWD_DQDS2_MAX_LIST entries in increasing key order; its dynamic shared
 * memory. */
enum { S2_BWD_DQDS2_MAX_LIST = 256, S2_BWD_DQDS2_THREADS = 256 };
/* the union's shared memory: two key arrays, the common-entry prefix
 * counts, 8 warp totals, then key tile and the two entries per union slot */
enum { S2_BWD_DQDS2_UNION_BYTES = 4 * (2 * 256 + 264 + 8 + 3 * 512) };
int s2_bwd_dqds2_smem_bytes(const s2_kernel_spec *spec);

/* ---- the forward kernel ABI ------------------------------------------------------
 * Symbol s2_fwd_<pattern name, non-identifier characters as '_'>_<bf16|f16>_d<D>.
 * Launch: grid (q_tiles, heads, batch), block (num_warps * 32), dynamic shared
 * memory art->smem_bytes (the manifest's kernel.smem).  Parameters, in order:
 *    0 ptr q        [B, Sq, H, D]    (global, 16-byte aligned, d contiguous)
 *    1 ptr k        [B, Sk, Hkv, D]
 *    2 ptr v        [B, Sk, Hkv, D]
 *    3 ptr o        [B, Sq, H, D]    (rows outside the queries are never written)
 *    4 ptr lse      fp32 [B][H][Sq] natural log, or null: not written
 *    5..7   i64 q strides (batch, seq, head) in elements, multiples of 8
 *    8..10  i64 k strides     11..13 i64 v strides     14..16 i64 o strides
 *   17 i32 q_len    18 i32 kv_len   (q_len <= kv_len; queries are the last q_len positions)
 *   19 f32 scale_log2 = softmax scale * log2(e)
 *   20 ptr class_of_head  (i32 [H])               \ the packed FORWARD schedule of
 *   21 ptr offsets        (i32 [classes*q_tiles+1]) } s2_schedule_pack for this
 *   22 ptr entries        (s2_dev_entry [])       /  (q_len, kv_len, block_m, block_n)
 *   23 i32 first_q_tile   24 i32 q_tiles           (from the schedule's geometry)
 * CTA x works on query tile first_q_tile + q_tiles-1-x (heavy tiles first) of
 * head y and batch z, over the entries of list class_of_head[y]*q_tiles + (q_tiles-1-x).
 * kv head = head / (heads / kv_heads).  Heads and the GQA ratio are those of
 * the pattern the kernel was generated for.  Empty rows: o = 0, lse = -inf.
 *   25 ptr seqinfo  s2_attn_seq [batch] (a variable-length batch, below), or null
 *                   for the uniform batch above.  In the TMA variants it is the
 *                   last parameter too: 28 (tma), 32 (tma_persistent).
 *
 * ---- variable-length batches (seqinfo non-null) -----------------------------------
 * Batch entry z is the sequence seqinfo[z] = {q_start, q_len, k_start, kv_len}:
 * its queries are q/o token rows q_start .. q_start+q_len-1 and its keys k/v
 * rows k_start .. k_start+kv_len-1 (rows count in seq strides; the batch
 * strides are not used).  Positions are the sequence's own: key i is at i,
 * query i at kv_len - q_len + i (q_len < kv_len: chunked prefill, the chunk
 * attends to the cached keys and to itself).  This covers packed batches
 * (cu_seqlens: start = cu[z], len = cu[z+1] - cu[z]), right padding (start =
 * z*S, len < S) and left padding (start = z*S + pad).  q_len 0 is allowed.
 * Parameters 17 and 18 change meaning: 17 = the token rows of q and o (the
 * LSE is fp32 [H][rows], row q_start + i for query i, as FlashAttention's
 * varlen), 18 = the longest kv_len; the schedule (20..24) is the one of
 * (max kv_len - min(kv_len - q_len), max kv_len), min and max over the
 * sequences with q_len > 0, so that every sequence's query tiles (absolute
 * positions, tile t = [t*block_m, (t+1)*block_m)) are among the schedule's;
 * a CTA whose tile holds none of its sequence's queries stores nothing.
 * Rows outside a sequence are never written.  The TMA kernels take 4-D maps
 * of {D, rows, heads, 1} and may read rows next to a sequence (the
 * neighbours' or the padding): they are masked, but K and V rows there must
 * hold finite values (0 · NaN would reach O); the sm_80 kernel never reads them.
 *
 * ---- sm_90a variant (manifest `kernel.abi tma`, S2_FWD_ABI_TMA) -------------------
 * Kernels generated for sm_90a with head_dim 64 or 128 (templates/fwd_sm90.c:
 * wgmma, TMA, a producer warpgroup and block_m / 64 consumer warpgroups;
 * num_warps = 4 * (1 + block_m / 64), block_m 64 or 128) take parameters 0..24
 * as above, plus three CUtensorMap (128 bytes, passed by value as
 * __grid_constant__ parameters: put the map's address in kernelParams):
 *   25 tensor map of q   26 of k   27 of v
 * each 4-D, bf16/f16, dims {D, seq (q_len or kv_len), heads (H or Hkv), B},
 * strides in bytes {seq, head, batch} (the element strides above times 2),
 * box {64, rows, 1, 1} with rows = 64 for q and block_n / kv_gather for k and v,
 * CU_TENSOR_MAP_SWIZZLE_128B, interleave none, OOB fill none (zeros).
 * s2_attn_fwd_tensor_maps (attn_runtime.h) builds them; s2_attn_forward does
 * so for such kernels.  Grid and block as above (block = num_warps * 32).
 *
 * ---- sm_90a persistent variant (manifest `kernel.abi tma_persistent`) ------------
 * Spec persistent = 1.  Parameters 0..27 as the TMA variant, plus
 *   28 ptr work     i32 [n_work]: items head * q_tiles + rel (rel: list index
 *                   within the head's class, 0 = first_q_tile), longest
 *                   heads first, longest tiles first within a head
 *                   (s2_schedule_work_list, layout.h)
 *   29 i32 n_work   = heads * q_tiles      30 i32 batch
 *   31 ptr counter  i32 [2], zero before the launch; the kernel leaves them
 *                   zero (the last CTA to finish resets them), so one pair
 *                   serves launch after launch on one stream.  Launches that
 *                   may overlap (other streams) need a pair each.
 * Grid (G, 1, 1), 1 <= G <= n_work * batch (the runtime takes SMs x resident
 * CTAs per SM); CTA x works on item x first, then on G + the next value of
 * counter[0], until that reaches n_work * batch: a dynamic schedule over the
 * list in its order, batch after batch, item w being batch w / n_work of
 * work[w % n_work].  Block and shared memory as above (16 more bytes: an
 * mbarrier and a word).  seqinfo is parameter 32. */
/* One sequence of a variable-length batch, as the kernels read it (16 bytes). */
typedef struct s2_attn_seq {
    int32_t q_start, q_len;      /* first q/o token row, number of queries */
    int32_t k_start, kv_len;     /* first k/v token row, number of keys */
} s2_attn_seq;

typedef enum s2_fwd_abi {
    S2_FWD_ABI_PTRS = 0,   /* parameters 0..24, seqinfo */
    S2_FWD_ABI_TMA = 1,    /* 0..24 + three tensor maps, seqinfo */
    S2_FWD_ABI_TMA_PERSISTENT = 2 /* 0..27 + work list, n_work, batch, counter, seqinfo */
} s2_fwd_abi;

/* ---- the backward kernel ABI (S2_KERNEL_BWD) -----------------------------------
 * One module, one manifest kernel entry (kind bwd, name NAME =
 * s2_bwd_<pattern>_<dtype>_d<D>), three kernels with the same parameters:
 *    0 ptr q   1 ptr k   2 ptr v   3 ptr o   4 ptr do      (16-bit, as the forward)
 *    5 ptr lse    fp32 [B][H][Sq] natural log, from the forward (-inf: empty row)
 *    6 ptr dlse   fp32 [B][H][Sq] gradient of lse, or null (= 0)
 *    7 ptr delta  fp32 [B][H][Sq] workspace: rowsum(dO ∘ O) - dlse
 *    8 ptr lse2   fp32 [B][H][Sq] workspace: lse·log2 e, +inf for empty rows
 *    9 ptr dq  10 ptr dk  11 ptr dv   (outputs, 16-bit; dk, dv [B, Sk, Hkv, D])
 *   12..35  i64 strides (batch, seq, head), multiples of 8, of q, k, v, o, do, dq, dk, dv
 *   36 i32 q_len   37 i32 kv_len   38 f32 scale_log2 = softmax scale · log2 e
 *   39 ptr class_of_head  40 ptr offsets  41 ptr entries  42 i32 first_q_tile  43 i32 q_tiles
 *        the packed FORWARD schedule for (block_m, block_n), as the forward
 *   44 ptr class_of_head  45 ptr offsets  46 ptr entries  47 i32 kv_tiles
 *        the TRANSPOSED schedule for (block_m, bs), bs = min(block_size, block_m),
 *        packed by s2_schedule_pack_gathered_kv with group block_m / bs: per
 *        key tile of block_m keys (group key blocks, or one tile of a bigger
 *        block), its header then the query tiles that visit it, heaviest
 *        tiles first; kv_tiles = its list count (cdiv(kv_len, bs) / group,
 *        rounded up).  The dK/dV kernel walks each list from its end.
 *   48 ptr ds         dS workspace, or null: 16-bit [B][tiles][64][64] (s2_ds_map)
 *   49 ptr ds_head    int64 head_base[H + 1] of the s2_ds_map
 *   50 ptr ds_map     int32 map[] of the s2_ds_map (one per transposed record)
 *        With ds non-null (modules for which s2_bwd_ds_capable holds), the
 *        dK/dV kernel also writes each entry's dS tile, query-major (row q
 *        = 128 bytes of 64 keys, 16-byte chunk c at c ^ (q & 7)), and
 *        NAME_dqds computes dq = scale·dS·K from them instead of NAME_dq
 *        recomputing S and dP: 5 tile products per entry instead of 7.
 *   51 CUtensorMap q_map, 52 CUtensorMap do_map  (by value, 128 bytes, 64-byte aligned;
 *        modules with spec.bwd_tma 1 only, manifest `kernel.bwd_tma 1`): 4-D maps
 *        {D, q_len, heads, batch} of q and do over the launch's heads (strides
 *        as above, in bytes), bf16/f16, box {64, block_m, 1, 1}, 128-byte
 *        swizzle, out-of-bounds fill zero, as the forward's q map
 *        (s2_attn_fwd_tensor_maps with the backward's tensors); every kernel
 *        of such a module takes them, NAME_dkdv reads them.
 * Gathered backward (spec kv_gather 4, block-16 patterns on sm_90a): 39..43 is
 * s2_schedule_pack_gathered's packing of the forward schedule for (block_m,
 * block_size), as the gathered forward.
 * Launch in this order (one stream), block (num_warps * 32):
 *   NAME_pre   grid (cdiv(q_len, threads / (D/8)), H, B), no shared memory: writes delta, lse2
 *   NAME_dkdv  grid (kv_tiles, Hkv, B), smem art->smem_bytes: dk, dv of the keys
 *              of list x's header (rows >= kv_len untouched), summed over the
 *              query heads of kv head y in increasing order
 *   NAME_dq    grid (q_tiles, H, B), smem art->smem_bytes: dq of the tile, as the forward
 *              (or NAME_dqds, same grid, smem s2_bwd_dqds_smem_bytes, when ds is given;
 *              or NAME_dqds2, grid (cdiv(q_tiles, 2), H, B), block S2_BWD_DQDS2_THREADS,
 *              smem s2_bwd_dqds2_smem_bytes, when ds is given and every forward list
 *              holds at most S2_BWD_DQDS2_MAX_LIST entries in increasing key order)
 * No atomics: every output element is summed by one thread in a fixed order,
 * so two runs give bitwise-identical results.  dq = scale·dS·K, dk =
 * scale·dSᵀ·Q, dv = Pᵀ·dO with P recomputed from lse2 (s2_ref_backward).
 * Head dims 32, 64, 128. */

/* ---- the manifest: what a cubin says about itself ------------------------------
 * Every generated module holds a NUL-terminated text global `s2c_manifest`
 * (see s2_manifest_format): the generator identity (s2_generator_id), the arch, and per kernel
 * its name, kind, pattern, resolved spec, launch shape and shared memory,
 * plus each pattern's resolved rules, so that the runtime can rebuild the
 * schedules without the pattern file. */
#define S2_MANIFEST_SYMBOL "s2c_manifest"
#define S2_MANIFEST_VERSION 1

typedef struct s2_manifest_kernel {
    char *name;            /* kernel symbol */
    char *pattern;         /* pattern name */
    s2_kernel_spec spec;   /* resolved */
    int threads;           /* blockDim.x */
    int smem_bytes;        /* dynamic shared memory per CTA */
    s2_fwd_abi abi;        /* kernel.abi (absent: S2_FWD_ABI_PTRS) */
    /* kernel.seqinfo 1: the forward takes the trailing seqinfo parameter.
     * Cubins made before it lack the key: the runtime refuses variable-length
     * batches for them (a uniform launch is unchanged). */
    bool seqinfo;
    /* kernel.wide BM BN WARPS STAGES GATHER THREADS SMEM: the module also
     * holds NAME_w, the same forward (same ABI and parameters) on wider tiles,
     * which the runtime launches where the schedule's lists are long
     * (s2_attn_forward).  Written for sm_90a forwards of 64-token blocks at
     * d128 built with the default spec: 128 x 128 tiles whose key tiles
     * gather two live blocks, 3 stages, one CTA per SM (bench/RESULTS.md,
     * run 39).  kernel.wide_persistent: the same on the persistent grid
     * (wide_spec.persistent 1, the S2_FWD_ABI_TMA_PERSISTENT parameters;
     * run 51), written instead for patterns that are not dense. */
    bool has_wide;
    s2_kernel_spec wide_spec;
    int wide_threads, wide_smem_bytes;
} s2_manifest_kernel;

/* Symbol suffix of a forward's wide variant (kernel.wide). */
#define S2_WIDE_SUFFIX "_w"

typedef struct s2_manifest s2_manifest;

/* Text format (one `key value` per line; the value is the rest of the line):
 *   s2c-manifest 1            first line, the format version
 *   generator VERSION+HASH+llvmX.Y.Z / arch sm_XX
 *   kernel NAME               starts a kernel; then kernel.kind (fwd|bwd), kernel.pattern,
 *                             kernel.dtype, kernel.head_dim, kernel.block_m, kernel.block_n,
 *                             kernel.num_warps, kernel.num_stages, kernel.threads, kernel.smem,
 *                             kernel.abi (ptrs|tma|tma_persistent; written only for the latter two),
 *                             kernel.seqinfo 1 (forward kernels with the seqinfo parameter),
 *                             kernel.bwd_wgmma (1|-1; backward on sm_90a only, absent: 0),
 *                             kernel.bwd_tma 1 (backward kernels with the tensor-map parameters 51, 52),
 *                             kernel.kv_gather G (above 1 only),
 *                             kernel.wide BM BN WARPS STAGES GATHER THREADS SMEM (the NAME_w variant),
 *                             or kernel.wide_persistent (the same fields; NAME_w on the persistent grid)
 *   pattern NAME              starts a pattern; then pattern.heads, .kv_heads, .block_size,
 *                             .causal, .max_seq_len, .vert_position (absolute|relative),
 *                             .local L R, .vert_stride, .head_sliding STEP AUTO OFFSET,
 *                             .homo_head, .num_dense_heads,
 *                             .mask I H M N HEXBITS     (explicit mask I, 4 bits per digit, low bit first)
 *                             .rule Q DENSE LEFT RIGHT STRIDE SHIFT MASK MASK_HEAD  (one per head)
 *                             .range ACTION KEY_LO KEY_HI DIST_LO DIST_HI STRIDE HEADS_HEXBITS
 *   end
 * Unknown keys are skipped (later versions may add some).
 * Writer (libs2c): *text malloc'd, NUL-terminated. */
s2_status s2_manifest_format(s2_ctx *ctx, int arch, const s2_manifest_kernel *kernels, int num_kernels,
                             const s2_pattern *const *patterns, int num_patterns, char **text);

s2_status s2_manifest_parse(s2_ctx *ctx, const char *text, size_t len, s2_manifest **out);
void s2_manifest_free(s2_manifest *m);
const char *s2_manifest_generator(const s2_manifest *m);
int s2_manifest_arch(const s2_manifest *m);
int s2_manifest_num_kernels(const s2_manifest *m);
const s2_manifest_kernel *s2_manifest_kernel_at(const s2_manifest *m, int i);
int s2_manifest_num_patterns(const s2_manifest *m);
const s2_pattern *s2_manifest_pattern_at(const s2_manifest *m, int i);
const s2_pattern *s2_manifest_find_pattern(const s2_manifest *m, const char *name);

/* Find the manifest text inside a cubin (ELF) image without a GPU: the
 * bytes of the symbol S2_MANIFEST_SYMBOL.  *text points into image. */
s2_status s2_cubin_find_manifest(s2_ctx *ctx, const void *image, size_t size, const char **text, size_t *len);

/* ---- forward launch arguments ------------------------------------------------ */
typedef struct s2_attn_fwd_args {
    int batch;
    int64_t q_len, kv_len;       /* Sq <= Sk */
    int heads, kv_heads, head_dim;
    s2_dtype dtype;
    uint64_t q, k, v, o;         /* device pointers (s2_devptr), 16-byte aligned */
    uint64_t lse;                /* fp32 [B][H][Sq]; 0 = not written */
    int64_t q_stride[3];         /* (batch, seq, head) strides in elements, multiples of 8 */
    int64_t k_stride[3];
    int64_t v_stride[3];
    int64_t o_stride[3];
    float scale;                 /* 0 = 1/sqrt(head_dim) */
    /* Variable-length batch (s2_attn_seqs_new, attn_runtime.h), or NULL.
     * With it: batch = its number of sequences, q_len / kv_len = the token
     * rows of q, o / of k, v (tensors [rows, heads, D], batch strides unused),
     * lse fp32 [heads][q_len]. */
    const struct s2_attn_seqs *seqs;
} s2_attn_fwd_args;

/* Fill strides for contiguous (B,S,H,D) tensors. */
void s2_attn_fwd_args_bshd(s2_attn_fwd_args *a);

/* ---- backward launch arguments ----------------------------------------------- */
typedef struct s2_attn_bwd_args {
    int batch;
    int64_t q_len, kv_len;       /* Sq <= Sk */
    int heads, kv_heads, head_dim;
    s2_dtype dtype;
    uint64_t q, k, v, o, d_o;    /* inputs (device pointers), o from the forward */
    uint64_t lse;                /* fp32 [B][H][Sq] from the forward, required */
    uint64_t d_lse;              /* fp32 [B][H][Sq] gradient of lse; 0 = none */
    uint64_t dq, dk, dv;         /* outputs: dq like q, dk and dv like k */
    uint64_t workspace;          /* s2_attn_bwd_workspace_bytes(), 16-byte aligned */
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3], do_stride[3];
    int64_t dq_stride[3], dk_stride[3], dv_stride[3];
    float scale;                 /* 0 = 1/sqrt(head_dim); the forward's */
    /* The workspace's size: 0 means s2_attn_bwd_workspace_bytes(); at least
     * s2_attn_backward_workspace()'s takes the dS path (attn_runtime.h). */
    size_t workspace_bytes;
    /* The dS path in this many chunks of kv heads (a divisor of kv_heads; the
     * workspace must hold s2_attn_backward_workspace_chunked()'s size for it);
     * 0: the runtime chooses (attn_runtime.h, s2_attn_backward). */
    int ds_chunks;
    /* On the dS path, dQ for two query tiles per CTA (NAME_dqds2) where the
     * module has it and the lists allow: 0 yes, -1 no (NAME_dqds). */
    int dq_pair;
} s2_attn_bwd_args;

/* Workspace of the backward: delta then lse·log2 e, fp32 [B][H][Sq] each,
 * the second at half the size. */
size_t s2_attn_bwd_workspace_bytes(int batch, int heads, int64_t q_len);
/* Fill strides for contiguous (B,S,H,D) tensors. */
void s2_attn_bwd_args_bshd(s2_attn_bwd_args *a);

#ifdef __cplusplus
}
#endif
#endif
