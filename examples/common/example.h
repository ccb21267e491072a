/* What the examples share that is not about s2c's API: opening the device
 * (or skipping), random inputs on the device, and the check of a kernel's
 * output against the float64 CPU reference (s2c/ref.h).  The calls the
 * examples are about (loading, finding, compiling, s2_attn_forward) are in
 * the examples themselves. */
#ifndef S2C_EXAMPLE_H
#define S2C_EXAMPLE_H

#include "s2c/attn_runtime.h"

#include <stdint.h>

enum { EX_SKIP = 77 };   /* the exit status Meson counts as skipped */

/* Device 0.  Returns 0 with *dev open, EX_SKIP (after saying why) without
 * a driver, a device, or a device of compute capability 8.x or 9.x, and 1
 * on an error. */
int ex_open_device(s2_ctx *ctx, s2_device **dev);

/* S2C_SEED, else the time: printed, so a run can be repeated. */
uint64_t ex_seed(void);

/* One forward problem for a kernel: q, k, v random in (batch, seq, head,
 * dim) layout on the host and the device, o and lse allocated on the device
 * and filled with NaN, so that whatever the kernel misses shows up. */
typedef struct ex_problem {
    const s2_attn_kernel *kernel;
    int batch;
    int64_t q_len, kv_len;   /* the queries are the last q_len of kv_len positions */
    uint16_t *q, *k, *v;     /* bf16 or f16 */
    s2_devptr dq, dk, dv, dout, dlse;
} ex_problem;

s2_status ex_problem_new(s2_ctx *ctx, s2_device *dev, const s2_attn_kernel *k, int batch, int64_t q_len,
                         int64_t kv_len, uint64_t seed, ex_problem *pr);
void ex_problem_free(s2_ctx *ctx, s2_device *dev, ex_problem *pr);

/* Relative Frobenius error of o; LSE must be -inf where the reference's is
 * (rows with no kept key) and within 1e-3 elsewhere; no NaN may be left. */
typedef struct ex_result {
    double o_err, lse_err, tol;   /* tol: 2e-2 for bf16, 5e-3 for f16 */
    int64_t nan_o, bad_lse;
    bool ok;
} ex_result;

/* Copies o and lse back (after the launch has finished) and compares them
 * with s2_ref_forward on the same inputs. */
s2_status ex_problem_check(s2_ctx *ctx, s2_device *dev, const ex_problem *pr, ex_result *r);

void ex_print_header(void);
void ex_print_row(const ex_problem *pr, const ex_result *r);

#endif
