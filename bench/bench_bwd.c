/* bench_bwd: times the generated S2 sparse attention forward + backward on a
 * GPU, through the runtime (s2_attn_forward, s2_attn_backward), for the
 * forward+backward rows of shared/PEERS.md (bf16, D 128, causal) and a d256 row.
 *
 * Per row: both modules are generated for the device (s2_compile_attention,
 * heuristic specs, or --block-n / --num-stages for the backward), inputs are
 * random bf16 in [-1.5, 1.5], dO in [-1, 1]; one forward + backward is
 * checked (every dq, dk, dv element finite — the float64 comparison is
 * tests/attn/test_bwd_gpu.c), then forward, backward and forward+backward
 * are each timed (bench_timer.h): warm-up, then --reps runs (default 30),
 * each between two CUDA events after a 256 MB write that evicts L2 (as
 * triton.testing.do_bench times the peers; --timer warm: no write), median.
 * Effective TFLOP/s of forward+backward count 3.5 x 4 * kept_pairs * D.
 * Without a CUDA driver or device it prints "no GPU: skipped" and exits 0.
 *
 * --wgmma -1 takes the mma.sync backward bodies on sm_90a (spec.bwd_wgmma; default: wgmma).
 * --tma -1 has the wgmma dK/dV kernel copy Q and dO by cp.async (spec.bwd_tma; default: TMA).
 * --gather 1 turns off the gathered key tiles of block-16 patterns (spec.kv_gather; default:
 * heuristic, 4 there).
 * --ds 0 gives the backward the plain workspace, so that dq is recomputed (NAME_dq); by
 * default (--ds -1) it gets the default, bounded workspace plans take (at most twice q's
 * bytes plus 64 MB: s2_attn_backward_workspace_chunked with 0 chunks), the dS path where it
 * fits (the row says "dS" and the workspace's size); --ds 1 gives it s2_attn_backward_workspace's,
 * the dS path over every head; --ds N (N > 1) the workspace of N chunks of kv heads
 * (s2_attn_backward_workspace_chunked), the dS path then runs chunk by chunk.
 * --order sets which of the three timings runs first: f the forward alone, b the backward
 * alone, x both back to back (default fbx).  The GPU's clock falls within tens of ms of
 * sustained load (bench/RESULTS.md run 56), so a timing run later in the sequence reads
 * slower; --cool MS idles the GPU that long before each timing (each then starts from the
 * same state, as separate do_bench calls would).
 *
 *   bench_bwd [--config NAME[,NAME..]] [--reps N] [--block-n N] [--num-stages N] [--wgmma W] [--tma T] [--gather G]
 *             [--ds -1|0|1|N] [--dq-pair 0|-1] [--order fbx] [--cool MS] [--csv FILE] [--timer flush|warm]
 * --csv FILE appends one row per config to FILE, `fwd_bwd,FAMILY,SEQ_LEN,s2c,MS`
 * (bench/plot.py's input; FAMILY is the config name without its length, MS the
 * forward + backward median).
 * --dq-pair -1 keeps the dS path's dQ kernel at one query tile per CTA
 * (NAME_dqds) where the runtime would take NAME_dqds2. */
#include "plot_csv.h"
#include "attn_tune.h"
#include "compile_internal.h"
#include "bench_timer.h"
#include "rt_cuda.h"
#include "s2c/attention.h"
#include "s2c/attn_runtime.h"
#include "s2c/codegen.h"
#include "s2c/layout.h"
#include "s2c/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct bench_config {
    const char *name;
    int batch, heads;
    int64_t seq;
    int block, local, stride;
    double peer_h200_ms, peer_h100_ms;   /* S2-Triton forward + backward */
    int head_dim;                        /* 0: HEAD_DIM */
} bench_config;

static const bench_config configs[] = {
    {"b64_8k", 4, 16, 8192, 64, 8, 16, 2.85, 2.843, 0},
    {"mergeq16_8k", 4, 16, 8192, 16, 32, 16, 6.28, 6.172, 0},
    {"b64_l16v8_16k", 2, 32, 16384, 64, 16, 8, 12.1, 12.23, 0},
    /* PEERS.md has these two on the H200 only (0: no peer) */
    {"b64_32k", 1, 16, 32768, 64, 8, 16, 5.90, 0, 0},
    {"b64_128k", 1, 16, 131072, 64, 8, 16, 60.0, 0, 0},
    /* head dim 256 (issue 31's target: 1.6x S2-Triton; its time not yet in PEERS.md) */
    {"d256_b64_32k", 1, 16, 32768, 64, 8, 16, 0, 0, 256},
};
enum { NUM_CONFIGS = sizeof configs / sizeof configs[0], HEAD_DIM = 128 };


static FILE *csv_file; /* --csv FILE: plot rows appended */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

typedef struct run_ctx {
    s2_attn_kernel *fwd, *bwd;
    s2_attn_fwd_args fa;
    s2_attn_bwd_args ba;
    s2_attn_bwd_options bo;     /* the strategy (ds_chunks, dq_pair) */
} run_ctx;

/* which: 0 forward, 1 backward, 2 both */
static s2_status run_once(s2_ctx *ctx, run_ctx *r, int which, s2_event *mid)
{
    s2_status st = S2_OK;
    if (which != 1)
        st = s2_attn_forward(ctx, r->fwd, NULL, &r->fa);
    if (st == S2_OK && mid)
        st = s2_event_record(ctx, mid, NULL);
    if (st == S2_OK && which != 0)
        st = s2_attn_backward_opts(ctx, r->bwd, NULL, &r->ba, &r->bo);
    return st;
}

typedef struct bwd_work {
    run_ctx *r;
    int which;
} bwd_work;

static s2_status bwd_once(s2_ctx *ctx, void *user, s2_event *mid)
{
    bwd_work *w = user;
    return run_once(ctx, w->r, w->which, mid);
}

/* Median time of `which` (0 forward, 1 backward, 2 both); for both, also
 * the medians of its forward part and backward part (an event between). */
static s2_status time_runs(s2_ctx *ctx, bench_timer *t, run_ctx *r, int which, int reps, double *med, double parts[2])
{
    bwd_work w = {r, which};
    return bench_timer_median(ctx, t, bwd_once, &w, 3, reps, med, NULL, which == 2 ? parts : NULL);
}

static s2_status load_kernel(s2_ctx *ctx, s2_device *dev, const s2_pattern *p, s2_kspec spec, s2_arch arch,
                             s2_attn_module **mod, s2_attn_kernel **k, int regs[3])
{
    spec.arch = arch;
    s2_artifact *art = NULL;
    s2_status st = s2_compile_kspec1(ctx, p, &spec, S2_CUBIN_AUTO, &art);
    if (st == S2_OK)
        st = s2_attn_module_load(ctx, dev, art->cubin, art->cubin_size, mod);
    if (st == S2_OK)
        st = s2_attn_find(ctx, *mod, p->name, spec.dtype, spec.head_dim, k);
    /* registers of NAME_pre, NAME_dq, NAME_dkdv (the forward: its one kernel first) */
    static const char *const parts[3] = {"_pre", "_dq", "_dkdv"};
    for (int i = 0; st == S2_OK && i < 3; i++)
        for (int j = 0; j < art->num_kernels; j++) {
            const char *n = art->kernels[j].name;
            size_t l = strlen(n), m = strlen(parts[i]);
            if (art->num_kernels == 1 || (l > m && !strcmp(n + l - m, parts[i])))
                regs[i] = art->kernels[j].registers;
        }
    s2_artifact_free(art);
    return st;
}

/* Count non-finite bf16 values of a device tensor. */
static int64_t nonfinite(s2_ctx *ctx, s2_device *dev, s2_devptr p, size_t elems, uint16_t *host)
{
    if (s2_memcpy_d2h(ctx, dev, host, p, elems * 2) != S2_OK)
        return -1;
    int64_t n = 0;
    for (size_t i = 0; i < elems; i++)
        n += (host[i] & 0x7f80u) == 0x7f80u;
    return n;
}

static void run_config(s2_ctx *ctx, s2_device *dev, s2_arch arch, const bench_config *c, int reps, int block_n,
                       int stages, int wgmma, int tma, int gather, int use_ds, int dq_pair, const char *order, int cool_ms,
                       bool h100, bench_timer *timer)
{
    const int D = c->head_dim ? c->head_dim : HEAD_DIM;
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.name = c->name;
    a.num_heads = c->heads;
    a.block_size = c->block;
    a.local_blocks = c->local;
    a.vert_stride = c->stride;
    a.head_sliding_offset = 0;
    a.causal = true;
    a.max_seq_len = c->seq;
    s2_pattern_set *set = NULL;
    s2_layout *lay = NULL;
    s2_attn_module *fm = NULL, *bm = NULL;
    run_ctx r = {0};
    size_t elems = (size_t)c->batch * (size_t)c->seq * (size_t)c->heads * D;
    size_t rows = (size_t)c->batch * (size_t)c->heads * (size_t)c->seq;
    s2_devptr t[8] = {0}, lse = 0, dlse = 0, ws = 0;
    uint16_t *host = malloc(elems * 2 + 64 * 1024);
    int fregs[3] = {0}, bregs[3] = {0};
    s2_status st = host ? s2_pattern_from_args(ctx, &a, &set) : S2_ERR_NOMEM;
    const s2_pattern *p = st == S2_OK ? s2_pattern_set_get(set, 0) : NULL;
    if (st == S2_OK)
        st = s2_layout_new(ctx, p, c->seq, c->seq, &lay);
    s2_layout_stats stats;
    if (st == S2_OK)
        st = s2_layout_stats_compute(ctx, lay, (s2_tile_spec){64, 64}, D, S2_DTYPE_BF16, &stats);
    s2_kspec fs = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = D};
    s2_kspec bs = {.kind = S2_KERNEL_BWD, .dtype = S2_DTYPE_BF16, .head_dim = D, .block_n = block_n,
                         .num_stages = stages, .bwd_wgmma = wgmma, .kv_gather = gather,
                         .bwd_tma = tma};
    if (st == S2_OK)
        st = load_kernel(ctx, dev, p, fs, arch, &fm, &r.fwd, fregs);
    if (st == S2_OK)
        st = load_kernel(ctx, dev, p, bs, arch, &bm, &r.bwd, bregs);
    for (int i = 0; st == S2_OK && i < 8; i++)
        st = s2_mem_alloc(ctx, dev, elems * 2, &t[i]);
    if (st == S2_OK)
        st = s2_mem_alloc(ctx, dev, rows * 4, &lse);
    if (st == S2_OK)
        st = s2_mem_alloc(ctx, dev, rows * 4, &dlse);
    size_t ws_bytes = s2_attn_bwd_workspace_bytes(c->batch, c->heads, c->seq);
    bool ds = false;
    if (st == S2_OK && use_ds)
        st = s2_attn_backward_workspace(ctx, r.bwd, c->batch, c->seq, c->seq, &ws_bytes, &ds);
    /* --ds N > 1: the dS path over N chunks of kv heads, in the workspace one chunk needs */
    if (st == S2_OK && ds && use_ds > 1)
        st = s2_attn_backward_workspace_chunked(ctx, r.bwd, c->batch, c->seq, c->seq, use_ds, &ws_bytes);
    if (st == S2_OK && ds && use_ds < 0)   /* the default, bounded workspace: dS where it fits */
        st = s2_attn_backward_workspace_chunked(ctx, r.bwd, c->batch, c->seq, c->seq, 0, &ws_bytes);
    if (use_ds < 0)
        ds = ds && ws_bytes > s2_attn_bwd_workspace_bytes(c->batch, c->heads, c->seq);
    if (st == S2_OK)
        st = s2_mem_alloc(ctx, dev, ws_bytes, &ws);
    if (st == S2_OK)
        st = s2_memset_d8(ctx, dev, dlse, 0, rows * 4);
    /* q, k, v and dO random (0, 1, 2, 4); o is written by the forward */
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int i = 0; st == S2_OK && i < 5; i++) {
        if (i == 3)
            continue;
        double lo = i == 4 ? -1.0 : -1.5, span = i == 4 ? 2.0 : 3.0;
        for (size_t j = 0; j < elems; j++)
            host[j] = f32_to_bf16((float)(lo + span * (double)(rng_next(&seed) >> 11) * 0x1.0p-53));
        st = s2_memcpy_h2d(ctx, dev, t[i], host, elems * 2);
    }
    if (st == S2_OK) {
        r.fa = (s2_attn_fwd_args){.batch = c->batch, .q_len = c->seq, .kv_len = c->seq, .heads = c->heads,
                                  .kv_heads = c->heads, .head_dim = D, .dtype = S2_DTYPE_BF16,
                                  .q = t[0], .k = t[1], .v = t[2], .o = t[3], .lse = lse};
        s2_attn_fwd_args_bshd(&r.fa);
        r.ba = (s2_attn_bwd_args){.batch = c->batch, .q_len = c->seq, .kv_len = c->seq, .heads = c->heads,
                                  .kv_heads = c->heads, .head_dim = D, .dtype = S2_DTYPE_BF16,
                                  .q = t[0], .k = t[1], .v = t[2], .o = t[3], .d_o = t[4], .lse = lse, .d_lse = dlse,
                                  .dq = t[5], .dk = t[6], .dv = t[7], .workspace = ws,
                                  .workspace_bytes = ws_bytes};
        r.bo = (s2_attn_bwd_options){.ds_chunks = ds && use_ds > 1 ? use_ds : 0, .dq_pair = dq_pair};
        s2_attn_bwd_args_bshd(&r.ba);
        st = run_once(ctx, &r, 2, NULL);
    }
    if (st == S2_OK)
        st = s2_device_synchronize(ctx, dev);
    int64_t bad = 0;
    for (int i = 5; st == S2_OK && i < 8; i++) {
        int64_t n = nonfinite(ctx, dev, t[i], elems, host);
        bad += n < 0 ? 1 : n;
    }
    double ms[3] = {0}, parts[2] = {0};
    /* order: which timing runs when (f forward, b backward, x both back to back) */
    for (int i = 0; st == S2_OK && bad == 0 && i < 3; i++) {
        int w = order[i] == 'f' ? 0 : order[i] == 'b' ? 1 : 2;
        if (cool_ms > 0) {
            st = s2_device_synchronize(ctx, dev);
            struct timespec ts = {cool_ms / 1000, (long)(cool_ms % 1000) * 1000000L};
            while (st == S2_OK && nanosleep(&ts, &ts) != 0)
                ;
        }
        if (st == S2_OK)
            st = time_runs(ctx, timer, &r, w, reps, &ms[w], w == 2 ? parts : NULL);
    }
    if (st != S2_OK || bad) {
        printf("%-14s ERROR: %s%s\n", c->name, st != S2_OK ? s2_ctx_message(ctx) : "",
               bad ? "non-finite gradients" : "");
    } else {
        const s2_manifest_kernel *d = s2_attn_kernel_desc(r.bwd);
        const s2_kspec *dk = &s2_manifest_kernel_fn(d, S2_ROLE_BWD_DKDV)->spec;
        double fl = stats.fwd_flops * c->batch;
        double peer = h100 ? c->peer_h100_ms : c->peer_h200_ms;
        printf("%-14s %d,%d,%lldK b%d L%d V%d  bwd %s%s (ws %.0f MB) bm%d bn%d st%d g%d regs pre/dq/dkdv %d/%d/%d  "
               "fwd %.3f ms (%.0f TF)  bwd %.3f ms  fwd+bwd %.3f ms (%.3f + %.3f)  %.0f eff TF  S2-Triton %.2f ms  ratio %.2fx\n",
               c->name, c->batch, c->heads, (long long)(c->seq / 1024), c->block, c->local, c->stride,
               dk->bwd_wgmma > 0 ? dk->bwd_tma > 0 ? "wgmma+tma" : "wgmma" : "mma", ds ? "+dS" : "", ws_bytes / 1e6, d->spec.block_m, d->spec.block_n, d->spec.num_stages,
               dk->kv_gather > 1 ? dk->kv_gather : 1, bregs[0], bregs[1], bregs[2], ms[0],
               fl / (ms[0] * 1e-3) / 1e12, ms[1], ms[2], parts[0], parts[1], 3.5 * fl / (ms[2] * 1e-3) / 1e12, peer,
               peer > 0 ? peer / ms[2] : NAN);
        if (csv_file) {
            char fam[64];
            plot_family(c->name, fam, sizeof fam);
            fprintf(csv_file, "fwd_bwd,%s,%lld,s2c,%.4f\n", fam, (long long)c->seq, ms[2]);
            fflush(csv_file);
        }
    }
    fflush(stdout);
    for (int i = 0; i < 8; i++)
        s2_mem_free(ctx, dev, t[i]);
    s2_mem_free(ctx, dev, lse);
    s2_mem_free(ctx, dev, dlse);
    s2_mem_free(ctx, dev, ws);
    s2_attn_module_free(fm);
    s2_attn_module_free(bm);
    s2_layout_free(lay);
    s2_pattern_set_free(set);
    free(host);
}

int main(int argc, char **argv)
{
    const char *want = NULL;
    int reps = BENCH_MIN_REPS, block_n = 0, stages = 0, wgmma = 0, tma = 0, gather = 0, use_ds = -1, dq_pair = 0;
    const char *order = "fbx";
    int cool_ms = 0;
    bool flush = true;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--config")) want = argv[i + 1];
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--block-n")) block_n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--num-stages")) stages = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--wgmma")) wgmma = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tma")) tma = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gather")) gather = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ds")) use_ds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dq-pair")) dq_pair = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--order")) order = argv[i + 1];
        else if (!strcmp(argv[i], "--cool")) cool_ms = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--timer") && bench_timer_mode(argv[i + 1], &flush)) continue;
        else if (!strcmp(argv[i], "--csv") && !csv_file) {
            if (!(csv_file = plot_csv_open(argv[i + 1], "bench_bwd")))
                return 2;
        } else {
            fprintf(stderr, "usage: bench_bwd [--config NAME,..] [--reps N] [--block-n N] [--num-stages N] [--wgmma W] [--tma T] "
                            "[--gather G] [--ds -1|0|1|N] [--dq-pair 0|-1] [--order fbx] [--cool MS] [--csv FILE] "
                            "[--timer flush|warm]\n");
            return 2;
        }
    }
    if (strlen(order) != 3 || !strchr(order, 'f') || !strchr(order, 'b') || !strchr(order, 'x')) {
        fprintf(stderr, "bench_bwd: --order takes f, b and x once each (forward, backward, both), e.g. xfb\n");
        return 2;
    }
    if (reps < 1)
        reps = 1;
    s2_ctx *ctx = s2_ctx_new();
    int count = 0;
    s2_status st = s2_device_count(ctx, &count);
    if (st != S2_OK || count == 0) {
        printf("no GPU: skipped (%s)\n", s2_ctx_message(ctx));
        s2_ctx_free(ctx);
        return 0;
    }
    s2_device *dev = NULL;
    s2_arch arch;
    if (s2_device_open(ctx, 0, &dev) != S2_OK) {
        printf("device 0: %s\n", s2_ctx_message(ctx));
        return 1;
    }
    const s2_device_info *info = s2_device_get_info(dev);
    if (s2_arch_for_device(info->cc_major, info->cc_minor, &arch) != S2_OK) {
        printf("compute capability %d.%d: skipped\n", info->cc_major, info->cc_minor);
        return 0;
    }
    bool h100 = strstr(info->name, "H100") != NULL;
    bench_timer timer;
    if (bench_timer_open(ctx, dev, flush, &timer) != S2_OK) {
        printf("timer: %s\n", s2_ctx_message(ctx));
        return 1;
    }
    printf("device %s (cc %d.%d), arch %s, reps %d, order %s, cool %d ms; peer: S2-Triton %s column of PEERS.md; "
           "timer: %s, median\n", info->name, info->cc_major, info->cc_minor, s2_arch_name(arch), reps, order, cool_ms,
           bench_peer_column(info), flush ? "L2 flushed before each repetition" : "warm L2");
    for (int i = 0; i < NUM_CONFIGS; i++)
        if (!want || strstr(want, configs[i].name))
            run_config(ctx, dev, arch, &configs[i], reps, block_n, stages, wgmma, tma, gather, use_ds, dq_pair, order, cool_ms,
                       h100, &timer);
    bench_timer_close(ctx, &timer);
    s2_device_free(dev);
    s2_ctx_free(ctx);
    if (csv_file)
        fclose(csv_file);
    return 0;
}
