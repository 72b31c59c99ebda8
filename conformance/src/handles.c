/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance: every public function given a NULL, destroyed, closed-backend or wrong-type handle
 * returns HAL_ERROR_INVALID_HANDLE (never crashes) and has no side effect. */
#include <stdio.h>
#include <string.h>

#include "cts.h"

#define BAD HAL_ERROR_INVALID_HANDLE

static void count_fn(hal_status_t status, void *user_data)
{
    (void)status;
    (*(int *)user_data)++;
}

/* Every function that takes a backend. */
static int backend_functions(hal_backend_t b)
{
    const char *name = NULL;
    uint32_t count = 0;
    hal_device_t d = NULL;
    CTS_CHECK_STATUS(hal_backend_get_info(b, &name, NULL, NULL), BAD);
    CTS_CHECK_STATUS(hal_device_count(b, &count), BAD);
    CTS_CHECK_STATUS(hal_device_get(b, 0, &d), BAD);
    CTS_CHECK_STATUS(hal_backend_close(b), BAD);
    return CTS_PASS;
}

/* Every function that takes a device (hal_set_current_device(NULL) is valid: it clears). */
static int device_functions(hal_device_t d, bool include_set_current)
{
    hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
    hal_mem_stats_t stats = HAL_MEM_STATS_INIT;
    hal_backend_t b = NULL;
    uintptr_t native = 0;
    void *p = NULL;
    hal_stream_t s = NULL;
    hal_event_t e = NULL;
    hal_allocator_t a = NULL;
    CTS_CHECK_STATUS(hal_device_get_properties(d, &props), BAD);
    CTS_CHECK_STATUS(hal_device_get_backend(d, &b), BAD);
    CTS_CHECK_STATUS(hal_device_synchronize(d), BAD);
    CTS_CHECK_STATUS(hal_device_get_mem_stats(d, &stats), BAD);
    CTS_CHECK_STATUS(hal_device_reset_peak_mem_stats(d), BAD);
    CTS_CHECK_STATUS(hal_device_get_native_handle(d, &native), BAD);
    CTS_CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 64, 0, &p), BAD);
    CTS_CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_HOST_PINNED, 64, 0, &p), BAD);
    CTS_CHECK_STATUS(hal_stream_create(d, 0, &s), BAD);
    CTS_CHECK_STATUS(hal_device_get_default_stream(d, &s), BAD);
    CTS_CHECK_STATUS(hal_event_create(d, HAL_EVENT_FLAG_NONE, &e), BAD);
    CTS_CHECK_STATUS(hal_allocator_create(d, NULL, &a), BAD);
    if (include_set_current)
        CTS_CHECK_STATUS(hal_set_current_device(d), BAD);
    return CTS_PASS;
}

/* Every function that takes a stream. `live` is a valid allocation for the memory calls. */
static int stream_functions(cts_ctx_t *ctx, hal_stream_t s, hal_event_t e, void *live)
{
    hal_device_t dev = NULL;
    int32_t prio = 0;
    uintptr_t native = 0;
    uint8_t host[64];
    int *called = cts_calloc(ctx, sizeof(int));
    CTS_CHECK(called != NULL);
    CTS_CHECK_STATUS(hal_stream_query(s), BAD);
    CTS_CHECK_STATUS(hal_stream_synchronize(s), BAD);
    CTS_CHECK_STATUS(hal_stream_wait_event(s, e), BAD);
    CTS_CHECK_STATUS(hal_stream_add_callback(s, count_fn, called), BAD);
    CTS_CHECK_STATUS(hal_stream_get_info(s, &dev, &prio), BAD);
    CTS_CHECK_STATUS(hal_stream_get_native_handle(s, &native), BAD);
    CTS_CHECK_STATUS(hal_memcpy_async(host, live, sizeof(host), s), BAD);
    CTS_CHECK_STATUS(hal_memcpy_async(live, host, sizeof(host), s), BAD);
    CTS_CHECK_STATUS(hal_memset_async(live, 0, sizeof(host), s), BAD);
    CTS_CHECK_STATUS(hal_mem_free_async(live, s), BAD);
    CTS_CHECK_STATUS(hal_event_record(e, s), BAD);
    /* The caching allocator's stream arguments (NULL means the default stream for alloc). */
    hal_allocator_t a = NULL;
    void *block = NULL, *p = NULL;
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    int ok = CTS_EXPECT_OK(hal_allocator_alloc(a, 64, NULL, &block));
    if (ok && s != NULL)
        ok = CTS_EXPECT_STATUS(hal_allocator_alloc(a, 64, s, &p), BAD);
    if (ok)
        ok = CTS_EXPECT_STATUS(hal_allocator_record_stream(a, block, s), BAD);
    /* The allocator is not the backend's to clean up: release it on every path. */
    ok &= CTS_EXPECT_OK(hal_allocator_free(a, block));
    ok &= CTS_EXPECT_OK(hal_allocator_destroy(a));
    CTS_CHECK(ok);
    CTS_CHECK_STATUS(hal_stream_destroy(s), BAD);
    CTS_CHECK_OK(hal_device_synchronize(ctx->device));
    CTS_CHECKF(*called == 0, "a callback given with an invalid stream ran");
    /* No side effect on the memory: still live, the event still never recorded. */
    hal_mem_info_t info = HAL_MEM_INFO_INIT;
    CTS_CHECK_OK(hal_mem_get_info(live, &info));
    CTS_CHECK(info.kind != HAL_MEM_KIND_UNREGISTERED && info.base == live);
    CTS_CHECK_OK(hal_event_query(e));
    return CTS_PASS;
}

/* Every function that takes an event. */
static int event_functions(hal_event_t e, hal_event_t good, hal_stream_t s)
{
    float ms = 0.0f;
    uintptr_t native = 0;
    CTS_CHECK_STATUS(hal_event_record(e, s), BAD);
    CTS_CHECK_STATUS(hal_event_query(e), BAD);
    CTS_CHECK_STATUS(hal_event_synchronize(e), BAD);
    CTS_CHECK_STATUS(hal_event_elapsed_ms(e, good, &ms), BAD);
    CTS_CHECK_STATUS(hal_event_elapsed_ms(good, e, &ms), BAD);
    CTS_CHECK_STATUS(hal_event_get_native_handle(e, &native), BAD);
    CTS_CHECK_STATUS(hal_stream_wait_event(s, e), BAD);
    CTS_CHECK_STATUS(hal_event_destroy(e), BAD);
    return CTS_PASS;
}

/* Every function that takes an allocator. */
static int allocator_functions(hal_allocator_t a, hal_stream_t s, void *some_ptr)
{
    void *p = NULL, *base = NULL;
    size_t size = 0;
    hal_allocator_stats_t stats = HAL_ALLOCATOR_STATS_INIT;
    CTS_CHECK_STATUS(hal_allocator_alloc(a, 64, s, &p), BAD);
    CTS_CHECK_STATUS(hal_allocator_alloc(a, 64, NULL, &p), BAD);
    CTS_CHECK_STATUS(hal_allocator_free(a, some_ptr), BAD);
    CTS_CHECK_STATUS(hal_allocator_record_stream(a, some_ptr, s), BAD);
    CTS_CHECK_STATUS(hal_allocator_empty_cache(a), BAD);
    CTS_CHECK_STATUS(hal_allocator_get_stats(a, &stats), BAD);
    CTS_CHECK_STATUS(hal_allocator_reset_peak_stats(a), BAD);
    CTS_CHECK_STATUS(hal_allocator_get_block(a, some_ptr, &base, &size), BAD);
    CTS_CHECK_STATUS(hal_allocator_destroy(a), BAD);
    return CTS_PASS;
}

int cts_handles_null_backend(cts_ctx_t *ctx)
{
    return backend_functions(NULL);
}

int cts_handles_null_device(cts_ctx_t *ctx)
{
    int r = device_functions(NULL, false);
    if (r != CTS_PASS)
        return r;
    CTS_CHECK_OK(hal_set_current_device(NULL)); /* documented: NULL clears */
    return CTS_PASS;
}

int cts_handles_null_stream(cts_ctx_t *ctx)
{
    hal_event_t e = NULL;
    void *d = NULL;
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 64, 0, &d));
    int r = stream_functions(ctx, NULL, e, d);
    if (r != CTS_PASS)
        return r;
    CTS_CHECK_OK(hal_mem_free(d));
    CTS_CHECK_OK(hal_event_destroy(e));
    return CTS_PASS;
}

int cts_handles_null_event(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    hal_event_t good = NULL;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &good));
    int r = event_functions(NULL, good, s);
    if (r != CTS_PASS)
        return r;
    CTS_CHECK_OK(hal_event_destroy(good));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_handles_null_allocator(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    int x = 0;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    int r = allocator_functions(NULL, s, &x);
    if (r != CTS_PASS)
        return r;
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_handles_destroyed_stream(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    hal_event_t e = NULL;
    void *d = NULL;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_stream_destroy(s));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 64, 0, &d));
    int r = stream_functions(ctx, s, e, d);
    if (r != CTS_PASS)
        return r;
    CTS_CHECK_OK(hal_mem_free(d));
    CTS_CHECK_OK(hal_event_destroy(e));
    return CTS_PASS;
}

int cts_handles_destroyed_event(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    hal_event_t e = NULL, good = NULL;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &good));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    CTS_CHECK_OK(hal_event_record(e, s));
    CTS_CHECK_OK(hal_event_destroy(e));
    int r = event_functions(e, good, s);
    if (r != CTS_PASS)
        return r;
    CTS_CHECK_OK(hal_stream_synchronize(s));
    CTS_CHECK_OK(hal_event_destroy(good));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_handles_destroyed_allocator(cts_ctx_t *ctx)
{
    hal_allocator_t a = NULL;
    hal_stream_t s = NULL;
    void *p = NULL;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    CTS_CHECK_OK(hal_allocator_alloc(a, 64, s, &p));
    CTS_CHECK_OK(hal_allocator_free(a, p));
    CTS_CHECK_OK(hal_allocator_destroy(a));
    int r = allocator_functions(a, s, p);
    if (r != CTS_PASS)
        return r;
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

/* After the last hal_backend_close every handle of the backend is invalid, and memory it freed
 * is unknown to the HAL. */
int cts_handles_closed_backend(cts_ctx_t *ctx)
{
    hal_backend_t b = ctx->backend;
    hal_device_t d = ctx->device;
    hal_stream_t s = NULL, def = NULL;
    hal_event_t e = NULL;
    void *mem = NULL;
    CTS_CHECK_OK(hal_stream_create(d, 0, &s));
    CTS_CHECK_OK(hal_device_get_default_stream(d, &def));
    CTS_CHECK_OK(hal_event_create(d, HAL_EVENT_FLAG_NONE, &e));
    CTS_CHECK_OK(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 4096, 0, &mem));
    CTS_CHECK_OK(cts_backend_close_fully(ctx));
    ctx->expected_leaks = ctx->validation ? 3 : 0; /* stream, event, allocation */

    int r = backend_functions(b);
    if (r == CTS_PASS)
        r = device_functions(d, true);
    if (r == CTS_PASS) {
        float ms = 0.0f;
        uintptr_t native = 0;
        int32_t prio = 0;
        const hal_stream_t streams[2] = { s, def };
        for (int i = 0; i < 2 && r == CTS_PASS; i++) {
            if (!CTS_EXPECT_STATUS(hal_stream_query(streams[i]), BAD) ||
                !CTS_EXPECT_STATUS(hal_stream_synchronize(streams[i]), BAD) ||
                !CTS_EXPECT_STATUS(hal_stream_get_info(streams[i], NULL, &prio), BAD) ||
                !CTS_EXPECT_STATUS(hal_stream_get_native_handle(streams[i], &native), BAD) ||
                !CTS_EXPECT_STATUS(hal_stream_destroy(streams[i]), BAD))
                r = CTS_FAIL;
        }
        if (r == CTS_PASS && (!CTS_EXPECT_STATUS(hal_event_query(e), BAD) ||
                              !CTS_EXPECT_STATUS(hal_event_synchronize(e), BAD) ||
                              !CTS_EXPECT_STATUS(hal_event_elapsed_ms(e, e, &ms), BAD) ||
                              !CTS_EXPECT_STATUS(hal_event_get_native_handle(e, &native), BAD) ||
                              !CTS_EXPECT_STATUS(hal_event_destroy(e), BAD)))
            r = CTS_FAIL;
    }
    if (r == CTS_PASS) {
        hal_mem_info_t info = HAL_MEM_INFO_INIT;
        if (!CTS_EXPECT_OK(hal_mem_get_info(mem, &info)) ||
            !CTS_EXPECT(info.kind == HAL_MEM_KIND_UNREGISTERED) ||
            !CTS_EXPECT_STATUS(hal_mem_free(mem), HAL_ERROR_INVALID_ARGUMENT))
            r = CTS_FAIL;
    }
    CTS_CHECK_OK(cts_backend_reopen(ctx));
    return r;
}

/* A handle of one type passed as another, or memory that is no handle at all. */
int cts_handles_wrong_type(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    hal_event_t e = NULL;
    hal_allocator_t a = NULL;
    uint64_t zeros[64] = { 0 };
    void *fake = zeros;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    uint32_t count = 0;
    float ms = 0.0f;
    hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
    hal_allocator_stats_t stats = HAL_ALLOCATOR_STATS_INIT;
    CTS_CHECK_STATUS(hal_device_count((hal_backend_t)(void *)ctx->device, &count), BAD);
    CTS_CHECK_STATUS(hal_device_count((hal_backend_t)fake, &count), BAD);
    CTS_CHECK_STATUS(hal_device_get_properties((hal_device_t)(void *)s, &props), BAD);
    CTS_CHECK_STATUS(hal_device_get_properties((hal_device_t)(void *)ctx->backend, &props), BAD);
    CTS_CHECK_STATUS(hal_device_get_properties((hal_device_t)fake, &props), BAD);
    CTS_CHECK_STATUS(hal_stream_query((hal_stream_t)(void *)e), BAD);
    CTS_CHECK_STATUS(hal_stream_query((hal_stream_t)(void *)ctx->device), BAD);
    CTS_CHECK_STATUS(hal_stream_query((hal_stream_t)fake), BAD);
    CTS_CHECK_STATUS(hal_event_query((hal_event_t)(void *)s), BAD);
    CTS_CHECK_STATUS(hal_event_query((hal_event_t)fake), BAD);
    CTS_CHECK_STATUS(hal_event_elapsed_ms(e, (hal_event_t)(void *)s, &ms), BAD);
    CTS_CHECK_STATUS(hal_event_record(e, (hal_stream_t)(void *)e), BAD);
    CTS_CHECK_STATUS(hal_stream_wait_event(s, (hal_event_t)(void *)s), BAD);
    CTS_CHECK_STATUS(hal_allocator_get_stats((hal_allocator_t)(void *)s, &stats), BAD);
    CTS_CHECK_STATUS(hal_allocator_get_stats((hal_allocator_t)fake, &stats), BAD);
    CTS_CHECK_STATUS(hal_stream_destroy((hal_stream_t)(void *)e), BAD);
    CTS_CHECK_STATUS(hal_event_destroy((hal_event_t)(void *)s), BAD);
    CTS_CHECK_STATUS(hal_backend_close((hal_backend_t)(void *)ctx->device), BAD);
    CTS_CHECK_STATUS(hal_allocator_destroy((hal_allocator_t)(void *)e), BAD);
    /* Nothing was destroyed by the mistyped calls. */
    CTS_CHECK_OK(hal_stream_query(s));
    CTS_CHECK_OK(hal_event_query(e));
    CTS_CHECK_OK(hal_allocator_get_stats(a, &stats));
    CTS_CHECK_OK(hal_device_count(ctx->backend, &count));
    CTS_CHECK_OK(hal_allocator_destroy(a));
    CTS_CHECK_OK(hal_event_destroy(e));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}
