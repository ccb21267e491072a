/* Internal to the attention templates (fwd.c, fwd_sm90.c, decode.c): the
 * online-softmax state of one thread's two accumulator rows (rows g and
 * g + 8 of the mma.sync m16n8 and wgmma accumulator layouts), kept in
 * allocas at the top of the entry block so that SROA makes them SSA; and
 * what the forwards (fwd.c, fwd_tf32.c, fwd_sm90.c) share on those rows:
 * the token mask's pieces and the stores of their output rows. */
#ifndef S2C_TEMPLATES_FLASH_H
#define S2C_TEMPLATES_FLASH_H

#include "cg_internal.h"

enum { S2_FLASH_MAX_D = 256 };
/* lazy rescaling: the running maximum is replaced only when a new one exceeds
 * it by more than this many powers of two (s2_flash_softmax_row, grew) */
#define S2_FLASH_LAZY_LOG2 8.0

typedef struct s2_flash_rows {
    LLVMValueRef o[S2_FLASH_MAX_D / 8][4];   /* O: n-tile dn, accumulator register i (f32) */
    LLVMValueRef m[2], l[2];                 /* running max (score units) and this thread's part of the sum */
    int D;
} s2_flash_rows;

/* The allocas, placed before the first instruction of entry_bb (at its end
 * when it is empty); the builder's position is kept. */
void s2_flash_rows_alloca(s2_cg *cg, s2_flash_rows *r, int D, LLVMBasicBlockRef entry_bb);
/* O = 0, m = -inf, l = 0, at the builder's position. */
void s2_flash_rows_zero(s2_cg *cg, const s2_flash_rows *r);
/* Online softmax (base 2, m kept in unscaled score units: exponents are
 * s·scale - m·scale, one FMA each) of row hr over n-tiles 0..NT-1 of sc
 * (columns sc[n][2hr], sc[n][2hr+1]): new max m (a row with nothing kept
 * so far subtracts 0, not -inf), l = l·alpha + the row's sum, the scores
 * replaced by probabilities.  Returns alpha = 2^((m_old - m_new)·scale);
 * with rescale_o, O's row is multiplied by it here.  With grew (lazy
 * rescaling, FlashAttention-4's): the maximum is replaced only when the
 * new one exceeds it by more than S2_FLASH_LAZY_LOG2 in exponent units,
 * else alpha is exactly 1; *grew is the i1 "replaced". */
LLVMValueRef s2_flash_softmax_row(s2_cg *cg, const s2_flash_rows *r, int hr, LLVMValueRef sc[][4], int NT,
                                  LLVMValueRef scale, bool rescale_o, LLVMValueRef *grew);
/* Both of the thread's rows (s2_flash_softmax_row, O not rescaled): alpha[hr]
 * the rows' O factors; with lazy, returns whether a row of the warp replaced
 * its maximum (vote.any: a warp-uniform i1), else NULL (always rescale). */
LLVMValueRef s2_flash_online_softmax(s2_cg *cg, const s2_flash_rows *r, LLVMValueRef sc[][4], int NT,
                                     LLVMValueRef scale, bool lazy, LLVMValueRef alpha[2]);
/* O *= alpha[hr] on each row hr, columns below D (FA2's rescale of O after a
 * new maximum); with grow (a warp-uniform i1, lazy rescaling) only where it holds. */
void s2_flash_rescale_o(s2_cg *cg, const s2_flash_rows *r, int D, LLVMValueRef alpha[2], LLVMValueRef grow);
/* Row hr's end of the softmax: the quad's sum l, then *inv = 1/l and *lse =
 * (m·scale_log2 + log2 l)·ln 2 (natural log), 0 and -inf for a row that kept
 * nothing (l = 0). */
void s2_flash_row_final(s2_cg *cg, const s2_flash_rows *r, int hr, LLVMValueRef scale_log2, LLVMValueRef *inv,
                        LLVMValueRef *lse);

/* Byte offset of 16-byte chunk `chunk` of row `row` in a [rows][chunks*16 B]
 * shared-memory tile of the mma.sync templates: the chunk index XORed with
 * the row (row & 7 with 8+ chunks, the part past the last whole 8 left as
 * is; (row >> 1) & 3 with 4), so an ldmatrix's 8 row addresses land in 8
 * different bank groups (the 128-byte swizzle, PTX ISA 5.5.7; CuTe Swizzle<3,4,3>). */
LLVMValueRef s2_flash_swizzle(s2_cg *cg, LLVMValueRef row, LLVMValueRef chunk, int chunks);

/* Row stores of a 16-bit tensor from an m16n8 / wgmma accumulator row: the
 * lane holds columns 2·t4 and 2·t4 + 1 of each 8-column group, packed in
 * w[dn] (dn < ng, ng even).  One exchange with the neighbouring lane
 * (shfl.bfly 1) gives the even lane columns 2·t4 .. 2·t4 + 3 of group 2c and
 * the odd lane those of group 2c + 1, so that a warp writes whole 32-byte
 * sectors with 8-byte stores (run 79); 4-byte stores of w
 * where the tensor or a stride is not 8-byte aligned. */
typedef struct s2_flash_pairs {
    LLVMValueRef odd;                               /* i1: t4 & 1 */
    LLVMValueRef col, pcol;                         /* i32: 2·t4; this lane's 8-byte column in groups 0-1 */
    LLVMValueRef w[S2_FLASH_MAX_D / 8];             /* i32 packed pairs, filled by the caller */
    LLVMValueRef pair[S2_FLASH_MAX_D / 16][2];      /* after s2_flash_pairs_exchange */
    int ng;
} s2_flash_pairs;
/* odd, col and pcol for lane t4 of its quad; ng = D / 8. */
void s2_flash_pairs_init(s2_cg *cg, s2_flash_pairs *p, LLVMValueRef t4, int D);
/* w of row hr (0: row g, 1: row g + 8) of accumulators acc[dn][4] (f32
 * allocas, the m16n8 / wgmma layout), each multiplied by mul, packed to dt. */
void s2_flash_pairs_pack(s2_cg *cg, s2_flash_pairs *p, s2_dtype dt, LLVMValueRef (*acc)[4], int hr, LLVMValueRef mul);
/* The exchange: in every lane of the warp (outside any row guard). */
void s2_flash_pairs_exchange(s2_cg *cg, s2_flash_pairs *p);
/* The row's stores at element row_off of base (an i16 pointer): 8-byte pairs
 * where aligned (s2_flash_aligned8), else 4-byte stores of w. */
void s2_flash_pairs_store(s2_cg *cg, const s2_flash_pairs *p, LLVMValueRef base, LLVMValueRef row_off,
                          LLVMValueRef aligned);
/* The m16n8k16 A fragment of one k-step from the C-layout values of two
 * n-tiles c[0], c[1] (reused as A, PTX ISA 9.7.14.5.8), packed to dt. */
void s2_flash_a_from_c(s2_cg *cg, s2_dtype dt, LLVMValueRef c[2][4], LLVMValueRef a[4]);
/* o += A·B (m16n8k16) on the four f32 allocas o. */
void s2_flash_mma_into(s2_cg *cg, s2_dtype dt, LLVMValueRef a[4], LLVMValueRef b[2], LLVMValueRef o[4]);
/* lse[lse_base + sext(row)] = lse (f32) from lane t4 == 0 of the quad, when
 * the lse pointer is not null. */
void s2_flash_store_lse(s2_cg *cg, LLVMValueRef t4, LLVMValueRef lse_ptr, LLVMValueRef lse_base, LLVMValueRef row,
                        LLVMValueRef lse);
/* i1: ptr and every i64 element offset or stride of vals[0..n) allow 8-byte
 * stores of 16-bit elements. */
LLVMValueRef s2_flash_aligned8(s2_cg *cg, LLVMValueRef ptr, const LLVMValueRef *vals, int n);

/* The token mask of a score tile (the forwards' apply_mask), in pieces:
 * s2_flash_mask_begin branches to a new block `join` when full (no mask
 * needed), else into a new block "mask" of fn, where it leaves the builder,
 * and returns the block it came from; s2_flash_join_scores closes it. */
LLVMBasicBlockRef s2_flash_mask_begin(s2_cg *cg, LLVMValueRef fn, LLVMValueRef full, LLVMBasicBlockRef *join);
/* The live bits (i32) of tile row r (i32) in an entry's live mask (i64:
 * sub_n bits for each sub-block row of 2^sub_m_log2 rows; bit j keeps key
 * sub-block j). */
LLVMValueRef s2_flash_row_live(s2_cg *cg, LLVMValueRef live, LLVMValueRef r, int sub_m_log2, int sub_n);
/* The last column row r keeps of a tile whose column 0 is key kpos0,
 * less col0 (the lane's first column): kv_len - 1 - kpos0, and when causal
 * (tile_pos0 not null) at most tile_pos0 + r - kpos0. */
LLVMValueRef s2_flash_key_limit(s2_cg *cg, LLVMValueRef kv_len, LLVMValueRef kpos0, LLVMValueRef tile_pos0,
                                LLVMValueRef r, LLVMValueRef col0);
/* Row hr of n-tiles 0..ntiles-1: masked[n][2hr + e] = sc[n][2hr + e] where
 * the column's key sub-block (sub_n_size keys) has its bit in bits and
 * 8n + e <= lim[8n / slot_cols] (a limit from s2_flash_key_limit per slot of
 * slot_cols columns), -inf elsewhere. */
void s2_flash_mask_row(s2_cg *cg, int hr, int ntiles, int sub_n_size, int slot_cols, LLVMValueRef bits,
                       const LLVMValueRef *lim, LLVMValueRef sc[][4], LLVMValueRef masked[][4]);
/* After a branch that computed masked[n][i] for some score fragments: branch
 * to `join` and merge, so that sc[n][i] becomes masked[n][i] when control came
 * through the mask path and stays sc[n][i] when it came from `from`. */
void s2_flash_join_scores(s2_cg *cg, LLVMBasicBlockRef from, LLVMBasicBlockRef join, int ntiles,
                       LLVMValueRef sc[][4], LLVMValueRef masked[][4]);
/* Variable-length batches (launch.h, the forward's trailing seqinfo
 * parameter): the i32 quadruple {q_start, q_len, k_start, kv_len} of entry
 * `idx` (i32) of the array at `info`, or dflt[] when info is null. */
void s2_flash_seqinfo(s2_cg *cg, LLVMValueRef info, LLVMValueRef idx, LLVMValueRef dflt[4], LLVMValueRef out[4]);

/* A forward's output rows: query row qrow's O row starts at element obase +
 * qrow * row_stride of o (i64), its LSE is lse[lse_base + qrow] (f32; lse
 * may be null), stored by lane t4 == 0 of the quad; D columns a row. */
typedef struct s2_flash_out {
    LLVMValueRef o, obase, row_stride, lse, lse_base, t4;
    LLVMValueRef o_mul;   /* O's factor beside 1/l (fp8's descale), or NULL */
    int D;
} s2_flash_out;
/* Open *store, the store of query row qrow (i32) where ok (the row exists),
 * and return its O row's element offset; s2_flash_row_store_end stores the
 * row's LSE and closes it. */
LLVMValueRef s2_flash_row_store_begin(s2_cg *cg, const s2_flash_out *out, LLVMValueRef ok, LLVMValueRef qrow,
                                      s2_nv_if *store);
void s2_flash_row_store_end(s2_cg *cg, const s2_flash_out *out, s2_nv_if *store, LLVMValueRef qrow, LLVMValueRef lse);
/* The 16-bit forwards' epilogue (fwd.c, fwd_sm90): for each of the thread's
 * rows hr, O /= l and the LSE (s2_flash_row_final), O's row packed to dt and
 * exchanged in every lane (s2_flash_pairs), then, where it exists (row(k,
 * hr, &qrow): i1, and its row in q), stored with 8-byte stores when o and
 * the i64 offsets or strides vals[0..n) allow them (s2_flash_aligned8; vals
 * NULL: obase | row_stride), 4-byte stores else. */
typedef LLVMValueRef (*s2_flash_row_fn)(void *k, int hr, LLVMValueRef *qrow);
void s2_flash_store_rows16(s2_cg *cg, const s2_flash_out *out, s2_flash_rows *acc, s2_dtype dt,
                           LLVMValueRef scale_log2, const LLVMValueRef *vals, int n, s2_flash_row_fn row, void *k);

#endif
