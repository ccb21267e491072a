/* The manifest parser (format in include/s2c/manifest.h) and the lookup of
 * the manifest symbol in a cubin.  No LLVM and no CUDA: the runtime uses it. */
#include "elf.h"
#include "kernel_abi.h"
#include "s2c/manifest.h"
#include "s2c/version.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct s2_manifest {
    s2_arena arena;
    char *generator;
    int arch;
    s2_manifest_kernel *kernels;
    int num_kernels, cap_kernels;
    s2_pattern **patterns;
    int *rules_seen;           /* per pattern: rule lines read */
    int num_patterns, cap_patterns;
    bool requires_seen;
};

typedef struct mparser {
    s2_ctx *ctx;
    s2_manifest *m;
    int line;
    s2_manifest_kernel *k;     /* current kernel, or NULL */
    s2_pattern *p;             /* current pattern, or NULL */
    uint8_t *head_seen;        /* current pattern: which heads have their rule line */
    int cap_ranges;            /* current pattern: room in p->ranges */
} mparser;

/* As the pattern parser's limits (patterns/parse_internal.h). */
enum { MANIFEST_MAX_MASKS = 64, MANIFEST_MAX_RANGES = 4096 };

/* Text from the manifest as a message shows it: printable ASCII, other bytes
 * as \xNN, at most 64 input bytes (then "..."), so a message stays one clean line. */
static void shown(char *out, size_t size, const char *text)
{
    size_t o = 0;
    for (size_t i = 0; text[i] && o + 8 < size; i++) {
        unsigned char c = (unsigned char)text[i];
        if (i == 64) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        if (c >= 0x20 && c < 0x7f)
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, size - o, "\\x%02x", c);
    }
    out[o] = '\0';
}

static s2_status perr(mparser *ps, const char *msg, const char *key)
{
    char k[300];
    if (key)
        shown(k, sizeof k, key);
    return s2_fail(ps->ctx, S2_ERR_PARSE, "manifest:%d: %s%s%s", ps->line, msg, key ? ": " : "", key ? k : "");
}

/* Kernel and pattern names: 1 to 255 printable ASCII bytes, so that
 * messages and symbols can hold them. */
static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 255)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return false;
    return true;
}

/* Whitespace-separated integers; false unless exactly n were read. */
static bool ints(const char *v, int64_t *out, int n)
{
    const char *s = v;
    for (int i = 0; i < n; i++) {
        char *e;
        errno = 0;
        long long x = strtoll(s, &e, 10);
        if (e == s || errno)
            return false;
        out[i] = x;
        s = e;
    }
    while (*s == ' ')
        s++;
    return *s == '\0';
}

static bool int1(const char *v, int *out, int lo, int hi)
{
    int64_t x;
    if (!ints(v, &x, 1) || x < lo || x > hi)
        return false;
    *out = (int)x;
    return true;
}

/* Hex digits, 4 elements per digit, low bit first; exactly n elements. */
static bool hex_bits(const char *v, uint8_t *bits, int64_t n)
{
    int64_t digits = (n + 3) / 4;
    if ((int64_t)strlen(v) != digits)
        return false;
    for (int64_t d = 0; d < digits; d++) {
        char c = v[d];
        unsigned x = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) : 16u;
        if (x > 15)
            return false;
        for (int j = 0; j < 4; j++) {
            int64_t i = 4 * d + j;
            if (i < n)
                bits[i] = (x >> j) & 1u;
            else if ((x >> j) & 1u)
                return false;
        }
    }
    return true;
}

static void *grow(s2_arena *a, void *old, size_t n_old, size_t n_new, size_t elem)
{
    void *p = s2_arena_array(a, n_new, elem);
    if (p && n_old)
        memcpy(p, old, n_old * elem);
    return p;
}

static s2_status new_kernel(mparser *ps, const char *name)
{
    s2_manifest *m = ps->m;
    if (!name_ok(name))
        return perr(ps, "bad kernel name (1 to 255 printable ASCII bytes)", name);
    if (m->num_kernels == m->cap_kernels) {
        int cap = m->cap_kernels ? 2 * m->cap_kernels : 4;
        m->kernels = grow(&m->arena, m->kernels, (size_t)m->num_kernels, (size_t)cap, sizeof *m->kernels);
        if (!m->kernels)
            return s2_fail(ps->ctx, S2_ERR_NOMEM, "out of memory");
        m->cap_kernels = cap;
    }
    ps->k = &m->kernels[m->num_kernels++];
    memset(ps->k, 0, sizeof *ps->k);
    ps->k->name = s2_arena_strdup(&m->arena, name);
    ps->k->pattern = s2_arena_strdup(&m->arena, "");
    /* at most one kernel per role */
    ps->k->fns = s2_arena_array(&m->arena, S2_ROLE_COUNT_, sizeof(s2_kernel_record));
    ps->p = NULL;
    return ps->k->name && ps->k->pattern && ps->k->fns ? S2_OK : s2_fail(ps->ctx, S2_ERR_NOMEM, "out of memory");
}

static s2_status new_pattern(mparser *ps, const char *name)
{
    s2_manifest *m = ps->m;
    if (!name_ok(name))
        return perr(ps, "bad pattern name (1 to 255 printable ASCII bytes)", name);
    if (m->num_patterns == m->cap_patterns) {
        int cap = m->cap_patterns ? 2 * m->cap_patterns : 4;
        m->patterns = grow(&m->arena, m->patterns, (size_t)m->num_patterns, (size_t)cap, sizeof *m->patterns);
        m->rules_seen = grow(&m->arena, m->rules_seen, (size_t)m->num_patterns, (size_t)cap, sizeof *m->rules_seen);
        if (!m->patterns || !m->rules_seen)
            return s2_fail(ps->ctx, S2_ERR_NOMEM, "out of memory");
        m->cap_patterns = cap;
    }
    s2_pattern *p = s2_arena_alloc(&m->arena, sizeof *p);
    if (!p || !(p->name = s2_arena_strdup(&m->arena, name)))
        return s2_fail(ps->ctx, S2_ERR_NOMEM, "out of memory");
    p->kv_heads = 1;
    p->vert_stride = 1;
    p->file = "<manifest>";
    m->rules_seen[m->num_patterns] = 0;
    m->patterns[m->num_patterns++] = p;
    ps->p = p;
    ps->head_seen = NULL;
    ps->cap_ranges = 0;
    ps->k = NULL;
    return S2_OK;
}

/* kernel.fn SYMBOL ROLE ABI GRID THREADS SMEM BM BN WARPS STAGES PERSISTENT BWD_WGMMA KV_GATHER BWD_TMA:
 * after the entry's own keys (its kind, dtype and head dim are the kernel's) */
static s2_status kernel_fn(mparser *ps, const char *v)
{
    s2_manifest_kernel *k = ps->k;
    char sym[256], role[32], abi[32], grid[32];
    int64_t x[10];
    int used = 0;
    if (sscanf(v, "%255s %31s %31s %31s%n", sym, role, abi, grid, &used) != 4 || !ints(v + used, x, 10))
        return perr(ps, "bad kernel.fn (SYMBOL ROLE ABI GRID and ten integers)", NULL);
    s2_kernel_record r = {.spec = s2_kspec_of(&k->spec, NULL)};
    if (!s2_role_parse(role, &r.role) || !s2_abi_parse(abi, &r.abi) || !s2_grid_parse(grid, &r.grid))
        return perr(ps, "kernel.fn: unknown role, ABI or grid", v);
    if (s2_role_kind(r.role) != k->spec.kind || !s2_role_takes_abi(r.role, r.abi) ||
        s2_role_grid(r.role, r.abi) != r.grid)
        return perr(ps, "kernel.fn: role, ABI and grid do not fit the entry's kind", v);
    char want[320];
    snprintf(want, sizeof want, "%s%s", k->name, s2_role_suffix(r.role));
    if (strcmp(sym, want) != 0)
        return perr(ps, "kernel.fn: the symbol is not the entry's name and the role's suffix", sym);
    for (int i = 0; i < k->num_fns; i++)
        if (k->fns[i].role == r.role)
            return perr(ps, "kernel.fn: a second kernel of one role", role);
    if (x[0] < 1 || x[0] > 1024 || x[1] < 0 || x[1] > (1 << 30) || x[2] < 1 || x[2] > 1024 || x[3] < 1 ||
        x[3] > 1024 || x[4] < 1 || x[4] > 32 || x[5] < 1 || x[5] > 16 || x[6] < -1 || x[6] > 1 || x[7] < -1 ||
        x[7] > 1 || x[8] < 0 || x[8] > 4 || x[9] < -1 || x[9] > 1)
        return perr(ps, "kernel.fn: a value out of range", v);
    r.threads = (int)x[0], r.smem_bytes = (int)x[1];
    r.spec.block_m = (int)x[2], r.spec.block_n = (int)x[3], r.spec.num_warps = (int)x[4];
    r.spec.num_stages = (int)x[5], r.spec.persistent = (int)x[6], r.spec.bwd_wgmma = (int)x[7];
    r.spec.kv_gather = (int)x[8], r.spec.bwd_tma = (int)x[9];
    if (!(r.symbol = s2_arena_strdup(&ps->m->arena, sym)))
        return s2_fail(ps->ctx, S2_ERR_NOMEM, "out of memory");
    ((s2_kernel_record *)k->fns)[k->num_fns++] = r;
    return S2_OK;
}

static s2_status kernel_key(mparser *ps, const char *key, const char *v)
{
    s2_manifest_kernel *k = ps->k;
    bool ok = true;
    if (!strcmp(key, "fn"))
        return kernel_fn(ps, v);
    if (k->num_fns)
        return perr(ps, "kernel key after the entry's kernel.fn lines", key);
    if (!strcmp(key, "kind"))
        ok = (!strcmp(v, "fwd") && ((k->spec.kind = S2_KERNEL_FWD), true)) ||
             (!strcmp(v, "bwd") && ((k->spec.kind = S2_KERNEL_BWD), true)) ||
             (!strcmp(v, "decode") && ((k->spec.kind = S2_KERNEL_DECODE), true));
    else if (!strcmp(key, "pattern"))
        ok = name_ok(v) && (k->pattern = s2_arena_strdup(&ps->m->arena, v)) != NULL;
    else if (!strcmp(key, "dtype")) {
        if (!strcmp(v, "bf16")) k->spec.dtype = S2_DTYPE_BF16;
        else if (!strcmp(v, "f16")) k->spec.dtype = S2_DTYPE_F16;
        else ok = false;
    } else if (!strcmp(key, "head_dim")) ok = int1(v, &k->spec.head_dim, 1, 1024);
    else if (!strcmp(key, "block_m")) ok = int1(v, &k->spec.block_m, 1, 1024);
    else if (!strcmp(key, "block_n")) ok = int1(v, &k->spec.block_n, 1, 1024);
    else if (!strcmp(key, "num_warps")) ok = int1(v, &k->spec.num_warps, 1, 32);
    else if (!strcmp(key, "num_stages")) ok = int1(v, &k->spec.num_stages, 1, 16);
    else if (!strcmp(key, "threads")) ok = int1(v, &k->threads, 1, 1024);
    else if (!strcmp(key, "smem")) ok = int1(v, &k->smem_bytes, 0, 1 << 30);
    k->spec.arch = ps->m->arch;
    return ok ? S2_OK : perr(ps, "bad kernel value", key);
}

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
    if (s2_manifest_kernel_fn(k, S2_ROLE_BWD_DQDS2) && !s2_manifest_kernel_fn(k, S2_ROLE_BWD_DQDS))
        return s2_fail(ctx, S2_ERR_PARSE, "manifest: kernel %s has bwd_dqds2 without bwd_dqds", k->name);
    /* the entry's main kernel: its launch shape is the entry's */
    const s2_kernel_record *main = s2_manifest_kernel_fn(k, s2_main_role(k->spec.kind));
    for (int i = 0; i < k->num_fns; i++)
        if (k->fns[i].abi != main->abi && k->spec.kind == S2_KERNEL_BWD)
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

static s2_range_action range_action(const char *s, bool *ok)
{
    *ok = true;
    if (!strcmp(s, "sink")) return S2_RANGE_SINK;
    if (!strcmp(s, "stride")) return S2_RANGE_STRIDE;
    if (!strcmp(s, "dense")) return S2_RANGE_DENSE;
    if (!strcmp(s, "drop")) return S2_RANGE_DROP;
    *ok = false;
    return S2_RANGE_SINK;
}

static s2_status pattern_rule(mparser *ps, const char *v)
{
    s2_pattern *p = ps->p;
    int64_t x[8];
    if (!p->rules || !ints(v, x, 8) || x[0] < 0 || x[0] >= p->heads || x[4] < 0 || x[4] > INT32_MAX ||
        x[6] < -1 || x[6] >= p->num_masks || x[2] < 0 || x[3] < 0 || x[2] > INT32_MAX || x[3] > INT32_MAX ||
        x[7] < 0 || x[7] > INT32_MAX)
        return perr(ps, "bad rule (heads must come first, masks before rules)", NULL);
    if (ps->head_seen[x[0]])
        return perr(ps, "a second rule for one head", v);
    if (x[6] >= 0 && x[7] >= p->masks[x[6]].heads)
        return perr(ps, "rule: the mask has no such head", v);
    ps->head_seen[x[0]] = 1;
    s2_head_rule *r = &p->rules[x[0]];
    r->dense = x[1] != 0;
    r->local_left = (int)x[2];
    r->local_right = (int)x[3];
    r->vert_stride = (int)x[4];
    r->shift = x[5];
    r->mask = (int)x[6];
    r->mask_head = (int)x[7];
    ps->m->rules_seen[ps->m->num_patterns - 1]++;
    return S2_OK;
}

static s2_status pattern_mask(mparser *ps, const char *v)
{
    s2_pattern *p = ps->p;
    int64_t x[4];
    char *e;
    const char *s = v;
    for (int i = 0; i < 4; i++) {
        x[i] = strtoll(s, &e, 10);
        if (e == s)
            return perr(ps, "bad mask", NULL);
        s = e;
    }
    while (*s == ' ')
        s++;
    if (x[0] != p->num_masks || x[1] < 1 || x[1] > S2_MAX_HEADS || x[2] < 1 || x[3] < 1 || x[2] > (1 << 20) ||
        x[3] > (1 << 20) || x[1] * x[2] * x[3] > (INT64_C(1) << 32))
        return perr(ps, "bad mask shape or index", NULL);
    /* the bits must be there before any memory is taken for them */
    if (p->num_masks >= MANIFEST_MAX_MASKS)
        return perr(ps, "more masks than a pattern may hold (64)", NULL);
    if ((int64_t)strlen(s) != (x[1] * x[2] * x[3] + 3) / 4)
        return perr(ps, "bad mask bits (not as many digits as the shape needs)", NULL);
    s2_block_mask *nm = grow(&ps->m->arena, p->masks, (size_t)p->num_masks, (size_t)p->num_masks + 1, sizeof *nm);
    if (!nm)
        return s2_fail(ps->ctx, S2_ERR_NOMEM, "out of memory");
    s2_block_mask *mk = &nm[p->num_masks];
    mk->name = s2_arena_strdup(&ps->m->arena, "");
    mk->heads = (int)x[1];
    mk->rows = x[2];
    mk->cols = x[3];
    mk->bits = s2_arena_alloc(&ps->m->arena, (size_t)(x[1] * x[2] * x[3]));
    if (!mk->bits || !mk->name)
        return s2_fail(ps->ctx, S2_ERR_NOMEM, "out of memory");
    if (!hex_bits(s, mk->bits, x[1] * x[2] * x[3]))
        return perr(ps, "bad mask bits", NULL);
    p->masks = nm;
    p->num_masks++;
    return S2_OK;
}

static s2_status pattern_range(mparser *ps, const char *v)
{
    s2_pattern *p = ps->p;
    char act[16];
    int n = 0;
    if (p->heads < 1 || sscanf(v, "%15s%n", act, &n) != 1)
        return perr(ps, "bad range (heads must come first)", NULL);
    bool ok;
    s2_range_rule rr = {.action = range_action(act, &ok)};
    const char *s = v + n;
    int64_t x[5];
    char *e;
    for (int i = 0; i < 5 && ok; i++) {
        x[i] = strtoll(s, &e, 10);
        ok = e != s;
        s = e;
    }
    while (*s == ' ')
        s++;
    /* as the pattern parser: bounds from 0, a stride range's stride from 1 */
    if (!ok || x[4] < 0 || x[4] > INT32_MAX || x[0] < 0 || x[2] < 0 || (rr.action == S2_RANGE_STRIDE && x[4] < 1))
        return perr(ps, "bad range", NULL);
    rr.key_lo = x[0], rr.key_hi = x[1], rr.dist_lo = x[2], rr.dist_hi = x[3], rr.stride = (int)x[4];
    if (p->num_ranges >= MANIFEST_MAX_RANGES)
        return perr(ps, "more ranges than a pattern may hold (4096)", NULL);
    if ((int64_t)strlen(s) != ((int64_t)p->heads + 3) / 4)
        return perr(ps, "bad range heads", NULL);
    rr.heads = s2_arena_alloc(&ps->m->arena, (size_t)p->heads);
    if (!rr.heads)
        return s2_fail(ps->ctx, S2_ERR_NOMEM, "out of memory");
    if (!hex_bits(s, rr.heads, p->heads))
        return perr(ps, "bad range heads", NULL);
    rr.line = ps->line;
    if (p->num_ranges == ps->cap_ranges) {   /* doubling: appends stay linear */
        int cap = ps->cap_ranges ? 2 * ps->cap_ranges : 8;
        s2_range_rule *nr = grow(&ps->m->arena, p->ranges, (size_t)p->num_ranges, (size_t)cap, sizeof *nr);
        if (!nr)
            return s2_fail(ps->ctx, S2_ERR_NOMEM, "out of memory");
        p->ranges = nr;
        ps->cap_ranges = cap;
    }
    p->ranges[p->num_ranges++] = rr;
    return S2_OK;
}

static s2_status pattern_key(mparser *ps, const char *key, const char *v)
{
    s2_pattern *p = ps->p;
    int64_t x[3];
    bool ok = true;
    int b;
    if (!strcmp(key, "heads")) {
        ok = !p->rules && int1(v, &p->heads, 1, S2_MAX_HEADS);
        if (ok && (!(p->rules = s2_arena_array(&ps->m->arena, (size_t)p->heads, sizeof *p->rules)) ||
                   !(ps->head_seen = s2_arena_array(&ps->m->arena, (size_t)p->heads, 1))))
            return s2_fail(ps->ctx, S2_ERR_NOMEM, "out of memory");
    } else if (!strcmp(key, "kv_heads")) ok = int1(v, &p->kv_heads, 1, S2_MAX_HEADS);
    else if (!strcmp(key, "block_size"))   /* as the pattern parser: 16, 32, 64 or 128 */
        ok = int1(v, &p->block_size, 16, 128) && (p->block_size & (p->block_size - 1)) == 0;
    else if (!strcmp(key, "causal")) ok = int1(v, &b, 0, 1) && ((p->causal = b), true);
    else if (!strcmp(key, "max_seq_len")) ok = ints(v, &p->max_seq_len, 1) && p->max_seq_len >= 0;
    else if (!strcmp(key, "vert_position")) {
        if (!strcmp(v, "absolute")) p->vert_position = S2_VERT_ABSOLUTE;
        else if (!strcmp(v, "relative")) p->vert_position = S2_VERT_RELATIVE;
        else ok = false;
    } else if (!strcmp(key, "local")) {
        ok = ints(v, x, 2) && x[0] >= 0 && x[1] >= 0 && x[0] <= INT32_MAX && x[1] <= INT32_MAX;
        if (ok)
            p->local_left = (int)x[0], p->local_right = (int)x[1];
    } else if (!strcmp(key, "vert_stride")) ok = int1(v, &p->vert_stride, 0, INT32_MAX);
    else if (!strcmp(key, "head_sliding")) {
        ok = ints(v, x, 3) && x[0] >= INT32_MIN && x[0] <= INT32_MAX && x[2] >= INT32_MIN && x[2] <= INT32_MAX;
        if (ok)
            p->head_sliding_step = (int)x[0], p->head_sliding_step_auto = x[1] != 0, p->head_sliding_offset = (int)x[2];
    } else if (!strcmp(key, "homo_head")) ok = int1(v, &b, 0, 1) && ((p->homo_head = b), true);
    else if (!strcmp(key, "num_dense_heads")) ok = int1(v, &p->num_dense_heads, 0, S2_MAX_HEADS);
    else if (!strcmp(key, "rule")) return pattern_rule(ps, v);
    else if (!strcmp(key, "mask")) return pattern_mask(ps, v);
    else if (!strcmp(key, "range")) return pattern_range(ps, v);
    return ok ? S2_OK : perr(ps, "bad pattern value", key);
}

/* "requires MAJOR.MINOR": refused when above this runtime's release. */
static s2_status requires_line(mparser *ps, const char *v)
{
    int major = -1, minor = -1, n = 0;
    if (ps->m->requires_seen || sscanf(v, "%3d.%3d%n", &major, &minor, &n) != 2 || v[n] || major < 0 || minor < 0)
        return perr(ps, ps->m->requires_seen ? "a second 'requires'" : "bad 'requires' (MAJOR.MINOR)", v);
    ps->m->requires_seen = true;
    if (major > S2C_VERSION_MAJOR || (major == S2C_VERSION_MAJOR && minor > S2C_VERSION_MINOR))
        return s2_fail(ps->ctx, S2_ERR_UNSUPPORTED,
                       "manifest:%d: the module needs an s2c runtime of version %d.%d or newer; this one is %s: "
                       "update libs2rt", ps->line, major, minor, S2C_VERSION_STRING);
    return S2_OK;
}

static s2_status parse_line(mparser *ps, char *line)
{
    char *sp = strchr(line, ' ');
    const char *v = "";
    if (sp) {
        *sp = '\0';
        v = sp + 1;
    }
    const char *key = line;
    s2_manifest *m = ps->m;
    if (!strcmp(key, "requires"))
        return requires_line(ps, v);
    if (!strcmp(key, "generator"))
        return (m->generator = s2_arena_strdup(&m->arena, v)) ? S2_OK : s2_fail(ps->ctx, S2_ERR_NOMEM, "out of memory");
    if (!strcmp(key, "arch")) {
        if (!strcmp(v, "sm_80")) m->arch = S2_ARCH_SM80;
        else if (!strcmp(v, "sm_90")) m->arch = S2_ARCH_SM90;
        else if (!strcmp(v, "sm_90a")) m->arch = S2_ARCH_SM90A;
        else return perr(ps, "unknown arch", v);
        return S2_OK;
    }
    if (!strcmp(key, "kernel"))
        return new_kernel(ps, v);
    if (!strcmp(key, "pattern"))
        return new_pattern(ps, v);
    if (!strncmp(key, "kernel.", 7))
        return ps->k ? kernel_key(ps, key + 7, v) : perr(ps, "kernel key outside a kernel", key);
    if (!strncmp(key, "pattern.", 8))
        return ps->p ? pattern_key(ps, key + 8, v) : perr(ps, "pattern key outside a pattern", key);
    /* keys are closed: an unknown one is a newer writer's, whose meaning this runtime cannot know */
    return perr(ps, "unknown key (written by a newer s2c? this runtime reads manifest version 3)", key);
}

/* "s2c-manifest 3"; other versions are named as older or newer. */
static s2_status version_line(mparser *ps, const char *line)
{
    static const char magic[] = "s2c-manifest ";
    int v = 0;
    if (strncmp(line, magic, sizeof magic - 1) != 0 || !int1(line + sizeof magic - 1, &v, 0, 1 << 20))
        return perr(ps, "not an s2c manifest of version 3", NULL);
    if (v == S2_MANIFEST_VERSION)
        return S2_OK;
    return s2_fail(ps->ctx, S2_ERR_PARSE, "manifest:1: a manifest of version %d (%s s2c); this one reads version %d%s",
                   v, v < S2_MANIFEST_VERSION ? "an older" : "a newer", S2_MANIFEST_VERSION,
                   v < S2_MANIFEST_VERSION ? ": compile the module again" : "");
}

static s2_status check_complete(mparser *ps)
{
    s2_manifest *m = ps->m;
    for (int i = 0; i < m->num_patterns; i++) {
        const s2_pattern *p = m->patterns[i];
        if (p->heads < 1 || m->rules_seen[i] != p->heads || p->heads % p->kv_heads != 0 || p->block_size < 1)
            return s2_fail(ps->ctx, S2_ERR_PARSE, "manifest: pattern '%s' is incomplete (%d of %d rules)", p->name,
                           m->rules_seen[i], p->heads);
    }
    for (int i = 0; i < m->num_kernels; i++) {
        if (!s2_manifest_find_pattern(m, m->kernels[i].pattern))
            return s2_fail(ps->ctx, S2_ERR_PARSE, "manifest: kernel %s names unknown pattern '%s'",
                           m->kernels[i].name, m->kernels[i].pattern);
        s2_status st = check_fns(ps->ctx, &m->kernels[i]);
        if (st != S2_OK)
            return st;
    }
    return S2_OK;
}

s2_status s2_manifest_parse(s2_ctx *ctx, const char *text, size_t len, s2_manifest **out)
{
    if (!out || (!text && len))
        return s2_fail(ctx, S2_ERR_INVALID, "manifest_parse: null argument");
    *out = NULL;
    s2_manifest *m = calloc(1, sizeof *m);
    if (!m)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    s2_arena_init(&m->arena);
    mparser ps = {.ctx = ctx, .m = m};
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
    if (st != S2_OK) {
        s2_manifest_free(m);
        return st;
    }
    *out = m;
    return S2_OK;
}

void s2_manifest_free(s2_manifest *m)
{
    if (!m)
        return;
    s2_arena_release(&m->arena);
    free(m);
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
