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
#include "paged_case.h"
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

static s2_pattern_set *load_case_pattern(s2_ctx *ctx, const fp8_case *c, const s2_pattern **p)
{
    return s2t_paged_pattern(ctx, c->file, NULL, c->args, p);
}

typedef struct problem {
    s2t_paged pg;                /* lengths, tables, q */
    uint8_t *kp, *vp;            /* e4m3 pools; 0xff (NaN) where nothing is read */
    double *kref, *vref;         /* the same pools dequantized (NaN where 0xff) */
    float k_scale[S2_MAX_HEADS], v_scale[S2_MAX_HEADS];
    size_t pool_elems;
} problem;

static void make_problem(problem *pr, const fp8_case *c, const s2_pattern *p, uint64_t *s)
{
    memset(pr, 0, sizeof *pr);
    s2t_paged *pg = &pr->pg;
    s2t_paged_init(pg, p, c->dt, c->head_dim, c->batch, c->n_new, c->page_size, c->per_head, c->max_len, 5, s);
    /* scales in [0.02, 0.25]: stored values up to 16 give keys and values up to 4 */
    for (int g = 0; g < pg->HK; g++) {
        pr->k_scale[g] = c->scales ? (float)(0.02 + (double)(s2t_xorshift64(s) % 1001) / 1000.0 * 0.23) : 1.0f;
        pr->v_scale[g] = c->scales ? (float)(0.02 + (double)(s2t_xorshift64(s) % 1001) / 1000.0 * 0.23) : 1.0f;
    }
    double hi = c->scales ? 16.0 : 2.0;
    pr->pool_elems = (size_t)pg->num_pages * pg->P * pg->HK * pg->D;
    pr->kp = malloc(pr->pool_elems), pr->vp = malloc(pr->pool_elems);
    pr->kref = malloc(pr->pool_elems * sizeof(double)), pr->vref = malloc(pr->pool_elems * sizeof(double));
    ck_assert(pr->kp && pr->vp && pr->kref && pr->vref);
    memset(pr->kp, 0xff, pr->pool_elems), memset(pr->vp, 0xff, pr->pool_elems);
    for (size_t i = 0; i < pr->pool_elems; i++)
        pr->kref[i] = pr->vref[i] = NAN;
    s2_tensor tk = s2_tensor_bshd(pr->kp, S2_DTYPE_E4M3, pg->P, pg->HK, pg->D);
    s2_tensor tv = s2_tensor_bshd(pr->vp, S2_DTYPE_E4M3, pg->P, pg->HK, pg->D);
    s2_tensor rk = s2_tensor_bshd(pr->kref, S2_DTYPE_F64, pg->P, pg->HK, pg->D);
    s2_tensor rv = s2_tensor_bshd(pr->vref, S2_DTYPE_F64, pg->P, pg->HK, pg->D);
    for (int b = 0; b < pg->B; b++)
        for (int g = 0; g < pg->HK; g++)
            for (int64_t j = 0; j < s2_cdiv(pg->lens[b], pg->P); j++) {
                if (!s2t_paged_slice_read(pg, p, b, g, j))
                    continue;
                int32_t page = s2t_paged_page(pg, b, g, j);
                for (int64_t slot = 0; slot < pg->P && j * pg->P + slot < pg->lens[b]; slot++)
                    for (int d = 0; d < pg->D; d++) {
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
    s2t_paged_free(&pr->pg);
    free(pr->kp), free(pr->vp), free(pr->kref), free(pr->vref);
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
    s2t_paged_dev d;
    s2_attn_decode_args a;
    s2t_paged_upload(ctx, dev, &pr.pg, pr.kp, pr.vp, pr.pool_elems, &d, &a);
    s2_devptr dks = s2t_upload(ctx, dev, pr.k_scale, (size_t)pr.pg.HK * sizeof(float));
    s2_devptr dvs = s2t_upload(ctx, dev, pr.v_scale, (size_t)pr.pg.HK * sizeof(float));
    a.kv_dtype = S2_DTYPE_E4M3;
    a.k_scale = c->scales ? dks : 0;
    a.v_scale = c->scales ? dvs : 0;
    s2_tensor tk = s2_tensor_bshd(pr.kref, S2_DTYPE_F64, pr.pg.P, pr.pg.HK, pr.pg.D);
    s2_tensor tv = s2_tensor_bshd(pr.vref, S2_DTYPE_F64, pr.pg.P, pr.pg.HK, pr.pg.D);
    double *ref_o;
    float *ref_lse;
    s2t_paged_reference(ctx, &pr.pg, p, &tk, &tv, &ref_o, &ref_lse);
    double tol = c->dt == S2_DTYPE_BF16 ? 2e-2 : 5e-3;
    bool ok = s2t_paged_runs(ctx, dev, k, &pr.pg, &d, &a, c->splits, ref_o, ref_lse, tol, res->o_err, res->lse_err,
                             res->splits);
    res->ok = ok;
    OK(ctx, s2_attn_decode_validate(ctx, k, NULL, &a));
    /* the same data as 16-bit pages: refused by the fp8 kernel */
    s2_attn_decode_args wrong = a;
    wrong.kv_dtype = 0;
    ck_assert_int_eq(s2_attn_decode(ctx, k, NULL, &wrong), S2_ERR_DTYPE);
    s2t_paged_dev_free(ctx, dev, &d);
    s2_mem_free(ctx, dev, dks), s2_mem_free(ctx, dev, dvs);
    free(ref_o), free(ref_lse);
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
