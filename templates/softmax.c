/* Block-sparse masked row softmax: one warp per (b, h, query row), the mask
 * evaluated in closed form from the head's rule (baked as constant tables).
 * A toolchain check, not an attention kernel: its table entry "row_softmax"
 * (below) is asked by name, and writes no manifest record. */
#include "template.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SM_WARPS = 4, SM_THREADS = SM_WARPS * 32 };   /* query rows per CTA, one per warp */

/* Kernel parameter indices. */
enum { P_IN, P_OUT, P_SQ, P_SK, P_IN_STRIDE, P_OUT_STRIDE = P_IN_STRIDE + 4, P_SCALE = P_OUT_STRIDE + 4, P_COUNT };

/* The head's rule, loaded from the tables. */
typedef struct sm_rule {
    LLVMValueRef dense, left, right, vstride, shift; /* i1, i32 x 4 */
} sm_rule;

typedef struct sm_kernel {
    s2_cg *cg;
    const s2_pattern *pat;
    LLVMValueRef fn;
    int log2_block;
    sm_rule rule;
    LLVMValueRef lane, row, pos, qblock;        /* i64 lane, i64 row, i64 p, i32 m */
    LLVMValueRef sk, in_row, out_row, in_sk, out_sk, c;
} sm_kernel;

static s2_status s2_softmax_check_pattern(s2_ctx *ctx, const s2_pattern *p)
{
    if (!p || p->heads < 1 || !p->rules)
        return s2_fail(ctx, S2_ERR_INVALID, "row softmax: pattern has no resolved head rules");
    if (p->block_size != 16 && p->block_size != 32 && p->block_size != 64 && p->block_size != 128)
        return s2_fail(ctx, S2_ERR_INVALID, "row softmax: block_size %d", p->block_size);
    if (p->num_ranges > 0)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED,
                       "row softmax: pattern '%s' has %d context-range rule(s); only closed-form "
                       "local-stride rules are supported by this kernel", p->name ? p->name : "",
                       p->num_ranges);
    for (int q = 0; q < p->heads; q++) {
        if (p->rules[q].mask >= 0)
            return s2_fail(ctx, S2_ERR_UNSUPPORTED,
                           "row softmax: head %d of pattern '%s' uses an explicit mask; only "
                           "closed-form local-stride rules are supported by this kernel",
                           q, p->name ? p->name : "");
        if (p->rules[q].vert_stride < 1)
            return s2_fail(ctx, S2_ERR_INVALID, "row softmax: head %d has vert_stride %d", q,
                           p->rules[q].vert_stride);
    }
    if (p->causal && p->vert_position != S2_VERT_ABSOLUTE)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED,
                       "row softmax: causal patterns with relative vertical positions are not supported");
    if (!p->causal && p->vert_position != S2_VERT_RELATIVE)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED,
                       "row softmax: bidirectional patterns with absolute vertical positions are not supported");
    return S2_OK;
}

/* Per-head rule fields as constant tables; the shift is reduced modulo the
 * stride so the kernel works in i32. */
static s2_status sm_emit_rule_tables(s2_ctx *ctx, sm_kernel *k, LLVMValueRef tables[5])
{
    const s2_pattern *p = k->pat;
    int32_t *v = calloc((size_t)p->heads * 5, sizeof *v);
    if (!v)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    unsigned H = (unsigned)p->heads;
    for (unsigned q = 0; q < H; q++) {
        const s2_head_rule *r = &p->rules[q];
        v[0 * H + q] = r->dense;
        v[1 * H + q] = r->local_left;
        v[2 * H + q] = r->local_right;
        v[3 * H + q] = r->vert_stride;
        v[4 * H + q] = (int32_t)s2_mod(r->shift, r->vert_stride);
    }
    static const char *const names[5] = {"s2_rule_dense", "s2_rule_left", "s2_rule_right",
                                         "s2_rule_vstride", "s2_rule_shift"};
    s2_status st = S2_OK;
    for (int i = 0; i < 5 && st == S2_OK; i++) {
        tables[i] = s2_nv_const_table_i32(k->cg, names[i], v + (size_t)i * H, H);
        if (!tables[i])
            st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    free(v);
    return st;
}

static void sm_emit_load_rule(sm_kernel *k, LLVMValueRef tables[5], LLVMValueRef head)
{
    s2_cg *cg = k->cg;
    unsigned H = (unsigned)k->pat->heads;
    LLVMValueRef dense = s2_nv_load_table_i32(cg, tables[0], H, head);
    k->rule.dense = LLVMBuildICmp(cg->b, LLVMIntNE, dense, LLVMConstInt(cg->t_i32, 0, 0), "dense");
    k->rule.left = s2_nv_load_table_i32(cg, tables[1], H, head);
    k->rule.right = s2_nv_load_table_i32(cg, tables[2], H, head);
    k->rule.vstride = s2_nv_load_table_i32(cg, tables[3], H, head);
    k->rule.shift = s2_nv_load_table_i32(cg, tables[4], H, head);
}

static LLVMValueRef i64c(s2_cg *cg, long long v) { return LLVMConstInt(cg->t_i64, (unsigned long long)v, 1); }
static LLVMValueRef i32c(s2_cg *cg, int v) { return LLVMConstInt(cg->t_i32, (unsigned long long)(long long)v, 1); }

/* Row offset b*s0 + h*s1 + row*s2 of the in/out tensors. */
static LLVMValueRef sm_row_offset(sm_kernel *k, unsigned stride_param, LLVMValueRef b, LLVMValueRef h)
{
    s2_cg *cg = k->cg;
    LLVMValueRef s0 = LLVMGetParam(k->fn, stride_param), s1 = LLVMGetParam(k->fn, stride_param + 1);
    LLVMValueRef s2 = LLVMGetParam(k->fn, stride_param + 2);
    LLVMValueRef off = LLVMBuildNSWMul(cg->b, b, s0, "");
    off = LLVMBuildNSWAdd(cg->b, off, LLVMBuildNSWMul(cg->b, h, s1, ""), "");
    return LLVMBuildNSWAdd(cg->b, off, LLVMBuildNSWMul(cg->b, k->row, s2, ""), "row.off");
}

/* Which warp row this is; warps past Sq leave (a whole warp at once, so the
 * full-mask shuffles below stay valid). */
static void sm_emit_row_setup(sm_kernel *k, LLVMValueRef tables[5])
{
    s2_cg *cg = k->cg;
    LLVMValueRef tid = s2_nv_tid_x(cg);
    LLVMValueRef warp = LLVMBuildLShr(cg->b, tid, i32c(cg, 5), "warp");
    LLVMValueRef lane = LLVMBuildAnd(cg->b, tid, i32c(cg, 31), "lane");
    LLVMValueRef row = LLVMBuildAdd(cg->b, LLVMBuildNUWMul(cg->b, s2_nv_ctaid(cg, 'x'), i32c(cg, SM_WARPS), ""),
                                    warp, "row32");
    LLVMValueRef head = s2_nv_ctaid(cg, 'y');
    LLVMValueRef batch = LLVMBuildZExt(cg->b, s2_nv_ctaid(cg, 'z'), cg->t_i64, "b");
    k->lane = LLVMBuildZExt(cg->b, lane, cg->t_i64, "lane64");
    k->row = LLVMBuildZExt(cg->b, row, cg->t_i64, "row");
    LLVMValueRef sq = LLVMGetParam(k->fn, P_SQ);
    k->sk = LLVMGetParam(k->fn, P_SK);

    LLVMBasicBlockRef work = LLVMAppendBasicBlockInContext(cg->llctx, k->fn, "row");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(cg->llctx, k->fn, "done");
    LLVMBuildCondBr(cg->b, LLVMBuildICmp(cg->b, LLVMIntSLT, k->row, sq, ""), work, done);
    LLVMPositionBuilderAtEnd(cg->b, done);
    LLVMBuildRetVoid(cg->b);
    LLVMPositionBuilderAtEnd(cg->b, work);

    /* queries are the last Sq of the Sk positions */
    k->pos = LLVMBuildNSWAdd(cg->b, LLVMBuildNSWSub(cg->b, k->sk, sq, ""), k->row, "pos");
    k->qblock = LLVMBuildTrunc(cg->b, LLVMBuildAShr(cg->b, k->pos, i64c(cg, k->log2_block), ""), cg->t_i32, "m");
    sm_emit_load_rule(k, tables, head);

    LLVMValueRef h64 = LLVMBuildZExt(cg->b, head, cg->t_i64, "");
    k->in_row = s2_nv_gep_f32(cg, LLVMGetParam(k->fn, P_IN), sm_row_offset(k, P_IN_STRIDE, batch, h64));
    k->out_row = s2_nv_gep_f32(cg, LLVMGetParam(k->fn, P_OUT), sm_row_offset(k, P_OUT_STRIDE, batch, h64));
    k->in_sk = LLVMGetParam(k->fn, P_IN_STRIDE + 3);
    k->out_sk = LLVMGetParam(k->fn, P_OUT_STRIDE + 3);
    /* softmax(scale*x) = 2^(x*scale*log2(e) - max) / sum */
    k->c = LLVMBuildFMul(cg->b, LLVMGetParam(k->fn, P_SCALE), LLVMConstReal(cg->t_f32, M_LOG2E), "c");
}

/* Whether key k of this row is kept (the pattern.h formulas). */
static LLVMValueRef sm_emit_key_kept(sm_kernel *k, LLVMValueRef key)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = cg->b;
    sm_rule *r = &k->rule;
    LLVMValueRef n = LLVMBuildTrunc(b, LLVMBuildAShr(b, key, i64c(cg, k->log2_block), ""), cg->t_i32, "n");
    LLVMValueRef zero = i32c(cg, 0);
    if (k->pat->causal) {
        LLVMValueRef visible = LLVMBuildICmp(b, LLVMIntSLE, key, k->pos, "visible");
        LLVMValueRef local = LLVMBuildICmp(b, LLVMIntSLT, LLVMBuildSub(b, k->qblock, n, ""), r->left, "local");
        LLVMValueRef vert = LLVMBuildICmp(b, LLVMIntEQ,
            LLVMBuildURem(b, LLVMBuildAdd(b, n, r->shift, ""), r->vstride, ""), zero, "vert");
        LLVMValueRef any = LLVMBuildOr(b, r->dense, LLVMBuildOr(b, local, vert, ""), "");
        return LLVMBuildAnd(b, visible, any, "kept");
    }
    LLVMValueRef one = i32c(cg, 1);
    LLVMValueRef d = LLVMBuildSub(b, k->qblock, n, "");           /* m - n */
    LLVMValueRef left = s2_nv_smax_i32(cg, zero, LLVMBuildAdd(b, LLVMBuildSub(b, d, r->left, ""), one, ""));
    LLVMValueRef right = s2_nv_smax_i32(cg, zero,
        LLVMBuildAdd(b, LLVMBuildSub(b, LLVMBuildNeg(b, d, ""), r->right, ""), one, ""));
    LLVMValueRef vert = LLVMBuildICmp(b, LLVMIntEQ,
        LLVMBuildURem(b, LLVMBuildAdd(b, left, right, ""), r->vstride, ""), zero, "vert");
    return LLVMBuildOr(b, r->dense, vert, "kept");
}

/* Pass 1: the row maximum of x*c over kept keys (-inf when none). */
static LLVMValueRef sm_emit_pass_max(sm_kernel *k)
{
    s2_cg *cg = k->cg;
    LLVMValueRef ninf = LLVMConstReal(cg->t_f32, -INFINITY);
    s2_nv_loop l;
    s2_nv_loop_begin(cg, &l, "max", k->lane, k->sk, i64c(cg, 32), &ninf, 1);
    LLVMValueRef x = s2_nv_load_global_f32(cg, k->in_row, LLVMBuildNSWMul(cg->b, l.iv, k->in_sk, ""), 4);
    LLVMValueRef v = LLVMBuildSelect(cg->b, sm_emit_key_kept(k, l.iv), LLVMBuildFMul(cg->b, x, k->c, ""), ninf, "");
    LLVMValueRef next = s2_nv_fmax(cg, l.carried[0], v);
    s2_nv_loop_end(cg, &l, &next);
    LLVMValueRef m = s2_nv_warp_max_f32(cg, l.result[0]);
    /* a row with nothing kept (or only -inf) subtracts 0 instead of -inf, no NaN */
    LLVMValueRef isinf = LLVMBuildFCmp(cg->b, LLVMRealOEQ, m, ninf, "");
    return LLVMBuildSelect(cg->b, isinf, LLVMConstReal(cg->t_f32, 0.0), m, "rowmax");
}

static LLVMValueRef sm_emit_prob(sm_kernel *k, LLVMValueRef key, LLVMValueRef rowmax)
{
    s2_cg *cg = k->cg;
    LLVMValueRef x = s2_nv_load_global_f32(cg, k->in_row, LLVMBuildNSWMul(cg->b, key, k->in_sk, ""), 4);
    return s2_nv_ex2_approx(cg, s2_nv_fma(cg, x, k->c, LLVMBuildFNeg(cg->b, rowmax, "")));
}

/* Pass 2: 1 / sum of 2^(x*c - max) over kept keys (0 when the sum is 0). */
static LLVMValueRef sm_emit_pass_sum(sm_kernel *k, LLVMValueRef rowmax)
{
    s2_cg *cg = k->cg;
    LLVMValueRef fzero = LLVMConstReal(cg->t_f32, 0.0);
    s2_nv_loop l;
    s2_nv_loop_begin(cg, &l, "sum", k->lane, k->sk, i64c(cg, 32), &fzero, 1);
    LLVMValueRef e = LLVMBuildSelect(cg->b, sm_emit_key_kept(k, l.iv), sm_emit_prob(k, l.iv, rowmax), fzero, "");
    LLVMValueRef next = LLVMBuildFAdd(cg->b, l.carried[0], e, "");
    s2_nv_loop_end(cg, &l, &next);
    LLVMValueRef sum = s2_nv_warp_sum_f32(cg, l.result[0]);
    LLVMValueRef pos = LLVMBuildFCmp(cg->b, LLVMRealOGT, sum, fzero, "");
    LLVMValueRef inv = LLVMBuildFDiv(cg->b, LLVMConstReal(cg->t_f32, 1.0), sum, "");
    return LLVMBuildSelect(cg->b, pos, inv, fzero, "inv");
}

/* Pass 3: write probabilities, 0 for masked keys. */
static void sm_emit_pass_write(sm_kernel *k, LLVMValueRef rowmax, LLVMValueRef inv)
{
    s2_cg *cg = k->cg;
    s2_nv_loop l;
    s2_nv_loop_begin(cg, &l, "write", k->lane, k->sk, i64c(cg, 32), NULL, 0);
    LLVMValueRef p = LLVMBuildFMul(cg->b, sm_emit_prob(k, l.iv, rowmax), inv, "");
    LLVMValueRef v = LLVMBuildSelect(cg->b, sm_emit_key_kept(k, l.iv), p, LLVMConstReal(cg->t_f32, 0.0), "");
    s2_nv_store_global_f32(cg, k->out_row, LLVMBuildNSWMul(cg->b, l.iv, k->out_sk, ""), v, 4);
    s2_nv_loop_end(cg, &l, NULL);
    LLVMBuildRetVoid(cg->b);
}

static s2_status s2_softmax_build(s2_ctx *ctx, s2_cg *cg, const s2_pattern *pat, const char *name)
{
    sm_kernel k = {.cg = cg, .pat = pat};
    for (int bs = pat->block_size; bs > 1; bs >>= 1)
        k.log2_block++;
    LLVMTypeRef params[P_COUNT];
    params[P_IN] = params[P_OUT] = cg->t_ptr_global;
    for (int i = P_SQ; i < P_SCALE; i++)
        params[i] = cg->t_i64;
    params[P_SCALE] = cg->t_f32;
    k.fn = s2_nv_kernel_new(cg, name, params, P_COUNT, SM_THREADS, 1);
    s2_nv_param_attr(cg, k.fn, P_IN, "noalias");
    s2_nv_param_attr(cg, k.fn, P_IN, "readonly");
    s2_nv_param_attr(cg, k.fn, P_OUT, "noalias");
    s2_nv_param_attr(cg, k.fn, P_OUT, "writeonly");

    LLVMValueRef tables[5];
    s2_status st = sm_emit_rule_tables(ctx, &k, tables);
    if (st != S2_OK)
        return st;
    sm_emit_row_setup(&k, tables);
    LLVMValueRef rowmax = sm_emit_pass_max(&k);
    LLVMValueRef inv = sm_emit_pass_sum(&k, rowmax);
    sm_emit_pass_write(&k, rowmax, inv);
    return S2_OK;
}

/* Kernel symbol: s2_softmax_<pattern name>_<arch>, identifier characters only. */
static void s2_softmax_kernel_name(char *out, size_t cap, const s2_pattern *p, s2_arch arch)
{
    const char *pn = p->name && p->name[0] ? p->name : "pattern";
    size_t n = (size_t)snprintf(out, cap, "s2_softmax_");
    for (const char *s = pn; *s && n + 1 < cap - 12; s++) {
        char c = *s;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        out[n++] = ok ? c : '_';
    }
    snprintf(out + n, cap - n, "_%s", s2_arch_cpu(arch));
}

/* The launch shape: threads (num_warps) and query rows (block_m) per CTA. */
static s2_status resolve_softmax(s2_ctx *ctx, s2_kspec *spec, const s2_pattern *p)
{
    s2_status st = s2_softmax_check_pattern(ctx, p);
    spec->num_warps = SM_WARPS;
    spec->block_m = SM_WARPS;
    return st;
}

static int smem_none(const s2_pattern *p, const s2_kspec *spec) { return 0; }
static int kernels_none(const s2_pattern *p, const s2_kspec *s, s2_kernel_record *out) { return 0; }

static s2_status build_softmax(s2_ctx *ctx, s2_cg *cg, const s2_pattern *p, const s2_kspec *spec, const char *name)
{
    return s2_softmax_build(ctx, cg, p, name);
}

static void symbol_softmax(char *out, size_t cap, const s2_pattern *p, const s2_kspec *spec)
{
    s2_softmax_kernel_name(out, cap, p, (s2_arch)spec->arch);
}

/* The table's entry (templates/template.c): f32, no attention kind, never asked by spec. */
const s2_template s2_template_row_softmax = {"row_softmax", S2_KERNEL_KIND_COUNT_, S2_TEMPLATE_DTYPE(S2_DTYPE_F32),
    0, 0, NULL, resolve_softmax, smem_none, kernels_none, NULL, build_softmax, NULL, symbol_softmax};
