/* KV-cache efficiency and the last reader of each key block. */
#include "ir_internal.h"

#include <stdio.h>

static bool rule_head(const s2_pattern *p, int q) { return p->rules[q].mask < 0; }

static bool ranges_apply(const s2_pattern *p, int q)
{
    for (int i = 0; i < p->num_ranges; i++)
        if (s2_ir_range_applies_to(&p->ranges[i], q))
            return true;
    return false;
}

/* Every component of an absolute rule without ranges (window, stripe column,
 * dense) is a run of query blocks containing m = n, so their union is one run. */
bool s2_ir_readers_one_run(const s2_pattern *p, int q)
{
    return rule_head(p, q) && p->vert_position == S2_VERT_ABSOLUTE && !ranges_apply(p, q);
}

/* First gap in the readers of key block n, or false. */
static bool column_gap(const s2_layout *l, int q, int64_t n, s2_ir_srcs *ss, int64_t *before, int64_t *gap,
                       int64_t *after)
{
    int bs = l->p->block_size;
    ss->n = 0;
    s2_ir_tr_sources(l, q, n, n, ss);
    int64_t prev = -1, last = l->kv_blocks - 1;
    for (int64_t m = l->first_q_block; (m = s2_ir_next_tile(ss, m, bs, bs)) <= last; m++) {
        if (!s2_ir_block_kept(l->p, q, m, n))
            continue;
        if (prev >= 0 && m != prev + 1) {
            *before = prev;
            *gap = prev + 1;
            *after = m;
            return true;
        }
        prev = m;
    }
    return false;
}

s2_status s2_layout_check_kv_efficient(s2_ctx *ctx, const s2_layout *l, bool *ok)
{
    if (!l || !ok)
        return s2_fail(ctx, S2_ERR_INVALID, "null argument");
    *ok = true;
    s2_ir_srcs ss;
    s2_ir_srcs_init(&ss, l->first_q_block, l->kv_blocks - 1);
    s2_status st = S2_OK;
    for (int c = 0; c < l->num_classes && *ok; c++) {
        int q = l->class_rep[c];
        if (s2_ir_readers_one_run(l->p, q))
            continue;
        for (int64_t n = 0; n < l->kv_blocks; n++) {
            int64_t a, g, b;
            if (column_gap(l, q, n, &ss, &a, &g, &b)) {
                *ok = false;
                s2_fail(ctx, S2_OK,
                        "not KV-cache efficient: head %d, key block %lld is read by query blocks %lld and %lld "
                        "but not by %lld",
                        q, (long long)n, (long long)a, (long long)b, (long long)g);
                break;
            }
            if (ss.oom)
                break;
        }
    }
    if (ss.oom)
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    s2_ir_srcs_free(&ss);
    return st;
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int64_t lcm_capped(int64_t a, int64_t b)
{
    int64_t v = a / gcd64(a, b) * b;
    return v > (INT64_C(1) << 20) ? (INT64_C(1) << 20) : v;
}

/* Beyond query block n + K every range test is constant and the rule only
 * depends on m through the relative distance, which repeats with period P. */
static void tail_params(const s2_pattern *p, int q, int64_t *K, int64_t *P)
{
    const s2_head_rule *r = &p->rules[q];
    int64_t k = s2_max64(s2_max64(r->local_left, r->local_right), 1) + 1, per = 1;
    bool rel = p->vert_position == S2_VERT_RELATIVE;
    if (rel && r->vert_stride > 0)
        per = r->vert_stride;
    for (int i = 0; i < p->num_ranges; i++) {
        const s2_range_rule *rr = &p->ranges[i];
        if (!s2_ir_range_applies_to(rr, q))
            continue;
        int64_t klo, khi, dlo, dhi;
        s2_ir_range_bounds(rr, p->block_size, &klo, &khi, &dlo, &dhi);
        k = s2_max64(k, dlo + 2);
        if (rr->dist_hi < INT64_MAX)
            k = s2_max64(k, dhi + 2);
        if (rel && rr->action == S2_RANGE_STRIDE)
            per = lcm_capped(per, rr->stride);
    }
    *K = k;
    *P = per;
}

static int64_t scan_down(const s2_pattern *p, int q, int64_t n, int64_t hi, int64_t lo)
{
    for (int64_t m = hi; m >= lo; m--)
        if (s2_ir_block_kept(p, q, m, n))
            return m;
    return -1;
}

/* Last query block (<= mh, INT64_MAX = unbounded) reading key block n;
 * INT64_MAX when unbounded and read forever. */
static int64_t last_block(const s2_pattern *p, int q, int64_t n, int64_t mh)
{
    int64_t lo = p->causal ? n : 0;
    const s2_head_rule *r = &p->rules[q];
    if (r->mask >= 0) {
        const s2_block_mask *bm = &p->masks[r->mask];
        return scan_down(p, q, n, s2_min64(mh, bm->rows - 1), lo);
    }
    int64_t K, P;
    tail_params(p, q, &K, &P);
    int64_t T = n + K;
    if (mh == INT64_MAX) {
        for (int64_t m = T; m < T + P; m++)
            if (s2_ir_block_kept(p, q, m, n))
                return INT64_MAX;
    } else if (mh >= T) {
        int64_t m = scan_down(p, q, n, mh, s2_max64(T, mh - P + 1));
        if (m >= 0)
            return m;
    }
    return scan_down(p, q, n, s2_min64(mh, T - 1), lo);
}

int64_t s2_kv_last_reader(const s2_pattern *p, int q, int64_t n, int64_t horizon)
{
    if (!p || !p->rules || q < 0 || q >= p->heads || n < 0 || n >= S2_MAX_SEQ_LEN || horizon < 0)
        return -1;
    int bs = p->block_size;
    if (horizon == 0 && p->max_seq_len > 0)
        horizon = p->max_seq_len;
    if (horizon > 0 && n * bs >= horizon)
        return -1;
    int64_t mh = horizon > 0 ? (horizon - 1) / bs : INT64_MAX;
    int64_t m = last_block(p, q, n, mh);
    if (m < 0 || m == INT64_MAX)
        return m < 0 ? -1 : S2_LIVE_FOREVER;
    int64_t pos = (m + 1) * bs - 1;
    if (horizon > 0 && pos >= horizon - 1)
        return S2_LIVE_FOREVER;
    return pos;
}

int64_t s2_kv_last_reader_group(const s2_pattern *p, int h, int64_t n, int64_t horizon)
{
    if (!p || p->kv_heads < 1 || h < 0 || h >= p->kv_heads)
        return -1;
    int group = p->heads / p->kv_heads;
    int64_t best = -1;
    for (int q = h * group; q < (h + 1) * group; q++) {
        int64_t v = s2_kv_last_reader(p, q, n, horizon);
        if (v > best)
            best = v;
    }
    return best;
}
