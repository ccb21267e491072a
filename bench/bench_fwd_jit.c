/* bench_fwd: the kernel through the cache.  JIT, cold: a fresh temporary
 * kernel cache; key, miss, generate + optimise + PTX + cubin, store, module
 * load.  JIT, warm: a second cache handle on the same directory; key, hit,
 * module load.  The timed kernel is the one loaded from the cache. */
#include "compile_internal.h"
#include "bench_fwd.h"
#include "kernel_abi.h"
#include "rt_limits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void variant_free(variant *v)
{
    s2_cufunction_free(v->kern);
    s2_cumodule_free(v->mod);
    v->kern = NULL;
    v->mod = NULL;
}

static s2_status write_blob(const char *dir, const char *name, const char *ext, const void *data, size_t size)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
    FILE *f = fopen(path, "wb");
    if (!f)
        return S2_ERR_IO;
    size_t w = fwrite(data, 1, size, f);
    fclose(f);
    return w == size ? S2_OK : S2_ERR_IO;
}

/* Remove the files of a temporary cache directory, then the directory. */
static void remove_dir(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

s2_status jit_variant(s2_ctx *ctx, s2_device *dev, const config_data *cd, const s2_kspec *want,
                      const char *dump_dir, variant *v)
{
    memset(v, 0, sizeof *v);
    v->spec = *want;
    s2_status st = s2_kspec_resolve(ctx, &v->spec, cd->p);
    if (st != S2_OK)
        return st;
    char tag[160];
    snprintf(tag, sizeof tag, "%s_m%d_n%d_w%d_s%d%s_g%d", cd->cfg->name, v->spec.block_m, v->spec.block_n,
             v->spec.num_warps, v->spec.num_stages, v->spec.persistent > 0 ? "_p" : "", v->spec.kv_gather);
    char dir[] = "/tmp/s2c-bench-cache-XXXXXX";
    if (!mkdtemp(dir))
        return S2_ERR_IO;
    /* the pattern's serialization for the key: its manifest text */
    char *ptext = NULL;
    s2_kernel_spec pub = s2_kspec_public(&v->spec);
    s2_manifest_kernel mk = {.name = "k", .pattern = cd->p->name, .spec = pub, .threads = 0, .smem_bytes = 0};
    st = s2_manifest_format(ctx, v->spec.arch, &mk, 1, &cd->p, 1, &ptext);
    s2_cache *cache = NULL;
    s2_artifact *art = NULL;
    void *payload = NULL;
    size_t psize = 0;
    s2_manifest *man = NULL;

    /* cold */
    double t0 = now_ms();
    s2_cache_key key;
    s2_cache_key_desc kd = {.pattern = ptext, .spec = &pub, .arch = s2_arch_name((s2_arch)v->spec.arch)};
    if (st == S2_OK)
        st = s2_cache_open(ctx, dir, &cache);
    if (st == S2_OK)
        st = s2_cache_key_build(ctx, &kd, &key);
    if (st == S2_OK) {
        st = s2_cache_lookup(ctx, cache, &key, &payload, &psize);
        if (st == S2_OK) {
            fprintf(stderr, "a fresh cache directory gave a hit\n");
            st = S2_ERR_INTERNAL;
        } else if (st == S2_ERR_NOT_FOUND) {
            s2_ctx_clear(ctx);
            st = S2_OK;
        }
    }
    if (st == S2_OK)
        st = s2_compile_kspec1(ctx, cd->p, want, S2_CUBIN_AUTO, &art);   /* unresolved: the wide variant too */
    if (st == S2_OK)
        st = s2_cache_store(ctx, cache, &key, art->cubin, art->cubin_size);
    s2_cumodule *cold_mod = NULL;
    if (st == S2_OK)
        st = s2_cumodule_load_data(ctx, dev, art->cubin, art->cubin_size, &cold_mod);
    v->cold_ms = now_ms() - t0;
    s2_cumodule_free(cold_mod);
    s2_cache_close(cache);
    cache = NULL;
    if (st == S2_OK) {
        v->regs = art->kernels[0].registers;
        v->spill_st = art->kernels[0].spill_stores;
        v->spill_ld = art->kernels[0].spill_loads;
        v->stack = art->kernels[0].stack_frame;
        if (dump_dir) {
            write_blob(dump_dir, tag, "cubin", art->cubin, art->cubin_size);
            write_blob(dump_dir, tag, "ptx", art->ptx, art->ptx_len);
        }
    }

    /* warm: the launch shape comes from the cubin's own manifest */
    t0 = now_ms();
    if (st == S2_OK)
        st = s2_cache_open(ctx, dir, &cache);
    if (st == S2_OK)
        st = s2_cache_key_build(ctx, &kd, &key);
    if (st == S2_OK)
        st = s2_cache_lookup(ctx, cache, &key, &payload, &psize);
    if (st == S2_OK)
        st = s2_cumodule_load_data(ctx, dev, payload, psize, &v->mod);
    v->warm_ms = now_ms() - t0;
    const char *mtext = NULL;
    size_t mlen = 0;
    if (st == S2_OK)
        st = s2_cubin_find_manifest(ctx, payload, psize, &mtext, &mlen);
    if (st == S2_OK)
        st = s2_manifest_parse(ctx, mtext, mlen, &man);
    if (st == S2_OK && s2_manifest_num_kernels(man) != 1) {
        fprintf(stderr, "manifest with %d kernels\n", s2_manifest_num_kernels(man));
        st = S2_ERR_INTERNAL;
    }
    if (st == S2_OK) {
        const s2_manifest_kernel *k = s2_manifest_kernel_at(man, 0);
        snprintf(v->kname, sizeof v->kname, "%s", k->name);
        v->threads = k->threads;
        v->smem = k->smem_bytes;
        const s2_kernel_record *main = s2_manifest_kernel_fn(k, S2_ROLE_FWD);
        const s2_kernel_record *wide = s2_manifest_kernel_fn(k, S2_ROLE_FWD_WIDE);
        v->tma = main->abi != S2_ABI_FWD;
        v->persistent = main->grid == S2_GRID_PERSISTENT;
        v->fp8 = main->abi == S2_ABI_FWD_TMA_FP8;
        v->has_wide = wide != NULL;
        if (wide)
            v->wide = wide->spec;
        st = s2_cufunction_get(ctx, v->mod, v->kname, &v->kern);
    }
    if (st == S2_OK && v->persistent) {
        /* the runtime's grid: as many CTAs as fit at once, capped by the work items */
        const s2_manifest_kernel *k = s2_manifest_kernel_at(man, 0);
        s2_launch_dims all = {.n_work = INT32_MAX, .batch = 1};
        s2_kernel_use use = s2_rt_kernel_use(v->kern);
        s2_launch_facts f;
        st = s2_launch_facts_of(NULL, s2_manifest_kernel_fn(k, S2_ROLE_FWD), &all, s2_rt_device_limits(dev), &use, &f);
        v->grid_p = f.grid[0];
    }
    s2_manifest_free(man);
    free(payload);
    s2_cache_close(cache);
    s2_artifact_free(art);
    free(ptext);
    remove_dir(dir);
    if (st != S2_OK)
        variant_free(v);
    return st;
}
