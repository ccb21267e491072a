/* A program using the AOT files s2c generated at build time (attn.c/attn.h):
 * load_attn(), then the launcher of the dense causal kernel on random bf16
 * data, checked against a plain double-precision reference.
 *
 * The kernel reads a Merge-Q schedule (the ABI in s2c/attention.h and the
 * packed form in s2c/layout.h).  A program that links libs2c builds it with
 * s2_schedule_build + s2_schedule_pack for any pattern; this one has only
 * the driver, so it uses a pattern whose schedule is simple: dense causal
 * attention with block = tile = BLOCK tokens visits key tiles 0..t for query
 * tile t, the last one crossing the diagonal.
 *
 * Prints PASS/FAIL and the error; exits 0, 1 on failure, 77 without a device
 * (or for a device the cubin's arch does not run on). */
#include "attn.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef BLOCK
#define BLOCK 64
#endif

enum { HEADS = 4, HEAD_DIM = 64, SEQ = 8 * BLOCK, Q_TILES = SEQ / BLOCK };

/* s2c/layout.h: S2_ENTRY_FULL, S2_ENTRY_CAUSAL and s2_dev_entry */
enum { ENTRY_FULL = 1, ENTRY_CAUSAL = 2 };
typedef struct dev_entry {
    int32_t tile;
    uint32_t flags;   /* S2_ENTRY_* | row_mask << 8 */
    uint64_t live;    /* sub-block bits: one sub-block per tile here */
} dev_entry;

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even (inputs are finite) */
    return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float uniform(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* Dense causal attention in double for head h, query i; q/k/v [SEQ][HEADS][HEAD_DIM]. */
static void reference(const uint16_t *q, const uint16_t *k, const uint16_t *v, int h, int i, double *out,
                      double *lse)
{
    double s[SEQ], mx = -INFINITY, sum = 0;
    for (int j = 0; j <= i; j++) {
        double dot = 0;
        for (int d = 0; d < HEAD_DIM; d++)
            dot += (double)from_bf16(q[(i * HEADS + h) * HEAD_DIM + d]) * from_bf16(k[(j * HEADS + h) * HEAD_DIM + d]);
        s[j] = dot / sqrt((double)HEAD_DIM);
        mx = fmax(mx, s[j]);
    }
    for (int d = 0; d < HEAD_DIM; d++)
        out[d] = 0;
    for (int j = 0; j <= i; j++) {
        double p = exp(s[j] - mx);
        sum += p;
        for (int d = 0; d < HEAD_DIM; d++)
            out[d] += p * from_bf16(v[(j * HEADS + h) * HEAD_DIM + d]);
    }
    for (int d = 0; d < HEAD_DIM; d++)
        out[d] /= sum;
    *lse = mx + log(sum);
}

#define CHECK(call)                                                                 \
    do {                                                                            \
        CUresult r_ = (call);                                                       \
        if (r_ != CUDA_SUCCESS) {                                                   \
            const char *msg_ = NULL;                                                \
            cuGetErrorString(r_, &msg_);                                            \
            fprintf(stderr, "%s: %s\n", #call, msg_ ? msg_ : "unknown error");      \
            return r_ == CUDA_ERROR_NO_BINARY_FOR_GPU ? 77 : 1;                     \
        }                                                                           \
    } while (0)

int main(void)
{
    int count = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    CUdevice dev;
    CUcontext ctx;
    char name[256];
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDeviceGetName(name, sizeof name, dev));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(load_attn());

    /* inputs [1][SEQ][HEADS][HEAD_DIM], bf16 */
    enum { N = SEQ * HEADS * HEAD_DIM };
    static uint16_t q[N], k[N], v[N], o[N];
    static float lse[HEADS * SEQ];
    uint64_t seed = 12345;
    for (int i = 0; i < N; i++) {
        q[i] = to_bf16(1.5f * uniform(&seed));
        k[i] = to_bf16(1.5f * uniform(&seed));
        v[i] = to_bf16(uniform(&seed));
    }

    /* the schedule: one head class; list t holds key tiles 0..t */
    static int32_t class_of_head[HEADS], offsets[Q_TILES + 1];
    static dev_entry entries[Q_TILES * (Q_TILES + 1) / 2];
    int n = 0;
    for (int t = 0; t < Q_TILES; t++) {
        offsets[t] = n;
        for (int j = 0; j <= t; j++)
            entries[n++] = (dev_entry){j, (j == t ? ENTRY_CAUSAL : ENTRY_FULL) | 1u << 8, 1};
    }
    offsets[Q_TILES] = n;

    CUdeviceptr dq, dk, dv, dout, dlse, dclass, doffs, dent;
    CHECK(cuMemAlloc(&dq, sizeof q));
    CHECK(cuMemAlloc(&dk, sizeof k));
    CHECK(cuMemAlloc(&dv, sizeof v));
    CHECK(cuMemAlloc(&dout, sizeof o));
    CHECK(cuMemAlloc(&dlse, sizeof lse));
    CHECK(cuMemAlloc(&dclass, sizeof class_of_head));
    CHECK(cuMemAlloc(&doffs, sizeof offsets));
    CHECK(cuMemAlloc(&dent, sizeof entries));
    CHECK(cuMemcpyHtoD(dq, q, sizeof q));
    CHECK(cuMemcpyHtoD(dk, k, sizeof k));
    CHECK(cuMemcpyHtoD(dv, v, sizeof v));
    CHECK(cuMemsetD8(dout, 0xff, sizeof o)); /* NaN: rows the kernel misses show */
    CHECK(cuMemcpyHtoD(dclass, class_of_head, sizeof class_of_head));
    CHECK(cuMemcpyHtoD(doffs, offsets, sizeof offsets));
    CHECK(cuMemcpyHtoD(dent, entries, sizeof entries));

    /* strides (batch, seq, head) in elements of contiguous [B][S][H][D] */
    const int64_t sb = (int64_t)SEQ * HEADS * HEAD_DIM, ss = HEADS * HEAD_DIM, sh = HEAD_DIM;
    float scale_log2 = (float)(1.0 / sqrt((double)HEAD_DIM) * 1.4426950408889634);
#if ATTN_TMA
    /* sm_90a (tensor-map ABI): the launcher encodes the q/k/v maps itself
     * and takes kv_heads and the rows of k and v besides */
    CHECK(attn_fwd_dense_bf16_d64(NULL, dq, dk, dv, dout, dlse, sb, ss, sh, sb, ss, sh, sb, ss, sh, sb, ss, sh,
                                  SEQ, SEQ, scale_log2, dclass, doffs, dent, 0, Q_TILES, 0, HEADS, 1, HEADS, SEQ));
#else
    CHECK(attn_fwd_dense_bf16_d64(NULL, dq, dk, dv, dout, dlse, sb, ss, sh, sb, ss, sh, sb, ss, sh, sb, ss, sh,
                                  SEQ, SEQ, scale_log2, dclass, doffs, dent, 0, Q_TILES, 0, HEADS, 1));
#endif
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(o, dout, sizeof o));
    CHECK(cuMemcpyDtoH(lse, dlse, sizeof lse));

    double num = 0, den = 0, lse_err = 0, ref[HEAD_DIM], ref_lse;
    for (int h = 0; h < HEADS; h++)
        for (int i = 0; i < SEQ; i++) {
            reference(q, k, v, h, i, ref, &ref_lse);
            lse_err = fmax(lse_err, fabs(lse[h * SEQ + i] - ref_lse));
            for (int d = 0; d < HEAD_DIM; d++) {
                double x = from_bf16(o[(i * HEADS + h) * HEAD_DIM + d]);
                num += (x - ref[d]) * (x - ref[d]);
                den += ref[d] * ref[d];
            }
        }
    double err = sqrt(num / den); /* NaN if any output is NaN */
    bool ok = err <= 2e-2 && lse_err <= 1e-3;
    printf("%s: attn_fwd_dense_bf16_d64, %d heads x %d tokens: o relative error %.2e, lse max error %.2e: %s\n",
           name, HEADS, SEQ, err, lse_err, ok ? "PASS" : "FAIL");

    CUdeviceptr bufs[] = {dq, dk, dv, dout, dlse, dclass, doffs, dent};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        cuMemFree(bufs[i]);
    CHECK(unload_attn());
    cuDevicePrimaryCtxRelease(dev);
    return ok ? 0 : 1;
}
