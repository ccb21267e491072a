/* CPU reference attention: forward, backward and paged decode, in float64.
 *
 * Deliberately plain: one query row at a time, the keys and values of one
 * (batch, kv head) converted to double first, a two-pass softmax.  Every
 * entry point validates its arguments, turns them into a `job`, and runs
 * the same row code, so the paged path cannot drift from the dense one. */
#include "s2c/ref.h"
#include "dtype.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Where the keys and values of a sequence live: rows of a (b, s, h, d)
 * tensor, or slots of pages listed by a block table. */
typedef struct kv_source {
    const s2_tensor *k, *v;
    const int32_t *table; /* NULL: position kpos is row kpos of batch b */
    int64_t table_stride;
    int64_t page_size;
    const int64_t *strides; /* per-head tables (s2_ref_paged_problem.table_strides), or NULL */
} kv_source;

/* A validated problem, whichever entry point it came from. */
typedef struct job {
    int batch, heads, kv_heads, dim;
    int64_t q_len, kv_len;           /* padded extents; the lengths when the arrays are NULL */
    const int64_t *q_lens, *kv_lens; /* may be NULL */
    int64_t max_kv;                  /* longest sequence: scratch rows */
    const s2_ref_seq *seqs;          /* variable-length batch: rows of batch 0, or NULL */
    bool causal;
    double scale;
    s2_ref_mask_fn mask;
    const void *mask_user;
    kv_source src;
} job;

typedef struct scratch {
    double *k, *v;       /* [max_kv][dim]: one (batch, kv head) */
    double *dk, *dv;     /* backward accumulators, same shape */
    double *score;       /* [max_kv] scaled scores */
    unsigned char *kept; /* [max_kv] */
    double *q, *o, *d_o, *acc; /* [dim] */
} scratch;

static void scratch_free(scratch *w)
{
    free(w->k);
    free(w->v);
    free(w->dk);
    free(w->dv);
    free(w->score);
    free(w->kept);
    free(w->q);
    free(w->o);
    free(w->d_o);
    free(w->acc);
}

static s2_status scratch_init(s2_ctx *ctx, scratch *w, const job *j, bool backward)
{
    memset(w, 0, sizeof *w);
    size_t rows = (size_t)s2_max64(j->max_kv, 1);
    size_t dim = (size_t)j->dim;
    if (rows > SIZE_MAX / sizeof(double) / dim)
        return s2_fail(ctx, S2_ERR_NOMEM, "reference scratch of %zu x %zu doubles is too large", rows, dim);
    w->k = calloc(rows * dim, sizeof(double));
    w->v = calloc(rows * dim, sizeof(double));
    w->score = calloc(rows, sizeof(double));
    w->kept = calloc(rows, 1);
    w->q = calloc(dim, sizeof(double));
    w->o = calloc(dim, sizeof(double));
    w->d_o = calloc(dim, sizeof(double));
    w->acc = calloc(dim, sizeof(double));
    bool ok = w->k && w->v && w->score && w->kept && w->q && w->o && w->d_o && w->acc;
    if (ok && backward) {
        w->dk = calloc(rows * dim, sizeof(double));
        w->dv = calloc(rows * dim, sizeof(double));
        ok = w->dk && w->dv;
    }
    if (!ok) {
        scratch_free(w);
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory for the reference scratch");
    }
    return S2_OK;
}

/* ---- small pieces ----------------------------------------------------------- */

static int64_t seq_q_len(const job *j, int b)
{
    return j->seqs ? j->seqs[b].q_len : j->q_lens ? j->q_lens[b] : j->q_len;
}
static int64_t seq_kv_len(const job *j, int b)
{
    return j->seqs ? j->seqs[b].kv_len : j->kv_lens ? j->kv_lens[b] : j->kv_len;
}
/* Tensor batch index and first q row of sequence b. */
static int64_t seq_batch(const job *j, int b) { return j->seqs ? 0 : b; }
static int64_t seq_q_row0(const job *j, int b) { return j->seqs ? j->seqs[b].q_start : 0; }
static int group_size(const job *j) { return j->heads / j->kv_heads; }
static size_t lse_index(const job *j, int b, int h, int64_t i)
{
    return ((size_t)b * (size_t)j->heads + (size_t)h) * (size_t)j->q_len + (size_t)i;
}

static double dot(const double *a, const double *b, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static void load_row(const s2_tensor *t, int64_t b, int64_t s, int h, int dim, double *dst)
{
    for (int d = 0; d < dim; d++)
        dst[d] = s2_tensor_get(t, b, s, h, d);
}

static void store_row(const s2_tensor *t, int64_t b, int64_t s, int h, int dim, const double *src)
{
    for (int d = 0; d < dim; d++)
        s2_tensor_set(t, b, s, h, d, src[d]);
}

/* Page n of (batch b, kv head g): per-head tables through strides, else
 * one row per sequence shared by the kv heads. */
static int32_t table_entry(const int32_t *table, const int64_t *strides, int64_t row_stride, int b, int g, int64_t n)
{
    return strides ? table[b * strides[0] + g * strides[1] + n * strides[2]] : table[(int64_t)b * row_stride + n];
}

/* Keys and values of batch b, kv head g, positions [0, kvl), as doubles. */
static void load_kv(const job *j, scratch *w, int b, int g, int64_t kvl)
{
    const kv_source *src = &j->src;
    for (int64_t pos = 0; pos < kvl; pos++) {
        int64_t tb = b, row = pos;
        if (src->table) {
            tb = table_entry(src->table, src->strides, src->table_stride, b, g, pos / src->page_size);
            row = pos % src->page_size;
        } else if (j->seqs) {
            tb = 0;
            row = j->seqs[b].k_start + pos;
        }
        if (tb < 0) { /* a freed page: whatever keeps one of its keys turns NaN */
            for (int d = 0; d < j->dim; d++)
                w->k[pos * j->dim + d] = w->v[pos * j->dim + d] = NAN;
            continue;
        }
        load_row(src->k, tb, row, g, j->dim, w->k + pos * j->dim);
        load_row(src->v, tb, row, g, j->dim, w->v + pos * j->dim);
    }
}

static bool key_kept(const job *j, int h, int64_t qpos, int64_t kpos)
{
    if (j->causal && kpos > qpos)
        return false;
    return !j->mask || j->mask(j->mask_user, h, qpos, kpos);
}

/* Marks the kept keys of the query in w->q and scores them; returns the
 * largest score (-inf when nothing is kept). */
static double score_row(const job *j, scratch *w, int h, int64_t qpos, int64_t kvl)
{
    double max = -INFINITY;
    for (int64_t kpos = 0; kpos < kvl; kpos++) {
        w->kept[kpos] = key_kept(j, h, qpos, kpos);
        if (!w->kept[kpos])
            continue;
        w->score[kpos] = j->scale * dot(w->q, w->k + kpos * j->dim, j->dim);
        if (w->score[kpos] > max)
            max = w->score[kpos];
    }
    return max;
}

/* Softmax-weighted sum of values into w->acc; returns the row's LSE. */
static double attend_row(const job *j, scratch *w, int h, int64_t qpos, int64_t kvl)
{
    memset(w->acc, 0, (size_t)j->dim * sizeof(double));
    double max = score_row(j, w, h, qpos, kvl);
    if (max == -INFINITY)
        return -INFINITY;
    double sum = 0.0;
    for (int64_t kpos = 0; kpos < kvl; kpos++) {
        if (!w->kept[kpos])
            continue;
        double e = exp(w->score[kpos] - max);
        sum += e;
        const double *vrow = w->v + kpos * j->dim;
        for (int d = 0; d < j->dim; d++)
            w->acc[d] += e * vrow[d];
    }
    for (int d = 0; d < j->dim; d++)
        w->acc[d] /= sum;
    return max + log(sum);
}

/* ---- the three computations ---------------------------------------------------- */

static s2_status run_forward(s2_ctx *ctx, const job *j, const s2_tensor *q, const s2_tensor *out, float *lse)
{
    scratch w;
    s2_status st = scratch_init(ctx, &w, j, false);
    if (st != S2_OK)
        return st;
    for (int b = 0; b < j->batch; b++) {
        int64_t ql = seq_q_len(j, b), kvl = seq_kv_len(j, b), tb = seq_batch(j, b), r0 = seq_q_row0(j, b);
        for (int g = 0; g < j->kv_heads; g++) {
            load_kv(j, &w, b, g, kvl);
            for (int h = g * group_size(j); h < (g + 1) * group_size(j); h++)
                for (int64_t i = 0; i < ql; i++) {
                    load_row(q, tb, r0 + i, h, j->dim, w.q);
                    double row_lse = attend_row(j, &w, h, kvl - ql + i, kvl);
                    store_row(out, tb, r0 + i, h, j->dim, w.acc);
                    if (lse)
                        lse[j->seqs ? (size_t)h * (size_t)j->q_len + (size_t)(r0 + i) : lse_index(j, b, h, i)] =
                            (float)row_lse;
                }
        }
    }
    scratch_free(&w);
    return S2_OK;
}

/* One query row's share of the gradients: dq into w->acc, dk and dv added
 * into w->dk, w->dv.  w->q, w->o, w->d_o hold the row. */
static void backward_row(const job *j, scratch *w, int h, int64_t qpos, int64_t kvl, double row_lse, double dlse)
{
    memset(w->acc, 0, (size_t)j->dim * sizeof(double));
    if (row_lse == -INFINITY)
        return;
    double delta = dot(w->d_o, w->o, j->dim) - dlse;
    score_row(j, w, h, qpos, kvl);
    for (int64_t kpos = 0; kpos < kvl; kpos++) {
        if (!w->kept[kpos])
            continue;
        const double *krow = w->k + kpos * j->dim, *vrow = w->v + kpos * j->dim;
        double p = exp(w->score[kpos] - row_lse);
        double ds = p * (dot(w->d_o, vrow, j->dim) - delta);
        double *dk = w->dk + kpos * j->dim, *dv = w->dv + kpos * j->dim;
        for (int d = 0; d < j->dim; d++) {
            w->acc[d] += j->scale * ds * krow[d];
            dk[d] += j->scale * ds * w->q[d];
            dv[d] += p * w->d_o[d];
        }
    }
}

static s2_status run_backward(s2_ctx *ctx, const job *j, const s2_tensor *q, const s2_tensor *o,
                              const s2_tensor *d_out, const float *lse, const float *d_lse,
                              const s2_tensor *dq, const s2_tensor *dk, const s2_tensor *dv)
{
    scratch w;
    s2_status st = scratch_init(ctx, &w, j, true);
    if (st != S2_OK)
        return st;
    for (int b = 0; b < j->batch; b++) {
        int64_t ql = seq_q_len(j, b), kvl = seq_kv_len(j, b);
        for (int g = 0; g < j->kv_heads; g++) {
            load_kv(j, &w, b, g, kvl);
            memset(w.dk, 0, (size_t)kvl * (size_t)j->dim * sizeof(double));
            memset(w.dv, 0, (size_t)kvl * (size_t)j->dim * sizeof(double));
            for (int h = g * group_size(j); h < (g + 1) * group_size(j); h++)
                for (int64_t i = 0; i < ql; i++) {
                    size_t li = lse_index(j, b, h, i);
                    load_row(q, b, i, h, j->dim, w.q);
                    load_row(o, b, i, h, j->dim, w.o);
                    load_row(d_out, b, i, h, j->dim, w.d_o);
                    backward_row(j, &w, h, kvl - ql + i, kvl, lse[li], d_lse ? d_lse[li] : 0.0);
                    store_row(dq, b, i, h, j->dim, w.acc);
                }
            for (int64_t kpos = 0; kpos < kvl; kpos++) {
                store_row(dk, b, kpos, g, j->dim, w.dk + kpos * j->dim);
                store_row(dv, b, kpos, g, j->dim, w.dv + kpos * j->dim);
            }
        }
    }
    scratch_free(&w);
    return S2_OK;
}

/* ---- validation ------------------------------------------------------------------ */

static bool dtype_ok(s2_dtype dt) { return s2_dtype_info_of(dt) != NULL; }

/* Outputs also need non-zero strides where the extent exceeds 1, or rows
 * would overwrite each other. */
static s2_status check_tensor(s2_ctx *ctx, const char *fn, const char *name, const s2_tensor *t,
                              const int64_t ext[4], bool output)
{
    if (!t)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: tensor %s is NULL", fn, name);
    if (!t->data)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: tensor %s has no data", fn, name);
    if (!dtype_ok(t->dtype))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "%s: tensor %s has unknown dtype %d", fn, name, (int)t->dtype);
    if (output)
        for (int i = 0; i < 4; i++)
            if (ext[i] > 1 && t->stride[i] == 0)
                return s2_fail(ctx, S2_ERR_INVALID, "%s: output %s has stride 0 in dim %d (extent %lld)",
                               fn, name, i, (long long)ext[i]);
    return S2_OK;
}

static s2_status check_heads(s2_ctx *ctx, const char *fn, int batch, int heads, int kv_heads, int head_dim, double scale)
{
    if (batch < 1 || heads < 1 || kv_heads < 1 || head_dim < 1)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: batch %d, heads %d, kv_heads %d, head_dim %d must all be >= 1",
                       fn, batch, heads, kv_heads, head_dim);
    if (heads % kv_heads != 0)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: kv_heads %d does not divide heads %d", fn, kv_heads, heads);
    if (!isfinite(scale))
        return s2_fail(ctx, S2_ERR_INVALID, "%s: scale is not finite", fn);
    return S2_OK;
}

static double effective_scale(double scale, int head_dim)
{
    return scale != 0.0 ? scale : 1.0 / sqrt((double)head_dim);
}

static s2_status job_from_problem(s2_ctx *ctx, const char *fn, const s2_ref_problem *p, job *j)
{
    if (!p)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: problem is NULL", fn);
    s2_status st = check_heads(ctx, fn, p->batch, p->heads, p->kv_heads, p->head_dim, p->scale);
    if (st != S2_OK)
        return st;
    if (p->q_len < 1 || p->kv_len < 1)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: q_len %lld and kv_len %lld must be >= 1", fn,
                       (long long)p->q_len, (long long)p->kv_len);
    for (int b = 0; b < p->batch; b++) {
        int64_t ql = p->q_lens ? p->q_lens[b] : p->q_len;
        int64_t kvl = p->kv_lens ? p->kv_lens[b] : p->kv_len;
        if (ql < 0 || ql > p->q_len || kvl < 0 || kvl > p->kv_len)
            return s2_fail(ctx, S2_ERR_INVALID, "%s: batch %d has q_len %lld, kv_len %lld outside [0, %lld], [0, %lld]",
                           fn, b, (long long)ql, (long long)kvl, (long long)p->q_len, (long long)p->kv_len);
        if (ql > kvl)
            return s2_fail(ctx, S2_ERR_INVALID, "%s: batch %d has q_len %lld > kv_len %lld (queries are the last keys)",
                           fn, b, (long long)ql, (long long)kvl);
    }
    *j = (job){
        .batch = p->batch, .heads = p->heads, .kv_heads = p->kv_heads, .dim = p->head_dim,
        .q_len = p->q_len, .kv_len = p->kv_len, .q_lens = p->q_lens, .kv_lens = p->kv_lens,
        .max_kv = p->kv_len, .causal = p->causal, .scale = effective_scale(p->scale, p->head_dim),
        .mask = p->mask, .mask_user = p->mask_user,
    };
    return S2_OK;
}

/* Checks each tensor named in list against its extents. */
typedef struct tensor_arg {
    const char *name;
    const s2_tensor *t;
    bool kv, output;
} tensor_arg;

static s2_status check_tensors(s2_ctx *ctx, const char *fn, const job *j, const tensor_arg *args, int n)
{
    int64_t q_ext[4] = {j->batch, j->q_len, j->heads, j->dim};
    int64_t kv_ext[4] = {j->batch, j->kv_len, j->kv_heads, j->dim};
    for (int i = 0; i < n; i++) {
        s2_status st = check_tensor(ctx, fn, args[i].name, args[i].t, args[i].kv ? kv_ext : q_ext, args[i].output);
        if (st != S2_OK)
            return st;
    }
    return S2_OK;
}

/* ---- entry points ------------------------------------------------------------------ */

s2_status s2_ref_forward(s2_ctx *ctx, const s2_ref_problem *p, const s2_tensor *q, const s2_tensor *k,
                         const s2_tensor *v, const s2_tensor *out, float *lse)
{
    static const char fn[] = "s2_ref_forward";
    job j;
    s2_status st = job_from_problem(ctx, fn, p, &j);
    if (st != S2_OK)
        return st;
    const tensor_arg args[] = {
        {"q", q, false, false}, {"k", k, true, false}, {"v", v, true, false}, {"out", out, false, true},
    };
    st = check_tensors(ctx, fn, &j, args, 4);
    if (st != S2_OK)
        return st;
    j.src = (kv_source){.k = k, .v = v};
    return run_forward(ctx, &j, q, out, lse);
}

s2_status s2_ref_backward(s2_ctx *ctx, const s2_ref_problem *p, const s2_tensor *q, const s2_tensor *k,
                          const s2_tensor *v, const s2_tensor *o, const s2_tensor *d_out,
                          const float *lse, const float *d_lse,
                          const s2_tensor *dq, const s2_tensor *dk, const s2_tensor *dv)
{
    static const char fn[] = "s2_ref_backward";
    job j;
    s2_status st = job_from_problem(ctx, fn, p, &j);
    if (st != S2_OK)
        return st;
    const tensor_arg args[] = {
        {"q", q, false, false}, {"k", k, true, false}, {"v", v, true, false},
        {"o", o, false, false}, {"d_out", d_out, false, false},
        {"dq", dq, false, true}, {"dk", dk, true, true}, {"dv", dv, true, true},
    };
    st = check_tensors(ctx, fn, &j, args, 8);
    if (st != S2_OK)
        return st;
    if (!lse)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: lse is NULL (the backward recomputes P from it)", fn);
    j.src = (kv_source){.k = k, .v = v};
    return run_backward(ctx, &j, q, o, d_out, lse, d_lse, dq, dk, dv);
}

s2_status s2_ref_forward_varlen(s2_ctx *ctx, const s2_ref_problem *p, const s2_ref_seq *seqs,
                                const s2_tensor *q, const s2_tensor *k, const s2_tensor *v,
                                const s2_tensor *out, float *lse)
{
    static const char fn[] = "s2_ref_forward_varlen";
    if (!p || !seqs)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: %s is NULL", fn, !p ? "problem" : "seqs");
    if (p->q_lens || p->kv_lens)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: q_lens / kv_lens are given by seqs", fn);
    job j;
    /* the common checks, on the tensors' batch extent 1; the sequences are checked below */
    static const int64_t none = 0;
    s2_ref_problem one = *p;
    one.batch = 1, one.q_lens = &none, one.kv_lens = &none;
    s2_status st = job_from_problem(ctx, fn, &one, &j);
    if (st != S2_OK)
        return st;
    if (p->batch < 1)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: %d sequences", fn, p->batch);
    int64_t max_kv = 0;
    for (int b = 0; b < p->batch; b++) {
        const s2_ref_seq *s = &seqs[b];
        if (s->q_start < 0 || s->k_start < 0 || s->q_len < 0 || s->q_len > s->kv_len ||
            s->q_start + s->q_len > p->q_len || s->k_start + s->kv_len > p->kv_len)
            return s2_fail(ctx, S2_ERR_INVALID,
                           "%s: sequence %d (q %lld+%lld, k %lld+%lld) is not inside %lld / %lld rows with q_len <= kv_len",
                           fn, b, (long long)s->q_start, (long long)s->q_len, (long long)s->k_start,
                           (long long)s->kv_len, (long long)p->q_len, (long long)p->kv_len);
        max_kv = s2_max64(max_kv, s->kv_len);
    }
    const tensor_arg args[] = {
        {"q", q, false, false}, {"k", k, true, false}, {"v", v, true, false}, {"out", out, false, true},
    };
    st = check_tensors(ctx, fn, &j, args, 4);
    if (st != S2_OK)
        return st;
    j.batch = p->batch;
    j.q_lens = j.kv_lens = NULL;
    j.seqs = seqs;
    j.max_kv = max_kv;
    j.src = (kv_source){.k = k, .v = v};
    return run_forward(ctx, &j, q, out, lse);
}

/* Every entry a sequence of kvl keys uses names a page; with per-head
 * tables, negative entries (freed pages) are allowed too. */
static s2_status check_table(s2_ctx *ctx, const char *fn, const s2_ref_paged_problem *p, int b, int64_t kvl)
{
    const int64_t *s = p->table_strides;
    for (int g = 0; g < (s ? p->kv_heads : 1); g++)
        for (int64_t n = 0; n < s2_cdiv(kvl, p->page_size); n++) {
            int32_t e = table_entry(p->block_table, s, p->max_pages_per_seq, b, g, n);
            if (e >= p->num_pages || (e < 0 && !s))
                return s2_fail(ctx, S2_ERR_INVALID, "%s: block_table[%d][%d][%lld] = %d is not a page in [0, %lld)",
                               fn, b, g, (long long)n, (int)e, (long long)p->num_pages);
        }
    return S2_OK;
}

static s2_status job_from_paged(s2_ctx *ctx, const char *fn, const s2_ref_paged_problem *p, job *j)
{
    if (!p)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: problem is NULL", fn);
    s2_status st = check_heads(ctx, fn, p->batch, p->heads, p->kv_heads, p->head_dim, p->scale);
    if (st != S2_OK)
        return st;
    if (p->q_len < 1)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: q_len %lld must be >= 1", fn, (long long)p->q_len);
    if (p->page_size < 16 || p->page_size % 16 != 0)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: page_size %d is not a positive multiple of 16", fn, p->page_size);
    if (p->num_pages < 1 || p->max_pages_per_seq < 1)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: num_pages %lld and max_pages_per_seq %lld must be >= 1", fn,
                       (long long)p->num_pages, (long long)p->max_pages_per_seq);
    if (!p->kv_lens || !p->block_table)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: kv_lens and block_table are required", fn);
    int64_t max_kv = 0;
    for (int b = 0; b < p->batch; b++) {
        int64_t kvl = p->kv_lens[b];
        if (kvl < p->q_len || s2_cdiv(kvl, p->page_size) > p->max_pages_per_seq)
            return s2_fail(ctx, S2_ERR_INVALID, "%s: batch %d has kv_len %lld outside [q_len %lld, %lld pages of %d]",
                           fn, b, (long long)kvl, (long long)p->q_len, (long long)p->max_pages_per_seq, p->page_size);
        st = check_table(ctx, fn, p, b, kvl);
        if (st != S2_OK)
            return st;
        max_kv = s2_max64(max_kv, kvl);
    }
    *j = (job){
        .batch = p->batch, .heads = p->heads, .kv_heads = p->kv_heads, .dim = p->head_dim,
        .q_len = p->q_len, .kv_len = max_kv, .kv_lens = p->kv_lens, .max_kv = max_kv,
        .causal = p->causal, .scale = effective_scale(p->scale, p->head_dim),
        .mask = p->mask, .mask_user = p->mask_user,
    };
    return S2_OK;
}

s2_status s2_ref_decode_paged(s2_ctx *ctx, const s2_ref_paged_problem *p, const s2_tensor *q,
                              const s2_tensor *k_pages, const s2_tensor *v_pages, const s2_tensor *out, float *lse)
{
    static const char fn[] = "s2_ref_decode_paged";
    job j;
    s2_status st = job_from_paged(ctx, fn, p, &j);
    if (st != S2_OK)
        return st;
    int64_t q_ext[4] = {p->batch, p->q_len, p->heads, p->head_dim};
    int64_t page_ext[4] = {p->num_pages, p->page_size, p->kv_heads, p->head_dim};
    if ((st = check_tensor(ctx, fn, "q", q, q_ext, false)) != S2_OK
        || (st = check_tensor(ctx, fn, "k_pages", k_pages, page_ext, false)) != S2_OK
        || (st = check_tensor(ctx, fn, "v_pages", v_pages, page_ext, false)) != S2_OK
        || (st = check_tensor(ctx, fn, "out", out, q_ext, true)) != S2_OK)
        return st;
    j.src = (kv_source){.k = k_pages, .v = v_pages, .table = p->block_table,
                        .table_stride = p->max_pages_per_seq, .page_size = p->page_size,
                        .strides = p->table_strides};
    return run_forward(ctx, &j, q, out, lse);
}
