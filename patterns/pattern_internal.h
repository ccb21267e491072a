/* Internal to patterns/: the pattern set and the resolution of a declared
 * local-stride rule into per-head rules. */
#ifndef S2C_PATTERN_INTERNAL_H
#define S2C_PATTERN_INTERNAL_H

#include "s2c/pattern.h"
#include "util.h"

struct s2_pattern_set {
    s2_arena arena;     /* owns the set (s2_arena_boxed), every pattern, rule, range and mask */
    s2_pattern *items;
    int count, cap;
};

s2_pattern_set *s2_pattern_set_new(void);
/* Append a zeroed pattern; NULL on OOM. */
s2_pattern *s2_pattern_set_add(s2_pattern_set *set);

/* Resolve the base local_stride fields of p (heads, kv_heads, local_*,
 * vert_stride, head_sliding_*, homo_head, num_dense_heads, vert_position)
 * into p->rules.  Fields must already be validated.  Allocates in arena. */
s2_status s2_pattern_resolve_base(s2_ctx *ctx, s2_pattern *p, s2_arena *arena);

/* Shift of query head q under the base rule (h * step + offset). */
int64_t s2_pattern_base_shift(const s2_pattern *p, int q);

/* Largest pattern or mask file accepted (bytes). */
#define S2_PATTERN_MAX_FILE (64u << 20)

/* Read a regular file of at most S2_PATTERN_MAX_FILE bytes (malloc'd,
 * NUL-terminated).  Fails with S2_ERR_IO and "path: reason". */
s2_status s2_pattern_read_file(s2_ctx *ctx, const char *path, char **data, size_t *len);
/* A loader: path's text (s2_pattern_read_file) parsed by parse, which names
 * path in its messages; a null path or output is refused in fn's name. */
typedef s2_status (*s2_pattern_text_parser)(s2_ctx *ctx, const char *path, const char *text, size_t len,
                                            const void *arg, void *out);
s2_status s2_pattern_load_file(s2_ctx *ctx, const char *fn, const char *path, s2_pattern_text_parser parse,
                               const void *arg, void *out);
/* The same without a message: on failure `why` gets the reason alone.  A
 * regular file larger than `max` is not read: S2_ERR_IO, *len = its size. */
s2_status s2_pattern_read_file_max(const char *path, size_t max, char **data, size_t *len, char *why, size_t why_size);

/* Where a mask file is malformed, without the file's name (the pattern
 * parser puts the pattern file's location first). */
typedef struct s2_mask_error {
    int line, col;
    char msg[512];
} s2_mask_error;
/* s2_block_mask_parse's reader: S2_ERR_PARSE fills *err; S2_ERR_NOT_FOUND
 * (no case named case_name) and S2_ERR_NOMEM set no message in any ctx. */
s2_status s2_mask_parse_text(const char *text, size_t len, const char *case_name, s2_block_mask *out,
                             s2_mask_error *err);

/* Copy `text` into `out` (size > 0) for a one-line message: control bytes
 * and non-ASCII become \xNN; after `max_in` input bytes it is cut with "...". */
void s2_pattern_escape(char *out, size_t size, const char *text, size_t len, size_t max_in);
#define S2_ESCAPE_SHORT 48

#endif
