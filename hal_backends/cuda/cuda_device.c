/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA backend: devices (CUDA ordinals), their properties, synchronisation and free memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/cuda/cuda_internal.h"

void cuda_props_from_cuda(const struct cudaDeviceProp *prop, const cuda_device_facts_t *facts,
                          hal_device_properties_t *props)
{
    snprintf(props->name, sizeof(props->name), "%s", prop->name);
    snprintf(props->vendor, sizeof(props->vendor), "NVIDIA");
    props->index = facts->index;
    /* Device memory is only reachable through copies (even with HMM, pageable access is not
     * promised for cudaMalloc memory): the PyTorch bridge must stage it. */
    props->host_addressable = 0;
    props->total_memory = (uint64_t)prop->totalGlobalMem;
    /* Events time in hardware; host callbacks run on the stream's worker; copies between
     * devices go through cudaMemcpyAsync (peer-to-peer where the devices can, staged by the
     * driver where not); stream-ordered frees wait for an event. */
    uint64_t caps = HAL_DEVICE_CAP_TIMING_EVENTS | HAL_DEVICE_CAP_HOST_CALLBACKS |
                    HAL_DEVICE_CAP_PEER_COPY | HAL_DEVICE_CAP_STREAM_FREE;
    /* Managed memory only where the host and the device may touch it concurrently: without
     * that, a host access while any kernel runs faults, which the HAL's kind cannot express. */
    if (prop->managedMemory && prop->concurrentManagedAccess)
        caps |= HAL_DEVICE_CAP_SHARED_MEMORY;
    if (facts->ipc)
        caps |= HAL_DEVICE_CAP_IPC;
    /* Programs through the runtime's library API (cuda_program.c), on every device. */
    caps |= HAL_DEVICE_CAP_PROGRAMS;
    props->program_formats = CUDA_PROGRAM_FORMATS;
    if (facts->nccl_version > 0) {
        caps |= HAL_DEVICE_CAP_NATIVE_COLLECTIVES;
        if (facts->nccl_version >= CUDA_NCCL_FP8_VERSION && prop->major >= 9)
            caps |= HAL_DEVICE_CAP_FP8_COLLECTIVES;
    }
    props->capabilities = caps;
    props->stream_priority_least = facts->priority_least;
    props->stream_priority_greatest = facts->priority_greatest;
    props->alignment = CUDA_MIN_ALIGNMENT;
}

/* Whether CUDA IPC works on this device and its handles leave room for the HAL's offset and
 * size (cuda_memory.c). Probed once per process and ordinal: it costs an allocation. */
static bool probe_ipc(cuda_device_t *d)
{
    enum { MAX_PROBED = 64 };
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static signed char result[MAX_PROBED]; /* 0 unknown, 1 yes, -1 no */
    if (d->ordinal >= MAX_PROBED)
        return false;
    pthread_mutex_lock(&lock);
    if (result[d->ordinal] == 0) {
        const cuda_rt_t *rt = &d->backend->rt;
        void *p = NULL;
        bool ok = false;
        if (rt->Malloc(&p, 4096) == cudaSuccess) {
            cudaIpcMemHandle_t h;
            memset(&h, 0, sizeof(h));
            ok = rt->IpcGetMemHandle(&h, p) == cudaSuccess && cuda_ipc_handle_fits(&h);
            rt->Free(p);
        }
        rt->GetLastError();
        result[d->ordinal] = ok ? 1 : -1;
    }
    bool ok = result[d->ordinal] > 0;
    pthread_mutex_unlock(&lock);
    return ok;
}

hal_status_t cuda_device_open(void *backend_, uint32_t index, void **out)
{
    cuda_backend_t *backend = backend_;
    const cuda_rt_t *rt = &backend->rt;
    cuda_device_t *d = calloc(1, sizeof(*d));
    if (d == NULL) {
        cuda_set_error(backend, "calloc(%zu) failed for a device", sizeof(*d));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    d->backend = backend;
    d->ordinal = (int)index;
    int prev;
    cudaError_t err = cuda_guard_enter(d, &prev);
    hal_status_t st = HAL_OK;
    if (err != cudaSuccess) {
        st = cuda_fail(backend, err, CUDA_OP_INIT, "cudaSetDevice(%d)", d->ordinal);
        goto out_free;
    }
    err = rt->GetDeviceProperties(&d->prop, d->ordinal);
    if (err != cudaSuccess) {
        st = cuda_fail(backend, err, CUDA_OP_INIT, "cudaGetDeviceProperties(%d)", d->ordinal);
        goto out_guard;
    }
    /* The first call that needs the device's context creates it (the primary context, shared
     * with every other CUDA user of the process). */
    int least = 0, greatest = 0;
    err = rt->DeviceGetStreamPriorityRange(&least, &greatest);
    if (err != cudaSuccess) {
        st = cuda_fail(backend, err, CUDA_OP_INIT, "cudaDeviceGetStreamPriorityRange (device %d)",
                       d->ordinal);
        goto out_guard;
    }
    d->facts = (cuda_device_facts_t){ .index = index,
                                      .priority_least = least,
                                      .priority_greatest = greatest };
    d->facts.ipc = probe_ipc(d);
#if HAL_CUDA_WITH_NCCL
    d->facts.nccl_version = backend->nccl != NULL ? backend->nccl->version : 0;
#endif
    d->managed_ok = d->prop.managedMemory && d->prop.concurrentManagedAccess;
    cuda_guard_leave(d, prev);
    pthread_mutex_init(&d->lock, NULL);
    pthread_mutex_init(&d->ev_lock, NULL);
    pthread_cond_init(&d->ev_cv, NULL);
    pthread_mutex_init(&d->free_lock, NULL);
    *out = d;
    return HAL_OK;

out_guard:
    cuda_guard_leave(d, prev);
out_free:
    free(d);
    return st;
}

/* The core destroyed every stream and event and freed every allocation before this. */
void cuda_device_close(void *device)
{
    cuda_device_t *d = device;
    int prev;
    if (cuda_guard_enter(d, &prev) == cudaSuccess)
        d->backend->rt.DeviceSynchronize();
    cuda_reap_frees(d, true);
    cuda_reap_unloads(d, true);
    cuda_guard_leave(d, prev);
    d->backend->rt.GetLastError();
    pthread_mutex_destroy(&d->free_lock);
    pthread_cond_destroy(&d->ev_cv);
    pthread_mutex_destroy(&d->ev_lock);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

hal_status_t cuda_device_get_properties(void *device, hal_device_properties_t *props)
{
    cuda_device_t *d = device;
    cuda_props_from_cuda(&d->prop, &d->facts, props);
    return HAL_OK;
}

hal_status_t cuda_device_pin_streams(cuda_device_t *d, cuda_stream_t ***pinned, size_t *n)
{
    pthread_mutex_lock(&d->lock);
    size_t count = 0;
    for (cuda_stream_t *s = d->streams; s != NULL; s = s->next)
        count++;
    cuda_stream_t **list = count > 0 ? malloc(count * sizeof(*list)) : NULL;
    if (count > 0 && list == NULL) {
        pthread_mutex_unlock(&d->lock);
        *pinned = NULL;
        *n = 0;
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    size_t i = 0;
    for (cuda_stream_t *s = d->streams; s != NULL; s = s->next) {
        s->refs++;
        list[i++] = s;
    }
    pthread_mutex_unlock(&d->lock);
    *pinned = list;
    *n = count;
    return HAL_OK;
}

void cuda_device_unpin_streams(cuda_device_t *d, cuda_stream_t **pinned, size_t n)
{
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < n; i++)
        cuda_stream_unref(pinned[i]);
    pthread_mutex_unlock(&d->lock);
    free(pinned);
}

/* Waits for every stream's queued host work, then for the device (which also covers work others
 * put on the device's streams through the native handles). Returns the first error latched on
 * any stream, else the device's. */
hal_status_t cuda_device_synchronize(void *device)
{
    cuda_device_t *d = device;
    cuda_backend_t *backend = d->backend;
    /* Pinned, so that no stream is freed while this waits without the lock. */
    cuda_stream_t **pinned = NULL;
    size_t n = 0, i;
    if (cuda_device_pin_streams(d, &pinned, &n) != HAL_OK) {
        cuda_set_error(backend, "malloc failed while synchronizing device %d", d->ordinal);
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    for (i = 0; i < n; i++)
        cuda_stream_wait_nodes(pinned[i]);
    int prev;
    cudaError_t err = cuda_guard_enter(d, &prev);
    if (err == cudaSuccess)
        err = backend->rt.DeviceSynchronize();
    cuda_guard_leave(d, prev);
    /* The first error latched on a stream (in creation order), which reports its message. */
    hal_status_t first = HAL_OK;
    for (i = 0; i < n && first == HAL_OK; i++)
        first = cuda_stream_latched(pinned[i]);
    if (first == HAL_OK && err != cudaSuccess)
        first =
            cuda_fail(backend, err, CUDA_OP_OTHER, "cudaDeviceSynchronize (device %d)", d->ordinal);
    cuda_device_unpin_streams(d, pinned, n);
    cuda_reap_frees(d, false);
    cuda_reap_unloads(d, false);
    return first;
}

hal_status_t cuda_device_get_native_handle(void *device, uintptr_t *native)
{
    *native = (uintptr_t)((cuda_device_t *)device)->ordinal;
    return HAL_OK;
}

hal_status_t cuda_device_get_free_memory(void *device, uint64_t *free_bytes)
{
    cuda_device_t *d = device;
    size_t free_b = 0, total_b = 0;
    int prev;
    cudaError_t err = cuda_guard_enter(d, &prev);
    if (err == cudaSuccess)
        err = d->backend->rt.MemGetInfo(&free_b, &total_b);
    cuda_guard_leave(d, prev);
    if (err != cudaSuccess)
        return cuda_fail(d->backend, err, CUDA_OP_OTHER, "cudaMemGetInfo (device %d)", d->ordinal);
    *free_bytes = (uint64_t)free_b;
    return HAL_OK;
}
