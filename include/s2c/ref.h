/* s2c — CPU reference of S2 attention: the oracle every GPU test compares with.
 *
 * Semantics follow the S2-Attention Triton library (dkernel):
 *
 *   out = softmax(scale · q·kᵀ, over the kept keys) · v
 *
 * Positions are absolute.  In batch b there are kv_lens[b] keys at positions
 * 0 .. kv_lens[b]-1, and q_lens[b] queries which are the LAST q_lens[b] of
 * them: query row i sits at position kv_lens[b] - q_lens[b] + i (prefill,
 * chunked prefill and decode are all this one rule).  Key kpos is kept by
 * query qpos of query head h when kpos < kv_lens[b], (not causal or
 * kpos <= qpos) and (no mask or mask(user, h, qpos, kpos)).
 *
 * Everything is computed in float64 from the inputs converted from their
 * dtype; results are rounded once to the output's dtype (correct rounding).
 * LSE is the natural log of sum(exp(scale · q·k)) over the kept keys, stored
 * as fp32 in a contiguous [batch][heads][q_len] array (q_len: the padded
 * extent).  A row with no kept key gets output 0 and LSE -inf.
 *
 * Padding: rows i >= q_lens[b] of out / lse / dq, and key rows
 * kpos >= kv_lens[b] of dk / dv, are left untouched (never read or written).
 *
 * Outputs must not alias inputs.  The functions are single-threaded,
 * allocate O(kv_len · head_dim) scratch and keep no state.
 */
#ifndef S2C_REF_H
#define S2C_REF_H

#include "s2c/common.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- strided 4-D tensor views ------------------------------------------- */

/* A view with dims (batch, seq, head, dim); strides in elements, any sign.
 * (B,S,H,D) and (B,H,S,D) storage are just different strides.  The extents
 * are not stored: they come from the problem that uses the view. */
typedef struct s2_tensor {
    void *data;
    s2_dtype dtype;
    int64_t stride[4];
} s2_tensor;

/* Contiguous views of [batch][seq][heads][dim] and [batch][heads][seq][dim]. */
S2_API s2_tensor s2_tensor_bshd(void *data, s2_dtype dt, int64_t seq, int64_t heads, int64_t dim);
S2_API s2_tensor s2_tensor_bhsd(void *data, s2_dtype dt, int64_t seq, int64_t heads, int64_t dim);

/* Element (b, s, h, d) as a double.  No bounds checks; dtype must be valid. */
S2_API double s2_tensor_get(const s2_tensor *t, int64_t b, int64_t s, int64_t h, int64_t d);
/* Store v rounded to nearest-even in t's dtype (correctly rounded from double;
 * fp8 saturates to its largest finite value, NaN stores 0x7f). */
S2_API void s2_tensor_set(const s2_tensor *t, int64_t b, int64_t s, int64_t h, int64_t d, double v);
/* v rounded to dt, returned as a double (what s2_tensor_set would store). */
S2_API double s2_round_to_dtype(s2_dtype dt, double v);

/* Fill every element of the extent with a seeded uniform value in [lo, hi]
 * (then rounded to the dtype).  The value depends only on (seed, logical
 * index), not on the strides: two layouts filled alike hold the same tensor. */
S2_API void s2_tensor_fill_random(const s2_tensor *t, const int64_t extent[4], uint64_t seed, double lo, double hi);
S2_API void s2_tensor_fill(const s2_tensor *t, const int64_t extent[4], double v);
/* max |a - b| over the extent; +inf if exactly one of a pair is NaN. */
S2_API double s2_tensor_max_abs_diff(const s2_tensor *a, const s2_tensor *b, const int64_t extent[4]);

/* ---- problems ------------------------------------------------------------ */

/* true: query head q_head at absolute position qpos attends key kpos.
 * The causal limit and the lengths are applied outside the callback, which
 * is only asked about kpos < kv_lens[b] and the queries' own positions; it
 * may be called several times for a pair, always from the caller's thread. */
typedef bool (*s2_ref_mask_fn)(const void *user, int q_head, int64_t qpos, int64_t kpos);

typedef struct s2_ref_problem {
    int batch, heads, kv_heads, head_dim;  /* GQA: kv head = q_head / (heads / kv_heads) */
    int64_t q_len, kv_len;                 /* padded lengths: the tensors' seq extents */
    const int64_t *q_lens, *kv_lens;       /* optional [batch] lengths (NULL: q_len / kv_len);
                                            * 0 <= q_lens[b] <= kv_lens[b] <= kv_len, q_lens[b] <= q_len */
    bool causal;                           /* token causal limit kpos <= qpos */
    double scale;                          /* 0: 1/sqrt(head_dim); else any finite value */
    s2_ref_mask_fn mask;                   /* NULL: dense */
    const void *mask_user;
} s2_ref_problem;

/* Tensor extents: q, out, d_out, dq (batch, q_len, heads, head_dim);
 * k, v, dk, dv (batch, kv_len, kv_heads, head_dim). */

/* Forward.  lse may be NULL. */
S2_API s2_status s2_ref_forward(s2_ctx *ctx, const s2_ref_problem *p,
                         const s2_tensor *q, const s2_tensor *k, const s2_tensor *v,
                         const s2_tensor *out, float *lse);

/* Backward, as the GPU kernel does it, from the caller's o and lse:
 *   P     = exp(scale · q·kᵀ - lse)  on kept keys (recomputed from the given
 *           fp32 LSE, so gradients carry its rounding, relative ~1e-7);
 *   delta = rowsum(dO ∘ o) - d_lse   (d_lse NULL: 0)
 *   dP = dO·vᵀ,  dS = P ∘ (dP - delta),
 *   dq = scale · dS·k,  dk = scale · dSᵀ·q,  dv = Pᵀ·dO,
 * dk and dv summed over the query heads of each GQA group.  These are the
 * gradients of sum(out ∘ dO) + sum(lse ∘ d_lse).  Rows with lse = -inf
 * contribute nothing (their dq is 0).  lse and d_lse: [batch][heads][q_len]. */
S2_API s2_status s2_ref_backward(s2_ctx *ctx, const s2_ref_problem *p,
                          const s2_tensor *q, const s2_tensor *k, const s2_tensor *v,
                          const s2_tensor *o, const s2_tensor *d_out,
                          const float *lse, const float *d_lse,
                          const s2_tensor *dq, const s2_tensor *dk, const s2_tensor *dv);

/* ---- variable-length batches ------------------------------------------- */

/* One sequence in token-major tensors: queries are rows q_start ..
 * q_start+q_len-1, keys rows k_start .. k_start+kv_len-1 (0 <= q_len <= kv_len). */
typedef struct s2_ref_seq {
    int64_t q_start, q_len, k_start, kv_len;
} s2_ref_seq;

/* The forward of s2_attn_forward with a variable-length batch: p->batch
 * sequences seqs[b] (packed, padded, chunks of a longer sequence: any rows),
 * p->q_len / p->kv_len = the token rows of q, out / of k, v, whose views are
 * used at batch index 0 (extents (1, rows, heads, dim)); p->q_lens and
 * p->kv_lens must be NULL.  Query i of sequence b sits at position
 * kv_len - q_len + i of its own keys (chunked prefill: the chunk attends to
 * the earlier keys and itself).  lse: fp32 [heads][p->q_len], row q_start + i.
 * Rows of out and lse that belong to no sequence are untouched.  The same
 * numbers as s2_ref_forward on each sequence alone. */
S2_API s2_status s2_ref_forward_varlen(s2_ctx *ctx, const s2_ref_problem *p, const s2_ref_seq *seqs,
                                const s2_tensor *q, const s2_tensor *k, const s2_tensor *v,
                                const s2_tensor *out, float *lse);

/* ---- paged decode -------------------------------------------------------- */

/* Keys and values live in pages of page_size slots: key position kpos of
 * sequence b is slot kpos % page_size of page block_table[b][kpos / page_size].
 * Only the first cdiv(kv_lens[b], page_size) entries of a table row are read. */
typedef struct s2_ref_paged_problem {
    int batch, heads, kv_heads, head_dim;
    int64_t q_len;              /* queries per sequence: 1, or a few (speculative) */
    const int64_t *kv_lens;     /* [batch], required; q_len <= kv_lens[b] <= max_pages_per_seq * page_size */
    const int32_t *block_table; /* [batch][max_pages_per_seq] page ids in [0, num_pages) */
    int64_t max_pages_per_seq;
    int64_t num_pages;
    int page_size;              /* a multiple of 16 */
    bool causal;
    double scale;               /* 0: 1/sqrt(head_dim) */
    s2_ref_mask_fn mask;
    const void *mask_user;
    /* Optional per-(sequence, kv head) tables.  NULL: the row above, shared
     * by every kv head.  Else the page of (b, kv head g, page n) is
     * block_table[b*table_strides[0] + g*table_strides[1] + n*table_strides[2]]
     * (strides in elements; table_strides[1] == 0: one table for all kv
     * heads), and an entry < 0 marks a page that is not resident (freed by
     * an evictor): its keys load as NaN, so a query that keeps one of them
     * gets a NaN output. */
    const int64_t *table_strides;
} s2_ref_paged_problem;

/* q, out: (batch, q_len, heads, head_dim), query i of sequence b at position
 * kv_lens[b] - q_len + i.  k_pages, v_pages: dims (page, slot, kv_head, d),
 * extents (num_pages, page_size, kv_heads, head_dim).  lse: [batch][heads][q_len]
 * or NULL.  Same results as s2_ref_forward on the gathered keys. */
S2_API s2_status s2_ref_decode_paged(s2_ctx *ctx, const s2_ref_paged_problem *p,
                              const s2_tensor *q, const s2_tensor *k_pages, const s2_tensor *v_pages,
                              const s2_tensor *out, float *lse);

/* ---- merging partial attention results ----------------------------------------
 * Attention over the union of n disjoint key sets from the n results over
 * each set: with lse = ln sum exp over a set (natural log, fp32),
 *   lse = ln sum_i exp(lse_i),   o = sum_i exp(lse_i - lse) o_i.
 * Inputs with lse_i = -inf contribute nothing; all -inf gives o = 0 and
 * lse = -inf.  outs[i] and out: (batch, seq, heads, head_dim); lses[i] and
 * lse (may be NULL): [batch][heads][seq], contiguous.  Results are rounded
 * once to out's dtype. */
S2_API s2_status s2_ref_combine(s2_ctx *ctx, int n, int batch, int64_t seq, int heads, int head_dim,
                         const s2_tensor *outs, const float *const *lses, const s2_tensor *out, float *lse);

#ifdef __cplusplus
}
#endif
#endif
