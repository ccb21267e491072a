/* Loading the CUDA driver without linking it: dlopen, then cuGetProcAddress
 * for every entry point (dlsym only finds cuGetProcAddress itself).  The
 * result, good or bad, is computed once per process and replayed to callers. */
#include "dtype.h"
#include "rt_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S2_DEFAULT_LIBCUDA "libcuda.so.1"

typedef struct driver_state {
    s2_cuda_api drv;
    s2_dl_state dl;
} driver_state;

/* The only global state of the runtime: written once inside call_once. */
static driver_state g_state;
static once_flag g_once = ONCE_FLAG_INIT;

typedef struct proc_resolver {
    PFN_cuGetProcAddress_v12000 v2; /* cuGetProcAddress_v2 (CUDA 12+) */
    PFN_cuGetProcAddress_v11030 v1; /* fallback when _v2 is not exported */
} proc_resolver;

static const char *libcuda_name(void) { return s2_dl_name("S2C_LIBCUDA", S2_DEFAULT_LIBCUDA); }

static bool resolve(const proc_resolver *pr, const char *symbol, void **fn)
{
    *fn = NULL;
    CUresult r;
    if (pr->v2) {
        CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        r = pr->v2(symbol, fn, S2_CUDA_ABI, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);
        if (found != CU_GET_PROC_ADDRESS_SUCCESS)
            return false;
    } else {
        r = pr->v1(symbol, fn, S2_CUDA_ABI, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    }
    return r == CUDA_SUCCESS && *fn != NULL;
}

static bool resolve_all(driver_state *s, const proc_resolver *pr)
{
    void *fn;
#define S2_RESOLVE(name, ver)                                                          \
    if (!resolve(pr, "cu" #name, &fn)) {                                               \
        s2_dl_fail(&s->dl, S2_ERR_NO_DRIVER, "the CUDA driver (%s) does not provide cu" #name \
                   " for CUDA %d.%d", libcuda_name(), S2_CUDA_ABI / 1000, S2_CUDA_ABI % 1000 / 10); \
        return false;                                                                  \
    }                                                                                  \
    s->drv.name = (PFN_cu##name##_##ver)fn;
    S2_CUDA_FUNCS(S2_RESOLVE)
#undef S2_RESOLVE
    if (resolve(pr, "cuTensorMapEncodeTiled", &fn))
        s->drv.TensorMapEncodeTiled = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    if (resolve(pr, "cuStreamIsCapturing", &fn))
        s->drv.StreamIsCapturing = (PFN_cuStreamIsCapturing_v10000)fn;
    if (resolve(pr, "cuStreamWaitEvent", &fn))
        s->drv.StreamWaitEvent = (PFN_cuStreamWaitEvent_v3020)fn;
    if (resolve(pr, "cuMemcpyDtoDAsync", &fn))
        s->drv.MemcpyDtoDAsync = (PFN_cuMemcpyDtoDAsync_v3020)fn;
    if (resolve(pr, "cuMemcpy2DAsync", &fn))
        s->drv.Memcpy2DAsync = (PFN_cuMemcpy2DAsync_v3020)fn;
    return true;
}

static void init_driver(driver_state *s, const s2_cuda_api *d)
{
    CUresult r = d->Init(0);
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        d->GetErrorName(r, &name);
        if (r == CUDA_ERROR_NO_DEVICE)
            s2_dl_fail(&s->dl, S2_ERR_NO_DEVICE, "no CUDA device: cuInit failed: %s", name ? name : "?");
        else
            s2_dl_fail(&s->dl, S2_ERR_NO_DRIVER, "the CUDA driver cannot be used: cuInit failed: %s (%d)",
                       name ? name : "?", (int)r);
        return;
    }
    r = d->DriverGetVersion(&s->drv.version);
    if (r != CUDA_SUCCESS)
        s->drv.version = 0;
}

static void load_driver(void)
{
    driver_state *s = &g_state;
    const char *lib = libcuda_name();
    void *h = s2_dl_open(&s->dl, S2_ERR_NO_DRIVER, "the CUDA driver", lib);
    if (!h)
        return;
    proc_resolver pr = {0};
    pr.v2 = (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
    if (!pr.v2)
        pr.v1 = (PFN_cuGetProcAddress_v11030)dlsym(h, "cuGetProcAddress");
    if (!pr.v2 && !pr.v1) {
        s2_dl_fail(&s->dl, S2_ERR_NO_DRIVER, "%s exports no cuGetProcAddress (driver older than CUDA 11.3?)", lib);
        return;
    }
    if (!resolve_all(s, &pr))
        return;
    init_driver(s, &s->drv);
}

static void load_driver_once(void) { load_driver(); }

const s2_cuda_api *s2_cuda_api_get(s2_ctx *ctx, s2_status *st)
{
    call_once(&g_once, load_driver_once);
    *st = s2_dl_status(ctx, &g_state.dl);
    return *st == S2_OK ? &g_state.drv : NULL;
}

static s2_status cu_vfail(s2_ctx *ctx, s2_status st, const s2_cuda_api *drv, CUresult r,
                          const char *fmt, va_list ap)
{
    char what[512];
    vsnprintf(what, sizeof what, fmt, ap);
    const char *name = NULL, *desc = NULL;
    if (drv->GetErrorName(r, &name) != CUDA_SUCCESS || !name)
        name = "CUDA_ERROR_UNKNOWN";
    if (drv->GetErrorString(r, &desc) != CUDA_SUCCESS || !desc)
        desc = "no description";
    return s2_fail(ctx, st, "%s: %s (%s, code %d)", what, name, desc, (int)r);
}

s2_status s2_cu_fail(s2_ctx *ctx, const s2_cuda_api *drv, CUresult r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    s2_status st = cu_vfail(ctx, S2_ERR_CUDA, drv, r, fmt, ap);
    va_end(ap);
    return st;
}

s2_status s2_cu_fail_as(s2_ctx *ctx, s2_status st, const s2_cuda_api *drv, CUresult r,
                        const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cu_vfail(ctx, st, drv, r, fmt, ap);
    va_end(ap);
    return st;
}

s2_status s2_cuda_driver_version(s2_ctx *ctx, int *version)
{
    call_once(&g_once, load_driver_once);
    return s2_dl_version(ctx, &g_state.dl, g_state.drv.version, version);
}

s2_status s2_device_count(s2_ctx *ctx, int *count)
{
    if (!count)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_device_count: count is NULL");
    *count = 0;
    s2_status st;
    const s2_cuda_api *d = s2_cuda_api_get(ctx, &st);
    if (!d)
        return st;
    CUresult r = d->DeviceGetCount(count);
    if (r != CUDA_SUCCESS)
        return s2_cu_fail(ctx, d, r, "cuDeviceGetCount");
    if (*count <= 0) {
        *count = 0;
        return s2_fail(ctx, S2_ERR_NO_DEVICE, "the CUDA driver reports no device");
    }
    return S2_OK;
}

/* ---- the tensor-map memo (rt_internal.h, s2_map_memo) ---- */

/* Over the key's words used: a multiply-xorshift mix per 8 bytes. */
static uint64_t memo_hash(const unsigned char *key, size_t used)
{
    uint64_t hash = 0;
    for (size_t i = 0; i < (used + 7) / 8; i++) {
        uint64_t w;
        memcpy(&w, key + 8 * i, sizeof w);
        hash = (hash ^ w) * 0x9e3779b97f4a7c15ull;
        hash ^= hash >> 29;
    }
    return hash;
}

/* The map of key into *map; false when m holds none (or is NULL). */
static bool memo_find(s2_map_memo *m, const unsigned char key[160], uint64_t hash, s2_tensor_map *map)
{
    bool hit = false;
    if (!m)
        return false;
    mtx_lock(&m->lock);
    /* newest first: a launch's maps were usually encoded together */
    for (int n = 1; n <= S2_MAP_MEMO && !hit; n++) {
        int i = (m->next - n + S2_MAP_MEMO) % S2_MAP_MEMO;
        if (m->e[i].used && m->e[i].hash == hash && memcmp(m->e[i].key, key, sizeof m->e[i].key) == 0) {
            memcpy(map, m->e[i].map, sizeof(CUtensorMap));
            hit = true;
        }
    }
    mtx_unlock(&m->lock);
    return hit;
}

/* Keep key's map, in place of the oldest. */
static void memo_put(s2_map_memo *m, const unsigned char key[160], uint64_t hash, const s2_tensor_map *map)
{
    if (!m)
        return;
    mtx_lock(&m->lock);
    int i = m->next;
    m->next = (i + 1) % S2_MAP_MEMO;
    m->e[i].used = true;
    m->e[i].hash = hash;
    memcpy(m->e[i].key, key, sizeof m->e[i].key);
    memcpy(m->e[i].map, map, sizeof(CUtensorMap));
    mtx_unlock(&m->lock);
}

s2_status s2_tensor_map_encode_tiled(s2_ctx *ctx, const s2_device *dev, s2_tensor_map *map, s2_dtype dtype, int rank,
                                     s2_devptr addr,
                                     const uint64_t *dims, const uint64_t *strides, const uint32_t *box,
                                     int swizzle_bytes)
{
    if (!dev || !map || !dims || (rank > 1 && !strides) || !box)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_tensor_map_encode_tiled: null argument");
    if (rank < 1 || rank > 5)
        return s2_fail(ctx, S2_ERR_INVALID, "tensor map: rank %d (1..5)", rank);
    const s2_dtype_info *dti = s2_dtype_info_of(dtype);
    if (!dti || dti->tensor_map < 0)
        return s2_fail(ctx, S2_ERR_DTYPE, "tensor map: dtype %s", s2_dtype_name(dtype));
    CUtensorMapDataType ty = (CUtensorMapDataType)dti->tensor_map;
    CUtensorMapSwizzle sw;
    switch (swizzle_bytes) {
    case 0: sw = CU_TENSOR_MAP_SWIZZLE_NONE; break;
    case 32: sw = CU_TENSOR_MAP_SWIZZLE_32B; break;
    case 64: sw = CU_TENSOR_MAP_SWIZZLE_64B; break;
    case 128: sw = CU_TENSOR_MAP_SWIZZLE_128B; break;
    default: return s2_fail(ctx, S2_ERR_INVALID, "tensor map: swizzle %d bytes (0, 32, 64, 128)", swizzle_bytes);
    }
    s2_status st;
    const s2_cuda_api *d = s2_cuda_api_get(ctx, &st);
    if (!d)
        return st;
    if (!d->TensorMapEncodeTiled)
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "the CUDA driver has no cuTensorMapEncodeTiled");
    cuuint64_t gd[5], gs[5];
    cuuint32_t bx[5], es[5];
    for (int i = 0; i < rank; i++) {
        gd[i] = dims[i];
        bx[i] = box[i];
        es[i] = 1;
        if (i + 1 < rank)
            gs[i] = strides[i];
    }
    memset(map, 0, sizeof *map);
    /* the memo's key: every input of the encode */
    unsigned char key[160] = {0};
    size_t at = 0;
#define KEY(x) (memcpy(key + at, &(x), sizeof(x)), at += sizeof(x))
    KEY(ty), KEY(sw), KEY(rank), KEY(addr);
    for (int i = 0; i < rank; i++)
        KEY(gd[i]), KEY(bx[i]);
    for (int i = 0; i + 1 < rank; i++)
        KEY(gs[i]);
#undef KEY
    _Static_assert(sizeof(int) * 3 + 8 + 5 * 12 + 4 * 8 <= sizeof key, "tensor map key");
    _Static_assert(sizeof(CUtensorMap) <= sizeof dev->maps->e[0].map, "tensor map size");
    uint64_t hash = memo_hash(key, at);
    if (memo_find(dev->maps, key, hash, map))
        return S2_OK;
    /* the driver wants a current context, though the map belongs to none */
    bool pushed = false;
    if ((st = s2_cucontext_use(ctx, dev, &pushed)) != S2_OK)
        return st;
    CUresult r = d->TensorMapEncodeTiled((CUtensorMap *)map, ty, (cuuint32_t)rank, (void *)(uintptr_t)addr, gd, gs, bx,
                                         es, CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    s2_cucontext_done(dev, pushed);
    if (r != CUDA_SUCCESS)
        return s2_cu_fail_as(ctx, S2_ERR_INVALID, d, r, "cuTensorMapEncodeTiled (rank %d, address 0x%llx)", rank,
                             (unsigned long long)addr);
    memo_put(dev->maps, key, hash, map);
    return S2_OK;
}
