/* The pattern-file parser, first stage: libyaml events -> a small node tree
 * (rejecting anchors, aliases, tags and deep nesting), and the error helpers. */
#include "parse_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

s2_status s2_pp_error_at(parser *P, int line, int col, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return s2_fail(P->ctx, S2_ERR_PARSE, "%s:%d:%d: %s", P->file, line, col, msg);
}

s2_status s2_pp_nomem(parser *P) { return s2_fail(P->ctx, S2_ERR_NOMEM, "%s: out of memory", P->file); }

/* What a node is, for "got ..." in messages. */
const char *s2_pp_shown(const node *n, char *buf, size_t size)
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
        return s2_pp_nomem(P);
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
            return s2_pp_error_at(P, line, col, "invalid input: %s (byte 0x%02x)", problem, yp->problem_value & 0xff);
        return s2_pp_error_at(P, line, col, "invalid input: %s", problem);
    }
    int line = (int)yp->problem_mark.line + 1, col = (int)yp->problem_mark.column + 1;
    if (yp->context)
        return s2_pp_error_at(P, line, col, "YAML syntax error: %s (%s at line %d)", problem, yp->context,
                       (int)yp->context_mark.line + 1);
    return s2_pp_error_at(P, line, col, "YAML syntax error: %s", problem);
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
            st = s2_pp_nomem(P);
            break;
        }
    }
    if (st == S2_OK && v.n > 0) {
        n->kids = s2_arena_array(&P->tmp, (size_t)v.n, sizeof *n->kids);
        if (!n->kids)
            st = s2_pp_nomem(P);
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
    *out = NULL;
    /* bound what the tree may hold before any of it is built */
    int line = (int)ev->start_mark.line + 1, col = (int)ev->start_mark.column + 1;
    if (++P->nodes > S2_PATTERN_MAX_NODES)
        st = s2_pp_error_at(P, line, col, "more than %d YAML nodes in one file", S2_PATTERN_MAX_NODES);
    else if (ev->type == YAML_SCALAR_EVENT &&
             (P->scalar_bytes += (int64_t)ev->data.scalar.length) > S2_PATTERN_MAX_SCALAR_BYTES)
        st = s2_pp_error_at(P, line, col, "more than %d bytes of scalar text in one file", S2_PATTERN_MAX_SCALAR_BYTES);
    if (st != S2_OK) {
        yaml_event_delete(ev);
        return st;
    }
    node *n = s2_arena_alloc(&P->tmp, sizeof *n);
    if (!n) {
        yaml_event_delete(ev);
        return s2_pp_nomem(P);
    }
    n->line = line;
    n->col = col;
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
            st = s2_pp_nomem(P);
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

s2_status s2_pp_load_tree(parser *P, node **root)
{
    yaml_parser_t yp;
    yaml_event_t ev;
    *root = NULL;
    if (!yaml_parser_initialize(&yp))
        return s2_pp_nomem(P);
    yaml_parser_set_input_string(&yp, (const unsigned char *)P->text, P->len);
    s2_status st = next_event(P, &yp, &ev); /* stream start */
    if (st != S2_OK)
        goto done;
    yaml_event_delete(&ev);
    if ((st = next_event(P, &yp, &ev)) != S2_OK)
        goto done;
    if (ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        st = s2_pp_error_at(P, 1, 1, "empty pattern file (expected a mapping with heads, block_size, ...)");
        goto done;
    }
    if (ev.data.document_start.tag_directives.start != ev.data.document_start.tag_directives.end) {
        st = s2_pp_error_at(P, (int)ev.start_mark.line + 1, (int)ev.start_mark.column + 1, "tags are not supported (%%TAG)");
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
        st = s2_pp_error_at(P, (int)ev.start_mark.line + 1, (int)ev.start_mark.column + 1,
                     "only one YAML document is allowed per file");
    yaml_event_delete(&ev);
done:
    yaml_parser_delete(&yp);
    return st;
}
