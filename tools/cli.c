/* s2c's option parser, messages and the pattern loading every command shares. */
#include "cli.h"
#include "dtype.h"
#include "kernel_abi.h"
#include "s2c/aot.h"
#include "s2c/attention.h"
#include "s2c/codegen.h"
#include "s2c/kv_evict.h"
#include "s2c/layout.h"
#include "s2c/pattern.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <getopt.h>
#include <string.h>
#include <sys/stat.h>

int parse_int(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        usage_error("%s: %s: expected an integer in %" PRId64 "..%" PRId64 ", got '%s'", cli_command_prefix(), opt, lo,
                    hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int parse_dtype(const char *text, s2_dtype *dt)
{
    const s2_dtype_info *r = s2_dtype_by_name(text, true);
    if (r && !r->kernels)
        return usage_error("%s: --dtype %s: %s is not supported by any template yet", cli_command_prefix(), text,
                           r->title);
    if (!r) {
        char names[64];
        s2_dtype_kernel_names(names, sizeof names, true);
        return usage_error("%s: --dtype must be %s, got '%s'", cli_command_prefix(), names, text);
    }
    *dt = r->dtype;
    return 0;
}

/* ---- options ------------------------------------------------------------- */

/* Every option of every command (ids in cli.h); each command names the ones
 * it takes.  The clang-style -MD/-MF/-MT are taken out of argv before
 * getopt_long. */
static const struct option all_options[] = {
    {"output", required_argument, NULL, O_OUTPUT}, {"verbose", no_argument, NULL, O_VERBOSE},
    {"help", no_argument, NULL, O_HELP}, {"quiet", no_argument, NULL, O_QUIET},
    {"name", required_argument, NULL, O_NAME}, {"allow-mask-path", required_argument, NULL, O_ALLOW},
    {"format", required_argument, NULL, O_FORMAT}, {"arch", required_argument, NULL, O_ARCH},
    {"emit", required_argument, NULL, O_EMIT}, {"backend", required_argument, NULL, O_BACKEND},
    {"kernel", required_argument, NULL, O_KERNEL}, {"dump-dir", required_argument, NULL, O_DUMP},
    {"override-dir", required_argument, NULL, O_OVERRIDE}, {"dtype", required_argument, NULL, O_DTYPE},
    {"seq-len", required_argument, NULL, O_SEQ_LEN}, {"kv-len", required_argument, NULL, O_KV_LEN},
    {"page-size", required_argument, NULL, O_PAGE}, {"prefill", required_argument, NULL, O_PREFILL},
    {"kind", required_argument, NULL, O_KIND}, {"block-m", required_argument, NULL, O_BLOCK_M},
    {"block-n", required_argument, NULL, O_BLOCK_N}, {"head-dim", required_argument, NULL, O_HEAD_DIM},
    {"num-warps", required_argument, NULL, O_WARPS}, {"num-stages", required_argument, NULL, O_STAGES},
    {"kv-gather", required_argument, NULL, O_KV_GATHER}, {"max-bytes", required_argument, NULL, O_MAX_BYTES},
    {"option", required_argument, NULL, O_OPTION}, {"ranks", required_argument, NULL, O_RANKS},
    {"sharding", required_argument, NULL, O_SHARDING}, {"tflops", required_argument, NULL, O_TFLOPS},
    {"link-gbps", required_argument, NULL, O_LINK}, {"kv-dtype", required_argument, NULL, O_KV_DTYPE},
    {NULL, 0, NULL, 0},
};

static const struct option *option_by_id(int id)
{
    for (const struct option *d = all_options; d->name; d++)
        if (d->val == id)
            return d;
    return NULL;
}

static const struct option *option_by_name(const char *name, size_t n)
{
    for (const struct option *d = all_options; d->name; d++)
        if (strlen(d->name) == n && strncmp(d->name, name, n) == 0)
            return d;
    return NULL;
}

static bool takes(const cli_command *c, int id)
{
    for (const int *i = c->options; *i; i++)
        if (*i == id)
            return true;
    return false;
}

/* "s2c: error: CMD: MESSAGE" and the note; EXIT_USAGE */
static int cmd_error(const cli_command *c, const char *fmt, const char *arg)
{
    char msg[512];
    snprintf(msg, sizeof msg, fmt, arg);
    return usage_error("%s: %s", c->name, msg);
}

static int not_for(const cli_command *c, const char *shown)
{
    return usage_error("%s: option '%s' does not apply to %s", c->name, shown, c->name);
}

/* "unknown option '--formt'; did you mean '--format'?" among c's own options */
static int unknown_option(const cli_command *c, const char *shown)
{
    const char *names[64];
    char spelled[64][40];
    size_t n = 0;
    for (const struct option *d = all_options; d->name && n < 64; d++) {
        if (!takes(c, d->val))
            continue;
        snprintf(spelled[n], sizeof spelled[n], "--%s", d->name);
        names[n] = spelled[n];
        n++;
    }
    static const struct { int id; const char *name; } dep_opts[] = {{O_MD, "-MD"}, {O_MF, "-MF"}, {O_MT, "-MT"}};
    for (size_t i = 0; i < sizeof dep_opts / sizeof dep_opts[0] && n < 64; i++)
        if (takes(c, dep_opts[i].id))
            names[n++] = dep_opts[i].name;
    char hint[128];
    return usage_error("%s: unknown option '%s'%s", c->name, shown, did_you_mean(hint, sizeof hint, shown, names, n));
}

/* -MD, -MF FILE (-MFFILE), -MT NAME (-MTNAME): taken out of args (getopt_long
 * knows no multi-letter short options), skipping the values of the options
 * that take one. */
static int take_dep_options(const cli_command *c, int *argc, char **args, opts *o)
{
    int out = 1;
    bool done = false;
    for (int i = 1; i < *argc; i++) {
        const char *a = args[i];
        if (done || a[0] != '-' || !a[1]) {
            args[out++] = args[i];
            continue;
        }
        if (strcmp(a, "--") == 0) {
            done = true;
            args[out++] = args[i];
            continue;
        }
        int kind = strcmp(a, "-MD") == 0 ? O_MD : strncmp(a, "-MF", 3) == 0 ? O_MF : strncmp(a, "-MT", 3) == 0 ? O_MT : 0;
        if (kind) {
            char shown[4] = {'-', 'M', a[2], 0};
            if (!takes(c, kind))
                return not_for(c, shown);
            const char *val = a + 3;
            if (kind != O_MD && !*val) {
                if (i + 1 >= *argc)
                    return cmd_error(c, "option '%s' needs a value", shown);
                val = args[++i];
            }
            if (kind == O_MD)
                o->depfile = 1;
            else if (kind == O_MF)
                o->depfile = 1, o->depfile_path = val;
            else
                o->dep_target = val;
            continue;
        }
        args[out++] = args[i];
        /* the value of "--opt VALUE" or "-o VALUE" is not an option */
        const struct option *d = NULL;
        if (a[1] == '-' && !strchr(a, '='))
            d = option_by_name(a + 2, strlen(a + 2));
        if ((d && d->has_arg == required_argument) || strcmp(a, "-o") == 0) {
            if (i + 1 < *argc)
                args[out++] = args[++i];
        }
    }
    *argc = out;
    args[out] = NULL;
    return 0;
}

/* Elements of an array. */
#define LEN(a) (int)(sizeof(a) / sizeof((a)[0]))

/* A repeatable option's value appended to its list of cap values. */
static int add_value(const char **list, int *n, int cap, const char *val, const char *option)
{
    if (*n >= cap)
        return usage_error("%s: at most %d --%s", cli_command_prefix(), cap, option);
    list[(*n)++] = val;
    return 0;
}

/* One option's value into o. */
static int set_option(opts *o, int id, const char *key, const char *val)
{
    int rc = 0;
    switch (id) {
    case O_VERBOSE: o->verbose = 1; break;
    case O_QUIET: o->quiet = 1; break;
    case O_NAME: rc = add_value(o->names, &o->num_names, MAX_NAMES, val, "name"); break;
    case O_ALLOW:
        if (!val[0])
            return usage_error("%s: --allow-mask-path: expected a directory, got ''", cli_command_prefix());
        rc = add_value(o->mask_dirs, &o->num_mask_dirs, MAX_MASK_DIRS, val, "allow-mask-path");
        break;
    case O_FORMAT: o->format = val; break;
    case O_ARCH:
        if (!(rc = add_value(o->archs, &o->num_archs, LEN(o->archs), val, "arch")))
            o->arch = val;
        break;
    case O_EMIT: o->emit = val; break;
    case O_BACKEND: o->backend = val; break;
    case O_KERNEL: o->kernel = val; break;
    case O_OUTPUT: o->output = val; break;
    case O_DUMP: o->dump_dir = val; break;
    case O_OVERRIDE: o->override_dir = val; break;
    case O_DTYPE: o->dtype = val; break;
    case O_SEQ_LEN:
        o->seq_len_text = val;
        rc = strchr(val, ',') ? 0 : parse_int(key, val, 1, S2_MAX_SEQ_LEN, &o->seq_len);
        break;
    case O_PAGE: rc = parse_int(key, val, 16, 1 << 20, &o->page_size); break;
    case O_PREFILL: rc = parse_int(key, val, 0, S2_MAX_SEQ_LEN, &o->prefill); break;
    case O_KIND: o->kind = val; break;
    case O_KV_LEN: rc = parse_int(key, val, 1, S2_MAX_SEQ_LEN, &o->kv_len); break;
    case O_BLOCK_M: rc = parse_int(key, val, 16, 128, &o->block_m); break;
    case O_BLOCK_N: rc = parse_int(key, val, 16, 128, &o->block_n); break;
    case O_HEAD_DIM: rc = parse_int(key, val, 1, 1024, &o->head_dim); break;
    case O_WARPS: rc = parse_int(key, val, 1, 32, &o->num_warps); break;
    case O_STAGES: rc = parse_int(key, val, 1, 16, &o->num_stages); break;
    case O_KV_GATHER: rc = parse_int(key, val, 1, 4, &o->kv_gather); break;
    case O_MAX_BYTES: rc = parse_int(key, val, 1, INT64_C(1) << 50, &o->max_bytes); break;
    case O_OPTION: rc = add_value(o->options, &o->num_options, LEN(o->options), val, "option"); break;
    case O_RANKS: o->ranks_text = val; break;
    case O_SHARDING: o->sharding = val; break;
    case O_TFLOPS: o->tflops_text = val; break;
    case O_LINK: o->link_text = val; break;
    case O_KV_DTYPE: o->kv_dtype = val; break;
    }
    return rc ? EXIT_USAGE : 0;
}

/* What getopt_long refused (opterr 0): argv[optind - 1] or the short option. */
static int refused(const cli_command *c, int ret, char **args)
{
    const char *a = optind > 0 ? args[optind - 1] : "";
    char shown[128];
    if (optopt && optopt < 256 && !(a[0] == '-' && a[1] == '-')) {
        snprintf(shown, sizeof shown, "-%c", optopt);
    } else {
        size_t n = strcspn(a, "=");
        snprintf(shown, sizeof shown, "%.*s", (int)(n < 100 ? n : 100), a);
    }
    if (ret == ':')
        return cmd_error(c, "option '%s' needs a value", shown);
    if (optopt && optopt < 256 && !(a[0] == '-' && a[1] == '-')) {
        if (option_by_id(optopt))
            return not_for(c, shown);
        return unknown_option(c, shown);
    }
    const struct option *d = shown[0] == '-' && shown[1] == '-' ? option_by_name(shown + 2, strlen(shown + 2)) : NULL;
    if (d && takes(c, d->val))
        return cmd_error(c, "option '%s' takes no value", shown);
    if (d)
        return not_for(c, shown);
    return unknown_option(c, shown);
}

int parse_opts(int argc, char **argv, opts *o, const char **pos, int max_pos, int *npos)
{
    *npos = 0;
    const cli_command *c = cli_find_command(argv[1]);
    if (!c)
        return usage_error("unknown command '%s'", argv[1]);
    cli_set_command(c->name);
    /* getopt_long permutes its argv: a copy, argv[1..] (the command is its argv[0]) */
    char **args = calloc((size_t)argc + 1, sizeof *args);
    struct option *table = calloc(sizeof all_options / sizeof all_options[0], sizeof *table);
    if (!args || !table) {
        free(args);
        free(table);
        return input_fail("out of memory");
    }
    int n = argc - 1;
    for (int i = 0; i < n; i++)
        args[i] = argv[i + 1];
    char shorts[16] = ":";
    int nt = 0;
    for (const struct option *d = all_options; d->name; d++)
        if (takes(c, d->val)) {
            table[nt++] = *d;
            if (d->val < 256) {
                size_t l = strlen(shorts);
                shorts[l] = (char)d->val;
                shorts[l + 1] = d->has_arg == required_argument ? ':' : 0;
                shorts[l + 2] = 0;
            }
        }
    int rc = take_dep_options(c, &n, args, o);
    opterr = 0;
    optind = 0; /* glibc: a full reset */
    while (rc == 0) {
        optopt = 0;
        int li = -1;
        int ret = getopt_long(n, args, shorts, table, &li);
        if (ret == -1)
            break;
        if (ret == '?' || ret == ':') {
            rc = refused(c, ret, args);
        } else if (ret == O_HELP) {
            fputs(c->usage, stdout);
            rc = EXIT_HELP;
        } else {
            char key[64];
            const struct option *d = option_by_id(ret);
            if (ret < 256)
                snprintf(key, sizeof key, "-%c", ret);
            else
                snprintf(key, sizeof key, "--%s", d ? d->name : "?");
            rc = set_option(o, ret, key, optarg);
        }
    }
    for (int i = optind; rc == 0 && i < n; i++) {
        if (*npos >= max_pos)
            rc = cmd_error(c, "unexpected argument '%s'", args[i]);
        else
            pos[(*npos)++] = args[i];
    }
    free(args);
    free(table);
    return rc;
}

/* Parse a command taking exactly one FILE operand into o->pattern. */
int parse_one_file(int argc, char **argv, opts *o, const char *what)
{
    const char *pos[1];
    int n = 0;
    int rc = parse_opts(argc, argv, o, pos, 1, &n);
    if (rc)
        return rc;
    if (n != 1)
        return usage_error("%s: missing %s file", argv[1], what);
    o->pattern = pos[0];
    return 0;
}

/* ---- files --------------------------------------------------------------- */

/* read_input without printing: the reason, "NAME: why", in why[]. */
static int read_all(const char *path, size_t max, uint8_t **data, size_t *size, char *why, size_t why_len)
{
    bool in = strcmp(path, "-") == 0;
    const char *shown = in ? "<stdin>" : path;
    FILE *f = in ? stdin : fopen(path, "rb");
    if (!f) {
        snprintf(why, why_len, "%s: %s", shown, strerror(errno));
        return EXIT_INPUT;
    }
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    const char *bad = NULL;
    while (!bad) {
        if (n == cap) {
            if (cap > max) {
                bad = "too large";
                break;
            }
            size_t ncap = cap ? cap * 2 : 1 << 16;
            if (ncap > max + 1)
                ncap = max + 1;
            uint8_t *nb = realloc(buf, ncap + 1);
            if (!nb) {
                bad = "out of memory";
                break;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    if (!bad && ferror(f))
        bad = "read error";
    if (!bad && n > max)
        bad = "too large";
    if (!in)
        fclose(f);
    if (bad) {
        free(buf);
        if (strcmp(bad, "too large") == 0)
            snprintf(why, why_len, "%s: more than %zu bytes", shown, max);
        else
            snprintf(why, why_len, "%s: %s", shown, bad);
        return EXIT_INPUT;
    }
    buf[n] = 0;
    *data = buf;
    *size = n;
    return 0;
}

int read_input(const char *path, size_t max, uint8_t **data, size_t *size)
{
    char why[4200];
    int rc = read_all(path, max, data, size, why, sizeof why);
    if (rc)
        input_fail("%s", why);
    return rc;
}

int make_dirs(const char *dir)
{
    char failed[4096];
    int err = s2_make_dirs(dir, 0777, failed, sizeof failed);
    if (!err)
        return 0;
    return input_fail("cannot create directory '%s': %s", failed, err == EEXIST ? "a file is in the way" : strerror(err));
}

int make_parent_dirs(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path)
        return 0;
    char dir[4096];
    if ((size_t)(slash - path) >= sizeof dir)
        return input_fail("%s: path too long", path);
    memcpy(dir, path, (size_t)(slash - path));
    dir[slash - path] = 0;
    return make_dirs(dir);
}

int write_output(const char *path, const void *data, size_t size)
{
    if (strcmp(path, "-") == 0) {
        if (fwrite(data, 1, size, stdout) != size || fflush(stdout) != 0)
            return input_fail("<stdout>: %s", strerror(errno));
        return EXIT_OK;
    }
    int rc = make_parent_dirs(path);
    if (rc)
        return rc;
    FILE *f = fopen(path, "wb");
    int status = EXIT_OK;
    if (!f || fwrite(data, 1, size, f) != size)
        status = EXIT_INPUT;
    if (f && fclose(f) != 0)
        status = EXIT_INPUT;
    if (status != EXIT_OK)
        input_fail("%s: %s", path, strerror(errno));
    return status;
}

/* ---- patterns ------------------------------------------------------------ */

s2_status load_pattern_file(s2_ctx *ctx, const opts *o, const char *path, s2_pattern_set **set)
{
    s2_pattern_load_options lo = {.allow_mask_dirs = o->num_mask_dirs ? o->mask_dirs : NULL};
    if (strcmp(path, "-") != 0)
        return s2_pattern_load_opts(ctx, path, &lo, set);
    if (o->stdin_text) /* read once already: compile reads it for every --arch */
        return s2_pattern_parse_opts(ctx, "<stdin>", o->stdin_text, o->stdin_len, &lo, set);
    /* from stdin: named "<stdin>" in messages, mask paths relative to the working directory */
    uint8_t *text = NULL;
    size_t len = 0;
    char why[4200];
    if (read_all(path, CLI_MAX_STDIN, &text, &len, why, sizeof why) != 0)
        return s2_fail(ctx, S2_ERR_IO, "%s", why);
    s2_status st = s2_pattern_parse_opts(ctx, "<stdin>", (const char *)text, len, &lo, set);
    free(text);
    return st;
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
            const char *names[MAX_NAMES];
            int count = s2_pattern_set_count(*set);
            for (int j = 0; j < count && j < MAX_NAMES; j++)
                names[j] = s2_pattern_set_get(*set, j)->name;
            char hint[160];
            return input_fail("%s: no pattern named '%s'%s", strcmp(o->pattern, "-") == 0 ? "<stdin>" : o->pattern,
                              o->names[i], did_you_mean(hint, sizeof hint, o->names[i], names,
                                                        (size_t)(count < MAX_NAMES ? count : MAX_NAMES)));
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
void print_kernel(FILE *f, const s2_manifest_kernel *k)
{
    const s2_kernel_spec *s = &k->spec;
    fprintf(f, "kernel %s: pattern %s, %s %s%s%s, head_dim %d, block_m %d, block_n %d, num_warps %d, num_stages %d, "
           "%d threads, %d bytes smem\n",
           k->name, k->pattern, s->kind == S2_KERNEL_FWD ? "fwd" : s->kind == S2_KERNEL_BWD ? "bwd" : s->kind == S2_KERNEL_DECODE ? "decode" : "?",
           s2_dtype_name(s->dtype), s->kv_dtype ? ", kv pages " : "", s->kv_dtype ? s2_dtype_name(s->kv_dtype) : "",
           s->head_dim,
           s->block_m, s->block_n, s->num_warps, s->num_stages, k->threads, k->smem_bytes);
    /* every kernel of the entry, as its manifest record says */
    for (int i = 0; i < k->num_fns; i++) {
        const s2_kernel_record *r = &k->fns[i];
        const s2_kspec *t = &r->spec;
        fprintf(f, "  %s: %s, abi %s, grid %s, %d threads, %d bytes smem", r->symbol, s2_role_name(r->role),
               s2_abi_get(r->abi)->name, s2_grid_name(r->grid), r->threads, r->smem_bytes);
        if (t->block_m != s->block_m || t->block_n != s->block_n || t->num_warps != s->num_warps ||
            t->num_stages != s->num_stages)
            fprintf(f, ", block_m %d, block_n %d, num_warps %d, num_stages %d", t->block_m, t->block_n, t->num_warps,
                   t->num_stages);
        if (t->kv_gather > 1)
            fprintf(f, ", %d gathered blocks", t->kv_gather);
        if (r->min_keys > 0)
            fprintf(f, ", launched from %d keys per query tile", r->min_keys);
        fprintf(f, "\n");
    }
}
