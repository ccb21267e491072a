/* Internal to bench_fwd: the configuration rows, the device data of one
 * configuration, a JIT-compiled kernel variant, its schedule on the device,
 * and the helpers the files share (bench_fwd.c: options, rows, main;
 * bench_fwd_data.c: random inputs; bench_fwd_jit.c: the kernel through the
 * cache; bench_fwd_launch.c: launches, the check, the timing). */
#ifndef S2C_BENCH_FWD_H
#define S2C_BENCH_FWD_H

#include "compile_internal.h"
#include "kernel_abi.h"
#include "bench_timer.h"
#include "rt_cuda.h"
#include "s2c/attention.h"
#include "s2c/attn_runtime.h"
#include "s2c/cache.h"
#include "s2c/codegen.h"
#include "s2c/layout.h"
#include "s2c/runtime.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct bench_config {
    const char *name;
    int batch, heads;
    int64_t seq;
    int block, local, stride;
    const char *peer;            /* which peer the ratio is against */
    double peer_h200_ms, peer_h100_ms;
    int dense_heads;             /* num_dense_heads: head imbalance (the last ones dense) */
} bench_config;
/* the head dim by default (--head-dim), and the largest the bench takes */
enum { HEAD_DIM = 128, MAX_HEAD_DIM = 256 };

#define L2_BYTES (60.0 * 1024 * 1024)

/* ---- random inputs ---------------------------------------------------------
 * Every tensor element is pool[(base + index) % POOL]: a pool of bf16 values
 * uniform in [-1.5, 1.5] that the CPU check can read without a host copy of
 * gigabytes.  POOL is odd and not a multiple of the head dimension, so rows
 * and tensors (different bases) do not repeat each other. */
enum { POOL = (1 << 24) + 7 };

extern uint16_t *pool;
/* --dtype: bf16, or e4m3 (q, k, v the pool's values rounded to e4m3, null
 * descales, o bf16: the sm_90a fp8 forward, ABI fwd_tma_fp8) */
extern s2_dtype bench_dtype;
size_t bench_out_size(void);
double bench_out_at(const void *o, uint64_t i);

uint64_t rng_next(uint64_t *s);
double bf16_to_f64(uint16_t h);
bool pool_init(uint64_t seed);
double pool_at(uint64_t base, uint64_t index);

/* ---- one configuration's data ---- */
typedef struct input_set {
    s2_devptr q, k, v, o, lse;
    uint64_t qb, kb, vb;   /* pool bases */
} input_set;

typedef struct config_data {
    const bench_config *cfg;
    s2_pattern_set *set;
    const s2_pattern *p;
    s2_layout *lay;
    int head_dim;
    uint64_t elems;        /* B*S*H*D per tensor */
    int nsets;
    input_set sets[8];
} config_data;

s2_status config_open(s2_ctx *ctx, s2_device *dev, const bench_config *c, int head_dim, config_data *cd,
                      void *stage);
void config_close(s2_ctx *ctx, s2_device *dev, config_data *cd);

/* ---- the kernel through the cache (bench_fwd_jit.c) ---- */
typedef struct variant {
    s2_kspec spec;       /* resolved */
    s2_cumodule *mod;
    s2_cufunction *kern;
    int threads, smem;
    double cold_ms, warm_ms;
    int regs, spill_st, spill_ld, stack;
    char kname[128];
    bool tma;                  /* ABI fwd_tma(_persistent): tensor maps per input set */
    bool persistent;           /* ABI fwd_tma_persistent: grid of SMs x resident CTAs */
    bool fp8;                  /* ABI fwd_tma_fp8: descales after seqinfo */
    uint32_t grid_p;
    s2_tensor_map maps[8][3];
    bool has_wide;             /* the module has NAME_w, role fwd_wide (timed as a row of its own, labelled "wide") */
    s2_kspec wide;
} variant;

/* JIT cold and warm through a fresh temporary cache; PTX and cubin to
 * dump_dir when set. */
s2_status jit_variant(s2_ctx *ctx, s2_device *dev, const config_data *cd, const s2_kspec *want,
                      const char *dump_dir, variant *v);
void variant_free(variant *v);

/* ---- launches, check, timing (bench_fwd_launch.c) ---- */
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

s2_status sched_upload(s2_ctx *ctx, s2_device *dev, const config_data *cd, const s2_kspec *spec,
                       sched_dev *sd);
/* Tensor maps of every input set, built once (not inside the timed region). */
s2_status variant_maps(s2_ctx *ctx, const s2_device *dev, const config_data *cd, variant *v);

/* Every element written (poisoned with NaN before) and finite; `rows` query
 * rows (the last one and random others) against float64 on the CPU. */
typedef struct check_result {
    bool ok;
    double o_err, lse_err;
    int64_t bad;
} check_result;

s2_status check_variant(s2_ctx *ctx, s2_device *dev, const config_data *cd, const variant *v,
                        const sched_dev *sd, int rows, uint64_t seed, check_result *cr);
s2_status time_variant(s2_ctx *ctx, bench_timer *t, const config_data *cd, const variant *v, const sched_dev *sd,
                       int reps, double *med, double *min);

#endif
