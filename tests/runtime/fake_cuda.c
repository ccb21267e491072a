/* A fake libcuda for the CPU tests: it exports cuGetProcAddress_v2 (or, built
 * with FAKE_V1_ONLY, only the old four-argument cuGetProcAddress) and hands
 * out stubs whose behaviour the test sets through fake_cuda_set.  "Device
 * memory" is host memory from malloc, so copies and pointer queries work.
 * Thread-safe: every stub runs under one mutex, the context stack is the
 * calling thread's (as the driver's), and each thread keeps a copy of its
 * own last launch (fake_cuda_thread_last_launch). */
#include "fake_cuda.h"

#include <cuda.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KB 1024LL

typedef struct fake_state {
    long long devices;          /* cuDeviceGetCount */
    long long init_result;      /* cuInit */
    long long module_result;    /* cuModuleLoadData */
    long long launch_result;    /* cuLaunchKernel */
    long long optin_smem;       /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
    long long static_smem;      /* kernel SHARED_SIZE_BYTES */
    long long kernel_threads;   /* kernel MAX_THREADS_PER_BLOCK */
    long long dyn_limit;        /* kernel MAX_DYNAMIC_SHARED_SIZE_BYTES */
    long long sm_count;         /* MULTIPROCESSOR_COUNT */
    long long smem_per_sm;      /* MAX_SHARED_MEMORY_PER_MULTIPROCESSOR */
    long long cc_major, cc_minor; /* COMPUTE_CAPABILITY_MAJOR / MINOR */
    long long capturing;        /* cuStreamIsCapturing reports every stream as capturing */
    long long next_alloc_host;  /* next allocation reports CU_MEMORYTYPE_HOST */
    long long next_alloc_foreign; /* next allocation belongs to another context */
    /* next allocation (of more than this many bytes, a multiple of 256) is two
     * back to back: the first this long (returned), the rest at split_second
     * (free it first), as a real allocator may place two of them */
    long long next_alloc_split, split_second;
    /* observations */
    long long gpa_v1_calls, gpa_v2_calls, gpa_version, gpa_flags;
    long long primary_refs;     /* retain - release */
    long long max_depth;        /* deepest context stack of any thread */
    long long set_attr_calls, set_attr_value;
    long long launches, last_smem, last_grid_x, last_block_x;
    long long last_grid_y, last_grid_z, last_block_y, last_block_z;
    long long last_params_bytes; /* bytes copied after fake_cuda_param_sizes, else 0 */
    long long tensor_maps;      /* cuTensorMapEncodeTiled calls */
    long long async_copies;     /* cuMemcpyHtoDAsync calls */
    long long modules_loaded, modules_unloaded;
    long long allocs_live;
    long long streams_live, events_live;
    long long ctx_ptr;          /* the fake primary context, as an integer */
    long long set_current;      /* writing 1 makes the primary context current on the calling thread */
    /* key "depth": the calling thread's context stack depth (not a field) */
} fake_state;

static fake_state S = {
    .devices = 1, .optin_smem = 227 * KB, .kernel_threads = 1024, .dyn_limit = 48 * KB, .sm_count = 132,
    .smem_per_sm = 228 * KB,
    .cc_major = 9, .cc_minor = 0,
};

static struct { const char *key; size_t off; } const keys[] = {
#define K(f) {#f, offsetof(fake_state, f)}
    K(devices), K(init_result), K(module_result), K(launch_result), K(optin_smem),
    K(static_smem), K(kernel_threads), K(dyn_limit), K(sm_count), K(smem_per_sm), K(cc_major), K(cc_minor), K(capturing), K(next_alloc_host), K(next_alloc_foreign),
    K(next_alloc_split), K(split_second),
    K(gpa_v1_calls), K(gpa_v2_calls), K(gpa_version), K(gpa_flags), K(primary_refs),
    K(max_depth), K(set_attr_calls), K(set_attr_value), K(launches), K(tensor_maps), K(last_smem),
    K(last_grid_x), K(last_block_x), K(modules_loaded), K(modules_unloaded), K(allocs_live),
    K(streams_live), K(events_live), K(ctx_ptr), K(set_current), K(last_grid_y), K(last_grid_z),
    K(last_block_y), K(last_block_z), K(last_params_bytes), K(async_copies),
#undef K
};

static char primary_ctx_obj, foreign_ctx_obj, module_obj, event_obj;
/* a function object per kernel name, each with its own dynamic shared memory
 * limit (key dyn_limit: a new function's, and the last one set) */
enum { FAKE_FUNCTIONS = 4096 };
typedef struct fake_function {
    char *name;
    long long dyn_limit;
} fake_function;
static fake_function functions[FAKE_FUNCTIONS];
static int num_functions;
/* distinct stream handles, a slot each while created */
enum { FAKE_STREAMS = 64 };
static char stream_objs[FAKE_STREAMS], stream_used[FAKE_STREAMS];
/* the context stack is per thread, as the driver's */
static _Thread_local CUcontext stack[16];
static _Thread_local long long depth;
static char *last_image;

/* Every stub and control call holds this while it touches the shared state:
 * TRACE takes it at a stub's entry and RET releases it. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void lock(void) { pthread_mutex_lock(&mu); }
static void unlock(void) { pthread_mutex_unlock(&mu); }
#define RET(x) do { CUresult ret_ = (x); unlock(); return ret_; } while (0)

typedef struct fake_alloc {
    char *p;
    size_t size;
    CUcontext ctx;
    int host;
    int borrowed;   /* the second half of a split allocation: its memory is the first's */
} fake_alloc;
enum { FAKE_ALLOCS = 512 };
static fake_alloc allocs[FAKE_ALLOCS];
static int allocs_top; /* slots below it may be in use */

void fake_cuda_set(const char *key, long long value);
long long fake_cuda_get(const char *key);
const char *fake_cuda_last_image(void);
void fake_cuda_param_sizes(const int *sizes, int n);
const unsigned char *fake_cuda_last_params(void);
const unsigned char *fake_cuda_launch_at(int back, long long shape[8]);
void fake_cuda_thread_param_sizes(const int *sizes, int n);
const fake_cuda_launch *fake_cuda_thread_last_launch(void);

/* The launch parameters' sizes are not the driver's to know: a test that
 * wants a launch's parameter bytes declares them (n = 0 stops recording). */
enum { FAKE_MAX_PARAMS = 64, FAKE_PARAM_BYTES = FAKE_CUDA_PARAM_BYTES };
static int param_sizes[FAKE_MAX_PARAMS], num_param_sizes;
/* the calling thread's own sizes and last launch */
static _Thread_local int thread_param_sizes[FAKE_MAX_PARAMS], thread_num_param_sizes;
static _Thread_local fake_cuda_launch thread_last;
static unsigned char last_params[FAKE_PARAM_BYTES];
/* the last FAKE_HISTORY launches while recording (a module launches several kernels) */
enum { FAKE_HISTORY = 4 };
static struct {
    long long shape[8]; /* grid x y z, block x y z, shared memory, parameter bytes */
    unsigned char params[FAKE_PARAM_BYTES];
} history[FAKE_HISTORY];
static long long history_n;

/* The names of the driver calls made while tracing (key "trace" 1 clears
 * and starts, 0 stops), comma-separated, for tests of which calls a path makes. */
enum { FAKE_TRACE_BYTES = 8192 };
static char trace_log[FAKE_TRACE_BYTES];
static size_t trace_len;
static int tracing;
const char *fake_cuda_trace(void);
const char *fake_cuda_trace(void) { return trace_log; }
#define TRACE(name) (lock(), trace_call(name))
static long long *slot(const char *key)
{
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(keys[i].key, key) == 0)
            return (long long *)((char *)&S + keys[i].off);
    abort(); /* a typo in a test */
}

void fake_cuda_set(const char *key, long long value)
{
    if (strcmp(key, "depth") == 0) { /* the calling thread's */
        depth = value < 0 ? 0 : value > 16 ? 16 : value;
        return;
    }
    if (strcmp(key, "set_current") == 0 && value) {
        stack[0] = (CUcontext)&primary_ctx_obj;
        depth = 1;
        return;
    }
    lock();
    if (strcmp(key, "trace") == 0) {
        tracing = value != 0;
        if (tracing)
        {
            trace_len = 0;
            trace_log[0] = 0;
        }
    } else {
        *slot(key) = value;
    }
    unlock();
}

long long fake_cuda_get(const char *key)
{
    if (strcmp(key, "depth") == 0)
        return depth;
    lock();
    S.ctx_ptr = (long long)(intptr_t)&primary_ctx_obj;
    long long v = *slot(key);
    unlock();
    return v;
}

/* The pointers below stay valid; read what they point to when no other
 * thread is calling the driver. */
const char *fake_cuda_last_image(void)
{
    lock();
    const char *p = last_image;
    unlock();
    return p;
}

static int clamp_sizes(int n) { return n < 0 ? 0 : n > FAKE_MAX_PARAMS ? FAKE_MAX_PARAMS : n; }

void fake_cuda_param_sizes(const int *sizes, int n)
{
    lock();
    num_param_sizes = clamp_sizes(n);
    for (int i = 0; i < num_param_sizes; i++)
        param_sizes[i] = sizes[i];
    unlock();
}

const unsigned char *fake_cuda_last_params(void) { return last_params; }

/* back = 0: the last recorded launch, 1 the one before...; NULL if none. */
const unsigned char *fake_cuda_launch_at(int back, long long shape[8])
{
    const unsigned char *p = NULL;
    lock();
    if (back >= 0 && back < FAKE_HISTORY && back < history_n) {
        int at = (int)((history_n - 1 - back) % FAKE_HISTORY);
        memcpy(shape, history[at].shape, sizeof history[at].shape);
        p = history[at].params;
    }
    unlock();
    return p;
}

void fake_cuda_thread_param_sizes(const int *sizes, int n)
{
    thread_num_param_sizes = clamp_sizes(n);
    for (int i = 0; i < thread_num_param_sizes; i++)
        thread_param_sizes[i] = sizes[i];
}

const fake_cuda_launch *fake_cuda_thread_last_launch(void) { return &thread_last; }

/* Copy the parameters of sizes[0..n) into out (at most cap bytes); the bytes copied. */
static long long copy_params(void **params, const int *sizes, int n, unsigned char *out, size_t cap)
{
    size_t at = 0;
    for (int i = 0; i < n && params; i++) {
        size_t len = (size_t)sizes[i];
        if (at + len > cap)
            break;
        memcpy(out + at, params[i], len);
        at += len;
    }
    return (long long)at;
}

static void record_params(void **params)
{
    S.last_params_bytes = copy_params(params, param_sizes, num_param_sizes, last_params, sizeof last_params);
}

static void trace_call(const char *name)
{
    size_t n = strlen(name);
    if (!tracing || trace_len + n + 2 > sizeof trace_log)
        return;
    if (trace_len)
        trace_log[trace_len++] = ',';
    memcpy(trace_log + trace_len, name, n + 1);
    trace_len += n;
}

static CUcontext current(void) { return depth > 0 ? stack[depth - 1] : NULL; }

/* ---- stubs ----------------------------------------------------------------- */

static CUresult CUDAAPI f_Init(unsigned int flags) { TRACE("Init"); (void)flags; RET((CUresult)S.init_result); }
static CUresult CUDAAPI f_DriverGetVersion(int *v) { TRACE("DriverGetVersion"); *v = 12080; RET(CUDA_SUCCESS); }

static CUresult CUDAAPI f_GetErrorName(CUresult r, const char **s)
{
    TRACE("GetErrorName");
    switch (r) {
    case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; break;
    case CUDA_ERROR_INVALID_IMAGE: *s = "CUDA_ERROR_INVALID_IMAGE"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case CUDA_ERROR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: *s = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"; break;
    default: *s = NULL; RET(CUDA_ERROR_INVALID_VALUE);
    }
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_GetErrorString(CUresult r, const char **s)
{
    TRACE("GetErrorString");
    *s = r == CUDA_SUCCESS ? "no error" : "fake driver error";
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_DeviceGetCount(int *n) { TRACE("DeviceGetCount"); *n = (int)S.devices; RET(CUDA_SUCCESS); }

static CUresult CUDAAPI f_DeviceGet(CUdevice *d, int ordinal)
{
    TRACE("DeviceGet");
    if (ordinal < 0 || ordinal >= S.devices)
        RET(CUDA_ERROR_INVALID_DEVICE);
    *d = ordinal;
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_DeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    TRACE("DeviceGetAttribute");
    (void)d;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = (int)S.cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = (int)S.cc_minor; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = (int)S.sm_count; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 48 * 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = (int)S.optin_smem; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = (int)S.smem_per_sm; break;
    /* an H100's */
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *v = 32; break;
    default: RET(CUDA_ERROR_INVALID_VALUE);
    }
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_DeviceGetName(char *name, int len, CUdevice d)
{
    TRACE("DeviceGetName");
    (void)d;
    strncpy(name, "Fake GPU", (size_t)len);
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_DeviceTotalMem(size_t *b, CUdevice d) { TRACE("DeviceTotalMem"); (void)d; *b = (size_t)80 << 30; RET(CUDA_SUCCESS); }

static CUresult CUDAAPI f_DevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    TRACE("DevicePrimaryCtxRetain");
    (void)d;
    S.primary_refs++;
    *c = (CUcontext)&primary_ctx_obj;
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_DevicePrimaryCtxRelease(CUdevice d) { TRACE("DevicePrimaryCtxRelease"); (void)d; S.primary_refs--; RET(CUDA_SUCCESS); }
static CUresult CUDAAPI f_CtxGetCurrent(CUcontext *c) { TRACE("CtxGetCurrent"); *c = current(); RET(CUDA_SUCCESS); }

static CUresult CUDAAPI f_CtxGetDevice(CUdevice *d)
{
    TRACE("CtxGetDevice");
    if (!current())
        RET(CUDA_ERROR_INVALID_CONTEXT);
    *d = 0;
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_CtxPushCurrent(CUcontext c)
{
    TRACE("CtxPushCurrent");
    if (!c || depth >= 16)
        RET(CUDA_ERROR_INVALID_VALUE);
    stack[depth++] = c;
    if (depth > S.max_depth)
        S.max_depth = depth;
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_CtxPopCurrent(CUcontext *c)
{
    TRACE("CtxPopCurrent");
    if (depth == 0)
        RET(CUDA_ERROR_INVALID_CONTEXT);
    *c = stack[--depth];
    RET(CUDA_SUCCESS);
}

static CUresult need_ctx(void) { return current() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }
static CUresult CUDAAPI f_CtxSynchronize(void) { TRACE("CtxSynchronize"); RET(need_ctx()); }

static CUresult CUDAAPI f_ModuleLoadData(CUmodule *m, const void *image)
{
    TRACE("ModuleLoadData");
    if (need_ctx() != CUDA_SUCCESS)
        RET(CUDA_ERROR_INVALID_CONTEXT);
    if (S.module_result != CUDA_SUCCESS)
        RET((CUresult)S.module_result);
    free(last_image);
    last_image = strdup(image); /* PTX is text; the tests pass no binaries */
    *m = (CUmodule)&module_obj;
    S.modules_loaded++;
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_ModuleUnload(CUmodule m)
{
    TRACE("ModuleUnload");
    if (m != (CUmodule)&module_obj)
        RET(CUDA_ERROR_INVALID_HANDLE);
    S.modules_unloaded++;
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_ModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    TRACE("ModuleGetFunction");
    if (m != (CUmodule)&module_obj)
        RET(CUDA_ERROR_INVALID_HANDLE);
    if (strcmp(name, "missing") == 0)
        RET(CUDA_ERROR_NOT_FOUND);
    for (int i = 0; i < num_functions; i++)
        if (strcmp(functions[i].name, name) == 0) {
            *f = (CUfunction)&functions[i];
            RET(CUDA_SUCCESS);
        }
    fake_function *fn = &functions[num_functions];
    if (num_functions == FAKE_FUNCTIONS || !(fn->name = strdup(name)))
        RET(CUDA_ERROR_OUT_OF_MEMORY);
    num_functions++;
    fn->dyn_limit = S.dyn_limit;
    *f = (CUfunction)fn;
    RET(CUDA_SUCCESS);
}

static fake_function *function_of(CUfunction f)
{
    fake_function *fn = (fake_function *)f;
    return fn >= functions && fn < functions + num_functions ? fn : NULL;
}

static CUresult CUDAAPI f_FuncSetAttribute(CUfunction f, CUfunction_attribute a, int v)
{
    TRACE("FuncSetAttribute");
    fake_function *fn = function_of(f);
    if (!fn || a != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        RET(CUDA_ERROR_INVALID_VALUE);
    if (v + S.static_smem > S.optin_smem)
        RET(CUDA_ERROR_INVALID_VALUE);
    S.set_attr_calls++;
    S.set_attr_value = v;
    S.dyn_limit = fn->dyn_limit = v;
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_FuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f)
{
    TRACE("FuncGetAttribute");
    fake_function *fn = function_of(f);
    if (!fn)
        RET(CUDA_ERROR_INVALID_HANDLE);
    switch (a) {
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = 40; break;
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = (int)S.kernel_threads; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *v = (int)S.static_smem; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *v = 8; break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = (int)fn->dyn_limit; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *v = 75; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *v = 90; break;
    default: RET(CUDA_ERROR_INVALID_VALUE);
    }
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_LaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                       unsigned bx, unsigned by, unsigned bz, unsigned smem,
                                       CUstream s, void **params, void **extra)
{
    TRACE("LaunchKernel");
    (void)extra;
    if (current() != (CUcontext)&primary_ctx_obj)
        RET(CUDA_ERROR_INVALID_CONTEXT);
    fake_function *fn = function_of(f);
    if (!fn || smem > fn->dyn_limit)
        RET(CUDA_ERROR_INVALID_VALUE);
    if (S.launch_result != CUDA_SUCCESS)
        RET((CUresult)S.launch_result);
    S.launches++;
    S.last_smem = smem;
    S.last_grid_x = gx;
    S.last_block_x = bx;
    S.last_grid_y = gy, S.last_grid_z = gz, S.last_block_y = by, S.last_block_z = bz;
    record_params(params);
    if (num_param_sizes > 0) {
        int at = (int)(history_n++ % FAKE_HISTORY);
        long long shape[8] = {gx, gy, gz, bx, by, bz, smem, S.last_params_bytes};
        memcpy(history[at].shape, shape, sizeof shape);
        memcpy(history[at].params, last_params, (size_t)S.last_params_bytes);
    }
    fake_cuda_launch *t = &thread_last;
    t->launches++;
    t->grid[0] = gx, t->grid[1] = gy, t->grid[2] = gz;
    t->block[0] = bx, t->block[1] = by, t->block[2] = bz;
    t->smem = smem;
    t->stream = s;
    t->params_bytes = copy_params(params, thread_param_sizes, thread_num_param_sizes, t->params, sizeof t->params);
    RET(CUDA_SUCCESS);
}

static fake_alloc *find_alloc(CUdeviceptr p)
{
    for (int i = 0; i < allocs_top; i++)
        if (allocs[i].p && p >= (CUdeviceptr)(uintptr_t)allocs[i].p &&
            p < (CUdeviceptr)(uintptr_t)allocs[i].p + allocs[i].size)
            return &allocs[i];
    return NULL;
}

static CUresult CUDAAPI f_MemAlloc(CUdeviceptr *p, size_t bytes)
{
    TRACE("MemAlloc");
    if (need_ctx() != CUDA_SUCCESS)
        RET(CUDA_ERROR_INVALID_CONTEXT);
    for (int i = 0; i < FAKE_ALLOCS; i++) {
        if (allocs[i].p)
            continue;
        allocs[i].p = aligned_alloc(256, (bytes + 255) / 256 * 256);
        if (!allocs[i].p)
            RET(CUDA_ERROR_OUT_OF_MEMORY);
        allocs[i].size = bytes;
        allocs[i].ctx = S.next_alloc_foreign ? (CUcontext)&foreign_ctx_obj : current();
        allocs[i].host = (int)S.next_alloc_host;
        S.next_alloc_foreign = S.next_alloc_host = 0;
        S.allocs_live++;
        *p = (CUdeviceptr)(uintptr_t)allocs[i].p;
        if (i >= allocs_top)
            allocs_top = i + 1;
        size_t split = (size_t)S.next_alloc_split;
        S.next_alloc_split = 0;
        if (split > 0 && split < bytes && split % 256 == 0) {
            int j = i + 1;
            while (j < FAKE_ALLOCS && allocs[j].p)
                j++;
            if (j == FAKE_ALLOCS)
                RET(CUDA_ERROR_OUT_OF_MEMORY);
            allocs[j] = allocs[i];
            allocs[j].p += split;
            allocs[j].size = bytes - split;
            allocs[j].borrowed = 1;
            allocs[i].size = split;
            S.split_second = (long long)(uintptr_t)allocs[j].p;
            S.allocs_live++;
            if (j >= allocs_top)
                allocs_top = j + 1;
        }
        RET(CUDA_SUCCESS);
    }
    RET(CUDA_ERROR_OUT_OF_MEMORY);
}

static CUresult CUDAAPI f_MemFree(CUdeviceptr p)
{
    TRACE("MemFree");
    fake_alloc *a = find_alloc(p);
    if (!a || (CUdeviceptr)(uintptr_t)a->p != p)
        RET(CUDA_ERROR_INVALID_VALUE);
    if (!a->borrowed)
        free(a->p);
    memset(a, 0, sizeof *a);
    S.allocs_live--;
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_MemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
    TRACE("MemcpyHtoD");
    fake_alloc *a = find_alloc(dst);
    if (need_ctx() != CUDA_SUCCESS || !a || dst + n > (CUdeviceptr)(uintptr_t)a->p + a->size)
        RET(CUDA_ERROR_INVALID_VALUE);
    memcpy((void *)(uintptr_t)dst, src, n);
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_MemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
    TRACE("MemcpyDtoH");
    fake_alloc *a = find_alloc(src);
    if (need_ctx() != CUDA_SUCCESS || !a || src + n > (CUdeviceptr)(uintptr_t)a->p + a->size)
        RET(CUDA_ERROR_INVALID_VALUE);
    memcpy(dst, (const void *)(uintptr_t)src, n);
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_MemsetD8(CUdeviceptr dst, unsigned char v, size_t n)
{
    TRACE("MemsetD8");
    fake_alloc *a = find_alloc(dst);
    if (need_ctx() != CUDA_SUCCESS || !a || dst + n > (CUdeviceptr)(uintptr_t)a->p + a->size)
        RET(CUDA_ERROR_INVALID_VALUE);
    memset((void *)(uintptr_t)dst, v, n);
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_MemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    TRACE("MemcpyHtoDAsync");
    (void)s;
    S.async_copies++;
    fake_alloc *a = find_alloc(dst);
    if (need_ctx() != CUDA_SUCCESS || !a || dst + n > (CUdeviceptr)(uintptr_t)a->p + a->size)
        RET(CUDA_ERROR_INVALID_VALUE);
    memcpy((void *)(uintptr_t)dst, src, n);
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_MemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s)
{
    TRACE("MemsetD8Async");
    (void)s;
    fake_alloc *a = find_alloc(dst);
    if (need_ctx() != CUDA_SUCCESS || !a || dst + n > (CUdeviceptr)(uintptr_t)a->p + a->size)
        RET(CUDA_ERROR_INVALID_VALUE);
    memset((void *)(uintptr_t)dst, v, n);
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_PointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr p)
{
    TRACE("PointerGetAttribute");
    fake_alloc *a = find_alloc(p);
    if (!a)
        RET(CUDA_ERROR_INVALID_VALUE);
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = a->host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = a->ctx; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned char *)data = 0; break; /* one byte, as a bool */
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = (CUdeviceptr)(uintptr_t)a->p; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a->size; break;
    default: RET(CUDA_ERROR_INVALID_VALUE);
    }
    RET(CUDA_SUCCESS);
}

/* The plural form: unknown pointers are not an error, their attributes read 0. */
static CUresult CUDAAPI f_PointerGetAttributes(unsigned n, CUpointer_attribute *attrs, void **data, CUdeviceptr p)
{
    TRACE("PointerGetAttributes");
    fake_alloc *a = find_alloc(p);
    for (unsigned i = 0; i < n; i++) {
        switch (attrs[i]) {
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
            *(unsigned *)data[i] = !a ? 0 : a->host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
            break;
        case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data[i] = a ? a->ctx : NULL; break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data[i] = a ? 0 : -2; break;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned char *)data[i] = 0; break;
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
            *(CUdeviceptr *)data[i] = a ? (CUdeviceptr)(uintptr_t)a->p : 0;
            break;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data[i] = a ? a->size : 0; break;
        default: RET(CUDA_ERROR_INVALID_VALUE);
        }
    }
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_StreamCreate(CUstream *s, unsigned flags)
{
    TRACE("StreamCreate");
    (void)flags;
    if (need_ctx() != CUDA_SUCCESS)
        RET(CUDA_ERROR_INVALID_CONTEXT);
    for (int i = 0; i < FAKE_STREAMS; i++) {
        if (stream_used[i])
            continue;
        stream_used[i] = 1;
        *s = (CUstream)&stream_objs[i];
        S.streams_live++;
        RET(CUDA_SUCCESS);
    }
    RET(CUDA_ERROR_OUT_OF_MEMORY);
}

static CUresult CUDAAPI f_StreamDestroy(CUstream s)
{
    TRACE("StreamDestroy");
    char *o = (char *)s;
    if (o >= stream_objs && o < stream_objs + FAKE_STREAMS)
        stream_used[o - stream_objs] = 0;
    S.streams_live--;
    RET(CUDA_SUCCESS);
}
static CUresult CUDAAPI f_StreamSynchronize(CUstream s) { TRACE("StreamSynchronize"); (void)s; RET(need_ctx()); }
static CUresult CUDAAPI f_StreamIsCapturing(CUstream s, CUstreamCaptureStatus *cs)
{
    TRACE("StreamIsCapturing");
    (void)s;
    *cs = S.capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    RET(CUDA_SUCCESS);
}

static CUresult CUDAAPI f_EventCreate(CUevent *e, unsigned flags)
{
    TRACE("EventCreate");
    (void)flags;
    *e = (CUevent)&event_obj;
    S.events_live++;
    RET(need_ctx());
}

static CUresult CUDAAPI f_EventRecord(CUevent e, CUstream s) { TRACE("EventRecord"); (void)e, (void)s; RET(need_ctx()); }
static CUresult CUDAAPI f_EventSynchronize(CUevent e) { TRACE("EventSynchronize"); (void)e; RET(CUDA_SUCCESS); }
static CUresult CUDAAPI f_EventElapsedTime(float *ms, CUevent a, CUevent b) { TRACE("EventElapsedTime"); (void)a, (void)b; *ms = 1.5f; RET(CUDA_SUCCESS); }
static CUresult CUDAAPI f_EventDestroy(CUevent e) { TRACE("EventDestroy"); (void)e; S.events_live--; RET(CUDA_SUCCESS); }

/* Checks what the driver checks cheaply (rank, 16-byte aligned address and
 * strides, box <= 256) and writes a recognisable map: the address first,
 * then every other input, so that equal maps mean equal encodes. */
static CUresult CUDAAPI f_TensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType ty, cuuint32_t rank, void *addr,
                                               const cuuint64_t *dim, const cuuint64_t *stride,
                                               const cuuint32_t *box, const cuuint32_t *estride,
                                               CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                               CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    TRACE("TensorMapEncodeTiled");
    S.tensor_maps++;
    if (rank < 1 || rank > 5 || ((uintptr_t)addr & 15))
        RET(CUDA_ERROR_INVALID_VALUE);
    for (cuuint32_t i = 0; i < rank; i++)
        if (dim[i] < 1 || box[i] < 1 || box[i] > 256 || (i + 1 < rank && stride[i] % 16))
            RET(CUDA_ERROR_INVALID_VALUE);
    /* 8 + 4 * 8 + 3 * 8 + 4 * 2 + 4 * 2 + 6 = 86 bytes for rank <= 4 */
    unsigned char *p = (unsigned char *)map;
    size_t at = 0;
#define PUT(x) do { memcpy(p + at, &(x), sizeof(x)); at += sizeof(x); } while (0)
    memset(map, 0, sizeof *map);
    PUT(addr);
    for (cuuint32_t i = 0; i < rank && i < 4; i++)
        PUT(dim[i]);
    for (cuuint32_t i = 0; i + 1 < rank && i < 3; i++)
        PUT(stride[i]);
    for (cuuint32_t i = 0; i < rank && i < 4; i++) {
        uint16_t b = (uint16_t)box[i], e = (uint16_t)estride[i];
        PUT(b);
        PUT(e);
    }
    unsigned char tail[6] = {(unsigned char)ty, (unsigned char)rank, (unsigned char)il, (unsigned char)sw,
                             (unsigned char)l2, (unsigned char)oob};
    PUT(tail);
#undef PUT
    RET(CUDA_SUCCESS);
}

static const struct { const char *name; void *fn; } table[] = {
#define F(n) {"cu" #n, (void *)f_##n}
    F(Init), F(DriverGetVersion), F(GetErrorName), F(GetErrorString), F(DeviceGetCount),
    F(DeviceGet), F(DeviceGetAttribute), F(DeviceGetName), F(DeviceTotalMem),
    F(DevicePrimaryCtxRetain), F(DevicePrimaryCtxRelease), F(CtxGetCurrent), F(CtxGetDevice),
    F(CtxPushCurrent), F(CtxPopCurrent), F(CtxSynchronize), F(ModuleLoadData), F(ModuleUnload),
    F(ModuleGetFunction), F(FuncSetAttribute), F(FuncGetAttribute), F(LaunchKernel),
    F(MemAlloc), F(MemFree), F(MemcpyHtoD), F(MemcpyHtoDAsync), F(MemsetD8Async), F(MemcpyDtoH), F(MemsetD8), F(PointerGetAttribute), F(PointerGetAttributes),
    F(StreamCreate), F(StreamDestroy), F(StreamSynchronize), F(StreamIsCapturing), F(EventCreate), F(EventRecord),
    F(EventSynchronize), F(EventElapsedTime), F(EventDestroy), F(TensorMapEncodeTiled),
#undef F
};

static void *lookup(const char *symbol, int version, cuuint64_t flags)
{
    S.gpa_version = version;
    S.gpa_flags = (long long)flags;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].name, symbol) == 0)
            return table[i].fn;
    return NULL;
}

#ifdef FAKE_V1_ONLY
#undef cuGetProcAddress
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    lock();
    S.gpa_v1_calls++;
    *pfn = lookup(symbol, version, flags);
    RET(*pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND);
}
#else
CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *status)
{
    lock();
    S.gpa_v2_calls++;
    *pfn = lookup(symbol, version, flags);
    if (status)
        *status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    RET(*pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND);
}
#endif
