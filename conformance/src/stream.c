/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance: streams (in-order queues), priorities, the default stream, cross-stream waits and
 * host callbacks. Work that must stay pending is held behind a gate (a blocking host callback). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cts.h"

int cts_stream_create_destroy(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    hal_device_t dev = NULL;
    int32_t prio = 99;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK(s != NULL);
    CTS_CHECK_OK(hal_stream_get_info(s, &dev, &prio));
    CTS_CHECK(dev == ctx->device && prio == 0);
    CTS_CHECK_OK(hal_stream_query(s));
    CTS_CHECK_OK(hal_stream_synchronize(s));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_stream_create_many(cts_ctx_t *ctx)
{
    enum { N = 32 };
    hal_stream_t s[N];
    for (int i = 0; i < N; i++) {
        CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s[i]));
        for (int j = 0; j < i; j++)
            CTS_CHECK(s[i] != s[j]);
        CTS_CHECK_OK(hal_memset_async(NULL, 0, 0, s[i]));
    }
    for (int i = 0; i < N; i++)
        CTS_CHECK_OK(hal_stream_destroy(s[i]));
    return CTS_PASS;
}

int cts_stream_create_invalid(cts_ctx_t *ctx)
{
    CTS_CHECK_STATUS(hal_stream_create(ctx->device, 0, NULL), HAL_ERROR_INVALID_ARGUMENT);
    return CTS_PASS;
}

/* Every priority from greatest to least can be created and is reported back. */
int cts_stream_priorities(cts_ctx_t *ctx)
{
    const int32_t least = ctx->props.stream_priority_least;
    const int32_t greatest = ctx->props.stream_priority_greatest;
    CTS_CHECK(greatest <= 0 && 0 <= least);
    int32_t step = (least - greatest) > 64 ? (least - greatest) / 64 : 1;
    for (int64_t p = greatest; p <= least; p += step) {
        hal_stream_t s = NULL;
        int32_t got = 12345;
        CTS_CHECK_OK(hal_stream_create(ctx->device, (int32_t)p, &s));
        CTS_CHECK_OK(hal_stream_get_info(s, NULL, &got));
        CTS_CHECKF(got == (int32_t)p, "created with priority %d, reports %d", (int)p, (int)got);
        CTS_CHECK_OK(hal_memset_async(NULL, 0, 0, s));
        CTS_CHECK_OK(hal_stream_destroy(s));
    }
    hal_stream_t s = NULL;
    int32_t got = 12345;
    CTS_CHECK_OK(hal_stream_create(ctx->device, least, &s));
    CTS_CHECK_OK(hal_stream_get_info(s, NULL, &got));
    CTS_CHECK(got == least);
    CTS_CHECK_OK(hal_stream_destroy(s));
    CTS_CHECK_OK(hal_stream_create(ctx->device, greatest, &s));
    CTS_CHECK_OK(hal_stream_get_info(s, NULL, &got));
    CTS_CHECK(got == greatest);
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_stream_priority_out_of_range(cts_ctx_t *ctx)
{
    const int32_t least = ctx->props.stream_priority_least;
    const int32_t greatest = ctx->props.stream_priority_greatest;
    hal_stream_t s = NULL;
    if (least < INT32_MAX) {
        CTS_CHECK_STATUS(hal_stream_create(ctx->device, least + 1, &s), HAL_ERROR_INVALID_ARGUMENT);
        CTS_CHECK_STATUS(hal_stream_create(ctx->device, INT32_MAX, &s), HAL_ERROR_INVALID_ARGUMENT);
    }
    if (greatest > INT32_MIN) {
        CTS_CHECK_STATUS(hal_stream_create(ctx->device, greatest - 1, &s),
                         HAL_ERROR_INVALID_ARGUMENT);
        CTS_CHECK_STATUS(hal_stream_create(ctx->device, INT32_MIN, &s), HAL_ERROR_INVALID_ARGUMENT);
    }
    return CTS_PASS;
}

int cts_stream_default_stream(cts_ctx_t *ctx)
{
    hal_stream_t def = NULL, again = NULL, mine = NULL;
    hal_device_t dev = NULL;
    int32_t prio = 99;
    uint8_t *d = NULL;
    uint8_t host[256];
    CTS_CHECK_OK(hal_device_get_default_stream(ctx->device, &def));
    CTS_CHECK_OK(hal_device_get_default_stream(ctx->device, &again));
    CTS_CHECK(def != NULL && def == again);
    CTS_CHECK_OK(hal_stream_get_info(def, &dev, &prio));
    CTS_CHECK(dev == ctx->device && prio == 0);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &mine));
    CTS_CHECK(mine != def);
    CTS_CHECK_OK(hal_stream_destroy(mine));
    /* It is a working stream. */
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, sizeof(host), 0, (void **)&d));
    CTS_CHECK_OK(cts_memset_sync(d, 0x61, sizeof(host), def));
    CTS_CHECK_OK(cts_copy_sync(host, d, sizeof(host), def));
    CTS_CHECK(cts_bytes_find_other(host, sizeof(host), 0x61) == sizeof(host));
    CTS_CHECK_OK(hal_mem_free(d));
    CTS_CHECK_OK(hal_stream_query(def));
    CTS_CHECK_STATUS(hal_device_get_default_stream(ctx->device, NULL), HAL_ERROR_INVALID_ARGUMENT);
    /* Each device has its own. */
    hal_device_t other = cts_other_device(ctx);
    if (other != NULL) {
        hal_stream_t odef = NULL;
        CTS_CHECK_OK(hal_device_get_default_stream(other, &odef));
        CTS_CHECK(odef != def);
        CTS_CHECK_OK(hal_stream_get_info(odef, &dev, NULL));
        CTS_CHECK(dev == other);
    }
    return CTS_PASS;
}

int cts_stream_default_stream_not_destroyable(cts_ctx_t *ctx)
{
    hal_stream_t def = NULL;
    CTS_CHECK_OK(hal_device_get_default_stream(ctx->device, &def));
    CTS_CHECK_STATUS(hal_stream_destroy(def), HAL_ERROR_INVALID_ARGUMENT);
    /* No side effect: still usable. */
    CTS_CHECK_OK(hal_memset_async(NULL, 0, 0, def));
    CTS_CHECK_OK(hal_stream_synchronize(def));
    CTS_CHECK_OK(hal_stream_get_info(def, NULL, NULL));
    return CTS_PASS;
}

int cts_stream_query(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_stream_query(s));
    cts_gate_t *g = cts_gate_new(ctx);
    CTS_CHECK_OK(cts_gate_enqueue(g, s));
    CTS_CHECK_STATUS(hal_stream_query(s), HAL_NOT_READY);
    cts_sleep_ms(20);
    CTS_CHECK_STATUS(hal_stream_query(s), HAL_NOT_READY);
    cts_gate_open(g);
    CTS_CHECK_OK(cts_poll_stream(s, 5000));
    CTS_CHECK(cts_gate_done(g));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_stream_synchronize_waits(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    cts_gate_t *g = cts_gate_new(ctx);
    cts_log_t *log = cts_log_new(ctx, 4);
    CTS_CHECK_OK(cts_gate_enqueue(g, s));
    CTS_CHECK_OK(cts_log_enqueue(ctx, log, s, 1));
    CTS_CHECK(cts_gate_open_later(ctx, g, 50) == 0);
    CTS_CHECK_OK(hal_stream_synchronize(s));
    CTS_CHECKF(cts_log_count(log) == 1, "hal_stream_synchronize returned before queued work ran");
    CTS_CHECK_OK(hal_stream_query(s));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

/* hal_stream_destroy waits for pending work first: nothing queued is lost. */
int cts_stream_destroy_waits_for_work(cts_ctx_t *ctx)
{
    enum { SIZE = 65536 };
    hal_stream_t s = NULL;
    uint8_t *d = NULL;
    uint8_t *src = cts_calloc(ctx, SIZE), *dst = cts_calloc(ctx, SIZE);
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    CTS_CHECK(src != NULL && dst != NULL);
    cts_pattern_fill(src, SIZE, 31);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, SIZE, 0, (void **)&d));
    cts_gate_t *g = cts_gate_new(ctx);
    cts_log_t *log = cts_log_new(ctx, 4);
    CTS_CHECK_OK(cts_gate_enqueue(g, s));
    CTS_CHECK_OK(hal_memcpy_async(d, src, SIZE, s));
    CTS_CHECK_OK(hal_memcpy_async(dst, d, SIZE, s));
    CTS_CHECK_OK(cts_log_enqueue(ctx, log, s, 1));
    CTS_CHECK(cts_gate_open_later(ctx, g, 50) == 0);
    CTS_CHECK_OK(hal_stream_destroy(s));
    CTS_CHECKF(cts_log_count(log) == 1, "hal_stream_destroy returned before queued work ran");
    CTS_CHECK(cts_pattern_find_mismatch(dst, SIZE, 31) == SIZE);
    CTS_CHECK_OK(hal_mem_free(d));
    return CTS_PASS;
}

/* Work on one stream runs in the order it was enqueued: each round overwrites the same device
 * buffer and copies it out, so any reordering shows in the copies. */
int cts_stream_fifo_memory_order(cts_ctx_t *ctx)
{
    enum { ROUNDS = 32, SIZE = 16384 };
    hal_stream_t s = NULL;
    uint8_t *d = NULL;
    uint8_t *out = cts_calloc(ctx, (size_t)ROUNDS * SIZE);
    CTS_CHECK(out != NULL);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, SIZE, 0, (void **)&d));
    for (int i = 0; i < ROUNDS; i++) {
        CTS_CHECK_OK(hal_memset_async(d, i + 1, SIZE, s));
        CTS_CHECK_OK(hal_memset_async(d + i * 100, 0xf0, 7, s)); /* a marker per round */
        CTS_CHECK_OK(hal_memcpy_async(out + (size_t)i * SIZE, d, SIZE, s));
    }
    CTS_CHECK_OK(hal_stream_synchronize(s));
    for (int i = 0; i < ROUNDS; i++) {
        const uint8_t *o = out + (size_t)i * SIZE;
        for (size_t j = 0; j < SIZE; j++) {
            uint8_t want = (j >= (size_t)i * 100 && j < (size_t)i * 100 + 7) ? 0xf0 : i + 1;
            CTS_CHECKF(o[j] == want, "round %d byte %zu is %#x, expected %#x: out of order", i, j,
                       o[j], want);
        }
    }
    CTS_CHECK_OK(hal_mem_free(d));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_stream_fifo_callbacks(cts_ctx_t *ctx)
{
    enum { N = 200 };
    hal_stream_t s = NULL;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    cts_log_t *log = cts_log_new(ctx, N);
    CTS_CHECK(log != NULL);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    for (int i = 0; i < N; i++)
        CTS_CHECK_OK(cts_log_enqueue(ctx, log, s, i));
    CTS_CHECK_OK(hal_stream_synchronize(s));
    CTS_CHECK(cts_log_count(log) == N);
    for (int i = 0; i < N; i++)
        CTS_CHECKF(cts_log_value(log, (size_t)i) == i, "callback %d ran as number %d",
                   cts_log_value(log, (size_t)i), i);
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

/* Callbacks run on a HAL thread, get the stream's status (HAL_OK here) and their user data. */
int cts_stream_callback_status_and_thread(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL, def = NULL;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    cts_log_t *log = cts_log_new(ctx, 4);
    CTS_CHECK(log != NULL);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_device_get_default_stream(ctx->device, &def));
    CTS_CHECK_OK(cts_log_enqueue(ctx, log, s, 41));
    CTS_CHECK_OK(hal_stream_synchronize(s));
    CTS_CHECK_OK(cts_log_enqueue(ctx, log, def, 42));
    CTS_CHECK_OK(hal_stream_synchronize(def));
    CTS_CHECK(cts_log_count(log) == 2);
    for (size_t i = 0; i < 2; i++) {
        CTS_CHECK(cts_log_value(log, i) == 41 + (int)i);
        CTS_CHECK_STATUS(cts_log_status(log, i), HAL_OK);
        CTS_CHECKF(!cts_log_ran_on_caller(log, i),
                   "a callback ran on the thread that enqueued it, not on a HAL thread");
    }
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

typedef struct cb_probe {
    const uint8_t *watch; /* pinned memory written by the copy before the callback */
    size_t n;
    uint32_t seed;
    int saw_copy;
    uint8_t *write; /* pinned memory the callback fills, read by the copy after it */
} cb_probe_t;

static void probe_fn(hal_status_t status, void *user_data)
{
    cb_probe_t *p = user_data;
    (void)status;
    p->saw_copy = cts_pattern_find_mismatch(p->watch, p->n, p->seed) == p->n;
    cts_sleep_ms(20); /* later work must wait for the callback to return */
    memset(p->write, 0x77, p->n);
}

/* A callback runs after the work before it completed, and work after it waits for it. */
int cts_stream_callback_ordering(cts_ctx_t *ctx)
{
    enum { SIZE = 65536 };
    hal_stream_t s = NULL;
    uint8_t *p1 = NULL, *p2 = NULL, *d = NULL;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    uint8_t *src = cts_calloc(ctx, SIZE), *back = cts_calloc(ctx, SIZE);
    cb_probe_t *probe = cts_calloc(ctx, sizeof(*probe));
    CTS_CHECK(src != NULL && back != NULL && probe != NULL);
    cts_pattern_fill(src, SIZE, 41);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_HOST_PINNED, SIZE, 0, (void **)&p1));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_HOST_PINNED, SIZE, 0, (void **)&p2));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, SIZE, 0, (void **)&d));
    memset(p1, 0, SIZE);
    memset(p2, 0, SIZE);
    probe->watch = p1;
    probe->n = SIZE;
    probe->seed = 41;
    probe->write = p2;
    CTS_CHECK_OK(hal_memcpy_async(p1, src, SIZE, s));
    CTS_CHECK_OK(hal_stream_add_callback(s, probe_fn, probe));
    CTS_CHECK_OK(hal_memcpy_async(d, p2, SIZE, s));
    CTS_CHECK_OK(hal_memcpy_async(back, d, SIZE, s));
    CTS_CHECK_OK(hal_stream_synchronize(s));
    CTS_CHECKF(probe->saw_copy, "the callback ran before the copy enqueued ahead of it finished");
    CTS_CHECKF(cts_bytes_find_other(back, SIZE, 0x77) == SIZE,
               "work enqueued after the callback did not wait for it to return");
    CTS_CHECK_OK(hal_mem_free(p1));
    CTS_CHECK_OK(hal_mem_free(p2));
    CTS_CHECK_OK(hal_mem_free(d));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

static void never_called(hal_status_t status, void *user_data)
{
    (void)status;
    *(int *)user_data = 1;
}

/* Optional: without HAL_DEVICE_CAP_HOST_CALLBACKS the call is refused. */
int cts_stream_callback_invalid(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    int *called = cts_calloc(ctx, sizeof(int));
    CTS_CHECK(called != NULL);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_STATUS(hal_stream_add_callback(s, NULL, called), HAL_ERROR_INVALID_ARGUMENT);
    if ((ctx->props.capabilities & HAL_DEVICE_CAP_HOST_CALLBACKS) == 0) {
        CTS_CHECK_STATUS(hal_stream_add_callback(s, never_called, called), HAL_ERROR_UNSUPPORTED);
        CTS_CHECK_OK(hal_stream_synchronize(s));
        CTS_CHECK(*called == 0);
    }
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

/* A wait makes the waiting stream's later work see the effects of the other stream's work up to
 * the event. */
int cts_stream_wait_event(cts_ctx_t *ctx)
{
    enum { SIZE = 65536 };
    hal_stream_t a = NULL, b = NULL;
    hal_event_t e = NULL;
    uint8_t *d = NULL;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    uint8_t *out = cts_calloc(ctx, SIZE);
    CTS_CHECK(out != NULL);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &a));
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &b));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, SIZE, 0, (void **)&d));
    CTS_CHECK_OK(cts_memset_sync(d, 0, SIZE, a));
    cts_gate_t *g = cts_gate_new(ctx);
    CTS_CHECK_OK(cts_gate_enqueue(g, a));
    CTS_CHECK_OK(hal_memset_async(d, 0x42, SIZE, a));
    CTS_CHECK_OK(hal_event_record(e, a));
    CTS_CHECK_OK(hal_stream_wait_event(b, e));
    CTS_CHECK_OK(hal_memcpy_async(out, d, SIZE, b));
    cts_sleep_ms(30);
    CTS_CHECKF(hal_stream_query(b) == HAL_NOT_READY,
               "the waiting stream finished while the event's work was held");
    cts_gate_open(g);
    CTS_CHECK_OK(cts_poll_stream(b, 5000));
    CTS_CHECKF(cts_bytes_find_other(out, SIZE, 0x42) == SIZE,
               "the waiting stream's copy ran before the memset it waited for");
    CTS_CHECK_OK(hal_stream_synchronize(a));
    CTS_CHECK_OK(hal_event_destroy(e));
    CTS_CHECK_OK(hal_mem_free(d));
    CTS_CHECK_OK(hal_stream_destroy(a));
    CTS_CHECK_OK(hal_stream_destroy(b));
    return CTS_PASS;
}

int cts_stream_wait_event_never_recorded(cts_ctx_t *ctx)
{
    hal_stream_t b = NULL;
    hal_event_t e = NULL;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &b));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    CTS_CHECK_OK(hal_stream_wait_event(b, e));
    CTS_CHECK_OK(hal_memset_async(NULL, 0, 0, b));
    CTS_CHECK_OK(cts_poll_stream(b, 5000));
    CTS_CHECK_OK(hal_stream_synchronize(b));
    CTS_CHECK_OK(hal_event_destroy(e));
    CTS_CHECK_OK(hal_stream_destroy(b));
    return CTS_PASS;
}

/* The event may belong to another device of the same backend. */
int cts_stream_wait_event_other_device(cts_ctx_t *ctx)
{
    hal_stream_t a = NULL, b = NULL;
    hal_event_t e = NULL;
    CTS_SKIP_UNLESS_DEVICES(ctx, 2);
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    hal_device_t other = cts_other_device(ctx);
    CTS_CHECK(other != NULL);
    CTS_CHECK_OK(hal_stream_create(other, 0, &a));
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &b));
    CTS_CHECK_OK(hal_event_create(other, HAL_EVENT_FLAG_NONE, &e));
    cts_gate_t *g = cts_gate_new(ctx);
    cts_log_t *log = cts_log_new(ctx, 4);
    CTS_CHECK_OK(cts_gate_enqueue(g, a));
    CTS_CHECK_OK(hal_event_record(e, a));
    CTS_CHECK_OK(hal_stream_wait_event(b, e));
    cts_sleep_ms(30);
    CTS_CHECK_STATUS(hal_stream_query(b), HAL_NOT_READY);
    cts_gate_open(g);
    CTS_CHECK_OK(cts_poll_stream(b, 5000));
    CTS_CHECK_OK(cts_log_enqueue(ctx, log, b, 1));
    CTS_CHECK_OK(hal_stream_synchronize(b));
    CTS_CHECK_OK(hal_stream_synchronize(a));
    CTS_CHECK_OK(hal_event_destroy(e));
    CTS_CHECK_OK(hal_stream_destroy(a));
    CTS_CHECK_OK(hal_stream_destroy(b));
    return CTS_PASS;
}

/* Objects of different backends cannot wait on each other. */
int cts_stream_wait_event_other_backend(cts_ctx_t *ctx)
{
    hal_backend_t b2 = NULL;
    hal_device_t d2 = NULL;
    hal_stream_t s = NULL, s2 = NULL;
    hal_event_t e = NULL, e2 = NULL;
    if (cts_open_second_instance(ctx, &b2) != HAL_OK)
        return CTS_SKIP;
    int r = CTS_FAIL;
    if (CTS_EXPECT_OK(hal_device_get(b2, 0, &d2)) &&
        CTS_EXPECT_OK(hal_stream_create(ctx->device, 0, &s)) &&
        CTS_EXPECT_OK(hal_stream_create(d2, 0, &s2)) &&
        CTS_EXPECT_OK(hal_event_create(ctx->device, 0, &e)) &&
        CTS_EXPECT_OK(hal_event_create(d2, 0, &e2)) &&
        CTS_EXPECT_STATUS(hal_stream_wait_event(s, e2), HAL_ERROR_INVALID_ARGUMENT) &&
        CTS_EXPECT_STATUS(hal_stream_wait_event(s2, e), HAL_ERROR_INVALID_ARGUMENT) &&
        CTS_EXPECT_STATUS(hal_event_record(e2, s), HAL_ERROR_INVALID_ARGUMENT) &&
        CTS_EXPECT_OK(hal_stream_wait_event(s2, e2)))
        r = CTS_PASS;
    if (e != NULL)
        hal_event_destroy(e);
    if (e2 != NULL)
        hal_event_destroy(e2);
    if (s != NULL)
        hal_stream_destroy(s);
    if (s2 != NULL)
        hal_stream_destroy(s2);
    if (!CTS_EXPECT_OK(hal_backend_close(b2)))
        r = CTS_FAIL;
    return r;
}

int cts_stream_get_info(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    hal_device_t dev = NULL;
    int32_t prio = 99;
    int32_t want = ctx->props.stream_priority_greatest;
    CTS_CHECK_OK(hal_stream_create(ctx->device, want, &s));
    CTS_CHECK_OK(hal_stream_get_info(s, NULL, NULL));
    CTS_CHECK_OK(hal_stream_get_info(s, &dev, NULL));
    CTS_CHECK(dev == ctx->device);
    CTS_CHECK_OK(hal_stream_get_info(s, NULL, &prio));
    CTS_CHECK(prio == want);
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_stream_native_handle(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL, def = NULL;
    uintptr_t a = 0, b = 0;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_device_get_default_stream(ctx->device, &def));
    hal_status_t st = hal_stream_get_native_handle(s, &a);
    CTS_CHECK_STATUS2(st, HAL_OK, HAL_ERROR_UNSUPPORTED);
    if (st == HAL_OK) {
        CTS_CHECK_OK(hal_stream_get_native_handle(s, &b));
        CTS_CHECK(a == b);
    }
    CTS_CHECK_STATUS2(hal_stream_get_native_handle(def, &b), HAL_OK, HAL_ERROR_UNSUPPORTED);
    CTS_CHECK_STATUS(hal_stream_get_native_handle(s, NULL), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

/* Streams of higher priority are not starved by a lower-priority stream's backlog: both finish,
 * whatever the device's concurrency. */
int cts_stream_mixed_priorities_complete(cts_ctx_t *ctx)
{
    enum { SIZE = 1 << 20, ROUNDS = 8 };
    hal_stream_t lo = NULL, hi = NULL;
    uint8_t *d1 = NULL, *d2 = NULL;
    uint8_t *out = cts_calloc(ctx, 2 * SIZE);
    CTS_CHECK(out != NULL);
    CTS_CHECK_OK(hal_stream_create(ctx->device, ctx->props.stream_priority_least, &lo));
    CTS_CHECK_OK(hal_stream_create(ctx->device, ctx->props.stream_priority_greatest, &hi));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, SIZE, 0, (void **)&d1));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, SIZE, 0, (void **)&d2));
    for (int i = 0; i < ROUNDS; i++) {
        CTS_CHECK_OK(hal_memset_async(d1, i, SIZE, lo));
        CTS_CHECK_OK(hal_memset_async(d2, 100 + i, SIZE, hi));
    }
    CTS_CHECK_OK(hal_memcpy_async(out, d1, SIZE, lo));
    CTS_CHECK_OK(hal_memcpy_async(out + SIZE, d2, SIZE, hi));
    CTS_CHECK_OK(hal_stream_synchronize(hi));
    CTS_CHECK_OK(hal_stream_synchronize(lo));
    CTS_CHECK(cts_bytes_find_other(out, SIZE, ROUNDS - 1) == SIZE);
    CTS_CHECK(cts_bytes_find_other(out + SIZE, SIZE, 100 + ROUNDS - 1) == SIZE);
    CTS_CHECK_OK(hal_mem_free(d1));
    CTS_CHECK_OK(hal_mem_free(d2));
    CTS_CHECK_OK(hal_stream_destroy(lo));
    CTS_CHECK_OK(hal_stream_destroy(hi));
    return CTS_PASS;
}
