/* The seeded RNG and the random-pattern generator the tests share. */
#ifndef S2C_TEST_RAND_PATTERN_H
#define S2C_TEST_RAND_PATTERN_H

#include "s2c/pattern.h"

#include <stdbool.h>
#include <stdint.h>

/* xorshift64: one step of a bare state (tests that thread their own state,
 * seeded directly; a zero state stays zero). */
static inline uint64_t s2t_xorshift64(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* v[0..n) = 0..n-1 uniformly shuffled (Fisher-Yates on s2t_xorshift64):
 * distinct page ids in random order for block tables. */
static inline void s2t_shuffle_ids(int32_t *v, int64_t n, uint64_t *s)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = (int32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(s2t_xorshift64(s) % (uint64_t)(i + 1));
        int32_t x = v[i];
        v[i] = v[j];
        v[j] = x;
    }
}

/* The same generator, with the seed kept for messages. */
typedef struct s2t_rng {
    uint64_t state, seed;
} s2t_rng;

static inline void s2t_rng_seed(s2t_rng *r, uint64_t seed)
{
    r->seed = seed;
    r->state = seed * 0x9E3779B97F4A7C15ull + 1;
}

static inline uint64_t s2t_rng_next(s2t_rng *r) { return s2t_xorshift64(&r->state); }

/* Uniform in [lo, hi]. */
static inline int s2t_rng_int(s2t_rng *r, int lo, int hi)
{
    return lo + (int)(s2t_rng_next(r) % (uint64_t)(hi - lo + 1));
}

/* Uniform in [0, 1), 53 bits. */
static inline double s2t_rng_uniform(s2t_rng *r) { return (double)(s2t_rng_next(r) >> 11) / 9007199254740992.0; }

/* How s2t_rand_pattern_new draws: every field must be set (the tests' draws
 * differ, and a seed must keep giving the same pattern). */
typedef struct s2t_rand_opts {
    const char *name;      /* the pattern's name; NULL: the default's */
    int max_kv_shift;      /* kv heads = heads >> [0, max_kv_shift] (at least 1) */
    int max_block_shift;   /* block size = 16 << [0, max_block_shift] */
    int max_vert_stride;   /* vert_stride in [1, max_vert_stride] */
    int dense_one_in;      /* one dense head in 1 of N patterns */
    int bidir_one_in;      /* not causal in 1 of N patterns */
    int len_base, len_per_block;   /* kv_len in [1, len_base + len_per_block * block size] */
    bool draw_q_len;       /* q_len: kv_len or in [1, kv_len], half each; else q_len = kv_len */
    int ranges_one_in;     /* range rules (1-3): N > 0 in 1 of N patterns, N < 0 in all but 1 of -N */
} s2t_rand_opts;

/* A random local/stride pattern with every feature of the predicate: GQA,
 * block sizes, local windows left and right, strides (0 on some heads),
 * sliding offsets, homo heads, a dense head, causal or not, vertical
 * positions, range rules on some heads, an explicit block mask on head 0;
 * and lengths for it.  The pattern is owned by set; free with
 * s2t_rand_pattern_free. */
typedef struct s2t_rand_pattern {
    s2_pattern_set *set;
    s2_pattern *p;         /* set's only pattern, writable */
    s2_range_rule ranges[3];
    uint8_t range_heads[3][8];
    s2_block_mask mask;
    int64_t q_len, kv_len;
} s2t_rand_pattern;

void s2t_rand_pattern_new(s2t_rng *r, const s2t_rand_opts *o, s2t_rand_pattern *rp);
void s2t_rand_pattern_free(s2t_rand_pattern *rp);

/* The pattern set of the S2 library's keyword arguments; the test fails if they do not resolve. */
s2_pattern_set *s2t_pattern_set_from_args(const s2_local_stride_args *a);

#endif
