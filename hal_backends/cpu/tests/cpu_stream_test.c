/* SPDX-License-Identifier: Apache-2.0 */
/* Streams of the cpu backend: FIFO order, query/synchronize, priorities, destroy with pending
 * work, device synchronisation, generic tasks and latched errors. */
#include <stdlib.h>

#include "hal_backends/cpu/tests/cpu_test_util.h"

typedef struct order_check {
    int next;
    int bad;
} order_check_t;

typedef struct order_item {
    order_check_t *check;
    int seq;
} order_item_t;

static void order_cb(hal_status_t status, void *arg)
{
    order_item_t *item = arg;
    if (item->seq != item->check->next || status != HAL_OK)
        item->check->bad++;
    item->check->next++;
}

static hal_status_t order_fn(void *arg, hal_status_t status)
{
    order_cb(status, arg);
    return HAL_OK;
}

CTEST(CpuStream, FifoOrder)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", NULL, "4", NULL), HAL_OK);
    enum { N = 1000 }; /* several node chunks */
    static order_item_t items[N];
    order_check_t check = { 0, 0 };
    void *s = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &s), HAL_OK);
    for (int i = 0; i < N; i++) {
        items[i] = (order_item_t){ &check, i };
        if (i % 3 == 0)
            EXPECT_STATUS(t_enqueue_fn(s, order_fn, &items[i], 0), HAL_OK);
        else
            EXPECT_STATUS(fx.ops->stream_add_callback(s, order_cb, &items[i]), HAL_OK);
    }
    EXPECT_STATUS(fx.ops->stream_synchronize(s), HAL_OK);
    CTEST_EXPECT(check.next == N);
    CTEST_EXPECT(check.bad == 0);

    /* Data tasks keep their order too: each memset overwrites the previous one. */
    unsigned char *buf = malloc(1 << 20);
    hal_backend_ptr_t p = t_ptr(buf, HAL_MEM_KIND_UNREGISTERED);
    for (int i = 0; i < 50; i++)
        EXPECT_STATUS(fx.ops->memset_async(s, &p, i, 1 << 20), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_synchronize(s), HAL_OK);
    CTEST_EXPECT(buf[0] == 49 && buf[(1 << 20) - 1] == 49);
    free(buf);

    EXPECT_STATUS(fx.ops->stream_destroy(s), HAL_OK);
    t_close(&fx);
    return CTEST_PASS;
}

CTEST(CpuStream, QueryAndSynchronize)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", NULL, NULL, NULL), HAL_OK);
    void *s = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &s), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_query(s), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_synchronize(s), HAL_OK);

    th_gate_t gate;
    th_gate_init(&gate);
    EXPECT_STATUS(fx.ops->stream_add_callback(s, th_gate_cb, &gate), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_query(s), HAL_NOT_READY);
    CTEST_EXPECT(th_wait_until(th_gate_entered, &gate, 10000));
    EXPECT_STATUS(fx.ops->stream_query(s), HAL_NOT_READY);
    th_gate_open(&gate);
    EXPECT_STATUS(fx.ops->stream_synchronize(s), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_query(s), HAL_OK);

    uintptr_t native = 0;
    EXPECT_STATUS(fx.ops->stream_get_native_handle(s, &native), HAL_OK);
    CTEST_EXPECT(native != 0);
    EXPECT_STATUS(fx.ops->stream_destroy(s), HAL_OK);
    th_gate_destroy(&gate);
    t_close(&fx);
    return CTEST_PASS;
}

typedef struct waiting_probe {
    cpu_device_t *device;
    uint32_t count;
} waiting_probe_t;

static bool sched_has_waiters(void *arg)
{
    waiting_probe_t *p = arg;
    return hq_sched_waiting(&p->device->hq.sched) >= p->count;
}

/* With one execution slot held by a gate, queued work must be granted by priority, FIFO within
 * a priority, whatever order the streams asked in. */
CTEST(CpuStream, PriorityOrder)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", NULL, "1", NULL), HAL_OK);
    void *gs = NULL, *low1 = NULL, *low2 = NULL, *mid = NULL, *high = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &gs), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &low1), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &low2), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], -1, &mid), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], -2, &high), HAL_OK);

    th_gate_t gate;
    th_gate_init(&gate);
    t_log_t log;
    t_log_init(&log);
    t_log_entry_t ea = { &log, 'a' }, eb = { &log, 'b' }, em = { &log, 'M' }, eh = { &log, 'H' };
    waiting_probe_t probe = { fx.dev[0], 0 };

    EXPECT_STATUS(fx.ops->stream_add_callback(gs, th_gate_cb, &gate), HAL_OK);
    CTEST_EXPECT(th_wait_until(th_gate_entered, &gate, 10000));
    /* Low priority first, then higher ones; wait until each is queued for the slot so the
     * arrival order is known. */
    void *streams[] = { low1, low2, mid, high };
    t_log_entry_t *entries[] = { &ea, &eb, &em, &eh };
    for (int i = 0; i < 4; i++) {
        EXPECT_STATUS(fx.ops->stream_add_callback(streams[i], t_log_cb, entries[i]), HAL_OK);
        probe.count = (uint32_t)i + 1;
        CTEST_EXPECT(th_wait_until(sched_has_waiters, &probe, 10000));
    }
    CTEST_EXPECT(log.len == 0);
    th_gate_open(&gate);
    EXPECT_STATUS(fx.ops->device_synchronize(fx.dev[0]), HAL_OK);
    if (strcmp(log.text, "HMab") != 0) {
        fprintf(stderr, "execution order \"%s\", expected \"HMab\"\n", log.text);
        ctest_record_failure();
    }
    CTEST_EXPECT(hq_sched_waiting(&((cpu_device_t *)fx.dev[0])->hq.sched) == 0);

    EXPECT_STATUS(fx.ops->stream_destroy(gs), HAL_OK);
    for (int i = 0; i < 4; i++)
        EXPECT_STATUS(fx.ops->stream_destroy(streams[i]), HAL_OK);
    th_gate_destroy(&gate);
    t_close(&fx);
    return CTEST_PASS;
}

/* Tasks that do not hold a slot (event waits, HQ_TASK_NO_SLOT) run while another stream
 * occupies the device's only slot. */
static hal_status_t count_fn(void *arg, hal_status_t status)
{
    atomic_fetch_add((atomic_int *)arg, 1);
    return HAL_OK;
}

static bool count_is_one(void *arg)
{
    return atomic_load((atomic_int *)arg) == 1;
}

CTEST(CpuStream, NoSlotTasksBypassTheScheduler)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", NULL, "1", NULL), HAL_OK);
    void *a = NULL, *b = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &a), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &b), HAL_OK);
    th_gate_t gate;
    th_gate_init(&gate);
    atomic_int count;
    atomic_init(&count, 0);
    EXPECT_STATUS(fx.ops->stream_add_callback(a, th_gate_cb, &gate), HAL_OK);
    CTEST_EXPECT(th_wait_until(th_gate_entered, &gate, 10000));
    EXPECT_STATUS(t_enqueue_fn(b, count_fn, &count, HQ_TASK_NO_SLOT), HAL_OK);
    CTEST_EXPECT(th_wait_until(count_is_one, &count, 10000));
    EXPECT_STATUS(t_enqueue_fn(b, count_fn, &count, 0), HAL_OK);
    th_sleep_ms(20);
    CTEST_EXPECT(atomic_load(&count) == 1); /* needs the slot the gate holds */
    th_gate_open(&gate);
    EXPECT_STATUS(fx.ops->stream_synchronize(b), HAL_OK);
    CTEST_EXPECT(atomic_load(&count) == 2);
    EXPECT_STATUS(fx.ops->stream_destroy(a), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_destroy(b), HAL_OK);
    th_gate_destroy(&gate);
    t_close(&fx);
    return CTEST_PASS;
}

typedef struct delayed_open {
    th_gate_t *gate;
    int ms;
} delayed_open_t;

static void *open_later(void *arg)
{
    delayed_open_t *d = arg;
    th_sleep_ms(d->ms);
    th_gate_open(d->gate);
    return NULL;
}

static void count_cb(hal_status_t status, void *arg)
{
    atomic_fetch_add((atomic_int *)arg, 1);
}

CTEST(CpuStream, DestroyDrainsPendingWork)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", NULL, NULL, NULL), HAL_OK);
    void *s = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &s), HAL_OK);
    th_gate_t gate;
    th_gate_init(&gate);
    atomic_int count;
    atomic_init(&count, 0);
    enum { N = 300, SIZE = 4096 };
    unsigned char *buf = calloc(N, SIZE);
    EXPECT_STATUS(fx.ops->stream_add_callback(s, th_gate_cb, &gate), HAL_OK);
    for (int i = 0; i < N; i++) {
        hal_backend_ptr_t p = t_ptr(buf + (size_t)i * SIZE, HAL_MEM_KIND_UNREGISTERED);
        EXPECT_STATUS(fx.ops->memset_async(s, &p, 0x3c, SIZE), HAL_OK);
        EXPECT_STATUS(fx.ops->stream_add_callback(s, count_cb, &count), HAL_OK);
    }
    pthread_t opener;
    delayed_open_t d = { &gate, 30 };
    pthread_create(&opener, NULL, open_later, &d);
    EXPECT_STATUS(fx.ops->stream_destroy(s), HAL_OK);
    CTEST_EXPECT(atomic_load(&count) == N);
    size_t set = 0;
    for (size_t i = 0; i < (size_t)N * SIZE; i++)
        set += buf[i] == 0x3c;
    CTEST_EXPECT(set == (size_t)N * SIZE);
    pthread_join(opener, NULL);
    free(buf);
    th_gate_destroy(&gate);
    t_close(&fx);
    return CTEST_PASS;
}

typedef struct device_sync_call {
    t_fixture_t *fx;
    void *device;
    atomic_int done;
    hal_status_t status;
} device_sync_call_t;

static void *device_sync_thread(void *arg)
{
    device_sync_call_t *c = arg;
    c->status = c->fx->ops->device_synchronize(c->device);
    atomic_store(&c->done, 1);
    return NULL;
}

CTEST(CpuStream, DeviceSynchronizeWaitsForEveryStream)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "2", NULL, NULL, NULL), HAL_OK);
    enum { NS = 20 }; /* more than device_synchronize keeps inline */
    void *s[NS];
    for (int i = 0; i < NS; i++)
        EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], -(i % 3), &s[i]), HAL_OK);
    void *other = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[1], 0, &other), HAL_OK);
    th_gate_t gate, other_gate;
    th_gate_init(&gate);
    th_gate_init(&other_gate);
    atomic_int count;
    atomic_init(&count, 0);
    for (int i = 0; i < NS; i++)
        EXPECT_STATUS(fx.ops->stream_add_callback(s[i], count_cb, &count), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_add_callback(s[NS - 1], th_gate_cb, &gate), HAL_OK);
    /* Work on another device does not hold device 0 up. */
    EXPECT_STATUS(fx.ops->stream_add_callback(other, th_gate_cb, &other_gate), HAL_OK);

    device_sync_call_t call = { &fx, fx.dev[0], 0, HAL_ERROR_INTERNAL };
    atomic_init(&call.done, 0);
    pthread_t th;
    pthread_create(&th, NULL, device_sync_thread, &call);
    th_sleep_ms(30);
    CTEST_EXPECT(atomic_load(&call.done) == 0);
    th_gate_open(&gate);
    pthread_join(th, NULL);
    CTEST_EXPECT(call.status == HAL_OK);
    CTEST_EXPECT(atomic_load(&count) == NS);
    EXPECT_STATUS(fx.ops->stream_query(other), HAL_NOT_READY);
    th_gate_open(&other_gate);

    /* The first latched error of the device's streams is reported. */
    EXPECT_STATUS(hq_stream_inject_error(s[5], HAL_ERROR_DEVICE_LOST, "lost in test"), HAL_OK);
    t_clear_error();
    EXPECT_STATUS(fx.ops->device_synchronize(fx.dev[0]), HAL_ERROR_DEVICE_LOST);
    EXPECT_MESSAGE("lost in test");
    EXPECT_STATUS(fx.ops->device_synchronize(fx.dev[1]), HAL_OK);

    for (int i = 0; i < NS; i++)
        EXPECT_STATUS(fx.ops->stream_destroy(s[i]), i == 5 ? HAL_ERROR_DEVICE_LOST : HAL_OK);
    EXPECT_STATUS(fx.ops->stream_destroy(other), HAL_OK);
    EXPECT_STATUS(fx.ops->device_synchronize(fx.dev[0]), HAL_OK); /* no streams left */
    th_gate_destroy(&gate);
    th_gate_destroy(&other_gate);
    t_close(&fx);
    return CTEST_PASS;
}

typedef struct status_seen {
    atomic_int calls;
    atomic_int status;
} status_seen_t;

static void status_cb(hal_status_t status, void *arg)
{
    status_seen_t *seen = arg;
    atomic_store(&seen->status, status);
    atomic_fetch_add(&seen->calls, 1);
}

static hal_status_t status_fn(void *arg, hal_status_t status)
{
    status_cb(status, arg);
    return HAL_OK;
}

static hal_status_t failing_fn(void *arg, hal_status_t status)
{
    hq_task_error("collective step %d failed", *(int *)arg);
    return HAL_ERROR_REMOTE;
}

static hal_status_t silent_failing_fn(void *arg, hal_status_t status)
{
    return HAL_ERROR_TIMEOUT;
}

CTEST(CpuStream, ErrorsLatch)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", NULL, NULL, NULL), HAL_OK);
    void *s = NULL, *healthy = NULL, *ev = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &s), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &healthy), HAL_OK);
    EXPECT_STATUS(fx.ops->event_create(fx.dev[0], HAL_EVENT_FLAG_NONE, &ev), HAL_OK);

    unsigned char buf[64], src[64];
    memset(buf, 1, sizeof(buf));
    memset(src, 2, sizeof(src));
    hal_backend_ptr_t pb = t_ptr(buf, HAL_MEM_KIND_UNREGISTERED);
    hal_backend_ptr_t ps = t_ptr(src, HAL_MEM_KIND_UNREGISTERED);
    status_seen_t cb_seen, fn_seen, skipped;
    atomic_init(&cb_seen.calls, 0);
    atomic_init(&cb_seen.status, HAL_OK);
    atomic_init(&fn_seen.calls, 0);
    atomic_init(&fn_seen.status, HAL_OK);
    atomic_init(&skipped.calls, 0);
    atomic_init(&skipped.status, HAL_OK);

    /* Everything below is queued before the failure is reached. */
    th_gate_t gate;
    th_gate_init(&gate);
    EXPECT_STATUS(fx.ops->stream_add_callback(s, th_gate_cb, &gate), HAL_OK);
    EXPECT_STATUS(hq_stream_inject_error(s, HAL_ERROR_DEVICE_LOST, "injected device loss"), HAL_OK);
    EXPECT_STATUS(fx.ops->memcpy_async(s, &pb, &ps, sizeof(buf)), HAL_OK);
    EXPECT_STATUS(fx.ops->memset_async(s, &pb, 3, sizeof(buf)), HAL_OK);
    EXPECT_STATUS(t_enqueue_fn(s, status_fn, &skipped, 0), HAL_OK);
    EXPECT_STATUS(fx.ops->event_record(ev, s), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_add_callback(s, status_cb, &cb_seen), HAL_OK);
    EXPECT_STATUS(t_enqueue_fn(s, status_fn, &fn_seen, HQ_TASK_RUN_ON_ERROR), HAL_OK);
    /* A later failure does not replace the first. */
    EXPECT_STATUS(hq_stream_inject_error(s, HAL_ERROR_ABORTED, "second failure"), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_query(s), HAL_NOT_READY);
    th_gate_open(&gate);

    t_clear_error();
    EXPECT_STATUS(fx.ops->stream_synchronize(s), HAL_ERROR_DEVICE_LOST);
    EXPECT_MESSAGE("injected device loss");
    CTEST_EXPECT(atomic_load(&gate.status) == HAL_OK); /* the gate ran before the failure */
    CTEST_EXPECT(buf[0] == 1 && buf[63] == 1);         /* data tasks were skipped */
    CTEST_EXPECT(atomic_load(&skipped.calls) == 0);
    CTEST_EXPECT(atomic_load(&cb_seen.calls) == 1);
    CTEST_EXPECT(atomic_load(&cb_seen.status) == HAL_ERROR_DEVICE_LOST);
    CTEST_EXPECT(atomic_load(&fn_seen.calls) == 1);
    CTEST_EXPECT(atomic_load(&fn_seen.status) == HAL_ERROR_DEVICE_LOST);
    EXPECT_STATUS(fx.ops->event_query(ev), HAL_ERROR_DEVICE_LOST);
    EXPECT_STATUS(fx.ops->event_synchronize(ev), HAL_ERROR_DEVICE_LOST);
    EXPECT_STATUS(fx.ops->stream_query(s), HAL_ERROR_DEVICE_LOST);

    /* Sticky: new data work is refused, callbacks still run and are told. */
    EXPECT_STATUS(fx.ops->memcpy_async(s, &pb, &ps, sizeof(buf)), HAL_ERROR_DEVICE_LOST);
    EXPECT_STATUS(fx.ops->memset_async(s, &pb, 0, sizeof(buf)), HAL_ERROR_DEVICE_LOST);
    EXPECT_STATUS(t_enqueue_fn(s, status_fn, &skipped, 0), HAL_ERROR_DEVICE_LOST);
    EXPECT_STATUS(fx.ops->stream_add_callback(s, status_cb, &cb_seen), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_synchronize(s), HAL_ERROR_DEVICE_LOST);
    CTEST_EXPECT(atomic_load(&cb_seen.calls) == 2);

    /* A stream waiting on the failed stream's event is not failed by it. */
    EXPECT_STATUS(fx.ops->stream_wait_event(healthy, ev), HAL_OK);
    EXPECT_STATUS(fx.ops->memcpy_async(healthy, &pb, &ps, sizeof(buf)), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_synchronize(healthy), HAL_OK);
    CTEST_EXPECT(buf[0] == 2);

    EXPECT_STATUS(fx.ops->device_synchronize(fx.dev[0]), HAL_ERROR_DEVICE_LOST);
    t_clear_error();
    EXPECT_STATUS(fx.ops->stream_destroy(s), HAL_ERROR_DEVICE_LOST);
    EXPECT_MESSAGE("injected device loss");
    EXPECT_STATUS(fx.ops->stream_destroy(healthy), HAL_OK);
    fx.ops->event_destroy(ev);
    th_gate_destroy(&gate);
    t_close(&fx);
    return CTEST_PASS;
}

CTEST(CpuStream, TaskFunctionErrorsLatchWithTheirMessage)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", NULL, NULL, NULL), HAL_OK);
    void *s = NULL, *s2 = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &s), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &s2), HAL_OK);
    int step = 7;
    EXPECT_STATUS(t_enqueue_fn(s, failing_fn, &step, 0), HAL_OK);
    t_clear_error();
    EXPECT_STATUS(fx.ops->stream_synchronize(s), HAL_ERROR_REMOTE);
    EXPECT_MESSAGE("collective step 7 failed");
    EXPECT_STATUS(t_enqueue_fn(s2, silent_failing_fn, NULL, 0), HAL_OK);
    t_clear_error();
    EXPECT_STATUS(fx.ops->stream_synchronize(s2), HAL_ERROR_TIMEOUT);
    EXPECT_MESSAGE("HAL_ERROR_TIMEOUT");
    /* Outside a task, hq_task_error does nothing. */
    hq_task_error("ignored %d", 1);
    EXPECT_STATUS(fx.ops->stream_destroy(s), HAL_ERROR_REMOTE);
    EXPECT_STATUS(fx.ops->stream_destroy(s2), HAL_ERROR_TIMEOUT);
    t_close(&fx);
    return CTEST_PASS;
}

/* Many producers and streams at once, with cross-stream event dependencies: a workout for the
 * thread sanitizer more than a functional check. */
typedef struct stress_arg {
    t_fixture_t *fx;
    int id;
    void *ev_in, *ev_out; /* wait on ev_in, record ev_out */
    int failures;
} stress_arg_t;

static void *stress_thread(void *arg_)
{
    stress_arg_t *a = arg_;
    const hal_backend_ops_t *ops = a->fx->ops;
    void *s = NULL;
    if (ops->stream_create(a->fx->dev[a->id % 2], -(a->id % 3), &s) != HAL_OK) {
        a->failures++;
        return NULL;
    }
    enum { SIZE = 64 * 1024 };
    unsigned char *src = malloc(SIZE), *dst = malloc(SIZE);
    memset(src, a->id, SIZE);
    hal_backend_ptr_t ps = t_ptr(src, HAL_MEM_KIND_UNREGISTERED);
    hal_backend_ptr_t pd = t_ptr(dst, HAL_MEM_KIND_UNREGISTERED);
    atomic_int count;
    atomic_init(&count, 0);
    for (int i = 0; i < 300; i++) {
        if (ops->stream_wait_event(s, a->ev_in) != HAL_OK ||
            ops->memcpy_async(s, &pd, &ps, SIZE) != HAL_OK ||
            ops->stream_add_callback(s, count_cb, &count) != HAL_OK)
            a->failures++;
        if (i % 10 == 0 && ops->event_record(a->ev_out, s) != HAL_OK)
            a->failures++;
        if (i % 50 == 0 && ops->stream_synchronize(s) != HAL_OK)
            a->failures++;
        if (i % 7 == 0)
            (void)ops->stream_query(s);
    }
    if (ops->stream_destroy(s) != HAL_OK)
        a->failures++;
    if (atomic_load(&count) != 300 || memcmp(src, dst, SIZE) != 0)
        a->failures++;
    free(src);
    free(dst);
    return NULL;
}

typedef struct query_arg {
    t_fixture_t *fx;
    void **events;
    int n;
    atomic_int stop;
} query_arg_t;

static void *query_thread(void *arg_)
{
    query_arg_t *q = arg_;
    while (!atomic_load(&q->stop)) {
        for (int i = 0; i < q->n; i++)
            (void)q->fx->ops->event_query(q->events[i]);
        uint64_t free_bytes;
        q->fx->ops->device_get_free_memory(q->fx->dev[0], &free_bytes);
        (void)q->fx->ops->device_synchronize(q->fx->dev[1]);
    }
    return NULL;
}

CTEST(CpuStream, ConcurrentProducersAndEvents)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "2", NULL, "2", NULL), HAL_OK);
    enum { N = 4 };
    void *events[N];
    for (int i = 0; i < N; i++)
        EXPECT_STATUS(fx.ops->event_create(fx.dev[i % 2], 0, &events[i]), HAL_OK);
    stress_arg_t args[N];
    pthread_t th[N], qt;
    query_arg_t q = { &fx, events, N, 0 };
    atomic_init(&q.stop, 0);
    pthread_create(&qt, NULL, query_thread, &q);
    for (int i = 0; i < N; i++) {
        /* Each thread records its own event (on its device) and waits on its neighbour's. */
        args[i] = (stress_arg_t){ &fx, i, events[(i + 1) % N], events[i], 0 };
        pthread_create(&th[i], NULL, stress_thread, &args[i]);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        CTEST_EXPECT(args[i].failures == 0);
    }
    atomic_store(&q.stop, 1);
    pthread_join(qt, NULL);
    for (int i = 0; i < N; i++) {
        EXPECT_STATUS(fx.ops->event_query(events[i]), HAL_OK);
        fx.ops->event_destroy(events[i]);
    }
    t_close(&fx);
    return CTEST_PASS;
}
