/* SPDX-License-Identifier: Apache-2.0 */
/* Backend toolkit: the host services as a backend uses them (error details for the calling
 * thread, checked against the services' struct_size) and names of HAL statuses for messages,
 * since the core's hal_status_string is not available to a backend. */
#ifndef HAL_BACKENDS_COMMON_HQ_HOST_H
#define HAL_BACKENDS_COMMON_HQ_HOST_H

#include "hal/hal_backend_abi.h"

/* Formats a failure detail and hands it to host->set_error for the calling thread.
 * [in] host  the services given to the backend's init; NULL, or services without set_error,
 *            make the call do nothing.
 * [in] fmt   printf-style format of the detail (truncated to 1 KiB).
 * Thread safety: safe (the detail is kept per thread by the host). */
void hq_set_error(const hal_host_services_t *host, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Returns and clears the detail the host keeps for the calling thread (host->take_error), or
 * NULL when there is none. A host older than API 1.1 has no take_error: then nothing is called
 * and the result is NULL.
 * [in] host  the services given to the backend's init, or NULL.
 * Thread safety: safe (the detail is per thread). */
const char *hq_take_error(const hal_host_services_t *host);

/* Names a HAL status ("HAL_ERROR_TIMEOUT"); "HAL_STATUS_UNKNOWN" for a value outside the enum.
 * [in] status  any value.
 * Returns a static string. Thread safety: safe. */
const char *hq_status_name(hal_status_t status);

#endif /* HAL_BACKENDS_COMMON_HQ_HOST_H */
