/* A paged KV cache that frees what the sparsity pattern never reads again.
 *
 * Several sequences share one pool of pages; each (sequence, kv head) has
 * its own block table (int32, indexed (batch, kv head, page) through
 * strides, as a GPU decode kernel would read it).  Each sequence is
 * prefilled, then decoded a few tokens at a time (1, or more for a
 * speculative step), the sequences taking turns so that pages one frees are
 * reused by another.  Before every step the program asks the evictor
 * (s2c/kv_evict.h) which pages died, fills them with NaN, marks them absent
 * in the table (-1) and returns them to the pool.  Every step's attention is
 * computed twice on the CPU in float64: from the pages (s2_ref_decode_paged
 * with per-head tables) and from a dense copy of the cache that is never
 * freed (s2_ref_forward).  The two must agree bit for bit: a freed page that
 * was still needed would put NaN, or another sequence's keys, into the
 * paged result.  Prints held and peak pages against a dense cache.  Built
 * for the tests (PAGED_INDEPENDENT_RULE), both references take the mask from
 * the rule written out in tests/harness/mask_oracle.h instead of the
 * library's s2_token_kept, which the evictor is built on: an evictor and a
 * predicate that are wrong together still fail.
 *
 *   paged [--pattern FILE] [--name NAME] [--len N] [--prefill N] [--page N]
 *         [--spec N] [--batch N] [--head-dim D]          (S2C_SEED=N to repeat)
 *   --early N frees every page N positions before its time: the check must
 *   then FAIL (a test makes sure it does).
 * Exit status 0 PASS, 1 FAIL or error, 2 usage. */
#include "s2c/kv_evict.h"
#include "s2c/layout.h"
#include "s2c/pattern.h"
#include "s2c/ref.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef PAGED_PATTERN_FILE
#define PAGED_PATTERN_FILE "paged.yaml"
#endif

typedef struct config {
    const char *pattern_file, *name;
    int64_t len, prefill, page, spec, batch, head_dim;
    int64_t early;   /* free pages this many positions too early: a wrong evictor the check must catch */
} config;

/* The shared pool: page i holds page_size tokens of one (sequence, kv head). */
typedef struct pool {
    float *k, *v;              /* [num_pages][page_size][head_dim] */
    int32_t *free_list;        /* stack of free page ids */
    uint8_t *was_freed;        /* [num_pages]: handed back at least once */
    int64_t num_pages, nfree, page_size, head_dim;
    int64_t held, peak, reused, freed;
} pool;

typedef struct seq {
    int64_t prefill, len, cur;   /* tokens 0 .. cur-1 are in the cache */
    float *k, *v;                /* the dense copy: [len][kv_heads][head_dim], never freed */
} seq;

typedef struct run {
    config cfg;
    const s2_pattern *p;
    s2_kv_evictor *ev;
    pool pool;
    seq *seqs;
    int32_t *table;              /* [batch][kv_heads][max_pages] */
    int64_t table_strides[3];
    int64_t max_pages;
    uint64_t rng;
    int64_t steps, checked_rows;
    double max_diff;
} run;

/* ---- random data ----------------------------------------------------------- */

static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float rand_unit(uint64_t *s) { return (float)((double)(next_u64(s) >> 11) * 0x1p-53 * 2.0 - 1.0); }

/* ---- the pool ---------------------------------------------------------------- */

static int pool_init(pool *pl, int64_t num_pages, int64_t page_size, int64_t head_dim)
{
    memset(pl, 0, sizeof *pl);
    size_t elems = (size_t)(num_pages * page_size * head_dim);
    pl->k = malloc(elems * sizeof(float));
    pl->v = malloc(elems * sizeof(float));
    pl->free_list = malloc((size_t)num_pages * sizeof(int32_t));
    pl->was_freed = calloc((size_t)num_pages, 1);
    if (!pl->k || !pl->v || !pl->free_list || !pl->was_freed)
        return -1;
    pl->num_pages = pl->nfree = num_pages;
    pl->page_size = page_size;
    pl->head_dim = head_dim;
    for (int64_t i = 0; i < num_pages; i++)
        pl->free_list[i] = (int32_t)(num_pages - 1 - i);
    for (size_t i = 0; i < elems; i++)
        pl->k[i] = pl->v[i] = NAN;
    return 0;
}

static void pool_destroy(pool *pl)
{
    free(pl->k);
    free(pl->v);
    free(pl->free_list);
    free(pl->was_freed);
}

static int32_t pool_alloc(pool *pl)
{
    if (pl->nfree == 0)
        return -1;
    int32_t id = pl->free_list[--pl->nfree];
    pl->reused += pl->was_freed[id];
    if (++pl->held > pl->peak)
        pl->peak = pl->held;
    return id;
}

/* Poisoned, so that a read of a freed page cannot go unnoticed. */
static void pool_release(pool *pl, int32_t id)
{
    size_t n = (size_t)(pl->page_size * pl->head_dim), off = (size_t)id * n;
    for (size_t i = 0; i < n; i++)
        pl->k[off + i] = pl->v[off + i] = NAN;
    pl->was_freed[id] = 1;
    pl->free_list[pl->nfree++] = id;
    pl->held--;
    pl->freed++;
}

/* ---- the cache of one sequence ------------------------------------------------ */

static int32_t *table_at(run *r, int64_t b, int g, int64_t page)
{
    return &r->table[b * r->table_strides[0] + g * r->table_strides[1] + page * r->table_strides[2]];
}

/* Token t of sequence b: random K and V into its page (allocated at the
 * page's first token) and into the dense copy. */
static int append_token(run *r, int64_t b, int64_t t)
{
    int kvh = r->p->kv_heads;
    int64_t P = r->cfg.page, D = r->cfg.head_dim;
    seq *s = &r->seqs[b];
    for (int g = 0; g < kvh; g++) {
        int32_t *slot = table_at(r, b, g, t / P);
        if (t % P == 0) {
            if ((*slot = pool_alloc(&r->pool)) < 0) {
                fprintf(stderr, "paged: the pool of %" PRId64 " pages is exhausted\n", r->pool.num_pages);
                return -1;
            }
        }
        float *kp = r->pool.k + ((int64_t)*slot * P + t % P) * D, *vp = r->pool.v + ((int64_t)*slot * P + t % P) * D;
        float *kd = s->k + (t * kvh + g) * D, *vd = s->v + (t * kvh + g) * D;
        for (int64_t d = 0; d < D; d++) {
            kp[d] = kd[d] = rand_unit(&r->rng);
            vp[d] = vd[d] = rand_unit(&r->rng);
        }
    }
    return 0;
}

/* Advancing sequence b from position `from` to `to`: hand back what died. */
static int evict(run *r, int64_t b, int64_t from, int64_t to, s2_ctx *ctx)
{
    int64_t max_len = s2_kv_evictor_max_len(r->ev);
    from = from + r->cfg.early < max_len ? from + r->cfg.early : max_len;
    to = to + r->cfg.early < max_len ? to + r->cfg.early : max_len;
    if (to <= from)
        return 0;
    for (int g = 0; g < r->p->kv_heads; g++) {
        int64_t pages[256], count = 0;
        if (s2_kv_evictor_step(ctx, r->ev, g, from, to - from, pages, 256, &count) != S2_OK)
            return -1;
        if (count > 256) { /* rare: a long prefill; ask again with room */
            int64_t *big = malloc((size_t)count * sizeof *big);
            if (!big || s2_kv_evictor_step(ctx, r->ev, g, from, to - from, big, count, &count) != S2_OK) {
                free(big);
                return -1;
            }
            for (int64_t i = 0; i < count; i++) {
                pool_release(&r->pool, *table_at(r, b, g, big[i]));
                *table_at(r, b, g, big[i]) = -1;
            }
            free(big);
            continue;
        }
        for (int64_t i = 0; i < count; i++) {
            int32_t *slot = table_at(r, b, g, pages[i]);
            if (*slot < 0) {
                fprintf(stderr, "paged: page %" PRId64 " of kv head %d freed twice\n", pages[i], g);
                return -1;
            }
            pool_release(&r->pool, *slot);
            *slot = -1;
        }
    }
    return 0;
}

/* ---- one decode step, checked ------------------------------------------------- */

#ifdef PAGED_INDEPENDENT_RULE
#include "mask_oracle.h"
#define paged_token_kept s2t_oracle_token_kept
#else
#define paged_token_kept s2_token_kept
#endif

static bool mask_fn(const void *user, int q_head, int64_t qpos, int64_t kpos)
{
    return paged_token_kept((const s2_pattern *)user, q_head, qpos, kpos);
}

/* n queries at positions cur .. cur+n-1 of sequence b, attended from the
 * pages and from the dense copy; the two outputs must be identical. */
static int check_step(run *r, int64_t b, int64_t n, s2_ctx *ctx)
{
    const s2_pattern *p = r->p;
    seq *s = &r->seqs[b];
    int H = p->heads, KH = p->kv_heads, D = (int)r->cfg.head_dim;
    size_t qn = (size_t)(n * H * D);
    float *q = malloc(qn * sizeof(float)), *o_paged = malloc(qn * sizeof(float)), *o_dense = malloc(qn * sizeof(float));
    int rc = -1;
    if (!q || !o_paged || !o_dense)
        goto done;
    for (size_t i = 0; i < qn; i++) {
        q[i] = rand_unit(&r->rng);
        o_paged[i] = o_dense[i] = NAN;
    }
    int64_t kv_len = s->cur + n;
    s2_tensor tq = s2_tensor_bshd(q, S2_DTYPE_F32, n, H, D);
    s2_tensor to_paged = s2_tensor_bshd(o_paged, S2_DTYPE_F32, n, H, D);
    s2_tensor to_dense = s2_tensor_bshd(o_dense, S2_DTYPE_F32, n, H, D);
    /* A page holds one kv head: the pool's kv-head stride is 0. */
    int64_t P = r->cfg.page;
    s2_tensor kp = {r->pool.k, S2_DTYPE_F32, {P * D, D, 0, 1}};
    s2_tensor vp = {r->pool.v, S2_DTYPE_F32, {P * D, D, 0, 1}};
    s2_ref_paged_problem pp = {
        .batch = 1, .heads = H, .kv_heads = KH, .head_dim = D, .q_len = n, .kv_lens = &kv_len,
        .block_table = table_at(r, b, 0, 0), .max_pages_per_seq = r->max_pages, .num_pages = r->pool.num_pages,
        .page_size = (int)P, .causal = p->causal, .mask = mask_fn, .mask_user = p,
        .table_strides = r->table_strides,
    };
    if (s2_ref_decode_paged(ctx, &pp, &tq, &kp, &vp, &to_paged, NULL) != S2_OK)
        goto done;
    s2_tensor kd = s2_tensor_bshd(s->k, S2_DTYPE_F32, s->len, KH, D);
    s2_tensor vd = s2_tensor_bshd(s->v, S2_DTYPE_F32, s->len, KH, D);
    s2_ref_problem dp = {
        .batch = 1, .heads = H, .kv_heads = KH, .head_dim = D, .q_len = n, .kv_len = kv_len,
        .causal = p->causal, .mask = mask_fn, .mask_user = p,
    };
    if (s2_ref_forward(ctx, &dp, &tq, &kd, &vd, &to_dense, NULL) != S2_OK)
        goto done;
    rc = 0;
    for (size_t i = 0; i < qn; i++) {
        double diff = fabs((double)o_paged[i] - (double)o_dense[i]);
        if (!(diff == 0.0) && !(isnan(o_dense[i]) && isnan(o_paged[i]))) {
            fprintf(stderr, "paged: FAIL at sequence %" PRId64 ", queries %" PRId64 "..%" PRId64 ", element %zu: "
                            "paged %.9g, dense %.9g\n", b, s->cur, s->cur + n - 1, i, o_paged[i], o_dense[i]);
            rc = 1;
            break;
        }
        if (isnan(o_dense[i])) {
            fprintf(stderr, "paged: the dense reference gave NaN\n");
            rc = 1;
            break;
        }
    }
    r->checked_rows += n * H;
done:
    free(q);
    free(o_paged);
    free(o_dense);
    return rc;
}

/* ---- setup ---------------------------------------------------------------------- */

static int parse_args(int argc, char **argv, config *c)
{
    *c = (config){.pattern_file = PAGED_PATTERN_FILE, .len = 640, .prefill = 200, .page = 32, .spec = 3, .batch = 3,
                  .head_dim = 16};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t *dst = !strcmp(k, "--len") ? &c->len : !strcmp(k, "--prefill") ? &c->prefill
                     : !strcmp(k, "--page") ? &c->page : !strcmp(k, "--spec") ? &c->spec
                     : !strcmp(k, "--batch") ? &c->batch : !strcmp(k, "--head-dim") ? &c->head_dim
                     : !strcmp(k, "--early") ? &c->early : NULL;
        if (!v || (!dst && strcmp(k, "--pattern") && strcmp(k, "--name"))) {
            fprintf(stderr, "usage: paged [--pattern FILE] [--name NAME] [--len N] [--prefill N] [--page N] "
                            "[--spec N] [--batch N] [--head-dim D] [--early N]\n");
            return 2;
        }
        if (!strcmp(k, "--pattern"))
            c->pattern_file = v;
        else if (!strcmp(k, "--name"))
            c->name = v;
        else
            *dst = strtoll(v, NULL, 10);
        i++;
    }
    if (c->len < 2 || c->prefill < 0 || c->prefill >= c->len || c->page < 16 || c->page % 16 || c->spec < 1 ||
        c->batch < 1 || c->batch > 64 || c->head_dim < 1 || c->head_dim > 256 || c->early < 0) {
        fprintf(stderr, "paged: need len >= 2, 0 <= prefill < len, page a multiple of 16, spec >= 1, "
                        "batch 1..64, head-dim 1..256\n");
        return 2;
    }
    return 0;
}

static uint64_t seed_from_env(void)
{
    const char *s = getenv("S2C_SEED");
    return s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL);
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Step k of a sequence at position cur decodes 1, 2, .., spec tokens in turn. */
static int64_t step_tokens(const run *r, const seq *s, int64_t k)
{
    int64_t n = 1 + k % r->cfg.spec;
    return n < s->len - s->cur ? n : s->len - s->cur;
}

/* Sequence b: prompt and total length differ per sequence (shorter ones
 * finish first), so pages freed by one are reused by the others. */
static int setup_seqs(run *r)
{
    const config *c = &r->cfg;
    r->seqs = calloc((size_t)c->batch, sizeof *r->seqs);
    if (!r->seqs)
        return -1;
    for (int64_t b = 0; b < c->batch; b++) {
        seq *s = &r->seqs[b];
        s->len = c->len - b * (c->len / (4 * c->batch));
        s->prefill = c->prefill * (c->batch - b) / c->batch;
        if (s->prefill >= s->len)
            s->prefill = s->len - 1;
        size_t n = (size_t)(s->len * r->p->kv_heads * c->head_dim);
        s->k = malloc(n * sizeof(float));
        s->v = malloc(n * sizeof(float));
        if (!s->k || !s->v)
            return -1;
    }
    return 0;
}

/* Pages of sequence s after its step to position cur (cur < max_len),
 * from the evictor's accounting. */
static int64_t predicted_held(const run *r, int64_t cur)
{
    int64_t held = 0, P = r->cfg.page;
    for (int g = 0; g < r->p->kv_heads; g++)
        held += cdiv(cur, P) - (cur / P + 1 - s2_kv_evictor_held_pages(r->ev, g, cur));
    return held;
}

/* The most pages sequence s holds under its step schedule: the prefill, or
 * a step's queries while they run (its new pages open before its frees). */
static int64_t seq_peak(const run *r, seq *s)
{
    int64_t P = r->cfg.page, KH = r->p->kv_heads, peak = KH * cdiv(s->prefill, P);
    s->cur = s->prefill;
    for (int64_t k = 0; s->cur < s->len; k++) {
        int64_t n = step_tokens(r, s, k), held = KH * ((s->cur + n - 1) / P - s->cur / P);
        for (int g = 0; g < KH; g++)
            held += s2_kv_evictor_held_pages(r->ev, g, s->cur);
        peak = held > peak ? held : peak;
        s->cur += n;
    }
    s->cur = 0;
    return peak;
}

static void free_seq_pages(run *r, int64_t b)
{
    for (int g = 0; g < r->p->kv_heads; g++)
        for (int64_t j = 0; j < cdiv(r->seqs[b].len, r->cfg.page); j++) {
            int32_t *slot = table_at(r, b, g, j);
            if (*slot >= 0)
                pool_release(&r->pool, *slot);
            *slot = -1;
        }
}

/* One turn of sequence b: a prefill or a decode step, checked, then evict. */
static int take_turn(run *r, int64_t b, int64_t k, s2_ctx *ctx)
{
    seq *s = &r->seqs[b];
    int64_t n = step_tokens(r, s, k);
    for (int64_t t = s->cur; t < s->cur + n; t++)
        if (append_token(r, b, t))
            return -1;
    int rc = check_step(r, b, n, ctx);
    if (rc)
        return rc;
    if (evict(r, b, s->cur, s->cur + n, ctx))
        return -1;
    s->cur += n;
    r->steps++;
    if (s->cur == s->len)
        free_seq_pages(r, b);
    return 0;
}

static int prefill_all(run *r, s2_ctx *ctx)
{
    for (int64_t b = 0; b < r->cfg.batch; b++) {
        seq *s = &r->seqs[b];
        for (int64_t t = 0; t < s->prefill; t++)
            if (append_token(r, b, t))
                return -1;
        if (evict(r, b, 0, s->prefill, ctx))
            return -1;
        s->cur = s->prefill;
    }
    return 0;
}

/* Round robin over the sequences until all are done; after every turn the
 * pool must hold exactly what the evictor's accounting says. */
static int decode_all(run *r, s2_ctx *ctx)
{
    bool active = true;
    for (int64_t k = 0; active; k++) {
        active = false;
        int64_t expect = 0;
        for (int64_t b = 0; b < r->cfg.batch; b++) {
            seq *s = &r->seqs[b];
            if (s->cur < s->len) {
                int rc = take_turn(r, b, k, ctx);
                if (rc)
                    return rc;
            }
            if (s->cur < s->len) {
                active = true;
                expect += predicted_held(r, s->cur);
            }
        }
        if (r->cfg.early == 0 && r->pool.held != expect) {
            fprintf(stderr, "paged: FAIL: %" PRId64 " pages held after round %" PRId64 ", the evictor says %" PRId64 "\n",
                    r->pool.held, k, expect);
            return 1;
        }
    }
    return 0;
}

static int load_pattern(s2_ctx *ctx, const config *c, s2_pattern_set **set, const s2_pattern **p)
{
    if (s2_pattern_load(ctx, c->pattern_file, set) != S2_OK)
        return -1;
    *p = c->name ? s2_pattern_set_find(*set, c->name) : s2_pattern_set_get(*set, 0);
    if (!*p) {
        fprintf(stderr, "paged: %s has no pattern named %s\n", c->pattern_file, c->name);
        return 1;
    }
    return 0;
}

static void print_summary(const run *r, int64_t dense, int64_t bound)
{
    const s2_pattern *p = r->p;
    printf("pattern %s: %d heads, %d kv heads, block %d; page %" PRId64 ", head_dim %" PRId64 ", %" PRId64
           " sequences up to %" PRId64 " tokens, steps of 1..%" PRId64 " tokens\n",
           p->name, p->heads, p->kv_heads, p->block_size, r->cfg.page, r->cfg.head_dim, r->cfg.batch, r->cfg.len,
           r->cfg.spec);
    printf("kv-cache efficient: %s%s\n", s2_kv_evictor_efficient(r->ev) ? "yes" : "no: ", s2_kv_evictor_note(r->ev));
    printf("%4s %8s %8s %10s %10s %7s\n", "seq", "prefill", "len", "dense_pg", "held_end", "held%");
    for (int64_t b = 0; b < r->cfg.batch; b++) {
        const seq *s = &r->seqs[b];
        int64_t d = p->kv_heads * cdiv(s->len, r->cfg.page), held = 0;
        for (int g = 0; g < p->kv_heads; g++)
            held += s2_kv_evictor_held_pages(r->ev, g, s->len - 1);
        printf("%4" PRId64 " %8" PRId64 " %8" PRId64 " %10" PRId64 " %10" PRId64 " %6.2f%%\n", b, s->prefill, s->len,
               d, held, 100.0 * (double)held / (double)d);
    }
    printf("pool %" PRId64 " pages (dense would need %" PRId64 "), peak held %" PRId64 " (%.2f%% of dense), "
           "%" PRId64 " frees, %" PRId64 " allocations of freed pages\n",
           bound, dense, r->pool.peak, 100.0 * (double)r->pool.peak / (double)dense, r->pool.freed, r->pool.reused);
    printf("%" PRId64 " steps, %" PRId64 " query rows checked: paged == dense bit for bit\n", r->steps,
           r->checked_rows);
}

static int run_all(run *r, s2_ctx *ctx)
{
    const config *c = &r->cfg;
    if (s2_kv_evictor_new(ctx, r->p, (int)c->page, c->len, &r->ev) != S2_OK || setup_seqs(r))
        return -1;
    int64_t dense = 0, bound = 0;
    for (int64_t b = 0; b < c->batch; b++) {
        bound += seq_peak(r, &r->seqs[b]);
        dense += r->p->kv_heads * cdiv(r->seqs[b].len, c->page);
    }
    r->max_pages = cdiv(c->len, c->page);
    r->table_strides[0] = r->p->kv_heads * r->max_pages;
    r->table_strides[1] = r->max_pages;
    r->table_strides[2] = 1;
    r->table = malloc((size_t)(c->batch * r->table_strides[0]) * sizeof(int32_t));
    if (!r->table || pool_init(&r->pool, bound, c->page, c->head_dim))
        return -1;
    for (int64_t i = 0; i < c->batch * r->table_strides[0]; i++)
        r->table[i] = -1;
    int rc = prefill_all(r, ctx);
    if (!rc)
        rc = decode_all(r, ctx);
    if (rc)
        return rc;
    print_summary(r, dense, bound);
    if (r->pool.held != 0 || r->pool.nfree != r->pool.num_pages) {
        fprintf(stderr, "paged: FAIL: %" PRId64 " pages still held at the end\n", r->pool.held);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    run r;
    memset(&r, 0, sizeof r);
    int rc = parse_args(argc, argv, &r.cfg);
    if (rc)
        return rc;
    uint64_t seed = seed_from_env();
    r.rng = seed;
    printf("seed %" PRIu64 " (S2C_SEED to repeat)\n", seed);
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = NULL;
    if (!ctx)
        return 1;
    rc = load_pattern(ctx, &r.cfg, &set, &r.p);
    if (!rc)
        rc = run_all(&r, ctx);
    if (rc < 0)
        fprintf(stderr, "paged: %s\n", s2_ctx_message(ctx)[0] ? s2_ctx_message(ctx) : "out of memory");
    printf("%s\n", rc ? "FAIL" : "PASS");
    for (int64_t b = 0; r.seqs && b < r.cfg.batch; b++) {
        free(r.seqs[b].k);
        free(r.seqs[b].v);
    }
    free(r.seqs);
    free(r.table);
    pool_destroy(&r.pool);
    s2_kv_evictor_free(r.ev);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
    return rc ? 1 : 0;
}
