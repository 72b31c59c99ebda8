/* SPDX-License-Identifier: Apache-2.0 */
/* The AWS Neuron runtime's C ABI (libnrt.so.1) as this project uses it: its one declaration,
 * shared by the Trainium backend, which loads the library with dlopen and calls it through
 * pointers of the function types below, and by the libnrt emulator, which defines the functions
 * and is checked against these types at compile time (NRT_ABI_DECLARE_FUNCTIONS below). Written
 * from AWS Neuron's public documentation; it neither copies nor needs the Neuron headers.
 *
 * Pinned version: Neuron SDK 2.28.0, libnrt 2.30.50.0 (the public headers nrt/nrt.h and
 * nrt/nrt_status.h of the aws-neuron-sdk repository at its "Neuron SDK Release 2.28.0" commit
 * 86a92868; nrt/nrt_version.h and ndl/neuron_driver_shared_tensor_batch_op.h as of a232445a,
 * not changed by that release).
 *
 * Everything here keeps the documented names, numeric values, argument order and struct layout,
 * so a program built against the real headers can load the emulator in place of libnrt.so.1 and
 * the other way round. Layout rules taken from the headers: enums are int-sized; existing
 * enumerators never change value (new ones are appended); versioned structs only grow at the end
 * and are passed together with their size; so later runtimes stay compatible with these
 * declarations. Only the types and functions the emulator provides are declared (the backend
 * uses a subset); the emulator's own extensions live in emulator/nrt_emu.h and are not libnrt's.
 *
 * Types only, plus one function type per function (nrt_<name>_fn): unless
 * NRT_ABI_DECLARE_FUNCTIONS is defined, nothing here names a symbol the linker would have to
 * find. */
#ifndef HAL_BACKENDS_TRAINIUM_NRT_NRT_ABI_H
#define HAL_BACKENDS_TRAINIUM_NRT_NRT_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The libnrt release these declarations follow. */
#define NRT_ABI_SDK_VERSION    "2.28.0"
#define NRT_ABI_LIBNRT_VERSION "2.30.50.0"

/* Runtime API version (nrt.h). */
#define NRT_MAJOR_VERSION 2
#define NRT_MINOR_VERSION 0

/* ---- Status codes (nrt_status.h). Codes 8 and 12 are not defined. ---- */
typedef enum {
    NRT_SUCCESS = 0,
    NRT_FAILURE = 1,            /* non-specific failure */
    NRT_INVALID = 2,            /* invalid argument, NEFF, instruction, descriptor or size */
    NRT_INVALID_HANDLE = 3,     /* invalid handle */
    NRT_RESOURCE = 4,           /* failed to allocate a resource (device out of memory) */
    NRT_TIMEOUT = 5,            /* operation timed out */
    NRT_HW_ERROR = 6,           /* hardware failure */
    NRT_QUEUE_FULL = 7,         /* execution input queue full */
    NRT_LOAD_NOT_ENOUGH_NC = 9, /* not enough NeuronCores for the requested operation */
    NRT_UNSUPPORTED_NEFF_VERSION = 10,
    NRT_FAIL_HOST_MEM_ALLOC = 11, /* kept for backward compatibility; not returned */
    NRT_UNINITIALIZED = 13,       /* call made before nrt_init() */
    NRT_CLOSED = 14,              /* call made after nrt_close() */
    NRT_QUEUE_EMPTY = 15,         /* a queue has no data */
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

/* ---- Handles (nrt.h). The tensor set is a bare void. ---- */
typedef struct nrt_model nrt_model_t;
typedef struct nrt_tensor nrt_tensor_t;
typedef struct nrt_cc_context nrt_cc_context_t;
typedef void nrt_tensor_set_t;

/* ---- Enums (nrt.h) ---- */
typedef enum {
    NRT_TENSOR_PLACEMENT_DEVICE,  /* device memory (HBM) */
    NRT_TENSOR_PLACEMENT_HOST,    /* deprecated: DMA-able host memory, at most 4 MB */
    NRT_TENSOR_PLACEMENT_VIRTUAL, /* host memory */
} nrt_tensor_placement_t;

typedef enum {
    NRT_FRAMEWORK_TYPE_INVALID = 0,
    NRT_FRAMEWORK_TYPE_NO_FW = 1, /* no framework: pass "" for both version strings */
    NRT_FRAMEWORK_TYPE_TENSORFLOW,
    NRT_FRAMEWORK_TYPE_PYTORCH,
    NRT_FRAMEWORK_TYPE_MXNET,
    NRT_FRAMEWORK_TYPE_PRECHECK,
} nrt_framework_type_t;

/* Instance family, nrt_instance_info_t.family. */
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

/* Instance size, nrt_instance_info_t.size. */
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
    NRT_INSTANCE_SIZE_NUM = NRT_INSTANCE_SIZE_UNKNOWN,
};

typedef enum nrt_op_type {
    NRT_OP_ADD = 0x0,
    NRT_OP_FMA = 0x1,
    NRT_OP_MAX = 0x2,
    NRT_OP_MIN = 0x3,
    NRT_OP_INVALID = 0xF,
} nrt_op_type_t;

/* The header values are the ABI; the developer guide's sequential list is out of date. */
typedef enum nrt_dtype {
    NRT_DTYPE_UNKNOWN = 0x0,
    NRT_DTYPE_INVALID = 0x0,
    NRT_DTYPE_UINT64 = 0x1,
    NRT_DTYPE_INT8 = 0x2,
    NRT_DTYPE_UINT8 = 0x3,
    NRT_DTYPE_INT16 = 0x4,
    NRT_DTYPE_UINT16 = 0x5,
    NRT_DTYPE_BFLOAT16 = 0x6,
    NRT_DTYPE_FLOAT16 = 0x7,
    NRT_DTYPE_INT32 = 0x8,
    NRT_DTYPE_UINT32 = 0x9,
    NRT_DTYPE_FLOAT32 = 0xA,
    NRT_DTYPE_FP32R = 0xB,
    NRT_DTYPE_INT64 = 0xC,
    NRT_DTYPE_FP8_E3 = 0xD,
    NRT_DTYPE_FP8_E4 = 0xE,
    NRT_DTYPE_FP8_E5 = 0xF,
} nrt_dtype_t;

typedef enum nrt_cc_op_type {
    NRT_CC_ALLGATHER,
    NRT_CC_ALLREDUCE,
    NRT_CC_REDUCESCATTER
} nrt_cc_op_type_t;

/* ---- Structs ---- */

/* nrt.h. Passed with its size (instance_info_len). */
typedef struct nrt_instance_info {
    uint32_t family; /* NRT_INSTANCE_* */
    uint32_t size;   /* NRT_INSTANCE_SIZE_* */
    char arch_name[16];
    char device_revision[8];
} nrt_instance_info_t;

/* nrt_version.h. Passed with its size. */
#define RT_VERSION_DETAIL_LEN 128
#define GIT_HASH_LEN          64
typedef struct nrt_version {
    uint64_t rt_major;
    uint64_t rt_minor;
    uint64_t rt_patch;
    uint64_t rt_maintenance;
    char rt_detail[RT_VERSION_DETAIL_LEN];
    char git_hash[GIT_HASH_LEN];
} nrt_version_t;

/* ndl/neuron_driver_shared_tensor_batch_op.h: one transfer of a batch. */
typedef uint64_t nrt_tensor_batch_offset_t;
typedef uint64_t nrt_tensor_batch_size_t;
typedef struct nrt_tensor_batch_op {
    nrt_tensor_batch_offset_t offset;
    nrt_tensor_batch_size_t size;
    void *buffer;
} nrt_tensor_batch_op_t;

/* nrt.h: the transfers of a batch on one tensor. */
typedef struct nrt_tensor_batch {
    const nrt_tensor_t *tensor;
    const nrt_tensor_batch_op_t *ops;
    uint32_t num_ops;
} nrt_tensor_batch_t;

/* nrt.h */
typedef struct nrt_tensor_device_allocation_info {
    uint64_t physical_address; /* address in device memory space */
    size_t size;               /* allocation size; may be larger than the tensor size */
    int hbm_index;             /* which HBM holds the tensor */
} nrt_tensor_device_allocation_info_t;

/* nrt.h. Append-only; passed with its size (stats_size_in / stats_size_out). */
typedef struct nrt_vnc_memory_stats {
    size_t bytes_used;
    size_t bytes_limit;
} nrt_vnc_memory_stats_t;

/* ---- Out-of-NEFF collectives (nrt.h, section "Out-of-NEFF collectives", SDK 2.28) ---- */

/* A communicator over a replica group of the global communicator: replica_group lists rank_n
 * global device ids, this worker is replica_group[rank]; ctx_device_id / ctx_device_count are
 * this worker's global device id and the global communicator's size; vnc is the local core. */
typedef struct nrt_cc_comm {
    uint32_t *replica_group; /* a list of participants */
    uint32_t rank;           /* my rank in the replica_group */
    uint32_t rank_n;         /* size of replica_group */
    uint32_t ctx_device_id;
    uint32_t ctx_device_count;
    uint32_t vnc;
} nrt_cc_comm_t;

typedef struct nrt_tensor_list {
    nrt_tensor_t **tensors;
    size_t num_tensors;
} nrt_tensor_list_t;

/* ---- Asynchronous API (nrt_async.h, experimental; SDK 2.28, "async API 2") ---- */

/* Execution units. SDK 2.29's documentation lists TENSOR_OP = 0, COMPUTE, COLLECTIVES instead;
 * nothing here passes these values to the runtime (sequence numbers are opaque to callers). */
typedef enum {
    NRTA_XU_TENSOR_READ = 0,
    NRTA_XU_TENSOR_WRITE,
    NRTA_XU_TENSOR_OP,
    NRTA_XU_COMPUTE,
    NRTA_XU_COLLECTIVES,
    NRTA_XU_TYPE_NUM
} nrta_xu_t;

/* Monotonically increasing ids of requests: the top 16 bits name the execution unit (and queue),
 * the low 48 bits are a strictly ordered sequence number. */
typedef uint64_t nrta_seq_t;
typedef uint16_t nrta_xu_id_t;
#define NRTA_SEQ_NUM_MAX             ((1ull << 48) - 1)
#define NRTA_SEQ_NUM_MASK            NRTA_SEQ_NUM_MAX
#define NRTA_SEQ_GET_SEQ_NUM(seq_id) ((seq_id)&NRTA_SEQ_NUM_MASK)
#define NRTA_SEQ_GET_XU_ID(seq_id)   ((seq_id) >> 48)

/* One failed request, as an error tracker lists it (error_code is an NRT_STATUS). */
typedef struct nrta_error {
    nrta_seq_t seq_id;
    uint64_t error_code;
} nrta_error_t;

/* Collects the errors of requests scheduled with it (async API 2; removed in 3.0). */
typedef struct nrta_error_tracker nrta_error_tracker_t;

/* Documented LP64 layout (x86_64 and aarch64). */
#if defined(__LP64__)
#ifdef __cplusplus
#define NRT_ABI_STATIC_ASSERT static_assert
#else
#define NRT_ABI_STATIC_ASSERT _Static_assert
#endif
NRT_ABI_STATIC_ASSERT(sizeof(NRT_STATUS) == 4, "NRT_STATUS is int-sized");
NRT_ABI_STATIC_ASSERT(sizeof(nrt_tensor_placement_t) == 4, "enums are int-sized");
NRT_ABI_STATIC_ASSERT(sizeof(nrt_framework_type_t) == 4, "enums are int-sized");
NRT_ABI_STATIC_ASSERT(sizeof(nrt_instance_info_t) == 32, "nrt_instance_info_t layout");
NRT_ABI_STATIC_ASSERT(sizeof(nrt_version_t) == 224, "nrt_version_t layout");
NRT_ABI_STATIC_ASSERT(sizeof(nrt_tensor_batch_op_t) == 24, "nrt_tensor_batch_op_t layout");
NRT_ABI_STATIC_ASSERT(sizeof(nrt_tensor_batch_t) == 24, "nrt_tensor_batch_t layout");
NRT_ABI_STATIC_ASSERT(sizeof(nrt_tensor_device_allocation_info_t) == 24,
                      "nrt_tensor_device_allocation_info_t layout");
NRT_ABI_STATIC_ASSERT(sizeof(nrt_vnc_memory_stats_t) == 16, "nrt_vnc_memory_stats_t layout");
NRT_ABI_STATIC_ASSERT(sizeof(nrt_cc_comm_t) == 32, "nrt_cc_comm_t layout");
NRT_ABI_STATIC_ASSERT(sizeof(nrt_tensor_list_t) == 16, "nrt_tensor_list_t layout");
NRT_ABI_STATIC_ASSERT(sizeof(nrta_error_t) == 16, "nrta_error_t layout");
NRT_ABI_STATIC_ASSERT(sizeof(nrta_seq_t) == 8, "nrta_seq_t layout");
#undef NRT_ABI_STATIC_ASSERT
#endif

/* ---- Functions, as function types: nrt_<name>_fn is the type of nrt_<name> ----
 * Outside nrt_init()..nrt_close() the functions that need the runtime return NRT_UNINITIALIZED
 * (before the first nrt_init) or NRT_CLOSED (after nrt_close); the ones marked "any time" do
 * not need it. Core indices (vnc) are logical NeuronCores relative to the process's visible
 * set: with NEURON_RT_VISIBLE_CORES=3-4 the cores are 0 and 1. Calls block until their work is
 * done. */

/* Status name, e.g. "NRT_INVALID" (nrt_status.h). Any time. */
typedef const char *nrt_get_status_as_str_fn(NRT_STATUS status);

/* Library version; pass sizeof(nrt_version_t) (nrt_version.h). Any time. */
typedef NRT_STATUS nrt_get_version_fn(nrt_version_t *ver, size_t size);

/* Initialise the runtime and take the visible NeuronCores exclusively for this process. */
typedef NRT_STATUS nrt_init_fn(nrt_framework_type_t framework, const char *fw_version,
                               const char *fal_version);

/* Release the cores and all runtime state; most calls fail with NRT_CLOSED afterwards. */
typedef void nrt_close_fn(void);

/* Instance family and size; pass sizeof(nrt_instance_info_t). */
typedef NRT_STATUS nrt_get_instance_info_fn(nrt_instance_info_t *info, size_t instance_info_len);

/* Logical cores on the instance, ignoring NEURON_RT_NUM_CORES / _VISIBLE_CORES. Any time.
 * nrt_get_total_nc_count is the deprecated name. */
typedef NRT_STATUS nrt_get_total_nc_count_fn(uint32_t *vnc_count);
typedef NRT_STATUS nrt_get_total_vnc_count_fn(uint32_t *vnc_count);

/* Logical cores visible to the process. Any time. nrt_get_visible_nc_count is deprecated. */
typedef NRT_STATUS nrt_get_visible_nc_count_fn(uint32_t *vnc_count);
typedef NRT_STATUS nrt_get_visible_vnc_count_fn(uint32_t *vnc_count);

/* Allocate a tensor on core vnc (device), or in host memory (pass -1 as vnc). name is
 * optional. */
typedef NRT_STATUS nrt_tensor_allocate_fn(nrt_tensor_placement_t tensor_placement, int vnc,
                                          size_t size, const char *name, nrt_tensor_t **tensor);

/* Free a tensor and set *tensor to NULL. */
typedef void nrt_tensor_free_fn(nrt_tensor_t **tensor);

/* Copy size bytes at offset of the tensor to buf (read) or from buf (write). */
typedef NRT_STATUS nrt_tensor_read_fn(const nrt_tensor_t *tensor, void *buf, size_t offset,
                                      size_t size);
typedef NRT_STATUS nrt_tensor_write_fn(nrt_tensor_t *tensor, const void *buf, size_t offset,
                                       size_t size);

/* Batched reads/writes over several tensors; unsafe skips tensor tracking. */
typedef NRT_STATUS nrt_tensor_read_batch_fn(const nrt_tensor_batch_t *batches, uint64_t num_batches,
                                            bool unsafe);
typedef NRT_STATUS nrt_tensor_write_batch_fn(const nrt_tensor_batch_t *batches,
                                             uint64_t num_batches, bool unsafe);

/* Copy between tensors. Two device tensors must be on the same NeuronCore (else
 * NRT_INVALID). */
typedef NRT_STATUS nrt_tensor_copy_fn(const nrt_tensor_t *src, size_t src_offset, nrt_tensor_t *dst,
                                      size_t dst_offset, size_t size);

/* Size of the tensor in bytes. */
typedef size_t nrt_tensor_get_size_fn(const nrt_tensor_t *tensor);

/* Set size bytes at offset to (unsigned char)value. */
typedef NRT_STATUS nrt_tensor_memset_fn(nrt_tensor_t *tensor, uint64_t offset, int value,
                                        size_t size);

/* A tensor without storage. */
typedef NRT_STATUS nrt_tensor_allocate_empty_fn(const char *name, nrt_tensor_t **tensor);

/* Use a caller-owned buffer as the tensor's storage (placement becomes VIRTUAL); the old
 * storage is released; nrt_tensor_free does not free the buffer. */
typedef NRT_STATUS nrt_tensor_attach_buffer_fn(nrt_tensor_t *tensor, void *buffer, size_t size);

/* A tensor viewing [offset, offset + size) of another one's storage (reference counted). */
typedef NRT_STATUS nrt_tensor_allocate_slice_fn(const nrt_tensor_t *tensor_source, size_t offset,
                                                size_t size, const char *name,
                                                nrt_tensor_t **tensor_slice);

/* Virtual address of the tensor's memory, NULL on failure. For a device tensor it is a device
 * address the host must not dereference. */
typedef void *nrt_tensor_get_va_fn(const nrt_tensor_t *tensor);

/* Device allocation behind a device tensor. */
typedef NRT_STATUS
nrt_tensor_get_device_allocation_info_fn(const nrt_tensor_t *tensor,
                                         nrt_tensor_device_allocation_info_t *alloc_info);

/* Device memory use and limit of core vnc. */
typedef NRT_STATUS nrt_get_vnc_memory_stats_fn(uint32_t vnc, nrt_vnc_memory_stats_t *stats,
                                               size_t stats_size_in, size_t *stats_size_out);

/* ---- Tensor sets, models (nrt.h, nrt_experimental.h) ---- */

/* Tensor names in a NEFF (and in nrt_tensor_info_t). */
#define NRT_TENSOR_NAME_MAX 256

typedef enum nrt_tensor_usage {
    NRT_TENSOR_USAGE_INPUT = 0,
    NRT_TENSOR_USAGE_OUTPUT,
} nrt_tensor_usage_t;

/* One input or output of a loaded model: 296 bytes on LP64 (size at 264, dtype at 272, shape at
 * 280, ndim at 288). */
typedef struct nrt_tensor_info {
    char name[NRT_TENSOR_NAME_MAX];
    nrt_tensor_usage_t usage;
    size_t size; /* bytes */
    nrt_dtype_t dtype;
    uint32_t *shape;
    uint32_t ndim;
} nrt_tensor_info_t;

typedef struct nrt_tensor_info_array {
    uint64_t tensor_count;
    nrt_tensor_info_t tensor_array[];
} nrt_tensor_info_array_t;

/* An empty set of named tensors (the inputs or outputs of an execution). */
typedef NRT_STATUS nrt_allocate_tensor_set_fn(nrt_tensor_set_t **result);

/* Frees the set (not its tensors) and sets *tensor_set to NULL. */
typedef void nrt_destroy_tensor_set_fn(nrt_tensor_set_t **tensor_set);

/* Adds a tensor under a name, replacing one of the same name. */
typedef NRT_STATUS nrt_add_tensor_to_tensor_set_fn(nrt_tensor_set_t *tensor_set,
                                                   const char *tensor_name, nrt_tensor_t *tensor);

/* Loads a NEFF on core vnc (-1: any; vnc_count is deprecated, pass -1). */
typedef NRT_STATUS nrt_load_fn(const void *neff_bytes, size_t size, int32_t vnc, int32_t vnc_count,
                               nrt_model_t **model);

/* Unloads a model; no execution may be in progress. */
typedef NRT_STATUS nrt_unload_fn(nrt_model_t *model);

/* Runs a model: blocks until the outputs are written. */
typedef NRT_STATUS nrt_execute_fn(nrt_model_t *model, const nrt_tensor_set_t *input_set,
                                  nrt_tensor_set_t *output_set);

/* The model's inputs and outputs; free with nrt_free_model_tensor_info. */
typedef NRT_STATUS nrt_get_model_tensor_info_fn(nrt_model_t *model,
                                                nrt_tensor_info_array_t **tensor_info);
typedef NRT_STATUS nrt_free_model_tensor_info_fn(nrt_tensor_info_array_t *tensor_info);

/* ---- Out-of-NEFF collectives and the asynchronous API ----
 * Signatures of the SDK 2.28 headers (nrt.h and nrt_async.h at 86a92868), which are the last
 * published in full. Async API 3.0 (libnrt 2.31, SDK 2.29 and later) replaced the error tracker
 * argument of the scheduling calls with a status pointer written when the request completes
 * (the SDK 2.29 documentation shows it for nrta_tensor_write and nrta_execute_schedule; for
 * nrta_cc_schedule the same change is inferred): nrta_cc_schedule_v3_fn below. */

/* Builds this worker's member of the global communicator for host-driven collectives: core vnc is
 * global device g_device_id of g_device_count. Blocks until every worker joined through the root
 * named by NEURON_RT_ROOT_COMM_ID (ip:port, listened on by global device 0). */
typedef NRT_STATUS nrt_cc_global_comm_init_fn(uint32_t vnc, uint32_t g_device_id,
                                              uint32_t g_device_count);

/* Prepares a collective (cc_op: all-gather, all-reduce, reduce-scatter; op: the reduction) over
 * the replica group of comm, from the input tensors to the output tensors; allocates a context
 * that nrta_cc_schedule consumes. */
typedef NRT_STATUS nrta_cc_prepare_fn(nrt_cc_comm_t *comm, nrt_tensor_list_t *input,
                                      nrt_tensor_list_t *output, nrt_dtype_t dtype,
                                      nrt_op_type_t op, nrt_cc_op_type_t cc_op,
                                      nrt_cc_context_t **cc_ctx);

/* Schedules a prepared collective on a queue of the collectives execution unit (queue 0) and
 * returns at once with its sequence number; the context is freed by the runtime after the
 * collective ran. Async API 2: a failure is recorded in the error tracker err. */
typedef NRT_STATUS nrta_cc_schedule_fn(nrt_cc_context_t **cc_ctx, int queue,
                                       nrta_error_tracker_t *err, nrta_seq_t *req_sequence);

/* The same in async API 3.0: *ret receives the request's final status before it is reported
 * complete. Only for calls through a pointer; a libnrt implementation defines one of the two. */
typedef NRT_STATUS nrta_cc_schedule_v3_fn(nrt_cc_context_t **cc_ctx, int queue, NRT_STATUS *ret,
                                          nrta_seq_t *req_sequence);

/* Whether the request seq completed (NRT_INVALID for a sequence number never issued). */
typedef NRT_STATUS nrta_is_completed_fn(nrta_seq_t seq, bool *is_completed);

/* Async API 2: an error tracker for requests of core lnc_idx; its list of failed requests;
 * destroy. */
typedef NRT_STATUS nrta_error_tracker_create_fn(uint32_t lnc_idx,
                                                nrta_error_tracker_t **error_tracker);
typedef void nrta_error_tracker_destroy_fn(nrta_error_tracker_t *error_tracker);
typedef NRT_STATUS nrta_error_tracker_get_list_fn(nrta_error_tracker_t *error_tracker,
                                                  const nrta_error_t **list, size_t *error_count);

/* ---- The functions themselves, for the code that defines them ----
 * Each is declared with its type above, so a definition whose signature drifts from the ABI is a
 * compile error (conflicting types). Only a libnrt implementation (the emulator) defines
 * NRT_ABI_DECLARE_FUNCTIONS; in code that loads libnrt with dlopen (the backend) a direct call
 * has no declaration and does not compile, instead of making libnrt a link-time dependency. */
#ifdef NRT_ABI_DECLARE_FUNCTIONS
nrt_get_status_as_str_fn nrt_get_status_as_str;
nrt_get_version_fn nrt_get_version;
nrt_init_fn nrt_init;
nrt_close_fn nrt_close;
nrt_get_instance_info_fn nrt_get_instance_info;
nrt_get_total_nc_count_fn nrt_get_total_nc_count;
nrt_get_total_vnc_count_fn nrt_get_total_vnc_count;
nrt_get_visible_nc_count_fn nrt_get_visible_nc_count;
nrt_get_visible_vnc_count_fn nrt_get_visible_vnc_count;
nrt_tensor_allocate_fn nrt_tensor_allocate;
nrt_tensor_free_fn nrt_tensor_free;
nrt_tensor_read_fn nrt_tensor_read;
nrt_tensor_write_fn nrt_tensor_write;
nrt_tensor_read_batch_fn nrt_tensor_read_batch;
nrt_tensor_write_batch_fn nrt_tensor_write_batch;
nrt_tensor_copy_fn nrt_tensor_copy;
nrt_tensor_get_size_fn nrt_tensor_get_size;
nrt_tensor_memset_fn nrt_tensor_memset;
nrt_tensor_allocate_empty_fn nrt_tensor_allocate_empty;
nrt_tensor_attach_buffer_fn nrt_tensor_attach_buffer;
nrt_tensor_allocate_slice_fn nrt_tensor_allocate_slice;
nrt_tensor_get_va_fn nrt_tensor_get_va;
nrt_tensor_get_device_allocation_info_fn nrt_tensor_get_device_allocation_info;
nrt_get_vnc_memory_stats_fn nrt_get_vnc_memory_stats;
nrt_allocate_tensor_set_fn nrt_allocate_tensor_set;
nrt_destroy_tensor_set_fn nrt_destroy_tensor_set;
nrt_add_tensor_to_tensor_set_fn nrt_add_tensor_to_tensor_set;
nrt_load_fn nrt_load;
nrt_unload_fn nrt_unload;
nrt_execute_fn nrt_execute;
nrt_get_model_tensor_info_fn nrt_get_model_tensor_info;
nrt_free_model_tensor_info_fn nrt_free_model_tensor_info;
nrt_cc_global_comm_init_fn nrt_cc_global_comm_init;
nrta_cc_prepare_fn nrta_cc_prepare;
nrta_cc_schedule_fn nrta_cc_schedule;
nrta_is_completed_fn nrta_is_completed;
nrta_error_tracker_create_fn nrta_error_tracker_create;
nrta_error_tracker_destroy_fn nrta_error_tracker_destroy;
nrta_error_tracker_get_list_fn nrta_error_tracker_get_list;
#endif

#ifdef __cplusplus
}
#endif

#endif /* HAL_BACKENDS_TRAINIUM_NRT_NRT_ABI_H */
