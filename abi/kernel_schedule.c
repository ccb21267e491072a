/* A kernel's tile schedule packed in the format its manifest record names:
 * plain, gathered key tiles (KV_GATHER), owned pairs (the two-slab tile),
 * or the backward's kv groups; the runtime and AOT callers (aot.h) build
 * theirs here, so the packings' choice sits in one place. */
#include "kernel_abi.h"
#include "pack_internal.h"
#include "util.h"

#include <string.h>

s2_status s2_kernel_spec_pack_forward(s2_ctx *ctx, const s2_kspec *spec, const s2_schedule *s, s2_packed_schedule *out)
{
    if (s2_kernel_spec_owned_pairs(spec))
        return s2_schedule_pack_gathered_owned(ctx, s, out);
    return spec->kv_gather > 1 ? s2_schedule_pack_gathered(ctx, s, spec->kv_gather, out) : s2_schedule_pack(ctx, s, out);
}

s2_status s2_kernel_spec_pack_transposed(s2_ctx *ctx, const s2_kspec *spec, const s2_pattern *p, const s2_schedule *t,
                                         s2_packed_schedule *out, int32_t *lists)
{
    int bm = spec->block_m, bs = p->block_size < bm ? p->block_size : bm;
    return s2_schedule_pack_gathered_kv(ctx, t, p->kv_heads, bm / bs, out, lists);
}

s2_status s2_manifest_schedule_pack(s2_ctx *ctx, const s2_manifest_kernel *k, const char *symbol, const s2_layout *lay,
                                    bool transposed, s2_packed_schedule *out, int32_t *kv_tiles)
{
    if (!k || !symbol || !lay || !out || (transposed && !kv_tiles))
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_manifest_schedule_pack: null argument");
    memset(out, 0, sizeof *out);
    const s2_kernel_record *r = NULL;
    for (int i = 0; i < k->num_fns && !r; i++)
        if (strcmp(k->fns[i].symbol, symbol) == 0)
            r = &k->fns[i];
    if (!r)
        return s2_fail(ctx, S2_ERR_NOT_FOUND, "schedule: entry %s has no kernel %s", k->name, symbol);
    const s2_pattern *p = s2_layout_pattern(lay);
    if (!p || !p->name || strcmp(p->name, k->pattern) != 0)
        return s2_fail(ctx, S2_ERR_INVALID, "schedule: the layout is not of pattern '%s' (entry %s)", k->pattern,
                       k->name);
    bool tiles = r->abi == S2_ABI_FWD || r->abi == S2_ABI_FWD_TMA || r->abi == S2_ABI_FWD_TMA_PERSISTENT ||
                 r->abi == S2_ABI_FWD_TMA_FP8 || r->abi == S2_ABI_BWD || r->abi == S2_ABI_BWD_TMA;
    if (!tiles || (transposed && s2_role_kind(r->role) != S2_KERNEL_BWD))
        return s2_fail(ctx, S2_ERR_INVALID, "schedule: kernel %s (role %s) reads no %s schedule", symbol,
                       s2_role_name(r->role), transposed ? "transposed" : "tile");
    const s2_kspec *spec = &r->spec;
    int gather = spec->kv_gather > 1 ? spec->kv_gather : 1;
    int bs = p->block_size < spec->block_m ? p->block_size : spec->block_m;
    s2_tile_spec ts = transposed ? (s2_tile_spec){spec->block_m, bs} : (s2_tile_spec){spec->block_m, spec->block_n / gather};
    s2_schedule *s = NULL;
    s2_status st = s2_schedule_build(ctx, lay, ts, transposed, &s);
    if (st == S2_OK)
        st = transposed ? s2_kernel_spec_pack_transposed(ctx, spec, p, s, out, kv_tiles)
                        : s2_kernel_spec_pack_forward(ctx, spec, s, out);
    s2_schedule_free(s);
    return st;
}
