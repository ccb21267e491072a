/* bench_fwd: random inputs (a pool of bf16 values the CPU check reads
 * without a host copy) and one configuration's pattern, layout and device
 * buffers. */
#include "bench_fwd.h"
#include "dtype.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint16_t *pool;
s2_dtype bench_dtype = S2_DTYPE_BF16;
static uint8_t *pool8;   /* e4m3: the pool rounded, byte per element */
static float *pool32;    /* f32: the pool widened (exact) */

uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

double bf16_to_f64(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

bool pool_init(uint64_t seed)
{
    pool = malloc((size_t)POOL * sizeof *pool);
    if (!pool)
        return false;
    uint64_t s = seed;
    for (size_t i = 0; i < POOL; i++)
        pool[i] = f32_to_bf16((float)(-1.5 + 3.0 * (double)(rng_next(&s) >> 11) / 9007199254740992.0));
    if (bench_dtype == S2_DTYPE_E4M3) {
        if (!(pool8 = malloc(POOL)))
            return false;
        const s2_dtype_info *e = s2_dtype_info_of(S2_DTYPE_E4M3);
        for (size_t i = 0; i < POOL; i++)
            e->from_f64(&pool8[i], bf16_to_f64(pool[i]));
    }
    if (bench_dtype == S2_DTYPE_F32) {
        if (!(pool32 = malloc((size_t)POOL * sizeof *pool32)))
            return false;
        for (size_t i = 0; i < POOL; i++)
            pool32[i] = (float)bf16_to_f64(pool[i]);
    }
    return true;
}

/* the kernel's input value: bf16, e4m3, or f32 (the same values as bf16) */
double pool_at(uint64_t base, uint64_t index)
{
    uint64_t i = (base + index) % POOL;
    if (!pool8)
        return bf16_to_f64(pool[i]);   /* f32 holds the same values */
    return s2_dtype_info_of(S2_DTYPE_E4M3)->to_f64(&pool8[i]);
}

/* Device buffer of `elems` inputs of bench_dtype filled from the pool at `base`
 * (stage holds POOL elements of the widest dtype, f32). */
static s2_status upload_pool(s2_ctx *ctx, s2_device *dev, s2_devptr dst, uint64_t elems, uint64_t base,
                             void *stage)
{
    size_t es = s2_dtype_size(bench_dtype);
    const uint8_t *src = pool8 ? pool8 : pool32 ? (const uint8_t *)pool32 : (const uint8_t *)pool;
    for (uint64_t done = 0; done < elems;) {
        uint64_t n = elems - done < POOL ? elems - done : POOL;
        uint64_t o = (base + done) % POOL;
        uint64_t first = POOL - o < n ? POOL - o : n;
        memcpy(stage, src + o * es, first * es);
        memcpy((uint8_t *)stage + first * es, src, (n - first) * es);
        s2_status st = s2_memcpy_h2d(ctx, dev, dst + done * es, stage, n * es);
        if (st != S2_OK)
            return st;
        done += n;
    }
    return S2_OK;
}

s2_status config_open(s2_ctx *ctx, s2_device *dev, const bench_config *c, int head_dim, config_data *cd,
                      void *stage)
{
    memset(cd, 0, sizeof *cd);
    cd->cfg = c;
    cd->head_dim = head_dim;
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.name = c->name;
    a.num_heads = c->heads;
    a.block_size = c->block;
    a.local_blocks = c->local;
    a.vert_stride = c->stride;
    a.head_sliding_offset = 0;
    a.causal = true;
    a.max_seq_len = c->seq;
    a.num_dense_heads = c->dense_heads;
    s2_status st = s2_pattern_from_args(ctx, &a, &cd->set);
    if (st != S2_OK)
        return st;
    cd->p = s2_pattern_set_get(cd->set, 0);
    st = s2_layout_new(ctx, cd->p, c->seq, c->seq, &cd->lay);
    if (st != S2_OK)
        return st;
    cd->elems = (uint64_t)c->batch * (uint64_t)c->seq * (uint64_t)c->heads * (uint64_t)cd->head_dim;
    double set_bytes = (double)cd->elems * (3.0 * (double)s2_dtype_size(bench_dtype) + (double)bench_out_size());
    cd->nsets = (int)ceil(3 * L2_BYTES / set_bytes);
    cd->nsets = cd->nsets < 2 ? 2 : cd->nsets > 8 ? 8 : cd->nsets;
    for (int i = 0; st == S2_OK && i < cd->nsets; i++) {
        input_set *in = &cd->sets[i];
        in->qb = 3 * (uint64_t)i * 1000003u + 11;
        in->kb = in->qb + 7777777u;
        in->vb = in->qb + 12345679u;
        s2_devptr *p[4] = {&in->q, &in->k, &in->v, &in->o};
        for (int j = 0; st == S2_OK && j < 4; j++)
            st = s2_mem_alloc(ctx, dev, cd->elems * (j < 3 ? s2_dtype_size(bench_dtype) : bench_out_size()), p[j]);
        if (st == S2_OK)
            st = s2_mem_alloc(ctx, dev, (size_t)c->batch * c->heads * c->seq * 4, &in->lse);
        if (st == S2_OK)
            st = upload_pool(ctx, dev, in->q, cd->elems, in->qb, stage);
        if (st == S2_OK)
            st = upload_pool(ctx, dev, in->k, cd->elems, in->kb, stage);
        if (st == S2_OK)
            st = upload_pool(ctx, dev, in->v, cd->elems, in->vb, stage);
    }
    return st;
}

void config_close(s2_ctx *ctx, s2_device *dev, config_data *cd)
{
    for (int i = 0; i < cd->nsets; i++) {
        input_set *in = &cd->sets[i];
        s2_mem_free(ctx, dev, in->q);
        s2_mem_free(ctx, dev, in->k);
        s2_mem_free(ctx, dev, in->v);
        s2_mem_free(ctx, dev, in->o);
        s2_mem_free(ctx, dev, in->lse);
    }
    s2_layout_free(cd->lay);
    s2_pattern_set_free(cd->set);
}

/* Bytes of one output element: o is f32 for f32 inputs, bf16 otherwise. */
size_t bench_out_size(void)
{
    return bench_dtype == S2_DTYPE_F32 ? 4 : 2;
}

/* Output element i of a host copy of o. */
double bench_out_at(const void *o, uint64_t i)
{
    if (bench_dtype == S2_DTYPE_F32)
        return ((const float *)o)[i];
    return bf16_to_f64(((const uint16_t *)o)[i]);
}
