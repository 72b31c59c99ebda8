/* SPDX-License-Identifier: Apache-2.0 */
/* Work run on the calling thread (HQ_TASK_INLINE) and events recorded on an idle stream: where
 * each runs, the order against pending work and against producers that arrive meanwhile, what
 * holds a slot, latched errors and their messages, and the events' status and timing. */
#include <stdint.h>

#include "hal_backends/common/tests/hq_test_util.h"

/* What an inline-eligible task saw: the thread it ran on and its payload. */
typedef struct where {
    pthread_t caller;
    atomic_int ran;
    atomic_int on_caller;
    th_gate_t *gate; /* if set, the task blocks on it */
} where_t;

static hal_status_t note_where(hq_stream_t *stream, void *payload, hal_status_t status)
{
    where_t *w = *(where_t **)payload;
    atomic_store(&w->on_caller, pthread_equal(pthread_self(), w->caller) ? 1 : 0);
    if (w->gate != NULL)
        (void)th_gate_fn(w->gate, status);
    atomic_fetch_add(&w->ran, 1);
    return HAL_OK;
}

static void where_init(where_t *w, th_gate_t *gate)
{
    w->caller = pthread_self();
    atomic_init(&w->ran, 0);
    atomic_init(&w->on_caller, -1);
    w->gate = gate;
}

/* A device of `slots` execution slots whose waiters spin 20 us (see th_config). */
static void open_device(hq_device_t *dev, uint32_t slots)
{
    hq_device_config_t cfg = th_config(0, slots, 20);
    EXPECT_OK(hq_device_init(dev, &cfg));
}

static hal_status_t enqueue_inline(void *s, where_t *w)
{
    return hq_stream_enqueue(s, note_where, &w, sizeof(w), HQ_TASK_INLINE);
}

CTEST(HqInline, RunsOnTheCallerWhenTheStreamIsIdle)
{
    hq_device_t dev;
    open_device(&dev, 2);
    void *s = NULL;
    EXPECT_OK(hq_stream_create(&dev, 0, &s));
    where_t w;
    where_init(&w, NULL);
    EXPECT_OK(enqueue_inline(s, &w));
    /* Done before the call returned, on this thread, without a synchronize. */
    CTEST_EXPECT(atomic_load(&w.ran) == 1);
    CTEST_EXPECT(atomic_load(&w.on_caller) == 1);
    EXPECT_OK(hq_stream_query(s));
    /* Without the flag the same task goes to the worker. */
    where_t queued;
    where_init(&queued, NULL);
    where_t *qp = &queued;
    EXPECT_OK(hq_stream_enqueue(s, note_where, &qp, sizeof(qp), 0));
    EXPECT_OK(hq_stream_synchronize(s));
    CTEST_EXPECT(atomic_load(&queued.on_caller) == 0);
    EXPECT_OK(hq_stream_destroy(s));
    hq_device_fini(&dev);
    return CTEST_PASS;
}

CTEST(HqInline, QueuesBehindPendingWork)
{
    hq_device_t dev;
    open_device(&dev, 2);
    void *s = NULL;
    EXPECT_OK(hq_stream_create(&dev, 0, &s));
    th_gate_t gate;
    th_gate_init(&gate);
    EXPECT_OK(hq_stream_add_callback(s, th_gate_cb, &gate));
    where_t w;
    where_init(&w, NULL);
    EXPECT_OK(enqueue_inline(s, &w));
    th_sleep_ms(20);
    CTEST_EXPECT(atomic_load(&w.ran) == 0); /* it waits for the gate, like any task */
    EXPECT_STATUS(hq_stream_query(s), HAL_NOT_READY);
    th_gate_open(&gate);
    EXPECT_OK(hq_stream_synchronize(s));
    CTEST_EXPECT(atomic_load(&w.ran) == 1);
    CTEST_EXPECT(atomic_load(&w.on_caller) == 0);
    EXPECT_OK(hq_stream_destroy(s));
    th_gate_destroy(&gate);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

typedef struct inline_job {
    void *stream;
    where_t *where;
    hal_status_t status;
} inline_job_t;

static void *enqueue_inline_thread(void *arg)
{
    inline_job_t *job = arg;
    job->where->caller = pthread_self();
    job->status = enqueue_inline(job->stream, job->where);
    return NULL;
}

static bool gate_entered(void *gate)
{
    return th_gate_entered(gate);
}

CTEST(HqInline, ProducersQueueBehindARunningInlineTask)
{
    hq_device_t dev;
    open_device(&dev, 2);
    void *s = NULL, *ev = NULL;
    EXPECT_OK(hq_stream_create(&dev, 0, &s));
    EXPECT_OK(hq_event_create(&dev, 0, &ev));
    th_gate_t gate;
    th_gate_init(&gate);
    where_t w;
    where_init(&w, &gate);
    inline_job_t job = { .stream = s, .where = &w, .status = HAL_ERROR_INTERNAL };
    pthread_t producer;
    CTEST_EXPECT(pthread_create(&producer, NULL, enqueue_inline_thread, &job) == 0);
    CTEST_EXPECT(th_wait_until(gate_entered, &gate, 5000));
    /* While the inline task runs, what others enqueue waits behind it. */
    atomic_int after;
    atomic_init(&after, 0);
    atomic_int *ap = &after;
    EXPECT_OK(hq_stream_enqueue(s, th_count_work, &ap, sizeof(ap), 0));
    EXPECT_OK(hq_event_record(ev, s));
    where_t second;
    where_init(&second, NULL);
    EXPECT_OK(enqueue_inline(s, &second)); /* not idle: queued, not run here */
    th_sleep_ms(20);
    CTEST_EXPECT(atomic_load(&after) == 0);
    CTEST_EXPECT(atomic_load(&second.ran) == 0);
    EXPECT_STATUS(hq_event_query(ev), HAL_NOT_READY);
    EXPECT_STATUS(hq_stream_query(s), HAL_NOT_READY);
    th_gate_open(&gate);
    pthread_join(producer, NULL);
    EXPECT_STATUS(job.status, HAL_OK);
    CTEST_EXPECT(atomic_load(&w.on_caller) == 1); /* ran on the producer's thread */
    EXPECT_OK(hq_stream_synchronize(s));
    CTEST_EXPECT(atomic_load(&after) == 1);
    CTEST_EXPECT(atomic_load(&second.ran) == 1);
    CTEST_EXPECT(atomic_load(&second.on_caller) == 0);
    EXPECT_OK(hq_event_query(ev));
    hq_event_destroy(ev);
    EXPECT_OK(hq_stream_destroy(s));
    th_gate_destroy(&gate);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

/* A work task that blocks on a gate while holding a slot. */
static hal_status_t gate_work(hq_stream_t *stream, void *payload, hal_status_t status)
{
    return th_gate_fn(*(th_gate_t **)payload, status);
}

CTEST(HqInline, NeedsAFreeSlot)
{
    hq_device_t dev;
    open_device(&dev, 1);
    void *busy = NULL, *s = NULL;
    EXPECT_OK(hq_stream_create(&dev, 0, &busy));
    EXPECT_OK(hq_stream_create(&dev, 0, &s));
    th_gate_t gate;
    th_gate_init(&gate);
    th_gate_t *gp = &gate;
    EXPECT_OK(hq_stream_enqueue(busy, gate_work, &gp, sizeof(gp), 0));
    CTEST_EXPECT(th_wait_until(gate_entered, &gate, 5000));
    where_t w;
    where_init(&w, NULL);
    EXPECT_OK(enqueue_inline(s, &w)); /* the device's one slot is held: queued */
    th_sleep_ms(20);
    CTEST_EXPECT(atomic_load(&w.ran) == 0);
    th_gate_open(&gate);
    EXPECT_OK(hq_stream_synchronize(s));
    CTEST_EXPECT(atomic_load(&w.ran) == 1);
    CTEST_EXPECT(atomic_load(&w.on_caller) == 0);
    EXPECT_OK(hq_stream_destroy(busy));
    EXPECT_OK(hq_stream_destroy(s));
    th_gate_destroy(&gate);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

static hal_status_t fail_work(hq_stream_t *stream, void *payload, hal_status_t status)
{
    hq_stream_task_error(stream, "copy %d failed inline", *(int *)payload);
    return HAL_ERROR_DEVICE_LOST;
}

CTEST(HqInline, AFailureLatchesWithItsMessage)
{
    hq_device_t dev;
    open_device(&dev, 2);
    void *s = NULL, *ev = NULL;
    EXPECT_OK(hq_stream_create(&dev, 0, &s));
    EXPECT_OK(hq_event_create(&dev, 0, &ev));
    int seven = 7;
    EXPECT_OK(hq_stream_enqueue(s, fail_work, &seven, sizeof(seven), HQ_TASK_INLINE));
    th_clear_error();
    EXPECT_STATUS(hq_stream_query(s), HAL_ERROR_DEVICE_LOST);
    EXPECT_MESSAGE("the stream failed earlier: copy 7 failed inline");
    /* Later work is refused, as on a stream whose worker latched the error. */
    where_t w;
    where_init(&w, NULL);
    EXPECT_STATUS(enqueue_inline(s, &w), HAL_ERROR_DEVICE_LOST);
    CTEST_EXPECT(atomic_load(&w.ran) == 0);
    /* A record on the idle, failed stream completes at once and carries the error. */
    EXPECT_OK(hq_event_record(ev, s));
    EXPECT_STATUS(hq_event_query(ev), HAL_ERROR_DEVICE_LOST);
    hq_event_destroy(ev);
    EXPECT_STATUS(hq_stream_destroy(s), HAL_ERROR_DEVICE_LOST);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

/* A queued task on stream A that runs a failing inline task on stream B, then fails itself:
 * each stream keeps its own message. */
typedef struct nested {
    void *inner_stream;
    hal_status_t inner_status;
} nested_t;

static hal_status_t outer_work(hq_stream_t *stream, void *payload, hal_status_t status)
{
    nested_t *n = *(nested_t **)payload;
    int three = 3;
    n->inner_status =
        hq_stream_enqueue(n->inner_stream, fail_work, &three, sizeof(three), HQ_TASK_INLINE);
    hq_task_error("the outer task failed");
    return HAL_ERROR_INVALID_ARGUMENT;
}

CTEST(HqInline, AWorkerRunningInlineWorkKeepsItsOwnMessage)
{
    hq_device_t dev;
    open_device(&dev, 2);
    void *a = NULL, *b = NULL;
    EXPECT_OK(hq_stream_create(&dev, 0, &a));
    EXPECT_OK(hq_stream_create(&dev, 0, &b));
    nested_t n = { .inner_stream = b, .inner_status = HAL_ERROR_INTERNAL };
    nested_t *np = &n;
    EXPECT_OK(hq_stream_enqueue(a, outer_work, &np, sizeof(np), 0));
    th_clear_error();
    EXPECT_STATUS(hq_stream_synchronize(a), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("the stream failed earlier: the outer task failed");
    EXPECT_STATUS(n.inner_status, HAL_OK);
    th_clear_error();
    EXPECT_STATUS(hq_stream_query(b), HAL_ERROR_DEVICE_LOST);
    EXPECT_MESSAGE("the stream failed earlier: copy 3 failed inline");
    EXPECT_STATUS(hq_stream_destroy(a), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(hq_stream_destroy(b), HAL_ERROR_DEVICE_LOST);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

CTEST(HqInline, ARecordOnAnIdleStreamCompletesAtOnce)
{
    hq_device_t dev;
    open_device(&dev, 2);
    void *s = NULL, *start = NULL, *end = NULL;
    EXPECT_OK(hq_stream_create(&dev, 0, &s));
    EXPECT_OK(hq_event_create(&dev, HAL_EVENT_FLAG_TIMING, &start));
    EXPECT_OK(hq_event_create(&dev, HAL_EVENT_FLAG_TIMING, &end));
    EXPECT_OK(hq_event_record(start, s));
    EXPECT_OK(hq_event_query(start)); /* no synchronize needed */
    th_sleep_ms(2);
    EXPECT_OK(hq_event_record(end, s));
    EXPECT_OK(hq_event_query(end));
    float ms = -1.0f;
    EXPECT_OK(hq_event_elapsed_ms(start, end, &ms));
    CTEST_EXPECT(ms >= 1.0f);
    /* Recorded again behind pending work, the new version waits for it. */
    th_gate_t gate;
    th_gate_init(&gate);
    EXPECT_OK(hq_stream_add_callback(s, th_gate_cb, &gate));
    EXPECT_OK(hq_event_record(end, s));
    EXPECT_STATUS(hq_event_query(end), HAL_NOT_READY);
    th_gate_open(&gate);
    EXPECT_OK(hq_event_synchronize(end));
    hq_event_destroy(start);
    hq_event_destroy(end);
    EXPECT_OK(hq_stream_destroy(s));
    th_gate_destroy(&gate);
    hq_device_fini(&dev);
    return CTEST_PASS;
}
