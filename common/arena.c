/* Bump arena and string buffer. */
#include "util.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct s2_arena_chunk {
    s2_arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

#define ARENA_CHUNK (64u * 1024u)

void s2_arena_init(s2_arena *a) { a->head = NULL; }

void s2_arena_release(s2_arena *a)
{
    if (!a)
        return;
    s2_arena_chunk *c = a->head;
    while (c) {
        s2_arena_chunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
}

void *s2_arena_alloc(s2_arena *a, size_t size)
{
    size = s2_align16(size);
    if (size == 0)
        size = 16;
    s2_arena_chunk *c = a->head;
    if (!c || c->cap - c->used < size) {
        size_t cap = size > ARENA_CHUNK ? size : ARENA_CHUNK;
        if (cap > SIZE_MAX - sizeof(s2_arena_chunk))
            return NULL;
        c = malloc(sizeof(s2_arena_chunk) + cap);
        if (!c)
            return NULL;
        c->cap = cap;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += size;
    memset(p, 0, size);
    return p;
}

void *s2_arena_array(s2_arena *a, size_t n, size_t elem)
{
    if (elem && n > SIZE_MAX / elem)
        return NULL;
    return s2_arena_alloc(a, n * elem);
}

char *s2_arena_strndup(s2_arena *a, const char *s, size_t n)
{
    char *p = s2_arena_alloc(a, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

char *s2_arena_strdup(s2_arena *a, const char *s) { return s2_arena_strndup(a, s, strlen(s)); }

void *s2_arena_grow(s2_arena *a, const void *old, size_t n_old, size_t n_new, size_t elem)
{
    void *p = s2_arena_array(a, n_new, elem);
    if (p && n_old)
        memcpy(p, old, n_old * elem);
    return p;
}

bool s2_arena_room(s2_arena *a, void *items, int n, int *cap, size_t elem, int first)
{
    if (n < *cap)
        return true;
    if (*cap > INT_MAX / 2)
        return false;
    int c = *cap ? 2 * *cap : first;
    void *p;
    memcpy(&p, items, sizeof p);
    if (!(p = s2_arena_grow(a, p, (size_t)n, (size_t)c, elem)))
        return false;
    memcpy(items, &p, sizeof p);
    *cap = c;
    return true;
}

void *s2_arena_boxed(size_t size, size_t at)
{
    s2_arena a;
    s2_arena_init(&a);
    unsigned char *obj = size >= at + sizeof a ? s2_arena_alloc(&a, size) : NULL;
    if (obj)
        memcpy(obj + at, &a, sizeof a);
    return obj;
}

void s2_arena_free_boxed(s2_arena *a)
{
    s2_arena held = *a; /* a lies in a chunk this frees */
    s2_arena_release(&held);
}

void s2_buf_init(s2_buf *b) { memset(b, 0, sizeof *b); }
void s2_buf_free(s2_buf *b)
{
    free(b->data);
    s2_buf_init(b);
}
void s2_buf_reset(s2_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

static bool buf_reserve(s2_buf *b, size_t extra)
{
    if (b->oom)
        return false;
    if (extra > SIZE_MAX - b->len - 1) {
        b->oom = true;
        return false;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

bool s2_buf_append(s2_buf *b, const void *data, size_t n)
{
    if (!buf_reserve(b, n))
        return false;
    if (n)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

bool s2_buf_puts(s2_buf *b, const char *s) { return s2_buf_append(b, s, strlen(s)); }

bool s2_buf_vprintf(s2_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0 || !buf_reserve(b, (size_t)n))
        return false;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return true;
}

bool s2_buf_printf(s2_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool ok = s2_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return ok;
}

char *s2_buf_steal(s2_buf *b, size_t *len)
{
    if (!b->data && !b->oom)
        buf_reserve(b, 0);
    char *p = b->oom ? NULL : b->data;
    if (len)
        *len = b->len;
    if (b->oom)
        free(b->data);
    s2_buf_init(b);
    return p;
}

bool s2_grow(void *items, int64_t *cap, int64_t need, size_t elem, int64_t first)
{
    if (need <= *cap)
        return true;
    int64_t c = *cap ? *cap : first;
    while (c < need)
        c *= 2;
    void *p;
    memcpy(&p, items, sizeof p);
    p = realloc(p, (size_t)c * elem);
    if (!p)
        return false;
    memcpy(items, &p, sizeof p);
    *cap = c;
    return true;
}
