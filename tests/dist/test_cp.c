/* The context-parallel executor on the CPU (no NCCL, no GPU): NCCL absent
 * (S2C_LIBNCCL names a missing file) gives S2_ERR_UNSUPPORTED with the
 * library named; argument checks; the messages each rank derives from a
 * plan (every planned block carried once, by both ends in matching order,
 * runs only of blocks contiguous at both ends), the row tables that pack
 * them per peer and sum the returned dK/dV (run on the host across every
 * rank) and the executor's sizes. */
#include "s2c/cp.h"
#include "cp_internal.h"
#include "s2c/cpplan.h"
#include "s2c/pattern.h"
#include "check_main.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* The issue's shape: 32 heads, 8 kv heads, local 16, stride 8, block 64, one shift per kv group. */
static const s2_pattern *issue_pattern(s2_ctx *ctx, s2_pattern_set **set, int block, int heads, int kv)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.name = "cp";
    a.num_heads = heads, a.num_kv_heads = kv, a.block_size = block;
    a.local_blocks = 16, a.vert_stride = 8, a.head_sliding_offset = 1, a.causal = true, a.max_seq_len = 0;
    ck_assert_msg(s2_pattern_from_args(ctx, &a, set) == S2_OK, "%s", s2_ctx_message(ctx));
    return s2_pattern_set_get(*set, 0);
}

START_TEST(nccl_absent)
{
    setenv("S2C_LIBNCCL", "/nonexistent/libnccl-missing.so.2", 1);
    s2_ctx *ctx = s2_ctx_new();
    int v = -1;
    ck_assert_int_eq(s2_nccl_version(ctx, &v), S2_ERR_UNSUPPORTED);
    ck_assert_int_eq(v, 0);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "libnccl-missing"));
    s2_cp_id id;
    ck_assert_int_eq(s2_cp_unique_id(ctx, &id), S2_ERR_UNSUPPORTED);
    s2_cp_comm *c = (s2_cp_comm *)1;
    ck_assert_int_eq(s2_cp_comm_init(ctx, (s2_device *)8, &id, 2, 0, &c), S2_ERR_UNSUPPORTED);
    ck_assert_ptr_null(c);
    /* arguments are checked before NCCL is needed */
    ck_assert_int_eq(s2_cp_comm_init(ctx, (s2_device *)8, &id, 2, 2, &c), S2_ERR_INVALID);
    ck_assert_int_eq(s2_cp_comm_init(ctx, (s2_device *)8, NULL, 2, 0, &c), S2_ERR_NULL_ARG);
    ck_assert_int_eq(s2_cp_comm_wrap(ctx, (s2_device *)8, NULL, &c), S2_ERR_NULL_ARG);
    ck_assert_int_eq(s2_cp_exec_new(ctx, NULL, NULL, NULL, NULL, NULL), S2_ERR_NULL_ARG);
    ck_assert_int_eq(s2_cp_forward(ctx, NULL, NULL, NULL), S2_ERR_NULL_ARG);
    ck_assert_int_eq(s2_cp_backward(ctx, NULL, NULL, NULL), S2_ERR_NULL_ARG);
    ck_assert_int_eq(s2_cp_comm_rank(NULL), -1);
    ck_assert_int_eq(s2_cp_exec_set_timing(ctx, NULL, true), S2_ERR_NULL_ARG);
    s2_cp_timeline tl;
    s2_cp_traffic tr;
    ck_assert_int_eq(s2_cp_exec_last_timeline(ctx, NULL, false, &tl), S2_ERR_NULL_ARG);
    ck_assert_int_eq(s2_cp_exec_traffic(ctx, NULL, true, &tr), S2_ERR_NULL_ARG);
    s2_cp_comm_free(NULL);
    s2_cp_exec_free(NULL);
    s2_ctx_free(ctx);
}
END_TEST

/* For each (sharding, ranks): every rank's messages, matched across ranks. */
static void check_messages(const s2_pattern *p, int64_t seq, int ranks, s2_cp_sharding sh)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_cp_plan_args a = {seq, ranks, sh, {128, 128}, false, 0};
    s2_cp_plan *plan = NULL;
    ck_assert_msg(s2_cp_plan_new(ctx, p, &a, &plan) == S2_OK, "%s", s2_ctx_message(ctx));
    s2_cp_msg **m = calloc((size_t)ranks, sizeof *m);
    int64_t *n = calloc((size_t)ranks, sizeof *n);
    int bs = p->block_size;
    for (int r = 0; r < ranks; r++)
        ck_assert_msg(s2_cp_messages(ctx, plan, p, r, &m[r], &n[r]) == S2_OK, "%s", s2_ctx_message(ctx));
    int64_t total_recv = 0, total_msgs = 0;
    for (int r = 0; r < ranks; r++) {
        /* receives cover r's planned list exactly once, slot for slot */
        for (int h = 0; h < p->kv_heads; h++) {
            const s2_cp_block *l;
            int64_t c;
            ck_assert_int_eq(s2_cp_plan_recv(ctx, plan, r, h, &l, &c), S2_OK);
            char *seen = calloc((size_t)(c > 0 ? c : 1), 1);
            for (int64_t i = 0; i < n[r]; i++) {
                const s2_cp_msg *x = &m[r][i];
                if (x->send || x->kv_head != h)
                    continue;
                ck_assert_int_ge(x->blocks, 1);
                for (int64_t k = 0; k < x->blocks; k++) {
                    int64_t s = x->first_slot + k;
                    ck_assert(s >= 0 && s < c);
                    ck_assert_int_eq(seen[s], 0);
                    seen[s] = 1;
                    ck_assert_int_eq(l[s].block, x->first_block + k);
                    ck_assert_int_eq(l[s].peer, x->peer);
                    /* contiguous at the owner too */
                    ck_assert_int_eq(s2_cp_own_row(plan, x->peer, x->first_block + k, bs),
                                     s2_cp_own_row(plan, x->peer, x->first_block, bs) + k * bs);
                }
            }
            for (int64_t s = 0; s < c; s++)
                ck_assert_msg(seen[s], "rank %d head %d slot %lld not received", r, h, (long long)s);
            free(seen);
            total_recv += c;
        }
        /* r's sends to q are q's receives from r, in the same order */
        for (int q = 0; q < ranks; q++) {
            if (q == r)
                continue;
            int64_t i = 0, j = 0;
            for (;;) {
                while (i < n[r] && !(m[r][i].send && m[r][i].peer == q))
                    i++;
                while (j < n[q] && !(!m[q][j].send && m[q][j].peer == r))
                    j++;
                if (i == n[r] || j == n[q]) {
                    ck_assert_msg(i == n[r] && j == n[q], "unmatched message between %d and %d", r, q);
                    break;
                }
                ck_assert_int_eq(m[r][i].kv_head, m[q][j].kv_head);
                ck_assert_int_eq(m[r][i].first_block, m[q][j].first_block);
                ck_assert_int_eq(m[r][i].blocks, m[q][j].blocks);
                ck_assert_int_eq(m[r][i].first_slot, m[q][j].first_slot);
                ck_assert_int_eq(s2_cp_plan_owner(plan, m[r][i].first_block), r);
                i++, j++;
            }
        }
        for (int64_t i = 0; i < n[r]; i++)
            total_msgs += !m[r][i].send;
    }
    for (int r = 0; r < ranks; r++)
        free(m[r]);
    /* runs make fewer messages than blocks (the local window's spill is one run) */
    if (total_recv > 0)
        ck_assert_int_lt(total_msgs, total_recv);
    free(m), free(n);
    s2_cp_plan_free(plan);
    s2_ctx_free(ctx);
}

static void check_packing(const s2_pattern *p, int64_t seq, int ranks, s2_cp_sharding sh, int B);

/* The messages, and the packing of each configuration small enough to run on the host. */
START_TEST(messages_match)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = NULL;
    const s2_pattern *p = issue_pattern(ctx, &set, 64, 32, 8);
    check_messages(p, 8192, 2, S2_CP_CONTIGUOUS);
    check_messages(p, 8192, 2, S2_CP_ZIGZAG);
    check_packing(p, 8192, 2, S2_CP_CONTIGUOUS, 2);
    check_packing(p, 8192, 2, S2_CP_ZIGZAG, 1);
    check_packing(p, 16384, 4, S2_CP_ZIGZAG, 2);
    check_packing(p, 12288, 3, S2_CP_CONTIGUOUS, 1);
    check_packing(p, 4096, 1, S2_CP_CONTIGUOUS, 1);
    check_messages(p, 65536, 4, S2_CP_ZIGZAG);
    check_messages(p, 49152, 3, S2_CP_CONTIGUOUS);
    check_messages(p, 4096, 1, S2_CP_CONTIGUOUS);
    s2_pattern_set_free(set);
    set = NULL;
    p = issue_pattern(ctx, &set, 16, 8, 4);
    check_messages(p, 4096, 4, S2_CP_ZIGZAG);
    check_packing(p, 4096, 4, S2_CP_ZIGZAG, 2);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

/* NAME_rows on the host, one element per row: each run's dst rows get the sum of its present sources, in
 * order; writes counts every dst row written. */
static void rows_host(const cp_table *t, const double *src, double *dst, int *writes)
{
    for (int64_t i = 0; i < t->n; i++) {
        const int64_t *r = &t->runs[i * (2 + t->n_src)];
        for (int64_t j = 0; j < r[1]; j++) {
            double v = 0;
            for (int s = 0; s < t->n_src; s++)
                if (r[2 + s] >= 0)
                    v += src[r[2 + s] + j];
            dst[r[0] + j] = v;
            writes[r[0] + j]++;
        }
    }
}

/* The global token of own row t on rank r. */
static int64_t token_of(const s2_cp_plan *plan, int r, int64_t t)
{
    int64_t st[2], len[2];
    int k = s2_cp_plan_shard(plan, r, st, len);
    for (int i = 0; i < k; i++) {
        if (t < len[i])
            return st[i] + t;
        t -= len[i];
    }
    return -1;
}

/* Every rank's packing run on the host against all the others: each planned K/V row packed exactly once,
 * landing in its receiver's slot (and no other row written); the backward's returned partials summed at
 * their owner as its own partial plus each reader's, sources in rank order; tables inside their buffers. */
static void check_packing(const s2_pattern *p, int64_t seq, int ranks, s2_cp_sharding sh, int B)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_cp_plan_args a = {seq, ranks, sh, {128, 128}, false, 0};
    s2_cp_plan *plan = NULL;
    ck_assert_msg(s2_cp_plan_new(ctx, p, &a, &plan) == S2_OK, "%s", s2_ctx_message(ctx));
    int H = p->kv_heads, bs = p->block_size;
    cp_pack *pk = calloc((size_t)ranks, sizeof *pk);
    cp_geom *g = calloc((size_t)ranks, sizeof *g);
    double **kv = calloc((size_t)ranks, sizeof *kv), **snd = calloc((size_t)ranks, sizeof *snd);
    double **rcv = calloc((size_t)ranks, sizeof *rcv), **dkv = calloc((size_t)ranks, sizeof *dkv);
    for (int r = 0; r < ranks; r++) {
        int64_t own = seq / ranks, recv = s2_cp_plan_recv_tokens(plan, r);
        g[r] = (cp_geom){B, H, recv + own + 64, 32, recv, own};   /* rows before and after: never written */
        ck_assert_msg(s2_cp_pack_new(ctx, plan, p, r, &g[r], true, &pk[r]) == S2_OK, "%s", s2_ctx_message(ctx));
        int64_t half = (int64_t)B * H * g[r].head_rows;
        ck_assert(s2_cp_table_ok(&pk[r].gather, 2 * half, pk[r].send_total));
        ck_assert(s2_cp_table_ok(&pk[r].scatter, pk[r].recv_total, 2 * half));
        kv[r] = malloc((size_t)(2 * half) * sizeof(double));
        dkv[r] = malloc((size_t)(2 * half + pk[r].send_total) * sizeof(double));
        snd[r] = calloc((size_t)pk[r].send_total + 1, sizeof(double));
        rcv[r] = calloc((size_t)pk[r].recv_total + 1, sizeof(double));
        for (int64_t i = 0; i < 2 * half; i++)
            kv[r][i] = -1, dkv[r][i] = (double)(r * 7919 + i % 1009);   /* partials: exact sums in double */
        for (int t = 0; t < 2; t++)
            for (int b = 0; b < B; b++)
                for (int h = 0; h < H; h++)
                    for (int64_t o = 0; o < own; o++)
                        kv[r][t * half + ((int64_t)b * H + h) * g[r].head_rows + 32 + recv + o] =
                            (double)((((int64_t)t * B + b) * H + h) * seq + token_of(plan, r, o));
    }
    /* forward: pack, one message per peer pair, unpack */
    for (int r = 0; r < ranks; r++) {
        int *w = calloc((size_t)pk[r].send_total + 1, sizeof(int));
        rows_host(&pk[r].gather, kv[r], snd[r], w);
        for (int64_t i = 0; i < pk[r].send_total; i++)
            ck_assert_int_eq(w[i], 1);
        free(w);
    }
    for (int r = 0; r < ranks; r++)
        for (int q = 0; q < ranks; q++) {
            ck_assert_int_eq(pk[r].send_rows[q], q == r ? 0 : pk[q].recv_rows[r]);
            memcpy(rcv[q] + pk[q].recv_off[r], snd[r] + pk[r].send_off[q], (size_t)(2 * pk[r].send_rows[q]) * 8);
        }
    for (int r = 0; r < ranks; r++) {
        int64_t half = (int64_t)B * H * g[r].head_rows, slots = 0;
        int *w = calloc((size_t)(2 * half), sizeof(int));
        rows_host(&pk[r].scatter, rcv[r], kv[r], w);
        for (int h = 0; h < H; h++) {
            const s2_cp_block *l;
            int64_t c;
            s2_cp_plan_recv(ctx, plan, r, h, &l, &c);
            for (int64_t i = 0; i < c; i++)
                for (int t = 0; t < 2; t++)
                    for (int b = 0; b < B; b++)
                        for (int j = 0; j < bs; j++) {
                            int64_t row = t * half + ((int64_t)b * H + h) * g[r].head_rows + 32 + l[i].slot * bs + j;
                            ck_assert_int_eq(w[row], 1);
                            ck_assert(kv[r][row] == (double)((((int64_t)t * B + b) * H + h) * seq + l[i].block * bs + j));
                            w[row] = 0;
                            slots++;
                        }
        }
        for (int64_t i = 0; i < 2 * half; i++)
            ck_assert_msg(w[i] == 0, "rank %d: row %lld written but not planned", r, (long long)i);
        ck_assert_int_eq(slots, pk[r].recv_total);
        free(w);
    }
    /* backward: partials of received blocks back to their owners, summed in rank order */
    for (int r = 0; r < ranks; r++) {
        int *w = calloc((size_t)pk[r].recv_total + 1, sizeof(int));
        rows_host(&pk[r].ret, dkv[r], rcv[r], w);
        free(w);
    }
    for (int r = 0; r < ranks; r++) {
        int64_t half = (int64_t)B * H * g[r].head_rows;
        for (int q = 0; q < ranks; q++)
            memcpy(dkv[r] + 2 * half + pk[r].send_off[q], rcv[q] + pk[q].recv_off[r],
                   (size_t)(2 * pk[r].send_rows[q]) * 8);
    }
    for (int r = 0; r < ranks; r++) {
        int64_t half = (int64_t)B * H * g[r].head_rows, own = g[r].own_tokens, n = (int64_t)B * H * own;
        for (int t = 0; t < 2; t++) {
            const cp_table *x = &pk[r].sum[t];
            double *out = malloc((size_t)n * sizeof(double));
            int *w = calloc((size_t)n, sizeof(int));
            ck_assert(s2_cp_table_ok(x, 2 * half + pk[r].send_total, n));
            rows_host(x, dkv[r], out, w);
            for (int64_t i = 0; i < n; i++)
                ck_assert_int_eq(w[i], 1);
            /* sources: the own partial first, then returned ones of strictly increasing ranks */
            for (int64_t i = 0; i < x->n; i++) {
                const int64_t *run = &x->runs[i * (2 + x->n_src)];
                ck_assert(run[2] < 2 * half);
                int last = -1;
                for (int s = 1; s < x->n_src && run[2 + s] >= 0; s++) {
                    int q = 0;
                    while (q + 1 < ranks && 2 * half + pk[r].send_off[q + 1] <= run[2 + s])
                        q++;
                    ck_assert_int_gt(q, last);
                    ck_assert_int_ne(q, r);
                    last = q;
                }
            }
            /* the expected sum from the plan: own partial plus every reader's partial of its slot */
            for (int b = 0; b < B; b++)
                for (int h = 0; h < H; h++)
                    for (int64_t o = 0; o < own; o++) {
                        double want = dkv[r][t * half + ((int64_t)b * H + h) * g[r].head_rows + 32 + g[r].recv + o];
                        int64_t blk = token_of(plan, r, o) / bs;
                        for (int q = 0; q < ranks; q++) {
                            const s2_cp_block *l;
                            int64_t c;
                            s2_cp_plan_recv(ctx, plan, q, h, &l, &c);
                            for (int64_t i = 0; i < c; i++)
                                if (l[i].peer == r && l[i].block == blk)
                                    want += dkv[q][t * (int64_t)B * H * g[q].head_rows +
                                                   ((int64_t)b * H + h) * g[q].head_rows + 32 + l[i].slot * bs +
                                                   token_of(plan, r, o) % bs];
                        }
                        ck_assert_msg(out[((int64_t)b * H + h) * own + o] == want, "rank %d row (%d, %d, %lld)", r,
                                      b, h, (long long)o);
                    }
            free(out), free(w);
        }
    }
    s2_cp_sizes z;
    ck_assert_int_eq(s2_cp_sizes_of(ctx, plan, plan, p, 0, B, 128, S2_DTYPE_BF16, &z), S2_OK);
    ck_assert_int_eq(z.return_rows, pk[0].send_total);
    for (int r = 0; r < ranks; r++) {
        s2_cp_pack_free(&pk[r]);
        free(kv[r]), free(snd[r]), free(rcv[r]), free(dkv[r]);
    }
    free(pk), free(g), free(kv), free(snd), free(rcv), free(dkv);
    s2_cp_plan_free(plan);
    s2_ctx_free(ctx);
}

/* Sizes from the plans; bad arguments. */
START_TEST(sizes_and_segments)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = NULL;
    const s2_pattern *p = issue_pattern(ctx, &set, 64, 32, 8);
    for (int sh = 0; sh < 2; sh++) {
        int ranks = 2, B = 2, D = 128;
        int64_t seq = 8192;
        s2_cp_plan_args a = {seq, ranks, (s2_cp_sharding)sh, {128, 128}, false, 0};
        s2_cp_plan *plan = NULL;
        ck_assert_int_eq(s2_cp_plan_new(ctx, p, &a, &plan), S2_OK);
        for (int r = 0; r < ranks; r++) {
            s2_cp_sizes z;
            ck_assert_msg(s2_cp_sizes_of(ctx, plan, plan, p, r, B, D, S2_DTYPE_BF16, &z) == S2_OK, "%s",
                          s2_ctx_message(ctx));
            ck_assert_int_eq(z.own_tokens, seq / ranks);
            ck_assert_int_eq(z.recv_tokens, s2_cp_plan_recv_tokens(plan, r));
            ck_assert_uint_eq(z.kv_bytes, 2u * B * 8 * (size_t)(z.recv_tokens + z.own_tokens) * D * 2);
            ck_assert_uint_eq(z.partial_bytes, 2u * B * 32 * (size_t)z.own_tokens * (D * 2 + 4));
            int64_t recv_rows = 0, send_rows = 0;
            for (int h = 0; h < 8; h++) {
                const s2_cp_block *l;
                int64_t c;
                s2_cp_plan_recv(ctx, plan, r, h, &l, &c);
                recv_rows += c * 64;
                s2_cp_plan_send(ctx, plan, r, h, &l, &c);
                send_rows += c * 64;   /* two ranks: each block sent once */
            }
            /* K and V of every batch entry, each way; the returned partials are the sent rows */
            ck_assert_uint_eq(z.exchange_bytes, 2u * B * (size_t)(send_rows + recv_rows) * D * 2);
            ck_assert_int_eq(z.return_rows, 2 * B * send_rows);
            ck_assert_uint_eq(z.grad_bytes, z.kv_bytes + (size_t)z.return_rows * D * 2);
        }
        /* bad arguments */
        s2_cp_sizes z;
        ck_assert_int_eq(s2_cp_sizes_of(ctx, plan, NULL, p, 2, 1, D, S2_DTYPE_BF16, &z), S2_ERR_INVALID);
        ck_assert_int_eq(s2_cp_sizes_of(ctx, plan, NULL, p, 0, 0, D, S2_DTYPE_BF16, &z), S2_ERR_INVALID);
        ck_assert_int_eq(s2_cp_sizes_of(ctx, NULL, NULL, p, 0, 1, D, S2_DTYPE_BF16, &z), S2_ERR_NULL_ARG);
        s2_cp_msg *m = NULL;
        int64_t n = 0;
        ck_assert_int_eq(s2_cp_messages(ctx, plan, p, -1, &m, &n), S2_ERR_INVALID);
        ck_assert_int_eq(s2_cp_messages(ctx, plan, p, 0, NULL, &n), S2_ERR_NULL_ARG);
        s2_pattern_set *other = NULL;
        const s2_pattern *q = issue_pattern(ctx, &other, 64, 32, 4);   /* another kv-head count */
        ck_assert_int_eq(s2_cp_messages(ctx, plan, q, 0, &m, &n), S2_ERR_INVALID);
        s2_pattern_set_free(other);
        s2_cp_plan_free(plan);
    }
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

/* Visible communication: the union of exchange and reduce outside every attention phase, other phases ignored. */
START_TEST(timeline_measure)
{
    s2_cp_timeline t;
    for (int i = 0; i < S2_CP_PHASES; i++)
        t.start_ms[i] = t.end_ms[i] = -1;
    t.step_ms = 10;
    /* forward: copy-in [0,1]; exchange [1,5] under local [1.5,4]; remote [5,8]; combine [8,9] */
    t.start_ms[S2_CP_PHASE_COPY_IN] = 0, t.end_ms[S2_CP_PHASE_COPY_IN] = 1;
    t.start_ms[S2_CP_PHASE_EXCHANGE] = 1, t.end_ms[S2_CP_PHASE_EXCHANGE] = 5;
    t.start_ms[S2_CP_PHASE_LOCAL] = 1.5f, t.end_ms[S2_CP_PHASE_LOCAL] = 4;
    t.start_ms[S2_CP_PHASE_REMOTE] = 5, t.end_ms[S2_CP_PHASE_REMOTE] = 8;
    t.start_ms[S2_CP_PHASE_COMBINE] = 8, t.end_ms[S2_CP_PHASE_COMBINE] = 9;
    s2_cp_timeline_measure(&t);
    ck_assert_float_eq_tol(t.comm_ms, 4, 1e-6);
    ck_assert_float_eq_tol(t.visible_comm_ms, 1.5, 1e-6);   /* [1,1.5] and [4,5] */
    /* a reduce overlapping the exchange counts once; one inside an attention phase is hidden */
    t.start_ms[S2_CP_PHASE_REDUCE] = 4.5f, t.end_ms[S2_CP_PHASE_REDUCE] = 7;
    s2_cp_timeline_measure(&t);
    ck_assert_float_eq_tol(t.comm_ms, 6, 1e-6);
    ck_assert_float_eq_tol(t.visible_comm_ms, 1.5, 1e-6);
    /* backward: exchange [1,3] before the backward [3,8], reduce [8.5,9.5] after the gather */
    for (int i = 0; i < S2_CP_PHASES; i++)
        t.start_ms[i] = t.end_ms[i] = -1;
    t.start_ms[S2_CP_PHASE_EXCHANGE] = 1, t.end_ms[S2_CP_PHASE_EXCHANGE] = 3;
    t.start_ms[S2_CP_PHASE_BACKWARD] = 3, t.end_ms[S2_CP_PHASE_BACKWARD] = 8;
    t.start_ms[S2_CP_PHASE_GATHER] = 8, t.end_ms[S2_CP_PHASE_GATHER] = 8.5f;
    t.start_ms[S2_CP_PHASE_REDUCE] = 8.5f, t.end_ms[S2_CP_PHASE_REDUCE] = 9.5f;
    s2_cp_timeline_measure(&t);
    ck_assert_float_eq_tol(t.comm_ms, 3, 1e-6);
    ck_assert_float_eq_tol(t.visible_comm_ms, 3, 1e-6);
    /* nothing communicated */
    for (int i = 0; i < S2_CP_PHASES; i++)
        t.start_ms[i] = t.end_ms[i] = -1;
    t.start_ms[S2_CP_PHASE_LOCAL] = 0, t.end_ms[S2_CP_PHASE_LOCAL] = 2;
    s2_cp_timeline_measure(&t);
    ck_assert_float_eq(t.comm_ms, 0);
    ck_assert_float_eq(t.visible_comm_ms, 0);
    /* the unpack (communication stream) counts as communication; the pack (caller's stream) does not */
    t.start_ms[S2_CP_PHASE_PACK] = 2, t.end_ms[S2_CP_PHASE_PACK] = 2.5f;
    t.start_ms[S2_CP_PHASE_UNPACK] = 1.5f, t.end_ms[S2_CP_PHASE_UNPACK] = 3;
    s2_cp_timeline_measure(&t);
    ck_assert_float_eq_tol(t.comm_ms, 1.5, 1e-6);
    ck_assert_float_eq_tol(t.visible_comm_ms, 1, 1e-6);   /* [2,3] */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cp");
    TCase *tc = tcase_create("cp");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, nccl_absent);
    tcase_add_test(tc, messages_match);
    tcase_add_test(tc, sizes_and_segments);
    tcase_add_test(tc, timeline_measure);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
