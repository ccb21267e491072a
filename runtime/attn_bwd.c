/* The backward: its workspaces (with the dS path and its chunkings) and
 * launches. */
#include "attn_internal.h"
#include "params.h"

#include <math.h>
#include <string.h>

size_t s2_attn_bwd_workspace_bytes(int batch, int heads, int64_t q_len)
{
    if (batch < 1 || heads < 1 || q_len < 1)
        return 0;
    return 2 * s2_align16((size_t)batch * (size_t)heads * (size_t)q_len * sizeof(float));
}

/* Where the dS tiles start in the workspace, and the size that holds them
 * (0: slot s has no dS path).  rows: the stats' rows per head, batch · q_len
 * (a packed batch: its token rows); batch: the dS tiles' batch entries
 * (a packed batch: its sequences). */
static size_t ds_offset(int heads, int64_t rows)
{
    return (s2_attn_bwd_workspace_bytes(1, heads, rows) + 255u) & ~(size_t)255u;
}

static size_t ds_workspace_bytes(const s2_attn_kernel *k, int64_t ds_tiles, int batch, int heads, int64_t rows)
{
    if (!k->fns[S2_ROLE_BWD_DQDS] || ds_tiles < 0)
        return 0;
    return ds_offset(heads, rows) + (size_t)batch * (size_t)ds_tiles * S2_BWD_DS_TILE_BYTES;
}

/* The same over the slot's chunking i (s->ds_chunks[i] chunks of kv heads,
 * one after the other through the workspace). */
static size_t ds_chunking_bytes(const sched_slot *s, int batch, int heads, int64_t rows, int i)
{
    return ds_offset(heads, rows) + (size_t)batch * (size_t)s->ds_chunk_tiles[i] * S2_BWD_DS_TILE_BYTES;
}

/* The same over `chunks` chunks: 0 when that chunking is not offered (its index in *which). */
static size_t ds_chunked_bytes(const s2_attn_kernel *k, const sched_slot *s, int batch, int heads, int64_t rows,
                               int chunks, int *which)
{
    if (chunks == 1)
        return ds_workspace_bytes(k, s->ds_tiles, batch, heads, rows);
    for (int i = 0; k->fns[S2_ROLE_BWD_DQDS] && s->ds_tiles >= 0 && i < s->ds_nchunk; i++)
        if (s->ds_chunks[i] == chunks) {
            if (which)
                *which = i;
            return ds_chunking_bytes(s, batch, heads, rows, i);
        }
    return 0;
}

/* The dS workspace of (batch, q_len, kv_len) in `chunks` chunks of kv heads
 * (0: no dS path; chunks 0: the default, bounded workspace), the schedules
 * built (and cached) as a launch would. */
static s2_status ds_need(s2_ctx *ctx, s2_attn_kernel *k, int batch, int64_t q_len, int64_t kv_len, int chunks,
                         size_t *need)
{
    *need = 0;
    if (k->desc->spec.kind != S2_KERNEL_BWD)
        return s2_fail(ctx, S2_ERR_INVALID, "kernel %s is not a backward kernel", k->desc->name);
    s2_attn_fwd_args f = {.batch = batch, .q_len = q_len, .kv_len = kv_len, .heads = k->pattern->heads,
                          .kv_heads = k->pattern->kv_heads, .head_dim = k->desc->spec.head_dim,
                          .dtype = k->desc->spec.dtype};
    s2_status st = s2_rt_check_sizes(ctx, k, &f);
    if (st != S2_OK)
        return st;
    mtx_lock(&k->lock);
    sched_slot *s = NULL;
    st = s2_rt_sched_get(ctx, k, q_len, kv_len, NULL, &s);
    if (st == S2_OK)
        *need = chunks == 0 ? s2_rt_bwd_default_workspace(k, s, batch, (int64_t)batch * q_len)
                            : ds_chunked_bytes(k, s, batch, k->pattern->heads, (int64_t)batch * q_len, chunks, NULL);
    mtx_unlock(&k->lock);
    return st;
}

s2_status s2_attn_backward_workspace_chunked(s2_ctx *ctx, s2_attn_kernel *k, int batch, int64_t q_len,
                                             int64_t kv_len, int chunks, size_t *bytes)
{
    if (!k || !bytes)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_backward_workspace_chunked: %s is NULL", !k ? "kernel" : "bytes");
    *bytes = 0;
    if (k->desc->spec.kind == S2_KERNEL_BWD && chunks != 0 &&
        (chunks < 1 || chunks > k->pattern->kv_heads || k->pattern->kv_heads % chunks))
        return s2_fail(ctx, S2_ERR_INVALID, "%d head chunks do not divide %d kv heads", chunks, k->pattern->kv_heads);
    size_t need = 0;
    s2_status st = ds_need(ctx, k, batch, q_len, kv_len, chunks, &need);
    if (st == S2_OK && chunks == 0)
        return *bytes = need, S2_OK;
    if (st != S2_OK)
        return st;
    if (!need)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "kernel %s has no dS path for this shape", k->desc->name);
    *bytes = need;
    return S2_OK;
}

s2_status s2_attn_backward_workspace(s2_ctx *ctx, s2_attn_kernel *k, int batch, int64_t q_len, int64_t kv_len,
                                     size_t *bytes, bool *ds_path)
{
    if (!k || !bytes)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_backward_workspace: %s is NULL", !k ? "kernel" : "bytes");
    *bytes = 0;
    if (ds_path)
        *ds_path = false;
    size_t full = 0;
    s2_status st = ds_need(ctx, k, batch, q_len, kv_len, 1, &full);
    if (st != S2_OK)
        return st;
    *bytes = full ? full : s2_attn_bwd_workspace_bytes(batch, k->pattern->heads, q_len);
    if (ds_path)
        *ds_path = full != 0;
    return S2_OK;
}

void s2_attn_bwd_args_bshd(s2_attn_bwd_args *a)
{
    if (!a)
        return;
    const int64_t d = a->head_dim, h = a->heads, hk = a->kv_heads;
    int64_t *qs[4] = {a->q_stride, a->o_stride, a->do_stride, a->dq_stride};
    for (int i = 0; i < 4; i++)
        qs[i][0] = a->q_len * h * d, qs[i][1] = h * d, qs[i][2] = d;
    int64_t *ks[4] = {a->k_stride, a->v_stride, a->dk_stride, a->dv_stride};
    for (int i = 0; i < 4; i++)
        ks[i][0] = a->kv_len * hk * d, ks[i][1] = hk * d, ks[i][2] = d;
}

/* The backward's launch arguments (attention.h, backward ABI), for kv heads
 * [kv0, kv0 + nkv) (query heads kv0 * group ..): tensors, lse/delta rows and
 * the schedules' class arrays are moved to the first head (the kernels index
 * them from the grid's head, with the full head count as the batch stride),
 * ds_head is the chunk's head_base array. */
typedef struct bwd_launch {
    s2_rt_bwd_vals v;
    void *args[S2_RT_MAX_PARAMS];
} bwd_launch;

static s2_status bwd_launch_args(s2_ctx *ctx, bwd_launch *L, const s2_attn_kernel *k, const s2_attn_bwd_args *a,
                                 const sched_slot *s, int kv0, int nkv, s2_devptr ds, s2_devptr ds_head)
{
    int group = a->heads / a->kv_heads;
    int64_t h0 = (int64_t)kv0 * group;
    size_t es = s2_dtype_size(a->dtype), ws = s2_attn_bwd_workspace_bytes(bwd_tensor_batch(a), a->heads, a->q_len);
    size_t rows = (size_t)h0 * (size_t)a->q_len * sizeof(float);
    s2_devptr base[12] = {a->q, a->k, a->v, a->o, a->d_o, a->lse, a->d_lse, a->workspace, a->workspace + ws / 2,
                          a->dq, a->dk, a->dv};
    /* which head each pointer follows: 0 query heads, 1 kv heads, 2 rows of lse/delta */
    static const int kind[12] = {0, 1, 1, 0, 0, 2, 2, 2, 2, 0, 1, 1};
    const int64_t *head_stride[12] = {a->q_stride, a->k_stride, a->v_stride, a->o_stride, a->do_stride, NULL, NULL,
                                      NULL, NULL, a->dq_stride, a->dk_stride, a->dv_stride};
    s2_devptr p[12];
    for (int i = 0; i < 12; i++) {
        s2_devptr off = kind[i] == 2 ? (s2_devptr)rows
                        : (s2_devptr)((kind[i] == 0 ? h0 : kv0) * head_stride[i][2] * (int64_t)es);
        p[i] = base[i] ? base[i] + off : 0;
    }
    double scale = a->scale != 0.0f ? (double)a->scale : 1.0 / sqrt((double)a->head_dim);
    s2_devptr cls = 4 * (s2_devptr)h0;   /* int32 class_of_head[heads] of both schedules, by query head */
    L->v = (s2_rt_bwd_vals){
        .Q = p[0], .K = p[1], .V = p[2], .O = p[3], .DO = p[4], .LSE = p[5], .DLSE = p[6], .DELTA = p[7], .LSE2 = p[8],
        .DQ = p[9], .DK = p[10], .DV = p[11],
        .QLEN = (int32_t)a->q_len, .KVLEN = (int32_t)(a->seqs ? a->seqs->sched_kv_len : a->kv_len),
        .SCALE_LOG2 = (float)(scale * 1.4426950408889634),
        .CLASS = s->fwd.class_of_head + cls, .OFFSETS = s->fwd.offsets, .ENTRIES = s->fwd.entries,
        .FIRST_Q_TILE = s->fwd.first_q_tile, .Q_TILES = s->fwd.q_tiles,
        .TCLASS = s->t_class_of_head + cls, .TOFFSETS = s->t_offsets, .TENTRIES = s->t_entries,
        .KV_TILES = s->kv_tiles, .DS = ds, .DS_HEAD = ds ? ds_head : 0, .DS_MAP = ds ? s->ds_map : 0,
        .SEQINFO = a->seqs ? a->seqs->buf : 0,
    };
    S2_RT_STRIDES(L->v, QS, a->q_stride), S2_RT_STRIDES(L->v, KS, a->k_stride);
    S2_RT_STRIDES(L->v, VS, a->v_stride), S2_RT_STRIDES(L->v, OS, a->o_stride);
    S2_RT_STRIDES(L->v, DOS, a->do_stride), S2_RT_STRIDES(L->v, DQS, a->dq_stride);
    S2_RT_STRIDES(L->v, DKS, a->dk_stride), S2_RT_STRIDES(L->v, DVS, a->dv_stride);
    /* every kernel of the module has the same ABI (the manifest parser checks) */
    s2_rt_pack(&k->argmap[S2_ROLE_BWD_PRE], &L->v, L->args);
    if (k->rec[S2_ROLE_BWD_PRE]->abi != S2_ABI_BWD_TMA)
        return S2_OK;
    /* the dK/dV kernel's Q and dO tiles (block_m rows), over the launch's heads */
    int64_t nh = (int64_t)nkv * group;
    s2_status st = s2_rt_tensor_map_of(ctx, k->mod->dev, &L->v.TMAP_Q, a->dtype, a->head_dim, L->v.Q,
                                       a->q_stride, a->q_len, nh, bwd_tensor_batch(a), (uint32_t)k->desc->spec.block_m);
    if (st == S2_OK)
        st = s2_rt_tensor_map_of(ctx, k->mod->dev, &L->v.TMAP_DO, a->dtype, a->head_dim, L->v.DO, a->do_stride,
                                 a->q_len, nh, bwd_tensor_batch(a), (uint32_t)k->desc->spec.block_m);
    return st;
}

/* A chunking the runtime takes by itself: a chunk's dK/dV work spread over
 * the GPU's CTA slots (two per SM) takes at least as long as its longest
 * list, which otherwise becomes each chunk's tail (runs 43-44). */
static bool chunks_fill(const s2_attn_kernel *k, const sched_slot *s, int i, int batch)
{
    int64_t slots = 2 * (int64_t)s2_device_get_info(k->mod->dev)->sm_count;
    return s->ds_chunk_work[i] * batch >= s->ds_longest * slots;
}

/* NAME_pre over every head, then NAME_dkdv and NAME_dq, or with the dS path
 * NAME_dkdv and NAME_dqds: over all heads when the workspace holds every dS
 * tile, else over the fewest equal chunks of kv heads whose tiles it holds
 * and whose launches fill the GPU (o->ds_chunks: that many, the caller's
 * choice), one chunk after the other from the start of the dS area (the
 * results are those of one launch, bit for bit), else the recomputing
 * NAME_dq. */
static s2_status launch_bwd(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_bwd_args *a,
                            const s2_attn_bwd_options *o, const sched_slot *s)
{
    static const s2_attn_bwd_options none = {0, 0};
    if (!o)
        o = &none;
    int chunks = 1, which = -1;
    bool ds = false;
    int64_t rows = bwd_tensor_batch(a) * a->q_len;
    size_t need = ds_workspace_bytes(k, s->ds_tiles, a->batch, a->heads, rows);
    if (o->ds_chunks > 0) {
        size_t c = ds_chunked_bytes(k, s, a->batch, a->heads, rows, o->ds_chunks, &which);
        if (!c)
            return s2_fail(ctx, S2_ERR_UNSUPPORTED, "ds_chunks %d: kernel %s has no dS path for this shape",
                           o->ds_chunks, k->desc->name);
        if (a->workspace_bytes < c)
            return s2_fail(ctx, S2_ERR_INVALID,
                           "ds_chunks %d: workspace_bytes %zu below the %zu bytes of s2_attn_backward_workspace_chunked()",
                           o->ds_chunks, a->workspace_bytes, c);
        ds = true, chunks = o->ds_chunks;
    } else if (need && a->workspace_bytes >= need) {
        ds = true;
    } else if (need && o->ds_chunks == 0) {
        /* need != 0: the kernel has NAME_dqds and the shape a dS map */
        for (int i = 0; i < s->ds_nchunk && !ds; i++)
            if (a->workspace_bytes >= ds_chunking_bytes(s, a->batch, a->heads, rows, i) &&
                chunks_fill(k, s, i, a->batch))
                ds = true, chunks = s->ds_chunks[i], which = i;
    }
    s2_devptr dsw = ds ? a->workspace + ds_offset(a->heads, rows) : 0;
    bool pair = ds && k->fns[S2_ROLE_BWD_DQDS2] && s->dqds2_ok && o->dq_pair >= 0;
    bwd_launch L;
    int nkv = a->kv_heads / chunks, group = a->heads / a->kv_heads;
    s2_status rc = bwd_launch_args(ctx, &L, k, a, s, 0, a->kv_heads, dsw, s->ds_head);
    if (rc != S2_OK)
        return rc;
    /* NAME_pre over the stats' rows (a packed batch's token rows are one batch entry) */
    s2_launch_dims in = {.q_tiles = L.v.Q_TILES, .kv_tiles = L.v.KV_TILES, .q_len = a->q_len, .heads = a->heads,
                         .kv_heads = a->kv_heads, .batch = (int)bwd_tensor_batch(a)};
    s2_kernel_role dq = pair ? S2_ROLE_BWD_DQDS2 : ds ? S2_ROLE_BWD_DQDS : S2_ROLE_BWD_DQ;
    s2_launch_cfg pre;
    rc = s2_rt_launch_cfg(ctx, k, S2_ROLE_BWD_PRE, &in, stream, &pre);
    if (rc == S2_OK)
        rc = s2_cufunction_launch(ctx, k->fns[S2_ROLE_BWD_PRE], &pre, L.args);
    /* the chunks' launches: over nkv kv heads each, every batch entry (sequence) */
    in.kv_heads = nkv, in.heads = nkv * group, in.batch = a->batch;
    for (int j = 0; j < chunks && rc == S2_OK; j++) {
        s2_devptr head = chunks == 1 ? s->ds_head
                         : s->ds_chunk_head[which] + (s2_devptr)j * (s2_devptr)(a->heads + 1) * sizeof(int64_t);
        /* one launch: the arguments (and tensor maps) of NAME_pre's */
        if (chunks > 1)
            rc = bwd_launch_args(ctx, &L, k, a, s, j * nkv, nkv, dsw, head);
        if (rc != S2_OK)
            break;
        s2_launch_cfg cfg[2];
        rc = s2_rt_launch_cfg(ctx, k, S2_ROLE_BWD_DKDV, &in, stream, &cfg[0]);
        if (rc == S2_OK)
            rc = s2_rt_launch_cfg(ctx, k, dq, &in, stream, &cfg[1]);
        if (rc == S2_OK)
            rc = s2_cufunction_launch(ctx, k->fns[S2_ROLE_BWD_DKDV], &cfg[0], L.args);
        if (rc == S2_OK)
            rc = s2_cufunction_launch(ctx, k->fns[dq], &cfg[1], L.args);
    }
    if (rc == S2_OK && chunks > 1)
        atomic_fetch_add(&k->n_ds_chunked, 1);
    if (rc == S2_OK && pair)
        atomic_fetch_add(&k->n_dq_paired, 1);
    return rc;
}

typedef struct bwd_on_slot_args {
    const s2_attn_bwd_args *a;
    const s2_attn_bwd_options *o;
} bwd_on_slot_args;

static s2_status bwd_on_slot(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const void *args, sched_slot *s)
{
    const bwd_on_slot_args *b = args;
    return launch_bwd(ctx, k, stream, b->a, b->o, s);
}

s2_status s2_attn_backward_opts(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_bwd_args *a,
                                const s2_attn_bwd_options *opts)
{
    static const s2_attn_bwd_options none = {0, 0};
    const s2_attn_bwd_options *o = opts ? opts : &none;
    s2_status st = s2_attn_backward_check(ctx, k, a);
    if (st != S2_OK)
        return st;
    if (o->dq_pair != 0 && o->dq_pair != -1)
        return s2_fail(ctx, S2_ERR_INVALID, "dq_pair %d (0 or -1)", o->dq_pair);
    if (o->ds_chunks < 0 || (o->ds_chunks > 0 && (a->kv_heads < 1 || a->kv_heads % o->ds_chunks)))
        return s2_fail(ctx, S2_ERR_INVALID, "ds_chunks %d does not divide %d kv heads", o->ds_chunks, a->kv_heads);
    int64_t sq, sk;
    if (!s2_rt_bwd_sched_shape(a, &sq, &sk))
        return S2_OK;
    return s2_rt_sched_launch(ctx, k, sq, sk, stream, bwd_on_slot, &(bwd_on_slot_args){a, o});
}

s2_status s2_rt_bwd_launch(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_bwd_args *a,
                           const sched_slot *s)
{
    return launch_bwd(ctx, k, stream, a, NULL, s);
}

s2_status s2_rt_bwd_tensor_maps(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_bwd_args *a)
{
    if (k->rec[S2_ROLE_BWD_PRE]->abi != S2_ABI_BWD_TMA)
        return S2_OK;
    s2_tensor_map maps[2];
    uint32_t rows = (uint32_t)k->desc->spec.block_m;
    s2_status st = s2_rt_tensor_map_of(ctx, k->mod->dev, &maps[0], a->dtype, a->head_dim, a->q, a->q_stride, a->q_len,
                                       a->heads, bwd_tensor_batch(a), rows);
    return st == S2_OK ? s2_rt_tensor_map_of(ctx, k->mod->dev, &maps[1], a->dtype, a->head_dim, a->d_o, a->do_stride,
                                             a->q_len, a->heads, bwd_tensor_batch(a), rows)
                       : st;
}

size_t s2_rt_bwd_full_workspace(const s2_attn_kernel *k, int64_t ds_tiles, int batch, int64_t rows)
{
    size_t ds = ds_workspace_bytes(k, ds_tiles, batch, k->pattern->heads, rows);
    return ds ? ds : s2_attn_bwd_workspace_bytes(1, k->pattern->heads, rows);
}

bool s2_rt_bwd_sched_shape(const s2_attn_bwd_args *a, int64_t *q_len, int64_t *kv_len)
{
    *q_len = a->q_len, *kv_len = a->kv_len;
    if (a->seqs)
        *q_len = a->seqs->sched_q_len, *kv_len = a->seqs->sched_kv_len;
    return *kv_len > 0; /* 0: no sequence has a query */
}

/* FlashAttention-3's backward needs about twice q's bytes (its fp32 dQ
 * accumulator): the default workspace stays within that plus 64 MB. */
static size_t bwd_bound(const s2_attn_kernel *k, int64_t rows)
{
    size_t q = (size_t)rows * (size_t)k->pattern->heads * (size_t)k->desc->spec.head_dim *
               s2_dtype_size(k->desc->spec.dtype);
    return 2 * q + ((size_t)64 << 20);
}

size_t s2_rt_bwd_default_workspace(const s2_attn_kernel *k, const sched_slot *s, int batch, int64_t rows)
{
    int heads = k->pattern->heads;
    size_t plain = s2_attn_bwd_workspace_bytes(1, heads, rows), bound = bwd_bound(k, rows);
    size_t full = s ? ds_workspace_bytes(k, s->ds_tiles, batch, heads, rows) : 0;
    if (!full || full <= (bound > plain ? bound : plain))
        return full ? full : plain;
    /* the fewest chunks of kv heads within the bound that still fill the GPU (launch_bwd's own choice) */
    for (int i = 0; i < s->ds_nchunk; i++) {
        size_t c = ds_chunking_bytes(s, batch, heads, rows, i);
        if (c <= bound && chunks_fill(k, s, i, batch))
            return c;
    }
    return plain;
}

size_t s2_rt_bwd_default_workspace_bound(const s2_attn_kernel *k, int64_t ds_tiles, int batch, int64_t rows)
{
    size_t plain = s2_attn_bwd_workspace_bytes(1, k->pattern->heads, rows), bound = bwd_bound(k, rows);
    size_t full = s2_rt_bwd_full_workspace(k, ds_tiles, batch, rows), cap = bound > plain ? bound : plain;
    return full < cap ? full : cap;
}

s2_status s2_attn_backward(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_bwd_args *a)
{
    return s2_attn_backward_opts(ctx, k, stream, a, NULL);
}

