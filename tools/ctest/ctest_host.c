/* SPDX-License-Identifier: Apache-2.0 */
#include "tools/ctest/ctest_host.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

static _Thread_local char detail[1024];
static _Thread_local bool detail_set;

static void host_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    detail_set = true;
}

static const char *host_take_error(void)
{
    if (!detail_set)
        return NULL;
    detail_set = false;
    return detail;
}

const hal_host_services_t ctest_host_services = {
    .struct_size = sizeof(hal_host_services_t),
    .api_version = HAL_API_VERSION,
    .set_error = host_set_error,
    .take_error = host_take_error,
};
