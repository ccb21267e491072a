/* Patterns built in memory from per-query-head rules and an optional block
 * mask (a framework's arbitrary mask, or the S2 library's heads sliced or
 * regrouped), checked as the parser checks a file. */
#include "pattern_internal.h"

#include <string.h>

#define MAX_COUNT S2_PATTERN_MAX_COUNT
#define MAX_SHIFT S2_PATTERN_MAX_SHIFT

static bool valid_block_size(int bs) { return bs == 16 || bs == 32 || bs == 64 || bs == 128; }

static s2_status check_rule(s2_ctx *ctx, const s2_head_rule *r, int q, const s2_block_mask *mask, int heads)
{
    if (r->local_left < 0 || r->local_left > MAX_COUNT || r->local_right < 0 || r->local_right > MAX_COUNT)
        return s2_fail(ctx, S2_ERR_INVALID, "rules[%d]: local window must be in 0..%d", q, MAX_COUNT);
    if (r->vert_stride < 0 || r->vert_stride > MAX_COUNT)
        return s2_fail(ctx, S2_ERR_INVALID, "rules[%d]: vert_stride must be in 0..%d, got %d", q, MAX_COUNT,
                       r->vert_stride);
    if (r->shift < 0 || r->shift > MAX_SHIFT)
        return s2_fail(ctx, S2_ERR_INVALID, "rules[%d]: shift must be in 0..%lld, got %lld", q,
                       (long long)MAX_SHIFT, (long long)r->shift);
    if (r->mask != -1 && r->mask != 0)
        return s2_fail(ctx, S2_ERR_INVALID, "rules[%d]: mask must be -1 (none) or 0 (the mask), got %d", q, r->mask);
    if (r->mask == 0) {
        if (!mask)
            return s2_fail(ctx, S2_ERR_INVALID, "rules[%d]: refers to a mask, but none is given", q);
        int limit = mask->heads == 1 ? 1 : heads;
        if (r->mask_head < 0 || r->mask_head >= limit)
            return s2_fail(ctx, S2_ERR_INVALID, "rules[%d]: mask_head must be in 0..%d, got %d", q, limit - 1,
                           r->mask_head);
    }
    if (r->mask < 0 && !r->dense && r->local_left == 0 && r->local_right == 0 && r->vert_stride == 0)
        return s2_fail(ctx, S2_ERR_INVALID, "rules[%d]: attends to nothing (no window, stride, mask or dense)", q);
    return S2_OK;
}

static s2_status check_mask(s2_ctx *ctx, const s2_block_mask *m, int heads)
{
    if (!m->bits)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "mask: bits is null");
    if (m->heads != 1 && m->heads != heads)
        return s2_fail(ctx, S2_ERR_INVALID, "mask: %d heads, expected 1 or %d (heads)", m->heads, heads);
    if (m->rows < 1 || m->cols < 1 || m->rows > S2_MAX_SEQ_LEN || m->cols > S2_MAX_SEQ_LEN)
        return s2_fail(ctx, S2_ERR_INVALID, "mask: shape %lld x %lld blocks, expected at least 1 x 1",
                       (long long)m->rows, (long long)m->cols);
    if ((double)m->heads * (double)m->rows * (double)m->cols > (double)S2_PATTERN_MAX_MASK_BYTES)
        return s2_fail(ctx, S2_ERR_INVALID, "mask: %d x %lld x %lld blocks exceed %lld bytes", m->heads,
                       (long long)m->rows, (long long)m->cols, (long long)S2_PATTERN_MAX_MASK_BYTES);
    return S2_OK;
}

static s2_status check_def(s2_ctx *ctx, const s2_pattern_def *d)
{
    int kv = d->kv_heads ? d->kv_heads : d->heads;
    if (d->heads < 1 || d->heads > S2_MAX_HEADS)
        return s2_fail(ctx, S2_ERR_INVALID, "heads must be in 1..%d, got %d", S2_MAX_HEADS, d->heads);
    if (kv < 1 || d->heads % kv)
        return s2_fail(ctx, S2_ERR_INVALID, "heads (%d) must be a multiple of kv_heads (%d)", d->heads, kv);
    if (!valid_block_size(d->block_size))
        return s2_fail(ctx, S2_ERR_INVALID, "block_size must be 16, 32, 64 or 128, got %d", d->block_size);
    if (d->vert_position < -1 || d->vert_position > S2_VERT_RELATIVE)
        return s2_fail(ctx, S2_ERR_INVALID, "vert_position must be -1, 0 or 1, got %d", d->vert_position);
    if (d->max_seq_len < 0 || d->max_seq_len > S2_MAX_SEQ_LEN)
        return s2_fail(ctx, S2_ERR_INVALID, "max_seq_len must be in 0..%lld, got %lld", (long long)S2_MAX_SEQ_LEN,
                       (long long)d->max_seq_len);
    if (d->name && (strlen(d->name) < 1 || strlen(d->name) > 128))
        return s2_fail(ctx, S2_ERR_INVALID, "name must be 1..128 characters");
    if (!d->rules && !d->mask)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "a pattern needs rules, a mask, or both");
    if (d->mask) {
        s2_status st = check_mask(ctx, d->mask, d->heads);
        if (st != S2_OK)
            return st;
    }
    for (int q = 0; d->rules && q < d->heads; q++) {
        s2_status st = check_rule(ctx, &d->rules[q], q, d->mask, d->heads);
        if (st != S2_OK)
            return st;
    }
    return S2_OK;
}

/* Copy the mask into the set's arena, each bit 0 or 1. */
static s2_status copy_mask(s2_ctx *ctx, s2_pattern *p, const s2_block_mask *m, s2_arena *arena)
{
    size_t n = (size_t)m->heads * (size_t)m->rows * (size_t)m->cols;
    p->masks = s2_arena_alloc(arena, sizeof *p->masks);
    uint8_t *bits = s2_arena_alloc(arena, n);
    char *name = s2_arena_strdup(arena, m->name ? m->name : "");
    if (!p->masks || !bits || !name)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        bits[i] = m->bits[i] != 0;
    p->masks[0] = (s2_block_mask){.name = name, .heads = m->heads, .rows = m->rows, .cols = m->cols, .bits = bits};
    p->num_masks = 1;
    return S2_OK;
}

static s2_status fill(s2_ctx *ctx, s2_pattern *p, const s2_pattern_def *d, s2_arena *arena)
{
    p->name = s2_arena_strdup(arena, d->name ? d->name : "pattern");
    p->rules = s2_arena_array(arena, (size_t)d->heads, sizeof *p->rules);
    if (!p->name || !p->rules)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    p->file = "<memory>";
    p->heads = d->heads;
    p->kv_heads = d->kv_heads ? d->kv_heads : d->heads;
    p->block_size = d->block_size;
    p->causal = d->causal;
    p->max_seq_len = d->max_seq_len;
    p->vert_position = d->vert_position < 0 ? (d->causal ? S2_VERT_ABSOLUTE : S2_VERT_RELATIVE)
                                            : (s2_vert_position)d->vert_position;
    /* The base fields say what the rules cannot: one step, no declared rule. */
    p->head_sliding_step = 1;
    if (d->mask) {
        s2_status st = copy_mask(ctx, p, d->mask, arena);
        if (st != S2_OK)
            return st;
    }
    for (int q = 0; q < d->heads; q++) {
        if (d->rules) {
            p->rules[q] = d->rules[q];
            if (p->causal)
                p->rules[q].local_right = 0;
        } else {
            p->rules[q] = (s2_head_rule){.mask = 0, .mask_head = d->mask->heads == 1 ? 0 : q};
        }
    }
    return S2_OK;
}

s2_status s2_pattern_build(s2_ctx *ctx, const s2_pattern_def *d, s2_pattern_set **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "out is null");
    *out = NULL;
    if (!d)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "null pattern definition");
    s2_status st = check_def(ctx, d);
    if (st != S2_OK)
        return st;
    s2_pattern_set *set = s2_pattern_set_new();
    s2_pattern *p = set ? s2_pattern_set_add(set) : NULL;
    st = p ? fill(ctx, p, d, &set->arena) : s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    return S2_HAND_OVER(st, out, set, s2_pattern_set_free);
}
