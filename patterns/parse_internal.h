/* Internal to the pattern-file parser (parse*.c): the node tree built from
 * libyaml events, the parser state, the per-file limits and the readers the
 * sections share (the bounds of the values are in s2c/pattern.h, which the
 * manifest parser shares).  Every error is one line "file:line:col: key: message".
 * Shared functions are s2_pp_ ("pattern parser"): the library links into
 * other programs, so no bare get_int and the like. */
#ifndef S2C_PARSE_INTERNAL_H
#define S2C_PARSE_INTERNAL_H

#include "pattern_internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_DEPTH 16             /* deepest legal file needs 6 */
#define MAX_PATTERNS 256         /* per file */
#define MAX_OVERRIDES 4096       /* per file */
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
    int64_t nodes, scalar_bytes;   /* read so far, against S2_PATTERN_MAX_NODES / _SCALAR_BYTES */
    int64_t mask_bytes;            /* mask file bytes read so far, against S2_PATTERN_MAX_MASK_BYTES */
    const char *const *allow_mask_dirs; /* NULL-terminated, may be NULL */
} parser;

/* ---- errors and the node tree (parse_tree.c) ---- */
s2_status s2_pp_error_at(parser *P, int line, int col, const char *fmt, ...) S2_PRINTF(4, 5);
#define perr(P, n, ...) s2_pp_error_at((P), (n)->line, (n)->col, __VA_ARGS__)
s2_status s2_pp_nomem(parser *P);
/* What a node is, for "got ..." in messages. */
const char *s2_pp_shown(const node *n, char *buf, size_t size);
/* The single YAML document of P->text as a node tree in P->tmp. */
s2_status s2_pp_load_tree(parser *P, node **root);

/* ---- scalars, mappings and shared values (parse_value.c) ---- */
bool s2_pp_scalar_is(const node *n, const char *word);
s2_status s2_pp_get_int(parser *P, const node *n, const char *key, int64_t lo, int64_t hi, int64_t *out);
s2_status s2_pp_get_int32(parser *P, const node *n, const char *key, int lo, int hi, int *out);
s2_status s2_pp_get_bool(parser *P, const node *n, const char *key, bool *out);
/* A non-empty string without NUL bytes (quoted or plain). */
s2_status s2_pp_get_string(parser *P, const node *n, const char *key, const char **out);
bool s2_pp_name_char_ok(char c);
s2_status s2_pp_get_name(parser *P, const node *n, const char *key, const char **out);

typedef struct field {
    const char *name;
    const node *key, *val;
} field;
#define F(name) {name, NULL, NULL}

/* Match the pairs of `map` to `fields` (NULL-terminated names), rejecting
 * unknown and duplicate keys.  `what` names the mapping in messages. */
s2_status s2_pp_read_map(parser *P, const node *map, const char *what, field *fields);
const node *s2_pp_fval(const field *fields, const char *name);
/* "prefix" + "key" for messages. */
const char *s2_pp_keyname(char *buf, size_t size, const char *prefix, const char *key);

/* local_blocks: N, or [left, right] when bidirectional. */
s2_status s2_pp_get_local(parser *P, const node *n, const char *key, bool causal, int *left, int *right);
/* vert_stride: N >= 1, or `none` (0: no vertical stripes). */
s2_status s2_pp_get_stride(parser *P, const node *n, const char *key, int *out);
/* heads: N | "a-b" | [N, "a-b", ...] -> sel[heads] (allocated in arena). */
s2_status s2_pp_get_heads(parser *P, const node *n, const char *key, int heads, s2_arena *arena, uint8_t **out);
/* keys: [lo, hi] / distance: [lo, hi], token bounds, hi may be `end`. */
s2_status s2_pp_get_span(parser *P, const node *n, const char *key, int bs, int64_t *lo, int64_t *hi);

/* ---- the rule sections of a pattern (parse_rules.c) ---- */
typedef struct head_state {
    uint8_t *has_local, *has_stride; /* per query head: a local-stride value was given */
} head_state;

s2_status s2_pp_parse_local_stride(parser *P, s2_pattern *p, const node *map, const char *pfx);
/* Load mask `mask_node` (+ optional case) into p->masks; *index is its slot. */
s2_status s2_pp_load_mask(parser *P, s2_pattern *p, const node *mask_node, const node *case_node,
                          const char *pfx, int *index);
void s2_pp_set_mask_rule(s2_pattern *p, int q, int mask);
s2_status s2_pp_parse_override(parser *P, s2_pattern *p, const node *map, const char *pfx, head_state *hs);
s2_status s2_pp_parse_range(parser *P, s2_pattern *p, const node *map, const char *pfx, s2_range_rule *rr);

#endif
