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
 *   3. Time: warm-up, then --reps launches each between two CUDA events,
 *      rotating over enough input sets that the L2 cache does not hold the
 *      previous launch's data; median and min.
 * Effective TFLOP/s count 4 * kept_pairs * D (s2_layout_stats_compute).
 * Without a CUDA driver or device it prints "no GPU: skipped" and exits 0.
 *
 *   bench_fwd [--config NAME[,NAME..]] [--block-m L] [--block-n L]
 *             [--num-warps L] [--num-stages L] [--persistent L] [--kv-gather L]
 *             [--specs BMxBNsSTgG[pP],..] [--reps N] [--csv] [--rows N] [--dump-dir DIR]
 *             [--arch ARCH]
 * L is a comma list; every combination is run (invalid ones are reported
 * and skipped).  --specs names the variants instead (block_m x block_n,
 * stages, kv_gather, persistent: 128x64s3g1p1).  --dump-dir writes each variant's PTX and cubin there.
 * --arch sm_90 on an sm_90a device times the mma.sync template (sm_80's,
 * compiled for sm_90) instead of the wgmma one.
 * The two-slab gathered shape (128x128, kv_gather 2) runs on owned pairs
 * (s2_schedule_pack_gathered_owned), as the runtime packs it; with
 * S2C_BENCH_UNION_PAIRS=1 in the environment, on union pairs instead. */
#include "kernel_abi.h"
#include "s2c/attention.h"
#include "s2c/attn_runtime.h"
#include "s2c/cache.h"
#include "s2c/codegen.h"
#include "s2c/layout.h"
#include "s2c/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct bench_config {
    const char *name;
    int batch, heads;
    int64_t seq;
    int block, local, stride;
    const char *peer;            /* which peer the ratio is against */
    double peer_h200_ms, peer_h100_ms;
    int dense_heads;             /* num_dense_heads: head imbalance (the last ones dense) */
} bench_config;

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
enum { NUM_CONFIGS = sizeof configs / sizeof configs[0], HEAD_DIM = 128, MAX_LIST = 8 };

typedef struct int_list {
    int n;
    int v[MAX_LIST];
} int_list;

typedef struct options {
    bool want[NUM_CONFIGS];
    int_list block_m, block_n, warps, stages, persistent, gather;
    int nspecs;                /* --specs: explicit variants instead of the cross product */
    s2_kernel_spec specs[16];
    int reps, rows;
    bool csv;
    const char *dump_dir;
    const char *arch;          /* --arch: compile for this arch instead of the device's (e.g. sm_80 on sm_90) */
} options;

#define L2_BYTES (60.0 * 1024 * 1024)

/* ---- random inputs ---------------------------------------------------------
 * Every tensor element is pool[(base + index) % POOL]: a pool of bf16 values
 * uniform in [-1.5, 1.5] that the CPU check can read without a host copy of
 * gigabytes.  POOL is odd and not a multiple of the head dimension, so rows
 * and tensors (different bases) do not repeat each other. */
enum { POOL = (1 << 24) + 7 };

static uint16_t *pool;

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static double bf16_to_f64(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static bool pool_init(uint64_t seed)
{
    pool = malloc((size_t)POOL * sizeof *pool);
    if (!pool)
        return false;
    uint64_t s = seed;
    for (size_t i = 0; i < POOL; i++)
        pool[i] = f32_to_bf16((float)(-1.5 + 3.0 * (double)(rng_next(&s) >> 11) / 9007199254740992.0));
    return true;
}

static double pool_at(uint64_t base, uint64_t index) { return bf16_to_f64(pool[(base + index) % POOL]); }

/* Device buffer of `elems` bf16 filled from the pool at `base`. */
static s2_status upload_pool(s2_ctx *ctx, s2_device *dev, s2_devptr dst, uint64_t elems, uint64_t base,
                             uint16_t *stage)
{
    for (uint64_t done = 0; done < elems;) {
        uint64_t n = elems - done < POOL ? elems - done : POOL;
        uint64_t o = (base + done) % POOL;
        uint64_t first = POOL - o < n ? POOL - o : n;
        memcpy(stage, pool + o, first * 2);
        memcpy(stage + first, pool, (n - first) * 2);
        s2_status st = s2_memcpy_h2d(ctx, dev, dst + done * 2, stage, n * 2);
        if (st != S2_OK)
            return st;
        done += n;
    }
    return S2_OK;
}

/* ---- one configuration's data ---------------------------------------------- */
typedef struct input_set {
    s2_devptr q, k, v, o, lse;
    uint64_t qb, kb, vb;   /* pool bases */
} input_set;

typedef struct config_data {
    const bench_config *cfg;
    s2_pattern_set *set;
    const s2_pattern *p;
    s2_layout *lay;
    uint64_t elems;        /* B*S*H*D per tensor */
    int nsets;
    input_set sets[8];
} config_data;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- the kernel through the cache ------------------------------------------- */
typedef struct variant {
    s2_kernel_spec spec;       /* resolved */
    s2_module *mod;
    s2_kernel *kern;
    int threads, smem;
    double cold_ms, warm_ms;
    int regs, spill_st, spill_ld, stack;
    char kname[128];
    bool tma;                  /* S2_FWD_ABI_TMA(_PERSISTENT): tensor maps per input set */
    bool persistent;           /* S2_FWD_ABI_TMA_PERSISTENT: grid of SMs x resident CTAs */
    uint32_t grid_p;
    s2_tensor_map maps[8][3];
    bool has_wide;             /* the module's kernel.wide (timed as a row of its own, labelled "wide") */
    s2_kernel_spec wide;
} variant;

static void variant_free(variant *v)
{
    s2_kernel_free(v->kern);
    s2_module_free(v->mod);
    v->kern = NULL;
    v->mod = NULL;
}

static s2_status write_blob(const char *dir, const char *name, const char *ext, const void *data, size_t size)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
    FILE *f = fopen(path, "wb");
    if (!f)
        return S2_ERR_IO;
    size_t w = fwrite(data, 1, size, f);
    fclose(f);
    return w == size ? S2_OK : S2_ERR_IO;
}

/* Remove the files of a temporary cache directory, then the directory. */
static void remove_dir(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static s2_status jit_variant(s2_ctx *ctx, s2_device *dev, const config_data *cd, const s2_kernel_spec *want,
                             const options *opt, variant *v)
{
    memset(v, 0, sizeof *v);
    v->spec = *want;
    s2_status st = s2_kernel_spec_resolve(ctx, &v->spec, cd->p);
    if (st != S2_OK)
        return st;
    char tag[160];
    snprintf(tag, sizeof tag, "%s_m%d_n%d_w%d_s%d%s_g%d", cd->cfg->name, v->spec.block_m, v->spec.block_n,
             v->spec.num_warps, v->spec.num_stages, v->spec.persistent > 0 ? "_p" : "", v->spec.kv_gather);
    char dir[] = "/tmp/s2c-bench-cache-XXXXXX";
    if (!mkdtemp(dir))
        return S2_ERR_IO;
    /* the pattern's serialization for the key: its manifest text */
    char *ptext = NULL;
    s2_manifest_kernel mk = {.name = "k", .pattern = cd->p->name, .spec = v->spec, .threads = 0, .smem_bytes = 0};
    st = s2_manifest_format(ctx, v->spec.arch, &mk, 1, &cd->p, 1, &ptext);
    s2_cache *cache = NULL;
    s2_artifact *art = NULL;
    void *payload = NULL;
    size_t psize = 0;
    s2_manifest *man = NULL;

    /* cold */
    double t0 = now_ms();
    s2_cache_key key;
    s2_cache_key_desc kd = {.pattern = ptext, .spec = &v->spec, .arch = s2_arch_name((s2_arch)v->spec.arch)};
    if (st == S2_OK)
        st = s2_cache_open(ctx, dir, &cache);
    if (st == S2_OK)
        st = s2_cache_key_build(ctx, &kd, &key);
    if (st == S2_OK) {
        st = s2_cache_lookup(ctx, cache, &key, &payload, &psize);
        if (st == S2_OK) {
            fprintf(stderr, "a fresh cache directory gave a hit\n");
            st = S2_ERR_INTERNAL;
        } else if (st == S2_ERR_NOT_FOUND) {
            s2_ctx_clear(ctx);
            st = S2_OK;
        }
    }
    if (st == S2_OK)
        st = s2_compile_attention(ctx, cd->p, want, S2_CUBIN_AUTO, &art);   /* unresolved: the wide variant too */
    if (st == S2_OK)
        st = s2_cache_store(ctx, cache, &key, art->cubin, art->cubin_size);
    s2_module *cold_mod = NULL;
    if (st == S2_OK)
        st = s2_module_load_data(ctx, dev, art->cubin, art->cubin_size, &cold_mod);
    v->cold_ms = now_ms() - t0;
    s2_module_free(cold_mod);
    s2_cache_close(cache);
    cache = NULL;
    if (st == S2_OK) {
        v->regs = art->kernels[0].registers;
        v->spill_st = art->kernels[0].spill_stores;
        v->spill_ld = art->kernels[0].spill_loads;
        v->stack = art->kernels[0].stack_frame;
        if (opt->dump_dir) {
            write_blob(opt->dump_dir, tag, "cubin", art->cubin, art->cubin_size);
            write_blob(opt->dump_dir, tag, "ptx", art->ptx, art->ptx_len);
        }
    }

    /* warm: the launch shape comes from the cubin's own manifest */
    t0 = now_ms();
    if (st == S2_OK)
        st = s2_cache_open(ctx, dir, &cache);
    if (st == S2_OK)
        st = s2_cache_key_build(ctx, &kd, &key);
    if (st == S2_OK)
        st = s2_cache_lookup(ctx, cache, &key, &payload, &psize);
    if (st == S2_OK)
        st = s2_module_load_data(ctx, dev, payload, psize, &v->mod);
    v->warm_ms = now_ms() - t0;
    const char *mtext = NULL;
    size_t mlen = 0;
    if (st == S2_OK)
        st = s2_cubin_find_manifest(ctx, payload, psize, &mtext, &mlen);
    if (st == S2_OK)
        st = s2_manifest_parse(ctx, mtext, mlen, &man);
    if (st == S2_OK && s2_manifest_num_kernels(man) != 1) {
        fprintf(stderr, "manifest with %d kernels\n", s2_manifest_num_kernels(man));
        st = S2_ERR_INTERNAL;
    }
    if (st == S2_OK) {
        const s2_manifest_kernel *k = s2_manifest_kernel_at(man, 0);
        snprintf(v->kname, sizeof v->kname, "%s", k->name);
        v->threads = k->threads;
        v->smem = k->smem_bytes;
        v->tma = k->abi != S2_FWD_ABI_PTRS;
        v->persistent = k->abi == S2_FWD_ABI_TMA_PERSISTENT;
        v->has_wide = k->has_wide;
        v->wide = k->wide_spec;
        st = s2_kernel_get(ctx, v->mod, v->kname, &v->kern);
    }
    if (st == S2_OK && v->persistent) {
        /* as runtime/attn.c: resident CTAs from registers, shared memory, threads */
        s2_kernel_attrs at;
        st = s2_kernel_get_attrs(ctx, v->kern, &at);
        int warps = (v->threads + 31) / 32, warp_regs = ((at.num_regs * 32 + 255) / 256) * 256;
        int by_regs = warp_regs ? 65536 / (warps * warp_regs) : 32;
        int by_smem = 228 * 1024 / (v->smem + at.static_smem_bytes + 1024);
        int n = by_regs < by_smem ? by_regs : by_smem;
        n = n < 2048 / v->threads ? n : 2048 / v->threads;
        v->grid_p = (uint32_t)(s2_device_get_info(dev)->sm_count * (n < 1 ? 1 : n));
    }
    s2_manifest_free(man);
    free(payload);
    s2_cache_close(cache);
    s2_artifact_free(art);
    free(ptext);
    remove_dir(dir);
    if (st != S2_OK)
        variant_free(v);
    return st;
}

/* ---- launches ----------------------------------------------------------------- */
typedef struct sched_dev {
    s2_devptr buf;
    s2_devptr cls, offs, ents;
    int32_t first, q_tiles;
    double kept_pairs, tile_flops;
    int64_t entries;
    s2_devptr work;            /* persistent: the longest-first work list */
    s2_devptr counter;         /* and its work counters (after the list) */
    int32_t n_work;
} sched_dev;

static s2_status sched_upload(s2_ctx *ctx, s2_device *dev, const config_data *cd, const s2_kernel_spec *spec,
                              sched_dev *sd)
{
    memset(sd, 0, sizeof *sd);
    int gather = spec->kv_gather > 1 ? spec->kv_gather : 1;
    s2_tile_spec ts = {spec->block_m, spec->block_n / gather};
    s2_schedule *sched = NULL;
    s2_packed_schedule pk;
    memset(&pk, 0, sizeof pk);
    s2_layout_stats stats;
    s2_status st = s2_schedule_build(ctx, cd->lay, ts, false, &sched);
    if (st == S2_OK)
        /* (S2C_BENCH_UNION_PAIRS=1: the two-slab shape on union pairs, for comparison) */
        st = s2_kernel_spec_owned_pairs(spec) && getenv("S2C_BENCH_UNION_PAIRS")
                 ? s2_schedule_pack_gathered(ctx, sched, gather, &pk)
                 : s2_kernel_spec_pack_forward(ctx, spec, sched, &pk);
    if (st == S2_OK)
        st = s2_layout_stats_compute(ctx, cd->lay, ts, HEAD_DIM, S2_DTYPE_BF16, &stats);
    if (st == S2_OK)
        st = s2_mem_alloc(ctx, dev, pk.size, &sd->buf);
    if (st == S2_OK)
        st = s2_memcpy_h2d(ctx, dev, sd->buf, pk.data, pk.size);
    if (st == S2_OK) {
        sd->cls = sd->buf + pk.class_of_head_off;
        sd->offs = sd->buf + pk.offsets_off;
        sd->ents = sd->buf + pk.entries_off;
        sd->first = (int32_t)sched->geom.first_q_tile;
        sd->q_tiles = (int32_t)sched->geom.q_tiles;
        sd->kept_pairs = stats.kept_pairs;
        sd->tile_flops = stats.tile_flops;
        /* gathered: group key blocks per computed tile; the packed entries
         * are per class of heads, the layout's per head */
        if (gather > 1 && stats.entries > 0) {
            const int32_t *cls = (const int32_t *)((const char *)pk.data + pk.class_of_head_off);
            const int32_t *off = (const int32_t *)((const char *)pk.data + pk.offsets_off);
            int64_t lists = sched->geom.q_tiles, per_head = 0;
            for (int h = 0; h < sched->heads; h++)
                per_head += off[(int64_t)(cls[h] + 1) * lists] - off[(int64_t)cls[h] * lists];
            sd->tile_flops *= (double)gather * (double)per_head / (double)stats.entries;
        }
        sd->entries = stats.entries;
    }
    if (st == S2_OK && spec->persistent > 0) {
        int32_t *work = NULL;
        int64_t n = 0;
        st = s2_schedule_work_list(ctx, sched, &work, &n);
        /* the list, then two zeroed work counters (attention.h) */
        int32_t *w4 = st == S2_OK ? realloc(work, (size_t)(n + 4) * sizeof *work) : NULL;
        if (w4) {
            work = w4;
            memset(work + n, 0, 4 * sizeof *work);
        } else if (st == S2_OK) {
            st = S2_ERR_NOMEM;
        }
        if (st == S2_OK)
            st = s2_mem_alloc(ctx, dev, (size_t)(n + 4) * sizeof *work, &sd->work);
        if (st == S2_OK)
            st = s2_memcpy_h2d(ctx, dev, sd->work, work, (size_t)(n + 4) * sizeof *work);
        sd->n_work = (int32_t)n;
        sd->counter = sd->work + 4 * (s2_devptr)((n + 1) & ~1);
        free(work);
    }
    s2_packed_schedule_free(&pk);
    s2_schedule_free(sched);
    return st;
}

static s2_status launch(s2_ctx *ctx, const config_data *cd, const variant *v, const sched_dev *sd,
                        const input_set *in)
{
    const bench_config *c = cd->cfg;
    int64_t H = c->heads, S = c->seq, D = HEAD_DIM;
    int64_t st3[3] = {S * H * D, H * D, D};
    int32_t q_len = (int32_t)S, kv_len = (int32_t)S;
    float scale_log2 = (float)(1.0 / sqrt((double)D) * M_LOG2E);
    s2_devptr q = in->q, k = in->k, vv = in->v, o = in->o, lse = in->lse;
    s2_devptr cls = sd->cls, offs = sd->offs, ents = sd->ents;
    int32_t first = sd->first, q_tiles = sd->q_tiles, batch = c->batch;
    int64_t a0 = st3[0], a1 = st3[1], a2 = st3[2];
    int si = (int)(in - cd->sets);
    s2_tensor_map *m = (s2_tensor_map *)v->maps[si];
    void *args[] = {&q, &k, &vv, &o, &lse, &a0, &a1, &a2, &a0, &a1, &a2, &a0, &a1, &a2, &a0, &a1, &a2,
                    &q_len, &kv_len, &scale_log2, &cls, &offs, &ents, &first, &q_tiles, &m[0], &m[1], &m[2],
                    (void *)&sd->work, (void *)&sd->n_work, &batch, (void *)&sd->counter, NULL};
    s2_devptr no_seqs = 0; /* uniform batch: the trailing seqinfo parameter is null */
    args[!v->tma ? 25 : v->persistent ? 32 : 28] = &no_seqs;
    s2_launch_cfg cfg = {.grid = {(uint32_t)q_tiles, (uint32_t)c->heads, (uint32_t)c->batch},
                         .block = {(uint32_t)v->threads, 1, 1},
                         .smem_bytes = (uint32_t)v->smem};
    if (v->persistent) {
        int64_t items = (int64_t)sd->n_work * c->batch;
        cfg.grid[0] = (uint32_t)((int64_t)v->grid_p < items ? (int64_t)v->grid_p : items);
        cfg.grid[1] = cfg.grid[2] = 1;
    }
    return s2_kernel_launch(ctx, v->kern, &cfg, args);
}

/* Tensor maps of every input set, built once (not inside the timed region). */
static s2_status variant_maps(s2_ctx *ctx, const s2_device *dev, const config_data *cd, variant *v)
{
    const bench_config *c = cd->cfg;
    for (int i = 0; v->tma && i < cd->nsets; i++) {
        const input_set *in = &cd->sets[i];
        int64_t H = c->heads, S = c->seq, D = HEAD_DIM;
        s2_attn_fwd_args a = {.batch = c->batch, .q_len = S, .kv_len = S, .heads = c->heads, .kv_heads = c->heads,
                              .head_dim = HEAD_DIM, .dtype = S2_DTYPE_BF16, .q = in->q, .k = in->k, .v = in->v,
                              .o = in->o, .lse = in->lse};
        int64_t st3[3] = {S * H * D, H * D, D};
        for (int j = 0; j < 3; j++)
            a.q_stride[j] = a.k_stride[j] = a.v_stride[j] = a.o_stride[j] = st3[j];
        s2_status st = s2_attn_fwd_tensor_maps(ctx, dev, &v->spec, &a, v->maps[i]);
        if (st != S2_OK)
            return st;
    }
    return S2_OK;
}

/* ---- the check ------------------------------------------------------------------
 * Every element written (poisoned with NaN before) and finite; `rows` query
 * rows (the last one and random others) against float64 on the CPU. */
typedef struct check_result {
    bool ok;
    double o_err, lse_err;
    int64_t bad;
} check_result;

static s2_status check_variant(s2_ctx *ctx, s2_device *dev, const config_data *cd, const variant *v,
                               const sched_dev *sd, int rows, uint64_t seed, check_result *cr)
{
    const bench_config *c = cd->cfg;
    const input_set *in = &cd->sets[0];
    const int64_t B = c->batch, H = c->heads, S = c->seq, D = HEAD_DIM;
    memset(cr, 0, sizeof *cr);
    s2_status st = s2_memset_d8(ctx, dev, in->o, 0xff, cd->elems * 2);
    if (st == S2_OK)
        st = s2_memset_d8(ctx, dev, in->lse, 0xff, (size_t)(B * H * S) * 4);
    if (st == S2_OK)
        st = launch(ctx, cd, v, sd, in);
    if (st == S2_OK)
        st = s2_device_synchronize(ctx, dev);
    uint16_t *o = malloc(cd->elems * 2);
    float *lse = malloc((size_t)(B * H * S) * 4);
    double *sc = malloc((size_t)S * sizeof *sc);
    if (!o || !lse || !sc)
        st = S2_ERR_NOMEM;
    if (st == S2_OK)
        st = s2_memcpy_d2h(ctx, dev, o, in->o, cd->elems * 2);
    if (st == S2_OK)
        st = s2_memcpy_d2h(ctx, dev, lse, in->lse, (size_t)(B * H * S) * 4);
    if (st != S2_OK) {
        free(o), free(lse), free(sc);
        return st;
    }
    for (uint64_t i = 0; i < cd->elems; i++)
        if (!isfinite(bf16_to_f64(o[i])))
            cr->bad++;
    for (int64_t i = 0; i < B * H * S; i++)
        if (!isfinite(lse[i]))
            cr->bad++;

    uint64_t rs = seed;
    double num = 0, den = 0, scale = 1.0 / sqrt((double)D);
    double ov[HEAD_DIM];
    for (int r = 0; r < rows; r++) {
        int64_t b = r == 0 ? B - 1 : (int64_t)(rng_next(&rs) % (uint64_t)B);
        int64_t h = r == 0 ? H - 1 : (int64_t)(rng_next(&rs) % (uint64_t)H);
        int64_t i = r == 0 ? S - 1 : (int64_t)(rng_next(&rs) % (uint64_t)S);
        uint64_t qrow = (uint64_t)(((b * S + i) * H + h) * D);
        double mx = -INFINITY;
        for (int64_t j = 0; j < S; j++) {
            sc[j] = -INFINITY;
            if (!s2_token_kept(cd->p, (int)h, i, j))
                continue;
            uint64_t krow = (uint64_t)(((b * S + j) * H + h) * D);
            double s = 0;
            for (int d = 0; d < D; d++)
                s += pool_at(in->qb, qrow + (uint64_t)d) * pool_at(in->kb, krow + (uint64_t)d);
            sc[j] = s * scale;
            mx = fmax(mx, sc[j]);
        }
        double l = 0;
        for (int d = 0; d < D; d++)
            ov[d] = 0;
        for (int64_t j = 0; j < S; j++) {
            if (sc[j] == -INFINITY)
                continue;
            double p = exp(sc[j] - mx);
            l += p;
            uint64_t vrow = (uint64_t)(((b * S + j) * H + h) * D);
            for (int d = 0; d < D; d++)
                ov[d] += p * pool_at(in->vb, vrow + (uint64_t)d);
        }
        for (int d = 0; d < D; d++) {
            double ref = l > 0 ? ov[d] / l : 0.0, x = bf16_to_f64(o[qrow + (uint64_t)d]);
            num += (x - ref) * (x - ref);
            den += ref * ref;
        }
        double lref = l > 0 ? mx + log(l) : -INFINITY;
        double lg = lse[(b * H + h) * S + i];
        if (l > 0)
            cr->lse_err = fmax(cr->lse_err, fabs(lg - lref));
        else if (!(isinf(lg) && lg < 0))
            cr->bad++;
    }
    cr->o_err = den > 0 ? sqrt(num / den) : sqrt(num);
    cr->ok = cr->bad == 0 && cr->o_err <= 2e-2 && cr->lse_err <= 1e-3;
    free(o), free(lse), free(sc);
    return S2_OK;
}

/* ---- timing ----------------------------------------------------------------------- */
static s2_status time_variant(s2_ctx *ctx, s2_device *dev, const config_data *cd, const variant *v,
                              const sched_dev *sd, int reps, double *med, double *min)
{
    s2_event *e0 = NULL, *e1 = NULL;
    s2_status st = s2_event_create(ctx, dev, &e0);
    if (st == S2_OK)
        st = s2_event_create(ctx, dev, &e1);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!t)
        st = S2_ERR_NOMEM;
    for (int i = 0; st == S2_OK && i < 5; i++)
        st = launch(ctx, cd, v, sd, &cd->sets[i % cd->nsets]);
    if (st == S2_OK)
        st = s2_device_synchronize(ctx, dev);
    for (int i = 0; st == S2_OK && i < reps; i++) {
        float ms = 0;
        st = s2_event_record(ctx, e0, NULL);
        if (st == S2_OK)
            st = launch(ctx, cd, v, sd, &cd->sets[i % cd->nsets]);
        if (st == S2_OK)
            st = s2_event_record(ctx, e1, NULL);
        if (st == S2_OK)
            st = s2_event_elapsed_ms(ctx, e0, e1, &ms);
        if (st == S2_OK)
            t[i] = ms;
    }
    if (st == S2_OK) {
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        *med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
        *min = t[0];
    }
    free(t);
    s2_event_free(e0);
    s2_event_free(e1);
    return st;
}

/* ---- configurations ------------------------------------------------------------ */
static s2_status config_open(s2_ctx *ctx, s2_device *dev, const bench_config *c, config_data *cd, uint16_t *stage)
{
    memset(cd, 0, sizeof *cd);
    cd->cfg = c;
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
    a.num_dense_heads = c->dense_heads;
    s2_status st = s2_pattern_from_args(ctx, &a, &cd->set);
    if (st != S2_OK)
        return st;
    cd->p = s2_pattern_set_get(cd->set, 0);
    st = s2_layout_new(ctx, cd->p, c->seq, c->seq, &cd->lay);
    if (st != S2_OK)
        return st;
    cd->elems = (uint64_t)c->batch * (uint64_t)c->seq * (uint64_t)c->heads * HEAD_DIM;
    double set_bytes = 4.0 * (double)cd->elems * 2;
    cd->nsets = (int)ceil(3 * L2_BYTES / set_bytes);
    cd->nsets = cd->nsets < 2 ? 2 : cd->nsets > 8 ? 8 : cd->nsets;
    for (int i = 0; st == S2_OK && i < cd->nsets; i++) {
        input_set *in = &cd->sets[i];
        in->qb = 3 * (uint64_t)i * 1000003u + 11;
        in->kb = in->qb + 7777777u;
        in->vb = in->qb + 12345679u;
        s2_devptr *p[4] = {&in->q, &in->k, &in->v, &in->o};
        for (int j = 0; st == S2_OK && j < 4; j++)
            st = s2_mem_alloc(ctx, dev, cd->elems * 2, p[j]);
        if (st == S2_OK)
            st = s2_mem_alloc(ctx, dev, (size_t)c->batch * c->heads * c->seq * 4, &in->lse);
        if (st == S2_OK)
            st = upload_pool(ctx, dev, in->q, cd->elems, in->qb, stage);
        if (st == S2_OK)
            st = upload_pool(ctx, dev, in->k, cd->elems, in->kb, stage);
        if (st == S2_OK)
            st = upload_pool(ctx, dev, in->v, cd->elems, in->vb, stage);
    }
    return st;
}

static void config_close(s2_ctx *ctx, s2_device *dev, config_data *cd)
{
    for (int i = 0; i < cd->nsets; i++) {
        input_set *in = &cd->sets[i];
        s2_mem_free(ctx, dev, in->q);
        s2_mem_free(ctx, dev, in->k);
        s2_mem_free(ctx, dev, in->v);
        s2_mem_free(ctx, dev, in->o);
        s2_mem_free(ctx, dev, in->lse);
    }
    s2_layout_free(cd->lay);
    s2_pattern_set_free(cd->set);
}

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
                    "                 [--reps N] [--rows N] [--csv]\n"
                    "                 [--dump-dir DIR] [--arch sm_90]\n"
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
            (s2_kernel_spec){.block_m = bm, .block_n = bn, .num_stages = st, .kv_gather = g, .persistent = per};
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
    bool any = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--csv")) {
            o->csv = true;
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

/* Times one spec; a module with a wide variant (kernel.wide: the runtime
 * launches it for long lists) sets *wide to its spec, timed by the caller as
 * a row of its own. */
static void run_variant(s2_ctx *ctx, s2_device *dev, config_data *cd, const s2_kernel_spec *want,
                        const options *o, bool h100, const char *label, s2_kernel_spec *wide)
{
    const bench_config *c = cd->cfg;
    variant v;
    s2_status st = jit_variant(ctx, dev, cd, want, o, &v);
    if (st != S2_OK) {
        printf("%-14s bm %d bn %d w %d st %d: skipped: %s\n", c->name, want->block_m, want->block_n, want->num_warps,
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
        st = time_variant(ctx, dev, cd, &v, &sd, o->reps, &med, &mn);
    if (st != S2_OK) {
        printf("%-14s bm %d bn %d w %d st %d: error: %s\n", c->name, v.spec.block_m, v.spec.block_n,
               v.spec.num_warps, v.spec.num_stages, s2_ctx_message(ctx));
        s2_ctx_clear(ctx);
    } else {
        /* the layout's pair counts are per batch element (summed over heads) */
        double dense = (double)c->heads * ((double)c->seq * (c->seq + 1) / 2);
        double kept = 100.0 * sd.kept_pairs / dense;
        double flops = 4.0 * sd.kept_pairs * HEAD_DIM * c->batch;
        double tf = cr.ok ? flops / (med * 1e-3) / 1e12 : 0;
        double util = sd.kept_pairs * 4.0 * HEAD_DIM / sd.tile_flops;   /* kept pairs / computed pairs */
        double peer = h100 ? c->peer_h100_ms : c->peer_h200_ms;
        int spill = v.spill_st + v.spill_ld + v.stack;
        if (o->csv)
            printf("%s,%d,%d,%lld,%d,%d,%d,%.2f,%d,%d,%d,%d,%d,%d,%d,%s,%.3e,%.3e,%.4f,%.4f,%.1f,%.3f,%s,%.3f,%.3f,%.0f,"
                   "%.1f,%d\n",
                   c->name, c->batch, c->heads, (long long)c->seq, c->block, c->local, c->stride, kept, v.spec.block_m,
                   v.spec.block_n, v.spec.num_warps, v.spec.num_stages, v.regs, spill, v.smem, cr.ok ? "ok" : "FAIL",
                   cr.o_err, cr.lse_err, med, mn, tf, util, c->peer, peer, cr.ok && peer > 0 ? med / peer : 0, v.cold_ms,
                   v.warm_ms, v.persistent);
        else if (!cr.ok)
            printf("%-14s %5.1f %3d %3d %2d %2d %4d %5d %6d  CHECK FAILED: o_err %.3g lse_err %.3g bad %lld\n",
                   c->name, kept, v.spec.block_m, v.spec.block_n, v.spec.num_warps, v.spec.num_stages, v.regs, spill,
                   v.smem, cr.o_err, cr.lse_err, (long long)cr.bad);
        else
            printf("%-14s %5.1f %3d %3d %2d %2d %4d %5d %6d %8.3f %8.3f %6.1f %5.2f %-9s %6.2f %9.0f %8.1f %s\n", c->name,
                   kept, v.spec.block_m, v.spec.block_n, v.spec.num_warps, v.spec.num_stages, v.regs, spill, v.smem,
                   med, mn, tf, util, c->peer, peer > 0 ? med / peer : 0, v.cold_ms, v.warm_ms,
                   label ? label : v.persistent ? "persistent" : v.spec.kv_gather > 1 ? "grid gathered" : "grid");
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
    printf("device %s (cc %d.%d, %d SMs), arch %s, toolchain %s; peers: %s table of PEERS.md\n", info->name,
           info->cc_major, info->cc_minor, info->sm_count, s2_arch_name(arch), tc, h100 ? "H100" : "H200");
    if (o.dump_dir)
        mkdir(o.dump_dir, 0755);
    int rc = 1;
    uint16_t *stage = malloc((size_t)POOL * 2);
    if (!stage || !pool_init(12345)) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    print_header(&o);
    for (int ci = 0; ci < NUM_CONFIGS; ci++) {
        if (!o.want[ci])
            continue;
        config_data cd;
        if (config_open(ctx, dev, &configs[ci], &cd, stage) != S2_OK) {
            printf("%s: setup failed: %s\n", configs[ci].name, s2_ctx_message(ctx));
            s2_ctx_clear(ctx);
            config_close(ctx, dev, &cd);
            continue;
        }
        for (int i = 0; i < o.nspecs; i++) {
            s2_kernel_spec want = o.specs[i];
            want.kind = S2_KERNEL_FWD, want.dtype = S2_DTYPE_BF16, want.head_dim = HEAD_DIM, want.arch = arch;
            run_variant(ctx, dev, &cd, &want, &o, h100, NULL, NULL);
        }
        for (int a = 0; a < (o.nspecs ? 0 : o.block_m.n); a++)
            for (int bn = 0; bn < o.block_n.n; bn++)
                for (int w = 0; w < o.warps.n; w++)
                    for (int s = 0; s < o.stages.n; s++)
                        for (int pi = 0; pi < o.persistent.n; pi++)
                            for (int gi = 0; gi < o.gather.n; gi++) {
                                s2_kernel_spec want = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16,
                                                       .head_dim = HEAD_DIM, .arch = arch, .block_m = o.block_m.v[a],
                                                       .block_n = o.block_n.v[bn], .num_warps = o.warps.v[w],
                                                       .num_stages = o.stages.v[s], .persistent = o.persistent.v[pi],
                                                       .kv_gather = o.gather.v[gi]};
                                s2_kernel_spec wide = {0};
                                run_variant(ctx, dev, &cd, &want, &o, h100, NULL, &wide);
                                /* on its own grid (kernel.wide: -1, kernel.wide_persistent: 1) */
                                if (wide.block_m)
                                    run_variant(ctx, dev, &cd, &wide, &o, h100,
                                                wide.persistent > 0 ? "wide persistent" : "wide", NULL);
                            }
        config_close(ctx, dev, &cd);
    }
    rc = 0;
done:
    free(stage);
    free(pool);
    s2_device_free(dev);
    s2_ctx_free(ctx);
    return rc;
}
