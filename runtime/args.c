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

s2_status s2_rt_launch_cfg(s2_ctx *ctx, const s2_attn_kernel *k, s2_kernel_role role, const s2_launch_dims *in,
                           void *stream, s2_launch_cfg *cfg)
{
    s2_launch_facts f;
    s2_status st = s2_launch_facts_of(ctx, k->rec[role], in, &k->mod->dev->limits, &k->use[role], &f);
    if (st != S2_OK)
        return st;
    *cfg = (s2_launch_cfg){.grid = {f.grid[0], f.grid[1], f.grid[2]}, .block = {f.block[0], f.block[1], f.block[2]},
                           .smem_bytes = f.smem_bytes, .stream = stream};
    return S2_OK;
}
