/* The seams for attention spread over GPUs, on the CPU: a caller's schedule
 * checked as untrusted (s2_schedule_check: each broken rule refused with its
 * status and a message naming it), its transpose (the layout's own
 * transposed schedule, entry for entry, for every attention test pattern),
 * and dist's split by key range (the parts of a cover hold each entry once,
 * unchanged, and pass the check). */
#include "../attn/patterns.h"
#include "dist.h"
#include "s2c/layout.h"
#include "s2c/pattern.h"
#include "check_main.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

typedef struct fx {
    s2_ctx *ctx;
    s2_pattern_set *set;
    s2_layout *lay;
    s2_schedule *s;
    s2_tile_spec ts;
} fx;

static void fx_init(fx *f, int pattern, int64_t q_len, int64_t kv_len, s2_tile_spec ts)
{
    memset(f, 0, sizeof *f);
    f->ctx = s2_ctx_new();
    s2_local_stride_args a;
    attn_pattern_args(pattern, &a);
    ck_assert_int_eq(s2_pattern_from_args(f->ctx, &a, &f->set), S2_OK);
    const s2_pattern *p = s2_pattern_set_get(f->set, 0);
    ck_assert_msg(s2_layout_new(f->ctx, p, q_len, kv_len, &f->lay) == S2_OK, "%s", s2_ctx_message(f->ctx));
    f->ts = ts;
    ck_assert_msg(s2_schedule_build(f->ctx, f->lay, ts, false, &f->s) == S2_OK, "%s", s2_ctx_message(f->ctx));
}

static void fx_free(fx *f)
{
    s2_schedule_free(f->s);
    s2_layout_free(f->lay);
    s2_pattern_set_free(f->set);
    s2_ctx_free(f->ctx);
}

static int64_t total(const s2_schedule *s)
{
    int64_t lists = s->transposed ? s->geom.kv_tiles : s->geom.q_tiles;
    return s->offsets[(int64_t)s->num_classes * lists];
}

static bool same_entry(const s2_tile_entry *a, const s2_tile_entry *b)
{
    return a->tile == b->tile && a->live == b->live && a->row_mask == b->row_mask && a->flags == b->flags;
}

/* The pattern's own schedules pass the check, forward and transposed. */
START_TEST(own_schedules_pass)
{
    for (int p = 0; p < ATTN_NUM_PATTERNS; p++) {
        fx f;
        fx_init(&f, p, 448, 512, (s2_tile_spec){64, 64});
        ck_assert_msg(s2_schedule_check(f.ctx, f.lay, f.ts, false, f.s) == S2_OK, "pattern %d: %s", p,
                      s2_ctx_message(f.ctx));
        s2_schedule *t = NULL;
        ck_assert_int_eq(s2_schedule_build(f.ctx, f.lay, (s2_tile_spec){64, 32}, true, &t), S2_OK);
        ck_assert_msg(s2_schedule_check(f.ctx, f.lay, (s2_tile_spec){64, 32}, true, t) == S2_OK, "pattern %d: %s", p,
                      s2_ctx_message(f.ctx));
        s2_schedule_free(t);
        fx_free(&f);
    }
}
END_TEST

/* Copy, break with fn, expect status and a message holding `word`. */
static void refused(fx *f, void (*fn)(s2_schedule *), s2_status want, const char *word)
{
    s2_schedule c = *f->s;
    int64_t lists = (int64_t)c.num_classes * c.geom.q_tiles, n = total(f->s);
    c.class_of_head = malloc((size_t)c.heads * sizeof(int));
    c.offsets = malloc((size_t)(lists + 1) * sizeof(int64_t));
    c.entries = malloc((size_t)(n + 1) * sizeof(s2_tile_entry));
    memcpy(c.class_of_head, f->s->class_of_head, (size_t)c.heads * sizeof(int));
    memcpy(c.offsets, f->s->offsets, (size_t)(lists + 1) * sizeof(int64_t));
    memcpy(c.entries, f->s->entries, (size_t)n * sizeof(s2_tile_entry));
    fn(&c);
    s2_status st = s2_schedule_check(f->ctx, f->lay, f->ts, false, &c);
    ck_assert_msg(st == want, "want %s, got %s: %s", s2_status_name(want), s2_status_name(st), s2_ctx_message(f->ctx));
    ck_assert_msg(strstr(s2_ctx_message(f->ctx), word), "message '%s' lacks '%s'", s2_ctx_message(f->ctx), word);
    free(c.class_of_head);
    free(c.offsets);
    free(c.entries);
}

/* the first list with two entries or more */
static int64_t list2(const s2_schedule *s)
{
    for (int64_t i = 0; i < (int64_t)s->num_classes * s->geom.q_tiles; i++)
        if (s->offsets[i + 1] - s->offsets[i] >= 2)
            return i;
    ck_abort_msg("no list of two entries");
    return -1;
}

static void tile_out(s2_schedule *s) { s->entries[0].tile = s->geom.kv_tiles; }
static void tile_neg(s2_schedule *s) { s->entries[0].tile = -1; }
static void tile_repeat(s2_schedule *s) { int64_t a = s->offsets[list2(s)]; s->entries[a + 1].tile = s->entries[a].tile; }
static void live_empty(s2_schedule *s) { s->entries[0].live = 0; }
static void live_outside(s2_schedule *s) { s->entries[0].live |= UINT64_C(1) << 63; }
static void flags_full(s2_schedule *s)
{
    /* a diagonal entry claimed FULL: the kernel would skip the causal mask */
    for (int64_t e = 0;; e++)
        if (s->entries[e].flags & S2_ENTRY_CAUSAL) {
            s->entries[e].flags |= S2_ENTRY_FULL;
            return;
        }
}
static void flags_unragged(s2_schedule *s)
{
    for (int64_t e = 0;; e++)
        if (s->entries[e].flags & S2_ENTRY_RAGGED) {
            s->entries[e].flags &= ~(uint32_t)S2_ENTRY_RAGGED;
            return;
        }
}
static void row_mask_wrong(s2_schedule *s) { s->entries[0].row_mask ^= 1; }
static void offsets_down(s2_schedule *s) { int64_t i = list2(s); s->offsets[i + 1] = s->offsets[i] - 1; }
static void offsets_first(s2_schedule *s) { s->offsets[0] = 1; }
static void offsets_long(s2_schedule *s) { s->offsets[1] = s->geom.kv_tiles + 1 + s->offsets[0]; }
static void class_out(s2_schedule *s) { s->class_of_head[1] = s->num_classes; }
static void classes_many(s2_schedule *s) { s->num_classes = s->heads + 1; }
static void heads_other(s2_schedule *s) { s->heads = 3; }
static void geom_other(s2_schedule *s) { s->geom.q_tiles--; }
static void transposed(s2_schedule *s) { s->transposed = true; }
static void no_offsets(s2_schedule *s) { free(s->offsets); s->offsets = NULL; }

START_TEST(broken_schedules_refused)
{
    fx f;
    fx_init(&f, 0, 448, 480, (s2_tile_spec){64, 64});   /* kv 480: the last key tile is ragged */
    refused(&f, tile_out, S2_ERR_INVALID, "tile 8 outside 0..7");
    refused(&f, tile_neg, S2_ERR_INVALID, "tile -1 outside");
    refused(&f, tile_repeat, S2_ERR_INVALID, "not above the one before");
    refused(&f, live_empty, S2_ERR_INVALID, "live pairs 0x0 empty");
    refused(&f, live_outside, S2_ERR_INVALID, "outside the tile's");
    refused(&f, flags_full, S2_ERR_INVALID, "flags FC-");
    refused(&f, flags_unragged, S2_ERR_INVALID, "give row_mask");
    refused(&f, row_mask_wrong, S2_ERR_INVALID, "row_mask 0x0");
    refused(&f, offsets_down, S2_ERR_INVALID, "holds -");
    refused(&f, offsets_first, S2_ERR_INVALID, "offsets[0] is 1");
    refused(&f, offsets_long, S2_ERR_INVALID, "entries (0..8)");
    refused(&f, class_out, S2_ERR_INVALID, "head 1 in class");
    refused(&f, classes_many, S2_ERR_INVALID, "head classes");
    refused(&f, heads_other, S2_ERR_HEADS, "3 heads, the pattern has 4");
    refused(&f, geom_other, S2_ERR_SHAPE, "is not that of q_len 448, kv_len 480");
    refused(&f, transposed, S2_ERR_INVALID, "a transposed schedule where a forward one");
    refused(&f, no_offsets, S2_ERR_NULL_ARG, "offsets is NULL");
    /* another tile shape's schedule */
    ck_assert_int_eq(s2_schedule_check(f.ctx, f.lay, (s2_tile_spec){64, 32}, false, f.s), S2_ERR_SHAPE);
    fx_free(&f);
}
END_TEST

/* The transpose of the layout's forward schedule is its transposed one. */
START_TEST(transpose_is_the_layouts)
{
    static const s2_tile_spec fwd[] = {{64, 64}, {64, 32}, {128, 64}, {64, 16}};
    for (int p = 0; p < ATTN_NUM_PATTERNS; p++)
        for (int i = 0; i < 4; i++) {
            fx f;
            fx_init(&f, p, 200 + 37 * i, 515, fwd[i]);
            int bs = s2_pattern_set_get(f.set, 0)->block_size;
            s2_tile_spec tt = {fwd[i].block_m, f.s->geom.sub_n_size};
            s2_schedule *a = NULL, *b = NULL;
            if (bs > fwd[i].block_m || tt.block_n > tt.block_m) {   /* not a backward's shape */
                fx_free(&f);
                continue;
            }
            ck_assert_msg(s2_schedule_transpose(f.ctx, f.lay, f.s, tt, &a) == S2_OK, "%s", s2_ctx_message(f.ctx));
            ck_assert_int_eq(s2_schedule_build(f.ctx, f.lay, tt, true, &b), S2_OK);
            ck_assert_int_eq(a->num_classes, b->num_classes);
            ck_assert_int_eq(total(a), total(b));
            ck_assert(total(a) > 0);
            for (int64_t j = 0; j <= (int64_t)a->num_classes * a->geom.kv_tiles; j++)
                ck_assert_int_eq(a->offsets[j], b->offsets[j]);
            for (int64_t e = 0; e < total(a); e++)
                ck_assert_msg(same_entry(&a->entries[e], &b->entries[e]), "pattern %d, tile %d x %d, entry %lld", p,
                              fwd[i].block_m, fwd[i].block_n, (long long)e);
            ck_assert_int_eq(s2_schedule_check(f.ctx, f.lay, tt, true, a), S2_OK);
            s2_schedule_free(a);
            s2_schedule_free(b);
            fx_free(&f);
        }
    /* a key sub-block that is not one transposed tile */
    fx f;
    fx_init(&f, 0, 256, 256, (s2_tile_spec){64, 64});
    s2_schedule *a = NULL;
    ck_assert_int_eq(s2_schedule_transpose(f.ctx, f.lay, f.s, (s2_tile_spec){64, 32}, &a), S2_ERR_UNSUPPORTED);
    ck_assert_ptr_null(a);
    fx_free(&f);
}
END_TEST

/* Halves and thirds of the keys: each entry of the whole in exactly one part, unchanged. */
START_TEST(split_covers_once)
{
    for (int p = 0; p < ATTN_NUM_PATTERNS; p++) {
        fx f;
        fx_init(&f, p, 512, 576, (s2_tile_spec){64, 64});   /* 9 key tiles */
        static const int64_t cuts[][4] = {{0, 320, 576, -1}, {0, 192, 384, 1 << 20}};
        for (int c = 0; c < 2; c++) {
            int64_t seen = 0;
            for (int part = 0; part < 3 && cuts[c][part + 1] != -1; part++) {
                s2_schedule *s = NULL;
                ck_assert_msg(s2_dist_split_keys(f.ctx, f.s, cuts[c][part], cuts[c][part + 1], &s) == S2_OK, "%s",
                              s2_ctx_message(f.ctx));
                ck_assert_int_eq(s2_schedule_check(f.ctx, f.lay, f.ts, false, s), S2_OK);
                for (int64_t i = 0; i < (int64_t)s->num_classes * s->geom.q_tiles; i++) {
                    int64_t at = s->offsets[i];
                    for (int64_t e = f.s->offsets[i]; e < f.s->offsets[i + 1]; e++) {
                        int64_t key = f.s->entries[e].tile * 64;
                        if (key < cuts[c][part] || key >= cuts[c][part + 1])
                            continue;
                        ck_assert_int_lt(at, s->offsets[i + 1]);
                        ck_assert(same_entry(&s->entries[at++], &f.s->entries[e]));
                    }
                    ck_assert_int_eq(at, s->offsets[i + 1]);
                }
                seen += total(s);
                s2_schedule_free(s);
            }
            ck_assert_int_eq(seen, total(f.s));
        }
        fx_free(&f);
    }
}
END_TEST

START_TEST(split_refusals)
{
    fx f;
    fx_init(&f, 0, 256, 256, (s2_tile_spec){64, 64});
    s2_schedule *s = (s2_schedule *)1;
    ck_assert_int_eq(s2_dist_split_keys(f.ctx, f.s, 32, 128, &s), S2_ERR_INVALID);
    ck_assert_ptr_null(s);
    ck_assert(strstr(s2_ctx_message(f.ctx), "whole key tiles of 64"));
    ck_assert_int_eq(s2_dist_split_keys(f.ctx, f.s, 0, 96, &s), S2_ERR_INVALID);
    ck_assert_int_eq(s2_dist_split_keys(f.ctx, f.s, 128, 128, &s), S2_ERR_INVALID);
    ck_assert_int_eq(s2_dist_split_keys(f.ctx, f.s, -64, 128, &s), S2_ERR_INVALID);
    ck_assert_int_eq(s2_dist_split_keys(f.ctx, NULL, 0, 128, &s), S2_ERR_NULL_ARG);
    f.s->transposed = true;
    ck_assert_int_eq(s2_dist_split_keys(f.ctx, f.s, 0, 128, &s), S2_ERR_INVALID);
    f.s->transposed = false;
    /* inside (a ragged kv_len's end) or past the last tile: the rest */
    s2_schedule *r = NULL;
    ck_assert_int_eq(s2_dist_split_keys(f.ctx, f.s, 128, 1000, &s), S2_OK);
    ck_assert_int_eq(s2_dist_split_keys(f.ctx, f.s, 128, 200, &r), S2_OK);
    ck_assert_int_gt(total(s), 0);
    ck_assert_int_eq(total(s), total(r));
    s2_schedule_free(s);
    s2_schedule_free(r);
    ck_assert_int_eq(s2_dist_split_keys(f.ctx, f.s, 0, 180, &r), S2_ERR_INVALID);   /* inside an earlier tile */
    ck_assert_ptr_null(r);
    fx_free(&f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dist");
    TCase *tc = tcase_create("seams");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, own_schedules_pass);
    tcase_add_test(tc, broken_schedules_refused);
    tcase_add_test(tc, transpose_is_the_layouts);
    tcase_add_test(tc, split_covers_once);
    tcase_add_test(tc, split_refusals);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
