/* GPU: every stock pattern (patterns/NAME.yaml, every pattern of each file) and
 * every golden configuration of the S2 library (tests/cli/golden/NAME.yaml),
 * JIT-compiled and run through s2_attn_forward on fresh random inputs with
 * poisoned outputs, against the float64 CPU reference.  bf16 with head dim
 * 64 and f16 with head dim 128; prefill (q_len = kv_len, not a multiple of
 * the block) and queries at an offset (q_len < kv_len).  Tolerances: o
 * relative error 2e-2 (bf16) / 5e-3 (f16), LSE 1e-3, -inf exactly.
 * Exits 77 without a usable GPU.  Directories: S2C_PATTERNS and
 * S2C_GOLDEN_PATTERNS (set by meson), or argv[1] and argv[2]. */
#include "../../examples/common/example.h"
#include "s2c/attn_runtime.h"
#include "s2c/jit.h"
#include "s2c/pattern.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    s2_dtype dtype;
    int head_dim;
} specs[] = {{S2_DTYPE_BF16, 64}, {S2_DTYPE_F16, 128}};

/* Shapes scaled to the pattern so that the float64 reference stays quick:
 * at least a few blocks beyond the local window, never a multiple of it. */
static void shape_for(const s2_pattern *p, int which, int64_t *q_len, int64_t *kv_len)
{
    int64_t len = (int64_t)p->block_size * 10 + 37;
    if (len > 1000)
        len = 1000;
    if (p->heads >= 32 && len > 500)
        len = 500;
    *kv_len = len;
    *q_len = which == 0 ? len : len / 3 + 1;
}

static int run_pattern(s2_ctx *ctx, s2_device *dev, const s2_pattern *p, uint64_t seed, int *cases)
{
    int failed = 0;
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        s2_kernel_spec spec = {.kind = S2_KERNEL_FWD, .dtype = specs[s].dtype, .head_dim = specs[s].head_dim};
        s2_jit_opts opts = {.no_cache = true};
        s2_attn_kernel *k = NULL;
        if (s2_jit_compile(ctx, dev, p, &spec, &opts, &k, NULL) != S2_OK) {
            printf("FAIL %s: jit: %s\n", p->name, s2_ctx_message(ctx));
            failed++;
            continue;
        }
        for (int which = 0; which < 2; which++) {
            int64_t q_len, kv_len;
            shape_for(p, which, &q_len, &kv_len);
            ex_problem pr;
            ex_result r = {0};
            s2_status st = ex_problem_new(ctx, dev, k, 1, q_len, kv_len, seed + (uint64_t)(*cases), &pr);
            if (st == S2_OK) {
                s2_attn_fwd_args a = {.batch = 1, .q_len = q_len, .kv_len = kv_len, .heads = p->heads,
                                      .kv_heads = p->kv_heads, .head_dim = spec.head_dim, .dtype = spec.dtype,
                                      .q = pr.dq, .k = pr.dk, .v = pr.dv, .o = pr.dout, .lse = pr.dlse};
                s2_attn_fwd_args_bshd(&a);
                st = s2_attn_forward(ctx, k, NULL, &a);
                if (st == S2_OK)
                    st = s2_device_synchronize(ctx, dev);
                if (st == S2_OK)
                    st = ex_problem_check(ctx, dev, &pr, &r);
                if (st == S2_OK)
                    ex_print_row(&pr, &r);
                ex_problem_free(ctx, dev, &pr);
            }
            ++*cases;
            if (st != S2_OK || !r.ok) {
                printf("FAIL %s %s d%d q%lld kv%lld: %s\n", p->name, s2_dtype_name(spec.dtype), spec.head_dim,
                       (long long)q_len, (long long)kv_len, st != S2_OK ? s2_ctx_message(ctx) : "tolerance");
                failed++;
            }
        }
        s2_attn_kernel_free(k);
    }
    return failed;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every .yaml file of dir, sorted, every pattern of each. */
static int run_dir(s2_ctx *ctx, s2_device *dev, const char *dir, uint64_t seed, int *cases)
{
    DIR *d = opendir(dir);
    if (!d) {
        printf("FAIL: cannot open %s\n", dir);
        return 1;
    }
    char *names[256];
    int n = 0, failed = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        size_t l = strlen(e->d_name);
        if (l > 5 && strcmp(e->d_name + l - 5, ".yaml") == 0)
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        s2_pattern_set *set = NULL;
        if (s2_pattern_load(ctx, path, &set) != S2_OK) {
            printf("FAIL %s\n", s2_ctx_message(ctx));
            failed++;
        } else {
            for (int j = 0; j < s2_pattern_set_count(set); j++)
                failed += run_pattern(ctx, dev, s2_pattern_set_get(set, j), seed, cases);
        }
        s2_pattern_set_free(set);
        free(names[i]);
    }
    return failed;
}

int main(int argc, char **argv)
{
    const char *stock = argc > 1 ? argv[1] : getenv("S2C_PATTERNS");
    const char *golden = argc > 2 ? argv[2] : getenv("S2C_GOLDEN_PATTERNS");
    if (!stock || !golden) {
        fprintf(stderr, "usage: test_patterns_gpu STOCK_DIR GOLDEN_DIR (or S2C_PATTERNS, S2C_GOLDEN_PATTERNS)\n");
        return 1;
    }
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    if (!ctx)
        return 1;
    int rc = ex_open_device(ctx, &dev);
    if (rc != 0) {
        s2_ctx_free(ctx);
        return rc;
    }
    uint64_t seed = ex_seed();
    int cases = 0;
    ex_print_header();
    int failed = run_dir(ctx, dev, stock, seed, &cases) + run_dir(ctx, dev, golden, seed, &cases);
    printf("%d cases, %d failed (stock patterns and golden configurations)\n", cases, failed);
    s2_device_free(dev);
    s2_ctx_free(ctx);
    return failed ? 1 : 0;
}
