/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA backend: CUDA runtime and NCCL errors to HAL statuses, and the messages that name the
 * failed call. The mappings are pure functions so that the tests check them without a GPU. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "hal_backends/cuda/cuda_internal.h"

bool cuda_error_is_sticky(cudaError_t err)
{
    /* The errors the CUDA documentation calls sticky: "the process is left in an inconsistent
     * state and any further CUDA work will return the same error". */
    switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorCudartUnloading:
        return true;
    default:
        return false;
    }
}

hal_status_t cuda_status_of(cudaError_t err, cuda_op_t op)
{
    if (err == cudaSuccess)
        return HAL_OK;
    if (cuda_error_is_sticky(err))
        return HAL_ERROR_DEVICE_LOST;
    switch (err) {
    case cudaErrorNotReady:
        return HAL_NOT_READY;
    case cudaErrorMemoryAllocation:
        return op == CUDA_OP_ALLOC_HOST ? HAL_ERROR_OUT_OF_HOST_MEMORY
                                        : HAL_ERROR_OUT_OF_DEVICE_MEMORY;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidMemcpyDirection:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidPitchValue:
    case cudaErrorHostMemoryAlreadyRegistered:
    case cudaErrorHostMemoryNotRegistered:
        return HAL_ERROR_INVALID_ARGUMENT;
    case cudaErrorInvalidResourceHandle:
        return HAL_ERROR_INVALID_HANDLE;
    /* No usable device or driver: the backend has nothing to offer on this machine. */
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorSystemNotReady:
    case cudaErrorCallRequiresNewerDriver:
        return HAL_ERROR_NOT_FOUND;
    case cudaErrorInitializationError:
        return op == CUDA_OP_INIT ? HAL_ERROR_NOT_FOUND : HAL_ERROR_DEVICE_LOST;
    case cudaErrorDevicesUnavailable: /* exclusive-process mode, another process holds it */
        return HAL_ERROR_BUSY;
    case cudaErrorNotSupported:
    case cudaErrorPeerAccessUnsupported:
        return HAL_ERROR_UNSUPPORTED;
    case cudaErrorNotPermitted:
        return HAL_ERROR_PERMISSION_DENIED;
    case cudaErrorTimeout:
        return HAL_ERROR_TIMEOUT;
    case cudaErrorDeviceUninitialized: /* e.g. opening an IPC handle of this process */
        return HAL_ERROR_INVALID_ARGUMENT;
    default:
        return HAL_ERROR_BACKEND_SPECIFIC;
    }
}

hal_status_t cuda_nccl_status_of(int result)
{
    /* Values of ncclResult_t (nccl.h), stable across NCCL 2.x. */
    switch (result) {
    case 0: /* ncclSuccess */
        return HAL_OK;
    case 1: /* ncclUnhandledCudaError */
        return HAL_ERROR_BACKEND_SPECIFIC;
    case 2: /* ncclSystemError: sockets, shared memory, the network */
        return HAL_ERROR_BACKEND_SPECIFIC;
    case 3: /* ncclInternalError */
        return HAL_ERROR_INTERNAL;
    case 4: /* ncclInvalidArgument */
    case 5: /* ncclInvalidUsage */
        return HAL_ERROR_INVALID_ARGUMENT;
    case 6: /* ncclRemoteError: a peer failed */
        return HAL_ERROR_REMOTE;
    case 7: /* ncclInProgress */
        return HAL_IN_PROGRESS;
    case 8: /* ncclTimeout (NCCL 2.29) */
        return HAL_ERROR_TIMEOUT;
    default:
        return HAL_ERROR_BACKEND_SPECIFIC;
    }
}

void cuda_error_text(const cuda_rt_t *rt, cudaError_t err, char *buf, size_t size)
{
    const char *name = rt != NULL && rt->GetErrorName != NULL ? rt->GetErrorName(err) : NULL;
    const char *text = rt != NULL && rt->GetErrorString != NULL ? rt->GetErrorString(err) : NULL;
    if (name != NULL && text != NULL)
        snprintf(buf, size, "%s (%d): %s", name, (int)err, text);
    else
        snprintf(buf, size, "CUDA error %d", (int)err);
}

void cuda_set_error(const cuda_backend_t *backend, const char *fmt, ...)
{
    const hal_host_services_t *host = backend != NULL ? backend->host : NULL;
    if (host == NULL || !HAL_STRUCT_HAS(hal_host_services_t, set_error, host->struct_size) ||
        host->set_error == NULL)
        return;
    char buf[CUDA_MSG_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    host->set_error("%s", buf);
}

static hal_status_t format_fail(const cuda_backend_t *backend, cudaError_t err, cuda_op_t op,
                                char *buf, size_t size, const char *fmt, va_list ap)
{
    char what[CUDA_MSG_MAX / 2];
    vsnprintf(what, sizeof(what), fmt, ap);
    char text[CUDA_MSG_MAX / 2];
    cuda_error_text(backend != NULL ? &backend->rt : NULL, err, text, sizeof(text));
    hal_status_t st = cuda_status_of(err, op);
    snprintf(buf, size, "%s returned %s%s", what, text,
             st == HAL_ERROR_DEVICE_LOST ? " (the device is lost: CUDA keeps reporting this fault "
                                           "until the process exits)"
                                         : "");
    return st;
}

hal_status_t cuda_fail(const cuda_backend_t *backend, cudaError_t err, cuda_op_t op,
                       const char *fmt, ...)
{
    char buf[CUDA_MSG_MAX + 128];
    va_list ap;
    va_start(ap, fmt);
    hal_status_t st = format_fail(backend, err, op, buf, sizeof(buf), fmt, ap);
    va_end(ap);
    cuda_set_error(backend, "%s", buf);
    /* A CUDA call that fails leaves its error as the runtime's "last error" too; clear it so
     * that code sharing the runtime (PyTorch's checks of cudaGetLastError) does not pick up a
     * failure that was already reported here. Sticky errors cannot be cleared anyway. */
    if (backend != NULL && backend->rt.GetLastError != NULL)
        backend->rt.GetLastError();
    return st;
}

hal_status_t cuda_fail_msg(const cuda_backend_t *backend, cudaError_t err, cuda_op_t op, char *buf,
                           size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hal_status_t st = format_fail(backend, err, op, buf, size, fmt, ap);
    va_end(ap);
    if (backend != NULL && backend->rt.GetLastError != NULL)
        backend->rt.GetLastError();
    return st;
}
