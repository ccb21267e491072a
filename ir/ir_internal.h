/* Internal to ir/: the layout object, candidate sources and entry evaluation. */
#ifndef S2C_IR_INTERNAL_H
#define S2C_IR_INTERNAL_H

#include "s2c/layout.h"
#include "util.h"

struct s2_layout {
    const s2_pattern *p;     /* borrowed: must outlive the layout */
    int64_t q_len, kv_len, q_start;
    int64_t first_q_block, q_blocks, kv_blocks;
    int *rep_of_head;        /* [heads]: smallest head with the same mask */
    int *class_of_head;      /* [heads]: class ordinal */
    int *class_rep;          /* [num_classes] */
    int *class_size;         /* [num_classes]: heads in the class */
    int num_classes;
};

/* Block predicate without argument checks (q, m, n already valid). */
bool s2_ir_block_kept(const s2_pattern *p, int q, int64_t m, int64_t n);
/* Does a range rule select (q, m, n)? */
bool s2_ir_range_selects(const s2_pattern *p, const s2_range_rule *rr, int q, int64_t m, int64_t n);
bool s2_ir_range_applies_to(const s2_range_rule *rr, int q);

/* A candidate source: the blocks a + k*step (any integer k) within [lo, hi]. */
typedef struct s2_ir_src {
    int64_t a, step, lo, hi;
} s2_ir_src;

typedef struct s2_ir_srcs {
    s2_ir_src *v;
    int n, cap;
    bool oom;
    int64_t clip_lo, clip_hi;   /* every source is clipped to this block range */
} s2_ir_srcs;

void s2_ir_srcs_init(s2_ir_srcs *ss, int64_t clip_lo, int64_t clip_hi);
void s2_ir_srcs_free(s2_ir_srcs *ss);
/* Supersets of the key blocks read by query blocks [m0, m1] (forward) or of
 * the query blocks reading key blocks [n0, n1] (transposed) for head q. */
void s2_ir_fwd_sources(const s2_layout *l, int q, int64_t m0, int64_t m1, s2_ir_srcs *ss);
void s2_ir_tr_sources(const s2_layout *l, int q, int64_t n0, int64_t n1, s2_ir_srcs *ss);
/* Smallest tile index >= x (tiles of `tile` tokens) that meets a source; INT64_MAX if none. */
int64_t s2_ir_next_tile(const s2_ir_srcs *ss, int64_t x, int tile, int block_size);

/* Evaluate the (query tile t, key tile j) entry of head q; false when nothing is live. */
bool s2_ir_eval_entry(const s2_layout *l, const s2_tile_geom *g, int q, int64_t t, int64_t j, s2_tile_entry *e);
/* The sub-block pairs (bit i*sub_n + j) of entry (t, j) that hold a query and
 * a key, and not only keys after every query of a causal pattern. */
uint64_t s2_ir_entry_valid(const s2_layout *l, const s2_tile_geom *g, int64_t t, int64_t j);
/* e from its live pairs (a subset of the valid ones): row_mask and the
 * FULL, CAUSAL and RAGGED flags the kernels mask by. */
void s2_ir_entry_fill(const s2_layout *l, const s2_tile_geom *g, int64_t t, int64_t j, uint64_t live,
                      s2_tile_entry *e);
/* Token pairs kept in [qa, qb) x [ka, kb) when the block pair is kept. */
int64_t s2_ir_rect_pairs(int64_t qa, int64_t qb, int64_t ka, int64_t kb, bool causal);

/* Head q's readers of each key block are one run of query blocks containing the block's own
 * (an absolute rule without ranges: window, stripe column and dense runs all contain m = n). */
bool s2_ir_readers_one_run(const s2_pattern *p, int q);

s2_status s2_ir_geom(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, s2_tile_geom *g);

/* Block distance bounds of a range rule: d with dist_lo <= d*bs < dist_hi, and
 * key blocks n with key_lo <= n*bs < key_hi. */
void s2_ir_range_bounds(const s2_range_rule *rr, int bs, int64_t *klo, int64_t *khi, int64_t *dlo, int64_t *dhi);

#endif
