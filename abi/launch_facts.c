/* A kernel's launch facts from its record, the launch's extents and the
 * device's limits: the one place grid rules and occupancy are computed. */
#include "launch_facts.h"
#include "util.h"

#include <stddef.h>

S2_CTAS_PER_SM_DEFINE(ctas_per_sm)

typedef struct grid_dim {
    int off;                     /* of the extent in s2_launch_dims; -1: 1 */
    s2_grid_div div;
} grid_dim;

#define DIM(f, d) {(int)offsetof(s2_launch_dims, f), S2_DIV_##d},
#define ONE_() {-1, S2_DIV_ONE},
static const grid_dim rules[S2_GRID_COUNT_][3] = {
    [S2_GRID_Q_TILES] = {S2_GRID_DIMS_Q_TILES(DIM, ONE_)},
    [S2_GRID_PRE_ROWS] = {S2_GRID_DIMS_PRE_ROWS(DIM, ONE_)},
    [S2_GRID_KV_TILES] = {S2_GRID_DIMS_KV_TILES(DIM, ONE_)},
    [S2_GRID_Q_TILE_PAIRS] = {S2_GRID_DIMS_Q_TILE_PAIRS(DIM, ONE_)},
    [S2_GRID_SPLITS] = {S2_GRID_DIMS_SPLITS(DIM, ONE_)},
    [S2_GRID_ROWS] = {S2_GRID_DIMS_ROWS(DIM, ONE_)},
    [S2_GRID_SEQS] = {S2_GRID_DIMS_SEQS(DIM, ONE_)},
    [S2_GRID_RUNS] = {S2_GRID_DIMS_RUNS(DIM, ONE_)},
};
#undef DIM
#undef ONE_

static int div_of(const s2_kernel_record *r, s2_grid_div d)
{
    int head_dim = r->spec.head_dim;
    switch (d) {
    case S2_DIV_TWO: return 2;
    case S2_DIV_ROWS_PER_CTA: return head_dim >= 8 ? r->threads / (head_dim / 8) : 0;
    case S2_DIV_THREADS: return r->threads;
    default: return 1;
    }
}

int s2_grid_x_div(const s2_kernel_record *r)
{
    if (!r || (unsigned)r->grid >= (unsigned)S2_GRID_COUNT_ || r->grid == S2_GRID_PERSISTENT)
        return 1;
    return div_of(r, rules[r->grid][0].div);
}

s2_status s2_launch_facts_of(s2_ctx *ctx, const s2_kernel_record *r, const s2_launch_dims *in,
                             const s2_device_limits *dev, const s2_kernel_use *use, s2_launch_facts *out)
{
    if (!r || !in || !out || !dev != !use)
        return s2_fail(ctx, S2_ERR_INVALID, "launch facts: missing input");
    if ((unsigned)r->grid >= (unsigned)S2_GRID_COUNT_ || r->threads < 1 || r->smem_bytes < 0)
        return s2_fail(ctx, S2_ERR_INVALID, "launch facts of %s: no grid rule or launch shape", r->symbol);
    *out = (s2_launch_facts){.block = {(uint32_t)r->threads, 1, 1}, .smem_bytes = (uint32_t)r->smem_bytes};
    if (dev)
        out->ctas_per_sm = ctas_per_sm(dev->regs_per_sm, dev->smem_per_sm, dev->threads_per_sm, dev->blocks_per_sm,
                                       dev->smem_reserved_per_block, r->threads, r->smem_bytes, use->regs,
                                       use->static_smem);
    int64_t g[3];
    if (r->grid == S2_GRID_PERSISTENT) {
        if (!dev)
            return s2_fail(ctx, S2_ERR_INVALID, "launch facts of %s: the persistent grid needs the device", r->symbol);
        if (in->n_work < 0 || in->batch < 0)
            return s2_fail(ctx, S2_ERR_INVALID, "launch facts of %s: negative work", r->symbol);
        int64_t items = in->n_work * in->batch, slots = (int64_t)dev->sm_count * out->ctas_per_sm;
        if (items > INT32_MAX)
            return s2_fail(ctx, S2_ERR_UNSUPPORTED, "persistent forward: %lld work items exceed 32 bits",
                           (long long)items);
        g[0] = slots < items ? slots : items > 0 ? items : 1, g[1] = g[2] = 1;
    } else {
        for (int d = 0; d < 3; d++) {
            const grid_dim *gd = &rules[r->grid][d];
            int64_t e = gd->off < 0 ? 1 : *(const int64_t *)(const void *)((const char *)in + gd->off);
            int div = div_of(r, gd->div);
            if (div < 1)
                return s2_fail(ctx, S2_ERR_INVALID, "launch facts of %s: no rows per CTA (head_dim %d)", r->symbol,
                               r->spec.head_dim);
            if (e < 0)
                return s2_fail(ctx, S2_ERR_INVALID, "launch facts of %s: negative grid extent %lld", r->symbol,
                               (long long)e);
            g[d] = (e + div - 1) / div;
        }
    }
    for (int d = 0; d < 3; d++) {
        if (g[d] > UINT32_MAX)
            return s2_fail(ctx, S2_ERR_UNSUPPORTED, "launch of %s: grid dimension %d of %lld beyond 32 bits",
                           r->symbol, d, (long long)g[d]);
        out->grid[d] = (uint32_t)g[d];
    }
    return S2_OK;
}
