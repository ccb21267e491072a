/* s2c — common types: status codes and the context that keeps messages.
 *
 * Every public function that can fail returns an s2_status.  When it does,
 * a human-readable message is stored in the s2_ctx passed to it (if any);
 * read it with s2_ctx_message().  The library never prints and never exits.
 * A context is not thread-safe: use one per thread.
 */
#ifndef S2C_COMMON_H
#define S2C_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* Marks the public API.  The libraries are built with hidden visibility, so
 * these declarations are all they export (their version scripts, written from
 * these headers, say the same). */
#if defined(__GNUC__) || defined(__clang__)
#define S2_API __attribute__((visibility("default")))
#else
#define S2_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum s2_status {
    S2_OK = 0,
    S2_ERR_NOMEM,          /* allocation failed */
    S2_ERR_IO,             /* file could not be read or written */
    S2_ERR_PARSE,          /* pattern or mask file is malformed */
    S2_ERR_INVALID,        /* an argument is invalid (null, out of range, inconsistent) */
    S2_ERR_UNSUPPORTED,    /* valid, but not supported (dtype, head dim, arch, ...) */
    S2_ERR_NOT_FOUND,      /* a named pattern, case or symbol does not exist */
    S2_ERR_TOOLCHAIN,      /* LLVM, ptxas or nvJitLink failed */
    S2_ERR_NO_DRIVER,      /* libcuda.so.1 could not be loaded */
    S2_ERR_NO_DEVICE,      /* the driver reports no usable device */
    S2_ERR_CUDA,           /* a CUDA driver call failed */
    S2_ERR_INTERNAL,       /* a bug in s2c */
    /* launch-argument checks: each kind of bad argument has its own status */
    S2_ERR_NULL_ARG,       /* a required pointer is null */
    S2_ERR_ALIGNMENT,      /* a pointer or stride is not aligned as the kernel needs */
    S2_ERR_SHAPE,          /* batch, lengths or dimensions are out of range or inconsistent */
    S2_ERR_STRIDE,         /* a stride is invalid (e.g. the head dimension is not contiguous) */
    S2_ERR_HEADS,          /* head counts do not match the pattern */
    S2_ERR_SEQ_LEN,        /* a sequence length exceeds the pattern's or the kernel's maximum */
    S2_ERR_DTYPE,          /* the tensors' dtype is not the kernel's */
    S2_ERR_HEAD_DIM,       /* the head dimension is not the kernel's */
    S2_ERR_DEVICE_DATA,    /* device data (seq_lens, a block table) is out of range (checked modes) */
    S2_ERR_CAPTURE,        /* the launch needs host work stream capture forbids (a first-use schedule) */
    S2_STATUS_COUNT_
} s2_status;

/* Stable short name of a status ("S2_ERR_PARSE"); never NULL. */
S2_API const char *s2_status_name(s2_status st);

typedef struct s2_ctx s2_ctx;

/* Create a context.  Returns NULL only when out of memory. */
S2_API s2_ctx *s2_ctx_new(void);
S2_API void s2_ctx_free(s2_ctx *ctx);

/* Last message recorded in ctx ("" if none).  Valid until the next call
 * that uses ctx. */
S2_API const char *s2_ctx_message(const s2_ctx *ctx);
/* Status of the last failure recorded in ctx (S2_OK if none). */
S2_API s2_status s2_ctx_status(const s2_ctx *ctx);
S2_API void s2_ctx_clear(s2_ctx *ctx);

/* Debug dumps: when a directory is set, compile stages write their
 * intermediate products there (pattern.txt, layout.txt, NAME.ll, NAME.ptx,
 * NAME.cubin).  When an override directory is set, a stage whose file exists
 * there (NAME.ll, NAME.ptx or NAME.cubin) uses it instead of its own output. */
S2_API s2_status s2_ctx_set_dump_dir(s2_ctx *ctx, const char *dir);
S2_API s2_status s2_ctx_set_override_dir(s2_ctx *ctx, const char *dir);
S2_API const char *s2_ctx_dump_dir(const s2_ctx *ctx);     /* NULL if unset */
S2_API const char *s2_ctx_override_dir(const s2_ctx *ctx); /* NULL if unset */

/* Element types of tensors. */
typedef enum s2_dtype {
    S2_DTYPE_F32 = 0,
    S2_DTYPE_F16,
    S2_DTYPE_BF16,
    S2_DTYPE_F64,
    S2_DTYPE_E4M3, /* fp8 e4m3 (OCP "fn": no infinities); decode's K/V pages only (s2_kernel_spec.kv_dtype) */
    S2_DTYPE_E5M2, /* fp8 e5m2; no template builds it yet */
} s2_dtype;

S2_API size_t s2_dtype_size(s2_dtype dt);
S2_API const char *s2_dtype_name(s2_dtype dt); /* "f32", "f16", "bf16", "f64", "e4m3", "e5m2" */

/* The library's version, "MAJOR.MINOR.PATCH": S2C_VERSION_STRING of the
 * s2c/version.h it was built with. */
S2_API const char *s2_version(void);

#ifdef __cplusplus
}
#endif
#endif
