/* One untrusted manifest through everything that reads one: the parser, the
 * pattern summary, a layout and its schedule for a short sequence, and the
 * runtime's module load on the fake CUDA driver (the manifest wrapped in a
 * minimal cubin).  Shared by the libFuzzer harness (fuzz_manifest.c) and the
 * CPU regression test that replays the corpus (tests/runtime). */
#ifndef S2C_FUZZ_MANIFEST_PIPELINE_H
#define S2C_FUZZ_MANIFEST_PIPELINE_H

#include "s2c/runtime.h"

#include <stddef.h>
#include <stdint.h>

/* Points the runtime at the fake driver `fake_lib` (S2C_LIBCUDA) and opens
 * its device 0.  NULL when that fails; the pipeline then skips the load. */
s2_device *s2f_open_fake_device(const char *fake_lib);

/* Wraps text[0..len) (and a NUL) as the s2c_manifest symbol of a minimal
 * EM_CUDA ELF image; malloc'd, its size in *size.  NULL on out of memory. */
uint8_t *s2f_wrap_manifest(const char *text, size_t len, size_t *size);

/* Runs the pipeline on data[0..size).  Returns 0 when every check held
 * (the input was accepted or cleanly refused at each step), else 1 with
 * what went wrong in why.  *accepted (may be NULL) tells whether the
 * parser took the input. */
int s2f_manifest_pipeline(s2_device *dev, const uint8_t *data, size_t size, int *accepted, char *why,
                          size_t why_size);

#endif
