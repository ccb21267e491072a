/* Schedules from outside the pattern (a context-parallel layer's, say):
 * checked as untrusted against a layout's geometry, and transposed for the
 * backward. */
#include "ir_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool same_geom(const s2_tile_geom *a, const s2_tile_geom *b)
{
    return a->block_m == b->block_m && a->block_n == b->block_n && a->sub_m == b->sub_m && a->sub_n == b->sub_n &&
           a->sub_m_size == b->sub_m_size && a->sub_n_size == b->sub_n_size && a->first_q_tile == b->first_q_tile &&
           a->q_tiles == b->q_tiles && a->kv_tiles == b->kv_tiles;
}

static const char *flag_text(uint32_t f, char *buf)
{
    buf[0] = f & S2_ENTRY_FULL ? 'F' : '-';
    buf[1] = f & S2_ENTRY_CAUSAL ? 'C' : '-';
    buf[2] = f & S2_ENTRY_RAGGED ? 'R' : '-';
    snprintf(buf + 3, 16, "+0x%x", (unsigned)(f & ~(uint32_t)(S2_ENTRY_FULL | S2_ENTRY_CAUSAL | S2_ENTRY_RAGGED)));
    return buf;
}

/* One list's entries: tiles in range and increasing, live pairs valid,
 * row_mask and flags those the live pairs give. */
static s2_status check_list(s2_ctx *ctx, const s2_layout *l, const s2_tile_geom *g, const s2_schedule *s, int c,
                            int64_t list, int64_t lo, int64_t hi)
{
    int64_t lists = s->transposed ? g->kv_tiles : g->q_tiles, first = s->transposed ? 0 : g->first_q_tile;
    int64_t a = s->offsets[(int64_t)c * lists + list], z = s->offsets[(int64_t)c * lists + list + 1];
    int64_t prev = INT64_MIN;
    for (int64_t e = a; e < z; e++) {
        const s2_tile_entry *x = &s->entries[e];
        if (x->tile < lo || x->tile > hi || x->tile <= prev)
            return s2_fail(ctx, S2_ERR_INVALID,
                           "schedule: class %d, list %" PRId64 ", entry %" PRId64 ": tile %" PRId64
                           " outside %" PRId64 "..%" PRId64 " or not above the one before (%" PRId64 ")",
                           c, list, e - a, x->tile, lo, hi, prev == INT64_MIN ? (int64_t)-1 : prev);
        prev = x->tile;
        int64_t t = s->transposed ? x->tile : first + list, j = s->transposed ? first + list : x->tile;
        uint64_t valid = s2_ir_entry_valid(l, g, t, j);
        if (!x->live || (x->live & ~valid))
            return s2_fail(ctx, S2_ERR_INVALID,
                           "schedule: class %d, list %" PRId64 ", entry %" PRId64 " (query tile %" PRId64
                           ", key tile %" PRId64 "): live pairs 0x%" PRIx64 " empty or outside the tile's 0x%" PRIx64,
                           c, list, e - a, t, j, x->live, valid);
        s2_tile_entry want;
        s2_ir_entry_fill(l, g, t, j, x->live, &want);
        if (x->row_mask != want.row_mask || x->flags != want.flags) {
            char f1[24], f2[24];
            return s2_fail(ctx, S2_ERR_INVALID,
                           "schedule: class %d, list %" PRId64 ", entry %" PRId64 " (query tile %" PRId64
                           ", key tile %" PRId64 "): row_mask 0x%x flags %s, its live pairs give row_mask 0x%x flags %s",
                           c, list, e - a, t, j, (unsigned)x->row_mask, flag_text(x->flags, f1),
                           (unsigned)want.row_mask, flag_text(want.flags, f2));
        }
    }
    return S2_OK;
}

s2_status s2_schedule_check(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, bool transposed, const s2_schedule *s)
{
    if (!l || !s)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_schedule_check: %s is NULL", !l ? "layout" : "schedule");
    s2_tile_geom g;
    s2_status st = s2_ir_geom(ctx, l, spec, &g);
    if (st != S2_OK)
        return st;
    if (s->transposed != transposed)
        return s2_fail(ctx, S2_ERR_INVALID, "schedule: a %s schedule where a %s one is wanted",
                       s->transposed ? "transposed" : "forward", transposed ? "transposed" : "forward");
    if (!same_geom(&s->geom, &g))
        return s2_fail(ctx, S2_ERR_SHAPE,
                       "schedule: geometry (tile %d x %d, sub-blocks %d x %d of %d x %d, query tiles %" PRId64
                       " from %" PRId64 ", key tiles %" PRId64 ") is not that of q_len %" PRId64 ", kv_len %" PRId64
                       " (tile %d x %d, sub-blocks %d x %d of %d x %d, query tiles %" PRId64 " from %" PRId64
                       ", key tiles %" PRId64 ")",
                       s->geom.block_m, s->geom.block_n, s->geom.sub_m, s->geom.sub_n, s->geom.sub_m_size,
                       s->geom.sub_n_size, s->geom.q_tiles, s->geom.first_q_tile, s->geom.kv_tiles, l->q_len,
                       l->kv_len, g.block_m, g.block_n, g.sub_m, g.sub_n, g.sub_m_size, g.sub_n_size, g.q_tiles,
                       g.first_q_tile, g.kv_tiles);
    const s2_pattern *p = l->p;
    if (s->heads != p->heads)
        return s2_fail(ctx, S2_ERR_HEADS, "schedule: %d heads, the pattern has %d", s->heads, p->heads);
    if (s->num_classes < 1 || s->num_classes > s->heads)
        return s2_fail(ctx, S2_ERR_INVALID, "schedule: %d head classes (1..%d)", s->num_classes, s->heads);
    if (!s->class_of_head || !s->offsets)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "schedule: %s is NULL", !s->class_of_head ? "class_of_head" : "offsets");
    for (int h = 0; h < s->heads; h++)
        if (s->class_of_head[h] < 0 || s->class_of_head[h] >= s->num_classes)
            return s2_fail(ctx, S2_ERR_INVALID, "schedule: head %d in class %d (0..%d)", h, s->class_of_head[h],
                           s->num_classes - 1);
    /* every list's count first: at most one entry per tile of the other axis */
    int64_t lists = transposed ? g.kv_tiles : g.q_tiles;
    int64_t lo = transposed ? g.first_q_tile : 0, hi = transposed ? g.first_q_tile + g.q_tiles - 1 : g.kv_tiles - 1;
    if (s->offsets[0] != 0)
        return s2_fail(ctx, S2_ERR_INVALID, "schedule: offsets[0] is %" PRId64 ", not 0", s->offsets[0]);
    for (int64_t i = 0; i < (int64_t)s->num_classes * lists; i++) {
        int64_t n = s->offsets[i + 1] - s->offsets[i];
        if (s->offsets[i + 1] < s->offsets[i] || n > hi - lo + 1)
            return s2_fail(ctx, S2_ERR_INVALID,
                           "schedule: list %" PRId64 " of class %" PRId64 " holds %" PRId64 " entries (0..%" PRId64 ")",
                           i % lists, i / lists, n, hi - lo + 1);
    }
    if (s->offsets[(int64_t)s->num_classes * lists] > 0 && !s->entries)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "schedule: entries is NULL");
    for (int c = 0; c < s->num_classes; c++)
        for (int64_t i = 0; i < lists; i++)
            if ((st = check_list(ctx, l, &g, s, c, i, lo, hi)) != S2_OK)
                return st;
    return S2_OK;
}

s2_status s2_schedule_transpose(s2_ctx *ctx, const s2_layout *l, const s2_schedule *fwd, s2_tile_spec spec,
                                s2_schedule **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_schedule_transpose: out is NULL");
    *out = NULL;
    if (!fwd)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_schedule_transpose: schedule is NULL");
    s2_tile_spec fs = {fwd->geom.block_m, fwd->geom.block_n};
    s2_status st = s2_schedule_check(ctx, l, fs, false, fwd);
    s2_tile_geom g;
    if (st == S2_OK)
        st = s2_ir_geom(ctx, l, spec, &g);
    if (st != S2_OK)
        return st;
    const s2_tile_geom *f = &fwd->geom;
    if (g.block_m != f->block_m || g.block_n != f->sub_n_size)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED,
                       "schedule: a %d x %d transposed tile needs forward tiles of %d query rows and key sub-blocks "
                       "of %d (these: %d rows, key sub-blocks of %d)",
                       g.block_m, g.block_n, g.block_m, g.block_n, f->block_m, f->sub_n_size);
    int nc = fwd->num_classes;
    int64_t lists = g.kv_tiles, nlists = (int64_t)nc * lists;
    s2_schedule *s = calloc(1, sizeof *s);
    int64_t *fill = calloc((size_t)nlists + 1, sizeof *fill);
    if (!s || !fill)
        goto nomem;
    s->geom = g;
    s->heads = fwd->heads;
    s->num_classes = nc;
    s->transposed = true;
    s->class_of_head = malloc((size_t)s->heads * sizeof(int));
    s->offsets = calloc((size_t)nlists + 1, sizeof(int64_t));
    if (!s->class_of_head || !s->offsets)
        goto nomem;
    memcpy(s->class_of_head, fwd->class_of_head, (size_t)s->heads * sizeof(int));
    /* two passes over the forward entries: count per key tile, then place in
     * query-tile order (the forward lists are walked in it) */
    for (int pass = 0; pass < 2; pass++) {
        for (int c = 0; c < nc; c++)
            for (int64_t i = 0; i < f->q_tiles; i++)
                for (int64_t e = fwd->offsets[c * f->q_tiles + i]; e < fwd->offsets[c * f->q_tiles + i + 1]; e++) {
                    const s2_tile_entry *x = &fwd->entries[e];
                    for (int jj = 0; jj < f->sub_n; jj++) {
                        uint64_t rows = 0;
                        for (int r = 0; r < f->sub_m; r++)
                            rows |= (x->live >> (r * f->sub_n + jj) & 1) << r;
                        if (!rows)
                            continue;
                        int64_t jt = x->tile * f->sub_n + jj, at = (int64_t)c * lists + jt;
                        if (pass == 0) {
                            s->offsets[at + 1]++;
                            continue;
                        }
                        s2_ir_entry_fill(l, &g, f->first_q_tile + i, jt, rows, &s->entries[fill[at]++]);
                        s->entries[fill[at] - 1].tile = f->first_q_tile + i;
                    }
                }
        if (pass == 0) {
            for (int64_t i = 0; i < nlists; i++)
                s->offsets[i + 1] += s->offsets[i];
            for (int64_t i = 0; i < nlists; i++)
                fill[i] = s->offsets[i];
            s->entries = malloc((size_t)(s->offsets[nlists] > 0 ? s->offsets[nlists] : 1) * sizeof *s->entries);
            if (!s->entries)
                goto nomem;
        }
    }
    free(fill);
    *out = s;
    return S2_OK;
nomem:
    free(fill);
    s2_schedule_free(s);
    return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
}
