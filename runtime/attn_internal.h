/* Internal to runtime/: the objects behind the attention runtime's opaque
 * handles (s2c/attn_runtime.h) and what its files share:
 *   attn_module.c   modules, kernel lookup, introspection
 *   varlen.c        variable-length batches (s2_attn_seqs)
 *   checks.c        argument checks of every entry point
 *   sched_cache.c   per-shape forward/backward schedules, cached per kernel
 *   attn_fwd.c      the forward launch
 *   attn_bwd.c      the backward's workspaces and launches
 *   attn_decode.c   paged decode (its kept-block lists cached per kernel) and combine
 *   plan.c          plans: declared shapes prepared stream-ordered, launches without driver calls but the launch */
#ifndef S2C_ATTN_INTERNAL_H
#define S2C_ATTN_INTERNAL_H

#include "attn_tune.h"
#include "kernel_abi.h"
#include "lru.h"
#include "params.h"
#include "rt_internal.h"
#include "s2c/attn_runtime.h"
#include "s2c/decode.h"
#include "s2c/layout.h"

enum { DS_CHUNKINGS = 12 };

/* Split-KV decode: at most this many splits. */
enum { DEC_MAX_SPLITS = 64 };

/* A packed forward schedule (s2_schedule_pack or _gathered) on the device,
 * and where its arrays start. */
typedef struct fwd_tables {
    s2_devptr buf, class_of_head, offsets, entries;
    int32_t first_q_tile, q_tiles;
} fwd_tables;

/* One uploaded schedule, keyed by (q_len, kv_len): the forward one of the
 * kernel's tile shape, and what the kernel kind needs besides. */
typedef struct sched_slot {
    s2_lru_entry lru;
    fwd_tables fwd;
    /* backward kernels: the transposed schedule for (block_m, block_m) too */
    s2_devptr t_buf, t_class_of_head, t_offsets, t_entries;
    /* and, in t_buf, the dS workspace's map (s2_ds_map; ds_tiles < 0: none) */
    s2_devptr ds_head, ds_map;
    int64_t ds_tiles;
    /* the dS path over chunks of kv heads (launch_bwd), for each chunk count
     * ds_chunks[i] (a divisor of kv_heads above 1): chunk j's head_base array
     * (attention.h: heads + 1 int64, the chunk's heads from 0, then its tile
     * count) at ds_chunk_head[i] + j * (heads + 1) * 8, in t_buf; and the
     * largest chunk's tiles per batch element */
    int ds_nchunk;
    int ds_chunks[DS_CHUNKINGS];
    int64_t ds_chunk_tiles[DS_CHUNKINGS];
    s2_devptr ds_chunk_head[DS_CHUNKINGS];
    /* for the runtime's own choice: the least dK/dV work (entries per batch
     * element) of a chunk of each chunking, and the longest dK/dV list */
    int64_t ds_chunk_work[DS_CHUNKINGS];
    int64_t ds_longest;
    /* NAME_dqds2 may run: every forward list short enough and in increasing key order */
    bool dqds2_ok;
    int32_t kv_tiles;
    /* persistent forward (ABI fwd_tma_persistent): the longest-first work list */
    s2_devptr w_buf;
    int32_t n_work;
    /* its work counters: one pair per stream (launches on one stream run in
     * order; a pair serves them all), taken by the stream that uses it */
    void *counter_stream[S2_ATTN_COUNTER_PAIRS];
    bool counter_used[S2_ATTN_COUNTER_PAIRS];
    /* the forward's wide variant (role fwd_wide), when its lists are long
     * enough: its own packed gathered schedule */
    bool use_wide;
    fwd_tables wide;
} sched_slot;

/* A family's launch values: one field per parameter of its widest ABI
 * (abi/params.h), named by its enum and of its type, which a launch fills
 * from its arguments and its schedule; the packer (args.c) hands a kernel
 * the fields of its own ABI in order. */
#define S2_RT_CT_PTR s2_devptr
#define S2_RT_CT_I32 int32_t
#define S2_RT_CT_I64 int64_t
#define S2_RT_CT_F32 float
#define S2_RT_CT_TMAP s2_tensor_map
#define S2_RT_CT_BYTES uint64_t
#define S2_RT_DIM_PTR
#define S2_RT_DIM_I32
#define S2_RT_DIM_I64
#define S2_RT_DIM_F32
#define S2_RT_DIM_TMAP
#define S2_RT_DIM_BYTES [2 * S2_COMBINE_MAX_INPUTS] /* the combine's table, decode.h */
#define S2_RT_FIELD(e, n, t) S2_RT_CT_##t e S2_RT_DIM_##t;
typedef struct s2_rt_fwd_vals { S2_ABI_FWD_FAMILY(S2_RT_FIELD) } s2_rt_fwd_vals;
typedef struct s2_rt_bwd_vals { S2_ABI_BWD_TMA_PARAMS(S2_RT_FIELD) } s2_rt_bwd_vals;
typedef struct s2_rt_decode_vals { S2_ABI_DECODE_PARAMS(S2_RT_FIELD) } s2_rt_decode_vals;
typedef struct s2_rt_combine_vals { S2_ABI_COMBINE_PARAMS(S2_RT_FIELD) } s2_rt_combine_vals;
typedef struct s2_rt_seqs_vals { S2_ABI_SEQS_PARAMS(S2_RT_FIELD) } s2_rt_seqs_vals;
typedef struct s2_rt_rows_vals { S2_ABI_ROWS_PARAMS(S2_RT_FIELD) } s2_rt_rows_vals;
#undef S2_RT_FIELD
/* (batch, seq, head) strides s into the three fields E, E_S, E_H */
#define S2_RT_STRIDES(v, E, s) ((v).E = (s)[0], (v).E##_S = (s)[1], (v).E##_H = (s)[2])
/* v.ENUM = a->field, in a launch filling values v from arguments a, for
 * each entry of a *_FROM_ARGS list (abi/params.h) */
#define S2_RT_FROM_ARGS(e, f) v.e = a->f;

/* A kernel's parameters in its ABI's order (args.c): parameter i is at
 * byte off[i] of its family's values, built once at load. */
enum { S2_RT_MAX_PARAMS = 64 };
typedef struct s2_rt_argmap {
    int n;
    uint16_t off[S2_RT_MAX_PARAMS];
} s2_rt_argmap;

struct s2_attn_kernel {
    s2_attn_module *mod;
    const s2_manifest_kernel *desc;
    const s2_pattern *pattern;
    /* the entry's kernels by role, and their manifest records (NULL where
     * the entry has none of that role) */
    s2_cufunction *fns[S2_ROLE_COUNT_];
    const s2_kernel_record *rec[S2_ROLE_COUNT_];
    s2_rt_argmap argmap[S2_ROLE_COUNT_];
    s2_kernel_use use[S2_ROLE_COUNT_];   /* what each loaded kernel uses, for its launch facts */
    struct dec_slot *dec_slots;          /* decode: the cache's storage (attn_decode.c) */
    int64_t max_kv_len;
    mtx_t lock;                          /* guards everything below */
    bool lock_ok;
    /* forward and backward: schedules in slots; decode: kept-block lists in dec_slots */
    s2_lru cache;
    sched_slot slots[S2_ATTN_SCHED_CACHE];
    /* counted outside the lock too (plan launches): s2_attn_sched_stats' wide, ds_chunked, dq_paired */
    atomic_llong n_wide, n_ds_chunked, n_dq_paired;
};

struct s2_attn_module {
    s2_device *dev;
    s2_cumodule *cu;
    s2_manifest *manifest;
    s2_attn_kernel *kernels;
    int num_kernels;
    bool standalone;             /* owned by its one kernel (s2_attn_load) */
    bool check_decode;           /* S2C_CHECK_DECODE set at load: validate decode's device data */
};

struct s2_attn_seqs {
    const s2_device *dev;
    s2_devptr buf;
    s2_attn_seq *host;           /* NULL for a batch on the device only (s2_attn_seqs_new_device) */
    bool on_device;
    int n;
    int64_t sched_q_len, sched_kv_len;  /* 0, 0: no sequence has a query */
};

/* Batch extent of the tensors: a variable-length batch has rows only. */
static inline int64_t tensor_batch(const s2_attn_fwd_args *a) { return a->seqs ? 1 : a->batch; }
static inline int64_t bwd_tensor_batch(const s2_attn_bwd_args *a) { return a->seqs ? 1 : a->batch; }

/* checks.c */
/* Every check that needs no driver (a plan's launches make these only):
 * forward (bytes: each tensor's extent, q k v o lse) and backward. */
S2_RT_HIDDEN s2_status s2_rt_fwd_check_host(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_fwd_args *a,
                                            size_t bytes[5]);
S2_RT_HIDDEN s2_status s2_rt_bwd_check_host(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_bwd_args *a);
/* The forward's size checks (the backward's too). */
S2_RT_HIDDEN s2_status s2_rt_check_sizes(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_fwd_args *a);
/* Combine: everything that needs no driver; bytes: an input's o extent, o's, an lse's. */
S2_RT_HIDDEN s2_status s2_rt_combine_check_host(s2_ctx *ctx, const s2_attn_kernel *k, const s2_combine_args *a,
                                                size_t bytes[3]);
/* Decode: the shape fields only (a plan's declaration). */
S2_RT_HIDDEN s2_status s2_rt_dec_check_shape(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_decode_args *a);
/* Decode: everything that needs no driver (its extents, then its overlaps);
 * bytes: q, o, k pool, v pool, table, seq_lens, lse. */
S2_RT_HIDDEN s2_status s2_rt_dec_check_host(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_decode_args *a,
                                            size_t bytes[7]);
/* Its two parts, for the paths that check the driver's extents between them. */
S2_RT_HIDDEN s2_status s2_rt_dec_check_extents(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_decode_args *a,
                                               size_t bytes[7]);
S2_RT_HIDDEN s2_status s2_rt_dec_check_overlaps(s2_ctx *ctx, const s2_attn_decode_args *a, const size_t bytes[7]);
/* Decode: the pointers, and a workspace of ws_bytes where one is needed. */
S2_RT_HIDDEN s2_status s2_rt_dec_check_device(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_decode_args *a,
                                              const size_t bytes[7], size_t ws_bytes);

/* Where a build's device buffers come from and how they are filled: the
 * kernel's cache (async false: the allocator without a stream, copies, the
 * legacy stream synchronised at the end, so that any stream sees them) or a
 * plan (stream-ordered on `stream`, no synchronisation; the host sources are
 * copied and kept until s2_rt_up_release, after the copies are done). */
typedef struct rt_upload {
    void *stream;
    bool async;
    size_t bytes;                /* device bytes allocated through it */
    void **keep;
    int nkeep, cap;
} rt_upload;
S2_RT_HIDDEN s2_status s2_rt_up_alloc(s2_ctx *ctx, const s2_device *dev, rt_upload *up, size_t bytes, s2_devptr *out);
S2_RT_HIDDEN s2_status s2_rt_up_copy(s2_ctx *ctx, const s2_device *dev, rt_upload *up, s2_devptr dst, const void *src,
                                     size_t bytes);
S2_RT_HIDDEN s2_status s2_rt_up_finish(s2_ctx *ctx, const s2_device *dev, rt_upload *up);
S2_RT_HIDDEN void s2_rt_up_release(rt_upload *up);

/* sched_cache.c */
/* Upper bounds from counts of what s2_rt_sched_build uploads for (q_len,
 * kv_len), nothing built: its device bytes, and (backward kernels with the
 * dS path) the dS tiles per batch element, else -1.  S2_ERR_SHAPE when the
 * bytes are above S2_ATTN_MAX_SCHEDULE_BYTES. */
typedef struct sched_bound {
    size_t bytes;
    int64_t ds_tiles;
} sched_bound;
S2_RT_HIDDEN s2_status s2_rt_sched_bound(s2_ctx *ctx, const s2_attn_kernel *k, int64_t q_len, int64_t kv_len,
                                         sched_bound *out);
/* S2_ERR_SHAPE naming what, when bytes is above S2_ATTN_MAX_SCHEDULE_BYTES. */
S2_RT_HIDDEN s2_status s2_rt_sched_cap(s2_ctx *ctx, const s2_attn_kernel *k, const char *what, size_t bytes);
/* Build the schedules of (q_len, kv_len) into *slot (all zero before; left
 * zero on failure). */
S2_RT_HIDDEN s2_status s2_rt_sched_build(s2_ctx *ctx, s2_attn_kernel *k, int64_t q_len, int64_t kv_len, rt_upload *up,
                                         sched_slot *slot);
/* The same from a caller's forward schedule of layout lay, checked first
 * (s2_schedule_check; the backward's transposed schedule is its transpose). */
S2_RT_HIDDEN s2_status s2_rt_sched_build_given(s2_ctx *ctx, s2_attn_kernel *k, const s2_layout *lay,
                                               const s2_schedule *fwd, rt_upload *up, sched_slot *slot);
/* The tile shape of the forward schedule the entry's main kernel reads. */
static inline s2_tile_spec s2_rt_fwd_tile(const s2_kspec *spec)
{
    return (s2_tile_spec){spec->block_m, spec->block_n / (spec->kv_gather > 1 ? spec->kv_gather : 1)};
}
/* Free a slot's device buffers (stream: the allocator's stream). */
S2_RT_HIDDEN void s2_rt_sched_slot_free(const s2_device *dev, sched_slot *s, void *stream);
/* Set up k's schedule cache (forward and backward kernels). */
S2_RT_HIDDEN void s2_rt_sched_cache_init(s2_attn_kernel *k);
/* The slot holding (q_len, kv_len), built on a miss (S2_ERR_CAPTURE instead
 * while the launch's stream is capturing; NULL for a query).  Called with
 * k->lock held. */
S2_RT_HIDDEN s2_status s2_rt_sched_get(s2_ctx *ctx, s2_attn_kernel *k, int64_t q_len, int64_t kv_len, void *stream,
                                       sched_slot **out);
/* A launch from the slot s of its schedule; args: the family's launch arguments. */
typedef s2_status (*s2_rt_slot_launch)(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const void *args, sched_slot *s);
/* launch on the slot holding (q_len, kv_len), k->lock held across the lookup
 * and the launch so that no other thread evicts the schedule between them. */
S2_RT_HIDDEN s2_status s2_rt_sched_launch(s2_ctx *ctx, s2_attn_kernel *k, int64_t q_len, int64_t kv_len, void *stream,
                                          s2_rt_slot_launch launch, const void *args);
/* The persistent forward's work-counter pair of `stream` in slot s.  Called with k->lock held. */
S2_RT_HIDDEN s2_status s2_rt_sched_counter(s2_ctx *ctx, s2_attn_kernel *k, sched_slot *s, void *stream,
                                           s2_devptr *out);

/* attn_fwd.c */
/* The forward's launch from slot s (its persistent counters: the caller holds the slot's owner's lock);
 * given: the tensor maps of a's q, k, v for the kernel the slot picks (NULL: encoded here). */
S2_RT_HIDDEN s2_status s2_rt_fwd_launch(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_fwd_args *a,
                                        sched_slot *s, const s2_tensor_map *given);
/* The schedule shape of a launch (varlen: the sequences'); false: nothing to launch. */
S2_RT_HIDDEN bool s2_rt_fwd_sched_shape(const s2_attn_fwd_args *a, int64_t *q_len, int64_t *kv_len);
/* 4-D tensor map {D, seq, heads, batch} of one tensor, boxes of 64 x rows. */
S2_RT_HIDDEN s2_status s2_rt_tensor_map_of(s2_ctx *ctx, const s2_device *dev, s2_tensor_map *map, s2_dtype dt, int d,
                                           s2_devptr ptr, const int64_t stride[3], int64_t seq, int64_t heads,
                                           int64_t batch, uint32_t rows);

/* args.c */
/* The map of a kernel of ABI abi (at module load). */
S2_RT_HIDDEN s2_status s2_rt_argmap_build(s2_ctx *ctx, s2_abi_id abi, s2_rt_argmap *out);
/* The packer: args[i] = the address of parameter i in vals, the family's
 * values (s2_rt_fwd_vals, ...) of the kernel's ABI. */
S2_RT_HIDDEN void s2_rt_pack(const s2_rt_argmap *map, void *vals, void **args);

/* The launch of k's kernel of role over in's extents, on stream: its launch
 * facts (abi/launch_facts.h) from its record, the device's limits and the
 * kernel's use, read at load. */
S2_RT_HIDDEN s2_status s2_rt_launch_cfg(s2_ctx *ctx, const s2_attn_kernel *k, s2_kernel_role role,
                                        const s2_launch_dims *in, void *stream, s2_launch_cfg *cfg);
/* Pack vals (s2_rt_pack) and launch k's kernel of role over in's extents on stream. */
S2_RT_HIDDEN s2_status s2_rt_launch_role(s2_ctx *ctx, const s2_attn_kernel *k, s2_kernel_role role, void *vals,
                                         const s2_launch_dims *in, void *stream);


/* The entry's main kernel's resolved spec, options included (the forward,
 * NAME_dkdv, the decode kernel: the manifest parser checks it is there). */
static inline const s2_kspec *s2_rt_main_spec(const s2_attn_kernel *k)
{
    return &k->rec[s2_main_role(k->desc->spec.kind)]->spec;
}

/* attn_bwd.c */
/* The backward's launches from slot s (o: NULL for the runtime's choices). */
S2_RT_HIDDEN s2_status s2_rt_bwd_launch(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_bwd_args *a,
                                        const sched_slot *s);
/* Encode the tensor maps a one-launch backward of a takes (none without the bwd_tma ABI), into the device's memo. */
S2_RT_HIDDEN s2_status s2_rt_bwd_tensor_maps(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_bwd_args *a);
/* The workspace that takes the dS path over every head (plain part only when
 * none) of a slot with ds_tiles dS tiles per batch element (< 0: no dS path);
 * rows: the stats' rows per head (batch · q_len; a packed batch's token rows). */
S2_RT_HIDDEN size_t s2_rt_bwd_full_workspace(const s2_attn_kernel *k, int64_t ds_tiles, int batch, int64_t rows);
/* The workspace a plan or schedule takes by default: the dS path's where it
 * stays within twice q's bytes plus 64 MB (FlashAttention-3's), else that of
 * the fewest chunks of kv heads within it that fill the GPU, else the plain
 * one (dq recomputed).  A caller who passes more takes the full dS path.
 * _bound: an upper bound of it before the schedules exist.  batch, rows: as
 * s2_rt_bwd_full_workspace's. */
S2_RT_HIDDEN size_t s2_rt_bwd_default_workspace(const s2_attn_kernel *k, const sched_slot *s, int batch, int64_t rows);
S2_RT_HIDDEN size_t s2_rt_bwd_default_workspace_bound(const s2_attn_kernel *k, int64_t ds_tiles, int batch,
                                                      int64_t rows);
/* The schedule shape of a backward (a->seqs': its schedule shape); false when no sequence has a query. */
S2_RT_HIDDEN bool s2_rt_bwd_sched_shape(const s2_attn_bwd_args *a, int64_t *q_len, int64_t *kv_len);

/* attn_decode.c */
/* Uploaded kept-block lists for sequences of up to q_blocks blocks (the
 * cache's key: q_blocks, 0). */
typedef struct dec_slot {
    s2_lru_entry lru;
    int64_t q_blocks;
    s2_devptr buf, class_of_kv_head, offsets, entries;
    int64_t max_list;
} dec_slot;
/* The q_blocks of the lists that serve max_seq_len. */
S2_RT_HIDDEN int64_t s2_rt_dec_q_blocks(const s2_attn_kernel *k, int64_t max_seq_len);
S2_RT_HIDDEN s2_status s2_rt_dec_build(s2_ctx *ctx, s2_attn_kernel *k, int64_t q_blocks, rt_upload *up,
                                       dec_slot *slot);
/* An upper bound from counts on the device bytes of those lists (nothing
 * built); S2_ERR_SHAPE above S2_ATTN_MAX_SCHEDULE_BYTES. */
S2_RT_HIDDEN s2_status s2_rt_dec_bound(s2_ctx *ctx, const s2_attn_kernel *k, int64_t q_blocks, size_t *bytes);
/* The most workspace host-checked decode arguments a may need, whatever their lists. */
S2_RT_HIDDEN size_t s2_rt_dec_workspace_bound(const s2_attn_decode_args *a);
/* The split count and workspace bytes of host-checked arguments with lists s. */
S2_RT_HIDDEN s2_status s2_rt_dec_splits(s2_ctx *ctx, s2_attn_kernel *k, const s2_attn_decode_args *a,
                                        const dec_slot *s, int *splits, size_t *ws_bytes);
S2_RT_HIDDEN s2_status s2_rt_dec_launch(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_decode_args *a,
                                        const dec_slot *s, int splits);
/* s2_rows' checks (checks.c). */
S2_RT_HIDDEN s2_status s2_rt_rows_check(s2_ctx *ctx, const s2_attn_kernel *k, const s2_rows_args *a);
/* The combine's launch of checked arguments. */
S2_RT_HIDDEN s2_status s2_rt_combine_launch(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_combine_args *a);
/* A decode kernel's functions and its list cache. */
S2_RT_HIDDEN s2_status s2_rt_decode_init(s2_ctx *ctx, s2_attn_kernel *k);
S2_RT_HIDDEN void s2_rt_decode_free(s2_attn_kernel *k);

#endif
