/* s2c runtime — the CUDA driver, devices and memory under the attention
 * runtime (attn_runtime.h loads and launches the generated kernels).
 *
 * The runtime never links libcuda: on first use it dlopen()s "libcuda.so.1"
 * (or the file named by the environment variable S2C_LIBCUDA) and resolves
 * every entry point through cuGetProcAddress.  On a machine without a driver
 * every call returns S2_ERR_NO_DRIVER, without a device S2_ERR_NO_DEVICE.
 *
 * This header does not need cuda.h.  Driver objects cross it as plain types:
 *   s2_devptr          == CUdeviceptr (a 64-bit device address)
 *   void *stream       == CUstream    (NULL is the legacy default stream)
 *
 * Threads: an s2_device may be shared between threads once created; every
 * call makes the device's CUDA context current for its own duration
 * (push/pop), so it may come from any thread.  An s2_ctx (messages) is per
 * thread.  Lifetimes: free modules (attn_runtime.h) before their device.
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

/* ---- the CUDA driver ------------------------------------------------------- */

/* Load the CUDA driver (once per process).  *version gets cuDriverGetVersion's
 * value (12040 for 12.4); version may be NULL. */
S2_API s2_status s2_cuda_driver_version(s2_ctx *ctx, int *version);
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
    int cuda_driver_version;         /* as s2_cuda_driver_version */
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

/* ---- memory (for examples and simple callers; synchronous) ---------------- */

S2_API s2_status s2_mem_alloc(s2_ctx *ctx, const s2_device *dev, size_t bytes, s2_devptr *out);
S2_API s2_status s2_mem_free(s2_ctx *ctx, const s2_device *dev, s2_devptr ptr); /* 0 is fine */
S2_API s2_status s2_memcpy_h2d(s2_ctx *ctx, const s2_device *dev, s2_devptr dst, const void *src, size_t bytes);
S2_API s2_status s2_memcpy_d2h(s2_ctx *ctx, const s2_device *dev, void *dst, s2_devptr src, size_t bytes);
S2_API s2_status s2_memset_d8(s2_ctx *ctx, const s2_device *dev, s2_devptr dst, uint8_t value, size_t bytes);
S2_API s2_status s2_device_synchronize(s2_ctx *ctx, const s2_device *dev);

/* ---- streams, events and copies on a stream (ordering work across streams:
 * the dist stage's executor, benches) ------------------------------------- */

typedef struct s2_event s2_event;

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
/* Work queued on `stream` after this call waits for ev's last record
 * (cuStreamWaitEvent).  S2_ERR_UNSUPPORTED when the driver lacks it. */
S2_API s2_status s2_stream_wait_event(s2_ctx *ctx, s2_event *ev, void *stream);
/* Device-to-device copies queued on `stream` (nothing is checked but null
 * pointers; bytes 0 does nothing): `bytes` contiguous, or `rows` rows of
 * `row_bytes` at pitches dst_pitch and src_pitch (cuMemcpy2DAsync: pitches
 * at least row_bytes).  S2_ERR_UNSUPPORTED when the driver lacks them. */
S2_API s2_status s2_memcpy_d2d_async(s2_ctx *ctx, const s2_device *dev, s2_devptr dst, s2_devptr src, size_t bytes,
                                     void *stream);
S2_API s2_status s2_memcpy_2d_async(s2_ctx *ctx, const s2_device *dev, s2_devptr dst, size_t dst_pitch, s2_devptr src,
                                    size_t src_pitch, size_t row_bytes, size_t rows, void *stream);

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

#ifdef __cplusplus
}
#endif
#endif
