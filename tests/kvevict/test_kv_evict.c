/* Tests of the KV evictor (s2c/kv_evict.h): page deaths against brute force
 * over an independent oracle (the golden masks of the S2 library, else the
 * rule of tests/harness/mask_oracle.h; never the library's own predicate,
 * which the evictor is built on), steps, accounting, patterns that are not
 * KV-cache efficient, errors; and the per-head tables of the paged reference
 * the allocator example relies on. */
#include "s2c/kv_evict.h"
#include "s2c/layout.h"
#include "s2c/pattern.h"
#include "s2c/ref.h"
#include "mask_oracle.h"
#include "rand_pattern.h"
#include "util.h"
#include "check_main.h"

#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------ */

static s2t_rng rng;

static s2_kv_evictor *make_ev(const s2_pattern *p, int page, int64_t max_len)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_kv_evictor *ev = NULL;
    s2_status st = s2_kv_evictor_new(ctx, p, page, max_len, &ev);
    ck_assert_msg(st == S2_OK, "evictor_new(%s, page %d, len %lld): %s", p->name, page, (long long)max_len,
                  s2_ctx_message(ctx));
    s2_ctx_free(ctx);
    return ev;
}

static int group_of(const s2_pattern *p) { return p->heads / p->kv_heads; }

/* ---- the oracle ----------------------------------------------------------------- */

/* What the brute force asks: a golden mask when the case has one, else the
 * rule written out in mask_oracle.h. */
typedef struct oracle {
    const s2_pattern *p;
    const s2_block_mask *golden;   /* NULL: the rule */
} oracle;

static bool oracle_block(const oracle *o, int q, int64_t m, int64_t n)
{
    return o->golden ? s2t_golden_block_kept(o->golden, q, m, n) : s2t_oracle_block_kept(o->p, q, m, n);
}

static bool oracle_token(const oracle *o, int q, int64_t x, int64_t k)
{
    if (x < 0 || k < 0 || (o->p->causal && k > x))
        return false;
    return oracle_block(o, q, x / o->p->block_size, k / o->p->block_size);
}

/* ---- brute force ------------------------------------------------------------- */

/* Last query position x < max_len that reads a token of page j of kv head
 * h, from the block oracle: query blocks scanned from the end. */
static int64_t brute_block_last(const oracle *o, int h, int page, int64_t j, int64_t max_len)
{
    const s2_pattern *p = o->p;
    int bs = p->block_size, g = group_of(p);
    int64_t k0 = j * page, k1 = s2_min64((j + 1) * page, max_len) - 1;
    for (int64_t m = (max_len - 1) / bs; m >= 0; m--)
        for (int q = h * g; q < (h + 1) * g; q++)
            for (int64_t n = k0 / bs; n <= k1 / bs; n++) {
                if (!oracle_block(o, q, m, n))
                    continue;
                int64_t x = s2_min64((m + 1) * bs, max_len) - 1;
                /* causal: x must reach the page's first token in block n */
                if (!p->causal || x >= s2_max64(k0, n * bs))
                    return x;
            }
    return -1;
}

/* Same from the token oracle (small cases only). */
static int64_t brute_token_last(const oracle *o, int h, int page, int64_t j, int64_t max_len)
{
    int g = group_of(o->p);
    int64_t k0 = j * page, k1 = s2_min64((j + 1) * page, max_len);
    for (int64_t x = max_len - 1; x >= 0; x--)
        for (int q = h * g; q < (h + 1) * g; q++)
            for (int64_t k = k0; k < k1; k++)
                if (oracle_token(o, q, x, k))
                    return x;
    return -1;
}

static int64_t death_of_last(int64_t last, int64_t max_len)
{
    return last == max_len - 1 ? S2_LIVE_FOREVER : last + 1;
}

static int64_t want_release(int64_t death, int page, int64_t j, int64_t max_len)
{
    if (death == S2_LIVE_FOREVER)
        return S2_LIVE_FOREVER;
    int64_t r = s2_max64(death, s2_min64((j + 1) * page, max_len));
    return r >= max_len ? S2_LIVE_FOREVER : r;
}

/* Deaths and releases of every page against the brute force; token-level
 * too when the case is small. */
static void check_deaths(const oracle *o, const s2_kv_evictor *ev, int page, int64_t max_len, bool tokens)
{
    const s2_pattern *p = o->p;
    for (int h = 0; h < p->kv_heads; h++)
        for (int64_t j = 0; j < s2_kv_evictor_num_pages(ev); j++) {
            int64_t last = brute_block_last(o, h, page, j, max_len);
            if (tokens) {
                int64_t tl = brute_token_last(o, h, page, j, max_len);
                ck_assert_msg(tl == last, "seed %llu %s: block brute %lld vs token brute %lld (h %d page %lld)",
                              (unsigned long long)rng.seed, p->name, (long long)last, (long long)tl, h, (long long)j);
            }
            int64_t d = death_of_last(last, max_len);
            ck_assert_msg(s2_kv_evictor_death(ev, h, j) == d,
                          "seed %llu %s page size %d len %lld: kv head %d page %lld death %lld, brute %lld",
                          (unsigned long long)rng.seed, p->name, page, (long long)max_len, h, (long long)j,
                          (long long)s2_kv_evictor_death(ev, h, j), (long long)d);
            ck_assert(s2_kv_evictor_release(ev, h, j) == want_release(d, page, j, max_len));
            int64_t at = s2t_rng_next(&rng) % (uint64_t)max_len;
            ck_assert(s2_kv_evictor_page_live(ev, h, j, at) == (at < d));
        }
}

/* Steps from random positions by random lengths, per head and all heads,
 * against the releases; held pages against a count. */
static void check_steps(const s2_pattern *p, const s2_kv_evictor *ev, int64_t max_len, int trials)
{
    int64_t np = s2_kv_evictor_num_pages(ev);
    int64_t *got = malloc((size_t)np * sizeof *got);
    s2_kv_page *all = malloc((size_t)(np * p->kv_heads) * sizeof *all);
    for (int t = 0; t < trials; t++) {
        int64_t from = s2t_rng_next(&rng) % (uint64_t)max_len;
        int64_t n = 1 + (int64_t)(s2t_rng_next(&rng) % (uint64_t)(s2t_rng_int(&rng, 0, 1) ? 4 : max_len - from));
        if (n > max_len - from)
            n = max_len - from;
        int64_t total = 0, count_all = 0;
        ck_assert_int_eq(s2_kv_evictor_step_all(NULL, ev, from, n, all, np * p->kv_heads, &count_all), S2_OK);
        for (int h = 0; h < p->kv_heads; h++) {
            int64_t count = 0;
            ck_assert_int_eq(s2_kv_evictor_step(NULL, ev, h, from, n, got, np, &count), S2_OK);
            int64_t k = 0, prev_r = -1, prev_j = -1;
            for (int64_t j = 0; j < np; j++) {
                int64_t r = s2_kv_evictor_release(ev, h, j);
                k += r > from && r <= from + n;
            }
            ck_assert_msg(count == k, "seed %llu: step(%d, %lld, %lld) %lld pages, want %lld",
                          (unsigned long long)rng.seed, h, (long long)from, (long long)n, (long long)count, (long long)k);
            for (int64_t i = 0; i < count; i++) {
                int64_t r = s2_kv_evictor_release(ev, h, got[i]);
                ck_assert(r > from && r <= from + n);
                ck_assert(r > prev_r || (r == prev_r && got[i] > prev_j));
                prev_r = r;
                prev_j = got[i];
            }
            /* every (h, page) of this head appears in the all-heads answer */
            int64_t in_all = 0;
            for (int64_t i = 0; i < count_all; i++)
                in_all += all[i].head == h;
            ck_assert_int_eq(in_all, count);
            total += count;
            if (from < max_len) {
                int64_t held = 0;
                for (int64_t j = 0; j <= from / s2_kv_evictor_page_size(ev); j++)
                    held += s2_kv_evictor_release(ev, h, j) > from;
                ck_assert_int_eq(s2_kv_evictor_held_pages(ev, h, from), held);
            }
        }
        ck_assert_int_eq(total, count_all);
    }
    free(got);
    free(all);
}

/* The never-read-again property straight from the token oracle: once
 * released, no later query of the group keeps any token of the page. */
static void check_never_read(const oracle *o, const s2_kv_evictor *ev, int page, int64_t max_len)
{
    const s2_pattern *p = o->p;
    int g = group_of(p);
    for (int h = 0; h < p->kv_heads; h++)
        for (int64_t j = 0; j < s2_kv_evictor_num_pages(ev); j++) {
            int64_t r = s2_kv_evictor_release(ev, h, j);
            if (r == S2_LIVE_FOREVER)
                continue;
            ck_assert(r >= s2_min64((j + 1) * page, max_len));
            for (int64_t x = r; x < max_len; x++)
                for (int q = h * g; q < (h + 1) * g; q++)
                    for (int64_t k = j * page; k < s2_min64((j + 1) * page, max_len); k++)
                        ck_assert_msg(!oracle_token(o, q, x, k),
                                      "seed %llu %s: page %lld of kv head %d released at %lld, read by head %d at %lld",
                                      (unsigned long long)rng.seed, p->name, (long long)j, h, (long long)r, q,
                                      (long long)x);
        }
}

/* Accounting: a step-by-step simulation of prefill + decode, from a
 * histogram of the release positions. */
static void check_memory(const s2_pattern *p, const s2_kv_evictor *ev, int page, int64_t prefill, int64_t len)
{
    s2_kv_memory m;
    ck_assert_int_eq(s2_kv_evictor_memory(NULL, ev, prefill, len, &m), S2_OK);
    int KH = p->kv_heads;
    int64_t *at = calloc((size_t)len + 1, sizeof *at);
    for (int h = 0; h < KH; h++)
        for (int64_t j = 0; j < s2_kv_evictor_num_pages(ev); j++) {
            int64_t r = s2_kv_evictor_release(ev, h, j);
            if (r < len)
                at[r]++;
        }
    int64_t peak = KH * s2_cdiv(prefill, page), held = peak, released = 0;
    for (int64_t x = 0; x < len; x++) {
        released += at[x];
        if (x < prefill)
            continue;
        held = KH * (x / page + 1) - released;
        peak = s2_max64(peak, held);
    }
    free(at);
    ck_assert_int_eq(m.held_pages, held);
    ck_assert_int_eq(m.peak_pages, peak);
    ck_assert_int_eq(m.dense_pages, KH * s2_cdiv(len, page));
    ck_assert(m.held_min_head <= m.held_max_head && m.held_max_head <= s2_cdiv(len, page));
}

/* efficient() is the layout's check over max_len. */
static void check_efficient_flag(const s2_pattern *p, const s2_kv_evictor *ev, int64_t max_len)
{
    s2_layout *l = NULL;
    ck_assert_int_eq(s2_layout_new(NULL, p, max_len, max_len, &l), S2_OK);
    bool ok = false;
    ck_assert_int_eq(s2_layout_check_kv_efficient(NULL, l, &ok), S2_OK);
    ck_assert(s2_kv_evictor_efficient(ev) == ok);
    ck_assert(ok == (s2_kv_evictor_note(ev)[0] == 0));
    s2_layout_free(l);
}

static const int page_sizes[] = {16, 32, 48, 64, 80, 128, 144, 256};

static void check_all(const oracle *o, int64_t max_len, bool tokens, bool never_read)
{
    const s2_pattern *p = o->p;
    for (size_t i = 0; i < sizeof page_sizes / sizeof page_sizes[0]; i++) {
        int page = page_sizes[i];
        s2_kv_evictor *ev = make_ev(p, page, max_len);
        ck_assert_int_eq(s2_kv_evictor_num_pages(ev), s2_cdiv(max_len, page));
        check_deaths(o, ev, page, max_len, tokens);
        check_steps(p, ev, max_len, 12);
        if (never_read)
            check_never_read(o, ev, page, max_len);
        check_memory(p, ev, page, s2t_rng_next(&rng) % (uint64_t)max_len, max_len);
        check_memory(p, ev, page, 0, 1 + (int64_t)(s2t_rng_next(&rng) % (uint64_t)max_len));
        if (i == 0)
            check_efficient_flag(p, ev, max_len);
        s2_kv_evictor_free(ev);
    }
}

/* ---- random patterns (every feature of the predicate) ------------------------ */

/* Random patterns: one length (kv_len) is the longest sequence checked. */
static const s2t_rand_opts kv_rand = {.name = "random", .max_kv_shift = 2, .max_block_shift = 2, .max_vert_stride = 8,
                                      .dense_one_in = 6, .bidir_one_in = 4, .len_base = 160, .len_per_block = 3,
                                      .ranges_one_in = 3};

START_TEST(test_random_patterns)
{
    for (int it = 0; it < 70; it++) {
        s2t_rng_seed(&rng, 31000 + (uint64_t)it);
        s2t_rand_pattern rp;
        s2t_rand_pattern_new(&rng, &kv_rand, &rp);
        check_all(&(oracle){rp.p, NULL}, rp.kv_len, true, true);
        s2t_rand_pattern_free(&rp);
    }
}
END_TEST

/* ---- stock patterns and golden configurations ---------------------------------- */

START_TEST(test_stock_patterns)
{
    s2t_rng_seed(&rng, 32000);
    const char *dir = getenv("S2C_PATTERNS");
    ck_assert_msg(dir != NULL, "S2C_PATTERNS not set");
    DIR *d = opendir(dir);
    ck_assert(d != NULL);
    int files = 0, patterns = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".yaml") != 0)
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        s2_ctx *ctx = s2_ctx_new();
        s2_pattern_set *set = NULL;
        ck_assert_msg(s2_pattern_load(ctx, path, &set) == S2_OK, "%s: %s", path, s2_ctx_message(ctx));
        for (int i = 0; i < s2_pattern_set_count(set); i++) {
            const s2_pattern *p = s2_pattern_set_get(set, i);
            /* 40 blocks and a ragged end; never-read straight from tokens is too slow here */
            int64_t len = 40 * p->block_size - 24;
            if (p->max_seq_len && len > p->max_seq_len)
                len = p->max_seq_len;
            check_all(&(oracle){p, NULL}, len, false, false);
            patterns++;
        }
        s2_pattern_set_free(set);
        s2_ctx_free(ctx);
        files++;
    }
    closedir(d);
    ck_assert_int_ge(files, 7);
    ck_assert_int_ge(patterns, 7);
}
END_TEST

/* Key `key` of the kwargs on the case line at json (-1: absent from that line). */
static long json_get(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *s = strstr(json, pat), *eol = strchr(json, '\n');
    if (!s || (eol && s > eol))
        return -1;
    s += strlen(pat);
    while (*s == ' ')
        s++;
    if (!strncmp(s, "true", 4))
        return 1;
    if (!strncmp(s, "false", 5))
        return 0;
    return strtol(s, NULL, 10);
}

START_TEST(test_golden_configs)
{
    s2t_rng_seed(&rng, 33000);
    const char *path = getenv("S2C_GOLDEN");
    ck_assert_msg(path != NULL, "S2C_GOLDEN not set");
    char *data = NULL;
    size_t len = 0;
    ck_assert(s2_read_file(NULL, path, &data, &len) == S2_OK);
    int cases = 0;
    for (char *line = strstr(data, "\ncase "); line; line = strstr(line + 1, "\ncase ")) {
        const char *json = strchr(line, '{');
        char name[64]; /* "\ncase NAME {" */
        int name_len = (int)(json - line) - 7;
        ck_assert(name_len > 0 && name_len < (int)sizeof name);
        snprintf(name, sizeof name, "%.*s", name_len, line + 6);
        s2_local_stride_args a;
        s2_local_stride_args_default(&a);
        long v;
        a.name = name;
        a.num_heads = (int)json_get(json, "num_heads");
        a.block_size = (int)json_get(json, "block_size");
        if ((v = json_get(json, "local_blocks")) >= 0) a.local_blocks = (int)v;
        if ((v = json_get(json, "vert_stride")) >= 0) a.vert_stride = (int)v;
        if ((v = json_get(json, "num_kv_heads")) >= 0) a.num_kv_heads = (int)v;
        if ((v = json_get(json, "num_dense_heads")) >= 0) a.num_dense_heads = (int)v;
        if ((v = json_get(json, "head_sliding_offset")) >= 0) a.head_sliding_offset = (int)v;
        if ((v = json_get(json, "homo_head")) >= 0) a.homo_head = v != 0;
        if ((v = json_get(json, "causal")) >= 0) a.causal = v != 0;
        long seqlen = json_get(json, "seqlen");
        s2_pattern_set *set = s2t_pattern_set_from_args(&a);
        const s2_pattern *p = s2_pattern_set_get(set, 0);
        s2_block_mask golden; /* the brute force reads the S2 library's mask of this case, not the predicate */
        s2_ctx *ctx = s2_ctx_new();
        ck_assert_msg(s2_block_mask_load(ctx, path, name, &golden) == S2_OK, "%s: %s", name, s2_ctx_message(ctx));
        ck_assert(golden.rows == s2_cdiv(seqlen, a.block_size) && golden.cols == golden.rows);
        ck_assert(golden.heads == 1 || golden.heads == a.num_heads);
        check_all(&(oracle){p, &golden}, seqlen, false, seqlen <= 512);
        s2_block_mask_free(&golden);
        s2_ctx_free(ctx);
        s2_pattern_set_free(set);
        cases++;
    }
    ck_assert_int_eq(cases, 10);
    free(data);
}
END_TEST

/* ---- what the evictor frees for known patterns ----------------------------------- */

/* The decode pattern: held pages at the end, per head, in closed
 * form (the 16-block window and the stripes (n + h) % 8 == 0 of head h). */
START_TEST(test_decode_pattern_memory)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.name = "decode";
    a.num_heads = 32;
    a.block_size = 64;
    a.local_blocks = 16;
    a.vert_stride = 8;
    s2_pattern_set *set = s2t_pattern_set_from_args(&a);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    const int64_t lens[2] = {32768, 131072};
    for (int i = 0; i < 2; i++) {
        int64_t L = lens[i], last = (L - 1) / 64, want = 0;
        s2_kv_evictor *ev = make_ev(p, 64, L);
        ck_assert(s2_kv_evictor_efficient(ev));
        for (int h = 0; h < 32; h++) {
            int64_t per = 0;
            for (int64_t n = 0; n <= last; n++)
                per += last - n < 16 || (n + h) % 8 == 0;
            ck_assert_int_eq(s2_kv_evictor_held_pages(ev, h, L - 1), per);
            want += per;
        }
        s2_kv_memory m;
        ck_assert_int_eq(s2_kv_evictor_memory(NULL, ev, 0, L, &m), S2_OK);
        ck_assert_int_eq(m.held_pages, want);
        ck_assert_int_eq(m.dense_pages, 32 * L / 64);
        ck_assert(m.held_fraction <= 0.16);
        s2_kv_evictor_free(ev);
    }
    s2_pattern_set_free(set);
}
END_TEST

/* Not KV-cache efficient, or never freeable: the evictor says so, frees
 * only what is never read again, and nothing at all where everything is. */
START_TEST(test_not_efficient)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.name = "rel";
    a.num_heads = 4;
    a.num_kv_heads = 2;
    a.block_size = 16;
    a.local_blocks = 2;
    a.vert_stride = 3;
    a.vert_position = S2_VERT_RELATIVE;
    s2_pattern_set *set = s2t_pattern_set_from_args(&a);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_kv_evictor *ev = make_ev(p, 16, 800);
    /* relative stripes come back at every 3rd distance: a block's last
     * reader is within 3 blocks of the end (2 past the last block's start),
     * so nothing is freed before position 800 - 2*16; the evictor says why */
    ck_assert(!s2_kv_evictor_efficient(ev));
    ck_assert_msg(strstr(s2_kv_evictor_note(ev), "not KV-cache efficient") != NULL, "%s", s2_kv_evictor_note(ev));
    for (int h = 0; h < 2; h++)
        for (int64_t j = 0; j < 50; j++)
            ck_assert_int_ge(s2_kv_evictor_release(ev, h, j), 800 - 2 * 16);
    ck_assert_int_gt(s2_kv_evictor_freeable_pages(ev), 0);
    check_never_read(&(oracle){p, NULL}, ev, 16, 800);
    s2_kv_evictor_free(ev);
    s2_pattern_set_free(set);

    /* one dense kv head (the last): its group never frees; the other does */
    a.vert_position = -1;
    a.num_dense_heads = 1;
    set = s2t_pattern_set_from_args(&a);
    p = s2_pattern_set_get(set, 0);
    ev = make_ev(p, 32, 800);
    ck_assert(s2_kv_evictor_efficient(ev));
    for (int64_t j = 0; j < s2_kv_evictor_num_pages(ev); j++)
        ck_assert(s2_kv_evictor_release(ev, 1, j) == S2_LIVE_FOREVER);
    ck_assert_int_gt(s2_kv_evictor_freeable_pages(ev), 0);
    ck_assert_int_eq(s2_kv_evictor_held_pages(ev, 1, 799), s2_cdiv(800, 32));
    check_never_read(&(oracle){p, NULL}, ev, 32, 800);
    s2_kv_evictor_free(ev);
    s2_pattern_set_free(set);
}
END_TEST

/* A distance range that drops the stripes beyond 4 blocks and brings them
 * back beyond 10: key blocks are read, dropped, read again.  Not efficient;
 * stripe blocks may only go after their second run. */
START_TEST(test_range_gap)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.name = "gap";
    a.num_heads = 2;
    a.block_size = 16;
    a.local_blocks = 2;
    a.vert_stride = 4;
    s2_pattern_set *set = s2t_pattern_set_from_args(&a);
    s2_pattern *p = (s2_pattern *)s2_pattern_set_get(set, 0);
    s2_range_rule rr = {.action = S2_RANGE_DROP, .key_lo = 0, .key_hi = INT64_MAX, .dist_lo = 16 * 4,
                        .dist_hi = 16 * 10};
    s2_range_rule rr2 = {.action = S2_RANGE_DROP, .key_lo = 0, .key_hi = INT64_MAX, .dist_lo = 16 * 14,
                         .dist_hi = INT64_MAX};
    s2_range_rule both[2] = {rr, rr2};
    p->ranges = both;
    p->num_ranges = 2;
    s2_kv_evictor *ev = make_ev(p, 16, 640);
    ck_assert(!s2_kv_evictor_efficient(ev));
    /* stripe block 0 of head 0: read by query blocks 0..3 and 10..13: dead at 14*16 */
    ck_assert_int_eq(s2_kv_evictor_death(ev, 0, 0), 14 * 16);
    ck_assert(s2_kv_evictor_page_live(ev, 0, 0, 5 * 16)); /* inside the gap: still live */
    /* block 1 (no stripe): local only, dead at 3*16 */
    ck_assert_int_eq(s2_kv_evictor_death(ev, 0, 1), 3 * 16);
    s2t_rng_seed(&rng, 34000);
    check_all(&(oracle){p, NULL}, 640, false, true);
    s2_kv_evictor_free(ev);
    s2_pattern_set_free(set);
}
END_TEST

/* A page larger than a block goes only when all its blocks are dead; a
 * block larger than a page frees its pages together. */
START_TEST(test_page_vs_block)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.name = "pb";
    a.num_heads = 1;
    a.block_size = 32;
    a.local_blocks = 2;
    a.vert_stride = 5;
    s2_pattern_set *set = s2t_pattern_set_from_args(&a);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    /* blocks 1..4 are local only: block n dies at (n + 2) * 32 */
    s2_kv_evictor *ev = make_ev(p, 16, 1024);
    ck_assert_int_eq(s2_kv_evictor_death(ev, 0, 2), 3 * 32);
    ck_assert_int_eq(s2_kv_evictor_death(ev, 0, 3), 3 * 32);
    s2_kv_evictor_free(ev);
    ev = make_ev(p, 64, 1024); /* page 1 = blocks 2, 3; page 2 = blocks 4, 5 (5 is a stripe) */
    ck_assert_int_eq(s2_kv_evictor_death(ev, 0, 1), 5 * 32);
    ck_assert(s2_kv_evictor_death(ev, 0, 2) == S2_LIVE_FOREVER);
    ck_assert(s2_kv_evictor_death(ev, 0, 0) == S2_LIVE_FOREVER); /* block 0 is a stripe */
    int64_t pages[4], count = 0;
    ck_assert_int_eq(s2_kv_evictor_step(NULL, ev, 0, 5 * 32 - 1, 1, pages, 4, &count), S2_OK);
    ck_assert_int_eq(count, 1);
    ck_assert_int_eq(pages[0], 1);
    s2_kv_evictor_free(ev);
    s2_pattern_set_free(set);
}
END_TEST

START_TEST(test_errors)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.name = "e";
    a.num_heads = 2;
    s2_pattern_set *set = s2t_pattern_set_from_args(&a);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_ctx *ctx = s2_ctx_new();
    s2_kv_evictor *ev = (s2_kv_evictor *)&a;
#define BAD(call)                                                                 \
    do {                                                                          \
        s2_ctx_clear(ctx);                                                        \
        ck_assert_int_eq((call), S2_ERR_INVALID);                                 \
        ck_assert_msg(strlen(s2_ctx_message(ctx)) > 0, "%s: no message", #call); \
    } while (0)
    BAD(s2_kv_evictor_new(ctx, p, 24, 100, &ev));
    ck_assert(ev == NULL);
    BAD(s2_kv_evictor_new(ctx, p, 0, 100, &ev));
    BAD(s2_kv_evictor_new(ctx, p, 16, 0, &ev));
    BAD(s2_kv_evictor_new(ctx, p, 16, S2_MAX_SEQ_LEN + 1, &ev));
    BAD(s2_kv_evictor_new(ctx, NULL, 16, 100, &ev));
    BAD(s2_kv_evictor_new(ctx, p, 16, 100, NULL));
    ck_assert_int_eq(s2_kv_evictor_new(ctx, p, 16, 100, &ev), S2_OK);
    int64_t pages[8], count;
    s2_kv_page all[8];
    BAD(s2_kv_evictor_step(ctx, ev, 2, 0, 1, pages, 8, &count));
    BAD(s2_kv_evictor_step(ctx, ev, 0, 0, 0, pages, 8, &count));
    BAD(s2_kv_evictor_step(ctx, ev, 0, 99, 2, pages, 8, &count));
    BAD(s2_kv_evictor_step(ctx, ev, 0, -1, 1, pages, 8, &count));
    BAD(s2_kv_evictor_step(ctx, ev, 0, 0, 1, NULL, 8, &count));
    BAD(s2_kv_evictor_step(ctx, ev, 0, 0, 1, pages, 8, NULL));
    BAD(s2_kv_evictor_step_all(ctx, ev, 0, 101, all, 8, &count));
    BAD(s2_kv_evictor_step_all(ctx, NULL, 0, 1, all, 8, &count));
    ck_assert_int_eq(s2_kv_evictor_step(ctx, ev, 0, 0, 100, NULL, 0, &count), S2_OK); /* sizing */
    s2_kv_memory m;
    BAD(s2_kv_evictor_memory(ctx, ev, 10, 5, &m));
    BAD(s2_kv_evictor_memory(ctx, ev, 0, 101, &m));
    BAD(s2_kv_evictor_memory(ctx, ev, 0, 0, &m));
    ck_assert(s2_kv_evictor_death(ev, 0, 7) == -1 && s2_kv_evictor_release(ev, 2, 0) == -1);
    ck_assert(s2_kv_evictor_held_pages(ev, 0, 100) == -1 && !s2_kv_evictor_page_live(ev, 0, -1, 0));
    ck_assert(s2_kv_evictor_held_pages(NULL, 0, 0) == -1 && !s2_kv_evictor_efficient(NULL));
    s2_kv_evictor_free(ev);
    s2_kv_evictor_free(NULL);
    /* a pattern with max_seq_len: max_len past it is refused by the layout */
    ((s2_pattern *)p)->max_seq_len = 64;
    s2_ctx_clear(ctx);
    ck_assert_int_ne(s2_kv_evictor_new(ctx, p, 16, 65, &ev), S2_OK);
    ck_assert(ev == NULL);
#undef BAD
    s2_ctx_free(ctx);
    s2_pattern_set_free(set);
}
END_TEST

/* ---- the paged reference with per-head tables ------------------------------------- */

static bool keep_even_pages(const void *user, int q_head, int64_t qpos, int64_t kpos)
{
    (void)user;
    (void)q_head;
    (void)qpos;
    return (kpos / 16) % 2 == 0;
}

START_TEST(test_ref_per_head_tables)
{
    enum { B = 2, H = 4, KH = 2, D = 8, P = 16, MAXP = 4, NP = B * KH * MAXP };
    int64_t kv_lens[B] = {50, 64};
    double kd[B][64][KH][D];
    double pool[NP][P][D];
    double q[B][2][H][D], o_dense[B][2][H][D], o_paged[B][2][H][D];
    int32_t table[B][KH][MAXP];
    s2t_rng_seed(&rng, 35000);
    for (int b = 0; b < B; b++)
        for (int g = 0; g < KH; g++)
            for (int j = 0; j < MAXP; j++)
                table[b][g][j] = (int32_t)(NP - 1 - ((b * KH + g) * MAXP + j)); /* scrambled */
    for (int b = 0; b < B; b++)
        for (int t = 0; t < 64; t++)
            for (int g = 0; g < KH; g++)
                for (int d = 0; d < D; d++) {
                    kd[b][t][g][d] = (double)(s2t_rng_next(&rng) % 1000) / 500.0 - 1.0;
                    pool[table[b][g][t / P]][t % P][d] = kd[b][t][g][d];
                }
    for (size_t i = 0; i < sizeof q / sizeof(double); i++)
        ((double *)q)[i] = (double)(s2t_rng_next(&rng) % 1000) / 500.0 - 1.0;
    s2_tensor tq = s2_tensor_bshd(q, S2_DTYPE_F64, 2, H, D);
    s2_tensor td = s2_tensor_bshd(o_dense, S2_DTYPE_F64, 2, H, D);
    s2_tensor tpo = s2_tensor_bshd(o_paged, S2_DTYPE_F64, 2, H, D);
    s2_tensor tk = s2_tensor_bshd(kd, S2_DTYPE_F64, 64, KH, D);
    s2_tensor tpool = {pool, S2_DTYPE_F64, {P * D, D, 0, 1}};
    s2_ref_problem dp = {.batch = B, .heads = H, .kv_heads = KH, .head_dim = D, .q_len = 2, .kv_len = 64,
                         .kv_lens = kv_lens, .causal = true, .mask = keep_even_pages};
    int64_t q_lens[B] = {2, 2};
    dp.q_lens = q_lens;
    ck_assert_int_eq(s2_ref_forward(NULL, &dp, &tq, &tk, &tk, &td, NULL), S2_OK);
    int64_t strides[3] = {KH * MAXP, MAXP, 1};
    s2_ref_paged_problem pp = {.batch = B, .heads = H, .kv_heads = KH, .head_dim = D, .q_len = 2,
                               .kv_lens = kv_lens, .block_table = &table[0][0][0], .max_pages_per_seq = MAXP,
                               .num_pages = NP, .page_size = P, .causal = true, .mask = keep_even_pages,
                               .table_strides = strides};
    ck_assert_int_eq(s2_ref_decode_paged(NULL, &pp, &tq, &tpool, &tpool, &tpo, NULL), S2_OK);
    for (size_t i = 0; i < sizeof o_dense / sizeof(double); i++)
        ck_assert(((double *)o_dense)[i] == ((double *)o_paged)[i]);
    /* odd pages are never read: absent (-1) changes nothing */
    for (int b = 0; b < B; b++)
        for (int g = 0; g < KH; g++)
            table[b][g][1] = table[b][g][3] = -1;
    ck_assert_int_eq(s2_ref_decode_paged(NULL, &pp, &tq, &tpool, &tpool, &tpo, NULL), S2_OK);
    for (size_t i = 0; i < sizeof o_dense / sizeof(double); i++)
        ck_assert(((double *)o_dense)[i] == ((double *)o_paged)[i]);
    /* an absent page that is read: NaN in exactly the rows of that head group */
    table[1][0][2] = -1;
    ck_assert_int_eq(s2_ref_decode_paged(NULL, &pp, &tq, &tpool, &tpool, &tpo, NULL), S2_OK);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < 2; i++)
            for (int h = 0; h < H; h++)
                ck_assert(isnan(o_paged[b][i][h][0]) == (b == 1 && h / (H / KH) == 0));
    /* a page id past the pool is refused, and negative ids in a shared table still are */
    table[1][0][2] = NP;
    ck_assert_int_eq(s2_ref_decode_paged(NULL, &pp, &tq, &tpool, &tpool, &tpo, NULL), S2_ERR_INVALID);
    pp.table_strides = NULL;
    table[1][0][2] = 0;
    ck_assert_int_eq(s2_ref_decode_paged(NULL, &pp, &tq, &tpool, &tpool, &tpo, NULL), S2_ERR_INVALID);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kv_evict");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_random_patterns);
    tcase_add_test(tc, test_stock_patterns);
    tcase_add_test(tc, test_golden_configs);
    tcase_add_test(tc, test_decode_pattern_memory);
    tcase_add_test(tc, test_not_efficient);
    tcase_add_test(tc, test_range_gap);
    tcase_add_test(tc, test_page_vs_block);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_ref_per_head_tables);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
