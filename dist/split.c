/* Splitting a forward schedule's kept-block lists by a key range. */
#include "dist.h"
#include "util.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

s2_status s2_dist_split_keys(s2_ctx *ctx, const s2_schedule *s, int64_t key_lo, int64_t key_hi, s2_schedule **out)
{
    if (!out || !s)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_dist_split_keys: %s is NULL", !out ? "out" : "schedule");
    *out = NULL;
    if (s->transposed)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_dist_split_keys: a transposed schedule (split the forward one)");
    int64_t bn = s->geom.block_n, lists = (int64_t)s->num_classes * s->geom.q_tiles;
    if (bn < 1 || key_lo < 0 || key_hi <= key_lo || key_lo % bn || (key_hi % bn && key_hi <= (s->geom.kv_tiles - 1) * bn))
        return s2_fail(ctx, S2_ERR_INVALID,
                       "s2_dist_split_keys: keys [%" PRId64 ", %" PRId64 ") are not a non-empty range of whole "
                       "key tiles of %" PRId64,
                       key_lo, key_hi, bn);
    if (!s->class_of_head || !s->offsets || (s->offsets[lists] > 0 && !s->entries) || s->heads < 1 || lists < 0)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_dist_split_keys: the schedule lacks its arrays");
    for (int64_t i = 0; i < lists; i++)
        if (s->offsets[i + 1] < s->offsets[i] || s->offsets[0] != 0)
            return s2_fail(ctx, S2_ERR_INVALID, "s2_dist_split_keys: offsets decrease at list %" PRId64, i);
    int64_t t_lo = key_lo / bn, t_hi = s2_cdiv(key_hi, bn);   /* tiles [t_lo, t_hi) */
    s2_schedule *p = calloc(1, sizeof *p);
    if (!p)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    *p = *s;
    p->class_of_head = malloc((size_t)s->heads * sizeof(int));
    p->offsets = calloc((size_t)lists + 1, sizeof(int64_t));
    p->entries = malloc((size_t)(s->offsets[lists] > 0 ? s->offsets[lists] : 1) * sizeof *p->entries);
    if (!p->class_of_head || !p->offsets || !p->entries) {
        s2_schedule_free(p);
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    memcpy(p->class_of_head, s->class_of_head, (size_t)s->heads * sizeof(int));
    int64_t n = 0;
    for (int64_t i = 0; i < lists; i++) {
        for (int64_t e = s->offsets[i]; e < s->offsets[i + 1]; e++)
            if (s->entries[e].tile >= t_lo && s->entries[e].tile < t_hi)
                p->entries[n++] = s->entries[e];
        p->offsets[i + 1] = n;
    }
    *out = p;
    return S2_OK;
}
