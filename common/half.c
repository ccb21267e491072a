/* bf16, IEEE half and fp8 conversions, round to nearest even. */
#include "dtype.h"

#include <math.h>
#include <string.h>

/* A float's bits and back, without aliasing. */
static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float s2_bf16_to_f32(uint16_t h) { return float_of((uint32_t)h << 16); }

uint16_t s2_f32_to_bf16(float f)
{
    uint32_t u = bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float s2_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400u)) {
                man <<= 1;
                exp--;
            }
            man &= 0x3ffu;
            u = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return float_of(u);
}

uint16_t s2_f32_to_f16(float f)
{
    uint32_t u = bits_of(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (absu >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (absu < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (absu < 0x33000000u)
            return (uint16_t)sign;
        uint32_t exp = absu >> 23;
        uint32_t man = (absu & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - exp; /* value = man * 2^(exp-150); half subnormal unit 2^-24 */
        uint32_t half_man = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (half_man & 1u)))
            half_man++;
        return (uint16_t)(sign | half_man);
    }
    uint32_t r = absu + 0xfffu + ((absu >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

float s2_f64_to_f32_odd(double v)
{
    float f = (float)v;
    if ((double)f == v || !isfinite(f))
        return f;
    if (bits_of(f) & 1u)
        return f;
    return nextafterf(f, v > (double)f ? INFINITY : -INFINITY);
}

/* An fp8 code with mbits mantissa bits and exponent bias `bias`: subnormal
 * below exponent field 1; the caller handles NaN and infinity codes. */
static double f8_value(uint8_t x, int mbits, int bias)
{
    int e = (x & 0x7f) >> mbits, m = x & ((1 << mbits) - 1);
    double v = e == 0 ? ldexp(m, 1 - bias - mbits) : ldexp((1 << mbits) + m, e - bias - mbits);
    return x & 0x80 ? -v : v;
}

/* v to fp8, round to nearest even; |v| at or over max (infinity too)
 * saturates to max_code, NaN is 0x7f (cvt.rn.satfinite's rules). */
static uint8_t f8_of(double v, int mbits, int bias, double max, uint8_t max_code)
{
    if (isnan(v))
        return 0x7f;
    uint8_t sign = signbit(v) ? 0x80 : 0;
    double a = fabs(v);
    if (a >= max)
        return sign | max_code;
    int e;
    frexp(a, &e);                   /* a in [2^(e-1), 2^e) */
    if (e - 1 < 1 - bias)
        e = 2 - bias;               /* subnormal: the smallest normal's quantum */
    double n = nearbyint(ldexp(a, mbits - (e - 1))); /* a in quanta, to nearest even */
    double r = ldexp(n, e - 1 - mbits);
    if (r < ldexp(1.0, 1 - bias))   /* subnormal or zero */
        return sign | (uint8_t)ldexp(r, bias - 1 + mbits);
    frexp(r, &e);
    int m = (int)ldexp(r, mbits - (e - 1)) - (1 << mbits);
    return sign | (uint8_t)((e - 1 + bias) << mbits) | (uint8_t)m;
}

double s2_e4m3_to_f64(uint8_t x)
{
    if ((x & 0x7f) == 0x7f)
        return NAN;
    return f8_value(x, 3, 7);
}

uint8_t s2_f64_to_e4m3(double v) { return f8_of(v, 3, 7, 448.0, 0x7e); }

double s2_e5m2_to_f64(uint8_t x)
{
    if ((x & 0x7c) == 0x7c)
        return (x & 3) ? NAN : (x & 0x80) ? -INFINITY : INFINITY;
    return f8_value(x, 2, 15);
}

uint8_t s2_f64_to_e5m2(double v) { return f8_of(v, 2, 15, 57344.0, 0x7b); }
