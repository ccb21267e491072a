/* Text forms of layouts, schedules and statistics (for the CLI and dumps). */
#include "ir_internal.h"

#include <stdint.h>
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

static size_t cap_of(size_t max_bytes) { return max_bytes ? max_bytes : S2_FORMAT_MAX_BYTES; }

static double mib_of(uint64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

/* a * b, saturating at UINT64_MAX (both >= 0) */
static uint64_t mul_sat(uint64_t a, uint64_t b) { return a && b > UINT64_MAX / a ? UINT64_MAX : a * b; }

static uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

static void mask_header(s2_buf *b, const s2_layout *l)
{
    const s2_pattern *p = l->p;
    s2_buf_printf(b, "case %s ", p->name && p->name[0] ? p->name : "pattern");
    pattern_json(b, l);
    s2_buf_printf(b, "\nshape %d %lld %lld\n", p->heads, (long long)l->q_blocks, (long long)l->kv_blocks);
}

uint64_t s2_layout_mask_text_size(const s2_layout *l)
{
    if (!l)
        return 0;
    s2_buf b;
    s2_buf_init(&b);
    mask_header(&b, l);
    uint64_t head = b.oom ? 1024 : (uint64_t)b.len;
    s2_buf_free(&b);
    uint64_t rows = mul_sat((uint64_t)l->p->heads, (uint64_t)l->q_blocks);
    return add_sat(head + 4, mul_sat(rows, (uint64_t)l->kv_blocks + 1));
}

s2_status s2_layout_format_mask(s2_ctx *ctx, const s2_layout *l, size_t max_bytes, char **text)
{
    if (!l || !text)
        return s2_fail(ctx, S2_ERR_INVALID, "null argument");
    *text = NULL;
    uint64_t size = s2_layout_mask_text_size(l);
    if (size > cap_of(max_bytes))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "the mask text would be about %.0f MiB, over the limit of %.0f MiB",
                       mib_of(size), mib_of(cap_of(max_bytes)));
    if (l->q_blocks > S2_FORMAT_MAX_BLOCKS || l->kv_blocks > S2_FORMAT_MAX_BLOCKS)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "layout of %lld x %lld blocks is too large to print (max %d)",
                       (long long)l->q_blocks, (long long)l->kv_blocks, S2_FORMAT_MAX_BLOCKS);
    const s2_pattern *p = l->p;
    s2_buf b;
    s2_buf_init(&b);
    mask_header(&b, l);
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

static void schedule_header(s2_buf *b, const s2_tile_geom *g, bool transposed)
{
    s2_buf_printf(b, "schedule %s tile %dx%d sub %dx%d of %dx%d tokens, %lld query tiles from %lld, %lld key tiles\n",
                  transposed ? "transposed" : "forward", g->block_m, g->block_n, g->sub_m, g->sub_n, g->sub_m_size,
                  g->sub_n_size, (long long)g->q_tiles, (long long)g->first_q_tile, (long long)g->kv_tiles);
    s2_buf_puts(b, "entry: tile rows=<row mask hex> live=<bits per query sub-block> flags (F full, C causal, R ragged)\n");
}

static void class_line(s2_buf *b, int c, const int *class_of_head, int heads)
{
    s2_buf_printf(b, "class %d heads", c);
    for (int q = 0; q < heads; q++)
        if (class_of_head[q] == c)
            s2_buf_printf(b, " %d", q);
    s2_buf_puts(b, "\n");
}

/* One list: its header line, then one line per entry. */
static void format_list(s2_buf *b, const s2_tile_geom *g, bool transposed, int64_t index, const s2_tile_entry *e,
                        int64_t n)
{
    s2_buf_printf(b, "  %s %lld: %lld entries\n", transposed ? "key tile" : "query tile", (long long)index,
                  (long long)n);
    for (int64_t k = 0; k < n; k++) {
        s2_buf_printf(b, "    %lld rows=%x live=", (long long)e[k].tile, e[k].row_mask);
        live_bits(b, g, e[k].live);
        s2_buf_puts(b, " ");
        entry_flags(b, e[k].flags);
        s2_buf_puts(b, "\n");
    }
}

static s2_status over_cap(s2_ctx *ctx, const char *what, uint64_t size, size_t cap)
{
    return s2_fail(ctx, S2_ERR_UNSUPPORTED, "the %s text would be about %.0f MiB, over the limit of %.0f MiB", what,
                   mib_of(size), mib_of(cap));
}

s2_status s2_schedule_format(s2_ctx *ctx, const s2_schedule *s, size_t max_bytes, char **text)
{
    if (!s || !text)
        return s2_fail(ctx, S2_ERR_INVALID, "null argument");
    *text = NULL;
    size_t cap = cap_of(max_bytes);
    const s2_tile_geom *g = &s->geom;
    int64_t lists = s->transposed ? g->kv_tiles : g->q_tiles, first = s->transposed ? 0 : g->first_q_tile;
    /* every entry line holds at least its tile, " rows=", " live=", its bits and a flag */
    uint64_t least = mul_sat((uint64_t)s->offsets[s->num_classes * lists], (uint64_t)(15 + g->sub_m * (g->sub_n + 1)));
    if (least > cap)
        return over_cap(ctx, "schedule", least, cap);
    s2_buf b;
    s2_buf_init(&b);
    schedule_header(&b, g, s->transposed);
    for (int c = 0; c < s->num_classes && !b.oom; c++) {
        class_line(&b, c, s->class_of_head, s->heads);
        for (int64_t i = 0; i < lists && !b.oom; i++) {
            int64_t lo = s->offsets[c * lists + i], hi = s->offsets[c * lists + i + 1];
            format_list(&b, g, s->transposed, first + i, s->entries + lo, hi - lo);
            if (b.len > cap) {
                s2_buf_free(&b);
                return s2_fail(ctx, S2_ERR_UNSUPPORTED, "the schedule text is over the limit of %.0f MiB",
                               mib_of(cap));
            }
        }
    }
    return finish(ctx, &b, text);
}

enum { SAMPLE_LISTS = 64 };

s2_status s2_layout_schedule_text_estimate(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, bool transposed,
                                           uint64_t *bytes)
{
    if (!l || !bytes)
        return s2_fail(ctx, S2_ERR_INVALID, "null argument");
    *bytes = 0;
    s2_tile_geom g;
    s2_status st = s2_ir_geom(ctx, l, spec, &g);
    if (st != S2_OK)
        return st;
    const s2_pattern *p = l->p;
    int64_t lists = transposed ? g.kv_tiles : g.q_tiles, first = transposed ? 0 : g.first_q_tile;
    int64_t total = (int64_t)l->num_classes * lists, samples = total < SAMPLE_LISTS ? total : SAMPLE_LISTS;
    int64_t cap = s2_layout_max_entries(l, spec);
    s2_tile_entry *buf = malloc((size_t)cap * sizeof *buf);
    if (!buf)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    s2_buf b;
    s2_buf_init(&b);
    schedule_header(&b, &g, transposed);
    for (int c = 0; c < l->num_classes; c++)
        class_line(&b, c, l->class_of_head, p->heads);
    double fixed = (double)b.len, sampled = 0;
    /* lists spread evenly over (class, list), each formatted for its exact size */
    for (int64_t k = 0; k < samples && st == S2_OK && !b.oom; k++) {
        int64_t idx = (2 * k + 1) * total / (2 * samples), c = idx / lists, i = idx % lists, n = 0;
        int q = l->class_rep[c];
        st = transposed ? s2_layout_kv_tile_entries(ctx, l, spec, q, first + i, buf, cap, &n)
                        : s2_layout_q_tile_entries(ctx, l, spec, q, first + i, buf, cap, &n);
        if (st != S2_OK)
            break;
        s2_buf_reset(&b);
        format_list(&b, &g, transposed, first + i, buf, n);
        sampled += (double)b.len;
    }
    bool oom = b.oom;
    s2_buf_free(&b);
    free(buf);
    if (st != S2_OK)
        return st;
    if (oom)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    double est = fixed + (samples ? sampled / (double)samples * (double)total : 0);
    *bytes = est >= 1.8e19 ? UINT64_MAX : (uint64_t)est;
    return S2_OK;
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
