/* Internal to the s2c command line: options, messages and the commands. */
#ifndef S2C_TOOLS_CLI_H
#define S2C_TOOLS_CLI_H

#include "s2c/common.h"
#include "s2c/manifest.h"
#include "s2c/pattern.h"

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
} opts;

/* Option ids: a short option's own letter, else from 256. */
enum {
    O_OUTPUT = 'o', O_VERBOSE = 'v', O_HELP = 'h', O_QUIET = 'q',
    O_NAME = 256, O_ALLOW, O_FORMAT, O_ARCH, O_EMIT, O_BACKEND, O_KERNEL, O_DUMP, O_OVERRIDE, O_DTYPE,
    O_SEQ_LEN, O_KV_LEN, O_PAGE, O_PREFILL, O_KIND, O_BLOCK_M, O_BLOCK_N, O_HEAD_DIM, O_WARPS, O_STAGES,
    O_KV_GATHER, O_MAX_BYTES, O_OPTION, O_MD, O_MF, O_MT,
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


/* "s2c: MESSAGE" and a hint on stderr; EXIT_USAGE */
int usage_error(const char *fmt, const char *arg);
/* A library failure (pattern errors are already "file:line:col: msg"); EXIT_INPUT */
int input_error(s2_ctx *ctx);
int parse_int(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);
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

int cmd_check(s2_ctx *ctx, int argc, char **argv);
int cmd_layout(s2_ctx *ctx, int argc, char **argv);
int cmd_kv_memory(s2_ctx *ctx, int argc, char **argv);
int cmd_compile(s2_ctx *ctx, int argc, char **argv);
int cmd_info(s2_ctx *ctx, int argc, char **argv);

#endif
