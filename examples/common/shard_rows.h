/* Host-side pieces of the context-parallel example (examples/cp) and its GPU
 * test (tests/dist/test_cp_gpu.c) that are not about s2c's API: bf16
 * conversion, device buffers from host data, and a rank's shard rows
 * gathered from, or compared with, a whole [seq, heads, D] bf16 tensor.  A
 * shard is n ranges of sequence rows: st[i] .. st[i] + len[i] - 1. */
#ifndef S2C_EXAMPLE_SHARD_ROWS_H
#define S2C_EXAMPLE_SHARD_ROWS_H

#include "s2c/runtime.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t ex_f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);   /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static inline float ex_bf2f(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Device memory holding h, or poisoned (0xff bytes: NaN in bf16 and fp32)
 * when h is NULL; 0 on failure. */
static inline s2_devptr ex_upload(s2_ctx *ctx, s2_device *dev, const void *h, size_t bytes)
{
    s2_devptr p = 0;
    if (s2_mem_alloc(ctx, dev, bytes, &p) != S2_OK)
        return 0;
    s2_status st = h ? s2_memcpy_h2d(ctx, dev, p, h, bytes) : s2_memset_d8(ctx, dev, p, 0xff, bytes);
    if (st != S2_OK) {
        s2_mem_free(ctx, dev, p);
        return 0;
    }
    return p;
}

/* dst [rows of the shard][row] = the shard's rows of src [seq][row]. */
static inline void ex_shard_gather(uint16_t *dst, const uint16_t *src, const int64_t *st, const int64_t *len, int n,
                                   size_t row)
{
    for (int i = 0, r = 0; i < n; r += (int)len[i], i++)
        memcpy(dst + (size_t)r * row, src + (size_t)st[i] * row, (size_t)len[i] * row * 2);
}

/* Relative Frobenius error of the shard copy against the whole tensor's
 * rows; *nans counts NaN in the shard, *max_abs (when not NULL) the
 * largest absolute difference. */
static inline double ex_shard_rel_err(const uint16_t *shard, const uint16_t *full, const int64_t *st,
                                      const int64_t *len, int n, size_t row, int64_t *nans, double *max_abs)
{
    double num = 0, den = 0, mx = 0;
    size_t r = 0;
    for (int i = 0; i < n; i++)
        for (int64_t t = st[i]; t < st[i] + len[i]; t++, r++)
            for (size_t j = 0; j < row; j++) {
                double x = ex_bf2f(shard[r * row + j]), y = ex_bf2f(full[(size_t)t * row + j]);
                *nans += isnan(x);
                num += (x - y) * (x - y), den += y * y;
                mx = fabs(x - y) > mx ? fabs(x - y) : mx;
            }
    if (max_abs)
        *max_abs = mx;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#endif
