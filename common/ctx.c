/* The context: last status and message, dump/override directories. */
#include "s2c/version.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct s2_ctx {
    s2_status status;
    char message[2048];
    char *dump_dir;
    char *override_dir;
};

static const char *const status_names[S2_STATUS_COUNT_] = {
    [S2_OK] = "S2_OK",
    [S2_ERR_NOMEM] = "S2_ERR_NOMEM",
    [S2_ERR_IO] = "S2_ERR_IO",
    [S2_ERR_PARSE] = "S2_ERR_PARSE",
    [S2_ERR_INVALID] = "S2_ERR_INVALID",
    [S2_ERR_UNSUPPORTED] = "S2_ERR_UNSUPPORTED",
    [S2_ERR_NOT_FOUND] = "S2_ERR_NOT_FOUND",
    [S2_ERR_TOOLCHAIN] = "S2_ERR_TOOLCHAIN",
    [S2_ERR_NO_DRIVER] = "S2_ERR_NO_DRIVER",
    [S2_ERR_NO_DEVICE] = "S2_ERR_NO_DEVICE",
    [S2_ERR_CUDA] = "S2_ERR_CUDA",
    [S2_ERR_INTERNAL] = "S2_ERR_INTERNAL",
    [S2_ERR_NULL_ARG] = "S2_ERR_NULL_ARG",
    [S2_ERR_ALIGNMENT] = "S2_ERR_ALIGNMENT",
    [S2_ERR_SHAPE] = "S2_ERR_SHAPE",
    [S2_ERR_STRIDE] = "S2_ERR_STRIDE",
    [S2_ERR_HEADS] = "S2_ERR_HEADS",
    [S2_ERR_SEQ_LEN] = "S2_ERR_SEQ_LEN",
    [S2_ERR_DTYPE] = "S2_ERR_DTYPE",
    [S2_ERR_HEAD_DIM] = "S2_ERR_HEAD_DIM",
    [S2_ERR_DEVICE_DATA] = "S2_ERR_DEVICE_DATA",
    [S2_ERR_CAPTURE] = "S2_ERR_CAPTURE",
};

const char *s2_status_name(s2_status st)
{
    if ((unsigned)st >= S2_STATUS_COUNT_)
        return "S2_ERR_UNKNOWN";
    return status_names[st];
}

const char *s2_version(void) { return S2C_VERSION_STRING; }

s2_ctx *s2_ctx_new(void) { return calloc(1, sizeof(s2_ctx)); }

void s2_ctx_free(s2_ctx *ctx)
{
    if (!ctx)
        return;
    free(ctx->dump_dir);
    free(ctx->override_dir);
    free(ctx);
}

const char *s2_ctx_message(const s2_ctx *ctx) { return ctx ? ctx->message : ""; }
s2_status s2_ctx_status(const s2_ctx *ctx) { return ctx ? ctx->status : S2_OK; }

void s2_ctx_clear(s2_ctx *ctx)
{
    if (!ctx)
        return;
    ctx->status = S2_OK;
    ctx->message[0] = '\0';
}

static s2_status set_dir(s2_ctx *ctx, char **slot, const char *dir)
{
    if (!ctx)
        return S2_ERR_INVALID;
    char *copy = NULL;
    if (dir) {
        copy = strdup(dir);
        if (!copy)
            return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    free(*slot);
    *slot = copy;
    return S2_OK;
}

s2_status s2_ctx_set_dump_dir(s2_ctx *ctx, const char *dir) { return set_dir(ctx, ctx ? &ctx->dump_dir : NULL, dir); }
s2_status s2_ctx_set_override_dir(s2_ctx *ctx, const char *dir) { return set_dir(ctx, ctx ? &ctx->override_dir : NULL, dir); }
const char *s2_ctx_dump_dir(const s2_ctx *ctx) { return ctx ? ctx->dump_dir : NULL; }
const char *s2_ctx_override_dir(const s2_ctx *ctx) { return ctx ? ctx->override_dir : NULL; }

s2_status s2_vfail(s2_ctx *ctx, s2_status st, const char *fmt, va_list ap)
{
    if (ctx) {
        ctx->status = st;
        vsnprintf(ctx->message, sizeof ctx->message, fmt, ap);
    }
    return st;
}

s2_status s2_fail(s2_ctx *ctx, s2_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    s2_vfail(ctx, st, fmt, ap);
    va_end(ap);
    return st;
}

s2_status s2_fail_prefix(s2_ctx *ctx, s2_status st, const char *prefix)
{
    if (ctx) {
        char msg[sizeof ctx->message];
        snprintf(msg, sizeof msg, "%s", ctx->message);
        s2_fail(ctx, st, "%s: %s", prefix, msg);
    }
    return st;
}
