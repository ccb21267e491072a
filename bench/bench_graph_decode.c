/* bench_graph_decode: one decode step of a --layers layer model (default 32)
 * captured into a CUDA graph, its replay against the sum of its kernels.
 *
 * Shape: bf16, D 128, pattern decode-l16v8.yaml (H = kv heads = 32, block
 * 64), B 16 sequences of one new token after about --past cached tokens
 * (default 32768; sequence b has past - (b * 131) % 256 tokens, so lengths
 * differ slightly), paged KV (page --page, default 64), split-KV with the
 * in-kernel combine (the split count s2_attn_decode picks, or --splits N).  One plan holds
 * the declared shape and, by default, the workspace every layer uses (one
 * stream: the layers run one after another); --workspace layer gives each
 * layer its own.  Each layer has its own q, o and block table (its own
 * shuffle of the pool's pages); the K/V pools are one per layer when
 * --pool-gb (default 40) holds them all, else layers share them round robin
 * (the line "K/V pools" says which).  Pool contents are a constant, so every
 * output element must equal it: after the graph's first replay every
 * layer's o (poisoned before) is checked.
 *
 * Times (CUDA events, medians over --reps, L2 flushed before each timed
 * region by a 256 MB fill on the stream, as triton.testing.do_bench does):
 *   kernels   each layer's decode launched alone (plan path) between events;
 *             the sum over layers of the per-layer medians
 *   graph     one replay of the captured step (no flush inside the step)
 *   sequential the same launches from the host, plan path (and the kernels'
 *             own path, s2_attn_decode), not in a graph
 * ratio = graph / kernels; the plan issue's target is <= 1.05.
 * The capture is in global mode (every unsafe call in the process fails the
 * capture); if it fails, the reason is printed and it is retried in relaxed
 * mode, which the result line then names.
 * Without a CUDA driver or device it prints "no GPU: skipped" and exits 0;
 * any s2c or driver error, or a wrong output, exits 1 with its message.
 *
 *   bench_graph_decode [--layers N] [--past N] [--page N] [--reps N] [--pool-gb G] [--splits N]
 *                      [--workspace plan|layer] [--patterns DIR] [--csv] */
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

enum { D = 128, B = 16, MAX_LAYERS = 256, MAX_REPS = 10000 };
#define FLUSH_BYTES ((size_t)256 << 20)
#define POOL_VALUE 0x3c            /* every K/V byte; bf16 0x3c3c */

typedef struct opts {
    int layers, page, reps, splits;   /* splits: 0 = the heuristic's */
    int64_t past;
    double pool_gb;
    bool layer_ws, csv;
    const char *patterns;
} opts;

static bench_cu cu;
static s2_ctx *ctx;
static s2_devptr flush_buf;
static void *stream;

static void die_s2(const char *what, s2_status st)
{
    fprintf(stderr, "bench_graph_decode: %s: %s: %s\n", what, s2_status_name(st), s2_ctx_message(ctx));
    exit(1);
}

static void die_cu(const char *what, CUresult r)
{
    fprintf(stderr, "bench_graph_decode: %s: %s\n", what, bench_cu_error(&cu, r));
    exit(1);
}

static s2_devptr alloc_fill(s2_device *dev, size_t bytes, uint8_t v, const char *what)
{
    s2_devptr p = 0;
    S2(what, s2_mem_alloc(ctx, dev, bytes, &p));
    S2(what, s2_memset_d8(ctx, dev, p, v, bytes));
    return p;
}

/* ---- what a timed region runs ---- */
typedef enum { RUN_ONE, RUN_SEQ_PLAN, RUN_SEQ_OWN, RUN_GRAPH } run_kind;

typedef struct step {
    int layers;
    s2_attn_plan *plan;
    s2_attn_kernel *k;
    s2_attn_decode_args *la;     /* [layers] the plan path's arguments */
    s2_attn_decode_args *own;    /* [layers] the kernel's own path's (a workspace of their own) */
    CUgraphExec exec;
} step;

static s2_status run(const step *s, run_kind kind, int layer)
{
    switch (kind) {
    case RUN_ONE:
        return s2_attn_plan_decode(ctx, s->plan, stream, &s->la[layer]);
    case RUN_SEQ_PLAN:
    case RUN_SEQ_OWN:
        for (int l = 0; l < s->layers; l++) {
            s2_status st = kind == RUN_SEQ_PLAN ? s2_attn_plan_decode(ctx, s->plan, stream, &s->la[l])
                                                : s2_attn_decode(ctx, s->k, stream, &s->own[l]);
            if (st != S2_OK)
                return st;
        }
        return S2_OK;
    case RUN_GRAPH: {
        CUresult r = cu.GraphLaunch(s->exec, (CUstream)stream);
        return r == CUDA_SUCCESS ? S2_OK : s2_fail(ctx, S2_ERR_CUDA, "cuGraphLaunch: %s", bench_cu_error(&cu, r));
    }
    }
    return S2_ERR_INTERNAL;
}

/* do_bench's loop: per rep, flush L2 (a fill on the stream), start event,
 * the region, end event; one synchronisation at the end; the median in ms. */
static double time_region(const opts *o, const step *s, run_kind kind, int layer, s2_event **e0, s2_event **e1,
                          const char *what)
{
    for (int i = 0; i < 3; i++)                           /* warm-up */
        S2(what, run(s, kind, layer));
    for (int i = 0; i < o->reps; i++) {
        CU(what, cu.MemsetD8Async(flush_buf, (unsigned char)i, FLUSH_BYTES, (CUstream)stream));
        S2(what, s2_event_record(ctx, e0[i], stream));
        S2(what, run(s, kind, layer));
        S2(what, s2_event_record(ctx, e1[i], stream));
    }
    double *ms = malloc((size_t)o->reps * sizeof *ms);
    if (!ms) {
        fprintf(stderr, "bench_graph_decode: out of memory\n");
        exit(1);
    }
    for (int i = 0; i < o->reps; i++) {
        float t = 0;
        S2(what, s2_event_elapsed_ms(ctx, e0[i], e1[i], &t));
        ms[i] = t;
    }
    double med = bench_quantile(ms, o->reps, 0.5);
    free(ms);
    return med;
}

/* Capture the step's launches (plan path) and instantiate; false, with the
 * reason printed, when the capture fails. */
static bool capture(step *s, CUstreamCaptureMode mode, const char *mode_name)
{
    CUresult r = cu.StreamBeginCapture((CUstream)stream, mode);
    if (r != CUDA_SUCCESS) {
        printf("capture (%s): cuStreamBeginCapture: %s\n", mode_name, bench_cu_error(&cu, r));
        return false;
    }
    s2_status st = run(s, RUN_SEQ_PLAN, 0);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", st == S2_OK ? "" : s2_ctx_message(ctx));
    CUgraph g = NULL;
    r = cu.StreamEndCapture((CUstream)stream, &g);
    if (st != S2_OK || r != CUDA_SUCCESS) {
        printf("capture (%s) failed: launches %s%s%s; cuStreamEndCapture %s\n", mode_name, s2_status_name(st),
               *msg ? ": " : "", msg, bench_cu_error(&cu, r));
        if (g)
            cu.GraphDestroy(g);
        return false;
    }
    CUDA_KERNEL_NODE_PARAMS_v2 kp[BENCH_MAX_NODES];
    char err[256];
    int n = s->layers <= BENCH_MAX_NODES ? bench_graph_kernels(&cu, g, kp, BENCH_MAX_NODES, err, sizeof err) : -2;
    if (n >= 0 && n != s->layers) {
        printf("capture (%s): the graph has %d kernel nodes for %d layers\n", mode_name, n, s->layers);
        exit(1);
    }
    r = cu.GraphInstantiate(&s->exec, g, 0);
    cu.GraphDestroy(g);
    if (r != CUDA_SUCCESS)
        die_cu("cuGraphInstantiateWithFlags", r);
    CU("cuGraphUpload", cu.GraphUpload(s->exec, (CUstream)stream));
    if (n >= 0)
        printf("captured (%s capture mode): %d kernel nodes\n", mode_name, n);
    else
        printf("captured (%s capture mode); nodes not listed: %s\n", mode_name, n == -2 ? "too many" : err);
    return true;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_graph_decode [--layers N] [--past N] [--page N] [--reps N] [--pool-gb G] [--splits N]\n"
                    "                          [--workspace plan|layer] [--patterns DIR] [--csv]\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *env = getenv("S2C_PATTERNS");
    opts o = {.layers = 32, .page = 64, .reps = 50, .past = 32768, .pool_gb = 40,
              .patterns = env && *env ? env : S2C_BENCH_PATTERNS};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--csv")) {
            o.csv = true;
            continue;
        }
        if (i + 1 >= argc)
            return usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--layers")) o.layers = atoi(v);
        else if (!strcmp(a, "--past")) o.past = atoll(v);
        else if (!strcmp(a, "--page")) o.page = atoi(v);
        else if (!strcmp(a, "--reps")) o.reps = atoi(v);
        else if (!strcmp(a, "--splits")) o.splits = atoi(v);
        else if (!strcmp(a, "--pool-gb")) o.pool_gb = atof(v);
        else if (!strcmp(a, "--patterns")) o.patterns = v;
        else if (!strcmp(a, "--workspace") && (!strcmp(v, "plan") || !strcmp(v, "layer"))) o.layer_ws = !strcmp(v, "layer");
        else return usage();
    }
    if (o.layers < 1 || o.layers > MAX_LAYERS || o.reps < 1 || o.reps > MAX_REPS || o.page < 16 || o.page > 4096 ||
        o.past < 512 || o.past > (1 << 22) || !(o.pool_gb > 0 && o.pool_gb <= 1024) || o.splits < 0 || o.splits > 64)
        return usage();

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
        fprintf(stderr, "bench_graph_decode: %s\n", err);
        return 1;
    }
    const s2_device_info *info = s2_device_get_info(dev);
    CU("cuCtxPushCurrent", cu.CtxPush((CUcontext)s2_device_cu_context(dev)));
    S2("stream", s2_stream_create(ctx, dev, &stream));

    char path[4096];
    snprintf(path, sizeof path, "%s/decode-l16v8.yaml", o.patterns);
    s2_pattern_set *set = NULL;
    S2(path, s2_pattern_load(ctx, path, &set));
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    const int H = p->heads, HK = p->kv_heads;
    s2_jit_opts jo = {.no_cache = true};
    s2_kernel_spec spec = {.kind = S2_KERNEL_DECODE, .dtype = S2_DTYPE_BF16, .head_dim = D};
    s2_attn_kernel *k = NULL;
    S2("decode kernel", s2_jit_compile(ctx, dev, p, &spec, &jo, &k, NULL));

    /* lengths, pages, pools */
    int32_t lens[B];
    int64_t max_len = 0;
    for (int b = 0; b < B; b++) {
        lens[b] = (int32_t)(o.past - (b * 131) % 256 + 1);
        max_len = lens[b] > max_len ? lens[b] : max_len;
    }
    const int L = o.layers;
    int64_t per_seq = s2_cdiv(max_len, o.page), pages = per_seq * B;
    size_t page_bytes = (size_t)o.page * HK * D * 2, pool_bytes = 2 * page_bytes * (size_t)pages;  /* K and V */
    int pools = (int)(o.pool_gb * 1e9 / (double)pool_bytes);
    if (pools > L)
        pools = L;
    if (pools < 1) {
        fprintf(stderr, "bench_graph_decode: one layer's K/V pool takes %.1f GB, above --pool-gb %.1f\n",
                pool_bytes / 1e9, o.pool_gb);
        return 1;
    }
    printf("device %s (cc %d.%d, %.0f GB); bf16, D %d, %s (H %d, kv heads %d, block %d); %d layers, B %d, "
           "1 new token after %lld..%lld tokens, page %d; %d reps, L2 flushed (256 MB fill) before each timed region\n",
           info->name, info->cc_major, info->cc_minor, info->total_mem / 1e9, D, p->name, H, HK, p->block_size, L, B,
           (long long)(o.past - 255), (long long)o.past, o.page, o.reps);
    printf("K/V pools: %s: %d pool%s of %.2f GB (K and V; %lld pages of %d tokens each), layer l uses pool l %% %d, "
           "every layer its own block table (own page order), q and o\n",
           pools == L ? "one per layer" : "layers share pools", pools, pools == 1 ? "" : "s", pool_bytes / 1e9,
           (long long)pages, o.page, pools);
    fflush(stdout);

    S2("flush buffer", s2_mem_alloc(ctx, dev, FLUSH_BYTES, &flush_buf));
    s2_devptr *kpool = calloc((size_t)pools, sizeof *kpool), *vpool = calloc((size_t)pools, sizeof *vpool);
    s2_devptr *q = calloc((size_t)L, sizeof *q), *out = calloc((size_t)L, sizeof *out);
    s2_devptr *tab = calloc((size_t)L, sizeof *tab), *ws = calloc((size_t)L, sizeof *ws);
    int32_t *table = malloc(sizeof(int32_t) * (size_t)pages);
    step s = {.layers = L, .k = k};
    s.la = calloc((size_t)L, sizeof *s.la);
    s.own = calloc((size_t)L, sizeof *s.own);
    size_t qb = (size_t)B * H * D * 2;
    uint16_t *host_o = malloc(qb);
    if (!kpool || !vpool || !q || !out || !tab || !ws || !table || !s.la || !s.own || !host_o) {
        fprintf(stderr, "bench_graph_decode: out of memory\n");
        return 1;
    }
    for (int i = 0; i < pools; i++) {
        kpool[i] = alloc_fill(dev, pool_bytes / 2, POOL_VALUE, "K pool");
        vpool[i] = alloc_fill(dev, pool_bytes / 2, POOL_VALUE, "V pool");
    }
    s2_devptr dlens = alloc_fill(dev, sizeof lens, 0, "seq_lens");
    S2("seq_lens", s2_memcpy_h2d(ctx, dev, dlens, lens, sizeof lens));
    uint64_t rs = 0x2545f4914f6cdd1dull;
    for (int l = 0; l < L; l++) {
        /* a shuffle of every page of the pool, per layer */
        for (int64_t i = 0; i < pages; i++)
            table[i] = (int32_t)i;
        for (int64_t i = pages - 1; i > 0; i--) {
            rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
            int64_t j = (int64_t)(rs % (uint64_t)(i + 1));
            int32_t x = table[i];
            table[i] = table[j], table[j] = x;
        }
        tab[l] = alloc_fill(dev, sizeof(int32_t) * (size_t)pages, 0, "block table");
        S2("block table", s2_memcpy_h2d(ctx, dev, tab[l], table, sizeof(int32_t) * (size_t)pages));
        q[l] = alloc_fill(dev, qb, 0x3c, "q");
        out[l] = alloc_fill(dev, qb, 0, "o");
        s.la[l] = (s2_attn_decode_args){.batch = B, .n_new = 1, .heads = H, .kv_heads = HK, .head_dim = D,
                                        .dtype = S2_DTYPE_BF16, .q = q[l], .o = out[l],
                                        .k_pages = kpool[l % pools], .v_pages = vpool[l % pools],
                                        .num_pages = pages, .page_size = o.page, .block_table = tab[l],
                                        .table_stride = {per_seq, 0}, .max_pages_per_seq = per_seq,
                                        .seq_lens = dlens, .max_seq_len = max_len,
                                        .q_stride = {(int64_t)H * D, (int64_t)H * D, D},
                                        .o_stride = {(int64_t)H * D, (int64_t)H * D, D},
                                        .k_stride = {(int64_t)o.page * HK * D, (int64_t)HK * D, D},
                                        .v_stride = {(int64_t)o.page * HK * D, (int64_t)HK * D, D},
                                        .splits = o.splits};
        S2("block table check", s2_attn_decode_validate(ctx, k, stream, &s.la[l]));
    }
    free(table);
    size_t wsb = 0;
    int splits = 1;
    S2("decode workspace", s2_attn_decode_workspace(ctx, k, &s.la[0], &wsb));
    S2("decode splits", s2_attn_decode_splits(ctx, k, &s.la[0], &splits));
    /* the kernel's own path: one workspace of its own (the layers run one after another) */
    s2_devptr own_ws = wsb ? alloc_fill(dev, wsb, 0, "workspace") : 0;
    for (int l = 0; l < L; l++) {
        s.own[l] = s.la[l];
        s.own[l].workspace = own_ws;
        if (o.layer_ws && wsb)
            s.la[l].workspace = ws[l] = alloc_fill(dev, wsb, 0, "layer workspace");
    }
    S2("plan", s2_attn_plan_new(ctx, k, &s.plan));
    S2("plan", s2_attn_plan_add_decode(ctx, s.plan, &s.la[0]));
    S2("plan", s2_attn_plan_prepare(ctx, s.plan, stream));
    size_t plan_bytes = 0;
    S2("plan", s2_attn_plan_device_bytes(ctx, s.plan, &plan_bytes));
    S2("plan", s2_stream_synchronize(ctx, dev, stream));
    printf("kernel %s: %d splits, workspace %zu bytes (%s); plan holds %.2f MB on the device\n",
           s2_attn_kernel_desc(k)->name, splits, wsb, o.layer_ws ? "one per layer" : "the plan's, shared by the layers",
           plan_bytes / 1e6);
    fflush(stdout);

    s2_event **e0 = calloc((size_t)o.reps, sizeof *e0), **e1 = calloc((size_t)o.reps, sizeof *e1);
    if (!e0 || !e1)
        return 1;
    for (int i = 0; i < o.reps; i++) {
        S2("events", s2_event_create(ctx, dev, &e0[i]));
        S2("events", s2_event_create(ctx, dev, &e1[i]));
    }

    /* the graph: global capture mode, relaxed if that fails */
    const char *mode = "global";
    if (!capture(&s, CU_STREAM_CAPTURE_MODE_GLOBAL, mode)) {
        mode = "relaxed";
        if (!capture(&s, CU_STREAM_CAPTURE_MODE_RELAXED, mode)) {
            fprintf(stderr, "bench_graph_decode: the step could not be captured (above)\n");
            return 1;
        }
    }
    /* one replay with every o poisoned: each layer's outputs must be the pool's value */
    for (int l = 0; l < L; l++)
        S2("poison o", s2_memset_d8(ctx, dev, out[l], 0xff, qb));
    S2("graph replay", run(&s, RUN_GRAPH, 0));
    S2("graph replay", s2_stream_synchronize(ctx, dev, stream));
    /* within 2 bf16 units of the value (the softmax weights' rounding); NaN poison fails */
    const int want = POOL_VALUE << 8 | POOL_VALUE;
    int64_t wrong = 0;
    for (int l = 0; l < L; l++) {
        S2("o", s2_memcpy_d2h(ctx, dev, host_o, out[l], qb));
        for (size_t i = 0; i < qb / 2; i++)
            if (abs((int)host_o[i] - want) > 2 && wrong++ < 5)
                fprintf(stderr, "bench_graph_decode: after one replay, layer %d o[%zu] = 0x%04x, not 0x%04x\n", l, i,
                        host_o[i], want);
    }
    if (wrong)
        printf("check FAILED: %lld wrong o elements after one replay (timings follow; exit status 1)\n",
               (long long)wrong);
    else
        printf("check: one replay wrote every o element of the %d layers (the pool's value)\n", L);

    /* each layer's kernel alone */
    double sum = 0, lo = 1e30, hi = 0;
    for (int l = 0; l < L; l++) {
        double t = time_region(&o, &s, RUN_ONE, l, e0, e1, "one layer's decode");
        sum += t;
        lo = t < lo ? t : lo;
        hi = t > hi ? t : hi;
    }
    printf("kernels: sum of %d per-layer medians %.4f ms (per layer %.4f .. %.4f ms)\n", L, sum, lo, hi);
    fflush(stdout);
    double graph = time_region(&o, &s, RUN_GRAPH, 0, e0, e1, "graph replay");
    printf("graph replay: %.4f ms\n", graph);
    fflush(stdout);
    double seq_plan = time_region(&o, &s, RUN_SEQ_PLAN, 0, e0, e1, "sequential plan launches");
    double seq_own = time_region(&o, &s, RUN_SEQ_OWN, 0, e0, e1, "sequential s2_attn_decode launches");
    double ratio = graph / sum;

    printf("\n| layers | B | past | splits | sum of kernels ms | graph replay ms | ratio (<= 1.05) | "
           "sequential, plan ms | sequential, s2_attn_decode ms | capture |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    printf("| %d | %d | %lldK | %d | %.4f | %.4f | %.3f %s | %.4f | %.4f | %s |\n", L, B, (long long)(o.past / 1024),
           splits, sum, graph, ratio, ratio <= 1.05 ? "met" : "missed", seq_plan, seq_own, mode);
    if (o.csv)
        printf("\nlayers,batch,past,splits,kernels_sum_ms,graph_ms,ratio,seq_plan_ms,seq_own_ms,capture\n"
               "%d,%d,%lld,%d,%.5f,%.5f,%.4f,%.5f,%.5f,%s\n",
               L, B, (long long)o.past, splits, sum, graph, ratio, seq_plan, seq_own, mode);

    printf("summary: %d-layer decode step, graph replay %.4f ms, sum of kernels %.4f ms, ratio %.3f (<= 1.05: %s)%s\n",
           L, graph, sum, ratio, ratio <= 1.05 ? "met" : "missed", wrong ? "; output check FAILED" : "");
    S2("end", s2_stream_synchronize(ctx, dev, stream));
    cu.GraphExecDestroy(s.exec);
    for (int i = 0; i < o.reps; i++) {
        s2_event_free(e0[i]);
        s2_event_free(e1[i]);
    }
    s2_attn_plan_free(s.plan);
    S2("end", s2_stream_synchronize(ctx, dev, stream));
    for (int l = 0; l < L; l++) {
        s2_mem_free(ctx, dev, q[l]);
        s2_mem_free(ctx, dev, out[l]);
        s2_mem_free(ctx, dev, tab[l]);
        s2_mem_free(ctx, dev, ws[l]);
    }
    for (int i = 0; i < pools; i++) {
        s2_mem_free(ctx, dev, kpool[i]);
        s2_mem_free(ctx, dev, vpool[i]);
    }
    s2_mem_free(ctx, dev, dlens);
    s2_mem_free(ctx, dev, own_ws);
    s2_mem_free(ctx, dev, flush_buf);
    s2_stream_destroy(ctx, dev, stream);
    free(e0), free(e1), free(kpool), free(vpool), free(q), free(out), free(tab), free(ws), free(s.la), free(s.own);
    free(host_o);
    s2_attn_kernel_free(k);
    s2_pattern_set_free(set);
    CUcontext popped;
    cu.CtxPop(&popped);
    s2_device_free(dev);
    s2_ctx_free(ctx);
    return wrong ? 1 : 0;
}
