/* The fake libcuda (tests/runtime/fake_cuda.c) for the programs that drive
 * the runtime without a GPU: S2C_LIBCUDA names it, and its control calls are
 * looked up in the copy the runtime loads.  Header only. */
#ifndef S2C_TEST_FAKE_DRIVER_H
#define S2C_TEST_FAKE_DRIVER_H

#include "../runtime/fake_cuda.h"

#include <check.h>
#include <dlfcn.h>
#include <stdlib.h>

/* Point S2C_LIBCUDA at the fake at path, open it and find fake_cuda_set and
 * fake_cuda_get; its handle, for the program's other lookups. */
static inline void *s2t_fake_open(const char *path, fake_cuda_set_fn *set, fake_cuda_get_fn *get)
{
    ck_assert_int_eq(setenv("S2C_LIBCUDA", path, 1), 0);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(h != NULL, "dlopen %s: %s", path, dlerror());
    *set = (fake_cuda_set_fn)dlsym(h, "fake_cuda_set");
    *get = (fake_cuda_get_fn)dlsym(h, "fake_cuda_get");
    ck_assert(*set && *get);
    return h;
}

#endif
