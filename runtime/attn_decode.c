/* Paged decode (split-KV, kept-block lists cached per kernel) and the
 * combine of partial results (s2c/decode.h). */
#include "attn_internal.h"
#include "params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DEC_CACHE = 4 };

/* Lists are built for more blocks than asked (a list serves every shorter
 * length: the kernel masks keys past seq_len): up to the next multiple of a
 * quarter of the power of two below (at least 64 blocks), so a growing
 * max_seq_len rebuilds them about 4 times per doubling with at most 25%
 * more entries. */
int64_t s2_rt_dec_q_blocks(const s2_attn_kernel *k, int64_t max_seq_len)
{
    int bs = k->pattern->block_size;
    int64_t blocks = s2_cdiv(max_seq_len, bs), step = 64;
    while (step * 8 <= blocks)
        step *= 2;
    blocks = s2_cdiv(blocks, step) * step;
    return s2_max64(1, s2_min64(blocks, k->max_kv_len / bs));
}

/* A list (kv head class, query block m) is the union of its query heads'
 * lists at blocks m and m + 1 (s2_decode_lists_build): at most twice the
 * block-tile forward entries of every head, in kv_heads x q_blocks lists. */
s2_status s2_rt_dec_bound(s2_ctx *ctx, const s2_attn_kernel *k, int64_t q_blocks, size_t *bytes)
{
    const s2_pattern *p = k->pattern;
    *bytes = 0;
    s2_layout *lay = NULL;
    int64_t len = q_blocks * p->block_size, *per_class = NULL, entries = 0;
    s2_status st = s2_layout_new(ctx, p, len, len, &lay);
    if (st == S2_OK && !(per_class = calloc((size_t)s2_layout_num_classes(lay), sizeof *per_class)))
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    s2_tile_spec ts = {p->block_size, p->block_size};
    if (st == S2_OK)
        st = s2_layout_entries_bound(ctx, lay, ts, false, 1,
                                     (int64_t)(S2_ATTN_MAX_SCHEDULE_BYTES / sizeof(s2_decode_entry)), per_class,
                                     &entries);
    if (st == S2_OK) {
        entries = 0;
        for (int h = 0; h < p->heads; h++)
            entries += 2 * per_class[s2_layout_class_index(lay, h)];
        *bytes = s2_packed_decode_lists_size(p->kv_heads, (int64_t)p->kv_heads * q_blocks, entries);
    }
    free(per_class);
    s2_layout_free(lay);
    if (st == S2_OK) {
        char what[64];
        snprintf(what, sizeof what, "decode lists of %lld blocks", (long long)q_blocks);
        st = s2_rt_sched_cap(ctx, k, what, *bytes);
    }
    return st;
}

s2_status s2_rt_dec_build(s2_ctx *ctx, s2_attn_kernel *k, int64_t q_blocks, rt_upload *up, dec_slot *slot)
{
    s2_device *dev = k->mod->dev;
    s2_decode_lists *l = NULL;
    s2_packed_decode_lists pk = {0};
    s2_devptr buf = 0;
    size_t bound = 0;
    s2_status st = s2_rt_dec_bound(ctx, k, q_blocks, &bound);
    if (st == S2_OK)
        st = s2_decode_lists_build(ctx, k->pattern, q_blocks * k->pattern->block_size, &l);
    if (st == S2_OK)
        st = s2_decode_lists_pack(ctx, l, &pk);
    if (st == S2_OK)
        st = s2_rt_up_alloc(ctx, dev, up, pk.size, &buf);
    if (st == S2_OK)
        st = s2_rt_up_copy(ctx, dev, up, buf, pk.data, pk.size);
    if (st == S2_OK)
        st = s2_rt_up_finish(ctx, dev, up);
    if (st == S2_OK) {
        *slot = (dec_slot){.q_blocks = l->q_blocks, .buf = buf, .class_of_kv_head = buf + pk.class_off,
                           .offsets = buf + pk.offsets_off, .entries = buf + pk.entries_off, .max_list = l->max_list};
        buf = 0;
    }
    s2_rt_free(dev, buf, up->stream);
    s2_packed_decode_lists_free(&pk);
    s2_decode_lists_free(l);
    return st;
}

static s2_status build_lists(s2_ctx *ctx, void *owner, const int64_t key[2], void *item)
{
    rt_upload up = {0};
    return s2_rt_dec_build(ctx, owner, key[0], &up, item);
}

static void release_lists(void *owner, void *item)
{
    const s2_attn_kernel *k = owner;
    s2_rt_free(k->mod->dev, ((dec_slot *)item)->buf, NULL);
}

s2_status s2_rt_decode_init(s2_ctx *ctx, s2_attn_kernel *k)
{
    static const s2_lru_ops ops = {build_lists, release_lists};
    if (!(k->dec_slots = calloc(DEC_CACHE, sizeof *k->dec_slots)))
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    s2_lru_init(&k->cache, k->dec_slots, sizeof *k->dec_slots, DEC_CACHE, &ops, k, k->mod->dev);
    return S2_OK;
}

/* After s2_lru_clear (s2_attn_module_free), which frees the lists' device memory. */
void s2_rt_decode_free(s2_attn_kernel *k)
{
    free(k->dec_slots);
    k->dec_slots = NULL;
}

/* The lists for max_seq_len.  Called with k->lock held. */
static s2_status dec_get(s2_ctx *ctx, s2_attn_kernel *k, int64_t max_seq_len, void *stream, dec_slot **out)
{
    void *item = NULL;
    s2_status st = s2_lru_get(ctx, &k->cache, s2_rt_dec_q_blocks(k, max_seq_len), 0, stream, &item);
    *out = item;
    return st;
}

/* Split counters in the workspace: one per (sequence, kv head), see dec_workspace_of. */
#define DEC_COUNTERS 65536

/* Splits: the fewest that fill the resident CTA slots (SMs x CTAs per SM)
 * to at least 90% in whole waves (a partial last wave costs a whole one),
 * at most one per 4 key tiles of the longest list. */
static s2_status dec_splits(s2_ctx *ctx, s2_attn_kernel *k, const s2_attn_decode_args *a, int64_t max_list, int *out)
{
    int64_t ctas = (int64_t)a->batch * a->kv_heads;
    if (a->splits > 1 && ctas > DEC_COUNTERS)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "splits %d with batch x kv_heads = %lld above %d", a->splits,
                       (long long)ctas, DEC_COUNTERS);
    if (a->splits > 0 || ctas > DEC_COUNTERS) {
        *out = a->splits > 0 ? a->splits : 1;
        return S2_OK;
    }
    s2_launch_dims one = {.splits = 1, .kv_heads = 1, .batch = 1};
    s2_launch_facts f;
    s2_status st = s2_launch_facts_of(ctx, k->rec[S2_ROLE_DECODE], &one, &k->mod->dev->limits,
                                      &k->use[S2_ROLE_DECODE], &f);
    if (st != S2_OK)
        return st;
    int warps = k->desc->spec.num_warps;
    int64_t target = (int64_t)k->mod->dev->limits.sm_count * f.ctas_per_sm;
    int64_t tiles = s2_cdiv(max_list * (k->pattern->block_size / 16), warps);
    int64_t cap = s2_min64(DEC_MAX_SPLITS, s2_max64(1, tiles / 4)), best = 1;
    double best_eff = 0;
    for (int64_t s = 1; s <= cap; s++) {
        int64_t n = ctas * s;
        double eff = (double)n / (double)(s2_cdiv(n, target) * target);
        if (eff > best_eff + 1e-9) {
            best_eff = eff;
            best = s;
        }
        if (eff >= 0.9)
            break;
    }
    *out = (int)best;
    return S2_OK;
}

/* Workspace: the split counters first, i32 [B][kv_heads] in a region of a
 * fixed DEC_COUNTERS slots, then partial o fp32 [splits][B][n][H][D] and
 * partial lse fp32 [splits][B][H][n], 16-byte aligned.  The counters must be
 * zero before a launch and every launch leaves them zero, but the partials are
 * left behind: the counters' place may not depend on the shapes, or a launch
 * of other shapes would find old partials where it expects zero counters. */
typedef struct dec_ws {
    size_t o_off, lse_off, bytes;
} dec_ws;

static dec_ws dec_workspace_of(const s2_attn_decode_args *a, int splits)
{
    dec_ws w = {0};
    if (splits <= 1)
        return w;
    size_t rows = (size_t)splits * (size_t)a->batch * (size_t)a->n_new * (size_t)a->heads;
    w.o_off = DEC_COUNTERS * sizeof(int32_t);
    w.lse_off = w.o_off + s2_align16(rows * (size_t)a->head_dim * sizeof(float));
    w.bytes = w.lse_off + s2_align16(rows * sizeof(float));
    return w;
}

s2_status s2_attn_decode_splits(s2_ctx *ctx, s2_attn_kernel *k, const s2_attn_decode_args *a, int *splits)
{
    size_t b7[7];
    if (!splits)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_decode_splits: splits is NULL");
    *splits = 1;
    s2_status st = s2_rt_dec_check_host(ctx, k, a, b7);
    if (st != S2_OK)
        return st;
    mtx_lock(&k->lock);
    dec_slot *slot = NULL;
    st = dec_get(ctx, k, a->max_seq_len, NULL, &slot);
    if (st == S2_OK)
        st = dec_splits(ctx, k, a, slot->max_list, splits);
    mtx_unlock(&k->lock);
    return st;
}

s2_status s2_attn_decode_workspace(s2_ctx *ctx, s2_attn_kernel *k, const s2_attn_decode_args *a, size_t *bytes)
{
    if (!bytes)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_attn_decode_workspace: bytes is NULL");
    int splits = 1;
    s2_status st = s2_attn_decode_splits(ctx, k, a, &splits);
    *bytes = st == S2_OK ? dec_workspace_of(a, splits).bytes : 0;
    return st;
}

/* The first page id the kernel would read for sequence b and kv head g that
 * is not in 0..num_pages-1: it walks the list of its first new token's query
 * block (clamped to the lists' q_blocks), keeps the entries a present query
 * block needs and reads one table entry per 16-token chunk starting before
 * seq_len (templates/decode.c, lookup_chunk).  0 when all are valid. */
static s2_status dec_check_row(s2_ctx *ctx, const s2_attn_decode_args *a, const s2_decode_lists *l, const int32_t *table,
                               int b, int g, int32_t len)
{
    int bs = l->block_size, group = l->group;
    int64_t m0 = s2_min64(s2_max64(len - a->n_new, 0) / bs, l->q_blocks - 1);
    uint32_t gbits = (1u << group) - 1, relevant = gbits;
    if ((len - 1) / bs > m0)
        relevant |= gbits << group;
    int64_t li = (int64_t)l->class_of_kv_head[g] * l->q_blocks + m0;
    int64_t row = (int64_t)b * a->table_stride[0] + (int64_t)g * a->table_stride[1];
    for (int64_t e = l->offsets[li]; e < l->offsets[li + 1]; e++) {
        if (!(l->entries[e].heads & relevant))
            continue;
        for (int64_t kpos = (int64_t)l->entries[e].block * bs; kpos < (int64_t)(l->entries[e].block + 1) * bs &&
                                                                kpos < len; kpos += 16) {
            int64_t pidx = kpos / a->page_size;
            int32_t page = table[row + pidx];
            if (page < 0 || page >= a->num_pages)
                return s2_fail(ctx, S2_ERR_DEVICE_DATA,
                               "block_table entry %lld (sequence %d, kv head %d, page %lld of the row) is %d, not a page "
                               "id in 0..%lld; keys %lld..%lld of the sequence (seq_len %d) are read from it",
                               (long long)(row + pidx), b, g, (long long)pidx, page, (long long)a->num_pages - 1,
                               (long long)kpos, (long long)s2_min64(kpos + 16, len) - 1, len);
        }
    }
    return S2_OK;
}

/* The validation of host-checked arguments (bytes: s2_rt_dec_check_host's). */
static s2_status dec_validate(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_decode_args *a,
                              const size_t bytes[7])
{
    s2_status st = S2_OK;
    s2_device *dev = k->mod->dev;
    int32_t *lens = malloc(bytes[5]), *table = malloc(bytes[4]);
    s2_decode_lists *l = NULL;
    if (!lens || !table)
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    /* the data may still be being written on the caller's stream */
    if (st == S2_OK)
        st = s2_stream_synchronize(ctx, dev, stream);
    if (st == S2_OK)
        st = s2_rt_dec_check_device(ctx, k, a, bytes, 0);
    if (st == S2_OK)
        st = s2_memcpy_d2h(ctx, dev, lens, a->seq_lens, bytes[5]);
    if (st == S2_OK)
        st = s2_memcpy_d2h(ctx, dev, table, a->block_table, bytes[4]);
    for (int b = 0; b < a->batch && st == S2_OK; b++)
        if (lens[b] < a->n_new || lens[b] > a->max_seq_len)
            st = s2_fail(ctx, S2_ERR_DEVICE_DATA, "seq_lens[%d] is %d, outside n_new..max_seq_len (%d..%lld)", b,
                         lens[b], a->n_new, (long long)a->max_seq_len);
    if (st == S2_OK)
        st = s2_decode_lists_build(ctx, k->pattern, s2_rt_dec_q_blocks(k, a->max_seq_len) * k->pattern->block_size, &l);
    for (int b = 0; b < a->batch && st == S2_OK; b++)
        for (int g = 0; g < a->kv_heads && st == S2_OK; g++)
            st = dec_check_row(ctx, a, l, table, b, g, lens[b]);
    s2_decode_lists_free(l);
    free(lens);
    free(table);
    return st;
}

size_t s2_rt_dec_workspace_bound(const s2_attn_decode_args *a)
{
    return dec_workspace_of(a, a->splits > 0 ? a->splits : DEC_MAX_SPLITS).bytes;
}

s2_status s2_rt_dec_splits(s2_ctx *ctx, s2_attn_kernel *k, const s2_attn_decode_args *a, const dec_slot *s,
                           int *splits, size_t *ws_bytes)
{
    s2_status st = dec_splits(ctx, k, a, s->max_list, splits);
    *ws_bytes = st == S2_OK ? dec_workspace_of(a, *splits).bytes : 0;
    return st;
}

s2_status s2_attn_decode_validate(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_decode_args *a)
{
    size_t bytes[7];
    s2_status st = s2_rt_dec_check_extents(ctx, k, a, bytes);
    if (st == S2_OK)
        st = dec_validate(ctx, k, stream, a, bytes);
    return st == S2_OK ? s2_rt_dec_check_overlaps(ctx, a, bytes) : st;
}

s2_status s2_rt_dec_launch(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_decode_args *a,
                           const dec_slot *s, int splits)
{
    dec_ws w = dec_workspace_of(a, splits);
    double scale = a->scale != 0.0f ? (double)a->scale : 1.0 / sqrt((double)a->head_dim);
    s2_rt_decode_vals v = {
        .Q = a->q, .K = a->k_pages, .V = a->v_pages, .O = a->o, .LSE = a->lse,
        .WS_O = splits > 1 ? a->workspace + w.o_off : 0, .WS_LSE = splits > 1 ? a->workspace + w.lse_off : 0,
        .TABLE = a->block_table, .TBS = a->table_stride[0], .THS = a->table_stride[1], .SEQ_LENS = a->seq_lens,
        .N = a->n_new, .PAGE = a->page_size, .SCALE_LOG2 = (float)(scale * 1.4426950408889634),
        .CLASS = s->class_of_kv_head, .OFFSETS = s->offsets, .ENTRIES = s->entries, .QBLOCKS = (int32_t)s->q_blocks,
        .SPLITS = splits, .COUNTERS = splits > 1 ? a->workspace : 0, .K_SCALE = a->k_scale, .V_SCALE = a->v_scale,
    };
    S2_RT_STRIDES(v, QS, a->q_stride), S2_RT_STRIDES(v, KS, a->k_stride);
    S2_RT_STRIDES(v, VS, a->v_stride), S2_RT_STRIDES(v, OS, a->o_stride);
    s2_launch_dims in = {.splits = splits, .kv_heads = a->kv_heads, .batch = a->batch};
    return s2_rt_launch_role(ctx, k, S2_ROLE_DECODE, &v, &in, stream);
}

s2_status s2_attn_decode(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_decode_args *a)
{
    size_t bytes[7];
    s2_status st = s2_rt_dec_check_extents(ctx, k, a, bytes);
    if (st == S2_OK && k->mod->check_decode)
        st = dec_validate(ctx, k, stream, a, bytes);
    if (st != S2_OK)
        return st;
    mtx_lock(&k->lock);
    dec_slot *slot = NULL;
    int splits = 1;
    st = dec_get(ctx, k, a->max_seq_len, stream, &slot);
    if (st == S2_OK)
        st = dec_splits(ctx, k, a, slot->max_list, &splits);
    if (st == S2_OK)
        st = s2_rt_dec_check_device(ctx, k, a, bytes, dec_workspace_of(a, splits).bytes);
    if (st == S2_OK)
        st = s2_rt_dec_check_overlaps(ctx, a, bytes);
    if (st == S2_OK)
        st = s2_rt_dec_launch(ctx, k, stream, a, slot, splits);
    mtx_unlock(&k->lock);
    return st;
}

s2_status s2_combine(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_combine_args *a)
{
    s2_status st = s2_combine_check(ctx, k, a);
    return st == S2_OK ? s2_rt_combine_launch(ctx, k, stream, a) : st;
}

s2_status s2_rows(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_rows_args *a)
{
    s2_status st = s2_rt_rows_check(ctx, k, a);
    if (st != S2_OK || a->n_runs == 0)
        return st;
    s2_rt_rows_vals v = {.N_RUNS = (int32_t)a->n_runs, .DST_T = a->dst_shape[1], .DST_H = a->dst_shape[2],
                         .DST_ROWS = a->dst_shape[0] * a->dst_shape[1] * a->dst_shape[2]};
    S2_ABI_ROWS_FROM_ARGS(S2_RT_FROM_ARGS)
    S2_RT_STRIDES(v, DS, a->dst_stride);
    s2_launch_dims in = {.n = a->n_runs};
    return s2_rt_launch_role(ctx, k, S2_ROLE_ROWS, &v, &in, stream);
}

s2_status s2_rt_combine_launch(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_combine_args *a)
{
    s2_rt_combine_vals v = {
        .S = (int32_t)a->seq, .ROWS = (int32_t)((int64_t)a->batch * a->seq * a->heads),
    };
    S2_ABI_COMBINE_FROM_ARGS(S2_RT_FROM_ARGS)
    for (int i = 0; i < a->n; i++) {
        v.PTRS[i] = a->o_in[i];
        v.PTRS[S2_COMBINE_MAX_INPUTS + i] = a->lse_in[i];
    }
    S2_RT_STRIDES(v, IS, a->in_stride), S2_RT_STRIDES(v, OS, a->o_stride);
    s2_launch_dims in = {.rows = v.ROWS};
    return s2_rt_launch_role(ctx, k, S2_ROLE_COMBINE, &v, &in, stream);
}
