/* s2c — JIT: a pattern and a spec in, a loaded kernel ready for
 * s2_attn_forward out, through the on-disk kernel cache (s2c/cache.h).
 * Part of libs2c (links LLVM and the runtime).
 *
 * Key: s2_cache_key_build over the generator identity (s2_generator_id), the pattern serialised
 * as manifest text (s2_manifest_format with no kernel: every resolved rule,
 * so two files that resolve alike share entries), the resolved spec, the
 * toolchain identity of the chosen back end and the arch.
 *
 * A cached cubin is used only when its own manifest is the one a build of
 * this request embeds: the same resolved pattern, every field of the
 * resolved spec and, per kernel record, the template's options, symbol, ABI,
 * grid rule and launch shape.  An entry that is corrupt (the cache's keyed
 * checksums) or says anything else is rebuilt and replaced (stats.note says
 * why).  Cached images the driver refuses are rebuilt once as well.  A cache
 * directory others could write is not used (s2_cache_untrusted): every call
 * compiles and nothing is stored, unless trust_cache_dir or
 * S2C_CACHE_TRUST_DIR=1 says to use it.
 */
#ifndef S2C_JIT_H
#define S2C_JIT_H

#include "s2c/attn_runtime.h"
#include "s2c/cache.h"
#include "s2c/compile.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct s2_jit_opts {
    const char *cache_dir;       /* NULL: the cache's default directory */
    bool no_cache;               /* compile every time, read and write nothing */
    s2_cubin_backend backend;    /* S2_CUBIN_AUTO: ptxas if found, else nvJitLink */
    bool trust_cache_dir;        /* use the cache directory whoever may write it (S2_CACHE_TRUST_DIR) */
} s2_jit_opts;

/* What one call did (for benchmarks and tests). */
typedef struct s2_jit_stats {
    bool hit;                    /* the cubin came from the cache */
    bool compiled;               /* generated in this call */
    bool rebuilt;                /* an entry was there but unusable (corrupt, wrong contents, refused by the driver) */
    bool stored;                 /* the new cubin was written to the cache */
    bool store_failed;           /* writing it failed; the kernel is returned all the same */
    bool cache_untrusted;        /* the cache directory was not used (see note): compiled, nothing stored */
    char note[512];              /* why an entry was rebuilt or the directory not used; "" otherwise */
    char key[2 * S2_CACHE_KEY_BYTES + 1]; /* hex key, "" when no_cache */
    s2_kernel_spec spec;         /* the resolved spec */
} s2_jit_stats;

/* The compile-or-fetch step, no GPU needed: the cubin for pattern and spec
 * on `arch` (spec->arch is ignored), from the cache or freshly generated
 * (and stored).  *cubin is malloc'd (free()).  opts and stats may be NULL. */
S2_API s2_status s2_jit_fetch(s2_ctx *ctx, s2_arch arch, const s2_pattern *pattern, const s2_kernel_spec *spec,
                       const s2_jit_opts *opts, uint8_t **cubin, size_t *size, s2_jit_stats *stats);

/* Fetch for the arch of `dev` (s2_arch_for_device) and load: *out is a
 * standalone kernel (s2_attn_kernel_free).  spec->arch is ignored. */
S2_API s2_status s2_jit_compile(s2_ctx *ctx, s2_device *dev, const s2_pattern *pattern, const s2_kernel_spec *spec,
                         const s2_jit_opts *opts, s2_attn_kernel **out, s2_jit_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
