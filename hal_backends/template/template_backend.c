/* SPDX-License-Identifier: Apache-2.0 */
/* The template backend: the smallest correct backend, to copy when writing a new one.
 *
 * One device whose memory is host memory, and synchronous streams: every enqueued operation
 * runs in the calling thread before the call returns. That is a valid in-order stream (work is
 * complete, hence ordered), so events complete at record time and queries always say "idle".
 * A real backend replaces each slot with calls into its runtime; optional slots it cannot
 * serve stay NULL and the HAL reports HAL_ERROR_UNSUPPORTED for them (here: native handles,
 * device-free memory and stream-ordered free). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hal/hal_backend_abi.h"

/* Compile-time knobs, so the loader's tests can build variants of this backend. */
#ifndef TEMPLATE_API_VERSION
#define TEMPLATE_API_VERSION HAL_API_VERSION
#endif
#ifndef TEMPLATE_OPS_SIZE
#define TEMPLATE_OPS_SIZE sizeof(hal_backend_ops_t)
#endif

#define TEMPLATE_MEMORY (UINT64_C(1) << 30) /* advertised capacity */

static const hal_host_services_t *host;

typedef struct template_stream {
    hal_status_t latched; /* a synchronous stream can only fail inside a call */
} template_stream_t;

typedef struct template_event {
    uint32_t flags;
    int recorded; /* 0 until first record */
    double stamp_ms;
} template_event_t;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static hal_status_t template_init(const hal_host_services_t *services, void **backend)
{
    host = services;
    *backend = &host;
    return HAL_OK;
}

static void template_fini(void *backend) {}

static hal_status_t template_device_count(void *backend, uint32_t *count)
{
    *count = 1;
    return HAL_OK;
}

static hal_status_t template_device_open(void *backend, uint32_t index, void **device)
{
    *device = backend; /* one device, no state of its own */
    return HAL_OK;
}

static void template_device_close(void *device) {}

static hal_status_t template_device_get_properties(void *device, hal_device_properties_t *props)
{
    strcpy(props->name, "template device");
    strcpy(props->vendor, "torch-hal");
    props->host_addressable = 1;
    props->total_memory = TEMPLATE_MEMORY;
    props->capabilities =
        HAL_DEVICE_CAP_TIMING_EVENTS | HAL_DEVICE_CAP_HOST_CALLBACKS | HAL_DEVICE_CAP_PEER_COPY;
    props->stream_priority_least = 0;
    props->stream_priority_greatest = 0;
    props->alignment = 64;
    return HAL_OK;
}

static hal_status_t template_device_synchronize(void *device)
{
    return HAL_OK; /* nothing is ever pending */
}

static hal_status_t template_mem_alloc(void *device, hal_mem_kind_t kind, size_t size,
                                       size_t alignment, void **ptr, void **cookie)
{
    if (alignment < 64)
        alignment = 64;
    void *p = aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
    if (!p) {
        host->set_error("aligned_alloc(%zu, %zu) failed", alignment, size);
        return kind == HAL_MEM_KIND_HOST_PINNED ? HAL_ERROR_OUT_OF_HOST_MEMORY
                                                : HAL_ERROR_OUT_OF_DEVICE_MEMORY;
    }
    *ptr = p;
    *cookie = NULL;
    return HAL_OK;
}

static hal_status_t template_mem_free(void *device, hal_mem_kind_t kind, void *ptr, void *cookie)
{
    free(ptr);
    return HAL_OK;
}

static hal_status_t template_memcpy_async(void *stream, const hal_backend_ptr_t *dst,
                                          const hal_backend_ptr_t *src, size_t n)
{
    memcpy(dst->ptr, src->ptr, n);
    return HAL_OK;
}

static hal_status_t template_memset_async(void *stream, const hal_backend_ptr_t *dst, int value,
                                          size_t n)
{
    memset(dst->ptr, value, n);
    return HAL_OK;
}

static hal_status_t template_stream_create(void *device, int32_t priority, void **stream)
{
    template_stream_t *s = calloc(1, sizeof(*s));
    if (!s) {
        host->set_error("calloc failed");
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    *stream = s;
    return HAL_OK;
}

static hal_status_t template_stream_destroy(void *stream)
{
    template_stream_t *s = stream;
    hal_status_t st = s->latched;
    free(s);
    return st;
}

static hal_status_t template_stream_query(void *stream)
{
    return ((template_stream_t *)stream)->latched;
}

static hal_status_t template_stream_wait_event(void *stream, void *event)
{
    return HAL_OK; /* every recorded version is already complete */
}

static hal_status_t template_stream_add_callback(void *stream, hal_host_fn_t fn, void *user_data)
{
    fn(((template_stream_t *)stream)->latched, user_data);
    return HAL_OK;
}

static hal_status_t template_stream_launch_host_fn(void *stream, hal_stream_host_fn_t fn, void *arg)
{
    template_stream_t *s = stream;
    hal_status_t st = fn(arg, s->latched);
    if (st != HAL_OK && s->latched == HAL_OK) {
        if (host->take_error)
            host->take_error();
        s->latched = st;
    }
    return HAL_OK;
}

static hal_status_t template_device_get_free_memory(void *device, uint64_t *free_bytes)
{
    *free_bytes = TEMPLATE_MEMORY;
    return HAL_OK;
}

static hal_status_t template_event_create(void *device, uint32_t flags, void **event)
{
    template_event_t *e = calloc(1, sizeof(*e));
    if (!e) {
        host->set_error("calloc failed");
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    e->flags = flags;
    *event = e;
    return HAL_OK;
}

static void template_event_destroy(void *event)
{
    free(event);
}

static hal_status_t template_event_record(void *event, void *stream)
{
    template_event_t *e = event;
    e->recorded = 1;
    e->stamp_ms = now_ms();
    return HAL_OK;
}

static hal_status_t template_event_query(void *event)
{
    return HAL_OK;
}

static hal_status_t template_event_elapsed_ms(void *start, void *end, float *ms)
{
    const template_event_t *a = start, *b = end;
    if (!a->recorded || !b->recorded) {
        host->set_error("an event was never recorded");
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    *ms = (float)(b->stamp_ms - a->stamp_ms);
    return HAL_OK;
}

static const hal_backend_ops_t template_ops = {
    .struct_size = TEMPLATE_OPS_SIZE,
    .api_version = TEMPLATE_API_VERSION,
    .name = "template",
    .device_type_name = "template",
    .init = template_init,
    .fini = template_fini,
    .device_count = template_device_count,
    .device_open = template_device_open,
    .device_close = template_device_close,
    .device_get_properties = template_device_get_properties,
    .device_synchronize = template_device_synchronize,
    .device_get_free_memory = template_device_get_free_memory,
    .mem_alloc = template_mem_alloc,
    .mem_free = template_mem_free,
    .memcpy_async = template_memcpy_async,
    .memset_async = template_memset_async,
    .stream_create = template_stream_create,
    .stream_destroy = template_stream_destroy,
    .stream_query = template_stream_query,
    .stream_synchronize = template_stream_query, /* nothing to wait for */
    .stream_wait_event = template_stream_wait_event,
    .stream_add_callback = template_stream_add_callback,
    .stream_launch_host_fn = template_stream_launch_host_fn,
    .event_create = template_event_create,
    .event_destroy = template_event_destroy,
    .event_record = template_event_record,
    .event_query = template_event_query,
    .event_synchronize = template_event_query,
    .event_elapsed_ms = template_event_elapsed_ms,
};

HAL_BACKEND_EXPORT hal_status_t hal_backend_get_ops(uint32_t host_api_version,
                                                    const hal_backend_ops_t **ops)
{
    if (HAL_VERSION_MAJOR(host_api_version) != HAL_API_VERSION_MAJOR)
        return HAL_ERROR_VERSION_MISMATCH;
    *ops = &template_ops;
    return HAL_OK;
}
