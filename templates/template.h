/* Internal to the generator: the kernel templates behind one interface.
 *
 * A template turns (pattern, resolved spec) into one or more kernels in an
 * LLVM module.  The compile driver (driver/compile.c) asks the table for the
 * first template that accepts a spec, lets it resolve the spec's zero
 * tunables, and lets it build; it knows no template by name.  Adding a
 * template is one file (its builder and its table entry's functions) plus
 * one line in the table (templates/template.c) and its test. */
#ifndef S2C_TEMPLATE_H
#define S2C_TEMPLATE_H

#include "cg_internal.h"
#include "kernel_abi.h"
#include "s2c/manifest.h"
#include "s2c/pattern.h"
#include "s2c/spec.h"

#include <stdbool.h>
#include <stddef.h>

/* A variant of an entry's main kernel (the sm_90a forward's NAME_w): the
 * same template's kernel on another tile, under its own role, which the
 * runtime launches instead of the main kernel where the rule holds. */
typedef struct s2_variant {
    s2_kernel_role role;
    s2_kspec spec;         /* its tunables, resolved by the driver through the table */
    int min_keys;          /* the rule (the record's MIN_KEYS): keys per query tile, on average over the main
                            * schedule's lists, from which the variant is launched */
} s2_variant;

enum { S2_TEMPLATE_MAX_VARIANTS = 2 };

/* A template's dtypes (1u << s2_dtype) and head dims (S2_TEMPLATE_HEAD_DIM(d)). */
#define S2_TEMPLATE_DTYPE(t) (1u << (t))
/* head dims are multiples of 16 from 16 to 256: bits 1..16 */
#define S2_TEMPLATE_HEAD_DIM(d) (1u << ((d) / 16))
#define S2_TEMPLATE_HEAD_DIM_OK(d) ((d) >= 16 && (d) <= 256 && (d) % 16 == 0)

typedef struct s2_template {
    const char *name;      /* "fwd_mma", "fwd_wgmma", "bwd", "decode", "row_softmax" */
    s2_kernel_kind kind;   /* S2_KERNEL_KIND_COUNT_: not an attention kernel (asked by name) */
    unsigned dtypes;       /* the dtypes it builds */
    unsigned head_dims;    /* the head dims it builds */
    unsigned abis;         /* 1u << s2_abi_id of every kernel it builds */
    /* Whether the template takes the (unresolved) spec: its kind, arch and
     * the tunables it was given.  The table is asked in order; NULL: never
     * (an entry asked by name). */
    bool (*accepts)(const s2_kspec *spec);
    /* Fill the zero tunables of spec for pattern p and check them
     * (S2_ERR_UNSUPPORTED with a message naming what does not fit). */
    s2_status (*resolve)(s2_ctx *ctx, s2_kspec *spec, const s2_pattern *p);
    /* Dynamic shared memory of the module's main kernel for a resolved spec. */
    int (*smem_bytes)(const s2_pattern *p, const s2_kspec *spec);
    /* The kernels build() emits for a resolved spec, as the manifest
     * records them (the driver names them: the entry's name and the role's
     * suffix); returns how many, at most S2_ROLE_COUNT_. */
    int (*kernels)(const s2_pattern *p, const s2_kspec *spec, s2_kernel_record *out);
    /* The variants of the main kernel of `resolved`, built for the spec the
     * caller asked (`asked`, its zero tunables unfilled); returns how many,
     * at most S2_TEMPLATE_MAX_VARIANTS; NULL when the template has none. */
    int (*variants)(const s2_pattern *p, const s2_kspec *asked, const s2_kspec *resolved, s2_variant *out);
    /* Build the kernel(s) `name` (resolved spec) into cg's module. */
    s2_status (*build)(s2_ctx *ctx, s2_cg *cg, const s2_pattern *p, const s2_kspec *spec, const char *name);
    /* Build the entry's kernel of record rec that its wide variant does not
     * repeat (a forward's NAME_seqs and NAME_combine), after build(); NULL
     * when the entry has none. */
    s2_status (*build_entry)(s2_ctx *ctx, s2_cg *cg, const s2_kernel_record *rec);
    /* The main kernel's symbol for a resolved spec; NULL: the driver's
     * attention naming (s2_fwd_, s2_bwd_, s2_dec_<pattern>_<dtype>_d<D>). */
    void (*symbol)(char *out, size_t cap, const s2_pattern *p, const s2_kspec *spec);
} s2_template;

int s2_template_count(void);
const s2_template *s2_template_at(int i);
/* The first template that accepts spec, or NULL. */
const s2_template *s2_template_for(const s2_kspec *spec);
/* The template for spec as s2_template_for, or S2_ERR_UNSUPPORTED naming
 * the dtypes and head dims the templates of its kind build. */
s2_status s2_template_pick(s2_ctx *ctx, const s2_kspec *spec, const s2_template **out);
/* The entry called name (one asked by name: "row_softmax"), or NULL. */
const s2_template *s2_template_named(const char *name);
/* Dynamic shared memory a CTA may opt in to on arch (sm_80: A100's 163 KB;
 * sm_90: 227 KB). */
int s2_template_smem_limit(int arch);
/* A forward's kernel records: NAME (role fwd, abi, smem) and NAME_seqs; with16
 * also NAME_combine and NAME_rows, which read and write the spec's dtype as
 * 16-bit rows.  Returns the count. */
int s2_template_kernels_fwd(const s2_kspec *s, s2_abi_id abi, int smem, bool with16, s2_kernel_record *out);
/* v is a power of two in [lo, hi]. */
static inline bool s2_template_pow2_in(int v, int lo, int hi) { return v >= lo && v <= hi && (v & (v - 1)) == 0; }
/* The mma.sync templates' FA2 rows: each warp owns one 16-row slab, so
 * block_m = 16 * num_warps (zeros filled, 4 warps by default), 16..128. */
s2_status s2_template_fa2_rows(s2_ctx *ctx, s2_kspec *spec);
/* num_stages (0: 2) within 1..4, and at most 64 pattern sub-blocks in a
 * block_m x block_n tile (and, bwd, in block_m x block_m). */
s2_status s2_template_fa2_stages_tiles(s2_ctx *ctx, s2_kspec *spec, const s2_pattern *p, bool bwd);

/* ---- the templates' entry points (one file each) ---- */
/* mma.sync forward (templates/fwd.c), sm_80 and up */
/* up to this head dim it keeps Q's fragments in registers; past it, it reads
 * them from shared memory per key tile, and its default key tiles narrow */
enum { S2_FWD_Q_REGS_MAX_D = 128 };
int s2_fwd_smem_bytes(const s2_pattern *p, const s2_kspec *spec);
s2_status s2_fwd_build(s2_ctx *ctx, s2_cg *cg, const s2_pattern *p, const s2_kspec *spec, const char *name);
/* wgmma + TMA forward (templates/fwd_sm90.c), sm_90a, head_dim 16 to 256 in steps of 16 */
bool s2_fwd_spec_wants_tma(const s2_kspec *s);
int s2_fwd_sm90_smem_bytes(const s2_pattern *p, const s2_kspec *spec);
s2_status s2_fwd_sm90_build(s2_ctx *ctx, s2_cg *cg, const s2_pattern *p, const s2_kspec *spec, const char *name);
/* The backward (templates/bwd*.c): dynamic shared memory of its dq / dkdv
 * kernels (the larger), and the kernels NAME_pre, NAME_dkdv, NAME_dq (and
 * NAME_dqds, NAME_dqds2 where the module takes the dS path). */
int s2_bwd_smem_bytes(const s2_pattern *p, const s2_kspec *spec);
s2_status s2_bwd_build(s2_ctx *ctx, s2_cg *cg, const s2_pattern *p, const s2_kspec *spec, const char *name);
/* Whether the backward module of a resolved spec holds NAME_dqds (dQ from
 * the dS tiles the dK/dV kernel writes, backward ABI 48..50): the wgmma
 * bodies, no gathered key tiles, block_m = block_n = 64, block_size >= 64. */
bool s2_bwd_ds_capable(const s2_pattern *p, const s2_kspec *spec);
/* NAME_dqds's ring (stages of a K tile and a dS tile) and the dynamic shared
 * memory it is launched with (less than the module's smem_bytes, so that
 * more CTAs share an SM). */
int s2_bwd_dqds_stages(void);
int s2_bwd_dqds_smem_bytes(const s2_kspec *spec);
/* NAME_dqds2, its paired form: one CTA of 256 threads per two adjacent
 * query tiles of a head (query tiles q_tiles-1-2x and q_tiles-2-2x for
 * blockIdx.x = x; grid.x = ceil(q_tiles / 2)), over the union of their
 * lists, each K tile read once for both.  Only for forward lists of at most
 * S2_BWD_DQDS2_MAX_LIST entries in increasing key order; its dynamic shared
 * memory. */
enum { S2_BWD_DQDS2_THREADS = 256 };
/* the union's shared memory: two key arrays, the common-entry prefix
 * counts, 8 warp totals, then key tile and the two entries per union slot */
enum { S2_BWD_DQDS2_UNION_BYTES = 4 * (2 * 256 + 264 + 8 + 3 * 512) };
int s2_bwd_dqds2_smem_bytes(const s2_kspec *spec);
/* The paged decode (templates/decode.c): shared memory, and the kernels
 * NAME and NAME_combine (ABI in s2c/decode.h); the combine's block. */
enum { S2_COMBINE_THREADS = 128 };
int s2_decode_smem_bytes(const s2_pattern *p, const s2_kspec *spec);
s2_status s2_decode_build(s2_ctx *ctx, s2_cg *cg, const s2_pattern *p, const s2_kspec *spec, const char *name);
/* NAME_combine (templates/combine.c): the LSE merge of partial outputs, in
 * every decode and forward module. */
s2_status s2_combine_kernel_build(s2_ctx *ctx, s2_cg *cg, s2_dtype out_dt, int D, const char *name);
/* NAME_seqs of every forward module (templates/seqs.c, ABI seqs in
 * s2c/launch.h): one thread per sequence, S2_SEQS_THREADS per CTA. */
enum { S2_SEQS_THREADS = 128 };
s2_status s2_seqs_kernel_build(s2_ctx *ctx, s2_cg *cg, const char *name);
/* NAME_rows of every 16-bit forward and backward module (templates/rows.c,
 * ABI rows in s2c/decode.h): one CTA of S2_ROWS_THREADS per run of a table;
 * a backward entry's build_entry builds it. */
enum { S2_ROWS_THREADS = 128 };
s2_status s2_rows_kernel_build(s2_ctx *ctx, s2_cg *cg, s2_dtype dt, int D, const char *name);
s2_status s2_rows_entry_build(s2_ctx *ctx, s2_cg *cg, const s2_kernel_record *rec);
/* A forward entry's kernels built once (build_entry): NAME_seqs, NAME_combine, NAME_rows. */
s2_status s2_fwd_entry_build(s2_ctx *ctx, s2_cg *cg, const s2_kernel_record *rec);

#endif
