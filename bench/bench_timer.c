/* The benches' timer: L2 flushed between repetitions, median (bench_timer.h). */
#include "bench_timer.h"

#include <stdlib.h>
#include <string.h>

enum { FLUSH_BYTES = 256 << 20 };

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median_of(double *v, int n)
{
    if (n < 1)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool bench_timer_mode(const char *s, bool *flush)
{
    if (s && !strcmp(s, "flush"))
        *flush = true;
    else if (s && !strcmp(s, "warm"))
        *flush = false;
    else
        return false;
    return true;
}

const char *bench_peer_column(const s2_device_info *info)
{
    if (strstr(info->name, "H100"))
        return "H100";
    return strstr(info->name, "H200") ? "H200" : "H200 (not this device's: compare ratios only)";
}

s2_status bench_timer_open(s2_ctx *ctx, s2_device *dev, bool flush, bench_timer *t)
{
    memset(t, 0, sizeof *t);
    t->dev = dev;
    t->flush = flush;
    t->flush_bytes = FLUSH_BYTES;
    s2_status st = flush ? s2_mem_alloc(ctx, dev, t->flush_bytes, &t->buf) : S2_OK;
    if (st == S2_OK)
        st = s2_event_create(ctx, dev, &t->e0);
    if (st == S2_OK)
        st = s2_event_create(ctx, dev, &t->em);
    if (st == S2_OK)
        st = s2_event_create(ctx, dev, &t->e1);
    if (st != S2_OK)
        bench_timer_close(ctx, t);
    return st;
}

void bench_timer_close(s2_ctx *ctx, bench_timer *t)
{
    if (t->buf)
        s2_mem_free(ctx, t->dev, t->buf);
    s2_event_free(t->e0);
    s2_event_free(t->em);
    s2_event_free(t->e1);
    memset(t, 0, sizeof *t);
}

s2_status bench_timer_median(s2_ctx *ctx, bench_timer *t, bench_work work, void *user, int warmup, int reps,
                             double *med, double *min, double parts[2])
{
    double *v = calloc((size_t)reps * 3, sizeof *v);
    if (!v || reps < 1) {
        free(v);
        return S2_ERR_NOMEM;
    }
    s2_status st = S2_OK;
    for (int i = 0; st == S2_OK && i < warmup; i++)
        st = work(ctx, user, NULL);
    if (st == S2_OK)
        st = s2_device_synchronize(ctx, t->dev);
    for (int i = 0; st == S2_OK && i < reps; i++) {
        if (t->flush)   /* on the default stream, before e0: not timed */
            st = s2_memset_d8(ctx, t->dev, t->buf, (uint8_t)i, t->flush_bytes);
        if (st == S2_OK)
            st = s2_event_record(ctx, t->e0, NULL);
        if (st == S2_OK)
            st = work(ctx, user, parts ? t->em : NULL);
        if (st == S2_OK)
            st = s2_event_record(ctx, t->e1, NULL);
        float ms = 0, a = 0, b = 0;
        if (st == S2_OK)
            st = s2_event_elapsed_ms(ctx, t->e0, t->e1, &ms);
        if (st == S2_OK && parts)
            st = s2_event_elapsed_ms(ctx, t->e0, t->em, &a);
        if (st == S2_OK && parts)
            st = s2_event_elapsed_ms(ctx, t->em, t->e1, &b);
        v[i] = ms;
        v[reps + i] = a;
        v[2 * reps + i] = b;
    }
    if (st == S2_OK) {
        *med = bench_median_of(v, reps);
        if (min)
            *min = v[0];
        if (parts) {
            parts[0] = bench_median_of(v + reps, reps);
            parts[1] = bench_median_of(v + 2 * reps, reps);
        }
    }
    free(v);
    return st;
}
