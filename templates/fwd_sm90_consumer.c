/* The consumer warpgroups of the sm_90a forward (fwd_sm90.c): per entry
 * S = Q·Kᵀ (wgmma), mask, online softmax, O += P·V (wgmma RS), with the
 * intra-warpgroup overlap and the ping-pong; then the epilogue. */
#include "fwd_sm90_internal.h"
#include "s2c/launch.h"
#include "template.h"
#include "s2c/layout.h"

/* tile row of this thread's row hr (0: g, 1: g + 8) */
static LLVMValueRef tile_row(sm90 *k, int hr)
{
    LLVMValueRef r = add(k, LLVMBuildShl(k->b, k->wgc, c32(k, 6), ""), LLVMBuildShl(k->b, k->warp, c32(k, 4), ""));
    return add(k, r, addc(k, k->g, 8 * hr));
}

/* Descriptor steps (bytes >> 4) of the k steps (32 bytes: k16 of 16-bit
 * types, k32 of 8-bit ones): Q and K K-major in 128-byte column blocks
 * (+32 B inside a block, next block after rows * 128 B), V N-major, 16 key
 * rows per step, or (fp8) Vᵀ K-major, 32 keys per step (PTX ISA
 * 9.7.15.5.1.2.1, canonical layouts). */
static void qk_steps(const sm90_shape *s, int *a_step, int *b_step)
{
    for (int j = 0; j < s->D / s->KS; j++) {
        a_step[j] = ((j / 4) * SLAB * 128 + (j % 4) * 32) >> 4;
        b_step[j] = ((j / 4) * s->BN * 128 + (j % 4) * 32) >> 4;
    }
}

static void v_steps(const sm90_shape *s, int *v_step)
{
    for (int j = 0; j < s->BN / s->KS; j++)
        v_step[j] = s->fp8 ? (j * 32) >> 4 : (j * 16 * 128) >> 4;
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
    LLVMValueRef row = add(k, LLVMBuildMul(b, k->wgc, c32(k, SLAB * k->s.DP * k->s.esz), ""),
                           LLVMBuildShl(b, r0, c32(k, 7), ""));
    row = add(k, row, LLVMBuildShl(b, k->t4, c32(k, 2), ""));
    /* (fp8's k32 A map puts the same 4 bytes in each register: row g (+8),
     * bytes 32j + 4·t4 (+16)) */
    for (int j = 0; j < k->s.D / k->s.KS; j++)
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
    LLVMValueRef qa = add(k, addc(k, k->smem, k->s.q_off), LLVMBuildMul(k->b, k->wgc, c32(k, SLAB * k->s.DP * k->s.esz), ""));
    return s2_nv_wgmma_desc(k->cg, qa, 16, 1024);
}

static LLVMValueRef kv_desc(sm90 *k, int off, LLVMValueRef stage, int lbo)
{
    LLVMValueRef a = add(k, addc(k, k->smem, off), LLVMBuildMul(k->b, stage, c32(k, k->s.stage_bytes), ""));
    return s2_nv_wgmma_desc(k->cg, a, lbo, 1024);
}

/* P·V's B: V N-major (16-bit), or fp8's Vᵀ K-major */
static LLVMValueRef pv_desc(sm90 *k, LLVMValueRef stage)
{
    if (!k->s.fp8)
        return kv_desc(k, k->s.v_off, stage, k->s.BN * 128);
    LLVMValueRef a = add(k, addc(k, k->smem, k->s.vt_off), LLVMBuildMul(k->b, stage, c32(k, k->s.vt_stage_bytes), ""));
    return s2_nv_wgmma_desc(k->cg, a, 16, 1024);
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
        s2_nv_wgmma_rs_rs(k->cg, s->dt, s->BN, s->D / s->KS, k->qa, kv_desc(k, s->k_off, stage, 16), b_step, sacc, 0, 0,
                          NULL, NULL, NULL, NULL);
    else
        s2_nv_wgmma_ss(k->cg, s->dt, s->BN, s->D / s->KS, q_desc(k), a_step, kv_desc(k, s->k_off, stage, 16), b_step,
                       false, false, sacc);
}

/* O += P·V(stage), P packed from the probabilities: the S accumulator layout
 * is the RS A layout (FA3 convert_layout_acc_Aregs, MmaPV_is_RS). */
static void issue_pv(sm90 *k, LLVMValueRef stage, LLVMValueRef (*pa)[4], LLVMValueRef *oacc)
{
    const sm90_shape *s = &k->s;
    int v_step[MAX_BN / 16];
    v_steps(s, v_step);
    s2_nv_wgmma_rs(k->cg, s->dt, s->PN, s->BN / s->KS, pa, pv_desc(k, stage), v_step, true, oacc);
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
        s2_nv_wgmma_rs_rs(k->cg, s->dt, s->BN, s->D / s->KS, k->qa, kv_desc(k, s->k_off, stage, 16), b_step, sacc,
                          s->PN, s->BN / s->KS, pa, pv_desc(k, prev), v_step, oacc);
        return;
    }
    s2_nv_wgmma_ss_rs(k->cg, s->dt, s->BN, s->D / s->KS, q_desc(k), a_step, kv_desc(k, s->k_off, stage, 16), b_step,
                      sacc, s->PN, s->BN / s->KS, pa, pv_desc(k, prev), v_step, oacc);
}

/* fp8: P is cast as P · P8_SCALE (in [0, 256]: small probabilities stay
 * normal numbers instead of underflowing, FA3's Max_offset 8), undone in O's
 * final factor (descales). */
#define P8_SCALE 256.0f

/* fp8: k step j's four registers hold 4 keys each: row g (+8 in registers
 * 1, 3), the thread's two columns of S's n-tiles 4j, 4j+1 (registers 0, 1)
 * or 4j+2, 4j+3 (2, 3); Vᵀ's key order matches (transpose_v). */
static void pack_p(sm90 *k, LLVMValueRef sc[][4], LLVMValueRef (*pa)[4])
{
    for (int j = 0; k->s.fp8 && j < k->s.BN / 32; j++)
        for (int q = 0; q < 4; q++) {
            int n = 4 * j + 2 * (q >> 1), h = 2 * (q & 1);
            LLVMValueRef x[4] = {sc[n][h], sc[n][h + 1], sc[n + 1][h], sc[n + 1][h + 1]};
            for (int e = 0; e < 4; e++)
                x[e] = LLVMBuildFMul(k->b, x[e], cf(k, P8_SCALE), "");
            pa[j][q] = s2_nv_pack4_fp8(k->cg, k->s.dt, x[0], x[1], x[2], x[3]);
        }
    for (int j = 0; !k->s.fp8 && j < k->s.BN / 16; j++) {
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
    ev->flags = s2_sm90_entry_field(k, e, gat ? 16 : 4, cg->t_i32);
    ev->live = gat ? LLVMBuildZExt(k->b, s2_sm90_entry_field(k, e, 20, cg->t_i32), cg->t_i64, "") : s2_sm90_entry_field(k, e, 8, cg->t_i64);
    for (int j = 0; j < (gat ? k->s.gather : 1); j++)
        ev->blk[j] = s2_sm90_entry_field(k, e, gat ? 4 * j : 0, cg->t_i32);
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
    LLVMBasicBlockRef join, from = s2_flash_mask_begin(cg, k->fn, full, &join);
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
    LLVMValueRef col0 = LLVMBuildShl(b, k->t4, c32(k, 1), "col0");
    for (int hr = 0; hr < 2; hr++) {
        LLVMValueRef r = tile_row(k, hr);
        LLVMValueRef bits = s2_flash_row_live(cg, live, r, s->sub_m_log2, s->sub_n);
        /* column c of slot j holds key kpos[j] + c */
        LLVMValueRef lim[4];
        for (int j = 0; j < nslot; j++)
            lim[j] = s2_flash_key_limit(cg, k->kv_len, kpos[j], s->causal ? k->tile_pos0 : NULL, r, col0);
        s2_flash_mask_row(cg, hr, NT, s->sub_n_size, slot_cols, bits, lim, sc, masked);
    }
    s2_flash_join_scores(cg, from, join, NT, sc, masked);
}

/* Online softmax (flash.h; FA2 softmax_rescale_o) of the thread's two rows; returns the O
 * rescale factors in alpha[2] (applied by the caller once P(j-1)·V is done). */
static LLVMValueRef online_softmax(sm90 *k, LLVMValueRef sc[][4], LLVMValueRef alpha[2])
{
    return s2_flash_online_softmax(k->cg, &k->acc, sc, k->s.BN / 8, k->scale_log2, k->s.lazy, alpha);
}

static void load_o(sm90 *k, LLVMValueRef *oacc)
{
    for (int dn = 0; dn < k->s.PN / 8; dn++)
        for (int i = 0; i < 4; i++)
            oacc[4 * dn + i] = LLVMBuildLoad2(k->b, k->cg->t_f32, k->acc.o[dn][i], "");
}

static void store_o(sm90 *k, LLVMValueRef *oacc)
{
    for (int dn = 0; dn < k->s.PN / 8; dn++)
        for (int i = 0; i < 4; i++)
            LLVMBuildStore(k->b, oacc[4 * dn + i], k->acc.o[dn][i]);
}

/* O *= alpha per row; with lazy rescaling only where grow (warp-uniform)
 * holds.  Columns past D (DP > D) hold zeros and are left as they are. */
static void rescale_o(sm90 *k, LLVMValueRef alpha[2], LLVMValueRef grow)
{
    s2_flash_rescale_o(k->cg, &k->acc, k->s.D, alpha, grow);
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

/* Ping-pong (FA3 warp_scheduler_barrier_sync): wait for this warpgroup's turn on the tensor cores
 * (sync on its barrier), or, after issuing, hand them to the other (arrive on the other's). */
static void turn_barrier(sm90 *k, bool pass)
{
    if (!k->s.pingpong)
        return;
    static const char *const names[2][2] = {{"turn0", "turn1"}, {"pass0", "pass1"}};
    LLVMValueRef first = LLVMBuildICmp(k->b, LLVMIntEQ, k->wgc, c32(k, 0), "");
    for (int wg = 0; wg < 2; wg++) {
        s2_nv_if blk;
        s2_nv_if_begin(k->cg, &blk, wg ? LLVMBuildNot(k->b, first, "") : first, names[pass][wg]);
        s2_nv_named_barrier(k->cg, BAR_WG_BASE + (wg ^ pass), 256, pass);
        s2_nv_if_end(k->cg, &blk);
    }
}

static void turn_wait(sm90 *k) { turn_barrier(k, false); }
static void turn_pass(sm90 *k) { turn_barrier(k, true); }

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
    int ns = s->BN / 2, no = s->PN / 2;
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
            s2_sm90_entry_words_if(k, e1, LLVMBuildICmp(b, LLVMIntSLT, e1, k->end, ""), w1);
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
    if (s->fp8)
        s2_nv_mbar_wait(cg, vt_bar(k, st0), parity_of(k, i0));
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
    int np = 4 * (s->BN / s->KS);
    LLVMValueRef p_slot[MAX_BN / 16 * 4];
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(b);
    LLVMValueRef first_inst = LLVMGetFirstInstruction(LLVMGetEntryBasicBlock(k->fn));
    LLVMPositionBuilderBefore(b, first_inst);
    for (int i = 0; i < np; i++)
        p_slot[i] = LLVMBuildAlloca(b, cg->t_i32, "p");
    LLVMPositionBuilderAtEnd(b, cur);
    for (int j = 0; j < s->BN / s->KS; j++)
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
    /* fp8: this entry's Vᵀ too (written while its K was waited for, or earlier) */
    if (s->fp8)
        s2_nv_mbar_wait(cg, vt_bar(k, stage), parity_of(k, i));
    for (int j = 0; j < s->BN / s->KS; j++)
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
    for (int j = 0; j < s->BN / s->KS; j++)
        for (int q = 0; q < 4; q++)
            LLVMBuildStore(b, pa[j][q], p_slot[4 * j + q]);
    s2_nv_loop_end(cg, &loop, carry ? &stage : NULL);

    /* the last entry's P·V */
    LLVMValueRef last = carry ? loop.result[0]
                                 : stage_of(k, add(k, k->it0, LLVMBuildSub(b, LLVMBuildSub(b, k->end, k->begin, ""),
                                                                           c32(k, 1), "")));
    for (int j = 0; j < s->BN / s->KS; j++)
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

/* i1: this thread's row hr exists (q_start <= pos < kv_len); *qrow its row in q. */
static LLVMValueRef q_row(void *kp, int hr, LLVMValueRef *qrow)
{
    sm90 *k = kp;
    LLVMBuilderRef b = k->b;
    LLVMValueRef pos = add(k, k->tile_pos0, tile_row(k, hr));
    *qrow = LLVMBuildSub(b, pos, k->q_start, "qrow");
    return LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSGE, pos, k->q_start, ""),
                        LLVMBuildICmp(b, LLVMIntSLT, pos, k->kv_len, ""), "");
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
    s2_flash_out out = {param(k, P_O), k->obase, param(k, P_OS + 1), param(k, P_LSE), k->lse_base, k->t4, k->o_mul,
                        k->s.D};
    LLVMValueRef strides[3] = {param(k, P_OS), param(k, P_OS + 1), param(k, P_OS + 2)};
    s2_flash_store_rows16(k->cg, &out, &k->acc, k->s.out_dt, k->scale_log2, strides, 3, q_row, k);
}

/* fp8 descale i (0 q, 1 k, 2 v) of the item's (batch, kv head), 1.0 where
 * its pointer is null (the load then reads the offsets array, a valid
 * address, and is ignored) */
static LLVMValueRef descale(sm90 *k, int i)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    LLVMValueRef ptr = param(k, k->p_descale + i);
    LLVMValueRef none = LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildPtrToInt(b, ptr, cg->t_i64, ""), c64(k, 0), "");
    LLVMValueRef idx = add(k, LLVMBuildMul(b, k->batch, c64(k, k->s.heads / k->s.group), ""),
                           LLVMBuildZExt(b, k->kvh32, cg->t_i64, ""));
    LLVMValueRef at = LLVMBuildInBoundsGEP2(b, cg->t_f32, ptr, &idx, 1, "");
    LLVMValueRef v = LLVMBuildLoad2(b, cg->t_f32, LLVMBuildSelect(b, none, param(k, P_OFFSETS), at, ""), "descale");
    LLVMSetAlignment(v, 4);
    return LLVMBuildSelect(b, none, cf(k, 1.0f), v, "");
}

/* The scores' scale and O's factor: fp8 folds q_descale · k_descale into
 * the first and v_descale / P8_SCALE into the second (FA3's FP8 forward). */
static void descales(sm90 *k)
{
    k->scale_log2 = param(k, P_SCALE_LOG2);
    k->o_mul = NULL;
    if (!k->s.fp8)
        return;
    k->scale_log2 = LLVMBuildFMul(k->b, k->scale_log2, LLVMBuildFMul(k->b, descale(k, 0), descale(k, 1), ""), "scale_log2");
    k->o_mul = LLVMBuildFMul(k->b, descale(k, 2), cf(k, 1.0f / P8_SCALE), "o_mul");
}

void s2_sm90_consumer(sm90 *k, LLVMBasicBlockRef entry_bb)
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

    s2_flash_rows_alloca(cg, &k->acc, k->s.DP, entry_bb);
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
        w0 = s2_sm90_slot_load(k, SLOT_W);
    }
    s2_sm90_work_begin(k, &wl, "work_c", w0, true);
    descales(k);
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
        w_next = s2_sm90_slot_load(k, SLOT_W);
    }
    s2_sm90_work_end(k, &wl, w_next);
    LLVMBuildRetVoid(b);
}
