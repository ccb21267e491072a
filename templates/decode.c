/* Paged-KV decode with split-KV (flash-decoding), sm_80 instruction set
 * (mma.sync m16n8k16, ldmatrix, cp.async; runs on sm_90).  The combine
 * kernel built into the same module (s2_combine) is in combine.c.
 * ABIs: include/s2c/decode.h.
 *
 * One CTA = (split, kv head, sequence).  The query heads of the kv head's
 * group times the new tokens fill the 16 rows of one mma tile, so every kept
 * KV block is read once for the whole group.  The CTA walks its slice of the
 * kept-block list in tiles of num_warps 16-key chunks (a chunk lies inside
 * one pattern block and one page, both multiples of 16 tokens); K and V of a
 * tile stream through a cp.async ring, each warp runs its own chunk with its
 * own online softmax, and the warps' (m, l, O) are merged through shared
 * memory at the end.  Page ids come from the block table per chunk, so the
 * page size is a runtime value independent of the pattern's block size.
 * With several splits, each CTA writes its partial (O, LSE) to the workspace
 * and the last CTA of a (sequence, kv head) to finish merges them (no second
 * launch; decode_merge.c). */
#include "decode_internal.h"
#include "s2c/launch.h"
#include "template.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static LLVMValueRef smin32(dec *k, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildSelect(k->b, LLVMBuildICmp(k->b, LLVMIntSLT, a, b, ""), a, b, "");
}

/* Byte offset of 16-byte chunk ch of row `row` in a [rows][C * 16 B] tile,
 * the chunk XORed with the row so that ldmatrix's 8 rows hit 8 bank groups.
 * (s2_flash_swizzle computes the same value; this copy keeps the IR order
 * the decode kernel was verified with on the GPU: its last line's two
 * nested builder calls run in the C compiler's argument evaluation order,
 * which C leaves unspecified.) */
static LLVMValueRef swizzle_c(dec *k, int C, LLVMValueRef row, LLVMValueRef ch)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef sw = ch;
    if (C >= 8) {
        LLVMValueRef x = LLVMBuildXor(b, ch, LLVMBuildAnd(b, row, c32(k, 7), ""), "");
        int full = C & ~7;
        sw = full == C ? x : LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntULT, ch, c32(k, full), ""), x, ch, "");
    } else if (C == 4) {
        sw = LLVMBuildXor(b, ch, LLVMBuildAnd(b, LLVMBuildLShr(b, row, c32(k, 1), ""), c32(k, 3), ""), "");
    }
    return LLVMBuildAdd(b, LLVMBuildMul(b, row, c32(k, C * 16), ""), LLVMBuildShl(b, sw, c32(k, 4), ""), "");
}

/* The 16-bit tiles' swizzle (Q, and K/V of 16-bit pages): D / 8 chunks a row. */
static LLVMValueRef swizzle(dec *k, LLVMValueRef row, LLVMValueRef ch)
{
    return swizzle_c(k, k->s.chunks, row, ch);
}

/* Entry e of the packed list: field 0 block, 1 heads mask. */
static LLVMValueRef entry_field(dec *k, LLVMValueRef e, int field)
{
    LLVMValueRef idx = LLVMBuildAdd(k->b, LLVMBuildMul(k->b, sext64(k, e), c64(k, 2), ""), c64(k, field), "");
    return s2_kb_load_i32(&k->kb, param(k, P_ENTRIES), idx, field ? "heads" : "block");
}

/* Chunk gi of the CTA's list: its first key position (block * bs + 16 * sub). */
static LLVMValueRef chunk_entry(dec *k, LLVMValueRef gi)
{
    return LLVMBuildAdd(k->b, k->begin, LLVMBuildLShr(k->b, gi, c32(k, k->s.gpb_log2), ""), "entry");
}

static LLVMValueRef chunk_kpos0(dec *k, LLVMValueRef gi, LLVMValueRef block)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef sub = LLVMBuildAnd(b, gi, c32(k, (1 << k->s.gpb_log2) - 1), "");
    return LLVMBuildAdd(b, LLVMBuildShl(b, block, c32(k, k->s.bs_log2), ""), LLVMBuildShl(b, sub, c32(k, 4), ""),
                        "kpos0");
}

static LLVMValueRef chunk_relevant(dec *k, LLVMValueRef e)
{
    LLVMValueRef bits = LLVMBuildAnd(k->b, entry_field(k, e, 1), k->relevant, "");
    return LLVMBuildICmp(k->b, LLVMIntNE, bits, c32(k, 0), "relevant_chunk");
}

/* scales[kvh] of a nullable fp32 [kv_heads] parameter; 1.0 when it is null. */
static LLVMValueRef load_scale(dec *k, int p, LLVMValueRef kvh64, LLVMBasicBlockRef entry_bb)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    LLVMBasicBlockRef cur = s2_kb_entry_begin(&k->kb, entry_bb);
    LLVMValueRef slot = LLVMBuildAlloca(b, cg->t_f32, "scale_p");
    s2_kb_entry_end(&k->kb, cur);
    LLVMBuildStore(b, cf(k, 1.0), slot);
    s2_nv_if has;
    s2_nv_if_begin(cg, &has, LLVMBuildICmp(b, LLVMIntNE, LLVMBuildPtrToInt(b, param(k, p), cg->t_i64, ""), c64(k, 0), ""),
                   "has_scale");
    LLVMValueRef v = LLVMBuildLoad2(b, cg->t_f32, LLVMBuildInBoundsGEP2(b, cg->t_f32, param(k, p), &kvh64, 1, ""), "");
    LLVMSetAlignment(v, 4);
    LLVMBuildStore(b, v, slot);
    s2_nv_if_end(cg, &has);
    return LLVMBuildLoad2(b, cg->t_f32, slot, "scale");
}

static void setup(dec *k, LLVMBasicBlockRef entry_bb)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    dec_shape *s = &k->s;
    s2_kb_thread(&k->kb);
    k->split = s2_nv_ctaid(cg, 'x');
    k->kvh = s2_nv_ctaid(cg, 'y');
    k->batch = s2_nv_ctaid(cg, 'z');
    k->seq_len = s2_kb_load_i32(&k->kb, param(k, P_SEQ_LENS), LLVMBuildZExt(b, k->batch, cg->t_i64, ""), "seq_len");
    k->n = param(k, P_N);
    k->q_start = s2_nv_smax_i32(cg, LLVMBuildSub(b, k->seq_len, k->n, ""), c32(k, 0));
    /* seq_lens beyond the host's bound would index past the lists: clamp (the
     * result is then wrong, but no memory outside the buffers is touched) */
    LLVMValueRef qb = param(k, P_QBLOCKS);
    k->m0 = smin32(k, LLVMBuildLShr(b, k->q_start, c32(k, s->bs_log2), ""), LLVMBuildSub(b, qb, c32(k, 1), ""));

    LLVMValueRef cls = s2_kb_load_i32(&k->kb, param(k, P_CLASS), LLVMBuildZExt(b, k->kvh, cg->t_i64, ""), "class");
    LLVMValueRef li = sext64(k, LLVMBuildAdd(b, LLVMBuildMul(b, cls, qb, ""), k->m0, ""));
    k->begin = s2_kb_load_i32(&k->kb, param(k, P_OFFSETS), li, "begin");
    LLVMValueRef end = s2_kb_load_i32(&k->kb, param(k, P_OFFSETS), LLVMBuildAdd(b, li, c64(k, 1), ""), "end");
    k->ngroups = LLVMBuildShl(b, LLVMBuildSub(b, end, k->begin, ""), c32(k, s->gpb_log2), "ngroups");
    LLVMValueRef ntiles = LLVMBuildUDiv(b, LLVMBuildAdd(b, k->ngroups, c32(k, s->warps - 1), ""), c32(k, s->warps), "");
    LLVMValueRef splits = param(k, P_SPLITS);
    LLVMValueRef per = LLVMBuildUDiv(b, LLVMBuildAdd(b, ntiles, LLVMBuildSub(b, splits, c32(k, 1), ""), ""), splits, "per");
    k->t_begin = smin32(k, LLVMBuildMul(b, k->split, per, ""), ntiles);
    k->t_end = smin32(k, LLVMBuildAdd(b, k->t_begin, per, ""), ntiles);

    /* a list serves query blocks m0 and m0 + 1; blocks kept only for a
     * query block no new token lies in are skipped (never loaded) */
    LLVMValueRef last_m = LLVMBuildLShr(b, LLVMBuildSub(b, k->seq_len, c32(k, 1), ""), c32(k, s->bs_log2), "");
    LLVMValueRef spans = LLVMBuildICmp(b, LLVMIntSGT, last_m, k->m0, "");
    int gbits = (1 << s->group) - 1;
    k->relevant = LLVMBuildSelect(b, spans, c32(k, gbits | gbits << s->group), c32(k, gbits), "relevant");

    LLVMValueRef kvh64 = LLVMBuildZExt(b, k->kvh, cg->t_i64, "");
    k->table_row = LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildZExt(b, k->batch, cg->t_i64, ""), param(k, P_TBS), ""),
                                LLVMBuildMul(b, kvh64, param(k, P_THS), ""), "table_row");
    k->k_head = LLVMBuildMul(b, kvh64, param(k, P_KS + 2), "");
    k->v_head = LLVMBuildMul(b, kvh64, param(k, P_VS + 2), "");
    k->scale_log2 = param(k, P_SCALE_LOG2);
    /* fp8 pages: K's scale folds into the softmax scale (with bf16 queries the
     * 2^DEC_Q_SHIFT prepare_q8 took off Q), V's applies once at the end */
    if (s->kv8) {
        LLVMValueRef ks = load_scale(k, P_K_SCALE, kvh64, entry_bb);
        if (s->mdt != s->dt)
            ks = LLVMBuildFMul(b, ks, cf(k, ldexp(1.0, DEC_Q_SHIFT)), "");
        k->scale_log2 = LLVMBuildFMul(b, k->scale_log2, ks, "scale_log2_k");
        k->v_scale = load_scale(k, P_V_SCALE, kvh64, entry_bb);
    }
}

static void init_accumulators(dec *k, LLVMBasicBlockRef entry_bb)
{
    s2_flash_rows_alloca(k->cg, &k->acc, k->s.D, entry_bb);
    s2_flash_rows_zero(k->cg, &k->acc);
}

static void load_q(dec *k)
{
    LLVMBuilderRef b = k->b;
    int C = k->s.chunks, T = k->s.threads, total = DEC_ROWS * C;
    for (int it = 0; it * T < total; it++) {
        s2_nv_if guard;
        LLVMValueRef idx = s2_kb_spread(&k->kb, it, T, total, &guard, "qtail");
        LLVMValueRef r = LLVMBuildUDiv(b, idx, c32(k, C), "");
        LLVMValueRef ch = LLVMBuildURem(b, idx, c32(k, C), "");
        LLVMValueRef t, i;
        row_token_head(k, r, &t, &i);
        LLVMValueRef ok = LLVMBuildICmp(b, LLVMIntULT, t, k->n, "");
        LLVMValueRef h = LLVMBuildAdd(b, LLVMBuildMul(b, k->kvh, c32(k, k->s.group), ""), i, "");
        LLVMValueRef off = LLVMBuildMul(b, LLVMBuildZExt(b, k->batch, k->cg->t_i64, ""), param(k, P_QS), "");
        off = LLVMBuildAdd(b, off, LLVMBuildMul(b, LLVMBuildZExt(b, t, k->cg->t_i64, ""), param(k, P_QS + 1), ""), "");
        off = LLVMBuildAdd(b, off, LLVMBuildMul(b, LLVMBuildZExt(b, h, k->cg->t_i64, ""), param(k, P_QS + 2), ""), "");
        off = LLVMBuildAdd(b, off, LLVMBuildZExt(b, LLVMBuildShl(b, ch, c32(k, 3), ""), k->cg->t_i64, ""), "");
        off = LLVMBuildSelect(b, ok, off, c64(k, 0), "");
        LLVMValueRef dst = LLVMBuildAdd(b, c32(k, k->s.q_off), swizzle(k, r, ch), "");
        s2_nv_cp_async_16(k->cg, s2_nv_smem_at(k->cg, dst), s2_kb_gep16(&k->kb, param(k, P_Q), off),
                          LLVMBuildSelect(b, ok, c32(k, 16), c32(k, 0), ""));
        s2_kb_spread_end(&k->kb, &guard);
    }
}

/* Where chunk tile * warps + w of the list lives: ok (it exists, a present
 * query block keeps it, and it starts before seq_len), its first key and its
 * page id.  A chunk lies in one page (pages and blocks are multiples of 16
 * tokens), so this is one entry and one table read per chunk. */
typedef struct chunk_addr {
    LLVMValueRef ok, kpos0, page;
} chunk_addr;

static void lookup_chunk(dec *k, LLVMValueRef tile, int w, chunk_addr *ca)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    LLVMValueRef gi = LLVMBuildAdd(b, LLVMBuildMul(b, tile, c32(k, k->s.warps), ""), c32(k, w), "gi");
    LLVMValueRef in_list = LLVMBuildICmp(b, LLVMIntULT, gi, k->ngroups, "");
    /* entries[] has one padding entry, so begin is always readable */
    LLVMValueRef e = LLVMBuildSelect(b, in_list, chunk_entry(k, gi), k->begin, "");
    LLVMValueRef kpos0 = chunk_kpos0(k, gi, entry_field(k, e, 0));
    LLVMValueRef ok = LLVMBuildAnd(b, in_list, chunk_relevant(k, e), "");
    ok = LLVMBuildAnd(b, ok, LLVMBuildICmp(b, LLVMIntSLT, kpos0, k->seq_len, ""), "chunk_ok");
    kpos0 = LLVMBuildSelect(b, ok, kpos0, c32(k, 0), "");
    LLVMValueRef pidx = LLVMBuildUDiv(b, kpos0, param(k, P_PAGE), "pidx");
    ca->ok = ok;
    ca->kpos0 = kpos0;
    ca->page = s2_kb_load_i32(&k->kb, param(k, P_TABLE), LLVMBuildAdd(b, k->table_row, LLVMBuildZExt(b, pidx, cg->t_i64, ""), ""), "page");
}

static LLVMValueRef gep8(dec *k, LLVMValueRef base, LLVMValueRef off)
{
    return LLVMBuildInBoundsGEP2(k->b, LLVMInt8TypeInContext(k->cg->llctx), base, &off, 1, "");
}

/* cp.async K and V of chunk w into stage rows 16w .. 16w+15 at byte offset
 * soff, rows of D elements of the pages' dtype (16 or 8 bits) in 16-byte
 * pieces, swizzled by the row's piece count; rows past seq_len (and whole
 * chunks not ok) are zero-filled without touching the pools. */
static void issue_chunk(dec *k, const chunk_addr *ca, int w, LLVMValueRef soff)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    bool kv8 = k->s.kv8;
    int C = kv8 ? k->s.D / 16 : k->s.chunks, T = k->s.threads, per_chunk = DEC_ROWS * C;
    LLVMValueRef pidx = LLVMBuildUDiv(b, ca->kpos0, param(k, P_PAGE), "");
    LLVMValueRef slot0 = LLVMBuildSub(b, ca->kpos0, LLVMBuildMul(b, pidx, param(k, P_PAGE), ""), "slot0");
    LLVMValueRef page64 = LLVMBuildSExt(b, ca->page, cg->t_i64, "");
    LLVMValueRef base[2];
    for (int kv = 0; kv < 2; kv++)
        base[kv] = LLVMBuildAdd(b, LLVMBuildMul(b, page64, param(k, kv ? P_VS : P_KS), ""), kv ? k->v_head : k->k_head, "");
    for (int it = 0; it * T < per_chunk; it++) {
        s2_nv_if guard;
        LLVMValueRef idx = s2_kb_spread(&k->kb, it, T, per_chunk, &guard, "kvtail");
        LLVMValueRef rr = LLVMBuildUDiv(b, idx, c32(k, C), "");
        LLVMValueRef ch = LLVMBuildURem(b, idx, c32(k, C), "");
        LLVMValueRef ok = LLVMBuildAnd(b, ca->ok, LLVMBuildICmp(b, LLVMIntSLT, LLVMBuildAdd(b, ca->kpos0, rr, ""), k->seq_len, ""), "");
        LLVMValueRef slot64 = LLVMBuildZExt(b, LLVMBuildAdd(b, slot0, rr, ""), cg->t_i64, "");
        LLVMValueRef col = LLVMBuildZExt(b, LLVMBuildShl(b, ch, c32(k, kv8 ? 4 : 3), ""), cg->t_i64, "");
        LLVMValueRef src = LLVMBuildSelect(b, ok, c32(k, 16), c32(k, 0), "");
        LLVMValueRef dst = LLVMBuildAdd(b, soff, swizzle_c(k, C, LLVMBuildAdd(b, rr, c32(k, 16 * w), ""), ch), "");
        for (int kv = 0; kv < 2; kv++) {
            LLVMValueRef off = LLVMBuildAdd(b, base[kv], LLVMBuildMul(b, slot64, param(k, (kv ? P_VS : P_KS) + 1), ""), "");
            off = LLVMBuildSelect(b, ok, LLVMBuildAdd(b, off, col, ""), c64(k, 0), "");
            LLVMValueRef d = kv ? LLVMBuildAdd(b, dst, c32(k, k->s.v_in_stage), "") : dst;
            s2_nv_cp_async_16(cg, s2_nv_smem_at(cg, d), kv8 ? gep8(k, param(k, kv ? P_V : P_K), off)
                                                            : s2_kb_gep16(&k->kb, param(k, kv ? P_V : P_K), off), src);
        }
        s2_kb_spread_end(&k->kb, &guard);
    }
}

/* Two bf16 of a 32-bit word as f16 times 2^-DEC_Q_SHIFT, packed. */
static LLVMValueRef q_word_to_f16(dec *k, LLVMValueRef w)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef f[2];
    for (int h = 0; h < 2; h++) {
        LLVMValueRef x = LLVMBuildTrunc(b, h ? LLVMBuildLShr(b, w, c32(k, 16), "") : w, LLVMInt16TypeInContext(k->cg->llctx), "");
        f[h] = LLVMBuildFMul(b, s2_nv_elt16_to_f32(k->cg, k->s.dt, x), cf(k, ldexp(1.0, -DEC_Q_SHIFT)), "");
    }
    return s2_nv_pack2(k->cg, S2_DTYPE_F16, f[0], f[1]);
}

/* fp8 pages: a lane's K fragment of a 16-dim piece is 4 consecutive bytes
 * (dims 4·t4 .. 4·t4 + 3, compute_scores8), where mma's B fragment holds dims
 * 2·t4, 2·t4 + 1, 2·t4 + 8, 2·t4 + 9 (PTX ISA, "Matrix Fragments for
 * mma.m16n8k16").  The product sums over dims in any order, so Q's rows are
 * permuted once, in place, to the same order: in each piece (eight 32-bit
 * words of two elements), word t takes word 2t's pair and word 4 + t word
 * 2t + 1's (t < 4).
 * With bf16 queries the products run on f16 (one conversion per K/V pair
 * instead of three), so Q is also converted, to f16 times 2^-DEC_Q_SHIFT:
 * f16's range then holds |q| < 2^24, and |q| below 2^-6 keeps an absolute
 * precision of 2^-16, far under bf16's own rounding; setup gives the softmax
 * scale the 2^DEC_Q_SHIFT back. */
static void prepare_q8(dec *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    int T = k->s.threads, P = k->s.D / 16, total = DEC_ROWS * P;
    LLVMTypeRef v4 = LLVMVectorType(cg->t_i32, 4);
    for (int it = 0; it * T < total; it++) {
        s2_nv_if guard;
        LLVMValueRef idx = s2_kb_spread(&k->kb, it, T, total, &guard, "qprep");
        LLVMValueRef r = LLVMBuildUDiv(b, idx, c32(k, P), "");
        LLVMValueRef pc = LLVMBuildShl(b, LLVMBuildURem(b, idx, c32(k, P), ""), c32(k, 1), "");
        LLVMValueRef ptr[2], w[8];
        for (int h = 0; h < 2; h++) {
            LLVMValueRef off = LLVMBuildAdd(b, c32(k, k->s.q_off), swizzle(k, r, LLVMBuildAdd(b, pc, c32(k, h), "")), "");
            ptr[h] = s2_nv_smem_at(cg, off);
            LLVMValueRef ld = LLVMBuildLoad2(b, v4, ptr[h], "q16");
            LLVMSetAlignment(ld, 16);
            for (int j = 0; j < 4; j++) {
                w[4 * h + j] = LLVMBuildExtractElement(b, ld, c32(k, j), "");
                if (k->s.mdt != k->s.dt)
                    w[4 * h + j] = LLVMBuildBitCast(b, q_word_to_f16(k, w[4 * h + j]), cg->t_i32, "");
            }
        }
        for (int h = 0; h < 2; h++) {
            LLVMValueRef vec = LLVMGetUndef(v4);
            for (int t = 0; t < 4; t++)
                vec = LLVMBuildInsertElement(b, vec, w[2 * t + h], c32(k, t), "");
            LLVMSetAlignment(LLVMBuildStore(b, vec, ptr[h]), 16);
        }
        s2_kb_spread_end(&k->kb, &guard);
    }
    s2_nv_barrier_cta(cg);
}

static LLVMValueRef stage_off(dec *k, LLVMValueRef stage)
{
    return LLVMBuildAdd(k->b, c32(k, k->s.kv_off), LLVMBuildMul(k->b, stage, c32(k, k->s.stage_bytes), ""), "");
}

/* if (tile < t_end) issue its chunks (addresses in ca); then commit (always,
 * so the group count stays fixed). */
static void prefetch_kv(dec *k, LLVMValueRef tile, LLVMValueRef stage, const chunk_addr *ca)
{
    s2_nv_if blk;
    s2_nv_if_begin(k->cg, &blk, LLVMBuildICmp(k->b, LLVMIntSLT, tile, k->t_end, ""), "prefetch");
    LLVMValueRef soff = stage_off(k, stage);
    for (int w = 0; w < k->s.warps; w++) {
        issue_chunk(k, &ca[w], w, soff);
    }
    s2_nv_if_end(k->cg, &blk);
    s2_nv_cp_async_commit(k->cg);
}

/* Look up and issue tile `tile` at once (the prologue). */
static void load_tile_now(dec *k, LLVMValueRef tile, LLVMValueRef stage)
{
    chunk_addr ca[16];
    for (int w = 0; w < k->s.warps; w++)
        lookup_chunk(k, tile, w, &ca[w]);
    prefetch_kv(k, tile, stage, ca);
}

/* Q A-fragments: every warp holds the same 16 rows. */
static void load_q_fragments(dec *k)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef row = LLVMBuildAdd(b, LLVMBuildAnd(b, k->lane, c32(k, 7), ""), LLVMBuildAnd(b, k->lane, c32(k, 8), ""), "");
    LLVMValueRef hi = LLVMBuildLShr(b, k->lane, c32(k, 4), "");
    for (int ks = 0; ks < k->s.D / 16; ks++) {
        LLVMValueRef ch = LLVMBuildAdd(b, hi, c32(k, 2 * ks), "");
        LLVMValueRef off = LLVMBuildAdd(b, c32(k, k->s.q_off), swizzle(k, row, ch), "");
        s2_nv_ldmatrix_x4(k->cg, s2_nv_smem_at(k->cg, off), false, k->qf[ks]);
    }
}

/* Q's A fragment of k-step ks read from shared memory (the Q tile stays
 * there for the whole loop), for head dims whose fragments do not stay in
 * registers (dec_shape.q_in_regs). */
static void q_fragment(dec *k, int ks, LLVMValueRef out[4])
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef row = LLVMBuildAdd(b, LLVMBuildAnd(b, k->lane, c32(k, 7), ""), LLVMBuildAnd(b, k->lane, c32(k, 8), ""), "");
    LLVMValueRef ch = LLVMBuildAdd(b, LLVMBuildLShr(b, k->lane, c32(k, 4), ""), c32(k, 2 * ks), "");
    LLVMValueRef off = LLVMBuildAdd(b, c32(k, k->s.q_off), swizzle(k, row, ch), "");
    s2_nv_ldmatrix_x4(k->cg, s2_nv_smem_at(k->cg, off), false, out);
}

/* With D % 32 == 16, the last k-step's B fragments of both n-tiles in one
 * ldmatrix.x4: lanes 16n + 8j address key row 8n + (lane & 7), chunk
 * D / 8 - 2 + j; out[2n], out[2n + 1] are n-tile n's. */
static void load_k_tail(dec *k, LLVMValueRef kst, LLVMValueRef kt[4])
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef row = LLVMBuildAdd(b, LLVMBuildShl(b, k->warp, c32(k, 4), ""),
                                    LLVMBuildAdd(b, LLVMBuildAnd(b, k->lane, c32(k, 7), ""),
                                                 LLVMBuildAnd(b, LLVMBuildLShr(b, k->lane, c32(k, 1), ""), c32(k, 8), ""), ""), "");
    LLVMValueRef ch = LLVMBuildAdd(b, LLVMBuildAnd(b, LLVMBuildLShr(b, k->lane, c32(k, 3), ""), c32(k, 1), ""),
                                   c32(k, k->s.chunks - 2), "");
    s2_nv_ldmatrix_x4(k->cg, s2_nv_smem_at(k->cg, LLVMBuildAdd(b, kst, swizzle(k, row, ch), "")), false, kt);
}

/* S = Q·Kᵀ over this warp's 16 keys (rows warp*16.. of the stage). */
static void compute_scores(dec *k, LLVMValueRef kst, LLVMValueRef sc[2][4])
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef lrow = LLVMBuildAnd(b, k->lane, c32(k, 7), "");
    LLVMValueRef lch = LLVMBuildLShr(b, k->lane, c32(k, 3), "");
    bool tail = k->s.D % 32 != 0;
    LLVMValueRef kt[4];
    if (tail)
        load_k_tail(k, kst, kt);
    if (!k->s.q_in_regs) {
        /* k-steps outer, so each Q fragment is read once for both n-tiles */
        LLVMValueRef acc[2][4];
        for (int n = 0; n < 2; n++)
            for (int i = 0; i < 4; i++)
                acc[n][i] = cf(k, 0);
        for (int p = 0; p < k->s.D / 32; p++) {
            LLVMValueRef qa[4], qb[4];
            q_fragment(k, 2 * p, qa);
            q_fragment(k, 2 * p + 1, qb);
            for (int n = 0; n < 2; n++) {
                LLVMValueRef kb[4];
                LLVMValueRef row = LLVMBuildAdd(b, LLVMBuildShl(b, k->warp, c32(k, 4), ""), LLVMBuildAdd(b, lrow, c32(k, 8 * n), ""), "");
                LLVMValueRef off = LLVMBuildAdd(b, kst, swizzle(k, row, LLVMBuildAdd(b, lch, c32(k, 4 * p), "")), "");
                s2_nv_ldmatrix_x4(k->cg, s2_nv_smem_at(k->cg, off), false, kb);
                s2_nv_mma_m16n8k16(k->cg, k->s.mdt, qa, &kb[0], acc[n]);
                s2_nv_mma_m16n8k16(k->cg, k->s.mdt, qb, &kb[2], acc[n]);
            }
        }
        if (tail) {
            LLVMValueRef qt[4];
            q_fragment(k, k->s.D / 16 - 1, qt);
            for (int n = 0; n < 2; n++)
                s2_nv_mma_m16n8k16(k->cg, k->s.mdt, qt, &kt[2 * n], acc[n]);
        }
        for (int n = 0; n < 2; n++)
            for (int i = 0; i < 4; i++)
                sc[n][i] = acc[n][i];
        return;
    }
    for (int n = 0; n < 2; n++) {
        LLVMValueRef acc[4] = {cf(k, 0), cf(k, 0), cf(k, 0), cf(k, 0)};
        LLVMValueRef row = LLVMBuildAdd(b, LLVMBuildShl(b, k->warp, c32(k, 4), ""), LLVMBuildAdd(b, lrow, c32(k, 8 * n), ""), "");
        for (int p = 0; p < k->s.D / 32; p++) {
            LLVMValueRef kb[4];
            LLVMValueRef off = LLVMBuildAdd(b, kst, swizzle(k, row, LLVMBuildAdd(b, lch, c32(k, 4 * p), "")), "");
            s2_nv_ldmatrix_x4(k->cg, s2_nv_smem_at(k->cg, off), false, kb);
            s2_nv_mma_m16n8k16(k->cg, k->s.mdt, k->qf[2 * p], &kb[0], acc);
            s2_nv_mma_m16n8k16(k->cg, k->s.mdt, k->qf[2 * p + 1], &kb[2], acc);
        }
        if (tail)
            s2_nv_mma_m16n8k16(k->cg, k->s.mdt, k->qf[k->s.D / 16 - 1], &kt[2 * n], acc);
        for (int i = 0; i < 4; i++)
            sc[n][i] = acc[i];
    }
}

/* Key column c of row r is kept when the row is a real (token, head), that
 * head keeps the block for the token's query block (mask bit), and c <=
 * limit = min(seq_len - 1, causal ? qpos : inf) - kpos0.  Others get -inf. */
static void apply_mask(dec *k, LLVMValueRef sc[2][4], LLVMValueRef kpos0, LLVMValueRef heads)
{
    LLVMBuilderRef b = k->b;
    dec_shape *s = &k->s;
    LLVMValueRef ninf = cf(k, -INFINITY);
    LLVMValueRef col0 = LLVMBuildShl(b, k->t4, c32(k, 1), "");
    for (int hr = 0; hr < 2; hr++) {
        LLVMValueRef r = LLVMBuildAdd(b, k->g, c32(k, 8 * hr), "");
        LLVMValueRef t, i;
        row_token_head(k, r, &t, &i);
        LLVMValueRef qpos = LLVMBuildAdd(b, k->q_start, t, "qpos");
        LLVMValueRef sel = LLVMBuildSub(b, LLVMBuildLShr(b, qpos, c32(k, s->bs_log2), ""), k->m0, "");
        LLVMValueRef bit = LLVMBuildAnd(b, LLVMBuildAdd(b, i, LLVMBuildMul(b, sel, c32(k, s->group), ""), ""), c32(k, 31), "");
        LLVMValueRef keep = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildAnd(b, LLVMBuildLShr(b, heads, bit, ""), c32(k, 1), ""), c32(k, 0), "");
        keep = LLVMBuildAnd(b, keep, LLVMBuildICmp(b, LLVMIntULT, t, k->n, ""), "");
        LLVMValueRef limit = LLVMBuildSub(b, LLVMBuildSub(b, k->seq_len, c32(k, 1), ""), kpos0, "");
        if (s->causal)
            limit = smin32(k, limit, LLVMBuildSub(b, qpos, kpos0, ""));
        LLVMValueRef lim_rel = LLVMBuildSub(b, limit, col0, "");
        for (int n = 0; n < 2; n++)
            for (int e = 0; e < 2; e++) {
                LLVMValueRef inside = LLVMBuildICmp(b, LLVMIntSLE, c32(k, n * 8 + e), lim_rel, "");
                sc[n][2 * hr + e] = LLVMBuildSelect(b, LLVMBuildAnd(b, inside, keep, ""), sc[n][2 * hr + e], ninf, "");
            }
    }
}

/* Online softmax in base 2 (m kept unscaled), as the forward (flash.h). */
static void online_softmax(dec *k, LLVMValueRef sc[2][4])
{
    for (int hr = 0; hr < 2; hr++)
        s2_flash_softmax_row(k->cg, &k->acc, hr, sc, 2, k->scale_log2, true, NULL);
}

/* O += P·V over the warp's 16 keys: one k-step, V by ldmatrix.x4.trans. */
static void accumulate_pv(dec *k, LLVMValueRef vst, LLVMValueRef sc[2][4])
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    LLVMValueRef a[4];
    s2_flash_a_from_c(cg, k->s.mdt, sc, a);
    LLVMValueRef row = LLVMBuildAdd(b, LLVMBuildShl(b, k->warp, c32(k, 4), ""), LLVMBuildAnd(b, k->lane, c32(k, 15), ""), "");
    LLVMValueRef lch = LLVMBuildLShr(b, k->lane, c32(k, 4), "");
    for (int dp = 0; dp < k->s.D / 16; dp++) {
        LLVMValueRef vb[4];
        LLVMValueRef off = LLVMBuildAdd(b, vst, swizzle(k, row, LLVMBuildAdd(b, lch, c32(k, 2 * dp), "")), "");
        s2_nv_ldmatrix_x4(cg, s2_nv_smem_at(cg, off), true, vb);
        for (int h = 0; h < 2; h++)
            s2_flash_mma_into(cg, k->s.mdt, a, &vb[2 * h], k->acc.o[2 * dp + h]);
    }
}

/* fp8 pages: one ldmatrix.x4 of the warp's 16 ring rows at st, reading the
 * bytes as 16-bit elements (ldmatrix only moves bits; its .b8 forms are
 * sm_100a's, PTX ISA "ldmatrix"): out[2j] is rows 0-7,
 * out[2j + 1] rows 8-15 of 16-byte piece c + j (piece c again for j = 1
 * when c is a row's last piece).  Lanes 16j + 8h address piece c + j's rows
 * 8h .. 8h + 7. */
static void ld8(dec *k, LLVMValueRef st, int c, bool trans, LLVMValueRef out[4])
{
    LLVMBuilderRef b = k->b;
    int C = k->s.D / 16;
    LLVMValueRef row = LLVMBuildAdd(b, LLVMBuildShl(b, k->warp, c32(k, 4), ""), LLVMBuildAnd(b, k->lane, c32(k, 15), ""), "");
    LLVMValueRef ch = c + 1 < C ? LLVMBuildAdd(b, LLVMBuildLShr(b, k->lane, c32(k, 4), ""), c32(k, c), "") : c32(k, c);
    s2_nv_ldmatrix_x4(k->cg, s2_nv_smem_at(k->cg, LLVMBuildAdd(b, st, swizzle_c(k, C, row, ch), "")), trans, out);
}

/* Two e4m3 (or e5m2) bytes, half h of 32-bit word w, as f16x2 (exact;
 * cvt.rn.f16x2.e4m3x2: the upper byte to the upper half). */
static LLVMValueRef f8pair(dec *k, LLVMValueRef w, int h)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef x = LLVMBuildTrunc(b, h ? LLVMBuildLShr(b, w, c32(k, 16), "") : w, LLVMInt16TypeInContext(k->cg->llctx), "");
    return s2_nv_f8x2_to_f16x2(k->cg, k->s.kv_dt, x);
}

/* S = Q·Kᵀ over the warp's 16 keys of fp8 pages: a lane's ldmatrix word of
 * key row g, piece c, is dims 16c + 4·t4 .. + 3; its low pair is the B
 * fragment's first register, its high pair the second (the dims' order of
 * prepare_q8).  Keys keep their columns, so the mask is the 16-bit path's. */
static void compute_scores8(dec *k, LLVMValueRef kst, LLVMValueRef sc[2][4])
{
    int C = k->s.D / 16;
    for (int n = 0; n < 2; n++)
        for (int i = 0; i < 4; i++)
            sc[n][i] = cf(k, 0);
    for (int c = 0; c < C; c += 2) {
        LLVMValueRef m[4];
        ld8(k, kst, c, false, m);
        for (int j = 0; j < 2 && c + j < C; j++) {
            LLVMValueRef qa[4];
            if (k->s.q_in_regs)
                memcpy(qa, k->qf[c + j], sizeof qa);
            else
                q_fragment(k, c + j, qa);
            for (int n = 0; n < 2; n++) {
                LLVMValueRef kb[2] = {f8pair(k, m[2 * j + n], 0), f8pair(k, m[2 * j + n], 1)};
                s2_nv_mma_m16n8k16(k->cg, k->s.mdt, qa, kb, sc[n]);
            }
        }
    }
}

/* O += P·V over the warp's 16 keys of fp8 pages.  ldmatrix.trans of piece c
 * gives lane (g, t4) the byte pairs (dims 16c + 2g, + 1) of keys 2·t4 and
 * 2·t4 + 1 (8 + those in the second matrix); a byte permute pairs the keys
 * per dim, the B fragment's layout, so n-tile 2c + p holds dim 16c + 2g + p
 * at column g and O's accumulator (n-tile 2c + p, column 2·t4 + e) is dim
 * 16c + 4·t4 + 2e + p (s2_dec_spill_warp_state puts it back). */
static void accumulate_pv8(dec *k, LLVMValueRef vst, LLVMValueRef sc[2][4])
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    int C = k->s.D / 16;
    LLVMTypeRef v4i8 = LLVMVectorType(LLVMInt8TypeInContext(cg->llctx), 4);
    LLVMValueRef mask[4] = {c32(k, 0), c32(k, 2), c32(k, 1), c32(k, 3)};
    LLVMValueRef sel = LLVMConstVector(mask, 4);
    LLVMValueRef a[4];
    s2_flash_a_from_c(cg, k->s.mdt, sc, a);
    for (int c = 0; c < C; c += 2) {
        LLVMValueRef m[4];
        ld8(k, vst, c, true, m);
        for (int j = 0; j < 2 && c + j < C; j++) {
            LLVMValueRef x[2];
            for (int h = 0; h < 2; h++) {
                LLVMValueRef v = LLVMBuildBitCast(b, m[2 * j + h], v4i8, "");
                x[h] = LLVMBuildBitCast(b, LLVMBuildShuffleVector(b, v, v, sel, ""), cg->t_i32, "keypairs");
            }
            for (int p = 0; p < 2; p++) {
                LLVMValueRef vb[2] = {f8pair(k, x[0], p), f8pair(k, x[1], p)};
                s2_flash_mma_into(cg, k->s.mdt, a, vb, k->acc.o[2 * (c + j) + p]);
            }
        }
    }
}

/* The warp's chunk of tile `tile` in stage `stage` (when the chunk exists). */
static void warp_chunk(dec *k, LLVMValueRef tile, LLVMValueRef stage)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef gi = LLVMBuildAdd(b, LLVMBuildMul(b, tile, c32(k, k->s.warps), ""), k->warp, "gi");
    s2_nv_if has, rel;
    s2_nv_if_begin(k->cg, &has, LLVMBuildICmp(b, LLVMIntULT, gi, k->ngroups, ""), "chunk");
    LLVMValueRef e = chunk_entry(k, gi);
    s2_nv_if_begin(k->cg, &rel, chunk_relevant(k, e), "relevant");
    LLVMValueRef kpos0 = chunk_kpos0(k, gi, entry_field(k, e, 0));
    LLVMValueRef heads = entry_field(k, e, 1);
    LLVMValueRef soff = stage_off(k, stage);
    LLVMValueRef sc[2][4];
    if (k->s.kv8)
        compute_scores8(k, soff, sc);
    else
        compute_scores(k, soff, sc);
    apply_mask(k, sc, kpos0, heads);
    online_softmax(k, sc);
    LLVMValueRef voff = LLVMBuildAdd(b, soff, c32(k, k->s.v_in_stage), "");
    if (k->s.kv8)
        accumulate_pv8(k, voff, sc);
    else
        accumulate_pv(k, voff, sc);
    s2_nv_if_end(k->cg, &rel);
    s2_nv_if_end(k->cg, &has);
}

/* The page ids of a tile are looked up one iteration before its copies are
 * issued (kept in allocas, promoted to loop phis), so the entry and table
 * reads never stall the issue of the copies. */
static void main_loop(dec *k, LLVMBasicBlockRef entry_bb)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    int S = k->s.stages, W = k->s.warps;
    LLVMValueRef slot_ok[16], slot_kpos[16], slot_page[16];
    LLVMBasicBlockRef cur = s2_kb_entry_begin(&k->kb, entry_bb);
    for (int w = 0; w < W; w++) {
        slot_ok[w] = LLVMBuildAlloca(b, cg->t_i1, "next_ok");
        slot_kpos[w] = LLVMBuildAlloca(b, cg->t_i32, "next_kpos0");
        slot_page[w] = LLVMBuildAlloca(b, cg->t_i32, "next_page");
    }
    s2_kb_entry_end(&k->kb, cur);
    chunk_addr ca[16] = {{0}};   /* (filled for w < W; gcc cannot tell W > 0) */
    LLVMValueRef first_next = LLVMBuildAdd(b, k->t_begin, c32(k, S - 1), "");
    for (int w = 0; w < W; w++) {
        lookup_chunk(k, first_next, w, &ca[w]);
        LLVMBuildStore(b, ca[w].ok, slot_ok[w]);
        LLVMBuildStore(b, ca[w].kpos0, slot_kpos[w]);
        LLVMBuildStore(b, ca[w].page, slot_page[w]);
    }
    s2_nv_loop loop;
    s2_nv_loop_begin(cg, &loop, "tiles", k->t_begin, k->t_end, c32(k, 1), NULL, 0);
    LLVMValueRef t = loop.iv;
    LLVMValueRef i = LLVMBuildSub(b, t, k->t_begin, "i");
    /* one barrier per tile: it publishes stage i and tells that every warp
     * is done with tile i-1, whose stage the prefetch refills */
    s2_nv_cp_async_wait(cg, S - 2);
    s2_nv_barrier_cta(cg);
    for (int w = 0; w < W; w++) {
        ca[w].ok = LLVMBuildLoad2(b, cg->t_i1, slot_ok[w], "");
        ca[w].kpos0 = LLVMBuildLoad2(b, cg->t_i32, slot_kpos[w], "");
        ca[w].page = LLVMBuildLoad2(b, cg->t_i32, slot_page[w], "");
    }
    prefetch_kv(k, LLVMBuildAdd(b, t, c32(k, S - 1), ""), s2_kb_ring_stage(&k->kb, LLVMBuildAdd(b, i, c32(k, S - 1), ""), S, ""), ca);
    LLVMValueRef next = LLVMBuildAdd(b, t, c32(k, S), "");
    for (int w = 0; w < W; w++) {
        chunk_addr n;
        lookup_chunk(k, next, w, &n);
        LLVMBuildStore(b, n.ok, slot_ok[w]);
        LLVMBuildStore(b, n.kpos0, slot_kpos[w]);
        LLVMBuildStore(b, n.page, slot_page[w]);
    }
    warp_chunk(k, t, s2_kb_ring_stage(&k->kb, i, S, "stage"));
    s2_nv_loop_end(cg, &loop, NULL);
}

static void dec_shape_init(dec_shape *s, const s2_pattern *p, const s2_kspec *spec)
{
    memset(s, 0, sizeof *s);
    s->dt = spec->dtype;
    s->D = spec->head_dim;
    s->chunks = s->D / 8;
    /* above d128, Q's fragments (D / 4 registers) and O (D / 2) would spill */
    s->q_in_regs = s->D <= 128;
    s->warps = spec->num_warps;
    s->threads = s->warps * S2_WARP;
    s->stages = spec->num_stages;
    s->BN = 16 * s->warps;
    s->group = p->heads / p->kv_heads;
    s->heads = p->heads;
    s->bs_log2 = s2_log2i(p->block_size);
    s->gpb_log2 = s2_log2i(p->block_size / 16);
    s->causal = p->causal;
    s->q_off = 0;
    s->kv_dt = spec->kv_dtype;
    s->kv8 = spec->kv_dtype != 0;
    s->mdt = s->kv8 ? S2_DTYPE_F16 : s->dt;
    s->kv_off = DEC_ROWS * s->D * 2;
    s->v_in_stage = s->BN * s->D * (s->kv8 ? 1 : 2);
    s->stage_bytes = 2 * s->v_in_stage;
    /* after the loop the stages are free: the warps' O then (m, l) */
    s->merge_o_off = 0;
    s->merge_ml_off = s->warps * DEC_ROWS * s->D * 4;
    s->flag_off = s->merge_ml_off + s->warps * DEC_ROWS * 8;
}

int s2_decode_smem_bytes(const s2_pattern *p, const s2_kspec *spec)
{
    dec_shape s;
    dec_shape_init(&s, p, spec);
    int ring = s.kv_off + s.stages * s.stage_bytes;
    int merge = s.flag_off + 16;
    return ring > merge ? ring : merge;
}

static s2_status decode_kernel(s2_ctx *ctx, s2_cg *cg, const s2_pattern *p, const s2_kspec *spec, const char *name)
{
    dec k = {.kb = {.cg = cg, .b = cg->b}};
    dec_shape_init(&k.s, p, spec);
    if (k.s.D > MAX_D || k.s.D % 16 != 0 || k.s.stages < 2 || k.s.threads % DEC_ROWS != 0 || k.s.D % (k.s.threads / DEC_ROWS * 2) != 0
        || p->block_size < 16 || k.s.warps > 16)
        return s2_fail(ctx, S2_ERR_INTERNAL, "decode: unresolved spec reached the builder");
    LLVMTypeRef params[P_COUNT];
    int np = s2_kb_abi_params(cg, S2_ABI_DECODE, params);
    k.fn = s2_nv_kernel_new(cg, name, params, (unsigned)np, k.s.threads, 1);
    static const int ro[] = {P_Q, P_K, P_V, P_TABLE, P_SEQ_LENS, P_CLASS, P_OFFSETS, P_ENTRIES, P_K_SCALE, P_V_SCALE};
    for (size_t i = 0; i < sizeof ro / sizeof ro[0]; i++) {
        s2_nv_param_attr(cg, k.fn, (unsigned)ro[i], "noalias");
        s2_nv_param_attr(cg, k.fn, (unsigned)ro[i], "readonly");
    }
    for (int i = P_O; i <= P_WS_LSE; i++)
        s2_nv_param_attr(cg, k.fn, (unsigned)i, "noalias");
    s2_nv_param_attr(cg, k.fn, P_COUNTERS, "noalias");
    LLVMBasicBlockRef entry_bb = LLVMGetInsertBlock(cg->b);

    setup(&k, entry_bb);
    init_accumulators(&k, entry_bb);
    load_q(&k);
    s2_nv_cp_async_commit(cg);
    for (int st = 0; st < k.s.stages - 1; st++)
        load_tile_now(&k, LLVMBuildAdd(k.b, k.t_begin, c32(&k, st), ""), c32(&k, st));
    s2_nv_cp_async_wait(cg, k.s.stages - 1);
    s2_nv_barrier_cta(cg);
    if (k.s.kv8)
        prepare_q8(&k);
    if (k.s.q_in_regs)
        load_q_fragments(&k);
    main_loop(&k, entry_bb);
    s2_nv_cp_async_wait(cg, 0);
    s2_nv_barrier_cta(cg);
    s2_dec_spill_warp_state(&k);
    s2_nv_barrier_cta(cg);
    s2_dec_merge_and_store(&k);
    s2_dec_last_cta_combine(&k);
    LLVMBuildRetVoid(k.b);
    return S2_OK;
}

s2_status s2_decode_build(s2_ctx *ctx, s2_cg *cg, const s2_pattern *p, const s2_kspec *spec, const char *name)
{
    char sub[512];
    s2_status st = decode_kernel(ctx, cg, p, spec, name);
    snprintf(sub, sizeof sub, "%s_combine", name);
    if (st == S2_OK)
        st = s2_combine_kernel_build(ctx, cg, spec->dtype, spec->head_dim, sub);
    return st;
}
