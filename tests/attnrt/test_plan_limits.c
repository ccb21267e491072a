/* Plans and schedules of huge shapes (attn_runtime.h, S2_ATTN_MAX_SCHEDULE_BYTES)
 * on the fake libcuda, with kernels whose pattern allows 2^31 tokens:
 *  - declaring a forward, backward or decode plan of 2^31 - 1 tokens is
 *    refused with S2_ERR_SHAPE, and so is the decode kernel's own path
 *    (s2_attn_decode_splits builds its lists), at once;
 *  - size queries over a million tokens answer from counts: no schedule is
 *    built, so they take a fraction of the time and memory building does
 *    (test_plan shows that prepare takes at most the answer).
 * Each runs in a child under an address-space limit of what the process
 * holds plus 256 MB, and a time limit (tests/harness/bounded.h).
 * Usage: test_plan_limits FAKE_LIB (exits 77 without ptxas or nvJitLink). */
#include "../attn/patterns.h"
#include "../harness/bounded.h"
#include "s2c/attention.h"
#include "s2c/attn_runtime.h"
#include "s2c/cache.h"
#include "s2c/codegen.h"
#include "check_main.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *fake_path;
static s2_artifact *fwd_art, *bwd_art, *dec_art;

enum { D = 64, H = 32, HK = 8, DH = 4, DHK = 2 };
static const int64_t HUGE = INT32_MAX, MILLION = INT64_C(1) << 20;
static const int64_t BUDGET = INT64_C(256) << 20;

/* /proc/self/statm: the address space (field 0) or resident set (field 1), in bytes. */
static int64_t statm(int field)
{
    long long v[2] = {0, 0};
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%lld %lld", &v[0], &v[1]) != 2)
            v[0] = v[1] = 0;
        fclose(f);
    }
    return (int64_t)v[field] * sysconf(_SC_PAGESIZE);
}

typedef struct child {
    s2_ctx *ctx;
    s2_device *dev;
    s2_attn_kernel *k;
    s2_attn_plan *plan;
} child;

/* In the child: the device, the kernel of art, a plan.  0 or a failure code. */
static int child_open(child *c, const s2_artifact *art)
{
    memset(c, 0, sizeof *c);
    c->ctx = s2_ctx_new();
    if (s2_device_open(c->ctx, 0, &c->dev) != S2_OK ||
        s2_attn_load(c->ctx, c->dev, art->cubin, art->cubin_size, NULL, S2_DTYPE_BF16, D, &c->k) != S2_OK ||
        s2_attn_plan_new(c->ctx, c->k, &c->plan) != S2_OK) {
        fprintf(stderr, "open: %s\n", s2_ctx_message(c->ctx));
        return 2;
    }
    return 0;
}

static void child_close(child *c)
{
    s2_attn_plan_free(c->plan);
    s2_attn_kernel_free(c->k);
    s2_device_free(c->dev);
    s2_ctx_free(c->ctx);
}

/* A refusal for the cap, naming it. */
static int refused(const child *c, s2_status st, const char *what)
{
    if (st == S2_ERR_SHAPE && strstr(s2_ctx_message(c->ctx), "S2_ATTN_MAX_SCHEDULE_BYTES"))
        return 0;
    fprintf(stderr, "%s: %s: %s\n", what, s2_status_name(st), s2_ctx_message(c->ctx));
    return 3;
}

static s2_attn_decode_args decode_shape(int64_t max_seq_len)
{
    int64_t pages = (max_seq_len + 15) / 16;
    return (s2_attn_decode_args){.batch = 1, .n_new = 1, .heads = DH, .kv_heads = DHK, .head_dim = D,
                                 .dtype = S2_DTYPE_BF16, .num_pages = INT32_MAX, .page_size = 16,
                                 .max_pages_per_seq = pages, .max_seq_len = max_seq_len, .splits = 2,
                                 .table_stride = {pages, 0}, .q_stride = {DH * D, DH * D, D},
                                 .o_stride = {DH * D, DH * D, D}, .k_stride = {16 * DHK * D, DHK * D, D},
                                 .v_stride = {16 * DHK * D, DHK * D, D}};
}

static int huge_child(void *arg)
{
    (void)arg;
    child c;
    int rc = child_open(&c, fwd_art);
    s2_attn_fwd_args f = {.batch = 1, .q_len = HUGE, .kv_len = HUGE, .heads = H, .kv_heads = HK, .head_dim = D,
                          .dtype = S2_DTYPE_BF16};
    if (!rc)
        rc = refused(&c, s2_attn_plan_add_forward(c.ctx, c.plan, &f), "forward");
    /* one query tile over 2^31 - 1 keys is fine: the bound counts entries, not lengths */
    f.q_len = 128;
    size_t bytes = 0;
    if (!rc && (s2_attn_plan_add_forward(c.ctx, c.plan, &f) != S2_OK ||
                s2_attn_plan_device_bytes(c.ctx, c.plan, &bytes) != S2_OK || bytes == 0 ||
                bytes > S2_ATTN_MAX_SCHEDULE_BYTES)) {
        fprintf(stderr, "128 queries: %s (%zu bytes)\n", s2_ctx_message(c.ctx), bytes);
        rc = 4;
    }
    child_close(&c);
    if (!rc && !(rc = child_open(&c, bwd_art))) {
        s2_attn_bwd_args b = {.batch = 1, .q_len = HUGE, .kv_len = HUGE, .heads = H, .kv_heads = HK, .head_dim = D,
                              .dtype = S2_DTYPE_BF16};
        rc = refused(&c, s2_attn_plan_add_backward(c.ctx, c.plan, &b), "backward");
        child_close(&c);
    }
    if (!rc && !(rc = child_open(&c, dec_art))) {
        s2_attn_decode_args a = decode_shape(HUGE);
        rc = refused(&c, s2_attn_plan_add_decode(c.ctx, c.plan, &a), "decode");
        /* the kernel's own path builds the same lists: refused the same way */
        a.q = a.o = a.k_pages = a.v_pages = 256, a.block_table = a.seq_lens = 256;
        int splits = 0;
        if (!rc)
            rc = refused(&c, s2_attn_decode_splits(c.ctx, c.k, &a, &splits), "decode splits");
        child_close(&c);
    }
    return rc;
}

START_TEST(plans_of_2_31_tokens_are_refused)
{
    s2t_bounded b;
    int64_t limit = statm(0) + BUDGET;
    ck_assert_int_eq(s2t_run_bounded(huge_child, NULL, limit, 60, &b), 0);
    ck_assert_msg(b.exit_code == 0, "child exit %d", b.exit_code);
    ck_assert_msg(b.seconds < 20.0, "refusing took %.1f s", b.seconds);
    ck_assert_int_le(b.peak_kib, (statm(1) + BUDGET) / 1024 + (S2T_ASAN ? 512 * 1024 : 0));
}
END_TEST

typedef struct million {
    s2_status st[3];
    size_t bytes[3];
} million;

/* Where the child's answers come back. */
static million *mmap_shared(void)
{
    void *p = mmap(NULL, sizeof(million), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(p != MAP_FAILED);
    return memset(p, 0, sizeof(million));
}

/* A million-token forward and backward plan and a quarter-million-token
 * decode plan, each asked its size. */
static int million_child(void *arg)
{
    million *m = arg;
    const s2_artifact *arts[3] = {fwd_art, bwd_art, dec_art};
    for (int i = 0; i < 3; i++) {
        child c;
        int rc = child_open(&c, arts[i]);
        if (rc)
            return rc;
        s2_status st;
        if (i == 0) {
            s2_attn_fwd_args f = {.batch = 1, .q_len = MILLION, .kv_len = MILLION, .heads = H, .kv_heads = HK,
                                  .head_dim = D, .dtype = S2_DTYPE_BF16};
            st = s2_attn_plan_add_forward(c.ctx, c.plan, &f);
        } else if (i == 1) {
            s2_attn_bwd_args b = {.batch = 1, .q_len = MILLION, .kv_len = MILLION, .heads = H, .kv_heads = HK,
                                  .head_dim = D, .dtype = S2_DTYPE_BF16};
            st = s2_attn_plan_add_backward(c.ctx, c.plan, &b);
        } else {
            s2_attn_decode_args a = decode_shape(MILLION / 4);
            st = s2_attn_plan_add_decode(c.ctx, c.plan, &a);
        }
        if (st == S2_OK)
            st = s2_attn_plan_device_bytes(c.ctx, c.plan, &m->bytes[i]);
        m->st[i] = st;
        fprintf(stderr, "kernel %d: %s %s, %zu bytes\n", i, s2_status_name(st), s2_ctx_message(c.ctx), m->bytes[i]);
        child_close(&c);
    }
    return 0;
}

/* Size queries of a million tokens, answered in bounded time and memory
 * (building the forward alone took 8 s and 2.4 GB): the forward's bytes
 * (about 4 GiB, the wide variant's schedule included) are above what its
 * query tiles alone need and within the cap; the backward's kv-grouped
 * lists (one per query head, stripes read by every later query tile: about
 * 17 GiB) are over the cap, refused.  The decode lists of a quarter million
 * (one in 4 key blocks of 16 per list: about 270 MiB) are answered too. */
START_TEST(million_token_size_query_is_bounded)
{
    million *m = mmap_shared();
    s2t_bounded b;
    int64_t limit = statm(0) + BUDGET;
    ck_assert_int_eq(s2t_run_bounded(million_child, m, limit, 60, &b), 0);
    ck_assert_msg(b.exit_code == 0, "child exit %d", b.exit_code);
    ck_assert_msg(b.seconds < 10.0, "the queries took %.1f s", b.seconds);
    ck_assert_int_le(b.peak_kib, (statm(1) + BUDGET) / 1024 + (S2T_ASAN ? 512 * 1024 : 0));
    const size_t lists = (size_t)(MILLION / 128) * 16;
    ck_assert_int_eq(m->st[0], S2_OK);
    ck_assert_msg(m->bytes[0] > lists && m->bytes[0] <= S2_ATTN_MAX_SCHEDULE_BYTES, "forward %zu", m->bytes[0]);
    ck_assert_int_eq(m->st[1], S2_ERR_SHAPE);
    ck_assert_int_eq(m->st[2], S2_OK);
    const int64_t blocks = MILLION / 4 / 16;
    ck_assert_msg(m->bytes[2] > (size_t)(blocks * blocks / 8) * 8 && m->bytes[2] <= S2_ATTN_MAX_SCHEDULE_BYTES,
                  "decode %zu", m->bytes[2]);
    munmap(m, sizeof *m);
}
END_TEST

static s2_artifact *compile(const s2_pattern *p, s2_kernel_kind kind, s2_arch arch)
{
    s2_kernel_spec spec = {.kind = kind, .dtype = S2_DTYPE_BF16, .head_dim = D, .arch = arch};
    return s2t_compile_or_exit(p, &spec);
}

int main(int argc, char **argv)
{
    fake_path = s2t_fake_libcuda_arg(argc, argv);
    if (setenv("S2C_LIBCUDA", fake_path, 1) != 0)
        return 1;
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = NULL, *dset = NULL;
    s2_local_stride_args la;
    attn_pattern_args(3, &la);   /* GQA 32/8, block 32, up to 2^31 tokens */
    la.max_seq_len = S2_MAX_SEQ_LEN;
    if (s2_pattern_from_args(ctx, &la, &set) != S2_OK)
        return 1;
    s2_local_stride_args_default(&la);
    la.name = "dec";
    la.num_heads = DH;
    la.num_kv_heads = DHK;
    la.block_size = 16;
    la.local_blocks = 2;
    la.vert_stride = 4;
    if (s2_pattern_from_args(ctx, &la, &dset) != S2_OK)
        return 1;
    s2_ctx_free(ctx);
    fwd_art = compile(s2_pattern_set_get(set, 0), S2_KERNEL_FWD, S2_ARCH_SM90A);
    bwd_art = compile(s2_pattern_set_get(set, 0), S2_KERNEL_BWD, S2_ARCH_SM90A);
    dec_art = compile(s2_pattern_set_get(dset, 0), S2_KERNEL_DECODE, S2_ARCH_SM80);

    Suite *s = suite_create("plan_limits");
    TCase *tc_limits = tcase_create("plan_limits");
    tcase_set_timeout(tc_limits, 120);
    tcase_add_test(tc_limits, plans_of_2_31_tokens_are_refused);
    tcase_add_test(tc_limits, million_token_size_query_is_bounded);
    suite_add_tcase(s, tc_limits);
    int failed = s2t_run_suite(s);
    s2_artifact_free(fwd_art);
    s2_artifact_free(bwd_art);
    s2_artifact_free(dec_art);
    s2_pattern_set_free(set);
    s2_pattern_set_free(dset);
    return failed ? 1 : 0;
}
