/* Paged decode and s2_combine on a real GPU against the float64 reference
 * (s2_ref_decode_paged, s2_ref_combine).  Per case: a pattern (stock files
 * and the shared test patterns: MHA, GQA, dense heads, ranges, block 16..128,
 * bidirectional), page size below / equal to / above the block size (and one
 * not a power of two), shared (vLLM) or per-kv-head block tables with shuffled
 * page ids, 1 or several new tokens, random sequence lengths, split 1 and
 * several.  The pools are poisoned with NaN wherever the pattern reads nothing
 * (every (page, kv head) slice holding no kept key, and slots past seq_len),
 * so reading one page too many shows; o and lse start as NaN.
 * Tolerances: relative Frobenius error of o <= 2e-2 (bf16) / 5e-3 (f16), per
 * row (token, head); |lse - ref| <= 2e-3.  Fresh seeds, printed (S2C_SEED=N
 * repeats); S2C_DECODE_SMALL=1 runs two small cases only (for the sanitizer),
 * S2C_DECODE_CASES=substring the cases whose name contains it (hd: the head
 * dims beyond 32/64/96/128, every multiple of 16 to 256);
 * S2C_DECODE_WARPS / S2C_DECODE_STAGES override the spec's tunables.
 * Every case also runs the checked mode (S2C_CHECK_DECODE) on its data and
 * on one poisoned table entry.  Exits 77 without libcuda.so.1 or a device;
 * CUDA lives in this process, so Check does not fork. */
#include "../attn/patterns.h"
#include "s2c/compile.h"
#include "s2c/attn_runtime.h"
#include "s2c/codegen.h"
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

typedef struct dec_case {
    const char *name;
    const char *file;            /* stock pattern file (NULL: attn_pattern_args(args)) */
    const char *pattern;         /* name inside the file (NULL: first) */
    int args;
    s2_dtype dt;
    int head_dim, batch, n_new, page_size;
    bool per_head;               /* per-kv-head block tables */
    int64_t max_len;
    int splits;                  /* the second run's split count (0: heuristic) */
} dec_case;

static const dec_case cases[] = {
    {"mha_s2l8v16_p16_shared", "s2-l8v16.yaml", NULL, 0, S2_DTYPE_BF16, 128, 3, 1, 16, false, 3000, 7},
    {"gqa_phi3_n4_p64_perhead", "phi3-small.yaml", NULL, 0, S2_DTYPE_BF16, 128, 2, 4, 64, true, 2500, 0},
    {"hhst_ranges_f16_d64_n2_p256", "hhst-mixed.yaml", "sparse-layer", 0, S2_DTYPE_F16, 64, 2, 2, 256, false, 2200, 5},
    {"hhst_dense_layer_n1_p32", "hhst-mixed.yaml", "dense-layer", 0, S2_DTYPE_BF16, 128, 2, 1, 32, true, 1200, 3},
    {"mergeq_b16_n3_p32_perhead", "mergeq-b16.yaml", NULL, 0, S2_DTYPE_BF16, 64, 2, 3, 32, true, 1500, 4},
    {"dense_p128_n1", "dense.yaml", NULL, 0, S2_DTYPE_F16, 128, 2, 1, 128, false, 900, 0},
    {"gqa32_8_b32_f16_n2_p16_perhead", NULL, NULL, 3, S2_DTYPE_F16, 128, 2, 2, 16, true, 1000, 3},
    {"dense2_b32_n2_p48", NULL, NULL, 4, S2_DTYPE_BF16, 64, 3, 2, 48, false, 700, 2},
    {"bidir_b64_n2_p64", NULL, NULL, 2, S2_DTYPE_BF16, 64, 2, 2, 64, false, 600, 3},
    {"empty_rows_b16_d32_n1_p16", NULL, NULL, 5, S2_DTYPE_BF16, 32, 2, 1, 16, true, 400, 2},
    {"b128_d96_f16_n5_p80", NULL, NULL, 6, S2_DTYPE_F16, 96, 2, 5, 80, true, 1300, 4},
    {"sliding_long_b1", "sliding-window.yaml", NULL, 0, S2_DTYPE_BF16, 128, 1, 1, 16, false, 20000, 0},
    /* head dims past the mma tile's 32 (a 16-wide last k-step), d144+ (Q read from shared memory, 2 warps) */
    {"hd16_gqa32_8_f16_n2_p16_perhead", NULL, NULL, 3, S2_DTYPE_F16, 16, 2, 2, 16, true, 1200, 3},
    {"hd16_phi3_bf16_n1_p64", "phi3-small.yaml", NULL, 0, S2_DTYPE_BF16, 16, 2, 1, 64, false, 1500, 4},
    {"hd48_dense2_f16_n3_p32", NULL, NULL, 4, S2_DTYPE_F16, 48, 2, 3, 32, false, 900, 2},
    {"hd80_phi3_bf16_n4_p32_perhead", "phi3-small.yaml", NULL, 0, S2_DTYPE_BF16, 80, 2, 4, 32, true, 2000, 5},
    {"hd80_gqa32_8_f16_n1_p48", NULL, NULL, 3, S2_DTYPE_F16, 80, 3, 1, 48, false, 1000, 0},
    {"hd144_mergeq_b16_bf16_n2_p16", "mergeq-b16.yaml", NULL, 0, S2_DTYPE_BF16, 144, 2, 2, 16, true, 1100, 3},
    {"hd192_gqa32_8_bf16_n3_p16_perhead", NULL, NULL, 3, S2_DTYPE_BF16, 192, 2, 3, 16, true, 1500, 4},
    {"hd192_dense2_f16_n2_p64", NULL, NULL, 4, S2_DTYPE_F16, 192, 2, 2, 64, false, 900, 3},
    {"hd240_bidir_f16_n2_p64", NULL, NULL, 2, S2_DTYPE_F16, 240, 2, 2, 64, false, 600, 2},
    {"hd256_phi3_f16_n2_p64_perhead", "phi3-small.yaml", NULL, 0, S2_DTYPE_F16, 256, 2, 2, 64, true, 2500, 6},
    {"hd256_gqa32_8_bf16_n1_p128", NULL, NULL, 3, S2_DTYPE_BF16, 256, 2, 1, 128, false, 1300, 0},
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
    int64_t pages, poisoned;
} result;
static result results[NUM_CASES];

/* spec overrides (0: the heuristic), so other tunables can be verified too */
static int env_int(const char *name)
{
    const char *v = getenv(name);
    return v ? atoi(v) : 0;
}

#define OK(ctx, call) ck_assert_msg((call) == S2_OK, "%s: %s", #call, s2_ctx_message(ctx))

static s2_pattern_set *load_case_pattern(s2_ctx *ctx, const dec_case *c, const s2_pattern **p)
{
    return s2t_paged_pattern(ctx, c->file, c->pattern, c->args, p);
}

typedef struct problem {
    s2t_paged pg;                /* lengths, tables, q */
    uint16_t *kp, *vp;           /* the pools */
    size_t pool_elems;
    int64_t poisoned;
} problem;

/* The paged layout (paged_case.h), pools random where read and NaN elsewhere. */
static void make_problem(problem *pr, const dec_case *c, const s2_pattern *p, uint64_t *s)
{
    memset(pr, 0, sizeof *pr);
    s2t_paged *pg = &pr->pg;
    s2t_paged_init(pg, p, c->dt, c->head_dim, c->batch, c->n_new, c->page_size, c->per_head, c->max_len, 7, s);
    pr->pool_elems = (size_t)pg->num_pages * pg->P * pg->HK * pg->D;
    pr->kp = s2t_alloc_poisoned(pr->pool_elems * 2);
    pr->vp = s2t_alloc_poisoned(pr->pool_elems * 2);
    s2_tensor tk = s2_tensor_bshd(pr->kp, c->dt, pg->P, pg->HK, pg->D), tv = s2_tensor_bshd(pr->vp, c->dt, pg->P, pg->HK, pg->D);
    int64_t total = 0, live = 0;
    for (int b = 0; b < pg->B; b++)
        for (int g = 0; g < pg->HK; g++)
            for (int64_t j = 0; j < s2_cdiv(pg->lens[b], pg->P); j++) {
                total++;
                /* the page slice is filled only when a kept block overlaps it */
                if (!s2t_paged_slice_read(pg, p, b, g, j))
                    continue;
                live++;
                int32_t page = s2t_paged_page(pg, b, g, j);
                for (int64_t slot = 0; slot < pg->P && j * pg->P + slot < pg->lens[b]; slot++)
                    for (int d = 0; d < pg->D; d++) {
                        s2_tensor_set(&tk, page, slot, g, d, ((double)(s2t_xorshift64(s) % 4001) - 2000) / 1000.0);
                        s2_tensor_set(&tv, page, slot, g, d, ((double)(s2t_xorshift64(s) % 2001) - 1000) / 1000.0);
                    }
            }
    pr->poisoned = total - live;
}

static void free_problem(problem *pr)
{
    s2t_paged_free(&pr->pg);
    free(pr->kp), free(pr->vp);
}

/* The checked mode on the case's real data: it passes; then one table entry
 * the kernel reads (the first chunk of the last needed block of the last
 * sequence's last kv head) is poisoned with -1, and both
 * s2_attn_decode_validate and, with S2C_CHECK_DECODE=1 at load,
 * s2_attn_decode report it by index and launch nothing; the context stays
 * usable (no fault). */
static void check_poisoned_table(s2_ctx *ctx, s2_device *dev, s2_attn_kernel *k, const s2_artifact *art,
                                 const dec_case *c, const s2_pattern *p, const s2t_paged *pg,
                                 const s2_attn_decode_args *a)
{
    OK(ctx, s2_attn_decode_validate(ctx, k, NULL, a));
    int b = pg->B - 1, g = pg->HK - 1;
    int64_t len = pg->lens[b], n = s2_cdiv(len, p->block_size) - 1;
    while (n >= 0 && !s2t_block_needed(p, g, len, pg->N, n))
        n--;
    ck_assert_msg(n >= 0, "%s: no block needed", c->name);
    int64_t at = b * pg->table_bs + g * pg->table_hs + n * p->block_size / pg->P;
    int32_t bad = -1, good = pg->table[at];
    OK(ctx, s2_memcpy_h2d(ctx, dev, a->block_table + (s2_devptr)at * 4, &bad, 4));
    char needle[64];
    snprintf(needle, sizeof needle, "block_table entry %lld ", (long long)at);
    ck_assert_int_eq(s2_attn_decode_validate(ctx, k, NULL, a), S2_ERR_DEVICE_DATA);
    ck_assert_msg(strstr(s2_ctx_message(ctx), needle), "%s: '%s' lacks '%s'", c->name, s2_ctx_message(ctx), needle);
    ck_assert_int_eq(setenv("S2C_CHECK_DECODE", "1", 1), 0);
    s2_attn_kernel *kc = NULL;
    OK(ctx, s2_attn_load(ctx, dev, art->cubin, art->cubin_size, p->name, c->dt, c->head_dim, &kc));
    ck_assert_int_eq(unsetenv("S2C_CHECK_DECODE"), 0);
    ck_assert_int_eq(s2_attn_decode(ctx, kc, NULL, a), S2_ERR_DEVICE_DATA);
    ck_assert_msg(strstr(s2_ctx_message(ctx), needle), "%s: '%s' lacks '%s'", c->name, s2_ctx_message(ctx), needle);
    OK(ctx, s2_device_synchronize(ctx, dev));
    OK(ctx, s2_memcpy_h2d(ctx, dev, a->block_table + (s2_devptr)at * 4, &good, 4));
    OK(ctx, s2_attn_decode(ctx, kc, NULL, a));
    OK(ctx, s2_device_synchronize(ctx, dev));
    s2_attn_kernel_free(kc);
}

static void run_case(int ci)
{
    const dec_case *c = &cases[ci];
    result *res = &results[ci];
    res->ran = true;
    uint64_t s = base_seed * 1000003u + (uint64_t)ci * 7919u + 1;
    s2_ctx *ctx = s2_ctx_new();
    const s2_pattern *p = NULL;
    s2_pattern_set *set = load_case_pattern(ctx, c, &p);
    s2_kernel_spec spec = {.kind = S2_KERNEL_DECODE, .dtype = c->dt, .head_dim = c->head_dim, .arch = dev_arch,
                           .num_warps = env_int("S2C_DECODE_WARPS"), .num_stages = env_int("S2C_DECODE_STAGES")};
    s2_artifact *art = NULL;
    ck_assert_msg(s2_compile_attention(ctx, p, &spec, S2_CUBIN_AUTO, &art) == S2_OK, "%s: %s", c->name,
                  s2_ctx_message(ctx));
    s2_device *dev = NULL;
    OK(ctx, s2_device_open(ctx, 0, &dev));
    s2_attn_kernel *k = NULL;
    OK(ctx, s2_attn_load(ctx, dev, art->cubin, art->cubin_size, p->name, c->dt, c->head_dim, &k));

    problem pr;
    make_problem(&pr, c, p, &s);
    res->pages = pr.pg.num_pages;
    res->poisoned = pr.poisoned;
    s2t_paged_dev d;
    s2_attn_decode_args a;
    s2t_paged_upload(ctx, dev, &pr.pg, pr.kp, pr.vp, pr.pool_elems * 2, &d, &a);
    s2_tensor tk = s2_tensor_bshd(pr.kp, c->dt, pr.pg.P, pr.pg.HK, pr.pg.D);
    s2_tensor tv = s2_tensor_bshd(pr.vp, c->dt, pr.pg.P, pr.pg.HK, pr.pg.D);
    double *ref_o;
    float *ref_lse;
    s2t_paged_reference(ctx, &pr.pg, p, &tk, &tv, &ref_o, &ref_lse);
    bool ok = s2t_paged_runs(ctx, dev, k, &pr.pg, &d, &a, c->splits, ref_o, ref_lse,
                             c->dt == S2_DTYPE_BF16 ? 2e-2 : 5e-3, res->o_err, res->lse_err, res->splits);
    res->ok = ok;
    check_poisoned_table(ctx, dev, k, art, c, p, &pr.pg, &a);
    s2t_paged_dev_free(ctx, dev, &d);
    free(ref_o), free(ref_lse);
    free_problem(&pr);
    s2_attn_kernel_free(k);
    s2_device_free(dev);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
    ck_assert_msg(ok, "%s (seed %llu): o err %.3g / %.3g, lse err %.3g / %.3g (splits 1 / %d)", c->name,
                  (unsigned long long)base_seed, res->o_err[0], res->o_err[1], res->lse_err[0], res->lse_err[1],
                  res->splits[1]);
}

START_TEST(decode_case)
{
    if (small_only && _i != 0 && _i != 6)
        return;
    if (case_filter && !strstr(cases[_i].name, case_filter))
        return;
    run_case(_i);
}
END_TEST

/* Argument checks on real memory: each refused with its status, nothing launched. */
START_TEST(decode_checks)
{
    s2_ctx *ctx = s2_ctx_new();
    const dec_case *c = &cases[6];
    const s2_pattern *p = NULL;
    s2_pattern_set *set = load_case_pattern(ctx, c, &p);
    s2_kernel_spec spec = {.kind = S2_KERNEL_DECODE, .dtype = c->dt, .head_dim = c->head_dim, .arch = dev_arch};
    s2_artifact *art = NULL;
    OK(ctx, s2_compile_attention(ctx, p, &spec, S2_CUBIN_AUTO, &art));
    s2_device *dev = NULL;
    OK(ctx, s2_device_open(ctx, 0, &dev));
    s2_attn_kernel *k = NULL;
    OK(ctx, s2_attn_load(ctx, dev, art->cubin, art->cubin_size, p->name, c->dt, c->head_dim, &k));
    s2_devptr buf = 0;
    OK(ctx, s2_mem_alloc(ctx, dev, 1 << 20, &buf));
    s2_attn_decode_args a0 = {.batch = 1, .n_new = 1, .heads = p->heads, .kv_heads = p->kv_heads, .head_dim = 128,
                              .dtype = c->dt, .q = buf, .o = buf + 65536, .k_pages = buf + 131072, .v_pages = buf + 262144,
                              .num_pages = 2, .page_size = 16, .block_table = buf + 512 * 1024,
                              .table_stride = {4, 0}, .max_pages_per_seq = 2, .seq_lens = buf + 600 * 1024,
                              .max_seq_len = 32, .splits = 1,
                              .q_stride = {32 * 128, 32 * 128, 128}, .o_stride = {32 * 128, 32 * 128, 128},
                              .k_stride = {16 * 8 * 128, 8 * 128, 128}, .v_stride = {16 * 8 * 128, 8 * 128, 128}};
    s2_attn_decode_args a = a0;
    OK(ctx, s2_attn_decode_workspace(ctx, k, &a, &(size_t){0}));
    a.block_table = 0;
    ck_assert_int_eq(s2_attn_decode(ctx, k, NULL, &a), S2_ERR_NULL_ARG);
    a = a0, a.n_new = 5;  /* group 4 x 5 > 16 rows */
    ck_assert_int_eq(s2_attn_decode(ctx, k, NULL, &a), S2_ERR_SHAPE);
    a = a0, a.page_size = 24;
    ck_assert_int_eq(s2_attn_decode(ctx, k, NULL, &a), S2_ERR_SHAPE);
    a = a0, a.dtype = c->dt == S2_DTYPE_F16 ? S2_DTYPE_BF16 : S2_DTYPE_F16;
    ck_assert_int_eq(s2_attn_decode(ctx, k, NULL, &a), S2_ERR_DTYPE);
    a = a0, a.max_seq_len = 33;  /* 3 pages of 16, rows hold 2 */
    ck_assert_int_eq(s2_attn_decode(ctx, k, NULL, &a), S2_ERR_SHAPE);
    a = a0, a.table_stride[1] = 1;  /* per-head rows overlapping */
    ck_assert_int_eq(s2_attn_decode(ctx, k, NULL, &a), S2_ERR_STRIDE);
    a = a0, a.q = buf + 8;
    ck_assert_int_eq(s2_attn_decode(ctx, k, NULL, &a), S2_ERR_ALIGNMENT);
    a = a0, a.splits = 2, a.workspace = 0;
    ck_assert_int_eq(s2_attn_decode(ctx, k, NULL, &a), S2_ERR_NULL_ARG);
    a = a0, a.k_pages = buf + (1 << 20) - 4096;  /* the pool runs past the allocation */
    ck_assert_int_eq(s2_attn_decode(ctx, k, NULL, &a), S2_ERR_INVALID);
    s2_mem_free(ctx, dev, buf);
    s2_attn_kernel_free(k);
    s2_device_free(dev);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

/* s2_combine: 3 inputs in (B,H,S,D) storage with some -inf rows (one row
 * -inf everywhere) into a (B,S,H,D) output, poisoned first; each dtype at
 * d64, and d80 (rows of 10 threads: 12 rows per 128-thread CTA) and d256. */
START_TEST(combine_gpu)
{
    static const struct {
        s2_dtype dt;
        int D;
    } runs[] = {{S2_DTYPE_BF16, 64}, {S2_DTYPE_F16, 64}, {S2_DTYPE_BF16, 80}, {S2_DTYPE_F16, 256}};
    for (int dti = 0; dti < (int)(sizeof runs / sizeof runs[0]); dti++) {
        s2_dtype dt = runs[dti].dt;
        const int D = runs[dti].D;
        enum { NIN = 3, B = 2, S = 5, H = 4 };
        uint64_t s = base_seed * 31 + 5 + (uint64_t)dti;
        s2_ctx *ctx = s2_ctx_new();
        const dec_case *c = &cases[dt == S2_DTYPE_F16 ? 2 : 4];  /* a pattern of each dtype's cases */
        const s2_pattern *p = NULL;
        s2_pattern_set *set = load_case_pattern(ctx, c, &p);
        ck_assert_int_eq(c->dt, dt);
        s2_kernel_spec spec = {.kind = S2_KERNEL_DECODE, .dtype = dt, .head_dim = D, .arch = dev_arch};
        s2_artifact *art = NULL;
        OK(ctx, s2_compile_attention(ctx, p, &spec, S2_CUBIN_AUTO, &art));
        s2_device *dev = NULL;
        OK(ctx, s2_device_open(ctx, 0, &dev));
        s2_attn_kernel *k = NULL;
        OK(ctx, s2_attn_load(ctx, dev, art->cubin, art->cubin_size, p->name, dt, D, &k));
        size_t n_el = (size_t)B * S * H * D, n_l = (size_t)B * H * S;
        uint16_t *in[NIN];
        float *lin[NIN];
        s2_tensor tin[NIN];
        s2_combine_args a = {.n = NIN, .batch = B, .heads = H, .head_dim = D, .seq = S, .dtype = dt,
                             .in_stride = {(int64_t)H * S * D, D, (int64_t)S * D}, .o_stride = {(int64_t)S * H * D, (int64_t)H * D, D}};
        int64_t ext[4] = {B, S, H, D};
        for (int i = 0; i < NIN; i++) {
            in[i] = malloc(n_el * 2);
            lin[i] = malloc(n_l * sizeof(float));
            tin[i] = s2_tensor_bhsd(in[i], dt, S, H, D);
            s2_tensor_fill_random(&tin[i], ext, s2t_xorshift64(&s), -1, 1);
            for (size_t r = 0; r < n_l; r++) {
                uint64_t x = s2t_xorshift64(&s) % 5;
                lin[i][r] = x == 0 ? -INFINITY : (float)((double)(s2t_xorshift64(&s) % 2000) / 100.0 - 10.0);
                if (r == 3)
                    lin[i][r] = -INFINITY;
            }
            a.o_in[i] = s2t_upload(ctx, dev, in[i], n_el * 2);
            a.lse_in[i] = s2t_upload(ctx, dev, lin[i], n_l * sizeof(float));
        }
        OK(ctx, s2_mem_alloc(ctx, dev, n_el * 2, &a.o));
        OK(ctx, s2_mem_alloc(ctx, dev, n_l * sizeof(float), &a.lse));
        uint16_t *o = malloc(n_el * 2);
        float *lse = malloc(n_l * sizeof(float)), *rl = malloc(n_l * sizeof(float));
        double *ro = malloc(n_el * sizeof(double));
        /* then with sinks (head 3: none): the reference takes them as a fourth
         * input of output zero and lse sinks[h] */
        const float sinks[H] = {0.5f, -3.0f, 12.0f, -INFINITY};
        uint16_t *zero = calloc(n_el, 2);
        float *lsink = malloc(n_l * sizeof(float));
        for (size_t r = 0; r < n_l; r++)
            lsink[r] = sinks[r / S % H];  /* [B][H][S] */
        for (int with_sinks = 0; with_sinks < 2; with_sinks++) {
            a.sinks = with_sinks ? s2t_upload(ctx, dev, sinks, sizeof sinks) : 0;
            s2t_dev_poison(ctx, dev, a.o, n_el * 2);
            s2t_dev_poison(ctx, dev, a.lse, n_l * sizeof(float));
            OK(ctx, s2_combine(ctx, k, NULL, &a));
            OK(ctx, s2_device_synchronize(ctx, dev));
            OK(ctx, s2_memcpy_d2h(ctx, dev, o, a.o, n_el * 2));
            OK(ctx, s2_memcpy_d2h(ctx, dev, lse, a.lse, n_l * sizeof(float)));
            s2_tensor tro = s2_tensor_bshd(ro, S2_DTYPE_F64, S, H, D), to = s2_tensor_bshd(o, dt, S, H, D);
            s2_tensor trin[NIN + 1] = {tin[0], tin[1], tin[2], s2_tensor_bhsd(zero, dt, S, H, D)};
            const float *lp[NIN + 1] = {lin[0], lin[1], lin[2], lsink};
            OK(ctx, s2_ref_combine(ctx, NIN + with_sinks, B, S, H, D, trin, lp, &tro, rl));
            double err = s2_tensor_max_abs_diff(&to, &tro, ext);
            /* outputs are convex combinations of values in [-1, 1]: one rounding of the dtype */
            ck_assert_msg(err <= (dt == S2_DTYPE_BF16 ? 8e-3 : 1e-3), "combine %s d%d%s (seed %llu): max |o - ref| %g",
                          s2_dtype_name(dt), D, with_sinks ? " with sinks" : "", (unsigned long long)base_seed, err);
            for (size_t r = 0; r < n_l; r++)
                ck_assert_msg(rl[r] == -INFINITY ? lse[r] == -INFINITY : fabsf(lse[r] - rl[r]) <= 1e-4f * fmaxf(1, fabsf(rl[r])),
                              "combine d%d lse %zu%s: %g vs %g", D, r, with_sinks ? " with sinks" : "", lse[r], rl[r]);
            for (int d = 0; d < D; d++)
                ck_assert(s2_tensor_get(&to, 0, 3, 0, d) == 0.0);  /* lse row 3 is b 0, h 0, s 3 */
            if (with_sinks) {
                ck_assert(lse[3] == sinks[0]);  /* no input: the sink alone */
                s2_mem_free(ctx, dev, a.sinks);
                a.sinks = 0;
            }
        }
        free(zero), free(lsink);
        a.n = 0;
        ck_assert_int_eq(s2_combine(ctx, k, NULL, &a), S2_ERR_SHAPE);
        for (int i = 0; i < NIN; i++) {
            s2_mem_free(ctx, dev, a.o_in[i]);
            s2_mem_free(ctx, dev, a.lse_in[i]);
            free(in[i]), free(lin[i]);
        }
        s2_mem_free(ctx, dev, a.o);
        s2_mem_free(ctx, dev, a.lse);
        free(o), free(lse), free(rl), free(ro);
        s2_attn_kernel_free(k);
        s2_device_free(dev);
        s2_artifact_free(art);
        s2_pattern_set_free(set);
        s2_ctx_free(ctx);
    }
}
END_TEST

static void print_summary(void)
{
    printf("\n%-34s %8s %8s %9s %9s %9s %9s %s\n", "case", "pages", "poison", "o_err s1", "lse s1", "o_err sN", "lse sN",
           "splits");
    for (int i = 0; i < NUM_CASES; i++) {
        const result *r = &results[i];
        if (!r->ran)
            continue;
        printf("%-34s %8lld %8lld %9.2e %9.2e %9.2e %9.2e %d %s\n", cases[i].name, (long long)r->pages,
               (long long)r->poisoned, r->o_err[0], r->lse_err[0], r->o_err[1], r->lse_err[1], r->splits[1],
               r->ok ? "PASS" : "FAIL");
    }
}

int main(void)
{
    s2t_gpu g;
    int rc = s2t_gpu_start("compiling for", NULL, &g);
    if (rc != 0)
        return rc;
    dev_arch = g.arch;
    base_seed = g.seed;
    small_only = getenv("S2C_DECODE_SMALL") != NULL;
    case_filter = getenv("S2C_DECODE_CASES");

    Suite *s = suite_create("decode_gpu");
    TCase *tc = tcase_create("decode");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, decode_case, 0, NUM_CASES);
    tcase_add_test(tc, decode_checks);
    tcase_add_test(tc, combine_gpu);
    suite_add_tcase(s, tc);
    int failed = s2t_run_nofork(s);
    print_summary();
    return failed ? 1 : 0;
}
