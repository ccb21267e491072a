/* Unit tests of common/: context messages, arena, buffers, half conversions. */
#include "util.h"

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

int main(void)
{
    Suite *s = suite_create("common");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, ctx_messages);
    tcase_add_test(tc, arena_and_buf);
    tcase_add_test(tc, half_roundtrip);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
