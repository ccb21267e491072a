/* Internal to bench_launch, bench_graph_decode and bench_decode (the copy ceiling): the Driver API calls the
 * runtime does not wrap (graphs, raw launches, async fills), resolved from
 * libcuda (S2C_LIBCUDA or libcuda.so.1) through cuGetProcAddress as the
 * runtime does; plus host timing and percentiles. */
#ifndef S2C_BENCH_CU_H
#define S2C_BENCH_CU_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct bench_cu {
    PFN_cuGetErrorName_v6000 GetErrorName;
    PFN_cuCtxPushCurrent_v4000 CtxPush;
    PFN_cuCtxPopCurrent_v4000 CtxPop;
    PFN_cuLaunchKernel_v4000 LaunchKernel;
    PFN_cuModuleLoadData_v2000 ModuleLoadData;
    PFN_cuModuleGetFunction_v2000 ModuleGetFunction;
    PFN_cuModuleUnload_v2000 ModuleUnload;
    PFN_cuStreamSynchronize_v2000 StreamSynchronize;
    PFN_cuMemsetD8Async_v3020 MemsetD8Async;
    PFN_cuMemcpyDtoDAsync_v3020 MemcpyDtoDAsync;
    PFN_cuStreamBeginCapture_v10010 StreamBeginCapture;
    PFN_cuStreamEndCapture_v10000 StreamEndCapture;
    PFN_cuGraphInstantiateWithFlags_v11040 GraphInstantiate;
    PFN_cuGraphUpload_v11010 GraphUpload;
    PFN_cuGraphLaunch_v10000 GraphLaunch;
    PFN_cuGraphExecDestroy_v10000 GraphExecDestroy;
    PFN_cuGraphDestroy_v10000 GraphDestroy;
    PFN_cuGraphGetNodes_v10000 GraphGetNodes;
    PFN_cuGraphNodeGetType_v10000 GraphNodeGetType;
    PFN_cuGraphNodeGetDependencies_v10000 GraphNodeGetDependencies;
    PFN_cuGraphKernelNodeGetParams_v12000 GraphKernelNodeGetParams;
} bench_cu;

/* false with the reason in err when the driver or an entry point is missing. */
bool bench_cu_load(bench_cu *cu, char *err, size_t errlen);
/* "CUDA_ERROR_X (N)" in a static buffer (one thread). */
const char *bench_cu_error(const bench_cu *cu, CUresult r);

/* A graph's kernel nodes in dependency order (at most max); -1 when the
 * graph has a node that is not a kernel or more than max nodes. */
enum { BENCH_MAX_NODES = 64 };
int bench_graph_kernels(const bench_cu *cu, CUgraph g, CUDA_KERNEL_NODE_PARAMS_v2 *out, int max, char *err,
                        size_t errlen);

/* Call `call`; on failure the program's die_s2(what, status) / die_cu(what,
 * CUresult), which print and exit. */
#define S2(what, call)                     \
    do {                                   \
        s2_status st_ = (call);            \
        if (st_ != S2_OK)                  \
            die_s2(what, st_);             \
    } while (0)
#define CU(what, call)                     \
    do {                                   \
        CUresult r_ = (call);              \
        if (r_ != CUDA_SUCCESS)            \
            die_cu(what, r_);              \
    } while (0)

/* CLOCK_MONOTONIC in microseconds. */
double bench_now_us(void);
/* q-quantile (0..1) of v[0..n), linear between ranks as torch.quantile
 * (do_bench's median); sorts v. */
double bench_quantile(double *v, int n, double q);

#endif
