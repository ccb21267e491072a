/* The pattern.h closed-form rule, written out again for the tests (kept
 * independent of the kernel builder on purpose). */
#ifndef S2C_TEST_MASK_RULE_H
#define S2C_TEST_MASK_RULE_H

#include "s2c/pattern.h"

#include <stdbool.h>
#include <stdint.h>

static inline int64_t test_mod(int64_t a, int64_t m) { int64_t r = a % m; return r < 0 ? r + m : r; }

/* Is key k kept for query position p (absolute) of query head q? */
static inline bool test_key_kept(const s2_pattern *pat, int q, int64_t p, int64_t k)
{
    const s2_head_rule *r = &pat->rules[q];
    int64_t m = p / pat->block_size, n = k / pat->block_size;
    if (pat->causal) {
        if (k > p)
            return false;
        return r->dense || m - n < r->local_left || test_mod(n + r->shift, r->vert_stride) == 0;
    }
    int64_t left = m - n - r->local_left + 1, right = n - m - r->local_right + 1;
    if (left < 0)
        left = 0;
    if (right < 0)
        right = 0;
    return r->dense || (left + right) % r->vert_stride == 0;
}

#endif
