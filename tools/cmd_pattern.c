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

int cmd_check(s2_ctx *ctx, int argc, char **argv)
{
    opts o = {0};
    const char *files[256];
    int n = 0;
    int rc = parse_opts(argc, argv, 2, &o, files, 256, &n);
    if (rc)
        return rc;
    if (n == 0)
        return usage_error("%s", "check: missing PATTERN file");
    int status = EXIT_OK;
    for (int f = 0; f < n; f++) {
        s2_pattern_set *set = NULL;
        if (load_pattern_file(ctx, &o, files[f], &set) != S2_OK) {
            input_error(ctx);
            status = EXIT_INPUT;
            continue;
        }
        for (int i = 0; i < s2_pattern_set_count(set); i++) {
            const s2_pattern *p = s2_pattern_set_get(set, i);
            char *text = NULL;
            if (s2_pattern_describe(p, &text) != S2_OK) {
                fprintf(stderr, "s2c: out of memory\n");
                status = EXIT_INPUT;
                continue;
            }
            fputs(text, stdout);
            free(text);
            /* KV-cache efficiency over the longest sequence the pattern allows
             * (capped so that the check stays quick). */
            int64_t len = p->max_seq_len ? p->max_seq_len : 32768;
            if (len > 131072)
                len = 131072;
            s2_layout *l = NULL;
            bool ok = false;
            if (s2_layout_new(ctx, p, len, len, &l) == S2_OK &&
                s2_layout_check_kv_efficient(ctx, l, &ok) == S2_OK) {
                if (ok)
                    printf("  kv-cache efficient: yes (checked to %" PRId64 " tokens)\n", len);
                else
                    printf("  kv-cache efficient: no: %s\n", s2_ctx_message(ctx));
            } else {
                printf("  kv-cache efficiency: not checked: %s\n", s2_ctx_message(ctx));
            }
            s2_layout_free(l);
        }
        printf("%s: ok (%d pattern%s)\n", files[f], s2_pattern_set_count(set),
               s2_pattern_set_count(set) == 1 ? "" : "s");
        s2_pattern_set_free(set);
    }
    return status;
}

/* ---- layout --------------------------------------------------------------- */

int cmd_layout(s2_ctx *ctx, int argc, char **argv)
{
    opts o = {.format = "stats", .block_m = 128, .block_n = 64, .head_dim = 128, .dtype = "bf16"};
    int rc = parse_one_file(argc, argv, &o, "layout", "PATTERN");
    if (rc)
        return rc;
    if (!o.seq_len)
        return usage_error("%s", "layout: --seq-len (one length) is required");
    int fmt = strcmp(o.format, "mask") == 0 ? 0 : strcmp(o.format, "schedule") == 0 ? 1
            : strcmp(o.format, "stats") == 0 ? 2 : -1;
    if (fmt < 0)
        return usage_error("layout: --format must be mask, schedule or stats, got '%s'", o.format);
    s2_dtype dt;
    if (parse_dtype(o.dtype, &dt) != 0)
        return usage_error("layout: --dtype must be bf16 or fp16, got '%s'", o.dtype);
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
            fprintf(stderr, "s2c: layout: the %s would be about %.1f MiB, over the %.1f MiB cap; raise it with --max-bytes\n",
                    fmt == 0 ? "mask" : "schedule", (double)size / 1048576.0, (double)max_bytes / 1048576.0);
            s2_layout_free(l);
            s2_pattern_set_free(set);
            return EXIT_INPUT;
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
            if (st == S2_OK)
                st = s2_layout_stats_format(ctx, &stats, &text);
        }
    }
    if (st == S2_OK)
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
    opts o = {.page_size = 64, .head_dim = 128, .dtype = "bf16"};
    int rc = parse_one_file(argc, argv, &o, "kv-memory", "PATTERN");
    if (rc)
        return rc;
    int64_t lens[MAX_LENS];
    int nlens = 0;
    if ((rc = parse_len_list(o.seq_len_text, lens, &nlens)) != 0)
        return rc;
    s2_dtype dt;
    if (parse_dtype(o.dtype, &dt) != 0)
        return usage_error("kv-memory: --dtype must be bf16 or fp16, got '%s'", o.dtype);
    if (o.page_size % 16 != 0)
        return usage_error("%s", "kv-memory: --page-size must be a multiple of 16");
    if (o.num_names > 1)
        return usage_error("%s", "kv-memory: --name may be given once");
    s2_pattern_set *set = NULL;
    const s2_pattern *p = NULL;
    int np = 0;
    if ((rc = load_patterns(ctx, &o, 1, &set, &p, &np)) != 0) {
        s2_pattern_set_free(set);
        return rc;
    }
    /* K and V of one kv head: page_size rows of head_dim 2-byte elements each. */
    int64_t page_bytes = 2 * o.page_size * o.head_dim * 2;
    printf("%s: %d heads, %d kv heads, block %d; page %lld tokens, head_dim %lld, %s: %lld bytes of K+V per page\n",
           p->name, p->heads, p->kv_heads, p->block_size, (long long)o.page_size, (long long)o.head_dim, o.dtype,
           (long long)page_bytes);
    printf("prefill %lld tokens (all held), then decode token by token; batch 1, pages summed over kv heads\n",
           (long long)o.prefill);
    printf("%9s %11s %11s %7s %11s %7s %10s %10s %10s %14s\n", "seq_len", "dense_pg", "held_pg", "held%", "peak_pg",
           "peak%", "dense_MiB", "held_MiB", "peak_MiB", "head_min..max");
    int status = EXIT_OK;
    const char *note = NULL;
    bool efficient = true;
    for (int i = 0; i < nlens && status == EXIT_OK; i++) {
        s2_kv_evictor *ev = NULL;
        s2_kv_memory m;
        if (o.prefill > lens[i]) {
            fprintf(stderr, "s2c: kv-memory: --prefill %lld exceeds seq-len %lld\n", (long long)o.prefill,
                    (long long)lens[i]);
            status = EXIT_USAGE;
        } else if (s2_kv_evictor_new(ctx, p, (int)o.page_size, lens[i], &ev) != S2_OK ||
                   s2_kv_evictor_memory(ctx, ev, o.prefill, lens[i], &m) != S2_OK) {
            status = input_error(ctx);
        } else {
            printf("%9lld %11lld %11lld %6.2f%% %11lld %6.2f%% %10.1f %10.1f %10.1f %6lld..%-6lld\n",
                   (long long)lens[i], (long long)m.dense_pages, (long long)m.held_pages, 100.0 * m.held_fraction,
                   (long long)m.peak_pages, 100.0 * m.peak_fraction, mib(m.dense_pages, page_bytes),
                   mib(m.held_pages, page_bytes), mib(m.peak_pages, page_bytes), (long long)m.held_min_head,
                   (long long)m.held_max_head);
            if (!s2_kv_evictor_efficient(ev)) {
                efficient = false;
                if (!note) {
                    static char buf[512];
                    snprintf(buf, sizeof buf, "%s", s2_kv_evictor_note(ev));
                    note = buf;
                }
            }
        }
        s2_kv_evictor_free(ev);
    }
    if (status == EXIT_OK)
        printf("kv-cache efficient: %s%s\n", efficient ? "yes" : "no (only pages after their last read are freed): ",
               note && !efficient ? note : "");
    s2_pattern_set_free(set);
    return status;
}
