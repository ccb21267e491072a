/* Modules (cubin, fatbin, PTX), kernels, their attributes, and launches. */
#include "rt_internal.h"
#include "rt_limits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cuModuleLoadData takes no size: binary images carry theirs in a header,
 * PTX must end in a NUL. */
static bool is_binary_image(const unsigned char *p, size_t size)
{
    static const unsigned char elf[4] = {0x7f, 'E', 'L', 'F'};
    static const unsigned char fatbin[4] = {0x50, 0xed, 0x55, 0xba}; /* 0xba55ed50 LE */
    return size >= 4 && (memcmp(p, elf, 4) == 0 || memcmp(p, fatbin, 4) == 0);
}

s2_status s2_cumodule_load_data(s2_ctx *ctx, s2_device *dev, const void *image, size_t size,
                              s2_cumodule **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cumodule_load_data: out is NULL");
    *out = NULL;
    if (!dev || !image || size == 0)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cumodule_load_data: %s",
                       !dev ? "device is NULL" : "empty image");
    const unsigned char *bytes = image;
    char *text = NULL;
    if (!is_binary_image(bytes, size) && !memchr(bytes, 0, size)) {
        text = malloc(size + 1);
        if (!text)
            return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
        memcpy(text, bytes, size);
        text[size] = '\0';
        image = text;
    }
    s2_cumodule *mod = calloc(1, sizeof *mod);
    s2_status st = S2_OK;
    if (!mod) {
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
        goto done;
    }
    mod->dev = dev;
    if ((st = s2_cucontext_enter(ctx, dev)) != S2_OK)
        goto done;
    CUresult r = dev->drv->ModuleLoadData(&mod->cu_mod, image);
    s2_cucontext_leave(dev);
    if (r != CUDA_SUCCESS) {
        st = s2_cu_fail(ctx, dev->drv, r, "cuModuleLoadData (%zu-byte %s image)", size,
                        is_binary_image(bytes, size) ? "binary" : "PTX");
        goto done;
    }
    *out = mod;
    mod = NULL;
done:
    free(mod);
    free(text);
    return st;
}

void s2_cumodule_free(s2_cumodule *mod)
{
    if (!mod)
        return;
    if (mod->cu_mod && s2_cucontext_enter(NULL, mod->dev) == S2_OK) {
        mod->dev->drv->ModuleUnload(mod->cu_mod);
        s2_cucontext_leave(mod->dev);
    }
    free(mod);
}

static s2_status read_attrs(s2_ctx *ctx, s2_cufunction *k)
{
    const s2_cuda_api *d = k->dev->drv;
    s2_cufunction_attrs *a = &k->attrs;
#define S2_FATTR(attr, field)                                                              \
    do {                                                                                   \
        CUresult r_ = d->FuncGetAttribute(&(field), CU_FUNC_ATTRIBUTE_##attr, k->fn);       \
        if (r_ != CUDA_SUCCESS)                                                            \
            return s2_cu_fail(ctx, d, r_, "cuFuncGetAttribute(" #attr ") of kernel %s", k->name); \
    } while (0)
    S2_FATTR(NUM_REGS, a->num_regs);
    S2_FATTR(MAX_THREADS_PER_BLOCK, a->max_threads_per_block);
    S2_FATTR(SHARED_SIZE_BYTES, a->static_smem_bytes);
    S2_FATTR(LOCAL_SIZE_BYTES, a->local_bytes);
    S2_FATTR(CONST_SIZE_BYTES, a->const_bytes);
    S2_FATTR(MAX_DYNAMIC_SHARED_SIZE_BYTES, a->max_dynamic_smem_bytes);
    S2_FATTR(PTX_VERSION, a->ptx_version);
    S2_FATTR(BINARY_VERSION, a->binary_version);
#undef S2_FATTR
    return S2_OK;
}

s2_status s2_cufunction_get(s2_ctx *ctx, s2_cumodule *mod, const char *name, s2_cufunction **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cufunction_get: out is NULL");
    *out = NULL;
    if (!mod || !name)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cufunction_get: %s is NULL", !mod ? "module" : "name");
    const s2_cuda_api *d = mod->dev->drv;
    s2_cufunction *k = calloc(1, sizeof *k);
    if (!k)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    k->dev = mod->dev;
    k->name = strdup(name);
    if (!k->name || mtx_init(&k->raise_lock, mtx_plain) != thrd_success) {
        free(k->name);
        free(k);
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    s2_status st = s2_cucontext_enter(ctx, k->dev);
    if (st != S2_OK)
        goto fail;
    CUresult r = d->ModuleGetFunction(&k->fn, mod->cu_mod, name);
    if (r == CUDA_SUCCESS)
        st = read_attrs(ctx, k);
    s2_cucontext_leave(k->dev);
    if (r == CUDA_ERROR_NOT_FOUND) {
        st = s2_cu_fail_as(ctx, S2_ERR_NOT_FOUND, d, r, "the module has no kernel named \"%s\"", name);
        goto fail;
    }
    if (r != CUDA_SUCCESS) {
        st = s2_cu_fail(ctx, d, r, "cuModuleGetFunction(\"%s\")", name);
        goto fail;
    }
    if (st != S2_OK)
        goto fail;
    atomic_init(&k->dyn_limit, k->attrs.max_dynamic_smem_bytes);
    *out = k;
    return S2_OK;
fail:
    s2_cufunction_free(k);
    return st;
}

void s2_cufunction_free(s2_cufunction *k)
{
    if (!k)
        return;
    mtx_destroy(&k->raise_lock);
    free(k->name);
    free(k);
}

const char *s2_cufunction_name(const s2_cufunction *k) { return k ? k->name : NULL; }

s2_kernel_use s2_rt_kernel_use(const s2_cufunction *k)
{
    return k ? (s2_kernel_use){k->attrs.num_regs, k->attrs.static_smem_bytes} : (s2_kernel_use){0, 0};
}

s2_status s2_cufunction_get_attrs(s2_ctx *ctx, s2_cufunction *k, s2_cufunction_attrs *out)
{
    if (!k || !out)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cufunction_get_attrs: NULL argument");
    *out = k->attrs;
    out->max_dynamic_smem_bytes = atomic_load(&k->dyn_limit);
    return S2_OK;
}

static s2_status check_dims(s2_ctx *ctx, const s2_cufunction *k, const s2_launch_cfg *cfg)
{
    const s2_device_info *in = &k->dev->info;
    static const char axis[3] = {'x', 'y', 'z'};
    uint64_t threads = 1;
    for (int i = 0; i < 3; i++) {
        if (cfg->grid[i] == 0 || cfg->block[i] == 0)
            return s2_fail(ctx, S2_ERR_INVALID, "launch of %s: %s.%c is 0", k->name,
                           cfg->grid[i] == 0 ? "grid" : "block", axis[i]);
        if (cfg->grid[i] > (uint32_t)in->max_grid_dim[i])
            return s2_fail(ctx, S2_ERR_INVALID, "launch of %s: grid.%c = %u exceeds the device's %d",
                           k->name, axis[i], cfg->grid[i], in->max_grid_dim[i]);
        if (cfg->block[i] > (uint32_t)in->max_block_dim[i])
            return s2_fail(ctx, S2_ERR_INVALID, "launch of %s: block.%c = %u exceeds the device's %d",
                           k->name, axis[i], cfg->block[i], in->max_block_dim[i]);
        threads *= cfg->block[i];
    }
    if (threads > (uint64_t)k->attrs.max_threads_per_block)
        return s2_fail(ctx, S2_ERR_INVALID,
                       "launch of %s: %llu threads per block, the kernel allows %d", k->name,
                       (unsigned long long)threads, k->attrs.max_threads_per_block);
    return S2_OK;
}

/* The limit only ever grows, under a lock, so that a launch that raised it
 * cannot have it lowered by a concurrent smaller one before it runs. */
static s2_status raise_smem_limit(s2_ctx *ctx, s2_cufunction *k, uint32_t smem)
{
    uint64_t optin = k->dev->info.smem_per_block_optin;
    uint64_t need = (uint64_t)smem + (uint64_t)k->attrs.static_smem_bytes;
    if (need > optin)
        return s2_fail(ctx, S2_ERR_INVALID,
                       "launch of %s: %u bytes of dynamic + %d of static shared memory exceed the "
                       "device's %llu per block (opt-in maximum)",
                       k->name, smem, k->attrs.static_smem_bytes, (unsigned long long)optin);
    if ((int64_t)smem <= atomic_load(&k->dyn_limit))
        return S2_OK;
    s2_status st = S2_OK;
    mtx_lock(&k->raise_lock);
    if ((int64_t)smem > atomic_load(&k->dyn_limit)) {
        CUresult r = k->dev->drv->FuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                   (int)smem);
        if (r == CUDA_SUCCESS)
            atomic_store(&k->dyn_limit, (int)smem);
        else
            st = s2_cu_fail(ctx, k->dev->drv, r,
                            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES = %u) of kernel %s",
                            smem, k->name);
    }
    mtx_unlock(&k->raise_lock);
    return st;
}

s2_status s2_cufunction_launch(s2_ctx *ctx, s2_cufunction *k, const s2_launch_cfg *cfg, void **args)
{
    if (!k || !cfg)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cufunction_launch: %s is NULL", !k ? "kernel" : "cfg");
    s2_status st = check_dims(ctx, k, cfg);
    if (st != S2_OK)
        return st;
    bool pushed = false;
    if ((st = s2_cucontext_use(ctx, k->dev, &pushed)) != S2_OK)
        return st;
    st = raise_smem_limit(ctx, k, cfg->smem_bytes);
    if (st == S2_OK) {
        CUresult r = k->dev->drv->LaunchKernel(k->fn, cfg->grid[0], cfg->grid[1], cfg->grid[2],
                                               cfg->block[0], cfg->block[1], cfg->block[2],
                                               cfg->smem_bytes, (CUstream)cfg->stream, args, NULL);
        if (r != CUDA_SUCCESS)
            st = s2_cu_fail(ctx, k->dev->drv, r,
                            "cuLaunchKernel(%s, grid %ux%ux%u, block %ux%ux%u, smem %u)", k->name,
                            cfg->grid[0], cfg->grid[1], cfg->grid[2], cfg->block[0], cfg->block[1],
                            cfg->block[2], cfg->smem_bytes);
    }
    s2_cucontext_done(k->dev, pushed);
    return st;
}

s2_status s2_rt_kernel_reserve_smem(s2_ctx *ctx, s2_cufunction *k, uint32_t smem)
{
    bool pushed = false;
    s2_status st = s2_cucontext_use(ctx, k->dev, &pushed);
    if (st == S2_OK)
        st = raise_smem_limit(ctx, k, smem);
    s2_cucontext_done(k->dev, pushed);
    return st;
}
