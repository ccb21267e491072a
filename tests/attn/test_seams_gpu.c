/* The multi-GPU seams on a real GPU: one pattern's keys split in two halves
 * by dist's s2_dist_split_keys, each half launched over its own schedule
 * (s2_attn_sched_new, s2_attn_forward_sched), the two (o, lse) merged by the
 * forward module's NAME_combine (s2_combine), must equal the single launch
 * (s2_attn_forward) to bf16 tolerance and the float64 reference; and each
 * half's backward over its schedule (s2_attn_backward_sched, given the full
 * forward's o, the merged lse and dO) must give the single backward's dK/dV
 * for its keys, zero for the others, and dq summing to the single one.
 * Every output is poisoned (NaN) before its launch, row padding included.
 * Exits 77 without a GPU. */
#include "compile_internal.h"
#include "dist.h"
#include "patterns.h"
#include "s2c/attn_runtime.h"
#include "s2c/codegen.h"
#include "s2c/layout.h"
#include "s2c/ref.h"
#include "s2c/runtime.h"

#include <check.h>
#include "gpu_harness.h"
#include "poison.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct seam_case {
    const char *name;
    int pattern;           /* attn_pattern_args index */
    int head_dim;
    int batch;
    int64_t q_len, kv_len;
} seam_case;

static const seam_case cases[] = {
    {"causal64_d128_b2", 0, 128, 2, 1024, 1024},
    {"mergeq16_d64_ragged", 1, 64, 1, 777, 777},
    {"gqa32_8_b32_d64_q300_kv700", 3, 64, 1, 300, 700},
};
enum { NUM_CASES = sizeof cases / sizeof cases[0] };

static s2_arch dev_arch;
static uint64_t base_seed;

static bool ref_mask(const void *user, int q_head, int64_t qpos, int64_t kpos)
{
    return s2_token_kept((const s2_pattern *)user, q_head, qpos, kpos);
}

#define OK(call) ck_assert_msg((call) == S2_OK, "%s: %s", #call, s2_ctx_message(ctx))

/* Relative Frobenius error of x against ref over the first rows of seq; NaNs counted in *bad. */
static double rel_err(const s2t_tensor *x, const s2_tensor *ref, int64_t seq_lo, int64_t seq_hi, int64_t *bad)
{
    double num = 0, den = 0;
    const int64_t *e = x->ext;
    for (int64_t b = 0; b < e[0]; b++)
        for (int64_t s = seq_lo; s < seq_hi; s++)
            for (int64_t h = 0; h < e[2]; h++)
                for (int64_t d = 0; d < e[3]; d++) {
                    double v = s2_tensor_get(&x->t, b, s, h, d), r = s2_tensor_get(ref, b, s, h, d);
                    if (isnan(v))
                        (*bad)++;
                    num += (v - r) * (v - r);
                    den += r * r;
                }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

typedef struct loaded {
    s2_artifact *art;
    s2_attn_module *mod;
    s2_attn_kernel *k;
} loaded;

static void load_kind(s2_ctx *ctx, s2_device *dev, const s2_pattern *p, s2_kernel_kind kind, int D, loaded *l)
{
    s2_kspec spec = {.kind = kind, .dtype = S2_DTYPE_BF16, .head_dim = D, .arch = dev_arch};
    OK(s2_compile_kspec1(ctx, p, &spec, S2_CUBIN_AUTO, &l->art));
    OK(s2_attn_module_load(ctx, dev, l->art->cubin, l->art->cubin_size, &l->mod));
    OK(s2_attn_find(ctx, l->mod, p->name, S2_DTYPE_BF16, D, &l->k));
}

static void unload(loaded *l)
{
    s2_attn_module_free(l->mod);
    s2_artifact_free(l->art);
}

/* The two halves of k's schedule of (SQ, SK): keys [0, cut) and [cut, SK). */
static void halves(s2_ctx *ctx, s2_attn_kernel *k, int64_t SQ, int64_t SK, s2_attn_sched *out[2], int64_t *cut)
{
    s2_schedule *whole = NULL, *part[2] = {0};
    OK(s2_attn_kernel_schedule(ctx, k, SQ, SK, &whole));
    int64_t bn = whole->geom.block_n, n = whole->offsets[(int64_t)whole->num_classes * whole->geom.q_tiles];
    *cut = whole->geom.kv_tiles / 2 * bn;
    OK(s2_dist_split_keys(ctx, whole, 0, *cut, &part[0]));
    OK(s2_dist_split_keys(ctx, whole, *cut, SK, &part[1]));
    int64_t n0 = part[0]->offsets[(int64_t)part[0]->num_classes * part[0]->geom.q_tiles];
    int64_t n1 = part[1]->offsets[(int64_t)part[1]->num_classes * part[1]->geom.q_tiles];
    ck_assert_msg(n0 > 0 && n1 > 0 && n0 + n1 == n, "halves of %lld entries: %lld + %lld", (long long)n,
                  (long long)n0, (long long)n1);
    for (int i = 0; i < 2; i++) {
        OK(s2_attn_sched_new(ctx, k, SQ, SK, part[i], &out[i]));
        s2_schedule_free(part[i]);
    }
    s2_schedule_free(whole);
}

static void fwd_args(s2_attn_fwd_args *a, const seam_case *c, const s2_pattern *p, const s2t_tensor *q,
                     const s2t_tensor *k, const s2t_tensor *v, const s2t_tensor *o, s2_devptr lse)
{
    *a = (s2_attn_fwd_args){.batch = c->batch, .q_len = c->q_len, .kv_len = c->kv_len, .heads = p->heads,
                            .kv_heads = p->kv_heads, .head_dim = c->head_dim, .dtype = S2_DTYPE_BF16, .q = q->dev,
                            .k = k->dev, .v = v->dev, .o = o->dev, .lse = lse};
    memcpy(a->q_stride, q->t.stride, sizeof a->q_stride);
    memcpy(a->k_stride, k->t.stride, sizeof a->k_stride);
    memcpy(a->v_stride, v->t.stride, sizeof a->v_stride);
    memcpy(a->o_stride, o->t.stride, sizeof a->o_stride);
}

static void run_case(int ci, bool backward)
{
    const seam_case *c = &cases[ci];
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args la;
    attn_pattern_args(c->pattern, &la);
    s2_pattern_set *set = NULL;
    OK(s2_pattern_from_args(ctx, &la, &set));
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    const int B = c->batch, H = p->heads, HK = p->kv_heads, D = c->head_dim;
    const int64_t SQ = c->q_len, SK = c->kv_len;
    const uint64_t seed = base_seed + (uint64_t)ci * 7919u;
    s2_device *dev = NULL;
    OK(s2_device_open(ctx, 0, &dev));
    loaded fw = {0};
    load_kind(ctx, dev, p, S2_KERNEL_FWD, D, &fw);

    s2t_tensor q, k, v, o[4];   /* o: full, half 0, half 1, merged */
    s2t_tensor_new(&q, S2_DTYPE_BF16, false, B, SQ, H, D, 0);
    s2t_tensor_new(&k, S2_DTYPE_BF16, false, B, SK, HK, D, 0);
    s2t_tensor_new(&v, S2_DTYPE_BF16, false, B, SK, HK, D, 0);
    s2_tensor_fill_random(&q.t, q.ext, seed, -1.5, 1.5);
    s2_tensor_fill_random(&k.t, k.ext, seed + 1, -1.5, 1.5);
    s2_tensor_fill_random(&v.t, v.ext, seed + 2, -1.0, 1.0);
    s2t_tensor_upload(ctx, dev, &q);
    s2t_tensor_upload(ctx, dev, &k);
    s2t_tensor_upload(ctx, dev, &v);
    size_t nlse = (size_t)B * H * SQ;
    s2_devptr lse[4];
    for (int i = 0; i < 4; i++) {
        s2t_tensor_new(&o[i], S2_DTYPE_BF16, false, B, SQ, H, D, 8);
        s2t_tensor_upload(ctx, dev, &o[i]);   /* poisoned */
        lse[i] = s2t_dev_alloc_poisoned(ctx, dev, nlse * 4);
    }
    s2_attn_fwd_args a;
    fwd_args(&a, c, p, &q, &k, &v, &o[0], lse[0]);
    OK(s2_attn_forward(ctx, fw.k, NULL, &a));
    s2_attn_sched *hs[2] = {0};
    int64_t cut = 0;
    halves(ctx, fw.k, SQ, SK, hs, &cut);
    for (int i = 0; i < 2; i++) {
        fwd_args(&a, c, p, &q, &k, &v, &o[1 + i], lse[1 + i]);
        OK(s2_attn_forward_sched(ctx, fw.k, NULL, &a, hs[i]));
    }
    s2_combine_args ca = {.n = 2, .batch = B, .heads = H, .head_dim = D, .seq = SQ, .dtype = S2_DTYPE_BF16,
                          .o_in = {o[1].dev, o[2].dev}, .lse_in = {lse[1], lse[2]}, .o = o[3].dev, .lse = lse[3]};
    memcpy(ca.in_stride, o[1].t.stride, sizeof ca.in_stride);
    memcpy(ca.o_stride, o[3].t.stride, sizeof ca.o_stride);
    OK(s2_combine(ctx, fw.k, NULL, &ca));
    OK(s2_device_synchronize(ctx, dev));
    float *hl[4];
    for (int i = 0; i < 4; i++) {
        s2t_tensor_download(ctx, dev, &o[i]);
        hl[i] = malloc(nlse * 4);
        ck_assert_ptr_nonnull(hl[i]);
        OK(s2_memcpy_d2h(ctx, dev, hl[i], lse[i], nlse * 4));
    }

    /* the float64 reference of the whole */
    double *ro = malloc((size_t)B * SQ * H * D * 8);
    float *rlse = malloc(nlse * 4);
    ck_assert(ro && rlse);
    s2_tensor tro = s2_tensor_bshd(ro, S2_DTYPE_F64, SQ, H, D);
    s2_ref_problem rp = {.batch = B, .heads = H, .kv_heads = HK, .head_dim = D, .q_len = SQ, .kv_len = SK,
                         .causal = p->causal, .mask = ref_mask, .mask_user = p};
    OK(s2_ref_forward(ctx, &rp, &q.t, &k.t, &v.t, &tro, rlse));
    int64_t bad = 0;
    double e_full = rel_err(&o[0], &tro, 0, SQ, &bad), e_merged = rel_err(&o[3], &tro, 0, SQ, &bad);
    /* merged against the single launch, through the 16-bit outputs */
    s2_tensor t_full = o[0].t;
    double e_vs = rel_err(&o[3], &t_full, 0, SQ, &bad), lse_err = 0;
    int64_t lse_bad = 0, half_empty = 0;
    for (size_t i = 0; i < nlse; i++) {
        if (isinf(rlse[i]) || isinf(hl[3][i]) || isnan(hl[3][i])) {
            lse_bad += !(isinf(rlse[i]) && isinf(hl[3][i]) && hl[3][i] < 0 && isinf(hl[0][i]));
            continue;
        }
        double d1 = fabs(hl[3][i] - rlse[i]), d2 = fabs(hl[3][i] - hl[0][i]);
        lse_err = fmax(lse_err, fmax(d1, d2));
        half_empty += isinf(hl[1][i]) || isinf(hl[2][i]);
    }
    for (int i = 0; i < 4; i++)
        bad += s2t_tensor_pad_written(&o[i]);
    printf("%-28s fwd: cut %lld, err full %.2e merged %.2e merged/full %.2e, lse %.2e, rows with an empty half %lld\n",
           c->name, (long long)cut, e_full, e_merged, e_vs, lse_err, (long long)half_empty);
    ck_assert_msg(bad == 0, "%s: %lld NaN or padding elements written", c->name, (long long)bad);
    ck_assert_msg(lse_bad == 0, "%s: %lld rows' lse -inf in one of reference and merged only", c->name,
                  (long long)lse_bad);
    ck_assert_msg(e_full <= 2e-2 && e_merged <= 2e-2 && e_vs <= 2e-2 && lse_err <= 2e-3,
                  "%s: errors %.2e %.2e %.2e lse %.2e", c->name, e_full, e_merged, e_vs, lse_err);
    /* the halves differ from the whole: each saw part of the keys */
    ck_assert(rel_err(&o[1], &tro, 0, SQ, &bad) > 5e-2 && rel_err(&o[2], &tro, 0, SQ, &bad) > 5e-2);

    if (backward) {
        loaded bw = {0};
        load_kind(ctx, dev, p, S2_KERNEL_BWD, D, &bw);
        s2t_tensor dO, g[3][3];   /* [full, half 0, half 1][dq, dk, dv] */
        s2t_tensor_new(&dO, S2_DTYPE_BF16, false, B, SQ, H, D, 0);
        s2_tensor_fill_random(&dO.t, dO.ext, seed + 3, -1.0, 1.0);
        s2t_tensor_upload(ctx, dev, &dO);
        s2_devptr ws = 0;
        size_t ws_bytes = s2_attn_bwd_workspace_bytes(B, H, SQ);
        OK(s2_mem_alloc(ctx, dev, ws_bytes, &ws));
        s2_attn_sched *bs[2] = {0};
        int64_t bcut = 0;
        halves(ctx, bw.k, SQ, SK, bs, &bcut);
        for (int r = 0; r < 3; r++) {
            s2t_tensor_new(&g[r][0], S2_DTYPE_BF16, false, B, SQ, H, D, 8);
            s2t_tensor_new(&g[r][1], S2_DTYPE_BF16, false, B, SK, HK, D, 8);
            s2t_tensor_new(&g[r][2], S2_DTYPE_BF16, false, B, SK, HK, D, 8);
            for (int j = 0; j < 3; j++)
                s2t_tensor_upload(ctx, dev, &g[r][j]);   /* poisoned */
            s2_attn_bwd_args ba = {.batch = B, .q_len = SQ, .kv_len = SK, .heads = H, .kv_heads = HK, .head_dim = D,
                                   .dtype = S2_DTYPE_BF16, .q = q.dev, .k = k.dev, .v = v.dev, .o = o[0].dev,
                                   .d_o = dO.dev, .lse = lse[3], .dq = g[r][0].dev, .dk = g[r][1].dev,
                                   .dv = g[r][2].dev, .workspace = ws, .workspace_bytes = ws_bytes};
            const s2t_tensor *ts8[8] = {&q, &k, &v, &o[0], &dO, &g[r][0], &g[r][1], &g[r][2]};
            int64_t *dst8[8] = {ba.q_stride, ba.k_stride, ba.v_stride, ba.o_stride, ba.do_stride, ba.dq_stride,
                                ba.dk_stride, ba.dv_stride};
            for (int i = 0; i < 8; i++)
                memcpy(dst8[i], ts8[i]->t.stride, 3 * sizeof(int64_t));
            if (r == 0)
                OK(s2_attn_backward(ctx, bw.k, NULL, &ba));
            else
                OK(s2_attn_backward_sched(ctx, bw.k, NULL, &ba, bs[r - 1]));
            OK(s2_device_synchronize(ctx, dev));
            for (int j = 0; j < 3; j++)
                s2t_tensor_download(ctx, dev, &g[r][j]);
        }
        /* the float64 reference from the full forward's o and the merged lse */
        double *rq = malloc((size_t)B * SQ * H * D * 8), *rk = malloc((size_t)B * SK * HK * D * 8),
               *rv = malloc((size_t)B * SK * HK * D * 8);
        ck_assert(rq && rk && rv);
        s2_tensor tq = s2_tensor_bshd(rq, S2_DTYPE_F64, SQ, H, D), tk = s2_tensor_bshd(rk, S2_DTYPE_F64, SK, HK, D),
                  tv = s2_tensor_bshd(rv, S2_DTYPE_F64, SK, HK, D);
        OK(s2_ref_backward(ctx, &rp, &q.t, &k.t, &v.t, &o[0].t, &dO.t, hl[3], NULL, &tq, &tk, &tv));
        int64_t bbad = 0, nonzero = 0;
        double ek[2], ev[2], fk, fv, sk[2], sv[2];
        fk = rel_err(&g[0][1], &tk, 0, SK, &bbad);
        fv = rel_err(&g[0][2], &tv, 0, SK, &bbad);
        for (int h = 0; h < 2; h++) {
            int64_t lo = h ? bcut : 0, hi = h ? SK : bcut;
            s2_tensor full_k = g[0][1].t, full_v = g[0][2].t;
            ek[h] = rel_err(&g[1 + h][1], &tk, lo, hi, &bbad);
            ev[h] = rel_err(&g[1 + h][2], &tv, lo, hi, &bbad);
            sk[h] = rel_err(&g[1 + h][1], &full_k, lo, hi, &bbad);
            sv[h] = rel_err(&g[1 + h][2], &full_v, lo, hi, &bbad);
            /* the other half's keys: no query visits them, dk = dv = 0 */
            for (int64_t b = 0; b < B; b++)
                for (int64_t s = h ? 0 : bcut; s < (h ? bcut : SK); s++)
                    for (int64_t kh = 0; kh < HK; kh++)
                        for (int64_t d = 0; d < D; d++)
                            nonzero += s2_tensor_get(&g[1 + h][1].t, b, s, kh, d) != 0.0 ||
                                       s2_tensor_get(&g[1 + h][2].t, b, s, kh, d) != 0.0;
        }
        /* dq of the halves sums to the whole's */
        double num = 0, den = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t s = 0; s < SQ; s++)
                for (int64_t hh = 0; hh < H; hh++)
                    for (int64_t d = 0; d < D; d++) {
                        double x = s2_tensor_get(&g[1][0].t, b, s, hh, d) + s2_tensor_get(&g[2][0].t, b, s, hh, d);
                        double r = s2_tensor_get(&tq, b, s, hh, d);
                        num += (x - r) * (x - r), den += r * r;
                    }
        double eq = den > 0 ? sqrt(num / den) : sqrt(num);
        for (int r = 0; r < 3; r++)
            for (int j = 0; j < 3; j++)
                bbad += s2t_tensor_pad_written(&g[r][j]);
        printf("%-28s bwd: cut %lld, full dk %.2e dv %.2e; halves dk %.2e %.2e dv %.2e %.2e (vs full dk %.2e %.2e "
               "dv %.2e %.2e), dq sum %.2e\n",
               c->name, (long long)bcut, fk, fv, ek[0], ek[1], ev[0], ev[1], sk[0], sk[1], sv[0], sv[1], eq);
        ck_assert_msg(bbad == 0, "%s: %lld NaN or padding elements written", c->name, (long long)bbad);
        ck_assert_msg(nonzero == 0, "%s: %lld dk/dv elements of the other half's keys not zero", c->name,
                      (long long)nonzero);
        double tol = 2e-2;
        ck_assert(fk <= tol && fv <= tol && eq <= tol);
        for (int h = 0; h < 2; h++)
            ck_assert_msg(ek[h] <= tol && ev[h] <= tol && sk[h] <= tol && sv[h] <= tol, "%s: half %d", c->name, h);
        for (int i = 0; i < 2; i++)
            s2_attn_sched_free(bs[i]);
        for (int r = 0; r < 3; r++)
            for (int j = 0; j < 3; j++)
                s2t_tensor_free(ctx, dev, &g[r][j]);
        s2t_tensor_free(ctx, dev, &dO);
        s2_mem_free(ctx, dev, ws);
        free(rq), free(rk), free(rv);
        unload(&bw);
    }
    for (int i = 0; i < 2; i++)
        s2_attn_sched_free(hs[i]);
    for (int i = 0; i < 4; i++) {
        s2t_tensor_free(ctx, dev, &o[i]);
        s2_mem_free(ctx, dev, lse[i]);
        free(hl[i]);
    }
    s2t_tensor_free(ctx, dev, &q);
    s2t_tensor_free(ctx, dev, &k);
    s2t_tensor_free(ctx, dev, &v);
    free(ro), free(rlse);
    unload(&fw);
    s2_device_free(dev);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}

START_TEST(forward_halves_merge)
{
    run_case(_i, false);
}
END_TEST

START_TEST(backward_halves)
{
    run_case(_i, true);
}
END_TEST

int main(void)
{
    s2t_gpu g;
    int rc = s2t_gpu_start("compiling for", NULL, &g);
    if (rc != 0)
        return rc;
    if (g.load_ptx)
        return 77;   /* the runtime loads cubins only */
    dev_arch = g.arch;
    base_seed = g.seed;
    Suite *s = suite_create("seams_gpu");
    TCase *tc = tcase_create("seams");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, forward_halves_merge, 0, NUM_CASES);
    tcase_add_loop_test(tc, backward_halves, 0, NUM_CASES);
    suite_add_tcase(s, tc);
    return s2t_run_nofork(s) ? 1 : 0;
}
