/* AOT for a sparse pattern, without libs2c: the schedule buffers from the
 * manifest that `s2c compile --emit c` embedded (attn_manifest), built with
 * libs2rt's layout API, then one launch of the generated launcher on random
 * bf16 data, checked against a double-precision reference.
 *
 *   aot-sparse [SEQ]        (default 2048 tokens, batch 1)
 *
 * The kernel reads a packed Merge-Q schedule (s2c/layout.h): per head class
 * and query tile, the key tiles to visit.  libs2rt builds it from the pattern
 * for (q_len, kv_len) and the kernel's tile (s2_layout_new,
 * s2_schedule_build, s2_schedule_pack); it is one buffer, uploaded once and
 * reused by every launch of that shape.  Everything up to cuInit runs on the
 * CPU.  Exits 0 (PASS), 1 (FAIL or an error), 77 without a device, or one
 * the cubin's arch does not run on. */
#include "attn.h"
#include "attn_check.h"

#include <s2c/layout.h>
#include <s2c/manifest.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HEAD_DIM = 64 };

#define CU(call)                                                                        \
    do {                                                                                \
        CUresult r_ = (call);                                                           \
        if (r_ != CUDA_SUCCESS) {                                                       \
            const char *msg_ = NULL;                                                    \
            cuGetErrorString(r_, &msg_);                                                \
            fprintf(stderr, "%s: %s\n", #call, msg_ ? msg_ : "unknown error");          \
            rc = 1;                                                                     \
            goto done;                                                                  \
        }                                                                               \
    } while (0)

/* The schedule of the manifest's first kernel for a prefill of seq tokens. */
static int build_schedule(s2_ctx *ctx, const s2_manifest *m, int64_t seq, const s2_pattern **pat,
                          s2_packed_schedule *packed, int *q_tiles)
{
    const s2_manifest_kernel *mk = s2_manifest_kernel_at(m, 0);
    const s2_pattern *p = mk ? s2_manifest_find_pattern(m, mk->pattern) : NULL;
    s2_layout *l = NULL;
    s2_schedule *s = NULL;
    int ok = 0;
    if (!p) {
        fprintf(stderr, "the manifest holds no kernel with its pattern\n");
        return 0;
    }
    s2_tile_spec tile = {mk->spec.block_m, mk->spec.block_n};
    if (s2_layout_new(ctx, p, seq, seq, &l) == S2_OK && s2_schedule_build(ctx, l, tile, false, &s) == S2_OK &&
        s2_schedule_pack(ctx, s, packed) == S2_OK) {
        *pat = p;
        *q_tiles = (int)s->geom.q_tiles;
        int64_t dense = (int64_t)s->num_classes * s->geom.q_tiles * (s->geom.q_tiles + 1) / 2;
        printf("%s: pattern %s, %d heads (%d kv), block %d, %lld tokens; tile %dx%d: %d head classes, "
               "%lld query tiles, %lld schedule entries (%.0f%% of causal dense), %zu bytes packed\n",
               mk->name, p->name, p->heads, p->kv_heads, p->block_size, (long long)seq, tile.block_m,
               tile.block_n, s->num_classes, (long long)s->geom.q_tiles, (long long)packed->num_entries,
               100.0 * (double)packed->num_entries / (double)dense, packed->size);
        ok = 1;
    } else {
        fprintf(stderr, "schedule: %s\n", s2_ctx_message(ctx));
    }
    s2_schedule_free(s);
    s2_layout_free(l);
    return ok;
}

int main(int argc, char **argv)
{
    int64_t seq = argc > 1 ? strtoll(argv[1], NULL, 10) : 2048;
    if (seq < 1 || seq > (1 << 16)) {
        fprintf(stderr, "usage: aot-sparse [SEQ in 1..65536]\n");
        return 1;
    }
    int rc = 1, q_tiles = 0;
    s2_ctx *ctx = s2_ctx_new();
    s2_manifest *m = NULL;
    const s2_pattern *p = NULL;
    s2_packed_schedule packed = {0};
    uint16_t *q = NULL, *k = NULL, *v = NULL, *o = NULL;
    float *lse = NULL;
    CUdevice dev;
    CUcontext cu = NULL;
    CUdeviceptr bufs[6] = {0}; /* q, k, v, o, lse, schedule */

    if (!ctx)
        return 1;
    if (s2_manifest_parse(ctx, attn_manifest, strlen(attn_manifest), &m) != S2_OK) {
        fprintf(stderr, "manifest: %s\n", s2_ctx_message(ctx));
        goto done;
    }
    if (!build_schedule(ctx, m, seq, &p, &packed, &q_tiles))
        goto done;

    /* the device: none (or the toolkit's stub driver) is a skip */
    int count = 0, major = 0, minor = 0;
    CUresult init = cuInit(0);
    if (init != CUDA_SUCCESS || cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
        const char *msg = NULL;
        cuGetErrorString(init, &msg);
        printf("no CUDA device: skipped (cuInit: %d %s, %d devices)\n", (int)init, msg ? msg : "", count);
        rc = 77;
        goto done;
    }
    CU(cuDeviceGet(&dev, 0));
    CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    /* sm_80 cubins run on any 8.x device, sm_90a ones on 9.0 only */
    if (s2_manifest_arch(m) == S2_ARCH_SM80 ? major != 8 : major != 9 || minor != 0) {
        printf("device of compute capability %d.%d, cubin for %s: skipped\n", major, minor,
               s2_arch_name((s2_arch)s2_manifest_arch(m)));
        rc = 77;
        goto done;
    }
    CU(cuDevicePrimaryCtxRetain(&cu, dev));
    CU(cuCtxSetCurrent(cu));
    CU(load_attn());

    const int heads = p->heads, kv_heads = p->kv_heads;
    const size_t nq = (size_t)seq * heads * HEAD_DIM, nkv = (size_t)seq * kv_heads * HEAD_DIM;
    q = malloc(nq * 2), o = malloc(nq * 2), k = malloc(nkv * 2), v = malloc(nkv * 2);
    lse = malloc((size_t)heads * seq * sizeof *lse);
    if (!q || !o || !k || !v || !lse)
        goto done;
    uint64_t seed = 12345;
    ac_fill(q, nq, 1.5f, &seed);
    ac_fill(k, nkv, 1.5f, &seed);
    ac_fill(v, nkv, 1.0f, &seed);
    const size_t sizes[6] = {nq * 2, nkv * 2, nkv * 2, nq * 2, (size_t)heads * seq * 4, packed.size};
    const void *host[6] = {q, k, v, NULL, NULL, packed.data};
    for (int i = 0; i < 6; i++) {
        CU(cuMemAlloc(&bufs[i], sizes[i]));
        if (host[i])
            CU(cuMemcpyHtoD(bufs[i], host[i], sizes[i]));
        else
            CU(cuMemsetD8(bufs[i], 0xff, sizes[i])); /* NaN: rows the kernel misses show */
    }
    CUdeviceptr sched = bufs[5];

    /* contiguous (batch, seq, head, dim): strides in elements */
    const int64_t qs = (int64_t)heads * HEAD_DIM, kvs = (int64_t)kv_heads * HEAD_DIM;
    const float scale_log2 = (float)(1.0 / sqrt((double)HEAD_DIM) * 1.4426950408889634);
    CU(attn_fwd_sparse_bf16_d64(NULL, bufs[0], bufs[1], bufs[2], bufs[3], bufs[4],
                                seq * qs, qs, HEAD_DIM, seq * kvs, kvs, HEAD_DIM, seq * kvs, kvs, HEAD_DIM,
                                seq * qs, qs, HEAD_DIM, (int32_t)seq, (int32_t)seq, scale_log2,
                                sched + packed.class_of_head_off, sched + packed.offsets_off,
                                sched + packed.entries_off, 0 /* first_q_tile */, q_tiles, 0 /* no seqinfo */,
                                heads, 1 /* batch */
#if ATTN_TMA
                                , kv_heads, seq /* rows of k and v */
#endif
                                ));
    CU(cuCtxSynchronize());
    CU(cuMemcpyDtoH(o, bufs[3], sizes[3]));
    CU(cuMemcpyDtoH(lse, bufs[4], sizes[4]));

    char name[256];
    CU(cuDeviceGetName(name, sizeof name, dev));
    ac_result r = ac_check(p, HEAD_DIM, seq, q, k, v, o, lse);
    printf("%s: o relative error %.2e, lse max error %.2e, %lld pairs kept: %s\n", name, r.o_err, r.lse_err,
           (long long)r.kept, r.ok ? "PASS" : "FAIL");
    rc = r.ok ? 0 : 1;
done:
    for (int i = 0; i < 6; i++)
        if (bufs[i])
            cuMemFree(bufs[i]);
    if (cu) {
        unload_attn();
        cuDevicePrimaryCtxRelease(dev);
    }
    free(q), free(k), free(v), free(o), free(lse);
    s2_packed_schedule_free(&packed);
    s2_manifest_free(m);
    s2_ctx_free(ctx);
    return rc;
}
