/* Plans: the device data of declared shapes, built and uploaded once and
 * stream-ordered, so that launches afterwards check on the host and launch
 * (s2c/attn_runtime.h, "plans"). */
#include "attn_internal.h"

#include <stdlib.h>
#include <string.h>

/* What a forward's tensor maps depend on besides the kernel (s2_rt_fwd_tensor_maps). */
typedef struct map_key {
    s2_devptr q, k, v;
    int64_t stride[9], q_len, kv_len, batch;
} map_key;

/* One declared shape and, once built, its device data. */
typedef struct plan_entry {
    int64_t key[2];              /* forward, backward: the schedule's (q_len, kv_len); decode: (q_blocks, 0) */
    int batch;                   /* backward: the largest batch declared (the workspace) */
    int64_t rows;                /* backward: the most stats rows declared, batch · q_len (packed: token rows) */
    s2_attn_fwd_args fwd;        /* forward: the first declaration (its tensors' maps are encoded at prepare) */
    s2_attn_bwd_args bwd;        /* backward: the same */
    /* forward: the maps of the tensors launched last (under the plan's lock) */
    bool maps_ok;
    map_key mkey;
    s2_tensor_map maps[3];
    sched_slot slot;             /* forward, backward */
    dec_slot lists;              /* decode */
    sched_bound bound;           /* the device bytes it takes at most (decode: its lists'), counted at declaration */
} plan_entry;

struct s2_attn_plan {
    s2_attn_kernel *k;
    mtx_t lock;                  /* the persistent forward's counter pairs */
    bool lock_ok;
    bool built;                  /* device data built (prepare, or a failed prepare's part) */
    bool prepared;
    plan_entry *e;
    int n;
    int64_t cap;
    s2_attn_decode_args *dec;    /* decode shapes as declared: their workspaces are known once their lists are */
    int ndec;
    int64_t capdec;
    s2_devptr ws;                /* the plan's own workspace (0: none) */
    size_t ws_bytes;
    rt_upload up;                /* prepare's stream (frees go there too), the device bytes, the host copies */
};

static s2_kernel_kind kind_of(const s2_attn_plan *p) { return p->k->desc->spec.kind; }

s2_status s2_attn_plan_new(s2_ctx *ctx, s2_attn_kernel *k, s2_attn_plan **out)
{
    if (!out || !k)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_plan_new: %s is NULL", !out ? "out" : "kernel");
    *out = NULL;
    s2_attn_plan *p = calloc(1, sizeof *p);
    if (!p)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    p->k = k;
    p->lock_ok = mtx_init(&p->lock, mtx_plain) == thrd_success;
    if (!p->lock_ok) {
        free(p);
        return s2_fail(ctx, S2_ERR_INTERNAL, "plan: mtx_init failed");
    }
    *out = p;
    return S2_OK;
}

void s2_attn_plan_free(s2_attn_plan *p)
{
    if (!p)
        return;
    const s2_device *dev = p->k->mod->dev;
    for (int i = 0; i < p->n; i++) {
        s2_rt_sched_slot_free(dev, &p->e[i].slot, p->up.stream);
        s2_rt_free(dev, p->e[i].lists.buf, p->up.stream);
    }
    s2_rt_free(dev, p->ws, p->up.stream);
    s2_rt_up_release(&p->up);
    free(p->e);
    free(p->dec);
    if (p->lock_ok)
        mtx_destroy(&p->lock);
    free(p);
}

static plan_entry *find(const s2_attn_plan *p, int64_t k0, int64_t k1)
{
    for (int i = 0; i < p->n; i++)
        if (p->e[i].key[0] == k0 && p->e[i].key[1] == k1)
            return &p->e[i];
    return NULL;
}

/* A new shape is bounded before it is taken: one whose schedules would be
 * over the cap is refused here, and the size query sums the bounds. */
static s2_status add_key(s2_ctx *ctx, s2_attn_plan *p, int64_t k0, int64_t k1, int batch, const s2_attn_fwd_args *f,
                         const s2_attn_bwd_args *bw)
{
    plan_entry *e = find(p, k0, k1);
    if (!e) {
        sched_bound b = {0, -1};
        s2_status st = kind_of(p) == S2_KERNEL_DECODE ? s2_rt_dec_bound(ctx, p->k, k0, &b.bytes)
                                                      : s2_rt_sched_bound(ctx, p->k, k0, k1, &b);
        if (st != S2_OK)
            return st;
        if (!s2_grow(&p->e, &p->cap, p->n + 1, sizeof *p->e, 8))
            return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
        e = &p->e[p->n++];
        *e = (plan_entry){.key = {k0, k1}, .bound = b};
        if (f)
            e->fwd = *f;
        if (bw)
            e->bwd = *bw;
    }
    e->batch = batch > e->batch ? batch : e->batch;
    return S2_OK;
}

static s2_status can_add(s2_ctx *ctx, const s2_attn_plan *p, const void *shape, s2_kernel_kind kind, const char *what)
{
    if (!p || !shape)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_plan_add_%s: %s is NULL", what, !p ? "plan" : "shape");
    if (p->built)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_attn_plan_add_%s: the plan is prepared already", what);
    static const char *const names[] = {"forward", "backward", "decode"};
    if (kind_of(p) != kind)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_attn_plan_add_%s: kernel %s is a %s kernel", what, p->k->desc->name,
                       (unsigned)kind_of(p) < 3 ? names[kind_of(p)] : "other");
    return S2_OK;
}

s2_status s2_attn_plan_add_forward(s2_ctx *ctx, s2_attn_plan *p, const s2_attn_fwd_args *a)
{
    s2_status st = can_add(ctx, p, a, S2_KERNEL_FWD, "forward");
    if (st == S2_OK)
        st = s2_rt_check_sizes(ctx, p->k, a);
    int64_t sq, sk;
    if (st != S2_OK || !s2_rt_fwd_sched_shape(a, &sq, &sk))
        return st;
    return add_key(ctx, p, sq, sk, a->batch, a, NULL);
}

s2_status s2_attn_plan_add_backward(s2_ctx *ctx, s2_attn_plan *p, const s2_attn_bwd_args *a)
{
    s2_status st = can_add(ctx, p, a, S2_KERNEL_BWD, "backward");
    if (st != S2_OK)
        return st;
    s2_attn_fwd_args f = {.batch = a->batch, .q_len = a->q_len, .kv_len = a->kv_len, .heads = a->heads,
                          .kv_heads = a->kv_heads, .head_dim = a->head_dim, .dtype = a->dtype, .scale = a->scale,
                          .seqs = a->seqs};
    st = s2_rt_check_sizes(ctx, p->k, &f);
    int64_t sq, sk;
    if (st != S2_OK || !s2_rt_bwd_sched_shape(a, &sq, &sk))
        return st;
    if ((st = add_key(ctx, p, sq, sk, a->batch, NULL, a)) != S2_OK)
        return st;
    plan_entry *e = find(p, sq, sk);
    int64_t rows = bwd_tensor_batch(a) * a->q_len;
    e->rows = rows > e->rows ? rows : e->rows;
    return S2_OK;
}

s2_status s2_attn_plan_add_decode(s2_ctx *ctx, s2_attn_plan *p, const s2_attn_decode_args *a)
{
    s2_status st = can_add(ctx, p, a, S2_KERNEL_DECODE, "decode");
    if (st == S2_OK)
        st = s2_rt_dec_check_shape(ctx, p->k, a);
    if (st == S2_OK)
        st = add_key(ctx, p, s2_rt_dec_q_blocks(p->k, a->max_seq_len), 0, a->batch, NULL, NULL);
    if (st != S2_OK)
        return st;
    if (!s2_grow(&p->dec, &p->capdec, p->ndec + 1, sizeof *p->dec, 8))
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    p->dec[p->ndec++] = *a;
    return S2_OK;
}

/* The device data of every entry (stream-ordered on up's stream), and the
 * workspace size the declared shapes need. */
static s2_status build(s2_ctx *ctx, s2_attn_plan *p)
{
    s2_attn_kernel *k = p->k;
    s2_status st = S2_OK;
    p->built = true;
    p->ws_bytes = 0;
    for (int i = 0; i < p->n && st == S2_OK; i++) {
        plan_entry *e = &p->e[i];
        if (kind_of(p) == S2_KERNEL_DECODE) {
            st = s2_rt_dec_build(ctx, k, e->key[0], &p->up, &e->lists);
            continue;
        }
        st = s2_rt_sched_build(ctx, k, e->key[0], e->key[1], &p->up, &e->slot);
        if (st == S2_OK && kind_of(p) == S2_KERNEL_BWD) {
            size_t need = s2_rt_bwd_default_workspace(k, &e->slot, e->batch, e->rows);
            p->ws_bytes = need > p->ws_bytes ? need : p->ws_bytes;
        }
    }
    for (int i = 0; i < p->ndec && st == S2_OK; i++) {
        const plan_entry *e = find(p, s2_rt_dec_q_blocks(k, p->dec[i].max_seq_len), 0);
        int splits = 1;
        size_t need = 0;
        st = s2_rt_dec_splits(ctx, k, &p->dec[i], &e->lists, &splits, &need);
        p->ws_bytes = need > p->ws_bytes ? need : p->ws_bytes;
    }
    return st;
}

s2_status s2_attn_plan_prepare(s2_ctx *ctx, s2_attn_plan *p, void *stream)
{
    if (!p)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_plan_prepare: plan is NULL");
    if (p->prepared || p->built)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_attn_plan_prepare: the plan is prepared already");
    const s2_device *dev = p->k->mod->dev;
    p->up = (rt_upload){.stream = stream, .async = true};
    s2_status st = build(ctx, p);
    /* the workspace: zero once (split-KV's counters start at zero and launches leave them so) */
    if (st == S2_OK && p->ws_bytes)
        st = s2_rt_up_alloc(ctx, dev, &p->up, p->ws_bytes, &p->ws);
    if (st == S2_OK && p->ws)
        st = s2_rt_fill_async(ctx, dev, p->ws, 0, p->ws_bytes, stream);
    /* a forward or backward declared with its tensors: their maps now (kept per device), not at the first launch */
    for (int i = 0; i < p->n && st == S2_OK; i++) {
        const plan_entry *e = &p->e[i];
        if (kind_of(p) == S2_KERNEL_BWD && e->bwd.q && e->bwd.d_o)
            st = s2_rt_bwd_tensor_maps(ctx, p->k, &e->bwd);
        if (kind_of(p) != S2_KERNEL_FWD || !e->fwd.q || !e->fwd.k || !e->fwd.v)
            continue;
        const s2_kernel_record *r = p->k->rec[e->slot.use_wide ? S2_ROLE_FWD_WIDE : S2_ROLE_FWD];
        s2_tensor_map maps[3];
        if (r->abi != S2_ABI_FWD)
            st = s2_rt_fwd_tensor_maps(ctx, dev, &r->spec, &e->fwd, maps);
    }
    /* the first launch raises each kernel's shared memory limit: do it now */
    for (int r = 0; r < S2_ROLE_COUNT_ && st == S2_OK; r++)
        if (p->k->fns[r])
            st = s2_rt_kernel_reserve_smem(ctx, p->k->fns[r], (uint32_t)p->k->rec[r]->smem_bytes);
    p->prepared = st == S2_OK;
    return st;
}

s2_status s2_attn_plan_device_bytes(s2_ctx *ctx, s2_attn_plan *p, size_t *bytes)
{
    if (!p || !bytes)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_plan_device_bytes: %s is NULL", !p ? "plan" : "bytes");
    *bytes = 0;
    if (p->prepared) {
        *bytes = p->up.bytes;
        return S2_OK;
    }
    if (p->built)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_attn_plan_device_bytes: the plan's prepare failed");
    /* the declarations' bounds, and the largest workspace any of them may take: nothing is built */
    size_t sum = 0, ws = 0;
    for (int i = 0; i < p->n; i++) {
        const plan_entry *e = &p->e[i];
        sum += e->bound.bytes;
        size_t need = kind_of(p) == S2_KERNEL_BWD
                          ? s2_rt_bwd_default_workspace_bound(p->k, e->bound.ds_tiles, e->batch, e->rows)
                          : 0;
        ws = need > ws ? need : ws;
    }
    for (int i = 0; i < p->ndec; i++) {
        size_t need = s2_rt_dec_workspace_bound(&p->dec[i]);
        ws = need > ws ? need : ws;
    }
    *bytes = sum + ws;
    return S2_OK;
}

/* A shape not prepared: the kernel's own path, which may build and
 * synchronise, so not while capturing. */
static s2_status not_prepared(s2_ctx *ctx, const s2_attn_plan *p, void *stream, const char *what)
{
    if (s2_rt_stream_capturing(p->k->mod->dev, stream))
        return s2_fail(ctx, S2_ERR_CAPTURE,
                       "%s of kernel %s: the shape was not prepared in the plan, and the stream is being captured",
                       what, p->k->desc->name);
    return S2_OK;
}

static s2_status can_launch(s2_ctx *ctx, const s2_attn_plan *p, const void *a, const char *what)
{
    if (!p || !a)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_plan_%s: %s is NULL", what, !p ? "plan" : "args");
    if (!p->prepared)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_attn_plan_%s: the plan is not prepared", what);
    return S2_OK;
}

s2_status s2_attn_plan_forward(s2_ctx *ctx, s2_attn_plan *p, void *stream, const s2_attn_fwd_args *a)
{
    s2_status st = can_launch(ctx, p, a, "forward");
    if (st != S2_OK)
        return st;
    size_t bytes[5];
    if ((st = s2_rt_fwd_check_host(ctx, p->k, a, bytes)) != S2_OK)
        return st;
    int64_t sq, sk;
    if (!s2_rt_fwd_sched_shape(a, &sq, &sk))
        return S2_OK;
    plan_entry *e = find(p, sq, sk);
    if (!e) {
        st = not_prepared(ctx, p, stream, "forward");
        return st == S2_OK ? s2_attn_forward(ctx, p->k, stream, a) : st;
    }
    /* sm_90a: the maps of the tensors launched last on this shape, else the device's memo */
    const s2_kernel_record *r = p->k->rec[e->slot.use_wide ? S2_ROLE_FWD_WIDE : S2_ROLE_FWD];
    s2_tensor_map maps[3];
    bool have = false;
    map_key mk;
    if (r->abi != S2_ABI_FWD) {
        memset(&mk, 0, sizeof mk);
        mk.q = a->q, mk.k = a->k, mk.v = a->v;
        memcpy(mk.stride, a->q_stride, sizeof a->q_stride);
        memcpy(mk.stride + 3, a->k_stride, sizeof a->k_stride);
        memcpy(mk.stride + 6, a->v_stride, sizeof a->v_stride);
        mk.q_len = a->q_len, mk.kv_len = a->kv_len, mk.batch = a->seqs ? 1 : a->batch;
        mtx_lock(&p->lock);
        if ((have = e->maps_ok && memcmp(&e->mkey, &mk, sizeof mk) == 0))
            memcpy(maps, e->maps, sizeof maps);
        mtx_unlock(&p->lock);
        if (!have && (st = s2_rt_fwd_tensor_maps(ctx, p->k->mod->dev, &r->spec, a, maps)) != S2_OK)
            return st;
        if (!have) {
            mtx_lock(&p->lock);
            e->mkey = mk, e->maps_ok = true;
            memcpy(e->maps, maps, sizeof maps);
            mtx_unlock(&p->lock);
        }
    }
    /* the slot's only mutable part is the persistent forward's counter pairs */
    bool lock = e->slot.w_buf != 0;
    if (lock)
        mtx_lock(&p->lock);
    st = s2_rt_fwd_launch(ctx, p->k, stream, a, &e->slot, r->abi != S2_ABI_FWD ? maps : NULL);
    if (lock)
        mtx_unlock(&p->lock);
    return st;
}

s2_status s2_attn_plan_backward(s2_ctx *ctx, s2_attn_plan *p, void *stream, const s2_attn_bwd_args *args)
{
    s2_status st = can_launch(ctx, p, args, "backward");
    if (st != S2_OK)
        return st;
    s2_attn_bwd_args a = *args;
    if (!a.workspace && p->ws)
        a.workspace = p->ws, a.workspace_bytes = p->ws_bytes;
    if ((st = s2_rt_bwd_check_host(ctx, p->k, &a)) != S2_OK)
        return st;
    int64_t sq, sk;
    if (!s2_rt_bwd_sched_shape(&a, &sq, &sk))
        return S2_OK;
    const plan_entry *e = find(p, sq, sk);
    if (!e) {
        st = not_prepared(ctx, p, stream, "backward");
        return st == S2_OK ? s2_attn_backward(ctx, p->k, stream, &a) : st;
    }
    return s2_rt_bwd_launch(ctx, p->k, stream, &a, &e->slot);
}

s2_status s2_attn_plan_decode(s2_ctx *ctx, s2_attn_plan *p, void *stream, const s2_attn_decode_args *args)
{
    s2_status st = can_launch(ctx, p, args, "decode");
    if (st != S2_OK)
        return st;
    size_t bytes[7];
    if ((st = s2_rt_dec_check_host(ctx, p->k, args, bytes)) != S2_OK)
        return st;
    const plan_entry *e = find(p, s2_rt_dec_q_blocks(p->k, args->max_seq_len), 0);
    if (!e) {
        st = not_prepared(ctx, p, stream, "decode");
        return st == S2_OK ? s2_attn_decode(ctx, p->k, stream, args) : st;
    }
    int splits = 1;
    size_t need = 0;
    if ((st = s2_rt_dec_splits(ctx, p->k, args, &e->lists, &splits, &need)) != S2_OK)
        return st;
    s2_attn_decode_args a = *args;
    if (need && !a.workspace) {
        if (need > p->ws_bytes)
            return s2_fail(ctx, S2_ERR_INVALID,
                           "decode: %d splits need a workspace of %zu bytes; the plan's holds %zu (declare this shape, "
                           "or pass a workspace)", splits, need, p->ws_bytes);
        a.workspace = p->ws;
    }
    if (p->k->mod->check_decode && (st = s2_attn_decode_validate(ctx, p->k, stream, &a)) != S2_OK)
        return st;
    return s2_rt_dec_launch(ctx, p->k, stream, &a, &e->lists, splits);
}

s2_status s2_attn_plan_combine(s2_ctx *ctx, s2_attn_plan *p, void *stream, const s2_combine_args *a)
{
    s2_status st = can_launch(ctx, p, a, "combine");
    size_t bytes[3];
    if (st == S2_OK)
        st = s2_rt_combine_check_host(ctx, p->k, a, bytes);
    /* nothing to prepare: its pointer table travels as a kernel parameter */
    return st == S2_OK ? s2_rt_combine_launch(ctx, p->k, stream, a) : st;
}
