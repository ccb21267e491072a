/* The S2 block-sparse attention forward for sm_90a: wgmma + TMA + warp
 * specialisation (the structure of FlashAttention-3: Shah et al. 2024,
 * hopper/flash_fwd_kernel_sm90.h and mainloop_fwd_sm90_tma_gmma_ws.hpp).
 *
 * One CTA = one (query tile, head, batch), block_m = 64 * NC query rows.
 * Warpgroup 0 is the producer: after setmaxnreg.dec one thread loads the Q
 * tile and then, for every entry of the CTA's list in the packed forward
 * schedule, the K and V tiles of that entry's key tile with TMA into a
 * num_stages-deep ring (full/empty mbarrier pair per stage, as CUTLASS
 * PipelineTmaAsync, include/cutlass/pipeline/sm90_pipeline.hpp).
 * Warpgroups 1..NC are consumers, each owning a 64-row slab of Q:
 * S = Q·Kᵀ with wgmma SS (Q and K K-major, 128-byte swizzle), mask, online
 * softmax on the accumulator layout (warp w: rows 16w + g, + 8; CUTLASS
 * CLayout_64xN), O += P·V with wgmma RS (P from
 * the S registers, V N-major through trans-b).
 * Intra-warpgroup overlap (FA3 fwd_step): S(j+1) = Q·K(j+1)ᵀ is issued
 * before P(j)·V(j), so the softmax of entry j+1 runs while the tensor cores
 * finish P(j)·V(j).  With two consumer warpgroups, named barriers hand the
 * tensor cores from one to the other (ping-pong: FA3
 * warp_scheduler_barrier_sync / _arrive, bar.sync / bar.arrive).
 *
 * Smem: Q [BM][D] then K and V stages [BN][D], each stored as 64-column
 * blocks of 128-byte rows with the TMA/wgmma 128-byte swizzle, all 1024-byte
 * aligned; then the mbarriers.  A head dim that is not a multiple of 64
 * fills its last block partly: the TMA box reads zeros past D (the tensor
 * map's extent), Q·Kᵀ steps over D only and P·V runs over the whole block
 * (N = DP: whole swizzle atoms along V's N, the canonical MN-major layout),
 * its zero columns never stored.  ABI: attention.h (sm_90a TMA variant).
 *
 * This file: setup, the work loop, the producer, the shapes and the entry
 * point; the consumers are in fwd_sm90_consumer.c. */
#include "fwd_sm90_internal.h"
#include "s2c/launch.h"
#include "template.h"
#include "s2c/layout.h"

#include <stdlib.h>
#include <string.h>

/* Address of the field at byte field_off of entry e of the list. */
static LLVMValueRef entry_ptr(sm90 *k, LLVMValueRef e, int field_off)
{
    LLVMTypeRef i8 = LLVMInt8TypeInContext(k->cg->llctx);
    LLVMValueRef off = LLVMBuildAdd(k->b, LLVMBuildMul(k->b, sext64(k, e), c64(k, k->s.entry_bytes), ""),
                                    c64(k, field_off), "");
    return LLVMBuildInBoundsGEP2(k->b, i8, k->entries, &off, 1, "");
}

LLVMValueRef s2_sm90_entry_field(sm90 *k, LLVMValueRef e, int field_off, LLVMTypeRef ty)
{
    LLVMValueRef v = LLVMBuildLoad2(k->b, ty, entry_ptr(k, e, field_off), "");
    LLVMSetAlignment(v, ty == k->cg->t_i64 ? 8 : 4);
    return v;
}

/* The i32 field of entry e when ok, else a read of the offsets array (a
 * valid address: the entries array may be empty), ignored by the caller. */
static LLVMValueRef entry_field_if(sm90 *k, LLVMValueRef e, LLVMValueRef ok, int field_off)
{
    LLVMValueRef p = LLVMBuildSelect(k->b, ok, entry_ptr(k, e, field_off), param(k, P_OFFSETS), "");
    LLVMValueRef v = LLVMBuildLoad2(k->b, k->cg->t_i32, p, "blk");
    LLVMSetAlignment(v, 4);
    return v;
}

/* The words of entry e when ok (as entry_field_if); decoded by entry_from_words. */
void s2_sm90_entry_words_if(sm90 *k, LLVMValueRef e, LLVMValueRef ok, LLVMValueRef *w)
{
    for (int j = 0; j < entry_words(&k->s); j++)
        w[j] = entry_field_if(k, e, ok, 4 * j);
}

/* Everything both roles need: ids, the list, lengths. */
static void setup(sm90 *k)
{
    k->tid = s2_nv_tid_x(k->cg);
    k->smem = s2_nv_smem_base32(k->cg);
    k->q_len = param(k, P_QLEN);
    k->kv_len = param(k, P_KVLEN);
    k->q_start = LLVMBuildSub(k->b, k->kv_len, k->q_len, "q_start");
    k->entries = param(k, P_ENTRIES);
}

/* Variable-length batch (the trailing seqinfo parameter, attention.h):
 * lengths and first token rows of sequence batch32; without it the uniform
 * batch (rows 0, lengths q_len / kv_len, batch coordinate batch32).  The
 * schedule covers the longest sequence: a tile holding none of this one's
 * queries gets an empty list. */
static LLVMValueRef seqinfo_param(sm90 *k) { return param(k, k->p_seqinfo); }

static void seq_item(sm90 *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    LLVMValueRef dflt[4] = {c32(k, 0), param(k, P_QLEN), c32(k, 0), param(k, P_KVLEN)}, seq[4];
    s2_flash_seqinfo(cg, seqinfo_param(k), k->batch32, dflt, seq);
    k->q_row0 = seq[0];
    k->q_len = seq[1];
    k->k_row0 = seq[2];
    k->kv_len = seq[3];
    k->q_start = LLVMBuildSub(b, k->kv_len, k->q_len, "q_start");
    LLVMValueRef varlen = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildPtrToInt(b, seqinfo_param(k), cg->t_i64, ""), c64(k, 0), "");
    k->bidx32 = LLVMBuildSelect(b, varlen, c32(k, 0), k->batch32, "bidx");
    LLVMValueRef bh = add(k, LLVMBuildMul(b, LLVMBuildZExt(b, k->bidx32, cg->t_i64, ""), c64(k, k->s.heads), ""), k->head);
    k->lse_base = add(k, LLVMBuildMul(b, bh, sext64(k, param(k, P_QLEN)), ""), sext64(k, k->q_row0));
    LLVMValueRef mine = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSLT, k->tile_pos0, k->kv_len, ""),
        LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSGT, addc(k, k->tile_pos0, k->s.BM), k->q_start, ""),
                     LLVMBuildICmp(b, LLVMIntSGT, k->q_len, c32(k, 0), ""), ""), "mine");
    k->end = LLVMBuildSelect(b, mine, k->end, k->begin, "end");
}

/* The ids of one work item: list rel (0 = first tile) of head, batch.
 * given: the list's bounds, handed over by the producer (NULL: loaded). */
static void setup_item(sm90 *k, LLVMValueRef head32, LLVMValueRef batch32, LLVMValueRef rel, const LLVMValueRef *given)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    k->head32 = head32;
    k->batch32 = batch32;
    k->kvh32 = LLVMBuildUDiv(b, k->head32, c32(k, k->s.group), "kv_head");
    k->head = LLVMBuildZExt(b, k->head32, cg->t_i64, "head");
    k->batch = LLVMBuildZExt(b, k->batch32, cg->t_i64, "batch");
    LLVMValueRef q_tiles = param(k, P_Q_TILES);
    LLVMValueRef tile = add(k, param(k, P_FIRST_Q_TILE), rel);
    k->tile_pos0 = LLVMBuildMul(b, tile, c32(k, k->s.BM), "tile_pos0");
    if (given) {
        k->begin = given[0];
        k->end = given[1];
    } else {
        LLVMValueRef cls = s2_kb_load_i32(&k->kb, param(k, P_CLASS), k->head, "class");
        LLVMValueRef li = sext64(k, add(k, LLVMBuildMul(b, cls, q_tiles, ""), rel));
        k->begin = s2_kb_load_i32(&k->kb, param(k, P_OFFSETS), li, "begin");
        k->end = s2_kb_load_i32(&k->kb, param(k, P_OFFSETS), LLVMBuildAdd(b, li, c64(k, 1), ""), "end");
    }
    seq_item(k);
}


static LLVMValueRef slot_ptr(sm90 *k, int word)
{
    LLVMValueRef off64 = LLVMConstInt(k->cg->t_i64, (unsigned long long)(k->s.slot_off + 4 * word), 0);
    return LLVMBuildInBoundsGEP2(k->b, LLVMInt8TypeInContext(k->cg->llctx), s2_nv_dynamic_smem(k->cg), &off64, 1, "slot");
}

static void slot_store(sm90 *k, int word, LLVMValueRef v)
{
    LLVMValueRef st = LLVMBuildStore(k->b, v, slot_ptr(k, word));
    LLVMSetVolatile(st, 1);
    LLVMSetAlignment(st, 4);
}

LLVMValueRef s2_sm90_slot_load(sm90 *k, int word)
{
    LLVMValueRef v = LLVMBuildLoad2(k->b, k->cg->t_i32, slot_ptr(k, word), "slot_v");
    LLVMSetVolatile(v, 1);
    LLVMSetAlignment(v, 4);
    return v;
}


void s2_sm90_work_begin(sm90 *k, work_loop *w, const char *name, LLVMValueRef start, bool consumer)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    if (!k->s.persistent) {
        LLVMValueRef q_tiles = param(k, P_Q_TILES);
        LLVMValueRef rel = LLVMBuildSub(b, LLVMBuildSub(b, q_tiles, c32(k, 1), ""), s2_nv_ctaid(cg, 'x'), "tile_rel");
        setup_item(k, s2_nv_ctaid(cg, 'y'), s2_nv_ctaid(cg, 'z'), rel, NULL);
        k->it0 = c32(k, 0);
        k->nitem = c32(k, 0);
        return;
    }
    LLVMValueRef bt = param(k, P_BATCH);
    LLVMValueRef total = LLVMBuildMul(b, param(k, P_NWORK), bt, "total");
    LLVMValueRef init[2] = {c32(k, 0), c32(k, 0)};
    /* the step is set by work_end: the next item less this one */
    s2_nv_loop_begin(cg, &w->loop, name, start, total, c32(k, 0), init, 2);
    LLVMValueRef wi = w->loop.iv;
    LLVMValueRef nw = param(k, P_NWORK);
    LLVMValueRef item, given[2];
    if (consumer) {
        item = s2_sm90_slot_load(k, SLOT_ITEM);
        given[0] = s2_sm90_slot_load(k, SLOT_BEGIN);
        given[1] = s2_sm90_slot_load(k, SLOT_END);
        for (int e = 0; e < k->s.n_first; e++)
            for (int j = 0; j < entry_words(&k->s); j++)
                k->first[e][j] = s2_sm90_slot_load(k, SLOT_ENTRY + e * entry_words(&k->s) + j);
    } else {
        item = s2_kb_load_i32(&k->kb, param(k, P_WORK), LLVMBuildZExt(b, LLVMBuildURem(b, wi, nw, ""), cg->t_i64, ""), "item");
    }
    k->item = item;
    LLVMValueRef q_tiles = param(k, P_Q_TILES);
    setup_item(k, LLVMBuildUDiv(b, item, q_tiles, "head"), LLVMBuildUDiv(b, wi, nw, "batch"),
               LLVMBuildURem(b, item, q_tiles, "rel"), consumer ? given : NULL);
    k->it0 = w->loop.carried[0];
    k->nitem = w->loop.carried[1];
}

void s2_sm90_work_end(sm90 *k, work_loop *w, LLVMValueRef w_next)
{
    if (!k->s.persistent)
        return;
    w->loop.step = LLVMBuildSub(k->b, w_next, w->loop.iv, "w_step");
    LLVMValueRef next[2] = {add(k, k->it0, LLVMBuildSub(k->b, k->end, k->begin, "")), addc(k, k->nitem, 1)};
    s2_nv_loop_end(k->cg, &w->loop, next);
}

static LLVMValueRef counter_ptr(sm90 *k, int i)
{
    LLVMValueRef idx = c64(k, i);
    return LLVMBuildInBoundsGEP2(k->b, k->cg->t_i32, param(k, P_COUNTER), &idx, 1, "");
}

/* atomicAdd(counter[i], 1) */
static LLVMValueRef counter_fetch(sm90 *k, int i)
{
    return LLVMBuildAtomicRMW(k->b, LLVMAtomicRMWBinOpAdd, counter_ptr(k, i), c32(k, 1), LLVMAtomicOrderingMonotonic, 0);
}

static LLVMValueRef grid_x(sm90 *k)
{
    return s2_nv_intrinsic(k->cg, "llvm.nvvm.read.ptx.sreg.nctaid.x", k->cg->t_i32, NULL, 0, NULL);
}

/* ---- producer ---- */

static void tma_tile(sm90 *k, int dst_off, LLVMValueRef dst_dyn, int rows, LLVMValueRef bar, int tmap,
                     LLVMValueRef row0, LLVMValueRef head)
{
    for (int c = 0; c < k->s.NB; c++) {
        LLVMValueRef dst = addc(k, k->smem, dst_off + c * rows * 128);
        if (dst_dyn)
            dst = add(k, dst, dst_dyn);
        LLVMValueRef co[4] = {c32(k, k->s.CB * c), row0, head, k->bidx32};
        s2_nv_tma_load_4d(k->cg, dst, bar, param(k, tmap), co);
    }
}

/* Gathered key tile (s2_dev_gentry): slot j's block (first key row
 * row0s[j]) fills key rows [j*rows, (j+1)*rows) of the stage, one box per
 * slot and 64-column block.  A slot of 16+ rows starts on a 2048-byte
 * boundary inside a 1024-byte aligned column block, i.e. on whole
 * 128-byte-swizzle atoms (8 rows of 128 bytes), so the boxes compose into
 * the layout one box of BN rows has.  One thread issues them all (one lane
 * per slot was slower, run 2). */
static void load_gathered(sm90 *k, const LLVMValueRef *row0s, LLVMValueRef soff, LLVMValueRef bar)
{
    const sm90_shape *s = &k->s;
    int rows = s->BN / s->gather;
    for (int j = 0; j < s->gather; j++)
        for (int m = 0; m < 2; m++) {
            int base = m ? s->v_off : s->k_off;
            for (int c = 0; c < s->NB; c++) {
                LLVMValueRef dst = add(k, addc(k, k->smem, base + c * s->BN * 128 + j * rows * 128), soff);
                LLVMValueRef co[4] = {c32(k, s->CB * c), row0s[j], k->kvh32, k->bidx32};
                s2_nv_tma_load_4d(k->cg, dst, bar, param(k, m ? P_TMAP_V : P_TMAP_K), co);
            }
        }
}

/* fp8: each landed V tile (key rows, 128-byte swizzled column blocks) into
 * its stage's Vᵀ (D rows of BN keys, one 128-byte swizzled row each: the
 * K-major B of the P·V wgmma, which takes no transpose for 8-bit types).
 * Keys are permuted within each 32 so that k of P's register fragment is
 * the key the thread holds in S's accumulator (FA3's fp8 V transpose): Vᵀ
 * column 16h + 4t + e holds key 16h + 8(e >> 1) + 2t + (e & 1), and P
 * needs no shuffle.  Warps 1-3 of the producer warpgroup move 4x4-byte
 * squares (keys c, c+1, c+8, c+9 by columns d0..d0+3: 32-bit loads, prmt,
 * 32-bit stores).  A unit (dhi, jh2) is 32 columns by 64 keys: lane (t, q)
 * takes d0 = 32·dhi + 4q and, for r = 0..3, the keys from c = 16·jh + 2t,
 * jh = ((q >> 1) ^ r) + 4·jh2, which puts both a warp's loads and its
 * stores on 32 distinct banks; r unrolled, the addresses are a unit's bases
 * plus a lane XOR.  Each thread makes its stores visible to the async proxy
 * and arrives on the stage's Vᵀ barrier. */
static void transpose_v(sm90 *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    const sm90_shape *s = &k->s;
    LLVMValueRef tw = LLVMBuildSub(b, LLVMBuildLShr(b, k->tid, c32(k, 5), ""), c32(k, 1), "vt_warp");
    LLVMValueRef lane = LLVMBuildAnd(b, k->tid, c32(k, 31), "");
    LLVMValueRef t = LLVMBuildAnd(b, lane, c32(k, 3), "");
    LLVMValueRef dl = LLVMBuildAnd(b, lane, c32(k, ~3), "");       /* 4q */
    LLVMValueRef jl = LLVMBuildAnd(b, LLVMBuildLShr(b, lane, c32(k, 3), ""), c32(k, 3), "");
    int nj = s->BN / 64, nu = nj * (s->D / 32);
    work_loop wl;
    s2_sm90_work_begin(k, &wl, "work_t", NULL, false);
    s2_nv_loop loop;
    s2_nv_loop_begin(cg, &loop, "vt", k->begin, k->end, c32(k, 1), NULL, 0);
    LLVMValueRef i = add(k, k->it0, LLVMBuildSub(b, loop.iv, k->begin, "i"));
    LLVMValueRef stage = s2_kb_ring_stage(&k->kb, i, s->stages, "stage");
    s2_nv_mbar_wait(cg, full_bar(k, stage), s2_kb_ring_parity(&k->kb, i, s->stages, ""));
    LLVMValueRef vbase = addc(k, LLVMBuildMul(b, stage, c32(k, s->stage_bytes), ""), s->v_off);
    LLVMValueRef tbase = addc(k, LLVMBuildMul(b, stage, c32(k, s->vt_stage_bytes), ""), s->vt_off);
    s2_nv_loop un;
    s2_nv_loop_begin(cg, &un, "vt_unit", tw, c32(k, nu), c32(k, 3), NULL, 0);
    LLVMValueRef jh2 = nj > 1 ? LLVMBuildAnd(b, un.iv, c32(k, nj - 1), "jh2") : c32(k, 0);
    LLVMValueRef dhi = nj > 1 ? LLVMBuildLShr(b, un.iv, c32(k, s2_log2i(nj)), "dhi") : un.iv;
    LLVMValueRef d0 = add(k, LLVMBuildShl(b, dhi, c32(k, 5), ""), dl);
    LLVMValueRef chunk = LLVMBuildAnd(b, LLVMBuildLShr(b, d0, c32(k, 4), ""), c32(k, 7), "");
    /* loads: d0's 128-byte block and byte, key c's row (2t·128 + jh2·64·128); keys c, c+8 swizzle as c, keys c+1, c+9 as c+1 */
    LLVMValueRef lb = add(k, vbase, LLVMBuildMul(b, LLVMBuildLShr(b, d0, c32(k, 7), ""), c32(k, s->BN * 128), ""));
    lb = add(k, add(k, lb, LLVMBuildAnd(b, d0, c32(k, 15), "")),
             add(k, LLVMBuildShl(b, t, c32(k, 8), ""), LLVMBuildShl(b, jh2, c32(k, 13), "")));
    LLVMValueRef t2 = LLVMBuildShl(b, t, c32(k, 1), "");
    LLVMValueRef a0 = add(k, lb, LLVMBuildShl(b, LLVMBuildXor(b, chunk, t2, ""), c32(k, 4), ""));
    LLVMValueRef a1 = addc(k, add(k, lb, LLVMBuildShl(b, LLVMBuildXor(b, chunk, LLVMBuildOr(b, t2, c32(k, 1), ""), ""),
                                                     c32(k, 4), "")), 128);
    /* stores: row d0 + j, its chunk jh ^ ((d0 + j) & 7) = (jl ^ r ^ j) ^ (4·jh2 ^ (d0 & 7)) */
    LLVMValueRef sb = add(k, tbase, add(k, LLVMBuildShl(b, d0, c32(k, 7), ""), LLVMBuildShl(b, t, c32(k, 2), "")));
    LLVMValueRef y = LLVMBuildXor(b, jl, LLVMBuildXor(b, LLVMBuildShl(b, jh2, c32(k, 2), ""),
                                                      LLVMBuildAnd(b, d0, c32(k, 7), ""), ""), "");
    for (int r = 0; r < 4; r++) {
        LLVMValueRef jr = LLVMBuildShl(b, LLVMBuildXor(b, jl, c32(k, r), ""), c32(k, 11), "");
        LLVMValueRef offs[4] = {add(k, a0, jr), add(k, a1, jr), addc(k, add(k, a0, jr), 1024), addc(k, add(k, a1, jr), 1024)};
        LLVMValueRef w[4];
        for (int j = 0; j < 4; j++) {
            w[j] = LLVMBuildLoad2(b, cg->t_i32, s2_nv_smem_at(cg, offs[j]), "v4");
            LLVMSetAlignment(w[j], 4);
        }
        /* x: bytes 0, 1 of keys c, c+1 interleaved, y: of keys c+8, c+9; then 2, 3 */
        LLVMValueRef x = s2_nv_prmt(cg, w[0], w[1], 0x5140), yv = s2_nv_prmt(cg, w[2], w[3], 0x5140);
        LLVMValueRef x2 = s2_nv_prmt(cg, w[0], w[1], 0x7362), y2 = s2_nv_prmt(cg, w[2], w[3], 0x7362);
        LLVMValueRef o[4] = {s2_nv_prmt(cg, x, yv, 0x5410), s2_nv_prmt(cg, x, yv, 0x7632),
                             s2_nv_prmt(cg, x2, y2, 0x5410), s2_nv_prmt(cg, x2, y2, 0x7632)};
        for (int j = 0; j < 4; j++) {
            LLVMValueRef off = addc(k, add(k, sb, LLVMBuildShl(b, LLVMBuildXor(b, y, c32(k, r ^ j), ""), c32(k, 4), "")),
                                    128 * j);
            LLVMSetAlignment(LLVMBuildStore(b, o[j], s2_nv_smem_at(cg, off)), 4);
        }
    }
    s2_nv_loop_end(cg, &un, NULL);
    s2_nv_fence_proxy_async(cg);
    s2_nv_mbar_arrive(cg, vt_bar(k, stage));
    s2_nv_loop_end(cg, &loop, NULL);
}

static void producer(sm90 *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    const sm90_shape *s = &k->s;
    s2_nv_setmaxnreg(cg, false, s->prod_regs);
    if (s->fp8) {
        s2_nv_if tw;
        s2_nv_if_begin(cg, &tw, LLVMBuildICmp(b, LLVMIntUGE, k->tid, c32(k, 32), ""), "vt_warps");
        transpose_v(k);
        s2_nv_if_end(cg, &tw);
    }
    /* one thread issues the copies */
    s2_nv_if one;
    s2_nv_if_begin(cg, &one, LLVMBuildICmp(b, LLVMIntEQ, k->tid, c32(k, 0), ""), "tma_thread");
    for (int m = P_TMAP_Q; m <= P_TMAP_V; m++)
        s2_nv_prefetch_tensormap(cg, param(k, m));
    work_loop wl;
    s2_sm90_work_begin(k, &wl, "work_p", s->persistent ? s2_nv_ctaid(cg, 'x') : NULL, false);
    LLVMValueRef fetched = NULL, words[2][6];
    if (s->persistent) {
        /* the previous item's Q (and the hand-off word) must be consumed
         * before they are overwritten: the consumers arrive once Q is in
         * their registers, so this runs one item ahead of them */
        s2_nv_if later;
        s2_nv_if_begin(cg, &later, LLVMBuildICmp(b, LLVMIntNE, k->nitem, c32(k, 0), ""), "q_reuse");
        LLVMValueRef pn = LLVMBuildAnd(b, LLVMBuildSub(b, k->nitem, c32(k, 1), ""), c32(k, 1), "");
        s2_nv_mbar_wait(cg, q_empty_bar(k), pn);
        s2_nv_if_end(cg, &later);
        /* the first entries' words (loaded after the wait: held across it,
         * the producer's 32 registers spill) */
        for (int e = 0; e < s->n_first; e++) {
            LLVMValueRef en = addc(k, k->begin, e);
            s2_sm90_entry_words_if(k, en, LLVMBuildICmp(b, LLVMIntSLT, en, k->end, ""), words[e]);
        }
        slot_store(k, SLOT_W, wl.loop.iv);
        slot_store(k, SLOT_ITEM, k->item);
        slot_store(k, SLOT_BEGIN, k->begin);
        slot_store(k, SLOT_END, k->end);
        for (int e = 0; e < s->n_first; e++)
            for (int j = 0; j < entry_words(s); j++)
                slot_store(k, SLOT_ENTRY + e * entry_words(s) + j, words[e][j]);
    }
    /* Q: one box of 64 rows per consumer slab and 64-column block; rows
     * before the queries (negative) and past q_len come back as zeros */
    LLVMValueRef qrow0 = add(k, LLVMBuildSub(b, k->tile_pos0, k->q_start, ""), k->q_row0);
    s2_nv_mbar_arrive_expect_tx(cg, q_bar(k), s->BM * s->DP * s->esz);
    for (int w = 0; w < s->NC; w++)
        tma_tile(k, s->q_off + w * SLAB * s->DP * s->esz, NULL, SLAB, q_bar(k), P_TMAP_Q, addc(k, qrow0, SLAB * w),
                 k->head32);
    /* the next item, fetched now so that the atomic's latency passes under this item's loads */
    if (s->persistent)
        fetched = counter_fetch(k, 0);

    /* A gathered entry's key blocks (four fields) are loaded one entry
     * ahead (carried through the loop), so that their latency is not paid
     * between a stage's release and its copies (run 33).  A plain entry's
     * one field is loaded in its iteration, above the stage wait (ahead it
     * was no faster, run 33). */
    bool ahead = s->gather > 1;
    int nslot = ahead ? s->gather : 1, slot_rows = s->BN / nslot;
    LLVMValueRef blk0[4];
    for (int j = 0; ahead && j < nslot; j++)
        blk0[j] = s->persistent ? words[0][j]
                                : entry_field_if(k, k->begin, LLVMBuildICmp(b, LLVMIntSLT, k->begin, k->end, ""), 4 * j);
    s2_nv_loop loop;
    s2_nv_loop_begin(cg, &loop, "load", k->begin, k->end, c32(k, 1), blk0, ahead ? (unsigned)nslot : 0);
    LLVMValueRef i = add(k, k->it0, LLVMBuildSub(b, loop.iv, k->begin, "i"));
    LLVMValueRef stage = s2_kb_ring_stage(&k->kb, i, s->stages, "stage");
    LLVMValueRef par = LLVMBuildXor(b, s2_kb_ring_parity(&k->kb, i, s->stages, ""), c32(k, 1), "");
    LLVMValueRef en = NULL, has_next = NULL, row0s[4], blk_next[4];
    if (ahead) {
        en = add(k, loop.iv, c32(k, 1));
        has_next = LLVMBuildICmp(b, LLVMIntSLT, en, k->end, "");
    }
    for (int j = 0; j < nslot; j++) {
        /* (plain: the global load completes while the thread waits for the
         * stage; the wait is an asm with a memory clobber, so it stays above) */
        LLVMValueRef blk = ahead ? loop.carried[j] : s2_sm90_entry_field(k, loop.iv, 4 * j, cg->t_i32);
        if (ahead)
            blk_next[j] = entry_field_if(k, en, has_next, 4 * j);
        row0s[j] = add(k, LLVMBuildMul(b, blk, c32(k, slot_rows), "kpos0"), k->k_row0);
    }
    /* the first round finds every stage free: parity 1 is the phase before phase 0 */
    s2_nv_mbar_wait(cg, empty_bar(k, stage), par);
    s2_nv_mbar_arrive_expect_tx(cg, full_bar(k, stage), 2 * s->stage_bytes);
    LLVMValueRef soff = LLVMBuildMul(b, stage, c32(k, s->stage_bytes), "");
    if (s->gather > 1) {
        load_gathered(k, row0s, soff, full_bar(k, stage));
    } else {
        LLVMValueRef krow = row0s[0];
        tma_tile(k, s->k_off, soff, s->BN, full_bar(k, stage), P_TMAP_K, krow, k->kvh32);
        tma_tile(k, s->v_off, soff, s->BN, full_bar(k, stage), P_TMAP_V, krow, k->kvh32);
    }
    s2_nv_loop_end(cg, &loop, ahead ? blk_next : NULL);
    if (s->persistent) {
        s2_sm90_work_end(k, &wl, add(k, grid_x(k), fetched));
        /* no more items: once the last item's Q is consumed, hand the
         * consumers the end (a plain arrival completes the Q barrier's
         * phase); the CTA that fetches last resets the counters for the
         * next launch on the stream */
        LLVMValueRef nf = wl.loop.result[1];
        s2_nv_if some;
        s2_nv_if_begin(cg, &some, LLVMBuildICmp(b, LLVMIntNE, nf, c32(k, 0), ""), "last_q");
        s2_nv_mbar_wait(cg, q_empty_bar(k), LLVMBuildAnd(b, LLVMBuildSub(b, nf, c32(k, 1), ""), c32(k, 1), ""));
        s2_nv_if_end(cg, &some);
        slot_store(k, SLOT_W, LLVMBuildMul(b, param(k, P_NWORK), param(k, P_BATCH), "total"));
        s2_nv_mbar_arrive(cg, q_bar(k));
        LLVMValueRef done = counter_fetch(k, 1);
        s2_nv_if last;
        s2_nv_if_begin(cg, &last, LLVMBuildICmp(b, LLVMIntEQ, done, LLVMBuildSub(b, grid_x(k), c32(k, 1), ""), ""),
                       "reset");
        for (int ci = 0; ci < 2; ci++) {
            LLVMValueRef st = LLVMBuildStore(b, c32(k, 0), counter_ptr(k, ci));
            LLVMSetVolatile(st, 1);
            LLVMSetAlignment(st, 4);
        }
        s2_nv_if_end(cg, &last);
    }
    s2_nv_if_end(cg, &one);
    LLVMBuildRetVoid(b);
}


static void sm90_shape_init(sm90_shape *s, const s2_pattern *p, const s2_kspec *spec)
{
    memset(s, 0, sizeof *s);
    const s2_dtype_info *di = s2_dtype_info_of(spec->dtype);
    s->dt = spec->dtype;
    s->D = spec->head_dim;
    s->esz = (int)di->size;
    s->fp8 = s->esz == 1;
    s->out_dt = s->fp8 ? S2_DTYPE_BF16 : s->dt;
    s->KS = di->mma_k;
    s->CB = 128 / s->esz;
    s->NB = (s->D + s->CB - 1) / s->CB;
    s->DP = s->CB * s->NB;
    s->PN = s->fp8 ? s->D : s->DP;
    s->BM = spec->block_m;
    s->BN = spec->block_n;
    s->NC = spec->block_m / SLAB;
    s->stages = spec->num_stages;
    s->threads = S2_WARPGROUP * (s->NC + 1);
    int sub_m_size = p->block_size < s->BM ? p->block_size : s->BM;
    s->sub_m_log2 = s2_log2i(sub_m_size);
    s->sub_n_size = p->block_size < s->BN ? p->block_size : s->BN;
    s->sub_n = s->BN / s->sub_n_size;
    s->gather = spec->kv_gather > 1 ? spec->kv_gather : 1;
    s->entry_bytes = s->gather > 1 ? (int)sizeof(s2_dev_gentry) : (int)sizeof(s2_dev_entry);
    s->group = p->heads / p->kv_heads;
    s->heads = p->heads;
    s->causal = p->causal;
    s->pingpong = s->NC == 2;
    s->persistent = spec->persistent > 0;
    /* Q from registers and the P·V wait below the softmax (consumer_loop):
     * both faster (RESULTS.md 2026-11-22, "issue 4"); past d128 Q stays in
     * shared memory (SS), as FA3's, its D / 4 registers being O's */
    s->q_regs = s->D <= 128;
    s->pv_fence = true;
    /* lazy rescaling with the rescale under the S wgmma: faster on both tile heights (runs 49-50); not for
     * fp8, where a stale maximum lets P reach 2^S2_FLASH_LAZY_LOG2 and P8_SCALE·P would pass e4m3's 448 */
    s->lazy = !s->fp8;
    s->split = true;
    s->owned = s2_kernel_spec_owned_pairs(spec);
#ifdef S2C_FWD90_EXPERIMENT
    /* measurement builds only: the previous kernels for comparison */
    if (getenv("S2C_FWD90_OLD"))
        s->q_regs = s->pv_fence = false;
    const char *e;
    if ((e = getenv("S2C_FWD90_LAZY")))
        s->lazy = e[0] == '1';
    if ((e = getenv("S2C_FWD90_SPLIT")))
        s->split = e[0] == '1';
    if ((e = getenv("S2C_FWD90_PVFENCE")))
        s->pv_fence = e[0] == '1';
    if ((e = getenv("S2C_FWD90_OWNED")))
        s->owned = s->owned && e[0] == '1';
#endif
    s->q_off = 0;
    s->stage_bytes = s->BN * s->DP * s->esz;
    s->k_off = s->BM * s->DP * s->esz;
    s->v_off = s->k_off + s->stages * s->stage_bytes;
    s->bar_off = s->v_off + s->stages * s->stage_bytes;
    if (s->fp8) {
        s->vt_off = s->bar_off;
        s->vt_stage_bytes = s->D * 128;
        s->bar_off = s->vt_off + s->stages * s->vt_stage_bytes;
    }
    /* persistent: q_empty, then the next work item's word */
    s->slot_off = s->bar_off + 8 * (2 * s->stages + 2);
    s->n_first = s->owned ? 2 : 1;
    s->smem = s->persistent ? s->slot_off + ((4 * (SLOT_ENTRY + s->n_first * entry_words(s)) + 7) & ~7)
              : s->fp8      ? s->bar_off + 8 * (3 * s->stages + 2)
                            : s->bar_off + 8 * (2 * s->stages + 1);
    s->scratch_off = s->smem;
    if (s->pv_fence)
        s->smem += 4 * S2_WARPGROUP * s->NC;
    /* setmaxnreg (PTX ISA 9.7.19.5; FA3's split): the register cap at launch is 65536 / (threads *
     * min_ctas); producer + NC consumers must fit in it after the shift
     * (more and setmaxnreg.inc waits for ever).  The persistent producer
     * keeps the work loop live and spills at 24. */
    if (s->NC == 2) {
        /* 384 threads at one CTA: ptxas gives 168 at launch, 168 * 3 = 504 in all */
        s->min_ctas = 1, s->prod_regs = s->persistent ? 32 : 24, s->cons_regs = s->persistent ? 232 : 240;
    } else {
        s->min_ctas = 2, s->prod_regs = s->persistent ? 32 : 24, s->cons_regs = s->persistent ? 224 : 232;
    }
    /* fp8: the transposing warps take 40 (at 32 their unrolled key groups spill); the consumers hold a byte
     * per P and Q element: 40 * 128 + 232 * 256 and 40 * 128 + 216 * 128 fill the caps above */
    if (s->fp8)
        s->prod_regs = 40, s->cons_regs = s->NC == 2 ? 232 : 216;
}

int s2_fwd_sm90_smem_bytes(const s2_pattern *p, const s2_kspec *spec)
{
    sm90_shape s;
    sm90_shape_init(&s, p, spec);
    return s.smem;
}

s2_status s2_fwd_sm90_build(s2_ctx *ctx, s2_cg *cg, const s2_pattern *p, const s2_kspec *spec, const char *name)
{
    sm90 k = {.kb = {.cg = cg, .b = cg->b}};
    sm90_shape_init(&k.s, p, spec);
    const sm90_shape *s = &k.s;
    if (s->D < 16 || s->D > MAX_D || s->D % 16 || s->BN < 16 || s->BN > MAX_BN || s->BN % 16 ||
        (s->NC != 1 && s->NC != 2) || s->BM != SLAB * s->NC || s->threads != 32 * spec->num_warps ||
        (s->fp8 && (s->D % 32 || s->BN % 64 || s->persistent)))
        return s2_fail(ctx, S2_ERR_INTERNAL, "forward sm_90a: unresolved spec reached the builder");
    LLVMTypeRef params[P_COUNT];
    s2_abi_id abi = s->fp8 ? S2_ABI_FWD_TMA_FP8 : s->persistent ? S2_ABI_FWD_TMA_PERSISTENT : S2_ABI_FWD_TMA;
    int nparams = s2_kb_abi_params(cg, abi, params);
    k.p_seqinfo = s2_abi_param_index(abi, "seqinfo");
    k.p_descale = s2_abi_param_index(abi, "q_descale");
    k.fn = s2_nv_kernel_new(cg, name, params, (unsigned)nparams, s->threads, s->min_ctas);
    for (int i = P_CLASS; i <= P_ENTRIES; i++) {
        s2_nv_param_attr(cg, k.fn, (unsigned)i, "noalias");
        s2_nv_param_attr(cg, k.fn, (unsigned)i, "readonly");
    }
    if (s->persistent) {
        s2_nv_param_attr(cg, k.fn, P_WORK, "noalias");
        s2_nv_param_attr(cg, k.fn, P_WORK, "readonly");
    }
    s2_nv_param_attr(cg, k.fn, (unsigned)k.p_seqinfo, "noalias");
    s2_nv_param_attr(cg, k.fn, (unsigned)k.p_seqinfo, "readonly");
    for (int i = 0; k.p_descale >= 0 && i < 3; i++)
        s2_nv_param_attr(cg, k.fn, (unsigned)(k.p_descale + i), "readonly");
    s2_nv_param_attr(cg, k.fn, P_O, "noalias");
    s2_nv_param_attr(cg, k.fn, P_LSE, "noalias");
    for (int i = P_TMAP_Q; i <= P_TMAP_V; i++)
        s2_nv_param_tensormap(cg, k.fn, (unsigned)i);
    LLVMBasicBlockRef entry_bb = LLVMGetInsertBlock(cg->b);

    setup(&k);
    /* barriers: one thread initialises, everyone syncs before any use */
    s2_nv_if init;
    s2_nv_if_begin(cg, &init, LLVMBuildICmp(k.b, LLVMIntEQ, k.tid, c32(&k, 0), ""), "mbar_init");
    for (int st = 0; st < s->stages; st++) {
        s2_nv_mbar_init(cg, full_bar(&k, c32(&k, st)), 1);
        s2_nv_mbar_init(cg, empty_bar(&k, c32(&k, st)), S2_WARPGROUP * s->NC);
    }
    s2_nv_mbar_init(cg, q_bar(&k), 1);
    if (s->persistent)
        s2_nv_mbar_init(cg, q_empty_bar(&k), S2_WARPGROUP * s->NC);
    for (int st = 0; s->fp8 && st < s->stages; st++)
        s2_nv_mbar_init(cg, vt_bar(&k, c32(&k, st)), S2_WARPGROUP - 32);
    s2_nv_fence_mbar_init(cg);
    s2_nv_if_end(cg, &init);
    s2_nv_barrier_cta(cg);

    LLVMBasicBlockRef prod_bb = LLVMAppendBasicBlockInContext(cg->llctx, k.fn, "producer");
    LLVMBasicBlockRef cons_bb = LLVMAppendBasicBlockInContext(cg->llctx, k.fn, "consumer");
    LLVMBuildCondBr(k.b, LLVMBuildICmp(k.b, LLVMIntULT, k.tid, c32(&k, S2_WARPGROUP), ""), prod_bb, cons_bb);
    LLVMPositionBuilderAtEnd(k.b, prod_bb);
    producer(&k);
    LLVMPositionBuilderAtEnd(k.b, cons_bb);
    s2_sm90_consumer(&k, entry_bb);
    return S2_OK;
}
