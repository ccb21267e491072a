/* The checked decode mode (s2_attn_decode_validate, S2C_CHECK_DECODE) on the
 * fake libcuda of tests/runtime: poisoned seq_lens and block-table entries are
 * reported by index before anything launches, and a bad entry the kernel
 * never reads (a block the pattern drops, a page past seq_len) is not.  What
 * the kernel reads is computed here from the rule in tests/harness/mask_oracle.h,
 * apart from the runtime's kept-block lists and the library's predicate.
 * Also: lse over o is refused by decode and combine; a block table whose
 * kv-head rows overlap is refused by every decode entry point.  Compiles a
 * real cubin (needs ptxas or nvJitLink, else exits 77). */
#include "s2c/attention.h"
#include "s2c/attn_runtime.h"
#include "s2c/cache.h"
#include "s2c/codegen.h"
#include "s2c/layout.h"
#include "s2c/runtime.h"
#include "../runtime/fake_cuda.h"
#include "fake_driver.h"
#include "mask_oracle.h"
#include "rand_pattern.h"
#include "check_main.h"

#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *fake_path;
static fake_cuda_set_fn fake_set;
static fake_cuda_get_fn fake_get;

enum { B = 3, HK = 2, H = 4, D = 64, PS = 16, BS = 16, MAXP = 16, MAXLEN = MAXP * PS, NP = B * HK * MAXP };

typedef struct rig {
    s2_ctx *ctx;
    s2_device *dev;
    s2_pattern_set *set;
    const s2_pattern *p;
    s2_artifact *art;
    s2_attn_kernel *k;
    s2_devptr bufs[8];
    int32_t table[B * HK * MAXP], lens[B];
    s2_attn_decode_args a;
} rig;

static void use_fake(void)
{
    s2t_fake_open(fake_path, &fake_set, &fake_get);
}

/* Heads 4 over 2 kv heads, block 16, local 2, stride 4: most blocks dropped. */
static void rig_open(rig *r)
{
    use_fake();
    memset(r, 0, sizeof *r);
    r->ctx = s2_ctx_new();
    ck_assert_msg(s2_device_open(r->ctx, 0, &r->dev) == S2_OK, "%s", s2_ctx_message(r->ctx));
    s2_local_stride_args la;
    s2_local_stride_args_default(&la);
    la.name = "chk";
    la.num_heads = H;
    la.num_kv_heads = HK;
    la.block_size = BS;
    la.local_blocks = 2;
    la.vert_stride = 4;
    ck_assert_int_eq(s2_pattern_from_args(r->ctx, &la, &r->set), S2_OK);
    r->p = s2_pattern_set_get(r->set, 0);
    s2_kernel_spec spec = {.kind = S2_KERNEL_DECODE, .dtype = S2_DTYPE_BF16, .head_dim = D, .arch = S2_ARCH_SM80};
    ck_assert_msg(s2_compile_attention(r->ctx, r->p, &spec, S2_CUBIN_AUTO, &r->art) == S2_OK, "%s",
                  s2_ctx_message(r->ctx));
    fake_set("set_current", 1);
    ck_assert_msg(s2_attn_load(r->ctx, r->dev, r->art->cubin, r->art->cubin_size, NULL, S2_DTYPE_BF16, D, &r->k) ==
                      S2_OK, "%s", s2_ctx_message(r->ctx));
    size_t sizes[7] = {(size_t)B * H * D * 2, (size_t)B * H * D * 2, (size_t)B * H * 4, (size_t)NP * PS * HK * D * 2,
                       (size_t)NP * PS * HK * D * 2, sizeof r->table, sizeof r->lens};
    for (int i = 0; i < 7; i++)
        ck_assert_int_eq(s2_mem_alloc(r->ctx, r->dev, sizes[i], &r->bufs[i]), S2_OK);
    for (int i = 0; i < B * HK * MAXP; i++)   /* every row its own pages, in a shuffled order */
        r->table[i] = (int32_t)((i * 37) % NP);
    r->a = (s2_attn_decode_args){
        .batch = B, .n_new = 1, .heads = H, .kv_heads = HK, .head_dim = D, .dtype = S2_DTYPE_BF16,
        .q = r->bufs[0], .o = r->bufs[1], .lse = r->bufs[2], .k_pages = r->bufs[3], .v_pages = r->bufs[4],
        .num_pages = NP, .page_size = PS, .q_stride = {H * D, H * D, D}, .o_stride = {H * D, H * D, D},
        .k_stride = {PS * HK * D, HK * D, D}, .v_stride = {PS * HK * D, HK * D, D}, .block_table = r->bufs[5],
        .table_stride = {HK * MAXP, MAXP}, .max_pages_per_seq = MAXP, .seq_lens = r->bufs[6],
        .max_seq_len = MAXLEN, .splits = 1};
}

static void rig_upload(rig *r)
{
    ck_assert_int_eq(s2_memcpy_h2d(r->ctx, r->dev, r->a.block_table, r->table, sizeof r->table), S2_OK);
    ck_assert_int_eq(s2_memcpy_h2d(r->ctx, r->dev, r->a.seq_lens, r->lens, sizeof r->lens), S2_OK);
}

static void rig_close(rig *r)
{
    for (int i = 0; i < 8; i++)
        if (r->bufs[i])
            ck_assert_int_eq(s2_mem_free(r->ctx, r->dev, r->bufs[i]), S2_OK);
    s2_attn_kernel_free(r->k);
    s2_artifact_free(r->art);
    s2_pattern_set_free(r->set);
    s2_device_free(r->dev);
    s2_ctx_free(r->ctx);
}

/* Does the kernel read table row (b, g) at page pidx for seq_len len?  A
 * 16-token chunk starting before len in a key block some query head of
 * the group keeps for a query block holding one of the new tokens. */
static bool page_read(const s2_pattern *p, int g, int32_t len, int n_new, int64_t pidx)
{
    int group = p->heads / p->kv_heads;
    for (int64_t kpos = pidx * PS; kpos < (pidx + 1) * PS && kpos < len; kpos += 16) {
        int64_t kb = kpos / p->block_size;
        for (int64_t qpos = len - n_new; qpos < len; qpos++)
            for (int i = 0; i < group; i++)
                if (s2t_oracle_block_kept(p, g * group + i, qpos / p->block_size, kb))
                    return true;
    }
    return false;
}

static void expect_bad(rig *r, const char *needle)
{
    s2_status st = s2_attn_decode_validate(r->ctx, r->k, NULL, &r->a);
    ck_assert_msg(st == S2_ERR_DEVICE_DATA, "expected S2_ERR_DEVICE_DATA (%s), got %s: %s", needle,
                  s2_status_name(st), s2_ctx_message(r->ctx));
    ck_assert_msg(strstr(s2_ctx_message(r->ctx), needle), "message '%s' lacks '%s'", s2_ctx_message(r->ctx), needle);
}

START_TEST(validate_reports_bad_seq_lens)
{
    rig r;
    rig_open(&r);
    const int32_t bad[] = {-7, 0, MAXLEN + 1, 1 << 30, INT32_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t lens[B] = {100, 37, 250};
        memcpy(r.lens, lens, sizeof lens);
        r.lens[1] = bad[i];
        rig_upload(&r);
        char needle[64];
        snprintf(needle, sizeof needle, "seq_lens[1] is %d, outside n_new..max_seq_len (1..%d)", bad[i], MAXLEN);
        expect_bad(&r, needle);
    }
    r.lens[1] = MAXLEN;
    rig_upload(&r);
    ck_assert_msg(s2_attn_decode_validate(r.ctx, r.k, NULL, &r.a) == S2_OK, "%s", s2_ctx_message(r.ctx));
    rig_close(&r);
}
END_TEST

/* One poisoned entry at a time, at random rows, pages and lengths: reported
 * (with its index) exactly when the kernel would read it. */
START_TEST(validate_reports_exactly_the_read_entries)
{
    rig r;
    rig_open(&r);
    s2t_rng rng;
    const char *env = getenv("S2C_SEED");
    s2t_rng_seed(&rng, env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL));
    printf("validate_reports_exactly_the_read_entries: seed %llu (S2C_SEED=N repeats)\n", (unsigned long long)rng.seed);
    const int32_t poison[] = {-1, NP, INT32_MAX, INT32_MIN};
    int reported = 0, ignored = 0;
    for (int trial = 0; trial < 300; trial++) {
        for (int b = 0; b < B; b++)
            r.lens[b] = s2t_rng_int(&rng, 1, MAXLEN);
        int b = s2t_rng_int(&rng, 0, B - 1), g = s2t_rng_int(&rng, 0, HK - 1);
        int64_t pidx = s2t_rng_int(&rng, 0, MAXP - 1);
        int64_t at = (int64_t)b * HK * MAXP + (int64_t)g * MAXP + pidx;
        int32_t saved = r.table[at];
        r.table[at] = poison[trial % 4];
        rig_upload(&r);
        if (page_read(r.p, g, r.lens[b], 1, pidx)) {
            char needle[128];
            snprintf(needle, sizeof needle, "block_table entry %lld (sequence %d, kv head %d, page %lld of the row) is %d",
                     (long long)at, b, g, (long long)pidx, poison[trial % 4]);
            expect_bad(&r, needle);
            reported++;
        } else {
            ck_assert_msg(s2_attn_decode_validate(r.ctx, r.k, NULL, &r.a) == S2_OK,
                          "entry %lld (b %d, g %d, page %lld, seq_len %d) is never read: %s", (long long)at, b, g,
                          (long long)pidx, r.lens[b], s2_ctx_message(r.ctx));
            ignored++;
        }
        r.table[at] = saved;
    }
    /* both outcomes must have been exercised for the test to mean anything */
    ck_assert_msg(reported > 20 && ignored > 20, "reported %d, ignored %d", reported, ignored);
    rig_close(&r);
}
END_TEST

/* S2C_CHECK_DECODE=1 at load: s2_attn_decode validates and launches nothing
 * on bad data; without it, it launches (device data is the caller's). */
START_TEST(env_checked_decode_launches_nothing_on_bad_data)
{
    for (int checked = 0; checked < 2; checked++) {
        if (checked)
            ck_assert_int_eq(setenv("S2C_CHECK_DECODE", "1", 1), 0);
        else
            ck_assert_int_eq(unsetenv("S2C_CHECK_DECODE"), 0);
        rig r;
        rig_open(&r);
        int32_t lens[B] = {200, 64, 17};
        memcpy(r.lens, lens, sizeof lens);
        r.table[0 * HK * MAXP + 1 * MAXP + 12] = -1;   /* b 0, kv head 1, page 12: the local window of 200 */
        ck_assert(page_read(r.p, 1, 200, 1, 12));
        rig_upload(&r);
        long long launches = fake_get("launches");
        s2_status st = s2_attn_decode(r.ctx, r.k, NULL, &r.a);
        if (checked) {
            ck_assert_msg(st == S2_ERR_DEVICE_DATA, "%s", s2_ctx_message(r.ctx));
            ck_assert_ptr_nonnull(strstr(s2_ctx_message(r.ctx), "block_table entry 28 "));
            ck_assert_int_eq(fake_get("launches"), launches);
        } else {
            ck_assert_msg(st == S2_OK, "%s", s2_ctx_message(r.ctx));
            ck_assert_int_eq(fake_get("launches"), launches + 1);
        }
        r.table[0 * HK * MAXP + 1 * MAXP + 12] = 5;
        rig_upload(&r);
        launches = fake_get("launches");
        ck_assert_msg(s2_attn_decode(r.ctx, r.k, NULL, &r.a) == S2_OK, "%s", s2_ctx_message(r.ctx));
        ck_assert_int_eq(fake_get("launches"), launches + 1);
        rig_close(&r);
    }
    unsetenv("S2C_CHECK_DECODE");
}
END_TEST

/* lse written over o: refused by decode and combine, nothing launched. */
START_TEST(lse_overlapping_o_is_refused)
{
    rig r;
    rig_open(&r);
    int32_t lens[B] = {100, 37, 250};
    memcpy(r.lens, lens, sizeof lens);
    rig_upload(&r);
    long long launches = fake_get("launches");
    r.a.lse = r.a.o + 256;
    ck_assert_int_eq(s2_attn_decode(r.ctx, r.k, NULL, &r.a), S2_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(r.ctx), "lse overlaps o"));
    s2_combine_args c = {.n = 1, .batch = B, .heads = H, .head_dim = D, .seq = 1, .dtype = S2_DTYPE_BF16,
                         .o_in = {r.a.q}, .lse_in = {r.bufs[2]}, .in_stride = {H * D, H * D, D},
                         .o = r.a.o, .lse = r.a.o + 256, .o_stride = {H * D, H * D, D}};
    ck_assert_int_eq(s2_combine(r.ctx, r.k, NULL, &c), S2_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(r.ctx), "lse overlaps o"));
    ck_assert_int_eq(fake_get("launches"), launches);
    c.lse = 0;
    /* sinks: 4-byte aligned, apart from the outputs */
    c.sinks = r.bufs[2] + 2;
    ck_assert_int_eq(s2_combine(r.ctx, r.k, NULL, &c), S2_ERR_ALIGNMENT);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(r.ctx), "sinks 4-byte"));
    c.sinks = r.a.o + 64;
    ck_assert_int_eq(s2_combine(r.ctx, r.k, NULL, &c), S2_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(r.ctx), "sinks overlap an output"));
    ck_assert_int_eq(fake_get("launches"), launches);
    c.sinks = 0;   /* and the same arguments without the overlap launch */
    ck_assert_msg(s2_combine(r.ctx, r.k, NULL, &c) == S2_OK, "%s", s2_ctx_message(r.ctx));
    r.a.lse = r.bufs[2];
    ck_assert_msg(s2_attn_decode(r.ctx, r.k, NULL, &r.a) == S2_OK, "%s", s2_ctx_message(r.ctx));
    ck_assert_int_eq(fake_get("launches"), launches + 2);
    rig_close(&r);
}
END_TEST

/* A kv-head stride below max_pages_per_seq makes the rows of a sequence's
 * kv heads overlap (kv head 1 would read kv head 0's pages): refused by
 * every decode entry point, with nothing launched.  The batch stride is
 * kept large enough that only this check can refuse it; MAXP and 0 (one
 * row shared by the kv heads) are accepted. */
START_TEST(table_kv_head_stride_below_max_pages_is_refused)
{
    rig r;
    rig_open(&r);
    int32_t lens[B] = {100, 37, 250};
    memcpy(r.lens, lens, sizeof lens);
    rig_upload(&r);
    const int64_t bad[] = {MAXP - 1, 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r.a.table_stride[1] = bad[i];
        ck_assert_int_ge(r.a.table_stride[0], bad[i] * (HK - 1) + MAXP);
        char needle[96];
        snprintf(needle, sizeof needle, "block_table: kv-head stride %lld below max_pages_per_seq %d", (long long)bad[i],
                 MAXP);
        long long launches = fake_get("launches");
        int splits = 0;
        size_t ws = 0;
        s2_status got[4] = {s2_attn_decode(r.ctx, r.k, NULL, &r.a), s2_attn_decode_validate(r.ctx, r.k, NULL, &r.a),
                            s2_attn_decode_splits(r.ctx, r.k, &r.a, &splits),
                            s2_attn_decode_workspace(r.ctx, r.k, &r.a, &ws)};
        for (int e = 0; e < 4; e++)
            ck_assert_msg(got[e] == S2_ERR_STRIDE, "stride %lld, entry point %d: %s", (long long)bad[i], e,
                          s2_status_name(got[e]));
        ck_assert_msg(strstr(s2_ctx_message(r.ctx), needle), "message '%s' lacks '%s'", s2_ctx_message(r.ctx), needle);
        ck_assert_int_eq(fake_get("launches"), launches);
    }
    const int64_t good[] = {MAXP, 0};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        r.a.table_stride[1] = good[i];
        long long launches = fake_get("launches");
        ck_assert_msg(s2_attn_decode_validate(r.ctx, r.k, NULL, &r.a) == S2_OK, "%s", s2_ctx_message(r.ctx));
        ck_assert_msg(s2_attn_decode(r.ctx, r.k, NULL, &r.a) == S2_OK, "%s", s2_ctx_message(r.ctx));
        ck_assert_int_eq(fake_get("launches"), launches + 1);
    }
    rig_close(&r);
}
END_TEST

static void expect_status(rig *r, s2_attn_kernel *k, const s2_attn_decode_args *a, s2_status want, const char *needle)
{
    long long launches = fake_get("launches");
    s2_status st = s2_attn_decode(r->ctx, k, NULL, a);
    ck_assert_msg(st == want, "expected %s (%s), got %s: %s", s2_status_name(want), needle, s2_status_name(st),
                  s2_ctx_message(r->ctx));
    ck_assert_msg(strstr(s2_ctx_message(r->ctx), needle), "message '%s' lacks '%s'", s2_ctx_message(r->ctx), needle);
    ck_assert_int_eq(fake_get("launches"), launches);
}

/* fp8 pages: the arguments' page dtype must be the kernel's either way, scales
 * go only to an fp8 kernel, inside an allocation and 4-byte aligned, and fp8
 * page strides are multiples of 16; sm_80 is refused at compile time. */
START_TEST(fp8_pages_args_checked)
{
    rig r;
    rig_open(&r);
    int32_t lens[B] = {100, 37, 250};
    memcpy(r.lens, lens, sizeof lens);
    rig_upload(&r);
    ck_assert_int_eq(s2_mem_alloc(r.ctx, r.dev, HK * sizeof(float), &r.bufs[7]), S2_OK);
    s2_attn_decode_args a = r.a;
    a.kv_dtype = S2_DTYPE_E4M3;
    expect_status(&r, r.k, &a, S2_ERR_DTYPE, "k_pages / v_pages are e4m3, but kernel");
    a = r.a, a.k_scale = r.bufs[7];
    expect_status(&r, r.k, &a, S2_ERR_INVALID, "k_scale / v_scale are given, but kernel");

    s2_kernel_spec spec = {.kind = S2_KERNEL_DECODE, .dtype = S2_DTYPE_BF16, .head_dim = D, .arch = S2_ARCH_SM80,
                           .kv_dtype = S2_DTYPE_E4M3};
    s2_artifact *art = NULL;
    ck_assert_int_eq(s2_compile_attention(r.ctx, r.p, &spec, S2_CUBIN_AUTO, &art), S2_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(s2_ctx_message(r.ctx), "needs sm_90"), "%s", s2_ctx_message(r.ctx));
    spec.arch = S2_ARCH_SM90A;
    ck_assert_msg(s2_compile_attention(r.ctx, r.p, &spec, S2_CUBIN_AUTO, &art) == S2_OK, "%s", s2_ctx_message(r.ctx));
    s2_attn_kernel *k8 = NULL;
    ck_assert_msg(s2_attn_load(r.ctx, r.dev, art->cubin, art->cubin_size, NULL, S2_DTYPE_BF16, D, &k8) == S2_OK, "%s",
                  s2_ctx_message(r.ctx));
    ck_assert_msg(strstr(s2_attn_kernel_desc(k8)->name, "_bf16_kve4m3_d64"), "%s", s2_attn_kernel_desc(k8)->name);
    ck_assert_int_eq(s2_attn_kernel_desc(k8)->spec.kv_dtype, S2_DTYPE_E4M3);
    a = r.a;
    expect_status(&r, k8, &a, S2_ERR_DTYPE, "k_pages / v_pages are bf16, but kernel");
    a.kv_dtype = S2_DTYPE_E4M3, a.k_scale = r.bufs[7];
    long long launches = fake_get("launches");
    ck_assert_msg(s2_attn_decode(r.ctx, k8, NULL, &a) == S2_OK, "%s", s2_ctx_message(r.ctx));
    ck_assert_int_eq(fake_get("launches"), launches + 1);
    s2_attn_decode_args b = a;
    b.v_scale = r.bufs[7] + 2;
    expect_status(&r, k8, &b, S2_ERR_ALIGNMENT, "v_scale must be 4-byte aligned");
    b = a, b.v_scale = r.bufs[7] + 4;   /* kv_heads floats from there run past the allocation */
    long long before = fake_get("launches");
    ck_assert_int_ne(s2_attn_decode(r.ctx, k8, NULL, &b), S2_OK);
    ck_assert_msg(strstr(s2_ctx_message(r.ctx), "v_scale"), "%s", s2_ctx_message(r.ctx));
    ck_assert_int_eq(fake_get("launches"), before);
    b = a, b.k_stride[1] = HK * D + 8;  /* a multiple of 8, not of 16 */
    b.k_stride[0] = PS * b.k_stride[1];
    expect_status(&r, k8, &b, S2_ERR_ALIGNMENT, "k_pages: seq stride 136 is not a multiple of 16");
    s2_attn_kernel_free(k8);
    s2_artifact_free(art);
    rig_close(&r);
}
END_TEST

/* Decode inside stream capture: S2_ERR_CAPTURE until its kept-block lists
 * exist (a launch before the capture builds them), then it launches. */
START_TEST(decode_capture_needs_its_lists)
{
    rig r;
    rig_open(&r);
    int32_t lens[B] = {100, 37, 250};
    memcpy(r.lens, lens, sizeof lens);
    rig_upload(&r);
    long long launches = fake_get("launches");
    void *stream = (void *)(uintptr_t)0x80;
    fake_set("capturing", 1);
    ck_assert_int_eq(s2_attn_decode(r.ctx, r.k, stream, &r.a), S2_ERR_CAPTURE);
    ck_assert_int_eq(fake_get("launches"), launches);
    fake_set("capturing", 0);
    ck_assert_msg(s2_attn_decode(r.ctx, r.k, stream, &r.a) == S2_OK, "%s", s2_ctx_message(r.ctx));
    fake_set("capturing", 1);
    ck_assert_msg(s2_attn_decode(r.ctx, r.k, stream, &r.a) == S2_OK, "%s", s2_ctx_message(r.ctx));
    ck_assert_int_eq(fake_get("launches"), launches + 2);
    fake_set("capturing", 0);
    rig_close(&r);
}
END_TEST

int main(int argc, char **argv)
{
    fake_path = s2t_fake_libcuda_arg(argc, argv);
    Suite *s = suite_create("decode_check");
    TCase *t = tcase_create("validate");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, validate_reports_bad_seq_lens);
    tcase_add_test(t, validate_reports_exactly_the_read_entries);
    tcase_add_test(t, env_checked_decode_launches_nothing_on_bad_data);
    tcase_add_test(t, lse_overlapping_o_is_refused);
    tcase_add_test(t, table_kv_head_stride_below_max_pages_is_refused);
    tcase_add_test(t, decode_capture_needs_its_lists);
    tcase_add_test(t, fp8_pages_args_checked);
    suite_add_tcase(s, t);
    return s2t_run_suite(s);
}
