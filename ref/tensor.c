/* Strided tensor views: element access in double, rounding, seeded fills. */
#include "s2c/ref.h"
#include "util.h"

#include <math.h>
#include <string.h>

s2_tensor s2_tensor_bshd(void *data, s2_dtype dt, int64_t seq, int64_t heads, int64_t dim)
{
    s2_tensor t = {data, dt, {seq * heads * dim, heads * dim, dim, 1}};
    return t;
}

s2_tensor s2_tensor_bhsd(void *data, s2_dtype dt, int64_t seq, int64_t heads, int64_t dim)
{
    s2_tensor t = {data, dt, {heads * seq * dim, dim, seq * dim, 1}};
    return t;
}

static int64_t offset(const s2_tensor *t, int64_t b, int64_t s, int64_t h, int64_t d)
{
    return b * t->stride[0] + s * t->stride[1] + h * t->stride[2] + d * t->stride[3];
}

/* Round x to float so that a second rounding (to f16 or bf16, both at least
 * two bits narrower than f32) is correct: round-to-odd keeps the sticky bit. */
static float f64_to_f32_odd(double x)
{
    float f = (float)x;
    if ((double)f == x || !isfinite(f))
        return f;
    uint32_t u;
    memcpy(&u, &f, 4);
    if (u & 1u)
        return f;
    return nextafterf(f, x > (double)f ? INFINITY : -INFINITY);
}

double s2_tensor_get(const s2_tensor *t, int64_t b, int64_t s, int64_t h, int64_t d)
{
    int64_t o = offset(t, b, s, h, d);
    switch (t->dtype) {
    case S2_DTYPE_F64: return ((const double *)t->data)[o];
    case S2_DTYPE_F32: return ((const float *)t->data)[o];
    case S2_DTYPE_F16: return s2_f16_to_f32(((const uint16_t *)t->data)[o]);
    case S2_DTYPE_BF16: return s2_bf16_to_f32(((const uint16_t *)t->data)[o]);
    }
    return NAN;
}

void s2_tensor_set(const s2_tensor *t, int64_t b, int64_t s, int64_t h, int64_t d, double v)
{
    int64_t o = offset(t, b, s, h, d);
    switch (t->dtype) {
    case S2_DTYPE_F64: ((double *)t->data)[o] = v; break;
    case S2_DTYPE_F32: ((float *)t->data)[o] = (float)v; break;
    case S2_DTYPE_F16: ((uint16_t *)t->data)[o] = s2_f32_to_f16(f64_to_f32_odd(v)); break;
    case S2_DTYPE_BF16: ((uint16_t *)t->data)[o] = s2_f32_to_bf16(f64_to_f32_odd(v)); break;
    }
}

double s2_round_to_dtype(s2_dtype dt, double v)
{
    switch (dt) {
    case S2_DTYPE_F64: return v;
    case S2_DTYPE_F32: return (float)v;
    case S2_DTYPE_F16: return s2_f16_to_f32(s2_f32_to_f16(f64_to_f32_odd(v)));
    case S2_DTYPE_BF16: return s2_bf16_to_f32(s2_f32_to_bf16(f64_to_f32_odd(v)));
    }
    return NAN;
}

/* splitmix64 of the index-th step from seed: a counter-based generator, so
 * a value depends on its logical index only. */
static uint64_t mix64(uint64_t seed, uint64_t index)
{
    uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void s2_tensor_fill_random(const s2_tensor *t, const int64_t e[4], uint64_t seed, double lo, double hi)
{
    uint64_t index = 0;
    for (int64_t b = 0; b < e[0]; b++)
        for (int64_t s = 0; s < e[1]; s++)
            for (int64_t h = 0; h < e[2]; h++)
                for (int64_t d = 0; d < e[3]; d++) {
                    double u = (double)(mix64(seed, index++) >> 11) * 0x1p-53;
                    s2_tensor_set(t, b, s, h, d, lo + (hi - lo) * u);
                }
}

void s2_tensor_fill(const s2_tensor *t, const int64_t e[4], double v)
{
    for (int64_t b = 0; b < e[0]; b++)
        for (int64_t s = 0; s < e[1]; s++)
            for (int64_t h = 0; h < e[2]; h++)
                for (int64_t d = 0; d < e[3]; d++)
                    s2_tensor_set(t, b, s, h, d, v);
}

double s2_tensor_max_abs_diff(const s2_tensor *a, const s2_tensor *b, const int64_t e[4])
{
    double worst = 0.0;
    for (int64_t i = 0; i < e[0]; i++)
        for (int64_t s = 0; s < e[1]; s++)
            for (int64_t h = 0; h < e[2]; h++)
                for (int64_t d = 0; d < e[3]; d++) {
                    double x = s2_tensor_get(a, i, s, h, d), y = s2_tensor_get(b, i, s, h, d);
                    if (isnan(x) || isnan(y)) {
                        if (isnan(x) != isnan(y))
                            return INFINITY;
                        continue;
                    }
                    if (x == y) /* equal infinities */
                        continue;
                    double diff = fabs(x - y);
                    if (diff > worst)
                        worst = diff;
                }
    return worst;
}
