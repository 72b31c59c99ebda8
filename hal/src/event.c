/* SPDX-License-Identifier: Apache-2.0 */
/* Events front end: versioned semantics live in the backends; the core checks handles,
 * devices and flags, and tracks live events for backend close. */
#include "hal/src/core.h"

_Static_assert(sizeof(struct hal_event_s) <= HAL_HANDLE_MAX_SIZE, "handle size");

void hal_event_destroy_internal(struct hal_event_s *e)
{
    if (e->ops->event_destroy)
        e->ops->event_destroy(e->impl);
    hal_handle_release(e, e->device->backend->validate);
}

hal_status_t hal_event_create(hal_device_t device, uint32_t flags, hal_event_t *event)
{
    static const char call[] = "hal_event_create";
    HAL_CHECK_DEVICE(device, call);
    const hal_backend_ops_t *ops = device->ops;
    HAL_CHECK_NOT_NULL(event, ops->name, call);
    if (flags & ~HAL_EVENT_FLAG_TIMING)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call, "unknown flags 0x%x",
                         flags & ~HAL_EVENT_FLAG_TIMING);
    if ((flags & HAL_EVENT_FLAG_TIMING) &&
        !(device->props.capabilities & HAL_DEVICE_CAP_TIMING_EVENTS))
        return hal_error(HAL_ERROR_UNSUPPORTED, ops->name, call,
                         "timing events are not supported (HAL_DEVICE_CAP_TIMING_EVENTS)");
    struct hal_event_s *e = hal_handle_alloc(sizeof(*e));
    if (!e)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, ops->name, call, "out of host memory");
    hal_status_t st = HAL_SLOT_CALL(ops, event_create, device->impl, flags, &e->impl);
    if (st != HAL_OK) {
        hal_handle_release(e, false);
        return hal_finish(st, ops, call);
    }
    e->ops = ops;
    e->device = device;
    e->flags = flags;
    e->obj.magic = HAL_MAGIC_EVENT;
    pthread_mutex_lock(&device->lock);
    hal_live_insert(&device->events, &e->link, &e->obj);
    pthread_mutex_unlock(&device->lock);
    *event = e;
    return HAL_OK;
}

hal_status_t hal_event_destroy(hal_event_t event)
{
    HAL_CHECK_EVENT(event, "hal_event_destroy");
    struct hal_device_s *d = event->device;
    pthread_mutex_lock(&d->lock);
    hal_live_remove(&event->link);
    pthread_mutex_unlock(&d->lock);
    hal_event_destroy_internal(event);
    return HAL_OK;
}

hal_status_t hal_event_record(hal_event_t event, hal_stream_t stream)
{
    static const char call[] = "hal_event_record";
    HAL_CHECK_EVENT(event, call);
    HAL_CHECK_STREAM(stream, call);
    if (stream->device != event->device)
        return hal_error(
            HAL_ERROR_INVALID_ARGUMENT, event->ops->name, call,
            "the event belongs to device %u, the stream to %sdevice %u", event->device->index,
            stream->device->backend == event->device->backend ? "" : "another backend's ",
            stream->device->index);
    return hal_finish(HAL_SLOT_CALL(event->ops, event_record, event->impl, stream->impl),
                      event->ops, call);
}

hal_status_t hal_event_query(hal_event_t event)
{
    static const char call[] = "hal_event_query";
    HAL_CHECK_EVENT(event, call);
    return hal_finish(HAL_SLOT_CALL(event->ops, event_query, event->impl), event->ops, call);
}

hal_status_t hal_event_synchronize(hal_event_t event)
{
    static const char call[] = "hal_event_synchronize";
    HAL_CHECK_EVENT(event, call);
    return hal_finish(HAL_SLOT_CALL(event->ops, event_synchronize, event->impl), event->ops, call);
}

hal_status_t hal_event_elapsed_ms(hal_event_t start, hal_event_t end, float *ms)
{
    static const char call[] = "hal_event_elapsed_ms";
    HAL_CHECK_EVENT(start, call);
    HAL_CHECK_EVENT(end, call);
    const hal_backend_ops_t *ops = start->ops;
    HAL_CHECK_NOT_NULL(ms, ops->name, call);
    if (!(start->flags & end->flags & HAL_EVENT_FLAG_TIMING))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
                         "both events need HAL_EVENT_FLAG_TIMING");
    if (start->device != end->device)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
                         "the events belong to different devices");
    return hal_finish(HAL_SLOT_CALL(ops, event_elapsed_ms, start->impl, end->impl, ms), ops, call);
}

hal_status_t hal_event_get_native_handle(hal_event_t event, uintptr_t *native)
{
    static const char call[] = "hal_event_get_native_handle";
    HAL_CHECK_EVENT(event, call);
    HAL_CHECK_NOT_NULL(native, event->ops->name, call);
    return hal_finish(HAL_SLOT_CALL(event->ops, event_get_native_handle, event->impl, native),
                      event->ops, call);
}
