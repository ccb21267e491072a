/* Exact work statistics, computed once per head class from the tile lists. */
#include "ir_internal.h"

#include <stdlib.h>
#include <string.h>

static int64_t entry_pairs(const s2_layout *l, const s2_tile_geom *g, int64_t t, const s2_tile_entry *e)
{
    int64_t t0 = t * g->block_m, qlo = s2_max64(t0, l->q_start), qhi = s2_min64(t0 + g->block_m, l->kv_len);
    int64_t total = 0;
    for (int i = 0; i < g->sub_m; i++) {
        if (!(e->row_mask & (1u << i)))
            continue;
        int64_t qa = s2_max64(t0 + (int64_t)i * g->sub_m_size, qlo);
        int64_t qb = s2_min64(t0 + (int64_t)(i + 1) * g->sub_m_size, qhi);
        for (int j = 0; j < g->sub_n; j++) {
            if (!(e->live & (UINT64_C(1) << (i * g->sub_n + j))))
                continue;
            int64_t k0 = e->tile * g->block_n + (int64_t)j * g->sub_n_size;
            total += s2_ir_rect_pairs(qa, qb, k0, s2_min64(k0 + g->sub_n_size, l->kv_len), l->p->causal);
        }
    }
    return total;
}

static s2_status class_work(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, const s2_tile_geom *g, int q,
                            s2_tile_entry *buf, int64_t cap, double *pairs, int64_t *entries)
{
    *pairs = 0;
    *entries = 0;
    for (int64_t t = g->first_q_tile; t < g->first_q_tile + g->q_tiles; t++) {
        int64_t n = 0;
        s2_status st = s2_layout_q_tile_entries(ctx, l, spec, q, t, buf, cap, &n);
        if (st != S2_OK)
            return st;
        for (int64_t k = 0; k < n; k++)
            *pairs += (double)entry_pairs(l, g, t, &buf[k]);
        *entries += n;
    }
    return S2_OK;
}

s2_status s2_layout_stats_compute(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, int head_dim, s2_dtype dtype,
                                  s2_layout_stats *st)
{
    if (!l || !st)
        return s2_fail(ctx, S2_ERR_INVALID, "null argument");
    if (head_dim < 1 || s2_dtype_size(dtype) == 0)
        return s2_fail(ctx, S2_ERR_INVALID, "head_dim must be >= 1 and dtype known");
    s2_tile_geom g;
    s2_status rc = s2_ir_geom(ctx, l, spec, &g);
    if (rc != S2_OK)
        return rc;
    int64_t cap = s2_layout_max_entries(l, spec);
    s2_tile_entry *buf = malloc((size_t)cap * sizeof *buf);
    double *cls_pairs = calloc((size_t)l->num_classes, sizeof *cls_pairs);
    if (!buf || !cls_pairs) {
        free(buf);
        free(cls_pairs);
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    memset(st, 0, sizeof *st);
    st->q_len = l->q_len;
    st->kv_len = l->kv_len;
    st->heads = l->p->heads;
    st->head_dim = head_dim;
    for (int c = 0; c < l->num_classes && rc == S2_OK; c++) {
        int64_t entries = 0;
        rc = class_work(ctx, l, spec, &g, l->class_rep[c], buf, cap, &cls_pairs[c], &entries);
        st->kept_pairs += cls_pairs[c] * l->class_size[c];
        st->entries += entries * l->class_size[c];
    }
    if (rc == S2_OK) {
        double D = head_dim, es = (double)s2_dtype_size(dtype);
        st->dense_pairs = (double)s2_ir_rect_pairs(l->q_start, l->kv_len, 0, l->kv_len, l->p->causal) * st->heads;
        st->kept_fraction = st->dense_pairs > 0 ? st->kept_pairs / st->dense_pairs : 0;
        st->fwd_flops = 4.0 * st->kept_pairs * D;
        st->fwd_bwd_flops = 3.5 * st->fwd_flops;
        st->tile_flops = 4.0 * (double)g.block_m * g.block_n * D * (double)st->entries;
        st->bytes_read = es * D * (2.0 * (double)l->q_len * st->heads + 2.0 * (double)g.block_n * (double)st->entries);
        st->head_pairs_min = cls_pairs[0];
        for (int c = 0; c < l->num_classes; c++) {
            st->head_pairs_min = cls_pairs[c] < st->head_pairs_min ? cls_pairs[c] : st->head_pairs_min;
            st->head_pairs_max = cls_pairs[c] > st->head_pairs_max ? cls_pairs[c] : st->head_pairs_max;
        }
        st->head_pairs_mean = st->kept_pairs / st->heads;
        st->imbalance = st->head_pairs_mean > 0 ? st->head_pairs_max / st->head_pairs_mean : 0;
    }
    free(buf);
    free(cls_pairs);
    return rc;
}
