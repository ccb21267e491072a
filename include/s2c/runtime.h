/* s2c runtime — load and launch generated kernels through the CUDA Driver API.
 *
 * The runtime never links libcuda: on first use it dlopen()s "libcuda.so.1"
 * (or the file named by the environment variable S2C_LIBCUDA) and resolves
 * every entry point through cuGetProcAddress.  On a machine without a driver
 * every call returns S2_ERR_NO_DRIVER, without a device S2_ERR_NO_DEVICE.
 *
 * This header does not need cuda.h.  Driver objects cross it as plain types:
 *   s2_devptr          == CUdeviceptr (a 64-bit device address)
 *   void *stream       == CUstream    (NULL is the legacy default stream)
 *   void *cu_context   == CUcontext
 *   void **args        == the kernelParams array of cuLaunchKernel
 *
 * Threads: an s2_device, s2_module and s2_kernel may be shared between threads
 * once created; every call makes the device's context current for its own
 * duration (push/pop), so it may come from any thread.  An s2_ctx is per thread.
 * Lifetimes: free kernels before their module, modules before their device.
 */
#ifndef S2C_RUNTIME_H
#define S2C_RUNTIME_H

#include "s2c/common.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t s2_devptr;

typedef struct s2_device s2_device;
typedef struct s2_module s2_module;
typedef struct s2_kernel s2_kernel;
typedef struct s2_event s2_event;

/* ---- driver ---------------------------------------------------------------- */

/* Load the driver (once per process).  *version gets cuDriverGetVersion's
 * value (12040 for 12.4); version may be NULL. */
S2_API s2_status s2_runtime_driver_version(s2_ctx *ctx, int *version);
/* Number of devices; S2_ERR_NO_DEVICE (and *count = 0) when there is none. */
S2_API s2_status s2_device_count(s2_ctx *ctx, int *count);

/* ---- devices --------------------------------------------------------------- */

typedef struct s2_device_info {
    int ordinal;                     /* CUdevice */
    int cc_major, cc_minor;          /* compute capability */
    int sm_count;
    int max_threads_per_block;
    int max_block_dim[3];
    int max_grid_dim[3];
    size_t smem_per_block;           /* default limit (48 KB) */
    size_t smem_per_block_optin;     /* what cuFuncSetAttribute may raise it to */
    size_t total_mem;                /* bytes; 0 if unknown */
    int driver_version;
    char name[256];
} s2_device_info;

/* Open device `ordinal` and retain its primary context (shared with the CUDA
 * runtime and frameworks in the same process). */
S2_API s2_status s2_device_open(s2_ctx *ctx, int ordinal, s2_device **out);
/* Use the context current on the calling thread (S2_ERR_INVALID if none).
 * The context is not retained: the caller keeps it alive past s2_device_free. */
S2_API s2_status s2_device_adopt_current(s2_ctx *ctx, s2_device **out);
/* Releases what s2_device_open retained; NULL is fine. */
S2_API void s2_device_free(s2_device *dev);
S2_API const s2_device_info *s2_device_get_info(const s2_device *dev);
S2_API void *s2_device_cu_context(const s2_device *dev); /* CUcontext */

/* Check that `ptr` may be handed to a kernel on `dev` as the argument called
 * `what` (used in the message): non-zero, a multiple of `align` (a power of
 * two, 0 or 1 for none), memory the driver knows as device or managed memory
 * of this device and (when the driver names one) this context, and, when
 * bytes > 0, that [ptr, ptr + bytes) lies inside one allocation.
 * Host memory, even pinned, is refused: S2_ERR_INVALID for every failure. */
S2_API s2_status s2_check_device_ptr(s2_ctx *ctx, const s2_device *dev, s2_devptr ptr,
                              size_t bytes, size_t align, const char *what);

/* ---- the caller's memory ---------------------------------------------------
 * Device memory the runtime takes for itself (kept-block lists and schedules,
 * variable-length tables) comes from the device's allocator: by default
 * cuMemAlloc / cuMemFree, or an engine's pool (PyTorch's caching allocator,
 * an arena) set here.  alloc returns 0 and a pointer to at least `bytes`
 * bytes, 256-byte aligned, usable on `stream` (NULL: the legacy stream), or
 * nonzero when it cannot; free returns a pointer alloc gave.  Both may be
 * called from any thread that launches on the device.  Set it before the
 * first module is loaded on the device: S2_ERR_INVALID while the runtime
 * holds memory from the current one.  NULL restores the default. */
typedef struct s2_allocator {
    int (*alloc)(void *user, size_t bytes, void *stream, s2_devptr *ptr);
    void (*free)(void *user, s2_devptr ptr, void *stream);
    void *user;
} s2_allocator;
S2_API s2_status s2_device_set_allocator(s2_ctx *ctx, s2_device *dev, const s2_allocator *a);

/* ---- memory, streams, events (for tests and examples; synchronous) --------- */

S2_API s2_status s2_mem_alloc(s2_ctx *ctx, const s2_device *dev, size_t bytes, s2_devptr *out);
S2_API s2_status s2_mem_free(s2_ctx *ctx, const s2_device *dev, s2_devptr ptr); /* 0 is fine */
S2_API s2_status s2_memcpy_h2d(s2_ctx *ctx, const s2_device *dev, s2_devptr dst, const void *src, size_t bytes);
S2_API s2_status s2_memcpy_d2h(s2_ctx *ctx, const s2_device *dev, void *dst, s2_devptr src, size_t bytes);
S2_API s2_status s2_memset_d8(s2_ctx *ctx, const s2_device *dev, s2_devptr dst, uint8_t value, size_t bytes);
S2_API s2_status s2_device_synchronize(s2_ctx *ctx, const s2_device *dev);

/* Streams are created blocking (they synchronise with the legacy NULL stream,
 * so the synchronous copies above are ordered with launches on them). */
S2_API s2_status s2_stream_create(s2_ctx *ctx, const s2_device *dev, void **stream);
S2_API s2_status s2_stream_destroy(s2_ctx *ctx, const s2_device *dev, void *stream); /* NULL is fine */
S2_API s2_status s2_stream_synchronize(s2_ctx *ctx, const s2_device *dev, void *stream);

S2_API s2_status s2_event_create(s2_ctx *ctx, const s2_device *dev, s2_event **out);
S2_API void s2_event_free(s2_event *ev);
S2_API s2_status s2_event_record(s2_ctx *ctx, s2_event *ev, void *stream);
/* Waits for `stop`, then *ms = time between the two records. */
S2_API s2_status s2_event_elapsed_ms(s2_ctx *ctx, s2_event *start, s2_event *stop, float *ms);

/* ---- tensor maps (TMA, compute capability >= 9.0) ---------------------------- */

/* A CUtensorMap: 128 opaque bytes, 64-byte aligned; kernels take it by value
 * (its address goes into the kernelParams array). */
typedef struct s2_tensor_map {
#ifdef __cplusplus
    alignas(64)
#else
    _Alignas(64)
#endif
    uint64_t opaque[16];
} s2_tensor_map;

/* cuTensorMapEncodeTiled for a tiled (non-interleaved) map: dims[rank]
 * element counts, innermost first; strides[rank-1] in BYTES for dims
 * 1..rank-1 (multiples of 16); box[rank] elements per dim (box[0] times the
 * element size at most swizzle_bytes when swizzling); element strides 1,
 * L2 promotion 256 B, out-of-bounds elements read as zero.  swizzle_bytes:
 * 0, 32, 64 or 128.  dev's context is made current for the call (the driver
 * wants one).  S2_ERR_INVALID with the driver's reason when it refuses,
 * S2_ERR_UNSUPPORTED when the driver has no tensor maps. */
S2_API s2_status s2_tensor_map_encode_tiled(s2_ctx *ctx, const s2_device *dev, s2_tensor_map *map, s2_dtype dtype, int rank,
                                     s2_devptr addr,
                                     const uint64_t *dims, const uint64_t *strides, const uint32_t *box,
                                     int swizzle_bytes);

/* ---- modules and kernels --------------------------------------------------- */

/* Load a cubin, fatbin or PTX image (the driver JIT-compiles PTX).  PTX need
 * not be NUL-terminated within `size`; the image is not kept after the call. */
S2_API s2_status s2_module_load_data(s2_ctx *ctx, s2_device *dev, const void *image, size_t size,
                              s2_module **out);
S2_API s2_status s2_module_load_file(s2_ctx *ctx, s2_device *dev, const char *path, s2_module **out);
S2_API void s2_module_free(s2_module *mod); /* NULL is fine */

/* S2_ERR_NOT_FOUND when the module has no kernel of that name. */
S2_API s2_status s2_kernel_get(s2_ctx *ctx, s2_module *mod, const char *name, s2_kernel **out);
S2_API void s2_kernel_free(s2_kernel *k); /* NULL is fine */
S2_API const char *s2_kernel_name(const s2_kernel *k);

typedef struct s2_kernel_attrs {
    int num_regs;
    int max_threads_per_block;
    int static_smem_bytes;
    int local_bytes;            /* per thread */
    int const_bytes;
    int max_dynamic_smem_bytes; /* the current limit; launches raise it as needed */
    int ptx_version;            /* 10 * major + minor */
    int binary_version;
} s2_kernel_attrs;

S2_API s2_status s2_kernel_get_attrs(s2_ctx *ctx, s2_kernel *k, s2_kernel_attrs *out);

typedef struct s2_launch_cfg {
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t smem_bytes; /* dynamic shared memory */
    void *stream;        /* CUstream; NULL = legacy default stream */
} s2_launch_cfg;

/* Launch asynchronously on cfg->stream.  Dimensions are checked against the
 * device and the kernel; dynamic shared memory above the kernel's current
 * limit raises that limit first (up to the device's opt-in maximum minus the
 * kernel's static shared memory, else S2_ERR_INVALID). */
S2_API s2_status s2_kernel_launch(s2_ctx *ctx, s2_kernel *k, const s2_launch_cfg *cfg, void **args);

#ifdef __cplusplus
}
#endif
#endif
