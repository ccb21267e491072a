/* GPU tests of runtime/ (suite gpu): hand-written PTX from data/ launched
 * through the runtime with random inputs and poisoned outputs, from one
 * thread and from four at once, and on an adopted context.  Exits 77 when
 * there is no driver or device.  CUDA is initialised inside each (forked)
 * test only: the parent probes in a child of its own, since a CUDA context
 * does not survive fork. */
#include "rt_cuda.h"
#include "s2c/runtime.h"
#include "check_main.h"

#include <check.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#ifndef S2C_RUNTIME_TEST_DATA
#error "S2C_RUNTIME_TEST_DATA must name tests/runtime/data"
#endif

#define SMEM_BYTES (100 * 1024)  /* dynamic shared memory of the main smem launch */
#define SMEM_BLOCKS 8
#define VADD_N 100003            /* not a multiple of the block size */
#define NTHREADS 4
#define ITERS 16

static unsigned base_seed;
static const char *data_dir = S2C_RUNTIME_TEST_DATA; /* or $S2C_RUNTIME_DATA */

/* Direct driver access, for what the runtime does not do itself: creating a
 * context to adopt and asking which context is current. */
typedef struct raw_driver {
    PFN_cuInit_v2000 Init;
    PFN_cuDeviceGet_v2000 DeviceGet;
    PFN_cuCtxCreate_v3020 CtxCreate;
    PFN_cuCtxDestroy_v4000 CtxDestroy;
    PFN_cuCtxGetCurrent_v4000 CtxGetCurrent;
    PFN_cuCtxSynchronize_v2000 CtxSynchronize;
} raw_driver;

static void *raw_sym(PFN_cuGetProcAddress_v12000 gpa, const char *name, int version)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult q;
    CUresult r = gpa(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &q);
    ck_assert_msg(r == CUDA_SUCCESS && fn, "cuGetProcAddress(%s) = %d", name, (int)r);
    return fn;
}

static raw_driver raw_driver_load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(h != NULL, "dlopen libcuda.so.1: %s", dlerror());
    PFN_cuGetProcAddress_v12000 gpa = (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
    ck_assert_msg(gpa != NULL, "libcuda.so.1 has no cuGetProcAddress_v2");
    raw_driver d;
    d.Init = (PFN_cuInit_v2000)raw_sym(gpa, "cuInit", 12000);
    d.DeviceGet = (PFN_cuDeviceGet_v2000)raw_sym(gpa, "cuDeviceGet", 12000);
    /* Ask for the 3.2 ABI by name: later versions of cuCtxCreate changed it. */
    d.CtxCreate = (PFN_cuCtxCreate_v3020)raw_sym(gpa, "cuCtxCreate", 3020);
    d.CtxDestroy = (PFN_cuCtxDestroy_v4000)raw_sym(gpa, "cuCtxDestroy", 12000);
    d.CtxGetCurrent = (PFN_cuCtxGetCurrent_v4000)raw_sym(gpa, "cuCtxGetCurrent", 12000);
    d.CtxSynchronize = (PFN_cuCtxSynchronize_v2000)raw_sym(gpa, "cuCtxSynchronize", 12000);
    ck_assert_int_eq(d.Init(0), CUDA_SUCCESS);
    return d;
}

#define OK(call)                                                                       \
    do {                                                                               \
        s2_status st_ = (call);                                                        \
        ck_assert_msg(st_ == S2_OK, "%s: %s: %s", #call, s2_status_name(st_),           \
                      s2_ctx_message(ctx));                                            \
    } while (0)

static void assert_msg_has(const s2_ctx *ctx, const char *needle)
{
    ck_assert_msg(strstr(s2_ctx_message(ctx), needle) != NULL, "message \"%s\" lacks \"%s\"",
                  s2_ctx_message(ctx), needle);
}

/* Random floats from a small xorshift, any sign and a wide range of exponents. */
static uint32_t xorshift(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static void fill_random(float *x, size_t n, uint32_t *s)
{
    for (size_t i = 0; i < n; i++)
        x[i] = ((float)(xorshift(s) % 2000001) - 1000000.0f) / (float)(1 + xorshift(s) % 1000);
}

static char *read_data(const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", data_dir, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n);
    ck_assert(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

typedef struct kernels {
    s2_cumodule *vadd_mod, *smem_mod;
    s2_cufunction *vadd, *smem;
} kernels;

/* Both images from memory, not NUL-terminated. */
static kernels load_kernels(s2_ctx *ctx, s2_device *dev)
{
    kernels K = {0};
    size_t len;
    char *ptx = read_data("vadd.ptx", &len);
    OK(s2_cumodule_load_data(ctx, dev, ptx, len, &K.vadd_mod));
    free(ptx);
    ptx = read_data("smem_reverse.ptx", &len);
    OK(s2_cumodule_load_data(ctx, dev, ptx, len, &K.smem_mod));
    free(ptx);
    OK(s2_cufunction_get(ctx, K.vadd_mod, "vadd", &K.vadd));
    OK(s2_cufunction_get(ctx, K.smem_mod, "smem_reverse", &K.smem));
    return K;
}

static void free_kernels(kernels *K)
{
    s2_cufunction_free(K->vadd);
    s2_cufunction_free(K->smem);
    s2_cumodule_free(K->vadd_mod);
    s2_cumodule_free(K->smem_mod);
}

/* One vadd of n random elements on `stream`; returns the number of wrong
 * outputs (bitwise compare with the host's float sum) and fills why. */
static size_t run_vadd(s2_ctx *ctx, const s2_device *dev, s2_cufunction *k, void *stream, size_t n,
                       uint32_t seed, char *why, size_t why_len)
{
    size_t bytes = n * sizeof(float), bad = 0;
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    s2_devptr da = 0, db = 0, dc = 0;
    uint32_t s = seed | 1;
    fill_random(a, n, &s);
    fill_random(b, n, &s);
    uint32_t n32 = (uint32_t)n;
    void *args[] = {&da, &db, &dc, &n32};
    s2_launch_cfg cfg = {.grid = {(uint32_t)((n + 255) / 256), 1, 1}, .block = {256, 1, 1},
                         .stream = stream};
    if (s2_mem_alloc(ctx, dev, bytes, &da) || s2_mem_alloc(ctx, dev, bytes, &db) ||
        s2_mem_alloc(ctx, dev, bytes + 64, &dc) || s2_memcpy_h2d(ctx, dev, da, a, bytes) ||
        s2_memcpy_h2d(ctx, dev, db, b, bytes) || s2_memset_d8(ctx, dev, dc, 0xFF, bytes + 64) ||
        s2_cufunction_launch(ctx, k, &cfg, args) || s2_stream_synchronize(ctx, dev, stream) ||
        s2_memcpy_d2h(ctx, dev, c, dc, bytes)) {
        snprintf(why, why_len, "vadd: %s", s2_ctx_message(ctx));
        bad = n;
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        float want = a[i] + b[i];
        if (memcmp(&want, &c[i], sizeof want) != 0) {
            if (!bad)
                snprintf(why, why_len, "vadd[%zu] = %a, want %a (seed %u)", i, c[i], want, seed);
            bad++;
        }
    }
    /* The poisoned tail past n must be untouched. */
    uint32_t tail[16];
    if (!bad && s2_memcpy_d2h(ctx, dev, tail, dc + bytes, sizeof tail) == S2_OK)
        for (int i = 0; i < 16; i++)
            if (tail[i] != 0xFFFFFFFFu) {
                snprintf(why, why_len, "vadd wrote past n (seed %u)", seed);
                bad++;
            }
done:
    s2_mem_free(ctx, dev, da);
    s2_mem_free(ctx, dev, db);
    s2_mem_free(ctx, dev, dc);
    free(a);
    free(b);
    free(c);
    return bad;
}

/* smem_reverse over `blocks` blocks of smem_bytes each; count of wrong outputs. */
static size_t run_smem(s2_ctx *ctx, const s2_device *dev, s2_cufunction *k, void *stream,
                       uint32_t smem_bytes, uint32_t blocks, uint32_t seed, char *why, size_t why_len)
{
    uint32_t e = smem_bytes / 4;
    size_t n = (size_t)e * blocks, bytes = n * sizeof(float), bad = 0;
    float *in = malloc(bytes), *out = malloc(bytes);
    s2_devptr din = 0, dout = 0;
    uint32_t s = seed | 1;
    fill_random(in, n, &s);
    void *args[] = {&din, &dout, &e};
    s2_launch_cfg cfg = {.grid = {blocks, 1, 1}, .block = {256, 1, 1}, .smem_bytes = smem_bytes,
                         .stream = stream};
    if (s2_mem_alloc(ctx, dev, bytes, &din) || s2_mem_alloc(ctx, dev, bytes, &dout) ||
        s2_memcpy_h2d(ctx, dev, din, in, bytes) || s2_memset_d8(ctx, dev, dout, 0xFF, bytes) ||
        s2_check_device_ptr(ctx, dev, din, bytes, 16, "in") ||
        s2_check_device_ptr(ctx, dev, dout, bytes, 16, "out") ||
        s2_cufunction_launch(ctx, k, &cfg, args) || s2_stream_synchronize(ctx, dev, stream) ||
        s2_memcpy_d2h(ctx, dev, out, dout, bytes)) {
        snprintf(why, why_len, "smem_reverse: %s", s2_ctx_message(ctx));
        bad = n;
        goto done;
    }
    for (uint32_t blk = 0; blk < blocks; blk++)
        for (uint32_t j = 0; j < e; j++) {
            size_t o = (size_t)blk * e + j, i = (size_t)blk * e + (e - 1 - j);
            if (memcmp(&out[o], &in[i], sizeof(float)) != 0) {
                if (!bad)
                    snprintf(why, why_len, "smem_reverse out[%zu] = %a, want %a (seed %u)", o,
                             out[o], in[i], seed);
                bad++;
            }
        }
done:
    s2_mem_free(ctx, dev, din);
    s2_mem_free(ctx, dev, dout);
    free(in);
    free(out);
    return bad;
}

START_TEST(launch_on_stream)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    OK(s2_device_open(ctx, 0, &dev));
    const s2_device_info *in = s2_device_get_info(dev);
    fprintf(stderr, "device 0: %s, sm_%d%d, %d SMs, smem opt-in %zu, driver %d\n", in->name,
            in->cc_major, in->cc_minor, in->sm_count, in->smem_per_block_optin, in->cuda_driver_version);
    ck_assert_int_gt(in->sm_count, 0);
    ck_assert_uint_ge(in->smem_per_block_optin, SMEM_BYTES);
    kernels K = load_kernels(ctx, dev);
    s2_cufunction_attrs at;
    OK(s2_cufunction_get_attrs(ctx, K.smem, &at));
    ck_assert_int_gt(at.num_regs, 0);
    ck_assert_int_ge(at.max_threads_per_block, 256);
    ck_assert_int_eq(at.static_smem_bytes, 0);
    ck_assert_int_lt(at.max_dynamic_smem_bytes, SMEM_BYTES); /* not raised yet */

    void *stream = NULL;
    OK(s2_stream_create(ctx, dev, &stream));
    s2_event *e0 = NULL, *e1 = NULL;
    OK(s2_event_create(ctx, dev, &e0));
    OK(s2_event_create(ctx, dev, &e1));
    char why[512] = "";
    OK(s2_event_record(ctx, e0, stream));
    size_t bad = run_vadd(ctx, dev, K.vadd, stream, VADD_N, base_seed, why, sizeof why);
    ck_assert_msg(bad == 0, "%zu wrong: %s", bad, why);
    bad = run_smem(ctx, dev, K.smem, stream, SMEM_BYTES, SMEM_BLOCKS, base_seed + 1, why, sizeof why);
    ck_assert_msg(bad == 0, "%zu wrong: %s", bad, why);
    OK(s2_event_record(ctx, e1, stream));
    float ms = -1;
    OK(s2_event_elapsed_ms(ctx, e0, e1, &ms));
    ck_assert(ms >= 0.0f);
    OK(s2_cufunction_get_attrs(ctx, K.smem, &at));
    ck_assert_int_eq(at.max_dynamic_smem_bytes, SMEM_BYTES);

    /* Beyond the opt-in maximum the runtime refuses before the driver sees it. */
    s2_launch_cfg cfg = {.grid = {1, 1, 1}, .block = {256, 1, 1},
                         .smem_bytes = (uint32_t)in->smem_per_block_optin + 16, .stream = stream};
    ck_assert_int_eq(s2_cufunction_launch(ctx, K.smem, &cfg, NULL), S2_ERR_INVALID);
    assert_msg_has(ctx, "opt-in");
    /* The legacy NULL stream works too. */
    bad = run_vadd(ctx, dev, K.vadd, NULL, 1000, base_seed + 2, why, sizeof why);
    ck_assert_msg(bad == 0, "%zu wrong: %s", bad, why);

    s2_event_free(e0);
    s2_event_free(e1);
    OK(s2_stream_destroy(ctx, dev, stream));
    free_kernels(&K);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(pointer_checks_on_device)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    OK(s2_device_open(ctx, 0, &dev));
    s2_devptr p = 0;
    OK(s2_mem_alloc(ctx, dev, 4096, &p));
    OK(s2_check_device_ptr(ctx, dev, p, 4096, 256, "p"));
    OK(s2_check_device_ptr(ctx, dev, p + 1024, 3072, 16, "p"));
    ck_assert_int_eq(s2_check_device_ptr(ctx, dev, p + 2, 4, 16, "p"), S2_ERR_INVALID);
    assert_msg_has(ctx, "not aligned to 16 bytes");
    /* The driver may round an allocation's range up, so overrun it by far. */
    ck_assert_int_eq(s2_check_device_ptr(ctx, dev, p + 1024, (size_t)1 << 30, 1, "p"), S2_ERR_INVALID);
    assert_msg_has(ctx, "but its allocation ends after");
    ck_assert_int_eq(s2_check_device_ptr(ctx, dev, 0, 4, 4, "p"), S2_ERR_INVALID);
    void *host = malloc(4096);
    ck_assert_int_eq(s2_check_device_ptr(ctx, dev, (s2_devptr)(uintptr_t)host, 64, 16, "h"),
                     S2_ERR_INVALID);
    fprintf(stderr, "host pointer: %s\n", s2_ctx_message(ctx));
    free(host);
    OK(s2_mem_free(ctx, dev, p));
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

typedef struct worker {
    int id;
    s2_device *dev;
    kernels *K;
    raw_driver *raw;
    size_t bad;
    int leaked_ctx;   /* a context was left current on the worker thread */
    char why[512];
} worker;

static int worker_main(void *arg)
{
    worker *w = arg;
    s2_ctx *ctx = s2_ctx_new();
    void *stream = NULL;
    /* Different sizes above 48 KB, so the workers race to raise the limit. */
    uint32_t smem = (64u + 12u * (uint32_t)w->id) * 1024u;
    if (s2_stream_create(ctx, w->dev, &stream) != S2_OK) {
        snprintf(w->why, sizeof w->why, "stream: %s", s2_ctx_message(ctx));
        w->bad = 1;
    }
    for (int it = 0; it < ITERS && !w->bad; it++) {
        uint32_t seed = base_seed + 1000u * (uint32_t)w->id + (uint32_t)it;
        w->bad += run_vadd(ctx, w->dev, w->K->vadd, stream, 4096 + 77u * (uint32_t)it, seed,
                           w->why, sizeof w->why);
        if (!w->bad)
            w->bad += run_smem(ctx, w->dev, w->K->smem, stream, smem, 4, seed, w->why, sizeof w->why);
    }
    CUcontext cur = NULL;
    w->raw->CtxGetCurrent(&cur);
    w->leaked_ctx = cur != NULL;
    s2_stream_destroy(ctx, w->dev, stream);
    s2_ctx_free(ctx);
    return 0;
}

START_TEST(four_threads_share_kernels)
{
    raw_driver raw = raw_driver_load();
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    OK(s2_device_open(ctx, 0, &dev));
    kernels K = load_kernels(ctx, dev);
    worker w[NTHREADS];
    thrd_t t[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (worker){.id = i, .dev = dev, .K = &K, .raw = &raw};
        ck_assert_int_eq(thrd_create(&t[i], worker_main, &w[i]), thrd_success);
    }
    for (int i = 0; i < NTHREADS; i++)
        ck_assert_int_eq(thrd_join(t[i], NULL), thrd_success);
    for (int i = 0; i < NTHREADS; i++) {
        ck_assert_msg(w[i].bad == 0, "thread %d: %zu wrong: %s", i, w[i].bad, w[i].why);
        ck_assert_msg(!w[i].leaked_ctx, "thread %d was left with a current context", i);
    }
    s2_cufunction_attrs at;
    OK(s2_cufunction_get_attrs(ctx, K.smem, &at));
    ck_assert_int_eq(at.max_dynamic_smem_bytes, (64 + 12 * (NTHREADS - 1)) * 1024);
    free_kernels(&K);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(adopt_existing_context)
{
    raw_driver raw = raw_driver_load();
    CUdevice cu_dev;
    CUcontext mine = NULL, cur = NULL;
    ck_assert_int_eq(raw.DeviceGet(&cu_dev, 0), CUDA_SUCCESS);
    ck_assert_int_eq(raw.CtxCreate(&mine, 0, cu_dev), CUDA_SUCCESS); /* current from now on */
    s2_ctx *ctx = s2_ctx_new();
    s2_device *adopted = NULL, *primary = NULL;
    OK(s2_device_adopt_current(ctx, &adopted));
    ck_assert_ptr_eq(s2_device_cu_context(adopted), mine);
    ck_assert_int_eq(s2_device_get_info(adopted)->ordinal, 0);
    OK(s2_device_open(ctx, 0, &primary));
    ck_assert_ptr_ne(s2_device_cu_context(primary), mine);

    kernels K = load_kernels(ctx, adopted);
    char why[512] = "";
    size_t bad = run_vadd(ctx, adopted, K.vadd, NULL, 5000, base_seed + 7, why, sizeof why);
    ck_assert_msg(bad == 0, "%zu wrong: %s", bad, why);
    bad = run_smem(ctx, adopted, K.smem, NULL, SMEM_BYTES, 2, base_seed + 8, why, sizeof why);
    ck_assert_msg(bad == 0, "%zu wrong: %s", bad, why);

    /* Memory of the primary context is not memory of the adopted one. */
    s2_devptr p = 0;
    OK(s2_mem_alloc(ctx, primary, 1024, &p));
    OK(s2_check_device_ptr(ctx, primary, p, 1024, 16, "p"));
    ck_assert_int_eq(s2_check_device_ptr(ctx, adopted, p, 1024, 16, "p"), S2_ERR_INVALID);
    assert_msg_has(ctx, "another CUDA context");
    OK(s2_mem_free(ctx, primary, p));

    free_kernels(&K);
    s2_device_free(adopted);
    s2_device_free(primary);
    /* The caller's context is still current and alive. */
    ck_assert_int_eq(raw.CtxGetCurrent(&cur), CUDA_SUCCESS);
    ck_assert_ptr_eq(cur, mine);
    ck_assert_int_eq(raw.CtxSynchronize(), CUDA_SUCCESS);
    ck_assert_int_eq(raw.CtxDestroy(mine), CUDA_SUCCESS);
    s2_ctx_free(ctx);
}
END_TEST

/* 0: usable device (of compute capability 7.5 or newer, for the PTX); 77: none. */
static int probe_in_child(void)
{
    pid_t pid = fork();
    if (pid < 0)
        return 77;
    if (pid == 0) {
        s2_ctx *ctx = s2_ctx_new();
        s2_device *dev = NULL;
        s2_status st = s2_device_open(ctx, 0, &dev);
        if (st != S2_OK) {
            fprintf(stderr, "skip: %s: %s\n", s2_status_name(st), s2_ctx_message(ctx));
            _exit(st == S2_ERR_NO_DRIVER || st == S2_ERR_NO_DEVICE ? 77 : 1);
        }
        const s2_device_info *in = s2_device_get_info(dev);
        int ok = in->cc_major * 10 + in->cc_minor >= 75;
        if (!ok)
            fprintf(stderr, "skip: %s is sm_%d%d, the test PTX needs sm_75\n", in->name,
                    in->cc_major, in->cc_minor);
        s2_device_free(dev);
        s2_ctx_free(ctx);
        _exit(ok ? 0 : 77);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return 1;
    return WEXITSTATUS(status);
}

int main(void)
{
    const char *dir = getenv("S2C_RUNTIME_DATA");
    if (dir && *dir)
        data_dir = dir;
    int probe = probe_in_child();
    if (probe != 0)
        return probe;
    base_seed = (unsigned)time(NULL);
    fprintf(stderr, "seed %u\n", base_seed);
    Suite *s = suite_create("runtime-gpu");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, launch_on_stream);
    tcase_add_test(tc, pointer_checks_on_device);
    tcase_add_test(tc, four_threads_share_kernels);
    tcase_add_test(tc, adopt_existing_context);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
