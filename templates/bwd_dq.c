/* NAME_dq: one CTA per (query tile, head, batch) walking the forward
 * list, K and V streamed; dQ += dS·K in registers (bwd.c). */
#include "bwd_internal.h"
#include "s2c/layout.h"



void s2_bwd_dq_entry(bwd *k, dq_state *ds, LLVMValueRef e, LLVMValueRef *flags, LLVMValueRef *live)
{
    s2_cg *cg = k->cg;
    if (k->s.gather > 1) {
        int sz = (int)sizeof(s2_dev_gentry);
        for (int j = 0; j < k->s.gather; j++)
            ds->slot[j] = mul(k, s2_bwd_field_at(k, ds->entries, e, sz, 4 * j, cg->t_i32), c32(k, k->s.gbs));
        ds->kpos0 = NULL;
        if (flags)
            *flags = s2_bwd_field_at(k, ds->entries, e, sz, 16, cg->t_i32);
        if (live)
            *live = LLVMBuildZExt(k->b, s2_bwd_field_at(k, ds->entries, e, sz, 20, cg->t_i32), cg->t_i64, "");
        return;
    }
    ds->kpos0 = mul(k, s2_bwd_entry_field(k, ds->entries, e, 0, cg->t_i32), c32(k, k->s.BN));
    if (flags)
        *flags = s2_bwd_entry_field(k, ds->entries, e, 4, cg->t_i32);
    if (live)
        *live = s2_bwd_entry_field(k, ds->entries, e, 8, cg->t_i64);
}

void s2_bwd_dq_prep(bwd *k, LLVMValueRef e, prep_vals *out, void *user)
{
    dq_state *ds = user;
    dq_state keep = *ds;   /* the current entry's fields stay */
    s2_bwd_dq_entry(k, ds, e, NULL, NULL);
    bool gat = k->s.gather > 1;
    out->n = gat ? k->s.gather : 1;
    for (int j = 0; j < out->n; j++)
        out->v[j] = gat ? ds->slot[j] : ds->kpos0;
    *ds = keep;
}

void s2_bwd_dq_take(bwd *k, const prep_vals *in, void *user)
{
    dq_state *ds = user;
    if (k->s.gather > 1) {
        for (int j = 0; j < in->n; j++)
            ds->slot[j] = in->v[j];
        ds->kpos0 = NULL;
    } else {
        ds->kpos0 = in->v[0];
    }
}

static void dq_issue(bwd *k, LLVMValueRef e, LLVMValueRef soff, void *user)
{
    (void)e;   /* its key tile: s2_bwd_dq_take's */
    dq_state *ds = user;
    bwd_slots sl = {ds->slot, k->s.gather, k->s.gbs};
    const bwd_slots *slot = k->s.gather > 1 ? &sl : NULL;
    s2_bwd_load_tile(k, k->s.BN, param(k, P_K), ds->kslice, param(k, P_KS + 1), soff, ds->kpos0, slot, false);
    s2_bwd_load_tile(k, k->s.BN, param(k, P_V), ds->vslice, param(k, P_VS + 1), add(k, soff, c32(k, k->s.BN * k->s.row_bytes)),
              ds->kpos0, slot, false);
}

void s2_bwd_dq_stat(bwd *k, int n, int i, LLVMValueRef *lse2, LLVMValueRef *delta, void *user)
{
    (void)n;
    dq_state *ds = user;
    *lse2 = ds->lse2[i >> 1];
    *delta = ds->delta[i >> 1];
}

static void dq_compute(bwd *k, LLVMValueRef e, LLVMValueRef soff, void *user)
{
    dq_state *ds = user;
    int NT = k->s.BN / 8;
    LLVMValueRef vst = add(k, soff, c32(k, k->s.BN * k->s.row_bytes));
    LLVMValueRef sc[MAX_N][4], dp[MAX_N][4];
    s2_bwd_mma_abt(k, c32(k, k->s.dq_q_off), soff, 0, NT, sc);
    mask_geom mg = {false, k->s.f_sub_m_log2, k->s.f_sub_n_size, k->s.f_sub_n};
    LLVMValueRef flags, live;
    s2_bwd_dq_entry(k, ds, e, &flags, &live);
    s2_bwd_apply_mask(k, &mg, sc, NT, 0, flags, live, ds->tile_pos0, ds->kpos0, k->s.gather > 1 ? ds->slot : NULL);
    s2_bwd_mma_abt(k, c32(k, k->s.dq_do_off), vst, 0, NT, dp);
    s2_bwd_probs_and_ds(k, sc, dp, NT, s2_bwd_dq_stat, ds);
    s2_bwd_mma_xy(k, dp, NT, soff, 0, ds->acc);
}

/* The (first) query tile of a dQ CTA (NAME_dq, NAME_dqds; NAME_dqds2 with
 * `pair`, whose second tile is the one below): its head (returned), the
 * tile, the K/V slices, its forward list [*begin, *end) and, if asked, the
 * first entry of the head's class and the tile's index *rel. */
LLVMValueRef s2_bwd_dq_cta(bwd *k, dq_state *ds, bool pair, LLVMValueRef *begin, LLVMValueRef *end,
                           LLVMValueRef *first, LLVMValueRef *rel_out)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    s2_bwd_seq(k);
    LLVMValueRef head32 = s2_nv_ctaid(cg, 'y');
    LLVMValueRef h64 = LLVMBuildZExt(b, head32, cg->t_i64, "head");
    LLVMValueRef kvh64 = LLVMBuildZExt(b, LLVMBuildUDiv(b, head32, c32(k, k->s.group), ""), cg->t_i64, "kv_head");
    /* heavy tiles (late, long lists) first */
    LLVMValueRef q_tiles = param(k, P_Q_TILES);
    LLVMValueRef x = s2_nv_ctaid(cg, 'x');
    if (pair)
        x = LLVMBuildShl(b, x, c32(k, 1), "");
    LLVMValueRef rel = LLVMBuildSub(b, LLVMBuildSub(b, q_tiles, c32(k, 1), ""), x, "tile_rel");
    if (rel_out)
        *rel_out = rel;
    ds->tile_pos0 = mul(k, add(k, param(k, P_FIRST_Q_TILE), rel), c32(k, k->s.BM));
    ds->kslice = s2_bwd_slice(k, P_KS, kvh64);
    ds->vslice = s2_bwd_slice(k, P_VS, kvh64);
    ds->entries = param(k, P_ENTRIES);
    s2_bwd_list_bounds_of(k, P_CLASS, P_OFFSETS, h64, q_tiles, rel, begin, end, first);
    *end = LLVMBuildSelect(b, s2_bwd_q_tile_mine(k, ds->tile_pos0), *end, *begin, "end");
    return h64;
}

void s2_bwd_build_dq(bwd *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    dq_state ds = {0};
    LLVMValueRef begin, end;
    LLVMValueRef h64 = s2_bwd_dq_cta(k, &ds, false, &begin, &end, NULL, NULL);
    LLVMValueRef acc[MAX_D / 8][4];
    s2_bwd_new_acc(k, acc, "dq");
    ds.acc = acc;

    /* Q and dO of the tile: one group, older than the ring's */
    s2_bwd_load_tile_rows(k, k->s.BM, param(k, P_Q), s2_bwd_slice(k, P_QS, h64), param(k, P_QS + 1), c32(k, k->s.dq_q_off), ds.tile_pos0,
              NULL, true);
    s2_bwd_load_tile_rows(k, k->s.BM, param(k, P_DO), s2_bwd_slice(k, P_DOS, h64), param(k, P_DOS + 1), c32(k, k->s.dq_do_off), ds.tile_pos0,
              NULL, true);
    s2_nv_cp_async_commit(cg);
    /* the thread's two rows' lse2 and delta (0 for rows that do not exist:
     * their Q and dO are zero, so P stays finite and dS is 0) */
    LLVMValueRef rowbase = s2_bwd_stats_base(k, h64);
    for (int hr = 0; hr < 2; hr++) {
        LLVMValueRef r = add(k, LLVMBuildShl(b, k->warp, c32(k, 4), ""), add(k, k->g, c32(k, 8 * hr)));
        LLVMValueRef qrow;
        LLVMValueRef ok = s2_bwd_tile_row(k, ds.tile_pos0, true, r, &qrow);
        LLVMValueRef idx = LLVMBuildSelect(b, ok, add(k, rowbase, sext64(k, qrow)), rowbase, "");
        ds.lse2[hr] = LLVMBuildSelect(b, ok, s2_nv_load_global_f32(cg, param(k, P_LSE2), idx, 4), cf(k, 0.0), "");
        ds.delta[hr] = LLVMBuildSelect(b, ok, s2_nv_load_global_f32(cg, param(k, P_DELTA), idx, 4), cf(k, 0.0), "");
    }
    ring_fns f = {s2_bwd_dq_prep, s2_bwd_dq_take, dq_issue, k->s.wg ? s2_bwd_wg_dq_compute : dq_compute, false, false};
    s2_bwd_pipeline(k, begin, end, k->s.stages, k->s.dq_stage0, k->s.dq_stage_bytes, &f, &ds, NULL);
    s2_bwd_store_acc(k, acc, s2_bwd_softmax_scale(k), param(k, P_DQ), s2_bwd_slice(k, P_DQS, h64), param(k, P_DQS + 1), ds.tile_pos0, true);
    LLVMBuildRetVoid(b);
}
