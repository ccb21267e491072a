/* Launches over a caller's schedule (context parallelism): the kernels of
 * the module, reading a checked, uploaded schedule instead of the cache's. */
#include "attn_internal.h"

#include <stdlib.h>

struct s2_attn_sched {
    s2_attn_kernel *k;
    int64_t q_len, kv_len;
    sched_slot slot;
};

static s2_status fwd_or_bwd(s2_ctx *ctx, const s2_attn_kernel *k, const char *what)
{
    if (!k)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "%s: kernel is NULL", what);
    if (k->desc->spec.kind != S2_KERNEL_FWD && k->desc->spec.kind != S2_KERNEL_BWD)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: kernel %s is not a forward or backward kernel", what, k->desc->name);
    return S2_OK;
}

/* The layout of (q_len, kv_len) as a launch of k takes it. */
static s2_status layout_of(s2_ctx *ctx, const s2_attn_kernel *k, int64_t q_len, int64_t kv_len, s2_layout **out)
{
    if (q_len < 1 || kv_len < q_len || kv_len > s2_attn_kernel_max_kv_len(k))
        return s2_fail(ctx, S2_ERR_SHAPE, "q_len %lld, kv_len %lld (1 <= q_len <= kv_len <= %lld)", (long long)q_len,
                       (long long)kv_len, (long long)s2_attn_kernel_max_kv_len(k));
    return s2_layout_new(ctx, k->pattern, q_len, kv_len, out);
}

s2_status s2_attn_kernel_schedule(s2_ctx *ctx, const s2_attn_kernel *k, int64_t q_len, int64_t kv_len,
                                  s2_schedule **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_kernel_schedule: out is NULL");
    *out = NULL;
    s2_status st = fwd_or_bwd(ctx, k, "s2_attn_kernel_schedule");
    s2_layout *lay = NULL;
    if (st == S2_OK)
        st = layout_of(ctx, k, q_len, kv_len, &lay);
    if (st == S2_OK)
        st = s2_schedule_build(ctx, lay, s2_rt_fwd_tile(s2_rt_main_spec(k)), false, out);
    s2_layout_free(lay);
    return st;
}

s2_status s2_attn_sched_new(s2_ctx *ctx, s2_attn_kernel *k, int64_t q_len, int64_t kv_len, const s2_schedule *fwd,
                            s2_attn_sched **out)
{
    if (!out || !fwd)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_sched_new: %s is NULL", !out ? "out" : "schedule");
    *out = NULL;
    s2_status st = fwd_or_bwd(ctx, k, "s2_attn_sched_new");
    s2_layout *lay = NULL;
    if (st == S2_OK)
        st = layout_of(ctx, k, q_len, kv_len, &lay);
    s2_attn_sched *s = st == S2_OK ? calloc(1, sizeof *s) : NULL;
    if (st == S2_OK && !s)
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    if (st == S2_OK) {
        /* uploaded as the cache uploads: then synchronised, so any stream sees it */
        rt_upload up = {0};
        mtx_lock(&k->lock);
        st = s2_rt_sched_build_given(ctx, k, lay, fwd, &up, &s->slot);
        mtx_unlock(&k->lock);
        s2_rt_up_release(&up);
    }
    s2_layout_free(lay);
    if (st != S2_OK) {
        free(s);
        return st;
    }
    s->k = k, s->q_len = q_len, s->kv_len = kv_len;
    *out = s;
    return S2_OK;
}

void s2_attn_sched_free(s2_attn_sched *s)
{
    if (!s)
        return;
    s2_rt_sched_slot_free(s->k->mod->dev, &s->slot, NULL);
    free(s);
}

/* The schedule is k's and of the launch's shape. */
static s2_status sched_fits(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_sched *s, int64_t q_len,
                            int64_t kv_len)
{
    if (!s)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "schedule is NULL");
    if (s->k != k)
        return s2_fail(ctx, S2_ERR_INVALID, "the schedule was made for kernel %s, not %s", s->k->desc->name,
                       k->desc->name);
    if (s->q_len != q_len || s->kv_len != kv_len)
        return s2_fail(ctx, S2_ERR_SHAPE, "the schedule is of q_len %lld, kv_len %lld; the launch of %lld, %lld",
                       (long long)s->q_len, (long long)s->kv_len, (long long)q_len, (long long)kv_len);
    return S2_OK;
}

s2_status s2_attn_forward_sched(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_fwd_args *a,
                                s2_attn_sched *s)
{
    s2_status st = s2_attn_forward_check(ctx, k, a);
    if (st != S2_OK)
        return st;
    if (a->seqs)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "a caller's schedule takes a uniform batch (seqs is set)");
    if ((st = sched_fits(ctx, k, s, a->q_len, a->kv_len)) != S2_OK)
        return st;
    mtx_lock(&k->lock);   /* the persistent grid's counters */
    st = s2_rt_fwd_launch(ctx, k, stream, a, &s->slot, NULL);
    mtx_unlock(&k->lock);
    return st;
}

s2_status s2_attn_backward_sched(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_bwd_args *a,
                                 s2_attn_sched *s)
{
    s2_status st = s2_attn_backward_check(ctx, k, a);
    if (st == S2_OK && a->seqs)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "a caller's schedule takes a uniform batch (seqs is set)");
    if (st == S2_OK)
        st = sched_fits(ctx, k, s, a->q_len, a->kv_len);
    return st == S2_OK ? s2_rt_bwd_launch(ctx, k, stream, a, &s->slot) : st;
}

s2_status s2_attn_sched_backward_workspace(s2_ctx *ctx, const s2_attn_sched *s, int batch, size_t *bytes)
{
    if (!s || !bytes)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_sched_backward_workspace: %s is NULL", !s ? "schedule" : "bytes");
    if (s->k->desc->spec.kind != S2_KERNEL_BWD || batch < 1)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_attn_sched_backward_workspace: %s",
                       batch < 1 ? "batch below 1" : "not a backward kernel's schedule");
    *bytes = s2_rt_bwd_default_workspace(s->k, &s->slot, batch, (int64_t)batch * s->q_len);
    return S2_OK;
}
