/* s2c — loading generated attention modules and launching their kernels
 * (libs2rt: no LLVM, no libcuda at link time, no libyaml).
 *
 *   s2_attn_module_load()   a generated cubin: the module, its manifest (read
 *                           from the image, no GPU round trip) and every kernel
 *   s2_attn_find()          a kernel by pattern name, dtype and head_dim
 *   s2_attn_forward()       check every argument, then launch
 *
 * Kernels found in a module are borrowed: they live until s2_attn_module_free.
 * s2_attn_load() (and the JIT, s2c/jit.h) hand back a standalone kernel that
 * owns its module: free it with s2_attn_kernel_free.
 *
 * Schedules: the packed forward schedule of each (q_len, kv_len) is built
 * from the manifest's pattern and uploaded on first use, then kept in a
 * per-kernel cache of S2_ATTN_SCHED_CACHE entries (least recently used goes
 * first: the device is synchronised, then its memory goes back to the
 * device's allocator, s2_device_set_allocator).  The first launch for a new
 * shape synchronises the context after the upload, so that a launch on any
 * stream sees the schedule.  Inside stream capture such a first launch
 * returns S2_ERR_CAPTURE and launches nothing (launch each shape once before
 * capturing); a shape already built is captured like any launch.  The same
 * holds for decode's kept-block lists (per range of max_seq_len).
 * Before anything is built, a shape's schedules (or lists) are bounded from
 * counts (the candidate tiles of every list, no list held): a shape whose
 * bound is above S2_ATTN_MAX_SCHEDULE_BYTES of device memory is refused with
 * S2_ERR_SHAPE by its first launch, by a plan's declaration and by size
 * queries, in time linear in its lists at most.
 *
 * Threads:
 *  - s2_attn_forward, s2_attn_backward, s2_attn_decode, s2_combine and the
 *    launches over a caller's schedule may be
 *    called on one kernel (and on kernels of one module or device) from
 *    several threads at once, on any streams, each thread with its own
 *    s2_ctx; a kernel's caches (schedules, kept-block lists) are locked, and
 *    the allocator's callbacks run on the launching thread under that lock.
 *  - So may s2_attn_plan_forward, _backward and _decode on one prepared plan
 *    (below): it is read-only but for the persistent forward's counters, which
 *    are locked.
 *  - Loading and freeing a module, kernel or plan, declaring and preparing a
 *    plan, and s2_device_set_allocator must not run concurrently with
 *    launches on the same objects.
 *  - A persistent forward's launches on one stream share a work counter,
 *    those on other streams get their own (S2_ATTN_COUNTER_PAIRS); launches
 *    that share a decode or backward workspace must not run concurrently.
 */
#ifndef S2C_ATTN_RUNTIME_H
#define S2C_ATTN_RUNTIME_H

#include "s2c/launch.h"
#include "s2c/layout.h"
#include "s2c/manifest.h"
#include "s2c/spec.h"
#include "s2c/decode.h"
#include "s2c/runtime.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define S2_ATTN_SCHED_CACHE 8
/* The most device memory one shape's schedules or kept-block lists may take
 * by that bound: 8 GiB (a million tokens of a stride-8 GQA pattern bound at
 * about 4 GiB with the wide variant; 2^31 tokens would need terabytes). */
#define S2_ATTN_MAX_SCHEDULE_BYTES ((size_t)8 << 30)
/* Work-counter pairs of a persistent forward's schedule entry: launches on
 * up to this many streams at once run without waiting; one more stream
 * synchronises the context first (launch.h, persistent variant). */
#define S2_ATTN_COUNTER_PAIRS 8

typedef struct s2_attn_module s2_attn_module;
typedef struct s2_attn_kernel s2_attn_kernel;

/* Load a generated cubin (an ELF image with the s2c_manifest symbol: PTX and
 * fatbins carry no manifest, S2_ERR_PARSE) and get every kernel it lists.
 * The image is not kept after the call. */
S2_API s2_status s2_attn_module_load(s2_ctx *ctx, s2_device *dev, const void *image, size_t size,
                              s2_attn_module **out);
S2_API s2_status s2_attn_module_load_file(s2_ctx *ctx, s2_device *dev, const char *path, s2_attn_module **out);
/* One module per arch (`s2c compile --arch sm_80 --arch sm_90a -o m.cubin`
 * writes m.sm_80.cubin and m.sm_90a.cubin): loads the newest of `paths` that
 * runs on dev (sm_90a on 9.0 only; others on their major at the same or a
 * higher minor).  S2_ERR_UNSUPPORTED, listing each path's arch, when none does. */
S2_API s2_status s2_attn_module_load_best(s2_ctx *ctx, s2_device *dev, const char *const *paths, int n,
                                          s2_attn_module **out);
/* Frees the kernels, their schedules' device memory and the module.  NULL is
 * fine.  No launch on its kernels may be in flight or start afterwards. */
S2_API void s2_attn_module_free(s2_attn_module *mod);

/* Introspection.  The manifest lists the patterns (s2_manifest_pattern_at). */
S2_API const s2_manifest *s2_attn_module_manifest(const s2_attn_module *mod);
S2_API int s2_attn_module_num_kernels(const s2_attn_module *mod);
S2_API s2_attn_kernel *s2_attn_module_kernel_at(const s2_attn_module *mod, int i); /* NULL if out of range */

/* The kernel of `pattern` (NULL: any pattern) for dtype and head_dim.
 * S2_ERR_NOT_FOUND, with the kernels the module does have in the message. */
S2_API s2_status s2_attn_find(s2_ctx *ctx, const s2_attn_module *mod, const char *pattern, s2_dtype dtype,
                       int head_dim, s2_attn_kernel **out);

/* Load an image and find one kernel (as s2_attn_find); the kernel owns the
 * module.  Free with s2_attn_kernel_free. */
S2_API s2_status s2_attn_load(s2_ctx *ctx, s2_device *dev, const void *image, size_t size, const char *pattern,
                       s2_dtype dtype, int head_dim, s2_attn_kernel **out);
/* Frees a kernel from s2_attn_load or s2_jit_compile together with its
 * module; does nothing to a kernel borrowed from a module (or NULL). */
S2_API void s2_attn_kernel_free(s2_attn_kernel *k);

/* What the manifest says about the kernel (name, pattern name, resolved spec,
 * threads, dynamic shared memory), and the pattern it was generated for. */
S2_API const s2_manifest_kernel *s2_attn_kernel_desc(const s2_attn_kernel *k);
S2_API const s2_pattern *s2_attn_kernel_pattern(const s2_attn_kernel *k);
/* Longest kv_len the kernel accepts: the pattern's max_seq_len, the size of
 * its explicit masks and the kernel's 32-bit lengths, whichever is least. */
S2_API int64_t s2_attn_kernel_max_kv_len(const s2_attn_kernel *k);

typedef struct s2_attn_sched_stats {
    int64_t hits, misses, evictions;
    int cached;                      /* entries held now (<= S2_ATTN_SCHED_CACHE) */
    int64_t wide;                    /* forward schedules built for the wide variant (role fwd_wide) */
    int64_t ds_chunked;              /* backward launches that ran the dS path in chunks of heads */
    int64_t dq_paired;               /* backward launches whose dQ ran two query tiles per CTA (NAME_dqds2) */
} s2_attn_sched_stats;
S2_API void s2_attn_kernel_sched_stats(s2_attn_kernel *k, s2_attn_sched_stats *out);

/* Check every argument (the first failure decides the status; nothing is
 * launched), then launch asynchronously on `stream` (NULL: the legacy
 * default stream).  Statuses:
 *   S2_ERR_NULL_ARG   k, a, or one of q, k, v, o is null
 *   S2_ERR_DTYPE      a->dtype is not the kernel's
 *   S2_ERR_HEAD_DIM   a->head_dim is not the kernel's
 *   S2_ERR_HEADS      heads / kv_heads are not the pattern's
 *   S2_ERR_SHAPE      batch < 1 or above 65535, q_len or kv_len < 1, q_len > kv_len,
 *                     or a tensor's extent overflows
 *   S2_ERR_SEQ_LEN    kv_len above s2_attn_kernel_max_kv_len
 *   S2_ERR_STRIDE     a negative stride; o's rows overlapping (its writes would race)
 *   S2_ERR_ALIGNMENT  q, k, v, o not 16-byte aligned, lse not 4-byte aligned,
 *                     a stride not a multiple of 8 elements
 *   S2_ERR_INVALID    scale not finite; a pointer that is not device memory
 *                     of the kernel's context, or whose allocation is smaller
 *                     than the extent the shapes and strides imply (s2_check_device_ptr)
 * then whatever building the schedule or the launch returns.
 * a->scale == 0 means 1/sqrt(head_dim). */
S2_API s2_status s2_attn_forward(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_fwd_args *a);

/* The backward of a S2_KERNEL_BWD kernel: the same checks as the forward
 * (statuses as above; inputs q, k, v, o, d_o, lse, workspace and outputs dq,
 * dk, dv must be non-null; dq, dk, dv must not overlap themselves), then
 * NAME_pre, NAME_dkdv and NAME_dq (NAME_dqds when a->workspace_bytes holds
 * the dS tiles: s2_attn_backward_workspace) are launched on `stream`.  The forward and
 * transposed schedules of (q_len, kv_len) are cached like the forward's.
 * Deterministic: the same inputs give bitwise-identical dq, dk, dv.
 * A forward kernel gives S2_ERR_INVALID here, and a backward one in
 * s2_attn_forward. */
S2_API s2_status s2_attn_backward(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_bwd_args *a);
S2_API s2_status s2_attn_backward_check(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_bwd_args *a);

/* The workspace that lets s2_attn_backward take the dS path (launch.h,
 * backward ABI 48..50: the dK/dV kernel keeps each entry's dS tile, 8 KB per
 * 64 x 64 entry, so that the dQ kernel does one tile product per entry
 * instead of three): s2_attn_bwd_workspace_bytes() plus the dS tiles of
 * (batch, q_len, kv_len).  Pass it as a->workspace_bytes.  *bytes is the
 * plain size when the kernel has no dS path (no bwd_dqds kernel in its manifest) or the
 * schedules do not pair up; *ds_path says which (may be NULL).  Builds
 * (and caches) the schedules of (q_len, kv_len), as a launch would.  The
 * dS tiles go at the first 256-byte boundary after the plain part. */
S2_API s2_status s2_attn_backward_workspace(s2_ctx *ctx, s2_attn_kernel *k, int batch, int64_t q_len, int64_t kv_len,
                                     size_t *bytes, bool *ds_path);

/* The dS path with less memory: the workspace that holds the dS tiles of
 * the largest of `chunks` equal chunks of kv heads (chunks divides
 * kv_heads; 1: s2_attn_backward_workspace's size; 0: the default workspace,
 * the one plans and schedules take: the dS path within twice q's bytes plus
 * 64 MB, as FlashAttention-3's backward needs, in chunks where the whole
 * does not fit, else the plain size).  s2_attn_backward runs
 * NAME_dkdv and NAME_dqds chunk after chunk (same results, bit for bit;
 * s2_attn_sched_stats.ds_chunked counts such launches) when the workspace
 * does not hold every dS tile
 * but holds those of the fewest chunks whose dK/dV work still fills the GPU
 * for as long as its longest list takes (smaller chunks run slower than the
 * recomputing NAME_dq, which it takes otherwise).  S2_ERR_INVALID when chunks does not divide kv_heads,
 * S2_ERR_UNSUPPORTED when the kernel or the shape has no dS path. */
S2_API s2_status s2_attn_backward_workspace_chunked(s2_ctx *ctx, s2_attn_kernel *k, int batch, int64_t q_len,
                                             int64_t kv_len, int chunks, size_t *bytes);

/* The three tensor maps (q, k, v) of a forward kernel of the sm_90a
 * tensor-map ABI (launch.h) for arguments `a` (pointers and strides as
 * s2_attn_forward takes them), with the boxes the kernel's manifest record
 * gives.  s2_attn_forward builds them itself; for callers that launch by
 * hand.  S2_ERR_INVALID for a kernel without tensor maps. */
S2_API s2_status s2_attn_fwd_tensor_maps(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_fwd_args *a,
                                  s2_tensor_map maps[3]);

/* ---- variable-length batches (launch.h: s2_attn_seq, the seqinfo parameter) ----
 * A batch of sequences of their own lengths, for s2_attn_fwd_args.seqs:
 * packed (cu_seqlens), right- or left-padded, chunked prefill (q_len <
 * kv_len: the chunk attends to the cache plus itself), or a mix.  The object
 * holds the array on the device and a host copy (checks, schedule), built
 * once and usable by any number of launches (every layer of a model),
 * forward and backward (s2_attn_bwd_args.seqs: the same records). */
typedef struct s2_attn_seqs s2_attn_seqs;

/* Check and upload n sequences (1..65535).  Statuses:
 *   S2_ERR_NULL_ARG  dev, seqs or out is null
 *   S2_ERR_SHAPE     n out of range; a negative start or length, q_len > kv_len,
 *                    or an end (start + length) above INT32_MAX
 *   S2_ERR_INVALID   two sequences share a query row (their o rows would race)
 * Key rows may be shared (two chunks reading one cache, say). */
S2_API s2_status s2_attn_seqs_new(s2_ctx *ctx, s2_device *dev, const s2_attn_seq *seqs, int n, s2_attn_seqs **out);
/* No launch using it may be in flight.  NULL is fine. */
S2_API void s2_attn_seqs_free(s2_attn_seqs *s);
S2_API int s2_attn_seqs_count(const s2_attn_seqs *s);
S2_API const s2_attn_seq *s2_attn_seqs_host(const s2_attn_seqs *s);
S2_API s2_devptr s2_attn_seqs_device(const s2_attn_seqs *s);   /* the seqinfo parameter, for launches by hand */
/* (q_len, kv_len) of the schedule a launch uses (launch.h); 0, 0 when no
 * sequence has a query (s2_attn_forward then launches nothing). */
S2_API void s2_attn_seqs_schedule_shape(const s2_attn_seqs *s, int64_t *q_len, int64_t *kv_len);

/* seqs[0..n) of a packed batch from cumulative lengths: sequence i has
 * queries cu_q[i] .. cu_q[i+1]-1 and keys cu_k[i] .. cu_k[i+1]-1 (cu_k NULL:
 * cu_q, self-attention).  S2_ERR_SHAPE when an array decreases or starts
 * below 0, or a sequence has more queries than keys. */
S2_API s2_status s2_attn_seqs_packed(s2_ctx *ctx, const int32_t *cu_q, const int32_t *cu_k, int n, s2_attn_seq *seqs);

/* With a->seqs, s2_attn_forward (and s2_attn_backward likewise) checks besides: seqs made on
 * the kernel's device (S2_ERR_INVALID), a kernel whose manifest has kernel.seqinfo
 * (S2_ERR_UNSUPPORTED: generated by an older s2c), batch == its count, q_len / kv_len
 * (the token rows) >= 1 and every sequence inside them (S2_ERR_SHAPE), every
 * kv_len within s2_attn_kernel_max_kv_len (S2_ERR_SEQ_LEN); the extents are
 * those of [rows, heads, D] tensors and of lse [heads][q_len].  The
 * backward also refuses host records where two sequences with keys share a
 * key row (S2_ERR_INVALID: their dk, dv rows would race; device records are
 * trusted so), launches NAME_pre over the token rows and the other kernels
 * over the sequences, and writes dq, dk, dv rows of the sequences only (zeros
 * for the keys of a sequence without queries); it is deterministic as the
 * uniform one.  Its plain workspace is s2_attn_bwd_workspace_bytes(1, heads,
 * q_len); a plan that declares the batch (s2_attn_plan_add_backward with
 * seqs: its schedule shape, as the forward's) holds the dS tiles too. */

/* Only the checks of s2_attn_forward (no schedule, no launch). */
S2_API s2_status s2_attn_forward_check(s2_ctx *ctx, const s2_attn_kernel *k, const s2_attn_fwd_args *a);

/* ---- paged decode (S2_KERNEL_DECODE; arguments and ABI in s2c/decode.h) ----------
 * s2_attn_decode checks every argument (statuses as s2_attn_forward, plus:
 *   S2_ERR_NULL_ARG   block_table, seq_lens null; workspace null when splits > 1
 *   S2_ERR_SHAPE      n_new outside 1 .. min(16 / group, block size); page_size
 *                     not a multiple of 16; table rows shorter than max_seq_len needs
 *   S2_ERR_SEQ_LEN    max_seq_len above s2_attn_kernel_max_kv_len
 *   S2_ERR_STRIDE     table strides that make rows overlap
 *   S2_ERR_INVALID    splits outside 0..64; a pointer that is not device memory
 *                     or is too small for its extent)
 * then builds the kept-block lists (first use; cached for a range of
 * max_seq_len, like the forward's schedules), picks the split count and
 * launches NAME on `stream` (one launch: with splits > 1 its last CTA per
 * sequence and kv head merges the partials).  seq_lens live on the device and
 * are not checked (unless S2C_CHECK_DECODE: s2_attn_decode_validate): each
 * must be in [n_new, max_seq_len], and its table row must hold valid page ids
 * for the pages of kept blocks.
 * s2_attn_decode_workspace gives the workspace bytes for these arguments
 * (0: none needed; the split count depends only on the shapes).  Zero the
 * workspace once after allocating it; launches leave the part that must be
 * zero (split counters at its start, a fixed region whatever the shapes) so,
 * and one workspace may serve launches of any shapes if it has the largest
 * size they ask for.  Launches sharing a workspace must not run concurrently.
 * Split-KV needs batch * kv_heads <= 65536 (the heuristic takes 1 split above;
 * an explicit splits > 1 gives S2_ERR_UNSUPPORTED). */
S2_API s2_status s2_attn_decode(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_decode_args *a);
S2_API s2_status s2_attn_decode_workspace(s2_ctx *ctx, s2_attn_kernel *k, const s2_attn_decode_args *a, size_t *bytes);
/* Checked mode for decode: waits for `stream`, copies seq_lens and the block
 * table to the host and checks what s2_attn_decode trusts: every seq_lens[b]
 * in n_new..max_seq_len, and every page id the kernel would read (those of the
 * blocks the pattern keeps for the new tokens, up to seq_len) in
 * 0..num_pages-1.  S2_ERR_DEVICE_DATA names the first bad entry.  Synchronous
 * and slow: for debugging and tests.  With S2C_CHECK_DECODE=1 in the
 * environment when a module is loaded, s2_attn_decode runs it before every
 * launch and launches nothing on failure. */
S2_API s2_status s2_attn_decode_validate(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_decode_args *a);
/* The number of KV splits s2_attn_decode takes for these arguments. */
S2_API s2_status s2_attn_decode_splits(s2_ctx *ctx, s2_attn_kernel *k, const s2_attn_decode_args *a, int *splits);

/* Merge the outputs of n attention calls over disjoint key sets (context
 * parallelism; s2_ref_combine is the reference) with the NAME_combine
 * kernel of k, a decode or forward kernel of the same dtype and head_dim:
 * each input a pair (o, lse) as the forward writes them (lse natural log
 * with the softmax scale applied, fp32 [B][H][S], -inf for a row that saw
 * no key); out gets o = sum_i exp(lse_i - lse) o_i and lse = log sum_i
 * exp(lse_i) (0 and -inf where every input is empty).  Inputs share
 * in_stride; their pointer table travels as a kernel parameter (no upload).
 * Statuses as s2_attn_forward for the tensors named in s2_combine_args;
 * S2_ERR_UNSUPPORTED for a forward module made before forward modules
 * held NAME_combine, S2_ERR_INVALID for a backward kernel. */
S2_API s2_status s2_combine(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_combine_args *a);
S2_API s2_status s2_combine_check(s2_ctx *ctx, const s2_attn_kernel *k, const s2_combine_args *a);
/* Rows of head_dim elements moved by a device table of runs (s2_rows_args,
 * NAME_rows of a forward or backward kernel of the same dtype and head_dim):
 * each run's rows of dst get the sum of its sources' rows in table order,
 * accumulated in fp32 and rounded once (a bit copy for one source), so equal
 * inputs give bitwise-equal results.  The table is read on the device: runs
 * outside src_rows or dst's rows are skipped there; everything else is
 * checked here.  S2_ERR_UNSUPPORTED for a module made before NAME_rows. */
S2_API s2_status s2_rows(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_rows_args *a);

/* ---- launches over a caller's schedule (context parallelism) -----------------------
 * The forward and backward kernels launched over a forward schedule the
 * caller supplies instead of the pattern's: kept-block lists in layout.h's
 * s2_schedule format (per head class and query tile, the key tiles and
 * their live sub-blocks), in the tile shape of the kernel's main record, so
 * that a layer spreading the keys over GPUs can attend over its local and
 * received KV blocks, each launch over its part, and merge the partial
 * (o, lse) pairs with s2_combine.  The kernels are the module's; only the
 * schedule they read differs.  No wide variant runs over such a schedule.
 *
 *   s2_attn_kernel_schedule()  the kernel's own forward schedule of (q_len,
 *                              kv_len) on the host: what a caller splits or
 *                              remaps (free with s2_schedule_free)
 *   s2_attn_sched_new()        check it as untrusted (s2_schedule_check
 *                              against the pattern's layout of (q_len,
 *                              kv_len) and the kernel's tile: S2_ERR_SHAPE,
 *                              S2_ERR_HEADS, S2_ERR_NULL_ARG or
 *                              S2_ERR_INVALID naming the class, list and
 *                              entry; S2_ERR_SHAPE above
 *                              S2_ATTN_MAX_SCHEDULE_BYTES), pack it for the
 *                              kernel and upload it (synchronising: any
 *                              stream sees it).  A backward kernel's
 *                              transposed schedule (and dS map) is built
 *                              from it (s2_schedule_transpose).
 *   s2_attn_forward_sched()    s2_attn_forward's checks and launch, over it;
 *                              S2_ERR_SHAPE when a's q_len, kv_len are not
 *                              the schedule's, S2_ERR_INVALID for another
 *                              kernel's, S2_ERR_UNSUPPORTED with a->seqs
 *   s2_attn_backward_sched()   likewise s2_attn_backward: dk, dv of the keys
 *                              the schedule visits (o, lse and d_o those of
 *                              the full forward: each part's dk, dv are then
 *                              the full backward's for its keys), dq summed
 *                              over them
 * A schedule serves any number of launches, on any streams; free it when
 * none is in flight. */
typedef struct s2_attn_sched s2_attn_sched;
S2_API s2_status s2_attn_kernel_schedule(s2_ctx *ctx, const s2_attn_kernel *k, int64_t q_len, int64_t kv_len,
                                         s2_schedule **out);
S2_API s2_status s2_attn_sched_new(s2_ctx *ctx, s2_attn_kernel *k, int64_t q_len, int64_t kv_len,
                                   const s2_schedule *fwd, s2_attn_sched **out);
S2_API void s2_attn_sched_free(s2_attn_sched *s);   /* NULL is fine */
S2_API s2_status s2_attn_forward_sched(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_fwd_args *a,
                                       s2_attn_sched *s);
S2_API s2_status s2_attn_backward_sched(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_bwd_args *a,
                                        s2_attn_sched *s);
/* The default backward workspace over schedule s: the dS path's where it
 * stays within twice q's bytes plus 64 MB (in chunks of kv heads where the
 * whole does not fit; as s2_attn_backward_workspace_chunked with chunks 0),
 * else the plain s2_attn_bwd_workspace_bytes (the recomputing NAME_dq). */
S2_API s2_status s2_attn_sched_backward_workspace(s2_ctx *ctx, const s2_attn_sched *s, int batch, size_t *bytes);

/* ---- plans: shapes prepared ahead of launches (CUDA graphs, engines) ----------------
 * A plan holds everything a kernel's launches of some declared shapes need on
 * the device: forward and backward schedules, decode's kept-block lists, the
 * persistent forward's work counters, and a workspace of its own for the
 * backward's dS path and split-KV decode.
 *
 *   s2_attn_plan_new()                  for one kernel
 *   s2_attn_plan_add_forward() ...      declare shapes (pointers are not read)
 *   s2_attn_plan_prepare(stream)        build on the host, then allocate (the
 *                                       device's allocator, with `stream`) and
 *                                       upload stream-ordered on `stream`;
 *                                       nothing waits for the GPU
 *   s2_attn_plan_forward() ...          launch
 *
 * Launches on other streams than prepare's must be ordered after it (an event),
 * as for any stream-ordered allocation.
 *
 * After prepare, a launch of a prepared shape checks its arguments on the host
 * (every check of s2_attn_forward & co. except the driver's view of the
 * pointers: like cuLaunchKernel, it trusts that they are device memory of the
 * kernel's context and large enough) and then calls the driver only to launch:
 * cuLaunchKernel, and cuCtxGetCurrent (cuCtxPushCurrent/PopCurrent when another
 * context is current).  Tensor maps are kept per device: the same tensors do
 * not encode again (new tensors: one cuTensorMapEncodeTiled, host-only).  No
 * allocation, copy or synchronisation: such launches may be captured into a
 * CUDA graph, any number of times.
 * A shape that was not prepared takes the kernel's own path (s2_attn_forward,
 * s2_attn_backward, s2_attn_decode: checks through the driver, the cache, a
 * synchronising build on first use) outside capture; while `stream` is being
 * captured it returns S2_ERR_CAPTURE and launches nothing.
 * S2C_CHECK_DECODE (decode's checked mode) synchronises, plan or not.
 *
 * Threads: a prepared plan may be shared; its launches may run from several
 * threads on several streams at once.  A persistent forward (manifest grid
 * rule persistent) takes a work-counter pair per stream: a graph that
 * captured one replays with the capturing stream's pair, so do not run it
 * at the same time as that stream's own launches of the plan.  Launches that use the plan's own
 * workspace (a null workspace argument) must not run concurrently with each
 * other: give each stream its own plan, or pass workspaces of your own. */
typedef struct s2_attn_plan s2_attn_plan;

S2_API s2_status s2_attn_plan_new(s2_ctx *ctx, s2_attn_kernel *k, s2_attn_plan **out);
/* Declare a shape by the arguments its launches will take; only the shape
 * fields are read, and checked as the launch checks them (statuses of
 * s2_attn_forward & co.; S2_ERR_INVALID for the wrong kernel kind or after
 * prepare).  Forward: batch, q_len, kv_len, or a->seqs (its schedule shape:
 * with s2_attn_seqs_new_device, every batch of up to its max_kv_len); when
 * q, k, v are given too, prepare encodes their tensor maps (sm_90a kernels),
 * so that even the first launch on them calls only the launch.
 * Backward: batch, q_len, kv_len, or a->seqs as the forward's (and likewise q and d_o for their maps).  Decode: batch, n_new, max_seq_len,
 * splits (the lists serve every max_seq_len up to the declared one's range).
 * The plan's workspace takes the largest that a declared backward (its
 * default, bounded workspace: s2_attn_backward_workspace_chunked with
 * chunks 0) or split-KV decode needs; pass a larger workspace in the args
 * for the dS path over every head.  S2_ERR_SHAPE too for a shape
 * whose schedules (or decode lists) are bounded above
 * S2_ATTN_MAX_SCHEDULE_BYTES: the bound is counted here, nothing is built. */
S2_API s2_status s2_attn_plan_add_forward(s2_ctx *ctx, s2_attn_plan *p, const s2_attn_fwd_args *shape);
S2_API s2_status s2_attn_plan_add_backward(s2_ctx *ctx, s2_attn_plan *p, const s2_attn_bwd_args *shape);
S2_API s2_status s2_attn_plan_add_decode(s2_ctx *ctx, s2_attn_plan *p, const s2_attn_decode_args *shape);
/* Once; S2_ERR_INVALID the second time. */
S2_API s2_status s2_attn_plan_prepare(s2_ctx *ctx, s2_attn_plan *p, void *stream);
/* The device bytes the plan holds after prepare (schedules, lists, counters,
 * its workspace), or before prepare an upper bound of what prepare will take:
 * the declarations' bounds from counts and the largest workspace any of them
 * may need (decode: at its splits, or at most 64).  Nothing is built or
 * allocated, so the query costs no more than the declarations did. */
S2_API s2_status s2_attn_plan_device_bytes(s2_ctx *ctx, s2_attn_plan *p, size_t *bytes);
/* Launches (arguments as s2_attn_forward, s2_attn_backward, s2_attn_decode;
 * a null workspace takes the plan's). */
S2_API s2_status s2_attn_plan_forward(s2_ctx *ctx, s2_attn_plan *p, void *stream, const s2_attn_fwd_args *a);
S2_API s2_status s2_attn_plan_backward(s2_ctx *ctx, s2_attn_plan *p, void *stream, const s2_attn_bwd_args *a);
S2_API s2_status s2_attn_plan_decode(s2_ctx *ctx, s2_attn_plan *p, void *stream, const s2_attn_decode_args *a);
/* The combine of a decode kernel's plan (s2_combine's arguments; it needs no
 * declaration): host checks, then the launch only, as above. */
S2_API s2_status s2_attn_plan_combine(s2_ctx *ctx, s2_attn_plan *p, void *stream, const s2_combine_args *a);
/* Frees its device memory through the allocator on prepare's stream.  No
 * launch of it (or graph holding one) may run afterwards.  NULL is fine. */
S2_API void s2_attn_plan_free(s2_attn_plan *p);

/* A variable-length batch whose sequences live on the device only, so that
 * one captured graph serves every step: n records (s2_attn_seq, launch.h) at
 * s2_attn_seqs_device(s), which the caller rewrites before each launch or
 * replay (s2_attn_seqs_write from the host, s2_attn_seqs_write_cu from
 * cu_seqlens on the device, or its own copy or kernel), stream-ordered.  Launches use the schedule of (max_kv_len,
 * max_kv_len), which serves every sequence of up to max_kv_len keys; their
 * grids cover that many query tiles per sequence.  The kernel trusts the
 * records as decode trusts seq_lens: each must have 0 <= q_len <= kv_len <=
 * max_kv_len, lie inside the launch's token rows, and share no query row
 * with another.  s2_attn_seqs_host gives NULL for such a batch. */
S2_API s2_status s2_attn_seqs_new_device(s2_ctx *ctx, s2_device *dev, int n, int64_t max_kv_len, s2_attn_seqs **out);
/* Check n records (as s2_attn_seqs_new, and kv_len <= max_kv_len) and copy
 * them to the device records on `stream` (a copy from pageable memory: the
 * driver may wait for the stream; not inside capture).  S2_ERR_INVALID for a
 * batch from s2_attn_seqs_new. */
S2_API s2_status s2_attn_seqs_write(s2_ctx *ctx, s2_attn_seqs *s, const s2_attn_seq *seqs, void *stream);
/* Write s's device records from an engine's cumulative lengths in device
 * memory: cu_q and cu_k are int32 [n + 1] (n = s2_attn_seqs_count(s); cu_k
 * 0: cu_q, self-attention), sequence i = {cu_q[i], cu_q[i+1] - cu_q[i],
 * cu_k[i], cu_k[i+1] - cu_k[i]}.  It launches the kernel NAME_seqs of k's
 * module (a forward's, ABI seqs in launch.h) on `stream` and makes no other
 * driver call, so it can be captured into a graph ahead of the forward,
 * which then reads the lengths each replay finds in cu_q / cu_k.  The
 * lengths are not trusted: a sequence with a negative start or length,
 * q_len > kv_len or kv_len above the batch's max_kv_len gets q_len = kv_len
 * = 0 (and starts 0), which the forward skips (its rows are not written).
 * Rows past the launch's tensors are not checked: cu_q[n] and cu_k[n] must
 * not exceed the q and k token rows.  Statuses (host checks only):
 *   S2_ERR_NULL_ARG     k, s or cu_q is null
 *   S2_ERR_INVALID      s is not from s2_attn_seqs_new_device, k is not a
 *                       forward, or they are on different devices
 *   S2_ERR_ALIGNMENT    cu_q or cu_k is not 4-byte aligned
 *   S2_ERR_UNSUPPORTED  k's module has no NAME_seqs (made by an s2c before 0.2) */
S2_API s2_status s2_attn_seqs_write_cu(s2_ctx *ctx, s2_attn_kernel *k, s2_attn_seqs *s, s2_devptr cu_q,
                                       s2_devptr cu_k, void *stream);

#ifdef __cplusplus
}
#endif
#endif
