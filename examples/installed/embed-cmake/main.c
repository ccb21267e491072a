/* Embedding libs2rt: run one kernel of a cubin given on the command line.
 *
 *   embed-cubin CUBIN... [PATTERN]   (PATTERN: the kernel's pattern name; default the first)
 *
 * Several cubins are the modules `s2c compile --arch A --arch B` writes, one
 * per arch: s2_attn_module_load_best loads the one the device runs.
 *
 * The cubin is any `s2c compile` output (bf16, head_dim 64 here).  Without a
 * device the program stops after reading the cubin's manifest on the CPU;
 * with one it loads the module, finds the kernel by pattern, dtype and head
 * dim (s2_attn_find) and runs a forward pass on random data, checked against
 * a double-precision reference.  Exits 0 (PASS), 1, 2 (usage), or 77
 * without a device the cubin runs on. */
#include "attn_check.h"

#include <s2c/attn_runtime.h>
#include <s2c/manifest.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The arch of the cubin at path (its manifest, read without a GPU), or -1. */
static int cubin_arch(s2_ctx *ctx, const char *path, const char *pattern)
{
    FILE *f = fopen(path, "rb");
    unsigned char *image = malloc(64u << 20);
    size_t size = f && image ? fread(image, 1, 64u << 20, f) : 0, len = 0;
    const char *text = NULL;
    s2_manifest *m = NULL;
    int arch = -1;
    if (!size || !feof(f))
        printf("%s: cannot read it, or larger than 64 MiB\n", path);
    else if (s2_cubin_find_manifest(ctx, image, size, &text, &len) != S2_OK ||
             s2_manifest_parse(ctx, text, len, &m) != S2_OK)
        printf("%s: %s\n", path, s2_ctx_message(ctx));
    else if (pattern && !s2_manifest_find_pattern(m, pattern))
        printf("%s: no pattern %s in it\n", path, pattern);
    else {
        arch = s2_manifest_arch(m);
        printf("%s: %s, %d kernels\n", path, s2_arch_name((s2_arch)arch), s2_manifest_num_kernels(m));
    }
    s2_manifest_free(m);
    free(image);
    if (f)
        fclose(f);
    return arch;
}

static bool is_cubin(const char *a)
{
    size_t n = strlen(a);
    return n > 6 && strcmp(a + n - 6, ".cubin") == 0;
}

int main(int argc, char **argv)
{
    int ncubins = 0;
    while (1 + ncubins < argc && is_cubin(argv[1 + ncubins]))
        ncubins++;
    if (ncubins < 1 || argc > 2 + ncubins) {
        fprintf(stderr, "usage: embed-cubin CUBIN... [PATTERN]\n");
        return 2;
    }
    const char *pattern = argc > 1 + ncubins ? argv[1 + ncubins] : NULL;
    const char *const *paths = (const char *const *)argv + 1;
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    s2_attn_module *mod = NULL;
    s2_attn_kernel *k = NULL;
    int rc = 1, arch = -1;
    if (!ctx)
        return 1;
    for (int i = 0; i < ncubins; i++)
        if ((arch = cubin_arch(ctx, paths[i], pattern)) < 0)
            goto done;
    /* one module: the device must run its arch; several: any one of them */
    if ((rc = ac_open_device(ctx, ncubins == 1 ? arch : -1, &dev)) != 0)
        goto done;
    if (s2_attn_module_load_best(ctx, dev, paths, ncubins, &mod) != S2_OK ||
        s2_attn_find(ctx, mod, pattern, S2_DTYPE_BF16, 64, &k) != S2_OK) {
        printf("%s: %s\n", paths[0], s2_ctx_message(ctx));
        rc = 1;
        goto done;
    }
    printf("loaded the %s module\n", s2_arch_name((s2_arch)s2_manifest_arch(s2_attn_module_manifest(mod))));
    int64_t seq = s2_attn_kernel_max_kv_len(k) < 1000 ? s2_attn_kernel_max_kv_len(k) : 1000;
    rc = ac_run_forward(ctx, dev, k, seq, 4242u);
done:
    s2_attn_module_free(mod); /* k is borrowed from it */
    s2_device_free(dev);
    s2_ctx_free(ctx);
    return rc;
}
