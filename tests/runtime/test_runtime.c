/* CPU tests of runtime/: a missing driver, and a fake libcuda (fake_cuda.c)
 * that lets every path up to the driver call be checked without a GPU.
 *
 * The driver is loaded once per process, so each test must run in its own
 * process: the runner forces Check's fork mode, and each test points
 * S2C_LIBCUDA at its driver before the first runtime call.
 * Usage: test_runtime FAKE_LIB FAKE_V1_LIB */
#include "rt_cuda.h"
#include "s2c/runtime.h"
#include "fake_cuda.h"

#include <cuda.h> /* only for the fake's CUresult values */

#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *fake_path;
static const char *fake_v1_path;
static fake_cuda_set_fn fake_set;
static fake_cuda_get_fn fake_get;
static fake_cuda_last_image_fn fake_last_image;

/* Point the runtime at `lib` and bind the fake's controls in the same copy. */
static void use_fake(const char *lib)
{
    ck_assert_int_eq(setenv("S2C_LIBCUDA", lib, 1), 0);
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(h != NULL, "dlopen %s: %s", lib, dlerror());
    fake_set = (fake_cuda_set_fn)dlsym(h, "fake_cuda_set");
    fake_get = (fake_cuda_get_fn)dlsym(h, "fake_cuda_get");
    fake_last_image = (fake_cuda_last_image_fn)dlsym(h, "fake_cuda_last_image");
    ck_assert(fake_set && fake_get && fake_last_image);
}

static void assert_msg_has(const s2_ctx *ctx, const char *needle)
{
    ck_assert_msg(strstr(s2_ctx_message(ctx), needle) != NULL, "message \"%s\" lacks \"%s\"",
                  s2_ctx_message(ctx), needle);
}

static s2_device *open_fake(s2_ctx *ctx)
{
    s2_device *dev = NULL;
    s2_status st = s2_device_open(ctx, 0, &dev);
    ck_assert_msg(st == S2_OK, "%s: %s", s2_status_name(st), s2_ctx_message(ctx));
    ck_assert_ptr_nonnull(dev);
    return dev;
}

static const char tiny_ptx[] = ".version 7.5\n.target sm_75\n.address_size 64\n"
                               ".visible .entry k() { ret; }\n";

/* A module and its one kernel from the fake. */
static s2_cufunction *fake_kernel(s2_ctx *ctx, s2_device *dev, s2_cumodule **mod)
{
    ck_assert_int_eq(s2_cumodule_load_data(ctx, dev, tiny_ptx, strlen(tiny_ptx), mod), S2_OK);
    s2_cufunction *k = NULL;
    s2_status st = s2_cufunction_get(ctx, *mod, "k", &k);
    ck_assert_msg(st == S2_OK, "%s", s2_ctx_message(ctx));
    return k;
}

START_TEST(no_driver)
{
    ck_assert_int_eq(setenv("S2C_LIBCUDA", "/nonexistent/libcuda-missing.so.1", 1), 0);
    s2_ctx *ctx = s2_ctx_new();
    int n = 7;
    ck_assert_int_eq(s2_device_count(ctx, &n), S2_ERR_NO_DRIVER);
    ck_assert_int_eq(n, 0);
    assert_msg_has(ctx, "cannot load the CUDA driver /nonexistent/libcuda-missing.so.1");
    s2_device *dev = (s2_device *)ctx; /* poison: must come back NULL */
    s2_ctx_clear(ctx);
    ck_assert_int_eq(s2_device_open(ctx, 0, &dev), S2_ERR_NO_DRIVER);
    ck_assert_ptr_null(dev);
    assert_msg_has(ctx, "cannot load the CUDA driver");
    dev = (s2_device *)ctx;
    ck_assert_int_eq(s2_device_adopt_current(ctx, &dev), S2_ERR_NO_DRIVER);
    ck_assert_ptr_null(dev);
    int v = 1;
    ck_assert_int_eq(s2_cuda_driver_version(NULL, &v), S2_ERR_NO_DRIVER);
    ck_assert_int_eq(v, 0);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(zero_devices)
{
    use_fake(fake_path);
    fake_set("devices", 0);
    s2_ctx *ctx = s2_ctx_new();
    int n = 7;
    ck_assert_int_eq(s2_device_count(ctx, &n), S2_ERR_NO_DEVICE);
    ck_assert_int_eq(n, 0);
    assert_msg_has(ctx, "no device");
    s2_device *dev = (s2_device *)ctx;
    ck_assert_int_eq(s2_device_open(ctx, 0, &dev), S2_ERR_NO_DEVICE);
    ck_assert_ptr_null(dev);
    ck_assert_int_eq(fake_get("primary_refs"), 0);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(init_reports_no_device)
{
    use_fake(fake_path);
    fake_set("init_result", CUDA_ERROR_NO_DEVICE);
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    ck_assert_int_eq(s2_device_open(ctx, 0, &dev), S2_ERR_NO_DEVICE);
    assert_msg_has(ctx, "CUDA_ERROR_NO_DEVICE");
    ck_assert_ptr_null(dev);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(open_info_and_release)
{
    use_fake(fake_path);
    fake_set("optin_smem", 200 * 1024);
    s2_ctx *ctx = s2_ctx_new();
    int n = 0, v = 0;
    ck_assert_int_eq(s2_device_count(ctx, &n), S2_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(s2_cuda_driver_version(ctx, &v), S2_OK);
    ck_assert_int_eq(v, 12080);
    /* Every symbol was requested for the CUDA 12.0 ABI through the _v2 resolver:
     * 39 required entry points and the optional cuTensorMapEncodeTiled,
     * cuStreamIsCapturing, cuStreamWaitEvent, cuMemcpyDtoDAsync and cuMemcpy2DAsync. */
    ck_assert_int_eq(fake_get("gpa_version"), 12000);
    ck_assert_int_eq(fake_get("gpa_flags"), CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    ck_assert_int_eq(fake_get("gpa_v2_calls"), 44);

    s2_device *dev = NULL;
    ck_assert_int_eq(s2_device_open(ctx, 1, &dev), S2_ERR_INVALID);
    ck_assert_ptr_null(dev);
    assert_msg_has(ctx, "device 1 does not exist");
    dev = open_fake(ctx);
    const s2_device_info *in = s2_device_get_info(dev);
    ck_assert_int_eq(in->cc_major, 9);
    ck_assert_int_eq(in->cc_minor, 0);
    ck_assert_int_eq(in->sm_count, 132);
    ck_assert_uint_eq(in->smem_per_block, 48 * 1024);
    ck_assert_uint_eq(in->smem_per_block_optin, 200 * 1024);
    ck_assert_int_eq(in->max_grid_dim[1], 65535);
    ck_assert_str_eq(in->name, "Fake GPU");
    ck_assert_int_eq(fake_get("primary_refs"), 1);
    ck_assert_ptr_eq(s2_device_cu_context(dev), (void *)(intptr_t)fake_get("ctx_ptr"));
    s2_device_free(dev);
    ck_assert_int_eq(fake_get("primary_refs"), 0);
    s2_device_free(NULL);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(v1_resolver_fallback)
{
    use_fake(fake_v1_path);
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = open_fake(ctx);
    ck_assert_int_eq(fake_get("gpa_v1_calls"), 44);
    ck_assert_int_eq(fake_get("gpa_v2_calls"), 0);
    ck_assert_int_eq(fake_get("gpa_version"), 12000);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(module_load_failure_names_cuda_error)
{
    use_fake(fake_path);
    fake_set("module_result", CUDA_ERROR_INVALID_IMAGE);
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = open_fake(ctx);
    s2_cumodule *mod = (s2_cumodule *)ctx;
    ck_assert_int_eq(s2_cumodule_load_data(ctx, dev, tiny_ptx, sizeof tiny_ptx, &mod), S2_ERR_CUDA);
    ck_assert_ptr_null(mod);
    assert_msg_has(ctx, "cuModuleLoadData");
    assert_msg_has(ctx, "CUDA_ERROR_INVALID_IMAGE");
    ck_assert_int_eq(fake_get("depth"), 0);
    ck_assert_int_eq(fake_get("max_depth"), 1);
    ck_assert_int_eq(s2_cumodule_load_data(ctx, dev, tiny_ptx, 0, &mod), S2_ERR_INVALID);
    ck_assert_int_eq(s2_cumodule_load_data(ctx, NULL, tiny_ptx, 4, &mod), S2_ERR_INVALID);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(ptx_without_nul_is_terminated)
{
    use_fake(fake_path);
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = open_fake(ctx);
    /* A copy with garbage right after the text: the driver must see only the text. */
    size_t n = strlen(tiny_ptx);
    char *buf = malloc(n + 8);
    memcpy(buf, tiny_ptx, n);
    memcpy(buf + n, "GARBAGE", 8);
    s2_cumodule *mod = NULL;
    ck_assert_int_eq(s2_cumodule_load_data(ctx, dev, buf, n, &mod), S2_OK);
    ck_assert_str_eq(fake_last_image(), tiny_ptx);
    free(buf);
    s2_cufunction *k = NULL;
    ck_assert_int_eq(s2_cufunction_get(ctx, mod, "missing", &k), S2_ERR_NOT_FOUND);
    ck_assert_ptr_null(k);
    assert_msg_has(ctx, "no kernel named \"missing\"");
    s2_cumodule_free(mod);
    ck_assert_int_eq(fake_get("modules_unloaded"), 1);
    ck_assert_int_eq(fake_get("depth"), 0);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(kernel_attrs_and_smem_raise)
{
    use_fake(fake_path);
    fake_set("optin_smem", 227 * 1024);
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = open_fake(ctx);
    s2_cumodule *mod = NULL;
    s2_cufunction *k = fake_kernel(ctx, dev, &mod);
    ck_assert_str_eq(s2_cufunction_name(k), "k");
    s2_cufunction_attrs at;
    ck_assert_int_eq(s2_cufunction_get_attrs(ctx, k, &at), S2_OK);
    ck_assert_int_eq(at.num_regs, 40);
    ck_assert_int_eq(at.max_threads_per_block, 1024);
    ck_assert_int_eq(at.static_smem_bytes, 0);
    ck_assert_int_eq(at.local_bytes, 8);
    ck_assert_int_eq(at.max_dynamic_smem_bytes, 48 * 1024);
    ck_assert_int_eq(at.ptx_version, 75);
    ck_assert_int_eq(at.binary_version, 90);

    s2_launch_cfg cfg = {.grid = {3, 1, 1}, .block = {256, 1, 1}, .smem_bytes = 100 * 1024};
    ck_assert_int_eq(s2_cufunction_launch(ctx, k, &cfg, NULL), S2_OK);
    ck_assert_int_eq(fake_get("set_attr_calls"), 1);
    ck_assert_int_eq(fake_get("set_attr_value"), 100 * 1024);
    ck_assert_int_eq(fake_get("launches"), 1);
    ck_assert_int_eq(fake_get("last_smem"), 100 * 1024);
    ck_assert_int_eq(fake_get("last_grid_x"), 3);
    ck_assert_int_eq(fake_get("depth"), 0);
    ck_assert_int_eq(s2_cufunction_get_attrs(ctx, k, &at), S2_OK);
    ck_assert_int_eq(at.max_dynamic_smem_bytes, 100 * 1024);

    /* Smaller requests do not touch (and so cannot lower) the limit. */
    cfg.smem_bytes = 64 * 1024;
    ck_assert_int_eq(s2_cufunction_launch(ctx, k, &cfg, NULL), S2_OK);
    ck_assert_int_eq(fake_get("set_attr_calls"), 1);
    ck_assert_int_eq(fake_get("launches"), 2);

    /* The device's opt-in maximum is the end. */
    cfg.smem_bytes = 227 * 1024 + 1;
    ck_assert_int_eq(s2_cufunction_launch(ctx, k, &cfg, NULL), S2_ERR_INVALID);
    assert_msg_has(ctx, "opt-in");
    cfg.smem_bytes = 227 * 1024;
    ck_assert_int_eq(s2_cufunction_launch(ctx, k, &cfg, NULL), S2_OK);
    ck_assert_int_eq(fake_get("launches"), 3);
    ck_assert_int_eq(fake_get("set_attr_calls"), 2);
    s2_cufunction_free(k);
    s2_cumodule_free(mod);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(static_smem_counts_against_optin)
{
    use_fake(fake_path);
    fake_set("optin_smem", 100 * 1024);
    fake_set("static_smem", 16 * 1024);
    fake_set("dyn_limit", 32 * 1024);
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = open_fake(ctx);
    s2_cumodule *mod = NULL;
    s2_cufunction *k = fake_kernel(ctx, dev, &mod);
    s2_launch_cfg cfg = {.grid = {1, 1, 1}, .block = {32, 1, 1}, .smem_bytes = 84 * 1024 + 1};
    ck_assert_int_eq(s2_cufunction_launch(ctx, k, &cfg, NULL), S2_ERR_INVALID);
    assert_msg_has(ctx, "16384 of static");
    ck_assert_int_eq(fake_get("launches"), 0);
    cfg.smem_bytes = 84 * 1024;
    ck_assert_int_eq(s2_cufunction_launch(ctx, k, &cfg, NULL), S2_OK);
    ck_assert_int_eq(fake_get("set_attr_value"), 84 * 1024);
    ck_assert_int_eq(fake_get("launches"), 1);
    s2_cufunction_free(k);
    s2_cumodule_free(mod);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(launch_dimension_checks)
{
    use_fake(fake_path);
    fake_set("kernel_threads", 512);
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = open_fake(ctx);
    s2_cumodule *mod = NULL;
    s2_cufunction *k = fake_kernel(ctx, dev, &mod);
    s2_launch_cfg cfg = {.grid = {1, 1, 1}, .block = {0, 1, 1}};
    ck_assert_int_eq(s2_cufunction_launch(ctx, k, &cfg, NULL), S2_ERR_INVALID);
    assert_msg_has(ctx, "block.x is 0");
    cfg.block[0] = 32;
    cfg.block[1] = 32; /* 1024 threads, but the kernel allows 512 */
    ck_assert_int_eq(s2_cufunction_launch(ctx, k, &cfg, NULL), S2_ERR_INVALID);
    assert_msg_has(ctx, "1024 threads per block, the kernel allows 512");
    cfg.block[1] = 1;
    cfg.grid[1] = 65536;
    ck_assert_int_eq(s2_cufunction_launch(ctx, k, &cfg, NULL), S2_ERR_INVALID);
    assert_msg_has(ctx, "grid.y = 65536");
    ck_assert_int_eq(s2_cufunction_launch(ctx, k, NULL, NULL), S2_ERR_INVALID);
    ck_assert_int_eq(fake_get("launches"), 0);
    cfg.grid[1] = 1;
    fake_set("launch_result", CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    ck_assert_int_eq(s2_cufunction_launch(ctx, k, &cfg, NULL), S2_ERR_CUDA);
    assert_msg_has(ctx, "cuLaunchKernel(k, grid 1x1x1, block 32x1x1, smem 0)");
    assert_msg_has(ctx, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES");
    ck_assert_int_eq(fake_get("depth"), 0);
    s2_cufunction_free(k);
    s2_cumodule_free(mod);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(pointer_validation)
{
    use_fake(fake_path);
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = open_fake(ctx);
    s2_devptr p = 0, host = 0, foreign = 0;
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, 4096, &p), S2_OK);
    fake_set("next_alloc_host", 1);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, 256, &host), S2_OK);
    fake_set("next_alloc_foreign", 1);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, 256, &foreign), S2_OK);

    ck_assert_int_eq(s2_check_device_ptr(ctx, dev, p, 4096, 16, "q"), S2_OK);
    ck_assert_int_eq(s2_check_device_ptr(ctx, dev, p + 1024, 3072, 16, "q"), S2_OK);
    ck_assert_int_eq(s2_check_device_ptr(ctx, dev, 0, 16, 16, "q"), S2_ERR_INVALID);
    assert_msg_has(ctx, "q: null device pointer");
    ck_assert_int_eq(s2_check_device_ptr(ctx, dev, p + 4, 16, 16, "k"), S2_ERR_INVALID);
    assert_msg_has(ctx, "is not aligned to 16 bytes");
    ck_assert_int_eq(s2_check_device_ptr(ctx, dev, p, 16, 12, "k"), S2_ERR_INVALID);
    assert_msg_has(ctx, "alignment 12 is not a power of two");
    int on_stack = 0;
    ck_assert_int_eq(s2_check_device_ptr(ctx, dev, (s2_devptr)(uintptr_t)&on_stack, 4, 4, "v"),
                     S2_ERR_INVALID);
    assert_msg_has(ctx, "not memory known to the CUDA driver");
    assert_msg_has(ctx, "CUDA_ERROR_INVALID_VALUE");
    ck_assert_int_eq(s2_check_device_ptr(ctx, dev, host, 0, 16, "o"), S2_ERR_INVALID);
    assert_msg_has(ctx, "is host memory");
    ck_assert_int_eq(s2_check_device_ptr(ctx, dev, foreign, 0, 16, "o"), S2_ERR_INVALID);
    assert_msg_has(ctx, "belongs to another CUDA context");
    ck_assert_int_eq(s2_check_device_ptr(ctx, dev, p + 1024, 3073, 16, "o"), S2_ERR_INVALID);
    assert_msg_has(ctx, "needs 3073 bytes");
    assert_msg_has(ctx, "ends after 3072 bytes");
    ck_assert_int_eq(s2_check_device_ptr(ctx, NULL, p, 0, 0, "o"), S2_ERR_INVALID);
    ck_assert_int_eq(fake_get("depth"), 0);

    ck_assert_int_eq(s2_mem_free(ctx, dev, p), S2_OK);
    ck_assert_int_eq(s2_mem_free(ctx, dev, host), S2_OK);
    ck_assert_int_eq(s2_mem_free(ctx, dev, foreign), S2_OK);
    ck_assert_int_eq(s2_mem_free(ctx, dev, 0), S2_OK);
    ck_assert_int_eq(fake_get("allocs_live"), 0);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(memory_round_trip)
{
    use_fake(fake_path);
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = open_fake(ctx);
    enum { N = 1000 };
    unsigned char in[N], out[N];
    for (int i = 0; i < N; i++)
        in[i] = (unsigned char)rand();
    s2_devptr p = 0;
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, N, &p), S2_OK);
    ck_assert_int_eq(s2_memset_d8(ctx, dev, p, 0xA5, N), S2_OK);
    ck_assert_int_eq(s2_memcpy_d2h(ctx, dev, out, p, N), S2_OK);
    for (int i = 0; i < N; i++)
        ck_assert_msg(out[i] == 0xA5, "memset byte %d = %#x", i, out[i]);
    ck_assert_int_eq(s2_memcpy_h2d(ctx, dev, p, in, N), S2_OK);
    memset(out, 0, N);
    ck_assert_int_eq(s2_memcpy_d2h(ctx, dev, out, p, N), S2_OK);
    ck_assert_msg(memcmp(in, out, N) == 0, "round trip differs (seed %u)", seed);
    ck_assert_int_eq(s2_memcpy_h2d(ctx, dev, p, in, N + 1), S2_ERR_CUDA); /* the fake checks bounds */
    assert_msg_has(ctx, "cuMemcpyHtoD");
    ck_assert_int_eq(s2_memcpy_h2d(ctx, dev, p, NULL, N), S2_ERR_INVALID);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, 0, &p), S2_ERR_INVALID);
    ck_assert_int_eq(p, 0);

    void *stream = NULL;
    s2_event *e0 = NULL, *e1 = NULL;
    float ms = 0;
    ck_assert_int_eq(s2_stream_create(ctx, dev, &stream), S2_OK);
    ck_assert_ptr_nonnull(stream);
    ck_assert_int_eq(s2_event_create(ctx, dev, &e0), S2_OK);
    ck_assert_int_eq(s2_event_create(ctx, dev, &e1), S2_OK);
    ck_assert_int_eq(s2_event_record(ctx, e0, stream), S2_OK);
    ck_assert_int_eq(s2_event_record(ctx, e1, stream), S2_OK);
    ck_assert_int_eq(s2_event_elapsed_ms(ctx, e0, e1, &ms), S2_OK);
    ck_assert_float_eq(ms, 1.5f);
    ck_assert_int_eq(s2_stream_synchronize(ctx, dev, stream), S2_OK);
    ck_assert_int_eq(s2_device_synchronize(ctx, dev), S2_OK);
    s2_event_free(e0);
    s2_event_free(e1);
    ck_assert_int_eq(s2_stream_destroy(ctx, dev, stream), S2_OK);
    ck_assert_int_eq(fake_get("events_live"), 0);
    ck_assert_int_eq(fake_get("streams_live"), 0);
    ck_assert_int_eq(s2_mem_free(ctx, dev, 0), S2_OK);
    ck_assert_int_eq(fake_get("depth"), 0);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(adopt_current_context)
{
    use_fake(fake_path);
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = (s2_device *)ctx;
    ck_assert_int_eq(s2_device_adopt_current(ctx, &dev), S2_ERR_INVALID);
    ck_assert_ptr_null(dev);
    assert_msg_has(ctx, "no CUDA context is current");
    fake_set("set_current", 1);
    ck_assert_int_eq(s2_device_adopt_current(ctx, &dev), S2_OK);
    ck_assert_ptr_eq(s2_device_cu_context(dev), (void *)(intptr_t)fake_get("ctx_ptr"));
    ck_assert_int_eq(s2_device_get_info(dev)->sm_count, 132);
    s2_cumodule *mod = NULL;
    s2_cufunction *k = fake_kernel(ctx, dev, &mod);
    s2_launch_cfg cfg = {.grid = {1, 1, 1}, .block = {64, 1, 1}};
    ck_assert_int_eq(s2_cufunction_launch(ctx, k, &cfg, NULL), S2_OK);
    ck_assert_int_eq(fake_get("depth"), 1); /* the caller's context is still current */
    s2_cufunction_free(k);
    s2_cumodule_free(mod);
    s2_device_free(dev);
    ck_assert_int_eq(fake_get("primary_refs"), 0); /* nothing retained, nothing released */
    s2_ctx_free(ctx);
}
END_TEST

static Suite *runtime_suite(void)
{
    Suite *s = suite_create("runtime");
    TCase *tc = tcase_create("fake-driver");
    tcase_add_test(tc, no_driver);
    tcase_add_test(tc, zero_devices);
    tcase_add_test(tc, init_reports_no_device);
    tcase_add_test(tc, open_info_and_release);
    tcase_add_test(tc, v1_resolver_fallback);
    tcase_add_test(tc, module_load_failure_names_cuda_error);
    tcase_add_test(tc, ptx_without_nul_is_terminated);
    tcase_add_test(tc, kernel_attrs_and_smem_raise);
    tcase_add_test(tc, static_smem_counts_against_optin);
    tcase_add_test(tc, launch_dimension_checks);
    tcase_add_test(tc, pointer_validation);
    tcase_add_test(tc, memory_round_trip);
    tcase_add_test(tc, adopt_current_context);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s FAKE_LIBCUDA FAKE_V1_LIBCUDA\n", argv[0]);
        return 2;
    }
    fake_path = argv[1];
    fake_v1_path = argv[2];
    SRunner *sr = srunner_create(runtime_suite());
    /* The driver table is per process: each test needs a fresh one. */
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
