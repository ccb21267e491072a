/* On-disk kernel cache (codegen/cache.c): SHA-256 known answers, keys,
 * hits and misses, corrupt entries, entries under another key or of the old
 * format, racing writers (threads and processes), unwritable and untrusted
 * directories, directory precedence, the toolchain identity.
 * Every test works in its own fresh directory under $TMPDIR (Check forks
 * each test, so environment changes stay inside it). */
#include "cache_helpers.h"
#include "check_main.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- SHA-256 (FIPS 180-4 examples) ---- */

static void hex32(const uint8_t *d, char *out)
{
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

START_TEST(sha256_known_answers)
{
    static const struct {
        const char *msg;
        const char *hex;
    } kat[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
    };
    uint8_t d[32];
    char hex[65];
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        s2_sha256_once(kat[i].msg, strlen(kat[i].msg), d);
        hex32(d, hex);
        ck_assert_str_eq(hex, kat[i].hex);
    }
    /* one million 'a', fed in uneven pieces */
    s2_sha256 s;
    s2_sha256_init(&s);
    char a[1000];
    memset(a, 'a', sizeof a);
    size_t done = 0;
    for (size_t step = 1; done < 1000000; step = step % 997 + 1) {
        size_t n = step < 1000000 - done ? step : 1000000 - done;
        s2_sha256_update(&s, a, n);
        done += n;
    }
    s2_sha256_final(&s, d);
    hex32(d, hex);
    ck_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
END_TEST

/* ---- keys ---- */

START_TEST(key_depends_on_every_field)
{
    enum { N = 40 };
    s2_cache_key keys[N];
    int n = 0;
    s2_ctx *ctx = s2_ctx_new();
#define KEY(gen, pat, sp, tool, ar)                                                                     \
    do {                                                                                               \
        s2_cache_key_desc d_ = {.generator = gen, .pattern = pat, .spec = sp, .toolchain = tool, .arch = ar}; \
        ck_assert_int_eq(s2_cache_key_build(ctx, &d_, &keys[n]), S2_OK);                              \
        n++;                                                                                           \
    } while (0)
    const s2_kernel_spec *b = &base_spec;
    KEY("0.1.0", "p", b, "t", "sm_90a");
    KEY("0.1.1", "p", b, "t", "sm_90a");
    KEY("0.1.0", "q", b, "t", "sm_90a");
    KEY("0.1.0", "p ", b, "t", "sm_90a");
    KEY("0.1.0", "", b, "t", "sm_90a");
    KEY("0.1.0", "p", b, "u", "sm_90a");
    KEY("0.1.0", "p", b, "t", "sm_90");
    KEY("0.1.0", "p", b, "t", "sm_80");
    /* a boundary moved between two strings is another key */
    KEY("0.1.0", "pt", b, "", "sm_90a");
    KEY("0.1.0", "", b, "pt", "sm_90a");
    /* every spec field, one at a time */
    s2_kernel_spec v[9];
    for (int i = 0; i < 9; i++)
        v[i] = base_spec;
    v[0].kind = (s2_kernel_kind)1;
    v[1].dtype = S2_DTYPE_F16;
    v[2].head_dim = 64;
    v[3].arch = S2_ARCH_SM90;
    v[4].block_m = 64;
    v[5].block_n = 128;
    v[6].num_warps = 4;
    v[7].num_stages = 3;
    v[8].kv_dtype = S2_DTYPE_E4M3;
    for (int i = 0; i < 9; i++)
        KEY("0.1.0", "p", &v[i], "t", "sm_90a");
    /* swapped values of two fields differ too */
    s2_kernel_spec sw = base_spec;
    sw.block_m = base_spec.block_n;
    sw.block_n = base_spec.block_m;
    KEY("0.1.0", "p", &sw, "t", "sm_90a");
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            ck_assert_msg(memcmp(&keys[i], &keys[j], sizeof keys[i]) != 0, "keys %d and %d collide", i, j);

    /* the same description gives the same key; NULL generator is s2_generator_id(),
     * the version, 16 hex digits of the generating sources' hash and the LLVM version */
    s2_cache_key again, dflt, named;
    s2_cache_key_desc d = {.generator = "0.1.0", .pattern = "p", .spec = b, .toolchain = "t", .arch = "sm_90a"};
    ck_assert_int_eq(s2_cache_key_build(ctx, &d, &again), S2_OK);
    ck_assert_mem_eq(&again, &keys[0], sizeof again);
    d.generator = NULL;
    ck_assert_int_eq(s2_cache_key_build(ctx, &d, &dflt), S2_OK);
    d.generator = s2_generator_id();
    ck_assert_int_eq(s2_cache_key_build(ctx, &d, &named), S2_OK);
    ck_assert_mem_eq(&dflt, &named, sizeof dflt);
    const char *gid = s2_generator_id();
    size_t vl = strlen(s2_version());
    ck_assert_msg(strncmp(gid, s2_version(), vl) == 0 && gid[vl] == '+', "generator id %s", gid);
    for (size_t i = vl + 1; i < vl + 17; i++)
        ck_assert_msg(gid[i] && strchr("0123456789abcdef", gid[i]) != NULL, "generator id %s", gid);
    ck_assert_msg(strncmp(gid + vl + 17, "+llvm", 5) == 0 && gid[vl + 22] >= '0' && gid[vl + 22] <= '9',
                  "generator id %s", gid);
    /* the bare version (what s2c 0.1.0 builds before it used) is another key */
    d.generator = s2_version();
    ck_assert_int_eq(s2_cache_key_build(ctx, &d, &named), S2_OK);
    ck_assert(memcmp(&dflt, &named, sizeof dflt) != 0);

    d.spec = NULL;
    ck_assert_int_eq(s2_cache_key_build(ctx, &d, &again), S2_ERR_INVALID);
    d.spec = b;
    d.arch = "";
    ck_assert_int_eq(s2_cache_key_build(ctx, &d, &again), S2_ERR_INVALID);
    d.arch = "sm_90a";
    d.pattern = NULL;
    ck_assert_int_eq(s2_cache_key_build(ctx, &d, &again), S2_ERR_INVALID);

    char hex[65];
    s2_cache_key_hex(&keys[0], hex);
    ck_assert_uint_eq(strlen(hex), 64);
    ck_assert_uint_eq(strspn(hex, "0123456789abcdef"), 64);
#undef KEY
    s2_ctx_free(ctx);
}
END_TEST

/* ---- hits and misses ---- */

START_TEST(hit_and_miss)
{
    make_tmp();
    char dir[512];
    snprintf(dir, sizeof dir, "%s/a/b/cache/", g_tmp);
    s2_ctx *ctx = s2_ctx_new();
    s2_cache *c;
    ck_assert_int_eq(s2_cache_open(ctx, dir, &c), S2_OK);
    /* created with mode 0700, trailing slash dropped */
    struct stat sb;
    ck_assert_int_eq(stat(s2_cache_dir(c), &sb), 0);
    ck_assert_int_eq(sb.st_mode & 0777, 0700);
    ck_assert_int_eq(s2_cache_dir(c)[strlen(s2_cache_dir(c)) - 1], 'e');

    s2_cache_key k1 = make_key("pattern one"), k2 = make_key("pattern two");
    expect_miss(ctx, c, &k1, "cache miss");
    uint8_t *p1 = payload(1, 12345), *p2 = payload(2, 1);
    ck_assert_int_eq(s2_cache_store(ctx, c, &k1, p1, 12345), S2_OK);
    expect_hit(ctx, c, &k1, p1, 12345);
    expect_miss(ctx, c, &k2, "cache miss");
    ck_assert_int_eq(s2_cache_store(ctx, c, &k2, p2, 1), S2_OK);
    expect_hit(ctx, c, &k2, p2, 1);
    expect_hit(ctx, c, &k1, p1, 12345);

    /* replacing an entry */
    uint8_t *p3 = payload(3, 777);
    ck_assert_int_eq(s2_cache_store(ctx, c, &k1, p3, 777), S2_OK);
    expect_hit(ctx, c, &k1, p3, 777);

    /* the entry file has the documented layout */
    char path[1024];
    entry_path(c, &k1, path, sizeof path);
    char *file;
    size_t flen;
    ck_assert_int_eq(s2_read_file(ctx, path, &file, &flen), S2_OK);
    ck_assert_uint_eq(flen, 80 + 777);
    ck_assert_mem_eq(file, "S2CK\2\0\0\0", 8);
    ck_assert_mem_eq(file + 8, k1.bytes, 32);
    ck_assert_int_eq((uint8_t)file[40] | (uint8_t)file[41] << 8, 777);
    uint8_t sum[32];
    keyed_sum(&k1, p3, 777, sum);
    ck_assert_mem_eq(file + 48, sum, 32);
    /* not the payload's plain SHA-256 (format 1) */
    s2_sha256_once(p3, 777, sum);
    ck_assert(memcmp(file + 48, sum, 32) != 0);
    ck_assert_mem_eq(file + 80, p3, 777);
    free(file);

    /* only the two entries are left (no temporary files) */
    DIR *d = opendir(s2_cache_dir(c));
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        files += e->d_name[0] != '.';
    closedir(d);
    ck_assert_int_eq(files, 2);

    ck_assert_int_eq(s2_cache_store(ctx, c, &k1, p3, 0), S2_ERR_INVALID);
    void *data;
    size_t size;
    ck_assert_int_eq(s2_cache_lookup(ctx, NULL, &k1, &data, &size), S2_ERR_INVALID);
    free(p1);
    free(p2);
    free(p3);
    s2_cache_close(c);
    s2_cache_close(NULL);
    s2_ctx_free(ctx);
    drop_tmp();
}
END_TEST

/* ---- corrupt entries ---- */

typedef void (*corrupter)(uint8_t *file, size_t *len);
static void c_flip_payload(uint8_t *f, size_t *len) { f[*len - 7] ^= 0x04; }
static void c_flip_key(uint8_t *f, size_t *len) { (void)len; f[20] ^= 0x01; }
static void c_flip_sum(uint8_t *f, size_t *len) { (void)len; f[60] ^= 0x80; }
static void c_magic(uint8_t *f, size_t *len) { (void)len; memcpy(f, "S2CX", 4); }
static void c_version(uint8_t *f, size_t *len) { (void)len; f[4] = 3; }
static void c_truncate_half(uint8_t *f, size_t *len) { (void)f; *len /= 2; }
static void c_truncate_one(uint8_t *f, size_t *len) { (void)f; *len -= 1; }
static void c_truncate_header(uint8_t *f, size_t *len) { (void)f; *len = 10; }
static void c_zero_length(uint8_t *f, size_t *len) { (void)f; *len = 0; }
static void c_length_field(uint8_t *f, size_t *len) { (void)len; f[40] ^= 1; }
static void c_trailing(uint8_t *f, size_t *len) { f[*len] = 0; *len += 1; }

START_TEST(corrupt_entries_are_misses_and_rebuilt)
{
    static const struct {
        const char *what;
        corrupter fn;
        const char *note;
    } cases[] = {
        {"payload byte", c_flip_payload, "checksum"},
        {"key byte", c_flip_key, "key mismatch"},
        {"checksum byte", c_flip_sum, "checksum"},
        {"magic", c_magic, "bad magic"},
        {"format version", c_version, "format version"},
        {"truncated to half", c_truncate_half, "truncated"},
        {"truncated by one", c_truncate_one, "truncated"},
        {"truncated inside the header", c_truncate_header, "shorter than its header"},
        {"zero-length file", c_zero_length, "shorter than its header"},
        {"length field", c_length_field, "length"},
        {"trailing byte", c_trailing, "length"},
    };
    make_tmp();
    s2_ctx *ctx = s2_ctx_new();
    s2_cache *c;
    ck_assert_int_eq(s2_cache_open(ctx, g_tmp, &c), S2_OK);
    s2_cache_key k = make_key("corrupt");
    enum { N = 5000 };
    uint8_t *p = payload(9, N);
    char path[1024];
    entry_path(c, &k, path, sizeof path);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_int_eq(s2_cache_store(ctx, c, &k, p, N), S2_OK);
        char *file;
        size_t len;
        ck_assert_int_eq(s2_read_file(ctx, path, &file, &len), S2_OK);
        file = realloc(file, len + 1);
        cases[i].fn((uint8_t *)file, &len);
        ck_assert_int_eq(s2_write_file_atomic(ctx, path, file, len), S2_OK);
        free(file);
        expect_miss(ctx, c, &k, "corrupt entry");
        ck_assert_msg(strstr(s2_ctx_message(ctx), cases[i].note) != NULL, "%s: \"%s\"", cases[i].what,
                      s2_ctx_message(ctx));
        /* the next store repairs it */
        ck_assert_int_eq(s2_cache_store(ctx, c, &k, p, N), S2_OK);
        expect_hit(ctx, c, &k, p, N);
    }

    /* any single flipped bit of a small entry is caught */
    uint8_t *small = payload(10, 64);
    ck_assert_int_eq(s2_cache_store(ctx, c, &k, small, 64), S2_OK);
    char *good;
    size_t glen;
    ck_assert_int_eq(s2_read_file(ctx, path, &good, &glen), S2_OK);
    for (size_t pos = 0; pos < glen; pos++) {
        for (int bit = 0; bit < 8; bit += 3) {
            good[pos] ^= (char)(1 << bit);
            ck_assert_int_eq(s2_write_file_atomic(ctx, path, good, glen), S2_OK);
            void *data;
            size_t size;
            ck_assert_msg(s2_cache_lookup(ctx, c, &k, &data, &size) == S2_ERR_NOT_FOUND,
                          "flip of bit %d at byte %zu not detected", bit, pos);
            good[pos] ^= (char)(1 << bit);
        }
    }
    /* a directory where the entry should be is a miss, not a crash */
    unlink(path);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    expect_miss(ctx, c, &k, "cache miss");
    rmdir(path);
    free(good);
    free(small);
    free(p);
    s2_cache_close(c);
    s2_ctx_free(ctx);
    drop_tmp();
}
END_TEST

/* ---- entries under another key, entries of format 1 ---- */

static void copy_file(s2_ctx *ctx, const char *from, const char *to, const s2_cache_key *new_header_key)
{
    char *file;
    size_t len;
    ck_assert_int_eq(s2_read_file(ctx, from, &file, &len), S2_OK);
    if (new_header_key)
        memcpy(file + 8, new_header_key->bytes, 32);
    ck_assert_int_eq(s2_write_file_atomic(ctx, to, file, len), S2_OK);
    free(file);
}

/* A valid entry copied to another key's file is a miss with its reason:
 * the header's key differs, and with the header's key rewritten too the
 * keyed checksum differs.  An entry of format 1 (checksum over the payload
 * only) is a miss as well, not an error.  None of them crashes, and the
 * next store of the right payload is a hit. */
START_TEST(entries_under_another_key_and_old_format)
{
    make_tmp();
    s2_ctx *ctx = s2_ctx_new();
    s2_cache *c;
    ck_assert_int_eq(s2_cache_open(ctx, g_tmp, &c), S2_OK);
    s2_cache_key ka = make_key("entry A"), kb = make_key("entry B");
    enum { NA = 3000, NB = 2000 };
    uint8_t *pa = payload(21, NA), *pb = payload(22, NB);
    char path_a[1024], path_b[1024];
    entry_path(c, &ka, path_a, sizeof path_a);
    entry_path(c, &kb, path_b, sizeof path_b);
    ck_assert_int_eq(s2_cache_store(ctx, c, &ka, pa, NA), S2_OK);
    ck_assert_int_eq(s2_cache_store(ctx, c, &kb, pb, NB), S2_OK);

    /* A's file under B's name */
    copy_file(ctx, path_a, path_b, NULL);
    expect_miss(ctx, c, &kb, "corrupt entry");
    ck_assert_msg(strstr(s2_ctx_message(ctx), "key mismatch"), "%s", s2_ctx_message(ctx));
    /* and with B's key written into its header: the checksum covers the key */
    copy_file(ctx, path_a, path_b, &kb);
    expect_miss(ctx, c, &kb, "corrupt entry");
    ck_assert_msg(strstr(s2_ctx_message(ctx), "checksum mismatch (payload, length or key)"), "%s",
                  s2_ctx_message(ctx));
    expect_hit(ctx, c, &ka, pa, NA);   /* A itself is untouched */
    /* a flipped byte of that copy: still a miss */
    char *file;
    size_t len;
    ck_assert_int_eq(s2_read_file(ctx, path_b, &file, &len), S2_OK);
    file[80 + 5] ^= 0x10;
    ck_assert_int_eq(s2_write_file_atomic(ctx, path_b, file, len), S2_OK);
    free(file);
    expect_miss(ctx, c, &kb, "checksum mismatch");
    ck_assert_int_eq(s2_cache_store(ctx, c, &kb, pb, NB), S2_OK);
    expect_hit(ctx, c, &kb, pb, NB);

    /* a well-formed entry of format 1: version 1, SHA-256 of the payload alone */
    uint8_t *old = malloc(80 + NB);
    memcpy(old, "S2CK\1\0\0\0", 8);
    memcpy(old + 8, kb.bytes, 32);
    for (int i = 0; i < 8; i++)
        old[40 + i] = (uint8_t)((uint64_t)NB >> (8 * i));
    s2_sha256_once(pb, NB, old + 48);
    memcpy(old + 80, pb, NB);
    ck_assert_int_eq(s2_write_file_atomic(ctx, path_b, old, 80 + NB), S2_OK);
    expect_miss(ctx, c, &kb, "corrupt entry");
    ck_assert_msg(strstr(s2_ctx_message(ctx), "another format version"), "%s", s2_ctx_message(ctx));
    /* the same bytes as format 2 but with the old checksum */
    old[4] = 2;
    ck_assert_int_eq(s2_write_file_atomic(ctx, path_b, old, 80 + NB), S2_OK);
    expect_miss(ctx, c, &kb, "checksum mismatch");
    ck_assert_int_eq(s2_cache_store(ctx, c, &kb, pb, NB), S2_OK);
    expect_hit(ctx, c, &kb, pb, NB);
    free(old);
    free(pa);
    free(pb);
    s2_cache_close(c);
    s2_ctx_free(ctx);
    drop_tmp();
}
END_TEST

/* ---- concurrency ---- */

enum { KEYS = 4, ROUNDS = 40, PAYLOAD = 200000 };

typedef struct worker {
    const s2_cache *cache;
    unsigned id;
    int errors;
    char msg[256];
} worker;

/* Store and read back KEYS entries ROUNDS times; every read is a whole,
 * correct entry or (before the first store lands) a plain miss. */
static int hammer(const s2_cache *cache, unsigned id, char *msg, size_t cap)
{
    s2_ctx *ctx = s2_ctx_new();
    int errors = 0;
    uint8_t *want[KEYS];
    s2_cache_key keys[KEYS];
    for (unsigned i = 0; i < KEYS; i++) {
        char pat[32];
        snprintf(pat, sizeof pat, "race %u", i);
        keys[i] = make_key(pat);
        want[i] = payload(100 + i, PAYLOAD + i);
    }
    for (unsigned r = 0; r < ROUNDS; r++) {
        unsigned i = (r + id) % KEYS;
        void *data;
        size_t size;
        s2_status st = s2_cache_lookup(ctx, cache, &keys[i], &data, &size);
        if (st == S2_OK) {
            if (size != PAYLOAD + i || memcmp(data, want[i], size) != 0) {
                errors++;
                snprintf(msg, cap, "worker %u: wrong bytes for key %u", id, i);
            }
            free(data);
        } else if (st != S2_ERR_NOT_FOUND || strstr(s2_ctx_message(ctx), "corrupt")) {
            errors++;
            snprintf(msg, cap, "worker %u: %s", id, s2_ctx_message(ctx));
        }
        if (s2_cache_store(ctx, cache, &keys[i], want[i], PAYLOAD + i) != S2_OK) {
            errors++;
            snprintf(msg, cap, "worker %u: store: %s", id, s2_ctx_message(ctx));
        }
    }
    for (unsigned i = 0; i < KEYS; i++)
        free(want[i]);
    s2_ctx_free(ctx);
    return errors;
}

static void *hammer_thread(void *arg)
{
    worker *w = arg;
    w->errors = hammer(w->cache, w->id, w->msg, sizeof w->msg);
    return NULL;
}

static void expect_all_keys(const s2_cache *c)
{
    s2_ctx *ctx = s2_ctx_new();
    for (unsigned i = 0; i < KEYS; i++) {
        char pat[32];
        snprintf(pat, sizeof pat, "race %u", i);
        s2_cache_key k = make_key(pat);
        uint8_t *want = payload(100 + i, PAYLOAD + i);
        expect_hit(ctx, c, &k, want, PAYLOAD + i);
        free(want);
    }
    /* no temporary file is left behind */
    DIR *d = opendir(s2_cache_dir(c));
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        ck_assert_msg(strstr(e->d_name, ".tmp.") == NULL, "left over: %s", e->d_name);
        files++;
    }
    closedir(d);
    ck_assert_int_eq(files, KEYS);
    s2_ctx_free(ctx);
}

/* An entry that is a FIFO, or a symlink to one, is a miss at once: the open
 * neither blocks on the FIFO nor follows the link (a lookup used to hang). */
START_TEST(fifo_and_symlink_entries_are_misses)
{
    make_tmp();
    s2_ctx *ctx = s2_ctx_new();
    s2_cache *c;
    ck_assert_int_eq(s2_cache_open(ctx, g_tmp, &c), S2_OK);
    s2_cache_key kf = make_key("fifo"), kl = make_key("link");
    char fifo[1024], link[1024];
    entry_path(c, &kf, fifo, sizeof fifo);
    entry_path(c, &kl, link, sizeof link);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_assert_int_eq(symlink(fifo, link), 0);
    void *data = NULL;
    size_t size = 0;
    alarm(20);   /* a hang fails the test instead of the suite's timeout */
    ck_assert_int_eq(s2_cache_lookup(ctx, c, &kf, &data, &size), S2_ERR_NOT_FOUND);
    ck_assert_msg(strstr(s2_ctx_message(ctx), "not a readable regular file"), "%s", s2_ctx_message(ctx));
    ck_assert_int_eq(s2_cache_lookup(ctx, c, &kl, &data, &size), S2_ERR_NOT_FOUND);
    alarm(0);
    ck_assert_ptr_null(data);
    s2_cache_close(c);
    s2_ctx_free(ctx);
    drop_tmp();
}
END_TEST

START_TEST(concurrent_threads)
{
    make_tmp();
    s2_cache *c;
    ck_assert_int_eq(s2_cache_open(NULL, g_tmp, &c), S2_OK);
    enum { T = 8 };
    pthread_t th[T];
    worker w[T];
    for (unsigned i = 0; i < T; i++) {
        w[i] = (worker){.cache = c, .id = i};
        ck_assert_int_eq(pthread_create(&th[i], NULL, hammer_thread, &w[i]), 0);
    }
    for (unsigned i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(w[i].errors == 0, "%d errors, last: %s", w[i].errors, w[i].msg);
    }
    expect_all_keys(c);
    s2_cache_close(c);
    drop_tmp();
}
END_TEST

START_TEST(concurrent_processes)
{
    make_tmp();
    s2_cache *c;
    ck_assert_int_eq(s2_cache_open(NULL, g_tmp, &c), S2_OK);
    enum { P = 6 };
    pid_t pids[P];
    for (unsigned i = 0; i < P; i++) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            /* each child opens its own handle, as another process would */
            s2_cache *mine;
            char msg[256] = "";
            int errors = s2_cache_open(NULL, g_tmp, &mine) == S2_OK ? hammer(mine, i, msg, sizeof msg) : 1;
            if (errors)
                fprintf(stderr, "%s\n", msg);
            s2_cache_close(mine);
            _exit(errors ? 1 : 0);
        }
    }
    for (unsigned i = 0; i < P; i++) {
        int status = 0;
        ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %u failed", i);
    }
    expect_all_keys(c);
    s2_cache_close(c);
    drop_tmp();
}
END_TEST

/* ---- unwritable directories ---- */

START_TEST(unwritable_directory)
{
    make_tmp();
    s2_ctx *ctx = s2_ctx_new();
    /* a path through a regular file cannot be created (even by root) */
    char file[512], dir[600];
    snprintf(file, sizeof file, "%s/plain", g_tmp);
    ck_assert_int_eq(s2_write_file_atomic(ctx, file, "x", 1), S2_OK);
    snprintf(dir, sizeof dir, "%s/sub/cache", file);
    s2_cache *c = (s2_cache *)1;
    ck_assert_int_eq(s2_cache_open(ctx, dir, &c), S2_ERR_IO);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "plain"));
    ck_assert_int_eq(s2_cache_open(ctx, file, &c), S2_ERR_IO);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "not a directory"));

    /* the directory turns into a file after open: stores fail with a message */
    snprintf(dir, sizeof dir, "%s/gone", g_tmp);
    ck_assert_int_eq(s2_cache_open(ctx, dir, &c), S2_OK);
    ck_assert_int_eq(rmdir(dir), 0);
    ck_assert_int_eq(s2_write_file_atomic(ctx, dir, "x", 1), S2_OK);
    s2_cache_key k = make_key("unwritable");
    uint8_t *p = payload(5, 100);
    s2_ctx_clear(ctx);
    ck_assert_int_eq(s2_cache_store(ctx, c, &k, p, 100), S2_ERR_IO);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "gone"));
    expect_miss(ctx, c, &k, "cache miss");
    s2_cache_close(c);

    /* a read-only directory (permissions do not bind root) */
    if (geteuid() != 0) {
        snprintf(dir, sizeof dir, "%s/ro", g_tmp);
        ck_assert_int_eq(s2_cache_open(ctx, dir, &c), S2_OK);
        ck_assert_int_eq(chmod(dir, 0500), 0);
        ck_assert_int_eq(s2_cache_store(ctx, c, &k, p, 100), S2_ERR_IO);
        ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "ro/"));
        s2_cache_close(c);
        snprintf(dir, sizeof dir, "%s/ro/sub", g_tmp);
        ck_assert_int_eq(s2_cache_open(ctx, dir, &c), S2_ERR_IO);
    }
    free(p);
    s2_ctx_free(ctx);
    drop_tmp();
}
END_TEST

/* ---- untrusted directories ---- */

static void expect_untrusted(s2_cache *c, const s2_cache_key *k, const char *why)
{
    s2_ctx *ctx = s2_ctx_new();
    const char *u = s2_cache_untrusted(c);
    ck_assert_ptr_nonnull(u);
    ck_assert_msg(strstr(u, why) && strstr(u, s2_cache_dir(c)) && strstr(u, "S2C_CACHE_TRUST_DIR=1"), "%s", u);
    /* a valid entry may be there: still a miss, and nothing is written */
    expect_miss(ctx, c, k, "cache miss: cache directory ");
    ck_assert_msg(strstr(s2_ctx_message(ctx), why), "%s", s2_ctx_message(ctx));
    uint8_t *p = payload(31, 100);
    ck_assert_int_eq(s2_cache_store(ctx, c, k, p, 100), S2_ERR_IO);
    ck_assert_msg(strstr(s2_ctx_message(ctx), "not stored: cache directory ") && strstr(s2_ctx_message(ctx), why),
                  "%s", s2_ctx_message(ctx));
    free(p);
    s2_ctx_free(ctx);
}

/* As ccache: a directory writable by group or others without the sticky
 * bit, or owned by another user, is not used (lookups miss, stores fail,
 * the reason names the directory and the opt-out); S2C_CACHE_TRUST_DIR=1 or
 * S2_CACHE_TRUST_DIR uses it anyway.  0700 and sticky 01777 are used; in a
 * sticky directory another user's entry is a miss. */
START_TEST(untrusted_directory)
{
    make_tmp();
    s2_ctx *ctx = s2_ctx_new();
    char dir[600];
    snprintf(dir, sizeof dir, "%s/shared", g_tmp);
    s2_cache *c;
    ck_assert_int_eq(s2_cache_open(ctx, dir, &c), S2_OK);   /* created 0700: used */
    ck_assert_ptr_null(s2_cache_untrusted(c));
    s2_cache_key k = make_key("trust");
    uint8_t *p = payload(30, 500);
    ck_assert_int_eq(s2_cache_store(ctx, c, &k, p, 500), S2_OK);
    s2_cache_close(c);

    static const struct {
        mode_t mode;
        const char *why;
    } bad[] = {
        {0777, "writable by others (mode 0777) without the sticky bit"},
        {0703, "writable by others (mode 0703) without the sticky bit"},
        {0770, "writable by its group (mode 0770) without the sticky bit"},
        {02770, "writable by its group (mode 2770) without the sticky bit"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(chmod(dir, bad[i].mode), 0);
        ck_assert_int_eq(s2_cache_open(ctx, dir, &c), S2_OK);
        expect_untrusted(c, &k, bad[i].why);
        s2_cache_close(c);
    }
    /* the opt-outs: the environment ("1" only) and the flag */
    ck_assert_int_eq(chmod(dir, 0777), 0);
    setenv("S2C_CACHE_TRUST_DIR", "0", 1);
    ck_assert_int_eq(s2_cache_open(ctx, dir, &c), S2_OK);
    expect_untrusted(c, &k, "mode 0777");
    s2_cache_close(c);
    setenv("S2C_CACHE_TRUST_DIR", "1", 1);
    ck_assert_int_eq(s2_cache_open(ctx, dir, &c), S2_OK);
    ck_assert_ptr_null(s2_cache_untrusted(c));
    expect_hit(ctx, c, &k, p, 500);
    s2_cache_close(c);
    unsetenv("S2C_CACHE_TRUST_DIR");
    ck_assert_int_eq(s2_cache_open_flags(ctx, dir, S2_CACHE_TRUST_DIR, &c), S2_OK);
    ck_assert_ptr_null(s2_cache_untrusted(c));
    expect_hit(ctx, c, &k, p, 500);
    ck_assert_int_eq(s2_cache_store(ctx, c, &k, p, 500), S2_OK);
    s2_cache_close(c);
    c = (s2_cache *)1;
    ck_assert_int_eq(s2_cache_open_flags(ctx, dir, 2, &c), S2_ERR_INVALID);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(s2_ctx_message(ctx), "unknown flags 0x2"), "%s", s2_ctx_message(ctx));

    /* sticky and world-writable, like /tmp: used */
    ck_assert_int_eq(chmod(dir, 01777), 0);
    ck_assert_int_eq(s2_cache_open(ctx, dir, &c), S2_OK);
    ck_assert_ptr_null(s2_cache_untrusted(c));
    expect_hit(ctx, c, &k, p, 500);
    char entry[1024];
    entry_path(c, &k, entry, sizeof entry);
    if (geteuid() == 0) {
        /* but not an entry another user put there (unless trusted) */
        ck_assert_int_eq(chown(entry, 12345, 12345), 0);
        expect_miss(ctx, c, &k, "owned by uid 12345, not by this user");
        s2_cache *t;
        ck_assert_int_eq(s2_cache_open_flags(ctx, dir, S2_CACHE_TRUST_DIR, &t), S2_OK);
        expect_hit(ctx, t, &k, p, 500);
        s2_cache_close(t);
    }
    s2_cache_close(c);

    /* a directory owned by another user */
    const char *foreign = "/";
    if (geteuid() == 0) {
        ck_assert_int_eq(chmod(dir, 0700), 0);
        ck_assert_int_eq(chown(dir, 12345, 12345), 0);
        foreign = dir;
    }
    if (geteuid() != 0 || foreign == dir) {
        ck_assert_int_eq(s2_cache_open(ctx, foreign, &c), S2_OK);
        char why[96];
        snprintf(why, sizeof why, "owned by uid %s, not by this user (uid %lu)", foreign == dir ? "12345" : "0",
                 (unsigned long)geteuid());
        expect_untrusted(c, &k, why);
        s2_cache_close(c);
        ck_assert_int_eq(s2_cache_open_flags(ctx, foreign, S2_CACHE_TRUST_DIR, &c), S2_OK);
        ck_assert_ptr_null(s2_cache_untrusted(c));
        s2_cache_close(c);
    }
    free(p);
    s2_ctx_free(ctx);
    drop_tmp();
}
END_TEST

/* ---- directory precedence ---- */

static void expect_dir(const char *arg, const char *want)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_cache *c;
    ck_assert_msg(s2_cache_open(ctx, arg, &c) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_str_eq(s2_cache_dir(c), want);
    struct stat sb;
    ck_assert_int_eq(stat(want, &sb), 0);
    ck_assert(S_ISDIR(sb.st_mode));
    ck_assert_int_eq(sb.st_mode & 0777, 0700);
    s2_cache_close(c);
    s2_ctx_free(ctx);
}

START_TEST(directory_precedence)
{
    make_tmp();
    char explicit_dir[512], env_dir[512], xdg[512], home[512], want[600];
    snprintf(explicit_dir, sizeof explicit_dir, "%s/explicit", g_tmp);
    snprintf(env_dir, sizeof env_dir, "%s/env", g_tmp);
    snprintf(xdg, sizeof xdg, "%s/xdg", g_tmp);
    snprintf(home, sizeof home, "%s/home", g_tmp);
    setenv("S2C_CACHE_DIR", env_dir, 1);
    setenv("XDG_CACHE_HOME", xdg, 1);
    setenv("HOME", home, 1);
    expect_dir(explicit_dir, explicit_dir);
    expect_dir(NULL, env_dir);
    expect_dir("", env_dir);
    setenv("S2C_CACHE_DIR", "", 1);
    snprintf(want, sizeof want, "%s/s2c", xdg);
    expect_dir(NULL, want);
    unsetenv("S2C_CACHE_DIR");
    expect_dir(NULL, want);
    setenv("XDG_CACHE_HOME", "relative/dir", 1); /* ignored, as XDG says */
    snprintf(want, sizeof want, "%s/.cache/s2c", home);
    expect_dir(NULL, want);
    unsetenv("XDG_CACHE_HOME");
    expect_dir(NULL, want);
    unsetenv("HOME");
    s2_ctx *ctx = s2_ctx_new();
    s2_cache *c;
    ck_assert_int_eq(s2_cache_open(ctx, NULL, &c), S2_ERR_IO);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "S2C_CACHE_DIR"));
    s2_ctx_free(ctx);
    drop_tmp();
}
END_TEST

/* ---- toolchain identity ---- */

START_TEST(toolchain_from_fake_ptxas)
{
    make_tmp();
    char script[512];
    snprintf(script, sizeof script, "%s/ptxas", g_tmp);
    FILE *f = fopen(script, "w");
    ck_assert_ptr_nonnull(f);
    fputs("#!/bin/sh\n[ \"$1\" = --version ] || exit 3\n"
          "echo 'ptxas: NVIDIA (R) Ptx optimizing assembler'\n"
          "echo 'Cuda compilation tools, release 99.1, V99.1.7'\n"
          "echo 'Build cuda_99.1.r99.1/compiler.1_0'\n",
          f);
    fclose(f);
    chmod(script, 0755);
    setenv("S2C_PTXAS", script, 1);
    s2_ctx *ctx = s2_ctx_new();
    const char *v, *again;
    ck_assert_msg(s2_toolchain_version(ctx, S2_CUBIN_PTXAS, &v) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_str_eq(v, "ptxas Cuda compilation tools, release 99.1, V99.1.7");
    ck_assert_int_eq(s2_toolchain_version(ctx, S2_CUBIN_AUTO, &again), S2_OK);
    ck_assert_ptr_eq(again, v); /* asked once */

    /* NULL toolchain in a key description means this identity */
    s2_cache_key_desc d = {.pattern = "p", .spec = &base_spec, .arch = "sm_90a"};
    s2_cache_key k1, k2;
    ck_assert_int_eq(s2_cache_key_build(ctx, &d, &k1), S2_OK);
    d.toolchain = v;
    ck_assert_int_eq(s2_cache_key_build(ctx, &d, &k2), S2_OK);
    ck_assert_mem_eq(&k1, &k2, sizeof k1);
    s2_ctx_free(ctx);
    drop_tmp();
}
END_TEST

START_TEST(toolchain_missing_or_broken)
{
    make_tmp();
    char script[512];
    snprintf(script, sizeof script, "%s/ptxas", g_tmp);
    FILE *f = fopen(script, "w");
    fputs("#!/bin/sh\necho broken\nexit 1\n", f);
    fclose(f);
    chmod(script, 0755);
    setenv("S2C_PTXAS", script, 1);
    s2_ctx *ctx = s2_ctx_new();
    const char *v = "x";
    ck_assert_int_eq(s2_toolchain_version(ctx, S2_CUBIN_PTXAS, &v), S2_ERR_TOOLCHAIN);
    ck_assert_ptr_null(v);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "--version failed"));
    ck_assert_int_eq(s2_toolchain_version(ctx, (s2_cubin_backend)42, &v), S2_ERR_INVALID);
    s2_ctx_free(ctx);
    drop_tmp();
}
END_TEST

/* The real tools, where present: the identities have their documented form. */
START_TEST(toolchain_real)
{
    s2_ctx *ctx = s2_ctx_new();
    const char *v;
    if (access("/usr/local/cuda/bin/ptxas", X_OK) == 0) {
        setenv("S2C_PTXAS", "/usr/local/cuda/bin/ptxas", 1);
        ck_assert_int_eq(s2_toolchain_version(ctx, S2_CUBIN_PTXAS, &v), S2_OK);
        ck_assert_msg(strncmp(v, "ptxas Cuda compilation tools, release ", 38) == 0, "%s", v);
    }
    s2_status st = s2_toolchain_version(ctx, S2_CUBIN_NVJITLINK, &v);
    if (st == S2_OK) {
        unsigned major, minor;
        char tail;
        ck_assert_msg(sscanf(v, "nvjitlink-%u.%u%c", &major, &minor, &tail) == 2, "%s", v);
        ck_assert_uint_ge(major, 12);
    } else {
        ck_assert_int_eq(st, S2_ERR_TOOLCHAIN);
    }
    s2_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cache");
    TCase *tc = tcase_create("cache");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, sha256_known_answers);
    tcase_add_test(tc, key_depends_on_every_field);
    tcase_add_test(tc, hit_and_miss);
    tcase_add_test(tc, corrupt_entries_are_misses_and_rebuilt);
    tcase_add_test(tc, entries_under_another_key_and_old_format);
    tcase_add_test(tc, fifo_and_symlink_entries_are_misses);
    tcase_add_test(tc, concurrent_threads);
    tcase_add_test(tc, concurrent_processes);
    tcase_add_test(tc, unwritable_directory);
    tcase_add_test(tc, untrusted_directory);
    tcase_add_test(tc, directory_precedence);
    tcase_add_test(tc, toolchain_from_fake_ptxas);
    tcase_add_test(tc, toolchain_missing_or_broken);
    tcase_add_test(tc, toolchain_real);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
