/* JIT at model load with libs2c: read the pattern file, get each layer's
 * cubin for the GPU's arch through the on-disk kernel cache, load it and
 * run a checked forward.
 *
 *   jit-at-load [PATTERN_FILE [CACHE_DIR]]
 *       PATTERN_FILE  default: layer.yaml next to this program's source
 *       CACHE_DIR     default: a fresh temporary directory, removed at exit
 *
 * The compile step needs no GPU (s2_jit_fetch: LLVM IR, PTX, cubin through
 * ptxas or nvJitLink, stored in the cache), so it runs first for sm_90a
 * (S2C_EXAMPLE_ARCH to change), twice: cold, then a cache hit as a
 * restarted process would see.  With a device, s2_jit_compile does the same
 * for its arch and loads the kernel (a cache hit on an H100/H200).  Exits 0
 * (PASS), 1, or 77 without a usable GPU. */
#define _XOPEN_SOURCE 700
#include "attn_check.h"

#include <s2c/jit.h>
#include <s2c/pattern.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef LAYER_FILE
#define LAYER_FILE "layer.yaml"
#endif

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* The cubin of pattern p for arch, twice: from an empty cache, then from the cache. */
static s2_status fetch_twice(s2_ctx *ctx, s2_arch arch, const s2_pattern *p, const s2_kernel_spec *spec,
                             const s2_jit_opts *opts)
{
    for (int pass = 0; pass < 2; pass++) {
        uint8_t *cubin = NULL;
        size_t size = 0;
        s2_jit_stats js;
        double t0 = now_ms();
        s2_status st = s2_jit_fetch(ctx, arch, p, spec, opts, &cubin, &size, &js);
        if (st != S2_OK)
            return st;
        printf("  %s %s: %zu-byte cubin, %s in %.1f ms (block %dx%d)\n", p->name, s2_arch_name(arch), size,
               js.hit ? "cache hit" : js.stored ? "compiled and stored" : "compiled", now_ms() - t0,
               js.spec.block_m, js.spec.block_n);
        free(cubin);
    }
    return S2_OK;
}

int main(int argc, char **argv)
{
    const char *file = argc > 1 ? argv[1] : LAYER_FILE;
    char tmp_dir[] = "/tmp/s2c-jit-XXXXXX";
    s2_jit_opts opts = {.cache_dir = argc > 2 ? argv[2] : NULL};
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = NULL;
    s2_device *dev = NULL;
    s2_status st = S2_OK;
    s2_arch arch = S2_ARCH_SM90A;
    int rc = 1;
    if (!ctx)
        return 1;
    if (!opts.cache_dir) {
        if (!mkdtemp(tmp_dir)) {
            perror("mkdtemp");
            goto done;
        }
        opts.cache_dir = tmp_dir;
    }
    const char *env_arch = getenv("S2C_EXAMPLE_ARCH");
    if ((env_arch && (st = s2_arch_parse(env_arch, &arch)) != S2_OK) ||
        (st = s2_pattern_load(ctx, file, &set)) != S2_OK)
        goto fail;
    /* bf16, head_dim 64; tile and pipeline left to the heuristic */
    s2_kernel_spec spec = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = 64};
    printf("%s: %d patterns, cache %s\n", file, s2_pattern_set_count(set), opts.cache_dir);
    for (int i = 0; i < s2_pattern_set_count(set); i++)
        if ((st = fetch_twice(ctx, arch, s2_pattern_set_get(set, i), &spec, &opts)) != S2_OK)
            goto fail;

    if ((rc = ac_open_device(ctx, -1, &dev)) != 0)
        goto done;
    int failed = 0;
    for (int i = 0; i < s2_pattern_set_count(set); i++) {
        const s2_pattern *p = s2_pattern_set_get(set, i);
        s2_attn_kernel *k = NULL;
        s2_jit_stats js;
        double t0 = now_ms();
        if ((st = s2_jit_compile(ctx, dev, p, &spec, &opts, &k, &js)) != S2_OK)
            goto fail;
        printf("  %s for the device: %s, loaded in %.1f ms\n", p->name, js.hit ? "cache hit" : "compiled",
               now_ms() - t0);
        int64_t seq = s2_attn_kernel_max_kv_len(k) < 1000 ? s2_attn_kernel_max_kv_len(k) : 1000;
        failed += ac_run_forward(ctx, dev, k, seq, 20261127u + (uint64_t)i);
        s2_attn_kernel_free(k);
    }
    printf("%s\n", failed ? "FAIL" : "PASS");
    rc = failed ? 1 : 0;
    goto done;
fail:
    printf("error: %s (%s)\n", s2_ctx_message(ctx), s2_status_name(st));
    rc = 1;
done:
    s2_device_free(dev);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
    if (opts.cache_dir == tmp_dir)
        nftw(tmp_dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
