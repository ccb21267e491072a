/* AOT C emitter (driver/emit_c.c): the generated files compile cleanly with
 * the system C compiler, and a host program that includes the generated .c
 * and defines the Driver API entry points itself (no libcuda) checks what
 * load/unload/launchers hand to the driver: the image, the kernel names,
 * the shared-memory attribute, grid, block, stream and every argument. */
#include "s2c/aot.h"
#include "util.h"
#include "check_main.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef S2C_CUDA_INCLUDE
#define S2C_CUDA_INCLUDE "/usr/local/cuda/include"
#endif

static char g_tmp[256];

static void make_tmp(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/s2c-aot-test-XXXXXX", base && base[0] ? base : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(g_tmp));
}

static void drop_tmp(void)
{
    DIR *d = opendir(g_tmp);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", g_tmp, e->d_name);
        if (e->d_name[0] != '.')
            unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(g_tmp);
}

static const char *compiler(void)
{
    const char *cc = getenv("CC");
    return cc && cc[0] ? cc : "cc";
}

/* A fake cubin: an ELF magic, then bytes of every value (337 bytes: not a
 * multiple of 16). */
enum { FAKE_SIZE = 337 };
static void fake_cubin(uint8_t *out)
{
    memcpy(out, "\177ELF", 4);
    uint32_t x = 12345;
    for (int i = 4; i < FAKE_SIZE; i++) {
        x = x * 1103515245u + 12345u;
        out[i] = (uint8_t)(i < 260 ? (uint32_t)(i - 4) : x >> 16);
    }
}

/* Quotes, backslashes, a trigraph, a tab, control and non-ASCII bytes, no
 * trailing newline. */
static const char tricky_manifest[] = "s2c-manifest 1\ngenerator 0.1.0\nname \"fwd\" \\path\\ ?\?/ ?\?= x\n"
                                      "tab\there\n\001\177\200\377 end";

static const s2_aot_kernel two_kernels[] = {
    {.name = "fwd_a", .symbol = "s2c_fwd_bf16_d128", .threads = 256, .smem_bytes = 98304},
    {.name = "fwd_b", .symbol = "s2c_fwd_f16_d64", .threads = 128, .smem_bytes = 0},
};

static s2_aot_module test_module(s2_aot_kernel *k, const uint8_t *cubin)
{
    for (int i = 0; i < 2; i++) {
        k[i] = two_kernels[i];
        k[i].abi = s2_aot_abi_attn_fwd();
    }
    return (s2_aot_module){.name = "s2fwd", .cubin = cubin, .cubin_size = FAKE_SIZE,
                           .manifest = tricky_manifest, .kernels = k, .num_kernels = 2};
}

static void write_file(const char *dir, const char *name, const void *data, size_t n)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_assert_int_eq(s2_write_file_atomic(NULL, path, data, n), S2_OK);
}

static int run(const char *cmd)
{
    int rc = system(cmd);
    return rc == -1 ? -1 : WEXITSTATUS(rc);
}

START_TEST(generated_files_compile_cleanly)
{
    make_tmp();
    uint8_t cubin[FAKE_SIZE];
    fake_cubin(cubin);
    s2_aot_kernel k[2];
    s2_aot_module m = test_module(k, cubin);
    s2_ctx *ctx = s2_ctx_new();
    ck_assert_msg(s2_aot_write(ctx, &m, g_tmp) == S2_OK, "%s", s2_ctx_message(ctx));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && %s -std=c11 -Wall -Wextra -Werror -c -I'%s' s2fwd.c -o s2fwd.o 2>&1",
             g_tmp, compiler(), S2C_CUDA_INCLUDE);
    ck_assert_msg(run(cmd) == 0, "%s", cmd);
    /* the header on its own */
    snprintf(cmd, sizeof cmd, "cd '%s' && printf '#include \"s2fwd.h\"\\nint s2fwd_probe;\\n' > h.c && "
                              "%s -std=c11 -Wall -Wextra -Werror -c -I'%s' h.c -o h.o 2>&1",
             g_tmp, compiler(), S2C_CUDA_INCLUDE);
    ck_assert_msg(run(cmd) == 0, "%s", cmd);
    s2_ctx_free(ctx);
    drop_tmp();
}
END_TEST

/* Nothing in the generated text may print, exit or abort; the image is
 * written 16 bytes a line; the same input gives the same text. */
START_TEST(generated_text)
{
    uint8_t cubin[FAKE_SIZE];
    fake_cubin(cubin);
    s2_aot_kernel k[2];
    s2_aot_module m = test_module(k, cubin);
    s2_ctx *ctx = s2_ctx_new();
    char *h, *c, *h2, *c2;
    ck_assert_int_eq(s2_aot_emit(ctx, &m, &h, &c), S2_OK);
    static const char *const banned[] = {"exit", "abort", "printf", "puts", "stderr", "stdout", "assert", "malloc"};
    for (size_t i = 0; i < sizeof banned / sizeof banned[0]; i++) {
        ck_assert_msg(strstr(c, banned[i]) == NULL, "generated .c contains %s", banned[i]);
        ck_assert_msg(strstr(h, banned[i]) == NULL, "generated .h contains %s", banned[i]);
    }
    /* 21 full lines of 16 and one of 1 */
    const char *p = strstr(c, "s2fwd_cubin[337] = {\n");
    ck_assert_ptr_nonnull(p);
    p = strchr(p, '\n') + 1;
    for (int line = 0; line < 22; line++) {
        const char *nl = strchr(p, '\n');
        int commas = 0;
        for (const char *q = p; q < nl; q++)
            commas += *q == ',';
        ck_assert_int_eq(commas, line < 21 ? 16 : 1);
        unsigned first;
        ck_assert_int_eq(sscanf(p, " 0x%2x,", &first), 1);
        ck_assert_uint_eq(first, cubin[line * 16]);
        p = nl + 1;
    }
    ck_assert(strncmp(p, "};\n", 3) == 0);
    /* the launcher signature follows the descriptor table */
    ck_assert_ptr_nonnull(strstr(h, "CUresult s2fwd_fwd_a(CUstream stream,\n    CUdeviceptr q,\n    CUdeviceptr k,"));
    ck_assert_ptr_nonnull(strstr(h, "    float scale_log2,\n    CUdeviceptr class_of_head,"));
    ck_assert_ptr_nonnull(strstr(h, "    int32_t q_tiles,\n    CUdeviceptr seqinfo,\n    int32_t heads,\n    int32_t batch);"));
    ck_assert_ptr_nonnull(strstr(h, "CUresult load_s2fwd(void);"));
    ck_assert_ptr_nonnull(strstr(h, "CUresult unload_s2fwd(void);"));
    ck_assert_ptr_nonnull(strstr(h, "#ifndef S2FWD_H"));

    ck_assert_int_eq(s2_aot_emit(ctx, &m, &h2, &c2), S2_OK);
    ck_assert_str_eq(h, h2);
    ck_assert_str_eq(c, c2);
    free(h);
    free(c);
    free(h2);
    free(c2);
    s2_ctx_free(ctx);
}
END_TEST

/* A tensor-map forward: the maps are not launcher arguments, kv_heads and
 * kv_rows are; three encodes with the kernel's dtype, D and box rows. */
START_TEST(tma_text)
{
    uint8_t cubin[FAKE_SIZE];
    fake_cubin(cubin);
    s2_aot_kernel k = {.name = "fwd", .symbol = "s2_fwd_x_f16_d128", .abi = s2_aot_abi_attn_fwd_tma(), .threads = 384,
                       .smem_bytes = 180000, .dtype = S2_DTYPE_F16, .head_dim = 128, .kv_box_rows = 32};
    s2_aot_module m = {.name = "t", .cubin = cubin, .cubin_size = FAKE_SIZE, .kernels = &k, .num_kernels = 1};
    s2_ctx *ctx = s2_ctx_new();
    char *h, *c;
    ck_assert_msg(s2_aot_emit(ctx, &m, &h, &c) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_ptr_null(strstr(h, "_map"));
    ck_assert_ptr_nonnull(strstr(h, "    int32_t q_tiles,\n    CUdeviceptr seqinfo,\n    int32_t heads,\n    int32_t batch,\n"
                                    "    int32_t kv_heads,\n    int64_t kv_rows);"));
    ck_assert_ptr_nonnull(strstr(c, "&q_tiles, &q_map, &k_map, &v_map, &seqinfo\n"));
    ck_assert_ptr_nonnull(strstr(c, "t_encode_map(&q_map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, q, 128, 2, (int64_t)q_len, "
                                    "(int64_t)heads, s2_tb,\n        q_stride_b, q_stride_s, q_stride_h, 64);"));
    ck_assert_ptr_nonnull(strstr(c, "t_encode_map(&v_map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, v, 128, 2, (int64_t)kv_rows, "
                                    "(int64_t)kv_heads, s2_tb,\n        v_stride_b, v_stride_s, v_stride_h, 32);"));
    ck_assert_ptr_nonnull(strstr(c, "s2_tb = seqinfo != 0 ? 1 : (int64_t)batch;"));
    ck_assert_ptr_null(strstr(c, "(void)kv_rows"));
    free(h);
    free(c);
    s2_ctx_free(ctx);
}
END_TEST

/* The host program: stubs of the five driver calls, then the checks. */
static const char host_program[] =
    "#include \"s2fwd.c\"\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "static int fails;\n"
    "#define EXPECT(c) do { if (!(c)) { printf(\"FAIL %d: %s\\n\", __LINE__, #c); fails++; } } while (0)\n"
    "static CUresult rc_load, rc_getfn, rc_attr, rc_unload, rc_launch;\n"
    "static const void *seen_image;\n"
    "static int loads, unloads, getfns, attrs, launches;\n"
    "static char names[16][64];\n"
    "static CUfunction name_fn[16];\n"
    "static int attr_value[16];\n"
    "static CUfunction attr_fn[16];\n"
    "#define FAKE_MODULE ((CUmodule)(uintptr_t)0x1000)\n"
    "struct fwd_args { CUdeviceptr q, k, v, o, lse; int64_t st[12]; int32_t q_len, kv_len; float scale_log2;\n"
    "                  CUdeviceptr class_of_head, offsets, entries; int32_t first_q_tile, q_tiles;\n"
    "                  CUdeviceptr seqinfo; };\n"
    "static struct { CUfunction f; unsigned g[3], b[3], smem; CUstream s; void **extra; struct fwd_args a; } last;\n"
    "CUresult cuModuleLoadData(CUmodule *m, const void *image)\n"
    "{ loads++; seen_image = image; if (rc_load != CUDA_SUCCESS) return rc_load; *m = FAKE_MODULE; return CUDA_SUCCESS; }\n"
    "CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)\n"
    "{ EXPECT(m == FAKE_MODULE); snprintf(names[getfns % 16], 64, \"%s\", name);\n"
    "  *f = (CUfunction)(uintptr_t)(0x2000 + getfns); name_fn[getfns % 16] = *f; getfns++; return rc_getfn; }\n"
    "CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v)\n"
    "{ EXPECT(a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES); attr_fn[attrs % 16] = f;\n"
    "  attr_value[attrs % 16] = v; attrs++; return rc_attr; }\n"
    "CUresult cuModuleUnload(CUmodule m) { EXPECT(m == FAKE_MODULE); unloads++; return rc_unload; }\n"
    "CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,\n"
    "                        unsigned bz, unsigned smem, CUstream s, void **p, void **extra)\n"
    "{\n"
    "  launches++; last.f = f; last.g[0] = gx; last.g[1] = gy; last.g[2] = gz; last.b[0] = bx; last.b[1] = by;\n"
    "  last.b[2] = bz; last.smem = smem; last.s = s; last.extra = extra;\n"
    "  struct fwd_args *a = &last.a; int i = 0, j;\n"
    "  a->q = *(CUdeviceptr *)p[i++]; a->k = *(CUdeviceptr *)p[i++]; a->v = *(CUdeviceptr *)p[i++];\n"
    "  a->o = *(CUdeviceptr *)p[i++]; a->lse = *(CUdeviceptr *)p[i++];\n"
    "  for (j = 0; j < 12; j++) a->st[j] = *(int64_t *)p[i++];\n"
    "  a->q_len = *(int32_t *)p[i++]; a->kv_len = *(int32_t *)p[i++]; a->scale_log2 = *(float *)p[i++];\n"
    "  a->class_of_head = *(CUdeviceptr *)p[i++]; a->offsets = *(CUdeviceptr *)p[i++];\n"
    "  a->entries = *(CUdeviceptr *)p[i++]; a->first_q_tile = *(int32_t *)p[i++]; a->q_tiles = *(int32_t *)p[i++];\n"
    "  a->seqinfo = *(CUdeviceptr *)p[i++];\n"
    "  return rc_launch;\n"
    "}\n"
    "static char *slurp(const char *path, size_t *n)\n"
    "{ FILE *f = fopen(path, \"rb\"); char *d = malloc(1 << 16); *n = fread(d, 1, 1 << 16, f); fclose(f); return d; }\n"
    "#define STREAM ((CUstream)(uintptr_t)0x77)\n"
    "static CUresult launch_a(int32_t q_tiles, int32_t heads, int32_t batch)\n"
    "{\n"
    "  return s2fwd_fwd_a(STREAM, 0x100000, 0x200000, 0x300000, 0x400000, 0x500000,\n"
    "                     1000000001, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -12,\n"
    "                     4093, 8191, 0.125f, 0x600000, 0x700000, 0x800000, 7, q_tiles, 0x900000, heads, batch);\n"
    "}\n"
    "int main(int argc, char **argv)\n"
    "{\n"
    "  size_t fake_n, man_n; char *fake, *man; int j;\n"
    "  if (argc != 3) return 2;\n"
    "  fake = slurp(argv[1], &fake_n); man = slurp(argv[2], &man_n);\n"
    "  EXPECT(s2fwd_cubin_size == fake_n && memcmp(s2fwd_cubin, fake, fake_n) == 0);\n"
    "  EXPECT(strlen(s2fwd_manifest) + 1 == sizeof s2fwd_manifest);\n"
    "  EXPECT(strlen(s2fwd_manifest) == man_n && memcmp(s2fwd_manifest, man, man_n) == 0);\n"
    "  /* not loaded */\n"
    "  EXPECT(launch_a(5, 12, 2) == CUDA_ERROR_NOT_INITIALIZED && launches == 0);\n"
    "  EXPECT(unload_s2fwd() == CUDA_SUCCESS && unloads == 0);\n"
    "  /* each failing step is returned, and what was loaded is unloaded */\n"
    "  rc_load = CUDA_ERROR_INVALID_IMAGE;\n"
    "  EXPECT(load_s2fwd() == CUDA_ERROR_INVALID_IMAGE && loads == 1 && unloads == 0 && getfns == 0);\n"
    "  EXPECT(launch_a(5, 12, 2) == CUDA_ERROR_NOT_INITIALIZED);\n"
    "  rc_load = CUDA_SUCCESS; rc_getfn = CUDA_ERROR_NOT_FOUND;\n"
    "  EXPECT(load_s2fwd() == CUDA_ERROR_NOT_FOUND && loads == 2 && unloads == 1);\n"
    "  EXPECT(launch_a(5, 12, 2) == CUDA_ERROR_NOT_INITIALIZED);\n"
    "  rc_getfn = CUDA_SUCCESS; rc_attr = CUDA_ERROR_INVALID_VALUE;\n"
    "  EXPECT(load_s2fwd() == CUDA_ERROR_INVALID_VALUE && loads == 3 && unloads == 2);\n"
    "  EXPECT(launch_a(5, 12, 2) == CUDA_ERROR_NOT_INITIALIZED);\n"
    "  /* a good load: the embedded image, both symbols, the shared-memory limit of the first */\n"
    "  rc_attr = CUDA_SUCCESS; getfns = 0; attrs = 0;\n"
    "  EXPECT(load_s2fwd() == CUDA_SUCCESS && loads == 4);\n"
    "  EXPECT(seen_image == (const void *)s2fwd_cubin);\n"
    "  EXPECT(memcmp(seen_image, fake, fake_n) == 0);\n"
    "  EXPECT(getfns == 2 && strcmp(names[0], \"s2c_fwd_bf16_d128\") == 0 && strcmp(names[1], \"s2c_fwd_f16_d64\") == 0);\n"
    "  EXPECT(attrs == 1 && attr_value[0] == 98304 && attr_fn[0] == name_fn[0]);\n"
    "  EXPECT(load_s2fwd() == CUDA_SUCCESS && loads == 4);\n"
    "  /* launches: grid from the arguments, the driver's result passed through */\n"
    "  rc_launch = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;\n"
    "  EXPECT(launch_a(5, 12, 2) == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES && launches == 1);\n"
    "  EXPECT(last.f == name_fn[0] && last.s == STREAM && last.extra == NULL);\n"
    "  EXPECT(last.g[0] == 5 && last.g[1] == 12 && last.g[2] == 2);\n"
    "  EXPECT(last.b[0] == 256 && last.b[1] == 1 && last.b[2] == 1 && last.smem == 98304);\n"
    "  EXPECT(last.a.q == 0x100000 && last.a.k == 0x200000 && last.a.v == 0x300000 && last.a.o == 0x400000);\n"
    "  EXPECT(last.a.lse == 0x500000 && last.a.st[0] == 1000000001 && last.a.st[11] == -12);\n"
    "  for (j = 1; j < 11; j++) EXPECT(last.a.st[j] == j + 1);\n"
    "  EXPECT(last.a.q_len == 4093 && last.a.kv_len == 8191 && last.a.scale_log2 == 0.125f);\n"
    "  EXPECT(last.a.class_of_head == 0x600000 && last.a.offsets == 0x700000 && last.a.entries == 0x800000);\n"
    "  EXPECT(last.a.first_q_tile == 7 && last.a.q_tiles == 5 && last.a.seqinfo == 0x900000);\n"
    "  rc_launch = CUDA_SUCCESS;\n"
    "  EXPECT(s2fwd_fwd_b(NULL, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 64, 1.0f, 5, 6, 7, 0, 3, 0, 65535, 1)\n"
    "         == CUDA_SUCCESS && launches == 2);\n"
    "  EXPECT(last.f == name_fn[1] && last.b[0] == 128 && last.smem == 0 && last.s == NULL);\n"
    "  EXPECT(last.g[0] == 3 && last.g[1] == 65535 && last.g[2] == 1 && last.a.lse == 0 && last.a.q_tiles == 3 && last.a.seqinfo == 0);\n"
    "  /* empty grids launch nothing; bad ones are refused */\n"
    "  EXPECT(launch_a(0, 12, 2) == CUDA_SUCCESS && launches == 2);\n"
    "  EXPECT(launch_a(5, 0, 2) == CUDA_SUCCESS && launches == 2);\n"
    "  EXPECT(launch_a(5, 65536, 2) == CUDA_ERROR_INVALID_VALUE && launches == 2);\n"
    "  EXPECT(launch_a(5, 12, -1) == CUDA_ERROR_INVALID_VALUE && launches == 2);\n"
    "  EXPECT(launch_a(-3, 12, 2) == CUDA_ERROR_INVALID_VALUE && launches == 2);\n"
    "  EXPECT(launch_a(2147483647, 1, 1) == CUDA_SUCCESS && launches == 3 && last.g[0] == 2147483647u);\n"
    "  /* unload passes the driver's result on and forgets the functions */\n"
    "  rc_unload = CUDA_ERROR_DEINITIALIZED;\n"
    "  EXPECT(unload_s2fwd() == CUDA_ERROR_DEINITIALIZED && unloads == 3);\n"
    "  EXPECT(launch_a(5, 12, 2) == CUDA_ERROR_NOT_INITIALIZED && launches == 3);\n"
    "  EXPECT(unload_s2fwd() == CUDA_SUCCESS && unloads == 3);\n"
    "  free(fake); free(man);\n"
    "  if (fails == 0) printf(\"PASS\\n\");\n"
    "  return fails != 0;\n"
    "}\n";

START_TEST(host_program_with_stub_driver)
{
    make_tmp();
    uint8_t cubin[FAKE_SIZE];
    fake_cubin(cubin);
    s2_aot_kernel k[2];
    s2_aot_module m = test_module(k, cubin);
    s2_ctx *ctx = s2_ctx_new();
    ck_assert_msg(s2_aot_write(ctx, &m, g_tmp) == S2_OK, "%s", s2_ctx_message(ctx));
    write_file(g_tmp, "fake.bin", cubin, FAKE_SIZE);
    write_file(g_tmp, "manifest.txt", tricky_manifest, strlen(tricky_manifest));
    write_file(g_tmp, "host.c", host_program, strlen(host_program));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && %s -std=c11 -Wall -Wextra -Werror -I'%s' host.c -o host 2>&1",
             g_tmp, compiler(), S2C_CUDA_INCLUDE);
    ck_assert_msg(run(cmd) == 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "cd '%s' && ./host fake.bin manifest.txt > out.txt 2>&1", g_tmp);
    int rc = run(cmd);
    char path[600], *out;
    size_t n;
    snprintf(path, sizeof path, "%s/out.txt", g_tmp);
    ck_assert_int_eq(s2_read_file(ctx, path, &out, &n), S2_OK);
    ck_assert_msg(rc == 0 && strcmp(out, "PASS\n") == 0, "host program (exit %d):\n%s", rc, out);
    free(out);
    s2_ctx_free(ctx);
    drop_tmp();
}
END_TEST

/* A single-kernel module whose ABI has no launch arguments, a constant grid
 * dimension and an I64 grid source; and one with no parameters at all. */
START_TEST(other_abis_compile)
{
    make_tmp();
    static const s2_aot_param p1[] = {{"x", S2_AOT_PTR}, {"rows", S2_AOT_I64}, {"alpha", S2_AOT_F32}};
    static const s2_aot_abi abi1 = {.name = "rows", .params = p1, .num_params = 3, .grid = {"rows", NULL, NULL}};
    static const s2_aot_param l2[] = {{"n", S2_AOT_I32}, {"unused", S2_AOT_I64}};
    static const s2_aot_abi abi2 = {.name = "bare", .launch_args = l2, .num_launch_args = 2, .grid = {NULL, "n", NULL}};
    uint8_t cubin[FAKE_SIZE];
    fake_cubin(cubin);
    s2_aot_kernel k[2] = {{.name = "rows", .symbol = "rows_kernel", .abi = &abi1, .threads = 1024, .smem_bytes = 0},
                          {.name = "bare", .symbol = "bare_kernel", .abi = &abi2, .threads = 1, .smem_bytes = 16}};
    s2_aot_module m = {.name = "other", .cubin = cubin, .cubin_size = 16, .manifest = NULL, .kernels = k, .num_kernels = 2};
    s2_ctx *ctx = s2_ctx_new();
    ck_assert_msg(s2_aot_write(ctx, &m, g_tmp) == S2_OK, "%s", s2_ctx_message(ctx));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && %s -std=c11 -Wall -Wextra -Werror -c -I'%s' other.c -o other.o 2>&1",
             g_tmp, compiler(), S2C_CUDA_INCLUDE);
    ck_assert_msg(run(cmd) == 0, "%s", cmd);
    char *h, *c;
    ck_assert_int_eq(s2_aot_emit(ctx, &m, &h, &c), S2_OK);
    ck_assert_ptr_nonnull(strstr(c, "const char other_manifest[] = \"\";"));
    ck_assert_ptr_nonnull(strstr(c, "(void)unused;"));
    ck_assert_ptr_nonnull(strstr(c, "stream, NULL, NULL);"));
    free(h);
    free(c);
    s2_ctx_free(ctx);
    drop_tmp();
}
END_TEST

/* NAME_combine's launcher against stub driver calls: the by-value table it
 * builds from o_in / lse_in (zeros past n_in and for a NULL list), the other
 * parameters in ABI order, the grid cdiv(rows, 8) (128 threads at D 128),
 * and n_in outside 1..64 refused unlaunched. */
static const char combine_program[] =
    "#include \"cmb.c\"\n"
    "#include <stdio.h>\n"
    "#include <string.h>\n"
    "static int fails, launches;\n"
    "#define EXPECT(c) do { if (!(c)) { printf(\"FAIL %d: %s\\n\", __LINE__, #c); fails++; } } while (0)\n"
    "static uint64_t table[128];\n"
    "static unsigned grid[3], block, smem;\n"
    "static int64_t ints[12];\n"
    "static int32_t small[4];\n"
    "static uint64_t sinks;\n"
    "CUresult cuModuleLoadData(CUmodule *m, const void *image) { (void)image; *m = (CUmodule)(uintptr_t)8; return CUDA_SUCCESS; }\n"
    "CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)\n"
    "{ (void)m; EXPECT(strcmp(name, \"s2_dec_x_combine\") == 0); *f = (CUfunction)(uintptr_t)16; return CUDA_SUCCESS; }\n"
    "CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) { (void)f; (void)a; (void)v; return CUDA_ERROR_UNKNOWN; }\n"
    "CUresult cuModuleUnload(CUmodule m) { (void)m; return CUDA_SUCCESS; }\n"
    "CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,\n"
    "                        unsigned bz, unsigned sm, CUstream s, void **p, void **extra)\n"
    "{\n"
    "  int i;\n"
    "  (void)f; (void)by; (void)bz; (void)s; (void)extra;\n"
    "  launches++; grid[0] = gx; grid[1] = gy; grid[2] = gz; block = bx; smem = sm;\n"
    "  memcpy(table, p[0], sizeof table);\n"
    "  for (i = 0; i < 12; i++) ints[i] = *(int64_t *)p[1 + i];\n"
    "  for (i = 0; i < 4; i++) small[i] = *(int32_t *)p[13 + i];\n"
    "  sinks = *(uint64_t *)p[17];\n"
    "  return CUDA_SUCCESS;\n"
    "}\n"
    "int main(void)\n"
    "{\n"
    "  const CUdeviceptr o_in[3] = {0x1000, 0x2000, 0x3000}, lse_in[3] = {0x4000, 0x5000, 0x6000};\n"
    "  int i;\n"
    "  EXPECT(load_cmb() == CUDA_SUCCESS);\n"
    "  EXPECT(cmb_comb(NULL, 0, 0, 0, 0, 1, 2, 3, 0x7000, 4, 5, 6, 0x8000, 3, 7, 9, 17, 0xb000, o_in, lse_in) == CUDA_SUCCESS);\n"
    "  EXPECT(launches == 1 && grid[0] == 3 && grid[1] == 1 && grid[2] == 1 && block == 128 && smem == 0);\n"
    "  for (i = 0; i < 64; i++) EXPECT(table[i] == (i < 3 ? o_in[i] : 0) && table[64 + i] == (i < 3 ? lse_in[i] : 0));\n"
    "  EXPECT(ints[4] == 1 && ints[5] == 2 && ints[6] == 3 && ints[7] == 0x7000 && ints[10] == 6 && ints[11] == 0x8000);\n"
    "  EXPECT(small[0] == 3 && small[1] == 7 && small[2] == 9 && small[3] == 17 && sinks == 0xb000);\n"
    "  /* inputs at a base: NULL lists give zeros */\n"
    "  EXPECT(cmb_comb(NULL, 0x9000, 0xa000, 64, 8, 1, 2, 3, 0x7000, 4, 5, 6, 0, 2, 7, 9, 16, 0, NULL, NULL) == CUDA_SUCCESS);\n"
    "  EXPECT(launches == 2 && grid[0] == 2 && ints[0] == 0x9000 && ints[1] == 0xa000 && ints[2] == 64 && ints[3] == 8);\n"
    "  for (i = 0; i < 128; i++) EXPECT(table[i] == 0);\n"
    "  /* n_in outside 1..64, a bad grid: nothing launched; no rows: nothing to do */\n"
    "  EXPECT(cmb_comb(NULL, 0, 0, 0, 0, 1, 2, 3, 0x7000, 4, 5, 6, 0, 0, 7, 9, 16, 0, o_in, lse_in) == CUDA_ERROR_INVALID_VALUE);\n"
    "  EXPECT(cmb_comb(NULL, 0, 0, 0, 0, 1, 2, 3, 0x7000, 4, 5, 6, 0, 65, 7, 9, 16, 0, NULL, NULL) == CUDA_ERROR_INVALID_VALUE);\n"
    "  EXPECT(cmb_comb(NULL, 0, 0, 0, 0, 1, 2, 3, 0x7000, 4, 5, 6, 0, 1, 7, 9, -1, 0, o_in, lse_in) == CUDA_ERROR_INVALID_VALUE);\n"
    "  EXPECT(cmb_comb(NULL, 0, 0, 0, 0, 1, 2, 3, 0x7000, 4, 5, 6, 0, 1, 7, 9, 0, 0, o_in, lse_in) == CUDA_SUCCESS);\n"
    "  EXPECT(launches == 2);\n"
    "  if (fails == 0) printf(\"PASS\\n\");\n"
    "  return fails != 0;\n"
    "}\n";

START_TEST(combine_launcher)
{
    make_tmp();
    uint8_t cubin[FAKE_SIZE];
    fake_cubin(cubin);
    s2_aot_kernel k = {.name = "comb", .symbol = "s2_dec_x_combine", .abi = s2_aot_abi_attn_combine(), .threads = 128,
                       .grid_div = {8}};
    s2_aot_module m = {.name = "cmb", .cubin = cubin, .cubin_size = FAKE_SIZE, .kernels = &k, .num_kernels = 1};
    s2_ctx *ctx = s2_ctx_new();
    ck_assert_msg(s2_aot_write(ctx, &m, g_tmp) == S2_OK, "%s", s2_ctx_message(ctx));
    char *h, *c;
    ck_assert_int_eq(s2_aot_emit(ctx, &m, &h, &c), S2_OK);
    /* the table is not an argument; the two lists are the last ones */
    ck_assert_ptr_null(strstr(h, "inputs,"));
    ck_assert_ptr_nonnull(strstr(h, "    int32_t rows,\n    CUdeviceptr sinks,\n    const CUdeviceptr *o_in,\n    const CUdeviceptr *lse_in);"));
    ck_assert_ptr_nonnull(strstr(c, "        &inputs, &o_base, &lse_base,"));
    free(h);
    free(c);
    write_file(g_tmp, "host.c", combine_program, strlen(combine_program));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && %s -std=c11 -Wall -Wextra -Werror -I'%s' host.c -o host 2>&1 && ./host",
             g_tmp, compiler(), S2C_CUDA_INCLUDE);
    ck_assert_msg(run(cmd) == 0, "%s", cmd);
    s2_ctx_free(ctx);
    drop_tmp();
}
END_TEST

START_TEST(invalid_modules)
{
    uint8_t cubin[FAKE_SIZE];
    fake_cubin(cubin);
    s2_ctx *ctx = s2_ctx_new();
    char *h = (char *)1, *c = (char *)1;
    static const s2_aot_param dup[] = {{"a", S2_AOT_I32}, {"a", S2_AOT_I32}};
    static const s2_aot_param bad_name[] = {{"a b", S2_AOT_I32}};
    static const s2_aot_param keyword[] = {{"int", S2_AOT_I32}};
    static const s2_aot_param stream[] = {{"stream", S2_AOT_PTR}};
    static const s2_aot_param local[] = {{"s2_gx", S2_AOT_I32}};
    static const s2_aot_param null_name[] = {{"ok", S2_AOT_I32}, {NULL, S2_AOT_I32}};
    static const s2_aot_param bad_type[] = {{"a", (s2_aot_type)9}};
    static const s2_aot_param f32[] = {{"a", S2_AOT_F32}};
    static const s2_aot_param launch_dup[] = {{"q", S2_AOT_I32}};
    static const s2_aot_param tmap[] = {{"m", S2_AOT_TMAP}};
    static const s2_aot_param bytes[] = {{"inputs", S2_AOT_BYTES}, {"n_in", S2_AOT_I32}};
    static const s2_aot_param lists[] = {{"o_in", S2_AOT_PTR_LIST}, {"lse_in", S2_AOT_PTR_LIST}};
    static const s2_aot_param lists_n[] = {{"o_in", S2_AOT_PTR_LIST}, {"lse_in", S2_AOT_PTR_LIST}, {"n_in", S2_AOT_I64}};
    const s2_aot_abi *fwd = s2_aot_abi_attn_fwd();
    const s2_aot_abi *tma = s2_aot_abi_attn_fwd_tma();
    const s2_aot_abi *bwdt = s2_aot_abi_attn_bwd_dkdv_tma();
    const struct {
        const char *what;
        s2_aot_abi abi;
        const char *module, *kname, *symbol;
        int threads, smem, nk;
        size_t size;
        const char *msg;
    } cases[] = {
        {"duplicate", {.name = "x", .params = dup, .num_params = 2}, "m", "k", "s", 32, 0, 1, 16, "twice"},
        {"space", {.name = "x", .params = bad_name, .num_params = 1}, "m", "k", "s", 32, 0, 1, 16, "not usable"},
        {"keyword", {.name = "x", .params = keyword, .num_params = 1}, "m", "k", "s", 32, 0, 1, 16, "not usable"},
        {"stream", {.name = "x", .params = stream, .num_params = 1}, "m", "k", "s", 32, 0, 1, 16, "not usable"},
        {"local", {.name = "x", .params = local, .num_params = 1}, "m", "k", "s", 32, 0, 1, 16, "not usable"},
        {"null name", {.name = "x", .params = null_name, .num_params = 2}, "m", "k", "s", 32, 0, 1, 16, "not usable"},
        {"type", {.name = "x", .params = bad_type, .num_params = 1}, "m", "k", "s", 32, 0, 1, 16, "unknown type"},
        {"float grid", {.name = "x", .params = f32, .num_params = 1, .grid = {"a"}}, "m", "k", "s", 32, 0, 1, 16, "not an integer"},
        {"missing grid", {.name = "x", .params = f32, .num_params = 1, .grid = {NULL, "b"}}, "m", "k", "s", 32, 0, 1, 16, "not an integer"},
        {"launch dup", {.name = "x", .params = fwd->params, .num_params = fwd->num_params, .launch_args = launch_dup, .num_launch_args = 1},
         "m", "k", "s", 32, 0, 1, 16, "twice"},
        {"module name", *fwd, "2m", "k", "s", 32, 0, 1, 16, "module name"},
        {"kernel name", *fwd, "m", "k-1", "s", 32, 0, 1, 16, "kernel name"},
        {"reserved", *fwd, "m", "cubin", "s", 32, 0, 1, 16, "reserved"},
        {"no symbol", *fwd, "m", "k", "", 32, 0, 1, 16, "no symbol"},
        {"threads 0", *fwd, "m", "k", "s", 0, 0, 1, 16, "threads"},
        {"threads 2048", *fwd, "m", "k", "s", 2048, 0, 1, 16, "threads"},
        {"smem < 0", *fwd, "m", "k", "s", 32, -1, 1, 16, "shared memory"},
        {"no kernels", *fwd, "m", "k", "s", 32, 0, 0, 16, "no kernels"},
        {"no cubin", *fwd, "m", "k", "s", 32, 0, 1, 0, "no cubin"},
        {"map, no builder", {.name = "x", .params = tmap, .num_params = 1}, "m", "k", "s", 32, 0, 1, 16, "no way to build"},
        {"map launch arg", {.name = "x", .launch_args = tmap, .num_launch_args = 1}, "m", "k", "s", 32, 0, 1, 16,
         "is a tensor map"},
        {"builder, no maps", {.name = "x", .params = fwd->params, .num_params = fwd->num_params,
                              .launch_args = fwd->launch_args, .num_launch_args = fwd->num_launch_args,
                              .maps = S2_AOT_MAPS_ATTN_FWD}, "m", "k", "s", 32, 0, 1, 16, "q_map, k_map, v_map"},
        {"builder, no kv_rows", {.name = "x", .params = tma->params, .num_params = tma->num_params,
                                 .launch_args = tma->launch_args, .num_launch_args = 3, .maps = S2_AOT_MAPS_ATTN_FWD},
         "m", "k", "s", 32, 0, 1, 16, "need int64_t kv_rows"},
        {"unknown builder", {.name = "x", .maps = (s2_aot_maps)7}, "m", "k", "s", 32, 0, 1, 16, "unknown tensor-map"},
        {"maps without a shape", *tma, "m", "k", "s", 32, 0, 1, 16, "tensor maps of dtype"},
        {"bwd builder, fwd maps", {.name = "x", .params = tma->params, .num_params = tma->num_params,
                                   .launch_args = tma->launch_args, .num_launch_args = tma->num_launch_args,
                                   .maps = S2_AOT_MAPS_ATTN_BWD}, "m", "k", "s", 32, 0, 1, 16, "q_map, do_map"},
        {"bwd builder, no d_o", {.name = "x", .params = bwdt->params, .num_params = 1,
                                 .maps = S2_AOT_MAPS_ATTN_BWD}, "m", "k", "s", 32, 0, 1, 16, "q_map, do_map"},
        {"bwd maps without a shape", *bwdt, "m", "k", "s", 32, 0, 1, 16, "tensor maps of dtype"},
        {"table, no builder", {.name = "x", .params = bytes, .num_params = 2}, "m", "k", "s", 32, 0, 1, 16,
         "no way to build a table"},
        {"lists, no builder", {.name = "x", .launch_args = lists, .num_launch_args = 2}, "m", "k", "s", 32, 0, 1, 16,
         "no way to build a table"},
        {"list parameter", {.name = "x", .params = lists, .num_params = 2, .table = S2_AOT_TABLE_COMBINE},
         "m", "k", "s", 32, 0, 1, 16, "a list of pointers"},
        {"table launch arg", {.name = "x", .launch_args = bytes, .num_launch_args = 1, .table = S2_AOT_TABLE_COMBINE},
         "m", "k", "s", 32, 0, 1, 16, "is a by-value table"},
        {"unknown table", {.name = "x", .table = (s2_aot_table)5}, "m", "k", "s", 32, 0, 1, 16, "unknown table"},
        {"combine, no lists", {.name = "x", .params = bytes, .num_params = 2, .table = S2_AOT_TABLE_COMBINE},
         "m", "k", "s", 32, 0, 1, 16, "built from o_in and lse_in"},
        {"combine, n_in int64", {.name = "x", .params = bytes, .num_params = 1, .launch_args = lists_n,
                                 .num_launch_args = 3, .table = S2_AOT_TABLE_COMBINE},
         "m", "k", "s", 32, 0, 1, 16, "needs int32_t n_in"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        s2_aot_kernel k = {.name = cases[i].kname, .symbol = cases[i].symbol, .abi = &cases[i].abi,
                           .threads = cases[i].threads, .smem_bytes = cases[i].smem};
        s2_aot_module m = {.name = cases[i].module, .cubin = cubin, .cubin_size = cases[i].size, .kernels = &k,
                           .num_kernels = cases[i].nk};
        ck_assert_msg(s2_aot_emit(ctx, &m, &h, &c) == S2_ERR_INVALID, "%s accepted", cases[i].what);
        ck_assert_ptr_null(h);
        ck_assert_ptr_null(c);
        ck_assert_msg(strstr(s2_ctx_message(ctx), cases[i].msg) != NULL, "%s: \"%s\"", cases[i].what,
                      s2_ctx_message(ctx));
    }
    /* the backward's maps (spec.bwd_tma): q and d_o over q_len rows, heads, batch (1 with seqinfo),
     * block_m rows per box */
    s2_aot_kernel bk = {.name = "dkdv", .symbol = "s", .abi = bwdt, .threads = 128, .smem_bytes = 1024,
                        .dtype = S2_DTYPE_BF16, .head_dim = 128, .kv_box_rows = 64};
    s2_aot_module bm = {.name = "m", .cubin = cubin, .cubin_size = 16, .kernels = &bk, .num_kernels = 1};
    ck_assert_msg(s2_aot_emit(ctx, &bm, &h, &c) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_ptr_nonnull(strstr(c, "s2_r = m_encode_map(&q_map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, q, 128, 2, "
                                    "(int64_t)q_len, (int64_t)heads, s2_tb,\n        q_stride_b, q_stride_s, "
                                    "q_stride_h, 64);"));
    ck_assert_ptr_nonnull(strstr(c, "s2_r = m_encode_map(&do_map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, d_o, 128, 2, "
                                    "(int64_t)q_len, (int64_t)heads, s2_tb,\n        d_o_stride_b, "
                                    "d_o_stride_s, d_o_stride_h, 64);"));
    ck_assert_ptr_nonnull(strstr(c, "s2_tb = seqinfo != 0 ? 1 : (int64_t)batch;"));
    ck_assert_ptr_nonnull(strstr(c, "&q_map, &do_map, &seqinfo"));
    free(h);
    free(c);
    /* a divisor on a constant grid dimension, a negative one */
    s2_aot_kernel div = {.name = "k", .symbol = "s", .abi = &(s2_aot_abi){.name = "x", .grid = {NULL, NULL, NULL}},
                         .threads = 32, .grid_div = {4}};
    s2_aot_module dm = {.name = "m", .cubin = cubin, .cubin_size = 16, .kernels = &div, .num_kernels = 1};
    ck_assert_int_eq(s2_aot_emit(ctx, &dm, &h, &c), S2_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "divides grid dimension x by 4"));
    div.abi = s2_aot_abi_attn_bwd_pre();
    div.grid_div[0] = -2;
    ck_assert_int_eq(s2_aot_emit(ctx, &dm, &h, &c), S2_ERR_INVALID);
    div.grid_div[0] = 16;
    ck_assert_int_eq(s2_aot_emit(ctx, &dm, &h, &c), S2_OK);
    ck_assert_ptr_nonnull(strstr(c, "int64_t s2_gx = q_len < 0 ? -1 : ((int64_t)q_len + 15) / 16;"));
    free(h);
    free(c);
    /* two kernels of one name */
    s2_aot_kernel two[2] = {{.name = "k", .symbol = "a", .abi = fwd, .threads = 32},
                            {.name = "k", .symbol = "b", .abi = fwd, .threads = 32}};
    s2_aot_module m = {.name = "m", .cubin = cubin, .cubin_size = 16, .kernels = two, .num_kernels = 2};
    ck_assert_int_eq(s2_aot_emit(ctx, &m, &h, &c), S2_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(s2_ctx_message(ctx), "two kernels"));
    ck_assert_int_eq(s2_aot_emit(ctx, NULL, &h, &c), S2_ERR_INVALID);
    two[1].name = "k2";
    ck_assert_int_eq(s2_aot_write(ctx, &m, "/nonexistent-dir/x"), S2_ERR_IO);
    s2_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("aot");
    TCase *tc = tcase_create("aot");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, generated_files_compile_cleanly);
    tcase_add_test(tc, generated_text);
    tcase_add_test(tc, tma_text);
    tcase_add_test(tc, host_program_with_stub_driver);
    tcase_add_test(tc, other_abis_compile);
    tcase_add_test(tc, combine_launcher);
    tcase_add_test(tc, invalid_modules);
    suite_add_tcase(s, tc);
    return s2t_run_suite(s);
}
