/* The context-parallel executor on the CPU (no NCCL, no GPU): NCCL absent
 * (S2C_LIBNCCL names a missing file) gives S2_ERR_UNSUPPORTED with the
 * library named; argument checks; the messages each rank derives from a
 * plan (every planned block carried once, by both ends in matching order,
 * runs only of blocks contiguous at both ends) and the executor's sizes. */
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

START_TEST(messages_match)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = NULL;
    const s2_pattern *p = issue_pattern(ctx, &set, 64, 32, 8);
    check_messages(p, 8192, 2, S2_CP_CONTIGUOUS);
    check_messages(p, 8192, 2, S2_CP_ZIGZAG);
    check_messages(p, 65536, 4, S2_CP_ZIGZAG);
    check_messages(p, 49152, 3, S2_CP_CONTIGUOUS);
    check_messages(p, 4096, 1, S2_CP_CONTIGUOUS);
    s2_pattern_set_free(set);
    set = NULL;
    p = issue_pattern(ctx, &set, 16, 8, 4);
    check_messages(p, 4096, 4, S2_CP_ZIGZAG);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

/* Sizes, and the reduce-scatter's segments: each rank's copies fill its own
 * segment with every block others read of it, once, and others' segments
 * with exactly the blocks it received. */
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
            cp_grad_map g;
            ck_assert_int_eq(s2_cp_grad_map_new(ctx, plan, p, r, B, &g), S2_OK);
            ck_assert_int_eq(z.segment_tokens, g.seg_rows);
            int64_t recv_rows = 0, send_rows = 0, own_rows = 0, part_rows = 0;
            for (int h = 0; h < 8; h++) {
                const s2_cp_block *l;
                int64_t c;
                s2_cp_plan_recv(ctx, plan, r, h, &l, &c);
                recv_rows += c * 64;
                s2_cp_plan_send(ctx, plan, r, h, &l, &c);
                send_rows += c * 64;   /* two ranks: each block sent once */
            }
            for (int64_t i = 0; i < g.n_own; i++) {
                ck_assert_int_eq(g.own[i].seg, r);
                own_rows += g.own[i].rows;
            }
            for (int64_t i = 0; i < g.n_partial; i++) {
                ck_assert_int_ne(g.partial[i].seg, r);
                part_rows += g.partial[i].rows;
            }
            ck_assert_int_eq(own_rows, send_rows);
            ck_assert_int_eq(part_rows, recv_rows);
            ck_assert_int_eq(g.seg_batch_rows[r], send_rows);
            ck_assert_int_ge(g.seg_rows, B * send_rows);
            s2_cp_grad_map_free(&g);
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
