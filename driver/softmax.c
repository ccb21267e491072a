/* The row softmax's compile entry (s2_compile_row_softmax, compile.h): the
 * table's "row_softmax" kernel in its own module, no manifest. */
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
    const s2_template *t = s2_template_named("row_softmax");
    if (!t)
        return s2_fail(ctx, S2_ERR_INTERNAL, "row softmax: no such template");
    /* the template fills its launch shape: threads (num_warps) and rows (block_m) per CTA */
    s2_kspec spec = {.kind = t->kind, .dtype = S2_DTYPE_F32, .arch = target->arch};
    s2_status st = t->resolve(ctx, &spec, pattern);
    if (st != S2_OK)
        return st;

    char name[128];
    t->symbol(name, sizeof name, pattern, &spec);
    s2_artifact *art = s2_artifact_new(target, name);
    if (!art)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    art->threads_per_block = spec.num_warps * 32;
    art->rows_per_block = spec.block_m;

    s2_cg cg;
    st = s2_cg_init(ctx, &cg, target, name);
    if (st == S2_OK)
        st = t->build(ctx, &cg, pattern, &spec, name);
    if (st == S2_OK)
        st = s2_cg_finish(ctx, &cg, backend, art);
    s2_cg_destroy(&cg);
    if (st != S2_OK) {
        s2_artifact_free(art);
        return st;
    }
    for (int i = 0; i < art->num_kernels; i++)
        art->kernels[i].max_threads = art->threads_per_block;
    *out = art;
    return S2_OK;
}
