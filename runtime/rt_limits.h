/* Internal to s2c: the device's limits and a loaded kernel's use, as the
 * runtime read them from the driver once (at s2_device_open and
 * s2_cufunction_get), for the launch facts (abi/launch_facts.h) of code above
 * the runtime (bench). */
#ifndef S2C_RT_LIMITS_H
#define S2C_RT_LIMITS_H

#include "launch_facts.h"
#include "s2c/runtime.h"

/* NULL for a NULL device. */
const s2_device_limits *s2_rt_device_limits(const s2_device *dev);
/* {0, 0} for a NULL kernel. */
s2_kernel_use s2_rt_kernel_use(const s2_cufunction *k);

#endif
