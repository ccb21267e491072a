/* The runtime's least-recently-used cache of device-side items (lru.h). */
#include "lru.h"

#include <string.h>

static s2_lru_entry *entry_at(const s2_lru *c, int i) { return (s2_lru_entry *)(c->items + (size_t)i * c->item_size); }

void s2_lru_init(s2_lru *c, void *items, size_t item_size, int count, const s2_lru_ops *ops, void *owner,
                 s2_device *dev)
{
    *c = (s2_lru){.ops = ops, .owner = owner, .dev = dev, .items = items, .item_size = item_size, .count = count};
}

s2_status s2_lru_get(s2_ctx *ctx, s2_lru *c, int64_t k0, int64_t k1, void *stream, void **out)
{
    s2_lru_entry *victim = entry_at(c, 0);
    for (int i = 0; i < c->count; i++) {
        s2_lru_entry *e = entry_at(c, i);
        if (e->last_use && e->key[0] == k0 && e->key[1] == k1) {
            e->last_use = ++c->tick;
            c->hits++;
            *out = e;
            return S2_OK;
        }
        if (e->last_use < victim->last_use)
            victim = e;
    }
    if (stream && s2_rt_stream_capturing(c->dev, stream))
        return s2_fail(ctx, S2_ERR_CAPTURE, "this shape (%lld, %lld) has no schedule yet, and building one uploads "
                       "and synchronises, which stream capture forbids: launch it once before the capture",
                       (long long)k0, (long long)k1);
    c->misses++;
    if (victim->last_use) {
        /* launches in flight may still read it */
        s2_status st = s2_device_synchronize(ctx, c->dev);
        if (st != S2_OK)
            return st;
        c->ops->release(c->owner, victim);
        memset(victim, 0, c->item_size);
        c->evictions++;
        c->held--;
    }
    const int64_t key[2] = {k0, k1};
    s2_status st = c->ops->build(ctx, c->owner, key, victim);
    if (st != S2_OK)
        return st;
    victim->key[0] = k0, victim->key[1] = k1;
    victim->last_use = ++c->tick;
    c->held++;
    *out = victim;
    return S2_OK;
}

void s2_lru_clear(s2_lru *c)
{
    for (int i = 0; i < c->count; i++) {
        s2_lru_entry *e = entry_at(c, i);
        if (e->last_use)
            c->ops->release(c->owner, e);
        memset(e, 0, c->item_size);
    }
    c->held = 0;
}
