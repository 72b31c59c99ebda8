/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: entry point, ops table, initialisation, devices and their properties. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/cpu/cpu_internal.h"

static hal_status_t cpu_init(const hal_host_services_t *host, void **out)
{
    cpu_backend_t tmp = { .host = host };
    char msg[CPU_ENV_MSG_MAX];
    hal_status_t st = cpu_config_load(&tmp.config, msg, sizeof(msg));
    if (st != HAL_OK) {
        cpu_set_error(&tmp, "%s", msg);
        return st;
    }
    cpu_backend_t *backend = malloc(sizeof(*backend));
    if (backend == NULL) {
        cpu_set_error(&tmp, "malloc(%zu) failed for the backend object", sizeof(*backend));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    *backend = tmp;
    if (pthread_mutex_init(&backend->ipc_lock, NULL) != 0) {
        cpu_set_error(&tmp, "pthread_mutex_init failed for the backend");
        free(backend);
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    *out = backend;
    return HAL_OK;
}

static void cpu_fini(void *backend_)
{
    cpu_backend_t *backend = backend_;
    cpu_ipc_unmap_all(backend);
    pthread_mutex_destroy(&backend->ipc_lock);
    free(backend);
}

static hal_status_t cpu_device_count(void *backend, uint32_t *count)
{
    *count = ((cpu_backend_t *)backend)->config.devices;
    return HAL_OK;
}

static hal_status_t cpu_device_open(void *backend_, uint32_t index, void **out)
{
    cpu_backend_t *backend = backend_;
    if (index >= backend->config.devices) {
        cpu_set_error(backend, "device index %u out of range (%u devices, %s)", index,
                      backend->config.devices, CPU_ENV_DEVICES);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    cpu_device_t *device = calloc(1, sizeof(*device));
    if (device == NULL) {
        cpu_set_error(backend, "calloc(%zu) failed for device %u", sizeof(*device), index);
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    device->backend = backend;
    device->index = index;
    device->capacity = backend->config.capacity;
    atomic_init(&device->used, 0);
    hq_device_config_t streams = {
        .host = backend->host,
        .index = index,
        .thread_prefix = "hal-cpu",
        .slots = backend->config.concurrency,
        .spin_us = backend->config.spin_us,
        .callbacks_take_slot = true,
    };
    hal_status_t st = hq_device_init(&device->hq, &streams);
    if (st != HAL_OK) {
        free(device);
        return st;
    }
    /* Without an arena (no memfd, or no address space for it) the device still works, from
     * posix_memalign, but cannot share its memory with other processes. */
    device->arena = cpu_arena_create(device->capacity, index);
    pthread_mutex_init(&device->pool_lock, NULL);
    atomic_init(&device->pool, NULL);
    *out = device;
    return HAL_OK;
}

static void cpu_device_close(void *device_)
{
    cpu_device_t *device = device_;
    cpu_pool_destroy(atomic_load(&device->pool));
    pthread_mutex_destroy(&device->pool_lock);
    cpu_arena_destroy(device->arena);
    hq_device_fini(&device->hq);
    free(device);
}

/* Writes a field only if it lies inside the caller's struct_size. */
#define CPU_PROPS_HAS(props, field) \
    HAL_STRUCT_HAS(hal_device_properties_t, field, (props)->struct_size)

static hal_status_t cpu_device_get_properties(void *device_, hal_device_properties_t *props)
{
    cpu_device_t *device = device_;
    if (CPU_PROPS_HAS(props, name))
        snprintf(props->name, sizeof(props->name), "cpu virtual device %u", device->index);
    if (CPU_PROPS_HAS(props, vendor))
        snprintf(props->vendor, sizeof(props->vendor), "torch-hal");
    if (CPU_PROPS_HAS(props, index))
        props->index = device->index;
    if (CPU_PROPS_HAS(props, host_addressable))
        props->host_addressable = 1;
    if (CPU_PROPS_HAS(props, total_memory))
        props->total_memory = device->capacity;
    if (CPU_PROPS_HAS(props, capabilities))
        props->capabilities = HAL_DEVICE_CAP_SHARED_MEMORY | HAL_DEVICE_CAP_TIMING_EVENTS |
                              HAL_DEVICE_CAP_HOST_CALLBACKS | HAL_DEVICE_CAP_PEER_COPY |
                              HAL_DEVICE_CAP_PROGRAMS |
                              (device->arena != NULL ? HAL_DEVICE_CAP_IPC : 0);
    if (CPU_PROPS_HAS(props, stream_priority_least))
        props->stream_priority_least = CPU_PRIORITY_LEAST;
    if (CPU_PROPS_HAS(props, stream_priority_greatest))
        props->stream_priority_greatest = CPU_PRIORITY_GREATEST;
    if (CPU_PROPS_HAS(props, alignment))
        props->alignment = CPU_MIN_ALIGNMENT;
    if (CPU_PROPS_HAS(props, program_formats))
        props->program_formats = 1u << HAL_PROGRAM_FORMAT_HOST_ELF;
    return HAL_OK;
}

static hal_status_t cpu_device_get_native_handle(void *device, uintptr_t *native)
{
    *native = ((cpu_device_t *)device)->index;
    return HAL_OK;
}

static hal_status_t cpu_device_get_free_memory(void *device_, uint64_t *free_bytes)
{
    cpu_device_t *device = device_;
    uint64_t used = atomic_load(&device->used);
    *free_bytes = used < device->capacity ? device->capacity - used : 0;
    return HAL_OK;
}

/* The native stream and event handles are the engine's objects themselves. */
static hal_status_t cpu_stream_get_native_handle(void *stream, uintptr_t *native)
{
    *native = (uintptr_t)stream;
    return HAL_OK;
}

static hal_status_t cpu_event_get_native_handle(void *event, uintptr_t *native)
{
    *native = (uintptr_t)event;
    return HAL_OK;
}

static const hal_backend_ops_t cpu_ops = {
    .struct_size = sizeof(hal_backend_ops_t),
    .api_version = HAL_API_VERSION,
    .name = "cpu",
    .device_type_name = "hal",
    .init = cpu_init,
    .fini = cpu_fini,
    .device_count = cpu_device_count,
    .device_open = cpu_device_open,
    .device_close = cpu_device_close,
    .device_get_properties = cpu_device_get_properties,
    /* Streams and events: the engine's slots, as they are. */
    HQ_REQUIRED_SLOTS,
    .device_get_native_handle = cpu_device_get_native_handle,
    .device_get_free_memory = cpu_device_get_free_memory,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .memcpy_async = cpu_memcpy_async,
    .memset_async = cpu_memset_async,
    .stream_add_callback = hq_stream_add_callback,
    .stream_get_native_handle = cpu_stream_get_native_handle,
    .event_elapsed_ms = hq_event_elapsed_ms,
    .event_get_native_handle = cpu_event_get_native_handle,
    /* mem_free_async stays NULL: the core's callback-based fallback is exactly what this backend
     * would do, and the device does not advertise HAL_DEVICE_CAP_STREAM_FREE. */
    .mem_free_async = NULL,
    .mem_ipc_export = cpu_mem_ipc_export,
    .mem_ipc_open = cpu_mem_ipc_open,
    .mem_ipc_close = cpu_mem_ipc_close,
    /* ---- 1.2 ---- */
    .program_create = cpu_program_create,
    .program_destroy = cpu_program_destroy,
    .program_get_kernel = cpu_program_get_kernel,
    .kernel_launch = cpu_kernel_launch,
    /* No native collectives: the HAL's host implementation runs them through
     * stream_launch_host_fn, in place on memory mapped with the IPC slots. */
};

/* The one exported symbol. */
HAL_BACKEND_DEFINE_ENTRY(cpu_ops)
