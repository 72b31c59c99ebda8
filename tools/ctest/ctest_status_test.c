/* SPDX-License-Identifier: Apache-2.0 */
/* The expectations themselves: a mismatch is reported and counted, a match is not; the runner
 * fails a test that recorded one (this test takes its deliberate failures back before it ends). */
#include <string.h>

#include "tools/ctest/ctest.h"
#include "tools/ctest/ctest_status.h"

static const char *fixed_error(void)
{
    return "backend x: slot y failed";
}

static int goto_on_mismatch(void)
{
    CHECK_STATUS_GOTO(HAL_ERROR_TIMEOUT, HAL_OK, out);
    return 0;
out:
    return 1;
}

CTEST(ctest_status, mismatches_are_recorded)
{
    CTEST_CHECK(ctest_failures_so_far() == 0);
    CTEST_CHECK(EXPECT_STATUS(HAL_ERROR_TIMEOUT, HAL_ERROR_TIMEOUT));
    CTEST_CHECK(EXPECT_OK(HAL_OK));
    CTEST_CHECK(ctest_failures_so_far() == 0);
    CTEST_CHECK(!EXPECT_STATUS(HAL_OK, HAL_ERROR_TIMEOUT));
    CTEST_CHECK(!CTEST_EXPECT(1 == 2));
    CTEST_CHECK(goto_on_mismatch() == 1);
    CTEST_CHECK(ctest_failures_so_far() == 3);
    ctest_set_error_source(fixed_error);
    CTEST_CHECK(EXPECT_MESSAGE("slot y"));
    CTEST_CHECK(!EXPECT_MESSAGE("slot z"));
    ctest_set_error_source(NULL);
    CTEST_CHECK(ctest_take_failures() == 4); /* the deliberate ones; the test itself passes */
    char buf[256];
    ctest_format_status(buf, sizeof(buf), "f()", HAL_OK, HAL_ERROR_TIMEOUT, "why");
    CTEST_CHECK(strstr(buf, "f() returned HAL_OK, expected HAL_ERROR_TIMEOUT") != NULL);
    CTEST_CHECK(strstr(buf, "why") != NULL);
    return CTEST_PASS;
}
