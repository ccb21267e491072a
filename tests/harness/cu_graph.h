/* The Driver API's CUDA graph calls that the GPU tests capture with, from
 * the libcuda the runtime uses ($S2C_LIBCUDA, else libcuda.so.1). */
#ifndef S2C_TEST_CU_GRAPH_H
#define S2C_TEST_CU_GRAPH_H

#include <check.h>
#include <cuda.h>
#include <dlfcn.h>
#include <stdlib.h>

#define CU_OK(call) do { CUresult r_ = (call); ck_assert_msg(r_ == CUDA_SUCCESS, "%s: CUresult %d", #call, (int)r_); } while (0)

typedef struct graph_api {
    CUresult (*push)(CUcontext), (*pop)(CUcontext *);
    CUresult (*begin)(CUstream, int), (*end)(CUstream, CUgraph *);
    CUresult (*instantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*launch)(CUgraphExec, CUstream);
    CUresult (*exec_destroy)(CUgraphExec), (*destroy)(CUgraph);
} graph_api;

static inline void graph_api_load(graph_api *g)
{
    const char *path = getenv("S2C_LIBCUDA");
    path = path && *path ? path : "libcuda.so.1";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(lib != NULL, "%s: %s", path, dlerror());
    *(void **)&g->push = dlsym(lib, "cuCtxPushCurrent_v2");
    *(void **)&g->pop = dlsym(lib, "cuCtxPopCurrent_v2");
    *(void **)&g->begin = dlsym(lib, "cuStreamBeginCapture_v2");
    *(void **)&g->end = dlsym(lib, "cuStreamEndCapture");
    *(void **)&g->instantiate = dlsym(lib, "cuGraphInstantiateWithFlags");
    *(void **)&g->launch = dlsym(lib, "cuGraphLaunch");
    *(void **)&g->exec_destroy = dlsym(lib, "cuGraphExecDestroy");
    *(void **)&g->destroy = dlsym(lib, "cuGraphDestroy");
    ck_assert(g->push && g->pop && g->begin && g->end && g->instantiate && g->launch && g->exec_destroy && g->destroy);
}

#endif
