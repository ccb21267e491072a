/* s2c info: what a generated cubin says about itself (no GPU). */
#include "cli.h"
#include "elf.h"
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

/* Text from the cubin as the terminal gets it: printable ASCII as it is,
 * any other byte as \xNN, so no control sequence reaches the terminal (the
 * JSON output escapes in its own way). */
static void put_text(const char *s, size_t len)
{
    for (size_t i = 0; i < len && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f)
            putchar(c);
        else
            printf("\\x%02x", c);
    }
}

/* s2_pattern_describe's text without its first line (which names the
 * pattern file: a manifest's patterns have none), indented. */
static void print_pattern(const s2_pattern *p)
{
    char *text = NULL;
    printf("pattern ");
    put_text(p->name, strlen(p->name));
    printf("\n");
    if (s2_pattern_describe(p, &text) != S2_OK) {
        printf("  (no summary: out of memory)\n");
        return;
    }
    const char *s = strchr(text, '\n');
    for (s = s ? s + 1 : text; *s;) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        printf("  ");
        put_text(s, len);
        printf("\n");
        s += len + (nl ? 1 : 0);
    }
    free(text);
}

static const char *kind_name(s2_kernel_kind k)
{
    return k == S2_KERNEL_FWD ? "fwd" : k == S2_KERNEL_BWD ? "bwd" : k == S2_KERNEL_DECODE ? "decode" : "?";
}

/* The registers of one kernel (-1: none recorded); the reason in ctx. */
static int regs_of(s2_ctx *ctx, const uint8_t *image, size_t size, const char *symbol)
{
    int regs = -1;
    return s2_elf_regcount(ctx, image, size, symbol, &regs) == S2_OK ? regs : -1;
}

static void info_json(s2_ctx *ctx, const char *path, const uint8_t *image, size_t size, const s2_manifest *m)
{
    printf("{\"schema_version\": 1, \"command\": \"info\", \"path\": ");
    json_str(stdout, path);
    printf(", \"bytes\": %zu, \"generator\": ", size);
    json_str(stdout, s2_manifest_generator(m));
    printf(", \"arch\": ");
    json_str(stdout, s2_arch_name((s2_arch)s2_manifest_arch(m)));
    printf(", \"entries\": [");
    for (int i = 0; i < s2_manifest_num_kernels(m); i++) {
        const s2_manifest_kernel *k = s2_manifest_kernel_at(m, i);
        const s2_kernel_spec *s = &k->spec;
        printf("%s{\"name\": ", i ? ", " : "");
        json_str(stdout, k->name);
        printf(", \"pattern\": ");
        json_str(stdout, k->pattern);
        printf(", \"kind\": \"%s\", \"dtype\": ", kind_name(s->kind));
        json_str(stdout, s2_dtype_name(s->dtype));
        if (s->kv_dtype) {
            printf(", \"kv_dtype\": ");
            json_str(stdout, s2_dtype_name(s->kv_dtype));
        }
        printf(", \"head_dim\": %d, \"block_m\": %d, \"block_n\": %d, \"num_warps\": %d, \"num_stages\": %d, "
               "\"threads\": %d, \"smem_bytes\": %d, \"kernels\": [",
               s->head_dim, s->block_m, s->block_n, s->num_warps, s->num_stages, k->threads, k->smem_bytes);
        for (int j = 0; j < k->num_fns; j++) {
            const s2_kernel_record *r = &k->fns[j];
            const s2_kspec *t = &r->spec;
            int regs = regs_of(ctx, image, size, r->symbol);
            printf("%s{\"symbol\": ", j ? ", " : "");
            json_str(stdout, r->symbol);
            printf(", \"role\": ");
            json_str(stdout, s2_role_name(r->role));
            printf(", \"abi\": ");
            json_str(stdout, s2_abi_get(r->abi)->name);
            printf(", \"grid\": ");
            json_str(stdout, s2_grid_name(r->grid));
            printf(", \"threads\": %d, \"smem_bytes\": %d, \"block_m\": %d, \"block_n\": %d, \"num_warps\": %d, "
                   "\"num_stages\": %d, \"kv_gather\": %d, \"min_keys\": %d, \"registers\": ",
                   r->threads, r->smem_bytes, t->block_m, t->block_n, t->num_warps, t->num_stages,
                   t->kv_gather > 1 ? t->kv_gather : 1, r->min_keys);
            if (regs >= 0)
                printf("%d}", regs);
            else
                printf("null}");
        }
        printf("]}");
    }
    printf("], \"patterns\": [");
    for (int i = 0; i < s2_manifest_num_patterns(m); i++) {
        printf("%s", i ? ", " : "");
        json_pattern(stdout, s2_manifest_pattern_at(m, i));
    }
    printf("]}\n");
}

int cmd_info(s2_ctx *ctx, int argc, char **argv)
{
    opts o = {.format = "text"};
    int rc = parse_one_file(argc, argv, &o, "CUBIN");
    if (rc)
        return rc;
    bool json = strcmp(o.format, "json") == 0;
    if (!json && strcmp(o.format, "text") != 0)
        return usage_error("info: --format must be text or json, got '%s'", o.format);
    const char *path = strcmp(o.pattern, "-") == 0 ? "<stdin>" : o.pattern; /* the operand: here a cubin */
    uint8_t *image = NULL;
    size_t size = 0;
    rc = read_input(o.pattern, CLI_MAX_STDIN, &image, &size);
    if (rc)
        return rc;
    const char *text = NULL;
    size_t len = 0;
    s2_manifest *m = NULL;
    s2_status st = s2_cubin_find_manifest(ctx, image, size, &text, &len);
    if (st == S2_ERR_NOT_FOUND)
        rc = input_fail("%s: no s2c manifest (symbol %s) in this cubin", path, S2_MANIFEST_SYMBOL);
    else if (st != S2_OK || s2_manifest_parse(ctx, text, len, &m) != S2_OK)
        rc = input_fail("%s: %s", path, s2_ctx_message(ctx));
    if (rc == 0 && json) {
        info_json(ctx, path, image, size, m);
    } else if (rc == 0) {
        int nk = s2_manifest_num_kernels(m), npat = s2_manifest_num_patterns(m);
        const char *gen = s2_manifest_generator(m);
        printf("%s: %zu bytes, generator s2c ", path, size);
        put_text(gen, strlen(gen));
        printf(", arch %s, %d kernel%s, %d pattern%s\n", s2_arch_name((s2_arch)s2_manifest_arch(m)), nk,
               nk == 1 ? "" : "s", npat, npat == 1 ? "" : "s");
        for (int i = 0; i < nk; i++) {
            const s2_manifest_kernel *k = s2_manifest_kernel_at(m, i);
            print_kernel(stdout, k); /* names and symbols: printable ASCII, as the manifest parser requires */
            /* the main kernel's (the entry's launch shape: NAME, or NAME_dkdv of a backward), then the others' */
            const s2_kernel_record *main = s2_manifest_kernel_fn(k, s2_main_role(k->spec.kind));
            int regs = regs_of(ctx, image, size, main ? main->symbol : k->name);
            if (regs >= 0)
                printf("  registers %d (EIATTR_REGCOUNT)\n", regs);
            else
                printf("  registers unknown (%s)\n", s2_ctx_message(ctx));
            for (int j = 0; j < k->num_fns; j++) {
                if (&k->fns[j] == main)
                    continue;
                regs = regs_of(ctx, image, size, k->fns[j].symbol);
                if (regs >= 0)
                    printf("  %s: registers %d\n", k->fns[j].symbol, regs);
                else
                    printf("  %s: registers unknown (%s)\n", k->fns[j].symbol, s2_ctx_message(ctx));
            }
        }
        for (int i = 0; i < npat; i++)
            print_pattern(s2_manifest_pattern_at(m, i));
    }
    s2_manifest_free(m);
    free(image);
    return rc;
}
