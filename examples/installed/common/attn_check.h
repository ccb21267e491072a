/* What the installed-prefix examples share (header only, libs2rt only):
 * random bf16 inputs and the check of a forward's output against a plain
 * double-precision attention that asks the pattern which (query, key) pairs
 * are kept (s2_token_kept, s2c/layout.h).  Tensors are contiguous
 * (batch 1, seq, head, dim); lse is [head][seq] in natural log units. */
#ifndef ATTN_CHECK_H
#define ATTN_CHECK_H

#include <s2c/attn_runtime.h>
#include <s2c/layout.h>

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline uint16_t ac_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even (inputs are finite) */
    return (uint16_t)(u >> 16);
}

static inline double ac_from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* n bf16 values uniform in (-scale, scale). */
static inline void ac_fill(uint16_t *x, size_t n, float scale, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = ac_to_bf16(scale * ((float)((*state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f));
    }
}

typedef struct ac_result {
    double o_err;     /* relative Frobenius error of o (NaN if o holds a NaN) */
    double lse_err;   /* largest |lse - reference| over rows with a kept key */
    int64_t kept;     /* (query, key) pairs kept, over all heads */
    bool ok;          /* o_err <= 2e-2 (bf16), lse_err <= 1e-3, empty rows exact */
} ac_result;

/* q, o: [seq][heads][d]; k, v: [seq][kv_heads][d]; queries are the seq
 * positions of a prefill (q_len == kv_len == seq); scale 1/sqrt(d). */
static inline ac_result ac_check(const s2_pattern *p, int d, int64_t seq, const uint16_t *q, const uint16_t *k,
                                 const uint16_t *v, const uint16_t *o, const float *lse)
{
    ac_result r = {0, 0, 0, true};
    const int heads = p->heads, kvh = p->kv_heads, group = heads / kvh;
    double num = 0, den = 0;
    double *s = malloc((size_t)seq * sizeof *s), *acc = malloc((size_t)d * sizeof *acc);
    if (!s || !acc) {
        free(s);
        free(acc);
        r.ok = false;
        return r;
    }
    for (int h = 0; h < heads; h++)
        for (int64_t i = 0; i < seq; i++) {
            const uint16_t *qi = q + (i * heads + h) * d;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < seq; j++) {
                s[j] = -INFINITY;
                if (!s2_token_kept(p, h, i, j))
                    continue;
                const uint16_t *kj = k + (j * kvh + h / group) * d;
                double dot = 0;
                for (int c = 0; c < d; c++)
                    dot += ac_from_bf16(qi[c]) * ac_from_bf16(kj[c]);
                s[j] = dot / sqrt((double)d);
                mx = fmax(mx, s[j]);
                r.kept++;
            }
            for (int c = 0; c < d; c++)
                acc[c] = 0;
            if (mx != -INFINITY) {
                for (int64_t j = 0; j < seq; j++) {
                    if (s[j] == -INFINITY)
                        continue;
                    double w = exp(s[j] - mx);
                    sum += w;
                    for (int c = 0; c < d; c++)
                        acc[c] += w * ac_from_bf16(v[(j * kvh + h / group) * d + c]);
                }
                for (int c = 0; c < d; c++)
                    acc[c] /= sum;
                double e = fabs(lse[h * seq + i] - (mx + log(sum)));
                if (!(e <= r.lse_err))
                    r.lse_err = e; /* a NaN stays */
            } else if (lse[h * seq + i] != -INFINITY) {
                r.ok = false; /* a row with no kept key has lse -inf and o 0 */
            }
            for (int c = 0; c < d; c++) {
                double x = ac_from_bf16(o[(i * heads + h) * d + c]);
                num += (x - acc[c]) * (x - acc[c]);
                den += acc[c] * acc[c];
            }
        }
    free(s);
    free(acc);
    r.o_err = sqrt(num / (den > 0 ? den : 1));
    r.ok = r.ok && r.o_err <= 2e-2 && r.lse_err <= 1e-3; /* NaN compares false */
    return r;
}

/* 0 with *dev open; 77 (after saying why) without a driver, a device, or
 * one that the kernels of `arch` (s2_manifest_arch; -1: made for the
 * device, any of cc 8.x and 9.x) do not run on; 1 on an error. */
static inline int ac_open_device(s2_ctx *ctx, int arch, s2_device **dev)
{
    int count = 0;
    *dev = NULL;
    s2_status st = s2_device_count(ctx, &count);
    if (st == S2_ERR_NO_DRIVER || st == S2_ERR_NO_DEVICE || (st == S2_OK && count == 0)) {
        printf("no CUDA device: skipped (%s)\n", st == S2_OK ? "no device" : s2_ctx_message(ctx));
        return 77;
    }
    if (st != S2_OK || s2_device_open(ctx, 0, dev) != S2_OK) {
        printf("device 0: %s\n", s2_ctx_message(ctx));
        return 1;
    }
    const s2_device_info *in = s2_device_get_info(*dev);
    bool runs = arch == S2_ARCH_SM80   ? in->cc_major == 8
                : arch >= 0            ? in->cc_major == 9 && in->cc_minor == 0
                                       : in->cc_major == 8 || in->cc_major == 9;
    if (!runs) {
        printf("%s (cc %d.%d) does not run kernels for %s: skipped\n", in->name, in->cc_major, in->cc_minor,
               arch >= 0 ? s2_arch_name((s2_arch)arch) : "sm_80 or sm_90a");
        s2_device_free(*dev);
        *dev = NULL;
        return 77;
    }
    return 0;
}

/* One forward pass of kernel k (bf16 or f16 is the kernel's; bf16 data is
 * checked here, so bf16 kernels only) over a prefill of seq tokens, batch 1,
 * on random data, checked with ac_check.  Prints one line; 0 on PASS, 1 on
 * FAIL or an error (the message printed). */
static inline int ac_run_forward(s2_ctx *ctx, s2_device *dev, s2_attn_kernel *k, int64_t seq, uint64_t seed)
{
    const s2_pattern *p = s2_attn_kernel_pattern(k);
    const s2_manifest_kernel *desc = s2_attn_kernel_desc(k);
    const int d = desc->spec.head_dim;
    const size_t nq = (size_t)seq * p->heads * d, nkv = (size_t)seq * p->kv_heads * d;
    const size_t bytes[5] = {nq * 2, nkv * 2, nkv * 2, nq * 2, (size_t)p->heads * seq * 4};
    void *host[5] = {malloc(bytes[0]), malloc(bytes[1]), malloc(bytes[2]), malloc(bytes[3]), malloc(bytes[4])};
    s2_devptr buf[5] = {0};
    s2_status st = S2_OK;
    int rc = 1;
    for (int i = 0; i < 5; i++)
        if (!host[i])
            goto done;
    ac_fill(host[0], nq, 1.5f, &seed);
    ac_fill(host[1], nkv, 1.5f, &seed);
    ac_fill(host[2], nkv, 1.0f, &seed);
    for (int i = 0; i < 5 && st == S2_OK; i++) {
        st = s2_mem_alloc(ctx, dev, bytes[i], &buf[i]);
        if (st == S2_OK)
            st = i < 3 ? s2_memcpy_h2d(ctx, dev, buf[i], host[i], bytes[i])
                       : s2_memset_d8(ctx, dev, buf[i], 0xff, bytes[i]); /* NaN: what the kernel misses shows */
    }
    if (st == S2_OK) {
        s2_attn_fwd_args a = {.batch = 1, .q_len = seq, .kv_len = seq, .heads = p->heads, .kv_heads = p->kv_heads,
                              .head_dim = d, .dtype = desc->spec.dtype,
                              .q = buf[0], .k = buf[1], .v = buf[2], .o = buf[3], .lse = buf[4]};
        s2_attn_fwd_args_bshd(&a);              /* contiguous (batch, seq, head, dim) */
        st = s2_attn_forward(ctx, k, NULL, &a); /* NULL: the default stream */
    }
    if (st == S2_OK)
        st = s2_device_synchronize(ctx, dev);
    for (int i = 3; i < 5 && st == S2_OK; i++)
        st = s2_memcpy_d2h(ctx, dev, host[i], buf[i], bytes[i]);
    if (st != S2_OK) {
        printf("%s: %s (%s)\n", desc->name, s2_ctx_message(ctx), s2_status_name(st));
        goto done;
    }
    ac_result r = ac_check(p, d, seq, host[0], host[1], host[2], host[3], host[4]);
    printf("%s (pattern %s, %d heads, %lld tokens): o relative error %.2e, lse max error %.2e, "
           "%lld pairs kept: %s\n", desc->name, p->name, p->heads, (long long)seq, r.o_err, r.lse_err,
           (long long)r.kept, r.ok ? "PASS" : "FAIL");
    rc = r.ok ? 0 : 1;
done:
    for (int i = 0; i < 5; i++) {
        s2_mem_free(ctx, dev, buf[i]);
        free(host[i]);
    }
    return rc;
}

#endif
