/* The JIT: spec resolution, the cache key, compile-or-fetch, and loading
 * (s2c/jit.h). */
#include "s2c/jit.h"
#include "compile_internal.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const s2_jit_opts default_opts = {NULL, false, S2_CUBIN_AUTO, false};

/* Copy the message, then record it again with a prefix. */
static s2_status fail_with_context(s2_ctx *ctx, s2_status st, const char *what)
{
    char msg[1536];
    snprintf(msg, sizeof msg, "%s", s2_ctx_message(ctx));
    return s2_fail(ctx, st, "%s: %s", what, msg);
}

/* A line of the cached manifest (untrusted bytes) for a message: at most 100
 * bytes, unprintable ones as '?'. */
static void quote_line(char *out, size_t cap, const char *line, size_t n)
{
    size_t i = 0;
    for (; i < n && i < 100 && i + 4 < cap; i++)
        out[i] = line[i] >= 0x20 && line[i] < 0x7f ? line[i] : '?';
    if (i < n && i + 4 < cap)
        memcpy(out + i, "...", 3), i += 3;
    out[i] = '\0';
}

/* Whether texts a (the cached cubin's manifest) and b (the request's) are
 * equal; if not, the first line that differs goes into why. */
static bool same_text(const char *a, size_t na, const char *b, size_t nb, char *why, size_t cap)
{
    for (int line = 1;; line++) {
        if (na == 0 && nb == 0)
            return true;
        const char *ea = na ? memchr(a, '\n', na) : NULL, *eb = nb ? memchr(b, '\n', nb) : NULL;
        size_t la = ea ? (size_t)(ea - a) : na, lb = eb ? (size_t)(eb - b) : nb;
        if (na == 0 || nb == 0 || la != lb || memcmp(a, b, la) != 0 || !ea != !eb) {
            char qa[112], qb[112];
            quote_line(qa, sizeof qa, a, la);
            quote_line(qb, sizeof qb, b, lb);
            snprintf(why, cap, "cached cubin's manifest line %d is \"%s\", the request's \"%s\"", line,
                     na ? qa : "(end)", nb ? qb : "(end)");
            return false;
        }
        size_t step = ea ? la + 1 : la;
        a += step, na -= step, b += step, nb -= step;
    }
}

/* Is the cubin's own manifest the one a build of this request embeds?  Then
 * it lists this pattern's kernels with every field of the spec and, per
 * record, every template option, symbol, ABI, grid rule and launch shape,
 * and the same resolved pattern (rules, ranges, mask bits).  A well-formed
 * entry of another key's contents, or of another spec or pattern stored
 * under this key, is not used: *same false and the reason in why. */
static s2_status check_manifest(s2_ctx *ctx, const void *cubin, size_t size, const s2_pattern *p,
                                const s2_kernel_spec *spec, bool *same, char *why, size_t cap)
{
    const char *text;
    size_t len;
    *same = false;
    if (s2_cubin_find_manifest(NULL, cubin, size, &text, &len) != S2_OK) {
        snprintf(why, cap, "the cached cubin has no manifest");
        return S2_OK;
    }
    while (len > 0 && text[len - 1] == '\0')
        len--;
    s2_kspec k = s2_kspec_of(spec, NULL);   /* what compile_cubin builds from */
    char *want = NULL;
    s2_status st = s2_compile_kspec_manifest(ctx, &p, 1, &k, &want);
    if (st == S2_OK)
        *same = same_text(text, len, want, strlen(want), why, cap);
    free(want);
    return st;
}

static s2_status compile_cubin(s2_ctx *ctx, const s2_pattern *p, const s2_kernel_spec *spec,
                               s2_cubin_backend backend, uint8_t **cubin, size_t *size)
{
    s2_artifact *art = NULL;
    s2_status st = s2_compile_attention(ctx, p, spec, backend, &art);
    if (st != S2_OK)
        return st;
    *cubin = art->cubin;
    *size = art->cubin_size;
    art->cubin = NULL;
    s2_artifact_free(art);
    return *cubin ? S2_OK : s2_fail(ctx, S2_ERR_INTERNAL, "compile produced no cubin");
}

static s2_status build_key(s2_ctx *ctx, const s2_pattern *p, const s2_kernel_spec *spec,
                           s2_cubin_backend backend, s2_cache_key *key)
{
    const char *toolchain = NULL;
    char *ptext = NULL;
    s2_status st = s2_toolchain_version(ctx, backend, &toolchain);
    if (st == S2_OK)
        st = s2_manifest_format(ctx, spec->arch, NULL, 0, &p, 1, &ptext);
    if (st == S2_OK) {
        s2_cache_key_desc d = {.pattern = ptext, .spec = spec, .toolchain = toolchain,
                               .arch = s2_arch_name((s2_arch)spec->arch)};
        st = s2_cache_key_build(ctx, &d, key);
    }
    free(ptext);
    return st;
}

/* Whether the cache holds a file for key: a lookup that misses although the
 * file is there found it corrupt. */
static bool entry_exists(const s2_cache *cache, const s2_cache_key *key)
{
    char hex[2 * S2_CACHE_KEY_BYTES + 1], path[4096];
    s2_cache_key_hex(key, hex);
    int n = snprintf(path, sizeof path, "%s/%s.s2ck", s2_cache_dir(cache), hex);
    return n > 0 && (size_t)n < sizeof path && access(path, F_OK) == 0;
}

/* skip_lookup: the caller found the cached image unusable. */
static s2_status fetch(s2_ctx *ctx, s2_arch arch, const s2_pattern *p, const s2_kernel_spec *spec_in,
                       const s2_jit_opts *o, bool skip_lookup, uint8_t **cubin, size_t *size, s2_jit_stats *stats)
{
    s2_kernel_spec spec = *spec_in;
    spec.arch = (int)arch;
    s2_status st = s2_kernel_spec_resolve(ctx, &spec, p);
    if (st != S2_OK)
        return st;
    stats->spec = spec;
    if (o->no_cache) {
        st = compile_cubin(ctx, p, &spec, o->backend, cubin, size);
        stats->compiled = st == S2_OK;
        return st;
    }

    s2_cache_key key;
    s2_cache *cache = NULL;
    if ((st = build_key(ctx, p, &spec, o->backend, &key)) != S2_OK)
        return fail_with_context(ctx, st, "jit: cache key");
    s2_cache_key_hex(&key, stats->key);
    if ((st = s2_cache_open_flags(ctx, o->cache_dir, o->trust_cache_dir ? S2_CACHE_TRUST_DIR : 0, &cache)) != S2_OK)
        return fail_with_context(ctx, st, "jit: cache");
    if (s2_cache_untrusted(cache)) {
        /* others could have written its entries: compile, read and write nothing */
        stats->cache_untrusted = true;
        snprintf(stats->note, sizeof stats->note, "%s", s2_cache_untrusted(cache));
        s2_cache_close(cache);
        st = compile_cubin(ctx, p, &spec, o->backend, cubin, size);
        stats->compiled = st == S2_OK;
        return st;
    }

    void *data = NULL;
    size_t n = 0;
    bool same = false;
    st = skip_lookup ? S2_ERR_NOT_FOUND : s2_cache_lookup(ctx, cache, &key, &data, &n);
    if (st == S2_ERR_NOT_FOUND && !skip_lookup && entry_exists(cache, &key))
        snprintf(stats->note, sizeof stats->note, "%s", s2_ctx_message(ctx));   /* why the entry was refused */
    if (st == S2_OK) {
        st = check_manifest(ctx, data, n, p, &spec, &same, stats->note, sizeof stats->note);
        if (st == S2_OK && same) {
            stats->hit = true;
            *cubin = data;
            *size = n;
            s2_cache_close(cache);
            return S2_OK;
        }
        stats->rebuilt = true;
        if (st == S2_OK)
            st = S2_ERR_NOT_FOUND;
    }
    free(data);
    if (st != S2_ERR_NOT_FOUND) {
        s2_cache_close(cache);
        return st;
    }
    stats->rebuilt |= skip_lookup || stats->note[0] != '\0';

    st = compile_cubin(ctx, p, &spec, o->backend, cubin, size);
    if (st == S2_OK) {
        stats->compiled = true;
        /* a cache that cannot be written costs speed, not the kernel */
        s2_ctx *scratch = s2_ctx_new();
        if (s2_cache_store(scratch, cache, &key, *cubin, *size) == S2_OK)
            stats->stored = true;
        else
            stats->store_failed = true;
        s2_ctx_free(scratch);
    }
    s2_cache_close(cache);
    return st;
}

static s2_status check_args(s2_ctx *ctx, const s2_pattern *p, const s2_kernel_spec *spec, const char *fn)
{
    if (!p || !spec)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "%s: %s is NULL", fn, !p ? "pattern" : "spec");
    return S2_OK;
}

s2_status s2_jit_fetch(s2_ctx *ctx, s2_arch arch, const s2_pattern *pattern, const s2_kernel_spec *spec,
                       const s2_jit_opts *opts, uint8_t **cubin, size_t *size, s2_jit_stats *stats)
{
    s2_jit_stats local;
    if (!stats)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    if (!cubin || !size)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_jit_fetch: output is NULL");
    *cubin = NULL;
    *size = 0;
    s2_status st = check_args(ctx, pattern, spec, "s2_jit_fetch");
    if (st != S2_OK)
        return st;
    return fetch(ctx, arch, pattern, spec, opts ? opts : &default_opts, false, cubin, size, stats);
}

s2_status s2_jit_compile(s2_ctx *ctx, s2_device *dev, const s2_pattern *pattern, const s2_kernel_spec *spec,
                         const s2_jit_opts *opts, s2_attn_kernel **out, s2_jit_stats *stats)
{
    s2_jit_stats local;
    if (!stats)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    if (!out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_jit_compile: out is NULL");
    *out = NULL;
    s2_status st = check_args(ctx, pattern, spec, "s2_jit_compile");
    if (st != S2_OK)
        return st;
    if (!dev)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_jit_compile: device is NULL");
    if (!opts)
        opts = &default_opts;
    const s2_device_info *info = s2_device_get_info(dev);
    s2_arch arch;
    if ((st = s2_arch_for_device(info->cc_major, info->cc_minor, &arch)) != S2_OK)
        return st;
    const char *pname = pattern->name ? pattern->name : "";
    char refused[sizeof stats->note] = "";
    for (int attempt = 0; attempt < 2; attempt++) {
        uint8_t *cubin = NULL;
        size_t size = 0;
        s2_jit_stats now = {0};
        st = fetch(ctx, arch, pattern, spec, opts, attempt > 0, &cubin, &size, &now);
        if (st == S2_OK)
            st = s2_attn_load(ctx, dev, cubin, size, pname, now.spec.dtype, now.spec.head_dim, out);
        free(cubin);
        now.rebuilt |= attempt > 0;
        if (attempt > 0 && !now.note[0])
            snprintf(now.note, sizeof now.note, "%s", refused);
        if (st != S2_OK)
            snprintf(refused, sizeof refused, "the cached cubin was refused: %s", s2_ctx_message(ctx));
        *stats = now;
        /* a cached image the driver refuses (made by another driver's
         * toolchain, say) is rebuilt once */
        if (st == S2_OK || !now.hit)
            break;
    }
    return st;
}
