/* Builder helpers for the Hopper path (sm_90a): wgmma through inline PTX
 * (LLVM 22 has no wgmma.mma_async intrinsic), matrix descriptors, TMA tile
 * loads, mbarriers, named barriers and setmaxnreg.  Layouts and rules are
 * those of the PTX ISA (9.7.15 wgmma and its descriptors, 9.7.9.25.5.2
 * cp.async.bulk.tensor, 9.7.13.15 mbarrier, 9.7.19.5 setmaxnreg), as
 * CUTLASS's mma_sm90_desc.hpp and mma_traits_sm90_gmma.hpp build them. */
#include "cg_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Inline asm with any number of operands (s2_nv_inline_asm stops at 16);
 * side effects and a memory clobber, so LLVM neither drops nor moves it. */
static LLVMValueRef asm_call(s2_cg *cg, LLVMTypeRef ret, const char *text, const char *cons, LLVMValueRef *args,
                             unsigned nargs)
{
    LLVMTypeRef tys[512];
    for (unsigned i = 0; i < nargs && i < 512; i++)
        tys[i] = LLVMTypeOf(args[i]);
    size_t n = strlen(cons);
    char *full = malloc(n + 16);
    if (!full)
        return NULL;
    snprintf(full, n + 16, "%s%s~{memory}", cons, n ? "," : "");
    LLVMTypeRef fty = LLVMFunctionType(ret, tys, nargs, 0);
    LLVMValueRef fn = LLVMGetInlineAsm(fty, text, strlen(text), full, strlen(full), 1, 0, LLVMInlineAsmDialectATT, 0);
    free(full);
    return LLVMBuildCall2(cg->b, fty, fn, args, nargs, "");
}

LLVMValueRef s2_nv_smem_base32(s2_cg *cg)
{
    return LLVMBuildTrunc(cg->b, LLVMBuildPtrToInt(cg->b, s2_nv_dynamic_smem(cg), cg->t_i64, ""), cg->t_i32,
                          "smem32");
}

LLVMValueRef s2_nv_wgmma_desc(s2_cg *cg, LLVMValueRef smem_addr, int lbo, int sbo)
{
    uint64_t hi = ((uint64_t)((lbo >> 4) & 0x3fff) << 16) | ((uint64_t)((sbo >> 4) & 0x3fff) << 32) | (1ull << 62);
    LLVMValueRef a = LLVMBuildAnd(cg->b, LLVMBuildLShr(cg->b, smem_addr, LLVMConstInt(cg->t_i32, 4, 0), ""),
                                  LLVMConstInt(cg->t_i32, 0x3fff, 0), "");
    return LLVMBuildOr(cg->b, LLVMBuildZExt(cg->b, a, cg->t_i64, ""), LLVMConstInt(cg->t_i64, hi, 0), "desc");
}

static const char *dt_name(s2_dtype dt) { return s2_dtype_info_of(dt)->ptx; }

/* "{$b,...,$b+n-1}" */
static void put_regs(s2_buf *t, int base, int n)
{
    s2_buf_puts(t, "{");
    for (int i = 0; i < n; i++)
        s2_buf_printf(t, "%s$%d", i ? "," : "", base + i);
    s2_buf_puts(t, "}");
}

/* "=f,...,=f,0,1,...,n-1" then extra inputs */
static void put_tied(s2_buf *c, int n)
{
    for (int i = 0; i < n; i++)
        s2_buf_printf(c, "%s=f", i ? "," : "");
    for (int i = 0; i < n; i++)
        s2_buf_printf(c, ",%d", i);
}

static LLVMTypeRef acc_struct(s2_cg *cg, int n)
{
    LLVMTypeRef f[256];
    for (int i = 0; i < n; i++)
        f[i] = cg->t_f32;
    return LLVMStructTypeInContext(cg->llctx, f, (unsigned)n, 0);
}

static void unpack_acc(s2_cg *cg, LLVMValueRef r, LLVMValueRef *acc, int n)
{
    for (int i = 0; i < n; i++)
        acc[i] = LLVMBuildExtractValue(cg->b, r, (unsigned)i, "");
}

/* "wgmma.mma_async...m64nNkK.f32.T.T {$b,...}": one step's opcode and accumulators (K: the dtype's mma_k). */
static void put_mma(s2_buf *t, s2_dtype dt, int n, int acc_base, int na)
{
    s2_buf_printf(t, "wgmma.mma_async.sync.aligned.m64n%dk%d.f32.%s.%s ", n, s2_dtype_info_of(dt)->mma_k, dt_name(dt),
                  dt_name(dt));
    put_regs(t, acc_base, na);
}

/* The scale immediates and, for 16-bit operands, the transposes (trans_a < 0:
 * the RS form, which has none for A).  8-bit operands take no transpose:
 * both must be K-major (PTX ISA 9.7.15.5.1). */
static void put_tail(s2_buf *t, s2_dtype dt, int trans_a, int trans_b)
{
    if (s2_dtype_info_of(dt)->size == 1)
        s2_buf_puts(t, ", 1, 1;\n");
    else if (trans_a >= 0)
        s2_buf_printf(t, ", 1, 1, %d, %d;\n", trans_a, trans_b);
    else
        s2_buf_printf(t, ", 1, 1, %d;\n", trans_b);
}

/* n register inputs: ",r" each */
static void put_r(s2_buf *c, int n)
{
    for (int i = 0; i < n; i++)
        s2_buf_puts(c, ",r");
}

/* k RS steps (A from registers): accumulators from $acc_base, A's 4
 * fragment registers a step from $ia, B's descriptors <desc><j>; scale-d p1
 * (accumulate) but p0 (overwrite) on the first step when overwrite; tnspB
 * trans_b. */
static void put_rs_steps(s2_buf *t, s2_dtype dt, int n, int k, int acc_base, int ia, const char *desc, bool overwrite,
                         bool trans_b)
{
    for (int j = 0; j < k; j++) {
        put_mma(t, dt, n, acc_base, n / 2);
        s2_buf_puts(t, ", ");
        put_regs(t, ia + 4 * j, 4);
        s2_buf_printf(t, ", %s%d, %s", desc, j, j == 0 && overwrite ? "p0" : "p1");
        put_tail(t, dt, -1, trans_b ? 1 : 0);
    }
}

/* O += P·V (RS, trans-b) over k2 steps: accumulators from $na1, P's
 * fragments from $ip, descriptors dv<j>. */
static void put_pv_steps(s2_buf *t, s2_dtype dt, int n2, int k2, int na1, int ip)
{
    put_rs_steps(t, dt, n2, k2, na1, ip, "dv", false, true);
}

/* k steps of 4 A-fragment registers each, in order, as operands. */
static void copy_frags(LLVMValueRef *dst, LLVMValueRef (*a)[4], int k)
{
    for (int j = 0; j < k; j++)
        for (int q = 0; q < 4; q++)
            dst[4 * j + q] = a[j][q];
}

/* Two accumulator sets as one operand list (acc1, then acc2), and back. */
static void gather_acc2(LLVMValueRef *args, const LLVMValueRef *acc1, int na1, const LLVMValueRef *acc2, int na2)
{
    for (int i = 0; i < na1; i++)
        args[i] = acc1[i];
    for (int i = 0; i < na2; i++)
        args[na1 + i] = acc2[i];
}

static void unpack_acc2(s2_cg *cg, LLVMValueRef r, LLVMValueRef *acc1, int na1, LLVMValueRef *acc2, int na2)
{
    unpack_acc(cg, r, acc1, na1);
    for (int i = 0; i < na2; i++)
        acc2[i] = LLVMBuildExtractValue(cg->b, r, (unsigned)(na1 + i), "");
}

void s2_nv_wgmma_ss(s2_cg *cg, s2_dtype dt, int n, int ksteps, LLVMValueRef desc_a, const int *a_step,
                    LLVMValueRef desc_b, const int *b_step, bool trans_b, bool accumulate, LLVMValueRef *acc)
{
    int na = n / 2;
    s2_buf t, c;
    s2_buf_init(&t);
    s2_buf_init(&c);
    int ia = 2 * na, ib = ia + 1, iz = ia + 2;
    /* every descriptor is made before the fence: a non-wgmma instruction
     * defining a wgmma input inside the batch serialises it (ptxas C7513) */
    s2_buf_printf(&t, "{\n.reg .pred p0, p1;\n.reg .b64 da<%d>, db<%d>;\n", ksteps, ksteps);
    s2_buf_printf(&t, "setp.ne.b32 p0, $%d, 0;\nsetp.eq.b32 p1, $%d, 0;\n", iz, iz);
    for (int j = 0; j < ksteps; j++)
        s2_buf_printf(&t, "add.s64 da%d, $%d, %d;\nadd.s64 db%d, $%d, %d;\n", j, ia, a_step[j], j, ib, b_step[j]);
    s2_buf_puts(&t, "wgmma.fence.sync.aligned;\n");
    for (int j = 0; j < ksteps; j++) {
        put_mma(&t, dt, n, 0, na);
        s2_buf_printf(&t, ", da%d, db%d, %s", j, j, j == 0 && !accumulate ? "p0" : "p1");
        put_tail(&t, dt, 0, trans_b ? 1 : 0);
    }
    s2_buf_puts(&t, "wgmma.commit_group.sync.aligned;\n}");
    put_tied(&c, na);
    s2_buf_puts(&c, ",l,l,r");
    LLVMValueRef args[256 + 3];
    for (int i = 0; i < na; i++)
        args[i] = acc[i];
    args[na] = desc_a;
    args[na + 1] = desc_b;
    args[na + 2] = LLVMConstInt(cg->t_i32, 0, 0);
    LLVMValueRef r = asm_call(cg, acc_struct(cg, na), t.data, c.data, args, (unsigned)na + 3);
    unpack_acc(cg, r, acc, na);
    s2_buf_free(&t);
    s2_buf_free(&c);
}

void s2_nv_wgmma_rs(s2_cg *cg, s2_dtype dt, int n, int ksteps, LLVMValueRef (*a)[4], LLVMValueRef desc_b,
                    const int *b_step, bool trans_b, LLVMValueRef *acc)
{
    int na = n / 2;
    s2_buf t, c;
    s2_buf_init(&t);
    s2_buf_init(&c);
    int ia = 2 * na, ib = ia + 4 * ksteps, iz = ib + 1;
    s2_buf_printf(&t, "{\n.reg .pred p1;\n.reg .b64 db<%d>;\n", ksteps);
    s2_buf_printf(&t, "setp.eq.b32 p1, $%d, 0;\n", iz);
    for (int j = 0; j < ksteps; j++)
        s2_buf_printf(&t, "add.s64 db%d, $%d, %d;\n", j, ib, b_step[j]);
    s2_buf_puts(&t, "wgmma.fence.sync.aligned;\n");
    put_rs_steps(&t, dt, n, ksteps, 0, ia, "db", false, trans_b);
    s2_buf_puts(&t, "wgmma.commit_group.sync.aligned;\n}");
    put_tied(&c, na);
    put_r(&c, 4 * ksteps);
    s2_buf_puts(&c, ",l,r");
    LLVMValueRef args[256 + 64 + 2];
    for (int i = 0; i < na; i++)
        args[i] = acc[i];
    copy_frags(args + na, a, ksteps);
    args[na + 4 * ksteps] = desc_b;
    args[na + 4 * ksteps + 1] = LLVMConstInt(cg->t_i32, 0, 0);
    LLVMValueRef r = asm_call(cg, acc_struct(cg, na), t.data, c.data, args, (unsigned)(na + 4 * ksteps + 2));
    unpack_acc(cg, r, acc, na);
    s2_buf_free(&t);
    s2_buf_free(&c);
}

/* S = A·B (SS, K-major both, first step overwrites) committed as one group,
 * then O += P·V (RS, trans-b) as a second group, in one asm block: every
 * descriptor is made before the first wgmma, so no non-wgmma instruction
 * defines a wgmma input while the batch is in flight (ptxas C7513). */
void s2_nv_wgmma_ss_rs(s2_cg *cg, s2_dtype dt, int n1, int k1, LLVMValueRef desc_a, const int *a_step,
                       LLVMValueRef desc_b, const int *b_step, LLVMValueRef *acc1, int n2, int k2,
                       LLVMValueRef (*a2)[4], LLVMValueRef desc_v, const int *v_step, LLVMValueRef *acc2)
{
    int na1 = n1 / 2, na2 = n2 / 2, na = na1 + na2;
    s2_buf t, c;
    s2_buf_init(&t);
    s2_buf_init(&c);
    int ia = 2 * na, ib = ia + 1, ip = ia + 2, iv = ip + 4 * k2, iz = iv + 1;
    s2_buf_printf(&t, "{\n.reg .pred p0, p1;\n.reg .b64 da<%d>, db<%d>, dv<%d>;\n", k1, k1, k2);
    s2_buf_printf(&t, "setp.ne.b32 p0, $%d, 0;\nsetp.eq.b32 p1, $%d, 0;\n", iz, iz);
    for (int j = 0; j < k1; j++)
        s2_buf_printf(&t, "add.s64 da%d, $%d, %d;\nadd.s64 db%d, $%d, %d;\n", j, ia, a_step[j], j, ib, b_step[j]);
    for (int j = 0; j < k2; j++)
        s2_buf_printf(&t, "add.s64 dv%d, $%d, %d;\n", j, iv, v_step[j]);
    s2_buf_puts(&t, "wgmma.fence.sync.aligned;\n");
    for (int j = 0; j < k1; j++) {
        put_mma(&t, dt, n1, 0, na1);
        s2_buf_printf(&t, ", da%d, db%d, %s", j, j, j == 0 ? "p0" : "p1");
        put_tail(&t, dt, 0, 0);
    }
    s2_buf_puts(&t, "wgmma.commit_group.sync.aligned;\n");
    put_pv_steps(&t, dt, n2, k2, na1, ip);
    s2_buf_puts(&t, "wgmma.commit_group.sync.aligned;\n}");
    put_tied(&c, na);
    s2_buf_puts(&c, ",l,l");
    put_r(&c, 4 * k2);
    s2_buf_puts(&c, ",l,r");
    LLVMValueRef args[512];
    gather_acc2(args, acc1, na1, acc2, na2);
    args[na] = desc_a;
    args[na + 1] = desc_b;
    copy_frags(args + na + 2, a2, k2);
    args[na + 2 + 4 * k2] = desc_v;
    args[na + 3 + 4 * k2] = LLVMConstInt(cg->t_i32, 0, 0);
    LLVMValueRef r = asm_call(cg, acc_struct(cg, na), t.data, c.data, args, (unsigned)(na + 4 + 4 * k2));
    unpack_acc2(cg, r, acc1, na1, acc2, na2);
    s2_buf_free(&t);
    s2_buf_free(&c);
}

void s2_nv_wgmma_wait(s2_cg *cg, int pending, LLVMValueRef *acc, int n)
{
    s2_buf t, c;
    s2_buf_init(&t);
    s2_buf_init(&c);
    s2_buf_printf(&t, "wgmma.wait_group.sync.aligned %d;", pending);
    put_tied(&c, n);
    LLVMValueRef r = asm_call(cg, acc_struct(cg, n), t.data, c.data, acc, (unsigned)n);
    unpack_acc(cg, r, acc, n);
    s2_buf_free(&t);
    s2_buf_free(&c);
}

/* ---- mbarriers, fences, TMA ---- */

void s2_nv_mbar_init(s2_cg *cg, LLVMValueRef bar, int count)
{
    LLVMValueRef a[2] = {bar, LLVMConstInt(cg->t_i32, (unsigned)count, 0)};
    asm_call(cg, cg->t_void, "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r", a, 2);
}

void s2_nv_fence_mbar_init(s2_cg *cg)
{
    asm_call(cg, cg->t_void, "fence.mbarrier_init.release.cluster;", "", NULL, 0);
}

void s2_nv_mbar_arrive_expect_tx(s2_cg *cg, LLVMValueRef bar, int bytes)
{
    LLVMValueRef a[2] = {bar, LLVMConstInt(cg->t_i32, (unsigned)bytes, 0)};
    asm_call(cg, cg->t_void, "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r", a, 2);
}

void s2_nv_mbar_arrive(s2_cg *cg, LLVMValueRef bar)
{
    asm_call(cg, cg->t_void, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r", &bar, 1);
}

void s2_nv_mbar_wait(s2_cg *cg, LLVMValueRef bar, LLVMValueRef parity)
{
    LLVMValueRef a[2] = {bar, parity};
    asm_call(cg, cg->t_void,
             "{\n.reg .pred p;\nS2_WAIT:\n"
             "mbarrier.try_wait.parity.shared::cta.b64 p, [$0], $1;\n"
             "@!p bra S2_WAIT;\n}",
             "r,r", a, 2);
}

void s2_nv_tma_load_4d(s2_cg *cg, LLVMValueRef dst, LLVMValueRef bar, LLVMValueRef tmap, LLVMValueRef c[4])
{
    LLVMValueRef a[7] = {dst, tmap, c[0], c[1], c[2], c[3], bar};
    asm_call(cg, cg->t_void,
             "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
             " [$0], [$1, {$2, $3, $4, $5}], [$6];",
             "r,l,r,r,r,r,r", a, 7);
}

void s2_nv_mbar_arrive_expect_tx_if(s2_cg *cg, LLVMValueRef pred, LLVMValueRef bar, int bytes)
{
    LLVMValueRef a[3] = {LLVMBuildZExt(cg->b, pred, cg->t_i32, ""), bar, LLVMConstInt(cg->t_i32, (unsigned)bytes, 0)};
    asm_call(cg, cg->t_void,
             "{\n.reg .pred p;\nsetp.ne.b32 p, $0, 0;\n"
             "@p mbarrier.arrive.expect_tx.shared::cta.b64 _, [$1], $2;\n}",
             "r,r,r", a, 3);
}

void s2_nv_tma_load_4d_if(s2_cg *cg, LLVMValueRef pred, LLVMValueRef dst, LLVMValueRef bar, LLVMValueRef tmap,
                          LLVMValueRef c[4])
{
    LLVMValueRef a[8] = {LLVMBuildZExt(cg->b, pred, cg->t_i32, ""), dst, tmap, c[0], c[1], c[2], c[3], bar};
    asm_call(cg, cg->t_void,
             "{\n.reg .pred p;\nsetp.ne.b32 p, $0, 0;\n"
             "@p cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
             " [$1], [$2, {$3, $4, $5, $6}], [$7];\n}",
             "r,r,l,r,r,r,r,r", a, 8);
}

void s2_nv_prefetch_tensormap(s2_cg *cg, LLVMValueRef tmap)
{
    asm_call(cg, cg->t_void, "prefetch.tensormap [$0];", "l", &tmap, 1);
}

void s2_nv_setmaxnreg(s2_cg *cg, bool inc, int regs)
{
    LLVMValueRef n = LLVMConstInt(cg->t_i32, (unsigned)regs, 0);
    s2_nv_intrinsic(cg, inc ? "llvm.nvvm.setmaxnreg.inc.sync.aligned.u32" : "llvm.nvvm.setmaxnreg.dec.sync.aligned.u32",
                    cg->t_void, &cg->t_i32, 1, &n);
}

void s2_nv_named_barrier(s2_cg *cg, int id, int threads, bool arrive_only)
{
    LLVMValueRef v[2] = {LLVMConstInt(cg->t_i32, (unsigned)id, 0), LLVMConstInt(cg->t_i32, (unsigned)threads, 0)};
    LLVMTypeRef t[2] = {cg->t_i32, cg->t_i32};
    s2_nv_intrinsic(cg, arrive_only ? "llvm.nvvm.barrier.cta.arrive.aligned.count" : "llvm.nvvm.barrier.cta.sync.aligned.count",
                    cg->t_void, t, 2, v);
}

LLVMTypeRef s2_nv_tensormap_type(s2_cg *cg)
{
    LLVMTypeRef a = LLVMArrayType2(cg->t_i64, 16);
    return LLVMStructTypeInContext(cg->llctx, &a, 1, 0);
}

void s2_nv_param_tensormap(s2_cg *cg, LLVMValueRef fn, unsigned param)
{
    unsigned byval = LLVMGetEnumAttributeKindForName("byval", 5);
    unsigned align = LLVMGetEnumAttributeKindForName("align", 5);
    LLVMAddAttributeAtIndex(fn, param + 1, LLVMCreateTypeAttribute(cg->llctx, byval, s2_nv_tensormap_type(cg)));
    LLVMAddAttributeAtIndex(fn, param + 1, LLVMCreateEnumAttribute(cg->llctx, align, 64));
    LLVMAddAttributeAtIndex(fn, param + 1, LLVMCreateStringAttribute(cg->llctx, "nvvm.grid_constant", 18, "", 0));
}

/* Make this thread's generic-proxy writes to shared memory (st.shared,
 * cp.async after its wait) visible to the async proxy (wgmma operands),
 * before the barrier that publishes them (PTX ISA 9.7.15.4, async proxy). */
void s2_nv_fence_proxy_async(s2_cg *cg)
{
    asm_call(cg, cg->t_void, "fence.proxy.async.shared::cta;", "", NULL, 0);
}

/* S = A·B with A from registers (RS, B K-major, the first step overwrites)
 * as one group, then, when n2 > 0, O += P·V (RS, trans-b) as a second group,
 * in one asm block (every descriptor made before the first wgmma, as
 * s2_nv_wgmma_ss_rs).  a1: the A fragments per k16 step (the m16n8k16 A map
 * per warp, CUTLASS ALayout_64x16). */
void s2_nv_wgmma_rs_rs(s2_cg *cg, s2_dtype dt, int n1, int k1, LLVMValueRef (*a1)[4], LLVMValueRef desc_b,
                       const int *b_step, LLVMValueRef *acc1, int n2, int k2, LLVMValueRef (*a2)[4],
                       LLVMValueRef desc_v, const int *v_step, LLVMValueRef *acc2)
{
    int na1 = n1 / 2, na2 = n2 / 2, na = na1 + na2;
    s2_buf t, c;
    s2_buf_init(&t);
    s2_buf_init(&c);
    int ia = 2 * na, ib = ia + 4 * k1, ip = ib + 1, iv = ip + 4 * k2, iz = iv + 1;
    s2_buf_printf(&t, "{\n.reg .pred p0, p1;\n.reg .b64 db<%d>, dv<%d>;\n", k1, k2 > 0 ? k2 : 1);
    s2_buf_printf(&t, "setp.ne.b32 p0, $%d, 0;\nsetp.eq.b32 p1, $%d, 0;\n", iz, iz);
    for (int j = 0; j < k1; j++)
        s2_buf_printf(&t, "add.s64 db%d, $%d, %d;\n", j, ib, b_step[j]);
    for (int j = 0; j < k2; j++)
        s2_buf_printf(&t, "add.s64 dv%d, $%d, %d;\n", j, iv, v_step[j]);
    s2_buf_puts(&t, "wgmma.fence.sync.aligned;\n");
    put_rs_steps(&t, dt, n1, k1, 0, ia, "db", true, false);
    s2_buf_puts(&t, "wgmma.commit_group.sync.aligned;\n");
    put_pv_steps(&t, dt, n2, k2, na1, ip);
    if (k2 > 0)
        s2_buf_puts(&t, "wgmma.commit_group.sync.aligned;\n");
    s2_buf_puts(&t, "}");
    put_tied(&c, na);
    put_r(&c, 4 * k1);
    s2_buf_puts(&c, ",l");
    put_r(&c, 4 * k2);
    s2_buf_puts(&c, ",l,r");
    LLVMValueRef args[512];
    gather_acc2(args, acc1, na1, acc2, na2);
    copy_frags(args + na, a1, k1);
    args[na + 4 * k1] = desc_b;
    copy_frags(args + na + 4 * k1 + 1, a2, k2);
    args[na + 4 * k1 + 1 + 4 * k2] = k2 > 0 ? desc_v : LLVMConstInt(cg->t_i64, 0, 0);
    args[na + 4 * k1 + 2 + 4 * k2] = LLVMConstInt(cg->t_i32, 0, 0);
    LLVMValueRef r = asm_call(cg, acc_struct(cg, na), t.data, c.data, args, (unsigned)(na + 4 * k1 + 3 + 4 * k2));
    unpack_acc2(cg, r, acc1, na1, acc2, na2);
    s2_buf_free(&t);
    s2_buf_free(&c);
}
