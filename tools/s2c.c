/* s2c — the command-line driver: one subcommand per job, each with its own
 * options (getopt_long; an option of another command is a usage error).
 *
 *   s2c check PATTERN...
 *   s2c layout PATTERN --seq-len N [--kv-len N] [--name N] [--format mask|schedule|stats|json] ...
 *   s2c compile PATTERN --head-dim D --dtype bf16|fp16|fp32 --arch ARCH [--emit cubin|c|ptx|ll] -o OUT ...
 *   s2c info CUBIN
 *   s2c kv-memory PATTERN --seq-len N[,N...] [--page-size N] [--prefill N] [--head-dim D] [--dtype bf16|fp16]
 *   s2c cp-plan [PATTERN] [--ranks N,...] [--seq-len N,...] [--sharding S] [--tflops T] [--link-gbps B] ...
 *   s2c help [COMMAND], s2c COMMAND --help, s2c --help, s2c --version [--verbose]
 *
 * Exit status: 0 success, 1 bad input (pattern, spec, toolchain, file), 2 usage.
 * Diagnostics as gcc's: "s2c: error: ...", "FILE:LINE:COL: error: ..." (cli_diag.c).
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const int check_options[] = {O_ALLOW, O_FORMAT, O_QUIET, O_HELP, 0};
static const int layout_options[] = {O_SEQ_LEN, O_KV_LEN, O_NAME, O_FORMAT, O_BLOCK_M, O_BLOCK_N, O_HEAD_DIM,
                                     O_DTYPE, O_MAX_BYTES, O_ALLOW, O_QUIET, O_HELP, 0};
static const int compile_options[] = {O_HEAD_DIM, O_DTYPE, O_ARCH, O_OUTPUT, O_EMIT, O_NAME, O_BLOCK_M, O_BLOCK_N,
                                      O_WARPS, O_STAGES, O_KV_GATHER, O_OPTION, O_KIND, O_BACKEND, O_DUMP,
                                      O_OVERRIDE, O_KERNEL, O_VERBOSE, O_ALLOW, O_MD, O_MF, O_MT, O_QUIET,
                                      O_KV_DTYPE, O_HELP, 0};
static const int info_options[] = {O_FORMAT, O_QUIET, O_HELP, 0};
static const int cp_plan_options[] = {O_RANKS, O_SEQ_LEN, O_SHARDING, O_TFLOPS, O_LINK, O_HEAD_DIM, O_DTYPE,
                                      O_BLOCK_M, O_BLOCK_N, O_NAME, O_ALLOW, O_QUIET, O_HELP, 0};
static const int kv_memory_options[] = {O_SEQ_LEN, O_PAGE, O_PREFILL, O_HEAD_DIM, O_DTYPE, O_NAME, O_FORMAT,
                                        O_ALLOW, O_QUIET, O_HELP, 0};

#define COMMON_HELP                                                                                            \
    "  -q, --quiet                 print nothing but the requested output and errors\n"                    \
    "  -h, --help                  this text\n"
#define MASK_HELP                                                                                              \
    "  --allow-mask-path DIR       (repeatable) the pattern's mask files may also lie in DIR\n"              \
    "                              (default: only in the pattern file's directory)\n"
#define STDIN_HELP "PATTERN '-' reads the pattern from stdin (mask paths relative to the working directory).\n"

const cli_command cli_commands[] = {
    {"check", cmd_check, check_options, "validate pattern files and summarise each pattern",
     "usage: s2c check PATTERN... [options]\n"
     "Validate pattern files and print a summary of each pattern.\n"
     "\n"
     "  --format text|json          json: one document (schema_version 1, README 'Command line')\n"
     MASK_HELP COMMON_HELP
     "  --quiet prints nothing on success.\n" STDIN_HELP},
    {"layout", cmd_layout, layout_options, "expand a pattern for a query length (mask, schedule, stats)",
     "usage: s2c layout PATTERN --seq-len N [options]\n"
     "Expand a pattern for a query length (and key length).\n"
     "\n"
     "  --seq-len N                 queries (required): the last N positions of the keys\n"
     "  --kv-len N                  keys (default: seq-len)\n"
     "  --name NAME                 which pattern of a multi-pattern file (default: the first)\n"
     "  --format mask|schedule|stats|json   (default: stats; json: the stats as JSON)\n"
     "  --block-m N --block-n N     kernel tile for schedules and stats (default 128 x 64)\n"
     "  --head-dim D                for FLOP and byte counts (default 128)\n"
     "  --dtype bf16|fp16           for byte counts (default bf16)\n"
     "  --max-bytes N               refuse a mask or schedule text over N bytes (default 1 GiB)\n"
     MASK_HELP COMMON_HELP STDIN_HELP},
    {"compile", cmd_compile, compile_options, "generate attention kernels into one module (cubin, PTX, IR, C)",
     "usage: s2c compile PATTERN --head-dim D --dtype bf16|fp16|fp32 --arch sm_80|sm_90|sm_90a -o OUT [options]\n"
     "Generate the attention kernels of a pattern file, one per pattern, into one module.\n"
     "\n"
     "  --arch ARCH                 sm_80, sm_90 or sm_90a; repeatable: one module per arch, OUT.ARCH.EXT\n"
     "  -o, --output OUT            where to write ('-': stdout, not with --emit c); its directory is created\n"
     "  --name NAME                 a pattern to compile (repeatable; default: every pattern of the file)\n"
     "  --emit cubin|c|ptx|ll       what to write (default: cubin); c writes DIR/NAME.h and DIR/NAME.c,\n"
     "                              NAME = OUT's file name without extension as a C identifier\n"
     "  --kind fwd|bwd|decode       what to generate (default fwd; decode: paged decode + combine)\n"
     "  --block-m N --block-n N --num-warps N --num-stages N\n"
     "                              tunables (default: the per-arch heuristic; all recorded in the manifest)\n"
     "  --kv-gather N               key blocks gathered into one key tile (1..4, filling block_n)\n"
     "  --kv-dtype e4m3             decode: fp8 K/V pages with per-kv-head scales (sm_90 and up)\n"
     "  --option NAME=VALUE         a template's own choice: persistent, bwd_wgmma, kv_gather, bwd_tma\n"
     "                              (-1 off, 1 on; 0 the heuristic), recorded in the manifest's kernel.fn\n"
     "  --backend auto|ptxas|nvjitlink   PTX -> cubin (default: auto = ptxas, else nvJitLink)\n"
     "  --dump-dir DIR              write every stage (NAME.pre.ll, NAME.ll, NAME.ptx, NAME.cubin) to DIR\n"
     "  --override-dir DIR          use DIR/NAME.{ll,ptx,cubin} instead of a stage's own output\n"
     "  --kernel softmax            instead: the block-sparse row softmax of one pattern (toolchain\n"
     "                              debugging; no --head-dim/--dtype/tunables, no --emit c)\n"
     "  -MD                         also write a Make depfile (OUT: PATTERN MASKFILE...), OUT's name with .d\n"
     "  -MF FILE                    the depfile's name (implies -MD; required with -o -)\n"
     "  -MT NAME                    the depfile's target (default: OUT; '-' with -o -)\n"
     "  -v, --verbose               print the toolchain log and registers/spills per kernel\n"
     MASK_HELP COMMON_HELP STDIN_HELP},
    {"info", cmd_info, info_options, "print the manifest and registers of a generated cubin (no GPU)",
     "usage: s2c info CUBIN [options]\n"
     "Print the manifest of a generated cubin and each kernel's registers (no GPU needed).\n"
     "CUBIN '-' reads the cubin from stdin (at most 64 MiB).\n"
     "\n"
     "  --format text|json          json: one document (schema_version 1, README 'Command line')\n"
     COMMON_HELP},
    {"kv-memory", cmd_kv_memory, kv_memory_options, "KV-cache pages held with eviction against a dense cache",
     "usage: s2c kv-memory PATTERN --seq-len N[,N...] [options]\n"
     "KV-cache pages held with eviction (pages nothing reads again are freed) against a dense\n"
     "cache, at the end of prefill + decode.\n"
     "\n"
     "  --seq-len N[,N...]          sequence lengths (required), one row each\n"
     "  --page-size N               tokens per page, a multiple of 16 (default 64)\n"
     "  --prefill N                 prompt tokens prefilled at once, all held (default 0)\n"
     "  --head-dim D --dtype bf16|fp16   for bytes (default 128, bf16)\n"
     "  --name NAME                 which pattern of a multi-pattern file (default: the first)\n"
     "  --format text|json          json: one document (schema_version 1, README 'Command line')\n"
     MASK_HELP COMMON_HELP STDIN_HELP},
    {"cp-plan", cmd_cp_plan, cp_plan_options, "context parallelism on paper: KV bytes per rank, balance, time",
     "usage: s2c cp-plan [PATTERN] [options]\n"
     "The sequence sharded over ranks, each receiving only the KV blocks its heads read\n"
     "(s2c/cpplan.h), against ring attention, which passes every rank's K and V to every\n"
     "other: per row the received MiB per rank (mean, max), ring attention's, their ratio (max\n"
     "over ring), the causal work's balance (max/mean over ranks) and the forward's\n"
     "predicted time: max over ranks of max(compute, communication), overlapped.\n"
     "Without PATTERN: 32 heads, 8 kv heads, block 64, local 16, stride 8, causal, one\n"
     "shift per kv group (patterns/phi3-small.yaml without its dense heads).\n"
     "\n"
     "  --ranks N[,N...]            ranks (default 8,16,32,64)\n"
     "  --seq-len N[,N...]          tokens (default 1048576,2097152,4194304,10485760); each\n"
     "                              a multiple of the chunks (ranks, or 2 x ranks for zigzag)\n"
     "                              of whole tiles\n"
     "  --sharding zigzag|contiguous|both   zigzag: rank i holds chunks i and 2P-1-i (default)\n"
     "  --tflops T                  single-GPU forward throughput, TFLOP/s (default 640: H100,\n"
     "                              bench/RESULTS.md run 106, b64_l16v8_16k)\n"
     "  --link-gbps B               link bandwidth per rank, GB/s (default 50)\n"
     "  --head-dim D --dtype bf16|fp16   for bytes and FLOPs (default 128, bf16)\n"
     "  --block-m M --block-n N     the forward's tile (default 128 x 64)\n"
     "  --name NAME                 which pattern of a multi-pattern file (default: the first)\n"
     MASK_HELP COMMON_HELP STDIN_HELP},
    {NULL, NULL, NULL, NULL, NULL},
};

const cli_command *cli_find_command(const char *name)
{
    for (const cli_command *c = cli_commands; name && c->name; c++)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

static void print_help(void)
{
    fputs("usage: s2c <command> [options]\n\ncommands:\n", stdout);
    for (const cli_command *c = cli_commands; c->name; c++)
        printf("  %-10s %s\n", c->name, c->summary);
    fputs("\n's2c help COMMAND' or 's2c COMMAND --help' lists a command's options.\n"
          "  --help, --version [--verbose] (--verbose: generator, LLVM, ptxas, nvJitLink, driver, cache)\n"
          "\n"
          "exit status: 0 success, 1 bad input, 2 usage error\n",
          stdout);
}

/* "unknown command 'X'" with the closest command's name, a usage error */
static int unknown_command(const char *prefix, const char *name)
{
    const char *names[16];
    size_t n = 0;
    for (const cli_command *c = cli_commands; c->name && n < 14; c++)
        names[n++] = c->name;
    if (!prefix[0]) /* s2c --verison */
        names[n++] = "--help", names[n++] = "--version";
    char hint[128];
    return usage_error("%sunknown command '%s'%s", prefix, name, did_you_mean(hint, sizeof hint, name, names, n));
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage_error("%s", "missing command");
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || (strcmp(cmd, "help") == 0 && argc == 2)) {
        print_help();
        return EXIT_OK;
    }
    if (strcmp(cmd, "help") == 0) {
        const cli_command *c = cli_find_command(argv[2]);
        if (argc > 3)
            return usage_error("help: unexpected argument '%s'", argv[3]);
        if (!c)
            return unknown_command("help: ", argv[2]);
        fputs(c->usage, stdout);
        return EXIT_OK;
    }
    if (strcmp(cmd, "--version") == 0 || (argc > 2 && strcmp(argv[2], "--version") == 0 &&
                                          (strcmp(cmd, "--verbose") == 0 || strcmp(cmd, "-v") == 0)))
        return cmd_version(argc, argv);
    const cli_command *c = cli_find_command(cmd);
    if (!c)
        return unknown_command("", cmd);
    s2_ctx *ctx = s2_ctx_new();
    if (!ctx)
        return input_fail("out of memory");
    int rc = c->run(ctx, argc, argv);
    s2_ctx_free(ctx);
    return rc == EXIT_HELP ? EXIT_OK : rc;
}
