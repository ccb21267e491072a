/* s2c — the manifest: what a generated module says about itself (every
 * kernel's spec and launch shape, every pattern's resolved rules), so that
 * the runtime, `s2c info` and the AOT emitter need no pattern file. */
#ifndef S2C_MANIFEST_H
#define S2C_MANIFEST_H

#include "s2c/common.h"
#include "s2c/layout.h"
#include "s2c/pattern.h"
#include "s2c/spec.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif


/* ---- the manifest: what a cubin says about itself ------------------------------
 * Every generated module holds a NUL-terminated text global `s2c_manifest`
 * (see s2_manifest_format): the generator identity (s2_generator_id), the arch, and per kernel
 * its name, kind, pattern, resolved spec, launch shape and shared memory,
 * plus each pattern's resolved rules, so that the runtime can rebuild the
 * schedules without the pattern file. */
#define S2_MANIFEST_SYMBOL "s2c_manifest"
/* The format's version: a runtime reads exactly its own (first line).  4:
 * kernel.fn's MIN_KEYS; 5: kernel.kv_dtype, and the decode (k_scale,
 * v_scale) and backward (seqinfo) parameter lists that came with it; an older
 * module is refused, naming it as an older s2c's ("compile the module again";
 * the JIT does so by itself), and an older runtime refuses this one. */
#define S2_MANIFEST_VERSION 5
/* The oldest runtime release (MAJOR.MINOR) that launches what this generator
 * writes correctly; raised whenever a kernel ABI, a parameter list or the
 * meaning of a record changes, or a record of a new role, ABI or grid rule
 * appears (0.2: every forward's NAME_seqs); the `requires` line.  A runtime
 * older than a manifest's `requires` refuses the module. */
#define S2_MANIFEST_REQUIRES_MAJOR 0
#define S2_MANIFEST_REQUIRES_MINOR 2

/* One kernel of a module: its symbol, role, ABI, grid rule, threads, shared
 * memory and the tile it was built for (the `kernel.fn` line).  Its layout
 * is internal to s2c. */
typedef struct s2_kernel_record s2_kernel_record;

/* One entry of a module: a pattern compiled for one spec, and the kernels
 * it put in the module (a forward: NAME and maybe its wide variant NAME_w;
 * a backward: NAME_pre, NAME_dkdv, NAME_dq and maybe NAME_dqds, NAME_dqds2;
 * a decode: NAME and NAME_combine). */
typedef struct s2_manifest_kernel {
    char *name;            /* the entry's name: its main kernel's symbol, the others' prefix */
    char *pattern;         /* pattern name */
    s2_kernel_spec spec;   /* resolved */
    int threads;           /* blockDim.x of the main kernel */
    int smem_bytes;        /* its dynamic shared memory per CTA */
    const s2_kernel_record *fns;   /* every kernel of the entry */
    int num_fns;
} s2_manifest_kernel;

typedef struct s2_manifest s2_manifest;

/* Text format (one `key value` per line; the value is the rest of the line):
 *   s2c-manifest 5            first line, the format version
 *   requires MAJOR.MINOR      the oldest runtime that may launch these kernels
 *   generator VERSION+HASH+llvmX.Y.Z / arch sm_XX
 *   kernel NAME               starts an entry; then kernel.kind (fwd|bwd|decode), kernel.pattern,
 *                             kernel.dtype, [kernel.kv_dtype e4m3: a decode entry's fp8 pages],
 *                             kernel.head_dim, kernel.block_m, kernel.block_n,
 *                             kernel.num_warps, kernel.num_stages, kernel.threads, kernel.smem,
 *                             then one line per kernel of the entry:
 *                             kernel.fn SYMBOL ROLE ABI GRID THREADS SMEM BLOCK_M BLOCK_N NUM_WARPS
 *                                       NUM_STAGES PERSISTENT BWD_WGMMA KV_GATHER BWD_TMA MIN_KEYS
 *                             ROLE fwd|fwd_wide|bwd_pre|bwd_dkdv|bwd_dq|bwd_dqds|bwd_dqds2|decode|combine|fwd_seqs,
 *                             ABI fwd|fwd_tma|fwd_tma_persistent|bwd|bwd_tma|decode|combine|seqs,
 *                             GRID q_tiles|persistent|pre_rows|kv_tiles|q_tile_pairs|splits|rows|seqs,
 *                             then the tile it was built for (PERSISTENT .. BWD_TMA: the template's
 *                             choices), and MIN_KEYS, the rule a variant (role fwd_wide) is chosen by,
 *                             written by its template: the runtime launches it instead of the entry's
 *                             main kernel where the main kernel's schedule holds on average at least
 *                             MIN_KEYS keys per query tile (1..2^31-1); 0 on every other role
 *   pattern NAME              starts a pattern; then pattern.heads, .kv_heads, .block_size,
 *                             .causal, .max_seq_len, .vert_position (absolute|relative),
 *                             .local L R, .vert_stride, .head_sliding STEP AUTO OFFSET,
 *                             .homo_head, .num_dense_heads,
 *                             .mask I H M N HEXBITS     (explicit mask I, 4 bits per digit, low bit first)
 *                             .rule Q DENSE LEFT RIGHT STRIDE SHIFT MASK MASK_HEAD  (one per head)
 *                             .range ACTION KEY_LO KEY_HI DIST_LO DIST_HI STRIDE HEADS_HEXBITS
 *   end
 * Keys are closed: an unknown key at any level, a version other than 4, or a
 * `requires` above this runtime's version (s2c/version.h) is refused with a
 * message, so an old runtime never launches a newer generator's kernels with
 * the wrong parameters.  The parser checks each entry's kernels against its
 * kind (every role it needs, once; the ABI and grid each role takes), holds
 * every integer to the pattern parser's bounds (s2c/pattern.h) and refuses a
 * second entry, pattern or kernel symbol of one name.
 * Writer (libs2c): *text malloc'd, NUL-terminated. */
S2_API s2_status s2_manifest_format(s2_ctx *ctx, int arch, const s2_manifest_kernel *kernels, int num_kernels,
                             const s2_pattern *const *patterns, int num_patterns, char **text);

S2_API s2_status s2_manifest_parse(s2_ctx *ctx, const char *text, size_t len, s2_manifest **out);
S2_API void s2_manifest_free(s2_manifest *m);
S2_API const char *s2_manifest_generator(const s2_manifest *m);
S2_API int s2_manifest_arch(const s2_manifest *m);
S2_API int s2_manifest_num_kernels(const s2_manifest *m);
S2_API const s2_manifest_kernel *s2_manifest_kernel_at(const s2_manifest *m, int i);
S2_API int s2_manifest_num_patterns(const s2_manifest *m);
S2_API const s2_pattern *s2_manifest_pattern_at(const s2_manifest *m, int i);
S2_API const s2_pattern *s2_manifest_find_pattern(const s2_manifest *m, const char *name);

/* The tile schedule kernel `symbol` of entry k reads for a layout of the
 * entry's pattern, packed in the format its record names (launch.h): the
 * forward lists of its tile (plain, gathered key tiles, owned pairs), or
 * with `transposed` (a backward's kernels, parameters 44..47) the dK/dV
 * kernel's kv groups, *kv_tiles their count per kv head.  What the runtime
 * uploads; for the AOT launchers' callers (s2c/aot.h).  Free with
 * s2_packed_schedule_free. */
S2_API s2_status s2_manifest_schedule_pack(s2_ctx *ctx, const s2_manifest_kernel *k, const char *symbol,
                                           const s2_layout *lay, bool transposed, s2_packed_schedule *out,
                                           int32_t *kv_tiles);

/* Find the manifest text inside a cubin (ELF) image without a GPU: the
 * bytes of the symbol S2_MANIFEST_SYMBOL.  *text points into image. */
S2_API s2_status s2_cubin_find_manifest(s2_ctx *ctx, const void *image, size_t size, const char **text, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
