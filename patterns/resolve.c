/* Resolution of the local-stride rule into per-query-head rules, and
 * patterns built from the S2 library's keyword arguments. */
#include "pattern_internal.h"

#include <stdlib.h>
#include <string.h>

s2_pattern_set *s2_pattern_set_new(void)
{
    return s2_arena_boxed(sizeof(s2_pattern_set), offsetof(s2_pattern_set, arena));
}

s2_pattern *s2_pattern_set_add(s2_pattern_set *set)
{
    if (!s2_arena_room(&set->arena, &set->items, set->count, &set->cap, sizeof *set->items, 4))
        return NULL;
    s2_pattern *p = &set->items[set->count++];
    memset(p, 0, sizeof *p);
    return p;
}

void s2_pattern_set_free(s2_pattern_set *set)
{
    if (set)
        s2_arena_free_boxed(&set->arena);
}

int s2_pattern_set_count(const s2_pattern_set *set) { return set ? set->count : 0; }

const s2_pattern *s2_pattern_set_get(const s2_pattern_set *set, int i)
{
    if (!set || i < 0 || i >= set->count)
        return NULL;
    return &set->items[i];
}

const s2_pattern *s2_pattern_set_find(const s2_pattern_set *set, const char *name)
{
    if (!set || !name)
        return NULL;
    for (int i = 0; i < set->count; i++)
        if (set->items[i].name && strcmp(set->items[i].name, name) == 0)
            return &set->items[i];
    return NULL;
}

int64_t s2_pattern_base_shift(const s2_pattern *p, int q)
{
    int group = p->heads / p->kv_heads;
    int h = p->homo_head ? 0 : q / group;
    return (int64_t)h * p->head_sliding_step + p->head_sliding_offset;
}

s2_status s2_pattern_resolve_base(s2_ctx *ctx, s2_pattern *p, s2_arena *arena)
{
    if (p->heads < 1 || p->kv_heads < 1 || p->heads % p->kv_heads != 0)
        return s2_fail(ctx, S2_ERR_INVALID, "heads (%d) must be a positive multiple of kv_heads (%d)",
                       p->heads, p->kv_heads);
    if (p->head_sliding_step_auto || p->head_sliding_step <= 0) {
        /* the S2 library: max(1, int(vert_stride / num_heads)) over query heads */
        int step = p->vert_stride / p->heads;
        p->head_sliding_step = step < 1 ? 1 : step;
        p->head_sliding_step_auto = true;
    }
    p->rules = s2_arena_array(arena, (size_t)p->heads, sizeof *p->rules);
    if (!p->rules)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    int group = p->heads / p->kv_heads;
    for (int q = 0; q < p->heads; q++) {
        s2_head_rule *r = &p->rules[q];
        int h = q / group;
        r->dense = h >= p->kv_heads - p->num_dense_heads;
        r->local_left = p->local_left;
        r->local_right = p->causal ? 0 : p->local_right;
        r->vert_stride = p->vert_stride;
        r->shift = s2_pattern_base_shift(p, q);
        r->mask = -1;
        r->mask_head = 0;
    }
    return S2_OK;
}

void s2_local_stride_args_default(s2_local_stride_args *a)
{
    /* the S2 library's defaults */
    memset(a, 0, sizeof *a);
    a->name = "pattern";
    a->num_heads = 1;
    a->block_size = 64;
    a->local_blocks = 4;
    a->vert_stride = 4;
    a->homo_head = false;
    a->causal = true;
    a->vert_position = -1;
}

s2_status s2_pattern_from_args(s2_ctx *ctx, const s2_local_stride_args *a, s2_pattern_set **out)
{
    *out = NULL;
    if (!a)
        return s2_fail(ctx, S2_ERR_INVALID, "null arguments");
    int kv = a->num_kv_heads ? a->num_kv_heads : a->num_heads;
    if (a->num_heads < 1 || a->num_heads > S2_MAX_HEADS)
        return s2_fail(ctx, S2_ERR_INVALID, "num_heads must be in 1..%d, got %d", S2_MAX_HEADS, a->num_heads);
    if (kv < 1 || a->num_heads % kv)
        return s2_fail(ctx, S2_ERR_INVALID, "num_heads (%d) must be a multiple of num_kv_heads (%d)", a->num_heads, kv);
    if (a->block_size != 16 && a->block_size != 32 && a->block_size != 64 && a->block_size != 128)
        return s2_fail(ctx, S2_ERR_INVALID, "block_size must be 16, 32, 64 or 128, got %d", a->block_size);
    if (a->local_blocks < 0 || a->local_right < 0 || a->vert_stride < 1)
        return s2_fail(ctx, S2_ERR_INVALID, "local_blocks must be >= 0 and vert_stride >= 1");
    /* a pattern file's bounds, so that a cubin built from these loads again (the manifest holds them) */
    if (a->local_blocks > S2_PATTERN_MAX_COUNT || a->local_right > S2_PATTERN_MAX_COUNT ||
        a->vert_stride > S2_PATTERN_MAX_COUNT || a->head_sliding_step > S2_PATTERN_MAX_COUNT ||
        a->head_sliding_offset < 0 || a->head_sliding_offset > S2_PATTERN_MAX_COUNT)
        return s2_fail(ctx, S2_ERR_INVALID, "local_blocks, vert_stride, head_sliding_step and head_sliding_offset "
                       "must be in 0..%d", S2_PATTERN_MAX_COUNT);
    if (a->num_dense_heads < 0 || a->num_dense_heads > kv)
        return s2_fail(ctx, S2_ERR_INVALID, "num_dense_heads must be in 0..%d", kv);
    if (a->max_seq_len < 0 || a->max_seq_len > S2_MAX_SEQ_LEN)
        return s2_fail(ctx, S2_ERR_INVALID, "max_seq_len out of range");

    s2_pattern_set *set = s2_pattern_set_new();
    if (!set)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    s2_pattern *p = s2_pattern_set_add(set);
    if (!p) {
        s2_pattern_set_free(set);
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    p->name = s2_arena_strdup(&set->arena, a->name ? a->name : "pattern");
    p->file = "<args>";
    p->heads = a->num_heads;
    p->kv_heads = kv;
    p->block_size = a->block_size;
    p->causal = a->causal;
    p->max_seq_len = a->max_seq_len;
    p->vert_position = a->vert_position < 0 ? (a->causal ? S2_VERT_ABSOLUTE : S2_VERT_RELATIVE)
                                            : (s2_vert_position)a->vert_position;
    p->local_left = a->local_blocks;
    p->local_right = a->causal ? 0 : (a->local_right ? a->local_right : a->local_blocks);
    p->vert_stride = a->vert_stride;
    p->head_sliding_step = a->head_sliding_step;
    p->head_sliding_step_auto = a->head_sliding_step <= 0;
    p->head_sliding_offset = a->head_sliding_offset;
    p->homo_head = a->homo_head;
    p->num_dense_heads = a->num_dense_heads;
    s2_status st = p->name ? s2_pattern_resolve_base(ctx, p, &set->arena)
                           : s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    return S2_HAND_OVER(st, out, set, s2_pattern_set_free);
}
