/* Whole-file reads and atomic writes. */
#define _POSIX_C_SOURCE 200809L
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* gettid */
#endif
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

s2_status s2_write_file_atomic(s2_ctx *ctx, const char *path, const void *data, size_t len)
{
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 48);
    if (!tmp)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    /* unique per thread, so that concurrent writers of one path (threads of
     * one process included) never share a temporary file */
    snprintf(tmp, pl + 48, "%s.tmp.%ld.%ld", path, (long)getpid(), (long)gettid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        s2_status st = s2_fail(ctx, S2_ERR_IO, "%s: %s", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    size_t w = len ? fwrite(data, 1, len, f) : 0;
    int bad = (w != len) | (fflush(f) != 0);
    bad |= fsync(fileno(f)) != 0 && errno != EINVAL;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        s2_status st = s2_fail(ctx, S2_ERR_IO, "%s: %s", path, strerror(errno));
        remove(tmp);
        free(tmp);
        return st;
    }
    free(tmp);
    return S2_OK;
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
