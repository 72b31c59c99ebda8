/* SPDX-License-Identifier: Apache-2.0 */
/* HAL status expectations for C tests: the one implementation of "<call> returned X, expected Y"
 * for every CTEST body (and, through ctest_format_status, for the conformance suite's CTS_*).
 *
 *   EXPECT_STATUS(call, expected)  records a failure of the running test and evaluates to false
 *   CHECK_STATUS(call, expected)   returns CTEST_FAIL from the test body
 *   CHECK_STATUS_GOTO(call, expected, label)  jumps to a cleanup label
 *   ..._OK(call)                   the same with HAL_OK
 *   EXPECT_MESSAGE / CHECK_MESSAGE(fragment)  the calling thread's last error mentions fragment
 *
 * A failure prints the file, line, call, both statuses and the last error message of the calling
 * thread, from hal_last_error_message() or, for tests that drive a backend's ops table without
 * the HAL core, the function given to ctest_set_error_source. A test that recorded a failure
 * fails even when its body returns CTEST_PASS. Thread safety: safe (tests may expect from their
 * own threads). */
#ifndef TOOLS_CTEST_CTEST_STATUS_H
#define TOOLS_CTEST_CTEST_STATUS_H

#include <stdbool.h>
#include <stddef.h>

#include "hal/hal.h"
#include "tools/ctest/ctest.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes "<call> returned <got>, expected <expected> (last error: "...")" into buf. */
void ctest_format_status(char *buf, size_t size, const char *call, hal_status_t got,
                         hal_status_t expected, const char *last_error);

/* The expectations behind the macros. Return whether they held. */
bool ctest_expect_status(hal_status_t got, hal_status_t expected, const char *file, int line,
                         const char *call);
bool ctest_expect_message(const char *fragment, const char *file, int line);

/* Where failures read the last error (NULL: hal_last_error_message). */
void ctest_set_error_source(const char *(*last_error)(void));

#define EXPECT_STATUS(call, expected) \
    ctest_expect_status((call), (expected), __FILE__, __LINE__, #call)
#define EXPECT_OK(call)          EXPECT_STATUS(call, HAL_OK)
#define EXPECT_MESSAGE(fragment) ctest_expect_message((fragment), __FILE__, __LINE__)

#define CHECK_STATUS(call, expected)            \
    do {                                        \
        if (!EXPECT_STATUS((call), (expected))) \
            return CTEST_FAIL;                  \
    } while (0)
#define CHECK_OK(call) CHECK_STATUS(call, HAL_OK)
#define CHECK_MESSAGE(fragment)        \
    do {                               \
        if (!EXPECT_MESSAGE(fragment)) \
            return CTEST_FAIL;         \
    } while (0)

#define CHECK_STATUS_GOTO(call, expected, label) \
    do {                                         \
        if (!EXPECT_STATUS((call), (expected)))  \
            goto label;                          \
    } while (0)
#define CHECK_OK_GOTO(call, label) CHECK_STATUS_GOTO(call, HAL_OK, label)
#define CHECK_MESSAGE_GOTO(fragment, label) \
    do {                                    \
        if (!EXPECT_MESSAGE(fragment))      \
            goto label;                     \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif /* TOOLS_CTEST_CTEST_STATUS_H */
