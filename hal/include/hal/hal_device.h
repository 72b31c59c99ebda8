/* SPDX-License-Identifier: Apache-2.0 */
/* torch-hal public API: devices. */
#ifndef HAL_DEVICE_H
#define HAL_DEVICE_H

#include "hal/hal_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of devices a backend exposes.
 * [in]  backend  the handle.
 * [out] count    receives the count (0 when the backend has no usable device).
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (count NULL).
 * Thread safety: safe. */
HAL_API hal_status_t hal_device_count(hal_backend_t backend, uint32_t *count);

/* Gets the device with the given ordinal. Devices live as long as their backend.
 * [in]  backend  the handle.
 * [in]  index    0 <= index < count.
 * [out] device   receives the device.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (index out of range,
 * device NULL).
 * Thread safety: safe. */
HAL_API hal_status_t hal_device_get(hal_backend_t backend, uint32_t index, hal_device_t *device);

/* Reports a device's properties.
 * [in]     device  the handle.
 * [in,out] props   struct_size must be set; fields beyond it are left untouched.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (props NULL or
 * struct_size smaller than the version-1.0 struct).
 * Thread safety: safe. */
HAL_API hal_status_t hal_device_get_properties(hal_device_t device, hal_device_properties_t *props);

/* Returns the backend that owns a device.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (backend NULL).
 * Thread safety: safe. */
HAL_API hal_status_t hal_device_get_backend(hal_device_t device, hal_backend_t *backend);

/* Sets the calling thread's current device (any backend). NULL clears it.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE (a non-NULL handle that is not a live device).
 * Thread safety: safe; the setting is thread-local. */
HAL_API hal_status_t hal_set_current_device(hal_device_t device);

/* Gets the calling thread's current device.
 * [out] device  receives the device, or NULL if none was set (or its backend was closed).
 * Returns: HAL_OK; HAL_ERROR_INVALID_ARGUMENT (device NULL).
 * Thread safety: safe; the setting is thread-local. */
HAL_API hal_status_t hal_get_current_device(hal_device_t *device);

/* Blocks until all work on all streams of the device has completed.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; the first error latched on any of the device's
 * streams (e.g. HAL_ERROR_DEVICE_LOST).
 * Thread safety: safe. */
HAL_API hal_status_t hal_device_synchronize(hal_device_t device);

/* Reports raw-allocation statistics for a device (see hal_mem_stats_t).
 * [in,out] stats  struct_size must be set.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (stats NULL or too
 * small).
 * Thread safety: safe. */
HAL_API hal_status_t hal_device_get_mem_stats(hal_device_t device, hal_mem_stats_t *stats);

/* Resets device_peak_bytes_in_use to the current value.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE.
 * Thread safety: safe. */
HAL_API hal_status_t hal_device_reset_peak_mem_stats(hal_device_t device);

/* Returns the backend's native device handle (e.g. a CUDA ordinal, a NeuronCore index).
 * [out] native  receives the value.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (native NULL);
 * HAL_ERROR_UNSUPPORTED if the backend has none.
 * Thread safety: safe. */
HAL_API hal_status_t hal_device_get_native_handle(hal_device_t device, uintptr_t *native);

#ifdef __cplusplus
}
#endif

#endif /* HAL_DEVICE_H */
