/* The row softmax's compile entry (s2_compile_row_softmax, compile.h): one
 * kernel of templates/softmax.c in its own module, no manifest. */
#include "s2c/compile.h"
#include "template.h"

s2_status s2_compile_row_softmax(s2_ctx *ctx, const s2_pattern *pattern, const s2_target *target,
                                 s2_cubin_backend backend, s2_artifact **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_INVALID, "row softmax: null output");
    *out = NULL;
    if (!target || !s2_arch_cpu(target->arch))
        return s2_fail(ctx, S2_ERR_INVALID, "row softmax: invalid target");
    s2_status st = s2_softmax_check_pattern(ctx, pattern);
    if (st != S2_OK)
        return st;

    char name[128];
    s2_softmax_kernel_name(name, sizeof name, pattern, target->arch);
    s2_artifact *art = s2_artifact_new(target, name);
    if (!art)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    art->threads_per_block = S2_SOFTMAX_WARPS * 32;
    art->rows_per_block = S2_SOFTMAX_WARPS;

    s2_cg cg;
    st = s2_cg_init(ctx, &cg, target, name);
    if (st == S2_OK)
        st = s2_softmax_build(ctx, &cg, pattern, name);
    if (st == S2_OK)
        st = s2_cg_finish(ctx, &cg, backend, art);
    s2_cg_destroy(&cg);
    if (st != S2_OK) {
        s2_artifact_free(art);
        return st;
    }
    for (int i = 0; i < art->num_kernels; i++)
        art->kernels[i].max_threads = S2_SOFTMAX_WARPS * 32;
    *out = art;
    return S2_OK;
}
