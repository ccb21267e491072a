/* The decode template at every head dim it takes (multiples of 16 from 16
 * to 256), without a GPU: the resolved tunables (4 warps to d128, 2 above,
 * 3 stages, the ring within each arch's shared memory), the refusals (8 warps
 * where the warps' merge cannot split a row's columns evenly, a ring over
 * sm_80's limit, dims off the 16 grid), and kernels that assemble for sm_90a
 * and sm_80 with zero spills and one m16n8k16 mma per k-step and n-tile:
 * 2 * D / 16 for Q·Kᵀ (16-key chunk: two n-tiles) and D / 8 for P·V. */
#include "../attn/patterns.h"
#include "s2c/codegen.h"
#include "s2c/compile.h"
#include "s2c/layout.h"
#include "check_main.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

static s2_pattern_set *gqa_pattern(s2_ctx *ctx, const s2_pattern **p)
{
    s2_local_stride_args a;
    attn_pattern_args(3, &a);   /* GQA 32/8, block 32 */
    s2_pattern_set *set = NULL;
    ck_assert_msg(s2_pattern_from_args(ctx, &a, &set) == S2_OK, "%s", s2_ctx_message(ctx));
    *p = s2_pattern_set_get(set, 0);
    return set;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *s = strstr(hay, needle); s; s = strstr(s + 1, needle))
        n++;
    return n;
}

START_TEST(resolve_every_dim)
{
    s2_ctx *ctx = s2_ctx_new();
    const s2_pattern *p = NULL;
    s2_pattern_set *set = gqa_pattern(ctx, &p);
    static const s2_arch archs[] = {S2_ARCH_SM80, S2_ARCH_SM90A};
    for (int a = 0; a < 2; a++)
        for (int d = 16; d <= 256; d += 16) {
            s2_kernel_spec s = {.kind = S2_KERNEL_DECODE, .dtype = S2_DTYPE_BF16, .head_dim = d, .arch = archs[a]};
            ck_assert_msg(s2_kernel_spec_resolve(ctx, &s, p) == S2_OK, "d%d: %s", d, s2_ctx_message(ctx));
            ck_assert_int_eq(s.num_warps, d > 128 ? 2 : 4);
            ck_assert_int_eq(s.num_stages, 3);
            ck_assert_int_eq(s.block_m, 16);
            ck_assert_int_eq(s.block_n, 16 * s.num_warps);
            /* 8 warps: 16 threads per row, an even number of columns each (above
             * d128 a two-stage ring of 128 keys may exceed sm_80's shared memory) */
            s2_kernel_spec w8 = {.kind = S2_KERNEL_DECODE, .dtype = S2_DTYPE_F16, .head_dim = d, .arch = archs[a],
                                 .num_warps = 8, .num_stages = 2};
            s2_status st = s2_kernel_spec_resolve(ctx, &w8, p);
            if (d % 32 != 0) {
                ck_assert_int_eq(st, S2_ERR_UNSUPPORTED);
                ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "head_dim % 32 == 0"));
            } else if (d <= 128) {
                ck_assert_msg(st == S2_OK, "d%d 8 warps: %s", d, s2_ctx_message(ctx));
            }
        }
    /* d256 with 4 warps and 3 stages: 200 KB, over sm_80's 163 KB, under sm_90a's 227 KB */
    s2_kernel_spec big = {.kind = S2_KERNEL_DECODE, .dtype = S2_DTYPE_BF16, .head_dim = 256, .arch = S2_ARCH_SM80,
                          .num_warps = 4};
    ck_assert_int_eq(s2_kernel_spec_resolve(ctx, &big, p), S2_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "shared memory"));
    big = (s2_kernel_spec){.kind = S2_KERNEL_DECODE, .dtype = S2_DTYPE_BF16, .head_dim = 256, .arch = S2_ARCH_SM90A,
                           .num_warps = 4};
    ck_assert_int_eq(s2_kernel_spec_resolve(ctx, &big, p), S2_OK);
    static const int off_grid[] = {8, 24, 40, 264, 272};
    for (size_t i = 0; i < sizeof off_grid / sizeof off_grid[0]; i++) {
        s2_kernel_spec s = {.kind = S2_KERNEL_DECODE, .dtype = S2_DTYPE_BF16, .head_dim = off_grid[i],
                            .arch = S2_ARCH_SM90A};
        ck_assert_msg(s2_kernel_spec_resolve(ctx, &s, p) != S2_OK, "d%d resolved", off_grid[i]);
    }
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

static const struct {
    int head_dim;
    s2_dtype dt;
    s2_arch arch;
} builds[] = {
    {16, S2_DTYPE_F16, S2_ARCH_SM90A},  {48, S2_DTYPE_BF16, S2_ARCH_SM90A}, {80, S2_DTYPE_BF16, S2_ARCH_SM90A},
    {80, S2_DTYPE_F16, S2_ARCH_SM80},   {144, S2_DTYPE_F16, S2_ARCH_SM90A}, {192, S2_DTYPE_BF16, S2_ARCH_SM90A},
    {192, S2_DTYPE_F16, S2_ARCH_SM80},  {256, S2_DTYPE_BF16, S2_ARCH_SM90A}, {256, S2_DTYPE_F16, S2_ARCH_SM80},
};
enum { NUM_BUILDS = sizeof builds / sizeof builds[0] };

START_TEST(assembles_without_spills)
{
    int D = builds[_i].head_dim;
    s2_ctx *ctx = s2_ctx_new();
    const s2_pattern *p = NULL;
    s2_pattern_set *set = gqa_pattern(ctx, &p);
    s2_kernel_spec spec = {.kind = S2_KERNEL_DECODE, .dtype = builds[_i].dt, .head_dim = D, .arch = builds[_i].arch};
    s2_artifact *art = NULL;
    s2_status st = s2_compile_attention(ctx, p, &spec, S2_CUBIN_PTXAS, &art);
    ck_assert_msg(st == S2_OK, "d%d: %s", D, s2_ctx_message(ctx));
    ck_assert_int_eq(art->num_kernels, 2);   /* NAME and NAME_combine */
    for (int i = 0; i < art->num_kernels; i++) {
        const s2_kernel_info *k = &art->kernels[i];
        printf("d%-3d %-4s %-6s %s: %d regs, spills %d/%d, stack %d, smem %d\n", D, s2_dtype_name(spec.dtype),
               s2_arch_name(spec.arch), k->name, k->registers, k->spill_stores, k->spill_loads, k->stack_frame,
               art->smem_bytes);
        ck_assert_msg(k->registers > 0 && k->spill_stores == 0 && k->spill_loads == 0 && k->stack_frame == 0,
                      "%s: %d regs, spills %d/%d, stack %d", k->name, k->registers, k->spill_stores, k->spill_loads,
                      k->stack_frame);
    }
    ck_assert_int_eq(art->spec.num_warps, D > 128 ? 2 : 4);
    ck_assert_int_eq(art->kernels[0].max_threads + art->kernels[1].max_threads, 32 * art->spec.num_warps + 128);
    int mma = count(art->ptx, "mma.sync.aligned.m16n8k16.row.col.f32");
    ck_assert_msg(mma == 2 * D / 16 + D / 8, "d%d: %d mma.sync in the PTX, want %d", D, mma, 2 * D / 16 + D / 8);
    ck_assert_ptr_nonnull(strstr(art->ptx, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"));
    ck_assert_ptr_nonnull(strstr(art->ptx, "cp.async.cg.shared.global"));
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

/* fp8 pages (kv_dtype e4m3): resolved with 6 stages (a stage holds half the
 * bytes: the 16-bit ring's shared memory), refused on sm_80, for a forward and for e5m2; the kernels assemble
 * for sm_90a without spills, read pages as bytes and take the warp's K and V
 * fragments straight from the ring (ldmatrix of the bytes, V's transposed:
 * one ldmatrix.x4 per two 16-byte pieces of a row), a lane converting its 4 * D
 * bytes of K and of V with one cvt.rn.f16x2.e4m3x2 per pair (D / 2 in all),
 * the mma count unchanged, and no 16-bit copy of the tiles in shared memory. */
static const struct {
    int head_dim;
    s2_dtype dt;
} builds8[] = {{16, S2_DTYPE_F16}, {64, S2_DTYPE_BF16}, {80, S2_DTYPE_BF16}, {128, S2_DTYPE_BF16},
               {128, S2_DTYPE_F16}, {192, S2_DTYPE_BF16}, {256, S2_DTYPE_BF16}};
enum { NUM_BUILDS8 = sizeof builds8 / sizeof builds8[0] };

START_TEST(fp8_pages_resolve_and_refuse)
{
    s2_ctx *ctx = s2_ctx_new();
    const s2_pattern *p = NULL;
    s2_pattern_set *set = gqa_pattern(ctx, &p);
    for (int d = 16; d <= 256; d += 16) {
        s2_kernel_spec s = {.kind = S2_KERNEL_DECODE, .dtype = S2_DTYPE_BF16, .head_dim = d, .arch = S2_ARCH_SM90A,
                            .kv_dtype = S2_DTYPE_E4M3};
        ck_assert_msg(s2_kernel_spec_resolve(ctx, &s, p) == S2_OK, "d%d: %s", d, s2_ctx_message(ctx));
        ck_assert_int_eq(s.num_stages, 6);
        ck_assert_int_eq(s.num_warps, d > 128 ? 2 : 4);
        ck_assert_int_eq(s.kv_dtype, S2_DTYPE_E4M3);
        s.arch = S2_ARCH_SM80, s.num_stages = 0;
        ck_assert_int_eq(s2_kernel_spec_resolve(ctx, &s, p), S2_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(s2_ctx_message(ctx), "needs sm_90"), "%s", s2_ctx_message(ctx));
    }
    s2_kernel_spec f = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = 128, .arch = S2_ARCH_SM90A,
                        .kv_dtype = S2_DTYPE_E4M3};
    ck_assert_int_eq(s2_kernel_spec_resolve(ctx, &f, p), S2_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(s2_ctx_message(ctx), "kv_dtype e4m3 (decode only"), "%s", s2_ctx_message(ctx));
    s2_kernel_spec e5 = {.kind = S2_KERNEL_DECODE, .dtype = S2_DTYPE_BF16, .head_dim = 128, .arch = S2_ARCH_SM90A,
                         .kv_dtype = S2_DTYPE_E5M2};
    ck_assert_int_eq(s2_kernel_spec_resolve(ctx, &e5, p), S2_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(s2_ctx_message(ctx), "kv_dtype e5m2"), "%s", s2_ctx_message(ctx));
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(fp8_pages_assemble_without_spills)
{
    int D = builds8[_i].head_dim;
    s2_ctx *ctx = s2_ctx_new();
    const s2_pattern *p = NULL;
    s2_pattern_set *set = gqa_pattern(ctx, &p);
    s2_kernel_spec spec = {.kind = S2_KERNEL_DECODE, .dtype = builds8[_i].dt, .head_dim = D, .arch = S2_ARCH_SM90A,
                           .kv_dtype = S2_DTYPE_E4M3};
    s2_artifact *art = NULL;
    s2_status st = s2_compile_attention(ctx, p, &spec, S2_CUBIN_PTXAS, &art);
    ck_assert_msg(st == S2_OK, "d%d: %s", D, s2_ctx_message(ctx));
    ck_assert_int_eq(art->num_kernels, 2);
    for (int i = 0; i < art->num_kernels; i++) {
        const s2_kernel_info *k = &art->kernels[i];
        printf("d%-3d %-4s kv e4m3 %s: %d regs, spills %d/%d, stack %d, smem %d\n", D, s2_dtype_name(spec.dtype),
               k->name, k->registers, k->spill_stores, k->spill_loads, k->stack_frame, art->smem_bytes);
        ck_assert_msg(k->registers > 0 && k->spill_stores == 0 && k->spill_loads == 0 && k->stack_frame == 0,
                      "%s: %d regs, spills %d/%d, stack %d", k->name, k->registers, k->spill_stores, k->spill_loads,
                      k->stack_frame);
    }
    ck_assert_ptr_nonnull(strstr(art->kernels[0].name, "_kve4m3_d"));
    int mma = count(art->ptx, "mma.sync.aligned.m16n8k16.row.col.f32");
    ck_assert_msg(mma == 2 * D / 16 + D / 8, "d%d: %d mma.sync in the PTX, want %d", D, mma, 2 * D / 16 + D / 8);
    int cvt = count(art->ptx, "cvt.rn.f16x2.e4m3x2");
    ck_assert_msg(cvt == D / 2, "d%d: %d e4m3 conversions in the PTX, want %d", D, cvt, D / 2);
    int vt = count(art->ptx, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16");
    ck_assert_msg(vt == (D + 31) / 32, "d%d: %d transposed ldmatrix (V) in the PTX, want %d", D, vt, (D + 31) / 32);
    /* Q's tile (16 x D, 16-bit) and 6 stages of half the 16-bit kernel's bytes: its 3 stages' memory */
    int bn = 16 * art->spec.num_warps;
    ck_assert_int_eq(art->smem_bytes, 16 * D * 2 + 6 * 2 * bn * D);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("decode_dims");
    TCase *tc = tcase_create("dims");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, resolve_every_dim);
    tcase_add_loop_test(tc, assembles_without_spills, 0, NUM_BUILDS);
    tcase_add_test(tc, fp8_pages_resolve_and_refuse);
    tcase_add_loop_test(tc, fp8_pages_assemble_without_spills, 0, NUM_BUILDS8);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
