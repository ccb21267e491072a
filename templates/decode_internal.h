/* Internal to the decode templates (templates/decode.c: the decode kernel;
 * decode_merge.c: its end, the warps' and the splits' merge; combine.c). */
#ifndef S2C_DECODE_INTERNAL_H
#define S2C_DECODE_INTERNAL_H

#include "flash.h"
#include "kbase.h"
#include "params.h"
#include "s2c/decode.h"

/* ---- the decode kernel (decode.c, decode_merge.c) ---- */

/* Parameters, in ABI order (abi/params.h, S2_ABI_DECODE). */
enum { S2_ABI_DECODE_PARAMS(S2_ABI_P_ENUM) P_COUNT };

enum { MAX_D = 256, DEC_ROWS = 16 };
/* fp8 pages with bf16 queries: Q enters the f16 products times 2^-DEC_Q_SHIFT (decode.c, prepare_q8) */
enum { DEC_Q_SHIFT = 8 };

typedef struct dec_shape {
    s2_dtype dt;
    int D, chunks, warps, threads, stages;
    bool q_in_regs;              /* Q's A fragments in registers (else read from shared memory per chunk) */
    int BN;                      /* keys per tile: 16 per warp */
    int group, heads, bs_log2, gpb_log2;
    bool causal;
    bool kv8;                    /* fp8 pages (spec kv_dtype): the ring holds them as read, each warp
                                  * converts its fragments in registers (decode.c, compute_scores8) */
    s2_dtype kv_dt;
    s2_dtype mdt;                /* the mma operands' dtype: dt; f16 with fp8 pages (bf16 Q converted once) */
    int q_off, kv_off, stage_bytes, v_in_stage;
    int merge_o_off, merge_ml_off, flag_off;
} dec_shape;

typedef struct dec {
    S2_KB_BASE;                                          /* cg, b, fn; tid, warp, lane, g, t4 (kbase.h) */
    dec_shape s;
    LLVMValueRef split, kvh, batch;                      /* i32 */
    LLVMValueRef seq_len, n, q_start, m0;                /* i32 */
    LLVMValueRef begin, ngroups, t_begin, t_end;         /* i32 */
    LLVMValueRef relevant;                               /* i32: mask bits of the query blocks present */
    LLVMValueRef table_row, k_head, v_head;              /* i64 element offsets */
    LLVMValueRef scale_log2;                             /* f32: scale·log2 e (kv8: times k_scale[kvh]) */
    LLVMValueRef v_scale;                                /* f32, kv8: v_scale[kvh] */
    s2_flash_rows acc;                              /* O, m, l (flash.h) */
    LLVMValueRef qf[MAX_D / 16][4];                      /* with q_in_regs */
} dec;

/* Tile row r (0..15) holds token r / group of query head kvh * group + r % group. */
static inline void row_token_head(dec *k, LLVMValueRef r, LLVMValueRef *t, LLVMValueRef *i)
{
    *t = LLVMBuildUDiv(k->b, r, c32(k, k->s.group), "tok");
    *i = LLVMBuildURem(k->b, r, c32(k, k->s.group), "ghead");
}

/* Each warp's (m·scale_log2, l) and unnormalised O to shared memory. */
void s2_dec_spill_warp_state(dec *k);
/* The warps' states merged, one row per thread group: O and LSE stored
 * (one split), or this split's partial to the workspace. */
void s2_dec_merge_and_store(dec *k);
/* With several splits: the last CTA of a (sequence, kv head) merges them. */
void s2_dec_last_cta_combine(dec *k);

#endif
