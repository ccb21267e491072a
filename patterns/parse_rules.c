/* The pattern-file parser: the rule sections of a pattern (local_stride,
 * mask, overrides, ranges). */
#include "parse_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        if ((st = s2_pp_get_int32(P, v, key, 1, MAX_COUNT, &p->head_sliding_step)) != S2_OK)
            return st;
        p->head_sliding_step_auto = false;
    }
    if ((v = s2_pp_fval(f, "head_sliding_offset"))) {
        snprintf(key, sizeof key, "%s.head_sliding_offset", what);
        if ((st = s2_pp_get_int32(P, v, key, 0, MAX_COUNT, &p->head_sliding_offset)) != S2_OK)
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

/* Load mask `mask_node` (+ optional case) into p->masks; *index is its slot. */
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
    if (p->num_masks >= MAX_MASKS)
        return perr(P, mask_node, "%smask: more than %d masks in one pattern", pfx, MAX_MASKS);
    char *full;
    if (path[0] == '/') {
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

    s2_block_mask m;
    char *text = NULL;
    size_t len = 0;
    char where[64];
    snprintf(where, sizeof where, "%d:%d", mask_node->line, mask_node->col);
    st = s2_pattern_read_file(P->ctx, full, &text, &len);
    if (st == S2_ERR_IO) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s", s2_ctx_message(P->ctx));
        return s2_fail(P->ctx, S2_ERR_IO, "%s:%s: %smask: %s", P->file, where, pfx, msg);
    }
    if (st != S2_OK)
        return st;
    st = s2_block_mask_parse(P->ctx, full, text, len, case_name, &m);
    free(text);
    if (st == S2_ERR_NOT_FOUND) {
        char esc[128];
        s2_pattern_escape(esc, sizeof esc, case_name, strlen(case_name), S2_ESCAPE_SHORT);
        return perr(P, case_node, "%smask_case: no case named '%s' in %s", pfx, esc, path);
    }
    if (st != S2_OK) {
        /* the mask file's own file:line:col, plus where it was referenced */
        char msg[1200];
        snprintf(msg, sizeof msg, "%s", s2_ctx_message(P->ctx));
        return s2_fail(P->ctx, st, "%s (mask of %s:%s)", msg, P->file, where);
    }
    if (m.heads != 1 && m.heads != p->heads) {
        int h = m.heads;
        s2_block_mask_free(&m);
        return perr(P, mask_node, "%smask: the mask has %d heads, expected 1 or %d (heads)", pfx, h, p->heads);
    }
    /* copy into the set arena so the pattern owns it */
    s2_block_mask *masks = s2_arena_array(&P->set->arena, (size_t)p->num_masks + 1, sizeof *masks);
    size_t nbits = (size_t)(m.heads * m.rows * m.cols);
    uint8_t *bits = s2_arena_alloc(&P->set->arena, nbits);
    char *name = s2_arena_strdup(&P->set->arena, m.name);
    if (!masks || !bits || !name) {
        s2_block_mask_free(&m);
        return s2_pp_nomem(P);
    }
    if (p->num_masks)
        memcpy(masks, p->masks, (size_t)p->num_masks * sizeof *masks);
    memcpy(bits, m.bits, nbits);
    masks[p->num_masks] = (s2_block_mask){.name = name, .heads = m.heads, .rows = m.rows, .cols = m.cols, .bits = bits};
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
    if (ov && (st = s2_pp_get_int32(P, ov, s2_pp_keyname(key, sizeof key, pfx, "head_sliding_offset"), 0, MAX_COUNT, &offset)) != S2_OK)
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
    return s2_pp_get_int32(P, sv, s2_pp_keyname(key, sizeof key, pfx, "vert_stride"), 1, MAX_COUNT, &rr->stride);
}

