/* Paged decode over fp8 (e4m3) K/V pages on a real GPU against the float64
 * reference (s2_ref_decode_paged) run on the dequantized pages: the stored
 * e4m3 value times its kv head's scale, exactly in f64, so the kernel's only
 * errors are those of the 16-bit path and the tolerances are the bf16/f16
 * decode test's: relative Frobenius error of o per (token, head) row
 * <= 2e-2 (bf16) / 5e-3 (f16), |lse - ref| <= 2e-3.
 * Per case: GQA or MHA patterns, shared or per-kv-head block tables with
 * shuffled page ids, page sizes below / equal to / above the block size,
 * random sequence lengths (not multiples of the page size), 1 or several new
 * tokens, random k_scale / v_scale per kv head (one case with null scales:
 * 1.0), split 1 and several.  Pool bytes the pattern never reads hold the
 * e4m3 NaN 0xff (so reading one page too many shows); o and lse start as NaN.
 * Fresh seeds, printed (S2C_SEED=N repeats); S2C_DECODE_SMALL=1 runs two
 * small cases (for the sanitizer); S2C_DECODE_CASES=substring filters.
 * Needs sm_90 (e4m3 conversion); exits 77 without libcuda.so.1, a device,
 * or on an sm_80 device.  CUDA lives in this process, so Check does not fork. */
#include "../attn/patterns.h"
#include "s2c/attn_runtime.h"
#include "s2c/codegen.h"
#include "s2c/compile.h"
#include "s2c/decode.h"
#include "s2c/layout.h"
#include "s2c/ref.h"
#include "util.h"

#include <check.h>
#include "gpu_harness.h"
#include "poison.h"
#include "rand_pattern.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fp8_case {
    const char *name;
    const char *file;            /* stock pattern file (NULL: attn_pattern_args(args)) */
    int args;
    s2_dtype dt;                 /* q and o */
    int head_dim, batch, n_new, page_size;
    bool per_head;               /* per-kv-head block tables */
    bool scales;                 /* false: null k_scale / v_scale (1.0) */
    int64_t max_len;
    int splits;                  /* the second run's split count (0: heuristic) */
} fp8_case;

static const fp8_case cases[] = {
    {"gqa_phi3_bf16_d128_n1_p16_shared", "phi3-small.yaml", 0, S2_DTYPE_BF16, 128, 3, 1, 16, false, true, 3001, 5},
    {"gqa_phi3_bf16_d128_n4_p64_perhead", "phi3-small.yaml", 0, S2_DTYPE_BF16, 128, 2, 4, 64, true, true, 1000, 0},
    {"gqa32_8_f16_d128_n2_p48_perhead", NULL, 3, S2_DTYPE_F16, 128, 2, 2, 48, true, true, 700, 3},
    {"mha_s2l8v16_f16_d64_n1_p128", "s2-l8v16.yaml", 0, S2_DTYPE_F16, 64, 2, 1, 128, false, true, 2200, 4},
    {"dense2_bf16_d64_n2_p32_noscale", NULL, 4, S2_DTYPE_BF16, 64, 3, 2, 32, false, false, 700, 2},
    {"mergeq_b16_bf16_d80_n2_p16_perhead", "mergeq-b16.yaml", 0, S2_DTYPE_BF16, 80, 2, 2, 16, true, true, 800, 4},
    {"gqa32_8_bf16_d256_n2_p64_shared", NULL, 3, S2_DTYPE_BF16, 256, 2, 2, 64, false, true, 1300, 3},
    {"bidir_f16_d16_n2_p64", NULL, 2, S2_DTYPE_F16, 16, 2, 2, 64, false, true, 600, 2},
};
enum { NUM_CASES = sizeof cases / sizeof cases[0] };

static uint64_t base_seed;
static s2_arch dev_arch;
static bool small_only;
static const char *case_filter;

typedef struct result {
    bool ran, ok;
    double o_err[2], lse_err[2];
    int splits[2];
} result;
static result results[NUM_CASES];

#define OK(ctx, call) ck_assert_msg((call) == S2_OK, "%s: %s", #call, s2_ctx_message(ctx))

static bool ref_mask(const void *user, int q_head, int64_t qpos, int64_t kpos)
{
    return s2_token_kept((const s2_pattern *)user, q_head, qpos, kpos);
}

static s2_pattern_set *load_case_pattern(s2_ctx *ctx, const fp8_case *c, const s2_pattern **p)
{
    s2_pattern_set *set = NULL;
    if (c->file) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", getenv("S2C_PATTERNS"), c->file);
        OK(ctx, s2_pattern_load(ctx, path, &set));
        *p = s2_pattern_set_get(set, 0);
    } else {
        s2_local_stride_args a;
        attn_pattern_args(c->args, &a);
        OK(ctx, s2_pattern_from_args(ctx, &a, &set));
        *p = s2_pattern_set_get(set, 0);
    }
    ck_assert(*p != NULL);
    return set;
}

/* Does kv head g's group read key block n for sequence length len (n new tokens)? */
static bool block_needed(const s2_pattern *p, int g, int64_t len, int n_new, int64_t n)
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

typedef struct problem {
    int B, H, HK, D, N, P;
    int64_t max_pages, num_pages, table_hs, table_bs;
    int64_t *lens;
    int32_t *lens32, *table;
    uint8_t *kp, *vp;            /* e4m3 pools; 0xff (NaN) where nothing is read */
    double *kref, *vref;         /* the same pools dequantized (NaN where 0xff) */
    uint16_t *q;
    float k_scale[S2_MAX_HEADS], v_scale[S2_MAX_HEADS];
    size_t pool_elems;
} problem;

static void make_problem(problem *pr, const fp8_case *c, const s2_pattern *p, uint64_t *s)
{
    memset(pr, 0, sizeof *pr);
    pr->B = c->batch, pr->H = p->heads, pr->HK = p->kv_heads, pr->D = c->head_dim, pr->N = c->n_new, pr->P = c->page_size;
    pr->max_pages = s2_cdiv(c->max_len, c->page_size);
    int rows = c->per_head ? pr->B * pr->HK : pr->B;
    pr->table_hs = c->per_head ? pr->max_pages : 0;
    pr->table_bs = c->per_head ? pr->max_pages * pr->HK : pr->max_pages;
    pr->num_pages = rows * pr->max_pages + 5;
    pr->lens = calloc((size_t)pr->B, sizeof *pr->lens);
    pr->lens32 = calloc((size_t)pr->B, sizeof *pr->lens32);
    pr->table = calloc((size_t)(rows * pr->max_pages), sizeof *pr->table);
    for (int b = 0; b < pr->B; b++) {
        pr->lens[b] = b == 0 ? c->max_len : pr->N + (int64_t)(s2t_xorshift64(s) % (uint64_t)(c->max_len - pr->N + 1));
        pr->lens32[b] = (int32_t)pr->lens[b];
    }
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)pr->num_pages);
    for (int64_t i = 0; i < pr->num_pages; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = pr->num_pages - 1; i > 0; i--) {
        int64_t j = (int64_t)(s2t_xorshift64(s) % (uint64_t)(i + 1));
        int32_t x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    for (int64_t i = 0; i < rows * pr->max_pages; i++)
        pr->table[i] = perm[i];
    free(perm);
    /* scales in [0.02, 0.25]: stored values up to 16 give keys and values up to 4 */
    for (int g = 0; g < pr->HK; g++) {
        pr->k_scale[g] = c->scales ? (float)(0.02 + (double)(s2t_xorshift64(s) % 1001) / 1000.0 * 0.23) : 1.0f;
        pr->v_scale[g] = c->scales ? (float)(0.02 + (double)(s2t_xorshift64(s) % 1001) / 1000.0 * 0.23) : 1.0f;
    }
    double hi = c->scales ? 16.0 : 2.0;
    pr->pool_elems = (size_t)pr->num_pages * pr->P * pr->HK * pr->D;
    pr->kp = malloc(pr->pool_elems), pr->vp = malloc(pr->pool_elems);
    memset(pr->kp, 0xff, pr->pool_elems), memset(pr->vp, 0xff, pr->pool_elems);
    pr->kref = malloc(pr->pool_elems * sizeof(double)), pr->vref = malloc(pr->pool_elems * sizeof(double));
    for (size_t i = 0; i < pr->pool_elems; i++)
        pr->kref[i] = pr->vref[i] = NAN;
    pr->q = malloc((size_t)pr->B * pr->N * pr->H * pr->D * 2);
    s2_tensor tk = s2_tensor_bshd(pr->kp, S2_DTYPE_E4M3, pr->P, pr->HK, pr->D);
    s2_tensor tv = s2_tensor_bshd(pr->vp, S2_DTYPE_E4M3, pr->P, pr->HK, pr->D);
    s2_tensor rk = s2_tensor_bshd(pr->kref, S2_DTYPE_F64, pr->P, pr->HK, pr->D);
    s2_tensor rv = s2_tensor_bshd(pr->vref, S2_DTYPE_F64, pr->P, pr->HK, pr->D);
    s2_tensor tq = s2_tensor_bshd(pr->q, c->dt, pr->N, pr->H, pr->D);
    int64_t qe[4] = {pr->B, pr->N, pr->H, pr->D};
    s2_tensor_fill_random(&tq, qe, s2t_xorshift64(s), -2, 2);
    for (int b = 0; b < pr->B; b++)
        for (int g = 0; g < pr->HK; g++)
            for (int64_t j = 0; j < s2_cdiv(pr->lens[b], pr->P); j++) {
                int32_t page = pr->table[b * pr->table_bs + g * pr->table_hs + j];
                bool need = false;
                for (int64_t n = j * pr->P / p->block_size; n * p->block_size < (j + 1) * pr->P && !need; n++)
                    need = block_needed(p, g, pr->lens[b], pr->N, n);
                if (!need)
                    continue;
                for (int64_t slot = 0; slot < pr->P && j * pr->P + slot < pr->lens[b]; slot++)
                    for (int d = 0; d < pr->D; d++) {
                        /* uniform in [-hi, hi], rounded to e4m3 (subnormals included near 0) */
                        double x = ((double)(s2t_xorshift64(s) % 200001) - 100000) / 100000.0 * hi;
                        double y = ((double)(s2t_xorshift64(s) % 200001) - 100000) / 100000.0 * hi;
                        s2_tensor_set(&tk, page, slot, g, d, x);
                        s2_tensor_set(&tv, page, slot, g, d, y);
                        s2_tensor_set(&rk, page, slot, g, d, s2_tensor_get(&tk, page, slot, g, d) * (double)pr->k_scale[g]);
                        s2_tensor_set(&rv, page, slot, g, d, s2_tensor_get(&tv, page, slot, g, d) * (double)pr->v_scale[g]);
                    }
            }
}

static void free_problem(problem *pr)
{
    free(pr->lens), free(pr->lens32), free(pr->table), free(pr->kp), free(pr->vp), free(pr->kref), free(pr->vref);
    free(pr->q);
}

static s2_devptr upload(s2_ctx *ctx, s2_device *dev, const void *src, size_t bytes)
{
    s2_devptr d = 0;
    OK(ctx, s2_mem_alloc(ctx, dev, bytes, &d));
    OK(ctx, s2_memcpy_h2d(ctx, dev, d, src, bytes));
    return d;
}

/* Per (token, head) row: relative Frobenius error; lse absolute. */
static void compare(const problem *pr, s2_dtype dt, const uint16_t *o, const float *lse, const double *ref_o,
                    const float *ref_lse, double *o_err, double *lse_err)
{
    s2_tensor to = s2_tensor_bshd((void *)o, dt, pr->N, pr->H, pr->D);
    *o_err = 0;
    *lse_err = 0;
    for (int b = 0; b < pr->B; b++)
        for (int t = 0; t < pr->N; t++)
            for (int h = 0; h < pr->H; h++) {
                double num = 0, den = 0;
                for (int d = 0; d < pr->D; d++) {
                    double r = ref_o[(((int64_t)b * pr->N + t) * pr->H + h) * pr->D + d];
                    double g = s2_tensor_get(&to, b, t, h, d);
                    num += (g - r) * (g - r);
                    den += r * r;
                }
                double e = den > 0 ? sqrt(num / den) : sqrt(num);
                if (!(e <= *o_err))
                    *o_err = isnan(e) ? INFINITY : fmax(*o_err, e);
                int64_t li = ((int64_t)b * pr->H + h) * pr->N + t;
                double le = ref_lse[li] == -INFINITY ? (lse[li] == -INFINITY ? 0 : INFINITY) : fabs(lse[li] - ref_lse[li]);
                if (!(le <= *lse_err))
                    *lse_err = isnan(le) ? INFINITY : fmax(*lse_err, le);
            }
}

static void run_case(int ci)
{
    const fp8_case *c = &cases[ci];
    result *res = &results[ci];
    res->ran = true;
    uint64_t s = base_seed * 1000003u + (uint64_t)ci * 7919u + 11;
    s2_ctx *ctx = s2_ctx_new();
    const s2_pattern *p = NULL;
    s2_pattern_set *set = load_case_pattern(ctx, c, &p);
    s2_kernel_spec spec = {.kind = S2_KERNEL_DECODE, .dtype = c->dt, .head_dim = c->head_dim, .arch = dev_arch,
                           .kv_dtype = S2_DTYPE_E4M3};
    s2_artifact *art = NULL;
    ck_assert_msg(s2_compile_attention(ctx, p, &spec, S2_CUBIN_AUTO, &art) == S2_OK, "%s: %s", c->name,
                  s2_ctx_message(ctx));
    s2_device *dev = NULL;
    OK(ctx, s2_device_open(ctx, 0, &dev));
    s2_attn_kernel *k = NULL;
    OK(ctx, s2_attn_load(ctx, dev, art->cubin, art->cubin_size, p->name, c->dt, c->head_dim, &k));
    ck_assert_int_eq(s2_attn_kernel_desc(k)->spec.kv_dtype, S2_DTYPE_E4M3);

    problem pr;
    make_problem(&pr, c, p, &s);
    size_t q_bytes = (size_t)pr.B * pr.N * pr.H * pr.D * 2, lse_n = (size_t)pr.B * pr.H * pr.N;
    s2_devptr dq = upload(ctx, dev, pr.q, q_bytes), dk = upload(ctx, dev, pr.kp, pr.pool_elems);
    s2_devptr dv = upload(ctx, dev, pr.vp, pr.pool_elems);
    int rows = c->per_head ? pr.B * pr.HK : pr.B;
    s2_devptr dt = upload(ctx, dev, pr.table, (size_t)rows * pr.max_pages * sizeof(int32_t));
    s2_devptr dl = upload(ctx, dev, pr.lens32, (size_t)pr.B * sizeof(int32_t));
    s2_devptr dks = upload(ctx, dev, pr.k_scale, (size_t)pr.HK * sizeof(float));
    s2_devptr dvs = upload(ctx, dev, pr.v_scale, (size_t)pr.HK * sizeof(float));
    s2_devptr dout = 0, dlse = 0, ws = 0;
    OK(ctx, s2_mem_alloc(ctx, dev, q_bytes, &dout));
    OK(ctx, s2_mem_alloc(ctx, dev, lse_n * sizeof(float), &dlse));

    double *ref_o = malloc(sizeof(double) * q_bytes / 2);
    float *ref_lse = malloc(sizeof(float) * lse_n);
    const int64_t table_strides[3] = {pr.table_bs, pr.table_hs, 1};
    s2_ref_paged_problem rp = {.batch = pr.B, .heads = pr.H, .kv_heads = pr.HK, .head_dim = pr.D, .q_len = pr.N,
                               .kv_lens = pr.lens, .block_table = pr.table, .max_pages_per_seq = pr.max_pages,
                               .num_pages = pr.num_pages, .page_size = pr.P, .causal = p->causal, .mask = ref_mask,
                               .mask_user = p, .table_strides = table_strides};
    s2_tensor tq = s2_tensor_bshd(pr.q, c->dt, pr.N, pr.H, pr.D);
    s2_tensor tk = s2_tensor_bshd(pr.kref, S2_DTYPE_F64, pr.P, pr.HK, pr.D);
    s2_tensor tv = s2_tensor_bshd(pr.vref, S2_DTYPE_F64, pr.P, pr.HK, pr.D);
    s2_tensor tro = s2_tensor_bshd(ref_o, S2_DTYPE_F64, pr.N, pr.H, pr.D);
    OK(ctx, s2_ref_decode_paged(ctx, &rp, &tq, &tk, &tv, &tro, ref_lse));

    s2_attn_decode_args a = {.batch = pr.B, .n_new = pr.N, .heads = pr.H, .kv_heads = pr.HK, .head_dim = pr.D,
                             .dtype = c->dt, .q = dq, .o = dout, .lse = dlse, .k_pages = dk, .v_pages = dv,
                             .num_pages = pr.num_pages, .page_size = pr.P, .block_table = dt,
                             .table_stride = {pr.table_bs, pr.table_hs}, .max_pages_per_seq = pr.max_pages,
                             .seq_lens = dl, .max_seq_len = c->max_len, .kv_dtype = S2_DTYPE_E4M3,
                             .k_scale = c->scales ? dks : 0, .v_scale = c->scales ? dvs : 0};
    int64_t qs[3] = {(int64_t)pr.N * pr.H * pr.D, (int64_t)pr.H * pr.D, pr.D};
    int64_t ks[3] = {(int64_t)pr.P * pr.HK * pr.D, (int64_t)pr.HK * pr.D, pr.D};
    memcpy(a.q_stride, qs, sizeof qs), memcpy(a.o_stride, qs, sizeof qs);
    memcpy(a.k_stride, ks, sizeof ks), memcpy(a.v_stride, ks, sizeof ks);

    uint16_t *o = malloc(q_bytes);
    float *lse = malloc(lse_n * sizeof(float));
    bool ok = true;
    double tol = c->dt == S2_DTYPE_BF16 ? 2e-2 : 5e-3;
    for (int run = 0; run < 2; run++) {
        a.splits = run == 0 ? 1 : c->splits;
        size_t wsb = 0;
        OK(ctx, s2_attn_decode_workspace(ctx, k, &a, &wsb));
        s2_mem_free(ctx, dev, ws);
        ws = 0;
        if (wsb) {
            OK(ctx, s2_mem_alloc(ctx, dev, wsb, &ws));
            OK(ctx, s2_memset_d8(ctx, dev, ws, 0, wsb));
        }
        a.workspace = ws;
        res->splits[run] = run == 0 ? 1 : c->splits ? c->splits : (wsb ? -1 : 1);
        s2t_dev_poison(ctx, dev, dout, q_bytes);
        s2t_dev_poison(ctx, dev, dlse, lse_n * sizeof(float));
        OK(ctx, s2_attn_decode(ctx, k, NULL, &a));
        OK(ctx, s2_device_synchronize(ctx, dev));
        OK(ctx, s2_memcpy_d2h(ctx, dev, o, dout, q_bytes));
        OK(ctx, s2_memcpy_d2h(ctx, dev, lse, dlse, lse_n * sizeof(float)));
        compare(&pr, c->dt, o, lse, ref_o, ref_lse, &res->o_err[run], &res->lse_err[run]);
        ok = ok && res->o_err[run] <= tol && res->lse_err[run] <= 2e-3;
    }
    res->ok = ok;
    OK(ctx, s2_attn_decode_validate(ctx, k, NULL, &a));
    /* the same data as 16-bit pages: refused by the fp8 kernel */
    s2_attn_decode_args wrong = a;
    wrong.kv_dtype = 0;
    ck_assert_int_eq(s2_attn_decode(ctx, k, NULL, &wrong), S2_ERR_DTYPE);
    s2_mem_free(ctx, dev, ws);
    s2_devptr all[] = {dq, dk, dv, dt, dl, dks, dvs, dout, dlse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        s2_mem_free(ctx, dev, all[i]);
    free(o), free(lse), free(ref_o), free(ref_lse);
    free_problem(&pr);
    s2_attn_kernel_free(k);
    s2_device_free(dev);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
    ck_assert_msg(ok, "%s (seed %llu): o err %.3g / %.3g (tol %.0e), lse err %.3g / %.3g (tol 2e-3) (splits 1 / %d)",
                  c->name, (unsigned long long)base_seed, res->o_err[0], res->o_err[1], tol, res->lse_err[0],
                  res->lse_err[1], res->splits[1]);
}

START_TEST(decode_fp8_case)
{
    if (small_only && _i != 0 && _i != 4)
        return;
    if (case_filter && !strstr(cases[_i].name, case_filter))
        return;
    run_case(_i);
}
END_TEST

static void print_summary(void)
{
    printf("\n%-38s %9s %9s %9s %9s %6s %s\n", "case", "o_err s1", "lse s1", "o_err sN", "lse sN", "splits", "tol o/lse");
    for (int i = 0; i < NUM_CASES; i++) {
        const result *r = &results[i];
        if (!r->ran)
            continue;
        printf("%-38s %9.2e %9.2e %9.2e %9.2e %6d %.0e/2e-3 %s\n", cases[i].name, r->o_err[0], r->lse_err[0],
               r->o_err[1], r->lse_err[1], r->splits[1], cases[i].dt == S2_DTYPE_BF16 ? 2e-2 : 5e-3,
               r->ok ? "PASS" : "FAIL");
    }
}

int main(void)
{
    s2t_gpu g;
    int rc = s2t_gpu_start("compiling for", NULL, &g);
    if (rc != 0)
        return rc;
    if (g.arch == S2_ARCH_SM80) {
        printf("decode_fp8_gpu: e4m3 pages need sm_90 (this device compiles for sm_80): skipped\n");
        return 77;
    }
    dev_arch = g.arch;
    base_seed = g.seed;
    small_only = getenv("S2C_DECODE_SMALL") != NULL;
    case_filter = getenv("S2C_DECODE_CASES");

    Suite *s = suite_create("decode_fp8_gpu");
    TCase *tc = tcase_create("decode_fp8");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, decode_fp8_case, 0, NUM_CASES);
    suite_add_tcase(s, tc);
    int failed = s2t_run_nofork(s);
    print_summary();
    return failed ? 1 : 0;
}
