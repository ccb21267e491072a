/* On-disk kernel cache: keys, directory, entries (see include/s2c/cache.h). */
#include "cache_internal.h"
#include "s2c/cache.h"
#include "sha256.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { HEADER_SIZE = 80, OFF_VERSION = 4, OFF_KEY = 8, OFF_LENGTH = 40, OFF_SUM = 48 };
static const char MAGIC[4] = {'S', '2', 'C', 'K'};

/* A new field in s2_kernel_spec must also go into the key (hash_spec). */
_Static_assert(sizeof(s2_kernel_spec) == 9 * sizeof(int), "s2_kernel_spec changed: update hash_spec");

struct s2_cache {
    char *dir;
    char *untrusted;   /* why the directory is not used, or NULL */
    bool trust_all;    /* S2_CACHE_TRUST_DIR: no owner or permission checks */
    s2_write_opts store; /* stores' temporary files: mode 0600, their names */
};

static void put_le(uint8_t *p, int n, uint64_t v)
{
    for (int i = 0; i < n; i++, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* ---- keys ---- */

/* A tagged, length-prefixed field, so that no two different field lists
 * hash the same byte stream ("ab"+"c" vs "a"+"bc"). */
static void hash_field(s2_sha256 *h, char tag, const void *data, size_t n)
{
    uint8_t head[9];
    head[0] = (uint8_t)tag;
    put_le(head + 1, 8, n);
    s2_sha256_update(h, head, sizeof head);
    s2_sha256_update(h, data, n);
}

static void hash_str(s2_sha256 *h, char tag, const char *s) { hash_field(h, tag, s, strlen(s)); }

static void hash_spec(s2_sha256 *h, const s2_kernel_spec *s)
{
    const int64_t v[8] = {s->kind, s->dtype, s->head_dim, s->arch, s->block_m, s->block_n, s->num_warps, s->num_stages};
    uint8_t bytes[8 * 8];
    for (int i = 0; i < 8; i++)
        put_le(bytes + 8 * i, 8, (uint64_t)v[i]);
    hash_field(h, 'S', bytes, sizeof bytes);
    /* decode's fp8 pages: a field of its own, so keys of 16-bit pages stay what they were */
    if (s->kv_dtype != 0) {
        put_le(bytes, 8, (uint64_t)s->kv_dtype);
        hash_field(h, 'V', bytes, 8);
    }
}

s2_status s2_cache_key_build(s2_ctx *ctx, const s2_cache_key_desc *d, s2_cache_key *out)
{
    if (!d || !out || !d->pattern || !d->spec || !d->arch || !d->arch[0])
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cache_key_build: pattern, spec and arch are required");
    const char *toolchain = d->toolchain;
    if (!toolchain) {
        s2_status st = s2_toolchain_version(ctx, S2_CUBIN_AUTO, &toolchain);
        if (st != S2_OK)
            return st;
    }
    s2_sha256 h;
    s2_sha256_init(&h);
    hash_str(&h, 'K', "s2c-cache-key-2");
    hash_str(&h, 'G', d->generator ? d->generator : s2_generator_id());
    hash_str(&h, 'P', d->pattern);
    hash_spec(&h, d->spec);
    hash_str(&h, 'T', toolchain);
    hash_str(&h, 'A', d->arch);
    s2_sha256_final(&h, out->bytes);
    return S2_OK;
}

void s2_cache_key_hex(const s2_cache_key *key, char out[2 * S2_CACHE_KEY_BYTES + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < S2_CACHE_KEY_BYTES; i++) {
        out[2 * i] = digits[key->bytes[i] >> 4];
        out[2 * i + 1] = digits[key->bytes[i] & 15];
    }
    out[2 * S2_CACHE_KEY_BYTES] = '\0';
}

/* ---- directory ---- */

static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

/* The directory by precedence (see cache.h), malloc'd. */
static s2_status choose_dir(s2_ctx *ctx, const char *dir, char **out)
{
    s2_buf b;
    s2_buf_init(&b);
    const char *xdg = env_nonempty("XDG_CACHE_HOME"), *home = env_nonempty("HOME");
    if (dir && dir[0])
        s2_buf_puts(&b, dir);
    else if ((dir = env_nonempty("S2C_CACHE_DIR")) != NULL)
        s2_buf_puts(&b, dir);
    else if (xdg && xdg[0] == '/')
        s2_buf_printf(&b, "%s/s2c", xdg);
    else if (home)
        s2_buf_printf(&b, "%s/.cache/s2c", home);
    else
        return s2_fail(ctx, S2_ERR_IO, "no cache directory: S2C_CACHE_DIR, XDG_CACHE_HOME and HOME are unset");
    if (b.oom) {
        s2_buf_free(&b);
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    *out = s2_buf_steal(&b, NULL);
    return S2_OK;
}

/* mkdir -p with mode 0700: the cache holds code this user will run. */
static s2_status make_dirs(s2_ctx *ctx, const char *path)
{
    char failed[4096];
    int err = s2_make_dirs(path, 0700, failed, sizeof failed);
    return err ? s2_fail(ctx, S2_ERR_IO, "cache directory %s: %s", failed,
                         err == EEXIST ? "exists and is not a directory" : strerror(err))
               : S2_OK;
}

/* Whether other users could have written the directory's entries: owned by
 * another user, or writable by group or others without the sticky bit.
 * Sets c->untrusted to the reason (NULL: trusted). */
static s2_status check_trust(s2_ctx *ctx, s2_cache *c)
{
    struct stat sb;
    char why[160];
    uid_t me = geteuid();
    if (stat(c->dir, &sb) != 0)
        snprintf(why, sizeof why, "cannot stat it (%s)", strerror(errno));
    else if (sb.st_uid != me)
        snprintf(why, sizeof why, "it is owned by uid %lu, not by this user (uid %lu)", (unsigned long)sb.st_uid,
                 (unsigned long)me);
    else if ((sb.st_mode & (S_IWGRP | S_IWOTH)) && !(sb.st_mode & S_ISVTX))
        snprintf(why, sizeof why, "it is writable by %s (mode %04o) without the sticky bit",
                 (sb.st_mode & S_IWOTH) ? "others" : "its group", (unsigned)(sb.st_mode & 07777));
    else
        return S2_OK;
    s2_buf b;
    s2_buf_init(&b);
    s2_buf_printf(&b, "cache directory %s is not used: %s; chmod 0700 it, or set S2C_CACHE_TRUST_DIR=1 to trust it",
                  c->dir, why);
    if (b.oom) {
        s2_buf_free(&b);
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    c->untrusted = s2_buf_steal(&b, NULL);
    return S2_OK;
}

s2_status s2_cache_open(s2_ctx *ctx, const char *dir, s2_cache **out)
{
    return s2_cache_open_flags(ctx, dir, 0, out);
}

s2_status s2_cache_open_flags(s2_ctx *ctx, const char *dir, unsigned flags, s2_cache **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cache_open: out is NULL");
    *out = NULL;
    if (flags & ~S2_CACHE_TRUST_DIR)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cache_open: unknown flags 0x%x", flags & ~S2_CACHE_TRUST_DIR);
    s2_cache *c = calloc(1, sizeof *c);
    if (!c)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    c->store.mode = 0600;
    s2_status st = choose_dir(ctx, dir, &c->dir);
    if (st == S2_OK) {
        size_t n = strlen(c->dir);
        while (n > 1 && c->dir[n - 1] == '/')
            c->dir[--n] = '\0';
        st = make_dirs(ctx, c->dir);
    }
    const char *trust = getenv("S2C_CACHE_TRUST_DIR");
    c->trust_all = (flags & S2_CACHE_TRUST_DIR) || (trust && strcmp(trust, "1") == 0);
    if (st == S2_OK && !c->trust_all)
        st = check_trust(ctx, c);
    return S2_HAND_OVER(st, out, c, s2_cache_close);
}

void s2_cache_close(s2_cache *cache)
{
    if (!cache)
        return;
    free(cache->dir);
    free(cache->untrusted);
    free(cache);
}

const char *s2_cache_dir(const s2_cache *cache) { return cache ? cache->dir : NULL; }

void s2_cache_set_tmp_suffix(s2_cache *cache, s2_tmp_suffix_fn fn, void *arg)
{
    cache->store.suffix = fn;
    cache->store.suffix_arg = arg;
}

const char *s2_cache_untrusted(const s2_cache *cache) { return cache ? cache->untrusted : NULL; }

/* ---- entries ---- */

static char *entry_path(const s2_cache *cache, const s2_cache_key *key)
{
    char hex[2 * S2_CACHE_KEY_BYTES + 1];
    s2_cache_key_hex(key, hex);
    s2_buf b;
    s2_buf_init(&b);
    s2_buf_printf(&b, "%s/%s.s2ck", cache->dir, hex);
    if (b.oom) {
        s2_buf_free(&b);
        return NULL;
    }
    return s2_buf_steal(&b, NULL);
}

/* The entry's checksum: SHA-256 over key || u64 length || payload, so that
 * an entry is valid under its own key only. */
static void entry_sum(const s2_cache_key *key, const void *payload, uint64_t length, uint8_t out[32])
{
    uint8_t len[8];
    put_le(len, 8, length);
    s2_sha256 h;
    s2_sha256_init(&h);
    s2_sha256_update(&h, key->bytes, S2_CACHE_KEY_BYTES);
    s2_sha256_update(&h, len, sizeof len);
    s2_sha256_update(&h, payload, (size_t)length);
    s2_sha256_final(&h, out);
}

/* What is wrong with the header, or NULL; *length gets the payload length. */
static const char *check_header(const uint8_t *h, const s2_cache_key *key, uint64_t file_size, uint64_t *length)
{
    if (memcmp(h, MAGIC, 4) != 0)
        return "bad magic";
    if (get_le(h + OFF_VERSION, 4) != S2_CACHE_FORMAT)
        return "another format version";
    if (memcmp(h + OFF_KEY, key->bytes, S2_CACHE_KEY_BYTES) != 0)
        return "key mismatch";
    *length = get_le(h + OFF_LENGTH, 8);
    if (*length > S2_CACHE_MAX_PAYLOAD)
        return "too large: its header claims more than S2_CACHE_MAX_PAYLOAD";
    if (*length == 0 || *length != file_size - HEADER_SIZE)
        return "length does not match the file size (truncated?)";
    return NULL;
}

/* Read and verify the entry at path; S2_ERR_NOT_FOUND with a note when absent or bad. */
static s2_status read_entry(s2_ctx *ctx, const s2_cache *cache, const char *path, const s2_cache_key *key,
                            void **data, size_t *size)
{
    /* an entry is a regular file: a FIFO must not block the open, a symlink is not followed */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0)
        return s2_fail(ctx, S2_ERR_NOT_FOUND, "cache miss: %s: %s", path, strerror(errno));
    s2_status st = S2_OK;
    const char *bad = NULL;
    uint8_t h[HEADER_SIZE];
    uint64_t length = 0;
    uint8_t *payload = NULL;
    struct stat sb;
    char owner[96];
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        bad = "not a readable regular file";
    else if (!cache->trust_all && sb.st_uid != geteuid()) {
        snprintf(owner, sizeof owner, "owned by uid %lu, not by this user", (unsigned long)sb.st_uid);
        bad = owner;
    }
    else if ((uint64_t)sb.st_size > HEADER_SIZE + (uint64_t)S2_CACHE_MAX_PAYLOAD)
        bad = "too large: the file is over S2_CACHE_MAX_PAYLOAD";
    else if ((uint64_t)sb.st_size < HEADER_SIZE || !s2_read_full(fd, h, HEADER_SIZE))
        bad = "shorter than its header";
    else
        bad = check_header(h, key, (uint64_t)sb.st_size, &length);
    if (!bad) {
        payload = malloc((size_t)length);
        if (!payload)
            st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory reading %s", path);
        else if (!s2_read_full(fd, payload, (size_t)length))
            bad = "short read";
    }
    if (!bad && payload) {
        uint8_t sum[32];
        entry_sum(key, payload, length, sum);
        if (memcmp(sum, h + OFF_SUM, 32) != 0)
            bad = "checksum mismatch (payload, length or key)";
    }
    close(fd);
    if (bad)
        st = s2_fail(ctx, S2_ERR_NOT_FOUND, "cache miss: corrupt entry %s (%s); the next store replaces it", path, bad);
    if (st != S2_OK) {
        free(payload);
        return st;
    }
    *data = payload;
    *size = (size_t)length;
    return S2_OK;
}

s2_status s2_cache_lookup(s2_ctx *ctx, const s2_cache *cache, const s2_cache_key *key, void **data, size_t *size)
{
    if (!cache || !key || !data || !size)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cache_lookup: invalid arguments");
    *data = NULL;
    *size = 0;
    if (cache->untrusted)
        return s2_fail(ctx, S2_ERR_NOT_FOUND, "cache miss: %s", cache->untrusted);
    char *path = entry_path(cache, key);
    if (!path)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    s2_status st = read_entry(ctx, cache, path, key, data, size);
    free(path);
    return st;
}

/* 0.2.0's temporary names ended in PID.TID. */
static bool legacy_suffix(const char *s)
{
    size_t a = strspn(s, "0123456789");
    if (a == 0 || s[a] != '.')
        return false;
    size_t b = strspn(s + a + 1, "0123456789");
    return b > 0 && s[a + 1 + b] == '\0';
}

/* <64 hex digits>.s2ck.tmp.<suffix>: a store's temporary file. */
static bool is_tmp_name(const char *name)
{
    static const char tail[] = ".s2ck" S2_TMP_TAG;
    if (strspn(name, "0123456789abcdef") != 2 * S2_CACHE_KEY_BYTES)
        return false;
    name += 2 * S2_CACHE_KEY_BYTES;
    if (strncmp(name, tail, sizeof tail - 1) != 0)
        return false;
    name += sizeof tail - 1;
    return s2_tmp_suffix_valid(name) || legacy_suffix(name);
}

/* Remove this user's temporary files older than S2_CACHE_STALE_TMP_SECONDS:
 * those of stores that died between their write and their rename.  Only
 * regular files of the temporary name's shape; best effort. */
static void remove_stale_tmp(const s2_cache *cache)
{
    DIR *d = opendir(cache->dir);
    if (!d)
        return;
    time_t now = time(NULL);
    uid_t me = geteuid();
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat sb;
        if (!is_tmp_name(e->d_name) || fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (S_ISREG(sb.st_mode) && sb.st_uid == me && sb.st_mtime < now - S2_CACHE_STALE_TMP_SECONDS)
            unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

s2_status s2_cache_store(s2_ctx *ctx, const s2_cache *cache, const s2_cache_key *key, const void *data, size_t size)
{
    if (!cache || !key || !data || size == 0)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cache_store: invalid arguments (an entry is not empty)");
    if (size > S2_CACHE_MAX_PAYLOAD)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cache_store: a payload of %zu bytes is over the cap of %zu",
                       size, (size_t)S2_CACHE_MAX_PAYLOAD);
    if (cache->untrusted)
        return s2_fail(ctx, S2_ERR_IO, "not stored: %s", cache->untrusted);
    uint8_t *file = malloc(HEADER_SIZE + size);
    char *path = entry_path(cache, key);
    if (!file || !path) {
        free(file);
        free(path);
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    memcpy(file, MAGIC, 4);
    put_le(file + OFF_VERSION, 4, S2_CACHE_FORMAT);
    memcpy(file + OFF_KEY, key->bytes, S2_CACHE_KEY_BYTES);
    put_le(file + OFF_LENGTH, 8, size);
    entry_sum(key, data, size, file + OFF_SUM);
    memcpy(file + HEADER_SIZE, data, size);
    /* each store has its own temporary file, so racing stores of one key
     * both succeed and the last rename wins */
    s2_status st = s2_write_file_atomic_opts(ctx, path, file, HEADER_SIZE + size, &cache->store);
    free(file);
    free(path);
    remove_stale_tmp(cache);
    return st;
}
