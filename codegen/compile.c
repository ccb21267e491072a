/* The stage driver: IR -> PTX -> cubin with dumps and overrides, and the
 * artifact handed to callers. */
#include "cg_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void s2_target_default(s2_target *t, s2_arch arch)
{
    t->arch = arch;
    t->ptx_version = 0;
    t->opt_level = 3;
}

const char *s2_cubin_backend_name(s2_cubin_backend b)
{
    switch (b) {
    case S2_CUBIN_AUTO: return "auto";
    case S2_CUBIN_PTXAS: return "ptxas";
    case S2_CUBIN_NVJITLINK: return "nvJitLink";
    }
    return "?";
}

s2_artifact *s2_artifact_new(const s2_target *target, const char *name)
{
    s2_artifact *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->target = *target;
    a->name = strdup(name);
    if (!a->name) {
        free(a);
        return NULL;
    }
    return a;
}

void s2_artifact_free(s2_artifact *a)
{
    if (!a)
        return;
    free(a->name);
    free(a->ir_pre);
    free(a->ir);
    free(a->ptx);
    free(a->cubin);
    free(a->log);
    free(a->kernels);
    free(a->manifest);
    free(a);
}

/* ---- dump / override files ---- */

static char *stage_path(const char *dir, const char *name, const char *ext)
{
    size_t n = strlen(dir) + strlen(name) + strlen(ext) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s%s", dir, name, ext);
    return p;
}

static s2_status dump_stage(s2_ctx *ctx, const char *name, const char *ext, const void *data, size_t len)
{
    const char *dir = s2_ctx_dump_dir(ctx);
    if (!dir)
        return S2_OK;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return s2_fail(ctx, S2_ERR_IO, "cannot create dump directory %s: %s", dir, strerror(errno));
    char *path = stage_path(dir, name, ext);
    if (!path)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    s2_status st = s2_write_file_atomic(ctx, path, data, len);
    free(path);
    return st;
}

/* *data is NULL (and S2_OK) when there is no override for this stage. */
static s2_status read_override(s2_ctx *ctx, const char *name, const char *ext, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    const char *dir = s2_ctx_override_dir(ctx);
    if (!dir)
        return S2_OK;
    char *path = stage_path(dir, name, ext);
    if (!path)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    s2_status st = access(path, F_OK) == 0 ? s2_read_file(ctx, path, data, len) : S2_OK;
    free(path);
    return st;
}

static s2_status stage_ir(s2_ctx *ctx, s2_cg *cg, s2_artifact *art)
{
    s2_status st = s2_cg_verify(ctx, cg);
    if (st == S2_OK)
        st = s2_cg_print_ir(ctx, cg, &art->ir_pre);
    if (st == S2_OK)
        st = dump_stage(ctx, art->name, ".pre.ll", art->ir_pre, strlen(art->ir_pre));
    if (st != S2_OK)
        return st;

    char *over = NULL;
    size_t over_len = 0;
    st = read_override(ctx, art->name, ".ll", &over, &over_len);
    if (st != S2_OK)
        return st;
    if (over) {
        /* an override is the optimised IR: it goes to the back end as is */
        st = s2_cg_replace_module(ctx, cg, over, over_len);
        free(over);
    } else {
        st = s2_cg_optimize(ctx, cg);
        if (st == S2_OK)
            st = s2_cg_verify(ctx, cg);
    }
    if (st == S2_OK)
        st = s2_cg_print_ir(ctx, cg, &art->ir);
    if (st == S2_OK)
        st = dump_stage(ctx, art->name, ".ll", art->ir, strlen(art->ir));
    return st;
}

/* A stage's output is the override directory's file when there is one
 * (read_override leaves it NULL otherwise), else the stage makes it. */
static s2_status stage_ptx(s2_ctx *ctx, s2_cg *cg, s2_artifact *art)
{
    s2_status st = read_override(ctx, art->name, ".ptx", &art->ptx, &art->ptx_len);
    if (st == S2_OK && !art->ptx)
        st = s2_cg_emit_ptx(ctx, cg, &art->ptx, &art->ptx_len);
    return st == S2_OK ? dump_stage(ctx, art->name, ".ptx", art->ptx, art->ptx_len) : st;
}

/* An override cubin is taken as is: its resources are not assembled. */
static s2_status cubin_overridden(s2_ctx *ctx, s2_cubin_backend backend, s2_artifact *art)
{
    art->log = strdup("cubin taken from the override directory; resources not assembled");
    art->kernels = calloc(1, sizeof *art->kernels);
    if (!art->log || !art->kernels)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    s2_kernel_info *k = &art->kernels[0];
    art->num_kernels = 1;
    snprintf(k->name, sizeof k->name, "%s", art->name);
    k->registers = k->spill_stores = k->spill_loads = k->stack_frame = k->shared_static = -1;
    k->elf_registers = s2_cubin_regcount(art->cubin, art->cubin_size, art->name);
    art->backend_used = backend;
    return S2_OK;
}

static s2_status stage_cubin(s2_ctx *ctx, s2_cubin_backend backend, s2_artifact *art)
{
    char *over = NULL;
    s2_status st = read_override(ctx, art->name, ".cubin", &over, &art->cubin_size);
    art->cubin = (uint8_t *)over;
    if (st == S2_OK)
        st = over ? cubin_overridden(ctx, backend, art)
                  : s2_ptx_to_cubin(ctx, art->ptx, art->ptx_len, art->target.arch, backend, &art->cubin,
                                    &art->cubin_size, &art->log, &art->kernels, &art->num_kernels,
                                    &art->backend_used);
    return st == S2_OK ? dump_stage(ctx, art->name, ".cubin", art->cubin, art->cubin_size) : st;
}

s2_status s2_cg_finish(s2_ctx *ctx, s2_cg *cg, s2_cubin_backend backend, s2_artifact *art)
{
    s2_status st = stage_ir(ctx, cg, art);
    if (st == S2_OK)
        st = stage_ptx(ctx, cg, art);
    if (st == S2_OK)
        st = stage_cubin(ctx, backend, art);
    return st;
}

s2_status s2_cg_add_text_global(s2_ctx *ctx, s2_cg *cg, const char *name, const char *text)
{
    size_t n = strlen(text);
    if (n > UINT32_MAX - 1)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "global %s too large", name);
    LLVMValueRef init = LLVMConstStringInContext2(cg->llctx, text, n, 0);
    LLVMValueRef g = LLVMAddGlobalInAddressSpace(cg->mod, LLVMTypeOf(init), name, S2_AS_GLOBAL);
    LLVMSetInitializer(g, init);
    LLVMSetGlobalConstant(g, 1);
    LLVMSetLinkage(g, LLVMExternalLinkage);
    LLVMSetAlignment(g, 1);
    return S2_OK;
}
