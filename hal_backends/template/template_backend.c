/* SPDX-License-Identifier: Apache-2.0 */
/* The template backend: the smallest conformant backend, to copy when writing a new one.
 *
 * Devices whose memory is host memory, with a capacity each enforces, and asynchronous streams
 * from the backend toolkit (hal_backends/common/hq.h): a worker thread per stream, versioned
 * events, latched errors, host callbacks and host functions all come from the engine, so this
 * file only describes the devices and moves their bytes. A real backend replaces
 * template_mem_alloc/free and the two work functions (run_copy, run_fill) with calls into its
 * runtime; the work functions may block, since they run on the stream's worker.
 *
 * Optional slots left NULL (the HAL reports HAL_ERROR_UNSUPPORTED, or serves them itself):
 * native handles, mem_free_async (the core frees from a stream callback), IPC, and native
 * collectives (the HAL's host-staged collectives run through stream_launch_host_fn). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/hal_backend_abi.h"
#include "hal_backends/common/hq.h"

/* Compile-time knobs, so that tests can build variants of this backend: the API version and
 * size of its ops table, its number of devices (with 2, peer copies and cross-device waits are
 * exercised too), its name, and TEMPLATE_REQUIRED_ONLY: only the slots the loader requires, every
 * optional one NULL and no capability that needs one (the conformance suite must pass so). */
#ifndef TEMPLATE_API_VERSION
#define TEMPLATE_API_VERSION HAL_API_VERSION
#endif
#ifndef TEMPLATE_OPS_SIZE
#define TEMPLATE_OPS_SIZE sizeof(hal_backend_ops_t)
#endif
#ifndef TEMPLATE_DEVICES
#define TEMPLATE_DEVICES 1u
#endif
#ifndef TEMPLATE_NAME
#define TEMPLATE_NAME "template"
#endif
#ifdef TEMPLATE_REQUIRED_ONLY
#define TEMPLATE_CAPABILITIES HAL_DEVICE_CAP_PEER_COPY
#else
/* Timing events need event_elapsed_ms, host callbacks stream_add_callback (both from the
 * engine); peer copies need nothing but memcpy_async between devices. */
#define TEMPLATE_CAPABILITIES \
    (HAL_DEVICE_CAP_TIMING_EVENTS | HAL_DEVICE_CAP_HOST_CALLBACKS | HAL_DEVICE_CAP_PEER_COPY)
#endif

#define TEMPLATE_MEMORY    (UINT64_C(1) << 30) /* per device: advertised and enforced */
#define TEMPLATE_ALIGNMENT 64u                 /* of every allocation (a device property) */

typedef struct template_backend {
    const hal_host_services_t *host;
} template_backend_t;

typedef struct template_device {
    hq_device_t hq; /* first: the engine's slots take this object */
    template_backend_t *backend;
    uint32_t index;
    _Atomic uint64_t used; /* device bytes allocated */
} template_device_t;

/* ---- backend and device -------------------------------------------------------------------- */

static hal_status_t template_init(const hal_host_services_t *host, void **backend)
{
    template_backend_t *b = malloc(sizeof(*b));
    if (b == NULL) {
        hq_set_error(host, "malloc(%zu) failed for the backend", sizeof(*b));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    b->host = host;
    *backend = b;
    return HAL_OK;
}

static void template_fini(void *backend)
{
    free(backend);
}

static hal_status_t template_device_count(void *backend, uint32_t *count)
{
    *count = TEMPLATE_DEVICES;
    return HAL_OK;
}

static hal_status_t template_device_open(void *backend, uint32_t index, void **device)
{
    template_backend_t *b = backend;
    template_device_t *d = calloc(1, sizeof(*d));
    if (d == NULL) {
        hq_set_error(b->host, "calloc(%zu) failed for device %u", sizeof(*d), index);
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    d->backend = b;
    d->index = index;
    atomic_init(&d->used, 0);
    /* Streams never spin (right for a runtime whose calls take microseconds or more) and no
     * execution-slot limit: priorities are not offered. */
    hq_device_config_t streams = { .host = b->host, .index = index, .thread_prefix = "hal-tmpl" };
    hal_status_t st = hq_device_init(&d->hq, &streams);
    if (st != HAL_OK) {
        free(d);
        return st;
    }
    *device = d;
    return HAL_OK;
}

/* The core destroyed every stream and event of the device first. */
static void template_device_close(void *device)
{
    template_device_t *d = device;
    hq_device_fini(&d->hq);
    free(d);
}

static hal_status_t template_device_get_properties(void *device, hal_device_properties_t *props)
{
    template_device_t *d = device;
    snprintf(props->name, sizeof(props->name), "template device %u", d->index);
    strcpy(props->vendor, "torch-hal");
    props->index = d->index;
    props->host_addressable = 1; /* the bridge may run CPU kernels on this memory in place */
    props->total_memory = TEMPLATE_MEMORY;
    props->capabilities = TEMPLATE_CAPABILITIES;
    props->stream_priority_least = 0;
    props->stream_priority_greatest = 0;
    props->alignment = TEMPLATE_ALIGNMENT;
    return HAL_OK;
}

static hal_status_t template_device_get_free_memory(void *device, uint64_t *free_bytes)
{
    template_device_t *d = device;
    *free_bytes = TEMPLATE_MEMORY - atomic_load(&d->used);
    return HAL_OK;
}

/* ---- memory -------------------------------------------------------------------------------- */

/* Charges device memory to the capacity; fails, without side effects, past it. */
static hal_status_t reserve(template_device_t *d, size_t size)
{
    uint64_t used = atomic_load(&d->used);
    do {
        if ((uint64_t)size > TEMPLATE_MEMORY - used) {
            hq_set_error(d->backend->host,
                         "out of device memory: %zu bytes requested, %llu of %llu free", size,
                         (unsigned long long)(TEMPLATE_MEMORY - used),
                         (unsigned long long)TEMPLATE_MEMORY);
            return HAL_ERROR_OUT_OF_DEVICE_MEMORY;
        }
    } while (!atomic_compare_exchange_weak(&d->used, &used, used + size));
    return HAL_OK;
}

/* The cookie of a device allocation is its size, so that the free returns it to the capacity. */
static hal_status_t template_mem_alloc(void *device, hal_mem_kind_t kind, size_t size,
                                       size_t alignment, void **ptr, void **cookie)
{
    template_device_t *d = device;
    bool counted = kind == HAL_MEM_KIND_DEVICE;
    if (counted) {
        hal_status_t st = reserve(d, size);
        if (st != HAL_OK)
            return st;
    }
    if (alignment < TEMPLATE_ALIGNMENT)
        alignment = TEMPLATE_ALIGNMENT;
    void *p = NULL;
    if (posix_memalign(&p, alignment, size) != 0) {
        if (counted)
            atomic_fetch_sub(&d->used, (uint64_t)size);
        hq_set_error(d->backend->host, "posix_memalign(%zu, %zu) failed", alignment, size);
        return counted ? HAL_ERROR_OUT_OF_DEVICE_MEMORY : HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    *ptr = p;
    *cookie = (void *)(uintptr_t)(counted ? size : 0);
    return HAL_OK;
}

static hal_status_t template_mem_free(void *device, hal_mem_kind_t kind, void *ptr, void *cookie)
{
    template_device_t *d = device;
    free(ptr);
    atomic_fetch_sub(&d->used, (uint64_t)(uintptr_t)cookie);
    return HAL_OK;
}

/* ---- stream work: run by the stream's worker, in stream order ------------------------------ */

typedef struct template_copy {
    void *dst;
    const void *src;
    size_t n;
} template_copy_t;

typedef struct template_fill {
    void *dst;
    int value;
    size_t n;
} template_fill_t;

/* A runtime call that can fail calls hq_task_error("<call> returned <code>") and returns the
 * closest status: the error then latches on the stream. */
static hal_status_t run_copy(hq_stream_t *stream, void *payload, hal_status_t stream_status)
{
    const template_copy_t *c = payload;
    memcpy(c->dst, c->src, c->n);
    return HAL_OK;
}

static hal_status_t run_fill(hq_stream_t *stream, void *payload, hal_status_t stream_status)
{
    const template_fill_t *f = payload;
    memset(f->dst, f->value, f->n);
    return HAL_OK;
}

/* Enqueueing copies the payload and returns at once (the latched error on a failed stream). */
static hal_status_t template_memcpy_async(void *stream, const hal_backend_ptr_t *dst,
                                          const hal_backend_ptr_t *src, size_t n)
{
    template_copy_t c = { dst->ptr, src->ptr, n };
    return hq_stream_enqueue(stream, run_copy, &c, sizeof(c), 0);
}

static hal_status_t template_memset_async(void *stream, const hal_backend_ptr_t *dst, int value,
                                          size_t n)
{
    template_fill_t f = { dst->ptr, value, n };
    return hq_stream_enqueue(stream, run_fill, &f, sizeof(f), 0);
}

/* ---- the ops table ------------------------------------------------------------------------- */

static const hal_backend_ops_t template_ops = {
    .struct_size = TEMPLATE_OPS_SIZE,
    .api_version = TEMPLATE_API_VERSION,
    .name = TEMPLATE_NAME,
    .device_type_name = TEMPLATE_NAME,
    .init = template_init,
    .fini = template_fini,
    .device_count = template_device_count,
    .device_open = template_device_open,
    .device_close = template_device_close,
    .device_get_properties = template_device_get_properties,
    /* Streams and events: the engine's slots, as they are. */
    HQ_REQUIRED_SLOTS,
    .device_get_free_memory = template_device_get_free_memory,
    .mem_alloc = template_mem_alloc,
    .mem_free = template_mem_free,
    .memcpy_async = template_memcpy_async,
    .memset_async = template_memset_async,
#ifndef TEMPLATE_REQUIRED_ONLY
    /* Optional, and the engine serves them: with HAL_DEVICE_CAP_HOST_CALLBACKS and
     * HAL_DEVICE_CAP_TIMING_EVENTS. */
    .stream_add_callback = hq_stream_add_callback,
    .event_elapsed_ms = hq_event_elapsed_ms,
#endif
};

/* The one exported symbol. */
HAL_BACKEND_DEFINE_ENTRY(template_ops)
