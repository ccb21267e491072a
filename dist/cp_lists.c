/* The executor's host-side lists from a plan: the messages of a rank's
 * exchange (both ends derive the same runs from the receiver's list), the
 * reduce-scatter segments of dK/dV, the device memory it holds and the
 * measure of a timeline. */
#include "cp_internal.h"
#include "util.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static int plan_ranks(const s2_cp_plan *plan)
{
    int64_t st[2], len[2];
    int n = 0;
    while (n < S2_CP_MAX_RANKS && s2_cp_plan_shard(plan, n, st, len) > 0)
        n++;
    return n;
}

int64_t s2_cp_own_row(const s2_cp_plan *plan, int rank, int64_t n, int block_size)
{
    int64_t st[2], len[2], before = 0, tok = n * block_size;
    int k = s2_cp_plan_shard(plan, rank, st, len);
    for (int i = 0; i < k; i++) {
        if (tok >= st[i] && tok < st[i] + len[i])
            return before + tok - st[i];
        before += len[i];
    }
    return -1;
}

static s2_status check_common(s2_ctx *ctx, const s2_cp_plan *plan, const s2_pattern *p, int rank, int *ranks,
                              const char *fn)
{
    if (!plan || !p)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "%s: %s is NULL", fn, !plan ? "plan" : "pattern");
    *ranks = plan_ranks(plan);
    if (rank < 0 || rank >= *ranks)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: rank %d outside the plan's %d", fn, rank, *ranks);
    const s2_cp_block *l;
    int64_t c;
    if (p->kv_heads < 1 || p->block_size < 1 || s2_cp_plan_recv(NULL, plan, 0, p->kv_heads - 1, &l, &c) != S2_OK ||
        s2_cp_plan_recv(NULL, plan, 0, p->kv_heads, &l, &c) == S2_OK)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: the pattern's %d kv heads are not the plan's", fn, p->kv_heads);
    return S2_OK;
}

/* Messages owner -> receiver for kv head h, from the receiver's list, appended to out (NULL: counted). */
static int64_t runs(const s2_cp_plan *plan, const s2_pattern *p, int owner, int receiver, int h, bool send,
                    int peer, s2_cp_msg *out)
{
    const s2_cp_block *l = NULL;
    int64_t c = 0, n = 0;
    s2_cp_plan_recv(NULL, plan, receiver, h, &l, &c);
    for (int64_t i = 0; i < c; i++) {
        if (l[i].peer != owner)
            continue;
        int64_t row = s2_cp_own_row(plan, owner, l[i].block, p->block_size);
        if (n > 0 && out) {
            s2_cp_msg *m = &out[n - 1];
            if (l[i].block == m->first_block + m->blocks && l[i].slot == m->first_slot + m->blocks &&
                row == s2_cp_own_row(plan, owner, m->first_block, p->block_size) + m->blocks * p->block_size) {
                m->blocks++;
                continue;
            }
        }
        if (out)
            out[n] = (s2_cp_msg){.peer = peer, .kv_head = h, .send = send, .first_block = l[i].block, .blocks = 1,
                                 .first_slot = l[i].slot};
        n++;
    }
    return n;
}

s2_status s2_cp_messages(s2_ctx *ctx, const s2_cp_plan *plan, const s2_pattern *p, int rank, s2_cp_msg **list,
                         int64_t *count)
{
    if (!list || !count)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_cp_messages: %s is NULL", !list ? "list" : "count");
    *list = NULL, *count = 0;
    int ranks;
    s2_status st = check_common(ctx, plan, p, rank, &ranks, "s2_cp_messages");
    if (st != S2_OK)
        return st;
    int64_t cap = 0;   /* every block one message at most */
    for (int h = 0; h < p->kv_heads; h++) {
        const s2_cp_block *l;
        int64_t c;
        s2_cp_plan_recv(NULL, plan, rank, h, &l, &c);
        cap += c;
        s2_cp_plan_send(NULL, plan, rank, h, &l, &c);
        cap += c;
    }
    s2_cp_msg *m = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *m);
    if (!m)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    int64_t n = 0;
    for (int h = 0; h < p->kv_heads; h++)
        for (int q = 0; q < ranks; q++) {
            if (q == rank)
                continue;
            n += runs(plan, p, rank, q, h, true, q, m + n);
            n += runs(plan, p, q, rank, h, false, q, m + n);
        }
    *list = m, *count = n;
    return S2_OK;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Blocks of owner o that some rank receives for kv head h, sorted, unique (malloc'd). */
static s2_status union_of(s2_ctx *ctx, const s2_cp_plan *plan, int o, int h, int64_t **out, int64_t *n)
{
    const s2_cp_block *l;
    int64_t c;
    s2_cp_plan_send(NULL, plan, o, h, &l, &c);
    int64_t *u = malloc((size_t)(c > 0 ? c : 1) * sizeof *u);
    if (!u)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < c; i++)
        u[i] = l[i].block;
    qsort(u, (size_t)c, sizeof *u, cmp_i64);
    int64_t k = 0;
    for (int64_t i = 0; i < c; i++)
        if (k == 0 || u[k - 1] != u[i])
            u[k++] = u[i];
    *out = u, *n = k;
    return S2_OK;
}

static int64_t index_of(const int64_t *u, int64_t n, int64_t b)
{
    const int64_t *f = bsearch(&b, u, (size_t)n, sizeof *u, cmp_i64);
    return f ? f - u : -1;
}

/* Append a copy, extending the last when both ends continue it. */
static void put(cp_copy *c, int64_t *n, cp_copy x)
{
    if (*n > 0) {
        cp_copy *l = &c[*n - 1];
        if (l->seg == x.seg && l->kv_head == x.kv_head && l->src + l->rows == x.src && l->dst + l->rows == x.dst) {
            l->rows += x.rows;
            return;
        }
    }
    c[(*n)++] = x;
}

void s2_cp_grad_map_free(cp_grad_map *m)
{
    if (!m)
        return;
    free(m->seg_batch_rows), free(m->partial), free(m->own);
    memset(m, 0, sizeof *m);
}

s2_status s2_cp_grad_map_new(s2_ctx *ctx, const s2_cp_plan *plan, const s2_pattern *p, int rank, int batch,
                             cp_grad_map *out)
{
    memset(out, 0, sizeof *out);
    int ranks;
    s2_status st = check_common(ctx, plan, p, rank, &ranks, "the executor's segments");
    if (st != S2_OK)
        return st;
    int H = p->kv_heads, bs = p->block_size;
    int64_t **u = calloc((size_t)ranks * H, sizeof *u), *un = calloc((size_t)ranks * H, sizeof *un);
    int64_t *pre = calloc((size_t)ranks * H, sizeof *pre);
    out->ranks = ranks;
    out->seg_batch_rows = calloc((size_t)ranks, sizeof(int64_t));
    if (!u || !un || !pre || !out->seg_batch_rows)
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    int64_t most = 0, cap_p = 0, cap_o = 0;
    for (int o = 0; st == S2_OK && o < ranks; o++) {
        for (int h = 0; st == S2_OK && h < H; h++) {
            st = union_of(ctx, plan, o, h, &u[o * H + h], &un[o * H + h]);
            pre[o * H + h] = out->seg_batch_rows[o];
            out->seg_batch_rows[o] += un[o * H + h] * bs;
        }
        most = most > out->seg_batch_rows[o] ? most : out->seg_batch_rows[o];
    }
    out->seg_rows = most * batch;
    for (int h = 0; st == S2_OK && h < H; h++) {
        const s2_cp_block *l;
        int64_t c;
        s2_cp_plan_recv(NULL, plan, rank, h, &l, &c);
        cap_p += c;
        cap_o += un[rank * H + h];
    }
    if (st == S2_OK) {
        out->partial = malloc((size_t)(cap_p > 0 ? cap_p : 1) * sizeof(cp_copy));
        out->own = malloc((size_t)(cap_o > 0 ? cap_o : 1) * sizeof(cp_copy));
        if (!out->partial || !out->own)
            st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    for (int h = 0; st == S2_OK && h < H; h++) {
        const s2_cp_block *l;
        int64_t c;
        s2_cp_plan_recv(NULL, plan, rank, h, &l, &c);
        for (int64_t i = 0; i < c; i++) {
            int o = l[i].peer;
            int64_t k = index_of(u[o * H + h], un[o * H + h], l[i].block);
            if (k < 0) {
                st = s2_fail(ctx, S2_ERR_INTERNAL, "block %" PRId64 " of rank %d is received but not sent",
                             l[i].block, o);
                break;
            }
            put(out->partial, &out->n_partial,
                (cp_copy){o, h, l[i].slot * bs, pre[o * H + h] + k * bs, bs});
        }
        for (int64_t k = 0; st == S2_OK && k < un[rank * H + h]; k++)
            put(out->own, &out->n_own,
                (cp_copy){rank, h, s2_cp_own_row(plan, rank, u[rank * H + h][k], bs), pre[rank * H + h] + k * bs,
                          bs});
    }
    for (int64_t i = 0; u && i < (int64_t)ranks * H; i++)
        free(u[i]);
    free(u), free(un), free(pre);
    if (st != S2_OK)
        s2_cp_grad_map_free(out);
    return st;
}

s2_status s2_cp_sizes_of(s2_ctx *ctx, const s2_cp_plan *fwd, const s2_cp_plan *bwd, const s2_pattern *p, int rank,
                         int batch, int head_dim, s2_dtype dtype, s2_cp_sizes *out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_cp_sizes_of: out is NULL");
    memset(out, 0, sizeof *out);
    int ranks;
    s2_status st = check_common(ctx, fwd, p, rank, &ranks, "s2_cp_sizes_of");
    if (st != S2_OK)
        return st;
    size_t elem = s2_dtype_size(dtype);
    if (batch < 1 || batch > 65535 || head_dim < 1 || head_dim > 1024 || elem == 0)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cp_sizes_of: batch %d, head_dim %d or dtype %d out of range", batch,
                       head_dim, (int)dtype);
    int64_t st2[2], len[2];
    int k = s2_cp_plan_shard(fwd, rank, st2, len);
    for (int i = 0; i < k; i++)
        out->own_tokens += len[i];
    out->recv_tokens = s2_cp_plan_recv_tokens(fwd, rank);
    if (bwd && s2_cp_plan_recv_tokens(bwd, rank) > out->recv_tokens)
        out->recv_tokens = s2_cp_plan_recv_tokens(bwd, rank);
    size_t rows = (size_t)batch * p->kv_heads * (size_t)(out->recv_tokens + out->own_tokens);
    out->kv_bytes = 2 * rows * head_dim * elem;
    out->partial_bytes = 2 * (size_t)batch * p->heads * (size_t)out->own_tokens * (head_dim * elem + 4);
    if (bwd) {
        cp_grad_map m;
        if ((st = s2_cp_grad_map_new(ctx, bwd, p, rank, batch, &m)) != S2_OK)
            return st;
        out->segment_tokens = m.seg_rows;
        /* dK, dV in the K layout; per tensor ranks segments and the one reduced */
        out->grad_bytes = out->kv_bytes + 2 * (size_t)(ranks + 1) * m.seg_rows * head_dim * elem;
        s2_cp_grad_map_free(&m);
    }
    return S2_OK;
}

static bool cp_phase_comm(int i) { return i == S2_CP_PHASE_EXCHANGE || i == S2_CP_PHASE_REDUCE; }
static bool cp_phase_attn(int i)
{
    return i == S2_CP_PHASE_LOCAL || i == S2_CP_PHASE_REMOTE || i == S2_CP_PHASE_COMBINE || i == S2_CP_PHASE_BACKWARD;
}

static bool cp_in_phase(const s2_cp_timeline *t, bool (*kind)(int), float at)
{
    for (int i = 0; i < S2_CP_PHASES; i++)
        if (kind(i) && t->start_ms[i] >= 0 && at > t->start_ms[i] && at < t->end_ms[i])
            return true;
    return false;
}

void s2_cp_timeline_measure(s2_cp_timeline *t)
{
    /* measured over the elementary segments between every phase's ends */
    float cuts[2 * S2_CP_PHASES];
    int n = 0;
    for (int i = 0; i < S2_CP_PHASES; i++)
        if (t->start_ms[i] >= 0)
            cuts[n++] = t->start_ms[i], cuts[n++] = t->end_ms[i];
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
            float x = cuts[j];
            cuts[j] = cuts[j - 1], cuts[j - 1] = x;
        }
    t->comm_ms = t->visible_comm_ms = 0;
    for (int i = 0; i + 1 < n; i++) {
        float mid = 0.5f * (cuts[i] + cuts[i + 1]), len = cuts[i + 1] - cuts[i];
        if (len > 0 && cp_in_phase(t, cp_phase_comm, mid)) {
            t->comm_ms += len;
            if (!cp_in_phase(t, cp_phase_attn, mid))
                t->visible_comm_ms += len;
        }
    }
}
