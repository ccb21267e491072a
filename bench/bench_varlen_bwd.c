/* The variable-length backward on packed odd lengths against the same
 * sequences as one padded batch (batch n, every sequence padded to the
 * longest; the varlen target: within 10% of it) and against a uniform batch
 * of the same token count (n sequences of total / n tokens, rounded to 64).
 * Plans (their workspace takes the dS path where the module has it), bf16,
 * 16 heads (GQA 4), the s2 local 8 / stride 16 pattern at block 64.  Prints
 * the median of --reps timed backward launches (events, inputs resident).
 * "no GPU: skipped" without one.
 *   bench_varlen_bwd [--reps N] [--d 64|128] [--lens A,B,...] */
#include "rt_cuda.h"
#include "s2c/attn_runtime.h"
#include "s2c/compile.h"
#include "s2c/jit.h"
#include "s2c/pattern.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAXN = 64, H = 16, HK = 4 };

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define CHECK(call)                                                                                           \
    do {                                                                                                      \
        if ((st = (call)) != S2_OK) {                                                                         \
            fprintf(stderr, "bench_varlen_bwd: %s: %s\n", #call, s2_ctx_message(ctx));                        \
            return st;                                                                                        \
        }                                                                                                     \
    } while (0)

/* Median ms of reps backward launches of a (uniform when seqs is NULL). */
static s2_status time_bwd(s2_ctx *ctx, s2_device *dev, s2_attn_kernel *k, s2_attn_bwd_args *a, int reps, double *med)
{
    s2_status st;
    s2_attn_plan *plan = NULL;
    CHECK(s2_attn_plan_new(ctx, k, &plan));
    CHECK(s2_attn_plan_add_backward(ctx, plan, a));
    CHECK(s2_attn_plan_prepare(ctx, plan, NULL));
    s2_event *e0 = NULL, *e1 = NULL;
    CHECK(s2_event_create(ctx, dev, &e0));
    CHECK(s2_event_create(ctx, dev, &e1));
    double *t = malloc((size_t)reps * sizeof *t);
    if (!t)
        return S2_ERR_NOMEM;
    for (int i = 0; i < 3; i++)
        CHECK(s2_attn_plan_backward(ctx, plan, NULL, a));
    for (int i = 0; i < reps; i++) {
        float ms = 0;
        CHECK(s2_event_record(ctx, e0, NULL));
        CHECK(s2_attn_plan_backward(ctx, plan, NULL, a));
        CHECK(s2_event_record(ctx, e1, NULL));
        CHECK(s2_device_synchronize(ctx, dev));
        CHECK(s2_event_elapsed_ms(ctx, e0, e1, &ms));
        t[i] = ms;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    *med = t[reps / 2];
    free(t);
    s2_event_free(e0);
    s2_event_free(e1);
    s2_attn_plan_free(plan);
    return S2_OK;
}

/* Device tensors of rows token rows, zero-filled but for lse (0: finite). */
static s2_status alloc_args(s2_ctx *ctx, s2_device *dev, int batch, int64_t s, int D, s2_attn_bwd_args *a,
                            s2_devptr bufs[10])
{
    s2_status st;
    int64_t rows = (int64_t)batch * s;
    size_t qb = (size_t)rows * H * D * 2, kb = (size_t)rows * HK * D * 2, lb = (size_t)rows * H * 4;
    size_t sizes[10] = {qb, kb, kb, qb, qb, lb, qb, kb, kb, 0};
    for (int i = 0; i < 9; i++) {
        CHECK(s2_mem_alloc(ctx, dev, sizes[i], &bufs[i]));
        CHECK(s2_memset_d8(ctx, dev, bufs[i], 0, sizes[i]));
    }
    *a = (s2_attn_bwd_args){.batch = batch, .q_len = s, .kv_len = s, .heads = H, .kv_heads = HK, .head_dim = D,
                            .dtype = S2_DTYPE_BF16, .q = bufs[0], .k = bufs[1], .v = bufs[2], .o = bufs[3],
                            .d_o = bufs[4], .lse = bufs[5], .dq = bufs[6], .dk = bufs[7], .dv = bufs[8]};
    s2_attn_bwd_args_bshd(a);
    return S2_OK;
}

static void free_args(s2_ctx *ctx, s2_device *dev, s2_devptr bufs[10])
{
    for (int i = 0; i < 9; i++)
        s2_mem_free(ctx, dev, bufs[i]);
}

static s2_status bench(s2_ctx *ctx, s2_device *dev, int D, const int *lens, int n, int reps)
{
    s2_status st;
    s2_local_stride_args pa = {.name = "s2_l8v16", .num_heads = H, .num_kv_heads = HK, .block_size = 64,
                               .local_blocks = 8, .vert_stride = 16, .causal = true};
    s2_pattern_set *set = NULL;
    CHECK(s2_pattern_from_args(ctx, &pa, &set));
    s2_attn_kernel *k = NULL;
    s2_kernel_spec spec = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = D};
    CHECK(s2_jit_compile(ctx, dev, s2_pattern_set_get(set, 0), &spec, NULL, &k, NULL));
    int32_t cu[MAXN + 1] = {0};
    int64_t max_len = 0;
    for (int i = 0; i < n; i++) {
        cu[i + 1] = cu[i] + lens[i];
        max_len = lens[i] > max_len ? lens[i] : max_len;
    }
    int64_t total = cu[n], even = (total / n + 63) / 64 * 64;
    s2_attn_seq seqs[MAXN];
    CHECK(s2_attn_seqs_packed(ctx, cu, NULL, n, seqs));
    s2_attn_seqs *sq = NULL;
    CHECK(s2_attn_seqs_new(ctx, dev, seqs, n, &sq));
    double t[3];
    s2_devptr bufs[10];
    s2_attn_bwd_args a;
    /* varlen: [total, H, D] tensors, batch strides unused */
    CHECK(alloc_args(ctx, dev, 1, total, D, &a, bufs));
    a.batch = n, a.seqs = sq;
    CHECK(time_bwd(ctx, dev, k, &a, reps, &t[0]));
    free_args(ctx, dev, bufs);
    /* the same sequences padded to the longest */
    CHECK(alloc_args(ctx, dev, n, max_len, D, &a, bufs));
    CHECK(time_bwd(ctx, dev, k, &a, reps, &t[1]));
    free_args(ctx, dev, bufs);
    /* the same tokens in n equal sequences */
    CHECK(alloc_args(ctx, dev, n, even, D, &a, bufs));
    CHECK(time_bwd(ctx, dev, k, &a, reps, &t[2]));
    free_args(ctx, dev, bufs);
    printf("d%d, %d sequences, %lld tokens (longest %lld):\n", D, n, (long long)total, (long long)max_len);
    printf("  varlen                   %8.3f ms\n", t[0]);
    printf("  padded %2d x %-6lld        %8.3f ms   varlen / padded %.3f (target <= 1.10)\n", n, (long long)max_len,
           t[1], t[0] / t[1]);
    printf("  uniform %2d x %-6lld       %8.3f ms   varlen / uniform %.3f\n", n, (long long)even, t[2], t[0] / t[2]);
    s2_attn_seqs_free(sq);
    s2_attn_kernel_free(k);
    s2_pattern_set_free(set);
    return S2_OK;
}

int main(int argc, char **argv)
{
    int reps = 20, D = 128, n = 0, lens[MAXN];
    static const int dflt[] = {1, 17, 300, 1000, 4093, 257, 2049, 65, 8191, 777};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--d")) D = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--lens")) {
            for (char *p = argv[i + 1]; *p && n < MAXN; n++) {
                lens[n] = (int)strtol(p, &p, 10);
                if (*p == ',')
                    p++;
            }
        } else {
            fprintf(stderr, "usage: bench_varlen_bwd [--reps N] [--d 64|128] [--lens A,B,...]\n");
            return 2;
        }
    }
    if (!n) {
        n = (int)(sizeof dflt / sizeof dflt[0]);
        memcpy(lens, dflt, sizeof dflt);
    }
    if (reps < 1 || (D != 64 && D != 128)) {
        fprintf(stderr, "bench_varlen_bwd: reps >= 1, d 64 or 128\n");
        return 2;
    }
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    if (s2_device_open(ctx, 0, &dev) != S2_OK) {
        printf("no GPU: skipped (%s)\n", s2_ctx_message(ctx));
        s2_ctx_free(ctx);
        return 0;
    }
    s2_status st = bench(ctx, dev, D, lens, n, reps);
    s2_device_free(dev);
    s2_ctx_free(ctx);
    return st == S2_OK ? 0 : 1;
}
