/* Shared libraries loaded at run time (the CUDA driver, NCCL): the load's
 * outcome, good or bad, kept once per process and replayed to callers. */
#include "util.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

const char *s2_dl_name(const char *env, const char *dflt)
{
    /* a deployment or test may name another library */
    const char *name = secure_getenv(env);
    return name && *name ? name : dflt;
}

void s2_dl_fail(s2_dl_state *s, s2_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->message, sizeof s->message, fmt, ap);
    va_end(ap);
    s->status = st;
}

void *s2_dl_open(s2_dl_state *s, s2_status st, const char *what, const char *lib)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        s2_dl_fail(s, st, "cannot load %s %s: %s", what, lib, why ? why : "unknown error");
    }
    return h;
}

s2_status s2_dl_status(s2_ctx *ctx, const s2_dl_state *s)
{
    return s->status == S2_OK ? S2_OK : s2_fail(ctx, s->status, "%s", s->message);
}

s2_status s2_dl_version(s2_ctx *ctx, const s2_dl_state *s, int have, int *version)
{
    if (version)
        *version = s->status == S2_OK ? have : 0;
    return s2_dl_status(ctx, s);
}
