/* SPDX-License-Identifier: Apache-2.0 */
/* torch-hal public API: device activity as trace viewers show it.
 *
 * One record format for the work a stream runs, shared by the trace layer's files
 * (HAL_LAYERS=trace, hal/layers/README.md) and by profilers built on the HAL (the PyTorch
 * bridge's torch.profiler rows), so that both traces of one run name, classify and describe
 * the same device work alike: a copy is "Memcpy HtoD" of category "gpu_memcpy" with its bytes
 * and direction in either, a zero fill "Memset (Device)" of category "gpu_memset", a kernel
 * launch is named after its kernel in category "kernel", a collective is "hal_<operation>"
 * in category "kernel" (as trace viewers expect of NCCL's kernels). The categories and names
 * are those TensorBoard's profiler, Perfetto and HTA recognise in GPU traces.
 *
 * Header-only: constants and static inline functions, no symbols of libhal (no ABI change).
 * Thread safety: everything here is pure. */
#ifndef HAL_ACTIVITY_H
#define HAL_ACTIVITY_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a record of the device's activity is. */
typedef enum hal_activity_kind {
    HAL_ACTIVITY_KERNEL = 0,     /* a kernel launch, or an operator run on the device */
    HAL_ACTIVITY_MEMCPY = 1,     /* a copy touching device memory */
    HAL_ACTIVITY_MEMSET = 2,     /* a fill of device memory */
    HAL_ACTIVITY_COLLECTIVE = 3, /* a collective operation of a communicator */
    HAL_ACTIVITY_STREAM = 4,     /* stream bookkeeping: event record or wait, host functions */
} hal_activity_kind_t;

/* Which memories a copy moves bytes between. */
typedef enum hal_copy_direction {
    HAL_COPY_HTOD = 0, /* host to device */
    HAL_COPY_DTOH = 1, /* device to host */
    HAL_COPY_DTOD = 2, /* within one device */
    HAL_COPY_PTOP = 3, /* between two devices */
    HAL_COPY_HTOH = 4, /* host to host (through a device's stream) */
} hal_copy_direction_t;

/* The argument keys a record's fields are written under. */
#define HAL_ACTIVITY_ARG_BYTES     "bytes"     /* copies and fills: bytes moved or written */
#define HAL_ACTIVITY_ARG_DIRECTION "direction" /* copies: hal_copy_direction_name */
#define HAL_ACTIVITY_ARG_DEVICE    "device"    /* the device's index */
#define HAL_ACTIVITY_ARG_STREAM    "stream"    /* the stream it ran on */
#define HAL_ACTIVITY_ARG_BACKEND   "backend"   /* the backend's name */

/* The name of every fill's record. */
#define HAL_ACTIVITY_MEMSET_NAME "Memset (Device)"

/* The prefix of a collective's record name: "hal_" and the operation ("hal_allreduce"). */
#define HAL_ACTIVITY_COLLECTIVE_PREFIX "hal_"

/* The trace category of a kind: "kernel" (kernels and collectives), "gpu_memcpy",
 * "gpu_memset", or "hal.stream" (stream bookkeeping, and any value outside the enum). */
static inline const char *hal_activity_category(hal_activity_kind_t kind)
{
    switch (kind) {
    case HAL_ACTIVITY_KERNEL:
    case HAL_ACTIVITY_COLLECTIVE:
        return "kernel";
    case HAL_ACTIVITY_MEMCPY:
        return "gpu_memcpy";
    case HAL_ACTIVITY_MEMSET:
        return "gpu_memset";
    case HAL_ACTIVITY_STREAM:
        break;
    }
    return "hal.stream";
}

/* The direction of a copy from where its ends are: on a device (device or shared memory) or on
 * the host (pinned or pageable memory); same_device tells DTOD from PTOP. */
static inline hal_copy_direction_t hal_copy_direction_of(bool dst_on_device, bool src_on_device,
                                                         bool same_device)
{
    if (dst_on_device && src_on_device)
        return same_device ? HAL_COPY_DTOD : HAL_COPY_PTOP;
    if (dst_on_device)
        return HAL_COPY_HTOD;
    return src_on_device ? HAL_COPY_DTOH : HAL_COPY_HTOH;
}

/* A direction's value of HAL_ACTIVITY_ARG_DIRECTION: "HtoD", "DtoH", "DtoD", "PtoP", "HtoH"
 * ("unknown" outside the enum). */
static inline const char *hal_copy_direction_name(hal_copy_direction_t direction)
{
    static const char *const names[] = { "HtoD", "DtoH", "DtoD", "PtoP", "HtoH" };
    return (unsigned)direction < sizeof(names) / sizeof(names[0]) ? names[direction] : "unknown";
}

/* The name of a copy's record: "Memcpy " and its direction ("Memcpy HtoD"; "Memcpy" outside the
 * enum). */
static inline const char *hal_copy_activity_name(hal_copy_direction_t direction)
{
    static const char *const names[] = { "Memcpy HtoD", "Memcpy DtoH", "Memcpy DtoD", "Memcpy PtoP",
                                         "Memcpy HtoH" };
    return (unsigned)direction < sizeof(names) / sizeof(names[0]) ? names[direction] : "Memcpy";
}

#ifdef __cplusplus
}
#endif

#endif /* HAL_ACTIVITY_H */
