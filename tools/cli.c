/* s2c's option parser, messages and the pattern loading every command shares. */
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

int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "s2c: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 's2c --help'.\n");
    return EXIT_USAGE;
}

/* Report a library failure: pattern errors are already "file:line:col: msg". */
int input_error(s2_ctx *ctx)
{
    const char *msg = s2_ctx_message(ctx);
    fprintf(stderr, "%s\n", msg[0] ? msg : s2_status_name(s2_ctx_status(ctx)));
    return EXIT_INPUT;
}

int parse_int(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "s2c: %s: expected an integer in %" PRId64 "..%" PRId64 ", got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int parse_dtype(const char *text, s2_dtype *dt)
{
    if (strcmp(text, "bf16") == 0)
        *dt = S2_DTYPE_BF16;
    else if (strcmp(text, "fp16") == 0 || strcmp(text, "f16") == 0)
        *dt = S2_DTYPE_F16;
    else
        return -1;
    return 0;
}

/* Parses argv[first..]; positional arguments go to pos[] (up to max_pos). */
int parse_opts(int argc, char **argv, int first, opts *o, const char **pos, int max_pos, int *npos)
{
    *npos = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || strcmp(a, "-") == 0) {
            if (*npos >= max_pos)
                return usage_error("unexpected argument '%s'", a);
            pos[(*npos)++] = a;
            continue;
        }
        if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            o->verbose = 1;
            continue;
        }
        /* every other option takes a value: --opt VALUE or --opt=VALUE */
        const char *val = NULL;
        char key[64];
        const char *eq = strchr(a, '=');
        if (eq) {
            size_t n = (size_t)(eq - a);
            if (n >= sizeof key)
                return usage_error("unknown option '%s'", a);
            memcpy(key, a, n);
            key[n] = '\0';
            val = eq + 1;
        } else {
            snprintf(key, sizeof key, "%s", a);
            if (i + 1 >= argc)
                return usage_error("option '%s' needs a value", a);
            val = argv[++i];
        }
        int rc = 0;
        if (strcmp(key, "--name") == 0) {
            if (o->num_names >= MAX_NAMES)
                return usage_error("%s", "too many --name options");
            o->names[o->num_names++] = val;
        }
        else if (strcmp(key, "--allow-mask-path") == 0) {
            if (o->num_mask_dirs >= MAX_MASK_DIRS)
                return usage_error("%s", "at most 16 --allow-mask-path");
            if (!val[0])
                return usage_error("%s", "--allow-mask-path: expected a directory, got ''");
            o->mask_dirs[o->num_mask_dirs++] = val;
        }
        else if (strcmp(key, "--format") == 0) o->format = val;
        else if (strcmp(key, "--arch") == 0) o->arch = val;
        else if (strcmp(key, "--emit") == 0) o->emit = val;
        else if (strcmp(key, "--backend") == 0) o->backend = val;
        else if (strcmp(key, "--kernel") == 0) o->kernel = val;
        else if (strcmp(key, "-o") == 0 || strcmp(key, "--output") == 0) o->output = val;
        else if (strcmp(key, "--dump-dir") == 0) o->dump_dir = val;
        else if (strcmp(key, "--override-dir") == 0) o->override_dir = val;
        else if (strcmp(key, "--dtype") == 0) o->dtype = val;
        else if (strcmp(key, "--seq-len") == 0) {
            o->seq_len_text = val;
            rc = strchr(val, ',') ? 0 : parse_int(key, val, 1, S2_MAX_SEQ_LEN, &o->seq_len);
        }
        else if (strcmp(key, "--page-size") == 0) rc = parse_int(key, val, 16, 1 << 20, &o->page_size);
        else if (strcmp(key, "--prefill") == 0) rc = parse_int(key, val, 0, S2_MAX_SEQ_LEN, &o->prefill);
        else if (strcmp(key, "--kind") == 0) o->kind = val;
        else if (strcmp(key, "--kv-len") == 0) rc = parse_int(key, val, 1, S2_MAX_SEQ_LEN, &o->kv_len);
        else if (strcmp(key, "--block-m") == 0) rc = parse_int(key, val, 16, 128, &o->block_m);
        else if (strcmp(key, "--block-n") == 0) rc = parse_int(key, val, 16, 128, &o->block_n);
        else if (strcmp(key, "--head-dim") == 0) rc = parse_int(key, val, 1, 1024, &o->head_dim);
        else if (strcmp(key, "--num-warps") == 0) rc = parse_int(key, val, 1, 32, &o->num_warps);
        else if (strcmp(key, "--num-stages") == 0) rc = parse_int(key, val, 1, 16, &o->num_stages);
        else if (strcmp(key, "--kv-gather") == 0) rc = parse_int(key, val, 1, 4, &o->kv_gather);
        else if (strcmp(key, "--max-bytes") == 0) rc = parse_int(key, val, 1, INT64_C(1) << 50, &o->max_bytes);
        else if (strcmp(key, "--option") == 0) {
            if (o->num_options == (int)(sizeof o->options / sizeof o->options[0]))
                return usage_error("%s", "at most 8 --option");
            o->options[o->num_options++] = val;
        } else return usage_error("unknown option '%s'", key);
        if (rc)
            return EXIT_USAGE;
    }
    return 0;
}

/* Parse a command taking exactly one FILE operand into o->pattern. */
int parse_one_file(int argc, char **argv, opts *o, const char *cmd, const char *what)
{
    const char *pos[1];
    int n = 0;
    int rc = parse_opts(argc, argv, 2, o, pos, 1, &n);
    if (rc)
        return rc;
    if (n != 1) {
        fprintf(stderr, "s2c: %s: missing %s file\nTry 's2c --help'.\n", cmd, what);
        return EXIT_USAGE;
    }
    o->pattern = pos[0];
    return 0;
}

s2_status load_pattern_file(s2_ctx *ctx, const opts *o, const char *path, s2_pattern_set **set)
{
    s2_pattern_load_options lo = {.allow_mask_dirs = o->num_mask_dirs ? o->mask_dirs : NULL};
    return s2_pattern_load_opts(ctx, path, &lo, set);
}

/* Load PATTERN and pick the named patterns (none named: max_all of the
 * file's patterns, all when max_all < 0).  *n receives the count. */
int load_patterns(s2_ctx *ctx, const opts *o, int max_all, s2_pattern_set **set, const s2_pattern **p,
                         int *n)
{
    *n = 0;
    if (load_pattern_file(ctx, o, o->pattern, set) != S2_OK)
        return input_error(ctx);
    for (int i = 0; i < o->num_names; i++) {
        p[i] = s2_pattern_set_find(*set, o->names[i]);
        if (!p[i]) {
            fprintf(stderr, "%s: no pattern named '%s'\n", o->pattern, o->names[i]);
            return EXIT_INPUT;
        }
    }
    *n = o->num_names;
    if (*n == 0) {
        int count = s2_pattern_set_count(*set);
        *n = max_all >= 0 && count > max_all ? max_all : count;
        for (int i = 0; i < *n; i++)
            p[i] = s2_pattern_set_get(*set, i);
    }
    return 0;
}

/* An entry of a manifest: its spec, then each of its kernels. */
void print_kernel(const s2_manifest_kernel *k)
{
    const s2_kernel_spec *s = &k->spec;
    printf("kernel %s: pattern %s, %s %s, head_dim %d, block_m %d, block_n %d, num_warps %d, num_stages %d, "
           "%d threads, %d bytes smem\n",
           k->name, k->pattern, s->kind == S2_KERNEL_FWD ? "fwd" : s->kind == S2_KERNEL_BWD ? "bwd" : s->kind == S2_KERNEL_DECODE ? "decode" : "?",
           s2_dtype_name(s->dtype), s->head_dim,
           s->block_m, s->block_n, s->num_warps, s->num_stages, k->threads, k->smem_bytes);
    /* every kernel of the entry, as its manifest record says */
    for (int i = 0; i < k->num_fns; i++) {
        const s2_kernel_record *r = &k->fns[i];
        const s2_kspec *t = &r->spec;
        printf("  %s: %s, abi %s, grid %s, %d threads, %d bytes smem", r->symbol, s2_role_name(r->role),
               s2_abi_get(r->abi)->name, s2_grid_name(r->grid), r->threads, r->smem_bytes);
        if (t->block_m != s->block_m || t->block_n != s->block_n || t->num_warps != s->num_warps ||
            t->num_stages != s->num_stages)
            printf(", block_m %d, block_n %d, num_warps %d, num_stages %d", t->block_m, t->block_n, t->num_warps,
                   t->num_stages);
        if (t->kv_gather > 1)
            printf(", %d gathered blocks", t->kv_gather);
        printf("\n");
    }
}
