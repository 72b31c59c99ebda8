/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA backend: allocations, stream-ordered frees, copies, memset and IPC.
 *
 * Kinds: device memory is cudaMalloc; pinned memory cudaHostAlloc(portable | mapped), so every
 * device treats it as pinned and can address it; shared memory cudaMallocManaged, only where
 * the device reports concurrentManagedAccess, and only up to the device's free memory (asking
 * for more managed memory than the card has can hang the GPU, not just fail).
 *
 * Alignment: CUDA returns at least 256-byte aligned device memory and page-aligned host memory.
 * A larger alignment is served by allocating size + alignment and handing out an aligned
 * address inside; the allocation's cookie is then what CUDA returned (what gets freed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hal_backends/cuda/cuda_internal.h"

/* ---- allocations --------------------------------------------------------------------------- */

static const char *kind_call(hal_mem_kind_t kind)
{
    switch (kind) {
    case HAL_MEM_KIND_HOST_PINNED:
        return "cudaHostAlloc";
    case HAL_MEM_KIND_SHARED:
        return "cudaMallocManaged";
    default:
        return "cudaMalloc";
    }
}

static cudaError_t raw_alloc(const cuda_device_t *d, hal_mem_kind_t kind, size_t size, void **raw)
{
    const cuda_rt_t *rt = &d->backend->rt;
    switch (kind) {
    case HAL_MEM_KIND_HOST_PINNED:
        return rt->HostAlloc(raw, size, cudaHostAllocPortable | cudaHostAllocMapped);
    case HAL_MEM_KIND_SHARED:
        return rt->MallocManaged(raw, size, cudaMemAttachGlobal);
    default:
        return rt->Malloc(raw, size);
    }
}

static cudaError_t raw_free(const cuda_device_t *d, hal_mem_kind_t kind, void *raw)
{
    const cuda_rt_t *rt = &d->backend->rt;
    return kind == HAL_MEM_KIND_HOST_PINNED ? rt->FreeHost(raw) : rt->Free(raw);
}

/* Pinned requests above this are refused without asking CUDA: no machine pins 64 TiB, and a
 * request that large is a bug or a test of the out-of-memory path. (Not the machine's memory
 * size: virtual machines report less than they grow to.) */
#define HOST_PIN_LIMIT ((uint64_t)1 << 46)

hal_status_t cuda_mem_alloc(void *device, hal_mem_kind_t kind, size_t size, size_t alignment,
                            void **ptr, void **cookie)
{
    cuda_device_t *d = device;
    const cuda_backend_t *b = d->backend;
    const cuda_rt_t *rt = &b->rt;
    const bool host = kind == HAL_MEM_KIND_HOST_PINNED;
    const hal_status_t oom = host ? HAL_ERROR_OUT_OF_HOST_MEMORY : HAL_ERROR_OUT_OF_DEVICE_MEMORY;
    if (kind == HAL_MEM_KIND_SHARED && !d->managed_ok) {
        cuda_set_error(b, "device %d has no concurrent managed memory access", d->ordinal);
        return HAL_ERROR_UNSUPPORTED;
    }
    size_t align = alignment > CUDA_MIN_ALIGNMENT ? alignment : CUDA_MIN_ALIGNMENT;
    size_t natural = host ? 4096u : CUDA_MIN_ALIGNMENT;
    size_t extra = align > natural ? align : 0;
    if (size > SIZE_MAX - extra) {
        cuda_set_error(b, "%zu bytes aligned to %zu overflow the address space", size, align);
        return oom;
    }
    /* Requests that cannot be met are refused before CUDA sees them: clearer messages, and no
     * attempt to pin (or map) more than the machine has. */
    uint64_t limit = host ? HOST_PIN_LIMIT : (uint64_t)d->prop.totalGlobalMem;
    if ((uint64_t)(size + extra) > limit) {
        cuda_set_error(
            b, "out of %s memory: %zu bytes requested, %s %llu", host ? "host" : "device", size,
            host ? "more than pinnable, at most" : "the device has", (unsigned long long)limit);
        return oom;
    }
    int prev;
    cudaError_t err = cuda_guard_enter(d, &prev);
    if (err != cudaSuccess) {
        cuda_guard_leave(d, prev);
        return cuda_fail(b, err, CUDA_OP_OTHER, "cudaSetDevice(%d)", d->ordinal);
    }
    if (kind == HAL_MEM_KIND_SHARED) {
        size_t free_b = 0, total_b = 0;
        err = rt->MemGetInfo(&free_b, &total_b);
        if (err == cudaSuccess && size + extra > free_b) {
            cuda_guard_leave(d, prev);
            cuda_set_error(b,
                           "out of device memory: %zu bytes of managed memory requested, %zu "
                           "free (managed memory is kept within the device's free memory)",
                           size, free_b);
            return HAL_ERROR_OUT_OF_DEVICE_MEMORY;
        }
    }
    cuda_reap_frees(d, false);
    void *raw = NULL;
    err = raw_alloc(d, kind, size + extra, &raw);
    if (err == cudaErrorMemoryAllocation) {
        /* Memory freed in stream order may still be held: wait for it and try once more. */
        rt->GetLastError();
        cuda_reap_frees(d, true);
        err = raw_alloc(d, kind, size + extra, &raw);
    }
    if (err == cudaSuccess && ((uintptr_t)raw % align) != 0 && extra == 0) {
        /* CUDA returned less alignment than it documents: make room and realign. */
        raw_free(d, kind, raw);
        extra = align;
        err = size <= SIZE_MAX - extra ? raw_alloc(d, kind, size + extra, &raw)
                                       : cudaErrorMemoryAllocation;
    }
    if (err != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaError_t info = host ? cudaErrorNotSupported : rt->MemGetInfo(&free_b, &total_b);
        cuda_guard_leave(d, prev);
        if (info == cudaSuccess)
            return cuda_fail(b, err, host ? CUDA_OP_ALLOC_HOST : CUDA_OP_ALLOC_DEVICE,
                             "%s(%zu) (device %d: %zu of %zu bytes free)", kind_call(kind),
                             size + extra, d->ordinal, free_b, total_b);
        return cuda_fail(b, err, host ? CUDA_OP_ALLOC_HOST : CUDA_OP_ALLOC_DEVICE, "%s(%zu)",
                         kind_call(kind), size + extra);
    }
    cuda_guard_leave(d, prev);
    uintptr_t aligned = ((uintptr_t)raw + (align - 1)) & ~(uintptr_t)(align - 1);
    *ptr = (void *)aligned;
    *cookie = (void *)aligned != raw ? raw : NULL;
    return HAL_OK;
}

hal_status_t cuda_mem_free(void *device, hal_mem_kind_t kind, void *ptr, void *cookie)
{
    cuda_device_t *d = device;
    void *raw = cookie != NULL ? cookie : ptr;
    int prev;
    cudaError_t err = cuda_guard_enter(d, &prev);
    if (err == cudaSuccess)
        err = raw_free(d, kind, raw);
    cuda_guard_leave(d, prev);
    if (err != cudaSuccess)
        return cuda_fail(d->backend, err, CUDA_OP_OTHER, "%s(%p)",
                         kind == HAL_MEM_KIND_HOST_PINNED ? "cudaFreeHost" : "cudaFree", raw);
    return HAL_OK;
}

/* ---- stream-ordered frees ------------------------------------------------------------------
 * cudaFree waits for the whole device, so a stream-ordered free records a mark on the stream
 * and the memory is freed once the mark completed: at the next allocation, stream-ordered free
 * or device synchronisation, or when an allocation runs out of memory. */

typedef struct pending_entry {
    cuda_pending_free_t base;
    cuda_device_t *mark_device; /* the stream's device, whose ev_lock guards the mark */
} pending_entry_t;

hal_status_t cuda_mem_free_async(void *stream, void *device, hal_mem_kind_t kind, void *ptr,
                                 void *cookie)
{
    cuda_stream_t *s = stream;
    cuda_device_t *d = device;
    pending_entry_t *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        cuda_set_error(d->backend, "calloc(%zu) failed for a stream-ordered free", sizeof(*f));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    hal_status_t st = cuda_mark_record_free(s, &f->base.mark);
    if (st != HAL_OK) {
        free(f);
        return st;
    }
    f->base.ptr = cookie != NULL ? cookie : ptr;
    f->base.kind = kind;
    f->mark_device = s->device;
    pthread_mutex_lock(&d->free_lock);
    f->base.next = d->frees;
    d->frees = &f->base;
    pthread_mutex_unlock(&d->free_lock);
    cuda_reap_frees(d, false);
    return HAL_OK;
}

void cuda_reap_frees(cuda_device_t *d, bool wait)
{
    const cuda_rt_t *rt = &d->backend->rt;
    pthread_mutex_lock(&d->free_lock);
    if (d->frees == NULL) {
        pthread_mutex_unlock(&d->free_lock);
        return;
    }
    cuda_pending_free_t **pos = &d->frees;
    int prev = -1;
    bool guarded = false;
    while (*pos != NULL) {
        pending_entry_t *f = (pending_entry_t *)*pos;
        cuda_mark_t *m = f->base.mark;
        cuda_device_t *md = f->mark_device;
        if (!cuda_mark_reached(md, m, wait)) {
            pos = &(*pos)->next;
            continue;
        }
        /* Complete, or the device failed (then the memory is freed anyway). */
        if (!guarded) {
            cuda_guard_enter(d, &prev);
            guarded = true;
        }
        raw_free(d, f->base.kind, f->base.ptr);
        cuda_mark_destroy(md, m);
        *pos = f->base.next;
        free(f);
    }
    pthread_mutex_unlock(&d->free_lock);
    if (guarded)
        cuda_guard_leave(d, prev);
    rt->GetLastError();
}

/* ---- copies and memset --------------------------------------------------------------------- */

hal_status_t cuda_memcpy_async(void *stream, const hal_backend_ptr_t *dst,
                               const hal_backend_ptr_t *src, size_t n)
{
    cuda_stream_t *s = stream;
    uint32_t state = atomic_load_explicit(&s->state, memory_order_acquire);
    if (__builtin_expect(state == 0, 1)) {
        const cuda_device_t *d = s->device;
        int prev;
        cudaError_t err = cuda_guard_enter(d, &prev);
        /* cudaMemcpyDefault: the driver infers the direction from the unified address space.
         * With pageable host memory CUDA may block until the copy ran (allowed by the HAL). */
        if (err == cudaSuccess)
            err = d->backend->rt.MemcpyAsync(dst->ptr, src->ptr, n, cudaMemcpyDefault, s->h);
        cuda_guard_leave(d, prev);
        if (__builtin_expect(err != cudaSuccess, 0))
            return cuda_fail(d->backend, err, CUDA_OP_OTHER, "cudaMemcpyAsync(%p, %p, %zu)",
                             dst->ptr, src->ptr, n);
        return HAL_OK;
    }
    if (state & CUDA_STREAM_LATCHED)
        return cuda_stream_latched(s);
    cuda_node_t *node = calloc(1, sizeof(*node));
    if (node == NULL) {
        cuda_set_error(s->device->backend, "calloc(%zu) failed for a queued copy", sizeof(*node));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    node->kind = CUDA_NODE_COPY;
    node->u.copy.dst = dst->ptr;
    node->u.copy.src = src->ptr;
    node->u.copy.n = n;
    return cuda_stream_push(s, node);
}

hal_status_t cuda_memset_async(void *stream, const hal_backend_ptr_t *dst, int value, size_t n)
{
    cuda_stream_t *s = stream;
    uint32_t state = atomic_load_explicit(&s->state, memory_order_acquire);
    /* Pinned host memory is set by the host in stream order: that needs no device mapping of
     * it and no copy engine. */
    bool host = dst->kind == HAL_MEM_KIND_HOST_PINNED;
    if (state == 0 && !host) {
        const cuda_device_t *d = s->device;
        int prev;
        cudaError_t err = cuda_guard_enter(d, &prev);
        if (err == cudaSuccess)
            err = d->backend->rt.MemsetAsync(dst->ptr, value, n, s->h);
        cuda_guard_leave(d, prev);
        if (err != cudaSuccess)
            return cuda_fail(d->backend, err, CUDA_OP_OTHER, "cudaMemsetAsync(%p, %d, %zu)",
                             dst->ptr, value, n);
        return HAL_OK;
    }
    if (state & CUDA_STREAM_LATCHED)
        return cuda_stream_latched(s);
    cuda_node_t *node = calloc(1, sizeof(*node));
    if (node == NULL) {
        cuda_set_error(s->device->backend, "calloc(%zu) failed for a queued memset", sizeof(*node));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    node->kind = host ? CUDA_NODE_HOST_MEMSET : CUDA_NODE_MEMSET;
    node->u.set.dst = dst->ptr;
    node->u.set.value = value;
    node->u.set.n = n;
    return cuda_stream_push(s, node);
}

/* ---- IPC -----------------------------------------------------------------------------------
 * A cudaIpcMemHandle_t is 64 bytes, as large as hal_ipc_handle_t, and names a whole allocation,
 * while a HAL handle names an address inside one. The offset and the size travel in the CUDA
 * handle's last 24 bytes, which the runtime leaves zero: device open checks that it does
 * (cuda_device.c), and IPC is off where it does not. */

#define IPC_TAIL    24u
#define IPC_TAIL_AT (sizeof(cudaIpcMemHandle_t) - IPC_TAIL)
#define IPC_MAGIC   0x31494348u /* "HCI1" */
_Static_assert(sizeof(cudaIpcMemHandle_t) == HAL_IPC_HANDLE_BYTES, "IPC handle sizes differ");

typedef struct ipc_tail {
    uint32_t magic;
    uint32_t pid;    /* the exporter, to refuse a handle of this process */
    uint64_t offset; /* of the exported address from what CUDA allocated */
    uint64_t size;   /* bytes from the exported address to the allocation's end */
} ipc_tail_t;
_Static_assert(sizeof(ipc_tail_t) == IPC_TAIL, "ipc_tail_t layout");

bool cuda_ipc_handle_fits(const cudaIpcMemHandle_t *handle)
{
    const unsigned char *bytes = (const unsigned char *)handle;
    for (size_t i = IPC_TAIL_AT; i < sizeof(*handle); i++)
        if (bytes[i] != 0)
            return false;
    return true;
}

hal_status_t cuda_mem_ipc_export(void *device, const hal_backend_ptr_t *ptr,
                                 hal_ipc_handle_t *handle)
{
    cuda_device_t *d = device;
    const cuda_backend_t *b = d->backend;
    char *raw = ptr->cookie != NULL ? ptr->cookie : ptr->base;
    cudaIpcMemHandle_t h;
    memset(&h, 0, sizeof(h));
    int prev;
    cudaError_t err = cuda_guard_enter(d, &prev);
    if (err == cudaSuccess)
        err = b->rt.IpcGetMemHandle(&h, raw);
    cuda_guard_leave(d, prev);
    if (err != cudaSuccess)
        return cuda_fail(b, err, CUDA_OP_OTHER, "cudaIpcGetMemHandle(%p)", (void *)raw);
    if (!cuda_ipc_handle_fits(&h)) {
        cuda_set_error(b, "this CUDA runtime fills all 64 bytes of its IPC handles: no room for "
                          "the HAL's offset and size");
        return HAL_ERROR_UNSUPPORTED;
    }
    ipc_tail_t tail = { .magic = IPC_MAGIC,
                        .pid = (uint32_t)getpid(),
                        .offset = (uint64_t)((char *)ptr->ptr - raw),
                        .size = (uint64_t)(ptr->size - ptr->offset) };
    memcpy(handle->bytes, &h, sizeof(h));
    memcpy(handle->bytes + IPC_TAIL_AT, &tail, sizeof(tail));
    return HAL_OK;
}

hal_status_t cuda_mem_ipc_open(void *device, const hal_ipc_handle_t *handle, void **ptr,
                               size_t *size, void **cookie)
{
    cuda_device_t *d = device;
    const cuda_backend_t *b = d->backend;
    ipc_tail_t tail;
    memcpy(&tail, handle->bytes + IPC_TAIL_AT, sizeof(tail));
    if (tail.magic != IPC_MAGIC || tail.size == 0) {
        cuda_set_error(b, "not an IPC handle of the cuda backend (tag 0x%08x)", tail.magic);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    if (tail.pid == (uint32_t)getpid()) {
        cuda_set_error(b, "the handle was exported by this process (CUDA maps only other "
                          "processes' memory)");
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    cudaIpcMemHandle_t h;
    memcpy(&h, handle->bytes, sizeof(h));
    memset((unsigned char *)&h + IPC_TAIL_AT, 0, IPC_TAIL);
    void *base = NULL;
    int prev;
    cudaError_t err = cuda_guard_enter(d, &prev);
    if (err == cudaSuccess)
        err = b->rt.IpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess);
    cuda_guard_leave(d, prev);
    if (err != cudaSuccess) {
        hal_status_t st =
            cuda_fail(b, err, CUDA_OP_OTHER, "cudaIpcOpenMemHandle (exporter pid %u)", tail.pid);
        /* The exporter or its allocation is gone, as far as CUDA tells. */
        return st == HAL_ERROR_INVALID_ARGUMENT || st == HAL_ERROR_BACKEND_SPECIFIC ||
                       st == HAL_ERROR_INVALID_HANDLE
                   ? HAL_ERROR_NOT_FOUND
                   : st;
    }
    *ptr = (char *)base + tail.offset;
    *size = (size_t)tail.size;
    *cookie = base;
    return HAL_OK;
}

hal_status_t cuda_mem_ipc_close(void *device, void *ptr, void *cookie)
{
    cuda_device_t *d = device;
    int prev;
    cudaError_t err = cuda_guard_enter(d, &prev);
    if (err == cudaSuccess)
        err = d->backend->rt.IpcCloseMemHandle(cookie);
    cuda_guard_leave(d, prev);
    if (err != cudaSuccess)
        return cuda_fail(d->backend, err, CUDA_OP_OTHER, "cudaIpcCloseMemHandle(%p)", cookie);
    return HAL_OK;
}
