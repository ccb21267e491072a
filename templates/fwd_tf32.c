/* The S2 block-sparse attention forward on fp32 tensors: the mma.sync
 * forward of fwd.c (same ABI, schedule, grid, masks and online softmax,
 * flash.h) with fp32 tiles in shared memory and the products on the tensor
 * cores of the dtype row's mma (tf32: mma.sync m16n8k8, f32 accumulators),
 * as the S2 Triton library computes fp32 by default.  O is stored in fp32,
 * LSE in fp32.
 *
 * Fragments (PTX ISA 9.7.14.5.7, m16n8k8 .tf32): A a0 (g, t4), a1 (g+8, t4),
 * a2 (g, t4+4), a3 (g+8, t4+4); B b0 (k t4, n g), b1 (k t4+4, n g).  Q and K
 * come by ldmatrix (an 8 x 8 b16 matrix is 8 rows of 4 fp32: lane l gets row
 * l/4, word l%4, the A / B layout).  P·V runs over a permuted key order:
 * k-index t4 is key 2·t4 and t4+4 is key 2·t4+1 of the 8-key step, so P's
 * A fragment is the score accumulator as it stands (c0, c2, c1, c3), and
 * over a permuted column order: n-index g of n-tile 4G + j is column
 * 32G + 4g + j, so one 16-byte shared load of row 2·t4 (and one of
 * 2·t4 + 1) gives V's B fragments of four n-tiles, conflict-free under the
 * 128-byte swizzle (rows 2·t4 + j XOR chunks g), and a thread's O
 * accumulators of a row are 8 consecutive columns, 32G + 8·t4 + 4e + j
 * (head dims that are not a multiple of 32 end with a group of two
 * n-tiles: 8-byte loads, 4 columns).  Q, K and P are rounded to nearest
 * tf32 (to_tf32): truncated K would bias every score, and so the LSE, by
 * -2^-11 relative on average; V enters as stored (the tensor cores read the
 * tf32 bits of an fp32 operand), a bias of O within tf32's own rounding. */
#include "fwd_common.h"
#include "s2c/launch.h"
#include "template.h"
#include "s2c/layout.h"

#include <string.h>

enum { MAX_D = 256, MAX_BN = S2_FWD_MAX_BN, ESIZE = 4, ELTS_PER_CHUNK = 16 / ESIZE };
/* Q stays in registers up to this head dim; above it its fragments are
 * read from shared memory for each key n-tile (O alone takes D/2 registers). */
enum { QREG_MAX_D = 128 };

typedef struct tfk {
    S2_FWD_BASE;                                    /* shape, CTA state, accumulators (fwd_common.h) */
    bool q_regs;                                    /* Q's A-fragments kept in registers (D <= QREG_MAX_D) */
    bool rn;                                        /* round ties to even (sm_90's cvt.rn.tf32) */
    LLVMValueRef qf[QREG_MAX_D / 8][4];             /* Q A-fragments (q_regs) */
    LLVMValueRef q_row, q_hi;                       /* Q ldmatrix lane row and chunk parity */
} tfk;

static LLVMValueRef swizzle(tfk *k, LLVMValueRef row, LLVMValueRef chunk)
{
    return s2_flash_swizzle(k->cg, row, chunk, k->s.chunks);
}

static LLVMValueRef gep32(tfk *k, LLVMValueRef base, LLVMValueRef off)
{
    return LLVMBuildInBoundsGEP2(k->b, k->cg->t_f32, base, &off, 1, "");
}

/* An fp32 value as a tf32 operand, rounded to nearest: ties to even on
 * sm_90 (cvt.rn.tf32, one instruction), ties away on sm_80 (cvt.rna, the
 * only rounding it has: three instructions). */
static LLVMValueRef to_tf32(tfk *k, LLVMValueRef x)
{
    return s2_nv_intrinsic(k->cg, k->rn ? "llvm.nvvm.f2tf32.rn" : "llvm.nvvm.f2tf32.rna", k->cg->t_i32, &k->cg->t_f32,
                           1, &x);
}

/* Q A-fragment of k-step ks (8 columns) of this warp's slab, rounded to
 * tf32: ldmatrix.x4, lane l addressing row (l%8) + 8·((l/8)%2), chunk
 * 2·ks + l/16 (matrices a0..a3). */
static void q_fragment(tfk *k, int ks, LLVMValueRef out[4])
{
    LLVMValueRef ch = LLVMBuildAdd(k->b, k->q_hi, c32(k, 2 * ks), "");
    LLVMValueRef off = LLVMBuildAdd(k->b, c32(k, k->s.q_off), swizzle(k, k->q_row, ch), "");
    LLVMValueRef raw[4];
    s2_nv_ldmatrix_x4(k->cg, s2_nv_smem_at(k->cg, off), false, raw);
    for (int i = 0; i < 4; i++)
        out[i] = to_tf32(k, LLVMBuildBitCast(k->b, raw[i], k->cg->t_f32, ""));
}

static void q_lanes_init(tfk *k)
{
    LLVMBuilderRef b = k->b;
    k->q_row = LLVMBuildAdd(b, LLVMBuildShl(b, k->warp, c32(k, 4), ""),
        LLVMBuildAdd(b, LLVMBuildAnd(b, k->lane, c32(k, 7), ""), LLVMBuildAnd(b, k->lane, c32(k, 8), ""), ""), "qfrag_row");
    k->q_hi = LLVMBuildLShr(b, k->lane, c32(k, 4), "");
}

/* Lane parts of the K ldmatrix and the V word addresses, built before the loop. */
typedef struct kv_lanes {
    LLVMValueRef k_part[MAX_D / 16];
    int k_cst[MAX_D / 16];
    s2_fwd_lane_parts k_parts, v_parts[2];
    LLVMValueRef v_part[2][MAX_D / 32 + 1];   /* key row 2·t4 + j, column group G (header) */
    int v_cst[2][MAX_D / 32 + 1];
} kv_lanes;

/* V's column groups: n-tiles 4G..4G+3, and a last group of two where
 * D % 32 == 16; group G starts at n-tile 4G, column 32G. */
static int v_groups(const tfk *k) { return (k->s.D + 16) / 32; }
static int v_group_tiles(const tfk *k, int G) { return 4 * G + 4 <= k->s.D / 8 ? 4 : 2; }

static void kv_lanes_init(tfk *k, kv_lanes *L)
{
    LLVMBuilderRef b = k->b;
    memset(L, 0, sizeof *L);
    int row_bytes = k->s.chunks * 16;
    /* K (x4, two k-steps of 8): lane l -> key row l%8, chunk 4p + l/8 */
    LLVMValueRef k_row = LLVMBuildAnd(b, k->lane, c32(k, 7), "");
    LLVMValueRef k_lc = LLVMBuildLShr(b, k->lane, c32(k, 3), "");
    LLVMValueRef k_rowoff = LLVMBuildMul(b, k_row, c32(k, row_bytes), "");
    for (int p = 0; p < k->s.D / 16; p++)
        L->k_part[p] = LLVMBuildAdd(b, k_rowoff, s2_fwd_chunk_part(&k->fk, &L->k_parts, k_row, 4 * p, k_lc, &L->k_cst[p]), "");
    /* V: key row 2·t4 + j; group of four n-tiles: chunk 8G + g (16 bytes);
     * of two: chunk 8G + g/2, bytes 8·(g%2) (8 bytes) */
    LLVMValueRef half = LLVMBuildLShr(b, k->g, c32(k, 1), "");
    LLVMValueRef word2 = LLVMBuildShl(b, LLVMBuildAnd(b, k->g, c32(k, 1), ""), c32(k, 3), "");
    for (int j = 0; j < 2; j++) {
        LLVMValueRef v_row = LLVMBuildAdd(b, LLVMBuildShl(b, k->t4, c32(k, 1), ""), c32(k, j), "");
        LLVMValueRef rowoff = LLVMBuildMul(b, v_row, c32(k, row_bytes), "");
        for (int G = 0; G < v_groups(k); G++) {
            bool four = v_group_tiles(k, G) == 4;
            LLVMValueRef part = s2_fwd_chunk_part(&k->fk, &L->v_parts[j], v_row, 8 * G, four ? k->g : half,
                                                  &L->v_cst[j][G]);
            L->v_part[j][G] = LLVMBuildAdd(b, rowoff, four ? part : LLVMBuildAdd(b, part, word2, ""), "");
        }
    }
}

/* S = Q·Kᵀ of n-tile n for the stage at byte offset kst (K B-fragments by
 * ldmatrix.x4, two k-steps of 8 at a time, rounded to tf32). */
static void tile_scores(s2_fwd_kernel *fk, const void *lanes, LLVMValueRef kst, int n, LLVMValueRef acc[4])
{
    tfk *k = (tfk *)fk;
    const kv_lanes *L = lanes;
    int row_bytes = k->s.chunks * 16;
    for (int p = 0; p < k->s.D / 16; p++) {
        LLVMValueRef kb[4], qa[2][4];
        s2_nv_ldmatrix_x4(k->cg, s2_fwd_smem_addr(&k->fk, kst, L->k_part[p], L->k_cst[p] + n * 8 * row_bytes), false,
                          kb);
        for (int i = 0; i < 4; i++)
            kb[i] = to_tf32(k, LLVMBuildBitCast(k->b, kb[i], k->cg->t_f32, ""));
        for (int h = 0; h < 2; h++) {
            if (k->q_regs)
                memcpy(qa[h], k->qf[2 * p + h], sizeof qa[h]);
            else
                q_fragment(k, 2 * p + h, qa[h]);
            s2_nv_mma_m16n8k16(k->cg, k->s.dt, qa[h], &kb[2 * h], acc);
        }
    }
}

static void score_tiles(s2_fwd_kernel *fk, const void *lanes, LLVMValueRef kst, int n0, int count)
{
    s2_fwd_scores_by_tile(fk, lanes, kst, n0, count, tile_scores);
}

/* O += P·V of the 8-key step kk in the permuted key and column orders
 * (header): P's A fragment (c0, c2, c1, c3) of n-tile kk, rounded to tf32;
 * V's B fragments of n-tile 4G + i: b0 = V[8kk + 2·t4][32G + 4g + i],
 * b1 = V[8kk + 2·t4 + 1][32G + 4g + i], element i of one vector load per row. */
static void accumulate_pv(s2_fwd_kernel *fk, const void *lanes, LLVMValueRef vst, int kk, LLVMValueRef sc[][4])
{
    tfk *k = (tfk *)fk;
    const kv_lanes *L = lanes;
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    int row_bytes = k->s.chunks * 16;
    LLVMValueRef a[4] = {to_tf32(k, sc[kk][0]), to_tf32(k, sc[kk][2]), to_tf32(k, sc[kk][1]), to_tf32(k, sc[kk][3])};
    for (int G = 0; G < v_groups(k); G++) {
        int n = v_group_tiles(k, G);
        LLVMTypeRef vt = LLVMVectorType(cg->t_i32, (unsigned)n);
        LLVMValueRef row[2];
        for (int j = 0; j < 2; j++) {
            LLVMValueRef p = s2_fwd_smem_addr(&k->fk, vst, L->v_part[j][G], L->v_cst[j][G] + 8 * kk * row_bytes);
            LLVMValueRef ld = LLVMBuildLoad2(b, vt, p, "v");
            LLVMSetAlignment(ld, (unsigned)(4 * n));
            /* freeze keeps the load whole: O3 splits a vector load used only
             * by extracts into scalar loads (ld.shared.b32 each) */
            row[j] = LLVMBuildFreeze(b, ld, "");
        }
        for (int i = 0; i < n; i++) {
            LLVMValueRef vb[2] = {LLVMBuildExtractElement(b, row[0], c32(k, i), ""),
                                  LLVMBuildExtractElement(b, row[1], c32(k, i), "")};
            s2_flash_mma_into(cg, k->s.dt, a, vb, k->acc.o[4 * G + i]);
        }
    }
}

/* O /= l and LSE (flash.h's row end); fp32 rows: a lane's columns of a
 * group are consecutive (header), one 16-byte store per four, 4-byte
 * stores where O or its strides are not 16-byte aligned. */
static void epilogue(tfk *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    s2_flash_out out = s2_fwd_out(&k->fk);
    LLVMValueRef bits = LLVMBuildOr(b, LLVMBuildPtrToInt(b, param(k, P_O), cg->t_i64, ""),
        LLVMBuildShl(b, LLVMBuildOr(b, k->obase, param(k, P_OS + 1), ""), c64(k, 2), ""), "");
    LLVMValueRef aligned = LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildAnd(b, bits, c64(k, 15), ""), c64(k, 0), "aligned16");
    LLVMTypeRef v4 = LLVMVectorType(cg->t_f32, 4);
    for (int hr = 0; hr < 2; hr++) {
        LLVMValueRef inv, lse;
        s2_flash_row_final(cg, &k->acc, hr, param(k, P_SCALE_LOG2), &inv, &lse);
        s2_nv_if store;
        LLVMValueRef qrow;
        LLVMValueRef ok = s2_fwd_thread_q_row(&k->fk, hr, &qrow);
        LLVMValueRef row_off = s2_flash_row_store_begin(cg, &out, ok, qrow, &store);
        /* col[c], v[c]: the thread's c-th column of the row and its value */
        LLVMValueRef v[MAX_D / 4], col[MAX_D / 4];
        int nc = 0;
        for (int G = 0; G < v_groups(k); G++) {
            int n = v_group_tiles(k, G);
            LLVMValueRef first = LLVMBuildAdd(b, LLVMBuildMul(b, k->t4, c32(k, 2 * n), ""), c32(k, 32 * G), "");
            for (int e = 0; e < 2; e++)
                for (int i = 0; i < n; i++, nc++) {
                    v[nc] = LLVMBuildFMul(b, LLVMBuildLoad2(b, cg->t_f32, k->acc.o[4 * G + i][2 * hr + e], ""), inv, "");
                    col[nc] = LLVMBuildAdd(b, first, c32(k, n * e + i), "");
                }
        }
        s2_nv_if wide, narrow;
        s2_nv_if_begin(cg, &wide, aligned, "st_v4");
        for (int c = 0; c < nc; c += 4) {
            LLVMValueRef off = LLVMBuildAdd(b, row_off, LLVMBuildZExt(b, col[c], cg->t_i64, ""), "");
            LLVMValueRef x = LLVMGetUndef(v4);
            for (int e = 0; e < 4; e++)
                x = LLVMBuildInsertElement(b, x, v[c + e], c32(k, e), "");
            LLVMSetAlignment(LLVMBuildStore(b, x, gep32(k, param(k, P_O), off)), 16);
        }
        s2_nv_if_end(cg, &wide);
        s2_nv_if_begin(cg, &narrow, LLVMBuildNot(b, aligned, ""), "st_b32");
        for (int c = 0; c < nc; c++) {
            LLVMValueRef off = LLVMBuildAdd(b, row_off, LLVMBuildZExt(b, col[c], cg->t_i64, ""), "");
            LLVMSetAlignment(LLVMBuildStore(b, v[c], gep32(k, param(k, P_O), off)), 4);
        }
        s2_nv_if_end(cg, &narrow);
        s2_flash_row_store_end(cg, &out, &store, qrow, lse);
    }
    LLVMBuildRetVoid(b);
}

static int tf32_smem_bytes(const s2_pattern *p, const s2_kspec *spec)
{
    s2_fwd_shape s;
    s2_fwd_shape_init(&s, p, spec, ESIZE);
    return s2_fwd_shape_smem(&s);
}

static s2_status tf32_build(s2_ctx *ctx, s2_cg *cg, const s2_pattern *p, const s2_kspec *spec, const char *name)
{
    tfk k = {.kb = {.cg = cg, .b = cg->b}};
    s2_fwd_shape_init(&k.s, p, spec, ESIZE);
    k.q_regs = k.s.D <= QREG_MAX_D;
    k.rn = spec->arch != S2_ARCH_SM80;
    if (k.s.D > MAX_D || k.s.BN > MAX_BN || k.s.BM != 16 * k.s.warps || k.s.D % 16 != 0 ||
        s2_dtype_info_of(k.s.dt)->mma_k != 8)
        return s2_fail(ctx, S2_ERR_INTERNAL, "fp32 forward: unresolved spec reached the builder");
    s2_fwd_prologue(&k.fk, name);
    q_lanes_init(&k);
    if (k.q_regs)
        for (int ks = 0; ks < k.s.D / 8; ks++)
            q_fragment(&k, ks, k.qf[ks]);
    kv_lanes L;
    kv_lanes_init(&k, &L);
    s2_fwd_main_loop(&k.fk, score_tiles, accumulate_pv, 8, &L);
    epilogue(&k);
    return S2_OK;
}

/* ---- the table entry ---- */

/* A forward of a dtype whose row computes on tf32 tensor cores (f32). */
static bool tf32_accepts(const s2_kspec *s)
{
    const s2_dtype_info *r = s2_dtype_info_of(s->dtype);
    return s->kind == S2_KERNEL_FWD && r && r->mma == S2_MMA_TF32;
}

/* The key tile: fewer score registers as O's D/2 grow (ptxas spills at d128
 * with 64 keys on sm_80, at d256 with 32), and fp32 stages small enough for
 * two CTAs (8 warps) per SM from d96.  On sm_90 (one-instruction rounding)
 * d128 fits 64 keys without spills (d96 and d112 spill), in one stage for
 * two CTAs per SM (tf32_resolve): fewer barriers per key than 32 keys in two. */
static bool wide_keys(const s2_kspec *spec, const s2_pattern *p)
{
    return spec->arch != S2_ARCH_SM80 && p->block_size > 16 && spec->head_dim == 128;
}

static int default_block_n(const s2_kspec *spec, const s2_pattern *p)
{
    int d = spec->head_dim;
    if (p->block_size <= 16 || d > 192)
        return 16;
    return d > 64 && !wide_keys(spec, p) ? 32 : 64;
}

/* FA2 tiling as the mma.sync forward (block_m = 16 · num_warps, default 64
 * rows), key tiles by default_block_n, 2 stages (1 for wide_keys' tiles, and
 * where two do not fit the arch's shared memory and none was asked). */
static s2_status tf32_resolve(s2_ctx *ctx, s2_kspec *spec, const s2_pattern *p)
{
    if (spec->persistent > 0 || spec->kv_gather > 1 || spec->bwd_wgmma > 0 || spec->bwd_tma > 0)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: the fp32 forward takes no persistent grid, gathered key tiles "
                       "or backward options");
    spec->persistent = spec->kv_gather = spec->bwd_wgmma = spec->bwd_tma = 0;
    s2_status st = s2_template_fa2_rows(ctx, spec);
    if (st != S2_OK)
        return st;
    bool wide = spec->block_n == 0 && spec->num_stages == 0 && spec->block_m == 64 && wide_keys(spec, p);
    if (spec->block_n == 0)
        spec->block_n = default_block_n(spec, p);
    if (wide)
        spec->num_stages = 1;
    if (!s2_template_pow2_in(spec->block_n, 16, MAX_BN))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: block_n %d (16, 32, 64 or 128)", spec->block_n);
    bool stages_given = spec->num_stages != 0;
    if ((st = s2_template_fa2_stages_tiles(ctx, spec, p, false)) != S2_OK)
        return st;
    int limit = s2_template_smem_limit(spec->arch);
    if (!stages_given && tf32_smem_bytes(p, spec) > limit)
        spec->num_stages = 1;
    int smem = tf32_smem_bytes(p, spec);
    if (smem > limit)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "spec: %d bytes of shared memory exceed %s's %d", smem,
                       s2_arch_cpu((s2_arch)spec->arch), limit);
    return S2_OK;
}

/* no NAME_combine or NAME_rows: they store 16-bit rows */
static int tf32_kernels(const s2_pattern *p, const s2_kspec *s, s2_kernel_record *out)
{
    return s2_template_kernels_fwd(s, S2_ABI_FWD, tf32_smem_bytes(p, s), false, out);
}

#define HD(d) S2_TEMPLATE_HEAD_DIM(d)
const s2_template s2_template_fwd_tf32 = {"fwd_tf32", S2_KERNEL_FWD, S2_TEMPLATE_DTYPE(S2_DTYPE_F32),
    HD(16) | HD(32) | HD(48) | HD(64) | HD(80) | HD(96) | HD(112) | HD(128) | HD(144) | HD(160) | HD(176) |
        HD(192) | HD(208) | HD(224) | HD(240) | HD(256),
    (1u << S2_ABI_FWD) | (1u << S2_ABI_SEQS), tf32_accepts, tf32_resolve, tf32_smem_bytes, tf32_kernels, NULL,
    tf32_build, s2_fwd_entry_build, NULL};
