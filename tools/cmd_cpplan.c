/* s2c cp-plan [PATTERN]: context parallelism on paper.  Per (ranks, tokens)
 * the plan of s2c/cpplan.h: the KV bytes each rank receives against ring
 * attention's, the causal work's balance, and the forward's predicted time
 * from a single-GPU throughput and a link bandwidth. */
#include "cli.h"
#include "s2c/cpplan.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_ROWS = 64 };

static int parse_list(const char *opt, const char *text, int64_t lo, int64_t hi, int64_t *v, int *n)
{
    char buf[1024];
    if (strlen(text) >= sizeof buf)
        return usage_error("cp-plan: %s: too long", opt);
    strcpy(buf, text);
    *n = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_ROWS)
            return usage_error("cp-plan: %s: at most %d values", opt, MAX_ROWS);
        if (parse_int(opt, t, lo, hi, &v[*n]))
            return EXIT_USAGE;
        (*n)++;
    }
    return *n ? 0 : usage_error("cp-plan: %s: expected N[,N...], got '%s'", opt, text);
}

static int parse_positive(const char *opt, const char *text, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v) || v <= 0 || v > hi)
        return usage_error("cp-plan: %s: expected a number in (0, %g], got '%s'", opt, hi, text);
    *out = v;
    return 0;
}

/* The shape: phi3-small's heads and rule, no dense heads, no length bound. */
static s2_status default_pattern(s2_ctx *ctx, s2_pattern_set **set)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    a.name = "l16v8-gqa8";
    a.num_heads = 32;
    a.num_kv_heads = 8;
    a.block_size = 64;
    a.local_blocks = 16;
    a.vert_stride = 8;
    a.head_sliding_offset = 1;
    a.causal = true;
    a.max_seq_len = 0;
    return s2_pattern_from_args(ctx, &a, set);
}

/* The comment lines (unless quiet) and the column names, printed before the first row. */
static void print_header(const opts *o, const s2_pattern *p, s2_dtype dt, double tflops, double gbps)
{
    if (!o->quiet) {
        printf("# %s: %d heads, %d kv heads, block %d, %s; %s, D %d, tile %d x %d\n", p->name, p->heads,
               p->kv_heads, p->block_size, p->causal ? "causal" : "bidirectional", s2_dtype_name(dt),
               (int)o->head_dim, (int)o->block_m, (int)o->block_n);
        printf("# forward at %g TFLOP/s per GPU, links of %g GB/s per rank; time = max over ranks of "
               "max(compute, received bytes / link)\n", tflops, gbps);
    }
    printf("%5s %9s %-10s %10s %10s %10s %7s %7s %10s %9s %9s %9s %9s\n", "ranks", "tokens", "sharding", "MiB mean",
           "MiB max", "ring MiB", "ratio", "balance", "compute ms", "comm ms", "time ms", "ring comm", "ring time");
}

/* One row: the plan of p at (ranks, seq_len, sharding). */
static int print_row(s2_ctx *ctx, const opts *o, const s2_pattern *p, const s2_cp_plan_args *a, s2_dtype dt,
                     double flops_per_s, double bytes_per_s, bool *header)
{
    int head_dim = (int)o->head_dim;
    s2_cp_plan *c = NULL;
    if (s2_cp_plan_new(ctx, p, a, &c) != S2_OK)
        return input_error(ctx);
    double sum_b = 0, max_b = 0, ring = 0, sum_w = 0, max_w = 0, t = 0, t_ring = 0, t_comp = 0, t_comm = 0;
    double t_ring_comm = 0;
    for (int r = 0; r < a->ranks; r++) {
        s2_cp_rank_stats st;
        if (s2_cp_plan_rank_stats(ctx, c, r, head_dim, dt, &st) != S2_OK) {
            s2_cp_plan_free(c);
            return input_error(ctx);
        }
        sum_b += st.recv_bytes;
        max_b = fmax(max_b, st.recv_bytes);
        ring = fmax(ring, st.ring_bytes);
        sum_w += st.kept_pairs;
        max_w = fmax(max_w, st.kept_pairs);
        double comp = st.fwd_flops / flops_per_s, comm = st.recv_bytes / bytes_per_s;
        double ring_comm = st.ring_bytes / bytes_per_s;
        t_comp = fmax(t_comp, comp);
        t_comm = fmax(t_comm, comm);
        t_ring_comm = fmax(t_ring_comm, ring_comm);
        t = fmax(t, fmax(comp, comm));
        t_ring = fmax(t_ring, fmax(comp, ring_comm));
    }
    s2_cp_plan_free(c);
    if (!*header) {
        print_header(o, p, dt, flops_per_s / 1e12, bytes_per_s / 1e9);
        *header = true;
    }
    double mib = 1048576.0, mean_b = sum_b / a->ranks;
    printf("%5d %9lld %-10s %10.1f %10.1f %10.1f %7.4f %7.4f %10.2f %9.2f %9.2f %9.2f %9.2f\n", a->ranks,
           (long long)a->seq_len, a->sharding == S2_CP_ZIGZAG ? "zigzag" : "contiguous", mean_b / mib, max_b / mib,
           ring / mib, ring > 0 ? max_b / ring : 0.0, sum_w > 0 ? max_w / (sum_w / a->ranks) : 0.0, t_comp * 1e3,
           t_comm * 1e3, t * 1e3, t_ring_comm * 1e3, t_ring * 1e3);
    return 0;
}

int cmd_cp_plan(s2_ctx *ctx, int argc, char **argv)
{
    opts o = {.head_dim = 128, .dtype = "bf16", .block_m = 128, .block_n = 64};
    const char *pos[1];
    int npos = 0;
    int rc = parse_opts(argc, argv, &o, pos, 1, &npos);
    if (rc)
        return rc;
    int64_t ranks[MAX_ROWS] = {8, 16, 32, 64}, lens[MAX_ROWS] = {1048576, 2097152, 4194304, 10485760};
    int nranks = 4, nlens = 4;
    if (o.ranks_text && (rc = parse_list("--ranks", o.ranks_text, 1, S2_CP_MAX_RANKS, ranks, &nranks)) != 0)
        return rc;
    if (o.seq_len_text && (rc = parse_list("--seq-len", o.seq_len_text, 1, S2_MAX_SEQ_LEN, lens, &nlens)) != 0)
        return rc;
    const char *sh = o.sharding ? o.sharding : "zigzag";
    bool zig = strcmp(sh, "zigzag") == 0, contig = strcmp(sh, "contiguous") == 0, both = strcmp(sh, "both") == 0;
    if (!zig && !contig && !both)
        return usage_error("cp-plan: --sharding must be zigzag, contiguous or both, got '%s'", sh);
    double tflops = 640, gbps = 50;
    if (o.tflops_text && (rc = parse_positive("--tflops", o.tflops_text, 1e6, &tflops)) != 0)
        return rc;
    if (o.link_text && (rc = parse_positive("--link-gbps", o.link_text, 1e6, &gbps)) != 0)
        return rc;
    s2_dtype dt;
    if ((rc = parse_dtype(o.dtype, &dt)) != 0)
        return rc;
    if (o.num_names > 1)
        return usage_error("%s", "cp-plan: --name may be given once");
    if (o.num_names && !npos)
        return usage_error("%s", "cp-plan: --name needs a PATTERN file");
    s2_pattern_set *set = NULL;
    const s2_pattern *p = NULL;
    if (npos) {
        o.pattern = pos[0];
        const s2_pattern *ps[1];
        int np = 0;
        if ((rc = load_patterns(ctx, &o, 1, &set, ps, &np)) != 0) {
            s2_pattern_set_free(set);
            return rc;
        }
        p = ps[0];
    } else if (default_pattern(ctx, &set) != S2_OK) {
        return input_error(ctx);
    } else {
        p = s2_pattern_set_get(set, 0);
    }
    bool header = false;
    for (int i = 0; i < nlens && rc == 0; i++)
        for (int j = 0; j < nranks && rc == 0; j++)
            for (int s = 0; s < 2 && rc == 0; s++) {
                if ((s == 0 && !zig && !both) || (s == 1 && !contig && !both))
                    continue;
                s2_cp_plan_args a = {lens[i], (int)ranks[j], s == 0 ? S2_CP_ZIGZAG : S2_CP_CONTIGUOUS,
                                     {(int)o.block_m, (int)o.block_n}, false, 0};
                rc = print_row(ctx, &o, p, &a, dt, tflops * 1e12, gbps * 1e9, &header);
            }
    s2_pattern_set_free(set);
    return rc;
}
