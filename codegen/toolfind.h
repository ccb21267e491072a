/* Where the PTX assemblers are found: ptxas and libnvJitLink, one search
 * shared by the cubin backend (cubin.c) and the cache key's toolchain
 * identity (toolchain_id.c), so both always name the same program. */
#ifndef S2C_CODEGEN_TOOLFIND_H
#define S2C_CODEGEN_TOOLFIND_H

#include <stdbool.h>
#include <stddef.h>

/* $S2C_PTXAS alone when set, else $PATH, $CUDA_HOME/bin, /usr/local/cuda/bin.
 * Writes the executable's path into path. */
bool s2_cg_find_ptxas(char *path, size_t cap);

/* dlopen()s libnvJitLink: $S2C_NVJITLINK alone when set; else the sonames
 * .so.13, .so.12 and .so through the loader's search; $CUDA_HOME/lib64 and
 * /usr/local/cuda/lib64; pip's nvidia/nvjitlink/lib (and nvidia/cu13/lib)
 * under $VIRTUAL_ENV, $CONDA_PREFIX, ~/.local and the system site dirs.
 * NULL when none loads; tried (may be NULL) then lists what was tried. */
void *s2_cg_jitlink_open(char *tried, size_t cap);

/* dlsym of an nvJitLink entry point: the plain name, else the versioned
 * alias (__NAME_13_0, __NAME_12_N) that the 12.x and 13.x headers call. */
void *s2_cg_jitlink_sym(void *lib, const char *name);

/* Run argv[0] (a path) with stdout and stderr into one pipe, handing each
 * chunk read to sink; *code gets the exit status (128 + the signal when
 * killed).  0, or the errno of the call that failed, named in *what
 * ("pipe", "posix_spawn" or "waitpid"). */
typedef void (*s2_cg_sink)(void *user, const char *data, size_t n);
int s2_cg_run_piped(char *const argv[], s2_cg_sink sink, void *user, int *code, const char **what);

#endif
