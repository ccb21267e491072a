/* The variable-length backward on a real GPU: s2_attn_backward with
 * s2_attn_bwd_args.seqs against the float64 reference s2_ref_backward, run
 * per sequence from the GPU forward's o and lse.  Packed odd lengths (1, 17,
 * 300, 1000) with and without gap rows between the sequences, GQA, blocks 16,
 * 32 and 64, causal and bidirectional, bf16 and f16, on both bodies (wgmma
 * on sm_90a, mma.sync: spec.bwd_wgmma -1 there, the device's arch elsewhere).
 * Each run: dq, dk, dv poisoned (NaN), s2_attn_backward twice with the plain
 * workspace (recomputing NAME_dq) — bitwise identical —, then through a plan
 * whose workspace holds the dS tiles (NAME_dqds where the module has it), and
 * for the first case of each body a CUDA graph: the records written on the
 * device by s2_attn_seqs_write_cu from cu_seqlens, the forward and the
 * backward captured and replayed, bitwise equal to the plan's eager run.
 * Rows outside every sequence must stay poison.  Tolerances as test_bwd_gpu:
 * relative Frobenius error 2e-2 (bf16) / 5e-3 (f16) for each of dq, dk, dv.
 * Fresh random inputs, seed printed (S2C_SEED=N repeats);
 * S2C_VLBWD_CASES=substring selects runs ("causal", "_wg", "_mma").  Exits 77
 * without libcuda.so.1 or a device. */
#include "../attn/patterns.h"
#include "compile_internal.h"
#include "kernel_abi.h"
#include "rt_cuda.h"
#include "s2c/attn_runtime.h"
#include "s2c/codegen.h"
#include "s2c/compile.h"
#include "s2c/layout.h"
#include "s2c/ref.h"

#include <check.h>
#include <cuda.h>
#include <dlfcn.h>
#include "cu_graph.h"
#include "gpu_harness.h"
#include "poison.h"
#include "varlen_seqs.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAXSEQ = 6 };

typedef struct vcase {
    const char *name;
    int pattern;               /* attn_pattern_args index */
    s2_dtype dt;
    int head_dim;
    int n, lens[MAXSEQ];
    int gap;                   /* rows between two sequences (never written) */
    bool graph;                /* also the captured graph with device records */
} vcase;

static const vcase cases[] = {
    {"packed_causal_bf16_d64", 0, S2_DTYPE_BF16, 64, 4, {1, 17, 300, 1000}, 0, true},
    {"packed_causal_f16_d128", 0, S2_DTYPE_F16, 128, 4, {1000, 1, 300, 17}, 0, false},
    {"packed_mergeq16_bf16_d128", 1, S2_DTYPE_BF16, 128, 4, {1, 17, 300, 1000}, 0, false},
    {"packed_gqa_f16_d64", 3, S2_DTYPE_F16, 64, 4, {17, 1000, 1, 300}, 0, false},
    {"gaps_bidir_bf16_d64", 2, S2_DTYPE_BF16, 64, 4, {65, 1, 300, 17}, 5, false},
};
enum { NUM_CASES = sizeof cases / sizeof cases[0], NUM_RUNS = 2 * NUM_CASES };

typedef struct run_result {
    bool ran, ok, wg, ds, graph;
    double err[3];             /* direct run: dq, dk, dv */
    double plan_err[3];
    uint64_t seed;
} run_result;

static run_result results[NUM_RUNS];
static uint64_t base_seed;
static s2_arch dev_arch;

#define OK(ctx, call) ck_assert_msg((call) == S2_OK, "%s: %s", #call, s2_ctx_message(ctx))

static bool ref_mask(const void *user, int q_head, int64_t qpos, int64_t kpos)
{
    return s2_token_kept((const s2_pattern *)user, q_head, qpos, kpos);
}

/* Packed rows: sequence i at the rows after sequence i - 1 and the gap. */
static int64_t make_seqs(const vcase *c, s2_attn_seq *seqs, int32_t *cu)
{
    int64_t r = 0;
    for (int i = 0; i < c->n; i++) {
        seqs[i] = (s2_attn_seq){(int32_t)r, c->lens[i], (int32_t)r, c->lens[i]};
        cu[i] = (int32_t)r;
        r += c->lens[i] + (i + 1 < c->n ? c->gap : 0);
    }
    cu[c->n] = (int32_t)r;
    return r;
}

/* A view of t from token row `row` on (batch index 0). */
static s2_tensor at_row(const s2_tensor *t, int64_t row, size_t esize)
{
    s2_tensor v = *t;
    v.data = (char *)t->data + (size_t)(row * t->stride[1]) * esize;
    return v;
}

static void compile_pair(s2_ctx *ctx, s2_device *dev, const s2_pattern *p, const vcase *c, bool wg, s2_attn_kernel **fk,
                         s2_attn_kernel **bk)
{
    s2_arch arch = wg ? S2_ARCH_SM90A : dev_arch;
    s2_kspec fs = {.kind = S2_KERNEL_FWD, .dtype = c->dt, .head_dim = c->head_dim, .arch = arch};
    s2_kspec bs = {.kind = S2_KERNEL_BWD, .dtype = c->dt, .head_dim = c->head_dim, .arch = arch,
                   .bwd_wgmma = wg ? 1 : -1};
    s2_kspec *specs[2] = {&fs, &bs};
    s2_attn_kernel **out[2] = {fk, bk};
    for (int i = 0; i < 2; i++) {
        s2_artifact *art = NULL;
        OK(ctx, s2_compile_kspec1(ctx, p, specs[i], S2_CUBIN_AUTO, &art));
        OK(ctx, s2_attn_load(ctx, dev, art->cubin, art->cubin_size, NULL, c->dt, c->head_dim, out[i]));
        s2_artifact_free(art);
    }
}

/* ---- comparison ---- */

typedef struct outs {
    s2t_tensor t[3];           /* dq, dk, dv */
} outs;

/* Relative Frobenius error over the rows of the sequences (mine[r]); every
 * other row must be poison (*bad counts it, and NaN inside). */
static double compare(const s2t_tensor *x, const double *ref, int64_t rows, int heads, int D, const uint8_t *mine,
                      int64_t *bad)
{
    double num = 0, den = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int h = 0; h < heads; h++)
            for (int d = 0; d < D; d++) {
                size_t i = (size_t)(r * x->t.stride[1] + h * x->t.stride[2] + d);
                if (!mine[r]) {
                    *bad += x->host[i] != S2T_POISON16;
                    continue;
                }
                double g = s2_tensor_get(&x->t, 0, r, h, d), y = ref[((size_t)r * heads + h) * D + d];
                *bad += isnan(g);
                num += (g - y) * (g - y);
                den += y * y;
            }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void outs_new(outs *o, const vcase *c, int64_t rows, int H, int HK)
{
    s2t_tensor_new(&o->t[0], c->dt, false, 1, rows, H, c->head_dim, 0);
    s2t_tensor_new(&o->t[1], c->dt, false, 1, rows, HK, c->head_dim, 0);
    s2t_tensor_new(&o->t[2], c->dt, false, 1, rows, HK, c->head_dim, 0);
}

static void outs_upload(s2_ctx *ctx, s2_device *dev, outs *o)
{
    for (int i = 0; i < 3; i++)
        s2t_tensor_upload(ctx, dev, &o->t[i]);
}

static void outs_download(s2_ctx *ctx, s2_device *dev, outs *o)
{
    for (int i = 0; i < 3; i++)
        OK(ctx, s2_memcpy_d2h(ctx, dev, o->t[i].host, o->t[i].dev, o->t[i].elems * 2));
}

static bool outs_equal(const outs *a, const outs *b)
{
    for (int i = 0; i < 3; i++)
        if (memcmp(a->t[i].host, b->t[i].host, a->t[i].elems * 2) != 0)
            return false;
    return true;
}

static void run_case(int run)
{
    const vcase *c = &cases[run / 2];
    bool wg = run % 2 == 0;
    run_result *res = &results[run];
    char label[128];
    snprintf(label, sizeof label, "%s_%s", c->name, wg ? "wg" : "mma");
    const char *filter = getenv("S2C_VLBWD_CASES");
    if ((filter && !strstr(label, filter)) || (wg && dev_arch != S2_ARCH_SM90A))
        return;
    res->ran = true;
    res->wg = wg;
    res->seed = base_seed + (uint64_t)run * 7919u;
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    OK(ctx, s2_device_open(ctx, 0, &dev));
    void *stream = NULL;
    OK(ctx, s2_stream_create(ctx, dev, &stream));
    s2_local_stride_args pa;
    attn_pattern_args(c->pattern, &pa);
    s2_pattern_set *set = NULL;
    OK(ctx, s2_pattern_from_args(ctx, &pa, &set));
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    const int H = p->heads, HK = p->kv_heads, D = c->head_dim;
    s2_attn_kernel *fk = NULL, *bk = NULL;
    compile_pair(ctx, dev, p, c, wg, &fk, &bk);

    s2_attn_seq seqs[MAXSEQ];
    int32_t cu[MAXSEQ + 1];
    const int64_t rows = make_seqs(c, seqs, cu);
    uint8_t *mine = malloc((size_t)rows);
    ck_assert_ptr_nonnull(mine);
    s2t_seq_rows(seqs, c->n, mine, rows);

    /* inputs: every row finite (the TMA kernels may read gap rows) */
    s2t_tensor q, kt, v, o, dO;
    s2t_tensor_new(&q, c->dt, false, 1, rows, H, D, 0);
    s2t_tensor_new(&kt, c->dt, false, 1, rows, HK, D, 0);
    s2t_tensor_new(&v, c->dt, false, 1, rows, HK, D, 0);
    s2t_tensor_new(&o, c->dt, false, 1, rows, H, D, 0);
    s2t_tensor_new(&dO, c->dt, false, 1, rows, H, D, 0);
    s2_tensor_fill_random(&q.t, q.ext, res->seed, -1.5, 1.5);
    s2_tensor_fill_random(&kt.t, kt.ext, res->seed + 1, -1.5, 1.5);
    s2_tensor_fill_random(&v.t, v.ext, res->seed + 2, -1.0, 1.0);
    s2_tensor_fill_random(&dO.t, dO.ext, res->seed + 3, -1.0, 1.0);
    s2_tensor_fill(&o.t, o.ext, 0.0);
    s2t_tensor *ins[5] = {&q, &kt, &v, &o, &dO};
    for (int i = 0; i < 5; i++)
        s2t_tensor_upload(ctx, dev, ins[i]);
    size_t nlse = (size_t)H * (size_t)rows;
    s2_devptr d_lse = s2t_dev_alloc_poisoned(ctx, dev, nlse * 4);

    /* the GPU forward: o and lse the backward takes */
    s2_attn_seqs *sq = NULL;
    OK(ctx, s2_attn_seqs_new(ctx, dev, seqs, c->n, &sq));
    s2_attn_fwd_args fa = {.batch = c->n, .q_len = rows, .kv_len = rows, .heads = H, .kv_heads = HK, .head_dim = D,
                           .dtype = c->dt, .q = q.dev, .k = kt.dev, .v = v.dev, .o = o.dev, .lse = d_lse, .seqs = sq};
    const s2t_tensor *fts[4] = {&q, &kt, &v, &o};
    int64_t *fst[4] = {fa.q_stride, fa.k_stride, fa.v_stride, fa.o_stride};
    for (int i = 0; i < 4; i++)
        memcpy(fst[i], fts[i]->t.stride, 3 * sizeof(int64_t));
    OK(ctx, s2_attn_forward(ctx, fk, stream, &fa));
    OK(ctx, s2_stream_synchronize(ctx, dev, stream));
    OK(ctx, s2_memcpy_d2h(ctx, dev, o.host, o.dev, o.elems * 2));
    float *lse = malloc(nlse * sizeof *lse);
    ck_assert_ptr_nonnull(lse);
    OK(ctx, s2_memcpy_d2h(ctx, dev, lse, d_lse, nlse * 4));

    /* the reference, sequence by sequence, from the GPU's o and lse */
    double *ref[3];
    for (int i = 0; i < 3; i++)
        ck_assert_ptr_nonnull(ref[i] = calloc((size_t)rows * (size_t)(i ? HK : H) * (size_t)D, sizeof(double)));
    s2_tensor rt[3] = {s2_tensor_bshd(ref[0], S2_DTYPE_F64, rows, H, D), s2_tensor_bshd(ref[1], S2_DTYPE_F64, rows, HK, D),
                       s2_tensor_bshd(ref[2], S2_DTYPE_F64, rows, HK, D)};
    float *sl = malloc(nlse * sizeof *sl);
    ck_assert_ptr_nonnull(sl);
    for (int i = 0; i < c->n; i++) {
        const s2_attn_seq *s = &seqs[i];
        if (!s->q_len)
            continue;
        for (int h = 0; h < H; h++)
            for (int r = 0; r < s->q_len; r++)
                sl[(size_t)h * s->q_len + r] = lse[(size_t)h * rows + s->q_start + r];
        s2_ref_problem rp = {.batch = 1, .heads = H, .kv_heads = HK, .head_dim = D, .q_len = s->q_len,
                             .kv_len = s->kv_len, .causal = p->causal, .mask = ref_mask, .mask_user = p};
        s2_tensor vq = at_row(&q.t, s->q_start, 2), vk = at_row(&kt.t, s->k_start, 2), vv = at_row(&v.t, s->k_start, 2);
        s2_tensor vo = at_row(&o.t, s->q_start, 2), vd = at_row(&dO.t, s->q_start, 2);
        s2_tensor r0 = at_row(&rt[0], s->q_start, 8), r1 = at_row(&rt[1], s->k_start, 8), r2 = at_row(&rt[2], s->k_start, 8);
        OK(ctx, s2_ref_backward(ctx, &rp, &vq, &vk, &vv, &vo, &vd, sl, NULL, &r0, &r1, &r2));
    }

    /* direct launches, plain workspace: twice, bitwise */
    outs run1, run2, viaplan;
    outs_new(&run1, c, rows, H, HK);
    outs_new(&run2, c, rows, H, HK);
    outs_new(&viaplan, c, rows, H, HK);
    outs_upload(ctx, dev, &run1);
    outs_upload(ctx, dev, &run2);
    outs_upload(ctx, dev, &viaplan);
    size_t ws_bytes = s2_attn_bwd_workspace_bytes(1, H, rows);
    s2_devptr ws = s2t_dev_alloc_poisoned(ctx, dev, ws_bytes);
    s2_attn_bwd_args ba = {.batch = c->n, .q_len = rows, .kv_len = rows, .heads = H, .kv_heads = HK, .head_dim = D,
                           .dtype = c->dt, .q = q.dev, .k = kt.dev, .v = v.dev, .o = o.dev, .d_o = dO.dev,
                           .lse = d_lse, .workspace = ws, .workspace_bytes = ws_bytes, .seqs = sq};
    int64_t *bst[8] = {ba.q_stride, ba.k_stride, ba.v_stride, ba.o_stride, ba.do_stride, ba.dq_stride, ba.dk_stride,
                       ba.dv_stride};
    const s2t_tensor *bts[5] = {&q, &kt, &v, &o, &dO};
    for (int i = 0; i < 8; i++)
        memcpy(bst[i], i < 5 ? bts[i]->t.stride : run1.t[i - 5].t.stride, 3 * sizeof(int64_t));
    outs *direct[2] = {&run1, &run2};
    for (int j = 0; j < 2; j++) {
        ba.dq = direct[j]->t[0].dev, ba.dk = direct[j]->t[1].dev, ba.dv = direct[j]->t[2].dev;
        OK(ctx, s2_attn_backward(ctx, bk, stream, &ba));
    }
    OK(ctx, s2_stream_synchronize(ctx, dev, stream));
    outs_download(ctx, dev, &run1);
    outs_download(ctx, dev, &run2);

    /* a plan: its workspace holds the dS tiles (NAME_dqds where the module has it) */
    s2_attn_plan *bplan = NULL;
    OK(ctx, s2_attn_plan_new(ctx, bk, &bplan));
    s2_attn_bwd_args pa_ = ba;
    pa_.workspace = 0, pa_.workspace_bytes = 0;
    OK(ctx, s2_attn_plan_add_backward(ctx, bplan, &pa_));
    OK(ctx, s2_attn_plan_prepare(ctx, bplan, stream));
    pa_.dq = viaplan.t[0].dev, pa_.dk = viaplan.t[1].dev, pa_.dv = viaplan.t[2].dev;
    OK(ctx, s2_attn_plan_backward(ctx, bplan, stream, &pa_));
    OK(ctx, s2_stream_synchronize(ctx, dev, stream));
    outs_download(ctx, dev, &viaplan);
    res->ds = s2_manifest_kernel_fn(s2_attn_kernel_desc(bk), S2_ROLE_BWD_DQDS) != NULL;

    int64_t bad = 0, pbad = 0;
    const int heads_of[3] = {H, HK, HK};
    for (int i = 0; i < 3; i++) {
        res->err[i] = compare(&run1.t[i], ref[i], rows, heads_of[i], D, mine, &bad);
        res->plan_err[i] = compare(&viaplan.t[i], ref[i], rows, heads_of[i], D, mine, &pbad);
    }
    double tol = c->dt == S2_DTYPE_BF16 ? 2e-2 : 5e-3;
    bool same = outs_equal(&run1, &run2);
    res->ok = !bad && !pbad && same;
    for (int i = 0; i < 3; i++)
        res->ok = res->ok && res->err[i] <= tol && res->plan_err[i] <= tol;

    /* the captured graph: records from cu_seqlens on the device, forward then backward */
    bool graph_same = true;
    if (c->graph) {
        res->graph = true;
        graph_api g;
        graph_api_load(&g);
        s2_devptr cu_dev = 0;
        OK(ctx, s2_mem_alloc(ctx, dev, (size_t)(c->n + 1) * 4, &cu_dev));
        OK(ctx, s2_memcpy_h2d(ctx, dev, cu_dev, cu, (size_t)(c->n + 1) * 4));
        int64_t max_len = 0;
        for (int i = 0; i < c->n; i++)
            max_len = c->lens[i] > max_len ? c->lens[i] : max_len;
        s2_attn_seqs *sd = NULL;
        OK(ctx, s2_attn_seqs_new_device(ctx, dev, c->n, max_len, &sd));
        /* gaps: cu_seqlens alone cannot say them; the graph case is packed */
        ck_assert_int_eq(c->gap, 0);
        s2_attn_plan *fplan = NULL, *gplan = NULL;
        s2_attn_fwd_args gfa = fa;
        gfa.seqs = sd;
        s2_attn_bwd_args gba = pa_;
        gba.seqs = sd;
        outs ingraph;
        outs_new(&ingraph, c, rows, H, HK);
        outs_upload(ctx, dev, &ingraph);
        gba.dq = ingraph.t[0].dev, gba.dk = ingraph.t[1].dev, gba.dv = ingraph.t[2].dev;
        OK(ctx, s2_attn_plan_new(ctx, fk, &fplan));
        OK(ctx, s2_attn_plan_add_forward(ctx, fplan, &gfa));
        OK(ctx, s2_attn_plan_prepare(ctx, fplan, stream));
        OK(ctx, s2_attn_plan_new(ctx, bk, &gplan));
        OK(ctx, s2_attn_plan_add_backward(ctx, gplan, &gba));
        OK(ctx, s2_attn_plan_prepare(ctx, gplan, stream));
        OK(ctx, s2_stream_synchronize(ctx, dev, stream));
        CU_OK(g.push((CUcontext)s2_device_cu_context(dev)));
        CU_OK(g.begin((CUstream)stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
        s2_status st = s2_attn_seqs_write_cu(ctx, fk, sd, cu_dev, 0, stream);
        if (st == S2_OK)
            st = s2_attn_plan_forward(ctx, fplan, stream, &gfa);
        if (st == S2_OK)
            st = s2_attn_plan_backward(ctx, gplan, stream, &gba);
        char msg[512];
        snprintf(msg, sizeof msg, "%s", s2_ctx_message(ctx));
        CUgraph graph = NULL;
        CUgraphExec exec = NULL;
        CUresult end = g.end((CUstream)stream, &graph);
        CUresult inst = end == CUDA_SUCCESS ? g.instantiate(&exec, graph, 0) : end;
        CUresult launched = inst == CUDA_SUCCESS ? g.launch(exec, (CUstream)stream) : inst;
        CUcontext popped;
        g.pop(&popped);
        ck_assert_msg(st == S2_OK, "%s: inside the capture: %s", label, msg);
        ck_assert_msg(end == CUDA_SUCCESS && inst == CUDA_SUCCESS && launched == CUDA_SUCCESS,
                      "%s: graph end %d, instantiate %d, launch %d", label, (int)end, (int)inst, (int)launched);
        OK(ctx, s2_stream_synchronize(ctx, dev, stream));
        outs_download(ctx, dev, &ingraph);
        graph_same = outs_equal(&ingraph, &viaplan);
        res->ok = res->ok && graph_same;
        CU_OK(g.exec_destroy(exec));
        CU_OK(g.destroy(graph));
        s2_attn_plan_free(fplan);
        s2_attn_plan_free(gplan);
        s2_attn_seqs_free(sd);
        for (int i = 0; i < 3; i++)
            s2t_tensor_free(ctx, dev, &ingraph.t[i]);
        s2_mem_free(ctx, dev, cu_dev);
    }

    printf("%s seed %llu: dq/dk/dv err %.2e %.2e %.2e (plan%s %.2e %.2e %.2e), tol %.0e, rerun %s%s: %s\n", label,
           (unsigned long long)res->seed, res->err[0], res->err[1], res->err[2], res->ds ? ", dS path" : "",
           res->plan_err[0], res->plan_err[1], res->plan_err[2], tol, same ? "bitwise" : "DIFFERS",
           c->graph ? (graph_same ? ", graph = plan bitwise" : ", graph DIFFERS") : "", res->ok ? "PASS" : "FAIL");
    ck_assert_msg(!bad && !pbad, "%s seed %llu: %lld / %lld elements NaN or written outside the sequences", label,
                  (unsigned long long)res->seed, (long long)bad, (long long)pbad);
    ck_assert_msg(same, "%s: two runs differ", label);
    ck_assert_msg(graph_same, "%s: the graph's replay differs from the plan's launch", label);
    ck_assert_msg(res->ok, "%s seed %llu: error above %.0e", label, (unsigned long long)res->seed, tol);

    s2_attn_plan_free(bplan);
    for (int i = 0; i < 3; i++) {
        s2t_tensor_free(ctx, dev, &run1.t[i]);
        s2t_tensor_free(ctx, dev, &run2.t[i]);
        s2t_tensor_free(ctx, dev, &viaplan.t[i]);
        free(ref[i]);
    }
    for (int i = 0; i < 5; i++)
        s2t_tensor_free(ctx, dev, ins[i]);
    s2_mem_free(ctx, dev, ws);
    s2_mem_free(ctx, dev, d_lse);
    free(sl);
    free(lse);
    free(mine);
    s2_attn_seqs_free(sq);
    s2_attn_kernel_free(fk);
    s2_attn_kernel_free(bk);
    s2_stream_destroy(ctx, dev, stream);
    s2_pattern_set_free(set);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}

START_TEST(varlen_backward_matches_reference)
{
    run_case(_i);
}
END_TEST

static void print_summary(void)
{
    printf("\n%-30s %-4s %-5s %4s %9s %9s %9s %s\n", "case", "body", "dtype", "D", "dq", "dk", "dv", "result");
    for (int r = 0; r < NUM_RUNS; r++) {
        const run_result *x = &results[r];
        const vcase *c = &cases[r / 2];
        if (x->ran)
            printf("%-30s %-4s %-5s %4d %9.2e %9.2e %9.2e %s\n", c->name, x->wg ? "wg" : "mma", s2_dtype_name(c->dt),
                   c->head_dim, x->err[0], x->err[1], x->err[2], x->ok ? "PASS" : "FAIL");
    }
}

int main(void)
{
    s2t_gpu g;
    int rc = s2t_gpu_start("compiling for", NULL, &g);
    if (rc != 0)
        return rc;
    dev_arch = g.arch;
    base_seed = g.seed;
    Suite *s = suite_create("varlen_bwd_gpu");
    TCase *tc = tcase_create("varlen_bwd");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, varlen_backward_matches_reference, 0, NUM_RUNS);
    suite_add_tcase(s, tc);
    int failed = s2t_run_nofork(s);
    print_summary();
    return failed ? 1 : 0;
}
