/* s2c --version [--verbose]: the release, and with --verbose what this s2c
 * would generate and run with: generator identity, LLVM, the PTX assemblers
 * it finds, the CUDA driver and the kernel cache.  Each line asks the stage
 * that owns the answer. */
#include "cli.h"
#include "s2c/cache.h"
#include "s2c/runtime.h"
#include "toolfind.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* ptxas: where it is and its version line. */
static void print_ptxas(s2_ctx *ctx)
{
    char path[4096];
    const char *id = NULL;
    if (!s2_cg_find_ptxas(path, sizeof path)) {
        printf("ptxas: none (not found: $S2C_PTXAS, $PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)\n");
        return;
    }
    if (s2_toolchain_version(ctx, S2_CUBIN_PTXAS, &id) != S2_OK) {
        printf("ptxas: %s (%s)\n", path, s2_ctx_message(ctx));
        return;
    }
    const char *line = strncmp(id, "ptxas ", 6) == 0 ? id + 6 : id;
    printf("ptxas: %s (%s)\n", path, line);
}

/* nvJitLink: its version and the library the loader opened. */
static void print_nvjitlink(s2_ctx *ctx)
{
    char tried[1024];
    void *lib = s2_cg_jitlink_open(tried, sizeof tried);
    if (!lib) {
        printf("nvjitlink: none (tried %s)\n", tried[0] ? tried : "nothing");
        return;
    }
    Dl_info where = {0};
    void *sym = s2_cg_jitlink_sym(lib, "nvJitLinkVersion");
    const char *path = sym && dladdr(sym, &where) && where.dli_fname ? where.dli_fname : "?";
    const char *id = NULL;
    if (s2_toolchain_version(ctx, S2_CUBIN_NVJITLINK, &id) != S2_OK)
        printf("nvjitlink: %s (%s)\n", path, s2_ctx_message(ctx));
    else
        printf("nvjitlink: %s (%s)\n", path, strncmp(id, "nvjitlink-", 10) == 0 ? id + 10 : id);
    /* not closed, as codegen keeps it */
}

/* Whether the library the runtime would load (as it picks it: $S2C_LIBCUDA,
 * else libcuda.so.1) is the CUDA toolkit's stub, whose every call answers
 * CUDA_ERROR_STUB_LIBRARY (34): the runtime reports it only as a driver it
 * cannot use, so --version asks its cuInit once more. */
static bool driver_is_stub(void)
{
    const char *name = secure_getenv("S2C_LIBCUDA");
    void *lib = dlopen(name && name[0] ? name : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return false;
    int (*init)(unsigned);
    *(void **)&init = dlsym(lib, "cuInit");
    return init && init(0) == 34; /* not closed, as the runtime keeps it */
}

/* The CUDA driver: its version, "stub" for the toolkit's stub libcuda, or "none" and why. */
static void print_driver(s2_ctx *ctx)
{
    int v = 0;
    if (s2_cuda_driver_version(ctx, &v) == S2_OK)
        printf("driver: %d.%d\n", v / 1000, v % 1000 / 10);
    else
        printf("driver: %s (%s)\n", driver_is_stub() ? "stub" : "none", s2_ctx_message(ctx));
}

/* The JIT's kernel cache: its directory (made if missing, as the JIT does) and whether it is used. */
static void print_cache(s2_ctx *ctx)
{
    s2_cache *cache = NULL;
    if (s2_cache_open(ctx, NULL, &cache) != S2_OK) {
        printf("cache: none (%s)\n", s2_ctx_message(ctx));
        return;
    }
    const char *why = s2_cache_untrusted(cache);
    if (why)
        printf("cache: %s (not trusted: %s)\n", s2_cache_dir(cache), why);
    else
        printf("cache: %s (trusted)\n", s2_cache_dir(cache));
    s2_cache_close(cache);
}

int cmd_version(int argc, char **argv)
{
    bool verbose = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--verbose") == 0 || strcmp(argv[i], "-v") == 0)
            verbose = true;
        else if (strcmp(argv[i], "--version") != 0)
            return usage_error("--version: unexpected argument '%s' (only --verbose)", argv[i]);
    }
    printf("s2c %s\n", s2_version());
    if (!verbose)
        return EXIT_OK;
    s2_ctx *ctx = s2_ctx_new();
    if (!ctx)
        return input_fail("out of memory");
    const char *gen = s2_generator_id();
    const char *llvm = strstr(gen, "+llvm"); /* the identity's documented last part */
    printf("generator: %s\n", gen);
    printf("llvm: %s\n", llvm ? llvm + 5 : "?");
    print_ptxas(ctx);
    print_nvjitlink(ctx);
    print_driver(ctx);
    print_cache(ctx);
    s2_ctx_free(ctx);
    return EXIT_OK;
}
