/* The context-parallel plan (s2c/cpplan.h) against brute force: each rank
 * receives exactly the remote KV blocks its heads keep, once, from their
 * owner; the senders' lists are the receivers'; the remapped schedules pass
 * s2_schedule_check and map back entry by entry onto the single-GPU ones;
 * the work sums to the layout's; zigzag balances causal work within 5%;
 * the bytes of the issue's shapes are at most 1/6 of ring attention's; bad
 * arguments are refused. */
#include "s2c/cpplan.h"
#include "s2c/layout.h"
#include "s2c/pattern.h"
#include "check_main.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* The issue's shape (bf16, D 128): 32 heads, 8 kv heads, local 16, stride 8,
 * block 64, one shift per kv group as phi3-small, no dense heads. */
static s2_local_stride_args issue_args(void)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.name = "issue33";
    a.num_heads = 32;
    a.num_kv_heads = 8;
    a.block_size = 64;
    a.local_blocks = 16;
    a.vert_stride = 8;
    a.head_sliding_offset = 1;
    a.causal = true;
    a.max_seq_len = 0;
    return a;
}

/* Small patterns whose plans are checked exhaustively. */
static s2_local_stride_args small_args(int which)
{
    s2_local_stride_args a = issue_args();
    a.block_size = 16;
    a.num_heads = 8;
    a.num_kv_heads = 4;
    a.local_blocks = 4;
    a.vert_stride = 4;
    switch (which) {
    case 0: break;                                      /* causal, absolute stripes */
    case 1: a.num_dense_heads = 1; a.head_sliding_step = 3; break;
    case 2: a.causal = false; a.local_right = 2; break; /* bidirectional, relative stripes */
    case 3: a.homo_head = true; a.num_kv_heads = 2; a.local_blocks = 9; a.vert_stride = 5; break;
    }
    return a;
}

static const s2_pattern *make(s2_ctx *ctx, const s2_local_stride_args *a, s2_pattern_set **set)
{
    ck_assert_msg(s2_pattern_from_args(ctx, a, set) == S2_OK, "%s", s2_ctx_message(ctx));
    return s2_pattern_set_get(*set, 0);
}

static s2_cp_plan *plan_of(s2_ctx *ctx, const s2_pattern *p, int64_t seq, int ranks, s2_cp_sharding sh,
                           s2_tile_spec ts, bool schedules)
{
    s2_cp_plan_args a = {seq, ranks, sh, ts, schedules, 0};
    s2_cp_plan *c = NULL;
    ck_assert_msg(s2_cp_plan_new(ctx, p, &a, &c) == S2_OK, "%s", s2_ctx_message(ctx));
    return c;
}

/* Rank r's key block kb (its layout) as the sequence's block, -1 for an unused slot. */
static int64_t back_block(s2_ctx *ctx, const s2_cp_plan *c, int r, int kv, int64_t kb, int bs)
{
    int64_t R = s2_cp_plan_recv_tokens(c, r) / bs;
    if (kb < R) {
        const s2_cp_block *v;
        int64_t n;
        ck_assert_int_eq(s2_cp_plan_recv(ctx, c, r, kv, &v, &n), S2_OK);
        return kb < n ? v[kb].block : -1;
    }
    int64_t st[2], len[2], off = (kb - R) * bs;
    int nr = s2_cp_plan_shard(c, r, st, len);
    if (off >= len[0])
        ck_assert_int_eq(nr, 2);
    return (off < len[0] ? st[0] + off : st[1] + off - len[0]) / bs;
}

/* A query position of rank r's layout as the sequence's. */
static int64_t back_pos(const s2_cp_plan *c, int r, int64_t x)
{
    int64_t st[2], len[2], off = x - s2_cp_plan_recv_tokens(c, r);
    s2_cp_plan_shard(c, r, st, len);
    return off < len[0] ? st[0] + off : st[1] + off - len[0];
}

/* Receive and send lists against brute force over every (head, query block, key block). */
static void check_lists(s2_ctx *ctx, const s2_pattern *p, const s2_cp_plan *c, int64_t seq, int P)
{
    int bs = p->block_size, kvh = p->kv_heads, group = p->heads / kvh;
    int64_t nb = seq / bs;
    uint8_t *need = calloc((size_t)(P * kvh * nb), 1);
    for (int q = 0; q < p->heads; q++)
        for (int64_t m = 0; m < nb; m++)
            for (int64_t n = 0; n < nb; n++) {
                int r = s2_cp_plan_owner(c, m);
                if (s2_cp_plan_owner(c, n) != r && s2_block_kept(p, q, m, n))
                    need[((int64_t)r * kvh + q / group) * nb + n] = 1;
            }
    int64_t *sent = calloc((size_t)(P * kvh), sizeof *sent);
    for (int r = 0; r < P; r++)
        for (int g = 0; g < kvh; g++) {
            const s2_cp_block *v;
            int64_t n, k = 0;
            ck_assert_int_eq(s2_cp_plan_recv(ctx, c, r, g, &v, &n), S2_OK);
            ck_assert_int_le(n * bs, s2_cp_plan_recv_tokens(c, r));
            for (int64_t b = 0; b < nb; b++) {
                if (!need[((int64_t)r * kvh + g) * nb + b])
                    continue;
                ck_assert_msg(k < n && v[k].block == b, "rank %d kv %d: block %lld not received", r, g, (long long)b);
                ck_assert_int_eq(v[k].slot, k);
                ck_assert_int_eq(v[k].peer, s2_cp_plan_owner(c, b));
                ck_assert_int_ne(v[k].peer, r);
                /* the owner sends it, once, to this slot */
                const s2_cp_block *sv;
                int64_t sn, hits = 0;
                ck_assert_int_eq(s2_cp_plan_send(ctx, c, v[k].peer, g, &sv, &sn), S2_OK);
                for (int64_t i = 0; i < sn; i++)
                    hits += sv[i].peer == r && sv[i].block == b && sv[i].slot == k;
                ck_assert_int_eq(hits, 1);
                k++;
            }
            ck_assert_msg(k == n, "rank %d kv %d: %lld blocks received, %lld needed", r, g, (long long)n,
                          (long long)k);
            const s2_cp_block *sv;
            int64_t sn;
            ck_assert_int_eq(s2_cp_plan_send(ctx, c, r, g, &sv, &sn), S2_OK);
            for (int64_t i = 0; i < sn; i++) {
                ck_assert_int_eq(s2_cp_plan_owner(c, sv[i].block), r);
                if (i)   /* by receiver, then block */
                    ck_assert(sv[i - 1].peer < sv[i].peer ||
                              (sv[i - 1].peer == sv[i].peer && sv[i - 1].block < sv[i].block));
            }
            sent[r * kvh + g] = sn;
        }
    int64_t tr = 0, ts = 0;
    for (int i = 0; i < P * kvh; i++) {
        const s2_cp_block *v;
        int64_t n;
        s2_cp_plan_recv(ctx, c, i / kvh, i % kvh, &v, &n);
        tr += n;
        ts += sent[i];
    }
    ck_assert_int_eq(tr, ts);
    free(sent);
    free(need);
}

/* Rank r's schedules pass the check and, mapped back, are the single-GPU
 * schedules' lists of its query tiles (forward) and of its queries (transposed). */
static void check_schedules(s2_ctx *ctx, const s2_pattern *p, const s2_cp_plan *c, int r, s2_tile_spec ts,
                            const s2_schedule *full, const s2_schedule *full_tr)
{
    const s2_layout *lr = s2_cp_plan_layout(c, r);
    const s2_schedule *f = s2_cp_plan_schedule(c, r, false), *b = s2_cp_plan_schedule(c, r, true);
    ck_assert(lr && f && b);
    int bs = p->block_size, group = p->heads / p->kv_heads;
    s2_tile_spec tts = {ts.block_m, bs};
    ck_assert_msg(s2_schedule_check(ctx, lr, ts, false, f) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_msg(s2_schedule_check(ctx, lr, tts, true, b) == S2_OK, "%s", s2_ctx_message(ctx));
    const s2_tile_geom *g = &f->geom, *G = &full->geom;
    uint64_t *back = calloc((size_t)G->kv_tiles, sizeof *back);
    uint32_t *flags = calloc((size_t)G->kv_tiles, sizeof *flags);
    for (int h = 0; h < p->heads; h++) {
        int k = f->class_of_head[h], kv = h / group, oc = full->class_of_head[h];
        for (int64_t i = 0; i < g->q_tiles; i++) {
            int64_t t = back_pos(c, r, (g->first_q_tile + i) * g->block_m) / G->block_m;
            memset(back, 0, (size_t)G->kv_tiles * sizeof *back);
            int64_t lo = f->offsets[k * g->q_tiles + i], hi = f->offsets[k * g->q_tiles + i + 1];
            for (int64_t e = lo; e < hi; e++)
                for (int a = 0; a < g->sub_m; a++)
                    for (int j = 0; j < g->sub_n; j++)
                        if (f->entries[e].live >> (a * g->sub_n + j) & 1) {
                            int64_t n = back_block(ctx, c, r, kv, f->entries[e].tile * g->sub_n + j, bs);
                            ck_assert_int_ge(n, 0);
                            ck_assert_int_eq(back[n / G->sub_n] >> (a * G->sub_n + n % G->sub_n) & 1, 0);
                            back[n / G->sub_n] |= UINT64_C(1) << (a * G->sub_n + n % G->sub_n);
                            flags[n / G->sub_n] = f->entries[e].flags;
                        }
            int64_t olo = full->offsets[oc * G->q_tiles + t], ohi = full->offsets[oc * G->q_tiles + t + 1];
            int64_t nonzero = 0;
            for (int64_t j = 0; j < G->kv_tiles; j++)
                nonzero += back[j] != 0;
            ck_assert_int_eq(nonzero, ohi - olo);
            for (int64_t e = olo; e < ohi; e++)
                ck_assert_msg(back[full->entries[e].tile] == full->entries[e].live,
                              "rank %d head %d query tile %lld key tile %lld: live 0x%llx, single-GPU 0x%llx", r, h,
                              (long long)t, (long long)full->entries[e].tile,
                              (unsigned long long)back[full->entries[e].tile],
                              (unsigned long long)full->entries[e].live);
            /* one key block per tile: each entry is one single-GPU entry, flags and all */
            if (g->sub_n == 1) {
                ck_assert_int_eq(hi - lo, ohi - olo);
                for (int64_t e = olo; e < ohi; e++)
                    ck_assert_uint_eq(flags[full->entries[e].tile], full->entries[e].flags);
            }
        }
        /* transposed: per key block of the rank's layout, its query tiles */
        const s2_tile_geom *tg = &b->geom, *TG = &full_tr->geom;
        int tk = b->class_of_head[h], toc = full_tr->class_of_head[h];
        for (int64_t j = 0; j < tg->kv_tiles; j++) {
            int64_t lo = b->offsets[tk * tg->kv_tiles + j], hi = b->offsets[tk * tg->kv_tiles + j + 1];
            int64_t n = back_block(ctx, c, r, kv, j, bs);
            if (n < 0) {
                ck_assert_int_eq(hi, lo);
                continue;
            }
            int64_t olo = full_tr->offsets[toc * TG->kv_tiles + n], ohi = full_tr->offsets[toc * TG->kv_tiles + n + 1];
            int64_t mine = 0;
            for (int64_t e = olo; e < ohi; e++) {
                int64_t t = full_tr->entries[e].tile;
                if (s2_cp_plan_owner(c, t * TG->block_m / bs) != r)
                    continue;
                mine++;
                bool found = false;
                for (int64_t x = lo; x < hi && !found; x++)
                    if (back_pos(c, r, b->entries[x].tile * tg->block_m) / TG->block_m == t) {
                        found = true;
                        ck_assert_uint_eq(b->entries[x].live, full_tr->entries[e].live);
                        ck_assert_uint_eq(b->entries[x].flags, full_tr->entries[e].flags);
                    }
                ck_assert_msg(found, "rank %d head %d key block %lld: query tile %lld missing", r, h, (long long)n,
                              (long long)t);
            }
            ck_assert_int_eq(mine, hi - lo);
        }
    }
    free(back);
    free(flags);
}

static void check_plan(int which, int P, s2_cp_sharding sh, s2_tile_spec ts, int64_t seq)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set;
    s2_local_stride_args a = small_args(which);
    const s2_pattern *p = make(ctx, &a, &set);
    s2_cp_plan *c = plan_of(ctx, p, seq, P, sh, ts, true);
    check_lists(ctx, p, c, seq, P);
    s2_layout *L;
    s2_schedule *full, *full_tr;
    ck_assert_int_eq(s2_layout_new(ctx, p, seq, seq, &L), S2_OK);
    ck_assert_int_eq(s2_schedule_build(ctx, L, ts, false, &full), S2_OK);
    ck_assert_int_eq(s2_schedule_build(ctx, L, (s2_tile_spec){ts.block_m, p->block_size}, true, &full_tr), S2_OK);
    for (int r = 0; r < P; r++)
        check_schedules(ctx, p, c, r, ts, full, full_tr);
    /* the work sums to the layout's; the plan by runs (where it applies) is the plan by entries */
    s2_layout_stats ls;
    ck_assert_int_eq(s2_layout_stats_compute(ctx, L, ts, 64, S2_DTYPE_BF16, &ls), S2_OK);
    s2_cp_plan *fast = plan_of(ctx, p, seq, P, sh, ts, false);
    double sum = 0;
    for (int r = 0; r < P; r++) {
        s2_cp_rank_stats s1, s2;
        ck_assert_int_eq(s2_cp_plan_rank_stats(ctx, c, r, 64, S2_DTYPE_BF16, &s1), S2_OK);
        ck_assert_int_eq(s2_cp_plan_rank_stats(ctx, fast, r, 64, S2_DTYPE_BF16, &s2), S2_OK);
        ck_assert(s1.kept_pairs == s2.kept_pairs && s1.recv_blocks == s2.recv_blocks &&
                  s1.send_blocks == s2.send_blocks);
        ck_assert(s1.recv_bytes == (double)s1.recv_blocks * p->block_size * 64 * 2 * 2);
        sum += s1.kept_pairs;
    }
    ck_assert_msg(sum == ls.kept_pairs, "pairs %.0f, layout %.0f", sum, ls.kept_pairs);
    check_lists(ctx, p, fast, seq, P);
    s2_cp_plan_free(fast);
    s2_schedule_free(full);
    s2_schedule_free(full_tr);
    s2_layout_free(L);
    s2_cp_plan_free(c);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}

START_TEST(plans_exact)
{
    static const s2_tile_spec specs[] = {{64, 64}, {128, 64}, {64, 128}, {16, 16}, {32, 64}};
    for (int which = 0; which < 4; which++)
        for (int sh = 0; sh < 2; sh++)
            for (int P = 1; P <= 4; P *= 2)
                for (int s = 0; s < 5; s++) {
                    int64_t seq = (int64_t)2 * P * 128 * (which == 2 ? 2 : 3);
                    check_plan(which, P, (s2_cp_sharding)sh, specs[s], seq);
                }
}
END_TEST

/* The issue's shape: the zigzag's causal work within 5% of the mean (the
 * contiguous shards' far from it), and bytes at most 1/6 of ring attention's. */
START_TEST(issue_shape)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set;
    s2_local_stride_args a = issue_args();
    const s2_pattern *p = make(ctx, &a, &set);
    static const int ranks[] = {2, 8, 64};
    for (int i = 0; i < 3; i++)
        for (int sh = 0; sh < 2; sh++) {
            int64_t seq = ranks[i] == 64 ? INT64_C(1) << 21 : INT64_C(1) << 19;
            s2_cp_plan *c = plan_of(ctx, p, seq, ranks[i], (s2_cp_sharding)sh, (s2_tile_spec){128, 64}, false);
            double mx = 0, sum = 0, bytes = 0, ring = 0;
            for (int r = 0; r < ranks[i]; r++) {
                s2_cp_rank_stats st;
                ck_assert_int_eq(s2_cp_plan_rank_stats(ctx, c, r, 128, S2_DTYPE_BF16, &st), S2_OK);
                mx = st.kept_pairs > mx ? st.kept_pairs : mx;
                sum += st.kept_pairs;
                bytes += st.recv_bytes;
                ring += st.ring_bytes;
                ck_assert(st.ring_bytes == (double)(seq - seq / ranks[i]) * 8 * 128 * 2 * 2);
            }
            double imb = mx / (sum / ranks[i]);
            if (sh == S2_CP_ZIGZAG)
                ck_assert_msg(imb <= 1.05, "zigzag at %d ranks: max/mean %.4f", ranks[i], imb);
            else
                ck_assert_msg(imb > 1.3, "contiguous at %d ranks: max/mean %.4f", ranks[i], imb);
            ck_assert_msg(bytes * 6 <= ring, "%d ranks, sharding %d: %.3g bytes against ring's %.3g", ranks[i], sh,
                          bytes, ring);
            /* the stripes of about half the keys (causal): not nothing */
            ck_assert_msg(bytes * 20 >= ring, "%d ranks, sharding %d: %.3g bytes, ring %.3g", ranks[i], sh, bytes,
                          ring);
            s2_cp_plan_free(c);
        }
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(refusals)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set;
    s2_local_stride_args a = issue_args();
    const s2_pattern *p = make(ctx, &a, &set);
    s2_cp_plan *c = (s2_cp_plan *)&a;
    s2_cp_plan_args ok = {INT64_C(1) << 16, 4, S2_CP_ZIGZAG, {128, 64}, false, 0};
    struct {
        s2_cp_plan_args a;
        s2_status want;
        const char *says;
    } bad[] = {
        {{INT64_C(1) << 16, 0, S2_CP_ZIGZAG, {128, 64}, false, 0}, S2_ERR_INVALID, "0 ranks"},
        {{INT64_C(1) << 16, S2_CP_MAX_RANKS + 1, S2_CP_ZIGZAG, {128, 64}, false, 0}, S2_ERR_INVALID, "ranks (1.."},
        {{INT64_C(1) << 16, 4, (s2_cp_sharding)7, {128, 64}, false, 0}, S2_ERR_INVALID, "sharding 7"},
        {{INT64_C(1) << 16, 4, S2_CP_ZIGZAG, {128, 32}, false, 0}, S2_ERR_INVALID, "tile 128 x 32"},
        {{INT64_C(1) << 16, 4, S2_CP_ZIGZAG, {96, 64}, false, 0}, S2_ERR_INVALID, "power of two"},
        {{(INT64_C(1) << 16) + 512, 4, S2_CP_ZIGZAG, {128, 64}, false, 0}, S2_ERR_INVALID, "a multiple of 1024"},
        {{0, 4, S2_CP_ZIGZAG, {128, 64}, false, 0}, S2_ERR_SEQ_LEN, "seq_len 0"},
        {{INT64_C(1) << 16, 4, S2_CP_ZIGZAG, {128, 64}, true, 1000}, S2_ERR_UNSUPPORTED, "over 1000 entries"},
        {{INT64_C(1) << 16, 4, S2_CP_ZIGZAG, {128, 64}, false, -1}, S2_ERR_INVALID, "negative"},
        {{INT64_C(1) << 22, 4096, S2_CP_ZIGZAG, {128, 64}, false, 0}, S2_ERR_UNSUPPORTED, "over 2^28"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = (s2_cp_plan *)&a;
        ck_assert_msg(s2_cp_plan_new(ctx, p, &bad[i].a, &c) == bad[i].want, "case %zu: %s", i, s2_ctx_message(ctx));
        ck_assert_ptr_null(c);
        ck_assert_msg(strstr(s2_ctx_message(ctx), bad[i].says), "case %zu: '%s' lacks '%s'", i,
                      s2_ctx_message(ctx), bad[i].says);
    }
    ck_assert_int_eq(s2_cp_plan_new(ctx, NULL, &ok, &c), S2_ERR_NULL_ARG);
    ck_assert_int_eq(s2_cp_plan_new(ctx, p, NULL, &c), S2_ERR_NULL_ARG);
    ck_assert_int_eq(s2_cp_plan_new(ctx, p, &ok, NULL), S2_ERR_NULL_ARG);
    /* past the pattern's length */
    s2_local_stride_args short_args = a;
    short_args.max_seq_len = 8192;
    s2_pattern_set *sset;
    const s2_pattern *sp = make(ctx, &short_args, &sset);
    ck_assert_int_eq(s2_cp_plan_new(ctx, sp, &ok, &c), S2_ERR_SEQ_LEN);
    s2_pattern_set_free(sset);
    /* lookups out of range */
    ck_assert_int_eq(s2_cp_plan_new(ctx, p, &ok, &c), S2_OK);
    const s2_cp_block *v;
    int64_t n;
    s2_cp_rank_stats st;
    ck_assert_int_eq(s2_cp_plan_recv(ctx, c, 4, 0, &v, &n), S2_ERR_INVALID);
    ck_assert_int_eq(s2_cp_plan_send(ctx, c, 0, 8, &v, &n), S2_ERR_INVALID);
    ck_assert_int_eq(s2_cp_plan_send(ctx, c, -1, 0, &v, &n), S2_ERR_INVALID);
    ck_assert_int_eq(s2_cp_plan_rank_stats(ctx, c, 0, 0, S2_DTYPE_BF16, &st), S2_ERR_INVALID);
    ck_assert_int_eq(s2_cp_plan_owner(c, -1), -1);
    ck_assert_int_eq(s2_cp_plan_owner(c, 1024), -1);
    ck_assert_int_eq(s2_cp_plan_owner(c, 1023), 0);   /* zigzag: the last chunk is rank 0's */
    ck_assert_ptr_null(s2_cp_plan_schedule(c, 0, false));   /* planned without schedules */
    ck_assert_ptr_null(s2_cp_plan_layout(c, 0));
    s2_cp_plan_free(c);
    s2_cp_plan_free(NULL);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cpplan");
    TCase *tc = tcase_create("cpplan");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, plans_exact);
    tcase_add_test(tc, issue_shape);
    tcase_add_test(tc, refusals);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
