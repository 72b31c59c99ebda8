/* SPDX-License-Identifier: Apache-2.0 */
/* Memory front end: allocation and free with statistics, pointer queries, and copies/memset
 * whose pointers are resolved through the allocation map before the backend sees them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/src/core.h"

#define HAL_MAX_ALIGNMENT (1u << 20)

static void stats_add(struct hal_device_s *d, hal_mem_kind_t kind, size_t size)
{
    atomic_fetch_add(&d->alloc_calls, 1);
    switch (kind) {
    case HAL_MEM_KIND_DEVICE: {
        uint64_t now = atomic_fetch_add(&d->device_bytes, size) + size;
        atomic_fetch_add(&d->device_allocs, 1);
        uint64_t peak = atomic_load(&d->device_peak);
        while (now > peak && !atomic_compare_exchange_weak(&d->device_peak, &peak, now)) {
        }
        break;
    }
    case HAL_MEM_KIND_HOST_PINNED:
        atomic_fetch_add(&d->pinned_bytes, size);
        break;
    default:
        atomic_fetch_add(&d->shared_bytes, size);
        break;
    }
}

static void stats_sub(struct hal_device_s *d, hal_mem_kind_t kind, size_t size)
{
    atomic_fetch_add(&d->free_calls, 1);
    switch (kind) {
    case HAL_MEM_KIND_DEVICE:
        atomic_fetch_sub(&d->device_bytes, size);
        atomic_fetch_sub(&d->device_allocs, 1);
        break;
    case HAL_MEM_KIND_HOST_PINNED:
        atomic_fetch_sub(&d->pinned_bytes, size);
        break;
    default:
        atomic_fetch_sub(&d->shared_bytes, size);
        break;
    }
}

hal_status_t hal_mem_alloc(hal_device_t device, hal_mem_kind_t kind, size_t size, size_t alignment,
                           void **ptr)
{
    static const char call[] = "hal_mem_alloc";
    HAL_CHECK_DEVICE(device, call);
    const hal_backend_ops_t *ops = device->ops;
    HAL_CHECK_NOT_NULL(ptr, ops->name, call);
    if (kind != HAL_MEM_KIND_DEVICE && kind != HAL_MEM_KIND_HOST_PINNED &&
        kind != HAL_MEM_KIND_SHARED)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call, "invalid memory kind %d",
                         (int)kind);
    if (alignment & (alignment - 1) || alignment > HAL_MAX_ALIGNMENT)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
                         "alignment %zu is not a power of two of at most %u", alignment,
                         HAL_MAX_ALIGNMENT);
    if (kind == HAL_MEM_KIND_SHARED && !(device->props.capabilities & HAL_DEVICE_CAP_SHARED_MEMORY))
        return hal_error(HAL_ERROR_UNSUPPORTED, ops->name, call,
                         "device %u has no shared memory (HAL_DEVICE_CAP_SHARED_MEMORY)",
                         device->index);
    if (size == 0) {
        *ptr = NULL;
        return HAL_OK;
    }
    void *p = NULL, *cookie = NULL;
    hal_status_t st =
        HAL_SLOT_CALL(ops, mem_alloc, device->impl, kind, size, alignment, &p, &cookie);
    if (st != HAL_OK)
        return hal_finish(st, ops, call);
    hal_alloc_record_t r = {
        .base = p, .size = size, .kind = kind, .device = device, .cookie = cookie
    };
    st = hal_mem_map_insert(&r);
    if (st != HAL_OK) {
        ops->mem_free(device->impl, kind, p, cookie);
        return hal_error(st, ops->name, call,
                         st == HAL_ERROR_INTERNAL ? "the backend returned an address range that "
                                                    "overlaps a live allocation"
                                                  : "out of host memory for the allocation map");
    }
    stats_add(device, kind, size);
    *ptr = p;
    return HAL_OK;
}

/* Gives an allocation back to its backend (statistics are the caller's). */
static hal_status_t release_memory(const hal_alloc_record_t *r, const char *call)
{
    struct hal_device_s *d = r->device;
    if (r->ipc_mapped)
        return hal_finish(HAL_SLOT_CALL(d->ops, mem_ipc_close, d->impl, r->base, r->cookie), d->ops,
                          call);
    hal_status_t st = HAL_SLOT_CALL(d->ops, mem_free, d->impl, r->kind, r->base, r->cookie);
    return hal_finish(st, d->ops, call);
}

hal_status_t hal_mem_release_record(const hal_alloc_record_t *r, const char *call)
{
    if (!r->ipc_mapped)
        stats_sub(r->device, r->kind, r->size);
    return release_memory(r, call);
}

/* Explains why ptr cannot be freed. */
static hal_status_t bad_free(const void *ptr, const char *call)
{
    hal_alloc_record_t r;
    if (hal_mem_map_lookup(ptr, &r)) {
        if (r.base == ptr)
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, r.device->ops->name, call,
                             "%p is already being freed (a stream-ordered free is pending)", ptr);
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, r.device->ops->name, call,
                         "%p is an interior pointer (offset %zu into the allocation at %p); "
                         "free the base address",
                         ptr, (size_t)((const char *)ptr - r.base), (void *)r.base);
    }
    hal_validation_on_free_failure(ptr, call);
    return HAL_ERROR_INVALID_ARGUMENT;
}

/* Waits until no stream of the backend can still be using memory of the allocation. */
static hal_status_t quiesce_backend(struct hal_backend_s *b, const char *call)
{
    hal_status_t first = HAL_OK;
    for (uint32_t i = 0; i < b->device_count; i++) {
        struct hal_device_s *d = b->devices[i];
        hal_status_t st = HAL_SLOT_CALL(d->ops, device_synchronize, d->impl);
        if (st != HAL_OK && first == HAL_OK)
            first = hal_finish(st, d->ops, call);
    }
    return first;
}

hal_status_t hal_mem_free(void *ptr)
{
    static const char call[] = "hal_mem_free";
    if (!ptr)
        return HAL_OK;
    hal_alloc_record_t r;
    if (hal_mem_map_lookup(ptr, &r) && r.ipc_mapped)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, r.device->ops->name, call,
                         "%p was mapped with hal_mem_ipc_open_handle; use hal_mem_ipc_close_handle",
                         ptr);
    if (!hal_mem_map_take(ptr, false, &r))
        return bad_free(ptr, call);
    hal_status_t sync = quiesce_backend(r.device->backend, call);
    hal_status_t st = hal_mem_release_record(&r, call);
    return sync != HAL_OK ? sync : st;
}

hal_status_t hal_mem_ipc_get_handle(const void *ptr, hal_ipc_handle_t *handle)
{
    static const char call[] = "hal_mem_ipc_get_handle";
    hal_alloc_record_t r;
    HAL_CHECK_NOT_NULL(handle, NULL, call);
    if (!ptr || !hal_mem_map_lookup(ptr, &r) || r.kind != HAL_MEM_KIND_DEVICE || r.ipc_mapped)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "%p is not device memory allocated through the HAL", ptr);
    struct hal_device_s *d = r.device;
    if (!(d->props.capabilities & HAL_DEVICE_CAP_IPC))
        return hal_error(HAL_ERROR_UNSUPPORTED, d->ops->name, call,
                         "device %u cannot share memory with other processes (HAL_DEVICE_CAP_IPC)",
                         d->index);
    hal_backend_ptr_t p = { .ptr = (void *)ptr,
                            .kind = r.kind,
                            .device = d->impl,
                            .base = r.base,
                            .size = r.size,
                            .cookie = r.cookie,
                            .offset = (size_t)((const char *)ptr - r.base) };
    memset(handle, 0, sizeof(*handle));
    return hal_finish(HAL_SLOT_CALL(d->ops, mem_ipc_export, d->impl, &p, handle), d->ops, call);
}

hal_status_t hal_mem_ipc_open_handle(hal_device_t device, const hal_ipc_handle_t *handle,
                                     void **ptr)
{
    static const char call[] = "hal_mem_ipc_open_handle";
    HAL_CHECK_DEVICE(device, call);
    const hal_backend_ops_t *ops = device->ops;
    if (!handle || !ptr)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call, "%s is NULL",
                         handle ? "ptr" : "handle");
    if (!(device->props.capabilities & HAL_DEVICE_CAP_IPC))
        return hal_error(HAL_ERROR_UNSUPPORTED, ops->name, call,
                         "device %u cannot share memory with other processes (HAL_DEVICE_CAP_IPC)",
                         device->index);
    void *p = NULL, *cookie = NULL;
    size_t size = 0;
    hal_status_t st = HAL_SLOT_CALL(ops, mem_ipc_open, device->impl, handle, &p, &size, &cookie);
    if (st != HAL_OK)
        return hal_finish(st, ops, call);
    hal_alloc_record_t r = { .base = p,
                             .size = size,
                             .kind = HAL_MEM_KIND_DEVICE,
                             .device = device,
                             .cookie = cookie,
                             .ipc_mapped = true };
    st = hal_mem_map_insert(&r);
    if (st != HAL_OK) {
        ops->mem_ipc_close(device->impl, p, cookie);
        return hal_error(st, ops->name, call,
                         "cannot record the mapping (the address range is already in use, or out "
                         "of host memory)");
    }
    *ptr = p;
    return HAL_OK;
}

hal_status_t hal_mem_ipc_close_handle(void *ptr)
{
    static const char call[] = "hal_mem_ipc_close_handle";
    hal_alloc_record_t r;
    if (!ptr || !hal_mem_map_lookup(ptr, &r) || !r.ipc_mapped || r.base != ptr)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "%p is not an address returned by hal_mem_ipc_open_handle", ptr);
    if (!hal_mem_map_take(ptr, false, &r))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "%p was closed concurrently", ptr);
    hal_status_t sync = quiesce_backend(r.device->backend, call);
    hal_status_t st = hal_mem_release_record(&r, call);
    return sync != HAL_OK ? sync : st;
}

/* hal_mem_free_async could not enqueue the free (the stream failed, the device was lost, no
 * host memory for the callback): free as hal_mem_free does, waiting for the device, so that the
 * memory is not lost with the stream. Returns the enqueue's error (its message kept). */
static hal_status_t free_now(const hal_alloc_record_t *r, hal_status_t why, const char *call)
{
    /* why's message reads "<backend>: <call>: <detail>"; keep the detail across the waits. */
    const char *name = r->device->ops->name, *msg = hal_last_error_message();
    size_t prefix = strlen(name) + strlen(call) + 4;
    char detail[1024]; /* hal_last_error_message() holds at most 1023 characters */
    snprintf(detail, sizeof(detail), "%s",
             strncmp(msg, name, strlen(name)) == 0 && strlen(msg) >= prefix ? msg + prefix : msg);
    (void)quiesce_backend(r->device->backend, call);
    (void)hal_mem_release_record(r, call);
    return hal_error(
        why, name, call,
        "%s (not enqueued: the memory was freed at once, after waiting for the device)", detail);
}

/* A stream-ordered free done by the core from a host callback. */
typedef struct deferred_free {
    hal_alloc_record_t record;
} deferred_free_t;

static void deferred_free_fn(hal_status_t stream_status, void *user)
{
    deferred_free_t *f = user;
    hal_mem_map_remove(f->record.base);
    release_memory(&f->record, "hal_mem_free_async"); /* counted when it was requested */
    free(f);
}

/* The same as a host function in stream order (a backend without stream callbacks). */
static hal_status_t deferred_free_host_fn(void *user, hal_status_t stream_status)
{
    deferred_free_fn(stream_status, user);
    return HAL_OK;
}

hal_status_t hal_mem_free_async(void *ptr, hal_stream_t stream)
{
    static const char call[] = "hal_mem_free_async";
    HAL_CHECK_STREAM(stream, call);
    const hal_backend_ops_t *ops = stream->ops;
    if (!ptr)
        return HAL_OK;
    hal_alloc_record_t r;
    if (!hal_mem_map_lookup(ptr, &r) || r.base != ptr || r.free_pending)
        return bad_free(ptr, call);
    if (r.device->backend != stream->device->backend)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
                         "%p belongs to backend '%s', the stream to '%s'", ptr, r.device->ops->name,
                         ops->name);
    if (ops->mem_free_async) {
        if (!hal_mem_map_take(ptr, false, &r))
            return bad_free(ptr, call);
        hal_status_t st =
            ops->mem_free_async(stream->impl, r.device->impl, r.kind, r.base, r.cookie);
        if (st != HAL_OK)
            return free_now(&r, hal_finish(st, ops, call), call);
        stats_sub(r.device, r.kind, r.size);
        return HAL_OK;
    }
    deferred_free_t *f = malloc(sizeof(*f));
    if (!f)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, ops->name, call, "out of host memory");
    if (!hal_mem_map_take(ptr, true, &f->record)) {
        free(f);
        return bad_free(ptr, call);
    }
    hal_status_t st;
    hal_alloc_record_t counted = f->record; /* f may be gone once the callback is queued */
    if (ops->stream_add_callback || ops->stream_launch_host_fn) {
        st = ops->stream_add_callback
                 ? ops->stream_add_callback(stream->impl, deferred_free_fn, f)
                 : ops->stream_launch_host_fn(stream->impl, deferred_free_host_fn, f);
        if (st == HAL_OK) {
            stats_sub(counted.device, counted.kind, counted.size);
            return HAL_OK;
        }
    } else {
        /* Without callbacks, stream order is kept by waiting for the stream. */
        st = HAL_SLOT_CALL(ops, stream_synchronize, stream->impl);
        if (st == HAL_OK) {
            stats_sub(counted.device, counted.kind, counted.size);
            deferred_free_fn(HAL_OK, f);
            return HAL_OK;
        }
    }
    hal_mem_map_remove(ptr);
    f->record.free_pending = false;
    hal_alloc_record_t record = f->record;
    free(f);
    return free_now(&record, hal_finish(st, ops, call), call);
}

hal_status_t hal_mem_get_info(const void *ptr, hal_mem_info_t *info)
{
    if (!info || info->struct_size < sizeof(hal_mem_info_t))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, "hal_mem_get_info",
                         "info is NULL or its struct_size is too small");
    hal_alloc_record_t r;
    size_t size = info->struct_size;
    const void *next = info->next;
    memset(info, 0, sizeof(*info));
    info->struct_size = size;
    info->next = next;
    if (ptr && hal_mem_map_lookup(ptr, &r)) {
        info->kind = r.kind;
        info->device = r.device;
        info->base = r.base;
        info->size = r.size;
    }
    return HAL_OK;
}

hal_status_t hal_mem_resolve(const void *ptr, size_t n, struct hal_stream_s *s, const char *what,
                             const char *call, hal_backend_ptr_t *out, struct hal_device_s **owner)
{
    *owner = NULL;
    const hal_backend_ops_t *ops = s->ops;
    memset(out, 0, sizeof(*out));
    out->ptr = (void *)ptr;
    if (!ptr)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call, "%s is NULL", what);
    hal_alloc_record_t r;
    if (!hal_mem_map_lookup(ptr, &r))
        return HAL_OK; /* pageable host memory */
    size_t offset = (size_t)((const char *)ptr - r.base);
    if (n > r.size - offset)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
                         "%s range [%p, +%zu) runs past the end of its allocation (%p, %zu bytes)",
                         what, ptr, n, (void *)r.base, r.size);
    if (r.device->backend != s->device->backend)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
                         "%s %p is memory of backend '%s', the stream belongs to '%s'", what, ptr,
                         r.device->ops->name, ops->name);
    *owner = r.device;
    out->kind = r.kind;
    out->device = r.device->impl;
    out->base = r.base;
    out->size = r.size;
    out->cookie = r.cookie;
    out->offset = offset;
    return HAL_OK;
}

hal_status_t hal_memcpy_async(void *dst, const void *src, size_t n, hal_stream_t stream)
{
    static const char call[] = "hal_memcpy_async";
    HAL_CHECK_STREAM(stream, call);
    if (n == 0)
        return HAL_OK;
    hal_backend_ptr_t d, s;
    struct hal_device_s *dst_dev, *src_dev;
    HAL_CHECK(hal_mem_resolve(dst, n, stream, "dst", call, &d, &dst_dev));
    HAL_CHECK(hal_mem_resolve(src, n, stream, "src", call, &s, &src_dev));
    const char *dc = dst, *sc = src;
    if (dc < sc + n && sc < dc + n)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, stream->ops->name, call,
                         "dst [%p, +%zu) and src [%p, +%zu) overlap", dst, n, src, n);
    if (d.kind == HAL_MEM_KIND_DEVICE && s.kind == HAL_MEM_KIND_DEVICE && dst_dev != src_dev &&
        !(dst_dev->props.capabilities & HAL_DEVICE_CAP_PEER_COPY))
        return hal_error(HAL_ERROR_UNSUPPORTED, stream->ops->name, call,
                         "device-to-device copies across devices are not supported "
                         "(HAL_DEVICE_CAP_PEER_COPY)");
    return hal_finish(HAL_SLOT_CALL(stream->ops, memcpy_async, stream->impl, &d, &s, n),
                      stream->ops, call);
}

hal_status_t hal_memset_async(void *dst, int value, size_t n, hal_stream_t stream)
{
    static const char call[] = "hal_memset_async";
    HAL_CHECK_STREAM(stream, call);
    if (n == 0)
        return HAL_OK;
    hal_backend_ptr_t d;
    struct hal_device_s *owner;
    HAL_CHECK(hal_mem_resolve(dst, n, stream, "dst", call, &d, &owner));
    if (d.kind == HAL_MEM_KIND_UNREGISTERED)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, stream->ops->name, call,
                         "dst %p is not memory allocated through the HAL", dst);
    return hal_finish(HAL_SLOT_CALL(stream->ops, memset_async, stream->impl, &d, value, n),
                      stream->ops, call);
}
