/* s2c's context-parallel executor over NCCL (the dist stage, libs2dist):
 * one process (or thread) per GPU runs attention over the
 * sequence sharded by a plan (s2c/cpplan.h), moving only the KV blocks each
 * rank's heads read.
 *
 *   s2_cp_comm_init / _wrap   an NCCL communicator (made from a unique id,
 *                             or the caller's ncclComm_t, which it keeps)
 *   s2_cp_exec_new            an executor: the plan of (seq_len, sharding)
 *                             for the communicator's ranks and the kernels'
 *                             tiles, its schedules uploaded, its buffers
 *   s2_cp_forward             per rank: own K/V into the executor's buffer,
 *                             the planned blocks packed per peer (one
 *                             NAME_rows launch, s2_rows), one grouped
 *                             ncclSend/ncclRecv per peer on the executor's
 *                             communication stream and the received rows
 *                             unpacked into their slots there, while
 *                             attention over the local blocks runs on the
 *                             caller's stream, then attention over the
 *                             received blocks and the LSE merge
 *                             (NAME_combine) into o and lse
 *   s2_cp_backward            the blocks exchanged again, one backward over
 *                             local and received blocks, the dK/dV of
 *                             received blocks packed per owner and sent
 *                             back (one message per peer), and each owned
 *                             row summed as its own partial, then the
 *                             returned ones in rank order, in fp32 rounded
 *                             once (the same inputs give bitwise-equal
 *                             results)
 *   s2_cp_exec_traffic        the bytes the last call posted to NCCL
 *   s2_cp_exec_set_timing     (off by default) CUDA events around each
 *   s2_cp_exec_last_timeline  phase of a call: its intervals and the
 *                             communication no attention kernel hides
 *
 * NCCL is loaded with dlopen("libnccl.so.2", or $S2C_LIBNCCL): without it
 * every call that needs it returns S2_ERR_UNSUPPORTED.  The executor never
 * asks for NVLink SHARP (multicast); callers keep NCCL_NVLS_ENABLE=0 in the
 * environment of every process, as the tests do.  NCCL runs on the calling
 * thread's current CUDA device, which must be the communicator's (one visible
 * device per process, CUDA_VISIBLE_DEVICES, as tests/dist/test_cp_gpu does;
 * or cudaSetDevice), as for any NCCL communicator.
 *
 * Tensors are each rank's own tokens (s2_cp_plan_shard: its one or two
 * ranges in sequence order): q, o [B, n, H, D], k, v [B, n, Hkv, D] with the
 * strides of s2_attn_fwd_args, q_len = kv_len = n.  Calls on one executor
 * must be ordered (one stream, or the caller's events); every rank calls
 * s2_cp_forward / s2_cp_backward the same number of times in the same order.
 */
#ifndef S2C_CP_H
#define S2C_CP_H

#include "s2c/attn_runtime.h"
#include "s2c/cpplan.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* NCCL's version code (22809 for 2.28.9); S2_ERR_UNSUPPORTED without it. */
S2_API s2_status s2_nccl_version(s2_ctx *ctx, int *version);

/* ncclUniqueId's bytes: rank 0 makes it and hands it to the others. */
typedef struct s2_cp_id {
    char bytes[128];
} s2_cp_id;
S2_API s2_status s2_cp_unique_id(s2_ctx *ctx, s2_cp_id *id);

typedef struct s2_cp_comm s2_cp_comm;
/* ncclCommInitRank on dev's CUDA context (the device is borrowed: free the
 * communicator first).  S2_ERR_INVALID for ranks < 1 or rank outside them. */
S2_API s2_status s2_cp_comm_init(s2_ctx *ctx, s2_device *dev, const s2_cp_id *id, int ranks, int rank,
                                 s2_cp_comm **out);
/* The caller's ncclComm_t (of dev), not destroyed by s2_cp_comm_free. */
S2_API s2_status s2_cp_comm_wrap(s2_ctx *ctx, s2_device *dev, void *nccl_comm, s2_cp_comm **out);
S2_API void s2_cp_comm_free(s2_cp_comm *c);   /* NULL is fine */
S2_API int s2_cp_comm_rank(const s2_cp_comm *c);
S2_API int s2_cp_comm_size(const s2_cp_comm *c);

/* One message of a rank's exchange: `blocks` consecutive key blocks from
 * first_block of kv head kv_head, to (send) or from (receive) peer, landing
 * in the receiver's slots from first_slot.  Runs of blocks consecutive in
 * the sequence, in the receive slots and in the owner's own tokens make one
 * message.  A rank's list is in the order it issues them: per kv head, per
 * peer, by block; a send of o to r and r's receive from o match in order. */
typedef struct s2_cp_msg {
    int peer;
    int kv_head;
    bool send;
    int64_t first_block, blocks, first_slot;
} s2_cp_msg;
/* Free *list with free(). */
S2_API s2_status s2_cp_messages(s2_ctx *ctx, const s2_cp_plan *plan, const s2_pattern *p, int rank, s2_cp_msg **list,
                                int64_t *count);

/* The device memory an executor holds on a rank, in bytes (elem: the dtype's
 * size; batch B): */
typedef struct s2_cp_sizes {
    int64_t own_tokens;          /* the rank's tokens */
    int64_t recv_tokens;         /* the larger of the forward's and backward's plans' (per kv head) */
    size_t kv_bytes;             /* K and V: 2 * B * Hkv * (recv_tokens + own_tokens) * D * elem */
    size_t partial_bytes;        /* the forward's two (o, lse) parts: 2 * B * H * own * (D * elem + 4) */
    size_t grad_bytes;           /* dK, dV in the K layout, and the partial dK/dV of this rank's blocks that
                                  * its peers return: kv_bytes + return_rows * D * elem */
    int64_t return_rows;         /* those returned rows (dK and dV, every peer and batch entry) */
    size_t workspace_bytes;      /* the backward's workspace (the executor's; 0 from s2_cp_sizes_of) */
    size_t exchange_bytes;       /* the packed messages: one send and one receive buffer, each peer's message
                                  * contiguous (the larger plan's rows of K and V, times D * elem) */
} s2_cp_sizes;
/* From plans of pattern p made by the caller (bwd may be NULL: forward
 * only; its grad_bytes and return_rows are then 0, as the workspace is). */
S2_API s2_status s2_cp_sizes_of(s2_ctx *ctx, const s2_cp_plan *fwd, const s2_cp_plan *bwd, const s2_pattern *p,
                                int rank, int batch, int head_dim, s2_dtype dtype, s2_cp_sizes *out);

typedef struct s2_cp_exec_args {
    int64_t seq_len;             /* the whole sequence */
    s2_cp_sharding sharding;
    int batch;
} s2_cp_exec_args;

typedef struct s2_cp_exec s2_cp_exec;
/* The executor of rank s2_cp_comm_rank(comm) of s2_cp_comm_size(comm): fwd a
 * forward kernel, bwd a backward kernel of the same pattern, dtype and head
 * dim (NULL: forward only), both loaded on the communicator's device.  Plans
 * are made for each kernel's tile (one when they agree), schedules uploaded,
 * buffers allocated (cuMemAlloc) and a communication stream created.
 * The packing's tables (NAME_rows, s2_rows) are built from the plan, checked
 * and uploaded here.  Statuses: S2_ERR_NULL_ARG, S2_ERR_INVALID (kernels
 * that disagree, a kernel of another kind), S2_ERR_UNSUPPORTED (a module
 * compiled before NAME_rows; a block read by more than 63 ranks), the
 * plan's (s2_cp_plan_new), the runtime's. */
S2_API s2_status s2_cp_exec_new(s2_ctx *ctx, s2_cp_comm *comm, s2_attn_kernel *fwd, s2_attn_kernel *bwd,
                                const s2_cp_exec_args *args, s2_cp_exec **out);
/* No call of it may be in flight.  NULL is fine. */
S2_API void s2_cp_exec_free(s2_cp_exec *e);
S2_API const s2_cp_plan *s2_cp_exec_plan(const s2_cp_exec *e, bool backward);
S2_API const s2_cp_sizes *s2_cp_exec_sizes(const s2_cp_exec *e);

/* a: this rank's tensors (batch, heads, head_dim, dtype those of the
 * kernels; q_len = kv_len = own tokens); lse may be 0 (not written; the
 * backward needs it).  The arguments are checked as s2_attn_forward checks
 * them; S2_ERR_SHAPE for lengths other than the rank's. */
S2_API s2_status s2_cp_forward(s2_ctx *ctx, s2_cp_exec *e, void *stream, const s2_attn_fwd_args *a);
/* a: the forward's q, k, v, o, lse and d_o of this rank, outputs dq, dk, dv
 * (workspace ignored: the executor's).  d_lse is not supported (0). */
S2_API s2_status s2_cp_backward(s2_ctx *ctx, s2_cp_exec *e, void *stream, const s2_attn_bwd_args *a);

/* What the last s2_cp_forward (backward false) or s2_cp_backward of an
 * executor posted to NCCL, counted as it posts them (not from the plan):
 * its ncclSend and ncclRecv calls (one of each per peer and exchange: the
 * K/V blocks, and in the backward the partial dK/dV sent back), the K/V
 * bytes sent and received, and the dK/dV bytes this rank sent back. */
typedef struct s2_cp_traffic {
    int64_t calls;               /* forwards (backwards) run so far */
    int64_t sends, recvs;        /* ncclSend / ncclRecv calls of the last one */
    double send_bytes, recv_bytes;   /* K and V */
    double reduce_bytes;         /* partial dK, dV sent back to their owners; 0 in the forward */
} s2_cp_traffic;
S2_API s2_status s2_cp_exec_traffic(s2_ctx *ctx, const s2_cp_exec *e, bool backward, s2_cp_traffic *out);

/* The phases of one call, each an interval between two CUDA events (on the
 * caller's stream, or the communication stream for exchange, unpack and
 * reduce). */
typedef enum s2_cp_phase {
    S2_CP_PHASE_COPY_IN = 0,     /* the caller's K, V into the executor's buffer */
    S2_CP_PHASE_EXCHANGE,        /* the grouped ncclSend/ncclRecv (communication stream) */
    S2_CP_PHASE_LOCAL,           /* attention over the local keys (the whole forward when nothing is received) */
    S2_CP_PHASE_REMOTE,          /* the forward over received keys, after the receive */
    S2_CP_PHASE_COMBINE,         /* the LSE merge */
    S2_CP_PHASE_BACKWARD,        /* the backward over local and received keys */
    S2_CP_PHASE_GATHER,          /* the partial dK/dV of received blocks packed per owner */
    S2_CP_PHASE_REDUCE,          /* their ncclSend/ncclRecv back to the owners (communication stream) */
    S2_CP_PHASE_COPY_OUT,        /* the fixed-order sum of own and returned partials into the caller's dK/dV */
    S2_CP_PHASE_PACK,            /* the blocks to send packed per peer (one NAME_rows launch) */
    S2_CP_PHASE_UNPACK,          /* the received blocks into their K/V slots (communication stream) */
    S2_CP_PHASES
} s2_cp_phase;

/* A call's timeline in ms from its first event on the caller's stream;
 * start_ms < 0 for a phase the call did not run.  Visible communication is
 * the time when an exchange, unpack or reduce is in flight and no attention
 * kernel of this rank (local, remote, combine, backward) runs. */
typedef struct s2_cp_timeline {
    float start_ms[S2_CP_PHASES], end_ms[S2_CP_PHASES];
    float step_ms;               /* first event to the call's last */
    float comm_ms;               /* the union of the communication phases */
    float visible_comm_ms;
} s2_cp_timeline;
/* Off by default (no event is recorded); on, every call records two events
 * per phase.  Not while a call is in flight. */
S2_API s2_status s2_cp_exec_set_timing(s2_ctx *ctx, s2_cp_exec *e, bool on);
/* The last forward's (backward's) timeline, waiting for its events.
 * S2_ERR_INVALID when timing is off or no such call ran since it was on. */
S2_API s2_status s2_cp_exec_last_timeline(s2_ctx *ctx, s2_cp_exec *e, bool backward, s2_cp_timeline *out);

#ifdef __cplusplus
}
#endif
#endif
