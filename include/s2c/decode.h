/* s2c — paged-KV decode: the kept-block lists, the kernel ABIs of the decode
 * and combine kernels, and the launch arguments (launch: attn_runtime.h).
 *
 * Decode: per sequence b, n new query tokens (1, or a few for speculative
 * decoding) at positions seq_lens[b] - n .. seq_lens[b] - 1 attend to the
 * seq_lens[b] keys of a paged KV cache.  Key position kpos of sequence b,
 * kv head g lives in slot kpos % page_size of page
 *     block_table[b * table_stride[0] + g * table_stride[1] + kpos / page_size]
 * (table_stride[1] = 0: one table for every kv head, vLLM style; non-zero:
 * each kv head has its own pages, so that an allocator can free a head's
 * pages on their own).  Only the first cdiv(seq_lens[b], page_size) entries
 * of a table row are read, and of those only the pages of kept blocks.
 */
#ifndef S2C_DECODE_H
#define S2C_DECODE_H

#include "s2c/common.h"
#include "s2c/pattern.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- kept-block lists ------------------------------------------------------------
 * The kernel learns what to read from one list per (group class, first query
 * block m): the key blocks that any query head of the kv-head group keeps for
 * query block m or m + 1 (n new tokens span at most two blocks when
 * n <= block_size), each with a mask of who keeps it:
 *   bit i          query head g * group + i keeps the block from query block m
 *   bit group + i  the same from query block m + 1
 * KV heads whose query heads have the same masks share a class.  Lists hold
 * key blocks in increasing order and exactly the blocks s2_block_kept keeps.
 * Size: the entries only (no q_blocks^2 table); causal patterns give the
 * same list for m whatever q_blocks is, so one build serves every shorter
 * length. */
typedef struct s2_decode_entry {
    int32_t block;       /* key block (absolute) */
    uint32_t heads;      /* who keeps it (above) */
} s2_decode_entry;

typedef struct s2_decode_lists {
    int group;                   /* query heads per kv head, <= 16 */
    int kv_heads;
    int block_size;
    int num_classes;
    int64_t q_blocks;            /* lists per class: query blocks 0 .. q_blocks-1 */
    int32_t *class_of_kv_head;   /* [kv_heads] */
    int64_t *offsets;            /* [num_classes * q_blocks + 1] */
    s2_decode_entry *entries;    /* [offsets[last]] */
    int64_t max_list;            /* the longest list */
} s2_decode_lists;

/* Lists for sequences of up to max_len tokens (q_blocks = cdiv(max_len,
 * block_size); max_len within the pattern's limits).  S2_ERR_UNSUPPORTED for
 * a GQA group above 16. */
S2_API s2_status s2_decode_lists_build(s2_ctx *ctx, const s2_pattern *p, int64_t max_len, s2_decode_lists **out);
S2_API void s2_decode_lists_free(s2_decode_lists *l);

/* One buffer for the GPU, each part 16-byte aligned at its offset:
 *   int32 class_of_kv_head[kv_heads]; int32 offsets[num_classes * q_blocks + 1];
 *   s2_decode_entry entries[offsets[last] + 1]  (the last one zero: padding). */
typedef struct s2_packed_decode_lists {
    void *data;                  /* malloc'd; free with s2_packed_decode_lists_free */
    size_t size;
    size_t class_off, offsets_off, entries_off;
} s2_packed_decode_lists;
S2_API s2_status s2_decode_lists_pack(s2_ctx *ctx, const s2_decode_lists *l, s2_packed_decode_lists *out);
S2_API void s2_packed_decode_lists_free(s2_packed_decode_lists *p);
/* The size of such a buffer for `lists` lists holding `entries` entries. */
S2_API size_t s2_packed_decode_lists_size(int kv_heads, int64_t lists, int64_t entries);

/* ---- the decode kernel ABI (S2_KERNEL_DECODE) -------------------------------------
 * One module, one manifest entry NAME = s2_dec_<pattern>_<dtype>_d<D> (with fp8
 * pages s2_dec_<pattern>_<dtype>_kv<kv_dtype>_d<D>, kernel.kv_dtype), two
 * kernels: NAME (decode) and NAME_combine (merges 16-bit outputs of disjoint
 * key sets: s2_combine).  NAME's parameters:
 *    0 ptr q [B, n, H, D]   1 ptr k_pages   2 ptr v_pages   3 ptr o [B, n, H, D]
 *    4 ptr lse fp32 [B][H][n] or null
 *    5 ptr ws_o fp32 [splits][B][n][H][D]   6 ptr ws_lse fp32 [splits][B][H][n]  (splits > 1)
 *    7..9 i64 q strides (b, s, h)   10..12 k page strides (page, slot, head)
 *   13..15 v page strides   16..18 o strides (b, s, h)      (elements, multiples of 8)
 *   19 ptr block_table (i32)   20 i64 table batch stride   21 i64 table head stride (0: shared)
 *   22 ptr seq_lens (i32 [B])  23 i32 n  24 i32 page_size  25 f32 scale·log2 e
 *   26 ptr class_of_kv_head  27 ptr offsets  28 ptr entries  29 i32 q_blocks   (packed lists)
 *   30 i32 splits   31 ptr counters (i32 [B][kv_heads], zero before the launch; left zero)
 *   32 ptr k_scale   33 ptr v_scale   (fp32 [kv_heads] or null = 1.0; read by fp8-page kernels only)
 * Grid (splits, kv_heads, B), block num_warps * 32, smem art->smem_bytes.
 * CTA (x, g, b) packs the group's query heads × n tokens into the 16 rows of
 * one mma tile (row t * group + i: token t, head g * group + i; group * n <= 16),
 * walks slice x of its list's 16-key groups (kept block × 16-token chunk;
 * a CTA tile is num_warps chunks, one per warp, with an in-CTA merge at the
 * end) and writes o / lse directly when splits = 1, else its partial (o
 * normalised over its slice, lse natural log, -inf when it saw nothing) to
 * the workspace; the last CTA of (b, g) to finish (an atomic count on
 * counters[b][g]) merges the partials into o / lse and resets the counter.
 *
 * NAME_combine parameters:
 *    0 byval {u64 o[64]; u64 lse[64]} (1 KB, a grid constant: put its address in
 *      kernelParams): input i at o[i] / lse[i] when o_base is null
 *    1 ptr o_base   2 ptr lse_base   3 i64 o_part   4 i64 lse_part
 *         (when o_base is set, input i is at base + i * part elements)
 *    5..7 i64 input strides (b, s, h)   8 ptr out (16-bit)   9..11 i64 out strides
 *   12 ptr lse_out fp32 [B][H][S] or null   13 i32 n_in   14 i32 S   15 i32 H   16 i32 rows = B*S*H
 *   17 ptr sinks fp32 [H] or null: head h's sink logit joins each row's merge as an input
 *      of lse sinks[h] and output zero
 * Input LSE i is contiguous [B][H][S].  Grid (cdiv(rows, 128 / (D/8))), block 128:
 * D/8 threads per row, 8 columns each.  Input strides multiples of 8,
 * pointers 16-byte aligned.
 *
 * NAME_rows (forward and backward modules; s2_rows) parameters:
 *    0 ptr table int64 [n_runs][2 + n_src]   1 i32 n_runs   2 i32 n_src
 *    3 ptr src (rows at pitch D)   4 i64 src_rows   5 ptr dst   6..8 i64 dst strides (b, t, h)
 *    9 i64 dst_tokens   10 i64 dst_heads   11 i64 dst_rows (the extent of dst row indices)
 * Grid (n_runs), block 128: one CTA per run, D/8 threads per row.  Run
 * {dst, rows, s_0..s_{n_src-1}}: dst row dst + r = the sum over present
 * sources (s_i >= 0) in order of src row s_i + r, in fp32, rounded once to
 * the dtype; one source: a bit copy.  A run outside src_rows or dst_rows,
 * or with s_0 absent, is skipped. */

/* ---- decode launch arguments --------------------------------------------------- */
typedef struct s2_attn_decode_args {
    int batch;
    int n_new;                   /* new tokens per sequence, >= 1, group * n_new <= 16 */
    int heads, kv_heads, head_dim;
    s2_dtype dtype;
    uint64_t q, o;               /* [B, n_new, H, D], 16-byte aligned */
    uint64_t lse;                /* fp32 [B][H][n_new]; 0 = not written */
    uint64_t k_pages, v_pages;   /* pools: (page, slot, kv head, d) */
    int64_t num_pages;
    int page_size;               /* multiple of 16 */
    int64_t q_stride[3], o_stride[3];    /* (batch, seq, head), multiples of 8 */
    int64_t k_stride[3], v_stride[3];    /* (page, slot, head), multiples of 8 */
    uint64_t block_table;        /* int32 */
    int64_t table_stride[2];     /* (batch, kv head); kv head 0 = one table for all heads */
    int64_t max_pages_per_seq;   /* entries per table row the caller allocated */
    uint64_t seq_lens;           /* int32 [B], device: n_new <= seq_lens[b] <= max_seq_len */
    int64_t max_seq_len;         /* host bound on seq_lens (sizes the lists) */
    uint64_t workspace;          /* s2_attn_decode_workspace() bytes, 16-byte aligned, zero-filled once
                                  * when allocated (every launch leaves it so); 0 if none is needed */
    int splits;                  /* 0 = heuristic (fill the GPU); 1 = no workspace */
    float scale;                 /* 0 = 1/sqrt(head_dim) */
    /* fp8 pages (a kernel compiled with kv_dtype S2_DTYPE_E4M3): the pools' dtype, which must be the
     * kernel's, 0 = dtype; strides are then multiples of 16.  A stored K value x means x * k_scale[g] for
     * kv head g (vLLM's convention), V likewise; fp32 [kv_heads], 4-byte aligned, 0 = 1.0 (only for e4m3). */
    s2_dtype kv_dtype;
    uint64_t k_scale, v_scale;
} s2_attn_decode_args;

/* ---- s2_combine arguments -------------------------------------------------------- */
#define S2_COMBINE_MAX_INPUTS 64
typedef struct s2_combine_args {
    int n;                       /* inputs, 1..S2_COMBINE_MAX_INPUTS */
    int batch, heads, head_dim;
    int64_t seq;
    s2_dtype dtype;
    uint64_t o_in[S2_COMBINE_MAX_INPUTS];     /* [B, S, H, D], same strides, 16-byte aligned */
    uint64_t lse_in[S2_COMBINE_MAX_INPUTS];   /* fp32 [B][H][S] */
    int64_t in_stride[3];        /* (batch, seq, head), multiples of 8 */
    uint64_t o, lse;             /* outputs; lse may be 0 */
    int64_t o_stride[3];
    uint64_t sinks;              /* fp32 [heads], 4-byte aligned: each head's attention-sink logit (natural
                                  * log, as lse), counted once in every row's softmax; 0 = none */
} s2_combine_args;

/* ---- s2_rows arguments ------------------------------------------------------------ */
#define S2_ROWS_MAX_SOURCES 64
typedef struct s2_rows_args {
    int head_dim;                /* a row: head_dim elements of dtype (the kernel's) */
    s2_dtype dtype;
    int n_src;                   /* sources per run, 1..S2_ROWS_MAX_SOURCES */
    int64_t n_runs;              /* runs in the table, 0..2^31-1 (0: nothing is launched) */
    uint64_t table;              /* int64 [n_runs][2 + n_src] in device memory, 8-byte aligned: per run
                                  * dst row, rows, then each source's first row (-1: absent; source 0 present) */
    uint64_t src;                /* rows of head_dim elements at pitch head_dim, 16-byte aligned */
    int64_t src_rows;            /* src's extent in rows */
    uint64_t dst;                /* 16-byte aligned, not meeting src or the table */
    int64_t dst_shape[3];        /* (batch, tokens, heads): dst row L is (b, t, h), L = (b * heads + h) * tokens + t */
    int64_t dst_stride[3];       /* (batch, token, head) in elements, multiples of 8 */
} s2_rows_args;

#ifdef __cplusplus
}
#endif
#endif
