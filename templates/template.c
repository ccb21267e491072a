/* The template table, and each template's spec heuristic: which template
 * takes a spec, and how its zero tunables are filled and checked. */
#include "template.h"

#include <stdio.h>
#include <string.h>


/* The 16-bit tensor-core operands (f16, bf16: the dtype table's S2_MMA_F16
 * rows); fp8 has its own forward entry (fwd_wgmma_fp8). */
static bool mma16(const s2_kspec *s)
{
    const s2_dtype_info *r = s2_dtype_info_of(s->dtype);
    return r && r->mma == S2_MMA_F16;
}

int s2_template_smem_limit(int arch) { return arch == S2_ARCH_SM80 ? 163 * 1024 : 227 * 1024; }

s2_status s2_template_fa2_rows(s2_ctx *ctx, s2_kspec *spec)
{
    if (spec->num_warps == 0)
        spec->num_warps = spec->block_m ? spec->block_m / 16 : 4;
    if (spec->block_m == 0)
        spec->block_m = 16 * spec->num_warps;
    if (!s2_template_pow2_in(spec->block_m, 16, 128) || spec->block_m != 16 * spec->num_warps)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED,
                       "spec: block_m %d with %d warps (block_m = 16 * num_warps, 16..128)", spec->block_m,
                       spec->num_warps);
    return S2_OK;
}

s2_status s2_template_fa2_stages_tiles(s2_ctx *ctx, s2_kspec *spec, const s2_pattern *p, bool bwd)
{
    if (spec->num_stages == 0)
        spec->num_stages = 2;
    if (spec->num_stages < 1 || spec->num_stages > 4)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: num_stages %d (1..4)", spec->num_stages);
    int bs = p->block_size;
    int sub_m = spec->block_m / (bs < spec->block_m ? bs : spec->block_m);
    int sub_n = spec->block_n / (bs < spec->block_n ? bs : spec->block_n);
    if (sub_m * sub_n > 64 || (bwd && sub_m * sub_m > 64))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: tile %d x %d holds %d sub-blocks of block %d (at most 64)",
                       spec->block_m, bwd && sub_m > sub_n ? spec->block_m : spec->block_n,
                       sub_m * (bwd && sub_m > sub_n ? sub_m : sub_n), bs);
    return S2_OK;
}

/* sm_90a, a head dim the wgmma template builds (every multiple of 16 up to
 * 256) and tunables it takes: that template (templates/fwd_sm90.c);
 * anything else keeps the sm_80 one. */
bool s2_fwd_spec_wants_tma(const s2_kspec *s)
{
    if (s->kind != S2_KERNEL_FWD || !mma16(s) || s->arch != S2_ARCH_SM90A || !S2_TEMPLATE_HEAD_DIM_OK(s->head_dim))
        return false;
    if (s->block_m != 0 && s->block_m != 64 && s->block_m != 128)
        return false;
    if (s->num_warps != 0 && s->num_warps != 8 && s->num_warps != 12)
        return false;
    if (s->block_m != 0 && s->num_warps != 0 && s->num_warps != 4 * (s->block_m / 64 + 1))
        return false;
    if (s->num_stages == 1)
        return false;
    return s->block_n == 0 || s2_template_pow2_in(s->block_n, 16, 128);
}

/* Warp-specialised tiling: a producer warpgroup plus block_m / 64 consumer
 * warpgroups (num_warps = 4 * (1 + block_m / 64)).  Default 64 x 64 with 3
 * stages, the fastest measured; a 128-key tile over 64-key blocks computes
 * dead halves (bench/NOTES.md, "Spec heuristics").  Past d128 (shared
 * memory rows of more than two 64-column blocks) as FlashAttention-3 at
 * d192 and d256: 128-row tiles (two consumer warpgroups in ping-pong share
 * each K/V tile: a 64-row tile at two CTAs per SM does not fit), 64-key
 * tiles with the most stages up to 3 that fit in shared memory (3 at d192),
 * and past d192 32-key tiles with up to 4 stages. */
static s2_status resolve_tma(s2_ctx *ctx, s2_kspec *spec, const s2_pattern *p)
{
    bool big_d = spec->head_dim > 128;
    /* dense patterns (blocks of 64+): 128 x 64, two consumer warpgroups
     * share each K/V tile; the 128-row tile computes dead pairs only on
     * sparse patterns (runs 10-12) */
    if (spec->block_m == 0 && spec->block_n == 0 && spec->num_warps == 0 && spec->kv_gather == 0 &&
        spec->head_dim == 128 && p->block_size >= 64 && s2_pattern_is_dense(p)) {
        spec->block_m = 128;
        spec->block_n = 64;
        spec->kv_gather = 1;
    }
    if (spec->block_m == 0)
        spec->block_m = spec->num_warps ? 64 * (spec->num_warps / 4 - 1) : big_d ? 128 : 64;
    spec->num_warps = 4 * (spec->block_m / 64 + 1);
    /* block-16 patterns (Merge-Q): 64-key tiles gathered from 4 live
     * blocks, faster than 64 x 32 tiles (bench/NOTES.md) */
    if (spec->kv_gather == 0)
        spec->kv_gather = p->block_size == 16 && (spec->block_n == 0 || spec->block_n == 64) ? 4 : 1;
    if (spec->kv_gather > 1 && spec->block_n == 0)
        spec->block_n = spec->kv_gather * p->block_size;
    /* past d192 (rows of four 64-column blocks) 64-key tiles fit only 2
     * stages; 32-key tiles with 4 stages are faster (bench/NOTES.md) */
    bool deep_d = spec->head_dim > 192 && spec->block_n == 0 && spec->kv_gather == 1;
    /* ungathered block-16 tiles: 64 x 32 beat 64 x 16 and 64 x 64 */
    if (spec->block_n == 0)
        spec->block_n = p->block_size <= 16 || deep_d ? 32 : 64;
    if (spec->num_stages == 0) {
        spec->num_stages = deep_d ? 4 : 3;
        while (spec->num_stages > 2 && s2_fwd_sm90_smem_bytes(p, spec) > s2_template_smem_limit(spec->arch))
            spec->num_stages--;
    }
    if (spec->num_stages < 2 || spec->num_stages > 4)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: num_stages %d (2..4 for sm_90a)", spec->num_stages);
    /* one CTA per tile by default: the persistent grid measured slower */
    if (spec->persistent == 0)
        spec->persistent = -1;
    spec->persistent = spec->persistent > 0 ? 1 : -1;
    int bs = p->block_size;
    if (spec->kv_gather < 1)
        spec->kv_gather = 1;
    if (spec->kv_gather > 1 && (spec->kv_gather > 4 || bs < 16 || spec->block_n != spec->kv_gather * bs))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED,
                       "spec: kv_gather %d needs 2..4 blocks of 16+ tokens filling block_n (%d, block %d)",
                       spec->kv_gather, spec->block_n, bs);
    int sub_m = spec->block_m / (bs < spec->block_m ? bs : spec->block_m);
    int sub_n = spec->block_n / (bs < spec->block_n ? bs : spec->block_n);
    if (sub_m * sub_n > 64)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: tile %d x %d holds %d sub-blocks of block %d (at most 64)",
                       spec->block_m, spec->block_n, sub_m * sub_n, bs);
    int smem = s2_fwd_sm90_smem_bytes(p, spec);
    if (smem > s2_template_smem_limit(spec->arch))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: %d bytes of shared memory exceed sm_90a's %d", smem,
                       s2_template_smem_limit(spec->arch));
    return S2_OK;
}

/* fp8 (e4m3) on sm_90a: the wgmma forward with fp8 operands (fwd_sm90.c).
 * By default 128 x 128 tiles (64-key ones past d128, whose O fills the
 * registers), two consumer warpgroups, key tiles gathered from live blocks
 * shorter than the tile (owned pairs at block 64, as the bf16 wide
 * variant), one CTA per tile.  The producer's transpose of V reads key rows
 * in groups of 64, so block_n is 64 or 128. */
static s2_status resolve_fp8(s2_ctx *ctx, s2_kspec *spec, const s2_pattern *p)
{
    const char *title = s2_dtype_info_of(spec->dtype)->title;
    if (spec->arch != S2_ARCH_SM90A)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: %s kernels are built for sm_90a only (wgmma on fp8 operands), not %s",
                       title, s2_arch_cpu((s2_arch)spec->arch));
    if (spec->persistent > 0)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: the %s forward runs one CTA per tile (no persistent grid)", title);
    if (!spec->block_m && !spec->block_n && !spec->num_warps && !spec->kv_gather) {
        int bs = p->block_size, bn = spec->head_dim > 128 || bs < 16 ? 64 : 128;
        if (bs >= 16 && bs < bn && bn / bs > 4)
            bn = 64;
        spec->block_m = bs < 16 ? 64 : 128;
        spec->block_n = bn;
        spec->kv_gather = bs >= 16 && bs < bn ? bn / bs : 1;
    }
    s2_status st = resolve_tma(ctx, spec, p);
    if (st == S2_OK && spec->block_n != 64 && spec->block_n != 128)
        st = s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: the %s forward takes block_n 64 or 128, not %d", title,
                     spec->block_n);
    /* (as the 16-bit one: a 64-row tile's registers past d128 do not assemble) */
    if (st == S2_OK && spec->head_dim > 128 && spec->block_m != 128)
        st = s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: the %s forward past head_dim 128 takes block_m 128", title);
    return st;
}

/* Decode: num_warps 16-key chunks per tile (default 4: 64 keys; 2 above
 * d128, so the ring holds d128's bytes), a ring of num_stages tiles (default
 * 3: 2 CTAs of 100 KB fit an SM at d128, so a CTA's loads overlap the
 * other's merge); block_m is the 16-row mma tile. */
static s2_status resolve_decode(s2_ctx *ctx, s2_kspec *spec, const s2_pattern *p)
{
    if (p->heads / p->kv_heads > 16)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: decode packs a GQA group into 16 rows; %d heads per kv head",
                       p->heads / p->kv_heads);
    if (p->block_size < 16)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: decode needs blocks of 16+ tokens");
    if (spec->num_warps == 0)
        spec->num_warps = spec->head_dim > 128 ? 2 : 4;
    if (spec->num_warps != 2 && spec->num_warps != 4 && spec->num_warps != 8)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: decode num_warps %d (2, 4 or 8)", spec->num_warps);
    /* the warps' merge gives each row's threads an even number of columns */
    if (spec->head_dim % (spec->num_warps * 4) != 0)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: decode num_warps %d needs head_dim %% %d == 0 (head_dim %d)",
                       spec->num_warps, spec->num_warps * 4, spec->head_dim);
    /* fp8 pages: e4m3x2 -> f16x2 is an sm_89 instruction (no software path for sm_80) */
    if (spec->kv_dtype != 0 && spec->arch == S2_ARCH_SM80)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: decode of %s K/V pages needs sm_90 (sm_80 has no fp8 conversion)",
                       s2_dtype_name(spec->kv_dtype));
    /* fp8 pages: a stage holds half the bytes, so 6 stages take the 16-bit ring's shared memory and keep
     * more bytes in flight (5 half tiles against 2 whole ones) */
    if (spec->num_stages == 0)
        spec->num_stages = spec->kv_dtype != 0 ? 6 : 3;
    if (spec->num_stages < 2 || spec->num_stages > 6)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: decode num_stages %d (2..6)", spec->num_stages);
    if (spec->block_m != 0 && spec->block_m != 16)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: decode block_m %d (16: one mma tile)", spec->block_m);
    if (spec->block_n != 0 && spec->block_n != 16 * spec->num_warps)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: decode block_n %d (16 * num_warps)", spec->block_n);
    spec->block_m = 16;
    spec->block_n = 16 * spec->num_warps;
    spec->persistent = 0;
    int smem = s2_decode_smem_bytes(p, spec);
    if (smem > s2_template_smem_limit(spec->arch))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: %d bytes of shared memory exceed %s's %d", smem,
                       s2_arch_cpu((s2_arch)spec->arch), s2_template_smem_limit(spec->arch));
    return S2_OK;
}

/* The backward over 128 columns (its dK/dV kernel takes column passes,
 * bwd.c): key tiles of 32 (16 for block 16, ungathered) in the dQ kernel,
 * whose dQ and the tile's S and dP share the registers, and by default the
 * deepest ring up to 2 stages that fits shared memory (1 for d256 on sm_80). */
static void bwd_wide_tiles(s2_kspec *spec, const s2_pattern *p)
{
    if (spec->head_dim <= 128)
        return;
    if (spec->block_n == 0)
        spec->block_n = spec->kv_gather > 1 ? spec->kv_gather * p->block_size : p->block_size <= 16 ? 16 : 32;
    if (spec->num_stages == 0) {
        spec->num_stages = 2;
        if (s2_bwd_smem_bytes(p, spec) > s2_template_smem_limit(spec->arch))
            spec->num_stages = 1;
    }
}

/* The mma.sync forward and the backward share one tiling rule (FA2: each
 * warp owns a 16-row slab); the backward may take the wgmma bodies. */
static s2_status resolve_mma(s2_ctx *ctx, s2_kspec *spec, const s2_pattern *p)
{
    bool bwd = spec->kind == S2_KERNEL_BWD;
    if (bwd && p->block_size < 16)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: the backward takes blocks of 16+ tokens");
    /* the wgmma bodies read whole 64-column blocks: other head dims take mma.sync */
    bool wg_ok = bwd && spec->arch == S2_ARCH_SM90A && spec->head_dim % 64 == 0;
    if (!wg_ok && spec->bwd_wgmma > 0)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: the wgmma backward needs sm_90a and head_dim 64, 128, 192 or 256");

    if (spec->persistent > 0)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: a persistent grid needs the sm_90a forward template");
    spec->persistent = 0;
    if (spec->kv_gather > 1 && !wg_ok)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: gathered key tiles need the sm_90a forward or wgmma backward");

    s2_status st = s2_template_fa2_rows(ctx, spec);
    if (st != S2_OK)
        return st;
    /* 64 x 64, 2 stages for block 64; for block-16 patterns a key tile of
     * one block (no dead vertical-stripe columns), 32 keys for the wgmma
     * backward, whose m64n16 products are short (bench/NOTES.md) */
    bool wg = wg_ok && spec->bwd_wgmma >= 0 && spec->num_warps == 4;
    /* The wgmma backward on block-16 patterns (Merge-Q): key tiles of 4
     * pattern blocks gathered by the schedule in both kernels (the dQ
     * kernel's from its query tile's list, the dK/dV kernel's resident tile
     * from blocks with the same readers: s2_schedule_pack_gathered_kv) */
    if (bwd)
        bwd_wide_tiles(spec, p);
    if (spec->kv_gather == 0)
        spec->kv_gather = wg && p->block_size == 16 && spec->block_m == 64 &&
                                  (spec->block_n == 0 || spec->block_n == 64) ? 4 : 1;
    if (spec->kv_gather > 1 && spec->block_n == 0)
        spec->block_n = spec->kv_gather * p->block_size;
    if (spec->kv_gather > 1 && (!wg || spec->kv_gather != 4 || p->block_size != 16 || spec->block_m != 64 ||
                                spec->block_n != 64))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED,
                       "spec: the gathered backward (kv_gather %d) takes 4 blocks of 16 tokens, block_m and "
                       "block_n 64, and the wgmma bodies", spec->kv_gather);
    if (spec->kv_gather <= 1)
        spec->kv_gather = 0;
    /* the forward past 128 columns (Q read from shared memory, O's D/2
     * registers): 32-key tiles, so that S and its addresses fit beside O
     * without spills at 192 and 256 (FA2 likewise narrows its key tiles) */
    bool wide_d = !bwd && spec->head_dim > S2_FWD_Q_REGS_MAX_D;
    if (spec->block_n == 0)
        spec->block_n = p->block_size <= 16 ? (wg ? 32 : 16) : wide_d ? 32 : 64;
    if (!s2_template_pow2_in(spec->block_n, 16, 128))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: block_n %d (16, 32, 64 or 128)", spec->block_n);
    /* ... and one stage where two CTAs of two stages would not share an SM
     * but two of one do (sm_80 from 224 columns): the other CTA's tile
     * hides the copies */
    if (spec->num_stages == 0 && wide_d) {
        int limit = s2_template_smem_limit(spec->arch);
        spec->num_stages = 2;
        if (2 * s2_fwd_smem_bytes(p, spec) > limit) {
            spec->num_stages = 1;
            if (2 * s2_fwd_smem_bytes(p, spec) > limit)
                spec->num_stages = 2;
        }
    }
    if ((st = s2_template_fa2_stages_tiles(ctx, spec, p, bwd)) != S2_OK)
        return st;
    /* the wgmma backward bodies (one warpgroup: 4 warps, block_m 64) by
     * default on sm_90a, faster than mma.sync on every measured row */
    if (spec->bwd_wgmma > 0 && spec->num_warps != 4)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: the wgmma backward runs one warpgroup (block_m 64, 4 warps)");
    spec->bwd_wgmma = !wg_ok ? 0 : wg ? 1 : -1;
    if (spec->bwd_tma > 0 && !wg)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: the backward's TMA copies need the wgmma backward (sm_90a)");
    /* TMA by default: the per-thread cp.async refill and its proxy fence
     * were a fifth of the dK/dV kernel's warp-state samples (run 96) */
    spec->bwd_tma = !wg ? 0 : spec->bwd_tma < 0 ? -1 : 1;
    int smem = bwd ? s2_bwd_smem_bytes(p, spec) : s2_fwd_smem_bytes(p, spec);
    if (smem > s2_template_smem_limit(spec->arch))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: %d bytes of shared memory exceed %s's %d", smem,
                       s2_arch_cpu((s2_arch)spec->arch), s2_template_smem_limit(spec->arch));
    return S2_OK;
}


/* Decode's K/V pages: the query's dtype, or a dtype row decode converts from (kv_pages: e4m3). */
static bool kv_pages_ok(const s2_kspec *s)
{
    const s2_dtype_info *r = s2_dtype_info_of(s->kv_dtype);
    return s->kv_dtype == 0 || (r && r->kv_pages);
}

static bool accepts_decode(const s2_kspec *s) { return s->kind == S2_KERNEL_DECODE && mma16(s) && kv_pages_ok(s); }
static bool accepts_fwd(const s2_kspec *s) { return s->kind == S2_KERNEL_FWD && mma16(s); }
static bool accepts_bwd(const s2_kspec *s) { return s->kind == S2_KERNEL_BWD && mma16(s); }
static bool accepts_fwd_fp8(const s2_kspec *s) { return s->kind == S2_KERNEL_FWD && s->dtype == S2_DTYPE_E4M3; }

static s2_kernel_record record(s2_kernel_role role, s2_abi_id abi, int threads, int smem, const s2_kspec *spec)
{
    return (s2_kernel_record){.role = role, .abi = abi, .grid = s2_role_grid(role, abi), .threads = threads,
                              .smem_bytes = smem, .spec = *spec};
}

/* A forward's main record comes first (the driver takes a wide variant's
 * from there); NAME_seqs and, with16, NAME_combine and NAME_rows, built once
 * per entry (build_entry), follow. */
int s2_template_kernels_fwd(const s2_kspec *s, s2_abi_id abi, int smem, bool with16, s2_kernel_record *out)
{
    int n = 0;
    out[n++] = record(S2_ROLE_FWD, abi, s->num_warps * 32, smem, s);
    out[n++] = record(S2_ROLE_FWD_SEQS, S2_ABI_SEQS, S2_SEQS_THREADS, 0, s);
    if (with16) {
        out[n++] = record(S2_ROLE_COMBINE, S2_ABI_COMBINE, S2_COMBINE_THREADS, 0, s);
        out[n++] = record(S2_ROLE_ROWS, S2_ABI_ROWS, S2_ROWS_THREADS, 0, s);
    }
    return n;
}

static int kernels_fwd_mma(const s2_pattern *p, const s2_kspec *s, s2_kernel_record *out)
{
    return s2_template_kernels_fwd(s, S2_ABI_FWD, s2_fwd_smem_bytes(p, s), true, out);
}

static int kernels_fwd_wgmma(const s2_pattern *p, const s2_kspec *s, s2_kernel_record *out)
{
    s2_abi_id abi = s->persistent > 0 ? S2_ABI_FWD_TMA_PERSISTENT : S2_ABI_FWD_TMA;
    return s2_template_kernels_fwd(s, abi, s2_fwd_sm90_smem_bytes(p, s), true, out);
}

/* fp8: e4m3 inputs, so no NAME_combine or NAME_rows */
static int kernels_fwd_fp8(const s2_pattern *p, const s2_kspec *s, s2_kernel_record *out)
{
    return s2_template_kernels_fwd(s, S2_ABI_FWD_TMA_FP8, s2_fwd_sm90_smem_bytes(p, s), false, out);
}

/* NAME_pre takes no shared memory; NAME_dqds and NAME_dqds2 take less than
 * the module's (more CTAs per SM), NAME_dqds2 a block of its own. */
static int kernels_bwd(const s2_pattern *p, const s2_kspec *s, s2_kernel_record *out)
{
    s2_abi_id abi = s->bwd_tma > 0 ? S2_ABI_BWD_TMA : S2_ABI_BWD;
    int threads = s->num_warps * 32, smem = s2_bwd_smem_bytes(p, s), n = 0;
    out[n++] = record(S2_ROLE_BWD_PRE, abi, threads, 0, s);
    out[n++] = record(S2_ROLE_BWD_DKDV, abi, threads, smem, s);
    out[n++] = record(S2_ROLE_BWD_DQ, abi, threads, smem, s);
    if (s2_bwd_ds_capable(p, s)) {
        out[n++] = record(S2_ROLE_BWD_DQDS, abi, threads, s2_bwd_dqds_smem_bytes(s), s);
        out[n++] = record(S2_ROLE_BWD_DQDS2, abi, S2_BWD_DQDS2_THREADS, s2_bwd_dqds2_smem_bytes(s), s);
    }
    out[n++] = record(S2_ROLE_ROWS, S2_ABI_ROWS, S2_ROWS_THREADS, 0, s);   /* built once (build_entry) */
    return n;
}

static int kernels_decode(const s2_pattern *p, const s2_kspec *s, s2_kernel_record *out)
{
    out[0] = record(S2_ROLE_DECODE, S2_ABI_DECODE, s->num_warps * 32, s2_decode_smem_bytes(p, s), s);
    out[1] = record(S2_ROLE_COMBINE, S2_ABI_COMBINE, S2_COMBINE_THREADS, 0, s);
    return 2;
}

/* Keys per query tile of the main schedule from which the wide variant
 * pays for its 128-row tiles (dead pairs, one CTA per SM): it won down to
 * 409, the shortest measured at d128 (runs 76-77; history in bench/NOTES.md). */
enum { WIDE_MIN_KEYS = 384 };

/* The wide variant NAME_w of a forward built with the default spec (asked
 * all zero): 128 x 128 tiles, two consumer warpgroups at one CTA per SM,
 * each key tile two live 64-token blocks gathered by the schedule, 3
 * stages, on the persistent grid but for dense patterns.  It wins where
 * lists are long and loses where they are short (runs 39, 51), so the
 * module holds both and the runtime picks by list length (WIDE_MIN_KEYS).
 * Measured at d128; the head dims whose rows are the same two 64-column
 * blocks in shared memory (80 to 128: same bytes, same O registers) take it
 * too; above, its 3 stages of 128-key tiles do not fit.  Up to d64 the
 * sparse patterns' wide tile is 64 x 128 (faster than 128 x 128 there). */
static int variants_fwd_wgmma(const s2_pattern *p, const s2_kspec *asked, const s2_kspec *resolved, s2_variant *out)
{
    if (asked->block_m || asked->block_n || asked->num_warps || asked->num_stages || asked->kv_gather ||
        asked->persistent > 0)
        return 0;
    bool narrow = resolved->head_dim <= 64;
    if (resolved->persistent > 0 || resolved->head_dim > 128 || p->block_size != 64 ||
        (narrow && s2_pattern_is_dense(p)))
        return 0;
    out[0] = (s2_variant){.role = S2_ROLE_FWD_WIDE, .spec = *asked, .min_keys = WIDE_MIN_KEYS};
    s2_kspec *w = &out[0].spec;
    w->block_m = narrow ? 64 : 128;
    w->block_n = 128;
    w->num_warps = narrow ? 8 : 12;
    w->num_stages = 3;
    w->kv_gather = 2;
    w->persistent = s2_pattern_is_dense(p) ? -1 : 1;
    return 1;
}

#define DT(t) S2_TEMPLATE_DTYPE(S2_DTYPE_##t)
#define HD(d) S2_TEMPLATE_HEAD_DIM(d)
#define ABI(a) (1u << S2_ABI_##a)
static const unsigned dt16 = DT(BF16) | DT(F16);

/* decode: every multiple of 16 from 16 to 256 */
static const s2_template decode = {"decode", S2_KERNEL_DECODE, dt16, (HD(256) << 1) - HD(16),
    ABI(DECODE) | ABI(COMBINE), accepts_decode, resolve_decode, s2_decode_smem_bytes, kernels_decode, NULL,
    s2_decode_build, NULL, NULL};
static const s2_template fwd_wgmma = {"fwd_wgmma", S2_KERNEL_FWD, dt16,
    HD(16) | HD(32) | HD(48) | HD(64) | HD(80) | HD(96) | HD(112) | HD(128) | HD(144) | HD(160) | HD(176) | HD(192) |
        HD(208) | HD(224) | HD(240) | HD(256),
    ABI(FWD_TMA) | ABI(FWD_TMA_PERSISTENT) | ABI(SEQS) | ABI(COMBINE) | ABI(ROWS),
    s2_fwd_spec_wants_tma, resolve_tma, s2_fwd_sm90_smem_bytes, kernels_fwd_wgmma, variants_fwd_wgmma,
    s2_fwd_sm90_build, s2_fwd_entry_build, NULL};
/* e4m3 on sm_90a (resolve_fp8 refuses other archs): head dims in whole 32-byte k steps */
static const s2_template fwd_wgmma_fp8 = {"fwd_wgmma_fp8", S2_KERNEL_FWD, DT(E4M3),
    HD(32) | HD(64) | HD(96) | HD(128) | HD(160) | HD(192) | HD(224) | HD(256), ABI(FWD_TMA_FP8) | ABI(SEQS),
    accepts_fwd_fp8, resolve_fp8, s2_fwd_sm90_smem_bytes, kernels_fwd_fp8, NULL, s2_fwd_sm90_build,
    s2_fwd_entry_build, NULL};
/* every multiple of 16 from 16 to 256 */
#define HD_ALL (HD(16) | HD(32) | HD(48) | HD(64) | HD(80) | HD(96) | HD(112) | HD(128) | HD(144) | HD(160) | \
                HD(176) | HD(192) | HD(208) | HD(224) | HD(240) | HD(256))
static const s2_template fwd_mma = {"fwd_mma", S2_KERNEL_FWD, dt16, HD_ALL,
    ABI(FWD) | ABI(SEQS) | ABI(COMBINE) | ABI(ROWS), accepts_fwd, resolve_mma, s2_fwd_smem_bytes, kernels_fwd_mma, NULL,
    s2_fwd_build, s2_fwd_entry_build, NULL};
#define HD_16_TO_256 ((HD(256) << 1) - HD(16))   /* every multiple of 16 from 16 to 256 */
static const s2_template bwd = {"bwd", S2_KERNEL_BWD, dt16, HD_16_TO_256, ABI(BWD) | ABI(BWD_TMA) | ABI(ROWS),
    accepts_bwd, resolve_mma, s2_bwd_smem_bytes, kernels_bwd, NULL, s2_bwd_build, s2_rows_entry_build, NULL};

/* Entries defined in their template's own file (one line here each). */
extern const s2_template s2_template_row_softmax;   /* templates/softmax.c */
extern const s2_template s2_template_fwd_tf32;      /* templates/fwd_tf32.c */

/* Asked in order: the first that accepts a spec builds it. */
static const s2_template *const templates[] = {&decode, &fwd_wgmma, &fwd_wgmma_fp8, &fwd_mma, &s2_template_fwd_tf32,
                                                &bwd, &s2_template_row_softmax};

int s2_template_count(void) { return (int)(sizeof templates / sizeof templates[0]); }

const s2_template *s2_template_at(int i) { return i >= 0 && i < s2_template_count() ? templates[i] : NULL; }

/* An attention template takes a spec of its kind, dtype and head dim that its accepts() holds for. */
static bool takes(const s2_template *t, const s2_kspec *spec)
{
    return t->accepts && t->kind == spec->kind && (unsigned)spec->dtype < 32 && S2_TEMPLATE_HEAD_DIM_OK(spec->head_dim) &&
           (spec->kv_dtype == 0 || spec->kind == S2_KERNEL_DECODE) &&
           (t->dtypes & S2_TEMPLATE_DTYPE(spec->dtype)) &&
           (t->head_dims & S2_TEMPLATE_HEAD_DIM(spec->head_dim)) && t->accepts(spec);
}

const s2_template *s2_template_for(const s2_kspec *spec)
{
    for (int i = 0; spec && i < s2_template_count(); i++)
        if (takes(templates[i], spec))
            return templates[i];
    return NULL;
}

/* "a, b or c" of the set bits of mask, each as name(bit) */
static void list_of(char *out, size_t cap, unsigned mask, int scale, bool dtype)
{
    size_t o = 0;
    int n = 0, total = 0;
    out[0] = '\0';
    for (unsigned b = 0; b < 32; b++)
        total += (mask >> b) & 1u;
    for (unsigned b = 0; b < 32 && o < cap; b++) {
        if (!((mask >> b) & 1u))
            continue;
        const char *sep = n == 0 ? "" : n == total - 1 ? " or " : ", ";
        if (dtype)
            o += (size_t)snprintf(out + o, cap - o, "%s%s", sep, s2_dtype_name((s2_dtype)b));
        else
            o += (size_t)snprintf(out + o, cap - o, "%s%u", sep, b * (unsigned)scale);
        n++;
    }
}

s2_status s2_template_pick(s2_ctx *ctx, const s2_kspec *spec, const s2_template **out)
{
    unsigned dtypes = 0, head_dims = 0;
    for (int i = 0; i < s2_template_count(); i++)
        if (templates[i]->accepts && templates[i]->kind == spec->kind) {
            dtypes |= templates[i]->dtypes;
            head_dims |= templates[i]->head_dims;
        }
    char names[128];
    if ((unsigned)spec->dtype >= 32 || !(dtypes & S2_TEMPLATE_DTYPE(spec->dtype))) {
        list_of(names, sizeof names, dtypes, 1, true);
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: dtype %s (%s only)", s2_dtype_name(spec->dtype), names);
    }
    if (spec->kv_dtype != 0 && (spec->kind != S2_KERNEL_DECODE || !kv_pages_ok(spec)))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: kv_dtype %s (decode only: 0 = dtype, or e4m3)",
                       s2_dtype_name(spec->kv_dtype));
    if (!S2_TEMPLATE_HEAD_DIM_OK(spec->head_dim) || !(head_dims & S2_TEMPLATE_HEAD_DIM(spec->head_dim))) {
        list_of(names, sizeof names, head_dims, 16, false);
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: head_dim %d (%s)", spec->head_dim, names);
    }
    if (!(*out = s2_template_for(spec)))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: no template builds a %s kernel of head_dim %d",
                       spec->kind == S2_KERNEL_BWD ? "backward" : spec->kind == S2_KERNEL_DECODE ? "decode"
                                                                                                 : "forward",
                       spec->head_dim);
    return S2_OK;
}

const s2_template *s2_template_named(const char *name)
{
    for (int i = 0; name && i < s2_template_count(); i++)
        if (strcmp(templates[i]->name, name) == 0)
            return templates[i];
    return NULL;
}
