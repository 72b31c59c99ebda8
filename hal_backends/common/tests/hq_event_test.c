/* SPDX-License-Identifier: Apache-2.0 */
/* Versioned events of the host-queue engine: a never-recorded event is complete, re-recording
 * bumps the version, waits and synchronize bind to the version current at the call, versions
 * completing out of order, records on failed streams, timing, waits across devices, and
 * destruction while records and waits are queued. */
#include <stdlib.h>

#include "hal_backends/common/tests/hq_test_util.h"

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

CTEST(HqEvent, NeverRecordedIsComplete)
{
    hq_device_t dev;
    hq_device_config_t cfg = th_config(0, 0, 20);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    void *s = NULL, *ev = NULL, *tev = NULL;
    EXPECT_STATUS(hq_stream_create(&dev, 0, &s), HAL_OK);
    EXPECT_STATUS(hq_event_create(&dev, HAL_EVENT_FLAG_NONE, &ev), HAL_OK);
    EXPECT_STATUS(hq_event_create(&dev, HAL_EVENT_FLAG_TIMING, &tev), HAL_OK);
    CTEST_EXPECT(hq_event_device(ev) == &dev);
    EXPECT_STATUS(hq_event_query(ev), HAL_OK);
    EXPECT_STATUS(hq_event_synchronize(ev), HAL_OK);
    EXPECT_STATUS(hq_stream_wait_event(s, ev), HAL_OK);
    hq_stream_t *raw = s;
    CTEST_EXPECT(atomic_load(&raw->submitted) == 0); /* nothing was queued for the wait */
    float ms = 0;
    th_clear_error();
    EXPECT_STATUS(hq_event_elapsed_ms(tev, tev, &ms), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("never recorded");
    hq_event_destroy(ev);
    hq_event_destroy(tev);
    EXPECT_STATUS(hq_stream_destroy(s), HAL_OK);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

/* Re-recording bumps the version; a wait binds to the version current at the wait call. */
CTEST(HqEvent, WaitBindsToTheVersionAtTheCall)
{
    hq_device_t dev;
    hq_device_config_t cfg = th_config(0, 0, 20);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    void *a = NULL, *b = NULL, *c = NULL, *ev = NULL;
    EXPECT_STATUS(hq_stream_create(&dev, 0, &a), HAL_OK);
    EXPECT_STATUS(hq_stream_create(&dev, 0, &b), HAL_OK);
    EXPECT_STATUS(hq_stream_create(&dev, 0, &c), HAL_OK);
    EXPECT_STATUS(hq_event_create(&dev, 0, &ev), HAL_OK);
    hq_event_t *raw = ev;

    EXPECT_STATUS(hq_event_record(ev, a), HAL_OK); /* version 1 */
    CTEST_EXPECT(atomic_load(&raw->recorded) == 1);
    EXPECT_STATUS(hq_event_synchronize(ev), HAL_OK);

    th_gate_t gate;
    th_gate_init(&gate);
    flag_t b_ran = { 0 }, c_ran = { 0 };
    EXPECT_STATUS(hq_stream_wait_event(b, ev), HAL_OK); /* version 1: complete */
    EXPECT_STATUS(hq_stream_add_callback(a, th_gate_cb, &gate), HAL_OK);
    EXPECT_STATUS(hq_event_record(ev, a), HAL_OK); /* version 2, behind the gate */
    CTEST_EXPECT(atomic_load(&raw->recorded) == 2);
    EXPECT_STATUS(hq_event_query(ev), HAL_NOT_READY);
    EXPECT_STATUS(hq_stream_add_callback(b, flag_cb, &b_ran), HAL_OK);
    EXPECT_STATUS(hq_stream_wait_event(c, ev), HAL_OK); /* version 2 */
    EXPECT_STATUS(hq_stream_add_callback(c, flag_cb, &c_ran), HAL_OK);

    CTEST_EXPECT(th_wait_until(flag_is_set, &b_ran, 10000));
    th_sleep_ms(20);
    CTEST_EXPECT(!flag_is_set(&c_ran));
    EXPECT_STATUS(hq_stream_query(c), HAL_NOT_READY);
    th_gate_open(&gate);
    EXPECT_STATUS(hq_stream_synchronize(c), HAL_OK);
    CTEST_EXPECT(flag_is_set(&c_ran));
    EXPECT_STATUS(hq_event_query(ev), HAL_OK);

    hq_event_destroy(ev);
    EXPECT_STATUS(hq_stream_destroy(a), HAL_OK);
    EXPECT_STATUS(hq_stream_destroy(b), HAL_OK);
    EXPECT_STATUS(hq_stream_destroy(c), HAL_OK);
    th_gate_destroy(&gate);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

typedef struct sync_call {
    void *event;
    atomic_int done;
    hal_status_t status;
} sync_call_t;

static void *event_sync_thread(void *arg)
{
    sync_call_t *c = arg;
    c->status = hq_event_synchronize(c->event);
    atomic_store(&c->done, 1);
    return NULL;
}

/* Version 1 on a blocked stream, version 2 on a free one: once 2 completes the event is
 * complete (and a synchronize bound to version 1 returns); the late version 1 does not move it
 * back. */
CTEST(HqEvent, VersionsCompleteOutOfOrder)
{
    hq_device_t dev;
    hq_device_config_t cfg = th_config(0, 0, 20);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    void *slow = NULL, *fast = NULL, *waiter = NULL, *ev = NULL;
    EXPECT_STATUS(hq_stream_create(&dev, 0, &slow), HAL_OK);
    EXPECT_STATUS(hq_stream_create(&dev, 0, &fast), HAL_OK);
    EXPECT_STATUS(hq_stream_create(&dev, 0, &waiter), HAL_OK);
    EXPECT_STATUS(hq_event_create(&dev, 0, &ev), HAL_OK);
    th_gate_t gate;
    th_gate_init(&gate);
    flag_t ran = { 0 };
    EXPECT_STATUS(hq_stream_add_callback(slow, th_gate_cb, &gate), HAL_OK);
    EXPECT_STATUS(hq_event_record(ev, slow), HAL_OK); /* version 1 */
    EXPECT_STATUS(hq_stream_wait_event(waiter, ev), HAL_OK);
    EXPECT_STATUS(hq_stream_add_callback(waiter, flag_cb, &ran), HAL_OK);
    sync_call_t call = { .event = ev, .status = HAL_ERROR_INTERNAL };
    atomic_init(&call.done, 0);
    pthread_t th;
    pthread_create(&th, NULL, event_sync_thread, &call); /* bound to version 1 */
    th_sleep_ms(10);
    CTEST_EXPECT(atomic_load(&call.done) == 0);
    EXPECT_STATUS(hq_event_record(ev, fast), HAL_OK); /* version 2 */
    EXPECT_STATUS(hq_event_synchronize(ev), HAL_OK);
    pthread_join(th, NULL);
    CTEST_EXPECT(call.status == HAL_OK);
    CTEST_EXPECT(th_wait_until(flag_is_set, &ran, 10000));
    EXPECT_STATUS(hq_stream_query(slow), HAL_NOT_READY);
    th_gate_open(&gate);
    EXPECT_STATUS(hq_stream_synchronize(slow), HAL_OK);
    hq_event_t *raw = ev;
    CTEST_EXPECT(atomic_load(&raw->completed) == 2);
    EXPECT_STATUS(hq_event_query(ev), HAL_OK);
    hq_event_destroy(ev);
    EXPECT_STATUS(hq_stream_destroy(slow), HAL_OK);
    EXPECT_STATUS(hq_stream_destroy(fast), HAL_OK);
    EXPECT_STATUS(hq_stream_destroy(waiter), HAL_OK);
    th_gate_destroy(&gate);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

/* A record on a failed stream completes, carrying the error; a stream that waits on it is not
 * failed by it; re-recording on a healthy stream makes the event healthy again. */
CTEST(HqEvent, RecordOnAFailedStreamCarriesTheError)
{
    hq_device_t dev;
    hq_device_config_t cfg = th_config(0, 0, 20);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    void *bad = NULL, *good = NULL, *ev = NULL;
    EXPECT_STATUS(hq_stream_create(&dev, 0, &bad), HAL_OK);
    EXPECT_STATUS(hq_stream_create(&dev, 0, &good), HAL_OK);
    EXPECT_STATUS(hq_event_create(&dev, 0, &ev), HAL_OK);
    EXPECT_STATUS(hq_stream_inject_error(bad, HAL_ERROR_ABORTED, "aborted in test"), HAL_OK);
    EXPECT_STATUS(hq_event_record(ev, bad), HAL_OK);
    th_clear_error();
    EXPECT_STATUS(hq_event_synchronize(ev), HAL_ERROR_ABORTED);
    EXPECT_MESSAGE("the recording stream had failed with HAL_ERROR_ABORTED");
    EXPECT_STATUS(hq_event_query(ev), HAL_ERROR_ABORTED);
    EXPECT_STATUS(hq_stream_wait_event(good, ev), HAL_OK);
    EXPECT_STATUS(hq_stream_synchronize(good), HAL_OK);
    EXPECT_STATUS(hq_event_record(ev, good), HAL_OK);
    EXPECT_STATUS(hq_event_synchronize(ev), HAL_OK);
    EXPECT_STATUS(hq_event_query(ev), HAL_OK);
    hq_event_destroy(ev);
    EXPECT_STATUS(hq_stream_destroy(bad), HAL_ERROR_ABORTED);
    EXPECT_STATUS(hq_stream_destroy(good), HAL_OK);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

static void sleep_cb(hal_status_t status, void *arg)
{
    th_sleep_ms(*(int *)arg);
}

CTEST(HqEvent, Timing)
{
    hq_device_t dev;
    hq_device_config_t cfg = th_config(0, 0, 20);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    void *s = NULL, *start = NULL, *end = NULL, *plain = NULL;
    EXPECT_STATUS(hq_stream_create(&dev, 0, &s), HAL_OK);
    EXPECT_STATUS(hq_event_create(&dev, HAL_EVENT_FLAG_TIMING, &start), HAL_OK);
    EXPECT_STATUS(hq_event_create(&dev, HAL_EVENT_FLAG_TIMING, &end), HAL_OK);
    EXPECT_STATUS(hq_event_create(&dev, HAL_EVENT_FLAG_NONE, &plain), HAL_OK);
    th_gate_t gate;
    th_gate_init(&gate);
    int sleep_ms = 5;
    EXPECT_STATUS(hq_event_record(start, s), HAL_OK);
    EXPECT_STATUS(hq_stream_add_callback(s, sleep_cb, &sleep_ms), HAL_OK);
    EXPECT_STATUS(hq_stream_add_callback(s, th_gate_cb, &gate), HAL_OK);
    EXPECT_STATUS(hq_event_record(end, s), HAL_OK);
    EXPECT_STATUS(hq_event_record(plain, s), HAL_OK);
    float ms = -1;
    EXPECT_STATUS(hq_event_synchronize(start), HAL_OK);
    th_clear_error();
    EXPECT_STATUS(hq_event_elapsed_ms(start, end, &ms), HAL_NOT_READY);
    EXPECT_MESSAGE("end event has not completed");
    /* Invalid arguments are reported before incompleteness. */
    th_clear_error();
    EXPECT_STATUS(hq_event_elapsed_ms(plain, end, &ms), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("HAL_EVENT_FLAG_TIMING");
    th_gate_open(&gate);
    EXPECT_STATUS(hq_event_synchronize(end), HAL_OK);
    EXPECT_STATUS(hq_event_elapsed_ms(start, end, &ms), HAL_OK);
    CTEST_EXPECT(ms >= 4.0f && ms < 60000.0f); /* the callback slept between the two */
    float back = 0;
    EXPECT_STATUS(hq_event_elapsed_ms(end, start, &back), HAL_OK);
    CTEST_EXPECT(back == -ms);
    EXPECT_STATUS(hq_event_synchronize(plain), HAL_OK);
    EXPECT_STATUS(hq_event_elapsed_ms(start, plain, &ms), HAL_ERROR_INVALID_ARGUMENT);
    hq_event_destroy(start);
    hq_event_destroy(end);
    hq_event_destroy(plain);
    EXPECT_STATUS(hq_stream_destroy(s), HAL_OK);
    th_gate_destroy(&gate);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

/* An event of one device orders a stream of another; destroying the event with its records and
 * waits still queued is safe, and the queued work behaves as if it were alive. */
CTEST(HqEvent, CrossDeviceAndDestroyWhileQueued)
{
    hq_device_t d0, d1;
    hq_device_config_t c0 = th_config(0, 1, 20), c1 = th_config(1, 1, 0);
    EXPECT_STATUS(hq_device_init(&d0, &c0), HAL_OK);
    EXPECT_STATUS(hq_device_init(&d1, &c1), HAL_OK);
    void *s0 = NULL, *s1 = NULL, *ev = NULL;
    EXPECT_STATUS(hq_stream_create(&d0, 0, &s0), HAL_OK);
    EXPECT_STATUS(hq_stream_create(&d1, 0, &s1), HAL_OK);
    EXPECT_STATUS(hq_event_create(&d1, HAL_EVENT_FLAG_TIMING, &ev), HAL_OK);
    th_gate_t gate;
    th_gate_init(&gate);
    flag_t ran = { 0 };
    EXPECT_STATUS(hq_stream_add_callback(s1, th_gate_cb, &gate), HAL_OK);
    EXPECT_STATUS(hq_event_record(ev, s1), HAL_OK);
    EXPECT_STATUS(hq_stream_wait_event(s0, ev), HAL_OK);
    EXPECT_STATUS(hq_event_record(ev, s1), HAL_OK);
    EXPECT_STATUS(hq_stream_wait_event(s0, ev), HAL_OK);
    EXPECT_STATUS(hq_stream_add_callback(s0, flag_cb, &ran), HAL_OK);
    hq_event_destroy(ev);
    th_sleep_ms(10);
    CTEST_EXPECT(!flag_is_set(&ran));
    EXPECT_STATUS(hq_stream_query(s0), HAL_NOT_READY);
    th_gate_open(&gate);
    EXPECT_STATUS(hq_stream_synchronize(s0), HAL_OK);
    CTEST_EXPECT(flag_is_set(&ran));
    EXPECT_STATUS(hq_stream_destroy(s0), HAL_OK);
    EXPECT_STATUS(hq_stream_destroy(s1), HAL_OK);
    th_gate_destroy(&gate);
    hq_device_fini(&d0);
    hq_device_fini(&d1);
    return CTEST_PASS;
}
