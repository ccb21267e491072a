#include "gpu_harness.h"

#include "s2c/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int s2t_gpu_start(const char *what, const char *arch_env, s2t_gpu *g)
{
    s2_ctx *ctx = s2_ctx_new();
    int count = 0, rc = 0;
    s2_device *dev = NULL;
    s2_status st = s2_device_count(ctx, &count);
    if (st == S2_ERR_NO_DRIVER || st == S2_ERR_NO_DEVICE || count == 0) {
        printf("no CUDA driver or device (%s): skipped\n", s2_ctx_message(ctx));
        rc = 77;
        goto done;
    }
    if (s2_device_open(ctx, 0, &dev) != S2_OK) {
        printf("device 0: %s\n", s2_ctx_message(ctx));
        rc = 1;
        goto done;
    }
    const s2_device_info *info = s2_device_get_info(dev);
    if (s2_arch_for_device(info->cc_major, info->cc_minor, &g->own_arch) != S2_OK) {
        printf("compute capability %d.%d is not supported: skipped\n", info->cc_major, info->cc_minor);
        rc = 77;
        goto done;
    }
    g->arch = g->own_arch;
    const char *over = arch_env ? getenv(arch_env) : NULL;
    if (over && s2_arch_parse(over, &g->arch) != S2_OK) {
        printf("%s=%s is not an arch\n", arch_env, over);
        rc = 1;
        goto done;
    }
    g->load_ptx = g->arch != g->own_arch;
    printf("device %s (cc %d.%d), %s %s%s\n", info->name, info->cc_major, info->cc_minor, what,
           s2_arch_name(g->arch), g->load_ptx ? " (PTX, JIT-compiled by the driver)" : "");
    const char *seed_env = getenv("S2C_SEED");
    g->seed = seed_env ? strtoull(seed_env, NULL, 10) : (uint64_t)time(NULL);
    printf("seed %llu (S2C_SEED to repeat)\n", (unsigned long long)g->seed);
done:
    s2_device_free(dev);
    s2_ctx_free(ctx);
    return rc;
}

int s2t_run_nofork(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed;
}
