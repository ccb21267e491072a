/* Loading NCCL with dlopen (common/dl.c), as runtime/cuda_api.c loads the CUDA driver: the
 * result, good or bad, is computed once per process and replayed. */
#include "nccl_api.h"
#include "s2c/cp.h"
#include "util.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <threads.h>

#define S2_DEFAULT_LIBNCCL "libnccl.so.2"

static struct {
    s2_nccl_api api;
    s2_dl_state dl;
} g_nccl;
static once_flag g_nccl_once = ONCE_FLAG_INIT;

static void load_nccl(void)
{
    const char *lib = s2_dl_name("S2C_LIBNCCL", S2_DEFAULT_LIBNCCL);
    void *h = s2_dl_open(&g_nccl.dl, S2_ERR_UNSUPPORTED, "NCCL", lib);
    if (!h)
        return;
    void *fn;
#define S2_NCCL_RESOLVE(name, ret, args)                                                                          \
    if (!(fn = dlsym(h, "nccl" #name))) {                                                                    \
        s2_dl_fail(&g_nccl.dl, S2_ERR_UNSUPPORTED, "NCCL %s does not provide nccl" #name, lib);              \
        return;                                                                                              \
    }                                                                                                        \
    *(void **)&g_nccl.api.name = fn;
    S2_NCCL_FUNCS(S2_NCCL_RESOLVE)
#undef S2_NCCL_RESOLVE
    if (g_nccl.api.GetVersion(&g_nccl.api.version) != ncclSuccess)
        g_nccl.api.version = 0;
}

const s2_nccl_api *s2_nccl_api_get(s2_ctx *ctx, s2_status *st)
{
    call_once(&g_nccl_once, load_nccl);
    *st = s2_dl_status(ctx, &g_nccl.dl);
    return *st == S2_OK ? &g_nccl.api : NULL;
}

s2_status s2_nccl_fail(s2_ctx *ctx, const s2_nccl_api *n, ncclResult_t r, const char *what)
{
    const char *s = n->GetErrorString ? n->GetErrorString(r) : NULL;
    return s2_fail(ctx, S2_ERR_CUDA, "%s: %s (NCCL code %d)", what, s ? s : "unknown NCCL error", (int)r);
}

s2_status s2_nccl_version(s2_ctx *ctx, int *version)
{
    call_once(&g_nccl_once, load_nccl);
    return s2_dl_version(ctx, &g_nccl.dl, g_nccl.api.version, version);
}
