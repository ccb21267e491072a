/* Launch arguments in a kernel ABI's order: a launch names its values by the
 * enum of its family's widest ABI (abi/params.h), and each kernel's map,
 * built once from its ABI's parameter list, picks them in order. */
#include "attn_internal.h"

#include <string.h>

/* The widest ABI of each family: every other ABI's parameters are among its. */
static s2_abi_id family_of(s2_abi_id abi)
{
    switch (abi) {
    case S2_ABI_FWD: case S2_ABI_FWD_TMA: case S2_ABI_FWD_TMA_PERSISTENT: return S2_ABI_FWD_TMA_PERSISTENT;
    case S2_ABI_BWD: case S2_ABI_BWD_TMA: return S2_ABI_BWD_TMA;
    default: return abi;
    }
}

s2_status s2_rt_argmap_build(s2_ctx *ctx, s2_abi_id abi, s2_rt_argmap *out)
{
    s2_abi_id fam = family_of(abi);
    const s2_abi_desc *d = s2_abi_get(abi), *w = s2_abi_get(fam);
    if (!d || !w || d->num_params > S2_RT_MAX_PARAMS)
        return s2_fail(ctx, S2_ERR_PARSE, "manifest: kernel ABI %d unknown to this runtime", (int)abi);
    out->n = d->num_params;
    for (int i = 0; i < d->num_params; i++) {
        int j = s2_abi_param_index(fam, d->params[i].name);
        if (j < 0 || w->params[j].type != d->params[i].type)
            return s2_fail(ctx, S2_ERR_PARSE, "kernel ABI %s: parameter %s is not its family's", d->name,
                           d->params[i].name);
        out->slot[i] = (uint8_t)j;
    }
    return S2_OK;
}

void s2_rt_args(const s2_rt_argmap *map, void *const *vals, void **args)
{
    for (int i = 0; i < map->n; i++)
        args[i] = vals[map->slot[i]];
}

static uint32_t cdiv_u32(int64_t a, int64_t b) { return (uint32_t)((a + b - 1) / b); }

s2_status s2_rt_grid(s2_ctx *ctx, const s2_kernel_record *r, const s2_rt_grid_in *in, uint32_t grid[3])
{
    int64_t rows_per_cta = in->head_dim >= 8 ? r->threads / (in->head_dim / 8) : 0;
    switch (r->grid) {
    case S2_GRID_Q_TILES: grid[0] = (uint32_t)in->q_tiles, grid[1] = (uint32_t)in->heads; break;
    case S2_GRID_Q_TILE_PAIRS: grid[0] = cdiv_u32(in->q_tiles, 2), grid[1] = (uint32_t)in->heads; break;
    case S2_GRID_KV_TILES: grid[0] = (uint32_t)in->kv_tiles, grid[1] = (uint32_t)in->kv_heads; break;
    case S2_GRID_SPLITS: grid[0] = (uint32_t)in->splits, grid[1] = (uint32_t)in->kv_heads; break;
    case S2_GRID_PRE_ROWS:
    case S2_GRID_ROWS:
        if (rows_per_cta < 1)
            return s2_fail(ctx, S2_ERR_INTERNAL, "kernel %s: no rows per CTA", r->symbol);
        grid[0] = cdiv_u32(r->grid == S2_GRID_ROWS ? in->rows : in->q_len, rows_per_cta);
        grid[1] = r->grid == S2_GRID_ROWS ? 1 : (uint32_t)in->heads;
        break;
    case S2_GRID_SEQS:   /* one thread per sequence: rows = n */
        grid[0] = cdiv_u32(in->rows, r->threads), grid[1] = 1, grid[2] = 1;
        return S2_OK;
    default:
        return s2_fail(ctx, S2_ERR_INTERNAL, "kernel %s: grid %s is the caller's", r->symbol, s2_grid_name(r->grid));
    }
    grid[2] = r->grid == S2_GRID_ROWS ? 1 : (uint32_t)in->batch;
    return S2_OK;
}
