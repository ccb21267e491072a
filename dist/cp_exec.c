/* The context-parallel executor (cp.h): the planned KV blocks packed per
 * peer (NAME_rows), one NCCL message per peer on a communication stream,
 * attention over local then received blocks on the caller's stream, the
 * LSE merge, and the backward's dK/dV of received blocks sent back and
 * summed at their owner in rank order. */
#include "cp_internal.h"
#include "dist.h"
#include "nccl_api.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

struct s2_cp_comm {
    const s2_nccl_api *n;
    s2_device *dev;
    ncclComm_t comm;
    bool owned;
    int rank, size;
};

s2_status s2_cp_unique_id(s2_ctx *ctx, s2_cp_id *id)
{
    if (!id)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_cp_unique_id: id is NULL");
    s2_status st;
    const s2_nccl_api *n = s2_nccl_api_get(ctx, &st);
    if (!n)
        return st;
    _Static_assert(sizeof(ncclUniqueId) == sizeof(s2_cp_id), "ncclUniqueId is 128 bytes");
    ncclUniqueId u;
    ncclResult_t r = n->GetUniqueId(&u);
    if (r != ncclSuccess)
        return s2_nccl_fail(ctx, n, r, "ncclGetUniqueId");
    memcpy(id->bytes, &u, sizeof u);
    return S2_OK;
}

static s2_status comm_new(s2_ctx *ctx, s2_device *dev, s2_cp_comm **out, const s2_nccl_api **n)
{
    if (!out || !dev)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "the communicator: %s is NULL", !out ? "out" : "device");
    *out = NULL;
    s2_status st;
    if (!(*n = s2_nccl_api_get(ctx, &st)))
        return st;
    if (!(*out = calloc(1, sizeof **out)))
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    (*out)->n = *n, (*out)->dev = dev;
    return S2_OK;
}

/* NCCL calls use the current CUDA context: dev's, made current by a runtime call on this thread
 * (s2_device_synchronize pushes and pops it, so the primary context is set by the CUDA runtime NCCL uses). */
s2_status s2_cp_comm_init(s2_ctx *ctx, s2_device *dev, const s2_cp_id *id, int ranks, int rank, s2_cp_comm **out)
{
    if (!id)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_cp_comm_init: id is NULL");
    if (ranks < 1 || ranks > S2_CP_MAX_RANKS || rank < 0 || rank >= ranks)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cp_comm_init: rank %d of %d ranks", rank, ranks);
    const s2_nccl_api *n;
    s2_status st = comm_new(ctx, dev, out, &n);
    if (st != S2_OK)
        return st;
    ncclUniqueId u;
    memcpy(&u, id->bytes, sizeof u);
    ncclResult_t r = n->CommInitRank(&(*out)->comm, ranks, u, rank);
    if (r != ncclSuccess) {
        free(*out);
        *out = NULL;
        return s2_nccl_fail(ctx, n, r, "ncclCommInitRank");
    }
    (*out)->owned = true, (*out)->rank = rank, (*out)->size = ranks;
    return S2_OK;
}

s2_status s2_cp_comm_wrap(s2_ctx *ctx, s2_device *dev, void *nccl_comm, s2_cp_comm **out)
{
    if (!nccl_comm)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_cp_comm_wrap: the communicator is NULL");
    const s2_nccl_api *n;
    s2_status st = comm_new(ctx, dev, out, &n);
    if (st != S2_OK)
        return st;
    s2_cp_comm *c = *out;
    c->comm = nccl_comm;
    ncclResult_t r = n->CommUserRank(c->comm, &c->rank);
    if (r == ncclSuccess)
        r = n->CommCount(c->comm, &c->size);
    if (r != ncclSuccess) {
        free(c);
        *out = NULL;
        return s2_nccl_fail(ctx, n, r, "ncclCommUserRank/ncclCommCount");
    }
    return S2_OK;
}

void s2_cp_comm_free(s2_cp_comm *c)
{
    if (!c)
        return;
    if (c->owned)
        c->n->CommDestroy(c->comm);
    free(c);
}

int s2_cp_comm_rank(const s2_cp_comm *c) { return c ? c->rank : -1; }
int s2_cp_comm_size(const s2_cp_comm *c) { return c ? c->size : 0; }

/* One operation's plan on this rank (the forward's, the backward's). */
typedef struct cp_op {
    s2_cp_plan *plan;
    int64_t recv;                 /* its receive tokens per kv head */
    cp_pack pack;                 /* its messages per peer and row tables */
    s2_devptr tab[5];             /* the tables on the device: gather, scatter, ret, sum dK, sum dV */
    s2_attn_sched *full, *local, *remote;   /* remote NULL when nothing is received */
} cp_op;

enum { TAB_GATHER, TAB_SCATTER, TAB_RET, TAB_SUM_DK, TAB_SUM_DV };

struct s2_cp_exec {
    s2_cp_comm *comm;
    s2_attn_kernel *fwd, *bwd;
    const s2_pattern *p;
    s2_device *dev;
    int batch, heads, kv_heads, D;
    s2_dtype dtype;
    size_t elem;
    ncclDataType_t nt;
    s2_cp_sizes sizes;
    cp_op op[2];                  /* forward, backward (op[1].plan may be op[0].plan's twin) */
    bool same_plan;
    void *comm_stream;
    s2_event *ev_in, *ev_comm;
    /* K then V (dK then dV, then the returned partials), rows of D; the packed messages; the tables */
    s2_devptr kv, dkv, sendbuf, recvbuf, tables, parts, work;
    int64_t half_rows;            /* V's first row in kv (dV's in dkv) */
    s2_cp_traffic traffic[2];     /* the last forward's, backward's */
    bool timing;                  /* s2_cp_exec_set_timing */
    bool timed[2];                /* a call ran with every event recorded */
    bool ran[2][S2_CP_PHASES];
    s2_event *tev[2][S2_CP_PHASES][2], *t0[2], *t1[2];
};

static void op_free(cp_op *o, bool plan_shared)
{
    s2_attn_sched_free(o->full), s2_attn_sched_free(o->local), s2_attn_sched_free(o->remote);
    s2_cp_pack_free(&o->pack);
    if (!plan_shared)
        s2_cp_plan_free(o->plan);
}

void s2_cp_exec_free(s2_cp_exec *e)
{
    if (!e)
        return;
    op_free(&e->op[1], e->same_plan);
    op_free(&e->op[0], false);
    s2_devptr bufs[] = {e->kv, e->dkv, e->sendbuf, e->recvbuf, e->tables, e->parts, e->work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        s2_mem_free(NULL, e->dev, bufs[i]);
    s2_event_free(e->ev_in), s2_event_free(e->ev_comm);
    for (int w = 0; w < 2; w++) {
        s2_event_free(e->t0[w]), s2_event_free(e->t1[w]);
        for (int i = 0; i < S2_CP_PHASES; i++)
            s2_event_free(e->tev[w][i][0]), s2_event_free(e->tev[w][i][1]);
    }
    s2_stream_destroy(NULL, e->dev, e->comm_stream);
    free(e);
}

const s2_cp_plan *s2_cp_exec_plan(const s2_cp_exec *e, bool backward)
{
    return !e ? NULL : backward ? (e->bwd ? e->op[1].plan : NULL) : e->op[0].plan;
}
const s2_cp_sizes *s2_cp_exec_sizes(const s2_cp_exec *e) { return e ? &e->sizes : NULL; }

/* The kernel's forward tile, from its own schedule of one block. */
static s2_status tile_of(s2_ctx *ctx, s2_attn_kernel *k, const s2_pattern *p, s2_tile_spec *t)
{
    s2_schedule *s = NULL;
    s2_status st = s2_attn_kernel_schedule(ctx, k, p->block_size, p->block_size, &s);
    if (st == S2_OK)
        *t = (s2_tile_spec){s->geom.block_m, s->geom.block_n};
    s2_schedule_free(s);
    return st;
}

static s2_status op_new(s2_ctx *ctx, s2_cp_exec *e, s2_attn_kernel *k, const s2_cp_plan_args *pa, cp_op *o)
{
    int rank = e->comm->rank;
    s2_status st = s2_cp_plan_new(ctx, e->p, pa, &o->plan);
    if (st != S2_OK)
        return st;
    o->recv = s2_cp_plan_recv_tokens(o->plan, rank);
    int64_t sst[2], slen[2];
    e->sizes.own_tokens = 0;
    for (int i = 0, n = s2_cp_plan_shard(o->plan, rank, sst, slen); i < n; i++)
        e->sizes.own_tokens += slen[i];
    const s2_layout *lay = s2_cp_plan_layout(o->plan, rank);
    const s2_schedule *full = s2_cp_plan_schedule(o->plan, rank, false);
    if (!lay || !full)
        return s2_fail(ctx, S2_ERR_INTERNAL, "the plan of rank %d has no schedule", rank);
    int64_t kv_len = o->recv + e->sizes.own_tokens;
    if ((st = s2_attn_sched_new(ctx, k, e->sizes.own_tokens, kv_len, full, &o->full)) != S2_OK)
        return st;
    if (o->recv == 0)
        return S2_OK;
    /* the forward's two launches: own keys (after the receive buffer), then the received ones */
    s2_schedule *part = NULL;
    if ((st = s2_dist_split_keys(ctx, full, o->recv, kv_len, &part)) == S2_OK)
        st = s2_attn_sched_new(ctx, k, e->sizes.own_tokens, kv_len, part, &o->local);
    s2_schedule_free(part);
    part = NULL;
    if (st == S2_OK && (st = s2_dist_split_keys(ctx, full, 0, o->recv, &part)) == S2_OK)
        st = s2_attn_sched_new(ctx, k, e->sizes.own_tokens, kv_len, part, &o->remote);
    s2_schedule_free(part);
    return st;
}

static s2_status alloc0(s2_ctx *ctx, s2_device *dev, size_t bytes, s2_devptr *p)
{
    if (bytes == 0)
        return S2_OK;
    s2_status st = s2_mem_alloc(ctx, dev, bytes, p);
    /* zero once: receive padding and segment rows never written stay zero (finite for the kernels) */
    return st == S2_OK ? s2_memset_d8(ctx, dev, *p, 0, bytes) : st;
}

/* Operation o's packing in the executor's layout (its rows from sizes.recv_tokens - o->recv in). */
static s2_status pack_new(s2_ctx *ctx, s2_cp_exec *e, cp_op *o, bool backward)
{
    cp_geom g = {e->batch, e->kv_heads, e->sizes.recv_tokens + e->sizes.own_tokens, e->sizes.recv_tokens - o->recv,
                 o->recv, e->sizes.own_tokens};
    return s2_cp_pack_new(ctx, o->plan, e->p, e->comm->rank, &g, backward, &o->pack);
}

static const cp_table *op_table(const cp_op *o, int i)
{
    const cp_table *t[5] = {&o->pack.gather, &o->pack.scatter, &o->pack.ret, &o->pack.sum[0], &o->pack.sum[1]};
    return t[i];
}

/* Every operation's tables in one allocation, and a check that the kernels hold NAME_rows. */
static s2_status tables_upload(s2_ctx *ctx, s2_cp_exec *e)
{
    s2_attn_kernel *ks[2] = {e->fwd, e->bwd};
    size_t bytes = 0;
    for (int w = 0; w < 2; w++) {
        if (!ks[w])
            continue;
        s2_rows_args probe = {.head_dim = e->D, .dtype = e->dtype, .n_src = 1};   /* no runs: checks only */
        s2_status st = s2_rows(ctx, ks[w], NULL, &probe);
        if (st != S2_OK)
            return st;
        for (int i = 0; i < 5; i++)
            bytes += (size_t)op_table(&e->op[w], i)->n * (size_t)(2 + op_table(&e->op[w], i)->n_src) * sizeof(int64_t);
    }
    s2_status st = alloc0(ctx, e->dev, bytes, &e->tables);
    size_t off = 0;
    for (int w = 0; st == S2_OK && w < 2; w++)
        for (int i = 0; ks[w] && st == S2_OK && i < 5; i++) {
            const cp_table *t = op_table(&e->op[w], i);
            size_t b = (size_t)t->n * (size_t)(2 + t->n_src) * sizeof(int64_t);
            e->op[w].tab[i] = e->tables + off;
            if (b > 0)
                st = s2_memcpy_h2d(ctx, e->dev, e->tables + off, t->runs, b);
            off += b;
        }
    return st;
}

s2_status s2_cp_exec_new(s2_ctx *ctx, s2_cp_comm *comm, s2_attn_kernel *fwd, s2_attn_kernel *bwd,
                         const s2_cp_exec_args *args, s2_cp_exec **out)
{
    if (!out || !comm || !fwd || !args)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_cp_exec_new: %s is NULL",
                       !out ? "out" : !comm ? "comm" : !fwd ? "the forward kernel" : "args");
    *out = NULL;
    const s2_manifest_kernel *fd = s2_attn_kernel_desc(fwd), *bd = bwd ? s2_attn_kernel_desc(bwd) : NULL;
    if (fd->spec.kind != S2_KERNEL_FWD || (bd && bd->spec.kind != S2_KERNEL_BWD))
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cp_exec_new: %s is not a %s kernel", bd && fd->spec.kind == S2_KERNEL_FWD
                       ? bd->name : fd->name, bd && fd->spec.kind == S2_KERNEL_FWD ? "backward" : "forward");
    if (bd && (bd->spec.dtype != fd->spec.dtype || bd->spec.head_dim != fd->spec.head_dim ||
               strcmp(s2_attn_kernel_pattern(bwd)->name, s2_attn_kernel_pattern(fwd)->name) != 0))
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cp_exec_new: %s and %s differ in pattern, dtype or head dim",
                       fd->name, bd->name);
    if (args->batch < 1 || args->batch > 65535)
        return s2_fail(ctx, S2_ERR_SHAPE, "s2_cp_exec_new: batch %d outside 1..65535", args->batch);
    s2_cp_exec *e = calloc(1, sizeof *e);
    if (!e)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    e->comm = comm, e->fwd = fwd, e->bwd = bwd, e->dev = comm->dev, e->p = s2_attn_kernel_pattern(fwd);
    e->batch = args->batch, e->heads = e->p->heads, e->kv_heads = e->p->kv_heads, e->D = fd->spec.head_dim;
    e->dtype = fd->spec.dtype, e->elem = s2_dtype_size(e->dtype);
    e->nt = e->dtype == S2_DTYPE_BF16 ? ncclBfloat16 : e->dtype == S2_DTYPE_F16 ? ncclFloat16 : ncclFloat32;
    s2_status st = S2_OK;
    if (e->dtype != S2_DTYPE_BF16 && e->dtype != S2_DTYPE_F16)
        st = s2_fail(ctx, S2_ERR_UNSUPPORTED, "s2_cp_exec_new: dtype %s (bf16 and f16 only)", s2_dtype_name(e->dtype));
    s2_cp_plan_args pa = {.seq_len = args->seq_len, .ranks = comm->size, .sharding = args->sharding,
                          .schedules = true};
    s2_tile_spec tf = {0}, tb = {0};
    if (st == S2_OK)
        st = tile_of(ctx, fwd, e->p, &tf);
    if (st == S2_OK && bwd)
        st = tile_of(ctx, bwd, e->p, &tb);
    if (st == S2_OK)
        pa.spec = tf;
    if (st == S2_OK)
        st = op_new(ctx, e, fwd, &pa, &e->op[0]);
    if (st == S2_OK && bwd) {
        pa.spec = tb;
        st = op_new(ctx, e, bwd, &pa, &e->op[1]);
    }
    if (st == S2_OK)
        st = s2_cp_sizes_of(ctx, e->op[0].plan, bwd ? e->op[1].plan : NULL, e->p, comm->rank, e->batch, e->D, e->dtype,
                            &e->sizes);
    for (int w = 0; st == S2_OK && w < (bwd ? 2 : 1); w++)
        st = pack_new(ctx, e, &e->op[w], w == 1);
    if (st == S2_OK && bwd)
        st = s2_attn_sched_backward_workspace(ctx, e->op[1].full, e->batch, &e->sizes.workspace_bytes);
    size_t rb = (size_t)e->D * e->elem;
    int64_t sends = 0, recvs = 0;
    for (int w = 0; w < (bwd ? 2 : 1); w++) {
        sends = e->op[w].pack.send_total > sends ? e->op[w].pack.send_total : sends;
        recvs = e->op[w].pack.recv_total > recvs ? e->op[w].pack.recv_total : recvs;
    }
    e->half_rows = (int64_t)e->batch * e->kv_heads * (e->sizes.recv_tokens + e->sizes.own_tokens);
    if (st == S2_OK)
        st = alloc0(ctx, e->dev, e->sizes.kv_bytes, &e->kv);
    if (st == S2_OK)
        st = alloc0(ctx, e->dev, (size_t)sends * rb, &e->sendbuf);
    if (st == S2_OK)
        st = alloc0(ctx, e->dev, (size_t)recvs * rb, &e->recvbuf);
    if (st == S2_OK && e->op[0].remote)
        st = alloc0(ctx, e->dev, e->sizes.partial_bytes, &e->parts);
    if (st == S2_OK && bwd && (st = alloc0(ctx, e->dev, e->sizes.grad_bytes, &e->dkv)) == S2_OK)
        st = alloc0(ctx, e->dev, e->sizes.workspace_bytes, &e->work);
    if (st == S2_OK)
        st = tables_upload(ctx, e);
    if (st == S2_OK)
        st = s2_stream_create(ctx, e->dev, &e->comm_stream);
    if (st == S2_OK)
        st = s2_event_create(ctx, e->dev, &e->ev_in);
    if (st == S2_OK)
        st = s2_event_create(ctx, e->dev, &e->ev_comm);
    if (st != S2_OK) {
        s2_cp_exec_free(e);
        return st;
    }
    *out = e;
    return S2_OK;
}

/* ---- the buffers' layout: per (batch, kv head) rmax + own rows of D; operation o's rows start rmax - recv in ---- */

static int64_t head_rows(const s2_cp_exec *e) { return e->sizes.recv_tokens + e->sizes.own_tokens; }

/* Element offset of row `row` of operation o's layout (recv slots then own tokens) for (b, h). */
static int64_t row_at(const s2_cp_exec *e, const cp_op *o, int b, int h, int64_t row)
{
    return (((int64_t)b * e->kv_heads + h) * head_rows(e) + e->sizes.recv_tokens - o->recv + row) * e->D;
}

static s2_devptr at(const s2_cp_exec *e, s2_devptr base, int64_t elems) { return base + (s2_devptr)elems * e->elem; }

static void kv_strides(const s2_cp_exec *e, int64_t s[3])
{
    s[0] = (int64_t)e->kv_heads * head_rows(e) * e->D, s[1] = e->D, s[2] = head_rows(e) * e->D;
}

/* The caller's K and V (own tokens) into the buffers, on stream. */
static s2_status copy_in(s2_ctx *ctx, s2_cp_exec *e, const cp_op *o, void *stream, uint64_t k, const int64_t *ks,
                         uint64_t v, const int64_t *vs)
{
    s2_status st = S2_OK;
    size_t rb = (size_t)e->D * e->elem;
    for (int b = 0; st == S2_OK && b < e->batch; b++)
        for (int h = 0; st == S2_OK && h < e->kv_heads; h++) {
            int64_t dst = row_at(e, o, b, h, o->recv);
            st = s2_memcpy_2d_async(ctx, e->dev, at(e, e->kv, dst), rb, at(e, k, b * ks[0] + h * ks[2]),
                                    (size_t)ks[1] * e->elem, rb, (size_t)e->sizes.own_tokens, stream);
            if (st == S2_OK)
                st = s2_memcpy_2d_async(ctx, e->dev, at(e, e->kv, dst + e->half_rows * e->D), rb, at(e, v, b * vs[0] + h * vs[2]),
                                        (size_t)vs[1] * e->elem, rb, (size_t)e->sizes.own_tokens, stream);
        }
    return st;
}

/* ---- timing (s2_cp_exec_set_timing): events around each phase of call `w` (0 forward, 1 backward) ---- */

/* The start (end) of phase ph of call w on stream; nothing when timing is off. */
static s2_status mark(s2_ctx *ctx, s2_cp_exec *e, int w, s2_cp_phase ph, int end, void *stream)
{
    if (!e->timing)
        return S2_OK;
    e->ran[w][ph] = true;
    return s2_event_record(ctx, e->tev[w][ph][end], stream);
}

/* A call's first (last) event on the caller's stream; the first clears the phases run and the counts. */
static s2_status call_edge(s2_ctx *ctx, s2_cp_exec *e, int w, int end, void *stream)
{
    if (!end) {
        int64_t calls = e->traffic[w].calls;
        e->traffic[w] = (s2_cp_traffic){.calls = calls};
        e->timed[w] = false;
        memset(e->ran[w], 0, sizeof e->ran[w]);
    } else {
        e->traffic[w].calls++;
    }
    if (!e->timing)
        return S2_OK;
    s2_status st = s2_event_record(ctx, end ? e->t1[w] : e->t0[w], stream);
    if (st == S2_OK && end)
        e->timed[w] = true;
    return st;
}

s2_status s2_cp_exec_set_timing(s2_ctx *ctx, s2_cp_exec *e, bool on)
{
    if (!e)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_cp_exec_set_timing: the executor is NULL");
    s2_status st = S2_OK;
    for (int w = 0; on && st == S2_OK && w < 2; w++) {   /* made once, kept until the executor is freed */
        if (!e->t0[w] && (st = s2_event_create(ctx, e->dev, &e->t0[w])) != S2_OK)
            break;
        if (!e->t1[w] && (st = s2_event_create(ctx, e->dev, &e->t1[w])) != S2_OK)
            break;
        for (int i = 0; st == S2_OK && i < 2 * S2_CP_PHASES; i++)
            if (!e->tev[w][i / 2][i % 2])
                st = s2_event_create(ctx, e->dev, &e->tev[w][i / 2][i % 2]);
    }
    if (st != S2_OK)
        return st;
    e->timing = on;
    e->timed[0] = e->timed[1] = false;
    return S2_OK;
}

s2_status s2_cp_exec_traffic(s2_ctx *ctx, const s2_cp_exec *e, bool backward, s2_cp_traffic *out)
{
    if (!e || !out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_cp_exec_traffic: %s is NULL", !e ? "the executor" : "out");
    *out = e->traffic[backward];
    return S2_OK;
}

s2_status s2_cp_exec_last_timeline(s2_ctx *ctx, s2_cp_exec *e, bool backward, s2_cp_timeline *out)
{
    if (!e || !out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_cp_exec_last_timeline: %s is NULL", !e ? "the executor" : "out");
    int w = backward;
    if (!e->timing || !e->timed[w])
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cp_exec_last_timeline: %s", !e->timing ? "timing is off"
                       : backward ? "no backward ran with timing on" : "no forward ran with timing on");
    *out = (s2_cp_timeline){0};
    s2_status st = s2_event_elapsed_ms(ctx, e->t0[w], e->t1[w], &out->step_ms);
    for (int i = 0; st == S2_OK && i < S2_CP_PHASES; i++) {
        out->start_ms[i] = out->end_ms[i] = -1;
        if (e->ran[w][i] && (st = s2_event_elapsed_ms(ctx, e->t0[w], e->tev[w][i][0], &out->start_ms[i])) == S2_OK)
            st = s2_event_elapsed_ms(ctx, e->t0[w], e->tev[w][i][1], &out->end_ms[i]);
    }
    if (st == S2_OK)
        s2_cp_timeline_measure(out);
    return st;
}

/* NAME_rows of kernel k over table i of operation o on stream: src rows of D at src (src_rows of them), into
 * dst: rows (b, t, h) of shape and strides, or flat rows when stride is NULL (shape[0] of them). */
static s2_status rows(s2_ctx *ctx, const s2_cp_exec *e, s2_attn_kernel *k, void *stream, const cp_op *o, int i,
                      s2_devptr src, int64_t src_rows, s2_devptr dst, const int64_t shape[3], const int64_t *stride)
{
    const cp_table *t = op_table(o, i);
    if (t->n == 0)
        return S2_OK;
    s2_rows_args a = {.head_dim = e->D, .dtype = e->dtype, .n_src = t->n_src, .n_runs = t->n, .table = o->tab[i],
                      .src = src, .src_rows = src_rows, .dst = dst, .dst_shape = {shape[0], shape[1], shape[2]},
                      .dst_stride = {e->D, 0, 0}};
    if (stride)
        memcpy(a.dst_stride, stride, sizeof a.dst_stride);
    return s2_rows(ctx, k, stream, &a);
}

/* Flat rows: n of them. */
#define FLAT(n) ((const int64_t[3]){(n) > 0 ? (n) : 1, 1, 1})

/* One message to and one from each peer q, grouped on the communication stream after `stream`'s work so
 * far, as phase ph of call w: rows_out[q] rows of K and as many of V from send + off_out[q] rows, and
 * rows_in[q] (twice) into recv + off_in[q]. */
static s2_status post(s2_ctx *ctx, s2_cp_exec *e, int w, s2_cp_phase ph, void *stream, s2_devptr send,
                      const int64_t *rows_out, const int64_t *off_out, s2_devptr recv, const int64_t *rows_in,
                      const int64_t *off_in)
{
    s2_status st = s2_event_record(ctx, e->ev_in, stream);
    if (st == S2_OK)
        st = s2_stream_wait_event(ctx, e->ev_in, e->comm_stream);
    if (st == S2_OK)
        st = mark(ctx, e, w, ph, 0, e->comm_stream);
    if (st != S2_OK)
        return st;
    const s2_nccl_api *n = e->comm->n;
    s2_cp_traffic *tr = &e->traffic[w];
    ncclResult_t r = n->GroupStart();
    for (int q = 0; r == ncclSuccess && q < e->comm->size; q++) {
        if (q == e->comm->rank)
            continue;
        size_t out = 2 * (size_t)rows_out[q] * e->D, in = 2 * (size_t)rows_in[q] * e->D;
        if (out > 0) {   /* counted as posted */
            tr->sends++;
            *(ph == S2_CP_PHASE_REDUCE ? &tr->reduce_bytes : &tr->send_bytes) += (double)out * (double)e->elem;
            r = n->Send((const void *)(uintptr_t)at(e, send, off_out[q] * e->D), out, e->nt, q, e->comm->comm,
                        (cudaStream_t)e->comm_stream);
        }
        if (r == ncclSuccess && in > 0) {
            tr->recvs++;
            if (ph != S2_CP_PHASE_REDUCE)
                tr->recv_bytes += (double)in * (double)e->elem;
            r = n->Recv((void *)(uintptr_t)at(e, recv, off_in[q] * e->D), in, e->nt, q, e->comm->comm,
                        (cudaStream_t)e->comm_stream);
        }
    }
    ncclResult_t r2 = n->GroupEnd();
    if (r != ncclSuccess || r2 != ncclSuccess)
        return s2_nccl_fail(ctx, n, r != ncclSuccess ? r : r2, ph == S2_CP_PHASE_REDUCE ? "the dK/dV ncclSend/ncclRecv"
                            : "the KV blocks' ncclSend/ncclRecv");
    return mark(ctx, e, w, ph, 1, e->comm_stream);
}

/* The planned blocks packed per peer on `stream` (kernel k's NAME_rows), one message to and from each peer
 * on the communication stream, and the received rows into their slots there; ev_comm marks their end. */
static s2_status exchange(s2_ctx *ctx, s2_cp_exec *e, s2_attn_kernel *k, const cp_op *o, int w, void *stream)
{
    const cp_pack *pk = &o->pack;
    s2_status st;
    if ((st = mark(ctx, e, w, S2_CP_PHASE_PACK, 0, stream)) != S2_OK ||
        (st = rows(ctx, e, k, stream, o, TAB_GATHER, e->kv, 2 * e->half_rows, e->sendbuf, FLAT(pk->send_total),
                   NULL)) != S2_OK ||
        (st = mark(ctx, e, w, S2_CP_PHASE_PACK, 1, stream)) != S2_OK ||
        (st = post(ctx, e, w, S2_CP_PHASE_EXCHANGE, stream, e->sendbuf, pk->send_rows, pk->send_off, e->recvbuf,
                   pk->recv_rows, pk->recv_off)) != S2_OK ||
        (st = mark(ctx, e, w, S2_CP_PHASE_UNPACK, 0, e->comm_stream)) != S2_OK ||
        (st = rows(ctx, e, k, e->comm_stream, o, TAB_SCATTER, e->recvbuf, pk->recv_total, e->kv,
                   FLAT(2 * e->half_rows), NULL)) != S2_OK ||
        (st = mark(ctx, e, w, S2_CP_PHASE_UNPACK, 1, e->comm_stream)) != S2_OK)
        return st;
    return s2_event_record(ctx, e->ev_comm, e->comm_stream);
}

static s2_status check_shape(s2_ctx *ctx, const s2_cp_exec *e, int batch, int64_t q_len, int64_t kv_len, int heads,
                             int kv_heads, int D, s2_dtype dt, const char *fn)
{
    if (batch != e->batch || q_len != e->sizes.own_tokens || kv_len != e->sizes.own_tokens)
        return s2_fail(ctx, S2_ERR_SHAPE, "%s: batch %d, q_len %lld, kv_len %lld; this rank's are %d, %lld, %lld", fn,
                       batch, (long long)q_len, (long long)kv_len, e->batch, (long long)e->sizes.own_tokens,
                       (long long)e->sizes.own_tokens);
    if (heads != e->heads || kv_heads != e->kv_heads)
        return s2_fail(ctx, S2_ERR_HEADS, "%s: %d heads, %d kv heads; the pattern has %d, %d", fn, heads, kv_heads,
                       e->heads, e->kv_heads);
    if (D != e->D)
        return s2_fail(ctx, S2_ERR_HEAD_DIM, "%s: head_dim %d, the kernels' %d", fn, D, e->D);
    if (dt != e->dtype)
        return s2_fail(ctx, S2_ERR_DTYPE, "%s: dtype %s, the kernels' %s", fn, s2_dtype_name(dt), s2_dtype_name(e->dtype));
    return S2_OK;
}

/* Call w's start (0 forward, 1 backward): its first event, the caller's K and V copied in, and the exchange
 * posted (through the call's module's NAME_rows). */
static s2_status call_start(s2_ctx *ctx, s2_cp_exec *e, int w, void *stream, uint64_t kp, const int64_t *ks,
                            uint64_t vp, const int64_t *vs)
{
    const cp_op *o = &e->op[w];
    s2_status st;
    if ((st = call_edge(ctx, e, w, 0, stream)) != S2_OK ||
        (st = mark(ctx, e, w, S2_CP_PHASE_COPY_IN, 0, stream)) != S2_OK ||
        (st = copy_in(ctx, e, o, stream, kp, ks, vp, vs)) != S2_OK ||
        (st = mark(ctx, e, w, S2_CP_PHASE_COPY_IN, 1, stream)) != S2_OK)
        return st;
    return exchange(ctx, e, w ? e->bwd : e->fwd, o, w, stream);
}

s2_status s2_cp_forward(s2_ctx *ctx, s2_cp_exec *e, void *stream, const s2_attn_fwd_args *a)
{
    if (!e || !a)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_cp_forward: %s is NULL", !e ? "the executor" : "args");
    s2_status st = check_shape(ctx, e, a->batch, a->q_len, a->kv_len, a->heads, a->kv_heads, a->head_dim, a->dtype,
                               "s2_cp_forward");
    if (st == S2_OK && a->seqs)
        st = s2_fail(ctx, S2_ERR_UNSUPPORTED, "s2_cp_forward: a variable-length batch");
    if (st == S2_OK)
        st = s2_attn_forward_check(ctx, e->fwd, a);   /* the caller's tensors, before anything is queued */
    if (st != S2_OK)
        return st;
    const cp_op *o = &e->op[0];
    if ((st = call_start(ctx, e, 0, stream, a->k, a->k_stride, a->v, a->v_stride)) != S2_OK)
        return st;
    s2_attn_fwd_args l = *a;
    l.kv_len = o->recv + e->sizes.own_tokens;
    l.k = at(e, e->kv, row_at(e, o, 0, 0, 0)), l.v = at(e, e->kv, e->half_rows * e->D + row_at(e, o, 0, 0, 0));
    kv_strides(e, l.k_stride);
    memcpy(l.v_stride, l.k_stride, sizeof l.v_stride);
    if (!o->remote) {   /* nothing received: one launch into o */
        if ((st = mark(ctx, e, 0, S2_CP_PHASE_LOCAL, 0, stream)) == S2_OK &&
            (st = s2_attn_forward_sched(ctx, e->fwd, stream, &l, o->full)) == S2_OK &&
            (st = mark(ctx, e, 0, S2_CP_PHASE_LOCAL, 1, stream)) == S2_OK)
            st = s2_stream_wait_event(ctx, e->ev_comm, stream);   /* the next call's packing reuses the buffers */
        return st == S2_OK ? call_edge(ctx, e, 0, 1, stream) : st;
    }
    size_t ob = (size_t)e->batch * e->sizes.own_tokens * e->heads * e->D * e->elem;
    size_t lb = (size_t)e->batch * e->heads * e->sizes.own_tokens * 4;
    s2_devptr part_o[2] = {e->parts, e->parts + ob}, part_l[2] = {e->parts + 2 * ob, e->parts + 2 * ob + lb};
    int64_t ps[3] = {e->sizes.own_tokens * e->heads * e->D, (int64_t)e->heads * e->D, e->D};
    memcpy(l.o_stride, ps, sizeof ps);
    l.o = part_o[0], l.lse = part_l[0];
    if ((st = mark(ctx, e, 0, S2_CP_PHASE_LOCAL, 0, stream)) == S2_OK &&
        (st = s2_attn_forward_sched(ctx, e->fwd, stream, &l, o->local)) == S2_OK)
        st = mark(ctx, e, 0, S2_CP_PHASE_LOCAL, 1, stream);
    if (st == S2_OK)
        st = s2_stream_wait_event(ctx, e->ev_comm, stream);
    l.o = part_o[1], l.lse = part_l[1];
    if (st == S2_OK && (st = mark(ctx, e, 0, S2_CP_PHASE_REMOTE, 0, stream)) == S2_OK &&
        (st = s2_attn_forward_sched(ctx, e->fwd, stream, &l, o->remote)) == S2_OK)
        st = mark(ctx, e, 0, S2_CP_PHASE_REMOTE, 1, stream);
    if (st != S2_OK)
        return st;
    s2_combine_args c = {.n = 2, .batch = e->batch, .heads = e->heads, .head_dim = e->D, .seq = e->sizes.own_tokens,
                         .dtype = e->dtype, .o = a->o, .lse = a->lse};
    memcpy(c.o_in, part_o, sizeof part_o);
    memcpy(c.lse_in, part_l, sizeof part_l);
    memcpy(c.in_stride, ps, sizeof ps);
    memcpy(c.o_stride, a->o_stride, sizeof c.o_stride);
    if ((st = mark(ctx, e, 0, S2_CP_PHASE_COMBINE, 0, stream)) == S2_OK &&
        (st = s2_combine(ctx, e->fwd, stream, &c)) == S2_OK &&
        (st = mark(ctx, e, 0, S2_CP_PHASE_COMBINE, 1, stream)) == S2_OK)
        st = call_edge(ctx, e, 0, 1, stream);
    return st;
}

s2_status s2_cp_backward(s2_ctx *ctx, s2_cp_exec *e, void *stream, const s2_attn_bwd_args *a)
{
    if (!e || !a)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_cp_backward: %s is NULL", !e ? "the executor" : "args");
    if (!e->bwd)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cp_backward: the executor was made without a backward kernel");
    s2_status st = check_shape(ctx, e, a->batch, a->q_len, a->kv_len, a->heads, a->kv_heads, a->head_dim, a->dtype,
                               "s2_cp_backward");
    if (st == S2_OK && a->d_lse)
        st = s2_fail(ctx, S2_ERR_UNSUPPORTED, "s2_cp_backward: d_lse");
    s2_attn_bwd_args b = *a;
    b.workspace = e->work, b.workspace_bytes = e->sizes.workspace_bytes;
    if (st == S2_OK)
        st = s2_attn_backward_check(ctx, e->bwd, &b);
    if (st != S2_OK)
        return st;
    const cp_op *o = &e->op[1];
    if ((st = call_start(ctx, e, 1, stream, a->k, a->k_stride, a->v, a->v_stride)) != S2_OK ||
        (st = s2_stream_wait_event(ctx, e->ev_comm, stream)) != S2_OK)
        return st;
    int64_t base = row_at(e, o, 0, 0, 0), vrow = e->half_rows * e->D;
    b.kv_len = o->recv + e->sizes.own_tokens;
    b.k = at(e, e->kv, base), b.v = at(e, e->kv, vrow + base);
    b.dk = at(e, e->dkv, base), b.dv = at(e, e->dkv, vrow + base);
    kv_strides(e, b.k_stride);
    memcpy(b.v_stride, b.k_stride, sizeof b.k_stride);
    memcpy(b.dk_stride, b.k_stride, sizeof b.k_stride);
    memcpy(b.dv_stride, b.k_stride, sizeof b.k_stride);
    const cp_pack *pk = &o->pack;
    int64_t dkv_rows = 2 * e->half_rows + pk->send_total;
    if ((st = mark(ctx, e, 1, S2_CP_PHASE_BACKWARD, 0, stream)) != S2_OK ||
        (st = s2_attn_backward_sched(ctx, e->bwd, stream, &b, o->full)) != S2_OK ||
        (st = mark(ctx, e, 1, S2_CP_PHASE_BACKWARD, 1, stream)) != S2_OK ||
        /* the partial dK/dV of received blocks, packed per owner in the receive buffer's layout */
        (st = mark(ctx, e, 1, S2_CP_PHASE_GATHER, 0, stream)) != S2_OK ||
        (st = rows(ctx, e, e->bwd, stream, o, TAB_RET, e->dkv, dkv_rows, e->recvbuf, FLAT(pk->recv_total), NULL)) !=
            S2_OK ||
        (st = mark(ctx, e, 1, S2_CP_PHASE_GATHER, 1, stream)) != S2_OK ||
        /* sent back to their owners; this rank's own come back after dK and dV */
        (st = post(ctx, e, 1, S2_CP_PHASE_REDUCE, stream, e->recvbuf, pk->recv_rows, pk->recv_off, e->dkv +
                   (s2_devptr)(2 * e->half_rows) * e->D * e->elem, pk->send_rows, pk->send_off)) != S2_OK ||
        (st = s2_event_record(ctx, e->ev_comm, e->comm_stream)) != S2_OK ||
        (st = s2_stream_wait_event(ctx, e->ev_comm, stream)) != S2_OK)
        return st;
    /* per own row: its own partial, then the peers' in rank order (fp32, rounded once), into dk and dv */
    int64_t shape[3] = {e->batch, e->sizes.own_tokens, e->kv_heads};
    if ((st = mark(ctx, e, 1, S2_CP_PHASE_COPY_OUT, 0, stream)) == S2_OK &&
        (st = rows(ctx, e, e->bwd, stream, o, TAB_SUM_DK, e->dkv, dkv_rows, a->dk, shape, a->dk_stride)) == S2_OK &&
        (st = rows(ctx, e, e->bwd, stream, o, TAB_SUM_DV, e->dkv, dkv_rows, a->dv, shape, a->dv_stride)) == S2_OK &&
        (st = mark(ctx, e, 1, S2_CP_PHASE_COPY_OUT, 1, stream)) == S2_OK)
        st = call_edge(ctx, e, 1, 1, stream);
    return st;
}
