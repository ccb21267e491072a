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
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <threads.h>
#include <unistd.h>

extern char **environ;

/* stdout+stderr of `prog --version` into out (NUL-terminated, cut at cap). */
static bool run_version(const char *prog, char *out, size_t cap)
{
    int fds[2];
    if (pipe(fds) != 0)
        return false;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    char *argv[] = {(char *)prog, "--version", NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, prog, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    size_t n = 0;
    if (rc == 0) {
        for (;;) {
            char chunk[1024];
            ssize_t r = read(fds[0], chunk, sizeof chunk);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            size_t take = (size_t)r < cap - 1 - n ? (size_t)r : cap - 1 - n;
            memcpy(out + n, chunk, take);
            n += take;
        }
    }
    close(fds[0]);
    out[n] = '\0';
    if (rc != 0)
        return false;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return false;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
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
