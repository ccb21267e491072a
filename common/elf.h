/* Reading symbols out of ELF64 little-endian images (cubins) without a GPU.
 * Internal to s2c; s2_cubin_find_manifest (attention.h) is built on it. */
#ifndef S2C_ELF_H
#define S2C_ELF_H

#include "s2c/common.h"

#include <stddef.h>
#include <stdint.h>

/* Find the defined symbol `name` in the image's symbol table(s) and hand back
 * its initialized bytes: *bytes points into `image`, *len = st_size.
 * The image is untrusted: every offset and count is bounds-checked, and any
 * malformation gives S2_ERR_PARSE with a message, never a read outside
 * [image, image + size).  S2_ERR_NOT_FOUND when the image is well formed but
 * has no such defined symbol.  A symbol in a section without file contents
 * (SHT_NOBITS: uninitialized data) is S2_ERR_PARSE. */
s2_status s2_elf_find_symbol(s2_ctx *ctx, const void *image, size_t size, const char *name,
                             const uint8_t **bytes, size_t *len);

/* The register count ptxas or nvJitLink recorded for kernel `name`
 * (EIATTR_REGCOUNT): from the kernel's own .nv.info.NAME section, else from
 * the module's .nv.info record naming the symbol's index in the symbol table
 * that section links.  Untrusted image, as above: malformed sections or
 * records are S2_ERR_PARSE; S2_ERR_NOT_FOUND when the image is sound but
 * records no count for that kernel. */
s2_status s2_elf_regcount(s2_ctx *ctx, const void *image, size_t size, const char *name, int *regs);

#endif
