/* Attention kernels: the spec heuristic, names, and the compile driver that
 * builds a template, embeds the manifest and assembles the module. */
#include "cg_internal.h"
#include "s2c/attention.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool pow2_in(int v, int lo, int hi) { return v >= lo && v <= hi && (v & (v - 1)) == 0; }

/* Dynamic shared memory a CTA may opt in to (sm_80: A100's 163 KB;
 * sm_90: 227 KB). */
static int smem_limit(int arch) { return arch == S2_ARCH_SM80 ? 163 * 1024 : 227 * 1024; }

/* sm_90a, head dim 64 or 128 and tunables the wgmma template takes: that
 * template (templates/fwd_sm90.c); anything else keeps the sm_80 one. */
bool s2_fwd_spec_wants_tma(const s2_kernel_spec *s)
{
    if (s->kind != S2_KERNEL_FWD || s->arch != S2_ARCH_SM90A || (s->head_dim != 64 && s->head_dim != 128))
        return false;
    if (s->block_m != 0 && s->block_m != 64 && s->block_m != 128)
        return false;
    if (s->num_warps != 0 && s->num_warps != 8 && s->num_warps != 12)
        return false;
    if (s->block_m != 0 && s->num_warps != 0 && s->num_warps != 4 * (s->block_m / 64 + 1))
        return false;
    if (s->num_stages == 1)
        return false;
    return s->block_n == 0 || pow2_in(s->block_n, 16, 128);
}

/* Warp-specialised tiling: a producer warpgroup plus block_m / 64 consumer
 * warpgroups (num_warps = 4 * (1 + block_m / 64)).  Default 64 x 64 with 3
 * stages: measured on an H200, d128, block 64 (bench/RESULTS.md) 64 x 64 st3
 * 0.436 ms < st2 0.481 < 128 x 64 st3 0.509 < st2 0.601; block_n 128 was
 * slower everywhere (a 128-key tile over 64-key pattern blocks computes
 * dead halves). */
static s2_status resolve_tma(s2_ctx *ctx, s2_kernel_spec *spec, const s2_pattern *p)
{
    /* dense patterns (every block of every head, blocks of 64+): 128 x 64
     * st3, two consumer warpgroups sharing each K/V tile, halves the K/V
     * bytes per pair; the 128-row tile costs nothing there (it computes dead
     * pairs only on sparse patterns: b64_8k 0.473 vs 0.436 ms).  Dense 8K,
     * d128, H100 (bench/RESULTS.md 2026-11-25, runs 10-12): medians
     * 1.88-2.02 ms (min 1.87) against a steady 2.04 (min 2.02) for 64 x 64
     * st3; st4 measured the same within that spread. */
    if (spec->block_m == 0 && spec->block_n == 0 && spec->num_warps == 0 && spec->kv_gather == 0 &&
        spec->head_dim == 128 && p->block_size >= 64 && s2_pattern_is_dense(p)) {
        spec->block_m = 128;
        spec->block_n = 64;
        spec->kv_gather = 1;
    }
    if (spec->block_m == 0)
        spec->block_m = spec->num_warps ? 64 * (spec->num_warps / 4 - 1) : 64;
    spec->num_warps = 4 * (spec->block_m / 64 + 1);
    /* block-16 patterns (Merge-Q): 64-key tiles gathered from 4 live blocks,
     * 0.542 ms vs 0.761 for 64 x 32 (H200, bench/RESULTS.md 2026-11-22) */
    if (spec->kv_gather == 0)
        spec->kv_gather = p->block_size == 16 && (spec->block_n == 0 || spec->block_n == 64) ? 4 : 1;
    if (spec->kv_gather > 1 && spec->block_n == 0)
        spec->block_n = spec->kv_gather * p->block_size;
    /* block-16 patterns (Merge-Q): 64 x 32 st3 0.761 ms < 64 x 16 0.834 < 64 x 64 0.842 */
    if (spec->block_n == 0)
        spec->block_n = p->block_size <= 16 ? 32 : 64;
    if (spec->num_stages == 0)
        spec->num_stages = 3;
    if (spec->num_stages < 2 || spec->num_stages > 4)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: num_stages %d (2..4 for sm_90a)", spec->num_stages);
    /* one CTA per tile by default: the persistent grid measured slower on an
     * H200 (bench/RESULTS.md, 2026-11-22, persistent grid) */
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
    if (smem > smem_limit(spec->arch))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: %d bytes of shared memory exceed sm_90a's %d", smem,
                       smem_limit(spec->arch));
    return S2_OK;
}

/* Decode: num_warps 16-key chunks per tile (default 4: 64 keys), a ring of
 * num_stages tiles (default 3: 2 CTAs of 100 KB fit an SM at d128, so a
 * CTA's loads overlap the other's merge); block_m is the 16-row mma tile. */
static s2_status resolve_decode(s2_ctx *ctx, s2_kernel_spec *spec, const s2_pattern *p)
{
    if (p->heads / p->kv_heads > 16)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: decode packs a GQA group into 16 rows; %d heads per kv head",
                       p->heads / p->kv_heads);
    if (p->block_size < 16)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: decode needs blocks of 16+ tokens");
    if (spec->num_warps == 0)
        spec->num_warps = 4;
    if (spec->num_warps != 2 && spec->num_warps != 4 && spec->num_warps != 8)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: decode num_warps %d (2, 4 or 8)", spec->num_warps);
    if (spec->num_stages == 0)
        spec->num_stages = 3;
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
    if (smem > smem_limit(spec->arch))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: %d bytes of shared memory exceed %s's %d", smem,
                       s2_arch_cpu((s2_arch)spec->arch), smem_limit(spec->arch));
    return S2_OK;
}

s2_status s2_kernel_spec_resolve(s2_ctx *ctx, s2_kernel_spec *spec, const s2_pattern *p)
{
    if (!spec || !p || !p->rules || p->heads < 1 || p->kv_heads < 1)
        return s2_fail(ctx, S2_ERR_INVALID, "spec: null spec or unresolved pattern");
    if (p->heads % p->kv_heads != 0)
        return s2_fail(ctx, S2_ERR_INVALID, "spec: %d heads are not a multiple of %d kv heads", p->heads, p->kv_heads);
    bool bwd = spec->kind == S2_KERNEL_BWD, dec = spec->kind == S2_KERNEL_DECODE;
    if (spec->kind != S2_KERNEL_FWD && !bwd && !dec)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: kernel kind %d is not generated yet", (int)spec->kind);
    if (spec->dtype != S2_DTYPE_BF16 && spec->dtype != S2_DTYPE_F16)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: dtype %s (bf16 or f16 only)", s2_dtype_name(spec->dtype));
    if (spec->head_dim != 32 && spec->head_dim != 64 && spec->head_dim != 96 && spec->head_dim != 128)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: head_dim %d (32, 64, 96 or 128)", spec->head_dim);
    if (bwd && (spec->head_dim == 96 || p->block_size < 16))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: the backward takes head_dim 32, 64 or 128 and blocks of 16+ tokens");
    if (!s2_arch_cpu((s2_arch)spec->arch))
        return s2_fail(ctx, S2_ERR_INVALID, "spec: invalid arch %d", spec->arch);

    if (dec)
        return resolve_decode(ctx, spec, p);
    if (s2_fwd_spec_wants_tma(spec))
        return resolve_tma(ctx, spec, p);
    bool wg_ok = bwd && spec->arch == S2_ARCH_SM90A && (spec->head_dim == 64 || spec->head_dim == 128);
    if (!wg_ok && spec->bwd_wgmma > 0)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: the wgmma backward needs sm_90a and head_dim 64 or 128");

    if (spec->persistent > 0)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: a persistent grid needs the sm_90a forward template");
    spec->persistent = 0;
    if (spec->kv_gather > 1 && !wg_ok)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: gathered key tiles need the sm_90a forward or wgmma backward");

    /* FA2 tiling: each warp owns one 16-row slab, so block_m = 16 * num_warps */
    if (spec->num_warps == 0)
        spec->num_warps = spec->block_m ? spec->block_m / 16 : 4;
    if (spec->block_m == 0)
        spec->block_m = 16 * spec->num_warps;
    if (!pow2_in(spec->block_m, 16, 128) || spec->block_m != 16 * spec->num_warps)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED,
                       "spec: block_m %d with %d warps (block_m = 16 * num_warps, 16..128)", spec->block_m,
                       spec->num_warps);
    /* Measured on an H200, d128 (bench/RESULTS.md): 64 x 64 with 2 stages
     * is the fastest for block 64 (8 warps, block_m 128, block_n 32 or 128
     * and 3 stages were all slower); for block-16 patterns (Merge-Q) a key
     * tile of one pattern block (block_n 16) beat 32 and 64, as a tile's
     * columns then carry no dead vertical-stripe keys.  Other head dims
     * follow the same rule, unmeasured.  The wgmma backward's dQ kernel on
     * Merge-Q measured 3% faster with 32 than 16 (one H200 run, 2026-11-22:
     * m64n16 wgmmas are short). */
    bool wg = wg_ok && spec->bwd_wgmma >= 0 && spec->num_warps == 4;
    /* The wgmma backward on block-16 patterns (Merge-Q): key tiles of 4
     * pattern blocks gathered by the schedule in both kernels (the dQ
     * kernel's from its query tile's list, the dK/dV kernel's resident tile
     * from blocks with the same readers: s2_schedule_pack_gathered_kv) */
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
    if (spec->block_n == 0)
        spec->block_n = p->block_size <= 16 ? (wg ? 32 : 16) : 64;
    if (!pow2_in(spec->block_n, 16, 128))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: block_n %d (16, 32, 64 or 128)", spec->block_n);
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
    /* The wgmma backward bodies (one warpgroup: 4 warps, block_m 64) on
     * sm_90a by default: the backward measured 1.6-2.1x faster than the
     * mma.sync one on the block-64 rows, 1.46x on Merge-Q (H200,
     * bench/RESULTS.md, 2026-11-22). */
    if (spec->bwd_wgmma > 0 && spec->num_warps != 4)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: the wgmma backward runs one warpgroup (block_m 64, 4 warps)");
    spec->bwd_wgmma = !wg_ok ? 0 : wg ? 1 : -1;
    if (spec->bwd_tma > 0 && !wg)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: the backward's TMA copies need the wgmma backward (sm_90a)");
    /* measured on an H200 (bench/RESULTS.md run 96): the dK/dV kernel's
     * per-thread cp.async refill and its proxy fence were a fifth of its
     * warp-state samples */
    spec->bwd_tma = !wg ? 0 : spec->bwd_tma < 0 ? -1 : 1;
    int smem = bwd ? s2_bwd_smem_bytes(p, spec) : s2_fwd_smem_bytes(p, spec);
    if (smem > smem_limit(spec->arch))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: %d bytes of shared memory exceed %s's %d", smem,
                       s2_arch_cpu((s2_arch)spec->arch), smem_limit(spec->arch));
    return S2_OK;
}

/* s2_fwd_ / s2_bwd_<pattern>_<dtype>_d<D>, identifier characters only. */
static void kernel_name(char *out, size_t cap, const s2_pattern *p, const s2_kernel_spec *spec)
{
    const char *pn = p->name && p->name[0] ? p->name : "pattern";
    size_t n = (size_t)snprintf(out, cap, spec->kind == S2_KERNEL_BWD ? "s2_bwd_" : spec->kind == S2_KERNEL_DECODE ? "s2_dec_" : "s2_fwd_");
    for (const char *s = pn; *s && n + 1 < cap - 16; s++) {
        char c = *s;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        out[n++] = ok ? c : '_';
    }
    snprintf(out + n, cap - n, "_%s_d%d", s2_dtype_name(spec->dtype), spec->head_dim);
}

/* One pattern's kernel: its resolved spec, symbol and launch shape. */
typedef struct set_kernel {
    s2_kernel_spec spec;
    char name[128];
    bool has_wide;               /* NAME_w (wide_variant) */
    s2_kernel_spec wide;
    char wide_name[132];
} set_kernel;

/* The wide variant of a forward built with the default spec (spec_in all
 * zero): 128 x 128 tiles, two consumer warpgroups at one CTA per SM, each
 * key tile two live 64-token blocks gathered by the schedule, 3 stages.  On
 * an H200 (bench/RESULTS.md, run 39) it ran 128K 8.64 against 9.28 ms,
 * b64_l16v8_16k 1.76 against 1.82, dense 8K 1.72 against 1.99 (128 x 64),
 * and lost where the lists are short (b64_8k 0.468 against 0.419: the
 * 128-row union lists compute dead pairs, one CTA per SM hides less); so
 * the module holds both and the runtime picks by list length.  On the
 * persistent grid (the next tile's Q and K/V loaded under the current
 * tile's end, which no second CTA covers at one CTA per SM) it ran b64_32k
 * 0.694 against 0.719 ms and b64_l16v8_16k 1.671 against 1.684, 128K the
 * same within the spread, and dense 8K 1.66 against 1.63 (run 51): the
 * persistent grid but for dense patterns. */
static bool wide_variant(s2_ctx *ctx, const s2_pattern *p, const s2_kernel_spec *spec_in,
                         const s2_kernel_spec *resolved, s2_kernel_spec *out)
{
    if (spec_in->block_m || spec_in->block_n || spec_in->num_warps || spec_in->num_stages ||
        spec_in->kv_gather || spec_in->persistent > 0)
        return false;
    if (!s2_fwd_spec_wants_tma(resolved) || resolved->persistent > 0 || resolved->head_dim != 128 ||
        p->block_size != 64)
        return false;
    *out = *spec_in;
    out->block_m = 128;
    out->block_n = 128;
    out->num_warps = 12;
    out->num_stages = 3;
    out->kv_gather = 2;
    out->persistent = s2_pattern_is_dense(p) ? -1 : 1;
    /* a variant that does not resolve (shared memory) is left out */
    if (s2_kernel_spec_resolve(ctx, out, p) != S2_OK) {
        s2_ctx_clear(ctx);
        return false;
    }
    return true;
}

/* The pattern whose wide variant the kernel `name` is, or -1. */
static int wide_of(const set_kernel *ks, int n, const char *name)
{
    for (int j = 0; j < n; j++)
        if (ks[j].has_wide && strcmp(name, ks[j].wide_name) == 0)
            return j;
    return -1;
}

static s2_status resolve_set(s2_ctx *ctx, const s2_pattern *const *patterns, int n, const s2_kernel_spec *spec_in,
                             set_kernel *ks, s2_manifest_kernel *mk)
{
    for (int i = 0; i < n; i++) {
        ks[i].spec = *spec_in;
        if (!patterns[i])
            return s2_fail(ctx, S2_ERR_INVALID, "compile_attention: pattern %d is null", i);
        s2_status st = s2_kernel_spec_resolve(ctx, &ks[i].spec, patterns[i]);
        if (st != S2_OK) {
            /* name the pattern whose tile does not fit (the message is copied: s2_fail writes over it) */
            char why[512];
            snprintf(why, sizeof why, "%s", s2_ctx_message(ctx));
            return s2_fail(ctx, st, "pattern %s: %s", patterns[i]->name ? patterns[i]->name : "", why);
        }
        if (ks[i].spec.arch != ks[0].spec.arch)
            return s2_fail(ctx, S2_ERR_INVALID, "compile_attention: one module holds one arch");
        kernel_name(ks[i].name, sizeof ks[i].name, patterns[i], &ks[i].spec);
        /* pattern names differing only in non-identifier characters map to one symbol */
        for (int j = 0; j < i; j++)
            if (strcmp(ks[i].name, ks[j].name) == 0)
                return s2_fail(ctx, S2_ERR_INVALID, "patterns '%s' and '%s' both give kernel %s", patterns[j]->name,
                               patterns[i]->name, ks[i].name);
        int smem = ks[i].spec.kind == S2_KERNEL_DECODE ? s2_decode_smem_bytes(patterns[i], &ks[i].spec)
                   : ks[i].spec.kind == S2_KERNEL_BWD ? s2_bwd_smem_bytes(patterns[i], &ks[i].spec)
                   : s2_fwd_spec_wants_tma(&ks[i].spec)       ? s2_fwd_sm90_smem_bytes(patterns[i], &ks[i].spec)
                                                   : s2_fwd_smem_bytes(patterns[i], &ks[i].spec);
        mk[i] = (s2_manifest_kernel){.name = ks[i].name, .pattern = patterns[i]->name ? patterns[i]->name : "",
                                     .spec = ks[i].spec, .threads = ks[i].spec.num_warps * 32, .smem_bytes = smem,
                                     .abi = !s2_fwd_spec_wants_tma(&ks[i].spec) ? S2_FWD_ABI_PTRS
                                            : ks[i].spec.persistent > 0   ? S2_FWD_ABI_TMA_PERSISTENT
                                                                          : S2_FWD_ABI_TMA,
                                     .seqinfo = ks[i].spec.kind == S2_KERNEL_FWD};
        ks[i].has_wide = wide_variant(ctx, patterns[i], spec_in, &ks[i].spec, &ks[i].wide);
        if (ks[i].has_wide) {
            snprintf(ks[i].wide_name, sizeof ks[i].wide_name, "%s%s", ks[i].name, S2_WIDE_SUFFIX);
            mk[i].has_wide = true;
            mk[i].wide_spec = ks[i].wide;
            mk[i].wide_threads = ks[i].wide.num_warps * 32;
            mk[i].wide_smem_bytes = s2_fwd_sm90_smem_bytes(patterns[i], &ks[i].wide);
        }
    }
    return S2_OK;
}

s2_status s2_compile_attention_set(s2_ctx *ctx, const char *module_name, const s2_pattern *const *patterns, int n,
                                   const s2_kernel_spec *spec_in, s2_cubin_backend backend, s2_artifact **out)
{
    if (!out || !spec_in || !patterns || n < 1)
        return s2_fail(ctx, S2_ERR_INVALID, "compile_attention: null argument or no pattern");
    *out = NULL;
    set_kernel *ks = calloc((size_t)n, sizeof *ks);
    s2_manifest_kernel *mk = calloc((size_t)n, sizeof *mk);
    s2_artifact *art = NULL;
    s2_cg cg;
    memset(&cg, 0, sizeof cg);
    s2_status st = ks && mk ? S2_OK : s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    if (st == S2_OK)
        st = resolve_set(ctx, patterns, n, spec_in, ks, mk);
    if (st != S2_OK)
        goto done;

    s2_target target;
    s2_target_default(&target, (s2_arch)ks[0].spec.arch);
    art = s2_artifact_new(&target, module_name ? module_name : n == 1 ? ks[0].name : "s2_attention_set");
    if (!art) {
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
        goto done;
    }
    art->spec = ks[0].spec;
    art->threads_per_block = mk[0].threads;
    art->rows_per_block = ks[0].spec.block_m;
    art->smem_bytes = mk[0].smem_bytes;
    st = s2_manifest_format(ctx, ks[0].spec.arch, mk, n, patterns, n, &art->manifest);
    if (st == S2_OK)
        st = s2_cg_init(ctx, &cg, &target, art->name);
    for (int i = 0; i < n && st == S2_OK; i++)
        st = ks[i].spec.kind == S2_KERNEL_DECODE ? s2_decode_build(ctx, &cg, patterns[i], &ks[i].spec, ks[i].name)
             : ks[i].spec.kind == S2_KERNEL_BWD ? s2_bwd_build(ctx, &cg, patterns[i], &ks[i].spec, ks[i].name)
             : s2_fwd_spec_wants_tma(&ks[i].spec)        ? s2_fwd_sm90_build(ctx, &cg, patterns[i], &ks[i].spec, ks[i].name)
                                              : s2_fwd_build(ctx, &cg, patterns[i], &ks[i].spec, ks[i].name);
    for (int i = 0; i < n && st == S2_OK; i++)
        if (ks[i].has_wide)
            st = s2_fwd_sm90_build(ctx, &cg, patterns[i], &ks[i].wide, ks[i].wide_name);
    if (st == S2_OK)
        st = s2_cg_add_manifest(ctx, &cg, art->manifest);
    if (st == S2_OK)
        st = s2_cg_finish(ctx, &cg, backend, art);
    /* the assembler lists the kernels in its own order: the primary kernels
     * first (art->kernels[0] of a one-pattern forward is its kernel), wide
     * variants after them */
    for (int i = 0, placed = 0; st == S2_OK && i < art->num_kernels; i++) {
        if (wide_of(ks, n, art->kernels[i].name) >= 0)
            continue;
        s2_kernel_info keep = art->kernels[i];
        memmove(&art->kernels[placed + 1], &art->kernels[placed], (size_t)(i - placed) * sizeof *art->kernels);
        art->kernels[placed++] = keep;
    }
    /* a backward entry is three kernels, NAME_pre / _dq / _dkdv; a forward's
     * wide variant NAME_w has its own launch shape */
    for (int i = 0; st == S2_OK && i < art->num_kernels; i++) {
        int w = wide_of(ks, n, art->kernels[i].name);
        for (int j = 0; j < n; j++)
            if (strncmp(art->kernels[i].name, ks[j].name, strlen(ks[j].name)) == 0)
                art->kernels[i].max_threads = j == w ? mk[j].wide_threads : mk[j].threads;
    }
done:
    s2_cg_destroy(&cg);
    if (st == S2_OK)
        *out = art;
    else
        s2_artifact_free(art);
    free(ks);
    free(mk);
    return st;
}

s2_status s2_compile_attention(s2_ctx *ctx, const s2_pattern *pattern, const s2_kernel_spec *spec,
                               s2_cubin_backend backend, s2_artifact **out)
{
    return s2_compile_attention_set(ctx, NULL, &pattern, 1, spec, backend, out);
}
