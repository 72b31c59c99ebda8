/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: streams. Every libnrt call blocks until its transfer is done, so a stream
 * is a worker thread draining a FIFO of task nodes; enqueueing returns at once.
 *
 * Enqueue takes the stream lock once, reuses a node from the stream's free list (nodes come in
 * chunks of TRN_TASK_CHUNK and are freed only with the stream, so there is no allocation per
 * task), appends it and wakes the worker if it sleeps. Data tasks hold one of the core's
 * execution slots while they run (trn_sched.c); waits, event records, callbacks and host
 * functions take none, so a blocked stream never starves the core.
 *
 * Errors latch: the first task that fails stores its status and message; later data tasks are
 * skipped, event records still complete (carrying the status), callbacks and host functions
 * run and are told. A hardware error also marks the core lost, which latches
 * HAL_ERROR_DEVICE_LOST on all of its streams. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/trainium/trn_internal.h"

/* ---- lifetime ------------------------------------------------------------------------------ */

static void stream_free(trn_stream_t *s)
{
    trn_task_chunk_t *chunk = s->chunks;
    while (chunk != NULL) {
        trn_task_chunk_t *next = chunk->next;
        free(chunk);
        chunk = next;
    }
    free(s->stage);
    pthread_cond_destroy(&s->sched_cv);
    pthread_cond_destroy(&s->idle_cv);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Drops a reference; the last one frees the stream (its worker has exited by then). */
void trn_stream_unref(trn_stream_t *stream)
{
    if (atomic_fetch_sub(&stream->refcount, 1) == 1)
        stream_free(stream);
}

/* Threads a fresh chunk of nodes onto the free list. Caller holds the lock (or owns s). */
static void add_chunk_locked(trn_stream_t *s, trn_task_chunk_t *chunk)
{
    chunk->next = s->chunks;
    s->chunks = chunk;
    for (size_t i = 0; i < TRN_TASK_CHUNK; i++) {
        chunk->tasks[i].next = s->free_tasks;
        s->free_tasks = &chunk->tasks[i];
    }
}

/* ---- errors -------------------------------------------------------------------------------- */

void trn_stream_latch(trn_stream_t *stream, hal_status_t status, const char *msg)
{
    bool expected = false;
    if (!atomic_compare_exchange_strong(&stream->latching, &expected, true))
        return; /* an error is latched (or being latched) already */
    snprintf(stream->error_msg, sizeof(stream->error_msg), "%s", msg);
    atomic_store_explicit(&stream->status, (int)status, memory_order_release);
}

hal_status_t trn_stream_latched(trn_stream_t *stream)
{
    hal_status_t st = (hal_status_t)atomic_load_explicit(&stream->status, memory_order_acquire);
    if (st != HAL_OK)
        trn_set_error(stream->device->backend, "the stream failed earlier: %s", stream->error_msg);
    return st;
}

/* ---- enqueue ------------------------------------------------------------------------------- */

/* Appends a copy of `task` to the queue. Returns HAL_OK or HAL_ERROR_OUT_OF_HOST_MEMORY (no
 * node could be allocated; nothing was enqueued). Thread safety: safe. */
hal_status_t trn_stream_submit(trn_stream_t *s, const trn_task_t *task)
{
    pthread_mutex_lock(&s->lock);
    while (s->free_tasks == NULL) {
        /* Cold path: grow outside the lock so the worker keeps going meanwhile. */
        pthread_mutex_unlock(&s->lock);
        trn_task_chunk_t *chunk = malloc(sizeof(*chunk));
        if (chunk == NULL) {
            trn_set_error(s->device->backend, "malloc(%zu) failed for stream task nodes",
                          sizeof(*chunk));
            return HAL_ERROR_OUT_OF_HOST_MEMORY;
        }
        pthread_mutex_lock(&s->lock);
        add_chunk_locked(s, chunk);
    }
    trn_task_t *t = s->free_tasks;
    s->free_tasks = t->next;
    *t = *task;
    t->next = NULL;
    if (s->tail != NULL)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
    atomic_store_explicit(&s->submitted,
                          atomic_load_explicit(&s->submitted, memory_order_relaxed) + 1,
                          memory_order_release);
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->lock);
    return HAL_OK;
}

/* ---- the worker ---------------------------------------------------------------------------- */

/* Runs a host function and latches its failure with the detail it left (host->take_error). */
static void run_host_fn(trn_stream_t *s, const trn_task_t *t, hal_status_t st)
{
    const hal_host_services_t *host = s->device->backend->host;
    const char *(*take)(void) = NULL;
    if (host->struct_size >= offsetof(hal_host_services_t, take_error) + sizeof(host->take_error))
        take = host->take_error;
    if (take != NULL)
        take(); /* drop a stale detail of this thread */
    hal_status_t rc = t->u.host_fn.fn(t->u.host_fn.arg, st);
    if (rc == HAL_OK)
        return;
    const char *detail = take != NULL ? take() : NULL;
    if (detail != NULL && detail[0] != '\0') {
        trn_stream_latch(s, rc, detail);
    } else {
        char msg[TRN_MSG_MAX];
        snprintf(msg, sizeof(msg), "a stream host function failed with %s",
                 trn_status_hal_name(rc));
        trn_stream_latch(s, rc, msg);
    }
}

static void run_task(trn_stream_t *s, trn_task_t *t)
{
    hal_status_t st = (hal_status_t)atomic_load_explicit(&s->status, memory_order_acquire);
    trn_sched_t *sched = &s->device->sched;
    hal_status_t rc;
    switch (t->kind) {
    case TRN_TASK_COPY:
    case TRN_TASK_MEMSET:
        if (st != HAL_OK)
            break; /* skipped on a failed stream */
        trn_sched_acquire(sched, s->priority, &s->sched_cv);
        s->task_msg[0] = '\0';
        if (t->kind == TRN_TASK_COPY)
            rc = trn_run_copy(s, t, s->task_msg, sizeof(s->task_msg));
        else
            rc = trn_run_memset(s, t, s->task_msg, sizeof(s->task_msg));
        trn_sched_release(sched);
        if (rc != HAL_OK)
            trn_stream_latch(s, rc, s->task_msg);
        break;
    case TRN_TASK_RECORD:
        /* Completes even on a failed stream, so that nobody waiting on the event hangs. */
        trn_event_complete(t->u.event.event, t->u.event.version, st);
        trn_event_unref(t->u.event.event);
        break;
    case TRN_TASK_WAIT:
        trn_event_wait_version(t->u.event.event, t->u.event.version);
        trn_event_unref(t->u.event.event);
        break;
    case TRN_TASK_CALLBACK:
        t->u.callback.fn(st, t->u.callback.user_data);
        break;
    case TRN_TASK_HOST_FN:
        run_host_fn(s, t, st);
        break;
    }
}

static void *worker_main(void *arg)
{
    trn_stream_t *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->head == NULL && !s->stop)
            pthread_cond_wait(&s->work_cv, &s->lock);
        trn_task_t *t = s->head;
        if (t == NULL)
            break; /* stopped and drained */
        s->head = t->next;
        if (s->head == NULL)
            s->tail = NULL;
        pthread_mutex_unlock(&s->lock);

        run_task(s, t);

        pthread_mutex_lock(&s->lock);
        t->next = s->free_tasks;
        s->free_tasks = t;
        atomic_store_explicit(&s->completed,
                              atomic_load_explicit(&s->completed, memory_order_relaxed) + 1,
                              memory_order_release);
        if (s->sync_waiters > 0)
            pthread_cond_broadcast(&s->idle_cv);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* Blocks until the stream completed `target` tasks (a value `submitted` had). */
static void wait_completed(trn_stream_t *s, uint64_t target)
{
    if (atomic_load_explicit(&s->completed, memory_order_acquire) >= target)
        return;
    pthread_mutex_lock(&s->lock);
    s->sync_waiters++;
    while (atomic_load_explicit(&s->completed, memory_order_relaxed) < target)
        pthread_cond_wait(&s->idle_cv, &s->lock);
    s->sync_waiters--;
    pthread_mutex_unlock(&s->lock);
}

/* ---- ops slots ----------------------------------------------------------------------------- */

hal_status_t trn_stream_create(void *device_, int32_t priority, void **out)
{
    trn_device_t *device = device_;
    trn_backend_t *backend = device->backend;
    trn_stream_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        trn_set_error(backend, "calloc(%zu) failed for a stream", sizeof(*s));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    s->device = device;
    s->priority = priority;
    atomic_init(&s->refcount, 1);
    atomic_init(&s->submitted, 0);
    atomic_init(&s->completed, 0);
    atomic_init(&s->status, HAL_OK);
    atomic_init(&s->latching, false);

    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        trn_set_error(backend, "pthread_mutex_init failed for a stream");
        goto out_free;
    }
    if (pthread_cond_init(&s->work_cv, NULL) != 0) {
        trn_set_error(backend, "pthread_cond_init failed for a stream");
        goto out_destroy_lock;
    }
    if (pthread_cond_init(&s->idle_cv, NULL) != 0) {
        trn_set_error(backend, "pthread_cond_init failed for a stream");
        goto out_destroy_work_cv;
    }
    if (pthread_cond_init(&s->sched_cv, NULL) != 0) {
        trn_set_error(backend, "pthread_cond_init failed for a stream");
        goto out_destroy_idle_cv;
    }
    trn_task_chunk_t *chunk = malloc(sizeof(*chunk));
    if (chunk == NULL) {
        trn_set_error(backend, "malloc(%zu) failed for stream task nodes", sizeof(*chunk));
        goto out_destroy_sched_cv;
    }
    add_chunk_locked(s, chunk); /* not shared yet */

    /* Workers take no signals: the application's handlers must run on its own threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, worker_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        trn_set_error(backend, "pthread_create failed for a stream worker: %s", strerror(rc));
        goto out_free_chunks;
    }
    char name[16];
    snprintf(name, sizeof(name), "hal-trn%u", device->index % 1000u);
    pthread_setname_np(s->thread, name);

    pthread_mutex_lock(&device->streams_lock);
    trn_stream_t **pos = &device->streams;
    trn_stream_t *prev = NULL;
    while (*pos != NULL) {
        prev = *pos;
        pos = &(*pos)->dev_next;
    }
    s->dev_prev = prev;
    *pos = s;
    device->stream_count++;
    if (atomic_load_explicit(&device->lost, memory_order_acquire)) {
        /* A stream of a lost core is born failed, like the core's other streams. */
        char msg[TRN_MSG_MAX + 64];
        snprintf(msg, sizeof(msg), "NeuronCore %u is lost: %s", device->index, device->lost_msg);
        trn_stream_latch(s, HAL_ERROR_DEVICE_LOST, msg);
    }
    pthread_mutex_unlock(&device->streams_lock);
    *out = s;
    return HAL_OK;

out_free_chunks:
    free(s->chunks);
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

/* Drains the queue, joins the worker and frees the stream (once no device_synchronize still
 * looks at it). Returns the latched error, if any. */
hal_status_t trn_stream_destroy(void *stream)
{
    trn_stream_t *s = stream;
    trn_device_t *device = s->device;
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);

    pthread_mutex_lock(&device->streams_lock);
    if (s->dev_prev != NULL)
        s->dev_prev->dev_next = s->dev_next;
    else
        device->streams = s->dev_next;
    if (s->dev_next != NULL)
        s->dev_next->dev_prev = s->dev_prev;
    device->stream_count--;
    pthread_mutex_unlock(&device->streams_lock);

    hal_status_t st = trn_stream_latched(s);
    trn_stream_unref(s);
    return st;
}

/* HAL_OK when everything enqueued has run, HAL_NOT_READY otherwise, or the latched error. */
hal_status_t trn_stream_query(void *stream)
{
    trn_stream_t *s = stream;
    hal_status_t st = trn_stream_latched(s);
    if (st != HAL_OK)
        return st;
    /* Load submitted first: completed never exceeds it. */
    uint64_t submitted = atomic_load_explicit(&s->submitted, memory_order_acquire);
    uint64_t completed = atomic_load_explicit(&s->completed, memory_order_acquire);
    return completed >= submitted ? HAL_OK : HAL_NOT_READY;
}

/* Blocks until the work enqueued before the call has run; returns the latched error. */
hal_status_t trn_stream_synchronize(void *stream)
{
    trn_stream_t *s = stream;
    wait_completed(s, atomic_load_explicit(&s->submitted, memory_order_acquire));
    return trn_stream_latched(s);
}

/* Makes later work wait for the event version current now; a no-op if that version has
 * completed or the event was never recorded. */
hal_status_t trn_stream_wait_event(void *stream, void *event_)
{
    trn_event_t *event = event_;
    uint64_t version = atomic_load_explicit(&event->recorded, memory_order_acquire);
    if (version == 0 || atomic_load_explicit(&event->completed, memory_order_acquire) >= version)
        return HAL_OK;
    trn_task_t task = { .kind = TRN_TASK_WAIT };
    task.u.event.event = event;
    task.u.event.version = version;
    trn_event_ref(event);
    hal_status_t st = trn_stream_submit(stream, &task);
    if (st != HAL_OK)
        trn_event_unref(event);
    return st;
}

/* A host callback runs even on a failed stream and is told the error. */
hal_status_t trn_stream_add_callback(void *stream, hal_host_fn_t fn, void *user_data)
{
    trn_task_t task = { .kind = TRN_TASK_CALLBACK };
    task.u.callback.fn = fn;
    task.u.callback.user_data = user_data;
    return trn_stream_submit(stream, &task);
}

/* A host function in stream order, without an execution slot (it may block on peers); it runs
 * even on a failed stream, and a non-OK return latches with the detail it left. */
hal_status_t trn_stream_launch_host_fn(void *stream, hal_stream_host_fn_t fn, void *arg)
{
    trn_task_t task = { .kind = TRN_TASK_HOST_FN };
    task.u.host_fn.fn = fn;
    task.u.host_fn.arg = arg;
    return trn_stream_submit(stream, &task);
}

/* libnrt has no stream object: its calls are synchronous, and the ordering lives in the
 * backend's worker threads. */
hal_status_t trn_stream_get_native_handle(void *stream, uintptr_t *native)
{
    trn_stream_t *s = stream;
    trn_set_error(s->device->backend,
                  "libnrt has no stream object (its calls are synchronous; the backend orders "
                  "them on a worker thread per stream)");
    return HAL_ERROR_UNSUPPORTED;
}

/* Waits for the work enqueued so far on every stream of the core and returns the first latched
 * error (streams in creation order). Streams are pinned with a reference so that a concurrent
 * stream_destroy cannot free one under us, and the list lock is not held while waiting. */
hal_status_t trn_device_synchronize(void *device_)
{
    trn_device_t *device = device_;
    enum { INLINE = 16 };
    trn_stream_t *inline_streams[INLINE];
    uint64_t inline_targets[INLINE];
    trn_stream_t **streams = inline_streams;
    uint64_t *targets = inline_targets;

    pthread_mutex_lock(&device->streams_lock);
    uint32_t n = device->stream_count;
    if (n > INLINE) {
        streams = malloc(n * sizeof(*streams));
        targets = malloc(n * sizeof(*targets));
        if (streams == NULL || targets == NULL) {
            pthread_mutex_unlock(&device->streams_lock);
            free(streams);
            free(targets);
            trn_set_error(device->backend, "malloc failed listing %u streams", n);
            return HAL_ERROR_OUT_OF_HOST_MEMORY;
        }
    }
    uint32_t i = 0;
    for (trn_stream_t *s = device->streams; s != NULL; s = s->dev_next, i++) {
        atomic_fetch_add(&s->refcount, 1);
        streams[i] = s;
        targets[i] = atomic_load_explicit(&s->submitted, memory_order_acquire);
    }
    pthread_mutex_unlock(&device->streams_lock);

    hal_status_t first = HAL_OK;
    for (i = 0; i < n; i++) {
        wait_completed(streams[i], targets[i]);
        if (first == HAL_OK)
            first = trn_stream_latched(streams[i]);
        trn_stream_unref(streams[i]);
    }
    if (streams != inline_streams) {
        free(streams);
        free(targets);
    }
    if (first == HAL_OK)
        first = trn_device_check_lost(device);
    return first;
}
