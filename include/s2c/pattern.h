/* s2c — sparsity patterns.
 *
 * A pattern file (YAML) declares, per attention head, which KV blocks each
 * query block attends to.  Parsing resolves the declaration into one
 * s2_head_rule per *query* head plus a list of context-range rules, so later
 * stages never re-interpret the file.  See README.md for the file format.
 *
 * Semantics (query block m, key block n, kv-head h of the query head):
 *   causal, absolute vertical positions:
 *     kept iff n <= m and (dense(h) or m - n < local_left
 *                          or (n + shift(h)) mod vert_stride == 0)
 *   bidirectional, relative vertical positions, local (L, R):
 *     left = max(0, m - n - L + 1), right = max(0, n - m - R + 1);
 *     kept iff dense(h) or (left + right) mod vert_stride == 0
 *   with shift(h) = h * head_sliding_step + head_sliding_offset
 *   (h = 0 for every head when homo_head).  Context-range rules and
 *   explicit masks refine this; see s2_range_rule and s2_block_mask.
 */
#ifndef S2C_PATTERN_H
#define S2C_PATTERN_H

#include "s2c/common.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define S2_MAX_HEADS 4096
#define S2_MAX_SEQ_LEN (INT64_C(1) << 31)

/* What one pattern file may make the parser hold, checked while it reads
 * (an error at the YAML event or mask reference that crosses the limit).
 * A file is at most 64 MiB, with at most 256 patterns, 4096 overrides,
 * 4096 ranges and 64 masks per pattern. */
#define S2_PATTERN_MAX_NODES (1 << 20)               /* YAML nodes (scalars, lists, mappings) */
#define S2_PATTERN_MAX_SCALAR_BYTES (16 << 20)       /* bytes of all scalars together */
#define S2_PATTERN_MAX_MASK_BYTES (INT64_C(64) << 20) /* bytes of mask files read; each reference counts its file */

/* The bounds of a pattern's values, as the pattern parser takes them; the
 * manifest parser (a cubin's patterns) holds them to the same. */
#define S2_PATTERN_MAX_COUNT (1 << 24)   /* local window (blocks), vert_stride, head_sliding step and offset */
#define S2_PATTERN_MAX_SHIFT ((int64_t)S2_MAX_HEADS * S2_PATTERN_MAX_COUNT) /* a head's shift: h * step + offset */
#define S2_PATTERN_MAX_MASKS 64          /* per pattern */
#define S2_PATTERN_MAX_RANGES 4096       /* per pattern file (a manifest: per pattern) */
#define S2_MASK_MAX_BLOCKS (S2_MAX_SEQ_LEN / 16) /* a mask's rows or columns */

/* A block mask in the golden text format: H masks of M x N blocks
 * (H == 1: one mask shared by every head).  bits[(h*M + m)*N + n] is 1 when
 * query block m of head h keeps key block n. */
typedef struct s2_block_mask {
    char *name;         /* case name, may be "" */
    int heads;          /* H */
    int64_t rows;       /* M */
    int64_t cols;       /* N */
    uint8_t *bits;      /* H*M*N bytes, each 0 or 1 */
    const char *file;   /* the mask file a pattern read it from, as opened (the pattern file's directory
                           + the path written); NULL for s2_block_mask_load/parse and a manifest's masks */
} s2_block_mask;

typedef enum s2_vert_position {
    S2_VERT_ABSOLUTE = 0, /* vertical stripes at fixed key positions (KV-cache efficient) */
    S2_VERT_RELATIVE = 1, /* vertical stripes at fixed distances from the query */
} s2_vert_position;

/* The resolved rule of one query head. */
typedef struct s2_head_rule {
    bool dense;            /* attends to every visible block */
    int local_left;        /* local window: blocks n with 0 <= m - n < local_left */
    int local_right;       /* bidirectional: blocks n with 0 < n - m < local_right */
    int vert_stride;       /* >= 1, 1 means every block; 0: no vertical stripes (`none`) */
    int64_t shift;         /* h * head_sliding_step + head_sliding_offset (absolute mode) */
    int mask;              /* -1, or index into s2_pattern.masks (explicit mask) */
    int mask_head;         /* which head slice of that mask (0 when it has H == 1) */
} s2_head_rule;

/* What a context-range rule does to the key blocks it selects. */
typedef enum s2_range_action {
    S2_RANGE_SINK = 0,     /* always keep the selected blocks (attention sinks) */
    S2_RANGE_STRIDE,       /* replace the vertical stride by `stride` (same shift) */
    S2_RANGE_DENSE,        /* keep every selected block */
    S2_RANGE_DROP,         /* keep none of the selected blocks (the local window still applies) */
} s2_range_action;

/* A context-range rule.  It selects key blocks by absolute position
 * (key_lo <= n*block_size < key_hi) and by distance from the query
 * (dist_lo <= (m - n) * block_size < dist_hi; |m - n| when bidirectional),
 * for the query heads in `heads`.  Rules are applied in file order after the
 * base rule and the overrides: the last rule that selects a block decides it
 * (the causal limit and the local window are never overridden, except that
 * DROP does not remove local blocks either). */
typedef struct s2_range_rule {
    s2_range_action action;
    int64_t key_lo, key_hi;    /* tokens; default [0, INT64_MAX) */
    int64_t dist_lo, dist_hi;  /* tokens; default [0, INT64_MAX) */
    int stride;                /* for S2_RANGE_STRIDE */
    uint8_t *heads;            /* heads[q] != 0 when query head q is selected (length = pattern heads); NULL: all */
    int line, col;             /* where it was declared, for messages */
} s2_range_rule;

typedef struct s2_pattern {
    char *name;
    int heads;                 /* query heads */
    int kv_heads;              /* divides heads */
    int block_size;            /* 16, 32, 64 or 128 */
    bool causal;
    int64_t max_seq_len;       /* 0 = unbounded */
    s2_vert_position vert_position;

    /* base local_stride rule as declared (before overrides) */
    int local_left, local_right;
    int vert_stride;
    int head_sliding_step;     /* resolved (auto -> max(1, vert_stride / heads)) */
    bool head_sliding_step_auto;
    int head_sliding_offset;
    bool homo_head;
    int num_dense_heads;       /* the last N kv-heads attend densely */

    s2_head_rule *rules;       /* [heads]: the resolved per-query-head rule */
    s2_range_rule *ranges;
    int num_ranges;
    s2_block_mask *masks;      /* explicit masks referenced by rules */
    int num_masks;

    const char *file;          /* file the pattern came from */
    int line;                  /* line where it starts */
    /* [num_masks]: where each mask was read, "file:line:col: key" of its `mask:`
     * value as pattern errors begin, for messages about the mask (a layout
     * longer than it); NULL for patterns not parsed (a manifest's) */
    const char *const *mask_where;
} s2_pattern;

/* One or more named patterns (one per file, or a `patterns:` list). */
typedef struct s2_pattern_set s2_pattern_set;

/* Parse a pattern file.  On a parse error the message in ctx is one line
 * "file:line:col: message" and S2_ERR_PARSE is returned.
 *
 * A `mask:` path is relative to the pattern file's directory and must stay
 * in it: an absolute path, or one whose `..` components (read lexically;
 * symbolic links are not resolved) climb out of that directory, is an error
 * at the mask reference, unless it lies in one of the options'
 * allow_mask_dirs (compared lexically after making both absolute against
 * the working directory). */
S2_API s2_status s2_pattern_load(s2_ctx *ctx, const char *path, s2_pattern_set **out);
/* Parse from memory; `filename` is used in messages and, as for a file, its
 * directory is the one mask paths are relative to and must stay in (NULL:
 * "<memory>", the working directory). */
S2_API s2_status s2_pattern_parse(s2_ctx *ctx, const char *filename, const char *text, size_t len,
                           s2_pattern_set **out);

typedef struct s2_pattern_load_options {
    /* NULL-terminated list of directories whose files a mask path may also
     * name (absolute or climbing out of the pattern file's directory); NULL:
     * none. */
    const char *const *allow_mask_dirs;
} s2_pattern_load_options;

/* s2_pattern_load / s2_pattern_parse with options (o may be NULL: the defaults). */
S2_API s2_status s2_pattern_load_opts(s2_ctx *ctx, const char *path, const s2_pattern_load_options *o,
                               s2_pattern_set **out);
S2_API s2_status s2_pattern_parse_opts(s2_ctx *ctx, const char *filename, const char *text, size_t len,
                                const s2_pattern_load_options *o, s2_pattern_set **out);
S2_API void s2_pattern_set_free(s2_pattern_set *set);

S2_API int s2_pattern_set_count(const s2_pattern_set *set);
S2_API const s2_pattern *s2_pattern_set_get(const s2_pattern_set *set, int i);
/* Find by name; NULL if absent. */
S2_API const s2_pattern *s2_pattern_set_find(const s2_pattern_set *set, const char *name);

/* Build a pattern programmatically from the S2 library's keyword arguments
 * (the golden file's kwargs).  local_right is used only when !causal.  The
 * window, stride, step and offset are bounded as in a pattern file
 * (0..S2_PATTERN_MAX_COUNT). */
typedef struct s2_local_stride_args {
    const char *name;
    int num_heads;
    int num_kv_heads;        /* 0 = num_heads */
    int block_size;
    int local_blocks;
    int local_right;         /* 0 = same as local_blocks */
    int vert_stride;
    int head_sliding_step;   /* 0 = auto */
    int head_sliding_offset;
    bool homo_head;
    int num_dense_heads;
    bool causal;
    int vert_position;       /* -1 = default for causal, else s2_vert_position */
    int64_t max_seq_len;
} s2_local_stride_args;

S2_API void s2_local_stride_args_default(s2_local_stride_args *a);
S2_API s2_status s2_pattern_from_args(s2_ctx *ctx, const s2_local_stride_args *args, s2_pattern_set **out);

/* A pattern from per-query-head rules, an explicit block mask, or both
 * (what a framework holds: an arbitrary mask, or the S2 library's heads
 * sliced or regrouped).  Checked as a file's pattern is: heads 1..4096 and a
 * multiple of kv_heads, block_size 16..128, windows and strides
 * 0..S2_PATTERN_MAX_COUNT, shifts 0..S2_PATTERN_MAX_SHIFT, a mask of H = 1 or heads slices within
 * S2_PATTERN_MAX_MASK_BYTES.  Rules and mask bits are copied (a nonzero
 * byte keeps its block).  S2_ERR_INVALID or S2_ERR_NULL_ARG name what is
 * wrong. */
typedef struct s2_pattern_def {
    const char *name;            /* NULL: "pattern" */
    int heads;                   /* query heads */
    int kv_heads;                /* 0 = heads */
    int block_size;
    bool causal;                 /* causal: local_right is ignored */
    int vert_position;           /* -1 = default for causal, else s2_vert_position */
    int64_t max_seq_len;         /* 0 = unbounded (a mask bounds it by its size) */
    const s2_head_rule *rules;   /* [heads], or NULL: every head takes the mask (slice q when H = heads);
                                    a rule's mask is -1 (none) or 0 (this mask, slice mask_head) */
    const s2_block_mask *mask;   /* NULL, or H x M x N blocks (its file field is ignored) */
} s2_pattern_def;

S2_API s2_status s2_pattern_build(s2_ctx *ctx, const s2_pattern_def *def, s2_pattern_set **out);

/* Read a golden-format mask file ("case NAME {json}", "shape H M N", rows,
 * "end").  `case_name` selects one case (NULL: the first).  The result is
 * freed with s2_block_mask_free. */
S2_API s2_status s2_block_mask_load(s2_ctx *ctx, const char *path, const char *case_name, s2_block_mask *out);
S2_API s2_status s2_block_mask_parse(s2_ctx *ctx, const char *filename, const char *text, size_t len,
                              const char *case_name, s2_block_mask *out);
S2_API void s2_block_mask_free(s2_block_mask *m);

/* True when every head keeps every visible block (a dense rule, or a
 * vertical stride of 1) and no range rule applies: the kernel heuristic
 * then picks the dense tiling.  A NULL or unresolved pattern is not dense. */
S2_API bool s2_pattern_is_dense(const s2_pattern *p);

/* Print a one-screen human summary of a pattern (for `s2c check`). */
S2_API s2_status s2_pattern_describe(const s2_pattern *p, char **text); /* malloc'd */

#ifdef __cplusplus
}
#endif
#endif
