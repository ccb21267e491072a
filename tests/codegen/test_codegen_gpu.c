/* Row softmax on a real GPU against a float64 CPU softmax.  The driver is
 * loaded with dlopen; without it or without a device the test exits 77. */
#include "mask_oracle.h"
#include "s2c/compile.h"
#include "s2c/codegen.h"
#include "s2c/pattern.h"
#include "poison.h"
#include "rand_pattern.h"

#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct cuda_api {
    void *lib;
    CUresult (*init)(unsigned);
    CUresult (*device_get_count)(int *);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*device_get_attribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*primary_release)(CUdevice);
    CUresult (*ctx_set_current)(CUcontext);
    CUresult (*module_load_data)(CUmodule *, const void *);
    CUresult (*module_unload)(CUmodule);
    CUresult (*module_get_function)(CUfunction *, CUmodule, const char *);
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*mem_free)(CUdeviceptr);
    CUresult (*htod)(CUdeviceptr, const void *, size_t);
    CUresult (*dtoh)(void *, CUdeviceptr, size_t);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       CUstream, void **, void **);
    CUresult (*sync)(void);
} cuda_api;

static int failures;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
            return;                                                                                \
        }                                                                                          \
    } while (0)
#define CU(call) CHECK((call) == CUDA_SUCCESS, "%s failed", #call)

static int cuda_load(cuda_api *c)
{
    memset(c, 0, sizeof *c);
    c->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!c->lib)
        return 0;
#define SYM(f, n) (*(void **)(&c->f) = dlsym(c->lib, n)) != NULL
    return SYM(init, "cuInit") && SYM(device_get_count, "cuDeviceGetCount") && SYM(device_get, "cuDeviceGet") &&
           SYM(device_get_attribute, "cuDeviceGetAttribute") &&
           SYM(primary_retain, "cuDevicePrimaryCtxRetain") && SYM(primary_release, "cuDevicePrimaryCtxRelease_v2") &&
           SYM(ctx_set_current, "cuCtxSetCurrent") && SYM(module_load_data, "cuModuleLoadData") &&
           SYM(module_unload, "cuModuleUnload") && SYM(module_get_function, "cuModuleGetFunction") &&
           SYM(mem_alloc, "cuMemAlloc_v2") && SYM(mem_free, "cuMemFree_v2") && SYM(htod, "cuMemcpyHtoD_v2") &&
           SYM(dtoh, "cuMemcpyDtoH_v2") && SYM(launch, "cuLaunchKernel") && SYM(sync, "cuCtxSynchronize");
#undef SYM
}

/* Float64 softmax of one row over the kept keys; returns the kept count. */
static int64_t cpu_row(const s2_pattern *p, int h, int64_t pos, const float *x, int64_t sk, double scale,
                       double *ref, unsigned char *kept)
{
    double mx = -INFINITY, sum = 0;
    int64_t nk = 0;
    for (int64_t k = 0; k < sk; k++) {
        kept[k] = s2t_oracle_token_kept(p, h, pos, k);
        if (kept[k]) {
            nk++;
            mx = fmax(mx, scale * x[k]);
        }
    }
    for (int64_t k = 0; k < sk; k++)
        sum += kept[k] ? (ref[k] = exp(scale * x[k] - mx)) : (ref[k] = 0);
    for (int64_t k = 0; k < sk && nk; k++)
        ref[k] /= sum;
    return nk;
}

static void run_case(cuda_api *cu, s2_arch arch, int which, uint64_t seed)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    switch (which) {
    case 0: a.name = "causal_off"; a.num_heads = 8; a.block_size = 64; a.local_blocks = 4; a.vert_stride = 8;
            a.head_sliding_offset = 3; break;
    case 1: a.name = "gqa"; a.num_heads = 16; a.num_kv_heads = 4; a.block_size = 32; a.local_blocks = 2;
            a.vert_stride = 16; break;
    case 2: a.name = "dense2"; a.num_heads = 8; a.block_size = 16; a.local_blocks = 3; a.vert_stride = 4;
            a.num_dense_heads = 2; break;
    case 3: a.name = "bidir"; a.num_heads = 4; a.block_size = 64; a.local_blocks = 3; a.local_right = 2;
            a.vert_stride = 4; a.causal = false; break;
    default: a.name = "empty_rows"; a.num_heads = 4; a.block_size = 16; a.local_blocks = 0; a.vert_stride = 4;
             a.head_sliding_offset = 1; break;
    }
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = NULL;
    CHECK(s2_pattern_from_args(ctx, &a, &set) == S2_OK, "pattern: %s", s2_ctx_message(ctx));
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_target t;
    s2_target_default(&t, arch);
    s2_artifact *art = NULL;
    CHECK(s2_compile_row_softmax(ctx, p, &t, S2_CUBIN_AUTO, &art) == S2_OK, "compile: %s", s2_ctx_message(ctx));

    /* queries are the last Sq of Sk positions; the empty-rows case needs the
     * first query blocks (no stripe at or before them), so it uses Sq = Sk */
    const int64_t B = 2, H = p->heads, Sk = 300 + which * 61, Sq = which == 4 ? Sk : 70 + which * 37;
    const int64_t out_row = Sk + 5; /* padded output rows: the strides are honoured */
    const int64_t in_n = B * H * Sq * Sk, out_n = B * H * Sq * out_row;
    const float scale = 0.7f;
    float *x = malloc((size_t)in_n * sizeof *x), *y = malloc((size_t)out_n * sizeof *y);
    double *ref = malloc((size_t)Sk * sizeof *ref);
    unsigned char *kept = malloc((size_t)Sk);
    CHECK(x && y && ref && kept, "out of memory");
    s2t_rng rng;
    s2t_rng_seed(&rng, seed);
    for (int64_t i = 0; i < in_n; i++)
        x[i] = (float)(s2t_rng_uniform(&rng) * 8.0 - 4.0);
    s2t_poison_f32(y, (size_t)out_n);

    CUmodule mod;
    CUfunction fn;
    CUdeviceptr din, dout;
    CU(cu->module_load_data(&mod, art->cubin));
    CU(cu->module_get_function(&fn, mod, art->kernels[0].name));
    CU(cu->mem_alloc(&din, (size_t)in_n * sizeof *x));
    CU(cu->mem_alloc(&dout, (size_t)out_n * sizeof *y));
    CU(cu->htod(din, x, (size_t)in_n * sizeof *x));
    CU(cu->htod(dout, y, (size_t)out_n * sizeof *y));
    int64_t is[4] = {H * Sq * Sk, Sq * Sk, Sk, 1}, os[4] = {H * Sq * out_row, Sq * out_row, out_row, 1};
    int64_t sq = Sq, sk = Sk;
    float sc = scale;
    void *args[] = {&din, &dout, &sq, &sk, &is[0], &is[1], &is[2], &is[3], &os[0], &os[1], &os[2], &os[3], &sc};
    unsigned gx = (unsigned)((Sq + art->rows_per_block - 1) / art->rows_per_block);
    CU(cu->launch(fn, gx, (unsigned)H, (unsigned)B, (unsigned)art->threads_per_block, 1, 1, 0, NULL, args, NULL));
    CU(cu->sync());
    CU(cu->dtoh(y, dout, (size_t)out_n * sizeof *y));
    cu->mem_free(din);
    cu->mem_free(dout);
    cu->module_unload(mod);

    double worst = 0;
    int64_t empty_rows = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Sq; i++) {
                const float *xr = x + ((b * H + h) * Sq + i) * Sk;
                const float *yr = y + ((b * H + h) * Sq + i) * out_row;
                empty_rows += cpu_row(p, (int)h, Sk - Sq + i, xr, Sk, scale, ref, kept) == 0;
                for (int64_t k = 0; k < Sk; k++) {
                    if (!kept[k]) {
                        CHECK(yr[k] == 0.0f && !signbit(yr[k]),
                              "%s %s seed %llu: masked (b%lld h%lld q%lld k%lld) = %g", p->name,
                              s2_arch_name(arch), (unsigned long long)seed, (long long)b, (long long)h,
                              (long long)i, (long long)k, yr[k]);
                        continue;
                    }
                    double err = fabs(yr[k] - ref[k]) / ref[k];
                    CHECK(err <= 1e-5, "%s %s seed %llu: (b%lld h%lld q%lld k%lld) %.9g vs %.9g (rel %.3g)",
                          p->name, s2_arch_name(arch), (unsigned long long)seed, (long long)b, (long long)h,
                          (long long)i, (long long)k, yr[k], ref[k], err);
                    if (err > worst)
                        worst = err;
                }
                for (int64_t k = Sk; k < out_row; k++) /* padding untouched */
                    CHECK(isnan(yr[k]), "%s: padding written at q%lld k%lld", p->name, (long long)i, (long long)k);
            }
    if (which == 4)
        CHECK(empty_rows > 0, "the empty-rows pattern produced no empty row");
    printf("%-12s %-7s seed %llu: max rel err %.3g, %lld empty rows, %d regs\n", p->name, s2_arch_name(arch),
           (unsigned long long)seed, worst, (long long)empty_rows, art->kernels[0].registers);
    free(x);
    free(y);
    free(ref);
    free(kept);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}

int main(void)
{
    cuda_api cu;
    if (!cuda_load(&cu)) {
        printf("no libcuda.so.1: skipped\n");
        return 77;
    }
    int n = 0, major = 0, minor = 0;
    CUdevice dev;
    if (cu.init(0) != CUDA_SUCCESS || cu.device_get_count(&n) != CUDA_SUCCESS || n < 1 ||
        cu.device_get(&dev, 0) != CUDA_SUCCESS) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    cu.device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    cu.device_get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    s2_arch arch;
    if (s2_arch_for_device(major, minor, &arch) != S2_OK) {
        printf("compute capability %d.%d has no s2c target: skipped\n", major, minor);
        return 77;
    }
    CUcontext ctx;
    if (cu.primary_retain(&ctx, dev) != CUDA_SUCCESS || cu.ctx_set_current(ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "cannot create a context on device 0\n");
        return 1;
    }
    const char *env = getenv("S2C_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
    printf("device CC %d.%d -> %s, seed %llu\n", major, minor, s2_arch_name(arch), (unsigned long long)seed);
    for (int which = 0; which < 5; which++)
        run_case(&cu, arch, which, seed + (uint64_t)which);
    cu.primary_release(dev);
    dlclose(cu.lib);
    if (failures)
        fprintf(stderr, "%d failure(s); rerun with S2C_SEED=%llu\n", failures, (unsigned long long)seed);
    return failures ? 1 : 0;
}
