/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: memory and data movement.
 *
 * Device memory: one nrt_tensor_t (NRT_TENSOR_PLACEMENT_DEVICE) per allocation, on the
 * device's core. The HAL address is nrt_tensor_get_va(tensor), a device address the host must
 * not dereference (device properties say host_addressable = 0); the allocation cookie is the
 * nrt_tensor_t *. The core's allocation map resolves any interior pointer to (cookie, offset),
 * which is exactly the (tensor, offset) pair libnrt's tensor calls take, so the backend keeps
 * no address map of its own.
 *
 * Pinned host memory: plain page-aligned host memory. libnrt reads and writes any host buffer
 * (nrt_tensor_read/write take a plain pointer), and its own host placement is deprecated and
 * limited to 4 MB, so there is nothing to pin through the runtime.
 *
 * Copies (work tasks of the engine, run on the stream's worker holding one of the core's
 * execution slots):
 *   host   -> device   nrt_tensor_write(dst tensor, src, dst offset, n)
 *   device -> host     nrt_tensor_read(src tensor, dst, src offset, n)
 *   device -> device   nrt_tensor_copy on one core; across cores staged through the stream's
 *                      host bounce buffer, TRN_STAGE_CHUNK bytes at a time (the runtime rejects
 *                      device-to-device copies between cores)
 *   host   -> host     memcpy
 * memset: nrt_tensor_memset on device memory, memset on host memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/trainium/trn_internal.h"

/* The name the runtime shows for the backend's tensors in its logs. */
#define TRN_TENSOR_NAME "torch-hal"

/* ---- allocation ---------------------------------------------------------------------------- */

/* Reports a failed nrt_tensor_allocate with the core's memory use when it ran out. */
static hal_status_t alloc_failed(trn_device_t *device, NRT_STATUS rc, size_t size)
{
    trn_backend_t *b = device->backend;
    char msg[TRN_MSG_MAX];
    hal_status_t st =
        trn_status_format(&b->nrt, rc, TRN_OP_ALLOC, msg, sizeof(msg),
                          "nrt_tensor_allocate(DEVICE, vnc %u, %zu)", device->index, size);
    if (trn_status_is_device_loss(rc)) {
        trn_device_mark_lost(device, msg);
    } else if (rc == NRT_RESOURCE) {
        nrt_vnc_memory_stats_t stats = { 0, 0 };
        size_t got = 0;
        if (b->nrt.get_vnc_memory_stats != NULL &&
            b->nrt.get_vnc_memory_stats(device->index, &stats, sizeof(stats), &got) ==
                NRT_SUCCESS &&
            got >= sizeof(stats)) {
            size_t len = strlen(msg);
            snprintf(msg + len, sizeof(msg) - len, " (NeuronCore %u: %zu of %zu bytes in use)",
                     device->index, stats.bytes_used, stats.bytes_limit);
        }
    }
    trn_set_error(b, "%s", msg);
    return st;
}

/* The runtime returned an address that is not aligned enough: allocate `align` bytes more and
 * keep a slice of the new tensor that starts on an aligned address (the slice shares the
 * reference-counted storage, so the full tensor can be freed at once). */
static hal_status_t realign(trn_device_t *device, nrt_tensor_t **tensor, size_t size, size_t align,
                            void **va)
{
    trn_backend_t *b = device->backend;
    trn_nrt_t *nrt = &b->nrt;
    nrt->tensor_free(tensor);
    if (size > SIZE_MAX - align) {
        trn_set_error(b,
                      "an allocation of %zu bytes aligned to %zu bytes exceeds the address "
                      "space",
                      size, align);
        return HAL_ERROR_OUT_OF_DEVICE_MEMORY;
    }
    nrt_tensor_t *full = NULL;
    NRT_STATUS rc = nrt->tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, (int)device->index,
                                         size + align, TRN_TENSOR_NAME, &full);
    if (rc != NRT_SUCCESS)
        return alloc_failed(device, rc, size + align);
    uintptr_t base = (uintptr_t)nrt->tensor_get_va(full);
    size_t pad = (size_t)((align - base % align) % align);
    nrt_tensor_t *slice = NULL;
    rc = nrt->tensor_allocate_slice(full, pad, size, TRN_TENSOR_NAME, &slice);
    nrt->tensor_free(&full);
    if (rc != NRT_SUCCESS) {
        char msg[TRN_MSG_MAX];
        hal_status_t st =
            trn_status_format(nrt, rc, TRN_OP_ALLOC, msg, sizeof(msg),
                              "nrt_tensor_allocate_slice(offset %zu, %zu bytes)", pad, size);
        trn_set_error(b, "%s (aligning an allocation to %zu bytes)", msg, align);
        return st;
    }
    *tensor = slice;
    *va = nrt->tensor_get_va(slice);
    return HAL_OK;
}

static hal_status_t alloc_device(trn_device_t *device, size_t size, size_t alignment, void **ptr,
                                 void **cookie)
{
    trn_backend_t *b = device->backend;
    trn_nrt_t *nrt = &b->nrt;
    hal_status_t st = trn_device_check_lost(device);
    if (st == HAL_OK)
        st = trn_runtime_require(b); /* the process's first device memory takes its cores */
    if (st != HAL_OK)
        return st;
    size_t align = alignment > TRN_MIN_ALIGNMENT ? alignment : TRN_MIN_ALIGNMENT;
    nrt_tensor_t *tensor = NULL;
    NRT_STATUS rc = nrt->tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, (int)device->index, size,
                                         TRN_TENSOR_NAME, &tensor);
    if (rc != NRT_SUCCESS)
        return alloc_failed(device, rc, size);
    void *va = nrt->tensor_get_va(tensor);
    if (va != NULL && (uintptr_t)va % align != 0) {
        st = realign(device, &tensor, size, align, &va);
        if (st != HAL_OK)
            return st;
    }
    if (va == NULL) {
        nrt->tensor_free(&tensor);
        trn_set_error(b,
                      "nrt_tensor_get_va returned NULL for a device tensor of %zu bytes on "
                      "NeuronCore %u",
                      size, device->index);
        return HAL_ERROR_BACKEND_SPECIFIC;
    }
    *ptr = va;
    *cookie = tensor;
    return HAL_OK;
}

hal_status_t trn_mem_alloc(void *device_, hal_mem_kind_t kind, size_t size, size_t alignment,
                           void **ptr, void **cookie)
{
    trn_device_t *device = device_;
    if (kind == HAL_MEM_KIND_DEVICE)
        return alloc_device(device, size, alignment, ptr, cookie);
    if (kind != HAL_MEM_KIND_HOST_PINNED) {
        trn_set_error(device->backend,
                      "memory kind %d is not supported (no shared memory: the "
                      "host cannot address NeuronCore memory)",
                      (int)kind);
        return HAL_ERROR_UNSUPPORTED;
    }
    size_t align = alignment > TRN_MIN_ALIGNMENT ? alignment : TRN_MIN_ALIGNMENT;
    void *p = NULL;
    int rc = posix_memalign(&p, align, size);
    if (rc != 0) {
        trn_set_error(device->backend,
                      "posix_memalign(alignment %zu, %zu bytes) failed for pinned host memory: %s",
                      align, size, strerror(rc));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    *ptr = p;
    *cookie = NULL;
    return HAL_OK;
}

hal_status_t trn_mem_free(void *device_, hal_mem_kind_t kind, void *ptr, void *cookie)
{
    trn_device_t *device = device_;
    if (kind == HAL_MEM_KIND_DEVICE) {
        nrt_tensor_t *tensor = cookie;
        device->backend->nrt.tensor_free(&tensor);
    } else {
        free(ptr);
    }
    return HAL_OK;
}

/* ---- enqueue ------------------------------------------------------------------------------- */

static void endpoint(const hal_backend_ptr_t *p, trn_endpoint_t *e)
{
    e->ptr = p->ptr;
    if (p->kind == HAL_MEM_KIND_DEVICE) {
        e->tensor = p->cookie;
        e->offset = p->offset;
        e->device = p->device;
    } else {
        e->tensor = NULL;
        e->offset = 0;
        e->device = NULL;
    }
}

/* A failed stream or a lost core refuses new work. */
static hal_status_t check_enqueue(hq_stream_t *s, const trn_endpoint_t *a, const trn_endpoint_t *b)
{
    hal_status_t st = hq_stream_latched(s);
    if (st == HAL_OK && a != NULL && a->device != NULL)
        st = trn_device_check_lost(a->device);
    if (st == HAL_OK && b != NULL && b->device != NULL)
        st = trn_device_check_lost(b->device);
    return st;
}

static hal_status_t run_copy(hq_stream_t *stream, void *payload, hal_status_t stream_status);
static hal_status_t run_fill(hq_stream_t *stream, void *payload, hal_status_t stream_status);

_Static_assert(sizeof(trn_copy_t) <= HQ_PAYLOAD_MAX, "a copy fits a task's payload");
_Static_assert(sizeof(trn_fill_t) <= HQ_PAYLOAD_MAX, "a memset fits a task's payload");

/* Small transfers run on the calling thread when the stream is idle (see TRN_INLINE_MAX). */
static uint32_t inline_up_to(size_t n)
{
    return n <= TRN_INLINE_MAX ? HQ_TASK_INLINE : 0;
}

hal_status_t trn_memcpy_async(void *stream, const hal_backend_ptr_t *dst,
                              const hal_backend_ptr_t *src, size_t n)
{
    trn_copy_t copy;
    endpoint(dst, &copy.dst);
    endpoint(src, &copy.src);
    copy.n = n;
    hal_status_t st = check_enqueue(stream, &copy.dst, &copy.src);
    if (st != HAL_OK)
        return st;
    return hq_stream_enqueue(stream, run_copy, &copy, sizeof(copy), inline_up_to(n));
}

hal_status_t trn_memset_async(void *stream, const hal_backend_ptr_t *dst, int value, size_t n)
{
    trn_fill_t fill;
    endpoint(dst, &fill.dst);
    fill.value = value;
    fill.n = n;
    hal_status_t st = check_enqueue(stream, &fill.dst, NULL);
    if (st != HAL_OK)
        return st;
    return hq_stream_enqueue(stream, run_fill, &fill, sizeof(fill), inline_up_to(n));
}

/* ---- execution (stream worker) ------------------------------------------------------------- */

/* Formats the failure of `call` (on a tensor of `device`) into msg; a hardware error marks the
 * core lost. */
static hal_status_t transfer_failed(trn_device_t *device, NRT_STATUS rc, const char *call,
                                    char *msg, size_t size)
{
    hal_status_t st =
        trn_status_format(&device->backend->nrt, rc, TRN_OP_OTHER, msg, size, "%s", call);
    if (trn_status_is_device_loss(rc))
        trn_device_mark_lost(device, msg);
    return st;
}

static hal_status_t do_write(const trn_endpoint_t *dst, size_t dst_off, const void *src, size_t n,
                             char *msg, size_t size)
{
    trn_nrt_t *nrt = &dst->device->backend->nrt;
    NRT_STATUS rc = nrt->tensor_write(dst->tensor, src, dst_off, n);
    if (rc == NRT_SUCCESS)
        return HAL_OK;
    char call[160];
    snprintf(call, sizeof(call), "nrt_tensor_write(tensor of NeuronCore %u, offset %zu, %zu bytes)",
             dst->device->index, dst_off, n);
    return transfer_failed(dst->device, rc, call, msg, size);
}

static hal_status_t do_read(const trn_endpoint_t *src, size_t src_off, void *dst, size_t n,
                            char *msg, size_t size)
{
    trn_nrt_t *nrt = &src->device->backend->nrt;
    NRT_STATUS rc = nrt->tensor_read(src->tensor, dst, src_off, n);
    if (rc == NRT_SUCCESS)
        return HAL_OK;
    char call[160];
    snprintf(call, sizeof(call), "nrt_tensor_read(tensor of NeuronCore %u, offset %zu, %zu bytes)",
             src->device->index, src_off, n);
    return transfer_failed(src->device, rc, call, msg, size);
}

void trn_stream_ext_fini(hq_stream_t *stream, void *ext)
{
    free(((trn_stream_ext_t *)ext)->stage);
}

/* Device to device across cores: through the stream's bounce buffer, chunk by chunk. */
static hal_status_t staged_copy(hq_stream_t *s, const trn_endpoint_t *dst,
                                const trn_endpoint_t *src, size_t n, char *msg, size_t size)
{
    trn_stream_ext_t *ext = hq_stream_ext(s);
    if (ext->stage == NULL) {
        ext->stage = malloc(TRN_STAGE_CHUNK);
        if (ext->stage == NULL) {
            snprintf(msg, size,
                     "malloc(%zu) failed for the host buffer that stages copies from NeuronCore "
                     "%u to NeuronCore %u",
                     TRN_STAGE_CHUNK, src->device->index, dst->device->index);
            return HAL_ERROR_OUT_OF_HOST_MEMORY;
        }
    }
    for (size_t done = 0; done < n;) {
        size_t chunk = n - done < TRN_STAGE_CHUNK ? n - done : TRN_STAGE_CHUNK;
        hal_status_t st = do_read(src, src->offset + done, ext->stage, chunk, msg, size);
        if (st == HAL_OK)
            st = do_write(dst, dst->offset + done, ext->stage, chunk, msg, size);
        if (st != HAL_OK) {
            size_t len = strlen(msg);
            snprintf(msg + len, size - len,
                     " (staging a copy from NeuronCore %u to NeuronCore %u through host memory, "
                     "%zu of %zu bytes done)",
                     src->device->index, dst->device->index, done, n);
            return st;
        }
        done += chunk;
    }
    return HAL_OK;
}

static hal_status_t copy(hq_stream_t *s, const trn_copy_t *t, char *msg, size_t size)
{
    const trn_endpoint_t *dst = &t->dst, *src = &t->src;
    size_t n = t->n;
    if (dst->tensor == NULL && src->tensor == NULL) {
        memcpy(dst->ptr, src->ptr, n);
        return HAL_OK;
    }
    if (src->tensor == NULL)
        return do_write(dst, dst->offset, src->ptr, n, msg, size);
    if (dst->tensor == NULL)
        return do_read(src, src->offset, dst->ptr, n, msg, size);
    if (dst->device != src->device)
        return staged_copy(s, dst, src, n, msg, size);
    trn_nrt_t *nrt = &dst->device->backend->nrt;
    NRT_STATUS rc = nrt->tensor_copy(src->tensor, src->offset, dst->tensor, dst->offset, n);
    if (rc == NRT_SUCCESS)
        return HAL_OK;
    char call[160];
    snprintf(call, sizeof(call),
             "nrt_tensor_copy(NeuronCore %u, src offset %zu, dst offset %zu, %zu bytes)",
             dst->device->index, src->offset, dst->offset, n);
    return transfer_failed(dst->device, rc, call, msg, size);
}

static hal_status_t fill(const trn_fill_t *t, char *msg, size_t size)
{
    const trn_endpoint_t *dst = &t->dst;
    if (dst->tensor == NULL) {
        memset(dst->ptr, t->value, t->n);
        return HAL_OK;
    }
    trn_nrt_t *nrt = &dst->device->backend->nrt;
    NRT_STATUS rc = nrt->tensor_memset(dst->tensor, dst->offset, t->value, t->n);
    if (rc == NRT_SUCCESS)
        return HAL_OK;
    char call[160];
    snprintf(call, sizeof(call),
             "nrt_tensor_memset(tensor of NeuronCore %u, offset %zu, value %d, %zu bytes)",
             dst->device->index, dst->offset, t->value, t->n);
    return transfer_failed(dst->device, rc, call, msg, size);
}

/* The work tasks: a failure's message goes with the status the engine latches. */
static hal_status_t run_copy(hq_stream_t *stream, void *payload, hal_status_t stream_status)
{
    char msg[TRN_MSG_MAX] = "";
    hal_status_t st = copy(stream, payload, msg, sizeof(msg));
    if (st != HAL_OK)
        hq_stream_task_error(stream, "%s", msg); /* it may run inline */
    return st;
}

static hal_status_t run_fill(hq_stream_t *stream, void *payload, hal_status_t stream_status)
{
    char msg[TRN_MSG_MAX] = "";
    hal_status_t st = fill(payload, msg, sizeof(msg));
    if (st != HAL_OK)
        hq_stream_task_error(stream, "%s", msg); /* it may run inline */
    return st;
}
