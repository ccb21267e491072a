/* libFuzzer harness: the pattern parser and the mask-file parser must accept
 * or reject any input without crashing or leaking, and every rejection must
 * be one line "file:line:col: message" (or "file: reason" for I/O). */
#include "s2c/pattern.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static int is_digits(const char *s, const char **end)
{
    const char *p = s;
    while (*p >= '0' && *p <= '9')
        p++;
    *end = p;
    return p > s;
}

/* "<file>:<line>:<col>: <text>" on one line. */
static void check_message(const char *file, s2_ctx *ctx, s2_status st)
{
    const char *msg = s2_ctx_message(ctx);
    if (strchr(msg, '\n') || msg[0] == 0)
        goto bad;
    if (st == S2_ERR_NOMEM || st == S2_ERR_IO || st == S2_ERR_NOT_FOUND)
        return;
    if (st != S2_ERR_PARSE)
        goto bad;
    /* the location may be of a mask file the pattern names, so only the shape is checked */
    const char *c = strstr(msg, ": ");
    if (!c)
        goto bad;
    const char *p = c;
    while (p > msg && p[-1] != ':')
        p--;
    (void)file;
    const char *e;
    if (p < msg + 3 || !is_digits(p, &e) || e != c)
        goto bad;
    const char *q = p - 1;
    const char *l = q;
    while (l > msg && l[-1] >= '0' && l[-1] <= '9')
        l--;
    if (l == q || l == msg || l[-1] != ':' || c[2] == 0)
        goto bad;
    return;
bad:
    fprintf(stderr, "malformed message (status %s): [%s]\n", s2_status_name(st), msg);
    abort();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    s2_ctx *ctx = s2_ctx_new();
    if (!ctx)
        return 0;
    s2_pattern_set *set = NULL;
    s2_status st = s2_pattern_parse(ctx, "fuzz.yaml", (const char *)data, size, &set);
    if (st == S2_OK) {
        for (int i = 0; i < s2_pattern_set_count(set); i++) {
            char *text = NULL;
            if (s2_pattern_describe(s2_pattern_set_get(set, i), &text) != S2_OK)
                abort();
            free(text);
        }
    } else {
        check_message("fuzz.yaml", ctx, st);
    }
    s2_pattern_set_free(set);

    s2_block_mask m;
    st = s2_block_mask_parse(ctx, "fuzz.txt", (const char *)data, size, NULL, &m);
    if (st == S2_OK) {
        for (int64_t i = 0; i < (int64_t)m.heads * m.rows * m.cols; i++)
            if (m.bits[i] > 1)
                abort();
    } else {
        check_message("fuzz.txt", ctx, st);
    }
    s2_block_mask_free(&m);
    st = s2_block_mask_parse(ctx, "fuzz.txt", (const char *)data, size, "a", &m);
    if (st != S2_OK)
        check_message("fuzz.txt", ctx, st);
    s2_block_mask_free(&m);
    s2_ctx_free(ctx);
    return 0;
}
