/* The context-parallel executor on two GPUs: one process per GPU (the parent
 * forks them before any CUDA call; each sees one device through
 * CUDA_VISIBLE_DEVICES; rank 0 makes the NCCL id and pipes it to rank 1).
 * Per sharding (contiguous, zigzag), each rank's forward (o, lse) and
 * gradients (dq, dk, dv) of its tokens equal the single-GPU kernels' on the
 * same inputs (computed on each rank) to bf16 tolerance, every output
 * poisoned (NaN) first; a second backward is bitwise equal to the first.
 * The shape at 8K tokens: 32 heads, 8 kv heads, local 16, stride
 * 8, block 64, bf16, D 128.  Exits 77 with fewer than two GPUs or without
 * libnccl.  Run with NCCL_NVLS_ENABLE=0 (set here too). */
#include "compile_internal.h"
#include "s2c/cp.h"
#include "s2c/attn_runtime.h"
#include "s2c/pattern.h"
#include "s2c/runtime.h"
#include "../../examples/common/shard_rows.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { H = 32, HK = 8, D = 128 };
static const int64_t S = 8192;
static const double TOL_REL = 1.5e-2;   /* relative Frobenius error, bf16 outputs */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float uni(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

#define CHECK(call)                                                                                           \
    do {                                                                                                      \
        s2_status st_ = (call);                                                                               \
        if (st_ != S2_OK) {                                                                                   \
            fprintf(stderr, "rank %d: %s: %s: %s\n", rank, #call, s2_status_name(st_), s2_ctx_message(ctx)); \
            return 1;                                                                                         \
        }                                                                                                     \
    } while (0)

static int report(int rank, const char *sh, const char *what, double err, int64_t nans, int *fails)
{
    bool ok = err <= TOL_REL && nans == 0 && isfinite(err);
    printf("rank %d %-10s %-3s %s rel_err %.3e (tol %.1e) nans %lld\n", rank, sh, what, ok ? "PASS" : "FAIL", err,
           TOL_REL, (long long)nans);
    *fails += !ok;
    return ok;
}

/* The executor's own count of the bytes it posted equals the plan's figure; a timed forward and backward give
 * phases inside the step, in the order the streams impose (received keys' work after the receive). */
static int check_counts_and_timeline(s2_ctx *ctx, s2_cp_exec *e, void *stream, int rank, const char *shn,
                                     const s2_attn_fwd_args *a, const s2_attn_bwd_args *g)
{
    s2_cp_traffic tf, tb;
    s2_cp_rank_stats ps;
    s2_cp_timeline tl[2];
    if (s2_cp_exec_traffic(ctx, e, false, &tf) != S2_OK || s2_cp_exec_traffic(ctx, e, true, &tb) != S2_OK ||
        s2_cp_plan_rank_stats(ctx, s2_cp_exec_plan(e, false), rank, D, S2_DTYPE_BF16, &ps) != S2_OK ||
        s2_cp_exec_last_timeline(ctx, e, false, &tl[0]) != S2_ERR_INVALID ||   /* off by default */
        s2_cp_exec_set_timing(ctx, e, true) != S2_OK || s2_cp_forward(ctx, e, stream, a) != S2_OK ||
        s2_cp_backward(ctx, e, stream, g) != S2_OK || s2_cp_exec_last_timeline(ctx, e, false, &tl[0]) != S2_OK ||
        s2_cp_exec_last_timeline(ctx, e, true, &tl[1]) != S2_OK) {
        printf("rank %d %-10s counts/timeline FAIL: %s\n", rank, shn, s2_ctx_message(ctx));
        return 1;
    }
    /* one message per peer and phase: with two ranks, the backward sends its K/V blocks and the partials of the
     * blocks it received, and receives the peer's blocks and the partials of the blocks it sent */
    bool bytes = tf.send_bytes == ps.send_bytes && tf.recv_bytes == ps.recv_bytes && tf.calls == 1 && tb.calls == 2 &&
                 (tf.recvs > 0) == (ps.recv_blocks > 0) && tf.sends == (tf.send_bytes > 0) &&
                 tf.recvs == (tf.recv_bytes > 0) && tb.sends == (tb.send_bytes > 0) + (tb.reduce_bytes > 0) &&
                 tb.recvs == (tb.recv_bytes > 0) + (tb.send_bytes > 0);
    printf("rank %d %-10s messages: forward %lld sends %lld receives, backward %lld %lld, %.0f bytes returned\n", rank,
           shn, (long long)tf.sends, (long long)tf.recvs, (long long)tb.sends, (long long)tb.recvs, tb.reduce_bytes);
    printf("rank %d %-10s bytes posted sent %.0f recv %.0f, plan %.0f %.0f, ring %.0f: %s\n", rank, shn,
           tf.send_bytes, tf.recv_bytes, ps.send_bytes, ps.recv_bytes, ps.ring_bytes, bytes ? "PASS" : "FAIL");
    bool order = true;
    const float eps = 1e-3f;
    for (int w = 0; w < 2; w++) {
        const s2_cp_timeline *t = &tl[w];
        for (int i = 0; i < S2_CP_PHASES; i++)
            if (t->start_ms[i] >= 0)
                order = order && t->start_ms[i] <= t->end_ms[i] + eps && t->end_ms[i] <= t->step_ms + eps;
        order = order && t->step_ms > 0 && t->visible_comm_ms <= t->comm_ms + eps && t->comm_ms <= t->step_ms + eps;
        order = order && t->start_ms[S2_CP_PHASE_EXCHANGE] >= 0;
        printf("rank %d %-10s timeline %s step %.3f ms, communication %.3f ms, visible %.3f ms\n", rank, shn,
               w ? "backward" : "forward", t->step_ms, t->comm_ms, t->visible_comm_ms);
    }
    const s2_cp_timeline *f = &tl[0], *b = &tl[1];
    for (int w = 0; w < 2; w++) {   /* packed before the messages; unpacked before received keys are read */
        const s2_cp_timeline *t = &tl[w];
        float next = t->start_ms[w ? S2_CP_PHASE_BACKWARD : S2_CP_PHASE_REMOTE];   /* none: a rank receiving nothing */
        if (t->start_ms[S2_CP_PHASE_UNPACK] >= 0)
            order = order && t->start_ms[S2_CP_PHASE_EXCHANGE] >= t->end_ms[S2_CP_PHASE_PACK] - eps &&
                    t->start_ms[S2_CP_PHASE_UNPACK] >= t->end_ms[S2_CP_PHASE_EXCHANGE] - eps &&
                    (next < 0 || next >= t->end_ms[S2_CP_PHASE_UNPACK] - eps);
    }
    if (f->start_ms[S2_CP_PHASE_REMOTE] >= 0)
        order = order && f->start_ms[S2_CP_PHASE_REMOTE] >= f->end_ms[S2_CP_PHASE_EXCHANGE] - eps &&
                f->start_ms[S2_CP_PHASE_COMBINE] >= f->end_ms[S2_CP_PHASE_REMOTE] - eps;
    order = order && b->start_ms[S2_CP_PHASE_BACKWARD] >= b->end_ms[S2_CP_PHASE_EXCHANGE] - eps &&
            b->start_ms[S2_CP_PHASE_BACKWARD] >= 0 && f->start_ms[S2_CP_PHASE_BACKWARD] < 0;
    if (b->start_ms[S2_CP_PHASE_REDUCE] >= 0)
        order = order && b->start_ms[S2_CP_PHASE_REDUCE] >= b->end_ms[S2_CP_PHASE_GATHER] - eps &&
                b->start_ms[S2_CP_PHASE_COPY_OUT] >= b->end_ms[S2_CP_PHASE_REDUCE] - eps;
    printf("rank %d %-10s timeline phases %s\n", rank, shn, order ? "PASS" : "FAIL");
    s2_cp_exec_set_timing(ctx, e, false);
    return !bytes + !order;
}

static int run_rank(int rank, int rfd, int wfd)
{
    s2_ctx *ctx = s2_ctx_new();
    int n = 0, v = 0;
    bool can = s2_device_count(ctx, &n) == S2_OK && s2_nccl_version(ctx, &v) == S2_OK;
    s2_cp_id id;
    if (rank == 0) {
        if (can)
            CHECK(s2_cp_unique_id(ctx, &id));
        char flag = can;
        if (write(wfd, &flag, 1) != 1 || (can && write(wfd, &id, sizeof id) != (ssize_t)sizeof id))
            return 1;
    } else {
        char flag = 0;
        if (read(rfd, &flag, 1) != 1 || !flag)
            return 77;
        if (read(rfd, &id, sizeof id) != (ssize_t)sizeof id)
            return 1;
    }
    if (!can) {
        printf("SKIP: %s\n", s2_ctx_message(ctx));
        return 77;
    }
    s2_device *dev = NULL;
    CHECK(s2_device_open(ctx, 0, &dev));
    const s2_device_info *info = s2_device_get_info(dev);
    s2_arch arch;
    CHECK(s2_arch_for_device(info->cc_major, info->cc_minor, &arch));
    s2_local_stride_args la;
    s2_local_stride_args_default(&la);
    la.name = "cp_issue33", la.num_heads = H, la.num_kv_heads = HK, la.block_size = 64, la.local_blocks = 16;
    la.vert_stride = 8, la.head_sliding_offset = 1, la.causal = true, la.max_seq_len = 0;
    s2_pattern_set *set = NULL;
    CHECK(s2_pattern_from_args(ctx, &la, &set));
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_artifact *art[2] = {0};
    s2_attn_module *mod[2] = {0};
    s2_attn_kernel *k[2] = {0};
    for (int i = 0; i < 2; i++) {
        s2_kspec spec = {.kind = i ? S2_KERNEL_BWD : S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = D,
                         .arch = arch};
        CHECK(s2_compile_kspec1(ctx, p, &spec, S2_CUBIN_AUTO, &art[i]));
        CHECK(s2_attn_module_load(ctx, dev, art[i]->cubin, art[i]->cubin_size, &mod[i]));
        CHECK(s2_attn_find(ctx, mod[i], p->name, S2_DTYPE_BF16, D, &k[i]));
    }
    /* the same inputs on both ranks */
    size_t nq = (size_t)S * H * D, nk = (size_t)S * HK * D;
    uint16_t *hq = malloc(nq * 2), *hk = malloc(nk * 2), *hv = malloc(nk * 2), *hdo = malloc(nq * 2);
    uint16_t *ro = malloc(nq * 2), *rdq = malloc(nq * 2), *rdk = malloc(nk * 2), *rdv = malloc(nk * 2);
    for (size_t i = 0; i < nq; i++)
        hq[i] = ex_f2bf(uni()), hdo[i] = ex_f2bf(uni());
    for (size_t i = 0; i < nk; i++)
        hk[i] = ex_f2bf(uni()), hv[i] = ex_f2bf(uni());
    /* the single-GPU result */
    s2_devptr q = ex_upload(ctx, dev, hq, nq * 2), kk = ex_upload(ctx, dev, hk, nk * 2), vv = ex_upload(ctx, dev, hv, nk * 2);
    s2_devptr dO = ex_upload(ctx, dev, hdo, nq * 2), o = ex_upload(ctx, dev, NULL, nq * 2), lse = ex_upload(ctx, dev, NULL, (size_t)H * S * 4);
    s2_devptr dq = ex_upload(ctx, dev, NULL, nq * 2), dk = ex_upload(ctx, dev, NULL, nk * 2), dv = ex_upload(ctx, dev, NULL, nk * 2);
    size_t wb = 0;
    CHECK(s2_attn_backward_workspace(ctx, k[1], 1, S, S, &wb, NULL));
    s2_devptr ws = ex_upload(ctx, dev, NULL, wb);
    s2_attn_fwd_args fa = {.batch = 1, .q_len = S, .kv_len = S, .heads = H, .kv_heads = HK, .head_dim = D,
                           .dtype = S2_DTYPE_BF16, .q = q, .k = kk, .v = vv, .o = o, .lse = lse};
    s2_attn_fwd_args_bshd(&fa);
    CHECK(s2_attn_forward(ctx, k[0], NULL, &fa));
    s2_attn_bwd_args ba = {.batch = 1, .q_len = S, .kv_len = S, .heads = H, .kv_heads = HK, .head_dim = D,
                           .dtype = S2_DTYPE_BF16, .q = q, .k = kk, .v = vv, .o = o, .d_o = dO, .lse = lse,
                           .dq = dq, .dk = dk, .dv = dv, .workspace = ws, .workspace_bytes = wb};
    s2_attn_bwd_args_bshd(&ba);
    CHECK(s2_attn_backward(ctx, k[1], NULL, &ba));
    CHECK(s2_memcpy_d2h(ctx, dev, ro, o, nq * 2));
    CHECK(s2_memcpy_d2h(ctx, dev, rdq, dq, nq * 2));
    CHECK(s2_memcpy_d2h(ctx, dev, rdk, dk, nk * 2));
    CHECK(s2_memcpy_d2h(ctx, dev, rdv, dv, nk * 2));
    s2_devptr all[] = {q, kk, vv, dO, o, lse, dq, dk, dv, ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        s2_mem_free(ctx, dev, all[i]);

    s2_cp_comm *comm = NULL;
    CHECK(s2_cp_comm_init(ctx, dev, &id, 2, rank, &comm));
    void *stream = NULL;
    CHECK(s2_stream_create(ctx, dev, &stream));
    int fails = 0;
    for (int sh = 0; sh < 2; sh++) {
        const char *shn = sh ? "zigzag" : "contiguous";
        s2_cp_exec_args ea = {.seq_len = S, .sharding = (s2_cp_sharding)sh, .batch = 1};
        s2_cp_exec *e = NULL;
        CHECK(s2_cp_exec_new(ctx, comm, k[0], k[1], &ea, &e));
        int64_t st[2], len[2];
        int nr = s2_cp_plan_shard(s2_cp_exec_plan(e, false), rank, st, len);
        int64_t own = s2_cp_exec_sizes(e)->own_tokens;
        size_t sq = (size_t)own * H * D, sk = (size_t)own * HK * D;
        uint16_t *b = malloc(sq * 2), *b2 = malloc(sq * 2);
        ex_shard_gather(b, hq, st, len, nr, (size_t)H * D);
        s2_devptr lq = ex_upload(ctx, dev, b, sq * 2), ldo = (ex_shard_gather(b, hdo, st, len, nr, (size_t)H * D), ex_upload(ctx, dev, b, sq * 2));
        ex_shard_gather(b, hk, st, len, nr, (size_t)HK * D);
        s2_devptr lk = ex_upload(ctx, dev, b, sk * 2);
        ex_shard_gather(b, hv, st, len, nr, (size_t)HK * D);
        s2_devptr lv = ex_upload(ctx, dev, b, sk * 2);
        s2_devptr lo = ex_upload(ctx, dev, NULL, sq * 2), llse = ex_upload(ctx, dev, NULL, (size_t)H * own * 4);
        s2_devptr ldq = ex_upload(ctx, dev, NULL, sq * 2), ldk = ex_upload(ctx, dev, NULL, sk * 2), ldv = ex_upload(ctx, dev, NULL, sk * 2);
        s2_attn_fwd_args a = fa;
        a.q_len = a.kv_len = own, a.q = lq, a.k = lk, a.v = lv, a.o = lo, a.lse = llse;
        s2_attn_fwd_args_bshd(&a);
        CHECK(s2_cp_forward(ctx, e, stream, &a));
        CHECK(s2_stream_synchronize(ctx, dev, stream));
        int64_t nans = 0;
        CHECK(s2_memcpy_d2h(ctx, dev, b, lo, sq * 2));
        report(rank, shn, "o", ex_shard_rel_err(b, ro, st, len, nr, (size_t)H * D, &nans, NULL), nans, &fails);
        s2_attn_bwd_args g = ba;
        g.q_len = g.kv_len = own, g.q = lq, g.k = lk, g.v = lv, g.o = lo, g.d_o = ldo, g.lse = llse;
        g.dq = ldq, g.dk = ldk, g.dv = ldv, g.workspace = 0, g.workspace_bytes = 0;
        s2_attn_bwd_args_bshd(&g);
        CHECK(s2_cp_backward(ctx, e, stream, &g));
        CHECK(s2_stream_synchronize(ctx, dev, stream));
        struct { const char *n; s2_devptr d; const uint16_t *ref; int heads; } outs[3] = {
            {"dq", ldq, rdq, H}, {"dk", ldk, rdk, HK}, {"dv", ldv, rdv, HK}};
        uint16_t *first[3];
        for (int i = 0; i < 3; i++) {
            size_t bytes = (size_t)own * outs[i].heads * D * 2;
            first[i] = malloc(bytes);
            CHECK(s2_memcpy_d2h(ctx, dev, first[i], outs[i].d, bytes));
            nans = 0;
            report(rank, shn, outs[i].n, ex_shard_rel_err(first[i], outs[i].ref, st, len, nr, (size_t)outs[i].heads * D, &nans, NULL), nans,
                   &fails);
            s2_memset_d8(ctx, dev, outs[i].d, 0xff, bytes);
        }
        CHECK(s2_cp_backward(ctx, e, stream, &g));
        CHECK(s2_stream_synchronize(ctx, dev, stream));
        bool same = true;
        for (int i = 0; i < 3; i++) {
            size_t bytes = (size_t)own * outs[i].heads * D * 2;
            CHECK(s2_memcpy_d2h(ctx, dev, b2, outs[i].d, bytes));
            same = same && memcmp(b2, first[i], bytes) == 0;
            free(first[i]);
        }
        printf("rank %d %-10s backward rerun %s (bitwise)\n", rank, shn, same ? "PASS" : "FAIL");
        fails += !same;
        fails += check_counts_and_timeline(ctx, e, stream, rank, shn, &a, &g);
        s2_devptr mine[] = {lq, ldo, lk, lv, lo, llse, ldq, ldk, ldv};
        for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
            s2_mem_free(ctx, dev, mine[i]);
        free(b), free(b2);
        s2_cp_exec_free(e);
    }
    s2_stream_destroy(ctx, dev, stream);
    s2_cp_comm_free(comm);
    for (int i = 0; i < 2; i++)
        s2_attn_module_free(mod[i]), s2_artifact_free(art[i]);
    s2_pattern_set_free(set);
    s2_device_free(dev);
    s2_ctx_free(ctx);
    free(hq), free(hk), free(hv), free(hdo), free(ro), free(rdq), free(rdk), free(rdv);
    return fails ? 1 : 0;
}

int main(void)
{
    setenv("NCCL_NVLS_ENABLE", "0", 1);   /* never NVLink SHARP / multicast */
    int fd[2];
    if (pipe(fd) != 0)
        return 1;
    fflush(stdout);
    pid_t pid[2];
    for (int r = 0; r < 2; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            char vis[16];
            snprintf(vis, sizeof vis, "%d", r);
            setenv("CUDA_VISIBLE_DEVICES", vis, 1);   /* set before this process's first CUDA call */
            int rc = run_rank(r, fd[0], fd[1]);
            fflush(stdout);
            _exit(rc);
        }
    }
    close(fd[0]), close(fd[1]);
    int rc[2] = {1, 1};
    for (int r = 0; r < 2; r++) {
        int w = 0;
        if (pid[r] > 0 && waitpid(pid[r], &w, 0) == pid[r] && WIFEXITED(w))
            rc[r] = WEXITSTATUS(w);
    }
    if (rc[0] == 77 || rc[1] == 77) {
        printf("SKIP: fewer than two GPUs or no libnccl.so.2\n");
        return 77;
    }
    printf("%s\n", rc[0] == 0 && rc[1] == 0 ? "PASS" : "FAIL");
    return rc[0] == 0 && rc[1] == 0 ? 0 : 1;
}
