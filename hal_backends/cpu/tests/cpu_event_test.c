/* SPDX-License-Identifier: Apache-2.0 */
/* Events of the cpu backend: versions, waits bound at call time, out-of-order completion,
 * timing, cross-device waits and destruction while records and waits are queued. */
#include <stdlib.h>

#include "hal_backends/common/hq_internal.h"
#include "hal_backends/cpu/tests/cpu_test_util.h"

typedef struct flag {
    atomic_int set;
} flag_t;

static void flag_cb(hal_status_t status, void *arg)
{
    atomic_store(&((flag_t *)arg)->set, 1);
}

static bool flag_is_set(void *arg)
{
    return atomic_load(&((flag_t *)arg)->set) != 0;
}

CTEST(CpuEvent, NeverRecordedIsComplete)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", NULL, NULL, NULL), HAL_OK);
    void *s = NULL, *ev = NULL, *tev = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &s), HAL_OK);
    EXPECT_STATUS(fx.ops->event_create(fx.dev[0], HAL_EVENT_FLAG_NONE, &ev), HAL_OK);
    EXPECT_STATUS(fx.ops->event_create(fx.dev[0], HAL_EVENT_FLAG_TIMING, &tev), HAL_OK);
    EXPECT_STATUS(fx.ops->event_query(ev), HAL_OK);
    EXPECT_STATUS(fx.ops->event_synchronize(ev), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_wait_event(s, ev), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_query(s), HAL_OK); /* nothing was queued */
    float ms = 0;
    t_clear_error();
    EXPECT_STATUS(fx.ops->event_elapsed_ms(tev, tev, &ms), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("never recorded");
    uintptr_t native = 0;
    EXPECT_STATUS(fx.ops->event_get_native_handle(ev, &native), HAL_OK);
    CTEST_EXPECT(native != 0);
    fx.ops->event_destroy(ev);
    fx.ops->event_destroy(tev);
    EXPECT_STATUS(fx.ops->stream_destroy(s), HAL_OK);
    t_close(&fx);
    return CTEST_PASS;
}

/* A wait binds to the version current at the wait call, not to later re-records. */
CTEST(CpuEvent, WaitBindsToVersionAtCallTime)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", NULL, NULL, NULL), HAL_OK);
    void *a = NULL, *b = NULL, *c = NULL, *ev = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &a), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &b), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &c), HAL_OK);
    EXPECT_STATUS(fx.ops->event_create(fx.dev[0], 0, &ev), HAL_OK);

    /* Version 1 completes. */
    EXPECT_STATUS(fx.ops->event_record(ev, a), HAL_OK);
    EXPECT_STATUS(fx.ops->event_synchronize(ev), HAL_OK);
    EXPECT_STATUS(fx.ops->event_query(ev), HAL_OK);

    /* b waits for version 1 (complete); then version 2 is recorded behind a gate. */
    th_gate_t gate;
    th_gate_init(&gate);
    flag_t b_ran = { 0 }, c_ran = { 0 };
    EXPECT_STATUS(fx.ops->stream_wait_event(b, ev), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_add_callback(a, th_gate_cb, &gate), HAL_OK);
    EXPECT_STATUS(fx.ops->event_record(ev, a), HAL_OK);
    EXPECT_STATUS(fx.ops->event_query(ev), HAL_NOT_READY);
    EXPECT_STATUS(fx.ops->stream_add_callback(b, flag_cb, &b_ran), HAL_OK);
    /* c waits for version 2. */
    EXPECT_STATUS(fx.ops->stream_wait_event(c, ev), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_add_callback(c, flag_cb, &c_ran), HAL_OK);

    CTEST_EXPECT(th_wait_until(flag_is_set, &b_ran, 10000));
    th_sleep_ms(20);
    CTEST_EXPECT(!flag_is_set(&c_ran));
    EXPECT_STATUS(fx.ops->stream_query(c), HAL_NOT_READY);
    EXPECT_STATUS(fx.ops->event_query(ev), HAL_NOT_READY);
    th_gate_open(&gate);
    EXPECT_STATUS(fx.ops->stream_synchronize(c), HAL_OK);
    CTEST_EXPECT(flag_is_set(&c_ran));
    EXPECT_STATUS(fx.ops->event_query(ev), HAL_OK);

    fx.ops->event_destroy(ev);
    EXPECT_STATUS(fx.ops->stream_destroy(a), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_destroy(b), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_destroy(c), HAL_OK);
    th_gate_destroy(&gate);
    t_close(&fx);
    return CTEST_PASS;
}

/* Version 1 on a blocked stream, version 2 on a free one: once 2 completes the event is
 * complete, and a wait for version 1 is satisfied too. */
CTEST(CpuEvent, OutOfOrderCompletion)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", NULL, NULL, NULL), HAL_OK);
    void *slow = NULL, *fast = NULL, *waiter = NULL, *ev = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &slow), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &fast), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &waiter), HAL_OK);
    EXPECT_STATUS(fx.ops->event_create(fx.dev[0], 0, &ev), HAL_OK);
    th_gate_t gate;
    th_gate_init(&gate);
    flag_t ran = { 0 };
    EXPECT_STATUS(fx.ops->stream_add_callback(slow, th_gate_cb, &gate), HAL_OK);
    EXPECT_STATUS(fx.ops->event_record(ev, slow), HAL_OK); /* version 1 */
    EXPECT_STATUS(fx.ops->stream_wait_event(waiter, ev), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_add_callback(waiter, flag_cb, &ran), HAL_OK);
    EXPECT_STATUS(fx.ops->event_query(ev), HAL_NOT_READY);
    EXPECT_STATUS(fx.ops->event_record(ev, fast), HAL_OK); /* version 2 */
    EXPECT_STATUS(fx.ops->event_synchronize(ev), HAL_OK);
    EXPECT_STATUS(fx.ops->event_query(ev), HAL_OK);
    CTEST_EXPECT(th_wait_until(flag_is_set, &ran, 10000));
    EXPECT_STATUS(fx.ops->stream_query(slow), HAL_NOT_READY);
    th_gate_open(&gate);
    EXPECT_STATUS(fx.ops->stream_synchronize(slow), HAL_OK);
    /* The late version 1 does not move the event backwards. */
    EXPECT_STATUS(fx.ops->event_query(ev), HAL_OK);
    hq_event_t *raw = ev;
    CTEST_EXPECT(atomic_load(&raw->completed) == 2);
    fx.ops->event_destroy(ev);
    EXPECT_STATUS(fx.ops->stream_destroy(slow), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_destroy(fast), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_destroy(waiter), HAL_OK);
    th_gate_destroy(&gate);
    t_close(&fx);
    return CTEST_PASS;
}

static void sleep_cb(hal_status_t status, void *arg)
{
    th_sleep_ms(*(int *)arg);
}

CTEST(CpuEvent, Timing)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "2", NULL, NULL, NULL), HAL_OK);
    void *s = NULL, *start = NULL, *end = NULL, *plain = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &s), HAL_OK);
    EXPECT_STATUS(fx.ops->event_create(fx.dev[0], HAL_EVENT_FLAG_TIMING, &start), HAL_OK);
    EXPECT_STATUS(fx.ops->event_create(fx.dev[0], HAL_EVENT_FLAG_TIMING, &end), HAL_OK);
    EXPECT_STATUS(fx.ops->event_create(fx.dev[0], HAL_EVENT_FLAG_NONE, &plain), HAL_OK);
    int sleep_ms = 25;
    uint64_t host_before = hq_now_ns();
    EXPECT_STATUS(fx.ops->event_record(start, s), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_add_callback(s, sleep_cb, &sleep_ms), HAL_OK);
    EXPECT_STATUS(fx.ops->event_record(end, s), HAL_OK);
    EXPECT_STATUS(fx.ops->event_record(plain, s), HAL_OK);
    float ms = -1;
    EXPECT_STATUS(fx.ops->event_synchronize(start), HAL_OK);
    t_clear_error();
    EXPECT_STATUS(fx.ops->event_elapsed_ms(start, end, &ms), HAL_NOT_READY);
    EXPECT_MESSAGE("end event has not completed");
    EXPECT_STATUS(fx.ops->event_synchronize(end), HAL_OK);
    double host_span_ms = (double)(hq_now_ns() - host_before) / 1e6;
    EXPECT_STATUS(fx.ops->event_elapsed_ms(start, end, &ms), HAL_OK);
    /* At least the sleep; at most the host's span around both events (+1 ms of resolution). */
    CTEST_EXPECT(ms >= 24.0f && ms <= host_span_ms + 1.0);
    float back = 0;
    EXPECT_STATUS(fx.ops->event_elapsed_ms(end, start, &back), HAL_OK);
    CTEST_EXPECT(back == -ms);
    EXPECT_STATUS(fx.ops->event_synchronize(plain), HAL_OK);
    t_clear_error();
    EXPECT_STATUS(fx.ops->event_elapsed_ms(start, plain, &ms), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("HAL_EVENT_FLAG_TIMING");
    EXPECT_STATUS(fx.ops->event_elapsed_ms(plain, end, &ms), HAL_ERROR_INVALID_ARGUMENT);

    /* Re-recording times the newest version; invalid arguments win over "not ready". */
    th_gate_t gate;
    th_gate_init(&gate);
    EXPECT_STATUS(fx.ops->stream_add_callback(s, th_gate_cb, &gate), HAL_OK);
    EXPECT_STATUS(fx.ops->event_record(end, s), HAL_OK);
    EXPECT_STATUS(fx.ops->event_elapsed_ms(start, end, &ms), HAL_NOT_READY);
    EXPECT_STATUS(fx.ops->event_elapsed_ms(plain, end, &ms), HAL_ERROR_INVALID_ARGUMENT);
    th_gate_open(&gate);
    EXPECT_STATUS(fx.ops->stream_synchronize(s), HAL_OK);
    float later = 0;
    EXPECT_STATUS(fx.ops->event_elapsed_ms(start, end, &later), HAL_OK);
    CTEST_EXPECT(later >= back * -1.0f);

    fx.ops->event_destroy(start);
    fx.ops->event_destroy(end);
    fx.ops->event_destroy(plain);
    EXPECT_STATUS(fx.ops->stream_destroy(s), HAL_OK);
    th_gate_destroy(&gate);
    t_close(&fx);
    return CTEST_PASS;
}

/* Destroying an event with records and waits of it still queued is safe; the queued work
 * behaves as if the event were alive. */
CTEST(CpuEvent, DestroyWithPendingRecordsAndWaits)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", NULL, NULL, NULL), HAL_OK);
    void *a = NULL, *b = NULL, *ev = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &a), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &b), HAL_OK);
    EXPECT_STATUS(fx.ops->event_create(fx.dev[0], HAL_EVENT_FLAG_TIMING, &ev), HAL_OK);
    th_gate_t gate;
    th_gate_init(&gate);
    flag_t ran = { 0 };
    EXPECT_STATUS(fx.ops->stream_add_callback(a, th_gate_cb, &gate), HAL_OK);
    EXPECT_STATUS(fx.ops->event_record(ev, a), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_wait_event(b, ev), HAL_OK);
    EXPECT_STATUS(fx.ops->event_record(ev, a), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_wait_event(b, ev), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_add_callback(b, flag_cb, &ran), HAL_OK);
    fx.ops->event_destroy(ev);
    th_sleep_ms(10);
    CTEST_EXPECT(!flag_is_set(&ran));
    th_gate_open(&gate);
    EXPECT_STATUS(fx.ops->stream_synchronize(b), HAL_OK);
    CTEST_EXPECT(flag_is_set(&ran));
    EXPECT_STATUS(fx.ops->stream_destroy(a), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_destroy(b), HAL_OK);
    th_gate_destroy(&gate);
    t_close(&fx);
    return CTEST_PASS;
}

typedef struct event_sync_call {
    const hal_backend_ops_t *ops;
    void *event;
    atomic_int done;
} event_sync_call_t;

static void *event_sync_thread(void *arg)
{
    event_sync_call_t *c = arg;
    c->ops->event_synchronize(c->event);
    atomic_store(&c->done, 1);
    return NULL;
}

/* An event of device 1 orders a stream of device 0; event_synchronize blocks meanwhile. */
CTEST(CpuEvent, CrossDeviceWaitAndSynchronize)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "2", NULL, NULL, NULL), HAL_OK);
    void *s0 = NULL, *s1 = NULL, *ev1 = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &s0), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[1], 0, &s1), HAL_OK);
    EXPECT_STATUS(fx.ops->event_create(fx.dev[1], 0, &ev1), HAL_OK);
    th_gate_t gate;
    th_gate_init(&gate);
    flag_t ran = { 0 };
    unsigned char src[256], dst[256];
    memset(src, 0x77, sizeof(src));
    memset(dst, 0, sizeof(dst));
    hal_backend_ptr_t ps = t_ptr(src, HAL_MEM_KIND_UNREGISTERED);
    hal_backend_ptr_t pd = t_ptr(dst, HAL_MEM_KIND_UNREGISTERED);
    /* s1: gate, then fill src; s0 waits for that before copying src out. */
    EXPECT_STATUS(fx.ops->stream_add_callback(s1, th_gate_cb, &gate), HAL_OK);
    EXPECT_STATUS(fx.ops->memset_async(s1, &ps, 0x42, sizeof(src)), HAL_OK);
    EXPECT_STATUS(fx.ops->event_record(ev1, s1), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_wait_event(s0, ev1), HAL_OK);
    EXPECT_STATUS(fx.ops->memcpy_async(s0, &pd, &ps, sizeof(src)), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_add_callback(s0, flag_cb, &ran), HAL_OK);

    event_sync_call_t call = { fx.ops, ev1, 0 };
    atomic_init(&call.done, 0);
    pthread_t th;
    pthread_create(&th, NULL, event_sync_thread, &call);
    th_sleep_ms(20);
    CTEST_EXPECT(!flag_is_set(&ran));
    CTEST_EXPECT(atomic_load(&call.done) == 0);
    EXPECT_STATUS(fx.ops->stream_query(s0), HAL_NOT_READY);
    th_gate_open(&gate);
    pthread_join(th, NULL);
    EXPECT_STATUS(fx.ops->stream_synchronize(s0), HAL_OK);
    CTEST_EXPECT(flag_is_set(&ran));
    CTEST_EXPECT(dst[0] == 0x42 && dst[255] == 0x42);
    fx.ops->event_destroy(ev1);
    EXPECT_STATUS(fx.ops->stream_destroy(s0), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_destroy(s1), HAL_OK);
    th_gate_destroy(&gate);
    t_close(&fx);
    return CTEST_PASS;
}
