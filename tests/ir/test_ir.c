/* Tests of ir/: golden masks, predicates, schedules, liveness, stats.  The
 * brute forces behind schedules, classes, liveness and stats ask the rule
 * written out in tests/harness/mask_oracle.h, not the predicate they use. */
#include "s2c/layout.h"
#include "pack_internal.h"
#include "s2c/pattern.h"
#include "bounded.h"
#include "mask_oracle.h"
#include "rand_pattern.h"
#include "util.h"
#include "check_main.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ----------------------------------------------------------------- */

static s2t_rng rng;

static s2_pattern *mut(s2_pattern_set *set) { return (s2_pattern *)s2_pattern_set_get(set, 0); }

static s2_layout *make_layout(const s2_pattern *p, int64_t q_len, int64_t kv_len)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_layout *l = NULL;
    s2_status st = s2_layout_new(ctx, p, q_len, kv_len, &l);
    ck_assert_msg(st == S2_OK, "layout_new: %s", s2_ctx_message(ctx));
    s2_ctx_free(ctx);
    return l;
}

/* ---- golden masks ---------------------------------------------------------- */

/* Value of a key in a flat JSON object of numbers and booleans; -1 if absent. */
static long json_get(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *s = strstr(json, pat);
    if (!s)
        return -1;
    s += strlen(pat);
    while (*s == ' ')
        s++;
    if (!strncmp(s, "true", 4))
        return 1;
    if (!strncmp(s, "false", 5))
        return 0;
    return strtol(s, NULL, 10);
}

static void args_from_json(const char *json, s2_local_stride_args *a, long *seqlen)
{
    s2_local_stride_args_default(a);
    long v;
    a->num_heads = (int)json_get(json, "num_heads");
    a->block_size = (int)json_get(json, "block_size");
    if ((v = json_get(json, "local_blocks")) >= 0) a->local_blocks = (int)v;
    if ((v = json_get(json, "vert_stride")) >= 0) a->vert_stride = (int)v;
    if ((v = json_get(json, "num_kv_heads")) >= 0) a->num_kv_heads = (int)v;
    if ((v = json_get(json, "num_dense_heads")) >= 0) a->num_dense_heads = (int)v;
    if ((v = json_get(json, "head_sliding_offset")) >= 0) a->head_sliding_offset = (int)v;
    if ((v = json_get(json, "homo_head")) >= 0) a->homo_head = v != 0;
    if ((v = json_get(json, "causal")) >= 0) a->causal = v != 0;
    *seqlen = json_get(json, "seqlen");
}

static char *read_golden(void)
{
    const char *path = getenv("S2C_GOLDEN");
    ck_assert_msg(path != NULL, "S2C_GOLDEN not set");
    char *data = NULL;
    size_t len = 0;
    s2_status st = s2_read_file(NULL, path, &data, &len);
    ck_assert_msg(st == S2_OK, "cannot read %s", path);
    return data;
}

START_TEST(test_golden_all_cases)
{
    char *data = read_golden();
    char *save = NULL;
    int cases = 0;
    char *line = strtok_r(data, "\n", &save);
    while (line) {
        if (strncmp(line, "case ", 5) != 0) {
            line = strtok_r(NULL, "\n", &save);
            continue;
        }
        char name[128];
        sscanf(line + 5, "%127s", name);
        const char *json = strchr(line, '{');
        s2_local_stride_args a;
        long seqlen;
        args_from_json(json, &a, &seqlen);
        a.name = name;
        s2_pattern_set *set = s2t_pattern_set_from_args(&a);
        const s2_pattern *p = s2_pattern_set_get(set, 0);
        s2_layout *l = make_layout(p, seqlen, seqlen);
        int H, M, N;
        line = strtok_r(NULL, "\n", &save);
        ck_assert(sscanf(line, "shape %d %d %d", &H, &M, &N) == 3);
        ck_assert_int_eq(M, s2_layout_q_blocks(l));
        ck_assert_int_eq(N, s2_layout_kv_blocks(l));
        ck_assert(H == 1 || H == p->heads);
        char *fmt = NULL;
        ck_assert_int_eq(s2_layout_format_mask(NULL, l, 0, &fmt), S2_OK);
        char *fmt_row = strchr(strchr(fmt, '\n') + 1, '\n') + 1; /* after the case and shape lines */
        char **rows = malloc((size_t)H * M * sizeof *rows);
        for (int i = 0; i < H * M; i++) {
            rows[i] = strtok_r(NULL, "\n", &save);
            ck_assert_int_eq((int)strlen(rows[i]), N);
        }
        for (int q = 0; q < p->heads; q++)
            for (int m = 0; m < M; m++) {
                const char *row = rows[(H == 1 ? 0 : q) * M + m];
                for (int n = 0; n < N; n++)
                    ck_assert_msg(s2_block_kept(p, q, m, n) == (row[n] == '1') &&
                                      s2t_oracle_block_kept(p, q, m, n) == (row[n] == '1'),
                                  "case %s head %d block (%d, %d): expected %c (predicate %d, test oracle %d)", name,
                                  q, m, n, row[n], s2_block_kept(p, q, m, n), s2t_oracle_block_kept(p, q, m, n));
                ck_assert_msg(!strncmp(fmt_row, row, (size_t)N), "case %s: formatted row %d of head %d differs", name, m, q);
                fmt_row += N + 1;
            }
        ck_assert_str_eq(fmt_row, "end\n");
        line = strtok_r(NULL, "\n", &save);
        ck_assert_str_eq(line, "end");
        free(rows);
        free(fmt);
        s2_layout_free(l);
        s2_pattern_set_free(set);
        cases++;
        line = strtok_r(NULL, "\n", &save);
    }
    ck_assert_int_eq(cases, 10);
    free(data);
}
END_TEST

/* ---- predicate hand cases --------------------------------------------------- */

START_TEST(test_predicate_hand)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.num_heads = 2;
    a.local_blocks = 2;
    a.vert_stride = 3;
    a.block_size = 16;
    s2_pattern_set *set = s2t_pattern_set_from_args(&a);
    s2_pattern *p = mut(set);
    /* head 0: shift 0 -> stripes at n = 0, 3, 6; head 1: shift 1 -> n = 2, 5 */
    ck_assert(s2_block_kept(p, 0, 9, 6) && s2_block_kept(p, 0, 9, 0) && !s2_block_kept(p, 0, 9, 5));
    ck_assert(s2_block_kept(p, 0, 9, 8) && s2_block_kept(p, 0, 9, 9) && !s2_block_kept(p, 0, 9, 10));
    ck_assert(s2_block_kept(p, 1, 9, 5) && !s2_block_kept(p, 1, 9, 6));
    /* token level: diagonal block is causal within */
    ck_assert(s2_token_kept(p, 0, 16 * 9 + 3, 16 * 9 + 3) && !s2_token_kept(p, 0, 16 * 9 + 3, 16 * 9 + 4));
    ck_assert(!s2_block_kept(p, 2, 0, 0) && !s2_block_kept(p, 0, -1, 0));
    /* vert_stride 0: pure local window */
    p->rules[0].vert_stride = 0;
    ck_assert(!s2_block_kept(p, 0, 9, 0) && !s2_block_kept(p, 0, 9, 6) && s2_block_kept(p, 0, 9, 8));
    /* ranges: sink block 0 for head 0; then drop distance >= 5 blocks for both heads */
    uint8_t only0[2] = {1, 0};
    s2_range_rule rr[2];
    memset(rr, 0, sizeof rr);
    rr[0] = (s2_range_rule){.action = S2_RANGE_SINK, .key_lo = 0, .key_hi = 16, .dist_lo = 0, .dist_hi = INT64_MAX, .heads = only0};
    rr[1] = (s2_range_rule){.action = S2_RANGE_DROP, .key_lo = 0, .key_hi = INT64_MAX, .dist_lo = 16 * 5, .dist_hi = INT64_MAX};
    p->ranges = rr;
    p->num_ranges = 1;
    ck_assert(s2_block_kept(p, 0, 9, 0) && !s2_block_kept(p, 1, 9, 0) && s2_block_kept(p, 1, 9, 2));
    p->num_ranges = 2;
    ck_assert(!s2_block_kept(p, 0, 9, 0) && !s2_block_kept(p, 1, 9, 2) && s2_block_kept(p, 1, 6, 2));
    ck_assert(s2_block_kept(p, 1, 9, 8)); /* local survives DROP */
    /* explicit mask for head 1: 3x3, lower part only where set */
    uint8_t bits[9] = {1, 0, 0, 0, 1, 0, 1, 1, 0};
    s2_block_mask bm = {.name = "m", .heads = 1, .rows = 3, .cols = 3, .bits = bits};
    p->masks = &bm;
    p->num_masks = 1;
    p->rules[1].mask = 0;
    ck_assert(s2_block_kept(p, 1, 2, 0) && s2_block_kept(p, 1, 2, 1) && !s2_block_kept(p, 1, 2, 2));
    ck_assert(!s2_block_kept(p, 1, 1, 0) && !s2_block_kept(p, 1, 3, 0));
    s2_layout *l = NULL;
    s2_ctx *ctx = s2_ctx_new();
    ck_assert_int_eq(s2_layout_new(ctx, p, 48, 48, &l), S2_OK);
    s2_layout_free(l);
    ck_assert_int_eq(s2_layout_new(ctx, p, 49, 49, &l), S2_ERR_INVALID);
    ck_assert_str_eq(s2_ctx_message(ctx), "head 1: 4 blocks exceed the explicit mask 'm' (3 x 3 blocks)");
    /* a parsed pattern knows where the mask was referenced: the message starts there */
    p->mask_where = (const char *const[]){"p.yaml:7:11: overrides[0].mask"};
    ck_assert_int_eq(s2_layout_new(ctx, p, 49, 49, &l), S2_ERR_INVALID);
    ck_assert_str_eq(s2_ctx_message(ctx),
                     "p.yaml:7:11: overrides[0].mask: head 1: 4 blocks exceed the explicit mask 'm' (3 x 3 blocks)");
    p->mask_where = NULL;
    ck_assert_int_eq(s2_layout_new(ctx, p, 10, 5, &l), S2_ERR_INVALID);
    ck_assert_ptr_null(l);
    s2_ctx_free(ctx);
    s2_pattern_set_free(set);
}
END_TEST

START_TEST(test_predicate_bidirectional)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.causal = false;
    a.local_blocks = 2;
    a.local_right = 3;
    a.vert_stride = 4;
    a.num_heads = 2;
    s2_pattern_set *set = s2t_pattern_set_from_args(&a);
    s2_pattern *p = mut(set);
    ck_assert_int_eq(p->vert_position, S2_VERT_RELATIVE);
    /* window: m - n < 2 and n - m < 3 */
    ck_assert(s2_block_kept(p, 0, 10, 9) && !s2_block_kept(p, 0, 10, 8) && s2_block_kept(p, 0, 10, 12));
    ck_assert(!s2_block_kept(p, 0, 10, 13));
    /* left distance m-n-L+1 = 4 at n = 5; right n-m-R+1 = 4 at n = 16 */
    ck_assert(s2_block_kept(p, 0, 10, 5) && s2_block_kept(p, 0, 10, 16) && s2_block_kept(p, 1, 10, 1));
    ck_assert(!s2_block_kept(p, 1, 10, 4) && !s2_block_kept(p, 1, 10, 15));
    p->vert_position = S2_VERT_ABSOLUTE; /* stripes at (n + shift) % 4 == 0, on both sides */
    ck_assert(s2_block_kept(p, 0, 10, 4) && s2_block_kept(p, 0, 10, 20) && !s2_block_kept(p, 0, 10, 5));
    ck_assert(s2_block_kept(p, 1, 10, 2) && !s2_block_kept(p, 1, 10, 4) && s2_block_kept(p, 0, 10, 12) && !s2_block_kept(p, 0, 10, 13));
    s2_pattern_set_free(set);
}
END_TEST

/* ---- random patterns and brute force ----------------------------------------- */

/* Random patterns for the brute-force checks: the draws these seeds were chosen with. */
static const s2t_rand_opts ir_rand = {.max_kv_shift = 1, .max_block_shift = 3, .max_vert_stride = 6,
                                      .dense_one_in = 5, .bidir_one_in = 3, .len_base = 200, .len_per_block = 4,
                                      .draw_q_len = true, .ranges_one_in = -4};

/* The predicate against the tests' oracle, written apart from it, on random
 * patterns with what the golden cases lack: ranges, masks, relative and
 * bidirectional absolute stripes, strides of 0; blocks past the end too. */
START_TEST(test_predicate_matches_oracle)
{
    s2t_rand_opts o = ir_rand;
    o.ranges_one_in = 2;
    int64_t kept = 0, total = 0;
    for (int it = 0; it < 300; it++) {
        s2t_rng_seed(&rng, 36000 + (uint64_t)it);
        s2t_rand_pattern rp;
        s2t_rand_pattern_new(&rng, &o, &rp);
        const s2_pattern *p = rp.p;
        int64_t nb = s2_cdiv(rp.kv_len, p->block_size) + 2;
        for (int q = 0; q < p->heads; q++)
            for (int64_t m = 0; m < nb; m++)
                for (int64_t n = 0; n < nb; n++) {
                    bool want = s2t_oracle_block_kept(p, q, m, n);
                    ck_assert_msg(s2_block_kept(p, q, m, n) == want, "seed %llu head %d block (%lld, %lld): oracle %d",
                                  (unsigned long long)rng.seed, q, (long long)m, (long long)n, want);
                    kept += want;
                    total++;
                }
        for (int t = 0; t < 200; t++) {
            int q = s2t_rng_int(&rng, 0, p->heads - 1);
            int64_t x = s2t_rng_next(&rng) % (uint64_t)rp.kv_len, k = s2t_rng_next(&rng) % (uint64_t)rp.kv_len;
            ck_assert(s2_token_kept(p, q, x, k) == s2t_oracle_token_kept(p, q, x, k));
        }
        s2t_rand_pattern_free(&rp);
    }
    /* both answers common enough for the comparison to mean something */
    ck_assert_msg(kept > total / 20 && kept < total - total / 20, "%lld of %lld kept", (long long)kept,
                  (long long)total);
}
END_TEST

/* The entry of (t, j) from the token oracle alone. */
static bool brute_entry(const s2_pattern *p, const s2_layout *l, const s2_tile_geom *g, int q, int64_t t, int64_t j,
                        s2_tile_entry *e)
{
    int64_t kv = s2_layout_kv_len(l), qlo = s2_max64(t * g->block_m, s2_layout_q_start(l));
    int64_t qhi = s2_min64((t + 1) * g->block_m, kv), ka = j * g->block_n, kb_full = ka + g->block_n;
    memset(e, 0, sizeof *e);
    bool full = kb_full <= kv, crosses = false;
    for (int64_t x = qlo; x < qhi; x++)
        for (int64_t y = ka; y < s2_min64(kb_full, kv); y++) {
            if (y > x)
                crosses = true;
            if (!s2t_oracle_token_kept(p, q, x, y)) {
                full = false;
                continue;
            }
            int i = (int)((x - t * g->block_m) / g->sub_m_size), jj = (int)((y - ka) / g->sub_n_size);
            e->live |= UINT64_C(1) << (i * g->sub_n + jj);
            e->row_mask |= 1u << i;
        }
    e->tile = j;
    e->flags = (full ? S2_ENTRY_FULL : 0) | (p->causal && crosses ? S2_ENTRY_CAUSAL : 0) |
               (kb_full > kv ? S2_ENTRY_RAGGED : 0);
    return e->live != 0;
}

static void assert_entry_eq(const s2_tile_entry *a, const s2_tile_entry *b, const char *what, int q, int64_t t)
{
    ck_assert_msg(a->tile == b->tile && a->live == b->live && a->row_mask == b->row_mask && a->flags == b->flags,
                  "seed %llu: %s head %d list %lld: tile %lld/%lld live %llx/%llx rows %x/%x flags %x/%x",
                  (unsigned long long)rng.seed, what, q, (long long)t, (long long)a->tile, (long long)b->tile,
                  (unsigned long long)a->live, (unsigned long long)b->live, a->row_mask, b->row_mask, a->flags,
                  b->flags);
}

static void check_schedule_vs_brute(const s2_pattern *p, const s2_layout *l, s2_tile_spec spec)
{
    s2_tile_geom g;
    if (s2_layout_tile_geom(NULL, l, spec, &g) != S2_OK)
        return;
    int64_t cap = s2_layout_max_entries(l, spec);
    s2_tile_entry *out = malloc((size_t)cap * sizeof *out);
    s2_tile_entry *brute = malloc((size_t)(g.q_tiles * g.kv_tiles) * sizeof *brute);
    bool *live = malloc((size_t)(g.q_tiles * g.kv_tiles));
    for (int q = 0; q < p->heads; q++) {
        for (int64_t ti = 0; ti < g.q_tiles; ti++)
            for (int64_t j = 0; j < g.kv_tiles; j++)
                live[ti * g.kv_tiles + j] = brute_entry(p, l, &g, q, g.first_q_tile + ti, j, &brute[ti * g.kv_tiles + j]);
        for (int64_t ti = 0; ti < g.q_tiles; ti++) {
            int64_t n = -1, k = 0;
            ck_assert_int_eq(s2_layout_q_tile_entries(NULL, l, spec, q, g.first_q_tile + ti, out, cap, &n), S2_OK);
            ck_assert(n <= cap);
            for (int64_t j = 0; j < g.kv_tiles; j++) {
                if (!live[ti * g.kv_tiles + j])
                    continue;
                ck_assert_msg(k < n, "seed %llu: head %d q tile %lld misses key tile %lld", (unsigned long long)rng.seed,
                              q, (long long)(g.first_q_tile + ti), (long long)j);
                assert_entry_eq(&out[k++], &brute[ti * g.kv_tiles + j], "forward", q, ti);
            }
            ck_assert_msg(k == n, "seed %llu: head %d q tile %lld has %lld extra entries", (unsigned long long)rng.seed,
                          q, (long long)ti, (long long)(n - k));
        }
        for (int64_t j = 0; j < g.kv_tiles; j++) {
            int64_t n = -1, k = 0;
            ck_assert_int_eq(s2_layout_kv_tile_entries(NULL, l, spec, q, j, out, cap, &n), S2_OK);
            for (int64_t ti = 0; ti < g.q_tiles; ti++) {
                if (!live[ti * g.kv_tiles + j])
                    continue;
                ck_assert_msg(k < n, "seed %llu: transposed misses", (unsigned long long)rng.seed);
                s2_tile_entry want = brute[ti * g.kv_tiles + j];
                want.tile = g.first_q_tile + ti;
                assert_entry_eq(&out[k++], &want, "transposed", q, j);
            }
            ck_assert_msg(k == n, "seed %llu: transposed extra entries", (unsigned long long)rng.seed);
        }
    }
    free(out);
    free(brute);
    free(live);
}

static const s2_tile_spec specs[] = {{32, 32}, {64, 64}, {128, 64}, {64, 128}, {128, 128}, {32, 128}, {16, 64}};

START_TEST(test_schedule_random)
{
    for (int it = 0; it < 120; it++) {
        s2t_rng_seed(&rng, 1000 + (uint64_t)it);
        s2t_rand_pattern rp;
        s2t_rand_pattern_new(&rng, &ir_rand, &rp);
        s2_layout *l = make_layout(rp.p, rp.q_len, rp.kv_len);
        check_schedule_vs_brute(rp.p, l, specs[s2t_rng_int(&rng, 0, 6)]);
        s2_layout_free(l);
        s2t_rand_pattern_free(&rp);
    }
}
END_TEST

/* Heads of one class keep the same blocks everywhere (the class may merge heads
 * whose rules differ only where it does not matter). */
static void check_classes_exact(const s2_pattern *p, const s2_layout *l)
{
    for (int q = 0; q < p->heads; q++) {
        int rep = s2_layout_head_class(l, q);
        for (int64_t m = s2_layout_first_q_block(l); m < s2_layout_kv_blocks(l); m++)
            for (int64_t n = 0; n < s2_layout_kv_blocks(l); n++)
                ck_assert_msg(s2t_oracle_block_kept(p, q, m, n) == s2t_oracle_block_kept(p, rep, m, n),
                              "seed %llu: head %d differs from its class head %d at (%lld, %lld)",
                              (unsigned long long)rng.seed, q, rep, (long long)m, (long long)n);
    }
}

/* Range rules in (nearly) every pattern: the closed-form lists, which skip
 * blocks that a later rule decides, against the token predicate. */
START_TEST(test_schedule_ranges_random)
{
    s2t_rand_opts o = ir_rand;
    o.ranges_one_in = -1000;
    int with_ranges = 0;
    for (int it = 0; it < 120; it++) {
        s2t_rng_seed(&rng, 21000 + (uint64_t)it);
        s2t_rand_pattern rp;
        s2t_rand_pattern_new(&rng, &o, &rp);
        with_ranges += rp.p->num_ranges > 0;
        s2_layout *l = make_layout(rp.p, rp.q_len, rp.kv_len);
        /* narrow key tiles too: a candidate block left out is then seldom covered by a neighbour */
        static const s2_tile_spec narrow[] = {{128, 16}, {64, 16}, {128, 32}};
        int k = s2t_rng_int(&rng, 0, 9);
        check_schedule_vs_brute(rp.p, l, k < 7 ? specs[k] : narrow[k - 7]);
        check_classes_exact(rp.p, l);
        s2_layout_free(l);
        s2t_rand_pattern_free(&rp);
    }
    ck_assert_int_ge(with_ranges, 110);
}
END_TEST

/* s2_layout_entries_bound against built schedules of random patterns (range
 * rules in half of them), forward and transposed, every group: per class it
 * is at least the lists' entries taken group at a time, and it counts only
 * candidates (at most three times the entries and four per list, on these
 * patterns); a limit stops it early with a total above the limit. */
START_TEST(test_entries_bound_random)
{
    s2t_rand_opts o = ir_rand;
    o.ranges_one_in = 2;
    for (int it = 0; it < 160; it++) {
        s2t_rng_seed(&rng, 31000 + (uint64_t)it);
        s2t_rand_pattern rp;
        s2t_rand_pattern_new(&rng, &o, &rp);
        s2_layout *l = make_layout(rp.p, rp.q_len, rp.kv_len);
        s2_tile_spec spec = specs[s2t_rng_int(&rng, 0, 6)];
        bool tr = it % 2;
        int group = 1 + it % 4, nc = s2_layout_num_classes(l);
        s2_schedule *s = NULL;
        ck_assert_int_eq(s2_schedule_build(NULL, l, spec, tr, &s), S2_OK);
        int64_t lists = tr ? s->geom.kv_tiles : s->geom.q_tiles, want_total = 0, got_total = -1;
        int64_t *got = calloc((size_t)nc, sizeof *got);
        ck_assert_int_eq(s2_layout_entries_bound(NULL, l, spec, tr, group, -1, got, &got_total), S2_OK);
        for (int c = 0; c < nc; c++) {
            int64_t want = 0, entries = 0;
            for (int64_t i = 0; i < lists; i++) {
                int64_t n = s->offsets[c * lists + i + 1] - s->offsets[c * lists + i];
                want += s2_cdiv(n, group);
                entries += n;
            }
            ck_assert_msg(got[c] >= want, "seed %llu class %d: bound %lld below %lld", (unsigned long long)rng.seed,
                          c, (long long)got[c], (long long)want);
            ck_assert_msg(got[c] <= 3 * entries + 4 * lists, "seed %llu class %d: bound %lld for %lld entries in %lld lists",
                          (unsigned long long)rng.seed, c, (long long)got[c], (long long)entries, (long long)lists);
            want_total += got[c];
        }
        ck_assert_int_eq(got_total, want_total);
        if (got_total > 1) {
            int64_t early = 0;
            ck_assert_int_eq(s2_layout_entries_bound(NULL, l, spec, tr, group, got_total / 2, NULL, &early), S2_OK);
            ck_assert_int_gt(early, got_total / 2);
            ck_assert_int_le(early, got_total);
        }
        free(got);
        s2_schedule_free(s);
        s2_layout_free(l);
        s2t_rand_pattern_free(&rp);
    }
}
END_TEST

/* More range rules than the per-tile list of decided intervals holds (32):
 * the lists stay exact when some are left out. */
START_TEST(test_schedule_many_ranges)
{
    enum { NR = 48 };
    static const s2_tile_spec many_specs[] = {{128, 16}, {64, 16}, {128, 64}, {32, 32}};
    for (int it = 0; it < 16; it++) {
        s2t_rng_seed(&rng, 23000 + (uint64_t)it);
        s2_local_stride_args a;
        s2_local_stride_args_default(&a);
        a.num_heads = 2;
        a.block_size = 16;
        a.local_blocks = s2t_rng_int(&rng, 1, 3);
        a.vert_stride = s2t_rng_int(&rng, 2, 5);
        a.causal = it % 2 != 0;
        s2_pattern_set *set = s2t_pattern_set_from_args(&a);
        s2_pattern *p = mut(set);
        s2_range_rule rr[NR];
        memset(rr, 0, sizeof rr);
        for (int i = 0; i < NR; i++) {
            /* narrow key and distance windows, so that many of them are decided per tile */
            rr[i].action = (s2_range_action)s2t_rng_int(&rng, 0, 3);
            rr[i].stride = s2t_rng_int(&rng, 1, 4);
            rr[i].key_lo = 16 * s2t_rng_int(&rng, 0, 40);
            rr[i].key_hi = rr[i].key_lo + 16 * s2t_rng_int(&rng, 1, 3);
            rr[i].dist_lo = s2t_rng_int(&rng, 0, 1) ? 0 : 16 * s2t_rng_int(&rng, 0, 8);
            rr[i].dist_hi = s2t_rng_int(&rng, 0, 1) ? INT64_MAX : rr[i].dist_lo + 16 * s2t_rng_int(&rng, 1, 20);
        }
        p->ranges = rr;
        p->num_ranges = NR;
        s2_layout *l = make_layout(p, 400, 400);
        check_schedule_vs_brute(p, l, many_specs[it % 4]);
        s2_layout_free(l);
        p->ranges = NULL;
        p->num_ranges = 0;
        s2_pattern_set_free(set);
    }
}
END_TEST

/* Far context by range rules: a sparser stride from distance 512, nothing
 * from 2048 (block 64).  Heads' shifts 0..255 agree modulo 8 and 32 in 32
 * classes (one per head before the shifts were compared modulo the strides). */
static s2_range_rule far_rules[2];

static s2_pattern_set *far_context(int heads)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.num_heads = heads;
    a.block_size = 64;
    a.local_blocks = 4;
    a.vert_stride = 8;
    a.max_seq_len = 0;
    s2_pattern_set *set = s2t_pattern_set_from_args(&a);
    s2_pattern *p = mut(set);
    memset(far_rules, 0, sizeof far_rules);
    far_rules[0] = (s2_range_rule){.action = S2_RANGE_STRIDE, .stride = 32, .key_hi = INT64_MAX, .dist_lo = 512,
                                   .dist_hi = INT64_MAX};
    far_rules[1] = (s2_range_rule){.action = S2_RANGE_DROP, .key_hi = INT64_MAX, .dist_lo = 2048,
                                   .dist_hi = INT64_MAX};
    p->ranges = far_rules;
    p->num_ranges = 2;
    return set;
}

static void far_context_free(s2_pattern_set *set)
{
    mut(set)->ranges = NULL;
    mut(set)->num_ranges = 0;
    s2_pattern_set_free(set);
}

START_TEST(test_classes_stride_ranges)
{
    s2_pattern_set *set = far_context(256);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_layout *l = make_layout(p, 4096, 4096);
    ck_assert_int_eq(s2_layout_num_classes(l), 32);
    for (int q = 0; q < 256; q++)
        ck_assert_int_eq(s2_layout_head_class(l, q), q % 32);
    check_classes_exact(p, l);
    /* a stride rule on one head only splits it off */
    uint8_t sel[256] = {0};
    sel[40] = 1;
    far_rules[0].heads = sel;
    s2_layout *l2 = make_layout(p, 4096, 4096);
    /* the others: only the drop rule and the base stride 8 apply */
    ck_assert_int_eq(s2_layout_num_classes(l2), 9);
    ck_assert_int_eq(s2_layout_head_class(l2, 40), 40);
    ck_assert_int_eq(s2_layout_head_class(l2, 72), 0);
    ck_assert_int_eq(s2_layout_head_class(l2, 41), 1);
    check_classes_exact(p, l2);
    far_rules[0].heads = NULL;
    s2_layout_free(l2);
    s2_layout_free(l);
    far_context_free(set);
}
END_TEST

/* The far-context pairs in closed form: head q, query block m keeps key
 * block n <= m at block distance d = m - n when d < 4 (local), 4 <= d < 8
 * and (n + q) % 8 == 0 (base stripes), 8 <= d < 32 and (n + q) % 32 == 0
 * (the stride rule from 512 tokens); never from 32 blocks (2048 tokens) on. */
static double far_context_pairs(int heads, int64_t blocks)
{
    double total = 0;
    for (int q = 0; q < heads; q++)
        for (int64_t m = 0; m < blocks; m++)
            for (int64_t n = m; n >= 0 && m - n < 32; n--) {
                int64_t d = m - n;
                bool kept = d < 4 || (d < 8 ? (n + q) % 8 == 0 : (n + q) % 32 == 0);
                if (kept)
                    total += d == 0 ? 64.0 * 65 / 2 : 64.0 * 64;
            }
    return total;
}

typedef struct far_run {
    int64_t len;
    double want;
} far_run;

static int far_stats_child(void *arg)
{
    const far_run *fr = arg;
    s2_pattern_set *set = far_context(256);
    s2_layout *l = NULL;
    s2_layout_stats st;
    int rc = 1;
    if (s2_layout_new(NULL, s2_pattern_set_get(set, 0), fr->len, fr->len, &l) == S2_OK &&
        s2_layout_stats_compute(NULL, l, (s2_tile_spec){128, 64}, 128, S2_DTYPE_BF16, &st) == S2_OK)
        rc = st.kept_pairs == fr->want ? 0 : 2;
    s2_layout_free(l);
    far_context_free(set);
    return rc;
}

/* Stats over 131072 tokens, 256 heads, two range rules: linear in the
 * entries (a fraction of a second; 262144 tokens took 37 s when every candidate stripe was
 * tried and every shift was a class), exact. */
START_TEST(test_stats_far_context_linear)
{
    far_run small = {8192, far_context_pairs(256, 8192 / 64)};
    s2_pattern_set *set = far_context(256);
    s2_layout *l = make_layout(s2_pattern_set_get(set, 0), small.len, small.len);
    s2_layout_stats st;
    ck_assert_int_eq(s2_layout_stats_compute(NULL, l, (s2_tile_spec){128, 64}, 128, S2_DTYPE_BF16, &st), S2_OK);
    ck_assert_msg(st.kept_pairs == small.want, "pairs %.0f, closed form %.0f", st.kept_pairs, small.want);
    s2_layout_free(l);
    far_context_free(set);
    far_run big = {131072, far_context_pairs(32, 131072 / 64) * 8};
    s2t_bounded b;
    ck_assert_int_eq(s2t_run_bounded(far_stats_child, &big, INT64_C(256) << 20, 30, &b), 0);
    ck_assert_msg(b.exit_code == 0, "stats child exit %d", b.exit_code);
    ck_assert_msg(b.seconds < 10.0, "stats over 131072 tokens took %.1f s", b.seconds);
    ck_assert_int_le(b.peak_kib, s2t_rss_bound_kib(INT64_C(256) << 20));
}
END_TEST

/* The text caps: the mask's size is exact, the schedule's estimate exact
 * when it samples every list (at most 64), and one byte under the size is
 * refused; a 1M-token, 4096-head, block-16 layout is refused at once. */
static int huge_child(void *arg)
{
    (void)arg;
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.num_heads = 4096;
    a.block_size = 16;
    a.vert_stride = 16;
    a.max_seq_len = 0;
    s2_pattern_set *set = s2t_pattern_set_from_args(&a);
    s2_layout *l = NULL;
    s2_ctx *ctx = s2_ctx_new();
    char *text = NULL;
    uint64_t est = 0;
    int rc = 0;
    if (s2_layout_new(ctx, s2_pattern_set_get(set, 0), 1 << 20, 1 << 20, &l) != S2_OK)
        rc = 1;
    else if (s2_layout_mask_text_size(l) <= S2_FORMAT_MAX_BYTES ||
             s2_layout_format_mask(ctx, l, 0, &text) != S2_ERR_UNSUPPORTED || text ||
             !strstr(s2_ctx_message(ctx), "over the limit of 1024 MiB"))
        rc = 2;
    else if (s2_layout_schedule_text_estimate(ctx, l, (s2_tile_spec){128, 64}, false, &est) != S2_OK ||
             est <= S2_FORMAT_MAX_BYTES)
        rc = 3;
    s2_layout_free(l);
    s2_ctx_free(ctx);
    s2_pattern_set_free(set);
    return rc;
}

START_TEST(test_format_caps)
{
    s2_pattern_set *set = far_context(8);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_ctx *ctx = s2_ctx_new();
    s2_layout *l = make_layout(p, 3000, 4000);
    char *text = NULL;
    ck_assert_int_eq(s2_layout_format_mask(ctx, l, 0, &text), S2_OK);
    uint64_t size = s2_layout_mask_text_size(l);
    ck_assert_uint_eq(strlen(text), size);
    free(text);
    ck_assert_int_eq(s2_layout_format_mask(ctx, l, (size_t)size, &text), S2_OK);
    free(text);
    ck_assert_int_eq(s2_layout_format_mask(ctx, l, (size_t)size - 1, &text), S2_ERR_UNSUPPORTED);
    ck_assert_ptr_null(text);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "the mask text would be about 0 MiB, over the limit of 0 MiB"));
    for (int tr = 0; tr < 2; tr++) {
        s2_tile_spec spec = {128, 128}; /* 24 query tiles, 32 key tiles, 8 classes: 256 lists */
        s2_schedule *s = NULL;
        ck_assert_int_eq(s2_schedule_build(ctx, l, spec, tr, &s), S2_OK);
        ck_assert_int_eq(s2_schedule_format(ctx, s, 0, &text), S2_OK);
        size_t len = strlen(text);
        free(text);
        uint64_t est = 0;
        ck_assert_int_eq(s2_layout_schedule_text_estimate(ctx, l, spec, tr, &est), S2_OK);
        ck_assert_msg(est > len / 2 && est < 2 * len, "estimate %llu, text %zu", (unsigned long long)est, len);
        ck_assert_int_eq(s2_schedule_format(ctx, s, len, &text), S2_OK);
        ck_assert_uint_eq(strlen(text), len);
        free(text);
        ck_assert_int_eq(s2_schedule_format(ctx, s, len - 1, &text), S2_ERR_UNSUPPORTED);
        ck_assert_ptr_null(text);
        ck_assert_int_eq(s2_schedule_format(ctx, s, 1000, &text), S2_ERR_UNSUPPORTED);
        ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "the schedule text would be about"));
        s2_schedule_free(s);
    }
    s2_layout_free(l);
    far_context_free(set);
    /* 2 heads in 2 classes, 16 query tiles: 32 lists, every one sampled */
    set = far_context(2);
    l = make_layout(s2_pattern_set_get(set, 0), 1000, 1000);
    ck_assert_int_eq(s2_layout_num_classes(l), 2);
    s2_schedule *s = NULL;
    ck_assert_int_eq(s2_schedule_build(ctx, l, (s2_tile_spec){64, 64}, false, &s), S2_OK);
    ck_assert_int_eq(s2_schedule_format(ctx, s, 0, &text), S2_OK);
    uint64_t est = 0;
    ck_assert_int_eq(s2_layout_schedule_text_estimate(ctx, l, (s2_tile_spec){64, 64}, false, &est), S2_OK);
    ck_assert_uint_eq(est, strlen(text));
    free(text);
    s2_schedule_free(s);
    s2_layout_free(l);
    s2_ctx_free(ctx);
    far_context_free(set);
    s2t_bounded b;
    ck_assert_int_eq(s2t_run_bounded(huge_child, NULL, INT64_C(1) << 30, 20, &b), 0);
    ck_assert_msg(b.exit_code == 0, "huge layout child exit %d", b.exit_code);
    ck_assert_msg(b.seconds < 10.0, "refusing took %.1f s", b.seconds);
    ck_assert_int_le(b.peak_kib, s2t_rss_bound_kib(INT64_C(256) << 20));
}
END_TEST

/* ---- schedules, classes ----------------------------------------------------------- */

START_TEST(test_schedule_build_matches_lists)
{
    for (int it = 0; it < 30; it++) {
        s2t_rng_seed(&rng, 5000 + (uint64_t)it);
        s2t_rand_pattern rp;
        s2t_rand_pattern_new(&rng, &ir_rand, &rp);
        s2_layout *l = make_layout(rp.p, rp.q_len, rp.kv_len);
        s2_tile_spec spec = specs[s2t_rng_int(&rng, 0, 5)];
        s2_schedule *fw = NULL, *tr = NULL;
        if (s2_schedule_build(NULL, l, spec, false, &fw) != S2_OK) {
            s2_layout_free(l);
            s2t_rand_pattern_free(&rp);
            continue;
        }
        ck_assert_int_eq(s2_schedule_build(NULL, l, spec, true, &tr), S2_OK);
        const s2_tile_geom *g = &fw->geom;
        /* transposed == forward transposed, per class */
        for (int c = 0; c < fw->num_classes; c++) {
            int64_t nf = fw->offsets[(c + 1) * g->q_tiles] - fw->offsets[c * g->q_tiles];
            int64_t nt = tr->offsets[(c + 1) * g->kv_tiles] - tr->offsets[c * g->kv_tiles];
            ck_assert_msg(nf == nt, "seed %llu: class %d forward %lld vs transposed %lld entries",
                          (unsigned long long)rng.seed, c, (long long)nf, (long long)nt);
            for (int64_t ti = 0; ti < g->q_tiles; ti++)
                for (int64_t k = fw->offsets[c * g->q_tiles + ti]; k < fw->offsets[c * g->q_tiles + ti + 1]; k++) {
                    const s2_tile_entry *e = &fw->entries[k];
                    int64_t lo = tr->offsets[c * g->kv_tiles + e->tile], hi = tr->offsets[c * g->kv_tiles + e->tile + 1];
                    bool found = false;
                    for (int64_t u = lo; u < hi; u++)
                        if (tr->entries[u].tile == g->first_q_tile + ti) {
                            ck_assert(tr->entries[u].live == e->live && tr->entries[u].flags == e->flags);
                            found = true;
                        }
                    ck_assert_msg(found, "seed %llu: entry missing in transposed", (unsigned long long)rng.seed);
                }
        }
        /* heads of one class have identical block masks */
        const s2_pattern *p = rp.p;
        for (int q = 0; q < p->heads; q++) {
            int rep = s2_layout_head_class(l, q);
            ck_assert(rep <= q && s2_layout_class_rep(l, fw->class_of_head[q]) == rep);
            for (int64_t m = s2_layout_first_q_block(l); m < s2_layout_kv_blocks(l); m++)
                for (int64_t n = 0; n < s2_layout_kv_blocks(l); n++)
                    ck_assert(s2t_oracle_block_kept(p, q, m, n) == s2t_oracle_block_kept(p, rep, m, n));
        }
        /* the packed device form holds the same lists */
        for (int which = 0; which < 2; which++) {
            const s2_schedule *sc = which ? tr : fw;
            s2_packed_schedule pk;
            ck_assert_int_eq(s2_schedule_pack(NULL, sc, &pk), S2_OK);
            const unsigned char *b = pk.data;
            ck_assert(pk.offsets_off % 16 == 0 && pk.entries_off % 16 == 0);
            const int32_t *pcls = (const int32_t *)(b + pk.class_of_head_off);
            const int32_t *poff = (const int32_t *)(b + pk.offsets_off);
            const s2_dev_entry *pent = (const s2_dev_entry *)(b + pk.entries_off);
            int64_t nl = (int64_t)sc->num_classes * (sc->transposed ? g->kv_tiles : g->q_tiles);
            for (int q = 0; q < p->heads; q++)
                ck_assert_int_eq(pcls[q], sc->class_of_head[q]);
            ck_assert_int_eq(pk.num_entries, sc->offsets[nl]);
            for (int64_t i = 0; i <= nl; i++)
                ck_assert_int_eq(poff[i], sc->offsets[i]);
            for (int64_t i = 0; i < pk.num_entries; i++) {
                ck_assert_int_eq(pent[i].tile, sc->entries[i].tile);
                ck_assert(pent[i].live == sc->entries[i].live);
                ck_assert_uint_eq(pent[i].flags & 0xffu, sc->entries[i].flags);
                ck_assert_uint_eq(pent[i].flags >> 8, sc->entries[i].row_mask);
            }
            s2_packed_schedule_free(&pk);
        }
        char *text = NULL;
        ck_assert_int_eq(s2_schedule_format(NULL, fw, 0, &text), S2_OK);
        ck_assert_ptr_nonnull(strstr(text, "class 0 heads 0"));
        free(text);
        s2_schedule_free(fw);
        s2_schedule_free(tr);
        s2_layout_free(l);
        s2t_rand_pattern_free(&rp);
    }
}
END_TEST

/* Gathered packing: every list's entries, in order, `group` per gathered
 * entry, live bits regrouped to i * group + j, padding slots repeating the
 * last block with no live bit, FULL only for whole groups of FULL entries. */
START_TEST(test_schedule_pack_gathered)
{
    for (int it = 0; it < 60; it++) {
        s2t_rng_seed(&rng, 7000 + (uint64_t)it);
        s2t_rand_pattern rp;
        s2t_rand_pattern_new(&rng, &ir_rand, &rp);
        s2_layout *l = make_layout(rp.p, rp.q_len, rp.kv_len);
        int bs = rp.p->block_size, group = s2t_rng_int(&rng, 2, 4);
        s2_tile_spec spec = {s2t_rng_int(&rng, 0, 1) ? 64 : 128, bs};
        s2_schedule *fw = NULL;
        s2_packed_schedule pk;
        if (bs > 64 || s2_schedule_build(NULL, l, spec, false, &fw) != S2_OK) {
            s2_layout_free(l);
            s2t_rand_pattern_free(&rp);
            continue;
        }
        const s2_tile_geom *g = &fw->geom;
        ck_assert_int_eq(g->sub_n, 1);
        if (g->sub_m * group > 32) {
            ck_assert_int_eq(s2_schedule_pack_gathered(NULL, fw, group, &pk), S2_ERR_INVALID);
            s2_schedule_free(fw);
            s2_layout_free(l);
            s2t_rand_pattern_free(&rp);
            continue;
        }
        ck_assert_int_eq(s2_schedule_pack_gathered(NULL, fw, group, &pk), S2_OK);
        const unsigned char *b = pk.data;
        ck_assert(pk.offsets_off % 16 == 0 && pk.entries_off % 16 == 0);
        const int32_t *pcls = (const int32_t *)(b + pk.class_of_head_off);
        const int32_t *poff = (const int32_t *)(b + pk.offsets_off);
        const s2_dev_gentry *pent = (const s2_dev_gentry *)(b + pk.entries_off);
        for (int q = 0; q < rp.p->heads; q++)
            ck_assert_int_eq(pcls[q], fw->class_of_head[q]);
        int64_t nl = (int64_t)fw->num_classes * g->q_tiles;
        ck_assert_int_eq(poff[0], 0);
        ck_assert_int_eq(poff[nl], pk.num_entries);
        for (int64_t i = 0; i < nl; i++) {
            int64_t b0 = fw->offsets[i], n = fw->offsets[i + 1] - b0;
            ck_assert_int_eq(poff[i + 1] - poff[i], (n + group - 1) / group);
            for (int64_t k = 0; k < n; k++) {
                const s2_dev_gentry *d = &pent[poff[i] + k / group];
                const s2_tile_entry *e = &fw->entries[b0 + k];
                int j = (int)(k % group);
                ck_assert_int_eq(d->block[j], e->tile);
                for (int r = 0; r < g->sub_m; r++)
                    ck_assert(!!(d->live >> (r * group + j) & 1u) == !!(e->live >> r & 1u));
            }
            for (int64_t k = n; k % group; k++) {   /* padding of the last entry */
                const s2_dev_gentry *d = &pent[poff[i] + k / group];
                ck_assert_int_eq(d->block[k % group], fw->entries[b0 + n - 1].tile);
                for (int r = 0; r < g->sub_m; r++)
                    ck_assert(!(d->live >> (r * group + (int)(k % group)) & 1u));
            }
            for (int64_t e = 0; e < poff[i + 1] - poff[i]; e++) {
                bool full = (e + 1) * group <= n;
                for (int64_t k = e * group; full && k < (e + 1) * group; k++)
                    full = fw->entries[b0 + k].flags & S2_ENTRY_FULL;
                ck_assert_uint_eq(pent[poff[i] + e].flags, full ? S2_ENTRY_FULL : 0u);
            }
        }
        s2_packed_schedule_free(&pk);
        ck_assert_int_eq(s2_schedule_pack_gathered(NULL, fw, 5, &pk), S2_ERR_INVALID);
        ck_assert_int_eq(s2_schedule_pack_gathered(NULL, fw, 1, &pk), S2_ERR_INVALID);
        s2_schedule_free(fw);
        s2_layout_free(l);
        s2t_rand_pattern_free(&rp);
    }
}
END_TEST

/* Owned pairs (two-slab tiles over 64-token blocks): per list as many
 * entries as union pairs; each query sub-block computes each block it keeps
 * exactly once over the entries it runs (all but the other's owned entry)
 * and no other live slot; owned entries are the first two (OWN0, then OWN1),
 * live for their owner only; FULL as union pairs for the rest; OWN_FULL only
 * where the 64-row schedule calls the owner's tile of that block FULL. */
static void check_owned(const s2_layout *l, const s2_schedule *fw, const s2_packed_schedule *pk, int64_t *dead_owned,
                        int64_t *dead_union)
{
    const s2_tile_geom *g = &fw->geom;
    s2_schedule *f64 = NULL;
    ck_assert_int_eq(s2_schedule_build(NULL, l, (s2_tile_spec){64, g->block_n}, false, &f64), S2_OK);
    const unsigned char *b = pk->data;
    const int32_t *poff = (const int32_t *)(b + pk->offsets_off);
    const s2_dev_gentry *pent = (const s2_dev_gentry *)(b + pk->entries_off);
    *dead_owned = *dead_union = 0;
    for (int h = 0; h < fw->heads; h++) {
        int c = fw->class_of_head[h];
        for (int64_t t = 0; t < g->q_tiles; t++) {
            int64_t li = (int64_t)c * g->q_tiles + t, b0 = fw->offsets[li], n = fw->offsets[li + 1] - b0;
            int64_t ne = poff[li + 1] - poff[li];
            ck_assert_int_eq(ne, (n + 1) / 2);
            const s2_dev_gentry *d = &pent[poff[li]];
            bool owned = ne >= 2 && (d[0].flags & S2_ENTRY_OWN0);
            int64_t live = 0;
            for (int64_t k = 0; k < n; k++)
                live += __builtin_popcountll(fw->entries[b0 + k].live & 3u);
            *dead_union += 4 * ne - live;
            *dead_owned += 4 * ne - (owned ? 4 : 0) - live;
            for (int64_t e = 0; e < ne; e++) {
                uint32_t f = d[e].flags;
                if (owned && e == 0)
                    ck_assert(f & S2_ENTRY_OWN0 && !(f & S2_ENTRY_OWN1) && (d[e].live & ~3u) == 0);
                else if (owned && e == 1)
                    ck_assert(f & S2_ENTRY_OWN1 && !(f & S2_ENTRY_OWN0) && (d[e].live & ~12u) == 0);
                else
                    ck_assert(!(f & (S2_ENTRY_OWN0 | S2_ENTRY_OWN1 | S2_ENTRY_OWN_FULL)));
            }
            for (int r = 0; r < 2; r++) {
                /* blocks sub-block r computes live, each once */
                int64_t seen = 0;
                for (int64_t e = 0; e < ne; e++) {
                    if (owned && e == 1 - r)   /* the other's owned entry: not run */
                        continue;
                    for (int j = 0; j < 2; j++) {
                        if (!(d[e].live >> (2 * r + j) & 1u))
                            continue;
                        int64_t hits = 0;
                        for (int64_t k = 0; k < n; k++)
                            hits += fw->entries[b0 + k].tile == d[e].block[j] && (fw->entries[b0 + k].live >> r & 1u);
                        ck_assert_int_eq(hits, 1);
                        seen++;
                        if (!(d[e].flags & S2_ENTRY_OWN_FULL))
                            continue;
                        /* the owner's 64-row tile of this block is FULL */
                        int64_t u = 2 * (g->first_q_tile + t) + r - f64->geom.first_q_tile;
                        ck_assert(u >= 0 && u < f64->geom.q_tiles);
                        int64_t l64 = (int64_t)f64->class_of_head[h] * f64->geom.q_tiles + u;
                        bool full = false;
                        for (int64_t k = f64->offsets[l64]; k < f64->offsets[l64 + 1]; k++)
                            if (f64->entries[k].tile == d[e].block[j])
                                full = f64->entries[k].flags & S2_ENTRY_FULL;
                        ck_assert(full);
                    }
                }
                int64_t want = 0;
                for (int64_t k = 0; k < n; k++)
                    want += fw->entries[b0 + k].live >> r & 1u;
                ck_assert_int_eq(seen, want);
            }
        }
    }
    s2_schedule_free(f64);
}

START_TEST(test_schedule_pack_gathered_owned)
{
    int tried = 0;
    for (int it = 0; it < 200 && tried < 40; it++) {
        s2t_rng_seed(&rng, 9100 + (uint64_t)it);
        s2t_rand_pattern rp;
        s2t_rand_pattern_new(&rng, &ir_rand, &rp);
        s2_layout *l = make_layout(rp.p, rp.q_len, rp.kv_len);
        int bs = rp.p->block_size;
        s2_schedule *fw = NULL;
        s2_packed_schedule pk;
        if (bs > 64 || s2_schedule_build(NULL, l, (s2_tile_spec){128, bs}, false, &fw) != S2_OK) {
            s2_layout_free(l);
            s2t_rand_pattern_free(&rp);
            continue;
        }
        if (fw->geom.sub_m != 2) {
            ck_assert_int_eq(s2_schedule_pack_gathered_owned(NULL, fw, &pk), S2_ERR_INVALID);
        } else {
            tried++;
            ck_assert_int_eq(s2_schedule_pack_gathered_owned(NULL, fw, &pk), S2_OK);
            int64_t dead_owned, dead_union;
            check_owned(l, fw, &pk, &dead_owned, &dead_union);
            ck_assert(dead_owned <= dead_union);
            s2_packed_schedule_free(&pk);
        }
        s2_schedule_free(fw);
        s2_layout_free(l);
        s2t_rand_pattern_free(&rp);
    }
    ck_assert(tried > 0);
}
END_TEST

/* The S2 rows of the forward bench (block 64, local 8 stride 16 at 8K, local
 * 16 stride 8 at 4K): owned pairs leave fewer dead (sub-block, block) slots
 * than union pairs (printed). */
START_TEST(test_pack_owned_s2_rows)
{
    static const int rows[2][3] = {{8, 16, 8192}, {16, 8, 4096}};
    for (int i = 0; i < 2; i++) {
        s2_local_stride_args a;
        s2_local_stride_args_default(&a);
        a.num_heads = 4;
        a.block_size = 64;
        a.local_blocks = rows[i][0];
        a.vert_stride = rows[i][1];
        s2_pattern_set *set = s2t_pattern_set_from_args(&a);
        const s2_pattern *p = s2_pattern_set_get(set, 0);
        s2_layout *l = make_layout(p, rows[i][2], rows[i][2]);
        s2_schedule *fw = NULL;
        ck_assert_int_eq(s2_schedule_build(NULL, l, (s2_tile_spec){128, 64}, false, &fw), S2_OK);
        s2_packed_schedule pk;
        ck_assert_int_eq(s2_schedule_pack_gathered_owned(NULL, fw, &pk), S2_OK);
        int64_t dead_owned, dead_union;
        check_owned(l, fw, &pk, &dead_owned, &dead_union);
        int64_t computed = 4 * pk.num_entries;
        printf("owned pairs, local %d stride %d, %d tokens: dead slots %lld (union pairs %lld) of %lld\n",
               rows[i][0], rows[i][1], rows[i][2], (long long)dead_owned, (long long)dead_union, (long long)computed);
        ck_assert(dead_owned * 2 < dead_union);
        s2_packed_schedule_free(&pk);
        s2_schedule_free(fw);
        s2_layout_free(l);
        s2_pattern_set_free(set);
    }
}
END_TEST

/* Gathered resident key tiles (dK/dV): per kv head every key block in exactly
 * one group, the same groups for every query head of the kv head, and each
 * head's list of a group the merge of its blocks' transposed lists: same
 * query tiles, live bit i * group + j from block j's bit i, FULL only when
 * every slot is used and FULL there; groups heaviest first. */
START_TEST(test_schedule_pack_gathered_kv)
{
    int checked = 0;
    for (int it = 0; it < 80; it++) {
        s2t_rng_seed(&rng, 9100 + (uint64_t)it);
        s2t_rand_pattern rp;
        s2t_rand_pattern_new(&rng, &ir_rand, &rp);
        const s2_pattern *p = rp.p;
        s2_layout *l = make_layout(p, rp.q_len, rp.kv_len);
        int bs = p->block_size, group = s2t_rng_int(&rng, 1, 4);
        s2_tile_spec spec = {s2t_rng_int(&rng, 0, 1) ? 64 : 128, bs};
        s2_schedule *tr = NULL;
        s2_packed_schedule pk;
        int32_t lists = -1;
        if (bs > 64 || s2_schedule_build(NULL, l, spec, true, &tr) != S2_OK) {
            s2_layout_free(l);
            s2t_rand_pattern_free(&rp);
            continue;
        }
        const s2_tile_geom *g = &tr->geom;
        int G = p->heads / p->kv_heads;
        int64_t nb = g->kv_tiles;
        ck_assert_int_eq(s2_schedule_pack_gathered_kv(NULL, tr, p->kv_heads, group, &pk, &lists), S2_OK);
        ck_assert_int_eq(lists, (nb + group - 1) / group);
        const unsigned char *b = pk.data;
        ck_assert(pk.offsets_off % 16 == 0 && pk.entries_off % 16 == 0);
        const int32_t *pcls = (const int32_t *)(b + pk.class_of_head_off);
        const int32_t *poff = (const int32_t *)(b + pk.offsets_off);
        const s2_dev_entry *pent = (const s2_dev_entry *)(b + pk.entries_off);
        char *seen = malloc((size_t)nb + 1);
        for (int kvh = 0; kvh < p->kv_heads; kvh++) {
            memset(seen, 0, (size_t)nb + 1);
            int64_t prev_weight = INT64_MAX;
            for (int32_t x = 0; x < lists; x++) {
                const s2_dev_kvgroup *hdr0 = (const s2_dev_kvgroup *)&pent[poff[(int64_t)pcls[kvh * G] * lists + x]];
                int used = 0;
                for (int j = 0; j < 4; j++) {
                    int32_t blk = hdr0->block[j];
                    if (j >= group) {
                        ck_assert_int_eq(blk, -1);
                        continue;
                    }
                    if (blk < 0)
                        continue;
                    ck_assert(blk < nb);
                    ck_assert_msg(!seen[blk], "kv head %d: block %d in two groups", kvh, blk);
                    seen[blk] = 1;
                    used++;
                }
                int64_t weight = 0;
                for (int i = 0; i < G; i++) {
                    int h = kvh * G + i;
                    int cls = tr->class_of_head[h];
                    int64_t li = (int64_t)pcls[h] * lists + x;
                    const s2_dev_kvgroup *hdr = (const s2_dev_kvgroup *)&pent[poff[li]];
                    ck_assert(!memcmp(hdr, hdr0, sizeof *hdr));
                    int64_t m0 = poff[li] + 1, m1 = poff[li + 1];
                    weight += m1 - m0;
                    for (int64_t e = m0 + 1; e < m1; e++)
                        ck_assert_int_lt(pent[e - 1].tile, pent[e].tile);
                    /* slot by slot: the block's own list against the merged one */
                    int64_t sum = 0;
                    for (int j = 0; j < group; j++) {
                        int32_t blk = hdr->block[j];
                        int64_t o0 = blk < 0 ? 0 : tr->offsets[(int64_t)cls * nb + blk];
                        int64_t o1 = blk < 0 ? 0 : tr->offsets[(int64_t)cls * nb + blk + 1];
                        sum += o1 - o0;
                        int64_t o = o0;
                        for (int64_t e = m0; e < m1; e++) {
                            const s2_dev_entry *d = &pent[e];
                            bool here = o < o1 && tr->entries[o].tile == d->tile;
                            for (int r = 0; r < g->sub_m; r++) {
                                bool bit = (d->live >> (r * group + j)) & 1u;
                                ck_assert(bit == (here && ((tr->entries[o].live >> r) & 1u)));
                            }
                            if (here)
                                o++;
                        }
                        ck_assert_msg(o == o1, "head %d block %d: %lld entries missing from the merge", h, blk,
                                      (long long)(o1 - o));
                    }
                    ck_assert(m1 - m0 <= sum);
                    for (int64_t e = m0; e < m1; e++) {
                        bool full = used == group;
                        for (int j = 0; j < group && full; j++) {
                            int32_t blk = hdr->block[j];
                            int64_t o0 = tr->offsets[(int64_t)cls * nb + blk], o1 = tr->offsets[(int64_t)cls * nb + blk + 1];
                            bool found = false;
                            for (int64_t o = o0; o < o1; o++)
                                if (tr->entries[o].tile == pent[e].tile)
                                    found = (tr->entries[o].flags & S2_ENTRY_FULL) != 0;
                            full = found;
                        }
                        ck_assert_uint_eq(pent[e].flags & S2_ENTRY_FULL, full ? S2_ENTRY_FULL : 0u);
                    }
                }
                ck_assert_int_le(weight, prev_weight);
                prev_weight = weight;
            }
            for (int64_t n = 0; n < nb; n++)
                ck_assert_msg(seen[n], "kv head %d: block %lld in no group", kvh, (long long)n);
        }
        free(seen);
        checked++;
        s2_packed_schedule_free(&pk);
        ck_assert_int_eq(s2_schedule_pack_gathered_kv(NULL, tr, p->kv_heads, 5, &pk, &lists), S2_ERR_INVALID);
        ck_assert_int_eq(s2_schedule_pack_gathered_kv(NULL, tr, p->kv_heads, 0, &pk, &lists), S2_ERR_INVALID);
        if (p->heads > 1)
            ck_assert_int_eq(s2_schedule_pack_gathered_kv(NULL, tr, p->heads + 1, 4, &pk, &lists), S2_ERR_INVALID);
        s2_schedule *fw = NULL;
        ck_assert_int_eq(s2_schedule_build(NULL, l, spec, false, &fw), S2_OK);
        ck_assert_int_eq(s2_schedule_pack_gathered_kv(NULL, fw, p->kv_heads, group, &pk, &lists), S2_ERR_INVALID);
        s2_schedule_free(fw);
        s2_schedule_free(tr);
        s2_layout_free(l);
        s2t_rand_pattern_free(&rp);
    }
    ck_assert_int_gt(checked, 20);
}
END_TEST

/* The S2 Merge-Q pattern (block 16, local 32, stride 16) at 8K: grouping by
 * readers fills the dK/dV tiles better than adjacent blocks do (printed:
 * live pairs / computed pairs: 0.50 -> 0.82 when written). */
START_TEST(test_pack_gathered_kv_mergeq_util)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.num_heads = 4;
    a.block_size = 16;
    a.local_blocks = 32;
    a.vert_stride = 16;
    s2_pattern_set *set = s2t_pattern_set_from_args(&a);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_layout *l = make_layout(p, 8192, 8192);
    s2_schedule *one = NULL, *adj = NULL;
    ck_assert_int_eq(s2_schedule_build(NULL, l, (s2_tile_spec){64, 16}, true, &one), S2_OK);
    ck_assert_int_eq(s2_schedule_build(NULL, l, (s2_tile_spec){64, 64}, true, &adj), S2_OK);
    s2_packed_schedule pk;
    int32_t lists = 0;
    ck_assert_int_eq(s2_schedule_pack_gathered_kv(NULL, one, p->kv_heads, 4, &pk, &lists), S2_OK);
    /* live (query sub-block, key block) pairs per visited 64 x 64 tile */
    int64_t nl = (int64_t)one->num_classes * one->geom.kv_tiles, pairs = 0;
    for (int64_t e = 0; e < one->offsets[nl]; e++)
        pairs += __builtin_popcountll(one->entries[e].live);
    int64_t adj_entries = adj->offsets[(int64_t)adj->num_classes * adj->geom.kv_tiles];
    int64_t gat_entries = pk.num_entries - (int64_t)one->num_classes * lists;   /* headers out (MHA: classes = heads) */
    double util_adj = (double)pairs / (16.0 * (double)adj_entries);
    double util_gat = (double)pairs / (16.0 * (double)gat_entries);
    printf("Merge-Q 8K dK/dV tiles: adjacent %lld entries (util %.2f), gathered %lld (util %.2f)\n",
           (long long)adj_entries, util_adj, (long long)gat_entries, util_gat);
    ck_assert(util_gat > 0.8 && util_gat > util_adj + 0.15);
    s2_packed_schedule_free(&pk);
    s2_schedule_free(one);
    s2_schedule_free(adj);
    s2_layout_free(l);
    s2_pattern_set_free(set);
}
END_TEST

/* The backward's dS map: with block >= 64 (one 64 x 64 grid in both
 * schedules) every forward entry of every head is named by exactly one
 * transposed record of that head's list class, with the same (query tile,
 * key tile); head_base counts the heads' entries.  Smaller blocks (key tiles
 * of several blocks) are refused. */
START_TEST(test_schedule_ds_map)
{
    int checked = 0;
    for (int it = 0; it < 60; it++) {
        s2t_rng_seed(&rng, 9700 + (uint64_t)it);
        s2t_rand_pattern rp;
        s2t_rand_pattern_new(&rng, &ir_rand, &rp);
        const s2_pattern *p = rp.p;
        s2_layout *l = make_layout(p, rp.q_len, rp.kv_len);
        int bs = p->block_size, sub = bs < 64 ? bs : 64;
        s2_schedule *fw = NULL, *tr = NULL;
        s2_packed_schedule fpk, tpk;
        int32_t lists = 0;
        ck_assert_int_eq(s2_schedule_build(NULL, l, (s2_tile_spec){64, 64}, false, &fw), S2_OK);
        ck_assert_int_eq(s2_schedule_build(NULL, l, (s2_tile_spec){64, sub}, true, &tr), S2_OK);
        ck_assert_int_eq(s2_schedule_pack(NULL, fw, &fpk), S2_OK);
        ck_assert_int_eq(s2_schedule_pack_gathered_kv(NULL, tr, p->kv_heads, 64 / sub, &tpk, &lists), S2_OK);
        s2_ds_map m;
        s2_status st = s2_schedule_ds_map(NULL, &fpk, fw->geom.q_tiles, fw->geom.first_q_tile, &tpk, lists, 64 / sub,
                                          p->heads, &m);
        if (bs < 64) {
            ck_assert_int_eq(st, S2_ERR_UNSUPPORTED);
        } else {
            ck_assert_int_eq(st, S2_OK);
            const unsigned char *fb = fpk.data, *tb = tpk.data, *mb = m.data;
            const int32_t *fcls = (const int32_t *)(fb + fpk.class_of_head_off);
            const int32_t *foff = (const int32_t *)(fb + fpk.offsets_off);
            const s2_dev_entry *fent = (const s2_dev_entry *)(fb + fpk.entries_off);
            const int32_t *tcls = (const int32_t *)(tb + tpk.class_of_head_off);
            const int32_t *toff = (const int32_t *)(tb + tpk.offsets_off);
            const s2_dev_entry *tent = (const s2_dev_entry *)(tb + tpk.entries_off);
            const int64_t *base = (const int64_t *)(mb + m.head_base_off);
            const int32_t *map = (const int32_t *)(mb + m.map_off);
            int64_t QT = fw->geom.q_tiles;
            ck_assert(m.head_base_off % 8 == 0 && m.map_off % 16 == 0);
            ck_assert_int_eq(base[0], 0);
            ck_assert_int_eq(base[p->heads], m.tiles);
            for (int h = 0; h < p->heads; h++) {
                int fc = fcls[h], tc = tcls[h];
                int64_t fbeg = foff[fc * QT], n = foff[(fc + 1) * QT] - fbeg;
                ck_assert_int_eq(base[h + 1] - base[h], n);
                int *hits = calloc((size_t)n + 1, sizeof *hits);
                ck_assert_ptr_nonnull(hits);
                for (int32_t x = 0; x < lists; x++) {
                    int64_t b = toff[(int64_t)tc * lists + x], e = toff[(int64_t)tc * lists + x + 1];
                    if (b == e)
                        continue;
                    int32_t kt = ((const s2_dev_kvgroup *)&tent[b])->block[0];
                    ck_assert_int_eq(map[b], -1);
                    for (int64_t r = b + 1; r < e; r++) {
                        ck_assert(map[r] >= 0 && map[r] < n);
                        const s2_dev_entry *f = &fent[fbeg + map[r]];
                        ck_assert_int_eq(f->tile, kt);
                        /* the forward entry sits in query tile tent[r].tile's list */
                        int64_t li = fc * QT + (tent[r].tile - fw->geom.first_q_tile);
                        ck_assert(fbeg + map[r] >= foff[li] && fbeg + map[r] < foff[li + 1]);
                        hits[map[r]]++;
                    }
                }
                for (int64_t i = 0; i < n; i++)
                    ck_assert_int_eq(hits[i], 1);
                free(hits);
            }
            checked++;
            s2_ds_map_free(&m);
        }
        s2_packed_schedule_free(&fpk);
        s2_packed_schedule_free(&tpk);
        s2_schedule_free(fw);
        s2_schedule_free(tr);
        s2_layout_free(l);
        s2t_rand_pattern_free(&rp);
    }
    ck_assert_int_ge(checked, 10);
}
END_TEST

START_TEST(test_classes)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.num_heads = 8;
    a.vert_stride = 4; /* step 1, shifts 0..7: four classes by shift mod 4 */
    s2_pattern_set *set = s2t_pattern_set_from_args(&a);
    s2_layout *l = make_layout(s2_pattern_set_get(set, 0), 1024, 1024);
    ck_assert_int_eq(s2_layout_num_classes(l), 4);
    ck_assert_int_eq(s2_layout_head_class(l, 5), 1);
    ck_assert_int_eq(s2_layout_head_class(l, 7), 3);
    s2_layout_free(l);
    mut(set)->rules[6].dense = true;
    mut(set)->rules[7].dense = true;
    l = make_layout(s2_pattern_set_get(set, 0), 1024, 1024);
    ck_assert_int_eq(s2_layout_num_classes(l), 5);
    ck_assert_int_eq(s2_layout_head_class(l, 7), 6);
    s2_layout_free(l);
    s2_pattern_set_free(set);
}
END_TEST

/* ---- KV efficiency and liveness ------------------------------------------------------ */

START_TEST(test_kv_efficient)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.num_heads = 4;
    a.vert_stride = 8;
    s2_pattern_set *set = s2t_pattern_set_from_args(&a);
    s2_layout *l = make_layout(s2_pattern_set_get(set, 0), 4096, 4096);
    s2_ctx *ctx = s2_ctx_new();
    bool ok = false;
    ck_assert_int_eq(s2_layout_check_kv_efficient(ctx, l, &ok), S2_OK);
    ck_assert(ok);
    s2_layout_free(l);
    s2_pattern_set_free(set);
    a.causal = false; /* relative stripes reappear at distance: not efficient */
    set = s2t_pattern_set_from_args(&a);
    l = make_layout(s2_pattern_set_get(set, 0), 4096, 4096);
    ck_assert_int_eq(s2_layout_check_kv_efficient(ctx, l, &ok), S2_OK);
    ck_assert(!ok);
    /* key block 0: read by query blocks 0..3 (window), next by 11 (distance 8) */
    ck_assert_msg(strstr(s2_ctx_message(ctx), "head 0, key block 0 is read by query blocks 3 and 11 but not by 4"),
                  "%s", s2_ctx_message(ctx));
    s2_layout_free(l);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

static bool brute_efficient(const s2_pattern *p, const s2_layout *l)
{
    for (int q = 0; q < p->heads; q++)
        for (int64_t n = 0; n < s2_layout_kv_blocks(l); n++) {
            int state = 0; /* 0 before, 1 inside, 2 after the run */
            for (int64_t m = s2_layout_first_q_block(l); m < s2_layout_kv_blocks(l); m++) {
                bool k = s2t_oracle_block_kept(p, q, m, n);
                if (k && state == 2)
                    return false;
                if (k)
                    state = 1;
                else if (state == 1)
                    state = 2;
            }
        }
    return true;
}

START_TEST(test_kv_efficient_random)
{
    int pass = 0, fail = 0;
    for (int it = 0; it < 80; it++) {
        s2t_rng_seed(&rng, 7000 + (uint64_t)it);
        s2t_rand_pattern rp;
        s2t_rand_pattern_new(&rng, &ir_rand, &rp);
        s2_layout *l = make_layout(rp.p, rp.q_len, rp.kv_len);
        bool ok;
        ck_assert_int_eq(s2_layout_check_kv_efficient(NULL, l, &ok), S2_OK);
        ck_assert_msg(ok == brute_efficient(rp.p, l), "seed %llu", (unsigned long long)rng.seed);
        ok ? pass++ : fail++;
        s2_layout_free(l);
        s2t_rand_pattern_free(&rp);
    }
    ck_assert(pass > 0 && fail > 0);
}
END_TEST

static int64_t brute_last_reader(const s2_pattern *p, int q, int64_t n, int64_t horizon)
{
    int bs = p->block_size;
    int64_t last = -1;
    for (int64_t x = 0; x < horizon; x++)
        for (int64_t y = n * bs; y < s2_min64((n + 1) * bs, horizon); y++)
            if (s2t_oracle_token_kept(p, q, x, y)) {
                last = x;
                break;
            }
    return last == horizon - 1 ? S2_LIVE_FOREVER : last;
}

START_TEST(test_liveness_random)
{
    for (int it = 0; it < 60; it++) {
        s2t_rng_seed(&rng, 9000 + (uint64_t)it);
        s2t_rand_pattern rp;
        s2t_rand_pattern_new(&rng, &ir_rand, &rp);
        const s2_pattern *p = rp.p;
        int64_t horizon = rp.mask.bits ? s2_min64(rp.kv_len, rp.mask.rows * p->block_size) : rp.kv_len;
        for (int q = 0; q < p->heads; q++)
            for (int64_t n = 0; n <= s2_cdiv(horizon, p->block_size); n++)
                ck_assert_msg(s2_kv_last_reader(p, q, n, horizon) == brute_last_reader(p, q, n, horizon),
                              "seed %llu head %d block %lld: %lld vs brute %lld", (unsigned long long)rng.seed, q,
                              (long long)n, (long long)s2_kv_last_reader(p, q, n, horizon),
                              (long long)brute_last_reader(p, q, n, horizon));
        for (int h = 0; h < p->kv_heads; h++) {
            int g = p->heads / p->kv_heads;
            int64_t want = -1;
            for (int q = h * g; q < (h + 1) * g; q++)
                want = s2_max64(want, brute_last_reader(p, q, 0, horizon));
            ck_assert(s2_kv_last_reader_group(p, h, 0, horizon) == want);
        }
        s2t_rand_pattern_free(&rp);
    }
}
END_TEST

START_TEST(test_liveness_closed_form)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.num_heads = 2;
    a.local_blocks = 3;
    a.vert_stride = 4;
    a.block_size = 64;
    s2_pattern_set *set = s2t_pattern_set_from_args(&a);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    /* head 0 stripes at n % 4 == 0: forever; block 5 is local only: last read by block 7's last token */
    ck_assert(s2_kv_last_reader(p, 0, 8, 0) == S2_LIVE_FOREVER);
    ck_assert_int_eq(s2_kv_last_reader(p, 0, 5, 0), 8 * 64 - 1);
    ck_assert_int_eq(s2_kv_last_reader(p, 0, 5, 7 * 64 + 10), S2_LIVE_FOREVER);
    ck_assert_int_eq(s2_kv_last_reader(p, 0, 1000001, 0), 1000004 * 64 - 1);
    ck_assert_int_eq(s2_kv_last_reader(p, 0, 9, 9 * 64), -1);
    /* group 0 = head 0 only; head 1 (shift 2) has stripes at n % 4 == 2 */
    ck_assert(s2_kv_last_reader_group(p, 1, 6, 0) == S2_LIVE_FOREVER && s2_kv_last_reader_group(p, 1, 7, 0) == 10 * 64 - 1);
    ck_assert_int_eq(s2_kv_last_reader_group(p, 0, 7, 0), 10 * 64 - 1);
    s2_pattern_set_free(set);
}
END_TEST

/* ---- stats ------------------------------------------------------------------------------ */

START_TEST(test_stats_random)
{
    for (int it = 0; it < 40; it++) {
        s2t_rng_seed(&rng, 11000 + (uint64_t)it);
        s2t_rand_pattern rp;
        s2t_rand_pattern_new(&rng, &ir_rand, &rp);
        const s2_pattern *p = rp.p;
        s2_layout *l = make_layout(p, rp.q_len, rp.kv_len);
        s2_tile_spec spec = specs[s2t_rng_int(&rng, 0, 5)];
        s2_layout_stats st;
        if (s2_layout_stats_compute(NULL, l, spec, 64, S2_DTYPE_F16, &st) != S2_OK) {
            s2_layout_free(l);
            s2t_rand_pattern_free(&rp);
            continue;
        }
        double total = 0, dense = 0, hmax = 0, hmin = 1e300;
        for (int q = 0; q < p->heads; q++) {
            double h = 0;
            for (int64_t x = s2_layout_q_start(l); x < rp.kv_len; x++)
                for (int64_t y = 0; y < rp.kv_len; y++) {
                    h += s2t_oracle_token_kept(p, q, x, y);
                    dense += !p->causal || y <= x;
                }
            total += h;
            hmax = h > hmax ? h : hmax;
            hmin = h < hmin ? h : hmin;
        }
        ck_assert_msg(st.kept_pairs == total, "seed %llu: pairs %.0f vs brute %.0f", (unsigned long long)rng.seed,
                      st.kept_pairs, total);
        ck_assert(st.dense_pairs == dense && st.head_pairs_max == hmax && st.head_pairs_min == hmin);
        ck_assert(st.fwd_flops == 4.0 * total * 64 && st.fwd_bwd_flops == 3.5 * st.fwd_flops);
        s2_schedule *s = NULL;
        ck_assert_int_eq(s2_schedule_build(NULL, l, spec, false, &s), S2_OK);
        int64_t entries = 0;
        for (int q = 0; q < p->heads; q++) {
            int c = s->class_of_head[q];
            entries += s->offsets[(c + 1) * s->geom.q_tiles] - s->offsets[c * s->geom.q_tiles];
        }
        ck_assert_int_eq(st.entries, entries);
        ck_assert(st.bytes_read == 2.0 * 64 * (2.0 * rp.q_len * p->heads + 2.0 * spec.block_n * entries));
        char *text = NULL;
        ck_assert_int_eq(s2_layout_stats_format(NULL, &st, &text), S2_OK);
        ck_assert_ptr_nonnull(strstr(text, "imbalance"));
        free(text);
        s2_schedule_free(s);
        s2_layout_free(l);
        s2t_rand_pattern_free(&rp);
    }
}
END_TEST

START_TEST(test_stats_large_by_class)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.num_heads = 16;
    a.max_seq_len = 0;
    s2_pattern_set *set = s2t_pattern_set_from_args(&a);
    s2_layout *l = make_layout(s2_pattern_set_get(set, 0), 131072, 131072);
    s2_layout_stats st;
    ck_assert_int_eq(s2_layout_stats_compute(NULL, l, (s2_tile_spec){64, 64}, 128, S2_DTYPE_BF16, &st), S2_OK);
    /* per head: 2048 blocks; window blocks: diagonal 64*65/2 + 3 full off-diagonals (fewer at the start);
     * stripe columns below the window: each class has the same count up to the start. */
    ck_assert(st.kept_fraction > 0.25 && st.kept_fraction < 0.26);
    ck_assert(st.imbalance >= 1.0 && st.imbalance < 1.01);
    s2_layout_free(l);
    s2_pattern_set_free(set);
}
END_TEST

START_TEST(test_large_smoke)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.num_heads = 32;
    a.num_kv_heads = 8;
    a.vert_stride = 16;
    s2_pattern_set *set = s2t_pattern_set_from_args(&a);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    int64_t len = 1 << 20;
    s2_layout *l = make_layout(p, len, len);
    s2_tile_spec spec = {128, 64};
    int64_t cap = s2_layout_max_entries(l, spec);
    ck_assert(cap <= len / 64);
    s2_tile_entry *out = malloc((size_t)cap * sizeof *out);
    int64_t n = 0;
    s2_tile_geom g;
    ck_assert_int_eq(s2_layout_tile_geom(NULL, l, spec, &g), S2_OK);
    int64_t t = g.first_q_tile + g.q_tiles - 1;
    ck_assert_int_eq(s2_layout_q_tile_entries(NULL, l, spec, 5, t, out, cap, &n), S2_OK);
    /* last query tile = blocks 16382..16383: local 4+1 blocks, stripes (n + 1) % 16 == 0 below */
    int64_t stripes = 0;
    for (int64_t b = 0; b < 16383 - 4; b++)
        stripes += (b + 1) % 16 == 0;
    ck_assert_int_eq(n, 5 + stripes);
    for (int64_t i = 1; i < n; i++)
        ck_assert(out[i].tile > out[i - 1].tile);
    ck_assert_int_eq(s2_layout_kv_tile_entries(NULL, l, spec, 5, 15, out, cap, &n), S2_OK);
    ck_assert_int_eq(n, len / 128 - 15 * 64 / 128); /* stripe column: every tile from the diagonal on */
    free(out);
    s2_layout_free(l);
    s2_pattern_set_free(set);
}
END_TEST

static Suite *ir_suite(void)
{
    Suite *s = suite_create("ir");
    TCase *tc = tcase_create("ir");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_golden_all_cases);
    tcase_add_test(tc, test_predicate_hand);
    tcase_add_test(tc, test_predicate_bidirectional);
    tcase_add_test(tc, test_predicate_matches_oracle);
    tcase_add_test(tc, test_schedule_random);
    tcase_add_test(tc, test_schedule_ranges_random);
    tcase_add_test(tc, test_schedule_many_ranges);
    tcase_add_test(tc, test_entries_bound_random);
    tcase_add_test(tc, test_classes_stride_ranges);
    tcase_add_test(tc, test_stats_far_context_linear);
    tcase_add_test(tc, test_format_caps);
    tcase_add_test(tc, test_schedule_build_matches_lists);
    tcase_add_test(tc, test_schedule_pack_gathered);
    tcase_add_test(tc, test_schedule_pack_gathered_owned);
    tcase_add_test(tc, test_pack_owned_s2_rows);
    tcase_add_test(tc, test_schedule_pack_gathered_kv);
    tcase_add_test(tc, test_pack_gathered_kv_mergeq_util);
    tcase_add_test(tc, test_schedule_ds_map);
    tcase_add_test(tc, test_classes);
    tcase_add_test(tc, test_kv_efficient);
    tcase_add_test(tc, test_kv_efficient_random);
    tcase_add_test(tc, test_liveness_random);
    tcase_add_test(tc, test_liveness_closed_form);
    tcase_add_test(tc, test_stats_random);
    tcase_add_test(tc, test_stats_large_by_class);
    tcase_add_test(tc, test_large_smoke);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return s2t_run_suite(ir_suite());
}
