/* SPDX-License-Identifier: Apache-2.0 */
/* Devices: opening them with their backend, properties, the per-thread current device,
 * synchronisation and raw-allocation statistics. */
#include <stdlib.h>
#include <string.h>

#include "hal/src/core.h"
#include "hal/src/slots_check.h"

_Static_assert(sizeof(struct hal_device_s) <= HAL_HANDLE_MAX_SIZE, "handle size");

static _Thread_local hal_device_t current_device;

void (*hal_comm_close_device_hook)(struct hal_device_s *device);

/* Closes one device: destroys what the application left (reporting it to the layers as leaked),
 * frees its memory, then lets the backend close it. */
static void close_device(struct hal_device_s *d);

static void release_leaked_allocation(const hal_alloc_record_t *r, void *ctx)
{
    struct hal_device_s *d = ctx;
    hal_layers_report_leak(d->backend, "allocation", r->base, r->size);
    hal_mem_release_record(r, "hal_backend_close");
}

static void close_device(struct hal_device_s *d)
{
    bool validate = d->backend->validate;
    /* Communicators first: their queued work waits for peers, which an abort cuts short. */
    void (*close_comms)(struct hal_device_s *) =
        __atomic_load_n(&hal_comm_close_device_hook, __ATOMIC_ACQUIRE);
    if (close_comms)
        close_comms(d);
    /* Quiesce so that no queued work touches what is about to be freed. */
    if (d->ops->device_synchronize)
        d->ops->device_synchronize(d->impl);
    pthread_mutex_lock(&d->lock);
    while (d->programs.next != &d->programs) {
        struct hal_program_s *p = HAL_CONTAINER_OF(d->programs.next, struct hal_program_s, link);
        hal_live_remove(&p->link);
        hal_layers_report_leak(d->backend, "hal_program_t", p, 0);
        hal_program_destroy_internal(p);
    }
    while (d->streams.next != &d->streams) {
        struct hal_stream_s *s = HAL_CONTAINER_OF(d->streams.next, struct hal_stream_s, link);
        hal_live_remove(&s->link);
        if (!s->is_default) {
            hal_layers_report_leak(d->backend, "hal_stream_t", s, 0);
            hal_stream_destroy_internal(s);
        }
    }
    while (d->events.next != &d->events) {
        struct hal_event_s *e = HAL_CONTAINER_OF(d->events.next, struct hal_event_s, link);
        hal_live_remove(&e->link);
        hal_layers_report_leak(d->backend, "hal_event_t", e, 0);
        hal_event_destroy_internal(e);
    }
    pthread_mutex_unlock(&d->lock);
    hal_mem_map_drain_device(d, release_leaked_allocation, d);
    if (d->default_stream)
        hal_stream_destroy_internal(d->default_stream);
    if (d->ops->device_close)
        d->ops->device_close(d->impl);
    pthread_mutex_destroy(&d->lock);
    pthread_mutex_destroy(&d->listeners_lock);
    hal_handle_release(d, validate);
}

void hal_device_add_stream_listener(struct hal_device_s *device, hal_stream_listener_t *listener)
{
    pthread_mutex_lock(&device->listeners_lock);
    listener->next = device->listeners;
    device->listeners = listener;
    pthread_mutex_unlock(&device->listeners_lock);
}

void hal_device_remove_stream_listener(struct hal_device_s *device, hal_stream_listener_t *listener)
{
    pthread_mutex_lock(&device->listeners_lock);
    for (hal_stream_listener_t **l = &device->listeners; *l != NULL; l = &(*l)->next) {
        if (*l == listener) {
            *l = listener->next;
            break;
        }
    }
    pthread_mutex_unlock(&device->listeners_lock);
}

/* A device may advertise a capability only with the slots the spec ties to it. */
/* Fills in the node position of a backend that gives none, and refuses one that contradicts
 * itself: node_index < node_device_count, at least as many node devices as opened ones, and
 * indices increasing with the device ordinal (so that each is distinct). */
static hal_status_t check_node_position(struct hal_device_s *d, uint32_t count,
                                        const struct hal_device_s *previous)
{
    hal_device_properties_t *p = &d->props;
    if (p->node_device_count == 0) {
        p->node_index = d->index;
        p->node_device_count = count;
    }
    bool consistent = p->node_index < p->node_device_count && p->node_device_count >= count;
    if (previous)
        consistent = consistent && p->node_index > previous->props.node_index &&
                     p->node_device_count == previous->props.node_device_count;
    if (consistent)
        return HAL_OK;
    return hal_error(HAL_ERROR_BACKEND_SPECIFIC, d->ops->name, "hal_backend_open",
                     "device %u reports node position %u of %u devices, which contradicts the "
                     "backend's %u devices%s",
                     d->index, p->node_index, p->node_device_count, count,
                     previous ? " or the position of the device before it" : "");
}

static hal_status_t check_capabilities(const struct hal_device_s *d)
{
    const char *capability = NULL;
    const char *slot = hal_slots_missing_for_capability(d->ops, d->props.capabilities, &capability);
    if (!slot)
        return HAL_OK;
    return hal_error(HAL_ERROR_VERSION_MISMATCH, d->ops->name, "hal_backend_open",
                     "device %u advertises %s but the backend leaves the slot %s NULL", d->index,
                     capability, slot);
}

hal_status_t hal_device_open_all(struct hal_backend_s *b)
{
    static const char call[] = "hal_backend_open";
    const hal_backend_ops_t *ops = b->ops;
    hal_status_t st;
    uint32_t count = 0;
    if (ops->device_count) {
        st = ops->device_count(b->impl, &count);
        if (st != HAL_OK)
            return hal_backend_error(st, ops, call);
    }
    if (count == 0)
        return HAL_OK;
    b->devices = calloc(count, sizeof(*b->devices));
    if (!b->devices)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, ops->name, call, "out of host memory");
    for (uint32_t i = 0; i < count; i++) {
        struct hal_device_s *d = hal_handle_alloc(sizeof(*d));
        if (!d) {
            st = hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, ops->name, call, "out of host memory");
            goto out_close_opened;
        }
        d->ops = ops;
        d->backend = b;
        d->index = i;
        pthread_mutex_init(&d->lock, NULL);
        pthread_mutex_init(&d->listeners_lock, NULL);
        hal_live_init(&d->streams);
        hal_live_init(&d->events);
        hal_live_init(&d->comms);
        hal_live_init(&d->programs);
        st = HAL_SLOT_CALL(ops, device_open, b->impl, i, &d->impl);
        if (st == HAL_OK) {
            d->props.struct_size = sizeof(d->props);
            st = HAL_SLOT_CALL(ops, device_get_properties, d->impl, &d->props);
            d->props.struct_size = sizeof(d->props);
            d->props.next = NULL;
            d->props.index = i;
            /* Only known and vendor formats, and none without the capability (the field was
             * reserved before 1.2). */
            d->props.program_formats &= (d->props.capabilities & HAL_DEVICE_CAP_PROGRAMS)
                                            ? ((((1u << HAL_PROGRAM_FORMAT_COUNT) - 1u) & ~1u) |
                                               (0xffffffffu << HAL_PROGRAM_FORMAT_VENDOR_FIRST))
                                            : 0u;
            if (st != HAL_OK)
                hal_finish(st, ops, call);
            else
                st = check_capabilities(d);
            if (st == HAL_OK)
                st = check_node_position(d, count, i > 0 ? b->devices[i - 1] : NULL);
            if (st != HAL_OK)
                ops->device_close(d->impl);
        } else {
            hal_finish(st, ops, call);
        }
        if (st != HAL_OK) {
            pthread_mutex_destroy(&d->lock);
            pthread_mutex_destroy(&d->listeners_lock);
            hal_handle_release(d, false);
            goto out_close_opened;
        }
        d->obj.magic = HAL_MAGIC_DEVICE;
        st = hal_stream_create_internal(d, 0, true, &d->default_stream);
        if (st != HAL_OK) {
            b->devices[b->device_count++] = d; /* closed with the others below */
            goto out_close_opened;
        }
        b->devices[b->device_count++] = d;
    }
    return HAL_OK;

out_close_opened:
    while (b->device_count > 0)
        close_device(b->devices[--b->device_count]);
    free(b->devices);
    b->devices = NULL;
    return st;
}

void hal_device_close_all(struct hal_backend_s *b)
{
    for (uint32_t i = 0; i < b->device_count; i++)
        close_device(b->devices[i]);
    free(b->devices);
    b->devices = NULL;
    b->device_count = 0;
}

hal_status_t hal_device_count(hal_backend_t backend, uint32_t *count)
{
    static const char call[] = "hal_device_count";
    HAL_CHECK_BACKEND(backend, call);
    HAL_CHECK_NOT_NULL(count, backend->ops->name, call);
    *count = backend->device_count;
    return HAL_OK;
}

hal_status_t hal_device_get(hal_backend_t backend, uint32_t index, hal_device_t *device)
{
    static const char call[] = "hal_device_get";
    HAL_CHECK_BACKEND(backend, call);
    HAL_CHECK_NOT_NULL(device, backend->ops->name, call);
    if (index >= backend->device_count)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, backend->ops->name, call,
                         "device index %u out of range (the backend has %u devices)", index,
                         backend->device_count);
    *device = backend->devices[index];
    return HAL_OK;
}

hal_status_t hal_device_get_properties(hal_device_t device, hal_device_properties_t *props)
{
    static const char call[] = "hal_device_get_properties";
    HAL_CHECK_DEVICE(device, call);
    HAL_CHECK_NOT_NULL(props, device->ops->name, call);
    if (props->struct_size < HAL_DEVICE_PROPERTIES_SIZE_1_0)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, device->ops->name, call,
                         "props->struct_size %zu is smaller than the v1.0 struct (%zu)",
                         props->struct_size, (size_t)HAL_DEVICE_PROPERTIES_SIZE_1_0);
    const void *next = props->next;
    size_t size = props->struct_size;
    /* A caller compiled against an older, shorter struct gets the fields it has. */
    memcpy(props, &device->props, size < sizeof(device->props) ? size : sizeof(device->props));
    props->struct_size = size;
    props->next = next;
    return HAL_OK;
}

hal_status_t hal_device_get_backend(hal_device_t device, hal_backend_t *backend)
{
    static const char call[] = "hal_device_get_backend";
    HAL_CHECK_DEVICE(device, call);
    HAL_CHECK_NOT_NULL(backend, device->ops->name, call);
    *backend = device->backend;
    return HAL_OK;
}

hal_status_t hal_set_current_device(hal_device_t device)
{
    if (device)
        HAL_CHECK_DEVICE(device, "hal_set_current_device");
    current_device = device;
    return HAL_OK;
}

hal_status_t hal_get_current_device(hal_device_t *device)
{
    HAL_CHECK_NOT_NULL(device, NULL, "hal_get_current_device");
    hal_device_t d = current_device;
    /* A device whose backend was closed since it was set reads as unset. */
    *device = (d && d->obj.magic == HAL_MAGIC_DEVICE) ? d : NULL;
    return HAL_OK;
}

hal_status_t hal_device_synchronize(hal_device_t device)
{
    static const char call[] = "hal_device_synchronize";
    HAL_CHECK_DEVICE(device, call);
    return hal_finish(HAL_SLOT_CALL(device->ops, device_synchronize, device->impl), device->ops,
                      call);
}

hal_status_t hal_device_get_mem_stats(hal_device_t device, hal_mem_stats_t *stats)
{
    static const char call[] = "hal_device_get_mem_stats";
    HAL_CHECK_DEVICE(device, call);
    if (!stats || stats->struct_size < sizeof(hal_mem_stats_t))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, device->ops->name, call,
                         "stats is NULL or its struct_size is too small");
    const void *next = stats->next;
    size_t size = stats->struct_size;
    memset(stats, 0, sizeof(*stats));
    stats->struct_size = size;
    stats->next = next;
    stats->device_bytes_in_use = atomic_load(&device->device_bytes);
    stats->device_peak_bytes_in_use = atomic_load(&device->device_peak);
    stats->device_allocations = atomic_load(&device->device_allocs);
    stats->host_pinned_bytes_in_use = atomic_load(&device->pinned_bytes);
    stats->shared_bytes_in_use = atomic_load(&device->shared_bytes);
    stats->total_alloc_calls = atomic_load(&device->alloc_calls);
    stats->total_free_calls = atomic_load(&device->free_calls);
    stats->device_bytes_limit = device->props.total_memory;
    uint64_t free_bytes = 0;
    if (device->ops->device_get_free_memory &&
        device->ops->device_get_free_memory(device->impl, &free_bytes) == HAL_OK)
        stats->device_bytes_free = free_bytes;
    return HAL_OK;
}

hal_status_t hal_device_reset_peak_mem_stats(hal_device_t device)
{
    HAL_CHECK_DEVICE(device, "hal_device_reset_peak_mem_stats");
    atomic_store(&device->device_peak, atomic_load(&device->device_bytes));
    return HAL_OK;
}

hal_status_t hal_device_get_native_handle(hal_device_t device, uintptr_t *native)
{
    static const char call[] = "hal_device_get_native_handle";
    HAL_CHECK_DEVICE(device, call);
    HAL_CHECK_NOT_NULL(native, device->ops->name, call);
    return hal_finish(HAL_SLOT_CALL(device->ops, device_get_native_handle, device->impl, native),
                      device->ops, call);
}
