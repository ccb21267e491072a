/* s2c's dist stage: helpers for attention whose keys are spread over
 * GPUs (context parallelism), above the runtime.  A layer splits the
 * kernel's schedule (s2_attn_kernel_schedule, attn_runtime.h) by the keys
 * each launch sees, launches each part over its schedule
 * (s2_attn_forward_sched) and merges the partial (o, lse) pairs
 * (s2_combine). */
#ifndef S2C_DIST_H
#define S2C_DIST_H

#include "s2c/layout.h"

#include <stdint.h>

/* The part of forward schedule s over the keys [key_lo, key_hi): every list
 * keeps the entries whose key tile lies in the range, unchanged (same
 * geometry and classes), so that the parts of a cover of the keys hold each
 * entry of s once.  key_lo and key_hi are multiples of the key tile
 * (s->geom.block_n), 0 <= key_lo < key_hi, but for a key_hi inside or
 * past the last (maybe ragged) tile, which takes the rest.  S2_ERR_INVALID otherwise or for a transposed schedule,
 * S2_ERR_NULL_ARG for a missing argument.  Free *out with s2_schedule_free. */
s2_status s2_dist_split_keys(s2_ctx *ctx, const s2_schedule *s, int64_t key_lo, int64_t key_hi, s2_schedule **out);

#endif
