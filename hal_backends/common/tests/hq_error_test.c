/* SPDX-License-Identifier: Apache-2.0 */
/* Errors in the host-queue engine: the first failure latches with its message; what is skipped,
 * refused and still run afterwards; work and host-function failures with and without a detail
 * (through hq_task_error and the host's take_error, a 1.0 host without it, stale details); and
 * the lost-device latch (every stream, streams born failed, device_synchronize, first reason
 * kept, marked from a worker). */
#include <stdlib.h>

#include "hal_backends/common/tests/hq_test_util.h"

typedef struct seen {
    atomic_int calls;
    atomic_int status;
} seen_t;

static void seen_init(seen_t *s)
{
    atomic_init(&s->calls, 0);
    atomic_init(&s->status, -1);
}

static void seen_cb(hal_status_t status, void *arg)
{
    seen_t *s = arg;
    atomic_store(&s->status, status);
    atomic_fetch_add(&s->calls, 1);
}

static hal_status_t seen_fn(void *arg, hal_status_t status)
{
    seen_cb(status, arg);
    return HAL_OK;
}

static hal_status_t seen_work(hq_stream_t *stream, void *payload, hal_status_t status)
{
    seen_cb(status, *(seen_t **)payload);
    return HAL_OK;
}

/* What happens after a failure: data work is skipped and refused, work that runs on error,
 * callbacks and host functions run and are told, records complete with the error, waits are
 * honoured, and a later failure never replaces the first. */
CTEST(HqError, ErrorsLatch)
{
    hq_device_t dev;
    hq_device_config_t cfg = th_config(0, 2, 20);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    void *s = NULL, *ev = NULL;
    EXPECT_STATUS(hq_stream_create(&dev, 0, &s), HAL_OK);
    EXPECT_STATUS(hq_event_create(&dev, 0, &ev), HAL_OK);
    seen_t skipped, on_error, cb, fn;
    seen_init(&skipped);
    seen_init(&on_error);
    seen_init(&cb);
    seen_init(&fn);
    seen_t *p_skipped = &skipped, *p_on_error = &on_error;
    th_gate_t gate;
    th_gate_init(&gate);
    EXPECT_STATUS(hq_stream_add_callback(s, th_gate_cb, &gate), HAL_OK);
    EXPECT_STATUS(hq_stream_inject_error(s, HAL_ERROR_DEVICE_LOST, "injected loss"), HAL_OK);
    EXPECT_STATUS(hq_stream_enqueue(s, seen_work, &p_skipped, sizeof(p_skipped), 0), HAL_OK);
    EXPECT_STATUS(
        hq_stream_enqueue(s, seen_work, &p_on_error, sizeof(p_on_error), HQ_TASK_RUN_ON_ERROR),
        HAL_OK);
    EXPECT_STATUS(hq_event_record(ev, s), HAL_OK);
    EXPECT_STATUS(hq_stream_add_callback(s, seen_cb, &cb), HAL_OK);
    EXPECT_STATUS(hq_stream_launch_host_fn(s, seen_fn, &fn), HAL_OK);
    EXPECT_STATUS(hq_stream_inject_error(s, HAL_ERROR_ABORTED, "second failure"), HAL_OK);
    EXPECT_STATUS(hq_stream_query(s), HAL_NOT_READY);
    th_gate_open(&gate);

    th_clear_error();
    EXPECT_STATUS(hq_stream_synchronize(s), HAL_ERROR_DEVICE_LOST);
    EXPECT_MESSAGE("the stream failed earlier: injected loss");
    CTEST_EXPECT(atomic_load(&gate.status) == HAL_OK); /* the gate ran before the failure */
    CTEST_EXPECT(atomic_load(&skipped.calls) == 0);
    CTEST_EXPECT(atomic_load(&on_error.calls) == 1 &&
                 atomic_load(&on_error.status) == HAL_ERROR_DEVICE_LOST);
    CTEST_EXPECT(atomic_load(&cb.calls) == 1 && atomic_load(&cb.status) == HAL_ERROR_DEVICE_LOST);
    CTEST_EXPECT(atomic_load(&fn.calls) == 1 && atomic_load(&fn.status) == HAL_ERROR_DEVICE_LOST);
    EXPECT_STATUS(hq_event_query(ev), HAL_ERROR_DEVICE_LOST);
    EXPECT_STATUS(hq_stream_query(s), HAL_ERROR_DEVICE_LOST);

    /* Sticky: new data work is refused without being queued; the rest is accepted. */
    th_clear_error();
    EXPECT_STATUS(hq_stream_enqueue(s, seen_work, &p_skipped, sizeof(p_skipped), 0),
                  HAL_ERROR_DEVICE_LOST);
    EXPECT_MESSAGE("injected loss");
    EXPECT_STATUS(
        hq_stream_enqueue(s, seen_work, &p_on_error, sizeof(p_on_error), HQ_TASK_RUN_ON_ERROR),
        HAL_OK);
    EXPECT_STATUS(hq_stream_add_callback(s, seen_cb, &cb), HAL_OK);
    EXPECT_STATUS(hq_stream_launch_host_fn(s, seen_fn, &fn), HAL_OK);
    EXPECT_STATUS(hq_stream_synchronize(s), HAL_ERROR_DEVICE_LOST);
    CTEST_EXPECT(atomic_load(&skipped.calls) == 0);
    CTEST_EXPECT(atomic_load(&on_error.calls) == 2);
    CTEST_EXPECT(atomic_load(&cb.calls) == 2 && atomic_load(&fn.calls) == 2);
    th_clear_error();
    EXPECT_STATUS(hq_stream_destroy(s), HAL_ERROR_DEVICE_LOST);
    EXPECT_MESSAGE("injected loss");
    hq_event_destroy(ev);
    th_gate_destroy(&gate);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

static hal_status_t explained_failure(hq_stream_t *stream, void *payload, hal_status_t status)
{
    hq_task_error("native_copy returned %d", *(int *)payload);
    return HAL_ERROR_BACKEND_SPECIFIC;
}

static hal_status_t silent_failure(hq_stream_t *stream, void *payload, hal_status_t status)
{
    return HAL_ERROR_TIMEOUT;
}

CTEST(HqError, WorkFailuresLatchWithTheirMessage)
{
    hq_device_t dev;
    hq_device_config_t cfg = th_config(0, 0, 0);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    void *a = NULL, *b = NULL;
    EXPECT_STATUS(hq_stream_create(&dev, 0, &a), HAL_OK);
    EXPECT_STATUS(hq_stream_create(&dev, 0, &b), HAL_OK);
    int code = 42;
    EXPECT_STATUS(hq_stream_enqueue(a, explained_failure, &code, sizeof(code), 0), HAL_OK);
    th_clear_error();
    EXPECT_STATUS(hq_stream_synchronize(a), HAL_ERROR_BACKEND_SPECIFIC);
    EXPECT_MESSAGE("the stream failed earlier: native_copy returned 42");
    EXPECT_STATUS(hq_stream_enqueue(b, silent_failure, NULL, 0, 0), HAL_OK);
    th_clear_error();
    EXPECT_STATUS(hq_stream_synchronize(b), HAL_ERROR_TIMEOUT);
    EXPECT_MESSAGE("a stream task failed with HAL_ERROR_TIMEOUT");
    /* Outside a work function, hq_task_error does nothing. */
    hq_task_error("ignored %d", 1);
    EXPECT_STATUS(hq_stream_destroy(a), HAL_ERROR_BACKEND_SPECIFIC);
    EXPECT_STATUS(hq_stream_destroy(b), HAL_ERROR_TIMEOUT);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

/* ---- host functions and the host's take_error ---------------------------------------------- */

typedef struct host_step {
    hal_status_t ret;
    const char *detail; /* left through the host before returning, or NULL */
} host_step_t;

static hal_status_t host_step(void *arg, hal_status_t status)
{
    host_step_t *st = arg;
    if (st->detail != NULL)
        th_leave_detail(st->detail);
    return st->ret;
}

static void stale_cb(hal_status_t status, void *arg)
{
    th_leave_detail("a stale detail of a callback");
}

CTEST(HqError, HostFunctionFailuresKeepTheHostsDetail)
{
    hq_device_t dev;
    hq_device_config_t cfg = th_config(0, 1, 20);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    void *s = NULL;

    /* The detail the function left latches with its status. */
    host_step_t remote = { HAL_ERROR_REMOTE, "hal_allreduce: rank 3 stopped answering" };
    EXPECT_STATUS(hq_stream_create(&dev, 0, &s), HAL_OK);
    EXPECT_STATUS(hq_stream_launch_host_fn(s, host_step, &remote), HAL_OK);
    th_clear_error();
    EXPECT_STATUS(hq_stream_synchronize(s), HAL_ERROR_REMOTE);
    EXPECT_MESSAGE("the stream failed earlier: hal_allreduce: rank 3 stopped answering");
    EXPECT_STATUS(hq_stream_destroy(s), HAL_ERROR_REMOTE);

    /* A detail left by a callback, or by a host function that then succeeded, is not blamed on
     * a later failure; take_error is called after every host function. */
    host_step_t ok_with_detail = { HAL_OK, "left behind on success" };
    host_step_t quiet = { HAL_ERROR_TIMEOUT, NULL };
    EXPECT_STATUS(hq_stream_create(&dev, 0, &s), HAL_OK);
    EXPECT_STATUS(hq_stream_add_callback(s, stale_cb, NULL), HAL_OK);
    EXPECT_STATUS(hq_stream_synchronize(s), HAL_OK);
    int calls_before = th_take_error_calls();
    EXPECT_STATUS(hq_stream_launch_host_fn(s, host_step, &ok_with_detail), HAL_OK);
    EXPECT_STATUS(hq_stream_launch_host_fn(s, host_step, &quiet), HAL_OK);
    th_clear_error();
    EXPECT_STATUS(hq_stream_synchronize(s), HAL_ERROR_TIMEOUT);
    EXPECT_MESSAGE("a stream host function failed with HAL_ERROR_TIMEOUT");
    CTEST_EXPECT(strstr(th_last_error(), "stale") == NULL);
    CTEST_EXPECT(strstr(th_last_error(), "left behind") == NULL);
    CTEST_EXPECT(th_take_error_calls() - calls_before == 2);
    EXPECT_STATUS(hq_stream_destroy(s), HAL_ERROR_TIMEOUT);
    hq_device_fini(&dev);

    /* A 1.0 host has no take_error: the status alone latches, nothing is called. */
    cfg.host = &th_host_1_0;
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    EXPECT_STATUS(hq_stream_create(&dev, 0, &s), HAL_OK);
    calls_before = th_take_error_calls();
    EXPECT_STATUS(hq_stream_add_callback(s, stale_cb, NULL), HAL_OK);
    EXPECT_STATUS(hq_stream_launch_host_fn(s, host_step, &remote), HAL_OK);
    th_clear_error();
    EXPECT_STATUS(hq_stream_synchronize(s), HAL_ERROR_REMOTE);
    EXPECT_MESSAGE("a stream host function failed with HAL_ERROR_REMOTE");
    CTEST_EXPECT(th_take_error_calls() == calls_before);
    EXPECT_STATUS(hq_stream_destroy(s), HAL_ERROR_REMOTE);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

/* ---- the lost-device latch ----------------------------------------------------------------- */

static hal_status_t lose_device(hq_stream_t *stream, void *payload, hal_status_t status)
{
    hq_device_mark_lost(hq_stream_device(stream), "core %d is lost: %s", 0, "hardware error");
    hq_task_error("native_read returned HW_ERROR");
    return HAL_ERROR_DEVICE_LOST;
}

CTEST(HqError, DeviceLostLatchesOnEveryStream)
{
    hq_device_t dev, other;
    hq_device_config_t cfg = th_config(0, 2, 0), cfg1 = th_config(1, 2, 0);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    EXPECT_STATUS(hq_device_init(&other, &cfg1), HAL_OK);
    void *s = NULL, *sibling = NULL, *healthy = NULL, *late = NULL;
    EXPECT_STATUS(hq_stream_create(&dev, 0, &s), HAL_OK);
    EXPECT_STATUS(hq_stream_create(&dev, -1, &sibling), HAL_OK);
    EXPECT_STATUS(hq_stream_create(&other, 0, &healthy), HAL_OK);
    EXPECT_STATUS(hq_device_check_lost(&dev), HAL_OK);
    seen_t cb;
    seen_init(&cb);

    /* Marked from a worker, while its own task fails: the loss's message wins on that stream
     * too (it latched first). */
    EXPECT_STATUS(hq_stream_enqueue(s, lose_device, NULL, 0, 0), HAL_OK);
    th_clear_error();
    EXPECT_STATUS(hq_stream_synchronize(s), HAL_ERROR_DEVICE_LOST);
    EXPECT_MESSAGE("the stream failed earlier: core 0 is lost: hardware error");
    th_clear_error();
    EXPECT_STATUS(hq_stream_query(sibling), HAL_ERROR_DEVICE_LOST);
    EXPECT_MESSAGE("core 0 is lost: hardware error");
    EXPECT_STATUS(hq_stream_add_callback(sibling, seen_cb, &cb), HAL_OK);
    EXPECT_STATUS(hq_stream_synchronize(sibling), HAL_ERROR_DEVICE_LOST);
    CTEST_EXPECT(atomic_load(&cb.status) == HAL_ERROR_DEVICE_LOST);
    /* Streams created later are born failed; the device reports it. */
    EXPECT_STATUS(hq_stream_create(&dev, 0, &late), HAL_OK);
    EXPECT_STATUS(hq_stream_query(late), HAL_ERROR_DEVICE_LOST);
    th_clear_error();
    EXPECT_STATUS(hq_device_check_lost(&dev), HAL_ERROR_DEVICE_LOST);
    EXPECT_MESSAGE("core 0 is lost: hardware error");
    EXPECT_STATUS(hq_device_synchronize(&dev), HAL_ERROR_DEVICE_LOST);
    /* The first reason stays. */
    hq_device_mark_lost(&dev, "a second reason");
    th_clear_error();
    EXPECT_STATUS(hq_device_check_lost(&dev), HAL_ERROR_DEVICE_LOST);
    EXPECT_MESSAGE("core 0 is lost: hardware error");
    /* Other devices are not affected. */
    EXPECT_STATUS(hq_stream_query(healthy), HAL_OK);
    EXPECT_STATUS(hq_device_synchronize(&other), HAL_OK);
    EXPECT_STATUS(hq_device_check_lost(&other), HAL_OK);

    EXPECT_STATUS(hq_stream_destroy(s), HAL_ERROR_DEVICE_LOST);
    EXPECT_STATUS(hq_stream_destroy(sibling), HAL_ERROR_DEVICE_LOST);
    EXPECT_STATUS(hq_stream_destroy(late), HAL_ERROR_DEVICE_LOST);
    EXPECT_STATUS(hq_stream_destroy(healthy), HAL_OK);
    /* With no streams left, the lost device still says so. */
    EXPECT_STATUS(hq_device_synchronize(&dev), HAL_ERROR_DEVICE_LOST);
    hq_device_fini(&dev);
    hq_device_fini(&other);
    return CTEST_PASS;
}

CTEST(HqError, StatusNames)
{
    CTEST_CHECK(strcmp(hq_status_name(HAL_OK), "HAL_OK") == 0);
    CTEST_CHECK(strcmp(hq_status_name(HAL_ERROR_DEVICE_LOST), "HAL_ERROR_DEVICE_LOST") == 0);
    CTEST_CHECK(strcmp(hq_status_name(HAL_ERROR_BACKEND_SPECIFIC), "HAL_ERROR_BACKEND_SPECIFIC") ==
                0);
    CTEST_CHECK(strcmp(hq_status_name((hal_status_t)1000), "HAL_STATUS_UNKNOWN") == 0);
    CTEST_CHECK(strcmp(hq_status_name((hal_status_t)-1), "HAL_STATUS_UNKNOWN") == 0);
    /* Host helpers accept a NULL host and hosts without the service. */
    hq_set_error(NULL, "nowhere %d", 1);
    CTEST_CHECK(hq_take_error(NULL) == NULL);
    th_clear_error();
    hq_set_error(&th_host, "detail %d", 7);
    CTEST_CHECK(strcmp(th_last_error(), "detail 7") == 0);
    CTEST_CHECK(hq_take_error(&th_host_1_0) == NULL);
    const char *taken = hq_take_error(&th_host);
    CTEST_CHECK(taken != NULL && strcmp(taken, "detail 7") == 0);
    CTEST_CHECK(hq_take_error(&th_host) == NULL);
    return CTEST_PASS;
}
