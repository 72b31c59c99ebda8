/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: runtime status codes (NRT_STATUS) to HAL statuses, and messages that name
 * the runtime call, the numeric code and its name:
 *
 *     nrt_tensor_allocate(DEVICE, vnc 0, 4096) returned NRT_RESOURCE (4): out of device memory
 *
 * Mapping: NRT_RESOURCE from an allocation -> HAL_ERROR_OUT_OF_DEVICE_MEMORY; NRT_INVALID ->
 * HAL_ERROR_INVALID_ARGUMENT; NRT_TIMEOUT -> HAL_ERROR_TIMEOUT; NRT_HW_ERROR and the
 * unrecoverable execution-unit and hardware errors -> HAL_ERROR_DEVICE_LOST (sticky, see
 * trn_device_mark_lost); everything else -> HAL_ERROR_BACKEND_SPECIFIC. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "hal_backends/trainium/trn_internal.h"

bool trn_status_is_device_loss(NRT_STATUS rc)
{
    switch (rc) {
    case NRT_HW_ERROR:
    case NRT_EXEC_UNIT_UNRECOVERABLE:
    case NRT_EXEC_HW_ERR_COLLECTIVES:
    case NRT_EXEC_HW_ERR_HBM_UE:
    case NRT_EXEC_HW_ERR_NC_UE:
    case NRT_EXEC_HW_ERR_DMA_ABORT:
    case NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE:
        return true;
    default:
        return false;
    }
}

hal_status_t trn_status_from_nrt(NRT_STATUS rc, trn_nrt_op_t op)
{
    if (trn_status_is_device_loss(rc))
        return HAL_ERROR_DEVICE_LOST;
    switch (rc) {
    case NRT_SUCCESS:
        return HAL_OK;
    case NRT_RESOURCE:
        return op == TRN_OP_ALLOC ? HAL_ERROR_OUT_OF_DEVICE_MEMORY : HAL_ERROR_BACKEND_SPECIFIC;
    case NRT_INVALID:
        return HAL_ERROR_INVALID_ARGUMENT;
    case NRT_TIMEOUT:
        return HAL_ERROR_TIMEOUT;
    default:
        return HAL_ERROR_BACKEND_SPECIFIC;
    }
}

/* The backend's own names, used when the runtime gives none. */
static const char *own_name(NRT_STATUS rc)
{
    switch (rc) {
    case NRT_SUCCESS:
        return "NRT_SUCCESS";
    case NRT_FAILURE:
        return "NRT_FAILURE";
    case NRT_INVALID:
        return "NRT_INVALID";
    case NRT_INVALID_HANDLE:
        return "NRT_INVALID_HANDLE";
    case NRT_RESOURCE:
        return "NRT_RESOURCE";
    case NRT_TIMEOUT:
        return "NRT_TIMEOUT";
    case NRT_HW_ERROR:
        return "NRT_HW_ERROR";
    case NRT_QUEUE_FULL:
        return "NRT_QUEUE_FULL";
    case NRT_LOAD_NOT_ENOUGH_NC:
        return "NRT_LOAD_NOT_ENOUGH_NC";
    case NRT_UNSUPPORTED_NEFF_VERSION:
        return "NRT_UNSUPPORTED_NEFF_VERSION";
    case NRT_FAIL_HOST_MEM_ALLOC:
        return "NRT_FAIL_HOST_MEM_ALLOC";
    case NRT_UNINITIALIZED:
        return "NRT_UNINITIALIZED";
    case NRT_CLOSED:
        return "NRT_CLOSED";
    case NRT_QUEUE_EMPTY:
        return "NRT_QUEUE_EMPTY";
    case NRT_EXEC_UNIT_UNRECOVERABLE:
        return "NRT_EXEC_UNIT_UNRECOVERABLE";
    case NRT_EXEC_BAD_INPUT:
        return "NRT_EXEC_BAD_INPUT";
    case NRT_EXEC_COMPLETED_WITH_NUM_ERR:
        return "NRT_EXEC_COMPLETED_WITH_NUM_ERR";
    case NRT_EXEC_COMPLETED_WITH_ERR:
        return "NRT_EXEC_COMPLETED_WITH_ERR";
    case NRT_EXEC_NC_BUSY:
        return "NRT_EXEC_NC_BUSY";
    case NRT_EXEC_OOB:
        return "NRT_EXEC_OOB";
    case NRT_COLL_PENDING:
        return "NRT_COLL_PENDING";
    case NRT_EXEC_HW_ERR_COLLECTIVES:
        return "NRT_EXEC_HW_ERR_COLLECTIVES";
    case NRT_EXEC_HW_ERR_HBM_UE:
        return "NRT_EXEC_HW_ERR_HBM_UE";
    case NRT_EXEC_HW_ERR_NC_UE:
        return "NRT_EXEC_HW_ERR_NC_UE";
    case NRT_EXEC_HW_ERR_DMA_ABORT:
        return "NRT_EXEC_HW_ERR_DMA_ABORT";
    case NRT_EXEC_SW_NQ_OVERFLOW:
        return "NRT_EXEC_SW_NQ_OVERFLOW";
    case NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE:
        return "NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE";
    case NRT_NETWORK_PROXY_FAILURE:
        return "NRT_NETWORK_PROXY_FAILURE";
    }
    return "UNKNOWN STATUS";
}

const char *trn_status_nrt_name(const trn_nrt_t *nrt, NRT_STATUS rc)
{
    if (nrt != NULL && nrt->get_status_as_str != NULL) {
        const char *name = nrt->get_status_as_str(rc);
        if (name != NULL && name[0] != '\0')
            return name;
    }
    return own_name(rc);
}

/* What a status means for the caller, appended after the name. */
static const char *explain(NRT_STATUS rc, trn_nrt_op_t op)
{
    if (trn_status_is_device_loss(rc))
        return "hardware error, the device is lost";
    switch (rc) {
    case NRT_FAILURE:
        return "the runtime failed (its log says why; NEURON_RT_LOG_LEVEL=INFO for more)";
    case NRT_INVALID:
        return "the runtime rejected the arguments";
    case NRT_INVALID_HANDLE:
        return "the tensor is not live in the runtime";
    case NRT_RESOURCE:
        return op == TRN_OP_ALLOC ? "out of device memory" : "the runtime ran out of a resource";
    case NRT_TIMEOUT:
        return "the runtime timed out";
    case NRT_UNINITIALIZED:
    case NRT_CLOSED:
        return "the runtime is not initialised (nrt_close was called elsewhere in the process?)";
    default:
        return "see the runtime's log (NEURON_RT_LOG_LEVEL=INFO)";
    }
}

hal_status_t trn_status_format(const trn_nrt_t *nrt, NRT_STATUS rc, trn_nrt_op_t op, char *buf,
                               size_t size, const char *call_fmt, ...)
{
    va_list ap;
    va_start(ap, call_fmt);
    int n = vsnprintf(buf, size, call_fmt, ap);
    va_end(ap);
    size_t used = n < 0 ? 0 : ((size_t)n < size ? (size_t)n : size);
    if (used < size)
        snprintf(buf + used, size - used, " returned %s (%d): %s", trn_status_nrt_name(nrt, rc),
                 (int)rc, explain(rc, op));
    return trn_status_from_nrt(rc, op);
}
