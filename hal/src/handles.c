/* SPDX-License-Identifier: Apache-2.0 */
/* Explaining a rejected handle. Cold path: the checks themselves are inline (core.h). */
#include "hal/src/core.h"

static const char *type_of_magic(uint32_t magic)
{
    switch (magic) {
    case HAL_MAGIC_BACKEND:
        return "hal_backend_t";
    case HAL_MAGIC_DEVICE:
        return "hal_device_t";
    case HAL_MAGIC_STREAM:
        return "hal_stream_t";
    case HAL_MAGIC_EVENT:
        return "hal_event_t";
    case HAL_MAGIC_ALLOCATOR:
        return "hal_allocator_t";
    case HAL_MAGIC_COMM:
        return "hal_comm_t";
    case HAL_MAGIC_PROGRAM:
        return "hal_program_t";
    case HAL_MAGIC_KERNEL:
        return "hal_kernel_t";
    default:
        return NULL;
    }
}

hal_status_t hal_bad_handle(const void *h, uint32_t magic, const char *type, const char *call)
{
    (void)magic;
    if (!h)
        return hal_error(HAL_ERROR_INVALID_HANDLE, NULL, call, "%s is NULL", type);
    const hal_object_t *obj = h;
    if (obj->magic == HAL_MAGIC_DEAD) {
        const char *was = type_of_magic(obj->dead_type);
        return hal_error(HAL_ERROR_INVALID_HANDLE, NULL, call,
                         "%s %p was used after it was destroyed%s%s%s", type, h,
                         was ? " (it was a " : "", was ? was : "", was ? ")" : "");
    }
    if (obj->magic == HAL_MAGIC_FORKED)
        return hal_error(HAL_ERROR_INVALID_HANDLE, NULL, call,
                         "%s %p was created before this process was forked: the parent's HAL "
                         "objects cannot be used in a forked child (open the backend again)",
                         type, h);
    const char *actual = type_of_magic(obj->magic);
    if (actual)
        return hal_error(HAL_ERROR_INVALID_HANDLE, NULL, call, "%p is a %s, not a %s", h, actual,
                         type);
    return hal_error(HAL_ERROR_INVALID_HANDLE, NULL, call, "%p is not a valid %s", h, type);
}
