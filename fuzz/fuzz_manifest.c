/* libFuzzer harness of the cubin manifest (abi/manifest_parse.c): each input
 * is manifest text, run through manifest_pipeline.c (parse, describe, layout
 * and schedules, module load on the fake driver).  It aborts when a step
 * disagrees with the ones before it or a message is not one clean line;
 * ASan/UBSan/LSan catch the rest.
 *
 * The fake driver is the shared library built from tests/runtime/fake_cuda.c:
 * $S2C_FUZZ_FAKE_CUDA, else libfakecuda.so next to the harness (fuzz/run.sh
 * builds both).  Without it the load step is skipped, with a warning. */
#include "manifest_pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static s2_device *dev;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    char lib[4096];
    const char *env = getenv("S2C_FUZZ_FAKE_CUDA");
    if (env) {
        snprintf(lib, sizeof lib, "%s", env);
    } else {
        const char *self = (*argv)[0];
        const char *slash = strrchr(self, '/');
        snprintf(lib, sizeof lib, "%.*slibfakecuda.so", slash ? (int)(slash + 1 - self) : 0, self);
    }
    dev = s2f_open_fake_device(lib);
    if (!dev)
        fprintf(stderr, "fuzz_manifest: no fake driver at %s: the module-load step is skipped\n", lib);
    return 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    char why[2048];
    if (s2f_manifest_pipeline(dev, data, size, NULL, why, sizeof why)) {
        fprintf(stderr, "fuzz_manifest: %s\n", why);
        abort();
    }
    return 0;
}
