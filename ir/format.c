/* Text forms of layouts, schedules and statistics (for the CLI and dumps). */
#include "ir_internal.h"

#include <stdlib.h>

static s2_status finish(s2_ctx *ctx, s2_buf *b, char **text)
{
    if (b->oom) {
        s2_buf_free(b);
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    *text = s2_buf_steal(b, NULL);
    return *text ? S2_OK : s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
}

/* JSON of the pattern's key fields, keys sorted as in the golden file. */
static void pattern_json(s2_buf *b, const s2_layout *l)
{
    const s2_pattern *p = l->p;
    s2_buf_printf(b, "{\"block_size\": %d, \"causal\": %s, \"head_sliding_offset\": %d, \"head_sliding_step\": %d, "
                     "\"homo_head\": %s, \"kv_len\": %lld, \"local_blocks\": %d, \"local_right\": %d, "
                     "\"num_dense_heads\": %d, \"num_heads\": %d, \"num_kv_heads\": %d, \"num_masks\": %d, "
                     "\"num_ranges\": %d, \"q_len\": %lld, \"vert_position\": \"%s\", \"vert_stride\": %d}",
                  p->block_size, p->causal ? "true" : "false", p->head_sliding_offset, p->head_sliding_step,
                  p->homo_head ? "true" : "false", (long long)l->kv_len, p->local_left, p->local_right,
                  p->num_dense_heads, p->heads, p->kv_heads, p->num_masks, p->num_ranges, (long long)l->q_len,
                  p->vert_position == S2_VERT_RELATIVE ? "relative" : "absolute", p->vert_stride);
}

s2_status s2_layout_format_mask(s2_ctx *ctx, const s2_layout *l, char **text)
{
    if (!l || !text)
        return s2_fail(ctx, S2_ERR_INVALID, "null argument");
    *text = NULL;
    if (l->q_blocks > S2_FORMAT_MAX_BLOCKS || l->kv_blocks > S2_FORMAT_MAX_BLOCKS)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "layout of %lld x %lld blocks is too large to print (max %d)",
                       (long long)l->q_blocks, (long long)l->kv_blocks, S2_FORMAT_MAX_BLOCKS);
    const s2_pattern *p = l->p;
    s2_buf b;
    s2_buf_init(&b);
    s2_buf_printf(&b, "case %s ", p->name && p->name[0] ? p->name : "pattern");
    pattern_json(&b, l);
    s2_buf_printf(&b, "\nshape %d %lld %lld\n", p->heads, (long long)l->q_blocks, (long long)l->kv_blocks);
    char *row = malloc((size_t)l->kv_blocks + 2);
    if (!row) {
        s2_buf_free(&b);
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    for (int q = 0; q < p->heads && !b.oom; q++) {
        int rep = l->rep_of_head[q];
        for (int64_t m = l->first_q_block; m < l->kv_blocks; m++) {
            for (int64_t n = 0; n < l->kv_blocks; n++)
                row[n] = s2_ir_block_kept(p, rep, m, n) ? '1' : '0';
            row[l->kv_blocks] = '\n';
            s2_buf_append(&b, row, (size_t)l->kv_blocks + 1);
        }
    }
    free(row);
    s2_buf_puts(&b, "end\n");
    return finish(ctx, &b, text);
}

static void entry_flags(s2_buf *b, uint32_t f)
{
    s2_buf_printf(b, "%s%s%s%s", f & S2_ENTRY_FULL ? "F" : "", f & S2_ENTRY_CAUSAL ? "C" : "",
                  f & S2_ENTRY_RAGGED ? "R" : "", f ? "" : "-");
}

/* The live mask as sub_m groups of sub_n bits, query sub-block 0 first. */
static void live_bits(s2_buf *b, const s2_tile_geom *g, uint64_t live)
{
    for (int i = 0; i < g->sub_m; i++) {
        if (i)
            s2_buf_puts(b, "|");
        for (int j = 0; j < g->sub_n; j++)
            s2_buf_puts(b, live & (UINT64_C(1) << (i * g->sub_n + j)) ? "1" : "0");
    }
}

s2_status s2_schedule_format(s2_ctx *ctx, const s2_schedule *s, char **text)
{
    if (!s || !text)
        return s2_fail(ctx, S2_ERR_INVALID, "null argument");
    *text = NULL;
    const s2_tile_geom *g = &s->geom;
    int64_t lists = s->transposed ? g->kv_tiles : g->q_tiles, first = s->transposed ? 0 : g->first_q_tile;
    s2_buf b;
    s2_buf_init(&b);
    s2_buf_printf(&b, "schedule %s tile %dx%d sub %dx%d of %dx%d tokens, %lld query tiles from %lld, %lld key tiles\n",
                  s->transposed ? "transposed" : "forward", g->block_m, g->block_n, g->sub_m, g->sub_n, g->sub_m_size,
                  g->sub_n_size, (long long)g->q_tiles, (long long)g->first_q_tile, (long long)g->kv_tiles);
    s2_buf_puts(&b, "entry: tile rows=<row mask hex> live=<bits per query sub-block> flags (F full, C causal, R ragged)\n");
    for (int c = 0; c < s->num_classes && !b.oom; c++) {
        s2_buf_printf(&b, "class %d heads", c);
        for (int q = 0; q < s->heads; q++)
            if (s->class_of_head[q] == c)
                s2_buf_printf(&b, " %d", q);
        s2_buf_puts(&b, "\n");
        for (int64_t i = 0; i < lists; i++) {
            int64_t lo = s->offsets[c * lists + i], hi = s->offsets[c * lists + i + 1];
            s2_buf_printf(&b, "  %s %lld: %lld entries\n", s->transposed ? "key tile" : "query tile",
                          (long long)(first + i), (long long)(hi - lo));
            for (int64_t k = lo; k < hi; k++) {
                const s2_tile_entry *e = &s->entries[k];
                s2_buf_printf(&b, "    %lld rows=%x live=", (long long)e->tile, e->row_mask);
                live_bits(&b, g, e->live);
                s2_buf_puts(&b, " ");
                entry_flags(&b, e->flags);
                s2_buf_puts(&b, "\n");
            }
        }
    }
    return finish(ctx, &b, text);
}

s2_status s2_layout_stats_format(s2_ctx *ctx, const s2_layout_stats *st, char **text)
{
    if (!st || !text)
        return s2_fail(ctx, S2_ERR_INVALID, "null argument");
    *text = NULL;
    s2_buf b;
    s2_buf_init(&b);
    s2_buf_printf(&b, "q_len %lld kv_len %lld heads %d head_dim %d\n", (long long)st->q_len, (long long)st->kv_len,
                  st->heads, st->head_dim);
    s2_buf_printf(&b, "kept %.4f%% (%.0f of %.0f token pairs)\n", 100.0 * st->kept_fraction, st->kept_pairs,
                  st->dense_pairs);
    s2_buf_printf(&b, "fwd %.3f GFLOP, fwd+bwd %.3f GFLOP, tiles %.3f GFLOP (%lld entries)\n", st->fwd_flops * 1e-9,
                  st->fwd_bwd_flops * 1e-9, st->tile_flops * 1e-9, (long long)st->entries);
    s2_buf_printf(&b, "bytes %.0f (%.3f MiB) per batch element\n", st->bytes_read, st->bytes_read / (1024.0 * 1024.0));
    s2_buf_printf(&b, "per-head pairs min %.0f max %.0f mean %.1f, imbalance %.3f\n", st->head_pairs_min,
                  st->head_pairs_max, st->head_pairs_mean, st->imbalance);
    return finish(ctx, &b, text);
}
