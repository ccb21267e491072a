/* NAME_rows (s2_rows) alone on a GPU, against a host reference: a copy table
 * (one source) moves exactly the listed rows bit for bit; a sum table (four
 * sources, some absent) gives per element the fp32 sum of its sources in
 * table order rounded once to the dtype (a row where rounding each step
 * would differ is included), written through (b, t, h) strides; runs outside
 * the extents are skipped; every other element keeps its poison.  A forward
 * module (bf16, d128) and a backward one (f16, d64).  Prints PASS/FAIL per
 * case with the mismatches.  Exits 77 without a GPU. */
#include "compile_internal.h"
#include "s2c/attn_runtime.h"
#include "s2c/codegen.h"
#include "s2c/pattern.h"
#include "s2c/runtime.h"

#include <check.h>
#include "gpu_harness.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static s2_arch dev_arch;
static uint64_t base_seed;

#define OK(call) ck_assert_msg((call) == S2_OK, "%s: %s", #call, s2_ctx_message(ctx))

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* 16-bit element <-> float (bf16: f32's upper half; f16: normal values only, as the test makes). */
static float to_f32(uint16_t x, s2_dtype dt)
{
    uint32_t u = dt == S2_DTYPE_BF16 ? (uint32_t)x << 16
                                     : ((uint32_t)(x & 0x8000) << 16) | ((((x >> 10) & 0x1f) - 15u + 127u) << 23) |
                                           ((uint32_t)(x & 0x3ff) << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even. */
static uint16_t from_f32(float f, s2_dtype dt)
{
    uint32_t u = f32_bits(f);
    if (dt == S2_DTYPE_BF16)
        return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    uint32_t m = u & 0x7fffff, h = ((u >> 16) & 0x8000) | ((((u >> 23) & 0xff) - 127u + 15u) << 10) | (m >> 13);
    uint32_t rem = m & 0x1fff;
    return (uint16_t)(h + (rem > 0x1000 || (rem == 0x1000 && (h & 1))));
}

static uint64_t rng;
static float urand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 16777216.0f;
}

typedef struct rows_case {
    const char *name;
    s2_kernel_kind kind;
    s2_dtype dtype;
    int D;
} rows_case;

static const rows_case cases[] = {
    {"fwd_bf16_d128", S2_KERNEL_FWD, S2_DTYPE_BF16, 128},
    {"bwd_f16_d64", S2_KERNEL_BWD, S2_DTYPE_F16, 64},
};
enum { NUM_CASES = sizeof cases / sizeof cases[0], POISON = 0x7fff, SRC_ROWS = 200, NSRC = 4 };

START_TEST(rows_table)
{
    const rows_case *c = &cases[_i];
    s2_ctx *ctx = s2_ctx_new();
    rng = base_seed + (uint64_t)_i;
    s2_local_stride_args pa;
    s2_local_stride_args_default(&pa);
    pa.name = "rows", pa.num_heads = 4, pa.num_kv_heads = 2, pa.block_size = 64;
    s2_pattern_set *set = NULL;
    OK(s2_pattern_from_args(ctx, &pa, &set));
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_kspec spec = {.kind = c->kind, .dtype = c->dtype, .head_dim = c->D, .arch = dev_arch};
    s2_artifact *art = NULL;
    s2_device *dev = NULL;
    s2_attn_module *mod = NULL;
    s2_attn_kernel *k = NULL;
    OK(s2_compile_kspec1(ctx, p, &spec, S2_CUBIN_AUTO, &art));
    OK(s2_device_open(ctx, 0, &dev));
    OK(s2_attn_module_load(ctx, dev, art->cubin, art->cubin_size, &mod));
    OK(s2_attn_find(ctx, mod, p->name, c->dtype, c->D, &k));
    int D = c->D;
    /* sources: positive normal values (no cancellation), row 7 designed: 1 then three quarter-ulps */
    uint16_t *src = malloc((size_t)SRC_ROWS * D * 2);
    for (int64_t i = 0; i < (int64_t)SRC_ROWS * D; i++)
        src[i] = from_f32(0.5f + 1.5f * urand(), c->dtype);
    float quarter = c->dtype == S2_DTYPE_BF16 ? 1.0f / 512 : 1.0f / 4096;
    for (int d = 0; d < D; d++)
        src[7 * D + d] = from_f32(1.0f, c->dtype), src[8 * D + d] = src[9 * D + d] = src[10 * D + d] =
            from_f32(quarter, c->dtype);
    /* dst (b, t, h) = (2, 40, 3), strides with padding: (t * 3 + h) rows of D + 8 */
    int64_t shape[3] = {2, 40, 3}, stride[3] = {40 * 3 * (D + 8), 3 * (D + 8), D + 8};
    int64_t dst_elems = shape[0] * stride[0], dst_rows = shape[0] * shape[1] * shape[2];
    /* sum runs {dst, rows, s0..s3}: one of the designed row, absent sources, then two skipped runs */
    int64_t sum_tab[][2 + NSRC] = {
        {0, 1, 7, 8, 9, 10},        {5, 30, 20, -1, 60, 100},  {35, 40, 150, 110, -1, -1},
        {100, 60, 0, 40, 80, 120},  {200, 40, 10, 50, 90, 130}, {dst_rows - 1, 2, 0, 1, 2, 3} /* past dst */,
        {180, 5, 196, 0, 1, 2} /* past src */,
    };
    int64_t copy_tab[][3] = {{0, 64, 100}, {64, 1, 3}, {70, 50, 150}, {239, 1, 199}, {230, 9, 195} /* past src */};
    int n_sum = (int)(sizeof sum_tab / sizeof sum_tab[0]), n_copy = (int)(sizeof copy_tab / sizeof copy_tab[0]);
    s2_devptr dsrc = 0, ddst = 0, dsum = 0, dcopy = 0;
    OK(s2_mem_alloc(ctx, dev, (size_t)SRC_ROWS * D * 2, &dsrc));
    OK(s2_mem_alloc(ctx, dev, (size_t)dst_elems * 2, &ddst));
    OK(s2_mem_alloc(ctx, dev, sizeof sum_tab, &dsum));
    OK(s2_mem_alloc(ctx, dev, sizeof copy_tab, &dcopy));
    OK(s2_memcpy_h2d(ctx, dev, dsrc, src, (size_t)SRC_ROWS * D * 2));
    OK(s2_memcpy_h2d(ctx, dev, dsum, sum_tab, sizeof sum_tab));
    OK(s2_memcpy_h2d(ctx, dev, dcopy, copy_tab, sizeof copy_tab));
    uint16_t *got = malloc((size_t)dst_elems * 2), *want = malloc((size_t)dst_elems * 2);
    for (int pass = 0; pass < 2; pass++) {   /* 0: the sum through strides, 1: the copy into flat rows */
        bool sum = pass == 0;
        for (int64_t i = 0; i < dst_elems; i++)
            want[i] = POISON;
        OK(s2_memcpy_h2d(ctx, dev, ddst, want, (size_t)dst_elems * 2));
        s2_rows_args a = {.head_dim = D, .dtype = c->dtype, .n_src = sum ? NSRC : 1, .n_runs = sum ? n_sum : n_copy,
                          .table = sum ? dsum : dcopy, .src = dsrc, .src_rows = SRC_ROWS, .dst = ddst};
        int64_t flat_rows = dst_elems / D;
        if (sum) {
            memcpy(a.dst_shape, shape, sizeof shape);
            memcpy(a.dst_stride, stride, sizeof stride);
        } else {
            a.dst_shape[0] = flat_rows, a.dst_shape[1] = a.dst_shape[2] = 1;
            a.dst_stride[0] = D;
        }
        OK(s2_rows(ctx, k, NULL, &a));
        OK(s2_device_synchronize(ctx, dev));
        OK(s2_memcpy_d2h(ctx, dev, got, ddst, (size_t)dst_elems * 2));
        int64_t lim_rows = sum ? dst_rows : flat_rows;
        for (int r = 0; r < (sum ? n_sum : n_copy); r++) {
            const int64_t *e = sum ? sum_tab[r] : copy_tab[r];
            bool skip = e[0] + e[1] > lim_rows;
            for (int s = 0; s < a.n_src; s++)
                skip = skip || (e[2 + s] >= 0 && e[2 + s] + e[1] > SRC_ROWS);
            for (int64_t j = 0; !skip && j < e[1]; j++) {
                int64_t L = e[0] + j, off = L * D;
                if (sum) {
                    int64_t t = L % shape[1], h = (L / shape[1]) % shape[2], b = L / shape[1] / shape[2];
                    off = b * stride[0] + t * stride[1] + h * stride[2];
                }
                for (int d = 0; d < D; d++) {
                    if (!sum) {
                        want[off + d] = src[(e[2] + j) * D + d];
                        continue;
                    }
                    float acc = 0;   /* fp32, in table order, rounded once */
                    for (int s = 0; s < NSRC; s++)
                        if (e[2 + s] >= 0)
                            acc += to_f32(src[(e[2 + s] + j) * D + d], c->dtype);
                    want[off + d] = from_f32(acc, c->dtype);
                }
            }
        }
        if (sum)   /* the designed row: rounding once keeps the three quarter-ulps (1 + ulp), each step would not */
            ck_assert_int_eq(want[0], (uint16_t)(from_f32(1.0f, c->dtype) + 1));
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < dst_elems; i++)
            if (got[i] != want[i] && bad++ == 0)
                first = i;
        printf("%s %s %s: %lld of %lld elements differ (tolerance: exact; poison 0x%x elsewhere)\n",
               bad ? "FAIL" : "PASS", c->name, sum ? "sum of 4 (b,t,h) strided" : "copy flat", (long long)bad,
               (long long)dst_elems, POISON);
        ck_assert_msg(bad == 0, "%s: element %lld is 0x%04x, want 0x%04x", c->name, (long long)first,
                      first >= 0 ? got[first] : 0, first >= 0 ? want[first] : 0);
    }
    /* checked before launching: sources, alignment, an overlap */
    s2_rows_args a = {.head_dim = D, .dtype = c->dtype, .n_src = 0, .n_runs = 1, .table = dcopy, .src = dsrc,
                      .src_rows = SRC_ROWS, .dst = ddst, .dst_shape = {8, 1, 1}, .dst_stride = {D, 0, 0}};
    ck_assert_int_eq(s2_rows(ctx, k, NULL, &a), S2_ERR_SHAPE);
    a.n_src = 1, a.dst = ddst + 2;
    ck_assert_int_eq(s2_rows(ctx, k, NULL, &a), S2_ERR_ALIGNMENT);
    a.dst = dsrc;
    ck_assert_int_eq(s2_rows(ctx, k, NULL, &a), S2_ERR_INVALID);
    a.dst = ddst, a.dtype = c->dtype == S2_DTYPE_BF16 ? S2_DTYPE_F16 : S2_DTYPE_BF16;
    ck_assert_int_eq(s2_rows(ctx, k, NULL, &a), S2_ERR_DTYPE);
    free(src), free(got), free(want);
    s2_devptr bufs[] = {dsrc, ddst, dsum, dcopy};
    for (int i = 0; i < 4; i++)
        s2_mem_free(ctx, dev, bufs[i]);
    s2_attn_module_free(mod), s2_device_free(dev), s2_artifact_free(art), s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

int main(void)
{
    s2t_gpu g;
    int rc = s2t_gpu_start("compiling for", NULL, &g);
    if (rc != 0 || g.load_ptx)   /* the runtime loads cubins only */
        return rc != 0 ? rc : 77;
    dev_arch = g.arch, base_seed = g.seed;
    TCase *tc = tcase_create("rows");
    tcase_add_loop_test(tc, rows_table, 0, NUM_CASES);
    tcase_set_timeout(tc, 300);
    Suite *s = suite_create("rows_gpu");
    suite_add_tcase(s, tc);
    return s2t_run_nofork(s) ? 1 : 0;
}
