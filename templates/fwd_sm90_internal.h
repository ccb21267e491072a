/* Internal to the sm_90a forward (templates/fwd_sm90.c: shapes, setup, the
 * work loop and the producer; templates/fwd_sm90_consumer.c: the consumers). */
#ifndef S2C_FWD_SM90_INTERNAL_H
#define S2C_FWD_SM90_INTERNAL_H

#include "flash.h"
#include "params.h"
#include "kbase.h"
#include "pack_internal.h"

/* Parameters, in the order of the widest of the ABIs built here
 * (abi/params.h): S2_ABI_FWD_TMA is its first 28 and seqinfo, so seqinfo's
 * index is the built ABI's (sm90.p_seqinfo); the fp8 ABI's descales follow
 * its seqinfo (sm90.p_descale). */
enum { S2_ABI_FWD_FAMILY(S2_ABI_P_ENUM) P_COUNT };

enum { MAX_D = 256, MAX_BN = 128, SLAB = 64 };
/* named barrier ids of the ping-pong (0 is __syncthreads) */
enum { BAR_WG_BASE = 8 };

typedef struct sm90_shape {
    s2_dtype dt;
    int D, BM, BN, NC, stages, threads;
    int DP, NB;                    /* D rounded up to whole 128-byte (swizzle) column blocks; their count */
    int esz, CB, KS;               /* element bytes; columns per 128-byte block; k of one wgmma */
    bool fp8;                      /* e4m3: V transposed by the producer's warps 1-3 (vt_off), o in out_dt */
    s2_dtype out_dt;               /* O's dtype */
    int PN;                        /* N of P·V: DP (V N-major), D for fp8 (Vᵀ K-major) */
    int vt_off, vt_stage_bytes;    /* fp8: the Vᵀ ring, D rows of 128 bytes (keys) per stage */
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
    int p_seqinfo;                                  /* seqinfo's parameter index in the built ABI */
    int p_descale;                                  /* fp8: q_descale's index (k_, v_ follow); else -1 */
    LLVMValueRef scale_log2, o_mul;                 /* consumer: the scores' scale (descaled), O's factor (NULL: 1) */
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

static inline LLVMValueRef addc(sm90 *k, LLVMValueRef a, long long v) { return v ? add(k, a, c32(k, v)) : a; }

static inline LLVMValueRef bar_addr(sm90 *k, int idx, LLVMValueRef stage)
{
    return s2_kb_mbar(&k->kb, k->smem, k->s.bar_off + 8 * idx, stage);
}
/* barrier layout: full[0..S), empty[0..S), q */
static inline LLVMValueRef full_bar(sm90 *k, LLVMValueRef st) { return bar_addr(k, 0, st); }
static inline LLVMValueRef empty_bar(sm90 *k, LLVMValueRef st) { return bar_addr(k, k->s.stages, st); }
static inline LLVMValueRef q_bar(sm90 *k) { return bar_addr(k, 2 * k->s.stages, NULL); }
/* persistent: the consumers are done with Q (arrive after an item's last wgmma) */
static inline LLVMValueRef q_empty_bar(sm90 *k) { return bar_addr(k, 2 * k->s.stages + 1, NULL); }
/* fp8 (never persistent): stage st's Vᵀ is written (producer warps 1-3 arrive) */
static inline LLVMValueRef vt_bar(sm90 *k, LLVMValueRef st) { return bar_addr(k, 2 * k->s.stages + 2, st); }

static inline int entry_words(const sm90_shape *s) { return s->entry_bytes / 4; }

/* ---- persistent work hand-off ----
 * The producer runs one item ahead of the consumers and publishes the next
 * item with its Q copy (the Q barrier): its index w, work word, list bounds
 * and the words of its first entries (two with owned pairs), so that a
 * consumer starts an item with shared-memory reads only, not the chain of
 * global loads work -> class -> offsets -> entries (four L2 round trips
 * with the tensor cores idle at every tile boundary).  The consumers read
 * the slot before they release Q (q_empty), the producer writes it after. */
enum { SLOT_W, SLOT_ITEM, SLOT_BEGIN, SLOT_END, SLOT_ENTRY };

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

/* The i32 / i64 field at byte field_off of entry e of the list. */
LLVMValueRef s2_sm90_entry_field(sm90 *k, LLVMValueRef e, int field_off, LLVMTypeRef ty);
/* The words of entry e when ok, else reads of a valid address (ignored). */
void s2_sm90_entry_words_if(sm90 *k, LLVMValueRef e, LLVMValueRef ok, LLVMValueRef *w);
/* Word `word` of the persistent hand-off slot (volatile). */
LLVMValueRef s2_sm90_slot_load(sm90 *k, int word);
/* The CTA's work loop (one item on the plain grid) and its end, w_next the next item. */
void s2_sm90_work_begin(sm90 *k, work_loop *w, const char *name, LLVMValueRef start, bool consumer);
void s2_sm90_work_end(sm90 *k, work_loop *w, LLVMValueRef w_next);
/* The consumer warpgroups' part of the kernel (fwd_sm90_consumer.c). */
void s2_sm90_consumer(sm90 *k, LLVMBasicBlockRef entry_bb);

#endif
