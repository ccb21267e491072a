/* s2c — a context-parallel communication plan: the sequence sharded over P
 * ranks, each rank receiving only the KV blocks its query heads read.
 *
 * Ranks hold whole chunks of the sequence: contiguous (rank r holds chunk r
 * of P) or zigzag, the causal load balance (2P chunks, rank r holds chunks r
 * and 2P-1-r).  Per rank and kv head the plan lists the remote KV blocks
 * (block_size tokens) its queries read, each received once from its owner,
 * and their slots in a compact receive buffer.  A rank's keys are laid out
 * as its receive buffer (recv_tokens per kv head: slot s holds tokens
 * [s*block_size, (s+1)*block_size); unused slots pad it to whole tiles)
 * followed by its own tokens in sequence order; its queries are its own
 * tokens.  Its schedules over that layout (forward, and the transposed one
 * for the backward) are the single-GPU schedule's entries of its queries,
 * in the caller-schedule format of layout.h (s2_schedule_check), with one
 * class per (head class, kv head).
 */
#ifndef S2C_CPPLAN_H
#define S2C_CPPLAN_H

#include "s2c/layout.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define S2_CP_MAX_RANKS 4096

typedef enum s2_cp_sharding {
    S2_CP_CONTIGUOUS = 0,   /* rank r holds tokens [r*S/P, (r+1)*S/P) */
    S2_CP_ZIGZAG = 1,       /* 2P chunks; rank r holds chunks r and 2P-1-r */
} s2_cp_sharding;

typedef struct s2_cp_plan_args {
    int64_t seq_len;        /* tokens; every chunk whole tiles and blocks */
    int ranks;              /* 1..S2_CP_MAX_RANKS */
    s2_cp_sharding sharding;
    s2_tile_spec spec;      /* the forward's tiles; block_n and block_m >= the pattern's block_size */
    bool schedules;         /* build the remapped schedules (false: counts and lists only) */
    int64_t max_entries;    /* bound on the single-GPU entries enumerated (0: 2^28) */
} s2_cp_plan_args;

typedef struct s2_cp_plan s2_cp_plan;

/* One planned KV block of one kv head: its block in the sequence, the other
 * rank (the owner for a receive, the receiver for a send) and its slot in
 * the receiver's buffer. */
typedef struct s2_cp_block {
    int64_t block;
    int64_t slot;
    int peer;
} s2_cp_block;

/* The plan of p over args.  Patterns whose every head reads each key block
 * from one run of query blocks starting at it (causal, absolute stripes, no
 * ranges or masks: the S2 local-stride heads) are planned from the key
 * blocks' last readers, in time linear in the blocks and ranks; any other,
 * and any plan with schedules, from the single-GPU schedule's entries
 * (S2_ERR_UNSUPPORTED past max_entries).  S2_ERR_INVALID for a bad
 * argument (ranks, sharding, chunks not whole tiles, tiles narrower than a
 * block), S2_ERR_SEQ_LEN past the pattern's length, S2_ERR_UNSUPPORTED past
 * 2^28 (rank, kv head, block) triples or, planned by runs, 2^32 steps
 * (blocks x chunks x head classes). */
S2_API s2_status s2_cp_plan_new(s2_ctx *ctx, const s2_pattern *p, const s2_cp_plan_args *args, s2_cp_plan **out);
S2_API void s2_cp_plan_free(s2_cp_plan *plan);

/* Tokens a rank holds as at most two ranges [start[i], start[i] + len[i]);
 * returns the number of ranges (0 for a bad rank). */
S2_API int s2_cp_plan_shard(const s2_cp_plan *plan, int rank, int64_t start[2], int64_t len[2]);
/* Which rank owns key block n (-1 outside the sequence). */
S2_API int s2_cp_plan_owner(const s2_cp_plan *plan, int64_t n);
/* Receive-buffer tokens per kv head of a rank (a multiple of both tile sides). */
S2_API int64_t s2_cp_plan_recv_tokens(const s2_cp_plan *plan, int rank);

/* The blocks rank receives (peer = owner, by increasing block, slot = its
 * index) or sends (peer = receiver, by receiver then block) for kv head h.
 * *list stays owned by the plan; S2_ERR_INVALID for a bad rank or head. */
S2_API s2_status s2_cp_plan_recv(s2_ctx *ctx, const s2_cp_plan *plan, int rank, int kv_head,
                                 const s2_cp_block **list, int64_t *count);
S2_API s2_status s2_cp_plan_send(s2_ctx *ctx, const s2_cp_plan *plan, int rank, int kv_head,
                                 const s2_cp_block **list, int64_t *count);

/* A rank's layout (q_len its tokens, kv_len recv_tokens + its tokens) and its
 * schedules over it, the transposed one of tile {block_m, block_size}; NULL
 * for a bad rank or a plan without schedules. */
S2_API const s2_layout *s2_cp_plan_layout(const s2_cp_plan *plan, int rank);
S2_API const s2_schedule *s2_cp_plan_schedule(const s2_cp_plan *plan, int rank, bool transposed);

/* A rank's traffic and work, the forward's (the backward sends the same
 * blocks' dK and dV back). */
typedef struct s2_cp_rank_stats {
    int64_t recv_blocks, send_blocks;   /* KV blocks over its kv heads */
    double recv_bytes, send_bytes;      /* K and V: blocks * block_size * head_dim * 2 * element size */
    double ring_bytes;                  /* ring attention's: every other rank's K and V of every kv head */
    double kept_pairs;                  /* (query, key) pairs its queries keep, over query heads */
    double fwd_flops;                   /* 4 * kept_pairs * head_dim */
} s2_cp_rank_stats;

S2_API s2_status s2_cp_plan_rank_stats(s2_ctx *ctx, const s2_cp_plan *plan, int rank, int head_dim, s2_dtype dtype,
                                       s2_cp_rank_stats *st);

#ifdef __cplusplus
}
#endif
#endif
