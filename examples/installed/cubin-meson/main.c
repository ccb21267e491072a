/* A cubin made at build time, run with libs2rt alone.
 *
 *   cubin-demo [CUBIN]      (default: model.cubin of this build)
 *
 * First, on the CPU, what the cubin says about itself: its manifest
 * (s2_cubin_find_manifest, s2_manifest_parse) lists each kernel with its
 * pattern and tile; the patterns themselves are in it too, so the runtime
 * needs no pattern file.  Then, with a device, the module is loaded
 * (s2_attn_module_load_file) and every kernel runs one forward pass
 * (s2_attn_forward; the runtime builds and caches the schedules) on random
 * bf16 data, checked against a double-precision reference.  Exits 0
 * (PASS), 1, or 77 without a device the cubin runs on. */
#include "attn_check.h"

#include <s2c/attn_runtime.h>
#include <s2c/manifest.h>

#include <stdio.h>
#include <stdlib.h>

#ifndef CUBIN_PATH
#define CUBIN_PATH "model.cubin"
#endif

/* The whole file, at most 64 MiB. */
static void *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    void *buf = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && n <= (64l << 20) && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n)) && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (f)
        fclose(f);
    *size = buf ? (size_t)n : 0;
    return buf;
}

/* Prints the manifest of the cubin at path; its s2_arch in *arch. */
static int show_manifest(s2_ctx *ctx, const char *path, int *arch)
{
    size_t size = 0, len = 0;
    const char *text = NULL;
    s2_manifest *m = NULL;
    void *image = read_file(path, &size);
    if (!image) {
        printf("%s: cannot read it\n", path);
        return 1;
    }
    if (s2_cubin_find_manifest(ctx, image, size, &text, &len) != S2_OK ||
        s2_manifest_parse(ctx, text, len, &m) != S2_OK) {
        printf("%s: %s\n", path, s2_ctx_message(ctx));
        free(image);
        return 1;
    }
    *arch = s2_manifest_arch(m);
    printf("%s: %zu bytes, %s, generator ", path, size, s2_arch_name((s2_arch)*arch));
    /* text from the cubin: control bytes escaped, so none reaches the terminal (names are printable already) */
    for (const unsigned char *c = (const unsigned char *)s2_manifest_generator(m); *c; c++) {
        if (*c >= 0x20 && *c < 0x7f)
            putchar(*c);
        else
            printf("\\x%02x", *c);
    }
    printf("\n");
    for (int i = 0; i < s2_manifest_num_kernels(m); i++) {
        const s2_manifest_kernel *mk = s2_manifest_kernel_at(m, i);
        const s2_pattern *p = s2_manifest_find_pattern(m, mk->pattern);
        printf("  %s: pattern %s (%d heads, %d kv heads, block %d), head_dim %d, tile %dx%d, %d threads\n",
               mk->name, mk->pattern, p->heads, p->kv_heads, p->block_size, mk->spec.head_dim, mk->spec.block_m,
               mk->spec.block_n, mk->threads);
    }
    s2_manifest_free(m);
    free(image);
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : CUBIN_PATH;
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    s2_attn_module *mod = NULL;
    int arch = 0, rc;
    if (!ctx)
        return 1;
    if ((rc = show_manifest(ctx, path, &arch)) != 0 || (rc = ac_open_device(ctx, arch, &dev)) != 0)
        goto done;
    if (s2_attn_module_load_file(ctx, dev, path, &mod) != S2_OK) {
        printf("%s: %s\n", path, s2_ctx_message(ctx));
        rc = 1;
        goto done;
    }
    int failed = 0;
    for (int i = 0; i < s2_attn_module_num_kernels(mod); i++) {
        s2_attn_kernel *k = s2_attn_module_kernel_at(mod, i); /* borrowed: lives as long as the module */
        int64_t seq = s2_attn_kernel_max_kv_len(k) < 1000 ? s2_attn_kernel_max_kv_len(k) : 1000;
        failed += ac_run_forward(ctx, dev, k, seq, 12345u + (uint64_t)i);
    }
    printf("%s\n", failed ? "FAIL" : "PASS");
    rc = failed ? 1 : 0;
done:
    s2_attn_module_free(mod);
    s2_device_free(dev);
    s2_ctx_free(ctx);
    return rc;
}
