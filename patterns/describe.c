/* A short human summary of a resolved pattern (for `s2c check`). */
#include "pattern_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *action_name(s2_range_action a)
{
    switch (a) {
    case S2_RANGE_SINK: return "sink";
    case S2_RANGE_STRIDE: return "stride";
    case S2_RANGE_DENSE: return "keep all";
    case S2_RANGE_DROP: return "keep none";
    }
    return "?";
}

bool s2_pattern_is_dense(const s2_pattern *p)
{
    if (!p || !p->rules || p->heads < 1 || p->num_ranges > 0)
        return false;
    for (int q = 0; q < p->heads; q++) {
        const s2_head_rule *r = &p->rules[q];
        if (r->mask >= 0 || (!r->dense && r->vert_stride != 1))
            return false;
    }
    return true;
}

static bool same_rule(const s2_head_rule *a, const s2_head_rule *b)
{
    return a->dense == b->dense && a->local_left == b->local_left && a->local_right == b->local_right &&
           a->vert_stride == b->vert_stride && a->mask == b->mask &&
           (a->mask < 0 || a->mask_head == b->mask_head);
}

static void rule_text(s2_buf *b, const s2_pattern *p, const s2_head_rule *r)
{
    if (r->dense) {
        s2_buf_puts(b, "dense");
    } else if (r->mask >= 0) {
        s2_buf_printf(b, "mask %d ('%s') head %d", r->mask, p->masks[r->mask].name, r->mask_head);
    } else {
        if (p->causal)
            s2_buf_printf(b, "local %d", r->local_left);
        else
            s2_buf_printf(b, "local [%d, %d]", r->local_left, r->local_right);
        if (r->vert_stride > 0)
            s2_buf_printf(b, ", stride %d", r->vert_stride);
        else
            s2_buf_puts(b, ", no stripes");
    }
}

/* Runs of heads with the same rule: "0-27: local 16, stride 8". */
static void describe_rules(s2_buf *b, const s2_pattern *p)
{
    for (int q = 0; q < p->heads;) {
        int e = q;
        while (e + 1 < p->heads && same_rule(&p->rules[q], &p->rules[e + 1]))
            e++;
        if (e == q)
            s2_buf_printf(b, "  head %d: ", q);
        else
            s2_buf_printf(b, "  heads %d-%d: ", q, e);
        rule_text(b, p, &p->rules[q]);
        s2_buf_puts(b, "\n");
        q = e + 1;
    }
}

/* Shifts of the non-dense local-stride heads, as arithmetic runs
 * "0-31: 1 + 1*k" where they form one, else listed. */
static void describe_shifts(s2_buf *b, const s2_pattern *p)
{
    s2_buf_puts(b, "shifts:");
    int shown = 0;
    for (int q = 0; q < p->heads;) {
        if (p->rules[q].dense || p->rules[q].mask >= 0 || p->rules[q].vert_stride == 0) {
            q++;
            continue;
        }
        int e = q;
        int64_t d = q + 1 < p->heads ? p->rules[q + 1].shift - p->rules[q].shift : 0;
        while (e + 1 < p->heads && !p->rules[e + 1].dense && p->rules[e + 1].mask < 0 &&
               p->rules[e + 1].vert_stride != 0 && p->rules[e + 1].shift - p->rules[e].shift == d)
            e++;
        if (e == q)
            s2_buf_printf(b, " %d:%lld", q, (long long)p->rules[q].shift);
        else if (d == 0)
            s2_buf_printf(b, " %d-%d:%lld", q, e, (long long)p->rules[q].shift);
        else
            s2_buf_printf(b, " %d-%d:%lld%+lld/head", q, e, (long long)p->rules[q].shift, (long long)d);
        shown++;
        q = e + 1;
    }
    s2_buf_puts(b, shown ? "\n" : " (none)\n");
}

static void span_text(s2_buf *b, const char *what, int64_t lo, int64_t hi)
{
    s2_buf_printf(b, ", %s [%lld, ", what, (long long)lo);
    if (hi == INT64_MAX)
        s2_buf_puts(b, "end)");
    else
        s2_buf_printf(b, "%lld)", (long long)hi);
}

s2_status s2_pattern_describe(const s2_pattern *p, char **text)
{
    if (!text)
        return S2_ERR_INVALID;
    *text = NULL;
    if (!p || !p->rules)
        return S2_ERR_INVALID;
    s2_buf b;
    s2_buf_init(&b);
    s2_buf_printf(&b, "pattern %s (%s:%d)\n", p->name ? p->name : "?", p->file ? p->file : "?", p->line);
    s2_buf_printf(&b, "heads %d, kv_heads %d, block_size %d, %s", p->heads, p->kv_heads, p->block_size,
                  p->causal ? "causal" : "bidirectional");
    if (p->max_seq_len)
        s2_buf_printf(&b, ", max_seq_len %lld", (long long)p->max_seq_len);
    s2_buf_puts(&b, "\n");
    s2_buf_printf(&b, "base: local %d", p->local_left);
    if (!p->causal)
        s2_buf_printf(&b, "/%d", p->local_right);
    s2_buf_printf(&b, ", vert_stride %d, head_sliding_step %d%s, offset %d, %s, %s, num_dense_heads %d\n",
                  p->vert_stride, p->head_sliding_step, p->head_sliding_step_auto ? " (auto)" : "",
                  p->head_sliding_offset, p->homo_head ? "homo_head" : "per-head",
                  p->vert_position == S2_VERT_ABSOLUTE ? "absolute" : "relative", p->num_dense_heads);
    int dense = 0;
    for (int q = 0; q < p->heads; q++)
        dense += p->rules[q].dense;
    s2_buf_printf(&b, "dense heads: %d of %d; masks: %d; ranges: %d\n", dense, p->heads, p->num_masks,
                  p->num_ranges);
    s2_buf_puts(&b, "rules:\n");
    describe_rules(&b, p);
    describe_shifts(&b, p);
    for (int i = 0; i < p->num_ranges; i++) {
        const s2_range_rule *r = &p->ranges[i];
        int nh = 0;
        for (int q = 0; q < p->heads; q++)
            nh += !r->heads || r->heads[q] != 0;   /* no list: every head (as ir/predicate.c) */
        s2_buf_printf(&b, "range %d (line %d): %s", i, r->line, action_name(r->action));
        if (r->action == S2_RANGE_STRIDE)
            s2_buf_printf(&b, " %d", r->stride);
        if (r->key_lo != 0 || r->key_hi != INT64_MAX)
            span_text(&b, "keys", r->key_lo, r->key_hi);
        if (r->dist_lo != 0 || r->dist_hi != INT64_MAX)
            span_text(&b, "distance", r->dist_lo, r->dist_hi);
        s2_buf_printf(&b, ", %d heads\n", nh);
    }
    char *s = s2_buf_steal(&b, NULL);
    if (!s)
        return S2_ERR_NOMEM;
    *text = s;
    return S2_OK;
}
