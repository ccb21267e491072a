/* The forward launch: tensor maps, the launch shape (grid, wide variant,
 * persistent grid) and its arguments. */
#include "attn_internal.h"
#include "params.h"

#include <math.h>
#include <string.h>

void s2_attn_fwd_args_bshd(s2_attn_fwd_args *a)
{
    if (!a)
        return;
    const int64_t d = a->head_dim, h = a->heads, hk = a->kv_heads;
    for (int i = 0; i < 2; i++) {
        int64_t *q = i ? a->o_stride : a->q_stride;
        q[0] = a->q_len * h * d, q[1] = h * d, q[2] = d;
        int64_t *kv = i ? a->v_stride : a->k_stride;
        kv[0] = a->kv_len * hk * d, kv[1] = hk * d, kv[2] = d;
    }
}

/* A dimension of extent 1 is never stepped over, so its stride (possibly
 * anything) is replaced by one the driver accepts. */
s2_status s2_rt_tensor_map_of(s2_ctx *ctx, const s2_device *dev, s2_tensor_map *map, s2_dtype dt, int d,
                              s2_devptr ptr, const int64_t stride[3], int64_t seq, int64_t heads, int64_t batch,
                              uint32_t rows)
{
    size_t es = s2_dtype_size(dt);
    uint64_t dims[4] = {(uint64_t)d, (uint64_t)seq, (uint64_t)heads, (uint64_t)batch};
    int64_t ext[3] = {seq, heads, batch};
    int64_t el[3] = {stride[1], stride[2], stride[0]};
    uint64_t strides[3];
    for (int i = 0; i < 3; i++)
        strides[i] = ext[i] < 2 || el[i] <= 0 ? (uint64_t)d * es : (uint64_t)el[i] * es;
    uint32_t box[4] = {(uint32_t)(128 / es), rows, 1, 1};   /* 128 bytes: one swizzle row */
    return s2_tensor_map_encode_tiled(ctx, dev, map, dt, 4, ptr, dims, strides, box, 128);
}

s2_status s2_rt_fwd_tensor_maps(s2_ctx *ctx, const s2_device *dev, const s2_kspec *spec, const s2_attn_fwd_args *a,
                                s2_tensor_map maps[3])
{
    if (!spec || !a || !maps)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_fwd_tensor_maps: null argument");
    /* box {64, rows}: past a head dim that is not a multiple of 64 the box reads zeros */
    if (spec->head_dim % 16 != 0 || spec->head_dim < 16 || spec->head_dim > 256 || spec->block_n < 1 ||
        spec->block_n > 256)
        return s2_fail(ctx, S2_ERR_INVALID, "tensor maps: head_dim %d / block_n %d", spec->head_dim, spec->block_n);
    int64_t nb = tensor_batch(a);
    uint32_t kv_rows = (uint32_t)(spec->kv_gather > 1 ? spec->block_n / spec->kv_gather : spec->block_n);
    s2_status st = s2_rt_tensor_map_of(ctx, dev, &maps[0], spec->dtype, spec->head_dim, a->q, a->q_stride, a->q_len,
                                       a->heads, nb, 64);
    if (st == S2_OK)
        st = s2_rt_tensor_map_of(ctx, dev, &maps[1], spec->dtype, spec->head_dim, a->k, a->k_stride, a->kv_len,
                                 a->kv_heads, nb, kv_rows);
    if (st == S2_OK)
        st = s2_rt_tensor_map_of(ctx, dev, &maps[2], spec->dtype, spec->head_dim, a->v, a->v_stride, a->kv_len,
                                 a->kv_heads, nb, kv_rows);
    return st;
}

s2_status s2_attn_fwd_tensor_maps(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_fwd_args *a,
                                  s2_tensor_map maps[3])
{
    const s2_kernel_record *r = k ? k->rec[S2_ROLE_FWD] : NULL;
    if (!r || r->abi == S2_ABI_FWD)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_attn_fwd_tensor_maps: not a forward kernel with tensor maps");
    return s2_rt_fwd_tensor_maps(ctx, k->mod->dev, &r->spec, a, maps);
}

s2_status s2_rt_fwd_launch(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_fwd_args *a, sched_slot *s,
                           const s2_tensor_map *given)
{
    double scale = a->scale != 0.0f ? (double)a->scale : 1.0 / sqrt((double)a->head_dim);
    /* the kernel the schedule was built for: NAME, or NAME_w on its own tiles */
    s2_kernel_role role = s->use_wide ? S2_ROLE_FWD_WIDE : S2_ROLE_FWD;
    const s2_kernel_record *rec = k->rec[role];
    const fwd_tables *ft = s->use_wide ? &s->wide : &s->fwd;
    s2_rt_fwd_vals v = {
        .QLEN = (int32_t)a->q_len, .KVLEN = (int32_t)(a->seqs ? a->seqs->sched_kv_len : a->kv_len),
        .SCALE_LOG2 = (float)(scale * 1.4426950408889634),
        .CLASS = ft->class_of_head, .OFFSETS = ft->offsets, .ENTRIES = ft->entries,
        .FIRST_Q_TILE = ft->first_q_tile, .Q_TILES = ft->q_tiles,
        .WORK = s->w_buf, .NWORK = s->n_work, .BATCH = (int32_t)a->batch, .SEQINFO = a->seqs ? a->seqs->buf : 0,
    };
    S2_ABI_FWD_FROM_ARGS(S2_RT_FROM_ARGS)
    S2_RT_STRIDES(v, QS, a->q_stride), S2_RT_STRIDES(v, KS, a->k_stride);
    S2_RT_STRIDES(v, VS, a->v_stride), S2_RT_STRIDES(v, OS, a->o_stride);
    if (rec->grid == S2_GRID_PERSISTENT) {
        s2_status cs = s2_rt_sched_counter(ctx, k, s, stream, &v.COUNTER);
        if (cs != S2_OK)
            return cs;
    }
    if (rec->abi != S2_ABI_FWD) {
        s2_tensor_map maps[3];
        if (given)
            memcpy(maps, given, sizeof maps);
        s2_status ms = given ? S2_OK : s2_rt_fwd_tensor_maps(ctx, k->mod->dev, &rec->spec, a, maps);
        if (ms != S2_OK)
            return ms;
        v.TMAP_Q = maps[0], v.TMAP_K = maps[1], v.TMAP_V = maps[2];
    }
    /* q_tiles or the persistent grid over n_work x batch items */
    s2_launch_dims in = {.q_tiles = v.Q_TILES, .heads = a->heads, .batch = a->batch, .n_work = v.NWORK};
    return s2_rt_launch_role(ctx, k, role, &v, &in, stream);
}

bool s2_rt_fwd_sched_shape(const s2_attn_fwd_args *a, int64_t *q_len, int64_t *kv_len)
{
    *q_len = a->q_len, *kv_len = a->kv_len;
    if (a->seqs)
        *q_len = a->seqs->sched_q_len, *kv_len = a->seqs->sched_kv_len;
    return *kv_len > 0; /* 0: no sequence has a query */
}

static s2_status fwd_on_slot(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const void *args, sched_slot *s)
{
    return s2_rt_fwd_launch(ctx, k, stream, args, s, NULL);
}

s2_status s2_attn_forward(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_fwd_args *a)
{
    s2_status st = s2_attn_forward_check(ctx, k, a);
    if (st != S2_OK)
        return st;
    int64_t sq, sk;
    if (!s2_rt_fwd_sched_shape(a, &sq, &sk))
        return S2_OK;
    return s2_rt_sched_launch(ctx, k, sq, sk, stream, fwd_on_slot, a);
}
