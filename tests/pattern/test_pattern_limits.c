/* Hostile pattern files: each is made at test time in a temporary directory
 * and must be rejected with one exact `file:line:col: message` inside a time
 * and memory bound (tests/harness/bounded.h): a YAML document past the node
 * or scalar-text cap, mask files past the per-file byte cap, errors inside a
 * mask file, mask shapes that do not fit the pattern, and mask paths that
 * leave the pattern file's directory (with and without allowed directories). */
#include "s2c/pattern.h"

#include "../harness/bounded.h"
#include "check_main.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* every hostile input: at most 512 MiB of address space and 20 s */
#define MEM_BOUND (INT64_C(512) << 20)
#define TIME_BOUND 20

static char tmp_dir[256];

static void make_tmp_dir(void)
{
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/s2c-pattern-limits-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
}

static void remove_tmp_dir(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    ck_assert_int_eq(system(cmd), 0);
}

static const char *tmp_path(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", tmp_dir, name);
    return buf;
}

static void write_text(const char *name, const char *text)
{
    char path[512];
    FILE *f = fopen(tmp_path(path, sizeof path, name), "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

/* What a bounded child checks: loading `file` (under tmp_dir) with `opts`
 * fails with `status` and exactly the message `want`, or succeeds when want
 * is NULL. */
typedef struct load_case {
    char file[512];
    const s2_pattern_load_options *opts;
    s2_status status;
    char want[1024];
} load_case;

static int load_child(void *arg)
{
    const load_case *c = arg;
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = NULL;
    s2_status st = s2_pattern_load_opts(ctx, c->file, c->opts, &set);
    int rc = 0;
    if (st != c->status) {
        fprintf(stderr, "%s: status %s, want %s: %s\n", c->file, s2_status_name(st), s2_status_name(c->status),
                s2_ctx_message(ctx));
        rc = 1;
    } else if (st != S2_OK && strcmp(s2_ctx_message(ctx), c->want) != 0) {
        fprintf(stderr, "%s:\n  got  [%s]\n  want [%s]\n", c->file, s2_ctx_message(ctx), c->want);
        rc = 2;
    }
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
    return rc;
}

/* Runs load_child under the bounds and asserts its result, time and memory. */
static void expect_load(const load_case *c)
{
    s2t_bounded b;
    ck_assert_int_eq(s2t_run_bounded(load_child, (void *)c, MEM_BOUND, TIME_BOUND, &b), 0);
    ck_assert_msg(b.exit_code == 0, "%s: child exit %d (%.2f s, %lld KiB)", c->file, b.exit_code, b.seconds,
                  (long long)b.peak_kib);
    printf("%s: %.2f s, peak %lld KiB\n", strrchr(c->file, '/') + 1, b.seconds, (long long)b.peak_kib);
    ck_assert_msg(b.seconds < TIME_BOUND, "%s: %.2f s", c->file, b.seconds);
    ck_assert_msg(b.peak_kib < s2t_rss_bound_kib(MEM_BOUND), "%s: peak %lld KiB", c->file, (long long)b.peak_kib);
}

static void expect_error(const char *name, const s2_pattern_load_options *opts, s2_status status, const char *want)
{
    load_case c = {.opts = opts, .status = status};
    tmp_path(c.file, sizeof c.file, name);
    snprintf(c.want, sizeof c.want, "%s/%s", tmp_dir, want);
    expect_load(&c);
}

static void expect_ok(const char *name, const s2_pattern_load_options *opts)
{
    load_case c = {.opts = opts, .status = S2_OK};
    tmp_path(c.file, sizeof c.file, name);
    expect_load(&c);
}

/* ---- 1: the YAML document's size ----------------------------------------- */

/* A 62 MB flow list of 31 million items: rejected at the item that is the
 * (S2_PATTERN_MAX_NODES + 1)-th node, long before the list is held. */
START_TEST(yaml_node_cap)
{
    make_tmp_dir();
    char path[512];
    FILE *f = fopen(tmp_path(path, sizeof path, "flow.yaml"), "w");
    ck_assert_ptr_nonnull(f);
    fputs("heads: 4\nblock_size: 64\nlocal_stride: {local_blocks: 1, vert_stride: 1}\noverrides:\n  - heads: [", f);
    for (int i = 0; i < 31000000; i++)
        fputs("1,", f);
    fputs("1]\n", f);
    ck_assert_int_eq(fclose(f), 0);
    /* 16 nodes come before the list's items (the maps, keys and values above);
     * item k starts at column 13 + 2 (k - 1) of line 5 */
    int64_t k = S2_PATTERN_MAX_NODES + 1 - 16;
    char want[256];
    snprintf(want, sizeof want, "flow.yaml:5:%lld: more than %d YAML nodes in one file", (long long)(13 + 2 * (k - 1)),
             S2_PATTERN_MAX_NODES);
    expect_error("flow.yaml", NULL, S2_ERR_PARSE, want);
    remove_tmp_dir();
}
END_TEST

/* 20 MB of quoted strings: rejected at the string that takes the scalar text
 * past S2_PATTERN_MAX_SCALAR_BYTES. */
START_TEST(yaml_scalar_cap)
{
    make_tmp_dir();
    char path[512], item[1100];
    FILE *f = fopen(tmp_path(path, sizeof path, "text.yaml"), "w");
    ck_assert_ptr_nonnull(f);
    memset(item, 'a', sizeof item);
    item[0] = '"';
    item[1001] = '"';
    item[1002] = ',';
    item[1003] = 0;
    fputs("heads: 4\nblock_size: 64\nname: [", f);
    for (int i = 0; i < 20000; i++)
        fputs(item, f);
    fputs("\"x\"]\n", f);
    ck_assert_int_eq(fclose(f), 0);
    /* 22 bytes of keys and values before the list, 1000 per string, each
     * string 1003 columns from column 8 of line 3 */
    int64_t j = (S2_PATTERN_MAX_SCALAR_BYTES - 22) / 1000 + 1;
    char want[256];
    snprintf(want, sizeof want, "text.yaml:3:%lld: more than %d bytes of scalar text in one file",
             (long long)(8 + 1003 * (j - 1)), S2_PATTERN_MAX_SCALAR_BYTES);
    expect_error("text.yaml", NULL, S2_ERR_PARSE, want);
    remove_tmp_dir();
}
END_TEST

/* A file just under both caps still loads within the bounds. */
START_TEST(yaml_under_caps)
{
    make_tmp_dir();
    char path[512];
    FILE *f = fopen(tmp_path(path, sizeof path, "wide.yaml"), "w");
    ck_assert_ptr_nonnull(f);
    fputs("heads: 4096\nblock_size: 64\nlocal_stride: {local_blocks: 1, vert_stride: 1}\noverrides:\n", f);
    /* 240 overrides naming every head one by one: 240 * 4102 + 16 nodes */
    for (int o = 0; o < 240; o++) {
        fputs("  - local_blocks: 2\n    heads: [", f);
        for (int h = 0; h < 4096; h++)
            fprintf(f, "%d%s", h, h + 1 < 4096 ? "," : "]\n");
    }
    ck_assert_int_eq(fclose(f), 0);
    expect_ok("wide.yaml", NULL);
    remove_tmp_dir();
}
END_TEST

/* ---- 2: mask bytes per pattern file ------------------------------------- */

/* An 8.4 MB mask named 63 times: the eighth reference would take the bytes
 * read past S2_PATTERN_MAX_MASK_BYTES. */
START_TEST(mask_bytes_cap)
{
    make_tmp_dir();
    char path[512];
    enum { N = 2900 };
    FILE *f = fopen(tmp_path(path, sizeof path, "big.txt"), "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "case big\nshape 1 %d %d\n", N, N);
    static char row[N + 2];
    memset(row, '1', N);
    row[N] = '\n';
    for (int i = 0; i < N; i++)
        fputs(row, f);
    fputs("end\n", f);
    ck_assert_int_eq(fclose(f), 0);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    long long size = (long long)sb.st_size;
    ck_assert_int_eq(size, 9 + 18 + (long long)N * (N + 1) + 4); /* "case big\n" "shape 1 2900 2900\n" rows "end\n" */
    f = fopen(tmp_path(path, sizeof path, "many.yaml"), "w");
    ck_assert_ptr_nonnull(f);
    fputs("heads: 4\nblock_size: 16\nlocal_stride: {local_blocks: 1, vert_stride: 1}\noverrides:\n", f);
    for (int i = 0; i < 63; i++)
        fputs("  - heads: 0\n    mask: big.txt\n", f);
    ck_assert_int_eq(fclose(f), 0);
    int over = (int)(S2_PATTERN_MAX_MASK_BYTES / size); /* 0-based: the first reference that does not fit */
    ck_assert_int_eq(over, 7);
    char want[512];
    snprintf(want, sizeof want,
             "many.yaml:%d:11: overrides[%d].mask: mask file 'big.txt': its %lld bytes would take the mask files "
             "read for this pattern file past %lld bytes",
             6 + 2 * over, over, size, (long long)S2_PATTERN_MAX_MASK_BYTES);
    expect_error("many.yaml", NULL, S2_ERR_PARSE, want);

    /* seven references fit */
    f = fopen(tmp_path(path, sizeof path, "seven.yaml"), "w");
    ck_assert_ptr_nonnull(f);
    fputs("heads: 4\nblock_size: 16\nlocal_stride: {local_blocks: 1, vert_stride: 1}\noverrides:\n", f);
    for (int i = 0; i < 7; i++)
        fputs("  - heads: 0\n    mask: big.txt\n", f);
    ck_assert_int_eq(fclose(f), 0);
    expect_ok("seven.yaml", NULL);

    /* a mask file over the one-file limit (sparse: never read) is too large
     * for itself, whatever the budget has left */
    f = fopen(tmp_path(path, sizeof path, "huge.txt"), "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(ftruncate(fileno(f), (off_t)(64 << 20) + 1), 0);
    ck_assert_int_eq(fclose(f), 0);
    write_text("huge.yaml", "heads: 4\nblock_size: 16\ndense: true\noverrides:\n  - heads: 0\n    mask: big.txt\n"
                            "  - heads: 1\n    mask: huge.txt\n");
    expect_error("huge.yaml", NULL, S2_ERR_IO,
                 "huge.yaml:8:11: overrides[1].mask: mask file 'huge.txt': file too large (more than 67108864 bytes)");
    remove_tmp_dir();
}
END_TEST

/* ---- 3 and 4: where mask errors point, and shapes that do not fit -------- */

START_TEST(mask_errors_at_reference)
{
    make_tmp_dir();
    write_text("short.txt", "# a comment\ncase s\nshape 1 2 3\n01\n110\nend\n");
    write_text("sq.txt", "case sq\nshape 1 2 2\n10\n11\nend\ncase h3\nshape 3 2 2\n10\n11\n10\n11\n10\n11\nend\n");
    write_text("short.yaml", "heads: 2\nblock_size: 64\nlocal_stride:\n  local_blocks: 1\n  vert_stride: 2\n"
                             "overrides:\n  - heads: 1\n    mask: short.txt\n");
    expect_error("short.yaml", NULL, S2_ERR_PARSE,
                 "short.yaml:8:11: overrides[0].mask: mask file 'short.txt': line 4, col 3: row has 2 blocks, "
                 "expected 3");
    write_text("missing.yaml", "heads: 2\nblock_size: 64\nmask: \"no such.txt\"\n");
    expect_error("missing.yaml", NULL, S2_ERR_IO,
                 "missing.yaml:3:7: mask: mask file 'no such.txt': No such file or directory");
    /* 2 x 2 blocks of 64 cannot hold max_seq_len 4096 */
    write_text("seq.yaml", "heads: 2\nblock_size: 64\nmax_seq_len: 4096\nmask: sq.txt\n");
    expect_error("seq.yaml", NULL, S2_ERR_PARSE,
                 "seq.yaml:4:7: mask: mask file 'sq.txt': case 'sq' has shape 1 2 2, max_seq_len 4096 needs "
                 "64 x 64 blocks of 64 tokens");
    /* ... but 128 tokens fit, and so does no max_seq_len */
    write_text("fits.yaml", "heads: 2\nblock_size: 64\nmax_seq_len: 128\nmask: sq.txt\n");
    expect_ok("fits.yaml", NULL);
    /* H = 3 fits neither 1 nor 2 heads, in an override too */
    write_text("heads.yaml", "heads: 2\nblock_size: 32\ndense: true\noverrides:\n  - heads: 0\n"
                             "    mask: sq.txt\n    mask_case: h3\n");
    expect_error("heads.yaml", NULL, S2_ERR_PARSE,
                 "heads.yaml:6:11: overrides[0].mask: mask file 'sq.txt': case 'h3' has shape 3 2 2, expected "
                 "H = 1 or 2 (heads)");
    /* more key blocks of 128 than the longest sequence has */
    char path[512];
    FILE *f = fopen(tmp_path(path, sizeof path, "wide.txt"), "w");
    ck_assert_ptr_nonnull(f);
    long long cols = S2_MAX_SEQ_LEN / 128 + 1;
    fprintf(f, "case w\nshape 1 1 %lld\n", cols);
    for (long long i = 0; i < cols; i++)
        fputc('1', f);
    fputs("\nend\n", f);
    ck_assert_int_eq(fclose(f), 0);
    write_text("wide.yaml", "heads: 1\nblock_size: 128\nmask: wide.txt\n");
    char want[512];
    snprintf(want, sizeof want,
             "wide.yaml:3:7: mask: mask file 'wide.txt': case 'w' has shape 1 1 %lld, more than the %lld blocks "
             "of 128 tokens in the longest sequence (%lld)",
             cols, cols - 1, (long long)S2_MAX_SEQ_LEN);
    expect_error("wide.yaml", NULL, S2_ERR_PARSE, want);
    remove_tmp_dir();
}
END_TEST

/* ---- 5: where a mask may lie --------------------------------------------- */

START_TEST(mask_paths)
{
    make_tmp_dir();
    char path[512];
    ck_assert_int_eq(mkdir(tmp_path(path, sizeof path, "pat"), 0700), 0);
    ck_assert_int_eq(mkdir(tmp_path(path, sizeof path, "pat/sub"), 0700), 0);
    ck_assert_int_eq(mkdir(tmp_path(path, sizeof path, "outside"), 0700), 0);
    ck_assert_int_eq(mkdir(tmp_path(path, sizeof path, "outside2"), 0700), 0);
    const char *mask = "case m\nshape 1 1 1\n1\nend\n";
    write_text("pat/sub/m.txt", mask);
    write_text("outside/m.txt", mask);
    write_text("outside2/m.txt", mask);
    const char *head = "heads: 1\nblock_size: 16\nmask: ";
    char text[1024];
    /* relative to the pattern file's directory, wherever the process runs */
    snprintf(text, sizeof text, "%ssub/./m.txt\n", head);
    write_text("pat/in.yaml", text);
    expect_ok("pat/in.yaml", NULL);
    snprintf(text, sizeof text, "%ssub/../sub/m.txt\n", head);
    write_text("pat/in2.yaml", text);
    expect_ok("pat/in2.yaml", NULL);

    const char *tail = " (a mask path must stay in the pattern file's directory unless its directory is allowed)";
    char want[1024];
    snprintf(text, sizeof text, "%s../outside/m.txt\n", head);
    write_text("pat/up.yaml", text);
    snprintf(want, sizeof want, "pat/up.yaml:3:7: mask: mask file '../outside/m.txt': outside the pattern file's "
             "directory%s", tail);
    expect_error("pat/up.yaml", NULL, S2_ERR_PARSE, want);
    snprintf(text, sizeof text, "%ssub/../../../../../../etc/passwd\n", head);
    write_text("pat/passwd.yaml", text);
    snprintf(want, sizeof want, "pat/passwd.yaml:3:7: mask: mask file 'sub/../../../../../../etc/passwd': outside "
             "the pattern file's directory%s", tail);
    expect_error("pat/passwd.yaml", NULL, S2_ERR_PARSE, want);
    snprintf(text, sizeof text, "%s%s/outside/m.txt\n", head, tmp_dir);
    write_text("pat/abs.yaml", text);
    snprintf(want, sizeof want, "pat/abs.yaml:3:7: mask: mask file '%s/outside/m.txt': an absolute path%s", tmp_dir,
             tail);
    expect_error("pat/abs.yaml", NULL, S2_ERR_PARSE, want);

    /* an allowed directory lets both in, and only files under it */
    char allowed[512], sibling[512];
    snprintf(allowed, sizeof allowed, "%s/pat/../outside/", tmp_dir);
    snprintf(sibling, sizeof sibling, "%s/outside2", tmp_dir);
    const char *dirs[] = {sibling, allowed, NULL};
    s2_pattern_load_options opts = {.allow_mask_dirs = dirs};
    expect_ok("pat/up.yaml", &opts);
    expect_ok("pat/abs.yaml", &opts);
    snprintf(want, sizeof want, "pat/passwd.yaml:3:7: mask: mask file 'sub/../../../../../../etc/passwd': outside "
             "the pattern file's directory%s", tail);
    expect_error("pat/passwd.yaml", &opts, S2_ERR_PARSE, want);
    /* "outside2" is not inside "outside" */
    const char *only_outside[] = {allowed, NULL};
    s2_pattern_load_options o2 = {.allow_mask_dirs = only_outside};
    snprintf(text, sizeof text, "%s../outside2/m.txt\n", head);
    write_text("pat/up2.yaml", text);
    snprintf(want, sizeof want, "pat/up2.yaml:3:7: mask: mask file '../outside2/m.txt': outside the pattern file's "
             "directory%s", tail);
    expect_error("pat/up2.yaml", &o2, S2_ERR_PARSE, want);

    /* from memory: relative to the working directory, under the same rule */
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = NULL;
    const char *mem = "heads: 4\nblock_size: 32\nmask: data/masks.txt\nmask_case: per_head\n";
    ck_assert_int_eq(s2_pattern_parse(ctx, NULL, mem, strlen(mem), &set), S2_OK);
    s2_pattern_set_free(set);
    mem = "heads: 4\nblock_size: 32\nmask: ../pattern/data/masks.txt\n";
    ck_assert_int_eq(s2_pattern_parse(ctx, NULL, mem, strlen(mem), &set), S2_ERR_PARSE);
    ck_assert_str_eq(s2_ctx_message(ctx), "<memory>:3:7: mask: mask file '../pattern/data/masks.txt': outside the "
                                          "pattern file's directory (a mask path must stay in the pattern file's "
                                          "directory unless its directory is allowed)");
    /* a relative allowed directory is taken from the working directory */
    const char *rel[] = {"data", NULL};
    s2_pattern_load_options o3 = {.allow_mask_dirs = rel};
    ck_assert_int_eq(s2_pattern_parse_opts(ctx, NULL, mem, strlen(mem), &o3, &set), S2_OK);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
    remove_tmp_dir();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pattern_limits");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, yaml_node_cap);
    tcase_add_test(tc, yaml_scalar_cap);
    tcase_add_test(tc, yaml_under_caps);
    tcase_add_test(tc, mask_bytes_cap);
    tcase_add_test(tc, mask_errors_at_reference);
    tcase_add_test(tc, mask_paths);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
