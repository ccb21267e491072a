/* bench_decode: times the paged-KV decode (s2_attn_decode, split-KV and
 * combine included) on the decode rows of shared/PEERS.md: bf16, D 128,
 * H = kv heads = 32, block 64, one new token after `past` cached tokens.
 *
 * Effective TB/s count only the KV bytes the pattern reads (PEERS.md): per
 * sequence and kv head, the tokens of the key blocks any query head of the
 * group keeps, times D * 2 bytes, for K and V.  The pool holds enough copies
 * that consecutive launches read different pages (at least 256 MB apart,
 * beyond the 50 MB L2); its contents are a constant (timing only: tests/decode
 * checks the numbers).  Time (bench_timer.h): --reps launches (default 50),
 * each between two CUDA events after a 256 MB write that evicts L2, median;
 * --timer warm: no write (the rotating pool still keeps L2 cold).  The copy
 * ceiling is measured in the same run (a 1 GiB device-to-device copy, read
 * plus write bytes), and the peer column (H100 or H200 of PEERS.md) follows
 * the device's name.  --kv-dtype bf16,e4m3 runs each row with bf16 pages and
 * with fp8 e4m3 pages (per-kv-head scales; bytes counted at one per element)
 * and prints the e4m3 speedup over bf16.  Without a CUDA driver or device it
 * prints "no GPU: skipped" and exits 0.
 *
 *   bench_decode [--page N] [--reps N] [--splits N] [--stages N] [--warps N] [--kv-dtype L] [--timer flush|warm] */
#include "bench_cu.h"
#include "bench_timer.h"
#include "rt_cuda.h"
#include "s2c/compile.h"
#include "s2c/attn_runtime.h"
#include "s2c/codegen.h"
#include "s2c/decode.h"
#include "s2c/layout.h"
#include "s2c/runtime.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct row {
    int batch;
    int64_t past;
    int local, stride;
    double peer_h200_ms, peer_h100_ms;   /* S2-Triton (PEERS.md) */
    double target_h200_ms, target_h100_ms; /* 0: the bandwidth target (90% of the copy ceiling) */
} row;

static const row rows[] = {
    {16, 8192, 16, 8, 0.132, 0.183, 0, 0},
    {16, 32768, 16, 8, 0.310, 0.446, 0, 0},
    {4, 131072, 16, 8, 0.270, 0.392, 0, 0},
    {16, 32768, 8, 16, 0.168, 0.317, 0, 0},
    {1, 131072, 16, 8, 0.232, 0.225, 0.08, 0.11},
    {1, 32768, 8, 16, 0.092, 0.170, 0, 0},
};
enum { NUM_ROWS = sizeof rows / sizeof rows[0], H = 32, D = 128, BLOCK = 64 };

enum { MAX_LIST = 16 };
typedef struct opts {
    int page, reps;
    int splits[MAX_LIST], stages[MAX_LIST], warps[MAX_LIST], rows[MAX_LIST];
    int n_splits, n_stages, n_warps, n_rows;
    int stage, warp;             /* the combination being run */
    s2_dtype kv_list[2];         /* --kv-dtype: the pages' dtypes, each row run with each */
    int n_kv;
    s2_dtype kv;                 /* the one being run */
    bool h100;                   /* the peer column */
    double ceiling_tbs;          /* the device's copy bandwidth, measured */
    bench_timer *timer;
} opts;

typedef struct dec_work {
    s2_attn_kernel *k;
    s2_attn_decode_args *a;
    s2_devptr table;
    int64_t per_set;
    int sets, i;
} dec_work;

static s2_status dec_once(s2_ctx *ctx, void *user, s2_event *mid)
{
    (void)mid;
    dec_work *w = user;
    w->a->block_table = w->table + sizeof(int32_t) * (size_t)(w->per_set * (w->i++ % w->sets));
    return s2_attn_decode(ctx, w->k, NULL, w->a);
}

/* "a,b,c" -> list (at most MAX_LIST) */
static int parse_list(const char *s, int *out)
{
    int n = 0;
    while (*s && n < MAX_LIST) {
        out[n++] = (int)strtol(s, (char **)&s, 10);
        if (*s == ',')
            s++;
    }
    return n;
}

/* "bf16", "e4m3" or "bf16,e4m3" -> o->kv_list; false for anything else */
static bool parse_kv(const char *s, opts *o)
{
    o->n_kv = 0;
    while (*s && o->n_kv < 2) {
        size_t n = strcspn(s, ",");
        if (n == 4 && !strncmp(s, "bf16", 4))
            o->kv_list[o->n_kv++] = S2_DTYPE_BF16;
        else if (n == 4 && !strncmp(s, "e4m3", 4))
            o->kv_list[o->n_kv++] = S2_DTYPE_E4M3;
        else
            return false;
        s += n + (s[n] == ',');
    }
    return o->n_kv > 0 && !*s;
}

static int fail(s2_ctx *ctx, const char *what)
{
    fprintf(stderr, "bench_decode: %s: %s\n", what, s2_ctx_message(ctx));
    return 1;
}

/* The device's copy bandwidth (read + write bytes of a 1 GiB device-to-device
 * copy, median of 10 after 3 warm-ups), in TB/s; 0 on success. */
static int copy_ceiling(s2_ctx *ctx, s2_device *dev, double *tbs)
{
    enum { COPY_BYTES = 1 << 30, REPS = 10 };
    bench_cu cu;
    char err[256];
    if (!bench_cu_load(&cu, err, sizeof err)) {
        fprintf(stderr, "bench_decode: %s\n", err);
        return 1;
    }
    s2_devptr src = 0, dst = 0;
    s2_event *e0 = NULL, *e1 = NULL;
    double t[REPS];
    int rc = 1;
    if (cu.CtxPush((CUcontext)s2_device_cu_context(dev)) != CUDA_SUCCESS)
        return fail(ctx, "cuCtxPushCurrent");
    if (s2_mem_alloc(ctx, dev, COPY_BYTES, &src) != S2_OK || s2_mem_alloc(ctx, dev, COPY_BYTES, &dst) != S2_OK ||
        s2_memset_d8(ctx, dev, src, 1, COPY_BYTES) != S2_OK || s2_event_create(ctx, dev, &e0) != S2_OK ||
        s2_event_create(ctx, dev, &e1) != S2_OK)
        goto done;
    for (int i = -3; i < REPS; i++) {
        float ms = 0;
        if (s2_event_record(ctx, e0, NULL) != S2_OK ||
            cu.MemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, COPY_BYTES, NULL) != CUDA_SUCCESS ||
            s2_event_record(ctx, e1, NULL) != S2_OK || s2_event_elapsed_ms(ctx, e0, e1, &ms) != S2_OK)
            goto done;
        if (i >= 0)
            t[i] = ms;
    }
    *tbs = 2.0 * COPY_BYTES / (bench_median_of(t, REPS) * 1e-3) / 1e12;
    rc = 0;
done:
    if (rc)
        fail(ctx, "copy ceiling");
    CUcontext popped;
    cu.CtxPop(&popped);
    s2_event_free(e0);
    s2_event_free(e1);
    s2_mem_free(NULL, dev, src);
    s2_mem_free(NULL, dev, dst);
    return rc;
}

/* KV bytes read by one sequence of length len (one new token), elements of es bytes. */
static double kv_bytes(const s2_pattern *p, int64_t len, int es)
{
    int64_t m = (len - 1) / p->block_size, blocks = s2_cdiv(len, p->block_size);
    int G = p->heads / p->kv_heads;
    double tokens = 0;
    for (int g = 0; g < p->kv_heads; g++)
        for (int64_t n = 0; n < blocks; n++) {
            bool kept = false;
            for (int i = 0; i < G && !kept; i++)
                kept = s2_block_kept(p, g * G + i, m, n);
            if (kept)
                tokens += (double)((n + 1) * p->block_size < len ? p->block_size : len - n * p->block_size);
        }
    return tokens * D * es * 2;
}

static int run_row(s2_ctx *ctx, s2_device *dev, s2_arch arch, const row *r, const opts *o, double *ms)
{
    s2_local_stride_args pa;
    s2_local_stride_args_default(&pa);
    char name[64];
    snprintf(name, sizeof name, "l%dv%d", r->local, r->stride);
    pa.name = name;
    pa.num_heads = H;
    pa.block_size = BLOCK;
    pa.local_blocks = r->local;
    pa.vert_stride = r->stride;
    s2_pattern_set *set = NULL;
    if (s2_pattern_from_args(ctx, &pa, &set) != S2_OK)
        return fail(ctx, "pattern");
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_kernel_spec spec = {.kind = S2_KERNEL_DECODE, .dtype = S2_DTYPE_BF16, .head_dim = D, .arch = arch,
                           .num_stages = o->stage, .num_warps = o->warp,
                           .kv_dtype = o->kv == S2_DTYPE_BF16 ? 0 : o->kv};
    int es = (int)s2_dtype_size(o->kv);
    s2_artifact *art = NULL;
    s2_attn_kernel *k = NULL;
    int rc = 1;
    s2_devptr pool_k = 0, pool_v = 0, dq = 0, dout = 0, dtab = 0, dlens = 0, ws = 0, dscale = 0;
    int32_t *table = NULL, *lens = NULL;
    if (s2_compile_attention(ctx, p, &spec, S2_CUBIN_AUTO, &art) != S2_OK) {
        fail(ctx, "compile");
        goto done;
    }
    if (s2_attn_load(ctx, dev, art->cubin, art->cubin_size, p->name, S2_DTYPE_BF16, D, &k) != S2_OK) {
        fail(ctx, "load");
        goto done;
    }
    int64_t len = r->past + 1;
    double bytes = kv_bytes(p, len, es) * r->batch, dense = (double)len * H * D * 2 * es * r->batch;
    int64_t per_seq = s2_cdiv(len, o->page), per_set = per_seq * r->batch;
    int sets = (int)fmax(1.0, ceil(256e6 / bytes));
    int64_t pages = per_set * sets;
    size_t page_bytes = (size_t)o->page * H * D * (size_t)es;
    table = malloc(sizeof(int32_t) * (size_t)pages);
    lens = malloc(sizeof(int32_t) * (size_t)r->batch);
    /* shuffled page ids within each set */
    uint64_t s = 88172645463325252ull;
    for (int64_t i = 0; i < pages; i++)
        table[i] = (int32_t)i;
    for (int st = 0; st < sets; st++)
        for (int64_t i = per_set - 1; i > 0; i--) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            int64_t j = (int64_t)(s % (uint64_t)(i + 1));
            int32_t x = table[st * per_set + i];
            table[st * per_set + i] = table[st * per_set + j];
            table[st * per_set + j] = x;
        }
    for (int b = 0; b < r->batch; b++)
        lens[b] = (int32_t)len;
    size_t q_bytes = (size_t)r->batch * H * D * 2;
    s2_status st = s2_mem_alloc(ctx, dev, page_bytes * (size_t)pages, &pool_k);
    if (st == S2_OK) st = s2_mem_alloc(ctx, dev, page_bytes * (size_t)pages, &pool_v);
    if (st == S2_OK) st = s2_memset_d8(ctx, dev, pool_k, 0x3c, page_bytes * (size_t)pages);
    if (st == S2_OK) st = s2_memset_d8(ctx, dev, pool_v, 0x3c, page_bytes * (size_t)pages);
    if (st == S2_OK) st = s2_mem_alloc(ctx, dev, q_bytes, &dq);
    if (st == S2_OK) st = s2_memset_d8(ctx, dev, dq, 0x3c, q_bytes);
    if (st == S2_OK) st = s2_mem_alloc(ctx, dev, q_bytes, &dout);
    if (st == S2_OK) st = s2_mem_alloc(ctx, dev, sizeof(int32_t) * (size_t)pages, &dtab);
    if (st == S2_OK) st = s2_memcpy_h2d(ctx, dev, dtab, table, sizeof(int32_t) * (size_t)pages);
    if (st == S2_OK) st = s2_mem_alloc(ctx, dev, sizeof(int32_t) * (size_t)r->batch, &dlens);
    if (st == S2_OK) st = s2_memcpy_h2d(ctx, dev, dlens, lens, sizeof(int32_t) * (size_t)r->batch);
    if (st == S2_OK && es == 1) st = s2_mem_alloc(ctx, dev, sizeof(float) * H, &dscale);
    if (st == S2_OK && es == 1) st = s2_memset_d8(ctx, dev, dscale, 0x3c, sizeof(float) * H);
    if (st != S2_OK) {
        fail(ctx, "device memory");
        goto done;
    }
    s2_attn_decode_args a = {.batch = r->batch, .n_new = 1, .heads = H, .kv_heads = H, .head_dim = D,
                             .dtype = S2_DTYPE_BF16, .q = dq, .o = dout, .k_pages = pool_k, .v_pages = pool_v,
                             .num_pages = pages, .page_size = o->page, .block_table = dtab,
                             .table_stride = {per_seq, 0}, .max_pages_per_seq = per_seq, .seq_lens = dlens,
                             .max_seq_len = len,
                             .q_stride = {H * D, H * D, D}, .o_stride = {H * D, H * D, D},
                             .k_stride = {(int64_t)o->page * H * D, H * D, D}, .v_stride = {(int64_t)o->page * H * D, H * D, D},
                             .kv_dtype = spec.kv_dtype, .k_scale = dscale, .v_scale = dscale};
    for (int si = 0; si < (o->n_splits ? o->n_splits : 1); si++) {
        a.splits = o->n_splits ? o->splits[si] : 0;
        size_t wsb = 0;
        s2_mem_free(NULL, dev, ws);
        ws = 0;
        if (s2_attn_decode_workspace(ctx, k, &a, &wsb) != S2_OK) {
            fail(ctx, "workspace");
            goto done;
        }
        if (wsb && (s2_mem_alloc(ctx, dev, wsb, &ws) != S2_OK || s2_memset_d8(ctx, dev, ws, 0, wsb) != S2_OK)) {
            fail(ctx, "workspace alloc");
            goto done;
        }
        a.workspace = ws;
        int n_splits = 1;
        if (s2_attn_decode_splits(ctx, k, &a, &n_splits) != S2_OK) {
            fail(ctx, "splits");
            goto done;
        }
        dec_work w = {k, &a, dtab, per_set, sets, 0};
        double best = 0;
        if (bench_timer_median(ctx, o->timer, dec_once, &w, 5, o->reps, &best, NULL, NULL) != S2_OK) {
            fail(ctx, "launch");
            goto done;
        }
        double tbs = bytes / (best * 1e-3) / 1e12, ceil_tbs = o->ceiling_tbs;
        double peer = o->h100 ? r->peer_h100_ms : r->peer_h200_ms, target = o->h100 ? r->target_h100_ms : r->target_h200_ms;
        char verdict[48];
        if (target > 0)
            snprintf(verdict, sizeof verdict, "%s %.2f ms: %s", best <= target ? "<=" : ">", target,
                     best <= target ? "met" : "missed");
        else
            snprintf(verdict, sizeof verdict, "%s 90%%: %s", tbs >= 0.9 * ceil_tbs ? ">=" : "<",
                     tbs >= 0.9 * ceil_tbs ? "met" : "missed");
        *ms = best;
        printf("| %d,%d,%lldK | %d, %d, %d | %4d %-4s | %d/%d | %5.1f%% | %3d | %7.4f | %5.2f TB/s (%3.0f%%) | %6.3f | %s |\n",
               r->batch, H, (long long)(r->past / 1024), BLOCK, r->local, r->stride, o->page, s2_dtype_name(o->kv),
               art->spec.num_warps,
               art->spec.num_stages, 100 * bytes / dense, n_splits, best, tbs, 100 * tbs / ceil_tbs, peer, verdict);
        fflush(stdout);
    }
    rc = 0;
done:
    s2_devptr all[] = {pool_k, pool_v, dq, dout, dtab, dlens, ws, dscale};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        s2_mem_free(NULL, dev, all[i]);
    free(table);
    free(lens);
    s2_attn_kernel_free(k);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    return rc;
}

int main(int argc, char **argv)
{
    opts o = {.page = 64, .reps = 50};
    bool flush = true;
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--page")) o.page = v;
        else if (!strcmp(argv[i], "--reps")) o.reps = v;
        else if (!strcmp(argv[i], "--splits")) o.n_splits = parse_list(argv[i + 1], o.splits);
        else if (!strcmp(argv[i], "--stages")) o.n_stages = parse_list(argv[i + 1], o.stages);
        else if (!strcmp(argv[i], "--warps")) o.n_warps = parse_list(argv[i + 1], o.warps);
        else if (!strcmp(argv[i], "--rows")) o.n_rows = parse_list(argv[i + 1], o.rows);
        else if (!strcmp(argv[i], "--kv-dtype") && parse_kv(argv[i + 1], &o)) continue;
        else if (!strcmp(argv[i], "--timer") && bench_timer_mode(argv[i + 1], &flush)) continue;
        else {
            fprintf(stderr, "usage: bench_decode [--page N] [--reps N] [--splits L] [--stages L] [--warps L] [--rows L] "
                            "[--kv-dtype bf16,e4m3] [--timer flush|warm]\n"
                            "  L: comma list (rows: 1-based indices into the PEERS rows); every combination runs\n");
            return 2;
        }
    }
    s2_ctx *ctx = s2_ctx_new();
    int count = 0;
    s2_device *dev = NULL;
    if (s2_device_count(ctx, &count) != S2_OK || count == 0 || s2_device_open(ctx, 0, &dev) != S2_OK) {
        printf("no GPU: skipped (%s)\n", s2_ctx_message(ctx));
        s2_ctx_free(ctx);
        return 0;
    }
    const s2_device_info *info = s2_device_get_info(dev);
    s2_arch arch;
    if (s2_arch_for_device(info->cc_major, info->cc_minor, &arch) != S2_OK)
        return fail(ctx, "arch");
    bench_timer timer;
    if (bench_timer_open(ctx, dev, flush, &timer) != S2_OK || copy_ceiling(ctx, dev, &o.ceiling_tbs) != 0)
        return fail(ctx, "timer");
    o.timer = &timer;
    o.h100 = strstr(info->name, "H100") != NULL;
    printf("device %s, %d SMs; bf16, D %d, H = kv heads = %d, block %d, page %d, 1 new token; timer: %s, median of %d; "
           "copy ceiling %.2f TB/s (measured); peer: S2-Triton, %s column of PEERS.md\n", info->name, info->sm_count, D, H,
           BLOCK, o.page, flush ? "L2 flushed before each launch" : "warm L2", o.reps, o.ceiling_tbs,
           bench_peer_column(info));
    printf("| B,H,past | block, local, stride | page kv | warps/stages | KV read | splits | ms | eff (of the copy ceiling) | S2-Triton ms | target |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    int rc = 0;
    for (int ri = 0; ri < (o.n_rows ? o.n_rows : NUM_ROWS); ri++) {
        int i = o.n_rows ? o.rows[ri] - 1 : ri;
        if (i < 0 || i >= NUM_ROWS)
            continue;
        for (int wi = 0; wi < (o.n_warps ? o.n_warps : 1); wi++)
            for (int sti = 0; sti < (o.n_stages ? o.n_stages : 1); sti++) {
                o.warp = o.n_warps ? o.warps[wi] : 0;
                o.stage = o.n_stages ? o.stages[sti] : 0;
                double ms[2] = {0, 0};
                for (int kv = 0; kv < (o.n_kv ? o.n_kv : 1); kv++) {
                    o.kv = o.n_kv ? o.kv_list[kv] : S2_DTYPE_BF16;
                    rc |= run_row(ctx, dev, arch, &rows[i], &o, &ms[kv]);
                }
                /* fp8 pages against bf16 (issue 32's target at B 16, 32K: 1.8x) */
                if (o.n_kv == 2 && ms[0] > 0 && ms[1] > 0) {
                    double x = o.kv_list[0] == S2_DTYPE_BF16 ? ms[0] / ms[1] : ms[1] / ms[0];
                    printf("| %d,%d,%lldK | e4m3 pages: %.2fx bf16's speed%s |\n", rows[i].batch, H,
                           (long long)(rows[i].past / 1024), x,
                           rows[i].batch == 16 && rows[i].past == 32768 ? (x >= 1.8 ? " (>= 1.8x: met)" : " (< 1.8x: missed)")
                                                                        : "");
                }
            }
    }
    bench_timer_close(ctx, &timer);
    s2_device_free(dev);
    s2_ctx_free(ctx);
    return rc;
}
