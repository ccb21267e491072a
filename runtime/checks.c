/* Argument checks of the attention entry points: forward, backward, decode
 * and combine (nothing is launched).  Each runs its extent checks (shapes,
 * strides, alignment, the bytes each buffer spans, and through the driver
 * whether its allocation holds them) before its overlap checks, so that an
 * undersized buffer is reported as such, not as the overlap its implied
 * extent makes. */
#include "attn_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- shared --------------------------------------------------------------------- */

typedef struct tensor_desc {
    const char *name;
    uint64_t ptr;
    const int64_t *stride;       /* (batch, seq, head) */
    int64_t ext[3];
} tensor_desc;

static const char *const dim_names[3] = {"batch", "seq", "head"};

/* Strides of dimensions of extent 1 are never multiplied by a non-zero
 * index, so only the others are checked; mult: the elements of 16 bytes
 * (8, or 16 for 8-bit tensors). */
static s2_status check_strides_of(s2_ctx *ctx, const tensor_desc *t, int mult)
{
    for (int i = 0; i < 3; i++) {
        if (t->ext[i] < 2)
            continue;
        if (t->stride[i] < 0)
            return s2_fail(ctx, S2_ERR_STRIDE, "%s: %s stride %lld is negative (not supported)", t->name,
                           dim_names[i], (long long)t->stride[i]);
        if (t->stride[i] % mult != 0)
            return s2_fail(ctx, S2_ERR_ALIGNMENT,
                           "%s: %s stride %lld is not a multiple of %d elements (rows are read as 16-byte vectors)",
                           t->name, dim_names[i], (long long)t->stride[i], mult);
    }
    return S2_OK;
}

static s2_status check_strides(s2_ctx *ctx, const tensor_desc *t) { return check_strides_of(ctx, t, 8); }

/* Distinct output rows must not overlap, or the CTAs writing them race:
 * taken by increasing stride, each dimension must step over everything the
 * smaller ones cover. */
static s2_status check_no_overlap(s2_ctx *ctx, const tensor_desc *t, int64_t head_dim)
{
    int idx[3] = {0, 1, 2};
    for (int i = 1; i < 3; i++)
        for (int j = i; j > 0 && t->stride[idx[j]] < t->stride[idx[j - 1]]; j--) {
            int x = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = x;
        }
    int64_t cover = head_dim;
    for (int i = 0; i < 3; i++) {
        int d = idx[i];
        if (t->ext[d] < 2)
            continue;
        if (t->stride[d] < cover)
            return s2_fail(ctx, S2_ERR_STRIDE,
                           "%s: %s stride %lld makes rows overlap (it must be at least %lld elements)", t->name,
                           dim_names[d], (long long)t->stride[d], (long long)cover);
        cover += t->stride[d] * (t->ext[d] - 1);
    }
    return S2_OK;
}

/* The tensors' pointers are 16-byte aligned (the kernels' 16-byte copies). */
static s2_status check_aligned16(s2_ctx *ctx, const tensor_desc *t, int n)
{
    for (int i = 0; i < n; i++)
        if (t[i].ptr % 16 != 0)
            return s2_fail(ctx, S2_ERR_ALIGNMENT, "%s: 0x%llx is not 16-byte aligned", t[i].name,
                           (unsigned long long)t[i].ptr);
    return S2_OK;
}

/* Whether [a, a + na) and [b, b + nb) share a byte. */
static bool extents_meet(uint64_t a, size_t na, uint64_t b, size_t nb) { return a < b + nb && b < a + na; }

/* o's rows must not overlap, nor o and lse: two outputs written by different threads must not share memory. */
static s2_status check_o_then_lse(s2_ctx *ctx, const tensor_desc *o, int64_t head_dim, size_t o_bytes, uint64_t lse,
                                  size_t lse_bytes)
{
    s2_status st = check_no_overlap(ctx, o, head_dim);
    if (st == S2_OK && lse && extents_meet(o->ptr, o_bytes, lse, lse_bytes))
        st = s2_fail(ctx, S2_ERR_INVALID, "lse overlaps o: its %zu bytes at 0x%llx meet o's %zu at 0x%llx", lse_bytes,
                     (unsigned long long)lse, o_bytes, (unsigned long long)o->ptr);
    return st;
}

/* Bytes from the pointer to the end of the last element (strides >= 0). */
static s2_status tensor_bytes(s2_ctx *ctx, const tensor_desc *t, int64_t head_dim, size_t esize, size_t *out)
{
    int64_t elems = head_dim;
    for (int i = 0; i < 3; i++) {
        int64_t term;
        if (t->ext[i] < 2)
            continue;
        if (__builtin_mul_overflow(t->stride[i], t->ext[i] - 1, &term) ||
            __builtin_add_overflow(elems, term, &elems))
            return s2_fail(ctx, S2_ERR_SHAPE, "%s: the extent implied by the shapes and strides overflows", t->name);
    }
    if (__builtin_mul_overflow((uint64_t)elems, (uint64_t)esize, out) || *out > (uint64_t)INT64_MAX)
        return s2_fail(ctx, S2_ERR_SHAPE, "%s: the extent implied by the shapes and strides overflows", t->name);
    return S2_OK;
}

static const char *max_kv_reason(const s2_attn_kernel *k)
{
    return k->max_kv_len == INT32_MAX              ? "32-bit lengths"
           : k->max_kv_len == k->pattern->max_seq_len ? "the pattern's max_seq_len"
                                                      : "the size of the pattern's explicit mask";
}

/* A variable-length batch: q_len / kv_len are token rows, each sequence lies inside them. */
static s2_status check_varlen(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_fwd_args *a)
{
    const s2_attn_seqs *s = a->seqs;
    if (s->dev != k->mod->dev)
        return s2_fail(ctx, S2_ERR_INVALID, "seqs were made for another device than kernel %s's", k->desc->name);
    if (a->batch != s->n)
        return s2_fail(ctx, S2_ERR_SHAPE, "batch %d, but seqs holds %d sequences", a->batch, s->n);
    if (s->on_device && s->sched_kv_len > k->max_kv_len)
        return s2_fail(ctx, S2_ERR_SEQ_LEN, "the batch's max_kv_len %lld exceeds %lld, the most kernel %s takes (%s)",
                       (long long)s->sched_kv_len, (long long)k->max_kv_len, k->desc->name, max_kv_reason(k));
    if (a->q_len > INT32_MAX || a->kv_len > INT32_MAX)
        return s2_fail(ctx, S2_ERR_SHAPE, "%lld / %lld token rows do not fit 32 bits", (long long)a->q_len,
                       (long long)a->kv_len);
    for (int i = 0; s->host && i < s->n; i++) {
        const s2_attn_seq *q = &s->host[i];
        if ((int64_t)q->q_start + q->q_len > a->q_len || (int64_t)q->k_start + q->kv_len > a->kv_len)
            return s2_fail(ctx, S2_ERR_SHAPE,
                           "sequence %d (q rows %d+%d, k rows %d+%d) runs past the %lld q / %lld k token rows", i,
                           q->q_start, q->q_len, q->k_start, q->kv_len, (long long)a->q_len, (long long)a->kv_len);
        if (q->q_len > 0 && q->kv_len > k->max_kv_len)
            return s2_fail(ctx, S2_ERR_SEQ_LEN, "sequence %d: kv_len %d exceeds %lld, the most kernel %s takes (%s)", i,
                           q->kv_len, (long long)k->max_kv_len, k->desc->name, max_kv_reason(k));
    }
    if (!isfinite(a->scale))
        return s2_fail(ctx, S2_ERR_INVALID, "scale %g is not finite", (double)a->scale);
    return S2_OK;
}

/* The kernel was generated for these: dtype, head_dim, and the pattern's
 * heads (heads < 0: not checked); batch within the grid's z limit. */
static s2_status check_kernel_shape(s2_ctx *ctx, const s2_attn_kernel *k, s2_dtype dtype, int head_dim, int heads,
                                    int kv_heads, int batch)
{
    const s2_pattern *p = k->pattern;
    const s2_kernel_spec *sp = &k->desc->spec;
    if (dtype != sp->dtype)
        return s2_fail(ctx, S2_ERR_DTYPE, "dtype %s, but kernel %s is %s", s2_dtype_name(dtype), k->desc->name,
                       s2_dtype_name(sp->dtype));
    if (head_dim != sp->head_dim)
        return s2_fail(ctx, S2_ERR_HEAD_DIM, "head_dim %d, but kernel %s is for head_dim %d", head_dim,
                       k->desc->name, sp->head_dim);
    if (heads >= 0 && (heads != p->heads || kv_heads != p->kv_heads))
        return s2_fail(ctx, S2_ERR_HEADS, "%d heads / %d kv heads, but pattern '%s' has %d / %d", heads, kv_heads,
                       p->name, p->heads, p->kv_heads);
    if (batch < 1 || batch > 65535)
        return s2_fail(ctx, S2_ERR_SHAPE, "batch %d (1..65535)", batch);
    return S2_OK;
}

s2_status s2_rt_check_sizes(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_fwd_args *a)
{
    s2_status st = check_kernel_shape(ctx, k, a->dtype, a->head_dim, a->heads, a->kv_heads, a->batch);
    if (st != S2_OK)
        return st;
    if (a->q_len < 1 || a->kv_len < 1)
        return s2_fail(ctx, S2_ERR_SHAPE, "q_len %lld and kv_len %lld must be >= 1", (long long)a->q_len,
                       (long long)a->kv_len);
    if (a->seqs)
        return check_varlen(ctx, k, a);
    if (a->q_len > a->kv_len)
        return s2_fail(ctx, S2_ERR_SHAPE, "q_len %lld > kv_len %lld (queries are the last q_len of the keys)",
                       (long long)a->q_len, (long long)a->kv_len);
    if (a->kv_len > k->max_kv_len)
        return s2_fail(ctx, S2_ERR_SEQ_LEN, "kv_len %lld exceeds %lld, the most kernel %s takes (%s)",
                       (long long)a->kv_len, (long long)k->max_kv_len, k->desc->name, max_kv_reason(k));
    if (!isfinite(a->scale))
        return s2_fail(ctx, S2_ERR_INVALID, "scale %g is not finite", (double)a->scale);
    return S2_OK;
}

/* ---- forward -------------------------------------------------------------------- */

static void describe_tensors(const s2_attn_fwd_args *a, tensor_desc t[4])
{
    int64_t nb = tensor_batch(a);
    t[0] = (tensor_desc){"q", a->q, a->q_stride, {nb, a->q_len, a->heads}};
    t[1] = (tensor_desc){"k", a->k, a->k_stride, {nb, a->kv_len, a->kv_heads}};
    t[2] = (tensor_desc){"v", a->v, a->v_stride, {nb, a->kv_len, a->kv_heads}};
    t[3] = (tensor_desc){"o", a->o, a->o_stride, {nb, a->q_len, a->heads}};
}

/* Whether k is an e4m3 kernel (ABI fwd_tma_fp8: o bf16, descales). */
static bool fwd_fp8(const s2_attn_kernel *k)
{
    return k->rec[S2_ROLE_FWD] && k->rec[S2_ROLE_FWD]->abi == S2_ABI_FWD_TMA_FP8;
}

/* e4m3 kernels run on sm_90a only (wgmma on fp8 operands); descales are
 * theirs alone, 4-byte aligned fp32 [batch][kv_heads]. */
static s2_status fwd_check_fp8(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_fwd_args *a)
{
    const uint64_t ds[3] = {a->q_descale, a->k_descale, a->v_descale};
    static const char *const names[3] = {"q_descale", "k_descale", "v_descale"};
    bool fp8 = fwd_fp8(k);
    if (fp8 != (a->dtype == S2_DTYPE_E4M3))
        return s2_fail(ctx, S2_ERR_INVALID, "kernel %s: dtype %s on ABI %s (a manifest the runtime does not take)",
                       k->desc->name, s2_dtype_name(a->dtype), fp8 ? "fwd_tma_fp8" : "of 16-bit kernels");
    for (int i = 0; i < 3; i++)
        if (ds[i] && !fp8)
            return s2_fail(ctx, S2_ERR_INVALID, "%s: only e4m3 kernels take descales (kernel %s is %s)", names[i],
                           k->desc->name, s2_dtype_name(a->dtype));
        else if (ds[i] % 4 != 0)
            return s2_fail(ctx, S2_ERR_ALIGNMENT, "%s: 0x%llx is not 4-byte aligned", names[i],
                           (unsigned long long)ds[i]);
    const s2_device_info *in = s2_device_get_info(k->mod->dev);
    if (fp8 && (k->desc->spec.arch != S2_ARCH_SM90A || !in || in->cc_major != 9 || in->cc_minor != 0))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "kernel %s: e4m3 attention runs on sm_90a only (this device is sm_%d%d)",
                       k->desc->name, in ? in->cc_major : 0, in ? in->cc_minor : 0);
    return S2_OK;
}

/* The extents (no driver); *bytes gets each tensor's. */
static s2_status fwd_check_extents(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_fwd_args *a, size_t bytes[5])
{
    if (!k || !a)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_forward: %s is NULL", !k ? "kernel" : "args");
    tensor_desc t[4];
    describe_tensors(a, t);
    for (int i = 0; i < 4; i++)
        if (!t[i].ptr)
            return s2_fail(ctx, S2_ERR_NULL_ARG, "%s is a null pointer", t[i].name);
    s2_status st = s2_rt_check_sizes(ctx, k, a);
    if (st == S2_OK)
        st = fwd_check_fp8(ctx, k, a);
    /* fp8: q, k, v of bytes (TMA strides: 16 bytes), o bf16 */
    bool fp8 = fwd_fp8(k);
    for (int i = 0; i < 4 && st == S2_OK; i++)
        st = check_strides_of(ctx, &t[i], fp8 && i < 3 ? 16 : 8);
    if (st != S2_OK)
        return st;
    if ((st = check_aligned16(ctx, t, 4)) != S2_OK)
        return st;
    if (a->lse % 4 != 0)
        return s2_fail(ctx, S2_ERR_ALIGNMENT, "lse: 0x%llx is not 4-byte aligned", (unsigned long long)a->lse);
    size_t esize = s2_dtype_size(a->dtype);
    for (int i = 0; i < 4; i++)
        if ((st = tensor_bytes(ctx, &t[i], a->head_dim, fp8 && i == 3 ? s2_dtype_size(S2_DTYPE_BF16) : esize,
                               &bytes[i])) != S2_OK)
            return st;
    bytes[4] = (size_t)tensor_batch(a) * (size_t)a->heads * (size_t)a->q_len * sizeof(float);
    return S2_OK;
}

/* o's rows, and o and lse. */
static s2_status fwd_check_overlaps(s2_ctx *ctx, const s2_attn_fwd_args *a, const size_t bytes[5])
{
    tensor_desc t[4];
    describe_tensors(a, t);
    return check_o_then_lse(ctx, &t[3], a->head_dim, bytes[3], a->lse, bytes[4]);
}

s2_status s2_rt_fwd_check_host(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_fwd_args *a, size_t bytes[5])
{
    s2_status st = fwd_check_extents(ctx, k, a, bytes);
    return st == S2_OK ? fwd_check_overlaps(ctx, a, bytes) : st;
}

static s2_status check_device_side(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_fwd_args *a,
                                   const size_t bytes[5])
{
    tensor_desc t[4];
    describe_tensors(a, t);
    for (int i = 0; i < 4; i++) {
        s2_status st = s2_check_device_ptr(ctx, k->mod->dev, t[i].ptr, bytes[i], 16, t[i].name);
        if (st != S2_OK)
            return st;
    }
    const uint64_t ds[3] = {a->q_descale, a->k_descale, a->v_descale};
    static const char *const names[3] = {"q_descale", "k_descale", "v_descale"};
    for (int i = 0; i < 3; i++) {
        s2_status st = ds[i] ? s2_check_device_ptr(ctx, k->mod->dev, ds[i], (size_t)a->batch * (size_t)a->kv_heads * 4,
                                                   4, names[i])
                             : S2_OK;
        if (st != S2_OK)
            return st;
    }
    return a->lse ? s2_check_device_ptr(ctx, k->mod->dev, a->lse, bytes[4], 4, "lse") : S2_OK;
}

s2_status s2_attn_forward_check(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_fwd_args *a)
{
    if (k && k->desc->spec.kind != S2_KERNEL_FWD)
        return s2_fail(ctx, S2_ERR_INVALID, "kernel %s is not a forward kernel", k->desc->name);
    size_t bytes[5];
    s2_status st = fwd_check_extents(ctx, k, a, bytes);
    if (st == S2_OK)
        st = check_device_side(ctx, k, a, bytes);
    return st == S2_OK ? fwd_check_overlaps(ctx, a, bytes) : st;
}

/* ---- backward ------------------------------------------------------------------- */

enum { BWD_TENSORS = 8 };

static void describe_bwd(const s2_attn_bwd_args *a, tensor_desc t[BWD_TENSORS])
{
    int64_t nb = bwd_tensor_batch(a);
    int64_t qe[3] = {nb, a->q_len, a->heads}, ke[3] = {nb, a->kv_len, a->kv_heads};
    const char *names[BWD_TENSORS] = {"q", "k", "v", "o", "d_o", "dq", "dk", "dv"};
    uint64_t ptrs[BWD_TENSORS] = {a->q, a->k, a->v, a->o, a->d_o, a->dq, a->dk, a->dv};
    const int64_t *strides[BWD_TENSORS] = {a->q_stride, a->k_stride, a->v_stride, a->o_stride,
                                           a->do_stride, a->dq_stride, a->dk_stride, a->dv_stride};
    for (int i = 0; i < BWD_TENSORS; i++) {
        bool kv = i == 1 || i == 2 || i == 6 || i == 7;
        t[i] = (tensor_desc){names[i], ptrs[i], strides[i], {0, 0, 0}};
        memcpy(t[i].ext, kv ? ke : qe, sizeof qe);
    }
}

/* The workspace's bytes: workspace_bytes, or (0) the least it may hold. */
static size_t bwd_workspace_extent(const s2_attn_bwd_args *a)
{
    return a->workspace_bytes ? a->workspace_bytes
                              : s2_attn_bwd_workspace_bytes((int)bwd_tensor_batch(a), a->heads, a->q_len);
}

/* dk and dv rows are written by their sequence's CTAs: no two sequences with
 * keys may share a key row (host records; device ones are trusted). */
static int cmp_k_start(const void *a, const void *b)
{
    const s2_attn_seq *x = *(const s2_attn_seq *const *)a, *y = *(const s2_attn_seq *const *)b;
    return (x->k_start > y->k_start) - (x->k_start < y->k_start);
}

static s2_status check_key_rows(s2_ctx *ctx, const s2_attn_seqs *s)
{
    if (!s->host)
        return S2_OK;
    const s2_attn_seq **order = malloc((size_t)s->n * sizeof *order);
    if (!order)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    int m = 0;
    for (int i = 0; i < s->n; i++)
        if (s->host[i].kv_len > 0)
            order[m++] = &s->host[i];
    qsort(order, (size_t)m, sizeof *order, cmp_k_start);
    s2_status st = S2_OK;
    for (int i = 1; i < m && st == S2_OK; i++)
        if ((int64_t)order[i - 1]->k_start + order[i - 1]->kv_len > order[i]->k_start)
            st = s2_fail(ctx, S2_ERR_INVALID,
                         "backward: sequences %d and %d share key row %d (their dk, dv rows would race)",
                         (int)(order[i - 1] - s->host), (int)(order[i] - s->host), order[i]->k_start);
    free(order);
    return st;
}

/* The extents (no driver); *bytes gets each tensor's. */
static s2_status bwd_check_extents(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_bwd_args *a,
                                   size_t bytes[BWD_TENSORS])
{
    if (!k || !a)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_backward: %s is NULL", !k ? "kernel" : "args");
    if (k->desc->spec.kind != S2_KERNEL_BWD)
        return s2_fail(ctx, S2_ERR_INVALID, "kernel %s is not a backward kernel", k->desc->name);
    tensor_desc t[BWD_TENSORS];
    describe_bwd(a, t);
    for (int i = 0; i < BWD_TENSORS; i++)
        if (!t[i].ptr)
            return s2_fail(ctx, S2_ERR_NULL_ARG, "%s is a null pointer", t[i].name);
    if (!a->lse || !a->workspace)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "%s is a null pointer", !a->lse ? "lse" : "workspace");
    /* the size checks are the forward's */
    s2_attn_fwd_args f = {.batch = a->batch, .q_len = a->q_len, .kv_len = a->kv_len, .heads = a->heads,
                          .kv_heads = a->kv_heads, .head_dim = a->head_dim, .dtype = a->dtype, .scale = a->scale,
                          .seqs = a->seqs};
    s2_status st = s2_rt_check_sizes(ctx, k, &f);
    if (st == S2_OK && a->seqs)
        st = check_key_rows(ctx, a->seqs);
    for (int i = 0; i < BWD_TENSORS && st == S2_OK; i++)
        st = check_strides(ctx, &t[i]);
    if (st != S2_OK)
        return st;
    if ((st = check_aligned16(ctx, t, BWD_TENSORS)) != S2_OK)
        return st;
    size_t plain = s2_attn_bwd_workspace_bytes((int)bwd_tensor_batch(a), a->heads, a->q_len);
    if (a->workspace_bytes && a->workspace_bytes < plain)
        return s2_fail(ctx, S2_ERR_SHAPE, "workspace_bytes %zu is below s2_attn_bwd_workspace_bytes() = %zu",
                       a->workspace_bytes, plain);
    if (a->lse % 4 != 0 || a->d_lse % 4 != 0 || a->workspace % 16 != 0)
        return s2_fail(ctx, S2_ERR_ALIGNMENT, "%s is not %d-byte aligned",
                       a->lse % 4 ? "lse" : a->d_lse % 4 ? "d_lse" : "workspace", a->workspace % 16 ? 16 : 4);
    size_t esize = s2_dtype_size(a->dtype);
    for (int i = 0; i < BWD_TENSORS; i++)
        if ((st = tensor_bytes(ctx, &t[i], a->head_dim, esize, &bytes[i])) != S2_OK)
            return st;
    return S2_OK;
}

/* The outputs (dq, dk, dv: t[5..7]) have no overlapping rows, are distinct
 * buffers or distinct views (packed dq/dk/dv layouts interleave their
 * extents), and none shares the workspace, which the kernels write too. */
static s2_status bwd_check_overlaps(s2_ctx *ctx, const s2_attn_bwd_args *a, const size_t bytes[BWD_TENSORS])
{
    tensor_desc t[BWD_TENSORS];
    describe_bwd(a, t);
    for (int i = 5; i < BWD_TENSORS; i++) {
        s2_status st = check_no_overlap(ctx, &t[i], a->head_dim);
        if (st != S2_OK)
            return st;
    }
    size_t ws = bwd_workspace_extent(a);
    for (int i = 5; i < BWD_TENSORS; i++) {
        for (int j = i + 1; j < BWD_TENSORS; j++)
            if (t[i].ptr == t[j].ptr)
                return s2_fail(ctx, S2_ERR_INVALID, "%s and %s are the same buffer (0x%llx)", t[i].name, t[j].name,
                               (unsigned long long)t[i].ptr);
        if (extents_meet(a->workspace, ws, t[i].ptr, bytes[i]))
            return s2_fail(ctx, S2_ERR_INVALID, "the workspace overlaps %s", t[i].name);
    }
    return S2_OK;
}

s2_status s2_rt_bwd_check_host(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_bwd_args *a)
{
    size_t bytes[BWD_TENSORS];
    s2_status st = bwd_check_extents(ctx, k, a, bytes);
    return st == S2_OK ? bwd_check_overlaps(ctx, a, bytes) : st;
}

s2_status s2_attn_backward_check(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_bwd_args *a)
{
    size_t bytes[BWD_TENSORS];
    s2_status st = bwd_check_extents(ctx, k, a, bytes);
    if (st != S2_OK)
        return st;
    tensor_desc t[BWD_TENSORS];
    describe_bwd(a, t);
    for (int i = 0; i < BWD_TENSORS && st == S2_OK; i++)
        st = s2_check_device_ptr(ctx, k->mod->dev, t[i].ptr, bytes[i], 16, t[i].name);
    size_t rows = (size_t)bwd_tensor_batch(a) * (size_t)a->heads * (size_t)a->q_len * sizeof(float);
    if (st == S2_OK)
        st = s2_check_device_ptr(ctx, k->mod->dev, a->lse, rows, 4, "lse");
    if (st == S2_OK && a->d_lse)
        st = s2_check_device_ptr(ctx, k->mod->dev, a->d_lse, rows, 4, "d_lse");
    if (st == S2_OK)
        st = s2_check_device_ptr(ctx, k->mod->dev, a->workspace, bwd_workspace_extent(a), 16, "workspace");
    return st == S2_OK ? bwd_check_overlaps(ctx, a, bytes) : st;
}

/* ---- decode and combine --------------------------------------------------------- */

static s2_status dec_check_table(s2_ctx *ctx, const s2_attn_decode_args *a, size_t *bytes)
{
    int64_t tb = a->table_stride[0], th = a->table_stride[1];
    if (tb < 0 || th < 0)
        return s2_fail(ctx, S2_ERR_STRIDE, "block_table: negative stride (%lld, %lld)", (long long)tb, (long long)th);
    if (th != 0 && th < a->max_pages_per_seq)
        return s2_fail(ctx, S2_ERR_STRIDE, "block_table: kv-head stride %lld below max_pages_per_seq %lld (rows overlap)",
                       (long long)th, (long long)a->max_pages_per_seq);
    int64_t row = th ? th * (a->kv_heads - 1) + a->max_pages_per_seq : a->max_pages_per_seq;
    if (a->batch > 1 && tb < row)
        return s2_fail(ctx, S2_ERR_STRIDE, "block_table: batch stride %lld below the %lld entries of a sequence",
                       (long long)tb, (long long)row);
    int64_t n = tb * (a->batch - 1) + row;
    *bytes = (size_t)n * sizeof(int32_t);
    return S2_OK;
}

s2_status s2_rt_dec_check_shape(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_decode_args *a)
{
    const s2_pattern *p = k->pattern;
    s2_status st = check_kernel_shape(ctx, k, a->dtype, a->head_dim, a->heads, a->kv_heads, a->batch);
    if (st != S2_OK)
        return st;
    int group = p->heads / p->kv_heads;
    if (a->n_new < 1 || a->n_new * group > 16 || a->n_new > p->block_size)
        return s2_fail(ctx, S2_ERR_SHAPE, "n_new %d: 1 .. min(16 / %d heads per kv head, block size %d)", a->n_new,
                       group, p->block_size);
    if (a->page_size < 16 || a->page_size % 16 != 0)
        return s2_fail(ctx, S2_ERR_SHAPE, "page_size %d is not a positive multiple of 16", a->page_size);
    if (a->num_pages < 1 || a->num_pages > INT32_MAX || a->max_pages_per_seq < 1)
        return s2_fail(ctx, S2_ERR_SHAPE, "num_pages %lld (1..2^31-1) and max_pages_per_seq %lld (>= 1)",
                       (long long)a->num_pages, (long long)a->max_pages_per_seq);
    if (a->max_seq_len < a->n_new)
        return s2_fail(ctx, S2_ERR_SHAPE, "max_seq_len %lld below n_new %d", (long long)a->max_seq_len, a->n_new);
    if (a->max_seq_len > k->max_kv_len)
        return s2_fail(ctx, S2_ERR_SEQ_LEN, "max_seq_len %lld exceeds %lld, the most kernel %s takes",
                       (long long)a->max_seq_len, (long long)k->max_kv_len, k->desc->name);
    if (s2_cdiv(a->max_seq_len, a->page_size) > a->max_pages_per_seq)
        return s2_fail(ctx, S2_ERR_SHAPE, "max_seq_len %lld needs %lld pages of %d, table rows hold %lld",
                       (long long)a->max_seq_len, (long long)s2_cdiv(a->max_seq_len, a->page_size), a->page_size,
                       (long long)a->max_pages_per_seq);
    if (a->splits < 0 || a->splits > DEC_MAX_SPLITS)
        return s2_fail(ctx, S2_ERR_INVALID, "splits %d (0 = heuristic, at most %d)", a->splits, DEC_MAX_SPLITS);
    /* the pages' dtype is the kernel's (fp8 pages are a compile-time choice: kv_dtype) */
    s2_dtype kv = a->kv_dtype ? a->kv_dtype : a->dtype, kkv = k->desc->spec.kv_dtype ? k->desc->spec.kv_dtype : a->dtype;
    if (kv != kkv)
        return s2_fail(ctx, S2_ERR_DTYPE, "k_pages / v_pages are %s, but kernel %s reads %s pages (compile it with "
                       "kv_dtype %s)", s2_dtype_name(kv), k->desc->name, s2_dtype_name(kkv), s2_dtype_name(kv));
    if (!k->desc->spec.kv_dtype && (a->k_scale || a->v_scale))
        return s2_fail(ctx, S2_ERR_INVALID, "k_scale / v_scale are given, but kernel %s reads %s pages, which "
                       "have no scales (fp8 pages: a kernel compiled with kv_dtype e4m3)", k->desc->name,
                       s2_dtype_name(kv));
    if (!isfinite(a->scale))
        return s2_fail(ctx, S2_ERR_INVALID, "scale %g is not finite", (double)a->scale);
    return S2_OK;
}

s2_status s2_rt_dec_check_extents(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_decode_args *a,
                                  size_t bytes[7])
{
    if (!k || !a)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_decode: %s is NULL", !k ? "kernel" : "args");
    if (k->desc->spec.kind != S2_KERNEL_DECODE)
        return s2_fail(ctx, S2_ERR_INVALID, "kernel %s is not a decode kernel", k->desc->name);
    tensor_desc t[4] = {
        {"q", a->q, a->q_stride, {a->batch, a->n_new, a->heads}},
        {"o", a->o, a->o_stride, {a->batch, a->n_new, a->heads}},
        {"k_pages", a->k_pages, a->k_stride, {a->num_pages, a->page_size, a->kv_heads}},
        {"v_pages", a->v_pages, a->v_stride, {a->num_pages, a->page_size, a->kv_heads}},
    };
    for (int i = 0; i < 4; i++)
        if (!t[i].ptr)
            return s2_fail(ctx, S2_ERR_NULL_ARG, "%s is a null pointer", t[i].name);
    if (!a->block_table || !a->seq_lens)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "%s is a null pointer", !a->block_table ? "block_table" : "seq_lens");
    s2_status st = s2_rt_dec_check_shape(ctx, k, a);
    for (int i = 0; i < 4 && st == S2_OK; i++)
        st = check_strides(ctx, &t[i]);
    if (st == S2_OK)
        st = dec_check_table(ctx, a, &bytes[4]);
    if (st != S2_OK)
        return st;
    if ((st = check_aligned16(ctx, t, 4)) != S2_OK)
        return st;
    if (a->lse % 4 || a->block_table % 4 || a->seq_lens % 4 || a->workspace % 16 || a->k_scale % 4 ||
        a->v_scale % 4)
        return s2_fail(ctx, S2_ERR_ALIGNMENT,
                       "lse, block_table, seq_lens, k_scale, v_scale must be 4-byte aligned, workspace 16-byte");
    size_t es = s2_dtype_size(a->dtype), kv_es = s2_dtype_size(a->kv_dtype ? a->kv_dtype : a->dtype);
    /* fp8 rows are read as 16-byte vectors of 16 elements */
    for (int i = 2; i < 4 && kv_es == 1; i++)
        for (int d = 0; d < 3; d++)
            if (t[i].ext[d] >= 2 && t[i].stride[d] % 16 != 0)
                return s2_fail(ctx, S2_ERR_ALIGNMENT, "%s: %s stride %lld is not a multiple of 16 elements (fp8 rows "
                               "are read as 16-byte vectors)", t[i].name, dim_names[d], (long long)t[i].stride[d]);
    for (int i = 0; i < 4; i++)
        if ((st = tensor_bytes(ctx, &t[i], a->head_dim, i < 2 ? es : kv_es, &bytes[i])) != S2_OK)
            return st;
    bytes[5] = (size_t)a->batch * sizeof(int32_t);
    bytes[6] = (size_t)a->batch * (size_t)a->heads * (size_t)a->n_new * sizeof(float);
    return S2_OK;
}

s2_status s2_rt_dec_check_overlaps(s2_ctx *ctx, const s2_attn_decode_args *a, const size_t bytes[7])
{
    tensor_desc o = {"o", a->o, a->o_stride, {a->batch, a->n_new, a->heads}};
    return check_o_then_lse(ctx, &o, a->head_dim, bytes[1], a->lse, bytes[6]);
}

s2_status s2_rt_dec_check_host(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_decode_args *a, size_t bytes[7])
{
    s2_status st = s2_rt_dec_check_extents(ctx, k, a, bytes);
    return st == S2_OK ? s2_rt_dec_check_overlaps(ctx, a, bytes) : st;
}

s2_status s2_rt_dec_check_device(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_decode_args *a,
                                 const size_t bytes[7], size_t ws_bytes)
{
    const char *names[7] = {"q", "o", "k_pages", "v_pages", "block_table", "seq_lens", "lse"};
    s2_devptr ptrs[7] = {a->q, a->o, a->k_pages, a->v_pages, a->block_table, a->seq_lens, a->lse};
    for (int i = 0; i < 7; i++) {
        if (!ptrs[i])
            continue;
        s2_status st = s2_check_device_ptr(ctx, k->mod->dev, ptrs[i], bytes[i], i < 4 ? 16 : 4, names[i]);
        if (st != S2_OK)
            return st;
    }
    const char *snames[2] = {"k_scale", "v_scale"};
    s2_devptr scales[2] = {a->k_scale, a->v_scale};
    for (int i = 0; i < 2; i++)
        if (scales[i]) {
            s2_status st = s2_check_device_ptr(ctx, k->mod->dev, scales[i], (size_t)a->kv_heads * sizeof(float), 4,
                                               snames[i]);
            if (st != S2_OK)
                return st;
        }
    if (ws_bytes == 0)
        return S2_OK;
    if (!a->workspace)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "workspace is null, but %zu bytes are needed (s2_attn_decode_workspace)",
                       ws_bytes);
    return s2_check_device_ptr(ctx, k->mod->dev, a->workspace, ws_bytes, 16, "workspace");
}

/* The extents (no driver): an input's o, o's, an lse's. */
static s2_status combine_check_extents(s2_ctx *ctx, const s2_attn_kernel *k, const s2_combine_args *a, size_t bytes[3])
{
    if (!k || !a)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_combine: %s is NULL", !k ? "kernel" : "args");
    if (!k->fns[S2_ROLE_COMBINE])
        return s2_fail(ctx, k->desc->spec.kind == S2_KERNEL_FWD ? S2_ERR_UNSUPPORTED : S2_ERR_INVALID,
                       "kernel %s holds no NAME_combine (decode modules do, and forward modules from s2c 0.3: "
                       "compile it again)", k->desc->name);
    s2_status st0 = check_kernel_shape(ctx, k, a->dtype, a->head_dim, -1, -1, 1);
    if (st0 != S2_OK)
        return st0;
    if (a->n < 1 || a->n > S2_COMBINE_MAX_INPUTS)
        return s2_fail(ctx, S2_ERR_SHAPE, "n %d inputs (1..%d)", a->n, S2_COMBINE_MAX_INPUTS);
    if (a->batch < 1 || a->heads < 1 || a->seq < 1 || (int64_t)a->batch * a->seq * a->heads > INT32_MAX)
        return s2_fail(ctx, S2_ERR_SHAPE, "batch %d, seq %lld, heads %d (each >= 1, rows below 2^31)", a->batch,
                       (long long)a->seq, a->heads);
    tensor_desc in = {"o_in", 1, a->in_stride, {a->batch, a->seq, a->heads}};
    tensor_desc out = {"o", a->o, a->o_stride, {a->batch, a->seq, a->heads}};
    if (!a->o)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "o is a null pointer");
    s2_status st = check_strides(ctx, &in);
    if (st == S2_OK)
        st = check_strides(ctx, &out);
    if (st != S2_OK)
        return st;
    size_t es = s2_dtype_size(a->dtype), ib, ob;
    if ((st = tensor_bytes(ctx, &in, a->head_dim, es, &ib)) != S2_OK || (st = tensor_bytes(ctx, &out, a->head_dim, es, &ob)) != S2_OK)
        return st;
    size_t lb = (size_t)a->batch * (size_t)a->heads * (size_t)a->seq * sizeof(float);
    if (a->o % 16 || a->lse % 4 || a->sinks % 4)
        return s2_fail(ctx, S2_ERR_ALIGNMENT, "o must be 16-byte aligned, lse and sinks 4-byte");
    for (int i = 0; i < a->n; i++) {
        if (!a->o_in[i] || !a->lse_in[i])
            return s2_fail(ctx, S2_ERR_NULL_ARG, "input %d: null %s", i, !a->o_in[i] ? "o_in" : "lse_in");
        if (a->o_in[i] % 16 || a->lse_in[i] % 4)
            return s2_fail(ctx, S2_ERR_ALIGNMENT, "input %d: o_in must be 16-byte aligned, lse_in 4-byte", i);
    }
    bytes[0] = ib, bytes[1] = ob, bytes[2] = lb;
    return S2_OK;
}

/* o's rows, and o and lse. */
static s2_status combine_check_overlaps(s2_ctx *ctx, const s2_combine_args *a, const size_t bytes[3])
{
    tensor_desc out = {"o", a->o, a->o_stride, {a->batch, a->seq, a->heads}};
    s2_status st = check_o_then_lse(ctx, &out, a->head_dim, bytes[1], a->lse, bytes[2]);
    size_t sb = (size_t)a->heads * sizeof(float);
    if (st == S2_OK && a->sinks &&
        (extents_meet(a->sinks, sb, a->o, bytes[1]) || (a->lse && extents_meet(a->sinks, sb, a->lse, bytes[2]))))
        st = s2_fail(ctx, S2_ERR_INVALID, "sinks overlap an output: its %zu bytes at 0x%llx", sb,
                     (unsigned long long)a->sinks);
    return st;
}

s2_status s2_rt_combine_check_host(s2_ctx *ctx, const s2_attn_kernel *k, const s2_combine_args *a, size_t bytes[3])
{
    s2_status st = combine_check_extents(ctx, k, a, bytes);
    return st == S2_OK ? combine_check_overlaps(ctx, a, bytes) : st;
}

s2_status s2_combine_check(s2_ctx *ctx, const s2_attn_kernel *k, const s2_combine_args *a)
{
    size_t bytes[3];
    s2_status st = combine_check_extents(ctx, k, a, bytes);
    if (st != S2_OK)
        return st;
    size_t ib = bytes[0], ob = bytes[1], lb = bytes[2];
    for (int i = 0; i < a->n; i++) {
        char name[32];
        snprintf(name, sizeof name, "o_in[%d]", i);
        if ((st = s2_check_device_ptr(ctx, k->mod->dev, a->o_in[i], ib, 16, name)) != S2_OK)
            return st;
        snprintf(name, sizeof name, "lse_in[%d]", i);
        if ((st = s2_check_device_ptr(ctx, k->mod->dev, a->lse_in[i], lb, 4, name)) != S2_OK)
            return st;
    }
    if ((st = s2_check_device_ptr(ctx, k->mod->dev, a->o, ob, 16, "o")) != S2_OK)
        return st;
    if (a->sinks && (st = s2_check_device_ptr(ctx, k->mod->dev, a->sinks, (size_t)a->heads * sizeof(float), 4, "sinks")) != S2_OK)
        return st;
    if (a->lse && (st = s2_check_device_ptr(ctx, k->mod->dev, a->lse, lb, 4, "lse")) != S2_OK)
        return st;
    return combine_check_overlaps(ctx, a, bytes);
}


/* ---- rows (s2_rows) ---------------------------------------------------------------- */

s2_status s2_rt_rows_check(s2_ctx *ctx, const s2_attn_kernel *k, const s2_rows_args *a)
{
    if (!k || !a)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_rows: %s is NULL", !k ? "kernel" : "args");
    if (!k->fns[S2_ROLE_ROWS])
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "kernel %s holds no NAME_rows (16-bit forward and backward modules "
                       "do from s2c 0.3: compile it again)", k->desc->name);
    s2_status st = check_kernel_shape(ctx, k, a->dtype, a->head_dim, -1, -1, 1);
    if (st != S2_OK)
        return st;
    if (a->n_src < 1 || a->n_src > S2_ROWS_MAX_SOURCES || a->n_runs < 0 || a->n_runs > INT32_MAX)
        return s2_fail(ctx, S2_ERR_SHAPE, "s2_rows: n_src %d (1..%d), n_runs %lld (0..2^31-1)", a->n_src,
                       S2_ROWS_MAX_SOURCES, (long long)a->n_runs);
    if (a->n_runs == 0)
        return S2_OK;
    int64_t dst_rows;
    if (a->src_rows < 0 || a->dst_shape[0] < 1 || a->dst_shape[1] < 1 || a->dst_shape[2] < 1 ||
        __builtin_mul_overflow(a->dst_shape[0], a->dst_shape[1], &dst_rows) ||
        __builtin_mul_overflow(dst_rows, a->dst_shape[2], &dst_rows))
        return s2_fail(ctx, S2_ERR_SHAPE, "s2_rows: src_rows %lld, dst (%lld, %lld, %lld) (each >= 1)",
                       (long long)a->src_rows, (long long)a->dst_shape[0], (long long)a->dst_shape[1],
                       (long long)a->dst_shape[2]);
    if (!a->table || !a->src || !a->dst)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_rows: %s is a null pointer", !a->table ? "table" : !a->src ? "src" : "dst");
    if (a->table % 8 || a->src % 16 || a->dst % 16)
        return s2_fail(ctx, S2_ERR_ALIGNMENT, "s2_rows: table must be 8-byte aligned, src and dst 16-byte");
    tensor_desc out = {"dst", a->dst, a->dst_stride, {a->dst_shape[0], a->dst_shape[1], a->dst_shape[2]}};
    size_t es = s2_dtype_size(a->dtype), db, sb, tb = (size_t)a->n_runs * (size_t)(2 + a->n_src) * sizeof(int64_t);
    if ((st = check_strides(ctx, &out)) != S2_OK || (st = tensor_bytes(ctx, &out, a->head_dim, es, &db)) != S2_OK ||
        (st = check_no_overlap(ctx, &out, a->head_dim)) != S2_OK)
        return st;
    if (__builtin_mul_overflow((uint64_t)a->src_rows, (uint64_t)a->head_dim * es, &sb))
        return s2_fail(ctx, S2_ERR_SHAPE, "s2_rows: src's %lld rows overflow", (long long)a->src_rows);
    if (extents_meet(a->dst, db, a->src, sb) || extents_meet(a->dst, db, a->table, tb))
        return s2_fail(ctx, S2_ERR_INVALID, "s2_rows: dst's %zu bytes at 0x%llx meet %s", db, (unsigned long long)a->dst,
                       extents_meet(a->dst, db, a->src, sb) ? "src" : "the table");
    if ((st = s2_check_device_ptr(ctx, k->mod->dev, a->table, tb, 8, "table")) == S2_OK && sb > 0)
        st = s2_check_device_ptr(ctx, k->mod->dev, a->src, sb, 16, "src");
    return st == S2_OK ? s2_check_device_ptr(ctx, k->mod->dev, a->dst, db, 16, "dst") : st;
}
