/* NAME_dqds and NAME_dqds2: dQ from the dS tiles the dK/dV kernel wrote
 * to the workspace, one tile product per entry (bwd.c). */
#include "bwd_internal.h"

/* ---- NAME_dqds: dq = scale·dS·K from the dS tiles of the dK/dV kernel ---- */

static void dqds_issue(bwd *k, LLVMValueRef e, LLVMValueRef soff, void *user)
{
    dq_state *ds = user;
    LLVMBuilderRef b = k->b;
    s2_bwd_load_tile(k, k->s.BN, param(k, P_K), ds->kslice, param(k, P_KS + 1), soff, ds->kpos0, NULL, false);
    /* the dS tile: a plain copy (it is stored in the layout the wgmma reads);
     * zeros for a key tile past the sequence's keys, which NAME_dkdv skips */
    LLVMValueRef size = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, ds->kpos0, k->kv_len, ""), c32(k, 16),
                                        c32(k, 0), "ds_size");
    LLVMValueRef src = mul(k, add(k, ds->ds_base, sext64(k, e)), c64(k, DS_TILE_BYTES));
    LLVMValueRef dst = add(k, soff, c32(k, k->s.BN * k->s.row_bytes));
    LLVMTypeRef i8 = LLVMInt8TypeInContext(k->cg->llctx);
    for (int it = 0; it * k->s.threads * 16 < DS_TILE_BYTES; it++) {
        LLVMValueRef off = LLVMBuildShl(b, add(k, k->tid, c32(k, it * k->s.threads)), c32(k, 4), "");
        LLVMValueRef g = add(k, src, LLVMBuildZExt(b, off, k->cg->t_i64, ""));
        s2_nv_cp_async_16(k->cg, s2_nv_smem_at(k->cg, add(k, dst, off)),
                          LLVMBuildInBoundsGEP2(b, i8, param(k, P_DS), &g, 1, ""), size);
    }
}

void s2_bwd_build_dqds(bwd *k)
{
    LLVMBuilderRef b = k->b;
    dq_state ds = {0};
    LLVMValueRef begin, end, first;
    LLVMValueRef h64 = s2_bwd_dq_cta(k, &ds, false, &begin, &end, &first, NULL);
    ds.ds_base = LLVMBuildSub(b, s2_bwd_ds_slot_base(k, h64), sext64(k, first), "ds_base");
    LLVMValueRef acc[MAX_D / 8][4];
    s2_bwd_new_acc(k, acc, "dq");
    ds.acc = acc;
    ring_fns f = {s2_bwd_dq_prep, s2_bwd_dq_take, dqds_issue, s2_bwd_wg_dqds_compute, false, false};
    s2_bwd_pipeline(k, begin, end, k->s.dqds_stages, 0, k->s.dqds_stage_bytes, &f, &ds, NULL);
    s2_bwd_store_acc(k, acc, s2_bwd_softmax_scale(k), param(k, P_DQ), s2_bwd_slice(k, P_DQS, h64), param(k, P_DQS + 1), ds.tile_pos0, true);
    LLVMBuildRetVoid(b);
}

/* ---- NAME_dqds2: two query tiles per CTA, each K tile read once for both ----
 *
 * NAME_dqds reads per entry an 8 KB dS tile from DRAM and a 16 KB K tile
 * from L2, and the neighbouring query tile reads the same K tiles for all
 * but a few of its entries (L2-bound, run 82).  Here one
 * CTA of two warpgroups takes query tiles rel0 and rel0 - 1 of a head and
 * walks the union of their (increasing) forward lists: each union slot
 * loads the K tile once and each tile's dS tile (zero-filled where that
 * tile has no such entry), and each warpgroup does its own tile's product.
 * The union is built in shared memory at the start: one list entry per
 * thread (lists of at most S2_BWD_DQDS2_MAX_LIST entries; the runtime
 * takes NAME_dqds otherwise), each entry's place found by a binary search
 * in the other list and a count of the common entries before it. */

/* the union arrays (int32, after the ring): keys of list A and of list B,
 * A's common-entry counts (n0 + 1, padded), the warp totals, then per
 * union slot its key tile and the two entries */
enum { U_N = S2_BWD_DQDS2_MAX_LIST, U_KA = 0, U_KB = 4 * U_N, U_CA = 8 * U_N, U_WT = U_CA + 4 * (U_N + 8),
       U_KT = U_WT + 4 * (S2_BWD_DQDS2_THREADS / S2_WARP), U_E0 = U_KT + 8 * U_N, U_E1 = U_E0 + 8 * U_N,
       U_END = U_E1 + 8 * U_N };
_Static_assert((int)U_END == (int)S2_BWD_DQDS2_UNION_BYTES, "the union's layout and its size in attention.h");

static LLVMValueRef lds_i32(bwd *k, int off, LLVMValueRef idx)
{
    LLVMValueRef ld = LLVMBuildLoad2(k->b, k->cg->t_i32,
                                     s2_nv_smem_at(k->cg, add(k, c32(k, off), LLVMBuildShl(k->b, idx, c32(k, 2), ""))), "");
    LLVMSetAlignment(ld, 4);
    return ld;
}

static void sts_i32(bwd *k, int off, LLVMValueRef idx, LLVMValueRef v)
{
    LLVMValueRef st =
        LLVMBuildStore(k->b, v, s2_nv_smem_at(k->cg, add(k, c32(k, off), LLVMBuildShl(k->b, idx, c32(k, 2), ""))));
    LLVMSetAlignment(st, 4);
}

/* #{a[0..n) < x} for a in increasing order in shared memory (n <= 256),
 * by halving steps without branches */
static LLVMValueRef lower_bound_smem(bwd *k, int arr, LLVMValueRef n, LLVMValueRef x)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef lo = c32(k, 0);
    for (int step = S2_BWD_DQDS2_MAX_LIST; step >= 1; step >>= 1) {
        LLVMValueRef probe = add(k, lo, c32(k, step));
        LLVMValueRef in = LLVMBuildICmp(b, LLVMIntSLE, probe, n, "");
        LLVMValueRef v = lds_i32(k, arr, LLVMBuildSelect(b, in, LLVMBuildSub(b, probe, c32(k, 1), ""), c32(k, 0), ""));
        LLVMValueRef go = LLVMBuildAnd(b, in, LLVMBuildICmp(b, LLVMIntSLT, v, x, ""), "");
        lo = LLVMBuildSelect(b, go, probe, lo, "lb");
    }
    return lo;
}

/* The thread's count of `flag` over the threads below it, across the CTA
 * (every thread calls it; ends with the warp totals published) and the
 * CTA's total. */
static LLVMValueRef cta_excl_count(bwd *k, LLVMValueRef flag, LLVMValueRef *total)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    LLVMValueRef bal = s2_nv_ballot(cg, flag);
    LLVMValueRef mine = s2_nv_popc(cg, LLVMBuildAnd(b, bal, s2_nv_lanemask_lt(cg), ""));
    LLVMValueRef w = LLVMBuildLShr(b, k->tid, c32(k, S2_WARP_LOG2), "cta_warp");
    s2_nv_if first;
    s2_nv_if_begin(cg, &first, LLVMBuildICmp(b, LLVMIntEQ, k->lane, c32(k, 0), ""), "warp_total");
    sts_i32(k, k->s.dqds2_u_off + U_WT, w, s2_nv_popc(cg, bal));
    s2_nv_if_end(cg, &first);
    s2_nv_barrier_cta(cg);
    LLVMValueRef below = c32(k, 0), all = c32(k, 0);
    for (int j = 0; j < S2_BWD_DQDS2_THREADS / S2_WARP; j++) {
        LLVMValueRef t = lds_i32(k, k->s.dqds2_u_off + U_WT, c32(k, j));
        below = add(k, below, LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntULT, c32(k, j), w, ""), t, c32(k, 0), ""));
        all = add(k, all, t);
    }
    *total = all;
    return add(k, below, mine);
}

static void dqds2_prep(bwd *k, LLVMValueRef u, prep_vals *out, void *user)
{
    (void)user;
    out->n = 3;
    out->v[0] = lds_i32(k, k->s.dqds2_u_off + U_KT, u);
    out->v[1] = lds_i32(k, k->s.dqds2_u_off + U_E0, u);
    out->v[2] = lds_i32(k, k->s.dqds2_u_off + U_E1, u);
}

static void dqds2_take(bwd *k, const prep_vals *in, void *user)
{
    dq_state *ds = user;
    ds->kpos0 = mul(k, in->v[0], c32(k, k->s.BN));
    ds->pe[0] = in->v[1];
    ds->pe[1] = in->v[2];
}

static void dqds2_issue(bwd *k, LLVMValueRef u, LLVMValueRef soff, void *user)
{
    (void)u;
    dq_state *ds = user;
    LLVMBuilderRef b = k->b;
    s2_bwd_load_tile(k, k->s.BN, param(k, P_K), ds->kslice, param(k, P_KS + 1), soff, ds->kpos0, NULL, false);
    LLVMValueRef has0 = LLVMBuildICmp(b, LLVMIntSGE, ds->pe[0], c32(k, 0), "");
    LLVMValueRef any = LLVMBuildSelect(b, has0, ds->pe[0], ds->pe[1], "");   /* one of them is an entry */
    LLVMTypeRef i8 = LLVMInt8TypeInContext(k->cg->llctx);
    for (int j = 0; j < 2; j++) {
        LLVMValueRef has = LLVMBuildICmp(b, LLVMIntSGE, ds->pe[j], c32(k, 0), "");
        LLVMValueRef e = LLVMBuildSelect(b, has, ds->pe[j], any, "");
        LLVMValueRef src = mul(k, add(k, ds->ds_base, sext64(k, e)), c64(k, DS_TILE_BYTES));
        LLVMValueRef dst = add(k, soff, c32(k, k->s.BN * k->s.row_bytes + j * DS_TILE_BYTES));
        /* absent, or a key tile past the sequence's keys (not written): zeros */
        has = LLVMBuildAnd(b, has, LLVMBuildICmp(b, LLVMIntSLT, ds->kpos0, k->kv_len, ""), "");
        LLVMValueRef size = LLVMBuildSelect(b, has, c32(k, 16), c32(k, 0), "");
        for (int it = 0; it * S2_BWD_DQDS2_THREADS * 16 < DS_TILE_BYTES; it++) {
            LLVMValueRef off = LLVMBuildShl(b, add(k, k->tid, c32(k, it * S2_BWD_DQDS2_THREADS)), c32(k, 4), "");
            LLVMValueRef g = add(k, src, LLVMBuildZExt(b, off, k->cg->t_i64, ""));
            s2_nv_cp_async_16(k->cg, s2_nv_smem_at(k->cg, add(k, dst, off)),
                              LLVMBuildInBoundsGEP2(b, i8, param(k, P_DS), &g, 1, ""), size);
        }
    }
}

void s2_bwd_build_dqds2(bwd *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    dq_state ds = {0};
    /* the warpgroup (warp-uniform, so that its dS descriptor is), and the
     * warp within it for the fragment layouts */
    LLVMValueRef wg = s2_nv_shfl_idx_i32(cg, LLVMBuildLShr(b, k->tid, c32(k, S2_WARPGROUP_LOG2), ""), 0);
    LLVMValueRef cta_warp = k->warp;
    k->warp = LLVMBuildAnd(b, cta_warp, c32(k, 3), "wg_warp");
    ds.a_shift = mul(k, wg, c32(k, DS_TILE_BYTES));

    LLVMValueRef b0, e0, b1, e1, first, rel0;
    LLVMValueRef h64 = s2_bwd_dq_cta(k, &ds, true, &b0, &e0, &first, &rel0);
    LLVMValueRef rel1 = LLVMBuildSub(b, rel0, c32(k, 1), "rel1");
    LLVMValueRef has1 = LLVMBuildICmp(b, LLVMIntSGE, rel1, c32(k, 0), "has1");
    LLVMValueRef pos0 = ds.tile_pos0;
    /* no second tile: rows past kv_len, which the stores skip */
    LLVMValueRef pos1 = LLVMBuildSelect(b, has1, LLVMBuildSub(b, pos0, c32(k, k->s.BM), ""), k->kv_len, "");
    s2_bwd_list_bounds_of(k, P_CLASS, P_OFFSETS, h64, param(k, P_Q_TILES), LLVMBuildSelect(b, has1, rel1, rel0, ""), &b1, &e1,
                   NULL);
    LLVMValueRef n0 = LLVMBuildSub(b, e0, b0, "n0");
    has1 = LLVMBuildAnd(b, has1, s2_bwd_q_tile_mine(k, pos1), "");
    LLVMValueRef n1 = LLVMBuildSelect(b, has1, LLVMBuildSub(b, e1, b1, ""), c32(k, 0), "n1");
    ds.ds_base = LLVMBuildSub(b, s2_bwd_ds_slot_base(k, h64), sext64(k, first), "ds_base");

    /* the union of the two lists, in increasing key order */
    int u = k->s.dqds2_u_off;
    LLVMValueRef t = k->tid;
    LLVMValueRef inA = LLVMBuildICmp(b, LLVMIntSLT, t, n0, ""), inB = LLVMBuildICmp(b, LLVMIntSLT, t, n1, "");
    LLVMValueRef ea = add(k, b0, t), eb = add(k, b1, t);
    s2_nv_if la, lb;
    s2_nv_if_begin(cg, &la, inA, "key_a");
    sts_i32(k, u + U_KA, t, s2_bwd_entry_field(k, ds.entries, ea, 0, cg->t_i32));
    s2_nv_if_end(cg, &la);
    s2_nv_if_begin(cg, &lb, inB, "key_b");
    sts_i32(k, u + U_KB, t, s2_bwd_entry_field(k, ds.entries, eb, 0, cg->t_i32));
    s2_nv_if_end(cg, &lb);
    s2_nv_barrier_cta(cg);
    /* A's entries: place = t + #{B < x} - #{common entries before t} */
    LLVMValueRef xa = lds_i32(k, u + U_KA, LLVMBuildSelect(b, inA, t, c32(k, 0), ""));
    LLVMValueRef lbB = lower_bound_smem(k, u + U_KB, n1, xa);
    LLVMValueRef hitB = LLVMBuildAnd(
        b, LLVMBuildAnd(b, inA, LLVMBuildICmp(b, LLVMIntSLT, lbB, n1, ""), ""),
        LLVMBuildICmp(b, LLVMIntEQ, lds_i32(k, u + U_KB, LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, lbB, n1, ""), lbB, c32(k, 0), "")), xa, ""),
        "common");
    LLVMValueRef ncommon;
    LLVMValueRef cbefore = cta_excl_count(k, hitB, &ncommon);
    s2_nv_if wa;
    s2_nv_if_begin(cg, &wa, inA, "place_a");
    {
        LLVMValueRef at = LLVMBuildSub(b, add(k, t, lbB), cbefore, "");
        sts_i32(k, u + U_CA, t, cbefore);
        sts_i32(k, u + U_KT, at, xa);
        sts_i32(k, u + U_E0, at, ea);
        sts_i32(k, u + U_E1, at, LLVMBuildSelect(b, hitB, add(k, b1, lbB), c32(k, -1), ""));
    }
    s2_nv_if_end(cg, &wa);
    s2_nv_if lastc;
    s2_nv_if_begin(cg, &lastc, LLVMBuildICmp(b, LLVMIntEQ, t, c32(k, 0), ""), "ca_end");
    sts_i32(k, u + U_CA, n0, ncommon);
    s2_nv_if_end(cg, &lastc);
    s2_nv_barrier_cta(cg);
    /* B's entries A lacks: place = t + #{A < y} - #{common entries below y} */
    s2_nv_if wb;
    s2_nv_if_begin(cg, &wb, inB, "place_b");
    {
        LLVMValueRef y = lds_i32(k, u + U_KB, t);
        LLVMValueRef lbA = lower_bound_smem(k, u + U_KA, n0, y);
        LLVMValueRef inrange = LLVMBuildICmp(b, LLVMIntSLT, lbA, n0, "");
        LLVMValueRef hitA = LLVMBuildAnd(
            b, inrange,
            LLVMBuildICmp(b, LLVMIntEQ, lds_i32(k, u + U_KA, LLVMBuildSelect(b, inrange, lbA, c32(k, 0), "")), y, ""), "");
        s2_nv_if only;
        s2_nv_if_begin(cg, &only, LLVMBuildNot(b, hitA, ""), "b_only");
        LLVMValueRef at = LLVMBuildSub(b, add(k, t, lbA), lds_i32(k, u + U_CA, lbA), "");
        sts_i32(k, u + U_KT, at, y);
        sts_i32(k, u + U_E0, at, c32(k, -1));
        sts_i32(k, u + U_E1, at, eb);
        s2_nv_if_end(cg, &only);
    }
    s2_nv_if_end(cg, &wb);
    s2_nv_barrier_cta(cg);
    LLVMValueRef nu = LLVMBuildSub(b, add(k, n0, n1), ncommon, "n_union");

    LLVMValueRef acc[MAX_D / 8][4];
    s2_bwd_new_acc(k, acc, "dq");
    ds.acc = acc;
    ring_fns f = {dqds2_prep, dqds2_take, dqds2_issue, s2_bwd_wg_dqds_compute, false, false};
    s2_bwd_pipeline(k, c32(k, 0), nu, k->s.dqds_stages, 0, k->s.dqds2_stage_bytes, &f, &ds, NULL);
    LLVMValueRef mypos = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, wg, c32(k, 0), ""), pos0, pos1, "tile_pos0");
    s2_bwd_store_acc(k, acc, s2_bwd_softmax_scale(k), param(k, P_DQ), s2_bwd_slice(k, P_DQS, h64), param(k, P_DQS + 1), mypos, true);
    LLVMBuildRetVoid(b);
}
