/* The manifest parser (format in include/s2c/manifest.h): the table of its
 * records, the reading of lines, the kernel entries and the checks of the
 * whole (pattern blocks: manifest_pattern.c); and the lookup of the manifest
 * symbol in a cubin.  No LLVM and no CUDA: the runtime uses it. */
#include "dtype.h"
#include "elf.h"
#include "kernel_abi.h"
#include "manifest_internal.h"
#include "s2c/version.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *s2_mf_show(char *buf, const char *text)
{
    size_t o = 0;
    for (size_t i = 0; text[i] && o + 8 < S2_MF_SHOWN; i++) {
        unsigned char c = (unsigned char)text[i];
        if (i == 64) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (c >= 0x20 && c < 0x7f)
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, S2_MF_SHOWN - o, "\\x%02x", c);
    }
    buf[o] = '\0';
    return buf;
}

s2_status s2_mf_fail(s2_mf_parser *ps, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return s2_fail(ps->ctx, S2_ERR_PARSE, "manifest:%d: %s", ps->line, msg);
}

s2_status s2_mf_nomem(s2_mf_parser *ps) { return s2_fail(ps->ctx, S2_ERR_NOMEM, "out of memory"); }

s2_status s2_mf_check_name(s2_mf_parser *ps, const char *what, const char *name)
{
    size_t n = strlen(name);
    bool ok = n > 0 && n <= 255;
    for (size_t i = 0; ok && i < n; i++)
        ok = (unsigned char)name[i] >= 0x20 && (unsigned char)name[i] <= 0x7e;
    char b[S2_MF_SHOWN];
    return ok ? S2_OK : s2_mf_fail(ps, "%s name (1 to 255 printable ASCII bytes): %s", what, s2_mf_show(b, name));
}

bool s2_mf_names_add(s2_mf_parser *ps, s2_mf_names *list, const char *name, const char *owner)
{
    if (!s2_arena_room(&ps->m->arena, &list->v, list->n, &list->cap, sizeof *list->v, 8))
        return false;
    list->v[list->n++] = (s2_mf_named){name, owner, ps->line};
    return true;
}

static int by_name_then_line(const void *a, const void *b)
{
    const s2_mf_named *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

/* Sorting, not a scan per name: a manifest may name a great many. */
const s2_mf_named *s2_mf_first_repeat(s2_mf_names *list, const s2_mf_named **first)
{
    if (list->n > 1)
        qsort(list->v, (size_t)list->n, sizeof *list->v, by_name_then_line);
    const s2_mf_named *found = NULL;
    for (int i = 1, start = 0; i < list->n; i++) {
        if (strcmp(list->v[i].name, list->v[start].name) != 0) {
            start = i;
            continue;
        }
        if (i == start + 1 && (!found || list->v[i].line < found->line)) {
            found = &list->v[i];
            *first = &list->v[start];
        }
    }
    return found;
}

/* ---- the records of the top level and of kernel entries ------------------------- */

/* "requires MAJOR.MINOR": refused when above this runtime's release. */
static s2_status read_requires(s2_mf_parser *ps, const s2_mf_record *rec, const s2_mf_value *v)
{
    char b[S2_MF_SHOWN];
    int major = -1, minor = -1, n = 0;
    const char *t = v->s[0];
    if (ps->m->requires_seen)
        return s2_mf_fail(ps, "a second 'requires': %s", s2_mf_show(b, t));
    if (sscanf(t, "%3d.%3d%n", &major, &minor, &n) != 2 || t[n] || major < 0 || minor < 0)
        return s2_mf_fail(ps, "bad 'requires' (MAJOR.MINOR): %s", s2_mf_show(b, t));
    ps->m->requires_seen = true;
    if (major > S2C_VERSION_MAJOR || (major == S2C_VERSION_MAJOR && minor > S2C_VERSION_MINOR))
        return s2_fail(ps->ctx, S2_ERR_UNSUPPORTED,
                       "manifest:%d: the module needs an s2c runtime of version %d.%d or newer; this one is %s: "
                       "update libs2rt", ps->line, major, minor, S2C_VERSION_STRING);
    return S2_OK;
}

static s2_status read_generator(s2_mf_parser *ps, const s2_mf_record *rec, const s2_mf_value *v)
{
    return (ps->m->generator = s2_arena_strdup(&ps->m->arena, v->s[0])) ? S2_OK : s2_mf_nomem(ps);
}

static s2_status read_arch(s2_mf_parser *ps, const s2_mf_record *rec, const s2_mf_value *v)
{
    char b[S2_MF_SHOWN];
    const char *t = v->s[0];
    if (!strcmp(t, "sm_80")) ps->m->arch = S2_ARCH_SM80;
    else if (!strcmp(t, "sm_90")) ps->m->arch = S2_ARCH_SM90;
    else if (!strcmp(t, "sm_90a")) ps->m->arch = S2_ARCH_SM90A;
    else return s2_mf_fail(ps, "unknown arch: %s", s2_mf_show(b, t));
    return S2_OK;
}

static s2_status read_kernel(s2_mf_parser *ps, const s2_mf_record *rec, const s2_mf_value *v)
{
    s2_manifest *m = ps->m;
    const char *name = v->s[0];
    s2_status st = s2_mf_check_name(ps, "bad kernel", name);
    if (st != S2_OK)
        return st;
    if (!s2_arena_room(&m->arena, &m->kernels, m->num_kernels, &m->cap_kernels, sizeof *m->kernels, 4))
        return s2_mf_nomem(ps);
    ps->k = &m->kernels[m->num_kernels++];
    memset(ps->k, 0, sizeof *ps->k);
    ps->k->name = s2_arena_strdup(&m->arena, name);
    ps->k->pattern = s2_arena_strdup(&m->arena, "");
    /* at most one kernel per role */
    ps->k->fns = s2_arena_array(&m->arena, S2_ROLE_COUNT_, sizeof(s2_kernel_record));
    ps->p = NULL;
    if (!ps->k->name || !ps->k->pattern || !ps->k->fns || !s2_mf_names_add(ps, &ps->entries, ps->k->name, NULL))
        return s2_mf_nomem(ps);
    return S2_OK;
}

static s2_status read_kind(s2_mf_parser *ps, const s2_mf_record *rec, const s2_mf_value *v)
{
    char b[S2_MF_SHOWN];
    const char *t = v->s[0];
    if (!strcmp(t, "fwd")) ps->k->spec.kind = S2_KERNEL_FWD;
    else if (!strcmp(t, "bwd")) ps->k->spec.kind = S2_KERNEL_BWD;
    else if (!strcmp(t, "decode")) ps->k->spec.kind = S2_KERNEL_DECODE;
    else return s2_mf_fail(ps, "kernel.kind: expected fwd, bwd or decode: %s", s2_mf_show(b, t));
    return S2_OK;
}

static s2_status read_kernel_pattern(s2_mf_parser *ps, const s2_mf_record *rec, const s2_mf_value *v)
{
    s2_status st = s2_mf_check_name(ps, "kernel.pattern: bad pattern", v->s[0]);
    if (st != S2_OK)
        return st;
    return (ps->k->pattern = s2_arena_strdup(&ps->m->arena, v->s[0])) ? S2_OK : s2_mf_nomem(ps);
}

static s2_status read_dtype(s2_mf_parser *ps, const s2_mf_record *rec, const s2_mf_value *v)
{
    char b[S2_MF_SHOWN];
    const s2_dtype_info *r = s2_dtype_by_name(v->s[0], false);
    if (r && !r->kernels)
        return s2_mf_fail(ps, "kernel.dtype: %s is not supported by any template yet", r->title);
    if (!r) {
        char names[64];
        s2_dtype_kernel_names(names, sizeof names, false);
        return s2_mf_fail(ps, "kernel.dtype: expected %s: %s", names, s2_mf_show(b, v->s[0]));
    }
    ps->k->spec.dtype = r->dtype;
    return S2_OK;
}

/* A decode entry's fp8 pages (absent: the pages are kernel.dtype's); after kernel.kind. */
static s2_status read_kv_dtype(s2_mf_parser *ps, const s2_mf_record *rec, const s2_mf_value *v)
{
    char b[S2_MF_SHOWN];
    const s2_dtype_info *r = s2_dtype_by_name(v->s[0], false);
    if (!r || !r->kv_pages)
        return s2_mf_fail(ps, "kernel.kv_dtype: expected e4m3: %s", s2_mf_show(b, v->s[0]));
    if (ps->k->spec.kind != S2_KERNEL_DECODE)
        return s2_mf_fail(ps, "kernel.kv_dtype: only a decode entry (after kernel.kind decode) reads fp8 pages");
    ps->k->spec.kv_dtype = r->dtype;
    return S2_OK;
}

/* The entry's integers: each record sets one, already bounded by the table. */
#define KERNEL_INT(fn, field)                                                      \
    static s2_status fn(s2_mf_parser *ps, const s2_mf_record *rec, const s2_mf_value *v) \
    {                                                                              \
        ps->k->field = (int)v->i[0];                                               \
        return S2_OK;                                                              \
    }
KERNEL_INT(read_head_dim, spec.head_dim)
KERNEL_INT(read_block_m, spec.block_m)
KERNEL_INT(read_block_n, spec.block_n)
KERNEL_INT(read_num_warps, spec.num_warps)
KERNEL_INT(read_num_stages, spec.num_stages)
KERNEL_INT(read_threads, threads)
KERNEL_INT(read_smem, smem_bytes)

/* kernel.fn SYMBOL ROLE ABI GRID THREADS SMEM BM BN WARPS STAGES PERSISTENT BWD_WGMMA KV_GATHER BWD_TMA
 * MIN_KEYS: after the entry's own keys (its kind, dtype and head dim are the kernel's) */
static s2_status read_fn(s2_mf_parser *ps, const s2_mf_record *rec, const s2_mf_value *v)
{
    char b[S2_MF_SHOWN], b2[S2_MF_SHOWN], b3[S2_MF_SHOWN], want[320];
    s2_manifest_kernel *k = ps->k;
    const char *sym = v->s[0], *role = v->s[1];
    s2_kernel_record r = {.spec = s2_kspec_of(&k->spec, NULL)};
    if (!s2_role_parse(role, &r.role) || !s2_abi_parse(v->s[2], &r.abi) || !s2_grid_parse(v->s[3], &r.grid))
        return s2_mf_fail(ps, "kernel.fn: unknown role, ABI or grid: %s %s %s", s2_mf_show(b, role),
                          s2_mf_show(b2, v->s[2]), s2_mf_show(b3, v->s[3]));
    if (!s2_role_fits_kind(r.role, k->spec.kind) || !s2_role_takes_abi(r.role, r.abi) ||
        s2_role_grid(r.role, r.abi) != r.grid)
        return s2_mf_fail(ps, "kernel.fn: role, ABI and grid do not fit the entry's kind: %s %s %s", role, v->s[2],
                          v->s[3]);
    snprintf(want, sizeof want, "%s%s", k->name, s2_role_suffix(r.role));
    if (strcmp(sym, want) != 0)
        return s2_mf_fail(ps, "kernel.fn: the symbol is not the entry's name and the role's suffix: %s",
                          s2_mf_show(b, sym));
    for (int i = 0; i < k->num_fns; i++)
        if (k->fns[i].role == r.role)
            return s2_mf_fail(ps, "kernel.fn: a second kernel of one role: %s", role);
    const int64_t *x = v->i + 4;
    r.threads = (int)x[0], r.smem_bytes = (int)x[1];
    r.spec.block_m = (int)x[2], r.spec.block_n = (int)x[3], r.spec.num_warps = (int)x[4];
    r.spec.num_stages = (int)x[5], r.spec.persistent = (int)x[6], r.spec.bwd_wgmma = (int)x[7];
    r.spec.kv_gather = (int)x[8], r.spec.bwd_tma = (int)x[9];
    /* a variant is launched by its rule, every other kernel by its role */
    r.min_keys = (int)x[10];
    if (s2_role_is_variant(r.role) != (r.min_keys > 0))
        return s2_mf_fail(ps, "kernel.fn: MIN_KEYS %d for role %s (a variant's rule, at least 1; 0 for any other role)",
                          r.min_keys, role);
    if (!(r.symbol = s2_arena_strdup(&ps->m->arena, sym)) || !s2_mf_names_add(ps, &ps->symbols, r.symbol, k->name))
        return s2_mf_nomem(ps);
    ((s2_kernel_record *)k->fns)[k->num_fns++] = r;
    return S2_OK;
}

/* ---- the table ------------------------------------------------------------------------ */

#define INT(name, lo, hi) {S2_MF_INT, name, lo, hi, false}
#define INT_OR_END(name, lo, hi) {S2_MF_INT, name, lo, hi, true}
#define WORD(name) {S2_MF_WORD, name, 0, 0, false}
#define HEX(name) {S2_MF_HEX, name, 0, 0, false}
#define TEXT(name) {S2_MF_TEXT, name, 0, 0, false}
/* A kernel's tile and launch: the same bounds in its entry and in each kernel.fn. */
#define K_THREADS(n) INT(n, 1, 1024)
#define K_SMEM(n) INT(n, 0, 1 << 30)
#define K_BLOCK(n) INT(n, 1, 1024)
#define K_WARPS(n) INT(n, 1, 32)
#define K_STAGES(n) INT(n, 1, 16)
/* A pattern's values: the pattern parser's bounds (s2c/pattern.h). */
#define P_COUNT(n) INT(n, 0, S2_PATTERN_MAX_COUNT)
#define P_BOOL(n) INT(n, 0, 1)
#define P_TOKEN(n) INT(n, 0, S2_MAX_SEQ_LEN)
#define P_TOKEN_OR_END(n) INT_OR_END(n, 0, S2_MAX_SEQ_LEN)

const s2_mf_record s2_mf_records[] = {
    {"requires", S2_MF_TOP, 1, {WORD("MAJOR.MINOR")}, read_requires},
    {"generator", S2_MF_TOP, 1, {TEXT("VERSION")}, read_generator},
    {"arch", S2_MF_TOP, 1, {WORD("ARCH")}, read_arch},
    {"kernel", S2_MF_TOP, 1, {TEXT("NAME")}, read_kernel},
    {"kernel.kind", S2_MF_KERNEL, 1, {WORD("KIND")}, read_kind},
    {"kernel.pattern", S2_MF_KERNEL, 1, {TEXT("PATTERN")}, read_kernel_pattern},
    {"kernel.dtype", S2_MF_KERNEL, 1, {WORD("DTYPE")}, read_dtype},
    {"kernel.kv_dtype", S2_MF_KERNEL, 1, {WORD("KV_DTYPE")}, read_kv_dtype},
    {"kernel.head_dim", S2_MF_KERNEL, 1, {INT("HEAD_DIM", 1, 1024)}, read_head_dim},
    {"kernel.block_m", S2_MF_KERNEL, 1, {K_BLOCK("BLOCK_M")}, read_block_m},
    {"kernel.block_n", S2_MF_KERNEL, 1, {K_BLOCK("BLOCK_N")}, read_block_n},
    {"kernel.num_warps", S2_MF_KERNEL, 1, {K_WARPS("NUM_WARPS")}, read_num_warps},
    {"kernel.num_stages", S2_MF_KERNEL, 1, {K_STAGES("NUM_STAGES")}, read_num_stages},
    {"kernel.threads", S2_MF_KERNEL, 1, {K_THREADS("THREADS")}, read_threads},
    {"kernel.smem", S2_MF_KERNEL, 1, {K_SMEM("SMEM")}, read_smem},
    {"kernel.fn", S2_MF_KERNEL, 15,
     {WORD("SYMBOL"), WORD("ROLE"), WORD("ABI"), WORD("GRID"), K_THREADS("THREADS"), K_SMEM("SMEM"),
      K_BLOCK("BLOCK_M"), K_BLOCK("BLOCK_N"), K_WARPS("NUM_WARPS"), K_STAGES("NUM_STAGES"), INT("PERSISTENT", -1, 1),
      INT("BWD_WGMMA", -1, 1), INT("KV_GATHER", 0, 4), INT("BWD_TMA", -1, 1), INT("MIN_KEYS", 0, INT32_MAX)},
     read_fn},
    {"pattern", S2_MF_TOP, 1, {TEXT("NAME")}, s2_mf_new_pattern},
    {"pattern.heads", S2_MF_PATTERN, 1, {INT("HEADS", 1, S2_MAX_HEADS)}, s2_mf_pattern_record},
    {"pattern.kv_heads", S2_MF_PATTERN, 1, {INT("KV_HEADS", 1, S2_MAX_HEADS)}, s2_mf_pattern_record},
    {"pattern.block_size", S2_MF_PATTERN, 1, {INT("BLOCK_SIZE", 16, 128)}, s2_mf_pattern_record},
    {"pattern.causal", S2_MF_PATTERN, 1, {P_BOOL("CAUSAL")}, s2_mf_pattern_record},
    {"pattern.max_seq_len", S2_MF_PATTERN, 1, {P_TOKEN("MAX_SEQ_LEN")}, s2_mf_pattern_record},
    {"pattern.vert_position", S2_MF_PATTERN, 1, {WORD("POSITION")}, s2_mf_pattern_record},
    {"pattern.local", S2_MF_PATTERN, 2, {P_COUNT("LEFT"), P_COUNT("RIGHT")}, s2_mf_pattern_record},
    {"pattern.vert_stride", S2_MF_PATTERN, 1, {P_COUNT("STRIDE")}, s2_mf_pattern_record},
    {"pattern.head_sliding", S2_MF_PATTERN, 3,
     {INT("STEP", 1, S2_PATTERN_MAX_COUNT), P_BOOL("AUTO"), P_COUNT("OFFSET")}, s2_mf_pattern_record},
    {"pattern.homo_head", S2_MF_PATTERN, 1, {P_BOOL("HOMO_HEAD")}, s2_mf_pattern_record},
    {"pattern.num_dense_heads", S2_MF_PATTERN, 1, {INT("NUM_DENSE_HEADS", 0, S2_MAX_HEADS)}, s2_mf_pattern_record},
    {"pattern.mask", S2_MF_PATTERN, 5,
     {INT("I", 0, S2_PATTERN_MAX_MASKS - 1), INT("H", 1, S2_MAX_HEADS), INT("M", 1, S2_MASK_MAX_BLOCKS),
      INT("N", 1, S2_MASK_MAX_BLOCKS), HEX("BITS")},
     s2_mf_pattern_record},
    {"pattern.rule", S2_MF_PATTERN, 8,
     {INT("Q", 0, S2_MAX_HEADS - 1), P_BOOL("DENSE"), P_COUNT("LEFT"), P_COUNT("RIGHT"), P_COUNT("STRIDE"),
      INT("SHIFT", 0, S2_PATTERN_MAX_SHIFT), INT("MASK", -1, S2_PATTERN_MAX_MASKS - 1),
      INT("MASK_HEAD", 0, S2_MAX_HEADS - 1)},
     s2_mf_pattern_record},
    {"pattern.range", S2_MF_PATTERN, 7,
     {WORD("ACTION"), P_TOKEN("KEY_LO"), P_TOKEN_OR_END("KEY_HI"), P_TOKEN("DIST_LO"), P_TOKEN_OR_END("DIST_HI"),
      P_COUNT("STRIDE"), HEX("HEADS")},
     s2_mf_pattern_record},
};
const int s2_mf_num_records = (int)(sizeof s2_mf_records / sizeof s2_mf_records[0]);

const s2_mf_record *s2_mf_find(const char *key)
{
    for (int i = 0; i < s2_mf_num_records; i++)
        if (!strcmp(s2_mf_records[i].key, key))
            return &s2_mf_records[i];
    return NULL;
}

/* ---- lines ----------------------------------------------------------------------------- */

/* "KEY: expected A B C" */
static s2_status usage(s2_mf_parser *ps, const s2_mf_record *rec)
{
    char words[256] = "";
    size_t o = 0;
    for (int i = 0; i < rec->num_words && o < sizeof words; i++)
        o += (size_t)snprintf(words + o, sizeof words - o, "%s%s", i ? " " : "", rec->words[i].name);
    return s2_mf_fail(ps, "%s: expected %s", rec->key, words);
}

/* One word as its record's table entry says; integers bounded. */
static s2_status read_word(s2_mf_parser *ps, const s2_mf_record *rec, int w, char *word, s2_mf_value *v)
{
    const s2_mf_word *d = &rec->words[w];
    v->s[w] = word;
    if (d->kind != S2_MF_INT)
        return S2_OK;
    char b[S2_MF_SHOWN], *e;
    errno = 0;
    long long x = strtoll(word, &e, 10);
    if (!(word[0] == '-' || (word[0] >= '0' && word[0] <= '9')) || *e || errno)
        return s2_mf_fail(ps, "%s: %s: not a 64-bit integer: %s", rec->key, d->name, s2_mf_show(b, word));
    if ((x < d->lo || x > d->hi) && !(d->end_ok && x == INT64_MAX))
        return s2_mf_fail(ps, "%s: %s out of range (%lld..%lld%s): %lld", rec->key, d->name, (long long)d->lo,
                          (long long)d->hi, d->end_ok ? ", or 9223372036854775807 for the end" : "", x);
    v->i[w] = x;
    return S2_OK;
}

/* The record `rec` whose value is `rest` (modified: words are cut in place). */
static s2_status read_record(s2_mf_parser *ps, const s2_mf_record *rec, char *rest)
{
    s2_mf_value v;
    memset(&v, 0, sizeof v);
    if (rec->words[0].kind == S2_MF_TEXT) {
        v.s[0] = rest;
        return rec->read(ps, rec, &v);
    }
    int n = 0;
    for (char *s = rest;;) {
        while (*s == ' ')
            s++;
        if (!*s)
            break;
        if (n == rec->num_words)
            return usage(ps, rec);
        char *word = s;
        while (*s && *s != ' ')
            s++;
        if (*s)
            *s++ = '\0';
        s2_status st = read_word(ps, rec, n++, word, &v);
        if (st != S2_OK)
            return st;
    }
    return n == rec->num_words ? rec->read(ps, rec, &v) : usage(ps, rec);
}

static s2_status parse_line(s2_mf_parser *ps, char *line)
{
    char b[S2_MF_SHOWN];
    char *sp = strchr(line, ' ');
    char *rest = sp ? sp + 1 : line + strlen(line);
    if (sp)
        *sp = '\0';
    const s2_mf_record *rec = s2_mf_find(line);
    /* keys are closed at every level: an unknown one is a newer writer's, whose meaning this runtime cannot know */
    if (!rec)
        return s2_mf_fail(ps, "unknown key (written by a newer s2c? this runtime reads manifest version %d): %s",
                          S2_MANIFEST_VERSION, s2_mf_show(b, line));
    if (rec->scope == S2_MF_KERNEL) {
        if (!ps->k)
            return s2_mf_fail(ps, "kernel key outside a kernel: %s", line);
        if (ps->k->num_fns && rec->read != read_fn)
            return s2_mf_fail(ps, "kernel key after the entry's kernel.fn lines: %s", line);
        ps->k->spec.arch = ps->m->arch;
    }
    if (rec->scope == S2_MF_PATTERN && !ps->p)
        return s2_mf_fail(ps, "pattern key outside a pattern: %s", line);
    return read_record(ps, rec, rest);
}

/* "s2c-manifest 5"; other versions are named as older or newer. */
static s2_status version_line(s2_mf_parser *ps, const char *line)
{
    static const char magic[] = "s2c-manifest ";
    char *e;
    const char *num = line + sizeof magic - 1;
    if (strncmp(line, magic, sizeof magic - 1) != 0 || !(*num >= '0' && *num <= '9'))
        return s2_mf_fail(ps, "not an s2c manifest of version %d", S2_MANIFEST_VERSION);
    errno = 0;
    long long v = strtoll(num, &e, 10);
    if (*e || errno || v > (1 << 20))
        return s2_mf_fail(ps, "not an s2c manifest of version %d", S2_MANIFEST_VERSION);
    if (v == S2_MANIFEST_VERSION)
        return S2_OK;
    return s2_mf_fail(ps, "a manifest of version %lld (%s s2c); this one reads version %d%s", v,
                      v < S2_MANIFEST_VERSION ? "an older" : "a newer", S2_MANIFEST_VERSION,
                      v < S2_MANIFEST_VERSION ? ": compile the module again" : "");
}

/* ---- the whole -------------------------------------------------------------------------- */

/* The kernels an entry of each kind must hold (NAME_dqds2 needs NAME_dqds). */
static s2_status check_fns(s2_ctx *ctx, s2_manifest_kernel *k)
{
    static const s2_kernel_role need[S2_KERNEL_KIND_COUNT_][3] = {
        [S2_KERNEL_FWD] = {S2_ROLE_FWD, S2_ROLE_FWD, S2_ROLE_FWD},
        [S2_KERNEL_BWD] = {S2_ROLE_BWD_PRE, S2_ROLE_BWD_DKDV, S2_ROLE_BWD_DQ},
        [S2_KERNEL_DECODE] = {S2_ROLE_DECODE, S2_ROLE_COMBINE, S2_ROLE_DECODE},
    };
    for (int j = 0; j < 3; j++)
        if (!s2_manifest_kernel_fn(k, need[k->spec.kind][j]))
            return s2_fail(ctx, S2_ERR_PARSE, "manifest: kernel %s has no %s kernel (kernel.fn)", k->name,
                           s2_role_name(need[k->spec.kind][j]));
    if (k->spec.kv_dtype != 0 && k->spec.kind != S2_KERNEL_DECODE)
        return s2_fail(ctx, S2_ERR_PARSE, "manifest: kernel %s: kernel.kv_dtype in a %s entry (decode only)", k->name,
                       k->spec.kind == S2_KERNEL_FWD ? "forward" : "backward");
    if (s2_manifest_kernel_fn(k, S2_ROLE_BWD_DQDS2) && !s2_manifest_kernel_fn(k, S2_ROLE_BWD_DQDS))
        return s2_fail(ctx, S2_ERR_PARSE, "manifest: kernel %s has bwd_dqds2 without bwd_dqds", k->name);
    /* the entry's main kernel: its launch shape is the entry's */
    const s2_kernel_record *main = s2_manifest_kernel_fn(k, s2_main_role(k->spec.kind));
    for (int i = 0; i < k->num_fns; i++)
        if (k->fns[i].abi != main->abi && k->spec.kind == S2_KERNEL_BWD && k->fns[i].role != S2_ROLE_ROWS)
            return s2_fail(ctx, S2_ERR_PARSE, "manifest: kernel %s's backward kernels differ in ABI", k->name);
    if (main->threads != k->threads || main->smem_bytes != k->smem_bytes)
        return s2_fail(ctx, S2_ERR_PARSE, "manifest: kernel %s: its main kernel's launch shape is not the entry's",
                       k->name);
    return S2_OK;
}

const s2_kernel_record *s2_manifest_kernel_fn(const s2_manifest_kernel *k, s2_kernel_role r)
{
    for (int i = 0; k && i < k->num_fns; i++)
        if (k->fns[i].role == r)
            return &k->fns[i];
    return NULL;
}

/* No two entries, patterns or kernels of one name: a lookup by name would take the first. */
static s2_status check_repeats(s2_mf_parser *ps)
{
    const s2_mf_named *first = NULL, *again;
    if ((again = s2_mf_first_repeat(&ps->entries, &first))) {
        ps->line = again->line;
        return s2_mf_fail(ps, "a second kernel entry named '%s' (the first at line %d)", again->name, first->line);
    }
    if ((again = s2_mf_first_repeat(&ps->pattern_names, &first))) {
        ps->line = again->line;
        return s2_mf_fail(ps, "a second pattern named '%s' (the first at line %d)", again->name, first->line);
    }
    if ((again = s2_mf_first_repeat(&ps->symbols, &first))) {
        ps->line = again->line;
        return s2_mf_fail(ps, "kernel.fn: kernel %s of entry '%s' is also a kernel of entry '%s' (line %d)",
                          again->name, again->owner, first->owner, first->line);
    }
    return S2_OK;
}

static s2_status check_complete(s2_mf_parser *ps)
{
    s2_manifest *m = ps->m;
    s2_status st = check_repeats(ps);
    for (int i = 0; st == S2_OK && i < m->num_patterns; i++)
        st = s2_mf_pattern_complete(ps->ctx, m->patterns[i], m->rules_seen[i]);
    for (int i = 0; st == S2_OK && i < m->num_kernels; i++) {
        if (!s2_manifest_find_pattern(m, m->kernels[i].pattern))
            return s2_fail(ps->ctx, S2_ERR_PARSE, "manifest: kernel %s names unknown pattern '%s'",
                           m->kernels[i].name, m->kernels[i].pattern);
        st = check_fns(ps->ctx, &m->kernels[i]);
    }
    return st;
}

s2_status s2_manifest_parse(s2_ctx *ctx, const char *text, size_t len, s2_manifest **out)
{
    if (!out || (!text && len))
        return s2_fail(ctx, S2_ERR_INVALID, "manifest_parse: null argument");
    *out = NULL;
    s2_manifest *m = s2_arena_boxed(sizeof *m, offsetof(s2_manifest, arena));
    if (!m)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    s2_mf_parser ps = {.ctx = ctx, .m = m};
    s2_status st = S2_OK;
    bool ended = false;
    const char *s = text, *end = text + len;
    while (st == S2_OK && s < end && *s && !ended) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
        const char *z = memchr(s, '\0', n);
        if (z)
            n = (size_t)(z - s);
        char *line = s2_arena_strndup(&m->arena, s, n);
        ps.line++;
        if (!line)
            st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
        else if (ps.line == 1)
            st = version_line(&ps, line);
        else if (!strcmp(line, "end"))
            ended = true;
        else if (line[0])
            st = parse_line(&ps, line);
        s = nl && !z ? nl + 1 : end;
    }
    if (st == S2_OK && !ended)
        st = s2_fail(ctx, S2_ERR_PARSE, "manifest: no 'end' line (truncated)");
    if (st == S2_OK && !m->requires_seen)
        st = s2_fail(ctx, S2_ERR_PARSE, "manifest: no 'requires' line (the oldest runtime it needs)");
    if (st == S2_OK)
        st = check_complete(&ps);
    return S2_HAND_OVER(st, out, m, s2_manifest_free);
}

void s2_manifest_free(s2_manifest *m)
{
    if (m)
        s2_arena_free_boxed(&m->arena);
}

const char *s2_manifest_generator(const s2_manifest *m) { return m && m->generator ? m->generator : ""; }
int s2_manifest_arch(const s2_manifest *m) { return m ? m->arch : -1; }
int s2_manifest_num_kernels(const s2_manifest *m) { return m ? m->num_kernels : 0; }
int s2_manifest_num_patterns(const s2_manifest *m) { return m ? m->num_patterns : 0; }

const s2_manifest_kernel *s2_manifest_kernel_at(const s2_manifest *m, int i)
{
    return m && i >= 0 && i < m->num_kernels ? &m->kernels[i] : NULL;
}

const s2_pattern *s2_manifest_pattern_at(const s2_manifest *m, int i)
{
    return m && i >= 0 && i < m->num_patterns ? m->patterns[i] : NULL;
}

const s2_pattern *s2_manifest_find_pattern(const s2_manifest *m, const char *name)
{
    for (int i = 0; m && name && i < m->num_patterns; i++)
        if (!strcmp(m->patterns[i]->name, name))
            return m->patterns[i];
    return NULL;
}

s2_status s2_cubin_find_manifest(s2_ctx *ctx, const void *image, size_t size, const char **text, size_t *len)
{
    if (!image || !text || !len)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cubin_find_manifest: invalid arguments");
    *text = NULL;
    *len = 0;
    const uint8_t *bytes;
    size_t n;
    s2_status st = s2_elf_find_symbol(ctx, image, size, S2_MANIFEST_SYMBOL, &bytes, &n);
    if (st != S2_OK)
        return st;
    /* e_machine, little-endian at byte 18 (the header s2_elf_find_symbol checked) */
    enum { ELF_EM_CUDA = 190 };
    const uint8_t *hdr = image;
    unsigned machine = (unsigned)hdr[18] | (unsigned)hdr[19] << 8;
    if (machine != ELF_EM_CUDA)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: machine %u is not CUDA (%d)", machine, ELF_EM_CUDA);
    const uint8_t *nul = n ? memchr(bytes, 0, n) : NULL;
    if (!nul)
        return s2_fail(ctx, S2_ERR_PARSE, "ELF: %s (%zu bytes) is not NUL-terminated", S2_MANIFEST_SYMBOL, n);
    *text = (const char *)bytes;
    *len = (size_t)(nul - bytes);
    return S2_OK;
}
