/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: streams. Each stream is a worker thread draining a FIFO of task nodes.
 *
 * Hot path: enqueueing takes the stream lock once, reuses a node from the stream's free list
 * (nodes come in chunks and are only freed with the stream), appends it and bumps `submitted`;
 * the worker is signalled only if it sleeps. The worker spins HAL_CPU_SPIN_US on `submitted`
 * before sleeping, returns a finished node and pops the next one under a single lock, and
 * publishes `completed` for synchronize, which spins the same way before sleeping.
 *
 * Errors latch: the first task that fails stores its status and message; later data tasks are
 * skipped, event records still complete (carrying the status) and callbacks run with it. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/cpu/cpu_internal.h"

/* The stream whose task the calling worker is running (for cpu_task_error). */
static _Thread_local cpu_stream_t *tls_current_stream;

/* ---- lifetime ------------------------------------------------------------------------------ */

static void stream_free(cpu_stream_t *s)
{
    cpu_task_chunk_t *chunk = s->chunks;
    while (chunk != NULL) {
        cpu_task_chunk_t *next = chunk->next;
        free(chunk);
        chunk = next;
    }
    pthread_cond_destroy(&s->sched_cv);
    pthread_cond_destroy(&s->idle_cv);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Drops a reference; the last one frees the stream (its worker has exited by then). */
void cpu_stream_unref(cpu_stream_t *stream)
{
    if (atomic_fetch_sub(&stream->refcount, 1) == 1)
        stream_free(stream);
}

/* Threads a fresh chunk of nodes onto the free list. Caller holds the lock. */
static void add_chunk_locked(cpu_stream_t *s, cpu_task_chunk_t *chunk)
{
    chunk->next = s->chunks;
    s->chunks = chunk;
    for (size_t i = 0; i < CPU_TASK_CHUNK; i++) {
        chunk->tasks[i].next = s->free_tasks;
        s->free_tasks = &chunk->tasks[i];
    }
}

/* ---- errors -------------------------------------------------------------------------------- */

/* Latches the first error of the stream. Only the worker calls it, so the message is written
 * exactly once, before the release store that readers acquire. */
static void latch_error(cpu_stream_t *s, hal_status_t status, const char *msg)
{
    if (atomic_load_explicit(&s->status, memory_order_relaxed) != HAL_OK)
        return;
    snprintf(s->error_msg, sizeof(s->error_msg), "%s", msg);
    atomic_store_explicit(&s->status, (int)status, memory_order_release);
}

/* Returns the stream's latched error (and reports its detail to the calling thread), or
 * HAL_OK. */
hal_status_t cpu_stream_latched(cpu_stream_t *stream)
{
    hal_status_t st = (hal_status_t)atomic_load_explicit(&stream->status, memory_order_acquire);
    if (st != HAL_OK)
        cpu_set_error(stream->device->backend, "stream failed earlier: %s", stream->error_msg);
    return st;
}

/* Lets a task run through cpu_stream_enqueue_fn explain the error it is about to return; the
 * message is latched with the status. Outside a stream task it does nothing. */
void cpu_task_error(const char *fmt, ...)
{
    cpu_stream_t *s = tls_current_stream;
    if (s == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->task_msg, sizeof(s->task_msg), fmt, ap);
    va_end(ap);
}

/* ---- enqueue ------------------------------------------------------------------------------- */

/* Appends a copy of `task` to the stream's queue. Returns HAL_OK or
 * HAL_ERROR_OUT_OF_HOST_MEMORY (no node could be allocated; nothing was enqueued).
 * Thread safety: safe; concurrent producers are serialised by the stream lock. */
hal_status_t cpu_stream_submit(cpu_stream_t *stream, const cpu_task_t *task)
{
    cpu_stream_t *s = stream;
    pthread_mutex_lock(&s->lock);
    while (s->free_tasks == NULL) {
        /* Cold path: grow outside the lock so the worker keeps going meanwhile. */
        pthread_mutex_unlock(&s->lock);
        cpu_task_chunk_t *chunk = malloc(sizeof(*chunk));
        if (chunk == NULL) {
            cpu_set_error(s->device->backend, "malloc(%zu) failed for stream task nodes",
                          sizeof(*chunk));
            return HAL_ERROR_OUT_OF_HOST_MEMORY;
        }
        pthread_mutex_lock(&s->lock);
        add_chunk_locked(s, chunk);
    }
    cpu_task_t *t = s->free_tasks;
    s->free_tasks = t->next;
    *t = *task;
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

/* Enqueues fn(arg, stream_status) to run on the stream's worker in stream order: the building
 * block for work that is neither a copy nor a callback (e.g. collectives). Unless flags has
 * CPU_TASK_RUN_ON_ERROR it is skipped once an error latched, and enqueueing on a failed stream
 * returns that error. Unless flags has CPU_TASK_NO_SLOT it holds an execution slot while it
 * runs. A non-OK return from fn latches on the stream.
 * Thread safety: as cpu_stream_submit. */
hal_status_t cpu_stream_enqueue_fn(cpu_stream_t *stream, cpu_task_fn_t fn, void *arg,
                                   uint32_t flags)
{
    if ((flags & CPU_TASK_RUN_ON_ERROR) == 0) {
        hal_status_t st = cpu_stream_latched(stream);
        if (st != HAL_OK)
            return st;
    }
    cpu_task_t task = { .kind = CPU_TASK_FN, .flags = flags };
    task.u.run.fn = fn;
    task.u.run.arg = arg;
    return cpu_stream_submit(stream, &task);
}

/* Runs a HAL host function in stream order (the core's collectives run in one). It runs even
 * after an error latched, and is told the error: the function decides what a failed stream means
 * for it (a collective must still meet its peers or tell them it gives up). It holds no execution
 * slot, because it blocks until its peers arrive, and peers on this device need the slots to
 * reach the same point. A non-OK return latches with the detail the function left through the
 * core (host->take_error()).
 * Thread safety: as cpu_stream_submit. */
hal_status_t cpu_stream_launch_host_fn(void *stream, hal_stream_host_fn_t fn, void *arg)
{
    return cpu_stream_enqueue_fn(stream, fn, arg,
                                 CPU_TASK_RUN_ON_ERROR | CPU_TASK_NO_SLOT | CPU_TASK_HOST_FN);
}

/* Enqueues a task that fails the stream with `status` when reached, as a device fault would.
 * `detail` must stay valid until the task ran (a string literal, typically). Used by tests and
 * fault injection. */
hal_status_t cpu_stream_inject_error(cpu_stream_t *stream, hal_status_t status, const char *detail)
{
    cpu_task_t task = { .kind = CPU_TASK_FAIL };
    task.u.fail.status = status;
    task.u.fail.detail = detail;
    return cpu_stream_submit(stream, &task);
}

/* ---- the worker ---------------------------------------------------------------------------- */

static void run_task(cpu_stream_t *s, cpu_task_t *t)
{
    /* Only this thread writes the status, so a relaxed load sees the latest value. */
    hal_status_t st = (hal_status_t)atomic_load_explicit(&s->status, memory_order_relaxed);
    cpu_sched_t *sched = &s->device->sched;
    switch (t->kind) {
    case CPU_TASK_MEMCPY:
        if (st == HAL_OK) {
            cpu_sched_acquire(sched, s->priority, &s->sched_cv);
            memcpy(t->u.copy.dst, t->u.copy.src, t->u.copy.n);
            cpu_sched_release(sched);
        }
        break;
    case CPU_TASK_MEMSET:
        if (st == HAL_OK) {
            cpu_sched_acquire(sched, s->priority, &s->sched_cv);
            memset(t->u.set.dst, t->u.set.value, t->u.set.n);
            cpu_sched_release(sched);
        }
        break;
    case CPU_TASK_RECORD:
        /* Bookkeeping only: needs no slot, and completes even on a failed stream so that
         * nobody waiting on the event hangs. */
        cpu_event_complete(t->u.event.event, t->u.event.version, st);
        cpu_event_unref(t->u.event.event);
        break;
    case CPU_TASK_WAIT:
        /* Waits without a slot: a blocked stream must not starve the device. */
        cpu_event_wait_version(t->u.event.event, t->u.event.version);
        cpu_event_unref(t->u.event.event);
        break;
    case CPU_TASK_CALLBACK:
        cpu_sched_acquire(sched, s->priority, &s->sched_cv);
        t->u.callback.fn(st, t->u.callback.user_data);
        cpu_sched_release(sched);
        break;
    case CPU_TASK_FN:
        if (st == HAL_OK || (t->flags & CPU_TASK_RUN_ON_ERROR) != 0) {
            bool slot = (t->flags & CPU_TASK_NO_SLOT) == 0;
            if (slot)
                cpu_sched_acquire(sched, s->priority, &s->sched_cv);
            s->task_msg[0] = '\0';
            tls_current_stream = s;
            hal_status_t rc = t->u.run.fn(t->u.run.arg, st);
            tls_current_stream = NULL;
            if (slot)
                cpu_sched_release(sched);
            if ((t->flags & CPU_TASK_HOST_FN) != 0) {
                /* A HAL function that failed inside fn left its detail with the core, for this
                 * thread; take it now, before anything else run here can replace it, and always,
                 * so that a detail fn left behind on success cannot be blamed on a later task. */
                const char *detail = cpu_take_host_error(s->device->backend);
                if (rc != HAL_OK && detail != NULL)
                    snprintf(s->task_msg, sizeof(s->task_msg), "%s", detail);
            }
            if (rc != HAL_OK) {
                if (s->task_msg[0] == '\0')
                    snprintf(s->task_msg, sizeof(s->task_msg), "stream task failed with %s",
                             cpu_status_name(rc));
                latch_error(s, rc, s->task_msg);
            }
        }
        break;
    case CPU_TASK_FAIL:
        latch_error(s, t->u.fail.status, t->u.fail.detail);
        break;
    }
}

typedef struct work_probe {
    cpu_stream_t *s;
    uint64_t done;
} work_probe_t;

static bool work_available(const void *arg)
{
    const work_probe_t *p = arg;
    return atomic_load_explicit(&p->s->submitted, memory_order_acquire) != p->done ||
           atomic_load_explicit(&p->s->stopping, memory_order_relaxed);
}

static cpu_task_t *pop_locked(cpu_stream_t *s)
{
    cpu_task_t *t = s->head;
    if (t != NULL) {
        s->head = t->next;
        if (s->head == NULL)
            s->tail = NULL;
    }
    return t;
}

static void *worker_main(void *arg)
{
    cpu_stream_t *s = arg;
    work_probe_t probe = { .s = s, .done = 0 };
    cpu_task_t *task = NULL;
    for (;;) {
        if (task == NULL) {
            cpu_spin_until(work_available, &probe, s->spin_us);
            pthread_mutex_lock(&s->lock);
            while (s->head == NULL && !s->stop) {
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
        task = pop_locked(s);
        pthread_mutex_unlock(&s->lock);
    }
    return NULL;
}

/* ---- synchronisation ----------------------------------------------------------------------- */

typedef struct idle_probe {
    cpu_stream_t *s;
    uint64_t target;
} idle_probe_t;

static bool reached(const void *arg)
{
    const idle_probe_t *p = arg;
    return atomic_load_explicit(&p->s->completed, memory_order_acquire) >= p->target;
}

/* Blocks until the stream has completed `target` tasks (a value `submitted` had), then
 * returns its latched error or HAL_OK. */
hal_status_t cpu_stream_wait_idle(cpu_stream_t *stream, uint64_t target)
{
    idle_probe_t probe = { .s = stream, .target = target };
    if (!cpu_spin_until(reached, &probe, stream->spin_us)) {
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

/* ---- ops slots ----------------------------------------------------------------------------- */

/* Creates a stream and starts its worker thread. */
hal_status_t cpu_stream_create(void *device_, int32_t priority, void **out)
{
    cpu_device_t *device = device_;
    cpu_backend_t *backend = device->backend;
    hal_status_t st = HAL_ERROR_OUT_OF_HOST_MEMORY;
    cpu_stream_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        cpu_set_error(backend, "calloc(%zu) failed for a stream", sizeof(*s));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    s->device = device;
    s->priority = priority;
    s->spin_us = backend->config.spin_us;
    atomic_init(&s->refcount, 1);
    atomic_init(&s->submitted, 0);
    atomic_init(&s->completed, 0);
    atomic_init(&s->status, HAL_OK);
    atomic_init(&s->stopping, false);
    s->wake_at = UINT64_MAX;

    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        cpu_set_error(backend, "pthread_mutex_init failed for a stream");
        goto out_free;
    }
    if (pthread_cond_init(&s->work_cv, NULL) != 0) {
        cpu_set_error(backend, "pthread_cond_init failed for a stream");
        goto out_destroy_lock;
    }
    if (pthread_cond_init(&s->idle_cv, NULL) != 0) {
        cpu_set_error(backend, "pthread_cond_init failed for a stream");
        goto out_destroy_work_cv;
    }
    if (pthread_cond_init(&s->sched_cv, NULL) != 0) {
        cpu_set_error(backend, "pthread_cond_init failed for a stream");
        goto out_destroy_idle_cv;
    }
    cpu_task_chunk_t *chunk = malloc(sizeof(*chunk));
    if (chunk == NULL) {
        cpu_set_error(backend, "malloc(%zu) failed for stream task nodes", sizeof(*chunk));
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
        cpu_set_error(backend, "pthread_create failed for a stream worker: %s", strerror(rc));
        goto out_free_chunks;
    }
    char name[16];
    snprintf(name, sizeof(name), "hal-cpu%u", device->index % 1000u);
    pthread_setname_np(s->thread, name);

    pthread_mutex_lock(&device->streams_lock);
    cpu_stream_t **pos = &device->streams;
    cpu_stream_t *prev = NULL;
    while (*pos != NULL) {
        prev = *pos;
        pos = &(*pos)->dev_next;
    }
    s->dev_prev = prev;
    *pos = s;
    device->stream_count++;
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
    return st;
}

/* Drains the queue, stops and joins the worker, and frees the stream (once no
 * device_synchronize still looks at it). Returns the latched error, if any. */
hal_status_t cpu_stream_destroy(void *stream)
{
    cpu_stream_t *s = stream;
    cpu_device_t *device = s->device;
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    atomic_store(&s->stopping, true);
    if (s->worker_sleeping)
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

    hal_status_t st = cpu_stream_latched(s);
    cpu_stream_unref(s);
    return st;
}

/* HAL_OK when everything enqueued has run, HAL_NOT_READY otherwise, or the latched error. */
hal_status_t cpu_stream_query(void *stream)
{
    cpu_stream_t *s = stream;
    hal_status_t st = cpu_stream_latched(s);
    if (st != HAL_OK)
        return st;
    /* Load submitted first: completed never exceeds it, so completed >= that value means all
     * work enqueued before this call has run. */
    uint64_t submitted = atomic_load_explicit(&s->submitted, memory_order_acquire);
    uint64_t completed = atomic_load_explicit(&s->completed, memory_order_acquire);
    return completed >= submitted ? HAL_OK : HAL_NOT_READY;
}

/* Blocks until the work enqueued before the call has run; returns the latched error. */
hal_status_t cpu_stream_synchronize(void *stream)
{
    cpu_stream_t *s = stream;
    uint64_t target = atomic_load_explicit(&s->submitted, memory_order_acquire);
    cpu_stream_wait_idle(s, target);
    return cpu_stream_latched(s);
}

/* Makes later work wait for the event version current now; a no-op if that version has already
 * completed or the event was never recorded. */
hal_status_t cpu_stream_wait_event(void *stream, void *event_)
{
    cpu_event_t *event = event_;
    uint64_t version = atomic_load_explicit(&event->recorded, memory_order_acquire);
    if (version == 0 || atomic_load_explicit(&event->completed, memory_order_acquire) >= version)
        return HAL_OK;
    cpu_task_t task = { .kind = CPU_TASK_WAIT };
    task.u.event.event = event;
    task.u.event.version = version;
    cpu_event_ref(event);
    hal_status_t st = cpu_stream_submit(stream, &task);
    if (st != HAL_OK)
        cpu_event_unref(event);
    return st;
}

/* Enqueues a host callback; it runs even on a failed stream and receives the error. */
hal_status_t cpu_stream_add_callback(void *stream, hal_host_fn_t fn, void *user_data)
{
    cpu_task_t task = { .kind = CPU_TASK_CALLBACK };
    task.u.callback.fn = fn;
    task.u.callback.user_data = user_data;
    return cpu_stream_submit(stream, &task);
}

/* The native handle is the backend's stream object itself. */
hal_status_t cpu_stream_get_native_handle(void *stream, uintptr_t *native)
{
    *native = (uintptr_t)stream;
    return HAL_OK;
}

/* Waits for the work enqueued so far on every stream of the device and returns the first
 * latched error (streams in creation order). Streams are pinned with a reference so that a
 * concurrent stream_destroy cannot free one under us, and the list lock is not held while
 * waiting so that stream creation (even from a callback) never blocks behind it. */
hal_status_t cpu_device_synchronize(void *device_)
{
    cpu_device_t *device = device_;
    enum { INLINE = 16 };
    cpu_stream_t *inline_streams[INLINE];
    uint64_t inline_targets[INLINE];
    cpu_stream_t **streams = inline_streams;
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
            cpu_set_error(device->backend, "malloc failed listing %u streams", n);
            return HAL_ERROR_OUT_OF_HOST_MEMORY;
        }
    }
    uint32_t i = 0;
    for (cpu_stream_t *s = device->streams; s != NULL; s = s->dev_next, i++) {
        atomic_fetch_add(&s->refcount, 1);
        streams[i] = s;
        targets[i] = atomic_load_explicit(&s->submitted, memory_order_acquire);
    }
    pthread_mutex_unlock(&device->streams_lock);

    hal_status_t first = HAL_OK;
    for (i = 0; i < n; i++) {
        hal_status_t st = cpu_stream_wait_idle(streams[i], targets[i]);
        if (first == HAL_OK && st != HAL_OK)
            first = cpu_stream_latched(streams[i]);
        cpu_stream_unref(streams[i]);
    }
    if (streams != inline_streams) {
        free(streams);
        free(targets);
    }
    return first;
}
