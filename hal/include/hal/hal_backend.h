/* SPDX-License-Identifier: Apache-2.0 */
/* torch-hal public API: loading backends. */
#ifndef HAL_BACKEND_H
#define HAL_BACKEND_H

#include "hal/hal_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reports the version of the HAL library (HAL_MAKE_VERSION layout).
 * [out] version  receives the version.
 * Returns: HAL_OK; HAL_ERROR_INVALID_ARGUMENT if version is NULL.
 * Thread safety: safe. */
HAL_API hal_status_t hal_get_api_version(uint32_t *version);

/* Opens a backend and its devices.
 * [in]  name_or_path  a backend name ("cpu") or a path to a backend library (contains '/').
 *                     A name is looked up as libhal_backend_<name>.so in each directory of
 *                     HAL_BACKEND_PATH (':'-separated), then next to the HAL library, then by
 *                     the dynamic loader's search path.
 * [out] backend       receives the handle.
 * Opening a backend that is already open returns the same handle and counts a reference;
 * every successful open needs one hal_backend_close.
 * Layers named in HAL_LAYERS (comma-separated; "validation", "trace", "faults"; see
 * hal/layers/README.md) are enabled on the first open.
 * Returns: HAL_OK; HAL_ERROR_INVALID_ARGUMENT (NULL or empty argument, name too long, bad
 * HAL_LAYERS, HAL_FAULTS or HAL_TRACE_FILE); HAL_ERROR_NOT_FOUND (no such library, no entry
 * symbol, or no directory for HAL_TRACE_FILE); HAL_ERROR_PERMISSION_DENIED (the library or its
 * directory is world-writable, or the trace layer refuses HAL_TRACE_FILE);
 * HAL_ERROR_VERSION_MISMATCH (the backend implements another major version, its ops table is
 * shorter than its version needs or leaves a required slot NULL, or a device advertises a
 * capability without the slots it needs; the message names the slot);
 * HAL_ERROR_BACKEND_SPECIFIC (a device's node position, hal_device_properties_t.node_index,
 * contradicts the others'); any status the backend's initialisation returns (e.g.
 * HAL_ERROR_DEVICE_LOST).
 * fork(): a child does not inherit open backends. Every handle the parent had (backends,
 * devices, streams, events, communicators, programs, kernels) is refused in the child with
 * HAL_ERROR_INVALID_HANDLE naming fork(), and its allocations are unknown pointers; the child
 * opens the backend again to use a device.
 * Thread safety: safe. */
HAL_API hal_status_t hal_backend_open(const char *name_or_path, hal_backend_t *backend);

/* What a backend library says of itself, read without initialising it (hal_backend_probe). */
typedef struct hal_backend_info {
    size_t struct_size;
    const void *next;
    char name[HAL_BACKEND_NAME_MAX];             /* "cpu", "trainium" */
    char device_type_name[HAL_BACKEND_NAME_MAX]; /* what frameworks call its devices: "neuron" */
    uint32_t api_version;                        /* the HAL API version it implements */
    uint32_t flags;                              /* HAL_BACKEND_FLAG_* */
} hal_backend_info_t;

#define HAL_BACKEND_INFO_INIT                     \
    {                                             \
        .struct_size = sizeof(hal_backend_info_t) \
    }

/* Finds and checks a backend library exactly as hal_backend_open does (search path, locations,
 * version, ops table) and reports what it says of itself, without initialising it: no device is
 * touched or claimed. A framework uses it to decide whether to open the backend at all (e.g.
 * HAL_BACKEND_FLAG_EXCLUSIVE_DEVICES in a launcher process).
 * [in]     name_or_path  as for hal_backend_open.
 * [in,out] info          struct_size must be set (HAL_BACKEND_INFO_INIT).
 * Returns: HAL_OK; HAL_ERROR_INVALID_ARGUMENT (NULL or empty argument, name too long, info's
 * struct_size too small); HAL_ERROR_NOT_FOUND; HAL_ERROR_PERMISSION_DENIED;
 * HAL_ERROR_VERSION_MISMATCH (as hal_backend_open).
 * Thread safety: safe. */
HAL_API hal_status_t hal_backend_probe(const char *name_or_path, hal_backend_info_t *info);

/* Drops one reference to a backend; the last one closes it: all streams are drained, streams
 * and events the application did not destroy are destroyed, memory it did not free is freed,
 * devices are closed and the library is unloaded. Every handle of the backend is invalid
 * afterwards (HAL_ERROR_INVALID_HANDLE). With HAL_LAYERS=validation each object or allocation
 * left behind is reported on stderr as a leak and counted (hal_validation_get_leak_count).
 * [in] backend  the handle.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE.
 * Thread safety: safe, but no other thread may use the backend's objects concurrently. */
HAL_API hal_status_t hal_backend_close(hal_backend_t backend);

/* Lists the backend names found in the search locations of hal_backend_open.
 * [out] names     array of capacity entries receiving NUL-terminated names (may be NULL if
 *                 capacity is 0).
 * [in]  capacity  entries in names.
 * [out] count     receives the number of backends found (may exceed capacity).
 * Returns: HAL_OK; HAL_ERROR_INVALID_ARGUMENT (count NULL, or names NULL with capacity > 0).
 * Thread safety: safe. */
typedef struct hal_backend_name {
    char name[HAL_BACKEND_NAME_MAX];
} hal_backend_name_t;
HAL_API hal_status_t hal_backend_list_available(hal_backend_name_t *names, size_t capacity,
                                                size_t *count);

/* Reports a backend's identity.
 * [in]  backend      the handle.
 * [out] name         receives the backend name ("cpu"); static for the backend's lifetime.
 * [out] device_name  optional; the device-type name frameworks should use ("hal", "neuron").
 * [out] api_version  optional; the HAL API version the backend implements.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (name NULL).
 * Thread safety: safe. */
HAL_API hal_status_t hal_backend_get_info(hal_backend_t backend, const char **name,
                                          const char **device_name, uint32_t *api_version);

/* Number of objects and allocations the validation layer found leaked so far in this process
 * (reported when their backend closed). 0 when the layer is off.
 * [out] count  receives the count.
 * Returns: HAL_OK; HAL_ERROR_INVALID_ARGUMENT (count NULL).
 * Thread safety: safe. */
HAL_API hal_status_t hal_validation_get_leak_count(uint64_t *count);

#ifdef __cplusplus
}
#endif

#endif /* HAL_BACKEND_H */
