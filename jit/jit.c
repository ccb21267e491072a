/* The JIT: spec resolution, the cache key, compile-or-fetch, and loading
 * (s2c/jit.h). */
#include "s2c/jit.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const s2_jit_opts default_opts = {NULL, false, S2_CUBIN_AUTO};

/* Copy the message, then record it again with a prefix. */
static s2_status fail_with_context(s2_ctx *ctx, s2_status st, const char *what)
{
    char msg[1536];
    snprintf(msg, sizeof msg, "%s", s2_ctx_message(ctx));
    return s2_fail(ctx, st, "%s: %s", what, msg);
}

static bool spec_equal(const s2_kernel_spec *a, const s2_kernel_spec *b)
{
    return a->kind == b->kind && a->dtype == b->dtype && a->head_dim == b->head_dim && a->arch == b->arch &&
           a->block_m == b->block_m && a->block_n == b->block_n && a->num_warps == b->num_warps &&
           a->num_stages == b->num_stages;
}

/* A range rule's heads: NULL selects every head. */
static bool range_head(const s2_range_rule *r, int q) { return !r->heads || r->heads[q] != 0; }

/* The resolved pattern a kernel is built from, field by field: every head's
 * rule, every range and every mask's bits (a pattern of the same name with
 * another vert_stride is another kernel). */
static bool resolved_equal(const s2_pattern *a, const s2_pattern *b)
{
    if (!a || !b || a->heads != b->heads || a->kv_heads != b->kv_heads || a->block_size != b->block_size ||
        a->causal != b->causal || a->max_seq_len != b->max_seq_len || a->vert_position != b->vert_position ||
        a->num_ranges != b->num_ranges || a->num_masks != b->num_masks || !a->rules || !b->rules)
        return false;
    for (int q = 0; q < a->heads; q++) {
        const s2_head_rule *x = &a->rules[q], *y = &b->rules[q];
        if (x->dense != y->dense || x->local_left != y->local_left || x->local_right != y->local_right ||
            x->vert_stride != y->vert_stride || x->shift != y->shift || x->mask != y->mask ||
            (x->mask >= 0 && x->mask_head != y->mask_head))
            return false;
    }
    for (int i = 0; i < a->num_ranges; i++) {
        const s2_range_rule *x = &a->ranges[i], *y = &b->ranges[i];
        if (x->action != y->action || x->key_lo != y->key_lo || x->key_hi != y->key_hi || x->dist_lo != y->dist_lo ||
            x->dist_hi != y->dist_hi || x->stride != y->stride)
            return false;
        for (int q = 0; q < a->heads; q++)
            if (range_head(x, q) != range_head(y, q))
                return false;
    }
    for (int i = 0; i < a->num_masks; i++) {
        const s2_block_mask *x = &a->masks[i], *y = &b->masks[i];
        if (x->heads != y->heads || x->rows != y->rows || x->cols != y->cols ||
            memcmp(x->bits, y->bits, (size_t)(x->heads * x->rows * x->cols)) != 0)
            return false;
    }
    return true;
}

/* Does the cubin's own manifest list this pattern's kernel with this spec,
 * built from the same resolved pattern?  (A well-formed entry of another
 * key's contents, or another pattern's under this one's key, must not be used.) */
static bool cubin_has_kernel(const void *cubin, size_t size, const s2_pattern *p, const s2_kernel_spec *spec)
{
    const char *pattern = p->name ? p->name : "";
    const char *text;
    size_t len;
    s2_manifest *m = NULL;
    if (s2_cubin_find_manifest(NULL, cubin, size, &text, &len) != S2_OK ||
        s2_manifest_parse(NULL, text, len, &m) != S2_OK)
        return false;
    bool found = false;
    for (int i = 0; i < s2_manifest_num_kernels(m) && !found; i++) {
        const s2_manifest_kernel *k = s2_manifest_kernel_at(m, i);
        found = !strcmp(k->pattern, pattern) && spec_equal(&k->spec, spec) &&
                resolved_equal(p, s2_manifest_find_pattern(m, k->pattern));
    }
    s2_manifest_free(m);
    return found;
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
    if ((st = s2_cache_open(ctx, o->cache_dir, &cache)) != S2_OK)
        return fail_with_context(ctx, st, "jit: cache");

    void *data = NULL;
    size_t n = 0;
    st = skip_lookup ? S2_ERR_NOT_FOUND : s2_cache_lookup(ctx, cache, &key, &data, &n);
    if (st == S2_OK && cubin_has_kernel(data, n, p, &spec)) {
        stats->hit = true;
        *cubin = data;
        *size = n;
        s2_cache_close(cache);
        return S2_OK;
    }
    free(data);
    if (st != S2_OK && st != S2_ERR_NOT_FOUND) {
        s2_cache_close(cache);
        return st;
    }
    stats->rebuilt = skip_lookup || st == S2_OK || entry_exists(cache, &key);

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
    for (int attempt = 0; attempt < 2; attempt++) {
        uint8_t *cubin = NULL;
        size_t size = 0;
        s2_jit_stats now = {0};
        st = fetch(ctx, arch, pattern, spec, opts, attempt > 0, &cubin, &size, &now);
        if (st == S2_OK)
            st = s2_attn_load(ctx, dev, cubin, size, pname, now.spec.dtype, now.spec.head_dim, out);
        free(cubin);
        now.rebuilt |= attempt > 0;
        *stats = now;
        /* a cached image the driver refuses (made by another driver's
         * toolchain, say) is rebuilt once */
        if (st == S2_OK || !now.hit)
            break;
    }
    return st;
}
