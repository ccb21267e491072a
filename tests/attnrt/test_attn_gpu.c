/* The user-facing path on a real GPU: s2_jit_compile (cold, then warm from
 * the disk cache) and s2_attn_forward against the float64 reference
 * (s2_ref_forward), with poisoned outputs (o, its padding, lse); argument
 * checks on real device memory (nothing may be launched); and 4 threads
 * launching one kernel at once over more shapes than the schedule cache holds;
 * a forward captured into a CUDA graph and replayed with new inputs.
 * Fresh random inputs, seed printed (S2C_SEED=N repeats a run).  Tolerances:
 * relative Frobenius error of o <= 2e-2 (bf16) / 5e-3 (f16), |lse| <= 1e-3.
 * Exits 77 without libcuda.so.1 or a device; CUDA lives in this process, so
 * Check does not fork. */
#include "../attn/patterns.h"
#include "kernel_abi.h"
#include "rt_cuda.h"
#include "s2c/attn_runtime.h"
#include "s2c/codegen.h"
#include "s2c/compile.h"
#include "s2c/jit.h"
#include "s2c/layout.h"
#include "s2c/ref.h"

#include <check.h>
#include <cuda.h>
#include <dlfcn.h>
#include "cu_graph.h"
#include "gpu_harness.h"
#include "poison.h"
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <threads.h>
#include <time.h>

typedef enum { L_BSHD, L_BHSD } layout_kind;
static const char *const layout_names[] = {"bshd", "bhsd"};

typedef struct gpu_case {
    const char *name;
    int pattern;               /* attn_pattern_args index */
    s2_dtype dt;
    int head_dim, batch;
    int64_t q_len, kv_len;
    layout_kind layout;
    int block_m, block_n;      /* 0 = heuristic */
    float scale;               /* 0 = 1/sqrt(D) */
    bool on_stream;
} gpu_case;

static const gpu_case cases[] = {
    {"causal64_bf16_d128", 0, S2_DTYPE_BF16, 128, 2, 512, 512, L_BSHD, 0, 0, 0, false},
    {"mergeq16_f16_d64", 1, S2_DTYPE_F16, 64, 1, 300, 300, L_BHSD, 0, 0, 0, true},
    {"bidir64_bf16_d64_q100_kv700", 2, S2_DTYPE_BF16, 64, 2, 100, 700, L_BHSD, 0, 0, 0.1f, false},
    {"gqa32_8_f16_d128_q200_kv600", 3, S2_DTYPE_F16, 128, 1, 200, 600, L_BSHD, 64, 32, 0, true},
    {"dense2_gqa_bf16_d64_decode", 4, S2_DTYPE_BF16, 64, 3, 1, 777, L_BSHD, 0, 0, 0, false},
    {"mergeq16_bf16_d128_m16", 1, S2_DTYPE_BF16, 128, 1, 257, 257, L_BHSD, 16, 64, 0, false},
    {"empty_rows16_f16_d64", 5, S2_DTYPE_F16, 64, 2, 300, 300, L_BSHD, 0, 0, 0, false},
    /* long lists: on sm_90a the runtime launches the wide variant (role fwd_wide) */
    {"dense64_gqa_bf16_d128_q300_kv2100_wide", 7, S2_DTYPE_BF16, 128, 2, 300, 2100, L_BSHD, 0, 0, 0, true},
    /* an S2 pattern's wide variant (role fwd_wide, ABI fwd_tma_persistent) on owned pairs
     * (669 keys per query tile: over the runtime's threshold) */
    {"bidir64_f16_d128_q2100_wide", 2, S2_DTYPE_F16, 128, 1, 2100, 2100, L_BHSD, 0, 0, 0, false},
};
enum { NUM_CASES = sizeof cases / sizeof cases[0] };

typedef struct case_result {
    bool ran, ok;
    double o_err, lse_err, cold_ms, warm_ms;
    s2_kernel_spec spec;
    uint64_t seed;
} case_result;

static case_result results[NUM_CASES];
static uint64_t base_seed;
static char cache_root[1024];

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#define OK(ctx, call) ck_assert_msg((call) == S2_OK, "%s: %s", #call, s2_ctx_message(ctx))

static bool ref_mask(const void *user, int q_head, int64_t qpos, int64_t kpos)
{
    return s2_token_kept((const s2_pattern *)user, q_head, qpos, kpos);
}

static void fill_args(s2_attn_fwd_args *a, const s2t_tensor *q, const s2t_tensor *k, const s2t_tensor *v, const s2t_tensor *o)
{
    const s2t_tensor *ts[4] = {q, k, v, o};
    int64_t *strides[4] = {a->q_stride, a->k_stride, a->v_stride, a->o_stride};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            strides[i][j] = ts[i]->t.stride[j];
    a->q = q->dev, a->k = k->dev, a->v = v->dev, a->o = o->dev;
}

typedef struct compare {
    double o_err, lse_err;
    int64_t nan_out, bad_lse, empty, pad_written;
} compare;

/* o/lse rows [row0, row0 + rows) of the reference against the kernel's
 * rows [0, rows); every element of o outside the s2t_tensor must be poison. */
static void compare_out(const s2t_tensor *o, const float *lse, const s2_tensor *ref, const float *lse_ref,
                        int64_t ref_q_len, int64_t row0, int64_t rows, compare *c)
{
    const int B = (int)o->ext[0], H = (int)o->ext[2], D = (int)o->ext[3];
    memset(c, 0, sizeof *c);
    double num = 0, den = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int64_t i = 0; i < rows; i++) {
                float lr = lse_ref[((size_t)b * H + h) * ref_q_len + row0 + i];
                float lk = lse[((size_t)b * H + h) * rows + i];
                bool empty = isinf(lr) && lr < 0;
                c->empty += empty;
                if (empty ? !(isinf(lk) && lk < 0) : !(fabs((double)lk - lr) <= 1e-3))
                    c->bad_lse++;
                else if (!empty)
                    c->lse_err = fmax(c->lse_err, fabs((double)lk - lr));
                for (int d = 0; d < D; d++) {
                    double x = s2_tensor_get(&o->t, b, i, h, d), r = s2_tensor_get(ref, b, row0 + i, h, d);
                    c->nan_out += isnan(x) || (empty && x != 0.0);
                    num += (x - r) * (x - r);
                    den += r * r;
                }
            }
    c->pad_written = s2t_tensor_pad_written(o);
    c->o_err = den > 0 ? sqrt(num / den) : sqrt(num);
}

static void reference(s2_ctx *ctx, const s2_pattern *p, const s2t_tensor *q, const s2t_tensor *k, const s2t_tensor *v,
                      float scale, double **out, s2_tensor *rt, float **lse_ref)
{
    const int B = (int)q->ext[0], H = (int)q->ext[2], D = (int)q->ext[3];
    const int64_t SQ = q->ext[1];
    *out = malloc((size_t)B * SQ * H * D * sizeof **out);
    *lse_ref = malloc((size_t)B * H * SQ * sizeof **lse_ref);
    ck_assert(*out && *lse_ref);
    *rt = s2_tensor_bshd(*out, S2_DTYPE_F64, SQ, H, D);
    s2_ref_problem rp = {.batch = B, .heads = H, .kv_heads = (int)k->ext[2], .head_dim = D, .q_len = SQ,
                         .kv_len = k->ext[1], .causal = p->causal, .scale = scale, .mask = ref_mask,
                         .mask_user = p};
    OK(ctx, s2_ref_forward(ctx, &rp, &q->t, &k->t, &v->t, rt, *lse_ref));
}

static s2_pattern_set *make_pattern(s2_ctx *ctx, int which)
{
    s2_local_stride_args a;
    attn_pattern_args(which, &a);
    s2_pattern_set *set = NULL;
    OK(ctx, s2_pattern_from_args(ctx, &a, &set));
    return set;
}

static s2_attn_kernel *jit_cold_warm(s2_ctx *ctx, s2_device *dev, const s2_pattern *p, const s2_kernel_spec *spec,
                                     const char *dir_name, double *cold_ms, double *warm_ms)
{
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/%s", cache_root, dir_name);
    s2_jit_opts o = {.cache_dir = dir};
    s2_jit_stats js;
    s2_attn_kernel *k = NULL;
    double t0 = now_ms();
    OK(ctx, s2_jit_compile(ctx, dev, p, spec, &o, &k, &js));
    *cold_ms = now_ms() - t0;
    ck_assert_msg(js.compiled && !js.hit && js.stored, "cold JIT: compiled %d hit %d stored %d", js.compiled,
                  js.hit, js.stored);
    s2_attn_kernel_free(k);
    k = NULL;
    t0 = now_ms();
    OK(ctx, s2_jit_compile(ctx, dev, p, spec, &o, &k, &js));
    *warm_ms = now_ms() - t0;
    ck_assert_msg(js.hit && !js.compiled, "warm JIT: compiled %d hit %d", js.compiled, js.hit);
    return k;
}

/* ---- numerics ------------------------------------------------------------------ */

static void run_case(int ci)
{
    const gpu_case *c = &cases[ci];
    case_result *res = &results[ci];
    const char *filter = getenv("S2C_ATTNRT_CASES");
    if (filter && !strstr(c->name, filter))
        return;
    res->ran = true;
    res->seed = base_seed + (uint64_t)ci * 7919u;
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    OK(ctx, s2_device_open(ctx, 0, &dev));
    s2_pattern_set *set = make_pattern(ctx, c->pattern);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    const int B = c->batch, H = p->heads, HK = p->kv_heads, D = c->head_dim;

    s2_kernel_spec spec = {.kind = S2_KERNEL_FWD, .dtype = c->dt, .head_dim = D, .block_m = c->block_m,
                           .block_n = c->block_n};
    s2_attn_kernel *k = jit_cold_warm(ctx, dev, p, &spec, c->name, &res->cold_ms, &res->warm_ms);
    res->spec = s2_attn_kernel_desc(k)->spec;

    s2t_tensor q, kt, v, o;
    s2t_tensor_new(&q, c->dt, c->layout == L_BHSD, B, c->q_len, H, D, 0);
    s2t_tensor_new(&kt, c->dt, c->layout == L_BHSD, B, c->kv_len, HK, D, 0);
    s2t_tensor_new(&v, c->dt, c->layout == L_BHSD, B, c->kv_len, HK, D, 0);
    s2t_tensor_new(&o, c->dt, c->layout == L_BHSD, B, c->q_len, H, D, 8);
    s2_tensor_fill_random(&q.t, q.ext, res->seed, -1.5, 1.5);
    s2_tensor_fill_random(&kt.t, kt.ext, res->seed + 1, -1.5, 1.5);
    s2_tensor_fill_random(&v.t, v.ext, res->seed + 2, -1.0, 1.0);
    s2t_tensor *all[4] = {&q, &kt, &v, &o};
    for (int i = 0; i < 4; i++)
        s2t_tensor_upload(ctx, dev, all[i]);
    size_t nlse = (size_t)B * H * c->q_len;
    float *lse = s2t_alloc_poisoned(nlse * sizeof *lse);
    s2_devptr d_lse = s2t_dev_alloc_poisoned(ctx, dev, nlse * 4);

    s2_attn_fwd_args a = {.batch = B, .q_len = c->q_len, .kv_len = c->kv_len, .heads = H, .kv_heads = HK,
                          .head_dim = D, .dtype = c->dt, .lse = d_lse, .scale = c->scale};
    fill_args(&a, &q, &kt, &v, &o);
    void *stream = NULL;
    if (c->on_stream)
        OK(ctx, s2_stream_create(ctx, dev, &stream));
    OK(ctx, s2_attn_forward(ctx, k, stream, &a));
    OK(ctx, c->on_stream ? s2_stream_synchronize(ctx, dev, stream) : s2_device_synchronize(ctx, dev));
    OK(ctx, s2_memcpy_d2h(ctx, dev, o.host, o.dev, o.elems * 2));
    OK(ctx, s2_memcpy_d2h(ctx, dev, lse, d_lse, nlse * 4));
    OK(ctx, s2_stream_destroy(ctx, dev, stream));
    if (strstr(c->name, "_wide") && s2_manifest_kernel_fn(s2_attn_kernel_desc(k), S2_ROLE_FWD_WIDE)) {
        s2_attn_sched_stats ss;
        s2_attn_kernel_sched_stats(k, &ss);
        ck_assert_msg(ss.wide == 1, "%s: the wide variant was not chosen", c->name);
    }

    double *ref;
    float *lse_ref;
    s2_tensor rt;
    reference(ctx, p, &q, &kt, &v, c->scale, &ref, &rt, &lse_ref);
    compare cmp;
    compare_out(&o, lse, &rt, lse_ref, c->q_len, 0, c->q_len, &cmp);
    res->o_err = cmp.o_err;
    res->lse_err = cmp.lse_err;
    double tol = c->dt == S2_DTYPE_BF16 ? 2e-2 : 5e-3;
    res->ok = !cmp.nan_out && !cmp.bad_lse && !cmp.pad_written && cmp.o_err <= tol;
    ck_assert_msg(!cmp.nan_out, "%s seed %llu: %lld outputs NaN or non-zero on empty rows", c->name,
                  (unsigned long long)res->seed, (long long)cmp.nan_out);
    ck_assert_msg(!cmp.pad_written, "%s: %lld padding elements of o written", c->name, (long long)cmp.pad_written);
    ck_assert_msg(!cmp.bad_lse, "%s seed %llu: %lld lse values off by > 1e-3 or -inf mismatch", c->name,
                  (unsigned long long)res->seed, (long long)cmp.bad_lse);
    ck_assert_msg(cmp.o_err <= tol, "%s seed %llu: relative error %.3g > %.g", c->name,
                  (unsigned long long)res->seed, cmp.o_err, tol);
    ck_assert_msg(c->pattern != 5 || cmp.empty > 0, "%s: no empty row in a pattern meant to have some", c->name);

    free(ref);
    free(lse_ref);
    free(lse);
    s2_mem_free(ctx, dev, d_lse);
    for (int i = 0; i < 4; i++)
        s2t_tensor_free(ctx, dev, all[i]);
    s2_attn_kernel_free(k);
    s2_pattern_set_free(set);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}

START_TEST(forward_matches_reference)
{
    run_case(_i);
}
END_TEST

/* ---- argument checks on real memory ------------------------------------------------ */

START_TEST(bad_arguments_launch_nothing)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    OK(ctx, s2_device_open(ctx, 0, &dev));
    s2_pattern_set *set = make_pattern(ctx, 3);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_kernel_spec spec = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = 64};
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/checks", cache_root);
    s2_jit_opts opts = {.cache_dir = dir};
    s2_attn_kernel *k = NULL;
    OK(ctx, s2_jit_compile(ctx, dev, p, &spec, &opts, &k, NULL));
    const int64_t S = 256;
    s2t_tensor q, kt, v, o;
    s2t_tensor_new(&q, S2_DTYPE_BF16, false, 1, S, 32, 64, 0);
    s2t_tensor_new(&kt, S2_DTYPE_BF16, false, 1, S, 8, 64, 0);
    s2t_tensor_new(&v, S2_DTYPE_BF16, false, 1, S, 8, 64, 0);
    s2t_tensor_new(&o, S2_DTYPE_BF16, false, 1, S, 32, 64, 0);
    s2_tensor_fill_random(&q.t, q.ext, base_seed, -1, 1);
    s2_tensor_fill_random(&kt.t, kt.ext, base_seed + 1, -1, 1);
    s2_tensor_fill_random(&v.t, v.ext, base_seed + 2, -1, 1);
    s2t_tensor *all[4] = {&q, &kt, &v, &o};
    for (int i = 0; i < 4; i++)
        s2t_tensor_upload(ctx, dev, all[i]);
    s2_devptr small = 0;
    OK(ctx, s2_mem_alloc(ctx, dev, o.elems * 2 - 64 * 2, &small)); /* one row short */
    s2t_dev_poison(ctx, dev, small, o.elems * 2 - 64 * 2);
    void *host = aligned_alloc(256, q.elems * 2);
    ck_assert_ptr_nonnull(host);
    memcpy(host, q.host, q.elems * 2);

    s2_attn_fwd_args good = {.batch = 1, .q_len = S, .kv_len = S, .heads = 32, .kv_heads = 8, .head_dim = 64,
                             .dtype = S2_DTYPE_BF16};
    fill_args(&good, &q, &kt, &v, &o);
    s2_attn_fwd_args a = good;
    a.q = (s2_devptr)(uintptr_t)host;
    ck_assert_int_eq(s2_attn_forward(ctx, k, NULL, &a), S2_ERR_INVALID);
    ck_assert_msg(strstr(s2_ctx_message(ctx), "q: "), "%s", s2_ctx_message(ctx));
    a = good;
    a.k += 8;
    ck_assert_int_eq(s2_attn_forward(ctx, k, NULL, &a), S2_ERR_ALIGNMENT);
    a = good;
    a.o = small;
    ck_assert_int_eq(s2_attn_forward(ctx, k, NULL, &a), S2_ERR_INVALID);
    ck_assert_msg(strstr(s2_ctx_message(ctx), "allocation ends"), "%s", s2_ctx_message(ctx));
    a = good;
    a.v = kt.dev + 64 * 2; /* the extent runs one head past k's allocation */
    ck_assert_int_eq(s2_attn_forward(ctx, k, NULL, &a), S2_ERR_INVALID);
    a = good;
    a.kv_len = S + 1;
    a.q_len = 1;
    ck_assert_int_eq(s2_attn_forward(ctx, k, NULL, &a), S2_ERR_INVALID); /* k too small for kv_len 257 */
    OK(ctx, s2_device_synchronize(ctx, dev));
    s2_attn_sched_stats ss;
    s2_attn_kernel_sched_stats(k, &ss);
    ck_assert_int_eq(ss.misses, 0);
    /* nothing ran: o and the short buffer are still poison */
    OK(ctx, s2_memcpy_d2h(ctx, dev, o.host, o.dev, o.elems * 2));
    uint16_t *sm = malloc(o.elems * 2);
    ck_assert_ptr_nonnull(sm);
    OK(ctx, s2_memcpy_d2h(ctx, dev, sm, small, o.elems * 2 - 64 * 2));
    ck_assert_int_eq(s2t_unpoisoned16(o.host, o.elems), 0);
    ck_assert_int_eq(s2t_unpoisoned16(sm, o.elems - 64), 0);
    /* and the context is healthy: the good call works */
    OK(ctx, s2_attn_forward(ctx, k, NULL, &good));
    OK(ctx, s2_device_synchronize(ctx, dev));
    free(sm);
    free(host);
    s2_mem_free(ctx, dev, small);
    for (int i = 0; i < 4; i++)
        s2t_tensor_free(ctx, dev, all[i]);
    s2_attn_kernel_free(k);
    s2_pattern_set_free(set);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

/* ---- threads ----------------------------------------------------------------------- */

enum { NTHREADS = 4, ITERS = 24, NSHAPES = 10, TS = 512 };
static const int64_t shape_q_len[NSHAPES] = {512, 448, 384, 320, 256, 192, 128, 64, 17, 1};

typedef struct thread_job {
    int id;
    s2_device *dev;
    s2_attn_kernel *k;
    const s2t_tensor *q, *kt, *v;
    const s2_tensor *ref;
    const float *lse_ref;
    double max_err;
    int64_t bad;
    s2_status st;
    char msg[256];
} thread_job;

/* Queries of q_len q are the last q rows of the full tensor, so every shape
 * is checked against rows [TS - q, TS) of one reference. */
static int thread_main(void *arg)
{
    thread_job *j = arg;
    s2_ctx *ctx = s2_ctx_new();
    void *stream = NULL;
    s2t_tensor o;
    s2t_tensor_new(&o, S2_DTYPE_BF16, false, 1, TS, 32, 64, 0);
    s2_devptr d_lse = 0;
    float *lse = malloc(32 * TS * sizeof *lse);
    s2_status st = s2_stream_create(ctx, j->dev, &stream);
    if (st == S2_OK)
        st = s2_mem_alloc(ctx, j->dev, o.elems * 2, &o.dev);
    if (st == S2_OK)
        st = s2_mem_alloc(ctx, j->dev, 32 * TS * 4, &d_lse);
    for (int it = 0; it < ITERS && st == S2_OK; it++) {
        int64_t ql = shape_q_len[(j->id * 3 + it) % NSHAPES];
        o.ext[1] = ql;
        s2_attn_fwd_args a = {.batch = 1, .q_len = ql, .kv_len = TS, .heads = 32, .kv_heads = 8, .head_dim = 64,
                              .dtype = S2_DTYPE_BF16, .lse = d_lse};
        fill_args(&a, j->q, j->kt, j->v, &o);
        a.q += (uint64_t)(TS - ql) * (uint64_t)j->q->t.stride[1] * 2;
        /* lse is [1][32][ql]: its own layout per shape.  Rows of o past ql
         * stay poison: the kernel writes only its queries. */
        if ((st = s2_memset_d8(ctx, j->dev, o.dev, S2T_POISON_BYTE, o.elems * 2)) != S2_OK ||
            (st = s2_memset_d8(ctx, j->dev, d_lse, S2T_POISON_BYTE, 32 * TS * 4)) != S2_OK ||
            (st = s2_attn_forward(ctx, j->k, stream, &a)) != S2_OK ||
            (st = s2_stream_synchronize(ctx, j->dev, stream)) != S2_OK ||
            (st = s2_memcpy_d2h(ctx, j->dev, o.host, o.dev, o.elems * 2)) != S2_OK ||
            (st = s2_memcpy_d2h(ctx, j->dev, lse, d_lse, 32 * (size_t)ql * 4)) != S2_OK)
            break;
        compare c;
        compare_out(&o, lse, j->ref, j->lse_ref, TS, TS - ql, ql, &c);
        j->max_err = fmax(j->max_err, c.o_err);
        j->bad += c.nan_out + c.bad_lse + (c.o_err > 2e-2);
    }
    if (st != S2_OK)
        snprintf(j->msg, sizeof j->msg, "%s", s2_ctx_message(ctx));
    j->st = st;
    s2_mem_free(ctx, j->dev, d_lse);
    s2_mem_free(ctx, j->dev, o.dev);
    s2_stream_destroy(ctx, j->dev, stream);
    free(o.host);
    free(lse);
    s2_ctx_free(ctx);
    return 0;
}

START_TEST(four_threads_share_one_kernel)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    OK(ctx, s2_device_open(ctx, 0, &dev));
    s2_pattern_set *set = make_pattern(ctx, 3);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_kernel_spec spec = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = 64};
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/checks", cache_root);
    s2_jit_opts opts = {.cache_dir = dir};
    s2_attn_kernel *k = NULL;
    OK(ctx, s2_jit_compile(ctx, dev, p, &spec, &opts, &k, NULL));
    s2t_tensor q, kt, v;
    s2t_tensor_new(&q, S2_DTYPE_BF16, false, 1, TS, 32, 64, 0);
    s2t_tensor_new(&kt, S2_DTYPE_BF16, false, 1, TS, 8, 64, 0);
    s2t_tensor_new(&v, S2_DTYPE_BF16, false, 1, TS, 8, 64, 0);
    s2_tensor_fill_random(&q.t, q.ext, base_seed + 11, -1.5, 1.5);
    s2_tensor_fill_random(&kt.t, kt.ext, base_seed + 12, -1.5, 1.5);
    s2_tensor_fill_random(&v.t, v.ext, base_seed + 13, -1, 1);
    s2t_tensor *all[3] = {&q, &kt, &v};
    for (int i = 0; i < 3; i++)
        s2t_tensor_upload(ctx, dev, all[i]);
    double *ref;
    float *lse_ref;
    s2_tensor rt;
    reference(ctx, p, &q, &kt, &v, 0, &ref, &rt, &lse_ref);

    thread_job jobs[NTHREADS];
    thrd_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        jobs[i] = (thread_job){.id = i, .dev = dev, .k = k, .q = &q, .kt = &kt, .v = &v, .ref = &rt,
                               .lse_ref = lse_ref};
        ck_assert_int_eq(thrd_create(&th[i], thread_main, &jobs[i]), thrd_success);
    }
    for (int i = 0; i < NTHREADS; i++)
        thrd_join(th[i], NULL);
    s2_attn_sched_stats ss;
    s2_attn_kernel_sched_stats(k, &ss);
    printf("threads: %d x %d launches over %d shapes: schedule hits %lld, misses %lld, evictions %lld; max err",
           NTHREADS, ITERS, NSHAPES, (long long)ss.hits, (long long)ss.misses, (long long)ss.evictions);
    for (int i = 0; i < NTHREADS; i++)
        printf(" %.2e", jobs[i].max_err);
    printf("\n");
    for (int i = 0; i < NTHREADS; i++) {
        ck_assert_msg(jobs[i].st == S2_OK, "thread %d: %s: %s", i, s2_status_name(jobs[i].st), jobs[i].msg);
        ck_assert_msg(jobs[i].bad == 0, "thread %d (seed %llu): %lld bad launches, max err %.3g", i,
                      (unsigned long long)base_seed, (long long)jobs[i].bad, jobs[i].max_err);
    }
    ck_assert_int_eq(ss.hits + ss.misses, NTHREADS * ITERS);
    ck_assert_int_gt(ss.evictions, 0);
    ck_assert_int_le(ss.cached, S2_ATTN_SCHED_CACHE);
    free(ref);
    free(lse_ref);
    for (int i = 0; i < 3; i++)
        s2t_tensor_free(ctx, dev, all[i]);
    s2_attn_kernel_free(k);
    s2_pattern_set_free(set);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

/* ---- main ------------------------------------------------------------------------- */

/* ---- CUDA graphs ------------------------------------------------------------------- */

/* The Driver API graph calls: graph_api (cu_graph.h). */

/* A forward launched once (its schedule built), then captured into a graph
 * in global capture mode; a shape without a schedule inside the capture is
 * S2_ERR_CAPTURE and leaves the capture intact.  The graph is replayed 20
 * times with new inputs written into the same buffers and o poisoned each
 * time, every replay checked against the float64 reference. */
START_TEST(forward_captured_in_a_graph)
{
    graph_api g;
    graph_api_load(&g);
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    OK(ctx, s2_device_open(ctx, 0, &dev));
    s2_pattern_set *set = make_pattern(ctx, 0);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    const int B = 1, H = p->heads, HK = p->kv_heads, D = 64;
    const int64_t S = 256;
    const s2_device_info *info = s2_device_get_info(dev);
    s2_arch arch;
    OK(ctx, s2_arch_for_device(info->cc_major, info->cc_minor, &arch));
    s2_kernel_spec spec = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = D, .arch = arch};
    s2_artifact *art = NULL;
    OK(ctx, s2_compile_attention(ctx, p, &spec, S2_CUBIN_AUTO, &art));
    s2_attn_kernel *k = NULL;
    OK(ctx, s2_attn_load(ctx, dev, art->cubin, art->cubin_size, p->name, S2_DTYPE_BF16, D, &k));
    s2t_tensor q, kt, v, o;
    s2t_tensor_new(&q, S2_DTYPE_BF16, false, B, S, H, D, 0);
    s2t_tensor_new(&kt, S2_DTYPE_BF16, false, B, S, HK, D, 0);
    s2t_tensor_new(&v, S2_DTYPE_BF16, false, B, S, HK, D, 0);
    s2t_tensor_new(&o, S2_DTYPE_BF16, false, B, S, H, D, 8);
    s2t_tensor *all[4] = {&q, &kt, &v, &o};
    for (int i = 0; i < 4; i++)
        s2t_tensor_upload(ctx, dev, all[i]);
    size_t nlse = (size_t)B * H * S;
    float *lse = malloc(nlse * sizeof *lse);
    s2_devptr d_lse = s2t_dev_alloc_poisoned(ctx, dev, nlse * 4);
    s2_attn_fwd_args a = {.batch = B, .q_len = S, .kv_len = S, .heads = H, .kv_heads = HK, .head_dim = D,
                          .dtype = S2_DTYPE_BF16, .lse = d_lse};
    fill_args(&a, &q, &kt, &v, &o);
    void *stream = NULL;
    OK(ctx, s2_stream_create(ctx, dev, &stream));
    OK(ctx, s2_attn_forward(ctx, k, stream, &a));   /* builds the schedule: outside the capture */
    OK(ctx, s2_stream_synchronize(ctx, dev, stream));

    CU_OK(g.push((CUcontext)s2_device_cu_context(dev)));
    CU_OK(g.begin((CUstream)stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    s2_status st_new_shape = S2_OK;
    s2_status st = s2_attn_forward(ctx, k, stream, &a);
    char msg[512] = "";
    if (st == S2_OK) {
        s2_attn_fwd_args b = a;
        b.q_len = S - 64;   /* a shape never launched: no schedule */
        st_new_shape = s2_attn_forward(ctx, k, stream, &b);
        snprintf(msg, sizeof msg, "%s", s2_ctx_message(ctx));
    } else {
        snprintf(msg, sizeof msg, "%s", s2_ctx_message(ctx));
    }
    CUgraph graph = NULL;
    CUresult end = g.end((CUstream)stream, &graph);
    ck_assert_msg(st == S2_OK, "forward inside capture: %s", msg);
    ck_assert_msg(st_new_shape == S2_ERR_CAPTURE, "unbuilt shape inside capture gave %s: %s",
                  s2_status_name(st_new_shape), msg);
    ck_assert_msg(end == CUDA_SUCCESS && graph, "cuStreamEndCapture: %d (the capture was invalidated)", (int)end);
    CUgraphExec exec = NULL;
    CU_OK(g.instantiate(&exec, graph, 0));
    CUcontext popped;
    CU_OK(g.pop(&popped));

    enum { REPLAYS = 20 };
    double worst = 0;
    for (int r = 0; r < REPLAYS; r++) {
        uint64_t seed = base_seed * 31 + (uint64_t)r;
        s2_tensor_fill_random(&q.t, q.ext, seed, -1.5, 1.5);
        s2_tensor_fill_random(&kt.t, kt.ext, seed + 1, -1.5, 1.5);
        s2_tensor_fill_random(&v.t, v.ext, seed + 2, -1.0, 1.0);
        for (int i = 0; i < 3; i++)
            OK(ctx, s2_memcpy_h2d(ctx, dev, all[i]->dev, all[i]->host, all[i]->elems * 2));
        s2t_tensor_poison(&o);
        s2t_tensor_upload(ctx, dev, &o);
        s2t_dev_poison(ctx, dev, d_lse, nlse * 4);
        CU_OK(g.push((CUcontext)s2_device_cu_context(dev)));
        CU_OK(g.launch(exec, (CUstream)stream));
        CU_OK(g.pop(&popped));
        OK(ctx, s2_stream_synchronize(ctx, dev, stream));
        OK(ctx, s2_memcpy_d2h(ctx, dev, o.host, o.dev, o.elems * 2));
        OK(ctx, s2_memcpy_d2h(ctx, dev, lse, d_lse, nlse * 4));
        double *ref;
        float *lse_ref;
        s2_tensor rt;
        reference(ctx, p, &q, &kt, &v, 0, &ref, &rt, &lse_ref);
        compare cmp;
        compare_out(&o, lse, &rt, lse_ref, S, 0, S, &cmp);
        ck_assert_msg(!cmp.nan_out && !cmp.bad_lse && !cmp.pad_written && cmp.o_err <= 2e-2,
                      "replay %d (seed %llu): o err %.3g, %lld NaN, %lld bad lse, %lld padding written", r,
                      (unsigned long long)seed, cmp.o_err, (long long)cmp.nan_out, (long long)cmp.bad_lse,
                      (long long)cmp.pad_written);
        worst = fmax(worst, cmp.o_err);
        free(ref);
        free(lse_ref);
    }
    printf("graph: forward captured (global mode), unbuilt shape inside it S2_ERR_CAPTURE; %d replays with new "
           "inputs, worst o error %.3g\n", REPLAYS, worst);
    CU_OK(g.exec_destroy(exec));
    CU_OK(g.destroy(graph));
    OK(ctx, s2_stream_destroy(ctx, dev, stream));
    free(lse);
    s2_mem_free(ctx, dev, d_lse);
    for (int i = 0; i < 4; i++)
        s2t_tensor_free(ctx, dev, all[i]);
    s2_attn_kernel_free(k);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void print_summary(void)
{
    printf("\n%-30s %-5s %-5s %4s %4s %2s %9s %9s %9s %9s %s\n", "case", "dtype", "lay", "bm", "bn", "st",
           "o_relerr", "lse_err", "cold_ms", "warm_ms", "result");
    for (int i = 0; i < NUM_CASES; i++) {
        const case_result *r = &results[i];
        const gpu_case *c = &cases[i];
        if (!r->ran)
            continue;
        printf("%-30s %-5s %-5s %4d %4d %2d %9.2e %9.2e %9.1f %9.1f %s\n", c->name, s2_dtype_name(c->dt),
               layout_names[c->layout], r->spec.block_m, r->spec.block_n, r->spec.num_stages, r->o_err, r->lse_err,
               r->cold_ms, r->warm_ms, r->ok ? "PASS" : "FAIL");
    }
}

int main(void)
{
    s2t_gpu g;
    int rc = s2t_gpu_start("JIT for", NULL, &g);
    if (rc != 0)
        return rc;
    base_seed = g.seed;
    const char *tmp = getenv("TMPDIR");
    snprintf(cache_root, sizeof cache_root, "%s/s2attnrt-gpu-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(cache_root)) {
        perror("mkdtemp");
        return 1;
    }

    Suite *s = suite_create("attnrt_gpu");
    TCase *tc = tcase_create("fwd");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, forward_matches_reference, 0, NUM_CASES);
    tcase_add_test(tc, bad_arguments_launch_nothing);
    tcase_add_test(tc, four_threads_share_one_kernel);
    tcase_add_test(tc, forward_captured_in_a_graph);
    suite_add_tcase(s, tc);
    int failed = s2t_run_nofork(s);
    print_summary();
    nftw(cache_root, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    return failed ? 1 : 0;
}
