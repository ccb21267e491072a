/* The backward module's dS path: which modules hold it, and its kernels'
 * shared memory (the manifest records them; kernels_bwd in template.c). */
#include "template.h"

bool s2_bwd_ds_capable(const s2_pattern *p, const s2_kspec *spec)
{
    /* one 64 x 64 tile grid in both schedules: the transposed entry (key
     * tile j, query tile i) is the forward entry (i, j) */
    return p && spec && spec->kind == S2_KERNEL_BWD && spec->bwd_wgmma > 0 && spec->kv_gather <= 1 &&
           spec->block_m == 64 && spec->block_n == 64 && p->block_size >= 64 &&
           (spec->head_dim == 64 || spec->head_dim == 128);
}

/* 3 stages: three CTAs per SM at d128, faster than 2 or 4 (run 17) */
int s2_bwd_dqds_stages(void) { return 3; }

int s2_bwd_dqds_smem_bytes(const s2_kspec *spec)
{
    /* per stage: the K tile, then the dS tile */
    return s2_bwd_dqds_stages() * (spec->block_n * spec->head_dim * 2 + S2_BWD_DS_TILE_BYTES);
}

/* the ring's stages (a K tile, then the two query tiles' dS tiles), then
 * the union of the two lists (templates/bwd.c, build_dqds2) */
int s2_bwd_dqds2_smem_bytes(const s2_kspec *spec)
{
    int stage = spec->block_n * spec->head_dim * 2 + 2 * S2_BWD_DS_TILE_BYTES;
    return s2_bwd_dqds_stages() * stage + S2_BWD_DQDS2_UNION_BYTES;
}

