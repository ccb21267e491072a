/* Internal to the decode templates (templates/decode.c, templates/combine.c). */
#ifndef S2C_DECODE_INTERNAL_H
#define S2C_DECODE_INTERNAL_H

#include "cg_internal.h"
#include "s2c/decode.h"

/* NAME_combine: out = the LSE-weighted merge of the inputs (combine.c). */
s2_status s2_combine_kernel_build(s2_ctx *ctx, s2_cg *cg, s2_dtype out_dt, int D, const char *name);

#endif
