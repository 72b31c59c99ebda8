/* SPDX-License-Identifier: Apache-2.0 */
/* Backend toolkit: streams of the host-queue engine. Each stream is a worker thread draining a
 * FIFO of task nodes.
 *
 * Hot path: enqueueing takes the stream lock once, reuses a node from the stream's free list
 * (nodes come in chunks and are only freed with the stream), copies the task in, appends it and
 * bumps `submitted`; the worker is signalled only if it sleeps. The worker spins the device's
 * spin_us on `submitted` before sleeping, returns a finished node and pops the next one under a
 * single lock, and publishes `completed` for synchronize, which spins the same way before
 * sleeping and is woken only once its target is reached.
 *
 * Errors latch: the first task that fails stores its status and message; later work is skipped
 * (unless it runs on error), event records still complete (carrying the status), callbacks and
 * host functions run and are told. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/common/hq_internal.h"

/* The stream whose work task the calling worker is running (for hq_task_error). */
static _Thread_local hq_stream_t *tls_current_stream;

/* Where the extension area starts: after the struct, aligned for any type. */
#define HQ_EXT_OFFSET                                                            \
    ((sizeof(hq_stream_t) + _Alignof(max_align_t) - 1) / _Alignof(max_align_t) * \
     _Alignof(max_align_t))

/* ---- lifetime ------------------------------------------------------------------------------ */

static void stream_free(hq_stream_t *s)
{
    if (s->ext != NULL && s->device->stream_ext_fini != NULL)
        s->device->stream_ext_fini(s, s->ext);
    hq_task_chunk_t *chunk = s->chunks;
    while (chunk != NULL) {
        hq_task_chunk_t *next = chunk->next;
        free(chunk);
        chunk = next;
    }
    pthread_cond_destroy(&s->sched_cv);
    pthread_cond_destroy(&s->idle_cv);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void hq_stream_unref(hq_stream_t *stream)
{
    if (atomic_fetch_sub(&stream->refcount, 1) == 1)
        stream_free(stream);
}

/* Threads a fresh chunk of nodes onto the free list. Caller holds the lock (or owns s). */
static void add_chunk_locked(hq_stream_t *s, hq_task_chunk_t *chunk)
{
    chunk->next = s->chunks;
    s->chunks = chunk;
    for (size_t i = 0; i < HQ_TASK_CHUNK; i++) {
        chunk->tasks[i].next = s->free_tasks;
        s->free_tasks = &chunk->tasks[i];
    }
}

hq_device_t *hq_stream_device(const hq_stream_t *stream)
{
    return stream->device;
}

void *hq_stream_ext(hq_stream_t *stream)
{
    return stream->ext;
}

/* ---- errors -------------------------------------------------------------------------------- */

void hq_stream_latch(hq_stream_t *stream, hal_status_t status, const char *msg)
{
    bool expected = false;
    if (!atomic_compare_exchange_strong(&stream->latching, &expected, true))
        return; /* an error is latched (or being latched) already */
    snprintf(stream->error_msg, sizeof(stream->error_msg), "%s", msg);
    atomic_store_explicit(&stream->status, (int)status, memory_order_release);
}

hal_status_t hq_stream_latched(hq_stream_t *stream)
{
    if (hq_is_stale(stream->generation))
        return hq_stale_error(stream->device, "the stream");
    hal_status_t st = (hal_status_t)atomic_load_explicit(&stream->status, memory_order_acquire);
    if (st != HAL_OK)
        hq_set_error(stream->device->host, "the stream failed earlier: %s", stream->error_msg);
    return st;
}

static void write_task_msg(hq_stream_t *s, const char *fmt, va_list ap)
{
    vsnprintf(s->task_msg, sizeof(s->task_msg), fmt, ap);
}

void hq_task_error(const char *fmt, ...)
{
    hq_stream_t *s = tls_current_stream;
    if (s == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    write_task_msg(s, fmt, ap);
    va_end(ap);
}

void hq_stream_task_error(hq_stream_t *stream, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    write_task_msg(stream, fmt, ap);
    va_end(ap);
}

/* ---- enqueue ------------------------------------------------------------------------------- */

/* Whether nothing of the stream is queued or running. Caller holds the lock. */
static bool idle_locked(hq_stream_t *s)
{
    return s->head == NULL && !s->inline_running && !s->stop &&
           atomic_load_explicit(&s->completed, memory_order_relaxed) ==
               atomic_load_explicit(&s->submitted, memory_order_relaxed);
}

hal_status_t hq_stream_submit(hq_stream_t *s, const hq_task_head_t *head, const void *payload,
                              size_t size)
{
    if (hq_is_stale(s->generation))
        return hq_stale_error(s->device, "the stream");
    pthread_mutex_lock(&s->lock);
    if (head->kind == HQ_TASK_RECORD && idle_locked(s)) {
        /* Nothing to wait for: the record completes now, as the worker would complete it. */
        hq_event_complete(head->u.event.event, head->u.event.version,
                          (hal_status_t)atomic_load_explicit(&s->status, memory_order_acquire));
        pthread_mutex_unlock(&s->lock);
        hq_event_unref(head->u.event.event); /* the queue's reference; the caller keeps its own */
        return HAL_OK;
    }
    while (s->free_tasks == NULL) {
        /* Cold path: grow outside the lock so the worker keeps going meanwhile. */
        pthread_mutex_unlock(&s->lock);
        hq_task_chunk_t *chunk = malloc(sizeof(*chunk));
        if (chunk == NULL) {
            hq_set_error(s->device->host, "malloc(%zu) failed for stream task nodes",
                         sizeof(*chunk));
            return HAL_ERROR_OUT_OF_HOST_MEMORY;
        }
        pthread_mutex_lock(&s->lock);
        add_chunk_locked(s, chunk);
    }
    hq_task_t *t = s->free_tasks;
    s->free_tasks = t->next;
    t->head = *head;
    if (size > 0)
        memcpy(t->payload.bytes, payload, size);
    t->next = NULL;
    if (s->tail != NULL)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
    uint64_t submitted = atomic_load_explicit(&s->submitted, memory_order_relaxed);
    atomic_store_explicit(&s->submitted, submitted + 1, memory_order_release);
    if (s->worker_sleeping)
        pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->lock);
    return HAL_OK;
}

static void finish_work(hq_stream_t *s, uint32_t flags, hal_status_t rc);

/* Runs an HQ_TASK_INLINE task on the calling thread if the stream is idle and a slot is free;
 * returns false (nothing run) otherwise. */
static bool run_inline(hq_stream_t *s, hq_work_fn_t fn, const void *payload, size_t size)
{
    if (hq_is_stale(s->generation))
        return false; /* hq_stream_submit reports it */
    pthread_mutex_lock(&s->lock);
    bool idle = idle_locked(s);
    if (idle && hq_sched_try_acquire(&s->device->sched))
        s->inline_running = true;
    else
        idle = false;
    pthread_mutex_unlock(&s->lock);
    if (!idle)
        return false;

    union {
        max_align_t align;
        unsigned char bytes[HQ_PAYLOAD_MAX];
    } copy; /* the task may modify its payload, as on the worker */
    if (size > 0)
        memcpy(copy.bytes, payload, size);
    /* tls_current_stream is left alone: see hq_stream_task_error. */
    s->task_msg[0] = '\0';
    /* Acquire: hq_device_mark_lost may latch from another thread; a failed stream skips it. */
    hal_status_t st = (hal_status_t)atomic_load_explicit(&s->status, memory_order_acquire);
    hal_status_t rc = st == HAL_OK ? fn(s, copy.bytes, st) : HAL_OK;
    hq_sched_release(&s->device->sched);
    finish_work(s, 0, rc);

    pthread_mutex_lock(&s->lock);
    s->inline_running = false;
    if (s->head != NULL && s->worker_sleeping)
        pthread_cond_signal(&s->work_cv); /* producers queued behind the task meanwhile */
    pthread_mutex_unlock(&s->lock);
    return true;
}

hal_status_t hq_stream_enqueue(hq_stream_t *stream, hq_work_fn_t fn, const void *payload,
                               size_t size, uint32_t flags)
{
    if (size > HQ_PAYLOAD_MAX) {
        hq_set_error(stream->device->host, "a stream task payload of %zu bytes exceeds %d", size,
                     HQ_PAYLOAD_MAX);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    if ((flags & HQ_TASK_RUN_ON_ERROR) == 0) {
        hal_status_t st = hq_stream_latched(stream);
        if (st != HAL_OK)
            return st;
    }
    if (flags == HQ_TASK_INLINE && run_inline(stream, fn, payload, size))
        return HAL_OK;
    hq_task_head_t head = { .kind = HQ_TASK_WORK, .flags = flags, .u.work = fn };
    return hq_stream_submit(stream, &head, payload, size);
}

/* What a host function task carries. */
typedef struct host_fn_payload {
    hal_stream_host_fn_t fn;
    void *arg;
} host_fn_payload_t;

static hal_status_t run_host_fn(hq_stream_t *stream, void *payload, hal_status_t stream_status)
{
    const host_fn_payload_t *p = payload;
    return p->fn(p->arg, stream_status);
}

hal_status_t hq_stream_launch_host_fn(void *stream, hal_stream_host_fn_t fn, void *arg)
{
    host_fn_payload_t p = { fn, arg };
    return hq_stream_enqueue(stream, run_host_fn, &p, sizeof(p),
                             HQ_TASK_RUN_ON_ERROR | HQ_TASK_NO_SLOT | HQ_TASK_HOST_FN);
}

hal_status_t hq_stream_add_callback(void *stream, hal_host_fn_t fn, void *user_data)
{
    hq_task_head_t head = { .kind = HQ_TASK_CALLBACK };
    head.u.callback.fn = fn;
    head.u.callback.user_data = user_data;
    return hq_stream_submit(stream, &head, NULL, 0);
}

hal_status_t hq_stream_inject_error(hq_stream_t *stream, hal_status_t status, const char *detail)
{
    hq_task_head_t head = { .kind = HQ_TASK_FAIL };
    head.u.fail.status = status;
    head.u.fail.detail = detail;
    return hq_stream_submit(stream, &head, NULL, 0);
}

/* ---- the worker ---------------------------------------------------------------------------- */

/* Drops a detail that HAL code run on this worker left with the host, so that it cannot be
 * blamed on a later host function; returns it. */
static const char *take_host_detail(hq_stream_t *s)
{
    return hq_take_error(s->device->host);
}

static void run_work(hq_stream_t *s, hq_task_t *t, hal_status_t st)
{
    hq_sched_t *sched = &s->device->sched;
    uint32_t flags = t->head.flags;
    bool slot = (flags & HQ_TASK_NO_SLOT) == 0;
    if (slot)
        hq_sched_acquire(sched, s->priority, &s->sched_cv);
    s->task_msg[0] = '\0';
    tls_current_stream = s;
    hal_status_t rc = t->head.u.work(s, t->payload.bytes, st);
    tls_current_stream = NULL;
    if (slot)
        hq_sched_release(sched);
    finish_work(s, flags, rc);
}

/* After a work task ran (on the worker or inline): latches its failure with its message. */
static void finish_work(hq_stream_t *s, uint32_t flags, hal_status_t rc)
{
    if ((flags & HQ_TASK_HOST_FN) != 0) {
        /* A HAL function that failed inside fn left its detail with the core, for this thread;
         * take it now, before anything else run here can replace it, and always, so that a
         * detail fn left behind on success cannot be blamed on a later task. */
        const char *detail = take_host_detail(s);
        if (rc != HAL_OK && detail != NULL && detail[0] != '\0')
            snprintf(s->task_msg, sizeof(s->task_msg), "%s", detail);
    }
    if (rc == HAL_OK)
        return;
    if (s->task_msg[0] == '\0')
        snprintf(s->task_msg, sizeof(s->task_msg), "a stream %s failed with %s",
                 (flags & HQ_TASK_HOST_FN) != 0 ? "host function" : "task", hq_status_name(rc));
    hq_stream_latch(s, rc, s->task_msg);
}

static void run_task(hq_stream_t *s, hq_task_t *t)
{
    /* Acquire: hq_device_mark_lost may latch from another thread. */
    hal_status_t st = (hal_status_t)atomic_load_explicit(&s->status, memory_order_acquire);
    const hq_task_head_t *h = &t->head;
    switch (h->kind) {
    case HQ_TASK_WORK:
        if (st == HAL_OK || (h->flags & HQ_TASK_RUN_ON_ERROR) != 0)
            run_work(s, t, st);
        break;
    case HQ_TASK_RECORD:
        /* Bookkeeping only: needs no slot, and completes even on a failed stream so that
         * nobody waiting on the event hangs. */
        hq_event_complete(h->u.event.event, h->u.event.version, st);
        hq_event_unref(h->u.event.event);
        break;
    case HQ_TASK_WAIT:
        /* Waits without a slot: a blocked stream must not starve the device. */
        hq_event_wait_version(h->u.event.event, h->u.event.version);
        hq_event_unref(h->u.event.event);
        break;
    case HQ_TASK_CALLBACK: {
        bool slot = s->device->callbacks_take_slot;
        if (slot)
            hq_sched_acquire(&s->device->sched, s->priority, &s->sched_cv);
        h->u.callback.fn(st, h->u.callback.user_data);
        if (slot)
            hq_sched_release(&s->device->sched);
        (void)take_host_detail(s);
        break;
    }
    case HQ_TASK_FAIL:
        hq_stream_latch(s, h->u.fail.status, h->u.fail.detail);
        break;
    }
}

typedef struct work_probe {
    hq_stream_t *s;
    uint64_t done;
} work_probe_t;

static bool work_available(const void *arg)
{
    const work_probe_t *p = arg;
    return atomic_load_explicit(&p->s->submitted, memory_order_acquire) != p->done ||
           atomic_load_explicit(&p->s->stopping, memory_order_relaxed);
}

static hq_task_t *pop_locked(hq_stream_t *s)
{
    hq_task_t *t = s->head;
    if (t != NULL) {
        s->head = t->next;
        if (s->head == NULL)
            s->tail = NULL;
    }
    return t;
}

static void *worker_main(void *arg)
{
    hq_stream_t *s = arg;
    work_probe_t probe = { .s = s, .done = 0 };
    hq_task_t *task = NULL;
    for (;;) {
        if (task == NULL) {
            hq_spin_until(work_available, &probe, s->spin_us);
            pthread_mutex_lock(&s->lock);
            while ((s->head == NULL || s->inline_running) && !s->stop) {
                s->worker_sleeping = true;
                pthread_cond_wait(&s->work_cv, &s->lock);
                s->worker_sleeping = false;
            }
            task = pop_locked(s);
            pthread_mutex_unlock(&s->lock);
            if (task == NULL)
                break; /* stopped and drained */
        }
        run_task(s, task);
        pthread_mutex_lock(&s->lock);
        task->next = s->free_tasks;
        s->free_tasks = task;
        probe.done++;
        atomic_store_explicit(&s->completed, probe.done, memory_order_release);
        if (probe.done >= s->wake_at) {
            /* Wake synchronize callers only once one of them is satisfied: a wake-up per
             * task would cost a futex call each and slow pipelined copies down. */
            s->wake_at = UINT64_MAX;
            pthread_cond_broadcast(&s->idle_cv);
        }
        task = s->inline_running ? NULL : pop_locked(s);
        pthread_mutex_unlock(&s->lock);
    }
    return NULL;
}

/* ---- synchronisation ----------------------------------------------------------------------- */

typedef struct idle_probe {
    hq_stream_t *s;
    uint64_t target;
} idle_probe_t;

static bool reached(const void *arg)
{
    const idle_probe_t *p = arg;
    return atomic_load_explicit(&p->s->completed, memory_order_acquire) >= p->target;
}

hal_status_t hq_stream_wait_idle(hq_stream_t *stream, uint64_t target)
{
    idle_probe_t probe = { .s = stream, .target = target };
    if (!hq_spin_until(reached, &probe, stream->spin_us)) {
        pthread_mutex_lock(&stream->lock);
        while (!reached(&probe)) {
            /* Re-armed after every wake-up: the worker resets it when it broadcasts. */
            if (target < stream->wake_at)
                stream->wake_at = target;
            pthread_cond_wait(&stream->idle_cv, &stream->lock);
        }
        pthread_mutex_unlock(&stream->lock);
    }
    return (hal_status_t)atomic_load_explicit(&stream->status, memory_order_acquire);
}

/* ---- creation and destruction -------------------------------------------------------------- */

/* Appends the stream to its device's list (creation order); a stream of a lost device is born
 * failed, like the device's other streams. */
static void link_stream(hq_device_t *device, hq_stream_t *s)
{
    pthread_mutex_lock(&device->streams_lock);
    hq_stream_t **pos = &device->streams;
    hq_stream_t *prev = NULL;
    while (*pos != NULL) {
        prev = *pos;
        pos = &(*pos)->dev_next;
    }
    s->dev_prev = prev;
    *pos = s;
    device->stream_count++;
    if (atomic_load_explicit(&device->lost, memory_order_acquire))
        hq_stream_latch(s, HAL_ERROR_DEVICE_LOST, device->lost_msg);
    pthread_mutex_unlock(&device->streams_lock);
}

static void unlink_stream(hq_device_t *device, hq_stream_t *s)
{
    pthread_mutex_lock(&device->streams_lock);
    if (s->dev_prev != NULL)
        s->dev_prev->dev_next = s->dev_next;
    else
        device->streams = s->dev_next;
    if (s->dev_next != NULL)
        s->dev_next->dev_prev = s->dev_prev;
    device->stream_count--;
    pthread_mutex_unlock(&device->streams_lock);
}

hal_status_t hq_stream_create(void *device_, int32_t priority, void **out)
{
    hq_device_t *device = device_;
    if (hq_is_stale(device->generation))
        return hq_stale_error(device, "the device");
    size_t bytes =
        device->stream_ext_size > 0 ? HQ_EXT_OFFSET + device->stream_ext_size : sizeof(hq_stream_t);
    hq_stream_t *s = calloc(1, bytes);
    if (s == NULL) {
        hq_set_error(device->host, "calloc(%zu) failed for a stream", bytes);
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    s->device = device;
    s->priority = priority;
    s->spin_us = device->spin_us;
    s->generation = device->generation;
    s->ext = device->stream_ext_size > 0 ? (char *)s + HQ_EXT_OFFSET : NULL;
    atomic_init(&s->refcount, 1);
    atomic_init(&s->submitted, 0);
    atomic_init(&s->completed, 0);
    atomic_init(&s->status, HAL_OK);
    atomic_init(&s->latching, false);
    atomic_init(&s->stopping, false);
    s->wake_at = UINT64_MAX;

    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        hq_set_error(device->host, "pthread_mutex_init failed for a stream");
        goto out_free;
    }
    if (pthread_cond_init(&s->work_cv, NULL) != 0) {
        hq_set_error(device->host, "pthread_cond_init failed for a stream");
        goto out_destroy_lock;
    }
    if (pthread_cond_init(&s->idle_cv, NULL) != 0) {
        hq_set_error(device->host, "pthread_cond_init failed for a stream");
        goto out_destroy_work_cv;
    }
    if (pthread_cond_init(&s->sched_cv, NULL) != 0) {
        hq_set_error(device->host, "pthread_cond_init failed for a stream");
        goto out_destroy_idle_cv;
    }
    hq_task_chunk_t *chunk = malloc(sizeof(*chunk));
    if (chunk == NULL) {
        hq_set_error(device->host, "malloc(%zu) failed for stream task nodes", sizeof(*chunk));
        goto out_destroy_sched_cv;
    }
    add_chunk_locked(s, chunk); /* not shared yet: no lock needed */

    /* Workers take no signals: the application's handlers must run on its own threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, worker_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        hq_set_error(device->host, "pthread_create failed for a stream worker: %s", strerror(rc));
        goto out_free_chunk;
    }
    char name[16];
    snprintf(name, sizeof(name), "%s%u", device->thread_prefix, device->index % 1000u);
    pthread_setname_np(s->thread, name);

    link_stream(device, s);
    *out = s;
    return HAL_OK;

out_free_chunk:
    free(chunk);
out_destroy_sched_cv:
    pthread_cond_destroy(&s->sched_cv);
out_destroy_idle_cv:
    pthread_cond_destroy(&s->idle_cv);
out_destroy_work_cv:
    pthread_cond_destroy(&s->work_cv);
out_destroy_lock:
    pthread_mutex_destroy(&s->lock);
out_free:
    free(s);
    return HAL_ERROR_OUT_OF_HOST_MEMORY;
}

hal_status_t hq_stream_destroy(void *stream)
{
    hq_stream_t *s = stream;
    if (hq_is_stale(s->generation))
        return hq_stale_error(s->device, "the stream"); /* abandoned: see hq.h */
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    atomic_store(&s->stopping, true);
    if (s->worker_sleeping)
        pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    unlink_stream(s->device, s);
    hal_status_t st = hq_stream_latched(s);
    hq_stream_unref(s);
    return st;
}

/* ---- queries ------------------------------------------------------------------------------- */

hal_status_t hq_stream_query(void *stream)
{
    hq_stream_t *s = stream;
    hal_status_t st = hq_stream_latched(s);
    if (st != HAL_OK)
        return st;
    /* Load submitted first: completed never exceeds it, so completed >= that value means all
     * work enqueued before this call has run. */
    uint64_t submitted = atomic_load_explicit(&s->submitted, memory_order_acquire);
    uint64_t completed = atomic_load_explicit(&s->completed, memory_order_acquire);
    return completed >= submitted ? HAL_OK : HAL_NOT_READY;
}

hal_status_t hq_stream_synchronize(void *stream)
{
    hq_stream_t *s = stream;
    if (hq_is_stale(s->generation))
        return hq_stale_error(s->device, "the stream");
    uint64_t target = atomic_load_explicit(&s->submitted, memory_order_acquire);
    hq_stream_wait_idle(s, target);
    return hq_stream_latched(s);
}
