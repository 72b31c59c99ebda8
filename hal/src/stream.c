/* SPDX-License-Identifier: Apache-2.0 */
/* Streams front end: creation and destruction with live-object tracking, and the enqueue and
 * query calls, each a handle check and one indirect call into the backend. */
#include "hal/src/core.h"

_Static_assert(sizeof(struct hal_stream_s) <= HAL_HANDLE_MAX_SIZE, "handle size");

hal_status_t hal_stream_create_internal(struct hal_device_s *device, int32_t priority,
                                        bool is_default, hal_stream_t *out)
{
    static const char call[] = "hal_stream_create";
    const hal_backend_ops_t *ops = device->ops;
    struct hal_stream_s *s = hal_handle_alloc(sizeof(*s));
    if (!s)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, ops->name, call, "out of host memory");
    hal_status_t st = HAL_SLOT_CALL(ops, stream_create, device->impl, priority, &s->impl);
    if (st != HAL_OK) {
        hal_handle_release(s, false);
        return hal_finish(st, ops, call);
    }
    s->ops = ops;
    s->device = device;
    s->priority = priority;
    s->is_default = is_default;
    s->obj.magic = HAL_MAGIC_STREAM;
    hal_live_init(&s->link);
    if (!is_default) {
        pthread_mutex_lock(&device->lock);
        hal_live_insert(&device->streams, &s->link, &s->obj);
        pthread_mutex_unlock(&device->lock);
    }
    *out = s;
    return HAL_OK;
}

/* Destroys the backend stream and releases the handle; the caller unlinked it. */
void hal_stream_destroy_internal(struct hal_stream_s *s)
{
    if (s->ops->stream_destroy)
        s->ops->stream_destroy(s->impl);
    hal_handle_release(s, s->device->backend->validate);
}

hal_status_t hal_stream_create(hal_device_t device, int32_t priority, hal_stream_t *stream)
{
    static const char call[] = "hal_stream_create";
    HAL_CHECK_DEVICE(device, call);
    HAL_CHECK_NOT_NULL(stream, device->ops->name, call);
    if (priority > device->props.stream_priority_least ||
        priority < device->props.stream_priority_greatest)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, device->ops->name, call,
                         "priority %d is outside [%d, %d] (greatest, least)", priority,
                         device->props.stream_priority_greatest,
                         device->props.stream_priority_least);
    return hal_stream_create_internal(device, priority, false, stream);
}

hal_status_t hal_device_get_default_stream(hal_device_t device, hal_stream_t *stream)
{
    static const char call[] = "hal_device_get_default_stream";
    HAL_CHECK_DEVICE(device, call);
    HAL_CHECK_NOT_NULL(stream, device->ops->name, call);
    *stream = device->default_stream;
    return HAL_OK;
}

hal_status_t hal_stream_destroy(hal_stream_t stream)
{
    static const char call[] = "hal_stream_destroy";
    HAL_CHECK_STREAM(stream, call);
    const hal_backend_ops_t *ops = stream->ops;
    if (stream->is_default)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
                         "the default stream of device %u cannot be destroyed",
                         stream->device->index);
    struct hal_device_s *d = stream->device;
    pthread_mutex_lock(&d->lock);
    hal_live_remove(&stream->link);
    pthread_mutex_unlock(&d->lock);
    /* Services holding the handle (caching allocators) let go of it once its work is done; the
     * error a failed stream reports comes from stream_destroy below. */
    pthread_mutex_lock(&d->listeners_lock);
    if (d->listeners != NULL) {
        if (ops->stream_synchronize)
            (void)ops->stream_synchronize(stream->impl);
        for (hal_stream_listener_t *l = d->listeners; l != NULL; l = l->next)
            l->retired(l, stream);
    }
    pthread_mutex_unlock(&d->listeners_lock);
    hal_status_t st = ops->stream_destroy ? ops->stream_destroy(stream->impl) : HAL_OK;
    hal_handle_release(stream, d->backend->validate);
    return hal_finish(st, ops, call);
}

hal_status_t hal_stream_query(hal_stream_t stream)
{
    static const char call[] = "hal_stream_query";
    HAL_CHECK_STREAM(stream, call);
    return hal_finish(HAL_SLOT_CALL(stream->ops, stream_query, stream->impl), stream->ops, call);
}

hal_status_t hal_stream_synchronize(hal_stream_t stream)
{
    static const char call[] = "hal_stream_synchronize";
    HAL_CHECK_STREAM(stream, call);
    return hal_finish(HAL_SLOT_CALL(stream->ops, stream_synchronize, stream->impl), stream->ops,
                      call);
}

hal_status_t hal_stream_wait_event(hal_stream_t stream, hal_event_t event)
{
    static const char call[] = "hal_stream_wait_event";
    HAL_CHECK_STREAM(stream, call);
    HAL_CHECK_EVENT(event, call);
    if (event->device->backend != stream->device->backend)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, stream->ops->name, call,
                         "the event belongs to backend '%s', the stream to '%s'", event->ops->name,
                         stream->ops->name);
    return hal_finish(HAL_SLOT_CALL(stream->ops, stream_wait_event, stream->impl, event->impl),
                      stream->ops, call);
}

hal_status_t hal_stream_add_callback(hal_stream_t stream, hal_host_fn_t fn, void *user_data)
{
    static const char call[] = "hal_stream_add_callback";
    HAL_CHECK_STREAM(stream, call);
    HAL_CHECK_NOT_NULL(fn, stream->ops->name, call);
    if (!(stream->device->props.capabilities & HAL_DEVICE_CAP_HOST_CALLBACKS))
        return hal_error(HAL_ERROR_UNSUPPORTED, stream->ops->name, call,
                         "host callbacks are not supported (HAL_DEVICE_CAP_HOST_CALLBACKS)");
    return hal_finish(HAL_SLOT_CALL(stream->ops, stream_add_callback, stream->impl, fn, user_data),
                      stream->ops, call);
}

hal_status_t hal_stream_get_info(hal_stream_t stream, hal_device_t *device, int32_t *priority)
{
    HAL_CHECK_STREAM(stream, "hal_stream_get_info");
    if (device)
        *device = stream->device;
    if (priority)
        *priority = stream->priority;
    return HAL_OK;
}

hal_status_t hal_stream_get_native_handle(hal_stream_t stream, uintptr_t *native)
{
    static const char call[] = "hal_stream_get_native_handle";
    HAL_CHECK_STREAM(stream, call);
    HAL_CHECK_NOT_NULL(native, stream->ops->name, call);
    return hal_finish(HAL_SLOT_CALL(stream->ops, stream_get_native_handle, stream->impl, native),
                      stream->ops, call);
}
