/* Plans (s2_attn_plan_*, attn_runtime.h) on the fake libcuda of tests/runtime,
 * with real generated cubins (forward and backward for sm_90a, decode for
 * sm_80):
 *  - prepare allocates through the caller's allocator with its stream and
 *    uploads with stream-ordered copies only (no synchronous copy, no
 *    synchronisation), and takes at most the bytes s2_attn_plan_device_bytes
 *    said (a bound counted before anything is built);
 *  - afterwards a launch of a prepared shape makes no driver call but
 *    cuCtxGetCurrent and cuLaunchKernel (plus the push/pop when another
 *    context is current), and allocates nothing;
 *  - an unprepared shape is S2_ERR_CAPTURE inside capture and takes the
 *    kernel's own path outside;
 *  - backward and split-KV decode use the plan's workspace; the combine
 *    launches as the others;
 *  - device-side varlen batches: s2_attn_seqs_write checks and copies;
 *    s2_attn_seqs_write_cu only launches NAME_seqs (a module without it, or
 *    a decode kernel, is refused unlaunched);
 *  - two devices in one process keep their allocators, caches and plans apart.
 * Usage: test_plan FAKE_LIB (exits 77 without ptxas or nvJitLink). */
#include "../attn/patterns.h"
#include "../runtime/fake_cuda.h"
#include "fake_driver.h"
#include "kernel_abi.h"
#include "rt_cuda.h"
#include "s2c/attention.h"
#include "s2c/attn_runtime.h"
#include "s2c/cache.h"
#include "s2c/codegen.h"
#include "s2c/layout.h"
#include "check_main.h"

#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *fake_path;
static fake_cuda_set_fn fake_set;
static fake_cuda_get_fn fake_get;
static fake_cuda_trace_fn fake_trace;
static fake_cuda_param_sizes_fn fake_param_sizes;
static fake_cuda_launch_at_fn fake_launch_at;

/* forward and backward of one GQA pattern (32/8 heads, block 32), decode of a 4/2-head one */
static s2_pattern_set *fwd_set, *dec_set;
static s2_artifact *fwd_art, *bwd_art, *dec_art;

enum { B = 2, S = 256, H = 32, HK = 8, D = 64 };

static void use_fake(void)
{
    void *h = s2t_fake_open(fake_path, &fake_set, &fake_get);
    fake_trace = (fake_cuda_trace_fn)dlsym(h, "fake_cuda_trace");
    fake_param_sizes = (fake_cuda_param_sizes_fn)dlsym(h, "fake_cuda_param_sizes");
    fake_launch_at = (fake_cuda_launch_at_fn)dlsym(h, "fake_cuda_launch_at");
    ck_assert(fake_trace && fake_param_sizes && fake_launch_at);
}

static void assert_msg_has(const s2_ctx *ctx, const char *needle)
{
    ck_assert_msg(strstr(s2_ctx_message(ctx), needle) != NULL, "message \"%s\" lacks \"%s\"", s2_ctx_message(ctx),
                  needle);
}

/* A pool that records every call and the stream it was given. */
typedef struct pool {
    s2_devptr base;
    size_t size, used;
    int allocs, frees, live;
    void *last_stream;
    int other_stream;            /* calls with another stream than last_stream's first */
} pool;

static int pool_alloc(void *user, size_t bytes, void *stream, s2_devptr *ptr)
{
    pool *p = user;
    size_t at = (p->used + 255) & ~(size_t)255;
    if (at + bytes > p->size)
        return 1;
    if (p->allocs && stream != p->last_stream)
        p->other_stream++;
    p->last_stream = stream;
    p->used = at + bytes;
    p->allocs++, p->live++;
    *ptr = p->base + at;
    return 0;
}

static void pool_free(void *user, s2_devptr ptr, void *stream)
{
    pool *p = user;
    (void)stream;
    ck_assert(ptr >= p->base && ptr < p->base + p->size);
    p->frees++, p->live--;
}

typedef struct rig {
    s2_ctx *ctx;
    s2_device *dev;
    pool pool;
    s2_attn_kernel *k;
    s2_devptr buf[12];
    int nbuf;
    void *stream;
} rig;

static void rig_open(rig *r, const s2_artifact *art, int dtype_d)
{
    use_fake();
    memset(r, 0, sizeof *r);
    r->ctx = s2_ctx_new();
    ck_assert_msg(s2_device_open(r->ctx, 0, &r->dev) == S2_OK, "%s", s2_ctx_message(r->ctx));
    r->pool.size = 16 << 20;
    ck_assert_int_eq(s2_mem_alloc(r->ctx, r->dev, r->pool.size, &r->pool.base), S2_OK);
    s2_allocator al = {pool_alloc, pool_free, &r->pool};
    ck_assert_int_eq(s2_device_set_allocator(r->ctx, r->dev, &al), S2_OK);
    ck_assert_msg(s2_attn_load(r->ctx, r->dev, art->cubin, art->cubin_size, NULL,
                               dtype_d == 0 ? S2_DTYPE_BF16 : S2_DTYPE_BF16, D, &r->k) == S2_OK,
                  "%s", s2_ctx_message(r->ctx));
    ck_assert_int_eq(s2_stream_create(r->ctx, r->dev, &r->stream), S2_OK);
}

static s2_devptr rig_buf(rig *r, size_t bytes)
{
    ck_assert_int_lt(r->nbuf, 12);
    ck_assert_int_eq(s2_mem_alloc(r->ctx, r->dev, bytes, &r->buf[r->nbuf]), S2_OK);
    return r->buf[r->nbuf++];
}

static void rig_close(rig *r, s2_attn_plan *plan)
{
    s2_attn_plan_free(plan);
    s2_attn_kernel_free(r->k);
    ck_assert_int_eq(r->pool.live, 0);
    ck_assert_int_eq(r->pool.frees, r->pool.allocs);
    for (int i = 0; i < r->nbuf; i++)
        ck_assert_int_eq(s2_mem_free(r->ctx, r->dev, r->buf[i]), S2_OK);
    ck_assert_int_eq(s2_device_set_allocator(r->ctx, r->dev, NULL), S2_OK);
    ck_assert_int_eq(s2_mem_free(r->ctx, r->dev, r->pool.base), S2_OK);
    s2_stream_destroy(r->ctx, r->dev, r->stream);
    ck_assert_int_eq(fake_get("allocs_live"), 0);
    s2_device_free(r->dev);
    s2_ctx_free(r->ctx);
}

static s2_attn_fwd_args fwd_args(rig *r)
{
    size_t qb = (size_t)B * S * H * D * 2, kb = (size_t)B * S * HK * D * 2;
    s2_attn_fwd_args a = {.batch = B, .q_len = S, .kv_len = S, .heads = H, .kv_heads = HK, .head_dim = D,
                          .dtype = S2_DTYPE_BF16};
    a.q = rig_buf(r, qb), a.k = rig_buf(r, kb), a.v = rig_buf(r, kb), a.o = rig_buf(r, qb);
    a.lse = rig_buf(r, (size_t)B * H * S * 4);
    s2_attn_fwd_args_bshd(&a);
    return a;
}

/* Prepare: the declared size, the caller's stream, stream-ordered copies only. */
static void prepare_checked(rig *r, s2_attn_plan *plan)
{
    size_t before = 0, after = 0;
    int allocs0 = r->pool.allocs;
    ck_assert_msg(s2_attn_plan_device_bytes(r->ctx, plan, &before) == S2_OK, "%s", s2_ctx_message(r->ctx));
    ck_assert_int_gt(before, 0);
    ck_assert_int_eq(r->pool.allocs, allocs0); /* the query allocated nothing */
    r->pool.other_stream = 0;
    r->pool.last_stream = r->stream;
    size_t used0 = r->pool.used;
    fake_set("trace", 1);
    ck_assert_msg(s2_attn_plan_prepare(r->ctx, plan, r->stream) == S2_OK, "%s", s2_ctx_message(r->ctx));
    fake_set("trace", 0);
    const char *t = fake_trace();
    ck_assert_msg(strstr(t, "MemcpyHtoDAsync") != NULL, "prepare: %s", t);
    ck_assert_msg(!strstr(t, "MemcpyHtoD,") && !strstr(t, "Synchronize") && !strstr(t, "MemAlloc"), "prepare: %s", t);
    ck_assert_int_gt(r->pool.allocs, allocs0);
    ck_assert_int_eq(r->pool.other_stream, 0);
    ck_assert_ptr_eq(r->pool.last_stream, r->stream);
    ck_assert_msg(s2_attn_plan_device_bytes(r->ctx, plan, &after) == S2_OK, "%s", s2_ctx_message(r->ctx));
    /* the query's answer is a bound from counts: at least what prepare took, and close to it */
    ck_assert_int_ge(before, after);
    ck_assert_int_le(before, after + after / 4 + 32768);
    ck_assert_int_ge(r->pool.used - used0, after);
    ck_assert_int_eq(s2_attn_plan_prepare(r->ctx, plan, r->stream), S2_ERR_INVALID);
}

/* The driver calls of one launch: only the launch (n of them) and the context lookup. */
static void assert_launch_only(const char *t, int n)
{
    char want[256] = "";
    for (int i = 0; i < n; i++)
        strcat(want, i ? ",CtxGetCurrent,LaunchKernel" : "CtxGetCurrent,LaunchKernel");
    ck_assert_msg(strcmp(t, want) == 0, "driver calls \"%s\", want \"%s\"", t, want);
}

START_TEST(forward_after_prepare_only_launches)
{
    rig r;
    rig_open(&r, fwd_art, 0);
    s2_attn_fwd_args a = fwd_args(&r);
    s2_attn_plan *plan = NULL;
    ck_assert_int_eq(s2_attn_plan_new(r.ctx, r.k, &plan), S2_OK);
    ck_assert_int_eq(s2_attn_plan_forward(r.ctx, plan, r.stream, &a), S2_ERR_INVALID);
    assert_msg_has(r.ctx, "not prepared");
    ck_assert_int_eq(s2_attn_plan_add_forward(r.ctx, plan, &a), S2_OK);
    s2_attn_fwd_args chunk = a;
    chunk.q_len = 64;   /* a chunked prefill over the same cache */
    ck_assert_int_eq(s2_attn_plan_add_forward(r.ctx, plan, &chunk), S2_OK);
    s2_attn_fwd_args bad = a;
    bad.q_len = S + 1;
    ck_assert_int_eq(s2_attn_plan_add_forward(r.ctx, plan, &bad), S2_ERR_SHAPE);
    s2_attn_bwd_args wrong = {0};
    ck_assert_int_eq(s2_attn_plan_add_backward(r.ctx, plan, &wrong), S2_ERR_INVALID);
    assert_msg_has(r.ctx, "is a forward kernel");
    prepare_checked(&r, plan);
    ck_assert_int_eq(s2_attn_plan_add_forward(r.ctx, plan, &a), S2_ERR_INVALID);
    assert_msg_has(r.ctx, "prepared already");

    int allocs = r.pool.allocs;
    long long launches = fake_get("launches"), maps = fake_get("tensor_maps");
    /* the shapes were declared with their tensors: prepare encoded the maps (sm_90a) */
    ck_assert_int_gt(maps, 0);
    fake_set("set_current", 1);
    for (int i = 0; i < 5; i++) {
        fake_set("trace", 1);
        ck_assert_msg(s2_attn_plan_forward(r.ctx, plan, r.stream, i % 2 ? &chunk : &a) == S2_OK, "%s",
                      s2_ctx_message(r.ctx));
        fake_set("trace", 0);
        assert_launch_only(fake_trace(), 1);
    }
    ck_assert_int_eq(fake_get("launches"), launches + 5);
    ck_assert_int_eq(fake_get("tensor_maps"), maps);
    /* other tensors: their maps are encoded once, at their first launch */
    s2_attn_fwd_args moved = a;
    moved.o = moved.q, moved.q = a.o;
    fake_set("trace", 1);
    ck_assert_msg(s2_attn_plan_forward(r.ctx, plan, r.stream, &moved) == S2_OK, "%s", s2_ctx_message(r.ctx));
    ck_assert_msg(s2_attn_plan_forward(r.ctx, plan, r.stream, &moved) == S2_OK, "%s", s2_ctx_message(r.ctx));
    fake_set("trace", 0);
    ck_assert_str_eq(fake_trace(), "CtxGetCurrent,TensorMapEncodeTiled,CtxGetCurrent,LaunchKernel,"
                                   "CtxGetCurrent,LaunchKernel");
    ck_assert_int_eq(r.pool.allocs, allocs);
    /* the kernel's own cache was never used */
    s2_attn_sched_stats stats;
    s2_attn_kernel_sched_stats(r.k, &stats);
    ck_assert_int_eq(stats.hits + stats.misses, 0);
    rig_close(&r, plan);
}
END_TEST

/* With no context current the launch pushes and pops the kernel's. */
START_TEST(forward_pushes_the_context_when_needed)
{
    rig r;
    rig_open(&r, fwd_art, 0);
    s2_attn_fwd_args a = fwd_args(&r);
    s2_attn_plan *plan = NULL;
    ck_assert_int_eq(s2_attn_plan_new(r.ctx, r.k, &plan), S2_OK);
    ck_assert_int_eq(s2_attn_plan_add_forward(r.ctx, plan, &a), S2_OK);
    prepare_checked(&r, plan);
    ck_assert_msg(s2_attn_plan_forward(r.ctx, plan, r.stream, &a) == S2_OK, "%s", s2_ctx_message(r.ctx));
    ck_assert_int_eq(fake_get("depth"), 0);
    fake_set("trace", 1);
    ck_assert_msg(s2_attn_plan_forward(r.ctx, plan, r.stream, &a) == S2_OK, "%s", s2_ctx_message(r.ctx));
    fake_set("trace", 0);
    ck_assert_str_eq(fake_trace(), "CtxGetCurrent,CtxPushCurrent,LaunchKernel,CtxPopCurrent");
    rig_close(&r, plan);
}
END_TEST

/* An unprepared shape: S2_ERR_CAPTURE inside capture (nothing launched or
 * allocated), the kernel's cache outside; a prepared one launches in capture. */
START_TEST(unprepared_shape_in_capture)
{
    rig r;
    rig_open(&r, fwd_art, 0);
    s2_attn_fwd_args a = fwd_args(&r);
    s2_attn_plan *plan = NULL;
    ck_assert_int_eq(s2_attn_plan_new(r.ctx, r.k, &plan), S2_OK);
    ck_assert_int_eq(s2_attn_plan_add_forward(r.ctx, plan, &a), S2_OK);
    prepare_checked(&r, plan);
    s2_attn_fwd_args other = a;
    other.q_len = 100;
    long long launches = fake_get("launches");
    int allocs = r.pool.allocs;
    fake_set("capturing", 1);
    ck_assert_int_eq(s2_attn_plan_forward(r.ctx, plan, r.stream, &other), S2_ERR_CAPTURE);
    assert_msg_has(r.ctx, "not prepared");
    ck_assert_int_eq(fake_get("launches"), launches);
    ck_assert_int_eq(r.pool.allocs, allocs);
    ck_assert_msg(s2_attn_plan_forward(r.ctx, plan, r.stream, &a) == S2_OK, "%s", s2_ctx_message(r.ctx));
    ck_assert_int_eq(fake_get("launches"), launches + 1);
    fake_set("capturing", 0);
    ck_assert_msg(s2_attn_plan_forward(r.ctx, plan, r.stream, &other) == S2_OK, "%s", s2_ctx_message(r.ctx));
    ck_assert_int_eq(fake_get("launches"), launches + 2);
    s2_attn_sched_stats stats;
    s2_attn_kernel_sched_stats(r.k, &stats);
    ck_assert_int_eq(stats.misses, 1);   /* the fallback built it in the kernel's cache */
    ck_assert_int_gt(r.pool.allocs, allocs);
    rig_close(&r, plan);
}
END_TEST

START_TEST(backward_uses_the_plans_workspace)
{
    rig r;
    rig_open(&r, bwd_art, 0);
    size_t qb = (size_t)B * S * H * D * 2, kb = (size_t)B * S * HK * D * 2, lb = (size_t)B * H * S * 4;
    s2_attn_bwd_args a = {.batch = B, .q_len = S, .kv_len = S, .heads = H, .kv_heads = HK, .head_dim = D,
                          .dtype = S2_DTYPE_BF16};
    a.q = rig_buf(&r, qb), a.k = rig_buf(&r, kb), a.v = rig_buf(&r, kb), a.o = rig_buf(&r, qb);
    a.d_o = rig_buf(&r, qb), a.lse = rig_buf(&r, lb), a.dq = rig_buf(&r, qb), a.dk = rig_buf(&r, kb);
    a.dv = rig_buf(&r, kb);
    s2_attn_bwd_args_bshd(&a);
    s2_attn_plan *plan = NULL;
    ck_assert_int_eq(s2_attn_plan_new(r.ctx, r.k, &plan), S2_OK);
    ck_assert_int_eq(s2_attn_plan_add_backward(r.ctx, plan, &a), S2_OK);
    prepare_checked(&r, plan);
    /* the plan's workspace holds every dS tile: the dS path over all heads */
    size_t ws = 0;
    bool ds = false;
    ck_assert_msg(s2_attn_backward_workspace(r.ctx, r.k, B, S, S, &ws, &ds) == S2_OK, "%s", s2_ctx_message(r.ctx));
    size_t plan_bytes = 0;
    ck_assert_int_eq(s2_attn_plan_device_bytes(r.ctx, plan, &plan_bytes), S2_OK);
    ck_assert_int_gt(plan_bytes, ws);
    int allocs = r.pool.allocs;
    long long launches = fake_get("launches");
    /* declared with its tensors: even the first launch only launches (the q and dO maps were encoded at prepare) */
    ck_assert_int_eq(s2_manifest_kernel_fn(s2_attn_kernel_desc(r.k), S2_ROLE_BWD_PRE)->abi, S2_ABI_BWD_TMA);
    ck_assert_int_eq(fake_get("tensor_maps"), 2);
    fake_set("set_current", 1);
    for (int i = 0; i < 2; i++) {
        fake_set("trace", 1);
        ck_assert_msg(s2_attn_plan_backward(r.ctx, plan, r.stream, &a) == S2_OK, "%s", s2_ctx_message(r.ctx));
        fake_set("trace", 0);
        assert_launch_only(fake_trace(), 3);   /* NAME_pre, NAME_dkdv, then NAME_dq or NAME_dqds */
    }
    ck_assert_int_eq(fake_get("launches"), launches + 6);
    ck_assert_int_eq(r.pool.allocs, allocs);
    s2_attn_sched_stats stats;
    s2_attn_kernel_sched_stats(r.k, &stats);
    ck_assert_int_eq(stats.ds_chunked, 0);
    rig_close(&r, plan);
}
END_TEST

enum { DB = 3, DH = 4, DHK = 2, PS = 16, MAXP = 16, MAXLEN = MAXP * PS, NP = DB * DHK * MAXP };

START_TEST(decode_split_kv_in_the_plans_workspace)
{
    rig r;
    rig_open(&r, dec_art, 0);
    s2_attn_decode_args a = {
        .batch = DB, .n_new = 1, .heads = DH, .kv_heads = DHK, .head_dim = D, .dtype = S2_DTYPE_BF16,
        .num_pages = NP, .page_size = PS, .q_stride = {DH * D, DH * D, D}, .o_stride = {DH * D, DH * D, D},
        .k_stride = {PS * DHK * D, DHK * D, D}, .v_stride = {PS * DHK * D, DHK * D, D},
        .table_stride = {DHK * MAXP, MAXP}, .max_pages_per_seq = MAXP, .max_seq_len = MAXLEN, .splits = 4};
    a.q = rig_buf(&r, (size_t)DB * DH * D * 2), a.o = rig_buf(&r, (size_t)DB * DH * D * 2);
    a.lse = rig_buf(&r, (size_t)DB * DH * 4);
    a.k_pages = rig_buf(&r, (size_t)NP * PS * DHK * D * 2), a.v_pages = rig_buf(&r, (size_t)NP * PS * DHK * D * 2);
    a.block_table = rig_buf(&r, (size_t)DB * DHK * MAXP * 4), a.seq_lens = rig_buf(&r, DB * 4);
    s2_attn_plan *plan = NULL;
    ck_assert_int_eq(s2_attn_plan_new(r.ctx, r.k, &plan), S2_OK);
    ck_assert_int_eq(s2_attn_plan_add_decode(r.ctx, plan, &a), S2_OK);
    prepare_checked(&r, plan);
    size_t need = 0;
    ck_assert_int_eq(s2_attn_decode_workspace(r.ctx, r.k, &a, &need), S2_OK);
    ck_assert_int_gt(need, 0);
    ck_assert_msg(s2_attn_plan_decode(r.ctx, plan, r.stream, &a) == S2_OK, "%s", s2_ctx_message(r.ctx));
    fake_set("set_current", 1);
    fake_set("trace", 1);
    ck_assert_msg(s2_attn_plan_decode(r.ctx, plan, r.stream, &a) == S2_OK, "%s", s2_ctx_message(r.ctx));
    fake_set("trace", 0);
    assert_launch_only(fake_trace(), 1);
    ck_assert_int_eq(fake_get("last_grid_x"), 4);   /* the splits */
    /* more splits than declared need more than the plan's workspace */
    s2_attn_decode_args more = a;
    more.splits = 16;
    ck_assert_int_eq(s2_attn_plan_decode(r.ctx, plan, r.stream, &more), S2_ERR_INVALID);
    assert_msg_has(r.ctx, "the plan's holds");
    /* the combine of two partial results (context parallelism): host checks, then the launch only */
    s2_combine_args c = {.n = 2, .batch = DB, .heads = DH, .head_dim = D, .seq = 1, .dtype = S2_DTYPE_BF16,
                         .in_stride = {DH * D, DH * D, D}, .o_stride = {DH * D, DH * D, D}};
    for (int i = 0; i < 2; i++) {
        c.o_in[i] = rig_buf(&r, (size_t)DB * DH * D * 2);
        c.lse_in[i] = i ? a.lse : rig_buf(&r, (size_t)DB * DH * 4);
    }
    c.o = a.o;
    fake_set("trace", 1);
    ck_assert_msg(s2_attn_plan_combine(r.ctx, plan, r.stream, &c) == S2_OK, "%s", s2_ctx_message(r.ctx));
    fake_set("trace", 0);
    assert_launch_only(fake_trace(), 1);
    c.o += 8;
    ck_assert_int_eq(s2_attn_plan_combine(r.ctx, plan, r.stream, &c), S2_ERR_ALIGNMENT);
    rig_close(&r, plan);
}
END_TEST

/* Device-side sequences: checked on write, copied stream-ordered, and a
 * launch over them uses the bound's schedule. */
START_TEST(device_sequences)
{
    rig r;
    rig_open(&r, fwd_art, 0);
    s2_attn_fwd_args a = fwd_args(&r);   /* B * S = 512 token rows */
    a.batch = 3, a.q_len = B * S, a.kv_len = B * S;
    s2_attn_seqs *sq = NULL;
    ck_assert_int_eq(s2_attn_seqs_new_device(r.ctx, r.dev, 3, 0, &sq), S2_ERR_SHAPE);
    ck_assert_int_eq(s2_attn_seqs_new_device(r.ctx, r.dev, 3, 320, &sq), S2_OK);
    ck_assert_ptr_null(s2_attn_seqs_host(sq));
    s2_attn_seq too_long[3] = {{0, 10, 0, 10}, {10, 321, 10, 321}, {331, 1, 331, 1}};
    ck_assert_int_eq(s2_attn_seqs_write(r.ctx, sq, too_long, r.stream), S2_ERR_SEQ_LEN);
    s2_attn_seq shared[3] = {{0, 10, 0, 10}, {5, 20, 10, 20}, {40, 1, 40, 1}};
    ck_assert_int_eq(s2_attn_seqs_write(r.ctx, sq, shared, r.stream), S2_ERR_INVALID);
    s2_attn_seq good[3] = {{0, 100, 0, 100}, {100, 0, 100, 0}, {100, 64, 100, 320}};
    fake_set("trace", 1);
    ck_assert_msg(s2_attn_seqs_write(r.ctx, sq, good, r.stream) == S2_OK, "%s", s2_ctx_message(r.ctx));
    fake_set("trace", 0);
    ck_assert_msg(strstr(fake_trace(), "MemcpyHtoDAsync") != NULL, "%s", fake_trace());
    s2_attn_seq back[3];
    ck_assert_int_eq(s2_memcpy_d2h(r.ctx, r.dev, back, s2_attn_seqs_device(sq), sizeof back), S2_OK);
    ck_assert_int_eq(memcmp(back, good, sizeof good), 0);
    a.seqs = sq;
    s2_attn_plan *plan = NULL;
    ck_assert_int_eq(s2_attn_plan_new(r.ctx, r.k, &plan), S2_OK);
    ck_assert_int_eq(s2_attn_plan_add_forward(r.ctx, plan, &a), S2_OK);
    prepare_checked(&r, plan);
    ck_assert_msg(s2_attn_plan_forward(r.ctx, plan, r.stream, &a) == S2_OK, "%s", s2_ctx_message(r.ctx));
    /* the schedule of (320, 320): every query tile of a 320-key sequence */
    const s2_manifest_kernel *d = s2_attn_kernel_desc(r.k);
    ck_assert_int_eq(fake_get("last_grid_x"), (320 + d->spec.block_m - 1) / d->spec.block_m);
    ck_assert_int_eq(fake_get("last_grid_z"), 3);
    /* from cu_seqlens on the device: NAME_seqs's one launch, one thread per sequence */
    const s2_kernel_record *sr = s2_manifest_kernel_fn(d, S2_ROLE_FWD_SEQS);
    ck_assert_ptr_nonnull(sr);
    ck_assert_int_eq(sr->abi, S2_ABI_SEQS);
    ck_assert_int_eq(sr->grid, S2_GRID_SEQS);
    char want_sym[160];
    snprintf(want_sym, sizeof want_sym, "%s_seqs", d->name);
    ck_assert_str_eq(sr->symbol, want_sym);
    s2_devptr cu_q = rig_buf(&r, 4 * 4), cu_k = rig_buf(&r, 4 * 4);
    const int32_t cq[4] = {0, 100, 100, 164}, ck[4] = {0, 100, 100, 420};
    ck_assert_int_eq(s2_memcpy_h2d(r.ctx, r.dev, cu_q, cq, sizeof cq), S2_OK);
    ck_assert_int_eq(s2_memcpy_h2d(r.ctx, r.dev, cu_k, ck, sizeof ck), S2_OK);
    const int sizes[5] = {8, 8, 8, 4, 4};
    fake_param_sizes(sizes, 5);
    long long launches0 = fake_get("launches");
    fake_set("set_current", 1);   /* (with none current the launch pushes and pops the kernel's, as the others) */
    fake_set("trace", 1);
    ck_assert_msg(s2_attn_seqs_write_cu(r.ctx, r.k, sq, cu_q, cu_k, r.stream) == S2_OK, "%s", s2_ctx_message(r.ctx));
    fake_set("trace", 0);
    ck_assert_str_eq(fake_trace(), "CtxGetCurrent,LaunchKernel");
    ck_assert_int_eq(fake_get("launches"), launches0 + 1);
    long long shape[8];
    const unsigned char *pb = fake_launch_at(0, shape);
    ck_assert_ptr_nonnull(pb);
    const long long want_shape[8] = {1, 1, 1, 128, 1, 1, 0, 32};
    for (int i = 0; i < 8; i++)
        ck_assert_msg(shape[i] == want_shape[i], "shape %d: %lld, want %lld", i, shape[i], want_shape[i]);
    s2_devptr got_p[3];
    int32_t got_i[2];
    memcpy(got_p, pb, sizeof got_p);
    memcpy(got_i, pb + 24, sizeof got_i);
    ck_assert_uint_eq(got_p[0], cu_q);
    ck_assert_uint_eq(got_p[1], cu_k);
    ck_assert_uint_eq(got_p[2], s2_attn_seqs_device(sq));
    ck_assert_int_eq(got_i[0], 3);    /* n */
    ck_assert_int_eq(got_i[1], 320);  /* the batch's max_kv_len */
    /* cu_k 0 (self-attention) travels as 0: the kernel reads cu_q for it */
    ck_assert_int_eq(s2_attn_seqs_write_cu(r.ctx, r.k, sq, cu_q, 0, r.stream), S2_OK);
    pb = fake_launch_at(0, shape);
    memcpy(got_p, pb, sizeof got_p);
    ck_assert_uint_eq(got_p[1], 0);
    fake_param_sizes(NULL, 0);
    /* 300 sequences: three CTAs of 128 threads */
    s2_attn_seqs *many = NULL;
    ck_assert_int_eq(s2_attn_seqs_new_device(r.ctx, r.dev, 300, 64, &many), S2_OK);
    ck_assert_int_eq(s2_attn_seqs_write_cu(r.ctx, r.k, many, cu_q, cu_k, r.stream), S2_OK);
    ck_assert_int_eq(fake_get("last_grid_x"), 3);
    ck_assert_int_eq(fake_get("last_block_x"), 128);
    s2_attn_seqs_free(many);
    /* host checks: nothing is launched */
    long long launches1 = fake_get("launches");
    ck_assert_int_eq(s2_attn_seqs_write_cu(r.ctx, r.k, sq, 0, cu_k, r.stream), S2_ERR_NULL_ARG);
    ck_assert_int_eq(s2_attn_seqs_write_cu(r.ctx, NULL, sq, cu_q, cu_k, r.stream), S2_ERR_NULL_ARG);
    ck_assert_int_eq(s2_attn_seqs_write_cu(r.ctx, r.k, NULL, cu_q, cu_k, r.stream), S2_ERR_NULL_ARG);
    ck_assert_int_eq(s2_attn_seqs_write_cu(r.ctx, r.k, sq, cu_q + 2, cu_k, r.stream), S2_ERR_ALIGNMENT);
    assert_msg_has(r.ctx, "cu_q is not 4-byte aligned");
    ck_assert_int_eq(s2_attn_seqs_write_cu(r.ctx, r.k, sq, cu_q, cu_k + 1, r.stream), S2_ERR_ALIGNMENT);
    assert_msg_has(r.ctx, "cu_k is not 4-byte aligned");
    ck_assert_int_eq(fake_get("launches"), launches1);
    /* a host batch is not writable */
    s2_attn_seqs *host = NULL;
    ck_assert_int_eq(s2_attn_seqs_new(r.ctx, r.dev, good, 3, &host), S2_OK);
    ck_assert_int_eq(s2_attn_seqs_write(r.ctx, host, good, r.stream), S2_ERR_INVALID);
    ck_assert_int_eq(s2_attn_seqs_write_cu(r.ctx, r.k, host, cu_q, cu_k, r.stream), S2_ERR_INVALID);
    assert_msg_has(r.ctx, "not from s2_attn_seqs_new_device");
    ck_assert_int_eq(fake_get("launches"), launches1);
    s2_attn_seqs_free(host);
    s2_attn_seqs_free(sq);
    rig_close(&r, plan);
}
END_TEST

/* s2_attn_seqs_write_cu needs a forward whose module holds NAME_seqs: a
 * decode kernel is refused, and so is a module made before NAME_seqs (here
 * the forward's cubin with that record's manifest line turned into a
 * `generator` line), naming the kernel; neither launches. */
START_TEST(seqs_from_cu_needs_the_kernel)
{
    rig r;
    rig_open(&r, fwd_art, 0);
    s2_attn_seqs *sq = NULL;
    ck_assert_int_eq(s2_attn_seqs_new_device(r.ctx, r.dev, 2, 64, &sq), S2_OK);
    s2_devptr cu = rig_buf(&r, 16);
    long long launches0 = fake_get("launches");
    s2_attn_kernel *dk = NULL;
    ck_assert_msg(s2_attn_load(r.ctx, r.dev, dec_art->cubin, dec_art->cubin_size, NULL, S2_DTYPE_BF16, D, &dk) == S2_OK,
                  "%s", s2_ctx_message(r.ctx));
    ck_assert_int_eq(s2_attn_seqs_write_cu(r.ctx, dk, sq, cu, 0, r.stream), S2_ERR_INVALID);
    assert_msg_has(r.ctx, "is not a forward");
    s2_attn_kernel_free(dk);
    /* the old module */
    const s2_manifest_kernel *d = s2_attn_kernel_desc(r.k);
    char line[200];
    snprintf(line, sizeof line, "kernel.fn %s_seqs fwd_seqs ", d->name);
    unsigned char *old = malloc(fwd_art->cubin_size);
    ck_assert_ptr_nonnull(old);
    memcpy(old, fwd_art->cubin, fwd_art->cubin_size);
    unsigned char *at = memmem(old, fwd_art->cubin_size, line, strlen(line));
    ck_assert_ptr_nonnull(at);
    memcpy(at, "generator", 9);
    s2_attn_kernel *ok = NULL;
    ck_assert_msg(s2_attn_load(r.ctx, r.dev, old, fwd_art->cubin_size, NULL, S2_DTYPE_BF16, D, &ok) == S2_OK, "%s",
                  s2_ctx_message(r.ctx));
    ck_assert_ptr_null(s2_manifest_kernel_fn(s2_attn_kernel_desc(ok), S2_ROLE_FWD_SEQS));
    ck_assert_int_eq(s2_attn_seqs_write_cu(r.ctx, ok, sq, cu, 0, r.stream), S2_ERR_UNSUPPORTED);
    char want[200];
    snprintf(want, sizeof want, "kernel %s's module has no %s_seqs", d->name, d->name);
    assert_msg_has(r.ctx, want);
    ck_assert_int_eq(fake_get("launches"), launches0);
    s2_attn_kernel_free(ok);
    free(old);
    s2_attn_seqs_free(sq);
    rig_close(&r, NULL);
}
END_TEST

/* Two devices in one process (here two handles on one context: an engine's
 * and a library's, the second adopting the current context), each with its
 * own allocator, kernel and plan: launches on one never touch the other's
 * memory, cache or plan, and freeing one leaves the other working. */
START_TEST(two_devices_in_one_process)
{
    rig r;
    rig_open(&r, fwd_art, 0);
    s2_attn_fwd_args a = fwd_args(&r);
    fake_set("set_current", 1);
    s2_device *dev2 = NULL;
    ck_assert_msg(s2_device_adopt_current(r.ctx, &dev2) == S2_OK, "%s", s2_ctx_message(r.ctx));
    pool p2 = {.size = 4 << 20};
    ck_assert_int_eq(s2_mem_alloc(r.ctx, dev2, p2.size, &p2.base), S2_OK);
    ck_assert_int_eq(s2_device_set_allocator(r.ctx, dev2, &(s2_allocator){pool_alloc, pool_free, &p2}), S2_OK);
    s2_attn_kernel *k2 = NULL;
    ck_assert_msg(s2_attn_load(r.ctx, dev2, fwd_art->cubin, fwd_art->cubin_size, NULL, S2_DTYPE_BF16, D, &k2) == S2_OK,
                  "%s", s2_ctx_message(r.ctx));
    s2_attn_plan *plan = NULL, *plan2 = NULL;
    ck_assert_int_eq(s2_attn_plan_new(r.ctx, r.k, &plan), S2_OK);
    ck_assert_int_eq(s2_attn_plan_new(r.ctx, k2, &plan2), S2_OK);
    ck_assert_int_eq(s2_attn_plan_add_forward(r.ctx, plan, &a), S2_OK);
    ck_assert_int_eq(s2_attn_plan_add_forward(r.ctx, plan2, &a), S2_OK);
    ck_assert_int_eq(s2_attn_plan_prepare(r.ctx, plan, r.stream), S2_OK);
    int allocs1 = r.pool.allocs;
    ck_assert_int_eq(s2_attn_plan_prepare(r.ctx, plan2, r.stream), S2_OK);
    ck_assert_int_eq(r.pool.allocs, allocs1);   /* the second device's plan: its own allocator */
    ck_assert_int_gt(p2.allocs, 0);
    s2_attn_fwd_args other = a;
    other.q_len = 32;   /* unprepared: each kernel's own cache */
    long long launches = fake_get("launches");
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(s2_attn_plan_forward(r.ctx, i % 2 ? plan2 : plan, r.stream, &a) == S2_OK, "%s",
                      s2_ctx_message(r.ctx));
        ck_assert_msg(s2_attn_forward(r.ctx, i % 2 ? k2 : r.k, r.stream, &other) == S2_OK, "%s",
                      s2_ctx_message(r.ctx));
    }
    ck_assert_int_eq(fake_get("launches"), launches + 8);
    s2_attn_sched_stats s1, s2;
    s2_attn_kernel_sched_stats(r.k, &s1);
    s2_attn_kernel_sched_stats(k2, &s2);
    ck_assert_int_eq(s1.misses, 1);
    ck_assert_int_eq(s2.misses, 1);
    ck_assert_int_eq(s1.hits, 1);
    ck_assert_int_eq(s2.hits, 1);
    /* freeing the second device's objects leaves the first's working */
    s2_attn_plan_free(plan2);
    s2_attn_kernel_free(k2);
    ck_assert_int_eq(p2.live, 0);
    ck_assert_msg(s2_attn_plan_forward(r.ctx, plan, r.stream, &a) == S2_OK, "%s", s2_ctx_message(r.ctx));
    ck_assert_int_eq(s2_device_set_allocator(r.ctx, dev2, NULL), S2_OK);
    ck_assert_int_eq(s2_mem_free(r.ctx, dev2, p2.base), S2_OK);
    s2_device_free(dev2);
    rig_close(&r, plan);
}
END_TEST

static s2_artifact *compile(const s2_pattern *p, s2_kernel_kind kind, s2_arch arch)
{
    s2_kernel_spec spec = {.kind = kind, .dtype = S2_DTYPE_BF16, .head_dim = D, .arch = arch};
    return s2t_compile_or_exit(p, &spec);
}

int main(int argc, char **argv)
{
    fake_path = s2t_fake_libcuda_arg(argc, argv);
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args la;
    attn_pattern_args(3, &la);   /* GQA 32/8, block 32 */
    la.max_seq_len = 4096;
    if (s2_pattern_from_args(ctx, &la, &fwd_set) != S2_OK)
        return 1;
    s2_local_stride_args_default(&la);
    la.name = "dec";
    la.num_heads = DH;
    la.num_kv_heads = DHK;
    la.block_size = 16;
    la.local_blocks = 2;
    la.vert_stride = 4;
    if (s2_pattern_from_args(ctx, &la, &dec_set) != S2_OK)
        return 1;
    s2_ctx_free(ctx);
    const s2_pattern *fp = s2_pattern_set_get(fwd_set, 0);
    if (fp->heads != H || fp->kv_heads != HK) {
        fprintf(stderr, "pattern 3 has %d/%d heads, the test expects %d/%d\n", fp->heads, fp->kv_heads, H, HK);
        return 1;
    }
    fwd_art = compile(fp, S2_KERNEL_FWD, S2_ARCH_SM90A);
    bwd_art = compile(fp, S2_KERNEL_BWD, S2_ARCH_SM90A);
    dec_art = compile(s2_pattern_set_get(dec_set, 0), S2_KERNEL_DECODE, S2_ARCH_SM80);

    Suite *s = suite_create("plan");
    TCase *tc_plan = tcase_create("plan");
    tcase_set_timeout(tc_plan, 60);
    tcase_add_test(tc_plan, forward_after_prepare_only_launches);
    tcase_add_test(tc_plan, forward_pushes_the_context_when_needed);
    tcase_add_test(tc_plan, unprepared_shape_in_capture);
    tcase_add_test(tc_plan, backward_uses_the_plans_workspace);
    tcase_add_test(tc_plan, decode_split_kv_in_the_plans_workspace);
    tcase_add_test(tc_plan, device_sequences);
    tcase_add_test(tc_plan, seqs_from_cu_needs_the_kernel);
    tcase_add_test(tc_plan, two_devices_in_one_process);
    suite_add_tcase(s, tc_plan);
    int failed = s2t_run_suite(s);
    s2_artifact_free(fwd_art);
    s2_artifact_free(bwd_art);
    s2_artifact_free(dec_art);
    s2_pattern_set_free(fwd_set);
    s2_pattern_set_free(dec_set);
    return failed ? 1 : 0;
}
