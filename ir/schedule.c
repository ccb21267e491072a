/* Merge-Q tile lists in closed form.  A tile's list is found by generating a
 * superset of candidate blocks (intervals and arithmetic progressions derived
 * from the rule), walking the tiles they touch in increasing order, and
 * evaluating the exact predicate on each candidate tile.  Memory is
 * O(sources + entries), never O(seq_len^2). */
#include "ir_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- candidate sources ----------------------------------------------------- */

void s2_ir_srcs_init(s2_ir_srcs *ss, int64_t clip_lo, int64_t clip_hi)
{
    memset(ss, 0, sizeof *ss);
    ss->clip_lo = clip_lo;
    ss->clip_hi = clip_hi;
}

void s2_ir_srcs_free(s2_ir_srcs *ss)
{
    free(ss->v);
    ss->v = NULL;
    ss->n = ss->cap = 0;
}

static void add_prog(s2_ir_srcs *ss, int64_t a, int64_t step, int64_t lo, int64_t hi)
{
    if (lo < ss->clip_lo)
        lo = ss->clip_lo;
    if (hi > ss->clip_hi)
        hi = ss->clip_hi;
    if (lo > hi || step < 1)
        return;
    if (ss->n == ss->cap) {
        int cap = ss->cap ? ss->cap * 2 : 16;
        s2_ir_src *v = realloc(ss->v, (size_t)cap * sizeof *v);
        if (!v) {
            ss->oom = true;
            return;
        }
        ss->v = v;
        ss->cap = cap;
    }
    ss->v[ss->n++] = (s2_ir_src){s2_mod(a, step), step, lo, hi};
}

static void add_interval(s2_ir_srcs *ss, int64_t lo, int64_t hi) { add_prog(ss, 0, 1, lo, hi); }

/* Smallest element >= x, or -1. */
static int64_t src_next(const s2_ir_src *s, int64_t x)
{
    if (x < s->lo)
        x = s->lo;
    int64_t e = x + s2_mod(s->a - x, s->step);
    return e <= s->hi ? e : -1;
}

int64_t s2_ir_next_tile(const s2_ir_srcs *ss, int64_t x, int tile, int block_size)
{
    int64_t nmin = x * tile / block_size, best = INT64_MAX;
    for (int i = 0; i < ss->n; i++) {
        int64_t e = src_next(&ss->v[i], nmin);
        if (e < 0)
            continue;
        int64_t t = e * block_size / tile;
        if (t < x)
            t = x;
        if (t < best)
            best = t;
    }
    return best;
}

/* Key blocks already decided for a query tile: a sorted list of disjoint
 * intervals, each selected for every query block of the tile by some range
 * rule.  A source of an earlier rule (or of the base rule) cannot decide a
 * block there, so it skips them; that keeps the candidates near the entries
 * when a later rule drops or thins out far context.  Bounded: once full,
 * further intervals are left out, which only leaves more candidates. */
enum { MAX_DECIDED = 32 };

typedef struct decided {
    int64_t lo[MAX_DECIDED], hi[MAX_DECIDED];
    int n;
} decided;

static void decided_add(decided *dc, const s2_ir_srcs *ss, int64_t lo, int64_t hi)
{
    lo = s2_max64(lo, ss->clip_lo);
    hi = s2_min64(hi, ss->clip_hi);
    if (lo > hi)
        return;
    int i = 0;
    while (i < dc->n && dc->hi[i] < lo - 1)
        i++;
    int j = i;
    while (j < dc->n && dc->lo[j] <= hi + 1) {
        lo = s2_min64(lo, dc->lo[j]);
        hi = s2_max64(hi, dc->hi[j]);
        j++;
    }
    if (j == i && dc->n == MAX_DECIDED)
        return;
    memmove(&dc->lo[i + 1], &dc->lo[j], (size_t)(dc->n - j) * sizeof dc->lo[0]);
    memmove(&dc->hi[i + 1], &dc->hi[j], (size_t)(dc->n - j) * sizeof dc->hi[0]);
    dc->n -= j - i - 1;
    dc->lo[i] = lo;
    dc->hi[i] = hi;
}

/* add_prog over [lo, hi] less the decided intervals. */
static void add_prog_open(s2_ir_srcs *ss, const decided *dc, int64_t a, int64_t step, int64_t lo, int64_t hi)
{
    lo = s2_max64(lo, ss->clip_lo);
    hi = s2_min64(hi, ss->clip_hi);
    for (int i = 0; i < dc->n && lo <= hi; i++) {
        if (dc->hi[i] < lo)
            continue;
        if (dc->lo[i] > hi)
            break;
        if (dc->lo[i] > lo)
            add_prog(ss, a, step, lo, dc->lo[i] - 1);
        lo = dc->hi[i] + 1;
    }
    if (lo <= hi)
        add_prog(ss, a, step, lo, hi);
}

/* The key blocks range rule rr selects for every query block of [m0, m1]. */
static void range_cover(const s2_pattern *p, const s2_range_rule *rr, int64_t m0, int64_t m1, const s2_ir_srcs *ss,
                        decided *dc)
{
    int64_t klo, khi, dlo, dhi;
    s2_ir_range_bounds(rr, p->block_size, &klo, &khi, &dlo, &dhi);
    if (dlo > dhi)
        return;
    decided_add(dc, ss, s2_max64(klo, m1 - dhi), s2_min64(khi, m0 - dlo));
    if (!p->causal)
        decided_add(dc, ss, s2_max64(klo, m1 + dlo), s2_min64(khi, m0 + dhi));
}

/* Relative stripes of stride S around query block m, as key blocks within
 * [lo, hi] and at block distance |m - n| in [dlo, dhi]: left distance d = m - n >= L with
 * d - L + 1 = kS, right -d >= R with -d - R + 1 = kS. */
static void rel_fwd(s2_ir_srcs *ss, const decided *dc, const s2_head_rule *r, int64_t m, int64_t S, int64_t lo,
                    int64_t hi, int64_t dlo, int64_t dhi)
{
    int64_t left0 = m - r->local_left + 1, right0 = m + r->local_right - 1;
    add_prog_open(ss, dc, left0, S, s2_max64(lo, m - dhi), s2_min64(s2_min64(hi, left0 - S), m - dlo));
    add_prog_open(ss, dc, right0, S, s2_max64(s2_max64(lo, right0 + S), m + dlo), s2_min64(hi, m + dhi));
}

static void rel_tr(s2_ir_srcs *ss, const s2_head_rule *r, int64_t n, int64_t S, int64_t lo, int64_t hi)
{
    int64_t up0 = n + r->local_left - 1, down0 = n - r->local_right + 1;
    add_prog(ss, up0, S, s2_max64(lo, up0 + S), hi);
    add_prog(ss, down0, S, lo, s2_min64(hi, down0 - S));
}

static bool abs_hit_in(int64_t n0, int64_t n1, int64_t shift, int64_t S)
{
    return n0 + s2_mod(-shift - n0, S) <= n1;
}

/* Sources of the range rules, last first: each skips what later rules decide. */
static void fwd_ranges(const s2_layout *l, int q, int64_t m0, int64_t m1, s2_ir_srcs *ss, decided *dc)
{
    const s2_pattern *p = l->p;
    const s2_head_rule *r = &p->rules[q];
    for (int i = p->num_ranges - 1; i >= 0; i--) {
        const s2_range_rule *rr = &p->ranges[i];
        if (!s2_ir_range_applies_to(rr, q))
            continue;
        int64_t klo, khi, dlo, dhi;
        s2_ir_range_bounds(rr, p->block_size, &klo, &khi, &dlo, &dhi);
        if (rr->action == S2_RANGE_STRIDE && p->vert_position == S2_VERT_RELATIVE) {
            for (int64_t m = m0; m <= m1; m++)
                rel_fwd(ss, dc, r, m, rr->stride, klo, khi, dlo, dhi);
        } else if (rr->action != S2_RANGE_DROP) {
            int64_t a = 0, step = 1;
            if (rr->action == S2_RANGE_STRIDE) {
                a = -r->shift;
                step = rr->stride;
            }
            add_prog_open(ss, dc, a, step, s2_max64(klo, m0 - dhi), s2_min64(khi, m1 - dlo));
            if (!p->causal)
                add_prog_open(ss, dc, a, step, s2_max64(klo, m0 + dlo), s2_min64(khi, m1 + dhi));
        }
        range_cover(p, rr, m0, m1, ss, dc);
    }
}

void s2_ir_fwd_sources(const s2_layout *l, int q, int64_t m0, int64_t m1, s2_ir_srcs *ss)
{
    const s2_pattern *p = l->p;
    const s2_head_rule *r = &p->rules[q];
    if (r->mask >= 0) {
        add_interval(ss, 0, ss->clip_hi);
        return;
    }
    /* the local window is never overridden */
    int L = r->local_left > 0 ? r->local_left : 1, R = r->local_right > 0 ? r->local_right : 1;
    add_interval(ss, m0 - L + 1, m1 + R - 1);
    decided dc = {.n = 0};
    fwd_ranges(l, q, m0, m1, ss, &dc);
    if (r->dense)
        add_prog_open(ss, &dc, 0, 1, 0, ss->clip_hi);
    else if (r->vert_stride > 0 && p->vert_position == S2_VERT_ABSOLUTE)
        add_prog_open(ss, &dc, -r->shift, r->vert_stride, 0, ss->clip_hi);
    else if (r->vert_stride > 0)
        for (int64_t m = m0; m <= m1; m++)
            rel_fwd(ss, &dc, r, m, r->vert_stride, 0, ss->clip_hi, INT64_MIN / 4, INT64_MAX / 4);
}

static void tr_ranges(const s2_layout *l, int q, int64_t n0, int64_t n1, s2_ir_srcs *ss)
{
    const s2_pattern *p = l->p;
    const s2_head_rule *r = &p->rules[q];
    for (int i = 0; i < p->num_ranges; i++) {
        const s2_range_rule *rr = &p->ranges[i];
        if (rr->action == S2_RANGE_DROP || !s2_ir_range_applies_to(rr, q))
            continue;
        int64_t klo, khi, dlo, dhi;
        s2_ir_range_bounds(rr, p->block_size, &klo, &khi, &dlo, &dhi);
        int64_t a = s2_max64(n0, klo), b = s2_min64(n1, khi);
        if (a > b)
            continue;
        if (rr->action == S2_RANGE_STRIDE) {
            if (p->vert_position == S2_VERT_RELATIVE) {
                for (int64_t n = a; n <= b; n++)
                    rel_tr(ss, r, n, rr->stride, ss->clip_lo, ss->clip_hi);
                continue;
            }
            if (!abs_hit_in(a, b, r->shift, rr->stride))
                continue;
        }
        add_interval(ss, a + dlo, b + dhi);
        if (!p->causal)
            add_interval(ss, a - dhi, b - dlo);
    }
}

void s2_ir_tr_sources(const s2_layout *l, int q, int64_t n0, int64_t n1, s2_ir_srcs *ss)
{
    const s2_pattern *p = l->p;
    const s2_head_rule *r = &p->rules[q];
    int64_t all_lo = p->causal ? n0 : ss->clip_lo;
    if (r->mask >= 0 || r->dense) {
        add_interval(ss, all_lo, ss->clip_hi);
        if (r->mask >= 0)
            return;
    }
    int L = r->local_left > 0 ? r->local_left : 1, R = r->local_right > 0 ? r->local_right : 1;
    add_interval(ss, n0 - R + 1, n1 + L - 1);
    if (r->vert_stride > 0 && !r->dense) {
        if (p->vert_position == S2_VERT_ABSOLUTE) {
            if (abs_hit_in(n0, n1, r->shift, r->vert_stride))
                add_interval(ss, all_lo, ss->clip_hi);
        } else {
            for (int64_t n = n0; n <= n1; n++)
                rel_tr(ss, r, n, r->vert_stride, ss->clip_lo, ss->clip_hi);
        }
    }
    tr_ranges(l, q, n0, n1, ss);
}

/* ---- entries ----------------------------------------------------------------- */

int64_t s2_ir_rect_pairs(int64_t qa, int64_t qb, int64_t ka, int64_t kb, bool causal)
{
    if (qa >= qb || ka >= kb)
        return 0;
    if (!causal)
        return (qb - qa) * (kb - ka);
    /* rows x in [ka, kb-1) see x + 1 - ka keys; rows x >= kb - 1 see all kb - ka */
    int64_t total = 0;
    int64_t a = s2_max64(qa, ka), b = s2_min64(qb, kb - 1);
    if (a < b)
        total += (b - a) * (a + b + 1 - 2 * ka) / 2;
    int64_t c = s2_max64(qa, kb - 1);
    if (c < qb)
        total += (qb - c) * (kb - ka);
    return total;
}

/* The token ranges of sub-block pair (i, jj) of entry (t, j); false when
 * the query or the key sub-block holds none of the layout's tokens. */
static bool pair_span(const s2_layout *l, const s2_tile_geom *g, int64_t t, int64_t j, int i, int jj, int64_t *qa,
                      int64_t *qb, int64_t *k0, int64_t *k1)
{
    int64_t t0 = t * g->block_m, qlo = s2_max64(t0, l->q_start), qhi = s2_min64(t0 + g->block_m, l->kv_len);
    *qa = s2_max64(t0 + (int64_t)i * g->sub_m_size, qlo);
    *qb = s2_min64(t0 + (int64_t)(i + 1) * g->sub_m_size, qhi);
    *k0 = j * g->block_n + (int64_t)jj * g->sub_n_size;
    *k1 = s2_min64(*k0 + g->sub_n_size, l->kv_len);
    return *qa < *qb && *k0 < *k1;
}

uint64_t s2_ir_entry_valid(const s2_layout *l, const s2_tile_geom *g, int64_t t, int64_t j)
{
    uint64_t valid = 0;
    for (int i = 0; i < g->sub_m; i++)
        for (int jj = 0; jj < g->sub_n; jj++) {
            int64_t qa, qb, k0, k1;
            if (pair_span(l, g, t, j, i, jj, &qa, &qb, &k0, &k1) && !(l->p->causal && k0 > qb - 1))
                valid |= UINT64_C(1) << (i * g->sub_n + jj);
        }
    return valid;
}

void s2_ir_entry_fill(const s2_layout *l, const s2_tile_geom *g, int64_t t, int64_t j, uint64_t live,
                      s2_tile_entry *e)
{
    bool causal = l->p->causal;
    int64_t qlo = s2_max64(t * g->block_m, l->q_start);
    int64_t kb_full = (j + 1) * g->block_n, kb = s2_min64(kb_full, l->kv_len);
    bool full = kb_full <= l->kv_len;
    uint32_t rows = 0;
    for (int i = 0; i < g->sub_m; i++)
        for (int jj = 0; jj < g->sub_n; jj++) {
            int64_t qa, qb, k0, k1;
            bool on = live >> (i * g->sub_n + jj) & 1;
            if (on)
                rows |= 1u << i;
            if (pair_span(l, g, t, j, i, jj, &qa, &qb, &k0, &k1) && (!on || (causal && k1 - 1 > qa)))
                full = false;
        }
    e->tile = j;
    e->live = live;
    e->row_mask = rows;
    e->flags = 0;
    if (full)
        e->flags |= S2_ENTRY_FULL;
    if (causal && kb - 1 > qlo)
        e->flags |= S2_ENTRY_CAUSAL;
    if (kb_full > l->kv_len)
        e->flags |= S2_ENTRY_RAGGED;
}

bool s2_ir_eval_entry(const s2_layout *l, const s2_tile_geom *g, int q, int64_t t, int64_t j, s2_tile_entry *e)
{
    int bs = l->p->block_size;
    uint64_t valid = s2_ir_entry_valid(l, g, t, j), live = 0;
    for (int b = 0; b < 64; b++) {
        int64_t qa, qb, k0, k1;
        if ((valid >> b & 1) && pair_span(l, g, t, j, b / g->sub_n, b % g->sub_n, &qa, &qb, &k0, &k1) &&
            s2_ir_block_kept(l->p, q, qa / bs, k0 / bs))
            live |= UINT64_C(1) << b;
    }
    if (!live)
        return false;
    s2_ir_entry_fill(l, g, t, j, live, e);
    return true;
}

/* ---- per-tile lists ---------------------------------------------------------- */

static s2_status check_head(s2_ctx *ctx, const s2_layout *l, int q)
{
    if (q < 0 || q >= l->p->heads)
        return s2_fail(ctx, S2_ERR_INVALID, "head %d out of range (0..%d)", q, l->p->heads - 1);
    return S2_OK;
}

static void q_tile_span(const s2_layout *l, const s2_tile_geom *g, int64_t t, int64_t *m0, int64_t *m1)
{
    int bs = l->p->block_size;
    int64_t qlo = s2_max64(t * g->block_m, l->q_start), qhi = s2_min64((t + 1) * g->block_m, l->kv_len);
    *m0 = qlo / bs;
    *m1 = (qhi - 1) / bs;
}

static void kv_tile_span(const s2_layout *l, const s2_tile_geom *g, int64_t j, int64_t *n0, int64_t *n1)
{
    int bs = l->p->block_size;
    *n0 = j * g->block_n / bs;
    *n1 = (s2_min64((j + 1) * g->block_n, l->kv_len) - 1) / bs;
}

/* The candidate sources of list i (query tile i forward, key tile i
 * transposed) of head q into ss (its buffer reused), and the tiles [lo, hi]
 * the list may hold. */
static void list_sources(const s2_layout *l, const s2_tile_geom *g, int q, bool transposed, int64_t i,
                         s2_ir_srcs *ss, int64_t *lo, int64_t *hi)
{
    ss->n = 0;
    if (transposed) {
        int64_t n0, n1;
        kv_tile_span(l, g, i, &n0, &n1);
        ss->clip_lo = l->first_q_block, ss->clip_hi = l->kv_blocks - 1;
        s2_ir_tr_sources(l, q, n0, n1, ss);
        *lo = g->first_q_tile, *hi = g->first_q_tile + g->q_tiles - 1;
    } else {
        int64_t m0, m1;
        q_tile_span(l, g, i, &m0, &m1);
        ss->clip_lo = 0, ss->clip_hi = l->p->causal ? s2_min64(m1, l->kv_blocks - 1) : l->kv_blocks - 1;
        s2_ir_fwd_sources(l, q, m0, m1, ss);
        *lo = 0, *hi = g->kv_tiles - 1;
    }
}

/* Walk candidate tiles [lo, hi] of the sources and emit live entries. */
static void walk(const s2_layout *l, const s2_tile_geom *g, int q, const s2_ir_srcs *ss, bool transposed,
                 int64_t fixed, int64_t lo, int64_t hi, s2_tile_entry *out, int64_t cap, int64_t *count)
{
    int tile = transposed ? g->block_m : g->block_n;
    int64_t n = 0;
    for (int64_t x = lo; (x = s2_ir_next_tile(ss, x, tile, l->p->block_size)) <= hi; x++) {
        s2_tile_entry e;
        bool live = transposed ? s2_ir_eval_entry(l, g, q, x, fixed, &e) : s2_ir_eval_entry(l, g, q, fixed, x, &e);
        if (!live)
            continue;
        e.tile = x;
        if (n < cap)
            out[n] = e;
        n++;
    }
    *count = n;
}

/* One tile's entries: a query tile's key entries, or (transposed) a key tile's query entries. */
static s2_status tile_entries(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, int q, bool transposed, int64_t t,
                              s2_tile_entry *out, int64_t cap, int64_t *count)
{
    s2_tile_geom g;
    s2_status st = s2_ir_geom(ctx, l, spec, &g);
    if (st != S2_OK || (st = check_head(ctx, l, q)) != S2_OK)
        return st;
    if (!count || (cap > 0 && !out))
        return s2_fail(ctx, S2_ERR_INVALID, "null output");
    if (transposed ? t < 0 || t >= g.kv_tiles : t < g.first_q_tile || t >= g.first_q_tile + g.q_tiles)
        return s2_fail(ctx, S2_ERR_INVALID, "%s tile %lld out of range", transposed ? "key" : "query", (long long)t);
    s2_ir_srcs ss;
    int64_t lo, hi;
    s2_ir_srcs_init(&ss, 0, 0);
    list_sources(l, &g, q, transposed, t, &ss, &lo, &hi);
    if (!ss.oom)
        walk(l, &g, q, &ss, transposed, t, lo, hi, out, cap, count);
    bool oom = ss.oom;
    s2_ir_srcs_free(&ss);
    return oom ? s2_fail(ctx, S2_ERR_NOMEM, "out of memory") : S2_OK;
}

s2_status s2_layout_q_tile_entries(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, int q, int64_t t,
                                   s2_tile_entry *out, int64_t cap, int64_t *count)
{
    return tile_entries(ctx, l, spec, q, false, t, out, cap, count);
}

s2_status s2_layout_kv_tile_entries(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, int q, int64_t j,
                                    s2_tile_entry *out, int64_t cap, int64_t *count)
{
    return tile_entries(ctx, l, spec, q, true, j, out, cap, count);
}

int64_t s2_layout_max_entries(const s2_layout *l, s2_tile_spec spec)
{
    s2_tile_geom g;
    if (s2_ir_geom(NULL, l, spec, &g) != S2_OK)
        return 0;
    return g.q_tiles > g.kv_tiles ? g.q_tiles : g.kv_tiles;
}

/* ---- bounds without building ------------------------------------------------------ */

/* Tiles of `tile` tokens in [lo, hi] that blocks of source s touch (block
 * size bs): at most its blocks times the tiles a block spans, and at most the
 * tiles from its first block to its last.  The walk visits no other tile. */
static int64_t src_tiles(const s2_ir_src *s, int tile, int bs, int64_t lo, int64_t hi)
{
    int64_t first = src_next(s, s->lo);
    if (first < 0)
        return 0;
    int64_t last = first + (s->hi - first) / s->step * s->step;
    int64_t t0 = s2_max64(first * bs / tile, lo), t1 = s2_min64(((last + 1) * bs - 1) / tile, hi);
    if (t0 > t1)
        return 0;
    int64_t per_block = bs > tile ? bs / tile : 1;
    return s2_min64(((last - first) / s->step + 1) * per_block, t1 - t0 + 1);
}

s2_status s2_layout_entries_bound(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, bool transposed, int group,
                                  int64_t limit, int64_t *per_class, int64_t *total)
{
    if (!l || !total || group < 1)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_layout_entries_bound: invalid arguments");
    *total = 0;
    s2_tile_geom g;
    s2_status st = s2_ir_geom(ctx, l, spec, &g);
    if (st != S2_OK)
        return st;
    int64_t lists = transposed ? g.kv_tiles : g.q_tiles, first = transposed ? 0 : g.first_q_tile;
    int tile = transposed ? g.block_m : g.block_n, bs = l->p->block_size;
    for (int c = 0; per_class && c < l->num_classes; c++)
        per_class[c] = 0;
    s2_ir_srcs ss;
    s2_ir_srcs_init(&ss, 0, 0);
    for (int c = 0; c < l->num_classes && !ss.oom; c++)
        for (int64_t i = 0; i < lists && !ss.oom; i++) {
            int64_t lo, hi, n = 0;
            list_sources(l, &g, l->class_rep[c], transposed, first + i, &ss, &lo, &hi);
            for (int k = 0; k < ss.n; k++)
                n += src_tiles(&ss.v[k], tile, bs, lo, hi);
            n = s2_cdiv(s2_min64(n, hi - lo + 1), group);
            if (per_class)
                per_class[c] += n;
            *total += n;
            if (limit >= 0 && *total > limit) {
                s2_ir_srcs_free(&ss);
                return S2_OK;
            }
        }
    bool oom = ss.oom;
    s2_ir_srcs_free(&ss);
    return oom ? s2_fail(ctx, S2_ERR_NOMEM, "out of memory") : S2_OK;
}

/* ---- materialised schedules --------------------------------------------------- */

void s2_schedule_free(s2_schedule *s)
{
    if (!s)
        return;
    free(s->class_of_head);
    free(s->offsets);
    free(s->entries);
    free(s);
}

static bool grow_entries(s2_schedule *s, int64_t *cap, int64_t need)
{
    return s2_grow(&s->entries, cap, need, sizeof *s->entries, 256);
}

s2_status s2_schedule_build(s2_ctx *ctx, const s2_layout *l, s2_tile_spec spec, bool transposed, s2_schedule **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_INVALID, "null output");
    *out = NULL;
    s2_tile_geom g;
    s2_status st = s2_ir_geom(ctx, l, spec, &g);
    if (st != S2_OK)
        return st;
    int64_t lists = transposed ? g.kv_tiles : g.q_tiles, first = transposed ? 0 : g.first_q_tile;
    int64_t maxe = s2_layout_max_entries(l, spec), cap = 0;
    s2_schedule *s = calloc(1, sizeof *s);
    s2_tile_entry *tmp = malloc((size_t)maxe * sizeof *tmp);
    if (!s || !tmp)
        goto nomem;
    s->geom = g;
    s->heads = l->p->heads;
    s->num_classes = l->num_classes;
    s->transposed = transposed;
    s->class_of_head = malloc((size_t)s->heads * sizeof(int));
    s->offsets = calloc((size_t)(s->num_classes * lists + 1), sizeof(int64_t));
    if (!s->class_of_head || !s->offsets)
        goto nomem;
    memcpy(s->class_of_head, l->class_of_head, (size_t)s->heads * sizeof(int));
    int64_t total = 0;
    for (int c = 0; c < s->num_classes; c++) {
        for (int64_t i = 0; i < lists; i++) {
            int64_t n = 0;
            st = transposed ? s2_layout_kv_tile_entries(ctx, l, spec, l->class_rep[c], first + i, tmp, maxe, &n)
                            : s2_layout_q_tile_entries(ctx, l, spec, l->class_rep[c], first + i, tmp, maxe, &n);
            if (st != S2_OK)
                goto fail;
            if (!grow_entries(s, &cap, total + n))
                goto nomem;
            if (n > 0)
                memcpy(s->entries + total, tmp, (size_t)n * sizeof *tmp);
            total += n;
            s->offsets[c * lists + i + 1] = total;
        }
    }
    if (!s->entries && !grow_entries(s, &cap, 1))
        goto nomem;
    free(tmp);
    *out = s;
    return S2_OK;
nomem:
    st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
fail:
    free(tmp);
    s2_schedule_free(s);
    return st;
}
