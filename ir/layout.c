/* Layouts: a pattern instantiated for (q_len, kv_len), and its head classes. */
#include "ir_internal.h"

#include <stdlib.h>
#include <string.h>

static bool valid_block_size(int bs) { return bs == 16 || bs == 32 || bs == 64 || bs == 128; }

static s2_status check_rule(s2_ctx *ctx, const s2_pattern *p, int q, int64_t blocks)
{
    const s2_head_rule *r = &p->rules[q];
    if (r->local_left < 0 || r->local_right < 0 || r->vert_stride < 0)
        return s2_fail(ctx, S2_ERR_INVALID, "head %d: local window and vert_stride must be >= 0", q);
    if (r->mask < 0)
        return S2_OK;
    if (r->mask >= p->num_masks || !p->masks)
        return s2_fail(ctx, S2_ERR_INVALID, "head %d: mask index %d out of range", q, r->mask);
    const s2_block_mask *bm = &p->masks[r->mask];
    if (!bm->bits || bm->heads < 1 || (bm->heads > 1 && (r->mask_head < 0 || r->mask_head >= bm->heads)))
        return s2_fail(ctx, S2_ERR_INVALID, "head %d: mask head %d out of range", q, r->mask_head);
    if (blocks > bm->rows || blocks > bm->cols) /* at the mask's reference in the pattern file, when known */
        return s2_fail(ctx, S2_ERR_INVALID,
                       "%s%shead %d: %lld blocks exceed the explicit mask '%s' (%lld x %lld blocks)",
                       p->mask_where ? p->mask_where[r->mask] : "", p->mask_where ? ": " : "", q,
                       (long long)blocks, bm->name ? bm->name : "", (long long)bm->rows, (long long)bm->cols);
    return S2_OK;
}

static s2_status check_pattern(s2_ctx *ctx, const s2_pattern *p, int64_t blocks)
{
    if (!p->rules || p->heads < 1 || p->heads > S2_MAX_HEADS || p->kv_heads < 1 || p->heads % p->kv_heads)
        return s2_fail(ctx, S2_ERR_INVALID, "pattern has no resolved rules or bad head counts");
    if (!valid_block_size(p->block_size))
        return s2_fail(ctx, S2_ERR_INVALID, "block_size must be 16, 32, 64 or 128, got %d", p->block_size);
    for (int q = 0; q < p->heads; q++) {
        s2_status st = check_rule(ctx, p, q, blocks);
        if (st != S2_OK)
            return st;
    }
    for (int i = 0; i < p->num_ranges; i++) {
        const s2_range_rule *rr = &p->ranges[i];
        if (rr->action == S2_RANGE_STRIDE && rr->stride < 1)
            return s2_fail(ctx, S2_ERR_INVALID, "range rule %d: stride must be >= 1", i);
        if (rr->key_lo < 0 || rr->dist_lo < 0)
            return s2_fail(ctx, S2_ERR_INVALID, "range rule %d: negative bound", i);
    }
    return S2_OK;
}

/* The range rules that apply to head q, hashed: heads with different
 * selections almost always differ here, so most comparisons stop early. */
static uint64_t selection_hash(const s2_pattern *p, int q)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < p->num_ranges; i++)
        h = (h ^ (uint64_t)s2_ir_range_applies_to(&p->ranges[i], q)) * 1099511628211ull;
    return h;
}

static bool same_selection(const s2_pattern *p, int a, int b, bool *any)
{
    *any = false;
    for (int i = 0; i < p->num_ranges; i++) {
        bool sa = s2_ir_range_applies_to(&p->ranges[i], a);
        if (sa != s2_ir_range_applies_to(&p->ranges[i], b))
            return false;
        *any |= sa;
    }
    return true;
}

/* Absolute stripes keep n when (n + shift) mod S == 0, so two heads with the
 * same strides differ only if their shifts differ modulo one of them: the
 * base vert_stride (when used) or a stride rule that applies to both. */
static bool same_shift_classes(const s2_pattern *p, int a, int b)
{
    const s2_head_rule *ra = &p->rules[a], *rb = &p->rules[b];
    if (!ra->dense && ra->vert_stride > 0 && s2_mod(ra->shift, ra->vert_stride) != s2_mod(rb->shift, ra->vert_stride))
        return false;
    for (int i = 0; i < p->num_ranges; i++) {
        const s2_range_rule *rr = &p->ranges[i];
        if (rr->action == S2_RANGE_STRIDE && s2_ir_range_applies_to(rr, a) &&
            s2_mod(ra->shift, rr->stride) != s2_mod(rb->shift, rr->stride))
            return false;
    }
    return true;
}

/* Rules that give the same mask.  Conservative: different rules with equal
 * masks may land in different classes, never the reverse. */
static bool same_mask(const s2_pattern *p, const uint64_t *sel, int a, int b)
{
    const s2_head_rule *ra = &p->rules[a], *rb = &p->rules[b];
    if (ra->mask >= 0 || rb->mask >= 0) {
        if (ra->mask != rb->mask)
            return false;
        const s2_block_mask *bm = &p->masks[ra->mask];
        return bm->heads == 1 || ra->mask_head == rb->mask_head;
    }
    bool any;
    if (sel[a] != sel[b] || ra->dense != rb->dense || !same_selection(p, a, b, &any))
        return false;
    if (ra->dense && !any)
        return true;
    if (ra->local_left != rb->local_left || ra->local_right != rb->local_right || ra->vert_stride != rb->vert_stride)
        return false;
    if (p->vert_position == S2_VERT_RELATIVE)
        return true; /* relative stripes do not depend on the shift */
    return same_shift_classes(p, a, b);
}

static s2_status build_classes(s2_ctx *ctx, s2_layout *l)
{
    const s2_pattern *p = l->p;
    uint64_t *sel = malloc((size_t)p->heads * sizeof *sel);
    if (!sel)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    for (int q = 0; q < p->heads; q++)
        sel[q] = selection_hash(p, q);
    for (int q = 0; q < p->heads; q++) {
        int c = 0;
        while (c < l->num_classes && !same_mask(p, sel, l->class_rep[c], q))
            c++;
        if (c == l->num_classes)
            l->class_rep[l->num_classes++] = q;
        l->class_of_head[q] = c;
        l->rep_of_head[q] = l->class_rep[c];
        l->class_size[c]++;
    }
    free(sel);
    return S2_OK;
}

s2_status s2_layout_new(s2_ctx *ctx, const s2_pattern *p, int64_t q_len, int64_t kv_len, s2_layout **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_INVALID, "null output");
    *out = NULL;
    if (!p)
        return s2_fail(ctx, S2_ERR_INVALID, "null pattern");
    if (q_len < 1 || kv_len < 1 || q_len > kv_len)
        return s2_fail(ctx, S2_ERR_INVALID, "need 1 <= q_len <= kv_len, got q_len %lld, kv_len %lld",
                       (long long)q_len, (long long)kv_len);
    if (kv_len > S2_MAX_SEQ_LEN || (p->max_seq_len > 0 && kv_len > p->max_seq_len))
        return s2_fail(ctx, S2_ERR_INVALID, "kv_len %lld exceeds the pattern's max_seq_len %lld", (long long)kv_len,
                       (long long)(p->max_seq_len > 0 ? p->max_seq_len : S2_MAX_SEQ_LEN));
    s2_status st = check_pattern(ctx, p, valid_block_size(p->block_size) ? s2_cdiv(kv_len, p->block_size) : 0);
    if (st != S2_OK)
        return st;
    /* one allocation: the layout, then its four [heads] tables */
    s2_layout *l = calloc(1, sizeof *l + 4 * (size_t)p->heads * sizeof(int));
    if (!l)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    l->rep_of_head = (int *)(l + 1);
    l->class_of_head = l->rep_of_head + p->heads;
    l->class_rep = l->class_of_head + p->heads;
    l->class_size = l->class_rep + p->heads;
    l->p = p;
    l->q_len = q_len;
    l->kv_len = kv_len;
    l->q_start = kv_len - q_len;
    l->first_q_block = l->q_start / p->block_size;
    l->kv_blocks = s2_cdiv(kv_len, p->block_size);
    l->q_blocks = l->kv_blocks - l->first_q_block;
    st = build_classes(ctx, l);
    return S2_HAND_OVER(st, out, l, s2_layout_free);
}

int64_t s2_layout_max_kv_len(const s2_pattern *p)
{
    if (!p || !p->rules || p->block_size < 1)
        return 0;
    int64_t lim = S2_MAX_SEQ_LEN;
    if (p->max_seq_len > 0 && p->max_seq_len < lim)
        lim = p->max_seq_len;
    for (int q = 0; q < p->heads; q++) {
        int mi = p->rules[q].mask;
        if (mi < 0 || mi >= p->num_masks)
            continue;
        const s2_block_mask *bm = &p->masks[mi];
        int64_t blocks = bm->rows < bm->cols ? bm->rows : bm->cols;
        if (blocks * p->block_size < lim)
            lim = blocks * p->block_size;
    }
    return lim;
}

void s2_layout_free(s2_layout *l) { free(l); }

const s2_pattern *s2_layout_pattern(const s2_layout *l) { return l ? l->p : NULL; }
int64_t s2_layout_q_len(const s2_layout *l) { return l ? l->q_len : 0; }
int64_t s2_layout_kv_len(const s2_layout *l) { return l ? l->kv_len : 0; }
int64_t s2_layout_q_start(const s2_layout *l) { return l ? l->q_start : 0; }
int64_t s2_layout_q_blocks(const s2_layout *l) { return l ? l->q_blocks : 0; }
int64_t s2_layout_first_q_block(const s2_layout *l) { return l ? l->first_q_block : 0; }
int64_t s2_layout_kv_blocks(const s2_layout *l) { return l ? l->kv_blocks : 0; }

int s2_layout_head_class(const s2_layout *l, int q)
{
    if (!l || q < 0 || q >= l->p->heads)
        return -1;
    return l->rep_of_head[q];
}

int s2_layout_num_classes(const s2_layout *l) { return l ? l->num_classes : 0; }

int s2_layout_class_index(const s2_layout *l, int q)
{
    if (!l || q < 0 || q >= l->p->heads)
        return -1;
    return l->class_of_head[q];
}

int s2_layout_class_rep(const s2_layout *l, int c)
{
    if (!l || c < 0 || c >= l->num_classes)
        return -1;
    return l->class_rep[c];
}

static bool valid_tile(int t) { return t == 16 || t == 32 || t == 64 || t == 128; }

s2_status s2_ir_geom(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, s2_tile_geom *g)
{
    if (!l || !g)
        return s2_fail(ctx, S2_ERR_INVALID, "null argument");
    if (!valid_tile(spec.block_m) || !valid_tile(spec.block_n))
        return s2_fail(ctx, S2_ERR_INVALID, "tile sizes must be 16, 32, 64 or 128, got %d x %d", spec.block_m,
                       spec.block_n);
    int bs = l->p->block_size;
    memset(g, 0, sizeof *g);
    g->block_m = spec.block_m;
    g->block_n = spec.block_n;
    g->sub_m_size = bs < spec.block_m ? bs : spec.block_m;
    g->sub_n_size = bs < spec.block_n ? bs : spec.block_n;
    g->sub_m = spec.block_m / g->sub_m_size;
    g->sub_n = spec.block_n / g->sub_n_size;
    if (g->sub_m * g->sub_n > 64)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "tile %d x %d has %d sub-blocks of block %d (at most 64)", spec.block_m,
                       spec.block_n, g->sub_m * g->sub_n, bs);
    g->first_q_tile = l->q_start / spec.block_m;
    g->q_tiles = (l->kv_len - 1) / spec.block_m - g->first_q_tile + 1;
    g->kv_tiles = s2_cdiv(l->kv_len, spec.block_n);
    return S2_OK;
}

s2_status s2_layout_tile_geom(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, s2_tile_geom *g)
{
    return s2_ir_geom(ctx, l, spec, g);
}
