/* Embedding s2c: run attention kernels that `s2c compile` made at build time,
 * with only the runtime (libs2rt: no LLVM, no CUDA toolkit, the driver
 * through dlopen).
 *
 *   embed [CUBIN_DIR]     (default: the build directory that holds model_<arch>.cubin)
 *
 * The build compiles the two layers of model.yaml into one cubin per arch.
 * The program loads the cubin for its device, finds each layer's kernel by
 * pattern name, and calls s2_attn_forward on random bf16 data.  The cubin
 * carries the patterns, so the runtime builds (and caches) each shape's
 * schedule itself.  The results are checked against the float64 CPU
 * reference.  Exits 0 when every check passes, 1 on a failure, 77 without a
 * usable GPU.  S2C_SEED=N repeats a run. */
#include "../common/example.h"
#include "s2c/attn_runtime.h"

#include <stdio.h>

#ifndef EMBED_CUBIN_DIR
#define EMBED_CUBIN_DIR "."
#endif

/* the pattern names of model.yaml: one kernel each, bf16, head_dim 64 */
static const char *const layers[] = {"causal-sparse", "bidir-sparse"};

/* a full prefill whose length is no multiple of any tile, and a chunk of
 * queries at the end of a longer context */
static const struct {
    int batch;
    int64_t q_len, kv_len;
} shapes[] = {{2, 1000, 1000}, {1, 200, 1000}};

/* One forward pass of kernel k on random inputs, checked. */
static s2_status run_layer(s2_ctx *ctx, s2_device *dev, s2_attn_kernel *k, int batch, int64_t q_len,
                           int64_t kv_len, uint64_t seed, ex_result *r)
{
    const s2_pattern *p = s2_attn_kernel_pattern(k);
    ex_problem pr;
    s2_status st = ex_problem_new(ctx, dev, k, batch, q_len, kv_len, seed, &pr);
    if (st == S2_OK) {
        s2_attn_fwd_args a = {.batch = batch, .q_len = q_len, .kv_len = kv_len,
                              .heads = p->heads, .kv_heads = p->kv_heads, .head_dim = 64,
                              .dtype = S2_DTYPE_BF16,
                              .q = pr.dq, .k = pr.dk, .v = pr.dv, .o = pr.dout, .lse = pr.dlse};
        s2_attn_fwd_args_bshd(&a);              /* contiguous (batch, seq, head, dim) */
        st = s2_attn_forward(ctx, k, NULL, &a); /* NULL: the default stream */
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

int main(int argc, char **argv)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    s2_attn_module *mod = NULL;
    s2_status st = S2_OK;
    if (!ctx)
        return 1;
    int rc = ex_open_device(ctx, &dev);
    if (rc != 0)
        goto done;

    const s2_device_info *in = s2_device_get_info(dev);
    char path[4096];
    snprintf(path, sizeof path, "%s/model_%s.cubin", argc > 1 ? argv[1] : EMBED_CUBIN_DIR,
             in->cc_major == 9 ? "sm_90a" : "sm_80");
    if ((st = s2_attn_module_load_file(ctx, dev, path, &mod)) != S2_OK)
        goto fail;
    uint64_t seed = ex_seed();
    printf("%s (cc %d.%d), %s: %d kernels, seed %llu (S2C_SEED to repeat)\n", in->name, in->cc_major,
           in->cc_minor, path, s2_attn_module_num_kernels(mod), (unsigned long long)seed);
    ex_print_header();

    int failed = 0, runs = 0;
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
        s2_attn_kernel *k = NULL;  /* borrowed: lives as long as the module */
        if ((st = s2_attn_find(ctx, mod, layers[i], S2_DTYPE_BF16, 64, &k)) != S2_OK)
            goto fail;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            ex_result r;
            st = run_layer(ctx, dev, k, shapes[s].batch, shapes[s].q_len, shapes[s].kv_len,
                           seed + 3 * (uint64_t)runs++, &r);
            if (st != S2_OK)
                goto fail;
            failed += !r.ok;
        }
    }
    printf("%s\n", failed ? "FAIL" : "PASS");
    rc = failed ? 1 : 0;
    goto done;
fail:
    printf("error: %s (%s)\n", s2_ctx_message(ctx), s2_status_name(st));
    rc = 1;
done:
    s2_attn_module_free(mod);
    s2_device_free(dev);
    s2_ctx_free(ctx);
    return rc;
}
