/* Paged decode on the CPU: the kept-block lists exactly against the block
 * rule written out in tests/harness/mask_oracle.h (every stock pattern and
 * the shared test patterns, several lengths), their packing, the combine reference against a full forward
 * split into disjoint key sets, and the paged reference with per-head block
 * tables against the forward on gathered keys.  Fresh seeds, printed. */
#include "../attn/patterns.h"
#include "s2c/decode.h"
#include "s2c/layout.h"
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
#include <time.h>

static uint64_t seed;

/* Every list equals {n : some head i of the group keeps n at m or m + 1},
 * masks bit for bit, increasing, over every kv head and query block. */
static void check_lists(const s2_pattern *p, int64_t max_len)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_decode_lists *l = NULL;
    ck_assert_msg(s2_decode_lists_build(ctx, p, max_len, &l) == S2_OK, "%s: %s", p->name, s2_ctx_message(ctx));
    int G = p->heads / p->kv_heads, bs = p->block_size;
    int64_t M = s2_cdiv(max_len, bs);
    ck_assert_int_eq(l->q_blocks, M);
    ck_assert_int_eq(l->group, G);
    int64_t longest = 0;
    for (int g = 0; g < p->kv_heads; g++) {
        int c = l->class_of_kv_head[g];
        ck_assert(c >= 0 && c < l->num_classes);
        for (int64_t m = 0; m < M; m++) {
            int64_t b0 = l->offsets[c * M + m], b1 = l->offsets[c * M + m + 1], e = b0;
            longest = s2_max64(longest, b1 - b0);
            for (int64_t n = 0; n < M; n++) {
                uint32_t want = 0;
                for (int sel = 0; sel < 2 && m + sel < M; sel++)
                    for (int i = 0; i < G; i++)
                        if (s2t_oracle_block_kept(p, g * G + i, m + sel, n))
                            want |= 1u << (sel * G + i);
                if (!want)
                    continue;
                ck_assert_msg(e < b1 && l->entries[e].block == n && l->entries[e].heads == want,
                              "%s len %lld kv head %d m %lld: block %lld mask %x missing or wrong (got %d %x)",
                              p->name, (long long)max_len, g, (long long)m, (long long)n, want,
                              e < b1 ? l->entries[e].block : -1, e < b1 ? l->entries[e].heads : 0);
                e++;
            }
            ck_assert_msg(e == b1, "%s kv head %d m %lld: %lld extra entries", p->name, g, (long long)m,
                          (long long)(b1 - e));
        }
    }
    ck_assert_int_eq(l->max_list, longest);
    s2_packed_decode_lists pk;
    ck_assert(s2_decode_lists_pack(ctx, l, &pk) == S2_OK);
    const int32_t *offs = (const int32_t *)((const char *)pk.data + pk.offsets_off);
    const s2_decode_entry *ent = (const s2_decode_entry *)((const char *)pk.data + pk.entries_off);
    ck_assert(pk.offsets_off % 16 == 0 && pk.entries_off % 16 == 0);
    int64_t total = l->offsets[l->num_classes * M];
    ck_assert_int_eq(offs[l->num_classes * M], total);
    ck_assert(pk.size >= pk.entries_off + (size_t)(total + 1) * sizeof *ent);
    for (int64_t i = 0; i < total; i++)
        ck_assert(ent[i].block == l->entries[i].block && ent[i].heads == l->entries[i].heads);
    s2_packed_decode_lists_free(&pk);
    s2_decode_lists_free(l);
    s2_ctx_free(ctx);
}

START_TEST(lists_test_patterns)
{
    for (int w = 0; w < ATTN_NUM_PATTERNS; w++) {
        s2_local_stride_args a;
        attn_pattern_args(w, &a);
        s2_ctx *ctx = s2_ctx_new();
        s2_pattern_set *set = NULL;
        ck_assert_msg(s2_pattern_from_args(ctx, &a, &set) == S2_OK, "%s", s2_ctx_message(ctx));
        const s2_pattern *p = s2_pattern_set_get(set, 0);
        int64_t lens[] = {1, 17, p->block_size * 5 + 3, 3000};
        for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
            check_lists(p, lens[i]);
        s2_pattern_set_free(set);
        s2_ctx_free(ctx);
    }
}
END_TEST

START_TEST(lists_stock_patterns)
{
    const char *dir = getenv("S2C_PATTERNS");
    ck_assert_msg(dir != NULL, "S2C_PATTERNS is not set");
    DIR *d = opendir(dir);
    ck_assert(d != NULL);
    struct dirent *de;
    int files = 0;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n < 6 || strcmp(de->d_name + n - 5, ".yaml") != 0)
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        s2_ctx *ctx = s2_ctx_new();
        s2_pattern_set *set = NULL;
        ck_assert_msg(s2_pattern_load(ctx, path, &set) == S2_OK, "%s", s2_ctx_message(ctx));
        for (int i = 0; i < s2_pattern_set_count(set); i++) {
            const s2_pattern *p = s2_pattern_set_get(set, i);
            check_lists(p, 4096 + 100);
        }
        s2_pattern_set_free(set);
        s2_ctx_free(ctx);
        files++;
    }
    closedir(d);
    ck_assert_int_ge(files, 5);
}
END_TEST

/* ranges with distances need long contexts: hhst-mixed's far stripe starts at 64K */
START_TEST(lists_long_ranges)
{
    const char *dir = getenv("S2C_PATTERNS");
    char path[4096];
    snprintf(path, sizeof path, "%s/hhst-mixed.yaml", dir);
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = NULL;
    ck_assert_msg(s2_pattern_load(ctx, path, &set) == S2_OK, "%s", s2_ctx_message(ctx));
    const s2_pattern *p = s2_pattern_set_find(set, "sparse-layer");
    ck_assert(p != NULL);
    s2_decode_lists *l = NULL;
    int64_t len = 70000;
    ck_assert(s2_decode_lists_build(ctx, p, len, &l) == S2_OK);
    /* spot-check the last query blocks (a full check is quadratic) */
    int G = l->group;
    int64_t M = l->q_blocks;
    for (int g = 0; g < p->kv_heads; g++)
        for (int64_t m = M - 3; m < M; m++) {
            int c = l->class_of_kv_head[g];
            int64_t e = l->offsets[c * M + m], end = l->offsets[c * M + m + 1];
            for (int64_t n = 0; n < M; n++) {
                uint32_t want = 0;
                for (int sel = 0; sel < 2 && m + sel < M; sel++)
                    for (int i = 0; i < G; i++)
                        if (s2t_oracle_block_kept(p, g * G + i, m + sel, n))
                            want |= 1u << (sel * G + i);
                if (!want)
                    continue;
                ck_assert(e < end && l->entries[e].block == n && l->entries[e].heads == want);
                e++;
            }
            ck_assert(e == end);
        }
    s2_decode_lists_free(l);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(lists_refuse_big_groups)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.name = "g32";
    a.num_heads = 32;
    a.num_kv_heads = 1;
    a.block_size = 64;
    a.local_blocks = 2;
    a.vert_stride = 4;
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = NULL;
    ck_assert(s2_pattern_from_args(ctx, &a, &set) == S2_OK);
    s2_decode_lists *l = NULL;
    ck_assert_int_eq(s2_decode_lists_build(ctx, s2_pattern_set_get(set, 0), 1000, &l), S2_ERR_UNSUPPORTED);
    ck_assert(l == NULL);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

/* ---- combine reference ------------------------------------------------------ */

enum { CB = 2, CSQ = 5, CSK = 37, CH = 3, CD = 16, CPARTS = 4 };

typedef struct part_mask {
    int part, parts;   /* parts == 0: every key */
} part_mask;

/* key kpos belongs to partition (kpos * 7 + 3) % parts (disjoint, uneven) */
static bool in_part(const void *user, int q_head, int64_t qpos, int64_t kpos)
{
    (void)q_head;
    (void)qpos;
    const part_mask *pm = user;
    return pm->parts == 0 || (kpos * 7 + 3) % pm->parts == pm->part;
}

/* Causal attention of every row over the keys of pm, written here from the
 * definition (softmax of q.k / sqrt(D); lse = ln sum exp; an empty row gives
 * o = 0, lse = -inf), apart from ref/attention.c.  The queries are the last
 * CSQ of the CSK positions.  out: [b][i][h][d], lse: [b][h][i]. */
static void naive_attention(const s2_tensor *q, const s2_tensor *k, const s2_tensor *v, const part_mask *pm,
                            double *out, double *lse)
{
    for (int b = 0; b < CB; b++)
        for (int i = 0; i < CSQ; i++)
            for (int h = 0; h < CH; h++) {
                double score[CSK], mx = -INFINITY, sum = 0, *o = out + ((b * CSQ + i) * CH + h) * CD;
                int64_t qpos = CSK - CSQ + i;
                for (int64_t j = 0; j <= qpos; j++) {
                    score[j] = -INFINITY;
                    if (!in_part(pm, h, qpos, j))
                        continue;
                    double dot = 0;
                    for (int d = 0; d < CD; d++)
                        dot += s2_tensor_get(q, b, i, h, d) * s2_tensor_get(k, b, j, h, d);
                    score[j] = dot / sqrt((double)CD);
                    mx = fmax(mx, score[j]);
                }
                for (int d = 0; d < CD; d++)
                    o[d] = 0;
                for (int64_t j = 0; j <= qpos && mx > -INFINITY; j++) {
                    double w = exp(score[j] - mx);
                    sum += w;
                    for (int d = 0; d < CD; d++)
                        o[d] += w * s2_tensor_get(v, b, j, h, d);
                }
                for (int d = 0; d < CD && sum > 0; d++)
                    o[d] /= sum;
                lse[(b * CH + h) * CSQ + i] = sum > 0 ? mx + log(sum) : -INFINITY;
            }
}

static double max_diff(const double *a, const double *b, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++)
        m = fmax(m, fabs(a[i] - b[i]));
    return m;
}

/* The combine of attention over disjoint key sets against attention over
 * their union, both sides from the test's own float64 attention (the
 * reference forward is checked against it too, whole and per part): a
 * wrong scale or LSE in the reference, or a wrong merge, cannot cancel. */
START_TEST(combine_matches_forward)
{
    uint64_t s = seed + 11;
    enum { NO = CB * CSQ * CH * CD, NL = CB * CH * CSQ };
    s2_ctx *ctx = s2_ctx_new();
    uint16_t q[CB * CSQ * CH * CD], k[CB * CSK * CH * CD], v[CB * CSK * CH * CD];
    s2_tensor tq = s2_tensor_bshd(q, S2_DTYPE_BF16, CSQ, CH, CD), tk = s2_tensor_bshd(k, S2_DTYPE_BF16, CSK, CH, CD);
    s2_tensor tv = s2_tensor_bshd(v, S2_DTYPE_BF16, CSK, CH, CD);
    int64_t qe[4] = {CB, CSQ, CH, CD}, ke[4] = {CB, CSK, CH, CD};
    s2_tensor_fill_random(&tq, qe, s2t_xorshift64(&s), -2, 2);
    s2_tensor_fill_random(&tk, ke, s2t_xorshift64(&s), -2, 2);
    s2_tensor_fill_random(&tv, ke, s2t_xorshift64(&s), -1, 1);
    static double want[NO], want_lse[NL], part_o[CPARTS][NO], part_lse[CPARTS][NL], got[NO];
    float part_lse_f[CPARTS][NL], got_lse[NL];
    naive_attention(&tq, &tk, &tv, &(part_mask){0, 0}, want, want_lse);

    /* the reference forward, poisoned outputs: whole and per part, against the naive one (same
     * inputs, float64, summed in another order: 1e-12; its lse is fp32: 1e-6) */
    s2_ref_problem pr = {.batch = CB, .heads = CH, .kv_heads = CH, .head_dim = CD, .q_len = CSQ, .kv_len = CSK,
                         .causal = true, .mask = in_part};
    s2_tensor tg = s2_tensor_bshd(got, S2_DTYPE_F64, CSQ, CH, CD);
    for (int p = -1; p < CPARTS; p++) {
        part_mask pm = p < 0 ? (part_mask){0, 0} : (part_mask){p, CPARTS};
        if (p >= 0)
            naive_attention(&tq, &tk, &tv, &pm, part_o[p], part_lse[p]);
        const double *wo = p < 0 ? want : part_o[p], *wl = p < 0 ? want_lse : part_lse[p];
        for (int i = 0; i < NO; i++)
            got[i] = NAN;
        for (int i = 0; i < NL; i++)
            got_lse[i] = NAN;
        pr.mask_user = &pm;
        ck_assert(s2_ref_forward(ctx, &pr, &tq, &tk, &tv, &tg, got_lse) == S2_OK);
        double err = max_diff(got, wo, NO);
        ck_assert_msg(err < 1e-12, "seed %llu part %d: reference forward off the naive one by %g",
                      (unsigned long long)seed, p, err);
        for (int i = 0; i < NL; i++)
            ck_assert_msg(fabs(got_lse[i] - wl[i]) < 1e-6, "seed %llu part %d lse %d: %.9g, naive %.9g",
                          (unsigned long long)seed, p, i, (double)got_lse[i], wl[i]);
        if (p >= 0)
            for (int i = 0; i < NL; i++)
                part_lse_f[p][i] = (float)part_lse[p][i];
    }

    /* the merge of the naive parts against the naive whole; the partial lse
     * are fp32, so the merge is exact to ~1e-7 relative: 1e-5 */
    s2_tensor to[CPARTS];
    const float *lp[CPARTS];
    for (int p = 0; p < CPARTS; p++) {
        to[p] = s2_tensor_bshd(part_o[p], S2_DTYPE_F64, CSQ, CH, CD);
        lp[p] = part_lse_f[p];
    }
    for (int i = 0; i < NO; i++)
        got[i] = NAN;
    for (int i = 0; i < NL; i++)
        got_lse[i] = NAN;
    ck_assert(s2_ref_combine(ctx, CPARTS, CB, CSQ, CH, CD, to, lp, &tg, got_lse) == S2_OK);
    double err = max_diff(got, want, NO);
    ck_assert_msg(err < 1e-5, "seed %llu: combine differs from attention over the union by %g",
                  (unsigned long long)seed, err);
    for (int i = 0; i < NL; i++)
        ck_assert_msg(fabs(got_lse[i] - want_lse[i]) < 1e-5, "lse %d: %g vs %g", i, (double)got_lse[i], want_lse[i]);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(combine_empty_inputs)
{
    enum { D = 8 };
    double o1[D], o2[D], out[D];
    float l1 = -INFINITY, l2 = -INFINITY, lo = 0;
    for (int d = 0; d < D; d++)
        o1[d] = 5, o2[d] = 7, out[d] = NAN;
    s2_tensor t[2] = {s2_tensor_bshd(o1, S2_DTYPE_F64, 1, 1, D), s2_tensor_bshd(o2, S2_DTYPE_F64, 1, 1, D)};
    s2_tensor to = s2_tensor_bshd(out, S2_DTYPE_F64, 1, 1, D);
    const float *lp[2] = {&l1, &l2};
    s2_ctx *ctx = s2_ctx_new();
    ck_assert(s2_ref_combine(ctx, 2, 1, 1, 1, D, t, lp, &to, &lo) == S2_OK);
    for (int d = 0; d < D; d++)
        ck_assert(out[d] == 0.0);
    ck_assert(lo == -INFINITY);
    /* one finite input: its output comes through unchanged */
    l2 = 1.5f;
    ck_assert(s2_ref_combine(ctx, 2, 1, 1, 1, D, t, lp, &to, &lo) == S2_OK);
    for (int d = 0; d < D; d++)
        ck_assert(out[d] == 7.0);
    ck_assert(lo == 1.5f);
    ck_assert_int_eq(s2_ref_combine(ctx, 0, 1, 1, 1, D, t, lp, &to, &lo), S2_ERR_INVALID);
    s2_ctx_free(ctx);
}
END_TEST

/* ---- paged reference with per-head tables ------------------------------------ */

START_TEST(paged_per_head_tables)
{
    uint64_t s = seed + 23;
    enum { B = 2, HKV = 2, H = 4, D = 16, PS = 16, NP = 40, MAXP = 6, N = 2 };
    int64_t kv_lens[B] = {70, 41};
    s2_ctx *ctx = s2_ctx_new();
    uint16_t *kp = malloc(sizeof(uint16_t) * NP * PS * HKV * D), *vp = malloc(sizeof(uint16_t) * NP * PS * HKV * D);
    uint16_t *q = malloc(sizeof(uint16_t) * B * N * H * D);
    uint16_t *kc = calloc((size_t)B * MAXP * PS * HKV * D, 2), *vc = calloc((size_t)B * MAXP * PS * HKV * D, 2);
    double out_p[B * N * H * D], out_f[B * N * H * D];
    float lse_p[B * H * N], lse_f[B * H * N];
    s2_tensor tkp = s2_tensor_bshd(kp, S2_DTYPE_BF16, PS, HKV, D), tvp = s2_tensor_bshd(vp, S2_DTYPE_BF16, PS, HKV, D);
    s2_tensor tq = s2_tensor_bshd(q, S2_DTYPE_BF16, N, H, D);
    int64_t pe[4] = {NP, PS, HKV, D}, qe[4] = {B, N, H, D};
    s2_tensor_fill_random(&tkp, pe, s2t_xorshift64(&s), -2, 2);
    s2_tensor_fill_random(&tvp, pe, s2t_xorshift64(&s), -1, 1);
    s2_tensor_fill_random(&tq, qe, s2t_xorshift64(&s), -2, 2);
    /* each (b, g) gets its own distinct pages */
    int32_t table[B * HKV * MAXP];
    int used[NP] = {0};
    for (int i = 0; i < B * HKV * MAXP; i++) {
        int pg;
        do
            pg = (int)(s2t_xorshift64(&s) % NP);
        while (used[pg]);
        used[pg] = 1;
        table[i] = pg;
    }
    s2_tensor tkc = s2_tensor_bshd(kc, S2_DTYPE_BF16, MAXP * PS, HKV, D), tvc = s2_tensor_bshd(vc, S2_DTYPE_BF16, MAXP * PS, HKV, D);
    for (int b = 0; b < B; b++)
        for (int g = 0; g < HKV; g++)
            for (int64_t pos = 0; pos < kv_lens[b]; pos++)
                for (int d = 0; d < D; d++) {
                    int pg = table[(b * HKV + g) * MAXP + pos / PS];
                    s2_tensor_set(&tkc, b, pos, g, d, s2_tensor_get(&tkp, pg, pos % PS, g, d));
                    s2_tensor_set(&tvc, b, pos, g, d, s2_tensor_get(&tvp, pg, pos % PS, g, d));
                }
    const int64_t table_strides[3] = {HKV * MAXP, MAXP, 1};
    s2_ref_paged_problem pp = {.batch = B, .heads = H, .kv_heads = HKV, .head_dim = D, .q_len = N, .kv_lens = kv_lens,
                               .block_table = table, .max_pages_per_seq = MAXP, .num_pages = NP, .page_size = PS,
                               .causal = true, .table_strides = table_strides};
    s2_tensor top = s2_tensor_bshd(out_p, S2_DTYPE_F64, N, H, D), tof = s2_tensor_bshd(out_f, S2_DTYPE_F64, N, H, D);
    ck_assert_msg(s2_ref_decode_paged(ctx, &pp, &tq, &tkp, &tvp, &top, lse_p) == S2_OK, "%s", s2_ctx_message(ctx));
    int64_t q_lens[B] = {N, N};
    s2_ref_problem pr = {.batch = B, .heads = H, .kv_heads = HKV, .head_dim = D, .q_len = N, .kv_len = MAXP * PS,
                         .q_lens = q_lens, .kv_lens = kv_lens, .causal = true};
    ck_assert(s2_ref_forward(ctx, &pr, &tq, &tkc, &tvc, &tof, lse_f) == S2_OK);
    ck_assert(s2_tensor_max_abs_diff(&top, &tof, qe) == 0.0);
    for (int i = 0; i < B * H * N; i++)
        ck_assert(lse_p[i] == lse_f[i]);
    int32_t saved = table[0];
    table[0] = NP; /* not a page of the pool */
    ck_assert_int_eq(s2_ref_decode_paged(ctx, &pp, &tq, &tkp, &tvp, &top, lse_p), S2_ERR_INVALID);
    table[0] = saved;
    free(kp), free(vp), free(q), free(kc), free(vc);
    s2_ctx_free(ctx);
}
END_TEST

int main(void)
{
    const char *env = getenv("S2C_SEED");
    seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) * 2654435761u;
    if (!seed)
        seed = 1;
    printf("seed %llu (S2C_SEED=N repeats)\n", (unsigned long long)seed);
    Suite *s = suite_create("decode");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, lists_test_patterns);
    tcase_add_test(tc, lists_stock_patterns);
    tcase_add_test(tc, lists_long_ranges);
    tcase_add_test(tc, lists_refuse_big_groups);
    tcase_add_test(tc, combine_matches_forward);
    tcase_add_test(tc, combine_empty_inputs);
    tcase_add_test(tc, paged_per_head_tables);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
