/* SPDX-License-Identifier: Apache-2.0 */
/* Streams of the host-queue engine: FIFO order across every task kind, payload copies and the
 * extension area, query and synchronize, execution slots (limits, priorities, callbacks with and
 * without a slot), destroy with pending work, device_synchronize (every stream, first error,
 * concurrent create and destroy), and worker thread names. */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>

#include "hal_backends/common/tests/hq_test_util.h"

/* ---- order --------------------------------------------------------------------------------- */

typedef struct order {
    atomic_int next;
    atomic_int bad;
} order_t;

typedef struct order_item {
    order_t *order;
    int seq;
} order_item_t;

static void order_step(order_item_t *item, hal_status_t status)
{
    if (atomic_fetch_add(&item->order->next, 1) != item->seq || status != HAL_OK)
        atomic_fetch_add(&item->order->bad, 1);
}

static void order_cb(hal_status_t status, void *arg)
{
    order_step(arg, status);
}

static hal_status_t order_fn(void *arg, hal_status_t status)
{
    order_step(arg, status);
    return HAL_OK;
}

/* Work payload: the item by value, to show the payload is the task's own copy. */
static hal_status_t order_work(hq_stream_t *stream, void *payload, hal_status_t status)
{
    order_item_t item = *(order_item_t *)payload;
    order_step(&item, status);
    return HAL_OK;
}

CTEST(HqStream, FifoOrderOfEveryTaskKind)
{
    hq_device_t dev;
    hq_device_config_t cfg = th_config(0, 4, 20);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    void *s = NULL, *ev = NULL;
    EXPECT_STATUS(hq_stream_create(&dev, 0, &s), HAL_OK);
    EXPECT_STATUS(hq_event_create(&dev, 0, &ev), HAL_OK);
    enum { N = 1000 }; /* many node chunks */
    static order_item_t items[N];
    order_t order;
    atomic_init(&order.next, 0);
    atomic_init(&order.bad, 0);
    for (int i = 0; i < N; i++) {
        items[i] = (order_item_t){ &order, i };
        switch (i % 3) {
        case 0:
            EXPECT_STATUS(hq_stream_add_callback(s, order_cb, &items[i]), HAL_OK);
            break;
        case 1:
            EXPECT_STATUS(hq_stream_launch_host_fn(s, order_fn, &items[i]), HAL_OK);
            break;
        default:
            EXPECT_STATUS(hq_stream_enqueue(s, order_work, &items[i], sizeof(items[i]), 0), HAL_OK);
            break;
        }
        if (i % 50 == 0) {
            EXPECT_STATUS(hq_event_record(ev, s), HAL_OK);
            EXPECT_STATUS(hq_stream_wait_event(s, ev), HAL_OK);
        }
    }
    EXPECT_STATUS(hq_stream_synchronize(s), HAL_OK);
    CTEST_EXPECT(atomic_load(&order.next) == N);
    CTEST_EXPECT(atomic_load(&order.bad) == 0);
    EXPECT_STATUS(hq_stream_query(s), HAL_OK);
    EXPECT_STATUS(hq_event_query(ev), HAL_OK);
    hq_event_destroy(ev);
    EXPECT_STATUS(hq_stream_destroy(s), HAL_OK);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

/* ---- payloads and the extension area ------------------------------------------------------- */

typedef struct big_payload {
    unsigned char bytes[HQ_PAYLOAD_MAX];
} big_payload_t;

static _Atomic(uintptr_t) seen_payload;
static atomic_int payload_ok;

static hal_status_t check_big(hq_stream_t *stream, void *payload, hal_status_t status)
{
    const big_payload_t *p = payload;
    int ok = (uintptr_t)payload % _Alignof(max_align_t) == 0;
    for (int i = 0; i < HQ_PAYLOAD_MAX; i++)
        ok = ok && p->bytes[i] == (unsigned char)(i + 1);
    atomic_store(&seen_payload, (uintptr_t)payload);
    atomic_store(&payload_ok, ok);
    return HAL_OK;
}

static hal_status_t no_payload(hq_stream_t *stream, void *payload, hal_status_t status)
{
    atomic_store(&payload_ok, payload != NULL);
    return HAL_OK;
}

CTEST(HqStream, PayloadIsCopiedAtEnqueue)
{
    hq_device_t dev;
    hq_device_config_t cfg = th_config(0, 0, 20);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    void *s = NULL;
    EXPECT_STATUS(hq_stream_create(&dev, 0, &s), HAL_OK);
    th_gate_t gate;
    th_gate_init(&gate);
    big_payload_t p;
    for (int i = 0; i < HQ_PAYLOAD_MAX; i++)
        p.bytes[i] = (unsigned char)(i + 1);
    EXPECT_STATUS(hq_stream_add_callback(s, th_gate_cb, &gate), HAL_OK);
    EXPECT_STATUS(hq_stream_enqueue(s, check_big, &p, sizeof(p), 0), HAL_OK);
    memset(&p, 0, sizeof(p)); /* the queued task has its own copy */
    th_gate_open(&gate);
    EXPECT_STATUS(hq_stream_synchronize(s), HAL_OK);
    CTEST_EXPECT(atomic_load(&payload_ok) == 1);
    CTEST_EXPECT(atomic_load(&seen_payload) != (uintptr_t)&p);
    EXPECT_STATUS(hq_stream_enqueue(s, no_payload, NULL, 0, 0), HAL_OK);
    EXPECT_STATUS(hq_stream_synchronize(s), HAL_OK);
    CTEST_EXPECT(atomic_load(&payload_ok) == 1);

    /* Too large: refused without side effects. */
    unsigned char too_big[HQ_PAYLOAD_MAX + 1] = { 0 };
    th_clear_error();
    EXPECT_STATUS(hq_stream_enqueue(s, no_payload, too_big, sizeof(too_big), 0),
                  HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("exceeds");
    EXPECT_STATUS(hq_stream_query(s), HAL_OK);
    EXPECT_STATUS(hq_stream_destroy(s), HAL_OK);
    th_gate_destroy(&gate);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

typedef struct ext_state {
    uint64_t magic;
    int *freed; /* counts teardown calls */
    double aligned;
} ext_state_t;

static hal_status_t use_ext(hq_stream_t *stream, void *payload, hal_status_t status)
{
    ext_state_t *ext = hq_stream_ext(stream);
    if (ext->magic != 0)
        return HAL_ERROR_INTERNAL; /* not zeroed */
    ext->magic = 0x5eed;
    ext->freed = *(int **)payload;
    return HAL_OK;
}

static void ext_fini(hq_stream_t *stream, void *ext_)
{
    ext_state_t *ext = ext_;
    if (ext->magic == 0x5eed && ext == hq_stream_ext(stream))
        (*ext->freed)++;
}

CTEST(HqStream, ExtensionAreaAndTeardownHook)
{
    hq_device_t dev, plain;
    hq_device_config_t cfg = th_config(0, 0, 0);
    cfg.stream_ext_size = sizeof(ext_state_t);
    cfg.stream_ext_fini = ext_fini;
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    hq_device_config_t none = th_config(1, 0, 0);
    EXPECT_STATUS(hq_device_init(&plain, &none), HAL_OK);
    int freed = 0;
    int *freed_ptr = &freed;
    void *s = NULL, *t = NULL;
    EXPECT_STATUS(hq_stream_create(&dev, 0, &s), HAL_OK);
    CTEST_EXPECT(hq_stream_device(s) == &dev);
    void *ext = hq_stream_ext(s);
    CTEST_EXPECT(ext != NULL && (uintptr_t)ext % _Alignof(max_align_t) == 0);
    EXPECT_STATUS(hq_stream_enqueue(s, use_ext, &freed_ptr, sizeof(freed_ptr), 0), HAL_OK);
    EXPECT_STATUS(hq_stream_synchronize(s), HAL_OK);
    CTEST_EXPECT(freed == 0);
    EXPECT_STATUS(hq_stream_destroy(s), HAL_OK);
    CTEST_EXPECT(freed == 1); /* once, when the stream was freed */
    EXPECT_STATUS(hq_stream_create(&plain, 0, &t), HAL_OK);
    CTEST_EXPECT(hq_stream_ext(t) == NULL);
    EXPECT_STATUS(hq_stream_destroy(t), HAL_OK);
    hq_device_fini(&dev);
    hq_device_fini(&plain);
    return CTEST_PASS;
}

/* ---- query, synchronize, destroy ----------------------------------------------------------- */

static void *open_later(void *gate)
{
    th_sleep_ms(20);
    th_gate_open(gate);
    return NULL;
}

CTEST(HqStream, QuerySynchronizeAndDestroyDrain)
{
    hq_device_t dev;
    hq_device_config_t cfg = th_config(0, 2, 20);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    void *s = NULL;
    EXPECT_STATUS(hq_stream_create(&dev, 0, &s), HAL_OK);
    EXPECT_STATUS(hq_stream_query(s), HAL_OK);
    EXPECT_STATUS(hq_stream_synchronize(s), HAL_OK);
    th_gate_t gate;
    th_gate_init(&gate);
    atomic_int count;
    atomic_init(&count, 0);
    atomic_int *counter = &count;
    EXPECT_STATUS(hq_stream_add_callback(s, th_gate_cb, &gate), HAL_OK);
    EXPECT_STATUS(hq_stream_query(s), HAL_NOT_READY);
    CTEST_EXPECT(th_wait_until(th_gate_entered, &gate, 10000));
    EXPECT_STATUS(hq_stream_query(s), HAL_NOT_READY);
    enum { N = 300 };
    for (int i = 0; i < N; i++) {
        EXPECT_STATUS(hq_stream_enqueue(s, th_count_work, &counter, sizeof(counter), 0), HAL_OK);
        EXPECT_STATUS(hq_stream_add_callback(s, th_count_cb, &count), HAL_OK);
    }
    CTEST_EXPECT(atomic_load(&count) == 0);
    /* destroy waits for everything queued, the gate (opened meanwhile) included. */
    pthread_t opener;
    pthread_create(&opener, NULL, open_later, &gate);
    EXPECT_STATUS(hq_stream_destroy(s), HAL_OK);
    CTEST_EXPECT(atomic_load(&count) == 2 * N);
    pthread_join(opener, NULL);
    th_gate_destroy(&gate);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

/* ---- execution slots ----------------------------------------------------------------------- */

typedef struct log {
    pthread_mutex_t lock;
    char text[64];
} log_t;

typedef struct log_entry {
    log_t *log;
    char c;
} log_entry_t;

static void log_append(log_entry_t *e)
{
    pthread_mutex_lock(&e->log->lock);
    size_t n = strlen(e->log->text);
    if (n + 1 < sizeof(e->log->text)) {
        e->log->text[n] = e->c;
        e->log->text[n + 1] = '\0';
    }
    pthread_mutex_unlock(&e->log->lock);
}

static hal_status_t log_work(hq_stream_t *stream, void *payload, hal_status_t status)
{
    log_append(*(log_entry_t **)payload);
    return HAL_OK;
}

typedef struct waiting_probe {
    hq_device_t *dev;
    uint32_t n;
} waiting_probe_t;

static bool slot_waiters(void *arg)
{
    waiting_probe_t *p = arg;
    return hq_sched_waiting(&p->dev->sched) >= p->n;
}

/* With the only slot taken, queued work gets it by priority, FIFO within one priority, whatever
 * order the streams asked in. */
CTEST(HqStream, SlotsAreGrantedByPriority)
{
    hq_device_t dev;
    hq_device_config_t cfg = th_config(0, 1, 20);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    void *s[4] = { 0 };
    int32_t prio[4] = { 0, 0, -1, -2 };
    for (int i = 0; i < 4; i++)
        EXPECT_STATUS(hq_stream_create(&dev, prio[i], &s[i]), HAL_OK);
    log_t log = { .text = "" };
    pthread_mutex_init(&log.lock, NULL);
    log_entry_t e[4] = { { &log, 'a' }, { &log, 'b' }, { &log, 'M' }, { &log, 'H' } };
    pthread_cond_t cv;
    pthread_cond_init(&cv, NULL);
    hq_sched_acquire(&dev.sched, 0, &cv);
    waiting_probe_t probe = { &dev, 0 };
    for (int i = 0; i < 4; i++) {
        log_entry_t *ep = &e[i];
        EXPECT_STATUS(hq_stream_enqueue(s[i], log_work, &ep, sizeof(ep), 0), HAL_OK);
        probe.n = (uint32_t)i + 1;
        CTEST_EXPECT(th_wait_until(slot_waiters, &probe, 10000));
    }
    CTEST_EXPECT(log.text[0] == '\0');
    hq_sched_release(&dev.sched);
    EXPECT_STATUS(hq_device_synchronize(&dev), HAL_OK);
    if (strcmp(log.text, "HMab") != 0) {
        fprintf(stderr, "execution order \"%s\", expected \"HMab\"\n", log.text);
        ctest_record_failure();
    }
    CTEST_EXPECT(hq_sched_waiting(&dev.sched) == 0);
    pthread_cond_destroy(&cv);
    for (int i = 0; i < 4; i++)
        EXPECT_STATUS(hq_stream_destroy(s[i]), HAL_OK);
    pthread_mutex_destroy(&log.lock);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

static hal_status_t count_fn(void *counter, hal_status_t status)
{
    atomic_fetch_add((atomic_int *)counter, 1);
    return HAL_OK;
}

typedef struct count_probe {
    atomic_int *count;
    int want;
} count_probe_t;

static bool count_reached(void *arg)
{
    count_probe_t *p = arg;
    return atomic_load(p->count) >= p->want;
}

/* Which tasks need a slot: work does (unless HQ_TASK_NO_SLOT), callbacks only where the device
 * says so; host functions, records and waits never. A device of 0 slots never limits. */
CTEST(HqStream, WhatHoldsASlot)
{
    for (int variant = 0; variant < 3; variant++) {
        bool callbacks_take_slot = variant == 1;
        bool unlimited = variant == 2;
        hq_device_t dev;
        hq_device_config_t cfg = th_config(0, unlimited ? 0 : 1, 0);
        cfg.callbacks_take_slot = callbacks_take_slot;
        EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
        void *s = NULL, *other = NULL, *ev = NULL;
        EXPECT_STATUS(hq_stream_create(&dev, 0, &s), HAL_OK);
        EXPECT_STATUS(hq_stream_create(&dev, 0, &other), HAL_OK);
        EXPECT_STATUS(hq_event_create(&dev, 0, &ev), HAL_OK);
        pthread_cond_t cv;
        pthread_cond_init(&cv, NULL);
        hq_sched_acquire(&dev.sched, 0, &cv); /* the only slot, where there is a limit */

        atomic_int count;
        atomic_init(&count, 0);
        atomic_int *counter = &count;
        /* Slot-free tasks all run while the slot is taken. */
        EXPECT_STATUS(hq_stream_launch_host_fn(s, count_fn, &count), HAL_OK);
        EXPECT_STATUS(
            hq_stream_enqueue(s, th_count_work, &counter, sizeof(counter), HQ_TASK_NO_SLOT),
            HAL_OK);
        EXPECT_STATUS(hq_event_record(ev, other), HAL_OK);
        EXPECT_STATUS(hq_stream_wait_event(s, ev), HAL_OK);
        if (!callbacks_take_slot)
            EXPECT_STATUS(hq_stream_add_callback(s, th_count_cb, &count), HAL_OK);
        count_probe_t probe = { &count, callbacks_take_slot ? 2 : 3 };
        CTEST_EXPECT(th_wait_until(count_reached, &probe, 10000));
        EXPECT_STATUS(hq_event_synchronize(ev), HAL_OK);
        /* Then one that needs the slot. */
        if (callbacks_take_slot)
            EXPECT_STATUS(hq_stream_add_callback(s, th_count_cb, &count), HAL_OK);
        else
            EXPECT_STATUS(hq_stream_enqueue(s, th_count_work, &counter, sizeof(counter), 0),
                          HAL_OK);
        probe.want++;
        if (unlimited) {
            CTEST_EXPECT(th_wait_until(count_reached, &probe, 10000));
        } else {
            th_sleep_ms(20);
            CTEST_EXPECT(atomic_load(&count) == probe.want - 1);
            EXPECT_STATUS(hq_stream_query(s), HAL_NOT_READY);
        }
        hq_sched_release(&dev.sched);
        EXPECT_STATUS(hq_stream_synchronize(s), HAL_OK);
        CTEST_EXPECT(atomic_load(&count) == probe.want);
        pthread_cond_destroy(&cv);
        hq_event_destroy(ev);
        EXPECT_STATUS(hq_stream_destroy(s), HAL_OK);
        EXPECT_STATUS(hq_stream_destroy(other), HAL_OK);
        hq_device_fini(&dev);
    }
    return CTEST_PASS;
}

/* ---- device_synchronize -------------------------------------------------------------------- */

typedef struct sync_call {
    void *device;
    atomic_int done;
    hal_status_t status;
} sync_call_t;

static void *sync_thread(void *arg)
{
    sync_call_t *c = arg;
    c->status = hq_device_synchronize(c->device);
    atomic_store(&c->done, 1);
    return NULL;
}

CTEST(HqStream, DeviceSynchronizeWaitsForEveryStream)
{
    hq_device_t dev, other_dev;
    hq_device_config_t cfg = th_config(0, 4, 20), cfg1 = th_config(1, 4, 20);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    EXPECT_STATUS(hq_device_init(&other_dev, &cfg1), HAL_OK);
    enum { NS = 20 }; /* more than device_synchronize keeps inline */
    void *s[NS];
    for (int i = 0; i < NS; i++)
        EXPECT_STATUS(hq_stream_create(&dev, -(i % 3), &s[i]), HAL_OK);
    void *other = NULL;
    EXPECT_STATUS(hq_stream_create(&other_dev, 0, &other), HAL_OK);
    th_gate_t gate, other_gate;
    th_gate_init(&gate);
    th_gate_init(&other_gate);
    atomic_int count;
    atomic_init(&count, 0);
    for (int i = 0; i < NS; i++)
        EXPECT_STATUS(hq_stream_add_callback(s[i], th_count_cb, &count), HAL_OK);
    EXPECT_STATUS(hq_stream_add_callback(s[NS - 1], th_gate_cb, &gate), HAL_OK);
    /* Work on another device does not hold this one up. */
    EXPECT_STATUS(hq_stream_add_callback(other, th_gate_cb, &other_gate), HAL_OK);

    sync_call_t call = { .device = &dev, .status = HAL_ERROR_INTERNAL };
    atomic_init(&call.done, 0);
    pthread_t th;
    pthread_create(&th, NULL, sync_thread, &call);
    th_sleep_ms(30);
    CTEST_EXPECT(atomic_load(&call.done) == 0);
    th_gate_open(&gate);
    pthread_join(th, NULL);
    CTEST_EXPECT(call.status == HAL_OK);
    CTEST_EXPECT(atomic_load(&count) == NS);
    EXPECT_STATUS(hq_stream_query(other), HAL_NOT_READY);
    th_gate_open(&other_gate);

    /* The first latched error in creation order is reported, with its detail. */
    EXPECT_STATUS(hq_stream_inject_error(s[7], HAL_ERROR_ABORTED, "seventh"), HAL_OK);
    EXPECT_STATUS(hq_stream_inject_error(s[5], HAL_ERROR_REMOTE, "fifth"), HAL_OK);
    th_clear_error();
    EXPECT_STATUS(hq_device_synchronize(&dev), HAL_ERROR_REMOTE);
    EXPECT_MESSAGE("the stream failed earlier: fifth");
    EXPECT_STATUS(hq_device_synchronize(&other_dev), HAL_OK);
    for (int i = 0; i < NS; i++)
        EXPECT_STATUS(hq_stream_destroy(s[i]), i == 5   ? HAL_ERROR_REMOTE
                                               : i == 7 ? HAL_ERROR_ABORTED
                                                        : HAL_OK);
    EXPECT_STATUS(hq_stream_destroy(other), HAL_OK);
    EXPECT_STATUS(hq_device_synchronize(&dev), HAL_OK); /* no streams left */
    th_gate_destroy(&gate);
    th_gate_destroy(&other_gate);
    hq_device_fini(&dev);
    hq_device_fini(&other_dev);
    return CTEST_PASS;
}

/* device_synchronize while other threads create, use and destroy streams of the device: each
 * stream is pinned while it is waited for, so a destroy never frees one under it (ASan and TSan
 * check this). */
typedef struct churn {
    hq_device_t *dev;
    atomic_int *stop;
    int failures;
} churn_t;

static void *churn_thread(void *arg)
{
    churn_t *c = arg;
    atomic_int count;
    atomic_init(&count, 0);
    atomic_int *counter = &count;
    int rounds = 0;
    while (!atomic_load(c->stop) || rounds < 20) {
        void *s = NULL;
        if (hq_stream_create(c->dev, 0, &s) != HAL_OK) {
            c->failures++;
            break;
        }
        for (int i = 0; i < 20; i++)
            if (hq_stream_enqueue(s, th_count_work, &counter, sizeof(counter), 0) != HAL_OK)
                c->failures++;
        if (rounds % 2 == 0 && hq_stream_synchronize(s) != HAL_OK)
            c->failures++;
        if (hq_stream_destroy(s) != HAL_OK) /* with work possibly still queued */
            c->failures++;
        rounds++;
    }
    if (atomic_load(&count) != rounds * 20)
        c->failures++;
    return NULL;
}

CTEST(HqStream, DeviceSynchronizeRacesStreamDestroy)
{
    hq_device_t dev;
    hq_device_config_t cfg = th_config(0, 2, 20);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    atomic_int stop;
    atomic_init(&stop, 0);
    enum { T = 3 };
    churn_t c[T];
    pthread_t th[T];
    for (int i = 0; i < T; i++) {
        c[i] = (churn_t){ &dev, &stop, 0 };
        pthread_create(&th[i], NULL, churn_thread, &c[i]);
    }
    for (int i = 0; i < 300; i++)
        EXPECT_STATUS(hq_device_synchronize(&dev), HAL_OK);
    atomic_store(&stop, 1);
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        CTEST_EXPECT(c[i].failures == 0);
    }
    EXPECT_STATUS(hq_device_synchronize(&dev), HAL_OK);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

/* ---- worker threads ------------------------------------------------------------------------ */

typedef struct name_probe {
    char name[32];
    atomic_int blocked_signals; /* 1 if SIGINT and SIGTERM are blocked on the worker */
} name_probe_t;

static void read_name(hal_status_t status, void *arg)
{
    name_probe_t *p = arg;
    pthread_getname_np(pthread_self(), p->name, sizeof(p->name));
    sigset_t set;
    pthread_sigmask(SIG_SETMASK, NULL, &set);
    atomic_store(&p->blocked_signals, sigismember(&set, SIGINT) && sigismember(&set, SIGTERM));
}

CTEST(HqStream, WorkersAreNamedAndTakeNoSignals)
{
    hq_device_t dev, dflt;
    hq_device_config_t cfg = th_config(7, 0, 0);
    cfg.thread_prefix = "a-very-long-prefix";
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    hq_device_config_t plain = th_config(3, 0, 0);
    plain.thread_prefix = NULL;
    EXPECT_STATUS(hq_device_init(&dflt, &plain), HAL_OK);
    name_probe_t a = { .name = "" }, b = { .name = "" };
    atomic_init(&a.blocked_signals, 0);
    atomic_init(&b.blocked_signals, 0);
    void *s = NULL, *t = NULL;
    EXPECT_STATUS(hq_stream_create(&dev, 0, &s), HAL_OK);
    EXPECT_STATUS(hq_stream_create(&dflt, 0, &t), HAL_OK);
    EXPECT_STATUS(hq_stream_add_callback(s, read_name, &a), HAL_OK);
    EXPECT_STATUS(hq_stream_add_callback(t, read_name, &b), HAL_OK);
    EXPECT_STATUS(hq_stream_synchronize(s), HAL_OK);
    EXPECT_STATUS(hq_stream_synchronize(t), HAL_OK);
    CTEST_EXPECT(strcmp(a.name, "a-very-long7") == 0); /* the prefix is cut to 11 characters */
    CTEST_EXPECT(strcmp(b.name, "hal-hq3") == 0);
    CTEST_EXPECT(atomic_load(&a.blocked_signals) == 1);
    EXPECT_STATUS(hq_stream_destroy(s), HAL_OK);
    EXPECT_STATUS(hq_stream_destroy(t), HAL_OK);
    hq_device_fini(&dev);
    hq_device_fini(&dflt);
    return CTEST_PASS;
}
