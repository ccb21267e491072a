/* The manifest parser on hostile input, table-driven: every integer of every
 * record the parser's own table (abi/manifest_internal.h) lists, at
 * INT64_MIN, INT64_MAX and one past each bound, is refused by that bound with
 * a one-line message; the values at the bounds are read back exactly and lay
 * out; unknown keys at every level, repeated names, counts used as indices
 * (a rule's head == heads, a mask index == the masks) and a kv_heads that
 * does not divide heads are refused with their message; s2_pattern_from_args
 * holds the same bounds. */
#include "kernel_abi.h"
#include "manifest_internal.h"
#include "s2c/layout.h"
#include "s2c/manifest.h"
#include "check_main.h"

#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every record of the table at least once (base_lines_cover_the_table checks it). */
static const char *const base_lines[] = {
    "s2c-manifest 5",
    "requires 0.2",
    "generator 0.2.0+test",
    "arch sm_80",
    "kernel k",
    "kernel.kind fwd",
    "kernel.pattern p",
    "kernel.dtype bf16",
    "kernel.head_dim 64",
    "kernel.block_m 64",
    "kernel.block_n 64",
    "kernel.num_warps 4",
    "kernel.num_stages 2",
    "kernel.threads 128",
    "kernel.smem 16384",
    "kernel.fn k fwd fwd q_tiles 128 16384 64 64 4 2 0 0 0 0 0",
    "pattern p",
    "pattern.heads 4",
    "pattern.kv_heads 2",
    "pattern.block_size 64",
    "pattern.causal 1",
    "pattern.max_seq_len 0",
    "pattern.vert_position absolute",
    "pattern.local 2 0",
    "pattern.vert_stride 4",
    "pattern.head_sliding 1 1 0",
    "pattern.homo_head 0",
    "pattern.num_dense_heads 0",
    "pattern.mask 0 1 4 4 f731",
    "pattern.rule 0 0 2 0 4 0 -1 0",
    "pattern.rule 1 0 2 0 4 1 -1 0",
    "pattern.rule 2 0 2 0 4 2 0 0",
    "pattern.rule 3 1 2 0 4 3 -1 0",
    "pattern.range stride 0 9223372036854775807 0 9223372036854775807 2 f",
    "end",
};
enum { NUM_BASE = sizeof base_lines / sizeof base_lines[0] };

/* The base text with line i (0-based) replaced by `with` (NULL: kept), and
 * `extra` inserted before line `at` (NULL: none); malloc'd. */
static char *base_with(int i, const char *with, int at, const char *extra)
{
    size_t cap = 64;
    for (int j = 0; j < NUM_BASE; j++)
        cap += strlen(base_lines[j]) + 1;
    cap += (with ? strlen(with) : 0) + (extra ? strlen(extra) : 0) + 2;
    char *t = malloc(cap);
    ck_assert_ptr_nonnull(t);
    size_t o = 0;
    for (int j = 0; j < NUM_BASE; j++) {
        if (extra && j == at)
            o += (size_t)snprintf(t + o, cap - o, "%s\n", extra);
        o += (size_t)snprintf(t + o, cap - o, "%s\n", j == i && with ? with : base_lines[j]);
    }
    return t;
}

static char *base_text(void) { return base_with(-1, NULL, -1, NULL); }

/* Refused as malformed, with a message of one printable line that holds `want`. */
static void assert_refused(const char *text, const char *want)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_manifest *m = (s2_manifest *)1;
    s2_status st = s2_manifest_parse(ctx, text, strlen(text), &m);
    const char *msg = s2_ctx_message(ctx);
    ck_assert_msg(st == S2_ERR_PARSE, "want '%s', got %s: %s\n%s", want, s2_status_name(st), msg, text);
    ck_assert_ptr_null(m);
    for (const unsigned char *c = (const unsigned char *)msg; *c; c++)
        ck_assert_msg(*c >= 0x20 && *c < 0x7f, "not one printable line: %s", msg);
    ck_assert_msg(strstr(msg, want), "want '%s', got '%s'", want, msg);
    s2_ctx_free(ctx);
}

static s2_manifest *assert_parses(s2_ctx *ctx, const char *text)
{
    s2_manifest *m = NULL;
    ck_assert_msg(s2_manifest_parse(ctx, text, strlen(text), &m) == S2_OK, "%s\n%s", s2_ctx_message(ctx), text);
    return m;
}

/* Line `line` of the base with its word w (0: the key) replaced by `value`. */
static char *with_word(int line, int w, const char *value)
{
    char out[512] = "", copy[512];
    snprintf(copy, sizeof copy, "%s", base_lines[line]);
    size_t o = 0;
    int k = 0;
    for (char *s = strtok(copy, " "); s; s = strtok(NULL, " "), k++)
        o += (size_t)snprintf(out + o, sizeof out - o, "%s%s", k ? " " : "", k == w ? value : s);
    ck_assert_int_gt(k, w);
    return base_with(line, out, -1, NULL);
}

START_TEST(base_lines_cover_the_table)
{
    s2_ctx *ctx = s2_ctx_new();
    char *text = base_text();
    s2_manifest_free(assert_parses(ctx, text));
    free(text);
    bool seen[64] = {false};
    ck_assert_int_le(s2_mf_num_records, 64);
    for (int i = 1; i < NUM_BASE - 1; i++) {
        char key[64];
        ck_assert_int_eq(sscanf(base_lines[i], "%63s", key), 1);
        const s2_mf_record *rec = s2_mf_find(key);
        ck_assert_msg(rec != NULL, "line %s: not in the table", base_lines[i]);
        seen[rec - s2_mf_records] = true;
    }
    /* a decode entry's record, which a forward base cannot hold: kv_dtype_read_and_checked */
    seen[s2_mf_find("kernel.kv_dtype") - s2_mf_records] = true;
    /* a record added to the table must be added above, where the bounds test reaches it */
    for (int r = 0; r < s2_mf_num_records; r++)
        ck_assert_msg(seen[r], "record %s is not in base_lines", s2_mf_records[r].key);
    s2_ctx_free(ctx);
}
END_TEST

/* Every integer of every record: INT64_MIN, INT64_MAX, lo - 1 and hi + 1 are
 * refused by the word's own bound; INT64_MAX stands for "the end" where the
 * table says so. */
START_TEST(every_integer_bounded)
{
    int fields = 0;
    bool done[64] = {false};
    for (int i = 1; i < NUM_BASE - 1; i++) {
        char key[64];
        ck_assert_int_eq(sscanf(base_lines[i], "%63s", key), 1);
        const s2_mf_record *rec = s2_mf_find(key);
        if (done[rec - s2_mf_records])
            continue; /* the other rule lines */
        done[rec - s2_mf_records] = true;
        for (int w = 0; w < rec->num_words; w++) {
            const s2_mf_word *d = &rec->words[w];
            if (d->kind != S2_MF_INT)
                continue;
            fields++;
            int64_t bad[4] = {INT64_MIN, d->end_ok ? INT64_MAX - 1 : INT64_MAX, d->lo - 1, d->hi + 1};
            for (int b = 0; b < 4; b++) {
                char value[32], want[160];
                snprintf(value, sizeof value, "%" PRId64, bad[b]);
                snprintf(want, sizeof want, "manifest:%d: %s: %s out of range (%" PRId64 "..%" PRId64, i + 1, key,
                         d->name, d->lo, d->hi);
                char *t = with_word(i, w + 1, value);
                assert_refused(t, want);
                free(t);
            }
            if (d->end_ok) {
                s2_ctx *ctx = s2_ctx_new();
                char *t = with_word(i, w + 1, "9223372036854775807");
                s2_manifest_free(assert_parses(ctx, t));
                free(t);
                s2_ctx_free(ctx);
            }
        }
    }
    /* 7 kernel values, 11 in kernel.fn, 30 in the pattern records */
    ck_assert_int_eq(fields, 48);
    /* past 64 bits, and not integers at all */
    char *t = with_word(17, 1, "9223372036854775808");
    assert_refused(t, "manifest:18: pattern.heads: HEADS: not a 64-bit integer: 9223372036854775808");
    free(t);
    t = with_word(30, 6, "9-1");
    assert_refused(t, "manifest:31: pattern.rule: SHIFT: not a 64-bit integer: 9-1");
    free(t);
    /* the version and requires lines, outside the table */
    static const char *const heads[][2] = {
        {"s2c-manifest -9223372036854775808", "manifest:1: not an s2c manifest of version 5"},
        {"s2c-manifest 9223372036854775807", "manifest:1: not an s2c manifest of version 5"},
        {"s2c-manifest 9223372036854775808", "manifest:1: not an s2c manifest of version 5"},
    };
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        t = base_with(0, heads[i][0], -1, NULL);
        assert_refused(t, heads[i][1]);
        free(t);
    }
    static const char *const requires[] = {"requires 9223372036854775807.0", "requires 0.9223372036854775807",
                                           "requires -9223372036854775808.0", "requires 0.-9223372036854775808"};
    for (size_t i = 0; i < sizeof requires / sizeof requires[0]; i++) {
        t = base_with(1, requires[i], -1, NULL);
        assert_refused(t, "manifest:2: bad 'requires' (MAJOR.MINOR)");
        free(t);
    }
}
END_TEST

/* Every pattern value at its upper bound: read back exactly; the layout and
 * both schedules are built (no overflow under UBSan) and keep exactly the
 * causal blocks (a window of 2^24 blocks covers every one). */
START_TEST(values_at_the_bounds_accepted)
{
    char rule3[128], sliding[96], local[64], stride[64], mseq[64], range[192];
    snprintf(rule3, sizeof rule3, "pattern.rule 3 0 %d %d %d %" PRId64 " -1 0", S2_PATTERN_MAX_COUNT,
             S2_PATTERN_MAX_COUNT, S2_PATTERN_MAX_COUNT, S2_PATTERN_MAX_SHIFT);
    snprintf(sliding, sizeof sliding, "pattern.head_sliding %d 0 %d", S2_PATTERN_MAX_COUNT, S2_PATTERN_MAX_COUNT);
    snprintf(local, sizeof local, "pattern.local %d %d", S2_PATTERN_MAX_COUNT, S2_PATTERN_MAX_COUNT);
    snprintf(stride, sizeof stride, "pattern.vert_stride %d", S2_PATTERN_MAX_COUNT);
    snprintf(mseq, sizeof mseq, "pattern.max_seq_len %" PRId64, S2_MAX_SEQ_LEN);
    snprintf(range, sizeof range, "pattern.range stride %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %d f",
             S2_MAX_SEQ_LEN, S2_MAX_SEQ_LEN, S2_MAX_SEQ_LEN, S2_MAX_SEQ_LEN, S2_PATTERN_MAX_COUNT);
    const char *lines[NUM_BASE];
    memcpy(lines, base_lines, sizeof lines);
    lines[21] = mseq, lines[23] = local, lines[24] = stride, lines[25] = sliding, lines[32] = rule3, lines[33] = range;
    char text[4096];
    size_t o = 0;
    for (int j = 0; j < NUM_BASE; j++)
        o += (size_t)snprintf(text + o, sizeof text - o, "%s\n", lines[j]);
    s2_ctx *ctx = s2_ctx_new();
    s2_manifest *m = assert_parses(ctx, text);
    const s2_pattern *p = s2_manifest_pattern_at(m, 0);
    ck_assert_int_eq(p->max_seq_len, S2_MAX_SEQ_LEN);
    ck_assert_int_eq(p->local_left, S2_PATTERN_MAX_COUNT);
    ck_assert_int_eq(p->head_sliding_offset, S2_PATTERN_MAX_COUNT);
    ck_assert_int_eq(p->rules[3].shift, INT64_C(1) << 36);
    ck_assert_int_eq(p->rules[3].local_left, 1 << 24);
    ck_assert_int_eq(p->rules[3].vert_stride, 1 << 24);
    ck_assert_int_eq(p->ranges[0].key_lo, INT64_C(1) << 31);
    ck_assert_int_eq(p->ranges[0].stride, 1 << 24);
    char *desc = NULL;
    ck_assert_int_eq(s2_pattern_describe(p, &desc), S2_OK);
    ck_assert_ptr_nonnull(strstr(desc, "3:68719476736"));
    free(desc);
    for (int64_t mb = 0; mb < 4; mb++)
        for (int64_t nb = 0; nb < 4; nb++)
            ck_assert_int_eq(s2_block_kept(p, 3, mb, nb), nb <= mb);
    s2_layout *l = NULL;
    ck_assert_int_eq(s2_layout_new(ctx, p, 4 * 64, 4 * 64, &l), S2_OK);
    for (int tr = 0; tr < 2; tr++) {
        s2_schedule *s = NULL;
        ck_assert_msg(s2_schedule_build(ctx, l, (s2_tile_spec){64, 64}, tr == 1, &s) == S2_OK, "%s",
                      s2_ctx_message(ctx));
        s2_schedule_free(s);
    }
    s2_layout_free(l);
    s2_manifest_free(m);
    s2_ctx_free(ctx);
}
END_TEST

/* Counts are never indices: the bound on a rule's head keeps its writes in
 * rules[heads]; a mask index and a mask head likewise. */
START_TEST(count_as_index_refused)
{
    char *t = base_with(32, "pattern.rule 4 1 2 0 4 3 -1 0", -1, NULL);   /* head == heads, each head once */
    assert_refused(t, "manifest:33: pattern.rule: head 4 of a pattern of 4 heads");
    free(t);
    t = base_with(31, "pattern.rule 2 0 2 0 4 2 1 0", -1, NULL);          /* mask == the number of masks */
    assert_refused(t, "manifest:32: pattern.rule: mask 1 of a pattern of 1 masks");
    free(t);
    t = base_with(31, "pattern.rule 2 0 2 0 4 2 0 1", -1, NULL);          /* mask head == the mask's heads */
    assert_refused(t, "manifest:32: pattern.rule: mask 0 has no head 1 (it has 1)");
    free(t);
    t = base_with(-1, NULL, 29, "pattern.mask 2 1 4 4 f731");               /* mask index == count + 1 */
    assert_refused(t, "manifest:30: pattern.mask: mask 2 where mask 1 is next");
    free(t);
    t = base_with(-1, NULL, 29, "pattern.mask 64 1 4 4 f731");              /* the 65th mask */
    assert_refused(t, "manifest:30: pattern.mask: I out of range (0..63): 64");
    free(t);
    t = base_with(27, "pattern.num_dense_heads 3", -1, NULL);
    assert_refused(t, "manifest: pattern 'p': num_dense_heads (3) is more than kv_heads (2)");
    free(t);
    t = base_with(28, "pattern.mask 0 2 4 4 f731f731", -1, NULL);
    assert_refused(t, "manifest: pattern 'p': mask 0 has 2 heads (expected 1 or 4)");
    free(t);
}
END_TEST

START_TEST(kv_heads_message_names_both)
{
    char *t = base_with(18, "pattern.kv_heads 3", -1, NULL);
    assert_refused(t, "manifest: pattern 'p': heads (4) is not a multiple of kv_heads (3)");
    free(t);
    t = base_with(18, "pattern.kv_heads 8", -1, NULL);
    assert_refused(t, "manifest: pattern 'p': heads (4) is not a multiple of kv_heads (8)");
    free(t);
}
END_TEST

/* kernel.dtype by the dtype table's names: the kernels' dtypes are read,
 * fp8 and f64 refused by name, other words refused with the list. */
START_TEST(dtype_names_from_the_table)
{
    s2_ctx *ctx = s2_ctx_new();
    char *t = base_with(7, "kernel.dtype f16", -1, NULL);
    s2_manifest *m = assert_parses(ctx, t);
    ck_assert_int_eq(s2_manifest_kernel_at(m, 0)->spec.dtype, S2_DTYPE_F16);
    s2_manifest_free(m);
    free(t);
    static const struct { const char *line, *want; } cases[] = {
        {"kernel.dtype e5m2", "kernel.dtype: fp8 e5m2 is not supported by any template yet"},
        {"kernel.dtype f64", "kernel.dtype: f64 is not supported by any template yet"},
        {"kernel.dtype fp16", "kernel.dtype: expected f32, f16, bf16 or e4m3: fp16"},
        {"kernel.dtype fp8_e4m3", "kernel.dtype: expected f32, f16, bf16 or e4m3: fp8_e4m3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        t = base_with(7, cases[i].line, -1, NULL);
        assert_refused(t, cases[i].want);
        free(t);
    }
    s2_ctx_free(ctx);
}
END_TEST

/* kernel.kv_dtype: a decode entry's fp8 pages, after kernel.kind; refused in a forward entry,
 * for a dtype decode does not read as pages, and before the kind says decode. */
START_TEST(kv_dtype_read_and_checked)
{
    s2_ctx *ctx = s2_ctx_new();
    /* the base as a decode entry: its kernels and launch shape */
    char dec[4096];
    size_t o = 0;
    for (int j = 0; j < NUM_BASE; j++) {
        const char *l = base_lines[j];
        if (strcmp(l, "kernel.kind fwd") == 0)
            l = "kernel.kind decode\nkernel.kv_dtype e4m3";
        else if (strncmp(l, "kernel.fn ", 10) == 0)
            l = "kernel.fn k decode decode splits 128 16384 64 64 4 2 0 0 0 0 0\n"
                "kernel.fn k_combine combine combine rows 128 0 64 64 4 2 0 0 0 0 0";
        o += (size_t)snprintf(dec + o, sizeof dec - o, "%s\n", l);
    }
    s2_manifest *m = assert_parses(ctx, dec);
    ck_assert_int_eq(s2_manifest_kernel_at(m, 0)->spec.kv_dtype, S2_DTYPE_E4M3);
    ck_assert_int_eq(s2_manifest_kernel_at(m, 0)->spec.dtype, S2_DTYPE_BF16);
    s2_manifest_free(m);
    char *bad = strstr(dec, "kv_dtype e4m3");
    memcpy(bad, "kv_dtype e5m2", 13);
    assert_refused(dec, "kernel.kv_dtype: expected e4m3: e5m2");
    memcpy(bad, "kv_dtype bf16", 13);
    assert_refused(dec, "kernel.kv_dtype: expected e4m3: bf16");
    /* before kernel.kind decode, and in a forward entry */
    char *u = base_with(-1, NULL, 5, "kernel.kv_dtype e4m3");
    assert_refused(u, "kernel.kv_dtype: only a decode entry");
    free(u);
    u = base_with(-1, NULL, 6, "kernel.kv_dtype e4m3");
    assert_refused(u, "kernel.kv_dtype: only a decode entry");
    free(u);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(unknown_keys_refused_at_every_level)
{
    static const struct { int at; const char *line; } cases[] = {
        {4, "future.key 1"},  {4, "kernelx k"},           {9, "kernel.head_dimm 64"}, {9, "kernel.fn2 k"},
        {9, "kernel. 1"},     {19, "pattern.headz 4"},    {19, "pattern. 4"},         {30, "pattern.rules 0"},
        {30, "Pattern.rule 0"}, {33, "pattern.range.x 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *t = base_with(-1, NULL, cases[i].at, cases[i].line);
        char key[64], want[192];
        sscanf(cases[i].line, "%63s", key);
        snprintf(want, sizeof want, "manifest:%d: unknown key (written by a newer s2c? this runtime reads manifest "
                 "version 5): %s", cases[i].at + 1, key);
        assert_refused(t, want);
        free(t);
    }
}
END_TEST

/* A lookup by name takes the first: two entries, patterns or kernels of one name are refused. */
START_TEST(repeated_names_refused)
{
    /* kernel k again, for head_dim 128 */
    char *t = base_with(-1, NULL, 16,
                        "kernel k\nkernel.kind fwd\nkernel.pattern p\nkernel.dtype bf16\nkernel.head_dim 128\n"
                        "kernel.threads 128\nkernel.smem 16384\n"
                        "kernel.fn k fwd fwd q_tiles 128 16384 64 64 4 2 0 0 0 0 0");
    assert_refused(t, "manifest:17: a second kernel entry named 'k' (the first at line 5)");
    free(t);
    /* pattern p again, with other rules */
    t = base_with(-1, NULL, 34,
                  "pattern p\npattern.heads 1\npattern.block_size 64\npattern.rule 0 1 0 0 1 0 -1 0");
    assert_refused(t, "manifest:35: a second pattern named 'p' (the first at line 17)");
    free(t);
    /* entry x's wide kernel is x_w, and so is entry x_w's main kernel */
    t = base_with(-1, NULL, 16,
                  "kernel x\nkernel.kind fwd\nkernel.pattern p\nkernel.threads 128\nkernel.smem 16384\n"
                  "kernel.fn x fwd fwd_tma q_tiles 128 16384 64 64 4 2 0 0 0 0 0\n"
                  "kernel.fn x_w fwd_wide fwd_tma q_tiles 256 16384 128 128 8 2 0 0 0 0 384\n"
                  "kernel x_w\nkernel.kind fwd\nkernel.pattern p\nkernel.threads 128\nkernel.smem 16384\n"
                  "kernel.fn x_w fwd fwd_tma q_tiles 128 16384 64 64 4 2 0 0 0 0 0");
    assert_refused(t, "manifest:29: kernel.fn: kernel x_w of entry 'x_w' is also a kernel of entry 'x' (line 23)");
    free(t);
}
END_TEST

/* MIN_KEYS, a variant's rule: read into its record; at least 1 on a
 * variant, 0 on every other role; a version-3 manifest (without it) is
 * refused as an older s2c's. */
START_TEST(variant_rule_read_and_checked)
{
    s2_ctx *ctx = s2_ctx_new();
    char *t = base_with(-1, NULL, 16, "kernel.fn k_w fwd_wide fwd_tma q_tiles 384 16384 128 128 12 3 -1 0 2 0 517");
    s2_manifest *m = assert_parses(ctx, t);
    free(t);
    const s2_manifest_kernel *k = s2_manifest_kernel_at(m, 0);
    const s2_kernel_record *w = s2_manifest_kernel_fn(k, S2_ROLE_FWD_WIDE);
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(w->min_keys, 517);
    ck_assert_int_eq(w->spec.kv_gather, 2);
    ck_assert_int_eq(s2_manifest_kernel_fn(k, S2_ROLE_FWD)->min_keys, 0);
    s2_manifest_free(m);
    t = base_with(-1, NULL, 16, "kernel.fn k_w fwd_wide fwd_tma q_tiles 384 16384 128 128 12 3 -1 0 2 0 0");
    assert_refused(t, "manifest:17: kernel.fn: MIN_KEYS 0 for role fwd_wide (a variant's rule, at least 1");
    free(t);
    t = base_with(15, "kernel.fn k fwd fwd q_tiles 128 16384 64 64 4 2 0 0 0 0 384", -1, NULL);
    assert_refused(t, "manifest:16: kernel.fn: MIN_KEYS 384 for role fwd (a variant's rule, at least 1; 0 for any");
    free(t);
    /* the formats before MIN_KEYS and before kv_dtype (and its parameter lists) */
    t = base_with(0, "s2c-manifest 3", -1, NULL);
    assert_refused(t, "manifest:1: a manifest of version 3 (an older s2c); this one reads version 5: compile the "
                      "module again");
    free(t);
    t = base_with(0, "s2c-manifest 4", -1, NULL);
    assert_refused(t, "manifest:1: a manifest of version 4 (an older s2c); this one reads version 5: compile the "
                      "module again");
    free(t);
    s2_ctx_free(ctx);
}
END_TEST

/* s2_pattern_from_args holds the same bounds, so that what it builds is what a manifest may hold. */
START_TEST(pattern_from_args_bounded_alike)
{
    s2_ctx *ctx = s2_ctx_new();
    for (int field = 0; field < 5; field++) {
        for (int over = 0; over < 2; over++) {
            s2_local_stride_args a;
            s2_local_stride_args_default(&a);
            a.num_heads = 4;
            int v = S2_PATTERN_MAX_COUNT + over;
            int *f[] = {&a.local_blocks, &a.vert_stride, &a.head_sliding_step, &a.head_sliding_offset,
                        &a.local_right};
            a.causal = field != 4;
            *f[field] = v;
            s2_pattern_set *set = NULL;
            s2_status st = s2_pattern_from_args(ctx, &a, &set);
            ck_assert_msg(st == (over ? S2_ERR_INVALID : S2_OK), "field %d = %d: %s", field, v, s2_ctx_message(ctx));
            if (!over) {
                const s2_pattern *p = s2_pattern_set_get(set, 0);
                int64_t shift = p->rules[3].shift;
                ck_assert_int_le(shift, S2_PATTERN_MAX_SHIFT);
                ck_assert_int_ge(shift, 0);
            }
            s2_pattern_set_free(set);
        }
    }
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.head_sliding_offset = -1;
    s2_pattern_set *set = NULL;
    ck_assert_int_eq(s2_pattern_from_args(ctx, &a, &set), S2_ERR_INVALID);
    ck_assert_ptr_null(set);
    s2_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("manifest_parse");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, base_lines_cover_the_table);
    tcase_add_test(tc, every_integer_bounded);
    tcase_add_test(tc, values_at_the_bounds_accepted);
    tcase_add_test(tc, count_as_index_refused);
    tcase_add_test(tc, kv_heads_message_names_both);
    tcase_add_test(tc, dtype_names_from_the_table);
    tcase_add_test(tc, unknown_keys_refused_at_every_level);
    tcase_add_test(tc, repeated_names_refused);
    tcase_add_test(tc, variant_rule_read_and_checked);
    tcase_add_test(tc, kv_dtype_read_and_checked);
    tcase_add_test(tc, pattern_from_args_bounded_alike);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
