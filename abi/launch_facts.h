/* Internal to s2c: a kernel's launch facts (grid, block, dynamic shared
 * memory, resident CTAs per SM) from its manifest record, the launch's
 * extents and the device's limits, computed by one function
 * (s2_launch_facts_of) that the runtime, the CLI, the benches and the AOT
 * emitter ask.  The AOT launchers run without s2c, so they carry the grid
 * rules' sources (S2_GRID_DIMS_*) and a copy of the occupancy rule generated
 * from its one definition (S2_CTAS_PER_SM_DEFINE). */
#ifndef S2C_ABI_LAUNCH_FACTS_H
#define S2C_ABI_LAUNCH_FACTS_H

#include "kernel_abi.h"

#include <stdint.h>

/* What launches need of the device: cuDeviceGetAttribute's values, read once
 * per device (the runtime: s2_device_open), never assumed. */
typedef struct s2_device_limits {
    int sm_count;                /* MULTIPROCESSOR_COUNT */
    int smem_per_sm;             /* MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, bytes */
    int smem_per_block_optin;    /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
    int smem_reserved_per_block; /* RESERVED_SHARED_MEMORY_PER_BLOCK: the driver's share of each CTA */
    int regs_per_sm;             /* MAX_REGISTERS_PER_MULTIPROCESSOR */
    int threads_per_sm;          /* MAX_THREADS_PER_MULTIPROCESSOR */
    int blocks_per_sm;           /* MAX_BLOCKS_PER_MULTIPROCESSOR */
} s2_device_limits;

/* What a loaded kernel uses beyond its record: cuFuncGetAttribute's
 * NUM_REGS and SHARED_SIZE_BYTES, read once per loaded kernel. */
typedef struct s2_kernel_use {
    int regs;                    /* per thread */
    int static_smem;             /* bytes */
} s2_kernel_use;

/* A launch's extents; each grid rule reads its own (S2_GRID_DIMS_*). */
typedef struct s2_launch_dims {
    int64_t q_tiles, kv_tiles, q_len, rows, n, n_work;
    int64_t heads, kv_heads, batch, splits;
} s2_launch_dims;

/* How a grid's x extent is divided: by 1, 2, the rows a CTA covers
 * (threads / (head_dim / 8), the record's head_dim) or its threads (one
 * per item). */
typedef enum s2_grid_div { S2_DIV_ONE = 0, S2_DIV_TWO, S2_DIV_ROWS_PER_CTA, S2_DIV_THREADS } s2_grid_div;

/* Each grid rule but the persistent one, as X(extent, divisor) per
 * dimension and N() for a dimension of 1: the extents are s2_launch_dims'
 * fields and the AOT launchers' argument names (driver/aot_abi.c). */
#define S2_GRID_DIMS_Q_TILES(X, N) X(q_tiles, ONE) X(heads, ONE) X(batch, ONE)
#define S2_GRID_DIMS_PRE_ROWS(X, N) X(q_len, ROWS_PER_CTA) X(heads, ONE) X(batch, ONE)
#define S2_GRID_DIMS_KV_TILES(X, N) X(kv_tiles, ONE) X(kv_heads, ONE) X(batch, ONE)
#define S2_GRID_DIMS_Q_TILE_PAIRS(X, N) X(q_tiles, TWO) X(heads, ONE) X(batch, ONE)
#define S2_GRID_DIMS_SPLITS(X, N) X(splits, ONE) X(kv_heads, ONE) X(batch, ONE)
#define S2_GRID_DIMS_ROWS(X, N) X(rows, ROWS_PER_CTA) N() N()
#define S2_GRID_DIMS_SEQS(X, N) X(n, THREADS) N() N()
#define S2_GRID_DIMS_RUNS(X, N) X(n, ONE) N() N()

/* Resident CTAs per SM of a kernel: the least that registers (allocated per
 * warp in units of 256), shared memory (dynamic, static and the driver's
 * reserved share per CTA) and threads allow, within 1..sm_blocks.  One
 * definition, instantiated by abi/launch_facts.c and written as text into the
 * AOT launchers (driver/emit_c.c), so both follow the same rule. */
#define S2_CTAS_PER_SM_DEFINE(NAME)                                                                             \
    static int NAME(int sm_regs, int sm_smem, int sm_threads, int sm_blocks, int reserved, int threads, int smem, \
                    int regs, int static_smem)                                                                  \
    {                                                                                                            \
        int warps = (threads + 31) / 32, warp_regs = (regs * 32 + 255) / 256 * 256;                             \
        int cta_smem = smem + static_smem + reserved;                                                            \
        int n = warp_regs > 0 ? sm_regs / (warps * warp_regs) : sm_blocks;                                       \
        int by_smem = cta_smem > 0 ? sm_smem / cta_smem : sm_blocks;                                             \
        int by_threads = threads > 0 ? sm_threads / threads : sm_blocks;                                         \
        n = n < by_smem ? n : by_smem;                                                                           \
        n = n < by_threads ? n : by_threads;                                                                     \
        return n < 1 ? 1 : n > sm_blocks ? sm_blocks : n;                                                        \
    }
#define S2_CTAS_PER_SM_STR_(...) #__VA_ARGS__
#define S2_CTAS_PER_SM_STR(...) S2_CTAS_PER_SM_STR_(__VA_ARGS__)
/* The rule's text, for a definition of a function called NAME. */
#define S2_CTAS_PER_SM_TEXT(NAME) S2_CTAS_PER_SM_STR(S2_CTAS_PER_SM_DEFINE(NAME))

/* What a launch of one kernel takes. */
typedef struct s2_launch_facts {
    uint32_t grid[3], block[3];
    uint32_t smem_bytes;         /* dynamic shared memory */
    int ctas_per_sm;             /* resident CTAs per SM; 0 without the device's limits */
} s2_launch_facts;

/* The launch facts of the kernel of record r: block (threads, 1, 1) and the
 * dynamic shared memory from the record, the grid from its rule over in's
 * extents, CTAs per SM from dev and use (both or neither; the persistent
 * rule, (min(SMs x CTAs per SM, n_work x batch), 1, 1) and at least 1,
 * needs them).  S2_ERR_INVALID for a negative extent or a missing input,
 * S2_ERR_UNSUPPORTED for a grid beyond 32 bits; no other effect. */
s2_status s2_launch_facts_of(s2_ctx *ctx, const s2_kernel_record *r, const s2_launch_dims *in,
                             const s2_device_limits *dev, const s2_kernel_use *use, s2_launch_facts *out);

/* The divisor of a record's grid x extent (1 for rules without one, 0 when
 * the rule cannot be formed: no rows per CTA). */
int s2_grid_x_div(const s2_kernel_record *r);

#endif
