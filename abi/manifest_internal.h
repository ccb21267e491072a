/* Internal to the manifest parser (manifest_parse.c: lines, kernel entries,
 * the checks of the whole; manifest_pattern.c: pattern blocks) and its
 * tests: the parser's state, and the table of every record a manifest may
 * hold with the bounds of each integer in it (manifest_parse.c). */
#ifndef S2C_MANIFEST_INTERNAL_H
#define S2C_MANIFEST_INTERNAL_H

#include "s2c/manifest.h"
#include "util.h"

#include <stdbool.h>
#include <stdint.h>

struct s2_manifest {
    s2_arena arena;
    char *generator;
    int arch;
    s2_manifest_kernel *kernels;
    int num_kernels, cap_kernels;
    s2_pattern **patterns;
    int *rules_seen;           /* per pattern: rule lines read */
    int num_patterns, cap_patterns;
    bool requires_seen;
};

/* Names with the line that gave each, for the check that none repeats. */
typedef struct s2_mf_named {
    const char *name;
    const char *owner;         /* a symbol's entry; NULL for entries and patterns */
    int line;
} s2_mf_named;

typedef struct s2_mf_names {
    s2_mf_named *v;
    int n, cap;
} s2_mf_names;

typedef struct s2_mf_parser {
    s2_ctx *ctx;
    s2_manifest *m;
    int line;
    s2_manifest_kernel *k;     /* current kernel entry, or NULL */
    s2_pattern *p;             /* current pattern, or NULL */
    uint8_t *head_seen;        /* current pattern: which heads have their rule line */
    int cap_ranges;            /* current pattern: room in p->ranges */
    s2_mf_names entries, pattern_names, symbols;
} s2_mf_parser;

/* ---- the records ---------------------------------------------------------- */

typedef enum s2_mf_kind {
    S2_MF_INT,                 /* a decimal integer in [lo, hi] */
    S2_MF_WORD,                /* a word of the record's vocabulary (a role, an action, MAJOR.MINOR) */
    S2_MF_HEX,                 /* hex digits, 4 elements each (mask bits, range heads); the last word */
    S2_MF_TEXT,                /* the rest of the line (a name, the generator); the only word */
} s2_mf_kind;

typedef struct s2_mf_word {
    s2_mf_kind kind;
    const char *name;          /* in messages: "SHIFT" */
    int64_t lo, hi;            /* S2_MF_INT */
    bool end_ok;               /* S2_MF_INT: INT64_MAX is allowed too, meaning "to the end" */
} s2_mf_word;

enum { S2_MF_MAX_WORDS = 15 };

/* A record's words as read: the integers in i[], the others in s[]. */
typedef struct s2_mf_value {
    int64_t i[S2_MF_MAX_WORDS];
    const char *s[S2_MF_MAX_WORDS];
} s2_mf_value;

typedef enum s2_mf_scope {
    S2_MF_TOP,                 /* anywhere after the version line */
    S2_MF_KERNEL,              /* in a kernel entry */
    S2_MF_PATTERN,             /* in a pattern block */
} s2_mf_scope;

typedef struct s2_mf_record {
    const char *key;           /* as written: "pattern.rule" */
    s2_mf_scope scope;
    int num_words;
    s2_mf_word words[S2_MF_MAX_WORDS];
    s2_status (*read)(s2_mf_parser *ps, const struct s2_mf_record *rec, const s2_mf_value *v);
} s2_mf_record;

/* Every record of the format (include/s2c/manifest.h) but the version
 * line; the parser reads none other and checks every integer against its
 * word's bounds before the record's reader sees it. */
extern const s2_mf_record s2_mf_records[];
extern const int s2_mf_num_records;
const s2_mf_record *s2_mf_find(const char *key);

/* ---- shared by the two files ------------------------------------------- */

/* Manifest text as a message shows it: printable ASCII, other bytes as
 * \xNN, cut after 64 bytes; buf holds S2_MF_SHOWN bytes. */
enum { S2_MF_SHOWN = 300 };
const char *s2_mf_show(char *buf, const char *text);
/* S2_ERR_PARSE, "manifest:LINE: " and the message (manifest text in it
 * must come through s2_mf_show). */
s2_status s2_mf_fail(s2_mf_parser *ps, const char *fmt, ...) S2_PRINTF(2, 3);
s2_status s2_mf_nomem(s2_mf_parser *ps);
/* Kernel and pattern names are 1 to 255 printable ASCII bytes; else "WHAT
 * name (...): NAME". */
s2_status s2_mf_check_name(s2_mf_parser *ps, const char *what, const char *name);
/* Adds name (given at ps->line) to the list; false when out of memory. */
bool s2_mf_names_add(s2_mf_parser *ps, s2_mf_names *list, const char *name, const char *owner);
/* The names of list sorted; the repeat that comes first in the text, or NULL (first: the earlier one). */
const s2_mf_named *s2_mf_first_repeat(s2_mf_names *list, const s2_mf_named **first);

/* Pattern blocks (manifest_pattern.c): `pattern NAME`, the pattern.* records, the check of a finished block. */
s2_status s2_mf_new_pattern(s2_mf_parser *ps, const s2_mf_record *rec, const s2_mf_value *v);
s2_status s2_mf_pattern_record(s2_mf_parser *ps, const s2_mf_record *rec, const s2_mf_value *v);
s2_status s2_mf_pattern_complete(s2_ctx *ctx, const s2_pattern *p, int rules_seen);

#endif
