/* The manifest fuzz corpus as a regression set, and hostile manifests under
 * a memory and time bound.
 *
 * Every file of fuzz/corpus-manifest and fuzz/crashers-manifest goes through
 * the harness's own pipeline (fuzz/manifest_pipeline.c: parse, describe,
 * layout and schedules, module load on the fake driver), which must report
 * no inconsistency; the manifests of real cubins (stock-*) must be accepted
 * and load.  Crafted manifests (a mask claiming 4096 x 1024 x 1024 blocks,
 * 20,000 range lines, 100 masks, a repeated head rule, versions 1, 3 and 5, an
 * unknown key, no or a newer `requires`) must
 * each be refused with their message within 256 MB and 5 s
 * (tests/harness/bounded.h).
 * Usage: test_manifest_fuzz FAKE_LIB FUZZ_DIR */
#include "manifest_pipeline.h"

#include "bounded.h"
#include "s2c/manifest.h"
#include "util.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *fake_path;
static const char *fuzz_dir;

static s2_device *open_fake(void)
{
    s2_device *dev = s2f_open_fake_device(fake_path);
    ck_assert_msg(dev != NULL, "cannot open the fake driver %s", fake_path);
    return dev;
}

static char *read_all(const char *path, size_t *size)
{
    s2_ctx *ctx = s2_ctx_new();
    char *data = NULL;
    s2_status st = s2_read_file(ctx, path, &data, size);
    ck_assert_msg(st == S2_OK, "%s", s2_ctx_message(ctx));
    s2_ctx_free(ctx);
    return data;
}

/* Runs every file of dir through the pipeline; counts files and accepted ones. */
static void replay_dir(s2_device *dev, const char *dir, bool must_exist, int *files, int *accepted)
{
    DIR *d = opendir(dir);
    ck_assert_msg(d || !must_exist, "%s", dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "README.md"))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t size = 0;
        char *data = read_all(path, &size);
        char why[2048] = "";
        int ok = 0;
        int rc = s2f_manifest_pipeline(dev, (const uint8_t *)data, size, &ok, why, sizeof why);
        ck_assert_msg(rc == 0, "%s: %s", path, why);
        /* the manifests of real cubins are accepted */
        ck_assert_msg(ok || strncmp(e->d_name, "stock-", 6) != 0, "%s was refused", path);
        *accepted += ok;
        (*files)++;
        free(data);
    }
    closedir(d);
}

START_TEST(corpus_replays)
{
    s2_device *dev = open_fake();
    char dir[4096];
    int files = 0, accepted = 0;
    snprintf(dir, sizeof dir, "%s/corpus-manifest", fuzz_dir);
    replay_dir(dev, dir, true, &files, &accepted);
    /* 35 manifests of stock-pattern cubins and 144 edge cases, at least */
    ck_assert_msg(files >= 179, "only %d corpus files under %s", files, dir);
    ck_assert_msg(accepted >= 35, "only %d of %d accepted", accepted, files);
    snprintf(dir, sizeof dir, "%s/crashers-manifest", fuzz_dir);
    replay_dir(dev, dir, false, &files, &accepted);
    s2_device_free(dev);
}
END_TEST

/* The edge cases the pipeline accepts, by name: the fuzzer's seeds that must
 * keep parsing and loading (a mask pattern, a backward entry, every pattern
 * value at its bound). */
START_TEST(edge_cases_accepted)
{
    static const char *ok_files[] = {"edge-minimal-ok", "edge-mask-ok", "edge-bwd-kernel", "edge-max-seq-len-small",
                                     "edge-many-ranges", "edge-at-bounds-ok"};
    s2_device *dev = open_fake();
    for (size_t i = 0; i < sizeof ok_files / sizeof ok_files[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/corpus-manifest/%s", fuzz_dir, ok_files[i]);
        size_t size = 0;
        char *data = read_all(path, &size);
        char why[2048] = "";
        int ok = 0;
        ck_assert_msg(s2f_manifest_pipeline(dev, (const uint8_t *)data, size, &ok, why, sizeof why) == 0, "%s: %s",
                      path, why);
        ck_assert_msg(ok, "%s was refused", path);
        free(data);
    }
    s2_device_free(dev);
}
END_TEST

/* ---- hostile manifests under a bound ---- */

typedef struct hostile {
    const char *name;
    char *text;          /* the manifest */
    size_t len;
    const char *why;     /* a substring of the refusal */
    s2_status status;    /* the refusal's status: 0 for S2_ERR_PARSE */
} hostile;

static s2_device *bounded_dev;

/* In the child: the status and message of the parse, then the whole
 * pipeline; 0 when the manifest was refused as expected. */
static int run_hostile(void *arg)
{
    const hostile *h = arg;
    s2_ctx *ctx = s2_ctx_new();
    s2_manifest *m = NULL;
    s2_status st = s2_manifest_parse(ctx, h->text, h->len, &m);
    if (st != (h->status ? h->status : S2_ERR_PARSE) || m || !strstr(s2_ctx_message(ctx), h->why)) {
        fprintf(stderr, "%s: %s: %s\n", h->name, s2_status_name(st), s2_ctx_message(ctx));
        return 1;
    }
    s2_ctx_free(ctx);
    char why[2048];
    int ok = 1;
    if (s2f_manifest_pipeline(bounded_dev, (const uint8_t *)h->text, h->len, &ok, why, sizeof why) || ok) {
        fprintf(stderr, "%s: %s\n", h->name, ok ? "accepted" : why);
        return 2;
    }
    return 0;
}

/* The text of corpus file `name`, its `end` line dropped, then `lines`
 * copies of `line` and a new `end`. */
static hostile grown(const char *name, const char *line, int lines, const char *why)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/corpus-manifest/%s", fuzz_dir, name);
    size_t size = 0;
    char *base = read_all(path, &size);
    char *end = strstr(base, "\nend\n");
    ck_assert_ptr_nonnull(end);
    size_t head = (size_t)(end - base) + 1, ll = strlen(line);
    char *t = malloc(head + (size_t)lines * ll + 5);
    ck_assert_ptr_nonnull(t);
    memcpy(t, base, head);
    for (int i = 0; i < lines; i++)
        memcpy(t + head + (size_t)i * ll, line, ll);
    memcpy(t + head + (size_t)lines * ll, "end\n", 5);
    free(base);
    return (hostile){name, t, strlen(t), why, 0};
}

static hostile from_file(const char *name, const char *why)
{
    return grown(name, "", 0, why);
}

/* A module for a newer runtime: refused as unsupported, not malformed. */
static hostile newer(const char *name, const char *why)
{
    hostile h = from_file(name, why);
    h.status = S2_ERR_UNSUPPORTED;
    return h;
}

START_TEST(hostile_manifests_bounded)
{
    bounded_dev = open_fake();
    /* 100 masks of one 4 x 4 block each; mask i must be numbered i */
    char *masks = malloc(100 * 40);
    ck_assert_ptr_nonnull(masks);
    size_t at = 0;
    for (int i = 0; i < 100; i++)
        at += (size_t)snprintf(masks + at, 40, "pattern.mask %d 1 4 4 f731\n", i);
    hostile cases[] = {
        from_file("edge-huge-mask-claim", "bad mask"),      /* 4096 x 1024 x 1024 blocks in two digits */
        grown("edge-minimal-ok", "pattern.range drop 0 1 0 1 0 f\n", 20000, "more ranges than a pattern may hold"),
        grown("edge-minimal-ok", masks, 1, "pattern.mask: I out of range (0..63): 64"),
        from_file("edge-repeated-head-rule", "a second rule for one head"),
        from_file("edge-v1-header", "version 1 (an older s2c)"),
        from_file("edge-v3-header", "version 3 (an older s2c); this one reads version 5: compile the module again"),
        from_file("edge-v4-header", "version 4 (an older s2c); this one reads version 5: compile the module again"),
        from_file("edge-v6-header", "version 6 (a newer s2c)"),
        from_file("edge-unknown-keys", "manifest:5: unknown key (written by a newer s2c? this runtime reads manifest "
                                       "version 5): future.key"),
        from_file("edge-no-requires", "no 'requires' line"),
        newer("edge-requires-newer", "manifest:2: the module needs an s2c runtime of version 0.3 or newer; this one is "),
        newer("edge-requires-next-major", "version 1.0 or newer"),
    };
    free(masks);
    const int64_t limit = (int64_t)256 << 20;
    const int secs = 5;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        s2t_bounded b;
        ck_assert_int_eq(s2t_run_bounded(run_hostile, &cases[i], limit, 2 * secs, &b), 0);
        ck_assert_msg(b.exit_code == 0, "%s: child exit %d", cases[i].name, b.exit_code);
        ck_assert_msg(b.seconds < secs, "%s: %.2f s", cases[i].name, b.seconds);
        ck_assert_msg(b.peak_kib < s2t_rss_bound_kib(limit), "%s: peak %lld KiB", cases[i].name,
                      (long long)b.peak_kib);
        free(cases[i].text);
    }
    s2_device_free(bounded_dev);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s FAKE_LIB FUZZ_DIR\n", argv[0]);
        return 2;
    }
    fake_path = argv[1];
    fuzz_dir = argv[2];
    Suite *s = suite_create("manifest_fuzz");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, corpus_replays);
    tcase_add_test(tc, edge_cases_accepted);
    tcase_add_test(tc, hostile_manifests_bounded);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK); /* the driver is loaded once per process */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
