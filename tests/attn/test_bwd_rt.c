/* s2_attn_backward without a GPU: a real backward cubin on the fake libcuda
 * of tests/runtime.  A good call launches NAME_pre, NAME_dkdv, NAME_dq in
 * that order (grid of the last = query tiles, the module's shared memory)
 * and caches both schedules; each bad argument gets its status and launches
 * nothing; forward and backward kernels refuse each other's entry point.
 * Usage: test_bwd_rt FAKE_LIB */
#include "attn_tune.h"
#include "compile_internal.h"
#include "patterns.h"
#include "../runtime/fake_cuda.h"
#include "fake_driver.h"
#include "kernel_abi.h"
#include "template.h"
#include "s2c/compile.h"
#include "s2c/attn_runtime.h"
#include "s2c/codegen.h"
#include "check_main.h"

#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *fake_path;
static fake_cuda_set_fn fake_set;
static fake_cuda_get_fn fake_get;
static s2_artifact *art, *art_ds;
static s2_pattern_set *set, *set_ds;

enum { B = 2, SQ = 256, SK = 320, H = 32, HK = 8, D = 64 };

typedef struct fixture {
    s2_ctx *ctx;
    s2_device *dev;
    s2_attn_module *mod;
    s2_attn_kernel *k;
    s2_devptr t[8], lse, dlse, ws;
    s2_attn_bwd_args a;
} fixture;

static void fixture_init(fixture *f)
{
    memset(f, 0, sizeof *f);
    s2t_fake_open(fake_path, &fake_set, &fake_get);
    f->ctx = s2_ctx_new();
    ck_assert_msg(s2_device_open(f->ctx, 0, &f->dev) == S2_OK, "%s", s2_ctx_message(f->ctx));
    ck_assert_msg(s2_attn_module_load(f->ctx, f->dev, art->cubin, art->cubin_size, &f->mod) == S2_OK, "%s",
                  s2_ctx_message(f->ctx));
    f->k = s2_attn_module_kernel_at(f->mod, 0);
    ck_assert_int_eq(s2_attn_kernel_desc(f->k)->spec.kind, S2_KERNEL_BWD);
    for (int i = 0; i < 8; i++) {
        bool kv = i == 1 || i == 2 || i == 6 || i == 7;
        ck_assert_int_eq(s2_mem_alloc(f->ctx, f->dev, (size_t)B * (kv ? SK * HK : SQ * H) * D * 2, &f->t[i]), S2_OK);
    }
    ck_assert_int_eq(s2_mem_alloc(f->ctx, f->dev, (size_t)B * H * SQ * 4, &f->lse), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(f->ctx, f->dev, (size_t)B * H * SQ * 4, &f->dlse), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(f->ctx, f->dev, s2_attn_bwd_workspace_bytes(B, H, SQ), &f->ws), S2_OK);
    f->a = (s2_attn_bwd_args){.batch = B, .q_len = SQ, .kv_len = SK, .heads = H, .kv_heads = HK, .head_dim = D,
                              .dtype = S2_DTYPE_BF16, .q = f->t[0], .k = f->t[1], .v = f->t[2], .o = f->t[3],
                              .d_o = f->t[4], .dq = f->t[5], .dk = f->t[6], .dv = f->t[7], .lse = f->lse,
                              .d_lse = f->dlse, .workspace = f->ws};
    s2_attn_bwd_args_bshd(&f->a);
}

static void fixture_free(fixture *f)
{
    for (int i = 0; i < 8; i++)
        s2_mem_free(f->ctx, f->dev, f->t[i]);
    s2_mem_free(f->ctx, f->dev, f->lse);
    s2_mem_free(f->ctx, f->dev, f->dlse);
    s2_mem_free(f->ctx, f->dev, f->ws);
    s2_attn_module_free(f->mod);
    ck_assert_int_eq(fake_get("allocs_live"), 0);
    s2_device_free(f->dev);
    s2_ctx_free(f->ctx);
}

START_TEST(backward_launches_three_kernels)
{
    fixture f;
    fixture_init(&f);
    long long before = fake_get("launches");
    ck_assert_msg(s2_attn_backward(f.ctx, f.k, NULL, &f.a) == S2_OK, "%s", s2_ctx_message(f.ctx));
    ck_assert_int_eq(fake_get("launches") - before, 3);
    /* the last launch is NAME_dq: one CTA per query tile of 64 rows */
    ck_assert_int_eq(fake_get("last_grid_x"), (SQ + 63) / 64);
    ck_assert_int_eq(fake_get("last_block_x"), art->threads_per_block);
    ck_assert_int_eq(fake_get("last_smem"), art->smem_bytes);
    /* d_lse is optional; the second call hits the schedule cache */
    f.a.d_lse = 0;
    ck_assert_msg(s2_attn_backward(f.ctx, f.k, NULL, &f.a) == S2_OK, "%s", s2_ctx_message(f.ctx));
    s2_attn_sched_stats ss;
    s2_attn_kernel_sched_stats(f.k, &ss);
    ck_assert_int_eq(ss.misses, 1);
    ck_assert_int_eq(ss.hits, 1);
    /* a backward kernel is not a forward one */
    s2_attn_fwd_args fa = {.batch = B, .q_len = SQ, .kv_len = SK, .heads = H, .kv_heads = HK, .head_dim = D,
                           .dtype = S2_DTYPE_BF16, .q = f.t[0], .k = f.t[1], .v = f.t[2], .o = f.t[3]};
    s2_attn_fwd_args_bshd(&fa);
    ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, NULL, &fa), S2_ERR_INVALID);
    ck_assert_int_eq(fake_get("launches") - before, 6);
    fixture_free(&f);
}
END_TEST

/* A module with the dS path (block 64, GQA 4/2: dense_b64): the workspace
 * decides between the dS path over all heads (pre, dkdv, dqds), over chunks
 * of kv heads (pre, then dkdv and dqds per chunk) and the recomputing dq. */
START_TEST(ds_path_in_head_chunks)
{
    enum { CB = 2, CS = 512, CH = 4, CHK = 2, CD = 64 };
    fixture f;
    fixture_init(&f);
    s2_attn_module *mod = NULL;
    ck_assert_msg(s2_attn_module_load(f.ctx, f.dev, art_ds->cubin, art_ds->cubin_size, &mod) == S2_OK, "%s",
                  s2_ctx_message(f.ctx));
    s2_attn_kernel *k = s2_attn_module_kernel_at(mod, 0);
    size_t full = 0, half = 0, plain = s2_attn_bwd_workspace_bytes(CB, CH, CS), none = 0;
    bool on = false;
    ck_assert_msg(s2_attn_backward_workspace(f.ctx, k, CB, CS, CS, &full, &on) == S2_OK, "%s", s2_ctx_message(f.ctx));
    ck_assert(on);
    ck_assert_msg(s2_attn_backward_workspace_chunked(f.ctx, k, CB, CS, CS, 2, &half) == S2_OK, "%s",
                  s2_ctx_message(f.ctx));
    ck_assert_msg(half > plain && half < full, "plain %zu, 2 chunks %zu, full %zu", plain, half, full);
    ck_assert_int_eq(s2_attn_backward_workspace_chunked(f.ctx, k, CB, CS, CS, 1, &none), S2_OK);
    ck_assert_uint_eq(none, full);
    ck_assert_int_eq(s2_attn_backward_workspace_chunked(f.ctx, k, CB, CS, CS, 3, &none), S2_ERR_INVALID);
    ck_assert_uint_eq(none, 0);
    /* chunks 0, the default workspace (at most twice q's bytes + 64 MB): the whole dS path at 512 tokens; at
     * 8K the dS tiles (a dense causal pattern: 540 MB, 270 MB in two chunks) pass the 81 MB bound, so plain */
    size_t dflt = 0;
    ck_assert_msg(s2_attn_backward_workspace_chunked(f.ctx, k, CB, CS, CS, 0, &dflt) == S2_OK, "%s",
                  s2_ctx_message(f.ctx));
    ck_assert_uint_eq(dflt, full);
    ck_assert_msg(s2_attn_backward_workspace_chunked(f.ctx, k, CB, 8192, 8192, 0, &dflt) == S2_OK, "%s",
                  s2_ctx_message(f.ctx));
    ck_assert_uint_eq(dflt, s2_attn_bwd_workspace_bytes(CB, CH, 8192));
    size_t full8k = 0;
    ck_assert_int_eq(s2_attn_backward_workspace(f.ctx, k, CB, 8192, 8192, &full8k, &on), S2_OK);
    ck_assert_msg(on && full8k > (size_t)2 * CB * 8192 * CH * CD * 2 + (64u << 20), "full dS at 8K: %zu", full8k);
    s2_devptr t[8], lse = 0, ws = 0;
    for (int i = 0; i < 8; i++) {
        bool kv = i == 1 || i == 2 || i == 6 || i == 7;
        ck_assert_int_eq(s2_mem_alloc(f.ctx, f.dev, (size_t)CB * CS * (kv ? CHK : CH) * CD * 2, &t[i]), S2_OK);
    }
    ck_assert_int_eq(s2_mem_alloc(f.ctx, f.dev, (size_t)CB * CH * CS * 4, &lse), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(f.ctx, f.dev, full, &ws), S2_OK);
    s2_attn_bwd_args a = {.batch = CB, .q_len = CS, .kv_len = CS, .heads = CH, .kv_heads = CHK, .head_dim = CD,
                          .dtype = S2_DTYPE_BF16, .q = t[0], .k = t[1], .v = t[2], .o = t[3], .d_o = t[4],
                          .dq = t[5], .dk = t[6], .dv = t[7], .lse = lse, .workspace = ws};
    s2_attn_bwd_args_bshd(&a);
    s2_attn_bwd_options o = {0, 0};
    s2_kspec aks;   /* the module's resolved spec, the template's choices included */
    ck_assert_int_eq(s2_artifact_kspec(f.ctx, art_ds, &aks), S2_OK);
    /* full: one dS launch; two chunks asked for; half the workspace left to
     * the runtime (chunks of 16 CTAs would leave the GPU empty: recompute);
     * the plain workspace */
    size_t sizes[4] = {full, half, half, plain};
    int chunks[4] = {0, 2, 0, 0}, launches[4] = {3, 1 + 2 * 2, 3, 3}, grid_y[4] = {CH, CH / 2, CH, CH};
    bool dqds[4] = {true, true, false, false};
    for (int i = 0; i < 4; i++) {
        a.workspace_bytes = sizes[i];
        o.ds_chunks = chunks[i];
        long long before = fake_get("launches");
        ck_assert_msg(s2_attn_backward_opts(f.ctx, k, NULL, &a, &o) == S2_OK, "%s", s2_ctx_message(f.ctx));
        ck_assert_int_eq(fake_get("launches") - before, launches[i]);
        /* the last launch: the dQ kernel (of the last chunk: the query heads of
         * one kv head); on the dS path NAME_dqds2, two query tiles per CTA */
        ck_assert_int_eq(fake_get("last_grid_y"), grid_y[i]);
        ck_assert_int_eq(fake_get("last_smem"), dqds[i] ? s2_bwd_dqds2_smem_bytes(&aks) : art_ds->smem_bytes);
        ck_assert_int_eq(fake_get("last_block_x"), dqds[i] ? S2_BWD_DQDS2_THREADS : art_ds->threads_per_block);
        ck_assert_int_eq(fake_get("last_grid_x"), dqds[i] ? (CS / 64 + 1) / 2 : CS / 64);
        s2_attn_sched_stats ss;
        s2_attn_kernel_sched_stats(k, &ss);
        ck_assert_int_eq(ss.ds_chunked, i >= 1 ? 1 : 0);
        ck_assert_int_eq(ss.dq_paired, i >= 1 ? 2 : 1);
    }
    /* dq_pair -1: NAME_dqds, one query tile per CTA */
    a.workspace_bytes = full, o.ds_chunks = 0, o.dq_pair = -1;
    {
        long long before = fake_get("launches");
        ck_assert_msg(s2_attn_backward_opts(f.ctx, k, NULL, &a, &o) == S2_OK, "%s", s2_ctx_message(f.ctx));
        ck_assert_int_eq(fake_get("launches") - before, 3);
        ck_assert_int_eq(fake_get("last_smem"), s2_bwd_dqds_smem_bytes(&aks));
        ck_assert_int_eq(fake_get("last_block_x"), art_ds->threads_per_block);
        ck_assert_int_eq(fake_get("last_grid_x"), CS / 64);
        s2_attn_sched_stats ss;
        s2_attn_kernel_sched_stats(k, &ss);
        ck_assert_int_eq(ss.dq_paired, 2);
    }
    o.dq_pair = 0;
    /* two chunks in less than their workspace; chunks that do not divide the
     * kv heads; a dq_pair that means nothing: refused, nothing launched */
    long long before = fake_get("launches");
    a.workspace_bytes = half - 16, o.ds_chunks = 2;
    ck_assert_int_eq(s2_attn_backward_opts(f.ctx, k, NULL, &a, &o), S2_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(f.ctx), "s2_attn_backward_workspace_chunked"));
    a.workspace_bytes = full, o.ds_chunks = 3;
    ck_assert_int_eq(s2_attn_backward_opts(f.ctx, k, NULL, &a, &o), S2_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(f.ctx), "does not divide"));
    o.ds_chunks = 0, o.dq_pair = 5;
    ck_assert_int_eq(s2_attn_backward_opts(f.ctx, k, NULL, &a, &o), S2_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(f.ctx), "dq_pair 5"));
    /* outputs sharing memory: dk and dv one buffer; the workspace on dq */
    o.dq_pair = 0;
    s2_attn_bwd_args same = a;
    same.dv = same.dk;
    ck_assert_int_eq(s2_attn_backward_opts(f.ctx, k, NULL, &same, &o), S2_ERR_INVALID);
    ck_assert_msg(strstr(s2_ctx_message(f.ctx), "dk and dv are the same buffer"), "%s", s2_ctx_message(f.ctx));
    same = a;
    same.workspace = a.dq;
    same.workspace_bytes = 0;
    ck_assert_int_eq(s2_attn_backward_opts(f.ctx, k, NULL, &same, &o), S2_ERR_INVALID);
    ck_assert_msg(strstr(s2_ctx_message(f.ctx), "the workspace overlaps dq"), "%s", s2_ctx_message(f.ctx));
    ck_assert_int_eq(fake_get("launches"), before);
    for (int i = 0; i < 8; i++)
        s2_mem_free(f.ctx, f.dev, t[i]);
    s2_mem_free(f.ctx, f.dev, lse);
    s2_mem_free(f.ctx, f.dev, ws);
    s2_attn_module_free(mod);
    /* on a GPU of one SM the same two chunks fill it: the runtime takes them */
    s2_device *small = NULL;
    fake_set("sm_count", 1);
    ck_assert_int_eq(s2_device_open(f.ctx, 0, &small), S2_OK);
    fake_set("sm_count", 132);
    ck_assert_int_eq(s2_attn_module_load(f.ctx, small, art_ds->cubin, art_ds->cubin_size, &mod), S2_OK);
    k = s2_attn_module_kernel_at(mod, 0);
    s2_devptr ts[8], lse1 = 0, ws1 = 0;
    for (int i = 0; i < 8; i++) {
        bool kv = i == 1 || i == 2 || i == 6 || i == 7;
        ck_assert_int_eq(s2_mem_alloc(f.ctx, small, (size_t)CB * CS * (kv ? CHK : CH) * CD * 2, &ts[i]), S2_OK);
    }
    ck_assert_int_eq(s2_mem_alloc(f.ctx, small, (size_t)CB * CH * CS * 4, &lse1), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(f.ctx, small, half, &ws1), S2_OK);
    s2_attn_bwd_args a1 = {.batch = CB, .q_len = CS, .kv_len = CS, .heads = CH, .kv_heads = CHK, .head_dim = CD,
                           .dtype = S2_DTYPE_BF16, .q = ts[0], .k = ts[1], .v = ts[2], .o = ts[3], .d_o = ts[4],
                           .dq = ts[5], .dk = ts[6], .dv = ts[7], .lse = lse1, .workspace = ws1,
                           .workspace_bytes = half};
    s2_attn_bwd_args_bshd(&a1);
    long long before1 = fake_get("launches");
    ck_assert_msg(s2_attn_backward(f.ctx, k, NULL, &a1) == S2_OK, "%s", s2_ctx_message(f.ctx));
    ck_assert_int_eq(fake_get("launches") - before1, 1 + 2 * 2);
    ck_assert_int_eq(fake_get("last_grid_y"), CH / 2);
    for (int i = 0; i < 8; i++)
        s2_mem_free(f.ctx, small, ts[i]);
    s2_mem_free(f.ctx, small, lse1);
    s2_mem_free(f.ctx, small, ws1);
    s2_attn_module_free(mod);
    s2_device_free(small);
    fixture_free(&f);
}
END_TEST

/* A workspace whose allocation is too small, with dk allocated right after
 * it (as a real allocator may place them): extents are checked before
 * overlaps, so the call is refused as too small, not as overlapping dk,
 * whether its size is implied (workspace_bytes 0) or claimed; nothing is
 * launched.  The same pair with room enough launches. */
START_TEST(undersized_workspace_is_too_small)
{
    fixture f;
    fixture_init(&f);
    size_t need = s2_attn_bwd_workspace_bytes(B, H, SQ), small = (need / 2 + 255) & ~(size_t)255;
    size_t dk_bytes = (size_t)B * SK * HK * D * 2;
    s2_devptr pair = 0;
    fake_set("next_alloc_split", (long long)small);
    ck_assert_int_eq(s2_mem_alloc(f.ctx, f.dev, small + dk_bytes, &pair), S2_OK);
    s2_devptr after = (s2_devptr)fake_get("split_second");
    ck_assert_int_eq(after, pair + small);
    s2_attn_bwd_args a = f.a;
    a.workspace = pair;
    a.dk = after;
    long long before = fake_get("launches");
    for (int claimed = 0; claimed < 2; claimed++) {
        a.workspace_bytes = claimed ? need : 0;
        ck_assert_int_eq(s2_attn_backward(f.ctx, f.k, NULL, &a), S2_ERR_INVALID);
        char want[160];
        snprintf(want, sizeof want, "workspace: needs %zu bytes at 0x%llx, but its allocation ends after %zu bytes",
                 need, (unsigned long long)pair, small);
        ck_assert_msg(strstr(s2_ctx_message(f.ctx), want), "\"%s\" lacks \"%s\"", s2_ctx_message(f.ctx), want);
        ck_assert_int_eq(s2_attn_backward_check(f.ctx, f.k, &a), S2_ERR_INVALID);
        ck_assert_msg(strstr(s2_ctx_message(f.ctx), want), "%s", s2_ctx_message(f.ctx));
    }
    ck_assert_int_eq(fake_get("launches"), before);
    /* the same dk after the fixture's own workspace: launched */
    a.workspace = f.ws;
    a.workspace_bytes = 0;
    ck_assert_msg(s2_attn_backward(f.ctx, f.k, NULL, &a) == S2_OK, "%s", s2_ctx_message(f.ctx));
    ck_assert_int_eq(fake_get("launches") - before, 3);
    ck_assert_int_eq(s2_mem_free(f.ctx, f.dev, after), S2_OK);
    ck_assert_int_eq(s2_mem_free(f.ctx, f.dev, pair), S2_OK);
    fixture_free(&f);
}
END_TEST

typedef struct bad_case {
    const char *what;
    s2_status want;
    const char *msg;
} bad_case;

static const bad_case bad_cases[] = {
    {"dq null", S2_ERR_NULL_ARG, "dq is a null pointer"},
    {"lse null", S2_ERR_NULL_ARG, "lse is a null pointer"},
    {"workspace null", S2_ERR_NULL_ARG, "workspace is a null pointer"},
    {"dk misaligned", S2_ERR_ALIGNMENT, "dk: 0x"},
    {"d_lse misaligned", S2_ERR_ALIGNMENT, "d_lse"},
    {"dtype", S2_ERR_DTYPE, "dtype f16"},
    {"kv heads", S2_ERR_HEADS, "4 kv heads"},
    {"q_len > kv_len", S2_ERR_SHAPE, "q_len 256 > kv_len 128"},
    {"dv rows overlap", S2_ERR_STRIDE, "dv: head stride 64 makes rows overlap"},
    {"do stride", S2_ERR_ALIGNMENT, "d_o: seq stride"},
    {"workspace too small", S2_ERR_INVALID, "workspace"},
};
enum { NUM_BAD = sizeof bad_cases / sizeof bad_cases[0] };

START_TEST(every_bad_argument_has_its_status)
{
    fixture f;
    fixture_init(&f);
    s2_attn_bwd_args a = f.a;
    s2_devptr extra = 0;
    switch (_i) {
    case 0: a.dq = 0; break;
    case 1: a.lse = 0; break;
    case 2: a.workspace = 0; break;
    case 3: a.dk += 8; break;
    case 4: a.d_lse += 2; break;
    case 5: a.dtype = S2_DTYPE_F16; break;
    case 6: a.kv_heads = 4; break;
    case 7: a.kv_len = 128; break;
    case 8: a.dv_stride[1] = D; break;
    case 9: a.do_stride[1] = H * D + 4; break;
    case 10:
        ck_assert_int_eq(s2_mem_alloc(f.ctx, f.dev, s2_attn_bwd_workspace_bytes(B, H, SQ) - 16, &extra), S2_OK);
        a.workspace = extra;
        break;
    }
    long long before = fake_get("launches");
    s2_status st = s2_attn_backward(f.ctx, f.k, NULL, &a);
    ck_assert_msg(st == bad_cases[_i].want, "%s: got %s (%s)", bad_cases[_i].what, s2_status_name(st),
                  s2_ctx_message(f.ctx));
    ck_assert_msg(strstr(s2_ctx_message(f.ctx), bad_cases[_i].msg), "%s: message \"%s\" lacks \"%s\"",
                  bad_cases[_i].what, s2_ctx_message(f.ctx), bad_cases[_i].msg);
    ck_assert_int_eq(fake_get("launches"), before);
    s2_mem_free(f.ctx, f.dev, extra);
    fixture_free(&f);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_bwd_rt FAKE_LIB\n");
        return 2;
    }
    fake_path = argv[1];
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args a;
    attn_pattern_args(3, &a);
    s2_kernel_spec spec = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = D, .arch = S2_ARCH_SM90A};
    if (s2_pattern_from_args(ctx, &a, &set) != S2_OK ||
        s2_compile_attention(ctx, s2_pattern_set_get(set, 0), &spec, S2_CUBIN_AUTO, &art) != S2_OK) {
        printf("cannot build the backward cubin (%s): skipped\n", s2_ctx_message(ctx));
        s2_ctx_free(ctx);
        return 77;
    }
    attn_pattern_args(7, &a);
    spec.head_dim = 64;
    if (s2_pattern_from_args(ctx, &a, &set_ds) != S2_OK ||
        s2_compile_attention(ctx, s2_pattern_set_get(set_ds, 0), &spec, S2_CUBIN_AUTO, &art_ds) != S2_OK) {
        printf("cannot build the dS backward cubin (%s)\n", s2_ctx_message(ctx));
        s2_ctx_free(ctx);
        return 1;
    }
    s2_ctx_free(ctx);
    Suite *s = suite_create("attn_bwd_rt");
    TCase *tc = tcase_create("bwd_rt");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, backward_launches_three_kernels);
    tcase_add_test(tc, ds_path_in_head_chunks);
    tcase_add_test(tc, undersized_workspace_is_too_small);
    tcase_add_loop_test(tc, every_bad_argument_has_its_status, 0, NUM_BAD);
    suite_add_tcase(s, tc);
    int failed = s2t_run_suite(s);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_artifact_free(art_ds);
    s2_pattern_set_free(set_ds);
    return failed ? 1 : 0;
}
