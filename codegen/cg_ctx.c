/* The LLVM side of a compilation: NVPTX target set-up, verification, the O3
 * pipeline and PTX emission. */
#include "cg_internal.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/IRReader.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

LLVMTypeRef s2_cg_elt_type(s2_cg *cg, s2_dtype dt)
{
    const s2_dtype_info *r = s2_dtype_info_of(dt);
    switch (r ? r->llvm : S2_LLVM_I8) {
    case S2_LLVM_HALF: return LLVMHalfTypeInContext(cg->llctx);
    case S2_LLVM_BFLOAT: return LLVMBFloatTypeInContext(cg->llctx);
    case S2_LLVM_FLOAT: return LLVMFloatTypeInContext(cg->llctx);
    case S2_LLVM_DOUBLE: return LLVMDoubleTypeInContext(cg->llctx);
    case S2_LLVM_I8: break;
    }
    return LLVMInt8TypeInContext(cg->llctx);
}

/* LLVM's target registry is process-global; registering it once is the
 * only global state of s2c. */
static once_flag nvptx_once = ONCE_FLAG_INIT;

static void nvptx_init(void)
{
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
}

static char *take_llvm_message(char *msg)
{
    char *copy = strdup(msg ? msg : "");
    LLVMDisposeMessage(msg);
    return copy;
}

static s2_status fail_llvm(s2_ctx *ctx, const char *what, char *msg)
{
    char *text = take_llvm_message(msg);
    s2_status st = s2_fail(ctx, S2_ERR_TOOLCHAIN, "%s: %s", what, text ? text : "(no message)");
    free(text);
    return st;
}

s2_status s2_cg_init(s2_ctx *ctx, s2_cg *cg, const s2_target *target, const char *module_name)
{
    memset(cg, 0, sizeof *cg);
    const char *cpu = target ? s2_arch_cpu(target->arch) : NULL;
    if (!cpu)
        return s2_fail(ctx, S2_ERR_INVALID, "invalid target arch");
    int ptx = target->ptx_version ? target->ptx_version : 83;
    if (ptx < 78 || ptx > 90 || (target->arch != S2_ARCH_SM80 && ptx < 80))
        return s2_fail(ctx, S2_ERR_UNSUPPORTED, "PTX version %d.%d is not supported for %s",
                       ptx / 10, ptx % 10, cpu);
    if (target->opt_level < 0 || target->opt_level > 3)
        return s2_fail(ctx, S2_ERR_INVALID, "opt_level must be 0..3, got %d", target->opt_level);
    cg->target = *target;
    cg->target.ptx_version = ptx;

    call_once(&nvptx_once, nvptx_init);

    static const char triple[] = "nvptx64-nvidia-cuda";
    char *err = NULL;
    LLVMTargetRef t = NULL;
    if (LLVMGetTargetFromTriple(triple, &t, &err))
        return fail_llvm(ctx, "NVPTX target unavailable", err);

    char features[16];
    snprintf(features, sizeof features, "+ptx%d", ptx);
    cg->tm = LLVMCreateTargetMachine(t, triple, cpu, features,
                                     target->opt_level >= 2 ? LLVMCodeGenLevelAggressive
                                                            : LLVMCodeGenLevelDefault,
                                     LLVMRelocDefault, LLVMCodeModelDefault);
    if (!cg->tm)
        goto fail;
    cg->llctx = LLVMContextCreate();
    if (!cg->llctx)
        goto fail;
    cg->mod = LLVMModuleCreateWithNameInContext(module_name, cg->llctx);
    if (!cg->mod)
        goto fail;
    LLVMSetTarget(cg->mod, triple);
    cg->dl = LLVMCreateTargetDataLayout(cg->tm);
    if (!cg->dl)
        goto fail;
    LLVMSetModuleDataLayout(cg->mod, cg->dl);
    cg->b = LLVMCreateBuilderInContext(cg->llctx);
    if (!cg->b)
        goto fail;

    cg->t_void = LLVMVoidTypeInContext(cg->llctx);
    cg->t_i1 = LLVMInt1TypeInContext(cg->llctx);
    cg->t_i32 = LLVMInt32TypeInContext(cg->llctx);
    cg->t_i64 = LLVMInt64TypeInContext(cg->llctx);
    cg->t_f32 = LLVMFloatTypeInContext(cg->llctx);
    cg->t_ptr_global = LLVMPointerTypeInContext(cg->llctx, S2_AS_GLOBAL);
    cg->t_ptr_const = LLVMPointerTypeInContext(cg->llctx, S2_AS_CONST);
    return S2_OK;

fail:
    s2_cg_destroy(cg);
    return s2_fail(ctx, S2_ERR_TOOLCHAIN, "could not set up LLVM for %s", cpu);
}

void s2_cg_destroy(s2_cg *cg)
{
    if (!cg)
        return;
    if (cg->b)
        LLVMDisposeBuilder(cg->b);
    if (cg->dl)
        LLVMDisposeTargetData(cg->dl);
    if (cg->mod)
        LLVMDisposeModule(cg->mod);
    if (cg->llctx)
        LLVMContextDispose(cg->llctx);
    if (cg->tm)
        LLVMDisposeTargetMachine(cg->tm);
    memset(cg, 0, sizeof *cg);
}

s2_status s2_cg_verify(s2_ctx *ctx, s2_cg *cg)
{
    char *err = NULL;
    if (LLVMVerifyModule(cg->mod, LLVMReturnStatusAction, &err))
        return fail_llvm(ctx, "invalid LLVM IR (a bug in s2c or a bad override)", err);
    LLVMDisposeMessage(err);
    return S2_OK;
}

s2_status s2_cg_optimize(s2_ctx *ctx, s2_cg *cg)
{
    static const char *const pipelines[4] = {
        "function(infer-address-spaces),default<O0>",
        "function(infer-address-spaces),default<O1>",
        "function(infer-address-spaces),default<O2>",
        "function(infer-address-spaces),default<O3>",
    };
    LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
    if (!opts)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    LLVMPassBuilderOptionsSetLoopVectorization(opts, 1);
    LLVMPassBuilderOptionsSetSLPVectorization(opts, 1);
    LLVMErrorRef e = LLVMRunPasses(cg->mod, pipelines[cg->target.opt_level], cg->tm, opts);
    LLVMDisposePassBuilderOptions(opts);
    if (e)
        return fail_llvm(ctx, "LLVM pass pipeline failed", LLVMGetErrorMessage(e));
    return S2_OK;
}

s2_status s2_cg_print_ir(s2_ctx *ctx, s2_cg *cg, char **text)
{
    *text = take_llvm_message(LLVMPrintModuleToString(cg->mod));
    return *text ? S2_OK : s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
}

s2_status s2_cg_replace_module(s2_ctx *ctx, s2_cg *cg, const char *text, size_t len)
{
    /* The parser takes ownership of the buffer; the copy keeps `text` ours. */
    LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(text, len, "override.ll");
    if (!buf)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    LLVMModuleRef m = NULL;
    char *err = NULL;
    if (LLVMParseIRInContext(cg->llctx, buf, &m, &err))
        return fail_llvm(ctx, "override IR does not parse", err);
    LLVMDisposeModule(cg->mod);
    cg->mod = m;
    return s2_cg_verify(ctx, cg);
}

s2_status s2_cg_emit_ptx(s2_ctx *ctx, s2_cg *cg, char **ptx, size_t *len)
{
    *ptx = NULL;
    *len = 0;
    LLVMMemoryBufferRef buf = NULL;
    char *err = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer(cg->tm, cg->mod, LLVMAssemblyFile, &err, &buf))
        return fail_llvm(ctx, "NVPTX code generation failed", err);
    size_t n = LLVMGetBufferSize(buf);
    char *out = malloc(n + 1);
    if (!out) {
        LLVMDisposeMemoryBuffer(buf);
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    }
    memcpy(out, LLVMGetBufferStart(buf), n);
    out[n] = '\0';
    LLVMDisposeMemoryBuffer(buf);
    /* the buffer may carry a trailing NUL of its own */
    while (n > 0 && out[n - 1] == '\0')
        n--;
    *ptx = out;
    *len = n;
    return S2_OK;
}
