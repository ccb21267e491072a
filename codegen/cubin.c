/* PTX -> cubin: ptxas as a subprocess or nvJitLink loaded with dlopen, and
 * the resource numbers both report. */
#include "cg_internal.h"
#include "elf.h"
#include "toolfind.h"

#define NVJITLINK_NO_INLINE 1
#include <nvJitLink.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- resources from the -v / info log ---- */

static s2_kernel_info *find_kernel(s2_kernel_info *info, int *n, int max, const char *name, bool add)
{
    for (int i = 0; i < *n; i++)
        if (strcmp(info[i].name, name) == 0)
            return &info[i];
    if (!add || *n >= max)
        return NULL;
    s2_kernel_info *k = &info[(*n)++];
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "%s", name);
    k->registers = k->spill_stores = k->spill_loads = k->stack_frame = k->shared_static = -1;
    k->max_threads = k->elf_registers = -1;
    return k;
}

/* The quoted or trailing function name after `key` on a line. */
static bool name_after(const char *line, const char *key, char *name, size_t cap)
{
    const char *s = strstr(line, key);
    if (!s)
        return false;
    s += strlen(key);
    while (*s == ' ' || *s == '\'')
        s++;
    size_t n = 0;
    while (s[n] && s[n] != '\'' && s[n] != ' ' && s[n] != '\n' && s[n] != '\r' && s[n] != ':')
        n++;
    if (n == 0 || n >= cap)
        return false;
    memcpy(name, s, n);
    name[n] = '\0';
    return true;
}

/* The integer right before `unit` on the line ("12 bytes spill stores"). */
static int number_before(const char *line, const char *unit)
{
    const char *u = strstr(line, unit);
    if (!u)
        return -1;
    const char *e = u;
    while (e > line && e[-1] == ' ')
        e--;
    const char *s = e;
    while (s > line && s[-1] >= '0' && s[-1] <= '9')
        s--;
    if (s == e)
        return -1;
    return (int)strtol(s, NULL, 10);
}

int s2_parse_resources(const char *log, s2_kernel_info *info, int max_info)
{
    int n = 0;
    s2_kernel_info *cur = NULL;
    char name[128];
    for (const char *line = log; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char buf[512];
        if (len >= sizeof buf)
            len = sizeof buf - 1;
        memcpy(buf, line, len);
        buf[len] = '\0';
        if (name_after(buf, "Compiling entry function", name, sizeof name))
            cur = find_kernel(info, &n, max_info, name, true);
        else if (name_after(buf, "Function properties for", name, sizeof name))
            cur = find_kernel(info, &n, max_info, name, false);
        if (cur) {
            int v;
            if ((v = number_before(buf, "bytes stack frame")) >= 0)
                cur->stack_frame = v;
            if ((v = number_before(buf, "bytes spill stores")) >= 0)
                cur->spill_stores = v;
            if ((v = number_before(buf, "bytes spill loads")) >= 0)
                cur->spill_loads = v;
            if (strstr(buf, "Used ") && (v = number_before(buf, "registers")) >= 0)
                cur->registers = v;
            if ((v = number_before(buf, "bytes smem")) >= 0)
                cur->shared_static = v;
            else if (strstr(buf, "Used ") && cur->shared_static < 0)
                cur->shared_static = 0; /* ptxas omits "smem" when there is none */
        }
        line = nl ? nl + 1 : NULL;
    }
    return n;
}

/* ---- EIATTR_REGCOUNT from the cubin: common/elf.c's bounds-checked reader ---- */

int s2_cubin_regcount(const uint8_t *c, size_t size, const char *name)
{
    s2_ctx *ctx = s2_ctx_new();
    int regs = -1;
    if (!ctx || !c || !name || s2_elf_regcount(ctx, c, size, name, &regs) != S2_OK)
        regs = -1;
    s2_ctx_free(ctx);
    return regs;
}

/* ---- ptxas as a subprocess ---- */

/* toolfind.c's search, as a malloc'd path. */
static char *find_ptxas(void)
{
    char path[4096];
    return s2_cg_find_ptxas(path, sizeof path) ? strdup(path) : NULL;
}

typedef struct tmp_files {
    char dir[256];
    char in[300];
    char out[300];
} tmp_files;

static s2_status tmp_files_make(s2_ctx *ctx, tmp_files *t, const char *ptx, size_t len)
{
    const char *base = getenv("TMPDIR");
    snprintf(t->dir, sizeof t->dir, "%s/s2c-ptxas-XXXXXX", base && base[0] ? base : "/tmp");
    if (!mkdtemp(t->dir)) {
        t->dir[0] = '\0';
        return s2_fail(ctx, S2_ERR_IO, "cannot create a temporary directory: %s", strerror(errno));
    }
    snprintf(t->in, sizeof t->in, "%s/in.ptx", t->dir);
    snprintf(t->out, sizeof t->out, "%s/out.cubin", t->dir);
    return s2_write_file_atomic(ctx, t->in, ptx, len);
}

static void tmp_files_remove(tmp_files *t)
{
    if (!t->dir[0])
        return;
    unlink(t->in);
    unlink(t->out);
    rmdir(t->dir);
}

static void to_log(void *log, const char *data, size_t n) { s2_buf_append(log, data, n); }

/* Run argv with stdout and stderr into log; the exit status in *code. */
static s2_status run_capture(s2_ctx *ctx, char *const argv[], s2_buf *log, int *code)
{
    const char *what = NULL;
    int err = s2_cg_run_piped(argv, to_log, log, code, &what);
    if (err != 0 && strcmp(what, "posix_spawn") == 0)
        return s2_fail(ctx, S2_ERR_TOOLCHAIN, "cannot run %s: %s", argv[0], strerror(err));
    if (err != 0)
        return s2_fail(ctx, strcmp(what, "pipe") == 0 ? S2_ERR_IO : S2_ERR_TOOLCHAIN, "%s: %s", what, strerror(err));
    s2_buf_puts(log, "");
    return log->oom ? s2_fail(ctx, S2_ERR_NOMEM, "out of memory") : S2_OK;
}

static s2_status via_ptxas(s2_ctx *ctx, const char *ptxas, const char *ptx, size_t len, s2_arch arch,
                           uint8_t **cubin, size_t *size, s2_buf *log)
{
    tmp_files t = {0};
    s2_status st = tmp_files_make(ctx, &t, ptx, len);
    if (st == S2_OK) {
        char archopt[32];
        snprintf(archopt, sizeof archopt, "-arch=%s", s2_arch_cpu(arch));
        char *argv[] = {(char *)ptxas, archopt, "-O3", "-v", "-o", t.out, t.in, NULL};
        int code = -1;
        st = run_capture(ctx, argv, log, &code);
        if (st == S2_OK && code != 0)
            st = s2_fail(ctx, S2_ERR_TOOLCHAIN, "ptxas failed (exit %d) for %s:\n%s", code,
                         s2_arch_cpu(arch), log->data ? log->data : "");
        if (st == S2_OK)
            st = s2_read_file(ctx, t.out, (char **)cubin, size);
    }
    tmp_files_remove(&t);
    return st;
}

/* ---- nvJitLink through dlopen ---- */

typedef struct jitlink_api {
    void *lib;
    nvJitLinkResult (*create)(nvJitLinkHandle *, uint32_t, const char **);
    nvJitLinkResult (*destroy)(nvJitLinkHandle *);
    nvJitLinkResult (*add_data)(nvJitLinkHandle, nvJitLinkInputType, const void *, size_t, const char *);
    nvJitLinkResult (*complete)(nvJitLinkHandle);
    nvJitLinkResult (*cubin_size)(nvJitLinkHandle, size_t *);
    nvJitLinkResult (*cubin)(nvJitLinkHandle, void *);
    nvJitLinkResult (*err_size)(nvJitLinkHandle, size_t *);
    nvJitLinkResult (*err)(nvJitLinkHandle, char *);
    nvJitLinkResult (*info_size)(nvJitLinkHandle, size_t *);
    nvJitLinkResult (*info)(nvJitLinkHandle, char *);
} jitlink_api;

static bool jitlink_load(jitlink_api *api, char *tried, size_t cap)
{
    memset(api, 0, sizeof *api);
    api->lib = s2_cg_jitlink_open(tried, cap);
    if (!api->lib)
        return false;
    /* dlsym returns void *; POSIX guarantees the conversion to a function pointer */
#define SYM(field, name) (*(void **)(&api->field) = s2_cg_jitlink_sym(api->lib, name)) != NULL
    bool ok = SYM(create, "nvJitLinkCreate") && SYM(destroy, "nvJitLinkDestroy") &&
              SYM(add_data, "nvJitLinkAddData") && SYM(complete, "nvJitLinkComplete") &&
              SYM(cubin_size, "nvJitLinkGetLinkedCubinSize") && SYM(cubin, "nvJitLinkGetLinkedCubin") &&
              SYM(err_size, "nvJitLinkGetErrorLogSize") && SYM(err, "nvJitLinkGetErrorLog") &&
              SYM(info_size, "nvJitLinkGetInfoLogSize") && SYM(info, "nvJitLinkGetInfoLog");
#undef SYM
    if (!ok) {
        dlclose(api->lib);
        api->lib = NULL;
    }
    return ok;
}

static void jitlink_append_log(jitlink_api *api, nvJitLinkHandle h, bool error_log, s2_buf *log)
{
    size_t n = 0;
    if ((error_log ? api->err_size(h, &n) : api->info_size(h, &n)) != NVJITLINK_SUCCESS || n == 0)
        return;
    char *text = malloc(n + 1);
    if (!text) {
        log->oom = true;
        return;
    }
    if ((error_log ? api->err(h, text) : api->info(h, text)) == NVJITLINK_SUCCESS) {
        text[n] = '\0';
        s2_buf_puts(log, text);
    }
    free(text);
}

static s2_status via_jitlink(s2_ctx *ctx, jitlink_api *api, const char *ptx, size_t len, s2_arch arch,
                             uint8_t **cubin, size_t *size, s2_buf *log)
{
    char archopt[32];
    snprintf(archopt, sizeof archopt, "-arch=%s", s2_arch_cpu(arch));
    const char *opts[] = {archopt, "-O3", "-verbose"};
    nvJitLinkHandle h = NULL;
    nvJitLinkResult r = api->create(&h, 3, opts);
    if (r != NVJITLINK_SUCCESS)
        return s2_fail(ctx, S2_ERR_TOOLCHAIN, "nvJitLinkCreate failed (%d) for %s", (int)r, archopt);
    s2_status st = S2_OK;
    r = api->add_data(h, NVJITLINK_INPUT_PTX, ptx, len, "s2c.ptx");
    if (r == NVJITLINK_SUCCESS)
        r = api->complete(h);
    jitlink_append_log(api, h, false, log);
    if (r != NVJITLINK_SUCCESS) {
        jitlink_append_log(api, h, true, log);
        s2_buf_puts(log, "");
        st = s2_fail(ctx, S2_ERR_TOOLCHAIN, "nvJitLink failed (%d) for %s:\n%s", (int)r,
                     s2_arch_cpu(arch), log->data ? log->data : "");
    }
    size_t n = 0;
    if (st == S2_OK && (api->cubin_size(h, &n) != NVJITLINK_SUCCESS || n == 0))
        st = s2_fail(ctx, S2_ERR_TOOLCHAIN, "nvJitLink produced no cubin");
    if (st == S2_OK) {
        *cubin = malloc(n);
        if (!*cubin)
            st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
        else if (api->cubin(h, *cubin) != NVJITLINK_SUCCESS)
            st = s2_fail(ctx, S2_ERR_TOOLCHAIN, "nvJitLinkGetLinkedCubin failed");
        else
            *size = n;
    }
    api->destroy(&h);
    return st;
}

/* ---- the entry point ---- */

static s2_status resources(s2_ctx *ctx, const char *log, const uint8_t *cubin, size_t size,
                           s2_kernel_info **info, int *num_info)
{
    enum { MAX_KERNELS = 64 };
    s2_kernel_info *k = calloc(MAX_KERNELS, sizeof *k);
    if (!k)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    int n = s2_parse_resources(log, k, MAX_KERNELS);
    for (int i = 0; i < n; i++)
        k[i].elf_registers = s2_cubin_regcount(cubin, size, k[i].name);
    *info = k;
    *num_info = n;
    return S2_OK;
}

s2_status s2_ptx_to_cubin(s2_ctx *ctx, const char *ptx, size_t len, s2_arch arch,
                          s2_cubin_backend backend, uint8_t **cubin, size_t *size, char **log_out,
                          s2_kernel_info **info, int *num_info, s2_cubin_backend *used)
{
    if (!ptx || !cubin || !size || !log_out || !s2_arch_cpu(arch))
        return s2_fail(ctx, S2_ERR_INVALID, "s2_ptx_to_cubin: invalid arguments");
    *cubin = NULL;
    *size = 0;
    *log_out = NULL;
    if (info)
        *info = NULL;
    if (num_info)
        *num_info = 0;

    s2_status st;
    s2_buf log;
    s2_buf_init(&log);
    s2_cubin_backend chosen = backend;
    char *ptxas = NULL;
    if (backend == S2_CUBIN_AUTO || backend == S2_CUBIN_PTXAS) {
        ptxas = find_ptxas();
        if (ptxas)
            chosen = S2_CUBIN_PTXAS;
        else if (backend == S2_CUBIN_PTXAS) {
            const char *env = getenv("S2C_PTXAS");
            return s2_fail(ctx, S2_ERR_TOOLCHAIN, "ptxas not found (%s%s)",
                           env && env[0] ? "S2C_PTXAS is not executable: " : "searched $PATH, $CUDA_HOME/bin, /usr/local/cuda/bin",
                           env && env[0] ? env : "");
        } else
            chosen = S2_CUBIN_NVJITLINK;
    }
    if (chosen == S2_CUBIN_PTXAS) {
        st = via_ptxas(ctx, ptxas, ptx, len, arch, cubin, size, &log);
    } else {
        jitlink_api api;
        char tried[2048];
        if (!jitlink_load(&api, tried, sizeof tried))
            st = s2_fail(ctx, S2_ERR_TOOLCHAIN, "%slibnvJitLink (13 or 12) could not be loaded; tried %s%s",
                         backend == S2_CUBIN_AUTO ? "ptxas not found and " : "",
                         tried[0] ? tried : "(a library without the nvJitLink entry points)",
                         tried[0] ? " (set S2C_NVJITLINK to its path)" : "");
        else {
            /* No dlclose: the library's own C++ runtime allocates at load
             * time and never frees, so unloading strands that memory (and a
             * reload costs more than keeping it mapped).  dlopen counts
             * references; the loader keeps one copy. */
            st = via_jitlink(ctx, &api, ptx, len, arch, cubin, size, &log);
        }
    }
    free(ptxas);
    s2_buf_puts(&log, "");
    if (st == S2_OK && log.oom)
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    if (st == S2_OK && (*size < 4 || memcmp(*cubin, "\177ELF", 4) != 0))
        st = s2_fail(ctx, S2_ERR_TOOLCHAIN, "%s produced something that is not an ELF cubin",
                     s2_cubin_backend_name(chosen));
    if (st == S2_OK && info && num_info)
        st = resources(ctx, log.data ? log.data : "", *cubin, *size, info, num_info);
    if (st != S2_OK) {
        free(*cubin);
        *cubin = NULL;
        *size = 0;
    }
    if (used)
        *used = chosen;
    *log_out = s2_buf_steal(&log, NULL);
    return st;
}
