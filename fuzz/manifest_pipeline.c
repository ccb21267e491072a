/* The manifest pipeline of manifest_pipeline.h.  Every step's result is
 * checked against what the steps before it said: a manifest the parser
 * accepts must be describable, must give a layout and schedules for a short
 * sequence, and must load on the fake driver or be refused with a message;
 * one it refuses must be refused by the runtime with the same message. */
#include "manifest_pipeline.h"

#include "kernel_abi.h"
#include "s2c/attn_runtime.h"
#include "s2c/layout.h"
#include "s2c/manifest.h"
#include "s2c/pattern.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

s2_device *s2f_open_fake_device(const char *fake_lib)
{
    if (!fake_lib || setenv("S2C_LIBCUDA", fake_lib, 1) != 0)
        return NULL;
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    if (s2_device_open(ctx, 0, &dev) != S2_OK)
        dev = NULL;
    s2_ctx_free(ctx);
    return dev;
}

static void put_le(uint8_t *p, int n, uint64_t v)
{
    for (int i = 0; i < n; i++, v >>= 8)
        p[i] = (uint8_t)v;
}

/* ELF header, the manifest's section, .strtab, .symtab (null symbol and
 * s2c_manifest), then four section headers: null, data, symtab, strtab. */
uint8_t *s2f_wrap_manifest(const char *text, size_t len, size_t *size)
{
    static const char strtab[] = "\0s2c_manifest";
    size_t data_off = 64, str_off = (data_off + len + 1 + 7) & ~(size_t)7;
    size_t sym_off = (str_off + sizeof strtab + 7) & ~(size_t)7;
    size_t sh_off = sym_off + 2 * 24;
    size_t n = sh_off + 4 * 64;
    uint8_t *img = calloc(1, n);
    if (!img)
        return NULL;
    memcpy(img, "\177ELF", 4);
    img[4] = 2;                 /* ELF64 */
    img[5] = 1;                 /* little-endian */
    img[6] = 1;
    put_le(img + 16, 2, 1);     /* ET_REL: st_value is the offset in the section */
    put_le(img + 18, 2, 190);   /* EM_CUDA */
    put_le(img + 20, 4, 1);
    put_le(img + 40, 8, sh_off);
    put_le(img + 52, 2, 64);
    put_le(img + 58, 2, 64);
    put_le(img + 60, 2, 4);
    memcpy(img + data_off, text, len);
    memcpy(img + str_off, strtab, sizeof strtab);
    uint8_t *sym = img + sym_off + 24;
    put_le(sym, 4, 1);          /* name: "s2c_manifest" */
    sym[4] = 0x11;              /* STB_GLOBAL, STT_OBJECT */
    put_le(sym + 6, 2, 1);      /* section 1 */
    put_le(sym + 16, 8, len + 1);
    uint8_t *sh = img + sh_off;
    put_le(sh + 64 + 4, 4, 1);  /* PROGBITS */
    put_le(sh + 64 + 24, 8, data_off);
    put_le(sh + 64 + 32, 8, len + 1);
    put_le(sh + 128 + 4, 4, 2); /* SYMTAB, linked to the string table */
    put_le(sh + 128 + 24, 8, sym_off);
    put_le(sh + 128 + 32, 8, 2 * 24);
    put_le(sh + 128 + 40, 4, 3);
    put_le(sh + 128 + 56, 8, 24);
    put_le(sh + 192 + 4, 4, 3); /* STRTAB */
    put_le(sh + 192 + 24, 8, str_off);
    put_le(sh + 192 + 32, 8, sizeof strtab);
    *size = n;
    return img;
}

static int fail(char *why, size_t why_size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_size, fmt, ap);
    va_end(ap);
    return 1;
}

/* A message a user may be shown: one line of printable ASCII, not empty. */
static bool clean_message(const char *msg)
{
    if (!msg[0])
        return false;
    for (const unsigned char *c = (const unsigned char *)msg; *c; c++)
        if (*c < 0x20 || *c > 0x7e)
            return false;
    return true;
}

/* A short sequence every pattern the parser accepts must lay out: four
 * blocks, within max_seq_len and every explicit mask a rule uses. */
static int64_t short_kv_len(const s2_pattern *p)
{
    int64_t kv = 4 * (int64_t)p->block_size, lim = s2_layout_max_kv_len(p);
    return lim < kv ? lim : kv;
}

/* Layouts (prefill and one decode query) and the forward and transposed
 * schedules and statistics of one 64 x 64 tile. */
static int check_layouts(s2_ctx *ctx, const s2_pattern *p, char *why, size_t why_size)
{
    int64_t kv = short_kv_len(p);
    int64_t qs[2] = {kv, 1};
    for (int i = 0; i < 2; i++) {
        s2_layout *l = NULL;
        s2_status st = s2_layout_new(ctx, p, qs[i], kv, &l);
        if (st != S2_OK)
            return fail(why, why_size, "pattern '%s' parsed but has no layout for q_len %lld, kv_len %lld: %s",
                        p->name, (long long)qs[i], (long long)kv, s2_ctx_message(ctx));
        s2_tile_spec spec = {64, 64};
        for (int t = 0; t < 2 && st == S2_OK; t++) {
            s2_schedule *s = NULL;
            st = s2_schedule_build(ctx, l, spec, t == 1, &s);
            if (st == S2_OK && s->heads != p->heads)
                st = S2_ERR_INTERNAL;
            s2_schedule_free(s);
        }
        s2_layout_stats stats;
        if (st == S2_OK)
            st = s2_layout_stats_compute(ctx, l, spec, 64, S2_DTYPE_BF16, &stats);
        if (st == S2_OK && !(stats.kept_fraction >= 0.0 && stats.kept_fraction <= 1.0))
            st = S2_ERR_INTERNAL;
        s2_layout_free(l);
        if (st != S2_OK)
            return fail(why, why_size, "pattern '%s': schedule or stats for kv_len %lld failed (%s): %s", p->name,
                        (long long)kv, s2_status_name(st), s2_ctx_message(ctx));
    }
    return 0;
}

static int check_accepted(s2_ctx *ctx, const s2_manifest *m, char *why, size_t why_size)
{
    for (int i = 0; i < s2_manifest_num_patterns(m); i++) {
        const s2_pattern *p = s2_manifest_pattern_at(m, i);
        char *text = NULL;
        if (!p || !p->rules || p->heads < 1 || s2_pattern_describe(p, &text) != S2_OK || !text || !text[0]) {
            free(text);
            return fail(why, why_size, "pattern %d parsed but cannot be described", i);
        }
        free(text);
        if (check_layouts(ctx, p, why, why_size))
            return 1;
    }
    for (int i = 0; i < s2_manifest_num_kernels(m); i++) {
        const s2_manifest_kernel *k = s2_manifest_kernel_at(m, i);
        if (!s2_manifest_find_pattern(m, k->pattern))
            return fail(why, why_size, "kernel %d parsed but names no pattern of the manifest", i);
        if (!s2_manifest_kernel_fn(k, s2_main_role(k->spec.kind)))
            return fail(why, why_size, "kernel %d parsed without its main kernel record", i);
    }
    return 0;
}

/* The runtime's load of the same text, wrapped in a cubin. */
static int check_load(s2_ctx *ctx, s2_device *dev, const char *text, size_t len, s2_status parsed,
                      const char *parse_msg, const s2_manifest *m, char *why, size_t why_size)
{
    size_t img_size = 0;
    uint8_t *img = s2f_wrap_manifest(text, len, &img_size);
    if (!img)
        return 0;
    s2_attn_module *mod = NULL;
    s2_ctx_clear(ctx);
    s2_status st = s2_attn_module_load(ctx, dev, img, img_size, &mod);
    const char *msg = s2_ctx_message(ctx);
    int rc = 0;
    if (parsed != S2_OK) {
        if (st != parsed || mod || strcmp(msg, parse_msg) != 0)
            rc = fail(why, why_size, "parse refused (%s: %s) but load gave %s: %s", s2_status_name(parsed), parse_msg,
                      s2_status_name(st), msg);
    } else if (st != S2_OK) {
        if (st != S2_ERR_PARSE || mod || !clean_message(msg) || strncmp(msg, "manifest", 8) != 0)
            rc = fail(why, why_size, "parse accepted but load refused with %s: '%s'", s2_status_name(st), msg);
    } else if (s2_attn_module_num_kernels(mod) != s2_manifest_num_kernels(m) || s2_attn_module_num_kernels(mod) < 1) {
        rc = fail(why, why_size, "load gave %d kernels, the manifest %d", s2_attn_module_num_kernels(mod),
                  s2_manifest_num_kernels(m));
    } else {
        for (int i = 0; i < s2_attn_module_num_kernels(mod) && !rc; i++) {
            s2_attn_kernel *k = s2_attn_module_kernel_at(mod, i);
            s2_attn_sched_stats ss;
            s2_attn_kernel_sched_stats(k, &ss);
            if (s2_attn_kernel_max_kv_len(k) < 1 || !s2_attn_kernel_pattern(k) || ss.cached != 0)
                rc = fail(why, why_size, "loaded kernel %d: max_kv_len %lld", i,
                          (long long)s2_attn_kernel_max_kv_len(k));
        }
    }
    s2_attn_module_free(mod);
    free(img);
    return rc;
}

int s2f_manifest_pipeline(s2_device *dev, const uint8_t *data, size_t size, int *accepted, char *why,
                          size_t why_size)
{
    if (accepted)
        *accepted = 0;
    /* an exact-size copy, so that ASan sees any read past the end */
    char *text = malloc(size ? size : 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    s2_ctx *ctx = s2_ctx_new();
    s2_manifest *m = NULL;
    s2_status st = s2_manifest_parse(ctx, text, size, &m);
    char parse_msg[1024];
    snprintf(parse_msg, sizeof parse_msg, "%s", s2_ctx_message(ctx));
    int rc = 0;
    if (st != S2_OK) {
        /* malformed, or well formed for a newer runtime */
        if ((st != S2_ERR_PARSE && st != S2_ERR_UNSUPPORTED) || m || !clean_message(parse_msg) ||
            strncmp(parse_msg, "manifest", 8) != 0)
            rc = fail(why, why_size, "parse refused with %s, manifest %p, message '%s'", s2_status_name(st),
                      (void *)m, parse_msg);
    } else {
        if (accepted)
            *accepted = 1;
        rc = check_accepted(ctx, m, why, why_size);
    }
    /* the cubin holds the text up to its first NUL, which is all the parser reads */
    size_t len = strnlen(text, size);
    if (!rc && dev)
        rc = check_load(ctx, dev, text, len, st, parse_msg, m, why, why_size);
    s2_manifest_free(m);
    s2_ctx_free(ctx);
    free(text);
    return rc;
}
