/* Whole-file reads and atomic writes. */
#define _POSIX_C_SOURCE 200809L
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* getrandom */
#endif
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

s2_status s2_read_file(s2_ctx *ctx, const char *path, char **data, size_t *len)
{
    *data = NULL;
    if (len)
        *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return s2_fail(ctx, S2_ERR_IO, "%s: %s", path, strerror(errno));
    s2_buf b;
    s2_buf_init(&b);
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
        s2_buf_append(&b, tmp, n);
    int err = ferror(f);
    fclose(f);
    if (err) {
        s2_buf_free(&b);
        return s2_fail(ctx, S2_ERR_IO, "%s: read error", path);
    }
    size_t l = 0;
    char *p = s2_buf_steal(&b, &l);
    if (!p)
        return s2_fail(ctx, S2_ERR_NOMEM, "%s: out of memory", path);
    *data = p;
    if (len)
        *len = l;
    return S2_OK;
}

/* 8 random bytes as 16 hex digits: getrandom, else /dev/urandom. */
bool s2_tmp_suffix_random(void *arg, char out[S2_TMP_SUFFIX_LEN + 1])
{
    (void)arg;
    uint8_t r[S2_TMP_SUFFIX_LEN / 2];
    ssize_t got = getrandom(r, sizeof r, GRND_NONBLOCK);
    if (got != (ssize_t)sizeof r) {
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        got = fd < 0 ? -1 : read(fd, r, sizeof r);
        if (fd >= 0)
            close(fd);
        if (got != (ssize_t)sizeof r)
            return false;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof r; i++) {
        out[2 * i] = hex[r[i] >> 4];
        out[2 * i + 1] = hex[r[i] & 15];
    }
    out[S2_TMP_SUFFIX_LEN] = '\0';
    return true;
}

bool s2_tmp_suffix_valid(const char *s)
{
    size_t n = strspn(s, "0123456789abcdef");
    return n == S2_TMP_SUFFIX_LEN && s[n] == '\0';
}

/* All n bytes between fd and buf (written when `out`, else read), retrying
 * on EINTR: false at an error or an early end. */
static bool fd_all(int fd, void *buf, size_t n, bool out)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = out ? write(fd, p, n) : read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

bool s2_read_full(int fd, void *buf, size_t n) { return fd_all(fd, buf, n, false); }

/* A new temporary file beside path (its name into tmp): created, never
 * opened when something is there already (a planted symlink or file is left
 * alone); another name on EEXIST, S2_TMP_TRIES names in all. */
static s2_status create_tmp(s2_ctx *ctx, const char *path, const s2_write_opts *o, char *tmp, size_t cap, int *fd)
{
    s2_tmp_suffix_fn next = o->suffix ? o->suffix : s2_tmp_suffix_random;
    char suffix[S2_TMP_SUFFIX_LEN + 1];
    for (int i = 0; i < S2_TMP_TRIES; i++) {
        if (!next(o->suffix_arg, suffix) || !s2_tmp_suffix_valid(suffix))
            return s2_fail(ctx, S2_ERR_IO, "%s: no random name for a temporary file", path);
        snprintf(tmp, cap, "%s" S2_TMP_TAG "%s", path, suffix);
        *fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, (mode_t)o->mode);
        if (*fd >= 0)
            return S2_OK;
        if (errno != EEXIST)
            return s2_fail(ctx, S2_ERR_IO, "%s: %s", tmp, strerror(errno));
    }
    return s2_fail(ctx, S2_ERR_IO, "%s: %d temporary names in a row were taken (" S2_TMP_TAG "*)", path,
                   S2_TMP_TRIES);
}

s2_status s2_write_file_atomic_opts(s2_ctx *ctx, const char *path, const void *data, size_t len,
                                    const s2_write_opts *opts)
{
    const s2_write_opts dflt = {.mode = 0666};
    const s2_write_opts *o = opts ? opts : &dflt;
    size_t cap = strlen(path) + sizeof S2_TMP_TAG + S2_TMP_SUFFIX_LEN;
    char *tmp = malloc(cap);
    if (!tmp)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    int fd = -1;
    s2_status st = create_tmp(ctx, path, o, tmp, cap, &fd);
    if (st != S2_OK) {
        free(tmp);
        return st;
    }
    bool bad = !fd_all(fd, (void *)data, len, true); /* only read from when written */
    bad |= fsync(fd) != 0 && errno != EINVAL;
    bad |= close(fd) != 0;
    if (bad || rename(tmp, path) != 0) {
        st = s2_fail(ctx, S2_ERR_IO, "%s: %s", path, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return st;
}

s2_status s2_write_file_atomic(s2_ctx *ctx, const char *path, const void *data, size_t len)
{
    return s2_write_file_atomic_opts(ctx, path, data, len, NULL);
}

/* One directory: made, or already there as a directory; else its errno. */
static int make_one_dir(const char *path, unsigned mode)
{
    struct stat sb;
    if (mkdir(path, (mode_t)mode) == 0)
        return 0;
    int err = errno;
    return err == EEXIST && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) ? 0 : err;
}

int s2_make_dirs(const char *path, unsigned mode, char *failed, size_t cap)
{
    char p[4096];
    snprintf(failed, cap, "%s", path);
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p)
        return ENAMETOOLONG;
    int err = 0;
    for (char *s = p + 1; *s && !err; s++) {
        if (*s != '/' || s[-1] == '/')
            continue;
        *s = '\0';
        err = make_one_dir(p, mode);
        if (err)
            snprintf(failed, cap, "%s", p);
        *s = '/';
    }
    if (!err && (err = make_one_dir(p, mode)) != 0)
        snprintf(failed, cap, "%s", p);
    return err;
}
