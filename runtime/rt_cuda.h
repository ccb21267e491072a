/* The runtime's CUDA objects below the attention API: the device's CUDA
 * context, pointer checks, modules and functions (one CUmodule, one
 * CUfunction), launches, streams, events and tensor-map encoding.  The
 * runtime's launches use them and tests and benches call them; not installed,
 * not exported from libs2rt.so (callers link the static libraries).
 * Threads and lifetimes: as s2c/runtime.h; free functions before their
 * module, modules before their device. */
#ifndef S2C_RT_CUDA_H
#define S2C_RT_CUDA_H

#include "s2c/runtime.h"

#include <stddef.h>
#include <stdint.h>

typedef struct s2_cumodule s2_cumodule;
typedef struct s2_cufunction s2_cufunction;

/* The device's CUcontext, for callers of the driver itself. */
void *s2_device_cu_context(const s2_device *dev);

/* Check that `ptr` may be handed to a kernel on `dev` as the argument called
 * `what` (used in the message): non-zero, a multiple of `align` (a power of
 * two, 0 or 1 for none), memory the driver knows as device or managed memory
 * of this device and (when the driver names one) this context, and, when
 * bytes > 0, that [ptr, ptr + bytes) lies inside one allocation.
 * Host memory, even pinned, is refused: S2_ERR_INVALID for every failure. */
s2_status s2_check_device_ptr(s2_ctx *ctx, const s2_device *dev, s2_devptr ptr,
                       size_t bytes, size_t align, const char *what);

/* Streams and events: s2c/runtime.h. */

/* ---- tensor maps ------------------------------------------------------------ */

/* cuTensorMapEncodeTiled for a tiled (non-interleaved) map: dims[rank]
 * element counts, innermost first; strides[rank-1] in BYTES for dims
 * 1..rank-1 (multiples of 16); box[rank] elements per dim (box[0] times the
 * element size at most swizzle_bytes when swizzling); element strides 1,
 * L2 promotion 256 B, out-of-bounds elements read as zero.  swizzle_bytes:
 * 0, 32, 64 or 128.  dev's context is made current for the call (the driver
 * wants one).  S2_ERR_INVALID with the driver's reason when it refuses,
 * S2_ERR_UNSUPPORTED when the driver has no tensor maps. */
s2_status s2_tensor_map_encode_tiled(s2_ctx *ctx, const s2_device *dev, s2_tensor_map *map, s2_dtype dtype, int rank,
                              s2_devptr addr,
                              const uint64_t *dims, const uint64_t *strides, const uint32_t *box,
                              int swizzle_bytes);

/* ---- modules and functions (a CUmodule, a CUfunction) -------------------- */

/* Load a cubin, fatbin or PTX image (the driver JIT-compiles PTX).  PTX need
 * not be NUL-terminated within `size`; the image is not kept after the call. */
s2_status s2_cumodule_load_data(s2_ctx *ctx, s2_device *dev, const void *image, size_t size,
                                s2_cumodule **out);
void s2_cumodule_free(s2_cumodule *mod); /* NULL is fine */

/* S2_ERR_NOT_FOUND when the module has no kernel of that name. */
s2_status s2_cufunction_get(s2_ctx *ctx, s2_cumodule *mod, const char *name, s2_cufunction **out);
void s2_cufunction_free(s2_cufunction *k); /* NULL is fine */
const char *s2_cufunction_name(const s2_cufunction *k);

typedef struct s2_cufunction_attrs {
    int num_regs;
    int max_threads_per_block;
    int static_smem_bytes;
    int local_bytes;            /* per thread */
    int const_bytes;
    int max_dynamic_smem_bytes; /* the current limit; launches raise it as needed */
    int ptx_version;            /* 10 * major + minor */
    int binary_version;
} s2_cufunction_attrs;

s2_status s2_cufunction_get_attrs(s2_ctx *ctx, s2_cufunction *k, s2_cufunction_attrs *out);

typedef struct s2_launch_cfg {
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t smem_bytes; /* dynamic shared memory */
    void *stream;        /* CUstream; NULL = legacy default stream */
} s2_launch_cfg;

/* Launch asynchronously on cfg->stream.  Dimensions are checked against the
 * device and the kernel; dynamic shared memory above the kernel's current
 * limit raises that limit first (up to the device's opt-in maximum minus the
 * kernel's static shared memory, else S2_ERR_INVALID). */
s2_status s2_cufunction_launch(s2_ctx *ctx, s2_cufunction *k, const s2_launch_cfg *cfg, void **args);

/* The CUfunction in an attention kernel's fwd slot (tests inspect it). */
typedef struct s2_attn_kernel s2_attn_kernel;
s2_cufunction *s2_attn_kernel_cufunction(const s2_attn_kernel *k);

#endif
