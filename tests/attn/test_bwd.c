/* The backward module without a GPU: block-16 (Merge-Q) and block-64
 * patterns x d64/d128 x bf16/f16 x sm_80/sm_90a/sm_90a-wgmma assemble with zero spills,
 * hold the three kernels, and the manifest records kind bwd.  The wgmma
 * variants alternate the dK/dV kernel's copies: TMA (spec.bwd_tma, the
 * default) for bf16, cp.async (-1) for f16. */
#include "compile_internal.h"
#include "patterns.h"
#include "kernel_abi.h"
#include "template.h"
#include "s2c/attention.h"
#include "s2c/codegen.h"
#include "check_main.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

static const int pats[] = {0, 1, 2, 3};   /* causal b64, Merge-Q b16, bidirectional b64, GQA 32/8 b32 */
static const s2_arch archs[] = {S2_ARCH_SM80, S2_ARCH_SM90A, S2_ARCH_SM90A};
static const int wgmma[] = {0, -1, 1};   /* spec.bwd_wgmma */
static const int dims[] = {64, 128};
static const s2_dtype dtypes[] = {S2_DTYPE_BF16, S2_DTYPE_F16};
enum { NUM_PATS = 4, NUM_VARIANTS = NUM_PATS * 2 * 2 * 3 };

static const s2_kernel_info *find_kernel(const s2_artifact *art, const char *suffix)
{
    size_t n = strlen(suffix);
    for (int i = 0; i < art->num_kernels; i++) {
        size_t l = strlen(art->kernels[i].name);
        if (l > n && !strcmp(art->kernels[i].name + l - n, suffix))
            return &art->kernels[i];
    }
    return NULL;
}

START_TEST(bwd_assembles_without_spills)
{
    int v = _i;
    int which = pats[v % NUM_PATS];
    int D = dims[(v / NUM_PATS) % 2];
    s2_dtype dt = dtypes[(v / NUM_PATS / 2) % 2];
    s2_arch arch = archs[v / NUM_PATS / 4];
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args a;
    attn_pattern_args(which, &a);
    s2_pattern_set *set = NULL;
    ck_assert_msg(s2_pattern_from_args(ctx, &a, &set) == S2_OK, "%s", s2_ctx_message(ctx));
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    bool wg = wgmma[v / NUM_PATS / 4] > 0;
    bool tma = wg && dt == S2_DTYPE_BF16;
    s2_kspec spec = {.kind = S2_KERNEL_BWD, .dtype = dt, .head_dim = D, .arch = arch,
                           .bwd_wgmma = wgmma[v / NUM_PATS / 4], .bwd_tma = wg && !tma ? -1 : 0};
    s2_artifact *art = NULL;
    ck_assert_msg(s2_compile_kspec1(ctx, p, &spec, S2_CUBIN_PTXAS, &art) == S2_OK, "%s d%d %s %s: %s", p->name, D,
                  s2_dtype_name(dt), s2_arch_name(arch), s2_ctx_message(ctx));
    s2_kspec aks;   /* the resolved spec, the template's choices included */
    ck_assert_int_eq(s2_artifact_kspec(ctx, art, &aks), S2_OK);
    /* NAME_dqds and NAME_dqds2 exactly where s2_bwd_ds_capable says; NAME_rows always */
    int nk = s2_bwd_ds_capable(p, &aks) ? 5 : 3;
    ck_assert_int_eq(art->num_kernels, nk + 1);
    static const char *const parts[] = {"_pre", "_dq", "_dkdv", "_dqds", "_dqds2"};
    for (int i = 0; i <= nk; i++) {
        const s2_kernel_info *ki = find_kernel(art, i < nk ? parts[i] : "_rows");
        ck_assert_msg(ki != NULL, "no kernel *%s in %s", i < nk ? parts[i] : "_rows", art->name);
        printf("%-14s d%-3d %-4s %-6s%s bm%d bn%d %-5s: %3d regs, spill %d/%d, stack %d, smem %d\n", p->name, D,
               s2_dtype_name(dt), s2_arch_name(arch), wg ? "-wg" : "", art->spec.block_m, art->spec.block_n,
               i < nk ? parts[i] + 1 : "rows",
               ki->registers, ki->spill_stores, ki->spill_loads, ki->stack_frame, art->smem_bytes);
        ck_assert_msg(ki->registers > 0, "no resource line for %s:\n%s", ki->name, art->log);
        ck_assert_msg(ki->spill_stores == 0 && ki->spill_loads == 0 && ki->stack_frame == 0,
                      "%s spills: %d/%d stack %d", ki->name, ki->spill_stores, ki->spill_loads, ki->stack_frame);
    }
    ck_assert_msg(strncmp(art->name, "s2_bwd_", 7) == 0, "name %s", art->name);
    ck_assert_int_eq(aks.bwd_wgmma, wg ? 1 : arch == S2_ARCH_SM90A ? -1 : 0);
    ck_assert_int_eq(aks.bwd_tma, tma ? 1 : wg ? -1 : 0);
    /* the dK/dV kernel's Q and dO: TMA boxes into an mbarrier-armed stage, or cp.async */
    ck_assert(!strstr(art->ptx, "cp.async.bulk.tensor.4d") == !tma);
    ck_assert(!strstr(art->ptx, "mbarrier.try_wait.parity") == !tma);
    ck_assert(!strstr(art->ptx, ".param .align 64 .b8") == !tma);
    if (wg) {
        ck_assert_ptr_nonnull(strstr(art->ptx, "wgmma.mma_async.sync.aligned.m64n"));
        ck_assert_ptr_nonnull(strstr(art->ptx, "fence.proxy.async.shared::cta"));
        ck_assert_ptr_null(strstr(art->ptx, "mma.sync.aligned"));
        /* ptxas serialises a wgmma batch whose registers are touched in flight (C7513/C7517/C7519) */
        ck_assert_msg(!art->log || !strstr(art->log, "wgmma"), "%s: %s", art->name, art->log);
    } else {
        ck_assert_ptr_nonnull(strstr(art->ptx, "mma.sync.aligned.m16n8k16.row.col.f32"));
        ck_assert_ptr_nonnull(strstr(art->ptx, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"));
        ck_assert_ptr_null(strstr(art->ptx, "wgmma."));
    }
    ck_assert_ptr_nonnull(strstr(art->ptx, "cp.async.ca.shared.global"));
    /* deterministic by construction: no atomics or reductions to global memory */
    ck_assert_ptr_null(strstr(art->ptx, "\tatom."));
    ck_assert_ptr_null(strstr(art->ptx, "\tred."));

    const char *text = NULL;
    size_t len = 0;
    ck_assert_msg(s2_cubin_find_manifest(ctx, art->cubin, art->cubin_size, &text, &len) == S2_OK, "%s",
                  s2_ctx_message(ctx));
    s2_manifest *m = NULL;
    ck_assert_msg(s2_manifest_parse(ctx, text, len, &m) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_int_eq(s2_manifest_num_kernels(m), 1);
    const s2_manifest_kernel *mk = s2_manifest_kernel_at(m, 0);
    ck_assert_int_eq(mk->spec.kind, S2_KERNEL_BWD);
    ck_assert_str_eq(mk->name, art->name);
    ck_assert_int_eq(mk->spec.block_m, art->spec.block_m);
    ck_assert_int_eq(mk->spec.block_n, art->spec.block_n);
    const s2_kernel_record *dkr = s2_manifest_kernel_fn(mk, S2_ROLE_BWD_DKDV);
    ck_assert_int_eq(dkr->spec.kv_gather, aks.kv_gather);
    ck_assert_int_eq(dkr->spec.bwd_tma, aks.bwd_tma);   /* the resolved choice, from the records */
    ck_assert_int_eq(dkr->abi == S2_ABI_BWD_TMA, tma);
    ck_assert_int_eq(aks.kv_gather, wg && p->block_size == 16 ? 4 : 0);
    ck_assert_int_eq(mk->smem_bytes, art->smem_bytes);
    ck_assert_int_eq(mk->threads, art->threads_per_block);
    s2_manifest_free(m);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

/* Head dims past d64/d128: the tail k-step (d % 32 == 16), chunks past the
 * swizzled groups (d % 64), the dK/dV kernel's column passes (d > 128), on
 * both bodies: the three kernels, zero spills. */
typedef struct hd_variant {
    int pattern, head_dim;
    s2_arch arch;
    int wgmma;
} hd_variant;

static const hd_variant hd_variants[] = {
    {1, 16, S2_ARCH_SM80, 0},   {0, 80, S2_ARCH_SM80, 0},    {3, 96, S2_ARCH_SM90A, 0},
    {2, 192, S2_ARCH_SM80, 0},  {1, 192, S2_ARCH_SM90A, 1},  {3, 256, S2_ARCH_SM80, 0},
    {1, 256, S2_ARCH_SM90A, -1}, {0, 256, S2_ARCH_SM90A, 1},
};

START_TEST(bwd_head_dims_assemble)
{
    const hd_variant *hv = &hd_variants[_i];
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args a;
    attn_pattern_args(hv->pattern, &a);
    s2_pattern_set *set = NULL;
    ck_assert_int_eq(s2_pattern_from_args(ctx, &a, &set), S2_OK);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_kspec spec = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = hv->head_dim, .arch = hv->arch,
                     .bwd_wgmma = hv->wgmma};
    s2_artifact *art = NULL;
    ck_assert_msg(s2_compile_kspec1(ctx, p, &spec, S2_CUBIN_PTXAS, &art) == S2_OK, "%s d%d %s: %s", p->name,
                  hv->head_dim, s2_arch_name(hv->arch), s2_ctx_message(ctx));
    s2_kspec aks;
    ck_assert_int_eq(s2_artifact_kspec(ctx, art, &aks), S2_OK);
    ck_assert_int_eq(aks.bwd_wgmma, hv->wgmma > 0 ? 1 : hv->arch == S2_ARCH_SM90A && hv->head_dim % 64 == 0 ? -1 : 0);
    ck_assert_int_eq(art->num_kernels, 4);   /* NAME_pre, NAME_dkdv, NAME_dq, NAME_rows */
    for (int i = 0; i < art->num_kernels; i++)
        ck_assert_msg(art->kernels[i].spill_stores == 0 && art->kernels[i].spill_loads == 0, "%s: %d/%d bytes spilled",
                      art->kernels[i].name, art->kernels[i].spill_stores, art->kernels[i].spill_loads);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(bwd_spec_limits)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args a;
    attn_pattern_args(1, &a);
    s2_pattern_set *set = NULL;
    ck_assert_int_eq(s2_pattern_from_args(ctx, &a, &set), S2_OK);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_kspec s = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 128, .arch = S2_ARCH_SM80};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &s, p), S2_OK);
    ck_assert_int_eq(s.block_m, 64);
    ck_assert_int_eq(s.block_n, 16);
    /* every multiple of 16 to 256; the wgmma bodies take whole 64-column
     * blocks (the rest falls back to mma.sync on sm_90a) */
    for (int d = 16; d <= 272; d += 8) {
        s2_kspec hd = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_F16, .head_dim = d, .arch = S2_ARCH_SM90A};
        bool ok = d % 16 == 0 && d <= 256;
        ck_assert_msg(s2_kspec_resolve(ctx, &hd, p) == (ok ? S2_OK : S2_ERR_UNSUPPORTED), "d%d", d);
        if (ok)
            ck_assert_msg(hd.bwd_wgmma == (d % 64 == 0 ? 1 : 0), "d%d: bwd_wgmma %d", d, hd.bwd_wgmma);
        hd = (s2_kspec){.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_F16, .head_dim = d, .arch = S2_ARCH_SM90A,
                        .bwd_wgmma = 1};
        ck_assert_msg(s2_kspec_resolve(ctx, &hd, p) == (ok && d % 64 == 0 ? S2_OK : S2_ERR_UNSUPPORTED), "d%d", d);
    }
    /* d256: 16-key dQ tiles (block 16) and, on sm_80, one stage (shared memory) */
    s2_kspec d256 = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 256, .arch = S2_ARCH_SM80};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &d256, p), S2_OK);
    ck_assert_int_eq(d256.block_n, 16);
    ck_assert_int_eq(d256.num_stages, 1);
    ck_assert_int_le(s2_bwd_smem_bytes(p, &d256), s2_template_smem_limit(S2_ARCH_SM80));
    d256.num_stages = 2;
    ck_assert_int_gt(s2_bwd_smem_bytes(p, &d256), s2_template_smem_limit(S2_ARCH_SM80));
    d256 = (s2_kspec){.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 256, .arch = S2_ARCH_SM90A};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &d256, p), S2_OK);
    ck_assert_int_eq(d256.bwd_wgmma, 1);
    ck_assert_int_eq(d256.block_n, 16);   /* not gathered: 64 keys spill dQ's registers */
    ck_assert_int_eq(d256.kv_gather, 0);
    ck_assert_int_eq(d256.num_stages, 2);
    s2_kspec d96 = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 96, .arch = S2_ARCH_SM80};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &d96, p), S2_OK);
    ck_assert_int_eq(d96.num_stages, 2);
    s2_kspec big = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 128, .block_m = 128,
                          .num_stages = 4, .arch = S2_ARCH_SM80};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &big, p), S2_ERR_UNSUPPORTED);
    /* the wgmma bodies: sm_90a default for d64/d128 with 4 warps, refused elsewhere */
    s2_kspec h = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 128, .arch = S2_ARCH_SM90A};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &h, p), S2_OK);
    ck_assert_int_eq(h.bwd_wgmma, 1);
    ck_assert_int_eq(h.bwd_tma, 1);     /* the dK/dV kernel's copies by TMA */
    ck_assert_int_eq(h.block_n, 64);    /* block 16: 4 gathered blocks */
    s2_kspec ht = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 128, .arch = S2_ARCH_SM90A,
                         .bwd_tma = -1};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &ht, p), S2_OK);
    ck_assert_int_eq(ht.bwd_tma, -1);
    ht = (s2_kspec){.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 128, .arch = S2_ARCH_SM90A,
                          .bwd_tma = 1, .bwd_wgmma = -1};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &ht, p), S2_ERR_UNSUPPORTED);
    ht = (s2_kspec){.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 128, .arch = S2_ARCH_SM80,
                          .bwd_tma = 1};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &ht, p), S2_ERR_UNSUPPORTED);
    ck_assert_int_eq(h.kv_gather, 4);
    s2_kspec h1 = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 128, .arch = S2_ARCH_SM90A,
                         .kv_gather = 1};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &h1, p), S2_OK);
    ck_assert_int_eq(h1.block_n, 32);
    ck_assert_int_eq(h1.kv_gather, 0);
    s2_kspec hg = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 128, .arch = S2_ARCH_SM90A,
                         .kv_gather = 4, .block_n = 32};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &hg, p), S2_ERR_UNSUPPORTED);
    hg = (s2_kspec){.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 128, .arch = S2_ARCH_SM90A,
                          .kv_gather = 2};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &hg, p), S2_ERR_UNSUPPORTED);
    hg = (s2_kspec){.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 128, .arch = S2_ARCH_SM90A,
                          .kv_gather = 4, .bwd_wgmma = -1};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &hg, p), S2_ERR_UNSUPPORTED);
    hg = (s2_kspec){.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 128, .arch = S2_ARCH_SM80,
                          .kv_gather = 4};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &hg, p), S2_ERR_UNSUPPORTED);
    s2_kspec h8 = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 64, .num_warps = 8,
                         .arch = S2_ARCH_SM90A};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &h8, p), S2_OK);
    ck_assert_int_eq(h8.bwd_wgmma, -1);
    ck_assert_int_eq(h8.bwd_tma, 0);
    h8 = (s2_kspec){.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 64, .num_warps = 8,
                          .arch = S2_ARCH_SM90A, .bwd_wgmma = 1};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &h8, p), S2_ERR_UNSUPPORTED);
    s2_kspec h32 = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 32, .arch = S2_ARCH_SM90A};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &h32, p), S2_OK);
    ck_assert_int_eq(h32.bwd_wgmma, 0);
    s2_kspec a80 = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 64, .arch = S2_ARCH_SM80,
                          .bwd_wgmma = 1};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &a80, p), S2_ERR_UNSUPPORTED);
    s2_kspec bad = {.kind = (s2_kernel_kind)7, .dtype = S2_DTYPE_BF16, .head_dim = 64};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &bad, p), S2_ERR_UNSUPPORTED);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("attn_bwd");
    TCase *tc = tcase_create("bwd");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, bwd_assembles_without_spills, 0, NUM_VARIANTS);
    tcase_add_loop_test(tc, bwd_head_dims_assemble, 0, (int)(sizeof hd_variants / sizeof hd_variants[0]));
    tcase_add_test(tc, bwd_spec_limits);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
