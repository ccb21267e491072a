/* Launch arguments in a kernel ABI's order: a launch fills its family's
 * values (one field per parameter of the widest ABI, abi/params.h), and the
 * packer hands each kernel the fields of its own ABI, by a map built once
 * from its parameter list; and each launch's shape, from its launch facts. */
#include "attn_internal.h"

#include <stddef.h>
#include <string.h>

/* Each family's values, by parameter name: the fields of its widest ABI. */
typedef struct field {
    const char *name;
    s2_param_type type;
    size_t off;
} field;
#define FIELDS(vals, list)                                                         \
    static const field vals##_f[] = {list(FIELD_OF_##vals)};
#define FIELD_OF_s2_rt_fwd_vals(e, n, t) {n, S2_PT_##t, offsetof(s2_rt_fwd_vals, e)},
#define FIELD_OF_s2_rt_bwd_vals(e, n, t) {n, S2_PT_##t, offsetof(s2_rt_bwd_vals, e)},
#define FIELD_OF_s2_rt_decode_vals(e, n, t) {n, S2_PT_##t, offsetof(s2_rt_decode_vals, e)},
#define FIELD_OF_s2_rt_combine_vals(e, n, t) {n, S2_PT_##t, offsetof(s2_rt_combine_vals, e)},
#define FIELD_OF_s2_rt_seqs_vals(e, n, t) {n, S2_PT_##t, offsetof(s2_rt_seqs_vals, e)},
#define FIELD_OF_s2_rt_rows_vals(e, n, t) {n, S2_PT_##t, offsetof(s2_rt_rows_vals, e)},
FIELDS(s2_rt_fwd_vals, S2_ABI_FWD_FAMILY)
FIELDS(s2_rt_bwd_vals, S2_ABI_BWD_TMA_PARAMS)
FIELDS(s2_rt_decode_vals, S2_ABI_DECODE_PARAMS)
FIELDS(s2_rt_combine_vals, S2_ABI_COMBINE_PARAMS)
FIELDS(s2_rt_seqs_vals, S2_ABI_SEQS_PARAMS)
FIELDS(s2_rt_rows_vals, S2_ABI_ROWS_PARAMS)

_Static_assert(sizeof(s2_rt_bwd_vals) < 65536 && sizeof(s2_rt_fwd_vals) < 65536 && sizeof(s2_rt_decode_vals) < 65536 &&
                   sizeof(s2_rt_combine_vals) < 65536 && sizeof(s2_rt_seqs_vals) < 65536 &&
                   sizeof(s2_rt_rows_vals) < 65536,
               "parameter offsets are 16-bit");

#define FAMILY(vals) {vals##_f, (int)(sizeof vals##_f / sizeof vals##_f[0])}
static const struct {
    const field *f;
    int n;
} families[S2_ABI_COUNT_] = {
    [S2_ABI_FWD] = FAMILY(s2_rt_fwd_vals), [S2_ABI_FWD_TMA] = FAMILY(s2_rt_fwd_vals),
    [S2_ABI_FWD_TMA_PERSISTENT] = FAMILY(s2_rt_fwd_vals), [S2_ABI_BWD] = FAMILY(s2_rt_bwd_vals),
    [S2_ABI_BWD_TMA] = FAMILY(s2_rt_bwd_vals), [S2_ABI_DECODE] = FAMILY(s2_rt_decode_vals),
    [S2_ABI_COMBINE] = FAMILY(s2_rt_combine_vals), [S2_ABI_SEQS] = FAMILY(s2_rt_seqs_vals),
    [S2_ABI_FWD_TMA_FP8] = FAMILY(s2_rt_fwd_vals),
    [S2_ABI_ROWS] = FAMILY(s2_rt_rows_vals),
};

s2_status s2_rt_argmap_build(s2_ctx *ctx, s2_abi_id abi, s2_rt_argmap *out)
{
    const s2_abi_desc *d = s2_abi_get(abi);
    if (!d || !families[abi].f || d->num_params > S2_RT_MAX_PARAMS)
        return s2_fail(ctx, S2_ERR_PARSE, "manifest: kernel ABI %d unknown to this runtime", (int)abi);
    out->n = d->num_params;
    for (int i = 0; i < d->num_params; i++) {
        int j = 0;
        while (j < families[abi].n && strcmp(families[abi].f[j].name, d->params[i].name) != 0)
            j++;
        if (j == families[abi].n || families[abi].f[j].type != d->params[i].type)
            return s2_fail(ctx, S2_ERR_PARSE, "kernel ABI %s: parameter %s is not its family's", d->name,
                           d->params[i].name);
        out->off[i] = (uint16_t)families[abi].f[j].off;
    }
    return S2_OK;
}

void s2_rt_pack(const s2_rt_argmap *map, void *vals, void **args)
{
    for (int i = 0; i < map->n; i++)
        args[i] = (char *)vals + map->off[i];
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

s2_status s2_rt_launch_role(s2_ctx *ctx, const s2_attn_kernel *k, s2_kernel_role role, void *vals,
                            const s2_launch_dims *in, void *stream)
{
    void *args[S2_RT_MAX_PARAMS];
    s2_rt_pack(&k->argmap[role], vals, args);
    s2_launch_cfg cfg;
    s2_status st = s2_rt_launch_cfg(ctx, k, role, in, stream, &cfg);
    return st == S2_OK ? s2_cufunction_launch(ctx, k->fns[role], &cfg, args) : st;
}
