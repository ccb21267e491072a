/* Concurrent launches on shared kernels (attn_runtime.h, "Threads:"), on the
 * fake libcuda of tests/runtime: 4 threads, each with its own s2_ctx and 4
 * streams, make 1,000 launches each of s2_attn_forward (and of s2_attn_plan_forward through a plan
 * the threads share) on two kernels of
 * different patterns and 12 shapes each (more than S2_ATTN_SCHED_CACHE, so
 * the schedule caches hit, miss and evict at once), and of s2_attn_decode on
 * a decode kernel.  Every launch must return S2_OK and the fake's copy of the
 * thread's own last launch (fake_cuda_thread_last_launch) must hold that
 * launch's stream, grid, block and parameters.  At the end every kernel's
 * hits + misses equal its launches, and freeing the buffers and modules
 * brings the fake's live allocations back to where they were.  The CI runs it
 * in a ThreadSanitizer build as well (.ci/run).
 * Usage: test_concurrency FAKE_LIB */
#include "../attn/patterns.h"
#include "../runtime/fake_cuda.h"
#include "kernel_abi.h"
#include "rt_cuda.h"
#include "s2c/attn_runtime.h"
#include "s2c/cache.h"
#include "s2c/codegen.h"
#include "s2c/compile.h"
#include "s2c/decode.h"
#include "s2c/layout.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { THREADS = 4, STREAMS = 4, LAUNCHES = 1000, FWD_KERNELS = 2, SHAPES = 12, BATCH = 2, MAX_LEN = 1024 };

static fake_cuda_get_fn fake_get;
static fake_cuda_thread_param_sizes_fn fake_thread_param_sizes;
static fake_cuda_thread_last_launch_fn fake_thread_last;
static atomic_int failures;

static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (atomic_fetch_add(&failures, 1) < 20) { /* the first few are enough */
        flockfile(stderr);
        fprintf(stderr, "FAIL: ");
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        funlockfile(stderr);
    }
    va_end(ap);
}

#define CHECK(cond, ...) do { if (!(cond)) { fail(__VA_ARGS__); return false; } } while (0)

/* One forward kernel, the shapes it is launched with and their query tiles. */
typedef struct fwd_kernel {
    s2_pattern_set *set;
    s2_artifact *art;
    s2_attn_module *mod;
    s2_attn_kernel *k;
    const s2_manifest_kernel *d;
    int heads, kv_heads, head_dim;
    s2_dtype dtype;
    const s2_kernel_record *rec[2];     /* the forward and its wide variant (role fwd_wide), or NULL */
    int64_t q_len[SHAPES], kv_len[SHAPES], q_tiles[SHAPES][2];
    atomic_llong launches;
    s2_attn_plan *plan;                 /* shared by the threads: shapes 0 .. PLANNED-1 */
    atomic_llong planned;               /* launches through it */
} fwd_kernel;

enum { PLANNED = 4 };

typedef struct dec_kernel {
    s2_pattern_set *set;
    s2_artifact *art;
    s2_attn_kernel *k;
    int heads, kv_heads;
    atomic_llong launches;
} dec_kernel;

static fwd_kernel F[FWD_KERNELS];
static dec_kernel DK;
static s2_device *dev;

enum { DEC_D = 64, DEC_PS = 16, DEC_MAXP = 8, DEC_NP = BATCH * DEC_MAXP };

/* The forward's parameters 0..24 (launch.h) are the same in every forward
 * ABI: record those, packed.  Offsets of the ones checked. */
static const int fwd_sizes[25] = {8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 8, 8, 8, 4, 4};
enum { F_STRIDES = 40, F_QLEN = 136, F_KVLEN = 140, F_SCALE = 144, F_CLASS = 148, F_FIRST = 172, F_TILES = 176,
       F_BYTES = 180 };
/* The decode kernel's 32 parameters (decode.h), packed. */
static const int dec_sizes[32] = {8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8,
                                  8, 8, 8, 8, 4, 4, 4, 8, 8, 8, 4, 4, 8};
enum { D_QS = 56, D_TABLE = 152, D_LENS = 176, D_N = 184, D_PAGE = 188, D_SPLITS = 224, D_BYTES = 236 };

static uint64_t u64_at(const unsigned char *p, int off)
{
    uint64_t v;
    memcpy(&v, p + off, 8);
    return v;
}

static int32_t i32_at(const unsigned char *p, int off)
{
    int32_t v;
    memcpy(&v, p + off, 4);
    return v;
}

typedef struct worker {
    int id;
    s2_ctx *ctx;
    void *streams[STREAMS];
    s2_devptr fq[FWD_KERNELS], fk[FWD_KERNELS], fv[FWD_KERNELS], fo[FWD_KERNELS], flse[FWD_KERNELS];
    s2_devptr dq, dout, dlse, kp, vp, table, lens;
    int fwd_launches, dec_launches;
    unsigned rng;
} worker;

static unsigned next_rand(worker *w)
{
    w->rng = w->rng * 1103515245u + 12345u;
    return w->rng >> 8;
}

/* The thread's last launch must be this one, on `stream`. */
static bool check_launch_common(const fake_cuda_launch *l, long long before, void *stream, long long bytes)
{
    CHECK(l->launches == before + 1, "%lld launches recorded for one call", l->launches - before);
    CHECK(l->stream == stream, "launch on stream %p, asked for %p", l->stream, stream);
    CHECK(l->params_bytes == bytes, "%lld parameter bytes recorded, want %lld", l->params_bytes, bytes);
    return true;
}

static bool one_forward(worker *w, int ki, int shape, void *stream)
{
    fwd_kernel *f = &F[ki];
    int batch = 1 + (int)(next_rand(w) % BATCH);
    s2_attn_fwd_args a = {.batch = batch, .q_len = f->q_len[shape], .kv_len = f->kv_len[shape], .heads = f->heads,
                          .kv_heads = f->kv_heads, .head_dim = f->head_dim, .dtype = f->dtype, .q = w->fq[ki],
                          .k = w->fk[ki], .v = w->fv[ki], .o = w->fo[ki], .lse = next_rand(w) % 2 ? w->flse[ki] : 0};
    s2_attn_fwd_args_bshd(&a);
    const fake_cuda_launch *l = fake_thread_last();
    long long before = l->launches;
    /* a prepared shape through the shared plan half the time */
    bool planned = shape < PLANNED && next_rand(w) % 2;
    s2_status st = planned ? s2_attn_plan_forward(w->ctx, f->plan, stream, &a) : s2_attn_forward(w->ctx, f->k, stream, &a);
    CHECK(st == S2_OK, "thread %d kernel %d shape %d: %s: %s", w->id, ki, shape, s2_status_name(st),
          s2_ctx_message(w->ctx));
    atomic_fetch_add(&f->launches, 1);
    if (planned)
        atomic_fetch_add(&f->planned, 1);
    w->fwd_launches++;
    if (!check_launch_common(l, before, stream, F_BYTES))
        return false;
    const unsigned char *p = l->params;
    const uint64_t ptrs[5] = {a.q, a.k, a.v, a.o, a.lse};
    for (int i = 0; i < 5; i++)
        CHECK(u64_at(p, 8 * i) == ptrs[i], "thread %d: pointer parameter %d is 0x%llx, want 0x%llx", w->id, i,
              (unsigned long long)u64_at(p, 8 * i), (unsigned long long)ptrs[i]);
    const int64_t *strides[4] = {a.q_stride, a.k_stride, a.v_stride, a.o_stride};
    for (int t = 0; t < 4; t++)
        for (int j = 0; j < 3; j++)
            CHECK((int64_t)u64_at(p, F_STRIDES + 8 * (3 * t + j)) == strides[t][j], "thread %d: stride %d.%d",
                  w->id, t, j);
    CHECK(i32_at(p, F_QLEN) == a.q_len && i32_at(p, F_KVLEN) == a.kv_len,
          "thread %d kernel %d: launched q_len %d kv_len %d, asked %lld %lld", w->id, ki, i32_at(p, F_QLEN),
          i32_at(p, F_KVLEN), (long long)a.q_len, (long long)a.kv_len);
    float scale_log2;
    memcpy(&scale_log2, p + F_SCALE, 4);
    float want = (float)(1.0 / sqrt((double)f->head_dim) * 1.4426950408889634);
    CHECK(fabsf(scale_log2 - want) <= 1e-6f * want, "thread %d: scale_log2 %g, want %g", w->id, scale_log2, want);
    for (int i = 0; i < 3; i++)
        CHECK(u64_at(p, F_CLASS + 8 * i) != 0, "thread %d: schedule pointer %d is null", w->id, i);
    /* the kernel or its wide variant (the runtime picks by the lists' length),
     * with the schedule of this shape: its query tiles, ending at the last query */
    int v = l->block[0] == f->rec[0]->threads && l->smem == f->rec[0]->smem_bytes ? 0 : 1;
    CHECK(v == 0 || (f->rec[1] && l->block[0] == f->rec[1]->threads && l->smem == f->rec[1]->smem_bytes),
          "thread %d kernel %d: block %lld smem %lld is neither variant's", w->id, ki, l->block[0], l->smem);
    int32_t tiles = i32_at(p, F_TILES), first = i32_at(p, F_FIRST);
    int bm = f->rec[v]->spec.block_m;
    CHECK(tiles == f->q_tiles[shape][v], "thread %d kernel %d shape %d variant %d: %d query tiles, want %lld", w->id,
          ki, shape, v, tiles, (long long)f->q_tiles[shape][v]);
    CHECK((int64_t)(first + tiles) * bm >= a.kv_len && (int64_t)(first + tiles - 1) * bm < a.kv_len,
          "thread %d: tiles %d..%d do not end at kv_len %lld", w->id, first, first + tiles - 1, (long long)a.kv_len);
    if (f->rec[v]->grid == S2_GRID_PERSISTENT) {
        long long items = (long long)tiles * a.heads * a.batch;
        CHECK(l->grid[0] >= 1 && l->grid[0] <= items && l->grid[1] == 1 && l->grid[2] == 1,
              "thread %d: persistent grid %lld for %lld items", w->id, l->grid[0], items);
    } else {
        CHECK(l->grid[0] == tiles && l->grid[1] == a.heads && l->grid[2] == a.batch,
              "thread %d: grid %lld %lld %lld, want %d %d %d", w->id, l->grid[0], l->grid[1], l->grid[2], tiles,
              a.heads, a.batch);
    }
    return true;
}

static bool one_decode(worker *w, void *stream)
{
    int64_t max_len = DEC_PS * (int64_t)(2 + next_rand(w) % (DEC_MAXP - 1));
    int H = DK.heads, HK = DK.kv_heads;
    s2_attn_decode_args a = {
        .batch = BATCH, .n_new = 1, .heads = H, .kv_heads = HK, .head_dim = DEC_D, .dtype = S2_DTYPE_BF16,
        .q = w->dq, .o = w->dout, .lse = w->dlse, .k_pages = w->kp, .v_pages = w->vp, .num_pages = DEC_NP,
        .page_size = DEC_PS, .q_stride = {H * DEC_D, H * DEC_D, DEC_D}, .o_stride = {H * DEC_D, H * DEC_D, DEC_D},
        .k_stride = {DEC_PS * HK * DEC_D, HK * DEC_D, DEC_D}, .v_stride = {DEC_PS * HK * DEC_D, HK * DEC_D, DEC_D},
        .block_table = w->table, .table_stride = {DEC_MAXP, 0}, .max_pages_per_seq = DEC_MAXP, .seq_lens = w->lens,
        .max_seq_len = max_len, .splits = 1};
    const fake_cuda_launch *l = fake_thread_last();
    long long before = l->launches;
    fake_thread_param_sizes(dec_sizes, 32);
    s2_status st = s2_attn_decode(w->ctx, DK.k, stream, &a);
    fake_thread_param_sizes(fwd_sizes, 25);
    CHECK(st == S2_OK, "thread %d decode: %s: %s", w->id, s2_status_name(st), s2_ctx_message(w->ctx));
    atomic_fetch_add(&DK.launches, 1);
    w->dec_launches++;
    if (!check_launch_common(l, before, stream, D_BYTES))
        return false;
    const unsigned char *p = l->params;
    CHECK(u64_at(p, 0) == a.q && u64_at(p, 8) == a.k_pages && u64_at(p, 16) == a.v_pages && u64_at(p, 24) == a.o &&
              u64_at(p, 32) == a.lse,
          "thread %d decode: tensor pointers", w->id);
    CHECK((int64_t)u64_at(p, D_QS) == a.q_stride[0], "thread %d decode: q batch stride", w->id);
    CHECK(u64_at(p, D_TABLE) == a.block_table && u64_at(p, D_LENS) == a.seq_lens, "thread %d decode: table, lens",
          w->id);
    CHECK(i32_at(p, D_N) == 1 && i32_at(p, D_PAGE) == DEC_PS && i32_at(p, D_SPLITS) == 1,
          "thread %d decode: n %d page %d splits %d", w->id, i32_at(p, D_N), i32_at(p, D_PAGE), i32_at(p, D_SPLITS));
    return true;
}

static bool alloc(worker *w, size_t bytes, s2_devptr *out)
{
    s2_status st = s2_mem_alloc(w->ctx, dev, bytes, out);
    CHECK(st == S2_OK, "thread %d: alloc %zu: %s", w->id, bytes, s2_ctx_message(w->ctx));
    return true;
}

static void *run_worker(void *arg)
{
    worker *w = arg;
    w->ctx = s2_ctx_new();
    fake_thread_param_sizes(fwd_sizes, 25);
    bool ok = true;
    for (int s = 0; s < STREAMS && ok; s++) {
        ok = s2_stream_create(w->ctx, dev, &w->streams[s]) == S2_OK;
        if (!ok)
            fail("thread %d: stream: %s", w->id, s2_ctx_message(w->ctx));
    }
    for (int ki = 0; ki < FWD_KERNELS && ok; ki++) {
        const fwd_kernel *f = &F[ki];
        size_t qb = (size_t)BATCH * MAX_LEN * f->heads * f->head_dim * 2;
        size_t kb = (size_t)BATCH * MAX_LEN * f->kv_heads * f->head_dim * 2;
        ok = alloc(w, qb, &w->fq[ki]) && alloc(w, kb, &w->fk[ki]) && alloc(w, kb, &w->fv[ki]) &&
             alloc(w, qb, &w->fo[ki]) && alloc(w, (size_t)BATCH * f->heads * MAX_LEN * 4, &w->flse[ki]);
    }
    size_t dqb = (size_t)BATCH * DK.heads * DEC_D * 2, pb = (size_t)DEC_NP * DEC_PS * DK.kv_heads * DEC_D * 2;
    int32_t tab[BATCH * DEC_MAXP], lens[BATCH] = {DEC_PS + 3, 2 * DEC_PS};
    for (int i = 0; i < BATCH * DEC_MAXP; i++)
        tab[i] = (i * 5 + w->id) % DEC_NP;
    ok = ok && alloc(w, dqb, &w->dq) && alloc(w, dqb, &w->dout) && alloc(w, (size_t)BATCH * DK.heads * 4, &w->dlse) &&
         alloc(w, pb, &w->kp) && alloc(w, pb, &w->vp) && alloc(w, sizeof tab, &w->table) &&
         alloc(w, sizeof lens, &w->lens);
    ok = ok && s2_memcpy_h2d(w->ctx, dev, w->table, tab, sizeof tab) == S2_OK &&
         s2_memcpy_h2d(w->ctx, dev, w->lens, lens, sizeof lens) == S2_OK;
    /* Launches: mostly forwards, on the 6 shapes of the thread's rotation
     * most of the time (hits), on any of the 12 otherwise (misses, evictions). */
    for (int i = 0; i < LAUNCHES && ok; i++) {
        void *stream = w->streams[next_rand(w) % STREAMS];
        unsigned r = next_rand(w) % 100;
        if (r < 10) {
            ok = one_decode(w, stream);
            continue;
        }
        int ki = (int)(next_rand(w) % FWD_KERNELS);
        int shape = r < 75 ? (w->id * 3 + (int)(next_rand(w) % 6)) % SHAPES : (int)(next_rand(w) % SHAPES);
        ok = one_forward(w, ki, shape, stream);
    }
    s2_devptr *bufs[] = {&w->dq, &w->dout, &w->dlse, &w->kp, &w->vp, &w->table, &w->lens};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (s2_mem_free(w->ctx, dev, *bufs[i]) != S2_OK)
            fail("thread %d: free: %s", w->id, s2_ctx_message(w->ctx));
    for (int ki = 0; ki < FWD_KERNELS; ki++) {
        s2_devptr ps[5] = {w->fq[ki], w->fk[ki], w->fv[ki], w->fo[ki], w->flse[ki]};
        for (int i = 0; i < 5; i++)
            if (s2_mem_free(w->ctx, dev, ps[i]) != S2_OK)
                fail("thread %d: free: %s", w->id, s2_ctx_message(w->ctx));
    }
    for (int s = 0; s < STREAMS; s++)
        if (s2_stream_destroy(w->ctx, dev, w->streams[s]) != S2_OK)
            fail("thread %d: stream destroy: %s", w->id, s2_ctx_message(w->ctx));
    if (ok && w->fwd_launches + w->dec_launches != LAUNCHES)
        fail("thread %d: %d launches made", w->id, w->fwd_launches + w->dec_launches);
    s2_ctx_free(w->ctx);
    return NULL;
}

/* ---- setup ---------------------------------------------------------------- */

static int64_t q_tiles_of(const s2_pattern *p, int block_m, int block_n, int64_t q_len, int64_t kv_len)
{
    s2_layout *l = NULL;
    s2_tile_geom g;
    if (s2_layout_new(NULL, p, q_len, kv_len, &l) != S2_OK ||
        s2_layout_tile_geom(NULL, l, (s2_tile_spec){block_m, block_n}, &g) != S2_OK) {
        fprintf(stderr, "layout of %lld x %lld failed\n", (long long)q_len, (long long)kv_len);
        exit(1);
    }
    s2_layout_free(l);
    return g.q_tiles;
}

static s2_artifact *compile(s2_ctx *ctx, int which, int64_t max_seq_len, s2_kernel_kind kind, s2_dtype dt,
                            int head_dim, s2_arch arch, s2_pattern_set **set)
{
    s2_local_stride_args a;
    attn_pattern_args(which, &a);
    a.max_seq_len = max_seq_len;
    s2_artifact *art = NULL;
    s2_kernel_spec spec = {.kind = kind, .dtype = dt, .head_dim = head_dim, .arch = arch};
    if (s2_pattern_from_args(ctx, &a, set) != S2_OK ||
        s2_compile_attention(ctx, s2_pattern_set_get(*set, 0), &spec, S2_CUBIN_AUTO, &art) != S2_OK) {
        fprintf(stderr, "pattern %d: %s\n", which, s2_ctx_message(ctx));
        exit(1);
    }
    return art;
}

static void setup_fwd(s2_ctx *ctx, fwd_kernel *f, int which, s2_dtype dt, int head_dim)
{
    f->art = compile(ctx, which, 0, S2_KERNEL_FWD, dt, head_dim, S2_ARCH_SM90A, &f->set);
    if (s2_attn_module_load(ctx, dev, f->art->cubin, f->art->cubin_size, &f->mod) != S2_OK) {
        fprintf(stderr, "load: %s\n", s2_ctx_message(ctx));
        exit(1);
    }
    f->k = s2_attn_module_kernel_at(f->mod, 0);
    f->d = s2_attn_kernel_desc(f->k);
    f->rec[0] = s2_manifest_kernel_fn(f->d, S2_ROLE_FWD);
    f->rec[1] = s2_manifest_kernel_fn(f->d, S2_ROLE_FWD_WIDE);
    const s2_pattern *p = s2_attn_kernel_pattern(f->k);
    f->heads = p->heads, f->kv_heads = p->kv_heads, f->head_dim = head_dim, f->dtype = dt;
    /* prefill (q_len = kv_len) and chunks of queries at the end of longer contexts */
    for (int s = 0; s < SHAPES; s++) {
        f->kv_len[s] = 64 + 80 * s;
        f->q_len[s] = s % 3 == 0 ? f->kv_len[s] : s % 3 == 1 ? 1 + 7 * s : f->kv_len[s] / 2;
        for (int v = 0; v < 2; v++)
            if (f->rec[v])
                f->q_tiles[s][v] = q_tiles_of(p, f->rec[v]->spec.block_m, f->rec[v]->spec.block_n, f->q_len[s],
                                              f->kv_len[s]);
    }
    s2_status st = s2_attn_plan_new(ctx, f->k, &f->plan);
    for (int s = 0; s < PLANNED && st == S2_OK; s++) {
        s2_attn_fwd_args a = {.batch = 1, .q_len = f->q_len[s], .kv_len = f->kv_len[s], .heads = f->heads,
                              .kv_heads = f->kv_heads, .head_dim = head_dim, .dtype = dt};
        st = s2_attn_plan_add_forward(ctx, f->plan, &a);
    }
    if (st == S2_OK)
        st = s2_attn_plan_prepare(ctx, f->plan, NULL);
    if (st != S2_OK) {
        fprintf(stderr, "plan: %s\n", s2_ctx_message(ctx));
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FAKE_LIBCUDA\n", argv[0]);
        return 1;
    }
    const char *tc = NULL;
    if (s2_toolchain_version(NULL, S2_CUBIN_AUTO, &tc) != S2_OK) {
        printf("no ptxas or nvJitLink: skipped\n");
        return 77;
    }
    setenv("S2C_LIBCUDA", argv[1], 1);
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    fake_get = (fake_cuda_get_fn)dlsym(h, "fake_cuda_get");
    fake_thread_param_sizes = (fake_cuda_thread_param_sizes_fn)dlsym(h, "fake_cuda_thread_param_sizes");
    fake_thread_last = (fake_cuda_thread_last_launch_fn)dlsym(h, "fake_cuda_thread_last_launch");
    if (!fake_get || !fake_thread_param_sizes || !fake_thread_last) {
        fprintf(stderr, "the fake driver lacks its control functions\n");
        return 1;
    }
    s2_ctx *ctx = s2_ctx_new();
    if (s2_device_open(ctx, 0, &dev) != S2_OK) {
        fprintf(stderr, "open: %s\n", s2_ctx_message(ctx));
        return 1;
    }
    long long allocs_base = fake_get("allocs_live");
    /* GQA 32/8 block 32 bf16 d64, and causal block 64 f16 d128 (sm_90a: the TMA forwards) */
    setup_fwd(ctx, &F[0], 3, S2_DTYPE_BF16, 64);
    setup_fwd(ctx, &F[1], 0, S2_DTYPE_F16, 128);
    DK.art = compile(ctx, 3, 0, S2_KERNEL_DECODE, S2_DTYPE_BF16, DEC_D, S2_ARCH_SM80, &DK.set);
    if (s2_attn_load(ctx, dev, DK.art->cubin, DK.art->cubin_size, NULL, S2_DTYPE_BF16, DEC_D, &DK.k) != S2_OK) {
        fprintf(stderr, "decode load: %s\n", s2_ctx_message(ctx));
        return 1;
    }
    DK.heads = s2_attn_kernel_pattern(DK.k)->heads, DK.kv_heads = s2_attn_kernel_pattern(DK.k)->kv_heads;

    worker w[THREADS];
    pthread_t th[THREADS];
    memset(w, 0, sizeof w);
    for (int t = 0; t < THREADS; t++) {
        w[t].id = t;
        w[t].rng = 0x9e3779b9u * (unsigned)(t + 1);
        if (pthread_create(&th[t], NULL, run_worker, &w[t]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);

    long long fwd_total = 0, dec_total = 0;
    for (int t = 0; t < THREADS; t++)
        fwd_total += w[t].fwd_launches, dec_total += w[t].dec_launches;
    for (int ki = 0; ki < FWD_KERNELS; ki++) {
        s2_attn_sched_stats ss;
        s2_attn_kernel_sched_stats(F[ki].k, &ss);
        long long planned = atomic_load(&F[ki].planned), n = atomic_load(&F[ki].launches) - planned;
        printf("kernel %s: %lld launches through its plan, %lld others: %lld hits, %lld misses, %lld evictions, "
               "%d cached\n", F[ki].d->name, planned, n, (long long)ss.hits, (long long)ss.misses, (long long)ss.evictions, ss.cached);
        if (planned == 0)
            fail("kernel %d: no launch went through the plan", ki);
        if (ss.hits + ss.misses != n)
            fail("kernel %d: hits %lld + misses %lld != %lld launches", ki, (long long)ss.hits,
                 (long long)ss.misses, n);
        if (ss.hits == 0 || ss.misses <= S2_ATTN_SCHED_CACHE || ss.evictions == 0 || ss.cached != S2_ATTN_SCHED_CACHE)
            fail("kernel %d: the cache was not hit, missed and evicted (%lld, %lld, %lld, %d cached)", ki,
                 (long long)ss.hits, (long long)ss.misses, (long long)ss.evictions, ss.cached);
    }
    printf("decode: %lld launches; %lld forwards, %lld decodes in all\n", (long long)atomic_load(&DK.launches),
           fwd_total, dec_total);
    if (atomic_load(&failures) == 0 && (fwd_total + dec_total != (long long)THREADS * LAUNCHES || dec_total == 0))
        fail("%lld forwards and %lld decodes made", fwd_total, dec_total);
    if (fake_get("streams_live") != 0)
        fail("%lld streams left", fake_get("streams_live"));

    for (int ki = 0; ki < FWD_KERNELS; ki++) {
        s2_attn_plan_free(F[ki].plan);
        s2_attn_module_free(F[ki].mod);
        s2_artifact_free(F[ki].art);
        s2_pattern_set_free(F[ki].set);
    }
    s2_attn_kernel_free(DK.k);
    s2_artifact_free(DK.art);
    s2_pattern_set_free(DK.set);
    if (fake_get("allocs_live") != allocs_base)
        fail("%lld allocations live after freeing the modules, %lld before loading them", fake_get("allocs_live"),
             allocs_base);
    s2_device_free(dev);
    s2_ctx_free(ctx);
    int n = atomic_load(&failures);
    if (n)
        fprintf(stderr, "%d failures\n", n);
    return n ? 1 : 0;
}
