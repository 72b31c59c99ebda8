/* SPDX-License-Identifier: Apache-2.0 */
/* Backend toolkit: host services and status names (see hq_host.h). */
#include <stdarg.h>
#include <stdio.h>

#include "hal_backends/common/hq_host.h"

/* Whether `field` of the services lies inside their struct_size. */
#define HQ_HOST_HAS(host, field) HAL_STRUCT_HAS(hal_host_services_t, field, (host)->struct_size)

void hq_set_error(const hal_host_services_t *host, const char *fmt, ...)
{
    if (host == NULL || !HQ_HOST_HAS(host, set_error) || host->set_error == NULL)
        return;
    /* The services take a format; the detail is formatted here and passed through "%s". */
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    host->set_error("%s", buf);
}

const char *hq_take_error(const hal_host_services_t *host)
{
    if (host == NULL || !HQ_HOST_HAS(host, take_error) || host->take_error == NULL)
        return NULL;
    return host->take_error();
}

const char *hq_status_name(hal_status_t status)
{
    static const char *const names[] = {
        "HAL_OK",
        "HAL_NOT_READY",
        "HAL_IN_PROGRESS",
        "HAL_ERROR_INVALID_ARGUMENT",
        "HAL_ERROR_INVALID_HANDLE",
        "HAL_ERROR_UNSUPPORTED",
        "HAL_ERROR_OUT_OF_DEVICE_MEMORY",
        "HAL_ERROR_OUT_OF_HOST_MEMORY",
        "HAL_ERROR_NOT_FOUND",
        "HAL_ERROR_VERSION_MISMATCH",
        "HAL_ERROR_PERMISSION_DENIED",
        "HAL_ERROR_TIMEOUT",
        "HAL_ERROR_DEVICE_LOST",
        "HAL_ERROR_REMOTE",
        "HAL_ERROR_ABORTED",
        "HAL_ERROR_BUSY",
        "HAL_ERROR_INTERNAL",
        "HAL_ERROR_BACKEND_SPECIFIC",
    };
    if ((unsigned)status < sizeof(names) / sizeof(names[0]))
        return names[status];
    return "HAL_STATUS_UNKNOWN";
}
