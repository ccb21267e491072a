/* Internal to the s2c command line: options, messages and the commands. */
#ifndef S2C_TOOLS_CLI_H
#define S2C_TOOLS_CLI_H

#include "s2c/common.h"
#include "s2c/manifest.h"
#include "s2c/pattern.h"

#include <stdint.h>

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

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
} opts;


/* "s2c: MESSAGE" and a hint on stderr; EXIT_USAGE */
int usage_error(const char *fmt, const char *arg);
/* A library failure (pattern errors are already "file:line:col: msg"); EXIT_INPUT */
int input_error(s2_ctx *ctx);
int parse_int(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);
int parse_dtype(const char *text, s2_dtype *dt);
int parse_opts(int argc, char **argv, int first, opts *o, const char **pos, int max_pos, int *npos);
int parse_one_file(int argc, char **argv, opts *o, const char *cmd, const char *what);
/* s2_pattern_load with the options' --allow-mask-path directories. */
s2_status load_pattern_file(s2_ctx *ctx, const opts *o, const char *path, s2_pattern_set **set);
int load_patterns(s2_ctx *ctx, const opts *o, int max_all, s2_pattern_set **set, const s2_pattern **p, int *n);
void print_kernel(const s2_manifest_kernel *k);

int cmd_check(s2_ctx *ctx, int argc, char **argv);
int cmd_layout(s2_ctx *ctx, int argc, char **argv);
int cmd_kv_memory(s2_ctx *ctx, int argc, char **argv);
int cmd_compile(s2_ctx *ctx, int argc, char **argv);
int cmd_info(s2_ctx *ctx, int argc, char **argv);

#endif
