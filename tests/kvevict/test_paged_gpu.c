/* KV eviction with the real GPU decode kernel: a paged cache that frees what
 * the pattern never reads again stays correct under s2_attn_decode.
 *
 * The scenario of examples/paged/paged.c, on the device: K / V pools (bf16
 * at d128; other cases f16 or bf16 at head dims 16 to 256)
 * laid out (page, slot, kv head = stride 0: one kv head per page, d), one
 * int32 block table per (sequence, kv head) (table strides (batch, kv head),
 * head stride non-zero).  Three sequences of different lengths are prefilled
 * one after the other, then decode in turns, 1 token per step and every
 * third step a speculative one of n tokens (group * n <= 16).  Around every
 * step the evictor (s2c/kv_evict.h) names the pages that died; they are
 * filled with NaN bit patterns on the device, their table entries set to -1,
 * and the free list (a stack) hands them to the next token that opens a
 * page, of any sequence.  Each step launches s2_attn_decode (batch 1, the
 * sequence's table rows; split-KV heuristic; on every fourth step also
 * splits = 1, on as many others a forced 3-way split) and compares o and
 * lse with s2_ref_forward (float64) on a dense copy of the sequence's K / V
 * that is never freed, masked by the rule of tests/harness/mask_oracle.h (not
 * the library's predicate, which the evictor is built on).
 *
 * Tolerances: per (token, head) row relative Frobenius error of o <= 2e-2
 * (bf16) / 5e-3 (f16), |lse - ref| <= 2e-3 (as tests/decode/test_decode_gpu.c); NaN
 * anywhere fails.  So that the check can fail, one launch per case runs with
 * a live page poisoned and must give NaN.  The pool is sized by a dry run to
 * the peak the schedule needs (below a dense cache); every case must free
 * pages and reuse freed pages.
 * S2C_PAGED_CASES=substring runs the cases whose name contains it.
 * Seeded (printed; S2C_SEED=N repeats).  Exits 77 without libcuda.so.1 or a
 * device; CUDA lives in this process, so Check does not fork. */
#include "s2c/compile.h"
#include "s2c/attn_runtime.h"
#include "s2c/codegen.h"
#include "s2c/decode.h"
#include "s2c/kv_evict.h"
#include "s2c/layout.h"
#include "s2c/ref.h"
#include "util.h"

#include <check.h>
#include "gpu_harness.h"
#include "mask_oracle.h"
#include "poison.h"
#include "rand_pattern.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pg_case {
    const char *name, *file;
    int page;
    int64_t max_len;     /* the longest sequence; the evictor's and the lists' bound */
    int64_t decode;      /* tokens decoded by sequence 0 (the others fewer) */
    int spec;            /* tokens of a speculative step */
    s2_dtype dt;
    int head_dim;
} pg_case;

static const pg_case cases[] = {
    {"l16v8_p16", "decode-l16v8.yaml", 16, 2000, 140, 4, S2_DTYPE_BF16, 128},
    {"l16v8_p128", "decode-l16v8.yaml", 128, 2300, 140, 5, S2_DTYPE_BF16, 128},
    {"s2l8v16_p64", "s2-l8v16.yaml", 64, 2000, 140, 3, S2_DTYPE_BF16, 128},
    {"phi3_gqa_p16", "phi3-small.yaml", 16, 2000, 140, 4, S2_DTYPE_BF16, 128},
    {"phi3_gqa_p128", "phi3-small.yaml", 128, 1800, 140, 3, S2_DTYPE_BF16, 128},
    /* head dims beyond 32/64/96/128, GQA */
    {"phi3_gqa_d16_f16", "phi3-small.yaml", 32, 2000, 140, 4, S2_DTYPE_F16, 16},
    {"phi3_gqa_d80_bf16", "phi3-small.yaml", 16, 2000, 140, 4, S2_DTYPE_BF16, 80},
    {"phi3_gqa_d192_f16", "phi3-small.yaml", 64, 1800, 140, 3, S2_DTYPE_F16, 192},
    {"phi3_gqa_d256_bf16", "phi3-small.yaml", 128, 1800, 140, 3, S2_DTYPE_BF16, 256},
};
enum { NUM_CASES = sizeof cases / sizeof cases[0], BATCH = 3 };

static uint64_t base_seed;
static s2_arch dev_arch;
static const char *case_filter;

typedef struct result {
    bool ran, ok;
    int64_t steps, launches, split_launches, forced1, pool, dense, freed, evicted, evicted_decode, reused;
    double o_err, lse_err;
    bool control_nan;
} result;
static result results[NUM_CASES];

#define OK(ctx, call) ck_assert_msg((call) == S2_OK, "%s: %s", #call, s2_ctx_message(ctx))

static uint16_t rand_elt(s2_dtype dt, uint64_t *s)
{
    float f = (float)((double)(s2t_xorshift64(s) % 4001) / 1000.0 - 2.0);
    return dt == S2_DTYPE_F16 ? s2_f32_to_f16(f) : s2_f32_to_bf16(f);
}

static double elt_to_f64(s2_dtype dt, uint16_t x)
{
    return dt == S2_DTYPE_F16 ? (double)s2_f16_to_f32(x) : (double)s2_bf16_to_f32(x);
}

static bool ref_mask(const void *user, int q_head, int64_t qpos, int64_t kpos)
{
    return s2t_oracle_token_kept((const s2_pattern *)user, q_head, qpos, kpos);
}

/* ---- the run: host allocator and mirrors, device pools ---------------------- */

typedef struct seq {
    int64_t prefill, len, cur;   /* tokens 0 .. cur-1 are in the cache */
    uint16_t *k, *v;             /* dense copy [len][kv heads][D], never freed */
} seq;

typedef struct run {
    const pg_case *c;
    const s2_pattern *p;
    s2_kv_evictor *ev;
    bool dry;                    /* accounting only: sizes the pool */
    s2_dtype dt;
    int KH, P, D;
    int64_t max_pages, table_bs, table_hs, num_pages;
    seq seqs[BATCH];
    int32_t *table;              /* [BATCH][KH][max_pages], -1 = absent */
    int32_t *free_list;
    uint8_t *was_freed, *dirty;  /* per page */
    int64_t nfree, held, peak, freed, evicted, evicted_decode, reused;
    uint16_t *kp, *vp;           /* host mirror of the pools */
    bool table_dirty;
    uint64_t rng;
    /* device */
    s2_ctx *ctx;
    s2_device *dev;
    s2_attn_kernel *k;
    s2_devptr dk, dv, dtable, dlen, dq, dout, dlse, ws;
    size_t ws_bytes;
    result *res;
} run;

static size_t page_elems(const run *r) { return (size_t)r->P * r->D; }

static int32_t *table_at(run *r, int b, int g, int64_t page)
{
    return &r->table[b * r->table_bs + g * r->table_hs + page];
}

static int32_t page_alloc(run *r)
{
    ck_assert_msg(r->nfree > 0, "%s: the pool of %lld pages is exhausted", r->c->name, (long long)r->num_pages);
    int32_t id = r->free_list[--r->nfree];
    if (++r->held > r->peak)
        r->peak = r->held;
    if (!r->dry)
        r->reused += r->was_freed[id];
    return id;
}

/* Back to the stack, NaN on the device before the next launch. */
static void page_release(run *r, int32_t *slot)
{
    ck_assert_msg(*slot >= 0, "%s: a page freed twice", r->c->name);
    int32_t id = *slot;
    *slot = -1;
    r->free_list[r->nfree++] = id;
    r->held--;
    r->table_dirty = true;
    if (r->dry)
        return;
    r->freed++;
    r->was_freed[id] = 1;
    s2t_poison16(r->kp + (size_t)id * page_elems(r), page_elems(r));
    s2t_poison16(r->vp + (size_t)id * page_elems(r), page_elems(r));
    r->dirty[id] = 1;
}

/* Token t of sequence b: random K, V into its page (opened at its first
 * token) and into the dense copy. */
static void append_token(run *r, int b, int64_t t)
{
    seq *s = &r->seqs[b];
    for (int g = 0; g < r->KH; g++) {
        int32_t *slot = table_at(r, b, g, t / r->P);
        if (t % r->P == 0) {
            ck_assert_msg(*slot == -1, "%s: page %lld of seq %d head %d opened twice", r->c->name,
                          (long long)(t / r->P), b, g);
            *slot = page_alloc(r);
            r->table_dirty = true;
        }
        if (r->dry)
            continue;
        int D = r->D;
        size_t off = (size_t)*slot * page_elems(r) + (size_t)(t % r->P) * D;
        uint16_t *kd = s->k + (t * r->KH + g) * D, *vd = s->v + (t * r->KH + g) * D;
        for (int d = 0; d < D; d++) {
            r->kp[off + d] = kd[d] = rand_elt(r->dt, &r->rng);
            r->vp[off + d] = vd[d] = rand_elt(r->dt, &r->rng);
        }
        r->dirty[*slot] = 1;
    }
}

/* Advancing sequence b from position `from` to `to`: hand back what died. */
static void evict(run *r, int b, int64_t from, int64_t to)
{
    int64_t count = 0;
    OK(r->ctx, s2_kv_evictor_step_all(r->ctx, r->ev, from, to - from, NULL, 0, &count));
    if (count == 0)
        return;
    if (!r->dry) {
        r->evicted += count;
        r->evicted_decode += from > 0 ? count : 0;
    }
    s2_kv_page *pages = malloc((size_t)count * sizeof *pages);
    OK(r->ctx, s2_kv_evictor_step_all(r->ctx, r->ev, from, to - from, pages, count, &count));
    for (int64_t i = 0; i < count; i++)
        page_release(r, table_at(r, b, pages[i].head, pages[i].page));
    free(pages);
}

static void free_seq_pages(run *r, int b)
{
    for (int g = 0; g < r->KH; g++)
        for (int64_t j = 0; j < s2_cdiv(r->seqs[b].len, r->P); j++)
            if (*table_at(r, b, g, j) >= 0)
                page_release(r, table_at(r, b, g, j));
}

/* ---- device side ---------------------------------------------------------------- */

static void upload_changes(run *r)
{
    size_t pb = page_elems(r) * 2;
    for (int64_t id = 0; id < r->num_pages; id++) {
        if (!r->dirty[id])
            continue;
        OK(r->ctx, s2_memcpy_h2d(r->ctx, r->dev, r->dk + (size_t)id * pb, r->kp + (size_t)id * page_elems(r), pb));
        OK(r->ctx, s2_memcpy_h2d(r->ctx, r->dev, r->dv + (size_t)id * pb, r->vp + (size_t)id * page_elems(r), pb));
        r->dirty[id] = 0;
    }
    if (r->table_dirty)
        OK(r->ctx, s2_memcpy_h2d(r->ctx, r->dev, r->dtable, r->table,
                                 (size_t)(BATCH * r->table_bs) * sizeof(int32_t)));
    r->table_dirty = false;
}

/* One launch for sequence b's n new tokens (q on the device already);
 * o and lse come back (poisoned before the launch). */
static void launch(run *r, int b, int n, int splits, uint16_t *o, float *lse)
{
    int H = r->p->heads, D = r->D;
    s2_attn_decode_args a = {
        .batch = 1, .n_new = n, .heads = H, .kv_heads = r->KH, .head_dim = D, .dtype = r->dt,
        .q = r->dq, .o = r->dout, .lse = r->dlse, .k_pages = r->dk, .v_pages = r->dv, .num_pages = r->num_pages,
        .page_size = r->P, .q_stride = {(int64_t)n * H * D, (int64_t)H * D, D},
        .o_stride = {(int64_t)n * H * D, (int64_t)H * D, D}, .k_stride = {(int64_t)r->P * D, D, 0},
        .v_stride = {(int64_t)r->P * D, D, 0}, .block_table = r->dtable + (size_t)(b * r->table_bs) * sizeof(int32_t),
        .table_stride = {r->table_bs, r->table_hs}, .max_pages_per_seq = r->max_pages, .seq_lens = r->dlen,
        .max_seq_len = r->c->max_len, .splits = splits,
    };
    size_t need = 0;
    OK(r->ctx, s2_attn_decode_workspace(r->ctx, r->k, &a, &need));
    if (need > r->ws_bytes) {
        s2_mem_free(r->ctx, r->dev, r->ws);
        OK(r->ctx, s2_mem_alloc(r->ctx, r->dev, need, &r->ws));
        OK(r->ctx, s2_memset_d8(r->ctx, r->dev, r->ws, 0, need));  /* once: launches leave it zeroed */
        r->ws_bytes = need;
    }
    a.workspace = need ? r->ws : 0;
    size_t ob = (size_t)n * H * D * 2, lb = (size_t)H * n * sizeof(float);
    s2t_dev_poison(r->ctx, r->dev, r->dout, ob);
    s2t_dev_poison(r->ctx, r->dev, r->dlse, lb);
    OK(r->ctx, s2_attn_decode(r->ctx, r->k, NULL, &a));
    OK(r->ctx, s2_device_synchronize(r->ctx, r->dev));
    OK(r->ctx, s2_memcpy_d2h(r->ctx, r->dev, o, r->dout, ob));
    OK(r->ctx, s2_memcpy_d2h(r->ctx, r->dev, lse, r->dlse, lb));
    r->res->launches++;
    r->res->split_launches += need > 0;
    r->res->forced1 += splits == 1;
}

/* Worst row: relative Frobenius error of o, |lse - ref|; NaN gives inf. */
static void compare(const run *r, int n, const uint16_t *o, const float *lse, const double *ro, const float *rl,
                    double *o_err, double *lse_err)
{
    int H = r->p->heads, D = r->D;
    *o_err = 0, *lse_err = 0;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++) {
            double num = 0, den = 0;
            for (int d = 0; d < D; d++) {
                size_t i = ((size_t)t * H + h) * D + d;
                double g = elt_to_f64(r->dt, o[i]);
                num += (g - ro[i]) * (g - ro[i]);
                den += ro[i] * ro[i];
            }
            double e = den > 0 ? sqrt(num / den) : sqrt(num);
            *o_err = isnan(e) ? INFINITY : fmax(*o_err, e);
            size_t li = (size_t)h * n + t;
            double le = rl[li] == -INFINITY ? (lse[li] == -INFINITY ? 0 : INFINITY) : fabs(lse[li] - rl[li]);
            *lse_err = isnan(le) ? INFINITY : fmax(*lse_err, le);
            if (isinf(*o_err) || isinf(*lse_err))
                return;
        }
}

/* A live page (the one holding the newest key, read by every head through
 * the diagonal block) poisoned on the device must show as NaN. */
static void negative_control(run *r, int b, int n, uint16_t *o, float *lse, const double *ro, const float *rl)
{
    seq *s = &r->seqs[b];
    int32_t id = *table_at(r, b, 0, (s->cur + n - 1) / r->P);
    size_t pb = page_elems(r) * 2;
    s2t_dev_poison(r->ctx, r->dev, r->dk + (size_t)id * pb, pb);
    s2t_dev_poison(r->ctx, r->dev, r->dv + (size_t)id * pb, pb);
    launch(r, b, n, 0, o, lse);
    double oe, le;
    compare(r, n, o, lse, ro, rl, &oe, &le);
    r->res->control_nan = isinf(oe);
    ck_assert_msg(r->res->control_nan, "%s: a poisoned live page went unnoticed (o err %g)", r->c->name, oe);
    r->dirty[id] = 1;  /* restored by the next upload */
    upload_changes(r);
}

/* Queries cur .. cur+n-1 of sequence b on the GPU against the dense reference. */
static void check_step(run *r, int b, int n, int64_t step)
{
    seq *s = &r->seqs[b];
    int H = r->p->heads, D = r->D;
    size_t qn = (size_t)n * H * D;
    uint16_t *q = malloc(qn * 2), *o = malloc(qn * 2);
    double *ro = malloc(qn * sizeof(double));
    float *lse = malloc((size_t)H * n * sizeof(float)), *rl = malloc((size_t)H * n * sizeof(float));
    for (size_t i = 0; i < qn; i++)
        q[i] = rand_elt(r->dt, &r->rng);
    int64_t kv_len = s->cur + n;
    int32_t len32 = (int32_t)kv_len;
    OK(r->ctx, s2_memcpy_h2d(r->ctx, r->dev, r->dq, q, qn * 2));
    OK(r->ctx, s2_memcpy_h2d(r->ctx, r->dev, r->dlen, &len32, sizeof len32));
    upload_changes(r);

    s2_tensor tq = s2_tensor_bshd(q, r->dt, n, H, D), tro = s2_tensor_bshd(ro, S2_DTYPE_F64, n, H, D);
    s2_tensor tk = s2_tensor_bshd(s->k, r->dt, s->len, r->KH, D);
    s2_tensor tv = s2_tensor_bshd(s->v, r->dt, s->len, r->KH, D);
    s2_ref_problem rp = {.batch = 1, .heads = H, .kv_heads = r->KH, .head_dim = D, .q_len = n, .kv_len = kv_len,
                         .causal = r->p->causal, .mask = ref_mask, .mask_user = r->p};
    OK(r->ctx, s2_ref_forward(r->ctx, &rp, &tq, &tk, &tv, &tro, rl));

    if (b == 0 && step == 0)
        negative_control(r, b, n, o, lse, ro, rl);
    /* the heuristic's split count; on some steps also one CTA per (sequence,
     * kv head) or a fixed 3-way split, so that both paths are always covered */
    int extra = step % 4 == 0 ? 1 : step % 4 == 2 ? 3 : -1;
    for (int pass = 0; pass < (extra > 0 ? 2 : 1); pass++) {
        int splits = pass ? extra : 0;
        launch(r, b, n, splits, o, lse);
        double oe, le;
        compare(r, n, o, lse, ro, rl, &oe, &le);
        r->res->o_err = fmax(r->res->o_err, oe);
        r->res->lse_err = fmax(r->res->lse_err, le);
        ck_assert_msg(oe <= (r->dt == S2_DTYPE_F16 ? 5e-3 : 2e-2) && le <= 2e-3,
                      "%s (seed %llu): seq %d queries %lld..%lld (n %d, splits %d, 0 = heuristic): o err %.3g, "
                      "lse err %.3g", r->c->name, (unsigned long long)base_seed, b, (long long)s->cur,
                      (long long)(kv_len - 1), n, splits, oe, le);
    }
    free(q), free(o), free(ro), free(lse), free(rl);
}

/* ---- the schedule ----------------------------------------------------------------- */

static int step_tokens(const run *r, const seq *s, int64_t k)
{
    int64_t n = k % 3 == 2 ? r->c->spec : 1;
    return (int)(n < s->len - s->cur ? n : s->len - s->cur);
}

/* Prefill each sequence (evicting what died in it, so the next one's
 * prefill reuses those pages), then decode in turns until all are done. */
static void schedule(run *r)
{
    for (int b = 0; b < BATCH; b++) {
        seq *s = &r->seqs[b];
        for (int64_t t = 0; t < s->prefill; t++)
            append_token(r, b, t);
        evict(r, b, 0, s->prefill);
        s->cur = s->prefill;
    }
    for (int64_t k = 0, active = 1; active; k++) {
        active = 0;
        for (int b = 0; b < BATCH; b++) {
            seq *s = &r->seqs[b];
            if (s->cur == s->len)
                continue;
            int n = step_tokens(r, s, k);
            for (int64_t t = s->cur; t < s->cur + n; t++)
                append_token(r, b, t);
            if (!r->dry) {
                check_step(r, b, n, k);
                r->res->steps++;
            }
            evict(r, b, s->cur, s->cur + n);
            s->cur += n;
            if (s->cur == s->len)
                free_seq_pages(r, b);
            else
                active = 1;
        }
    }
}

static void reset_allocator(run *r)
{
    r->nfree = r->num_pages, r->held = r->peak = 0;
    for (int64_t i = 0; i < r->num_pages; i++)
        r->free_list[i] = (int32_t)(r->num_pages - 1 - i);
    for (int64_t i = 0; i < BATCH * r->table_bs; i++)
        r->table[i] = -1;
    for (int b = 0; b < BATCH; b++)
        r->seqs[b].cur = 0;
}

/* Sequence b decodes fewer tokens from a shorter prompt: the shortest ends
 * first and its pages go to the others. */
static void setup(run *r, const pg_case *c)
{
    r->KH = r->p->kv_heads, r->P = c->page, r->D = c->head_dim, r->dt = c->dt;
    r->max_pages = s2_cdiv(c->max_len, c->page);
    r->table_hs = r->max_pages, r->table_bs = r->KH * r->max_pages;
    int64_t dense = 0;
    for (int b = 0; b < BATCH; b++) {
        seq *s = &r->seqs[b];
        s->len = c->max_len - 150 * b;
        s->prefill = s->len - (c->decode - 40 * b);
        dense += r->KH * s2_cdiv(s->len, c->page);
    }
    r->res->dense = dense;
    r->table = malloc((size_t)(BATCH * r->table_bs) * sizeof(int32_t));
    r->num_pages = dense;
    r->free_list = malloc((size_t)dense * sizeof(int32_t));
    r->dry = true;
    reset_allocator(r);
    schedule(r);
    ck_assert_int_eq(r->held, 0);
    r->num_pages = r->peak;  /* the pool the schedule needs, no more */
    r->dry = false;
    reset_allocator(r);
    r->was_freed = calloc((size_t)r->num_pages, 1);
    r->dirty = calloc((size_t)r->num_pages, 1);
    size_t pool = (size_t)r->num_pages * page_elems(r);
    r->kp = s2t_alloc_poisoned(pool * 2), r->vp = s2t_alloc_poisoned(pool * 2);
    for (int b = 0; b < BATCH; b++) {
        size_t n = (size_t)r->seqs[b].len * r->KH * r->D;
        r->seqs[b].k = malloc(n * 2), r->seqs[b].v = malloc(n * 2);
    }
    int H = r->p->heads;
    size_t qb = (size_t)c->spec * H * r->D * 2;
    OK(r->ctx, s2_mem_alloc(r->ctx, r->dev, pool * 2, &r->dk));
    OK(r->ctx, s2_mem_alloc(r->ctx, r->dev, pool * 2, &r->dv));
    s2t_dev_poison(r->ctx, r->dev, r->dk, pool * 2);
    s2t_dev_poison(r->ctx, r->dev, r->dv, pool * 2);
    OK(r->ctx, s2_mem_alloc(r->ctx, r->dev, (size_t)(BATCH * r->table_bs) * sizeof(int32_t), &r->dtable));
    OK(r->ctx, s2_mem_alloc(r->ctx, r->dev, 16, &r->dlen));
    OK(r->ctx, s2_mem_alloc(r->ctx, r->dev, qb, &r->dq));
    OK(r->ctx, s2_mem_alloc(r->ctx, r->dev, qb, &r->dout));
    OK(r->ctx, s2_mem_alloc(r->ctx, r->dev, (size_t)H * c->spec * sizeof(float), &r->dlse));
    r->table_dirty = true;
}

static void teardown(run *r)
{
    s2_devptr all[] = {r->dk, r->dv, r->dtable, r->dlen, r->dq, r->dout, r->dlse, r->ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        s2_mem_free(r->ctx, r->dev, all[i]);
    for (int b = 0; b < BATCH; b++)
        free(r->seqs[b].k), free(r->seqs[b].v);
    free(r->table), free(r->free_list), free(r->was_freed), free(r->dirty), free(r->kp), free(r->vp);
}

START_TEST(paged_case)
{
    const pg_case *c = &cases[_i];
    if (case_filter && !strstr(c->name, case_filter))
        return;
    run r = {.c = c, .res = &results[_i], .rng = base_seed * 1000003u + (uint64_t)_i * 7919u + 1};
    r.res->ran = true;
    r.ctx = s2_ctx_new();
    s2_pattern_set *set = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", getenv("S2C_PATTERNS"), c->file);
    OK(r.ctx, s2_pattern_load(r.ctx, path, &set));
    r.p = s2_pattern_set_get(set, 0);
    ck_assert_msg(c->spec * (r.p->heads / r.p->kv_heads) <= 16, "%s: group * n > 16", c->name);
    OK(r.ctx, s2_kv_evictor_new(r.ctx, r.p, c->page, c->max_len, &r.ev));
    s2_kernel_spec spec = {.kind = S2_KERNEL_DECODE, .dtype = c->dt, .head_dim = c->head_dim, .arch = dev_arch};
    s2_artifact *art = NULL;
    OK(r.ctx, s2_compile_attention(r.ctx, r.p, &spec, S2_CUBIN_AUTO, &art));
    OK(r.ctx, s2_device_open(r.ctx, 0, &r.dev));
    OK(r.ctx, s2_attn_load(r.ctx, r.dev, art->cubin, art->cubin_size, r.p->name, c->dt, c->head_dim, &r.k));

    setup(&r, c);
    schedule(&r);
    result *res = r.res;
    res->pool = r.num_pages, res->freed = r.freed, res->reused = r.reused;
    res->evicted = r.evicted, res->evicted_decode = r.evicted_decode;
    ck_assert_msg(r.held == 0 && r.nfree == r.num_pages, "%s: %lld pages held at the end", c->name, (long long)r.held);
    /* eviction must have happened, or the run proves nothing */
    ck_assert_msg(r.evicted_decode > 0 && r.reused > 0, "%s: %lld pages evicted while decoding, %lld reused",
                  c->name, (long long)r.evicted_decode, (long long)r.reused);
    ck_assert_msg(r.num_pages < res->dense, "%s: pool %lld pages, dense %lld", c->name, (long long)r.num_pages,
                  (long long)res->dense);
    ck_assert(res->control_nan && res->forced1 > 0 && res->split_launches > 0);
    res->ok = true;

    teardown(&r);
    s2_attn_kernel_free(r.k);
    s2_device_free(r.dev);
    s2_artifact_free(art);
    s2_kv_evictor_free(r.ev);
    s2_pattern_set_free(set);
    s2_ctx_free(r.ctx);
}
END_TEST

static void print_summary(void)
{
    printf("\n%-15s %6s %8s %6s %7s %7s %7s %7s %7s %9s %9s %s\n", "case", "steps", "launches", "split", "pool",
           "dense", "evicted", "ev_dec", "reused", "o_err", "lse_err", "");
    for (int i = 0; i < NUM_CASES; i++) {
        const result *r = &results[i];
        if (!r->ran)
            continue;
        printf("%-15s %6lld %8lld %6lld %7lld %7lld %7lld %7lld %7lld %9.2e %9.2e %s\n", cases[i].name,
               (long long)r->steps, (long long)r->launches, (long long)r->split_launches, (long long)r->pool,
               (long long)r->dense, (long long)r->evicted, (long long)r->evicted_decode, (long long)r->reused,
               r->o_err, r->lse_err, r->ok ? "PASS" : "FAIL");
    }
    printf("(pool: pages held at the peak of the schedule; dense: a cache that never frees; evicted: pages the "
           "evictor freed (ev_dec: while decoding), poisoned with NaN; reused: allocations of freed pages; "
           "split: launches with split-KV; tolerances: o 2e-2 (bf16) / 5e-3 (f16) relative per row, lse 2e-3 absolute)\n");
}

int main(void)
{
    s2t_gpu g;
    int rc = s2t_gpu_start("compiling for", NULL, &g);
    if (rc != 0)
        return rc;
    dev_arch = g.arch;
    base_seed = g.seed;
    case_filter = getenv("S2C_PAGED_CASES");

    Suite *s = suite_create("paged_gpu");
    TCase *tc = tcase_create("paged");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, paged_case, 0, NUM_CASES);
    suite_add_tcase(s, tc);
    int failed = s2t_run_nofork(s);
    print_summary();
    return failed ? 1 : 0;
}
