/* Poisoned host and device buffers for the GPU tests: every output starts
 * as NaN, so an element a kernel should write and did not shows, and one it
 * must leave alone (row padding, rows outside the sequences) is checked to
 * still hold the poison. */
#ifndef S2C_TEST_POISON_H
#define S2C_TEST_POISON_H

#include "s2c/ref.h"
#include "s2c/runtime.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define S2T_POISON16 ((uint16_t)0xffff)   /* NaN in bf16 and f16 */
#define S2T_POISON_BYTE 0xff              /* a buffer of it: NaN in bf16, f16 and f32 */
#define S2T_POISON32 0x7fc0deadu          /* a quiet f32 NaN no kernel writes */

/* Header only, for the tests without Check or the runtime API. */
static inline void s2t_poison16(uint16_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = S2T_POISON16;
}

static inline void s2t_poison_f32(float *p, size_t n)
{
    const uint32_t bits = S2T_POISON32;
    for (size_t i = 0; i < n; i++)
        memcpy(&p[i], &bits, sizeof bits);
}

/* How many of p[0, n) no longer hold the poison. */
static inline int64_t s2t_unpoisoned16(const uint16_t *p, size_t n)
{
    int64_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += p[i] != S2T_POISON16;
    return k;
}

/* malloc'd, every byte S2T_POISON_BYTE (Check asserts the allocation). */
void *s2t_alloc_poisoned(size_t bytes);

/* The device side, through the runtime API (Check asserts every call). */
void s2t_dev_poison(s2_ctx *ctx, s2_device *dev, s2_devptr p, size_t bytes);
s2_devptr s2t_dev_alloc_poisoned(s2_ctx *ctx, s2_device *dev, size_t bytes);

/* Strides (b, s, h, d) of `seq` rows of `heads` heads of `dim`, each row
 * padded by `pad` elements: after the last head (bshd) or after each head's
 * row (bhsd). */
void s2t_strides(bool bhsd, int64_t seq, int64_t heads, int64_t dim, int64_t pad, int64_t st[4]);
/* Elements from the first to the last one of extents ext. */
size_t s2t_span(const int64_t st[4], const int64_t ext[4]);

/* A 16-bit host tensor of (b, s, h, d), every row padded by pad, and its
 * device copy (0 until uploaded). */
typedef struct s2t_tensor {
    uint16_t *host;          /* elems elements of t.dtype (2 or 4 bytes), as 16-bit words */
    size_t elems;
    s2_tensor t;
    int64_t ext[4];
    s2_devptr dev;
} s2t_tensor;

/* Allocated and poisoned, the trailing padding of the last row included. */
void s2t_tensor_new(s2t_tensor *x, s2_dtype dt, bool bhsd, int64_t b, int64_t s, int64_t h, int64_t d, int64_t pad);
void s2t_tensor_poison(s2t_tensor *x);
/* Elements outside the (b, s, h, d) extents (the padding) that no longer
 * hold the poison. */
int64_t s2t_tensor_pad_written(const s2t_tensor *x);
/* Copies the host data to the device, allocating the device copy first. */
void s2t_tensor_upload(s2_ctx *ctx, s2_device *dev, s2t_tensor *x);
void s2t_tensor_download(s2_ctx *ctx, s2_device *dev, s2t_tensor *x);
void s2t_tensor_free(s2_ctx *ctx, s2_device *dev, s2t_tensor *x);

#endif
