/* The launch facts (abi/launch_facts.h): every grid rule's grid, the
 * occupancy rule over an H100's and an A100's limits, the persistent grid,
 * and the refusals, with exact values. */
#include "launch_facts.h"
#include "check_main.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* cuDeviceGetAttribute's values on an H100 SXM and an A100 */
static const s2_device_limits h100 = {.sm_count = 132, .smem_per_sm = 233472, .smem_per_block_optin = 232448,
                                      .smem_reserved_per_block = 1024, .regs_per_sm = 65536,
                                      .threads_per_sm = 2048, .blocks_per_sm = 32};
static const s2_device_limits a100 = {.sm_count = 108, .smem_per_sm = 167936, .smem_per_block_optin = 166912,
                                      .smem_reserved_per_block = 1024, .regs_per_sm = 65536,
                                      .threads_per_sm = 2048, .blocks_per_sm = 32};

static s2_kernel_record rec(s2_grid_rule g, int threads, int smem, int head_dim)
{
    s2_kernel_record r = {.symbol = "k", .grid = g, .threads = threads, .smem_bytes = smem};
    r.spec.head_dim = head_dim;
    return r;
}

static s2_launch_facts facts(const s2_kernel_record *r, const s2_launch_dims *in)
{
    s2_launch_facts f;
    memset(&f, 0x5a, sizeof f);   /* poisoned: every field must be written */
    ck_assert_int_eq(s2_launch_facts_of(NULL, r, in, NULL, NULL, &f), S2_OK);
    ck_assert_int_eq(f.block[0], (uint32_t)r->threads);
    ck_assert_int_eq(f.block[1], 1);
    ck_assert_int_eq(f.block[2], 1);
    ck_assert_int_eq(f.smem_bytes, (uint32_t)r->smem_bytes);
    ck_assert_int_eq(f.ctas_per_sm, 0);
    return f;
}

#define GRID_IS(f, x, y, z)                 \
    do {                                    \
        ck_assert_int_eq((f).grid[0], x);   \
        ck_assert_int_eq((f).grid[1], y);   \
        ck_assert_int_eq((f).grid[2], z);   \
    } while (0)

START_TEST(every_grid_rule)
{
    s2_launch_dims in = {.q_tiles = 7, .kv_tiles = 5, .q_len = 100, .rows = 1000, .n = 300, .heads = 16,
                         .kv_heads = 4, .batch = 3, .splits = 6};
    s2_kernel_record r = rec(S2_GRID_Q_TILES, 256, 1000, 128);
    GRID_IS(facts(&r, &in), 7, 16, 3);
    r = rec(S2_GRID_Q_TILE_PAIRS, 256, 0, 128);
    GRID_IS(facts(&r, &in), 4, 16, 3);
    r = rec(S2_GRID_KV_TILES, 256, 0, 128);
    GRID_IS(facts(&r, &in), 5, 4, 3);
    r = rec(S2_GRID_SPLITS, 128, 0, 64);
    GRID_IS(facts(&r, &in), 6, 4, 3);
    /* 256 threads over head_dim 128: 16 rows per CTA */
    r = rec(S2_GRID_PRE_ROWS, 256, 0, 128);
    GRID_IS(facts(&r, &in), 7, 16, 3);
    ck_assert_int_eq(s2_grid_x_div(&r), 16);
    /* 128 threads over head_dim 64: 16 rows per CTA, 1000 rows */
    r = rec(S2_GRID_ROWS, 128, 0, 64);
    GRID_IS(facts(&r, &in), 63, 1, 1);
    r = rec(S2_GRID_SEQS, 128, 0, 64);
    GRID_IS(facts(&r, &in), 3, 1, 1);
    ck_assert_int_eq(s2_grid_x_div(&r), 128);
    r = rec(S2_GRID_Q_TILE_PAIRS, 256, 0, 128);
    ck_assert_int_eq(s2_grid_x_div(&r), 2);
    r = rec(S2_GRID_Q_TILES, 256, 0, 128);
    ck_assert_int_eq(s2_grid_x_div(&r), 1);
    /* an empty extent gives an empty grid, which launches nothing */
    in.q_tiles = 0;
    GRID_IS(facts(&r, &in), 0, 16, 3);
}
END_TEST

START_TEST(occupancy_from_the_device)
{
    s2_kernel_record r = rec(S2_GRID_Q_TILES, 256, 100 * 1024, 128);
    s2_launch_dims in = {.q_tiles = 1, .heads = 1, .batch = 1};
    s2_kernel_use use = {.regs = 64, .static_smem = 0};
    s2_launch_facts f;
    /* 103424 bytes a CTA: two in an H100's 228 KB, one in an A100's 164 KB (registers allow 4, threads 8) */
    ck_assert_int_eq(s2_launch_facts_of(NULL, &r, &in, &h100, &use, &f), S2_OK);
    ck_assert_int_eq(f.ctas_per_sm, 2);
    ck_assert_int_eq(s2_launch_facts_of(NULL, &r, &in, &a100, &use, &f), S2_OK);
    ck_assert_int_eq(f.ctas_per_sm, 1);
    /* registers: 168 a thread is 5376 a warp, 64512 for 12 warps: one CTA */
    r = rec(S2_GRID_Q_TILES, 384, 0, 128);
    use = (s2_kernel_use){.regs = 168, .static_smem = 0};
    ck_assert_int_eq(s2_launch_facts_of(NULL, &r, &in, &h100, &use, &f), S2_OK);
    ck_assert_int_eq(f.ctas_per_sm, 1);
    /* threads: 1024 a CTA, 2048 an SM */
    r = rec(S2_GRID_Q_TILES, 1024, 0, 128);
    use = (s2_kernel_use){.regs = 16, .static_smem = 0};
    ck_assert_int_eq(s2_launch_facts_of(NULL, &r, &in, &h100, &use, &f), S2_OK);
    ck_assert_int_eq(f.ctas_per_sm, 2);
    /* static shared memory counts: 50 KB dynamic + 30 KB static -> two in 228 KB */
    r = rec(S2_GRID_Q_TILES, 128, 50 * 1024, 128);
    use = (s2_kernel_use){.regs = 32, .static_smem = 30 * 1024};
    ck_assert_int_eq(s2_launch_facts_of(NULL, &r, &in, &h100, &use, &f), S2_OK);
    ck_assert_int_eq(f.ctas_per_sm, 2);
    /* the block cap: a tiny kernel is held to 32 a SM, and a huge one gets at least 1 */
    r = rec(S2_GRID_Q_TILES, 32, 0, 128);
    use = (s2_kernel_use){.regs = 8, .static_smem = 0};
    ck_assert_int_eq(s2_launch_facts_of(NULL, &r, &in, &h100, &use, &f), S2_OK);
    ck_assert_int_eq(f.ctas_per_sm, 32);
    r = rec(S2_GRID_Q_TILES, 32, 300 * 1024, 128);
    ck_assert_int_eq(s2_launch_facts_of(NULL, &r, &in, &h100, &use, &f), S2_OK);
    ck_assert_int_eq(f.ctas_per_sm, 1);
}
END_TEST

START_TEST(persistent_grid)
{
    s2_kernel_record r = rec(S2_GRID_PERSISTENT, 384, 230528, 128);
    r.abi = S2_ABI_FWD_TMA_PERSISTENT;
    s2_kernel_use use = {.regs = 128, .static_smem = 0};
    s2_launch_facts f;
    s2_launch_dims in = {.n_work = 1000, .batch = 2, .q_tiles = 99};
    ck_assert_int_eq(s2_launch_facts_of(NULL, &r, &in, &h100, &use, &f), S2_OK);
    GRID_IS(f, 132, 1, 1);
    ck_assert_int_eq(f.ctas_per_sm, 1);
    /* fewer items than CTA slots: one CTA an item, and at least one */
    in.n_work = 50;
    ck_assert_int_eq(s2_launch_facts_of(NULL, &r, &in, &h100, &use, &f), S2_OK);
    GRID_IS(f, 100, 1, 1);
    in.n_work = 0;
    ck_assert_int_eq(s2_launch_facts_of(NULL, &r, &in, &h100, &use, &f), S2_OK);
    GRID_IS(f, 1, 1, 1);
    /* two CTAs an SM where registers and shared memory allow them */
    r.smem_bytes = 100 * 1024;
    use.regs = 64;
    in.n_work = 1000;
    ck_assert_int_eq(s2_launch_facts_of(NULL, &r, &in, &h100, &use, &f), S2_OK);
    GRID_IS(f, 264, 1, 1);
    /* without the device's limits it cannot be formed */
    s2_ctx *ctx = s2_ctx_new();
    ck_assert_int_eq(s2_launch_facts_of(ctx, &r, &in, NULL, NULL, &f), S2_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "persistent"));
    /* items beyond 32 bits */
    in.n_work = INT32_MAX, in.batch = 2;
    ck_assert_int_eq(s2_launch_facts_of(ctx, &r, &in, &h100, &use, &f), S2_ERR_UNSUPPORTED);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(refusals)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_launch_facts f;
    s2_kernel_use use = {.regs = 32};
    s2_kernel_record r = rec(S2_GRID_Q_TILES, 128, 0, 64);
    s2_launch_dims in = {.q_tiles = -1, .heads = 1, .batch = 1};
    ck_assert_int_eq(s2_launch_facts_of(ctx, &r, &in, NULL, NULL, &f), S2_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "negative"));
    in.q_tiles = (int64_t)UINT32_MAX + 1;
    ck_assert_int_eq(s2_launch_facts_of(ctx, &r, &in, NULL, NULL, &f), S2_ERR_UNSUPPORTED);
    in.q_tiles = 1;
    /* the device's limits and the kernel's use come together */
    ck_assert_int_eq(s2_launch_facts_of(ctx, &r, &in, &h100, NULL, &f), S2_ERR_INVALID);
    ck_assert_int_eq(s2_launch_facts_of(ctx, &r, &in, NULL, &use, &f), S2_ERR_INVALID);
    /* a rows rule without rows per CTA */
    r = rec(S2_GRID_ROWS, 128, 0, 4);
    in.rows = 10;
    ck_assert_int_eq(s2_launch_facts_of(ctx, &r, &in, NULL, NULL, &f), S2_ERR_INVALID);
    ck_assert_int_eq(s2_grid_x_div(&r), 0);
    r = rec((s2_grid_rule)S2_GRID_COUNT_, 128, 0, 64);
    ck_assert_int_eq(s2_launch_facts_of(ctx, &r, &in, NULL, NULL, &f), S2_ERR_INVALID);
    s2_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("launch_facts");
    TCase *tc = tcase_create("launch_facts");
    tcase_add_test(tc, every_grid_rule);
    tcase_add_test(tc, occupancy_from_the_device);
    tcase_add_test(tc, persistent_grid);
    tcase_add_test(tc, refusals);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
