/* Plans (s2_attn_plan_*, attn_runtime.h) in CUDA graphs on a real GPU.
 *
 * forward, varlen, backward, decode: each plan is prepared on a stream
 * (then synchronised), one plan launch is captured ONCE into a graph in
 * global capture mode, and the graph is replayed S2C_GRAPH_REPLAYS times
 * (default 50).  Before each replay new random inputs go into the same
 * buffers (q, k, v; backward also dO, o, lse, dlse; decode new seq_lens and
 * a new block table in the same buffers; varlen new sequences through
 * s2_attn_seqs_write into a batch of s2_attn_seqs_new_device: other counts
 * of non-empty sequences, other lengths, packed cu_seqlens style, some
 * chunked prefill) and the outputs are poisoned (NaN); after it every output
 * is checked against the float64 reference.  forward and varlen run the
 * default forward kernel and, on sm_90a, the persistent one.  Decode runs
 * split-KV with splits = 4 in the plan's own workspace (workspace 0), the
 * backward in the plan's workspace too; one more backward replay on the same
 * inputs must match the last one bitwise.  An unprepared shape inside the
 * capture (forward, backward) returns S2_ERR_CAPTURE and the capture stays
 * valid.
 * Allocator: every test sets a counting allocator (cuMemAlloc/cuMemFree
 * through s2_mem_alloc/s2_mem_free) right after s2_device_open: prepare
 * allocates through it, on prepare's stream; capture and replays make no
 * call to it; at the end, the plan, batches and kernels freed, every buffer
 * came back (and plan_free gave back on prepare's stream); the plan's
 * device_bytes after prepare and the bytes prepare took from the allocator
 * agree, and device_bytes before prepare (a bound from counts) is at least that.
 * concurrency: 4 threads, each with its own s2_ctx and 4 streams, launch
 * S2C_CONC_LAUNCHES (default 1000) forwards each on two kernels of two
 * patterns (bf16 causal, f16 bidirectional) shared by all threads, over
 * shapes of their own, mixing launches of two shared plans (one shape of
 * each kernel left undeclared: the kernel's own path) and plain
 * s2_attn_forward; every 100th launch of each thread (poisoned first, its
 * stream synchronised) and the last one into each output at the end are
 * checked against the reference.
 * Tolerances as test_attn_gpu / test_bwd_gpu / test_decode_gpu: relative
 * Frobenius error of o (per tensor; decode per (token, head) row) and of
 * dq, dk, dv <= 2e-2 (bf16) / 5e-3 (f16); |lse - ref| <= 1e-3 (decode
 * 2e-3); elements outside the outputs (row padding, rows of no sequence)
 * still poison.  Fresh random inputs, seed printed (S2C_SEED=N repeats);
 * S2C_GRAPH_CASES=forward,varlen,backward,decode,concurrency selects tests.
 * Exits 77 without libcuda.so.1 or a device; CUDA lives in this process, so
 * Check does not fork. */
#include "../attn/patterns.h"
#include "../decode/paged_case.h"
#include "compile_internal.h"
#include "kernel_abi.h"
#include "rt_cuda.h"
#include "s2c/attn_runtime.h"
#include "s2c/codegen.h"
#include "s2c/compile.h"
#include "s2c/decode.h"
#include "s2c/layout.h"
#include "s2c/ref.h"

#include <check.h>
#include <cuda.h>
#include <dlfcn.h>
#include "cu_graph.h"
#include "gpu_harness.h"
#include "poison.h"
#include "rand_pattern.h"
#include "varlen_seqs.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

enum { D = 64 };

static uint64_t base_seed;
static s2_arch dev_arch;
static int replays = 50;

#define OK(ctx, call) ck_assert_msg((call) == S2_OK, "%s: %s", #call, s2_ctx_message(ctx))

static double tol_of(s2_dtype dt) { return dt == S2_DTYPE_BF16 ? 2e-2 : 5e-3; }
static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static int rng_int(uint64_t *s, int lo, int hi) { return lo + (int)(rng_next(s) % (uint64_t)(hi - lo + 1)); }

static bool ref_mask(const void *user, int q_head, int64_t qpos, int64_t kpos)
{
    return s2_token_kept((const s2_pattern *)user, q_head, qpos, kpos);
}

/* ---- kernels: compiled once per program, loaded per test ------------------------- */

typedef struct art_entry {
    int pattern;
    s2_kernel_kind kind;
    s2_dtype dt;
    int persistent;
    s2_pattern_set *set;
    s2_artifact *art;
} art_entry;

static art_entry arts[8];
static int narts;

static const s2_artifact *kernel_art(s2_ctx *ctx, int pattern, s2_kernel_kind kind, s2_dtype dt, int persistent,
                                     const s2_pattern **p)
{
    for (int i = 0; i < narts; i++)
        if (arts[i].pattern == pattern && arts[i].kind == kind && arts[i].dt == dt && arts[i].persistent == persistent) {
            *p = s2_pattern_set_get(arts[i].set, 0);
            return arts[i].art;
        }
    ck_assert_int_lt(narts, 8);
    art_entry *e = &arts[narts];
    *e = (art_entry){.pattern = pattern, .kind = kind, .dt = dt, .persistent = persistent};
    s2_local_stride_args a;
    attn_pattern_args(pattern, &a);
    OK(ctx, s2_pattern_from_args(ctx, &a, &e->set));
    *p = s2_pattern_set_get(e->set, 0);
    s2_kspec spec = {.kind = kind, .dtype = dt, .head_dim = D, .arch = dev_arch, .persistent = persistent};
    OK(ctx, s2_compile_kspec1(ctx, *p, &spec, S2_CUBIN_AUTO, &e->art));
    narts++;
    return e->art;
}

static s2_attn_kernel *load_kernel(s2_ctx *ctx, s2_device *dev, const s2_artifact *art, const s2_pattern *p, s2_dtype dt)
{
    s2_attn_kernel *k = NULL;
    OK(ctx, s2_attn_load(ctx, dev, art->cubin, art->cubin_size, p->name, dt, D, &k));
    return k;
}

/* ---- a counting allocator ---------------------------------------------------------- */

enum { MAXLIVE = 512 };

typedef struct counting_alloc {
    mtx_t lock;
    const s2_device *dev;
    int64_t allocs, frees, bad_frees, failed;
    size_t bytes;                /* given, in all */
    bool expect_on;              /* count calls on another stream than `expect` */
    void *expect;
    int64_t wrong_stream;
    s2_devptr live[MAXLIVE];
    int nlive;
} counting_alloc;

static int ca_alloc(void *user, size_t bytes, void *stream, s2_devptr *ptr)
{
    counting_alloc *c = user;
    s2_ctx *ctx = s2_ctx_new();
    s2_status st = s2_mem_alloc(ctx, c->dev, bytes, ptr);
    s2_ctx_free(ctx);
    bool kept = false;
    mtx_lock(&c->lock);
    if (st == S2_OK && c->nlive < MAXLIVE) {
        c->allocs++;
        c->bytes += bytes;
        c->live[c->nlive++] = *ptr;
        kept = true;
    } else {
        c->failed++;
    }
    if (c->expect_on && stream != c->expect)
        c->wrong_stream++;
    mtx_unlock(&c->lock);
    if (st == S2_OK && !kept)
        s2_mem_free(NULL, c->dev, *ptr);
    return kept ? 0 : 1;
}

static void ca_free(void *user, s2_devptr ptr, void *stream)
{
    counting_alloc *c = user;
    bool found = false;
    mtx_lock(&c->lock);
    for (int i = 0; i < c->nlive && !found; i++)
        if (c->live[i] == ptr) {
            c->live[i] = c->live[--c->nlive];
            found = true;
        }
    if (found)
        c->frees++;
    else
        c->bad_frees++;
    if (c->expect_on && stream != c->expect)
        c->wrong_stream++;
    mtx_unlock(&c->lock);
    if (found)
        s2_mem_free(NULL, c->dev, ptr);
}

static int64_t ca_calls(counting_alloc *c)
{
    mtx_lock(&c->lock);
    int64_t n = c->allocs + c->frees + c->bad_frees + c->failed;
    mtx_unlock(&c->lock);
    return n;
}

/* ---- per test: a device with the counting allocator, a stream ------------------- */

typedef struct env {
    s2_ctx *ctx;
    s2_device *dev;
    counting_alloc ca;
    void *stream;
} env;

static void env_open(env *e)
{
    memset(e, 0, sizeof *e);
    e->ctx = s2_ctx_new();
    OK(e->ctx, s2_device_open(e->ctx, 0, &e->dev));
    ck_assert_int_eq(mtx_init(&e->ca.lock, mtx_plain), thrd_success);
    e->ca.dev = e->dev;
    s2_allocator a = {ca_alloc, ca_free, &e->ca};
    OK(e->ctx, s2_device_set_allocator(e->ctx, e->dev, &a));
    OK(e->ctx, s2_stream_create(e->ctx, e->dev, &e->stream));
}

/* After every plan, batch and kernel is freed: every buffer came back. */
static void env_close(env *e, const char *what)
{
    counting_alloc *c = &e->ca;
    ck_assert_msg(c->allocs > 0 && c->allocs == c->frees && c->nlive == 0 && !c->bad_frees && !c->failed,
                  "%s: allocator: %lld allocs, %lld frees, %d live, %lld frees of unknown pointers, %lld failed",
                  what, (long long)c->allocs, (long long)c->frees, c->nlive, (long long)c->bad_frees,
                  (long long)c->failed);
    OK(e->ctx, s2_stream_destroy(e->ctx, e->dev, e->stream));
    s2_device_free(e->dev);
    mtx_destroy(&c->lock);
    s2_ctx_free(e->ctx);
}

/* What prepare did, checked at the end of a test (after the replays). */
typedef struct plan_info {
    size_t estimate, held, bytes;   /* device_bytes before and after prepare; bytes prepare allocated */
    int64_t allocs, wrong_stream, free_wrong_stream;
} plan_info;

static void prepare_plan(env *e, s2_attn_plan *p, plan_info *pi)
{
    memset(pi, 0, sizeof *pi);
    OK(e->ctx, s2_attn_plan_device_bytes(e->ctx, p, &pi->estimate));
    counting_alloc *c = &e->ca;
    mtx_lock(&c->lock);
    int64_t a0 = c->allocs;
    size_t b0 = c->bytes;
    c->expect_on = true, c->expect = e->stream, c->wrong_stream = 0;
    mtx_unlock(&c->lock);
    s2_status st = s2_attn_plan_prepare(e->ctx, p, e->stream);
    mtx_lock(&c->lock);
    pi->allocs = c->allocs - a0;
    pi->bytes = c->bytes - b0;
    pi->wrong_stream = c->wrong_stream;
    c->expect_on = false;
    mtx_unlock(&c->lock);
    OK(e->ctx, st);
    OK(e->ctx, s2_stream_synchronize(e->ctx, e->dev, e->stream));
    ck_assert_msg(pi->allocs > 0, "prepare allocated nothing through the device's allocator");
    OK(e->ctx, s2_attn_plan_device_bytes(e->ctx, p, &pi->held));
}

/* Frees the plan, counting frees on another stream than prepare's. */
static void free_plan(env *e, s2_attn_plan *p, plan_info *pi)
{
    counting_alloc *c = &e->ca;
    mtx_lock(&c->lock);
    c->expect_on = true, c->expect = e->stream, c->wrong_stream = 0;
    mtx_unlock(&c->lock);
    s2_attn_plan_free(p);
    mtx_lock(&c->lock);
    pi->free_wrong_stream = c->wrong_stream;
    c->expect_on = false;
    mtx_unlock(&c->lock);
}

static void check_plan_info(const plan_info *pi, const char *what)
{
    printf("%s: plan: device_bytes %zu before prepare, %zu after; prepare allocated %zu bytes in %lld calls\n", what,
           pi->estimate, pi->held, pi->bytes, (long long)pi->allocs);
    ck_assert_msg(pi->wrong_stream == 0, "%s: %lld allocator calls of prepare not on its stream", what,
                  (long long)pi->wrong_stream);
    ck_assert_msg(pi->free_wrong_stream == 0, "%s: %lld allocator frees of plan_free not on prepare's stream", what,
                  (long long)pi->free_wrong_stream);
    ck_assert_msg(pi->held > 0 && pi->held <= pi->estimate && pi->held == pi->bytes,
                  "%s: device_bytes %zu before prepare, %zu after, %zu allocated by prepare", what, pi->estimate,
                  pi->held, pi->bytes);
}

/* ---- CUDA graphs: the Driver API calls (graph_api, cu_graph.h) */

/* A capture in global mode on e->stream, dev's context current meanwhile. */
static void capture_begin(const graph_api *g, env *e)
{
    CU_OK(g->push((CUcontext)s2_device_cu_context(e->dev)));
    CU_OK(g->begin((CUstream)e->stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
}

/* Ends the capture and instantiates; the context is popped either way.  A
 * failure of cuStreamEndCapture means the capture was invalidated. */
static void capture_end(const graph_api *g, env *e, CUgraph *graph, CUgraphExec *exec)
{
    *graph = NULL;
    *exec = NULL;
    CUresult end = g->end((CUstream)e->stream, graph);
    CUresult inst = end == CUDA_SUCCESS && *graph ? g->instantiate(exec, *graph, 0) : CUDA_ERROR_UNKNOWN;
    CUcontext popped;
    CUresult pop = g->pop(&popped);
    ck_assert_msg(end == CUDA_SUCCESS && *graph, "cuStreamEndCapture: %d (the capture was invalidated)", (int)end);
    ck_assert_msg(inst == CUDA_SUCCESS, "cuGraphInstantiateWithFlags: %d", (int)inst);
    ck_assert_msg(pop == CUDA_SUCCESS, "cuCtxPopCurrent: %d", (int)pop);
}

static void replay(const graph_api *g, env *e, CUgraphExec exec)
{
    CU_OK(g->push((CUcontext)s2_device_cu_context(e->dev)));
    CUresult r = g->launch(exec, (CUstream)e->stream);
    CUcontext popped;
    g->pop(&popped);
    ck_assert_msg(r == CUDA_SUCCESS, "cuGraphLaunch: %d", (int)r);
    OK(e->ctx, s2_stream_synchronize(e->ctx, e->dev, e->stream));
}

typedef enum { OP_FORWARD, OP_BACKWARD, OP_DECODE } plan_op;

static s2_status plan_launch(env *e, s2_attn_plan *plan, plan_op op, const void *a)
{
    return op == OP_FORWARD    ? s2_attn_plan_forward(e->ctx, plan, e->stream, a)
           : op == OP_BACKWARD ? s2_attn_plan_backward(e->ctx, plan, e->stream, a)
                               : s2_attn_plan_decode(e->ctx, plan, e->stream, a);
}

/* Capture one plan launch of `a` into a graph; `unprepared` (optional), an
 * undeclared shape launched inside the same capture, must give
 * S2_ERR_CAPTURE and leave the capture valid. */
static void capture_plan(const graph_api *g, env *e, s2_attn_plan *plan, plan_op op, const void *a,
                         const void *unprepared, const char *what, CUgraph *graph, CUgraphExec *exec)
{
    capture_begin(g, e);
    s2_status st = plan_launch(e, plan, op, a);
    char msg[512], msg_unprepared[512] = "";
    snprintf(msg, sizeof msg, "%s", s2_ctx_message(e->ctx));
    s2_status st_unprepared = S2_ERR_CAPTURE;
    if (unprepared && st == S2_OK) {
        st_unprepared = plan_launch(e, plan, op, unprepared);
        snprintf(msg_unprepared, sizeof msg_unprepared, "%s", s2_ctx_message(e->ctx));
    }
    capture_end(g, e, graph, exec);
    ck_assert_msg(st == S2_OK, "%s: plan launch inside the capture: %s: %s", what, s2_status_name(st), msg);
    ck_assert_msg(st_unprepared == S2_ERR_CAPTURE, "%s: an unprepared shape inside the capture gave %s: %s", what,
                  s2_status_name(st_unprepared), msg_unprepared);
}


static void graph_free(const graph_api *g, CUgraph graph, CUgraphExec exec)
{
    CU_OK(g->exec_destroy(exec));
    CU_OK(g->destroy(graph));
}

/* The first failing replay's message is kept; the others are counted. */
typedef struct replay_log {
    int bad;
    char first[512];
    double worst[3];
} replay_log;

static void log_bad(replay_log *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_bad(replay_log *l, const char *fmt, ...)
{
    if (l->bad++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(l->first, sizeof l->first, fmt, ap);
        va_end(ap);
    }
}

/* ---- forward reference and comparison (test_attn_gpu) ----------------------------- */

static void fill_args(s2_attn_fwd_args *a, const s2t_tensor *q, const s2t_tensor *k, const s2t_tensor *v,
                      const s2t_tensor *o)
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
    int64_t nan_out, bad_lse, empty;
} compare;

/* o rows [0, rows) of batch entries and heads of o (extents 0, 2, 3) against
 * the reference rt (rows [0, rows), lse_ref [B][H][rows]). */
static void compare_out(const s2t_tensor *o, const float *lse, const s2_tensor *ref, const float *lse_ref,
                        int64_t rows, compare *c)
{
    const int B = (int)o->ext[0], H = (int)o->ext[2], DD = (int)o->ext[3];
    memset(c, 0, sizeof *c);
    double num = 0, den = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int64_t i = 0; i < rows; i++) {
                float lr = lse_ref[((size_t)b * H + h) * rows + i];
                float lk = lse[((size_t)b * H + h) * rows + i];
                bool empty = isinf(lr) && lr < 0;
                c->empty += empty;
                if (empty ? !(isinf(lk) && lk < 0) : !(fabs((double)lk - lr) <= 1e-3))
                    c->bad_lse++;
                else if (!empty)
                    c->lse_err = fmax(c->lse_err, fabs((double)lk - lr));
                for (int d = 0; d < DD; d++) {
                    double x = s2_tensor_get(&o->t, b, i, h, d), r = s2_tensor_get(ref, b, i, h, d);
                    c->nan_out += isnan(x) || (empty && x != 0.0);
                    num += (x - r) * (x - r);
                    den += r * r;
                }
            }
    c->o_err = den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Elements of a one-batch bshd tensor of row stride st1 outside rows
 * [0, rows) x H*D (later rows, the row padding) that no longer hold the
 * poison.  No Check calls: the worker threads use it. */
static int64_t outside_written(const s2t_tensor *o, int64_t rows)
{
    const int64_t st1 = o->t.stride[1], width = o->ext[2] * o->ext[3];
    int64_t n = 0;
    for (size_t i = 0; i < o->elems; i++) {
        int64_t r = (int64_t)i / st1, c = (int64_t)i % st1;
        n += !(r < rows && c < width) && o->host[i] != S2T_POISON16;
    }
    return n;
}

/* The reference of the first q_len queries / kv_len keys of one-batch or
 * B-batch tensors: *out [B][q_len][H][D] float64, *lse_ref [B][H][q_len]. */
static s2_status reference(s2_ctx *ctx, const s2_pattern *p, const s2t_tensor *q, const s2t_tensor *k,
                           const s2t_tensor *v, int64_t q_len, int64_t kv_len, double **out, s2_tensor *rt,
                           float **lse_ref)
{
    const int B = (int)q->ext[0], H = (int)q->ext[2];
    *out = malloc((size_t)B * q_len * H * D * sizeof **out);
    *lse_ref = malloc((size_t)B * H * q_len * sizeof **lse_ref);
    if (!*out || !*lse_ref)
        return S2_ERR_NOMEM;
    *rt = s2_tensor_bshd(*out, S2_DTYPE_F64, q_len, H, D);
    s2_ref_problem rp = {.batch = B, .heads = H, .kv_heads = (int)k->ext[2], .head_dim = D, .q_len = q_len,
                         .kv_len = kv_len, .causal = p->causal, .mask = ref_mask, .mask_user = p};
    return s2_ref_forward(ctx, &rp, &q->t, &k->t, &v->t, rt, *lse_ref);
}

static void fill_inputs(s2t_tensor *q, s2t_tensor *k, s2t_tensor *v, uint64_t seed)
{
    s2_tensor_fill_random(&q->t, q->ext, seed, -1.5, 1.5);
    s2_tensor_fill_random(&k->t, k->ext, seed + 1, -1.5, 1.5);
    s2_tensor_fill_random(&v->t, v->ext, seed + 2, -1.0, 1.0);
}

static void upload_all(env *e, s2t_tensor *const *ts, int n)
{
    for (int i = 0; i < n; i++)
        s2t_tensor_upload(e->ctx, e->dev, ts[i]);
}

/* Whether the kernel runs the persistent grid (on sm_90a when asked). */
static bool kernel_persistent(const s2_attn_kernel *k)
{
    const s2_kernel_record *r = s2_manifest_kernel_fn(s2_attn_kernel_desc(k), S2_ROLE_FWD);
    return r && r->abi == S2_ABI_FWD_TMA_PERSISTENT;
}

/* ---- forward: a uniform batch --------------------------------------------------- */

START_TEST(forward_graph)
{
    const bool persistent = _i == 1;
    if (persistent && dev_arch != S2_ARCH_SM90A) {
        printf("forward: no persistent kernel below sm_90a: skipped\n");
        return;
    }
    const char *what = persistent ? "forward (persistent)" : "forward";
    graph_api g;
    graph_api_load(&g);
    env e;
    env_open(&e);
    const s2_pattern *p = NULL;
    const s2_artifact *art = kernel_art(e.ctx, 0, S2_KERNEL_FWD, S2_DTYPE_BF16, persistent, &p);
    s2_attn_kernel *k = load_kernel(e.ctx, e.dev, art, p, S2_DTYPE_BF16);
    const int B = 2, H = p->heads, HK = p->kv_heads;
    const int64_t S = 256;
    s2t_tensor q, kt, v, o;
    s2t_tensor_new(&q, S2_DTYPE_BF16, false, B, S, H, D, 0);
    s2t_tensor_new(&kt, S2_DTYPE_BF16, false, B, S, HK, D, 0);
    s2t_tensor_new(&v, S2_DTYPE_BF16, false, B, S, HK, D, 0);
    s2t_tensor_new(&o, S2_DTYPE_BF16, false, B, S, H, D, 8);
    s2t_tensor *all[4] = {&q, &kt, &v, &o};
    upload_all(&e, all, 4);
    size_t nlse = (size_t)B * H * S;
    float *lse = malloc(nlse * sizeof *lse);
    ck_assert_ptr_nonnull(lse);
    s2_devptr d_lse = s2t_dev_alloc_poisoned(e.ctx, e.dev, nlse * 4);
    s2_attn_fwd_args a = {.batch = B, .q_len = S, .kv_len = S, .heads = H, .kv_heads = HK, .head_dim = D,
                          .dtype = S2_DTYPE_BF16, .lse = d_lse};
    fill_args(&a, &q, &kt, &v, &o);

    s2_attn_plan *plan = NULL;
    OK(e.ctx, s2_attn_plan_new(e.ctx, k, &plan));
    OK(e.ctx, s2_attn_plan_add_forward(e.ctx, plan, &a));
    plan_info pi;
    prepare_plan(&e, plan, &pi);

    int64_t calls0 = ca_calls(&e.ca);
    s2_attn_fwd_args b = a;
    b.q_len = S - 64;   /* not declared */
    CUgraph graph;
    CUgraphExec exec;
    capture_plan(&g, &e, plan, OP_FORWARD, &a, &b, what, &graph, &exec);

    replay_log log = {0};
    for (int r = 0; r < replays; r++) {
        uint64_t seed = base_seed * 31 + (uint64_t)r * 101;
        fill_inputs(&q, &kt, &v, seed);
        upload_all(&e, all, 3);
        s2t_tensor_poison(&o);
        s2t_tensor_upload(e.ctx, e.dev, &o);
        s2t_dev_poison(e.ctx, e.dev, d_lse, nlse * 4);
        replay(&g, &e, exec);
        s2t_tensor_download(e.ctx, e.dev, &o);
        OK(e.ctx, s2_memcpy_d2h(e.ctx, e.dev, lse, d_lse, nlse * 4));
        double *ref;
        float *lse_ref;
        s2_tensor rt;
        OK(e.ctx, reference(e.ctx, p, &q, &kt, &v, S, S, &ref, &rt, &lse_ref));
        compare c;
        compare_out(&o, lse, &rt, lse_ref, S, &c);
        int64_t pad = s2t_tensor_pad_written(&o);
        if (c.nan_out || c.bad_lse || pad || !(c.o_err <= 2e-2))
            log_bad(&log, "replay %d (seed %llu): o err %.3g, %lld NaN, %lld bad lse, %lld padding written", r,
                    (unsigned long long)seed, c.o_err, (long long)c.nan_out, (long long)c.bad_lse, (long long)pad);
        log.worst[0] = fmax(log.worst[0], c.o_err);
        log.worst[1] = fmax(log.worst[1], c.lse_err);
        free(ref);
        free(lse_ref);
    }
    int64_t calls = ca_calls(&e.ca) - calls0;
    printf("%s: %s kernel, captured once (global mode; unprepared shape inside: S2_ERR_CAPTURE), %d replays with "
           "new inputs: %d bad, worst o error %.3g, lse %.3g; allocator calls during capture and replays %lld\n", what,
           kernel_persistent(k) ? "persistent" : "grid", replays, log.bad, log.worst[0], log.worst[1], (long long)calls);
    ck_assert_msg(log.bad == 0, "%s: %d of %d replays wrong; first: %s", what, log.bad, replays, log.first);
    ck_assert_msg(calls == 0, "%s: %lld allocator calls during capture and replays", what, (long long)calls);
    ck_assert_msg(kernel_persistent(k) == persistent, "%s: the kernel's ABI is not the one asked for", what);

    graph_free(&g, graph, exec);
    free_plan(&e, plan, &pi);
    free(lse);
    s2_mem_free(e.ctx, e.dev, d_lse);
    for (int i = 0; i < 4; i++)
        s2t_tensor_free(e.ctx, e.dev, all[i]);
    s2_attn_kernel_free(k);
    env_close(&e, what);
    check_plan_info(&pi, what);
}
END_TEST

/* ---- forward: a variable-length batch on the device --------------------------------- */

enum { VL_N = 4, VL_MAX = 256, VL_ROWS = VL_N * VL_MAX };

/* Replay r's sequences, packed from row 0 (cu_seqlens): 1 + r % VL_N of them
 * have queries, at random places among the VL_N; every third replay is
 * chunked prefill (more keys than queries); replay 0 fills every row. */
static void draw_seqs(s2_ctx *ctx, int r, uint64_t *s, s2_attn_seq *seqs, int32_t cu_q[VL_N + 1],
                      int32_t cu_k[VL_N + 1])
{
    int live = 1 + r % VL_N;
    bool on[VL_N] = {0};
    for (int n = 0; n < live;) {
        int i = rng_int(s, 0, VL_N - 1);
        if (!on[i])
            on[i] = true, n++;
    }
    int32_t cq[VL_N + 1] = {0}, ck[VL_N + 1] = {0};
    for (int i = 0; i < VL_N; i++) {
        int ql = 0, kl = 0;
        if (r == 0) {
            ql = kl = VL_MAX;
        } else if (on[i]) {
            ql = rng_int(s, 1, VL_MAX);
            kl = r % 3 == 2 ? rng_int(s, ql, VL_MAX) : ql;
        } else {
            kl = r % 2 ? 0 : rng_int(s, 1, 32);   /* keys but no queries */
        }
        cq[i + 1] = cq[i] + ql;
        ck[i + 1] = ck[i] + kl;
    }
    OK(ctx, s2_attn_seqs_packed(ctx, cq, ck, VL_N, seqs));
    memcpy(cu_q, cq, sizeof cq);
    memcpy(cu_k, ck, sizeof ck);
}

/* Loops 0, 1: the sequences written from the host before each replay
 * (s2_attn_seqs_write); 2, 3: the engine's way, the graph itself holding
 * s2_attn_seqs_write_cu (NAME_seqs) ahead of the forward, reading new
 * cu_seqlens copied into fixed device buffers before each replay.  Odd
 * loops: the persistent kernel. */
START_TEST(varlen_graph)
{
    const bool persistent = _i % 2 == 1, from_cu = _i >= 2;
    if (persistent && dev_arch != S2_ARCH_SM90A) {
        printf("varlen: no persistent kernel below sm_90a: skipped\n");
        return;
    }
    const char *what = from_cu ? (persistent ? "varlen from cu_seqlens (persistent)" : "varlen from cu_seqlens")
                               : (persistent ? "varlen (persistent)" : "varlen");
    graph_api g;
    graph_api_load(&g);
    env e;
    env_open(&e);
    const s2_pattern *p = NULL;
    const s2_dtype dt = S2_DTYPE_BF16;
    const s2_artifact *art = kernel_art(e.ctx, 0, S2_KERNEL_FWD, dt, persistent, &p);
    s2_attn_kernel *k = load_kernel(e.ctx, e.dev, art, p, dt);
    const int H = p->heads, HK = p->kv_heads;
    s2t_tensor q, kt, v, o;
    s2t_tensor_new(&q, dt, false, 1, VL_ROWS, H, D, 0);
    s2t_tensor_new(&kt, dt, false, 1, VL_ROWS, HK, D, 0);
    s2t_tensor_new(&v, dt, false, 1, VL_ROWS, HK, D, 0);
    s2t_tensor_new(&o, dt, false, 1, VL_ROWS, H, D, 0);
    s2t_tensor *all[4] = {&q, &kt, &v, &o};
    upload_all(&e, all, 4);
    size_t nlse = (size_t)H * VL_ROWS;
    float *lse = malloc(nlse * sizeof *lse), *lse_ref = malloc(nlse * sizeof *lse_ref);
    double *ref = malloc((size_t)VL_ROWS * H * D * sizeof *ref);
    uint8_t *mine = malloc(VL_ROWS);
    ck_assert(lse && lse_ref && ref && mine);
    s2_tensor rt = s2_tensor_bshd(ref, S2_DTYPE_F64, VL_ROWS, H, D);
    s2_devptr d_lse = s2t_dev_alloc_poisoned(e.ctx, e.dev, nlse * 4);

    s2_attn_seqs *sq = NULL;
    OK(e.ctx, s2_attn_seqs_new_device(e.ctx, e.dev, VL_N, VL_MAX, &sq));
    ck_assert_int_eq(s2_attn_seqs_count(sq), VL_N);
    ck_assert_ptr_null(s2_attn_seqs_host(sq));
    s2_attn_fwd_args a = {.batch = VL_N, .q_len = VL_ROWS, .kv_len = VL_ROWS, .heads = H, .kv_heads = HK,
                          .head_dim = D, .dtype = dt, .lse = d_lse, .seqs = sq};
    fill_args(&a, &q, &kt, &v, &o);
    s2_attn_plan *plan = NULL;
    OK(e.ctx, s2_attn_plan_new(e.ctx, k, &plan));
    OK(e.ctx, s2_attn_plan_add_forward(e.ctx, plan, &a));
    plan_info pi;
    prepare_plan(&e, plan, &pi);
    uint64_t s = base_seed * 1000003u + 17 + (uint64_t)persistent;
    s2_attn_seq seqs[VL_N];
    int32_t cu_q[VL_N + 1], cu_k[VL_N + 1];
    draw_seqs(e.ctx, 0, &s, seqs, cu_q, cu_k);
    /* the engine's cu_seqlens: fixed device buffers the graph reads */
    s2_devptr d_cu_q = 0, d_cu_k = 0;
    if (from_cu) {
        OK(e.ctx, s2_mem_alloc(e.ctx, e.dev, sizeof cu_q, &d_cu_q));
        OK(e.ctx, s2_mem_alloc(e.ctx, e.dev, sizeof cu_k, &d_cu_k));
    } else {
        OK(e.ctx, s2_attn_seqs_write(e.ctx, sq, seqs, e.stream));
    }
    OK(e.ctx, s2_stream_synchronize(e.ctx, e.dev, e.stream));

    int64_t calls0 = ca_calls(&e.ca);
    CUgraph graph;
    CUgraphExec exec;
    if (from_cu) {
        capture_begin(&g, &e);
        s2_status st = s2_attn_seqs_write_cu(e.ctx, k, sq, d_cu_q, d_cu_k, e.stream);
        char msg[512];
        snprintf(msg, sizeof msg, "%s", s2_ctx_message(e.ctx));
        s2_status st2 = st == S2_OK ? plan_launch(&e, plan, OP_FORWARD, &a) : st;
        if (st == S2_OK)
            snprintf(msg, sizeof msg, "%s", s2_ctx_message(e.ctx));
        capture_end(&g, &e, &graph, &exec);
        ck_assert_msg(st == S2_OK && st2 == S2_OK, "%s: NAME_seqs (%s) and the forward (%s) inside the capture: %s",
                      what, s2_status_name(st), s2_status_name(st2), msg);
    } else {
        capture_plan(&g, &e, plan, OP_FORWARD, &a, NULL, what, &graph, &exec);
    }

    replay_log log = {0};
    int64_t rows_checked = 0, live_seqs = 0;
    for (int r = 0; r < replays; r++) {
        uint64_t seed = base_seed * 37 + (uint64_t)r * 101;
        if (r > 0)
            draw_seqs(e.ctx, r, &s, seqs, cu_q, cu_k);
        fill_inputs(&q, &kt, &v, seed);   /* every row: the TMA kernel may read rows next to a sequence */
        upload_all(&e, all, 3);
        s2t_tensor_poison(&o);
        s2t_tensor_upload(e.ctx, e.dev, &o);
        s2t_dev_poison(e.ctx, e.dev, d_lse, nlse * 4);
        if (from_cu) {
            /* the graph turns these into the records itself; cu_k is the keys' own when they differ */
            OK(e.ctx, s2_memcpy_h2d(e.ctx, e.dev, d_cu_q, cu_q, sizeof cu_q));
            OK(e.ctx, s2_memcpy_h2d(e.ctx, e.dev, d_cu_k, cu_k, sizeof cu_k));
        } else {
            OK(e.ctx, s2_attn_seqs_write(e.ctx, sq, seqs, e.stream));
        }
        replay(&g, &e, exec);
        s2t_tensor_download(e.ctx, e.dev, &o);
        OK(e.ctx, s2_memcpy_d2h(e.ctx, e.dev, lse, d_lse, nlse * 4));

        s2_ref_seq rs[VL_N];
        s2t_ref_seqs(seqs, VL_N, rs);
        s2t_seq_rows(seqs, VL_N, mine, VL_ROWS);
        for (int i = 0; i < VL_N; i++)
            live_seqs += seqs[i].q_len > 0;
        s2_ref_problem rp = {.batch = VL_N, .heads = H, .kv_heads = HK, .head_dim = D, .q_len = VL_ROWS,
                             .kv_len = VL_ROWS, .causal = p->causal, .mask = ref_mask, .mask_user = p};
        OK(e.ctx, s2_ref_forward_varlen(e.ctx, &rp, rs, &q.t, &kt.t, &v.t, &rt, lse_ref));
        double num = 0, den = 0, lse_err = 0;
        int64_t nan_out = 0, bad_lse = 0, outside = 0;
        for (int64_t row = 0; row < VL_ROWS; row++)
            for (int h = 0; h < H; h++) {
                float lk = lse[(size_t)h * VL_ROWS + row];
                if (!mine[row]) {
                    outside += !isnan(lk);
                    for (int d = 0; d < D; d++)
                        outside += o.host[row * o.t.stride[1] + h * o.t.stride[2] + d] != S2T_POISON16;
                    continue;
                }
                rows_checked += h == 0;
                float lr = lse_ref[(size_t)h * VL_ROWS + row];
                bool empty = isinf(lr) && lr < 0;
                if (empty ? !(isinf(lk) && lk < 0) : !(fabs((double)lk - lr) <= 1e-3))
                    bad_lse++;
                else if (!empty)
                    lse_err = fmax(lse_err, fabs((double)lk - lr));
                for (int d = 0; d < D; d++) {
                    double x = s2_tensor_get(&o.t, 0, row, h, d), y = s2_tensor_get(&rt, 0, row, h, d);
                    nan_out += isnan(x) || (empty && x != 0.0);
                    num += (x - y) * (x - y);
                    den += y * y;
                }
            }
        double err = den > 0 ? sqrt(num / den) : sqrt(num);
        if (nan_out || bad_lse || outside || !(err <= tol_of(dt)))
            log_bad(&log,
                    "replay %d (seed %llu, sequences (q_start,q_len,k_start,kv_len) (%d,%d,%d,%d) (%d,%d,%d,%d) "
                    "(%d,%d,%d,%d) (%d,%d,%d,%d)): o err %.3g, %lld NaN, %lld bad lse, %lld outside written",
                    r, (unsigned long long)seed, seqs[0].q_start, seqs[0].q_len, seqs[0].k_start, seqs[0].kv_len,
                    seqs[1].q_start, seqs[1].q_len, seqs[1].k_start, seqs[1].kv_len, seqs[2].q_start, seqs[2].q_len,
                    seqs[2].k_start, seqs[2].kv_len, seqs[3].q_start, seqs[3].q_len, seqs[3].k_start,
                    seqs[3].kv_len, err, (long long)nan_out, (long long)bad_lse, (long long)outside);
        log.worst[0] = fmax(log.worst[0], err);
        log.worst[1] = fmax(log.worst[1], lse_err);
    }
    int64_t calls = ca_calls(&e.ca) - calls0;
    printf("%s: %s kernel, captured once, %d replays with new sequences (%lld non-empty, %lld query rows): %d bad, "
           "worst o error %.3g, lse %.3g; allocator calls during capture and replays %lld\n", what,
           kernel_persistent(k) ? "persistent" : "grid", replays, (long long)live_seqs, (long long)rows_checked,
           log.bad, log.worst[0], log.worst[1], (long long)calls);
    ck_assert_msg(log.bad == 0, "%s: %d of %d replays wrong; first: %s", what, log.bad, replays, log.first);
    ck_assert_msg(calls == 0, "%s: %lld allocator calls during capture and replays", what, (long long)calls);
    ck_assert_msg(kernel_persistent(k) == persistent, "%s: the kernel's ABI is not the one asked for", what);

    if (from_cu) {
        /* the records the last replay's NAME_seqs wrote are the host's conversion of its cu_seqlens */
        s2_attn_seq back[VL_N];
        OK(e.ctx, s2_memcpy_d2h(e.ctx, e.dev, back, s2_attn_seqs_device(sq), sizeof back));
        ck_assert_msg(memcmp(back, seqs, sizeof back) == 0, "%s: NAME_seqs wrote other records than s2_attn_seqs_packed",
                      what);
    }
    graph_free(&g, graph, exec);
    free_plan(&e, plan, &pi);
    s2_attn_seqs_free(sq);
    if (from_cu) {
        s2_mem_free(e.ctx, e.dev, d_cu_q);
        s2_mem_free(e.ctx, e.dev, d_cu_k);
    }
    free(lse), free(lse_ref), free(ref), free(mine);
    s2_mem_free(e.ctx, e.dev, d_lse);
    for (int i = 0; i < 4; i++)
        s2t_tensor_free(e.ctx, e.dev, all[i]);
    s2_attn_kernel_free(k);
    env_close(&e, what);
    check_plan_info(&pi, what);
}
END_TEST

/* ---- backward ------------------------------------------------------------------------ */

/* Relative Frobenius error against the float64 reference; counts NaNs and
 * changed elements of the row padding (test_bwd_gpu). */
static double bwd_compare(const s2t_tensor *x, const s2_tensor *ref, int64_t *bad)
{
    double num = 0, den = 0;
    const int64_t *e = x->ext;
    for (int64_t b = 0; b < e[0]; b++)
        for (int64_t s = 0; s < e[1]; s++)
            for (int64_t h = 0; h < e[2]; h++)
                for (int64_t d = 0; d < e[3]; d++) {
                    double v = s2_tensor_get(&x->t, b, s, h, d), r = s2_tensor_get(ref, b, s, h, d);
                    *bad += isnan(v);
                    num += (v - r) * (v - r);
                    den += r * r;
                }
    *bad += s2t_tensor_pad_written(x);
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

START_TEST(backward_graph)
{
    const char *what = "backward";
    graph_api g;
    graph_api_load(&g);
    env e;
    env_open(&e);
    const s2_pattern *p = NULL;
    const s2_dtype dt = S2_DTYPE_BF16;
    const s2_artifact *art = kernel_art(e.ctx, 0, S2_KERNEL_BWD, dt, 0, &p);
    s2_attn_kernel *k = load_kernel(e.ctx, e.dev, art, p, dt);
    const int B = 2, H = p->heads, HK = p->kv_heads;
    const int64_t SQ = 192, SK = 256;
    s2t_tensor q, kt, v, o, dO, dq, dk, dv;
    s2t_tensor_new(&q, dt, false, B, SQ, H, D, 0);
    s2t_tensor_new(&kt, dt, false, B, SK, HK, D, 0);
    s2t_tensor_new(&v, dt, false, B, SK, HK, D, 0);
    s2t_tensor_new(&o, dt, false, B, SQ, H, D, 0);
    s2t_tensor_new(&dO, dt, false, B, SQ, H, D, 0);
    s2t_tensor_new(&dq, dt, false, B, SQ, H, D, 8);
    s2t_tensor_new(&dk, dt, false, B, SK, HK, D, 8);
    s2t_tensor_new(&dv, dt, false, B, SK, HK, D, 8);
    s2t_tensor *ins[5] = {&q, &kt, &v, &o, &dO}, *outs[3] = {&dq, &dk, &dv};
    upload_all(&e, ins, 5);
    upload_all(&e, outs, 3);
    size_t nlse = (size_t)B * H * SQ;
    float *lse = malloc(nlse * 4), *dlse = malloc(nlse * 4);
    double *rq = malloc((size_t)B * SQ * H * D * 8), *rk = malloc((size_t)B * SK * HK * D * 8),
           *rv = malloc((size_t)B * SK * HK * D * 8);
    uint16_t *last[3] = {malloc(dq.elems * 2), malloc(dk.elems * 2), malloc(dv.elems * 2)};
    ck_assert(lse && dlse && rq && rk && rv && last[0] && last[1] && last[2]);
    s2_tensor tq = s2_tensor_bshd(rq, S2_DTYPE_F64, SQ, H, D), tk = s2_tensor_bshd(rk, S2_DTYPE_F64, SK, HK, D),
              tv = s2_tensor_bshd(rv, S2_DTYPE_F64, SK, HK, D);
    s2_devptr d_lse = s2t_dev_alloc_poisoned(e.ctx, e.dev, nlse * 4), d_dlse = s2t_dev_alloc_poisoned(e.ctx, e.dev, nlse * 4);

    s2_attn_bwd_args a = {.batch = B, .q_len = SQ, .kv_len = SK, .heads = H, .kv_heads = HK, .head_dim = D,
                          .dtype = dt, .q = q.dev, .k = kt.dev, .v = v.dev, .o = o.dev, .d_o = dO.dev, .lse = d_lse,
                          .d_lse = d_dlse, .dq = dq.dev, .dk = dk.dev, .dv = dv.dev, .workspace = 0};
    const s2t_tensor *ts8[8] = {&q, &kt, &v, &o, &dO, &dq, &dk, &dv};
    int64_t *dst8[8] = {a.q_stride, a.k_stride, a.v_stride, a.o_stride, a.do_stride, a.dq_stride, a.dk_stride,
                        a.dv_stride};
    for (int i = 0; i < 8; i++)
        memcpy(dst8[i], ts8[i]->t.stride, 3 * sizeof(int64_t));
    s2_attn_plan *plan = NULL;
    OK(e.ctx, s2_attn_plan_new(e.ctx, k, &plan));
    OK(e.ctx, s2_attn_plan_add_backward(e.ctx, plan, &a));
    plan_info pi;
    prepare_plan(&e, plan, &pi);

    int64_t calls0 = ca_calls(&e.ca);
    s2_attn_bwd_args b = a;
    b.q_len = SQ - 64;   /* not declared */
    CUgraph graph;
    CUgraphExec exec;
    capture_plan(&g, &e, plan, OP_BACKWARD, &a, &b, what, &graph, &exec);

    s2_ref_problem rp = {.batch = B, .heads = H, .kv_heads = HK, .head_dim = D, .q_len = SQ, .kv_len = SK,
                         .causal = p->causal, .mask = ref_mask, .mask_user = p};
    replay_log log = {0};
    int64_t same_bad = -1;
    for (int r = 0; r <= replays; r++) {
        /* the extra last replay repeats the inputs of the one before: bitwise the same */
        const bool again = r == replays;
        uint64_t seed = base_seed * 41 + (uint64_t)(again ? r - 1 : r) * 101;
        if (!again) {
            fill_inputs(&q, &kt, &v, seed);
            s2_tensor_fill_random(&dO.t, dO.ext, seed + 3, -1.0, 1.0);
            for (size_t i = 0; i < nlse; i++)
                dlse[i] = (float)(((seed + i * 2654435761u) % 2001) / 1000.0 - 1.0);
            OK(e.ctx, s2_ref_forward(e.ctx, &rp, &q.t, &kt.t, &v.t, &o.t, lse));   /* o rounded to bf16 */
            upload_all(&e, ins, 5);
            OK(e.ctx, s2_memcpy_h2d(e.ctx, e.dev, d_lse, lse, nlse * 4));
            OK(e.ctx, s2_memcpy_h2d(e.ctx, e.dev, d_dlse, dlse, nlse * 4));
        }
        for (int i = 0; i < 3; i++) {
            s2t_tensor_poison(outs[i]);
            s2t_tensor_upload(e.ctx, e.dev, outs[i]);
        }
        replay(&g, &e, exec);
        for (int i = 0; i < 3; i++)
            s2t_tensor_download(e.ctx, e.dev, outs[i]);
        if (again) {
            same_bad = 0;
            for (int i = 0; i < 3; i++)
                same_bad += memcmp(last[i], outs[i]->host, outs[i]->elems * 2) != 0;
            break;
        }
        OK(e.ctx, s2_ref_backward(e.ctx, &rp, &q.t, &kt.t, &v.t, &o.t, &dO.t, lse, dlse, &tq, &tk, &tv));
        const s2_tensor *refs[3] = {&tq, &tk, &tv};
        int64_t bad = 0;
        double err[3];
        for (int i = 0; i < 3; i++) {
            err[i] = bwd_compare(outs[i], refs[i], &bad);
            log.worst[i] = fmax(log.worst[i], err[i]);
            memcpy(last[i], outs[i]->host, outs[i]->elems * 2);
        }
        if (bad || !(err[0] <= tol_of(dt) && err[1] <= tol_of(dt) && err[2] <= tol_of(dt)))
            log_bad(&log, "replay %d (seed %llu): errors dq %.3g dk %.3g dv %.3g, %lld NaN or padding written", r,
                    (unsigned long long)seed, err[0], err[1], err[2], (long long)bad);
    }
    int64_t calls = ca_calls(&e.ca) - calls0;
    printf("%s: captured once (unprepared shape inside: S2_ERR_CAPTURE), plan's workspace, %d replays with new "
           "inputs: %d bad, worst errors dq %.3g dk %.3g dv %.3g; repeat replay %s; allocator calls during capture "
           "and replays %lld\n", what, replays, log.bad, log.worst[0], log.worst[1], log.worst[2],
           same_bad == 0 ? "bitwise the same" : "DIFFERS", (long long)calls);
    ck_assert_msg(log.bad == 0, "%s: %d of %d replays wrong; first: %s", what, log.bad, replays, log.first);
    ck_assert_msg(same_bad == 0, "%s: a replay on the same inputs differs bitwise in %lld of dq, dk, dv", what,
                  (long long)same_bad);
    ck_assert_msg(calls == 0, "%s: %lld allocator calls during capture and replays", what, (long long)calls);

    graph_free(&g, graph, exec);
    free_plan(&e, plan, &pi);
    for (int i = 0; i < 3; i++)
        free(last[i]);
    free(lse), free(dlse), free(rq), free(rk), free(rv);
    s2_mem_free(e.ctx, e.dev, d_lse);
    s2_mem_free(e.ctx, e.dev, d_dlse);
    for (int i = 0; i < 5; i++)
        s2t_tensor_free(e.ctx, e.dev, ins[i]);
    for (int i = 0; i < 3; i++)
        s2t_tensor_free(e.ctx, e.dev, outs[i]);
    s2_attn_kernel_free(k);
    env_close(&e, what);
    check_plan_info(&pi, what);
}
END_TEST

/* ---- paged decode, split-KV -------------------------------------------------------- */

enum { DEC_B = 3, DEC_N = 2, DEC_PAGE = 32, DEC_MAX = 600, DEC_SPLITS = 4 };

typedef struct dec_problem {
    int H, HK;
    int64_t max_pages, num_pages;
    int64_t lens[DEC_B];
    int32_t lens32[DEC_B];
    int32_t *table;              /* [DEC_B][max_pages], one row for every kv head */
    uint16_t *kp, *vp, *q;
    size_t pool_elems;
} dec_problem;

/* New lengths (the first sequence the longest allowed on even replays), a
 * new shuffled table, new pools: random where the pattern reads, NaN
 * elsewhere (slots past a length, pages of blocks nobody keeps). */
static void dec_draw(dec_problem *pr, const s2_pattern *p, s2_dtype dt, int r, uint64_t *s)
{
    for (int b = 0; b < DEC_B; b++) {
        pr->lens[b] = b == 0 && r % 2 == 0 ? DEC_MAX : rng_int(s, DEC_N, DEC_MAX);
        pr->lens32[b] = (int32_t)pr->lens[b];
    }
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)pr->num_pages);
    ck_assert_ptr_nonnull(perm);
    s2t_shuffle_ids(perm, pr->num_pages, s);
    memcpy(pr->table, perm, sizeof(int32_t) * (size_t)(DEC_B * pr->max_pages));
    free(perm);
    s2t_poison16(pr->kp, pr->pool_elems);
    s2t_poison16(pr->vp, pr->pool_elems);
    s2_tensor tk = s2_tensor_bshd(pr->kp, dt, DEC_PAGE, pr->HK, D), tv = s2_tensor_bshd(pr->vp, dt, DEC_PAGE, pr->HK, D);
    s2_tensor tq = s2_tensor_bshd(pr->q, dt, DEC_N, pr->H, D);
    int64_t qe[4] = {DEC_B, DEC_N, pr->H, D};
    s2_tensor_fill_random(&tq, qe, rng_next(s), -2, 2);
    for (int b = 0; b < DEC_B; b++)
        for (int gk = 0; gk < pr->HK; gk++)
            for (int64_t j = 0; j < cdiv(pr->lens[b], DEC_PAGE); j++) {
                int32_t page = pr->table[b * pr->max_pages + j];
                bool need = false;
                for (int64_t n = j * DEC_PAGE / p->block_size; n * p->block_size < (j + 1) * DEC_PAGE && !need; n++)
                    need = s2t_block_needed(p, gk, pr->lens[b], DEC_N, n);
                if (!need)
                    continue;
                for (int64_t slot = 0; slot < DEC_PAGE && j * DEC_PAGE + slot < pr->lens[b]; slot++)
                    for (int d = 0; d < D; d++) {
                        s2_tensor_set(&tk, page, slot, gk, d, ((double)(rng_next(s) % 4001) - 2000) / 1000.0);
                        s2_tensor_set(&tv, page, slot, gk, d, ((double)(rng_next(s) % 2001) - 1000) / 1000.0);
                    }
            }
}

START_TEST(decode_graph)
{
    const char *what = "decode";
    graph_api g;
    graph_api_load(&g);
    env e;
    env_open(&e);
    const s2_pattern *p = NULL;
    const s2_dtype dt = S2_DTYPE_BF16;
    const s2_artifact *art = kernel_art(e.ctx, 4, S2_KERNEL_DECODE, dt, 0, &p);   /* GQA 8/4, two dense heads */
    s2_attn_kernel *k = load_kernel(e.ctx, e.dev, art, p, dt);
    dec_problem pr = {.H = p->heads, .HK = p->kv_heads};
    pr.max_pages = cdiv(DEC_MAX, DEC_PAGE);
    pr.num_pages = DEC_B * pr.max_pages + 7;   /* a few never referenced */
    pr.pool_elems = (size_t)pr.num_pages * DEC_PAGE * pr.HK * D;
    pr.table = malloc(sizeof(int32_t) * (size_t)(DEC_B * pr.max_pages));
    pr.kp = malloc(pr.pool_elems * 2);
    pr.vp = malloc(pr.pool_elems * 2);
    size_t q_elems = (size_t)DEC_B * DEC_N * pr.H * D, lse_n = (size_t)DEC_B * pr.H * DEC_N;
    pr.q = malloc(q_elems * 2);
    uint16_t *o = malloc(q_elems * 2);
    float *lse = malloc(lse_n * 4), *ref_lse = malloc(lse_n * 4);
    double *ref_o = malloc(q_elems * sizeof(double));
    ck_assert(pr.table && pr.kp && pr.vp && pr.q && o && lse && ref_lse && ref_o);
    s2_devptr dq = 0, dk = 0, dv = 0, dtab = 0, dlen = 0, dout = 0, dlse = 0;
    OK(e.ctx, s2_mem_alloc(e.ctx, e.dev, q_elems * 2, &dq));
    OK(e.ctx, s2_mem_alloc(e.ctx, e.dev, pr.pool_elems * 2, &dk));
    OK(e.ctx, s2_mem_alloc(e.ctx, e.dev, pr.pool_elems * 2, &dv));
    OK(e.ctx, s2_mem_alloc(e.ctx, e.dev, sizeof(int32_t) * (size_t)(DEC_B * pr.max_pages), &dtab));
    OK(e.ctx, s2_mem_alloc(e.ctx, e.dev, sizeof(int32_t) * DEC_B, &dlen));
    OK(e.ctx, s2_mem_alloc(e.ctx, e.dev, q_elems * 2, &dout));
    OK(e.ctx, s2_mem_alloc(e.ctx, e.dev, lse_n * 4, &dlse));
    uint64_t s = base_seed * 1000033u + 5;
    dec_draw(&pr, p, dt, 0, &s);
    OK(e.ctx, s2_memcpy_h2d(e.ctx, e.dev, dtab, pr.table, sizeof(int32_t) * (size_t)(DEC_B * pr.max_pages)));
    OK(e.ctx, s2_memcpy_h2d(e.ctx, e.dev, dlen, pr.lens32, sizeof pr.lens32));

    s2_attn_decode_args a = {.batch = DEC_B, .n_new = DEC_N, .heads = pr.H, .kv_heads = pr.HK, .head_dim = D,
                             .dtype = dt, .q = dq, .o = dout, .lse = dlse, .k_pages = dk, .v_pages = dv,
                             .num_pages = pr.num_pages, .page_size = DEC_PAGE, .block_table = dtab,
                             .table_stride = {pr.max_pages, 0}, .max_pages_per_seq = pr.max_pages,
                             .seq_lens = dlen, .max_seq_len = DEC_MAX, .workspace = 0, .splits = DEC_SPLITS};
    int64_t qs[3] = {(int64_t)DEC_N * pr.H * D, (int64_t)pr.H * D, D};
    int64_t ks[3] = {(int64_t)DEC_PAGE * pr.HK * D, (int64_t)pr.HK * D, D};
    memcpy(a.q_stride, qs, sizeof qs), memcpy(a.o_stride, qs, sizeof qs);
    memcpy(a.k_stride, ks, sizeof ks), memcpy(a.v_stride, ks, sizeof ks);
    /* splits > 1 needs a workspace: the plan's (a null workspace) */
    size_t wsb = 0;
    OK(e.ctx, s2_attn_decode_workspace(e.ctx, k, &a, &wsb));
    ck_assert_msg(wsb > 0, "%s: %d splits ask for no workspace", what, DEC_SPLITS);
    s2_attn_plan *plan = NULL;
    OK(e.ctx, s2_attn_plan_new(e.ctx, k, &plan));
    OK(e.ctx, s2_attn_plan_add_decode(e.ctx, plan, &a));
    plan_info pi;
    prepare_plan(&e, plan, &pi);

    int64_t calls0 = ca_calls(&e.ca);
    CUgraph graph;
    CUgraphExec exec;
    capture_plan(&g, &e, plan, OP_DECODE, &a, NULL, what, &graph, &exec);

    const int64_t table_strides[3] = {pr.max_pages, 0, 1};
    replay_log log = {0};
    for (int r = 0; r < replays; r++) {
        if (r > 0)
            dec_draw(&pr, p, dt, r, &s);
        OK(e.ctx, s2_memcpy_h2d(e.ctx, e.dev, dq, pr.q, q_elems * 2));
        OK(e.ctx, s2_memcpy_h2d(e.ctx, e.dev, dk, pr.kp, pr.pool_elems * 2));
        OK(e.ctx, s2_memcpy_h2d(e.ctx, e.dev, dv, pr.vp, pr.pool_elems * 2));
        OK(e.ctx, s2_memcpy_h2d(e.ctx, e.dev, dtab, pr.table, sizeof(int32_t) * (size_t)(DEC_B * pr.max_pages)));
        OK(e.ctx, s2_memcpy_h2d(e.ctx, e.dev, dlen, pr.lens32, sizeof pr.lens32));
        s2t_dev_poison(e.ctx, e.dev, dout, q_elems * 2);
        s2t_dev_poison(e.ctx, e.dev, dlse, lse_n * 4);
        replay(&g, &e, exec);
        OK(e.ctx, s2_memcpy_d2h(e.ctx, e.dev, o, dout, q_elems * 2));
        OK(e.ctx, s2_memcpy_d2h(e.ctx, e.dev, lse, dlse, lse_n * 4));

        s2_ref_paged_problem rp = {.batch = DEC_B, .heads = pr.H, .kv_heads = pr.HK, .head_dim = D, .q_len = DEC_N,
                                   .kv_lens = pr.lens, .block_table = pr.table, .max_pages_per_seq = pr.max_pages,
                                   .num_pages = pr.num_pages, .page_size = DEC_PAGE, .causal = p->causal,
                                   .mask = ref_mask, .mask_user = p, .table_strides = table_strides};
        s2_tensor tq = s2_tensor_bshd(pr.q, dt, DEC_N, pr.H, D);
        s2_tensor tk = s2_tensor_bshd(pr.kp, dt, DEC_PAGE, pr.HK, D), tv = s2_tensor_bshd(pr.vp, dt, DEC_PAGE, pr.HK, D);
        s2_tensor tro = s2_tensor_bshd(ref_o, S2_DTYPE_F64, DEC_N, pr.H, D);
        OK(e.ctx, s2_ref_decode_paged(e.ctx, &rp, &tq, &tk, &tv, &tro, ref_lse));
        /* per (token, head) row, as test_decode_gpu */
        s2_tensor to = s2_tensor_bshd(o, dt, DEC_N, pr.H, D);
        double o_err = 0, lse_err = 0;
        for (int b = 0; b < DEC_B; b++)
            for (int t = 0; t < DEC_N; t++)
                for (int h = 0; h < pr.H; h++) {
                    double num = 0, den = 0;
                    for (int d = 0; d < D; d++) {
                        double rr = ref_o[(((int64_t)b * DEC_N + t) * pr.H + h) * D + d];
                        double gg = s2_tensor_get(&to, b, t, h, d);
                        num += (gg - rr) * (gg - rr);
                        den += rr * rr;
                    }
                    double er = den > 0 ? sqrt(num / den) : sqrt(num);
                    if (!(er <= o_err))
                        o_err = isnan(er) ? INFINITY : fmax(o_err, er);
                    int64_t li = ((int64_t)b * pr.H + h) * DEC_N + t;
                    double le = ref_lse[li] == -INFINITY ? (lse[li] == -INFINITY ? 0 : INFINITY)
                                                         : fabs(lse[li] - ref_lse[li]);
                    if (!(le <= lse_err))
                        lse_err = isnan(le) ? INFINITY : fmax(lse_err, le);
                }
        if (!(o_err <= tol_of(dt) && lse_err <= 2e-3))
            log_bad(&log, "replay %d (seq_lens %lld %lld %lld): o err %.3g, lse err %.3g", r, (long long)pr.lens[0],
                    (long long)pr.lens[1], (long long)pr.lens[2], o_err, lse_err);
        log.worst[0] = fmax(log.worst[0], o_err);
        log.worst[1] = fmax(log.worst[1], lse_err);
    }
    int64_t calls = ca_calls(&e.ca) - calls0;
    printf("%s: %d splits in the plan's workspace (%zu bytes asked), captured once, %d replays with new seq_lens, "
           "tables and pools: %d bad, worst o error %.3g, lse %.3g; allocator calls during capture and replays %lld\n",
           what, DEC_SPLITS, wsb, replays, log.bad, log.worst[0], log.worst[1], (long long)calls);
    ck_assert_msg(log.bad == 0, "%s (seed %llu): %d of %d replays wrong; first: %s", what,
                  (unsigned long long)base_seed, log.bad, replays, log.first);
    ck_assert_msg(calls == 0, "%s: %lld allocator calls during capture and replays", what, (long long)calls);
    ck_assert_msg(pi.held >= wsb, "%s: the plan holds %zu device bytes, less than the %zu bytes of workspace", what,
                  pi.held, wsb);

    graph_free(&g, graph, exec);
    free_plan(&e, plan, &pi);
    s2_devptr bufs[] = {dq, dk, dv, dtab, dlen, dout, dlse};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        s2_mem_free(e.ctx, e.dev, bufs[i]);
    free(pr.table), free(pr.kp), free(pr.vp), free(pr.q), free(o), free(lse), free(ref_lse), free(ref_o);
    s2_attn_kernel_free(k);
    env_close(&e, what);
    check_plan_info(&pi, what);
}
END_TEST

/* ---- concurrency: threads, streams, shared kernels and plans ---------------------- */

enum { NTHREADS = 4, NSTREAMS = 4, NSHAPES = 6, SHAPES_PER_THREAD = 3, CMAX = 256, CHECK_EVERY = 100 };
static const int64_t conc_shape[NSHAPES][2] = {{64, 64}, {128, 128}, {100, 256}, {256, 256}, {17, 200}, {192, 192}};

typedef struct conc_kernel {
    s2_attn_kernel *k;
    s2_attn_plan *plan;
    s2_dtype dt;
} conc_kernel;

typedef struct conc_job {
    int id, launches;
    s2_device *dev;
    conc_kernel *kern;                                 /* [2] */
    s2t_tensor q[2], kt[2], v[2];                      /* per kernel */
    s2t_tensor o[NSTREAMS][2];                         /* per stream and kernel: launches on other streams may overlap */
    s2_devptr d_lse[NSTREAMS][2];
    float *lse;
    double *ref[2][SHAPES_PER_THREAD];
    float *lse_ref[2][SHAPES_PER_THREAD];
    /* results */
    int64_t checked, bad, plan_launches;
    double worst;
    s2_status st;
    char msg[512];
} conc_job;

static int64_t conc_q_len(const conc_job *j, int si) { return conc_shape[(j->id + si) % NSHAPES][0]; }
static int64_t conc_kv_len(const conc_job *j, int si) { return conc_shape[(j->id + si) % NSHAPES][1]; }

/* Output kk (last launched with shape si) against the reference; `full`:
 * also every element outside the shape's rows must be poison. */
static void conc_check(conc_job *j, s2_ctx *ctx, int sx, int kk, int si, bool full, int l)
{
    int64_t ql = conc_q_len(j, si);
    s2t_tensor *o = &j->o[sx][kk];
    const int H = (int)o->ext[2];
    s2_status st = s2_memcpy_d2h(ctx, j->dev, o->host, o->dev, o->elems * 2);
    if (st == S2_OK)
        st = s2_memcpy_d2h(ctx, j->dev, j->lse, j->d_lse[sx][kk], (size_t)H * ql * 4);
    if (st != S2_OK) {
        j->st = st;
        snprintf(j->msg, sizeof j->msg, "launch %d: download: %s", l, s2_ctx_message(ctx));
        return;
    }
    s2_tensor rt = s2_tensor_bshd(j->ref[kk][si], S2_DTYPE_F64, ql, H, D);
    compare c;
    compare_out(o, j->lse, &rt, j->lse_ref[kk][si], ql, &c);
    int64_t outside = full ? outside_written(o, ql) : 0;
    j->checked++;
    j->worst = fmax(j->worst, c.o_err);
    if (c.nan_out || c.bad_lse || outside || !(c.o_err <= tol_of(j->kern[kk].dt))) {
        if (j->bad++ == 0)
            snprintf(j->msg, sizeof j->msg,
                     "launch %d (stream %d, kernel %d, q_len %lld, kv_len %lld): o err %.3g, %lld NaN, %lld bad lse, %lld "
                     "outside written", l, sx, kk, (long long)ql, (long long)conc_kv_len(j, si), c.o_err,
                     (long long)c.nan_out, (long long)c.bad_lse, (long long)outside);
    }
}

static int conc_main(void *arg)
{
    conc_job *j = arg;
    s2_ctx *ctx = s2_ctx_new();
    void *streams[NSTREAMS] = {0};
    s2_status st = S2_OK;
    for (int sx = 0; sx < NSTREAMS && st == S2_OK; sx++)
        st = s2_stream_create(ctx, j->dev, &streams[sx]);
    int last_shape[NSTREAMS][2];
    memset(last_shape, 0xff, sizeof last_shape);
    for (int l = 0; l < j->launches && st == S2_OK && j->bad == 0; l++) {
        /* kernels alternate, streams rotate every two launches, shapes every eight */
        int kk = l % 2, sx = (l / 2) % NSTREAMS, si = (l / (2 * NSTREAMS)) % SHAPES_PER_THREAD;
        void *stream = streams[sx];
        bool use_plan = l % 5 < 3, check = l % CHECK_EVERY == CHECK_EVERY - 1;
        s2t_tensor *o = &j->o[sx][kk];
        const int H = (int)o->ext[2];
        int64_t ql = conc_q_len(j, si), kl = conc_kv_len(j, si);
        s2_attn_fwd_args a = {.batch = 1, .q_len = ql, .kv_len = kl, .heads = H, .kv_heads = (int)j->kt[kk].ext[2],
                              .head_dim = D, .dtype = j->kern[kk].dt, .lse = j->d_lse[sx][kk]};
        fill_args(&a, &j->q[kk], &j->kt[kk], &j->v[kk], o);
        if (check) {
            /* earlier launches into these outputs done, then this one alone on poisoned outputs */
            if ((st = s2_stream_synchronize(ctx, j->dev, stream)) != S2_OK ||
                (st = s2_memset_d8(ctx, j->dev, o->dev, S2T_POISON_BYTE, o->elems * 2)) != S2_OK ||
                (st = s2_memset_d8(ctx, j->dev, j->d_lse[sx][kk], S2T_POISON_BYTE, (size_t)H * CMAX * 4)) != S2_OK)
                break;
        }
        st = use_plan ? s2_attn_plan_forward(ctx, j->kern[kk].plan, stream, &a)
                      : s2_attn_forward(ctx, j->kern[kk].k, stream, &a);
        if (st != S2_OK)
            break;
        j->plan_launches += use_plan;
        last_shape[sx][kk] = si;
        if (check) {
            if ((st = s2_stream_synchronize(ctx, j->dev, stream)) != S2_OK)
                break;
            conc_check(j, ctx, sx, kk, si, true, l);
            st = j->st;
        }
    }
    /* the last launch into each output */
    for (int sx = 0; sx < NSTREAMS && st == S2_OK && j->bad == 0; sx++)
        st = s2_stream_synchronize(ctx, j->dev, streams[sx]);
    for (int sx = 0; sx < NSTREAMS && st == S2_OK && j->bad == 0; sx++)
        for (int kk = 0; kk < 2 && st == S2_OK && j->bad == 0; kk++)
            if (last_shape[sx][kk] >= 0) {
                conc_check(j, ctx, sx, kk, last_shape[sx][kk], false, j->launches - 1);
                st = j->st;
            }
    if (st != S2_OK && j->msg[0] == 0)
        snprintf(j->msg, sizeof j->msg, "%s", s2_ctx_message(ctx));
    j->st = st;
    for (int sx = 0; sx < NSTREAMS; sx++)
        if (streams[sx]) {
            s2_stream_synchronize(ctx, j->dev, streams[sx]);
            s2_stream_destroy(ctx, j->dev, streams[sx]);
        }
    s2_ctx_free(ctx);
    return 0;
}

START_TEST(concurrency)
{
    const char *what = "concurrency";
    const char *env_launches = getenv("S2C_CONC_LAUNCHES");
    int launches = env_launches ? atoi(env_launches) : 1000;
    ck_assert_msg(launches >= 1, "S2C_CONC_LAUNCHES=%s", env_launches);
    env e;
    env_open(&e);
    const int pat[2] = {0, 2};
    const s2_dtype dts[2] = {S2_DTYPE_BF16, S2_DTYPE_F16};
    const s2_pattern *ps[2];
    conc_kernel kern[2];
    for (int kk = 0; kk < 2; kk++) {
        const s2_artifact *art = kernel_art(e.ctx, pat[kk], S2_KERNEL_FWD, dts[kk], 0, &ps[kk]);
        kern[kk] = (conc_kernel){.k = load_kernel(e.ctx, e.dev, art, ps[kk], dts[kk]), .dt = dts[kk]};
    }

    static conc_job jobs[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) {
        conc_job *j = &jobs[t];
        memset(j, 0, sizeof *j);
        j->id = t, j->launches = launches, j->dev = e.dev, j->kern = kern;
        j->lse = malloc((size_t)8 * CMAX * 4);
        ck_assert_ptr_nonnull(j->lse);
        for (int kk = 0; kk < 2; kk++) {
            const s2_pattern *p = ps[kk];
            const int H = p->heads, HK = p->kv_heads;
            ck_assert_int_le(H, 8);
            s2t_tensor_new(&j->q[kk], dts[kk], false, 1, CMAX, H, D, 0);
            s2t_tensor_new(&j->kt[kk], dts[kk], false, 1, CMAX, HK, D, 0);
            s2t_tensor_new(&j->v[kk], dts[kk], false, 1, CMAX, HK, D, 0);
            fill_inputs(&j->q[kk], &j->kt[kk], &j->v[kk], base_seed * 43 + (uint64_t)t * 7 + (uint64_t)kk * 1009);
            s2t_tensor *all[3] = {&j->q[kk], &j->kt[kk], &j->v[kk]};
            upload_all(&e, all, 3);
            for (int sx = 0; sx < NSTREAMS; sx++) {
                s2t_tensor_new(&j->o[sx][kk], dts[kk], false, 1, CMAX, H, D, 8);
                s2t_tensor *out[1] = {&j->o[sx][kk]};
                upload_all(&e, out, 1);
                j->d_lse[sx][kk] = s2t_dev_alloc_poisoned(e.ctx, e.dev, (size_t)H * CMAX * 4);
            }
            for (int si = 0; si < SHAPES_PER_THREAD; si++) {
                s2_tensor rt;
                OK(e.ctx, reference(e.ctx, p, &j->q[kk], &j->kt[kk], &j->v[kk], conc_q_len(j, si), conc_kv_len(j, si),
                                    &j->ref[kk][si], &rt, &j->lse_ref[kk][si]));
            }
        }
    }
    /* one plan per kernel, shared by every thread: every shape but one */
    plan_info pi[2];
    for (int kk = 0; kk < 2; kk++) {
        OK(e.ctx, s2_attn_plan_new(e.ctx, kern[kk].k, &kern[kk].plan));
        for (int sh = 0; sh < NSHAPES; sh++) {
            if (sh == (kk == 0 ? NSHAPES - 1 : 0))
                continue;   /* left to the kernel's own path */
            s2_attn_fwd_args a = {.batch = 1, .q_len = conc_shape[sh][0], .kv_len = conc_shape[sh][1],
                                  .heads = ps[kk]->heads, .kv_heads = ps[kk]->kv_heads, .head_dim = D,
                                  .dtype = dts[kk], .lse = jobs[0].d_lse[0][kk]};
            fill_args(&a, &jobs[0].q[kk], &jobs[0].kt[kk], &jobs[0].v[kk], &jobs[0].o[0][kk]);
            OK(e.ctx, s2_attn_plan_add_forward(e.ctx, kern[kk].plan, &a));
        }
        prepare_plan(&e, kern[kk].plan, &pi[kk]);
    }

    thrd_t th[NTHREADS];
    for (int t = 0; t < NTHREADS; t++)
        ck_assert_int_eq(thrd_create(&th[t], conc_main, &jobs[t]), thrd_success);
    for (int t = 0; t < NTHREADS; t++)
        thrd_join(th[t], NULL);
    int64_t checked = 0, plan_launches = 0;
    double worst = 0;
    for (int t = 0; t < NTHREADS; t++)
        checked += jobs[t].checked, plan_launches += jobs[t].plan_launches, worst = fmax(worst, jobs[t].worst);
    printf("%s: %d threads x %d streams each, %d launches per thread (%lld through the plans), 2 kernels, %d shapes: "
           "%lld launches checked, worst o error %.3g\n", what, NTHREADS, NSTREAMS, launches, (long long)plan_launches, NSHAPES,
           (long long)checked, worst);
    for (int t = 0; t < NTHREADS; t++) {
        ck_assert_msg(jobs[t].st == S2_OK, "%s: thread %d: %s: %s", what, t, s2_status_name(jobs[t].st), jobs[t].msg);
        ck_assert_msg(jobs[t].bad == 0, "%s (seed %llu): thread %d: %lld bad checks; first: %s", what,
                      (unsigned long long)base_seed, t, (long long)jobs[t].bad, jobs[t].msg);
        ck_assert_int_ge(jobs[t].checked, launches / CHECK_EVERY + (launches >= 2 * NSTREAMS ? 2 * NSTREAMS : 1));
    }

    for (int kk = 0; kk < 2; kk++) {
        free_plan(&e, kern[kk].plan, &pi[kk]);
        s2_attn_kernel_free(kern[kk].k);
    }
    for (int t = 0; t < NTHREADS; t++) {
        conc_job *j = &jobs[t];
        for (int kk = 0; kk < 2; kk++) {
            s2t_tensor *all[3] = {&j->q[kk], &j->kt[kk], &j->v[kk]};
            for (int i = 0; i < 3; i++)
                s2t_tensor_free(e.ctx, e.dev, all[i]);
            for (int sx = 0; sx < NSTREAMS; sx++) {
                s2t_tensor_free(e.ctx, e.dev, &j->o[sx][kk]);
                s2_mem_free(e.ctx, e.dev, j->d_lse[sx][kk]);
            }
            for (int si = 0; si < SHAPES_PER_THREAD; si++)
                free(j->ref[kk][si]), free(j->lse_ref[kk][si]);
        }
        free(j->lse);
    }
    env_close(&e, what);
    check_plan_info(&pi[0], "concurrency, plan 0");
    check_plan_info(&pi[1], "concurrency, plan 1");
}
END_TEST

/* ---- main ---------------------------------------------------------------------------- */

static bool wanted(const char *name)
{
    const char *f = getenv("S2C_GRAPH_CASES");
    if (!f || !*f)
        return true;
    size_t n = strlen(name);
    for (const char *s = f; *s;) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        if (len == n && !strncmp(s, name, n))
            return true;
        s += len + (end ? 1 : 0);
    }
    return false;
}

#define ADD_CASE(s, name, test, loops)                                                                         \
    do {                                                                                                       \
        if (wanted(name)) {                                                                                    \
            TCase *tc_ = tcase_create(name);                                                                   \
            tcase_set_timeout(tc_, 600);                                                                       \
            tcase_add_loop_test(tc_, test, 0, loops);                                                          \
            suite_add_tcase(s, tc_);                                                                           \
        }                                                                                                      \
    } while (0)

int main(void)
{
    s2t_gpu g;
    int rc = s2t_gpu_start("compiling for", NULL, &g);
    if (rc != 0)
        return rc;
    dev_arch = g.arch;
    base_seed = g.seed;
    const char *r = getenv("S2C_GRAPH_REPLAYS");
    if (r) {
        replays = atoi(r);
        if (replays < 1) {
            printf("S2C_GRAPH_REPLAYS=%s: want a count >= 1\n", r);
            return 1;
        }
    }

    Suite *s = suite_create("graph_gpu");
    ADD_CASE(s, "forward", forward_graph, 2);
    ADD_CASE(s, "varlen", varlen_graph, 4);
    ADD_CASE(s, "backward", backward_graph, 1);
    ADD_CASE(s, "decode", decode_graph, 1);
    ADD_CASE(s, "concurrency", concurrency, 1);
    int failed = s2t_run_nofork(s);
    for (int i = 0; i < narts; i++) {
        s2_artifact_free(arts[i].art);
        s2_pattern_set_free(arts[i].set);
    }
    return failed ? 1 : 0;
}
