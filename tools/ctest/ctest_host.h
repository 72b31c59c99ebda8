/* SPDX-License-Identifier: Apache-2.0 */
/* Host services for tests that drive a backend's ops table directly, without the HAL core: the
 * backend's error detail is kept per thread and handed back once by take_error, as the core
 * does. */
#ifndef TOOLS_CTEST_CTEST_HOST_H
#define TOOLS_CTEST_CTEST_HOST_H

#include "hal/hal_backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The services (struct_size, api_version, set_error, take_error). Thread safety: safe. */
extern const hal_host_services_t ctest_host_services;

#ifdef __cplusplus
}
#endif

#endif
