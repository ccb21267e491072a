/* Internal to the s2c command line: options, messages and the commands. */
#ifndef S2C_TOOLS_CLI_H
#define S2C_TOOLS_CLI_H

#include "s2c/common.h"
#include "s2c/manifest.h"
#include "s2c/pattern.h"
#include "util.h"

#include <stdint.h>
#include <stdio.h>

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };
/* parse_opts' answer when it printed the command's --help: the command exits 0 */
enum { EXIT_HELP = -1 };

/* The most bytes read from stdin ('-' as a pattern or cubin operand). */
#define CLI_MAX_STDIN ((size_t)64 << 20)

enum { MAX_NAMES = 256, MAX_MASK_DIRS = 16 };

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
    const char *kv_dtype;           /* --kv-dtype: decode's fp8 pages */
    const char *seq_len_text;       /* --seq-len as given (kv-memory takes a list) */
    const char *kind;
    int64_t seq_len, kv_len;
    int64_t page_size, prefill;
    int64_t block_m, block_n, head_dim, num_warps, num_stages, kv_gather;
    int64_t max_bytes;              /* --max-bytes: the layout text's size limit (0: the library's) */
    const char *options[8];         /* --option NAME=VALUE: a template's own choice, in order */
    int num_options;
    int verbose;
    const char *mask_dirs[MAX_MASK_DIRS + 1]; /* --allow-mask-path DIR, NULL-terminated */
    int num_mask_dirs;
    int quiet;                      /* --quiet: only the requested output and errors */
    int depfile;                    /* -MD (or -MF) */
    const char *depfile_path;       /* -MF FILE */
    const char *dep_target;         /* -MT NAME */
    const char *archs[8];           /* --arch, in order (compile takes several) */
    int num_archs;
    const char *stdin_text;         /* the pattern read from stdin once ('-'), or NULL */
    size_t stdin_len;
    const char *ranks_text, *sharding, *tflops_text, *link_text;   /* cp-plan's, as given */
} opts;

/* Option ids: a short option's own letter, else from 256. */
enum {
    O_OUTPUT = 'o', O_VERBOSE = 'v', O_HELP = 'h', O_QUIET = 'q',
    O_NAME = 256, O_ALLOW, O_FORMAT, O_ARCH, O_EMIT, O_BACKEND, O_KERNEL, O_DUMP, O_OVERRIDE, O_DTYPE,
    O_SEQ_LEN, O_KV_LEN, O_PAGE, O_PREFILL, O_KIND, O_BLOCK_M, O_BLOCK_N, O_HEAD_DIM, O_WARPS, O_STAGES,
    O_KV_GATHER, O_MAX_BYTES, O_OPTION, O_MD, O_MF, O_MT, O_RANKS, O_SHARDING, O_TFLOPS, O_LINK, O_KV_DTYPE,
};

/* One subcommand: its runner, the options it takes and its --help text. */
typedef struct cli_command {
    const char *name;
    int (*run)(s2_ctx *ctx, int argc, char **argv);
    const int *options;             /* option ids (cli.c), 0-terminated */
    const char *summary;            /* one line for `s2c --help` */
    const char *usage;              /* `s2c help NAME` */
} cli_command;

extern const cli_command cli_commands[];
const cli_command *cli_find_command(const char *name);


/* Diagnostics (cli_diag.c), one style as gcc's, on stderr: "s2c: error: MESSAGE",
 * and "FILE:LINE:COL: error: MESSAGE" where the library names a place. */
void cli_set_command(const char *name);  /* the command the usage note names (NULL: none) */
const char *cli_command_prefix(void);    /* that command's name, "" before one is known */
void diag(const char *severity, const char *fmt, ...) S2_PRINTF(2, 3); /* "s2c: SEVERITY: ..." */
/* "s2c: error: ..." and "s2c: note: try 's2c CMD --help'"; EXIT_USAGE */
int usage_error(const char *fmt, ...) S2_PRINTF(1, 2);
/* "s2c: error: ..."; EXIT_INPUT */
int input_fail(const char *fmt, ...) S2_PRINTF(1, 2);
/* The library's message in ctx; EXIT_INPUT */
int input_error(s2_ctx *ctx);
/* A library message as s2c prints it, into buf: "FILE:LINE:COL: SEVERITY: ..."
 * when it starts with a place, else "s2c: SEVERITY: ...". */
void diag_format(char *buf, size_t size, const char *severity, const char *msg);
/* "; did you mean 'NAME'?" for the name of names[0..n) closest to word, or "". */
const char *did_you_mean(char *buf, size_t size, const char *word, const char *const *names, size_t n);
int parse_int(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);
/* --dtype's value, one of the dtype table's CLI spellings of a dtype some
 * template builds: 0, or a usage error (printed). */
int parse_dtype(const char *text, s2_dtype *dt);
/* Parse argv[2..] of subcommand argv[1] with getopt_long and that command's
 * option table; positional arguments go to pos[] (up to max_pos).  0, a
 * usage error (EXIT_USAGE, printed) or EXIT_HELP (its usage printed). */
int parse_opts(int argc, char **argv, opts *o, const char **pos, int max_pos, int *npos);
int parse_one_file(int argc, char **argv, opts *o, const char *what);
/* Read a whole file, or stdin for "-", of at most max bytes (NUL-terminated). */
int read_input(const char *path, size_t max, uint8_t **data, size_t *size);
/* Write data to path, or to stdout for "-", creating path's directory first. */
int write_output(const char *path, const void *data, size_t size);
/* mkdir -p of path's parent directory; 0 or EXIT_INPUT (printed). */
int make_parent_dirs(const char *path);
int make_dirs(const char *dir);
/* s2_pattern_load with the options' --allow-mask-path directories. */
s2_status load_pattern_file(s2_ctx *ctx, const opts *o, const char *path, s2_pattern_set **set);
int load_patterns(s2_ctx *ctx, const opts *o, int max_all, s2_pattern_set **set, const s2_pattern **p, int *n);
void print_kernel(FILE *f, const s2_manifest_kernel *k);

/* JSON output (cli_json.c): strings escaped to valid UTF-8 JSON, numbers
 * finite (a NaN or infinity is written as null). */
void json_str(FILE *f, const char *s);
void json_num(FILE *f, double v);
void json_pattern(FILE *f, const s2_pattern *p);
void json_pattern_fields(FILE *f, const s2_pattern *p);

/* What one compile leaves for its depfile (compile_deps.c): its outputs and the files it read. */
typedef struct deps {
    bool wanted;              /* -MD: paths Make cannot read are refused as they come */
    char *targets[16];
    int num_targets;
    const char *pattern;      /* NULL for stdin */
    char *masks[64 * 8];      /* every mask file of the set, once each */
    int num_masks;
} deps;
int deps_add_target(deps *d, const char *path);
int deps_add_masks(deps *d, const s2_pattern_set *set);
/* The pattern file's and OUT's paths ("-": none), before anything is written; 0 or EXIT_INPUT */
int deps_check(const deps *d, const char *output);
/* "TARGETS: PATTERN MASKFILE...\n" into path (target: -MT's, verbatim, or NULL for d's) */
int deps_write(const deps *d, const char *target, const char *path);
void deps_free(deps *d);
/* OUT with its extension replaced by ".d" (malloc'd) */
char *deps_default_path(const char *out);

int cmd_check(s2_ctx *ctx, int argc, char **argv);
int cmd_layout(s2_ctx *ctx, int argc, char **argv);
int cmd_kv_memory(s2_ctx *ctx, int argc, char **argv);
int cmd_compile(s2_ctx *ctx, int argc, char **argv);
int cmd_info(s2_ctx *ctx, int argc, char **argv);
int cmd_cp_plan(s2_ctx *ctx, int argc, char **argv);
/* s2c --version [--verbose] (argv[1..]: those two options) */
int cmd_version(int argc, char **argv);

#endif
