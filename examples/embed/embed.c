/* Embedding the s2c runtime: run attention kernels that `s2c compile` made at
 * build time, with no LLVM and no CUDA toolkit in the program.
 *
 *   embed [CUBIN_DIR]     (default: the build directory that holds model_<arch>.cubin)
 *
 * The cubin says what it holds (its manifest: kernels, resolved tunables,
 * patterns), so the program needs no pattern file: for every kernel it
 * rebuilds the pattern's Merge-Q schedule from the manifest, launches the
 * kernel through the documented forward ABI (s2c/attention.h) on random
 * data, and compares the output and LSE with the float64 CPU reference.
 * Prints PASS/FAIL per kernel and shape; exits 0 when all pass, 1 on a
 * failure, 77 without a driver or a device of compute capability 8.x or 9.x.
 * S2C_SEED=N repeats a run. */
#include "s2c/attention.h"
#include "s2c/layout.h"
#include "s2c/ref.h"
#include "s2c/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef EMBED_CUBIN_DIR
#define EMBED_CUBIN_DIR "."
#endif

enum { EXIT_SKIP = 77 };

typedef struct shape {
    int batch;
    int64_t q_len, kv_len;   /* queries are the last q_len of kv_len positions */
} shape;

/* a full prefill whose length is no multiple of any tile, and a chunk of
 * queries at the end of a longer context */
static const shape shapes[] = {{2, 1000, 1000}, {1, 200, 1000}};

typedef struct run_result {
    double o_err, lse_err;
    int64_t bad_lse, bad_o;
} run_result;

static bool kept(const void *user, int q_head, int64_t qpos, int64_t kpos)
{
    return s2_token_kept((const s2_pattern *)user, q_head, qpos, kpos);
}

static s2_status read_file(const char *path, void **data, size_t *size)
{
    FILE *f = fopen(path, "rb");
    long n = -1;
    *data = NULL;
    if (!f)
        return S2_ERR_IO;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0)
        *data = malloc((size_t)n);
    if (*data && fread(*data, 1, (size_t)n, f) != (size_t)n) {
        free(*data);
        *data = NULL;
    }
    fclose(f);
    *size = *data ? (size_t)n : 0;
    return *data ? S2_OK : S2_ERR_IO;
}

/* Host buffers of one problem and their device copies. */
typedef struct problem {
    uint16_t *q, *k, *v, *o;
    float *lse, *lse_ref;
    double *o_ref;
    s2_devptr dq, dk, dv, dout, dlse, dsched;
} problem;

static void problem_free(s2_ctx *ctx, s2_device *dev, problem *pr)
{
    s2_devptr d[] = {pr->dq, pr->dk, pr->dv, pr->dout, pr->dlse, pr->dsched};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        s2_mem_free(ctx, dev, d[i]);
    free(pr->q);
    free(pr->k);
    free(pr->v);
    free(pr->o);
    free(pr->lse);
    free(pr->lse_ref);
    free(pr->o_ref);
}

static s2_status upload(s2_ctx *ctx, s2_device *dev, const void *host, size_t bytes, s2_devptr *d)
{
    s2_status st = s2_mem_alloc(ctx, dev, bytes, d);
    return st == S2_OK ? s2_memcpy_h2d(ctx, dev, *d, host, bytes) : st;
}

/* The kernel's launch: grid (q_tiles, heads, batch), the parameters in ABI order. */
static s2_status launch(s2_ctx *ctx, s2_kernel *kern, const s2_manifest_kernel *mk, const s2_pattern *p,
                        const shape *sh, const problem *pr, const s2_schedule *sched, const s2_packed_schedule *pk)
{
    const int H = p->heads, HK = p->kv_heads, D = mk->spec.head_dim;
    int64_t qs[3] = {sh->q_len * H * D, H * D, D}, ks[3] = {sh->kv_len * HK * D, HK * D, D};
    int32_t q_len = (int32_t)sh->q_len, kv_len = (int32_t)sh->kv_len;
    float scale_log2 = (float)(1.0 / sqrt((double)D) * M_LOG2E);
    s2_devptr cls = pr->dsched + pk->class_of_head_off, offs = pr->dsched + pk->offsets_off;
    s2_devptr ents = pr->dsched + pk->entries_off;
    int32_t first = (int32_t)sched->geom.first_q_tile, q_tiles = (int32_t)sched->geom.q_tiles;
    s2_devptr dq = pr->dq, dk = pr->dk, dv = pr->dv, dout = pr->dout, dlse = pr->dlse;
    void *args[] = {&dq, &dk, &dv, &dout, &dlse,
                    &qs[0], &qs[1], &qs[2], &ks[0], &ks[1], &ks[2], &ks[0], &ks[1], &ks[2], &qs[0], &qs[1], &qs[2],
                    &q_len, &kv_len, &scale_log2, &cls, &offs, &ents, &first, &q_tiles};
    s2_launch_cfg cfg = {.grid = {(uint32_t)q_tiles, (uint32_t)H, (uint32_t)sh->batch},
                         .block = {(uint32_t)mk->threads, 1, 1},
                         .smem_bytes = (uint32_t)mk->smem_bytes};
    return s2_kernel_launch(ctx, kern, &cfg, args);
}

/* Relative Frobenius error of o; LSE: -inf where the reference has -inf,
 * else within 1e-3. */
static void compare(const s2_manifest_kernel *mk, const s2_pattern *p, const shape *sh, const problem *pr,
                    run_result *r)
{
    const int H = p->heads, D = mk->spec.head_dim;
    s2_tensor o = s2_tensor_bshd(pr->o, mk->spec.dtype, sh->q_len, H, D);
    s2_tensor ref = s2_tensor_bshd(pr->o_ref, S2_DTYPE_F64, sh->q_len, H, D);
    double num = 0, den = 0;
    memset(r, 0, sizeof *r);
    for (int b = 0; b < sh->batch; b++)
        for (int h = 0; h < H; h++)
            for (int64_t i = 0; i < sh->q_len; i++) {
                size_t li = ((size_t)b * H + h) * (size_t)sh->q_len + (size_t)i;
                float got = pr->lse[li], want = pr->lse_ref[li];
                bool empty = isinf(want) && want < 0;
                if (empty ? !(isinf(got) && got < 0) : !(fabs((double)got - want) <= 1e-3))
                    r->bad_lse++;
                else if (!empty)
                    r->lse_err = fmax(r->lse_err, fabs((double)got - want));
                for (int d = 0; d < D; d++) {
                    double x = s2_tensor_get(&o, b, i, h, d), y = s2_tensor_get(&ref, b, i, h, d);
                    r->bad_o += isnan(x);
                    num += (x - y) * (x - y);
                    den += y * y;
                }
            }
    r->o_err = den > 0 ? sqrt(num / den) : sqrt(num);
}

/* One kernel on one shape: schedule, data, launch, reference, comparison. */
static s2_status run_one(s2_ctx *ctx, s2_device *dev, s2_module *mod, const s2_manifest *m,
                         const s2_manifest_kernel *mk, const shape *sh, uint64_t seed, run_result *r)
{
    const s2_pattern *p = s2_manifest_find_pattern(m, mk->pattern);
    if (!p || mk->spec.kind != S2_KERNEL_FWD) {
        printf("%s: not a forward kernel with its pattern in the manifest\n", mk->name);
        return S2_ERR_INVALID;
    }
    const int B = sh->batch, H = p->heads, HK = p->kv_heads, D = mk->spec.head_dim;
    const s2_dtype dt = mk->spec.dtype;
    const size_t nq = (size_t)B * sh->q_len * H * D, nk = (size_t)B * sh->kv_len * HK * D;
    const size_t nlse = (size_t)B * H * sh->q_len;
    problem pr = {0};
    s2_layout *lay = NULL;
    s2_schedule *sched = NULL;
    s2_packed_schedule pk = {0};
    s2_kernel *kern = NULL;

    /* the schedule for the kernel's tile, rebuilt from the manifest's pattern */
    s2_status st = s2_layout_new(ctx, p, sh->q_len, sh->kv_len, &lay);
    if (st == S2_OK)
        st = s2_schedule_build(ctx, lay, (s2_tile_spec){mk->spec.block_m, mk->spec.block_n}, false, &sched);
    if (st == S2_OK)
        st = s2_schedule_pack(ctx, sched, &pk);
    if (st == S2_OK)
        st = s2_kernel_get(ctx, mod, mk->name, &kern);
    if (st != S2_OK)
        goto done;

    pr.q = malloc(nq * 2), pr.o = malloc(nq * 2), pr.k = malloc(nk * 2), pr.v = malloc(nk * 2);
    pr.lse = malloc(nlse * sizeof *pr.lse), pr.lse_ref = malloc(nlse * sizeof *pr.lse_ref);
    pr.o_ref = malloc(nq * sizeof *pr.o_ref);
    if (!pr.q || !pr.o || !pr.k || !pr.v || !pr.lse || !pr.lse_ref || !pr.o_ref) {
        st = S2_ERR_NOMEM;
        goto done;
    }
    int64_t qx[4] = {B, sh->q_len, H, D}, kx[4] = {B, sh->kv_len, HK, D};
    s2_tensor q = s2_tensor_bshd(pr.q, dt, sh->q_len, H, D);
    s2_tensor k = s2_tensor_bshd(pr.k, dt, sh->kv_len, HK, D), v = s2_tensor_bshd(pr.v, dt, sh->kv_len, HK, D);
    s2_tensor_fill_random(&q, qx, seed, -1.5, 1.5);
    s2_tensor_fill_random(&k, kx, seed + 1, -1.5, 1.5);
    s2_tensor_fill_random(&v, kx, seed + 2, -1.0, 1.0);
    memset(pr.o, 0xff, nq * 2);   /* NaN in bf16 and fp16: rows the kernel misses stay NaN */
    for (size_t i = 0; i < nlse; i++)
        pr.lse[i] = NAN;

    st = upload(ctx, dev, pr.q, nq * 2, &pr.dq);
    if (st == S2_OK)
        st = upload(ctx, dev, pr.k, nk * 2, &pr.dk);
    if (st == S2_OK)
        st = upload(ctx, dev, pr.v, nk * 2, &pr.dv);
    if (st == S2_OK)
        st = upload(ctx, dev, pr.o, nq * 2, &pr.dout);
    if (st == S2_OK)
        st = upload(ctx, dev, pr.lse, nlse * sizeof *pr.lse, &pr.dlse);
    if (st == S2_OK)
        st = upload(ctx, dev, pk.data, pk.size, &pr.dsched);
    if (st == S2_OK)
        st = launch(ctx, kern, mk, p, sh, &pr, sched, &pk);
    if (st == S2_OK)
        st = s2_device_synchronize(ctx, dev);
    if (st == S2_OK)
        st = s2_memcpy_d2h(ctx, dev, pr.o, pr.dout, nq * 2);
    if (st == S2_OK)
        st = s2_memcpy_d2h(ctx, dev, pr.lse, pr.dlse, nlse * sizeof *pr.lse);
    if (st != S2_OK)
        goto done;

    s2_tensor ref = s2_tensor_bshd(pr.o_ref, S2_DTYPE_F64, sh->q_len, H, D);
    s2_ref_problem rp = {.batch = B, .heads = H, .kv_heads = HK, .head_dim = D, .q_len = sh->q_len,
                         .kv_len = sh->kv_len, .causal = p->causal, .mask = kept, .mask_user = p};
    st = s2_ref_forward(ctx, &rp, &q, &k, &v, &ref, pr.lse_ref);
    if (st == S2_OK)
        compare(mk, p, sh, &pr, r);
done:
    problem_free(ctx, dev, &pr);
    s2_kernel_free(kern);
    s2_packed_schedule_free(&pk);
    s2_schedule_free(sched);
    s2_layout_free(lay);
    return st;
}

/* model_<arch>.cubin for the device's compute capability. */
static const char *arch_of(const s2_device_info *in)
{
    return in->cc_major == 9 ? "sm_90a" : in->cc_major == 8 ? "sm_80" : NULL;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : EMBED_CUBIN_DIR;
    const char *seed_env = getenv("S2C_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 10) : (uint64_t)time(NULL);
    s2_ctx *ctx = s2_ctx_new();
    if (!ctx)
        return 1;
    int rc = 1, count = 0;
    s2_device *dev = NULL;
    s2_module *mod = NULL;
    s2_manifest *m = NULL;
    void *image = NULL;
    size_t size = 0;
    char path[4096];

    s2_status st = s2_device_count(ctx, &count);
    if (st == S2_ERR_NO_DRIVER || st == S2_ERR_NO_DEVICE || (st == S2_OK && count == 0)) {
        printf("no CUDA driver or device (%s): skipped\n", s2_ctx_message(ctx));
        rc = EXIT_SKIP;
        goto done;
    }
    if (st == S2_OK)
        st = s2_device_open(ctx, 0, &dev);
    if (st != S2_OK)
        goto fail;
    const s2_device_info *in = s2_device_get_info(dev);
    const char *arch = arch_of(in);
    if (!arch) {
        printf("%s: compute capability %d.%d has no cubin here: skipped\n", in->name, in->cc_major, in->cc_minor);
        rc = EXIT_SKIP;
        goto done;
    }
    snprintf(path, sizeof path, "%s/model_%s.cubin", dir, arch);
    if (read_file(path, &image, &size) != S2_OK) {
        printf("%s: cannot be read (the build makes it with s2c compile)\n", path);
        goto done;
    }
    const char *text = NULL;
    size_t len = 0;
    if (st == S2_OK)
        st = s2_cubin_find_manifest(ctx, image, size, &text, &len);
    if (st == S2_OK)
        st = s2_manifest_parse(ctx, text, len, &m);
    if (st == S2_OK)
        st = s2_module_load_data(ctx, dev, image, size, &mod);
    if (st != S2_OK)
        goto fail;
    printf("%s (cc %d.%d), %s: s2c %s, %d kernels, seed %llu (S2C_SEED to repeat)\n", in->name, in->cc_major,
           in->cc_minor, path, s2_manifest_generator(m), s2_manifest_num_kernels(m), (unsigned long long)seed);
    printf("%-34s %-5s %4s %5s %5s %4s %4s %10s %10s %s\n", "kernel", "dtype", "B", "Sq", "Sk", "bm", "bn",
           "o_relerr", "lse_err", "result");
    int failed = 0;
    for (int i = 0; i < s2_manifest_num_kernels(m); i++) {
        const s2_manifest_kernel *mk = s2_manifest_kernel_at(m, i);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            run_result r;
            st = run_one(ctx, dev, mod, m, mk, &shapes[s], seed + 101 * (uint64_t)(i * 8 + (int)s), &r);
            if (st != S2_OK)
                goto fail;
            double tol = mk->spec.dtype == S2_DTYPE_BF16 ? 2e-2 : 5e-3;
            bool ok = r.bad_o == 0 && r.bad_lse == 0 && r.o_err <= tol;
            failed += !ok;
            printf("%-34s %-5s %4d %5lld %5lld %4d %4d %10.2e %10.2e %s", mk->name, s2_dtype_name(mk->spec.dtype),
                   shapes[s].batch, (long long)shapes[s].q_len, (long long)shapes[s].kv_len, mk->spec.block_m,
                   mk->spec.block_n, r.o_err, r.lse_err, ok ? "PASS" : "FAIL");
            if (!ok)
                printf(" (%lld NaN outputs, %lld bad lse, tolerance %.0e)", (long long)r.bad_o,
                       (long long)r.bad_lse, tol);
            printf("\n");
        }
    }
    printf("%s\n", failed ? "FAIL" : "PASS");
    rc = failed ? 1 : 0;
    goto done;
fail:
    printf("error: %s (%s)\n", s2_ctx_message(ctx), s2_status_name(st));
    rc = 1;
done:
    s2_manifest_free(m);
    s2_module_free(mod);
    s2_device_free(dev);
    free(image);
    s2_ctx_free(ctx);
    return rc;
}
