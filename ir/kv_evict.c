/* KV-cache eviction: per (kv head, page) the position after which nothing
 * reads the page, from the pattern's block liveness, and the pages sorted by
 * that position so that a decode step finds what it frees by binary search. */
#include "s2c/kv_evict.h"
#include "s2c/layout.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/* A page handed back at `release`. */
typedef struct rel_entry {
    int64_t release;
    int64_t page;
    int32_t head;
} rel_entry;

struct s2_kv_evictor {
    s2_arena arena;
    int kv_heads, page_size;
    int64_t max_len, num_pages;
    int64_t *death;         /* [kv_heads * num_pages] */
    int64_t *release;       /* [kv_heads * num_pages]; S2_LIVE_FOREVER when not before max_len */
    int64_t *head_off;      /* [kv_heads + 1]: head h's released pages are by_head[head_off[h] ..) */
    rel_entry *by_head;     /* per head, by (release, page) */
    rel_entry *all;         /* every head, by (release, head, page) */
    int64_t num_released;
    bool efficient;
    char *note;
};

static int cmp_rel(const void *a, const void *b)
{
    const rel_entry *x = a, *y = b;
    if (x->release != y->release)
        return x->release < y->release ? -1 : 1;
    if (x->head != y->head)
        return x->head < y->head ? -1 : 1;
    return (x->page > y->page) - (x->page < y->page);
}

/* First position at which key block n of kv head h is dead. */
static int64_t block_death(const s2_pattern *p, int h, int64_t n, int64_t max_len)
{
    int64_t last = s2_kv_last_reader_group(p, h, n, max_len);
    if (last == S2_LIVE_FOREVER)
        return S2_LIVE_FOREVER;
    return last < 0 ? 0 : last + 1;
}

static int64_t page_end(const s2_kv_evictor *ev, int64_t j)
{
    return s2_min64((j + 1) * ev->page_size, ev->max_len);
}

/* death of every page of head h: the latest death of the blocks it overlaps
 * (block_death is scratch of one entry per block). */
static void compute_head(s2_kv_evictor *ev, const s2_pattern *p, int h, int64_t *bdeath, int64_t nblocks)
{
    int bs = p->block_size;
    for (int64_t n = 0; n < nblocks; n++)
        bdeath[n] = block_death(p, h, n, ev->max_len);
    for (int64_t j = 0; j < ev->num_pages; j++) {
        int64_t first = j * ev->page_size / bs, last = (page_end(ev, j) - 1) / bs, d = 0;
        for (int64_t n = first; n <= last; n++)
            d = s2_max64(d, bdeath[n]);
        int64_t r = s2_max64(d, page_end(ev, j));
        ev->death[(int64_t)h * ev->num_pages + j] = d;
        ev->release[(int64_t)h * ev->num_pages + j] = r >= ev->max_len ? S2_LIVE_FOREVER : r;
    }
}

static s2_status check_efficiency(s2_ctx *ctx, s2_kv_evictor *ev, const s2_pattern *p)
{
    s2_layout *l = NULL;
    s2_status st = s2_layout_new(ctx, p, ev->max_len, ev->max_len, &l);
    if (st != S2_OK)
        return st;
    s2_ctx *probe = s2_ctx_new();
    if (!probe) {
        s2_layout_free(l);
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    bool ok = false;
    st = s2_layout_check_kv_efficient(probe, l, &ok);
    if (st != S2_OK)
        s2_fail(ctx, st, "%s", s2_ctx_message(probe));
    ev->efficient = ok;
    ev->note = s2_arena_strdup(&ev->arena, ok ? "" : s2_ctx_message(probe));
    if (st == S2_OK && !ev->note)
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    s2_ctx_free(probe);
    s2_layout_free(l);
    return st;
}

static s2_status sort_released(s2_ctx *ctx, s2_kv_evictor *ev)
{
    int64_t total = ev->kv_heads * ev->num_pages, k = 0;
    for (int64_t i = 0; i < total; i++)
        k += ev->release[i] != S2_LIVE_FOREVER;
    ev->num_released = k;
    ev->head_off = s2_arena_array(&ev->arena, (size_t)ev->kv_heads + 1, sizeof *ev->head_off);
    ev->by_head = s2_arena_array(&ev->arena, (size_t)s2_max64(k, 1), sizeof *ev->by_head);
    ev->all = s2_arena_array(&ev->arena, (size_t)s2_max64(k, 1), sizeof *ev->all);
    if (!ev->head_off || !ev->by_head || !ev->all)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory for %lld released pages", (long long)k);
    k = 0;
    for (int h = 0; h < ev->kv_heads; h++) {
        ev->head_off[h] = k;
        for (int64_t j = 0; j < ev->num_pages; j++) {
            int64_t r = ev->release[(int64_t)h * ev->num_pages + j];
            if (r != S2_LIVE_FOREVER)
                ev->by_head[k++] = (rel_entry){.release = r, .page = j, .head = h};
        }
        qsort(ev->by_head + ev->head_off[h], (size_t)(k - ev->head_off[h]), sizeof *ev->by_head, cmp_rel);
    }
    ev->head_off[ev->kv_heads] = k;
    if (k)
        memcpy(ev->all, ev->by_head, (size_t)k * sizeof *ev->all);
    qsort(ev->all, (size_t)k, sizeof *ev->all, cmp_rel);
    return S2_OK;
}

/* Every page's death and release, head by head. */
static s2_status compute_pages(s2_ctx *ctx, s2_kv_evictor *ev, const s2_pattern *p)
{
    int64_t nblocks = s2_cdiv(ev->max_len, p->block_size);
    size_t cells = (size_t)ev->kv_heads * (size_t)ev->num_pages;
    ev->death = s2_arena_array(&ev->arena, cells, sizeof *ev->death);
    ev->release = s2_arena_array(&ev->arena, cells, sizeof *ev->release);
    int64_t *bdeath = malloc((size_t)nblocks * sizeof *bdeath);
    if (!ev->death || !ev->release || !bdeath) {
        free(bdeath);
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory for %zu pages", cells);
    }
    for (int h = 0; h < ev->kv_heads; h++)
        compute_head(ev, p, h, bdeath, nblocks);
    free(bdeath);
    return S2_OK;
}

s2_status s2_kv_evictor_new(s2_ctx *ctx, const s2_pattern *p, int page_size, int64_t max_len, s2_kv_evictor **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_kv_evictor_new: out is NULL");
    *out = NULL;
    if (!p || !p->rules || p->kv_heads < 1 || p->heads % p->kv_heads != 0 || p->block_size < 1)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_kv_evictor_new: no valid pattern");
    if (page_size < 16 || page_size % 16 != 0)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_kv_evictor_new: page_size %d is not a positive multiple of 16", page_size);
    if (max_len < 1 || max_len > S2_MAX_SEQ_LEN)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_kv_evictor_new: max_len %lld outside [1, %lld]", (long long)max_len,
                       (long long)S2_MAX_SEQ_LEN);
    s2_kv_evictor *ev = s2_arena_boxed(sizeof *ev, offsetof(s2_kv_evictor, arena));
    if (!ev)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    ev->kv_heads = p->kv_heads;
    ev->page_size = page_size;
    ev->max_len = max_len;
    ev->num_pages = s2_cdiv(max_len, page_size);
    s2_status st = check_efficiency(ctx, ev, p);
    if (st == S2_OK)
        st = compute_pages(ctx, ev, p);
    if (st == S2_OK)
        st = sort_released(ctx, ev);
    return S2_HAND_OVER(st, out, ev, s2_kv_evictor_free);
}

void s2_kv_evictor_free(s2_kv_evictor *ev)
{
    if (ev)
        s2_arena_free_boxed(&ev->arena);
}

int s2_kv_evictor_kv_heads(const s2_kv_evictor *ev) { return ev ? ev->kv_heads : 0; }
int s2_kv_evictor_page_size(const s2_kv_evictor *ev) { return ev ? ev->page_size : 0; }
int64_t s2_kv_evictor_max_len(const s2_kv_evictor *ev) { return ev ? ev->max_len : 0; }
int64_t s2_kv_evictor_num_pages(const s2_kv_evictor *ev) { return ev ? ev->num_pages : 0; }
bool s2_kv_evictor_efficient(const s2_kv_evictor *ev) { return ev && ev->efficient; }
const char *s2_kv_evictor_note(const s2_kv_evictor *ev) { return ev && ev->note ? ev->note : ""; }
int64_t s2_kv_evictor_freeable_pages(const s2_kv_evictor *ev) { return ev ? ev->num_released : 0; }

static bool cell_ok(const s2_kv_evictor *ev, int h, int64_t page)
{
    return ev && h >= 0 && h < ev->kv_heads && page >= 0 && page < ev->num_pages;
}

int64_t s2_kv_evictor_death(const s2_kv_evictor *ev, int h, int64_t page)
{
    return cell_ok(ev, h, page) ? ev->death[(int64_t)h * ev->num_pages + page] : -1;
}

int64_t s2_kv_evictor_release(const s2_kv_evictor *ev, int h, int64_t page)
{
    return cell_ok(ev, h, page) ? ev->release[(int64_t)h * ev->num_pages + page] : -1;
}

bool s2_kv_evictor_page_live(const s2_kv_evictor *ev, int h, int64_t page, int64_t p)
{
    return cell_ok(ev, h, page) && p < ev->death[(int64_t)h * ev->num_pages + page];
}

/* Entries of v[0, n) with release <= x (v sorted by release). */
static int64_t count_released(const rel_entry *v, int64_t n, int64_t x)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (v[mid].release <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static s2_status check_step(s2_ctx *ctx, const char *fn, const s2_kv_evictor *ev, int64_t p, int64_t n, int64_t cap,
                            const void *out, const int64_t *count)
{
    if (!ev || !count)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: null argument", fn);
    if (cap < 0 || (cap > 0 && !out))
        return s2_fail(ctx, S2_ERR_INVALID, "%s: cap %lld with %s output", fn, (long long)cap, out ? "an" : "no");
    if (p < 0 || n < 1 || n > ev->max_len - p)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: step from %lld by %lld leaves [0, max_len %lld]", fn, (long long)p,
                       (long long)n, (long long)ev->max_len);
    return S2_OK;
}

s2_status s2_kv_evictor_step(s2_ctx *ctx, const s2_kv_evictor *ev, int h, int64_t p, int64_t n, int64_t *pages,
                             int64_t cap, int64_t *count)
{
    s2_status st = check_step(ctx, "s2_kv_evictor_step", ev, p, n, cap, pages, count);
    if (st != S2_OK)
        return st;
    if (h < 0 || h >= ev->kv_heads)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_kv_evictor_step: kv head %d outside [0, %d)", h, ev->kv_heads);
    const rel_entry *v = ev->by_head + ev->head_off[h];
    int64_t len = ev->head_off[h + 1] - ev->head_off[h];
    int64_t a = count_released(v, len, p), b = count_released(v, len, p + n);
    *count = b - a;
    for (int64_t i = a; i < b && i - a < cap; i++)
        pages[i - a] = v[i].page;
    return S2_OK;
}

s2_status s2_kv_evictor_step_all(s2_ctx *ctx, const s2_kv_evictor *ev, int64_t p, int64_t n, s2_kv_page *out,
                                 int64_t cap, int64_t *count)
{
    s2_status st = check_step(ctx, "s2_kv_evictor_step_all", ev, p, n, cap, out, count);
    if (st != S2_OK)
        return st;
    int64_t a = count_released(ev->all, ev->num_released, p), b = count_released(ev->all, ev->num_released, p + n);
    *count = b - a;
    for (int64_t i = a; i < b && i - a < cap; i++)
        out[i - a] = (s2_kv_page){.head = ev->all[i].head, .page = ev->all[i].page};
    return S2_OK;
}

int64_t s2_kv_evictor_held_pages(const s2_kv_evictor *ev, int h, int64_t p)
{
    if (!ev || h < 0 || h >= ev->kv_heads || p < 0 || p >= ev->max_len)
        return -1;
    int64_t len = ev->head_off[h + 1] - ev->head_off[h];
    return p / ev->page_size + 1 - count_released(ev->by_head + ev->head_off[h], len, p);
}

/* Pages held over every kv head while query p runs. */
static int64_t held_total(const s2_kv_evictor *ev, int64_t p)
{
    return (int64_t)ev->kv_heads * (p / ev->page_size + 1) - count_released(ev->all, ev->num_released, p);
}

s2_status s2_kv_evictor_memory(s2_ctx *ctx, const s2_kv_evictor *ev, int64_t prefill_len, int64_t seq_len,
                               s2_kv_memory *out)
{
    if (!ev || !out)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_kv_evictor_memory: null argument");
    if (seq_len < 1 || seq_len > ev->max_len || prefill_len < 0 || prefill_len > seq_len)
        return s2_fail(ctx, S2_ERR_INVALID,
                       "s2_kv_evictor_memory: need 0 <= prefill %lld <= seq_len %lld <= max_len %lld, seq_len >= 1",
                       (long long)prefill_len, (long long)seq_len, (long long)ev->max_len);
    int64_t P = ev->page_size, last = seq_len - 1;
    memset(out, 0, sizeof *out);
    out->prefill_len = prefill_len;
    out->seq_len = seq_len;
    out->dense_pages = (int64_t)ev->kv_heads * s2_cdiv(seq_len, P);
    int64_t prefill_pages = (int64_t)ev->kv_heads * s2_cdiv(prefill_len, P);
    bool decodes = prefill_len < seq_len;
    out->held_pages = decodes ? held_total(ev, last) : prefill_pages;
    /* Between page starts only releases happen, so the peak of the decode
     * is at its first step or at a step that opens a page. */
    out->peak_pages = prefill_pages;
    if (decodes) {
        out->peak_pages = s2_max64(out->peak_pages, held_total(ev, prefill_len));
        for (int64_t x = s2_cdiv(prefill_len + 1, P) * P; x <= last; x += P)
            out->peak_pages = s2_max64(out->peak_pages, held_total(ev, x));
    }
    out->held_min_head = INT64_MAX;
    for (int h = 0; h < ev->kv_heads; h++) {
        int64_t v = decodes ? s2_kv_evictor_held_pages(ev, h, last) : s2_cdiv(prefill_len, P);
        out->held_min_head = s2_min64(out->held_min_head, v);
        out->held_max_head = s2_max64(out->held_max_head, v);
    }
    out->held_fraction = (double)out->held_pages / (double)out->dense_pages;
    out->peak_fraction = (double)out->peak_pages / (double)out->dense_pages;
    return S2_OK;
}
