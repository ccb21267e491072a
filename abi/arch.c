/* Target archs: names, and the arch a device of a compute capability runs. */
#include "arch.h"

#include <string.h>

const char *s2_arch_cpu(s2_arch arch)
{
    switch (arch) {
    case S2_ARCH_SM80: return "sm_80";
    case S2_ARCH_SM90: return "sm_90";
    case S2_ARCH_SM90A: return "sm_90a";
    default: return NULL;
    }
}

int s2_arch_sm(s2_arch arch) { return arch == S2_ARCH_SM80 ? 80 : 90; }

s2_status s2_arch_parse(const char *text, s2_arch *out)
{
    static const struct { const char *name; s2_arch arch; } names[] = {
        {"sm_80", S2_ARCH_SM80}, {"80", S2_ARCH_SM80}, {"sm_90", S2_ARCH_SM90}, {"90", S2_ARCH_SM90},
        {"sm_90a", S2_ARCH_SM90A}, {"90a", S2_ARCH_SM90A},
    };
    if (!text || !out)
        return S2_ERR_INVALID;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(text, names[i].name) == 0) {
            *out = names[i].arch;
            return S2_OK;
        }
    }
    return S2_ERR_UNSUPPORTED;
}

const char *s2_arch_name(s2_arch arch)
{
    const char *n = s2_arch_cpu(arch);
    return n ? n : "?";
}

s2_status s2_arch_for_device(int major, int minor, s2_arch *out)
{
    (void)minor;
    if (!out)
        return S2_ERR_INVALID;
    if (major == 9) {
        *out = S2_ARCH_SM90A;
        return S2_OK;
    }
    if (major == 8) {
        /* sm_80 SASS runs on every 8.x device */
        *out = S2_ARCH_SM80;
        return S2_OK;
    }
    return S2_ERR_UNSUPPORTED;
}
