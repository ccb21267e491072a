/* The ptxas and libnvJitLink searches (toolfind.h). */
#include "toolfind.h"

#include <dlfcn.h>
#include <errno.h>
#include <glob.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static bool executable(const char *path) { return path && access(path, X_OK) == 0; }

bool s2_cg_find_ptxas(char *path, size_t cap)
{
    const char *env = getenv("S2C_PTXAS");
    if (env && env[0])
        return snprintf(path, cap, "%s", env) < (int)cap && executable(path);
    for (const char *p = getenv("PATH"); p && *p;) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        if (n > 0 && snprintf(path, cap, "%.*s/ptxas", (int)n, p) < (int)cap && executable(path))
            return true;
        p = colon ? colon + 1 : NULL;
    }
    const char *home = getenv("CUDA_HOME");
    if (home && home[0] && snprintf(path, cap, "%s/bin/ptxas", home) < (int)cap && executable(path))
        return true;
    return snprintf(path, cap, "/usr/local/cuda/bin/ptxas") < (int)cap && executable(path);
}

typedef struct tries {
    char *text;
    size_t cap, len;
} tries;

static void *try_open(tries *t, const char *name)
{
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib && t->text && t->len + 1 < t->cap) {
        int n = snprintf(t->text + t->len, t->cap - t->len, "%s%s", t->len ? ", " : "", name);
        t->len = n < 0 ? t->len : t->len + (size_t)n < t->cap ? t->len + (size_t)n : t->cap - 1;
    }
    return lib;
}

/* Each soname in dir (when dir is set). */
static void *try_dir(tries *t, const char *dir)
{
    static const char *const sonames[] = {"libnvJitLink.so.13", "libnvJitLink.so.12"};
    char path[4096];
    void *lib = NULL;
    for (int i = 0; i < 2 && !lib && dir && dir[0]; i++)
        if (snprintf(path, sizeof path, "%s/%s", dir, sonames[i]) < (int)sizeof path)
            lib = try_open(t, path);
    return lib;
}

/* pip wheels: PREFIX/lib/python3.N/site-packages/nvidia/{nvjitlink,cu13}/lib. */
static void *try_pip(tries *t, const char *prefix, const char *site)
{
    if (!prefix || !prefix[0])
        return NULL;
    static const char *const subdirs[] = {"nvidia/nvjitlink/lib", "nvidia/cu13/lib"};
    void *lib = NULL;
    for (int i = 0; i < 2 && !lib; i++) {
        char pattern[4096];
        if (snprintf(pattern, sizeof pattern, "%s/%s/%s", prefix, site, subdirs[i]) >= (int)sizeof pattern)
            continue;
        glob_t g;
        if (glob(pattern, GLOB_ONLYDIR, NULL, &g) == 0)
            for (size_t j = 0; j < g.gl_pathc && !lib; j++)
                lib = try_dir(t, g.gl_pathv[j]);
        else if (t->text && t->len + 1 < t->cap) {
            int n = snprintf(t->text + t->len, t->cap - t->len, "%s%s", t->len ? ", " : "", pattern);
            t->len = n < 0 ? t->len : t->len + (size_t)n < t->cap ? t->len + (size_t)n : t->cap - 1;
        }
        globfree(&g);
    }
    return lib;
}

void *s2_cg_jitlink_open(char *tried, size_t cap)
{
    tries t = {tried, cap, 0};
    if (tried && cap)
        tried[0] = '\0';
    const char *env = getenv("S2C_NVJITLINK");
    if (env && env[0])
        return try_open(&t, env);
    void *lib = try_open(&t, "libnvJitLink.so.13");
    if (!lib)
        lib = try_open(&t, "libnvJitLink.so.12");
    if (!lib)
        lib = try_open(&t, "libnvJitLink.so");
    char dir[4096];
    const char *home = getenv("CUDA_HOME");
    if (!lib && home && home[0] && snprintf(dir, sizeof dir, "%s/lib64", home) < (int)sizeof dir)
        lib = try_dir(&t, dir);
    if (!lib)
        lib = try_dir(&t, "/usr/local/cuda/lib64");
    const char *site = "lib/python3*/site-packages";
    if (!lib)
        lib = try_pip(&t, getenv("VIRTUAL_ENV"), site);
    if (!lib)
        lib = try_pip(&t, getenv("CONDA_PREFIX"), site);
    const char *user = getenv("HOME");
    if (!lib && user && user[0] && snprintf(dir, sizeof dir, "%s/.local", user) < (int)sizeof dir)
        lib = try_pip(&t, dir, site);
    if (!lib)
        lib = try_pip(&t, "/usr/local", "lib/python3*/dist-packages");
    if (!lib)
        lib = try_pip(&t, "/usr", "lib/python3/dist-packages");
    return lib;
}

void *s2_cg_jitlink_sym(void *lib, const char *name)
{
    void *f = dlsym(lib, name);
    char alias[128];
    if (!f && snprintf(alias, sizeof alias, "__%s_13_0", name) < (int)sizeof alias)
        f = dlsym(lib, alias);
    for (int minor = 9; !f && minor >= 0; minor--)
        if (snprintf(alias, sizeof alias, "__%s_12_%d", name, minor) < (int)sizeof alias)
            f = dlsym(lib, alias);
    return f;
}

int s2_cg_run_piped(char *const argv[], s2_cg_sink sink, void *user, int *code, const char **what)
{
    int fds[2];
    if (pipe(fds) != 0)
        return *what = "pipe", errno;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        return *what = "posix_spawn", rc;
    }
    char chunk[4096];
    for (;;) {
        ssize_t r = read(fds[0], chunk, sizeof chunk);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        sink(user, chunk, (size_t)r);
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return *what = "waitpid", errno;
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return 0;
}
