/* SPDX-License-Identifier: Apache-2.0 */
/* hal_activity.h: the record format the trace layer and profilers share. Values outside the
 * enums get the documented fallbacks, never an out-of-range read. */
#include <string.h>

#include "hal/hal.h"
#include "tools/ctest/ctest.h"

CTEST(activity, categories)
{
    CTEST_CHECK(!strcmp(hal_activity_category(HAL_ACTIVITY_KERNEL), "kernel"));
    CTEST_CHECK(!strcmp(hal_activity_category(HAL_ACTIVITY_COLLECTIVE), "kernel"));
    CTEST_CHECK(!strcmp(hal_activity_category(HAL_ACTIVITY_MEMCPY), "gpu_memcpy"));
    CTEST_CHECK(!strcmp(hal_activity_category(HAL_ACTIVITY_MEMSET), "gpu_memset"));
    CTEST_CHECK(!strcmp(hal_activity_category(HAL_ACTIVITY_STREAM), "hal.stream"));
    CTEST_CHECK(!strcmp(hal_activity_category((hal_activity_kind_t)99), "hal.stream"));
    return CTEST_PASS;
}

CTEST(activity, copy_directions_and_names)
{
    CTEST_CHECK(hal_copy_direction_of(true, false, false) == HAL_COPY_HTOD);
    CTEST_CHECK(hal_copy_direction_of(false, true, false) == HAL_COPY_DTOH);
    CTEST_CHECK(hal_copy_direction_of(true, true, true) == HAL_COPY_DTOD);
    CTEST_CHECK(hal_copy_direction_of(true, true, false) == HAL_COPY_PTOP);
    CTEST_CHECK(hal_copy_direction_of(false, false, true) == HAL_COPY_HTOH);
    const char *directions[] = { "HtoD", "DtoH", "DtoD", "PtoP", "HtoH" };
    for (int d = HAL_COPY_HTOD; d <= HAL_COPY_HTOH; d++) {
        char name[32] = "Memcpy ";
        strcat(name, directions[d]);
        CTEST_CHECK(!strcmp(hal_copy_direction_name((hal_copy_direction_t)d), directions[d]));
        CTEST_CHECK(!strcmp(hal_copy_activity_name((hal_copy_direction_t)d), name));
    }
    return CTEST_PASS;
}

CTEST(activity, out_of_range_directions)
{
    CTEST_CHECK(!strcmp(hal_copy_direction_name((hal_copy_direction_t)5), "unknown"));
    CTEST_CHECK(!strcmp(hal_copy_direction_name((hal_copy_direction_t)-1), "unknown"));
    CTEST_CHECK(!strcmp(hal_copy_activity_name((hal_copy_direction_t)5), "Memcpy"));
    CTEST_CHECK(!strcmp(hal_copy_activity_name((hal_copy_direction_t)-1), "Memcpy"));
    return CTEST_PASS;
}
