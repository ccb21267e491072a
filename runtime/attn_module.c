/* Attention modules: a generated cubin, its manifest and kernels; lookup
 * and introspection (s2c/attn_runtime.h). */
#include "arch.h"
#include "attn_internal.h"
#include "rt_limits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The longest kv_len whose layout the pattern allows and the kernel's i32
 * lengths hold. */
static int64_t max_kv_len_of(const s2_pattern *p)
{
    int64_t lim = s2_layout_max_kv_len(p);
    return lim < INT32_MAX ? lim : INT32_MAX;
}

void s2_attn_module_free(s2_attn_module *mod)
{
    if (!mod)
        return;
    for (int i = 0; mod->kernels && i < mod->num_kernels; i++) {
        s2_attn_kernel *k = &mod->kernels[i];
        s2_lru_clear(&k->cache);
        if (k->lock_ok)
            mtx_destroy(&k->lock);
        for (int j = 0; j < S2_ROLE_COUNT_; j++)
            s2_cufunction_free(k->fns[j]);
        s2_rt_decode_free(k);
    }
    free(mod->kernels);
    s2_cumodule_free(mod->cu);
    s2_manifest_free(mod->manifest);
    free(mod);
}

static s2_status init_kernel(s2_ctx *ctx, s2_attn_module *mod, int i)
{
    s2_attn_kernel *k = &mod->kernels[i];
    const s2_manifest_kernel *d = s2_manifest_kernel_at(mod->manifest, i);
    k->mod = mod;
    k->desc = d;
    k->pattern = s2_manifest_find_pattern(mod->manifest, d->pattern);
    if (!k->pattern)
        return s2_fail(ctx, S2_ERR_PARSE, "manifest: kernel %s names unknown pattern '%s'", d->name, d->pattern);
    if ((d->spec.kind != S2_KERNEL_FWD && d->spec.kind != S2_KERNEL_BWD && d->spec.kind != S2_KERNEL_DECODE) || d->threads != 32 * d->spec.num_warps || d->spec.block_m < 16 ||
        d->spec.block_n < 16)
        return s2_fail(ctx, S2_ERR_PARSE, "manifest: kernel %s has an inconsistent launch shape", d->name);
    k->max_kv_len = max_kv_len_of(k->pattern);
    if (mtx_init(&k->lock, mtx_plain) != thrd_success)
        return s2_fail(ctx, S2_ERR_NOMEM, "cannot create a mutex");
    k->lock_ok = true;
    /* every kernel of the entry, by role, as its record names it */
    for (int j = 0; j < d->num_fns; j++) {
        const s2_kernel_record *r = &d->fns[j];
        k->rec[r->role] = r;
        s2_status st = s2_rt_argmap_build(ctx, r->abi, &k->argmap[r->role]);
        if (st == S2_OK)
            st = s2_cufunction_get(ctx, mod->cu, r->symbol, &k->fns[r->role]);
        if (st != S2_OK)
            return st;
        k->use[r->role] = s2_rt_kernel_use(k->fns[r->role]);
    }
    const s2_kernel_record *w = k->rec[S2_ROLE_FWD_WIDE];
    if (w && (w->threads != 32 * w->spec.num_warps || w->spec.kv_gather < 1 || w->spec.block_n % w->spec.kv_gather ||
              k->rec[S2_ROLE_FWD]->abi != S2_ABI_FWD_TMA))
        return s2_fail(ctx, S2_ERR_PARSE, "manifest: kernel %s has an inconsistent wide variant", d->name);
    if (d->spec.kind == S2_KERNEL_DECODE)
        return s2_rt_decode_init(ctx, k);
    s2_rt_sched_cache_init(k);
    return S2_OK;
}

s2_status s2_attn_module_load(s2_ctx *ctx, s2_device *dev, const void *image, size_t size,
                              s2_attn_module **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_module_load: out is NULL");
    *out = NULL;
    if (!dev || !image || size == 0)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_module_load: %s", !dev ? "device is NULL" : "empty image");
    const char *text = NULL;
    size_t len = 0;
    s2_status st = s2_cubin_find_manifest(ctx, image, size, &text, &len);
    if (st != S2_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", s2_ctx_message(ctx));
        return s2_fail(ctx, st, "not a generated attention cubin: %s", msg);
    }
    s2_attn_module *mod = calloc(1, sizeof *mod);
    if (!mod)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    mod->dev = dev;
    const char *chk = getenv("S2C_CHECK_DECODE");
    mod->check_decode = chk && *chk && strcmp(chk, "0") != 0;
    if ((st = s2_manifest_parse(ctx, text, len, &mod->manifest)) != S2_OK)
        goto fail;
    int n = s2_manifest_num_kernels(mod->manifest);
    if (n < 1) {
        st = s2_fail(ctx, S2_ERR_PARSE, "manifest lists no kernel");
        goto fail;
    }
    if (!(mod->kernels = calloc((size_t)n, sizeof *mod->kernels))) {
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
        goto fail;
    }
    mod->num_kernels = n;
    if ((st = s2_cumodule_load_data(ctx, dev, image, size, &mod->cu)) != S2_OK)
        goto fail;
    for (int i = 0; i < n; i++)
        if ((st = init_kernel(ctx, mod, i)) != S2_OK)
            goto fail;
    *out = mod;
    return S2_OK;
fail:
    s2_attn_module_free(mod);
    return st;
}

/* A failure is prefixed with the path, which the driver's message alone does not name. */
s2_status s2_attn_module_load_file(s2_ctx *ctx, s2_device *dev, const char *path, s2_attn_module **out)
{
    if (out)
        *out = NULL;
    if (!path)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_module_load_file: path is NULL");
    char *data = NULL;
    size_t len = 0;
    s2_status st = s2_read_file(ctx, path, &data, &len);
    if (st != S2_OK)
        return st;
    st = s2_attn_module_load(ctx, dev, data, len, out);
    free(data);
    return st == S2_OK ? st : s2_fail_prefix(ctx, st, path);
}

/* Can a cubin built for arch run on a device of compute capability cc
 * (major * 10 + minor)?  SASS runs on its own major at the same or a higher
 * minor; the sm_90a features only on 9.0. */
static bool arch_runs_on(s2_arch arch, int cc)
{
    int sm = s2_arch_sm(arch);
    if (arch == S2_ARCH_SM90A)
        return cc == 90;
    return sm / 10 == cc / 10 && sm <= cc;
}

s2_status s2_attn_module_load_best(s2_ctx *ctx, s2_device *dev, const char *const *paths, int n, s2_attn_module **out)
{
    if (out)
        *out = NULL;
    if (!dev || !paths || n < 1 || !out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_module_load_best: a null argument or no path");
    const s2_device_info *info = s2_device_get_info(dev);
    int cc = info->cc_major * 10 + info->cc_minor;
    int best = -1, best_rank = -1;
    char *best_data = NULL;   /* the image of paths[best], loaded once chosen */
    size_t best_len = 0;
    char tried[1024] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        char *data = NULL;
        size_t len = 0;
        const char *text = NULL;
        size_t tlen = 0;
        s2_manifest *m = NULL;
        s2_status st = paths[i] ? s2_read_file(ctx, paths[i], &data, &len) : S2_ERR_NULL_ARG;
        if (st == S2_OK)
            st = s2_cubin_find_manifest(ctx, data, len, &text, &tlen);
        if (st == S2_OK)
            st = s2_manifest_parse(ctx, text, tlen, &m);
        if (st != S2_OK) {
            free(data);
            free(best_data);
            return s2_fail_prefix(ctx, st, paths[i] ? paths[i] : "(null path)");
        }
        s2_arch arch = (s2_arch)s2_manifest_arch(m);
        /* the newest that runs: sm_90a above sm_90 above sm_80 */
        int rank = arch_runs_on(arch, cc) ? s2_arch_sm(arch) * 2 + (arch == S2_ARCH_SM90A) : -1;
        int w = snprintf(tried + used, sizeof tried - used, "%s%s (%s)", used ? ", " : "", paths[i],
                         s2_arch_cpu(arch) ? s2_arch_cpu(arch) : "?");
        used = w < 0 ? used : used + (size_t)w < sizeof tried ? used + (size_t)w : sizeof tried - 1;
        s2_manifest_free(m);
        if (rank > best_rank) {
            free(best_data);
            best = i, best_rank = rank, best_data = data, best_len = len;
        } else {
            free(data);
        }
    }
    if (best_rank < 0) {
        free(best_data);
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "none of the modules runs on %s (sm_%d): %s", info->name, cc, tried);
    }
    s2_status st = s2_attn_module_load(ctx, dev, best_data, best_len, out);
    free(best_data);
    return st == S2_OK ? st : s2_fail_prefix(ctx, st, paths[best]);
}

const s2_manifest *s2_attn_module_manifest(const s2_attn_module *mod) { return mod ? mod->manifest : NULL; }
int s2_attn_module_num_kernels(const s2_attn_module *mod) { return mod ? mod->num_kernels : 0; }

s2_attn_kernel *s2_attn_module_kernel_at(const s2_attn_module *mod, int i)
{
    return mod && i >= 0 && i < mod->num_kernels ? &mod->kernels[i] : NULL;
}

static bool kernel_matches(const s2_attn_kernel *k, const char *pattern, s2_dtype dtype, int head_dim)
{
    return (!pattern || !strcmp(k->desc->pattern, pattern)) && k->desc->spec.dtype == dtype &&
           k->desc->spec.head_dim == head_dim;
}

s2_status s2_attn_find(s2_ctx *ctx, const s2_attn_module *mod, const char *pattern, s2_dtype dtype,
                       int head_dim, s2_attn_kernel **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_find: out is NULL");
    *out = NULL;
    if (!mod)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_find: module is NULL");
    for (int i = 0; i < mod->num_kernels; i++)
        if (kernel_matches(&mod->kernels[i], pattern, dtype, head_dim)) {
            *out = &mod->kernels[i];
            return S2_OK;
        }
    s2_buf have;
    s2_buf_init(&have);
    for (int i = 0; i < mod->num_kernels; i++) {
        const s2_manifest_kernel *d = mod->kernels[i].desc;
        s2_buf_printf(&have, "%s%s (%s, %s, d%d)", i ? ", " : "", d->name, d->pattern, s2_dtype_name(d->spec.dtype),
                      d->spec.head_dim);
    }
    s2_fail(ctx, S2_ERR_NOT_FOUND, "no kernel for pattern '%s', %s, head_dim %d; the module has: %s",
            pattern ? pattern : "(any)", s2_dtype_name(dtype), head_dim, have.data ? have.data : "");
    s2_buf_free(&have);
    return S2_ERR_NOT_FOUND;
}

s2_status s2_attn_load(s2_ctx *ctx, s2_device *dev, const void *image, size_t size, const char *pattern,
                       s2_dtype dtype, int head_dim, s2_attn_kernel **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_load: out is NULL");
    *out = NULL;
    s2_attn_module *mod = NULL;
    s2_status st = s2_attn_module_load(ctx, dev, image, size, &mod);
    if (st == S2_OK)
        st = s2_attn_find(ctx, mod, pattern, dtype, head_dim, out);
    if (st != S2_OK) {
        s2_attn_module_free(mod);
        return st;
    }
    mod->standalone = true;
    return S2_OK;
}

void s2_attn_kernel_free(s2_attn_kernel *k)
{
    if (k && k->mod->standalone)
        s2_attn_module_free(k->mod);
}

const s2_manifest_kernel *s2_attn_kernel_desc(const s2_attn_kernel *k) { return k ? k->desc : NULL; }
const s2_pattern *s2_attn_kernel_pattern(const s2_attn_kernel *k) { return k ? k->pattern : NULL; }
s2_cufunction *s2_attn_kernel_cufunction(const s2_attn_kernel *k) { return k ? k->fns[S2_ROLE_FWD] : NULL; }
int64_t s2_attn_kernel_max_kv_len(const s2_attn_kernel *k) { return k ? k->max_kv_len : 0; }

void s2_attn_kernel_sched_stats(s2_attn_kernel *k, s2_attn_sched_stats *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!k)
        return;
    mtx_lock(&k->lock);
    out->wide = atomic_load(&k->n_wide);
    out->ds_chunked = atomic_load(&k->n_ds_chunked);
    out->dq_paired = atomic_load(&k->n_dq_paired);
    out->hits = k->cache.hits;
    out->misses = k->cache.misses;
    out->evictions = k->cache.evictions;
    /* decode's kept-block lists are not counted as held schedules */
    out->cached = k->desc->spec.kind == S2_KERNEL_DECODE ? 0 : k->cache.held;
    mtx_unlock(&k->lock);
}

