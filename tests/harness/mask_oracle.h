/* Which (query, key) pairs a pattern keeps, written again for the tests from
 * the semantics in include/s2c/pattern.h (its head comment, s2_head_rule,
 * s2_range_rule) and README.md, apart from ir/predicate.c on purpose: a test
 * of a predicate's user (the KV evictor, decode lists, the paged example)
 * checked against s2_block_kept would pass with the predicate broken.
 *
 * The per-head rule (dense, window, stride, mask) is the parser's, but the
 * shift is recomputed from the declared step and offset (README: shift =
 * h * step + offset, h the kv head, 0 when homo_head), so a pattern whose
 * overrides set head_sliding_offset is beyond it (no stock or generated
 * test pattern has one).  Header only, without Check: examples use it too. */
#ifndef S2C_TEST_MASK_ORACLE_H
#define S2C_TEST_MASK_ORACLE_H

#include "s2c/pattern.h"

#include <stdbool.h>
#include <stdint.h>

/* a mod m in [0, m), m > 0 */
static inline int64_t s2t_oracle_mod(int64_t a, int64_t m)
{
    int64_t r = a % m;
    return r < 0 ? r + m : r;
}

/* shift(h) = h * head_sliding_step + head_sliding_offset, h = q's kv head
 * (0 when homo_head); step auto = max(1, vert_stride / heads). */
static inline int64_t s2t_oracle_shift(const s2_pattern *p, int q)
{
    int64_t h = p->homo_head ? 0 : q / (p->heads / p->kv_heads);
    int64_t step = p->head_sliding_step;
    if (p->head_sliding_step_auto)
        step = p->vert_stride / p->heads < 1 ? 1 : p->vert_stride / p->heads;
    return h * step + p->head_sliding_offset;
}

/* A vertical stripe of `stride` (0: none) at query block m, key block n. */
static inline bool s2t_oracle_stripe(const s2_pattern *p, int q, int64_t m, int64_t n, int64_t stride)
{
    const s2_head_rule *r = &p->rules[q];
    if (stride <= 0)
        return false;
    if (p->vert_position == S2_VERT_ABSOLUTE)
        return s2t_oracle_mod(n + s2t_oracle_shift(p, q), stride) == 0;
    int64_t left = m - n - r->local_left + 1, right = n - m - r->local_right + 1;
    return ((left > 0 ? left : 0) + (right > 0 ? right : 0)) % stride == 0;
}

/* Does range rule rr select block (m, n) of head q?  key_lo <= n*bs <
 * key_hi and dist_lo <= (m - n)*bs < dist_hi, |m - n| when bidirectional. */
static inline bool s2t_oracle_range_selects(const s2_pattern *p, const s2_range_rule *rr, int q, int64_t m,
                                            int64_t n)
{
    if (rr->heads && !rr->heads[q])
        return false;
    int64_t key = n * p->block_size, dist = (m - n) * p->block_size;
    if (!p->causal && dist < 0)
        dist = -dist;
    return rr->key_lo <= key && key < rr->key_hi && rr->dist_lo <= dist && dist < rr->dist_hi;
}

/* Is key block n kept for query block m of query head q? */
static inline bool s2t_oracle_block_kept(const s2_pattern *p, int q, int64_t m, int64_t n)
{
    if (m < 0 || n < 0 || (p->causal && n > m))
        return false;
    const s2_head_rule *r = &p->rules[q];
    if (r->mask >= 0) { /* an explicit mask decides alone; blocks past it are dropped */
        const s2_block_mask *bm = &p->masks[r->mask];
        int64_t slice = bm->heads == 1 ? 0 : r->mask_head;
        return m < bm->rows && n < bm->cols && bm->bits[(slice * bm->rows + m) * bm->cols + n];
    }
    /* the local window, never overridden: local_left blocks from the diagonal
     * leftwards, local_right from it rightwards */
    if ((m - n >= 0 && m - n < r->local_left) || (n - m >= 0 && n - m < r->local_right))
        return true;
    bool kept = r->dense || s2t_oracle_stripe(p, q, m, n, r->vert_stride);
    for (int i = 0; i < p->num_ranges; i++) { /* the last rule that selects the block decides it */
        const s2_range_rule *rr = &p->ranges[i];
        if (!s2t_oracle_range_selects(p, rr, q, m, n))
            continue;
        if (rr->action == S2_RANGE_STRIDE)
            kept = s2t_oracle_stripe(p, q, m, n, rr->stride);
        else
            kept = rr->action != S2_RANGE_DROP;
    }
    return kept;
}

/* Is key position k kept for query position x (absolute) of query head q? */
static inline bool s2t_oracle_token_kept(const s2_pattern *p, int q, int64_t x, int64_t k)
{
    if (x < 0 || k < 0 || (p->causal && k > x))
        return false;
    return s2t_oracle_block_kept(p, q, x / p->block_size, k / p->block_size);
}

/* A golden mask (tests/data, made by the S2 Triton library): block (m, n)
 * of query head q; one slice for every head when it has H == 1. */
static inline bool s2t_golden_block_kept(const s2_block_mask *g, int q, int64_t m, int64_t n)
{
    int64_t slice = g->heads == 1 ? 0 : q;
    return m >= 0 && n >= 0 && m < g->rows && n < g->cols && g->bits[(slice * g->rows + m) * g->cols + n];
}

#endif
