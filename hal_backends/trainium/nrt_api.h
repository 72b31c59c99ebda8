/* SPDX-License-Identifier: Apache-2.0 */
/* The subset of the AWS Neuron runtime C API (libnrt.so.1) that the Trainium backend uses,
 * declared here so that the backend builds without any Neuron header or library: libnrt is
 * loaded at run time with dlopen (trn_nrt.c) and every function is reached through a pointer.
 *
 * Pinned version: Neuron SDK 2.28.0, libnrt 2.30.50.0 (the public headers nrt/nrt.h and
 * nrt/nrt_status.h of the aws-neuron-sdk repository at its "Neuron SDK Release 2.28.0" commit).
 * The names, numeric values, argument order and struct layouts below are the documented ones;
 * libnrt only ever appends enumerators and struct fields, so later runtimes stay compatible
 * with these declarations.
 *
 * Only types are declared, plus one function-pointer type per function; nothing here names a
 * symbol the linker would have to find. */
#ifndef HAL_BACKENDS_TRAINIUM_NRT_API_H
#define HAL_BACKENDS_TRAINIUM_NRT_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The libnrt release these declarations follow. */
#define TRN_NRT_PINNED_SDK    "2.28.0"
#define TRN_NRT_PINNED_LIBNRT "2.30.50.0"

/* ---- Status codes (nrt_status.h); codes 8 and 12 are not defined ---- */
typedef enum {
    NRT_SUCCESS = 0,
    NRT_FAILURE = 1,
    NRT_INVALID = 2,
    NRT_INVALID_HANDLE = 3,
    NRT_RESOURCE = 4,
    NRT_TIMEOUT = 5,
    NRT_HW_ERROR = 6,
    NRT_QUEUE_FULL = 7,
    NRT_LOAD_NOT_ENOUGH_NC = 9,
    NRT_UNSUPPORTED_NEFF_VERSION = 10,
    NRT_FAIL_HOST_MEM_ALLOC = 11,
    NRT_UNINITIALIZED = 13,
    NRT_CLOSED = 14,
    NRT_QUEUE_EMPTY = 15,
    NRT_EXEC_UNIT_UNRECOVERABLE = 101,
    NRT_EXEC_BAD_INPUT = 1002,
    NRT_EXEC_COMPLETED_WITH_NUM_ERR = 1003,
    NRT_EXEC_COMPLETED_WITH_ERR = 1004,
    NRT_EXEC_NC_BUSY = 1005,
    NRT_EXEC_OOB = 1006,
    NRT_COLL_PENDING = 1100,
    NRT_EXEC_HW_ERR_COLLECTIVES = 1200,
    NRT_EXEC_HW_ERR_HBM_UE = 1201,
    NRT_EXEC_HW_ERR_NC_UE = 1202,
    NRT_EXEC_HW_ERR_DMA_ABORT = 1203,
    NRT_EXEC_SW_NQ_OVERFLOW = 1204,
    NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE = 1205,
    NRT_NETWORK_PROXY_FAILURE = 1206,
} NRT_STATUS;

/* ---- Handles and enums (nrt.h) ---- */
typedef struct nrt_tensor nrt_tensor_t;

typedef enum {
    NRT_TENSOR_PLACEMENT_DEVICE,  /* device memory (HBM) */
    NRT_TENSOR_PLACEMENT_HOST,    /* deprecated DMA-able host memory, at most 4 MB */
    NRT_TENSOR_PLACEMENT_VIRTUAL, /* host memory */
} nrt_tensor_placement_t;

typedef enum {
    NRT_FRAMEWORK_TYPE_INVALID = 0,
    NRT_FRAMEWORK_TYPE_NO_FW = 1,
    NRT_FRAMEWORK_TYPE_TENSORFLOW,
    NRT_FRAMEWORK_TYPE_PYTORCH,
    NRT_FRAMEWORK_TYPE_MXNET,
    NRT_FRAMEWORK_TYPE_PRECHECK,
} nrt_framework_type_t;

/* nrt_instance_info_t.family */
enum {
    NRT_INSTANCE_UNKNOWN = 0,
    NRT_INSTANCE_INF1 = 1,
    NRT_INSTANCE_TRN1 = 2,
    NRT_INSTANCE_TRN1N = 3,
    NRT_INSTANCE_INF2 = 4,
    NRT_INSTANCE_TRN2 = 5,
    NRT_INSTANCE_TRN2N = 6,
    NRT_INSTANCE_INF2E = 7,
    NRT_INSTANCE_TRN2P = 8,
    NRT_INSTANCE_TRN2U = 9,
    NRT_INSTANCE_TRN2E = 10,
    NRT_INSTANCE_TRN2EU = 11,
    NRT_INSTANCE_TRN2AC = 12,
    NRT_INSTANCE_TRN2UAC = 13,
    NRT_INSTANCE_TRN3 = 14,
    NRT_INSTANCE_TRN3PDS98 = 15
};

/* nrt_instance_info_t.size */
enum {
    NRT_INSTANCE_SIZE_1XL,
    NRT_INSTANCE_SIZE_2XL,
    NRT_INSTANCE_SIZE_4XL,
    NRT_INSTANCE_SIZE_6XL,
    NRT_INSTANCE_SIZE_8XL,
    NRT_INSTANCE_SIZE_24XL,
    NRT_INSTANCE_SIZE_32XL,
    NRT_INSTANCE_SIZE_48XL,
    NRT_INSTANCE_SIZE_3XL,
    NRT_INSTANCE_SIZE_UNKNOWN,
};

/* ---- Structs (nrt.h); versioned ones are passed with their size ---- */
typedef struct nrt_instance_info {
    uint32_t family; /* NRT_INSTANCE_* */
    uint32_t size;   /* NRT_INSTANCE_SIZE_* */
    char arch_name[16];
    char device_revision[8];
} nrt_instance_info_t;

typedef struct nrt_vnc_memory_stats {
    size_t bytes_used;
    size_t bytes_limit;
} nrt_vnc_memory_stats_t;

#if defined(__LP64__)
_Static_assert(sizeof(NRT_STATUS) == 4, "NRT_STATUS is int-sized");
_Static_assert(sizeof(nrt_tensor_placement_t) == 4, "enums are int-sized");
_Static_assert(sizeof(nrt_instance_info_t) == 32, "nrt_instance_info_t layout");
_Static_assert(sizeof(nrt_vnc_memory_stats_t) == 16, "nrt_vnc_memory_stats_t layout");
#endif

/* ---- Functions, as pointer types ----
 * Core indices (vnc) are logical NeuronCores relative to the process's visible set. Calls
 * block until their work is done. */

/* Name of a status, e.g. "NRT_INVALID". Callable any time. */
typedef const char *nrt_get_status_as_str_fn(NRT_STATUS status);
/* Initialises the runtime and takes the visible NeuronCores exclusively. */
typedef NRT_STATUS nrt_init_fn(nrt_framework_type_t framework, const char *fw_version,
                               const char *fal_version);
/* Releases the cores and all runtime state. */
typedef void nrt_close_fn(void);
/* Instance family and size; pass sizeof(nrt_instance_info_t). */
typedef NRT_STATUS nrt_get_instance_info_fn(nrt_instance_info_t *info, size_t instance_info_len);
/* Logical cores visible to the process / on the instance. */
typedef NRT_STATUS nrt_get_vnc_count_fn(uint32_t *vnc_count);
/* Tensor of `size` bytes on core vnc (DEVICE) or in host memory (vnc -1). name is optional. */
typedef NRT_STATUS nrt_tensor_allocate_fn(nrt_tensor_placement_t tensor_placement, int vnc,
                                          size_t size, const char *name, nrt_tensor_t **tensor);
/* Frees a tensor and sets *tensor to NULL. */
typedef void nrt_tensor_free_fn(nrt_tensor_t **tensor);
/* Device to host (read) and host to device (write) at an offset of the tensor. */
typedef NRT_STATUS nrt_tensor_read_fn(const nrt_tensor_t *tensor, void *buf, size_t offset,
                                      size_t size);
typedef NRT_STATUS nrt_tensor_write_fn(nrt_tensor_t *tensor, const void *buf, size_t offset,
                                       size_t size);
/* Tensor to tensor; two device tensors must be on the same NeuronCore (else NRT_INVALID). */
typedef NRT_STATUS nrt_tensor_copy_fn(const nrt_tensor_t *src, size_t src_offset, nrt_tensor_t *dst,
                                      size_t dst_offset, size_t size);
/* Sets size bytes at offset to (unsigned char)value. */
typedef NRT_STATUS nrt_tensor_memset_fn(nrt_tensor_t *tensor, uint64_t offset, int value,
                                        size_t size);
/* A tensor viewing [offset, offset + size) of another one's reference-counted storage. */
typedef NRT_STATUS nrt_tensor_allocate_slice_fn(const nrt_tensor_t *tensor_source, size_t offset,
                                                size_t size, const char *name,
                                                nrt_tensor_t **tensor_slice);
/* Address of the tensor's memory (a device address for DEVICE tensors), NULL on failure. */
typedef void *nrt_tensor_get_va_fn(const nrt_tensor_t *tensor);
/* Device memory use and limit of core vnc. */
typedef NRT_STATUS nrt_get_vnc_memory_stats_fn(uint32_t vnc, nrt_vnc_memory_stats_t *stats,
                                               size_t stats_size_in, size_t *stats_size_out);

#endif /* HAL_BACKENDS_TRAINIUM_NRT_API_H */
