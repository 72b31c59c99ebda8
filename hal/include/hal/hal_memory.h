/* SPDX-License-Identifier: Apache-2.0 */
/* torch-hal public API: memory. Device memory is an address (void *) that supports offset
 * arithmetic: any pointer inside an allocation may be passed to copies, memset and
 * hal_mem_get_info. */
#ifndef HAL_MEMORY_H
#define HAL_MEMORY_H

#include "hal/hal_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Allocates memory of a kind on (or for) a device.
 * [in]  device     the device.
 * [in]  kind       HAL_MEM_KIND_DEVICE, HAL_MEM_KIND_HOST_PINNED, or HAL_MEM_KIND_SHARED
 *                  (only with HAL_DEVICE_CAP_SHARED_MEMORY).
 * [in]  size       bytes; 0 yields *ptr = NULL and HAL_OK.
 * [in]  alignment  0 for the device default, else a power of two (at most 1 MiB).
 * [out] ptr        receives the address.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (ptr NULL, bad kind or
 * alignment); HAL_ERROR_UNSUPPORTED (kind not supported by the device);
 * HAL_ERROR_OUT_OF_DEVICE_MEMORY; HAL_ERROR_OUT_OF_HOST_MEMORY.
 * Thread safety: safe. */
HAL_API hal_status_t hal_mem_alloc(hal_device_t device, hal_mem_kind_t kind, size_t size,
                                   size_t alignment, void **ptr);

/* Frees an allocation. Like cudaFree it first waits for all work on the owning device, so it is
 * safe while copies are still queued; use hal_mem_free_async or a caching allocator on hot
 * paths. NULL is a no-op.
 * [in] ptr  the base address returned by hal_mem_alloc.
 * Returns: HAL_OK; HAL_ERROR_INVALID_ARGUMENT (ptr is not the base of a live allocation: an
 * interior pointer, a pointer freed already, or one the HAL never allocated); an error latched
 * on the device's streams (the memory is freed anyway).
 * Thread safety: safe. */
HAL_API hal_status_t hal_mem_free(void *ptr);

/* Frees an allocation once the work enqueued on `stream` before this call has completed. The
 * caller must not use the memory afterwards from any stream.
 * [in] ptr     the base address returned by hal_mem_alloc (NULL is a no-op).
 * [in] stream  a stream of the allocation's backend.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (as hal_mem_free, or
 * the stream belongs to another backend); the error that kept the free from being enqueued (the
 * stream's latched error, HAL_ERROR_DEVICE_LOST, HAL_ERROR_OUT_OF_HOST_MEMORY): the memory is
 * then freed at once, after waiting for the device as hal_mem_free does.
 * Thread safety: safe for different streams; calls on one stream need external ordering. */
HAL_API hal_status_t hal_mem_free_async(void *ptr, hal_stream_t stream);

/* Describes the allocation containing ptr (any interior pointer works).
 * [in]     ptr   any address.
 * [in,out] info  struct_size must be set. For memory not allocated through the HAL, kind is
 *                HAL_MEM_KIND_UNREGISTERED and the other fields are zero.
 * Returns: HAL_OK; HAL_ERROR_INVALID_ARGUMENT (info NULL or too small).
 * Thread safety: safe. */
HAL_API hal_status_t hal_mem_get_info(const void *ptr, hal_mem_info_t *info);

/* Enqueues a copy of n bytes. The direction is inferred from the kinds of dst and src: any mix
 * of device memory of the stream's backend, pinned, shared and pageable host memory. Ranges
 * must lie inside their allocations and must not overlap. With pageable host memory the call
 * may return before the copy ran: keep the buffer alive and unchanged until the stream
 * reaches the copy.
 * [in] dst, src  addresses (NULL allowed only when n is 0).
 * [in] n         bytes; 0 is a no-op that still returns HAL_OK.
 * [in] stream    the stream that orders the copy.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (NULL pointer with
 * n > 0, a range past the end of its allocation, overlapping ranges, device memory of another
 * backend); HAL_ERROR_UNSUPPORTED (a device-to-device copy across devices without
 * HAL_DEVICE_CAP_PEER_COPY); a sticky error already latched on the stream.
 * Thread safety: safe for different streams; calls on one stream need external ordering. */
HAL_API hal_status_t hal_memcpy_async(void *dst, const void *src, size_t n, hal_stream_t stream);

/* Enqueues setting n bytes at dst to (uint8_t)value.
 * [in] dst     device, pinned or shared memory of the stream's backend.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (dst NULL with n > 0,
 * unregistered memory, range past the end of the allocation, memory of another backend); a
 * sticky error latched on the stream.
 * Thread safety: as hal_memcpy_async. */
HAL_API hal_status_t hal_memset_async(void *dst, int value, size_t n, hal_stream_t stream);

/* Since 1.1. Creates a handle through which another process on the same host can map the memory
 * from ptr to the end of its allocation (requires HAL_DEVICE_CAP_IPC). The handle stays usable
 * while the allocation lives.
 * [in]  ptr     device memory (base or interior pointer).
 * [out] handle  receives the handle.
 * Returns: HAL_OK; HAL_ERROR_INVALID_ARGUMENT (handle NULL, ptr not device memory allocated
 * through the HAL); HAL_ERROR_UNSUPPORTED (no HAL_DEVICE_CAP_IPC).
 * Thread safety: safe. */
HAL_API hal_status_t hal_mem_ipc_get_handle(const void *ptr, hal_ipc_handle_t *handle);

/* Since 1.1. Maps memory another process exported. The mapping behaves as device memory of
 * `device` (copies, memset, hal_mem_get_info) until hal_mem_ipc_close_handle; it must not be
 * passed to hal_mem_free.
 * [in]  device  a device of the same backend as the exporter's.
 * [in]  handle  from hal_mem_ipc_get_handle in the exporting process.
 * [out] ptr     receives the address (host-dereferenceable if the device is host-addressable).
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (NULL arguments, a
 * malformed or foreign handle, a handle of this process); HAL_ERROR_NOT_FOUND (the exporter or
 * its allocation is gone); HAL_ERROR_UNSUPPORTED (no HAL_DEVICE_CAP_IPC).
 * Thread safety: safe. */
HAL_API hal_status_t hal_mem_ipc_open_handle(hal_device_t device, const hal_ipc_handle_t *handle,
                                             void **ptr);

/* Since 1.1. Unmaps what hal_mem_ipc_open_handle returned (after waiting for the device, like
 * hal_mem_free).
 * Returns: HAL_OK; HAL_ERROR_INVALID_ARGUMENT (not an address returned by
 * hal_mem_ipc_open_handle).
 * Thread safety: safe. */
HAL_API hal_status_t hal_mem_ipc_close_handle(void *ptr);

#ifdef __cplusplus
}
#endif

#endif /* HAL_MEMORY_H */
