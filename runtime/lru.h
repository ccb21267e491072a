/* Internal to runtime/: a least-recently-used cache of device-side items
 * (schedules, decode lists) keyed by two integers.  The caller owns the
 * storage and the lock; the cache finds, builds, evicts and frees. */
#ifndef S2C_RT_LRU_H
#define S2C_RT_LRU_H

#include "rt_internal.h"

#include <stddef.h>
#include <stdint.h>

/* The first member of every cached item.  An empty item is all zero. */
typedef struct s2_lru_entry {
    int64_t key[2];
    uint64_t last_use;           /* 0: empty */
} s2_lru_entry;

typedef struct s2_lru_ops {
    /* Fill `item` (all zero) for `key`; on failure leave it all zero. */
    s2_status (*build)(s2_ctx *ctx, void *owner, const int64_t key[2], void *item);
    /* Free what build put in `item` (the cache zeroes it afterwards). */
    void (*release)(void *owner, void *item);
} s2_lru_ops;

typedef struct s2_lru {
    const s2_lru_ops *ops;
    void *owner;                 /* passed to ops */
    s2_device *dev;              /* synchronised before an eviction */
    unsigned char *items;        /* count items of item_size bytes, each starting with an s2_lru_entry */
    size_t item_size;
    int count;
    uint64_t tick;
    int64_t hits, misses, evictions;
    int held;                    /* items not empty */
} s2_lru;

/* items: count zeroed items of item_size bytes. */
S2_RT_HIDDEN void s2_lru_init(s2_lru *c, void *items, size_t item_size, int count, const s2_lru_ops *ops, void *owner,
                              s2_device *dev);
/* The item of (k0, k1), built on a miss into an empty item or, when none is,
 * the least recently used one, evicted first.  A miss while `stream` is
 * being captured is S2_ERR_CAPTURE: a build uploads and synchronises, which
 * capture forbids (NULL: a query, no launch follows). */
S2_RT_HIDDEN s2_status s2_lru_get(s2_ctx *ctx, s2_lru *c, int64_t k0, int64_t k1, void *stream, void **out);
/* Free every item (no launch may be in flight).  A zeroed cache is fine. */
S2_RT_HIDDEN void s2_lru_clear(s2_lru *c);

#endif
