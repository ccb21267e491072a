/* Per-shape schedules of forward and backward kernels: built from the
 * pattern, uploaded, and kept in the kernel's cache. */
#include "attn_internal.h"
#include "pack_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

s2_status s2_rt_up_alloc(s2_ctx *ctx, const s2_device *dev, rt_upload *up, size_t bytes, s2_devptr *out)
{
    s2_status st = s2_rt_alloc(ctx, dev, bytes, up->stream, out);
    if (st == S2_OK)
        up->bytes += bytes;
    return st;
}

s2_status s2_rt_up_copy(s2_ctx *ctx, const s2_device *dev, rt_upload *up, s2_devptr dst, const void *src,
                        size_t bytes)
{
    if (!up->async)
        return s2_memcpy_h2d(ctx, dev, dst, src, bytes);
    if (bytes == 0)
        return S2_OK;
    if (up->nkeep == up->cap) {
        int cap = up->cap ? 2 * up->cap : 16;
        void **grown = realloc(up->keep, (size_t)cap * sizeof *grown);
        if (!grown)
            return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
        up->keep = grown, up->cap = cap;
    }
    void *copy = malloc(bytes);
    if (!copy)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    memcpy(copy, src, bytes);
    up->keep[up->nkeep++] = copy;
    return s2_rt_copy_async(ctx, dev, dst, copy, bytes, up->stream);
}

s2_status s2_rt_up_finish(s2_ctx *ctx, const s2_device *dev, rt_upload *up)
{
    /* a launch on a non-blocking stream does not wait for the legacy stream */
    return up->async ? S2_OK : s2_stream_synchronize(ctx, dev, NULL);
}

void s2_rt_up_release(rt_upload *up)
{
    for (int i = 0; i < up->nkeep; i++)
        free(up->keep[i]);
    free(up->keep);
    up->keep = NULL;
    up->nkeep = up->cap = 0;
}

void s2_rt_sched_slot_free(const s2_device *dev, sched_slot *s, void *stream)
{
    s2_rt_free(dev, s->fwd.buf, stream);
    s2_rt_free(dev, s->t_buf, stream);
    s2_rt_free(dev, s->w_buf, stream);
    s2_rt_free(dev, s->wide.buf, stream);
    memset(s, 0, sizeof *s);
}

/* The dS path's chunkings of the kv heads into c equal chunks (c > 1
 * dividing kv_heads, at most DS_CHUNKINGS of them): each chunk's head_base
 * array, laid out one chunking after the other (tr->ds_chunk_head holds
 * offsets into *out in bytes until the caller rebases them), and the
 * longest dK/dV list of the transposed schedule tp (lists per class). */
static s2_status ds_chunk_arrays(s2_ctx *ctx, const s2_attn_kernel *k, const int64_t *head_base,
                                 const s2_packed_schedule *tp, int32_t lists, sched_slot *tr, int64_t **out,
                                 size_t *bytes)
{
    int heads = k->pattern->heads, kvh = k->pattern->kv_heads, group = heads / kvh;
    /* a CTA's list: its group's query heads' */
    const int32_t *cls = (const int32_t *)((const char *)tp->data + tp->class_of_head_off);
    const int32_t *offs = (const int32_t *)((const char *)tp->data + tp->offsets_off);
    int nclass = 0;
    for (int h = 0; h < heads; h++)
        nclass = cls[h] + 1 > nclass ? cls[h] + 1 : nclass;
    tr->ds_longest = 0;
    for (int64_t i = 0; i < (int64_t)nclass * lists; i++)
        if (offs[i + 1] - offs[i] > tr->ds_longest)
            tr->ds_longest = offs[i + 1] - offs[i];
    tr->ds_longest *= group;
    size_t n = 0;
    tr->ds_nchunk = 0;
    for (int c = 2; c <= kvh && tr->ds_nchunk < DS_CHUNKINGS; c++)
        if (kvh % c == 0)
            tr->ds_chunks[tr->ds_nchunk++] = c;
    for (int i = 0; i < tr->ds_nchunk; i++)
        n += (size_t)tr->ds_chunks[i] * (size_t)(heads + 1);
    int64_t *a = n ? malloc(n * sizeof *a) : NULL;
    if (n && !a)
        return s2_fail(ctx, S2_ERR_NOMEM, "dS chunks: out of memory");
    size_t at = 0;
    for (int i = 0; i < tr->ds_nchunk; i++) {
        int c = tr->ds_chunks[i], nh = kvh / c * group;
        tr->ds_chunk_head[i] = (s2_devptr)(at * sizeof *a);
        tr->ds_chunk_tiles[i] = 0;
        tr->ds_chunk_work[i] = INT64_MAX;
        for (int j = 0; j < c; j++, at += (size_t)heads + 1) {
            int64_t h0 = (int64_t)j * nh, total = head_base[h0 + nh] - head_base[h0];
            for (int h = 0; h <= heads; h++)
                a[at + (size_t)h] = h <= nh ? head_base[h0 + h] - head_base[h0] : total;
            if (total > tr->ds_chunk_tiles[i])
                tr->ds_chunk_tiles[i] = total;
            /* a dS tile per dK/dV entry */
            if (total < tr->ds_chunk_work[i])
                tr->ds_chunk_work[i] = total;
        }
    }
    *out = a;
    *bytes = n * sizeof *a;
    return S2_OK;
}

/* Whether NAME_dqds2 can take a forward schedule: each list (offsets[i] ..
 * offsets[i + 1], the classes' lists one after another) holds at most
 * S2_BWD_DQDS2_MAX_LIST entries, in increasing key tile order. */
static bool lists_pairable(const s2_packed_schedule *fwd)
{
    const int32_t *off = (const int32_t *)((const char *)fwd->data + fwd->offsets_off);
    const s2_dev_entry *e = (const s2_dev_entry *)((const char *)fwd->data + fwd->entries_off);
    size_t n_off = (fwd->entries_off - fwd->offsets_off) / sizeof *off;
    for (size_t i = 0; i + 1 < n_off; i++) {
        int32_t a = off[i], z = off[i + 1];
        if (z < a || z > fwd->num_entries)
            break;   /* past the last list (padding) */
        if (z - a > S2_BWD_DQDS2_MAX_LIST)
            return false;
        for (int32_t j = a + 1; j < z; j++)
            if (e[j].tile <= e[j - 1].tile)
                return false;
    }
    return true;
}

/* The backward's transposed schedule: per key tile of block_m keys, the
 * query tiles visiting it (the layout's, or the transpose of a given
 * forward schedule); and, for a kernel with NAME_dqds, the dS map pairing
 * it with the forward schedule fwd / fg, in the same buffer. */
static s2_status upload_transposed(s2_ctx *ctx, s2_attn_kernel *k, rt_upload *up, const s2_layout *lay,
                                   const s2_schedule *given, const s2_packed_schedule *fwd, const s2_tile_geom *fg,
                                   s2_devptr *buf, sched_slot *tr)
{
    /* one-block key tiles (or block_m-key tiles of bigger blocks), grouped
     * per kv head into block_m-key tiles (attention.h, backward ABI) */
    int bm = k->desc->spec.block_m, bs = k->pattern->block_size < bm ? k->pattern->block_size : bm;
    int gather = bm / bs;
    s2_tile_spec ts = {bm, bs};
    s2_schedule *sched = NULL;
    s2_packed_schedule pk = {0};
    s2_ds_map map = {0};
    int32_t lists = 0;
    s2_status st = given ? s2_schedule_transpose(ctx, lay, given, ts, &sched)
                         : s2_schedule_build(ctx, lay, ts, true, &sched);
    if (st == S2_OK)
        st = s2_kernel_spec_pack_transposed(ctx, s2_rt_main_spec(k), k->pattern, sched, &pk, &lists);
    if (st == S2_OK && sched->geom.kv_tiles > INT32_MAX)
        st = s2_fail(ctx, S2_ERR_UNSUPPORTED, "schedule: %lld key tiles do not fit 32 bits",
                     (long long)sched->geom.kv_tiles);
    tr->ds_tiles = -1;
    tr->dqds2_ok = false;
    if (st == S2_OK && k->fns[S2_ROLE_BWD_DQDS]) {
        st = s2_schedule_ds_map(ctx, fwd, fg->q_tiles, fg->first_q_tile, &pk, lists, gather, k->pattern->heads,
                                &map);
        if (st == S2_OK && k->fns[S2_ROLE_BWD_DQDS2])
            tr->dqds2_ok = lists_pairable(fwd);
        if (st == S2_ERR_UNSUPPORTED) {   /* this shape takes the recomputing dQ kernel */
            s2_ctx_clear(ctx);
            st = S2_OK;
        }
    }
    int64_t *chunks = NULL;
    size_t chunk_bytes = 0;
    if (st == S2_OK && map.data)
        st = ds_chunk_arrays(ctx, k, (const int64_t *)((const char *)map.data + map.head_base_off), &pk, lists, tr,
                             &chunks, &chunk_bytes);
    size_t map_at = s2_align16(pk.size), size = map.data ? map_at + map.size : pk.size;
    size_t chunk_at = s2_align16(size);
    if (chunk_bytes)
        size = chunk_at + chunk_bytes;
    if (st == S2_OK)
        st = s2_rt_up_alloc(ctx, k->mod->dev, up, size, buf);
    if (st == S2_OK)
        st = s2_rt_up_copy(ctx, k->mod->dev, up, *buf, pk.data, pk.size);
    if (st == S2_OK && map.data)
        st = s2_rt_up_copy(ctx, k->mod->dev, up, *buf + map_at, map.data, map.size);
    if (st == S2_OK && chunk_bytes)
        st = s2_rt_up_copy(ctx, k->mod->dev, up, *buf + chunk_at, chunks, chunk_bytes);
    free(chunks);
    for (int i = 0; st == S2_OK && i < tr->ds_nchunk; i++)
        tr->ds_chunk_head[i] += *buf + chunk_at;
    if (st == S2_OK) {
        tr->t_class_of_head = *buf + pk.class_of_head_off;
        tr->t_offsets = *buf + pk.offsets_off;
        tr->t_entries = *buf + pk.entries_off;
        tr->kv_tiles = lists;
        if (map.data) {
            tr->ds_head = *buf + map_at + map.head_base_off;
            tr->ds_map = *buf + map_at + map.map_off;
            tr->ds_tiles = map.tiles;
        }
    }
    s2_ds_map_free(&map);
    s2_packed_schedule_free(&pk);
    s2_schedule_free(sched);
    return st;
}

/* Where the persistent forward's counter pairs follow its work list of n items (8-byte aligned). */
static int32_t work_counter_index(int32_t n) { return (n + 1) & ~1; }

/* A stream keeps its pair; when every pair belongs to another stream, the
 * context is synchronised (no launch in flight uses any) and the pairs are
 * handed out anew.  Concurrent launches thus never share a pair. */
s2_status s2_rt_sched_counter(s2_ctx *ctx, s2_attn_kernel *k, sched_slot *s, void *stream, s2_devptr *out)
{
    int i = 0;
    for (; i < S2_ATTN_COUNTER_PAIRS; i++)
        if (!s->counter_used[i] || s->counter_stream[i] == stream)
            break;
    if (i == S2_ATTN_COUNTER_PAIRS) {
        if (s2_rt_stream_capturing(k->mod->dev, stream))
            return s2_fail(ctx, S2_ERR_CAPTURE,
                           "persistent forward %s: every work-counter pair belongs to another of %d streams, and "
                           "handing them out anew synchronises, which stream capture forbids",
                           k->desc->name, S2_ATTN_COUNTER_PAIRS);
        s2_status st = s2_device_synchronize(ctx, k->mod->dev);
        if (st != S2_OK)
            return st;
        memset(s->counter_used, 0, sizeof s->counter_used);
        i = 0;
    }
    s->counter_used[i] = true;
    s->counter_stream[i] = stream;
    *out = s->w_buf + 4 * (s2_devptr)(work_counter_index(s->n_work) + 2 * i);
    return S2_OK;
}

static s2_status upload_work_list(s2_ctx *ctx, s2_attn_kernel *k, rt_upload *up, const s2_schedule *sched,
                                  s2_devptr *buf, int32_t *n_work)
{
    int32_t *list = NULL;
    int64_t n = 0;
    s2_status st = s2_schedule_work_list(ctx, sched, &list, &n);
    /* the list, then the kernel's work counters (zero; each launch leaves
     * them zero): S2_ATTN_COUNTER_PAIRS pairs from [work_counter_index(n)] */
    size_t words = (size_t)work_counter_index((int32_t)n) + 2 * S2_ATTN_COUNTER_PAIRS;
    int32_t *grown = st == S2_OK ? realloc(list, words * sizeof *list) : NULL;
    if (grown) {
        list = grown;
        memset(list + n, 0, (words - (size_t)n) * sizeof *list);
    } else if (st == S2_OK) {
        st = s2_fail(ctx, S2_ERR_NOMEM, "work list: out of memory");
    }
    if (st == S2_OK)
        st = s2_rt_up_alloc(ctx, k->mod->dev, up, words * sizeof *list, buf);
    if (st == S2_OK)
        st = s2_rt_up_copy(ctx, k->mod->dev, up, *buf, list, words * sizeof *list);
    *n_work = (int32_t)n;
    free(list);
    return st;
}

/* The wide variant's rule, from its record (its template's MIN_KEYS): the
 * main schedule's keys per query tile, on average over its lists. */
static bool wants_wide(const s2_attn_kernel *k, const s2_schedule *sched)
{
    const s2_kernel_record *w = k->rec[S2_ROLE_FWD_WIDE];
    if (!w || !k->fns[S2_ROLE_FWD_WIDE] || sched->geom.q_tiles < 1 || sched->heads < 1)
        return false;
    int64_t lists = sched->geom.q_tiles, total = 0;
    for (int h = 0; h < sched->heads; h++) {
        int c = sched->class_of_head[h];
        total += sched->offsets[(int64_t)(c + 1) * lists] - sched->offsets[(int64_t)c * lists];
    }
    /* the schedule's entries are key tiles of block_n / gather keys */
    const s2_kspec *sp = s2_rt_main_spec(k);
    int gather = sp->kv_gather > 1 ? sp->kv_gather : 1;
    double keys = (double)total * (sp->block_n / gather) / ((double)lists * sched->heads);
    return keys >= w->min_keys;
}

/* The forward schedule of a spec's tile shape, packed (gathered key tiles
 * when the spec gathers, owned pairs for the two-slab shape). */
static s2_status pack_forward(s2_ctx *ctx, const s2_layout *lay, const s2_kspec *spec, s2_schedule **sched,
                              s2_packed_schedule *pk)
{
    int gather = spec->kv_gather > 1 ? spec->kv_gather : 1;
    s2_tile_spec ts = {spec->block_m, spec->block_n / gather};
    s2_status st = s2_schedule_build(ctx, lay, ts, false, sched);
    if (st == S2_OK)
        st = s2_kernel_spec_pack_forward(ctx, spec, *sched, pk);
    if (st == S2_OK && ((*sched)->geom.q_tiles > INT32_MAX || (*sched)->geom.first_q_tile > INT32_MAX))
        st = s2_fail(ctx, S2_ERR_UNSUPPORTED, "schedule: %lld query tiles do not fit 32 bits",
                     (long long)(*sched)->geom.q_tiles);
    return st;
}

/* A packed forward schedule to the device (t->buf is set as soon as it is
 * allocated: the caller frees it on failure). */
static s2_status upload_forward(s2_ctx *ctx, s2_device *dev, rt_upload *up, const s2_packed_schedule *pk,
                                const s2_schedule *sched, fwd_tables *t)
{
    s2_status st = s2_rt_up_alloc(ctx, dev, up, pk->size, &t->buf);
    if (st == S2_OK)
        st = s2_rt_up_copy(ctx, dev, up, t->buf, pk->data, pk->size);
    t->class_of_head = t->buf + pk->class_of_head_off;
    t->offsets = t->buf + pk->offsets_off;
    t->entries = t->buf + pk->entries_off;
    t->first_q_tile = (int32_t)sched->geom.first_q_tile;
    t->q_tiles = (int32_t)sched->geom.q_tiles;
    return st;
}

/* The wide variant's schedule into slot (its own tile shape), and on the
 * persistent grid its work list (the slot's, which the kernel itself then
 * does not use: a module has a wide variant only for a grid kernel). */
static s2_status build_wide(s2_ctx *ctx, s2_attn_kernel *k, rt_upload *up, const s2_layout *lay, sched_slot *slot)
{
    s2_schedule *sched = NULL;
    s2_packed_schedule pk = {0};
    const s2_kernel_record *w = k->rec[S2_ROLE_FWD_WIDE];
    bool persistent = w->grid == S2_GRID_PERSISTENT;
    s2_status st = pack_forward(ctx, lay, &w->spec, &sched, &pk);
    if (st == S2_OK && persistent && slot->w_buf)
        st = s2_fail(ctx, S2_ERR_INTERNAL, "wide variant: the kernel has a work list already");
    if (st == S2_OK && persistent)
        st = upload_work_list(ctx, k, up, sched, &slot->w_buf, &slot->n_work);
    if (st == S2_OK)
        st = upload_forward(ctx, k->mod->dev, up, &pk, sched, &slot->wide);
    slot->use_wide = st == S2_OK;
    s2_packed_schedule_free(&pk);
    s2_schedule_free(sched);
    return st;
}

/* ---- bounds before building ---- */

/* The most entries a schedule under the cap can hold: a bound past it stops counting. */
static const int64_t BOUND_LIMIT = (int64_t)(S2_ATTN_MAX_SCHEDULE_BYTES / sizeof(s2_dev_entry));

s2_status s2_rt_sched_cap(s2_ctx *ctx, const s2_attn_kernel *k, const char *what, size_t bytes)
{
    if (bytes <= S2_ATTN_MAX_SCHEDULE_BYTES)
        return S2_OK;
    return s2_fail(ctx, S2_ERR_SHAPE,
                   "%s of kernel %s: counting its schedules' entries before building passed %.1f GiB of device "
                   "memory, above S2_ATTN_MAX_SCHEDULE_BYTES (%.0f GiB)",
                   what, k->desc->name, (double)bytes / (1u << 30), (double)S2_ATTN_MAX_SCHEDULE_BYTES / (1u << 30));
}

/* A packed forward schedule of spec (pack_forward, upload_forward) and, on
 * the persistent grid, its work list: bytes added to *bytes, the packed
 * entries of each class into per_class (NULL: not wanted). */
static s2_status forward_bound(s2_ctx *ctx, const s2_layout *lay, const s2_kernel_record *r, int64_t *per_class,
                               size_t *bytes)
{
    const s2_kspec *spec = &r->spec;
    int gather = spec->kv_gather > 1 ? spec->kv_gather : 1, heads = s2_layout_pattern(lay)->heads;
    s2_tile_spec ts = {spec->block_m, spec->block_n / gather};
    s2_tile_geom g;
    int64_t entries = 0;
    s2_status st = s2_layout_tile_geom(ctx, lay, ts, &g);
    if (st == S2_OK)
        st = s2_layout_entries_bound(ctx, lay, ts, false, gather, BOUND_LIMIT, per_class, &entries);
    if (st != S2_OK)
        return st;
    size_t esize = gather > 1 ? sizeof(s2_dev_gentry) : sizeof(s2_dev_entry);
    *bytes += s2_align16(s2_packed_schedule_size(heads, s2_layout_num_classes(lay) * g.q_tiles, entries, esize));
    if (r->grid == S2_GRID_PERSISTENT) {   /* upload_work_list: heads x q_tiles items, then the counters */
        int64_t items = (int64_t)heads * g.q_tiles;
        *bytes += s2_align16((size_t)(((items + 1) & ~INT64_C(1)) + 2 * S2_ATTN_COUNTER_PAIRS) * sizeof(int32_t));
    }
    return S2_OK;
}

/* The backward's transposed schedule packed in kv groups (upload_transposed):
 * every head's lists at most once (the kv classes are at most the heads),
 * each a header and its blocks' entries; with NAME_dqds the dS map (a dS
 * tile per forward entry: fwd_class, per class) and the chunk arrays. */
static s2_status transposed_bound(s2_ctx *ctx, const s2_attn_kernel *k, const s2_layout *lay,
                                  const int64_t *fwd_class, int64_t *tr_class, sched_bound *out)
{
    const s2_pattern *p = k->pattern;
    int bm = k->desc->spec.block_m, bs = p->block_size < bm ? p->block_size : bm;
    s2_tile_spec ts = {bm, bs};
    s2_tile_geom g;
    int64_t total = 0;
    s2_status st = s2_layout_tile_geom(ctx, lay, ts, &g);
    if (st == S2_OK)
        st = s2_layout_entries_bound(ctx, lay, ts, true, 1, BOUND_LIMIT, tr_class, &total);
    if (st != S2_OK)
        return st;
    int64_t groups = s2_cdiv(g.kv_tiles, bm / bs), records = 0, ds_tiles = 0;
    for (int h = 0; h < p->heads; h++) {
        records += groups + tr_class[s2_layout_class_index(lay, h)];
        ds_tiles += fwd_class[s2_layout_class_index(lay, h)];
    }
    size_t size = s2_align16(s2_packed_schedule_size(p->heads, (int64_t)p->heads * groups, records, sizeof(s2_dev_entry)));
    out->ds_tiles = -1;
    if (k->fns[S2_ROLE_BWD_DQDS]) {
        size += s2_align16((size_t)(p->heads + 1) * sizeof(int64_t)) + s2_align16((size_t)records * sizeof(int32_t));
        size += (size_t)DS_CHUNKINGS * (size_t)p->kv_heads * (size_t)(p->heads + 1) * sizeof(int64_t);
        out->ds_tiles = ds_tiles;
    }
    out->bytes += size;
    return S2_OK;
}

s2_status s2_rt_sched_bound(s2_ctx *ctx, const s2_attn_kernel *k, int64_t q_len, int64_t kv_len, sched_bound *out)
{
    *out = (sched_bound){0, -1};
    s2_layout *lay = NULL;
    s2_status st = s2_layout_new(ctx, k->pattern, q_len, kv_len, &lay);
    if (st != S2_OK)
        return st;
    int nc = s2_layout_num_classes(lay);
    int64_t *fwd_class = calloc((size_t)nc, sizeof *fwd_class), *tr_class = calloc((size_t)nc, sizeof *tr_class);
    if (!fwd_class || !tr_class)
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    if (st == S2_OK)
        st = forward_bound(ctx, lay, k->rec[s2_main_role(k->desc->spec.kind)], fwd_class, &out->bytes);
    if (st == S2_OK && k->desc->spec.kind == S2_KERNEL_FWD && k->rec[S2_ROLE_FWD_WIDE])
        st = forward_bound(ctx, lay, k->rec[S2_ROLE_FWD_WIDE], NULL, &out->bytes);
    if (st == S2_OK && k->desc->spec.kind == S2_KERNEL_BWD && out->bytes <= S2_ATTN_MAX_SCHEDULE_BYTES)
        st = transposed_bound(ctx, k, lay, fwd_class, tr_class, out);
    free(fwd_class);
    free(tr_class);
    s2_layout_free(lay);
    if (st == S2_OK) {
        char what[96];
        snprintf(what, sizeof what, "q_len %lld, kv_len %lld", (long long)q_len, (long long)kv_len);
        st = s2_rt_sched_cap(ctx, k, what, out->bytes);
    }
    return st;
}

/* The slot of layout lay from its pattern's forward schedule, or from a
 * checked given one (no wide variant then: its tiles are the main kernel's). */
static s2_status build_slot_of(s2_ctx *ctx, s2_attn_kernel *k, const s2_layout *lay, const s2_schedule *given,
                               rt_upload *up, sched_slot *slot)
{
    s2_device *dev = k->mod->dev;
    s2_schedule *own = NULL;
    const s2_schedule *sched = given;
    s2_packed_schedule pk = {0};
    /* filled part by part (forward and transposed schedules, work list, wide variant), then stored */
    sched_slot sl = {0};
    s2_status st = S2_OK;
    if (given) {
        st = s2_kernel_spec_pack_forward(ctx, s2_rt_main_spec(k), given, &pk);
    } else {
        st = pack_forward(ctx, lay, s2_rt_main_spec(k), &own, &pk);
        sched = own;
    }
    if (st == S2_OK)
        st = upload_forward(ctx, dev, up, &pk, sched, &sl.fwd);
    if (st == S2_OK && k->desc->spec.kind == S2_KERNEL_BWD)
        st = upload_transposed(ctx, k, up, lay, given, &pk, &sched->geom, &sl.t_buf, &sl);
    if (st == S2_OK && k->rec[S2_ROLE_FWD] && k->rec[S2_ROLE_FWD]->grid == S2_GRID_PERSISTENT)
        st = upload_work_list(ctx, k, up, sched, &sl.w_buf, &sl.n_work);
    if (st == S2_OK && !given && k->desc->spec.kind == S2_KERNEL_FWD && wants_wide(k, sched))
        st = build_wide(ctx, k, up, lay, &sl);
    if (st == S2_OK)
        st = s2_rt_up_finish(ctx, dev, up);
    if (st == S2_OK) {
        *slot = sl;
        if (sl.use_wide)
            atomic_fetch_add(&k->n_wide, 1);
    } else {
        s2_rt_sched_slot_free(dev, &sl, up->stream);
    }
    s2_packed_schedule_free(&pk);
    s2_schedule_free(own);
    return st;
}

s2_status s2_rt_sched_build(s2_ctx *ctx, s2_attn_kernel *k, int64_t q_len, int64_t kv_len, rt_upload *up,
                           sched_slot *slot)
{
    /* nothing is built for a shape whose bound is over the cap */
    sched_bound bound;
    s2_status st0 = s2_rt_sched_bound(ctx, k, q_len, kv_len, &bound);
    if (st0 != S2_OK)
        return st0;
    s2_layout *lay = NULL;
    s2_status st = s2_layout_new(ctx, k->pattern, q_len, kv_len, &lay);
    if (st == S2_OK)
        st = build_slot_of(ctx, k, lay, NULL, up, slot);
    s2_layout_free(lay);
    return st;
}

s2_status s2_rt_sched_build_given(s2_ctx *ctx, s2_attn_kernel *k, const s2_layout *lay, const s2_schedule *fwd,
                                  rt_upload *up, sched_slot *slot)
{
    s2_status st = s2_schedule_check(ctx, lay, s2_rt_fwd_tile(s2_rt_main_spec(k)), false, fwd);
    if (st != S2_OK)
        return st;
    /* its size, as the bound caps the pattern's own (the transposed one has as many pairs) */
    int64_t n = fwd->offsets[(int64_t)fwd->num_classes * fwd->geom.q_tiles];
    size_t per = sizeof(s2_dev_gentry) * (k->desc->spec.kind == S2_KERNEL_BWD ? 2 : 1);
    st = s2_rt_sched_cap(ctx, k, "the given schedule", (size_t)n * per);
    return st == S2_OK ? build_slot_of(ctx, k, lay, fwd, up, slot) : st;
}

static s2_status build_slot(s2_ctx *ctx, void *owner, const int64_t key[2], void *item)
{
    rt_upload up = {0};
    return s2_rt_sched_build(ctx, owner, key[0], key[1], &up, item);
}

static void release_slot(void *owner, void *item)
{
    const s2_attn_kernel *k = owner;
    s2_rt_sched_slot_free(k->mod->dev, item, NULL);
}

void s2_rt_sched_cache_init(s2_attn_kernel *k)
{
    static const s2_lru_ops ops = {build_slot, release_slot};
    s2_lru_init(&k->cache, k->slots, sizeof k->slots[0], S2_ATTN_SCHED_CACHE, &ops, k, k->mod->dev);
}

s2_status s2_rt_sched_get(s2_ctx *ctx, s2_attn_kernel *k, int64_t q_len, int64_t kv_len, void *stream,
                         sched_slot **out)
{
    void *item = NULL;
    s2_status st = s2_lru_get(ctx, &k->cache, q_len, kv_len, stream, &item);
    *out = item;
    return st;
}

s2_status s2_rt_sched_launch(s2_ctx *ctx, s2_attn_kernel *k, int64_t q_len, int64_t kv_len, void *stream,
                             s2_rt_slot_launch launch, const void *args)
{
    mtx_lock(&k->lock);
    sched_slot *s = NULL;
    s2_status st = s2_rt_sched_get(ctx, k, q_len, kv_len, stream, &s);
    if (st == S2_OK)
        st = launch(ctx, k, stream, args, s);
    mtx_unlock(&k->lock);
    return st;
}
