/* Unit tests of common/: context messages, arena, buffers, half conversions,
 * edit distances and suggestions. */
#include "util.h"
#include "check_main.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

START_TEST(ctx_messages)
{
    s2_ctx *ctx = s2_ctx_new();
    ck_assert_ptr_nonnull(ctx);
    ck_assert_str_eq(s2_ctx_message(ctx), "");
    ck_assert_int_eq(s2_fail(ctx, S2_ERR_PARSE, "f.yaml:%d:%d: bad", 3, 7), S2_ERR_PARSE);
    ck_assert_str_eq(s2_ctx_message(ctx), "f.yaml:3:7: bad");
    ck_assert_int_eq(s2_ctx_status(ctx), S2_ERR_PARSE);
    s2_ctx_clear(ctx);
    ck_assert_int_eq(s2_ctx_status(ctx), S2_OK);
    ck_assert_str_eq(s2_status_name(S2_ERR_CUDA), "S2_ERR_CUDA");
    ck_assert_str_eq(s2_status_name((s2_status)999), "S2_ERR_UNKNOWN");
    ck_assert_int_eq(s2_fail(NULL, S2_ERR_IO, "no ctx"), S2_ERR_IO);
    s2_ctx_free(ctx);
    s2_ctx_free(NULL);
}
END_TEST

START_TEST(arena_and_buf)
{
    s2_arena a;
    s2_arena_init(&a);
    for (int i = 0; i < 1000; i++) {
        unsigned char *p = s2_arena_alloc(&a, (size_t)(i * 37 % 5000) + 1);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq((uintptr_t)p % 16, 0);
        ck_assert_int_eq(p[0], 0);
        p[0] = 0xAB;
    }
    ck_assert_ptr_null(s2_arena_array(&a, SIZE_MAX / 2, 4));
    ck_assert_str_eq(s2_arena_strdup(&a, "hello"), "hello");
    s2_arena_release(&a);
    s2_arena_release(&a);

    s2_buf b;
    s2_buf_init(&b);
    for (int i = 0; i < 2000; i++)
        ck_assert(s2_buf_printf(&b, "%d,", i));
    ck_assert_int_eq(strncmp(b.data, "0,1,2,", 6), 0);
    size_t len;
    char *s = s2_buf_steal(&b, &len);
    ck_assert_uint_eq(strlen(s), len);
    free(s);
    s2_buf_free(&b);
}
END_TEST

START_TEST(half_roundtrip)
{
    /* every bf16 and f16 bit pattern survives f32 and back (NaNs stay NaN) */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = s2_bf16_to_f32((uint16_t)h);
        uint16_t back = s2_f32_to_bf16(f);
        if (isnan(f))
            ck_assert(isnan(s2_bf16_to_f32(back)));
        else
            ck_assert_uint_eq(back, h);
        float g = s2_f16_to_f32((uint16_t)h);
        uint16_t gb = s2_f32_to_f16(g);
        if (isnan(g))
            ck_assert(isnan(s2_f16_to_f32(gb)));
        else
            ck_assert_uint_eq(gb, h);
    }
    /* rounding: 1 + 2^-9 is halfway between two bf16 values -> even (1.0) */
    ck_assert_float_eq(s2_bf16_to_f32(s2_f32_to_bf16(1.0f + 0x1p-9f)), 1.0f);
    ck_assert_float_eq(s2_bf16_to_f32(s2_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-9f)), 1.0f + 0x1p-7f);
    ck_assert_float_eq(s2_f16_to_f32(s2_f32_to_f16(65519.0f)), 65504.0f);
    ck_assert(isinf(s2_f16_to_f32(s2_f32_to_f16(65520.0f))));
    ck_assert_float_eq(s2_f16_to_f32(s2_f32_to_f16(0x1p-24f)), 0x1p-24f);
    ck_assert_float_eq(s2_f16_to_f32(s2_f32_to_f16(0x1p-25f)), 0.0f);
    ck_assert_float_eq(s2_f16_to_f32(s2_f32_to_f16(0x1.8p-25f)), 0x1p-24f);
}
END_TEST

/* The oracle: the optimal-string-alignment distance from its full table. */
static size_t osa_oracle(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b), d[16][16];
    for (size_t i = 0; i <= n; i++)
        for (size_t j = 0; j <= m; j++) {
            if (i == 0 || j == 0) {
                d[i][j] = i + j;
                continue;
            }
            size_t v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            v = d[i - 1][j] + 1 < v ? d[i - 1][j] + 1 : v;
            v = d[i][j - 1] + 1 < v ? d[i][j - 1] + 1 : v;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[n][m];
}

START_TEST(edit_distance)
{
    static const struct { const char *a, *b; size_t d; } known[] = {
        {"", "", 0}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"hedas", "heads", 1}, {"formt", "format", 1},
        {"ca", "abc", 3} /* OSA, not Damerau-Levenshtein (2): no edit of a swapped pair */, {"layuot", "layout", 1},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        ck_assert_uint_eq(s2_edit_distance(known[i].a, strlen(known[i].a), known[i].b, strlen(known[i].b)),
                          known[i].d);
    /* random words over a 3-letter alphabet (many swaps and repeats) against the full table */
    unsigned seed = 12345;
    for (int t = 0; t < 20000; t++) {
        char a[16], b[16];
        size_t n = (seed = seed * 1103515245u + 12345u) >> 16 & 7, m = (seed = seed * 1103515245u + 12345u) >> 16 & 7;
        for (size_t i = 0; i < n; i++)
            a[i] = (char)('a' + ((seed = seed * 1103515245u + 12345u) >> 16) % 3);
        for (size_t i = 0; i < m; i++)
            b[i] = (char)('a' + ((seed = seed * 1103515245u + 12345u) >> 16) % 3);
        a[n] = b[m] = 0;
        ck_assert_msg(s2_edit_distance(a, n, b, m) == osa_oracle(a, b), "'%s' '%s'", a, b);
    }
    char longer[66];
    memset(longer, 'x', 65);
    longer[65] = 0;
    ck_assert_uint_eq(s2_edit_distance(longer, 65, "x", 1), SIZE_MAX);
}
END_TEST

START_TEST(suggestions)
{
    static const char *const cmds[] = {"check", "layout", "compile", "info", "kv-memory"};
    ck_assert_str_eq(s2_suggest("layuot", 6, cmds, 5), "layout");
    ck_assert_str_eq(s2_suggest("compil", 6, cmds, 5), "compile");
    ck_assert_str_eq(s2_suggest("kv-mem0ry", 9, cmds, 5), "kv-memory");
    ck_assert_ptr_null(s2_suggest("frobnicate", 10, cmds, 5));
    ck_assert_ptr_null(s2_suggest("layout", 6, cmds, 5));      /* the word itself is no suggestion */
    ck_assert_ptr_null(s2_suggest("x", 1, (const char *const[]){"y"}, 1)); /* one-letter words: none */
    /* about a third of the length: "fo" is 4 edits from "format", 2 allowed */
    ck_assert_ptr_null(s2_suggest("fo", 2, (const char *const[]){"format"}, 1));
    static const char *const keys[] = {"heads", "kv_heads", "block_size", "vert_stride"};
    ck_assert_str_eq(s2_suggest("head", 4, keys, 4), "heads");
    ck_assert_str_eq(s2_suggest("vert_strid", 10, keys, 4), "vert_stride");
    ck_assert_str_eq(s2_suggest("blok_sise", 9, keys, 4), "block_size");
    ck_assert_ptr_null(s2_suggest("local_blocks", 12, keys, 4));
    /* equally close: the first */
    ck_assert_str_eq(s2_suggest("ab", 2, (const char *const[]){"abc", "abd"}, 2), "abc");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("common");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, ctx_messages);
    tcase_add_test(tc, arena_and_buf);
    tcase_add_test(tc, half_roundtrip);
    tcase_add_test(tc, edit_distance);
    tcase_add_test(tc, suggestions);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
