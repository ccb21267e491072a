/* s2c — how generated attention kernels are launched: the kernel ABIs and
 * the argument structs of the runtime's launches (attn_runtime.h).
 *
 * Tensors follow the S2 Triton library: q [B, Sq, H, D], k/v [B, Sk, Hkv, D],
 * o like q, any strides in elements for (batch, seq, head) with the head
 * dimension contiguous — (B,S,H,D) and (B,H,S,D) are both just strides.
 * Queries are the last Sq of the Sk positions.  The softmax scale defaults to
 * 1/sqrt(D).  LSE is fp32, natural log, contiguous [B][H][Sq]; a row with
 * nothing to attend gives o = 0 and lse = -inf.
 */
#ifndef S2C_LAUNCH_H
#define S2C_LAUNCH_H

#include "s2c/common.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the forward kernel ABI ------------------------------------------------------
 * Symbol s2_fwd_<pattern name, non-identifier characters as '_'>_<bf16|f16>_d<D>.
 * Launch: grid (q_tiles, heads, batch), block (num_warps * 32), dynamic shared
 * memory art->smem_bytes (the manifest's kernel.smem).  The parameters
 * (abi/params.h's lists; tests/arch/check_launch.py checks these against them)
 * are named as the AOT launchers name them (aot.h).
 * Parameters of ABI fwd, in order:
 *    0 ptr q        [B, Sq, H, D]    (global, 16-byte aligned, d contiguous)
 *    1 ptr k        [B, Sk, Hkv, D]
 *    2 ptr v        [B, Sk, Hkv, D]
 *    3 ptr o        [B, Sq, H, D]    (rows outside the queries are never written)
 *    4 ptr lse      fp32 [B][H][Sq] natural log, or null: not written
 *    5..7   i64 q_stride_{b,s,h}: (batch, seq, head) strides in elements, multiples of 8
 *    8..10  i64 k_stride_{b,s,h}     11..13 i64 v_stride_{b,s,h}     14..16 i64 o_stride_{b,s,h}
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
 * ---- sm_90a variant (ABI fwd_tma in the kernel's manifest record) ------------------
 * Kernels generated for sm_90a, head_dim 16 to 256 in steps of 16 (templates/fwd_sm90.c:
 * wgmma, TMA, a producer warpgroup and block_m / 64 consumer warpgroups;
 * num_warps = 4 * (1 + block_m / 64), block_m 64 or 128) take three CUtensorMap
 * (128 bytes, passed by value as __grid_constant__ parameters: put the map's
 * address in kernelParams) after the forward's schedule.
 * Parameters of ABI fwd_tma: 0..24 as ABI fwd, then
 *   25 tmap q_map (of q)   26 tmap k_map (of k)   27 tmap v_map (of v)   28 ptr seqinfo
 * each 4-D, bf16/f16, dims {D, seq (q_len or kv_len), heads (H or Hkv), B},
 * strides in bytes {seq, head, batch} (the element strides above times 2),
 * box {64, rows, 1, 1} with rows = 64 for q and the record's block_n / KV_GATHER (key blocks per tile) for k and v
 * (the kernel reads D / 64 boxes per row, rounded up: columns past D come back as zeros),
 * CU_TENSOR_MAP_SWIZZLE_128B, interleave none, OOB fill none (zeros).
 * s2_attn_fwd_tensor_maps (attn_runtime.h) builds them; s2_attn_forward does
 * so for such kernels.  Grid and block as above (block = num_warps * 32).
 *
 * ---- sm_90a persistent variant (ABI fwd_tma_persistent, grid rule persistent) -----
 * Parameters of ABI fwd_tma_persistent: 0..27 as ABI fwd_tma, then
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
 * mbarrier and a word).
 *   32 ptr seqinfo
 *
 * ---- sm_90a fp8 variant (ABI fwd_tma_fp8, grid rule q_tiles) -------------------------
 * Kernels of dtype e4m3 (q, k, v e4m3, o bf16, lse fp32), head_dim a multiple of 32
 * up to 256.  The tensor maps as ABI fwd_tma's but of bytes (UINT8): strides in
 * bytes = element strides, multiples of 16; box {128, rows, 1, 1}.
 * Parameters of ABI fwd_tma_fp8: 0..28 as ABI fwd_tma, then
 *   29 ptr q_descale  fp32 [batch][kv_heads], or null (1.0): q's dequantizing factor
 *   30 ptr k_descale  likewise for k     31 ptr v_descale  likewise for v
 * Scores are (q_descale · k_descale) · scale · q·k, the output v_descale · P·V. */
/* One sequence of a variable-length batch, as the kernels read it (16 bytes). */
typedef struct s2_attn_seq {
    int32_t q_start, q_len;      /* first q/o token row, number of queries */
    int32_t k_start, kv_len;     /* first k/v token row, number of keys */
} s2_attn_seq;

/* ---- NAME_seqs (ABI seqs, grid rule seqs; every forward module from s2c 0.2) -------
 * The records above from an engine's cumulative lengths in device memory
 * (s2_attn_seqs_write_cu launches it).
 * Parameters of ABI seqs:
 *    0 ptr cu_q      int32 [n + 1]: queries of sequence i are rows cu_q[i] .. cu_q[i+1]-1
 *    1 ptr cu_k      int32 [n + 1] likewise for the keys, or null: cu_q
 *    2 ptr seqinfo   s2_attn_seq [n], written (16-byte aligned)
 *    3 i32 n         4 i32 max_kv_len
 * Grid (cdiv(n, threads), 1, 1), block (threads, 1, 1) of the record (128),
 * no shared memory; thread i < n writes seqinfo[i].  The lengths are not
 * trusted: a sequence with a negative start, a decreasing array, q_len >
 * kv_len or kv_len > max_kv_len is written {0, 0, 0, 0}, which the forward
 * skips. */


/* ---- the backward kernel ABI (S2_KERNEL_BWD) -----------------------------------
 * One module, one manifest kernel entry (kind bwd, name NAME =
 * s2_bwd_<pattern>_<dtype>_d<D>), whose kernels (NAME_pre, NAME_dkdv, NAME_dq,
 * and on the dS path NAME_dqds and NAME_dqds2) all take the same parameters.
 * Parameters of ABI bwd:
 *    0 ptr q   1 ptr k   2 ptr v   3 ptr o   4 ptr d_o     (16-bit, as the forward)
 *    5 ptr lse    fp32 [B][H][Sq] natural log, from the forward (-inf: empty row)
 *    6 ptr dlse   fp32 [B][H][Sq] gradient of lse, or null (= 0)
 *    7 ptr delta  fp32 [B][H][Sq] workspace: rowsum(dO ∘ O) - dlse
 *    8 ptr lse2   fp32 [B][H][Sq] workspace: lse·log2 e, +inf for empty rows
 *    9 ptr dq  10 ptr dk  11 ptr dv   (outputs, 16-bit; dk, dv [B, Sk, Hkv, D])
 *   12..35: strides (batch, seq, head) in elements, multiples of 8:
 *        12..14 i64 q_stride_{b,s,h}    15..17 i64 k_stride_{b,s,h}    18..20 i64 v_stride_{b,s,h}
 *        21..23 i64 o_stride_{b,s,h}    24..26 i64 d_o_stride_{b,s,h}  27..29 i64 dq_stride_{b,s,h}
 *        30..32 i64 dk_stride_{b,s,h}   33..35 i64 dv_stride_{b,s,h}
 *   36 i32 q_len   37 i32 kv_len   38 f32 scale_log2 = softmax scale · log2 e
 *   39 ptr class_of_head  40 ptr offsets  41 ptr entries  42 i32 first_q_tile  43 i32 q_tiles
 *        the packed FORWARD schedule for (block_m, block_n), as the forward
 *   44 ptr t_class_of_head  45 ptr t_offsets  46 ptr t_entries  47 i32 kv_tiles
 *        the TRANSPOSED schedule for (block_m, bs), bs = min(block_size, block_m),
 *        packed in kv groups of block_m / bs blocks (s2_manifest_schedule_pack,
 *        transposed): per
 *        key tile of block_m keys (group key blocks, or one tile of a bigger
 *        block), its header then the query tiles that visit it, heaviest
 *        tiles first; kv_tiles = its list count (cdiv(kv_len, bs) / group,
 *        rounded up).  The dK/dV kernel walks each list from its end.
 *   48 ptr ds         dS workspace, or null: 16-bit [B][tiles][64][64] (s2_ds_map)
 *   49 ptr ds_head    int64 head_base[H + 1] of the s2_ds_map
 *   50 ptr ds_map     int32 map[] of the s2_ds_map (one per transposed record)
 *        With ds non-null (modules whose manifest lists a bwd_dqds kernel), the
 *        dK/dV kernel also writes each entry's dS tile, query-major (row q
 *        = 64 keys in 128 bytes, 16-byte chunk c at c ^ (q & 7)), and
 *        NAME_dqds computes dq = scale·dS·K from them instead of NAME_dq
 *        recomputing S and dP: 5 tile products per entry instead of 7.
 *   51 ptr seqinfo    s2_attn_seq [batch] (a variable-length batch, as the
 *        forward's), or null.  With it: batch entry z is sequence z (its rows,
 *        lengths and positions as in the forward), 36 = the token rows of q,
 *        o, d_o, dq (lse, dlse, delta, lse2 fp32 [H][rows]), 37 = the longest
 *        kv_len, the schedules those of the forward's rule; NAME_pre runs over
 *        the token rows as one batch entry (grid z = 1; entries z > 0 write
 *        nothing), NAME_dkdv and NAME_dq over the sequences (grid z = batch);
 *        tiles outside a sequence walk nothing, its rows outside are never
 *        written, and key rows of two sequences must not overlap (dk, dv).
 * Parameters of ABI bwd_tma: 0..50 as ABI bwd, then
 *   51 tmap q_map, 52 tmap do_map  (by value, 128 bytes, 64-byte aligned): 4-D maps
 *        {D, q_len, heads, batch} of q and do over the launch's heads (strides
 *        as above, in bytes), bf16/f16, box {64, block_m, 1, 1}, 128-byte
 *        swizzle, out-of-bounds fill zero, as the forward's q map
 *        (s2_attn_fwd_tensor_maps with the backward's tensors; batch 1 and
 *        the token rows with seqinfo); every kernel of such a module takes
 *        them, NAME_dkdv reads them.
 *   53 ptr seqinfo    as 51 of ABI bwd.
 * Gathered backward (KV_GATHER 4 in the records: block-16 patterns on sm_90a): 39..43 is
 * the gathered packing of the forward schedule for (block_m, block_size), as
 * the gathered forward (s2_manifest_schedule_pack).
 * Launch in this order (one stream), block (num_warps * 32):
 *   NAME_pre   grid (cdiv(q_len, threads / (D/8)), H, B; B = 1 with seqinfo), no shared memory: writes delta, lse2
 *   NAME_dkdv  grid (kv_tiles, Hkv, B), smem art->smem_bytes: dk, dv of the keys
 *              of list x's header (rows >= kv_len untouched), summed over the
 *              query heads of kv head y in increasing order
 *   NAME_dq    grid (q_tiles, H, B), smem art->smem_bytes: dq of the tile, as the forward
 *              (or NAME_dqds, same grid, its record's shared memory, when ds is given;
 *              or NAME_dqds2, grid (cdiv(q_tiles, 2), H, B), its record's block
 *              and shared memory, when ds is given and every forward list
 *              holds at most 256 entries in increasing key order)
 * No atomics: every output element is summed by one thread in a fixed order,
 * so two runs give bitwise-identical results.  dq = scale·dS·K, dk =
 * scale·dSᵀ·Q, dv = Pᵀ·dO with P recomputed from lse2 (s2_ref_backward).
 * Head dims 32, 64, 128. */

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
    /* e4m3 kernels (ABI fwd_tma_fp8) only: fp32 [batch][kv_heads] factors
     * that dequantize q, k, v (0 = 1.0), as FlashAttention-3's FP8 API; o is
     * bf16 then.  Other kernels refuse them. */
    uint64_t q_descale, k_descale, v_descale;
} s2_attn_fwd_args;

/* Fill strides for contiguous (B,S,H,D) tensors. */
S2_API void s2_attn_fwd_args_bshd(s2_attn_fwd_args *a);

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
    /* Variable-length batch (s2_attn_seqs_new, attn_runtime.h), or NULL: as
     * in s2_attn_fwd_args (batch = its number of sequences, q_len / kv_len
     * the token rows, tensors [rows, heads, D], lse, d_lse [heads][q_len]),
     * the same records as the forward's.  The workspace is then
     * s2_attn_bwd_workspace_bytes(1, heads, q_len); a plan's own workspace
     * also holds the dS tiles of its declared batches (attn_runtime.h). */
    const struct s2_attn_seqs *seqs;
} s2_attn_bwd_args;

/* Workspace of the backward: delta then lse·log2 e, fp32 [B][H][Sq] each,
 * the second at half the size. */
S2_API size_t s2_attn_bwd_workspace_bytes(int batch, int heads, int64_t q_len);
/* Fill strides for contiguous (B,S,H,D) tensors. */
S2_API void s2_attn_bwd_args_bshd(s2_attn_bwd_args *a);

#ifdef __cplusplus
}
#endif
#endif
