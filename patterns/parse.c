/* The pattern-file parser: libyaml events -> a small node tree (rejecting
 * anchors, aliases, tags and deep nesting; parse_tree.c) -> validated
 * s2_pattern values (here: a pattern's keys and the file's pattern list;
 * parse_value.c: typed readers; parse_rules.c: local_stride, mask, overrides,
 * ranges).  Every error is one line "file:line:col: key: what was expected,
 * got what".  The grammar is documented in README.md ("Pattern files"). */
#include "parse_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static s2_status parse_list(parser *P, const node *n, const char *key)
{
    char buf[256];
    if (n->kind != N_SEQ)
        return perr(P, n, "%s: expected a list, got %s", key, s2_pp_shown(n, buf, sizeof buf));
    return S2_OK;
}

/* Default name: the file's basename without its extension. */
static const char *default_name(parser *P)
{
    if (!P->path)
        return "pattern";
    const char *base = strrchr(P->path, '/');
    base = base ? base + 1 : P->path;
    size_t len = strlen(base);
    const char *dot = strrchr(base, '.');
    if (dot && dot != base)
        len = (size_t)(dot - base);
    if (len > MAX_NAME)
        len = MAX_NAME;
    char *name = s2_arena_strndup(&P->set->arena, base, len);
    if (!name || len == 0)
        return name && len == 0 ? "pattern" : NULL;
    for (char *c = name; *c; c++)
        if (!s2_pp_name_char_ok(*c))
            *c = '_';
    return name;
}

static s2_status parse_pattern(parser *P, const node *map, const char *pfx, bool in_list)
{
    char key[192], buf[256];
    field f[] = {F("name"), F("heads"), F("kv_heads"), F("block_size"), F("causal"), F("max_seq_len"),
                 F("local_stride"), F("dense"), F("mask"), F("mask_case"), F("overrides"), F("ranges"), F(NULL)};
    char what[160];
    snprintf(what, sizeof what, "%.*s", pfx[0] ? (int)strlen(pfx) - 1 : 7, pfx[0] ? pfx : "pattern");
    s2_status st = s2_pp_read_map(P, map, what, f);
    if (st != S2_OK)
        return st;
    if (P->set->count >= MAX_PATTERNS)
        return perr(P, map, "%s: more than %d patterns in one file", what, MAX_PATTERNS);
    s2_pattern *p = s2_pattern_set_add(P->set);
    if (!p)
        return s2_pp_nomem(P);
    p->file = s2_arena_strdup(&P->set->arena, P->path ? P->path : "<memory>");
    p->line = map->line;
    if (!p->file)
        return s2_pp_nomem(P);

    const node *v;
    const char *name = NULL;
    if ((v = s2_pp_fval(f, "name"))) {
        if ((st = s2_pp_get_name(P, v, s2_pp_keyname(key, sizeof key, pfx, "name"), &name)) != S2_OK)
            return st;
        for (int i = 0; i + 1 < P->set->count; i++)
            if (strcmp(P->set->items[i].name, name) == 0)
                return perr(P, v, "%sname: duplicate pattern name '%s' (first at line %d)", pfx, name,
                            P->set->items[i].line);
        name = s2_arena_strdup(&P->set->arena, name);
    } else if (in_list) {
        return perr(P, map, "%sname: required key missing (every pattern in a list needs a name)", pfx);
    } else {
        name = default_name(P);
    }
    if (!name)
        return s2_pp_nomem(P);
    p->name = (char *)name;

    if (!(v = s2_pp_fval(f, "heads")))
        return perr(P, map, "%sheads: required key missing", pfx);
    if ((st = s2_pp_get_int32(P, v, s2_pp_keyname(key, sizeof key, pfx, "heads"), 1, S2_MAX_HEADS, &p->heads)) != S2_OK)
        return st;
    p->kv_heads = p->heads;
    if ((v = s2_pp_fval(f, "kv_heads"))) {
        if ((st = s2_pp_get_int32(P, v, s2_pp_keyname(key, sizeof key, pfx, "kv_heads"), 1, p->heads, &p->kv_heads)) != S2_OK)
            return st;
        if (p->heads % p->kv_heads)
            return perr(P, v, "%s: heads (%d) must be a multiple of kv_heads (%d)", key, p->heads, p->kv_heads);
    }
    if (!(v = s2_pp_fval(f, "block_size")))
        return perr(P, map, "%sblock_size: required key missing", pfx);
    int64_t bs;
    s2_pp_keyname(key, sizeof key, pfx, "block_size");
    if (v->kind != N_SCALAR || !v->plain || s2_pp_get_int(P, v, key, INT64_MIN, INT64_MAX, &bs) != S2_OK ||
        (bs != 16 && bs != 32 && bs != 64 && bs != 128))
        return perr(P, v, "%s: expected 16, 32, 64 or 128, got %s", key, s2_pp_shown(v, buf, sizeof buf));
    p->block_size = (int)bs;
    p->causal = true;
    if ((v = s2_pp_fval(f, "causal")) && (st = s2_pp_get_bool(P, v, s2_pp_keyname(key, sizeof key, pfx, "causal"), &p->causal)) != S2_OK)
        return st;
    if ((v = s2_pp_fval(f, "max_seq_len")) &&
        (st = s2_pp_get_int(P, v, s2_pp_keyname(key, sizeof key, pfx, "max_seq_len"), 1, S2_MAX_SEQ_LEN, &p->max_seq_len)) != S2_OK)
        return st;

    bool dense = false;
    if ((v = s2_pp_fval(f, "dense")) && (st = s2_pp_get_bool(P, v, s2_pp_keyname(key, sizeof key, pfx, "dense"), &dense)) != S2_OK)
        return st;
    const node *ls = s2_pp_fval(f, "local_stride"), *mv = s2_pp_fval(f, "mask"), *cv = s2_pp_fval(f, "mask_case");
    if (mv && (ls || dense))
        return perr(P, mv, "%smask: cannot be combined with %s", pfx, ls ? "local_stride" : "dense: true");
    if (!mv && !ls && !dense)
        return perr(P, map, "%s: no base rule (expected local_stride, dense: true or mask)", what);
    if (cv && !mv)
        return perr(P, cv, "%smask_case: needs mask", pfx);

    /* base fields when there is no local_stride: every rule comes from dense or the mask */
    p->vert_stride = 1;
    p->vert_position = p->causal ? S2_VERT_ABSOLUTE : S2_VERT_RELATIVE;
    p->head_sliding_step_auto = true;
    if (ls) {
        char lpfx[160];
        snprintf(lpfx, sizeof lpfx, "%s", pfx);
        if ((st = s2_pp_parse_local_stride(P, p, ls, lpfx)) != S2_OK)
            return st;
    }
    if (dense)
        p->num_dense_heads = p->kv_heads;
    if ((st = s2_pattern_resolve_base(P->ctx, p, &P->set->arena)) != S2_OK)
        return st == S2_ERR_NOMEM ? st : perr(P, map, "%s: %s", what, s2_ctx_message(P->ctx));

    head_state hs = {s2_arena_alloc(&P->tmp, (size_t)p->heads), s2_arena_alloc(&P->tmp, (size_t)p->heads)};
    if (!hs.has_local || !hs.has_stride)
        return s2_pp_nomem(P);
    memset(hs.has_local, ls ? 1 : 0, (size_t)p->heads);
    memset(hs.has_stride, ls ? 1 : 0, (size_t)p->heads);
    if (mv) {
        int mask;
        if ((st = s2_pp_load_mask(P, p, mv, cv, pfx, &mask)) != S2_OK)
            return st;
        for (int q = 0; q < p->heads; q++)
            s2_pp_set_mask_rule(p, q, mask);
    }

    if ((v = s2_pp_fval(f, "overrides"))) {
        if ((st = parse_list(P, v, s2_pp_keyname(key, sizeof key, pfx, "overrides"))) != S2_OK)
            return st;
        for (int i = 0; i < v->n; i++) {
            if (++P->overrides > MAX_OVERRIDES)
                return perr(P, v->kids[i], "%s: more than %d overrides in one file", key, MAX_OVERRIDES);
            char opfx[192];
            snprintf(opfx, sizeof opfx, "%soverrides[%d].", pfx, i);
            if ((st = s2_pp_parse_override(P, p, v->kids[i], opfx, &hs)) != S2_OK)
                return st;
        }
    }
    if ((v = s2_pp_fval(f, "ranges"))) {
        if ((st = parse_list(P, v, s2_pp_keyname(key, sizeof key, pfx, "ranges"))) != S2_OK)
            return st;
        if (v->n > 0) {
            p->ranges = s2_arena_array(&P->set->arena, (size_t)v->n, sizeof *p->ranges);
            if (!p->ranges)
                return s2_pp_nomem(P);
        }
        for (int i = 0; i < v->n; i++) {
            if (++P->ranges > S2_PATTERN_MAX_RANGES)
                return perr(P, v->kids[i], "%s: more than %d ranges in one file", key, S2_PATTERN_MAX_RANGES);
            char rpfx[192];
            snprintf(rpfx, sizeof rpfx, "%sranges[%d].", pfx, i);
            if ((st = s2_pp_parse_range(P, p, v->kids[i], rpfx, &p->ranges[i])) != S2_OK)
                return st;
            p->num_ranges = i + 1;
        }
    }
    return S2_OK;
}

static s2_status parse_root(parser *P, const node *root)
{
    char buf[256];
    if (root->kind != N_MAP)
        return perr(P, root, "expected a pattern mapping (heads, block_size, ...) or patterns: [...], got %s",
                    s2_pp_shown(root, buf, sizeof buf));
    const node *list = NULL;
    for (int i = 0; i + 1 < root->n; i += 2)
        if (s2_pp_scalar_is(root->kids[i], "patterns"))
            list = root->kids[i + 1];
    if (!list)
        return parse_pattern(P, root, "", false);
    if (root->n != 2) {
        const node *other = s2_pp_scalar_is(root->kids[0], "patterns") ? root->kids[2] : root->kids[0];
        return perr(P, other, "%s: unexpected key next to patterns (a file is one pattern or a patterns: list)",
                    s2_pp_shown(other, buf, sizeof buf));
    }
    if (list->kind != N_SEQ || list->n == 0)
        return perr(P, list, "patterns: expected a non-empty list of patterns, got %s", s2_pp_shown(list, buf, sizeof buf));
    for (int i = 0; i < list->n; i++) {
        char pfx[64];
        snprintf(pfx, sizeof pfx, "patterns[%d].", i);
        s2_status st = parse_pattern(P, list->kids[i], pfx, true);
        if (st != S2_OK)
            return st;
    }
    return S2_OK;
}

s2_status s2_pattern_parse_opts(s2_ctx *ctx, const char *filename, const char *text, size_t len,
                                const s2_pattern_load_options *o, s2_pattern_set **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_pattern_parse: null output");
    *out = NULL;
    if (!text && len)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_pattern_parse: null text");
    parser P = {.ctx = ctx, .path = filename, .text = text ? text : "", .len = len,
                .allow_mask_dirs = o ? o->allow_mask_dirs : NULL};
    const char *fname = filename ? filename : "<memory>";
    s2_pattern_escape(P.file, sizeof P.file, fname, strlen(fname), SIZE_MAX);
    s2_arena_init(&P.tmp);
    P.set = s2_pattern_set_new();
    if (!P.set) {
        s2_arena_release(&P.tmp);
        return s2_pp_nomem(&P);
    }
    node *root;
    s2_status st = s2_pp_load_tree(&P, &root);
    if (st == S2_OK)
        st = parse_root(&P, root);
    s2_arena_release(&P.tmp);
    return S2_HAND_OVER(st, out, P.set, s2_pattern_set_free);
}

s2_status s2_pattern_parse(s2_ctx *ctx, const char *filename, const char *text, size_t len, s2_pattern_set **out)
{
    return s2_pattern_parse_opts(ctx, filename, text, len, NULL, out);
}

s2_status s2_pattern_load(s2_ctx *ctx, const char *path, s2_pattern_set **out)
{
    return s2_pattern_load_opts(ctx, path, NULL, out);
}

static s2_status parse_set(s2_ctx *ctx, const char *path, const char *text, size_t len, const void *o, void *out)
{
    return s2_pattern_parse_opts(ctx, path, text, len, o, out);
}

s2_status s2_pattern_load_opts(s2_ctx *ctx, const char *path, const s2_pattern_load_options *o,
                               s2_pattern_set **out)
{
    if (out)
        *out = NULL;
    return s2_pattern_load_file(ctx, "s2_pattern_load", path, parse_set, o, out);
}
