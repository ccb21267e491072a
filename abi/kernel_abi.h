/* Internal to s2c (not installed): facts about the generated kernels that
 * the templates, the runtime and the AOT emitter share, in LLVM-free code.
 * The templates build what these describe; nothing else re-derives them. */
#ifndef S2C_KERNEL_ABI_H
#define S2C_KERNEL_ABI_H

#include "arch.h"
#include "s2c/layout.h"
#include "s2c/manifest.h"
#include "s2c/pattern.h"
#include "s2c/spec.h"

#include <stdbool.h>

/* ---- a resolved spec: the public tunables and the templates' own choices ---- */
/* The choices only some templates make.  0 = the template's heuristic;
 * bench and tests set them through s2_kernel_options_set. */
typedef struct s2_kernel_options {
    /* sm_90a forward only: 1 persistent grid over a longest-first work list
     * (S2_ABI_FWD_TMA_PERSISTENT), -1 one CTA per (q tile, head, batch);
     * 0 = heuristic (resolved to -1 there, the faster measured, and 0 on the other paths) */
    int persistent;
    /* sm_90a backward, head_dim 64 or 128: 1 the wgmma dK/dV and dQ bodies
     * (templates/bwd_sm90.c), -1 the mma.sync ones; 0 = heuristic (resolved
     * to 1 there when num_warps is 4, else -1; 0 on the other paths).  Same
     * kernels, parameters and launch either way. */
    int bwd_wgmma;
    /* Key tiles gathered from kv_gather pattern blocks (block_n = kv_gather *
     * block_size, not necessarily adjacent; the records' KV_GATHER).
     * sm_90a forward: 2..4 blocks, the packed schedule is
     * s2_schedule_pack_gathered's, the k and v tensor maps have boxes of
     * block_size rows; 0 = heuristic: 4 for block-16 patterns (block_n 64).
     * sm_90a wgmma backward: 4 blocks of 16 tokens, block_m = block_n = 64:
     * the dQ kernel's key tiles as the forward's, the dK/dV kernel's resident
     * key tile from s2_schedule_pack_gathered_kv (see the backward ABI);
     * 0 = heuristic: 4 for block-16 patterns.  1 = one key tile per entry.
     * Resolved to 1 or more on the sm_90a forward, 0 or 4 on the backward,
     * 0 elsewhere. */
    int kv_gather;
    /* sm_90a wgmma backward: 1 the dK/dV kernel copies its Q and dO tiles by
     * TMA, from two tensor maps the backward kernels take as parameters 51
     * and 52 (see the backward ABI); -1 by cp.async (parameters 0..50 only);
     * 0 = heuristic (resolved to 1 there, 0 on the other paths). */
    int bwd_tma;
} s2_kernel_options;

/* What the templates build from: s2_kernel_spec's fields under the same
 * names, then s2_kernel_options' (kspec->kv_gather reads as spec->kv_gather
 * did when both were public). */
typedef struct s2_kspec {
    s2_kernel_kind kind;
    s2_dtype dtype;
    int head_dim;
    int arch;
    int block_m, block_n, num_warps, num_stages;
    int persistent, bwd_wgmma, kv_gather, bwd_tma;
    s2_dtype kv_dtype;           /* decode's K/V pages (s2_kernel_spec.kv_dtype) */
} s2_kspec;

static inline s2_kspec s2_kspec_of(const s2_kernel_spec *s, const s2_kernel_options *o)
{
    s2_kspec k = {s->kind, s->dtype, s->head_dim, s->arch, s->block_m, s->block_n, s->num_warps, s->num_stages,
                  0, 0, 0, 0, s->kv_dtype};
    if (o)
        k.persistent = o->persistent, k.bwd_wgmma = o->bwd_wgmma, k.kv_gather = o->kv_gather, k.bwd_tma = o->bwd_tma;
    return k;
}

static inline s2_kernel_spec s2_kspec_public(const s2_kspec *k)
{
    return (s2_kernel_spec){k->kind, k->dtype, k->head_dim, k->arch, k->block_m, k->block_n, k->num_warps,
                            k->num_stages, k->kv_dtype};
}

static inline s2_kernel_options s2_kspec_options(const s2_kspec *k)
{
    return (s2_kernel_options){k->persistent, k->bwd_wgmma, k->kv_gather, k->bwd_tma};
}

/* The one setter of the template options: NAME=VALUE for persistent,
 * bwd_wgmma, kv_gather, bwd_tma (S2_ERR_INVALID names what is wrong). */
s2_status s2_kernel_options_set(s2_ctx *ctx, s2_kernel_options *o, const char *name_eq_value);

/* ---- kernel ABIs: parameter lists (params.h), ids and names ---- */
typedef enum s2_param_type { S2_PT_PTR, S2_PT_I32, S2_PT_I64, S2_PT_F32, S2_PT_TMAP, S2_PT_BYTES } s2_param_type;

typedef struct s2_abi_param {
    const char *name;          /* a C identifier: the AOT launchers' parameter name */
    s2_param_type type;
} s2_abi_param;

typedef enum s2_abi_id {
    S2_ABI_FWD = 0,            /* mma.sync forward */
    S2_ABI_FWD_TMA,            /* sm_90a forward: + q, k, v tensor maps */
    S2_ABI_FWD_TMA_PERSISTENT, /* the same on the persistent grid: + work list, counter */
    S2_ABI_BWD,                /* every backward kernel */
    S2_ABI_BWD_TMA,            /* + q and do tensor maps */
    S2_ABI_DECODE,             /* paged decode */
    S2_ABI_COMBINE,            /* decode module's combine */
    S2_ABI_SEQS,               /* forward module's cu_seqlens -> s2_attn_seq records */
    S2_ABI_FWD_TMA_FP8,        /* sm_90a forward on e4m3: S2_ABI_FWD_TMA + q, k, v descales */
    S2_ABI_ROWS,               /* a forward's or backward's NAME_rows: rows copied or summed by a table */
    S2_ABI_COUNT_
} s2_abi_id;

typedef struct s2_abi_desc {
    const char *name;          /* manifest token: "fwd", "fwd_tma", ... */
    const s2_abi_param *params;
    int num_params;
} s2_abi_desc;

/* NULL for an invalid id */
const s2_abi_desc *s2_abi_get(s2_abi_id id);
/* by manifest token; false when unknown */
bool s2_abi_parse(const char *name, s2_abi_id *out);
/* index of the parameter called name, -1 if none */
int s2_abi_param_index(s2_abi_id id, const char *name);

/* ---- what each kernel of a module is for, and how its grid is formed ---- */
typedef enum s2_kernel_role {
    S2_ROLE_FWD = 0,           /* NAME: the forward */
    S2_ROLE_FWD_WIDE,          /* NAME_w: the forward on wider tiles, for long lists */
    S2_ROLE_BWD_PRE,           /* NAME_pre: delta and lse2 */
    S2_ROLE_BWD_DKDV,          /* NAME_dkdv */
    S2_ROLE_BWD_DQ,            /* NAME_dq: dQ recomputing S and dP */
    S2_ROLE_BWD_DQDS,          /* NAME_dqds: dQ from the dS tiles */
    S2_ROLE_BWD_DQDS2,         /* NAME_dqds2: the same, two query tiles per CTA */
    S2_ROLE_DECODE,            /* NAME: paged decode */
    S2_ROLE_COMBINE,           /* NAME_combine */
    S2_ROLE_FWD_SEQS,          /* NAME_seqs: a forward's records from cu_seqlens (optional) */
    S2_ROLE_ROWS,              /* NAME_rows: rows by a table, of a forward or backward (optional) */
    S2_ROLE_COUNT_
} s2_kernel_role;

typedef enum s2_grid_rule {
    S2_GRID_Q_TILES = 0,       /* (q_tiles, heads, batch) */
    S2_GRID_PERSISTENT,        /* (min(SMs x resident CTAs, n_work x batch), 1, 1) */
    S2_GRID_PRE_ROWS,          /* (cdiv(q_len, threads / (head_dim / 8)), heads, batch) */
    S2_GRID_KV_TILES,          /* (kv_tiles, kv_heads, batch) */
    S2_GRID_Q_TILE_PAIRS,      /* (cdiv(q_tiles, 2), heads, batch) */
    S2_GRID_SPLITS,            /* (splits, kv_heads, batch) */
    S2_GRID_ROWS,              /* (cdiv(rows, threads / (head_dim / 8)), 1, 1) */
    S2_GRID_SEQS,              /* (cdiv(n, threads), 1, 1): one thread per sequence */
    S2_GRID_RUNS,              /* (n, 1, 1): one CTA per run of a table */
    S2_GRID_COUNT_
} s2_grid_rule;

const char *s2_role_name(s2_kernel_role r);      /* "fwd", "fwd_wide", "bwd_pre", ...; NULL if invalid */
bool s2_role_parse(const char *name, s2_kernel_role *out);
const char *s2_grid_name(s2_grid_rule g);        /* "q_tiles", "persistent", ...; NULL if invalid */
bool s2_grid_parse(const char *name, s2_grid_rule *out);
/* The suffix a role's symbol adds to the entry's name ("", "_w", "_pre", ...). */
const char *s2_role_suffix(s2_kernel_role r);
/* The kernel kind whose modules hold role r. */
s2_kernel_kind s2_role_kind(s2_kernel_role r);
/* Whether an entry of kind `kind` may hold role r: its own roles, the
 * combine (a decode's and a forward's) and NAME_rows (a forward's and a
 * backward's). */
bool s2_role_fits_kind(s2_kernel_role r, s2_kernel_kind kind);
/* The role of an entry's main kernel, whose launch shape is the entry's
 * (threads, smem): the forward, NAME_dkdv, the decode kernel. */
s2_kernel_role s2_main_role(s2_kernel_kind kind);
/* Whether a kernel of role r may take ABI abi, and the grid it then has. */
bool s2_role_takes_abi(s2_kernel_role r, s2_abi_id abi);
s2_grid_rule s2_role_grid(s2_kernel_role r, s2_abi_id abi);
/* Whether a kernel of role r is a variant of its entry's main kernel,
 * launched instead of it by its record's rule (min_keys). */
static inline bool s2_role_is_variant(s2_kernel_role r) { return r == S2_ROLE_FWD_WIDE; }

/* One kernel of a module, as the manifest records it (`kernel.fn`): the
 * runtime, `s2c info` and the AOT emitter launch it from this alone. */
struct s2_kernel_record {
    char *symbol;              /* the kernel's symbol: the entry's name and the role's suffix */
    s2_kernel_role role;
    s2_abi_id abi;
    s2_grid_rule grid;
    int threads;               /* blockDim.x */
    int smem_bytes;            /* dynamic shared memory it is launched with */
    /* A variant's rule (MIN_KEYS; the template's, s2_variant): launched
     * instead of the entry's main kernel where the main schedule's lists
     * hold on average at least this many keys per query tile; 0 for every
     * kernel that is not a variant. */
    int min_keys;
    s2_kspec spec;             /* the tile it was built for (the entry's, or the wide variant's) */
};

/* The kernel of role r in entry k, or NULL. */
const s2_kernel_record *s2_manifest_kernel_fn(const s2_manifest_kernel *k, s2_kernel_role r);

/* Whether a resolved sm_90a forward spec takes owned pairs
 * (s2_schedule_pack_gathered_owned) instead of s2_schedule_pack_gathered's:
 * two 64-row warpgroups over two gathered 64-token blocks. */
static inline bool s2_kernel_spec_owned_pairs(const s2_kspec *spec)
{
    /* (kv_gather above 1 is resolved on the sm_90a forward and backward only) */
    return spec->kind == S2_KERNEL_FWD && spec->block_m == 128 &&
           spec->kv_gather == 2 && spec->block_n == 128;
}

/* A forward schedule s (tile shape {block_m, block_n / kv_gather}) packed
 * for spec's kernel: owned pairs for the two-slab shape, gathered key tiles
 * when the spec gathers, else plain (abi/kernel_schedule.c). */
s2_status s2_kernel_spec_pack_forward(s2_ctx *ctx, const s2_kspec *spec, const s2_schedule *s, s2_packed_schedule *out);
/* A backward's transposed schedule t (tile shape {block_m, min(block_size,
 * block_m)}) packed in kv groups of block_m / that many blocks (launch.h,
 * backward ABI); *lists: the groups per kv head. */
s2_status s2_kernel_spec_pack_transposed(s2_ctx *ctx, const s2_kspec *spec, const s2_pattern *p, const s2_schedule *t,
                                         s2_packed_schedule *out, int32_t *lists);

/* One dS tile of the backward's dS workspace: 64 x 64 16-bit values. */
enum { S2_BWD_DS_TILE_BYTES = 64 * 64 * 2 };

/* NAME_dqds2 takes forward lists of at most this many entries, in increasing
 * key order (the runtime checks its schedules against it). */
enum { S2_BWD_DQDS2_MAX_LIST = 256 };
#endif
