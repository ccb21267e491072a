/* Packing a schedule into the flat 32-bit form the kernels read. */
#include "pack_internal.h"
#include "s2c/layout.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

void s2_packed_schedule_free(s2_packed_schedule *p)
{
    if (!p)
        return;
    free(p->data);
    memset(p, 0, sizeof *p);
}

size_t s2_packed_schedule_size(int heads, int64_t lists, int64_t entries, size_t entry_size)
{
    size_t offsets_off = s2_align16((size_t)heads * sizeof(int32_t));
    return s2_align16(offsets_off + (size_t)(lists + 1) * sizeof(int32_t)) + (size_t)entries * entry_size;
}

/* The buffer both packings share: class_of_head, the list offsets, then
 * `total` entries (s2_dev_gentry where gathered, else s2_dev_entry), each
 * part 16-byte aligned; the class table is filled, the offsets and entries are
 * the caller's.  Refused where the counts or the largest tile index
 * (max_tile) exceed the 32-bit format. */
static s2_status pack_alloc(s2_ctx *ctx, const s2_schedule *s, bool gathered, int64_t nlists, int64_t total,
                            int64_t max_tile, s2_packed_schedule *out)
{
    if (total > INT32_MAX || nlists + 1 > INT32_MAX || max_tile > INT32_MAX)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED,
                       "schedule of %lld %sentries in %lld lists exceeds the 32-bit device format", (long long)total,
                       gathered ? "gathered " : "", (long long)nlists);
    const char *fn = gathered ? "schedule_pack_gathered" : "schedule_pack";
    size_t entry_size = gathered ? sizeof(s2_dev_gentry) : sizeof(s2_dev_entry);
    size_t class_off = 0;
    size_t offsets_off = s2_align16(class_off + (size_t)s->heads * sizeof(int32_t));
    size_t entries_off = s2_align16(offsets_off + (size_t)(nlists + 1) * sizeof(int32_t));
    size_t size = s2_packed_schedule_size(s->heads, nlists, total, entry_size);
    unsigned char *buf = calloc(1, size ? size : 1);
    if (!buf)
        return s2_fail(ctx, S2_ERR_NOMEM, "%s: out of memory (%zu bytes)", fn, size);
    int32_t *cls = (int32_t *)(buf + class_off);
    for (int h = 0; h < s->heads; h++)
        cls[h] = s->class_of_head[h];
    *out = (s2_packed_schedule){.data = buf, .size = size, .class_of_head_off = class_off,
                                .offsets_off = offsets_off, .entries_off = entries_off, .num_entries = total};
    return S2_OK;
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
    s2_status st = pack_alloc(ctx, s, false, nlists, total, max_tile, out);
    if (st != S2_OK)
        return st;
    unsigned char *buf = out->data;
    int32_t *offs = (int32_t *)(buf + out->offsets_off);
    for (int64_t i = 0; i <= nlists; i++)
        offs[i] = (int32_t)s->offsets[i];
    s2_dev_entry *ent = (s2_dev_entry *)(buf + out->entries_off);
    for (int64_t i = 0; i < total; i++) {
        const s2_tile_entry *e = &s->entries[i];
        ent[i].tile = (int32_t)e->tile;
        ent[i].flags = (e->flags & 0xffu) | (e->row_mask << 8);
        ent[i].live = e->live;
    }
    return S2_OK;
}

typedef struct work_item {
    int64_t head_len, len;
    int32_t item, rel;
} work_item;

static int longest_first(const void *a, const void *b)
{
    const work_item *x = a, *y = b;
    if (x->head_len != y->head_len)
        return x->head_len > y->head_len ? -1 : 1;
    if ((x->item - x->rel) != (y->item - y->rel))
        return x->item < y->item ? -1 : 1;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    if (x->rel != y->rel)
        return x->rel > y->rel ? -1 : 1;
    return x->item < y->item ? -1 : x->item > y->item;
}

s2_status s2_schedule_work_list(s2_ctx *ctx, const s2_schedule *s, int32_t **out, int64_t *n)
{
    if (!s || !out || !n)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "schedule_work_list: null argument");
    *out = NULL;
    *n = 0;
    if (s->transposed)
        return s2_fail(ctx, S2_ERR_INVALID, "schedule_work_list: a transposed schedule");
    int64_t tiles = s->geom.q_tiles, count = (int64_t)s->heads * tiles;
    if (count > INT32_MAX)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "schedule_work_list: %lld items exceed 32 bits", (long long)count);
    work_item *w = malloc((size_t)(count ? count : 1) * sizeof *w);
    int32_t *list = malloc((size_t)(count ? count : 1) * sizeof *list);
    if (!w || !list) {
        free(w);
        free(list);
        return s2_fail(ctx, S2_ERR_NOMEM, "schedule_work_list: out of memory (%lld items)", (long long)count);
    }
    for (int h = 0; h < s->heads; h++) {
        int64_t c0 = (int64_t)s->class_of_head[h] * tiles;
        int64_t head_len = s->offsets[c0 + tiles] - s->offsets[c0];
        for (int64_t r = 0; r < tiles; r++)
            w[h * tiles + r] = (work_item){head_len, s->offsets[c0 + r + 1] - s->offsets[c0 + r],
                                           (int32_t)(h * tiles + r), (int32_t)r};
    }
    qsort(w, (size_t)count, sizeof *w, longest_first);
    for (int64_t i = 0; i < count; i++)
        list[i] = w[i].item;
    free(w);
    *out = list;
    *n = count;
    return S2_OK;
}

/* n entries, `group` at a time: live bits regrouped from (i, sub-block of
 * one block) = bit i to bit i * group + j. */
static void gather_run(const s2_tile_entry *ents, int64_t n, int group, int sub_m, s2_dev_gentry *out)
{
    for (int64_t g0 = 0, o = 0; g0 < n; g0 += group, o++) {
        s2_dev_gentry *d = &out[o];
        bool full = g0 + group <= n;
        d->live = 0;
        for (int j = 0; j < group; j++) {
            int64_t src = g0 + j < n ? g0 + j : n - 1;
            const s2_tile_entry *t = &ents[src];
            d->block[j] = (int32_t)t->tile;
            if (src != g0 + j)
                continue;
            full = full && (t->flags & S2_ENTRY_FULL);
            for (int i = 0; i < sub_m; i++)
                if (t->live & (UINT64_C(1) << i))
                    d->live |= 1u << (i * group + j);
        }
        for (int j = group; j < 4; j++)
            d->block[j] = d->block[group - 1];
        d->flags = full ? S2_ENTRY_FULL : 0;
    }
}

/* Whether query sub-block i keeps every pair of entry t of list `list`
 * (no mask needed for its rows): kept, not past kv_len and, causal, the key
 * block ends at or before the sub-block's first row (a row clipped by
 * q_start only raises that row: the test stays safe). */
static bool sub_full(const s2_schedule *s, int64_t list, const s2_tile_entry *t, int i)
{
    const s2_tile_geom *g = &s->geom;
    if (!(t->live >> i & 1u) || (t->flags & S2_ENTRY_RAGGED))
        return false;
    if (!(t->flags & S2_ENTRY_CAUSAL))
        return true;
    int64_t qt = g->first_q_tile + list % g->q_tiles;
    return (t->tile + 1) * g->block_n - 1 <= qt * g->block_m + (int64_t)i * g->sub_m_size;
}

/* One gathered entry of two slots read by query sub-block `owner` only. */
static void owned_entry(const s2_schedule *s, int64_t list, const s2_tile_entry *a, const s2_tile_entry *c,
                        int owner, s2_dev_gentry *d)
{
    d->block[0] = (int32_t)a->tile;
    d->block[1] = (int32_t)c->tile;
    d->block[2] = d->block[3] = d->block[1];
    d->live = 3u << (2 * owner);
    d->flags = owner ? S2_ENTRY_OWN1 : S2_ENTRY_OWN0;
    if (sub_full(s, list, a, owner) && sub_full(s, list, c, owner))
        d->flags |= S2_ENTRY_OWN_FULL;
}

/* A list of a two-slab schedule in pairs (s2_schedule_pack_gathered_owned);
 * tmp holds room for the list's entries. */
static void owned_list(const s2_schedule *s, int64_t list, int64_t b, int64_t e, s2_tile_entry *tmp,
                       s2_dev_gentry *out)
{
    int64_t both = 0, only[2] = {0, 0}, at[2] = {-1, -1}, cstar = -1;
    for (int64_t k = b; k < e; k++) {
        uint64_t lv = s->entries[k].live & 3u;
        if (lv == 3u) {
            both++;
            if (cstar < 0 || !(s->entries[k].flags & S2_ENTRY_FULL) || (s->entries[cstar].flags & S2_ENTRY_FULL))
                cstar = k;
        } else if (lv) {
            int o = lv == 2u;
            only[o]++;
            at[o] = k;
        }
    }
    if (only[0] != 1 || only[1] != 1 || both % 2 == 0) {
        gather_run(&s->entries[b], e - b, 2, 2, out);
        return;
    }
    /* (A, c*) for sub-block 0, (c*, B) for sub-block 1, then the blocks both
     * read, two per entry in list order (c* left out) */
    owned_entry(s, list, &s->entries[at[0]], &s->entries[cstar], 0, &out[0]);
    owned_entry(s, list, &s->entries[cstar], &s->entries[at[1]], 1, &out[1]);
    int64_t m = 0;
    for (int64_t k = b; k < e; k++)
        if ((s->entries[k].live & 3u) == 3u && k != cstar)
            tmp[m++] = s->entries[k];
    gather_run(tmp, m, 2, 2, out + 2);
}

static s2_status pack_gathered(s2_ctx *ctx, const s2_schedule *s, int group, bool owned, s2_packed_schedule *out)
{
    memset(out, 0, sizeof *out);
    if (!s)
        return s2_fail(ctx, S2_ERR_INVALID, "schedule_pack_gathered: null schedule");
    if (s->transposed || s->geom.sub_n != 1 || group < 2 || group > 4 || s->geom.sub_m * group > 32)
        return s2_fail(ctx, S2_ERR_INVALID,
                       "schedule_pack_gathered: needs a forward schedule of one-block key tiles, group 2..4 "
                       "(sub_m %d, sub_n %d, group %d)", s->geom.sub_m, s->geom.sub_n, group);
    int64_t lists = s->geom.q_tiles;
    int64_t nlists = (int64_t)s->num_classes * lists;
    int64_t total = 0, longest = 0;
    for (int64_t i = 0; i < nlists; i++) {
        int64_t n = s->offsets[i + 1] - s->offsets[i];
        total += (n + group - 1) / group;
        longest = n > longest ? n : longest;
    }
    s2_status st = pack_alloc(ctx, s, true, nlists, total, s->geom.kv_tiles, out);
    if (st != S2_OK)
        return st;
    s2_tile_entry *tmp = owned ? malloc((size_t)(longest ? longest : 1) * sizeof *tmp) : NULL;
    if (owned && !tmp) {
        s2_packed_schedule_free(out);
        return s2_fail(ctx, S2_ERR_NOMEM, "schedule_pack_gathered_owned: out of memory (%lld entries)",
                       (long long)longest);
    }
    unsigned char *buf = out->data;
    int32_t *offs = (int32_t *)(buf + out->offsets_off);
    s2_dev_gentry *ent = (s2_dev_gentry *)(buf + out->entries_off);
    int64_t at = 0;
    for (int64_t i = 0; i < nlists; i++) {
        offs[i] = (int32_t)at;
        int64_t b = s->offsets[i], e = s->offsets[i + 1];
        if (owned)
            owned_list(s, i, b, e, tmp, ent + at);
        else
            gather_run(&s->entries[b], e - b, group, s->geom.sub_m, ent + at);
        at += (e - b + group - 1) / group;
    }
    offs[nlists] = (int32_t)at;
    free(tmp);
    return S2_OK;
}

s2_status s2_schedule_pack_gathered(s2_ctx *ctx, const s2_schedule *s, int group, s2_packed_schedule *out)
{
    return pack_gathered(ctx, s, group, false, out);
}

s2_status s2_schedule_pack_gathered_owned(s2_ctx *ctx, const s2_schedule *s, s2_packed_schedule *out)
{
    memset(out, 0, sizeof *out);
    if (s && (s->transposed || s->geom.sub_m != 2))
        return s2_fail(ctx, S2_ERR_INVALID, "schedule_pack_gathered_owned: needs a forward schedule of two query "
                       "sub-blocks (sub_m %d)", s->geom.sub_m);
    return pack_gathered(ctx, s, 2, true, out);
}
