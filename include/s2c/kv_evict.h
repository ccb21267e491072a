/* s2c — KV-cache eviction: which pages of which kv heads can be freed as
 * decoding advances.
 *
 * Built on the pattern's KV liveness (s2_kv_last_reader_group, layout.h).
 * The cache of each kv head is cut into pages of page_size tokens: page j
 * holds positions [j*page_size, (j+1)*page_size).  A page may be smaller or
 * larger than a pattern block; it can only go when every block it overlaps
 * is dead.
 *
 * Positions.  "At position p" means: tokens 0 .. p-1 are in the cache and
 * query p is next (it writes token p, then reads).  Page j of kv head h is
 * DEAD at p when no query head of h's group reads any token of page j at
 * any query position x in [p, max_len), under the pattern's token predicate
 * (s2_token_kept; for causal patterns x reads keys <= x).  death(h, j) is
 * the first such p (0: never read; S2_LIVE_FOREVER: read up to the end).
 *
 * Release.  A page is handed back at release(h, j) = max(death(h, j),
 * page end), page end = min((j+1)*page_size, max_len), so that an allocator
 * that writes every token never writes into a page it was told to free.
 * (For patterns that keep the diagonal block, release == death.)  A decode
 * loop at position p first frees the pages with release <= p, then, when
 * p % page_size == 0, allocates page p / page_size; query p then reads only
 * live pages.  Speculative / multi-token steps advance p by n at once.
 *
 * Patterns that are not KV-cache efficient (relative vertical positions,
 * distance ranges, explicit masks, dense heads): the evictor still reports
 * exactly what is safe, i.e. the pages after their LAST read (a page that is
 * unread for a while and read again is never freed early).  For relative
 * stripes and dense heads that is nothing but never-read pages.
 * s2_kv_evictor_efficient says which case holds.
 *
 * Cost: construction O(kv_heads * blocks * rule period) plus a sort of the
 * pages; s2_kv_evictor_step is O(log pages + pages released); the object is
 * immutable after construction (queries are thread-safe).
 */
#ifndef S2C_KV_EVICT_H
#define S2C_KV_EVICT_H

#include "s2c/common.h"
#include "s2c/pattern.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct s2_kv_evictor s2_kv_evictor;

/* page_size: a positive multiple of 16; max_len: the longest sequence
 * (prompt + generated), 1 .. S2_MAX_SEQ_LEN, and at most the pattern's
 * max_seq_len (and explicit masks' size) when it has one.  Liveness counts
 * queries up to max_len - 1, so one evictor serves every sequence that stays
 * within max_len (one that stops earlier just frees its remaining pages when
 * it ends).  The evictor copies what it needs: the pattern may be freed
 * afterwards. */
S2_API s2_status s2_kv_evictor_new(s2_ctx *ctx, const s2_pattern *p, int page_size, int64_t max_len, s2_kv_evictor **out);
S2_API void s2_kv_evictor_free(s2_kv_evictor *ev);

S2_API int s2_kv_evictor_kv_heads(const s2_kv_evictor *ev);
S2_API int s2_kv_evictor_page_size(const s2_kv_evictor *ev);
S2_API int64_t s2_kv_evictor_max_len(const s2_kv_evictor *ev);
S2_API int64_t s2_kv_evictor_num_pages(const s2_kv_evictor *ev);   /* per kv head: cdiv(max_len, page_size) */

/* true when the pattern is KV-cache efficient over max_len (every key
 * block's readers are one run: s2_layout_check_kv_efficient).  When false,
 * s2_kv_evictor_note says why (first head and block); the frees reported are
 * still safe and exact for "last read", but may be few or none. */
S2_API bool s2_kv_evictor_efficient(const s2_kv_evictor *ev);
S2_API const char *s2_kv_evictor_note(const s2_kv_evictor *ev);   /* "" when efficient */
/* Pages (over all kv heads) released before max_len. */
S2_API int64_t s2_kv_evictor_freeable_pages(const s2_kv_evictor *ev);

/* death(h, j) and release(h, j) as above; -1 for an invalid head or page. */
S2_API int64_t s2_kv_evictor_death(const s2_kv_evictor *ev, int h, int64_t page);
S2_API int64_t s2_kv_evictor_release(const s2_kv_evictor *ev, int h, int64_t page);
/* Is page j of kv head h live (still to be read) at position p: p < death. */
S2_API bool s2_kv_evictor_page_live(const s2_kv_evictor *ev, int h, int64_t page, int64_t p);

/* The pages of kv head h released when advancing from position p to p + n
 * (n >= 1): release in (p, p + n], in increasing release order (ties: by
 * page).  Writes at most cap page indices, sets *count to the full count
 * (cap 0 sizes).  0 <= p, p + n <= max_len.  After a prefill of L tokens,
 * step(h, 0, L) gives every page already released when decoding starts. */
S2_API s2_status s2_kv_evictor_step(s2_ctx *ctx, const s2_kv_evictor *ev, int h, int64_t p, int64_t n, int64_t *pages,
                             int64_t cap, int64_t *count);

/* Same over every kv head at once, as (head, page) pairs. */
typedef struct s2_kv_page {
    int32_t head;
    int64_t page;
} s2_kv_page;

S2_API s2_status s2_kv_evictor_step_all(s2_ctx *ctx, const s2_kv_evictor *ev, int64_t p, int64_t n, s2_kv_page *out,
                                 int64_t cap, int64_t *count);

/* ---- memory accounting ------------------------------------------------------ */

/* Pages of kv head h held while query p runs (p in [0, max_len)): pages
 * 0 .. p / page_size minus those released at or before p.  O(log pages). */
S2_API int64_t s2_kv_evictor_held_pages(const s2_kv_evictor *ev, int h, int64_t p);

/* A prefill of prefill_len tokens (every page held, as a dense cache would),
 * then decoding token by token up to seq_len tokens.  Page counts are summed
 * over the kv heads of one sequence. */
typedef struct s2_kv_memory {
    int64_t prefill_len, seq_len;
    int64_t held_pages;       /* while the last query (seq_len - 1) runs */
    int64_t peak_pages;       /* the most held at any time (prefill included) */
    int64_t dense_pages;      /* kv_heads * cdiv(seq_len, page_size): what a cache that never frees holds */
    int64_t held_min_head, held_max_head; /* per kv head at the end */
    double held_fraction;     /* held / dense */
    double peak_fraction;     /* peak / dense */
} s2_kv_memory;

/* 0 <= prefill_len <= seq_len <= max_len, seq_len >= 1. */
S2_API s2_status s2_kv_evictor_memory(s2_ctx *ctx, const s2_kv_evictor *ev, int64_t prefill_len, int64_t seq_len,
                               s2_kv_memory *out);

#ifdef __cplusplus
}
#endif
#endif
