/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: versioned events.
 *
 * event_record bumps `recorded` when it is called and enqueues a task carrying that version;
 * the task raises `completed` when the stream reaches it. A wait binds to `recorded` at the
 * time of the wait call; a never-recorded event (version 0) is complete. Versions may complete
 * out of order across streams, so "complete" means completed >= version; the status and
 * timestamp kept are those of version `completed`. Timestamps are taken on the host when the
 * worker reaches the record, which is after every earlier runtime call of the stream returned.
 *
 * Queued records and waits hold references, so event_destroy only drops the owner's one. */
#include <stdlib.h>

#include "hal_backends/trainium/trn_internal.h"

void trn_event_ref(trn_event_t *event)
{
    atomic_fetch_add_explicit(&event->refcount, 1, memory_order_relaxed);
}

void trn_event_unref(trn_event_t *event)
{
    if (atomic_fetch_sub_explicit(&event->refcount, 1, memory_order_acq_rel) == 1) {
        pthread_cond_destroy(&event->cv);
        pthread_mutex_destroy(&event->lock);
        free(event);
    }
}

void trn_event_complete(trn_event_t *event, uint64_t version, hal_status_t status)
{
    uint64_t now = trn_now_ns();
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

void trn_event_wait_version(trn_event_t *event, uint64_t version)
{
    if (atomic_load_explicit(&event->completed, memory_order_acquire) >= version)
        return;
    pthread_mutex_lock(&event->lock);
    event->waiters++;
    while (atomic_load_explicit(&event->completed, memory_order_relaxed) < version)
        pthread_cond_wait(&event->cv, &event->lock);
    event->waiters--;
    pthread_mutex_unlock(&event->lock);
}

hal_status_t trn_event_create(void *device_, uint32_t flags, void **out)
{
    trn_device_t *device = device_;
    trn_event_t *event = calloc(1, sizeof(*event));
    if (event == NULL) {
        trn_set_error(device->backend, "calloc(%zu) failed for an event", sizeof(*event));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    event->device = device;
    event->flags = flags;
    event->status = HAL_OK;
    atomic_init(&event->refcount, 1);
    atomic_init(&event->recorded, 0);
    atomic_init(&event->completed, 0);
    if (pthread_mutex_init(&event->lock, NULL) != 0) {
        trn_set_error(device->backend, "pthread_mutex_init failed for an event");
        goto out_free;
    }
    if (pthread_cond_init(&event->cv, NULL) != 0) {
        trn_set_error(device->backend, "pthread_cond_init failed for an event");
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
void trn_event_destroy(void *event)
{
    trn_event_unref(event);
}

/* Bumps the version and enqueues its completion. The version is published only once the task
 * is queued, so a failed enqueue leaves the event as it was. */
hal_status_t trn_event_record(void *event_, void *stream)
{
    trn_event_t *event = event_;
    uint64_t version = atomic_load_explicit(&event->recorded, memory_order_relaxed) + 1;
    trn_task_t task = { .kind = TRN_TASK_RECORD };
    task.u.event.event = event;
    task.u.event.version = version;
    trn_event_ref(event);
    hal_status_t st = trn_stream_submit(stream, &task);
    if (st != HAL_OK) {
        trn_event_unref(event);
        return st;
    }
    atomic_store_explicit(&event->recorded, version, memory_order_release);
    return HAL_OK;
}

/* Status of the completed current version, with its detail reported to the caller. */
static hal_status_t completed_status(trn_event_t *event)
{
    pthread_mutex_lock(&event->lock);
    hal_status_t st = event->status;
    pthread_mutex_unlock(&event->lock);
    if (st != HAL_OK)
        trn_set_error(event->device->backend,
                      "the recording stream had failed with %s before it reached the event",
                      trn_status_hal_name(st));
    return st;
}

hal_status_t trn_event_query(void *event_)
{
    trn_event_t *event = event_;
    uint64_t version = atomic_load_explicit(&event->recorded, memory_order_acquire);
    if (version == 0)
        return HAL_OK;
    if (atomic_load_explicit(&event->completed, memory_order_acquire) < version)
        return HAL_NOT_READY;
    return completed_status(event);
}

hal_status_t trn_event_synchronize(void *event_)
{
    trn_event_t *event = event_;
    uint64_t version = atomic_load_explicit(&event->recorded, memory_order_acquire);
    if (version == 0)
        return HAL_OK;
    trn_event_wait_version(event, version);
    return completed_status(event);
}

/* Checks that an event can be timed: created with HAL_EVENT_FLAG_TIMING and recorded. */
static hal_status_t check_timing(const trn_event_t *event, const char *which)
{
    if ((event->flags & HAL_EVENT_FLAG_TIMING) == 0) {
        trn_set_error(event->device->backend,
                      "the %s event was created without HAL_EVENT_FLAG_TIMING", which);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    if (atomic_load_explicit(&event->recorded, memory_order_acquire) == 0) {
        trn_set_error(event->device->backend, "the %s event was never recorded", which);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    return HAL_OK;
}

/* Reads the timestamp of the current version; HAL_NOT_READY if it has not completed. */
static hal_status_t read_time(trn_event_t *event, const char *which, uint64_t *time_ns)
{
    uint64_t version = atomic_load_explicit(&event->recorded, memory_order_acquire);
    pthread_mutex_lock(&event->lock);
    bool done = atomic_load_explicit(&event->completed, memory_order_relaxed) >= version;
    *time_ns = event->time_ns;
    pthread_mutex_unlock(&event->lock);
    if (!done) {
        trn_set_error(event->device->backend, "the %s event has not completed yet", which);
        return HAL_NOT_READY;
    }
    return HAL_OK;
}

/* Milliseconds from start to end (negative if end completed first). Invalid arguments are
 * reported before incompleteness, so the answer does not depend on timing. */
hal_status_t trn_event_elapsed_ms(void *start, void *end, float *ms)
{
    uint64_t t0 = 0, t1 = 0;
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

/* libnrt 2.30's synchronous API has no event object (the experimental async API's sequence
 * numbers are per execution unit, not per stream). */
hal_status_t trn_event_get_native_handle(void *event, uintptr_t *native)
{
    trn_event_t *e = event;
    trn_set_error(e->device->backend,
                  "libnrt has no event object; events are kept by the backend's stream workers");
    return HAL_ERROR_UNSUPPORTED;
}
