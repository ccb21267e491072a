/* Devices and contexts, pointer validation, and the synchronous memory,
 * stream and event helpers used by tests and examples. */
#include "rt_internal.h"
#include "rt_limits.h"

#include <stdlib.h>
#include <string.h>

s2_status s2_cucontext_enter(s2_ctx *ctx, const s2_device *dev)
{
    CUresult r = dev->drv->CtxPushCurrent(dev->cu_ctx);
    if (r != CUDA_SUCCESS)
        return s2_cu_fail(ctx, dev->drv, r, "cuCtxPushCurrent (device %d)", dev->info.ordinal);
    return S2_OK;
}

void s2_cucontext_leave(const s2_device *dev)
{
    CUcontext popped;
    dev->drv->CtxPopCurrent(&popped);
}

s2_status s2_cucontext_use(s2_ctx *ctx, const s2_device *dev, bool *pushed)
{
    CUcontext cur = NULL;
    *pushed = false;
    if (dev->drv->CtxGetCurrent(&cur) == CUDA_SUCCESS && cur == dev->cu_ctx)
        return S2_OK;
    s2_status st = s2_cucontext_enter(ctx, dev);
    *pushed = st == S2_OK;
    return st;
}

void s2_cucontext_done(const s2_device *dev, bool pushed)
{
    if (pushed)
        s2_cucontext_leave(dev);
}

static s2_status get_attr(s2_ctx *ctx, const s2_device *dev, CUdevice_attribute a,
                          const char *what, int *out)
{
    CUresult r = dev->drv->DeviceGetAttribute(out, a, dev->cu_dev);
    if (r != CUDA_SUCCESS)
        return s2_cu_fail(ctx, dev->drv, r, "cuDeviceGetAttribute(%s) on device %d", what,
                          (int)dev->cu_dev);
    return S2_OK;
}

static s2_status query_info(s2_ctx *ctx, s2_device *dev)
{
    s2_device_info *in = &dev->info;
    const s2_cuda_api *d = dev->drv;
    int smem = 0, optin = 0;
    s2_status st;
    in->ordinal = (int)dev->cu_dev;
    in->cuda_driver_version = d->version;
#define S2_ATTR(attr, field)                                                         \
    if ((st = get_attr(ctx, dev, CU_DEVICE_ATTRIBUTE_##attr, #attr, &(field))) != S2_OK) \
        return st;
    S2_ATTR(COMPUTE_CAPABILITY_MAJOR, in->cc_major)
    S2_ATTR(COMPUTE_CAPABILITY_MINOR, in->cc_minor)
    S2_ATTR(MULTIPROCESSOR_COUNT, in->sm_count)
    S2_ATTR(MAX_THREADS_PER_BLOCK, in->max_threads_per_block)
    S2_ATTR(MAX_BLOCK_DIM_X, in->max_block_dim[0])
    S2_ATTR(MAX_BLOCK_DIM_Y, in->max_block_dim[1])
    S2_ATTR(MAX_BLOCK_DIM_Z, in->max_block_dim[2])
    S2_ATTR(MAX_GRID_DIM_X, in->max_grid_dim[0])
    S2_ATTR(MAX_GRID_DIM_Y, in->max_grid_dim[1])
    S2_ATTR(MAX_GRID_DIM_Z, in->max_grid_dim[2])
    S2_ATTR(MAX_SHARED_MEMORY_PER_BLOCK, smem)
    S2_ATTR(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, optin)
    s2_device_limits *lim = &dev->limits;
    S2_ATTR(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, lim->smem_per_sm)
    S2_ATTR(RESERVED_SHARED_MEMORY_PER_BLOCK, lim->smem_reserved_per_block)
    S2_ATTR(MAX_REGISTERS_PER_MULTIPROCESSOR, lim->regs_per_sm)
    S2_ATTR(MAX_THREADS_PER_MULTIPROCESSOR, lim->threads_per_sm)
    S2_ATTR(MAX_BLOCKS_PER_MULTIPROCESSOR, lim->blocks_per_sm)
#undef S2_ATTR
    in->smem_per_block = (size_t)smem;
    /* Devices without opt-in report 0; their default limit is the maximum. */
    in->smem_per_block_optin = (size_t)(optin > smem ? optin : smem);
    lim->sm_count = in->sm_count;
    lim->smem_per_block_optin = (int)in->smem_per_block_optin;
    CUresult r = d->DeviceGetName(in->name, (int)sizeof in->name, dev->cu_dev);
    if (r != CUDA_SUCCESS)
        return s2_cu_fail(ctx, d, r, "cuDeviceGetName on device %d", in->ordinal);
    in->name[sizeof in->name - 1] = '\0';
    size_t total = 0;
    if (d->DeviceTotalMem(&total, dev->cu_dev) == CUDA_SUCCESS)
        in->total_mem = total;
    return S2_OK;
}

/* Binds a new device to a CUDA context: its primary one retained, or the
 * thread's current one adopted. */
typedef s2_status (*device_bind_fn)(s2_ctx *ctx, s2_device *dev, int ordinal);

/* A device bound by bind with its facts read; nothing left behind on failure. */
static s2_status device_new(s2_ctx *ctx, device_bind_fn bind, int ordinal, s2_device **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_INVALID, "device: out is NULL");
    *out = NULL;
    s2_status st;
    const s2_cuda_api *d = s2_cuda_api_get(ctx, &st);
    if (!d)
        return st;
    s2_device *dev = calloc(1, sizeof *dev);
    if (!dev)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    dev->drv = d;
    dev->maps = calloc(1, sizeof *dev->maps);
    if (dev->maps && mtx_init(&dev->maps->lock, mtx_plain) != thrd_success) {
        free(dev->maps);
        dev->maps = NULL;
    }
    if ((st = bind(ctx, dev, ordinal)) == S2_OK)
        st = query_info(ctx, dev);
    return S2_HAND_OVER(st, out, dev, s2_device_free);
}

static s2_status bind_primary(s2_ctx *ctx, s2_device *dev, int ordinal)
{
    const s2_cuda_api *d = dev->drv;
    CUresult r = d->DeviceGet(&dev->cu_dev, ordinal);
    if (r != CUDA_SUCCESS)
        return s2_cu_fail(ctx, d, r, "cuDeviceGet(%d)", ordinal);
    r = d->DevicePrimaryCtxRetain(&dev->cu_ctx, dev->cu_dev);
    if (r != CUDA_SUCCESS)
        return s2_cu_fail(ctx, d, r, "cuDevicePrimaryCtxRetain(device %d)", ordinal);
    dev->retained = true;
    return S2_OK;
}

s2_status s2_device_open(s2_ctx *ctx, int ordinal, s2_device **out)
{
    int count = 0;
    s2_status st = s2_device_count(ctx, &count);
    if (st != S2_OK) {
        if (out)
            *out = NULL;
        return st;
    }
    if (ordinal < 0 || ordinal >= count) {
        if (out)
            *out = NULL;
        return s2_fail(ctx, S2_ERR_INVALID, "device %d does not exist (the driver reports %d)",
                       ordinal, count);
    }
    return device_new(ctx, bind_primary, ordinal, out);
}

static s2_status bind_current(s2_ctx *ctx, s2_device *dev, int ordinal)
{
    (void)ordinal;
    const s2_cuda_api *d = dev->drv;
    CUresult r = d->CtxGetCurrent(&dev->cu_ctx);
    if (r != CUDA_SUCCESS)
        return s2_cu_fail(ctx, d, r, "cuCtxGetCurrent");
    if (!dev->cu_ctx)
        return s2_fail(ctx, S2_ERR_INVALID, "no CUDA context is current on this thread to adopt");
    r = d->CtxGetDevice(&dev->cu_dev);
    if (r != CUDA_SUCCESS)
        return s2_cu_fail(ctx, d, r, "cuCtxGetDevice");
    return S2_OK;
}

s2_status s2_device_adopt_current(s2_ctx *ctx, s2_device **out)
{
    return device_new(ctx, bind_current, -1, out);
}

void s2_device_free(s2_device *dev)
{
    if (!dev)
        return;
    if (dev->retained)
        dev->drv->DevicePrimaryCtxRelease(dev->cu_dev);
    if (dev->maps)
        mtx_destroy(&dev->maps->lock);
    free(dev->maps);
    free(dev);
}

const s2_device_info *s2_device_get_info(const s2_device *dev) { return dev ? &dev->info : NULL; }

const s2_device_limits *s2_rt_device_limits(const s2_device *dev) { return dev ? &dev->limits : NULL; }
void *s2_device_cu_context(const s2_device *dev) { return dev ? (void *)dev->cu_ctx : NULL; }

/* ---- pointer validation ------------------------------------------------------ */

static s2_status check_ptr_attrs(s2_ctx *ctx, const s2_device *dev, s2_devptr ptr, size_t bytes,
                                 const char *what)
{
    const s2_cuda_api *d = dev->drv;
    /* one driver call for every attribute; unknown pointers read 0 there */
    unsigned int mtype = 0;
    /* IS_MANAGED is documented as "a boolean" of unstated width: a zeroed 8-byte word reads the same */
    unsigned long long managed = 0;
    CUcontext owner = NULL;
    int ordinal = -1;
    CUdeviceptr start = 0;
    size_t size = 0;
    CUpointer_attribute attrs[6] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                    CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *data[6] = {&mtype, &managed, &owner, &ordinal, &start, &size};
    CUresult r = d->PointerGetAttributes(6, attrs, data, ptr);
    if (r != CUDA_SUCCESS)
        return s2_cu_fail(ctx, d, r, "%s: cuPointerGetAttributes(0x%llx)", what, (unsigned long long)ptr);
    if (mtype == 0 && !managed) {
        /* unknown to the driver: the singular query says why */
        r = d->PointerGetAttribute(&mtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr);
        return s2_cu_fail_as(ctx, S2_ERR_INVALID, d, r == CUDA_SUCCESS ? CUDA_ERROR_INVALID_VALUE : r,
                             "%s: 0x%llx is not memory known to the CUDA driver", what, (unsigned long long)ptr);
    }
    if (mtype != CU_MEMORYTYPE_DEVICE && !managed)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: 0x%llx is %s memory, not device memory", what,
                       (unsigned long long)ptr, mtype == CU_MEMORYTYPE_HOST ? "host" : "non-device");
    if (!managed) {
        /* Pool and VMM allocations may name no context; the ordinal still must match. */
        if (owner && owner != dev->cu_ctx)
            return s2_fail(ctx, S2_ERR_INVALID, "%s: 0x%llx belongs to another CUDA context", what,
                           (unsigned long long)ptr);
        if (ordinal >= 0 && ordinal != dev->info.ordinal)
            return s2_fail(ctx, S2_ERR_INVALID, "%s: 0x%llx is memory of device %d, not of device %d",
                           what, (unsigned long long)ptr, ordinal, dev->info.ordinal);
    }
    if (bytes == 0 || size == 0)
        return S2_OK; /* the range is unknown: nothing more to check */
    uint64_t avail = start + size - ptr;
    if (ptr < start || avail < bytes)
        return s2_fail(ctx, S2_ERR_INVALID,
                       "%s: needs %zu bytes at 0x%llx, but its allocation ends after %llu bytes",
                       what, bytes, (unsigned long long)ptr, (unsigned long long)avail);
    return S2_OK;
}

s2_status s2_check_device_ptr(s2_ctx *ctx, const s2_device *dev, s2_devptr ptr, size_t bytes,
                              size_t align, const char *what)
{
    if (!what)
        what = "pointer";
    if (!dev)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: no device given", what);
    if (ptr == 0)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: null device pointer", what);
    if (align > 1 && (align & (align - 1)) != 0)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: alignment %zu is not a power of two", what, align);
    if (align > 1 && ptr % align != 0)
        return s2_fail(ctx, S2_ERR_INVALID, "%s: 0x%llx is not aligned to %zu bytes", what,
                       (unsigned long long)ptr, align);
    bool pushed = false;
    s2_status st = s2_cucontext_use(ctx, dev, &pushed);
    if (st != S2_OK)
        return st;
    st = check_ptr_attrs(ctx, dev, ptr, bytes, what);
    s2_cucontext_done(dev, pushed);
    return st;
}

/* ---- memory -------------------------------------------------------------------- */

/* Return a failure from the entry point `fn` when dev is NULL. */
#define S2_NEED_DEV(ctx, dev, fn)                                                 \
    do {                                                                          \
        if (!(dev))                                                               \
            return s2_fail((ctx), S2_ERR_INVALID, "%s: device is NULL", (fn));    \
    } while (0)

/* Run one driver call with dev's context current; `call` is its name for messages. */
#define S2_IN_CUCONTEXT(ctx, dev, call, ...)                                      \
    do {                                                                          \
        s2_status st_ = s2_cucontext_enter((ctx), (dev));                         \
        if (st_ != S2_OK)                                                         \
            return st_;                                                           \
        CUresult r_ = (dev)->drv->call(__VA_ARGS__);                              \
        s2_cucontext_leave(dev);                                                  \
        if (r_ != CUDA_SUCCESS)                                                   \
            return s2_cu_fail((ctx), (dev)->drv, r_, "cu" #call);                 \
    } while (0)

s2_status s2_mem_alloc(s2_ctx *ctx, const s2_device *dev, size_t bytes, s2_devptr *out)
{
    S2_NEED_DEV(ctx, dev, "s2_mem_alloc");
    if (!out)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_mem_alloc: out is NULL");
    *out = 0;
    if (bytes == 0)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_mem_alloc: zero bytes requested");
    CUdeviceptr p = 0;
    S2_IN_CUCONTEXT(ctx, dev, MemAlloc, &p, bytes);
    *out = p;
    return S2_OK;
}

s2_status s2_mem_free(s2_ctx *ctx, const s2_device *dev, s2_devptr ptr)
{
    if (ptr == 0)
        return S2_OK;
    S2_NEED_DEV(ctx, dev, "s2_mem_free");
    S2_IN_CUCONTEXT(ctx, dev, MemFree, ptr);
    return S2_OK;
}

s2_status s2_device_set_allocator(s2_ctx *ctx, s2_device *dev, const s2_allocator *a)
{
    S2_NEED_DEV(ctx, dev, "s2_device_set_allocator");
    if (a && (!a->alloc || !a->free))
        return s2_fail(ctx, S2_ERR_INVALID, "s2_device_set_allocator: alloc and free are both needed");
    if (atomic_load(&dev->held) != 0)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_device_set_allocator: the runtime holds %ld buffers of the current "
                       "allocator (set it before loading modules)", (long)atomic_load(&dev->held));
    dev->alloc = a ? *a : (s2_allocator){0};
    return S2_OK;
}

bool s2_rt_stream_capturing(const s2_device *dev, void *stream)
{
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    return dev->drv->StreamIsCapturing && dev->drv->StreamIsCapturing((CUstream)stream, &cs) == CUDA_SUCCESS &&
           cs != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* The count is the device's only mutable state after open (atomic: kernels
 * on several threads share a device), so const callers may move it. */
static _Atomic long *held_of(const s2_device *dev) { return (_Atomic long *)&dev->held; }

s2_status s2_rt_alloc(s2_ctx *ctx, const s2_device *dev, size_t bytes, void *stream, s2_devptr *out)
{
    *out = 0;
    if (!dev->alloc.alloc) {
        s2_status st = s2_mem_alloc(ctx, dev, bytes, out);
        if (st == S2_OK)
            atomic_fetch_add(held_of(dev), 1);
        return st;
    }
    s2_devptr p = 0;
    if (dev->alloc.alloc(dev->alloc.user, bytes, stream, &p) != 0 || p == 0)
        return s2_fail(ctx, S2_ERR_NOMEM, "the device's allocator could not give %zu bytes", bytes);
    if (p % 256 != 0) {
        dev->alloc.free(dev->alloc.user, p, stream);
        return s2_fail(ctx, S2_ERR_INVALID, "the device's allocator gave 0x%llx, not 256-byte aligned",
                       (unsigned long long)p);
    }
    atomic_fetch_add(held_of(dev), 1);
    *out = p;
    return S2_OK;
}

void s2_rt_free(const s2_device *dev, s2_devptr ptr, void *stream)
{
    if (!ptr)
        return;
    atomic_fetch_sub(held_of(dev), 1);
    if (dev->alloc.free)
        dev->alloc.free(dev->alloc.user, ptr, stream);
    else
        s2_mem_free(NULL, dev, ptr);
}

/* A copy's checks: a device, and both ends where it moves bytes (any). */
static s2_status copy_check(s2_ctx *ctx, const s2_device *dev, const char *fn, bool dst, bool src, bool any)
{
    S2_NEED_DEV(ctx, dev, fn);
    if (any && (!dst || !src))
        return s2_fail(ctx, S2_ERR_INVALID, "%s: null %s", fn, !dst ? "destination" : "source");
    return S2_OK;
}

s2_status s2_memcpy_h2d(s2_ctx *ctx, const s2_device *dev, s2_devptr dst, const void *src, size_t bytes)
{
    s2_status st = copy_check(ctx, dev, "s2_memcpy_h2d", dst, src, bytes);
    if (st != S2_OK || bytes == 0)
        return st;
    S2_IN_CUCONTEXT(ctx, dev, MemcpyHtoD, dst, src, bytes);
    return S2_OK;
}

s2_status s2_memcpy_d2h(s2_ctx *ctx, const s2_device *dev, void *dst, s2_devptr src, size_t bytes)
{
    s2_status st = copy_check(ctx, dev, "s2_memcpy_d2h", dst, src, bytes);
    if (st != S2_OK || bytes == 0)
        return st;
    S2_IN_CUCONTEXT(ctx, dev, MemcpyDtoH, dst, src, bytes);
    return S2_OK;
}

s2_status s2_memset_d8(s2_ctx *ctx, const s2_device *dev, s2_devptr dst, uint8_t value, size_t bytes)
{
    S2_NEED_DEV(ctx, dev, "s2_memset_d8");
    if (bytes == 0)
        return S2_OK;
    if (!dst)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_memset_d8: null destination");
    S2_IN_CUCONTEXT(ctx, dev, MemsetD8, dst, value, bytes);
    return S2_OK;
}

s2_status s2_rt_copy_async(s2_ctx *ctx, const s2_device *dev, s2_devptr dst, const void *src, size_t bytes,
                           void *stream)
{
    if (bytes == 0)
        return S2_OK;
    S2_IN_CUCONTEXT(ctx, dev, MemcpyHtoDAsync, dst, src, bytes, (CUstream)stream);
    return S2_OK;
}

s2_status s2_rt_fill_async(s2_ctx *ctx, const s2_device *dev, s2_devptr dst, uint8_t value, size_t bytes,
                           void *stream)
{
    if (bytes == 0)
        return S2_OK;
    S2_IN_CUCONTEXT(ctx, dev, MemsetD8Async, dst, value, bytes, (CUstream)stream);
    return S2_OK;
}

s2_status s2_device_synchronize(s2_ctx *ctx, const s2_device *dev)
{
    S2_NEED_DEV(ctx, dev, "s2_device_synchronize");
    S2_IN_CUCONTEXT(ctx, dev, CtxSynchronize);
    return S2_OK;
}

/* ---- streams and events --------------------------------------------------------- */

s2_status s2_stream_create(s2_ctx *ctx, const s2_device *dev, void **stream)
{
    S2_NEED_DEV(ctx, dev, "s2_stream_create");
    if (!stream)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_stream_create: stream is NULL");
    *stream = NULL;
    CUstream s = NULL;
    S2_IN_CUCONTEXT(ctx, dev, StreamCreate, &s, CU_STREAM_DEFAULT);
    *stream = s;
    return S2_OK;
}

s2_status s2_stream_destroy(s2_ctx *ctx, const s2_device *dev, void *stream)
{
    if (!stream)
        return S2_OK;
    S2_NEED_DEV(ctx, dev, "s2_stream_destroy");
    S2_IN_CUCONTEXT(ctx, dev, StreamDestroy, (CUstream)stream);
    return S2_OK;
}

s2_status s2_stream_synchronize(s2_ctx *ctx, const s2_device *dev, void *stream)
{
    S2_NEED_DEV(ctx, dev, "s2_stream_synchronize");
    S2_IN_CUCONTEXT(ctx, dev, StreamSynchronize, (CUstream)stream);
    return S2_OK;
}

struct s2_event {
    const s2_device *dev;
    CUevent ev;
};

s2_status s2_event_create(s2_ctx *ctx, const s2_device *dev, s2_event **out)
{
    S2_NEED_DEV(ctx, dev, "s2_event_create");
    if (!out)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_event_create: out is NULL");
    *out = NULL;
    s2_event *e = calloc(1, sizeof *e);
    if (!e)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    e->dev = dev;
    s2_status st = s2_cucontext_enter(ctx, dev);
    if (st != S2_OK) {
        free(e);
        return st;
    }
    CUresult r = dev->drv->EventCreate(&e->ev, CU_EVENT_DEFAULT);
    s2_cucontext_leave(dev);
    if (r != CUDA_SUCCESS) {
        free(e);
        return s2_cu_fail(ctx, dev->drv, r, "cuEventCreate");
    }
    *out = e;
    return S2_OK;
}

void s2_event_free(s2_event *ev)
{
    if (!ev)
        return;
    if (s2_cucontext_enter(NULL, ev->dev) == S2_OK) {
        ev->dev->drv->EventDestroy(ev->ev);
        s2_cucontext_leave(ev->dev);
    }
    free(ev);
}

s2_status s2_event_record(s2_ctx *ctx, s2_event *ev, void *stream)
{
    if (!ev)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_event_record: event is NULL");
    S2_IN_CUCONTEXT(ctx, ev->dev, EventRecord, ev->ev, (CUstream)stream);
    return S2_OK;
}

s2_status s2_stream_wait_event(s2_ctx *ctx, s2_event *ev, void *stream)
{
    if (!ev)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_stream_wait_event: event is NULL");
    if (!ev->dev->drv->StreamWaitEvent)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "the CUDA driver provides no cuStreamWaitEvent");
    S2_IN_CUCONTEXT(ctx, ev->dev, StreamWaitEvent, (CUstream)stream, ev->ev, 0);
    return S2_OK;
}

s2_status s2_memcpy_d2d_async(s2_ctx *ctx, const s2_device *dev, s2_devptr dst, s2_devptr src, size_t bytes,
                              void *stream)
{
    s2_status st = copy_check(ctx, dev, "s2_memcpy_d2d_async", dst, src, bytes);
    if (st != S2_OK || bytes == 0)
        return st;
    if (!dev->drv->MemcpyDtoDAsync)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "the CUDA driver provides no cuMemcpyDtoDAsync");
    S2_IN_CUCONTEXT(ctx, dev, MemcpyDtoDAsync, dst, src, bytes, (CUstream)stream);
    return S2_OK;
}

s2_status s2_memcpy_2d_async(s2_ctx *ctx, const s2_device *dev, s2_devptr dst, size_t dst_pitch, s2_devptr src,
                             size_t src_pitch, size_t row_bytes, size_t rows, void *stream)
{
    s2_status st = copy_check(ctx, dev, "s2_memcpy_2d_async", dst, src, row_bytes && rows);
    if (st != S2_OK || row_bytes == 0 || rows == 0)
        return st;
    if (dst_pitch < row_bytes || src_pitch < row_bytes)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_memcpy_2d_async: a pitch below the row's %zu bytes", row_bytes);
    if (!dev->drv->Memcpy2DAsync)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "the CUDA driver provides no cuMemcpy2DAsync");
    CUDA_MEMCPY2D c = {0};
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = src, c.srcPitch = src_pitch;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = dst, c.dstPitch = dst_pitch;
    c.WidthInBytes = row_bytes, c.Height = rows;
    S2_IN_CUCONTEXT(ctx, dev, Memcpy2DAsync, &c, (CUstream)stream);
    return S2_OK;
}

s2_status s2_event_elapsed_ms(s2_ctx *ctx, s2_event *start, s2_event *stop, float *ms)
{
    if (!start || !stop || !ms)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_event_elapsed_ms: NULL argument");
    if (start->dev->cu_ctx != stop->dev->cu_ctx)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_event_elapsed_ms: events of different contexts");
    *ms = 0.0f;
    S2_IN_CUCONTEXT(ctx, stop->dev, EventSynchronize, stop->ev);
    S2_IN_CUCONTEXT(ctx, stop->dev, EventElapsedTime, ms, start->ev, stop->ev);
    return S2_OK;
}
