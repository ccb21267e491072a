/* The executor's host-side lists from a plan: the messages of a rank's
 * exchange (both ends derive the same runs from the receiver's list), the
 * row tables that pack them per peer and sum the returned dK/dV, the
 * device memory it holds and the measure of a timeline. */
#include "cp_internal.h"
#include "util.h"

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

void s2_cp_pack_free(cp_pack *k)
{
    if (!k)
        return;
    free(k->send_rows), free(k->recv_rows), free(k->send_off), free(k->recv_off);
    cp_table *t[] = {&k->gather, &k->scatter, &k->ret, &k->sum[0], &k->sum[1]};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        free(t[i]->runs);
    memset(k, 0, sizeof *k);
}

bool s2_cp_table_ok(const cp_table *t, int64_t src_rows, int64_t dst_rows)
{
    for (int64_t i = 0; i < t->n; i++) {
        const int64_t *r = &t->runs[i * (2 + t->n_src)];
        if (r[1] < 0 || r[0] < 0 || r[1] > dst_rows - r[0] || r[2] < 0)
            return false;
        for (int s = 0; s < t->n_src; s++)
            if ((r[2 + s] >= 0 && r[1] > src_rows - r[2 + s]) || r[2 + s] < -1)
                return false;
    }
    return true;
}

static s2_status table_new(s2_ctx *ctx, cp_table *t, int64_t cap, int n_src)
{
    t->n_src = n_src, t->n = 0;
    t->runs = malloc((size_t)(cap > 0 ? cap : 1) * (size_t)(2 + n_src) * sizeof(int64_t));
    return t->runs ? S2_OK : s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
}

/* Append a run of one source (a copy). */
static void run1(cp_table *t, int64_t dst, int64_t rows, int64_t src)
{
    int64_t *r = &t->runs[t->n++ * 3];
    r[0] = dst, r[1] = rows, r[2] = src;
}

/* The sum's runs: per (b, kv head, own block) the own partial, then the peers' returned ones in rank order
 * (pos: [ranks][kv heads][own blocks], each block's row in one batch entry's K part of the message to that
 * peer, or -1). */
static s2_status sum_tables(s2_ctx *ctx, cp_pack *k, const cp_geom *g, int rank, int bs, const int64_t *pos,
                            const int64_t *per_b)
{
    int H = g->kv_heads, B = g->batch;
    int64_t nb = g->own_tokens / bs, half = (int64_t)B * H * g->head_rows, most = 0;
    for (int64_t i = 0; i < (int64_t)H * nb; i++) {
        int64_t c = 0;
        for (int q = 0; q < k->ranks; q++)
            c += pos[(int64_t)q * H * nb + i] >= 0;
        most = c > most ? c : most;
    }
    if (most + 1 > S2_ROWS_MAX_SOURCES)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "the executor: a block of rank %d is read by %lld ranks; the dK/dV "
                       "sum takes at most %d partials", rank, (long long)most, S2_ROWS_MAX_SOURCES - 1);
    for (int t = 0; t < 2; t++) {
        s2_status st = table_new(ctx, &k->sum[t], (int64_t)B * H * nb, (int)most + 1);
        if (st != S2_OK)
            return st;
        cp_table *x = &k->sum[t];
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int64_t ob = 0; ob < nb; ob++) {
                    int64_t *r = &x->runs[x->n++ * (2 + x->n_src)];
                    r[0] = ((int64_t)b * H + h) * g->own_tokens + ob * bs, r[1] = bs;
                    r[2] = ((int64_t)b * H + h) * g->head_rows + g->first_row + g->recv + ob * bs + t * half;
                    int s = 1;
                    for (int q = 0; q < k->ranks; q++) {
                        int64_t at = pos[((int64_t)q * H + h) * nb + ob];
                        if (at >= 0)   /* after dK, dV: the returned rows, in the send buffer's layout */
                            r[2 + s++] = 2 * half + k->send_off[q] + ((int64_t)t * B + b) * per_b[q] + at;
                    }
                    while (s < x->n_src)
                        r[2 + s++] = -1;
                }
    }
    return S2_OK;
}

s2_status s2_cp_pack_new(s2_ctx *ctx, const s2_cp_plan *plan, const s2_pattern *p, int rank, const cp_geom *g,
                         bool backward, cp_pack *out)
{
    memset(out, 0, sizeof *out);
    s2_cp_msg *m = NULL;
    int64_t n = 0;
    s2_status st = s2_cp_messages(ctx, plan, p, rank, &m, &n);
    if (st != S2_OK)
        return st;
    int ranks = plan_ranks(plan), bs = p->block_size, H = p->kv_heads, B = g->batch;
    int64_t half = (int64_t)B * H * g->head_rows, nb = g->own_tokens / bs;
    out->ranks = ranks;
    out->send_rows = calloc((size_t)ranks, sizeof(int64_t)), out->recv_rows = calloc((size_t)ranks, sizeof(int64_t));
    out->send_off = calloc((size_t)ranks, sizeof(int64_t)), out->recv_off = calloc((size_t)ranks, sizeof(int64_t));
    int64_t *sb = calloc((size_t)ranks, sizeof(int64_t)), *rb = calloc((size_t)ranks, sizeof(int64_t));
    int64_t *cur = calloc((size_t)ranks * 2, sizeof(int64_t));
    int64_t *pos = backward ? malloc((size_t)(ranks * H * nb > 0 ? ranks * H * nb : 1) * sizeof(int64_t)) : NULL;
    if (!out->send_rows || !out->recv_rows || !out->send_off || !out->recv_off || !sb || !rb || !cur ||
        (backward && !pos))
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    else if (g->kv_heads != H || g->own_tokens % bs != 0)
        st = s2_fail(ctx, S2_ERR_INTERNAL, "the executor's layout: %d kv heads, %lld own tokens (block %d)",
                     g->kv_heads, (long long)g->own_tokens, bs);
    int64_t blocks = 0;
    for (int64_t i = 0; st == S2_OK && i < n; i++) {
        *(m[i].send ? &sb[m[i].peer] : &rb[m[i].peer]) += m[i].blocks * bs;
        blocks += m[i].blocks;
    }
    for (int q = 0; st == S2_OK && q < ranks; q++) {
        out->send_rows[q] = B * sb[q], out->recv_rows[q] = B * rb[q];
        out->send_off[q] = out->send_total, out->recv_off[q] = out->recv_total;
        out->send_total += 2 * B * sb[q], out->recv_total += 2 * B * rb[q];
    }
    int64_t cap = 2 * B * blocks;
    if (st == S2_OK && (st = table_new(ctx, &out->gather, cap, 1)) == S2_OK &&
        (st = table_new(ctx, &out->scatter, cap, 1)) == S2_OK && backward)
        st = table_new(ctx, &out->ret, cap, 1);
    for (int64_t i = 0; backward && st == S2_OK && i < (int64_t)ranks * H * nb; i++)
        pos[i] = -1;
    /* one run per block, per batch entry, K then V */
    for (int b = 0; st == S2_OK && b < B; b++) {
        memset(cur, 0, (size_t)ranks * 2 * sizeof(int64_t));
        for (int64_t i = 0; i < n; i++) {
            const s2_cp_msg *x = &m[i];
            int q = x->peer;
            for (int64_t j = 0; j < x->blocks; j++) {
                int64_t *c = &cur[2 * q + !x->send];
                int64_t kv = ((int64_t)b * H + x->kv_head) * g->head_rows + g->first_row;
                if (x->send) {
                    int64_t own = s2_cp_own_row(plan, rank, x->first_block + j, bs);
                    int64_t d = out->send_off[q] + b * sb[q] + *c;
                    run1(&out->gather, d, bs, kv + g->recv + own);
                    run1(&out->gather, d + B * sb[q], bs, kv + g->recv + own + half);
                    if (backward && b == 0)
                        pos[((int64_t)q * H + x->kv_head) * nb + own / bs] = *c;
                } else {
                    int64_t s = out->recv_off[q] + b * rb[q] + *c, slot = kv + (x->first_slot + j) * bs;
                    run1(&out->scatter, slot, bs, s);
                    run1(&out->scatter, slot + half, bs, s + B * rb[q]);
                    if (backward) {
                        run1(&out->ret, s, bs, slot);
                        run1(&out->ret, s + B * rb[q], bs, slot + half);
                    }
                }
                *c += bs;
            }
        }
    }
    if (st == S2_OK && backward)
        st = sum_tables(ctx, out, g, rank, bs, pos, sb);
    /* built by us, checked all the same: NAME_rows would skip a run outside its buffers */
    int64_t dkv = 2 * half + out->send_total, own_rows = (int64_t)B * H * g->own_tokens;
    if (st == S2_OK && (!s2_cp_table_ok(&out->gather, 2 * half, out->send_total) ||
                        !s2_cp_table_ok(&out->scatter, out->recv_total, 2 * half) ||
                        (backward && (!s2_cp_table_ok(&out->ret, dkv, out->recv_total) ||
                                      !s2_cp_table_ok(&out->sum[0], dkv, own_rows) ||
                                      !s2_cp_table_ok(&out->sum[1], dkv, own_rows)))))
        st = s2_fail(ctx, S2_ERR_INTERNAL, "the executor's row tables of rank %d leave their buffers", rank);
    free(m), free(sb), free(rb), free(cur), free(pos);
    if (st != S2_OK)
        s2_cp_pack_free(out);
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
    int64_t head_rows = out->recv_tokens + out->own_tokens;
    size_t rows = (size_t)batch * p->kv_heads * (size_t)head_rows, row_bytes = (size_t)head_dim * elem;
    out->kv_bytes = 2 * rows * row_bytes;
    out->partial_bytes = 2 * (size_t)batch * p->heads * (size_t)out->own_tokens * (head_dim * elem + 4);
    int64_t send = 0, recv = 0;
    for (int w = 0; w < 2 && st == S2_OK; w++) {
        const s2_cp_plan *pl = w ? bwd : fwd;
        if (!pl)
            continue;
        int64_t op_recv = s2_cp_plan_recv_tokens(pl, rank);
        cp_geom g = {batch, p->kv_heads, head_rows, out->recv_tokens - op_recv, op_recv, out->own_tokens};
        cp_pack pk;
        if ((st = s2_cp_pack_new(ctx, pl, p, rank, &g, w == 1, &pk)) != S2_OK)
            return st;
        send = pk.send_total > send ? pk.send_total : send;
        recv = pk.recv_total > recv ? pk.recv_total : recv;
        if (w == 1) {   /* dK, dV in the K layout, then the partials returned to this rank */
            out->return_rows = pk.send_total;
            out->grad_bytes = out->kv_bytes + (size_t)pk.send_total * row_bytes;
        }
        s2_cp_pack_free(&pk);
    }
    out->exchange_bytes = (size_t)(send + recv) * row_bytes;
    return st;
}

static bool cp_phase_comm(int i)
{
    return i == S2_CP_PHASE_EXCHANGE || i == S2_CP_PHASE_UNPACK || i == S2_CP_PHASE_REDUCE;
}
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
