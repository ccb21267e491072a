#include "rand_pattern.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

s2_pattern_set *s2t_pattern_set_from_args(const s2_local_stride_args *a)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = NULL;
    s2_status st = s2_pattern_from_args(ctx, a, &set);
    ck_assert_msg(st == S2_OK, "from_args: %s", s2_ctx_message(ctx));
    s2_ctx_free(ctx);
    return set;
}

static int64_t rand_bound(s2t_rng *r, int bs)
{
    return (int64_t)s2t_rng_int(r, 0, 12) * bs / 2 + s2t_rng_int(r, 0, 1) * s2t_rng_int(r, 0, 7);
}

void s2t_rand_pattern_new(s2t_rng *r, const s2t_rand_opts *o, s2t_rand_pattern *rp)
{
    memset(rp, 0, sizeof *rp);
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    static const int hs[] = {1, 2, 4, 8};
    a.num_heads = hs[s2t_rng_int(r, 0, 3)];
    a.num_kv_heads = a.num_heads >> s2t_rng_int(r, 0, o->max_kv_shift);
    if (a.num_kv_heads < 1)
        a.num_kv_heads = 1;
    a.block_size = 16 << s2t_rng_int(r, 0, o->max_block_shift);
    a.local_blocks = s2t_rng_int(r, 0, 4);
    a.local_right = s2t_rng_int(r, 0, 3);
    a.vert_stride = s2t_rng_int(r, 1, o->max_vert_stride);
    a.head_sliding_offset = s2t_rng_int(r, 0, 5);
    a.homo_head = s2t_rng_int(r, 0, 3) == 0;
    a.num_dense_heads = s2t_rng_int(r, 0, o->dense_one_in - 1) == 0 ? 1 : 0;
    a.causal = s2t_rng_int(r, 0, o->bidir_one_in - 1) != 0;
    a.vert_position = s2t_rng_int(r, -1, 1);
    if (o->name)
        a.name = o->name;
    rp->set = s2t_pattern_set_from_args(&a);
    s2_pattern *p = rp->p = (s2_pattern *)s2_pattern_set_get(rp->set, 0);
    for (int q = 0; q < p->heads; q++)
        if (s2t_rng_int(r, 0, 5) == 0)
            p->rules[q].vert_stride = 0;
    int bs = p->block_size;
    rp->kv_len = s2t_rng_int(r, 1, o->len_base + o->len_per_block * bs);
    rp->q_len = rp->kv_len;
    if (o->draw_q_len && !s2t_rng_int(r, 0, 1))
        rp->q_len = s2t_rng_int(r, 1, (int)rp->kv_len);
    int n = o->ranges_one_in < 0 ? -o->ranges_one_in : o->ranges_one_in;
    bool hit = s2t_rng_int(r, 0, n - 1) == 0;
    p->num_ranges = hit == (o->ranges_one_in > 0) ? s2t_rng_int(r, 1, 3) : 0;
    p->ranges = rp->ranges;
    for (int i = 0; i < p->num_ranges; i++) {
        s2_range_rule *rr = &rp->ranges[i];
        rr->action = (s2_range_action)s2t_rng_int(r, 0, 3);
        rr->stride = s2t_rng_int(r, 1, 5);
        rr->key_lo = s2t_rng_int(r, 0, 1) ? 0 : rand_bound(r, bs);
        rr->key_hi = s2t_rng_int(r, 0, 1) ? INT64_MAX : rr->key_lo + rand_bound(r, bs) + 1;
        rr->dist_lo = s2t_rng_int(r, 0, 1) ? 0 : rand_bound(r, bs);
        rr->dist_hi = s2t_rng_int(r, 0, 1) ? INT64_MAX : rr->dist_lo + rand_bound(r, bs) + 1;
        for (int q = 0; q < p->heads; q++)
            rp->range_heads[i][q] = (uint8_t)s2t_rng_int(r, 0, 1);
        rr->heads = s2t_rng_int(r, 0, 1) ? rp->range_heads[i] : NULL;
    }
    if (s2t_rng_int(r, 0, 4) == 0) {
        int64_t nb = (rp->kv_len + bs - 1) / bs + s2t_rng_int(r, 0, 2);
        rp->mask.heads = s2t_rng_int(r, 1, 2);
        rp->mask.rows = rp->mask.cols = nb;
        rp->mask.bits = malloc((size_t)(rp->mask.heads * nb * nb));
        ck_assert_ptr_nonnull(rp->mask.bits);
        for (int64_t i = 0; i < rp->mask.heads * nb * nb; i++)
            rp->mask.bits[i] = (uint8_t)(s2t_rng_next(r) % 3 == 0);
        p->masks = &rp->mask;
        p->num_masks = 1;
        p->rules[0].mask = 0;
        p->rules[0].mask_head = rp->mask.heads - 1;
    }
}

void s2t_rand_pattern_free(s2t_rand_pattern *rp)
{
    free(rp->mask.bits);
    s2_pattern_set_free(rp->set);
}
