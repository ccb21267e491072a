/* Kept-block lists of the paged decode (s2c/decode.h): per group class and
 * first query block, the key blocks any head of a kv-head group keeps for
 * that query block or the next, with a mask of who keeps them. */
#include "s2c/decode.h"
#include "s2c/layout.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/* kv heads a and b have query heads of identical masks, head by head */
static bool same_group(const s2_layout *l, int group, int a, int b)
{
    for (int i = 0; i < group; i++)
        if (s2_layout_class_index(l, a * group + i) != s2_layout_class_index(l, b * group + i))
            return false;
    return true;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Scratch for merging the per-head lists of one (class, m). */
typedef struct merge {
    uint32_t *who;               /* [kv_blocks] who keeps each key block (0: nobody yet) */
    int32_t *touched;            /* blocks with who != 0, unsorted */
    int64_t ntouched;
    s2_tile_entry *tmp;
    int64_t tmp_cap;
} merge;

/* Adds the kept blocks of query head q at query block m under bit `bit`. */
static s2_status add_head(s2_ctx *ctx, const s2_layout *l, int bs, int q, int64_t m, uint32_t bit, merge *w)
{
    int64_t n = 0;
    s2_tile_spec ts = {bs, bs};
    s2_status st = s2_layout_q_tile_entries(ctx, l, ts, q, m, w->tmp, w->tmp_cap, &n);
    if (st != S2_OK)
        return st;
    if (n > w->tmp_cap)
        return s2_fail(ctx, S2_ERR_INTERNAL, "decode lists: %lld entries above the bound %lld", (long long)n,
                       (long long)w->tmp_cap);
    for (int64_t i = 0; i < n; i++) {
        if (!w->tmp[i].live)
            continue;
        int64_t kb = w->tmp[i].tile;
        if (!w->who[kb])
            w->touched[w->ntouched++] = (int32_t)kb;
        w->who[kb] |= bit;
    }
    return S2_OK;
}

static bool grow(s2_decode_lists *d, int64_t *cap, int64_t need)
{
    return s2_grow(&d->entries, cap, need, sizeof *d->entries, 1024);
}

/* The list of class c (representative kv head g) at query block m. */
static s2_status build_list(s2_ctx *ctx, const s2_layout *l, const s2_decode_lists *d, int g, int64_t m, merge *w)
{
    int G = d->group;
    w->ntouched = 0;
    for (int sel = 0; sel < 2; sel++) {
        if (m + sel >= d->q_blocks)
            break;
        for (int i = 0; i < G; i++) {
            s2_status st = add_head(ctx, l, d->block_size, g * G + i, m + sel, 1u << (sel * G + i), w);
            if (st != S2_OK)
                return st;
        }
    }
    qsort(w->touched, (size_t)w->ntouched, sizeof *w->touched, cmp_i32);
    return S2_OK;
}

s2_status s2_decode_lists_build(s2_ctx *ctx, const s2_pattern *p, int64_t max_len, s2_decode_lists **out)
{
    if (!out || !p || !p->rules)
        return s2_fail(ctx, S2_ERR_INVALID, "decode lists: null argument");
    *out = NULL;
    int G = p->heads / p->kv_heads;
    if (G > 16)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "decode lists: %d query heads per kv head (at most 16)", G);
    s2_layout *l = NULL;
    s2_status st = s2_layout_new(ctx, p, max_len, max_len, &l);
    if (st != S2_OK)
        return st;
    s2_decode_lists *d = calloc(1, sizeof *d);
    merge w = {0};
    int64_t M = s2_layout_kv_blocks(l), cap = 0;
    s2_tile_spec ts = {p->block_size, p->block_size};
    if (!d)
        goto nomem;
    *d = (s2_decode_lists){.group = G, .kv_heads = p->kv_heads, .block_size = p->block_size, .q_blocks = M};
    d->class_of_kv_head = calloc((size_t)p->kv_heads, sizeof(int32_t));
    int *rep = calloc((size_t)p->kv_heads, sizeof(int));
    w.who = calloc((size_t)M, sizeof *w.who);
    w.touched = malloc((size_t)M * sizeof *w.touched);
    w.tmp_cap = s2_layout_max_entries(l, ts);
    w.tmp = malloc((size_t)(w.tmp_cap > 0 ? w.tmp_cap : 1) * sizeof *w.tmp);
    if (!d->class_of_kv_head || !rep || !w.who || !w.touched || !w.tmp) {
        free(rep);
        goto nomem;
    }
    for (int g = 0; g < p->kv_heads; g++) {
        int c = 0;
        while (c < d->num_classes && !same_group(l, G, rep[c], g))
            c++;
        if (c == d->num_classes)
            rep[d->num_classes++] = g;
        d->class_of_kv_head[g] = c;
    }
    d->offsets = calloc((size_t)(d->num_classes * M + 1), sizeof *d->offsets);
    if (!d->offsets) {
        free(rep);
        goto nomem;
    }
    int64_t total = 0;
    for (int c = 0; c < d->num_classes && st == S2_OK; c++)
        for (int64_t m = 0; m < M && st == S2_OK; m++) {
            st = build_list(ctx, l, d, rep[c], m, &w);
            if (st != S2_OK)
                break;
            if (!grow(d, &cap, total + w.ntouched)) {
                free(rep);
                goto nomem;
            }
            for (int64_t i = 0; i < w.ntouched; i++) {
                int32_t kb = w.touched[i];
                d->entries[total + i] = (s2_decode_entry){.block = kb, .heads = w.who[kb]};
                w.who[kb] = 0;
            }
            total += w.ntouched;
            d->max_list = s2_max64(d->max_list, w.ntouched);
            d->offsets[c * M + m + 1] = total;
        }
    free(rep);
    if (st == S2_OK && !d->entries && !grow(d, &cap, 1))
        goto nomem;
    free(w.who);
    free(w.touched);
    free(w.tmp);
    s2_layout_free(l);
    return S2_HAND_OVER(st, out, d, s2_decode_lists_free);
nomem:
    free(w.who);
    free(w.touched);
    free(w.tmp);
    s2_layout_free(l);
    s2_decode_lists_free(d);
    return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
}

void s2_decode_lists_free(s2_decode_lists *l)
{
    if (!l)
        return;
    free(l->class_of_kv_head);
    free(l->offsets);
    free(l->entries);
    free(l);
}

s2_status s2_decode_lists_pack(s2_ctx *ctx, const s2_decode_lists *l, s2_packed_decode_lists *out)
{
    if (!l || !out)
        return s2_fail(ctx, S2_ERR_INVALID, "decode lists: null argument");
    memset(out, 0, sizeof *out);
    int64_t nlists = l->num_classes * l->q_blocks;
    int64_t n = l->offsets[nlists];
    if (n > INT32_MAX || l->q_blocks > INT32_MAX)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "decode lists: %lld entries do not fit 32 bits", (long long)n);
    out->class_off = 0;
    out->offsets_off = s2_align16((size_t)l->kv_heads * sizeof(int32_t));
    out->entries_off = s2_align16(out->offsets_off + (size_t)(nlists + 1) * sizeof(int32_t));
    out->size = s2_packed_decode_lists_size(l->kv_heads, nlists, n);
    out->data = calloc(1, out->size);
    if (!out->data)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    char *base = out->data;
    memcpy(base + out->class_off, l->class_of_kv_head, (size_t)l->kv_heads * sizeof(int32_t));
    int32_t *offs = (int32_t *)(base + out->offsets_off);
    for (int64_t i = 0; i <= nlists; i++)
        offs[i] = (int32_t)l->offsets[i];
    memcpy(base + out->entries_off, l->entries, (size_t)n * sizeof(s2_decode_entry));
    return S2_OK;
}

size_t s2_packed_decode_lists_size(int kv_heads, int64_t lists, int64_t entries)
{
    size_t offsets_off = s2_align16((size_t)kv_heads * sizeof(int32_t));
    /* one zero entry past the end: the kernel may read entries[begin] of an empty list */
    return s2_align16(offsets_off + (size_t)(lists + 1) * sizeof(int32_t)) + (size_t)(entries + 1) * sizeof(s2_decode_entry);
}

void s2_packed_decode_lists_free(s2_packed_decode_lists *p)
{
    if (!p)
        return;
    free(p->data);
    memset(p, 0, sizeof *p);
}
