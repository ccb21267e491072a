/* bench_launch: host time of one launch call, for the forward, the decode
 * and the backward, after s2_attn_plan_prepare (the plan path), through the
 * kernel's own path (s2_attn_forward & co.: the driver's pointer checks, the
 * schedule cache), and as cuLaunchKernel of the very launches the plan makes.
 *
 * Shapes (bf16, D 128): forward B 1, H 32, S 4096, pattern s2-l8v16.yaml;
 * decode B 16, one new token after --past tokens (default 8192), page 64,
 * pattern decode-l16v8.yaml, split-KV as s2_attn_decode picks it (the plan's
 * workspace; the unplanned path its own); backward B 1, H 32, S 1024,
 * s2-l8v16.yaml, the dS-path workspace (the plan's; the unplanned path its
 * own of s2_attn_backward_workspace's size).  Inputs are a constant: the GPU
 * results are not looked at.
 *
 * Method: the device's context is made current on this thread for the whole
 * run (as in a framework).  Per path, one batch of --batch calls as a warm-up,
 * then --calls calls in batches of --batch on one stream, the stream
 * synchronised between batches (the launch queue never fills); each call is
 * timed alone with clock_gettime(CLOCK_MONOTONIC) around the C call (host
 * time only).  Median and p90 over every timed call.
 * The cuLaunchKernel rows: one plan launch is captured into a CUDA graph and
 * its kernel nodes read back (function, grid, block, shared memory, the
 * parameter array), then cuLaunchKernel is timed on exactly those, every
 * kernel of the call in order (the backward makes several launches per call).
 * "empty kernel" is cuLaunchKernel of an empty kernel from a tiny PTX, one
 * 8-byte parameter: the driver's floor.
 * Target (the plan issue): median <= 5 us per forward or decode call after
 * prepare.
 *
 * Without a CUDA driver or device it prints "no GPU: skipped" and exits 0;
 * any s2c or driver error exits 1 with its message.
 *
 *   bench_launch [--calls N] [--batch N] [--past N] [--patterns DIR] [--csv] */
#include "bench_cu.h"
#include "rt_cuda.h"
#include "s2c/attn_runtime.h"
#include "s2c/jit.h"
#include "s2c/pattern.h"
#include "s2c/runtime.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef S2C_BENCH_PATTERNS
#define S2C_BENCH_PATTERNS "patterns"
#endif

enum { D = 128, H = 32, MAX_ROWS = 16, PAGE = 64 };

typedef struct opts {
    int calls, batch;
    int64_t past;
    const char *patterns;
    bool csv;
} opts;

typedef struct row {
    const char *op, *path;
    int launches;                /* kernel launches per call */
    double med, p90;
} row;

static row rows[MAX_ROWS];
static int nrows;
static bench_cu cu;
static s2_ctx *ctx;

static bool csv_out;

/* The rows so far, and the summary line (also before an error exit). */
static void print_table(void)
{
    if (nrows == 0)
        return;
    printf("\n| op | path | launches/call | median us | p90 us | target (plan: median <= 5 us) |\n");
    printf("|---|---|---|---|---|---|\n");
    for (int i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        bool judged = !strncmp(r->path, "plan", 4) && strcmp(r->op, "backward");
        printf("| %s | %s | %d | %.2f | %.2f | %s |\n", r->op, r->path, r->launches, r->med, r->p90,
               judged ? (r->med <= 5.0 ? "met" : "missed") : "-");
    }
    if (csv_out) {
        printf("\nop,path,launches,median_us,p90_us\n");
        for (int i = 0; i < nrows; i++)
            printf("%s,%s,%d,%.3f,%.3f\n", rows[i].op, rows[i].path, rows[i].launches, rows[i].med, rows[i].p90);
    }
    /* one line for the suite's summary */
    double pf = 0, pd = 0, floor_us = 0;
    for (int i = 0; i < nrows; i++) {
        if (!strncmp(rows[i].path, "plan", 4) && !strcmp(rows[i].op, "forward"))
            pf = rows[i].med;
        if (!strncmp(rows[i].path, "plan", 4) && !strcmp(rows[i].op, "decode"))
            pd = rows[i].med;
        if (!strcmp(rows[i].op, "empty"))
            floor_us = rows[i].med;
    }
    printf("summary: plan launch median forward %.2f us, decode %.2f us (target <= 5 us: %s); empty-kernel "
           "cuLaunchKernel %.2f us\n", pf, pd, pf > 0 && pd > 0 ? pf <= 5.0 && pd <= 5.0 ? "met" : "missed" : "not measured",
           floor_us);
    fflush(stdout);
}

static void die_s2(const char *what, s2_status st)
{
    print_table();
    fprintf(stderr, "bench_launch: %s: %s: %s\n", what, s2_status_name(st), s2_ctx_message(ctx));
    exit(1);
}

static void die_cu(const char *what, CUresult r)
{
    print_table();
    fprintf(stderr, "bench_launch: %s: %s\n", what, bench_cu_error(&cu, r));
    exit(1);
}

/* ---- the calls being timed ------------------------------------------------ */
typedef enum { OP_FWD, OP_DEC, OP_BWD } op_kind;
typedef enum { PATH_PLAN, PATH_UNPLANNED, PATH_RAW } path_kind;

typedef struct target {
    op_kind op;
    path_kind path;
    void *stream;
    s2_attn_kernel *k;
    s2_attn_plan *plan;
    const s2_attn_fwd_args *fa;
    const s2_attn_decode_args *da;
    const s2_attn_bwd_args *ba;
    int nk;                                        /* PATH_RAW: the captured launches */
    const CUDA_KERNEL_NODE_PARAMS_v2 *kp;
} target;

/* One call; a driver error of the raw path is reported as S2_ERR_CUDA. */
static s2_status call_once(const target *t)
{
    if (t->path == PATH_RAW) {
        for (int i = 0; i < t->nk; i++) {
            const CUDA_KERNEL_NODE_PARAMS_v2 *p = &t->kp[i];
            CUresult r = cu.LaunchKernel(p->func, p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX, p->blockDimY,
                                         p->blockDimZ, p->sharedMemBytes, (CUstream)t->stream, p->kernelParams, NULL);
            if (r != CUDA_SUCCESS)
                return s2_fail(ctx, S2_ERR_CUDA, "cuLaunchKernel: %s", bench_cu_error(&cu, r));
        }
        return S2_OK;
    }
    bool plan = t->path == PATH_PLAN;
    switch (t->op) {
    case OP_FWD:
        return plan ? s2_attn_plan_forward(ctx, t->plan, t->stream, t->fa) : s2_attn_forward(ctx, t->k, t->stream, t->fa);
    case OP_DEC:
        return plan ? s2_attn_plan_decode(ctx, t->plan, t->stream, t->da) : s2_attn_decode(ctx, t->k, t->stream, t->da);
    case OP_BWD:
        return plan ? s2_attn_plan_backward(ctx, t->plan, t->stream, t->ba)
                    : s2_attn_backward(ctx, t->k, t->stream, t->ba);
    }
    return S2_ERR_INTERNAL;
}

static void time_target(const opts *o, const target *t, const char *op, const char *path, int launches)
{
    int batches = o->calls / o->batch;
    int n = batches * o->batch;
    double *us = malloc((size_t)n * sizeof *us);
    if (!us) {
        fprintf(stderr, "bench_launch: out of memory\n");
        exit(1);
    }
    char what[128];
    snprintf(what, sizeof what, "%s, %s", op, path);
    for (int i = 0; i < o->batch; i++)                  /* warm-up */
        S2(what, call_once(t));
    CU(what, cu.StreamSynchronize((CUstream)t->stream));
    int k = 0;
    for (int b = 0; b < batches; b++) {
        for (int i = 0; i < o->batch; i++) {
            double t0 = bench_now_us();
            s2_status st = call_once(t);
            double t1 = bench_now_us();
            if (st != S2_OK)
                die_s2(what, st);
            us[k++] = t1 - t0;
        }
        CU(what, cu.StreamSynchronize((CUstream)t->stream));
    }
    row *r = &rows[nrows++];
    *r = (row){op, path, launches, bench_quantile(us, n, 0.5), bench_quantile(us, n, 0.9)};
    printf("  %-9s %-32s %d kernel%s  median %7.2f us  p90 %7.2f us\n", op, path, launches,
           launches == 1 ? " " : "s", r->med, r->p90);
    fflush(stdout);
    free(us);
}

/* Capture one plan call into a graph and read back its kernel launches
 * (*g keeps the parameter arrays alive: destroy it when done). */
static int capture_launches(const target *plan_call, CUgraph *g, CUDA_KERNEL_NODE_PARAMS_v2 *kp, const char *op)
{
    char what[96], err[256];
    snprintf(what, sizeof what, "%s: capture of one plan launch", op);
    CU(what, cu.StreamBeginCapture((CUstream)plan_call->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    s2_status st = call_once(plan_call);
    CUresult r = cu.StreamEndCapture((CUstream)plan_call->stream, g);
    if (st != S2_OK)
        die_s2(what, st);
    if (r != CUDA_SUCCESS)
        die_cu(what, r);
    int n = bench_graph_kernels(&cu, *g, kp, BENCH_MAX_NODES, err, sizeof err);
    if (n <= 0) {
        fprintf(stderr, "bench_launch: %s: %s\n", what, n == 0 ? "no kernel launched" : err);
        exit(1);
    }
    return n;
}

/* plan, unplanned and cuLaunchKernel rows of one op */
static void time_op(const opts *o, op_kind op, const char *name, void *stream, s2_attn_kernel *k, s2_attn_plan *plan,
                    const void *plan_args, const void *own_args)
{
    target t = {.op = op, .stream = stream, .k = k, .plan = plan};
    const void **slot = op == OP_FWD ? (const void **)&t.fa : op == OP_DEC ? (const void **)&t.da : (const void **)&t.ba;
    *slot = plan_args;
    t.path = PATH_PLAN;
    CUgraph g = NULL;
    CUDA_KERNEL_NODE_PARAMS_v2 kp[BENCH_MAX_NODES];
    int nk = capture_launches(&t, &g, kp, name);
    time_target(o, &t, name, "plan (after prepare)", nk);
    *slot = own_args;
    t.path = PATH_UNPLANNED;
    time_target(o, &t, name, "unplanned (s2_attn_*)", nk);
    t.path = PATH_RAW;
    t.nk = nk;
    t.kp = kp;
    time_target(o, &t, name, "cuLaunchKernel (same launches)", nk);
    CU("cuGraphDestroy", cu.GraphDestroy(g));
}

static const char empty_ptx[] = ".version 7.0\n.target sm_70\n.address_size 64\n"
                                ".visible .entry s2_bench_empty(.param .u64 p0)\n{\n\tret;\n}\n";

static s2_attn_kernel *jit(s2_device *dev, const s2_pattern *p, s2_kernel_kind kind, const char *what)
{
    s2_jit_opts jo = {.no_cache = true};
    s2_kernel_spec spec = {.kind = kind, .dtype = S2_DTYPE_BF16, .head_dim = D};
    s2_attn_kernel *k = NULL;
    double t0 = bench_now_us();
    S2(what, s2_jit_compile(ctx, dev, p, &spec, &jo, &k, NULL));
    printf("  %s: %s, JIT %.0f ms\n", what, s2_attn_kernel_desc(k)->name, (bench_now_us() - t0) / 1e3);
    return k;
}

static const s2_pattern *load_pattern(const opts *o, const char *file, s2_pattern_set **set)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", o->patterns, file);
    S2(path, s2_pattern_load(ctx, path, set));
    return s2_pattern_set_get(*set, 0);
}

static s2_devptr alloc_fill(s2_device *dev, size_t bytes, uint8_t v, const char *what)
{
    s2_devptr p = 0;
    S2(what, s2_mem_alloc(ctx, dev, bytes, &p));
    S2(what, s2_memset_d8(ctx, dev, p, v, bytes));
    return p;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_launch [--calls N] [--batch N] [--past N] [--patterns DIR] [--csv]\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *env = getenv("S2C_PATTERNS");
    opts o = {.calls = 2000, .batch = 100, .past = 8192, .patterns = env && *env ? env : S2C_BENCH_PATTERNS};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--csv")) {
            o.csv = true;
            continue;
        }
        if (i + 1 >= argc)
            return usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--calls")) o.calls = atoi(v);
        else if (!strcmp(a, "--batch")) o.batch = atoi(v);
        else if (!strcmp(a, "--past")) o.past = atoll(v);
        else if (!strcmp(a, "--patterns")) o.patterns = v;
        else return usage();
    }
    if (o.batch < 1 || o.batch > 1000 || o.calls < o.batch || o.calls > 10000000 || o.past < 1 || o.past > (1 << 20))
        return usage();

    csv_out = o.csv;
    ctx = s2_ctx_new();
    if (!ctx)
        return 1;
    int count = 0;
    s2_device *dev = NULL;
    if (s2_device_count(ctx, &count) != S2_OK || count == 0 || s2_device_open(ctx, 0, &dev) != S2_OK) {
        printf("no GPU: skipped (%s)\n", s2_ctx_message(ctx));
        s2_ctx_free(ctx);
        return 0;
    }
    char err[512];
    if (!bench_cu_load(&cu, err, sizeof err)) {
        fprintf(stderr, "bench_launch: %s\n", err);
        return 1;
    }
    const s2_device_info *info = s2_device_get_info(dev);
    int drv = 0;
    s2_cuda_driver_version(ctx, &drv);
    printf("device %s (cc %d.%d), driver %d; bf16, D %d; %d timed calls per row in batches of %d, stream synchronised "
           "between batches; host time of the C call only\n",
           info->name, info->cc_major, info->cc_minor, drv, D, o.calls - o.calls % o.batch, o.batch);
    /* the device's context current for the whole run, as in a framework */
    CU("cuCtxPushCurrent", cu.CtxPush((CUcontext)s2_device_cu_context(dev)));
    void *stream = NULL;
    S2("stream", s2_stream_create(ctx, dev, &stream));

    s2_pattern_set *fset = NULL, *dset = NULL;
    const s2_pattern *fp = load_pattern(&o, "s2-l8v16.yaml", &fset);
    const s2_pattern *dp = load_pattern(&o, "decode-l16v8.yaml", &dset);
    s2_attn_kernel *kf = jit(dev, fp, S2_KERNEL_FWD, "forward kernel");
    s2_attn_kernel *kd = jit(dev, dp, S2_KERNEL_DECODE, "decode kernel");
    s2_attn_kernel *kb = jit(dev, fp, S2_KERNEL_BWD, "backward kernel");

    /* ---- the driver's floor: an empty kernel ---- */
    {
        CUmodule m = NULL;
        CUfunction f = NULL;
        CU("empty kernel: cuModuleLoadData", cu.ModuleLoadData(&m, empty_ptx));
        CU("empty kernel: cuModuleGetFunction", cu.ModuleGetFunction(&f, m, "s2_bench_empty"));
        static uint64_t arg;
        static void *params[] = {&arg};
        CUDA_KERNEL_NODE_PARAMS_v2 kp = {.func = f, .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
                                         .blockDimY = 1, .blockDimZ = 1, .kernelParams = params};
        target t = {.path = PATH_RAW, .stream = stream, .nk = 1, .kp = &kp};
        printf("driver floor:\n");
        time_target(&o, &t, "empty", "cuLaunchKernel (empty kernel)", 1);
        S2("empty kernel", s2_stream_synchronize(ctx, dev, stream));
        CU("cuModuleUnload", cu.ModuleUnload(m));
    }

    /* ---- forward: B 1, H 32, S 4096 ---- */
    {
        const int B = 1;
        const int64_t S = 4096;
        size_t elems = (size_t)B * S * H * D;
        s2_attn_fwd_args a = {.batch = B, .q_len = S, .kv_len = S, .heads = H, .kv_heads = fp->kv_heads,
                              .head_dim = D, .dtype = S2_DTYPE_BF16};
        a.q = alloc_fill(dev, elems * 2, 0x3c, "forward q");
        a.k = alloc_fill(dev, (size_t)B * S * fp->kv_heads * D * 2, 0x3c, "forward k");
        a.v = alloc_fill(dev, (size_t)B * S * fp->kv_heads * D * 2, 0x3c, "forward v");
        a.o = alloc_fill(dev, elems * 2, 0, "forward o");
        a.lse = alloc_fill(dev, (size_t)B * H * S * 4, 0, "forward lse");
        s2_attn_fwd_args_bshd(&a);
        s2_attn_plan *plan = NULL;
        S2("forward plan", s2_attn_plan_new(ctx, kf, &plan));
        S2("forward plan", s2_attn_plan_add_forward(ctx, plan, &a));
        S2("forward plan", s2_attn_plan_prepare(ctx, plan, stream));
        S2("forward plan", s2_stream_synchronize(ctx, dev, stream));
        printf("forward B %d, H %d, S %lld, %s:\n", B, H, (long long)S, fp->name);
        time_op(&o, OP_FWD, "forward", stream, kf, plan, &a, &a);
        S2("forward", s2_stream_synchronize(ctx, dev, stream));
        s2_attn_plan_free(plan);
        s2_devptr all[] = {a.q, a.k, a.v, a.o, a.lse};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            s2_mem_free(ctx, dev, all[i]);
    }

    /* ---- decode: B 16, 1 new token after o.past ---- */
    {
        const int B = 16, HK = dp->kv_heads;
        int64_t len = o.past + 1, per_seq = s2_cdiv(len, PAGE), pages = per_seq * B;
        size_t page_bytes = (size_t)PAGE * HK * D * 2;
        int32_t *table = malloc(sizeof(int32_t) * (size_t)pages), lens[16];
        if (!table)
            return 1;
        for (int64_t i = 0; i < pages; i++)
            table[i] = (int32_t)i;
        for (int b = 0; b < B; b++)
            lens[b] = (int32_t)len;
        s2_attn_decode_args a = {.batch = B, .n_new = 1, .heads = dp->heads, .kv_heads = HK, .head_dim = D,
                                 .dtype = S2_DTYPE_BF16, .num_pages = pages, .page_size = PAGE,
                                 .table_stride = {per_seq, 0}, .max_pages_per_seq = per_seq, .max_seq_len = len,
                                 .q_stride = {(int64_t)dp->heads * D, (int64_t)dp->heads * D, D},
                                 .o_stride = {(int64_t)dp->heads * D, (int64_t)dp->heads * D, D},
                                 .k_stride = {(int64_t)PAGE * HK * D, (int64_t)HK * D, D},
                                 .v_stride = {(int64_t)PAGE * HK * D, (int64_t)HK * D, D}};
        size_t qb = (size_t)B * dp->heads * D * 2;
        a.q = alloc_fill(dev, qb, 0x3c, "decode q");
        a.o = alloc_fill(dev, qb, 0, "decode o");
        a.k_pages = alloc_fill(dev, page_bytes * (size_t)pages, 0x3c, "decode k pages");
        a.v_pages = alloc_fill(dev, page_bytes * (size_t)pages, 0x3c, "decode v pages");
        a.block_table = alloc_fill(dev, sizeof(int32_t) * (size_t)pages, 0, "decode table");
        S2("decode table", s2_memcpy_h2d(ctx, dev, a.block_table, table, sizeof(int32_t) * (size_t)pages));
        a.seq_lens = alloc_fill(dev, sizeof lens, 0, "decode seq_lens");
        S2("decode seq_lens", s2_memcpy_h2d(ctx, dev, a.seq_lens, lens, sizeof lens));
        free(table);
        s2_attn_decode_args own = a;
        size_t wsb = 0;
        int splits = 1;
        S2("decode workspace", s2_attn_decode_workspace(ctx, kd, &own, &wsb));
        S2("decode splits", s2_attn_decode_splits(ctx, kd, &own, &splits));
        if (wsb)
            own.workspace = alloc_fill(dev, wsb, 0, "decode workspace");
        s2_attn_plan *plan = NULL;
        S2("decode plan", s2_attn_plan_new(ctx, kd, &plan));
        S2("decode plan", s2_attn_plan_add_decode(ctx, plan, &a));
        S2("decode plan", s2_attn_plan_prepare(ctx, plan, stream));
        S2("decode plan", s2_stream_synchronize(ctx, dev, stream));
        printf("decode B %d, H %d, 1 new token after %lld, page %d, %d splits, %s:\n", B, dp->heads,
               (long long)o.past, PAGE, splits, dp->name);
        time_op(&o, OP_DEC, "decode", stream, kd, plan, &a, &own);
        S2("decode", s2_stream_synchronize(ctx, dev, stream));
        s2_attn_plan_free(plan);
        s2_devptr all[] = {a.q, a.o, a.k_pages, a.v_pages, a.block_table, a.seq_lens, own.workspace};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            s2_mem_free(ctx, dev, all[i]);
    }

    /* ---- backward: B 1, H 32, S 1024 ---- */
    {
        const int B = 1, HK = fp->kv_heads;
        const int64_t S = 1024;
        size_t qe = (size_t)B * S * H * D * 2, ke = (size_t)B * S * HK * D * 2;
        s2_attn_bwd_args a = {.batch = B, .q_len = S, .kv_len = S, .heads = H, .kv_heads = HK, .head_dim = D,
                              .dtype = S2_DTYPE_BF16};
        a.q = alloc_fill(dev, qe, 0x3c, "backward q");
        a.k = alloc_fill(dev, ke, 0x3c, "backward k");
        a.v = alloc_fill(dev, ke, 0x3c, "backward v");
        a.o = alloc_fill(dev, qe, 0x3c, "backward o");
        a.d_o = alloc_fill(dev, qe, 0x3c, "backward dO");
        a.lse = alloc_fill(dev, (size_t)B * H * S * 4, 0, "backward lse");
        a.dq = alloc_fill(dev, qe, 0, "backward dq");
        a.dk = alloc_fill(dev, ke, 0, "backward dk");
        a.dv = alloc_fill(dev, ke, 0, "backward dv");
        s2_attn_bwd_args_bshd(&a);
        s2_attn_bwd_args own = a;
        bool ds = false;
        S2("backward workspace", s2_attn_backward_workspace(ctx, kb, B, S, S, &own.workspace_bytes, &ds));
        own.workspace = alloc_fill(dev, own.workspace_bytes, 0, "backward workspace");
        s2_attn_plan *plan = NULL;
        S2("backward plan", s2_attn_plan_new(ctx, kb, &plan));
        S2("backward plan", s2_attn_plan_add_backward(ctx, plan, &a));
        S2("backward plan", s2_attn_plan_prepare(ctx, plan, stream));
        S2("backward plan", s2_stream_synchronize(ctx, dev, stream));
        printf("backward B %d, H %d, S %lld, %s, %s:\n", B, H, (long long)S, fp->name, ds ? "dS path" : "no dS path");
        time_op(&o, OP_BWD, "backward", stream, kb, plan, &a, &own);
        S2("backward", s2_stream_synchronize(ctx, dev, stream));
        s2_attn_plan_free(plan);
        s2_devptr all[] = {a.q, a.k, a.v, a.o, a.d_o, a.lse, a.dq, a.dk, a.dv, own.workspace};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            s2_mem_free(ctx, dev, all[i]);
    }

    print_table();
    s2_stream_destroy(ctx, dev, stream);
    s2_attn_kernel_free(kf);
    s2_attn_kernel_free(kd);
    s2_attn_kernel_free(kb);
    s2_pattern_set_free(fset);
    s2_pattern_set_free(dset);
    CUcontext popped;
    cu.CtxPop(&popped);
    s2_device_free(dev);
    s2_ctx_free(ctx);
    return 0;
}
