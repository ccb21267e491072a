/* Strided tensor views: element access in double, rounding, seeded fills. */
#include "s2c/ref.h"
#include "dtype.h"

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

/* Elements convert through the dtype table's rows (common/dtype.c). */
double s2_tensor_get(const s2_tensor *t, int64_t b, int64_t s, int64_t h, int64_t d)
{
    const s2_dtype_info *r = s2_dtype_info_of(t->dtype);
    return r ? r->to_f64((const char *)t->data + offset(t, b, s, h, d) * (int64_t)r->size) : NAN;
}

void s2_tensor_set(const s2_tensor *t, int64_t b, int64_t s, int64_t h, int64_t d, double v)
{
    const s2_dtype_info *r = s2_dtype_info_of(t->dtype);
    if (r)
        r->from_f64((char *)t->data + offset(t, b, s, h, d) * (int64_t)r->size, v);
}

double s2_round_to_dtype(s2_dtype dt, double v)
{
    const s2_dtype_info *r = s2_dtype_info_of(dt);
    unsigned char e[8];
    if (!r)
        return NAN;
    r->from_f64(e, v);
    return r->to_f64(e);
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
