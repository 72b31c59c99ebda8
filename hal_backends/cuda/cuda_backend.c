/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA backend: entry point, ops table, init (loading the runtime, counting devices, loading
 * NCCL) and the current-device guard. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/cuda/cuda_internal.h"

cudaError_t cuda_guard_enter(const cuda_device_t *device, int *prev)
{
    const cuda_rt_t *rt = &device->backend->rt;
    int cur = -1;
    cudaError_t err = rt->GetDevice(&cur);
    *prev = err == cudaSuccess ? cur : -1;
    if (err == cudaSuccess && cur == device->ordinal)
        return cudaSuccess;
    return rt->SetDevice(device->ordinal);
}

void cuda_guard_leave(const cuda_device_t *device, int prev)
{
    /* Give the caller its current device back: PyTorch and other CUDA code on the thread rely
     * on it. */
    if (prev >= 0 && prev != device->ordinal)
        device->backend->rt.SetDevice(prev);
}

static hal_status_t cuda_init(const hal_host_services_t *host, void **out)
{
    cuda_backend_t *backend = calloc(1, sizeof(*backend));
    if (backend == NULL) {
        cuda_backend_t tmp = { .host = host };
        cuda_set_error(&tmp, "calloc(%zu) failed for the backend object", sizeof(*backend));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    backend->host = host;
    char msg[CUDA_MSG_MAX * 3];
    hal_status_t st = cuda_rt_load(&backend->rt, msg, sizeof(msg));
    if (st != HAL_OK) {
        cuda_set_error(backend, "%s", msg);
        free(backend);
        return st;
    }
    cuda_rt_t *rt = &backend->rt;
    int count = 0;
    cudaError_t err = rt->GetDeviceCount(&count);
    if (err != cudaSuccess || count <= 0) {
        char text[256];
        cuda_error_text(rt, err, text, sizeof(text));
        if (rt->driver_version > 0)
            snprintf(msg, sizeof(msg), "driver for CUDA %d.%d", rt->driver_version / 1000,
                     (rt->driver_version % 1000) / 10);
        else
            snprintf(msg, sizeof(msg), "no NVIDIA driver found");
        cuda_set_error(
            backend,
            "cudaGetDeviceCount returned %s: no usable NVIDIA GPU (CUDA runtime %d.%d at "
            "%s; %s; CUDA_VISIBLE_DEVICES=%s)",
            err != cudaSuccess ? text : "cudaSuccess with 0 devices", rt->runtime_version / 1000,
            (rt->runtime_version % 1000) / 10, rt->path, msg,
            getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "(unset)");
        rt->GetLastError();
        free(backend);
        return err != cudaSuccess ? cuda_status_of(err, CUDA_OP_INIT) : HAL_ERROR_NOT_FOUND;
    }
    backend->device_count = count;
#if HAL_CUDA_WITH_NCCL
    backend->nccl = cuda_nccl_load(backend->nccl_why, sizeof(backend->nccl_why));
#else
    snprintf(backend->nccl_why, sizeof(backend->nccl_why),
             "the backend was built without NCCL headers (HAL_NCCL_PATH)");
#endif
    *out = backend;
    return HAL_OK;
}

/* After the core closed every device: every worker has been joined, every allocation freed.
 * The runtime and NCCL stay loaded (cuda_loader.c says why). */
static void cuda_fini(void *backend)
{
    free(backend);
}

static hal_status_t cuda_device_count(void *backend, uint32_t *count)
{
    *count = (uint32_t)((cuda_backend_t *)backend)->device_count;
    return HAL_OK;
}

static const hal_backend_ops_t cuda_ops = {
    .struct_size = sizeof(hal_backend_ops_t),
    .api_version = HAL_API_VERSION,
    .name = CUDA_BACKEND_NAME,
    .device_type_name = CUDA_DEVICE_TYPE,
    .init = cuda_init,
    .fini = cuda_fini,
    .device_count = cuda_device_count,
    .device_open = cuda_device_open,
    .device_close = cuda_device_close,
    .device_get_properties = cuda_device_get_properties,
    .device_synchronize = cuda_device_synchronize,
    .device_get_native_handle = cuda_device_get_native_handle,
    .device_get_free_memory = cuda_device_get_free_memory,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .memcpy_async = cuda_memcpy_async,
    .memset_async = cuda_memset_async,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_query = cuda_stream_query,
    .stream_synchronize = cuda_stream_synchronize,
    .stream_wait_event = cuda_stream_wait_event,
    .stream_add_callback = cuda_stream_add_callback,
    .stream_get_native_handle = cuda_stream_get_native_handle,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_synchronize = cuda_event_synchronize,
    .event_elapsed_ms = cuda_event_elapsed_ms,
    .event_get_native_handle = cuda_event_get_native_handle,
    .mem_free_async = cuda_mem_free_async,
    /* 1.1 */
    .stream_launch_host_fn = cuda_stream_launch_host_fn,
    .mem_ipc_export = cuda_mem_ipc_export,
    .mem_ipc_open = cuda_mem_ipc_open,
    .mem_ipc_close = cuda_mem_ipc_close,
#if HAL_CUDA_WITH_NCCL
    /* Native collectives through NCCL. When NCCL is not loaded at run time, or ranks share a GPU
     * (which NCCL refuses), comm_init returns no native communicator and the HAL runs that
     * communicator's collectives itself (cuda_comm.c). */
    .comm_init = cuda_comm_init,
    .comm_destroy = cuda_comm_destroy,
    .comm_abort = cuda_comm_abort,
    .comm_get_async_error = cuda_comm_get_async_error,
    .comm_get_native_handle = cuda_comm_get_native_handle,
    .allreduce = cuda_allreduce,
    .broadcast = cuda_broadcast,
    .reduce = cuda_reduce,
    .allgather = cuda_allgather,
    .reduce_scatter = cuda_reduce_scatter,
    .alltoall = cuda_alltoall,
    .send = cuda_send,
    .recv = cuda_recv,
    .group_begin = cuda_group_begin,
    .group_end = cuda_group_end,
#endif
    /* 1.2: programs (PTX, cubin, fatbin) through the runtime's library API. */
    .program_create = cuda_program_create,
    .program_destroy = cuda_program_destroy,
    .program_get_kernel = cuda_program_get_kernel,
    .kernel_launch = cuda_kernel_launch,
};

HAL_BACKEND_EXPORT hal_status_t hal_backend_get_ops(uint32_t host_api_version,
                                                    const hal_backend_ops_t **ops)
{
    if (ops == NULL)
        return HAL_ERROR_INVALID_ARGUMENT;
    if (HAL_VERSION_MAJOR(host_api_version) != HAL_API_VERSION_MAJOR)
        return HAL_ERROR_VERSION_MISMATCH;
    *ops = &cuda_ops;
    return HAL_OK;
}
