/* The paged-decode GPU tests' shared pieces (paged_case.h). */
#include "paged_case.h"

#include "../attn/patterns.h"
#include "s2c/layout.h"
#include "util.h"

#include <check.h>
#include "poison.h"
#include "rand_pattern.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK(ctx, call) ck_assert_msg((call) == S2_OK, "%s: %s", #call, s2_ctx_message(ctx))

s2_pattern_set *s2t_paged_pattern(s2_ctx *ctx, const char *file, const char *name, int args, const s2_pattern **p)
{
    s2_pattern_set *set = NULL;
    if (file) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", getenv("S2C_PATTERNS"), file);
        OK(ctx, s2_pattern_load(ctx, path, &set));
        *p = name ? s2_pattern_set_find(set, name) : s2_pattern_set_get(set, 0);
    } else {
        s2_local_stride_args a;
        attn_pattern_args(args, &a);
        OK(ctx, s2_pattern_from_args(ctx, &a, &set));
        *p = s2_pattern_set_get(set, 0);
    }
    ck_assert(*p != NULL);
    return set;
}

bool s2t_block_needed(const s2_pattern *p, int g, int64_t len, int n_new, int64_t n)
{
    int G = p->heads / p->kv_heads;
    for (int t = 0; t < n_new; t++) {
        int64_t m = (len - n_new + t) / p->block_size;
        for (int i = 0; i < G; i++)
            if (s2_block_kept(p, g * G + i, m, n))
                return true;
    }
    return false;
}

void s2t_paged_init(s2t_paged *pg, const s2_pattern *p, s2_dtype dt, int head_dim, int batch, int n_new,
                    int page_size, bool per_head, int64_t max_len, int spare, uint64_t *s)
{
    memset(pg, 0, sizeof *pg);
    pg->B = batch, pg->H = p->heads, pg->HK = p->kv_heads, pg->D = head_dim, pg->N = n_new, pg->P = page_size;
    pg->dt = dt, pg->max_len = max_len;
    pg->max_pages = s2_cdiv(max_len, page_size);
    int rows = per_head ? pg->B * pg->HK : pg->B;
    pg->table_hs = per_head ? pg->max_pages : 0;
    pg->table_bs = per_head ? pg->max_pages * pg->HK : pg->max_pages;
    pg->num_pages = rows * pg->max_pages + spare;
    pg->lens = calloc((size_t)pg->B, sizeof *pg->lens);
    pg->lens32 = calloc((size_t)pg->B, sizeof *pg->lens32);
    pg->table = calloc((size_t)(rows * pg->max_pages), sizeof *pg->table);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)pg->num_pages);
    pg->q = malloc((size_t)pg->B * pg->N * pg->H * pg->D * 2);
    ck_assert(pg->lens && pg->lens32 && pg->table && perm && pg->q);
    for (int b = 0; b < pg->B; b++) {
        pg->lens[b] = b == 0 ? max_len : n_new + (int64_t)(s2t_xorshift64(s) % (uint64_t)(max_len - n_new + 1));
        pg->lens32[b] = (int32_t)pg->lens[b];
    }
    s2t_shuffle_ids(perm, pg->num_pages, s);
    memcpy(pg->table, perm, sizeof(int32_t) * (size_t)(rows * pg->max_pages));
    free(perm);
    s2_tensor tq = s2_tensor_bshd(pg->q, dt, pg->N, pg->H, pg->D);
    int64_t qe[4] = {pg->B, pg->N, pg->H, pg->D};
    s2_tensor_fill_random(&tq, qe, s2t_xorshift64(s), -2, 2);
}

void s2t_paged_free(s2t_paged *pg)
{
    free(pg->lens), free(pg->lens32), free(pg->table), free(pg->q);
}

int32_t s2t_paged_page(const s2t_paged *pg, int b, int g, int64_t j)
{
    return pg->table[b * pg->table_bs + g * pg->table_hs + j];
}

bool s2t_paged_slice_read(const s2t_paged *pg, const s2_pattern *p, int b, int g, int64_t j)
{
    for (int64_t n = j * pg->P / p->block_size; n * p->block_size < (j + 1) * pg->P; n++)
        if (s2t_block_needed(p, g, pg->lens[b], pg->N, n))
            return true;
    return false;
}

s2_devptr s2t_upload(s2_ctx *ctx, s2_device *dev, const void *src, size_t bytes)
{
    s2_devptr d = 0;
    OK(ctx, s2_mem_alloc(ctx, dev, bytes, &d));
    OK(ctx, s2_memcpy_h2d(ctx, dev, d, src, bytes));
    return d;
}

static size_t q_bytes(const s2t_paged *pg)
{
    return (size_t)pg->B * pg->N * pg->H * pg->D * 2;
}

static size_t lse_count(const s2t_paged *pg)
{
    return (size_t)pg->B * pg->H * pg->N;
}

void s2t_paged_upload(s2_ctx *ctx, s2_device *dev, const s2t_paged *pg, const void *kp, const void *vp,
                      size_t pool_bytes, s2t_paged_dev *d, s2_attn_decode_args *a)
{
    memset(d, 0, sizeof *d);
    int rows = pg->table_hs ? pg->B * pg->HK : pg->B;
    d->q = s2t_upload(ctx, dev, pg->q, q_bytes(pg));
    d->k = s2t_upload(ctx, dev, kp, pool_bytes);
    d->v = s2t_upload(ctx, dev, vp, pool_bytes);
    d->table = s2t_upload(ctx, dev, pg->table, (size_t)rows * pg->max_pages * sizeof(int32_t));
    d->lens = s2t_upload(ctx, dev, pg->lens32, (size_t)pg->B * sizeof(int32_t));
    OK(ctx, s2_mem_alloc(ctx, dev, q_bytes(pg), &d->o));
    OK(ctx, s2_mem_alloc(ctx, dev, lse_count(pg) * sizeof(float), &d->lse));
    *a = (s2_attn_decode_args){.batch = pg->B, .n_new = pg->N, .heads = pg->H, .kv_heads = pg->HK, .head_dim = pg->D,
                               .dtype = pg->dt, .q = d->q, .o = d->o, .lse = d->lse, .k_pages = d->k, .v_pages = d->v,
                               .num_pages = pg->num_pages, .page_size = pg->P, .block_table = d->table,
                               .table_stride = {pg->table_bs, pg->table_hs}, .max_pages_per_seq = pg->max_pages,
                               .seq_lens = d->lens, .max_seq_len = pg->max_len};
    int64_t qs[3] = {(int64_t)pg->N * pg->H * pg->D, (int64_t)pg->H * pg->D, pg->D};
    int64_t ks[3] = {(int64_t)pg->P * pg->HK * pg->D, (int64_t)pg->HK * pg->D, pg->D};
    memcpy(a->q_stride, qs, sizeof qs), memcpy(a->o_stride, qs, sizeof qs);
    memcpy(a->k_stride, ks, sizeof ks), memcpy(a->v_stride, ks, sizeof ks);
}

void s2t_paged_dev_free(s2_ctx *ctx, s2_device *dev, s2t_paged_dev *d)
{
    s2_devptr all[] = {d->q, d->k, d->v, d->table, d->lens, d->o, d->lse, d->ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        s2_mem_free(ctx, dev, all[i]);
    memset(d, 0, sizeof *d);
}

static bool ref_mask(const void *user, int q_head, int64_t qpos, int64_t kpos)
{
    return s2_token_kept((const s2_pattern *)user, q_head, qpos, kpos);
}

void s2t_paged_reference(s2_ctx *ctx, const s2t_paged *pg, const s2_pattern *p, const s2_tensor *tk,
                         const s2_tensor *tv, double **ref_o, float **ref_lse)
{
    *ref_o = malloc(sizeof(double) * q_bytes(pg) / 2);
    *ref_lse = malloc(sizeof(float) * lse_count(pg));
    ck_assert(*ref_o && *ref_lse);
    const int64_t table_strides[3] = {pg->table_bs, pg->table_hs, 1};
    s2_ref_paged_problem rp = {.batch = pg->B, .heads = pg->H, .kv_heads = pg->HK, .head_dim = pg->D, .q_len = pg->N,
                               .kv_lens = pg->lens, .block_table = pg->table, .max_pages_per_seq = pg->max_pages,
                               .num_pages = pg->num_pages, .page_size = pg->P, .causal = p->causal, .mask = ref_mask,
                               .mask_user = p, .table_strides = table_strides};
    s2_tensor tq = s2_tensor_bshd(pg->q, pg->dt, pg->N, pg->H, pg->D);
    s2_tensor tro = s2_tensor_bshd(*ref_o, S2_DTYPE_F64, pg->N, pg->H, pg->D);
    OK(ctx, s2_ref_decode_paged(ctx, &rp, &tq, tk, tv, &tro, *ref_lse));
}

/* Per (token, head) row: relative Frobenius error of o; lse absolute (a NaN counts as infinite). */
static void compare(const s2t_paged *pg, const uint16_t *o, const float *lse, const double *ref_o,
                    const float *ref_lse, double *o_err, double *lse_err)
{
    s2_tensor to = s2_tensor_bshd((void *)o, pg->dt, pg->N, pg->H, pg->D);
    *o_err = 0;
    *lse_err = 0;
    for (int b = 0; b < pg->B; b++)
        for (int t = 0; t < pg->N; t++)
            for (int h = 0; h < pg->H; h++) {
                double num = 0, den = 0;
                for (int d = 0; d < pg->D; d++) {
                    double r = ref_o[(((int64_t)b * pg->N + t) * pg->H + h) * pg->D + d];
                    double g = s2_tensor_get(&to, b, t, h, d);
                    num += (g - r) * (g - r);
                    den += r * r;
                }
                double e = den > 0 ? sqrt(num / den) : sqrt(num);
                if (!(e <= *o_err))
                    *o_err = isnan(e) ? INFINITY : fmax(*o_err, e);
                int64_t li = ((int64_t)b * pg->H + h) * pg->N + t;
                double le = ref_lse[li] == -INFINITY ? (lse[li] == -INFINITY ? 0 : INFINITY) : fabs(lse[li] - ref_lse[li]);
                if (!(le <= *lse_err))
                    *lse_err = isnan(le) ? INFINITY : fmax(*lse_err, le);
            }
}

bool s2t_paged_runs(s2_ctx *ctx, s2_device *dev, s2_attn_kernel *k, const s2t_paged *pg, s2t_paged_dev *d,
                    s2_attn_decode_args *a, int splits, const double *ref_o, const float *ref_lse, double o_tol,
                    double o_err[2], double lse_err[2], int used[2])
{
    size_t qb = q_bytes(pg), ln = lse_count(pg);
    uint16_t *o = malloc(qb);
    float *lse = malloc(ln * sizeof(float));
    ck_assert(o && lse);
    bool ok = true;
    for (int run = 0; run < 2; run++) {
        a->splits = run == 0 ? 1 : splits;
        size_t wsb = 0;
        OK(ctx, s2_attn_decode_workspace(ctx, k, a, &wsb));
        s2_mem_free(ctx, dev, d->ws);
        d->ws = 0;
        if (wsb) {
            OK(ctx, s2_mem_alloc(ctx, dev, wsb, &d->ws));
            OK(ctx, s2_memset_d8(ctx, dev, d->ws, 0, wsb));   /* once: launches leave it zeroed */
        }
        a->workspace = d->ws;
        /* the split count in force: 1 needs no workspace */
        used[run] = run == 0 ? 1 : splits ? splits : (wsb ? -1 : 1);
        s2t_dev_poison(ctx, dev, d->o, qb);
        s2t_dev_poison(ctx, dev, d->lse, ln * sizeof(float));
        OK(ctx, s2_attn_decode(ctx, k, NULL, a));
        OK(ctx, s2_device_synchronize(ctx, dev));
        OK(ctx, s2_memcpy_d2h(ctx, dev, o, d->o, qb));
        OK(ctx, s2_memcpy_d2h(ctx, dev, lse, d->lse, ln * sizeof(float)));
        compare(pg, o, lse, ref_o, ref_lse, &o_err[run], &lse_err[run]);
        ok = ok && o_err[run] <= o_tol && lse_err[run] <= 2e-3;
    }
    free(o), free(lse);
    return ok;
}
