/* The forward kernel on a real GPU against the float64 CPU reference.
 * Every case compiles the kernel for the device's arch in-process, builds and
 * uploads the packed forward schedule, fills fresh random inputs (seed
 * printed; S2C_SEED=N repeats a run), poisons the outputs with NaN and
 * compares o (relative Frobenius error) and lse (absolute, -inf exactly).
 * On an sm_90a device every case runs twice: for sm_90a (the wgmma/TMA
 * template where the spec allows it, tensor maps built by
 * s2_attn_fwd_tensor_maps) and for sm_90 (the mma.sync template).
 * sm_90a kernels take the spec's default grid (one CTA per tile);
 * S2C_FWD_PERSISTENT=1 selects the persistent one (ABI fwd_tma_persistent;
 * not for the gathered-key-tile cases, which have the plain grid only),
 * launched on 7 CTAs so that each walks many work items and the mbarrier
 * phases carry over.
 * S2C_FWD_CASES=substring runs only the cases whose name contains it;
 * S2C_FWD_ARCH=sm_80 compiles for that arch instead of the device's; when it
 * is not the device's own, the PTX is loaded (the driver JIT-compiles it), so
 * the sm_80 code path can be checked on an sm_90 device.
 * Exits 77 without libcuda.so.1 or a device.  CUDA is initialised in this
 * process, so Check runs the tests without forking. */
#include "attn_tune.h"
#include "compile_internal.h"
#include "patterns.h"
#include "kernel_abi.h"
#include "pack_internal.h"
#include "rt_cuda.h"
#include "s2c/attention.h"
#include "s2c/attn_runtime.h"
#include "s2c/codegen.h"
#include "s2c/layout.h"
#include "s2c/ref.h"
#include "s2c/runtime.h"

#include <check.h>
#include "gpu_harness.h"
#include "poison.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { L_BSHD, L_BHSD, L_QKV_PACKED } layout_kind;
static const char *const layout_names[] = {"bshd", "bhsd", "qkv"};

typedef struct fwd_case {
    const char *name;
    int pattern;           /* attn_pattern_args index */
    int head_dim;
    s2_dtype dt;
    int batch;
    int64_t q_len, kv_len;
    layout_kind layout;
    int block_m, block_n, num_stages;   /* 0 = heuristic */
    bool expect_empty_rows;
    int kv_gather;         /* sm_90a runs only (gathered key tiles); the sm_90 run ignores it */
} fwd_case;

static const fwd_case cases[] = {
    {"causal64_d128_bf16", 0, 128, S2_DTYPE_BF16, 2, 1024, 1024, L_BSHD, 0, 0, 0, false, 0},
    {"causal64_d64_f16_bhsd", 0, 64, S2_DTYPE_F16, 1, 1000, 1000, L_BHSD, 0, 0, 0, false, 0},
    {"mergeq16_d64_f16_ragged", 1, 64, S2_DTYPE_F16, 2, 777, 777, L_BHSD, 0, 0, 0, false, 0},
    /* fp32 tensors: the tf32 forward (templates/fwd_tf32.c), the same schedules */
    {"causal64_d64_f32", 0, 64, S2_DTYPE_F32, 2, 1000, 1000, L_BSHD, 0, 0, 0, false, 0},
    {"causal64_d128_f32_bhsd", 0, 128, S2_DTYPE_F32, 1, 900, 900, L_BHSD, 0, 0, 0, false, 0},
    {"causal64_d32_f32_s1", 0, 32, S2_DTYPE_F32, 1, 500, 500, L_BSHD, 0, 0, 1, false, 0},
    {"mergeq16_d64_f32_ragged", 1, 64, S2_DTYPE_F32, 2, 777, 777, L_BHSD, 0, 0, 0, false, 0},
    {"mergeq16_d128_f32_n64", 1, 128, S2_DTYPE_F32, 1, 600, 600, L_BSHD, 64, 64, 2, false, 0},
    {"gqa32_8_b32_d128_f32", 3, 128, S2_DTYPE_F32, 1, 500, 500, L_BSHD, 0, 0, 0, false, 0},
    {"bidir64_d96_f32_q100", 2, 96, S2_DTYPE_F32, 2, 100, 1000, L_BHSD, 0, 0, 0, false, 0},
    {"dense64_d256_f32_gqa_ragged", 7, 256, S2_DTYPE_F32, 1, 500, 500, L_BSHD, 0, 0, 0, false, 0},
    {"mergeq16_d48_f32", 1, 48, S2_DTYPE_F32, 1, 300, 300, L_BSHD, 0, 0, 0, false, 0},
    {"empty_rows16_d64_f32", 5, 64, S2_DTYPE_F32, 2, 300, 300, L_BSHD, 0, 0, 0, true, 0},
    {"mergeq16_d128_bf16_m128n128", 1, 128, S2_DTYPE_BF16, 1, 600, 600, L_BSHD, 128, 128, 2, false, 0},
    {"mergeq16_d64_bf16_m16n128_s1", 1, 64, S2_DTYPE_BF16, 1, 333, 333, L_BSHD, 16, 128, 1, false, 0},
    {"bidir64_d128_f16_ragged", 2, 128, S2_DTYPE_F16, 1, 1000, 1000, L_BSHD, 0, 0, 0, false, 0},
    {"bidir64_d64_bf16_q100", 2, 64, S2_DTYPE_BF16, 2, 100, 1000, L_BHSD, 0, 0, 0, false, 0},
    {"gqa32_8_b32_d64_bf16", 3, 64, S2_DTYPE_BF16, 1, 512, 512, L_BSHD, 0, 0, 0, false, 0},
    {"gqa32_8_b32_d128_f16_s3", 3, 128, S2_DTYPE_F16, 1, 300, 300, L_BHSD, 64, 32, 3, false, 0},
    {"dense2_d128_bf16_q100_kv1000", 4, 128, S2_DTYPE_BF16, 2, 100, 1000, L_BSHD, 0, 0, 0, false, 0},
    {"empty_rows16_d64_bf16", 5, 64, S2_DTYPE_BF16, 2, 300, 300, L_BSHD, 0, 0, 0, true, 0},
    {"empty_rows16_d128_f16_q195", 5, 128, S2_DTYPE_F16, 1, 195, 200, L_BHSD, 32, 64, 0, true, 0},
    {"b128_d64_f16_qkvpacked", 6, 64, S2_DTYPE_F16, 2, 640, 640, L_QKV_PACKED, 0, 0, 0, false, 0},
    {"b128_d128_bf16_qkvpacked_ragged", 6, 128, S2_DTYPE_BF16, 1, 700, 700, L_QKV_PACKED, 128, 64, 0, false, 0},
    {"causal64_d32_bf16", 0, 32, S2_DTYPE_BF16, 1, 500, 500, L_BSHD, 0, 0, 0, false, 0},
    {"mergeq16_d96_f16", 1, 96, S2_DTYPE_F16, 1, 400, 400, L_BSHD, 0, 0, 0, false, 0},
    {"mergeq16_d128_bf16_n16", 1, 128, S2_DTYPE_BF16, 1, 1000, 1000, L_BSHD, 0, 16, 0, false, 0},
    {"causal64_d128_bf16_m64_s3", 0, 128, S2_DTYPE_BF16, 1, 900, 900, L_BHSD, 64, 64, 3, false, 0},
    {"bidir64_d128_bf16_q1", 2, 128, S2_DTYPE_BF16, 2, 1, 700, L_BSHD, 0, 0, 0, false, 0},
    /* 128-row tiles (two consumer warpgroups) over query blocks of 64 or fewer
     * rows: per-row-block live bits, local-window edges, empty rows */
    {"causal64_d128_bf16_m128_s3", 0, 128, S2_DTYPE_BF16, 2, 1500, 1500, L_BSHD, 128, 64, 3, false, 0},
    {"bidir64_d64_f16_m128_q300", 2, 64, S2_DTYPE_F16, 1, 300, 1000, L_BHSD, 128, 64, 0, false, 0},
    {"empty_rows16_d64_bf16_m128", 5, 64, S2_DTYPE_BF16, 2, 300, 300, L_BSHD, 128, 64, 0, true, 0},
    {"gqa32_8_b32_d128_bf16_m128_n32", 3, 128, S2_DTYPE_BF16, 1, 777, 777, L_BSHD, 128, 32, 4, false, 0},
    /* dense pattern, d128: the heuristic's 128 x 64 st3 (two consumer warpgroups) on sm_90a */
    {"dense64_d128_bf16_gqa_ragged", 7, 128, S2_DTYPE_BF16, 2, 1000, 1000, L_BSHD, 0, 0, 0, false, 0},
    {"dense64_d64_f16_q300", 7, 64, S2_DTYPE_F16, 1, 300, 900, L_BHSD, 0, 0, 0, false, 0},
    /* gathered key tiles: 4 (or 2) live pattern blocks, usually not adjacent, per key tile */
    {"mergeq16_d128_bf16_g4_ragged", 1, 128, S2_DTYPE_BF16, 2, 1000, 1000, L_BSHD, 0, 0, 0, false, 4},
    {"mergeq16_d64_f16_g4_s2_q300", 1, 64, S2_DTYPE_F16, 1, 300, 777, L_BHSD, 64, 64, 2, false, 4},
    {"empty_rows16_d128_bf16_g4", 5, 128, S2_DTYPE_BF16, 2, 300, 300, L_BSHD, 0, 0, 0, true, 4},
    {"gqa32_8_b32_d128_bf16_g2", 3, 128, S2_DTYPE_BF16, 1, 500, 500, L_BSHD, 0, 0, 0, false, 2},
    {"gqa32_8_b32_d64_f16_g4_m128", 3, 64, S2_DTYPE_F16, 1, 700, 700, L_BSHD, 128, 0, 2, false, 4},
    {"causal64_d128_bf16_g2_s2", 0, 128, S2_DTYPE_BF16, 1, 1500, 1500, L_BSHD, 0, 0, 2, false, 2},
    {"bidir64_d64_bf16_g2_q100", 2, 64, S2_DTYPE_BF16, 2, 100, 1000, L_BHSD, 0, 0, 2, false, 2},
    /* the wide variant's shape (role fwd_wide: 128 x 128, two gathered blocks, 3 stages) */
    {"causal64_d128_bf16_wide", 0, 128, S2_DTYPE_BF16, 2, 1500, 1500, L_BSHD, 128, 128, 3, false, 2},
    {"bidir64_d128_f16_wide_q300", 2, 128, S2_DTYPE_F16, 1, 300, 1000, L_BHSD, 128, 128, 3, false, 2},
    {"dense64_d128_bf16_gqa_wide_ragged", 7, 128, S2_DTYPE_BF16, 2, 1000, 1000, L_BSHD, 128, 128, 3, false, 2},
    /* up to d64: 64 x 128 */
    {"causal64_d64_bf16_wide64", 0, 64, S2_DTYPE_BF16, 2, 1500, 1500, L_BSHD, 64, 128, 3, false, 2},
    {"bidir64_d32_f16_wide64_q300", 2, 32, S2_DTYPE_F16, 1, 300, 1000, L_BHSD, 64, 128, 3, false, 2},
    /* every head dim the forward takes beyond 32, 64, 96 and 128 (16-wide
     * steps to 256), each in f16 and bf16 on two of: Merge-Q at block 16
     * (gathered key tiles where the sm_90a template takes the spec), GQA
     * 32/8, bidirectional with a ragged last block or q_len < kv_len; tiles
     * by the heuristic, whichever template takes the spec */
    {"hdim_mergeq16_d16_f16_ragged", 1, 16, S2_DTYPE_F16, 2, 777, 777, L_BSHD, 0, 0, 0, false, 0},
    {"hdim_gqa32_8_b32_d16_bf16", 3, 16, S2_DTYPE_BF16, 1, 300, 300, L_BHSD, 0, 0, 0, false, 0},
    {"hdim_bidir64_d48_f16_q300", 2, 48, S2_DTYPE_F16, 1, 300, 1000, L_BHSD, 0, 0, 0, false, 0},
    {"hdim_mergeq16_d48_bf16_ragged", 1, 48, S2_DTYPE_BF16, 1, 777, 777, L_BSHD, 0, 0, 0, false, 0},
    {"hdim_gqa32_8_b32_d80_f16", 3, 80, S2_DTYPE_F16, 1, 300, 300, L_BSHD, 0, 0, 0, false, 0},
    {"hdim_bidir64_d80_bf16_ragged", 2, 80, S2_DTYPE_BF16, 2, 1000, 1000, L_BHSD, 0, 0, 0, false, 0},
    {"hdim_mergeq16_d112_f16_ragged", 1, 112, S2_DTYPE_F16, 2, 777, 777, L_BHSD, 0, 0, 0, false, 0},
    {"hdim_gqa32_8_b32_d112_bf16", 3, 112, S2_DTYPE_BF16, 1, 300, 300, L_BSHD, 0, 0, 0, false, 0},
    {"hdim_bidir64_d144_f16_ragged", 2, 144, S2_DTYPE_F16, 2, 1000, 1000, L_BSHD, 0, 0, 0, false, 0},
    {"hdim_mergeq16_d144_bf16_ragged", 1, 144, S2_DTYPE_BF16, 1, 555, 555, L_BHSD, 0, 0, 0, false, 0},
    {"hdim_gqa32_8_b32_d160_f16", 3, 160, S2_DTYPE_F16, 1, 200, 200, L_BHSD, 0, 0, 0, false, 0},
    {"hdim_bidir64_d160_bf16_q300", 2, 160, S2_DTYPE_BF16, 1, 300, 1000, L_BSHD, 0, 0, 0, false, 0},
    {"hdim_mergeq16_d176_f16_ragged", 1, 176, S2_DTYPE_F16, 2, 555, 555, L_BSHD, 0, 0, 0, false, 0},
    {"hdim_gqa32_8_b32_d176_bf16", 3, 176, S2_DTYPE_BF16, 1, 200, 200, L_BHSD, 0, 0, 0, false, 0},
    {"hdim_bidir64_d192_f16_q300", 2, 192, S2_DTYPE_F16, 1, 300, 1000, L_BHSD, 0, 0, 0, false, 0},
    {"hdim_mergeq16_d192_bf16_ragged", 1, 192, S2_DTYPE_BF16, 1, 555, 555, L_BSHD, 0, 0, 0, false, 0},
    {"hdim_gqa32_8_b32_d208_f16", 3, 208, S2_DTYPE_F16, 1, 200, 200, L_BSHD, 0, 0, 0, false, 0},
    {"hdim_bidir64_d208_bf16_ragged", 2, 208, S2_DTYPE_BF16, 2, 1000, 1000, L_BHSD, 0, 0, 0, false, 0},
    {"hdim_mergeq16_d224_f16_ragged", 1, 224, S2_DTYPE_F16, 2, 555, 555, L_BHSD, 0, 0, 0, false, 0},
    {"hdim_gqa32_8_b32_d224_bf16", 3, 224, S2_DTYPE_BF16, 1, 200, 200, L_BSHD, 0, 0, 0, false, 0},
    {"hdim_bidir64_d240_f16_ragged", 2, 240, S2_DTYPE_F16, 2, 1000, 1000, L_BSHD, 0, 0, 0, false, 0},
    {"hdim_mergeq16_d240_bf16_ragged", 1, 240, S2_DTYPE_BF16, 1, 555, 555, L_BHSD, 0, 0, 0, false, 0},
    {"hdim_gqa32_8_b32_d256_f16", 3, 256, S2_DTYPE_F16, 1, 200, 200, L_BHSD, 0, 0, 0, false, 0},
    {"hdim_bidir64_d256_bf16_q300", 2, 256, S2_DTYPE_BF16, 1, 300, 1000, L_BSHD, 0, 0, 0, false, 0},
    /* ... and on tiles of several key sub-blocks (dead column groups skipped), 8 warps, 1 and 3 stages */
    {"hdim_mergeq16_d48_f16_n64", 1, 48, S2_DTYPE_F16, 1, 500, 500, L_BSHD, 0, 64, 0, false, 0},
    {"hdim_mergeq16_d240_bf16_m128n64_s1", 1, 240, S2_DTYPE_BF16, 1, 400, 400, L_BHSD, 128, 64, 1, false, 0},
    {"hdim_causal64_d80_bf16_n128_s3", 0, 80, S2_DTYPE_BF16, 1, 1100, 1100, L_BSHD, 64, 128, 3, false, 0},
};
enum { NUM_CASES = sizeof cases / sizeof cases[0], NUM_RUNS = 2 * NUM_CASES };

typedef struct case_result {
    bool ran, ok;
    double o_err, lse_err;
    int64_t empty_rows;
    int regs, smem;
    s2_kspec spec;
    s2_arch arch;
    bool tma, persistent;
    uint64_t seed;
    int64_t owned_lists;   /* lists starting with owned entries (s2_schedule_pack_gathered_owned) */
} case_result;

/* run r: case r % NUM_CASES; the first NUM_CASES for the device's arch (or
 * S2C_FWD_ARCH), the rest, on an sm_90a device, again for sm_90 (the sm_80
 * template as a cubin), so both paths are checked on a Hopper GPU */
static case_result results[NUM_RUNS];
static uint64_t base_seed;
static s2_arch dev_arch, own_arch;
static bool load_ptx;   /* arch forced to one that is not the device's */

static bool ref_mask(const void *user, int q_head, int64_t qpos, int64_t kpos)
{
    return s2_token_kept((const s2_pattern *)user, q_head, qpos, kpos);
}

static void run_case(int run)
{
    int ci = run % NUM_CASES;
    bool second = run >= NUM_CASES;
    const fwd_case *c = &cases[ci];
    case_result *res = &results[run];
    const char *filter = getenv("S2C_FWD_CASES");
    if (filter && !strstr(c->name, filter))
        return;
    if (second && (own_arch != S2_ARCH_SM90A || dev_arch != S2_ARCH_SM90A))
        return;
    s2_arch arch = second ? S2_ARCH_SM90 : dev_arch;
    bool ptx = load_ptx && !second;
    res->ran = true;
    res->arch = arch;
    res->seed = base_seed + (uint64_t)ci * 7919u;
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args a;
    attn_pattern_args(c->pattern, &a);
    s2_pattern_set *set = NULL;
    ck_assert_msg(s2_pattern_from_args(ctx, &a, &set) == S2_OK, "%s", s2_ctx_message(ctx));
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    const int B = c->batch, H = p->heads, HK = p->kv_heads, D = c->head_dim;
    const int64_t SQ = c->q_len, SK = c->kv_len;

    s2_kspec spec = {.kind = S2_KERNEL_FWD, .dtype = c->dt, .head_dim = D, .arch = arch,
                           .block_m = c->block_m, .block_n = c->block_n, .num_stages = c->num_stages,
                           .kv_gather = arch == S2_ARCH_SM90A ? c->kv_gather : 0};
    /* the wide shape's 3 stages of 128 x 128 exceed sm_80's shared memory
     * in the mma.sync template (224 KB > 163 KB): 2 stages there */
    if (arch == S2_ARCH_SM80 && c->block_m == 128 && c->block_n == 128 && c->num_stages == 3)
        spec.num_stages = 2;
    /* the grid choice applies where the spec resolves to the TMA template
     * (persistent != 0) */
    const char *pers = getenv("S2C_FWD_PERSISTENT");
    s2_kspec probe = spec;
    if (pers && s2_kspec_resolve(ctx, &probe, p) == S2_OK && probe.persistent != 0) {
        s2_kspec with = spec;
        with.persistent = atoi(pers);
        if (s2_kspec_resolve(ctx, &with, p) == S2_OK)
            spec.persistent = with.persistent;
    }
    s2_ctx_clear(ctx);
    s2_artifact *art = NULL;
    ck_assert_msg(s2_compile_kspec1(ctx, p, &spec, S2_CUBIN_AUTO, &art) == S2_OK, "%s: %s", c->name,
                  s2_ctx_message(ctx));
    ck_assert_int_eq(s2_artifact_kspec(ctx, art, &res->spec), S2_OK);   /* the template's choices included */
    /* which ABI: the manifest in the cubin says */
    const char *mtext = NULL;
    size_t mlen = 0;
    s2_manifest *man = NULL;
    ck_assert_msg(s2_cubin_find_manifest(ctx, art->cubin, art->cubin_size, &mtext, &mlen) == S2_OK, "%s",
                  s2_ctx_message(ctx));
    ck_assert_msg(s2_manifest_parse(ctx, mtext, mlen, &man) == S2_OK, "%s", s2_ctx_message(ctx));
    const s2_kernel_record *fr = s2_manifest_kernel_fn(s2_manifest_kernel_at(man, 0), S2_ROLE_FWD);
    res->tma = fr->abi != S2_ABI_FWD;
    bool persistent = fr->grid == S2_GRID_PERSISTENT;
    res->persistent = persistent;
    s2_manifest_free(man);
    ck_assert_msg(!res->tma || (arch == S2_ARCH_SM90A && !ptx), "%s: a TMA kernel for %s", c->name, s2_arch_name(arch));
    res->regs = art->kernels[0].registers;
    res->smem = art->smem_bytes;

    /* the packed forward schedule for the kernel's tile */
    s2_layout *lay = NULL;
    s2_schedule *sched = NULL;
    s2_packed_schedule pk;
    ck_assert_msg(s2_layout_new(ctx, p, SQ, SK, &lay) == S2_OK, "%s", s2_ctx_message(ctx));
    const s2_kspec *aks = &res->spec;
    int gather = aks->kv_gather > 1 ? aks->kv_gather : 1;
    if (c->kv_gather > 1)
        ck_assert_int_eq(gather, arch == S2_ARCH_SM90A ? c->kv_gather : 1);
    s2_tile_spec ts = {aks->block_m, aks->block_n / gather};
    ck_assert_msg(s2_schedule_build(ctx, lay, ts, false, &sched) == S2_OK, "%s", s2_ctx_message(ctx));
    /* the two-slab shape on owned pairs, as the runtime packs it */
    ck_assert_msg(s2_kernel_spec_pack_forward(ctx, aks, sched, &pk) == S2_OK, "%s", s2_ctx_message(ctx));
    if (s2_kernel_spec_owned_pairs(aks)) {
        const int32_t *po = (const int32_t *)((const char *)pk.data + pk.offsets_off);
        const s2_dev_gentry *pe = (const s2_dev_gentry *)((const char *)pk.data + pk.entries_off);
        for (int64_t li = 0; li < (int64_t)sched->num_classes * sched->geom.q_tiles; li++)
            res->owned_lists += po[li + 1] > po[li] && (pe[po[li]].flags & S2_ENTRY_OWN0);
        /* the S2 local window of pattern 0 gives owned lists: the path is run */
        if (c->pattern == 0)
            ck_assert_msg(res->owned_lists > 0, "%s: no owned lists", c->name);
    }

    /* host tensors */
    s2t_tensor q = {0}, k = {0}, v = {0}, o;
    int64_t qx[4] = {B, SQ, H, D}, kx[4] = {B, SK, HK, D};
    uint16_t *packed = NULL;
    size_t packed_elems = 0;
    if (c->layout == L_QKV_PACKED) {
        /* q, k, v sliced from one [B][S][3][H][D] tensor (needs H == HKV, SQ == SK) */
        ck_assert(H == HK && SQ == SK);
        int64_t st[4] = {SK * 3 * H * D, 3 * H * D, D, 1};
        packed_elems = s2t_span(st, kx) + 2 * (size_t)H * D;
        packed = malloc(packed_elems * 2);
        ck_assert_ptr_nonnull(packed);
        q.t = (s2_tensor){packed, c->dt, {st[0], st[1], st[2], st[3]}};
        k.t = (s2_tensor){packed + H * D, c->dt, {st[0], st[1], st[2], st[3]}};
        v.t = (s2_tensor){packed + 2 * H * D, c->dt, {st[0], st[1], st[2], st[3]}};
    } else {
        s2t_tensor_new(&q, c->dt, c->layout == L_BHSD, B, SQ, H, D, 0);
        s2t_tensor_new(&k, c->dt, c->layout == L_BHSD, B, SK, HK, D, 0);
        s2t_tensor_new(&v, c->dt, c->layout == L_BHSD, B, SK, HK, D, 0);
    }
    /* o padded by 8 elements per row: the padding must stay poisoned */
    s2t_tensor_new(&o, c->dt, c->layout == L_BHSD, B, SQ, H, D, 8);
    const int64_t *ost = o.t.stride;
    s2_tensor_fill_random(&q.t, qx, res->seed, -1.5, 1.5);
    s2_tensor_fill_random(&k.t, kx, res->seed + 1, -1.5, 1.5);
    s2_tensor_fill_random(&v.t, kx, res->seed + 2, -1.0, 1.0);
    size_t nlse = (size_t)B * H * SQ;
    float *lse = s2t_alloc_poisoned(nlse * sizeof *lse), *lse_ref = malloc(nlse * sizeof *lse_ref);
    ck_assert_ptr_nonnull(lse_ref);

    /* device */
    s2_device *dev = NULL;
    ck_assert_msg(s2_device_open(ctx, 0, &dev) == S2_OK, "%s", s2_ctx_message(ctx));
    s2_cumodule *mod = NULL;
    s2_cufunction *kern = NULL;
    const void *image = ptx ? (const void *)art->ptx : (const void *)art->cubin;
    size_t image_size = ptx ? art->ptx_len : art->cubin_size;
    ck_assert_msg(s2_cumodule_load_data(ctx, dev, image, image_size, &mod) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_msg(s2_cufunction_get(ctx, mod, art->kernels[0].name, &kern) == S2_OK, "%s", s2_ctx_message(ctx));
    s2_devptr d_packed = 0, d_lse = 0, d_sched = 0;
#define UPLOAD(dptr, host, bytes)                                                                          \
    do {                                                                                                   \
        ck_assert_msg(s2_mem_alloc(ctx, dev, (bytes), &(dptr)) == S2_OK, "%s", s2_ctx_message(ctx));         \
        ck_assert_msg(s2_memcpy_h2d(ctx, dev, (dptr), (host), (bytes)) == S2_OK, "%s", s2_ctx_message(ctx)); \
    } while (0)
    s2_devptr dq, dk, dv;
    if (packed) {
        UPLOAD(d_packed, packed, packed_elems * 2);
        dq = d_packed;
        dk = d_packed + (s2_devptr)H * D * 2;
        dv = d_packed + (s2_devptr)2 * H * D * 2;
    } else {
        s2t_tensor_upload(ctx, dev, &q);
        s2t_tensor_upload(ctx, dev, &k);
        s2t_tensor_upload(ctx, dev, &v);
        dq = q.dev, dk = k.dev, dv = v.dev;
    }
    s2t_tensor_upload(ctx, dev, &o);
    UPLOAD(d_lse, lse, nlse * sizeof *lse);
    UPLOAD(d_sched, pk.data, pk.size);
    int32_t *work = NULL;
    int64_t n_work64 = 0;
    s2_devptr d_work = 0;
    if (persistent) {
        ck_assert_msg(s2_schedule_work_list(ctx, sched, &work, &n_work64) == S2_OK, "%s", s2_ctx_message(ctx));
        /* the list, then two zeroed work counters (attention.h) */
        work = realloc(work, (size_t)(n_work64 + 4) * sizeof *work);
        ck_assert_ptr_nonnull(work);
        memset(work + n_work64, 0, 4 * sizeof *work);
        UPLOAD(d_work, work, (size_t)(n_work64 + 4) * sizeof *work);
    }
    s2_devptr d_counter = d_work + 4 * (s2_devptr)((n_work64 + 1) & ~1);
    int32_t n_work = (int32_t)n_work64, batch32 = B;

    s2_devptr d_class = d_sched + pk.class_of_head_off, d_offs = d_sched + pk.offsets_off;
    s2_devptr d_ent = d_sched + pk.entries_off;
    int64_t qs[3] = {q.t.stride[0], q.t.stride[1], q.t.stride[2]};
    int64_t ks[3] = {k.t.stride[0], k.t.stride[1], k.t.stride[2]};
    int64_t vs[3] = {v.t.stride[0], v.t.stride[1], v.t.stride[2]};
    int64_t os[3] = {ost[0], ost[1], ost[2]};
    int32_t q_len = (int32_t)SQ, kv_len = (int32_t)SK;
    float scale_log2 = (float)(1.0 / sqrt((double)D) * M_LOG2E);
    int32_t first = (int32_t)sched->geom.first_q_tile, q_tiles = (int32_t)sched->geom.q_tiles;
    s2_tensor_map maps[3];
    if (res->tma) {
        s2_attn_fwd_args fa = {.batch = B, .q_len = SQ, .kv_len = SK, .heads = H, .kv_heads = HK, .head_dim = D,
                               .dtype = c->dt, .q = dq, .k = dk, .v = dv, .o = o.dev};
        memcpy(fa.q_stride, qs, sizeof qs);
        memcpy(fa.k_stride, ks, sizeof ks);
        memcpy(fa.v_stride, vs, sizeof vs);
        memcpy(fa.o_stride, os, sizeof os);
        ck_assert_msg(s2_rt_fwd_tensor_maps(ctx, dev, aks, &fa, maps) == S2_OK, "%s", s2_ctx_message(ctx));
    }
    void *args[] = {&dq, &dk, &dv, &o.dev, &d_lse,
                    &qs[0], &qs[1], &qs[2], &ks[0], &ks[1], &ks[2], &vs[0], &vs[1], &vs[2], &os[0], &os[1], &os[2],
                    &q_len, &kv_len, &scale_log2, &d_class, &d_offs, &d_ent, &first, &q_tiles,
                    &maps[0], &maps[1], &maps[2], &d_work, &n_work, &batch32, &d_counter, NULL};
    s2_devptr no_seqs = 0; /* uniform batch: the trailing seqinfo parameter is null */
    args[!res->tma ? 25 : persistent ? 32 : 28] = &no_seqs;
    s2_launch_cfg cfg = {.grid = {(uint32_t)q_tiles, (uint32_t)H, (uint32_t)B},
                         .block = {(uint32_t)art->threads_per_block, 1, 1},
                         .smem_bytes = (uint32_t)art->smem_bytes};
    if (persistent) {
        int64_t items = n_work64 * B;
        cfg.grid[0] = (uint32_t)(items < 7 ? items : 7);
        cfg.grid[1] = cfg.grid[2] = 1;
    }
    ck_assert_msg(s2_cufunction_launch(ctx, kern, &cfg, args) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_msg(s2_device_synchronize(ctx, dev) == S2_OK, "%s: %s", c->name, s2_ctx_message(ctx));
    s2t_tensor_download(ctx, dev, &o);
    ck_assert(s2_memcpy_d2h(ctx, dev, lse, d_lse, nlse * sizeof *lse) == S2_OK);

    /* reference, float64 out */
    double *ref = malloc((size_t)B * SQ * H * D * sizeof *ref);
    ck_assert_ptr_nonnull(ref);
    s2_tensor rt = s2_tensor_bshd(ref, S2_DTYPE_F64, SQ, H, D);
    s2_ref_problem rp = {.batch = B, .heads = H, .kv_heads = HK, .head_dim = D, .q_len = SQ, .kv_len = SK,
                         .causal = p->causal, .mask = ref_mask, .mask_user = p};
    ck_assert_msg(s2_ref_forward(ctx, &rp, &q.t, &k.t, &v.t, &rt, lse_ref) == S2_OK, "%s", s2_ctx_message(ctx));

    double num = 0, den = 0, lse_err = 0;
    int64_t empty = 0, bad_lse = 0, nan_out = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int64_t i = 0; i < SQ; i++) {
                size_t li = ((size_t)b * H + h) * SQ + i;
                bool is_empty = isinf(lse_ref[li]) && lse_ref[li] < 0;
                empty += is_empty;
                if (is_empty ? !(isinf(lse[li]) && lse[li] < 0) : !(fabs((double)lse[li] - lse_ref[li]) <= 1e-3))
                    bad_lse++;
                else if (!is_empty)
                    lse_err = fmax(lse_err, fabs((double)lse[li] - lse_ref[li]));
                for (int d = 0; d < D; d++) {
                    double x = s2_tensor_get(&o.t, b, i, h, d), r = s2_tensor_get(&rt, b, i, h, d);
                    if (isnan(x))
                        nan_out++;
                    if (is_empty && x != 0.0)
                        nan_out++;
                    num += (x - r) * (x - r);
                    den += r * r;
                }
            }
    nan_out += s2t_tensor_pad_written(&o);   /* every row's padding stays poisoned */
    res->o_err = den > 0 ? sqrt(num / den) : sqrt(num);
    res->lse_err = lse_err;
    res->empty_rows = empty;
    /* fp32 on tf32 (10-bit mantissa; Q, K, P rounded, V truncated): f16's
     * unit roundoff, at a bound a little under f16's */
    double tol = c->dt == S2_DTYPE_BF16 ? 2e-2 : c->dt == S2_DTYPE_F32 ? 4e-3 : 5e-3;
    res->ok = nan_out == 0 && bad_lse == 0 && res->o_err <= tol && (!c->expect_empty_rows || empty > 0);
    ck_assert_msg(nan_out == 0, "%s seed %llu: %lld output values NaN, non-zero on empty rows or padding written",
                  c->name, (unsigned long long)res->seed, (long long)nan_out);
    ck_assert_msg(bad_lse == 0, "%s seed %llu: %lld lse values off by > 1e-3 or -inf mismatch", c->name,
                  (unsigned long long)res->seed, (long long)bad_lse);
    ck_assert_msg(res->o_err <= tol, "%s seed %llu: relative error %.3g > %.g", c->name,
                  (unsigned long long)res->seed, res->o_err, tol);
    ck_assert_msg(!c->expect_empty_rows || empty > 0, "%s: no empty row in a pattern meant to have some", c->name);

    s2_mem_free(ctx, dev, d_packed);
    s2t_tensor_free(ctx, dev, &q);
    s2t_tensor_free(ctx, dev, &k);
    s2t_tensor_free(ctx, dev, &v);
    s2t_tensor_free(ctx, dev, &o);
    s2_mem_free(ctx, dev, d_lse);
    s2_mem_free(ctx, dev, d_sched);
    s2_mem_free(ctx, dev, d_work);
    free(work);
    s2_cufunction_free(kern);
    s2_cumodule_free(mod);
    s2_device_free(dev);
    free(ref);
    free(lse);
    free(lse_ref);
    free(packed);
    s2_packed_schedule_free(&pk);
    s2_schedule_free(sched);
    s2_layout_free(lay);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}

START_TEST(fwd_matches_reference)
{
    run_case(_i);
}
END_TEST

static void print_summary(void)
{
    printf("\n%-34s %-6s %-4s %-5s %-6s %4s %4s %2s %2s %4s %6s %9s %9s %6s %5s %s\n", "case", "arch", "abi", "dtype",
           "layout", "bm", "bn", "w", "st", "regs", "smem", "o_relerr", "lse_err", "empty", "owned", "result");
    for (int i = 0; i < NUM_RUNS; i++) {
        const case_result *r = &results[i];
        const fwd_case *c = &cases[i % NUM_CASES];
        if (!r->ran)
            continue;
        printf("%-34s %-6s %-4s %-5s %-6s %4d %4d %2d %2d %4d %6d %9.2e %9.2e %6lld %5lld %s\n", c->name,
               s2_arch_name(r->arch), r->persistent ? "tmaP" : r->spec.kv_gather > 1 ? "tmaG" : r->tma ? "tma" : "ptrs", s2_dtype_name(c->dt), layout_names[c->layout],
               r->spec.block_m, r->spec.block_n, r->spec.num_warps, r->spec.num_stages, r->regs, r->smem, r->o_err,
               r->lse_err, (long long)r->empty_rows, (long long)r->owned_lists, r->ok ? "PASS" : "FAIL");
    }
}

int main(void)
{
    s2t_gpu g;
    int rc = s2t_gpu_start("compiling for", "S2C_FWD_ARCH", &g);
    if (rc != 0)
        return rc;
    dev_arch = g.arch;
    own_arch = g.own_arch;
    load_ptx = g.load_ptx;
    base_seed = g.seed;

    Suite *s = suite_create("attn_gpu");
    TCase *tc = tcase_create("fwd");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, fwd_matches_reference, 0, NUM_RUNS);
    suite_add_tcase(s, tc);
    int failed = s2t_run_nofork(s);
    print_summary();
    return failed ? 1 : 0;
}
