/* Internal to runtime/: the CUDA driver table (s2_cuda_api) and the objects behind the opaque
 * handles of s2c/runtime.h. */
#ifndef S2C_RT_INTERNAL_H
#define S2C_RT_INTERNAL_H

#include "launch_facts.h"
#include "rt_cuda.h"
#include "util.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <threads.h>

/* Every entry point is requested for this ABI, so the PFN types below are the
 * newest versions not above it.  CUDA 12.0 is the oldest driver we support. */
#define S2_CUDA_ABI 12000

/* Functions shared between the runtime's files but not exported from libs2rt.so. */
#if defined(__GNUC__)
#define S2_RT_HIDDEN __attribute__((visibility("hidden")))
#else
#define S2_RT_HIDDEN
#endif

/* X(name without "cu", PFN version suffix) */
#define S2_CUDA_FUNCS(X)              \
    X(Init, v2000)                    \
    X(DriverGetVersion, v2020)        \
    X(GetErrorName, v6000)            \
    X(GetErrorString, v6000)          \
    X(DeviceGetCount, v2000)          \
    X(DeviceGet, v2000)               \
    X(DeviceGetAttribute, v2000)      \
    X(DeviceGetName, v2000)           \
    X(DeviceTotalMem, v3020)          \
    X(DevicePrimaryCtxRetain, v7000)  \
    X(DevicePrimaryCtxRelease, v11000) \
    X(CtxGetCurrent, v4000)           \
    X(CtxGetDevice, v2000)            \
    X(CtxPushCurrent, v4000)          \
    X(CtxPopCurrent, v4000)           \
    X(CtxSynchronize, v2000)          \
    X(ModuleLoadData, v2000)          \
    X(ModuleUnload, v2000)            \
    X(ModuleGetFunction, v2000)       \
    X(FuncSetAttribute, v9000)        \
    X(FuncGetAttribute, v2020)        \
    X(LaunchKernel, v4000)            \
    X(MemAlloc, v3020)                \
    X(MemFree, v3020)                 \
    X(MemcpyHtoD, v3020)              \
    X(MemcpyDtoH, v3020)              \
    X(MemsetD8, v3020)                \
    X(MemcpyHtoDAsync, v3020)         \
    X(MemsetD8Async, v3020)           \
    X(PointerGetAttribute, v4000)     \
    X(PointerGetAttributes, v7000)    \
    X(StreamCreate, v2000)            \
    X(StreamDestroy, v4000)           \
    X(StreamSynchronize, v2000)       \
    X(EventCreate, v2000)             \
    X(EventRecord, v2000)             \
    X(EventSynchronize, v2000)        \
    X(EventElapsedTime, v2000)        \
    X(EventDestroy, v4000)

typedef struct s2_cuda_api {
#define S2_CUDA_FIELD(name, ver) PFN_cu##name##_##ver name;
    S2_CUDA_FUNCS(S2_CUDA_FIELD)
#undef S2_CUDA_FIELD
    /* optional (NULL when the driver lacks it): tensor maps, cc >= 9.0 */
    PFN_cuTensorMapEncodeTiled_v12000 TensorMapEncodeTiled;
    PFN_cuStreamIsCapturing_v10000 StreamIsCapturing;
    /* optional too: ordering across streams and device copies (runtime.h's streams section) */
    PFN_cuStreamWaitEvent_v3020 StreamWaitEvent;
    PFN_cuMemcpyDtoDAsync_v3020 MemcpyDtoDAsync;
    PFN_cuMemcpy2DAsync_v3020 Memcpy2DAsync;
    int version;
} s2_cuda_api;

/* The process-wide table, loaded on first use; on failure records the reason
 * in ctx and returns NULL (*st gets the status). */
const s2_cuda_api *s2_cuda_api_get(s2_ctx *ctx, s2_status *st);

/* "<formatted what>: CUDA_ERROR_X (description)" as S2_ERR_CUDA. */
s2_status s2_cu_fail(s2_ctx *ctx, const s2_cuda_api *drv, CUresult r, const char *fmt, ...)
    S2_PRINTF(4, 5);
/* Same with another status (e.g. S2_ERR_INVALID for a refused pointer). */
s2_status s2_cu_fail_as(s2_ctx *ctx, s2_status st, const s2_cuda_api *drv, CUresult r,
                        const char *fmt, ...) S2_PRINTF(5, 6);

/* Tensor maps encoded lately on a device: an encode is a pure function of
 * its inputs, so a launch with the same tensors reuses the map instead of
 * calling the driver (launches after s2_attn_plan_prepare make no driver
 * call but the launch). */
enum { S2_MAP_MEMO = 32 };
typedef struct s2_map_memo {
    mtx_t lock;
    int next;                          /* the entry to overwrite next */
    struct {
        bool used;
        uint64_t hash;                 /* of key: most lookups compare only this */
        unsigned char key[160];        /* the encode's inputs, zero-padded */
        unsigned char map[128];
    } e[S2_MAP_MEMO];
} s2_map_memo;

struct s2_device {
    const s2_cuda_api *drv;
    s2_map_memo *maps;       /* NULL: no memo (out of memory at open) */
    CUdevice cu_dev;
    CUcontext cu_ctx;
    bool retained;   /* primary context retained by s2_device_open */
    s2_device_info info;
    s2_device_limits limits; /* what launch facts read (abi/launch_facts.h), with info */
    s2_allocator alloc;      /* the runtime's own buffers; alloc.alloc NULL: the driver's */
    _Atomic long held;       /* buffers it holds from that allocator now */
};

/* Is `stream` being captured into a graph?  false when the driver cannot say. */
bool s2_rt_stream_capturing(const s2_device *dev, void *stream);

/* The runtime's own device buffers, from the device's allocator. */
s2_status s2_rt_alloc(s2_ctx *ctx, const s2_device *dev, size_t bytes, void *stream, s2_devptr *out);
void s2_rt_free(const s2_device *dev, s2_devptr ptr, void *stream);

/* Make dev's CUDA context (CUcontext, not the message s2_ctx) current on this thread for one call. */
s2_status s2_cucontext_enter(s2_ctx *ctx, const s2_device *dev);
void s2_cucontext_leave(const s2_device *dev);
/* The same on the launch path: pushes only when another context (or none)
 * is current (*pushed says which; pass it to s2_cucontext_done). */
s2_status s2_cucontext_use(s2_ctx *ctx, const s2_device *dev, bool *pushed);
void s2_cucontext_done(const s2_device *dev, bool pushed);

/* Stream-ordered copy and fill on `stream` (the context made current for the call). */
s2_status s2_rt_copy_async(s2_ctx *ctx, const s2_device *dev, s2_devptr dst, const void *src, size_t bytes,
                           void *stream);
s2_status s2_rt_fill_async(s2_ctx *ctx, const s2_device *dev, s2_devptr dst, uint8_t value, size_t bytes,
                           void *stream);
/* Raise a kernel's dynamic shared memory limit to smem now (a launch
 * would on first use), so that later launches make no attribute call. */
s2_status s2_rt_kernel_reserve_smem(s2_ctx *ctx, s2_cufunction *k, uint32_t smem);

struct s2_cumodule {
    s2_device *dev;
    CUmodule cu_mod;
};

struct s2_cufunction {
    s2_device *dev;
    CUfunction fn;
    char *name;
    s2_cufunction_attrs attrs; /* max_dynamic_smem_bytes is stale: see dyn_limit */
    atomic_int dyn_limit;      /* MAX_DYNAMIC_SHARED_SIZE_BYTES as last set */
    mtx_t raise_lock;          /* serialises raising it, so it only grows */
};

#endif
