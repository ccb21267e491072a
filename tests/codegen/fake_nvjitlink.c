/* A stand-in libnvJitLink of the 12.x kind: only the versioned entry points
 * (__nvJitLinkCreate_12_4, ...) that the 12.x header's inline wrappers call.
 * Linking always fails with a known error log, so a test can tell that s2c
 * found this library and resolved its symbols. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_API __attribute__((visibility("default")))

static const char fake_log[] = "fake nvJitLink 12.4: no linker here";

FAKE_API int __nvJitLinkCreate_12_4(void **h, uint32_t n, const char **opts);
FAKE_API int __nvJitLinkDestroy_12_4(void **h);
FAKE_API int __nvJitLinkAddData_12_4(void *h, int type, const void *data, size_t size, const char *name);
FAKE_API int __nvJitLinkComplete_12_4(void *h);
FAKE_API int __nvJitLinkGetLinkedCubinSize_12_4(void *h, size_t *size);
FAKE_API int __nvJitLinkGetLinkedCubin_12_4(void *h, void *cubin);
FAKE_API int __nvJitLinkGetErrorLogSize_12_4(void *h, size_t *size);
FAKE_API int __nvJitLinkGetErrorLog_12_4(void *h, char *log);
FAKE_API int __nvJitLinkGetInfoLogSize_12_4(void *h, size_t *size);
FAKE_API int __nvJitLinkGetInfoLog_12_4(void *h, char *log);
FAKE_API int nvJitLinkVersion(unsigned *major, unsigned *minor);

int __nvJitLinkCreate_12_4(void **h, uint32_t n, const char **opts)
{
    (void)n, (void)opts;
    *h = malloc(1);
    return *h ? 0 : 1;
}
int __nvJitLinkDestroy_12_4(void **h)
{
    free(*h);
    *h = NULL;
    return 0;
}
int __nvJitLinkAddData_12_4(void *h, int type, const void *data, size_t size, const char *name)
{
    (void)h, (void)type, (void)data, (void)size, (void)name;
    return 0;
}
int __nvJitLinkComplete_12_4(void *h) { (void)h; return 6; }
int __nvJitLinkGetLinkedCubinSize_12_4(void *h, size_t *size) { (void)h; *size = 0; return 1; }
int __nvJitLinkGetLinkedCubin_12_4(void *h, void *cubin) { (void)h, (void)cubin; return 1; }
int __nvJitLinkGetErrorLogSize_12_4(void *h, size_t *size) { (void)h; *size = sizeof fake_log; return 0; }
int __nvJitLinkGetErrorLog_12_4(void *h, char *log) { (void)h; memcpy(log, fake_log, sizeof fake_log); return 0; }
int __nvJitLinkGetInfoLogSize_12_4(void *h, size_t *size) { (void)h; *size = 1; return 0; }
int __nvJitLinkGetInfoLog_12_4(void *h, char *log) { (void)h; log[0] = '\0'; return 0; }
int nvJitLinkVersion(unsigned *major, unsigned *minor)
{
    *major = 12;
    *minor = 4;
    return 0;
}
