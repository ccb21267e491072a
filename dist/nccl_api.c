/* Loading NCCL with dlopen, as runtime/cuda_api.c loads the CUDA driver: the
 * result, good or bad, is computed once per process and replayed. */
#include "nccl_api.h"
#include "util.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <threads.h>

#define S2_DEFAULT_LIBNCCL "libnccl.so.2"

static struct {
    s2_nccl_api api;
    s2_status status;
    char message[512];
} g_nccl;
static once_flag g_nccl_once = ONCE_FLAG_INIT;

static const char *libnccl_name(void)
{
    /* a deployment or test may name another library */
    const char *name = secure_getenv("S2C_LIBNCCL");
    return name && *name ? name : S2_DEFAULT_LIBNCCL;
}

static void load_nccl(void)
{
    const char *lib = libnccl_name();
    /* never closed: the table points into the library for the rest of the process */
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(g_nccl.message, sizeof g_nccl.message, "cannot load NCCL %s: %s", lib, why ? why : "unknown error");
        g_nccl.status = S2_ERR_UNSUPPORTED;
        return;
    }
    void *fn;
#define S2_NCCL_RESOLVE(name, ret, args)                                                                          \
    if (!(fn = dlsym(h, "nccl" #name))) {                                                                    \
        snprintf(g_nccl.message, sizeof g_nccl.message, "NCCL %s does not provide nccl" #name, lib);          \
        g_nccl.status = S2_ERR_UNSUPPORTED;                                                                  \
        return;                                                                                              \
    }                                                                                                        \
    *(void **)&g_nccl.api.name = fn;
    S2_NCCL_FUNCS(S2_NCCL_RESOLVE)
#undef S2_NCCL_RESOLVE
    if (g_nccl.api.GetVersion(&g_nccl.api.version) != ncclSuccess)
        g_nccl.api.version = 0;
    g_nccl.status = S2_OK;
}

const s2_nccl_api *s2_nccl_api_get(s2_ctx *ctx, s2_status *st)
{
    call_once(&g_nccl_once, load_nccl);
    if (g_nccl.status != S2_OK) {
        *st = s2_fail(ctx, g_nccl.status, "%s", g_nccl.message);
        return NULL;
    }
    *st = S2_OK;
    return &g_nccl.api;
}

s2_status s2_nccl_fail(s2_ctx *ctx, const s2_nccl_api *n, ncclResult_t r, const char *what)
{
    const char *s = n->GetErrorString ? n->GetErrorString(r) : NULL;
    return s2_fail(ctx, S2_ERR_CUDA, "%s: %s (NCCL code %d)", what, s ? s : "unknown NCCL error", (int)r);
}
