/* Block masks in the golden text format:
 *
 *   # comment
 *   case NAME {json kwargs, ignored}
 *   shape H M N
 *   H*M lines of N characters '0' / '1'
 *   end
 *
 * Blank and '#' lines may appear anywhere.  Parsing stops once the selected
 * case is complete, so a large golden file is not read past what is needed. */
#include "pattern_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


void s2_pattern_escape(char *out, size_t size, const char *text, size_t len, size_t max_in)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        char tmp[8];
        if (i == max_in) {
            snprintf(tmp, sizeof tmp, "...");
        } else if (c >= 0x20 && c < 0x7f) {
            tmp[0] = (char)c;
            tmp[1] = 0;
        } else {
            snprintf(tmp, sizeof tmp, "\\x%02x", c);
        }
        size_t t = strlen(tmp);
        if (o + t + 1 > size)
            break;
        memcpy(out + o, tmp, t);
        o += t;
        if (i == max_in)
            break;
    }
    out[o] = 0;
}

s2_status s2_pattern_read_file_max(const char *path, size_t max, char **data, size_t *len, char *why, size_t why_size)
{
    *data = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, why_size, "%s", strerror(errno));
        return S2_ERR_IO;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        snprintf(why, why_size, "%s", strerror(errno));
        close(fd);
        return S2_ERR_IO;
    }
    if (S_ISDIR(sb.st_mode)) {
        snprintf(why, why_size, "%s", strerror(EISDIR));
        close(fd);
        return S2_ERR_IO;
    }
    /* refuse devices and pipes: /dev/zero must not be read forever */
    if (!S_ISREG(sb.st_mode)) {
        snprintf(why, why_size, "not a regular file");
        close(fd);
        return S2_ERR_IO;
    }
    if ((uint64_t)sb.st_size > max) {
        snprintf(why, why_size, "file too large (more than %zu bytes)", max);
        *len = (uint64_t)sb.st_size > SIZE_MAX ? SIZE_MAX : (size_t)sb.st_size;
        close(fd);
        return S2_ERR_IO;
    }
    size_t cap = (size_t)sb.st_size;
    char *buf = malloc(cap + 1);
    if (!buf) {
        snprintf(why, why_size, "out of memory");
        close(fd);
        return S2_ERR_NOMEM;
    }
    size_t got = 0;
    while (got < cap) {
        ssize_t r = read(fd, buf + got, cap - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(why, why_size, "%s", strerror(errno));
            free(buf);
            close(fd);
            return S2_ERR_IO;
        }
        if (r == 0)
            break; /* shrank while reading: take what is there */
        got += (size_t)r;
    }
    close(fd);
    buf[got] = 0;
    *data = buf;
    *len = got;
    return S2_OK;
}

s2_status s2_pattern_read_file(s2_ctx *ctx, const char *path, char **data, size_t *len)
{
    char why[256];
    s2_status st = s2_pattern_read_file_max(path, S2_PATTERN_MAX_FILE, data, len, why, sizeof why);
    if (st == S2_OK)
        return st;
    *len = 0;
    char shown[1024];
    s2_pattern_escape(shown, sizeof shown, path, strlen(path), SIZE_MAX);
    return s2_fail(ctx, st, "%s: %s", shown, why);
}

s2_status s2_pattern_load_file(s2_ctx *ctx, const char *fn, const char *path, s2_pattern_text_parser parse,
                               const void *arg, void *out)
{
    if (!path || !out)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: null argument", fn);
    char *text;
    size_t len;
    s2_status st = s2_pattern_read_file(ctx, path, &text, &len);
    if (st != S2_OK)
        return st;
    st = parse(ctx, path, text, len, arg, out);
    free(text);
    return st;
}

/* ---- line scanner ------------------------------------------------------- */

typedef struct mask_reader {
    s2_mask_error *err;     /* where the first error goes */
    const char *text, *end;
    const char *pos;        /* start of the next line */
    const char *line;       /* current line */
    size_t line_len;        /* without the newline (and a trailing \r) */
    int line_no;
} mask_reader;

static s2_status mask_error(mask_reader *r, int col, const char *fmt, ...) S2_PRINTF(3, 4);
static s2_status mask_error(mask_reader *r, int col, const char *fmt, ...)
{
    char msg[sizeof r->err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->err->line = r->line_no > 0 ? r->line_no : 1;
    r->err->col = col;
    snprintf(r->err->msg, sizeof r->err->msg, "%s", msg);
    return S2_ERR_PARSE;
}

/* Advance to the next line; false at the end of the text. */
static bool next_line(mask_reader *r)
{
    if (r->pos >= r->end)
        return false;
    const char *nl = memchr(r->pos, '\n', (size_t)(r->end - r->pos));
    const char *stop = nl ? nl : r->end;
    r->line = r->pos;
    r->line_len = (size_t)(stop - r->pos);
    if (r->line_len > 0 && r->line[r->line_len - 1] == '\r')
        r->line_len--;
    r->pos = nl ? nl + 1 : r->end;
    r->line_no++;
    return true;
}

static bool is_blank_or_comment(const mask_reader *r)
{
    size_t i = 0;
    while (i < r->line_len && (r->line[i] == ' ' || r->line[i] == '\t'))
        i++;
    return i == r->line_len || r->line[i] == '#';
}

/* Next line that is not blank or a comment. */
static bool next_content_line(mask_reader *r)
{
    while (next_line(r))
        if (!is_blank_or_comment(r))
            return true;
    return false;
}

static bool word_at(const mask_reader *r, const char *word)
{
    size_t n = strlen(word);
    return r->line_len >= n && memcmp(r->line, word, n) == 0 &&
           (r->line_len == n || r->line[n] == ' ' || r->line[n] == '\t');
}

/* Parse a positive decimal at *i (skipping blanks before it). */
static s2_status shape_number(mask_reader *r, size_t *i, const char *what, int64_t max, int64_t *out)
{
    while (*i < r->line_len && (r->line[*i] == ' ' || r->line[*i] == '\t'))
        (*i)++;
    size_t start = *i;
    int64_t v = 0;
    bool big = false;
    while (*i < r->line_len && r->line[*i] >= '0' && r->line[*i] <= '9') {
        v = v * 10 + (r->line[*i] - '0');
        if (v > max)
            big = true, v = max + 1; /* keep v bounded while the digits run on */
        (*i)++;
    }
    int col = (int)start + 1;
    if (*i == start || (*i < r->line_len && r->line[*i] != ' ' && r->line[*i] != '\t'))
        return mask_error(r, col, "shape: expected %s as a positive integer", what);
    if (big || v < 1)
        return mask_error(r, col, "shape: %s must be in 1..%lld", what, (long long)max);
    *out = v;
    return S2_OK;
}

static s2_status read_shape(mask_reader *r, int64_t *h, int64_t *m, int64_t *n)
{
    if (!next_content_line(r))
        return mask_error(r, 1, "expected 'shape H M N', got the end of the file");
    if (!word_at(r, "shape"))
        return mask_error(r, 1, "expected 'shape H M N'");
    size_t i = 5;
    s2_status st = shape_number(r, &i, "H (heads)", S2_MAX_HEADS, h);
    if (st == S2_OK)
        st = shape_number(r, &i, "M (query blocks)", S2_MASK_MAX_BLOCKS, m);
    if (st == S2_OK)
        st = shape_number(r, &i, "N (key blocks)", S2_MASK_MAX_BLOCKS, n);
    if (st != S2_OK)
        return st;
    while (i < r->line_len && (r->line[i] == ' ' || r->line[i] == '\t'))
        i++;
    if (i != r->line_len)
        return mask_error(r, (int)i + 1, "shape: unexpected text after N");
    /* every row takes N+1 bytes: a shape larger than the rest of the text is
     * a truncated or lying file, and must not size an allocation */
    int64_t rest = r->end - r->pos;
    if (*m > rest / (*n + 1) || *h > rest / ((*n + 1) * *m))
        return mask_error(r, 1, "shape %lld %lld %lld: the file is too short for %lld rows of %lld blocks",
                          (long long)*h, (long long)*m, (long long)*n, (long long)(*h * *m), (long long)*n);
    return S2_OK;
}

/* Read H*M rows of N blocks; bits may be NULL (case not selected). */
static s2_status read_rows(mask_reader *r, int64_t rows, int64_t n, uint8_t *bits)
{
    for (int64_t row = 0; row < rows; row++) {
        if (!next_content_line(r))
            return mask_error(r, 1, "expected %lld more rows of %lld blocks, got the end of the file",
                              (long long)(rows - row), (long long)n);
        for (size_t i = 0; i < r->line_len && (int64_t)i < n; i++) {
            char c = r->line[i];
            if (c != '0' && c != '1') {
                char shown[16];
                s2_pattern_escape(shown, sizeof shown, &c, 1, S2_ESCAPE_SHORT);
                return mask_error(r, (int)i + 1, "expected '0' or '1', got '%s'", shown);
            }
            if (bits)
                bits[row * n + (int64_t)i] = (uint8_t)(c - '0');
        }
        if ((int64_t)r->line_len != n)
            return mask_error(r, (int)s2_min64((int64_t)r->line_len, n) + 1,
                              "row has %zu blocks, expected %lld", r->line_len, (long long)n);
    }
    return S2_OK;
}

static s2_status read_end(mask_reader *r)
{
    if (!next_content_line(r))
        return mask_error(r, 1, "expected 'end', got the end of the file");
    size_t len = r->line_len;
    while (len > 0 && (r->line[len - 1] == ' ' || r->line[len - 1] == '\t'))
        len--;
    if (len != 3 || memcmp(r->line, "end", 3) != 0)
        return mask_error(r, 1, "expected 'end' after the rows");
    return S2_OK;
}

/* The name after "case": the next run of non-blank characters ("" if none). */
static void case_name_span(const mask_reader *r, const char **name, size_t *len)
{
    size_t i = 4;
    while (i < r->line_len && (r->line[i] == ' ' || r->line[i] == '\t'))
        i++;
    size_t s = i;
    while (i < r->line_len && r->line[i] != ' ' && r->line[i] != '\t')
        i++;
    *name = r->line + s;
    *len = i - s;
}

s2_status s2_mask_parse_text(const char *text, size_t len, const char *case_name, s2_block_mask *out,
                             s2_mask_error *err)
{
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    mask_reader r = {.err = err, .text = text ? text : "", .line_no = 0};
    r.end = r.text + len;
    r.pos = r.text;

    for (;;) {
        if (!next_content_line(&r)) {
            if (case_name)
                return S2_ERR_NOT_FOUND;
            return mask_error(&r, 1, "no case in the mask file (expected 'case NAME')");
        }
        if (!word_at(&r, "case"))
            return mask_error(&r, 1, "expected 'case NAME'");
        const char *name;
        size_t name_len;
        case_name_span(&r, &name, &name_len);
        bool selected = !case_name || (strlen(case_name) == name_len && memcmp(case_name, name, name_len) == 0);
        int64_t h, m, n;
        s2_status st = read_shape(&r, &h, &m, &n);
        if (st != S2_OK)
            return st;
        uint8_t *bits = NULL;
        if (selected) {
            bits = malloc((size_t)(h * m * n));
            out->name = malloc(name_len + 1);
            if (!bits || !out->name) {
                free(bits);
                s2_block_mask_free(out);
                snprintf(err->msg, sizeof err->msg, "out of memory");
                return S2_ERR_NOMEM;
            }
            memcpy(out->name, name, name_len);
            out->name[name_len] = 0;
        }
        st = read_rows(&r, h * m, n, bits);
        if (st == S2_OK)
            st = read_end(&r);
        if (st != S2_OK) {
            free(bits);
            s2_block_mask_free(out);
            return st;
        }
        if (selected) {
            out->heads = (int)h;
            out->rows = m;
            out->cols = n;
            out->bits = bits;
            return S2_OK;
        }
    }
}

s2_status s2_block_mask_parse(s2_ctx *ctx, const char *filename, const char *text, size_t len,
                              const char *case_name, s2_block_mask *out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_block_mask_parse: null output");
    memset(out, 0, sizeof *out);
    if (!text && len)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_block_mask_parse: null text");
    s2_mask_error err;
    s2_status st = s2_mask_parse_text(text, len, case_name, out, &err);
    if (st == S2_OK)
        return st;
    char file[1024];
    const char *fname = filename ? filename : "<memory>";
    s2_pattern_escape(file, sizeof file, fname, strlen(fname), SIZE_MAX);
    if (st == S2_ERR_NOT_FOUND)
        return s2_fail(ctx, st, "%s: no case named '%s'", file, case_name);
    if (st == S2_ERR_NOMEM)
        return s2_fail(ctx, st, "out of memory");
    return s2_fail(ctx, st, "%s:%d:%d: %s", file, err.line, err.col, err.msg);
}

static s2_status parse_mask(s2_ctx *ctx, const char *path, const char *text, size_t len, const void *case_name,
                            void *out)
{
    return s2_block_mask_parse(ctx, path, text, len, case_name, out);
}

s2_status s2_block_mask_load(s2_ctx *ctx, const char *path, const char *case_name, s2_block_mask *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    return s2_pattern_load_file(ctx, "s2_block_mask_load", path, parse_mask, case_name, out);
}

void s2_block_mask_free(s2_block_mask *m)
{
    if (!m)
        return;
    free(m->name);
    free(m->bits);
    memset(m, 0, sizeof *m);
}
