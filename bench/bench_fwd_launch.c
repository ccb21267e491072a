/* bench_fwd: the schedule on the device, launches, the check against a
 * float64 recomputation and the timing between CUDA events. */
#include "attn_tune.h"
#include "bench_fwd.h"
#include "pack_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

s2_status sched_upload(s2_ctx *ctx, s2_device *dev, const config_data *cd, const s2_kspec *spec,
                       sched_dev *sd)
{
    memset(sd, 0, sizeof *sd);
    int gather = spec->kv_gather > 1 ? spec->kv_gather : 1;
    s2_tile_spec ts = {spec->block_m, spec->block_n / gather};
    s2_schedule *sched = NULL;
    s2_packed_schedule pk;
    memset(&pk, 0, sizeof pk);
    s2_layout_stats stats;
    s2_status st = s2_schedule_build(ctx, cd->lay, ts, false, &sched);
    if (st == S2_OK)
        /* (S2C_BENCH_UNION_PAIRS=1: the two-slab shape on union pairs, for comparison) */
        st = s2_kernel_spec_owned_pairs(spec) && getenv("S2C_BENCH_UNION_PAIRS")
                 ? s2_schedule_pack_gathered(ctx, sched, gather, &pk)
                 : s2_kernel_spec_pack_forward(ctx, spec, sched, &pk);
    if (st == S2_OK)
        st = s2_layout_stats_compute(ctx, cd->lay, ts, cd->head_dim, S2_DTYPE_BF16, &stats);
    if (st == S2_OK)
        st = s2_mem_alloc(ctx, dev, pk.size, &sd->buf);
    if (st == S2_OK)
        st = s2_memcpy_h2d(ctx, dev, sd->buf, pk.data, pk.size);
    if (st == S2_OK) {
        sd->cls = sd->buf + pk.class_of_head_off;
        sd->offs = sd->buf + pk.offsets_off;
        sd->ents = sd->buf + pk.entries_off;
        sd->first = (int32_t)sched->geom.first_q_tile;
        sd->q_tiles = (int32_t)sched->geom.q_tiles;
        sd->kept_pairs = stats.kept_pairs;
        sd->tile_flops = stats.tile_flops;
        /* gathered: group key blocks per computed tile; the packed entries
         * are per class of heads, the layout's per head */
        if (gather > 1 && stats.entries > 0) {
            const int32_t *cls = (const int32_t *)((const char *)pk.data + pk.class_of_head_off);
            const int32_t *off = (const int32_t *)((const char *)pk.data + pk.offsets_off);
            int64_t lists = sched->geom.q_tiles, per_head = 0;
            for (int h = 0; h < sched->heads; h++)
                per_head += off[(int64_t)(cls[h] + 1) * lists] - off[(int64_t)cls[h] * lists];
            sd->tile_flops *= (double)gather * (double)per_head / (double)stats.entries;
        }
        sd->entries = stats.entries;
    }
    if (st == S2_OK && spec->persistent > 0) {
        int32_t *work = NULL;
        int64_t n = 0;
        st = s2_schedule_work_list(ctx, sched, &work, &n);
        /* the list, then two zeroed work counters (attention.h) */
        int32_t *w4 = st == S2_OK ? realloc(work, (size_t)(n + 4) * sizeof *work) : NULL;
        if (w4) {
            work = w4;
            memset(work + n, 0, 4 * sizeof *work);
        } else if (st == S2_OK) {
            st = S2_ERR_NOMEM;
        }
        if (st == S2_OK)
            st = s2_mem_alloc(ctx, dev, (size_t)(n + 4) * sizeof *work, &sd->work);
        if (st == S2_OK)
            st = s2_memcpy_h2d(ctx, dev, sd->work, work, (size_t)(n + 4) * sizeof *work);
        sd->n_work = (int32_t)n;
        sd->counter = sd->work + 4 * (s2_devptr)((n + 1) & ~1);
        free(work);
    }
    s2_packed_schedule_free(&pk);
    s2_schedule_free(sched);
    return st;
}

static s2_status launch(s2_ctx *ctx, const config_data *cd, const variant *v, const sched_dev *sd,
                        const input_set *in)
{
    const bench_config *c = cd->cfg;
    int64_t H = c->heads, S = c->seq, D = cd->head_dim;
    int64_t st3[3] = {S * H * D, H * D, D};
    int32_t q_len = (int32_t)S, kv_len = (int32_t)S;
    float scale_log2 = (float)(1.0 / sqrt((double)D) * M_LOG2E);
    s2_devptr q = in->q, k = in->k, vv = in->v, o = in->o, lse = in->lse;
    s2_devptr cls = sd->cls, offs = sd->offs, ents = sd->ents;
    int32_t first = sd->first, q_tiles = sd->q_tiles, batch = c->batch;
    int64_t a0 = st3[0], a1 = st3[1], a2 = st3[2];
    int si = (int)(in - cd->sets);
    s2_tensor_map *m = (s2_tensor_map *)v->maps[si];
    void *args[] = {&q, &k, &vv, &o, &lse, &a0, &a1, &a2, &a0, &a1, &a2, &a0, &a1, &a2, &a0, &a1, &a2,
                    &q_len, &kv_len, &scale_log2, &cls, &offs, &ents, &first, &q_tiles, &m[0], &m[1], &m[2],
                    (void *)&sd->work, (void *)&sd->n_work, &batch, (void *)&sd->counter, NULL};
    s2_devptr no_seqs = 0; /* uniform batch: the trailing seqinfo parameter is null */
    args[!v->tma ? 25 : v->persistent ? 32 : 28] = &no_seqs;
    for (int i = 29; v->fp8 && i < 32; i++)
        args[i] = &no_seqs;   /* fp8: null descales (1.0) */
    s2_launch_cfg cfg = {.grid = {(uint32_t)q_tiles, (uint32_t)c->heads, (uint32_t)c->batch},
                         .block = {(uint32_t)v->threads, 1, 1},
                         .smem_bytes = (uint32_t)v->smem};
    if (v->persistent) {
        int64_t items = (int64_t)sd->n_work * c->batch;
        cfg.grid[0] = (uint32_t)((int64_t)v->grid_p < items ? (int64_t)v->grid_p : items);
        cfg.grid[1] = cfg.grid[2] = 1;
    }
    return s2_cufunction_launch(ctx, v->kern, &cfg, args);
}

/* Tensor maps of every input set, built once (not inside the timed region). */
s2_status variant_maps(s2_ctx *ctx, const s2_device *dev, const config_data *cd, variant *v)
{
    const bench_config *c = cd->cfg;
    for (int i = 0; v->tma && i < cd->nsets; i++) {
        const input_set *in = &cd->sets[i];
        int64_t H = c->heads, S = c->seq, D = cd->head_dim;
        s2_attn_fwd_args a = {.batch = c->batch, .q_len = S, .kv_len = S, .heads = c->heads, .kv_heads = c->heads,
                              .head_dim = (int)D, .dtype = bench_dtype, .q = in->q, .k = in->k, .v = in->v,
                              .o = in->o, .lse = in->lse};
        int64_t st3[3] = {S * H * D, H * D, D};
        for (int j = 0; j < 3; j++)
            a.q_stride[j] = a.k_stride[j] = a.v_stride[j] = a.o_stride[j] = st3[j];
        s2_status st = s2_rt_fwd_tensor_maps(ctx, dev, &v->spec, &a, v->maps[i]);
        if (st != S2_OK)
            return st;
    }
    return S2_OK;
}

/* ---- the check ------------------------------------------------------------------
 * Every element written (poisoned with NaN before) and finite; `rows` query
 * rows (the last one and random others) against float64 on the CPU. */
s2_status check_variant(s2_ctx *ctx, s2_device *dev, const config_data *cd, const variant *v,
                        const sched_dev *sd, int rows, uint64_t seed, check_result *cr)
{
    const bench_config *c = cd->cfg;
    const input_set *in = &cd->sets[0];
    const int64_t B = c->batch, H = c->heads, S = c->seq, D = cd->head_dim;
    memset(cr, 0, sizeof *cr);
    s2_status st = s2_memset_d8(ctx, dev, in->o, 0xff, cd->elems * bench_out_size());
    if (st == S2_OK)
        st = s2_memset_d8(ctx, dev, in->lse, 0xff, (size_t)(B * H * S) * 4);
    if (st == S2_OK)
        st = launch(ctx, cd, v, sd, in);
    if (st == S2_OK)
        st = s2_device_synchronize(ctx, dev);
    void *o = malloc(cd->elems * bench_out_size());
    float *lse = malloc((size_t)(B * H * S) * 4);
    double *sc = malloc((size_t)S * sizeof *sc);
    if (!o || !lse || !sc)
        st = S2_ERR_NOMEM;
    if (st == S2_OK)
        st = s2_memcpy_d2h(ctx, dev, o, in->o, cd->elems * bench_out_size());
    if (st == S2_OK)
        st = s2_memcpy_d2h(ctx, dev, lse, in->lse, (size_t)(B * H * S) * 4);
    if (st != S2_OK) {
        free(o), free(lse), free(sc);
        return st;
    }
    for (uint64_t i = 0; i < cd->elems; i++)
        if (!isfinite(bench_out_at(o, i)))
            cr->bad++;
    for (int64_t i = 0; i < B * H * S; i++)
        if (!isfinite(lse[i]))
            cr->bad++;

    uint64_t rs = seed;
    double num = 0, den = 0, scale = 1.0 / sqrt((double)D);
    double ov[MAX_HEAD_DIM];
    for (int r = 0; r < rows; r++) {
        int64_t b = r == 0 ? B - 1 : (int64_t)(rng_next(&rs) % (uint64_t)B);
        int64_t h = r == 0 ? H - 1 : (int64_t)(rng_next(&rs) % (uint64_t)H);
        int64_t i = r == 0 ? S - 1 : (int64_t)(rng_next(&rs) % (uint64_t)S);
        uint64_t qrow = (uint64_t)(((b * S + i) * H + h) * D);
        double mx = -INFINITY;
        for (int64_t j = 0; j < S; j++) {
            sc[j] = -INFINITY;
            if (!s2_token_kept(cd->p, (int)h, i, j))
                continue;
            uint64_t krow = (uint64_t)(((b * S + j) * H + h) * D);
            double s = 0;
            for (int d = 0; d < D; d++)
                s += pool_at(in->qb, qrow + (uint64_t)d) * pool_at(in->kb, krow + (uint64_t)d);
            sc[j] = s * scale;
            mx = fmax(mx, sc[j]);
        }
        double l = 0;
        for (int d = 0; d < D; d++)
            ov[d] = 0;
        for (int64_t j = 0; j < S; j++) {
            if (sc[j] == -INFINITY)
                continue;
            double p = exp(sc[j] - mx);
            l += p;
            uint64_t vrow = (uint64_t)(((b * S + j) * H + h) * D);
            for (int d = 0; d < D; d++)
                ov[d] += p * pool_at(in->vb, vrow + (uint64_t)d);
        }
        for (int d = 0; d < D; d++) {
            double ref = l > 0 ? ov[d] / l : 0.0, x = bench_out_at(o, qrow + (uint64_t)d);
            num += (x - ref) * (x - ref);
            den += ref * ref;
        }
        double lref = l > 0 ? mx + log(l) : -INFINITY;
        double lg = lse[(b * H + h) * S + i];
        if (l > 0)
            cr->lse_err = fmax(cr->lse_err, fabs(lg - lref));
        else if (!(isinf(lg) && lg < 0))
            cr->bad++;
    }
    cr->o_err = den > 0 ? sqrt(num / den) : sqrt(num);
    /* fp8: P is cast to e4m3 for P·V (test_fwd_fp8_gpu's tolerance) */
    cr->ok = cr->bad == 0 && cr->o_err <= (v->fp8 ? 4e-2 : 2e-2) && cr->lse_err <= 1e-3;
    free(o), free(lse), free(sc);
    return S2_OK;
}

/* ---- timing ----------------------------------------------------------------------- */
typedef struct fwd_work {
    const config_data *cd;
    const variant *v;
    const sched_dev *sd;
    int i;   /* which input set: rotates, so a warm timer reads no last-run data either */
} fwd_work;

static s2_status fwd_once(s2_ctx *ctx, void *user, s2_event *mid)
{
    (void)mid;
    fwd_work *w = user;
    return launch(ctx, w->cd, w->v, w->sd, &w->cd->sets[w->i++ % w->cd->nsets]);
}

s2_status time_variant(s2_ctx *ctx, bench_timer *t, const config_data *cd, const variant *v, const sched_dev *sd,
                       int reps, double *med, double *min)
{
    fwd_work w = {cd, v, sd, 0};
    return bench_timer_median(ctx, t, fwd_once, &w, 5, reps, med, min, NULL);
}

