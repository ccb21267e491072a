/* Codegen stage without a GPU: IR, PTX, cubin through ptxas and nvJitLink,
 * resources, failures, dumps and overrides. */
#include "cg_internal.h"
#include "s2c/compile.h"
#include "s2c/cache.h"
#include "s2c/codegen.h"
#include "s2c/pattern.h"
#include "check_main.h"

#include <check.h>
#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/IRReader.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const s2_arch archs[] = {S2_ARCH_SM80, S2_ARCH_SM90A};
enum { NUM_ARCHS = 2, NUM_PATTERNS = 5 };

/* The patterns under test, from the S2 library's keyword arguments. */
static s2_pattern_set *make_pattern(s2_ctx *ctx, int which)
{
    s2_local_stride_args a;
    s2_local_stride_args_default(&a);
    switch (which) {
    case 0: /* causal local-stride with a head offset */
        a.name = "causal_off";
        a.num_heads = 8; a.block_size = 64; a.local_blocks = 4; a.vert_stride = 8;
        a.head_sliding_offset = 3;
        break;
    case 1: /* GQA */
        a.name = "gqa";
        a.num_heads = 16; a.num_kv_heads = 4; a.block_size = 32; a.local_blocks = 2; a.vert_stride = 16;
        break;
    case 2: /* dense heads */
        a.name = "dense2";
        a.num_heads = 8; a.block_size = 16; a.local_blocks = 3; a.vert_stride = 4; a.num_dense_heads = 2;
        break;
    case 3: /* bidirectional */
        a.name = "bidir";
        a.num_heads = 4; a.block_size = 64; a.local_blocks = 3; a.local_right = 2; a.vert_stride = 4;
        a.causal = false;
        break;
    default: /* no local window: rows of the first block keep nothing */
        a.name = "empty-rows";
        a.num_heads = 4; a.block_size = 16; a.local_blocks = 0; a.vert_stride = 4; a.head_sliding_offset = 1;
        break;
    }
    s2_pattern_set *set = NULL;
    s2_status st = s2_pattern_from_args(ctx, &a, &set);
    ck_assert_msg(st == S2_OK, "pattern %d: %s", which, s2_ctx_message(ctx));
    return set;
}

static void assert_ir_verifies(const char *ir)
{
    LLVMContextRef c = LLVMContextCreate();
    LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(ir, strlen(ir), "ir");
    LLVMModuleRef m = NULL;
    char *err = NULL;
    ck_assert_msg(!LLVMParseIRInContext(c, buf, &m, &err), "IR does not parse: %s", err ? err : "");
    ck_assert_msg(!LLVMVerifyModule(m, LLVMReturnStatusAction, &err), "IR does not verify: %s", err ? err : "");
    LLVMDisposeMessage(err);
    LLVMDisposeModule(m);
    LLVMContextDispose(c);
}

static void assert_clean_cubin(const uint8_t *cubin, size_t size, const s2_kernel_info *k, int n,
                               const char *kernel, const char *what)
{
    ck_assert_msg(size > 64 && memcmp(cubin, "\177ELF", 4) == 0, "%s: not an ELF cubin", what);
    ck_assert_msg(n == 1, "%s: %d kernels in the log", what, n);
    ck_assert_str_eq(k[0].name, kernel);
    ck_assert_msg(k[0].registers > 0, "%s: registers %d", what, k[0].registers);
    ck_assert_msg(k[0].spill_stores == 0 && k[0].spill_loads == 0, "%s: spills %d/%d", what,
                  k[0].spill_stores, k[0].spill_loads);
    ck_assert_msg(k[0].stack_frame == 0, "%s: stack frame %d", what, k[0].stack_frame);
    ck_assert_int_eq(k[0].shared_static, 0);
    if (k[0].elf_registers >= 0)
        ck_assert_int_eq(k[0].elf_registers, k[0].registers);
}

START_TEST(softmax_all_archs_both_assemblers)
{
    int pi = _i / NUM_ARCHS;
    s2_arch arch = archs[_i % NUM_ARCHS];
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = make_pattern(ctx, pi);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_target t;
    s2_target_default(&t, arch);
    s2_artifact *art = NULL;
    s2_status st = s2_compile_row_softmax(ctx, p, &t, S2_CUBIN_PTXAS, &art);
    ck_assert_msg(st == S2_OK, "%s %s: %s", p->name, s2_arch_name(arch), s2_ctx_message(ctx));
    ck_assert_int_eq(art->backend_used, S2_CUBIN_PTXAS);
    assert_ir_verifies(art->ir_pre);
    assert_ir_verifies(art->ir);
    ck_assert_ptr_nonnull(strstr(art->ir, "ptx_kernel"));

    char entry[200];
    snprintf(entry, sizeof entry, ".entry %s(", art->kernels[0].name);
    ck_assert_msg(strstr(art->ptx, entry) != NULL, "no '%s' in PTX", entry);
    ck_assert_ptr_nonnull(strstr(art->ptx, ".maxntid 128"));
    ck_assert_ptr_nonnull(strstr(art->ptx, "shfl.sync.bfly.b32"));
    ck_assert_ptr_nonnull(strstr(art->ptx, "ex2.approx.ftz.f32"));
    char target[64];
    snprintf(target, sizeof target, ".target %s", s2_arch_name(arch));
    ck_assert_ptr_nonnull(strstr(art->ptx, target));
    ck_assert_ptr_nonnull(strstr(art->ptx, ".version 8.3"));
    assert_clean_cubin(art->cubin, art->cubin_size, art->kernels, art->num_kernels, art->kernels[0].name, "ptxas");
    ck_assert_int_eq(art->kernels[0].max_threads, 128);

    /* the same PTX through nvJitLink */
    uint8_t *cubin = NULL;
    size_t size = 0;
    char *log = NULL;
    s2_kernel_info *info = NULL;
    int n = 0;
    s2_cubin_backend used;
    st = s2_ptx_to_cubin(ctx, art->ptx, art->ptx_len, arch, S2_CUBIN_NVJITLINK, &cubin, &size, &log,
                         &info, &n, &used);
    ck_assert_msg(st == S2_OK, "nvJitLink: %s", s2_ctx_message(ctx));
    ck_assert_int_eq(used, S2_CUBIN_NVJITLINK);
    assert_clean_cubin(cubin, size, info, n, art->kernels[0].name, log);
    free(cubin);
    free(log);
    free(info);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

static const char bad_ptx[] =
    ".version 8.3\n.target sm_80\n.address_size 64\n"
    ".visible .entry broken()\n{\n  .reg .b32 %r<2>;\n  mov.b32 %r1, %r7;\n  frobnicate.u32 %r1;\n  ret;\n}\n";

START_TEST(bad_ptx_is_a_toolchain_error)
{
    s2_ctx *ctx = s2_ctx_new();
    for (int b = 0; b < 2; b++) {
        s2_cubin_backend be = b ? S2_CUBIN_NVJITLINK : S2_CUBIN_PTXAS;
        uint8_t *cubin = (uint8_t *)1;
        size_t size = 7;
        char *log = NULL;
        s2_status st = s2_ptx_to_cubin(ctx, bad_ptx, strlen(bad_ptx), S2_ARCH_SM80, be, &cubin, &size,
                                       &log, NULL, NULL, NULL);
        ck_assert_int_eq(st, S2_ERR_TOOLCHAIN);
        ck_assert_ptr_null(cubin);
        ck_assert_uint_eq(size, 0);
        ck_assert_ptr_nonnull(log);
        ck_assert_msg(strstr(log, "frobnicate") || strstr(log, "error"), "log: %s", log);
        const char *msg = s2_ctx_message(ctx);
        ck_assert_msg(strstr(msg, b ? "nvJitLink failed" : "ptxas failed"), "message: %s", msg);
        ck_assert_msg(strstr(msg, "error") != NULL, "message lacks the log: %s", msg);
        free(log);
    }
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(missing_ptxas)
{
    setenv("S2C_PTXAS", "/nonexistent/ptxas", 1);
    setenv("PATH", "/nonexistent", 1);
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = make_pattern(ctx, 0);
    s2_target t;
    s2_target_default(&t, S2_ARCH_SM90A);
    s2_artifact *art = NULL;
    s2_status st = s2_compile_row_softmax(ctx, s2_pattern_set_get(set, 0), &t, S2_CUBIN_AUTO, &art);
    ck_assert_msg(st == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_int_eq(art->backend_used, S2_CUBIN_NVJITLINK);
    ck_assert(memcmp(art->cubin, "\177ELF", 4) == 0);
    ck_assert_int_gt(art->kernels[0].registers, 0);
    s2_artifact_free(art);

    art = (s2_artifact *)1;
    st = s2_compile_row_softmax(ctx, s2_pattern_set_get(set, 0), &t, S2_CUBIN_PTXAS, &art);
    ck_assert_int_eq(st, S2_ERR_TOOLCHAIN);
    ck_assert_ptr_null(art);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "ptxas not found"));
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

static const char *fake_nvjitlink;

/* The library named by S2C_NVJITLINK is the only candidate; a 12.x one with
 * versioned entry points only is used, and one that does not exist gives a
 * message naming what was tried. */
START_TEST(nvjitlink_12_and_the_search_list)
{
    setenv("S2C_PTXAS", "/nonexistent/ptxas", 1);
    setenv("S2C_NVJITLINK", fake_nvjitlink, 1);
    s2_ctx *ctx = s2_ctx_new();
    const char *id = NULL;
    ck_assert_msg(s2_toolchain_version(ctx, S2_CUBIN_NVJITLINK, &id) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_str_eq(id, "nvjitlink-12.4");
    const char ptx[] = ".version 8.0\n.target sm_90a\n.address_size 64\n";
    uint8_t *cubin = NULL;
    size_t size = 0;
    char *log = NULL;
    s2_status st = s2_ptx_to_cubin(ctx, ptx, sizeof ptx - 1, S2_ARCH_SM90A, S2_CUBIN_AUTO, &cubin, &size, &log, NULL,
                                   NULL, NULL);
    ck_assert_int_eq(st, S2_ERR_TOOLCHAIN);
    ck_assert_msg(strstr(s2_ctx_message(ctx), "fake nvJitLink 12.4: no linker here"), "%s", s2_ctx_message(ctx));
    free(log);
    setenv("S2C_NVJITLINK", "/nonexistent/libnvJitLink.so.12", 1);
    st = s2_ptx_to_cubin(ctx, ptx, sizeof ptx - 1, S2_ARCH_SM90A, S2_CUBIN_AUTO, &cubin, &size, &log, NULL, NULL, NULL);
    ck_assert_int_eq(st, S2_ERR_TOOLCHAIN);
    ck_assert_msg(strstr(s2_ctx_message(ctx), "ptxas not found and libnvJitLink (13 or 12) could not be loaded; tried "
                                              "/nonexistent/libnvJitLink.so.12 (set S2C_NVJITLINK to its path)"),
                  "%s", s2_ctx_message(ctx));
    free(log);
    s2_ctx_free(ctx);
}
END_TEST

static char *make_tmpdir(void)
{
    char tmpl[] = "/tmp/s2c-test-XXXXXX";
    char *d = mkdtemp(tmpl);
    ck_assert_ptr_nonnull(d);
    return strdup(d);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *d = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(d, 1, (size_t)n, f), (size_t)n);
    d[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t)n;
    return d;
}

static void rm_stage_files(const char *dir, const char *name)
{
    static const char *const exts[] = {".pre.ll", ".ll", ".ptx", ".cubin"};
    char path[512];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s%s", dir, name, exts[i]);
        unlink(path);
    }
    rmdir(dir);
}

START_TEST(dump_and_override)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = make_pattern(ctx, 3);
    s2_target t;
    s2_target_default(&t, S2_ARCH_SM80);
    char *dump = make_tmpdir(), *over = make_tmpdir();
    ck_assert_int_eq(s2_ctx_set_dump_dir(ctx, dump), S2_OK);
    s2_artifact *art = NULL;
    ck_assert_msg(s2_compile_row_softmax(ctx, s2_pattern_set_get(set, 0), &t, S2_CUBIN_AUTO, &art) == S2_OK,
                  "%s", s2_ctx_message(ctx));

    /* every stage was dumped, byte for byte what the artifact holds */
    char path[512];
    size_t len;
    snprintf(path, sizeof path, "%s/%s.pre.ll", dump, art->name);
    char *text = slurp(path, NULL);
    ck_assert_ptr_nonnull(text);
    ck_assert_str_eq(text, art->ir_pre);
    free(text);
    snprintf(path, sizeof path, "%s/%s.ll", dump, art->name);
    text = slurp(path, NULL);
    ck_assert_ptr_nonnull(text);
    ck_assert_str_eq(text, art->ir);
    free(text);
    snprintf(path, sizeof path, "%s/%s.cubin", dump, art->name);
    text = slurp(path, &len);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(len, art->cubin_size);
    ck_assert(memcmp(text, art->cubin, len) == 0);
    free(text);
    snprintf(path, sizeof path, "%s/%s.ptx", dump, art->name);
    char *ptx = slurp(path, &len);
    ck_assert_ptr_nonnull(ptx);
    ck_assert_uint_eq(len, art->ptx_len);

    /* hand-edit the PTX: a marker comment and one extra instruction */
    static const char marker[] = "// s2c-test: hand-edited PTX\n";
    char *edited = malloc(len + sizeof marker);
    memcpy(edited, marker, sizeof marker - 1);
    memcpy(edited + sizeof marker - 1, ptx, len);
    snprintf(path, sizeof path, "%s/%s.ptx", over, art->name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fwrite(edited, 1, len + sizeof marker - 1, f);
    fclose(f);

    ck_assert_int_eq(s2_ctx_set_dump_dir(ctx, NULL), S2_OK);
    ck_assert_int_eq(s2_ctx_set_override_dir(ctx, over), S2_OK);
    s2_artifact *art2 = NULL;
    ck_assert_msg(s2_compile_row_softmax(ctx, s2_pattern_set_get(set, 0), &t, S2_CUBIN_PTXAS, &art2) == S2_OK,
                  "%s", s2_ctx_message(ctx));
    ck_assert_uint_eq(art2->ptx_len, len + sizeof marker - 1);
    ck_assert(strncmp(art2->ptx, marker, sizeof marker - 1) == 0);
    ck_assert(memcmp(art2->cubin, "\177ELF", 4) == 0);
    ck_assert_int_gt(art2->kernels[0].registers, 0);

    /* a broken override PTX reaches the assembler and fails there */
    f = fopen(path, "wb");
    fputs(bad_ptx, f);
    fclose(f);
    s2_artifact *art3 = NULL;
    ck_assert_int_eq(s2_compile_row_softmax(ctx, s2_pattern_set_get(set, 0), &t, S2_CUBIN_PTXAS, &art3),
                     S2_ERR_TOOLCHAIN);
    ck_assert_ptr_null(art3);

    free(edited);
    free(ptx);
    rm_stage_files(dump, art->name);
    rm_stage_files(over, art->name);
    s2_artifact_free(art);
    s2_artifact_free(art2);
    free(dump);
    free(over);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(unsupported_patterns)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = make_pattern(ctx, 0);
    s2_pattern p = *s2_pattern_set_get(set, 0);
    s2_target t;
    s2_target_default(&t, S2_ARCH_SM80);
    s2_artifact *art = NULL;

    s2_range_rule range = {.action = S2_RANGE_SINK};
    p.ranges = &range;
    p.num_ranges = 1;
    ck_assert_int_eq(s2_compile_row_softmax(ctx, &p, &t, S2_CUBIN_AUTO, &art), S2_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "context-range"));
    ck_assert_ptr_null(art);

    p.ranges = NULL;
    p.num_ranges = 0;
    s2_head_rule rules[8];
    memcpy(rules, p.rules, sizeof rules);
    rules[5].mask = 0;
    p.rules = rules;
    ck_assert_int_eq(s2_compile_row_softmax(ctx, &p, &t, S2_CUBIN_AUTO, &art), S2_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "explicit mask"));
    ck_assert_ptr_null(art);

    t.arch = (s2_arch)17;
    p.rules = s2_pattern_set_get(set, 0)->rules;
    ck_assert_int_eq(s2_compile_row_softmax(ctx, &p, &t, S2_CUBIN_AUTO, &art), S2_ERR_INVALID);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(arch_names)
{
    s2_arch a;
    ck_assert_int_eq(s2_arch_parse("sm_90a", &a), S2_OK);
    ck_assert_int_eq(a, S2_ARCH_SM90A);
    ck_assert_int_eq(s2_arch_parse("sm_80", &a), S2_OK);
    ck_assert_int_eq(a, S2_ARCH_SM80);
    ck_assert_int_eq(s2_arch_parse("90", &a), S2_OK);
    ck_assert_int_eq(a, S2_ARCH_SM90);
    ck_assert_int_eq(s2_arch_parse("sm_75", &a), S2_ERR_UNSUPPORTED);
    ck_assert_str_eq(s2_arch_name(S2_ARCH_SM90A), "sm_90a");
    ck_assert_int_eq(s2_arch_for_device(8, 6, &a), S2_OK);
    ck_assert_int_eq(a, S2_ARCH_SM80);
    ck_assert_int_eq(s2_arch_for_device(9, 0, &a), S2_OK);
    ck_assert_int_eq(a, S2_ARCH_SM90A);
    ck_assert_int_eq(s2_arch_for_device(12, 0, &a), S2_ERR_UNSUPPORTED);
}
END_TEST

/* The helpers the softmax does not use yet: barrier and inline PTX. */
START_TEST(barrier_and_inline_asm_helpers)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_target t;
    s2_target_default(&t, archs[_i]);
    s2_cg cg;
    ck_assert_int_eq(s2_cg_init(ctx, &cg, &t, "helpers"), S2_OK);
    LLVMValueRef fn = s2_nv_kernel_new(&cg, "helpers", &cg.t_ptr_global, 1, 64, 2);
    LLVMValueRef tid = s2_nv_tid_x(&cg);
    s2_nv_barrier_cta(&cg);
    LLVMValueRef clk = s2_nv_inline_asm(&cg, cg.t_i32, "mov.u32 $0, %clock;", "=r", NULL, 0);
    LLVMValueRef v = LLVMBuildUIToFP(cg.b, LLVMBuildAdd(cg.b, clk, tid, ""), cg.t_f32, "");
    s2_nv_store_global_f32(&cg, LLVMGetParam(fn, 0), LLVMBuildZExt(cg.b, tid, cg.t_i64, ""), v, 4);
    LLVMBuildRetVoid(cg.b);
    s2_artifact *art = s2_artifact_new(&t, "helpers");
    s2_status st = s2_cg_finish(ctx, &cg, S2_CUBIN_PTXAS, art);
    ck_assert_msg(st == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_ptr_nonnull(strstr(art->ptx, "bar.sync"));
    ck_assert_ptr_nonnull(strstr(art->ptx, "%clock"));
    ck_assert_ptr_nonnull(strstr(art->ptx, ".maxntid 64"));
    ck_assert_ptr_nonnull(strstr(art->ptx, ".minnctapersm 2"));
    ck_assert_int_gt(art->kernels[0].registers, 0);
    s2_artifact_free(art);
    s2_cg_destroy(&cg);
    s2_cg_destroy(&cg); /* tolerates a second destroy */
    s2_ctx_free(ctx);
}
END_TEST

START_TEST(resource_log_parsing)
{
    /* ptxas -v layout, two kernels, one with smem and spills */
    const char *log =
        "ptxas info    : 0 bytes gmem\n"
        "ptxas info    : Compiling entry function 'k_a' for 'sm_90a'\n"
        "ptxas info    : Function properties for k_a\n"
        "    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
        "ptxas info    : Used 168 registers, used 1 barriers, 2048 bytes smem, 400 bytes cmem[0]\n"
        "ptxas info    : Compiling entry function 'k_b' for 'sm_90a'\n"
        "ptxas info    : Function properties for k_b\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 9 registers, used 0 barriers, 392 bytes cmem[0]\n";
    s2_kernel_info k[4];
    ck_assert_int_eq(s2_parse_resources(log, k, 4), 2);
    ck_assert_str_eq(k[0].name, "k_a");
    ck_assert_int_eq(k[0].registers, 168);
    ck_assert_int_eq(k[0].stack_frame, 16);
    ck_assert_int_eq(k[0].spill_stores, 8);
    ck_assert_int_eq(k[0].spill_loads, 12);
    ck_assert_int_eq(k[0].shared_static, 2048);
    ck_assert_str_eq(k[1].name, "k_b");
    ck_assert_int_eq(k[1].registers, 9);
    ck_assert_int_eq(k[1].shared_static, 0);
    ck_assert_int_eq(s2_cubin_regcount((const uint8_t *)"not an elf", 10, "k_a"), -1);
}
END_TEST

static Suite *codegen_suite(void)
{
    Suite *s = suite_create("codegen");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, softmax_all_archs_both_assemblers, 0, NUM_ARCHS * NUM_PATTERNS);
    tcase_add_test(tc, bad_ptx_is_a_toolchain_error);
    tcase_add_test(tc, missing_ptxas);
    tcase_add_test(tc, dump_and_override);
    tcase_add_test(tc, unsupported_patterns);
    tcase_add_test(tc, arch_names);
    tcase_add_loop_test(tc, barrier_and_inline_asm_helpers, 0, NUM_ARCHS);
    tcase_add_test(tc, resource_log_parsing);
    tcase_add_test(tc, nvjitlink_12_and_the_search_list);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    fake_nvjitlink = argc > 1 ? argv[1] : "";
    return s2t_run_suite(codegen_suite());
}
