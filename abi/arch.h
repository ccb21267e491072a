/* Internal to s2c: the target arch's ptxas / LLVM CPU name and SM number. */
#ifndef S2C_ABI_ARCH_H
#define S2C_ABI_ARCH_H

#include "s2c/spec.h"

/* "sm_80", "sm_90", "sm_90a"; NULL for an invalid arch (s2_arch_name says "?") */
const char *s2_arch_cpu(s2_arch arch);
/* 80, 90, 90 */
int s2_arch_sm(s2_arch arch);

#endif
