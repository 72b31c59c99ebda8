/* SPDX-License-Identifier: Apache-2.0 */
/* The accessors of service.h: what the services may know of the core's devices and streams,
 * read here so that they never depend on the objects' layouts. */
#include "hal/src/core.h"

/* See service.h. */
hal_device_t hal_stream_device(hal_stream_t stream)
{
    return stream->device;
}

/* See service.h. */
bool hal_device_validates(hal_device_t device)
{
    return device->backend->validate;
}
