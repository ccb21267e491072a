/* The AOT launchers' ABI descriptors (include/s2c/aot.h): each kernel's
 * parameters from its list in abi/params.h, the launch arguments that are not
 * passed to the kernel, the grid's sources and who builds the by-value
 * parameters (tensor maps, the combine's table).  driver/emit_c.c emits from them. */
#include "launch_facts.h"
#include "params.h"
#include "s2c/aot.h"

#include <stddef.h>

/* a grid rule's sources (abi/launch_facts.h), by name */
#define AOT_DIM(f, d) #f,
#define AOT_ONE() NULL,
#define AOT_GRID(rule) {S2_GRID_DIMS_##rule(AOT_DIM, AOT_ONE)}

/* an ABI's kernel parameters and its launch-only arguments, with their counts */
#define AOT_COUNT(a) (int)(sizeof a / sizeof a[0])
#define AOT_LISTS(ps, la) .params = ps, .num_params = AOT_COUNT(ps), .launch_args = la, .num_launch_args = AOT_COUNT(la)

/* ---- the forward attention kernel's ABI ---- */

#define AOT_PARAM(e, n, t) {n, S2_AOT_##t},

static const s2_aot_param attn_fwd_params[] = {S2_ABI_FWD_PARAMS(AOT_PARAM)};

static const s2_aot_param attn_fwd_launch[] = {
    {"heads", S2_AOT_I32},
    {"batch", S2_AOT_I32},
};

static const s2_aot_abi attn_fwd_abi = {
    .name = "attn_fwd",
    AOT_LISTS(attn_fwd_params, attn_fwd_launch),
    .grid = AOT_GRID(Q_TILES),
};

const s2_aot_abi *s2_aot_abi_attn_fwd(void) { return &attn_fwd_abi; }

/* ---- the sm_90a tensor-map forward (launch.h, ABI fwd_tma) ---- */

static const s2_aot_param attn_fwd_tma_params[] = {S2_ABI_FWD_TMA_PARAMS(AOT_PARAM)};

static const s2_aot_param attn_fwd_tma_launch[] = {
    {"heads", S2_AOT_I32},
    {"batch", S2_AOT_I32},
    {"kv_heads", S2_AOT_I32},
    {"kv_rows", S2_AOT_I64},
};

static const s2_aot_abi attn_fwd_tma_abi = {
    .name = "attn_fwd_tma",
    AOT_LISTS(attn_fwd_tma_params, attn_fwd_tma_launch),
    .grid = AOT_GRID(Q_TILES),
    .maps = S2_AOT_MAPS_ATTN_FWD,
};

const s2_aot_abi *s2_aot_abi_attn_fwd_tma(void) { return &attn_fwd_tma_abi; }

/* ---- the persistent sm_90a forward (launch.h, ABI fwd_tma_persistent) ---- */

static const s2_aot_param attn_fwd_tma_p_params[] = {S2_ABI_FWD_TMA_PERSISTENT_PARAMS(AOT_PARAM)};

static const s2_aot_param attn_fwd_tma_p_launch[] = {
    {"heads", S2_AOT_I32},
    {"kv_heads", S2_AOT_I32},
    {"kv_rows", S2_AOT_I64},
};

static const s2_aot_abi attn_fwd_tma_p_abi = {
    .name = "attn_fwd_tma_persistent",
    AOT_LISTS(attn_fwd_tma_p_params, attn_fwd_tma_p_launch),
    .maps = S2_AOT_MAPS_ATTN_FWD,
    .grid_persistent = true,
};

const s2_aot_abi *s2_aot_abi_attn_fwd_tma_persistent(void) { return &attn_fwd_tma_p_abi; }

/* ---- the backward module (launch.h, S2_KERNEL_BWD) ---- */

static const s2_aot_param attn_bwd_params[] = {S2_ABI_BWD_PARAMS(AOT_PARAM)};
static const s2_aot_param attn_bwd_tma_params[] = {S2_ABI_BWD_TMA_PARAMS(AOT_PARAM)};

static const s2_aot_param attn_bwd_launch[] = {
    {"heads", S2_AOT_I32},
    {"kv_heads", S2_AOT_I32},
    {"batch", S2_AOT_I32},
};

#define BWD_ABI(nm, rule, ps, mp) {.name = nm, AOT_LISTS(ps, attn_bwd_launch), .grid = AOT_GRID(rule), .maps = mp}

static const s2_aot_abi attn_bwd_abis[8] = {
    BWD_ABI("attn_bwd_pre", PRE_ROWS, attn_bwd_params, S2_AOT_MAPS_NONE),
    BWD_ABI("attn_bwd_dkdv", KV_TILES, attn_bwd_params, S2_AOT_MAPS_NONE),
    BWD_ABI("attn_bwd_dq", Q_TILES, attn_bwd_params, S2_AOT_MAPS_NONE),
    BWD_ABI("attn_bwd_dqds", Q_TILES, attn_bwd_params, S2_AOT_MAPS_NONE),
    BWD_ABI("attn_bwd_pre_tma", PRE_ROWS, attn_bwd_tma_params, S2_AOT_MAPS_ATTN_BWD),
    BWD_ABI("attn_bwd_dkdv_tma", KV_TILES, attn_bwd_tma_params, S2_AOT_MAPS_ATTN_BWD),
    BWD_ABI("attn_bwd_dq_tma", Q_TILES, attn_bwd_tma_params, S2_AOT_MAPS_ATTN_BWD),
    BWD_ABI("attn_bwd_dqds_tma", Q_TILES, attn_bwd_tma_params, S2_AOT_MAPS_ATTN_BWD),
};

const s2_aot_abi *s2_aot_abi_attn_bwd_pre(void) { return &attn_bwd_abis[0]; }
const s2_aot_abi *s2_aot_abi_attn_bwd_dkdv(void) { return &attn_bwd_abis[1]; }
const s2_aot_abi *s2_aot_abi_attn_bwd_dq(void) { return &attn_bwd_abis[2]; }
const s2_aot_abi *s2_aot_abi_attn_bwd_dqds(void) { return &attn_bwd_abis[3]; }
const s2_aot_abi *s2_aot_abi_attn_bwd_pre_tma(void) { return &attn_bwd_abis[4]; }
const s2_aot_abi *s2_aot_abi_attn_bwd_dkdv_tma(void) { return &attn_bwd_abis[5]; }
const s2_aot_abi *s2_aot_abi_attn_bwd_dq_tma(void) { return &attn_bwd_abis[6]; }
const s2_aot_abi *s2_aot_abi_attn_bwd_dqds_tma(void) { return &attn_bwd_abis[7]; }

/* ---- the paged decode kernel (decode.h, S2_KERNEL_DECODE) ---- */

static const s2_aot_param attn_decode_params[] = {S2_ABI_DECODE_PARAMS(AOT_PARAM)};

static const s2_aot_param attn_decode_launch[] = {
    {"kv_heads", S2_AOT_I32},
    {"batch", S2_AOT_I32},
};

static const s2_aot_abi attn_decode_abi = {
    .name = "attn_decode",
    AOT_LISTS(attn_decode_params, attn_decode_launch),
    .grid = AOT_GRID(SPLITS),
};

const s2_aot_abi *s2_aot_abi_attn_decode(void) { return &attn_decode_abi; }

/* ---- the combine kernel of a decode module (decode.h) ---- */

static const s2_aot_param attn_combine_params[] = {S2_ABI_COMBINE_PARAMS(AOT_PARAM)};

/* the inputs' pointers, which the launcher packs into the by-value table */
static const s2_aot_param attn_combine_launch[] = {
    {"o_in", S2_AOT_PTR_LIST},
    {"lse_in", S2_AOT_PTR_LIST},
};

static const s2_aot_abi attn_combine_abi = {
    .name = "attn_combine",
    AOT_LISTS(attn_combine_params, attn_combine_launch),
    .grid = AOT_GRID(ROWS),
    .table = S2_AOT_TABLE_COMBINE,
};

const s2_aot_abi *s2_aot_abi_attn_combine(void) { return &attn_combine_abi; }

/* ---- NAME_seqs of a forward module (launch.h) ---- */

static const s2_aot_param attn_seqs_params[] = {S2_ABI_SEQS_PARAMS(AOT_PARAM)};

static const s2_aot_abi attn_seqs_abi = {
    .name = "attn_seqs",
    .params = attn_seqs_params,
    .num_params = AOT_COUNT(attn_seqs_params),
    .grid = AOT_GRID(SEQS),
};

const s2_aot_abi *s2_aot_abi_attn_seqs(void) { return &attn_seqs_abi; }
