/* AOT launchers against the runtime on the GPU.  The AOT sources were made at
 * build time by the s2c built here (`s2c compile --emit c`, tests/aot/meson.build)
 * for the small pattern aot_gpu.yaml on sm_90a: aotbwd.{c,h} (the backward
 * module: pre, dkdv, dq, dqds, dqds2) and aotdec.{c,h} (decode and combine).
 * The runtime loads the same embedded cubins (aotbwd_cubin, aotdec_cubin);
 * load_aotbwd()/load_aotdec() load them again for the launchers.  For each of
 * the backward's three dQ paths (NAME_dq, NAME_dqds, NAME_dqds2, forced by the
 * private options), decode with one and three splits, and the combine: the
 * runtime runs on random inputs, then the AOT launchers with the same inputs
 * (the schedules, kept-block lists and workspace carving are the caller's: taken
 * from the runtime's launch), every output poisoned before each run.  The
 * launches must match (grid, block, shared memory, parameter bytes, tensor maps
 * included) and so must every output byte: same kernels, same launch.
 *
 * Both sides' launches are recorded: the runtime's by its driver table's
 * cuLaunchKernel entry, replaced by a recorder; the generated code's by the
 * Driver API functions defined below, which forward to that same table (the
 * binary does not link libcuda).  Needs a GPU of compute capability 9.0; exits
 * 77 without libcuda.so.1, a device, or on another arch.  With S2C_AOT_FAKE=1
 * (the CPU suite's run on the fake libcuda, S2C_LIBCUDA) the outputs, which
 * the fake does not compute, are compared but not expected written. */
#include "aotbwd.h"
#include "aotdec.h"
#include "attn_internal.h"
#include "gpu_harness.h"
#include "kernel_abi.h"
#include "poison.h"
#include "rand_pattern.h"
#include "s2c/attn_runtime.h"
#include "s2c/decode.h"
#include "s2c/runtime.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- launches of both sides, recorded ---- */

enum { MAX_PARAM_BYTES = 2048, MAX_LAUNCHES = 8 };

typedef struct launch {
    bool aot;                   /* by a generated launcher, else by the runtime */
    s2_abi_id abi;
    unsigned grid[3], block[3], smem;
    size_t bytes;
    unsigned char params[MAX_PARAM_BYTES];
} launch;

static launch hist[MAX_LAUNCHES];
static int nhist;
static s2_abi_id rec_abi;            /* the ABI of the launches to come */
static s2_cuda_api real;               /* the driver table as loaded */
static s2_device *g_dev;
static s2_ctx *g_ctx;
static s2t_rng g_rng;
static bool g_fake;                  /* S2C_AOT_FAKE=1: a driver that runs no kernel */

static size_t param_size(s2_param_type t)
{
    switch (t) {
    case S2_PT_I32:
    case S2_PT_F32: return 4;
    case S2_PT_TMAP: return 128;
    case S2_PT_BYTES: return 2 * S2_COMBINE_MAX_INPUTS * 8;   /* the combine's table, the one by-value struct */
    default: return 8;
    }
}

static void record(bool aot, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned smem, void **params)
{
    ck_assert_int_lt(nhist, MAX_LAUNCHES);
    launch *l = &hist[nhist++];
    const s2_abi_desc *d = s2_abi_get(rec_abi);
    *l = (launch){.aot = aot, .abi = rec_abi, .grid = {gx, gy, gz}, .block = {bx, by, bz}, .smem = smem};
    for (int i = 0; i < d->num_params; i++) {
        size_t n = param_size(d->params[i].type);
        ck_assert_uint_le(l->bytes + n, MAX_PARAM_BYTES);
        memcpy(l->params + l->bytes, params[i], n);
        l->bytes += n;
    }
}

static CUresult rt_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned smem, CUstream s, void **params, void **extra)
{
    record(false, gx, gy, gz, bx, by, bz, smem, params);
    return real.LaunchKernel(f, gx, gy, gz, bx, by, bz, smem, s, params, extra);
}

/* What the generated sources call, forwarded to the runtime's driver table. */
CUresult cuModuleLoadData(CUmodule *m, const void *image) { return real.ModuleLoadData(m, image); }
CUresult cuModuleUnload(CUmodule m) { return real.ModuleUnload(m); }
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) { return real.ModuleGetFunction(f, m, name); }
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) { return real.FuncSetAttribute(f, a, v); }
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, CUstream s, void **params, void **extra)
{
    record(true, gx, gy, gz, bx, by, bz, smem, params);
    return real.LaunchKernel(f, gx, gy, gz, bx, by, bz, smem, s, params, extra);
}
CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType t, cuuint32_t rank, void *addr,
                                const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                                const cuuint32_t *step, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    if (!real.TensorMapEncodeTiled)
        return CUDA_ERROR_NOT_SUPPORTED;
    return real.TensorMapEncodeTiled(map, t, rank, addr, dims, strides, box, step, il, sw, l2, oob);
}

/* Parameter `name` of a recorded launch (its ABI's packed layout). */
static const unsigned char *param_of(const launch *l, const char *name)
{
    const s2_abi_desc *d = s2_abi_get(l->abi);
    int idx = s2_abi_param_index(l->abi, name);
    ck_assert_msg(idx >= 0, "ABI %s has no parameter %s", d->name, name);
    size_t off = 0;
    for (int i = 0; i < idx; i++)
        off += param_size(d->params[i].type);
    return l->params + off;
}

static uint64_t u64_of(const launch *l, const char *name)
{
    uint64_t v;
    memcpy(&v, param_of(l, name), 8);
    return v;
}

static int32_t i32_of(const launch *l, const char *name)
{
    int32_t v;
    memcpy(&v, param_of(l, name), 4);
    return v;
}

/* The runtime's launch i against the launcher's launch n + i (n launches each). */
static void compare_launches(const char *what, int n)
{
    ck_assert_int_eq(nhist, 2 * n);
    for (int i = 0; i < n; i++) {
        const launch *r = &hist[i], *a = &hist[n + i];
        ck_assert(!r->aot && a->aot);
        for (int d = 0; d < 3; d++) {
            ck_assert_msg(r->grid[d] == a->grid[d], "%s: launch %d grid %d: runtime %u, launcher %u", what, i, d,
                          r->grid[d], a->grid[d]);
            ck_assert_msg(r->block[d] == a->block[d], "%s: launch %d block %d: runtime %u, launcher %u", what, i, d,
                          r->block[d], a->block[d]);
        }
        ck_assert_msg(r->smem == a->smem, "%s: launch %d shared memory: runtime %u, launcher %u", what, i, r->smem,
                      a->smem);
        ck_assert_uint_eq(r->bytes, a->bytes);
        for (size_t b = 0; b < r->bytes; b++)
            ck_assert_msg(r->params[b] == a->params[b], "%s: launch %d parameter byte %zu: runtime 0x%02x, launcher 0x%02x",
                          what, i, b, r->params[b], a->params[b]);
    }
}

/* ---- device buffers ---- */

static uint16_t bf16_of(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* n random bf16 values in [-r, r] on the device. */
static s2_devptr rand16(size_t n, float r)
{
    uint16_t *h = malloc(n * 2);
    ck_assert_ptr_nonnull(h);
    for (size_t i = 0; i < n; i++)
        h[i] = bf16_of((float)((2.0 * s2t_rng_uniform(&g_rng) - 1.0) * r));
    s2_devptr p = 0;
    ck_assert_int_eq(s2_mem_alloc(g_ctx, g_dev, n * 2, &p), S2_OK);
    ck_assert_int_eq(s2_memcpy_h2d(g_ctx, g_dev, p, h, n * 2), S2_OK);
    free(h);
    return p;
}

/* n random floats in [lo, hi] on the device. */
static s2_devptr rand32(size_t n, float lo, float hi)
{
    float *h = malloc(n * 4);
    ck_assert_ptr_nonnull(h);
    for (size_t i = 0; i < n; i++)
        h[i] = lo + (float)s2t_rng_uniform(&g_rng) * (hi - lo);
    s2_devptr p = 0;
    ck_assert_int_eq(s2_mem_alloc(g_ctx, g_dev, n * 4, &p), S2_OK);
    ck_assert_int_eq(s2_memcpy_h2d(g_ctx, g_dev, p, h, n * 4), S2_OK);
    free(h);
    return p;
}

static void sync_dev(void) { ck_assert_msg(s2_stream_synchronize(g_ctx, g_dev, NULL) == S2_OK, "%s", s2_ctx_message(g_ctx)); }

/* Some outputs: device buffers and their sizes, copied to the host; of each,
 * the elements of `elem` bytes that must still hold the poison after a run
 * (-1: any number, a workspace). */
typedef struct outs {
    int n;
    const char *name[6];
    s2_devptr p[6];
    size_t bytes[6];
    int elem[6];
    long long poisoned[6];
    unsigned char *host[6];
} outs;

static void outs_poison(const outs *o)
{
    for (int i = 0; i < o->n; i++)
        s2t_dev_poison(g_ctx, g_dev, o->p[i], o->bytes[i]);
    sync_dev();
}

static void outs_take(outs *o)
{
    sync_dev();
    for (int i = 0; i < o->n; i++) {
        free(o->host[i]);
        o->host[i] = malloc(o->bytes[i]);
        ck_assert_ptr_nonnull(o->host[i]);
        ck_assert_int_eq(s2_memcpy_d2h(g_ctx, g_dev, o->host[i], o->p[i], o->bytes[i]), S2_OK);
    }
}

/* The runtime's outputs (rt) against the launchers' (now on the device), byte
 * for byte, and the runtime's poisoned elements counted.  Returns the bytes
 * compared. */
static size_t outs_compare(const char *what, outs *rt)
{
    outs aot = *rt;
    memset(aot.host, 0, sizeof aot.host);
    outs_take(&aot);
    size_t total = 0;
    for (int i = 0; i < rt->n; i++) {
        size_t diff = 0, first = 0;
        for (size_t b = 0; b < rt->bytes[i]; b++)
            if (rt->host[i][b] != aot.host[i][b] && diff++ == 0)
                first = b;
        ck_assert_msg(diff == 0, "%s: %s: %zu of %zu bytes differ, the first at %zu (runtime 0x%02x, launcher 0x%02x)",
                      what, rt->name[i], diff, rt->bytes[i], first, rt->host[i][first], aot.host[i][first]);
        if (rt->poisoned[i] >= 0 && !g_fake) {
            /* every byte S2T_POISON_BYTE: a NaN no kernel writes for these inputs */
            long long left = 0;
            size_t e = (size_t)rt->elem[i];
            for (size_t b = 0; b + e <= rt->bytes[i]; b += e) {
                size_t j = 0;
                while (j < e && rt->host[i][b + j] == S2T_POISON_BYTE)
                    j++;
                left += j == e;
            }
            ck_assert_msg(left == rt->poisoned[i], "%s: %s: %lld of %zu elements still poison, not %lld", what,
                          rt->name[i], left, rt->bytes[i] / e, rt->poisoned[i]);
        }
        total += rt->bytes[i];
        free(aot.host[i]);
    }
    return total;
}

static void outs_free(outs *o)
{
    for (int i = 0; i < o->n; i++)
        free(o->host[i]);
}

/* ---- the backward ---- */

static s2_attn_module *bwd_mod, *dec_mod;

enum { B = 2, H = 4, HK = 2, D = 64 };

typedef CUresult (*bwd_launcher)(CUstream, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr,
                                 CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, int64_t,
                                 int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                 int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                 int64_t, int64_t, int64_t, int32_t, int32_t, float, CUdeviceptr, CUdeviceptr,
                                 CUdeviceptr, int32_t, int32_t, CUdeviceptr, CUdeviceptr, CUdeviceptr, int32_t,
                                 CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, int32_t, int32_t, int32_t);

/* One backward on the dQ path of role dq: the runtime, then pre, dkdv and the
 * dq role's launcher with the same arguments. */
static void check_bwd(s2_kernel_role dq)
{
    static const char *const names[] = {[S2_ROLE_BWD_DQ] = "dq", [S2_ROLE_BWD_DQDS] = "dqds",
                                        [S2_ROLE_BWD_DQDS2] = "dqds2"};
    const bwd_launcher third[] = {[S2_ROLE_BWD_DQ] = aotbwd_bwd_aotgpu_bf16_d64_dq,
                                  [S2_ROLE_BWD_DQDS] = aotbwd_bwd_aotgpu_bf16_d64_dqds,
                                  [S2_ROLE_BWD_DQDS2] = aotbwd_bwd_aotgpu_bf16_d64_dqds2};
    const bwd_launcher launchers[3] = {aotbwd_bwd_aotgpu_bf16_d64_pre, aotbwd_bwd_aotgpu_bf16_d64_dkdv, third[dq]};
    char what[64];
    snprintf(what, sizeof what, "backward, pre + dkdv + %s", names[dq]);
    s2_attn_kernel *k = s2_attn_module_kernel_at(bwd_mod, 0);
    ck_assert_ptr_nonnull(k);
    ck_assert_ptr_nonnull(s2_manifest_kernel_fn(s2_attn_kernel_desc(k), dq));
    /* 5 query tiles of 64: NAME_dqds2's last CTA has one */
    const int64_t SQ = 320, SK = 320;
    size_t qn = (size_t)B * SQ * H * D, kn = (size_t)B * SK * HK * D, rows = (size_t)B * H * SQ;
    s2_attn_bwd_args a = {.batch = B, .q_len = SQ, .kv_len = SK, .heads = H, .kv_heads = HK, .head_dim = D,
                          .dtype = S2_DTYPE_BF16};
    a.q = rand16(qn, 1.0f), a.k = rand16(kn, 1.0f), a.v = rand16(kn, 1.0f), a.o = rand16(qn, 1.0f);
    a.d_o = rand16(qn, 1.0f), a.lse = rand32(rows, 1.0f, 3.0f), a.d_lse = rand32(rows, -0.5f, 0.5f);
    ck_assert_int_eq(s2_mem_alloc(g_ctx, g_dev, qn * 2, &a.dq), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(g_ctx, g_dev, kn * 2, &a.dk), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(g_ctx, g_dev, kn * 2, &a.dv), S2_OK);
    size_t small = s2_attn_bwd_workspace_bytes(B, H, SQ), full = 0;
    bool on = false;
    ck_assert_msg(s2_attn_backward_workspace(g_ctx, k, B, SQ, SK, &full, &on) == S2_OK, "%s", s2_ctx_message(g_ctx));
    ck_assert_msg(on && full > small, "no dS path for this shape: %zu bytes", full);
    a.workspace_bytes = dq == S2_ROLE_BWD_DQ ? small : full;
    ck_assert_int_eq(s2_mem_alloc(g_ctx, g_dev, a.workspace_bytes, &a.workspace), S2_OK);
    s2_attn_bwd_args_bshd(&a);
    outs o = {.n = 4, .name = {"dq", "dk", "dv", "workspace (delta, lse2, dS tiles)"},
              .p = {a.dq, a.dk, a.dv, a.workspace}, .bytes = {qn * 2, kn * 2, kn * 2, a.workspace_bytes},
              .elem = {2, 2, 2, 4}, .poisoned = {0, 0, 0, -1}};

    /* the runtime */
    outs_poison(&o);
    rec_abi = s2_manifest_kernel_fn(s2_attn_kernel_desc(k), S2_ROLE_BWD_PRE)->abi;
    nhist = 0;
    s2_attn_sched_stats before, after;
    s2_attn_kernel_sched_stats(k, &before);
    s2_attn_bwd_options opt = {.dq_pair = dq == S2_ROLE_BWD_DQDS2 ? 0 : -1};
    ck_assert_msg(s2_attn_backward_opts(g_ctx, k, NULL, &a, &opt) == S2_OK, "%s", s2_ctx_message(g_ctx));
    outs_take(&o);
    ck_assert_int_eq(nhist, 3);
    s2_attn_kernel_sched_stats(k, &after);
    ck_assert_msg(after.dq_paired == before.dq_paired + (dq == S2_ROLE_BWD_DQDS2), "%s: the runtime %s NAME_dqds2",
                  what, dq == S2_ROLE_BWD_DQDS2 ? "did not take" : "took");
    ck_assert_int_eq(hist[2].block[0], s2_manifest_kernel_fn(s2_attn_kernel_desc(k), dq)->threads);
    const launch *r = &hist[0];
    ck_assert_msg((u64_of(r, "ds") != 0) == (dq != S2_ROLE_BWD_DQ), "%s: the dS workspace", what);

    /* the launchers: the schedules and the dS map are the caller's, the runtime's here */
    outs_poison(&o);
    size_t ws = s2_attn_bwd_workspace_bytes(B, H, SQ);
    float scale_log2 = (float)(1.0 / sqrt((double)D) * 1.4426950408889634);
    const int64_t *s[8] = {a.q_stride, a.k_stride, a.v_stride, a.o_stride, a.do_stride, a.dq_stride, a.dk_stride, a.dv_stride};
    ck_assert_int_eq(load_aotbwd(), CUDA_SUCCESS);
    for (int j = 0; j < 3; j++) {
        CUresult rc = launchers[j](NULL, a.q, a.k, a.v, a.o, a.d_o, a.lse, a.d_lse, a.workspace, a.workspace + ws / 2, a.dq,
                                   a.dk, a.dv, s[0][0], s[0][1], s[0][2], s[1][0], s[1][1], s[1][2], s[2][0], s[2][1],
                                   s[2][2], s[3][0], s[3][1], s[3][2], s[4][0], s[4][1], s[4][2], s[5][0], s[5][1],
                                   s[5][2], s[6][0], s[6][1], s[6][2], s[7][0], s[7][1], s[7][2], (int32_t)SQ, (int32_t)SK,
                                   scale_log2, u64_of(r, "class_of_head"), u64_of(r, "offsets"), u64_of(r, "entries"),
                                   i32_of(r, "first_q_tile"), i32_of(r, "q_tiles"), u64_of(r, "t_class_of_head"),
                                   u64_of(r, "t_offsets"), u64_of(r, "t_entries"), i32_of(r, "kv_tiles"),
                                   u64_of(r, "ds"), u64_of(r, "ds_head"), u64_of(r, "ds_map"), u64_of(r, "seqinfo"), H, HK,
                                   B);
        ck_assert_msg(rc == CUDA_SUCCESS, "%s: launcher %d returned %d", what, j, (int)rc);
    }
    compare_launches(what, 3);
    size_t bytes = outs_compare(what, &o);
    printf("aot_gpu: %s: 3 launches identical (grid, block, smem, %zu parameter bytes each), %zu output bytes "
           "bit-identical\n", what, hist[0].bytes, bytes);
    outs_free(&o);
    s2_devptr all[] = {a.q, a.k, a.v, a.o, a.d_o, a.lse, a.d_lse, a.dq, a.dk, a.dv, a.workspace};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ck_assert_int_eq(s2_mem_free(g_ctx, g_dev, all[i]), S2_OK);
}

START_TEST(bwd_dq)
{
    check_bwd(S2_ROLE_BWD_DQ);
}
END_TEST

START_TEST(bwd_dqds)
{
    check_bwd(S2_ROLE_BWD_DQDS);
}
END_TEST

START_TEST(bwd_dqds2)
{
    check_bwd(S2_ROLE_BWD_DQDS2);
}
END_TEST

/* ---- decode and combine ---- */

static void check_decode(int splits)
{
    char what[64];
    snprintf(what, sizeof what, "decode, %d split%s", splits, splits > 1 ? "s" : "");
    s2_attn_kernel *k = s2_attn_module_kernel_at(dec_mod, 0);
    ck_assert_ptr_nonnull(k);
    enum { PS = 16, MAXP = 24, NP = B * MAXP };
    int32_t tab[B * MAXP], sl[B] = {373, 150};
    for (int i = 0; i < B * MAXP; i++)   /* pages out of order */
        tab[i] = (i * 7) % (B * MAXP);
    s2_devptr table = 0, lens = 0, ws = 0;
    ck_assert_int_eq(s2_mem_alloc(g_ctx, g_dev, sizeof tab, &table), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(g_ctx, g_dev, sizeof sl, &lens), S2_OK);
    ck_assert_int_eq(s2_memcpy_h2d(g_ctx, g_dev, table, tab, sizeof tab), S2_OK);
    ck_assert_int_eq(s2_memcpy_h2d(g_ctx, g_dev, lens, sl, sizeof sl), S2_OK);
    size_t qn = (size_t)B * H * D, pn = (size_t)NP * PS * HK * D;
    s2_attn_decode_args a = {.batch = B, .n_new = 1, .heads = H, .kv_heads = HK, .head_dim = D, .dtype = S2_DTYPE_BF16,
                             .k_pages = rand16(pn, 1.0f), .v_pages = rand16(pn, 1.0f), .q = rand16(qn, 1.0f),
                             .num_pages = NP, .page_size = PS, .q_stride = {H * D, H * D, D}, .o_stride = {H * D, H * D, D},
                             .k_stride = {PS * HK * D, HK * D, D}, .v_stride = {PS * HK * D, HK * D, D},
                             .block_table = table, .table_stride = {MAXP, 0}, .max_pages_per_seq = MAXP,
                             .seq_lens = lens, .max_seq_len = MAXP * PS, .splits = splits};
    ck_assert_int_eq(s2_mem_alloc(g_ctx, g_dev, qn * 2, &a.o), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(g_ctx, g_dev, (size_t)B * H * 4, &a.lse), S2_OK);
    size_t wsb = 0;
    ck_assert_msg(s2_attn_decode_workspace(g_ctx, k, &a, &wsb) == S2_OK, "%s", s2_ctx_message(g_ctx));
    ck_assert(splits > 1 ? wsb > 0 : wsb == 0);
    if (wsb) {
        ck_assert_int_eq(s2_mem_alloc(g_ctx, g_dev, wsb, &ws), S2_OK);
        ck_assert_int_eq(s2_memset_d8(g_ctx, g_dev, ws, 0, wsb), S2_OK);
    }
    a.workspace = ws;
    outs o = {.n = 2, .name = {"o", "lse"}, .p = {a.o, a.lse}, .bytes = {qn * 2, (size_t)B * H * 4}, .elem = {2, 4}};

    outs_poison(&o);
    rec_abi = S2_ABI_DECODE;
    nhist = 0;
    ck_assert_msg(s2_attn_decode(g_ctx, k, NULL, &a) == S2_OK, "%s", s2_ctx_message(g_ctx));
    outs_take(&o);
    ck_assert_int_eq(nhist, 1);
    const launch *r = &hist[0];
    ck_assert_int_eq(i32_of(r, "splits"), splits);
    ck_assert_int_eq(r->grid[0], splits);

    /* the workspace carving and the kept-block lists are the caller's: the runtime's */
    outs_poison(&o);
    float scale_log2 = (float)(1.0 / sqrt((double)D) * 1.4426950408889634);
    ck_assert_int_eq(load_aotdec(), CUDA_SUCCESS);
    CUresult rc = aotdec_dec_aotgpu_bf16_d64(
        NULL, a.q, a.k_pages, a.v_pages, a.o, a.lse, u64_of(r, "ws_o"), u64_of(r, "ws_lse"), a.q_stride[0],
        a.q_stride[1], a.q_stride[2], a.k_stride[0], a.k_stride[1], a.k_stride[2], a.v_stride[0], a.v_stride[1],
        a.v_stride[2], a.o_stride[0], a.o_stride[1], a.o_stride[2], table, MAXP, 0, lens, 1, PS, scale_log2,
        u64_of(r, "class_of_kv_head"), u64_of(r, "offsets"), u64_of(r, "entries"), i32_of(r, "q_blocks"),
        i32_of(r, "splits"), u64_of(r, "counters"), 0, 0, HK, B);
    ck_assert_msg(rc == CUDA_SUCCESS, "%s: launcher returned %d", what, (int)rc);
    compare_launches(what, 1);
    size_t bytes = outs_compare(what, &o);
    printf("aot_gpu: %s: launch identical (grid %u x %u x %u, %zu parameter bytes), %zu output bytes bit-identical\n",
           what, r->grid[0], r->grid[1], r->grid[2], r->bytes, bytes);
    outs_free(&o);
    s2_devptr all[] = {a.q, a.o, a.lse, a.k_pages, a.v_pages, table, lens, ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            ck_assert_int_eq(s2_mem_free(g_ctx, g_dev, all[i]), S2_OK);
}

START_TEST(decode_split)
{
    check_decode(3);
}
END_TEST

START_TEST(decode_single)
{
    check_decode(1);
}
END_TEST

/* s2_combine of three partial outputs into a BHSD output with padded rows
 * against the combine launcher given the same inputs. */
START_TEST(combine)
{
    const char *what = "combine, 3 inputs";
    s2_attn_kernel *k = s2_attn_module_kernel_at(dec_mod, 0);
    enum { NIN = 3, S = 5 };
    size_t n = (size_t)B * S * H * D, ln = (size_t)B * H * S;
    s2_combine_args c = {.n = NIN, .batch = B, .heads = H, .head_dim = D, .seq = S, .dtype = S2_DTYPE_BF16,
                         .in_stride = {S * H * D, H * D, D}, .o_stride = {H * S * D + 8, D, S * D}};
    CUdeviceptr o_in[NIN], lse_in[NIN];
    for (int i = 0; i < NIN; i++) {
        o_in[i] = c.o_in[i] = rand16(n, 2.0f);
        lse_in[i] = c.lse_in[i] = rand32(ln, -2.0f, 2.0f);
    }
    size_t ob = (n + (size_t)B * 8) * 2;
    ck_assert_int_eq(s2_mem_alloc(g_ctx, g_dev, ob, &c.o), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(g_ctx, g_dev, ln * 4, &c.lse), S2_OK);
    /* the 8 elements after each batch element's rows stay poison */
    outs o = {.n = 2, .name = {"out (with padding)", "lse"}, .p = {c.o, c.lse}, .bytes = {ob, ln * 4},
              .elem = {2, 4}, .poisoned = {B * 8, 0}};

    outs_poison(&o);
    rec_abi = S2_ABI_COMBINE;
    nhist = 0;
    ck_assert_msg(s2_combine(g_ctx, k, NULL, &c) == S2_OK, "%s", s2_ctx_message(g_ctx));
    outs_take(&o);
    ck_assert_int_eq(nhist, 1);
    for (size_t b = (size_t)H * S * D * 2; b < (size_t)(H * S * D + 8) * 2; b++)
        ck_assert_msg(o.host[0][b] == S2T_POISON_BYTE, "%s: the runtime wrote the padding", what);

    outs_poison(&o);
    ck_assert_int_eq(load_aotdec(), CUDA_SUCCESS);
    const int64_t *is = c.in_stride, *os = c.o_stride;
    CUresult rc = aotdec_dec_aotgpu_bf16_d64_combine(NULL, 0, 0, 0, 0, is[0], is[1], is[2], c.o, os[0], os[1], os[2],
                                                     c.lse, NIN, S, H, B * S * H, c.sinks, o_in, lse_in);
    ck_assert_msg(rc == CUDA_SUCCESS, "%s: launcher returned %d", what, (int)rc);
    compare_launches(what, 1);
    size_t bytes = outs_compare(what, &o);
    printf("aot_gpu: %s: launch identical (grid %u, %zu parameter bytes, the 1 KB table included), %zu output bytes "
           "bit-identical\n", what, hist[0].grid[0], hist[0].bytes, bytes);
    outs_free(&o);
    for (int i = 0; i < NIN; i++) {
        ck_assert_int_eq(s2_mem_free(g_ctx, g_dev, c.o_in[i]), S2_OK);
        ck_assert_int_eq(s2_mem_free(g_ctx, g_dev, c.lse_in[i]), S2_OK);
    }
    ck_assert_int_eq(s2_mem_free(g_ctx, g_dev, c.o), S2_OK);
    ck_assert_int_eq(s2_mem_free(g_ctx, g_dev, c.lse), S2_OK);
}
END_TEST

int main(void)
{
    s2t_gpu g;
    int rc = s2t_gpu_start("running", NULL, &g);
    if (rc != 0)
        return rc;
    if (g.own_arch != S2_ARCH_SM90A) {
        printf("the generated sources hold sm_90a cubins; this device is %s: skipped\n", s2_arch_name(g.own_arch));
        return 77;
    }
    s2t_rng_seed(&g_rng, g.seed);
    const char *fake = getenv("S2C_AOT_FAKE");
    g_fake = fake && strcmp(fake, "1") == 0;
    if (g_fake)
        printf("S2C_AOT_FAKE=1: the driver runs no kernel; outputs are compared, not expected written\n");
    g_ctx = s2_ctx_new();
    s2_status st;
    const s2_cuda_api *drv = s2_cuda_api_get(g_ctx, &st);
    if (!drv || s2_device_open(g_ctx, 0, &g_dev) != S2_OK) {
        printf("device 0: %s\n", s2_ctx_message(g_ctx));
        return 1;
    }
    /* record the runtime's launches (the table is the process's, written once at load) */
    real = *drv;
    ((s2_cuda_api *)drv)->LaunchKernel = rt_launch;
    /* the generated launchers use the current context: the runtime's, the device's primary one */
    if (real.CtxPushCurrent(g_dev->cu_ctx) != CUDA_SUCCESS ||
        s2_attn_module_load(g_ctx, g_dev, aotbwd_cubin, aotbwd_cubin_size, &bwd_mod) != S2_OK ||
        s2_attn_module_load(g_ctx, g_dev, aotdec_cubin, aotdec_cubin_size, &dec_mod) != S2_OK) {
        printf("loading the modules: %s\n", s2_ctx_message(g_ctx));
        return 1;
    }
    Suite *s = suite_create("aot_gpu");
    TCase *tc = tcase_create("aot_gpu");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, bwd_dq);
    tcase_add_test(tc, bwd_dqds);
    tcase_add_test(tc, bwd_dqds2);
    tcase_add_test(tc, decode_split);
    tcase_add_test(tc, decode_single);
    tcase_add_test(tc, combine);
    suite_add_tcase(s, tc);
    int failed = s2t_run_nofork(s);
    (void)unload_aotbwd();
    (void)unload_aotdec();
    s2_attn_module_free(bwd_mod);
    s2_attn_module_free(dec_mod);
    CUcontext popped;
    real.CtxPopCurrent(&popped);
    s2_device_free(g_dev);
    s2_ctx_free(g_ctx);
    return failed ? 1 : 0;
}
