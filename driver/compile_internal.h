/* Internal to s2c (bench, tests, the CLI): compiling with the templates'
 * own choices set, and reading them back. */
#ifndef S2C_COMPILE_INTERNAL_H
#define S2C_COMPILE_INTERNAL_H

#include "kernel_abi.h"
#include "s2c/compile.h"

/* s2_kernel_spec_resolve with the template options (kernel_abi.h) given. */
s2_status s2_kspec_resolve(s2_ctx *ctx, s2_kspec *spec, const s2_pattern *p);
/* s2_compile_attention_set with the template options given. */
s2_status s2_compile_kspec(s2_ctx *ctx, const char *module_name, const s2_pattern *const *patterns, int n,
                          const s2_kspec *spec, s2_cubin_backend backend, s2_artifact **out);
/* The manifest s2_compile_kspec embeds for these arguments, built without
 * generating code (the JIT compares a cached cubin's manifest with it).
 * *text malloc'd. */
s2_status s2_compile_kspec_manifest(s2_ctx *ctx, const s2_pattern *const *patterns, int n, const s2_kspec *spec,
                                    char **text);
/* s2_compile_attention with the template options given. */
static inline s2_status s2_compile_kspec1(s2_ctx *ctx, const s2_pattern *p, const s2_kspec *spec,
                                          s2_cubin_backend backend, s2_artifact **out)
{
    return s2_compile_kspec(ctx, NULL, &p, 1, spec, backend, out);
}
/* The resolved spec, options included, of an artifact's first entry's main
 * kernel, from its manifest. */
s2_status s2_artifact_kspec(s2_ctx *ctx, const s2_artifact *art, s2_kspec *out);

#endif
