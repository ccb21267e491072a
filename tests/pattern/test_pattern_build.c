/* Tests of s2_pattern_build: patterns from a framework's block mask and from
 * per-head rules (the S2 library's heads sliced), checked against the golden
 * masks that library made, and the definition checks with their messages. */
#include "s2c/pattern.h"
#include "check_main.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static const char *golden_path(void)
{
    const char *v = getenv("S2C_GOLDEN");
    return v && *v ? v : "../data/s2_golden_masks.txt";
}

static s2_block_mask golden(s2_ctx *ctx, const char *name)
{
    s2_block_mask g;
    s2_status st = s2_block_mask_load(ctx, golden_path(), name, &g);
    ck_assert_msg(st == S2_OK, "%s", s2_ctx_message(ctx));
    return g;
}

/* Causal, absolute positions (include/s2c/pattern.h), written here again. */
static bool kept(const s2_head_rule *r, int64_t m, int64_t n)
{
    if (n > m)
        return false;
    if (r->dense || m - n < r->local_left)
        return true;
    return r->vert_stride > 0 && (n + r->shift) % r->vert_stride == 0;
}

static bool golden_bit(const s2_block_mask *g, int h, int64_t m, int64_t n)
{
    int gh = g->heads == 1 ? 0 : h;
    return g->bits[((int64_t)gh * g->rows + m) * g->cols + n] != 0;
}

START_TEST(mask_pattern_copies_the_mask)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_block_mask g = golden(ctx, "l16v8_h32_off1");
    /* a caller's buffer with bytes other than 0/1, poisoned after the call */
    size_t n = (size_t)g.heads * (size_t)g.rows * (size_t)g.cols;
    uint8_t *bits = malloc(n);
    for (size_t i = 0; i < n; i++)
        bits[i] = g.bits[i] ? (uint8_t)(1 + i % 255) : 0;
    s2_block_mask in = {.name = "fw", .heads = g.heads, .rows = g.rows, .cols = g.cols, .bits = bits};
    s2_pattern_def d = {.name = "from-mask", .heads = 32, .kv_heads = 8, .block_size = 64, .causal = true,
                        .vert_position = -1, .mask = &in};
    s2_pattern_set *set = NULL;
    ck_assert_msg(s2_pattern_build(ctx, &d, &set) == S2_OK, "%s", s2_ctx_message(ctx));
    memset(bits, 0xA5, n);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    ck_assert_str_eq(p->name, "from-mask");
    ck_assert_int_eq(p->heads, 32);
    ck_assert_int_eq(p->kv_heads, 8);
    ck_assert_int_eq(p->num_masks, 1);
    ck_assert(p->masks[0].rows == g.rows && p->masks[0].cols == g.cols && p->masks[0].heads == g.heads);
    for (int q = 0; q < 32; q++) {
        ck_assert_int_eq(p->rules[q].mask, 0);
        ck_assert_int_eq(p->rules[q].mask_head, g.heads == 1 ? 0 : q);
    }
    ck_assert_mem_eq(p->masks[0].bits, g.bits, n);
    s2_pattern_set_free(set);
    free(bits);
    s2_block_mask_free(&g);
    s2_ctx_free(ctx);
}
END_TEST

/* Heads 8..23 of the golden 32-head pattern (the S2 library's
 * active_head_range), as rules: each keeps its global head's shift. */
START_TEST(sliced_rules_match_golden)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_block_mask g = golden(ctx, "l16v8_h32_off1");
    enum { LO = 8, HI = 24 };
    s2_head_rule rules[HI - LO];
    for (int i = 0; i < HI - LO; i++)   /* step auto = max(1, 8 / 32) = 1, offset 1 */
        rules[i] = (s2_head_rule){.local_left = 16, .vert_stride = 8, .shift = (LO + i) * 1 + 1, .mask = -1};
    s2_pattern_def d = {.heads = HI - LO, .block_size = 64, .causal = true, .vert_position = -1, .rules = rules};
    s2_pattern_set *set = NULL;
    ck_assert_msg(s2_pattern_build(ctx, &d, &set) == S2_OK, "%s", s2_ctx_message(ctx));
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    ck_assert_str_eq(p->name, "pattern");
    ck_assert_int_eq(p->kv_heads, HI - LO);
    ck_assert_int_eq(p->vert_position, S2_VERT_ABSOLUTE);
    for (int q = 0; q < p->heads; q++)
        for (int64_t m = 0; m < g.rows; m++)
            for (int64_t n = 0; n < g.cols; n++)
                ck_assert_msg(kept(&p->rules[q], m, n) == golden_bit(&g, LO + q, m, n), "head %d (%lld, %lld)", q,
                              (long long)m, (long long)n);
    s2_pattern_set_free(set);
    s2_block_mask_free(&g);
    s2_ctx_free(ctx);
}
END_TEST

/* Rules and a mask together: dense head 0, masked head 1, windowed head 2. */
START_TEST(rules_with_mask)
{
    s2_ctx *ctx = s2_ctx_new();
    uint8_t bits[4 * 4] = {1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 1, 0, 1};
    s2_block_mask m = {.heads = 1, .rows = 4, .cols = 4, .bits = bits};
    s2_head_rule rules[3] = {
        {.dense = true, .mask = -1},
        {.mask = 0, .mask_head = 0},
        {.local_left = 2, .local_right = 7, .mask = -1},
    };
    s2_pattern_def d = {.heads = 3, .kv_heads = 1, .block_size = 16, .causal = true, .vert_position = -1,
                        .rules = rules, .mask = &m};
    s2_pattern_set *set = NULL;
    ck_assert_msg(s2_pattern_build(ctx, &d, &set) == S2_OK, "%s", s2_ctx_message(ctx));
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    ck_assert(p->rules[0].dense && p->rules[0].mask == -1);
    ck_assert_int_eq(p->rules[1].mask, 0);
    ck_assert_int_eq(p->rules[2].local_left, 2);
    ck_assert_int_eq(p->rules[2].local_right, 0);   /* causal: no right window */
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

static const struct {
    const char *what, *msg;
} bad_defs[] = {
    {"heads 0", "heads must be in 1..4096, got 0"},
    {"kv 3 of 8", "heads (8) must be a multiple of kv_heads (3)"},
    {"block 24", "block_size must be 16, 32, 64 or 128, got 24"},
    {"vert_position 2", "vert_position must be -1, 0 or 1, got 2"},
    {"no rules, no mask", "a pattern needs rules, a mask, or both"},
    {"mask heads 3", "mask: 3 heads, expected 1 or 8 (heads)"},
    {"mask index 1", "rules[2]: mask must be -1 (none) or 0 (the mask), got 1"},
    {"mask without mask", "rules[0]: refers to a mask, but none is given"},
    {"mask_head 8", "rules[1]: mask_head must be in 0..7, got 8"},
    {"negative shift", "rules[5]: shift must be in 0..68719476736, got -1"},
    {"stride 2^24+1", "rules[0]: vert_stride must be in 0..16777216, got 16777217"},
    {"empty rule", "rules[7]: attends to nothing (no window, stride, mask or dense)"},
    {"max_seq_len", "max_seq_len must be in 0..2147483648, got -5"},
};

START_TEST(bad_definitions)
{
    s2_ctx *ctx = s2_ctx_new();
    uint8_t bits[8 * 2 * 2];
    memset(bits, 1, sizeof bits);
    s2_block_mask mask8 = {.heads = 8, .rows = 2, .cols = 2, .bits = bits};
    s2_block_mask mask3 = {.heads = 3, .rows = 2, .cols = 2, .bits = bits};
    s2_head_rule rules[8];
    for (int q = 0; q < 8; q++)
        rules[q] = (s2_head_rule){.local_left = 1, .vert_stride = 4, .shift = q, .mask = -1};
    s2_pattern_def d = {.heads = 8, .block_size = 64, .causal = true, .vert_position = -1, .rules = rules};
    switch (_i) {
    case 0: d.heads = 0; break;
    case 1: d.kv_heads = 3; break;
    case 2: d.block_size = 24; break;
    case 3: d.vert_position = 2; break;
    case 4: d.rules = NULL; break;
    case 5: d.mask = &mask3; break;
    case 6: d.mask = &mask8; rules[2].mask = 1; break;
    case 7: rules[0].mask = 0; break;
    case 8: d.mask = &mask8; rules[1].mask = 0; rules[1].mask_head = 8; break;
    case 9: rules[5].shift = -1; break;
    case 10: rules[0].vert_stride = (1 << 24) + 1; break;
    case 11: rules[7] = (s2_head_rule){.mask = -1}; break;
    case 12: d.max_seq_len = -5; break;
    }
    s2_pattern_set *set = (s2_pattern_set *)&d;   /* poisoned: must come back NULL */
    s2_status st = s2_pattern_build(ctx, &d, &set);
    ck_assert_msg(st == S2_ERR_INVALID || st == S2_ERR_NULL_ARG, "%s: %s", bad_defs[_i].what, s2_status_name(st));
    ck_assert_ptr_null(set);
    ck_assert_str_eq(s2_ctx_message(ctx), bad_defs[_i].msg);
    s2_ctx_free(ctx);
}
END_TEST

static Suite *build_suite(void)
{
    Suite *s = suite_create("pattern_build");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, mask_pattern_copies_the_mask);
    tcase_add_test(tc, sliced_rules_match_golden);
    tcase_add_test(tc, rules_with_mask);
    tcase_add_loop_test(tc, bad_definitions, 0, (int)(sizeof bad_defs / sizeof bad_defs[0]));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return s2t_run_suite(build_suite());
}
