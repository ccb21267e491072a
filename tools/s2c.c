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
#include "cli.h"

#include <stdio.h>
#include <string.h>

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
    "      --max-bytes N           refuse a mask or schedule text over N bytes (default 1 GiB)\n"
    "  compile PATTERN --head-dim D --dtype bf16|fp16 --arch sm_80|sm_90|sm_90a -o OUT\n"
    "                              forward attention kernels, one per pattern, in one module\n"
    "      --name NAME             a pattern to compile (repeatable; default: every pattern of the file)\n"
    "      --emit cubin|c|ptx|ll   what to write (default: cubin); c writes DIR/NAME.h and DIR/NAME.c,\n"
    "                              NAME = OUT's file name without extension as a C identifier\n"
    "      --block-m N --block-n N --num-warps N --num-stages N\n"
    "      --kv-gather N           key blocks gathered into one key tile (1..4, filling block_n)\n"
    "      --option NAME=VALUE     a template's own choice: persistent, bwd_wgmma, kv_gather, bwd_tma\n"
    "                              (-1 off, 1 on; 0 the heuristic), recorded in the manifest's kernel.fn\n"
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
    "  --allow-mask-path DIR       (check, layout, compile, kv-memory; repeatable) a pattern's mask\n"
    "                              files may also lie in DIR (default: only in the pattern file's directory)\n"
    "  --help, --version\n"
    "\n"
    "exit status: 0 success, 1 bad input, 2 usage error\n";

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
