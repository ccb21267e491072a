/* s2c — sparse attention kernels, the whole API in one include:
 *
 *   spec.h      what a kernel is generated for (arch, kind, spec)
 *   compile.h   generation (needs LLVM; libs2c): s2_compile_attention() -> s2_artifact
 *   manifest.h  what a module says about itself
 *   launch.h    the kernel ABIs and the launch arguments
 *
 * Loading and launching (no LLVM; libs2rt) is attn_runtime.h; JIT with an
 * on-disk cache is jit.h. */
#ifndef S2C_ATTENTION_H
#define S2C_ATTENTION_H

#include "s2c/compile.h"
#include "s2c/launch.h"
#include "s2c/manifest.h"
#include "s2c/spec.h"

#endif
