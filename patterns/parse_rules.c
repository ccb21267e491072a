/* The pattern-file parser: the rule sections of a pattern (local_stride,
 * mask, overrides, ranges). */
#include "parse_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

s2_status s2_pp_parse_local_stride(parser *P, s2_pattern *p, const node *map, const char *pfx)
{
    char what[160], key[192];
    s2_pp_keyname(what, sizeof what, pfx, "local_stride");
    field f[] = {F("local_blocks"), F("vert_stride"), F("head_sliding_step"), F("head_sliding_offset"),
                 F("homo_head"), F("num_dense_heads"), F("vert_position"), F(NULL)};
    s2_status st = s2_pp_read_map(P, map, what, f);
    if (st != S2_OK)
        return st;
    const node *v;
    if (!(v = s2_pp_fval(f, "local_blocks")))
        return perr(P, map, "%s.local_blocks: required key missing", what);
    snprintf(key, sizeof key, "%s.local_blocks", what);
    if ((st = s2_pp_get_local(P, v, key, p->causal, &p->local_left, &p->local_right)) != S2_OK)
        return st;
    if (!(v = s2_pp_fval(f, "vert_stride")))
        return perr(P, map, "%s.vert_stride: required key missing", what);
    snprintf(key, sizeof key, "%s.vert_stride", what);
    if ((st = s2_pp_get_stride(P, v, key, &p->vert_stride)) != S2_OK)
        return st;
    p->head_sliding_step_auto = true;
    if ((v = s2_pp_fval(f, "head_sliding_step")) && !s2_pp_scalar_is(v, "auto")) {
        char buf[256];
        snprintf(key, sizeof key, "%s.head_sliding_step", what);
        if (v->kind != N_SCALAR || !v->plain || v->len == 0 || !((v->str[0] >= '0' && v->str[0] <= '9') || v->str[0] == '-'))
            return perr(P, v, "%s: expected auto or an integer >= 1, got %s", key, s2_pp_shown(v, buf, sizeof buf));
        if ((st = s2_pp_get_int32(P, v, key, 1, S2_PATTERN_MAX_COUNT, &p->head_sliding_step)) != S2_OK)
            return st;
        p->head_sliding_step_auto = false;
    }
    if ((v = s2_pp_fval(f, "head_sliding_offset"))) {
        snprintf(key, sizeof key, "%s.head_sliding_offset", what);
        if ((st = s2_pp_get_int32(P, v, key, 0, S2_PATTERN_MAX_COUNT, &p->head_sliding_offset)) != S2_OK)
            return st;
    }
    if ((v = s2_pp_fval(f, "homo_head"))) {
        snprintf(key, sizeof key, "%s.homo_head", what);
        if ((st = s2_pp_get_bool(P, v, key, &p->homo_head)) != S2_OK)
            return st;
    }
    if ((v = s2_pp_fval(f, "num_dense_heads"))) {
        snprintf(key, sizeof key, "%s.num_dense_heads", what);
        if ((st = s2_pp_get_int32(P, v, key, 0, p->kv_heads, &p->num_dense_heads)) != S2_OK)
            return st;
    }
    p->vert_position = p->causal ? S2_VERT_ABSOLUTE : S2_VERT_RELATIVE;
    if ((v = s2_pp_fval(f, "vert_position"))) {
        char buf[256];
        if (s2_pp_scalar_is(v, "absolute"))
            p->vert_position = S2_VERT_ABSOLUTE;
        else if (s2_pp_scalar_is(v, "relative"))
            p->vert_position = S2_VERT_RELATIVE;
        else
            return perr(P, v, "%s.vert_position: expected absolute or relative, got %s", what,
                        s2_pp_shown(v, buf, sizeof buf));
    }
    return S2_OK;
}

static char *dir_of(s2_arena *a, const char *path)
{
    const char *slash = path ? strrchr(path, '/') : NULL;
    if (!slash)
        return s2_arena_strdup(a, "");
    return s2_arena_strndup(a, path, (size_t)(slash - path + 1));
}

/* True when relative `path` stays below its starting directory, read
 * lexically: no `..` climbs above it. */
static bool stays_inside(const char *path)
{
    int depth = 0;
    for (const char *c = path; *c;) {
        const char *e = strchr(c, '/');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        if (n == 2 && c[0] == '.' && c[1] == '.') {
            if (--depth < 0)
                return false;
        } else if (n > 0 && !(n == 1 && c[0] == '.')) {
            depth++;
        }
        c += n;
        if (*c == '/')
            c++;
    }
    return true;
}

/* `path` made absolute against the working directory and normalised
 * lexically ("." and ".." resolved, no trailing '/'); NULL when out of
 * memory or the working directory is unknown. */
static char *absolute_normal(s2_arena *a, const char *path)
{
    char cwd[4096];
    if (path[0] != '/' && !getcwd(cwd, sizeof cwd))
        return NULL;
    const char *pre = path[0] == '/' ? "" : cwd;
    size_t total = strlen(pre) + 1 + strlen(path) + 1;
    char *joined = s2_arena_alloc(a, total), *out = s2_arena_alloc(a, total + 1);
    if (!joined || !out)
        return NULL;
    snprintf(joined, total, "%s/%s", pre, path);
    size_t o = 0;
    for (const char *c = joined; *c;) {
        while (*c == '/')
            c++;
        const char *e = strchr(c, '/');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        if (n == 2 && c[0] == '.' && c[1] == '.') {
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--; /* the '/' before the dropped component; ".." of "/" is "/" */
        } else if (n > 0 && !(n == 1 && c[0] == '.')) {
            out[o++] = '/';
            memcpy(out + o, c, n);
            o += n;
        }
        c += n;
    }
    if (o == 0)
        out[o++] = '/';
    out[o] = 0;
    return out;
}

/* True when `full` lies in one of P's allowed directories. */
static s2_status in_allowed_dir(parser *P, const char *full, bool *ok)
{
    *ok = false;
    if (!P->allow_mask_dirs || !P->allow_mask_dirs[0])
        return S2_OK;
    const char *f = absolute_normal(&P->tmp, full);
    if (!f)
        return s2_pp_nomem(P);
    for (const char *const *d = P->allow_mask_dirs; *d; d++) {
        if (!(*d)[0])
            continue;
        const char *dn = absolute_normal(&P->tmp, *d);
        if (!dn)
            return s2_pp_nomem(P);
        size_t n = strlen(dn);
        if (n == 1 || (strncmp(f, dn, n) == 0 && f[n] == '/')) {
            *ok = true;
            return S2_OK;
        }
    }
    return S2_OK;
}

/* The path to open for mask path `path` (as written), or an error at the
 * mask reference when it leaves the pattern file's directory unallowed. */
static s2_status mask_path(parser *P, const node *mask_node, const char *key, const char *path, const char *shown,
                           char **out)
{
    char *full;
    bool absolute = path[0] == '/';
    if (absolute) {
        full = s2_arena_strdup(&P->tmp, path);
    } else {
        char *dir = dir_of(&P->tmp, P->path);
        size_t dl = dir ? strlen(dir) : 0, pl = strlen(path);
        full = dir ? s2_arena_alloc(&P->tmp, dl + pl + 1) : NULL;
        if (full) {
            memcpy(full, dir, dl);
            memcpy(full + dl, path, pl + 1);
        }
    }
    if (!full)
        return s2_pp_nomem(P);
    *out = full;
    if (!absolute && stays_inside(path))
        return S2_OK;
    bool ok;
    s2_status st = in_allowed_dir(P, full, &ok);
    if (st != S2_OK || ok)
        return st;
    return perr(P, mask_node, "%s: mask file '%s': %s (a mask path must stay in the pattern file's directory "
                "unless its directory is allowed)", key, shown, absolute ? "an absolute path" : "outside the pattern file's directory");
}

/* Load mask `mask_node` (+ optional case) into p->masks; *index is its slot.
 * Every error names the mask reference first and the mask file second. */
s2_status s2_pp_load_mask(parser *P, s2_pattern *p, const node *mask_node, const node *case_node,
                           const char *pfx, int *index)
{
    char key[192];
    const char *path, *case_name = NULL;
    s2_status st = s2_pp_get_string(P, mask_node, s2_pp_keyname(key, sizeof key, pfx, "mask"), &path);
    if (st == S2_OK && case_node)
        st = s2_pp_get_string(P, case_node, s2_pp_keyname(key, sizeof key, pfx, "mask_case"), &case_name);
    if (st != S2_OK)
        return st;
    s2_pp_keyname(key, sizeof key, pfx, "mask");
    if (p->num_masks >= S2_PATTERN_MAX_MASKS)
        return perr(P, mask_node, "%s: more than %d masks in one pattern", key, S2_PATTERN_MAX_MASKS);
    char shown[256];
    s2_pattern_escape(shown, sizeof shown, path, strlen(path), 200);
    char *full = NULL;
    if ((st = mask_path(P, mask_node, key, path, shown, &full)) != S2_OK)
        return st;

    /* each reference reads its file, and counts against the file's budget */
    int64_t left = S2_PATTERN_MAX_MASK_BYTES - P->mask_bytes;
    size_t max = (size_t)(left < (int64_t)S2_PATTERN_MAX_FILE ? left : (int64_t)S2_PATTERN_MAX_FILE);
    char *text = NULL, why[256];
    size_t len = 0;
    st = s2_pattern_read_file_max(full, max, &text, &len, why, sizeof why);
    if (st == S2_ERR_IO && len > max && len <= S2_PATTERN_MAX_FILE)
        return perr(P, mask_node, "%s: mask file '%s': its %zu bytes would take the mask files read for this pattern "
                    "file past %lld bytes", key, shown, len, (long long)S2_PATTERN_MAX_MASK_BYTES);
    if (st == S2_ERR_IO && len > S2_PATTERN_MAX_FILE)
        snprintf(why, sizeof why, "file too large (more than %u bytes)", S2_PATTERN_MAX_FILE);
    if (st == S2_ERR_NOMEM)
        return s2_pp_nomem(P);
    if (st != S2_OK)
        return s2_fail(P->ctx, st, "%s:%d:%d: %s: mask file '%s': %s", P->file, mask_node->line, mask_node->col, key,
                       shown, why);
    P->mask_bytes += (int64_t)len;

    s2_block_mask m;
    s2_mask_error err;
    st = s2_mask_parse_text(text, len, case_name, &m, &err);
    free(text);
    if (st == S2_ERR_NOT_FOUND) {
        char esc[128];
        s2_pattern_escape(esc, sizeof esc, case_name, strlen(case_name), S2_ESCAPE_SHORT);
        return perr(P, case_node, "%smask_case: no case named '%s' in mask file '%s'", pfx, esc, shown);
    }
    if (st == S2_ERR_NOMEM)
        return s2_pp_nomem(P);
    if (st != S2_OK)
        return perr(P, mask_node, "%s: mask file '%s': line %d, col %d: %s", key, shown, err.line, err.col, err.msg);

    /* the shape must fit the pattern: its heads, and every block up to max_seq_len */
    const char *why_not = NULL;
    char need[160];
    int64_t most = S2_MAX_SEQ_LEN / p->block_size;
    if (m.heads != 1 && m.heads != p->heads) {
        snprintf(need, sizeof need, "expected H = 1 or %d (heads)", p->heads);
        why_not = "heads";
    } else if (m.rows > most || m.cols > most) {
        snprintf(need, sizeof need, "more than the %lld blocks of %d tokens in the longest sequence (%lld)",
                 (long long)most, p->block_size, (long long)S2_MAX_SEQ_LEN);
        why_not = "blocks";
    } else if (p->max_seq_len > 0 && (m.rows < s2_cdiv(p->max_seq_len, p->block_size) ||
                                      m.cols < s2_cdiv(p->max_seq_len, p->block_size))) {
        int64_t b = s2_cdiv(p->max_seq_len, p->block_size);
        snprintf(need, sizeof need, "max_seq_len %lld needs %lld x %lld blocks of %d tokens", (long long)p->max_seq_len,
                 (long long)b, (long long)b, p->block_size);
        why_not = "blocks";
    }
    if (why_not) {
        char esc[128];
        s2_pattern_escape(esc, sizeof esc, m.name, strlen(m.name), S2_ESCAPE_SHORT);
        st = perr(P, mask_node, "%s: mask file '%s': case '%s' has shape %d %lld %lld, %s", key, shown, esc,
                  m.heads, (long long)m.rows, (long long)m.cols, need);
        s2_block_mask_free(&m);
        return st;
    }
    /* copy into the set arena so the pattern owns it, with where it was referenced */
    s2_block_mask *masks = s2_arena_array(&P->set->arena, (size_t)p->num_masks + 1, sizeof *masks);
    const char **where = s2_arena_array(&P->set->arena, (size_t)p->num_masks + 1, sizeof *where);
    size_t nbits = (size_t)(m.heads * m.rows * m.cols);
    uint8_t *bits = s2_arena_alloc(&P->set->arena, nbits);
    char *name = s2_arena_strdup(&P->set->arena, m.name), *file = s2_arena_strdup(&P->set->arena, full);
    char loc[sizeof P->file + 256];
    snprintf(loc, sizeof loc, "%s:%d:%d: %s", P->file, mask_node->line, mask_node->col, key);
    char *here = s2_arena_strdup(&P->set->arena, loc);
    if (!masks || !where || !bits || !name || !file || !here) {
        s2_block_mask_free(&m);
        return s2_pp_nomem(P);
    }
    if (p->num_masks) {
        memcpy(masks, p->masks, (size_t)p->num_masks * sizeof *masks);
        memcpy(where, p->mask_where, (size_t)p->num_masks * sizeof *where);
    }
    where[p->num_masks] = here;
    p->mask_where = where;
    memcpy(bits, m.bits, nbits);
    masks[p->num_masks] = (s2_block_mask){.name = name, .heads = m.heads, .rows = m.rows, .cols = m.cols, .bits = bits,
                                         .file = file};
    s2_block_mask_free(&m);
    p->masks = masks;
    *index = p->num_masks++;
    return S2_OK;
}

void s2_pp_set_mask_rule(s2_pattern *p, int q, int mask)
{
    p->rules[q].dense = false;
    p->rules[q].mask = mask;
    p->rules[q].mask_head = p->masks[mask].heads == 1 ? 0 : q;
}

s2_status s2_pp_parse_override(parser *P, s2_pattern *p, const node *map, const char *pfx, head_state *hs)
{
    char key[192];
    field f[] = {F("heads"), F("local_blocks"), F("vert_stride"), F("head_sliding_offset"), F("dense"),
                 F("mask"), F("mask_case"), F(NULL)};
    char what[160];
    snprintf(what, sizeof what, "%.*s", (int)strlen(pfx) - 1, pfx); /* without the '.' */
    s2_status st = s2_pp_read_map(P, map, what, f);
    if (st != S2_OK)
        return st;
    const node *hv = s2_pp_fval(f, "heads"), *lv = s2_pp_fval(f, "local_blocks"), *sv = s2_pp_fval(f, "vert_stride"),
               *ov = s2_pp_fval(f, "head_sliding_offset"), *dv = s2_pp_fval(f, "dense"), *mv = s2_pp_fval(f, "mask"),
               *cv = s2_pp_fval(f, "mask_case");
    if (!hv)
        return perr(P, map, "%sheads: required key missing", pfx);
    if (!lv && !sv && !ov && !dv && !mv)
        return perr(P, map, "%s: expected at least one of local_blocks, vert_stride, head_sliding_offset, dense, mask",
                    what);
    if (cv && !mv)
        return perr(P, cv, "%smask_case: needs mask", pfx);
    uint8_t *sel;
    if ((st = s2_pp_get_heads(P, hv, s2_pp_keyname(key, sizeof key, pfx, "heads"), p->heads, &P->tmp, &sel)) != S2_OK)
        return st;
    int left = 0, right = 0, stride = 0, offset = 0, mask = -1;
    bool dense = false;
    if (lv && (st = s2_pp_get_local(P, lv, s2_pp_keyname(key, sizeof key, pfx, "local_blocks"), p->causal, &left, &right)) != S2_OK)
        return st;
    if (sv && (st = s2_pp_get_stride(P, sv, s2_pp_keyname(key, sizeof key, pfx, "vert_stride"), &stride)) != S2_OK)
        return st;
    if (ov && (st = s2_pp_get_int32(P, ov, s2_pp_keyname(key, sizeof key, pfx, "head_sliding_offset"), 0, S2_PATTERN_MAX_COUNT, &offset)) != S2_OK)
        return st;
    if (dv && (st = s2_pp_get_bool(P, dv, s2_pp_keyname(key, sizeof key, pfx, "dense"), &dense)) != S2_OK)
        return st;
    if (dv && mv)
        return perr(P, mv, "%smask: cannot be combined with dense in one override", pfx);
    if (mv && (st = s2_pp_load_mask(P, p, mv, cv, pfx, &mask)) != S2_OK)
        return st;

    int group = p->heads / p->kv_heads;
    for (int q = 0; q < p->heads; q++) {
        if (!sel[q])
            continue;
        s2_head_rule *r = &p->rules[q];
        if (lv || sv || ov)
            r->mask = -1, r->mask_head = 0; /* back to a local-stride rule */
        if (lv)
            r->local_left = left, r->local_right = right, hs->has_local[q] = 1;
        if (sv)
            r->vert_stride = stride, hs->has_stride[q] = 1;
        if (ov)
            r->shift = (int64_t)(p->homo_head ? 0 : q / group) * p->head_sliding_step + offset;
        if (dv)
            r->dense = dense;
        if (dv && dense)
            r->mask = -1, r->mask_head = 0;
        if (mv)
            s2_pp_set_mask_rule(p, q, mask);
        if (!r->dense && r->mask < 0 && (!hs->has_local[q] || !hs->has_stride[q]))
            return perr(P, map, "%s: head %d is left without a rule (the pattern has no local_stride: give "
                        "local_blocks and vert_stride)", what, q);
    }
    return S2_OK;
}

s2_status s2_pp_parse_range(parser *P, s2_pattern *p, const node *map, const char *pfx, s2_range_rule *rr)
{
    char key[192], what[160], buf[256];
    snprintf(what, sizeof what, "%.*s", (int)strlen(pfx) - 1, pfx);
    field f[] = {F("heads"), F("keys"), F("distance"), F("sink"), F("keep"), F("vert_stride"), F(NULL)};
    s2_status st = s2_pp_read_map(P, map, what, f);
    if (st != S2_OK)
        return st;
    const node *hv = s2_pp_fval(f, "heads"), *kv = s2_pp_fval(f, "keys"), *dv = s2_pp_fval(f, "distance"), *sink = s2_pp_fval(f, "sink"),
               *keep = s2_pp_fval(f, "keep"), *sv = s2_pp_fval(f, "vert_stride");
    rr->line = map->line;
    rr->col = map->col;
    rr->key_lo = rr->dist_lo = 0;
    rr->key_hi = rr->dist_hi = INT64_MAX;
    int actions = !!sink + !!keep + !!sv;
    if (actions != 1)
        return perr(P, map, "%s: expected exactly one of sink, keep, vert_stride, got %d", what, actions);
    if (hv) {
        if ((st = s2_pp_get_heads(P, hv, s2_pp_keyname(key, sizeof key, pfx, "heads"), p->heads, &P->set->arena, &rr->heads)) != S2_OK)
            return st;
    } else {
        rr->heads = s2_arena_alloc(&P->set->arena, (size_t)p->heads);
        if (!rr->heads)
            return s2_pp_nomem(P);
        memset(rr->heads, 1, (size_t)p->heads);
    }
    if (sink) {
        if (kv || dv)
            return perr(P, kv ? kv : dv, "%s%s: sink is a shorthand for keys [0, N); give no keys or distance",
                        pfx, kv ? "keys" : "distance");
        int64_t n;
        if ((st = s2_pp_get_int(P, sink, s2_pp_keyname(key, sizeof key, pfx, "sink"), 1, S2_MAX_SEQ_LEN, &n)) != S2_OK)
            return st;
        if (n % p->block_size)
            return perr(P, sink, "%s: %lld is not a multiple of block_size %d", key, (long long)n, p->block_size);
        rr->action = S2_RANGE_SINK;
        rr->key_hi = n;
        return S2_OK;
    }
    if (kv && (st = s2_pp_get_span(P, kv, s2_pp_keyname(key, sizeof key, pfx, "keys"), p->block_size, &rr->key_lo, &rr->key_hi)) != S2_OK)
        return st;
    if (dv && (st = s2_pp_get_span(P, dv, s2_pp_keyname(key, sizeof key, pfx, "distance"), p->block_size, &rr->dist_lo, &rr->dist_hi)) != S2_OK)
        return st;
    if (keep) {
        if (s2_pp_scalar_is(keep, "all"))
            rr->action = S2_RANGE_DENSE;
        else if (s2_pp_scalar_is(keep, "none"))
            rr->action = S2_RANGE_DROP;
        else
            return perr(P, keep, "%skeep: expected all or none, got %s", pfx, s2_pp_shown(keep, buf, sizeof buf));
        return S2_OK;
    }
    rr->action = S2_RANGE_STRIDE;
    return s2_pp_get_int32(P, sv, s2_pp_keyname(key, sizeof key, pfx, "vert_stride"), 1, S2_PATTERN_MAX_COUNT, &rr->stride);
}

