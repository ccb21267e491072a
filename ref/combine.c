/* CPU reference of the merge of partial attention results (s2_ref_combine),
 * in float64: the oracle of s2_combine and of the split-KV decode. */
#include "s2c/ref.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>

/* Merge row (b, s, h): the weights exp(lse_i - max) over the finite inputs. */
static void combine_row(int n, int64_t b, int64_t s, int h, int dim, int heads, int64_t seq,
                        const s2_tensor *outs, const float *const *lses, const s2_tensor *out, float *lse,
                        double *w)
{
    int64_t li = ((int64_t)b * heads + h) * seq + s;
    double mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if ((double)lses[i][li] > mx)
            mx = lses[i][li];
    if (mx == -INFINITY) {
        for (int d = 0; d < dim; d++)
            s2_tensor_set(out, b, s, h, d, 0.0);
        if (lse)
            lse[li] = -INFINITY;
        return;
    }
    double sum = 0;
    for (int i = 0; i < n; i++) {
        w[i] = lses[i][li] == -INFINITY ? 0.0 : exp((double)lses[i][li] - mx);
        sum += w[i];
    }
    for (int d = 0; d < dim; d++) {
        double acc = 0;
        for (int i = 0; i < n; i++)
            if (w[i] != 0.0)
                acc += w[i] * s2_tensor_get(&outs[i], b, s, h, d);
        s2_tensor_set(out, b, s, h, d, acc / sum);
    }
    if (lse)
        lse[li] = (float)(mx + log(sum));
}

s2_status s2_ref_combine(s2_ctx *ctx, int n, int batch, int64_t seq, int heads, int head_dim,
                         const s2_tensor *outs, const float *const *lses, const s2_tensor *out, float *lse)
{
    if (n < 1 || batch < 1 || seq < 1 || heads < 1 || head_dim < 1)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_ref_combine: n %d, batch %d, seq %lld, heads %d, head_dim %d must be >= 1",
                       n, batch, (long long)seq, heads, head_dim);
    if (!outs || !lses || !out || !out->data)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_ref_combine: null input or output");
    for (int i = 0; i < n; i++)
        if (!outs[i].data || !lses[i])
            return s2_fail(ctx, S2_ERR_INVALID, "s2_ref_combine: input %d is null", i);
    double *w = malloc((size_t)n * sizeof *w);
    if (!w)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    for (int b = 0; b < batch; b++)
        for (int64_t s = 0; s < seq; s++)
            for (int h = 0; h < heads; h++)
                combine_row(n, b, s, h, head_dim, heads, seq, outs, lses, out, lse, w);
    free(w);
    return S2_OK;
}
