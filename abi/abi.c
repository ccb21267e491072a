/* The kernel ABIs' parameter lists (params.h), roles and grid rules, by id
 * and by manifest token. */
#include "kernel_abi.h"
#include "params.h"
#include "util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PARAM(e, n, t) {n, S2_PT_##t},
static const s2_abi_param fwd[] = {S2_ABI_FWD_PARAMS(PARAM)};
static const s2_abi_param fwd_tma[] = {S2_ABI_FWD_TMA_PARAMS(PARAM)};
static const s2_abi_param fwd_tma_p[] = {S2_ABI_FWD_TMA_PERSISTENT_PARAMS(PARAM)};
static const s2_abi_param bwd[] = {S2_ABI_BWD_PARAMS(PARAM)};
static const s2_abi_param bwd_tma[] = {S2_ABI_BWD_TMA_PARAMS(PARAM)};
static const s2_abi_param decode[] = {S2_ABI_DECODE_PARAMS(PARAM)};
static const s2_abi_param combine[] = {S2_ABI_COMBINE_PARAMS(PARAM)};
static const s2_abi_param seqs[] = {S2_ABI_SEQS_PARAMS(PARAM)};
static const s2_abi_param fwd_tma_fp8[] = {S2_ABI_FWD_TMA_FP8_PARAMS(PARAM)};
static const s2_abi_param rows[] = {S2_ABI_ROWS_PARAMS(PARAM)};
#undef PARAM

#define DESC(nm, list) {nm, list, (int)(sizeof list / sizeof list[0])}
static const s2_abi_desc abis[S2_ABI_COUNT_] = {
    [S2_ABI_FWD] = DESC("fwd", fwd),
    [S2_ABI_FWD_TMA] = DESC("fwd_tma", fwd_tma),
    [S2_ABI_FWD_TMA_PERSISTENT] = DESC("fwd_tma_persistent", fwd_tma_p),
    [S2_ABI_BWD] = DESC("bwd", bwd),
    [S2_ABI_BWD_TMA] = DESC("bwd_tma", bwd_tma),
    [S2_ABI_DECODE] = DESC("decode", decode),
    [S2_ABI_COMBINE] = DESC("combine", combine),
    [S2_ABI_SEQS] = DESC("seqs", seqs),
    [S2_ABI_FWD_TMA_FP8] = DESC("fwd_tma_fp8", fwd_tma_fp8),
    [S2_ABI_ROWS] = DESC("rows", rows),
};
#undef DESC

const s2_abi_desc *s2_abi_get(s2_abi_id id)
{
    return (unsigned)id < (unsigned)S2_ABI_COUNT_ ? &abis[id] : NULL;
}

bool s2_abi_parse(const char *name, s2_abi_id *out)
{
    for (int i = 0; name && i < S2_ABI_COUNT_; i++)
        if (strcmp(name, abis[i].name) == 0) {
            *out = (s2_abi_id)i;
            return true;
        }
    return false;
}

int s2_abi_param_index(s2_abi_id id, const char *name)
{
    const s2_abi_desc *d = s2_abi_get(id);
    for (int i = 0; d && name && i < d->num_params; i++)
        if (strcmp(d->params[i].name, name) == 0)
            return i;
    return -1;
}

static const struct {
    const char *name, *suffix;
} roles[S2_ROLE_COUNT_] = {
    [S2_ROLE_FWD] = {"fwd", ""},
    [S2_ROLE_FWD_WIDE] = {"fwd_wide", "_w"},
    [S2_ROLE_BWD_PRE] = {"bwd_pre", "_pre"},
    [S2_ROLE_BWD_DKDV] = {"bwd_dkdv", "_dkdv"},
    [S2_ROLE_BWD_DQ] = {"bwd_dq", "_dq"},
    [S2_ROLE_BWD_DQDS] = {"bwd_dqds", "_dqds"},
    [S2_ROLE_BWD_DQDS2] = {"bwd_dqds2", "_dqds2"},
    [S2_ROLE_DECODE] = {"decode", ""},
    [S2_ROLE_COMBINE] = {"combine", "_combine"},
    [S2_ROLE_FWD_SEQS] = {"fwd_seqs", "_seqs"},
    [S2_ROLE_ROWS] = {"rows", "_rows"},
};

const char *s2_role_name(s2_kernel_role r) { return (unsigned)r < (unsigned)S2_ROLE_COUNT_ ? roles[r].name : NULL; }
const char *s2_role_suffix(s2_kernel_role r) { return (unsigned)r < (unsigned)S2_ROLE_COUNT_ ? roles[r].suffix : NULL; }

bool s2_role_parse(const char *name, s2_kernel_role *out)
{
    for (int i = 0; name && i < S2_ROLE_COUNT_; i++)
        if (strcmp(name, roles[i].name) == 0) {
            *out = (s2_kernel_role)i;
            return true;
        }
    return false;
}

static const char *const grids[S2_GRID_COUNT_] = {
    [S2_GRID_Q_TILES] = "q_tiles",     [S2_GRID_PERSISTENT] = "persistent", [S2_GRID_PRE_ROWS] = "pre_rows",
    [S2_GRID_KV_TILES] = "kv_tiles",   [S2_GRID_Q_TILE_PAIRS] = "q_tile_pairs", [S2_GRID_SPLITS] = "splits",
    [S2_GRID_ROWS] = "rows",           [S2_GRID_SEQS] = "seqs",         [S2_GRID_RUNS] = "runs",
};

const char *s2_grid_name(s2_grid_rule g) { return (unsigned)g < (unsigned)S2_GRID_COUNT_ ? grids[g] : NULL; }

bool s2_grid_parse(const char *name, s2_grid_rule *out)
{
    for (int i = 0; name && i < S2_GRID_COUNT_; i++)
        if (strcmp(name, grids[i]) == 0) {
            *out = (s2_grid_rule)i;
            return true;
        }
    return false;
}

s2_kernel_kind s2_role_kind(s2_kernel_role r)
{
    if (r == S2_ROLE_FWD_SEQS || r == S2_ROLE_ROWS)
        return S2_KERNEL_FWD;
    return r <= S2_ROLE_FWD_WIDE ? S2_KERNEL_FWD : r <= S2_ROLE_BWD_DQDS2 ? S2_KERNEL_BWD : S2_KERNEL_DECODE;
}

bool s2_role_fits_kind(s2_kernel_role r, s2_kernel_kind kind)
{
    return s2_role_kind(r) == kind || (r == S2_ROLE_COMBINE && kind == S2_KERNEL_FWD) ||
           (r == S2_ROLE_ROWS && kind == S2_KERNEL_BWD);
}

s2_kernel_role s2_main_role(s2_kernel_kind kind)
{
    return kind == S2_KERNEL_BWD ? S2_ROLE_BWD_DKDV : kind == S2_KERNEL_DECODE ? S2_ROLE_DECODE : S2_ROLE_FWD;
}

bool s2_role_takes_abi(s2_kernel_role r, s2_abi_id abi)
{
    switch (r) {
    case S2_ROLE_FWD:
        return abi == S2_ABI_FWD || abi == S2_ABI_FWD_TMA || abi == S2_ABI_FWD_TMA_PERSISTENT || abi == S2_ABI_FWD_TMA_FP8;
    case S2_ROLE_FWD_WIDE: return abi == S2_ABI_FWD_TMA || abi == S2_ABI_FWD_TMA_PERSISTENT;
    case S2_ROLE_BWD_PRE: case S2_ROLE_BWD_DKDV: case S2_ROLE_BWD_DQ: case S2_ROLE_BWD_DQDS: case S2_ROLE_BWD_DQDS2:
        return abi == S2_ABI_BWD || abi == S2_ABI_BWD_TMA;
    case S2_ROLE_DECODE: return abi == S2_ABI_DECODE;
    case S2_ROLE_COMBINE: return abi == S2_ABI_COMBINE;
    case S2_ROLE_FWD_SEQS: return abi == S2_ABI_SEQS;
    case S2_ROLE_ROWS: return abi == S2_ABI_ROWS;
    default: return false;
    }
}

s2_grid_rule s2_role_grid(s2_kernel_role r, s2_abi_id abi)
{
    switch (r) {
    case S2_ROLE_FWD: case S2_ROLE_FWD_WIDE:
        return abi == S2_ABI_FWD_TMA_PERSISTENT ? S2_GRID_PERSISTENT : S2_GRID_Q_TILES;
    case S2_ROLE_BWD_PRE: return S2_GRID_PRE_ROWS;
    case S2_ROLE_BWD_DKDV: return S2_GRID_KV_TILES;
    case S2_ROLE_BWD_DQDS2: return S2_GRID_Q_TILE_PAIRS;
    case S2_ROLE_DECODE: return S2_GRID_SPLITS;
    case S2_ROLE_COMBINE: return S2_GRID_ROWS;
    case S2_ROLE_FWD_SEQS: return S2_GRID_SEQS;
    case S2_ROLE_ROWS: return S2_GRID_RUNS;
    default: return S2_GRID_Q_TILES;   /* NAME_dq, NAME_dqds */
    }
}

s2_status s2_kernel_options_set(s2_ctx *ctx, s2_kernel_options *o, const char *nv)
{
    static const struct { const char *name; int lo, hi; } known[] = {
        {"persistent", -1, 1}, {"bwd_wgmma", -1, 1}, {"kv_gather", 0, 4}, {"bwd_tma", -1, 1}};
    const char *eq = nv ? strchr(nv, '=') : NULL;
    if (!o || !eq)
        return s2_fail(ctx, S2_ERR_INVALID, "kernel option '%s': NAME=VALUE", nv ? nv : "(null)");
    char *end;
    errno = 0;
    long v = strtol(eq + 1, &end, 10);
    for (int i = 0; i < 4; i++) {
        if (strlen(known[i].name) != (size_t)(eq - nv) || strncmp(nv, known[i].name, (size_t)(eq - nv)) != 0)
            continue;
        if (end == eq + 1 || *end || errno || v < known[i].lo || v > known[i].hi)
            return s2_fail(ctx, S2_ERR_INVALID, "kernel option %s: %s is not in %d..%d", known[i].name, eq + 1,
                           known[i].lo, known[i].hi);
        int *field[4] = {&o->persistent, &o->bwd_wgmma, &o->kv_gather, &o->bwd_tma};
        *field[i] = (int)v;
        return S2_OK;
    }
    return s2_fail(ctx, S2_ERR_INVALID, "unknown kernel option '%.*s' (persistent, bwd_wgmma, kv_gather, bwd_tma)",
                   (int)(eq - nv), nv);
}
