/* CPU tests of the attention runtime (runtime/attn_*.c) and the JIT
 * (jit/jit.c), on real generated cubins and the fake libcuda of
 * tests/runtime (fake_cuda.c): module loading and kernel lookup from the
 * manifest, every argument check of s2_attn_forward (nothing launched, no
 * schedule uploaded), the launch shape and the schedule cache, and the JIT's
 * cache hit / miss / corrupt-rebuild flow, entries whose manifest is not the
 * request's (another spec, a tampered record) and untrusted cache directories.
 *
 * The cubins are compiled once in the parent (sm_90a, the fake's cc 9.0);
 * each test forks, points S2C_LIBCUDA at the fake and loads it itself.
 * Usage: test_attnrt FAKE_LIB */
#include "../attn/patterns.h"
#include "../runtime/fake_cuda.h"
#include "fake_driver.h"
#include "kernel_abi.h"
#include "rt_cuda.h"
#include "s2c/attn_runtime.h"
#include "s2c/cache.h"
#include "s2c/codegen.h"
#include "s2c/jit.h"
#include "s2c/layout.h"
#include "check_main.h"

#include <check.h>
#include <cuda.h> /* only for the fake's CUresult values */
#include <dlfcn.h>
#include <ftw.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *fake_path;
static fake_cuda_set_fn fake_set;
static fake_cuda_get_fn fake_get;

/* Kernel A: GQA 32/8, block 32, max_seq_len 4096, bf16 d64.
 * Kernel B: causal block 64, unbounded, f16 d128. */
typedef struct built {
    s2_pattern_set *set;
    const s2_pattern *p;
    s2_artifact *art;
} built;
static built A, B;
static char tmp_root[2048];

static void use_fake(void)
{
    s2t_fake_open(fake_path, &fake_set, &fake_get);
}

static void assert_msg_has(const s2_ctx *ctx, const char *needle)
{
    ck_assert_msg(strstr(s2_ctx_message(ctx), needle) != NULL, "message \"%s\" lacks \"%s\"", s2_ctx_message(ctx),
                  needle);
}

static s2_device *open_fake(s2_ctx *ctx)
{
    use_fake();
    s2_device *dev = NULL;
    ck_assert_msg(s2_device_open(ctx, 0, &dev) == S2_OK, "%s", s2_ctx_message(ctx));
    return dev;
}

static s2_attn_module *load(s2_ctx *ctx, s2_device *dev, const built *b)
{
    s2_attn_module *mod = NULL;
    s2_status st = s2_attn_module_load(ctx, dev, b->art->cubin, b->art->cubin_size, &mod);
    ck_assert_msg(st == S2_OK, "%s: %s", s2_status_name(st), s2_ctx_message(ctx));
    return mod;
}

/* ---- module loading and lookup --------------------------------------------- */

START_TEST(module_lists_and_finds_kernels)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = open_fake(ctx);
    s2_attn_module *mod = load(ctx, dev, &A);
    ck_assert_int_eq(fake_get("modules_loaded"), 1);
    ck_assert_int_eq(s2_attn_module_num_kernels(mod), 1);
    s2_attn_kernel *k0 = s2_attn_module_kernel_at(mod, 0);
    ck_assert_ptr_nonnull(k0);
    ck_assert_ptr_null(s2_attn_module_kernel_at(mod, 1));
    const s2_manifest_kernel *d = s2_attn_kernel_desc(k0);
    ck_assert_str_eq(d->name, A.art->kernels[0].name);
    ck_assert_str_eq(d->pattern, "gqa-32/8");
    ck_assert_int_eq(d->threads, A.art->threads_per_block);
    ck_assert_int_eq(d->smem_bytes, A.art->smem_bytes);
    ck_assert_int_eq(d->spec.block_m, A.art->spec.block_m);
    ck_assert_int_eq(d->spec.block_n, A.art->spec.block_n);
    ck_assert_int_eq(d->spec.num_stages, A.art->spec.num_stages);
    const s2_pattern *p = s2_attn_kernel_pattern(k0);
    ck_assert_int_eq(p->heads, 32);
    ck_assert_int_eq(p->kv_heads, 8);
    ck_assert_int_eq(p->block_size, 32);
    ck_assert_int_eq(s2_attn_kernel_max_kv_len(k0), 4096);
    ck_assert_int_eq(s2_manifest_num_patterns(s2_attn_module_manifest(mod)), 1);
    ck_assert_ptr_nonnull(s2_attn_kernel_cufunction(k0));

    s2_attn_kernel *k = NULL;
    ck_assert_int_eq(s2_attn_find(ctx, mod, "gqa-32/8", S2_DTYPE_BF16, 64, &k), S2_OK);
    ck_assert_ptr_eq(k, k0);
    k = NULL;
    ck_assert_int_eq(s2_attn_find(ctx, mod, NULL, S2_DTYPE_BF16, 64, &k), S2_OK);
    ck_assert_ptr_eq(k, k0);
    ck_assert_int_eq(s2_attn_find(ctx, mod, "gqa-32/8", S2_DTYPE_F16, 64, &k), S2_ERR_NOT_FOUND);
    ck_assert_ptr_null(k);
    assert_msg_has(ctx, A.art->kernels[0].name);
    ck_assert_int_eq(s2_attn_find(ctx, mod, "gqa-32/8", S2_DTYPE_BF16, 128, &k), S2_ERR_NOT_FOUND);
    ck_assert_int_eq(s2_attn_find(ctx, mod, "other", S2_DTYPE_BF16, 64, &k), S2_ERR_NOT_FOUND);
    assert_msg_has(ctx, "'other'");
    ck_assert_int_eq(s2_attn_find(ctx, NULL, NULL, S2_DTYPE_BF16, 64, &k), S2_ERR_NULL_ARG);

    /* a borrowed kernel is not freed on its own */
    s2_attn_kernel_free(k0);
    ck_assert_int_eq(fake_get("modules_unloaded"), 0);
    s2_attn_module_free(mod);
    ck_assert_int_eq(fake_get("modules_unloaded"), 1);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

/* One module per arch: the newest one that runs on the device is loaded
 * (sm_90a on 9.0, sm_80 on 8.x and not on 9.0), none on 7.5. */
START_TEST(load_best_picks_the_arch)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_kernel_spec spec = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = 64, .arch = S2_ARCH_SM80};
    s2_artifact *art80 = NULL;
    ck_assert_msg(s2_compile_attention(ctx, A.p, &spec, S2_CUBIN_AUTO, &art80) == S2_OK, "%s", s2_ctx_message(ctx));
    char p80[2200], p90[2200];
    snprintf(p80, sizeof p80, "%s/m.sm_80.cubin", tmp_root);
    snprintf(p90, sizeof p90, "%s/m.sm_90a.cubin", tmp_root);
    const s2_artifact *arts[2] = {art80, A.art};
    const char *paths[2] = {p80, p90};
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(paths[i], "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(arts[i]->cubin, 1, arts[i]->cubin_size, f), arts[i]->cubin_size);
        fclose(f);
    }
    const struct { int major, minor, want; } cases[] = {{9, 0, S2_ARCH_SM90A}, {8, 0, S2_ARCH_SM80},
                                                       {8, 9, S2_ARCH_SM80}, {7, 5, -1}, {10, 0, -1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        use_fake();
        fake_set("cc_major", cases[c].major);
        fake_set("cc_minor", cases[c].minor);
        s2_device *dev = open_fake(ctx);
        s2_attn_module *mod = NULL;
        s2_status st = s2_attn_module_load_best(ctx, dev, paths, 2, &mod);
        if (cases[c].want < 0) {
            ck_assert_int_eq(st, S2_ERR_UNSUPPORTED);
            assert_msg_has(ctx, "m.sm_80.cubin (sm_80)");
            assert_msg_has(ctx, "m.sm_90a.cubin (sm_90a)");
            ck_assert_ptr_null(mod);
        } else {
            ck_assert_msg(st == S2_OK, "%s", s2_ctx_message(ctx));
            ck_assert_int_eq(s2_manifest_arch(s2_attn_module_manifest(mod)), cases[c].want);
        }
        s2_attn_module_free(mod);
        s2_device_free(dev);
    }
    fake_set("cc_major", 9);
    fake_set("cc_minor", 0);
    s2_artifact_free(art80);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(standalone_kernel_and_files)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = open_fake(ctx);
    s2_attn_kernel *k = NULL;
    ck_assert_int_eq(s2_attn_load(ctx, dev, B.art->cubin, B.art->cubin_size, "causal_l8v16", S2_DTYPE_F16, 128, &k),
                     S2_OK);
    ck_assert_int_eq(s2_attn_kernel_max_kv_len(k), INT32_MAX);
    s2_attn_kernel_free(k);
    ck_assert_int_eq(fake_get("modules_unloaded"), 1);
    /* a lookup that fails unloads what it loaded */
    ck_assert_int_eq(s2_attn_load(ctx, dev, B.art->cubin, B.art->cubin_size, NULL, S2_DTYPE_BF16, 128, &k),
                     S2_ERR_NOT_FOUND);
    ck_assert_ptr_null(k);
    ck_assert_int_eq(fake_get("modules_unloaded"), 2);

    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/b.cubin", tmp_root);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(B.art->cubin, 1, B.art->cubin_size, f), B.art->cubin_size);
    fclose(f);
    s2_attn_module *mod = NULL;
    ck_assert_msg(s2_attn_module_load_file(ctx, dev, path, &mod) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_int_eq(s2_attn_module_num_kernels(mod), 1);
    s2_attn_module_free(mod);
    snprintf(path, sizeof path, "%s/missing.cubin", tmp_root);
    ck_assert_int_eq(s2_attn_module_load_file(ctx, dev, path, &mod), S2_ERR_IO);
    assert_msg_has(ctx, "missing.cubin");

    /* images without a manifest are refused before the driver sees them */
    long long loaded = fake_get("modules_loaded");
    static const char ptx[] = ".version 8.3\n.target sm_90a\n.address_size 64\n";
    ck_assert_int_ne(s2_attn_module_load(ctx, dev, ptx, sizeof ptx - 1, &mod), S2_OK);
    assert_msg_has(ctx, "not a generated attention cubin");
    ck_assert_ptr_null(mod);
    /* a cubin whose manifest was cut short */
    uint8_t *copy = malloc(A.art->cubin_size);
    memcpy(copy, A.art->cubin, A.art->cubin_size);
    const char *text;
    size_t len;
    ck_assert_int_eq(s2_cubin_find_manifest(ctx, copy, A.art->cubin_size, &text, &len), S2_OK);
    char *end = strstr((char *)text, "\nend");
    ck_assert_ptr_nonnull(end);
    end[1] = 'x';
    ck_assert_int_eq(s2_attn_module_load(ctx, dev, copy, A.art->cubin_size, &mod), S2_ERR_PARSE);
    free(copy);
    ck_assert_int_eq(fake_get("modules_loaded"), loaded);
    ck_assert_int_eq(s2_attn_module_load(ctx, NULL, A.art->cubin, A.art->cubin_size, &mod), S2_ERR_NULL_ARG);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

/* ---- argument checks --------------------------------------------------------- */

typedef struct fixture {
    s2_ctx *ctx;
    s2_device *dev;
    s2_attn_module *mod;
    s2_attn_kernel *k;
    s2_devptr q, kk, v, o, lse;
    s2_attn_fwd_args a;
} fixture;

enum { FB = 2, FSQ = 256, FSK = 256, FH = 32, FHK = 8, FD = 64 };

static void fixture_init(fixture *f)
{
    memset(f, 0, sizeof *f);
    f->ctx = s2_ctx_new();
    f->dev = open_fake(f->ctx);
    f->mod = load(f->ctx, f->dev, &A);
    f->k = s2_attn_module_kernel_at(f->mod, 0);
    size_t qb = (size_t)FB * FSQ * FH * FD * 2, kb = (size_t)FB * FSK * FHK * FD * 2;
    ck_assert_int_eq(s2_mem_alloc(f->ctx, f->dev, qb, &f->q), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(f->ctx, f->dev, kb, &f->kk), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(f->ctx, f->dev, kb, &f->v), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(f->ctx, f->dev, qb, &f->o), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(f->ctx, f->dev, (size_t)FB * FH * FSQ * 4, &f->lse), S2_OK);
    f->a = (s2_attn_fwd_args){.batch = FB, .q_len = FSQ, .kv_len = FSK, .heads = FH, .kv_heads = FHK,
                              .head_dim = FD, .dtype = S2_DTYPE_BF16, .q = f->q, .k = f->kk, .v = f->v,
                              .o = f->o, .lse = f->lse};
    s2_attn_fwd_args_bshd(&f->a);
}

static void fixture_free(fixture *f)
{
    s2_devptr *ps[] = {&f->q, &f->kk, &f->v, &f->o, &f->lse};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(s2_mem_free(f->ctx, f->dev, *ps[i]), S2_OK);
    s2_attn_module_free(f->mod);
    ck_assert_int_eq(fake_get("allocs_live"), 0);
    s2_device_free(f->dev);
    s2_ctx_free(f->ctx);
}

typedef enum { M_Q0, M_K0, M_V0, M_O0, M_QMIS, M_OMIS, M_LSEMIS, M_DTYPE, M_HDIM, M_HEADS, M_KVHEADS, M_BATCH0,
               M_BATCHBIG, M_Q0LEN, M_KV0LEN, M_QGTKV, M_SEQMAX, M_QSTRIDE, M_KSTRIDE, M_VNEG, M_OZERO,
               M_OOVERLAP, M_SCALE, M_OVERFLOW, M_HOST, M_FOREIGN, M_NOTALLOC, M_SMALL, M_LSESMALL,
               M_LSEO, M_LSESMALL_O, M_COUNT } mutation;

typedef struct bad_case {
    const char *what;
    s2_status want;
    const char *msg;
} bad_case;

static const bad_case bad_cases[M_COUNT] = {
    [M_Q0] = {"q null", S2_ERR_NULL_ARG, "q is a null pointer"},
    [M_K0] = {"k null", S2_ERR_NULL_ARG, "k is a null pointer"},
    [M_V0] = {"v null", S2_ERR_NULL_ARG, "v is a null pointer"},
    [M_O0] = {"o null", S2_ERR_NULL_ARG, "o is a null pointer"},
    [M_QMIS] = {"q misaligned", S2_ERR_ALIGNMENT, "q: 0x"},
    [M_OMIS] = {"o misaligned", S2_ERR_ALIGNMENT, "not 16-byte aligned"},
    [M_LSEMIS] = {"lse misaligned", S2_ERR_ALIGNMENT, "not 4-byte aligned"},
    [M_DTYPE] = {"dtype", S2_ERR_DTYPE, "dtype f16"},
    [M_HDIM] = {"head_dim", S2_ERR_HEAD_DIM, "head_dim 128"},
    [M_HEADS] = {"heads", S2_ERR_HEADS, "16 heads"},
    [M_KVHEADS] = {"kv_heads", S2_ERR_HEADS, "4 kv heads"},
    [M_BATCH0] = {"batch 0", S2_ERR_SHAPE, "batch 0"},
    [M_BATCHBIG] = {"batch 70000", S2_ERR_SHAPE, "batch 70000"},
    [M_Q0LEN] = {"q_len 0", S2_ERR_SHAPE, "q_len 0"},
    [M_KV0LEN] = {"kv_len 0", S2_ERR_SHAPE, "kv_len 0"},
    [M_QGTKV] = {"q_len > kv_len", S2_ERR_SHAPE, "q_len 256 > kv_len 255"},
    [M_SEQMAX] = {"kv_len > max_seq_len", S2_ERR_SEQ_LEN, "max_seq_len"},
    [M_QSTRIDE] = {"q seq stride 2052", S2_ERR_ALIGNMENT, "q: seq stride 2052 is not a multiple of 8"},
    [M_KSTRIDE] = {"k head stride 68", S2_ERR_ALIGNMENT, "k: head stride 68"},
    [M_VNEG] = {"v negative batch stride", S2_ERR_STRIDE, "v: batch stride -131072 is negative"},
    [M_OZERO] = {"o head stride 0", S2_ERR_STRIDE, "o: head stride 0 makes rows overlap"},
    [M_OOVERLAP] = {"o seq stride = head_dim", S2_ERR_STRIDE, "makes rows overlap"},
    [M_SCALE] = {"scale NaN", S2_ERR_INVALID, "not finite"},
    [M_OVERFLOW] = {"extent overflow", S2_ERR_SHAPE, "overflows"},
    [M_HOST] = {"host memory", S2_ERR_INVALID, "host memory"},
    [M_FOREIGN] = {"another context's memory", S2_ERR_INVALID, "another CUDA context"},
    [M_NOTALLOC] = {"not an allocation", S2_ERR_INVALID, "not memory known"},
    [M_SMALL] = {"allocation too small", S2_ERR_INVALID, "its allocation ends"},
    [M_LSESMALL] = {"lse allocation too small", S2_ERR_INVALID, "lse: needs"},
    [M_LSEO] = {"lse overlapping o", S2_ERR_INVALID, "lse overlaps o"},
    /* extents before overlaps: its implied extent runs into o, but it is too small */
    [M_LSESMALL_O] = {"lse too small, o right after it", S2_ERR_INVALID, "lse: needs 65536 bytes"},
};

/* Apply mutation m; may allocate extra[0] and extra[1] (freed by the caller, the second first). */
static void mutate(fixture *f, mutation m, s2_attn_fwd_args *a, s2_devptr extra[2])
{
    static _Alignas(16) uint8_t not_alloc[64];
    switch (m) {
    case M_Q0: a->q = 0; break;
    case M_K0: a->k = 0; break;
    case M_V0: a->v = 0; break;
    case M_O0: a->o = 0; break;
    case M_QMIS: a->q += 8; break;
    case M_OMIS: a->o += 2; break;
    case M_LSEMIS: a->lse += 2; break;
    case M_DTYPE: a->dtype = S2_DTYPE_F16; break;
    case M_HDIM: a->head_dim = 128; break;
    case M_HEADS: a->heads = 16; break;
    case M_KVHEADS: a->kv_heads = 4; break;
    case M_BATCH0: a->batch = 0; break;
    case M_BATCHBIG: a->batch = 70000; break;
    case M_Q0LEN: a->q_len = 0; break;
    case M_KV0LEN: a->kv_len = 0; break;
    case M_QGTKV: a->kv_len = 255; break; /* one query more than keys: the boundary */
    case M_SEQMAX: a->q_len = 1, a->kv_len = 4097; break;
    case M_QSTRIDE: a->q_stride[1] = FH * FD + 4; break;
    case M_KSTRIDE: a->k_stride[2] = FD + 4; break;
    case M_VNEG: a->v_stride[0] = -a->v_stride[0]; break;
    case M_OZERO: a->o_stride[2] = 0; break;
    case M_OOVERLAP: a->o_stride[1] = FD; break;
    case M_LSEO: a->lse = a->o + 64; break;
    case M_SCALE: a->scale = NAN; break;
    case M_OVERFLOW: a->k_stride[0] = INT64_C(1) << 62; break;
    case M_HOST:
    case M_FOREIGN:
        fake_set(m == M_HOST ? "next_alloc_host" : "next_alloc_foreign", 1);
        ck_assert_int_eq(s2_mem_alloc(f->ctx, f->dev, (size_t)FB * FSK * FHK * FD * 2, extra), S2_OK);
        a->k = *extra;
        break;
    case M_NOTALLOC: a->v = (s2_devptr)(uintptr_t)not_alloc; break;
    case M_SMALL:
        /* one row short */
        ck_assert_int_eq(s2_mem_alloc(f->ctx, f->dev, (size_t)FB * FSQ * FH * FD * 2 - 2, extra), S2_OK);
        a->o = *extra;
        break;
    case M_LSESMALL:
        ck_assert_int_eq(s2_mem_alloc(f->ctx, f->dev, (size_t)FB * FH * FSQ * 4 - 4, extra), S2_OK);
        a->lse = *extra;
        break;
    case M_LSESMALL_O:
        /* one allocation split in two, back to back: lse 256 bytes short, then o */
        fake_set("next_alloc_split", (long long)FB * FH * FSQ * 4 - 256);
        ck_assert_int_eq(s2_mem_alloc(f->ctx, f->dev, (size_t)FB * FH * FSQ * 4 - 256 + (size_t)FB * FSQ * FH * FD * 2,
                                      &extra[0]), S2_OK);
        extra[1] = (s2_devptr)fake_get("split_second");
        a->lse = extra[0];
        a->o = extra[1];
        break;
    case M_COUNT: break;
    }
}

START_TEST(every_bad_argument_has_its_status)
{
    fixture f;
    fixture_init(&f);
    const bad_case *bc = &bad_cases[_i];
    ck_assert_ptr_nonnull(bc->what);
    s2_attn_fwd_args a = f.a;
    s2_devptr extra[2] = {0, 0};
    long long allocs = fake_get("allocs_live");
    mutate(&f, (mutation)_i, &a, extra);
    allocs += (extra[0] != 0) + (extra[1] != 0);
    s2_ctx_clear(f.ctx);
    s2_status st = s2_attn_forward(f.ctx, f.k, NULL, &a);
    ck_assert_msg(st == bc->want, "%s: got %s (%s), want %s", bc->what, s2_status_name(st), s2_ctx_message(f.ctx),
                  s2_status_name(bc->want));
    assert_msg_has(f.ctx, bc->msg);
    ck_assert_int_eq(s2_attn_forward_check(f.ctx, f.k, &a), bc->want);
    /* nothing launched, no schedule built */
    ck_assert_int_eq(fake_get("launches"), 0);
    ck_assert_int_eq(fake_get("allocs_live"), allocs);
    s2_attn_sched_stats ss;
    s2_attn_kernel_sched_stats(f.k, &ss);
    ck_assert_int_eq(ss.misses, 0);
    /* the untouched arguments are fine */
    ck_assert_msg(s2_attn_forward_check(f.ctx, f.k, &f.a) == S2_OK, "%s", s2_ctx_message(f.ctx));
    for (int i = 1; i >= 0; i--)
        ck_assert_int_eq(s2_mem_free(f.ctx, f.dev, extra[i]), S2_OK);
    fixture_free(&f);
}
END_TEST

START_TEST(null_kernel_args_and_the_32_bit_limit)
{
    fixture f;
    fixture_init(&f);
    ck_assert_int_eq(s2_attn_forward(f.ctx, NULL, NULL, &f.a), S2_ERR_NULL_ARG);
    assert_msg_has(f.ctx, "kernel is NULL");
    ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, NULL, NULL), S2_ERR_NULL_ARG);
    assert_msg_has(f.ctx, "args is NULL");
    /* kernel B has no max_seq_len: the kernel's i32 lengths are the limit */
    s2_attn_module *mb = load(f.ctx, f.dev, &B);
    s2_attn_kernel *kb = s2_attn_module_kernel_at(mb, 0);
    s2_attn_fwd_args a = f.a;
    a.heads = a.kv_heads = 4, a.head_dim = 128, a.dtype = S2_DTYPE_F16, a.q_len = 1;
    a.kv_len = INT64_C(1) << 31;
    s2_attn_fwd_args_bshd(&a);
    ck_assert_int_eq(s2_attn_forward(f.ctx, kb, NULL, &a), S2_ERR_SEQ_LEN);
    assert_msg_has(f.ctx, "32-bit lengths");
    ck_assert_int_eq(fake_get("launches"), 0);
    s2_attn_module_free(mb);
    fixture_free(&f);
}
END_TEST

/* ---- launches and the schedule cache ---------------------------------------------- */

static int64_t q_tiles_of(const s2_pattern *p, int block_m, int block_n, int64_t q_len, int64_t kv_len)
{
    s2_layout *l = NULL;
    s2_tile_geom g;
    ck_assert_int_eq(s2_layout_new(NULL, p, q_len, kv_len, &l), S2_OK);
    ck_assert_int_eq(s2_layout_tile_geom(NULL, l, (s2_tile_spec){block_m, block_n}, &g), S2_OK);
    s2_layout_free(l);
    return g.q_tiles;
}

/* The grid of a forward launch: one CTA per (q tile, head, batch), or for
 * the persistent ABI min(items, SMs x resident CTAs) CTAs in x (the fake has
 * 132 SMs). */
static void assert_grid(const s2_manifest_kernel *d, int64_t q_len, const s2_attn_fwd_args *a)
{
    int64_t tiles = q_tiles_of(A.p, d->spec.block_m, d->spec.block_n, q_len, FSK);
    long long gx = fake_get("last_grid_x");
    if (s2_manifest_kernel_fn(d, S2_ROLE_FWD)->grid != S2_GRID_PERSISTENT) {
        ck_assert_int_eq(gx, tiles);
        return;
    }
    int64_t items = tiles * a->heads * a->batch;
    ck_assert_msg(gx >= 1 && gx <= items && (gx == items || gx % 132 == 0), "grid %lld for %lld items", gx,
                  (long long)items);
}

START_TEST(launch_shape_and_schedule_cache)
{
    fixture f;
    fixture_init(&f);
    const s2_manifest_kernel *d = s2_attn_kernel_desc(f.k);
    long long base = fake_get("allocs_live");
    ck_assert_msg(s2_attn_forward(f.ctx, f.k, NULL, &f.a) == S2_OK, "%s", s2_ctx_message(f.ctx));
    /* the persistent ABI uploads its work list with the schedule */
    long long per_shape = s2_manifest_kernel_fn(d, S2_ROLE_FWD)->grid == S2_GRID_PERSISTENT ? 2 : 1;
    ck_assert_int_eq(fake_get("launches"), 1);
    assert_grid(d, FSQ, &f.a);
    ck_assert_int_eq(fake_get("last_block_x"), d->threads);
    ck_assert_int_eq(fake_get("last_smem"), d->smem_bytes);
    ck_assert_int_eq(fake_get("allocs_live"), base + per_shape);
    /* same shape: the schedule is reused */
    ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, NULL, &f.a), S2_OK);
    ck_assert_int_eq(fake_get("allocs_live"), base + per_shape);
    s2_attn_sched_stats ss;
    s2_attn_kernel_sched_stats(f.k, &ss);
    ck_assert_int_eq(ss.hits, 1);
    ck_assert_int_eq(ss.misses, 1);
    ck_assert_int_eq(ss.cached, 1);

    /* q_len < kv_len (decode-like): fewer tiles, from the last query tile */
    s2_attn_fwd_args a = f.a;
    a.q_len = 7;
    ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, NULL, &a), S2_OK);
    assert_grid(d, 7, &a);
    ck_assert_int_eq(q_tiles_of(A.p, d->spec.block_m, d->spec.block_n, 7, FSK), 1);

    /* fill the cache, touch the oldest shape, then one more: the least
     * recently used (q_len 7) goes, with its device memory */
    for (int i = 1; i <= S2_ATTN_SCHED_CACHE - 2; i++) {
        a.q_len = 8 * i;
        ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, NULL, &a), S2_OK);
    }
    ck_assert_int_eq(fake_get("allocs_live"), base + per_shape * S2_ATTN_SCHED_CACHE);
    ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, NULL, &f.a), S2_OK);
    a.q_len = 100;
    ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, NULL, &a), S2_OK);
    s2_attn_kernel_sched_stats(f.k, &ss);
    ck_assert_int_eq(ss.cached, S2_ATTN_SCHED_CACHE);
    ck_assert_int_eq(ss.hits, 2);
    ck_assert_int_eq(ss.misses, S2_ATTN_SCHED_CACHE + 1);
    ck_assert_int_eq(ss.evictions, 1);
    ck_assert_int_eq(fake_get("allocs_live"), base + per_shape * S2_ATTN_SCHED_CACHE);
    ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, NULL, &f.a), S2_OK); /* still there */
    a.q_len = 7;
    ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, NULL, &a), S2_OK);  /* gone: rebuilt */
    s2_attn_kernel_sched_stats(f.k, &ss);
    ck_assert_int_eq(ss.hits, 3);
    ck_assert_int_eq(ss.misses, S2_ATTN_SCHED_CACHE + 2);
    ck_assert_int_eq(ss.evictions, 2);

    /* a failing launch reports the driver's error */
    fake_set("launch_result", CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, NULL, &f.a), S2_ERR_CUDA);
    assert_msg_has(f.ctx, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES");
    fake_set("launch_result", 0);
    fixture_free(&f); /* checks that the module freed every schedule */
}
END_TEST

/* ---- variable-length batches ---------------------------------------------------- */

/* Kernel B (sm_90a, block 64, d128, default spec) carries a wide variant
 * (role fwd_wide): a schedule whose query tiles visit few keys launches the
 * kernel itself, one with long lists NAME_w, with its threads, shared memory
 * and 128-row grid. */
START_TEST(wide_variant_for_long_lists)
{
    s2_ctx *ctx = s2_ctx_new();
    /* a GPU of 5 SMs (read at open): fewer than the wide grid's work items */
    use_fake();
    fake_set("sm_count", 5);
    s2_device *dev = open_fake(ctx);
    fake_set("sm_count", 132);
    s2_attn_module *mod = load(ctx, dev, &B);
    s2_attn_kernel *k = s2_attn_module_kernel_at(mod, 0);
    const s2_manifest_kernel *d = s2_attn_kernel_desc(k);
    ck_assert(s2_manifest_kernel_fn(d, S2_ROLE_FWD_WIDE) != NULL);
    ck_assert_int_eq(s2_manifest_kernel_fn(d, S2_ROLE_FWD_WIDE)->spec.block_m, 128);
    ck_assert_int_eq(s2_manifest_kernel_fn(d, S2_ROLE_FWD_WIDE)->spec.block_n, 128);
    ck_assert_int_eq(s2_manifest_kernel_fn(d, S2_ROLE_FWD_WIDE)->spec.kv_gather, 2);
    ck_assert_int_eq(s2_manifest_kernel_fn(d, S2_ROLE_FWD_WIDE)->threads, 384);
    /* pattern B is not dense: NAME_w runs on the persistent grid */
    ck_assert_int_eq(s2_manifest_kernel_fn(d, S2_ROLE_FWD_WIDE)->spec.persistent, 1);
    enum { H = 4, D = 128, SQ = 1024, SK = 65536 };
    s2_devptr q = 0, kk = 0, v = 0, o = 0;
    size_t qb = (size_t)SQ * H * D * 2, kb = (size_t)SK * H * D * 2;
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, qb, &q), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, kb, &kk), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, kb, &v), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, qb, &o), S2_OK);
    s2_attn_fwd_args a = {.batch = 1, .q_len = SQ, .kv_len = SQ, .heads = H, .kv_heads = H, .head_dim = D,
                          .dtype = S2_DTYPE_F16, .q = q, .k = kk, .v = v, .o = o};
    s2_attn_fwd_args_bshd(&a);
    /* 512 x 512: 4.5 key blocks per query tile on average (288 keys) */
    a.q_len = a.kv_len = 512;
    s2_attn_fwd_args_bshd(&a);
    ck_assert_msg(s2_attn_forward(ctx, k, NULL, &a) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_int_eq(fake_get("last_block_x"), d->threads);
    ck_assert_int_eq(fake_get("last_smem"), d->smem_bytes);
    ck_assert_int_eq(fake_get("last_grid_x"), q_tiles_of(B.p, d->spec.block_m, d->spec.block_n, 512, 512));
    s2_attn_sched_stats ss;
    s2_attn_kernel_sched_stats(k, &ss);
    ck_assert_int_eq(ss.wide, 0);
    /* the last 1K queries of 64K keys: ~70 key blocks per query tile */
    a.q_len = SQ;
    a.kv_len = SK;
    s2_attn_fwd_args_bshd(&a);
    /* the persistent grid: one CTA per SM (its shared memory), fewer than the work items */
    ck_assert_int_lt(5, q_tiles_of(B.p, 128, 64, SQ, SK) * H);
    ck_assert_msg(s2_attn_forward(ctx, k, NULL, &a) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_int_eq(fake_get("last_block_x"), s2_manifest_kernel_fn(d, S2_ROLE_FWD_WIDE)->threads);
    ck_assert_int_eq(fake_get("last_smem"), s2_manifest_kernel_fn(d, S2_ROLE_FWD_WIDE)->smem_bytes);
    ck_assert_int_eq(fake_get("last_grid_x"), 5);
    ck_assert_int_eq(fake_get("last_grid_y"), 1);
    /* the resident CTAs follow the device's shared memory per SM, read at open: two fit in twice an H100's
     * (the fake's 40 registers and 2048 threads allow four and five of 384 threads) */
    {
        fake_set("sm_count", 5);
        fake_set("smem_per_sm", 2 * 228 * 1024);
        s2_device *dev2 = open_fake(ctx);
        fake_set("sm_count", 132);
        fake_set("smem_per_sm", 228 * 1024);
        s2_attn_module *mod2 = load(ctx, dev2, &B);
        s2_attn_kernel *k2 = s2_attn_module_kernel_at(mod2, 0);
        ck_assert_msg(s2_attn_forward(ctx, k2, NULL, &a) == S2_OK, "%s", s2_ctx_message(ctx));
        ck_assert_int_eq(fake_get("last_grid_x"), 10);
        s2_attn_module_free(mod2);
        s2_device_free(dev2);
    }
    ck_assert_int_eq(fake_get("last_grid_z"), 1);
    s2_attn_kernel_sched_stats(k, &ss);
    ck_assert_int_eq(ss.wide, 1);
    ck_assert_int_eq(ss.misses, 2);
    /* the cached schedule keeps its choice */
    ck_assert_int_eq(s2_attn_forward(ctx, k, NULL, &a), S2_OK);
    ck_assert_int_eq(fake_get("last_block_x"), s2_manifest_kernel_fn(d, S2_ROLE_FWD_WIDE)->threads);
    /* a work-counter pair per stream: the legacy stream's and 7 others' take them all; a ninth stream
     * would synchronise to hand them out anew, which capture forbids */
    for (uintptr_t i = 1; i < S2_ATTN_COUNTER_PAIRS; i++)
        ck_assert_int_eq(s2_attn_forward(ctx, k, (void *)(0x1000 + i), &a), S2_OK);
    long long launches = fake_get("launches");
    fake_set("capturing", 1);
    ck_assert_int_eq(s2_attn_forward(ctx, k, (void *)0x1000, &a), S2_ERR_CAPTURE);
    assert_msg_has(ctx, "work-counter pair");
    ck_assert_int_eq(fake_get("launches"), launches);
    fake_set("capturing", 0);
    ck_assert_int_eq(s2_attn_forward(ctx, k, (void *)0x1000, &a), S2_OK);
    s2_devptr ps[] = {q, kk, v, o};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(s2_mem_free(ctx, dev, ps[i]), S2_OK);
    s2_attn_module_free(mod);
    ck_assert_int_eq(fake_get("allocs_live"), 0);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(varlen_sequences_are_checked)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = open_fake(ctx);
    s2_attn_seqs *s = NULL;
    s2_attn_seq good[3] = {{0, 10, 0, 30}, {10, 0, 30, 0}, {10, 5, 0, 30}}; /* keys shared by two chunks */
    struct {
        s2_attn_seq seq[2];
        int n;
        s2_status want;
        const char *msg;
    } bad[] = {
        {{{-1, 1, 0, 1}}, 1, S2_ERR_SHAPE, "negative"},
        {{{0, 1, -8, 1}}, 1, S2_ERR_SHAPE, "negative"},
        {{{0, -1, 0, 1}}, 1, S2_ERR_SHAPE, "negative"},
        {{{0, 3, 0, 2}}, 1, S2_ERR_SHAPE, "q_len 3 > kv_len 2"},
        {{{INT32_MAX, 1, 0, 1}}, 1, S2_ERR_SHAPE, "32-bit"},
        {{{0, 1, INT32_MAX - 1, 2}}, 1, S2_ERR_SHAPE, "32-bit"},
        {{{0, 10, 0, 10}, {9, 2, 10, 2}}, 2, S2_ERR_INVALID, "share query row 9"},
        {{{0, 1, 0, 1}}, 0, S2_ERR_SHAPE, "0 sequences"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(s2_attn_seqs_new(ctx, dev, bad[i].seq, bad[i].n, &s), bad[i].want);
        assert_msg_has(ctx, bad[i].msg);
        ck_assert_ptr_null(s);
    }
    ck_assert_int_eq(s2_attn_seqs_new(ctx, dev, good, 70000, &s), S2_ERR_SHAPE);
    ck_assert_int_eq(s2_attn_seqs_new(ctx, NULL, good, 3, &s), S2_ERR_NULL_ARG);
    ck_assert_int_eq(s2_attn_seqs_new(ctx, dev, NULL, 3, &s), S2_ERR_NULL_ARG);
    ck_assert_int_eq(s2_attn_seqs_new(ctx, dev, good, 3, NULL), S2_ERR_NULL_ARG);
    ck_assert_int_eq(fake_get("allocs_live"), 0);
    ck_assert_msg(s2_attn_seqs_new(ctx, dev, good, 3, &s) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_int_eq(fake_get("allocs_live"), 1);
    ck_assert_int_eq(s2_attn_seqs_count(s), 3);
    ck_assert_int_eq(s2_attn_seqs_host(s)[2].q_start, 10);
    ck_assert_uint_ne(s2_attn_seqs_device(s), 0);
    /* schedule: longest kv_len 30, earliest query position min(30-10, 30-5) = 20 */
    int64_t sq = -1, sk = -1;
    s2_attn_seqs_schedule_shape(s, &sq, &sk);
    ck_assert_int_eq(sq, 10);
    ck_assert_int_eq(sk, 30);
    s2_attn_seqs_free(s);
    ck_assert_int_eq(fake_get("allocs_live"), 0);
    s2_attn_seqs_free(NULL);

    /* cumulative lengths */
    int32_t cq[4] = {0, 1, 18, 18}, ck[4] = {0, 5, 22, 30};
    s2_attn_seq out[3];
    ck_assert_int_eq(s2_attn_seqs_packed(ctx, cq, ck, 3, out), S2_OK);
    ck_assert(out[1].q_start == 1 && out[1].q_len == 17 && out[1].k_start == 5 && out[1].kv_len == 17);
    ck_assert(out[2].q_len == 0 && out[2].kv_len == 8 && out[2].k_start == 22);
    ck_assert_int_eq(s2_attn_seqs_packed(ctx, cq, NULL, 3, out), S2_OK);
    ck_assert(out[0].q_start == 0 && out[0].q_len == 1 && out[0].k_start == 0 && out[0].kv_len == 1);
    int32_t dec[3] = {0, 5, 4};
    ck_assert_int_eq(s2_attn_seqs_packed(ctx, dec, NULL, 2, out), S2_ERR_SHAPE);
    assert_msg_has(ctx, "decrease at 2");
    int32_t more_q[3] = {0, 6, 7};
    ck_assert_int_eq(s2_attn_seqs_packed(ctx, more_q, ck, 2, out), S2_ERR_SHAPE);
    assert_msg_has(ctx, "6 queries but 5 keys");
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

/* s2_attn_forward with seqs: the checks (nothing launched) and the launch shape. */
START_TEST(varlen_forward_checks_and_launch)
{
    fixture f;
    fixture_init(&f);
    const s2_manifest_kernel *d = s2_attn_kernel_desc(f.k);
    /* token-major [rows][H][D]: FB * FSQ rows of q and o, FB * FSK of k and v */
    const int64_t rows = FB * FSQ;
    s2_attn_seq seqs[3] = {{0, 17, 0, 300}, {17, 64, 300, 64}, {100, 1, 364, 148}};
    s2_attn_seqs *sq = NULL;
    ck_assert_msg(s2_attn_seqs_new(f.ctx, f.dev, seqs, 3, &sq) == S2_OK, "%s", s2_ctx_message(f.ctx));
    s2_attn_fwd_args a = f.a;
    a.batch = 3, a.q_len = rows, a.kv_len = rows, a.seqs = sq;
    s2_attn_fwd_args_bshd(&a); /* batch strides are not used */
    /* lse is [H][rows]: exactly that much is enough */
    s2_devptr lse_small = 0;
    ck_assert_int_eq(s2_mem_alloc(f.ctx, f.dev, (size_t)FH * rows * 4, &lse_small), S2_OK);
    a.lse = lse_small;
    ck_assert_msg(s2_attn_forward_check(f.ctx, f.k, &a) == S2_OK, "%s", s2_ctx_message(f.ctx));

    s2_attn_fwd_args b = a;
    b.batch = 2;
    ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, NULL, &b), S2_ERR_SHAPE);
    assert_msg_has(f.ctx, "batch 2, but seqs holds 3");
    b = a;
    b.kv_len = 511; /* sequence 2's keys end at row 512 */
    ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, NULL, &b), S2_ERR_SHAPE);
    assert_msg_has(f.ctx, "sequence 2");
    b = a;
    b.q_len = 100;
    ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, NULL, &b), S2_ERR_SHAPE);
    b = a;
    b.q_len = rows + 1; /* o is one row short of the rows */
    ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, NULL, &b), S2_ERR_INVALID);
    b = a;
    b.o_stride[1] = FD; /* rows overlap */
    ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, NULL, &b), S2_ERR_STRIDE);
    b = a;
    s2_devptr lse_short = 0;
    ck_assert_int_eq(s2_mem_alloc(f.ctx, f.dev, (size_t)FH * rows * 4 - 4, &lse_short), S2_OK);
    b.lse = lse_short;
    ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, NULL, &b), S2_ERR_INVALID);
    assert_msg_has(f.ctx, "lse: needs");
    /* kernel A takes kv_len up to its max_seq_len 4096 per sequence */
    s2_attn_seq long_seq[1] = {{0, 1, 0, 4097}};
    s2_attn_seqs *sl = NULL;
    ck_assert_int_eq(s2_attn_seqs_new(f.ctx, f.dev, long_seq, 1, &sl), S2_OK);
    b = a;
    b.batch = 1, b.kv_len = 4097, b.seqs = sl;
    ck_assert_int_eq(s2_attn_forward_check(f.ctx, f.k, &b), S2_ERR_SEQ_LEN);
    assert_msg_has(f.ctx, "max_seq_len");
    ck_assert_int_eq(fake_get("launches"), 0);
    s2_attn_sched_stats ss;
    s2_attn_kernel_sched_stats(f.k, &ss);
    ck_assert_int_eq(ss.misses, 0);

    /* the launch: the schedule of (300 - min(300-17, 64-64, 148-1), 300), one CTA row per sequence */
    ck_assert_msg(s2_attn_forward(f.ctx, f.k, NULL, &a) == S2_OK, "%s", s2_ctx_message(f.ctx));
    ck_assert_int_eq(fake_get("launches"), 1);
    int64_t sch_q, sch_k;
    s2_attn_seqs_schedule_shape(sq, &sch_q, &sch_k);
    ck_assert_int_eq(sch_q, 300);
    ck_assert_int_eq(sch_k, 300);
    if (s2_manifest_kernel_fn(d, S2_ROLE_FWD)->grid != S2_GRID_PERSISTENT)
        ck_assert_int_eq(fake_get("last_grid_x"), q_tiles_of(A.p, d->spec.block_m, d->spec.block_n, 300, 300));
    /* sequences without queries: nothing launched, nothing built */
    s2_attn_seq none[2] = {{0, 0, 0, 40}, {0, 0, 40, 0}};
    s2_attn_seqs *sn = NULL;
    ck_assert_int_eq(s2_attn_seqs_new(f.ctx, f.dev, none, 2, &sn), S2_OK);
    b = a;
    b.batch = 2, b.seqs = sn;
    ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, NULL, &b), S2_OK);
    ck_assert_int_eq(fake_get("launches"), 1);
    s2_attn_kernel_sched_stats(f.k, &ss);
    ck_assert_int_eq(ss.misses, 1);
    s2_attn_seqs_free(sq);
    s2_attn_seqs_free(sl);
    s2_attn_seqs_free(sn);
    ck_assert_int_eq(s2_mem_free(f.ctx, f.dev, lse_small), S2_OK);
    ck_assert_int_eq(s2_mem_free(f.ctx, f.dev, lse_short), S2_OK);
    fixture_free(&f);
}
END_TEST

/* ---- JIT ------------------------------------------------------------------------ */

static void fresh_dir(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", tmp_root, name);
    ck_assert_int_eq(mkdir(out, 0700), 0);
}

static char *entry_path(const char *dir, const char *key)
{
    static char path[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/%s.s2ck", dir, key);
    return path;
}

static uint8_t *fetch(s2_ctx *ctx, const s2_jit_opts *o, const s2_pattern *p, const s2_kernel_spec *spec,
                      size_t *size, s2_jit_stats *stats)
{
    uint8_t *cubin = NULL;
    s2_status st = s2_jit_fetch(ctx, S2_ARCH_SM90A, p, spec, o, &cubin, size, stats);
    ck_assert_msg(st == S2_OK, "%s: %s", s2_status_name(st), s2_ctx_message(ctx));
    ck_assert_ptr_nonnull(cubin);
    return cubin;
}

/* ---- the caller's allocator ------------------------------------------------------ */

/* An engine's pool: one block taken up front, handed out 256 bytes aligned. */
typedef struct pool {
    s2_devptr base;
    size_t size, used;
    int allocs, frees, live;
    int fail, misalign;
} pool;

static int pool_alloc(void *user, size_t bytes, void *stream, s2_devptr *ptr)
{
    (void)stream;
    pool *p = user;
    size_t at = (p->used + 255) & ~(size_t)255;
    if (p->fail || at + bytes > p->size)
        return 1;
    p->used = at + bytes;
    p->allocs++, p->live++;
    *ptr = p->base + at + (p->misalign ? 8 : 0);
    return 0;
}

static void pool_free(void *user, s2_devptr ptr, void *stream)
{
    (void)stream;
    pool *p = user;
    ck_assert(ptr >= p->base && ptr < p->base + p->size);
    p->frees++, p->live--;
}

/* Every buffer the runtime takes (schedules, work lists, varlen tables)
 * comes from the caller's allocator and goes back to it; the driver
 * allocates nothing for it. */
/* Inside stream capture a shape without a schedule is S2_ERR_CAPTURE (its
 * build would upload and synchronise), with nothing launched or allocated;
 * a shape launched before the capture launches. */
START_TEST(capture_needs_a_built_schedule)
{
    fixture f;
    fixture_init(&f);
    CUstream stream = (CUstream)(uintptr_t)0x70;
    ck_assert_msg(s2_attn_forward(f.ctx, f.k, stream, &f.a) == S2_OK, "%s", s2_ctx_message(f.ctx));
    long long launches = fake_get("launches"), allocs = fake_get("allocs_live");
    fake_set("capturing", 1);
    s2_attn_fwd_args a = f.a;
    a.q_len = 24;
    ck_assert_int_eq(s2_attn_forward(f.ctx, f.k, stream, &a), S2_ERR_CAPTURE);
    assert_msg_has(f.ctx, "stream capture forbids");
    ck_assert_int_eq(fake_get("launches"), launches);
    ck_assert_int_eq(fake_get("allocs_live"), allocs);
    ck_assert_msg(s2_attn_forward(f.ctx, f.k, stream, &f.a) == S2_OK, "%s", s2_ctx_message(f.ctx));
    ck_assert_int_eq(fake_get("launches"), launches + 1);
    fake_set("capturing", 0);
    ck_assert_msg(s2_attn_forward(f.ctx, f.k, stream, &a) == S2_OK, "%s", s2_ctx_message(f.ctx));
    fake_set("capturing", 1);
    ck_assert_msg(s2_attn_forward(f.ctx, f.k, stream, &a) == S2_OK, "%s", s2_ctx_message(f.ctx));
    ck_assert_int_eq(fake_get("launches"), launches + 3);
    fake_set("capturing", 0);
    fixture_free(&f);
}
END_TEST

START_TEST(caller_allocator_serves_the_runtime)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = open_fake(ctx);
    pool p = {.size = 8 << 20};
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, p.size, &p.base), S2_OK);
    s2_allocator al = {pool_alloc, pool_free, &p};
    ck_assert_int_eq(s2_device_set_allocator(ctx, dev, &(s2_allocator){pool_alloc, NULL, &p}), S2_ERR_INVALID);
    ck_assert_int_eq(s2_device_set_allocator(ctx, dev, &al), S2_OK);
    fixture f = {.ctx = ctx, .dev = dev};
    f.mod = load(ctx, dev, &A);
    f.k = s2_attn_module_kernel_at(f.mod, 0);
    size_t qb = (size_t)FB * FSQ * FH * FD * 2, kb = (size_t)FB * FSK * FHK * FD * 2;
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, qb, &f.q), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, kb, &f.kk), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, kb, &f.v), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, qb, &f.o), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, (size_t)FB * FH * FSQ * 4, &f.lse), S2_OK);
    f.a = (s2_attn_fwd_args){.batch = FB, .q_len = FSQ, .kv_len = FSK, .heads = FH, .kv_heads = FHK, .head_dim = FD,
                             .dtype = S2_DTYPE_BF16, .q = f.q, .k = f.kk, .v = f.v, .o = f.o, .lse = f.lse};
    s2_attn_fwd_args_bshd(&f.a);
    long long driver_allocs = fake_get("allocs_live");
    s2_attn_fwd_args a = f.a;
    for (int q_len = 8; q_len <= 32; q_len += 8) {
        a.q_len = q_len;
        ck_assert_msg(s2_attn_forward(ctx, f.k, NULL, &a) == S2_OK, "%s", s2_ctx_message(ctx));
    }
    s2_attn_seq seqs[2] = {{0, 17, 0, 300}, {17, 64, 300, 64}};
    s2_attn_seqs *sq = NULL;
    ck_assert_msg(s2_attn_seqs_new(ctx, dev, seqs, 2, &sq) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_int_ge(p.allocs, 5);   /* four schedules and the varlen table at least */
    ck_assert_int_eq(p.live, p.allocs);
    ck_assert_int_eq(fake_get("allocs_live"), driver_allocs);
    /* not while the runtime holds the pool's memory */
    ck_assert_int_eq(s2_device_set_allocator(ctx, dev, NULL), S2_ERR_INVALID);
    assert_msg_has(ctx, "holds");
    s2_attn_seqs_free(sq);
    /* a pool that cannot serve: the launch fails cleanly, nothing launched */
    long long launches = fake_get("launches");
    p.fail = 1;
    a.q_len = 40;
    ck_assert_int_eq(s2_attn_forward(ctx, f.k, NULL, &a), S2_ERR_NOMEM);
    assert_msg_has(ctx, "allocator could not give");
    p.fail = 0, p.misalign = 1;
    ck_assert_int_eq(s2_attn_forward(ctx, f.k, NULL, &a), S2_ERR_INVALID);
    assert_msg_has(ctx, "not 256-byte aligned");
    ck_assert_int_eq(fake_get("launches"), launches);
    p.misalign = 0;
    s2_devptr *ps[] = {&f.q, &f.kk, &f.v, &f.o, &f.lse};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(s2_mem_free(ctx, dev, *ps[i]), S2_OK);
    s2_attn_module_free(f.mod);
    ck_assert_int_eq(p.live, 0);
    ck_assert_int_eq(p.frees, p.allocs);
    ck_assert_int_eq(s2_device_set_allocator(ctx, dev, NULL), S2_OK);
    ck_assert_int_eq(s2_mem_free(ctx, dev, p.base), S2_OK);
    ck_assert_int_eq(fake_get("allocs_live"), 0);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(jit_miss_hit_and_rebuild)
{
    s2_ctx *ctx = s2_ctx_new();
    char dir[PATH_MAX];
    fresh_dir(dir, sizeof dir, "jit");
    s2_jit_opts o = {.cache_dir = dir};
    s2_kernel_spec spec = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = 64};
    s2_jit_stats st1, st2, st3;
    size_t n1, n2, n3;

    uint8_t *c1 = fetch(ctx, &o, A.p, &spec, &n1, &st1);
    ck_assert(!st1.hit && st1.compiled && st1.stored && !st1.rebuilt && !st1.store_failed);
    ck_assert_int_eq((int)strlen(st1.key), 64);
    ck_assert_int_eq(st1.spec.block_m, 64);   /* sm_90a, d64: the wgmma template's 64 x 64 */
    ck_assert_int_eq(st1.spec.num_warps, 8);
    ck_assert_int_eq(st1.spec.arch, S2_ARCH_SM90A);
    ck_assert_int_eq(access(entry_path(dir, st1.key), F_OK), 0);

    /* hit: the same bytes, nothing compiled; a pattern built again keys alike */
    s2_pattern_set *again = NULL;
    s2_local_stride_args la;
    attn_pattern_args(3, &la);
    la.max_seq_len = 4096;
    ck_assert_int_eq(s2_pattern_from_args(ctx, &la, &again), S2_OK);
    uint8_t *c2 = fetch(ctx, &o, s2_pattern_set_get(again, 0), &spec, &n2, &st2);
    ck_assert(st2.hit && !st2.compiled && !st2.stored && !st2.rebuilt);
    ck_assert_str_eq(st2.key, st1.key);
    ck_assert_uint_eq(n2, n1);
    ck_assert(memcmp(c1, c2, n1) == 0);
    free(c2);
    s2_pattern_set_free(again);

    /* a flipped payload byte: detected, rebuilt, replaced */
    const char *path = entry_path(dir, st1.key);
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 80 + 100, SEEK_SET), 0);
    int c = fgetc(f);
    ck_assert_int_eq(fseek(f, 80 + 100, SEEK_SET), 0);
    fputc(c ^ 0x40, f);
    fclose(f);
    uint8_t *c3 = fetch(ctx, &o, A.p, &spec, &n3, &st3);
    ck_assert(!st3.hit && st3.compiled && st3.rebuilt && st3.stored);
    ck_assert_msg(strstr(st3.note, "checksum mismatch"), "%s", st3.note);
    free(c3);
    c3 = fetch(ctx, &o, A.p, &spec, &n3, &st3);
    ck_assert(st3.hit && !st3.rebuilt);
    ck_assert_str_eq(st3.note, "");
    free(c3);

    /* a sound entry holding another kernel (checksums fine) is not used */
    s2_cache *cache = NULL;
    ck_assert_int_eq(s2_cache_open(ctx, dir, &cache), S2_OK);
    s2_cache_key key;
    for (int i = 0; i < 32; i++) {
        unsigned x;
        ck_assert_int_eq(sscanf(st1.key + 2 * i, "%2x", &x), 1);
        key.bytes[i] = (uint8_t)x;
    }
    ck_assert_int_eq(s2_cache_store(ctx, cache, &key, B.art->cubin, B.art->cubin_size), S2_OK);
    s2_cache_close(cache);
    c3 = fetch(ctx, &o, A.p, &spec, &n3, &st3);
    ck_assert(!st3.hit && st3.compiled && st3.rebuilt && st3.stored);
    ck_assert_msg(strstr(st3.note, "cached cubin's manifest line 5 is \"kernel s2_fwd_causal"), "%s", st3.note);
    ck_assert_uint_eq(n3, n1);
    free(c3);
    /* nor one of a pattern with A's name and spec but another vert_stride:
     * the cubin's resolved pattern is compared, not only its name */
    s2_local_stride_args lv;
    attn_pattern_args(3, &lv);
    lv.max_seq_len = 4096;
    lv.vert_stride = 4;
    s2_pattern_set *other = NULL;
    ck_assert_int_eq(s2_pattern_from_args(ctx, &lv, &other), S2_OK);
    ck_assert_str_eq(s2_pattern_set_get(other, 0)->name, A.p->name);
    s2_kernel_spec ospec = spec;
    ospec.arch = S2_ARCH_SM90A;
    s2_artifact *oart = NULL;
    ck_assert_msg(s2_compile_attention(ctx, s2_pattern_set_get(other, 0), &ospec, S2_CUBIN_AUTO, &oart) == S2_OK,
                  "%s", s2_ctx_message(ctx));
    ck_assert_int_eq(s2_cache_open(ctx, dir, &cache), S2_OK);
    ck_assert_int_eq(s2_cache_store(ctx, cache, &key, oart->cubin, oart->cubin_size), S2_OK);
    s2_cache_close(cache);
    c3 = fetch(ctx, &o, A.p, &spec, &n3, &st3);
    ck_assert(!st3.hit && st3.compiled && st3.rebuilt && st3.stored);
    ck_assert_uint_eq(n3, n1);
    ck_assert(memcmp(c3, c1, n1) == 0);
    free(c3);
    s2_artifact_free(oart);
    s2_pattern_set_free(other);

    /* another spec is another key; no_cache writes nothing */
    s2_kernel_spec spec32 = spec;
    spec32.block_n = 32;
    c3 = fetch(ctx, &o, A.p, &spec32, &n3, &st3);
    ck_assert(!st3.hit && st3.compiled);
    ck_assert_str_ne(st3.key, st1.key);
    free(c3);
    char dir2[PATH_MAX];
    fresh_dir(dir2, sizeof dir2, "jit-none");
    s2_jit_opts none = {.cache_dir = dir2, .no_cache = true};
    c3 = fetch(ctx, &none, A.p, &spec, &n3, &st3);
    ck_assert(!st3.hit && st3.compiled && !st3.stored);
    ck_assert_str_eq(st3.key, "");
    ck_assert_int_eq(rmdir(dir2), 0); /* still empty */
    free(c3);

    /* spec errors come through */
    s2_kernel_spec bad = spec;
    bad.head_dim = 72;   /* no template takes a head dim that is not a multiple of 16 */
    uint8_t *cb = NULL;
    size_t nb = 0;
    ck_assert_int_eq(s2_jit_fetch(ctx, S2_ARCH_SM90A, A.p, &bad, &o, &cb, &nb, NULL), S2_ERR_UNSUPPORTED);
    ck_assert_int_eq(s2_jit_fetch(ctx, S2_ARCH_SM90A, NULL, &spec, &o, &cb, &nb, NULL), S2_ERR_NULL_ARG);
    free(c1);
    s2_ctx_free(ctx);
}
END_TEST

/* The key's bytes from its hex form. */
static s2_cache_key key_of(const char *hex)
{
    s2_cache_key key;
    for (int i = 0; i < 32; i++) {
        unsigned x;
        ck_assert_int_eq(sscanf(hex + 2 * i, "%2x", &x), 1);
        key.bytes[i] = (uint8_t)x;
    }
    return key;
}

/* Store image under key (a sound entry: the cache's keyed checksum is right). */
static void plant(const char *dir, const char *hex, const void *image, size_t size)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_cache *cache = NULL;
    ck_assert_int_eq(s2_cache_open(ctx, dir, &cache), S2_OK);
    s2_cache_key key = key_of(hex);
    ck_assert_int_eq(s2_cache_store(ctx, cache, &key, image, size), S2_OK);
    s2_cache_close(cache);
    s2_ctx_free(ctx);
}

/* Replace token `index` (0 = "kernel.fn") of the first kernel.fn line of the
 * manifest inside image by `to`, of the same length, after checking it was
 * `from`; the changed line goes into line. */
static void tamper_fn_record(uint8_t *image, size_t size, int index, const char *from, const char *to, char *line_out,
                             size_t cap)
{
    const char *text;
    size_t len;
    ck_assert_int_eq(s2_cubin_find_manifest(NULL, image, size, &text, &len), S2_OK);
    char *line = (char *)image + (text - (const char *)image);
    line = strstr(line, "\nkernel.fn ");
    ck_assert_ptr_nonnull(line);
    char *tok = line + 1;
    for (int i = 0; i < index; i++)
        tok = strchr(tok, ' ') + 1;
    ck_assert_uint_eq(strlen(to), strlen(from));
    ck_assert_msg(strncmp(tok, from, strlen(from)) == 0 && tok[strlen(from)] == ' ', "token %d: %.20s", index, tok);
    memcpy(tok, to, strlen(to));
    snprintf(line_out, cap, "\"%.*s\"", (int)strcspn(line + 1, "\n"), line + 1);
}

/* A cached cubin whose manifest is not the request's, under the request's
 * key with a valid checksum, is a miss and rebuilt, and the kernel returned
 * is the request's: a module built for another spec (block_n, num_warps,
 * head_dim), and the request's own module with one field of its kernel
 * record changed (launch threads, a template option), which the manifest
 * parser accepts and whose entry spec still matches. */
START_TEST(jit_entry_of_another_spec_is_rebuilt)
{
    s2_ctx *ctx = s2_ctx_new();
    char dir[PATH_MAX];
    fresh_dir(dir, sizeof dir, "jit-spec");
    s2_jit_opts o = {.cache_dir = dir};
    s2_kernel_spec y = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = 64};
    s2_jit_stats sy, st;
    size_t ny, n;
    uint8_t *cy = fetch(ctx, &o, A.p, &y, &ny, &sy);   /* Y: the resolved 64 x 64, 8 warps */
    ck_assert(sy.compiled && sy.stored);
    ck_assert_int_eq(sy.spec.block_n, 64);
    ck_assert_int_eq(sy.spec.num_warps, 8);

    static const struct {
        int block_n, num_warps, head_dim;
        const char *line;
    } other[] = {
        {32, 0, 64, "\"kernel.block_n 32\", the request's \"kernel.block_n 64\""},
        {0, 4, 64, "\"kernel.num_warps 4\", the request's \"kernel.num_warps 8\""},
        {0, 0, 128, "\"kernel s2_fwd_gqa_32_8_bf16_d128\", the request's \"kernel s2_fwd_gqa_32_8_bf16_d64\""},
    };
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        s2_kernel_spec x = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = other[i].head_dim,
                            .arch = S2_ARCH_SM90A, .block_n = other[i].block_n, .num_warps = other[i].num_warps};
        s2_artifact *ax = NULL;
        ck_assert_msg(s2_compile_attention(ctx, A.p, &x, S2_CUBIN_AUTO, &ax) == S2_OK, "%s", s2_ctx_message(ctx));
        plant(dir, sy.key, ax->cubin, ax->cubin_size);
        s2_artifact_free(ax);
        uint8_t *c = fetch(ctx, &o, A.p, &y, &n, &st);
        ck_assert_msg(!st.hit && st.compiled && st.rebuilt && st.stored, "case %zu", i);
        ck_assert_msg(strstr(st.note, other[i].line), "case %zu: %s", i, st.note);
        ck_assert_str_eq(st.key, sy.key);
        ck_assert_uint_eq(n, ny);
        ck_assert(memcmp(c, cy, ny) == 0);
        free(c);
        c = fetch(ctx, &o, A.p, &y, &n, &st);   /* replaced: a hit again */
        ck_assert(st.hit && !st.compiled);
        free(c);
    }

    /* Y's own cubin with one field of its kernel.fn record changed: the
     * record's tile and a template option (the parser takes them) */
    static const struct {
        int index;
        const char *from, *to;
    } tamper[] = {
        {8, "64", "32"},   /* BLOCK_N */
        {10, "3", "2"},    /* NUM_STAGES */
        {13, "1", "2"},    /* KV_GATHER */
    };
    for (size_t i = 0; i < sizeof tamper / sizeof tamper[0]; i++) {
        uint8_t *bad = malloc(ny);
        memcpy(bad, cy, ny);
        char line[256];
        tamper_fn_record(bad, ny, tamper[i].index, tamper[i].from, tamper[i].to, line, sizeof line);
        /* a manifest the runtime would load, whose entry matches the request */
        const char *text;
        size_t len;
        s2_manifest *m = NULL;
        ck_assert_int_eq(s2_cubin_find_manifest(ctx, bad, ny, &text, &len), S2_OK);
        ck_assert_msg(s2_manifest_parse(ctx, text, len, &m) == S2_OK, "%s", s2_ctx_message(ctx));
        const s2_manifest_kernel *mk = s2_manifest_kernel_at(m, 0);
        ck_assert(mk->spec.block_m == sy.spec.block_m && mk->spec.block_n == sy.spec.block_n &&
                  mk->spec.num_warps == sy.spec.num_warps && mk->spec.num_stages == sy.spec.num_stages);
        s2_manifest_free(m);
        plant(dir, sy.key, bad, ny);
        free(bad);
        uint8_t *c = fetch(ctx, &o, A.p, &y, &n, &st);
        ck_assert_msg(!st.hit && st.compiled && st.rebuilt && st.stored, "tamper %zu", i);
        ck_assert_msg(strstr(st.note, line), "tamper %zu: %s lacks %s", i, st.note, line);
        ck_assert_uint_eq(n, ny);
        ck_assert(memcmp(c, cy, ny) == 0);
        free(c);
    }

    /* through s2_jit_compile: the loaded kernel is Y's */
    s2_device *dev = open_fake(ctx);
    s2_kernel_spec x = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = 64, .arch = S2_ARCH_SM90A,
                        .block_n = 32};
    s2_artifact *ax = NULL;
    ck_assert_int_eq(s2_compile_attention(ctx, A.p, &x, S2_CUBIN_AUTO, &ax), S2_OK);
    plant(dir, sy.key, ax->cubin, ax->cubin_size);
    s2_artifact_free(ax);
    s2_attn_kernel *k = NULL;
    ck_assert_msg(s2_jit_compile(ctx, dev, A.p, &y, &o, &k, &st) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert(!st.hit && st.compiled && st.rebuilt);
    ck_assert_str_eq(st.key, sy.key);
    const s2_manifest_kernel *d = s2_attn_kernel_desc(k);
    ck_assert_int_eq(d->spec.block_n, 64);
    ck_assert_int_eq(d->spec.block_m, sy.spec.block_m);
    ck_assert_int_eq(d->spec.num_warps, 8);
    ck_assert_int_eq(s2_manifest_kernel_fn(d, S2_ROLE_FWD)->spec.block_n, 64);
    s2_attn_kernel_free(k);
    s2_device_free(dev);
    free(cy);
    s2_ctx_free(ctx);
}
END_TEST

/* A cache directory others can write is not used: every fetch compiles,
 * nothing is read or stored, stats say why; trust_cache_dir or
 * S2C_CACHE_TRUST_DIR=1 uses it, and so does 0700 again. */
START_TEST(jit_untrusted_cache_dir)
{
    s2_ctx *ctx = s2_ctx_new();
    char dir[PATH_MAX];
    fresh_dir(dir, sizeof dir, "jit-trust");
    s2_jit_opts o = {.cache_dir = dir};
    s2_kernel_spec spec = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_BF16, .head_dim = 64};
    s2_jit_stats js;
    size_t n;
    uint8_t *c = fetch(ctx, &o, A.p, &spec, &n, &js);
    ck_assert(js.stored && !js.cache_untrusted);
    free(c);
    char key[sizeof js.key];
    memcpy(key, js.key, sizeof key);
    ck_assert_int_eq(unlink(entry_path(dir, key)), 0);
    ck_assert_int_eq(chmod(dir, 0777), 0);
    for (int i = 0; i < 2; i++) {
        c = fetch(ctx, &o, A.p, &spec, &n, &js);
        ck_assert(!js.hit && js.compiled && !js.stored && !js.store_failed && !js.rebuilt && js.cache_untrusted);
        ck_assert_msg(strstr(js.note, "is not used: it is writable by others (mode 0777) without the sticky bit") &&
                          strstr(js.note, "S2C_CACHE_TRUST_DIR=1") && strstr(js.note, dir),
                      "%s", js.note);
        ck_assert_int_eq(access(entry_path(dir, key), F_OK), -1);
        free(c);
    }
    /* a sound entry planted there is not read either */
    o.trust_cache_dir = true;
    c = fetch(ctx, &o, A.p, &spec, &n, &js);
    ck_assert(!js.hit && js.compiled && js.stored && !js.cache_untrusted);
    ck_assert_str_eq(js.note, "");
    free(c);
    o.trust_cache_dir = false;
    c = fetch(ctx, &o, A.p, &spec, &n, &js);
    ck_assert(!js.hit && js.compiled && js.cache_untrusted);
    free(c);
    ck_assert_int_eq(setenv("S2C_CACHE_TRUST_DIR", "1", 1), 0);
    c = fetch(ctx, &o, A.p, &spec, &n, &js);
    ck_assert(js.hit && !js.compiled && !js.cache_untrusted);
    free(c);
    ck_assert_int_eq(unsetenv("S2C_CACHE_TRUST_DIR"), 0);
    ck_assert_int_eq(chmod(dir, 0700), 0);
    c = fetch(ctx, &o, A.p, &spec, &n, &js);
    ck_assert(js.hit && !js.compiled && !js.cache_untrusted);
    free(c);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(jit_compile_loads_and_launches)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = open_fake(ctx);
    char dir[PATH_MAX];
    fresh_dir(dir, sizeof dir, "jit-load");
    s2_jit_opts o = {.cache_dir = dir};
    s2_kernel_spec spec = {.kind = S2_KERNEL_FWD, .dtype = S2_DTYPE_F16, .head_dim = 128, .arch = S2_ARCH_SM80};
    s2_jit_stats js;
    s2_attn_kernel *k = NULL;
    ck_assert_msg(s2_jit_compile(ctx, dev, B.p, &spec, &o, &k, &js) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert(js.compiled && !js.hit);
    /* the fake is cc 9.0: the arch comes from the device, not the spec */
    ck_assert_int_eq(s2_attn_kernel_desc(k)->spec.arch, S2_ARCH_SM90A);
    s2_attn_kernel_free(k);
    k = NULL;
    ck_assert_int_eq(s2_jit_compile(ctx, dev, B.p, &spec, &o, &k, &js), S2_OK);
    ck_assert(js.hit && !js.compiled);

    s2_devptr q = 0, kv = 0, out = 0;
    const int64_t S = 200;
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, (size_t)S * 4 * 128 * 2, &q), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, (size_t)S * 4 * 128 * 2, &kv), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, (size_t)S * 4 * 128 * 2, &out), S2_OK);
    s2_attn_fwd_args a = {.batch = 1, .q_len = S, .kv_len = S, .heads = 4, .kv_heads = 4, .head_dim = 128,
                          .dtype = S2_DTYPE_F16, .q = q, .k = kv, .v = kv, .o = out};
    s2_attn_fwd_args_bshd(&a);
    ck_assert_msg(s2_attn_forward(ctx, k, NULL, &a) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_int_eq(fake_get("launches"), 1);
    ck_assert_int_eq(s2_manifest_kernel_fn(s2_attn_kernel_desc(k), S2_ROLE_FWD)->abi, S2_ABI_FWD_TMA);
    ck_assert_int_eq(fake_get("last_grid_x"), 4); /* cdiv(200, 64) */
    ck_assert_int_eq(fake_get("last_block_x"), 256); /* producer + one consumer warpgroup */
    /* q, k, v maps built for the TMA ABI: k and v are one buffer here, so
     * the device's memo encodes their map once */
    ck_assert_int_eq(fake_get("tensor_maps"), 2);
    ck_assert_msg(s2_attn_forward(ctx, k, NULL, &a) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_int_eq(fake_get("tensor_maps"), 2); /* the same tensors: no encode */
    s2_attn_kernel_free(k);
    s2_mem_free(ctx, dev, q);
    s2_mem_free(ctx, dev, kv);
    s2_mem_free(ctx, dev, out);
    ck_assert_int_eq(fake_get("allocs_live"), 0);

    /* the driver refuses the cached image: rebuilt once, then the error */
    fake_set("module_result", CUDA_ERROR_INVALID_IMAGE);
    long long before = fake_get("modules_unloaded");
    ck_assert_int_eq(s2_jit_compile(ctx, dev, B.p, &spec, &o, &k, &js), S2_ERR_CUDA);
    ck_assert_ptr_null(k);
    ck_assert(js.rebuilt && js.compiled && !js.hit);
    assert_msg_has(ctx, "CUDA_ERROR_INVALID_IMAGE");
    ck_assert_int_eq(fake_get("modules_unloaded"), before);
    s2_device_free(dev);
    s2_ctx_free(ctx);
}
END_TEST

/* ---- main ------------------------------------------------------------------------ */

static void build(built *b, int which, int64_t max_seq_len, s2_dtype dt, int head_dim)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args a;
    attn_pattern_args(which, &a);
    a.max_seq_len = max_seq_len;
    if (s2_pattern_from_args(ctx, &a, &b->set) != S2_OK) {
        fprintf(stderr, "pattern: %s\n", s2_ctx_message(ctx));
        exit(1);
    }
    b->p = s2_pattern_set_get(b->set, 0);
    s2_kernel_spec spec = {.kind = S2_KERNEL_FWD, .dtype = dt, .head_dim = head_dim, .arch = S2_ARCH_SM90A};
    if (s2_compile_attention(ctx, b->p, &spec, S2_CUBIN_AUTO, &b->art) != S2_OK) {
        fprintf(stderr, "compile: %s\n", s2_ctx_message(ctx));
        exit(1);
    }
    s2_ctx_free(ctx);
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_tree(const char *dir)
{
    if (nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

int main(int argc, char **argv)
{
    fake_path = s2t_fake_libcuda_arg(argc, argv);
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_root, sizeof tmp_root, "%s/s2attnrt-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    build(&A, 3, 4096, S2_DTYPE_BF16, 64);
    build(&B, 0, 0, S2_DTYPE_F16, 128);

    Suite *s = suite_create("attnrt");
    TCase *tc_mod = tcase_create("module");
    tcase_add_test(tc_mod, module_lists_and_finds_kernels);
    tcase_add_test(tc_mod, standalone_kernel_and_files);
    tcase_add_test(tc_mod, load_best_picks_the_arch);
    suite_add_tcase(s, tc_mod);
    TCase *tc_args = tcase_create("args");
    tcase_add_loop_test(tc_args, every_bad_argument_has_its_status, 0, M_COUNT);
    tcase_add_test(tc_args, null_kernel_args_and_the_32_bit_limit);
    tcase_add_test(tc_args, launch_shape_and_schedule_cache);
    tcase_add_test(tc_args, caller_allocator_serves_the_runtime);
    tcase_add_test(tc_args, capture_needs_a_built_schedule);
    tcase_add_test(tc_args, wide_variant_for_long_lists);
    tcase_add_test(tc_args, varlen_sequences_are_checked);
    tcase_add_test(tc_args, varlen_forward_checks_and_launch);
    suite_add_tcase(s, tc_args);
    TCase *tc_jit = tcase_create("jit");
    tcase_set_timeout(tc_jit, 300);
    tcase_add_test(tc_jit, jit_miss_hit_and_rebuild);
    tcase_add_test(tc_jit, jit_entry_of_another_spec_is_rebuilt);
    tcase_add_test(tc_jit, jit_untrusted_cache_dir);
    tcase_add_test(tc_jit, jit_compile_loads_and_launches);
    suite_add_tcase(s, tc_jit);

    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK); /* the driver is loaded once per process */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    s2_artifact_free(A.art);
    s2_artifact_free(B.art);
    s2_pattern_set_free(A.set);
    s2_pattern_set_free(B.set);
    remove_tree(tmp_root);
    return failed ? 1 : 0;
}
