/* What the cache's test programs share: a fresh directory per test under
 * $TMPDIR, keys, payloads, entry paths, the keyed checksum, hit and miss
 * checks.  Header only. */
#ifndef S2C_TEST_CACHE_HELPERS_H
#define S2C_TEST_CACHE_HELPERS_H

#include "s2c/cache.h"
#include "sha256.h"
#include "util.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_tmp[256];   /* the test's own directory (make_tmp) */

static inline void make_tmp(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/s2c-cache-test-XXXXXX", base && base[0] ? base : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(g_tmp));
}

static inline void remove_tree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return;
    if (S_ISDIR(sb.st_mode)) {
        chmod(path, 0700);
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char sub[4096];
            if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) < (int)sizeof sub)
                remove_tree(sub);
        }
        if (d)
            closedir(d);
        rmdir(path);
    } else
        unlink(path);
}

static inline void drop_tmp(void) { remove_tree(g_tmp); }

static const s2_kernel_spec base_spec = {
    .kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = 128, .arch = S2_ARCH_SM90A,
    .block_m = 128, .block_n = 64, .num_warps = 8, .num_stages = 2,
};

static inline s2_cache_key make_key(const char *pattern)
{
    s2_cache_key_desc d = {.generator = "0.1.0", .pattern = pattern, .spec = &base_spec,
                           .toolchain = "ptxas Cuda compilation tools, release 13.0, V13.0.88", .arch = "sm_90a"};
    s2_cache_key k;
    ck_assert_int_eq(s2_cache_key_build(NULL, &d, &k), S2_OK);
    return k;
}

/* A payload that depends on (seed, size), so any mix-up shows. */
static inline uint8_t *payload(unsigned seed, size_t n)
{
    uint8_t *p = malloc(n);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        p[i] = (uint8_t)x;
    }
    return p;
}

static inline void entry_path(const s2_cache *c, const s2_cache_key *k, char *out, size_t cap)
{
    char hex[65];
    s2_cache_key_hex(k, hex);
    snprintf(out, cap, "%s/%s.s2ck", s2_cache_dir(c), hex);
}

/* The entry checksum of format 2: SHA-256 over key || u64 length || payload. */
static inline void keyed_sum(const s2_cache_key *k, const void *payload, size_t n, uint8_t out[32])
{
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)n >> (8 * i));
    s2_sha256 h;
    s2_sha256_init(&h);
    s2_sha256_update(&h, k->bytes, 32);
    s2_sha256_update(&h, len, 8);
    s2_sha256_update(&h, payload, n);
    s2_sha256_final(&h, out);
}

static inline void expect_hit(s2_ctx *ctx, const s2_cache *c, const s2_cache_key *k, const uint8_t *want, size_t n)
{
    void *data;
    size_t size;
    s2_status st = s2_cache_lookup(ctx, c, k, &data, &size);
    ck_assert_msg(st == S2_OK, "lookup: %s", s2_ctx_message(ctx));
    ck_assert_uint_eq(size, n);
    ck_assert_mem_eq(data, want, n);
    free(data);
}

static inline void expect_miss(s2_ctx *ctx, const s2_cache *c, const s2_cache_key *k, const char *note)
{
    void *data = (void *)1;
    size_t size = 1;
    ck_assert_int_eq(s2_cache_lookup(ctx, c, k, &data, &size), S2_ERR_NOT_FOUND);
    ck_assert_ptr_null(data);
    ck_assert_uint_eq(size, 0);
    ck_assert_msg(strstr(s2_ctx_message(ctx), note) != NULL, "message \"%s\" lacks \"%s\"",
                  s2_ctx_message(ctx), note);
}

#endif
