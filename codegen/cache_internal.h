/* Internal to the on-disk cache and its tests (not installed). */
#ifndef S2C_CACHE_INTERNAL_H
#define S2C_CACHE_INTERNAL_H

#include "s2c/cache.h"
#include "util.h"

/* Where the cache's stores take the random part of their temporary files'
 * names (NULL: s2_tmp_suffix_random), so that a test knows every name a
 * store may try.  Before the cache is shared between threads. */
void s2_cache_set_tmp_suffix(s2_cache *cache, s2_tmp_suffix_fn fn, void *arg);

#endif
