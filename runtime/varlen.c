/* Variable-length batches: the sequences of a packed batch, checked and
 * uploaded once (s2c/attn_runtime.h). */
#include "attn_internal.h"
#include "params.h"

#include <stdlib.h>
#include <string.h>

static int cmp_q_start(const void *a, const void *b)
{
    const s2_attn_seq *x = *(const s2_attn_seq *const *)a, *y = *(const s2_attn_seq *const *)b;
    return (x->q_start > y->q_start) - (x->q_start < y->q_start);
}

static s2_status check_seq_list(s2_ctx *ctx, const s2_attn_seq *seqs, int n)
{
    for (int i = 0; i < n; i++) {
        const s2_attn_seq *q = &seqs[i];
        if (q->q_start < 0 || q->k_start < 0 || q->q_len < 0 || q->kv_len < 0)
            return s2_fail(ctx, S2_ERR_SHAPE, "sequence %d: a negative start or length (%d, %d, %d, %d)", i,
                           q->q_start, q->q_len, q->k_start, q->kv_len);
        if (q->q_len > q->kv_len)
            return s2_fail(ctx, S2_ERR_SHAPE, "sequence %d: q_len %d > kv_len %d (queries are the last keys)", i,
                           q->q_len, q->kv_len);
        if ((int64_t)q->q_start + q->q_len > INT32_MAX || (int64_t)q->k_start + q->kv_len > INT32_MAX)
            return s2_fail(ctx, S2_ERR_SHAPE, "sequence %d ends past 32-bit rows", i);
    }
    /* o rows of two sequences must not overlap: sort the non-empty ones by start */
    const s2_attn_seq **order = malloc((size_t)n * sizeof *order);
    if (!order)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    int m = 0;
    for (int i = 0; i < n; i++)
        if (seqs[i].q_len > 0)
            order[m++] = &seqs[i];
    qsort(order, (size_t)m, sizeof *order, cmp_q_start);
    s2_status st = S2_OK;
    for (int i = 1; i < m && st == S2_OK; i++)
        if ((int64_t)order[i - 1]->q_start + order[i - 1]->q_len > order[i]->q_start)
            st = s2_fail(ctx, S2_ERR_INVALID, "sequences %d and %d share query row %d (their o rows would race)",
                         (int)(order[i - 1] - seqs), (int)(order[i] - seqs), order[i]->q_start);
    free(order);
    return st;
}

/* A batch of n sequences with its device records allocated (n checked;
 * host: keep a host copy of the records too). */
static s2_status seqs_alloc(s2_ctx *ctx, s2_device *dev, int n, bool host, s2_attn_seqs **out)
{
    if (n < 1 || n > 65535)
        return s2_fail(ctx, S2_ERR_SHAPE, "%d sequences (1..65535)", n);
    s2_attn_seqs *s = calloc(1, sizeof *s);
    if (!s || (host && !(s->host = malloc((size_t)n * sizeof *s->host)))) {
        free(s);
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    s->dev = dev;
    s->n = n;
    s->on_device = !host;
    s2_status st = s2_rt_alloc(ctx, dev, (size_t)n * sizeof(s2_attn_seq), NULL, &s->buf);
    return S2_HAND_OVER(st, out, s, s2_attn_seqs_free);
}

s2_status s2_attn_seqs_new(s2_ctx *ctx, s2_device *dev, const s2_attn_seq *seqs, int n, s2_attn_seqs **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_seqs_new: out is NULL");
    *out = NULL;
    if (!dev || !seqs)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_seqs_new: %s is NULL", !dev ? "device" : "seqs");
    if (n < 1 || n > 65535)
        return s2_fail(ctx, S2_ERR_SHAPE, "%d sequences (1..65535)", n);
    s2_status st = check_seq_list(ctx, seqs, n);
    s2_attn_seqs *s = NULL;
    if (st == S2_OK)
        st = seqs_alloc(ctx, dev, n, true, &s);
    if (st != S2_OK)
        return st;
    memcpy(s->host, seqs, (size_t)n * sizeof *seqs);
    int64_t max_kv = 0, min_start = INT64_MAX;
    for (int i = 0; i < n; i++)
        if (seqs[i].q_len > 0) {
            max_kv = seqs[i].kv_len > max_kv ? seqs[i].kv_len : max_kv;
            int64_t start = (int64_t)seqs[i].kv_len - seqs[i].q_len;
            min_start = start < min_start ? start : min_start;
        }
    if (max_kv > 0)
        s->sched_q_len = max_kv - min_start, s->sched_kv_len = max_kv;
    st = s2_memcpy_h2d(ctx, dev, s->buf, seqs, (size_t)n * sizeof *seqs);
    /* a launch on a non-blocking stream does not wait for the legacy stream */
    if (st == S2_OK)
        st = s2_stream_synchronize(ctx, dev, NULL);
    return S2_HAND_OVER(st, out, s, s2_attn_seqs_free);
}

s2_status s2_attn_seqs_new_device(s2_ctx *ctx, s2_device *dev, int n, int64_t max_kv_len, s2_attn_seqs **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_seqs_new_device: out is NULL");
    *out = NULL;
    if (!dev)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_seqs_new_device: device is NULL");
    if (max_kv_len < 1 || max_kv_len > INT32_MAX)
        return s2_fail(ctx, S2_ERR_SHAPE, "max_kv_len %lld (1..2^31-1)", (long long)max_kv_len);
    s2_status st = seqs_alloc(ctx, dev, n, false, out);
    /* every query position of every sequence of up to max_kv_len keys */
    if (st == S2_OK)
        (*out)->sched_q_len = (*out)->sched_kv_len = max_kv_len;
    return st;
}

s2_status s2_attn_seqs_write(s2_ctx *ctx, s2_attn_seqs *s, const s2_attn_seq *seqs, void *stream)
{
    if (!s || !seqs)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_seqs_write: %s is NULL", !s ? "seqs object" : "seqs");
    if (!s->on_device)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_attn_seqs_write: the batch is not from s2_attn_seqs_new_device");
    s2_status st = check_seq_list(ctx, seqs, s->n);
    for (int i = 0; i < s->n && st == S2_OK; i++)
        if (seqs[i].kv_len > s->sched_kv_len)
            st = s2_fail(ctx, S2_ERR_SEQ_LEN, "sequence %d: kv_len %d above the batch's max_kv_len %lld", i,
                         seqs[i].kv_len, (long long)s->sched_kv_len);
    return st == S2_OK ? s2_rt_copy_async(ctx, s->dev, s->buf, seqs, (size_t)s->n * sizeof *seqs, stream) : st;
}

s2_status s2_attn_seqs_write_cu(s2_ctx *ctx, s2_attn_kernel *k, s2_attn_seqs *s, s2_devptr cu_q, s2_devptr cu_k,
                                void *stream)
{
    if (!k || !s || !cu_q)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_seqs_write_cu: %s is NULL",
                       !k ? "kernel" : !s ? "seqs object" : "cu_q");
    if (!s->on_device)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_attn_seqs_write_cu: the batch is not from s2_attn_seqs_new_device");
    if (k->desc->spec.kind != S2_KERNEL_FWD)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_attn_seqs_write_cu: kernel %s is not a forward", k->desc->name);
    if (s->dev != k->mod->dev)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_attn_seqs_write_cu: the batch and kernel %s are on different devices",
                       k->desc->name);
    if ((cu_q | cu_k) & 3u)
        return s2_fail(ctx, S2_ERR_ALIGNMENT, "s2_attn_seqs_write_cu: cu_%s is not 4-byte aligned", cu_q & 3u ? "q" : "k");
    const s2_kernel_record *r = k->rec[S2_ROLE_FWD_SEQS];
    if (!r || !k->fns[S2_ROLE_FWD_SEQS])
        return s2_fail(ctx, S2_ERR_UNSUPPORTED,
                       "s2_attn_seqs_write_cu: kernel %s's module has no %s_seqs (made by an older s2c): recompile it",
                       k->desc->name, k->desc->name);
    s2_rt_seqs_vals v = {.CU_Q = cu_q, .CU_K = cu_k, .SEQINFO = s->buf, .N = s->n, .MAX_KV = (int32_t)s->sched_kv_len};
    s2_launch_dims in = {.n = v.N};
    return s2_rt_launch_role(ctx, k, S2_ROLE_FWD_SEQS, &v, &in, stream);
}

void s2_attn_seqs_free(s2_attn_seqs *s)
{
    if (!s)
        return;
    s2_rt_free(s->dev, s->buf, NULL);
    free(s->host);
    free(s);
}

int s2_attn_seqs_count(const s2_attn_seqs *s) { return s ? s->n : 0; }
const s2_attn_seq *s2_attn_seqs_host(const s2_attn_seqs *s) { return s ? s->host : NULL; }
s2_devptr s2_attn_seqs_device(const s2_attn_seqs *s) { return s ? s->buf : 0; }

void s2_attn_seqs_schedule_shape(const s2_attn_seqs *s, int64_t *q_len, int64_t *kv_len)
{
    if (q_len)
        *q_len = s ? s->sched_q_len : 0;
    if (kv_len)
        *kv_len = s ? s->sched_kv_len : 0;
}

s2_status s2_attn_seqs_packed(s2_ctx *ctx, const int32_t *cu_q, const int32_t *cu_k, int n, s2_attn_seq *seqs)
{
    if (!cu_q || !seqs)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_seqs_packed: %s is NULL", !cu_q ? "cu_q" : "seqs");
    if (n < 1)
        return s2_fail(ctx, S2_ERR_SHAPE, "%d sequences", n);
    if (!cu_k)
        cu_k = cu_q;
    if (cu_q[0] < 0 || cu_k[0] < 0)
        return s2_fail(ctx, S2_ERR_SHAPE, "cumulative lengths start below 0");
    for (int i = 0; i < n; i++) {
        if (cu_q[i + 1] < cu_q[i] || cu_k[i + 1] < cu_k[i])
            return s2_fail(ctx, S2_ERR_SHAPE, "cumulative lengths decrease at %d", i + 1);
        seqs[i] = (s2_attn_seq){cu_q[i], cu_q[i + 1] - cu_q[i], cu_k[i], cu_k[i + 1] - cu_k[i]};
        if (seqs[i].q_len > seqs[i].kv_len)
            return s2_fail(ctx, S2_ERR_SHAPE, "sequence %d: %d queries but %d keys", i, seqs[i].q_len, seqs[i].kv_len);
    }
    return S2_OK;
}
