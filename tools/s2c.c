/* s2c — the command-line driver.
 *
 *   s2c check PATTERN...
 *   s2c layout PATTERN --seq-len N [--kv-len N] [--name N] [--format mask|schedule|stats] ...
 *   s2c compile PATTERN --arch ARCH [--emit cubin|ptx|ll] -o OUT ...
 *
 * Exit status: 0 success, 1 bad input (pattern, lengths, toolchain), 2 usage.
 */
#include "s2c/codegen.h"
#include "s2c/layout.h"
#include "s2c/pattern.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

static const char usage_text[] =
    "usage: s2c <command> [options]\n"
    "\n"
    "commands:\n"
    "  check PATTERN...            validate pattern files and print a summary of each pattern\n"
    "  layout PATTERN --seq-len N  expand a pattern for a query length (and key length)\n"
    "      --kv-len N              keys (default: seq-len); the queries are the last seq-len positions\n"
    "      --name NAME             which pattern of a multi-pattern file (default: the first)\n"
    "      --format mask|schedule|stats   (default: stats)\n"
    "      --block-m N --block-n N kernel tile for schedules and stats (default 128 x 64)\n"
    "      --head-dim D            for FLOP and byte counts (default 128)\n"
    "      --dtype bf16|fp16       for byte counts (default bf16)\n"
    "  compile PATTERN --arch sm_80|sm_90|sm_90a -o OUT\n"
    "      --name NAME             which pattern (default: the first)\n"
    "      --emit cubin|ptx|ll     what to write (default: cubin)\n"
    "      --backend auto|ptxas|nvjitlink   PTX -> cubin (default: auto = ptxas, else nvJitLink)\n"
    "      --dump-dir DIR          write every stage (pre-O3 IR, IR, PTX, cubin) to DIR\n"
    "      --override-dir DIR      use DIR/NAME.{ll,ptx,cubin} instead of a stage's own output\n"
    "      -v, --verbose           print the toolchain log and resource usage\n"
    "  --help, --version\n"
    "\n"
    "exit status: 0 success, 1 bad input, 2 usage error\n";

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "s2c: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 's2c --help'.\n");
    return EXIT_USAGE;
}

/* Report a library failure: pattern errors are already "file:line:col: msg". */
static int input_error(s2_ctx *ctx)
{
    const char *msg = s2_ctx_message(ctx);
    fprintf(stderr, "%s\n", msg[0] ? msg : s2_status_name(s2_ctx_status(ctx)));
    return EXIT_INPUT;
}

/* ---- option parsing ------------------------------------------------------ */

typedef struct opts {
    const char *pattern;
    const char *name;
    const char *format;
    const char *arch;
    const char *emit;
    const char *backend;
    const char *output;
    const char *dump_dir;
    const char *override_dir;
    const char *dtype;
    int64_t seq_len, kv_len;
    int64_t block_m, block_n, head_dim;
    int verbose;
} opts;

static int parse_int(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out)
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

/* Parses argv[first..]; positional arguments go to pos[] (up to max_pos). */
static int parse_opts(int argc, char **argv, int first, opts *o, const char **pos, int max_pos, int *npos)
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
        if (strcmp(key, "--name") == 0) o->name = val;
        else if (strcmp(key, "--format") == 0) o->format = val;
        else if (strcmp(key, "--arch") == 0) o->arch = val;
        else if (strcmp(key, "--emit") == 0) o->emit = val;
        else if (strcmp(key, "--backend") == 0) o->backend = val;
        else if (strcmp(key, "-o") == 0 || strcmp(key, "--output") == 0) o->output = val;
        else if (strcmp(key, "--dump-dir") == 0) o->dump_dir = val;
        else if (strcmp(key, "--override-dir") == 0) o->override_dir = val;
        else if (strcmp(key, "--dtype") == 0) o->dtype = val;
        else if (strcmp(key, "--seq-len") == 0) rc = parse_int(key, val, 1, S2_MAX_SEQ_LEN, &o->seq_len);
        else if (strcmp(key, "--kv-len") == 0) rc = parse_int(key, val, 1, S2_MAX_SEQ_LEN, &o->kv_len);
        else if (strcmp(key, "--block-m") == 0) rc = parse_int(key, val, 16, 128, &o->block_m);
        else if (strcmp(key, "--block-n") == 0) rc = parse_int(key, val, 16, 128, &o->block_n);
        else if (strcmp(key, "--head-dim") == 0) rc = parse_int(key, val, 1, 1024, &o->head_dim);
        else return usage_error("unknown option '%s'", key);
        if (rc)
            return EXIT_USAGE;
    }
    return 0;
}

/* Load PATTERN and pick the named (or first) pattern. */
static int load_pattern(s2_ctx *ctx, const opts *o, s2_pattern_set **set, const s2_pattern **p)
{
    if (s2_pattern_load(ctx, o->pattern, set) != S2_OK)
        return input_error(ctx);
    *p = o->name ? s2_pattern_set_find(*set, o->name) : s2_pattern_set_get(*set, 0);
    if (!*p) {
        fprintf(stderr, "%s: no pattern named '%s'\n", o->pattern, o->name ? o->name : "");
        return EXIT_INPUT;
    }
    return 0;
}

/* ---- check ---------------------------------------------------------------- */

static int cmd_check(s2_ctx *ctx, int argc, char **argv)
{
    opts o = {0};
    const char *files[256];
    int n = 0;
    int rc = parse_opts(argc, argv, 2, &o, files, 256, &n);
    if (rc)
        return rc;
    if (n == 0)
        return usage_error("%s", "check: missing PATTERN file");
    int status = EXIT_OK;
    for (int f = 0; f < n; f++) {
        s2_pattern_set *set = NULL;
        if (s2_pattern_load(ctx, files[f], &set) != S2_OK) {
            input_error(ctx);
            status = EXIT_INPUT;
            continue;
        }
        for (int i = 0; i < s2_pattern_set_count(set); i++) {
            const s2_pattern *p = s2_pattern_set_get(set, i);
            char *text = NULL;
            if (s2_pattern_describe(p, &text) != S2_OK) {
                fprintf(stderr, "s2c: out of memory\n");
                status = EXIT_INPUT;
                continue;
            }
            fputs(text, stdout);
            free(text);
            /* KV-cache efficiency over the longest sequence the pattern allows
             * (capped so that the check stays quick). */
            int64_t len = p->max_seq_len ? p->max_seq_len : 32768;
            if (len > 131072)
                len = 131072;
            s2_layout *l = NULL;
            bool ok = false;
            if (s2_layout_new(ctx, p, len, len, &l) == S2_OK &&
                s2_layout_check_kv_efficient(ctx, l, &ok) == S2_OK) {
                if (ok)
                    printf("  kv-cache efficient: yes (checked to %" PRId64 " tokens)\n", len);
                else
                    printf("  kv-cache efficient: no: %s\n", s2_ctx_message(ctx));
            } else {
                printf("  kv-cache efficiency: not checked: %s\n", s2_ctx_message(ctx));
            }
            s2_layout_free(l);
        }
        printf("%s: ok (%d pattern%s)\n", files[f], s2_pattern_set_count(set),
               s2_pattern_set_count(set) == 1 ? "" : "s");
        s2_pattern_set_free(set);
    }
    return status;
}

/* ---- layout --------------------------------------------------------------- */

static int cmd_layout(s2_ctx *ctx, int argc, char **argv)
{
    opts o = {.format = "stats", .block_m = 128, .block_n = 64, .head_dim = 128, .dtype = "bf16"};
    const char *pos[1];
    int n = 0;
    int rc = parse_opts(argc, argv, 2, &o, pos, 1, &n);
    if (rc)
        return rc;
    if (n != 1)
        return usage_error("%s", "layout: missing PATTERN file");
    o.pattern = pos[0];
    if (!o.seq_len)
        return usage_error("%s", "layout: --seq-len is required");
    int fmt = strcmp(o.format, "mask") == 0 ? 0 : strcmp(o.format, "schedule") == 0 ? 1
            : strcmp(o.format, "stats") == 0 ? 2 : -1;
    if (fmt < 0)
        return usage_error("layout: --format must be mask, schedule or stats, got '%s'", o.format);
    s2_dtype dt;
    if (strcmp(o.dtype, "bf16") == 0)
        dt = S2_DTYPE_BF16;
    else if (strcmp(o.dtype, "fp16") == 0 || strcmp(o.dtype, "f16") == 0)
        dt = S2_DTYPE_F16;
    else
        return usage_error("layout: --dtype must be bf16 or fp16, got '%s'", o.dtype);
    if ((o.block_m & (o.block_m - 1)) || (o.block_n & (o.block_n - 1)))
        return usage_error("%s", "layout: --block-m and --block-n must be powers of two");

    s2_pattern_set *set = NULL;
    const s2_pattern *p = NULL;
    rc = load_pattern(ctx, &o, &set, &p);
    if (rc) {
        s2_pattern_set_free(set);
        return rc;
    }
    int64_t kv_len = o.kv_len ? o.kv_len : o.seq_len;
    s2_layout *l = NULL;
    char *text = NULL;
    s2_tile_spec spec = {(int)o.block_m, (int)o.block_n};
    s2_status st = s2_layout_new(ctx, p, o.seq_len, kv_len, &l);
    if (st == S2_OK) {
        if (fmt == 0) {
            st = s2_layout_format_mask(ctx, l, &text);
        } else if (fmt == 1) {
            s2_schedule *sched = NULL;
            st = s2_schedule_build(ctx, l, spec, false, &sched);
            if (st == S2_OK)
                st = s2_schedule_format(ctx, sched, &text);
            s2_schedule_free(sched);
        } else {
            s2_layout_stats stats;
            st = s2_layout_stats_compute(ctx, l, spec, (int)o.head_dim, dt, &stats);
            if (st == S2_OK)
                st = s2_layout_stats_format(ctx, &stats, &text);
        }
    }
    if (st == S2_OK)
        fputs(text, stdout);
    free(text);
    s2_layout_free(l);
    s2_pattern_set_free(set);
    return st == S2_OK ? EXIT_OK : input_error(ctx);
}

/* ---- compile ---------------------------------------------------------------- */

static int cmd_compile(s2_ctx *ctx, int argc, char **argv)
{
    opts o = {.emit = "cubin", .backend = "auto"};
    const char *pos[1];
    int n = 0;
    int rc = parse_opts(argc, argv, 2, &o, pos, 1, &n);
    if (rc)
        return rc;
    if (n != 1)
        return usage_error("%s", "compile: missing PATTERN file");
    o.pattern = pos[0];
    if (!o.arch)
        return usage_error("%s", "compile: --arch is required (sm_80, sm_90 or sm_90a)");
    if (!o.output)
        return usage_error("%s", "compile: -o OUT is required");
    s2_arch arch;
    if (s2_arch_parse(o.arch, &arch) != S2_OK)
        return usage_error("compile: --arch must be sm_80, sm_90 or sm_90a, got '%s'", o.arch);
    int emit = strcmp(o.emit, "cubin") == 0 ? 0 : strcmp(o.emit, "ptx") == 0 ? 1 : strcmp(o.emit, "ll") == 0 ? 2 : -1;
    if (emit < 0)
        return usage_error("compile: --emit must be cubin, ptx or ll, got '%s'", o.emit);
    s2_cubin_backend backend;
    if (strcmp(o.backend, "auto") == 0)
        backend = S2_CUBIN_AUTO;
    else if (strcmp(o.backend, "ptxas") == 0)
        backend = S2_CUBIN_PTXAS;
    else if (strcmp(o.backend, "nvjitlink") == 0)
        backend = S2_CUBIN_NVJITLINK;
    else
        return usage_error("compile: --backend must be auto, ptxas or nvjitlink, got '%s'", o.backend);
    if ((o.dump_dir && s2_ctx_set_dump_dir(ctx, o.dump_dir) != S2_OK) ||
        (o.override_dir && s2_ctx_set_override_dir(ctx, o.override_dir) != S2_OK))
        return input_error(ctx);

    s2_pattern_set *set = NULL;
    const s2_pattern *p = NULL;
    rc = load_pattern(ctx, &o, &set, &p);
    if (rc) {
        s2_pattern_set_free(set);
        return rc;
    }
    s2_target target;
    s2_target_default(&target, arch);
    s2_artifact *art = NULL;
    /* every stage runs (the PTX is always assembled, so that --emit ptx
     * reports assembler errors too); --emit picks what is written */
    s2_status st = s2_compile_row_softmax(ctx, p, &target, backend, &art);
    if (st != S2_OK) {
        s2_pattern_set_free(set);
        return input_error(ctx);
    }
    const void *data = emit == 0 ? (const void *)art->cubin : emit == 1 ? (const void *)art->ptx : (const void *)art->ir;
    size_t size = emit == 0 ? art->cubin_size : emit == 1 ? art->ptx_len : strlen(art->ir);
    FILE *f = fopen(o.output, "wb");
    int status = EXIT_OK;
    if (!f || fwrite(data, 1, size, f) != size) {
        fprintf(stderr, "s2c: %s: %s\n", o.output, strerror(errno));
        status = EXIT_INPUT;
    }
    if (f && fclose(f) != 0 && status == EXIT_OK) {
        fprintf(stderr, "s2c: %s: %s\n", o.output, strerror(errno));
        status = EXIT_INPUT;
    }
    if (status == EXIT_OK && o.verbose) {
        if (art->log && art->log[0])
            fputs(art->log, stderr);
        for (int k = 0; k < art->num_kernels; k++) {
            const s2_kernel_info *ki = &art->kernels[k];
            fprintf(stderr, "%s: %d registers, %d bytes spill stores, %d bytes spill loads, %d bytes smem, via %s\n",
                    ki->name, ki->registers, ki->spill_stores, ki->spill_loads, ki->shared_static,
                    s2_cubin_backend_name(art->backend_used));
        }
    }
    if (status == EXIT_OK)
        printf("%s: wrote %zu bytes (%s, %s, pattern %s)\n", o.output, size, o.emit, o.arch, p->name);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    return status;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage_error("%s", "missing command");
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return EXIT_OK;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("s2c %s\n", s2_version());
        return EXIT_OK;
    }
    s2_ctx *ctx = s2_ctx_new();
    if (!ctx) {
        fprintf(stderr, "s2c: out of memory\n");
        return EXIT_INPUT;
    }
    int rc;
    if (strcmp(cmd, "check") == 0)
        rc = cmd_check(ctx, argc, argv);
    else if (strcmp(cmd, "layout") == 0)
        rc = cmd_layout(ctx, argc, argv);
    else if (strcmp(cmd, "compile") == 0)
        rc = cmd_compile(ctx, argc, argv);
    else
        rc = usage_error("unknown command '%s'", cmd);
    s2_ctx_free(ctx);
    return rc;
}
