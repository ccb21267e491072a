/* s2c — the command-line driver.
 *
 *   s2c check PATTERN...
 *   s2c layout PATTERN --seq-len N [--kv-len N] [--name N] [--format mask|schedule|stats] ...
 *   s2c compile PATTERN --head-dim D --dtype bf16|fp16 --arch ARCH [--emit cubin|c|ptx|ll] -o OUT ...
 *   s2c info CUBIN
 *   s2c kv-memory PATTERN --seq-len N[,N...] [--page-size N] [--prefill N] [--head-dim D] [--dtype bf16|fp16]
 *
 * Exit status: 0 success, 1 bad input (pattern, spec, toolchain, file), 2 usage.
 */
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
    "  compile PATTERN --head-dim D --dtype bf16|fp16 --arch sm_80|sm_90|sm_90a -o OUT\n"
    "                              forward attention kernels, one per pattern, in one module\n"
    "      --name NAME             a pattern to compile (repeatable; default: every pattern of the file)\n"
    "      --emit cubin|c|ptx|ll   what to write (default: cubin); c writes DIR/NAME.h and DIR/NAME.c,\n"
    "                              NAME = OUT's file name without extension as a C identifier\n"
    "      --block-m N --block-n N --num-warps N --num-stages N\n"
    "      --kv-gather N           key blocks gathered into one key tile (1..4, filling block_n)\n"
    "      --kind fwd|bwd|decode     what to generate (default fwd; decode: paged decode + combine)\n"
    "                              tunables (default: the per-arch heuristic; all recorded in the manifest)\n"
    "      --backend auto|ptxas|nvjitlink   PTX -> cubin (default: auto = ptxas, else nvJitLink)\n"
    "      --dump-dir DIR          write every stage (NAME.pre.ll, NAME.ll, NAME.ptx, NAME.cubin) to DIR\n"
    "      --override-dir DIR      use DIR/NAME.{ll,ptx,cubin} instead of a stage's own output\n"
    "      --kernel softmax        instead: the block-sparse row softmax of one pattern (toolchain\n"
    "                              debugging; no --head-dim/--dtype/tunables, no --emit c)\n"
    "      -v, --verbose           print the toolchain log and registers/spills per kernel\n"
    "  info CUBIN                  print the manifest of a generated cubin (no GPU needed)\n"
    "  kv-memory PATTERN --seq-len N[,N...]\n"
    "                              KV-cache pages held with eviction (pages nothing reads again are\n"
    "                              freed) against a dense cache, at the end of prefill + decode\n"
    "      --page-size N           tokens per page, a multiple of 16 (default 64)\n"
    "      --prefill N             prompt tokens prefilled at once, all held (default 0: decode from the start)\n"
    "      --head-dim D --dtype bf16|fp16   for bytes (default 128, bf16); --name NAME as for layout\n"
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

enum { MAX_NAMES = 256 };

typedef struct opts {
    const char *pattern;
    const char *names[MAX_NAMES];   /* --name, in order */
    int num_names;
    const char *format;
    const char *arch;
    const char *emit;
    const char *backend;
    const char *kernel;
    const char *output;
    const char *dump_dir;
    const char *override_dir;
    const char *dtype;
    const char *seq_len_text;       /* --seq-len as given (kv-memory takes a list) */
    const char *kind;
    int64_t seq_len, kv_len;
    int64_t page_size, prefill;
    int64_t block_m, block_n, head_dim, num_warps, num_stages, kv_gather;
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

static int parse_dtype(const char *text, s2_dtype *dt)
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
        if (strcmp(key, "--name") == 0) {
            if (o->num_names >= MAX_NAMES)
                return usage_error("%s", "too many --name options");
            o->names[o->num_names++] = val;
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
        else return usage_error("unknown option '%s'", key);
        if (rc)
            return EXIT_USAGE;
    }
    return 0;
}

/* Parse a command taking exactly one FILE operand into o->pattern. */
static int parse_one_file(int argc, char **argv, opts *o, const char *cmd, const char *what)
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

/* Load PATTERN and pick the named patterns (none named: max_all of the
 * file's patterns, all when max_all < 0).  *n receives the count. */
static int load_patterns(s2_ctx *ctx, const opts *o, int max_all, s2_pattern_set **set, const s2_pattern **p,
                         int *n)
{
    *n = 0;
    if (s2_pattern_load(ctx, o->pattern, set) != S2_OK)
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
    int rc = parse_one_file(argc, argv, &o, "layout", "PATTERN");
    if (rc)
        return rc;
    if (!o.seq_len)
        return usage_error("%s", "layout: --seq-len (one length) is required");
    int fmt = strcmp(o.format, "mask") == 0 ? 0 : strcmp(o.format, "schedule") == 0 ? 1
            : strcmp(o.format, "stats") == 0 ? 2 : -1;
    if (fmt < 0)
        return usage_error("layout: --format must be mask, schedule or stats, got '%s'", o.format);
    s2_dtype dt;
    if (parse_dtype(o.dtype, &dt) != 0)
        return usage_error("layout: --dtype must be bf16 or fp16, got '%s'", o.dtype);
    if ((o.block_m & (o.block_m - 1)) || (o.block_n & (o.block_n - 1)))
        return usage_error("%s", "layout: --block-m and --block-n must be powers of two");
    if (o.num_names > 1)
        return usage_error("%s", "layout: --name may be given once");

    s2_pattern_set *set = NULL;
    const s2_pattern *p = NULL;
    int np = 0;
    rc = load_patterns(ctx, &o, 1, &set, &p, &np);
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

typedef enum { EMIT_CUBIN, EMIT_C, EMIT_PTX, EMIT_LL } emit_kind;

static int parse_emit(const char *text, emit_kind *e)
{
    static const char *const names[] = {"cubin", "c", "ptx", "ll"};
    for (int i = 0; i < 4; i++)
        if (strcmp(text, names[i]) == 0) {
            *e = (emit_kind)i;
            return 0;
        }
    return -1;
}

static int parse_backend(const char *text, s2_cubin_backend *b)
{
    if (strcmp(text, "auto") == 0)
        *b = S2_CUBIN_AUTO;
    else if (strcmp(text, "ptxas") == 0)
        *b = S2_CUBIN_PTXAS;
    else if (strcmp(text, "nvjitlink") == 0)
        *b = S2_CUBIN_NVJITLINK;
    else
        return -1;
    return 0;
}

/* OUT's file name without its extension as a C identifier (other characters
 * become '_', a leading digit gets a '_' in front): the module name of the
 * AOT files, dumps and overrides. */
static char *module_ident(const char *out)
{
    const char *base = strrchr(out, '/');
    base = base ? base + 1 : out;
    const char *dot = strrchr(base, '.');
    size_t n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    char *id = malloc(n + 2);
    if (!id)
        return NULL;
    size_t j = 0;
    if (n == 0 || isdigit((unsigned char)base[0]))
        id[j++] = '_';
    for (size_t i = 0; i < n; i++)
        id[j++] = isalnum((unsigned char)base[i]) ? base[i] : '_';
    id[j] = '\0';
    return id;
}

/* OUT's directory: "." when it names none. */
static char *out_dir(const char *out)
{
    const char *slash = strrchr(out, '/');
    if (!slash)
        return strdup(".");
    if (slash == out)
        return strdup("/");
    char *d = malloc((size_t)(slash - out) + 1);
    if (d) {
        memcpy(d, out, (size_t)(slash - out));
        d[slash - out] = '\0';
    }
    return d;
}

static int write_output(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    int status = EXIT_OK;
    if (!f || fwrite(data, 1, size, f) != size)
        status = EXIT_INPUT;
    if (f && fclose(f) != 0)
        status = EXIT_INPUT;
    if (status != EXIT_OK)
        fprintf(stderr, "s2c: %s: %s\n", path, strerror(errno));
    return status;
}

static void print_kernel(const s2_manifest_kernel *k)
{
    const s2_kernel_spec *s = &k->spec;
    printf("kernel %s: pattern %s, %s %s, head_dim %d, block_m %d, block_n %d, num_warps %d, num_stages %d, "
           "%d threads, %d bytes smem\n",
           k->name, k->pattern, s->kind == S2_KERNEL_FWD ? "fwd" : s->kind == S2_KERNEL_BWD ? "bwd" : s->kind == S2_KERNEL_DECODE ? "decode" : "?",
           s2_dtype_name(s->dtype), s->head_dim,
           s->block_m, s->block_n, s->num_warps, s->num_stages, k->threads, k->smem_bytes);
    if (k->has_wide) {
        const s2_kernel_spec *w = &k->wide_spec;
        printf("kernel %s%s: wide variant (long lists)%s, block_m %d, block_n %d (%d gathered blocks), num_warps %d, "
               "num_stages %d, %d threads, %d bytes smem\n", k->name, S2_WIDE_SUFFIX,
               w->persistent > 0 ? " on the persistent grid" : "", w->block_m, w->block_n,
               w->kv_gather > 1 ? w->kv_gather : 1, w->num_warps, w->num_stages, k->wide_threads, k->wide_smem_bytes);
    }
}

/* Registers and spills as the assembler reported them, one line per kernel. */
static void print_resources(const s2_artifact *art)
{
    if (art->log && art->log[0])
        fputs(art->log, stderr);
    for (int k = 0; k < art->num_kernels; k++) {
        const s2_kernel_info *ki = &art->kernels[k];
        fprintf(stderr, "%s: %d registers, %d bytes spill stores, %d bytes spill loads, %d bytes stack, "
                "%d bytes static smem, via %s\n", ki->name, ki->registers, ki->spill_stores, ki->spill_loads,
                ki->stack_frame, ki->shared_static, s2_cubin_backend_name(art->backend_used));
    }
}

/* Launcher and symbol names of one AOT kernel (backward parts have suffixes). */
typedef struct aot_names {
    char name[256], symbol[256];
} aot_names;

/* The AOT kernels of one manifest kernel: one for a forward, three for a
 * backward module (NAME_pre, NAME_dkdv, NAME_dq, in launch order), one for
 * a decode module (NAME; NAME_combine has none). */
static int aot_kernels_of(const s2_manifest_kernel *mk, const s2_pattern *p, s2_aot_kernel *ks, aot_names *nm)
{
    const char *base = strncmp(mk->name, "s2_", 3) == 0 ? mk->name + 3 : mk->name;
    if (mk->spec.kind == S2_KERNEL_FWD) {
        const s2_aot_abi *abi = mk->abi == S2_FWD_ABI_TMA_PERSISTENT ? s2_aot_abi_attn_fwd_tma_persistent()
                                : mk->abi == S2_FWD_ABI_TMA            ? s2_aot_abi_attn_fwd_tma()
                                                                       : s2_aot_abi_attn_fwd();
        int gather = mk->spec.kv_gather > 1 ? mk->spec.kv_gather : 1;
        snprintf(nm->name, sizeof nm->name, "%s", base);
        snprintf(nm->symbol, sizeof nm->symbol, "%s", mk->name);
        ks[0] = (s2_aot_kernel){.name = nm->name, .symbol = nm->symbol, .abi = abi, .threads = mk->threads,
                                .smem_bytes = mk->smem_bytes, .dtype = mk->spec.dtype,
                                .head_dim = mk->spec.head_dim, .kv_box_rows = mk->spec.block_n / gather};
        if (!mk->has_wide)
            return 1;
        /* the wide variant NAME_w: the tensor-map ABI on its own tile shape,
         * on the persistent grid under kernel.wide_persistent */
        const s2_kernel_spec *w = &mk->wide_spec;
        int wg = w->kv_gather > 1 ? w->kv_gather : 1;
        snprintf(nm[1].name, sizeof nm[1].name, "%s%s", base, S2_WIDE_SUFFIX);
        snprintf(nm[1].symbol, sizeof nm[1].symbol, "%s%s", mk->name, S2_WIDE_SUFFIX);
        ks[1] = (s2_aot_kernel){.name = nm[1].name, .symbol = nm[1].symbol,
                                .abi = w->persistent > 0 ? s2_aot_abi_attn_fwd_tma_persistent()
                                                         : s2_aot_abi_attn_fwd_tma(),
                                .threads = mk->wide_threads, .smem_bytes = mk->wide_smem_bytes,
                                .dtype = w->dtype, .head_dim = w->head_dim, .kv_box_rows = w->block_n / wg};
        return 2;
    }
    if (mk->spec.kind == S2_KERNEL_DECODE) {
        snprintf(nm->name, sizeof nm->name, "%s", base);
        snprintf(nm->symbol, sizeof nm->symbol, "%s", mk->name);
        ks[0] = (s2_aot_kernel){.name = nm->name, .symbol = nm->symbol, .abi = s2_aot_abi_attn_decode(),
                                .threads = mk->threads, .smem_bytes = mk->smem_bytes};
        return 1;
    }
    static const char *const part[4] = {"_pre", "_dkdv", "_dq", "_dqds"};
    bool tma = mk->spec.bwd_tma > 0;   /* every kernel of the module takes q_map, do_map */
    const s2_aot_abi *abi[4] = {tma ? s2_aot_abi_attn_bwd_pre_tma() : s2_aot_abi_attn_bwd_pre(),
                                tma ? s2_aot_abi_attn_bwd_dkdv_tma() : s2_aot_abi_attn_bwd_dkdv(),
                                tma ? s2_aot_abi_attn_bwd_dq_tma() : s2_aot_abi_attn_bwd_dq(),
                                tma ? s2_aot_abi_attn_bwd_dqds_tma() : s2_aot_abi_attn_bwd_dqds()};
    /* NAME_pre: threads / (D / 8) query rows per CTA, no shared memory (attention.h) */
    int rows = mk->spec.head_dim >= 8 ? mk->threads / (mk->spec.head_dim / 8) : 0;
    int n = p && s2_bwd_ds_capable(p, &mk->spec) ? 4 : 3;
    for (int j = 0; j < n; j++) {
        snprintf(nm[j].name, sizeof nm[j].name, "%s%s", base, part[j]);
        snprintf(nm[j].symbol, sizeof nm[j].symbol, "%s%s", mk->name, part[j]);
        int smem = j == 0 ? 0 : j == 3 ? s2_bwd_dqds_smem_bytes(&mk->spec) : mk->smem_bytes;
        ks[j] = (s2_aot_kernel){.name = nm[j].name, .symbol = nm[j].symbol, .abi = abi[j], .threads = mk->threads,
                                .smem_bytes = smem, .grid_div = {j == 0 ? rows : 0}, .dtype = mk->spec.dtype,
                                .head_dim = mk->spec.head_dim, .kv_box_rows = tma ? mk->spec.block_m : 0};
    }
    return n;
}

/* DIR/IDENT.h and DIR/IDENT.c: one launcher IDENT_<symbol without "s2_">
 * per kernel of the manifest (three for a backward module, four with NAME_dqds,
 * two for a forward with a wide variant NAME_w). */
static int write_aot(s2_ctx *ctx, const s2_artifact *art, const s2_manifest *m, const char *ident, const char *dir)
{
    int n = s2_manifest_num_kernels(m);
    /* the emitter knows the forward's pointer, tensor-map and persistent ABIs, the backward's and decode's
     * (attention.h, aot.h) */
    for (int i = 0; i < n; i++) {
        const s2_manifest_kernel *mk = s2_manifest_kernel_at(m, i);
        const char *why = mk->spec.kind != S2_KERNEL_FWD && mk->spec.kind != S2_KERNEL_BWD &&
                                  mk->spec.kind != S2_KERNEL_DECODE
                              ? "of an unknown kind"
                              : NULL;
        if (why) {
            fprintf(stderr, "s2c: --emit c: kernel %s is %s, which has no C launcher yet; C launchers exist for the "
                    "forward (sm_80/sm_90 pointer ABI, sm_90a tensor-map and persistent ABIs), the backward module "
                    "and decode\n",
                    mk->name, why);
            return EXIT_INPUT;
        }
    }
    s2_aot_kernel *ks = calloc((size_t)n * 4, sizeof *ks);
    aot_names *names = calloc((size_t)n * 4, sizeof *names);
    if (!ks || !names) {
        free(ks);
        free(names);
        fprintf(stderr, "s2c: out of memory\n");
        return EXIT_INPUT;
    }
    int nk = 0;
    for (int i = 0; i < n; i++)
        nk += aot_kernels_of(s2_manifest_kernel_at(m, i),
                             s2_manifest_find_pattern(m, s2_manifest_kernel_at(m, i)->pattern), ks + nk, names + nk);
    s2_aot_module mod = {.name = ident, .cubin = art->cubin, .cubin_size = art->cubin_size,
                         .manifest = art->manifest, .kernels = ks, .num_kernels = nk};
    s2_status st = s2_aot_write(ctx, &mod, dir);
    if (st == S2_OK) {
        printf("%s/%s.h, %s/%s.c: load_%s(), unload_%s()\n", dir, ident, dir, ident, ident, ident);
        for (int i = 0; i < nk; i++)
            printf("launcher %s_%s\n", ident, ks[i].name);
    }
    free(ks);
    free(names);
    return st == S2_OK ? EXIT_OK : input_error(ctx);
}

static int compile_softmax(s2_ctx *ctx, const opts *o, s2_arch arch, emit_kind emit, s2_cubin_backend backend)
{
    if (o->head_dim || o->dtype || o->block_m || o->block_n || o->num_warps || o->num_stages || o->kv_gather)
        return usage_error("%s", "compile: --kernel softmax takes no --head-dim, --dtype or tunables");
    if (emit == EMIT_C)
        return usage_error("%s", "compile: --kernel softmax has no --emit c");
    if (o->num_names > 1)
        return usage_error("%s", "compile: --kernel softmax compiles one pattern (one --name)");
    s2_pattern_set *set = NULL;
    const s2_pattern *p = NULL;
    int np = 0;
    int rc = load_patterns(ctx, o, 1, &set, &p, &np);
    s2_artifact *art = NULL;
    s2_target target;
    s2_target_default(&target, arch);
    if (rc == 0 && s2_compile_row_softmax(ctx, p, &target, backend, &art) != S2_OK)
        rc = input_error(ctx);
    if (rc == 0) {
        const void *data = emit == EMIT_CUBIN ? (const void *)art->cubin
                         : emit == EMIT_PTX ? (const void *)art->ptx : (const void *)art->ir;
        size_t size = emit == EMIT_CUBIN ? art->cubin_size : emit == EMIT_PTX ? art->ptx_len : strlen(art->ir);
        rc = write_output(o->output, data, size);
        if (rc == 0 && o->verbose)
            print_resources(art);
        if (rc == 0)
            printf("%s: wrote %zu bytes (row softmax, %s, %s, pattern %s)\n", o->output, size, o->emit, o->arch,
                   p->name);
    }
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    return rc;
}

static int compile_attention(s2_ctx *ctx, const opts *o, s2_arch arch, emit_kind emit, s2_cubin_backend backend)
{
    if (!o->head_dim || !o->dtype)
        return usage_error("%s", "compile: --head-dim and --dtype are required");
    s2_kernel_kind kind = S2_KERNEL_FWD;
    if (o->kind && strcmp(o->kind, "fwd") != 0) {
        if (strcmp(o->kind, "bwd") == 0)
            kind = S2_KERNEL_BWD;
        else if (strcmp(o->kind, "decode") == 0)
            kind = S2_KERNEL_DECODE;
        else
            return usage_error("compile: --kind must be fwd, bwd or decode, got '%s'", o->kind);
    }
    s2_kernel_spec spec = {.kind = kind, .head_dim = (int)o->head_dim, .arch = (int)arch,
                           .block_m = (int)o->block_m, .block_n = (int)o->block_n,
                           .num_warps = (int)o->num_warps, .num_stages = (int)o->num_stages,
                           .kv_gather = (int)o->kv_gather};
    if (parse_dtype(o->dtype, &spec.dtype) != 0)
        return usage_error("compile: --dtype must be bf16 or fp16, got '%s'", o->dtype);
    for (int i = 0; i < o->num_names; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(o->names[i], o->names[j]) == 0)
                return usage_error("compile: --name %s is given twice", o->names[i]);

    char *ident = module_ident(o->output), *dir = out_dir(o->output);
    s2_pattern_set *set = NULL;
    const s2_pattern *pats[MAX_NAMES];
    int np = 0;
    s2_artifact *art = NULL;
    s2_manifest *m = NULL;
    int rc = ident && dir ? 0 : EXIT_INPUT;
    if (rc)
        fprintf(stderr, "s2c: out of memory\n");
    if (rc == 0)
        rc = load_patterns(ctx, o, MAX_NAMES, &set, pats, &np);
    if (rc == 0 && s2_pattern_set_count(set) > MAX_NAMES && o->num_names == 0) {
        fprintf(stderr, "%s: more than %d patterns; pick some with --name\n", o->pattern, MAX_NAMES);
        rc = EXIT_INPUT;
    }
    /* every stage runs whatever is emitted, so that --emit ptx or ll still
     * reports assembler errors */
    if (rc == 0 && (s2_compile_attention_set(ctx, ident, pats, np, &spec, backend, &art) != S2_OK ||
                    s2_manifest_parse(ctx, art->manifest, strlen(art->manifest), &m) != S2_OK))
        rc = input_error(ctx);
    if (rc == 0 && emit == EMIT_C) {
        rc = write_aot(ctx, art, m, ident, dir);
    } else if (rc == 0) {
        const void *data = emit == EMIT_CUBIN ? (const void *)art->cubin
                         : emit == EMIT_PTX ? (const void *)art->ptx : (const void *)art->ir;
        size_t size = emit == EMIT_CUBIN ? art->cubin_size : emit == EMIT_PTX ? art->ptx_len : strlen(art->ir);
        rc = write_output(o->output, data, size);
        if (rc == 0)
            printf("%s: wrote %zu bytes (%s, %s, %d kernel%s)\n", o->output, size, o->emit, o->arch, np,
                   np == 1 ? "" : "s");
    }
    if (rc == 0) {
        for (int i = 0; i < s2_manifest_num_kernels(m); i++)
            print_kernel(s2_manifest_kernel_at(m, i));
        if (o->verbose)
            print_resources(art);
    }
    s2_manifest_free(m);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    free(ident);
    free(dir);
    return rc;
}

static int cmd_compile(s2_ctx *ctx, int argc, char **argv)
{
    opts o = {.emit = "cubin", .backend = "auto", .kernel = "attention"};
    int rc = parse_one_file(argc, argv, &o, "compile", "PATTERN");
    if (rc)
        return rc;
    if (!o.arch)
        return usage_error("%s", "compile: --arch is required (sm_80, sm_90 or sm_90a)");
    if (!o.output)
        return usage_error("%s", "compile: -o OUT is required");
    s2_arch arch;
    if (s2_arch_parse(o.arch, &arch) != S2_OK)
        return usage_error("compile: --arch must be sm_80, sm_90 or sm_90a, got '%s'", o.arch);
    emit_kind emit;
    if (parse_emit(o.emit, &emit) != 0)
        return usage_error("compile: --emit must be cubin, c, ptx or ll, got '%s'", o.emit);
    s2_cubin_backend backend;
    if (parse_backend(o.backend, &backend) != 0)
        return usage_error("compile: --backend must be auto, ptxas or nvjitlink, got '%s'", o.backend);
    bool softmax = strcmp(o.kernel, "softmax") == 0;
    if (!softmax && strcmp(o.kernel, "attention") != 0)
        return usage_error("compile: --kernel must be attention or softmax, got '%s'", o.kernel);
    if ((o.dump_dir && s2_ctx_set_dump_dir(ctx, o.dump_dir) != S2_OK) ||
        (o.override_dir && s2_ctx_set_override_dir(ctx, o.override_dir) != S2_OK))
        return input_error(ctx);
    return softmax ? compile_softmax(ctx, &o, arch, emit, backend) : compile_attention(ctx, &o, arch, emit, backend);
}

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

static int cmd_info(s2_ctx *ctx, int argc, char **argv)
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
            int regs = s2_cubin_regcount(image, size, k->name);
            if (regs >= 0)
                printf("  registers %d (EIATTR_REGCOUNT)\n", regs);
            else
                printf("  registers unknown (no EIATTR_REGCOUNT for this kernel)\n");
        }
        for (int i = 0; i < npat; i++)
            print_pattern(s2_manifest_pattern_at(m, i));
    }
    s2_manifest_free(m);
    free(image);
    return rc;
}

/* ---- kv-memory ------------------------------------------------------------- */

enum { MAX_LENS = 64 };

static int parse_len_list(const char *text, int64_t *lens, int *n)
{
    char buf[1024];
    if (!text || strlen(text) >= sizeof buf)
        return usage_error("%s", "kv-memory: --seq-len N[,N...] is required");
    strcpy(buf, text);
    *n = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_LENS)
            return usage_error("%s", "kv-memory: too many --seq-len values");
        if (parse_int("--seq-len", t, 1, S2_MAX_SEQ_LEN, &lens[*n]))
            return EXIT_USAGE;
        (*n)++;
    }
    return *n ? 0 : usage_error("%s", "kv-memory: --seq-len N[,N...] is required");
}

static double mib(int64_t pages, int64_t page_bytes) { return (double)pages * (double)page_bytes / 1048576.0; }

static int cmd_kv_memory(s2_ctx *ctx, int argc, char **argv)
{
    opts o = {.page_size = 64, .head_dim = 128, .dtype = "bf16"};
    int rc = parse_one_file(argc, argv, &o, "kv-memory", "PATTERN");
    if (rc)
        return rc;
    int64_t lens[MAX_LENS];
    int nlens = 0;
    if ((rc = parse_len_list(o.seq_len_text, lens, &nlens)) != 0)
        return rc;
    s2_dtype dt;
    if (parse_dtype(o.dtype, &dt) != 0)
        return usage_error("kv-memory: --dtype must be bf16 or fp16, got '%s'", o.dtype);
    if (o.page_size % 16 != 0)
        return usage_error("%s", "kv-memory: --page-size must be a multiple of 16");
    if (o.num_names > 1)
        return usage_error("%s", "kv-memory: --name may be given once");
    s2_pattern_set *set = NULL;
    const s2_pattern *p = NULL;
    int np = 0;
    if ((rc = load_patterns(ctx, &o, 1, &set, &p, &np)) != 0) {
        s2_pattern_set_free(set);
        return rc;
    }
    /* K and V of one kv head: page_size rows of head_dim 2-byte elements each. */
    int64_t page_bytes = 2 * o.page_size * o.head_dim * 2;
    printf("%s: %d heads, %d kv heads, block %d; page %lld tokens, head_dim %lld, %s: %lld bytes of K+V per page\n",
           p->name, p->heads, p->kv_heads, p->block_size, (long long)o.page_size, (long long)o.head_dim, o.dtype,
           (long long)page_bytes);
    printf("prefill %lld tokens (all held), then decode token by token; batch 1, pages summed over kv heads\n",
           (long long)o.prefill);
    printf("%9s %11s %11s %7s %11s %7s %10s %10s %10s %14s\n", "seq_len", "dense_pg", "held_pg", "held%", "peak_pg",
           "peak%", "dense_MiB", "held_MiB", "peak_MiB", "head_min..max");
    int status = EXIT_OK;
    const char *note = NULL;
    bool efficient = true;
    for (int i = 0; i < nlens && status == EXIT_OK; i++) {
        s2_kv_evictor *ev = NULL;
        s2_kv_memory m;
        if (o.prefill > lens[i]) {
            fprintf(stderr, "s2c: kv-memory: --prefill %lld exceeds seq-len %lld\n", (long long)o.prefill,
                    (long long)lens[i]);
            status = EXIT_USAGE;
        } else if (s2_kv_evictor_new(ctx, p, (int)o.page_size, lens[i], &ev) != S2_OK ||
                   s2_kv_evictor_memory(ctx, ev, o.prefill, lens[i], &m) != S2_OK) {
            status = input_error(ctx);
        } else {
            printf("%9lld %11lld %11lld %6.2f%% %11lld %6.2f%% %10.1f %10.1f %10.1f %6lld..%-6lld\n",
                   (long long)lens[i], (long long)m.dense_pages, (long long)m.held_pages, 100.0 * m.held_fraction,
                   (long long)m.peak_pages, 100.0 * m.peak_fraction, mib(m.dense_pages, page_bytes),
                   mib(m.held_pages, page_bytes), mib(m.peak_pages, page_bytes), (long long)m.held_min_head,
                   (long long)m.held_max_head);
            if (!s2_kv_evictor_efficient(ev)) {
                efficient = false;
                if (!note) {
                    static char buf[512];
                    snprintf(buf, sizeof buf, "%s", s2_kv_evictor_note(ev));
                    note = buf;
                }
            }
        }
        s2_kv_evictor_free(ev);
    }
    if (status == EXIT_OK)
        printf("kv-cache efficient: %s%s\n", efficient ? "yes" : "no (only pages after their last read are freed): ",
               note && !efficient ? note : "");
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
    else if (strcmp(cmd, "info") == 0)
        rc = cmd_info(ctx, argc, argv);
    else if (strcmp(cmd, "kv-memory") == 0)
        rc = cmd_kv_memory(ctx, argc, argv);
    else
        rc = usage_error("unknown command '%s'", cmd);
    s2_ctx_free(ctx);
    return rc;
}
