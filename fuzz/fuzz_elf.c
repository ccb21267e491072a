/* libFuzzer harness of the ELF readers (common/elf.c: symbols and the
 * .nv.info register counts): any input must
 * be accepted or rejected without a crash or an out-of-bounds read (the
 * returned bytes are read in full, so ASan sees them), with a one-line
 * message on rejection, and a returned range must lie inside the input.
 *
 *   clang-22 -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
 *       -Iinclude -Icommon fuzz/fuzz_elf.c common/elf.c common/ctx.c common/arena.c \
 *       common/file.c -o fuzz_elf
 *   ./fuzz_elf -max_len=8192 -jobs=4 -workers=4 -max_total_time=120 CORPUS tests/data/elf/fuzz
 *
 * Seeds: ptxas cubins (sm_80, sm_90a).  First run: 4 x 121 s, 11.7 M
 * executions, no crash; 119 edges / 429 features.  tests/data/elf/fuzz keeps
 * the seed and the 40 smallest inputs of the merged corpus; the elf test
 * suite replays them. */
#include "elf.h"
#include "s2c/manifest.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static volatile unsigned sink;

static void touch(const uint8_t *b, size_t n)
{
    unsigned s = 0;
    for (size_t i = 0; i < n; i++)
        s += b[i];
    sink = s;
}

static void check(s2_ctx *ctx, s2_status st, const unsigned char *data, size_t size, const void *b, size_t n)
{
    if (st == S2_OK) {
        const unsigned char *p = b;
        if (p < data || p > data + size || n > (size_t)(data + size - p))
            abort();
        touch(p, n);
        return;
    }
    const char *msg = s2_ctx_message(ctx);
    if ((st != S2_ERR_PARSE && st != S2_ERR_NOT_FOUND) || !msg[0] || strchr(msg, '\n'))
        abort();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    /* an exact-size heap copy: libFuzzer's buffer may have slack after it */
    unsigned char *img = malloc(size ? size : 1);
    if (!img)
        return 0;
    memcpy(img, data, size);
    s2_ctx *ctx = s2_ctx_new();
    const uint8_t *b;
    size_t n;
    static const char *names[] = {"s2c_manifest", "other_var", "zero_var", "s2c_test_kernel", "a"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        s2_status st = s2_elf_find_symbol(ctx, img, size, names[i], &b, &n);
        check(ctx, st, img, size, b, n);
    }
    /* the .nv.info reader: a count only with S2_OK, a one-line message otherwise */
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int regs = 0;
        s2_status st = s2_elf_regcount(ctx, img, size, names[i], &regs);
        if ((st == S2_OK) != (regs >= 0 && regs <= 65535))
            abort();
        check(ctx, st, img, size, img, 0);
    }
    const char *text;
    s2_status st = s2_cubin_find_manifest(ctx, img, size, &text, &n);
    check(ctx, st, img, size, text, n + (st == S2_OK));
    if (st == S2_OK && text[n] != 0)
        abort();
    s2_ctx_free(ctx);
    free(img);
    return 0;
}
