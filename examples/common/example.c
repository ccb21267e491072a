#include "example.h"

#include "s2c/layout.h"
#include "s2c/ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int ex_open_device(s2_ctx *ctx, s2_device **dev)
{
    int count = 0;
    *dev = NULL;
    s2_status st = s2_device_count(ctx, &count);
    if (st == S2_ERR_NO_DRIVER || st == S2_ERR_NO_DEVICE || (st == S2_OK && count == 0)) {
        printf("no CUDA driver or device (%s): skipped\n", s2_ctx_message(ctx));
        return EX_SKIP;
    }
    if (st == S2_OK)
        st = s2_device_open(ctx, 0, dev);
    if (st != S2_OK) {
        printf("device 0: %s\n", s2_ctx_message(ctx));
        return 1;
    }
    const s2_device_info *in = s2_device_get_info(*dev);
    if (in->cc_major != 8 && in->cc_major != 9) {
        printf("%s: s2c makes no kernels for compute capability %d.%d: skipped\n", in->name, in->cc_major,
               in->cc_minor);
        s2_device_free(*dev);
        *dev = NULL;
        return EX_SKIP;
    }
    return 0;
}

uint64_t ex_seed(void)
{
    const char *env = getenv("S2C_SEED");
    return env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
}

static const s2_pattern *pattern_of(const ex_problem *pr)
{
    return s2_attn_kernel_pattern(pr->kernel);
}

static const s2_kernel_spec *spec_of(const ex_problem *pr)
{
    return &s2_attn_kernel_desc(pr->kernel)->spec;
}

/* Random values in [lo, hi] for `seq` rows of `heads` heads, on the host
 * (*host, malloc'd) and on the device (*dptr). */
static s2_status random_tensor(s2_ctx *ctx, s2_device *dev, const ex_problem *pr, int64_t seq, int heads,
                               uint64_t seed, double lo, double hi, uint16_t **host, s2_devptr *dptr)
{
    const s2_kernel_spec *sp = spec_of(pr);
    int64_t extent[4] = {pr->batch, seq, heads, sp->head_dim};
    size_t bytes = (size_t)pr->batch * (size_t)seq * (size_t)heads * (size_t)sp->head_dim * 2;
    if (!(*host = malloc(bytes)))
        return S2_ERR_NOMEM;
    s2_tensor t = s2_tensor_bshd(*host, sp->dtype, seq, heads, sp->head_dim);
    s2_tensor_fill_random(&t, extent, seed, lo, hi);
    s2_status st = s2_mem_alloc(ctx, dev, bytes, dptr);
    return st == S2_OK ? s2_memcpy_h2d(ctx, dev, *dptr, *host, bytes) : st;
}

static size_t o_bytes(const ex_problem *pr)
{
    return (size_t)pr->batch * (size_t)pr->q_len * (size_t)pattern_of(pr)->heads * (size_t)spec_of(pr)->head_dim * 2;
}

static size_t lse_count(const ex_problem *pr)
{
    return (size_t)pr->batch * (size_t)pattern_of(pr)->heads * (size_t)pr->q_len;
}

s2_status ex_problem_new(s2_ctx *ctx, s2_device *dev, const s2_attn_kernel *k, int batch, int64_t q_len,
                         int64_t kv_len, uint64_t seed, ex_problem *pr)
{
    *pr = (ex_problem){.kernel = k, .batch = batch, .q_len = q_len, .kv_len = kv_len};
    const s2_pattern *p = pattern_of(pr);
    s2_status st = random_tensor(ctx, dev, pr, q_len, p->heads, seed, -1.5, 1.5, &pr->q, &pr->dq);
    if (st == S2_OK)
        st = random_tensor(ctx, dev, pr, kv_len, p->kv_heads, seed + 1, -1.5, 1.5, &pr->k, &pr->dk);
    if (st == S2_OK)
        st = random_tensor(ctx, dev, pr, kv_len, p->kv_heads, seed + 2, -1.0, 1.0, &pr->v, &pr->dv);
    /* all-ones bytes are NaN in bf16, f16 and fp32 */
    if (st == S2_OK)
        st = s2_mem_alloc(ctx, dev, o_bytes(pr), &pr->dout);
    if (st == S2_OK)
        st = s2_memset_d8(ctx, dev, pr->dout, 0xff, o_bytes(pr));
    if (st == S2_OK)
        st = s2_mem_alloc(ctx, dev, lse_count(pr) * 4, &pr->dlse);
    if (st == S2_OK)
        st = s2_memset_d8(ctx, dev, pr->dlse, 0xff, lse_count(pr) * 4);
    return st;
}

void ex_problem_free(s2_ctx *ctx, s2_device *dev, ex_problem *pr)
{
    s2_devptr d[] = {pr->dq, pr->dk, pr->dv, pr->dout, pr->dlse};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        s2_mem_free(ctx, dev, d[i]);
    free(pr->q);
    free(pr->k);
    free(pr->v);
    *pr = (ex_problem){0};
}

static bool kept(const void *user, int q_head, int64_t qpos, int64_t kpos)
{
    return s2_token_kept((const s2_pattern *)user, q_head, qpos, kpos);
}

/* o (kernel) against ref (float64), and their LSEs. */
static void compare(const ex_problem *pr, const uint16_t *o, const float *lse, const double *ref,
                    const float *lse_ref, ex_result *r)
{
    const int H = pattern_of(pr)->heads, D = spec_of(pr)->head_dim;
    const s2_tensor to = s2_tensor_bshd((void *)o, spec_of(pr)->dtype, pr->q_len, H, D);
    const s2_tensor tr = s2_tensor_bshd((void *)ref, S2_DTYPE_F64, pr->q_len, H, D);
    double num = 0, den = 0;
    for (int b = 0; b < pr->batch; b++)
        for (int h = 0; h < H; h++)
            for (int64_t i = 0; i < pr->q_len; i++) {
                size_t li = ((size_t)b * H + h) * (size_t)pr->q_len + (size_t)i;
                bool empty = isinf(lse_ref[li]) && lse_ref[li] < 0;
                double dl = fabs((double)lse[li] - lse_ref[li]);
                if (empty ? !(isinf(lse[li]) && lse[li] < 0) : !(dl <= 1e-3))
                    r->bad_lse++;
                else if (!empty)
                    r->lse_err = fmax(r->lse_err, dl);
                for (int d = 0; d < D; d++) {
                    double x = s2_tensor_get(&to, b, i, h, d), y = s2_tensor_get(&tr, b, i, h, d);
                    r->nan_o += isnan(x);
                    num += (x - y) * (x - y);
                    den += y * y;
                }
            }
    r->o_err = den > 0 ? sqrt(num / den) : sqrt(num);
}

s2_status ex_problem_check(s2_ctx *ctx, s2_device *dev, const ex_problem *pr, ex_result *r)
{
    const s2_pattern *p = pattern_of(pr);
    const s2_kernel_spec *sp = spec_of(pr);
    const size_t n_o = o_bytes(pr) / 2, n_lse = lse_count(pr);
    uint16_t *o = malloc(n_o * 2);
    float *lse = malloc(n_lse * sizeof *lse), *lse_ref = malloc(n_lse * sizeof *lse_ref);
    double *ref = malloc(n_o * sizeof *ref);
    s2_status st = o && lse && lse_ref && ref ? S2_OK : S2_ERR_NOMEM;
    if (st == S2_OK)
        st = s2_memcpy_d2h(ctx, dev, o, pr->dout, n_o * 2);
    if (st == S2_OK)
        st = s2_memcpy_d2h(ctx, dev, lse, pr->dlse, n_lse * sizeof *lse);
    if (st == S2_OK) {
        const int D = sp->head_dim;
        s2_tensor q = s2_tensor_bshd(pr->q, sp->dtype, pr->q_len, p->heads, D);
        s2_tensor k = s2_tensor_bshd(pr->k, sp->dtype, pr->kv_len, p->kv_heads, D);
        s2_tensor v = s2_tensor_bshd(pr->v, sp->dtype, pr->kv_len, p->kv_heads, D);
        s2_tensor out = s2_tensor_bshd(ref, S2_DTYPE_F64, pr->q_len, p->heads, D);
        s2_ref_problem rp = {.batch = pr->batch, .heads = p->heads, .kv_heads = p->kv_heads, .head_dim = D,
                             .q_len = pr->q_len, .kv_len = pr->kv_len, .causal = p->causal, .mask = kept,
                             .mask_user = p};
        st = s2_ref_forward(ctx, &rp, &q, &k, &v, &out, lse_ref);
    }
    if (st == S2_OK) {
        *r = (ex_result){.tol = sp->dtype == S2_DTYPE_BF16 ? 2e-2 : 5e-3};
        compare(pr, o, lse, ref, lse_ref, r);
        r->ok = r->nan_o == 0 && r->bad_lse == 0 && r->o_err <= r->tol;
    }
    free(o);
    free(lse);
    free(lse_ref);
    free(ref);
    return st;
}

void ex_print_header(void)
{
    printf("%-30s %-5s %4s %5s %5s %4s %4s %10s %10s %s\n", "kernel", "dtype", "B", "Sq", "Sk", "bm", "bn",
           "o_relerr", "lse_err", "result");
}

void ex_print_row(const ex_problem *pr, const ex_result *r)
{
    const s2_manifest_kernel *mk = s2_attn_kernel_desc(pr->kernel);
    printf("%-30s %-5s %4d %5lld %5lld %4d %4d %10.2e %10.2e %s", mk->name, s2_dtype_name(mk->spec.dtype),
           pr->batch, (long long)pr->q_len, (long long)pr->kv_len, mk->spec.block_m, mk->spec.block_n, r->o_err,
           r->lse_err, r->ok ? "PASS" : "FAIL");
    if (!r->ok)
        printf(" (%lld NaN in o, %lld bad lse, tolerance %.0e)", (long long)r->nan_o, (long long)r->bad_lse,
               r->tol);
    printf("\n");
}
