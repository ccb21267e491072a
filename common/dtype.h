/* Internal: the element types as one table (common/dtype.c).  Every fact
 * about a dtype that the generator, the manifest, the runtime, the reference
 * and the CLI use is a column of its row; they ask the table. */
#ifndef S2C_DTYPE_H
#define S2C_DTYPE_H

#include "util.h"

/* An element's LLVM type, named without LLVM's headers; codegen's
 * s2_cg_elt_type makes the LLVMTypeRef.  LLVM has no fp8 type: i8. */
typedef enum s2_llvm_elt {
    S2_LLVM_HALF,
    S2_LLVM_BFLOAT,
    S2_LLVM_FLOAT,
    S2_LLVM_DOUBLE,
    S2_LLVM_I8,
} s2_llvm_elt;

/* The tensor-core instruction family an operand type belongs to (PTX's
 * tcgen05 .kind names it): k is 16 for 16-bit operands, 32 for 8-bit, 8 for
 * f32 (tf32). */
typedef enum s2_mma_kind {
    S2_MMA_NONE = 0, /* no tensor-core operand */
    S2_MMA_F16,      /* f16, bf16: mma.sync m16n8k16, wgmma m64nNk16 */
    S2_MMA_F8F6F4,   /* e4m3, e5m2: mma.sync m16n8k32 (sm_89+), wgmma m64nNk32 */
    S2_MMA_TF32,     /* f32 read as tf32: mma.sync m16n8k8, wgmma m64nNk8 */
} s2_mma_kind;

typedef struct s2_dtype_info {
    s2_dtype dtype;
    const char *name;        /* s2_dtype_name: kernel symbols, the manifest's kernel.dtype */
    const char *title;       /* in messages: "fp8 e4m3" */
    const char *cli[2];      /* the CLI's --dtype spellings (NULL: none) */
    size_t size;             /* bytes per element */
    s2_llvm_elt llvm;
    const char *ptx;         /* PTX type, without the dot: "bf16", "e4m3" */
    const char *ptx_x2;      /* PTX type of a packed pair: "bf16x2" */
    s2_mma_kind mma;
    int mma_k;               /* k of its mma.sync and wgmma shapes; 0: none */
    /* mma.sync m16n8k{mma_k} row.col with f32 accumulators, both operands of
     * this type (A four registers, B two, at every k); its operands are
     * <2 x llvm> (f16) where mma_vec, else i32 */
    const char *llvm_mma;
    bool mma_vec;
    const char *llvm_cvt_x2; /* two f32 rounded to nearest into a packed pair */
    int tensor_map;          /* CUtensorMapDataType of its TMA copies; -1: none */
    const char *tensor_map_name;
    /* Some template builds kernels of it, and the manifest and the runtime
     * take them; else every one of them refuses it (s2_dtype_check_kernel). */
    bool kernels;
    /* Decode reads K/V pages of it (s2_kernel_spec.kv_dtype) with 16-bit queries, converting each
     * pair in registers to f16 by llvm_to_f16x2 (i16 -> <2 x half>; sm_89 and up). */
    bool kv_pages;
    const char *llvm_to_f16x2;
    /* The reference's conversions: an element to double, and double to an
     * element rounded to nearest even (fp8: saturated to the largest finite
     * value and NaN to 0x7f, as cvt.rn.satfinite does). */
    double (*to_f64)(const void *elt);
    void (*from_f64)(void *elt, double v);
} s2_dtype_info;

/* The row of dt, or NULL for a value outside the enum. */
const s2_dtype_info *s2_dtype_info_of(s2_dtype dt);
/* The rows in enum order: count, and the i-th. */
int s2_dtype_count(void);
const s2_dtype_info *s2_dtype_row(int i);
/* The row whose manifest name (cli false) or a CLI spelling (cli true) is
 * text, or NULL. */
const s2_dtype_info *s2_dtype_by_name(const char *text, bool cli);
/* "f16 or bf16": the names (cli false) or first CLI spellings (cli true) of
 * the dtypes some template builds, for messages; truncated to cap. */
void s2_dtype_kernel_names(char *out, size_t cap, bool cli);
/* S2_OK for a dtype some template builds; else S2_ERR_UNSUPPORTED with
 * "WHAT: fp8 e4m3 is not supported by any template yet". */
s2_status s2_dtype_check_kernel(s2_ctx *ctx, s2_dtype dt, const char *what);

/* fp8 conversions (half.c): OCP e4m3 ("fn": no infinities, NaN is S.1111.111,
 * largest 448) and e5m2 (IEEE-like: infinities, largest 57344). */
double s2_e4m3_to_f64(uint8_t x);
uint8_t s2_f64_to_e4m3(double v);
double s2_e5m2_to_f64(uint8_t x);
uint8_t s2_f64_to_e5m2(double v);
/* v rounded to float so that a second rounding to a type at least two bits
 * narrower (f16, bf16) is correct: round-to-odd keeps the sticky bit. */
float s2_f64_to_f32_odd(double v);

#endif
