/* bench_fwd: times the generated S2 sparse attention forward on a GPU.
 *
 * For each configuration (the forward rows of shared/PEERS.md plus a dense
 * causal row) and each kernel variant (the spec tunables, lists allowed):
 *   1. JIT, cold: a fresh temporary kernel cache; key, miss, generate +
 *      optimise + PTX + cubin (s2_compile_attention), store, module load.
 *      JIT, warm: a second cache handle on the same directory; key, hit,
 *      module load.  The timed kernel is the one loaded from the cache.
 *   2. Check: outputs poisoned, one launch, every output element written and
 *      finite, and a sample of rows compared with a float64 recomputation
 *      on the CPU (o relative error, lse absolute); a variant that fails is
 *      not timed.
 *   3. Time (bench_timer.h): warm-up, then --reps launches (default 50),
 *      each between two CUDA events after a 256 MB write that evicts L2, as
 *      triton.testing.do_bench times the peers; median and min.  --timer
 *      warm skips the write (input sets still rotate).
 * Effective TFLOP/s count 4 * kept_pairs * D (s2_layout_stats_compute).
 * Without a CUDA driver or device it prints "no GPU: skipped" and exits 0.
 *
 *   bench_fwd [--config NAME[,NAME..]] [--block-m L] [--block-n L]
 *             [--num-warps L] [--num-stages L] [--persistent L] [--kv-gather L]
 *             [--specs BMxBNsSTgG[pP],..] [--reps N] [--csv [FILE]] [--rows N] [--dump-dir DIR]
 *             [--arch ARCH] [--timer flush|warm] [--head-dim L] [--dtype bf16|e4m3|f32]
 * L is a comma list; every combination is run (invalid ones are reported
 * and skipped).  --specs names the variants instead (block_m x block_n,
 * stages, kv_gather, persistent: 128x64s3g1p1).  --dump-dir writes each variant's PTX and cubin there.
 * --arch sm_90 on an sm_90a device times the mma.sync template (sm_80's,
 * compiled for sm_90) instead of the wgmma one.
 * --head-dim (default 128; multiples of 16 to 256) runs each config at each
 * head dim; the config column then reads NAME/dD.
 * --dtype e4m3 times the sm_90a fp8 forward (q, k, v e4m3 from the same
 * values, null descales, o bf16; config column NAME/e4m3; no --csv FILE
 * rows), to set against the default bf16 run of the same config.
 * --dtype f32 times the tf32 forward (q, k, v f32 holding the same values,
 * o f32; config column NAME/f32; no --csv FILE rows).
 * --csv alone prints the rows as CSV; --csv FILE appends one row per timed
 * variant to FILE as `fwd,FAMILY,SEQ_LEN,s2c,MS` (bench/plot.py's input;
 * FAMILY is the config name without its length, MS the median).
 * The two-slab gathered shape (128x128, kv_gather 2) runs on owned pairs
 * (s2_schedule_pack_gathered_owned), as the runtime packs it; with
 * S2C_BENCH_UNION_PAIRS=1 in the environment, on union pairs instead.
 * This file: the configurations, the command line, the rows and main; the
 * rest in bench_fwd_data.c, bench_fwd_jit.c, bench_fwd_launch.c. */
#include "plot_csv.h"
#include "compile_internal.h"
#include "bench_fwd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* shared/PEERS.md, forward rows (bf16, D 128, causal, head_sliding_offset 0) */
static const bench_config configs[] = {
    {"b64_8k", 4, 16, 8192, 64, 8, 16, "S2-Triton", 0.607, 0.598, 0},
    {"mergeq16_8k", 4, 16, 8192, 16, 32, 16, "S2-Triton", 0.802, 0.798, 0},
    {"b64_32k", 1, 16, 32768, 64, 8, 16, "S2-Triton", 1.105, 1.085, 0},
    {"b64_128k", 1, 16, 131072, 64, 8, 16, "S2-Triton", 12.78, 11.68, 0},
    {"b64_l16v8_16k", 2, 32, 16384, 64, 16, 8, "S2-Triton", 2.669, 2.729, 0},
    {"dense_8k", 4, 16, 8192, 64, 8, 1, "FA2", 3.37, 3.32, 0},
    /* head imbalance (not in PEERS.md): b64_8k with its last 4 of 16 heads dense */
    {"b64_8k_dense4", 4, 16, 8192, 64, 8, 16, "none", 0, 0, 4},
    /* shorter rows for the runtime's wide-variant threshold (not in PEERS.md) */
    {"b64_4k", 8, 16, 4096, 64, 8, 16, "none", 0, 0, 0},
    {"b64_l16v8_4k", 8, 32, 4096, 64, 16, 8, "none", 0, 0, 0},
    {"b64_2k", 16, 16, 2048, 64, 8, 16, "none", 0, 0, 0},
    {"b64_1k", 32, 16, 1024, 64, 8, 16, "none", 0, 0, 0},
};
enum { NUM_CONFIGS = sizeof configs / sizeof configs[0], MAX_LIST = 8 };

typedef struct int_list {
    int n;
    int v[MAX_LIST];
} int_list;

typedef struct options {
    bool want[NUM_CONFIGS];
    int_list block_m, block_n, warps, stages, persistent, gather, head_dim;
    int nspecs;                /* --specs: explicit variants instead of the cross product */
    s2_kspec specs[16];
    int reps, rows;
    bool csv;
    FILE *csv_file;            /* --csv FILE: plot rows appended */
    const char *dump_dir;
    const char *arch;          /* --arch: compile for this arch instead of the device's (e.g. sm_80 on sm_90) */
    bool warm;                 /* --timer warm: L2 not flushed between repetitions */
    bench_timer *timer;
} options;

/* ---- command line -------------------------------------------------------------------- */
static bool parse_list(const char *s, int_list *l)
{
    l->n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < -1 || v > 1024 || l->n == MAX_LIST)
            return false;
        l->v[l->n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return false;
    }
    return l->n > 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_fwd [--config NAME[,NAME..]] [--block-m L] [--block-n L] [--num-warps L]\n"
                    "                 [--num-stages L] [--persistent L] [--kv-gather L] [--specs BMxBNsSTgG[pP],..]\n"
                    "                 [--reps N] [--rows N] [--csv [FILE]] [--timer flush|warm]\n"
                    "                 [--dump-dir DIR] [--arch sm_90] [--head-dim L] [--dtype bf16|e4m3|f32]\n"
                    "  (L: comma list, 0 = heuristic)  configs:");
    for (int i = 0; i < NUM_CONFIGS; i++)
        fprintf(stderr, " %s", configs[i].name);
    fprintf(stderr, "\n");
    return 2;
}

/* "BMxBNsSTgG[,..]" (0 = heuristic), e.g. 64x64s3g4 */
static bool parse_specs(const char *val, options *o)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", val);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int bm, bn, st, g, per = 0;
        int n = o->nspecs == 16 ? 0 : sscanf(tok, "%dx%ds%dg%dp%d", &bm, &bn, &st, &g, &per);
        if (n != 4 && n != 5)
            return false;
        o->specs[o->nspecs++] =
            (s2_kspec){.block_m = bm, .block_n = bn, .num_stages = st, .kv_gather = g, .persistent = per};
    }
    return o->nspecs > 0;
}


static bool parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->reps = 50;
    o->rows = 24;
    int_list zero = {1, {0}};
    o->block_m = o->block_n = o->warps = o->stages = o->persistent = o->gather = zero;
    o->head_dim = (int_list){1, {HEAD_DIM}};
    bool any = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--csv")) {
            if (!val || !strncmp(val, "--", 2)) {
                o->csv = true;
                continue;
            }
            if (o->csv_file || !(o->csv_file = plot_csv_open(val, "bench_fwd")))
                return false;
            i++;
            continue;
        }
        if (!val)
            return false;
        i++;
        if (!strcmp(a, "--config")) {
            char buf[512];
            snprintf(buf, sizeof buf, "%s", val);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                int j = 0;
                while (j < NUM_CONFIGS && strcmp(configs[j].name, tok))
                    j++;
                if (j == NUM_CONFIGS)
                    return false;
                o->want[j] = any = true;
            }
        } else if (!strcmp(a, "--block-m")) {
            if (!parse_list(val, &o->block_m))
                return false;
        } else if (!strcmp(a, "--block-n")) {
            if (!parse_list(val, &o->block_n))
                return false;
        } else if (!strcmp(a, "--num-warps")) {
            if (!parse_list(val, &o->warps))
                return false;
        } else if (!strcmp(a, "--kv-gather")) {
            if (!parse_list(val, &o->gather))
                return false;
        } else if (!strcmp(a, "--specs")) {
            if (!parse_specs(val, o))
                return false;
        } else if (!strcmp(a, "--persistent")) {
            if (!parse_list(val, &o->persistent))
                return false;
        } else if (!strcmp(a, "--head-dim")) {
            if (!parse_list(val, &o->head_dim))
                return false;
            for (int d = 0; d < o->head_dim.n; d++)
                if (o->head_dim.v[d] < 16 || o->head_dim.v[d] > MAX_HEAD_DIM || o->head_dim.v[d] % 16)
                    return false;
        } else if (!strcmp(a, "--num-stages")) {
            if (!parse_list(val, &o->stages))
                return false;
        } else if (!strcmp(a, "--reps")) {
            o->reps = atoi(val);
            if (o->reps < 1)
                return false;
        } else if (!strcmp(a, "--rows")) {
            o->rows = atoi(val);
            if (o->rows < 1)
                return false;
        } else if (!strcmp(a, "--dump-dir")) {
            o->dump_dir = val;
        } else if (!strcmp(a, "--arch")) {
            o->arch = val;
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(val, "bf16"))
                bench_dtype = S2_DTYPE_BF16;
            else if (!strcmp(val, "e4m3") || !strcmp(val, "fp8_e4m3"))
                bench_dtype = S2_DTYPE_E4M3;
            else if (!strcmp(val, "f32") || !strcmp(val, "fp32"))
                bench_dtype = S2_DTYPE_F32;
            else
                return false;
        } else if (!strcmp(a, "--timer")) {
            bool flush;
            if (!bench_timer_mode(val, &flush))
                return false;
            o->warm = !flush;
        } else {
            return false;
        }
    }
    if (!any)
        for (int j = 0; j < NUM_CONFIGS; j++)
            o->want[j] = true;
    return true;
}

/* ---- main ------------------------------------------------------------------------------ */
static void print_header(const options *o)
{
    if (o->csv)
        printf("config,B,H,S,block,local,stride,kept_pct,bm,bn,warps,stages,regs,spill,smem,check,o_err,lse_err,"
               "ms_median,ms_min,tflops,tile_util,peer,peer_ms,ratio,jit_cold_ms,jit_warm_ms,persistent\n");
    else
        printf("%-14s %5s %3s %3s %2s %2s %4s %5s %6s %8s %8s %6s %5s %-9s %6s %9s %8s\n", "config", "kept%", "bm",
               "bn", "w", "st", "regs", "spill", "smem", "ms_med", "ms_min", "TF/s", "util", "peer", "ratio",
               "jit_cold", "jit_warm");
}

/* Times one spec; a module with a wide variant (role fwd_wide: the runtime
 * launches it for long lists) sets *wide to its spec, timed by the caller as
 * a row of its own. */
/* the config column's dtype suffix */
static const char *dtype_suffix(void)
{
    return bench_dtype == S2_DTYPE_E4M3 ? "/e4m3" : bench_dtype == S2_DTYPE_F32 ? "/f32" : "";
}

static void run_variant(s2_ctx *ctx, s2_device *dev, config_data *cd, const s2_kspec *want,
                        const options *o, bool h100, const char *label, s2_kspec *wide)
{
    const bench_config *c = cd->cfg;
    char name[48];   /* the config, and its head dim where not the default */
    if (cd->head_dim == HEAD_DIM)
        snprintf(name, sizeof name, "%s%s", c->name, dtype_suffix());
    else
        snprintf(name, sizeof name, "%s/d%d%s", c->name, cd->head_dim, dtype_suffix());
    variant v;
    s2_status st = jit_variant(ctx, dev, cd, want, o->dump_dir, &v);
    if (st != S2_OK) {
        printf("%-14s bm %d bn %d w %d st %d: skipped: %s\n", name, want->block_m, want->block_n, want->num_warps,
               want->num_stages, s2_ctx_message(ctx));
        s2_ctx_clear(ctx);
        return;
    }
    sched_dev sd;
    check_result cr;
    double med = 0, mn = 0;
    st = sched_upload(ctx, dev, cd, &v.spec, &sd);
    if (st == S2_OK)
        st = variant_maps(ctx, dev, cd, &v);
    if (st == S2_OK)
        st = check_variant(ctx, dev, cd, &v, &sd, o->rows, 0x5eed + (uint64_t)c->seq, &cr);
    if (st == S2_OK && cr.ok)
        st = time_variant(ctx, o->timer, cd, &v, &sd, o->reps, &med, &mn);
    if (st != S2_OK) {
        printf("%-14s bm %d bn %d w %d st %d: error: %s\n", name, v.spec.block_m, v.spec.block_n,
               v.spec.num_warps, v.spec.num_stages, s2_ctx_message(ctx));
        s2_ctx_clear(ctx);
    } else {
        /* the layout's pair counts are per batch element (summed over heads) */
        double dense = (double)c->heads * ((double)c->seq * (c->seq + 1) / 2);
        double kept = 100.0 * sd.kept_pairs / dense;
        double flops = 4.0 * sd.kept_pairs * cd->head_dim * c->batch;
        double tf = cr.ok ? flops / (med * 1e-3) / 1e12 : 0;
        double util = sd.kept_pairs * 4.0 * cd->head_dim / sd.tile_flops;   /* kept pairs / computed pairs */
        /* PEERS.md's times are bf16 at D 128: no ratio for another head dim or dtype */
        bool comparable = cd->head_dim == HEAD_DIM && bench_dtype == S2_DTYPE_BF16;
        double peer = !comparable ? 0 : h100 ? c->peer_h100_ms : c->peer_h200_ms;
        const char *peer_name = comparable ? c->peer : "-";
        int spill = v.spill_st + v.spill_ld + v.stack;
        if (o->csv)
            printf("%s,%d,%d,%lld,%d,%d,%d,%.2f,%d,%d,%d,%d,%d,%d,%d,%s,%.3e,%.3e,%.4f,%.4f,%.1f,%.3f,%s,%.3f,%.3f,%.0f,"
                   "%.1f,%d\n",
                   name, c->batch, c->heads, (long long)c->seq, c->block, c->local, c->stride, kept, v.spec.block_m,
                   v.spec.block_n, v.spec.num_warps, v.spec.num_stages, v.regs, spill, v.smem, cr.ok ? "ok" : "FAIL",
                   cr.o_err, cr.lse_err, med, mn, tf, util, peer_name, peer, cr.ok && peer > 0 ? med / peer : 0, v.cold_ms,
                   v.warm_ms, v.persistent);
        else if (!cr.ok)
            printf("%-14s %5.1f %3d %3d %2d %2d %4d %5d %6d  CHECK FAILED: o_err %.3g lse_err %.3g bad %lld\n",
                   name, kept, v.spec.block_m, v.spec.block_n, v.spec.num_warps, v.spec.num_stages, v.regs, spill,
                   v.smem, cr.o_err, cr.lse_err, (long long)cr.bad);
        else
            printf("%-14s %5.1f %3d %3d %2d %2d %4d %5d %6d %8.3f %8.3f %6.1f %5.2f %-9s %6.2f %9.0f %8.1f %s\n", name,
                   kept, v.spec.block_m, v.spec.block_n, v.spec.num_warps, v.spec.num_stages, v.regs, spill, v.smem,
                   med, mn, tf, util, peer_name, peer > 0 ? med / peer : 0, v.cold_ms, v.warm_ms,
                   label ? label : v.persistent ? "persistent" : v.spec.kv_gather > 1 ? "grid gathered" : "grid");
        if (o->csv_file && cr.ok && cd->head_dim == HEAD_DIM && bench_dtype == S2_DTYPE_BF16) {
            char fam[64];
            plot_family(c->name, fam, sizeof fam);
            fprintf(o->csv_file, "fwd,%s,%lld,s2c,%.4f\n", fam, (long long)c->seq, med);
            fflush(o->csv_file);
        }
        if (wide && v.has_wide)
            *wide = v.wide;
        fflush(stdout);
    }
    s2_mem_free(ctx, dev, sd.buf);
    s2_mem_free(ctx, dev, sd.work);
    variant_free(&v);
}

int main(int argc, char **argv)
{
    options o;
    if (!parse_args(argc, argv, &o))
        return usage();
    s2_ctx *ctx = s2_ctx_new();
    int count = 0;
    s2_status st = s2_device_count(ctx, &count);
    if (st != S2_OK || count == 0) {
        printf("no GPU: skipped (%s)\n", s2_ctx_message(ctx));
        s2_ctx_free(ctx);
        return 0;
    }
    s2_device *dev = NULL;
    if (s2_device_open(ctx, 0, &dev) != S2_OK) {
        printf("no GPU: skipped (%s)\n", s2_ctx_message(ctx));
        s2_ctx_free(ctx);
        return 0;
    }
    const s2_device_info *info = s2_device_get_info(dev);
    s2_arch arch;
    if (s2_arch_for_device(info->cc_major, info->cc_minor, &arch) != S2_OK) {
        printf("no GPU: skipped (compute capability %d.%d unsupported)\n", info->cc_major, info->cc_minor);
        s2_device_free(dev);
        s2_ctx_free(ctx);
        return 0;
    }
    if (o.arch) {
        s2_arch want_arch;
        /* a cubin loads only on its own architecture: on Hopper, sm_90 is
         * the mma.sync template (sm_80's) compiled for it */
        if (s2_arch_parse(o.arch, &want_arch) != S2_OK ||
            !(want_arch == arch || (want_arch == S2_ARCH_SM90 && arch == S2_ARCH_SM90A))) {
            fprintf(stderr, "bench_fwd: --arch %s: not an arch this device loads (its own: %s; on sm_90a, sm_90 "
                            "runs the mma.sync template)\n", o.arch, s2_arch_name(arch));
            s2_device_free(dev);
            s2_ctx_free(ctx);
            return 2;
        }
        arch = want_arch;
    }
    bool h100 = strstr(info->name, "H100") != NULL;
    const char *tc = NULL;
    if (s2_toolchain_version(ctx, S2_CUBIN_AUTO, &tc) != S2_OK)
        tc = "?";
    bench_timer timer;
    if (bench_timer_open(ctx, dev, !o.warm, &timer) != S2_OK) {
        fprintf(stderr, "timer: %s\n", s2_ctx_message(ctx));
        s2_device_free(dev);
        s2_ctx_free(ctx);
        return 1;
    }
    o.timer = &timer;
    printf("device %s (cc %d.%d, %d SMs), arch %s, toolchain %s; peers: %s table of PEERS.md; timer: %s, median of "
           "%d\n", info->name, info->cc_major, info->cc_minor, info->sm_count, s2_arch_name(arch), tc,
           bench_peer_column(info), o.warm ? "warm L2" : "L2 flushed before each repetition", o.reps);
    if (o.dump_dir)
        mkdir(o.dump_dir, 0755);
    int rc = 1;
    float *stage = malloc((size_t)POOL * sizeof *stage);
    if (!stage || !pool_init(12345)) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    print_header(&o);
    for (int ci = 0; ci < NUM_CONFIGS * o.head_dim.n; ci++) {
        if (!o.want[ci % NUM_CONFIGS])
            continue;
        const bench_config *cfg = &configs[ci % NUM_CONFIGS];
        int head_dim = o.head_dim.v[ci / NUM_CONFIGS];
        config_data cd;
        if (config_open(ctx, dev, cfg, head_dim, &cd, stage) != S2_OK) {
            printf("%s/d%d: setup failed: %s\n", cfg->name, head_dim, s2_ctx_message(ctx));
            s2_ctx_clear(ctx);
            config_close(ctx, dev, &cd);
            continue;
        }
        for (int i = 0; i < o.nspecs; i++) {
            s2_kspec want = o.specs[i];
            want.kind = S2_KERNEL_FWD, want.dtype = bench_dtype, want.head_dim = head_dim, want.arch = arch;
            run_variant(ctx, dev, &cd, &want, &o, h100, NULL, NULL);
        }
        for (int a = 0; a < (o.nspecs ? 0 : o.block_m.n); a++)
            for (int bn = 0; bn < o.block_n.n; bn++)
                for (int w = 0; w < o.warps.n; w++)
                    for (int s = 0; s < o.stages.n; s++)
                        for (int pi = 0; pi < o.persistent.n; pi++)
                            for (int gi = 0; gi < o.gather.n; gi++) {
                                s2_kspec want = {.kind = S2_KERNEL_FWD, .dtype = bench_dtype,
                                                       .head_dim = head_dim, .arch = arch, .block_m = o.block_m.v[a],
                                                       .block_n = o.block_n.v[bn], .num_warps = o.warps.v[w],
                                                       .num_stages = o.stages.v[s], .persistent = o.persistent.v[pi],
                                                       .kv_gather = o.gather.v[gi]};
                                s2_kspec wide = {0};
                                run_variant(ctx, dev, &cd, &want, &o, h100, NULL, &wide);
                                /* on its own grid (role fwd_wide: fwd_tma, or fwd_tma_persistent) */
                                if (wide.block_m)
                                    run_variant(ctx, dev, &cd, &wide, &o, h100,
                                                wide.persistent > 0 ? "wide persistent" : "wide", NULL);
                            }
        config_close(ctx, dev, &cd);
    }
    rc = 0;
done:
    bench_timer_close(ctx, &timer);
    if (o.csv_file)
        fclose(o.csv_file);
    free(stage);
    free(pool);
    s2_device_free(dev);
    s2_ctx_free(ctx);
    return rc;
}
