/* JIT: compile attention for a pattern file read at run time (at model
 * load, say), through the on-disk kernel cache.
 *
 *   jit [PATTERN_FILE [CACHE_DIR]]
 *       PATTERN_FILE  default: layer.yaml next to this program's source
 *       CACHE_DIR     default: a fresh temporary directory, removed at exit
 *
 * For each pattern of the file the program calls s2_jit_compile twice: the
 * first call finds the cache empty and generates the kernel (LLVM IR, PTX,
 * cubin through ptxas or nvJitLink), stores it and loads it; the second, as
 * a restarted process would, finds it in the cache and only loads it.  Then
 * it runs s2_attn_forward on random f16 data with head_dim 128 and checks
 * the result against the float64 CPU reference.  It links libs2c (LLVM) and
 * needs ptxas or nvJitLink at run time.  Exits 0 when every check passes, 1
 * on a failure, 77 without a usable GPU.  S2C_SEED=N repeats a run. */
#include "../common/example.h"
#include "s2c/attn_runtime.h"
#include "s2c/jit.h"
#include "s2c/pattern.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#ifndef JIT_PATTERN_FILE
#define JIT_PATTERN_FILE "layer.yaml"
#endif

/* a prefill of two sequences, and decode (one query each) of four */
static const struct {
    int batch;
    int64_t q_len, kv_len;
} shapes[] = {{2, 700, 700}, {4, 1, 900}};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* s2_jit_compile, timed. */
static s2_status jit_timed(s2_ctx *ctx, s2_device *dev, const s2_pattern *p, const s2_kernel_spec *spec,
                           const s2_jit_opts *opts, s2_attn_kernel **k, double *ms, s2_jit_stats *js)
{
    double t0 = now_ms();
    s2_status st = s2_jit_compile(ctx, dev, p, spec, opts, k, js);
    *ms = now_ms() - t0;
    return st;
}

static const char *jit_what(const s2_jit_stats *js)
{
    if (js->hit)
        return "cache hit";
    if (js->store_failed)
        return "compiled, not stored";
    return js->rebuilt ? "compiled, bad entry replaced" : "compiled, stored";
}

/* One forward pass of kernel k on random inputs, checked. */
static s2_status run_layer(s2_ctx *ctx, s2_device *dev, s2_attn_kernel *k, const s2_kernel_spec *spec, int batch,
                           int64_t q_len, int64_t kv_len, uint64_t seed, ex_result *r)
{
    const s2_pattern *p = s2_attn_kernel_pattern(k);
    ex_problem pr;
    s2_status st = ex_problem_new(ctx, dev, k, batch, q_len, kv_len, seed, &pr);
    if (st == S2_OK) {
        s2_attn_fwd_args a = {.batch = batch, .q_len = q_len, .kv_len = kv_len,
                              .heads = p->heads, .kv_heads = p->kv_heads, .head_dim = spec->head_dim,
                              .dtype = spec->dtype,
                              .q = pr.dq, .k = pr.dk, .v = pr.dv, .o = pr.dout, .lse = pr.dlse};
        s2_attn_fwd_args_bshd(&a);
        st = s2_attn_forward(ctx, k, NULL, &a);
    }
    if (st == S2_OK)
        st = s2_device_synchronize(ctx, dev);
    if (st == S2_OK)
        st = ex_problem_check(ctx, dev, &pr, r);
    if (st == S2_OK)
        ex_print_row(&pr, r);
    ex_problem_free(ctx, dev, &pr);
    return st;
}

/* JIT one pattern cold and warm, then run it on every shape; failed checks
 * are added to *failed. */
static s2_status run_pattern(s2_ctx *ctx, s2_device *dev, const s2_pattern *p, const s2_jit_opts *opts,
                             uint64_t seed, int *failed)
{
    s2_kernel_spec spec = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_F16, .head_dim = 128}; /* tunables: heuristic */
    s2_jit_stats cold, warm;
    double cold_ms, warm_ms;
    s2_attn_kernel *k = NULL;
    s2_status st = jit_timed(ctx, dev, p, &spec, opts, &k, &cold_ms, &cold);
    if (st != S2_OK)
        return st;
    s2_attn_kernel_free(k); /* the warm call gets its kernel from the cache alone */
    k = NULL;
    if ((st = jit_timed(ctx, dev, p, &spec, opts, &k, &warm_ms, &warm)) != S2_OK)
        return st;
    printf("%s: JIT cold %.1f ms (%s), warm %.1f ms (%s), key %.16s...\n", p->name, cold_ms, jit_what(&cold),
           warm_ms, jit_what(&warm), warm.key);
    if (cold.stored && !warm.hit) {
        printf("FAIL: the second call did not find the stored kernel\n");
        ++*failed;
    }
    ex_print_header();
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0] && st == S2_OK; s++) {
        ex_result r;
        st = run_layer(ctx, dev, k, &spec, shapes[s].batch, shapes[s].q_len, shapes[s].kv_len, seed + 3 * s, &r);
        *failed += st == S2_OK && !r.ok;
    }
    s2_attn_kernel_free(k);
    return st;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int main(int argc, char **argv)
{
    const char *file = argc > 1 ? argv[1] : JIT_PATTERN_FILE;
    char tmp_dir[1024] = "";
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    s2_pattern_set *set = NULL;
    s2_status st = S2_OK;
    if (!ctx)
        return 1;
    int rc = ex_open_device(ctx, &dev);
    if (rc != 0)
        goto done;
    if ((st = s2_pattern_load(ctx, file, &set)) != S2_OK)
        goto fail;

    s2_jit_opts opts = {.cache_dir = argc > 2 ? argv[2] : NULL};
    if (!opts.cache_dir) {
        const char *t = getenv("TMPDIR");
        snprintf(tmp_dir, sizeof tmp_dir, "%s/s2c-jit-example-XXXXXX", t && t[0] ? t : "/tmp");
        if (!mkdtemp(tmp_dir)) {
            perror(tmp_dir);
            rc = 1;
            goto done;
        }
        opts.cache_dir = tmp_dir;
    }
    const s2_device_info *in = s2_device_get_info(dev);
    uint64_t seed = ex_seed();
    printf("%s (cc %d.%d), %s: %d pattern(s), cache %s, seed %llu (S2C_SEED to repeat)\n", in->name, in->cc_major,
           in->cc_minor, file, s2_pattern_set_count(set), opts.cache_dir, (unsigned long long)seed);

    int failed = 0;
    for (int i = 0; i < s2_pattern_set_count(set); i++) {
        st = run_pattern(ctx, dev, s2_pattern_set_get(set, i), &opts, seed + 101 * (uint64_t)i, &failed);
        if (st != S2_OK)
            goto fail;
    }
    printf("%s\n", failed ? "FAIL" : "PASS");
    rc = failed ? 1 : 0;
    goto done;
fail:
    printf("error: %s (%s)\n", s2_ctx_message(ctx), s2_status_name(st));
    rc = 1;
done:
    if (tmp_dir[0])
        nftw(tmp_dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    s2_pattern_set_free(set);
    s2_device_free(dev);
    s2_ctx_free(ctx);
    return rc;
}
