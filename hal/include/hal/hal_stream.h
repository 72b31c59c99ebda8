/* SPDX-License-Identifier: Apache-2.0 */
/* torch-hal public API: streams and events.
 *
 * A stream is an in-order queue of work on one device; enqueue calls return immediately.
 * Events are versioned, exactly as PyTorch's DeviceGuardImplInterface expects: each record
 * bumps the event's version; hal_stream_wait_event waits for the version current at the time of
 * the call; an event that was never recorded counts as complete. */
#ifndef HAL_STREAM_H
#define HAL_STREAM_H

#include "hal/hal_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates a stream.
 * [in]  device    the device.
 * [in]  priority  stream_priority_greatest <= priority <= stream_priority_least (0 = default);
 *                 when more streams have work than the device can run at once, higher-priority
 *                 (numerically lower) streams go first.
 * [out] stream    receives the handle.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (stream NULL, priority
 * out of range); HAL_ERROR_OUT_OF_HOST_MEMORY; a backend resource error.
 * Thread safety: safe. */
HAL_API hal_status_t hal_stream_create(hal_device_t device, int32_t priority, hal_stream_t *stream);

/* Gets the device's default stream (created with the device, priority 0, not destroyable).
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (stream NULL).
 * Thread safety: safe. */
HAL_API hal_status_t hal_device_get_default_stream(hal_device_t device, hal_stream_t *stream);

/* Waits for the stream's pending work, then destroys it. The handle is invalid afterwards.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (the default stream);
 * the stream's latched error (it is destroyed anyway).
 * Thread safety: not with other calls on the same stream. */
HAL_API hal_status_t hal_stream_destroy(hal_stream_t stream);

/* Reports whether all enqueued work has completed.
 * Returns: HAL_OK (idle); HAL_NOT_READY (work pending); HAL_ERROR_INVALID_HANDLE; the stream's
 * latched error.
 * Thread safety: safe. */
HAL_API hal_status_t hal_stream_query(hal_stream_t stream);

/* Blocks until all work enqueued so far has completed.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; the stream's latched error.
 * Thread safety: safe. */
HAL_API hal_status_t hal_stream_synchronize(hal_stream_t stream);

/* Makes later work on `stream` wait until `event` reaches the version current at this call.
 * Waiting on a never-recorded event is a no-op. The event may belong to another device of the
 * same backend.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (objects of different
 * backends).
 * Thread safety: safe for different streams; calls on one stream need external ordering. */
HAL_API hal_status_t hal_stream_wait_event(hal_stream_t stream, hal_event_t event);

/* Enqueues a host function; it runs on a HAL thread once the preceding work has completed, and
 * later work on the stream waits for it to return. It must not call HAL functions on the same
 * stream or block on work enqueued after it. It runs even if the stream failed, and is told so.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (fn NULL);
 * HAL_ERROR_UNSUPPORTED (no HAL_DEVICE_CAP_HOST_CALLBACKS).
 * Thread safety: as hal_stream_wait_event. */
HAL_API hal_status_t hal_stream_add_callback(hal_stream_t stream, hal_host_fn_t fn,
                                             void *user_data);

/* Reports a stream's device and priority (either out-parameter may be NULL).
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE.
 * Thread safety: safe. */
HAL_API hal_status_t hal_stream_get_info(hal_stream_t stream, hal_device_t *device,
                                         int32_t *priority);

/* Returns the backend's native stream handle (e.g. a cudaStream_t).
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (native NULL);
 * HAL_ERROR_UNSUPPORTED if the backend has none.
 * Thread safety: safe. */
HAL_API hal_status_t hal_stream_get_native_handle(hal_stream_t stream, uintptr_t *native);

/* Creates an event.
 * [in]  device  the device whose streams may record it.
 * [in]  flags   HAL_EVENT_FLAG_NONE or HAL_EVENT_FLAG_TIMING.
 * [out] event   receives the handle.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (event NULL, unknown
 * flags); HAL_ERROR_UNSUPPORTED (timing without HAL_DEVICE_CAP_TIMING_EVENTS);
 * HAL_ERROR_OUT_OF_HOST_MEMORY.
 * Thread safety: safe. */
HAL_API hal_status_t hal_event_create(hal_device_t device, uint32_t flags, hal_event_t *event);

/* Destroys an event. Streams already waiting on it are not affected.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE.
 * Thread safety: not with other calls on the same event. */
HAL_API hal_status_t hal_event_destroy(hal_event_t event);

/* Records the event on a stream: bumps its version; the new version completes when the stream
 * reaches this point.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (the stream is on
 * another device than the event).
 * Thread safety: not with other record calls on the same event; safe with query/synchronize. */
HAL_API hal_status_t hal_event_record(hal_event_t event, hal_stream_t stream);

/* Reports whether the event's current version has completed.
 * Returns: HAL_OK (complete, or never recorded); HAL_NOT_READY; HAL_ERROR_INVALID_HANDLE; the
 * error latched on the recording stream before the event was reached.
 * Thread safety: safe. */
HAL_API hal_status_t hal_event_query(hal_event_t event);

/* Blocks until the version current at the call has completed.
 * Returns: as hal_event_query, never HAL_NOT_READY.
 * Thread safety: safe. */
HAL_API hal_status_t hal_event_synchronize(hal_event_t event);

/* Milliseconds between two completed timing events (end - start; may be negative).
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (ms NULL, an event
 * without HAL_EVENT_FLAG_TIMING or never recorded, events of different devices);
 * HAL_NOT_READY (either has not completed).
 * Thread safety: safe. */
HAL_API hal_status_t hal_event_elapsed_ms(hal_event_t start, hal_event_t end, float *ms);

/* Returns the backend's native event handle.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (native NULL);
 * HAL_ERROR_UNSUPPORTED if the backend has none.
 * Thread safety: safe. */
HAL_API hal_status_t hal_event_get_native_handle(hal_event_t event, uintptr_t *native);

#ifdef __cplusplus
}
#endif

#endif /* HAL_STREAM_H */
