/* The pieces of main() the Check test programs share: running the suite,
 * and the preamble of the programs that run on the fake libcuda.  Header
 * only (every Check program sees tests/harness). */
#ifndef S2C_TEST_CHECK_MAIN_H
#define S2C_TEST_CHECK_MAIN_H

#include "s2c/cache.h"
#include "s2c/compile.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

/* Run s: main's exit status, 0 when every test passed, else 1. */
static inline int s2t_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

/* argv[1], the fake libcuda's path (a usage line and exit 1 without it);
 * exits 77 (skipped) when neither ptxas nor nvJitLink can make cubins. */
static inline const char *s2t_fake_libcuda_arg(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FAKE_LIBCUDA\n", argv[0]);
        exit(1);
    }
    const char *tc = NULL;
    if (s2_toolchain_version(NULL, S2_CUBIN_AUTO, &tc) != S2_OK) {
        printf("no ptxas or nvJitLink: skipped\n");
        exit(77);
    }
    return argv[1];
}

/* The artifact of spec for pattern p, made during a program's setup: the
 * compiler's message and exit 1 when it fails. */
static inline s2_artifact *s2t_compile_or_exit(const s2_pattern *p, const s2_kernel_spec *spec)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_artifact *art = NULL;
    if (s2_compile_attention(ctx, p, spec, S2_CUBIN_AUTO, &art) != S2_OK) {
        fprintf(stderr, "compile: %s\n", s2_ctx_message(ctx));
        exit(1);
    }
    s2_ctx_free(ctx);
    return art;
}

#endif
