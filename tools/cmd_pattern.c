/* s2c check, layout and kv-memory: pattern files and what they expand to. */
#include "cli.h"
#include "s2c/aot.h"
#include "s2c/attention.h"
#include "s2c/codegen.h"
#include "s2c/kv_evict.h"
#include "s2c/layout.h"
#include "s2c/pattern.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Is the pattern KV-cache efficient over the longest sequence it allows
 * (capped so that the check stays quick)?  1 yes, 0 no, -1 not checked; the
 * reason in ctx. */
static int kv_efficient(s2_ctx *ctx, const s2_pattern *p, int64_t *len)
{
    *len = p->max_seq_len ? p->max_seq_len : 32768;
    if (*len > 131072)
        *len = 131072;
    s2_layout *l = NULL;
    bool ok = false;
    int r = -1;
    if (s2_layout_new(ctx, p, *len, *len, &l) == S2_OK && s2_layout_check_kv_efficient(ctx, l, &ok) == S2_OK)
        r = ok ? 1 : 0;
    s2_layout_free(l);
    return r;
}

static int check_json(s2_ctx *ctx, const opts *o, const char **files, int n)
{
    int status = EXIT_OK;
    printf("{\"schema_version\": 1, \"command\": \"check\", \"files\": [");
    for (int f = 0; f < n; f++) {
        s2_pattern_set *set = NULL;
        printf("%s{\"path\": ", f ? ", " : "");
        json_str(stdout, files[f]);
        if (load_pattern_file(ctx, o, files[f], &set) != S2_OK) {
            char line[4096]; /* the line printed on stderr */
            diag_format(line, sizeof line, "error", s2_ctx_message(ctx));
            printf(", \"ok\": false, \"error\": ");
            json_str(stdout, line);
            printf(", \"patterns\": []}");
            status = input_error(ctx);
            continue;
        }
        printf(", \"ok\": true, \"error\": null, \"patterns\": [");
        for (int i = 0; i < s2_pattern_set_count(set); i++) {
            const s2_pattern *p = s2_pattern_set_get(set, i);
            int64_t len;
            int eff = kv_efficient(ctx, p, &len);
            printf("%s{", i ? ", " : "");
            json_pattern_fields(stdout, p);
            printf(", \"line\": %d, \"kv_cache_efficient\": %s, \"kv_checked_to\": %lld, \"kv_note\": ", p->line,
                   eff == 1 ? "true" : eff == 0 ? "false" : "null", (long long)len);
            json_str(stdout, eff == 1 ? NULL : s2_ctx_message(ctx));
            printf("}");
        }
        printf("]}");
        s2_pattern_set_free(set);
    }
    printf("]}\n");
    return status;
}

int cmd_check(s2_ctx *ctx, int argc, char **argv)
{
    opts o = {.format = "text"};
    const char *files[256];
    int n = 0;
    int rc = parse_opts(argc, argv, &o, files, 256, &n);
    if (rc)
        return rc;
    if (n == 0)
        return usage_error("%s", "check: missing PATTERN file");
    bool json = strcmp(o.format, "json") == 0;
    if (!json && strcmp(o.format, "text") != 0)
        return usage_error("check: --format must be text or json, got '%s'", o.format);
    if (json)
        return check_json(ctx, &o, files, n);
    int status = EXIT_OK;
    for (int f = 0; f < n; f++) {
        s2_pattern_set *set = NULL;
        if (load_pattern_file(ctx, &o, files[f], &set) != S2_OK) {
            input_error(ctx);
            status = EXIT_INPUT;
            continue;
        }
        for (int i = 0; i < s2_pattern_set_count(set) && !o.quiet; i++) {
            const s2_pattern *p = s2_pattern_set_get(set, i);
            char *text = NULL;
            if (s2_pattern_describe(p, &text) != S2_OK) {
                status = input_fail("out of memory");
                continue;
            }
            fputs(text, stdout);
            free(text);
            int64_t len;
            int eff = kv_efficient(ctx, p, &len);
            if (eff == 1)
                printf("  kv-cache efficient: yes (checked to %" PRId64 " tokens)\n", len);
            else if (eff == 0)
                printf("  kv-cache efficient: no: %s\n", s2_ctx_message(ctx));
            else
                printf("  kv-cache efficiency: not checked: %s\n", s2_ctx_message(ctx));
        }
        if (!o.quiet)
            printf("%s: ok (%d pattern%s)\n", files[f], s2_pattern_set_count(set),
                   s2_pattern_set_count(set) == 1 ? "" : "s");
        s2_pattern_set_free(set);
    }
    return status;
}

/* ---- layout --------------------------------------------------------------- */

/* The stats as one JSON document: every field of s2_layout_stats under its own name. */
static void layout_json(const s2_pattern *p, const opts *o, const s2_layout_stats *s)
{
    printf("{\"schema_version\": 1, \"command\": \"layout\", \"pattern\": ");
    json_str(stdout, p->name);
    printf(", \"q_len\": %lld, \"kv_len\": %lld, \"heads\": %d, \"head_dim\": %d, \"block_m\": %lld, "
           "\"block_n\": %lld, \"dtype\": ", (long long)s->q_len, (long long)s->kv_len, s->heads, s->head_dim,
           (long long)o->block_m, (long long)o->block_n);
    json_str(stdout, o->dtype);
    const struct { const char *name; double v; } f[] = {
        {"kept_pairs", s->kept_pairs}, {"dense_pairs", s->dense_pairs}, {"kept_fraction", s->kept_fraction},
        {"fwd_flops", s->fwd_flops}, {"fwd_bwd_flops", s->fwd_bwd_flops}, {"tile_flops", s->tile_flops},
        {"bytes_read", s->bytes_read}, {"entries", (double)s->entries}, {"head_pairs_min", s->head_pairs_min},
        {"head_pairs_max", s->head_pairs_max}, {"head_pairs_mean", s->head_pairs_mean},
        {"imbalance", s->imbalance}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        printf(", \"%s\": ", f[i].name);
        json_num(stdout, f[i].v);
    }
    printf("}\n");
}

int cmd_layout(s2_ctx *ctx, int argc, char **argv)
{
    opts o = {.format = "stats", .block_m = 128, .block_n = 64, .head_dim = 128, .dtype = "bf16"};
    int rc = parse_one_file(argc, argv, &o, "PATTERN");
    if (rc)
        return rc;
    if (!o.seq_len)
        return usage_error("%s", "layout: --seq-len (one length) is required");
    int fmt = strcmp(o.format, "mask") == 0 ? 0 : strcmp(o.format, "schedule") == 0 ? 1
            : strcmp(o.format, "stats") == 0 ? 2 : strcmp(o.format, "json") == 0 ? 3 : -1;
    if (fmt < 0)
        return usage_error("layout: --format must be mask, schedule, stats or json, got '%s'", o.format);
    s2_dtype dt;
    if ((rc = parse_dtype(o.dtype, &dt)) != 0)
        return rc;
    if ((o.block_m & (o.block_m - 1)) || (o.block_n & (o.block_n - 1)))
        return usage_error("%s", "layout: --block-m and --block-n must be powers of two");
    if (o.num_names > 1)
        return usage_error("%s", "layout: --name may be given once");

    s2_pattern_set *set = NULL;
    const s2_pattern *p = NULL;
    int np = 0;
    rc = load_patterns(ctx, &o, 1, &set, &p, &np);
    if (rc) {
        s2_pattern_set_free(set);
        return rc;
    }
    int64_t kv_len = o.kv_len ? o.kv_len : o.seq_len;
    s2_layout *l = NULL;
    char *text = NULL;
    s2_tile_spec spec = {(int)o.block_m, (int)o.block_n};
    size_t max_bytes = o.max_bytes ? (size_t)o.max_bytes : S2_FORMAT_MAX_BYTES;
    s2_status st = s2_layout_new(ctx, p, o.seq_len, kv_len, &l);
    if (st == S2_OK && fmt < 2) {
        /* refuse before building anything when the text would be over the limit */
        uint64_t size = 0;
        if (fmt == 0)
            size = s2_layout_mask_text_size(l);
        else
            st = s2_layout_schedule_text_estimate(ctx, l, spec, false, &size);
        if (st == S2_OK && size > max_bytes) {
            s2_layout_free(l);
            s2_pattern_set_free(set);
            return input_fail("layout: the %s would be about %.1f MiB, over the %.1f MiB cap; raise it with --max-bytes",
                              fmt == 0 ? "mask" : "schedule", (double)size / 1048576.0, (double)max_bytes / 1048576.0);
        }
    }
    if (st == S2_OK) {
        if (fmt == 0) {
            st = s2_layout_format_mask(ctx, l, max_bytes, &text);
        } else if (fmt == 1) {
            s2_schedule *sched = NULL;
            st = s2_schedule_build(ctx, l, spec, false, &sched);
            if (st == S2_OK)
                st = s2_schedule_format(ctx, sched, max_bytes, &text);
            s2_schedule_free(sched);
        } else {
            s2_layout_stats stats;
            st = s2_layout_stats_compute(ctx, l, spec, (int)o.head_dim, dt, &stats);
            if (st == S2_OK && fmt == 3)
                layout_json(p, &o, &stats);
            else if (st == S2_OK)
                st = s2_layout_stats_format(ctx, &stats, &text);
        }
    }
    if (st == S2_OK && text)
        fputs(text, stdout);
    free(text);
    s2_layout_free(l);
    s2_pattern_set_free(set);
    return st == S2_OK ? EXIT_OK : input_error(ctx);
}


/* ---- kv-memory ------------------------------------------------------------- */

enum { MAX_LENS = 64 };

static int parse_len_list(const char *text, int64_t *lens, int *n)
{
    char buf[1024];
    if (!text || strlen(text) >= sizeof buf)
        return usage_error("%s", "kv-memory: --seq-len N[,N...] is required");
    strcpy(buf, text);
    *n = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_LENS)
            return usage_error("%s", "kv-memory: too many --seq-len values");
        if (parse_int("--seq-len", t, 1, S2_MAX_SEQ_LEN, &lens[*n]))
            return EXIT_USAGE;
        (*n)++;
    }
    return *n ? 0 : usage_error("%s", "kv-memory: --seq-len N[,N...] is required");
}

static double mib(int64_t pages, int64_t page_bytes) { return (double)pages * (double)page_bytes / 1048576.0; }

int cmd_kv_memory(s2_ctx *ctx, int argc, char **argv)
{
    opts o = {.page_size = 64, .head_dim = 128, .dtype = "bf16", .format = "text"};
    int rc = parse_one_file(argc, argv, &o, "PATTERN");
    if (rc)
        return rc;
    int64_t lens[MAX_LENS];
    int nlens = 0;
    if ((rc = parse_len_list(o.seq_len_text, lens, &nlens)) != 0)
        return rc;
    s2_dtype dt;
    if ((rc = parse_dtype(o.dtype, &dt)) != 0)
        return rc;
    if (o.page_size % 16 != 0)
        return usage_error("%s", "kv-memory: --page-size must be a multiple of 16");
    if (o.num_names > 1)
        return usage_error("%s", "kv-memory: --name may be given once");
    bool json = strcmp(o.format, "json") == 0;
    if (!json && strcmp(o.format, "text") != 0)
        return usage_error("kv-memory: --format must be text or json, got '%s'", o.format);
    for (int i = 0; i < nlens; i++)
        if (o.prefill > lens[i])
            return usage_error("kv-memory: --prefill %lld exceeds --seq-len %lld", (long long)o.prefill,
                               (long long)lens[i]);
    s2_pattern_set *set = NULL;
    const s2_pattern *p = NULL;
    int np = 0;
    if ((rc = load_patterns(ctx, &o, 1, &set, &p, &np)) != 0) {
        s2_pattern_set_free(set);
        return rc;
    }
    /* K and V of one kv head: page_size rows of head_dim 2-byte elements each. */
    int64_t page_bytes = 2 * o.page_size * o.head_dim * 2;
    int status = EXIT_OK;
    char note[512] = "";
    bool efficient = true;
    s2_kv_memory ms[MAX_LENS];
    for (int i = 0; i < nlens && status == EXIT_OK; i++) {
        s2_kv_evictor *ev = NULL;
        if (s2_kv_evictor_new(ctx, p, (int)o.page_size, lens[i], &ev) != S2_OK ||
                   s2_kv_evictor_memory(ctx, ev, o.prefill, lens[i], &ms[i]) != S2_OK) {
            status = input_error(ctx);
        } else if (!s2_kv_evictor_efficient(ev)) {
            if (efficient)
                snprintf(note, sizeof note, "%s", s2_kv_evictor_note(ev));
            efficient = false;
        }
        s2_kv_evictor_free(ev);
    }
    if (status == EXIT_OK && json) {
        printf("{\"schema_version\": 1, \"command\": \"kv-memory\", \"pattern\": ");
        json_str(stdout, p->name);
        printf(", \"heads\": %d, \"kv_heads\": %d, \"block_size\": %d, \"page_size\": %lld, \"head_dim\": %lld, "
               "\"dtype\": ", p->heads, p->kv_heads, p->block_size, (long long)o.page_size, (long long)o.head_dim);
        json_str(stdout, o.dtype);
        printf(", \"page_bytes\": %lld, \"prefill\": %lld, \"rows\": [", (long long)page_bytes, (long long)o.prefill);
        for (int i = 0; i < nlens; i++) {
            const s2_kv_memory *m = &ms[i];
            printf("%s{\"seq_len\": %lld, \"dense_pages\": %lld, \"held_pages\": %lld, \"held_fraction\": ",
                   i ? ", " : "", (long long)lens[i], (long long)m->dense_pages, (long long)m->held_pages);
            json_num(stdout, m->held_fraction);
            printf(", \"peak_pages\": %lld, \"peak_fraction\": ", (long long)m->peak_pages);
            json_num(stdout, m->peak_fraction);
            printf(", \"held_min_head\": %lld, \"held_max_head\": %lld}", (long long)m->held_min_head,
                   (long long)m->held_max_head);
        }
        printf("], \"kv_cache_efficient\": %s, \"note\": ", efficient ? "true" : "false");
        json_str(stdout, efficient ? NULL : note);
        printf("}\n");
    } else if (status == EXIT_OK) {
        printf("%s: %d heads, %d kv heads, block %d; page %lld tokens, head_dim %lld, %s: %lld bytes of K+V per page\n",
               p->name, p->heads, p->kv_heads, p->block_size, (long long)o.page_size, (long long)o.head_dim, o.dtype,
               (long long)page_bytes);
        printf("prefill %lld tokens (all held), then decode token by token; batch 1, pages summed over kv heads\n",
               (long long)o.prefill);
        printf("%9s %11s %11s %7s %11s %7s %10s %10s %10s %14s\n", "seq_len", "dense_pg", "held_pg", "held%",
               "peak_pg", "peak%", "dense_MiB", "held_MiB", "peak_MiB", "head_min..max");
        for (int i = 0; i < nlens; i++) {
            const s2_kv_memory *m = &ms[i];
            printf("%9lld %11lld %11lld %6.2f%% %11lld %6.2f%% %10.1f %10.1f %10.1f %6lld..%-6lld\n",
                   (long long)lens[i], (long long)m->dense_pages, (long long)m->held_pages, 100.0 * m->held_fraction,
                   (long long)m->peak_pages, 100.0 * m->peak_fraction, mib(m->dense_pages, page_bytes),
                   mib(m->held_pages, page_bytes), mib(m->peak_pages, page_bytes), (long long)m->held_min_head,
                   (long long)m->held_max_head);
        }
        printf("kv-cache efficient: %s%s\n", efficient ? "yes" : "no (only pages after their last read are freed): ",
               efficient ? "" : note);
    }
    s2_pattern_set_free(set);
    return status;
}
