/* The pattern-file parser: typed readers of scalars, mappings with a fixed
 * key set, and the values several sections share (local_blocks, vert_stride,
 * head selectors, token spans). */
#include "parse_internal.h"

#include <stdio.h>
#include <string.h>

bool s2_pp_scalar_is(const node *n, const char *word)
{
    return n->kind == N_SCALAR && n->plain && n->len == strlen(word) && memcmp(n->str, word, n->len) == 0;
}

s2_status s2_pp_get_int(parser *P, const node *n, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    char buf[256];
    if (n->kind != N_SCALAR || !n->plain)
        return perr(P, n, "%s: expected an integer, got %s", key, s2_pp_shown(n, buf, sizeof buf));
    const char *s = n->str;
    size_t i = 0;
    bool neg = n->len > 0 && s[0] == '-';
    if (neg)
        i++;
    size_t first = i;
    int64_t v = 0;
    bool big = false;
    for (; i < n->len && s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > (INT64_MAX - 9) / 10)
            big = true;
        else
            v = v * 10 + (s[i] - '0');
    }
    if (i == first || i != n->len)
        return perr(P, n, "%s: expected an integer, got %s", key, s2_pp_shown(n, buf, sizeof buf));
    if (s[first] == '0' && i - first > 1)
        return perr(P, n, "%s: expected a decimal integer without leading zeros, got %s", key, s2_pp_shown(n, buf, sizeof buf));
    if (neg && lo >= 0)
        return perr(P, n, "%s: expected a non-negative integer, got %s", key, s2_pp_shown(n, buf, sizeof buf));
    if (!neg && (big || v > hi))
        return perr(P, n, "%s: expected at most %lld, got %s", key, (long long)hi, s2_pp_shown(n, buf, sizeof buf));
    if (neg)
        v = -v;
    if (big || v < lo)
        return perr(P, n, "%s: expected at least %lld, got %s", key, (long long)lo, s2_pp_shown(n, buf, sizeof buf));
    *out = v;
    return S2_OK;
}

s2_status s2_pp_get_int32(parser *P, const node *n, const char *key, int lo, int hi, int *out)
{
    int64_t v;
    s2_status st = s2_pp_get_int(P, n, key, lo, hi, &v);
    if (st == S2_OK)
        *out = (int)v;
    return st;
}

s2_status s2_pp_get_bool(parser *P, const node *n, const char *key, bool *out)
{
    char buf[256];
    if (s2_pp_scalar_is(n, "true"))
        *out = true;
    else if (s2_pp_scalar_is(n, "false"))
        *out = false;
    else
        return perr(P, n, "%s: expected true or false, got %s", key, s2_pp_shown(n, buf, sizeof buf));
    return S2_OK;
}

/* A non-empty string without NUL bytes (quoted or plain). */
s2_status s2_pp_get_string(parser *P, const node *n, const char *key, const char **out)
{
    char buf[256];
    if (n->kind != N_SCALAR || n->len == 0 || strlen(n->str) != n->len)
        return perr(P, n, "%s: expected a non-empty string, got %s", key, s2_pp_shown(n, buf, sizeof buf));
    *out = n->str;
    return S2_OK;
}

bool s2_pp_name_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
}

s2_status s2_pp_get_name(parser *P, const node *n, const char *key, const char **out)
{
    char buf[256];
    bool ok = n->kind == N_SCALAR && n->len > 0 && n->len <= MAX_NAME;
    for (size_t i = 0; ok && i < n->len; i++)
        ok = s2_pp_name_char_ok(n->str[i]);
    if (!ok)
        return perr(P, n, "%s: expected a name of 1..%d letters, digits, '_', '-' or '.', got %s", key, MAX_NAME,
                    s2_pp_shown(n, buf, sizeof buf));
    *out = n->str;
    return S2_OK;
}

/* Match the pairs of `map` to `fields` (NULL-terminated names), rejecting
 * unknown and duplicate keys.  `what` names the mapping in messages. */
s2_status s2_pp_read_map(parser *P, const node *map, const char *what, field *fields)
{
    char buf[256];
    if (map->kind != N_MAP)
        return perr(P, map, "%s: expected a mapping, got %s", what, s2_pp_shown(map, buf, sizeof buf));
    for (field *f = fields; f->name; f++)
        f->key = f->val = NULL;
    for (int i = 0; i + 1 < map->n; i += 2) {
        const node *k = map->kids[i];
        field *f = NULL;
        if (k->kind == N_SCALAR)
            for (field *g = fields; g->name && !f; g++)
                if (k->len == strlen(g->name) && memcmp(k->str, g->name, k->len) == 0)
                    f = g;
        if (!f) {
            char expect[512] = "";
            size_t o = 0;
            for (field *g = fields; g->name; g++)
                o += (size_t)snprintf(expect + o, o < sizeof expect ? sizeof expect - o : 0, "%s%s",
                                      g == fields ? "" : ", ", g->name);
            if (k->kind != N_SCALAR)
                return perr(P, k, "%s: keys must be words, got %s (expected one of: %s)", what,
                            s2_pp_shown(k, buf, sizeof buf), expect);
            const char *names[32];
            size_t n = 0;
            for (field *g = fields; g->name && n < sizeof names / sizeof names[0]; g++)
                names[n++] = g->name;
            const char *near = s2_suggest(k->str, k->len, names, n);
            if (near)
                return perr(P, k, "%s: unknown key '%s'; did you mean '%s'?", what, s2_pp_shown(k, buf, sizeof buf),
                            near);
            return perr(P, k, "%s: unknown key '%s' (expected one of: %s)", what, s2_pp_shown(k, buf, sizeof buf), expect);
        }
        if (f->key)
            return perr(P, k, "%s: duplicate key '%s' (first at line %d)", what, f->name, f->key->line);
        f->key = k;
        f->val = map->kids[i + 1];
    }
    return S2_OK;
}

const node *s2_pp_fval(const field *fields, const char *name)
{
    for (const field *f = fields; f->name; f++)
        if (strcmp(f->name, name) == 0)
            return f->val;
    return NULL;
}

/* "prefix" + "key" for messages. */
const char *s2_pp_keyname(char *buf, size_t size, const char *prefix, const char *key)
{
    /* by hand: a cut name in a message is fine, a truncation warning is not */
    size_t o = 0;
    for (const char *parts[2] = {prefix, key}, **part = parts; part < parts + 2; part++)
        for (const char *c = *part; *c && o + 1 < size; c++)
            buf[o++] = *c;
    buf[o] = 0;
    return buf;
}
/* local_blocks: N, or [left, right] when bidirectional. */
s2_status s2_pp_get_local(parser *P, const node *n, const char *key, bool causal, int *left, int *right)
{
    if (n->kind == N_SEQ) {
        char buf[256];
        if (causal)
            return perr(P, n, "%s: a [left, right] list needs causal: false; expected an integer", key);
        if (n->n != 2)
            return perr(P, n, "%s: expected [left, right], got a list of %d", key, n->n);
        s2_status st = s2_pp_get_int32(P, n->kids[0], key, 0, S2_PATTERN_MAX_COUNT, left);
        if (st == S2_OK)
            st = s2_pp_get_int32(P, n->kids[1], key, 0, S2_PATTERN_MAX_COUNT, right);
        (void)buf;
        return st;
    }
    s2_status st = s2_pp_get_int32(P, n, key, 0, S2_PATTERN_MAX_COUNT, left);
    *right = causal ? 0 : *left;
    return st;
}

/* vert_stride: N >= 1, or `none` (0: no vertical stripes). */
s2_status s2_pp_get_stride(parser *P, const node *n, const char *key, int *out)
{
    if (s2_pp_scalar_is(n, "none")) {
        *out = 0;
        return S2_OK;
    }
    char buf[256];
    if (n->kind != N_SCALAR || !n->plain || n->len == 0 || !((n->str[0] >= '0' && n->str[0] <= '9') || n->str[0] == '-'))
        return perr(P, n, "%s: expected an integer >= 1 or none, got %s", key, s2_pp_shown(n, buf, sizeof buf));
    return s2_pp_get_int32(P, n, key, 1, S2_PATTERN_MAX_COUNT, out);
}
/* One selector item: an int or "a-b". */
static s2_status select_item(parser *P, const node *n, const char *key, int heads, uint8_t *sel)
{
    char buf[256];
    if (n->kind == N_SCALAR) { /* "a-b", quoted or not */
        const char *dash = n->len > 1 ? memchr(n->str + 1, '-', n->len - 1) : NULL;
        if (dash) {
            node a = *n, b = *n;
            a.plain = b.plain = true;
            a.len = (size_t)(dash - n->str);
            b.str = dash + 1;
            b.len = n->len - a.len - 1;
            b.col = n->col + (int)a.len + 1;
            char sa[64], sb[64];
            if (a.len >= sizeof sa || b.len >= sizeof sb)
                return perr(P, n, "%s: expected a head number or a range a-b, got %s", key, s2_pp_shown(n, buf, sizeof buf));
            memcpy(sa, a.str, a.len);
            sa[a.len] = 0;
            memcpy(sb, b.str, b.len);
            sb[b.len] = 0;
            a.str = sa;
            b.str = sb;
            int lo, hi;
            s2_status st = s2_pp_get_int32(P, &a, key, 0, heads - 1, &lo);
            if (st == S2_OK)
                st = s2_pp_get_int32(P, &b, key, 0, heads - 1, &hi);
            if (st != S2_OK)
                return st;
            if (lo > hi)
                return perr(P, n, "%s: empty range %s (expected a-b with a <= b)", key, s2_pp_shown(n, buf, sizeof buf));
            memset(sel + lo, 1, (size_t)(hi - lo + 1));
            return S2_OK;
        }
    }
    if (n->kind != N_SCALAR || !n->plain)
        return perr(P, n, "%s: expected a head number or a range a-b, got %s", key, s2_pp_shown(n, buf, sizeof buf));
    int h;
    s2_status st = s2_pp_get_int32(P, n, key, 0, heads - 1, &h);
    if (st == S2_OK)
        sel[h] = 1;
    return st;
}

/* heads: N | "a-b" | [N, "a-b", ...] -> sel[heads] (allocated in arena). */
s2_status s2_pp_get_heads(parser *P, const node *n, const char *key, int heads, s2_arena *arena, uint8_t **out)
{
    uint8_t *sel = s2_arena_alloc(arena, (size_t)heads);
    if (!sel)
        return s2_pp_nomem(P);
    *out = sel;
    if (n->kind == N_SEQ) {
        if (n->n == 0)
            return perr(P, n, "%s: expected at least one head, got an empty list", key);
        for (int i = 0; i < n->n; i++) {
            s2_status st = select_item(P, n->kids[i], key, heads, sel);
            if (st != S2_OK)
                return st;
        }
        return S2_OK;
    }
    return select_item(P, n, key, heads, sel);
}

s2_status s2_pp_get_span(parser *P, const node *n, const char *key, int bs, int64_t *lo, int64_t *hi)
{
    char buf[256];
    if (n->kind != N_SEQ || n->n != 2)
        return perr(P, n, "%s: expected [lo, hi] in tokens, got %s", key, s2_pp_shown(n, buf, sizeof buf));
    s2_status st = s2_pp_get_int(P, n->kids[0], key, 0, S2_MAX_SEQ_LEN, lo);
    if (st != S2_OK)
        return st;
    if (*lo % bs)
        return perr(P, n->kids[0], "%s: %lld is not a multiple of block_size %d", key, (long long)*lo, bs);
    if (s2_pp_scalar_is(n->kids[1], "end")) {
        *hi = INT64_MAX;
    } else {
        if ((st = s2_pp_get_int(P, n->kids[1], key, 0, S2_MAX_SEQ_LEN, hi)) != S2_OK)
            return st;
        if (*hi % bs)
            return perr(P, n->kids[1], "%s: %lld is not a multiple of block_size %d", key, (long long)*hi, bs);
    }
    if (*hi <= *lo)
        return perr(P, n, "%s: empty span [%lld, %lld) (expected lo < hi)", key, (long long)*lo, (long long)*hi);
    return S2_OK;
}

