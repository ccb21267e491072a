/* The block and token predicates: the one definition of which (query, key)
 * pairs a pattern keeps.  Everything else in ir/ is checked against these. */
#include "ir_internal.h"

static bool in_local(int64_t d, int L, int R)
{
    /* L counts the diagonal and blocks to the left, R the diagonal and blocks
     * to the right, so a causal rule (R == 0) still keeps its diagonal. */
    return (d >= 0 && d < L) || (d <= 0 && -d < R);
}

/* The library's relative distance: 0 inside the window, then 1, 2, ... */
static int64_t rel_dist(int64_t d, int L, int R)
{
    int64_t left = d - L + 1, right = -d - R + 1;
    return (left > 0 ? left : 0) + (right > 0 ? right : 0);
}

bool s2_ir_range_applies_to(const s2_range_rule *rr, int q)
{
    return !rr->heads || rr->heads[q] != 0;
}

static int64_t cdiv_nonneg(int64_t a, int64_t b) { return a / b + (a % b != 0); }

void s2_ir_range_bounds(const s2_range_rule *rr, int bs, int64_t *klo, int64_t *khi, int64_t *dlo, int64_t *dhi)
{
    int64_t kl = rr->key_lo > 0 ? rr->key_lo : 0, dl = rr->dist_lo > 0 ? rr->dist_lo : 0;
    *klo = cdiv_nonneg(kl, bs);
    *khi = rr->key_hi <= 0 ? -1 : cdiv_nonneg(rr->key_hi, bs) - 1;
    *dlo = cdiv_nonneg(dl, bs);
    *dhi = rr->dist_hi <= 0 ? -1 : cdiv_nonneg(rr->dist_hi, bs) - 1;
}

bool s2_ir_range_selects(const s2_pattern *p, const s2_range_rule *rr, int q, int64_t m, int64_t n)
{
    if (!s2_ir_range_applies_to(rr, q))
        return false;
    int64_t klo, khi, dlo, dhi;
    s2_ir_range_bounds(rr, p->block_size, &klo, &khi, &dlo, &dhi);
    int64_t d = m - n;
    if (!p->causal && d < 0)
        d = -d;
    return n >= klo && n <= khi && d >= dlo && d <= dhi;
}

static bool stride_hit(const s2_pattern *p, const s2_head_rule *r, int64_t d, int64_t n, int64_t stride)
{
    if (stride <= 0)
        return p->vert_position == S2_VERT_RELATIVE && rel_dist(d, r->local_left, r->local_right) == 0;
    if (p->vert_position == S2_VERT_RELATIVE)
        return rel_dist(d, r->local_left, r->local_right) % stride == 0;
    return s2_mod(n + r->shift, stride) == 0;
}

static bool mask_bit(const s2_pattern *p, const s2_head_rule *r, int64_t m, int64_t n)
{
    const s2_block_mask *bm = &p->masks[r->mask];
    if (m >= bm->rows || n >= bm->cols)
        return false;
    int h = bm->heads == 1 ? 0 : r->mask_head;
    return bm->bits[((int64_t)h * bm->rows + m) * bm->cols + n] != 0;
}

bool s2_ir_block_kept(const s2_pattern *p, int q, int64_t m, int64_t n)
{
    if (p->causal && n > m)
        return false;
    const s2_head_rule *r = &p->rules[q];
    if (r->mask >= 0)
        return mask_bit(p, r, m, n);
    int64_t d = m - n;
    if (in_local(d, r->local_left, r->local_right))
        return true;
    bool kept = r->dense || stride_hit(p, r, d, n, r->vert_stride);
    for (int i = 0; i < p->num_ranges; i++) {
        const s2_range_rule *rr = &p->ranges[i];
        if (!s2_ir_range_selects(p, rr, q, m, n))
            continue;
        switch (rr->action) {
        case S2_RANGE_SINK:
        case S2_RANGE_DENSE: kept = true; break;
        case S2_RANGE_DROP: kept = false; break;
        case S2_RANGE_STRIDE: kept = stride_hit(p, r, d, n, rr->stride); break;
        }
    }
    return kept;
}

static bool head_ok(const s2_pattern *p, int q)
{
    return p && p->rules && q >= 0 && q < p->heads && p->block_size > 0;
}

bool s2_block_kept(const s2_pattern *p, int q, int64_t m, int64_t n)
{
    if (!head_ok(p, q) || m < 0 || n < 0 || m >= S2_MAX_SEQ_LEN || n >= S2_MAX_SEQ_LEN)
        return false;
    return s2_ir_block_kept(p, q, m, n);
}

bool s2_token_kept(const s2_pattern *p, int q, int64_t qpos, int64_t kpos)
{
    if (!head_ok(p, q) || qpos < 0 || kpos < 0)
        return false;
    if (p->causal && kpos > qpos)
        return false;
    return s2_block_kept(p, q, qpos / p->block_size, kpos / p->block_size);
}
