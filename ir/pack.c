/* Packing a schedule into the flat 32-bit form the kernels read. */
#include "s2c/layout.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

static size_t align16(size_t x) { return (x + 15u) & ~(size_t)15u; }

void s2_packed_schedule_free(s2_packed_schedule *p)
{
    if (!p)
        return;
    free(p->data);
    memset(p, 0, sizeof *p);
}

s2_status s2_schedule_pack(s2_ctx *ctx, const s2_schedule *s, s2_packed_schedule *out)
{
    memset(out, 0, sizeof *out);
    if (!s)
        return s2_fail(ctx, S2_ERR_INVALID, "schedule_pack: null schedule");
    int64_t lists = s->transposed ? s->geom.kv_tiles : s->geom.q_tiles;
    int64_t nlists = (int64_t)s->num_classes * lists;
    int64_t total = s->offsets[nlists];
    int64_t max_tile = s->transposed ? s->geom.first_q_tile + s->geom.q_tiles : s->geom.kv_tiles;
    if (total > INT32_MAX || nlists + 1 > INT32_MAX || max_tile > INT32_MAX)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED,
                       "schedule of %lld entries in %lld lists exceeds the 32-bit device format",
                       (long long)total, (long long)nlists);

    size_t class_off = 0;
    size_t offsets_off = align16(class_off + (size_t)s->heads * sizeof(int32_t));
    size_t entries_off = align16(offsets_off + (size_t)(nlists + 1) * sizeof(int32_t));
    size_t size = entries_off + (size_t)total * sizeof(s2_dev_entry);
    unsigned char *buf = calloc(1, size ? size : 1);
    if (!buf)
        return s2_fail(ctx, S2_ERR_NOMEM, "schedule_pack: out of memory (%zu bytes)", size);

    int32_t *cls = (int32_t *)(buf + class_off);
    for (int h = 0; h < s->heads; h++)
        cls[h] = s->class_of_head[h];
    int32_t *offs = (int32_t *)(buf + offsets_off);
    for (int64_t i = 0; i <= nlists; i++)
        offs[i] = (int32_t)s->offsets[i];
    s2_dev_entry *ent = (s2_dev_entry *)(buf + entries_off);
    for (int64_t i = 0; i < total; i++) {
        const s2_tile_entry *e = &s->entries[i];
        ent[i].tile = (int32_t)e->tile;
        ent[i].flags = (e->flags & 0xffu) | (e->row_mask << 8);
        ent[i].live = e->live;
    }
    out->data = buf;
    out->size = size;
    out->class_of_head_off = class_off;
    out->offsets_off = offsets_off;
    out->entries_off = entries_off;
    out->num_entries = total;
    return S2_OK;
}
