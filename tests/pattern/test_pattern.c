/* Tests of patterns/: stock patterns, resolved rules checked against the
 * golden masks, overrides, ranges, explicit masks, multi-pattern files, the
 * mask-file reader, one-line error messages for bad files, and the fuzz
 * corpus as a regression set. */
#include "s2c/pattern.h"
#include "check_main.h"

#include <check.h>
#include <dirent.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char path_buf[4096];

static const char *env_or(const char *name, const char *fallback)
{
    const char *v = getenv(name);
    return v && *v ? v : fallback;
}

static const char *stock(const char *file)
{
    snprintf(path_buf, sizeof path_buf, "%s/%s", env_or("S2C_PATTERNS", "../../patterns"), file);
    return path_buf;
}

/* tests run in tests/pattern (workdir in meson.build) */
static const char *data(const char *file)
{
    snprintf(path_buf, sizeof path_buf, "data/%s", file);
    return path_buf;
}

static s2_pattern_set *load_ok(s2_ctx *ctx, const char *path)
{
    s2_pattern_set *set = NULL;
    s2_status st = s2_pattern_load(ctx, path, &set);
    ck_assert_msg(st == S2_OK, "%s: %s: %s", path, s2_status_name(st), s2_ctx_message(ctx));
    return set;
}

static s2_pattern_set *parse_ok(s2_ctx *ctx, const char *text)
{
    s2_pattern_set *set = NULL;
    s2_status st = s2_pattern_parse(ctx, "inline.yaml", text, strlen(text), &set);
    ck_assert_msg(st == S2_OK, "%s: %s\n%s", s2_status_name(st), s2_ctx_message(ctx), text);
    return set;
}

/* ---- stock patterns ----------------------------------------------------- */

START_TEST(stock_patterns_parse)
{
    static const struct {
        const char *file, *name;
        int heads, kv, bs, local, stride, count;
        bool dense;
    } cases[] = {
        {"phi3-small.yaml", "phi3-small", 32, 8, 64, 16, 8, 1, false},
        {"s2-l8v16.yaml", "s2-l8v16", 32, 32, 64, 8, 16, 1, false},
        {"mergeq-b16.yaml", "mergeq-b16", 16, 16, 16, 32, 16, 1, false},
        {"dense.yaml", "dense", 32, 32, 64, 0, 1, 1, true},
        {"sliding-window.yaml", "sliding-window", 32, 32, 64, 16, 0, 1, false},
        {"hhst-mixed.yaml", "dense-layer", 32, 8, 64, 0, 1, 2, true},
    };
    s2_ctx *ctx = s2_ctx_new();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        s2_pattern_set *set = load_ok(ctx, stock(cases[i].file));
        ck_assert_int_eq(s2_pattern_set_count(set), cases[i].count);
        const s2_pattern *p = s2_pattern_set_get(set, 0);
        ck_assert_str_eq(p->name, cases[i].name);
        ck_assert_int_eq(p->heads, cases[i].heads);
        ck_assert_int_eq(p->kv_heads, cases[i].kv);
        ck_assert_int_eq(p->block_size, cases[i].bs);
        ck_assert(p->causal);
        for (int q = 0; q < p->heads; q++) {
            /* phi3-small: the last kv-head (query heads 28-31) is dense by an override */
            bool dense = cases[i].dense || (i == 0 && q >= 28);
            ck_assert_int_eq(p->rules[q].dense, dense);
            ck_assert_int_eq(p->rules[q].mask, -1);
            if (!dense) {
                ck_assert_int_eq(p->rules[q].local_left, cases[i].local);
                ck_assert_int_eq(p->rules[q].vert_stride, cases[i].stride);
            }
        }
        s2_pattern_set_free(set);
    }
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(phi3_small_rules)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = load_ok(ctx, stock("phi3-small.yaml"));
    const s2_pattern *p = s2_pattern_set_find(set, "phi3-small");
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(p->heads, 32);
    ck_assert_int_eq(p->kv_heads, 8);
    ck_assert_int_eq(p->block_size, 64);
    ck_assert(p->causal);
    ck_assert_int_eq(p->max_seq_len, 131072);
    ck_assert_int_eq(p->vert_position, S2_VERT_ABSOLUTE);
    ck_assert_int_eq(p->local_left, 16);
    ck_assert_int_eq(p->local_right, 0);
    ck_assert_int_eq(p->vert_stride, 8);
    ck_assert(p->head_sliding_step_auto);
    ck_assert_int_eq(p->head_sliding_step, 1); /* max(1, 8 / 32) */
    ck_assert_int_eq(p->head_sliding_offset, 1);
    ck_assert(!p->homo_head);
    ck_assert_int_eq(p->num_dense_heads, 0);
    ck_assert_int_eq(p->num_ranges, 0);
    ck_assert_int_eq(p->num_masks, 0);
    ck_assert_int_eq(p->line, 2);
    for (int q = 0; q < 32; q++) {
        const s2_head_rule *r = &p->rules[q];
        ck_assert_int_eq(r->dense, q >= 28);
        ck_assert_int_eq(r->local_left, 16);
        ck_assert_int_eq(r->local_right, 0);
        ck_assert_int_eq(r->vert_stride, 8);
        ck_assert_int_eq(r->shift, q / 4 + 1); /* kv-head index * step + offset */
        ck_assert_int_eq(r->mask, -1);
        ck_assert_int_eq(r->mask_head, 0);
    }
    char *text = NULL;
    ck_assert_int_eq(s2_pattern_describe(p, &text), S2_OK);
    ck_assert_ptr_nonnull(strstr(text, "pattern phi3-small"));
    ck_assert_ptr_nonnull(strstr(text, "heads 32, kv_heads 8, block_size 64, causal"));
    ck_assert_ptr_nonnull(strstr(text, "head_sliding_step 1 (auto)"));
    ck_assert_ptr_nonnull(strstr(text, "heads 28-31: dense"));
    ck_assert_ptr_nonnull(strstr(text, "dense heads: 4 of 32"));
    free(text);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(sliding_window_and_dense)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = load_ok(ctx, stock("sliding-window.yaml"));
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    ck_assert_int_eq(p->vert_stride, 0);
    ck_assert_int_eq(p->rules[5].vert_stride, 0);
    ck_assert_int_eq(p->rules[5].local_left, 16);
    ck_assert(!s2_pattern_is_dense(p));
    s2_pattern_set_free(set);
    set = load_ok(ctx, stock("dense.yaml"));
    p = s2_pattern_set_get(set, 0);
    ck_assert_int_eq(p->num_dense_heads, 32);
    ck_assert(s2_pattern_is_dense(p));
    s2_pattern_set_free(set);
    /* dense by a vertical stride of 1; any range rule (it may drop blocks) or a
     * head with another stride makes it sparse */
    set = parse_ok(ctx, "heads: 2\nblock_size: 64\nlocal_stride: {local_blocks: 2, vert_stride: 1}\n");
    ck_assert(s2_pattern_is_dense(s2_pattern_set_get(set, 0)));
    s2_pattern_set_free(set);
    set = parse_ok(ctx, "heads: 2\nblock_size: 64\nlocal_stride: {local_blocks: 2, vert_stride: 1}\n"
                        "ranges:\n  - sink: 64\n");
    ck_assert(!s2_pattern_is_dense(s2_pattern_set_get(set, 0)));
    s2_pattern_set_free(set);
    set = load_ok(ctx, stock("s2-l8v16.yaml"));
    ck_assert(!s2_pattern_is_dense(s2_pattern_set_get(set, 0)));
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(multi_pattern_file)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = load_ok(ctx, stock("hhst-mixed.yaml"));
    ck_assert_int_eq(s2_pattern_set_count(set), 2);
    ck_assert_ptr_null(s2_pattern_set_find(set, "nope"));
    ck_assert_ptr_null(s2_pattern_set_get(set, 2));
    const s2_pattern *d = s2_pattern_set_find(set, "dense-layer");
    const s2_pattern *s = s2_pattern_set_find(set, "sparse-layer");
    ck_assert_ptr_eq(d, s2_pattern_set_get(set, 0));
    ck_assert_ptr_eq(s, s2_pattern_set_get(set, 1));
    ck_assert_int_eq(s->line, 10);
    for (int q = 0; q < 32; q++) {
        ck_assert(d->rules[q].dense);
        ck_assert_int_eq(s->rules[q].dense, q >= 28);
        ck_assert_int_eq(s->rules[q].local_left, q < 4 ? 32 : 16);
        ck_assert_int_eq(s->rules[q].shift, q / 4 + 1);
    }
    ck_assert_int_eq(s->num_ranges, 2);
    const s2_range_rule *r0 = &s->ranges[0], *r1 = &s->ranges[1];
    ck_assert_int_eq(r0->action, S2_RANGE_SINK);
    ck_assert_int_eq(r0->key_lo, 0);
    ck_assert_int_eq(r0->key_hi, 128);
    ck_assert_int_eq(r0->dist_lo, 0);
    ck_assert(r0->dist_hi == INT64_MAX);
    ck_assert_int_eq(r0->line, 25);
    ck_assert_int_eq(r1->action, S2_RANGE_STRIDE);
    ck_assert_int_eq(r1->stride, 32);
    ck_assert_int_eq(r1->dist_lo, 65536);
    ck_assert(r1->dist_hi == INT64_MAX);
    ck_assert(r1->key_hi == INT64_MAX);
    for (int q = 0; q < 32; q++) {
        ck_assert_int_eq(r0->heads[q], 1);
        ck_assert_int_eq(r1->heads[q], q >= 4 && q <= 27);
    }
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

/* ---- rules against the golden masks ------------------------------------- */

/* Causal, absolute-position semantics of include/s2c/pattern.h. */
static bool kept(const s2_head_rule *r, int64_t m, int64_t n)
{
    if (n > m)
        return false;
    if (r->dense || m - n < r->local_left)
        return true;
    if (r->vert_stride <= 0)
        return false;
    int64_t s = (n + r->shift) % r->vert_stride;
    return s == 0;
}

START_TEST(rules_match_golden)
{
    /* each pattern file text states a golden case's kwargs */
    static const struct {
        const char *golden, *yaml;
    } cases[] = {
        {"l4v4_h8", "heads: 8\nblock_size: 64\nlocal_stride: {local_blocks: 4, vert_stride: 4}\n"},
        {"l16v8_h32_off1",
         "heads: 32\nblock_size: 64\nlocal_stride: {local_blocks: 16, vert_stride: 8, head_sliding_offset: 1}\n"},
        {"l8v16_h16", "heads: 16\nblock_size: 64\nlocal_stride: {local_blocks: 8, vert_stride: 16}\n"},
        {"bs16_l32v16_h16", "heads: 16\nblock_size: 16\nlocal_stride: {local_blocks: 32, vert_stride: 16}\n"},
        {"homo_l4v4_h8", "heads: 8\nblock_size: 32\nlocal_stride: {local_blocks: 4, vert_stride: 4, homo_head: true}\n"},
        {"dense2_l4v8_h8", "heads: 8\nblock_size: 64\nlocal_stride: {local_blocks: 4, vert_stride: 8, num_dense_heads: 2}\n"},
        {"gqa_h32_kv8_l4v16", "heads: 32\nkv_heads: 8\nblock_size: 64\nlocal_stride: {local_blocks: 4, vert_stride: 16}\n"},
        {"ragged_h4_1000", "heads: 4\nblock_size: 64\nlocal_stride: {local_blocks: 3, vert_stride: 4}\n"},
    };
    s2_ctx *ctx = s2_ctx_new();
    const char *golden = env_or("S2C_GOLDEN", "../data/s2_golden_masks.txt");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        s2_block_mask g;
        s2_status st = s2_block_mask_load(ctx, golden, cases[c].golden, &g);
        ck_assert_msg(st == S2_OK, "%s", s2_ctx_message(ctx));
        ck_assert_str_eq(g.name, cases[c].golden);
        s2_pattern_set *set = parse_ok(ctx, cases[c].yaml);
        const s2_pattern *p = s2_pattern_set_get(set, 0);
        ck_assert(g.heads == 1 || g.heads == p->heads);
        for (int q = 0; q < p->heads; q++)
            for (int64_t m = 0; m < g.rows; m++)
                for (int64_t n = 0; n < g.cols; n++) {
                    int gh = g.heads == 1 ? 0 : q;
                    bool want = g.bits[(gh * g.rows + m) * g.cols + n];
                    ck_assert_msg(kept(&p->rules[q], m, n) == want, "%s: head %d block (%lld, %lld): want %d",
                                  cases[c].golden, q, (long long)m, (long long)n, want);
                }
        s2_pattern_set_free(set);
        s2_block_mask_free(&g);
    }
    s2_ctx_free(ctx);
}
END_TEST

/* ---- overrides, ranges, bidirectional ----------------------------------- */

START_TEST(overrides_apply_in_order)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = parse_ok(ctx,
        "heads: 8\nkv_heads: 4\nblock_size: 32\n"
        "local_stride:\n  local_blocks: 4\n  vert_stride: 8\n  head_sliding_step: 3\n  head_sliding_offset: 2\n"
        "  num_dense_heads: 1\n"
        "overrides:\n"
        "  - heads: [0, 2-3]\n    local_blocks: 6\n    vert_stride: none\n"
        "  - heads: 3\n    head_sliding_offset: 5\n    vert_stride: 2\n"
        "  - heads: 6-7\n    dense: false\n"
        "  - heads: \"1-2\"\n    dense: true\n");
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    ck_assert_str_eq(p->name, "inline");
    ck_assert(!p->head_sliding_step_auto);
    ck_assert_int_eq(p->head_sliding_step, 3);
    static const struct { bool dense; int local, stride; int64_t shift; } want[8] = {
        {false, 6, 0, 2}, {true, 4, 8, 2}, {true, 6, 0, 5}, {false, 6, 2, 3 + 5},
        {false, 4, 8, 6 + 2}, {false, 4, 8, 6 + 2}, {false, 4, 8, 9 + 2}, {false, 4, 8, 9 + 2},
    };
    for (int q = 0; q < 8; q++) {
        ck_assert_msg(p->rules[q].dense == want[q].dense, "head %d", q);
        ck_assert_int_eq(p->rules[q].local_left, want[q].local);
        ck_assert_int_eq(p->rules[q].vert_stride, want[q].stride);
        ck_assert_msg(p->rules[q].shift == want[q].shift, "head %d shift %lld", q, (long long)p->rules[q].shift);
    }
    s2_pattern_set_free(set);

    /* homo_head: the recomputed shift uses h = 0 */
    set = parse_ok(ctx, "heads: 4\nblock_size: 64\nlocal_stride: {local_blocks: 1, vert_stride: 4, homo_head: true}\n"
                        "overrides: [{heads: 3, head_sliding_offset: 3}]\n");
    p = s2_pattern_set_get(set, 0);
    ck_assert_int_eq(p->rules[2].shift, 0);
    ck_assert_int_eq(p->rules[3].shift, 3);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(bidirectional_local)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = parse_ok(ctx,
        "heads: 4\nblock_size: 64\ncausal: false\n"
        "local_stride: {local_blocks: [3, 1], vert_stride: 8}\n"
        "overrides: [{heads: 1, local_blocks: 5}]\n");
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    ck_assert(!p->causal);
    ck_assert_int_eq(p->vert_position, S2_VERT_RELATIVE);
    ck_assert_int_eq(p->local_left, 3);
    ck_assert_int_eq(p->local_right, 1);
    ck_assert_int_eq(p->rules[0].local_left, 3);
    ck_assert_int_eq(p->rules[0].local_right, 1);
    ck_assert_int_eq(p->rules[1].local_left, 5);
    ck_assert_int_eq(p->rules[1].local_right, 5);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(ranges_fields)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = parse_ok(ctx,
        "heads: 4\nblock_size: 64\nlocal_stride: {local_blocks: 2, vert_stride: 4}\n"
        "ranges:\n"
        "  - {heads: [0, 2-3], keys: [128, 1024], keep: all}\n"
        "  - {keys: [0, end], distance: [64, 4096], keep: none}\n"
        "  - {heads: 1, distance: [256, end], vert_stride: 16}\n"
        "  - sink: 192\n");
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    ck_assert_int_eq(p->num_ranges, 4);
    const s2_range_rule *r = p->ranges;
    ck_assert_int_eq(r[0].action, S2_RANGE_DENSE);
    ck_assert_int_eq(r[0].key_lo, 128);
    ck_assert_int_eq(r[0].key_hi, 1024);
    ck_assert(r[0].dist_lo == 0 && r[0].dist_hi == INT64_MAX);
    ck_assert(r[0].heads[0] && !r[0].heads[1] && r[0].heads[2] && r[0].heads[3]);
    ck_assert_int_eq(r[1].action, S2_RANGE_DROP);
    ck_assert(r[1].key_lo == 0 && r[1].key_hi == INT64_MAX);
    ck_assert(r[1].dist_lo == 64 && r[1].dist_hi == 4096);
    ck_assert(r[1].heads[0] && r[1].heads[1] && r[1].heads[2] && r[1].heads[3]);
    ck_assert_int_eq(r[2].action, S2_RANGE_STRIDE);
    ck_assert_int_eq(r[2].stride, 16);
    ck_assert(r[2].dist_lo == 256 && r[2].dist_hi == INT64_MAX);
    ck_assert(!r[2].heads[0] && r[2].heads[1] && !r[2].heads[2]);
    ck_assert_int_eq(r[3].action, S2_RANGE_SINK);
    ck_assert(r[3].key_lo == 0 && r[3].key_hi == 192);
    ck_assert_int_eq(r[3].line, 8);
    ck_assert_int_eq(r[3].col, 5);
    char *text = NULL;
    ck_assert_int_eq(s2_pattern_describe(p, &text), S2_OK);
    ck_assert_ptr_nonnull(strstr(text, "range 1 (line 6): keep none, distance [64, 4096), 4 heads"));
    ck_assert_ptr_nonnull(strstr(text, "range 2 (line 7): stride 16, distance [256, end), 1 heads"));
    free(text);
    /* a range built in code with no head list applies to every head (ir/predicate.c) */
    uint8_t *own = r[2].heads;
    ((s2_range_rule *)r)[2].heads = NULL;
    ck_assert_int_eq(s2_pattern_describe(p, &text), S2_OK);
    ck_assert_ptr_nonnull(strstr(text, "range 2 (line 7): stride 16, distance [256, end), 4 heads"));
    free(text);
    ((s2_range_rule *)r)[2].heads = own;
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

/* ---- explicit masks ------------------------------------------------------ */

START_TEST(mask_file_reader)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_block_mask m;
    ck_assert_int_eq(s2_block_mask_load(ctx, data("masks.txt"), NULL, &m), S2_OK);
    ck_assert_str_eq(m.name, "shared");
    ck_assert_int_eq(m.heads, 1);
    ck_assert_int_eq(m.rows, 4);
    ck_assert_int_eq(m.cols, 4);
    static const uint8_t shared[16] = {1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 1, 0, 1, 1};
    ck_assert_mem_eq(m.bits, shared, 16);
    s2_block_mask_free(&m);
    ck_assert_int_eq(s2_block_mask_load(ctx, data("masks.txt"), "per_head", &m), S2_OK);
    ck_assert_int_eq(m.heads, 4);
    ck_assert_int_eq(m.rows, 2);
    ck_assert_int_eq(m.cols, 3);
    static const uint8_t per_head[24] = {1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 0,
                                         1, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1};
    ck_assert_mem_eq(m.bits, per_head, 24);
    s2_block_mask_free(&m);
    ck_assert_int_eq(s2_block_mask_load(ctx, data("masks.txt"), "nope", &m), S2_ERR_NOT_FOUND);
    ck_assert_ptr_null(m.bits);
    ck_assert_int_eq(s2_block_mask_load(ctx, data("no-such.txt"), NULL, &m), S2_ERR_IO);
    ck_assert_str_eq(s2_ctx_message(ctx), "data/no-such.txt: No such file or directory");

    static const struct { const char *file, *loc, *text; } bad[] = {
        {"mask-bad-char.txt", ":4:2: ", "expected '0' or '1', got 'x'"},
        {"mask-short-row.txt", ":4:3: ", "row has 2 blocks, expected 3"},
        {"mask-truncated.txt", ":2:1: ", "too short"},
        {"mask-no-end.txt", ":3:1: ", "expected 'end'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(s2_block_mask_load(ctx, data(bad[i].file), NULL, &m), S2_ERR_PARSE);
        const char *msg = s2_ctx_message(ctx);
        char want[256];
        snprintf(want, sizeof want, "data/%s%s", bad[i].file, bad[i].loc);
        ck_assert_msg(strncmp(msg, want, strlen(want)) == 0 && strstr(msg, bad[i].text), "%s", msg);
        ck_assert_ptr_null(m.bits);
        ck_assert_ptr_null(m.name);
    }
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(mask_patterns)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = load_ok(ctx, data("mask-base.yaml"));
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    ck_assert_str_eq(p->name, "explicit");
    ck_assert_int_eq(p->num_masks, 1);
    ck_assert_str_eq(p->masks[0].name, "per_head");
    ck_assert_int_eq(p->masks[0].heads, 4);
    ck_assert_int_eq(p->masks[0].bits[(1 * 2 + 1) * 3 + 1], 1); /* head 1, row 1, col 1 */
    ck_assert_int_eq(p->masks[0].bits[(1 * 2 + 0) * 3 + 1], 0);
    for (int q = 0; q < 4; q++) {
        ck_assert_int_eq(p->rules[q].mask, 0);
        ck_assert_int_eq(p->rules[q].mask_head, q);
        ck_assert(!p->rules[q].dense);
    }
    ck_assert_str_eq(p->mask_where[0], "data/mask-base.yaml:4:7: mask");
    s2_pattern_set_free(set);

    set = load_ok(ctx, data("mask-override.yaml"));
    p = s2_pattern_set_get(set, 0);
    ck_assert_str_eq(p->name, "mask-override"); /* from the file name */
    ck_assert_int_eq(p->num_masks, 2);
    ck_assert_str_eq(p->masks[0].name, "shared");
    ck_assert_str_eq(p->masks[1].name, "per_head");
    ck_assert_str_eq(p->mask_where[0], "data/mask-override.yaml:9:11: overrides[0].mask");
    ck_assert_str_eq(p->mask_where[1], "data/mask-override.yaml:11:11: overrides[1].mask");
    static const int mask[4] = {-1, 0, -1, 1}, mhead[4] = {0, 0, 0, 3};
    for (int q = 0; q < 4; q++) {
        ck_assert_int_eq(p->rules[q].mask, mask[q]);
        ck_assert_int_eq(p->rules[q].mask_head, mhead[q]);
    }
    char *text = NULL;
    ck_assert_int_eq(s2_pattern_describe(p, &text), S2_OK);
    ck_assert_ptr_nonnull(strstr(text, "head 3: mask 1 ('per_head') head 3"));
    free(text);
    s2_pattern_set_free(set);

    /* a missing mask file is an I/O error located at the mask key */
    ck_assert_int_eq(s2_pattern_load(ctx, data("mask-missing.yaml"), &set), S2_ERR_IO);
    ck_assert_ptr_null(set);
    ck_assert_str_eq(s2_ctx_message(ctx),
                     "data/mask-missing.yaml:3:7: mask: mask file 'no-such-mask.txt': No such file or directory");
    /* a bad mask file: the reference's location first, then the file and its line */
    ck_assert_int_eq(s2_pattern_load(ctx, data("mask-bad-ref.yaml"), &set), S2_ERR_PARSE);
    ck_assert_str_eq(s2_ctx_message(ctx), "data/mask-bad-ref.yaml:3:7: mask: mask file 'mask-bad-char.txt': "
                                          "line 4, col 2: expected '0' or '1', got 'x'");
    s2_ctx_free(ctx);
}
END_TEST

/* ---- names, I/O ---------------------------------------------------------- */

START_TEST(names_and_io)
{
    s2_ctx *ctx = s2_ctx_new();
    const char *text = "heads: 1\nblock_size: 16\ndense: true\n";
    s2_pattern_set *set = NULL;
    ck_assert_int_eq(s2_pattern_parse(ctx, NULL, text, strlen(text), &set), S2_OK);
    ck_assert_str_eq(s2_pattern_set_get(set, 0)->name, "pattern");
    ck_assert_str_eq(s2_pattern_set_get(set, 0)->file, "<memory>");
    s2_pattern_set_free(set);
    ck_assert_int_eq(s2_pattern_parse(ctx, "dir.x/my layer.v2.yaml", text, strlen(text), &set), S2_OK);
    ck_assert_str_eq(s2_pattern_set_get(set, 0)->name, "my_layer.v2");
    s2_pattern_set_free(set);

    ck_assert_int_eq(s2_pattern_load(ctx, "data/does-not-exist.yaml", &set), S2_ERR_IO);
    ck_assert_str_eq(s2_ctx_message(ctx), "data/does-not-exist.yaml: No such file or directory");
    ck_assert_int_eq(s2_pattern_load(ctx, "data", &set), S2_ERR_IO);
    ck_assert_str_eq(s2_ctx_message(ctx), "data: Is a directory");
    ck_assert_int_eq(s2_pattern_load(ctx, "/dev/zero", &set), S2_ERR_IO);
    ck_assert_ptr_null(set);
    /* <memory> errors */
    ck_assert_int_eq(s2_pattern_parse(ctx, NULL, "heads: x\n", 9, &set), S2_ERR_PARSE);
    ck_assert_str_eq(s2_ctx_message(ctx), "<memory>:1:8: heads: expected an integer, got x");
    s2_ctx_free(ctx);
}
END_TEST

/* ---- bad files: one-line located messages --------------------------------- */

static void assert_one_line(const char *path, const char *msg)
{
    regex_t re;
    char pat[600], esc[512];
    size_t o = 0;
    for (const char *c = path; *c && o + 3 < sizeof esc; c++) {
        if (strchr(".[]()*+?^$|\\{}", *c))
            esc[o++] = '\\';
        esc[o++] = *c;
    }
    esc[o] = 0;
    snprintf(pat, sizeof pat, "^%s:[0-9]+:[0-9]+: .+$", esc);
    ck_assert_int_eq(regcomp(&re, pat, REG_EXTENDED | REG_NOSUB), 0);
    ck_assert_msg(strchr(msg, '\n') == NULL && regexec(&re, msg, 0, NULL, 0) == 0, "message '%s' for %s", msg, path);
    regfree(&re);
}

static const struct bad_case {
    const char *file;
    int line, col;
    const char *text;
} bad_cases[] = {
    {"empty.yaml", 1, 1, "empty pattern file"},
    {"comment-only.yaml", 1, 1, "empty pattern file"},
    {"string-for-int.yaml", 4, 17, "local_stride.local_blocks: expected an integer, got \"8\""},
    {"float.yaml", 4, 17, "local_stride.local_blocks: expected an integer, got 8.5"},
    {"bool-for-int.yaml", 1, 8, "heads: expected an integer, got true"},
    {"seq-for-scalar.yaml", 1, 8, "heads: expected an integer, got a list"},
    {"negative.yaml", 4, 17, "local_stride.local_blocks: expected a non-negative integer, got -4"},
    {"huge.yaml", 5, 16, "local_stride.vert_stride: expected at most 16777216"},
    {"over-limit.yaml", 4, 17, "local_stride.local_blocks: expected at most 16777216, got 16777217"},
    {"kv-not-divisor.yaml", 2, 11, "kv_heads: heads (32) must be a multiple of kv_heads (5)"},
    {"block-size-24.yaml", 4, 13, "block_size: expected 16, 32, 64 or 128, got 24"},
    {"unknown-key.yaml", 4, 1, "unknown key 'local_blocks' (expected one of: name, heads, kv_heads, block_size"},
    {"unknown-nested-key.yaml", 5, 3, "local_stride: unknown key 'vert_strid'; did you mean 'vert_stride'?"},
    {"binary.yaml", 1, 1, "invalid input: control characters are not allowed"},
    {"bad-utf8.yaml", 4, 6, "invalid input: invalid leading UTF-8 octet"},
    {"truncated.yaml", 4, 1, "YAML syntax error: did not find expected ',' or ']'"},
    {"tab-indent.yaml", 6, 1, "YAML syntax error: found a tab character"},
    {"duplicate-key.yaml", 3, 1, "duplicate key 'heads' (first at line 1)"},
    {"anchor.yaml", 1, 8, "aliases are not supported"},
    {"alias.yaml", 1, 7, "aliases are not supported"},
    {"alias-only.yaml", 3, 15, "aliases are not supported (*b)"},
    {"tag.yaml", 1, 8, "tags are not supported"},
    {"list-local-causal.yaml", 5, 17, "local_stride.local_blocks: a [left, right] list needs causal: false"},
    {"no-base-rule.yaml", 1, 1, "no base rule (expected local_stride, dense: true or mask)"},
    {"missing-heads.yaml", 1, 1, "heads: required key missing"},
    {"override-head-range.yaml", 7, 12, "overrides[0].heads: expected at most 7, got 8"},
    {"range-not-multiple.yaml", 7, 15, "ranges[0].keys: 100 is not a multiple of block_size 64"},
    {"range-two-actions.yaml", 7, 5, "ranges[0]: expected exactly one of sink, keep, vert_stride"},
    {"range-empty-span.yaml", 7, 11, "ranges[0].keys: empty span [128, 64)"},
    {"duplicate-name.yaml", 6, 11, "patterns[1].name: duplicate pattern name 'a' (first at line 2)"},
    {"list-missing-name.yaml", 2, 5, "patterns[0].name: required key missing"},
    {"two-documents.yaml", 4, 1, "only one YAML document"},
    {"deep.yaml", 3, 30, "nesting deeper than 16 levels"},
    {"dense-heads-over.yaml", 6, 20, "local_stride.num_dense_heads: expected at most 8, got 9"},
    {"stride-zero.yaml", 5, 16, "local_stride.vert_stride: expected at least 1, got 0"},
    {"step-zero.yaml", 6, 22, "local_stride.head_sliding_step: expected at least 1, got 0"},
    {"bool-yes.yaml", 3, 8, "dense: expected true or false, got yes"},
    {"max-seq-len-huge.yaml", 3, 14, "max_seq_len: expected at most 2147483648, got 2147483649"},
    {"bad-enum.yaml", 6, 18, "local_stride.vert_position: expected absolute or relative, got sideways"},
    {"name-newline.yaml", 4, 7, "name: expected a name"},
    {"top-level-list.yaml", 1, 1, "expected a pattern mapping"},
    {"mask-heads-mismatch.yaml", 4, 7,
     "mask: mask file 'masks.txt': case 'per_head' has shape 4 2 3, expected H = 1 or 8 (heads)"},
    {"mask-case-missing.yaml", 4, 12, "mask_case: no case named 'nope' in mask file 'masks.txt'"},
};

START_TEST(bad_files)
{
    const struct bad_case *c = &bad_cases[_i];
    char path[256];
    snprintf(path, sizeof path, "bad/%s", c->file);
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = (s2_pattern_set *)&set; /* poisoned: must become NULL */
    s2_status st = s2_pattern_load(ctx, path, &set);
    const char *msg = s2_ctx_message(ctx);
    ck_assert_msg(st == S2_ERR_PARSE, "%s: %s: %s", path, s2_status_name(st), msg);
    ck_assert_ptr_null(set);
    assert_one_line(path, msg);
    char want[512];
    snprintf(want, sizeof want, "%s:%d:%d: ", path, c->line, c->col);
    ck_assert_msg(strncmp(msg, want, strlen(want)) == 0, "want %s..., got %s", want, msg);
    ck_assert_msg(strstr(msg, c->text) != NULL, "want '%s' in %s", c->text, msg);
    s2_ctx_free(ctx);
}
END_TEST

/* every file under bad/ has a row in the table */
START_TEST(bad_files_all_listed)
{
    DIR *d = opendir("bad");
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    int yaml = 0;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 5, ".yaml") != 0)
            continue;
        yaml++;
        bool found = false;
        for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++)
            found |= strcmp(bad_cases[i].file, e->d_name) == 0;
        ck_assert_msg(found, "bad/%s has no expectation", e->d_name);
    }
    closedir(d);
    ck_assert_int_eq(yaml, (int)(sizeof bad_cases / sizeof bad_cases[0]));
}
END_TEST

/* ---- fuzz corpus regression ---------------------------------------------- */

static int check_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    s2_ctx *ctx = s2_ctx_new();
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, "README.md") == 0)
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        s2_pattern_set *set = NULL;
        s2_status st = s2_pattern_load(ctx, path, &set);
        if (st == S2_OK) {
            for (int i = 0; i < s2_pattern_set_count(set); i++) {
                char *text = NULL;
                ck_assert_int_eq(s2_pattern_describe(s2_pattern_set_get(set, i), &text), S2_OK);
                free(text);
            }
        } else {
            ck_assert_msg(st == S2_ERR_PARSE || st == S2_ERR_IO, "%s: %s", path, s2_status_name(st));
            const char *msg = s2_ctx_message(ctx);
            ck_assert_msg(msg[0] && !strchr(msg, '\n'), "%s: message '%s'", path, msg);
            if (st == S2_ERR_PARSE)
                assert_one_line(path, msg);
        }
        s2_pattern_set_free(set);
        s2_block_mask m;
        st = s2_block_mask_load(ctx, path, NULL, &m);
        ck_assert_msg(st == S2_OK || st == S2_ERR_PARSE || st == S2_ERR_IO, "%s: %s", path, s2_status_name(st));
        if (st == S2_ERR_PARSE)
            assert_one_line(path, s2_ctx_message(ctx));
        s2_block_mask_free(&m);
        n++;
    }
    s2_ctx_free(ctx);
    closedir(d);
    return n;
}

START_TEST(fuzz_corpus_regression)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/../fuzz/corpus", env_or("S2C_PATTERNS", "../../patterns"));
    int n = check_dir(dir);
    ck_assert_msg(n >= 50, "only %d corpus files under %s", n, dir);
    snprintf(dir, sizeof dir, "%s/../fuzz/crashers", env_or("S2C_PATTERNS", "../../patterns"));
    check_dir(dir);
}
END_TEST

static Suite *pattern_suite(void)
{
    Suite *s = suite_create("pattern");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, stock_patterns_parse);
    tcase_add_test(tc, phi3_small_rules);
    tcase_add_test(tc, sliding_window_and_dense);
    tcase_add_test(tc, multi_pattern_file);
    tcase_add_test(tc, rules_match_golden);
    tcase_add_test(tc, overrides_apply_in_order);
    tcase_add_test(tc, bidirectional_local);
    tcase_add_test(tc, ranges_fields);
    tcase_add_test(tc, mask_file_reader);
    tcase_add_test(tc, mask_patterns);
    tcase_add_test(tc, names_and_io);
    tcase_add_loop_test(tc, bad_files, 0, (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(tc, bad_files_all_listed);
    tcase_add_test(tc, fuzz_corpus_regression);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return s2t_run_suite(pattern_suite());
}
