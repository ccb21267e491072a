/* AOT launchers against the runtime, on the fake libcuda of tests/runtime:
 * for real sm_90a tensor-map cubins, the generated C launcher and
 * s2_attn_forward, given the same tensors, must hand the driver the same
 * grid, block, shared memory and parameter bytes, the three tensor maps
 * included (the fake writes every encode input into the map it returns);
 * for backward modules, the generated launchers and s2_attn_backward the
 * same three launches (NAME_dq, NAME_dqds or NAME_dqds2 third); for decode
 * modules, the decode launcher and s2_attn_decode the same launch, the
 * combine launcher and s2_combine the same launch.
 * The generated sources are built into a shared object with a shim that
 * forwards the Driver API calls to the fake (which only exports
 * cuGetProcAddress), and loaded with dlopen. */
#include "attn_tune.h"
#include "compile_internal.h"
#include "kernel_abi.h"
#include "template.h"
#include "s2c/aot.h"
#include "s2c/attention.h"
#include "s2c/attn_runtime.h"
#include "s2c/cache.h"
#include "s2c/codegen.h"
#include "s2c/runtime.h"
#include "util.h"
#include "../attn/patterns.h"
#include "../runtime/fake_cuda.h"
#include "fake_driver.h"
#include "check_main.h"

#include <check.h>
#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef S2C_CUDA_INCLUDE
#define S2C_CUDA_INCLUDE "/usr/local/cuda/include"
#endif

static const char *fake_path;
static fake_cuda_set_fn fake_set;
static fake_cuda_get_fn fake_get;
static fake_cuda_param_sizes_fn fake_param_sizes;
static fake_cuda_last_params_fn fake_last_params;
static fake_cuda_launch_at_fn fake_launch_at;
static char tmp_dir[512];

/* The launcher of s2_aot_abi_attn_fwd_tma (aot.h). */
typedef CUresult (*tma_launcher)(CUstream, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, int64_t,
                                 int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                 int64_t, int64_t, int32_t, int32_t, float, CUdeviceptr, CUdeviceptr, CUdeviceptr,
                                 int32_t, int32_t, CUdeviceptr, int32_t, int32_t, int32_t, int64_t);
typedef CUresult (*load_fn)(void);

/* Parameter sizes of the tensor-map forward (attention.h), packed. */
static const int tma_sizes[29] = {8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4,
                                  8, 8, 8, 4, 4, 128, 128, 128, 8};
enum { OFF_SCHED = 17 * 8 + 12, TMA_PARAM_BYTES = 17 * 8 + 12 + 24 + 8 + 384 + 8 };

/* Parameter sizes of the persistent forward (attention.h), packed: 596 bytes. */
static const int tma_p_sizes[33] = {8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 8, 8, 8, 4, 4,
                                    128, 128, 128, 8, 4, 4, 8, 8};
enum { OFF_WORK = OFF_SCHED + 32 + 384, TMA_P_PARAM_BYTES = OFF_WORK + 8 + 4 + 4 + 8 + 8 };

static const char shim[] =
    "#include <cuda.h>\n"
    "#include <dlfcn.h>\n"
    "#include <stdlib.h>\n"
    "typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);\n"
    "static void *fake(const char *name)\n"
    "{\n"
    "    void *h = dlopen(getenv(\"S2C_LIBCUDA\"), RTLD_NOW | RTLD_LOCAL);\n"
    "    gpa_fn gpa = h ? (gpa_fn)dlsym(h, \"cuGetProcAddress_v2\") : NULL;\n"
    "    void *f = NULL;\n"
    "    if (gpa)\n"
    "        gpa(name, &f, 12000, 0, NULL);\n"
    "    return f;\n"
    "}\n"
    "CUresult cuModuleLoadData(CUmodule *m, const void *image)\n"
    "{ CUresult (*f)(CUmodule *, const void *) = (CUresult (*)(CUmodule *, const void *))fake(\"cuModuleLoadData\");\n"
    "  return f(m, image); }\n"
    "CUresult cuModuleUnload(CUmodule m)\n"
    "{ CUresult (*f)(CUmodule) = (CUresult (*)(CUmodule))fake(\"cuModuleUnload\"); return f(m); }\n"
    "CUresult cuModuleGetFunction(CUfunction *fn, CUmodule m, const char *name)\n"
    "{ CUresult (*f)(CUfunction *, CUmodule, const char *) =\n"
    "      (CUresult (*)(CUfunction *, CUmodule, const char *))fake(\"cuModuleGetFunction\");\n"
    "  return f(fn, m, name); }\n"
    "CUresult cuCtxGetDevice(CUdevice *d)\n"
    "{ CUresult (*f)(CUdevice *) = (CUresult (*)(CUdevice *))fake(\"cuCtxGetDevice\"); return f(d); }\n"
    "CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)\n"
    "{ CUresult (*f)(int *, CUdevice_attribute, CUdevice) =\n"
    "      (CUresult (*)(int *, CUdevice_attribute, CUdevice))fake(\"cuDeviceGetAttribute\");\n"
    "  return f(v, a, d); }\n"
    "CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction fn)\n"
    "{ CUresult (*f)(int *, CUfunction_attribute, CUfunction) =\n"
    "      (CUresult (*)(int *, CUfunction_attribute, CUfunction))fake(\"cuFuncGetAttribute\");\n"
    "  return f(v, a, fn); }\n"
    "CUresult cuFuncSetAttribute(CUfunction fn, CUfunction_attribute a, int v)\n"
    "{ CUresult (*f)(CUfunction, CUfunction_attribute, int) =\n"
    "      (CUresult (*)(CUfunction, CUfunction_attribute, int))fake(\"cuFuncSetAttribute\");\n"
    "  return f(fn, a, v); }\n"
    "typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,\n"
    "                              unsigned, CUstream, void **, void **);\n"
    "CUresult cuLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,\n"
    "                        unsigned bz, unsigned smem, CUstream s, void **p, void **e)\n"
    "{ launch_fn f = (launch_fn)fake(\"cuLaunchKernel\"); return f(fn, gx, gy, gz, bx, by, bz, smem, s, p, e); }\n"
    "typedef CUresult (*encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,\n"
    "    const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,\n"
    "    CUtensorMapL2promotion, CUtensorMapFloatOOBfill);\n"
    "CUresult cuTensorMapEncodeTiled(CUtensorMap *m, CUtensorMapDataType t, cuuint32_t r, void *a,\n"
    "    const cuuint64_t *d, const cuuint64_t *s, const cuuint32_t *b, const cuuint32_t *e,\n"
    "    CUtensorMapInterleave i, CUtensorMapSwizzle w, CUtensorMapL2promotion l, CUtensorMapFloatOOBfill o)\n"
    "{ encode_fn f = (encode_fn)fake(\"cuTensorMapEncodeTiled\"); return f(m, t, r, a, d, s, b, e, i, w, l, o); }\n";

static int run_cmd(const char *cmd)
{
    int rc = system(cmd);
    return rc == -1 ? -1 : WEXITSTATUS(rc);
}

/* tmp_dir/MOD.c (written by s2_aot_write) and the driver shim as a shared
 * library, opened. */
/* q, k, v and o of `bytes` each and lse of lse_bytes on the fake device. */
static void alloc_fwd(s2_ctx *ctx, s2_device *dev, size_t bytes, size_t lse_bytes, s2_devptr *q, s2_devptr *k,
                      s2_devptr *v, s2_devptr *o, s2_devptr *lse)
{
    s2_devptr *t[4] = {q, k, v, o};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(s2_mem_alloc(ctx, dev, bytes, t[i]), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, lse_bytes, lse), S2_OK);
}

/* The manifest an artifact's cubin embeds, parsed. */
static s2_manifest *manifest_of(s2_ctx *ctx, const s2_artifact *art)
{
    s2_manifest *m = NULL;
    const char *text = NULL;
    size_t len = 0;
    ck_assert_int_eq(s2_cubin_find_manifest(ctx, art->cubin, art->cubin_size, &text, &len), S2_OK);
    ck_assert_msg(s2_manifest_parse(ctx, text, len, &m) == S2_OK, "%s", s2_ctx_message(ctx));
    return m;
}

static void *compile_so(s2_ctx *ctx, const char *mod)
{
    char path[700], cmd[2400];
    snprintf(path, sizeof path, "%s/shim.c", tmp_dir);
    ck_assert_int_eq(s2_write_file_atomic(ctx, path, shim, strlen(shim)), S2_OK);
    const char *cc = getenv("CC");
    snprintf(cmd, sizeof cmd, "cd '%s' && %s -std=c11 -Wall -Wextra -Werror -fPIC -shared -I'%s' %s.c shim.c "
                              "-o %s.so -ldl 2>&1", tmp_dir, cc && cc[0] ? cc : "cc", S2C_CUDA_INCLUDE, mod, mod);
    ck_assert_msg(run_cmd(cmd) == 0, "%s", cmd);
    snprintf(path, sizeof path, "%s/%s.so", tmp_dir, mod);
    void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(so != NULL, "%s", dlerror());
    return so;
}

/* am written into tmp_dir, compiled with the shim and opened (*so), and
 * load_MOD() called; the address of launcher MOD_name. */
static void *open_aot(s2_ctx *ctx, const s2_aot_module *am, const char *name, void **so)
{
    ck_assert_msg(s2_aot_write(ctx, am, tmp_dir) == S2_OK, "%s", s2_ctx_message(ctx));
    *so = compile_so(ctx, am->name);
    char sym[64];
    snprintf(sym, sizeof sym, "%s_%s", am->name, name);
    void *launch = dlsym(*so, sym);
    snprintf(sym, sizeof sym, "load_%s", am->name);
    load_fn load = (load_fn)dlsym(*so, sym);
    ck_assert(launch && load);
    fake_set("set_current", 1);
    ck_assert_int_eq(load(), CUDA_SUCCESS);
    return launch;
}

/* One compiled pattern: its artifact and the generated launcher library. */
typedef struct gen {
    s2_pattern_set *set;
    s2_artifact *art;
    void *so;
    tma_launcher launch;
} gen;

static void build_gen(gen *g, int which, s2_dtype dt, int head_dim, int kv_gather, const char *mod)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args a;
    attn_pattern_args(which, &a);
    ck_assert_int_eq(s2_pattern_from_args(ctx, &a, &g->set), S2_OK);
    s2_kspec spec = {.kind = S2_KERNEL_FWD, .dtype = dt, .head_dim = head_dim, .arch = S2_ARCH_SM90A,
                           .kv_gather = kv_gather};
    ck_assert_msg(s2_compile_kspec1(ctx, s2_pattern_set_get(g->set, 0), &spec, S2_CUBIN_AUTO, &g->art) == S2_OK,
                  "%s", s2_ctx_message(ctx));
    /* what `s2c compile --emit c` does with the manifest (tools/s2c.c) */
    s2_manifest *m = NULL;
    const char *text = NULL;
    size_t len = 0;
    ck_assert_int_eq(s2_cubin_find_manifest(ctx, g->art->cubin, g->art->cubin_size, &text, &len), S2_OK);
    ck_assert_msg(s2_manifest_parse(ctx, text, len, &m) == S2_OK, "%s", s2_ctx_message(ctx));
    const s2_manifest_kernel *mk = s2_manifest_kernel_at(m, 0);
    ck_assert_int_eq(s2_manifest_kernel_fn(mk, S2_ROLE_FWD)->abi, S2_ABI_FWD_TMA);
    const s2_kspec *mks = &s2_manifest_kernel_fn(mk, S2_ROLE_FWD)->spec;
    int gather = mks->kv_gather > 1 ? mks->kv_gather : 1;
    ck_assert_int_eq(gather, kv_gather > 1 ? kv_gather : 1);
    s2_aot_kernel k = {.name = "fwd", .symbol = mk->name, .abi = s2_aot_abi_attn_fwd_tma(), .threads = mk->threads,
                       .smem_bytes = mk->smem_bytes, .dtype = mk->spec.dtype, .head_dim = mk->spec.head_dim,
                       .kv_box_rows = mk->spec.block_n / gather};
    s2_aot_module am = {.name = mod, .cubin = g->art->cubin, .cubin_size = g->art->cubin_size,
                        .manifest = g->art->manifest, .kernels = &k, .num_kernels = 1};
    ck_assert_msg(s2_aot_write(ctx, &am, tmp_dir) == S2_OK, "%s", s2_ctx_message(ctx));
    s2_manifest_free(m);

    g->so = compile_so(ctx, mod);
    char sym[64];
    snprintf(sym, sizeof sym, "%s_fwd", mod);
    g->launch = (tma_launcher)dlsym(g->so, sym);
    snprintf(sym, sizeof sym, "load_%s", mod);
    load_fn load = (load_fn)dlsym(g->so, sym);
    ck_assert(g->launch && load);
    fake_set("set_current", 1); /* an application has a current context */
    ck_assert_int_eq(load(), CUDA_SUCCESS);
    s2_ctx_free(ctx);
}

static void use_fake(void)
{
    void *h = s2t_fake_open(fake_path, &fake_set, &fake_get);
    fake_param_sizes = (fake_cuda_param_sizes_fn)dlsym(h, "fake_cuda_param_sizes");
    fake_last_params = (fake_cuda_last_params_fn)dlsym(h, "fake_cuda_last_params");
    fake_launch_at = (fake_cuda_launch_at_fn)dlsym(h, "fake_cuda_launch_at");
    ck_assert(fake_param_sizes && fake_last_params && fake_launch_at);
}

typedef struct launch_rec {
    long long grid[3], block[3], smem;
    unsigned char params[TMA_P_PARAM_BYTES];   /* the larger of the two forwards' */
} launch_rec;

/* The fake's last launch, of `bytes` bytes of parameters. */
static void record(launch_rec *r, int bytes)
{
    ck_assert_int_eq(fake_get("last_params_bytes"), bytes);
    r->grid[0] = fake_get("last_grid_x"), r->grid[1] = fake_get("last_grid_y"), r->grid[2] = fake_get("last_grid_z");
    r->block[0] = fake_get("last_block_x"), r->block[1] = fake_get("last_block_y");
    r->block[2] = fake_get("last_block_z"), r->smem = fake_get("last_smem");
    memcpy(r->params, fake_last_params(), (size_t)bytes);
}

/* s2_attn_forward, then the generated launcher with the same arguments and
 * the runtime's schedule buffers (the caller's, in the AOT model). */
static void compare(s2_ctx *ctx, s2_attn_kernel *k, const gen *g, const s2_attn_fwd_args *a, const char *what)
{
    launch_rec rt, aot;
    long long launches = fake_get("launches"), maps = fake_get("tensor_maps");
    CUstream stream = (CUstream)(uintptr_t)0x40;
    ck_assert_msg(s2_attn_forward(ctx, k, stream, a) == S2_OK, "%s: %s", what, s2_ctx_message(ctx));
    ck_assert_int_eq(fake_get("launches"), launches + 1);
    ck_assert_int_eq(fake_get("tensor_maps"), maps + 3);
    record(&rt, TMA_PARAM_BYTES);

    CUdeviceptr cls, offs, ent, seqinfo = a->seqs ? s2_attn_seqs_device(a->seqs) : 0;
    int32_t first, tiles;
    memcpy(&cls, rt.params + OFF_SCHED, 8);
    memcpy(&offs, rt.params + OFF_SCHED + 8, 8);
    memcpy(&ent, rt.params + OFF_SCHED + 16, 8);
    memcpy(&first, rt.params + OFF_SCHED + 24, 4);
    memcpy(&tiles, rt.params + OFF_SCHED + 28, 4);
    int64_t sq = a->q_len, sk = a->kv_len;
    if (a->seqs)
        s2_attn_seqs_schedule_shape(a->seqs, &sq, &sk);
    float scale_log2 = (float)(1.0 / sqrt((double)a->head_dim) * 1.4426950408889634);
    const int64_t *qs = a->q_stride, *ks = a->k_stride, *vs = a->v_stride, *os = a->o_stride;
    fake_set("set_current", 1);
    CUresult r = g->launch(stream, a->q, a->k, a->v, a->o, a->lse, qs[0], qs[1], qs[2], ks[0], ks[1], ks[2], vs[0],
                           vs[1], vs[2], os[0], os[1], os[2], (int32_t)a->q_len, (int32_t)sk, scale_log2, cls, offs,
                           ent, first, tiles, seqinfo, a->heads, a->batch, a->kv_heads, a->kv_len);
    ck_assert_msg(r == CUDA_SUCCESS, "%s: launcher returned %d", what, (int)r);
    ck_assert_int_eq(fake_get("launches"), launches + 2);
    ck_assert_int_eq(fake_get("tensor_maps"), maps + 6);
    record(&aot, TMA_PARAM_BYTES);
    for (int d = 0; d < 3; d++) {
        ck_assert_msg(rt.grid[d] == aot.grid[d], "%s: grid %d: %lld vs %lld", what, d, rt.grid[d], aot.grid[d]);
        ck_assert_msg(rt.block[d] == aot.block[d], "%s: block %d", what, d);
    }
    ck_assert_int_eq(rt.grid[0], tiles);
    ck_assert_int_eq(rt.grid[1], a->heads);
    ck_assert_int_eq(rt.smem, aot.smem);
    for (int i = 0; i < TMA_PARAM_BYTES; i++)
        ck_assert_msg(rt.params[i] == aot.params[i], "%s: parameter byte %d: runtime 0x%02x, launcher 0x%02x", what,
                      i, rt.params[i], aot.params[i]);
}

static void check_pattern(int which, s2_dtype dt, int head_dim, int kv_gather, const char *mod)
{
    use_fake();
    fake_param_sizes(tma_sizes, 29);
    gen g = {0};
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    ck_assert_msg(s2_device_open(ctx, 0, &dev) == S2_OK, "%s", s2_ctx_message(ctx));
    build_gen(&g, which, dt, head_dim, kv_gather, mod);
    s2_attn_kernel *k = NULL;
    ck_assert_msg(s2_attn_load(ctx, dev, g.art->cubin, g.art->cubin_size, NULL, dt, head_dim, &k) == S2_OK, "%s",
                  s2_ctx_message(ctx));
    const s2_pattern *p = s2_attn_kernel_pattern(k);
    const int B = 2, H = p->heads, HK = p->kv_heads;
    const int64_t SQ = 300, SK = 333, D = head_dim;
    /* room for every layout below: padded rows, 2 sequences */
    size_t qb = (size_t)B * (size_t)(SK + 8) * (size_t)(H + 2) * (size_t)D * 2;
    s2_devptr q, kk, v, o, lse;
    alloc_fwd(ctx, dev, qb, (size_t)B * H * SK * 4, &q, &kk, &v, &o, &lse);

    /* a uniform batch, contiguous */
    s2_attn_fwd_args a = {.batch = B, .q_len = SQ, .kv_len = SK, .heads = H, .kv_heads = HK, .head_dim = (int)D,
                          .dtype = dt, .q = q, .k = kk, .v = v, .o = o, .lse = lse};
    s2_attn_fwd_args_bshd(&a);
    compare(ctx, k, &g, &a, "bshd");
    /* batch 1, BHSD q and o, k and v with two spare heads of row padding */
    s2_attn_fwd_args b = a;
    b.batch = 1;
    b.q_stride[0] = b.o_stride[0] = H * SQ * D, b.q_stride[1] = b.o_stride[1] = D;
    b.q_stride[2] = b.o_stride[2] = SQ * D;
    b.k_stride[0] = b.v_stride[0] = SK * (HK + 2) * D, b.k_stride[1] = b.v_stride[1] = (HK + 2) * D;
    b.k_stride[2] = b.v_stride[2] = D;
    b.lse = 0;
    compare(ctx, k, &g, &b, "batch 1, bhsd q/o, padded k/v");
    /* a packed batch of two sequences (chunked prefill in the second) */
    s2_attn_seq seqs[2] = {{0, 100, 0, 100}, {100, 64, 100, 200}};
    s2_attn_seqs *sq = NULL;
    ck_assert_msg(s2_attn_seqs_new(ctx, dev, seqs, 2, &sq) == S2_OK, "%s", s2_ctx_message(ctx));
    s2_attn_fwd_args c = {.batch = 2, .q_len = 164, .kv_len = 300, .heads = H, .kv_heads = HK, .head_dim = (int)D,
                          .dtype = dt, .q = q, .k = kk, .v = v, .o = o, .lse = lse, .seqs = sq};
    s2_attn_fwd_args_bshd(&c);
    compare(ctx, k, &g, &c, "packed");

    /* a failing encode is returned, nothing launched */
    long long launches = fake_get("launches");
    CUresult r = g.launch(NULL, q + 8, kk, v, o, 0, 0, H * D, D, 0, HK * D, D, 0, HK * D, D, 0, H * D, D, 64, 64, 1.0f,
                          q, q, q, 0, 1, 0, H, 1, HK, 64);
    ck_assert_int_eq(r, CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(fake_get("launches"), launches);
    /* an empty grid encodes and launches nothing */
    long long maps = fake_get("tensor_maps");
    r = g.launch(NULL, q, kk, v, o, 0, 0, H * D, D, 0, HK * D, D, 0, HK * D, D, 0, H * D, D, 64, 64, 1.0f, q, q, q, 0,
                 0, 0, H, 1, HK, 64);
    ck_assert_int_eq(r, CUDA_SUCCESS);
    ck_assert_int_eq(fake_get("tensor_maps"), maps);
    ck_assert_int_eq(fake_get("launches"), launches);

    s2_attn_seqs_free(sq);
    s2_attn_kernel_free(k);
    s2_devptr *ps[] = {&q, &kk, &v, &o, &lse};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(s2_mem_free(ctx, dev, *ps[i]), S2_OK);
    s2_device_free(dev);
    s2_artifact_free(g.art);
    s2_pattern_set_free(g.set);
    s2_ctx_free(ctx);
}

/* ---- the persistent tensor-map forward: a module's wide variant NAME_w ---- */

#define P CUdeviceptr
#define I int64_t
typedef CUresult (*tma_p_launcher)(CUstream, P, P, P, P, P, I, I, I, I, I, I, I, I, I, I, I, I, int32_t, int32_t,
                                   float, P, P, P, int32_t, int32_t, P, int32_t, int32_t, P, P, int32_t, int32_t, I);
#undef P
#undef I

/* A default-spec sm_90a forward of 64-token blocks at d128 holds NAME_w on
 * the persistent grid (role fwd_wide, ABI fwd_tma_persistent); `s2c compile --emit c`
 * writes a launcher for it (tools/s2c.c, aot_kernels_of).  The runtime
 * launches it for long lists: its launch against the generated launcher's
 * with the runtime's schedule, work list and counters (the caller's, in the
 * AOT model). */
static void check_wide(int which, s2_dtype dt, int64_t S, const char *mod)
{
    use_fake();
    fake_param_sizes(tma_p_sizes, 33);
    s2_ctx *ctx = s2_ctx_new();
    s2_pattern_set *set = NULL;
    s2_local_stride_args pa;
    attn_pattern_args(which, &pa);
    ck_assert_int_eq(s2_pattern_from_args(ctx, &pa, &set), S2_OK);
    s2_kspec spec = {.kind = S2_KERNEL_FWD, .dtype = dt, .head_dim = 128, .arch = S2_ARCH_SM90A};
    s2_artifact *art = NULL;
    ck_assert_msg(s2_compile_kspec1(ctx, s2_pattern_set_get(set, 0), &spec, S2_CUBIN_AUTO, &art) == S2_OK, "%s",
                  s2_ctx_message(ctx));
    s2_manifest *m = manifest_of(ctx, art);
    const s2_manifest_kernel *mk = s2_manifest_kernel_at(m, 0);
    const s2_kernel_record *wr = s2_manifest_kernel_fn(mk, S2_ROLE_FWD_WIDE);
    ck_assert(wr && wr->spec.persistent > 0);
    const char *wsym = wr->symbol;
    const s2_kspec *w = &wr->spec;
    s2_aot_kernel ks[2] = {
        {.name = "fwd", .symbol = mk->name, .abi = s2_aot_abi_attn_fwd_tma(), .threads = mk->threads,
         .smem_bytes = mk->smem_bytes, .dtype = mk->spec.dtype, .head_dim = mk->spec.head_dim,
         .kv_box_rows = mk->spec.block_n / (s2_manifest_kernel_fn(mk, S2_ROLE_FWD)->spec.kv_gather > 1
                                                          ? s2_manifest_kernel_fn(mk, S2_ROLE_FWD)->spec.kv_gather
                                                          : 1)},
        {.name = "fwd_w", .symbol = wsym, .abi = s2_aot_abi_attn_fwd_tma_persistent(), .threads = wr->threads,
         .smem_bytes = wr->smem_bytes, .dtype = w->dtype, .head_dim = w->head_dim,
         .kv_box_rows = w->block_n / (w->kv_gather > 1 ? w->kv_gather : 1)},
    };
    s2_aot_module am = {.name = mod, .cubin = art->cubin, .cubin_size = art->cubin_size, .manifest = art->manifest,
                        .kernels = ks, .num_kernels = 2};
    void *so = NULL;
    tma_p_launcher launch = (tma_p_launcher)open_aot(ctx, &am, "fwd_w", &so);

    s2_device *dev = NULL;
    ck_assert_msg(s2_device_open(ctx, 0, &dev) == S2_OK, "%s", s2_ctx_message(ctx));
    s2_attn_kernel *k = NULL;
    ck_assert_msg(s2_attn_load(ctx, dev, art->cubin, art->cubin_size, NULL, dt, 128, &k) == S2_OK, "%s",
                  s2_ctx_message(ctx));
    const s2_pattern *p = s2_attn_kernel_pattern(k);
    const int B = 2, H = p->heads, HK = p->kv_heads, D = 128;
    size_t bytes = (size_t)B * (size_t)S * (size_t)H * D * 2;
    s2_devptr q, kk, v, o, lse;
    alloc_fwd(ctx, dev, bytes, (size_t)B * H * S * 4, &q, &kk, &v, &o, &lse);
    s2_attn_fwd_args a = {.batch = B, .q_len = S, .kv_len = S, .heads = H, .kv_heads = HK, .head_dim = D,
                          .dtype = dt, .q = q, .k = kk, .v = v, .o = o, .lse = lse};
    s2_attn_fwd_args_bshd(&a);

    launch_rec rt, aot;
    long long launches = fake_get("launches");
    CUstream stream = (CUstream)(uintptr_t)0x40;
    ck_assert_msg(s2_attn_forward(ctx, k, stream, &a) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_int_eq(fake_get("launches"), launches + 1);
    s2_attn_sched_stats ss;
    s2_attn_kernel_sched_stats(k, &ss);
    ck_assert_msg(ss.wide == 1, "the runtime did not take the wide variant at %lld tokens", (long long)S);
    record(&rt, TMA_P_PARAM_BYTES);
    ck_assert_int_eq(rt.block[0], wr->threads);

    CUdeviceptr cls, offs, ent, work, counter;
    int32_t first, tiles, n_work, batch;
    memcpy(&cls, rt.params + OFF_SCHED, 8);
    memcpy(&offs, rt.params + OFF_SCHED + 8, 8);
    memcpy(&ent, rt.params + OFF_SCHED + 16, 8);
    memcpy(&first, rt.params + OFF_SCHED + 24, 4);
    memcpy(&tiles, rt.params + OFF_SCHED + 28, 4);
    memcpy(&work, rt.params + OFF_WORK, 8);
    memcpy(&n_work, rt.params + OFF_WORK + 8, 4);
    memcpy(&batch, rt.params + OFF_WORK + 12, 4);
    memcpy(&counter, rt.params + OFF_WORK + 16, 8);
    ck_assert_int_eq(batch, B);
    ck_assert_int_eq(n_work, H * tiles);
    float scale_log2 = (float)(1.0 / sqrt((double)D) * 1.4426950408889634);
    const int64_t *qs = a.q_stride, *ks_ = a.k_stride, *vs = a.v_stride, *os = a.o_stride;
    fake_set("set_current", 1);
    CUresult r = launch(stream, q, kk, v, o, lse, qs[0], qs[1], qs[2], ks_[0], ks_[1], ks_[2], vs[0], vs[1], vs[2],
                        os[0], os[1], os[2], (int32_t)S, (int32_t)S, scale_log2, cls, offs, ent, first, tiles, work,
                        n_work, batch, counter, 0, H, HK, S);
    ck_assert_msg(r == CUDA_SUCCESS, "launcher returned %d", (int)r);
    ck_assert_int_eq(fake_get("launches"), launches + 2);
    record(&aot, TMA_P_PARAM_BYTES);
    for (int d = 0; d < 3; d++) {
        ck_assert_msg(rt.grid[d] == aot.grid[d], "grid %d: runtime %lld, launcher %lld", d, rt.grid[d], aot.grid[d]);
        ck_assert_int_eq(rt.block[d], aot.block[d]);
    }
    /* the persistent grid: every SM's resident CTAs (one for the wide kernel), at most the items */
    ck_assert_int_eq(rt.grid[0], fake_get("sm_count") < (long long)n_work * B ? fake_get("sm_count")
                                                                               : (long long)n_work * B);
    ck_assert_int_eq(rt.grid[1], 1);
    ck_assert_int_eq(rt.smem, aot.smem);
    for (int i = 0; i < TMA_P_PARAM_BYTES; i++)
        ck_assert_msg(rt.params[i] == aot.params[i], "parameter byte %d: runtime 0x%02x, launcher 0x%02x", i,
                      rt.params[i], aot.params[i]);
    /* a work list over 32 bits is refused, nothing launched */
    r = launch(stream, q, kk, v, o, lse, qs[0], qs[1], qs[2], ks_[0], ks_[1], ks_[2], vs[0], vs[1], vs[2], os[0], os[1],
               os[2], (int32_t)S, (int32_t)S, scale_log2, cls, offs, ent, first, tiles, work, INT32_MAX, 2, counter, 0,
               H, HK, S);
    ck_assert_int_eq(r, CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(fake_get("launches"), launches + 2);

    s2_attn_kernel_free(k);
    s2_devptr *ps[] = {&q, &kk, &v, &o, &lse};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(s2_mem_free(ctx, dev, *ps[i]), S2_OK);
    s2_device_free(dev);
    dlclose(so);
    s2_manifest_free(m);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}

/* ---- the backward module ---- */

#define P CUdeviceptr
#define I int64_t
typedef CUresult (*bwd_launcher)(CUstream, P, P, P, P, P, P, P, P, P, P, P, P, I, I, I, I, I, I, I, I, I, I, I, I, I,
                                 I, I, I, I, I, I, I, I, I, I, I, int32_t, int32_t, float, P, P, P, int32_t, int32_t, P,
                                 P, P, int32_t, P, P, P, P, int32_t, int32_t, int32_t);
#undef P
#undef I

/* Backward parameter sizes (attention.h), packed: 392 bytes, 648 with the
 * two tensor maps of spec.bwd_tma (parameters 51, 52) before seqinfo. */
static int bwd_sizes[2][54];
enum { BWD_OFF_TAIL = 12 * 8 + 24 * 8, BWD_PARAM_BYTES = BWD_OFF_TAIL + 12 + 24 + 8 + 24 + 4 + 24 + 8,
       BWD_TMA_PARAM_BYTES = BWD_PARAM_BYTES + 256 };

static void init_bwd_sizes(void)
{
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 54; i++)
            bwd_sizes[t][i] = t && (i == 51 || i == 52) ? 128
                              : i < 36 || i >= 48 ? 8
                              : (i == 39 || i == 40 || i == 41 || i == 44 || i == 45 || i == 46) ? 8 : 4;
}

typedef struct bwd_gen {
    s2_pattern_set *set;
    s2_artifact *art;
    void *so;
    bwd_launcher launch[5];   /* by role from S2_ROLE_BWD_PRE: pre, dkdv, dq, dqds, dqds2 (NULL: none) */
    bool tma;                 /* the module's kernels take q_map, do_map (spec.bwd_tma) */
} bwd_gen;

static void build_bwd_gen(bwd_gen *g, int which, s2_dtype dt, int head_dim, s2_arch arch, const char *mod)
{
    s2_ctx *ctx = s2_ctx_new();
    s2_local_stride_args a;
    attn_pattern_args(which, &a);
    ck_assert_int_eq(s2_pattern_from_args(ctx, &a, &g->set), S2_OK);
    s2_kspec spec = {.kind = S2_KERNEL_BWD, .dtype = dt, .head_dim = head_dim, .arch = arch};
    ck_assert_msg(s2_compile_kspec1(ctx, s2_pattern_set_get(g->set, 0), &spec, S2_CUBIN_AUTO, &g->art) == S2_OK,
                  "%s", s2_ctx_message(ctx));
    s2_manifest *m = NULL;
    const char *text = NULL;
    size_t len = 0;
    ck_assert_int_eq(s2_cubin_find_manifest(ctx, g->art->cubin, g->art->cubin_size, &text, &len), S2_OK);
    ck_assert_msg(s2_manifest_parse(ctx, text, len, &m) == S2_OK, "%s", s2_ctx_message(ctx));
    const s2_manifest_kernel *mk = s2_manifest_kernel_at(m, 0);
    ck_assert_int_eq(mk->spec.kind, S2_KERNEL_BWD);
    /* what `s2c compile --emit c` does with a backward entry (tools/cmd_compile.c,
     * aot_kernels_of): one launcher per kernel record, its block and shared
     * memory the record's, NAME_pre's grid cdiv(q_len, rows per CTA), NAME_dqds2's
     * cdiv(q_tiles, 2) on the dqds ABI */
    static const char *const part[5] = {"pre", "dkdv", "dq", "dqds", "dqds2"};
    char symbols[5][256];
    s2_aot_kernel k[5];
    int where[5], nk = 0;
    g->tma = s2_manifest_kernel_fn(mk, S2_ROLE_BWD_DKDV)->abi == S2_ABI_BWD_TMA;
    ck_assert_int_eq(g->tma, arch == S2_ARCH_SM90A);
    const s2_aot_abi *abi[5] = {g->tma ? s2_aot_abi_attn_bwd_pre_tma() : s2_aot_abi_attn_bwd_pre(),
                                g->tma ? s2_aot_abi_attn_bwd_dkdv_tma() : s2_aot_abi_attn_bwd_dkdv(),
                                g->tma ? s2_aot_abi_attn_bwd_dq_tma() : s2_aot_abi_attn_bwd_dq(),
                                g->tma ? s2_aot_abi_attn_bwd_dqds_tma() : s2_aot_abi_attn_bwd_dqds(),
                                g->tma ? s2_aot_abi_attn_bwd_dqds_tma() : s2_aot_abi_attn_bwd_dqds()};
    const s2_kspec *mks = &s2_manifest_kernel_fn(mk, S2_ROLE_BWD_DKDV)->spec;
    bool ds = s2_bwd_ds_capable(s2_pattern_set_get(g->set, 0), mks);
    for (int j = 0; j < 5; j++) {
        const s2_kernel_record *r = s2_manifest_kernel_fn(mk, (s2_kernel_role)(S2_ROLE_BWD_PRE + j));
        where[j] = -1;
        ck_assert_msg((r != NULL) == (j < 3 || ds), "%s: record of %s", mod, part[j]);
        if (!r)
            continue;
        snprintf(symbols[j], sizeof symbols[j], "%s_%s", mk->name, part[j]);
        ck_assert_str_eq(r->symbol, symbols[j]);
        where[j] = nk;
        k[nk++] = (s2_aot_kernel){.name = part[j], .symbol = symbols[j], .abi = abi[j], .threads = r->threads,
                                  .smem_bytes = r->smem_bytes,
                                  .grid_div = {j == 0 ? r->threads / (mk->spec.head_dim / 8) : j == 4 ? 2 : 0},
                                  .dtype = mk->spec.dtype, .head_dim = mk->spec.head_dim,
                                  .kv_box_rows = g->tma ? mk->spec.block_m : 0};
    }
    s2_aot_module am = {.name = mod, .cubin = g->art->cubin, .cubin_size = g->art->cubin_size,
                        .manifest = g->art->manifest, .kernels = k, .num_kernels = nk};
    ck_assert_msg(s2_aot_write(ctx, &am, tmp_dir) == S2_OK, "%s", s2_ctx_message(ctx));
    s2_manifest_free(m);
    g->so = compile_so(ctx, mod);
    char sym[64];
    for (int j = 0; j < 5; j++) {
        if (where[j] < 0)
            continue;
        snprintf(sym, sizeof sym, "%s_%s", mod, part[j]);
        g->launch[j] = (bwd_launcher)dlsym(g->so, sym);
        ck_assert_ptr_nonnull(g->launch[j]);
    }
    snprintf(sym, sizeof sym, "load_%s", mod);
    load_fn load = (load_fn)dlsym(g->so, sym);
    ck_assert_ptr_nonnull(load);
    fake_set("set_current", 1);
    ck_assert_int_eq(load(), CUDA_SUCCESS);
    s2_ctx_free(ctx);
}

typedef struct bwd_rec {
    long long shape[3][8];
    unsigned char params[3][BWD_TMA_PARAM_BYTES];
} bwd_rec;

static void record_three(bwd_rec *r, int bytes)
{
    for (int j = 0; j < 3; j++) {
        const unsigned char *p = fake_launch_at(2 - j, r->shape[j]);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(r->shape[j][7], bytes);
        memcpy(r->params[j], p, (size_t)bytes);
    }
}

/* The runtime's three launches of `a` against the generated launchers with the
 * same arguments (the schedules and, on the dS path, the dS map taken from
 * the runtime's): parameters byte for byte, grid, block, shared memory.  dq:
 * the runtime's third kernel, NAME_dq, or (a->workspace_bytes holds the dS
 * tiles) NAME_dqds (dq_pair -1) or its paired form NAME_dqds2. */
static void compare_bwd(s2_ctx *ctx, s2_attn_kernel *k, const bwd_gen *g, const s2_attn_bwd_args *a, const char *what,
                        s2_kernel_role dq)
{
    bwd_rec rt, aot;
    bool ds = dq != S2_ROLE_BWD_DQ;
    long long launches = fake_get("launches");
    CUstream stream = (CUstream)(uintptr_t)0x50;
    s2_attn_sched_stats before, after;
    s2_attn_kernel_sched_stats(k, &before);
    s2_attn_bwd_options opt = {.dq_pair = dq == S2_ROLE_BWD_DQDS2 ? 0 : -1};
    ck_assert_msg(s2_attn_backward_opts(ctx, k, stream, a, &opt) == S2_OK, "%s: %s", what, s2_ctx_message(ctx));
    ck_assert_int_eq(fake_get("launches"), launches + 3);
    s2_attn_kernel_sched_stats(k, &after);
    ck_assert_msg(after.dq_paired == before.dq_paired + (dq == S2_ROLE_BWD_DQDS2), "%s: NAME_dqds2 %s", what,
                  dq == S2_ROLE_BWD_DQDS2 ? "not taken" : "taken");
    int bytes = g->tma ? BWD_TMA_PARAM_BYTES : BWD_PARAM_BYTES;
    record_three(&rt, bytes);
    /* the schedules are the caller's: take the runtime's */
    const unsigned char *t = rt.params[0] + BWD_OFF_TAIL;
    CUdeviceptr sch[6];
    int32_t first, tiles, kv_tiles;
    memcpy(&sch[0], t + 12, 8), memcpy(&sch[1], t + 20, 8), memcpy(&sch[2], t + 28, 8);
    memcpy(&first, t + 36, 4), memcpy(&tiles, t + 40, 4);
    memcpy(&sch[3], t + 44, 8), memcpy(&sch[4], t + 52, 8), memcpy(&sch[5], t + 60, 8);
    memcpy(&kv_tiles, t + 68, 4);
    CUdeviceptr dsp[3];
    memcpy(&dsp[0], t + 72, 8), memcpy(&dsp[1], t + 80, 8), memcpy(&dsp[2], t + 88, 8);
    ck_assert_msg(ds ? dsp[0] && dsp[1] && dsp[2] : !dsp[0] && !dsp[1] && !dsp[2], "%s: dS parameters", what);
    size_t ws = s2_attn_bwd_workspace_bytes(a->batch, a->heads, a->q_len);
    float scale_log2 = (float)(1.0 / sqrt((double)a->head_dim) * 1.4426950408889634);
    const int64_t *s[8] = {a->q_stride, a->k_stride, a->v_stride, a->o_stride,
                           a->do_stride, a->dq_stride, a->dk_stride, a->dv_stride};
    fake_set("set_current", 1);
    for (int j = 0; j < 3; j++) {
        CUresult r = g->launch[j == 2 ? (int)dq - (int)S2_ROLE_BWD_PRE : j](stream, a->q, a->k, a->v, a->o, a->d_o, a->lse, a->d_lse, a->workspace,
                                  a->workspace + ws / 2, a->dq, a->dk, a->dv, s[0][0], s[0][1], s[0][2], s[1][0],
                                  s[1][1], s[1][2], s[2][0], s[2][1], s[2][2], s[3][0], s[3][1], s[3][2], s[4][0],
                                  s[4][1], s[4][2], s[5][0], s[5][1], s[5][2], s[6][0], s[6][1], s[6][2], s[7][0],
                                  s[7][1], s[7][2], (int32_t)a->q_len, (int32_t)a->kv_len, scale_log2, sch[0], sch[1],
                                  sch[2], first, tiles, sch[3], sch[4], sch[5], kv_tiles, dsp[0], dsp[1], dsp[2],
                                  (CUdeviceptr)0, a->heads, a->kv_heads, a->batch);
        ck_assert_msg(r == CUDA_SUCCESS, "%s: launcher %d returned %d", what, j, (int)r);
    }
    ck_assert_int_eq(fake_get("launches"), launches + 6);
    record_three(&aot, bytes);
    for (int j = 0; j < 3; j++) {
        for (int i = 0; i < 7; i++)
            ck_assert_msg(rt.shape[j][i] == aot.shape[j][i], "%s: launch %d shape %d: runtime %lld, launcher %lld",
                          what, j, i, rt.shape[j][i], aot.shape[j][i]);
        /* the tensor maps too (the fake encoder writes its arguments into the map) */
        for (int i = 0; i < bytes; i++)
            ck_assert_msg(rt.params[j][i] == aot.params[j][i], "%s: launch %d parameter byte %d", what, j, i);
    }
    ck_assert_int_eq(rt.shape[1][0], kv_tiles);
    ck_assert_int_eq(rt.shape[1][1], a->kv_heads);
    ck_assert_int_eq(rt.shape[2][0], dq == S2_ROLE_BWD_DQDS2 ? (tiles + 1) / 2 : tiles);
    ck_assert_int_eq(rt.shape[2][3], s2_manifest_kernel_fn(s2_attn_kernel_desc(k), dq)->threads);
}

static void check_bwd(int which, s2_dtype dt, int head_dim, s2_arch arch, const char *mod)
{
    use_fake();
    init_bwd_sizes();
    bwd_gen g = {0};
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    ck_assert_msg(s2_device_open(ctx, 0, &dev) == S2_OK, "%s", s2_ctx_message(ctx));
    build_bwd_gen(&g, which, dt, head_dim, arch, mod);
    fake_param_sizes(bwd_sizes[g.tma], g.tma ? 54 : 52);
    s2_attn_module *amod = NULL;
    ck_assert_msg(s2_attn_module_load(ctx, dev, g.art->cubin, g.art->cubin_size, &amod) == S2_OK, "%s",
                  s2_ctx_message(ctx));
    s2_attn_kernel *k = s2_attn_module_kernel_at(amod, 0);
    const s2_pattern *p = s2_attn_kernel_pattern(k);
    const int B = 2, H = p->heads, HK = p->kv_heads;
    const int64_t SQ = 200, SK = 260, D = head_dim;
    s2_devptr t[8], lse, dlse, ws;
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(s2_mem_alloc(ctx, dev, (size_t)B * SK * H * D * 2, &t[i]), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, (size_t)B * H * SQ * 4, &lse), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, (size_t)B * H * SQ * 4, &dlse), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, s2_attn_bwd_workspace_bytes(B, H, SQ), &ws), S2_OK);
    s2_attn_bwd_args a = {.batch = B, .q_len = SQ, .kv_len = SK, .heads = H, .kv_heads = HK, .head_dim = (int)D,
                          .dtype = dt, .q = t[0], .k = t[1], .v = t[2], .o = t[3], .d_o = t[4], .dq = t[5],
                          .dk = t[6], .dv = t[7], .lse = lse, .d_lse = dlse, .workspace = ws};
    s2_attn_bwd_args_bshd(&a);
    compare_bwd(ctx, k, &g, &a, "bshd", S2_ROLE_BWD_DQ);
    /* batch 1, no dlse, q/o/do/dq in BHSD */
    s2_attn_bwd_args b = a;
    b.batch = 1, b.d_lse = 0;
    int64_t bhsd[3] = {H * SQ * D, D, SQ * D};
    memcpy(b.q_stride, bhsd, sizeof bhsd), memcpy(b.o_stride, bhsd, sizeof bhsd);
    memcpy(b.do_stride, bhsd, sizeof bhsd), memcpy(b.dq_stride, bhsd, sizeof bhsd);
    compare_bwd(ctx, k, &g, &b, "batch 1, bhsd, no dlse", S2_ROLE_BWD_DQ);
    if (g.launch[3]) {
        /* the dS path: the workspace of s2_attn_backward_workspace */
        size_t full = 0;
        bool on = false;
        ck_assert_msg(s2_attn_backward_workspace(ctx, k, B, SQ, SK, &full, &on) == S2_OK, "%s", s2_ctx_message(ctx));
        ck_assert(on && full > s2_attn_bwd_workspace_bytes(B, H, SQ));
        s2_devptr big = 0;
        ck_assert_int_eq(s2_mem_alloc(ctx, dev, full, &big), S2_OK);
        s2_attn_bwd_args c = a;
        c.workspace = big, c.workspace_bytes = full;
        compare_bwd(ctx, k, &g, &c, "dS path", S2_ROLE_BWD_DQDS);
        /* two query tiles per CTA: NAME_dqds2's block, shared memory and grid cdiv(q_tiles, 2) */
        compare_bwd(ctx, k, &g, &c, "dS path, paired", S2_ROLE_BWD_DQDS2);
        s2_attn_bwd_args e = c;
        e.batch = 1, e.d_lse = 0;
        memcpy(e.q_stride, bhsd, sizeof bhsd), memcpy(e.o_stride, bhsd, sizeof bhsd);
        memcpy(e.do_stride, bhsd, sizeof bhsd), memcpy(e.dq_stride, bhsd, sizeof bhsd);
        compare_bwd(ctx, k, &g, &e, "dS path, paired, batch 1, bhsd, no dlse", S2_ROLE_BWD_DQDS2);
        /* one byte short of the smallest chunked dS workspace (one chunk per
         * kv head; shorter ones take the dS path chunk by chunk): the plain path */
        size_t least = 0;
        ck_assert_msg(s2_attn_backward_workspace_chunked(ctx, k, B, SQ, SK, HK, &least) == S2_OK, "%s",
                      s2_ctx_message(ctx));
        c.workspace_bytes = least - 1;
        compare_bwd(ctx, k, &g, &c, "dS path, workspace one byte short", S2_ROLE_BWD_DQ);
        ck_assert_int_eq(s2_mem_free(ctx, dev, big), S2_OK);
    } else {
        ck_assert(!s2_manifest_kernel_fn(s2_attn_kernel_desc(k), S2_ROLE_BWD_DQDS));
    }
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(s2_mem_free(ctx, dev, t[i]), S2_OK);
    ck_assert_int_eq(s2_mem_free(ctx, dev, lse), S2_OK);
    ck_assert_int_eq(s2_mem_free(ctx, dev, dlse), S2_OK);
    ck_assert_int_eq(s2_mem_free(ctx, dev, ws), S2_OK);
    s2_attn_module_free(amod);
    s2_device_free(dev);
    s2_artifact_free(g.art);
    s2_pattern_set_free(g.set);
    s2_ctx_free(ctx);
}

/* ---- the decode kernel ---- */

#define P CUdeviceptr
#define I int64_t
typedef CUresult (*dec_launcher)(CUstream, P, P, P, P, P, P, P, I, I, I, I, I, I, I, I, I, I, I, I, P, I, I, P, int32_t,
                                 int32_t, float, P, P, P, int32_t, int32_t, P, P, P, int32_t, int32_t);
#undef P
#undef I

static const int dec_sizes[34] = {8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8,
                                  8, 8, 8, 8, 4, 4, 4, 8, 8, 8, 4, 4, 8, 8, 8};
enum { DEC_PARAM_BYTES = 252 };

/* NAME_combine's launcher (s2_aot_abi_attn_combine) and its parameter sizes: the 1 KB table first */
#define P CUdeviceptr
#define I int64_t
typedef CUresult (*comb_launcher)(CUstream, P, P, I, I, I, I, I, P, I, I, I, P, int32_t, int32_t, int32_t, int32_t, P,
                                  const CUdeviceptr *, const CUdeviceptr *);
#undef P
#undef I
static const int comb_sizes[18] = {1024, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4, 8};
enum { COMB_PARAM_BYTES = 1024 + 12 * 8 + 16 + 8 };

/* s2_combine of three inputs (contiguous, or BHSD-strided into a padded
 * output) against the combine launcher given the same pointers: grid,
 * block, shared memory and every parameter byte, the table included. */
static void compare_combine(s2_ctx *ctx, s2_device *dev, s2_attn_kernel *ak, comb_launcher launch, s2_dtype dt, int D,
                            bool bhsd)
{
    enum { NIN = 3, B = 2, S = 3 };
    const int H = 4;
    fake_param_sizes(comb_sizes, 18);
    s2_combine_args c = {.n = NIN, .batch = B, .heads = H, .head_dim = D, .seq = S, .dtype = dt};
    size_t ob = (size_t)B * S * H * D * 2 + 64 * (size_t)D, lb = (size_t)B * H * S * 4;
    CUdeviceptr o_in[NIN], lse_in[NIN];
    for (int i = 0; i < NIN; i++) {
        ck_assert_int_eq(s2_mem_alloc(ctx, dev, ob, &c.o_in[i]), S2_OK);
        ck_assert_int_eq(s2_mem_alloc(ctx, dev, lb, &c.lse_in[i]), S2_OK);
        o_in[i] = c.o_in[i], lse_in[i] = c.lse_in[i];
    }
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, ob, &c.o), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, lb, &c.lse), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, (size_t)H * sizeof(float), &c.sinks), S2_OK);
    int64_t bshd[3] = {(int64_t)S * H * D, (int64_t)H * D, D}, pad[3] = {(int64_t)H * S * D + 8 * D, D, (int64_t)S * D};
    memcpy(c.in_stride, bshd, sizeof bshd);
    memcpy(c.o_stride, bhsd ? pad : bshd, sizeof bshd);
    CUstream stream = (CUstream)(uintptr_t)0x70;
    long long launches = fake_get("launches");
    ck_assert_msg(s2_combine(ctx, ak, stream, &c) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_int_eq(fake_get("launches"), launches + 1);
    long long rs[8], gs[8];
    unsigned char rt[COMB_PARAM_BYTES];
    const unsigned char *rp = fake_launch_at(0, rs);
    ck_assert_ptr_nonnull(rp);
    ck_assert_int_eq(rs[7], COMB_PARAM_BYTES);
    memcpy(rt, rp, COMB_PARAM_BYTES);
    const int64_t *is = c.in_stride, *os = c.o_stride;
    fake_set("set_current", 1);
    CUresult r = launch(stream, 0, 0, 0, 0, is[0], is[1], is[2], c.o, os[0], os[1], os[2], c.lse, NIN, S, H, B * S * H,
                        c.sinks, o_in, lse_in);
    ck_assert_int_eq(r, CUDA_SUCCESS);
    ck_assert_int_eq(fake_get("launches"), launches + 2);
    const unsigned char *gp = fake_launch_at(0, gs);
    ck_assert_ptr_nonnull(gp);
    for (int i = 0; i < 8; i++)
        ck_assert_msg(rs[i] == gs[i], "combine shape %d: runtime %lld, launcher %lld", i, rs[i], gs[i]);
    /* rows B * S * H over 128 threads of D / 8 per row */
    ck_assert_int_eq(rs[0], (B * S * H + 128 / (D / 8) - 1) / (128 / (D / 8)));
    ck_assert_int_eq(rs[1], 1);
    for (int i = 0; i < COMB_PARAM_BYTES; i++)
        ck_assert_msg(rt[i] == gp[i], "combine parameter byte %d: runtime 0x%02x, launcher 0x%02x", i, rt[i], gp[i]);
    uint64_t first;
    memcpy(&first, gp + 64 * 8, 8);
    ck_assert_uint_eq(first, c.lse_in[0]);
    /* a 65th input is refused, nothing launched */
    r = launch(stream, 0, 0, 0, 0, is[0], is[1], is[2], c.o, os[0], os[1], os[2], c.lse, 65, S, H, B * S * H, 0,
               NULL, NULL);
    ck_assert_int_eq(r, CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(fake_get("launches"), launches + 2);
    for (int i = 0; i < NIN; i++) {
        ck_assert_int_eq(s2_mem_free(ctx, dev, c.o_in[i]), S2_OK);
        ck_assert_int_eq(s2_mem_free(ctx, dev, c.lse_in[i]), S2_OK);
    }
    ck_assert_int_eq(s2_mem_free(ctx, dev, c.o), S2_OK);
    ck_assert_int_eq(s2_mem_free(ctx, dev, c.sinks), S2_OK);
    ck_assert_int_eq(s2_mem_free(ctx, dev, c.lse), S2_OK);
}

static void check_decode(int which, s2_dtype dt, int head_dim, s2_arch arch, int splits, const char *mod)
{
    use_fake();
    fake_param_sizes(dec_sizes, 34);
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    ck_assert_msg(s2_device_open(ctx, 0, &dev) == S2_OK, "%s", s2_ctx_message(ctx));
    s2_pattern_set *set = NULL;
    s2_artifact *art = NULL;
    s2_local_stride_args la;
    attn_pattern_args(which, &la);
    ck_assert_int_eq(s2_pattern_from_args(ctx, &la, &set), S2_OK);
    const s2_pattern *p = s2_pattern_set_get(set, 0);
    s2_kspec spec = {.kind = S2_KERNEL_DECODE, .dtype = dt, .head_dim = head_dim, .arch = arch};
    ck_assert_msg(s2_compile_kspec1(ctx, p, &spec, S2_CUBIN_AUTO, &art) == S2_OK, "%s", s2_ctx_message(ctx));
    s2_manifest *m = manifest_of(ctx, art);
    const s2_manifest_kernel *mk = s2_manifest_kernel_at(m, 0);
    ck_assert_int_eq(mk->spec.kind, S2_KERNEL_DECODE);
    /* what `s2c compile --emit c` does (tools/cmd_compile.c): NAME and NAME_combine, the
     * combine's grid cdiv(rows, threads / (head_dim / 8)) */
    const s2_kernel_record *cr = s2_manifest_kernel_fn(mk, S2_ROLE_COMBINE);
    ck_assert_ptr_nonnull(cr);
    char csym[256];
    snprintf(csym, sizeof csym, "%s", cr->symbol);
    s2_aot_kernel k[2] = {{.name = "dec", .symbol = mk->name, .abi = s2_aot_abi_attn_decode(), .threads = mk->threads,
                           .smem_bytes = mk->smem_bytes},
                          {.name = "comb", .symbol = csym, .abi = s2_aot_abi_attn_combine(), .threads = cr->threads,
                           .smem_bytes = cr->smem_bytes, .grid_div = {cr->threads / (cr->spec.head_dim / 8)}}};
    s2_aot_module am = {.name = mod, .cubin = art->cubin, .cubin_size = art->cubin_size, .manifest = art->manifest,
                        .kernels = k, .num_kernels = 2};
    void *so = NULL;
    dec_launcher launch = (dec_launcher)open_aot(ctx, &am, "dec", &so);
    char sym[64];
    snprintf(sym, sizeof sym, "%s_comb", mod);
    comb_launcher comb = (comb_launcher)dlsym(so, sym);
    ck_assert_ptr_nonnull(comb);
    s2_manifest_free(m);

    s2_attn_kernel *ak = NULL;
    ck_assert_msg(s2_attn_load(ctx, dev, art->cubin, art->cubin_size, NULL, dt, head_dim, &ak) == S2_OK, "%s",
                  s2_ctx_message(ctx));
    enum { B = 2, PS = 16, MAXP = 4, NP = B * MAXP };
    const int H = p->heads, HK = p->kv_heads;
    const int64_t D = head_dim;
    s2_devptr q, o, lse, kp, vp, table, lens, ws = 0;
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, (size_t)B * H * D * 2, &q), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, (size_t)B * H * D * 2, &o), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, (size_t)B * H * 4, &lse), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, (size_t)NP * PS * HK * D * 2, &kp), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, (size_t)NP * PS * HK * D * 2, &vp), S2_OK);
    int32_t tab[B * MAXP], sl[B] = {50, 33};
    for (int i = 0; i < B * MAXP; i++)
        tab[i] = B * MAXP - 1 - i;
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, sizeof tab, &table), S2_OK);
    ck_assert_int_eq(s2_mem_alloc(ctx, dev, sizeof sl, &lens), S2_OK);
    ck_assert_int_eq(s2_memcpy_h2d(ctx, dev, table, tab, sizeof tab), S2_OK);
    ck_assert_int_eq(s2_memcpy_h2d(ctx, dev, lens, sl, sizeof sl), S2_OK);
    s2_attn_decode_args a = {.batch = B, .n_new = 1, .heads = H, .kv_heads = HK, .head_dim = (int)D, .dtype = dt,
                             .q = q, .o = o, .lse = lse, .k_pages = kp, .v_pages = vp, .num_pages = NP,
                             .page_size = PS, .q_stride = {H * D, H * D, D}, .o_stride = {H * D, H * D, D},
                             .k_stride = {PS * HK * D, HK * D, D}, .v_stride = {PS * HK * D, HK * D, D},
                             .block_table = table, .table_stride = {MAXP, 0}, .max_pages_per_seq = MAXP,
                             .seq_lens = lens, .max_seq_len = MAXP * PS, .splits = splits};
    size_t wsb = 0;
    ck_assert_msg(s2_attn_decode_workspace(ctx, ak, &a, &wsb) == S2_OK, "%s", s2_ctx_message(ctx));
    if (wsb) {
        ck_assert_int_eq(s2_mem_alloc(ctx, dev, wsb, &ws), S2_OK);
        ck_assert_int_eq(s2_memset_d8(ctx, dev, ws, 0, wsb), S2_OK);
    }
    a.workspace = ws;
    long long launches = fake_get("launches");
    CUstream stream = (CUstream)(uintptr_t)0x60;
    ck_assert_msg(s2_attn_decode(ctx, ak, stream, &a) == S2_OK, "%s", s2_ctx_message(ctx));
    ck_assert_int_eq(fake_get("launches"), launches + 1);
    long long rs[8], gs[8];
    unsigned char rt[DEC_PARAM_BYTES];
    const unsigned char *rp = fake_launch_at(0, rs);
    ck_assert_ptr_nonnull(rp);
    ck_assert_int_eq(rs[7], DEC_PARAM_BYTES);
    memcpy(rt, rp, DEC_PARAM_BYTES);
    /* the workspace carving and the kept-block lists are the caller's: take the runtime's */
    CUdeviceptr ws_o, ws_lse, cls, offs, ent, counters;
    int32_t qb, sp;
    memcpy(&ws_o, rt + 40, 8), memcpy(&ws_lse, rt + 48, 8);
    memcpy(&cls, rt + 196, 8), memcpy(&offs, rt + 204, 8), memcpy(&ent, rt + 212, 8);
    memcpy(&qb, rt + 220, 4), memcpy(&sp, rt + 224, 4), memcpy(&counters, rt + 228, 8);
    ck_assert_int_eq(sp, splits);
    ck_assert(splits > 1 ? ws_o != 0 && counters == ws : ws_o == 0 && counters == 0);
    float scale_log2 = (float)(1.0 / sqrt((double)D) * 1.4426950408889634);
    fake_set("set_current", 1);
    CUresult r = launch(stream, q, kp, vp, o, lse, ws_o, ws_lse, a.q_stride[0], a.q_stride[1], a.q_stride[2],
                        a.k_stride[0], a.k_stride[1], a.k_stride[2], a.v_stride[0], a.v_stride[1], a.v_stride[2],
                        a.o_stride[0], a.o_stride[1], a.o_stride[2], table, MAXP, 0, lens, 1, PS, scale_log2, cls,
                        offs, ent, qb, sp, counters, 0, 0, HK, B);
    ck_assert_int_eq(r, CUDA_SUCCESS);
    ck_assert_int_eq(fake_get("launches"), launches + 2);
    const unsigned char *gp = fake_launch_at(0, gs);
    ck_assert_ptr_nonnull(gp);
    for (int i = 0; i < 8; i++)
        ck_assert_msg(rs[i] == gs[i], "decode shape %d: runtime %lld, launcher %lld", i, rs[i], gs[i]);
    ck_assert_int_eq(rs[0], splits);
    ck_assert_int_eq(rs[1], HK);
    for (int i = 0; i < DEC_PARAM_BYTES; i++)
        ck_assert_msg(rt[i] == gp[i], "decode parameter byte %d", i);
    compare_combine(ctx, dev, ak, comb, dt, (int)D, false);
    compare_combine(ctx, dev, ak, comb, dt, (int)D, true);

    s2_devptr bufs[] = {q, o, lse, kp, vp, table, lens, ws};
    for (int i = 0; i < 8; i++)
        if (bufs[i])
            ck_assert_int_eq(s2_mem_free(ctx, dev, bufs[i]), S2_OK);
    s2_attn_kernel_free(ak);
    s2_device_free(dev);
    s2_artifact_free(art);
    s2_pattern_set_free(set);
    s2_ctx_free(ctx);
}

/* GQA 32/8 (group 4), bf16 d128, three KV splits through the workspace; the combine at d128 */
START_TEST(decode_launcher_matches_runtime_split)
{
    check_decode(3, S2_DTYPE_BF16, 128, S2_ARCH_SM80, 3, "deca");
}
END_TEST

/* causal 4 heads, f16 d64, one split (no workspace); the combine at d64 */
START_TEST(decode_launcher_matches_runtime_single)
{
    check_decode(0, S2_DTYPE_F16, 64, S2_ARCH_SM80, 1, "decb");
}
END_TEST

/* GQA 32/8 on sm_90a (the wgmma backward), bf16 d64 */
START_TEST(bwd_launchers_match_runtime_sm90a)
{
    check_bwd(3, S2_DTYPE_BF16, 64, S2_ARCH_SM90A, "bwa");
}
END_TEST

/* causal block 64 on sm_90a, bf16 d128: the module has NAME_dqds and
 * NAME_dqds2; the dS path's launches (workspace of
 * s2_attn_backward_workspace) against _dqds and, paired, _dqds2 */
START_TEST(bwd_launchers_match_runtime_ds)
{
    check_bwd(0, S2_DTYPE_BF16, 128, S2_ARCH_SM90A, "bwc");
}
END_TEST

/* causal block 64 on mma.sync, f16 d128 */
START_TEST(bwd_launchers_match_runtime_sm80)
{
    check_bwd(0, S2_DTYPE_F16, 128, S2_ARCH_SM80, "bwb");
}
END_TEST

/* GQA 32/8, block 32, bf16 d64: box rows = block_n */
START_TEST(tma_launcher_matches_runtime_gqa)
{
    check_pattern(3, S2_DTYPE_BF16, 64, 0, "gqa");
}
END_TEST

/* causal block 64, f16 d128 */
START_TEST(tma_launcher_matches_runtime_causal)
{
    check_pattern(0, S2_DTYPE_F16, 128, 0, "causal");
}
END_TEST

/* causal block 64 (local 8, stride 16) at 8K, bf16 d128: the wide variant
 * on the persistent grid, owned pairs (725 keys per query tile) */
START_TEST(wide_launcher_matches_runtime)
{
    check_wide(0, S2_DTYPE_BF16, 8192, "wide");
}
END_TEST

/* block 32 gathered two at a time: k/v boxes of block_n / 2 rows */
START_TEST(tma_launcher_matches_runtime_gathered)
{
    check_pattern(4, S2_DTYPE_BF16, 128, 2, "gathered");
}
END_TEST

int main(int argc, char **argv)
{
    fake_path = s2t_fake_libcuda_arg(argc, argv);
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/s2c-aot-fake-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    Suite *s = suite_create("aot_fake");
    TCase *tc_ = tcase_create("tma");
    tcase_set_timeout(tc_, 240);
    tcase_add_test(tc_, tma_launcher_matches_runtime_gqa);
    tcase_add_test(tc_, tma_launcher_matches_runtime_causal);
    tcase_add_test(tc_, tma_launcher_matches_runtime_gathered);
    tcase_add_test(tc_, wide_launcher_matches_runtime);
    tcase_add_test(tc_, bwd_launchers_match_runtime_sm90a);
    tcase_add_test(tc_, bwd_launchers_match_runtime_ds);
    tcase_add_test(tc_, bwd_launchers_match_runtime_sm80);
    tcase_add_test(tc_, decode_launcher_matches_runtime_split);
    tcase_add_test(tc_, decode_launcher_matches_runtime_single);
    suite_add_tcase(s, tc_);
    int failed = s2t_run_suite(s);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp_dir);
    return failed ? 1 : 0;
}
