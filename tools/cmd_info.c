/* s2c info: what a generated cubin says about itself (no GPU). */
#include "cli.h"
#include "kernel_abi.h"
#include "s2c/aot.h"
#include "s2c/attention.h"
#include "s2c/codegen.h"
#include "s2c/kv_evict.h"
#include "s2c/layout.h"
#include "s2c/pattern.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- info ------------------------------------------------------------------- */

static int read_whole(const char *path, uint8_t **data, size_t *size)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    if (!f) {
        fprintf(stderr, "s2c: %s: %s\n", path, strerror(errno));
        return EXIT_INPUT;
    }
    for (;;) {
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 1 << 16;
            uint8_t *nb = ncap > cap ? realloc(buf, ncap) : NULL;
            if (!nb) {
                free(buf);
                fclose(f);
                fprintf(stderr, "s2c: %s: out of memory\n", path);
                return EXIT_INPUT;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        fprintf(stderr, "s2c: %s: read error\n", path);
        return EXIT_INPUT;
    }
    *data = buf;
    *size = n;
    return 0;
}

/* s2_pattern_describe's text without its first line (which names the
 * pattern file: a manifest's patterns have none), indented. */
static void print_pattern(const s2_pattern *p)
{
    char *text = NULL;
    printf("pattern %s\n", p->name);
    if (s2_pattern_describe(p, &text) != S2_OK) {
        printf("  (no summary: out of memory)\n");
        return;
    }
    const char *s = strchr(text, '\n');
    for (s = s ? s + 1 : text; *s;) {
        const char *nl = strchr(s, '\n');
        int len = nl ? (int)(nl - s) : (int)strlen(s);
        printf("  %.*s\n", len, s);
        s += len + (nl ? 1 : 0);
    }
    free(text);
}

int cmd_info(s2_ctx *ctx, int argc, char **argv)
{
    opts o = {0};
    int rc = parse_one_file(argc, argv, &o, "info", "CUBIN");
    if (rc)
        return rc;
    const char *path = o.pattern; /* the operand: here a cubin */
    uint8_t *image = NULL;
    size_t size = 0;
    rc = read_whole(path, &image, &size);
    if (rc)
        return rc;
    const char *text = NULL;
    size_t len = 0;
    s2_manifest *m = NULL;
    s2_status st = s2_cubin_find_manifest(ctx, image, size, &text, &len);
    if (st == S2_ERR_NOT_FOUND) {
        fprintf(stderr, "%s: no s2c manifest (symbol %s) in this cubin\n", path, S2_MANIFEST_SYMBOL);
        rc = EXIT_INPUT;
    } else if (st != S2_OK || s2_manifest_parse(ctx, text, len, &m) != S2_OK) {
        fprintf(stderr, "%s: %s\n", path, s2_ctx_message(ctx));
        rc = EXIT_INPUT;
    }
    if (rc == 0) {
        int nk = s2_manifest_num_kernels(m), npat = s2_manifest_num_patterns(m);
        printf("%s: %zu bytes, generator s2c %s, arch %s, %d kernel%s, %d pattern%s\n", path, size,
               s2_manifest_generator(m), s2_arch_name((s2_arch)s2_manifest_arch(m)), nk, nk == 1 ? "" : "s", npat,
               npat == 1 ? "" : "s");
        for (int i = 0; i < nk; i++) {
            const s2_manifest_kernel *k = s2_manifest_kernel_at(m, i);
            print_kernel(k);
            /* the main kernel's (the entry's launch shape: NAME, or NAME_dkdv of a backward), then the others' */
            const s2_kernel_record *main = s2_manifest_kernel_fn(k, s2_main_role(k->spec.kind));
            int regs = s2_cubin_regcount(image, size, main ? main->symbol : k->name);
            if (regs >= 0)
                printf("  registers %d (EIATTR_REGCOUNT)\n", regs);
            else
                printf("  registers unknown (no EIATTR_REGCOUNT for this kernel)\n");
            for (int j = 0; j < k->num_fns; j++)
                if (&k->fns[j] != main)
                    printf("  %s: registers %d\n", k->fns[j].symbol, s2_cubin_regcount(image, size, k->fns[j].symbol));
        }
        for (int i = 0; i < npat; i++)
            print_pattern(s2_manifest_pattern_at(m, i));
    }
    s2_manifest_free(m);
    free(image);
    return rc;
}
