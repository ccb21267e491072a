/* s2c — block layouts, Merge-Q tile schedules, KV liveness, statistics.
 *
 * A layout is a pattern instantiated for a query length and a key length.
 * Queries are the last q_len positions of the kv_len keys (q_start =
 * kv_len - q_len), which covers prefill (q_len == kv_len), chunked prefill
 * and decode.  Nothing here allocates O(seq_len^2): masks are evaluated in
 * closed form from the per-head rules; only explicit masks are tables.
 */
#ifndef S2C_LAYOUT_H
#define S2C_LAYOUT_H

#include "s2c/common.h"
#include "s2c/pattern.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the block and token predicates ------------------------------------ */

/* Conventions beyond pattern.h:
 *  - the local window is {0 <= m-n < local_left} U {0 <= n-m < local_right}
 *    (the diagonal belongs to both sides, so a causal relative rule with
 *    local_right 0 keeps it); vert_stride 0 means no stripes;
 *  - range rules do not apply to explicit-mask heads (the mask decides);
 *  - a STRIDE range in relative mode tests the relative distance, like the
 *    base stripes of that mode; in absolute mode (n + shift) % stride.
 * Does query head q's query block m keep key block n?  (Blocks are in
 * absolute positions: block i covers tokens [i*block_size, (i+1)*block_size).)
 * Out-of-range heads or blocks, or blocks outside an explicit mask, are not kept. */
S2_API bool s2_block_kept(const s2_pattern *p, int q, int64_t m, int64_t n);

/* Token-level: query position qpos attends key position kpos (absolute
 * positions; causal patterns also require kpos <= qpos). */
S2_API bool s2_token_kept(const s2_pattern *p, int q, int64_t qpos, int64_t kpos);

/* ---- layouts ------------------------------------------------------------- */

typedef struct s2_layout s2_layout;

/* q_len <= kv_len (queries are the last positions); both >= 1 and within
 * the pattern's max_seq_len and any explicit mask's size.  The layout
 * borrows p: the pattern must outlive it. */
S2_API s2_status s2_layout_new(s2_ctx *ctx, const s2_pattern *p, int64_t q_len, int64_t kv_len, s2_layout **out);
/* The longest kv_len a layout of p may have: S2_MAX_SEQ_LEN, the pattern's
 * max_seq_len and every explicit mask a rule uses bound it (0 for a pattern
 * without rules). */
S2_API int64_t s2_layout_max_kv_len(const s2_pattern *p);
S2_API void s2_layout_free(s2_layout *l);

S2_API const s2_pattern *s2_layout_pattern(const s2_layout *l);
S2_API int64_t s2_layout_q_len(const s2_layout *l);
S2_API int64_t s2_layout_kv_len(const s2_layout *l);
S2_API int64_t s2_layout_q_start(const s2_layout *l);          /* kv_len - q_len */
S2_API int64_t s2_layout_q_blocks(const s2_layout *l);         /* query blocks m in [first, first+count) */
S2_API int64_t s2_layout_first_q_block(const s2_layout *l);    /* q_start / block_size */
S2_API int64_t s2_layout_kv_blocks(const s2_layout *l);        /* cdiv(kv_len, block_size) */

/* Heads whose rules give identical masks share one schedule: class_of(q)
 * is the smallest head index with the same mask. */
S2_API int s2_layout_head_class(const s2_layout *l, int q);
S2_API int s2_layout_num_classes(const s2_layout *l);
/* Class ordinal of head q (0..num_classes-1, the index used by s2_schedule),
 * and the representative (smallest) head of class c. */
S2_API int s2_layout_class_index(const s2_layout *l, int q);
S2_API int s2_layout_class_rep(const s2_layout *l, int c);

/* ---- Merge-Q tile schedules ---------------------------------------------
 * The kernel works on tiles of block_m query rows and block_n key rows
 * (each 16..128, powers of two).  Query tiles are aligned to absolute
 * positions: tile t covers positions [t*block_m, (t+1)*block_m), clipped to
 * [q_start, kv_len).  Sub-blocks are min(block_size, tile) tokens; a tile
 * has sub_m = block_m / sub_m_size query sub-blocks and sub_n key sub-blocks,
 * with sub_m * sub_n <= 64.
 */
typedef struct s2_tile_spec {
    int block_m;
    int block_n;
} s2_tile_spec;

enum {
    S2_ENTRY_FULL = 1u << 0,   /* every (query, key) pair of the tile is kept: no mask needed */
    S2_ENTRY_CAUSAL = 1u << 1, /* the tile crosses the causal diagonal: token mask needed */
    S2_ENTRY_RAGGED = 1u << 2, /* the key tile runs past kv_len: length mask needed */
    /* bits 3..5: the templates' own packings (ir/pack_internal.h) */
};

typedef struct s2_tile_entry {
    int64_t tile;        /* key tile index (forward) or query tile index (transposed) */
    uint64_t live;       /* bit i*sub_n + j: query sub-block i keeps key sub-block j */
    uint32_t row_mask;   /* bit i: query sub-block i has a live key in this entry */
    uint32_t flags;      /* S2_ENTRY_* */
} s2_tile_entry;

typedef struct s2_tile_geom {
    int block_m, block_n;
    int sub_m, sub_n;            /* sub-blocks per tile */
    int sub_m_size, sub_n_size;  /* tokens per sub-block */
    int64_t first_q_tile;        /* q_start / block_m */
    int64_t q_tiles;             /* query tiles covering [q_start, kv_len) */
    int64_t kv_tiles;            /* cdiv(kv_len, block_n) */
} s2_tile_geom;

S2_API s2_status s2_layout_tile_geom(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, s2_tile_geom *g);

/* Upper bound on the entries of any one tile's list (forward or transposed). */
S2_API int64_t s2_layout_max_entries(const s2_layout *l, s2_tile_spec spec);

/* Forward list of query head q, query tile t (absolute index, from
 * first_q_tile): the key tiles to visit in increasing order, computed in
 * closed form.  Writes at most cap entries, sets *count to the full count
 * (call with cap = 0 to size). */
S2_API s2_status s2_layout_q_tile_entries(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, int q, int64_t t,
                                   s2_tile_entry *out, int64_t cap, int64_t *count);

/* Transposed list for the backward pass: the query tiles that visit key
 * tile j of head q, in increasing order; `live` uses the same bit layout. */
S2_API s2_status s2_layout_kv_tile_entries(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, int q, int64_t j,
                                    s2_tile_entry *out, int64_t cap, int64_t *count);

/* An upper bound on the entries of the layout's forward (or transposed)
 * schedule of tile shape spec, without building it: per list, the tiles that
 * the candidate blocks s2_layout_q_tile_entries (_kv_tile_entries) would test
 * touch, taken `group` at a time (1; a gathered packing's group).  *total
 * gets the sum over classes and lists, per_class[c] (NULL, or num_classes of
 * them) class c's.  Stops as soon as *total is above limit (limit < 0: never;
 * per_class is then partial), so a huge layout costs no more than the limit:
 * time linear in the lists and their candidate sources, no list is held. */
S2_API s2_status s2_layout_entries_bound(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, bool transposed,
                                         int group, int64_t limit, int64_t *per_class, int64_t *total);

/* A materialised schedule (CSR): per head class and query tile, the entries.
 * Its size is the number of entries (no seq_len^2 table). */
typedef struct s2_schedule {
    s2_tile_geom geom;
    int num_classes;
    int heads;
    int *class_of_head;          /* [heads] */
    int64_t *offsets;            /* [num_classes * q_tiles + 1] */
    s2_tile_entry *entries;      /* [offsets[last]] */
    bool transposed;             /* lists per key tile instead (offsets over kv_tiles) */
} s2_schedule;

S2_API s2_status s2_schedule_build(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, bool transposed, s2_schedule **out);
S2_API void s2_schedule_free(s2_schedule *s);

/* A schedule made elsewhere (a context-parallel layer's: the pattern's
 * lists split or remapped; the kernels launch over it as over their own,
 * attn_runtime.h's s2_attn_sched_new), in the format above:
 *  - geom is s2_layout_tile_geom's for the layout and tile shape;
 *  - heads is the pattern's, class_of_head[h] in 0..num_classes-1;
 *  - list i of class c (query tile first_q_tile + i forward, key tile i
 *    transposed) is entries[offsets[c * lists + i] .. offsets[c * lists + i + 1]),
 *    offsets[0] = 0 and not decreasing;
 *  - an entry's tile (key tile forward, query tile transposed) lies in the
 *    geometry and rises within its list (each tile once);
 *  - live (bit i * sub_n + j: query sub-block i keeps key sub-block j) is
 *    not empty and names only sub-blocks holding a query and a key, and for
 *    a causal pattern not one whose keys all follow every query;
 *  - row_mask and flags (FULL, CAUSAL, RAGGED) are those the live bits give
 *    (s2_schedule_build's rule), since the kernels mask by them.
 * s2_schedule_check checks each of these as untrusted input: S2_ERR_SHAPE
 * for another geometry, S2_ERR_HEADS for another head count, S2_ERR_NULL_ARG
 * for a missing array, else S2_ERR_INVALID naming the class, list and entry. */
S2_API s2_status s2_schedule_check(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, bool transposed,
                                   const s2_schedule *s);
/* The transposed schedule of tile shape spec (the backward's: per key tile
 * the query tiles visiting it) from a forward schedule checked as above:
 * each forward key sub-block must be one transposed key tile (spec.block_n
 * = its sub_n_size, spec.block_m = its block_m; S2_ERR_UNSUPPORTED
 * otherwise).  For the layout's own schedule the result is
 * s2_schedule_build's transposed one. */
S2_API s2_status s2_schedule_transpose(s2_ctx *ctx, const s2_layout *l, const s2_schedule *fwd, s2_tile_spec spec,
                                       s2_schedule **out);

/* A schedule packed for the GPU: one buffer holding, at the given byte
 * offsets (each 16-byte aligned),
 *   int32 class_of_head[heads]
 *   int32 offsets[num_classes * lists + 1]      (lists = q_tiles, or kv_tiles when transposed)
 *   s2_dev_entry entries[offsets[last]]
 * Entry e of list i of class c is entries[offsets[c * lists + i] + e]. */
typedef struct s2_dev_entry {
    int32_t tile;        /* key tile (forward) or query tile (transposed), absolute index */
    uint32_t flags;      /* S2_ENTRY_* | row_mask << 8 */
    uint64_t live;       /* as s2_tile_entry.live */
} s2_dev_entry;

typedef struct s2_packed_schedule {
    void *data;                  /* malloc'd; free with s2_packed_schedule_free */
    size_t size;
    size_t class_of_head_off, offsets_off, entries_off;
    int64_t num_entries;
} s2_packed_schedule;

/* S2_ERR_UNSUPPORTED when a count does not fit the 32-bit device format.
 * The plain packing; a kernel's own (gathered key tiles, owned pairs, the
 * backward's kv groups) comes from its manifest record:
 * s2_manifest_schedule_pack (s2c/manifest.h). */
S2_API s2_status s2_schedule_pack(s2_ctx *ctx, const s2_schedule *s, s2_packed_schedule *out);

S2_API void s2_packed_schedule_free(s2_packed_schedule *p);
/* The size of such a buffer: `lists` lists holding `entries` records of
 * entry_size bytes (every packing, the templates' own included). */
S2_API size_t s2_packed_schedule_size(int heads, int64_t lists, int64_t entries, size_t entry_size);

/* The backward's dS workspace (launch.h, backward ABI 48..50): with one
 * 64 x 64 tile grid in both schedules (modules with NAME_dqds), the dK/dV kernel
 * writes the dS tile of each of its entries where the dQ kernel finds it by
 * its forward entry.  Tile slot of (batch b, head h, forward entry e of h's
 * class c) = b * tiles + head_base[h] + (e - offsets[c * q_tiles]), where
 * tiles = head_base[heads].  fwd:
 * s2_schedule_pack's (q_tiles lists per class, from first_q_tile); tr:
 * the backward's kv groups of group kv_group (s2_manifest_schedule_pack,
 * transposed; kv_lists lists per class); only group 1 pairs up
 * (block_size >= 64), others give
 * S2_ERR_UNSUPPORTED.
 * One buffer:
 *   int64 head_base[heads + 1]  (head_base_off)
 *   int32 map[tr->num_entries]  (map_off): record r of tr -> its forward
 *                               entry's index in its class (-1: a header)
 * S2_ERR_UNSUPPORTED when the two schedules do not pair up one to one. */
typedef struct s2_ds_map {
    void *data;                  /* malloc'd; free with s2_ds_map_free */
    size_t size;
    size_t head_base_off, map_off;
    int64_t tiles;               /* dS tiles per batch element */
} s2_ds_map;

S2_API s2_status s2_schedule_ds_map(s2_ctx *ctx, const s2_packed_schedule *fwd, int64_t q_tiles, int64_t first_q_tile,
                             const s2_packed_schedule *tr, int64_t kv_lists, int kv_group, int heads,
                             s2_ds_map *out);
S2_API void s2_ds_map_free(s2_ds_map *m);

/* The persistent forward's work list (launch.h, ABI fwd_tma_persistent):
 * the heads * q_tiles items head * q_tiles + rel of a forward schedule,
 * heads by decreasing total entry count (ties: lower head first), and within
 * a head its tiles by decreasing entry count (ties: later tiles first).
 * Heads stay together so that the CTAs working at one time share their
 * K/V in L2: a global longest-first order (the same tile of every head and
 * batch side by side) measured up to 38% slower (bench/RESULTS.md).
 * *out is malloc'd (free()), *n = heads * q_tiles. */
S2_API s2_status s2_schedule_work_list(s2_ctx *ctx, const s2_schedule *s, int32_t **out, int64_t *n);

/* ---- KV-cache efficiency and liveness ------------------------------------ */

/* The KV-cache-efficient property: for every head and key block n, the query
 * blocks that read n form one contiguous run (once dropped, never read again).
 * Returns S2_OK and *ok = true when it holds over the layout; otherwise
 * *ok = false and the message in ctx names the first head, key block and
 * query block where it fails. */
S2_API s2_status s2_layout_check_kv_efficient(s2_ctx *ctx, const s2_layout *l, bool *ok);

#define S2_LIVE_FOREVER INT64_MAX

/* Last query position that reads key block n for query head q, given that
 * keys and queries lie below the horizon (causal patterns: kpos <= qpos), and
 * queries go up to position horizon - 1 (horizon 0 = the pattern's
 * max_seq_len, or unbounded).  Returns S2_LIVE_FOREVER when the block is read
 * up to the horizon (the end), -1 if it is never read. */
S2_API int64_t s2_kv_last_reader(const s2_pattern *p, int q, int64_t n, int64_t horizon);

/* Same over the query heads of kv-head h (a block can be freed only when no
 * head of the group reads it). */
S2_API int64_t s2_kv_last_reader_group(const s2_pattern *p, int h, int64_t n, int64_t horizon);

/* ---- statistics ------------------------------------------------------------ */
typedef struct s2_layout_stats {
    int64_t q_len, kv_len;
    int heads, head_dim;
    double kept_pairs;        /* (query, key) token pairs kept, summed over heads */
    double dense_pairs;       /* pairs of the dense attention with the same causality */
    double kept_fraction;     /* kept_pairs / dense_pairs */
    double fwd_flops;         /* 4 * kept_pairs * head_dim (two matmuls) */
    double fwd_bwd_flops;     /* 3.5 x fwd_flops */
    double tile_flops;        /* 4 * block_m * block_n * head_dim per visited entry (what the kernel computes) */
    double bytes_read;        /* Q once, K and V once per visited entry, O written once */
    int64_t entries;          /* visited (tile, tile) entries over all heads */
    double head_pairs_min, head_pairs_max, head_pairs_mean; /* per-head work balance */
    double imbalance;         /* max / mean */
} s2_layout_stats;

S2_API s2_status s2_layout_stats_compute(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, int head_dim,
                                  s2_dtype dtype, s2_layout_stats *st);

/* ---- text output --------------------------------------------------------- */

#define S2_FORMAT_MAX_BLOCKS 4096
/* The text formatters' default size limit (max_bytes 0): 1 GiB. */
#define S2_FORMAT_MAX_BYTES ((size_t)1 << 30)

/* The layout's block mask in the golden text format: "case NAME {json}",
 * "shape H M N" (H = heads, M = query blocks, N = key blocks), H*M lines of
 * 0/1, "end".  malloc'd.  Only for layouts up to max_blocks x max_blocks,
 * and S2_ERR_UNSUPPORTED, before anything is built, when the text would be
 * over max_bytes (0: S2_FORMAT_MAX_BYTES). */
S2_API s2_status s2_layout_format_mask(s2_ctx *ctx, const s2_layout *l, size_t max_bytes, char **text);
/* The exact size in bytes of that text (saturating at UINT64_MAX); 0 for NULL. */
S2_API uint64_t s2_layout_mask_text_size(const s2_layout *l);

/* A schedule as readable text: per head class and tile, one line per entry
 * ("KEYTILE rows=HEX live=BITS FLAGS", live bits grouped per query sub-block,
 * flags F/C/R or -).  malloc'd.  S2_ERR_UNSUPPORTED when the text would be
 * over max_bytes (0: S2_FORMAT_MAX_BYTES): at once when the entries alone
 * need more, else as soon as the text grows past it. */
S2_API s2_status s2_schedule_format(s2_ctx *ctx, const s2_schedule *s, size_t max_bytes, char **text);
/* About how many bytes s2_schedule_format would give for the layout's
 * forward (or transposed) schedule, without building it: the header and
 * class lines exactly, the lists from up to 64 of them spread evenly over
 * classes and tiles, counted and formatted (so a cost of 64 lists). */
S2_API s2_status s2_layout_schedule_text_estimate(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, bool transposed,
                                           uint64_t *bytes);

/* Statistics as text: kept %, pairs, GFLOP, bytes, imbalance.  malloc'd. */
S2_API s2_status s2_layout_stats_format(s2_ctx *ctx, const s2_layout_stats *st, char **text);

#ifdef __cplusplus
}
#endif
#endif
