/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: versioned events.
 *
 * event_record bumps `recorded` when it is called and enqueues a task carrying that version;
 * the task raises `completed` when the stream reaches it. A wait binds to `recorded` at the time
 * of the wait call. Versions may complete out of order across streams, so "complete" means
 * completed >= version. The status and timestamp kept are those of version `completed`.
 *
 * Queued records and waits hold references, so event_destroy only drops the owner's one. */
#include <stdlib.h>

#include "hal_backends/cpu/cpu_internal.h"

/* Takes a reference for a queued task. */
void cpu_event_ref(cpu_event_t *event)
{
    atomic_fetch_add_explicit(&event->refcount, 1, memory_order_relaxed);
}

/* Drops a reference; the last one frees the event. */
void cpu_event_unref(cpu_event_t *event)
{
    if (atomic_fetch_sub_explicit(&event->refcount, 1, memory_order_acq_rel) == 1) {
        pthread_cond_destroy(&event->cv);
        pthread_mutex_destroy(&event->lock);
        free(event);
    }
}

/* Marks `version` reached by its stream, with the stream's status at that point. Called by the
 * recording stream's worker. */
void cpu_event_complete(cpu_event_t *event, uint64_t version, hal_status_t status)
{
    uint64_t now = cpu_now_ns();
    pthread_mutex_lock(&event->lock);
    if (version > atomic_load_explicit(&event->completed, memory_order_relaxed)) {
        event->status = status;
        event->time_ns = now;
        atomic_store_explicit(&event->completed, version, memory_order_release);
        if (event->waiters > 0)
            pthread_cond_broadcast(&event->cv);
    }
    pthread_mutex_unlock(&event->lock);
}

typedef struct version_probe {
    const cpu_event_t *event;
    uint64_t version;
} version_probe_t;

static bool version_reached(const void *arg)
{
    const version_probe_t *p = arg;
    return atomic_load_explicit(&p->event->completed, memory_order_acquire) >= p->version;
}

/* Blocks until the event reached `version` (spinning HAL_CPU_SPIN_US first). */
void cpu_event_wait_version(cpu_event_t *event, uint64_t version)
{
    version_probe_t probe = { .event = event, .version = version };
    if (cpu_spin_until(version_reached, &probe, event->spin_us))
        return;
    pthread_mutex_lock(&event->lock);
    event->waiters++;
    while (!version_reached(&probe))
        pthread_cond_wait(&event->cv, &event->lock);
    event->waiters--;
    pthread_mutex_unlock(&event->lock);
}

/* Creates an event with one reference, owned by the caller. */
hal_status_t cpu_event_create(void *device_, uint32_t flags, void **out)
{
    cpu_device_t *device = device_;
    cpu_event_t *event = calloc(1, sizeof(*event));
    if (event == NULL) {
        cpu_set_error(device->backend, "calloc(%zu) failed for an event", sizeof(*event));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    event->device = device;
    event->flags = flags;
    event->spin_us = device->backend->config.spin_us;
    event->status = HAL_OK;
    atomic_init(&event->refcount, 1);
    atomic_init(&event->recorded, 0);
    atomic_init(&event->completed, 0);
    if (pthread_mutex_init(&event->lock, NULL) != 0) {
        cpu_set_error(device->backend, "pthread_mutex_init failed for an event");
        goto out_free;
    }
    if (pthread_cond_init(&event->cv, NULL) != 0) {
        cpu_set_error(device->backend, "pthread_cond_init failed for an event");
        goto out_destroy_lock;
    }
    *out = event;
    return HAL_OK;

out_destroy_lock:
    pthread_mutex_destroy(&event->lock);
out_free:
    free(event);
    return HAL_ERROR_OUT_OF_HOST_MEMORY;
}

/* Drops the owner's reference; queued records and waits keep the object alive. */
void cpu_event_destroy(void *event)
{
    cpu_event_unref(event);
}

/* Bumps the version and enqueues its completion on the stream. The version is published only
 * once the task is queued, so a failed enqueue leaves the event as it was. */
hal_status_t cpu_event_record(void *event_, void *stream)
{
    cpu_event_t *event = event_;
    uint64_t version = atomic_load_explicit(&event->recorded, memory_order_relaxed) + 1;
    cpu_task_t task = { .kind = CPU_TASK_RECORD };
    task.u.event.event = event;
    task.u.event.version = version;
    cpu_event_ref(event);
    hal_status_t st = cpu_stream_submit(stream, &task);
    if (st != HAL_OK) {
        cpu_event_unref(event);
        return st;
    }
    atomic_store_explicit(&event->recorded, version, memory_order_release);
    return HAL_OK;
}

/* Status of a completed current version, with its detail reported to the caller. */
static hal_status_t completed_status(cpu_event_t *event)
{
    pthread_mutex_lock(&event->lock);
    hal_status_t st = event->status;
    pthread_mutex_unlock(&event->lock);
    if (st != HAL_OK)
        cpu_set_error(event->device->backend,
                      "the recording stream had failed with %s before it reached the event",
                      cpu_status_name(st));
    return st;
}

/* HAL_OK if the current version completed (or the event was never recorded), HAL_NOT_READY
 * if not, or the error the recording stream had latched by then. */
hal_status_t cpu_event_query(void *event_)
{
    cpu_event_t *event = event_;
    version_probe_t probe = {
        .event = event,
        .version = atomic_load_explicit(&event->recorded, memory_order_acquire),
    };
    if (probe.version == 0)
        return HAL_OK;
    if (!version_reached(&probe))
        return HAL_NOT_READY;
    return completed_status(event);
}

/* Blocks until the version current at the call completed; returns its status. */
hal_status_t cpu_event_synchronize(void *event_)
{
    cpu_event_t *event = event_;
    uint64_t version = atomic_load_explicit(&event->recorded, memory_order_acquire);
    if (version == 0)
        return HAL_OK;
    cpu_event_wait_version(event, version);
    return completed_status(event);
}

/* Checks that an event can be timed: created with HAL_EVENT_FLAG_TIMING and recorded. */
static hal_status_t check_timing(const cpu_event_t *event, const char *which)
{
    if ((event->flags & HAL_EVENT_FLAG_TIMING) == 0) {
        cpu_set_error(event->device->backend,
                      "the %s event was created without HAL_EVENT_FLAG_TIMING", which);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    if (atomic_load_explicit(&event->recorded, memory_order_acquire) == 0) {
        cpu_set_error(event->device->backend, "the %s event was never recorded", which);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    return HAL_OK;
}

/* Reads the timestamp of the event's current version; HAL_NOT_READY if it has not completed. */
static hal_status_t read_time(cpu_event_t *event, const char *which, uint64_t *time_ns)
{
    uint64_t version = atomic_load_explicit(&event->recorded, memory_order_acquire);
    pthread_mutex_lock(&event->lock);
    bool done = atomic_load_explicit(&event->completed, memory_order_relaxed) >= version;
    *time_ns = event->time_ns;
    pthread_mutex_unlock(&event->lock);
    if (!done) {
        cpu_set_error(event->device->backend, "the %s event has not completed yet", which);
        return HAL_NOT_READY;
    }
    return HAL_OK;
}

/* Milliseconds from start to end (negative if end completed first). Invalid arguments are
 * reported before incompleteness, so the answer does not depend on timing. */
hal_status_t cpu_event_elapsed_ms(void *start, void *end, float *ms)
{
    uint64_t t0, t1;
    hal_status_t st = check_timing(start, "start");
    if (st == HAL_OK)
        st = check_timing(end, "end");
    if (st == HAL_OK)
        st = read_time(start, "start", &t0);
    if (st == HAL_OK)
        st = read_time(end, "end", &t1);
    if (st != HAL_OK)
        return st;
    *ms = (float)((double)(int64_t)(t1 - t0) / 1e6);
    return HAL_OK;
}

/* The native handle is the backend's event object itself. */
hal_status_t cpu_event_get_native_handle(void *event, uintptr_t *native)
{
    *native = (uintptr_t)event;
    return HAL_OK;
}
