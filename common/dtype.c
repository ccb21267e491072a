/* The element types, one row each (dtype.h), and the public s2_dtype_size
 * and s2_dtype_name that ask it. */
#include "dtype.h"

#include <stdio.h>
#include <string.h>

static double f64_get(const void *p) { double v; memcpy(&v, p, 8); return v; }
static void f64_put(void *p, double v) { memcpy(p, &v, 8); }
static double f32_get(const void *p) { float v; memcpy(&v, p, 4); return v; }
static void f32_put(void *p, double v) { float f = (float)v; memcpy(p, &f, 4); }
static double f16_get(const void *p) { uint16_t h; memcpy(&h, p, 2); return s2_f16_to_f32(h); }
static void f16_put(void *p, double v) { uint16_t h = s2_f32_to_f16(s2_f64_to_f32_odd(v)); memcpy(p, &h, 2); }
static double bf16_get(const void *p) { uint16_t h; memcpy(&h, p, 2); return s2_bf16_to_f32(h); }
static void bf16_put(void *p, double v) { uint16_t h = s2_f32_to_bf16(s2_f64_to_f32_odd(v)); memcpy(p, &h, 2); }
static double e4m3_get(const void *p) { return s2_e4m3_to_f64(*(const uint8_t *)p); }
static void e4m3_put(void *p, double v) { *(uint8_t *)p = s2_f64_to_e4m3(v); }
static double e5m2_get(const void *p) { return s2_e5m2_to_f64(*(const uint8_t *)p); }
static void e5m2_put(void *p, double v) { *(uint8_t *)p = s2_f64_to_e5m2(v); }

/* In enum order (s2c/common.h); tensor_map values are cuda.h's
 * CU_TENSOR_MAP_DATA_TYPE_* (fp8 copies move bytes: UINT8). */
static const s2_dtype_info rows[] = {
    {.dtype = S2_DTYPE_F32, .name = "f32", .title = "f32", .cli = {"fp32"}, .size = 4, .llvm = S2_LLVM_FLOAT,
     .ptx = "f32", .mma = S2_MMA_TF32, .mma_k = 8, .llvm_mma = "llvm.nvvm.mma.m16n8k8.row.col.tf32", .tensor_map = 7,
     .tensor_map_name = "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", .kernels = true, .to_f64 = f32_get, .from_f64 = f32_put},
    {.dtype = S2_DTYPE_F16, .name = "f16", .title = "f16", .cli = {"fp16", "f16"}, .size = 2, .llvm = S2_LLVM_HALF,
     .ptx = "f16", .ptx_x2 = "f16x2", .mma = S2_MMA_F16, .mma_k = 16,
     .llvm_mma = "llvm.nvvm.mma.m16n8k16.row.col.f32.f32", .mma_vec = true, .llvm_cvt_x2 = "llvm.nvvm.ff2f16x2.rn",
     .tensor_map = 6, .tensor_map_name = "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", .kernels = true, .to_f64 = f16_get,
     .from_f64 = f16_put},
    {.dtype = S2_DTYPE_BF16, .name = "bf16", .title = "bf16", .cli = {"bf16"}, .size = 2, .llvm = S2_LLVM_BFLOAT,
     .ptx = "bf16", .ptx_x2 = "bf16x2", .mma = S2_MMA_F16, .mma_k = 16,
     .llvm_mma = "llvm.nvvm.mma.m16n8k16.row.col.bf16", .llvm_cvt_x2 = "llvm.nvvm.ff2bf16x2.rn", .tensor_map = 9,
     .tensor_map_name = "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", .kernels = true, .to_f64 = bf16_get, .from_f64 = bf16_put},
    {.dtype = S2_DTYPE_F64, .name = "f64", .title = "f64", .size = 8, .llvm = S2_LLVM_DOUBLE, .ptx = "f64",
     .tensor_map = -1, .to_f64 = f64_get, .from_f64 = f64_put},
    {.dtype = S2_DTYPE_E4M3, .name = "e4m3", .title = "fp8 e4m3", .cli = {"fp8_e4m3", "e4m3"}, .size = 1,
     .llvm = S2_LLVM_I8, .ptx = "e4m3", .ptx_x2 = "e4m3x2", .mma = S2_MMA_F8F6F4, .mma_k = 32,
     .llvm_mma = "llvm.nvvm.mma.m16n8k32.row.col.f32.e4m3.e4m3.f32", .llvm_cvt_x2 = "llvm.nvvm.ff.to.e4m3x2.rn",
     .tensor_map = 0, .tensor_map_name = "CU_TENSOR_MAP_DATA_TYPE_UINT8", .kernels = true, .kv_pages = true,
     .llvm_to_f16x2 = "llvm.nvvm.e4m3x2.to.f16x2.rn", .to_f64 = e4m3_get, .from_f64 = e4m3_put},
    {.dtype = S2_DTYPE_E5M2, .name = "e5m2", .title = "fp8 e5m2", .cli = {"fp8_e5m2", "e5m2"}, .size = 1,
     .llvm = S2_LLVM_I8, .ptx = "e5m2", .ptx_x2 = "e5m2x2", .mma = S2_MMA_F8F6F4, .mma_k = 32,
     .llvm_mma = "llvm.nvvm.mma.m16n8k32.row.col.f32.e5m2.e5m2.f32", .llvm_cvt_x2 = "llvm.nvvm.ff.to.e5m2x2.rn",
     .tensor_map = 0, .tensor_map_name = "CU_TENSOR_MAP_DATA_TYPE_UINT8", .to_f64 = e5m2_get, .from_f64 = e5m2_put},
};

int s2_dtype_count(void) { return (int)(sizeof rows / sizeof rows[0]); }

const s2_dtype_info *s2_dtype_row(int i) { return i >= 0 && i < s2_dtype_count() ? &rows[i] : NULL; }

const s2_dtype_info *s2_dtype_info_of(s2_dtype dt)
{
    const s2_dtype_info *r = s2_dtype_row((int)dt);
    return r && r->dtype == dt ? r : NULL;
}

const s2_dtype_info *s2_dtype_by_name(const char *text, bool cli)
{
    for (int i = 0; text && i < s2_dtype_count(); i++) {
        if (!cli && strcmp(rows[i].name, text) == 0)
            return &rows[i];
        for (int j = 0; cli && j < 2 && rows[i].cli[j]; j++)
            if (strcmp(rows[i].cli[j], text) == 0)
                return &rows[i];
    }
    return NULL;
}

void s2_dtype_kernel_names(char *out, size_t cap, bool cli)
{
    int n = 0, k = 0, len = 0;
    for (int i = 0; i < s2_dtype_count(); i++)
        n += rows[i].kernels;
    if (cap)
        out[0] = 0;
    for (int i = 0; i < s2_dtype_count() && len >= 0 && (size_t)len < cap; i++)
        if (rows[i].kernels) {
            k++;
            len += snprintf(out + len, cap - (size_t)len, "%s%s", k == 1 ? "" : k == n ? " or " : ", ",
                            cli ? rows[i].cli[0] : rows[i].name);
        }
}

s2_status s2_dtype_check_kernel(s2_ctx *ctx, s2_dtype dt, const char *what)
{
    const s2_dtype_info *r = s2_dtype_info_of(dt);
    if (!r)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "%s: dtype %d is not an s2_dtype", what, (int)dt);
    if (!r->kernels)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "%s: %s is not supported by any template yet", what, r->title);
    return S2_OK;
}

size_t s2_dtype_size(s2_dtype dt)
{
    const s2_dtype_info *r = s2_dtype_info_of(dt);
    return r ? r->size : 0;
}

const char *s2_dtype_name(s2_dtype dt)
{
    const s2_dtype_info *r = s2_dtype_info_of(dt);
    return r ? r->name : "?";
}
