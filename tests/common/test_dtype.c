/* The dtype table (common/dtype.c): each row's facts written out again here
 * (sizes, names, PTX types, mma kinds, cuda.h's tensor map types), the names
 * read back through the lookups, the refusal of dtypes no template builds,
 * and the fp8 conversions on known bit patterns (rounding, saturation, NaN). */
#include "dtype.h"
#include "check_main.h"

#include <check.h>
#include <cuda.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const struct {
    s2_dtype dt;
    size_t size;
    const char *name, *title, *cli0, *cli1, *ptx, *ptx_x2;
    s2_llvm_elt llvm;
    s2_mma_kind mma;
    int mma_k, tensor_map;
    const char *tensor_map_name;
    bool kernels;
} want[] = {
    {S2_DTYPE_F32, 4, "f32", "f32", "fp32", NULL, "f32", NULL, S2_LLVM_FLOAT, S2_MMA_TF32, 8,
     CU_TENSOR_MAP_DATA_TYPE_FLOAT32, "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", true},
    {S2_DTYPE_F16, 2, "f16", "f16", "fp16", "f16", "f16", "f16x2", S2_LLVM_HALF, S2_MMA_F16, 16,
     CU_TENSOR_MAP_DATA_TYPE_FLOAT16, "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", true},
    {S2_DTYPE_BF16, 2, "bf16", "bf16", "bf16", NULL, "bf16", "bf16x2", S2_LLVM_BFLOAT, S2_MMA_F16, 16,
     CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", true},
    {S2_DTYPE_F64, 8, "f64", "f64", NULL, NULL, "f64", NULL, S2_LLVM_DOUBLE, S2_MMA_NONE, 0, -1, NULL, false},
    {S2_DTYPE_E4M3, 1, "e4m3", "fp8 e4m3", "fp8_e4m3", "e4m3", "e4m3", "e4m3x2", S2_LLVM_I8, S2_MMA_F8F6F4, 32,
     CU_TENSOR_MAP_DATA_TYPE_UINT8, "CU_TENSOR_MAP_DATA_TYPE_UINT8", true},
    {S2_DTYPE_E5M2, 1, "e5m2", "fp8 e5m2", "fp8_e5m2", "e5m2", "e5m2", "e5m2x2", S2_LLVM_I8, S2_MMA_F8F6F4, 32,
     CU_TENSOR_MAP_DATA_TYPE_UINT8, "CU_TENSOR_MAP_DATA_TYPE_UINT8", false},
};
enum { NWANT = sizeof want / sizeof want[0] };

static void str_eq_or_null(const char *got, const char *exp)
{
    if (!exp)
        ck_assert_ptr_null(got);
    else
        ck_assert_str_eq(got, exp);
}

START_TEST(rows_hold_their_facts)
{
    ck_assert_int_eq(s2_dtype_count(), NWANT);
    for (int i = 0; i < NWANT; i++) {
        const s2_dtype_info *r = s2_dtype_info_of(want[i].dt);
        ck_assert_ptr_nonnull(r);
        ck_assert_ptr_eq(r, s2_dtype_row(i));
        ck_assert_int_eq(r->dtype, want[i].dt);
        ck_assert_uint_eq(r->size, want[i].size);
        ck_assert_uint_eq(s2_dtype_size(want[i].dt), want[i].size);
        ck_assert_str_eq(r->name, want[i].name);
        ck_assert_str_eq(s2_dtype_name(want[i].dt), want[i].name);
        ck_assert_str_eq(r->title, want[i].title);
        str_eq_or_null(r->cli[0], want[i].cli0);
        str_eq_or_null(r->cli[1], want[i].cli1);
        ck_assert_str_eq(r->ptx, want[i].ptx);
        str_eq_or_null(r->ptx_x2, want[i].ptx_x2);
        ck_assert_int_eq(r->llvm, want[i].llvm);
        ck_assert_int_eq(r->mma, want[i].mma);
        ck_assert_int_eq(r->mma_k, want[i].mma_k);
        ck_assert_int_eq(r->tensor_map, want[i].tensor_map);
        str_eq_or_null(r->tensor_map_name, want[i].tensor_map_name);
        ck_assert_int_eq(r->kernels, want[i].kernels);
        /* a tensor-core dtype names its mma and, narrower than f32 (tf32 operands are f32
         * values), its pair conversion; they name its PTX type */
        ck_assert_int_eq(r->llvm_mma != NULL, r->mma != S2_MMA_NONE);
        ck_assert_int_eq(r->llvm_cvt_x2 != NULL, r->mma != S2_MMA_NONE && r->mma != S2_MMA_TF32);
        if (r->mma == S2_MMA_F8F6F4) {
            ck_assert_ptr_nonnull(strstr(r->llvm_mma, r->ptx));
            ck_assert_ptr_nonnull(strstr(r->llvm_cvt_x2, r->ptx_x2));
        }
        ck_assert_ptr_nonnull(r->to_f64);
        ck_assert_ptr_nonnull(r->from_f64);
    }
    /* the f16 mma intrinsic types its operands; the bf16 one takes i32 */
    ck_assert(s2_dtype_info_of(S2_DTYPE_F16)->mma_vec);
    ck_assert(!s2_dtype_info_of(S2_DTYPE_BF16)->mma_vec);
    ck_assert_str_eq(s2_dtype_info_of(S2_DTYPE_BF16)->llvm_mma, "llvm.nvvm.mma.m16n8k16.row.col.bf16");
    ck_assert_str_eq(s2_dtype_info_of(S2_DTYPE_F16)->llvm_cvt_x2, "llvm.nvvm.ff2f16x2.rn");
    /* f32 computes on tf32: m16n8k8, i32 operands */
    ck_assert(!s2_dtype_info_of(S2_DTYPE_F32)->mma_vec);
    ck_assert_str_eq(s2_dtype_info_of(S2_DTYPE_F32)->llvm_mma, "llvm.nvvm.mma.m16n8k8.row.col.tf32");
    /* outside the enum: no row */
    ck_assert_ptr_null(s2_dtype_info_of((s2_dtype)NWANT));
    ck_assert_ptr_null(s2_dtype_info_of((s2_dtype)-1));
    ck_assert_ptr_null(s2_dtype_row(NWANT));
    ck_assert_uint_eq(s2_dtype_size((s2_dtype)NWANT), 0);
    ck_assert_str_eq(s2_dtype_name((s2_dtype)-1), "?");
}
END_TEST

START_TEST(names_round_trip)
{
    for (int i = 0; i < NWANT; i++) {
        ck_assert_ptr_eq(s2_dtype_by_name(want[i].name, false), s2_dtype_info_of(want[i].dt));
        if (want[i].cli0)
            ck_assert_ptr_eq(s2_dtype_by_name(want[i].cli0, true), s2_dtype_info_of(want[i].dt));
        if (want[i].cli1)
            ck_assert_ptr_eq(s2_dtype_by_name(want[i].cli1, true), s2_dtype_info_of(want[i].dt));
    }
    /* the CLI's spellings are not the manifest's, and neither takes near misses */
    ck_assert_ptr_null(s2_dtype_by_name("fp16", false));
    ck_assert_ptr_null(s2_dtype_by_name("f32", true));
    ck_assert_ptr_null(s2_dtype_by_name("fp8", true));
    ck_assert_ptr_null(s2_dtype_by_name("BF16", false));
    ck_assert_ptr_null(s2_dtype_by_name("", true));
    ck_assert_ptr_null(s2_dtype_by_name(NULL, true));
    char names[64];
    s2_dtype_kernel_names(names, sizeof names, false);
    ck_assert_str_eq(names, "f32, f16, bf16 or e4m3");
    s2_dtype_kernel_names(names, sizeof names, true);
    ck_assert_str_eq(names, "fp32, fp16, bf16 or fp8_e4m3");
    s2_dtype_kernel_names(names, 5, true);
    ck_assert_str_eq(names, "fp32");
}
END_TEST

START_TEST(kernels_refuse_the_others)
{
    s2_ctx *ctx = s2_ctx_new();
    ck_assert_int_eq(s2_dtype_check_kernel(ctx, S2_DTYPE_BF16, "spec"), S2_OK);
    ck_assert_int_eq(s2_dtype_check_kernel(ctx, S2_DTYPE_F16, "spec"), S2_OK);
    ck_assert_int_eq(s2_dtype_check_kernel(ctx, S2_DTYPE_F32, "spec"), S2_OK);
    ck_assert_int_eq(s2_dtype_check_kernel(ctx, S2_DTYPE_E4M3, "spec"), S2_OK);   /* the sm_90a forward's */
    static const struct { s2_dtype dt; const char *msg; } no[] = {
        {S2_DTYPE_E5M2, "spec: fp8 e5m2 is not supported by any template yet"},
        {S2_DTYPE_F64, "spec: f64 is not supported by any template yet"},
        {(s2_dtype)9, "spec: dtype 9 is not an s2_dtype"},
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        ck_assert_int_eq(s2_dtype_check_kernel(ctx, no[i].dt, "spec"), S2_ERR_UNSUPPORTED);
        ck_assert_str_eq(s2_ctx_message(ctx), no[i].msg);
    }
    s2_ctx_free(ctx);
}
END_TEST

/* Known e4m3 codes (OCP "fn": bias 7, no infinities, S.1111.111 NaN). */
START_TEST(e4m3_codes)
{
    static const struct { uint8_t x; double v; } k[] = {
        {0x00, 0.0},     {0x01, 0x1p-9},   {0x07, 7 * 0x1p-9}, {0x08, 0x1p-6}, {0x38, 1.0},
        {0x39, 1.125},   {0x3c, 1.5},      {0x40, 2.0},        {0x77, 240.0},  {0x7e, 448.0},
        {0xb8, -1.0},    {0xfe, -448.0},   {0x7d, 416.0},      {0x6f, 120.0},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        ck_assert_msg(s2_e4m3_to_f64(k[i].x) == k[i].v, "0x%02x: %g", k[i].x, s2_e4m3_to_f64(k[i].x));
        ck_assert_uint_eq(s2_f64_to_e4m3(k[i].v), k[i].x);
    }
    ck_assert(signbit(s2_e4m3_to_f64(0x80)) && s2_e4m3_to_f64(0x80) == 0.0);
    ck_assert(isnan(s2_e4m3_to_f64(0x7f)) && isnan(s2_e4m3_to_f64(0xff)));
    /* every code but NaN round-trips */
    for (int x = 0; x < 256; x++)
        if ((x & 0x7f) != 0x7f)
            ck_assert_uint_eq(s2_f64_to_e4m3(s2_e4m3_to_f64((uint8_t)x)), x);
    /* round to nearest even: halfway cases, the subnormal range */
    ck_assert_uint_eq(s2_f64_to_e4m3(1.0625), 0x38);        /* 1 + 1/16: between 1 and 1.125 */
    ck_assert_uint_eq(s2_f64_to_e4m3(1.1875), 0x3a);        /* between 1.125 and 1.25 */
    ck_assert_uint_eq(s2_f64_to_e4m3(1.07), 0x39);
    ck_assert_uint_eq(s2_f64_to_e4m3(0x1p-10), 0x00);       /* half the smallest subnormal */
    ck_assert_uint_eq(s2_f64_to_e4m3(0x1.8p-9), 0x02);      /* 1.5 of it: to 2 */
    ck_assert_uint_eq(s2_f64_to_e4m3(0x1.fp-7), 0x08);      /* rounds up to the smallest normal */
    ck_assert_uint_eq(s2_f64_to_e4m3(-0x1p-12), 0x80);
    /* satfinite: beyond 448 (infinity too) saturates; NaN is 0x7f */
    ck_assert_uint_eq(s2_f64_to_e4m3(449.0), 0x7e);
    ck_assert_uint_eq(s2_f64_to_e4m3(464.0), 0x7e);
    ck_assert_uint_eq(s2_f64_to_e4m3(1e30), 0x7e);
    ck_assert_uint_eq(s2_f64_to_e4m3(INFINITY), 0x7e);
    ck_assert_uint_eq(s2_f64_to_e4m3(-INFINITY), 0xfe);
    ck_assert_uint_eq(s2_f64_to_e4m3(NAN), 0x7f);
    ck_assert_uint_eq(s2_f64_to_e4m3(-NAN), 0x7f);
}
END_TEST

/* Known e5m2 codes (bias 15, infinities at S.11111.00, NaN above). */
START_TEST(e5m2_codes)
{
    static const struct { uint8_t x; double v; } k[] = {
        {0x00, 0.0}, {0x01, 0x1p-16}, {0x03, 3 * 0x1p-16}, {0x04, 0x1p-14}, {0x3c, 1.0},
        {0x3d, 1.25}, {0x3e, 1.5},    {0x7b, 57344.0},     {0xbc, -1.0},   {0xfb, -57344.0},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        ck_assert_msg(s2_e5m2_to_f64(k[i].x) == k[i].v, "0x%02x: %g", k[i].x, s2_e5m2_to_f64(k[i].x));
        ck_assert_uint_eq(s2_f64_to_e5m2(k[i].v), k[i].x);
    }
    ck_assert(isinf(s2_e5m2_to_f64(0x7c)) && s2_e5m2_to_f64(0x7c) > 0);
    ck_assert(isinf(s2_e5m2_to_f64(0xfc)) && s2_e5m2_to_f64(0xfc) < 0);
    ck_assert(isnan(s2_e5m2_to_f64(0x7d)) && isnan(s2_e5m2_to_f64(0x7e)) && isnan(s2_e5m2_to_f64(0xff)));
    for (int x = 0; x < 256; x++)
        if ((x & 0x7c) != 0x7c)
            ck_assert_uint_eq(s2_f64_to_e5m2(s2_e5m2_to_f64((uint8_t)x)), x);
    ck_assert_uint_eq(s2_f64_to_e5m2(1.125), 0x3c);          /* between 1 and 1.25: even */
    ck_assert_uint_eq(s2_f64_to_e5m2(1.375), 0x3e);          /* between 1.25 and 1.5: even */
    ck_assert_uint_eq(s2_f64_to_e5m2(0x1p-17), 0x00);
    ck_assert_uint_eq(s2_f64_to_e5m2(61440.0), 0x7b);        /* satfinite, not infinity */
    ck_assert_uint_eq(s2_f64_to_e5m2(INFINITY), 0x7b);
    ck_assert_uint_eq(s2_f64_to_e5m2(-INFINITY), 0xfb);
    ck_assert_uint_eq(s2_f64_to_e5m2(NAN), 0x7f);
}
END_TEST

/* The rows' reference conversions store and read the element in place. */
START_TEST(row_conversions)
{
    unsigned char e[8];
    const s2_dtype_info *r = s2_dtype_info_of(S2_DTYPE_E4M3);
    r->from_f64(e, 0.3);
    ck_assert_uint_eq(e[0], 0x2a); /* 0.3 = 1.2 * 2^-2: to 1.25 * 2^-2 */
    ck_assert(r->to_f64(e) == 0.3125);
    r = s2_dtype_info_of(S2_DTYPE_BF16);
    r->from_f64(e, 1.0 + 0x1p-8 + 0x1p-30); /* just over halfway: up, through the f32 odd rounding */
    ck_assert(r->to_f64(e) == 1.0 + 0x1p-7);
    uint16_t h;
    memcpy(&h, e, 2);
    ck_assert_uint_eq(h, 0x3f81);
    r = s2_dtype_info_of(S2_DTYPE_F64);
    r->from_f64(e, 0.1);
    ck_assert(r->to_f64(e) == 0.1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dtype");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, rows_hold_their_facts);
    tcase_add_test(tc, names_round_trip);
    tcase_add_test(tc, kernels_refuse_the_others);
    tcase_add_test(tc, e4m3_codes);
    tcase_add_test(tc, e5m2_codes);
    tcase_add_test(tc, row_conversions);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
