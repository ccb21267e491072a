/* Internal helpers shared by every stage: error reporting into a context,
 * a bump arena, and a growable string buffer.  Not part of the public API. */
#ifndef S2C_UTIL_H
#define S2C_UTIL_H

#include "s2c/common.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define S2_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define S2_PRINTF(f, a)
#endif

/* Record st and a formatted message in ctx (ctx may be NULL); returns st. */
s2_status s2_fail(s2_ctx *ctx, s2_status st, const char *fmt, ...) S2_PRINTF(3, 4);
s2_status s2_vfail(s2_ctx *ctx, s2_status st, const char *fmt, va_list ap);
/* Put "prefix: " before the message already in ctx (naming a file, say); returns st. */
s2_status s2_fail_prefix(s2_ctx *ctx, s2_status st, const char *prefix);

/* A constructor's last step: obj handed to *out when st is S2_OK, else freed
 * by free_fn (*out untouched); evaluates to st. */
#define S2_HAND_OVER(st, out, obj, free_fn) ((st) == S2_OK ? (*(out) = (obj), S2_OK) : (free_fn(obj), (st)))

/* ---- arena: many small allocations freed at once ---------------------- */
typedef struct s2_arena_chunk s2_arena_chunk;
typedef struct s2_arena {
    s2_arena_chunk *head;
} s2_arena;

void s2_arena_init(s2_arena *a);
void s2_arena_release(s2_arena *a);               /* frees everything; tolerates a zeroed arena */
void *s2_arena_alloc(s2_arena *a, size_t size);   /* zeroed, 16-byte aligned; NULL on OOM */
void *s2_arena_array(s2_arena *a, size_t n, size_t elem); /* checks n*elem overflow */
char *s2_arena_strdup(s2_arena *a, const char *s);
char *s2_arena_strndup(s2_arena *a, const char *s, size_t n);
/* A new array of n_new elements holding the first n_old of old (which stays
 * in the arena until it is released); NULL when out of memory. */
void *s2_arena_grow(s2_arena *a, const void *old, size_t n_old, size_t n_new, size_t elem);
/* Room for one more element in the arena array whose pointer is at items (n
 * in use, capacity *cap), doubling from first; false when out of memory, the
 * array and *cap unchanged. */
bool s2_arena_room(s2_arena *a, void *items, int n, int *cap, size_t elem, int first);
/* A zeroed object of size bytes that lives in the arena it holds at byte
 * `at` (offsetof): everything it allocates there and the object itself go
 * with one s2_arena_free_boxed.  NULL when out of memory. */
void *s2_arena_boxed(size_t size, size_t at);
/* Frees such an object's arena, and so the object (a is inside it). */
void s2_arena_free_boxed(s2_arena *a);

/* ---- growable string buffer -------------------------------------------- */
typedef struct s2_buf {
    char *data;   /* always NUL-terminated when len > 0 or after s2_buf_puts */
    size_t len;
    size_t cap;
    bool oom;     /* sticky: set when an append failed */
} s2_buf;

void s2_buf_init(s2_buf *b);
void s2_buf_free(s2_buf *b);
void s2_buf_reset(s2_buf *b);
bool s2_buf_append(s2_buf *b, const void *data, size_t n);
bool s2_buf_puts(s2_buf *b, const char *s);
bool s2_buf_printf(s2_buf *b, const char *fmt, ...) S2_PRINTF(2, 3);
bool s2_buf_vprintf(s2_buf *b, const char *fmt, va_list ap);
/* Take ownership of the buffer's bytes (malloc'd, NUL-terminated). */
char *s2_buf_steal(s2_buf *b, size_t *len);

/* ---- files -------------------------------------------------------------- */
/* Read exactly n bytes from fd, retrying on EINTR: false at an error or an early end. */
bool s2_read_full(int fd, void *buf, size_t n);
/* Read a whole file (malloc'd, NUL-terminated; *len excludes the NUL). */
s2_status s2_read_file(s2_ctx *ctx, const char *path, char **data, size_t *len);
/* Write atomically: a temporary file PATH.tmp.<16 random hex digits> in the
 * same directory, then rename.  The temporary file is created with
 * O_CREAT|O_EXCL|O_NOFOLLOW, so nothing already at its name (a symlink
 * planted there, a file) is followed, truncated or written; a taken name
 * costs another try, S2_TMP_TRIES in all. */
#define S2_TMP_TAG ".tmp."
enum { S2_TMP_SUFFIX_LEN = 16, S2_TMP_TRIES = 16 };
/* Writes the random part of a temporary name (S2_TMP_SUFFIX_LEN lowercase
 * hex digits and a NUL) into out; false when it has none. */
typedef bool (*s2_tmp_suffix_fn)(void *arg, char out[S2_TMP_SUFFIX_LEN + 1]);
bool s2_tmp_suffix_random(void *arg, char out[S2_TMP_SUFFIX_LEN + 1]);  /* getrandom or /dev/urandom */
/* Whether s has the shape of such a suffix. */
bool s2_tmp_suffix_valid(const char *s);
typedef struct s2_write_opts {
    unsigned mode;               /* of the new file, less the umask (s2_write_file_atomic: 0666) */
    s2_tmp_suffix_fn suffix;     /* NULL: s2_tmp_suffix_random; tests inject their own */
    void *suffix_arg;
} s2_write_opts;
s2_status s2_write_file_atomic_opts(s2_ctx *ctx, const char *path, const void *data, size_t len,
                                    const s2_write_opts *opts);
s2_status s2_write_file_atomic(s2_ctx *ctx, const char *path, const void *data, size_t len);
/* mkdir -p: every missing component of path with `mode`, existing ones
 * untouched.  0, or the errno of the component that failed (EEXIST: it is
 * not a directory), whose path goes into failed. */
int s2_make_dirs(const char *path, unsigned mode, char *failed, size_t cap);

/* ---- shared libraries loaded at run time (dl.c) ------------------------- */
/* The outcome of loading one (the CUDA driver, NCCL) once per process,
 * replayed to every caller; zeroed, it reads as loaded. */
typedef struct s2_dl_state {
    s2_status status;
    char message[512];
} s2_dl_state;
/* The library named by the environment variable env when set and not empty, else dflt. */
const char *s2_dl_name(const char *env, const char *dflt);
void s2_dl_fail(s2_dl_state *s, s2_status st, const char *fmt, ...) S2_PRINTF(3, 4);
/* dlopen(lib); NULL when it fails, with s failed as st: "cannot load WHAT LIB: why".  The handle is
 * never closed: the caller's table points into the library for the rest of the process. */
void *s2_dl_open(s2_dl_state *s, s2_status st, const char *what, const char *lib);
/* S2_OK, or the failed load's status with its message in ctx. */
s2_status s2_dl_status(s2_ctx *ctx, const s2_dl_state *s);
/* A library's public version query: *version (when not NULL) is have, or 0
 * when the load failed; returns s2_dl_status. */
s2_status s2_dl_version(s2_ctx *ctx, const s2_dl_state *s, int have, int *version);

/* ---- suggestions (suggest.c) --------------------------------------------- */
/* Edits (insert, delete, replace, swap two neighbours) between a and b;
 * SIZE_MAX for words over 64 bytes. */
size_t s2_edit_distance(const char *a, size_t an, const char *b, size_t bn);
/* The name of names[0..n) closest to word[0..len), when it is close enough
 * to be a likely misspelling (GCC's cutoff: about a third of the length);
 * else NULL.  The first of equally close names wins. */
const char *s2_suggest(const char *word, size_t len, const char *const *names, size_t n);

/* ---- small math ---------------------------------------------------------- */
static inline int64_t s2_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t s2_mod(int64_t a, int64_t m) { int64_t r = a % m; return r < 0 ? r + m : r; }
static inline int64_t s2_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t s2_max64(int64_t a, int64_t b) { return a > b ? a : b; }
/* Grow the array whose pointer is at `items` (elements of elem bytes,
 * capacity *cap) to hold need, doubling from first; false when out of
 * memory, with the array and *cap unchanged. */
bool s2_grow(void *items, int64_t *cap, int64_t need, size_t elem, int64_t first);
/* x rounded up to a multiple of 16 (the alignment of packed device arrays). */
static inline size_t s2_align16(size_t x) { return (x + 15u) & ~(size_t)15u; }

/* bf16/f16 <-> f32 conversions (round to nearest even). */
float s2_bf16_to_f32(uint16_t h);
uint16_t s2_f32_to_bf16(float f);
float s2_f16_to_f32(uint16_t h);
uint16_t s2_f32_to_f16(float f);

#endif
