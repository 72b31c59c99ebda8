/* SPDX-License-Identifier: Apache-2.0 */
/* Backend toolkit: versioned events of the host-queue engine.
 *
 * event_record bumps `recorded` when it is called and queues a task carrying that version;
 * the task raises `completed` when the stream reaches it. A wait binds to `recorded` at the time
 * of the wait call; a never-recorded event (version 0) is complete. Versions may complete out of
 * order across streams, so "complete" means completed >= version, and the status and timestamp
 * kept are those of version `completed`. Timestamps are taken on the host when the worker
 * reaches the record, after every earlier task of the stream finished.
 *
 * Queued records and waits hold references, so event_destroy only drops the owner's one. */
#include <stdlib.h>

#include "hal_backends/common/hq_internal.h"

/* ---- references ---------------------------------------------------------------------------- */

void hq_event_ref(hq_event_t *event)
{
    atomic_fetch_add_explicit(&event->refcount, 1, memory_order_relaxed);
}

void hq_event_unref(hq_event_t *event)
{
    if (atomic_fetch_sub_explicit(&event->refcount, 1, memory_order_acq_rel) == 1) {
        pthread_cond_destroy(&event->cv);
        pthread_mutex_destroy(&event->lock);
        free(event);
    }
}

/* ---- completion (stream workers) ----------------------------------------------------------- */

void hq_event_complete(hq_event_t *event, uint64_t version, hal_status_t status)
{
    uint64_t now = hq_now_ns();
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
    const hq_event_t *event;
    uint64_t version;
} version_probe_t;

static bool version_reached(const void *arg)
{
    const version_probe_t *p = arg;
    return atomic_load_explicit(&p->event->completed, memory_order_acquire) >= p->version;
}

void hq_event_wait_version(hq_event_t *event, uint64_t version)
{
    version_probe_t probe = { .event = event, .version = version };
    if (hq_spin_until(version_reached, &probe, event->spin_us))
        return;
    pthread_mutex_lock(&event->lock);
    event->waiters++;
    while (!version_reached(&probe))
        pthread_cond_wait(&event->cv, &event->lock);
    event->waiters--;
    pthread_mutex_unlock(&event->lock);
}

hq_device_t *hq_event_device(const hq_event_t *event)
{
    return event->device;
}

/* ---- ops slots ----------------------------------------------------------------------------- */

hal_status_t hq_event_create(void *device_, uint32_t flags, void **out)
{
    hq_device_t *device = device_;
    if (hq_is_stale(device->generation))
        return hq_stale_error(device, "the device");
    hq_event_t *event = calloc(1, sizeof(*event));
    if (event == NULL) {
        hq_set_error(device->host, "calloc(%zu) failed for an event", sizeof(*event));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    event->device = device;
    event->flags = flags;
    event->spin_us = device->spin_us;
    event->generation = device->generation;
    event->status = HAL_OK;
    atomic_init(&event->refcount, 1);
    atomic_init(&event->recorded, 0);
    atomic_init(&event->completed, 0);
    if (pthread_mutex_init(&event->lock, NULL) != 0) {
        hq_set_error(device->host, "pthread_mutex_init failed for an event");
        goto out_free;
    }
    if (pthread_cond_init(&event->cv, NULL) != 0) {
        hq_set_error(device->host, "pthread_cond_init failed for an event");
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

void hq_event_destroy(void *event_)
{
    hq_event_t *event = event_;
    if (hq_is_stale(event->generation))
        return; /* abandoned: its lock may be held by a thread that does not exist here */
    hq_event_unref(event);
}

hal_status_t hq_event_record(void *event_, void *stream)
{
    hq_event_t *event = event_;
    if (hq_is_stale(event->generation))
        return hq_stale_error(event->device, "the event");
    uint64_t version = atomic_load_explicit(&event->recorded, memory_order_relaxed) + 1;
    hq_task_head_t head = { .kind = HQ_TASK_RECORD };
    head.u.event.event = event;
    head.u.event.version = version;
    hq_event_ref(event);
    hal_status_t st = hq_stream_submit(stream, &head, NULL, 0);
    if (st != HAL_OK) {
        hq_event_unref(event);
        return st;
    }
    atomic_store_explicit(&event->recorded, version, memory_order_release);
    return HAL_OK;
}

hal_status_t hq_stream_wait_event(void *stream, void *event_)
{
    hq_event_t *event = event_;
    if (hq_is_stale(event->generation))
        return hq_stale_error(event->device, "the event");
    uint64_t version = atomic_load_explicit(&event->recorded, memory_order_acquire);
    if (version == 0 || atomic_load_explicit(&event->completed, memory_order_acquire) >= version)
        return HAL_OK;
    hq_task_head_t head = { .kind = HQ_TASK_WAIT };
    head.u.event.event = event;
    head.u.event.version = version;
    hq_event_ref(event);
    hal_status_t st = hq_stream_submit(stream, &head, NULL, 0);
    if (st != HAL_OK)
        hq_event_unref(event);
    return st;
}

/* Status of a completed current version, with its detail reported to the caller. */
static hal_status_t completed_status(hq_event_t *event)
{
    pthread_mutex_lock(&event->lock);
    hal_status_t st = event->status;
    pthread_mutex_unlock(&event->lock);
    if (st != HAL_OK)
        hq_set_error(event->device->host,
                     "the recording stream had failed with %s before it reached the event",
                     hq_status_name(st));
    return st;
}

hal_status_t hq_event_query(void *event_)
{
    hq_event_t *event = event_;
    if (hq_is_stale(event->generation))
        return hq_stale_error(event->device, "the event");
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

hal_status_t hq_event_synchronize(void *event_)
{
    hq_event_t *event = event_;
    if (hq_is_stale(event->generation))
        return hq_stale_error(event->device, "the event");
    uint64_t version = atomic_load_explicit(&event->recorded, memory_order_acquire);
    if (version == 0)
        return HAL_OK;
    hq_event_wait_version(event, version);
    return completed_status(event);
}

/* Checks that an event can be timed: created with HAL_EVENT_FLAG_TIMING and recorded. */
static hal_status_t check_timing(const hq_event_t *event, const char *which)
{
    if ((event->flags & HAL_EVENT_FLAG_TIMING) == 0) {
        hq_set_error(event->device->host, "the %s event was created without HAL_EVENT_FLAG_TIMING",
                     which);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    if (atomic_load_explicit(&event->recorded, memory_order_acquire) == 0) {
        hq_set_error(event->device->host, "the %s event was never recorded", which);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    return HAL_OK;
}

/* Reads the timestamp of the event's current version; HAL_NOT_READY if it has not completed. */
static hal_status_t read_time(hq_event_t *event, const char *which, uint64_t *time_ns)
{
    uint64_t version = atomic_load_explicit(&event->recorded, memory_order_acquire);
    pthread_mutex_lock(&event->lock);
    bool done = atomic_load_explicit(&event->completed, memory_order_relaxed) >= version;
    *time_ns = event->time_ns;
    pthread_mutex_unlock(&event->lock);
    if (!done) {
        hq_set_error(event->device->host, "the %s event has not completed yet", which);
        return HAL_NOT_READY;
    }
    return HAL_OK;
}

hal_status_t hq_event_elapsed_ms(void *start_, void *end_, float *ms)
{
    hq_event_t *start = start_, *end = end_;
    if (hq_is_stale(start->generation))
        return hq_stale_error(start->device, "the start event");
    if (hq_is_stale(end->generation))
        return hq_stale_error(end->device, "the end event");
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
