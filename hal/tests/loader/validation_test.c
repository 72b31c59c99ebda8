/* SPDX-License-Identifier: Apache-2.0 */
/* The validation layer (HAL_LAYERS=validation): leak reports at backend close, double free vs
 * foreign pointer, use after destroy however long ago, wrong handle types. */
#include <stdlib.h>
#include <string.h>

#include "hal/hal.h"
#include "tools/ctest/ctest.h"
#include "tools/ctest/ctest_status.h"

static hal_status_t open_validated(hal_backend_t *b, hal_device_t *d)
{
    setenv("HAL_LAYERS", "validation", 1);
    hal_status_t st = hal_backend_open("template", b);
    unsetenv("HAL_LAYERS");
    return st == HAL_OK ? hal_device_get(*b, 0, d) : st;
}

CTEST(validation, leaks_are_reported_and_cleaned_at_close)
{
    hal_backend_t b;
    hal_device_t d;
    hal_stream_t s;
    hal_event_t e;
    void *p;
    uint64_t before = 0, after = 0;
    CHECK_STATUS(open_validated(&b, &d), HAL_OK);
    CHECK_STATUS(hal_validation_get_leak_count(&before), HAL_OK);
    CHECK_STATUS(hal_stream_create(d, 0, &s), HAL_OK);
    CHECK_STATUS(hal_event_create(d, 0, &e), HAL_OK);
    CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 4096, 0, &p), HAL_OK);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    CHECK_STATUS(hal_validation_get_leak_count(&after), HAL_OK);
    CTEST_CHECK(after == before + 3);
    /* Everything left behind is gone, and its handles are stale. */
    CHECK_STATUS(hal_stream_query(s), HAL_ERROR_INVALID_HANDLE);
    CHECK_STATUS(hal_event_query(e), HAL_ERROR_INVALID_HANDLE);
    hal_mem_info_t info = HAL_MEM_INFO_INIT;
    CHECK_STATUS(hal_mem_get_info(p, &info), HAL_OK);
    CTEST_CHECK(info.kind == HAL_MEM_KIND_UNREGISTERED);
    CHECK_STATUS(hal_validation_get_leak_count(NULL), HAL_ERROR_INVALID_ARGUMENT);
    return CTEST_PASS;
}

CTEST(validation, double_free_foreign_and_interior_pointers)
{
    hal_backend_t b;
    hal_device_t d;
    void *p;
    int local = 0;
    CHECK_STATUS(open_validated(&b, &d), HAL_OK);
    CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 4096, 0, &p), HAL_OK);
    CHECK_STATUS(hal_mem_free((char *)p + 8), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_MESSAGE("interior pointer");
    CHECK_STATUS(hal_mem_free(p), HAL_OK);
    CHECK_STATUS(hal_mem_free(p), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_MESSAGE("double free");
    CHECK_STATUS(hal_mem_free(&local), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_MESSAGE("foreign pointer");
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    return CTEST_PASS;
}

CTEST(validation, use_after_destroy_is_caught_however_long_ago)
{
    hal_backend_t b;
    hal_device_t d;
    hal_stream_t s;
    CHECK_STATUS(open_validated(&b, &d), HAL_OK);
    CHECK_STATUS(hal_stream_create(d, 0, &s), HAL_OK);
    CHECK_STATUS(hal_stream_destroy(s), HAL_OK);
    /* More destroyed handles than the quarantine holds: without validation the stream's
     * memory could be reused by now; with it, never. */
    for (int i = 0; i < 5000; i++) {
        hal_event_t e;
        CHECK_STATUS(hal_event_create(d, 0, &e), HAL_OK);
        CHECK_STATUS(hal_event_destroy(e), HAL_OK);
    }
    CHECK_STATUS(hal_stream_query(s), HAL_ERROR_INVALID_HANDLE);
    CHECK_MESSAGE("used after it was destroyed");
    CHECK_STATUS(hal_stream_destroy(s), HAL_ERROR_INVALID_HANDLE);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    return CTEST_PASS;
}

CTEST(validation, wrong_handle_type_is_named)
{
    hal_backend_t b;
    hal_device_t d;
    hal_event_t e;
    CHECK_STATUS(open_validated(&b, &d), HAL_OK);
    CHECK_STATUS(hal_event_create(d, 0, &e), HAL_OK);
    CHECK_STATUS(hal_stream_query((hal_stream_t)(void *)e), HAL_ERROR_INVALID_HANDLE);
    CHECK_MESSAGE("is a hal_event_t, not a hal_stream_t");
    CHECK_STATUS(hal_event_destroy(e), HAL_OK);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    return CTEST_PASS;
}
