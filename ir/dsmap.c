/* Where the backward's dS tiles live (launch.h, backward ABI 48..50):
 * the dK/dV kernel writes each entry's dS tile, the dQ-from-dS kernel reads
 * it back by its forward entry. */
#include "pack_internal.h"
#include "s2c/layout.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

void s2_ds_map_free(s2_ds_map *m)
{
    if (!m)
        return;
    free(m->data);
    memset(m, 0, sizeof *m);
}

static int num_classes(const int32_t *cls, int heads)
{
    int n = 0;
    for (int h = 0; h < heads; h++)
        if (cls[h] + 1 > n)
            n = cls[h] + 1;
    return n;
}

/* Index of the record of tile `tile` in the sorted records [b, e), or -1. */
static int64_t find_tile(const s2_dev_entry *ent, int64_t b, int64_t e, int32_t tile)
{
    while (b < e) {
        int64_t m = b + (e - b) / 2;
        if (ent[m].tile == tile)
            return m;
        if (ent[m].tile < tile)
            b = m + 1;
        else
            e = m;
    }
    return -1;
}

s2_status s2_schedule_ds_map(s2_ctx *ctx, const s2_packed_schedule *fwd, int64_t q_tiles, int64_t first_q_tile,
                             const s2_packed_schedule *tr, int64_t kv_lists, int kv_group, int heads,
                             s2_ds_map *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!fwd || !tr || !out || !fwd->data || !tr->data)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "schedule_ds_map: null argument");
    if (heads < 1 || q_tiles < 0 || kv_lists < 0)
        return s2_fail(ctx, S2_ERR_INVALID, "schedule_ds_map: %d heads, %lld query tiles, %lld key lists", heads,
                       (long long)q_tiles, (long long)kv_lists);
    if (kv_group != 1)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "schedule_ds_map: key tiles of %d blocks (one block per tile only)",
                       kv_group);
    const unsigned char *fb = fwd->data, *tb = tr->data;
    const int32_t *fcls = (const int32_t *)(fb + fwd->class_of_head_off);
    const int32_t *foff = (const int32_t *)(fb + fwd->offsets_off);
    const s2_dev_entry *fent = (const s2_dev_entry *)(fb + fwd->entries_off);
    const int32_t *tcls = (const int32_t *)(tb + tr->class_of_head_off);
    const int32_t *toff = (const int32_t *)(tb + tr->offsets_off);
    const s2_dev_entry *tent = (const s2_dev_entry *)(tb + tr->entries_off);
    int ntc = num_classes(tcls, heads);
    int64_t nt = tr->num_entries;

    size_t head_off = 0, map_off = s2_align16((size_t)(heads + 1) * sizeof(int64_t));
    size_t size = map_off + (size_t)nt * sizeof(int32_t);
    unsigned char *buf = calloc(1, size ? size : 1);
    int *rep = malloc((size_t)(ntc ? ntc : 1) * sizeof *rep);
    if (!buf || !rep) {
        free(buf);
        free(rep);
        return s2_fail(ctx, S2_ERR_NOMEM, "schedule_ds_map: out of memory (%zu bytes)", size);
    }
    int64_t *base = (int64_t *)(buf + head_off);
    int32_t *map = (int32_t *)(buf + map_off);
    s2_status st = S2_OK;
    int64_t tiles = 0;
    for (int h = 0; h < heads; h++) {
        int c = fcls[h];
        base[h] = tiles;
        tiles += foff[(int64_t)(c + 1) * q_tiles] - foff[(int64_t)c * q_tiles];
    }
    base[heads] = tiles;
    /* each transposed class maps through the forward class of its first
     * head; the others must have that forward class too */
    for (int c = 0; c < ntc; c++)
        rep[c] = -1;
    for (int h = 0; h < heads && st == S2_OK; h++) {
        if (rep[tcls[h]] < 0)
            rep[tcls[h]] = h;
        else if (fcls[rep[tcls[h]]] != fcls[h])
            st = s2_fail(ctx, S2_ERR_UNSUPPORTED,
                         "schedule_ds_map: heads %d and %d share a transposed list class but not a forward one",
                         rep[tcls[h]], h);
    }
    for (int64_t r = 0; r < nt; r++)
        map[r] = -1;
    for (int c = 0; c < ntc && st == S2_OK; c++) {
        if (rep[c] < 0)
            continue;
        int fc = fcls[rep[c]];
        int64_t fbeg = foff[(int64_t)fc * q_tiles], fcount = foff[(int64_t)(fc + 1) * q_tiles] - fbeg, mapped = 0;
        for (int64_t x = 0; x < kv_lists && st == S2_OK; x++) {
            int64_t b = toff[(int64_t)c * kv_lists + x], e = toff[(int64_t)c * kv_lists + x + 1];
            if (b == e)
                continue;
            /* the header: the list's key tile (one block per tile) */
            const s2_dev_kvgroup *hdr = (const s2_dev_kvgroup *)&tent[b];
            int32_t kt = hdr->block[0];
            for (int64_t r = b + 1; r < e; r++) {
                int64_t li = (int64_t)tent[r].tile - first_q_tile;
                int64_t f = li < 0 || li >= q_tiles ? -1
                            : find_tile(fent, foff[fc * q_tiles + li], foff[fc * q_tiles + li + 1], kt);
                if (f < 0) {
                    st = s2_fail(ctx, S2_ERR_UNSUPPORTED,
                                 "schedule_ds_map: transposed entry (key tile %d, query tile %d) of class %d has no "
                                 "forward entry", kt, tent[r].tile, c);
                    break;
                }
                map[r] = (int32_t)(f - fbeg);
                mapped++;
            }
        }
        /* distinct pairs map to distinct entries: equal counts make it a bijection */
        if (st == S2_OK && mapped != fcount)
            st = s2_fail(ctx, S2_ERR_UNSUPPORTED,
                         "schedule_ds_map: class %d: %lld transposed entries for %lld forward entries", c,
                         (long long)mapped, (long long)fcount);
    }
    free(rep);
    if (st != S2_OK) {
        free(buf);
        return st;
    }
    out->data = buf;
    out->size = size;
    out->head_base_off = head_off;
    out->map_off = map_off;
    out->tiles = tiles;
    return S2_OK;
}
