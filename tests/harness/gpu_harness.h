/* The start and the end that the GPU test programs share. */
#ifndef S2C_TEST_GPU_HARNESS_H
#define S2C_TEST_GPU_HARNESS_H

#include "s2c/codegen.h"

#include <check.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct s2t_gpu {
    s2_arch arch;      /* the arch to compile for: the device's, or the override's */
    s2_arch own_arch;  /* the device's */
    bool load_ptx;     /* arch is not the device's: load PTX, JIT-compiled by the driver */
    uint64_t seed;     /* $S2C_SEED, else the time */
} s2t_gpu;

/* Finds device 0 and its arch; arch_env (or NULL) names an environment
 * variable that may name another arch to compile for.  Prints the device,
 * the arch (`what` says what is done for it: "compiling for", "JIT for") and
 * the seed.  Returns 0 to go on, 77 to skip the program (no driver, no
 * device, an unsupported compute capability), 1 on an error. */
int s2t_gpu_start(const char *what, const char *arch_env, s2t_gpu *g);

/* Runs the suite in this process (a CUDA context does not survive fork) and
 * frees it; returns the number of failed tests. */
int s2t_run_nofork(Suite *s);

#endif
