/* The cache's stores and reads against a hostile directory (codegen/cache.c,
 * common/file.c):
 *  - a symlink (to a file, or dangling) or a file planted at every name a
 *    store may give its temporary file is never followed, created through,
 *    truncated or written: the names come from an injected generator, so
 *    the test knows them all;
 *  - stores remove this user's stale temporary files (older than
 *    S2_CACHE_STALE_TMP_SECONDS) of the temporary name's shape, nothing else;
 *  - an entry whose file or header claims more than S2_CACHE_MAX_PAYLOAD is
 *    a miss before anything is allocated, under a 256 MB address-space limit
 *    (tests/harness/bounded.h); a payload of exactly the cap is a hit. */
#include "../harness/bounded.h"
#include "cache_helpers.h"
#include "cache_internal.h"
#include "check_main.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- injected temporary names ---- */

enum { NAMES = 4 };
static const char *const names[NAMES] = {"00000000000000aa", "00000000000000bb", "00000000000000cc",
                                         "00000000000000dd"};

typedef struct namer {
    int calls;
} namer;

/* names[0], names[1], ... round and round: the only names a store can try */
static bool cycle_names(void *arg, char out[S2_TMP_SUFFIX_LEN + 1])
{
    namer *n = arg;
    memcpy(out, names[n->calls++ % NAMES], S2_TMP_SUFFIX_LEN + 1);
    return true;
}

static void tmp_name(const s2_cache *c, const s2_cache_key *k, int i, char *out, size_t cap)
{
    char entry[1024];
    entry_path(c, k, entry, sizeof entry);
    snprintf(out, cap, "%s.tmp.%s", entry, names[i]);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

static void expect_text(const char *path, const char *want)
{
    char got[256] = "";
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    size_t n = fread(got, 1, sizeof got - 1, f);
    fclose(f);
    got[n] = '\0';
    ck_assert_msg(strcmp(got, want) == 0, "%s holds \"%s\", not \"%s\"", path, got, want);
}

static void expect_link(const char *path, const char *target)
{
    char got[1024];
    ssize_t n = readlink(path, got, sizeof got - 1);
    ck_assert_msg(n >= 0, "%s is no longer a symlink", path);
    got[n] = '\0';
    ck_assert_str_eq(got, target);
}

/* What sits at the temporary names: symlinks to files, dangling symlinks, files. */
typedef enum { PLANT_LINK, PLANT_DANGLING, PLANT_FILE } plant_kind;

static void plant(plant_kind kind, const char *at, const char *victim, int i)
{
    char text[64];
    snprintf(text, sizeof text, "victim %d\n", i);
    if (kind == PLANT_LINK)
        write_text(victim, text);
    if (kind == PLANT_FILE)
        write_text(at, text);
    else
        ck_assert_int_eq(symlink(victim, at), 0);
}

static void expect_untouched(plant_kind kind, const char *at, const char *victim, int i)
{
    char text[64];
    snprintf(text, sizeof text, "victim %d\n", i);
    if (kind == PLANT_FILE) {
        expect_text(at, text);
        return;
    }
    expect_link(at, victim);
    if (kind == PLANT_LINK)
        expect_text(victim, text);
    else
        ck_assert_msg(access(victim, F_OK) != 0, "%s was created through the dangling link", victim);
}

/* Every name taken: the store fails after S2_TMP_TRIES names, writes
 * nothing anywhere; with one name free it takes that one and leaves the
 * planted ones as they were. */
START_TEST(planted_names_are_never_followed)
{
    static const plant_kind kinds[] = {PLANT_LINK, PLANT_DANGLING, PLANT_FILE};
    make_tmp();
    char dir[512], victims[512];
    snprintf(dir, sizeof dir, "%s/cache", g_tmp);
    snprintf(victims, sizeof victims, "%s/victims", g_tmp);
    ck_assert_int_eq(mkdir(victims, 0700), 0);
    umask(0);   /* the entry's mode is the store's own, not the umask's */
    s2_ctx *ctx = s2_ctx_new();
    s2_cache *c;
    ck_assert_int_eq(s2_cache_open(ctx, dir, &c), S2_OK);
    namer nm = {0};
    s2_cache_set_tmp_suffix(c, cycle_names, &nm);
    uint8_t *p = payload(40, 3000);
    for (size_t kind = 0; kind < sizeof kinds / sizeof kinds[0]; kind++) {
        char key_text[32];
        snprintf(key_text, sizeof key_text, "planted %zu", kind);
        s2_cache_key k = make_key(key_text);
        char at[NAMES][1100], victim[NAMES][600], entry[1024];
        entry_path(c, &k, entry, sizeof entry);
        for (int i = 0; i < NAMES; i++) {
            tmp_name(c, &k, i, at[i], sizeof at[i]);
            snprintf(victim[i], sizeof victim[i], "%s/v%zu-%d", victims, kind, i);
            plant(kinds[kind], at[i], victim[i], i);
        }
        nm.calls = 0;
        ck_assert_int_eq(s2_cache_store(ctx, c, &k, p, 3000), S2_ERR_IO);
        ck_assert_msg(strstr(s2_ctx_message(ctx), "temporary names in a row were taken"), "%s",
                      s2_ctx_message(ctx));
        ck_assert_int_eq(nm.calls, S2_TMP_TRIES);
        ck_assert_int_ne(access(entry, F_OK), 0);
        for (int i = 0; i < NAMES; i++)
            expect_untouched(kinds[kind], at[i], victim[i], i);

        /* one name free (the third the store tries): stored there, then renamed */
        ck_assert_int_eq(unlink(at[2]), 0);
        nm.calls = 0;
        ck_assert_msg(s2_cache_store(ctx, c, &k, p, 3000) == S2_OK, "%s", s2_ctx_message(ctx));
        ck_assert_int_eq(nm.calls, 3);
        expect_hit(ctx, c, &k, p, 3000);
        ck_assert_int_ne(access(at[2], F_OK), 0);
        struct stat sb;
        ck_assert_int_eq(lstat(entry, &sb), 0);
        ck_assert(S_ISREG(sb.st_mode));
        ck_assert_int_eq(sb.st_mode & 0777, 0600);
        for (int i = 0; i < NAMES; i++)
            if (i != 2)
                expect_untouched(kinds[kind], at[i], victim[i], i);
        if (kinds[kind] == PLANT_LINK)
            expect_text(victim[2], "victim 2\n");
    }
    free(p);
    s2_cache_close(c);
    s2_ctx_free(ctx);
    drop_tmp();
}
END_TEST

/* A generator that has no name fails the store before anything is created. */
static bool no_names(void *arg, char out[S2_TMP_SUFFIX_LEN + 1])
{
    (void)arg;
    (void)out;
    return false;
}

/* Names that are not 16 lowercase hex digits (a path separator, say) are refused too. */
static bool bad_names(void *arg, char out[S2_TMP_SUFFIX_LEN + 1])
{
    (void)arg;
    memcpy(out, "../../../etc/pwd", S2_TMP_SUFFIX_LEN + 1);
    return true;
}

START_TEST(temporary_names)
{
    /* the default generator: the shape, and no repeats in 1000 names */
    enum { N = 1000 };
    static char seen[N][S2_TMP_SUFFIX_LEN + 1];
    for (int i = 0; i < N; i++) {
        ck_assert(s2_tmp_suffix_random(NULL, seen[i]));
        ck_assert_msg(s2_tmp_suffix_valid(seen[i]), "%s", seen[i]);
        for (int j = 0; j < i; j++)
            ck_assert_str_ne(seen[i], seen[j]);
    }
    ck_assert(!s2_tmp_suffix_valid("0123456789abcde"));
    ck_assert(!s2_tmp_suffix_valid("0123456789abcdef0"));
    ck_assert(!s2_tmp_suffix_valid("0123456789ABCDEF"));
    ck_assert(!s2_tmp_suffix_valid("0123456789abcdeg"));

    make_tmp();
    s2_ctx *ctx = s2_ctx_new();
    s2_cache *c;
    ck_assert_int_eq(s2_cache_open(ctx, g_tmp, &c), S2_OK);
    s2_cache_key k = make_key("names");
    uint8_t *p = payload(41, 100);
    s2_cache_set_tmp_suffix(c, no_names, NULL);
    ck_assert_int_eq(s2_cache_store(ctx, c, &k, p, 100), S2_ERR_IO);
    ck_assert_msg(strstr(s2_ctx_message(ctx), "no random name"), "%s", s2_ctx_message(ctx));
    s2_cache_set_tmp_suffix(c, bad_names, NULL);
    ck_assert_int_eq(s2_cache_store(ctx, c, &k, p, 100), S2_ERR_IO);
    DIR *d = opendir(g_tmp);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        ck_assert_msg(e->d_name[0] == '.', "left behind: %s", e->d_name);
    closedir(d);
    /* the default again: stored */
    s2_cache_set_tmp_suffix(c, NULL, NULL);
    ck_assert_int_eq(s2_cache_store(ctx, c, &k, p, 100), S2_OK);
    expect_hit(ctx, c, &k, p, 100);
    free(p);
    s2_cache_close(c);
    s2_ctx_free(ctx);
    drop_tmp();
}
END_TEST

/* ---- stale temporary files ---- */

typedef struct leftover {
    const char *suffix;   /* after "<64 hex digits of a key>", or the whole name when whole */
    bool whole;
    int age;              /* seconds before now */
    char kind;            /* 'f' file, 'd' directory, 'l' symlink to a victim */
    bool removed;
} leftover;

START_TEST(stale_temporary_files_are_removed)
{
    const int stale = S2_CACHE_STALE_TMP_SECONDS;
    const leftover cases[] = {
        {".s2ck.tmp.0123456789abcdef", false, stale + 60, 'f', true},
        {".s2ck.tmp.fedcba9876543210", false, 10 * stale, 'f', true},
        {".s2ck.tmp.4242.4243", false, stale + 60, 'f', true},              /* 0.2.0's names */
        {".s2ck.tmp.1111111111111111", false, stale - 60, 'f', false},      /* fresh: a store under way */
        {".s2ck.tmp.2222222222222222", false, 0, 'f', false},
        {".s2ck", false, 10 * stale, 'f', false},                           /* an entry */
        {".s2ck.tmp.3333333333333333", false, 10 * stale, 'd', false},      /* not a regular file */
        {".s2ck.tmp.4444444444444444", false, 10 * stale, 'l', false},
        {".s2ck.tmp.0123456789abcde", false, 10 * stale, 'f', false},       /* 15 digits */
        {".s2ck.tmp.0123456789abcdef0", false, 10 * stale, 'f', false},     /* 17 */
        {".s2ck.tmp.0123456789ABCDEF", false, 10 * stale, 'f', false},
        {".s2ck.tmp.0123456789abcdef.bak", false, 10 * stale, 'f', false},
        {".s2ck.tmp.12.", false, 10 * stale, 'f', false},
        {".s2ck.tmp.", false, 10 * stale, 'f', false},
        {".s2cx.tmp.0123456789abcdef", false, 10 * stale, 'f', false},
        {"notes.tmp.0123456789abcdef", true, 10 * stale, 'f', false},
        {"0123.s2ck.tmp.0123456789abcdef", true, 10 * stale, 'f', false},   /* not a key's name */
        {"README", true, 10 * stale, 'f', false},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    make_tmp();
    char dir[512], victim[512];
    snprintf(dir, sizeof dir, "%s/cache", g_tmp);
    snprintf(victim, sizeof victim, "%s/victim", g_tmp);
    write_text(victim, "victim\n");
    s2_ctx *ctx = s2_ctx_new();
    s2_cache *c;
    ck_assert_int_eq(s2_cache_open(ctx, dir, &c), S2_OK);
    char hex[65], path[N][1100];
    s2_cache_key old = make_key("an old entry");
    s2_cache_key_hex(&old, hex);
    time_t now = time(NULL);
    for (int i = 0; i < N; i++) {
        snprintf(path[i], sizeof path[i], "%s/%s%s", dir, cases[i].whole ? "" : hex, cases[i].suffix);
        if (cases[i].kind == 'd')
            ck_assert_int_eq(mkdir(path[i], 0700), 0);
        else if (cases[i].kind == 'l')
            ck_assert_int_eq(symlink(victim, path[i]), 0);
        else
            write_text(path[i], "leftover\n");
        struct timespec t[2] = {{now - cases[i].age, 0}, {now - cases[i].age, 0}};
        ck_assert_int_eq(utimensat(AT_FDCWD, path[i], t, AT_SYMLINK_NOFOLLOW), 0);
    }
    s2_cache_key k = make_key("a new entry");
    uint8_t *p = payload(42, 500);
    ck_assert_int_eq(s2_cache_store(ctx, c, &k, p, 500), S2_OK);
    for (int i = 0; i < N; i++) {
        struct stat sb;
        bool there = lstat(path[i], &sb) == 0;
        ck_assert_msg(there != cases[i].removed, "%s: %s", path[i] + strlen(dir) + 1,
                      there ? "left in place" : "removed");
    }
    expect_text(victim, "victim\n");
    expect_hit(ctx, c, &k, p, 500);
    free(p);
    s2_cache_close(c);
    s2_ctx_free(ctx);
    drop_tmp();
}
END_TEST

/* ---- entries over the cap ---- */

/* A file at k's entry: a valid header claiming `claim` bytes, `size` bytes
 * in all (sparse: nothing past the header is written). */
static int write_claim(const s2_cache *c, const s2_cache_key *k, uint64_t claim, uint64_t size)
{
    char path[1024];
    entry_path(c, k, path, sizeof path);
    uint8_t h[80] = {'S', '2', 'C', 'K', S2_CACHE_FORMAT};
    memcpy(h + 8, k->bytes, 32);
    for (int i = 0; i < 8; i++)
        h[40 + i] = (uint8_t)(claim >> (8 * i));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    int bad = write(fd, h, sizeof h) != (ssize_t)sizeof h || ftruncate(fd, (off_t)size) != 0;
    bad |= close(fd) != 0;
    return bad ? -1 : 0;
}

static int miss_too_large(s2_ctx *ctx, const s2_cache *c, const s2_cache_key *k)
{
    void *data = NULL;
    size_t size = 0;
    s2_status st = s2_cache_lookup(ctx, c, k, &data, &size);
    if (st != S2_ERR_NOT_FOUND || data || !strstr(s2_ctx_message(ctx), "too large")) {
        fprintf(stderr, "lookup: %s: %s\n", s2_status_name(st), s2_ctx_message(ctx));
        free(data);
        return 1;
    }
    return 0;
}

/* In the bounded child: each case a distinct exit code. */
static int oversized_child(void *arg)
{
    (void)arg;
    const uint64_t cap = S2_CACHE_MAX_PAYLOAD, gib8 = UINT64_C(8) << 30;
    s2_ctx *ctx = s2_ctx_new();
    s2_cache *c;
    if (s2_cache_open(ctx, g_tmp, &c) != S2_OK)
        return 10;
    s2_cache_key k = make_key("oversized");
    /* an 8 GiB entry whose header agrees (the 0.2.0 case), one a byte over the cap */
    if (write_claim(c, &k, gib8, 80 + gib8) != 0 || miss_too_large(ctx, c, &k))
        return 11;
    if (write_claim(c, &k, cap + 1, 80 + cap + 1) != 0 || miss_too_large(ctx, c, &k))
        return 12;
    /* a header claiming 8 GiB in a short file */
    if (write_claim(c, &k, gib8, 80 + 100) != 0 || miss_too_large(ctx, c, &k))
        return 13;
    /* a store over the cap is refused before it writes anything */
    uint8_t *big = calloc(1, cap + 1);   /* untouched pages */
    char path[1024];
    entry_path(c, &k, path, sizeof path);
    unlink(path);
    if (!big || s2_cache_store(ctx, c, &k, big, cap + 1) != S2_ERR_INVALID || access(path, F_OK) == 0)
        return 14;
    free(big);
    /* exactly the cap, zeros with the right checksum: a hit */
    uint8_t *zeros = calloc(1, cap);
    if (!zeros || write_claim(c, &k, cap, 80 + cap) != 0)
        return 15;
    uint8_t sum[32];
    keyed_sum(&k, zeros, cap, sum);
    free(zeros);
    int fd = open(path, O_WRONLY);
    if (fd < 0 || pwrite(fd, sum, 32, 48) != 32 || close(fd) != 0)
        return 16;
    void *data = NULL;
    size_t size = 0;
    if (s2_cache_lookup(ctx, c, &k, &data, &size) != S2_OK || size != cap) {
        fprintf(stderr, "lookup at the cap: %s\n", s2_ctx_message(ctx));
        return 17;
    }
    for (size_t i = 0; i < size; i += 4096)
        if (((uint8_t *)data)[i])
            return 18;
    free(data);
    s2_cache_close(c);
    s2_ctx_free(ctx);
    return 0;
}

START_TEST(oversized_entries_are_refused_unread)
{
    make_tmp();
    const int64_t limit = INT64_C(256) << 20;
    s2t_bounded b;
    ck_assert_int_eq(s2t_run_bounded(oversized_child, NULL, limit, 60, &b), 0);
    ck_assert_msg(b.exit_code == 0, "child exit %d", b.exit_code);
    ck_assert_msg(b.seconds < 30.0, "took %.1f s", b.seconds);
    ck_assert_int_le(b.peak_kib, s2t_rss_bound_kib(limit));
    drop_tmp();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cache_store");
    TCase *tc = tcase_create("cache_store");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, planted_names_are_never_followed);
    tcase_add_test(tc, temporary_names);
    tcase_add_test(tc, stale_temporary_files_are_removed);
    tcase_add_test(tc, oversized_entries_are_refused_unread);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
