/* The part of the mma.sync forwards (fwd.c, bf16 / f16; fwd_tf32.c, fp32)
 * they share (fwd_common.c): the kernel state both structs start with, the
 * CTA setup, the schedule's entries, the cp.async tile loads and the
 * prologue up to the main loop.  Private to those two templates. */
#ifndef S2C_TEMPLATES_FWD_COMMON_H
#define S2C_TEMPLATES_FWD_COMMON_H
#include "flash.h"
#include "kbase.h"
#include "params.h"
#include "template.h"

/* Kernel parameters, in ABI order (abi/params.h, S2_ABI_FWD). */
enum { S2_ABI_FWD_PARAMS(S2_ABI_P_ENUM) P_COUNT };

enum { S2_FWD_MAX_BN = 128 };

/* The tile geometry; esize is the bytes of one tensor element. */
typedef struct s2_fwd_shape {
    s2_dtype dt;
    int esize;
    int D, BM, BN, warps, stages, threads;
    int chunks;                  /* 16-byte chunks per row: D * esize / 16 */
    int sub_m_log2, sub_n_size, sub_n;
    int group;                   /* query heads per kv head */
    int heads;
    bool causal;
    int q_off, k_off, v_off, stage_bytes;
} s2_fwd_shape;

/* The shared kernel state: builder base, shape, the CTA's indices, list,
 * slices and accumulators (set by s2_fwd_prologue). */
#define S2_FWD_FIELDS                                                                              \
    S2_KB_BASE;                                     /* cg, b, fn; tid, warp, lane, g, t4 (kbase.h) */ \
    s2_fwd_shape s;                                                                                \
    LLVMValueRef batch, head, kv_head;              /* i64 */                                      \
    LLVMValueRef q_len, kv_len, q_start, tile_pos0; /* i32 */                                      \
    LLVMValueRef entries, begin, end;               /* list [begin, end) of the entries array */   \
    LLVMValueRef qbase, kbase, vbase, obase;        /* element offsets (i64) of the (b, h) slices */ \
    LLVMValueRef lse_base;                          /* i64 index of query row 0 of (b, h) in lse */ \
    s2_flash_rows acc;                              /* O, m, l (flash.h) */                        \
    LLVMValueRef s_acc[S2_FWD_MAX_BN / 8][4];       /* score allocas (column groups may be skipped) */

typedef struct s2_fwd_kernel {
    S2_FWD_FIELDS
} s2_fwd_kernel;

/* The first member of fwd.c's and fwd_tf32.c's structs: the fields by name
 * and, as one s2_fwd_kernel, k->fk (the same storage). */
#define S2_FWD_BASE        \
    union {                \
        s2_fwd_kernel fk;  \
        struct {           \
            S2_FWD_FIELDS  \
        };                 \
    }

/* The shape's fields common to both forwards, for elements of esize bytes
 * (zeroing the rest). */
void s2_fwd_shape_init(s2_fwd_shape *s, const s2_pattern *p, const s2_kspec *spec, int esize);

/* Query row r (i32) of the tile is at absolute position tile_pos0 + r; it
 * exists when q_start <= pos < kv_len, and is row *trow = pos - q_start of q. */
LLVMValueRef s2_fwd_q_row(s2_fwd_kernel *k, LLVMValueRef r, LLVMValueRef *trow);

/* The CTA's output rows (O and LSE of this (b, h), flash.h). */
s2_flash_out s2_fwd_out(s2_fwd_kernel *k);
/* s2_fwd_q_row of this thread's row hr (s2_fwd_thread_row; k an s2_fwd_kernel, as an s2_flash_row_fn). */
LLVMValueRef s2_fwd_thread_q_row(void *k, int hr, LLVMValueRef *qrow);

/* Field of entry e (i32 index into the entries array): byte offset 0 tile,
 * 4 flags, 8 live. */
LLVMValueRef s2_fwd_entry_field(s2_fwd_kernel *k, LLVMValueRef e, int field_off, LLVMTypeRef ty);

/* When a key tile holds several sub-blocks of the pattern (sub_n > 1), a
 * column group that no query row of the tile keeps is skipped whole;
 * entry_colmask is entry e's mask of live groups. */
static inline bool s2_fwd_skips_columns(const s2_fwd_kernel *k) { return k->s.sub_n > 1; }
LLVMValueRef s2_fwd_entry_colmask(s2_fwd_kernel *k, LLVMValueRef e);

/* if (e < end) copy entry e's K and V into stage `stage` (i32); then commit
 * (always, so the group count stays fixed). */
void s2_fwd_prefetch_kv(s2_fwd_kernel *k, LLVMValueRef e, LLVMValueRef stage);

/* Shared memory of the tiles: Q, then `stages` K and V stages. */
static inline int s2_fwd_shape_smem(const s2_fwd_shape *s) { return s->v_off + s->stages * s->stage_bytes; }

/* Row r (i32) of this thread's half-row hr in the tile: 16 warp + g + 8 hr. */
LLVMValueRef s2_fwd_thread_row(s2_fwd_kernel *k, int hr);

/* ldmatrix addresses inside the loop are stage base + a lane-dependent part
 * + a constant, so ptxas folds the constant into the instruction and only a
 * few lane parts stay live (computing each swizzled address whole would keep
 * one 64-bit register per ldmatrix alive across the loop).
 * s2_fwd_chunk_part: chunk ch0 + lc of a row whose swizzle bits come from
 * lane row r (ch0 a compile-time multiple of the lane span, lc the lane's
 * small chunk); the constant part goes to *cst; the lane part depends only
 * on a small key and is built once (cache). */
typedef struct s2_fwd_lane_parts {
    LLVMValueRef v[10];
} s2_fwd_lane_parts;

LLVMValueRef s2_fwd_chunk_part(s2_fwd_kernel *k, s2_fwd_lane_parts *cache, LLVMValueRef r, int ch0, LLVMValueRef lc,
                               int *cst);

/* Shared address base + part + cst (cst as a separate constant GEP). */
LLVMValueRef s2_fwd_smem_addr(s2_fwd_kernel *k, LLVMValueRef base, LLVMValueRef part, int cst);

/* The loop over the list (a ring of `stages` K/V buffers, one cp.async
 * group per entry): for each entry, S = Q·Kᵀ column group by column group
 * (tiles stores n-tiles n0 .. n0+count-1 of the K stage at byte offset kst
 * into k->s_acc; a group no row keeps is skipped and keeps scores 0, which
 * the token mask makes -inf), the token mask, the online softmax (flash.h),
 * and O += P·V key step by key step (pv adds step kk, keys pv_keys·kk ..
 * pv_keys·kk + pv_keys - 1, from the V stage at vst; the steps of a skipped
 * group are skipped); after the loop, every cp.async group waited for.
 * lanes: the template's lane state. */
typedef void (*s2_fwd_tiles_fn)(s2_fwd_kernel *k, const void *lanes, LLVMValueRef kst, int n0, int count);
typedef void (*s2_fwd_pv_fn)(s2_fwd_kernel *k, const void *lanes, LLVMValueRef vst, int kk, LLVMValueRef sc[][4]);
void s2_fwd_main_loop(s2_fwd_kernel *k, s2_fwd_tiles_fn tiles, s2_fwd_pv_fn pv, int pv_keys, const void *lanes);

/* A tiles function one n-tile at a time: for each n-tile n, ntile adds the
 * products over the head dim into acc (zeroed f32 values), stored into
 * k->s_acc[n] after. */
typedef void (*s2_fwd_ntile_fn)(s2_fwd_kernel *k, const void *lanes, LLVMValueRef kst, int n, LLVMValueRef acc[4]);
void s2_fwd_scores_by_tile(s2_fwd_kernel *k, const void *lanes, LLVMValueRef kst, int n0, int count,
                           s2_fwd_ntile_fn ntile);

/* Create kernel `name` (k->s set) and emit everything before the main loop:
 * CTA setup, accumulators, Q's tile and the first stages - 1 K / V stages
 * in flight, Q's landed, and a CTA barrier. */
void s2_fwd_prologue(s2_fwd_kernel *k, const char *name);
#endif
