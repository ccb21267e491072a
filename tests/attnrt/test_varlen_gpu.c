/* Variable-length batches on a real GPU: s2_attn_forward with
 * s2_attn_fwd_args.seqs against the float64 reference s2_ref_forward_varlen,
 * on both forward templates (the sm_90a wgmma/TMA kernel when the device has
 * it, and the mma.sync one compiled for sm_90 / the device's arch).
 * Modes: packed (cu_seqlens) with odd lengths, right and left padding,
 * chunked prefill (queries the last q_len of kv_len, unaligned offsets),
 * GQA, Merge-Q (block 16), causal and bidirectional, bf16 and f16, token-major
 * and head-major layouts.  o and lse are poisoned (NaN) first: every row
 * outside the sequences must stay poison.  K/V padding rows hold random
 * finite values (the TMA kernel may read them, attention.h).  Fresh random
 * inputs, seed printed (S2C_SEED=N repeats), S2C_VARLEN_CASES=substring
 * selects runs ("packed_causal", "_tma", "_mma").  Tolerances as
 * test_attn_gpu: relative Frobenius error of o <= 2e-2 (bf16) / 5e-3 (f16),
 * |lse| <= 1e-3.  Exits 77 without libcuda.so.1 or a device. */
#include "../attn/patterns.h"
#include "compile_internal.h"
#include "kernel_abi.h"
#include "s2c/compile.h"
#include "s2c/attn_runtime.h"
#include "s2c/codegen.h"
#include "s2c/layout.h"
#include "s2c/ref.h"

#include <check.h>
#include "gpu_harness.h"
#include "varlen_seqs.h"
#include "poison.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { M_PACKED, M_RIGHT, M_LEFT } seq_mode;
static const char *const mode_names[] = {"packed", "right", "left"};
enum { MAXSEQ = 8 };

typedef struct varlen_case {
    const char *name;
    int pattern;               /* attn_pattern_args index */
    s2_dtype dt;
    int head_dim;
    seq_mode mode;
    int n;
    int q_lens[MAXSEQ], kv_lens[MAXSEQ];   /* kv_lens[i] 0: = q_lens[i] (self-attention) */
    int pad_q, pad_k;          /* padded modes: rows per sequence slot */
    bool head_major;           /* [H][rows][D] instead of [rows][H][D] */
    bool persistent;           /* the TMA run uses the persistent grid */
} varlen_case;

static const varlen_case cases[] = {
    {"packed_causal_bf16_d128", 0, S2_DTYPE_BF16, 128, M_PACKED, 7, {1, 17, 63, 64, 65, 1000, 130}, {0}, 0, 0, false, false},
    {"packed_mergeq16_f16_d64", 1, S2_DTYPE_F16, 64, M_PACKED, 6, {1, 17, 63, 64, 65, 300}, {0}, 0, 0, true, false},
    {"right_bidir_bf16_d64", 2, S2_DTYPE_BF16, 64, M_RIGHT, 4, {320, 1, 100, 257}, {0}, 320, 320, false, false},
    {"left_gqa_f16_d128", 3, S2_DTYPE_F16, 128, M_LEFT, 4, {256, 5, 129, 64}, {0}, 256, 256, false, false},
    {"chunk_causal_bf16_d64", 0, S2_DTYPE_BF16, 64, M_PACKED, 5, {17, 1, 64, 100, 0}, {300, 77, 64, 1000, 50}, 0, 0, false, true},
    {"chunk_bidir_f16_d128", 2, S2_DTYPE_F16, 128, M_PACKED, 3, {33, 200, 65}, {500, 200, 129}, 0, 0, true, false},
    {"chunk_left_mergeq16_bf16_d128", 1, S2_DTYPE_BF16, 128, M_LEFT, 3, {40, 1, 96}, {333, 80, 96}, 128, 400, false, false},
    {"packed_dense2_gqa_bf16_d64", 4, S2_DTYPE_BF16, 64, M_PACKED, 3, {1000, 3, 511}, {0}, 0, 0, false, true},
    {"packed_empty_rows_f16_d64", 5, S2_DTYPE_F16, 64, M_PACKED, 3, {17, 300, 1}, {0}, 0, 0, false, false},
};
enum { NUM_CASES = sizeof cases / sizeof cases[0], NUM_RUNS = 2 * NUM_CASES };

typedef struct run_result {
    bool ran, ok, tma, persistent;
    double o_err, lse_err;
    int64_t rows, empty;
    uint64_t seed;
} run_result;

static run_result results[NUM_RUNS];
static uint64_t base_seed;
static s2_arch dev_arch;

#define OK(ctx, call) ck_assert_msg((call) == S2_OK, "%s: %s", #call, s2_ctx_message(ctx))

static bool ref_mask(const void *user, int q_head, int64_t qpos, int64_t kpos)
{
    return s2_token_kept((const s2_pattern *)user, q_head, qpos, kpos);
}

/* The sequences of a case and the token rows of q and k. */
static void make_seqs(const varlen_case *c, s2_attn_seq *seqs, int64_t *q_rows, int64_t *k_rows)
{
    int32_t cq[MAXSEQ + 1] = {0}, ck[MAXSEQ + 1] = {0};
    for (int i = 0; i < c->n; i++) {
        int ql = c->q_lens[i], kl = c->kv_lens[i] ? c->kv_lens[i] : ql;
        cq[i + 1] = cq[i] + ql;
        ck[i + 1] = ck[i] + kl;
    }
    if (c->mode == M_PACKED) {
        s2_ctx *ctx = s2_ctx_new();
        OK(ctx, s2_attn_seqs_packed(ctx, cq, ck, c->n, seqs));
        s2_ctx_free(ctx);
        *q_rows = cq[c->n], *k_rows = ck[c->n];
        return;
    }
    for (int i = 0; i < c->n; i++) {
        int ql = c->q_lens[i], kl = c->kv_lens[i] ? c->kv_lens[i] : ql;
        bool left = c->mode == M_LEFT;
        seqs[i] = (s2_attn_seq){i * c->pad_q + (left ? c->pad_q - ql : 0), ql, i * c->pad_k + (left ? c->pad_k - kl : 0),
                                kl};
    }
    *q_rows = (int64_t)c->n * c->pad_q, *k_rows = (int64_t)c->n * c->pad_k;
}


/* The kernel for one template: sm_90a (TMA when the spec allows it) or the
 * mma.sync one (sm_90 on Hopper, else the device's arch). */
static s2_attn_kernel *compile_kernel(s2_ctx *ctx, s2_device *dev, const s2_pattern *p, const varlen_case *c, bool tma)
{
    s2_kspec spec = {.kind = S2_KERNEL_FWD, .dtype = c->dt, .head_dim = c->head_dim,
                     .arch = tma ? S2_ARCH_SM90A : dev_arch == S2_ARCH_SM90A ? S2_ARCH_SM90 : dev_arch,
                     .persistent = tma && c->persistent ? 1 : 0};
    s2_artifact *art = NULL;
    OK(ctx, s2_compile_kspec1(ctx, p, &spec, S2_CUBIN_AUTO, &art));
    s2_attn_kernel *k = NULL;
    OK(ctx, s2_attn_load(ctx, dev, art->cubin, art->cubin_size, NULL, c->dt, c->head_dim, &k));
    s2_artifact_free(art);
    return k;
}

static void run_varlen(int run)
{
    const varlen_case *c = &cases[run / 2];
    bool tma = run % 2 == 0;
    run_result *res = &results[run];
    char label[128];
    snprintf(label, sizeof label, "%s_%s", c->name, tma ? "tma" : "mma");
    const char *filter = getenv("S2C_VARLEN_CASES");
    if ((filter && !strstr(label, filter)) || (tma && dev_arch != S2_ARCH_SM90A))
        return;
    res->ran = true;
    res->seed = base_seed + (uint64_t)run * 7919u;
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    OK(ctx, s2_device_open(ctx, 0, &dev));
    s2_local_stride_args pa;
    attn_pattern_args(c->pattern, &pa);
    s2_pattern_set *set = NULL;
    OK(ctx, s2_pattern_from_args(ctx, &pa, &set));
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    const int H = p->heads, HK = p->kv_heads, D = c->head_dim;
    s2_attn_kernel *k = compile_kernel(ctx, dev, p, c, tma);
    s2_abi_id abi = s2_manifest_kernel_fn(s2_attn_kernel_desc(k), S2_ROLE_FWD)->abi;
    res->tma = abi != S2_ABI_FWD;
    res->persistent = abi == S2_ABI_FWD_TMA_PERSISTENT;
    ck_assert_msg(res->tma == tma, "%s: abi %d", label, (int)abi);
    ck_assert_msg(res->persistent == (tma && c->persistent), "%s: abi %d", label, (int)abi);

    s2_attn_seq seqs[MAXSEQ];
    int64_t q_rows, k_rows;
    make_seqs(c, seqs, &q_rows, &k_rows);
    s2t_tensor q, kt, v, o;
    s2t_tensor_new(&q, c->dt, c->head_major, 1, q_rows, H, D, 0);
    s2t_tensor_new(&kt, c->dt, c->head_major, 1, k_rows, HK, D, 0);
    s2t_tensor_new(&v, c->dt, c->head_major, 1, k_rows, HK, D, 0);
    s2t_tensor_new(&o, c->dt, c->head_major, 1, q_rows, H, D, 0);
    s2_tensor_fill_random(&q.t, q.ext, res->seed, -1.5, 1.5);
    s2_tensor_fill_random(&kt.t, kt.ext, res->seed + 1, -1.5, 1.5);
    s2_tensor_fill_random(&v.t, v.ext, res->seed + 2, -1.0, 1.0);
    s2t_tensor *all[4] = {&q, &kt, &v, &o};
    for (int i = 0; i < 4; i++)
        s2t_tensor_upload(ctx, dev, all[i]);
    size_t nlse = (size_t)H * (size_t)q_rows;
    float *lse = s2t_alloc_poisoned(nlse * sizeof *lse);
    s2_devptr d_lse = s2t_dev_alloc_poisoned(ctx, dev, nlse * 4);

    s2_attn_seqs *sq = NULL;
    OK(ctx, s2_attn_seqs_new(ctx, dev, seqs, c->n, &sq));
    s2_attn_fwd_args a = {.batch = c->n, .q_len = q_rows, .kv_len = k_rows, .heads = H, .kv_heads = HK,
                          .head_dim = D, .dtype = c->dt, .q = q.dev, .k = kt.dev, .v = v.dev, .o = o.dev,
                          .lse = d_lse, .seqs = sq};
    const s2t_tensor *ts[4] = {&q, &kt, &v, &o};
    int64_t *strides[4] = {a.q_stride, a.k_stride, a.v_stride, a.o_stride};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            strides[i][j] = ts[i]->t.stride[j];
    OK(ctx, s2_attn_forward(ctx, k, NULL, &a));
    OK(ctx, s2_device_synchronize(ctx, dev));
    OK(ctx, s2_memcpy_d2h(ctx, dev, o.host, o.dev, o.elems * 2));
    OK(ctx, s2_memcpy_d2h(ctx, dev, lse, d_lse, nlse * 4));

    /* reference */
    double *ref = malloc((size_t)q_rows * H * D * sizeof *ref);
    float *lse_ref = malloc(nlse * sizeof *lse_ref);
    ck_assert(ref && lse_ref);
    s2_tensor rt = s2_tensor_bshd(ref, S2_DTYPE_F64, q_rows, H, D);
    s2_ref_seq rs[MAXSEQ];
    s2t_ref_seqs(seqs, c->n, rs);
    s2_ref_problem rp = {.batch = c->n, .heads = H, .kv_heads = HK, .head_dim = D, .q_len = q_rows, .kv_len = k_rows,
                         .causal = p->causal, .mask = ref_mask, .mask_user = p};
    OK(ctx, s2_ref_forward_varlen(ctx, &rp, rs, &q.t, &kt.t, &v.t, &rt, lse_ref));

    /* rows of a sequence against the reference; every other row poison */
    uint8_t *mine = malloc((size_t)q_rows);
    ck_assert_ptr_nonnull(mine);
    s2t_seq_rows(seqs, c->n, mine, q_rows);
    double num = 0, den = 0;
    int64_t nan_out = 0, bad_lse = 0, pad_written = 0;
    for (int64_t r = 0; r < q_rows; r++)
        for (int h = 0; h < H; h++) {
            float lk = lse[(size_t)h * q_rows + r];
            if (!mine[r]) {
                pad_written += !isnan(lk);
                for (int d = 0; d < D; d++)
                    pad_written += o.host[r * o.t.stride[1] + h * o.t.stride[2] + d] != S2T_POISON16;
                continue;
            }
            res->rows++;
            float lr = lse_ref[(size_t)h * q_rows + r];
            bool empty = isinf(lr) && lr < 0;
            res->empty += empty;
            if (empty ? !(isinf(lk) && lk < 0) : !(fabs((double)lk - lr) <= 1e-3))
                bad_lse++;
            else if (!empty)
                res->lse_err = fmax(res->lse_err, fabs((double)lk - lr));
            for (int d = 0; d < D; d++) {
                double x = s2_tensor_get(&o.t, 0, r, h, d), y = s2_tensor_get(&rt, 0, r, h, d);
                nan_out += isnan(x) || (empty && x != 0.0);
                num += (x - y) * (x - y);
                den += y * y;
            }
        }
    res->o_err = den > 0 ? sqrt(num / den) : sqrt(num);
    double tol = c->dt == S2_DTYPE_BF16 ? 2e-2 : 5e-3;
    res->ok = !nan_out && !bad_lse && !pad_written && res->o_err <= tol;
    ck_assert_msg(!pad_written, "%s seed %llu: %lld elements outside the sequences written", label,
                  (unsigned long long)res->seed, (long long)pad_written);
    ck_assert_msg(!nan_out, "%s seed %llu: %lld outputs NaN or non-zero on empty rows", label,
                  (unsigned long long)res->seed, (long long)nan_out);
    ck_assert_msg(!bad_lse, "%s seed %llu: %lld lse values off by > 1e-3 or -inf mismatch", label,
                  (unsigned long long)res->seed, (long long)bad_lse);
    ck_assert_msg(res->o_err <= tol, "%s seed %llu: relative error %.3g > %.g", label, (unsigned long long)res->seed,
                  res->o_err, tol);
    ck_assert_msg(c->pattern != 5 || res->empty > 0, "%s: no empty row in a pattern meant to have some", label);

    free(mine);
    free(ref);
    free(lse_ref);
    free(lse);
    s2_attn_seqs_free(sq);
    s2_mem_free(ctx, dev, d_lse);
    for (int i = 0; i < 4; i++)
        s2t_tensor_free(ctx, dev, all[i]);
    s2_attn_kernel_free(k);
    s2_pattern_set_free(set);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}

START_TEST(varlen_matches_reference)
{
    run_varlen(_i);
}
END_TEST

/* Sequences without queries launch nothing; bad sequences launch nothing. */
START_TEST(nothing_to_do_and_bad_sequences)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    OK(ctx, s2_device_open(ctx, 0, &dev));
    s2_local_stride_args pa;
    attn_pattern_args(0, &pa);
    s2_pattern_set *set = NULL;
    OK(ctx, s2_pattern_from_args(ctx, &pa, &set));
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    const varlen_case *c = &cases[0];
    s2_attn_kernel *k = compile_kernel(ctx, dev, p, c, dev_arch == S2_ARCH_SM90A);
    const int H = p->heads, D = c->head_dim;
    s2t_tensor q, o;
    s2t_tensor_new(&q, c->dt, false, 1, 100, H, D, 0);
    s2t_tensor_new(&o, c->dt, false, 1, 100, H, D, 0);
    s2_tensor_fill_random(&q.t, q.ext, base_seed, -1, 1);
    s2t_tensor_upload(ctx, dev, &q);
    s2t_tensor_upload(ctx, dev, &o);
    s2_attn_seq none[2] = {{0, 0, 0, 40}, {40, 0, 40, 60}};
    s2_attn_seq past[2] = {{0, 40, 0, 40}, {40, 61, 40, 61}};   /* second runs past 100 rows */
    s2_attn_seqs *sn = NULL, *sp = NULL;
    OK(ctx, s2_attn_seqs_new(ctx, dev, none, 2, &sn));
    OK(ctx, s2_attn_seqs_new(ctx, dev, past, 2, &sp));
    s2_attn_fwd_args a = {.batch = 2, .q_len = 100, .kv_len = 100, .heads = H, .kv_heads = p->kv_heads, .head_dim = D,
                          .dtype = c->dt, .q = q.dev, .k = q.dev, .v = q.dev, .o = o.dev, .seqs = sn,
                          .q_stride = {0, H * D, D}, .k_stride = {0, H * D, D}, .v_stride = {0, H * D, D},
                          .o_stride = {0, H * D, D}};
    OK(ctx, s2_attn_forward(ctx, k, NULL, &a));
    a.seqs = sp;
    ck_assert_int_eq(s2_attn_forward(ctx, k, NULL, &a), S2_ERR_SHAPE);
    a.batch = 1;
    ck_assert_int_eq(s2_attn_forward(ctx, k, NULL, &a), S2_ERR_SHAPE);
    OK(ctx, s2_device_synchronize(ctx, dev));
    s2_attn_sched_stats ss;
    s2_attn_kernel_sched_stats(k, &ss);
    ck_assert_int_eq(ss.misses, 0);
    OK(ctx, s2_memcpy_d2h(ctx, dev, o.host, o.dev, o.elems * 2));
    ck_assert_int_eq(s2t_unpoisoned16(o.host, o.elems), 0);
    s2_attn_seqs_free(sn);
    s2_attn_seqs_free(sp);
    s2t_tensor_free(ctx, dev, &q);
    s2t_tensor_free(ctx, dev, &o);
    s2_attn_kernel_free(k);
    s2_pattern_set_free(set);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

static void print_summary(void)
{
    printf("\n%-36s %-4s %-6s %-5s %4s %6s %6s %9s %9s %s\n", "case", "tmpl", "mode", "dtype", "D", "rows", "empty",
           "o_err", "lse_err", "result");
    for (int r = 0; r < NUM_RUNS; r++) {
        const run_result *x = &results[r];
        const varlen_case *c = &cases[r / 2];
        if (!x->ran)
            continue;
        printf("%-36s %-4s %-6s %-5s %4d %6lld %6lld %9.2e %9.2e %s\n", c->name,
               x->persistent ? "tmaP" : x->tma ? "tma" : "mma", mode_names[c->mode], s2_dtype_name(c->dt), c->head_dim,
               (long long)x->rows, (long long)x->empty, x->o_err, x->lse_err, x->ok ? "ok" : "FAIL");
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

    Suite *s = suite_create("varlen_gpu");
    TCase *tc = tcase_create("varlen");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, varlen_matches_reference, 0, NUM_RUNS);
    tcase_add_test(tc, nothing_to_do_and_bad_sequences);
    suite_add_tcase(s, tc);
    int failed = s2t_run_nofork(s);
    print_summary();
    return failed ? 1 : 0;
}
