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
 * aligned; then the mbarriers.  ABI: attention.h (sm_90a TMA variant). */
#include "flash.h"
#include "kbase.h"
#include "s2c/attention.h"
#include "s2c/layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    P_Q, P_K, P_V, P_O, P_LSE,
    P_QS, P_KS = P_QS + 3, P_VS = P_KS + 3, P_OS = P_VS + 3,
    P_QLEN = P_OS + 3, P_KVLEN, P_SCALE_LOG2,
    P_CLASS, P_OFFSETS, P_ENTRIES, P_FIRST_Q_TILE, P_Q_TILES,
    P_TMAP_Q, P_TMAP_K, P_TMAP_V,
    P_WORK, P_NWORK, P_BATCH, P_COUNTER, /* persistent variant only */
    P_COUNT
};

enum { MAX_D = 128, MAX_BN = 128, SLAB = 64 };
/* named barrier ids of the ping-pong (0 is __syncthreads) */
enum { BAR_WG_BASE = 8 };

typedef struct sm90_shape {
    s2_dtype dt;
    int D, BM, BN, NC, stages, threads;
    int sub_m_log2, sub_n_size, sub_n;
    int gather, entry_bytes;       /* key blocks per gathered key tile (1: off); schedule entry size */
    int group, heads;
    bool causal, pingpong, persistent;
    bool q_regs;                   /* S = Q·Kᵀ with Q from registers (RS): no Q re-read from smem per entry */
    bool pv_fence;                 /* a store of the row sum before the P·V wait (consumer_loop) */
    bool lazy;                     /* O rescaled only when a warp's row maximum grew (flash.h, grew) */
    bool split;                    /* O rescaled between the S and the P·V wgmma (FA3's order) */
    bool owned;                    /* lists may start with two owned entries (s2_schedule_pack_gathered_owned) */
    int q_off, k_off, v_off, stage_bytes, bar_off, slot_off, scratch_off, smem;
    int n_first;                   /* persistent: entries handed over in the slot (owned: 2) */
    int prod_regs, cons_regs, min_ctas;
} sm90_shape;

typedef struct sm90 {
    S2_KB_BASE;                                     /* cg, b, fn; tid; consumer: warp in its warpgroup, lane, g, t4 */
    sm90_shape s;
    LLVMValueRef smem;                              /* i32 */
    LLVMValueRef wgc;                               /* consumer: warpgroup index */
    LLVMValueRef head32, batch32, kvh32;
    LLVMValueRef batch, head;                       /* i64 */
    LLVMValueRef q_len, kv_len, q_start, tile_pos0;
    LLVMValueRef q_row0, k_row0, bidx32, lse_base;  /* varlen: first token rows, batch coordinate; lse index of row 0 */
    LLVMValueRef entries, begin, end;
    LLVMValueRef it0, nitem;                        /* ring entries and items before this item (persistent) */
    LLVMValueRef obase;
    LLVMValueRef item;                              /* persistent: the item's work word (head * q_tiles + rel) */
    LLVMValueRef first[2][6];                       /* persistent consumer: the first entries' words, from the slot */
    s2_flash_rows acc;                              /* O, m, l (flash.h) */
    LLVMValueRef qa[MAX_D / 16][4];                 /* q_regs: the thread's Q fragments */
} sm90;

static LLVMValueRef addc(sm90 *k, LLVMValueRef a, long long v) { return v ? add(k, a, c32(k, v)) : a; }

static LLVMValueRef bar_addr(sm90 *k, int idx, LLVMValueRef stage)
{
    return s2_kb_mbar(&k->kb, k->smem, k->s.bar_off + 8 * idx, stage);
}
/* barrier layout: full[0..S), empty[0..S), q */
static LLVMValueRef full_bar(sm90 *k, LLVMValueRef st) { return bar_addr(k, 0, st); }
static LLVMValueRef empty_bar(sm90 *k, LLVMValueRef st) { return bar_addr(k, k->s.stages, st); }
static LLVMValueRef q_bar(sm90 *k) { return bar_addr(k, 2 * k->s.stages, NULL); }
/* persistent: the consumers are done with Q (arrive after an item's last wgmma) */
static LLVMValueRef q_empty_bar(sm90 *k) { return bar_addr(k, 2 * k->s.stages + 1, NULL); }

/* Address of the field at byte field_off of entry e of the list. */
static LLVMValueRef entry_ptr(sm90 *k, LLVMValueRef e, int field_off)
{
    LLVMTypeRef i8 = LLVMInt8TypeInContext(k->cg->llctx);
    LLVMValueRef off = LLVMBuildAdd(k->b, LLVMBuildMul(k->b, sext64(k, e), c64(k, k->s.entry_bytes), ""),
                                    c64(k, field_off), "");
    return LLVMBuildInBoundsGEP2(k->b, i8, k->entries, &off, 1, "");
}

static LLVMValueRef entry_field(sm90 *k, LLVMValueRef e, int field_off, LLVMTypeRef ty)
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

static int entry_words(const sm90_shape *s) { return s->entry_bytes / 4; }

/* The words of entry e when ok (as entry_field_if); decoded by entry_from_words. */
static void entry_words_if(sm90 *k, LLVMValueRef e, LLVMValueRef ok, LLVMValueRef *w)
{
    for (int j = 0; j < entry_words(&k->s); j++)
        w[j] = entry_field_if(k, e, ok, 4 * j);
}

static LLVMValueRef load_i32(sm90 *k, LLVMValueRef base, LLVMValueRef idx64, const char *name)
{
    LLVMValueRef p = LLVMBuildInBoundsGEP2(k->b, k->cg->t_i32, base, &idx64, 1, "");
    LLVMValueRef v = LLVMBuildLoad2(k->b, k->cg->t_i32, p, name);
    LLVMSetAlignment(v, 4);
    return v;
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
static LLVMValueRef seqinfo_param(sm90 *k) { return param(k, k->s.persistent ? P_COUNT : P_WORK); }

static void seq_item(sm90 *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    LLVMValueRef dflt[4] = {c32(k, 0), param(k, P_QLEN), c32(k, 0), param(k, P_KVLEN)}, seq[4];
    s2_nv_seqinfo(cg, seqinfo_param(k), k->batch32, dflt, seq);
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
        LLVMValueRef cls = load_i32(k, param(k, P_CLASS), k->head, "class");
        LLVMValueRef li = sext64(k, add(k, LLVMBuildMul(b, cls, q_tiles, ""), rel));
        k->begin = load_i32(k, param(k, P_OFFSETS), li, "begin");
        k->end = load_i32(k, param(k, P_OFFSETS), LLVMBuildAdd(b, li, c64(k, 1), ""), "end");
    }
    seq_item(k);
}

/* ---- persistent work hand-off ----
 * The producer runs one item ahead of the consumers and publishes the next
 * item with its Q copy (the Q barrier): its index w, work word, list bounds
 * and the words of its first entries (two with owned pairs), so that a
 * consumer starts an item with shared-memory reads only, not the chain of
 * global loads work -> class -> offsets -> entries (four L2 round trips
 * with the tensor cores idle at every tile boundary).  The consumers read
 * the slot before they release Q (q_empty), the producer writes it after. */
enum { SLOT_W, SLOT_ITEM, SLOT_BEGIN, SLOT_END, SLOT_ENTRY };

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

static LLVMValueRef slot_load(sm90 *k, int word)
{
    LLVMValueRef v = LLVMBuildLoad2(k->b, k->cg->t_i32, slot_ptr(k, word), "slot_v");
    LLVMSetVolatile(v, 1);
    LLVMSetAlignment(v, 4);
    return v;
}

/* The CTA's work items.  Plain grid: the one item of (x, y, z), tiles
 * reversed so heavy ones go first.  Persistent grid: items w below
 * n_work * batch, item w being batch w / n_work of work[w % n_work] =
 * head * q_tiles + rel; the host orders work longest heads first and
 * longest tiles first within a head.  CTA x starts with w = x; each next w
 * is G + a fetch of the launch's counter (dynamic: a CTA takes the next
 * item when it is ready for one, as the hardware's block scheduler does),
 * fetched by the producer and handed to the consumers through a shared
 * word published by the Q barrier.  it0 / nitem count the ring entries and
 * items done before, which set the mbarrier phases. */
typedef struct work_loop {
    s2_nv_loop loop;
} work_loop;

static void work_begin(sm90 *k, work_loop *w, const char *name, LLVMValueRef start, bool consumer)
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
        item = slot_load(k, SLOT_ITEM);
        given[0] = slot_load(k, SLOT_BEGIN);
        given[1] = slot_load(k, SLOT_END);
        for (int e = 0; e < k->s.n_first; e++)
            for (int j = 0; j < entry_words(&k->s); j++)
                k->first[e][j] = slot_load(k, SLOT_ENTRY + e * entry_words(&k->s) + j);
    } else {
        item = load_i32(k, param(k, P_WORK), LLVMBuildZExt(b, LLVMBuildURem(b, wi, nw, ""), cg->t_i64, ""), "item");
    }
    k->item = item;
    LLVMValueRef q_tiles = param(k, P_Q_TILES);
    setup_item(k, LLVMBuildUDiv(b, item, q_tiles, "head"), LLVMBuildUDiv(b, wi, nw, "batch"),
               LLVMBuildURem(b, item, q_tiles, "rel"), consumer ? given : NULL);
    k->it0 = w->loop.carried[0];
    k->nitem = w->loop.carried[1];
}

static void work_end(sm90 *k, work_loop *w, LLVMValueRef w_next)
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
    for (int c = 0; c < k->s.D / 64; c++) {
        LLVMValueRef dst = addc(k, k->smem, dst_off + c * rows * 128);
        if (dst_dyn)
            dst = add(k, dst, dst_dyn);
        LLVMValueRef co[4] = {c32(k, 64 * c), row0, head, k->bidx32};
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
            for (int c = 0; c < s->D / 64; c++) {
                LLVMValueRef dst = add(k, addc(k, k->smem, base + c * s->BN * 128 + j * rows * 128), soff);
                LLVMValueRef co[4] = {c32(k, 64 * c), row0s[j], k->kvh32, k->bidx32};
                s2_nv_tma_load_4d(k->cg, dst, bar, param(k, m ? P_TMAP_V : P_TMAP_K), co);
            }
        }
}

static void producer(sm90 *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    const sm90_shape *s = &k->s;
    s2_nv_setmaxnreg(cg, false, s->prod_regs);
    /* one thread issues the copies */
    s2_nv_if one;
    s2_nv_if_begin(cg, &one, LLVMBuildICmp(b, LLVMIntEQ, k->tid, c32(k, 0), ""), "tma_thread");
    for (int m = P_TMAP_Q; m <= P_TMAP_V; m++)
        s2_nv_prefetch_tensormap(cg, param(k, m));
    work_loop wl;
    work_begin(k, &wl, "work_p", s->persistent ? s2_nv_ctaid(cg, 'x') : NULL, false);
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
            entry_words_if(k, en, LLVMBuildICmp(b, LLVMIntSLT, en, k->end, ""), words[e]);
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
    s2_nv_mbar_arrive_expect_tx(cg, q_bar(k), s->BM * s->D * 2);
    for (int w = 0; w < s->NC; w++)
        tma_tile(k, s->q_off + w * SLAB * s->D * 2, NULL, SLAB, q_bar(k), P_TMAP_Q, addc(k, qrow0, SLAB * w), k->head32);
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
        LLVMValueRef blk = ahead ? loop.carried[j] : entry_field(k, loop.iv, 4 * j, cg->t_i32);
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
        work_end(k, &wl, add(k, grid_x(k), fetched));
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

/* ---- consumers ---- */

/* tile row of this thread's row hr (0: g, 1: g + 8) */
static LLVMValueRef tile_row(sm90 *k, int hr)
{
    LLVMValueRef r = add(k, LLVMBuildShl(k->b, k->wgc, c32(k, 6), ""), LLVMBuildShl(k->b, k->warp, c32(k, 4), ""));
    return add(k, r, addc(k, k->g, 8 * hr));
}

/* Descriptor steps (bytes >> 4) of the k16 steps: Q and K K-major in
 * 64-column blocks (+32 B inside a block, next block after rows * 128 B),
 * V N-major, 16 key rows per step (PTX ISA 9.7.15.5.1.2.1, canonical layouts). */
static void qk_steps(const sm90_shape *s, int *a_step, int *b_step)
{
    for (int j = 0; j < s->D / 16; j++) {
        a_step[j] = ((j / 4) * SLAB * 128 + (j % 4) * 32) >> 4;
        b_step[j] = ((j / 4) * s->BN * 128 + (j % 4) * 32) >> 4;
    }
}

static void v_steps(const sm90_shape *s, int *v_step)
{
    for (int j = 0; j < s->BN / 16; j++)
        v_step[j] = (j * 16 * 128) >> 4;
}

/* Q as the wgmma A operand in registers (the m16n8k16 A map per warp, as pack_p): step j,
 * register q holds row g (+8 if q & 1), columns 16j + 2*t4 (+8 if q & 2) of
 * the warp's 16 rows, read from the 128B-swizzled slab (16-byte chunk ^= row % 8). */
static void load_q_regs(sm90 *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    LLVMTypeRef i8 = LLVMInt8TypeInContext(cg->llctx);
    LLVMValueRef base = s2_nv_dynamic_smem(cg);
    LLVMValueRef r0 = add(k, LLVMBuildShl(b, k->warp, c32(k, 4), ""), k->g);
    LLVMValueRef row = add(k, LLVMBuildMul(b, k->wgc, c32(k, SLAB * k->s.D * 2), ""), LLVMBuildShl(b, r0, c32(k, 7), ""));
    row = add(k, row, LLVMBuildShl(b, k->t4, c32(k, 2), ""));
    for (int j = 0; j < k->s.D / 16; j++)
        for (int q = 0; q < 4; q++) {
            int chunk = 2 * (j % 4) + (q >> 1);
            LLVMValueRef sw = LLVMBuildShl(b, LLVMBuildXor(b, k->g, c32(k, chunk), ""), c32(k, 4), "");
            LLVMValueRef off = add(k, addc(k, row, k->s.q_off + (j / 4) * SLAB * 128 + (q & 1) * 8 * 128), sw);
            LLVMValueRef off64 = LLVMBuildZExt(b, off, cg->t_i64, "");
            LLVMValueRef p = LLVMBuildInBoundsGEP2(b, i8, base, &off64, 1, "");
            LLVMValueRef v = LLVMBuildLoad2(b, cg->t_i32, p, "q");
            LLVMSetAlignment(v, 4);
            k->qa[j][q] = v;
        }
}

static LLVMValueRef q_desc(sm90 *k)
{
    LLVMValueRef qa = add(k, addc(k, k->smem, k->s.q_off), LLVMBuildMul(k->b, k->wgc, c32(k, SLAB * k->s.D * 2), ""));
    return s2_nv_wgmma_desc(k->cg, qa, 16, 1024);
}

static LLVMValueRef kv_desc(sm90 *k, int off, LLVMValueRef stage, int lbo)
{
    LLVMValueRef a = add(k, addc(k, k->smem, off), LLVMBuildMul(k->b, stage, c32(k, k->s.stage_bytes), ""));
    return s2_nv_wgmma_desc(k->cg, a, lbo, 1024);
}

/* S = Q·K(stage)ᵀ, issued and committed (no wait). */
static void issue_scores(sm90 *k, LLVMValueRef stage, LLVMValueRef *sacc)
{
    const sm90_shape *s = &k->s;
    int a_step[MAX_D / 16], b_step[MAX_D / 16];
    qk_steps(s, a_step, b_step);
    for (int i = 0; i < s->BN / 2; i++)
        sacc[i] = LLVMGetUndef(k->cg->t_f32);
    if (s->q_regs)
        s2_nv_wgmma_rs_rs(k->cg, s->dt, s->BN, s->D / 16, k->qa, kv_desc(k, s->k_off, stage, 16), b_step, sacc, 0, 0,
                          NULL, NULL, NULL, NULL);
    else
        s2_nv_wgmma_ss(k->cg, s->dt, s->BN, s->D / 16, q_desc(k), a_step, kv_desc(k, s->k_off, stage, 16), b_step,
                       false, false, sacc);
}

/* O += P·V(stage), P packed from the probabilities: the S accumulator layout
 * is the RS A layout (FA3 convert_layout_acc_Aregs, MmaPV_is_RS). */
static void issue_pv(sm90 *k, LLVMValueRef stage, LLVMValueRef (*pa)[4], LLVMValueRef *oacc)
{
    const sm90_shape *s = &k->s;
    int v_step[MAX_BN / 16];
    v_steps(s, v_step);
    s2_nv_wgmma_rs(k->cg, s->dt, s->D, s->BN / 16, pa, kv_desc(k, s->v_off, stage, s->BN * 128), v_step, true, oacc);
}

/* S(stage) and O += P·V(prev) as two groups of one batch. */
static void issue_scores_pv(sm90 *k, LLVMValueRef stage, LLVMValueRef *sacc, LLVMValueRef prev,
                            LLVMValueRef (*pa)[4], LLVMValueRef *oacc)
{
    const sm90_shape *s = &k->s;
    int a_step[MAX_D / 16], b_step[MAX_D / 16], v_step[MAX_BN / 16];
    qk_steps(s, a_step, b_step);
    v_steps(s, v_step);
    for (int i = 0; i < s->BN / 2; i++)
        sacc[i] = LLVMGetUndef(k->cg->t_f32);
    if (s->q_regs) {
        s2_nv_wgmma_rs_rs(k->cg, s->dt, s->BN, s->D / 16, k->qa, kv_desc(k, s->k_off, stage, 16), b_step, sacc, s->D,
                          s->BN / 16, pa, kv_desc(k, s->v_off, prev, s->BN * 128), v_step, oacc);
        return;
    }
    s2_nv_wgmma_ss_rs(k->cg, s->dt, s->BN, s->D / 16, q_desc(k), a_step, kv_desc(k, s->k_off, stage, 16), b_step,
                      sacc, s->D, s->BN / 16, pa, kv_desc(k, s->v_off, prev, s->BN * 128), v_step, oacc);
}

static void pack_p(sm90 *k, LLVMValueRef sc[][4], LLVMValueRef (*pa)[4])
{
    for (int j = 0; j < k->s.BN / 16; j++) {
        pa[j][0] = s2_nv_pack2(k->cg, k->s.dt, sc[2 * j][0], sc[2 * j][1]);
        pa[j][1] = s2_nv_pack2(k->cg, k->s.dt, sc[2 * j][2], sc[2 * j][3]);
        pa[j][2] = s2_nv_pack2(k->cg, k->s.dt, sc[2 * j + 1][0], sc[2 * j + 1][1]);
        pa[j][3] = s2_nv_pack2(k->cg, k->s.dt, sc[2 * j + 1][2], sc[2 * j + 1][3]);
    }
}

/* The fields apply_mask reads of entry e: flags, live bits, each slot's block. */
typedef struct entry_vals {
    LLVMValueRef flags, live, blk[4];
} entry_vals;

static void load_entry(sm90 *k, LLVMValueRef e, entry_vals *ev)
{
    s2_cg *cg = k->cg;
    bool gat = k->s.gather > 1;
    ev->flags = entry_field(k, e, gat ? 16 : 4, cg->t_i32);
    ev->live = gat ? LLVMBuildZExt(k->b, entry_field(k, e, 20, cg->t_i32), cg->t_i64, "") : entry_field(k, e, 8, cg->t_i64);
    for (int j = 0; j < (gat ? k->s.gather : 1); j++)
        ev->blk[j] = entry_field(k, e, gat ? 4 * j : 0, cg->t_i32);
}

/* An entry's fields from its words (the persistent consumer's first
 * entries, handed over in the slot). */
static void entry_from_words(sm90 *k, LLVMValueRef *w, entry_vals *ev)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    if (k->s.gather > 1) {
        for (int j = 0; j < k->s.gather; j++)
            ev->blk[j] = w[j];
        ev->flags = w[4];
        ev->live = LLVMBuildZExt(b, w[5], cg->t_i64, "");
    } else {
        ev->blk[0] = w[0];
        ev->flags = w[1];
        ev->live = LLVMBuildOr(b, LLVMBuildZExt(b, w[2], cg->t_i64, ""),
                               LLVMBuildShl(b, LLVMBuildZExt(b, w[3], cg->t_i64, ""), c64(k, 32), ""), "live");
    }
}

/* Token mask unless the entry is FULL (as templates/fwd.c): live sub-block
 * pair, c <= kv_len-1-kpos0 (zero-filled TMA rows past kv_len included) and,
 * causal, c <= qpos - kpos0.  Masked scores become -inf.  ev: the entry's
 * fields, loaded by the caller before its stage wait (their latency then
 * passes under the wait and the S wgmma; run 25). */
static void apply_mask(sm90 *k, LLVMValueRef sc[][4], const entry_vals *ev)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    const sm90_shape *s = &k->s;
    int NT = s->BN / 8;
    bool gat = s->gather > 1;
    /* an owned entry is run by its owner only: OWN_FULL is its FULL */
    unsigned full_bits = S2_ENTRY_FULL | (s->owned ? S2_ENTRY_OWN_FULL : 0u);
    LLVMValueRef full = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildAnd(b, ev->flags, c32(k, full_bits), ""), c32(k, 0),
                                      "full");
    /* varlen: a FULL tile may run past a shorter sequence (never when causal,
     * fwd.c); bidirectional tiles of a sequence shorter than the schedule's
     * kv_len parameter are always masked (gathered tiles have no single kpos0) */
    if (!s->causal)
        full = LLVMBuildAnd(b, full, LLVMBuildICmp(b, LLVMIntEQ, k->kv_len, param(k, P_KVLEN), ""), "full");
    LLVMBasicBlockRef from = LLVMGetInsertBlock(b);
    LLVMBasicBlockRef mask_bb = LLVMAppendBasicBlockInContext(cg->llctx, k->fn, "mask");
    LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(cg->llctx, k->fn, "masked");
    LLVMBuildCondBr(b, full, join, mask_bb);
    LLVMPositionBuilderAtEnd(b, mask_bb);
    LLVMValueRef live = ev->live;
    /* key position of column 0 of each slot (one slot unless gathered), and
     * the slot's first column in the tile */
    int nslot = gat ? s->gather : 1, slot_cols = s->BN / nslot;
    LLVMValueRef kpos[4];
    for (int j = 0; j < nslot; j++) {
        LLVMValueRef blk = ev->blk[j];
        kpos[j] = LLVMBuildSub(b, LLVMBuildMul(b, blk, c32(k, slot_cols), ""), c32(k, j * slot_cols), "kpos0");
    }
    LLVMValueRef masked[MAX_BN / 8][4];
    LLVMValueRef ninf = cf(k, -INFINITY);
    LLVMValueRef col0 = LLVMBuildShl(b, k->t4, c32(k, 1), "col0");
    for (int hr = 0; hr < 2; hr++) {
        LLVMValueRef r = tile_row(k, hr);
        LLVMValueRef isub = LLVMBuildLShr(b, r, c32(k, s->sub_m_log2), "");
        LLVMValueRef shift = LLVMBuildZExt(b, LLVMBuildMul(b, isub, c32(k, s->sub_n), ""), cg->t_i64, "");
        LLVMValueRef bits = LLVMBuildTrunc(b, LLVMBuildLShr(b, live, shift, ""), cg->t_i32, "row_live");
        LLVMValueRef lim_rel[4];
        for (int j = 0; j < nslot; j++) {
            /* column c of the tile holds key kpos[slot] + c */
            LLVMValueRef limit = LLVMBuildSub(b, LLVMBuildSub(b, k->kv_len, c32(k, 1), ""), kpos[j], "");
            if (s->causal) {
                LLVMValueRef d = LLVMBuildSub(b, add(k, k->tile_pos0, r), kpos[j], "");
                limit = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, d, limit, ""), d, limit, "limit");
            }
            lim_rel[j] = LLVMBuildSub(b, limit, col0, "");
        }
        for (int n = 0; n < NT; n++) {
            int jsub = n * 8 / s->sub_n_size;
            LLVMValueRef lim = lim_rel[gat ? n * 8 / slot_cols : 0];
            LLVMValueRef live_bit = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildAnd(b, bits, c32(k, 1 << jsub), ""), c32(k, 0), "");
            for (int e2 = 0; e2 < 2; e2++) {
                int i = 2 * hr + e2;
                LLVMValueRef inside = LLVMBuildICmp(b, LLVMIntSLE, c32(k, n * 8 + e2), lim, "");
                masked[n][i] = LLVMBuildSelect(b, LLVMBuildAnd(b, inside, live_bit, ""), sc[n][i], ninf, "");
            }
        }
    }
    s2_nv_join_scores(cg, from, join, NT, sc, masked);
}

/* Online softmax (flash.h; FA2 softmax_rescale_o) of the thread's two rows; returns the O
 * rescale factors in alpha[2] (applied by the caller once P(j-1)·V is done). */
static LLVMValueRef online_softmax(sm90 *k, LLVMValueRef sc[][4], LLVMValueRef alpha[2])
{
    LLVMValueRef grew[2];
    for (int hr = 0; hr < 2; hr++)
        alpha[hr] = s2_flash_softmax_row(k->cg, &k->acc, hr, sc, k->s.BN / 8, param(k, P_SCALE_LOG2), false,
                                         k->s.lazy ? &grew[hr] : NULL);
    /* lazy: whether any row of the warp must rescale O (a warp-uniform branch) */
    return k->s.lazy ? s2_nv_vote_any(k->cg, LLVMBuildOr(k->b, grew[0], grew[1], "")) : NULL;
}

static void load_o(sm90 *k, LLVMValueRef *oacc)
{
    for (int dn = 0; dn < k->s.D / 8; dn++)
        for (int i = 0; i < 4; i++)
            oacc[4 * dn + i] = LLVMBuildLoad2(k->b, k->cg->t_f32, k->acc.o[dn][i], "");
}

static void store_o(sm90 *k, LLVMValueRef *oacc)
{
    for (int dn = 0; dn < k->s.D / 8; dn++)
        for (int i = 0; i < 4; i++)
            LLVMBuildStore(k->b, oacc[4 * dn + i], k->acc.o[dn][i]);
}

/* O *= alpha per row; with lazy rescaling only where grow (warp-uniform) holds */
static void rescale_o(sm90 *k, LLVMValueRef alpha[2], LLVMValueRef grow)
{
    s2_nv_if any;
    if (grow)
        s2_nv_if_begin(k->cg, &any, grow, "rescale");
    for (int dn = 0; dn < k->s.D / 8; dn++)
        for (int i = 0; i < 4; i++) {
            LLVMValueRef p = k->acc.o[dn][i];
            LLVMBuildStore(k->b, LLVMBuildFMul(k->b, LLVMBuildLoad2(k->b, k->cg->t_f32, p, ""), alpha[i >> 1], ""), p);
        }
    if (grow)
        s2_nv_if_end(k->cg, &any);
}

/* alpha and grow of an entry, kept for the next iteration (split) */
typedef struct rescale_slots {
    LLVMValueRef alpha[2], grow;
} rescale_slots;

static void rescale_slots_new(sm90 *k, rescale_slots *rs)
{
    LLVMBuilderRef b = k->b;
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(b);
    LLVMPositionBuilderBefore(b, LLVMGetFirstInstruction(LLVMGetEntryBasicBlock(k->fn)));
    for (int h = 0; h < 2; h++)
        rs->alpha[h] = LLVMBuildAlloca(b, k->cg->t_f32, "alpha");
    rs->grow = LLVMBuildAlloca(b, LLVMInt1TypeInContext(k->cg->llctx), "grow");
    LLVMPositionBuilderAtEnd(b, cur);
}

static void rescale_slots_store(sm90 *k, const rescale_slots *rs, LLVMValueRef alpha[2], LLVMValueRef grow)
{
    for (int h = 0; h < 2; h++)
        LLVMBuildStore(k->b, alpha[h], rs->alpha[h]);
    LLVMBuildStore(k->b, grow ? grow : LLVMConstInt(LLVMInt1TypeInContext(k->cg->llctx), 1, 0), rs->grow);
}

/* O *= the alpha kept in rs (split: before P·V of the entry it came from) */
static void rescale_o_kept(sm90 *k, const rescale_slots *rs)
{
    LLVMValueRef alpha[2];
    for (int h = 0; h < 2; h++)
        alpha[h] = LLVMBuildLoad2(k->b, k->cg->t_f32, rs->alpha[h], "");
    LLVMValueRef grow = LLVMBuildLoad2(k->b, LLVMInt1TypeInContext(k->cg->llctx), rs->grow, "");
    rescale_o(k, alpha, grow);
}

static void scores_from_acc(sm90 *k, LLVMValueRef *sacc, LLVMValueRef sc[][4])
{
    for (int n = 0; n < k->s.BN / 8; n++)
        for (int i = 0; i < 4; i++)
            sc[n][i] = sacc[4 * n + i];
}

static LLVMValueRef stage_of(sm90 *k, LLVMValueRef i) { return s2_kb_ring_stage(&k->kb, i, k->s.stages, "stage"); }
static LLVMValueRef parity_of(sm90 *k, LLVMValueRef i) { return s2_kb_ring_parity(&k->kb, i, k->s.stages, "parity"); }

/* Ping-pong (FA3 warp_scheduler_barrier_sync): wait for this warpgroup's turn on the tensor cores,
 * and hand them to the other after issuing. */
static void turn_wait(sm90 *k)
{
    if (!k->s.pingpong)
        return;
    s2_nv_if a, b2;
    LLVMValueRef first = LLVMBuildICmp(k->b, LLVMIntEQ, k->wgc, c32(k, 0), "");
    s2_nv_if_begin(k->cg, &a, first, "turn0");
    s2_nv_named_barrier(k->cg, BAR_WG_BASE, 256, false);
    s2_nv_if_end(k->cg, &a);
    s2_nv_if_begin(k->cg, &b2, LLVMBuildNot(k->b, first, ""), "turn1");
    s2_nv_named_barrier(k->cg, BAR_WG_BASE + 1, 256, false);
    s2_nv_if_end(k->cg, &b2);
}

static void turn_pass(sm90 *k)
{
    if (!k->s.pingpong)
        return;
    s2_nv_if a, b2;
    LLVMValueRef first = LLVMBuildICmp(k->b, LLVMIntEQ, k->wgc, c32(k, 0), "");
    s2_nv_if_begin(k->cg, &a, first, "pass0");
    s2_nv_named_barrier(k->cg, BAR_WG_BASE + 1, 256, true);
    s2_nv_if_end(k->cg, &a);
    s2_nv_if_begin(k->cg, &b2, LLVMBuildNot(k->b, first, ""), "pass1");
    s2_nv_named_barrier(k->cg, BAR_WG_BASE, 256, true);
    s2_nv_if_end(k->cg, &b2);
}

/* ptxas schedules the wgmma.wait_group of P(i-1)·V (and the stage release
 * behind it) right after the wait for S(i), above the softmax it does not
 * depend on, which serialises softmax and P·V (SASS: DEPBAR.LE 0 before
 * the MUFU.EX2s).  A shared-memory store of the last row sum (a per-thread
 * scratch word, never read) is kept above the wait, and depends on the
 * whole softmax. */
static void fence_pv_wait(sm90 *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    LLVMValueRef ct = LLVMBuildSub(b, k->tid, c32(k, S2_WARPGROUP), "");
    LLVMValueRef off = add(k, c32(k, k->s.scratch_off), LLVMBuildShl(b, ct, c32(k, 2), ""));
    LLVMValueRef off64 = LLVMBuildZExt(b, off, cg->t_i64, "");
    LLVMValueRef p = LLVMBuildInBoundsGEP2(b, LLVMInt8TypeInContext(cg->llctx), s2_nv_dynamic_smem(cg), &off64, 1, "");
    LLVMValueRef st = LLVMBuildStore(b, LLVMBuildLoad2(b, cg->t_f32, k->acc.l[1], ""), p);
    LLVMSetVolatile(st, 1);
}

/* Wait for the stage of ring index i and release it unused, when cond. */
static void release_skipped(sm90 *k, LLVMValueRef cond, LLVMValueRef i)
{
    s2_nv_if sk;
    s2_nv_if_begin(k->cg, &sk, cond, "skip_stage");
    s2_nv_mbar_wait(k->cg, full_bar(k, stage_of(k, i)), parity_of(k, i));
    s2_nv_mbar_arrive(k->cg, empty_bar(k, stage_of(k, i)));
    s2_nv_if_end(k->cg, &sk);
}

/* The consumer loop, FA3's intra-warpgroup overlap:
 *   prologue: S(0); wait; mask; softmax; P(0)
 *   entry i >= 1: issue S(i); issue O += P(i-1)·V(i-1); wait S(i) (1 group
 *     pending); mask, softmax -> P(i), alpha(i); wait PV; release stage i-1;
 *     O *= alpha(i)
 *   epilogue: O += P(last)·V(last); wait; release.
 * P(i-1) was made with m(i-1), so O after adding it is in m(i-1)'s scale and
 * alpha(i) = 2^(m(i-1) - m(i)) rescales it afterwards.  With split, O *=
 * alpha(i) moves to the next iteration, between the issue of S(i+1) and of
 * P(i)·V (FA3's order: the multiplies run under the S wgmma); with lazy, it
 * runs only in warps where a row maximum grew.
 * Owned entries (s2_schedule_pack_gathered_owned): a list starting with an
 * OWN0 entry has its first two entries one per warpgroup.  Warpgroup 0 runs
 * entry begin in the prologue and releases begin + 1 unused, warpgroup 1
 * releases begin and runs begin + 1; both then loop from begin + 2.  The
 * instructions are the same in both, only the entry index differs, so no
 * wgmma sits in a divergent path; the stage of the previous entry is
 * carried through the loop. */
static void consumer_loop(sm90 *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    const sm90_shape *s = &k->s;
    int ns = s->BN / 2, no = s->D / 2;
    LLVMValueRef sacc[MAX_BN / 2], oacc[MAX_D / 2], sc[MAX_BN / 8][4], pa[MAX_BN / 16][4], alpha[2];

    s2_nv_if nonempty;
    s2_nv_if_begin(cg, &nonempty, LLVMBuildICmp(b, LLVMIntSLT, k->begin, k->end, ""), "work");
    /* prologue: entry begin (owned, warpgroup 1: begin + 1) */
    LLVMValueRef own = NULL, own1 = NULL, i0 = k->it0;
    entry_vals ev;
    if (s->persistent)
        entry_from_words(k, k->first[0], &ev);
    else
        load_entry(k, k->begin, &ev);
    if (s->owned) {
        /* both candidates' fields loaded at once: no global load waits on
         * another at the tile start */
        entry_vals ev1;
        LLVMValueRef w1[6], *src = k->first[1];
        if (!s->persistent) {
            LLVMValueRef e1 = add(k, k->begin, c32(k, 1));
            entry_words_if(k, e1, LLVMBuildICmp(b, LLVMIntSLT, e1, k->end, ""), w1);
            src = w1;
        }
        entry_from_words(k, src, &ev1);
        own = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildAnd(b, ev.flags, c32(k, S2_ENTRY_OWN0), ""), c32(k, 0), "owned");
        own1 = LLVMBuildAnd(b, own, LLVMBuildICmp(b, LLVMIntEQ, k->wgc, c32(k, 1), ""), "own1");
        ev.flags = LLVMBuildSelect(b, own1, ev1.flags, ev.flags, "");
        ev.live = LLVMBuildSelect(b, own1, ev1.live, ev.live, "");
        for (int j = 0; j < s->gather; j++)
            ev.blk[j] = LLVMBuildSelect(b, own1, ev1.blk[j], ev.blk[j], "");
        release_skipped(k, own1, k->it0);
        i0 = add(k, k->it0, LLVMBuildZExt(b, own1, cg->t_i32, ""));
    }
    LLVMValueRef st0 = stage_of(k, i0);
    s2_nv_mbar_wait(cg, full_bar(k, st0), parity_of(k, i0));
    turn_wait(k);
    issue_scores(k, st0, sacc);
    turn_pass(k);
    s2_nv_wgmma_wait(cg, 0, sacc, ns);
    scores_from_acc(k, sacc, sc);
    apply_mask(k, sc, &ev);
    /* O is still zero: nothing to rescale after the first entry (split: none in the first iteration) */
    (void)online_softmax(k, sc, alpha);
    pack_p(k, sc, pa);
    rescale_slots rs;
    if (s->split) {
        rescale_slots_new(k, &rs);
        rescale_slots_store(k, &rs, alpha, LLVMConstInt(LLVMInt1TypeInContext(cg->llctx), 0, 0));
    }

    /* P of the previous entry travels in the loop as 4 * BN/16 packed i32 */
    int np = 4 * (s->BN / 16);
    LLVMValueRef p_slot[MAX_BN / 16 * 4];
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(b);
    LLVMValueRef first_inst = LLVMGetFirstInstruction(LLVMGetEntryBasicBlock(k->fn));
    LLVMPositionBuilderBefore(b, first_inst);
    for (int i = 0; i < np; i++)
        p_slot[i] = LLVMBuildAlloca(b, cg->t_i32, "p");
    LLVMPositionBuilderAtEnd(b, cur);
    for (int j = 0; j < s->BN / 16; j++)
        for (int q = 0; q < 4; q++)
            LLVMBuildStore(b, pa[j][q], p_slot[4 * j + q]);
    LLVMValueRef from = LLVMBuildAdd(b, k->begin, c32(k, 1), "");
    if (s->owned) {
        /* warpgroup 0 skips entry begin + 1 */
        LLVMValueRef own0 = LLVMBuildAnd(b, own, LLVMBuildICmp(b, LLVMIntEQ, k->wgc, c32(k, 0), ""), "own0");
        release_skipped(k, own0, add(k, k->it0, c32(k, 1)));
        from = add(k, from, LLVMBuildZExt(b, own, cg->t_i32, ""));
    }

    s2_nv_loop loop;
    bool carry = s->owned;
    s2_nv_loop_begin(cg, &loop, "kv", from, k->end, c32(k, 1), &st0, carry ? 1 : 0);
    LLVMValueRef i = add(k, k->it0, LLVMBuildSub(b, loop.iv, k->begin, "i"));
    LLVMValueRef stage = stage_of(k, i);
    LLVMValueRef prev = carry ? loop.carried[0] : stage_of(k, LLVMBuildSub(b, i, c32(k, 1), ""));
    load_entry(k, loop.iv, &ev);
    s2_nv_mbar_wait(cg, full_bar(k, stage), parity_of(k, i));
    for (int j = 0; j < s->BN / 16; j++)
        for (int q = 0; q < 4; q++)
            pa[j][q] = LLVMBuildLoad2(b, cg->t_i32, p_slot[4 * j + q], "");
    if (s->split) {
        turn_wait(k);
        issue_scores(k, stage, sacc);
        rescale_o_kept(k, &rs);
        load_o(k, oacc);
        issue_pv(k, prev, pa, oacc);
        turn_pass(k);
    } else {
        load_o(k, oacc);
        turn_wait(k);
        issue_scores_pv(k, stage, sacc, prev, pa, oacc);
        turn_pass(k);
    }
    s2_nv_wgmma_wait(cg, 1, sacc, ns);
    scores_from_acc(k, sacc, sc);
    apply_mask(k, sc, &ev);
    LLVMValueRef grow = online_softmax(k, sc, alpha);
    if (s->pv_fence)
        fence_pv_wait(k);
    s2_nv_wgmma_wait(cg, 0, oacc, no);
    s2_nv_mbar_arrive(cg, empty_bar(k, prev));
    /* P(i) is converted only now: writing a future wgmma's A registers while
     * P(i-1)·V is in flight serialises the batch (ptxas C7513) */
    pack_p(k, sc, pa);
    store_o(k, oacc);
    if (s->split)
        rescale_slots_store(k, &rs, alpha, grow);
    else
        rescale_o(k, alpha, grow);
    for (int j = 0; j < s->BN / 16; j++)
        for (int q = 0; q < 4; q++)
            LLVMBuildStore(b, pa[j][q], p_slot[4 * j + q]);
    s2_nv_loop_end(cg, &loop, carry ? &stage : NULL);

    /* the last entry's P·V */
    LLVMValueRef last = carry ? loop.result[0]
                                 : stage_of(k, add(k, k->it0, LLVMBuildSub(b, LLVMBuildSub(b, k->end, k->begin, ""),
                                                                           c32(k, 1), "")));
    for (int j = 0; j < s->BN / 16; j++)
        for (int q = 0; q < 4; q++)
            pa[j][q] = LLVMBuildLoad2(b, cg->t_i32, p_slot[4 * j + q], "");
    if (s->split)
        rescale_o_kept(k, &rs);
    load_o(k, oacc);
    issue_pv(k, last, pa, oacc);
    s2_nv_wgmma_wait(cg, 0, oacc, no);
    s2_nv_mbar_arrive(cg, empty_bar(k, last));
    store_o(k, oacc);
    s2_nv_if_end(cg, &nonempty);
}

/* O /= l, LSE; rows outside [q_start, kv_len) are not stored (as fwd.c).
 * A thread holds two adjacent columns of each 8-column group (the
 * accumulator layout: columns 8j + 2·t4, + 1); one exchange with the neighbouring lane gives
 * it four adjacent columns instead, so a warp writes a row's 32-byte
 * sectors whole with 8-byte stores: half the store instructions and
 * sector writes of 4-byte stores (run 79).  Lanes 2j and 2j + 1 share the
 * group pair (2c, 2c + 1): the even lane stores its 4 columns of group 2c,
 * the odd one of group 2c + 1.  Where O or its strides are not 8-byte
 * aligned, 4-byte stores as before. */
static void epilogue(sm90 *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    s2_flash_pairs pr;
    s2_flash_pairs_init(cg, &pr, k->t4, k->s.D);
    LLVMValueRef strides[3] = {param(k, P_OS), param(k, P_OS + 1), param(k, P_OS + 2)};
    LLVMValueRef aligned = s2_flash_aligned8(cg, param(k, P_O), strides, 3);
    for (int hr = 0; hr < 2; hr++) {
        LLVMValueRef inv, lse;
        s2_flash_row_final(cg, &k->acc, hr, param(k, P_SCALE_LOG2), &inv, &lse);
        s2_flash_pairs_pack(cg, &pr, k->s.dt, k->acc.o, hr, inv);
        s2_flash_pairs_exchange(cg, &pr);   /* in every lane (outside the row guard) */

        LLVMValueRef pos = add(k, k->tile_pos0, tile_row(k, hr));
        LLVMValueRef qrow = LLVMBuildSub(b, pos, k->q_start, "qrow");
        LLVMValueRef ok = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSGE, pos, k->q_start, ""),
                                       LLVMBuildICmp(b, LLVMIntSLT, pos, k->kv_len, ""), "");
        s2_nv_if store;
        s2_nv_if_begin(cg, &store, ok, "store");
        LLVMValueRef row_off = add(k, k->obase, LLVMBuildMul(b, sext64(k, qrow), param(k, P_OS + 1), ""));
        s2_flash_pairs_store(cg, &pr, param(k, P_O), row_off, aligned);
        LLVMValueRef lse_ptr = param(k, P_LSE);
        LLVMValueRef want = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntEQ, k->t4, c32(k, 0), ""),
            LLVMBuildICmp(b, LLVMIntNE, LLVMBuildPtrToInt(b, lse_ptr, cg->t_i64, ""), c64(k, 0), ""), "");
        s2_nv_if wl;
        s2_nv_if_begin(cg, &wl, want, "lse");
        LLVMValueRef idx = add(k, k->lse_base, sext64(k, qrow));
        LLVMValueRef lp = LLVMBuildInBoundsGEP2(b, cg->t_f32, lse_ptr, &idx, 1, "");
        LLVMSetAlignment(LLVMBuildStore(b, lse, lp), 4);
        s2_nv_if_end(cg, &wl);
        s2_nv_if_end(cg, &store);
    }
}

static void consumer(sm90 *k, LLVMBasicBlockRef entry_bb)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    s2_nv_setmaxnreg(cg, true, k->s.cons_regs);
    /* broadcast from lane 0: warp-uniform to ptxas, so what derives from it
     * (with owned entries the first entry's stage, and through the carried
     * stage the P·V descriptors) stays in uniform registers (runs 62-66; as
     * CUTLASS's canonical_warp_group_idx) */
    k->wgc = s2_nv_shfl_idx_i32(cg, LLVMBuildSub(b, LLVMBuildLShr(b, k->tid, c32(k, S2_WARPGROUP_LOG2), ""), c32(k, 1), ""), 0);
    s2_kb_lanes(&k->kb, LLVMBuildAnd(b, k->tid, c32(k, S2_WARPGROUP - 1), ""));

    s2_flash_rows_alloca(cg, &k->acc, k->s.D, entry_bb);
    /* the first warpgroup goes first in the ping-pong; both take one turn
     * per entry, so the alternation carries over from item to item */
    if (k->s.pingpong) {
        s2_nv_if w0;
        s2_nv_if_begin(cg, &w0, LLVMBuildICmp(b, LLVMIntEQ, k->wgc, c32(k, 0), ""), "first_turn");
        s2_nv_named_barrier(cg, BAR_WG_BASE, 256, true);
        s2_nv_if_end(cg, &w0);
    }
    work_loop wl;
    LLVMValueRef w0 = NULL;
    if (k->s.persistent) {
        /* the first item: the producer's hand-off, published with Q */
        s2_nv_mbar_wait(cg, q_bar(k), c32(k, 0));
        w0 = slot_load(k, SLOT_W);
    }
    work_begin(k, &wl, "work_c", w0, true);
    k->obase = add(k, LLVMBuildMul(b, LLVMBuildZExt(b, k->bidx32, cg->t_i64, ""), param(k, P_OS), ""),
                   LLVMBuildMul(b, k->head, param(k, P_OS + 2), ""));
    k->obase = add(k, k->obase, LLVMBuildMul(b, sext64(k, k->q_row0), param(k, P_OS + 1), ""));
    s2_flash_rows_zero(cg, &k->acc);
    /* Q is waited for even with an empty list: no copy may be in flight at
     * exit (persistent: waited for with the hand-off, before the item) */
    if (!k->s.persistent)
        s2_nv_mbar_wait(cg, q_bar(k), LLVMBuildAnd(b, k->nitem, c32(k, 1), ""));
    if (k->s.q_regs)
        load_q_regs(k);
    /* persistent: Q in registers frees its tile (and the hand-off word) for
     * the next item's copy at once; else after every wgmma reading it */
    if (k->s.persistent && k->s.q_regs)
        s2_nv_mbar_arrive(cg, q_empty_bar(k));
    consumer_loop(k);
    if (k->s.persistent && !k->s.q_regs)
        s2_nv_mbar_arrive(cg, q_empty_bar(k));
    epilogue(k);
    LLVMValueRef w_next = NULL;
    if (k->s.persistent) {
        s2_nv_mbar_wait(cg, q_bar(k), LLVMBuildAnd(b, add(k, k->nitem, c32(k, 1)), c32(k, 1), ""));
        w_next = slot_load(k, SLOT_W);
    }
    work_end(k, &wl, w_next);
    LLVMBuildRetVoid(b);
}

static void sm90_shape_init(sm90_shape *s, const s2_pattern *p, const s2_kernel_spec *spec)
{
    memset(s, 0, sizeof *s);
    s->dt = spec->dtype;
    s->D = spec->head_dim;
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
     * both faster (RESULTS.md 2026-11-22, "issue 4") */
    s->q_regs = true;
    s->pv_fence = true;
    /* lazy rescaling with the rescale under the S wgmma: faster on both tile heights (runs 49-50) */
    s->lazy = true;
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
    s->stage_bytes = s->BN * s->D * 2;
    s->k_off = s->BM * s->D * 2;
    s->v_off = s->k_off + s->stages * s->stage_bytes;
    s->bar_off = s->v_off + s->stages * s->stage_bytes;
    /* persistent: q_empty, then the next work item's word */
    s->slot_off = s->bar_off + 8 * (2 * s->stages + 2);
    s->n_first = s->owned ? 2 : 1;
    s->smem = s->persistent ? s->slot_off + ((4 * (SLOT_ENTRY + s->n_first * entry_words(s)) + 7) & ~7)
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
}

int s2_fwd_sm90_smem_bytes(const s2_pattern *p, const s2_kernel_spec *spec)
{
    sm90_shape s;
    sm90_shape_init(&s, p, spec);
    return s.smem;
}

s2_status s2_fwd_sm90_build(s2_ctx *ctx, s2_cg *cg, const s2_pattern *p, const s2_kernel_spec *spec, const char *name)
{
    sm90 k = {.kb = {.cg = cg, .b = cg->b}};
    sm90_shape_init(&k.s, p, spec);
    const sm90_shape *s = &k.s;
    if ((s->D != 64 && s->D != 128) || s->BN < 16 || s->BN > MAX_BN || s->BN % 16 || (s->NC != 1 && s->NC != 2) ||
        s->BM != SLAB * s->NC || s->threads != 32 * spec->num_warps)
        return s2_fail(ctx, S2_ERR_INTERNAL, "forward sm_90a: unresolved spec reached the builder");
    LLVMTypeRef params[P_COUNT + 1];
    for (int i = P_Q; i <= P_LSE; i++)
        params[i] = cg->t_ptr_global;
    for (int i = P_QS; i < P_QLEN; i++)
        params[i] = cg->t_i64;
    params[P_QLEN] = params[P_KVLEN] = cg->t_i32;
    params[P_SCALE_LOG2] = cg->t_f32;
    params[P_CLASS] = params[P_OFFSETS] = params[P_ENTRIES] = cg->t_ptr_global;
    params[P_FIRST_Q_TILE] = params[P_Q_TILES] = cg->t_i32;
    for (int i = P_TMAP_Q; i <= P_TMAP_V; i++)
        params[i] = LLVMPointerTypeInContext(cg->llctx, S2_AS_GENERIC);
    params[P_WORK] = params[P_COUNTER] = cg->t_ptr_global;
    params[P_NWORK] = params[P_BATCH] = cg->t_i32;
    int nparams = s->persistent ? P_COUNT : P_WORK;
    params[nparams++] = cg->t_ptr_global;   /* seqinfo */
    k.fn = s2_nv_kernel_new(cg, name, params, (unsigned)nparams, s->threads, s->min_ctas);
    for (int i = P_CLASS; i <= P_ENTRIES; i++) {
        s2_nv_param_attr(cg, k.fn, (unsigned)i, "noalias");
        s2_nv_param_attr(cg, k.fn, (unsigned)i, "readonly");
    }
    if (s->persistent) {
        s2_nv_param_attr(cg, k.fn, P_WORK, "noalias");
        s2_nv_param_attr(cg, k.fn, P_WORK, "readonly");
    }
    s2_nv_param_attr(cg, k.fn, (unsigned)nparams - 1, "noalias");
    s2_nv_param_attr(cg, k.fn, (unsigned)nparams - 1, "readonly");
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
    s2_nv_fence_mbar_init(cg);
    s2_nv_if_end(cg, &init);
    s2_nv_barrier_cta(cg);

    LLVMBasicBlockRef prod_bb = LLVMAppendBasicBlockInContext(cg->llctx, k.fn, "producer");
    LLVMBasicBlockRef cons_bb = LLVMAppendBasicBlockInContext(cg->llctx, k.fn, "consumer");
    LLVMBuildCondBr(k.b, LLVMBuildICmp(k.b, LLVMIntULT, k.tid, c32(&k, S2_WARPGROUP), ""), prod_bb, cons_bb);
    LLVMPositionBuilderAtEnd(k.b, prod_bb);
    producer(&k);
    LLVMPositionBuilderAtEnd(k.b, cons_bb);
    consumer(&k, entry_bb);
    return S2_OK;
}
