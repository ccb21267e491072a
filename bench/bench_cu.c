/* The Driver API calls of the launch and graph benches (bench_cu.h). */
#include "bench_cu.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The entry points are asked for as of CUDA 12.0 (the runtime's ABI), so
 * the PFN types above are the versions returned. */
enum { ABI = 12000 };

bool bench_cu_load(bench_cu *cu, char *err, size_t errlen)
{
    memset(cu, 0, sizeof *cu);
    const char *lib = getenv("S2C_LIBCUDA");
    if (!lib || !*lib)
        lib = "libcuda.so.1";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err, errlen, "cannot load %s: %s", lib, dlerror());
        return false;
    }
    PFN_cuGetProcAddress_v12000 gpa2 = (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
    PFN_cuGetProcAddress_v11030 gpa1 = gpa2 ? NULL : (PFN_cuGetProcAddress_v11030)dlsym(h, "cuGetProcAddress");
    if (!gpa2 && !gpa1) {
        snprintf(err, errlen, "%s exports no cuGetProcAddress", lib);
        return false;
    }
#define GET(field, sym)                                                                              \
    do {                                                                                             \
        void *fn_ = NULL;                                                                            \
        CUdriverProcAddressQueryResult q_;                                                           \
        CUresult r_ = gpa2 ? gpa2(sym, &fn_, ABI, CU_GET_PROC_ADDRESS_DEFAULT, &q_)                   \
                           : gpa1(sym, &fn_, ABI, CU_GET_PROC_ADDRESS_DEFAULT);                      \
        if (r_ != CUDA_SUCCESS || !fn_) {                                                            \
            snprintf(err, errlen, "%s: no %s for CUDA 12.0 (cuGetProcAddress: %d)", lib, sym, (int)r_); \
            return false;                                                                            \
        }                                                                                            \
        *(void **)&cu->field = fn_;                                                                  \
    } while (0)
    GET(GetErrorName, "cuGetErrorName");
    GET(CtxPush, "cuCtxPushCurrent");
    GET(CtxPop, "cuCtxPopCurrent");
    GET(LaunchKernel, "cuLaunchKernel");
    GET(ModuleLoadData, "cuModuleLoadData");
    GET(ModuleGetFunction, "cuModuleGetFunction");
    GET(ModuleUnload, "cuModuleUnload");
    GET(StreamSynchronize, "cuStreamSynchronize");
    GET(MemsetD8Async, "cuMemsetD8Async");
    GET(MemcpyDtoDAsync, "cuMemcpyDtoDAsync");
    GET(StreamBeginCapture, "cuStreamBeginCapture");
    GET(StreamEndCapture, "cuStreamEndCapture");
    GET(GraphInstantiate, "cuGraphInstantiateWithFlags");
    GET(GraphUpload, "cuGraphUpload");
    GET(GraphLaunch, "cuGraphLaunch");
    GET(GraphExecDestroy, "cuGraphExecDestroy");
    GET(GraphDestroy, "cuGraphDestroy");
    GET(GraphGetNodes, "cuGraphGetNodes");
    GET(GraphNodeGetType, "cuGraphNodeGetType");
    GET(GraphNodeGetDependencies, "cuGraphNodeGetDependencies");
    GET(GraphKernelNodeGetParams, "cuGraphKernelNodeGetParams");
#undef GET
    return true;
}

const char *bench_cu_error(const bench_cu *cu, CUresult r)
{
    static char buf[96];
    const char *name = NULL;
    if (!cu->GetErrorName || cu->GetErrorName(r, &name) != CUDA_SUCCESS || !name)
        name = "?";
    snprintf(buf, sizeof buf, "%s (%d)", name, (int)r);
    return buf;
}

int bench_graph_kernels(const bench_cu *cu, CUgraph g, CUDA_KERNEL_NODE_PARAMS_v2 *out, int max, char *err,
                        size_t errlen)
{
    CUgraphNode nodes[BENCH_MAX_NODES];
    size_t n = BENCH_MAX_NODES;
    CUresult r = cu->GraphGetNodes(g, nodes, &n);
    if (r != CUDA_SUCCESS || (int)n > max) {
        snprintf(err, errlen, "cuGraphGetNodes: %s, %zu nodes (at most %d)", bench_cu_error(cu, r), n, max);
        return -1;
    }
    /* dependency order: repeatedly take a node whose dependencies are all taken */
    bool taken[BENCH_MAX_NODES] = {0};
    int done = 0;
    while (done < (int)n) {
        int pick = -1;
        for (int i = 0; i < (int)n && pick < 0; i++) {
            if (taken[i])
                continue;
            CUgraphNode deps[BENCH_MAX_NODES];
            size_t nd = BENCH_MAX_NODES;
            if ((r = cu->GraphNodeGetDependencies(nodes[i], deps, &nd)) != CUDA_SUCCESS) {
                snprintf(err, errlen, "cuGraphNodeGetDependencies: %s", bench_cu_error(cu, r));
                return -1;
            }
            bool ready = true;
            for (size_t d = 0; d < nd && ready; d++)
                for (int j = 0; j < (int)n; j++)
                    if (nodes[j] == deps[d] && !taken[j])
                        ready = false;
            if (ready)
                pick = i;
        }
        if (pick < 0) {
            snprintf(err, errlen, "the graph's nodes have a cycle");
            return -1;
        }
        CUgraphNodeType t;
        if ((r = cu->GraphNodeGetType(nodes[pick], &t)) != CUDA_SUCCESS || t != CU_GRAPH_NODE_TYPE_KERNEL) {
            snprintf(err, errlen, "node %d is not a kernel node (type %d, %s)", pick, (int)t, bench_cu_error(cu, r));
            return -1;
        }
        memset(&out[done], 0, sizeof out[done]);
        if ((r = cu->GraphKernelNodeGetParams(nodes[pick], &out[done])) != CUDA_SUCCESS) {
            snprintf(err, errlen, "cuGraphKernelNodeGetParams: %s", bench_cu_error(cu, r));
            return -1;
        }
        if (!out[done].func || out[done].extra) {
            snprintf(err, errlen, "kernel node %d has no CUfunction or passes `extra`", done);
            return -1;
        }
        taken[pick] = true;
        done++;
    }
    return done;
}

double bench_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_quantile(double *v, int n, double q)
{
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double pos = q * (n - 1);
    int lo = (int)pos;
    if (lo >= n - 1)
        return v[n - 1];
    return v[lo] + (pos - lo) * (v[lo + 1] - v[lo]);
}
