/* The identities that go into cache keys: the PTX assembler's (a cubin made
 * by another ptxas or nvJitLink release is another cubin) and the
 * generator's (s2_generator_id).
 * Both search for the tools as s2_ptx_to_cubin does (toolfind.c). */
#include "s2c/cache.h"
#include "s2c_generator_id.h"
#include "toolfind.h"
#include "util.h"

#include <llvm/Config/llvm-config.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <unistd.h>

typedef struct text_out {
    char *out;
    size_t cap, n;
} text_out;

static void to_text(void *user, const char *data, size_t len)
{
    text_out *t = user;
    size_t take = len < t->cap - 1 - t->n ? len : t->cap - 1 - t->n;
    memcpy(t->out + t->n, data, take);
    t->n += take;
}

/* stdout+stderr of `prog --version` into out (NUL-terminated, cut at cap). */
static bool run_version(const char *prog, char *out, size_t cap)
{
    char *argv[] = {(char *)prog, "--version", NULL};
    text_out t = {out, cap, 0};
    const char *what;
    int code = -1;
    int err = s2_cg_run_piped(argv, to_text, &t, &code, &what);
    out[t.n] = '\0';
    return err == 0 && code == 0;
}

/* The "Cuda compilation tools, release X, VX.Y.Z" line, else the last
 * non-empty line; trimmed, into line. */
static bool version_line(const char *text, char *line, size_t cap)
{
    const char *best = NULL, *last = NULL;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len > 0 && !(len == 1 && p[0] == '\r'))
            last = p;
        if (!best && strncmp(p, "Cuda compilation tools", 22) == 0)
            best = p;
        p = nl ? nl + 1 : p + len;
    }
    const char *s = best ? best : last;
    if (!s)
        return false;
    size_t len = strcspn(s, "\r\n");
    if (len >= cap)
        len = cap - 1;
    memcpy(line, s, len);
    line[len] = '\0';
    return true;
}

/* ---- once per process and back end ---- */

typedef struct toolchain_id {
    s2_status status;
    char text[256];    /* the identity, or the failure message */
} toolchain_id;

static toolchain_id g_ptxas, g_jitlink;
static once_flag g_ptxas_once = ONCE_FLAG_INIT, g_jitlink_once = ONCE_FLAG_INIT;

static void ptxas_id_once(void)
{
    char path[4096], out[4096], line[200];
    toolchain_id *id = &g_ptxas;
    id->status = S2_ERR_TOOLCHAIN;
    if (!s2_cg_find_ptxas(path, sizeof path))
        snprintf(id->text, sizeof id->text, "ptxas not found");
    else if (!run_version(path, out, sizeof out))
        snprintf(id->text, sizeof id->text, "%.200s --version failed", path);
    else if (!version_line(out, line, sizeof line))
        snprintf(id->text, sizeof id->text, "%.200s --version printed nothing", path);
    else {
        snprintf(id->text, sizeof id->text, "ptxas %s", line);
        id->status = S2_OK;
    }
}

static void jitlink_id_once(void)
{
    toolchain_id *id = &g_jitlink;
    id->status = S2_ERR_TOOLCHAIN;
    char tried[1024];
    void *lib = s2_cg_jitlink_open(tried, sizeof tried);
    if (!lib) {
        snprintf(id->text, sizeof id->text, "libnvJitLink could not be loaded");
        return;
    }
    int (*version)(unsigned *, unsigned *);
    *(void **)&version = s2_cg_jitlink_sym(lib, "nvJitLinkVersion");
    unsigned major = 0, minor = 0;
    if (!version || version(&major, &minor) != 0)
        snprintf(id->text, sizeof id->text, "nvJitLinkVersion is missing or failed");
    else {
        snprintf(id->text, sizeof id->text, "nvjitlink-%u.%u", major, minor);
        id->status = S2_OK;
    }
    /* not closed: cubin.c keeps the library loaded for the same reason */
}

s2_status s2_toolchain_version(s2_ctx *ctx, s2_cubin_backend backend, const char **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_toolchain_version: out is NULL");
    *out = NULL;
    const toolchain_id *id;
    if (backend == S2_CUBIN_PTXAS || backend == S2_CUBIN_AUTO) {
        call_once(&g_ptxas_once, ptxas_id_once);
        id = &g_ptxas;
        if (id->status != S2_OK && backend == S2_CUBIN_AUTO) {
            call_once(&g_jitlink_once, jitlink_id_once);
            id = &g_jitlink;
        }
    } else if (backend == S2_CUBIN_NVJITLINK) {
        call_once(&g_jitlink_once, jitlink_id_once);
        id = &g_jitlink;
    } else
        return s2_fail(ctx, S2_ERR_INVALID, "s2_toolchain_version: unknown back end %d", (int)backend);
    if (id->status != S2_OK)
        return s2_fail(ctx, id->status, "%s", id->text);
    *out = id->text;
    return S2_OK;
}

/* the LLVM that builds the PTX is part of the generator too */
const char *s2_generator_id(void) { return S2C_GENERATOR_ID "+llvm" LLVM_VERSION_STRING; }
