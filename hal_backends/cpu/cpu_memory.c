/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: memory. Every kind is ordinary host memory, so every pointer is
 * host-addressable and copies in any direction (peer copies included) are plain memcpy on the
 * stream's worker. Device and shared allocations count against the per-device capacity
 * (HAL_CPU_DEVICE_MEMORY) so that running out of device memory can be tested; pinned memory is
 * neither locked nor counted.
 *
 * Device and shared memory come from the device's arena (cpu_arena.c), which other processes
 * can map (cpu_ipc.c); its cookie is the arena block. Where the device has no arena, and for
 * pinned memory, allocations come from posix_memalign and the cookie carries the requested size,
 * so mem_free can give the bytes back to the capacity without a side table. */
#include <stdlib.h>
#include <string.h>

#include "hal_backends/cpu/cpu_internal.h"

static bool counts_against_capacity(hal_mem_kind_t kind)
{
    return kind == HAL_MEM_KIND_DEVICE || kind == HAL_MEM_KIND_SHARED;
}

/* Reserves `size` bytes of the device's capacity, or reports how much is left. */
static hal_status_t reserve(cpu_device_t *device, size_t size)
{
    uint64_t used = atomic_load(&device->used);
    for (;;) {
        uint64_t free_bytes = used < device->capacity ? device->capacity - used : 0;
        if ((uint64_t)size > free_bytes) {
            cpu_set_error(device->backend,
                          "device %u capacity exceeded: requested %zu bytes, %llu of %llu free "
                          "(%s)",
                          device->index, size, (unsigned long long)free_bytes,
                          (unsigned long long)device->capacity, CPU_ENV_MEMORY);
            return HAL_ERROR_OUT_OF_DEVICE_MEMORY;
        }
        if (atomic_compare_exchange_weak(&device->used, &used, used + size))
            return HAL_OK;
    }
}

/* Takes an allocation from the device's arena; the capacity is already charged. */
static hal_status_t arena_alloc(cpu_device_t *device, size_t size, size_t alignment, void **ptr,
                                void **cookie)
{
    cpu_block_t *block = NULL;
    hal_status_t st = cpu_arena_alloc(device->arena, size, alignment, &block);
    if (st == HAL_ERROR_OUT_OF_HOST_MEMORY) {
        cpu_set_error(device->backend, "malloc failed for the arena bookkeeping of device %u",
                      device->index);
        return st;
    }
    if (st != HAL_OK) {
        /* Only fragmentation gets here: the arena spans twice the capacity. */
        uint32_t ranges = 0;
        uint64_t largest = 0;
        cpu_arena_stats(device->arena, &ranges, &largest);
        uint64_t used = atomic_load(&device->used) - size;
        cpu_set_error(device->backend,
                      "device %u memory is too fragmented: no free range holds %zu bytes aligned "
                      "to %zu (%llu of %llu bytes free; the largest of %u free ranges has %llu "
                      "bytes)",
                      device->index, size, alignment > CPU_MIN_ALIGNMENT ? alignment : 256,
                      (unsigned long long)(device->capacity - used),
                      (unsigned long long)device->capacity, ranges, (unsigned long long)largest);
        return HAL_ERROR_OUT_OF_DEVICE_MEMORY;
    }
    *ptr = cpu_block_ptr(device->arena, block);
    *cookie = block;
    return HAL_OK;
}

/* Allocates memory aligned to max(256, alignment); device and shared kinds are charged to the
 * device's capacity first and come from its arena when it has one. */
hal_status_t cpu_mem_alloc(void *device_, hal_mem_kind_t kind, size_t size, size_t alignment,
                           void **ptr, void **cookie)
{
    cpu_device_t *device = device_;
    bool counted = counts_against_capacity(kind);
    if (counted) {
        hal_status_t st = reserve(device, size);
        if (st != HAL_OK)
            return st;
        if (device->arena != NULL) {
            st = arena_alloc(device, size, alignment, ptr, cookie);
            if (st != HAL_OK)
                atomic_fetch_sub(&device->used, (uint64_t)size);
            return st;
        }
    }
    if (alignment < CPU_MIN_ALIGNMENT)
        alignment = CPU_MIN_ALIGNMENT;
    void *p = NULL;
    int rc = posix_memalign(&p, alignment, size);
    if (rc != 0) {
        if (counted)
            atomic_fetch_sub(&device->used, (uint64_t)size);
        cpu_set_error(device->backend,
                      "posix_memalign(alignment %zu, %zu bytes) failed for device %u: %s",
                      alignment, size, device->index, strerror(rc));
        return kind == HAL_MEM_KIND_HOST_PINNED ? HAL_ERROR_OUT_OF_HOST_MEMORY
                                                : HAL_ERROR_OUT_OF_DEVICE_MEMORY;
    }
    *ptr = p;
    *cookie = (void *)(uintptr_t)size;
    return HAL_OK;
}

/* Frees an allocation and returns its bytes to the capacity. */
hal_status_t cpu_mem_free(void *device_, hal_mem_kind_t kind, void *ptr, void *cookie)
{
    cpu_device_t *device = device_;
    if (!counts_against_capacity(kind)) {
        free(ptr);
        return HAL_OK;
    }
    uint64_t size;
    if (device->arena != NULL) {
        cpu_block_t *block = cookie;
        size = block->requested; /* read first: the node is reused once freed */
        cpu_arena_free(device->arena, block);
    } else {
        size = (uint64_t)(uintptr_t)cookie;
        free(ptr);
    }
    atomic_fetch_sub(&device->used, size);
    return HAL_OK;
}

/* ---- stream work (run by the engine's worker, holding an execution slot) ------------------- */

typedef struct cpu_copy {
    void *dst;
    const void *src;
    size_t n;
} cpu_copy_t;

typedef struct cpu_fill {
    void *dst;
    int value;
    size_t n;
} cpu_fill_t;

static hal_status_t run_copy(hq_stream_t *stream, void *payload, hal_status_t stream_status)
{
    const cpu_copy_t *c = payload;
    memcpy(c->dst, c->src, c->n);
    return HAL_OK;
}

static hal_status_t run_fill(hq_stream_t *stream, void *payload, hal_status_t stream_status)
{
    const cpu_fill_t *f = payload;
    memset(f->dst, f->value, f->n);
    return HAL_OK;
}

/* Enqueues a copy; on a failed stream it enqueues nothing and returns the latched error. */
hal_status_t cpu_memcpy_async(void *stream, const hal_backend_ptr_t *dst,
                              const hal_backend_ptr_t *src, size_t n)
{
    cpu_copy_t c = { dst->ptr, src->ptr, n };
    return hq_stream_enqueue(stream, run_copy, &c, sizeof(c), 0);
}

/* Enqueues a memset; on a failed stream it enqueues nothing and returns the latched error. */
hal_status_t cpu_memset_async(void *stream, const hal_backend_ptr_t *dst, int value, size_t n)
{
    cpu_fill_t f = { dst->ptr, value, n };
    return hq_stream_enqueue(stream, run_fill, &f, sizeof(f), 0);
}
