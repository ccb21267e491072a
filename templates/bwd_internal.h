/* Internal to the backward templates (templates/bwd*.c):
 * the builder state, the shapes and the helpers both use. */
#ifndef S2C_BWD_INTERNAL_H
#define S2C_BWD_INTERNAL_H

#include "kbase.h"
#include "pack_internal.h"
#include "params.h"
#include "s2c/launch.h"
#include "template.h"

/* Kernel parameters, in ABI order, shared by every kernel of the module
 * (abi/params.h): S2_ABI_BWD, or S2_ABI_BWD_TMA with the q and do maps
 * (P_TMAP_Q, P_TMAP_DO) before seqinfo when spec.bwd_tma > 0; seqinfo is
 * last in both (bwd.p_seqinfo). */
enum { S2_ABI_BWD_TMA_PARAMS(S2_ABI_P_ENUM) P_COUNT };

enum { MAX_D = 256, MAX_N = 16 };

typedef struct bwd_shape {
    s2_dtype dt;
    int D, chunks, row_bytes;
    int BM;                      /* query tile (both kernels) */
    int BN;                      /* key tile of the dQ kernel */
    int KB;                      /* key tile of the dK/dV kernel: 16 per warp */
    int warps, threads, stages;
    int group, heads;
    bool causal;
    bool wg;                     /* sm_90a: wgmma bodies, tiles in the 128-byte-swizzle blocked layout */
    int gather;                  /* dQ kernel, spec kv_gather: key blocks per gathered key tile (1: off) */
    int gbs;                     /* their size (the pattern's block_size): rows per slot */
    int kvg, kgbs;               /* dK/dV kernel: slots of its key tile (KB / kgbs), rows per slot
                                  * (min(block_size, KB)): the lists of s2_schedule_pack_gathered_kv */
    int f_sub_m_log2, f_sub_n_size, f_sub_n;  /* forward schedule, BM x BN */
    int t_sub_m_size, t_sub_n_log2, t_sub_n;  /* transposed schedule, BM x KB */
    int qc;                      /* dK/dV kernel: query columns per chunk (register budget) */
    int kv_cols;                 /* dK/dV kernel: columns of dK and dV per pass over the lists (register budget) */
    bool ds;                     /* s2_bwd_ds_capable: the dK/dV kernel writes dS tiles, NAME_dqds */
    /* shared memory (bytes) */
    int dq_q_off, dq_do_off, dq_stage0, dq_stage_bytes;
    int kv_k_off, kv_v_off, kv_stage0, kv_stage_bytes, kv_lse_off;
    int kv_ds_off;               /* the dS tile on its way out (ds) */
    bool tma;                    /* spec.bwd_tma: the dK/dV kernel's Q and dO tiles by TMA (P_TMAP_*) */
    int kv_bar_off;              /* tma: the ring's full mbarriers, one per stage */
    bool late_refill;            /* dK/dV kernel (wg): the ring's refill under the entry's S and dP */
    int dqds_stages, dqds_stage_bytes;  /* NAME_dqds: K tile then dS tile per stage, from 0 */
    int dqds2_stage_bytes, dqds2_u_off; /* NAME_dqds2: K tile then two dS tiles per stage; the union arrays */
} bwd_shape;

enum { DS_TILE = 64, DS_TILE_BYTES = S2_BWD_DS_TILE_BYTES };

typedef struct bwd {
    S2_KB_BASE;                                 /* cg, b, fn; tid, warp, lane, g, t4 (kbase.h) */
    bwd_shape s;
    LLVMBasicBlockRef entry_bb;
    LLVMValueRef batch;                         /* i64: the grid's batch entry (a packed batch: its sequence) */
    LLVMValueRef q_len, kv_len, q_start;        /* i32: of that sequence (s2_bwd_seq) */
    LLVMValueRef bidx;                          /* i64: the batch index of the strides and stats rows (packed: 0) */
    LLVMValueRef q_row0, k_row0;                /* i64: the sequence's first q and k token rows (uniform: 0) */
    int p_seqinfo;                              /* seqinfo's parameter index in the built ABI */
    LLVMValueRef scale_log2;                    /* f32 */
    LLVMValueRef a_row, a_lc, b_row, b_lc, bt_row, bt_lc; /* ldmatrix lane rows / chunks */
    int min_ctas;                               /* launch bound of the kernel being built (0: 1) */
    struct ring_refill *refill;                 /* the ring's refill left to the entry body (ring_fns.late) */
    LLVMValueRef ring_pos;                      /* i32: the ring position of the entry compute() has (pipeline) */
} bwd;

typedef struct mask_geom {
    bool transposed;
    int row_sub_log2;            /* log2 tokens per sub-block along rows */
    int col_sub_size;            /* tokens per sub-block along columns */
    int sub_n;                   /* key sub-blocks per tile (bit layout) */
} mask_geom;

typedef void (*stat_fn)(bwd *k, int n, int i, LLVMValueRef *lse2, LLVMValueRef *delta, void *user);

typedef void (*entry_fn)(bwd *k, LLVMValueRef e, LLVMValueRef stage_off, void *user);
/* What issuing an entry needs (its tile's position, or its slots'),
 * loaded one ring iteration ahead by prep_fn and carried through the
 * pipeline's loop; take_fn hands them to the next issue. */
typedef struct prep_vals {
    LLVMValueRef v[4];
    int n;
} prep_vals;
typedef void (*prep_fn)(bwd *k, LLVMValueRef e, prep_vals *out, void *user);
typedef void (*take_fn)(bwd *k, const prep_vals *in, void *user);
/* A kernel's ring (s2_bwd_pipeline): issue() copies an entry with
 * the values take() handed it, compute() uses the entry's stage.  With
 * `late`, compute() issues the copies of the ring's refill itself, through
 * s2_bwd_ring_refill, where they hide best (under its first products); the
 * pipeline issues them after compute() when it did not. */
typedef struct ring_fns {
    prep_fn prep;
    take_fn take;
    entry_fn issue, compute;
    bool late;
    bool tma;      /* issue() copies the wgmma operands by TMA (no proxy fence per entry) */
} ring_fns;

/* Issues the pending refill of the ring (ring_fns.late), once; no-op when
 * none is pending. */
void s2_bwd_ring_refill(bwd *k);

/* The dS workspace's tile slot of entry 0 of head h's class for this batch
 * element: batch · head_base[H] + head_base[h] (s2_ds_map). */
LLVMValueRef s2_bwd_ds_slot_base(bwd *k, LLVMValueRef h64);

typedef struct dq_state {
    LLVMValueRef tile_pos0;
    LLVMValueRef kpos0, slot[4];                      /* of the entry in use: key tile position, or slots (gathered) */
    LLVMValueRef kslice, vslice, entries;
    LLVMValueRef lse2[2], delta[2];
    LLVMValueRef (*acc)[4];
    LLVMValueRef ds_base;                             /* NAME_dqds: i64 tile slot of forward entry 0 */
    LLVMValueRef pe[2];                               /* NAME_dqds2: the union slot's entries (-1: none) */
    LLVMValueRef a_shift;                             /* NAME_dqds2: this warpgroup's dS tile in the stage */
} dq_state;

typedef struct kv_state {
    LLVMValueRef rev;                                 /* begin + end - 1 of the list: entries are walked from the end */
    LLVMValueRef kpos0;                               /* key position of row 0 (gathered: of this warp's slot, minus 16·warp) */
    LLVMValueRef slot[4];                             /* gathered: key position of each slot's row 0 (negative: unused) */
    LLVMValueRef qslice, doslice, rowbase, entries;   /* of the current query head */
    LLVMValueRef warp_rows;                           /* i64 mask: live bits of this warp's key sub-block */
    LLVMValueRef warp_shift;                          /* i64: its index */
    LLVMValueRef (*dk)[4], (*dv)[4];
    LLVMValueRef stats;                               /* shared offset of lse2/delta of the stage in use */
    LLVMValueRef ds_on;                               /* i1: the dS workspace is given */
    LLVMValueRef ds_base;                             /* i64: its dS slot base (s2_bwd_ds_slot_base; 0 when off) */
    LLVMValueRef pre_qpos;                            /* the next issue's query position (take_fn) */
    LLVMValueRef h32;                                 /* the query head in use */
    int chunk0;
    int col0, cols;                                   /* the columns of dK and dV this pass holds */
} kv_state;

LLVMValueRef s2_bwd_entry_field(bwd *k, LLVMValueRef entries, LLVMValueRef e, int field_off, LLVMTypeRef ty);
/* The dQ kernel's entry e: sets ds->kpos0 (plain) or ds->slot (gathered key
 * tiles, s2_dev_gentry) and returns its flags and live bits (i64). */
void s2_bwd_dq_entry(bwd *k, dq_state *ds, LLVMValueRef e, LLVMValueRef *flags, LLVMValueRef *live);
/* Token mask of scores sc[ntiles][4] (C layout: rows 16·warp + g + 8·hr,
 * columns col0_const + 8n + 2t + e) unless the entry is FULL.  col_slot
 * (forward orientation, gathered key tiles): the key position of column 0
 * of each k->s.gbs-column slot, instead of col_pos0. */
void s2_bwd_apply_mask(bwd *k, const mask_geom *mg, LLVMValueRef sc[][4], int ntiles, int col0_const, LLVMValueRef flags,
                       LLVMValueRef live, LLVMValueRef row_pos0, LLVMValueRef col_pos0, const LLVMValueRef *col_slot);
void s2_bwd_probs_and_ds(bwd *k, LLVMValueRef sc[][4], LLVMValueRef dp[][4], int ntiles, stat_fn stat, void *user);
void s2_bwd_kv_stat(bwd *k, int n, int i, LLVMValueRef *lse2, LLVMValueRef *delta, void *user);
/* The dK/dV kernel's list entry for the ring's entry e (walked from the end). */
LLVMValueRef s2_bwd_kv_entry(bwd *k, const kv_state *ks, LLVMValueRef e);
void s2_bwd_dq_stat(bwd *k, int n, int i, LLVMValueRef *lse2, LLVMValueRef *delta, void *user);
/* The wgmma entry bodies (templates/bwd_sm90.c), used when shape.wg is set. */
void s2_bwd_wg_dq_compute(bwd *k, LLVMValueRef e, LLVMValueRef soff, void *user);
void s2_bwd_wg_kv_compute(bwd *k, LLVMValueRef e, LLVMValueRef soff, void *user);
/* tma: the full mbarrier of the dK/dV ring's stage at shared offset soff. */
LLVMValueRef s2_bwd_kv_bar(bwd *k, LLVMValueRef soff);
/* NAME_dqds's entry body: acc += dS·K (templates/bwd_sm90.c). */
void s2_bwd_wg_dqds_compute(bwd *k, LLVMValueRef e, LLVMValueRef soff, void *user);

/* ---- shared pieces (templates/bwd_common.c) ---- */

/* Slots of a gathered tile: nslot runs of `rows` rows, slot j's first row
 * at position pos[j]. */
typedef struct bwd_slots {
    const LLVMValueRef *pos;
    int n, rows;
} bwd_slots;

/* acc[n] = A·Yᵀ over the head dim (mma.sync): A = this warp's 16 rows of
 * tile `a`, Y = rows row0 + 8n of tile `bt` (n < ntiles). */
void s2_bwd_mma_abt(bwd *k, LLVMValueRef a, LLVMValueRef bt, int row0, int ntiles, LLVMValueRef acc[][4]);
/* out[dn] += X·Y: X = C-layout values x[ntiles][4] reused as A fragments,
 * Y = rows row0 + 16kk.. of tile `y`. */
void s2_bwd_mma_xy(bwd *k, LLVMValueRef x[][4], int ntiles, LLVMValueRef y, int row0, LLVMValueRef out[][4]);
/* The same over output columns [col0, col0 + cols) only (multiples of 16),
 * out[0] being column col0's. */
void s2_bwd_mma_xy_cols(bwd *k, LLVMValueRef x[][4], int ntiles, LLVMValueRef y, int row0, int col0, int cols,
                        LLVMValueRef out[][4]);
/* Whether row r of the tile at pos0 exists (a query or a key row); *trow its tensor row. */
LLVMValueRef s2_bwd_tile_row(bwd *k, LLVMValueRef pos0, bool query, LLVMValueRef r, LLVMValueRef *trow);
/* cp.async a [rows][D] tile (element slice `slice`, seq stride rstride) into
 * shared `dst`, missing rows zero-filled; _rows checks every row. */
void s2_bwd_load_tile(bwd *k, int rows, LLVMValueRef base, LLVMValueRef slice, LLVMValueRef rstride, LLVMValueRef dst,
                      LLVMValueRef pos0, const bwd_slots *slot, bool query);
void s2_bwd_load_tile_rows(bwd *k, int rows, LLVMValueRef base, LLVMValueRef slice, LLVMValueRef rstride,
                           LLVMValueRef dst, LLVMValueRef pos0, const bwd_slots *slot, bool query);
/* cp.async lse2[BM] then delta[BM] of the query tile at pos0 into dst. */
void s2_bwd_load_row_stats(bwd *k, LLVMValueRef pos0, LLVMValueRef rowbase, LLVMValueRef dst);
/* Field at byte field_off of record e of `size` bytes. */
LLVMValueRef s2_bwd_field_at(bwd *k, LLVMValueRef entries, LLVMValueRef e, int size, int field_off, LLVMTypeRef ty);
/* List `index` of head h's class: [*begin, *end); *first (if asked) the class's first entry. */
void s2_bwd_list_bounds_of(bwd *k, int p_class, int p_offsets, LLVMValueRef h64, LLVMValueRef lists,
                           LLVMValueRef index, LLVMValueRef *begin, LLVMValueRef *end, LLVMValueRef *first);
void s2_bwd_list_bounds(bwd *k, int p_class, int p_offsets, LLVMValueRef h64, LLVMValueRef lists, LLVMValueRef index,
                        LLVMValueRef *begin, LLVMValueRef *end);
/* Entries [begin, end) through an S-stage ring (ring_fns); r0: entries the
 * ring took before (NULL: 0).  Ends with every copy landed and a barrier. */
void s2_bwd_pipeline(bwd *k, LLVMValueRef begin, LLVMValueRef end, int S, int stage0, int stage_bytes,
                     const ring_fns *f, void *user, LLVMValueRef r0);
/* Element offset b·s0 + row0·s1 + h·s2 of a tensor whose strides start at
 * parameter ps (row0: the sequence's first q or k token row). */
LLVMValueRef s2_bwd_slice(bwd *k, int ps, LLVMValueRef h64);
/* A variable-length batch (launch.h, the trailing seqinfo): the lengths and
 * first token rows of sequence k->batch, set once k->batch is known. */
void s2_bwd_seq(bwd *k);
/* The element of query row 0 of head h in the fp32 [B][H][Sq] stats (lse,
 * delta, lse2), or [H][rows] of a packed batch. */
LLVMValueRef s2_bwd_stats_base(bwd *k, LLVMValueRef h64);
/* Whether the query tile at pos0 holds a query of the sequence (a packed
 * batch's schedule covers its longest sequence; other tiles walk nothing). */
LLVMValueRef s2_bwd_q_tile_mine(bwd *k, LLVMValueRef pos0);
/* [D/8][4] f32 accumulators (allocas at the top of the entry block), zeroed. */
void s2_bwd_new_acc(bwd *k, LLVMValueRef acc[][4], const char *name);
/* acc·scale to the rows of the tile at pos0 of a 16-bit tensor, rows that exist only. */
void s2_bwd_store_acc(bwd *k, LLVMValueRef acc[][4], LLVMValueRef scale, LLVMValueRef out, LLVMValueRef sl,
                      LLVMValueRef rstride, LLVMValueRef pos0, bool query);
/* The same for [cols/8][4] accumulators of `cols` columns (sl: the element of the first). */
void s2_bwd_new_acc_cols(bwd *k, LLVMValueRef acc[][4], int cols, const char *name);
void s2_bwd_zero_acc(bwd *k, LLVMValueRef acc[][4], int cols);
void s2_bwd_store_acc_cols(bwd *k, LLVMValueRef acc[][4], int cols, LLVMValueRef scale, LLVMValueRef out,
                           LLVMValueRef sl, LLVMValueRef rstride, LLVMValueRef pos0, bool query);
/* scale_log2 · ln 2: the softmax scale. */
LLVMValueRef s2_bwd_softmax_scale(bwd *k);

/* ---- the kernels (bwd_pre.c, bwd_dq.c, bwd_dqds.c, bwd_dkdv.c) ---- */

void s2_bwd_build_pre(bwd *k);
void s2_bwd_build_dq(bwd *k);
void s2_bwd_build_dkdv(bwd *k);
void s2_bwd_build_dqds(bwd *k);
void s2_bwd_build_dqds2(bwd *k);
/* The dQ kernel's ring callbacks (NAME_dq, NAME_dqds). */
void s2_bwd_dq_prep(bwd *k, LLVMValueRef e, prep_vals *out, void *user);
void s2_bwd_dq_take(bwd *k, const prep_vals *in, void *user);
/* The (first) query tile of a dQ CTA (pair: NAME_dqds2's two): its head
 * (returned), tile, K/V slices, forward list and, if asked, the class's
 * first entry and the tile's index. */
LLVMValueRef s2_bwd_dq_cta(bwd *k, dq_state *ds, bool pair, LLVMValueRef *begin, LLVMValueRef *end,
                           LLVMValueRef *first, LLVMValueRef *rel_out);

#endif
