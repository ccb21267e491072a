/* The benches' one timer, as triton.testing.do_bench times the peers: before
 * each repetition a write larger than L2 (256 MB) evicts what the last one
 * left, CUDA events around the work only, the median of the repetitions.
 * --timer warm keeps L2 warm instead (back-to-back repetitions). */
#ifndef S2C_BENCH_TIMER_H
#define S2C_BENCH_TIMER_H

#include "s2c/runtime.h"
#include "rt_cuda.h"

#include <stdbool.h>

enum { BENCH_MIN_REPS = 30 };

typedef struct bench_timer {
    s2_device *dev;
    bool flush;          /* write flush_bytes before each repetition */
    s2_devptr buf;
    size_t flush_bytes;
    s2_event *e0, *em, *e1;
} bench_timer;

/* One repetition: the work to time; `mid` (may be NULL) is recorded between
 * its two parts where it has two (the forward and backward of one step). */
typedef s2_status (*bench_work)(s2_ctx *ctx, void *user, s2_event *mid);

s2_status bench_timer_open(s2_ctx *ctx, s2_device *dev, bool flush, bench_timer *t);
void bench_timer_close(s2_ctx *ctx, bench_timer *t);
/* warmup untimed runs, then reps timed ones: med (and min, parts[2] of the
 * two sides of `mid` when parts is not NULL) in ms. */
s2_status bench_timer_median(s2_ctx *ctx, bench_timer *t, bench_work work, void *user, int warmup, int reps,
                             double *med, double *min, double parts[2]);

/* "flush" or "warm" from a --timer value; false for anything else. */
bool bench_timer_mode(const char *s, bool *flush);

/* The column of shared/PEERS.md this device compares against, by its name:
 * "H100" or "H200" (another device: the H200's, said as such). */
const char *bench_peer_column(const s2_device_info *info);

/* q-quantile (0..1) of v[0..n), linear between ranks (torch.quantile); sorts v. */
double bench_median_of(double *v, int n);

#endif
