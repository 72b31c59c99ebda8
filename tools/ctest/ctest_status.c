/* SPDX-License-Identifier: Apache-2.0 */
/* HAL status expectations for C tests (ctest_status.h). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "tools/ctest/ctest_status.h"

static const char *(*_Atomic error_source)(void);

void ctest_set_error_source(const char *(*last_error)(void))
{
    atomic_store(&error_source, last_error);
}

static const char *last_error(void)
{
    const char *(*fn)(void) = atomic_load(&error_source);
    const char *msg = fn ? fn() : hal_last_error_message();
    return msg ? msg : "";
}

void ctest_format_status(char *buf, size_t size, const char *call, hal_status_t got,
                         hal_status_t expected, const char *error)
{
    snprintf(buf, size, "%s returned %s, expected %s (last error: \"%s\")", call,
             hal_status_string(got), hal_status_string(expected), error ? error : "");
}

bool ctest_expect_status(hal_status_t got, hal_status_t expected, const char *file, int line,
                         const char *call)
{
    if (got == expected)
        return true;
    char msg[1536];
    ctest_format_status(msg, sizeof(msg), call, got, expected, last_error());
    fprintf(stderr, "%s:%d: %s\n", file, line, msg);
    ctest_record_failure();
    return false;
}

bool ctest_expect_message(const char *fragment, const char *file, int line)
{
    const char *msg = last_error();
    if (strstr(msg, fragment) != NULL)
        return true;
    fprintf(stderr, "%s:%d: the last error \"%s\" does not mention \"%s\"\n", file, line, msg,
            fragment);
    ctest_record_failure();
    return false;
}
