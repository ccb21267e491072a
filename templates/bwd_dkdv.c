/* NAME_dkdv: one CTA per (key tile, kv head, batch) walking the transposed
 * lists of its group's query heads; dK and dV stay in registers (bwd.c). */
#include "bwd_internal.h"
#include "s2c/layout.h"



/* The list is walked from its end (the ring's i-th entry is end-1-i): the
 * long lists of vertical stripes then all start at the last query tiles and
 * read each query tile at about the same time, from L2. */
LLVMValueRef s2_bwd_kv_entry(bwd *k, const kv_state *ks, LLVMValueRef e) { return LLVMBuildSub(k->b, ks->rev, e, "e_rev"); }

static void kv_prep(bwd *k, LLVMValueRef e, prep_vals *out, void *user)
{
    kv_state *ks = user;
    out->n = 1;
    out->v[0] = mul(k, s2_bwd_entry_field(k, ks->entries, s2_bwd_kv_entry(k, ks, e), 0, k->cg->t_i32), c32(k, k->s.BM));
}

static void kv_take(bwd *k, const prep_vals *in, void *user)
{
    (void)k;
    kv_state *ks = user;
    ks->pre_qpos = in->v[0];
}

/* The ring's full mbarrier of the stage at shared offset soff (tma). */
LLVMValueRef s2_bwd_kv_bar(bwd *k, LLVMValueRef soff)
{
    LLVMValueRef st = LLVMBuildUDiv(k->b, LLVMBuildSub(k->b, soff, c32(k, k->s.kv_stage0), ""),
                                    c32(k, k->s.kv_stage_bytes), "stage");
    return s2_kb_mbar(&k->kb, s2_nv_smem_base32(k->cg), k->s.kv_bar_off, st);
}

/* Q and dO of the query tile at qpos0 by TMA into the stage at soff: one
 * thread (predicated, no branch) arms the stage's mbarrier with the bytes
 * and issues a box of 64 columns x BM rows per 64 columns of each; rows
 * outside the queries come as zeros (the maps' bounds). */
static void kv_issue_tma(bwd *k, kv_state *ks, LLVMValueRef qpos0, LLVMValueRef soff)
{
    s2_cg *cg = k->cg;
    const bwd_shape *s = &k->s;
    LLVMValueRef one = LLVMBuildICmp(k->b, LLVMIntEQ, k->tid, c32(k, 0), "tma_thread");
    LLVMValueRef bar = s2_bwd_kv_bar(k, soff);
    s2_nv_mbar_arrive_expect_tx_if(cg, one, bar, 2 * s->BM * s->row_bytes);
    /* (a packed batch: the sequence's rows of the one tensor batch) */
    LLVMValueRef row = add(k, LLVMBuildTrunc(k->b, k->q_row0, cg->t_i32, ""), LLVMBuildSub(k->b, qpos0, k->q_start, ""));
    LLVMValueRef b32 = LLVMBuildTrunc(k->b, k->bidx, cg->t_i32, "");
    for (int m = 0; m < 2; m++)
        for (int c = 0; c < s->D / 64; c++) {
            LLVMValueRef dst = add(k, s2_nv_smem_base32(cg), add(k, soff, c32(k, m * s->BM * s->row_bytes + c * s->BM * 128)));
            LLVMValueRef co[4] = {c32(k, 64 * c), row, ks->h32, b32};
            s2_nv_tma_load_4d_if(cg, one, dst, bar, param(k, m ? P_TMAP_DO : P_TMAP_Q), co);
        }
}

static void kv_issue(bwd *k, LLVMValueRef e, LLVMValueRef soff, void *user)
{
    kv_state *ks = user;
    e = s2_bwd_kv_entry(k, ks, e);
    int tb = k->s.BM * k->s.row_bytes;
    LLVMValueRef qpos0 = ks->pre_qpos;   /* kv_take's */
    if (k->s.tma) {
        kv_issue_tma(k, ks, qpos0, soff);
        s2_bwd_load_row_stats(k, qpos0, ks->rowbase, add(k, soff, c32(k, k->s.kv_lse_off)));
        return;
    }
    /* (the query heads' loop of a GQA kernel leaves no registers for the
     * whole-tile path: it spilled there) */
    bool whole = k->s.group == 1;
    (whole ? s2_bwd_load_tile : s2_bwd_load_tile_rows)(k, k->s.BM, param(k, P_Q), ks->qslice, param(k, P_QS + 1), soff, qpos0, NULL, true);
    (whole ? s2_bwd_load_tile : s2_bwd_load_tile_rows)(k, k->s.BM, param(k, P_DO), ks->doslice, param(k, P_DOS + 1), add(k, soff, c32(k, tb)), qpos0, NULL, true);
    s2_bwd_load_row_stats(k, qpos0, ks->rowbase, add(k, soff, c32(k, k->s.kv_lse_off)));
}

/* lse2 / delta of query column chunk0 + 8n + 2t + (i & 1), from the stage. */
void s2_bwd_kv_stat(bwd *k, int n, int i, LLVMValueRef *lse2, LLVMValueRef *delta, void *user)
{
    kv_state *ks = user;
    LLVMValueRef c = add(k, LLVMBuildShl(k->b, k->t4, c32(k, 1), ""), c32(k, ks->chunk0 + 8 * n + (i & 1)));
    LLVMValueRef off = add(k, ks->stats, LLVMBuildShl(k->b, c, c32(k, 2), ""));
    *lse2 = LLVMBuildLoad2(k->b, k->cg->t_f32, s2_nv_smem_at(k->cg, off), "");
    *delta = LLVMBuildLoad2(k->b, k->cg->t_f32, s2_nv_smem_at(k->cg, add(k, off, c32(k, 4 * k->s.BM))), "");
}

static void kv_compute(bwd *k, LLVMValueRef e, LLVMValueRef soff, void *user)
{
    kv_state *ks = user;
    e = s2_bwd_kv_entry(k, ks, e);
    LLVMBuilderRef b = k->b;
    LLVMValueRef qt = soff, dot = add(k, soff, c32(k, k->s.BM * k->s.row_bytes));
    ks->stats = add(k, soff, c32(k, k->s.kv_lse_off));
    LLVMValueRef flags = s2_bwd_entry_field(k, ks->entries, e, 4, k->cg->t_i32);
    LLVMValueRef live = s2_bwd_entry_field(k, ks->entries, e, 8, k->cg->t_i64);
    LLVMValueRef qpos0 = mul(k, s2_bwd_entry_field(k, ks->entries, e, 0, k->cg->t_i32), c32(k, k->s.BM));
    /* a warp whose key sub-block no query of the entry keeps has nothing to add */
    s2_nv_if skip = {0};
    if (ks->warp_rows) {
        LLVMValueRef mine = LLVMBuildAnd(b, LLVMBuildLShr(b, live, ks->warp_shift, ""), ks->warp_rows, "");
        s2_nv_if_begin(k->cg, &skip, LLVMBuildICmp(b, LLVMIntNE, mine, c64(k, 0), ""), "warp_live");
    }
    mask_geom mg = {true, k->s.t_sub_n_log2, k->s.t_sub_m_size, k->s.t_sub_n};
    int NT = k->s.qc / 8;
    for (int c0 = 0; c0 < k->s.BM; c0 += k->s.qc) {
        LLVMValueRef sc[MAX_N][4], dp[MAX_N][4];
        ks->chunk0 = c0;
        s2_bwd_mma_abt(k, c32(k, k->s.kv_k_off), qt, c0, NT, sc);
        s2_bwd_apply_mask(k, &mg, sc, NT, c0, flags, live, ks->kpos0, qpos0, NULL);
        s2_bwd_mma_abt(k, c32(k, k->s.kv_v_off), dot, c0, NT, dp);
        s2_bwd_probs_and_ds(k, sc, dp, NT, s2_bwd_kv_stat, ks);
        s2_bwd_mma_xy_cols(k, sc, NT, dot, c0, ks->col0, ks->cols, ks->dv);
        s2_bwd_mma_xy_cols(k, dp, NT, qt, c0, ks->col0, ks->cols, ks->dk);
    }
    if (ks->warp_rows)
        s2_nv_if_end(k->cg, &skip);
}

/* CTAs start in launch order (x fastest).  The grid is read lists major
 * (all (kv head, batch) pairs of list 0 first, ...): the lists come
 * heaviest first, so the last wave holds short ones; in rows of KT_CHUNK
 * lists per pair, so that a head's heaviest lists (its vertical stripes)
 * run together and, walked from their ends, read each query tile at about
 * the same time, from L2 (runs 4-5).  Sets *kvh32 and k->batch; returns
 * the list (key tile) index. */
enum { KT_CHUNK = 8 };

static LLVMValueRef remap_key_tile(bwd *k, LLVMValueRef *kvh32)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    /* the grid's kv heads: all of them, or a chunk of them (the runtime's
     * dS path over head chunks) */
    LLVMValueRef hkv = s2_nv_intrinsic(cg, "llvm.nvvm.read.ptx.sreg.nctaid.y", cg->t_i32, NULL, 0, NULL);
    LLVMValueRef nz = s2_nv_intrinsic(cg, "llvm.nvvm.read.ptx.sreg.nctaid.z", cg->t_i32, NULL, 0, NULL);
    LLVMValueRef nx = s2_nv_intrinsic(cg, "llvm.nvvm.read.ptx.sreg.nctaid.x", cg->t_i32, NULL, 0, NULL);
    LLVMValueRef lin = add(k, s2_nv_ctaid(cg, 'x'),
                           mul(k, nx, add(k, s2_nv_ctaid(cg, 'y'), mul(k, hkv, s2_nv_ctaid(cg, 'z')))));
    LLVMValueRef per = mul(k, hkv, nz);
    /* row of KT_CHUNK key tiles (the last one narrower) over every pair, pair major inside */
    LLVMValueRef row = LLVMBuildUDiv(b, lin, mul(k, per, c32(k, KT_CHUNK)), "kt_row");
    LLVMValueRef kt0 = mul(k, row, c32(k, KT_CHUNK));
    LLVMValueRef rest = LLVMBuildSub(b, nx, kt0, "");
    LLVMValueRef width = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntULT, rest, c32(k, KT_CHUNK), ""), rest,
                                         c32(k, KT_CHUNK), "kt_width");
    LLVMValueRef r = LLVMBuildSub(b, lin, mul(k, row, mul(k, per, c32(k, KT_CHUNK))), "");
    LLVMValueRef hb = LLVMBuildUDiv(b, r, width, "hb");
    *kvh32 = LLVMBuildURem(b, hb, hkv, "kvh");
    k->batch = LLVMBuildZExt(b, LLVMBuildUDiv(b, hb, hkv, ""), cg->t_i64, "batch");
    return add(k, kt0, LLVMBuildURem(b, r, width, ""));
}

static LLVMValueRef pass_slice(bwd *k, int ps, LLVMValueRef h64, int col0)
{
    LLVMValueRef sl = s2_bwd_slice(k, ps, h64);
    return col0 ? add(k, sl, c64(k, col0)) : sl;
}

void s2_bwd_build_dkdv(bwd *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    const bwd_shape *s = &k->s;
    LLVMValueRef kt = s2_nv_ctaid(cg, 'x');
    LLVMValueRef kvh32 = s2_nv_ctaid(cg, 'y');
    if (s->wg)
        kt = remap_key_tile(k, &kvh32);
    s2_bwd_seq(k);
    LLVMValueRef kvh64 = LLVMBuildZExt(b, kvh32, cg->t_i64, "kv_head");
    kv_state ks = {0};
    ks.kpos0 = mul(k, kt, c32(k, s->KB));
    ks.entries = param(k, P_TENTRIES);
    /* the key tile's slots (pattern blocks, or the tile itself) are the
     * header record of its list (s2_schedule_pack_gathered_kv), the same for
     * every query head of the group; warp w's 16 rows lie in slot 16w / kgbs */
    LLVMValueRef hb, he;
    LLVMValueRef h0 = LLVMBuildZExt(b, mul(k, kvh32, c32(k, s->group)), cg->t_i64, "");
    s2_bwd_list_bounds(k, P_TCLASS, P_TOFFSETS, h0, param(k, P_KV_TILES), kt, &hb, &he);
    LLVMValueRef jw = LLVMBuildLShr(b, LLVMBuildShl(b, k->warp, c32(k, 4), ""), c32(k, s2_log2i(s->kgbs)), "warp_slot");
    LLVMValueRef mine = NULL;
    for (int j = 0; j < s->kvg; j++) {
        LLVMValueRef blk = LLVMBuildLoad2(b, cg->t_i32,
            LLVMBuildInBoundsGEP2(b, cg->t_i32, ks.entries, (LLVMValueRef[]){add(k, mul(k, sext64(k, hb), c64(k, 4)),
                                                                                  c64(k, j))}, 1, ""), "");
        LLVMSetAlignment(blk, 4);
        /* unused slots (-1) get a position no row reaches: every row fails 0 <= pos */
        ks.slot[j] = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, blk, c32(k, 0), ""), c32(k, -(1 << 20)),
                                     mul(k, blk, c32(k, s->kgbs)), "slot");
        /* row r of the tile is at kpos0 + r for this warp's rows */
        LLVMValueRef base = LLVMBuildSub(b, ks.slot[j], c32(k, j * s->kgbs), "");
        mine = j == 0 ? base : LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, jw, c32(k, j), ""), base, mine, "");
    }
    ks.kpos0 = mine;
    /* a packed batch's key tile past its sequence, or a sequence without
     * queries, walks nothing (its dk, dv rows come out zero; NAME_dqds reads
     * the dS tiles of key tiles past kv_len as zeros) */
    LLVMValueRef keys = NULL;
    for (int j = 0; j < s->kvg; j++) {
        LLVMValueRef in = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSGE, ks.slot[j], c32(k, 0), ""),
                                       LLVMBuildICmp(b, LLVMIntSLT, ks.slot[j], k->kv_len, ""), "");
        keys = keys ? LLVMBuildOr(b, keys, in, "") : in;
    }
    LLVMValueRef walk = LLVMBuildAnd(b, keys, LLVMBuildICmp(b, LLVMIntSGT, k->q_len, c32(k, 0), ""), "walk");
    bwd_slots kslots = {ks.slot, s->kvg, s->kgbs};
    const bwd_slots *slot = &kslots;
    LLVMValueRef dk[MAX_D / 8][4], dv[MAX_D / 8][4];
    s2_bwd_new_acc_cols(k, dk, s->kv_cols, "dk");
    s2_bwd_new_acc_cols(k, dv, s->kv_cols, "dv");
    ks.dk = dk;
    ks.dv = dv;
    if (s->ds)
        ks.ds_on = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildPtrToInt(b, param(k, P_DS), cg->t_i64, ""), c64(k, 0), "ds_on");
    /* (a warpgroup's wgmma needs all four warps: no per-warp skip there) */
    if (s->t_sub_n > 1 && !s->wg) {
        /* the warp's 16 key rows lie in key sub-block 16·warp / sub_n_size */
        unsigned long long rows = 0;
        for (int i = 0; i < s->BM / s->t_sub_m_size; i++)
            rows |= 1ull << (i * s->t_sub_n);
        ks.warp_rows = LLVMConstInt(cg->t_i64, rows, 0);
        ks.warp_shift = LLVMBuildZExt(b, LLVMBuildLShr(b, LLVMBuildShl(b, k->warp, c32(k, 4), ""),
                                                        c32(k, s->t_sub_n_log2), ""), cg->t_i64, "");
    }
    if (s->tma) {
        /* the ring's full mbarriers (one arrival: the TMA thread's); every
         * thread syncs before any use (ptxas makes the init a warp-wide
         * operation: racecheck saw it race the first arrive without this) */
        s2_nv_if init;
        s2_nv_if_begin(cg, &init, LLVMBuildICmp(b, LLVMIntEQ, k->tid, c32(k, 0), ""), "mbar_init");
        for (int st = 0; st < s->stages; st++)
            s2_nv_mbar_init(cg, s2_kb_mbar(&k->kb, s2_nv_smem_base32(cg), s->kv_bar_off + 8 * st, NULL), 1);
        s2_nv_fence_mbar_init(cg);
        s2_nv_prefetch_tensormap(cg, param(k, P_TMAP_Q));
        s2_nv_prefetch_tensormap(cg, param(k, P_TMAP_DO));
        s2_nv_if_end(cg, &init);
        s2_nv_barrier_cta(cg);
    }
    /* K and V of the tile, once */
    s2_bwd_load_tile_rows(k, s->KB, param(k, P_K), s2_bwd_slice(k, P_KS, kvh64), param(k, P_KS + 1), c32(k, s->kv_k_off), ks.kpos0, slot,
              false);
    s2_bwd_load_tile_rows(k, s->KB, param(k, P_V), s2_bwd_slice(k, P_VS, kvh64), param(k, P_VS + 1), c32(k, s->kv_v_off), ks.kpos0, slot,
              false);
    s2_nv_cp_async_commit(cg);

    /* dK and dV in column passes of kv_cols (wide head dims: the registers
     * of one pass; each pass recomputes S and dP over the whole head dim) */
    LLVMValueRef r_pass = c32(k, 0);   /* the ring's position carried on over the passes too */
    for (ks.col0 = 0; ks.col0 < s->D; ks.col0 += s->kv_cols) {
        ks.cols = s->D - ks.col0 < s->kv_cols ? s->D - ks.col0 : s->kv_cols;
        if (ks.col0 > 0) {
            s2_bwd_zero_acc(k, dk, ks.cols);
            s2_bwd_zero_acc(k, dv, ks.cols);
        }
        /* the group's query heads in increasing order: a fixed summation order */
        s2_nv_loop heads;
        /* carried: the ring's position (tma: the mbarrier phases run on over the heads' lists) */
        LLVMValueRef r_init = r_pass;
        s2_nv_loop_begin(cg, &heads, "qh", c32(k, 0), c32(k, s->group), c32(k, 1), &r_init, 1);
        LLVMValueRef r0 = heads.carried[0];
        LLVMValueRef h32 = add(k, mul(k, kvh32, c32(k, s->group)), heads.iv);
        ks.h32 = h32;
        LLVMValueRef h64 = LLVMBuildZExt(b, h32, cg->t_i64, "head");
        ks.qslice = s2_bwd_slice(k, P_QS, h64);
        ks.doslice = s2_bwd_slice(k, P_DOS, h64);
        ks.rowbase = s2_bwd_stats_base(k, h64);
        LLVMValueRef begin, end;
        s2_bwd_list_bounds(k, P_TCLASS, P_TOFFSETS, h64, param(k, P_KV_TILES), kt, &begin, &end);
        begin = add(k, begin, c32(k, 1));   /* past the header */
        end = LLVMBuildSelect(b, walk, end, begin, "end");
        ks.rev = LLVMBuildSub(b, add(k, begin, end), c32(k, 1), "rev");
        if (s->ds) {
            /* the head's dS slot base, once (its table is read only when ds is given) */
            LLVMBasicBlockRef from = LLVMGetInsertBlock(b);
            s2_nv_if on;
            s2_nv_if_begin(cg, &on, ks.ds_on, "ds_head");
            LLVMValueRef base = s2_bwd_ds_slot_base(k, h64);
            LLVMBasicBlockRef then_end = LLVMGetInsertBlock(b);
            s2_nv_if_end(cg, &on);
            ks.ds_base = LLVMBuildPhi(b, cg->t_i64, "ds_base");
            LLVMValueRef vals[2] = {c64(k, 0), base};
            LLVMBasicBlockRef bbs[2] = {from, then_end};
            LLVMAddIncoming(ks.ds_base, vals, bbs, 2);
        }
        ring_fns f = {kv_prep, kv_take, kv_issue, s->wg ? s2_bwd_wg_kv_compute : kv_compute, s->late_refill, s->tma};
        s2_bwd_pipeline(k, begin, end, s->stages, s->kv_stage0, s->kv_stage_bytes, &f, &ks, r0);
        LLVMValueRef len = LLVMBuildSub(b, end, begin, "");
        LLVMValueRef r_next = add(k, r0, LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSGT, len, c32(k, 0), ""), len,
                                                             c32(k, 0), ""));
        s2_nv_loop_end(cg, &heads, &r_next);
        r_pass = heads.result[0];

        s2_nv_cp_async_wait(cg, 0);
        s2_bwd_store_acc_cols(k, dk, ks.cols, s2_bwd_softmax_scale(k), param(k, P_DK), pass_slice(k, P_DKS, kvh64, ks.col0), param(k, P_DKS + 1), ks.kpos0, false);
        s2_bwd_store_acc_cols(k, dv, ks.cols, cf(k, 1.0), param(k, P_DV), pass_slice(k, P_DVS, kvh64, ks.col0), param(k, P_DVS + 1), ks.kpos0, false);
    }
    LLVMBuildRetVoid(b);
}
