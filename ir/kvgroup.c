/* Gathered resident key tiles for the backward's dK/dV kernel.
 *
 * With 16-token pattern blocks a 64-key tile of adjacent blocks mixes one
 * vertical-stripe block (read by every later query) with local-only blocks
 * (read by a few query tiles): most query tiles then keep a quarter of the
 * tile's rows.  Here each kv head's key blocks are put in groups of `group`
 * by their reader range (first and last query tile that reads them), so that
 * blocks read by the same query tiles share a tile: stripes with stripes,
 * neighbours with neighbours.  A group's list is the merge of its blocks'
 * transposed lists. */
#include "s2c/layout.h"
#include "pack_internal.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(s2_dev_kvgroup) == sizeof(s2_dev_entry), "a list header is one entry record");

typedef struct block_key {
    int64_t last, first;
    int32_t block;
} block_key;

static int by_reader_range(const void *a, const void *b)
{
    const block_key *x = a, *y = b;
    if (x->last != y->last)
        return x->last < y->last ? -1 : 1;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    return (x->block > y->block) - (x->block < y->block);
}

typedef struct group_order {
    int64_t weight;
    int32_t index;
} group_order;

static int heaviest_first(const void *a, const void *b)
{
    const group_order *x = a, *y = b;
    if (x->weight != y->weight)
        return x->weight > y->weight ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* Merge the transposed lists of `blocks` (nb used, -1 = unused slot) for
 * head class cls: query tiles in increasing order.  Writes the merged entries
 * to out (NULL: count only); returns their number. */
static int64_t merge_lists(const s2_schedule *t, int cls, const int32_t *blocks, int group, s2_dev_entry *out)
{
    int64_t lists = t->geom.kv_tiles;
    int64_t at[4], end[4];
    bool used[4];
    for (int j = 0; j < group; j++) {
        used[j] = blocks[j] >= 0;
        at[j] = used[j] ? t->offsets[(int64_t)cls * lists + blocks[j]] : 0;
        end[j] = used[j] ? t->offsets[(int64_t)cls * lists + blocks[j] + 1] : 0;
    }
    bool all_used = true;
    for (int j = 0; j < group; j++)
        all_used = all_used && used[j];
    int sub_m = t->geom.sub_m;
    int64_t n = 0;
    for (;;) {
        int64_t tile = INT64_MAX;
        for (int j = 0; j < group; j++)
            if (at[j] < end[j] && t->entries[at[j]].tile < tile)
                tile = t->entries[at[j]].tile;
        if (tile == INT64_MAX)
            break;
        uint64_t live = 0;
        uint32_t flags = 0, rows = 0;
        bool full = all_used;
        for (int j = 0; j < group; j++) {
            if (at[j] >= end[j] || t->entries[at[j]].tile != tile) {
                full = false;
                continue;
            }
            const s2_tile_entry *e = &t->entries[at[j]++];
            full = full && (e->flags & S2_ENTRY_FULL);
            flags |= e->flags & (S2_ENTRY_CAUSAL | S2_ENTRY_RAGGED);
            rows |= e->row_mask;
            for (int i = 0; i < sub_m; i++)
                if (e->live & (UINT64_C(1) << i))
                    live |= UINT64_C(1) << (i * group + j);
        }
        if (out)
            out[n] = (s2_dev_entry){.tile = (int32_t)tile,
                                    .flags = (flags | (full ? S2_ENTRY_FULL : 0)) | (rows << 8),
                                    .live = live};
        n++;
    }
    return n;
}

s2_status s2_schedule_pack_gathered_kv(s2_ctx *ctx, const s2_schedule *t, int kv_heads, int group,
                                       s2_packed_schedule *out, int32_t *lists_out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!t || !out || !lists_out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "schedule_pack_gathered_kv: null argument");
    int heads = t->heads;
    if (!t->transposed || t->geom.sub_n != 1 || group < 1 || group > 4 || t->geom.sub_m * group > 64 ||
        kv_heads < 1 || heads % kv_heads != 0)
        return s2_fail(ctx, S2_ERR_INVALID,
                       "schedule_pack_gathered_kv: needs a transposed schedule of one-block key tiles, group 1..4 "
                       "and heads a multiple of kv heads (sub_m %d, sub_n %d, group %d, heads %d, kv heads %d)",
                       t->geom.sub_m, t->geom.sub_n, group, heads, kv_heads);
    int G = heads / kv_heads;
    int64_t nb = t->geom.kv_tiles, ng = (nb + group - 1) / group;
    if (ng > INT32_MAX || nb > INT32_MAX || t->geom.first_q_tile + t->geom.q_tiles > INT32_MAX)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "schedule_pack_gathered_kv: %lld key blocks exceed the 32-bit format",
                       (long long)nb);

    /* kv classes: kv heads whose query heads have the same classes, in order */
    int *kvc = malloc((size_t)kv_heads * sizeof *kvc), *kv_rep = malloc((size_t)kv_heads * sizeof *kv_rep);
    block_key *keys = malloc((size_t)(nb ? nb : 1) * sizeof *keys);
    group_order *ord = malloc((size_t)(ng ? ng : 1) * sizeof *ord);
    int32_t *slots = malloc((size_t)(ng ? ng : 1) * 4 * sizeof *slots);
    int32_t **groups = NULL;
    s2_status st = S2_OK;
    if (!kvc || !kv_rep || !keys || !ord || !slots) {
        st = s2_fail(ctx, S2_ERR_NOMEM, "schedule_pack_gathered_kv: out of memory");
        goto done;
    }
    int nkvc = 0;
    for (int h = 0; h < kv_heads; h++) {
        int c = 0;
        for (; c < nkvc; c++) {
            bool same = true;
            for (int i = 0; i < G && same; i++)
                same = t->class_of_head[kv_rep[c] * G + i] == t->class_of_head[h * G + i];
            if (same)
                break;
        }
        if (c == nkvc)
            kv_rep[nkvc++] = h;
        kvc[h] = c;
    }
    groups = calloc((size_t)nkvc, sizeof *groups);
    if (!groups) {
        st = s2_fail(ctx, S2_ERR_NOMEM, "schedule_pack_gathered_kv: out of memory");
        goto done;
    }

    /* per kv class: blocks by reader range, cut into groups, heaviest first */
    int64_t total = 0;
    for (int c = 0; c < nkvc; c++) {
        groups[c] = malloc((size_t)(ng ? ng : 1) * 4 * sizeof **groups);
        if (!groups[c]) {
            st = s2_fail(ctx, S2_ERR_NOMEM, "schedule_pack_gathered_kv: out of memory");
            goto done;
        }
        for (int64_t n = 0; n < nb; n++) {
            block_key *k = &keys[n];
            *k = (block_key){.last = -1, .first = -1, .block = (int32_t)n};
            for (int i = 0; i < G; i++) {
                int64_t li = (int64_t)t->class_of_head[kv_rep[c] * G + i] * nb + n;
                int64_t b = t->offsets[li], e = t->offsets[li + 1];
                if (b == e)
                    continue;
                if (k->first < 0 || t->entries[b].tile < k->first)
                    k->first = t->entries[b].tile;
                if (t->entries[e - 1].tile > k->last)
                    k->last = t->entries[e - 1].tile;
            }
        }
        qsort(keys, (size_t)nb, sizeof *keys, by_reader_range);
        for (int64_t x = 0; x < ng; x++) {
            for (int j = 0; j < 4; j++)
                slots[x * 4 + j] = x * group + j < nb && j < group ? keys[x * group + j].block : -1;
            int64_t w = 0;
            for (int i = 0; i < G; i++)
                w += merge_lists(t, t->class_of_head[kv_rep[c] * G + i], &slots[x * 4], group, NULL);
            ord[x] = (group_order){w, (int32_t)x};
            total += w + G;   /* + one header per list */
        }
        qsort(ord, (size_t)ng, sizeof *ord, heaviest_first);
        for (int64_t x = 0; x < ng; x++)
            memcpy(&groups[c][x * 4], &slots[(int64_t)ord[x].index * 4], 4 * sizeof(int32_t));
    }
    int64_t nclasses = (int64_t)nkvc * G, nlists = nclasses * ng;
    if (total > INT32_MAX || nlists + 1 > INT32_MAX) {
        st = s2_fail(ctx, S2_ERR_UNSUPPORTED,
                     "schedule of %lld gathered entries in %lld lists exceeds the 32-bit device format",
                     (long long)total, (long long)nlists);
        goto done;
    }

    /* the buffer of s2_schedule_pack: list classes, offsets, records */
    size_t offsets_off = s2_align16((size_t)heads * sizeof(int32_t));
    size_t entries_off = s2_align16(offsets_off + (size_t)(nlists + 1) * sizeof(int32_t));
    size_t size = s2_packed_schedule_size(heads, nlists, total, sizeof(s2_dev_entry));
    unsigned char *buf = calloc(1, size);
    if (!buf) {
        st = s2_fail(ctx, S2_ERR_NOMEM, "schedule_pack_gathered_kv: out of memory (%zu bytes)", size);
        goto done;
    }
    int32_t *cls = (int32_t *)buf;
    for (int h = 0; h < heads; h++)
        cls[h] = kvc[h / G] * G + h % G;
    int32_t *offs = (int32_t *)(buf + offsets_off);
    s2_dev_entry *ent = (s2_dev_entry *)(buf + entries_off);
    int64_t at = 0;
    for (int c = 0; c < nkvc; c++)
        for (int i = 0; i < G; i++) {
            int hcls = t->class_of_head[kv_rep[c] * G + i];
            for (int64_t x = 0; x < ng; x++) {
                offs[((int64_t)c * G + i) * ng + x] = (int32_t)at;
                s2_dev_kvgroup hdr;
                memcpy(hdr.block, &groups[c][x * 4], sizeof hdr.block);
                memcpy(&ent[at++], &hdr, sizeof hdr);
                at += merge_lists(t, hcls, hdr.block, group, ent + at);
            }
        }
    offs[nlists] = (int32_t)at;
    out->data = buf;
    out->size = size;
    out->class_of_head_off = 0;
    out->offsets_off = offsets_off;
    out->entries_off = entries_off;
    out->num_entries = at;
    *lists_out = (int32_t)ng;

done:
    if (groups)
        for (int c = 0; c < nkvc; c++)
            free(groups[c]);
    free(groups);
    free(slots);
    free(ord);
    free(keys);
    free(kv_rep);
    free(kvc);
    return st;
}
