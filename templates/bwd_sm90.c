/* The entry bodies of the S2 attention backward on sm_90a: wgmma instead of
 * mma.sync, one warpgroup per CTA (block_m 64, 4 warps), same kernels, same
 * parameters, same schedules and the same cp.async ring as templates/bwd*.c
 * (which calls these when the spec asks for bwd_wgmma).  Tiles are stored
 * in the 128-byte-swizzle blocked layout (bwd_common.c tile_off), so that wgmma
 * reads them through descriptors (PTX ISA 9.7.15.5.1.2, canonical layouts):
 *
 *   NAME_dkdv, per query tile of the transposed list (key tile resident):
 *     Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ          wgmma SS, K-major both, m64 n64
 *     Pᵀ = exp2(Sᵀ·scale_log2 - lse2), dSᵀ = Pᵀ∘(dPᵀ - delta)  (columns' stats)
 *     dV += Pᵀ·dO, dK += dSᵀ·Q        wgmma RS: Pᵀ, dSᵀ from the accumulator
 *                                      registers (FA3 register-P), dO and Q
 *                                      N-major through trans-b
 *   NAME_dq, per key tile of the forward list (query tile resident):
 *     S = Q·Kᵀ, dP = dO·Vᵀ (SS), P, dS with the rows' stats, dQ += dS·K (RS).
 *
 * The accumulator layout of m64nN is the m16n8 C layout per warp with warp w
 * owning rows 16w.. (CUTLASS CLayout_64xN), the layout the mma.sync bodies use, so the
 * masking and the P / dS math of bwd_common.c apply unchanged.  dK, dV and dQ are
 * each summed by one thread in list order: deterministic, as the sm_80 path.
 * Both products of an entry are issued before the first wait, so the mask
 * and exponentials of Sᵀ overlap the dPᵀ wgmma; in dK/dV, dV += Pᵀ·dO is
 * issued before dPᵀ is waited for, so dSᵀ is computed under it. */
#include "bwd_internal.h"
#include "s2c/layout.h"

enum { WG_ROWS = 64, MAX_COLS = 128 };

/* wgmma descriptors of a tile at shared byte offset off: K-major (the head
 * dim is the reduction: S, dP) or N-major over `rows` rows (P·Y, dS·Y). */
static LLVMValueRef desc_kmajor(bwd *k, LLVMValueRef off)
{
    return s2_nv_wgmma_desc(k->cg, add(k, s2_nv_smem_base32(k->cg), off), 16, 1024);
}

static LLVMValueRef desc_nmajor(bwd *k, LLVMValueRef off, int rows)
{
    return s2_nv_wgmma_desc(k->cg, add(k, s2_nv_smem_base32(k->cg), off), rows * 128, 1024);
}

/* k16 steps over the head dim of a K-major tile of `rows` rows: +32 bytes
 * inside a 64-column block, the next block after rows·128 bytes. */
static void kmajor_steps(int D, int rows, int *step)
{
    for (int j = 0; j < D / 16; j++)
        step[j] = ((j / 4) * rows * 128 + (j % 4) * 32) >> 4;
}

/* Issue acc = X·Yᵀ (m64 n`rows`, reduction over D): X the 64-row tile at x,
 * Y the `rows`-row tile at y.  One committed group, not waited for. */
static void issue_abt(bwd *k, LLVMValueRef x, LLVMValueRef y, int rows, LLVMValueRef *acc)
{
    int as[MAX_D / 16], bs[MAX_D / 16];
    kmajor_steps(k->s.D, WG_ROWS, as);
    kmajor_steps(k->s.D, rows, bs);
    for (int i = 0; i < rows / 2; i++)
        acc[i] = LLVMGetUndef(k->cg->t_f32);
    s2_nv_wgmma_ss(k->cg, k->s.dt, rows, k->s.D / 16, desc_kmajor(k, x), as, desc_kmajor(k, y), bs, false, false, acc);
}

/* Issue acc += A·Y (m64 n`cols`: Y's columns from col0, a multiple of 64;
 * reduction over the `rows` rows of tile y, read N-major), A packed from registers. */
static void issue_xy_cols(bwd *k, LLVMValueRef (*a)[4], LLVMValueRef y, int rows, int col0, int cols, LLVMValueRef *acc)
{
    int vs[MAX_COLS / 16];
    for (int j = 0; j < rows / 16; j++)
        vs[j] = (j * 16 * 128) >> 4;
    if (col0)   /* its first 64-column block */
        y = add(k, y, c32(k, col0 / 64 * rows * 128));
    s2_nv_wgmma_rs(k->cg, k->s.dt, cols, rows / 16, a, desc_nmajor(k, y, rows), vs, true, acc);
}

static void issue_xy(bwd *k, LLVMValueRef (*a)[4], LLVMValueRef y, int rows, LLVMValueRef *acc)
{
    issue_xy_cols(k, a, y, rows, 0, k->s.D, acc);
}

static void acc_to_tiles(const LLVMValueRef *acc, int ntiles, LLVMValueRef t[][4])
{
    for (int n = 0; n < ntiles; n++)
        for (int i = 0; i < 4; i++)
            t[n][i] = acc[4 * n + i];
}

/* C-layout values as wgmma A registers: k-step j = column tiles 2j, 2j+1
 * (the RS A map is the m16n8k16 one per warp: CUTLASS ALayout_64x16). */
static void pack_a(bwd *k, LLVMValueRef x[][4], int ntiles, LLVMValueRef (*a)[4])
{
    for (int j = 0; j < ntiles / 2; j++) {
        a[j][0] = s2_nv_pack2(k->cg, k->s.dt, x[2 * j][0], x[2 * j][1]);
        a[j][1] = s2_nv_pack2(k->cg, k->s.dt, x[2 * j][2], x[2 * j][3]);
        a[j][2] = s2_nv_pack2(k->cg, k->s.dt, x[2 * j + 1][0], x[2 * j + 1][1]);
        a[j][3] = s2_nv_pack2(k->cg, k->s.dt, x[2 * j + 1][2], x[2 * j + 1][3]);
    }
}

/* s2_bwd_probs_and_ds in two halves, so that P can be made before dP lands:
 * P = exp2(S·scale_log2 - lse2), then dS = P ∘ (dP - delta). */
static void probs(bwd *k, LLVMValueRef sc[][4], int ntiles, stat_fn stat, void *user)
{
    for (int n = 0; n < ntiles; n++)
        for (int i = 0; i < 4; i++) {
            LLVMValueRef l2, dl;
            stat(k, n, i, &l2, &dl, user);
            sc[n][i] = s2_nv_ex2_approx(k->cg, s2_nv_fma(k->cg, sc[n][i], k->scale_log2, LLVMBuildFNeg(k->b, l2, "")));
        }
}

static void dsoft(bwd *k, LLVMValueRef sc[][4], LLVMValueRef dp[][4], int ntiles, stat_fn stat, void *user)
{
    for (int n = 0; n < ntiles; n++)
        for (int i = 0; i < 4; i++) {
            LLVMValueRef l2, dl;
            stat(k, n, i, &l2, &dl, user);
            dp[n][i] = LLVMBuildFMul(k->b, sc[n][i], LLVMBuildFSub(k->b, dp[n][i], dl, ""), "ds");
        }
}

/* The [cols/8][4] accumulator allocas as the flat wgmma register list, and back. */
static void acc_load_cols(bwd *k, LLVMValueRef (*slots)[4], int cols, LLVMValueRef *acc)
{
    for (int dn = 0; dn < cols / 8; dn++)
        for (int i = 0; i < 4; i++)
            acc[4 * dn + i] = LLVMBuildLoad2(k->b, k->cg->t_f32, slots[dn][i], "");
}

static void acc_load(bwd *k, LLVMValueRef (*slots)[4], LLVMValueRef *acc) { acc_load_cols(k, slots, k->s.D, acc); }

static void acc_store_cols(bwd *k, LLVMValueRef (*slots)[4], int cols, const LLVMValueRef *acc)
{
    for (int dn = 0; dn < cols / 8; dn++)
        for (int i = 0; i < 4; i++)
            LLVMBuildStore(k->b, acc[4 * dn + i], slots[dn][i]);
}

static void acc_store(bwd *k, LLVMValueRef (*slots)[4], const LLVMValueRef *acc) { acc_store_cols(k, slots, k->s.D, acc); }

/* The dS tile of a transposed entry (C layout, packed as wgmma A registers
 * da[4][4]) to workspace slot `slot` (when ks->ds_on), through shared memory;
 * bwd_ds_slot loads the slot of transposed record e (0 when off). */
static LLVMValueRef bwd_ds_slot(bwd *k, const kv_state *ks, LLVMValueRef e);
static void bwd_ds_store(bwd *k, const kv_state *ks, LLVMValueRef slot, LLVMValueRef (*da)[4]);

void s2_bwd_wg_kv_compute(bwd *k, LLVMValueRef e, LLVMValueRef soff, void *user)
{
    kv_state *ks = user;
    e = s2_bwd_kv_entry(k, ks, e);
    s2_cg *cg = k->cg;
    const bwd_shape *s = &k->s;
    /* the dS slot first: its load is in flight under the products */
    LLVMValueRef ds_slot = s->ds ? bwd_ds_slot(k, ks, e) : NULL;
    int BM = s->BM, NT = BM / 8, no = ks->cols / 2;   /* this pass's columns of dK and dV */
    LLVMValueRef qt = soff, dot = add(k, soff, c32(k, BM * s->row_bytes));
    ks->stats = add(k, soff, c32(k, s->kv_lse_off));
    ks->chunk0 = 0;
    LLVMValueRef flags = s2_bwd_entry_field(k, ks->entries, e, 4, cg->t_i32);
    LLVMValueRef live = s2_bwd_entry_field(k, ks->entries, e, 8, cg->t_i64);
    LLVMValueRef qpos0 = mul(k, s2_bwd_entry_field(k, ks->entries, e, 0, cg->t_i32), c32(k, BM));

    LLVMValueRef sacc[MAX_COLS / 2], dacc[MAX_COLS / 2], sc[MAX_COLS / 8][4], dp[MAX_COLS / 8][4];
    if (s->tma) {
        /* the stage's Q and dO (TMA): phase (ring position / stages) & 1 */
        LLVMValueRef par = s2_kb_ring_parity(&k->kb, k->ring_pos, s->stages, "phase");
        s2_nv_mbar_wait(cg, s2_bwd_kv_bar(k, soff), par);
    }
    issue_abt(k, c32(k, s->kv_k_off), qt, BM, sacc);
    issue_abt(k, c32(k, s->kv_v_off), dot, BM, dacc);
    /* the ring's refill (Q, dO and the stats of a later entry) under S and dP */
    s2_bwd_ring_refill(k);
    s2_nv_wgmma_wait(cg, 1, sacc, BM / 2);
    acc_to_tiles(sacc, NT, sc);
    mask_geom mg = {true, s->t_sub_n_log2, s->t_sub_m_size, s->t_sub_n};
    s2_bwd_apply_mask(k, &mg, sc, NT, 0, flags, live, ks->kpos0, qpos0, NULL);
    /* Pᵀ only needs Sᵀ: dV += Pᵀ·dO goes to the tensor cores while dSᵀ is
     * computed from dPᵀ (waited for under it: 1 group pending = dV) */
    probs(k, sc, NT, s2_bwd_kv_stat, ks);
    LLVMValueRef pa[MAX_COLS / 16][4], da[MAX_COLS / 16][4];
    pack_a(k, sc, NT, pa);
    LLVMValueRef dv[MAX_D / 2], dk[MAX_D / 2];
    acc_load_cols(k, ks->dv, ks->cols, dv);
    issue_xy_cols(k, pa, dot, BM, ks->col0, ks->cols, dv);
    s2_nv_wgmma_wait(cg, 1, dacc, BM / 2);
    acc_to_tiles(dacc, NT, dp);
    dsoft(k, sc, dp, NT, s2_bwd_kv_stat, ks);
    pack_a(k, dp, NT, da);
    acc_load_cols(k, ks->dk, ks->cols, dk);
    issue_xy_cols(k, da, qt, BM, ks->col0, ks->cols, dk);
    if (s->ds)
        bwd_ds_store(k, ks, ds_slot, da);
    s2_nv_wgmma_wait(cg, 1, dv, no);
    acc_store_cols(k, ks->dv, ks->cols, dv);
    s2_nv_wgmma_wait(cg, 0, dk, no);
    acc_store_cols(k, ks->dk, ks->cols, dk);
}

void s2_bwd_wg_dq_compute(bwd *k, LLVMValueRef e, LLVMValueRef soff, void *user)
{
    dq_state *ds = user;
    s2_cg *cg = k->cg;
    const bwd_shape *s = &k->s;
    int BN = s->BN, NT = BN / 8;
    LLVMValueRef kt = soff, vt = add(k, soff, c32(k, BN * s->row_bytes));
    LLVMValueRef sacc[MAX_COLS / 2], dacc[MAX_COLS / 2], sc[MAX_COLS / 8][4], dp[MAX_COLS / 8][4];
    issue_abt(k, c32(k, s->dq_q_off), kt, BN, sacc);
    issue_abt(k, c32(k, s->dq_do_off), vt, BN, dacc);
    s2_nv_wgmma_wait(cg, 1, sacc, BN / 2);
    acc_to_tiles(sacc, NT, sc);
    mask_geom mg = {false, s->f_sub_m_log2, s->f_sub_n_size, s->f_sub_n};
    LLVMValueRef flags, live;
    s2_bwd_dq_entry(k, ds, e, &flags, &live);
    s2_bwd_apply_mask(k, &mg, sc, NT, 0, flags, live, ds->tile_pos0, ds->kpos0, s->gather > 1 ? ds->slot : NULL);
    /* P from S while dP is still on the tensor cores */
    probs(k, sc, NT, s2_bwd_dq_stat, ds);
    s2_nv_wgmma_wait(cg, 0, dacc, BN / 2);
    acc_to_tiles(dacc, NT, dp);
    dsoft(k, sc, dp, NT, s2_bwd_dq_stat, ds);
    LLVMValueRef da[MAX_COLS / 16][4];
    pack_a(k, dp, NT, da);
    LLVMValueRef acc[MAX_D / 2];
    acc_load(k, ds->acc, acc);
    issue_xy(k, da, kt, BN, acc);
    s2_nv_wgmma_wait(cg, 0, acc, s->D / 2);
    acc_store(k, ds->acc, acc);
}

static LLVMValueRef bwd_ds_slot(bwd *k, const kv_state *ks, LLVMValueRef e)
{
    LLVMBuilderRef b = k->b;
    /* without ds the map is null: read the entries array instead (valid, ignored) */
    LLVMValueRef table = LLVMBuildSelect(b, ks->ds_on, param(k, P_DS_MAP), ks->entries, "");
    LLVMValueRef map = LLVMBuildLoad2(b, k->cg->t_i32, LLVMBuildInBoundsGEP2(b, k->cg->t_i32, table,
                                      (LLVMValueRef[]){sext64(k, e)}, 1, ""), "ds_entry");
    LLVMSetAlignment(map, 4);
    return add(k, ks->ds_base, sext64(k, map));
}

/* The thread's dSᵀ values (keys 16·warp + g (+8), queries 16j + 2t (+1)
 * (+8), packed as da[j]) go out query-major: stmatrix.trans writes the
 * 64 x 64 tile to shared memory as rows of 64 keys (128 bytes, 16-byte
 * chunk c at c ^ (q & 7): the 128-byte-swizzle K-major layout that
 * NAME_dqds hands to wgmma as its A operand), then the CTA copies the 8 KB
 * to the slot in 16-byte pieces.  Called under the dK product; the
 * pipeline's barrier at the next entry orders the reads before the next
 * tile's writes. */
static void bwd_ds_store(bwd *k, const kv_state *ks, LLVMValueRef slot, LLVMValueRef (*da)[4])
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    s2_nv_if on;
    s2_nv_if_begin(cg, &on, ks->ds_on, "ds_store");
    /* lane l addresses row (l & 7) of matrix l >> 3: matrices 1 and 3 hold
     * keys +8 (chunk +1), 2 and 3 queries +8 */
    LLVMValueRef i = LLVMBuildAnd(b, k->lane, c32(k, 7), "");
    LLVMValueRef m = LLVMBuildLShr(b, k->lane, c32(k, 3), "");
    LLVMValueRef chunk = add(k, LLVMBuildShl(b, k->warp, c32(k, 1), ""), LLVMBuildAnd(b, m, c32(k, 1), ""));
    LLVMValueRef q = add(k, LLVMBuildShl(b, LLVMBuildLShr(b, m, c32(k, 1), ""), c32(k, 3), ""), i);
    LLVMValueRef lane_off = add(k, LLVMBuildShl(b, q, c32(k, 7), ""),
                                LLVMBuildShl(b, LLVMBuildXor(b, chunk, i, ""), c32(k, 4), ""));
    for (int j = 0; j < DS_TILE / 16; j++)
        s2_nv_stmatrix_x4(cg, s2_nv_smem_at(cg, add(k, lane_off, c32(k, k->s.kv_ds_off + j * 16 * 128))), true, da[j]);
    s2_nv_barrier_cta(cg);
    LLVMValueRef base = mul(k, slot, c64(k, DS_TILE_BYTES));
    LLVMTypeRef i8 = LLVMInt8TypeInContext(cg->llctx), v4 = LLVMVectorType(cg->t_i32, 4);
    for (int it = 0; it * k->s.threads * 16 < DS_TILE_BYTES; it++) {
        LLVMValueRef off = LLVMBuildShl(b, add(k, k->tid, c32(k, it * k->s.threads)), c32(k, 4), "");
        LLVMValueRef v = LLVMBuildLoad2(b, v4, s2_nv_smem_at(cg, add(k, c32(k, k->s.kv_ds_off), off)), "");
        LLVMSetAlignment(v, 16);
        LLVMValueRef g = add(k, base, LLVMBuildZExt(b, off, cg->t_i64, ""));
        LLVMValueRef st = LLVMBuildStore(b, v, LLVMBuildInBoundsGEP2(b, i8, param(k, P_DS), &g, 1, ""));
        LLVMSetAlignment(st, 16);
    }
    s2_nv_if_end(cg, &on);
}

/* NAME_dqds: dQ += dS·K, dS the stage's tile after K (A, K-major over the
 * 64 keys), K N-major (the head dim is N); NAME_dqds2: this warpgroup's dS
 * tile, a_shift further. */
void s2_bwd_wg_dqds_compute(bwd *k, LLVMValueRef e, LLVMValueRef soff, void *user)
{
    (void)e;
    dq_state *ds = user;
    s2_cg *cg = k->cg;
    const bwd_shape *s = &k->s;
    int as[DS_TILE / 16], ks[MAX_COLS / 16];
    kmajor_steps(DS_TILE, WG_ROWS, as);
    for (int j = 0; j < s->BN / 16; j++)
        ks[j] = (j * 16 * 128) >> 4;
    LLVMValueRef acc[MAX_D / 2];
    acc_load(k, ds->acc, acc);
    LLVMValueRef aoff = add(k, soff, c32(k, s->BN * s->row_bytes));
    if (ds->a_shift)
        aoff = add(k, aoff, ds->a_shift);
    s2_nv_wgmma_ss(cg, s->dt, s->D, s->BN / 16, desc_kmajor(k, aoff), as,
                   desc_nmajor(k, soff, s->BN), ks, true, true, acc);
    s2_nv_wgmma_wait(cg, 0, acc, s->D / 2);
    acc_store(k, ds->acc, acc);
}
