/* The pattern-file parser: libyaml events -> a small node tree (rejecting
 * anchors, aliases, tags and deep nesting) -> validated s2_pattern values.
 * Every error is one line "file:line:col: key: what was expected, got what".
 * The grammar is documented in README.md ("Pattern files"). */
#include "pattern_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define MAX_DEPTH 16             /* deepest legal file needs 6 */
#define MAX_PATTERNS 256         /* per file */
#define MAX_RANGES 4096          /* per file: each costs `heads` bytes */
#define MAX_OVERRIDES 4096       /* per file */
#define MAX_MASKS 64             /* per pattern */
#define MAX_COUNT (1 << 24)      /* local_blocks, vert_stride, step, offset */
#define MAX_NAME 128

typedef enum node_kind { N_SCALAR, N_SEQ, N_MAP } node_kind;

typedef struct node {
    node_kind kind;
    int line, col;
    const char *str;   /* scalar text (NUL-terminated; may hold NULs) */
    size_t len;
    bool plain;        /* unquoted scalar */
    struct node **kids; /* seq: items; map: key, value, key, value... */
    int n;
} node;

typedef struct parser {
    s2_ctx *ctx;
    char file[1024];    /* escaped name for messages */
    const char *path;   /* as given (NULL: memory) */
    const char *text;
    size_t len;
    s2_arena tmp;       /* the node tree and scratch */
    s2_pattern_set *set;
    int overrides, ranges;
} parser;

static s2_status perr_at(parser *P, int line, int col, const char *fmt, ...) S2_PRINTF(4, 5);
static s2_status perr_at(parser *P, int line, int col, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return s2_fail(P->ctx, S2_ERR_PARSE, "%s:%d:%d: %s", P->file, line, col, msg);
}

#define perr(P, n, ...) perr_at((P), (n)->line, (n)->col, __VA_ARGS__)

static s2_status nomem(parser *P) { return s2_fail(P->ctx, S2_ERR_NOMEM, "%s: out of memory", P->file); }

/* What a node is, for "got ..." in messages. */
static const char *shown(const node *n, char *buf, size_t size)
{
    if (n->kind == N_SEQ)
        return "a list";
    if (n->kind == N_MAP)
        return "a mapping";
    if (n->plain && n->len == 0)
        return "nothing";
    char esc[200];
    s2_pattern_escape(esc, sizeof esc, n->str, n->len, S2_ESCAPE_SHORT);
    snprintf(buf, size, n->plain ? "%s" : "\"%s\"", esc);
    return buf;
}

/* ---- libyaml events -> node tree ------------------------------------------ */

static s2_status yaml_failure(parser *P, const yaml_parser_t *yp)
{
    if (yp->error == YAML_MEMORY_ERROR)
        return nomem(P);
    const char *problem = yp->problem ? yp->problem : "malformed YAML";
    if (yp->error == YAML_READER_ERROR) {
        /* reader errors carry a byte offset, not a mark */
        size_t off = yp->problem_offset < P->len ? yp->problem_offset : P->len;
        int line = 1, col = 1;
        for (size_t i = 0; i < off; i++) {
            if (P->text[i] == '\n')
                line++, col = 1;
            else
                col++;
        }
        if (yp->problem_value >= 0)
            return perr_at(P, line, col, "invalid input: %s (byte 0x%02x)", problem, yp->problem_value & 0xff);
        return perr_at(P, line, col, "invalid input: %s", problem);
    }
    int line = (int)yp->problem_mark.line + 1, col = (int)yp->problem_mark.column + 1;
    if (yp->context)
        return perr_at(P, line, col, "YAML syntax error: %s (%s at line %d)", problem, yp->context,
                       (int)yp->context_mark.line + 1);
    return perr_at(P, line, col, "YAML syntax error: %s", problem);
}

static s2_status next_event(parser *P, yaml_parser_t *yp, yaml_event_t *ev)
{
    if (!yaml_parser_parse(yp, ev))
        return yaml_failure(P, yp);
    return S2_OK;
}

static s2_status check_anchor_tag(parser *P, const node *n, const yaml_char_t *anchor, const yaml_char_t *tag)
{
    char esc[128];
    if (anchor) {
        s2_pattern_escape(esc, sizeof esc, (const char *)anchor, strlen((const char *)anchor), S2_ESCAPE_SHORT);
        return perr(P, n, "aliases are not supported (anchor &%s)", esc);
    }
    if (tag) {
        s2_pattern_escape(esc, sizeof esc, (const char *)tag, strlen((const char *)tag), S2_ESCAPE_SHORT);
        return perr(P, n, "tags are not supported (%s)", esc);
    }
    return S2_OK;
}

typedef struct node_vec {
    node **items;
    int n, cap;
} node_vec;

static bool vec_push(node_vec *v, node *x)
{
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 8;
        node **items = realloc(v->items, (size_t)cap * sizeof *items);
        if (!items)
            return false;
        v->items = items;
        v->cap = cap;
    }
    v->items[v->n++] = x;
    return true;
}

static s2_status build_node(parser *P, yaml_parser_t *yp, yaml_event_t *ev, int depth, node **out);

/* Children up to the matching end event. */
static s2_status build_children(parser *P, yaml_parser_t *yp, yaml_event_type_t end, int depth, node *n)
{
    node_vec v = {0};
    s2_status st = S2_OK;
    for (;;) {
        yaml_event_t ev;
        st = next_event(P, yp, &ev);
        if (st != S2_OK)
            break;
        if (ev.type == end) {
            yaml_event_delete(&ev);
            break;
        }
        node *kid;
        st = build_node(P, yp, &ev, depth + 1, &kid);
        if (st != S2_OK)
            break;
        if (!vec_push(&v, kid)) {
            st = nomem(P);
            break;
        }
    }
    if (st == S2_OK && v.n > 0) {
        n->kids = s2_arena_array(&P->tmp, (size_t)v.n, sizeof *n->kids);
        if (!n->kids)
            st = nomem(P);
        else
            memcpy(n->kids, v.items, (size_t)v.n * sizeof *n->kids);
        n->n = v.n;
    }
    free(v.items);
    return st;
}

/* Build the node that starts with *ev; always consumes (deletes) *ev. */
static s2_status build_node(parser *P, yaml_parser_t *yp, yaml_event_t *ev, int depth, node **out)
{
    s2_status st = S2_OK;
    node *n = s2_arena_alloc(&P->tmp, sizeof *n);
    if (!n) {
        yaml_event_delete(ev);
        return nomem(P);
    }
    n->line = (int)ev->start_mark.line + 1;
    n->col = (int)ev->start_mark.column + 1;
    switch (ev->type) {
    case YAML_ALIAS_EVENT: {
        char esc[128];
        const char *a = (const char *)ev->data.alias.anchor;
        s2_pattern_escape(esc, sizeof esc, a ? a : "", a ? strlen(a) : 0, S2_ESCAPE_SHORT);
        st = perr(P, n, "aliases are not supported (*%s)", esc);
        break;
    }
    case YAML_SCALAR_EVENT:
        n->kind = N_SCALAR;
        st = check_anchor_tag(P, n, ev->data.scalar.anchor, ev->data.scalar.tag);
        if (st != S2_OK)
            break;
        n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        n->len = ev->data.scalar.length;
        n->str = s2_arena_strndup(&P->tmp, (const char *)ev->data.scalar.value, n->len);
        if (!n->str)
            st = nomem(P);
        break;
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        bool seq = ev->type == YAML_SEQUENCE_START_EVENT;
        n->kind = seq ? N_SEQ : N_MAP;
        st = seq ? check_anchor_tag(P, n, ev->data.sequence_start.anchor, ev->data.sequence_start.tag)
                 : check_anchor_tag(P, n, ev->data.mapping_start.anchor, ev->data.mapping_start.tag);
        if (st == S2_OK && depth >= MAX_DEPTH)
            st = perr(P, n, "nesting deeper than %d levels", MAX_DEPTH);
        if (st == S2_OK) {
            yaml_event_delete(ev);
            st = build_children(P, yp, seq ? YAML_SEQUENCE_END_EVENT : YAML_MAPPING_END_EVENT, depth, n);
        }
        break;
    }
    default:
        st = perr(P, n, "unexpected YAML event");
        break;
    }
    yaml_event_delete(ev);
    *out = n;
    return st;
}

static s2_status load_tree(parser *P, node **root)
{
    yaml_parser_t yp;
    yaml_event_t ev;
    *root = NULL;
    if (!yaml_parser_initialize(&yp))
        return nomem(P);
    yaml_parser_set_input_string(&yp, (const unsigned char *)P->text, P->len);
    s2_status st = next_event(P, &yp, &ev); /* stream start */
    if (st != S2_OK)
        goto done;
    yaml_event_delete(&ev);
    if ((st = next_event(P, &yp, &ev)) != S2_OK)
        goto done;
    if (ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        st = perr_at(P, 1, 1, "empty pattern file (expected a mapping with heads, block_size, ...)");
        goto done;
    }
    if (ev.data.document_start.tag_directives.start != ev.data.document_start.tag_directives.end) {
        st = perr_at(P, (int)ev.start_mark.line + 1, (int)ev.start_mark.column + 1, "tags are not supported (%%TAG)");
        yaml_event_delete(&ev);
        goto done;
    }
    yaml_event_delete(&ev);
    if ((st = next_event(P, &yp, &ev)) != S2_OK)
        goto done;
    if ((st = build_node(P, &yp, &ev, 0, root)) != S2_OK)
        goto done;
    if ((st = next_event(P, &yp, &ev)) != S2_OK) /* document end */
        goto done;
    yaml_event_delete(&ev);
    if ((st = next_event(P, &yp, &ev)) != S2_OK)
        goto done;
    if (ev.type != YAML_STREAM_END_EVENT)
        st = perr_at(P, (int)ev.start_mark.line + 1, (int)ev.start_mark.column + 1,
                     "only one YAML document is allowed per file");
    yaml_event_delete(&ev);
done:
    yaml_parser_delete(&yp);
    return st;
}

/* ---- typed access -------------------------------------------------------- */

static bool scalar_is(const node *n, const char *word)
{
    return n->kind == N_SCALAR && n->plain && n->len == strlen(word) && memcmp(n->str, word, n->len) == 0;
}

static s2_status get_int(parser *P, const node *n, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    char buf[256];
    if (n->kind != N_SCALAR || !n->plain)
        return perr(P, n, "%s: expected an integer, got %s", key, shown(n, buf, sizeof buf));
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
        return perr(P, n, "%s: expected an integer, got %s", key, shown(n, buf, sizeof buf));
    if (s[first] == '0' && i - first > 1)
        return perr(P, n, "%s: expected a decimal integer without leading zeros, got %s", key, shown(n, buf, sizeof buf));
    if (neg && lo >= 0)
        return perr(P, n, "%s: expected a non-negative integer, got %s", key, shown(n, buf, sizeof buf));
    if (!neg && (big || v > hi))
        return perr(P, n, "%s: expected at most %lld, got %s", key, (long long)hi, shown(n, buf, sizeof buf));
    if (neg)
        v = -v;
    if (big || v < lo)
        return perr(P, n, "%s: expected at least %lld, got %s", key, (long long)lo, shown(n, buf, sizeof buf));
    *out = v;
    return S2_OK;
}

static s2_status get_int32(parser *P, const node *n, const char *key, int lo, int hi, int *out)
{
    int64_t v;
    s2_status st = get_int(P, n, key, lo, hi, &v);
    if (st == S2_OK)
        *out = (int)v;
    return st;
}

static s2_status get_bool(parser *P, const node *n, const char *key, bool *out)
{
    char buf[256];
    if (scalar_is(n, "true"))
        *out = true;
    else if (scalar_is(n, "false"))
        *out = false;
    else
        return perr(P, n, "%s: expected true or false, got %s", key, shown(n, buf, sizeof buf));
    return S2_OK;
}

/* A non-empty string without NUL bytes (quoted or plain). */
static s2_status get_string(parser *P, const node *n, const char *key, const char **out)
{
    char buf[256];
    if (n->kind != N_SCALAR || n->len == 0 || strlen(n->str) != n->len)
        return perr(P, n, "%s: expected a non-empty string, got %s", key, shown(n, buf, sizeof buf));
    *out = n->str;
    return S2_OK;
}

static bool name_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
}

static s2_status get_name(parser *P, const node *n, const char *key, const char **out)
{
    char buf[256];
    bool ok = n->kind == N_SCALAR && n->len > 0 && n->len <= MAX_NAME;
    for (size_t i = 0; ok && i < n->len; i++)
        ok = name_char_ok(n->str[i]);
    if (!ok)
        return perr(P, n, "%s: expected a name of 1..%d letters, digits, '_', '-' or '.', got %s", key, MAX_NAME,
                    shown(n, buf, sizeof buf));
    *out = n->str;
    return S2_OK;
}

/* ---- mappings with a fixed key set ---------------------------------------- */

typedef struct field {
    const char *name;
    const node *key, *val;
} field;
#define F(name) {name, NULL, NULL}

/* Match the pairs of `map` to `fields` (NULL-terminated names), rejecting
 * unknown and duplicate keys.  `what` names the mapping in messages. */
static s2_status read_map(parser *P, const node *map, const char *what, field *fields)
{
    char buf[256];
    if (map->kind != N_MAP)
        return perr(P, map, "%s: expected a mapping, got %s", what, shown(map, buf, sizeof buf));
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
                            shown(k, buf, sizeof buf), expect);
            return perr(P, k, "%s: unknown key '%s' (expected one of: %s)", what, shown(k, buf, sizeof buf), expect);
        }
        if (f->key)
            return perr(P, k, "%s: duplicate key '%s' (first at line %d)", what, f->name, f->key->line);
        f->key = k;
        f->val = map->kids[i + 1];
    }
    return S2_OK;
}

static const node *fval(const field *fields, const char *name)
{
    for (const field *f = fields; f->name; f++)
        if (strcmp(f->name, name) == 0)
            return f->val;
    return NULL;
}

/* "prefix" + "key" for messages. */
static const char *keyname(char *buf, size_t size, const char *prefix, const char *key)
{
    /* by hand: a cut name in a message is fine, a truncation warning is not */
    size_t o = 0;
    for (const char *parts[2] = {prefix, key}, **part = parts; part < parts + 2; part++)
        for (const char *c = *part; *c && o + 1 < size; c++)
            buf[o++] = *c;
    buf[o] = 0;
    return buf;
}

/* ---- pattern pieces -------------------------------------------------------- */

/* local_blocks: N, or [left, right] when bidirectional. */
static s2_status get_local(parser *P, const node *n, const char *key, bool causal, int *left, int *right)
{
    if (n->kind == N_SEQ) {
        char buf[256];
        if (causal)
            return perr(P, n, "%s: a [left, right] list needs causal: false; expected an integer", key);
        if (n->n != 2)
            return perr(P, n, "%s: expected [left, right], got a list of %d", key, n->n);
        s2_status st = get_int32(P, n->kids[0], key, 0, MAX_COUNT, left);
        if (st == S2_OK)
            st = get_int32(P, n->kids[1], key, 0, MAX_COUNT, right);
        (void)buf;
        return st;
    }
    s2_status st = get_int32(P, n, key, 0, MAX_COUNT, left);
    *right = causal ? 0 : *left;
    return st;
}

/* vert_stride: N >= 1, or `none` (0: no vertical stripes). */
static s2_status get_stride(parser *P, const node *n, const char *key, int *out)
{
    if (scalar_is(n, "none")) {
        *out = 0;
        return S2_OK;
    }
    char buf[256];
    if (n->kind != N_SCALAR || !n->plain || n->len == 0 || !((n->str[0] >= '0' && n->str[0] <= '9') || n->str[0] == '-'))
        return perr(P, n, "%s: expected an integer >= 1 or none, got %s", key, shown(n, buf, sizeof buf));
    return get_int32(P, n, key, 1, MAX_COUNT, out);
}

static s2_status parse_local_stride(parser *P, s2_pattern *p, const node *map, const char *pfx)
{
    char what[160], key[192];
    keyname(what, sizeof what, pfx, "local_stride");
    field f[] = {F("local_blocks"), F("vert_stride"), F("head_sliding_step"), F("head_sliding_offset"),
                 F("homo_head"), F("num_dense_heads"), F("vert_position"), F(NULL)};
    s2_status st = read_map(P, map, what, f);
    if (st != S2_OK)
        return st;
    const node *v;
    if (!(v = fval(f, "local_blocks")))
        return perr(P, map, "%s.local_blocks: required key missing", what);
    snprintf(key, sizeof key, "%s.local_blocks", what);
    if ((st = get_local(P, v, key, p->causal, &p->local_left, &p->local_right)) != S2_OK)
        return st;
    if (!(v = fval(f, "vert_stride")))
        return perr(P, map, "%s.vert_stride: required key missing", what);
    snprintf(key, sizeof key, "%s.vert_stride", what);
    if ((st = get_stride(P, v, key, &p->vert_stride)) != S2_OK)
        return st;
    p->head_sliding_step_auto = true;
    if ((v = fval(f, "head_sliding_step")) && !scalar_is(v, "auto")) {
        char buf[256];
        snprintf(key, sizeof key, "%s.head_sliding_step", what);
        if (v->kind != N_SCALAR || !v->plain || v->len == 0 || !((v->str[0] >= '0' && v->str[0] <= '9') || v->str[0] == '-'))
            return perr(P, v, "%s: expected auto or an integer >= 1, got %s", key, shown(v, buf, sizeof buf));
        if ((st = get_int32(P, v, key, 1, MAX_COUNT, &p->head_sliding_step)) != S2_OK)
            return st;
        p->head_sliding_step_auto = false;
    }
    if ((v = fval(f, "head_sliding_offset"))) {
        snprintf(key, sizeof key, "%s.head_sliding_offset", what);
        if ((st = get_int32(P, v, key, 0, MAX_COUNT, &p->head_sliding_offset)) != S2_OK)
            return st;
    }
    if ((v = fval(f, "homo_head"))) {
        snprintf(key, sizeof key, "%s.homo_head", what);
        if ((st = get_bool(P, v, key, &p->homo_head)) != S2_OK)
            return st;
    }
    if ((v = fval(f, "num_dense_heads"))) {
        snprintf(key, sizeof key, "%s.num_dense_heads", what);
        if ((st = get_int32(P, v, key, 0, p->kv_heads, &p->num_dense_heads)) != S2_OK)
            return st;
    }
    p->vert_position = p->causal ? S2_VERT_ABSOLUTE : S2_VERT_RELATIVE;
    if ((v = fval(f, "vert_position"))) {
        char buf[256];
        if (scalar_is(v, "absolute"))
            p->vert_position = S2_VERT_ABSOLUTE;
        else if (scalar_is(v, "relative"))
            p->vert_position = S2_VERT_RELATIVE;
        else
            return perr(P, v, "%s.vert_position: expected absolute or relative, got %s", what,
                        shown(v, buf, sizeof buf));
    }
    return S2_OK;
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
                return perr(P, n, "%s: expected a head number or a range a-b, got %s", key, shown(n, buf, sizeof buf));
            memcpy(sa, a.str, a.len);
            sa[a.len] = 0;
            memcpy(sb, b.str, b.len);
            sb[b.len] = 0;
            a.str = sa;
            b.str = sb;
            int lo, hi;
            s2_status st = get_int32(P, &a, key, 0, heads - 1, &lo);
            if (st == S2_OK)
                st = get_int32(P, &b, key, 0, heads - 1, &hi);
            if (st != S2_OK)
                return st;
            if (lo > hi)
                return perr(P, n, "%s: empty range %s (expected a-b with a <= b)", key, shown(n, buf, sizeof buf));
            memset(sel + lo, 1, (size_t)(hi - lo + 1));
            return S2_OK;
        }
    }
    if (n->kind != N_SCALAR || !n->plain)
        return perr(P, n, "%s: expected a head number or a range a-b, got %s", key, shown(n, buf, sizeof buf));
    int h;
    s2_status st = get_int32(P, n, key, 0, heads - 1, &h);
    if (st == S2_OK)
        sel[h] = 1;
    return st;
}

/* heads: N | "a-b" | [N, "a-b", ...] -> sel[heads] (allocated in arena). */
static s2_status get_heads(parser *P, const node *n, const char *key, int heads, s2_arena *arena, uint8_t **out)
{
    uint8_t *sel = s2_arena_alloc(arena, (size_t)heads);
    if (!sel)
        return nomem(P);
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

static char *dir_of(s2_arena *a, const char *path)
{
    const char *slash = path ? strrchr(path, '/') : NULL;
    if (!slash)
        return s2_arena_strdup(a, "");
    return s2_arena_strndup(a, path, (size_t)(slash - path + 1));
}

/* Load mask `mask_node` (+ optional case) into p->masks; *index is its slot. */
static s2_status load_mask(parser *P, s2_pattern *p, const node *mask_node, const node *case_node,
                           const char *pfx, int *index)
{
    char key[192];
    const char *path, *case_name = NULL;
    s2_status st = get_string(P, mask_node, keyname(key, sizeof key, pfx, "mask"), &path);
    if (st == S2_OK && case_node)
        st = get_string(P, case_node, keyname(key, sizeof key, pfx, "mask_case"), &case_name);
    if (st != S2_OK)
        return st;
    if (p->num_masks >= MAX_MASKS)
        return perr(P, mask_node, "%smask: more than %d masks in one pattern", pfx, MAX_MASKS);
    char *full;
    if (path[0] == '/') {
        full = s2_arena_strdup(&P->tmp, path);
    } else {
        char *dir = dir_of(&P->tmp, P->path);
        size_t dl = dir ? strlen(dir) : 0, pl = strlen(path);
        full = dir ? s2_arena_alloc(&P->tmp, dl + pl + 1) : NULL;
        if (full) {
            memcpy(full, dir, dl);
            memcpy(full + dl, path, pl + 1);
        }
    }
    if (!full)
        return nomem(P);

    s2_block_mask m;
    char *text = NULL;
    size_t len = 0;
    char where[64];
    snprintf(where, sizeof where, "%d:%d", mask_node->line, mask_node->col);
    st = s2_pattern_read_file(P->ctx, full, &text, &len);
    if (st == S2_ERR_IO) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s", s2_ctx_message(P->ctx));
        return s2_fail(P->ctx, S2_ERR_IO, "%s:%s: %smask: %s", P->file, where, pfx, msg);
    }
    if (st != S2_OK)
        return st;
    st = s2_block_mask_parse(P->ctx, full, text, len, case_name, &m);
    free(text);
    if (st == S2_ERR_NOT_FOUND) {
        char esc[128];
        s2_pattern_escape(esc, sizeof esc, case_name, strlen(case_name), S2_ESCAPE_SHORT);
        return perr(P, case_node, "%smask_case: no case named '%s' in %s", pfx, esc, path);
    }
    if (st != S2_OK) {
        /* the mask file's own file:line:col, plus where it was referenced */
        char msg[1200];
        snprintf(msg, sizeof msg, "%s", s2_ctx_message(P->ctx));
        return s2_fail(P->ctx, st, "%s (mask of %s:%s)", msg, P->file, where);
    }
    if (m.heads != 1 && m.heads != p->heads) {
        int h = m.heads;
        s2_block_mask_free(&m);
        return perr(P, mask_node, "%smask: the mask has %d heads, expected 1 or %d (heads)", pfx, h, p->heads);
    }
    /* copy into the set arena so the pattern owns it */
    s2_block_mask *masks = s2_arena_array(&P->set->arena, (size_t)p->num_masks + 1, sizeof *masks);
    size_t nbits = (size_t)(m.heads * m.rows * m.cols);
    uint8_t *bits = s2_arena_alloc(&P->set->arena, nbits);
    char *name = s2_arena_strdup(&P->set->arena, m.name);
    if (!masks || !bits || !name) {
        s2_block_mask_free(&m);
        return nomem(P);
    }
    if (p->num_masks)
        memcpy(masks, p->masks, (size_t)p->num_masks * sizeof *masks);
    memcpy(bits, m.bits, nbits);
    masks[p->num_masks] = (s2_block_mask){.name = name, .heads = m.heads, .rows = m.rows, .cols = m.cols, .bits = bits};
    s2_block_mask_free(&m);
    p->masks = masks;
    *index = p->num_masks++;
    return S2_OK;
}

static void set_mask_rule(s2_pattern *p, int q, int mask)
{
    p->rules[q].dense = false;
    p->rules[q].mask = mask;
    p->rules[q].mask_head = p->masks[mask].heads == 1 ? 0 : q;
}

typedef struct head_state {
    uint8_t *has_local, *has_stride; /* per query head: a local-stride value was given */
} head_state;

static s2_status parse_override(parser *P, s2_pattern *p, const node *map, const char *pfx, head_state *hs)
{
    char key[192];
    field f[] = {F("heads"), F("local_blocks"), F("vert_stride"), F("head_sliding_offset"), F("dense"),
                 F("mask"), F("mask_case"), F(NULL)};
    char what[160];
    snprintf(what, sizeof what, "%.*s", (int)strlen(pfx) - 1, pfx); /* without the '.' */
    s2_status st = read_map(P, map, what, f);
    if (st != S2_OK)
        return st;
    const node *hv = fval(f, "heads"), *lv = fval(f, "local_blocks"), *sv = fval(f, "vert_stride"),
               *ov = fval(f, "head_sliding_offset"), *dv = fval(f, "dense"), *mv = fval(f, "mask"),
               *cv = fval(f, "mask_case");
    if (!hv)
        return perr(P, map, "%sheads: required key missing", pfx);
    if (!lv && !sv && !ov && !dv && !mv)
        return perr(P, map, "%s: expected at least one of local_blocks, vert_stride, head_sliding_offset, dense, mask",
                    what);
    if (cv && !mv)
        return perr(P, cv, "%smask_case: needs mask", pfx);
    uint8_t *sel;
    if ((st = get_heads(P, hv, keyname(key, sizeof key, pfx, "heads"), p->heads, &P->tmp, &sel)) != S2_OK)
        return st;
    int left = 0, right = 0, stride = 0, offset = 0, mask = -1;
    bool dense = false;
    if (lv && (st = get_local(P, lv, keyname(key, sizeof key, pfx, "local_blocks"), p->causal, &left, &right)) != S2_OK)
        return st;
    if (sv && (st = get_stride(P, sv, keyname(key, sizeof key, pfx, "vert_stride"), &stride)) != S2_OK)
        return st;
    if (ov && (st = get_int32(P, ov, keyname(key, sizeof key, pfx, "head_sliding_offset"), 0, MAX_COUNT, &offset)) != S2_OK)
        return st;
    if (dv && (st = get_bool(P, dv, keyname(key, sizeof key, pfx, "dense"), &dense)) != S2_OK)
        return st;
    if (dv && mv)
        return perr(P, mv, "%smask: cannot be combined with dense in one override", pfx);
    if (mv && (st = load_mask(P, p, mv, cv, pfx, &mask)) != S2_OK)
        return st;

    int group = p->heads / p->kv_heads;
    for (int q = 0; q < p->heads; q++) {
        if (!sel[q])
            continue;
        s2_head_rule *r = &p->rules[q];
        if (lv || sv || ov)
            r->mask = -1, r->mask_head = 0; /* back to a local-stride rule */
        if (lv)
            r->local_left = left, r->local_right = right, hs->has_local[q] = 1;
        if (sv)
            r->vert_stride = stride, hs->has_stride[q] = 1;
        if (ov)
            r->shift = (int64_t)(p->homo_head ? 0 : q / group) * p->head_sliding_step + offset;
        if (dv)
            r->dense = dense;
        if (dv && dense)
            r->mask = -1, r->mask_head = 0;
        if (mv)
            set_mask_rule(p, q, mask);
        if (!r->dense && r->mask < 0 && (!hs->has_local[q] || !hs->has_stride[q]))
            return perr(P, map, "%s: head %d is left without a rule (the pattern has no local_stride: give "
                        "local_blocks and vert_stride)", what, q);
    }
    return S2_OK;
}

/* keys: [lo, hi] / distance: [lo, hi], token bounds, hi may be `end`. */
static s2_status get_span(parser *P, const node *n, const char *key, int bs, int64_t *lo, int64_t *hi)
{
    char buf[256];
    if (n->kind != N_SEQ || n->n != 2)
        return perr(P, n, "%s: expected [lo, hi] in tokens, got %s", key, shown(n, buf, sizeof buf));
    s2_status st = get_int(P, n->kids[0], key, 0, S2_MAX_SEQ_LEN, lo);
    if (st != S2_OK)
        return st;
    if (*lo % bs)
        return perr(P, n->kids[0], "%s: %lld is not a multiple of block_size %d", key, (long long)*lo, bs);
    if (scalar_is(n->kids[1], "end")) {
        *hi = INT64_MAX;
    } else {
        if ((st = get_int(P, n->kids[1], key, 0, S2_MAX_SEQ_LEN, hi)) != S2_OK)
            return st;
        if (*hi % bs)
            return perr(P, n->kids[1], "%s: %lld is not a multiple of block_size %d", key, (long long)*hi, bs);
    }
    if (*hi <= *lo)
        return perr(P, n, "%s: empty span [%lld, %lld) (expected lo < hi)", key, (long long)*lo, (long long)*hi);
    return S2_OK;
}

static s2_status parse_range(parser *P, s2_pattern *p, const node *map, const char *pfx, s2_range_rule *rr)
{
    char key[192], what[160], buf[256];
    snprintf(what, sizeof what, "%.*s", (int)strlen(pfx) - 1, pfx);
    field f[] = {F("heads"), F("keys"), F("distance"), F("sink"), F("keep"), F("vert_stride"), F(NULL)};
    s2_status st = read_map(P, map, what, f);
    if (st != S2_OK)
        return st;
    const node *hv = fval(f, "heads"), *kv = fval(f, "keys"), *dv = fval(f, "distance"), *sink = fval(f, "sink"),
               *keep = fval(f, "keep"), *sv = fval(f, "vert_stride");
    rr->line = map->line;
    rr->col = map->col;
    rr->key_lo = rr->dist_lo = 0;
    rr->key_hi = rr->dist_hi = INT64_MAX;
    int actions = !!sink + !!keep + !!sv;
    if (actions != 1)
        return perr(P, map, "%s: expected exactly one of sink, keep, vert_stride, got %d", what, actions);
    if (hv) {
        if ((st = get_heads(P, hv, keyname(key, sizeof key, pfx, "heads"), p->heads, &P->set->arena, &rr->heads)) != S2_OK)
            return st;
    } else {
        rr->heads = s2_arena_alloc(&P->set->arena, (size_t)p->heads);
        if (!rr->heads)
            return nomem(P);
        memset(rr->heads, 1, (size_t)p->heads);
    }
    if (sink) {
        if (kv || dv)
            return perr(P, kv ? kv : dv, "%s%s: sink is a shorthand for keys [0, N); give no keys or distance",
                        pfx, kv ? "keys" : "distance");
        int64_t n;
        if ((st = get_int(P, sink, keyname(key, sizeof key, pfx, "sink"), 1, S2_MAX_SEQ_LEN, &n)) != S2_OK)
            return st;
        if (n % p->block_size)
            return perr(P, sink, "%s: %lld is not a multiple of block_size %d", key, (long long)n, p->block_size);
        rr->action = S2_RANGE_SINK;
        rr->key_hi = n;
        return S2_OK;
    }
    if (kv && (st = get_span(P, kv, keyname(key, sizeof key, pfx, "keys"), p->block_size, &rr->key_lo, &rr->key_hi)) != S2_OK)
        return st;
    if (dv && (st = get_span(P, dv, keyname(key, sizeof key, pfx, "distance"), p->block_size, &rr->dist_lo, &rr->dist_hi)) != S2_OK)
        return st;
    if (keep) {
        if (scalar_is(keep, "all"))
            rr->action = S2_RANGE_DENSE;
        else if (scalar_is(keep, "none"))
            rr->action = S2_RANGE_DROP;
        else
            return perr(P, keep, "%skeep: expected all or none, got %s", pfx, shown(keep, buf, sizeof buf));
        return S2_OK;
    }
    rr->action = S2_RANGE_STRIDE;
    return get_int32(P, sv, keyname(key, sizeof key, pfx, "vert_stride"), 1, MAX_COUNT, &rr->stride);
}

static s2_status parse_list(parser *P, const node *n, const char *key)
{
    char buf[256];
    if (n->kind != N_SEQ)
        return perr(P, n, "%s: expected a list, got %s", key, shown(n, buf, sizeof buf));
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
        if (!name_char_ok(*c))
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
    s2_status st = read_map(P, map, what, f);
    if (st != S2_OK)
        return st;
    if (P->set->count >= MAX_PATTERNS)
        return perr(P, map, "%s: more than %d patterns in one file", what, MAX_PATTERNS);
    s2_pattern *p = s2_pattern_set_add(P->set);
    if (!p)
        return nomem(P);
    p->file = s2_arena_strdup(&P->set->arena, P->path ? P->path : "<memory>");
    p->line = map->line;
    if (!p->file)
        return nomem(P);

    const node *v;
    const char *name = NULL;
    if ((v = fval(f, "name"))) {
        if ((st = get_name(P, v, keyname(key, sizeof key, pfx, "name"), &name)) != S2_OK)
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
        return nomem(P);
    p->name = (char *)name;

    if (!(v = fval(f, "heads")))
        return perr(P, map, "%sheads: required key missing", pfx);
    if ((st = get_int32(P, v, keyname(key, sizeof key, pfx, "heads"), 1, S2_MAX_HEADS, &p->heads)) != S2_OK)
        return st;
    p->kv_heads = p->heads;
    if ((v = fval(f, "kv_heads"))) {
        if ((st = get_int32(P, v, keyname(key, sizeof key, pfx, "kv_heads"), 1, p->heads, &p->kv_heads)) != S2_OK)
            return st;
        if (p->heads % p->kv_heads)
            return perr(P, v, "%s: heads (%d) must be a multiple of kv_heads (%d)", key, p->heads, p->kv_heads);
    }
    if (!(v = fval(f, "block_size")))
        return perr(P, map, "%sblock_size: required key missing", pfx);
    int64_t bs;
    keyname(key, sizeof key, pfx, "block_size");
    if (v->kind != N_SCALAR || !v->plain || get_int(P, v, key, INT64_MIN, INT64_MAX, &bs) != S2_OK ||
        (bs != 16 && bs != 32 && bs != 64 && bs != 128))
        return perr(P, v, "%s: expected 16, 32, 64 or 128, got %s", key, shown(v, buf, sizeof buf));
    p->block_size = (int)bs;
    p->causal = true;
    if ((v = fval(f, "causal")) && (st = get_bool(P, v, keyname(key, sizeof key, pfx, "causal"), &p->causal)) != S2_OK)
        return st;
    if ((v = fval(f, "max_seq_len")) &&
        (st = get_int(P, v, keyname(key, sizeof key, pfx, "max_seq_len"), 1, S2_MAX_SEQ_LEN, &p->max_seq_len)) != S2_OK)
        return st;

    bool dense = false;
    if ((v = fval(f, "dense")) && (st = get_bool(P, v, keyname(key, sizeof key, pfx, "dense"), &dense)) != S2_OK)
        return st;
    const node *ls = fval(f, "local_stride"), *mv = fval(f, "mask"), *cv = fval(f, "mask_case");
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
        if ((st = parse_local_stride(P, p, ls, lpfx)) != S2_OK)
            return st;
    }
    if (dense)
        p->num_dense_heads = p->kv_heads;
    if ((st = s2_pattern_resolve_base(P->ctx, p, &P->set->arena)) != S2_OK)
        return st == S2_ERR_NOMEM ? st : perr(P, map, "%s: %s", what, s2_ctx_message(P->ctx));

    head_state hs = {s2_arena_alloc(&P->tmp, (size_t)p->heads), s2_arena_alloc(&P->tmp, (size_t)p->heads)};
    if (!hs.has_local || !hs.has_stride)
        return nomem(P);
    memset(hs.has_local, ls ? 1 : 0, (size_t)p->heads);
    memset(hs.has_stride, ls ? 1 : 0, (size_t)p->heads);
    if (mv) {
        int mask;
        if ((st = load_mask(P, p, mv, cv, pfx, &mask)) != S2_OK)
            return st;
        for (int q = 0; q < p->heads; q++)
            set_mask_rule(p, q, mask);
    }

    if ((v = fval(f, "overrides"))) {
        if ((st = parse_list(P, v, keyname(key, sizeof key, pfx, "overrides"))) != S2_OK)
            return st;
        for (int i = 0; i < v->n; i++) {
            if (++P->overrides > MAX_OVERRIDES)
                return perr(P, v->kids[i], "%s: more than %d overrides in one file", key, MAX_OVERRIDES);
            char opfx[192];
            snprintf(opfx, sizeof opfx, "%soverrides[%d].", pfx, i);
            if ((st = parse_override(P, p, v->kids[i], opfx, &hs)) != S2_OK)
                return st;
        }
    }
    if ((v = fval(f, "ranges"))) {
        if ((st = parse_list(P, v, keyname(key, sizeof key, pfx, "ranges"))) != S2_OK)
            return st;
        if (v->n > 0) {
            p->ranges = s2_arena_array(&P->set->arena, (size_t)v->n, sizeof *p->ranges);
            if (!p->ranges)
                return nomem(P);
        }
        for (int i = 0; i < v->n; i++) {
            if (++P->ranges > MAX_RANGES)
                return perr(P, v->kids[i], "%s: more than %d ranges in one file", key, MAX_RANGES);
            char rpfx[192];
            snprintf(rpfx, sizeof rpfx, "%sranges[%d].", pfx, i);
            if ((st = parse_range(P, p, v->kids[i], rpfx, &p->ranges[i])) != S2_OK)
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
                    shown(root, buf, sizeof buf));
    const node *list = NULL;
    for (int i = 0; i + 1 < root->n; i += 2)
        if (scalar_is(root->kids[i], "patterns"))
            list = root->kids[i + 1];
    if (!list)
        return parse_pattern(P, root, "", false);
    if (root->n != 2) {
        const node *other = scalar_is(root->kids[0], "patterns") ? root->kids[2] : root->kids[0];
        return perr(P, other, "%s: unexpected key next to patterns (a file is one pattern or a patterns: list)",
                    shown(other, buf, sizeof buf));
    }
    if (list->kind != N_SEQ || list->n == 0)
        return perr(P, list, "patterns: expected a non-empty list of patterns, got %s", shown(list, buf, sizeof buf));
    for (int i = 0; i < list->n; i++) {
        char pfx[64];
        snprintf(pfx, sizeof pfx, "patterns[%d].", i);
        s2_status st = parse_pattern(P, list->kids[i], pfx, true);
        if (st != S2_OK)
            return st;
    }
    return S2_OK;
}

s2_status s2_pattern_parse(s2_ctx *ctx, const char *filename, const char *text, size_t len, s2_pattern_set **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_pattern_parse: null output");
    *out = NULL;
    if (!text && len)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_pattern_parse: null text");
    parser P = {.ctx = ctx, .path = filename, .text = text ? text : "", .len = len};
    const char *fname = filename ? filename : "<memory>";
    s2_pattern_escape(P.file, sizeof P.file, fname, strlen(fname), SIZE_MAX);
    s2_arena_init(&P.tmp);
    P.set = s2_pattern_set_new();
    if (!P.set) {
        s2_arena_release(&P.tmp);
        return nomem(&P);
    }
    node *root;
    s2_status st = load_tree(&P, &root);
    if (st == S2_OK)
        st = parse_root(&P, root);
    s2_arena_release(&P.tmp);
    if (st != S2_OK) {
        s2_pattern_set_free(P.set);
        return st;
    }
    *out = P.set;
    return S2_OK;
}

s2_status s2_pattern_load(s2_ctx *ctx, const char *path, s2_pattern_set **out)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_pattern_load: null argument");
    char *text;
    size_t len;
    s2_status st = s2_pattern_read_file(ctx, path, &text, &len);
    if (st != S2_OK)
        return st;
    st = s2_pattern_parse(ctx, path, text, len, out);
    free(text);
    return st;
}
