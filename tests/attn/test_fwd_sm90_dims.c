/* The sm_90a forward (templates/fwd_sm90.c) at every head dim it builds,
 * without a GPU: the table hands each multiple of 16 up to 256 to it and
 * nothing else; the tiles its heuristic gives (FlashAttention-3's shape past
 * d128: 128-row tiles, fewer stages at d256) and the shared memory they take
 * (rows padded to whole 64-column blocks); the wide variant where its tiles
 * fit; kernels that assemble for sm_90a without spills, with the wgmma
 * shapes and the TMA copies the head dim asks for. */
#include "compile_internal.h"
#include "kernel_abi.h"
#include "patterns.h"
#include "s2c/attention.h"
#include "s2c/codegen.h"
#include "s2c/layout.h"
#include "template.h"
#include "check_main.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NUM_DIMS = 16, SMEM_LIMIT = 227 * 1024 };

static const s2_pattern *pattern_of(s2_ctx *ctx, int which, s2_pattern_set **set)
{
    s2_local_stride_args a;
    attn_pattern_args(which, &a);
    ck_assert_msg(s2_pattern_from_args(ctx, &a, set) == S2_OK, "%s", s2_ctx_message(ctx));
    return s2_pattern_set_get(*set, 0);
}

static int padded(int d) { return (d + 63) / 64 * 64; }

/* What the kernel's shared memory holds: Q [bm][dp], K and V stages
 * [bn][dp], 2 * stages + 1 mbarriers, one scratch word per consumer thread. */
static int plain_smem(int bm, int bn, int stages, int d)
{
    int dp = padded(d);
    return bm * dp * 2 + 2 * stages * bn * dp * 2 + 8 * (2 * stages + 1) + 4 * 128 * (bm / 64);
}

/* Every multiple of 16 from 16 to 256 goes to the wgmma template on sm_90a,
 * with 64-row tiles up to d128 and 128-row ones above, 64-key tiles with 3
 * stages up to d192, 32-key tiles with 4 past it; block-16 patterns gather 4
 * blocks per key tile at every dim (2 stages past d192). */
START_TEST(every_dim_resolves_on_the_wgmma_template)
{
    s2_ctx *ctx = s2_ctx_new();
    static const int which[] = {0, 1};   /* block 64; Merge-Q block 16 */
    for (int w = 0; w < 2; w++) {
        s2_pattern_set *set = NULL;
        const s2_pattern *p = pattern_of(ctx, which[w], &set);
        for (int d = 16; d <= 256; d += 16) {
            s2_kspec s = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = d, .arch = S2_ARCH_SM90A};
            ck_assert_msg(s2_fwd_spec_wants_tma(&s), "d%d", d);
            const s2_template *t = s2_template_for(&s);
            ck_assert_ptr_nonnull(t);
            ck_assert_str_eq(t->name, "fwd_wgmma");
            ck_assert_msg(s2_kspec_resolve(ctx, &s, p) == S2_OK, "d%d: %s", d, s2_ctx_message(ctx));
            bool deep = padded(d) > 192, gathered = p->block_size == 16;
            int bm = d > 128 ? 128 : 64, bn = deep && !gathered ? 32 : 64;
            int stages = !deep ? 3 : gathered ? 2 : 4;
            ck_assert_msg(s.block_m == bm && s.block_n == bn && s.num_warps == 4 * (1 + bm / 64) &&
                              s.num_stages == stages && s.persistent == -1,
                          "%s d%d: %d x %d w%d st%d persistent %d", p->name, d, s.block_m, s.block_n, s.num_warps,
                          s.num_stages, s.persistent);
            ck_assert_int_eq(s.kv_gather > 1 ? s.kv_gather : 1, p->block_size == 16 ? 4 : 1);
            int smem = s2_fwd_sm90_smem_bytes(p, &s);
            ck_assert_msg(smem == plain_smem(bm, bn, stages, d), "d%d: %d bytes, want %d", d, smem,
                          plain_smem(bm, bn, stages, d));
            ck_assert_int_le(smem, SMEM_LIMIT);
            /* a third stage of 64-key tiles would not fit past d192 */
            if (deep)
                ck_assert_int_gt(plain_smem(bm, 64, 3, d), SMEM_LIMIT);
            /* the persistent grid: the same tiles, a hand-off slot more, still inside the limit */
            s2_kspec ps = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = d, .arch = S2_ARCH_SM90A,
                           .persistent = 1};
            ck_assert_msg(s2_kspec_resolve(ctx, &ps, p) == S2_OK, "d%d persistent: %s", d, s2_ctx_message(ctx));
            ck_assert_int_eq(ps.persistent, 1);
            ck_assert_int_eq(ps.num_stages, stages);
            int psmem = s2_fwd_sm90_smem_bytes(p, &ps);
            ck_assert_int_gt(psmem, smem);
            ck_assert_int_le(psmem, SMEM_LIMIT);
        }
        s2_pattern_set_free(set);
    }
    s2_ctx_free(ctx);
}
END_TEST

/* Dims the template does not build, other archs and tiles that do not fit. */
START_TEST(what_the_wgmma_template_refuses)
{
    static const int bad[] = {0, 8, 24, 72, 200, 264, 272, 512};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s2_kspec s = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = bad[i], .arch = S2_ARCH_SM90A};
        ck_assert_msg(!s2_fwd_spec_wants_tma(&s), "d%d", bad[i]);
        if (s2_template_for(&s))
            ck_assert_str_ne(s2_template_for(&s)->name, "fwd_wgmma");
    }
    s2_kspec s80 = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = 256, .arch = S2_ARCH_SM80};
    ck_assert(!s2_fwd_spec_wants_tma(&s80));
    s2_kspec bwd = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = 192, .arch = S2_ARCH_SM90A};
    ck_assert(!s2_fwd_spec_wants_tma(&bwd));

    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = NULL;
    const s2_pattern *p = pattern_of(ctx, 0, &set);
    /* d256: 3 stages of 64-key tiles asked, or 128-key tiles, exceed shared memory and say so */
    s2_kspec st3 = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = 256, .arch = S2_ARCH_SM90A,
                    .block_n = 64, .num_stages = 3};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &st3, p), S2_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "shared memory"));
    s2_kspec bn128 = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = 256, .arch = S2_ARCH_SM90A,
                      .block_n = 128};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &bn128, p), S2_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "shared memory"));
    /* d256 on one 64-row consumer warpgroup, when asked: 3 stages fit (one CTA per SM), 4 do not */
    s2_kspec bm64 = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = 256, .arch = S2_ARCH_SM90A,
                     .block_m = 64, .block_n = 64};
    ck_assert_int_eq(s2_kspec_resolve(ctx, &bm64, p), S2_OK);
    ck_assert_int_eq(bm64.num_warps, 8);
    ck_assert_int_eq(bm64.num_stages, 3);
    ck_assert_int_eq(s2_fwd_sm90_smem_bytes(p, &bm64), plain_smem(64, 64, 3, 256));
    bm64.num_stages = 4;
    ck_assert_int_eq(s2_kspec_resolve(ctx, &bm64, p), S2_ERR_UNSUPPORTED);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

/* The wide variant (128 x 128, 2 gathered blocks, 3 stages) for block-64
 * patterns at the dims whose rows are two 64-column blocks (80 to 128), where
 * its 224 KB of tiles fit; none at d64 and below, nor past d128. */
START_TEST(wide_variant_where_it_fits)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = NULL, *set16 = NULL;
    const s2_pattern *p = pattern_of(ctx, 0, &set), *p16 = pattern_of(ctx, 1, &set16);
    const s2_template *t = s2_template_named("fwd_wgmma");
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_nonnull(t->variants);
    for (int d = 16; d <= 256; d += 16) {
        s2_kspec asked = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_F16, .head_dim = d, .arch = S2_ARCH_SM90A};
        s2_kspec resolved = asked;
        ck_assert_int_eq(s2_kspec_resolve(ctx, &resolved, p), S2_OK);
        s2_variant v[S2_TEMPLATE_MAX_VARIANTS];
        int n = t->variants(p, &asked, &resolved, v);
        ck_assert_msg(n == (d <= 128), "d%d: %d variants", d, n);
        if (n) {
            ck_assert_int_eq(v[0].role, S2_ROLE_FWD_WIDE);
            ck_assert_int_gt(v[0].min_keys, 0);
            ck_assert_msg(s2_kspec_resolve(ctx, &v[0].spec, p) == S2_OK, "d%d wide: %s", d, s2_ctx_message(ctx));
            ck_assert_int_eq(v[0].spec.block_m, d <= 64 ? 64 : 128);
            ck_assert_int_eq(v[0].spec.block_n, 128);
            ck_assert_int_le(s2_fwd_sm90_smem_bytes(p, &v[0].spec), SMEM_LIMIT);
        }
        s2_kspec r16 = asked;
        ck_assert_int_eq(s2_kspec_resolve(ctx, &r16, p16), S2_OK);
        ck_assert_int_eq(t->variants(p16, &asked, &r16, v), 0);
        /* a tunable asked: no variant */
        s2_kspec asked_bm = asked;
        asked_bm.block_m = d > 128 ? 128 : 64;
        s2_kspec rbm = asked_bm;
        ck_assert_int_eq(s2_kspec_resolve(ctx, &rbm, p), S2_OK);
        ck_assert_int_eq(t->variants(p, &asked_bm, &rbm, v), 0);
    }
    s2_pattern_set_free(set);
    s2_pattern_set_free(set16);
    s2_ctx_free(ctx);
}
END_TEST

static int count(const char *text, const char *what)
{
    int n = 0;
    for (const char *q = text; (q = strstr(q, what)); q += strlen(what))
        n++;
    return n;
}

/* The byte counts of the PTX's mbarrier.arrive.expect_tx (a register set by
 * the last `mov.b32 REG, N;` above it), at most cap of them; -1 for one
 * whose count is not such a constant. */
static int expect_tx_bytes(const char *ptx, int *out, int cap)
{
    static const char op[] = "mbarrier.arrive.expect_tx.shared::cta.b64 _, [";
    int n = 0;
    for (const char *q = ptx; n < cap && (q = strstr(q, op)); q += sizeof op - 1) {
        const char *r = strstr(q, "], ");
        const char *e = r ? strchr(r, ';') : NULL;
        char reg[32] = "", want[48];
        if (r && e && e - (r + 3) < (long)sizeof reg)
            memcpy(reg, r + 3, (size_t)(e - (r + 3))), reg[e - (r + 3)] = '\0';
        snprintf(want, sizeof want, "mov.b32 \t%s, ", reg);
        const char *last = NULL;
        for (const char *m = ptx; (m = strstr(m, want)) && m < q; m += strlen(want))
            last = m;
        out[n++] = last && reg[0] ? atoi(last + strlen(want)) : -1;
    }
    return n;
}

/* Dim 16 * (_i + 1), block-64 pattern, bf16 (f16 at odd _i): the module
 * assembles for sm_90a without spills; the P·V wgmma is m64n<D rounded up to
 * 64>k16 and the S one m64n64k16 (no other shape); each K and V tile is one
 * TMA box per 64-column block, Q one per block and consumer slab. */
START_TEST(assembles_per_dim)
{
    int d = 16 * (_i + 1), dp = padded(d), nb = dp / 64;
    s2_dtype dt = _i % 2 ? S2_DTYPE_F16 : S2_DTYPE_BF16;
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = NULL;
    const s2_pattern *p = pattern_of(ctx, 0, &set);
    s2_kspec spec = {.kind = S2_KERNEL_FWD, .dtype = dt, .head_dim = d, .arch = S2_ARCH_SM90A};
    s2_artifact *art = NULL;
    ck_assert_msg(s2_compile_kspec1(ctx, p, &spec, S2_CUBIN_PTXAS, &art) == S2_OK, "d%d: %s", d, s2_ctx_message(ctx));
    bool wide = d <= 128;
    ck_assert_int_eq(art->num_kernels, wide ? 5 : 4);   /* with NAME_seqs, NAME_combine, NAME_rows */
    for (int i = 0; i < art->num_kernels; i++) {
        const s2_kernel_info *x = &art->kernels[i];
        printf("d%-3d %-4s %-40s %3d regs, spill %d/%d, stack %d\n", d, s2_dtype_name(dt), x->name, x->registers,
               x->spill_stores, x->spill_loads, x->stack_frame);
        ck_assert_msg(x->registers > 0 && x->spill_stores == 0 && x->spill_loads == 0 && x->stack_frame == 0,
                      "%s: %d regs, spills %d/%d stack %d", x->name, x->registers, x->spill_stores, x->spill_loads,
                      x->stack_frame);
    }
    int bn = art->spec.block_n;
    ck_assert_int_eq(bn, dp > 192 ? 32 : 64);
    ck_assert_int_eq(art->smem_bytes, plain_smem(art->spec.block_m, bn, art->spec.num_stages, d));
    char pv[64];
    snprintf(pv, sizeof pv, "wgmma.mma_async.sync.aligned.m64n%dk16", dp);
    ck_assert_msg(strstr(art->ptx, pv), "d%d: no %s", d, pv);
    char sn[64];
    snprintf(sn, sizeof sn, "wgmma.mma_async.sync.aligned.m64n%dk16", bn);
    int s64 = count(art->ptx, sn);
    int s128 = count(art->ptx, "wgmma.mma_async.sync.aligned.m64n128k16");
    int all = count(art->ptx, "wgmma.mma_async.sync.aligned.m64n");
    int npv = count(art->ptx, pv);
    /* S on bn-key tiles (the wide variant's on 128), P·V on dp columns: nothing else */
    ck_assert_msg(all == (dp <= 128 ? s64 + s128 : s64 + npv), "d%d: %d wgmma, %d n64 %d n128 %d n%d",
                  d, all, s64, s128, dp, npv);
    /* TMA: one box per 64-column block; every barrier expects the bytes of
     * whole blocks (Q: block_m x dp; a stage: K and V, block_n x dp each,
     * zeros past D included), the wide variant's of 128 x 128 tiles */
    int nc = art->spec.block_m / 64, tma = count(art->ptx, "cp.async.bulk.tensor.4d");
    ck_assert_msg(tma >= nb * (nc + 2) && tma % nb == 0, "d%d: %d TMA copies", d, tma);
    int tx[32], ntx = expect_tx_bytes(art->ptx, tx, 32), q_tx = 64 * nc * dp * 2, kv_tx = 2 * bn * dp * 2;
    bool saw_q = false, saw_kv = false;
    ck_assert_int_gt(ntx, 1);
    for (int i = 0; i < ntx; i++) {
        saw_q |= tx[i] == q_tx, saw_kv |= tx[i] == kv_tx;
        ck_assert_msg(tx[i] == q_tx || tx[i] == kv_tx || (wide && (tx[i] == 128 * dp * 2 || tx[i] == 2 * 128 * dp * 2)),
                      "d%d: expect_tx %d bytes (Q %d, stage %d)", d, tx[i], q_tx, kv_tx);
    }
    ck_assert_msg(saw_q && saw_kv, "d%d: no expect_tx of Q (%d) or of a stage (%d)", d, q_tx, kv_tx);
    ck_assert_int_eq(art->spec.num_warps, 4 * (1 + art->spec.block_m / 64));
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

/* The persistent grid at an odd dim, d192 and d256: it assembles; spill-free
 * but at d208 and up, whose 232-register consumers spill a few bytes (the
 * 32-register producer keeps the work loop; 240 would not leave it that). */
START_TEST(persistent_assembles)
{
    static const int dims[] = {80, 192, 256};
    int d = dims[_i];
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = NULL;
    const s2_pattern *p = pattern_of(ctx, 0, &set);
    s2_kspec spec = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = d, .arch = S2_ARCH_SM90A,
                     .persistent = 1};
    s2_artifact *art = NULL;
    ck_assert_msg(s2_compile_kspec1(ctx, p, &spec, S2_CUBIN_PTXAS, &art) == S2_OK, "d%d: %s", d, s2_ctx_message(ctx));
    ck_assert_int_eq(art->num_kernels, 4);
    s2_kspec aks;   /* the resolved spec, the template's options included */
    ck_assert_int_eq(s2_artifact_kspec(ctx, art, &aks), S2_OK);
    ck_assert_int_eq(aks.persistent, 1);
    const s2_kernel_info *x = &art->kernels[0];
    printf("d%-3d persistent %-40s %3d regs, spill %d/%d, stack %d\n", d, x->name, x->registers, x->spill_stores,
           x->spill_loads, x->stack_frame);
    int allowed = d > 192 ? 8 : 0;
    ck_assert_msg(x->registers > 0 && x->spill_stores <= allowed && x->spill_loads <= 2 * allowed,
                  "%s: %d regs, spills %d/%d", x->name, x->registers, x->spill_stores, x->spill_loads);
    ck_assert_ptr_nonnull(strstr(art->ptx, "atom.global.add.u32"));
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fwd_sm90_dims");
    TCase *tc = tcase_create("dims");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, every_dim_resolves_on_the_wgmma_template);
    tcase_add_test(tc, what_the_wgmma_template_refuses);
    tcase_add_test(tc, wide_variant_where_it_fits);
    tcase_add_loop_test(tc, assembles_per_dim, 0, NUM_DIMS);
    tcase_add_loop_test(tc, persistent_assembles, 0, 3);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
