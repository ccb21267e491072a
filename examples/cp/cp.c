/* Context parallelism over NCCL: one process per GPU runs S2 attention on its
 * shard of one long sequence through the dist API (s2c/cp.h), forward and
 * backward, for both shardings (contiguous, zigzag), and checks it against
 * the single-GPU kernels on the same inputs.
 *
 * The parent forks one child per rank before any CUDA call; each child sees
 * its GPU alone (CUDA_VISIBLE_DEVICES) and rank 0 hands the NCCL unique id to
 * the others through pipes the parent made.  Per rank and sharding it prints
 * the relative error of o, dq, dk, dv against the single-GPU result (with
 * the tolerance), the bytes the executor posted to NCCL (its own count)
 * next to the plan's figure and ring attention's, the median time of the
 * forward and of forward + backward (CUDA events, back-to-back repetitions)
 * against one GPU's, and one timed call's timeline (visible communication).
 *
 *   cp_example [--seq N] [--ranks P] [--reps N]      (defaults 65536, 2, 10)
 *
 * The shape: bf16, D 128, 32 heads, 8 kv heads, block 64, local 16,
 * stride 8, one shift per kv group.  Exits 77 with fewer than P GPUs or
 * without libnccl.so.2; NCCL_NVLS_ENABLE=0 is set for every rank. */
#include "s2c/attn_runtime.h"
#include "s2c/cp.h"
#include "s2c/jit.h"
#include "s2c/pattern.h"
#include "s2c/runtime.h"
#include "../common/shard_rows.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { H = 32, HK = 8, D = 128, MAX_RANKS = 8 };
static const double TOL = 1.5e-2;   /* relative Frobenius error of bf16 outputs against the bf16 single-GPU run */

static int64_t seq = 65536;
static int ranks = 2, reps = 10;

static uint64_t rng = 0x2545f4914f6cdd1dull;   /* the same inputs on every rank */
static uint16_t rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ex_f2bf((float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f);
}

#define CHECK(call)                                                                                           \
    do {                                                                                                      \
        s2_status st_ = (call);                                                                               \
        if (st_ != S2_OK) {                                                                                   \
            fprintf(stderr, "rank %d: %s: %s: %s\n", rank, #call, s2_status_name(st_), s2_ctx_message(ctx)); \
            return 1;                                                                                         \
        }                                                                                                     \
    } while (0)

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One step to time: the single-GPU kernels or the executor, forward and optionally backward. */
typedef struct step {
    s2_attn_kernel *fwd, *bwd;
    s2_cp_exec *e;              /* NULL: the single-GPU kernels */
    s2_attn_fwd_args fa;
    s2_attn_bwd_args ba;
} step;

static s2_status run_step(s2_ctx *ctx, const step *s, void *stream, bool backward)
{
    s2_status st = s->e ? s2_cp_forward(ctx, s->e, stream, &s->fa) : s2_attn_forward(ctx, s->fwd, stream, &s->fa);
    if (st == S2_OK && backward)
        st = s->e ? s2_cp_backward(ctx, s->e, stream, &s->ba) : s2_attn_backward(ctx, s->bwd, stream, &s->ba);
    return st;
}

/* Median over `reps` timed repetitions (after one untimed), ms; every rank runs the same count. */
static s2_status median_ms(s2_ctx *ctx, s2_device *dev, void *stream, const step *s, bool backward, double *med)
{
    s2_event *e0 = NULL, *e1 = NULL;
    double t[256];
    int n = reps < 256 ? reps : 256;
    s2_status st = s2_event_create(ctx, dev, &e0);
    if (st == S2_OK)
        st = s2_event_create(ctx, dev, &e1);
    if (st == S2_OK)
        st = run_step(ctx, s, stream, backward);
    for (int i = 0; st == S2_OK && i < n; i++) {
        float ms = 0;
        if ((st = s2_event_record(ctx, e0, stream)) == S2_OK && (st = run_step(ctx, s, stream, backward)) == S2_OK &&
            (st = s2_event_record(ctx, e1, stream)) == S2_OK)
            st = s2_event_elapsed_ms(ctx, e0, e1, &ms);
        t[i] = ms;
    }
    s2_event_free(e0), s2_event_free(e1);
    if (st == S2_OK) {
        qsort(t, (size_t)n, sizeof t[0], cmp_double);
        *med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    }
    return st;
}

static const char *phase_name[S2_CP_PHASES] = {"copy_in", "exchange", "local",    "remote", "combine", "backward",
                                                "gather",  "reduce",   "copy_out", "pack",   "unpack"};

static void print_timeline(int rank, const char *sh, const char *what, const s2_cp_timeline *t)
{
    printf("rank %d %-10s timeline %-8s step %.3f ms:", rank, sh, what, t->step_ms);
    for (int i = 0; i < S2_CP_PHASES; i++)
        if (t->start_ms[i] >= 0)
            printf(" %s %.3f-%.3f", phase_name[i], t->start_ms[i], t->end_ms[i]);
    printf("\nrank %d %-10s timeline %-8s communication %.3f ms, visible %.3f ms (%.1f%% of the step)\n", rank, sh,
           what, t->comm_ms, t->visible_comm_ms, t->step_ms > 0 ? 100.0 * t->visible_comm_ms / t->step_ms : 0.0);
}

/* The host tensors every rank makes alike, and the single-GPU results. */
typedef struct host {
    uint16_t *q, *k, *v, *dO;
    uint16_t *o, *dq, *dk, *dv;   /* the single-GPU kernels' */
    double fwd_ms, step_ms;       /* their medians */
} host;

static int single_gpu(s2_ctx *ctx, s2_device *dev, void *stream, int rank, s2_attn_kernel *k[2], host *h)
{
    size_t nq = (size_t)seq * H * D * 2, nk = (size_t)seq * HK * D * 2, wb = 0;
    CHECK(s2_attn_backward_workspace(ctx, k[1], 1, seq, seq, &wb, NULL));
    s2_devptr m[10] = {ex_upload(ctx, dev, h->q, nq), ex_upload(ctx, dev, h->k, nk), ex_upload(ctx, dev, h->v, nk), ex_upload(ctx, dev, h->dO, nq),
                       ex_upload(ctx, dev, NULL, nq), ex_upload(ctx, dev, NULL, (size_t)H * seq * 4), ex_upload(ctx, dev, NULL, nq),
                       ex_upload(ctx, dev, NULL, nk), ex_upload(ctx, dev, NULL, nk), wb ? ex_upload(ctx, dev, NULL, wb) : 0};
    for (int i = 0; i < 10; i++)
        if (!m[i] && (i < 9 || wb)) {
            fprintf(stderr, "rank %d: single-GPU buffers: %s\n", rank, s2_ctx_message(ctx));
            return 1;
        }
    step s = {.fwd = k[0], .bwd = k[1]};
    s.fa = (s2_attn_fwd_args){.batch = 1, .q_len = seq, .kv_len = seq, .heads = H, .kv_heads = HK, .head_dim = D,
                              .dtype = S2_DTYPE_BF16, .q = m[0], .k = m[1], .v = m[2], .o = m[4], .lse = m[5]};
    s2_attn_fwd_args_bshd(&s.fa);
    s.ba = (s2_attn_bwd_args){.batch = 1, .q_len = seq, .kv_len = seq, .heads = H, .kv_heads = HK, .head_dim = D,
                              .dtype = S2_DTYPE_BF16, .q = m[0], .k = m[1], .v = m[2], .o = m[4], .d_o = m[3],
                              .lse = m[5], .dq = m[6], .dk = m[7], .dv = m[8], .workspace = m[9],
                              .workspace_bytes = wb};
    s2_attn_bwd_args_bshd(&s.ba);
    CHECK(run_step(ctx, &s, stream, true));
    CHECK(s2_stream_synchronize(ctx, dev, stream));
    CHECK(s2_memcpy_d2h(ctx, dev, h->o, m[4], nq));
    CHECK(s2_memcpy_d2h(ctx, dev, h->dq, m[6], nq));
    CHECK(s2_memcpy_d2h(ctx, dev, h->dk, m[7], nk));
    CHECK(s2_memcpy_d2h(ctx, dev, h->dv, m[8], nk));
    CHECK(median_ms(ctx, dev, stream, &s, false, &h->fwd_ms));
    CHECK(median_ms(ctx, dev, stream, &s, true, &h->step_ms));
    for (int i = 0; i < 10; i++)
        s2_mem_free(ctx, dev, m[i]);
    printf("rank %d one GPU   %lld tokens: forward %.3f ms, forward+backward %.3f ms (median of %d)\n", rank,
           (long long)seq, h->fwd_ms, h->step_ms, reps);
    return 0;
}

/* One sharding on this rank: correctness, bytes, times, timeline.  Returns the failures (or -1 on an error). */
static int sharding(s2_ctx *ctx, s2_device *dev, void *stream, int rank, s2_cp_comm *comm, s2_attn_kernel *k[2],
                    const host *h, s2_cp_sharding sh)
{
    const char *shn = sh == S2_CP_ZIGZAG ? "zigzag" : "contiguous";
    s2_cp_exec_args ea = {.seq_len = seq, .sharding = sh, .batch = 1};
    s2_cp_exec *e = NULL;
    s2_status st = s2_cp_exec_new(ctx, comm, k[0], k[1], &ea, &e);
    if (st != S2_OK) {
        fprintf(stderr, "rank %d: s2_cp_exec_new (%s): %s\n", rank, shn, s2_ctx_message(ctx));
        return -1;
    }
    const s2_cp_plan *plan = s2_cp_exec_plan(e, false);
    int64_t rs[2], rl[2], own = s2_cp_exec_sizes(e)->own_tokens;
    int nr = s2_cp_plan_shard(plan, rank, rs, rl);
    size_t sq = (size_t)own * H * D, sk = (size_t)own * HK * D;
    uint16_t *b = malloc(sq * 2);
    s2_devptr m[9] = {0};
    int fails = -1;
    if (!b)
        goto out;
    ex_shard_gather(b, h->q, rs, rl, nr, (size_t)H * D), m[0] = ex_upload(ctx, dev, b, sq * 2);
    ex_shard_gather(b, h->dO, rs, rl, nr, (size_t)H * D), m[1] = ex_upload(ctx, dev, b, sq * 2);
    ex_shard_gather(b, h->k, rs, rl, nr, (size_t)HK * D), m[2] = ex_upload(ctx, dev, b, sk * 2);
    ex_shard_gather(b, h->v, rs, rl, nr, (size_t)HK * D), m[3] = ex_upload(ctx, dev, b, sk * 2);
    m[4] = ex_upload(ctx, dev, NULL, sq * 2), m[5] = ex_upload(ctx, dev, NULL, (size_t)H * own * 4);
    m[6] = ex_upload(ctx, dev, NULL, sq * 2), m[7] = ex_upload(ctx, dev, NULL, sk * 2), m[8] = ex_upload(ctx, dev, NULL, sk * 2);
    for (int i = 0; i < 9; i++)
        if (!m[i]) {
            fprintf(stderr, "rank %d: buffers: %s\n", rank, s2_ctx_message(ctx));
            goto out;
        }
    step s = {.e = e};
    s.fa = (s2_attn_fwd_args){.batch = 1, .q_len = own, .kv_len = own, .heads = H, .kv_heads = HK, .head_dim = D,
                              .dtype = S2_DTYPE_BF16, .q = m[0], .k = m[2], .v = m[3], .o = m[4], .lse = m[5]};
    s2_attn_fwd_args_bshd(&s.fa);
    s.ba = (s2_attn_bwd_args){.batch = 1, .q_len = own, .kv_len = own, .heads = H, .kv_heads = HK, .head_dim = D,
                              .dtype = S2_DTYPE_BF16, .q = m[0], .k = m[2], .v = m[3], .o = m[4], .d_o = m[1],
                              .lse = m[5], .dq = m[6], .dk = m[7], .dv = m[8]};
    s2_attn_bwd_args_bshd(&s.ba);
    /* correctness: every output poisoned above, one forward and one backward */
    if ((st = run_step(ctx, &s, stream, true)) != S2_OK || (st = s2_stream_synchronize(ctx, dev, stream)) != S2_OK) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, shn, s2_ctx_message(ctx));
        goto out;
    }
    fails = 0;
    struct { const char *n; s2_devptr d; const uint16_t *ref; int heads; } outs[4] = {
        {"o", m[4], h->o, H}, {"dq", m[6], h->dq, H}, {"dk", m[7], h->dk, HK}, {"dv", m[8], h->dv, HK}};
    for (int i = 0; i < 4; i++) {
        int64_t nans = 0;
        if (s2_memcpy_d2h(ctx, dev, b, outs[i].d, (size_t)own * outs[i].heads * D * 2) != S2_OK) {
            fails = -1;
            goto out;
        }
        double max_abs = 0, err = ex_shard_rel_err(b, outs[i].ref, rs, rl, nr, (size_t)outs[i].heads * D, &nans, &max_abs);
        bool ok = err <= TOL && nans == 0;
        printf("rank %d %-10s %-3s %s rel err %.3e (tol %.1e) max abs err %.3e nans %lld\n", rank, shn, outs[i].n,
               ok ? "PASS" : "FAIL", err, TOL, max_abs, (long long)nans);
        fails += !ok;
    }
    /* bytes: the executor's own count of what it posted, the plan's figure, ring attention's */
    s2_cp_traffic tf, tb;
    s2_cp_rank_stats ps;
    if (s2_cp_exec_traffic(ctx, e, false, &tf) != S2_OK || s2_cp_exec_traffic(ctx, e, true, &tb) != S2_OK ||
        s2_cp_plan_rank_stats(ctx, plan, rank, D, S2_DTYPE_BF16, &ps) != S2_OK) {
        fails = -1;
        goto out;
    }
    bool same = tf.send_bytes == ps.send_bytes && tf.recv_bytes == ps.recv_bytes;
    printf("rank %d %-10s bytes forward sent %.0f recv %.0f (executor, %lld+%lld messages) plan sent %.0f recv %.0f "
           "%s; ring %.0f (recv/ring %.4f)\n", rank, shn, tf.send_bytes, tf.recv_bytes, (long long)tf.sends,
           (long long)tf.recvs, ps.send_bytes, ps.recv_bytes, same ? "PASS" : "FAIL", ps.ring_bytes,
           ps.ring_bytes > 0 ? tf.recv_bytes / ps.ring_bytes : 0.0);
    printf("rank %d %-10s bytes backward sent %.0f recv %.0f, dK/dV returned to owners %.0f (%lld+%lld messages)\n",
           rank, shn, tb.send_bytes, tb.recv_bytes, tb.reduce_bytes, (long long)tb.sends, (long long)tb.recvs);
    fails += !same;
    /* times against one GPU's, then one call of each with timing on */
    double fwd = 0, both = 0;
    s2_cp_timeline tl[2];
    if ((st = median_ms(ctx, dev, stream, &s, false, &fwd)) != S2_OK ||
        (st = median_ms(ctx, dev, stream, &s, true, &both)) != S2_OK ||
        (st = s2_cp_exec_set_timing(ctx, e, true)) != S2_OK || (st = run_step(ctx, &s, stream, true)) != S2_OK ||
        (st = s2_cp_exec_last_timeline(ctx, e, false, &tl[0])) != S2_OK ||
        (st = s2_cp_exec_last_timeline(ctx, e, true, &tl[1])) != S2_OK) {
        fprintf(stderr, "rank %d: %s timing: %s\n", rank, shn, s2_ctx_message(ctx));
        fails = -1;
        goto out;
    }
    printf("rank %d %-10s time forward %.3f ms (%.2fx one GPU), forward+backward %.3f ms (%.2fx; median of %d)\n",
           rank, shn, fwd, h->fwd_ms / fwd, both, h->step_ms / both, reps);
    print_timeline(rank, shn, "forward", &tl[0]);
    print_timeline(rank, shn, "backward", &tl[1]);
out:
    for (int i = 0; i < 9; i++)
        s2_mem_free(ctx, dev, m[i]);
    free(b);
    s2_cp_exec_free(e);
    return fails;
}

static int run_rank(int rank, int id_in, const int *id_out)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_cp_id id;
    if (rank == 0) {
        CHECK(s2_cp_unique_id(ctx, &id));
        for (int r = 1; r < ranks; r++)
            if (write(id_out[r], &id, sizeof id) != (ssize_t)sizeof id)
                return 1;
    } else if (read(id_in, &id, sizeof id) != (ssize_t)sizeof id) {
        return 1;
    }
    s2_device *dev = NULL;
    CHECK(s2_device_open(ctx, 0, &dev));
    s2_local_stride_args la;
    s2_local_stride_args_default(&la);
    la.name = "cp_example", la.num_heads = H, la.num_kv_heads = HK, la.block_size = 64, la.local_blocks = 16;
    la.vert_stride = 8, la.head_sliding_offset = 1, la.causal = true, la.max_seq_len = 0;
    s2_pattern_set *set = NULL;
    CHECK(s2_pattern_from_args(ctx, &la, &set));
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_attn_kernel *k[2] = {0};
    s2_jit_opts jo = {.no_cache = true};   /* the ranks compile at once; nothing shared on disk */
    for (int i = 0; i < 2; i++) {
        s2_kernel_spec spec = {.kind = i ? S2_KERNEL_BWD : S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = D};
        CHECK(s2_jit_compile(ctx, dev, p, &spec, &jo, &k[i], NULL));
    }
    size_t nq = (size_t)seq * H * D, nk = (size_t)seq * HK * D;
    host h = {.q = malloc(nq * 2), .k = malloc(nk * 2), .v = malloc(nk * 2), .dO = malloc(nq * 2),
              .o = malloc(nq * 2), .dq = malloc(nq * 2), .dk = malloc(nk * 2), .dv = malloc(nk * 2)};
    if (!h.q || !h.k || !h.v || !h.dO || !h.o || !h.dq || !h.dk || !h.dv) {
        fprintf(stderr, "rank %d: out of host memory\n", rank);
        return 1;
    }
    for (size_t i = 0; i < nq; i++)
        h.q[i] = rnd(), h.dO[i] = rnd();
    for (size_t i = 0; i < nk; i++)
        h.k[i] = rnd(), h.v[i] = rnd();
    void *stream = NULL;
    CHECK(s2_stream_create(ctx, dev, &stream));
    if (single_gpu(ctx, dev, stream, rank, k, &h) != 0)
        return 1;
    s2_cp_comm *comm = NULL;
    CHECK(s2_cp_comm_init(ctx, dev, &id, ranks, rank, &comm));
    int fails = 0;
    for (int sh = 0; sh < 2 && fails >= 0; sh++) {
        int f = sharding(ctx, dev, stream, rank, comm, k, &h, sh ? S2_CP_ZIGZAG : S2_CP_CONTIGUOUS);
        fails = f < 0 ? -1 : fails + f;
    }
    s2_cp_comm_free(comm);
    s2_stream_destroy(ctx, dev, stream);
    s2_attn_kernel_free(k[0]), s2_attn_kernel_free(k[1]);
    s2_pattern_set_free(set);
    s2_device_free(dev);
    s2_ctx_free(ctx);
    free(h.q), free(h.k), free(h.v), free(h.dO), free(h.o), free(h.dq), free(h.dk), free(h.dv);
    return fails == 0 ? 0 : 1;
}

/* In a child, so that the parent makes no CUDA call before forking: the GPUs, 0 without NCCL. */
static int probe(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        s2_ctx *ctx = s2_ctx_new();
        int n = 0, v = 0;
        bool ok = s2_device_count(ctx, &n) == S2_OK && s2_nccl_version(ctx, &v) == S2_OK;
        if (!ok)
            printf("%s\n", s2_ctx_message(ctx));
        fflush(stdout);
        _exit(ok ? (n < 100 ? n : 100) : 0);
    }
    int w = 0;
    return pid > 0 && waitpid(pid, &w, 0) == pid && WIFEXITED(w) ? WEXITSTATUS(w) : 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        long long x = v ? strtoll(v, &end, 10) : 0;
        bool num = v && *end == '\0';
        if (num && !strcmp(a, "--seq") && x >= 1024 && x <= ((int64_t)1 << 24))
            seq = x, i++;
        else if (num && !strcmp(a, "--ranks") && x >= 2 && x <= MAX_RANKS)
            ranks = (int)x, i++;
        else if (num && !strcmp(a, "--reps") && x >= 1 && x <= 256)
            reps = (int)x, i++;
        else {
            fprintf(stderr, "usage: %s [--seq N (1024..2^24)] [--ranks P (2..%d)] [--reps N (1..256)]\n", argv[0],
                    MAX_RANKS);
            return 2;
        }
    }
    setenv("NCCL_NVLS_ENABLE", "0", 1);   /* never NVLink SHARP / multicast */
    int gpus = probe();
    if (gpus < ranks) {
        printf("SKIP: %d GPU(s) with NCCL, %d ranks asked\n", gpus, ranks);
        return 77;
    }
    int fd[MAX_RANKS][2], out[MAX_RANKS] = {0};
    for (int r = 1; r < ranks; r++) {
        if (pipe(fd[r]) != 0)
            return 1;
        out[r] = fd[r][1];
    }
    fflush(stdout);
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    char vis_all[256];
    snprintf(vis_all, sizeof vis_all, "%s", cvd ? cvd : "");
    pid_t pid[MAX_RANKS];
    for (int r = 0; r < ranks; r++) {
        if ((pid[r] = fork()) == 0) {
            /* rank r's GPU alone, before this process's first CUDA call: the r-th of the caller's list, or r */
            char vis[64], *save = NULL, *tok = cvd && *cvd ? strtok_r(vis_all, ",", &save) : NULL;
            for (int i = 0; tok && i < r; i++)
                tok = strtok_r(NULL, ",", &save);
            snprintf(vis, sizeof vis, "%.48s", tok ? tok : "");
            if (!tok)
                snprintf(vis, sizeof vis, "%d", r);
            setenv("CUDA_VISIBLE_DEVICES", vis, 1);
            int rc = run_rank(r, r ? fd[r][0] : -1, out);
            fflush(stdout);
            fflush(stderr);
            _exit(rc);
        }
    }
    for (int r = 1; r < ranks; r++)
        close(fd[r][0]), close(fd[r][1]);
    int fails = 0, left = 0;
    for (int r = 0; r < ranks; r++)
        left += pid[r] > 0;
    fails = ranks - left;
    while (left > 0) {   /* a rank that fails leaves the others waiting in NCCL: end them */
        int w = 0;
        pid_t done = waitpid(-1, &w, 0);
        if (done < 0)
            break;
        left--;
        if (WIFEXITED(w) && WEXITSTATUS(w) == 0)
            continue;
        fails++;
        for (int r = 0; r < ranks; r++)
            if (pid[r] > 0 && pid[r] != done)
                kill(pid[r], SIGTERM);
    }
    printf("%s\n", fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}
