/* NCCL without linking it: dlopen("libnccl.so.2") (or $S2C_LIBNCCL) once per
 * process and a small table of the entry points the executor calls.  The
 * types and enums come from the toolkit's nccl.h at build time.  Private to
 * dist/. */
#ifndef S2C_NCCL_API_H
#define S2C_NCCL_API_H

#include "s2c/common.h"

/* nccl.h declares some functions without prototypes (`f()`) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#define S2_NCCL_FUNCS(X)                                                                                   \
    X(GetVersion, ncclResult_t, (int *))                                                                 \
    X(GetErrorString, const char *, (ncclResult_t))                                                       \
    X(GetUniqueId, ncclResult_t, (ncclUniqueId *))                                                       \
    X(CommInitRank, ncclResult_t, (ncclComm_t *, int, ncclUniqueId, int))                                \
    X(CommDestroy, ncclResult_t, (ncclComm_t))                                                           \
    X(CommCount, ncclResult_t, (const ncclComm_t, int *))                                                \
    X(CommUserRank, ncclResult_t, (const ncclComm_t, int *))                                             \
    X(CommGetAsyncError, ncclResult_t, (ncclComm_t, ncclResult_t *))                                     \
    X(GroupStart, ncclResult_t, (void))                                                                  \
    X(GroupEnd, ncclResult_t, (void))                                                                    \
    X(Send, ncclResult_t, (const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))         \
    X(Recv, ncclResult_t, (void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))

typedef struct s2_nccl_api {
#define S2_NCCL_FIELD(name, ret, args) ret(*name) args;
    S2_NCCL_FUNCS(S2_NCCL_FIELD)
#undef S2_NCCL_FIELD
    int version;
} s2_nccl_api;

/* The process-wide table, loaded on first use; NULL (and *st, with the
 * reason in ctx: S2_ERR_UNSUPPORTED when the library or an entry point is
 * missing) on failure. */
const s2_nccl_api *s2_nccl_api_get(s2_ctx *ctx, s2_status *st);

/* "<what>: <ncclGetErrorString> (code N)" as S2_ERR_CUDA. */
s2_status s2_nccl_fail(s2_ctx *ctx, const s2_nccl_api *n, ncclResult_t r, const char *what);

#endif
