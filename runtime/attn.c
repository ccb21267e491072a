/* Attention modules: a generated cubin, its manifest and kernels; argument
 * checks, per-shape schedules and the forward launch (s2c/attn_runtime.h). */
#include "kernel_abi.h"
#include "rt_internal.h"
#include "s2c/attn_runtime.h"
#include "s2c/layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DS_CHUNKINGS = 12 };

/* A packed forward schedule (s2_schedule_pack or _gathered) on the device,
 * and where its arrays start. */
typedef struct fwd_tables {
    s2_devptr buf, class_of_head, offsets, entries;
    int32_t first_q_tile, q_tiles;
} fwd_tables;

/* One uploaded schedule: the forward one of the kernel's tile shape, and
 * what the kernel kind needs besides. */
typedef struct sched_slot {
    int64_t q_len, kv_len;
    fwd_tables fwd;
    /* backward kernels: the transposed schedule for (block_m, block_m) too */
    s2_devptr t_buf, t_class_of_head, t_offsets, t_entries;
    /* and, in t_buf, the dS workspace's map (s2_ds_map; ds_tiles < 0: none) */
    s2_devptr ds_head, ds_map;
    int64_t ds_tiles;
    /* the dS path over chunks of kv heads (launch_bwd), for each chunk count
     * ds_chunks[i] (a divisor of kv_heads above 1): chunk j's head_base array
     * (attention.h: heads + 1 int64, the chunk's heads from 0, then its tile
     * count) at ds_chunk_head[i] + j * (heads + 1) * 8, in t_buf; and the
     * largest chunk's tiles per batch element */
    int ds_nchunk;
    int ds_chunks[DS_CHUNKINGS];
    int64_t ds_chunk_tiles[DS_CHUNKINGS];
    s2_devptr ds_chunk_head[DS_CHUNKINGS];
    /* for the runtime's own choice: the least dK/dV work (entries per batch
     * element) of a chunk of each chunking, and the longest dK/dV list */
    int64_t ds_chunk_work[DS_CHUNKINGS];
    int64_t ds_longest;
    /* NAME_dqds2 may run: every forward list short enough and in increasing key order */
    bool dqds2_ok;
    int32_t kv_tiles;
    /* persistent forward (S2_FWD_ABI_TMA_PERSISTENT): the longest-first work list */
    s2_devptr w_buf;
    int32_t n_work;
    /* its work counters: one pair per stream (launches on one stream run in
     * order; a pair serves them all), taken by the stream that uses it */
    void *counter_stream[S2_ATTN_COUNTER_PAIRS];
    bool counter_used[S2_ATTN_COUNTER_PAIRS];
    /* the forward's wide variant (kernel.wide), when its lists are long
     * enough: its own packed gathered schedule */
    bool use_wide;
    fwd_tables wide;
    uint64_t last_use;           /* 0: empty */
} sched_slot;

struct s2_attn_kernel {
    s2_attn_module *mod;
    const s2_manifest_kernel *desc;
    const s2_pattern *pattern;
    s2_kernel *fn;
    s2_kernel *wide_fn;          /* forward: NAME_w (kernel.wide), or NULL */
    s2_kernel *bwd_fn[5];        /* backward: NAME_pre, NAME_dkdv, NAME_dq, NAME_dqds, NAME_dqds2 (or NULL) */
    s2_kernel *dec_fn[2];        /* decode: NAME, NAME_combine */
    struct dec_slot *dec_slots;  /* decode: cached kept-block lists (DEC_CACHE) */
    int64_t max_kv_len;
    mtx_t lock;                  /* guards everything below */
    bool lock_ok;
    sched_slot slots[S2_ATTN_SCHED_CACHE];
    uint64_t tick;
    s2_attn_sched_stats stats;
};

struct s2_attn_module {
    s2_device *dev;
    s2_module *cu;
    s2_manifest *manifest;
    s2_attn_kernel *kernels;
    int num_kernels;
    bool standalone;             /* owned by its one kernel (s2_attn_load) */
};

/* ---- modules ------------------------------------------------------------------- */

/* The longest kv_len whose layout the pattern allows and the kernel's i32
 * lengths hold. */
static int64_t max_kv_len_of(const s2_pattern *p)
{
    int64_t lim = INT32_MAX;
    if (p->max_seq_len > 0 && p->max_seq_len < lim)
        lim = p->max_seq_len;
    for (int q = 0; q < p->heads; q++) {
        int mi = p->rules[q].mask;
        if (mi < 0 || mi >= p->num_masks)
            continue;
        const s2_block_mask *bm = &p->masks[mi];
        int64_t blocks = bm->rows < bm->cols ? bm->rows : bm->cols;
        if (blocks * p->block_size < lim)
            lim = blocks * p->block_size;
    }
    return lim;
}

static void decode_free(s2_attn_kernel *k);
static s2_status decode_init(s2_ctx *ctx, s2_attn_kernel *k);

/* The device buffers of a slot (built or partly built). */
static void slot_free(s2_device *dev, sched_slot *s)
{
    s2_mem_free(NULL, dev, s->fwd.buf);
    s2_mem_free(NULL, dev, s->t_buf);
    s2_mem_free(NULL, dev, s->w_buf);
    s2_mem_free(NULL, dev, s->wide.buf);
    memset(s, 0, sizeof *s);
}

static void free_schedules(s2_attn_kernel *k)
{
    for (int i = 0; i < S2_ATTN_SCHED_CACHE; i++)
        if (k->slots[i].last_use)
            slot_free(k->mod->dev, &k->slots[i]);
    memset(k->slots, 0, sizeof k->slots);
}

void s2_attn_module_free(s2_attn_module *mod)
{
    if (!mod)
        return;
    for (int i = 0; mod->kernels && i < mod->num_kernels; i++) {
        s2_attn_kernel *k = &mod->kernels[i];
        if (k->mod)
            free_schedules(k);
        if (k->lock_ok)
            mtx_destroy(&k->lock);
        s2_kernel_free(k->fn);
        s2_kernel_free(k->wide_fn);
        for (int j = 0; j < 5; j++)
            s2_kernel_free(k->bwd_fn[j]);
        decode_free(k);
    }
    free(mod->kernels);
    s2_module_free(mod->cu);
    s2_manifest_free(mod->manifest);
    free(mod);
}

static s2_status init_kernel(s2_ctx *ctx, s2_attn_module *mod, int i)
{
    s2_attn_kernel *k = &mod->kernels[i];
    const s2_manifest_kernel *d = s2_manifest_kernel_at(mod->manifest, i);
    k->mod = mod;
    k->desc = d;
    k->pattern = s2_manifest_find_pattern(mod->manifest, d->pattern);
    if (!k->pattern)
        return s2_fail(ctx, S2_ERR_PARSE, "manifest: kernel %s names unknown pattern '%s'", d->name, d->pattern);
    if ((d->spec.kind != S2_KERNEL_FWD && d->spec.kind != S2_KERNEL_BWD && d->spec.kind != S2_KERNEL_DECODE) || d->threads != 32 * d->spec.num_warps || d->spec.block_m < 16 ||
        d->spec.block_n < 16)
        return s2_fail(ctx, S2_ERR_PARSE, "manifest: kernel %s has an inconsistent launch shape", d->name);
    k->max_kv_len = max_kv_len_of(k->pattern);
    if (mtx_init(&k->lock, mtx_plain) != thrd_success)
        return s2_fail(ctx, S2_ERR_NOMEM, "cannot create a mutex");
    k->lock_ok = true;
    if (d->spec.kind == S2_KERNEL_DECODE)
        return decode_init(ctx, k);
    if (d->spec.kind == S2_KERNEL_BWD) {
        static const char *const parts[5] = {"_pre", "_dkdv", "_dq", "_dqds", "_dqds2"};
        int n = s2_bwd_ds_capable(k->pattern, &d->spec) ? 5 : 3;
        for (int j = 0; j < n; j++) {
            char name[512];
            snprintf(name, sizeof name, "%s%s", d->name, parts[j]);
            s2_status st = s2_kernel_get(ctx, mod->cu, name, &k->bwd_fn[j]);
            if (st == S2_ERR_NOT_FOUND && j >= 3) {
                s2_ctx_clear(ctx);   /* a module from before the dS path or its paired dQ kernel */
                if (j == 3)
                    break;
                continue;
            }
            if (st != S2_OK)
                return st;
        }
        return S2_OK;
    }
    s2_status st = s2_kernel_get(ctx, mod->cu, d->name, &k->fn);
    if (st == S2_OK && d->has_wide) {
        char name[512];
        snprintf(name, sizeof name, "%s%s", d->name, S2_WIDE_SUFFIX);
        if (d->wide_threads != 32 * d->wide_spec.num_warps || d->wide_spec.block_n % d->wide_spec.kv_gather ||
            d->abi != S2_FWD_ABI_TMA)
            return s2_fail(ctx, S2_ERR_PARSE, "manifest: kernel %s has an inconsistent wide variant", d->name);
        st = s2_kernel_get(ctx, mod->cu, name, &k->wide_fn);
    }
    return st;
}

s2_status s2_attn_module_load(s2_ctx *ctx, s2_device *dev, const void *image, size_t size,
                              s2_attn_module **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_module_load: out is NULL");
    *out = NULL;
    if (!dev || !image || size == 0)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_module_load: %s", !dev ? "device is NULL" : "empty image");
    const char *text = NULL;
    size_t len = 0;
    s2_status st = s2_cubin_find_manifest(ctx, image, size, &text, &len);
    if (st != S2_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", s2_ctx_message(ctx));
        return s2_fail(ctx, st, "not a generated attention cubin: %s", msg);
    }
    s2_attn_module *mod = calloc(1, sizeof *mod);
    if (!mod)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    mod->dev = dev;
    if ((st = s2_manifest_parse(ctx, text, len, &mod->manifest)) != S2_OK)
        goto fail;
    int n = s2_manifest_num_kernels(mod->manifest);
    if (n < 1) {
        st = s2_fail(ctx, S2_ERR_PARSE, "manifest lists no kernel");
        goto fail;
    }
    if (!(mod->kernels = calloc((size_t)n, sizeof *mod->kernels))) {
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
        goto fail;
    }
    mod->num_kernels = n;
    if ((st = s2_module_load_data(ctx, dev, image, size, &mod->cu)) != S2_OK)
        goto fail;
    for (int i = 0; i < n; i++)
        if ((st = init_kernel(ctx, mod, i)) != S2_OK)
            goto fail;
    *out = mod;
    return S2_OK;
fail:
    s2_attn_module_free(mod);
    return st;
}

s2_status s2_attn_module_load_file(s2_ctx *ctx, s2_device *dev, const char *path, s2_attn_module **out)
{
    if (out)
        *out = NULL;
    if (!path)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_module_load_file: path is NULL");
    char *data = NULL;
    size_t len = 0;
    s2_status st = s2_read_file(ctx, path, &data, &len);
    if (st != S2_OK)
        return st;
    st = s2_attn_module_load(ctx, dev, data, len, out);
    free(data);
    return st == S2_OK ? st : s2_fail_prefix(ctx, st, path);
}

const s2_manifest *s2_attn_module_manifest(const s2_attn_module *mod) { return mod ? mod->manifest : NULL; }
int s2_attn_module_num_kernels(const s2_attn_module *mod) { return mod ? mod->num_kernels : 0; }

s2_attn_kernel *s2_attn_module_kernel_at(const s2_attn_module *mod, int i)
{
    return mod && i >= 0 && i < mod->num_kernels ? &mod->kernels[i] : NULL;
}

static bool kernel_matches(const s2_attn_kernel *k, const char *pattern, s2_dtype dtype, int head_dim)
{
    return (!pattern || !strcmp(k->desc->pattern, pattern)) && k->desc->spec.dtype == dtype &&
           k->desc->spec.head_dim == head_dim;
}

s2_status s2_attn_find(s2_ctx *ctx, const s2_attn_module *mod, const char *pattern, s2_dtype dtype,
                       int head_dim, s2_attn_kernel **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_find: out is NULL");
    *out = NULL;
    if (!mod)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_find: module is NULL");
    for (int i = 0; i < mod->num_kernels; i++)
        if (kernel_matches(&mod->kernels[i], pattern, dtype, head_dim)) {
            *out = &mod->kernels[i];
            return S2_OK;
        }
    s2_buf have;
    s2_buf_init(&have);
    for (int i = 0; i < mod->num_kernels; i++) {
        const s2_manifest_kernel *d = mod->kernels[i].desc;
        s2_buf_printf(&have, "%s%s (%s, %s, d%d)", i ? ", " : "", d->name, d->pattern, s2_dtype_name(d->spec.dtype),
                      d->spec.head_dim);
    }
    s2_fail(ctx, S2_ERR_NOT_FOUND, "no kernel for pattern '%s', %s, head_dim %d; the module has: %s",
            pattern ? pattern : "(any)", s2_dtype_name(dtype), head_dim, have.data ? have.data : "");
    s2_buf_free(&have);
    return S2_ERR_NOT_FOUND;
}

s2_status s2_attn_load(s2_ctx *ctx, s2_device *dev, const void *image, size_t size, const char *pattern,
                       s2_dtype dtype, int head_dim, s2_attn_kernel **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_load: out is NULL");
    *out = NULL;
    s2_attn_module *mod = NULL;
    s2_status st = s2_attn_module_load(ctx, dev, image, size, &mod);
    if (st == S2_OK)
        st = s2_attn_find(ctx, mod, pattern, dtype, head_dim, out);
    if (st != S2_OK) {
        s2_attn_module_free(mod);
        return st;
    }
    mod->standalone = true;
    return S2_OK;
}

void s2_attn_kernel_free(s2_attn_kernel *k)
{
    if (k && k->mod->standalone)
        s2_attn_module_free(k->mod);
}

const s2_manifest_kernel *s2_attn_kernel_desc(const s2_attn_kernel *k) { return k ? k->desc : NULL; }
const s2_pattern *s2_attn_kernel_pattern(const s2_attn_kernel *k) { return k ? k->pattern : NULL; }
s2_kernel *s2_attn_kernel_function(const s2_attn_kernel *k) { return k ? k->fn : NULL; }
int64_t s2_attn_kernel_max_kv_len(const s2_attn_kernel *k) { return k ? k->max_kv_len : 0; }

void s2_attn_kernel_sched_stats(s2_attn_kernel *k, s2_attn_sched_stats *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!k)
        return;
    mtx_lock(&k->lock);
    *out = k->stats;
    mtx_unlock(&k->lock);
}

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

/* ---- variable-length batches ------------------------------------------------------ */

struct s2_attn_seqs {
    const s2_device *dev;
    s2_devptr buf;
    s2_attn_seq *host;
    int n;
    int64_t sched_q_len, sched_kv_len;  /* 0, 0: no sequence has a query */
};

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
    if (st != S2_OK)
        return st;
    s2_attn_seqs *s = calloc(1, sizeof *s);
    if (!s || !(s->host = malloc((size_t)n * sizeof *s->host))) {
        free(s);
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    s->dev = dev;
    s->n = n;
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
    size_t bytes = (size_t)n * sizeof *seqs;
    st = s2_mem_alloc(ctx, dev, bytes, &s->buf);
    if (st == S2_OK)
        st = s2_memcpy_h2d(ctx, dev, s->buf, seqs, bytes);
    /* a launch on a non-blocking stream does not wait for the legacy stream */
    if (st == S2_OK)
        st = s2_stream_synchronize(ctx, dev, NULL);
    if (st != S2_OK) {
        s2_attn_seqs_free(s);
        return st;
    }
    *out = s;
    return S2_OK;
}

void s2_attn_seqs_free(s2_attn_seqs *s)
{
    if (!s)
        return;
    s2_mem_free(NULL, s->dev, s->buf);
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

/* ---- argument checks ------------------------------------------------------------ */

typedef struct tensor_desc {
    const char *name;
    uint64_t ptr;
    const int64_t *stride;       /* (batch, seq, head) */
    int64_t ext[3];
} tensor_desc;

static const char *const dim_names[3] = {"batch", "seq", "head"};

/* Strides of dimensions of extent 1 are never multiplied by a non-zero
 * index, so only the others are checked. */
static s2_status check_strides(s2_ctx *ctx, const tensor_desc *t)
{
    for (int i = 0; i < 3; i++) {
        if (t->ext[i] < 2)
            continue;
        if (t->stride[i] < 0)
            return s2_fail(ctx, S2_ERR_STRIDE, "%s: %s stride %lld is negative (not supported)", t->name,
                           dim_names[i], (long long)t->stride[i]);
        if (t->stride[i] % 8 != 0)
            return s2_fail(ctx, S2_ERR_ALIGNMENT,
                           "%s: %s stride %lld is not a multiple of 8 elements (rows are read as 16-byte vectors)",
                           t->name, dim_names[i], (long long)t->stride[i]);
    }
    return S2_OK;
}

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
    if (!k->desc->seqinfo)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED,
                       "kernel %s was generated without the seqinfo parameter (an older s2c): recompile it", k->desc->name);
    if (s->dev != k->mod->dev)
        return s2_fail(ctx, S2_ERR_INVALID, "seqs were made for another device than kernel %s's", k->desc->name);
    if (a->batch != s->n)
        return s2_fail(ctx, S2_ERR_SHAPE, "batch %d, but seqs holds %d sequences", a->batch, s->n);
    if (a->q_len > INT32_MAX || a->kv_len > INT32_MAX)
        return s2_fail(ctx, S2_ERR_SHAPE, "%lld / %lld token rows do not fit 32 bits", (long long)a->q_len,
                       (long long)a->kv_len);
    for (int i = 0; i < s->n; i++) {
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

static s2_status check_sizes(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_fwd_args *a)
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

/* Batch extent of the tensors: a variable-length batch has rows only. */
static int64_t tensor_batch(const s2_attn_fwd_args *a) { return a->seqs ? 1 : a->batch; }

static void describe_tensors(const s2_attn_fwd_args *a, tensor_desc t[4])
{
    int64_t nb = tensor_batch(a);
    t[0] = (tensor_desc){"q", a->q, a->q_stride, {nb, a->q_len, a->heads}};
    t[1] = (tensor_desc){"k", a->k, a->k_stride, {nb, a->kv_len, a->kv_heads}};
    t[2] = (tensor_desc){"v", a->v, a->v_stride, {nb, a->kv_len, a->kv_heads}};
    t[3] = (tensor_desc){"o", a->o, a->o_stride, {nb, a->q_len, a->heads}};
}

/* Everything that needs no driver; *bytes gets each tensor's extent. */
static s2_status check_host_side(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_fwd_args *a, size_t bytes[5])
{
    if (!k || !a)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_forward: %s is NULL", !k ? "kernel" : "args");
    tensor_desc t[4];
    describe_tensors(a, t);
    for (int i = 0; i < 4; i++)
        if (!t[i].ptr)
            return s2_fail(ctx, S2_ERR_NULL_ARG, "%s is a null pointer", t[i].name);
    s2_status st = check_sizes(ctx, k, a);
    for (int i = 0; i < 4 && st == S2_OK; i++)
        st = check_strides(ctx, &t[i]);
    if (st == S2_OK)
        st = check_no_overlap(ctx, &t[3], a->head_dim);
    if (st != S2_OK)
        return st;
    for (int i = 0; i < 4; i++)
        if (t[i].ptr % 16 != 0)
            return s2_fail(ctx, S2_ERR_ALIGNMENT, "%s: 0x%llx is not 16-byte aligned", t[i].name,
                           (unsigned long long)t[i].ptr);
    if (a->lse % 4 != 0)
        return s2_fail(ctx, S2_ERR_ALIGNMENT, "lse: 0x%llx is not 4-byte aligned", (unsigned long long)a->lse);
    size_t esize = s2_dtype_size(a->dtype);
    for (int i = 0; i < 4; i++)
        if ((st = tensor_bytes(ctx, &t[i], a->head_dim, esize, &bytes[i])) != S2_OK)
            return st;
    bytes[4] = (size_t)tensor_batch(a) * (size_t)a->heads * (size_t)a->q_len * sizeof(float);
    return S2_OK;
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
    return a->lse ? s2_check_device_ptr(ctx, k->mod->dev, a->lse, bytes[4], 4, "lse") : S2_OK;
}

s2_status s2_attn_forward_check(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_fwd_args *a)
{
    if (k && k->desc->spec.kind != S2_KERNEL_FWD)
        return s2_fail(ctx, S2_ERR_INVALID, "kernel %s is not a forward kernel", k->desc->name);
    size_t bytes[5];
    s2_status st = check_host_side(ctx, k, a, bytes);
    return st == S2_OK ? check_device_side(ctx, k, a, bytes) : st;
}

/* ---- schedules ------------------------------------------------------------------ */

static size_t align16(size_t x) { return (x + 15u) & ~(size_t)15u; }

/* The dS path's chunkings of the kv heads into c equal chunks (c > 1
 * dividing kv_heads, at most DS_CHUNKINGS of them): each chunk's head_base
 * array, laid out one chunking after the other (tr->ds_chunk_head holds
 * offsets into *out in bytes until the caller rebases them), and the
 * longest dK/dV list of the transposed schedule tp (lists per class). */
static s2_status ds_chunk_arrays(s2_ctx *ctx, const s2_attn_kernel *k, const int64_t *head_base,
                                 const s2_packed_schedule *tp, int32_t lists, sched_slot *tr, int64_t **out,
                                 size_t *bytes)
{
    int heads = k->pattern->heads, kvh = k->pattern->kv_heads, group = heads / kvh;
    /* a CTA's list: its group's query heads' */
    const int32_t *cls = (const int32_t *)((const char *)tp->data + tp->class_of_head_off);
    const int32_t *offs = (const int32_t *)((const char *)tp->data + tp->offsets_off);
    int nclass = 0;
    for (int h = 0; h < heads; h++)
        nclass = cls[h] + 1 > nclass ? cls[h] + 1 : nclass;
    tr->ds_longest = 0;
    for (int64_t i = 0; i < (int64_t)nclass * lists; i++)
        if (offs[i + 1] - offs[i] > tr->ds_longest)
            tr->ds_longest = offs[i + 1] - offs[i];
    tr->ds_longest *= group;
    size_t n = 0;
    tr->ds_nchunk = 0;
    for (int c = 2; c <= kvh && tr->ds_nchunk < DS_CHUNKINGS; c++)
        if (kvh % c == 0)
            tr->ds_chunks[tr->ds_nchunk++] = c;
    for (int i = 0; i < tr->ds_nchunk; i++)
        n += (size_t)tr->ds_chunks[i] * (size_t)(heads + 1);
    int64_t *a = n ? malloc(n * sizeof *a) : NULL;
    if (n && !a)
        return s2_fail(ctx, S2_ERR_NOMEM, "dS chunks: out of memory");
    size_t at = 0;
    for (int i = 0; i < tr->ds_nchunk; i++) {
        int c = tr->ds_chunks[i], nh = kvh / c * group;
        tr->ds_chunk_head[i] = (s2_devptr)(at * sizeof *a);
        tr->ds_chunk_tiles[i] = 0;
        tr->ds_chunk_work[i] = INT64_MAX;
        for (int j = 0; j < c; j++, at += (size_t)heads + 1) {
            int64_t h0 = (int64_t)j * nh, total = head_base[h0 + nh] - head_base[h0];
            for (int h = 0; h <= heads; h++)
                a[at + (size_t)h] = h <= nh ? head_base[h0 + h] - head_base[h0] : total;
            if (total > tr->ds_chunk_tiles[i])
                tr->ds_chunk_tiles[i] = total;
            /* a dS tile per dK/dV entry */
            if (total < tr->ds_chunk_work[i])
                tr->ds_chunk_work[i] = total;
        }
    }
    *out = a;
    *bytes = n * sizeof *a;
    return S2_OK;
}

/* Whether NAME_dqds2 can take a forward schedule: each list (offsets[i] ..
 * offsets[i + 1], the classes' lists one after another) holds at most
 * S2_BWD_DQDS2_MAX_LIST entries, in increasing key tile order. */
static bool lists_pairable(const s2_packed_schedule *fwd)
{
    const int32_t *off = (const int32_t *)((const char *)fwd->data + fwd->offsets_off);
    const s2_dev_entry *e = (const s2_dev_entry *)((const char *)fwd->data + fwd->entries_off);
    size_t n_off = (fwd->entries_off - fwd->offsets_off) / sizeof *off;
    for (size_t i = 0; i + 1 < n_off; i++) {
        int32_t a = off[i], z = off[i + 1];
        if (z < a || z > fwd->num_entries)
            break;   /* past the last list (padding) */
        if (z - a > S2_BWD_DQDS2_MAX_LIST)
            return false;
        for (int32_t j = a + 1; j < z; j++)
            if (e[j].tile <= e[j - 1].tile)
                return false;
    }
    return true;
}

/* The backward's transposed schedule: per key tile of block_m keys, the
 * query tiles visiting it; and, for a kernel with NAME_dqds, the dS map
 * pairing it with the forward schedule fwd / fg, in the same buffer. */
static s2_status upload_transposed(s2_ctx *ctx, s2_attn_kernel *k, const s2_layout *lay,
                                   const s2_packed_schedule *fwd, const s2_tile_geom *fg, s2_devptr *buf,
                                   sched_slot *tr)
{
    /* one-block key tiles (or block_m-key tiles of bigger blocks), grouped
     * per kv head into block_m-key tiles (attention.h, backward ABI) */
    int bm = k->desc->spec.block_m, bs = k->pattern->block_size < bm ? k->pattern->block_size : bm;
    int gather = bm / bs;
    s2_tile_spec ts = {bm, bs};
    s2_schedule *sched = NULL;
    s2_packed_schedule pk = {0};
    s2_ds_map map = {0};
    int32_t lists = 0;
    s2_status st = s2_schedule_build(ctx, lay, ts, true, &sched);
    if (st == S2_OK)
        st = s2_schedule_pack_gathered_kv(ctx, sched, k->pattern->kv_heads, gather, &pk, &lists);
    if (st == S2_OK && sched->geom.kv_tiles > INT32_MAX)
        st = s2_fail(ctx, S2_ERR_UNSUPPORTED, "schedule: %lld key tiles do not fit 32 bits",
                     (long long)sched->geom.kv_tiles);
    tr->ds_tiles = -1;
    tr->dqds2_ok = false;
    if (st == S2_OK && k->bwd_fn[3]) {
        st = s2_schedule_ds_map(ctx, fwd, fg->q_tiles, fg->first_q_tile, &pk, lists, gather, k->pattern->heads,
                                &map);
        if (st == S2_OK && k->bwd_fn[4])
            tr->dqds2_ok = lists_pairable(fwd);
        if (st == S2_ERR_UNSUPPORTED) {   /* this shape takes the recomputing dQ kernel */
            s2_ctx_clear(ctx);
            st = S2_OK;
        }
    }
    int64_t *chunks = NULL;
    size_t chunk_bytes = 0;
    if (st == S2_OK && map.data)
        st = ds_chunk_arrays(ctx, k, (const int64_t *)((const char *)map.data + map.head_base_off), &pk, lists, tr,
                             &chunks, &chunk_bytes);
    size_t map_at = align16(pk.size), size = map.data ? map_at + map.size : pk.size;
    size_t chunk_at = align16(size);
    if (chunk_bytes)
        size = chunk_at + chunk_bytes;
    if (st == S2_OK)
        st = s2_mem_alloc(ctx, k->mod->dev, size, buf);
    if (st == S2_OK)
        st = s2_memcpy_h2d(ctx, k->mod->dev, *buf, pk.data, pk.size);
    if (st == S2_OK && map.data)
        st = s2_memcpy_h2d(ctx, k->mod->dev, *buf + map_at, map.data, map.size);
    if (st == S2_OK && chunk_bytes)
        st = s2_memcpy_h2d(ctx, k->mod->dev, *buf + chunk_at, chunks, chunk_bytes);
    free(chunks);
    for (int i = 0; st == S2_OK && i < tr->ds_nchunk; i++)
        tr->ds_chunk_head[i] += *buf + chunk_at;
    if (st == S2_OK) {
        tr->t_class_of_head = *buf + pk.class_of_head_off;
        tr->t_offsets = *buf + pk.offsets_off;
        tr->t_entries = *buf + pk.entries_off;
        tr->kv_tiles = lists;
        if (map.data) {
            tr->ds_head = *buf + map_at + map.head_base_off;
            tr->ds_map = *buf + map_at + map.map_off;
            tr->ds_tiles = map.tiles;
        }
    }
    s2_ds_map_free(&map);
    s2_packed_schedule_free(&pk);
    s2_schedule_free(sched);
    return st;
}

/* Where the persistent forward's counter pairs follow its work list of n items (8-byte aligned). */
static int32_t work_counter_index(int32_t n) { return (n + 1) & ~1; }

/* The counter pair of `stream` in slot s (called with k->lock held).  A
 * stream keeps its pair; when every pair belongs to another stream, the
 * context is synchronised (no launch in flight uses any) and the pairs are
 * handed out anew.  Concurrent launches thus never share a pair. */
static s2_status counter_for(s2_ctx *ctx, s2_attn_kernel *k, sched_slot *s, void *stream, s2_devptr *out)
{
    int i = 0;
    for (; i < S2_ATTN_COUNTER_PAIRS; i++)
        if (!s->counter_used[i] || s->counter_stream[i] == stream)
            break;
    if (i == S2_ATTN_COUNTER_PAIRS) {
        s2_status st = s2_device_synchronize(ctx, k->mod->dev);
        if (st != S2_OK)
            return st;
        memset(s->counter_used, 0, sizeof s->counter_used);
        i = 0;
    }
    s->counter_used[i] = true;
    s->counter_stream[i] = stream;
    *out = s->w_buf + 4 * (s2_devptr)(work_counter_index(s->n_work) + 2 * i);
    return S2_OK;
}

static s2_status upload_work_list(s2_ctx *ctx, s2_attn_kernel *k, const s2_schedule *sched, s2_devptr *buf,
                                  int32_t *n_work)
{
    int32_t *list = NULL;
    int64_t n = 0;
    s2_status st = s2_schedule_work_list(ctx, sched, &list, &n);
    /* the list, then the kernel's work counters (zero; each launch leaves
     * them zero): S2_ATTN_COUNTER_PAIRS pairs from [work_counter_index(n)] */
    size_t words = (size_t)work_counter_index((int32_t)n) + 2 * S2_ATTN_COUNTER_PAIRS;
    int32_t *grown = st == S2_OK ? realloc(list, words * sizeof *list) : NULL;
    if (grown) {
        list = grown;
        memset(list + n, 0, (words - (size_t)n) * sizeof *list);
    } else if (st == S2_OK) {
        st = s2_fail(ctx, S2_ERR_NOMEM, "work list: out of memory");
    }
    if (st == S2_OK)
        st = s2_mem_alloc(ctx, k->mod->dev, words * sizeof *list, buf);
    if (st == S2_OK)
        st = s2_memcpy_h2d(ctx, k->mod->dev, *buf, list, words * sizeof *list);
    *n_work = (int32_t)n;
    free(list);
    return st;
}

/* The wide forward variant pays for its 128-row tiles (union lists: dead
 * pairs; one CTA per SM) once a query tile visits enough keys: on an H200
 * (bench/RESULTS.md, run 39) it lost 12% at ~690 keys per 64-row tile
 * (b64_8k), tied at ~1500 (b64_32k), and won 3% at ~1870 (b64_l16v8_16k)
 * and 7% at ~4500 (b64_128k); with the lazy rescaling of both (run 50) it
 * loses 7% at ~690 and wins 1.5-2% at ~1500 (b64_32k: 1503), 5% at ~1870.
 * On owned pairs (s2_schedule_pack_gathered_owned, run 67) it wins 3% at
 * 725 (b64_8k), 6% at 1051 (local 16, stride 8, 4K) and ties at 584 (b64
 * at 4K); with the item hand-off in shared memory (runs 76-77) it wins
 * 5% at 584, 2-3% at 493 (b64 at 2K) and 4% at 409 (b64 at 1K), the
 * shortest measured.  Keys per query tile of the primary schedule. */
enum { WIDE_MIN_KEYS = 384 };

static bool wants_wide(const s2_attn_kernel *k, const s2_schedule *sched)
{
    if (!k->wide_fn || sched->geom.q_tiles < 1 || sched->heads < 1)
        return false;
    int64_t lists = sched->geom.q_tiles, total = 0;
    for (int h = 0; h < sched->heads; h++) {
        int c = sched->class_of_head[h];
        total += sched->offsets[(int64_t)(c + 1) * lists] - sched->offsets[(int64_t)c * lists];
    }
    /* the schedule's entries are key tiles of block_n / gather keys */
    const s2_kernel_spec *sp = &k->desc->spec;
    int gather = sp->kv_gather > 1 ? sp->kv_gather : 1;
    double keys = (double)total * (sp->block_n / gather) / ((double)lists * sched->heads);
    return keys >= WIDE_MIN_KEYS;
}

/* The forward schedule of a spec's tile shape, packed (gathered key tiles
 * when the spec gathers, owned pairs for the two-slab shape). */
static s2_status pack_forward(s2_ctx *ctx, const s2_layout *lay, const s2_kernel_spec *spec, s2_schedule **sched,
                              s2_packed_schedule *pk)
{
    int gather = spec->kv_gather > 1 ? spec->kv_gather : 1;
    s2_tile_spec ts = {spec->block_m, spec->block_n / gather};
    s2_status st = s2_schedule_build(ctx, lay, ts, false, sched);
    if (st == S2_OK)
        st = s2_kernel_spec_pack_forward(ctx, spec, *sched, pk);
    if (st == S2_OK && ((*sched)->geom.q_tiles > INT32_MAX || (*sched)->geom.first_q_tile > INT32_MAX))
        st = s2_fail(ctx, S2_ERR_UNSUPPORTED, "schedule: %lld query tiles do not fit 32 bits",
                     (long long)(*sched)->geom.q_tiles);
    return st;
}

/* A packed forward schedule to the device (t->buf is set as soon as it is
 * allocated: the caller frees it on failure). */
static s2_status upload_forward(s2_ctx *ctx, s2_device *dev, const s2_packed_schedule *pk, const s2_schedule *sched,
                                fwd_tables *t)
{
    s2_status st = s2_mem_alloc(ctx, dev, pk->size, &t->buf);
    if (st == S2_OK)
        st = s2_memcpy_h2d(ctx, dev, t->buf, pk->data, pk->size);
    t->class_of_head = t->buf + pk->class_of_head_off;
    t->offsets = t->buf + pk->offsets_off;
    t->entries = t->buf + pk->entries_off;
    t->first_q_tile = (int32_t)sched->geom.first_q_tile;
    t->q_tiles = (int32_t)sched->geom.q_tiles;
    return st;
}

/* The wide variant's schedule into slot (its own tile shape), and on the
 * persistent grid its work list (the slot's, which the kernel itself then
 * does not use: a module has a wide variant only for a grid kernel). */
static s2_status build_wide(s2_ctx *ctx, s2_attn_kernel *k, const s2_layout *lay, sched_slot *slot)
{
    s2_schedule *sched = NULL;
    s2_packed_schedule pk = {0};
    s2_status st = pack_forward(ctx, lay, &k->desc->wide_spec, &sched, &pk);
    if (st == S2_OK && k->desc->wide_spec.persistent > 0 && slot->w_buf)
        st = s2_fail(ctx, S2_ERR_INTERNAL, "wide variant: the kernel has a work list already");
    if (st == S2_OK && k->desc->wide_spec.persistent > 0)
        st = upload_work_list(ctx, k, sched, &slot->w_buf, &slot->n_work);
    if (st == S2_OK)
        st = upload_forward(ctx, k->mod->dev, &pk, sched, &slot->wide);
    slot->use_wide = st == S2_OK;
    s2_packed_schedule_free(&pk);
    s2_schedule_free(sched);
    return st;
}

static s2_status build_schedule(s2_ctx *ctx, s2_attn_kernel *k, int64_t q_len, int64_t kv_len, sched_slot *slot)
{
    s2_device *dev = k->mod->dev;
    s2_layout *lay = NULL;
    s2_schedule *sched = NULL;
    s2_packed_schedule pk = {0};
    /* filled part by part (forward and transposed schedules, work list, wide variant), then stored */
    sched_slot sl = {.q_len = q_len, .kv_len = kv_len};
    s2_status st = s2_layout_new(ctx, k->pattern, q_len, kv_len, &lay);
    if (st == S2_OK)
        st = pack_forward(ctx, lay, &k->desc->spec, &sched, &pk);
    if (st == S2_OK)
        st = upload_forward(ctx, dev, &pk, sched, &sl.fwd);
    if (st == S2_OK && k->desc->spec.kind == S2_KERNEL_BWD)
        st = upload_transposed(ctx, k, lay, &pk, &sched->geom, &sl.t_buf, &sl);
    if (st == S2_OK && k->desc->abi == S2_FWD_ABI_TMA_PERSISTENT)
        st = upload_work_list(ctx, k, sched, &sl.w_buf, &sl.n_work);
    if (st == S2_OK && k->desc->spec.kind == S2_KERNEL_FWD && wants_wide(k, sched))
        st = build_wide(ctx, k, lay, &sl);
    /* a launch on a non-blocking stream does not wait for the legacy stream */
    if (st == S2_OK)
        st = s2_stream_synchronize(ctx, dev, NULL);
    if (st == S2_OK) {
        *slot = sl;
        if (sl.use_wide)
            k->stats.wide++;
    } else {
        slot_free(dev, &sl);
    }
    s2_packed_schedule_free(&pk);
    s2_schedule_free(sched);
    s2_layout_free(lay);
    return st;
}

/* The slot holding (q_len, kv_len), built on a miss.  Called with k->lock held. */
static s2_status get_schedule(s2_ctx *ctx, s2_attn_kernel *k, int64_t q_len, int64_t kv_len, sched_slot **out)
{
    sched_slot *victim = &k->slots[0];
    for (int i = 0; i < S2_ATTN_SCHED_CACHE; i++) {
        sched_slot *s = &k->slots[i];
        if (s->last_use && s->q_len == q_len && s->kv_len == kv_len) {
            s->last_use = ++k->tick;
            k->stats.hits++;
            *out = s;
            return S2_OK;
        }
        if (s->last_use < victim->last_use)
            victim = s;
    }
    k->stats.misses++;
    if (victim->last_use) {
        /* launches in flight may still read it */
        s2_status st = s2_device_synchronize(ctx, k->mod->dev);
        if (st != S2_OK)
            return st;
        slot_free(k->mod->dev, victim);
        k->stats.evictions++;
        k->stats.cached--;
    }
    s2_status st = build_schedule(ctx, k, q_len, kv_len, victim);
    if (st != S2_OK)
        return st;
    victim->last_use = ++k->tick;
    k->stats.cached++;
    *out = victim;
    return S2_OK;
}

/* ---- launch --------------------------------------------------------------------- */

/* 4-D view {D, seq, heads, batch} of one tensor; a dimension of extent 1 is
 * never stepped over, so its stride (possibly anything) is replaced by one
 * the driver accepts. */
static s2_status tensor_map_of(s2_ctx *ctx, const s2_device *dev, s2_tensor_map *map, s2_dtype dt, int d, s2_devptr ptr,
                               const int64_t stride[3], int64_t seq, int64_t heads, int64_t batch, uint32_t rows)
{
    size_t es = s2_dtype_size(dt);
    uint64_t dims[4] = {(uint64_t)d, (uint64_t)seq, (uint64_t)heads, (uint64_t)batch};
    int64_t ext[3] = {seq, heads, batch};
    int64_t el[3] = {stride[1], stride[2], stride[0]};
    uint64_t strides[3];
    for (int i = 0; i < 3; i++)
        strides[i] = ext[i] < 2 || el[i] <= 0 ? (uint64_t)d * es : (uint64_t)el[i] * es;
    uint32_t box[4] = {64, rows, 1, 1};
    return s2_tensor_map_encode_tiled(ctx, dev, map, dt, 4, ptr, dims, strides, box, 128);
}

s2_status s2_attn_fwd_tensor_maps(s2_ctx *ctx, const s2_device *dev, const s2_kernel_spec *spec,
                                  const s2_attn_fwd_args *a, s2_tensor_map maps[3])
{
    if (!spec || !a || !maps)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_fwd_tensor_maps: null argument");
    if (spec->head_dim % 64 != 0 || spec->block_n < 1 || spec->block_n > 256)
        return s2_fail(ctx, S2_ERR_INVALID, "tensor maps: head_dim %d / block_n %d", spec->head_dim, spec->block_n);
    int64_t nb = tensor_batch(a);
    uint32_t kv_rows = (uint32_t)(spec->kv_gather > 1 ? spec->block_n / spec->kv_gather : spec->block_n);
    s2_status st = tensor_map_of(ctx, dev, &maps[0], spec->dtype, spec->head_dim, a->q, a->q_stride, a->q_len, a->heads,
                                 nb, 64);
    if (st == S2_OK)
        st = tensor_map_of(ctx, dev, &maps[1], spec->dtype, spec->head_dim, a->k, a->k_stride, a->kv_len, a->kv_heads,
                           nb, kv_rows);
    if (st == S2_OK)
        st = tensor_map_of(ctx, dev, &maps[2], spec->dtype, spec->head_dim, a->v, a->v_stride, a->kv_len, a->kv_heads,
                           nb, kv_rows);
    return st;
}

/* Resident CTAs per SM of a kernel (registers, shared memory, threads;
 * Hopper limits: 64 K registers in 256-register warp chunks, 228 KB of
 * shared memory with 1 KB reserved per CTA, 2048 threads, 32 CTAs). */
static s2_status ctas_per_sm(s2_ctx *ctx, s2_kernel *fn, int threads, int smem_bytes, int *out)
{
    s2_kernel_attrs at;
    s2_status st = s2_kernel_get_attrs(ctx, fn, &at);
    if (st != S2_OK)
        return st;
    int warps = (threads + 31) / 32;
    int warp_regs = ((at.num_regs * 32 + 255) / 256) * 256;
    int by_regs = warp_regs ? 65536 / (warps * warp_regs) : 32;
    int by_smem = 228 * 1024 / (smem_bytes + at.static_smem_bytes + 1024);
    int by_threads = 2048 / threads;
    int n = by_regs < by_smem ? by_regs : by_smem;
    n = n < by_threads ? n : by_threads;
    *out = n < 1 ? 1 : n > 32 ? 32 : n;
    return S2_OK;
}

static s2_status launch(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_fwd_args *a, sched_slot *s)
{
    s2_devptr q = a->q, kk = a->k, v = a->v, o = a->o, lse = a->lse;
    int64_t st[12];
    memcpy(st, a->q_stride, sizeof a->q_stride);
    memcpy(st + 3, a->k_stride, sizeof a->k_stride);
    memcpy(st + 6, a->v_stride, sizeof a->v_stride);
    memcpy(st + 9, a->o_stride, sizeof a->o_stride);
    int32_t q_len = (int32_t)a->q_len, kv_len = (int32_t)(a->seqs ? a->seqs->sched_kv_len : a->kv_len);
    s2_devptr seqinfo = a->seqs ? a->seqs->buf : 0;
    double scale = a->scale != 0.0f ? (double)a->scale : 1.0 / sqrt((double)a->head_dim);
    float scale_log2 = (float)(scale * 1.4426950408889634);
    /* the wide variant: same ABI, its own schedule and launch shape */
    const fwd_tables *ft = &s->fwd;
    s2_kernel *fn = k->fn;
    const s2_kernel_spec *spec = &k->desc->spec;
    int threads = k->desc->threads, smem = k->desc->smem_bytes;
    bool persistent = k->desc->abi == S2_FWD_ABI_TMA_PERSISTENT;
    if (s->use_wide) {
        ft = &s->wide, fn = k->wide_fn, spec = &k->desc->wide_spec;
        threads = k->desc->wide_threads, smem = k->desc->wide_smem_bytes;
        persistent = spec->persistent > 0;
    }
    s2_devptr cls = ft->class_of_head, offs = ft->offsets, ent = ft->entries;
    int32_t first = ft->first_q_tile, tiles = ft->q_tiles;
    s2_tensor_map maps[3];
    s2_devptr work = s->w_buf, counter = 0;
    if (persistent) {
        s2_status cs = counter_for(ctx, k, s, stream, &counter);
        if (cs != S2_OK)
            return cs;
    }
    int32_t n_work = s->n_work, batch = (int32_t)a->batch;
    void *args[] = {&q, &kk, &v, &o, &lse,
                    &st[0], &st[1], &st[2], &st[3], &st[4], &st[5], &st[6], &st[7], &st[8], &st[9], &st[10], &st[11],
                    &q_len, &kv_len, &scale_log2, &cls, &offs, &ent, &first, &tiles, &maps[0], &maps[1], &maps[2],
                    &work, &n_work, &batch, &counter, &seqinfo};
    /* seqinfo is the last parameter of each ABI (attention.h) */
    args[k->desc->abi == S2_FWD_ABI_PTRS ? 25 : persistent ? 32 : 28] = &seqinfo;
    if (k->desc->abi != S2_FWD_ABI_PTRS) {
        s2_status ms = s2_attn_fwd_tensor_maps(ctx, k->mod->dev, spec, a, maps);
        if (ms != S2_OK)
            return ms;
    }
    s2_launch_cfg cfg = {.grid = {(uint32_t)tiles, (uint32_t)a->heads, (uint32_t)a->batch},
                         .block = {(uint32_t)threads, 1, 1},
                         .smem_bytes = (uint32_t)smem,
                         .stream = stream};
    if (persistent) {
        int per_sm = 1;
        s2_status os = ctas_per_sm(ctx, fn, threads, smem, &per_sm);
        if (os != S2_OK)
            return os;
        int64_t items = (int64_t)n_work * a->batch;
        int64_t g = (int64_t)s2_device_get_info(k->mod->dev)->sm_count * per_sm;
        if (items > INT32_MAX)
            return s2_fail(ctx, S2_ERR_UNSUPPORTED, "persistent forward: %lld work items exceed 32 bits",
                           (long long)items);
        cfg.grid[0] = (uint32_t)(g < items ? g : items > 0 ? items : 1);
        cfg.grid[1] = cfg.grid[2] = 1;
    }
    return s2_kernel_launch(ctx, fn, &cfg, args);
}

s2_status s2_attn_forward(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_fwd_args *a)
{
    s2_status st = s2_attn_forward_check(ctx, k, a);
    if (st != S2_OK)
        return st;
    /* held across the launch, so that no other thread evicts the schedule
     * between the lookup and the enqueue */
    int64_t sq = a->q_len, sk = a->kv_len;
    if (a->seqs) {
        sq = a->seqs->sched_q_len, sk = a->seqs->sched_kv_len;
        if (sk == 0)
            return S2_OK; /* no sequence has a query */
    }
    mtx_lock(&k->lock);
    sched_slot *s = NULL;
    st = get_schedule(ctx, k, sq, sk, &s);
    if (st == S2_OK)
        st = launch(ctx, k, stream, a, s);
    mtx_unlock(&k->lock);
    return st;
}

/* ---- backward ------------------------------------------------------------------- */

size_t s2_attn_bwd_workspace_bytes(int batch, int heads, int64_t q_len)
{
    if (batch < 1 || heads < 1 || q_len < 1)
        return 0;
    return 2 * align16((size_t)batch * (size_t)heads * (size_t)q_len * sizeof(float));
}

/* Where the dS tiles start in the workspace, and the size that holds them
 * (0: slot s has no dS path). */
static size_t ds_offset(int batch, int heads, int64_t q_len)
{
    return (s2_attn_bwd_workspace_bytes(batch, heads, q_len) + 255u) & ~(size_t)255u;
}

static size_t ds_workspace_bytes(const s2_attn_kernel *k, const sched_slot *s, int batch, int heads, int64_t q_len)
{
    if (!k->bwd_fn[3] || s->ds_tiles < 0)
        return 0;
    return ds_offset(batch, heads, q_len) + (size_t)batch * (size_t)s->ds_tiles * S2_BWD_DS_TILE_BYTES;
}

/* The same over the slot's chunking i (s->ds_chunks[i] chunks of kv heads,
 * one after the other through the workspace). */
static size_t ds_chunking_bytes(const sched_slot *s, int batch, int heads, int64_t q_len, int i)
{
    return ds_offset(batch, heads, q_len) + (size_t)batch * (size_t)s->ds_chunk_tiles[i] * S2_BWD_DS_TILE_BYTES;
}

/* The same over `chunks` chunks: 0 when that chunking is not offered (its index in *which). */
static size_t ds_chunked_bytes(const s2_attn_kernel *k, const sched_slot *s, int batch, int heads, int64_t q_len,
                               int chunks, int *which)
{
    if (chunks == 1)
        return ds_workspace_bytes(k, s, batch, heads, q_len);
    for (int i = 0; k->bwd_fn[3] && s->ds_tiles >= 0 && i < s->ds_nchunk; i++)
        if (s->ds_chunks[i] == chunks) {
            if (which)
                *which = i;
            return ds_chunking_bytes(s, batch, heads, q_len, i);
        }
    return 0;
}

/* The dS workspace of (batch, q_len, kv_len) in `chunks` chunks of kv heads
 * (0: no dS path), the schedules built (and cached) as a launch would. */
static s2_status ds_need(s2_ctx *ctx, s2_attn_kernel *k, int batch, int64_t q_len, int64_t kv_len, int chunks,
                         size_t *need)
{
    *need = 0;
    if (k->desc->spec.kind != S2_KERNEL_BWD)
        return s2_fail(ctx, S2_ERR_INVALID, "kernel %s is not a backward kernel", k->desc->name);
    s2_attn_fwd_args f = {.batch = batch, .q_len = q_len, .kv_len = kv_len, .heads = k->pattern->heads,
                          .kv_heads = k->pattern->kv_heads, .head_dim = k->desc->spec.head_dim,
                          .dtype = k->desc->spec.dtype};
    s2_status st = check_sizes(ctx, k, &f);
    if (st != S2_OK)
        return st;
    mtx_lock(&k->lock);
    sched_slot *s = NULL;
    st = get_schedule(ctx, k, q_len, kv_len, &s);
    if (st == S2_OK)
        *need = ds_chunked_bytes(k, s, batch, k->pattern->heads, q_len, chunks, NULL);
    mtx_unlock(&k->lock);
    return st;
}

s2_status s2_attn_backward_workspace_chunked(s2_ctx *ctx, s2_attn_kernel *k, int batch, int64_t q_len,
                                             int64_t kv_len, int chunks, size_t *bytes)
{
    if (!k || !bytes)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_backward_workspace_chunked: %s is NULL", !k ? "kernel" : "bytes");
    *bytes = 0;
    if (k->desc->spec.kind == S2_KERNEL_BWD &&
        (chunks < 1 || chunks > k->pattern->kv_heads || k->pattern->kv_heads % chunks))
        return s2_fail(ctx, S2_ERR_INVALID, "%d head chunks do not divide %d kv heads", chunks, k->pattern->kv_heads);
    size_t need = 0;
    s2_status st = ds_need(ctx, k, batch, q_len, kv_len, chunks, &need);
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

enum { BWD_TENSORS = 8 };

static void describe_bwd(const s2_attn_bwd_args *a, tensor_desc t[BWD_TENSORS])
{
    int64_t qe[3] = {a->batch, a->q_len, a->heads}, ke[3] = {a->batch, a->kv_len, a->kv_heads};
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

static s2_status check_bwd_host(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_bwd_args *a,
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
                          .kv_heads = a->kv_heads, .head_dim = a->head_dim, .dtype = a->dtype, .scale = a->scale};
    s2_status st = check_sizes(ctx, k, &f);
    for (int i = 0; i < BWD_TENSORS && st == S2_OK; i++)
        st = check_strides(ctx, &t[i]);
    for (int i = 5; i < BWD_TENSORS && st == S2_OK; i++)
        st = check_no_overlap(ctx, &t[i], a->head_dim);
    if (st != S2_OK)
        return st;
    for (int i = 0; i < BWD_TENSORS; i++)
        if (t[i].ptr % 16 != 0)
            return s2_fail(ctx, S2_ERR_ALIGNMENT, "%s: 0x%llx is not 16-byte aligned", t[i].name,
                           (unsigned long long)t[i].ptr);
    if (a->ds_chunks < 0 || (a->ds_chunks > 0 && (a->kv_heads < 1 || a->kv_heads % a->ds_chunks)))
        return s2_fail(ctx, S2_ERR_INVALID, "ds_chunks %d does not divide %d kv heads", a->ds_chunks, a->kv_heads);
    if (a->workspace_bytes && a->workspace_bytes < s2_attn_bwd_workspace_bytes(a->batch, a->heads, a->q_len))
        return s2_fail(ctx, S2_ERR_SHAPE, "workspace_bytes %zu is below s2_attn_bwd_workspace_bytes() = %zu",
                       a->workspace_bytes, s2_attn_bwd_workspace_bytes(a->batch, a->heads, a->q_len));
    if (a->lse % 4 != 0 || a->d_lse % 4 != 0 || a->workspace % 16 != 0)
        return s2_fail(ctx, S2_ERR_ALIGNMENT, "%s is not %d-byte aligned",
                       a->lse % 4 ? "lse" : a->d_lse % 4 ? "d_lse" : "workspace", a->workspace % 16 ? 16 : 4);
    size_t esize = s2_dtype_size(a->dtype);
    for (int i = 0; i < BWD_TENSORS; i++)
        if ((st = tensor_bytes(ctx, &t[i], a->head_dim, esize, &bytes[i])) != S2_OK)
            return st;
    return S2_OK;
}

s2_status s2_attn_backward_check(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_bwd_args *a)
{
    size_t bytes[BWD_TENSORS];
    s2_status st = check_bwd_host(ctx, k, a, bytes);
    if (st != S2_OK)
        return st;
    tensor_desc t[BWD_TENSORS];
    describe_bwd(a, t);
    for (int i = 0; i < BWD_TENSORS && st == S2_OK; i++)
        st = s2_check_device_ptr(ctx, k->mod->dev, t[i].ptr, bytes[i], 16, t[i].name);
    size_t rows = (size_t)a->batch * (size_t)a->heads * (size_t)a->q_len * sizeof(float);
    if (st == S2_OK)
        st = s2_check_device_ptr(ctx, k->mod->dev, a->lse, rows, 4, "lse");
    if (st == S2_OK && a->d_lse)
        st = s2_check_device_ptr(ctx, k->mod->dev, a->d_lse, rows, 4, "d_lse");
    if (st == S2_OK)
        st = s2_check_device_ptr(ctx, k->mod->dev, a->workspace,
                                 a->workspace_bytes ? a->workspace_bytes
                                                    : s2_attn_bwd_workspace_bytes(a->batch, a->heads, a->q_len),
                                 16, "workspace");
    return st;
}

/* The backward's launch arguments (attention.h, backward ABI), for kv heads
 * [kv0, kv0 + nkv) (query heads kv0 * group ..): tensors, lse/delta rows and
 * the schedules' class arrays are moved to the first head (the kernels index
 * them from the grid's head, with the full head count as the batch stride),
 * ds_head is the chunk's head_base array. */
typedef struct bwd_launch {
    s2_devptr ptrs[12];
    int64_t st[24];
    int32_t q_len, kv_len, first, tiles, kv_tiles;
    float scale_log2;
    s2_devptr sch[6], dsp[3];
    s2_tensor_map maps[2];   /* q, do (spec.bwd_tma) */
    void *args[53];
} bwd_launch;

static s2_status bwd_launch_args(s2_ctx *ctx, bwd_launch *L, const s2_attn_kernel *k, const s2_attn_bwd_args *a,
                                 const sched_slot *s, int kv0, int nkv, s2_devptr ds, s2_devptr ds_head)
{
    int group = a->heads / a->kv_heads;
    int64_t h0 = (int64_t)kv0 * group;
    size_t es = s2_dtype_size(a->dtype), ws = s2_attn_bwd_workspace_bytes(a->batch, a->heads, a->q_len);
    size_t rows = (size_t)h0 * (size_t)a->q_len * sizeof(float);
    s2_devptr base[12] = {a->q, a->k, a->v, a->o, a->d_o, a->lse, a->d_lse, a->workspace, a->workspace + ws / 2,
                          a->dq, a->dk, a->dv};
    /* which head each pointer follows: 0 query heads, 1 kv heads, 2 rows of lse/delta */
    static const int kind[12] = {0, 1, 1, 0, 0, 2, 2, 2, 2, 0, 1, 1};
    const int64_t *head_stride[12] = {a->q_stride, a->k_stride, a->v_stride, a->o_stride, a->do_stride, NULL, NULL,
                                      NULL, NULL, a->dq_stride, a->dk_stride, a->dv_stride};
    for (int i = 0; i < 12; i++) {
        s2_devptr off = kind[i] == 2 ? (s2_devptr)rows
                        : (s2_devptr)((kind[i] == 0 ? h0 : kv0) * head_stride[i][2] * (int64_t)es);
        L->ptrs[i] = base[i] ? base[i] + off : 0;
    }
    const int64_t *strides[8] = {a->q_stride, a->k_stride, a->v_stride, a->o_stride,
                                 a->do_stride, a->dq_stride, a->dk_stride, a->dv_stride};
    for (int i = 0; i < 8; i++)
        memcpy(L->st + 3 * i, strides[i], 3 * sizeof(int64_t));
    L->q_len = (int32_t)a->q_len, L->kv_len = (int32_t)a->kv_len;
    double scale = a->scale != 0.0f ? (double)a->scale : 1.0 / sqrt((double)a->head_dim);
    L->scale_log2 = (float)(scale * 1.4426950408889634);
    s2_devptr cls = 4 * (s2_devptr)h0;   /* int32 class_of_head[heads] of both schedules, by query head */
    s2_devptr sch[6] = {s->fwd.class_of_head + cls, s->fwd.offsets, s->fwd.entries, s->t_class_of_head + cls, s->t_offsets,
                        s->t_entries};
    memcpy(L->sch, sch, sizeof sch);
    L->first = s->fwd.first_q_tile, L->tiles = s->fwd.q_tiles, L->kv_tiles = s->kv_tiles;
    L->dsp[0] = ds, L->dsp[1] = ds ? ds_head : 0, L->dsp[2] = ds ? s->ds_map : 0;
    for (int i = 0; i < 12; i++)
        L->args[i] = &L->ptrs[i];
    for (int i = 0; i < 24; i++)
        L->args[12 + i] = &L->st[i];
    void *tail[15] = {&L->q_len, &L->kv_len, &L->scale_log2, &L->sch[0], &L->sch[1], &L->sch[2], &L->first,
                      &L->tiles, &L->sch[3], &L->sch[4], &L->sch[5], &L->kv_tiles, &L->dsp[0], &L->dsp[1],
                      &L->dsp[2]};
    memcpy(L->args + 36, tail, sizeof tail);
    L->args[51] = &L->maps[0];
    L->args[52] = &L->maps[1];
    if (k->desc->spec.bwd_tma <= 0)
        return S2_OK;
    /* the dK/dV kernel's Q and dO tiles (block_m rows), over the launch's heads */
    int64_t nh = (int64_t)nkv * group;
    s2_status st = tensor_map_of(ctx, k->mod->dev, &L->maps[0], a->dtype, a->head_dim, L->ptrs[0], a->q_stride,
                                 a->q_len, nh, a->batch, (uint32_t)k->desc->spec.block_m);
    if (st == S2_OK)
        st = tensor_map_of(ctx, k->mod->dev, &L->maps[1], a->dtype, a->head_dim, L->ptrs[4], a->do_stride, a->q_len,
                           nh, a->batch, (uint32_t)k->desc->spec.block_m);
    return st;
}

/* A chunking the runtime takes by itself: a chunk's dK/dV work spread over
 * the GPU's CTA slots (two per SM) takes at least as long as its longest
 * list, which otherwise becomes each chunk's tail.  On an H200
 * (bench/RESULTS.md, runs 43-44): 128K, B=1: 2 and 4 chunks ran as fast as
 * one launch, 8 chunks (work 1100 entries per slot, longest list 2048)
 * 25% slower, 16 chunks 2x; 8K, B=4: 2 chunks (168 against 128) +3%, 4
 * chunks (84) +11%, 16 chunks 2.7x (the recomputing dQ: +12%). */
static bool chunks_fill(const s2_attn_kernel *k, const sched_slot *s, int i, int batch)
{
    int64_t slots = 2 * (int64_t)s2_device_get_info(k->mod->dev)->sm_count;
    return s->ds_chunk_work[i] * batch >= s->ds_longest * slots;
}

/* NAME_pre over every head, then NAME_dkdv and NAME_dq, or with the dS path
 * NAME_dkdv and NAME_dqds: over all heads when the workspace holds every dS
 * tile, else over the fewest equal chunks of kv heads whose tiles it holds
 * and whose launches fill the GPU (a->ds_chunks: that many, the caller's
 * choice), one chunk after the other from the start of the dS area (the
 * results are those of one launch, bit for bit), else the recomputing
 * NAME_dq. */
static s2_status launch_bwd(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_bwd_args *a,
                            const sched_slot *s)
{
    int chunks = 1, which = -1;
    bool ds = false;
    size_t need = ds_workspace_bytes(k, s, a->batch, a->heads, a->q_len);
    if (a->ds_chunks > 0) {
        size_t c = ds_chunked_bytes(k, s, a->batch, a->heads, a->q_len, a->ds_chunks, &which);
        if (!c)
            return s2_fail(ctx, S2_ERR_UNSUPPORTED, "ds_chunks %d: kernel %s has no dS path for this shape",
                           a->ds_chunks, k->desc->name);
        if (a->workspace_bytes < c)
            return s2_fail(ctx, S2_ERR_INVALID,
                           "ds_chunks %d: workspace_bytes %zu below the %zu bytes of s2_attn_backward_workspace_chunked()",
                           a->ds_chunks, a->workspace_bytes, c);
        ds = true, chunks = a->ds_chunks;
    } else if (need && a->workspace_bytes >= need) {
        ds = true;
    } else if (need && a->ds_chunks == 0) {
        /* need != 0: the kernel has NAME_dqds and the shape a dS map */
        for (int i = 0; i < s->ds_nchunk && !ds; i++)
            if (a->workspace_bytes >= ds_chunking_bytes(s, a->batch, a->heads, a->q_len, i) &&
                chunks_fill(k, s, i, a->batch))
                ds = true, chunks = s->ds_chunks[i], which = i;
    }
    s2_devptr dsw = ds ? a->workspace + ds_offset(a->batch, a->heads, a->q_len) : 0;
    bool pair = ds && k->bwd_fn[4] && s->dqds2_ok && a->dq_pair >= 0;
    uint32_t T = (uint32_t)k->desc->threads, rows = T / (uint32_t)(a->head_dim / 8);
    uint32_t smem = (uint32_t)k->desc->smem_bytes;
    bwd_launch L;
    int nkv = a->kv_heads / chunks, group = a->heads / a->kv_heads;
    s2_status rc = bwd_launch_args(ctx, &L, k, a, s, 0, a->kv_heads, dsw, s->ds_head);
    if (rc != S2_OK)
        return rc;
    s2_launch_cfg pre = {.grid = {(uint32_t)((a->q_len + rows - 1) / rows), (uint32_t)a->heads, (uint32_t)a->batch},
                         .block = {T, 1, 1}, .stream = stream};
    rc = s2_kernel_launch(ctx, k->bwd_fn[0], &pre, L.args);
    for (int j = 0; j < chunks && rc == S2_OK; j++) {
        s2_devptr head = chunks == 1 ? s->ds_head
                         : s->ds_chunk_head[which] + (s2_devptr)j * (s2_devptr)(a->heads + 1) * sizeof(int64_t);
        /* one launch: the arguments (and tensor maps) of NAME_pre's */
        if (chunks > 1)
            rc = bwd_launch_args(ctx, &L, k, a, s, j * nkv, nkv, dsw, head);
        if (rc != S2_OK)
            break;
        s2_launch_cfg cfg[2] = {
            {.grid = {(uint32_t)L.kv_tiles, (uint32_t)nkv, (uint32_t)a->batch}, .block = {T, 1, 1},
             .smem_bytes = smem, .stream = stream},
            {.grid = {(uint32_t)L.tiles, (uint32_t)(nkv * group), (uint32_t)a->batch}, .block = {T, 1, 1},
             .smem_bytes = ds ? (uint32_t)s2_bwd_dqds_smem_bytes(&k->desc->spec) : smem, .stream = stream},
        };
        int dq = ds ? 3 : 2;
        if (pair) {   /* two query tiles per CTA (NAME_dqds2) */
            dq = 4;
            cfg[1].grid[0] = (uint32_t)((L.tiles + 1) / 2);
            cfg[1].block[0] = S2_BWD_DQDS2_THREADS;
            cfg[1].smem_bytes = (uint32_t)s2_bwd_dqds2_smem_bytes(&k->desc->spec);
        }
        rc = s2_kernel_launch(ctx, k->bwd_fn[1], &cfg[0], L.args);
        if (rc == S2_OK)
            rc = s2_kernel_launch(ctx, k->bwd_fn[dq], &cfg[1], L.args);
    }
    if (rc == S2_OK && chunks > 1)
        k->stats.ds_chunked++;
    if (rc == S2_OK && pair)
        k->stats.dq_paired++;
    return rc;
}

s2_status s2_attn_backward(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_bwd_args *a)
{
    s2_status st = s2_attn_backward_check(ctx, k, a);
    if (st != S2_OK)
        return st;
    mtx_lock(&k->lock);
    sched_slot *s = NULL;
    st = get_schedule(ctx, k, a->q_len, a->kv_len, &s);
    if (st == S2_OK)
        st = launch_bwd(ctx, k, stream, a, s);
    mtx_unlock(&k->lock);
    return st;
}

/* ---- paged decode and combine (s2c/decode.h) ---------------------------------------- */


enum { DEC_CACHE = 4, DEC_MAX_SPLITS = 64 };

/* Uploaded kept-block lists for sequences of up to q_blocks blocks. */
typedef struct dec_slot {
    int64_t q_blocks;
    s2_devptr buf, class_of_kv_head, offsets, entries;
    int64_t max_list;
    uint64_t last_use;           /* 0: empty */
} dec_slot;

static s2_status decode_init(s2_ctx *ctx, s2_attn_kernel *k)
{
    static const char *const parts[2] = {"", "_combine"};
    if (!(k->dec_slots = calloc(DEC_CACHE, sizeof *k->dec_slots)))
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    for (int j = 0; j < 2; j++) {
        char name[512];
        snprintf(name, sizeof name, "%s%s", k->desc->name, parts[j]);
        s2_status st = s2_kernel_get(ctx, k->mod->cu, name, &k->dec_fn[j]);
        if (st != S2_OK)
            return st;
    }
    return S2_OK;
}

static void decode_free(s2_attn_kernel *k)
{
    for (int i = 0; k->dec_slots && i < DEC_CACHE; i++)
        if (k->dec_slots[i].last_use)
            s2_mem_free(NULL, k->mod->dev, k->dec_slots[i].buf);
    free(k->dec_slots);
    k->dec_slots = NULL;
    for (int j = 0; j < 2; j++)
        s2_kernel_free(k->dec_fn[j]);
}

/* Lists are built for more blocks than asked (a list serves every shorter
 * length: the kernel masks keys past seq_len): up to the next multiple of a
 * quarter of the power of two below (at least 64 blocks), so a growing
 * max_seq_len rebuilds them about 4 times per doubling (at 128K, block 64:
 * 19 MB, 0.4 s to build) with at most 25% more entries. */
static int64_t dec_q_blocks(const s2_attn_kernel *k, int64_t max_seq_len)
{
    int bs = k->pattern->block_size;
    int64_t blocks = s2_cdiv(max_seq_len, bs), step = 64;
    while (step * 8 <= blocks)
        step *= 2;
    blocks = s2_cdiv(blocks, step) * step;
    return s2_max64(1, s2_min64(blocks, k->max_kv_len / bs));
}

static s2_status dec_build(s2_ctx *ctx, s2_attn_kernel *k, int64_t q_blocks, dec_slot *slot)
{
    s2_device *dev = k->mod->dev;
    s2_decode_lists *l = NULL;
    s2_packed_decode_lists pk = {0};
    s2_devptr buf = 0;
    s2_status st = s2_decode_lists_build(ctx, k->pattern, q_blocks * k->pattern->block_size, &l);
    if (st == S2_OK)
        st = s2_decode_lists_pack(ctx, l, &pk);
    if (st == S2_OK)
        st = s2_mem_alloc(ctx, dev, pk.size, &buf);
    if (st == S2_OK)
        st = s2_memcpy_h2d(ctx, dev, buf, pk.data, pk.size);
    if (st == S2_OK)
        st = s2_stream_synchronize(ctx, dev, NULL);
    if (st == S2_OK) {
        *slot = (dec_slot){.q_blocks = l->q_blocks, .buf = buf, .class_of_kv_head = buf + pk.class_off,
                           .offsets = buf + pk.offsets_off, .entries = buf + pk.entries_off, .max_list = l->max_list};
        buf = 0;
    }
    s2_mem_free(NULL, dev, buf);
    s2_packed_decode_lists_free(&pk);
    s2_decode_lists_free(l);
    return st;
}

/* Called with k->lock held. */
static s2_status dec_get(s2_ctx *ctx, s2_attn_kernel *k, int64_t max_seq_len, dec_slot **out)
{
    int64_t qb = dec_q_blocks(k, max_seq_len);
    dec_slot *victim = &k->dec_slots[0];
    for (int i = 0; i < DEC_CACHE; i++) {
        dec_slot *s = &k->dec_slots[i];
        if (s->last_use && s->q_blocks == qb) {
            s->last_use = ++k->tick;
            k->stats.hits++;
            *out = s;
            return S2_OK;
        }
        if (s->last_use < victim->last_use)
            victim = s;
    }
    k->stats.misses++;
    if (victim->last_use) {
        s2_status st = s2_device_synchronize(ctx, k->mod->dev);
        if (st != S2_OK)
            return st;
        s2_mem_free(NULL, k->mod->dev, victim->buf);
        memset(victim, 0, sizeof *victim);
        k->stats.evictions++;
    }
    s2_status st = dec_build(ctx, k, qb, victim);
    if (st != S2_OK)
        return st;
    victim->last_use = ++k->tick;
    *out = victim;
    return S2_OK;
}

/* Splits: the fewest that fill the resident CTA slots (SMs x CTAs per SM)
 * to at least 90% in whole waves (B = 1 at 32 kv heads on 132 SMs x 2: 8
 * splits, 256 CTAs, one wave; 9 made a second wave of 24 CTAs and measured
 * 0.099 ms at 128K, bench/RESULTS.md), at most one per 4 key tiles of the
 * longest list. */
/* split counters in the workspace: one per (sequence, kv head), see dec_workspace_of */
#define DEC_COUNTERS 65536

static s2_status dec_splits(s2_ctx *ctx, s2_attn_kernel *k, const s2_attn_decode_args *a, int64_t max_list, int *out)
{
    int64_t ctas = (int64_t)a->batch * a->kv_heads;
    if (a->splits > 1 && ctas > DEC_COUNTERS)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "splits %d with batch x kv_heads = %lld above %d", a->splits,
                       (long long)ctas, DEC_COUNTERS);
    if (a->splits > 0 || ctas > DEC_COUNTERS) {
        *out = a->splits > 0 ? a->splits : 1;
        return S2_OK;
    }
    s2_kernel_attrs at;
    s2_status st = s2_kernel_get_attrs(ctx, k->dec_fn[0], &at);
    if (st != S2_OK)
        return st;
    int warps = k->desc->spec.num_warps;
    int warp_regs = ((at.num_regs * 32 + 255) / 256) * 256;
    int by_regs = warp_regs ? 65536 / (warps * warp_regs) : 32;
    int by_smem = 228 * 1024 / (k->desc->smem_bytes + at.static_smem_bytes + 1024);
    int per_sm = by_regs < by_smem ? by_regs : by_smem;
    per_sm = per_sm < 1 ? 1 : per_sm;
    int64_t target = (int64_t)s2_device_get_info(k->mod->dev)->sm_count * per_sm;
    int64_t tiles = s2_cdiv(max_list * (k->pattern->block_size / 16), warps);
    int64_t cap = s2_min64(DEC_MAX_SPLITS, s2_max64(1, tiles / 4)), best = 1;
    double best_eff = 0;
    for (int64_t s = 1; s <= cap; s++) {
        int64_t n = ctas * s;
        double eff = (double)n / (double)(s2_cdiv(n, target) * target);
        if (eff > best_eff + 1e-9) {
            best_eff = eff;
            best = s;
        }
        if (eff >= 0.9)
            break;
    }
    *out = (int)best;
    return S2_OK;
}

/* Workspace: the split counters first, i32 [B][kv_heads] in a region of a
 * fixed DEC_COUNTERS slots, then partial o fp32 [splits][B][n][H][D] and
 * partial lse fp32 [splits][B][H][n], 16-byte aligned.  The counters must be
 * zero before a launch and every launch leaves them zero, but the partials are
 * left behind: the counters' place may not depend on the shapes, or a launch
 * of other shapes would find old partials where it expects zero counters. */
typedef struct dec_ws {
    size_t o_off, lse_off, bytes;
} dec_ws;

static dec_ws dec_workspace_of(const s2_attn_decode_args *a, int splits)
{
    dec_ws w = {0};
    if (splits <= 1)
        return w;
    size_t rows = (size_t)splits * (size_t)a->batch * (size_t)a->n_new * (size_t)a->heads;
    w.o_off = DEC_COUNTERS * sizeof(int32_t);
    w.lse_off = w.o_off + align16(rows * (size_t)a->head_dim * sizeof(float));
    w.bytes = w.lse_off + align16(rows * sizeof(float));
    return w;
}

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

static s2_status dec_check_sizes(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_decode_args *a)
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
    if (!isfinite(a->scale))
        return s2_fail(ctx, S2_ERR_INVALID, "scale %g is not finite", (double)a->scale);
    return S2_OK;
}

/* Host-side checks; bytes: q, o, k pool, v pool, table, seq_lens, lse. */
static s2_status dec_check_host(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_decode_args *a, size_t bytes[7])
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
    s2_status st = dec_check_sizes(ctx, k, a);
    for (int i = 0; i < 4 && st == S2_OK; i++)
        st = check_strides(ctx, &t[i]);
    if (st == S2_OK)
        st = check_no_overlap(ctx, &t[1], a->head_dim);
    if (st == S2_OK)
        st = dec_check_table(ctx, a, &bytes[4]);
    if (st != S2_OK)
        return st;
    for (int i = 0; i < 4; i++)
        if (t[i].ptr % 16 != 0)
            return s2_fail(ctx, S2_ERR_ALIGNMENT, "%s: 0x%llx is not 16-byte aligned", t[i].name,
                           (unsigned long long)t[i].ptr);
    if (a->lse % 4 || a->block_table % 4 || a->seq_lens % 4 || a->workspace % 16)
        return s2_fail(ctx, S2_ERR_ALIGNMENT, "lse, block_table, seq_lens must be 4-byte aligned, workspace 16-byte");
    size_t es = s2_dtype_size(a->dtype);
    for (int i = 0; i < 4; i++)
        if ((st = tensor_bytes(ctx, &t[i], a->head_dim, es, &bytes[i])) != S2_OK)
            return st;
    bytes[5] = (size_t)a->batch * sizeof(int32_t);
    bytes[6] = (size_t)a->batch * (size_t)a->heads * (size_t)a->n_new * sizeof(float);
    return S2_OK;
}

static s2_status dec_check_device(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_decode_args *a,
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
    if (ws_bytes == 0)
        return S2_OK;
    if (!a->workspace)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "workspace is null, but %zu bytes are needed (s2_attn_decode_workspace)",
                       ws_bytes);
    return s2_check_device_ptr(ctx, k->mod->dev, a->workspace, ws_bytes, 16, "workspace");
}

s2_status s2_attn_decode_splits(s2_ctx *ctx, s2_attn_kernel *k, const s2_attn_decode_args *a, int *splits)
{
    size_t b7[7];
    if (!splits)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_decode_splits: splits is NULL");
    *splits = 1;
    s2_status st = dec_check_host(ctx, k, a, b7);
    if (st != S2_OK)
        return st;
    mtx_lock(&k->lock);
    dec_slot *slot = NULL;
    st = dec_get(ctx, k, a->max_seq_len, &slot);
    if (st == S2_OK)
        st = dec_splits(ctx, k, a, slot->max_list, splits);
    mtx_unlock(&k->lock);
    return st;
}

s2_status s2_attn_decode_workspace(s2_ctx *ctx, s2_attn_kernel *k, const s2_attn_decode_args *a, size_t *bytes)
{
    if (!bytes)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_decode_workspace: bytes is NULL");
    int splits = 1;
    s2_status st = s2_attn_decode_splits(ctx, k, a, &splits);
    *bytes = st == S2_OK ? dec_workspace_of(a, splits).bytes : 0;
    return st;
}

static s2_status dec_launch(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_decode_args *a,
                            const dec_slot *s, int splits)
{
    s2_devptr q = a->q, kp = a->k_pages, vp = a->v_pages, o = a->o, lse = a->lse;
    dec_ws w = dec_workspace_of(a, splits);
    s2_devptr ws_o = splits > 1 ? a->workspace + w.o_off : 0;
    s2_devptr ws_lse = splits > 1 ? a->workspace + w.lse_off : 0;
    s2_devptr counters = splits > 1 ? a->workspace : 0;
    int64_t st[12];
    memcpy(st, a->q_stride, sizeof a->q_stride);
    memcpy(st + 3, a->k_stride, sizeof a->k_stride);
    memcpy(st + 6, a->v_stride, sizeof a->v_stride);
    memcpy(st + 9, a->o_stride, sizeof a->o_stride);
    s2_devptr table = a->block_table, seq_lens = a->seq_lens;
    int64_t tbs = a->table_stride[0], ths = a->table_stride[1];
    int32_t n = a->n_new, page = a->page_size, qb = (int32_t)s->q_blocks, sp = splits;
    double scale = a->scale != 0.0f ? (double)a->scale : 1.0 / sqrt((double)a->head_dim);
    float scale_log2 = (float)(scale * 1.4426950408889634);
    s2_devptr cls = s->class_of_kv_head, offs = s->offsets, ent = s->entries;
    void *args[] = {&q, &kp, &vp, &o, &lse, &ws_o, &ws_lse,
                    &st[0], &st[1], &st[2], &st[3], &st[4], &st[5], &st[6], &st[7], &st[8], &st[9], &st[10], &st[11],
                    &table, &tbs, &ths, &seq_lens, &n, &page, &scale_log2, &cls, &offs, &ent, &qb, &sp, &counters};
    s2_launch_cfg cfg = {.grid = {(uint32_t)splits, (uint32_t)a->kv_heads, (uint32_t)a->batch},
                         .block = {(uint32_t)k->desc->threads, 1, 1},
                         .smem_bytes = (uint32_t)k->desc->smem_bytes,
                         .stream = stream};
    return s2_kernel_launch(ctx, k->dec_fn[0], &cfg, args);
}

s2_status s2_attn_decode(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_decode_args *a)
{
    size_t bytes[7];
    s2_status st = dec_check_host(ctx, k, a, bytes);
    if (st != S2_OK)
        return st;
    mtx_lock(&k->lock);
    dec_slot *slot = NULL;
    int splits = 1;
    st = dec_get(ctx, k, a->max_seq_len, &slot);
    if (st == S2_OK)
        st = dec_splits(ctx, k, a, slot->max_list, &splits);
    if (st == S2_OK)
        st = dec_check_device(ctx, k, a, bytes, dec_workspace_of(a, splits).bytes);
    if (st == S2_OK)
        st = dec_launch(ctx, k, stream, a, slot, splits);
    mtx_unlock(&k->lock);
    return st;
}

s2_status s2_combine_check(s2_ctx *ctx, const s2_attn_kernel *k, const s2_combine_args *a)
{
    if (!k || !a)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_combine: %s is NULL", !k ? "kernel" : "args");
    if (k->desc->spec.kind != S2_KERNEL_DECODE)
        return s2_fail(ctx, S2_ERR_INVALID, "kernel %s is not a decode kernel (it holds the combine)", k->desc->name);
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
    if (st == S2_OK)
        st = check_no_overlap(ctx, &out, a->head_dim);
    if (st != S2_OK)
        return st;
    size_t es = s2_dtype_size(a->dtype), ib, ob;
    if ((st = tensor_bytes(ctx, &in, a->head_dim, es, &ib)) != S2_OK || (st = tensor_bytes(ctx, &out, a->head_dim, es, &ob)) != S2_OK)
        return st;
    size_t lb = (size_t)a->batch * (size_t)a->heads * (size_t)a->seq * sizeof(float);
    if (a->o % 16 || a->lse % 4)
        return s2_fail(ctx, S2_ERR_ALIGNMENT, "o must be 16-byte aligned, lse 4-byte");
    for (int i = 0; i < a->n; i++) {
        char name[32];
        if (!a->o_in[i] || !a->lse_in[i])
            return s2_fail(ctx, S2_ERR_NULL_ARG, "input %d: null %s", i, !a->o_in[i] ? "o_in" : "lse_in");
        if (a->o_in[i] % 16 || a->lse_in[i] % 4)
            return s2_fail(ctx, S2_ERR_ALIGNMENT, "input %d: o_in must be 16-byte aligned, lse_in 4-byte", i);
        snprintf(name, sizeof name, "o_in[%d]", i);
        if ((st = s2_check_device_ptr(ctx, k->mod->dev, a->o_in[i], ib, 16, name)) != S2_OK)
            return st;
        snprintf(name, sizeof name, "lse_in[%d]", i);
        if ((st = s2_check_device_ptr(ctx, k->mod->dev, a->lse_in[i], lb, 4, name)) != S2_OK)
            return st;
    }
    if ((st = s2_check_device_ptr(ctx, k->mod->dev, a->o, ob, 16, "o")) != S2_OK)
        return st;
    return a->lse ? s2_check_device_ptr(ctx, k->mod->dev, a->lse, lb, 4, "lse") : S2_OK;
}

s2_status s2_combine(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_combine_args *a)
{
    s2_status st = s2_combine_check(ctx, k, a);
    if (st != S2_OK)
        return st;
    uint64_t table[2 * S2_COMBINE_MAX_INPUTS] = {0};
    for (int i = 0; i < a->n; i++) {
        table[i] = a->o_in[i];
        table[S2_COMBINE_MAX_INPUTS + i] = a->lse_in[i];
    }
    s2_devptr obase = 0, lbase = 0, out = a->o, lse = a->lse;
    int64_t opart = 0, lpart = 0;
    int64_t is[3] = {a->in_stride[0], a->in_stride[1], a->in_stride[2]};
    int64_t os[3] = {a->o_stride[0], a->o_stride[1], a->o_stride[2]};
    int32_t n = a->n, S = (int32_t)a->seq, H = a->heads;
    int32_t rows = (int32_t)((int64_t)a->batch * a->seq * a->heads);
    void *args[] = {table, &obase, &lbase, &opart, &lpart, &is[0], &is[1], &is[2], &out, &os[0], &os[1], &os[2],
                    &lse, &n, &S, &H, &rows};
    int rpc = 128 / (a->head_dim / 8);
    s2_launch_cfg cfg = {.grid = {(uint32_t)s2_cdiv(rows, rpc), 1, 1}, .block = {128, 1, 1}, .stream = stream};
    return s2_kernel_launch(ctx, k->dec_fn[1], &cfg, args);
}
