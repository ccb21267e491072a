/* Internal to s2c (not installed): facts about the generated kernels that
 * the templates, the runtime and the AOT emitter share, in LLVM-free code.
 * The templates build what these describe; nothing else re-derives them. */
#ifndef S2C_KERNEL_ABI_H
#define S2C_KERNEL_ABI_H

#include "arch.h"
#include "s2c/layout.h"
#include "s2c/pattern.h"
#include "s2c/spec.h"

#include <stdbool.h>

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
    S2_GRID_COUNT_
} s2_grid_rule;

const char *s2_role_name(s2_kernel_role r);      /* "fwd", "fwd_wide", "bwd_pre", ...; NULL if invalid */
bool s2_role_parse(const char *name, s2_kernel_role *out);
const char *s2_grid_name(s2_grid_rule g);        /* "q_tiles", "persistent", ...; NULL if invalid */
bool s2_grid_parse(const char *name, s2_grid_rule *out);
/* The suffix a role's symbol adds to the entry's name ("", "_w", "_pre", ...). */
const char *s2_role_suffix(s2_kernel_role r);

/* Whether a resolved sm_90a forward spec takes owned pairs
 * (s2_schedule_pack_gathered_owned) instead of s2_schedule_pack_gathered's:
 * two 64-row warpgroups over two gathered 64-token blocks. */
static inline bool s2_kernel_spec_owned_pairs(const s2_kernel_spec *spec)
{
    /* (kv_gather above 1 is resolved on the sm_90a forward and backward only) */
    return spec->kind == S2_KERNEL_FWD && spec->block_m == 128 &&
           spec->kv_gather == 2 && spec->block_n == 128;
}

/* A forward schedule s (tile shape {block_m, block_n / kv_gather}) packed
 * for spec's kernel: owned pairs for the two-slab shape, gathered key tiles
 * when the spec gathers, else plain. */
static inline s2_status s2_kernel_spec_pack_forward(s2_ctx *ctx, const s2_kernel_spec *spec, const s2_schedule *s,
                                                    s2_packed_schedule *out)
{
    if (s2_kernel_spec_owned_pairs(spec))
        return s2_schedule_pack_gathered_owned(ctx, s, out);
    return spec->kv_gather > 1 ? s2_schedule_pack_gathered(ctx, s, spec->kv_gather, out) : s2_schedule_pack(ctx, s, out);
}

/* One dS tile of the backward's dS workspace: 64 x 64 16-bit values. */
enum { S2_BWD_DS_TILE_BYTES = 64 * 64 * 2 };

/* Whether the backward module of a resolved spec holds NAME_dqds (dQ from
 * the dS tiles the dK/dV kernel writes, backward ABI 48..50): the wgmma
 * bodies, no gathered key tiles, block_m = block_n = 64, block_size >= 64. */
bool s2_bwd_ds_capable(const s2_pattern *p, const s2_kernel_spec *spec);
/* NAME_dqds's ring (stages of a K tile and a dS tile) and the dynamic shared
 * memory it is launched with (less than the module's smem_bytes, so that
 * more CTAs share an SM). */
int s2_bwd_dqds_stages(void);
int s2_bwd_dqds_smem_bytes(const s2_kernel_spec *spec);
/* NAME_dqds2, its paired form: one CTA of 256 threads per two adjacent
 * query tiles of a head (query tiles q_tiles-1-2x and q_tiles-2-2x for
 * blockIdx.x = x; grid.x = ceil(q_tiles / 2)), over the union of their
 * lists, each K tile read once for both.  Only for forward lists of at most
 * S2_BWD_DQDS2_MAX_LIST entries in increasing key order; its dynamic shared
 * memory. */
enum { S2_BWD_DQDS2_MAX_LIST = 256, S2_BWD_DQDS2_THREADS = 256 };
/* the union's shared memory: two key arrays, the common-entry prefix
 * counts, 8 warp totals, then key tile and the two entries per union slot */
enum { S2_BWD_DQDS2_UNION_BYTES = 4 * (2 * 256 + 264 + 8 + 3 * 512) };
int s2_bwd_dqds2_smem_bytes(const s2_kernel_spec *spec);
#endif
