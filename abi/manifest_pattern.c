/* The manifest parser: pattern blocks (`pattern NAME` and its pattern.*
 * records), read back into the s2_pattern the pattern parser would have
 * made.  Every integer arrives bounded by the record table
 * (manifest_parse.c); what depends on another record (a rule's head against
 * the heads, a mask index against the masks) is checked here. */
#include "manifest_internal.h"

#include <string.h>

/* Hex digits, 4 elements per digit, low bit first; exactly n elements. */
static bool hex_bits(const char *v, uint8_t *bits, int64_t n)
{
    int64_t digits = (n + 3) / 4;
    if ((int64_t)strlen(v) != digits)
        return false;
    for (int64_t d = 0; d < digits; d++) {
        char c = v[d];
        unsigned x = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) : 16u;
        if (x > 15)
            return false;
        for (int j = 0; j < 4; j++) {
            int64_t i = 4 * d + j;
            if (i < n)
                bits[i] = (x >> j) & 1u;
            else if ((x >> j) & 1u)
                return false;
        }
    }
    return true;
}

s2_status s2_mf_new_pattern(s2_mf_parser *ps, const s2_mf_record *rec, const s2_mf_value *v)
{
    s2_manifest *m = ps->m;
    const char *name = v->s[0];
    s2_status st = s2_mf_check_name(ps, "bad pattern", name);
    if (st != S2_OK)
        return st;
    int cap = m->cap_patterns; /* two arrays, one capacity */
    if (!s2_arena_room(&m->arena, &m->rules_seen, m->num_patterns, &cap, sizeof *m->rules_seen, 4) ||
        !s2_arena_room(&m->arena, &m->patterns, m->num_patterns, &m->cap_patterns, sizeof *m->patterns, 4))
        return s2_mf_nomem(ps);
    s2_pattern *p = s2_arena_alloc(&m->arena, sizeof *p);
    if (!p || !(p->name = s2_arena_strdup(&m->arena, name)) || !s2_mf_names_add(ps, &ps->pattern_names, p->name, NULL))
        return s2_mf_nomem(ps);
    p->kv_heads = 1;
    p->vert_stride = 1;
    p->file = "<manifest>";
    m->rules_seen[m->num_patterns] = 0;
    m->patterns[m->num_patterns++] = p;
    ps->p = p;
    ps->head_seen = NULL;
    ps->cap_ranges = 0;
    ps->k = NULL;
    return S2_OK;
}

static s2_status read_heads(s2_mf_parser *ps, s2_pattern *p, int heads)
{
    if (p->rules)
        return s2_mf_fail(ps, "pattern.heads: a second time in one pattern");
    p->heads = heads;
    if (!(p->rules = s2_arena_array(&ps->m->arena, (size_t)heads, sizeof *p->rules)) ||
        !(ps->head_seen = s2_arena_array(&ps->m->arena, (size_t)heads, 1)))
        return s2_mf_nomem(ps);
    return S2_OK;
}

/* pattern.mask I H M N BITS: mask I is the next one; its bits are all on the line before any memory is taken. */
static s2_status read_mask(s2_mf_parser *ps, s2_pattern *p, const s2_mf_value *v)
{
    const int64_t *x = v->i;
    const char *bits = v->s[4];
    if (x[0] != p->num_masks)
        return s2_mf_fail(ps, "pattern.mask: mask %lld where mask %d is next", (long long)x[0], p->num_masks);
    /* H <= 4096 and M <= 2^27, so H * M does not overflow; the product is bounded by division */
    if (x[1] * x[2] > (INT64_C(1) << 32) / x[3])
        return s2_mf_fail(ps, "pattern.mask: bad mask shape (%lld x %lld x %lld is more than 2^32 elements)",
                          (long long)x[1], (long long)x[2], (long long)x[3]);
    int64_t n = x[1] * x[2] * x[3];
    if ((int64_t)strlen(bits) != (n + 3) / 4)
        return s2_mf_fail(ps, "pattern.mask: bad mask bits (not as many digits as the shape needs)");
    s2_block_mask *nm =
        s2_arena_grow(&ps->m->arena, p->masks, (size_t)p->num_masks, (size_t)p->num_masks + 1, sizeof *nm);
    if (!nm)
        return s2_mf_nomem(ps);
    s2_block_mask *mk = &nm[p->num_masks];
    mk->name = s2_arena_strdup(&ps->m->arena, "");
    mk->heads = (int)x[1];
    mk->rows = x[2];
    mk->cols = x[3];
    mk->bits = s2_arena_alloc(&ps->m->arena, (size_t)n);
    if (!mk->bits || !mk->name)
        return s2_mf_nomem(ps);
    if (!hex_bits(bits, mk->bits, n))
        return s2_mf_fail(ps, "pattern.mask: bad mask bits (hex digits 0-9a-f, none past the last element)");
    p->masks = nm;
    p->num_masks++;
    return S2_OK;
}

/* pattern.rule Q DENSE LEFT RIGHT STRIDE SHIFT MASK MASK_HEAD: once per head, after the heads and the masks. */
static s2_status read_rule(s2_mf_parser *ps, s2_pattern *p, const s2_mf_value *v)
{
    const int64_t *x = v->i;
    if (!p->rules)
        return s2_mf_fail(ps, "pattern.rule before pattern.heads");
    /* the bound that keeps the writes below inside rules[] and head_seen[] */
    if (x[0] >= p->heads)
        return s2_mf_fail(ps, "pattern.rule: head %lld of a pattern of %d heads", (long long)x[0], p->heads);
    if (x[6] >= p->num_masks)
        return s2_mf_fail(ps, "pattern.rule: mask %lld of a pattern of %d masks (masks come before the rules)",
                          (long long)x[6], p->num_masks);
    if (ps->head_seen[x[0]])
        return s2_mf_fail(ps, "a second rule for one head: %lld", (long long)x[0]);
    if (x[6] >= 0 && x[7] >= p->masks[x[6]].heads)
        return s2_mf_fail(ps, "pattern.rule: mask %lld has no head %lld (it has %d)", (long long)x[6],
                          (long long)x[7], p->masks[x[6]].heads);
    ps->head_seen[x[0]] = 1;
    s2_head_rule *r = &p->rules[x[0]];
    r->dense = x[1] != 0;
    r->local_left = (int)x[2];
    r->local_right = (int)x[3];
    r->vert_stride = (int)x[4];
    r->shift = x[5];
    r->mask = (int)x[6];
    r->mask_head = (int)x[7];
    ps->m->rules_seen[ps->m->num_patterns - 1]++;
    return S2_OK;
}

static bool range_action(const char *s, s2_range_action *a)
{
    static const char *const names[] = {[S2_RANGE_SINK] = "sink", [S2_RANGE_STRIDE] = "stride",
                                        [S2_RANGE_DENSE] = "dense", [S2_RANGE_DROP] = "drop"};
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (!strcmp(s, names[i])) {
            *a = (s2_range_action)i;
            return true;
        }
    return false;
}

/* pattern.range ACTION KEY_LO KEY_HI DIST_LO DIST_HI STRIDE HEADS: after the heads, at most 4096 per pattern. */
static s2_status read_range(s2_mf_parser *ps, s2_pattern *p, const s2_mf_value *v)
{
    char b[S2_MF_SHOWN];
    const int64_t *x = v->i;
    s2_range_rule rr = {.line = ps->line};
    if (p->heads < 1)
        return s2_mf_fail(ps, "pattern.range before pattern.heads");
    if (!range_action(v->s[0], &rr.action))
        return s2_mf_fail(ps, "pattern.range: expected sink, stride, dense or drop: %s", s2_mf_show(b, v->s[0]));
    /* as the pattern parser: a stride range's stride from 1 */
    if (rr.action == S2_RANGE_STRIDE && x[5] < 1)
        return s2_mf_fail(ps, "pattern.range: a stride range with stride %lld", (long long)x[5]);
    rr.key_lo = x[1], rr.key_hi = x[2], rr.dist_lo = x[3], rr.dist_hi = x[4], rr.stride = (int)x[5];
    if (p->num_ranges >= S2_PATTERN_MAX_RANGES)
        return s2_mf_fail(ps, "more ranges than a pattern may hold (%d)", S2_PATTERN_MAX_RANGES);
    if ((int64_t)strlen(v->s[6]) != ((int64_t)p->heads + 3) / 4)
        return s2_mf_fail(ps, "pattern.range: bad range heads (not one bit per head)");
    if (!(rr.heads = s2_arena_alloc(&ps->m->arena, (size_t)p->heads)))
        return s2_mf_nomem(ps);
    if (!hex_bits(v->s[6], rr.heads, p->heads))
        return s2_mf_fail(ps, "pattern.range: bad range heads (hex digits 0-9a-f, none past the last head)");
    /* doubling: appends stay linear */
    if (!s2_arena_room(&ps->m->arena, &p->ranges, p->num_ranges, &ps->cap_ranges, sizeof *p->ranges, 8))
        return s2_mf_nomem(ps);
    p->ranges[p->num_ranges++] = rr;
    return S2_OK;
}

s2_status s2_mf_pattern_record(s2_mf_parser *ps, const s2_mf_record *rec, const s2_mf_value *v)
{
    char b[S2_MF_SHOWN];
    s2_pattern *p = ps->p;
    const char *key = rec->key + strlen("pattern.");
    const int64_t *x = v->i;
    if (!strcmp(key, "heads"))
        return read_heads(ps, p, (int)x[0]);
    if (!strcmp(key, "mask"))
        return read_mask(ps, p, v);
    if (!strcmp(key, "rule"))
        return read_rule(ps, p, v);
    if (!strcmp(key, "range"))
        return read_range(ps, p, v);
    if (!strcmp(key, "block_size")) {   /* as the pattern parser: 16, 32, 64 or 128 */
        if (x[0] & (x[0] - 1))
            return s2_mf_fail(ps, "pattern.block_size: expected 16, 32, 64 or 128: %lld", (long long)x[0]);
        p->block_size = (int)x[0];
    } else if (!strcmp(key, "vert_position")) {
        if (!strcmp(v->s[0], "absolute")) p->vert_position = S2_VERT_ABSOLUTE;
        else if (!strcmp(v->s[0], "relative")) p->vert_position = S2_VERT_RELATIVE;
        else return s2_mf_fail(ps, "pattern.vert_position: expected absolute or relative: %s", s2_mf_show(b, v->s[0]));
    } else if (!strcmp(key, "kv_heads")) p->kv_heads = (int)x[0];
    else if (!strcmp(key, "causal")) p->causal = x[0] != 0;
    else if (!strcmp(key, "max_seq_len")) p->max_seq_len = x[0];
    else if (!strcmp(key, "local")) p->local_left = (int)x[0], p->local_right = (int)x[1];
    else if (!strcmp(key, "vert_stride")) p->vert_stride = (int)x[0];
    else if (!strcmp(key, "head_sliding"))
        p->head_sliding_step = (int)x[0], p->head_sliding_step_auto = x[1] != 0, p->head_sliding_offset = (int)x[2];
    else if (!strcmp(key, "homo_head")) p->homo_head = x[0] != 0;
    else if (!strcmp(key, "num_dense_heads")) p->num_dense_heads = (int)x[0];
    else return s2_fail(ps->ctx, S2_ERR_INTERNAL, "manifest: no reader for %s", rec->key);
    return S2_OK;
}

/* A finished block: every head's rule, and what the pattern parser requires across records.  The name is one
 * the parser took (printable). */
s2_status s2_mf_pattern_complete(s2_ctx *ctx, const s2_pattern *p, int rules_seen)
{
    if (p->heads < 1 || p->block_size < 1)
        return s2_fail(ctx, S2_ERR_PARSE, "manifest: pattern '%s' has no pattern.%s", p->name,
                       p->heads < 1 ? "heads" : "block_size");
    if (rules_seen != p->heads)
        return s2_fail(ctx, S2_ERR_PARSE, "manifest: pattern '%s' is incomplete (%d of %d rules)", p->name,
                       rules_seen, p->heads);
    if (p->heads % p->kv_heads != 0)
        return s2_fail(ctx, S2_ERR_PARSE, "manifest: pattern '%s': heads (%d) is not a multiple of kv_heads (%d)",
                       p->name, p->heads, p->kv_heads);
    if (p->num_dense_heads > p->kv_heads)
        return s2_fail(ctx, S2_ERR_PARSE, "manifest: pattern '%s': num_dense_heads (%d) is more than kv_heads (%d)",
                       p->name, p->num_dense_heads, p->kv_heads);
    int64_t most = S2_MAX_SEQ_LEN / p->block_size;
    for (int i = 0; i < p->num_masks; i++) {
        const s2_block_mask *mk = &p->masks[i];
        if (mk->heads != 1 && mk->heads != p->heads)
            return s2_fail(ctx, S2_ERR_PARSE, "manifest: pattern '%s': mask %d has %d heads (expected 1 or %d)",
                           p->name, i, mk->heads, p->heads);
        if (mk->rows > most || mk->cols > most)
            return s2_fail(ctx, S2_ERR_PARSE, "manifest: pattern '%s': mask %d has %lld x %lld blocks, more than the "
                           "%lld blocks of %d tokens in the longest sequence", p->name, i, (long long)mk->rows,
                           (long long)mk->cols, (long long)most, p->block_size);
    }
    return S2_OK;
}
