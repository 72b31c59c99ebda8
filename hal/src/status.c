/* SPDX-License-Identifier: Apache-2.0 */
/* Status names and the thread-local last-error message. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "hal/src/core.h"

#define HAL_ERROR_MESSAGE_MAX 1024

static _Thread_local char last_error[HAL_ERROR_MESSAGE_MAX];
/* Detail a backend left through host->set_error for the call in progress on this thread. */
static _Thread_local char backend_detail[HAL_ERROR_MESSAGE_MAX];
static _Thread_local bool backend_detail_set;

const char *hal_status_string(hal_status_t status)
{
    switch (status) {
    case HAL_OK:
        return "HAL_OK";
    case HAL_NOT_READY:
        return "HAL_NOT_READY";
    case HAL_IN_PROGRESS:
        return "HAL_IN_PROGRESS";
    case HAL_ERROR_INVALID_ARGUMENT:
        return "HAL_ERROR_INVALID_ARGUMENT";
    case HAL_ERROR_INVALID_HANDLE:
        return "HAL_ERROR_INVALID_HANDLE";
    case HAL_ERROR_UNSUPPORTED:
        return "HAL_ERROR_UNSUPPORTED";
    case HAL_ERROR_OUT_OF_DEVICE_MEMORY:
        return "HAL_ERROR_OUT_OF_DEVICE_MEMORY";
    case HAL_ERROR_OUT_OF_HOST_MEMORY:
        return "HAL_ERROR_OUT_OF_HOST_MEMORY";
    case HAL_ERROR_NOT_FOUND:
        return "HAL_ERROR_NOT_FOUND";
    case HAL_ERROR_VERSION_MISMATCH:
        return "HAL_ERROR_VERSION_MISMATCH";
    case HAL_ERROR_PERMISSION_DENIED:
        return "HAL_ERROR_PERMISSION_DENIED";
    case HAL_ERROR_TIMEOUT:
        return "HAL_ERROR_TIMEOUT";
    case HAL_ERROR_DEVICE_LOST:
        return "HAL_ERROR_DEVICE_LOST";
    case HAL_ERROR_REMOTE:
        return "HAL_ERROR_REMOTE";
    case HAL_ERROR_ABORTED:
        return "HAL_ERROR_ABORTED";
    case HAL_ERROR_BUSY:
        return "HAL_ERROR_BUSY";
    case HAL_ERROR_INTERNAL:
        return "HAL_ERROR_INTERNAL";
    case HAL_ERROR_BACKEND_SPECIFIC:
        return "HAL_ERROR_BACKEND_SPECIFIC";
    case HAL_STATUS_FORCE_U32:
        break;
    }
    return "HAL_STATUS_UNKNOWN";
}

const char *hal_last_error_message(void)
{
    return last_error;
}

hal_status_t hal_error(hal_status_t status, const char *backend, const char *call, const char *fmt,
                       ...)
{
    int n = snprintf(last_error, sizeof(last_error), "%s: %s: ", backend ? backend : "hal", call);
    if (n < 0 || (size_t)n >= sizeof(last_error))
        return status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error + n, sizeof(last_error) - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

void hal_host_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(backend_detail, sizeof(backend_detail), fmt, ap);
    va_end(ap);
    backend_detail_set = true;
}

const char *hal_host_take_error(void)
{
    if (!backend_detail_set)
        return NULL;
    backend_detail_set = false;
    return backend_detail;
}

hal_status_t hal_backend_error(hal_status_t status, const hal_backend_ops_t *ops, const char *call)
{
    if (backend_detail_set) {
        backend_detail_set = false;
        return hal_error(status, ops->name, call, "%s", backend_detail);
    }
    return hal_error(status, ops->name, call, "%s", hal_status_string(status));
}

hal_status_t hal_slot_missing(const char *slot)
{
    hal_host_set_error("the backend does not implement %s", slot);
    return HAL_ERROR_UNSUPPORTED;
}
