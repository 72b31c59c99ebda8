/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: internal types and functions shared by its source files.
 *
 * Object model: one trn_backend_t per init (it owns the loaded libnrt and the runtime between
 * nrt_init and nrt_close) and one trn_device_t per visible logical NeuronCore. Every libnrt call
 * blocks, so streams and events are the backend toolkit's (hal_backends/common/hq.h): a worker
 * thread per stream draining a FIFO, versioned events, execution slots, the sticky lost-core
 * latch; this backend adds its copies and memsets as work tasks.
 *
 * Memory: a device allocation is one nrt_tensor_t placed on the device's core. The HAL address
 * is nrt_tensor_get_va() of the tensor and the allocation cookie is the nrt_tensor_t *, so the
 * core's allocation map turns any interior pointer into (tensor, offset) for the runtime's
 * tensor calls. Pinned host memory is plain page-aligned host memory. */
#ifndef HAL_BACKENDS_TRAINIUM_TRN_INTERNAL_H
#define HAL_BACKENDS_TRAINIUM_TRN_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/hal_backend_abi.h"
#include "hal_backends/common/hq.h"
#include "hal_backends/trainium/nrt/nrt_abi.h"

/* ---- constants ----------------------------------------------------------------------------- */

#define TRN_BACKEND_NAME "trainium"
#define TRN_DEVICE_TYPE  "neuron"

/* Environment variable naming the libnrt.so.1 to load (a file path). */
#define TRN_ENV_LIBNRT "HAL_NEURON_LIBNRT"
/* Where the aws-neuronx-runtime-lib package installs the runtime. */
#define TRN_LIBNRT_INSTALLED "/opt/aws/neuron/lib/libnrt.so.1"
/* The runtime's SONAME, looked up on the dynamic loader's search path last. */
#define TRN_LIBNRT_SONAME "libnrt.so.1"
/* "0": do not fall back to a libnrt.so.1 shipped next to the backend library (a package that
 * bundles the libnrt emulator for machines without Neuron hardware). */
#define TRN_ENV_BUNDLED "HAL_NEURON_BUNDLED_LIBNRT"

/* Guaranteed alignment of device and pinned allocations: the page size the Neuron driver
 * allocates device memory in. libnrt documents no alignment, so the backend checks every
 * address it gets and realigns (trn_memory.c) if a runtime ever returns less. */
#define TRN_MIN_ALIGNMENT 4096u

/* Stream priorities, as the cpu backend: 0 (default, least) to -2 (greatest). */
#define TRN_PRIORITY_LEAST    0
#define TRN_PRIORITY_GREATEST (-2)

/* Stream tasks that move data run at most this many at once per NeuronCore; the waiting ones
 * are served by priority. Two, like the core's two tensor-operation DMA queues. */
#define TRN_DEVICE_SLOTS 2u

/* Copies and memsets of at most this many bytes run on the calling thread when their stream has
 * nothing queued or running (HQ_TASK_INLINE): libnrt's transfer calls block anyway, and below
 * this size a transfer takes less than handing it to a worker that went to sleep and waking the
 * caller again. Larger ones stay on the worker, so that the caller overlaps them. */
#define TRN_INLINE_MAX (256u << 10)

/* Microseconds a stream's waiters spin before they sleep (see trn_device_open), as the cpu
 * backend's default. */
#define TRN_SPIN_US 20u

/* Cross-core device-to-device copies are staged through a host buffer of this many bytes per
 * stream, one chunk at a time. */
#define TRN_STAGE_CHUNK ((size_t)4 << 20)

/* StableHLO programs (trn_compile.c): the Neuron compiler, its extra flags, the NEFF cache and
 * the logical-core configuration it compiles for, as AWS's tools name them. */
#define TRN_ENV_NEURON_CC "NEURON_CC"
#define TRN_ENV_CC_FLAGS  "NEURON_CC_FLAGS"
#define TRN_ENV_CACHE_URL "NEURON_COMPILE_CACHE_URL"
#define TRN_ENV_LNC       "NEURON_LOGICAL_NC_CONFIG"

/* Size of the message buffers (formatted runtime failures), as the engine's. */
#define TRN_MSG_MAX HQ_MSG_MAX

/* ---- libnrt, loaded at run time (trn_nrt.c) ------------------------------------------------ */

/* What the loaded runtime offers beyond the functions the backend cannot work without. Each
 * optional function, or group of functions, is resolved only if present; a group with one
 * member missing is dropped whole. */
typedef struct trn_nrt {
    void *dl;
    char path[PATH_MAX]; /* where the library was found, for messages */
    bool is_emulator;    /* it is the libnrt emulator (it exports nrt_emu_set_fault) */
    /* Version from nrt_get_version (have_version false when the runtime has no such function or
     * it failed): rt_major.rt_minor.rt_patch.rt_maintenance. */
    bool have_version;
    uint64_t version[4];
    char version_detail[RT_VERSION_DETAIL_LEN];
    /* Optional functions the runtime lacks, named for the path line (", "-separated). */
    char missing[2 * TRN_MSG_MAX];

    /* Required. */
    nrt_init_fn *init;
    nrt_close_fn *close;
    nrt_get_visible_vnc_count_fn *get_visible_vnc_count;
    nrt_tensor_allocate_fn *tensor_allocate;
    nrt_tensor_allocate_slice_fn *tensor_allocate_slice;
    nrt_tensor_free_fn *tensor_free;
    nrt_tensor_get_va_fn *tensor_get_va;
    nrt_tensor_read_fn *tensor_read;
    nrt_tensor_write_fn *tensor_write;
    nrt_tensor_copy_fn *tensor_copy;
    nrt_tensor_memset_fn *tensor_memset;

    /* Optional, each on its own (NULL when absent). */
    nrt_get_status_as_str_fn *get_status_as_str;       /* else the backend's own names */
    nrt_get_version_fn *get_version;                   /* else the version is unknown */
    nrt_get_instance_info_fn *get_instance_info;       /* else names without the instance */
    nrt_get_total_vnc_count_fn *get_total_vnc_count;   /* else no node position */
    nrt_get_vnc_memory_stats_fn *get_vnc_memory_stats; /* else memory from the instance */

    /* Optional group: programs (HAL_DEVICE_CAP_PROGRAMS). */
    bool have_programs;
    nrt_allocate_tensor_set_fn *allocate_tensor_set;
    nrt_destroy_tensor_set_fn *destroy_tensor_set;
    nrt_add_tensor_to_tensor_set_fn *add_tensor_to_tensor_set;
    nrt_load_fn *load;
    nrt_unload_fn *unload;
    nrt_execute_fn *execute;
    nrt_get_model_tensor_info_fn *get_model_tensor_info;
    nrt_free_model_tensor_info_fn *free_model_tensor_info;

    /* Optional group: the out-of-NEFF collectives (libnrt 2.30, SDK 2.28, and later).
     * nrta_cc_schedule has one symbol and two signatures (async API 2 and 3): which pointer is
     * called depends on the version (trn_cc_api_t). */
    bool have_cc;
    nrt_cc_global_comm_init_fn *cc_global_comm_init;
    nrta_cc_prepare_fn *cc_prepare;
    nrta_cc_schedule_fn *cc_schedule;
    nrta_cc_schedule_v3_fn *cc_schedule_v3;
    nrta_is_completed_fn *is_completed;
    /* Optional group: async API 2's error trackers (absent from 2.31 on). */
    bool have_trackers;
    nrta_error_tracker_create_fn *error_tracker_create;
    nrta_error_tracker_destroy_fn *error_tracker_destroy;
    nrta_error_tracker_get_list_fn *error_tracker_get_list;
    /* Later additions with no published signature: detected, reported, never called. */
    bool has_cc_create_stream;
    bool has_cc_prepare_coalesced;
    /* The libnrt emulator's extension nrt_emu_stablehlo_status (its nrt_emu.h; NULL on a real
     * runtime): the emulator executes StableHLO modules in place of NEFF. */
    NRT_STATUS (*emu_stablehlo_status)(char *why, size_t size);
} trn_nrt_t;

/* Finds and loads libnrt.so.1 (HAL_NEURON_LIBNRT, then the installed runtime, then the loader's
 * search path), resolves the required functions and whichever optional ones the runtime has,
 * and reads its version. Returns HAL_OK, or HAL_ERROR_NOT_FOUND with the reason in msg (no
 * library, or one that lacks required functions, which are named). */
hal_status_t trn_nrt_load(trn_nrt_t *nrt, char *msg, size_t msg_size);
/* Unloads what trn_nrt_load loaded. */
void trn_nrt_unload(trn_nrt_t *nrt);
/* Whether the runtime's version is at least major.minor (false when it is unknown). */
bool trn_nrt_version_at_least(const trn_nrt_t *nrt, uint64_t major, uint64_t minor);

/* ---- NRT status codes (trn_status.c) ------------------------------------------------------- */

/* What a runtime call was doing, for the status mapping. */
typedef enum trn_nrt_op {
    TRN_OP_ALLOC, /* a memory allocation: NRT_RESOURCE means out of device memory */
    TRN_OP_OTHER,
} trn_nrt_op_t;

/* The HAL status for a runtime status. */
hal_status_t trn_status_from_nrt(NRT_STATUS rc, trn_nrt_op_t op);
/* True for the runtime statuses that mean the device is gone (NRT_HW_ERROR and the
 * unrecoverable execution-unit and hardware errors). */
bool trn_status_is_device_loss(NRT_STATUS rc);
/* The runtime's name for a status ("NRT_RESOURCE"); nrt may be NULL (own table only). */
const char *trn_status_nrt_name(const trn_nrt_t *nrt, NRT_STATUS rc);
/* Formats "<call> returned <NAME> (<code>): <explanation>" into buf, where <call> comes from
 * call_fmt, and returns trn_status_from_nrt(rc, op). */
hal_status_t trn_status_format(const trn_nrt_t *nrt, NRT_STATUS rc, trn_nrt_op_t op, char *buf,
                               size_t size, const char *call_fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* ---- the Neuron compiler (trn_compile.c) --------------------------------------------------- */

typedef struct trn_compiler {
    bool found;           /* path names an executable */
    bool named;           /* by NEURON_CC (else found on PATH as neuronx-cc) */
    char path[PATH_MAX];  /* the compiler, or what NEURON_CC said when not found */
    pthread_mutex_t lock; /* guards version */
    bool have_version;
    char version[128]; /* the first line of `neuronx-cc --version` */
} trn_compiler_t;

/* Looks for the compiler: NEURON_CC (a path, or a name on PATH), else neuronx-cc on PATH. */
void trn_compiler_find(trn_compiler_t *c);
void trn_compiler_fini(trn_compiler_t *c);

struct trn_device;
/* Compiles a StableHLO module for the device's instance into *neff (malloc'd), through the NEFF
 * cache (see trn_compile.c). Returns HAL_OK; HAL_ERROR_NOT_FOUND (the compiler does not run);
 * HAL_ERROR_INVALID_ARGUMENT (the compiler refused the module: the detail names its log; a cache
 * directory that cannot be written); HAL_ERROR_OUT_OF_HOST_MEMORY. Thread safety: safe. */
hal_status_t trn_compile_stablehlo(struct trn_device *device, const void *module, size_t size,
                                   void **neff, size_t *neff_size);

/* ---- StableHLO module text (trn_stablehlo.c) ----------------------------------------------- */

/* Whether image looks like a StableHLO module: MLIR bytecode, or text declaring a module or a
 * function. */
bool trn_stablehlo_looks_like_module(const void *image, size_t size);
/* What the backend reads of `main`'s signature in a text module: for each result, the parameter
 * it must alias (tf.aliasing_output on the parameter) or -1; for each parameter then result,
 * whether its element type is i1 (the runtime reports it as a byte). Bytecode: no aliases, no
 * i1. */
void trn_stablehlo_signature(const void *image, size_t size, uint32_t nparams, uint32_t nresults,
                             int32_t *aliases, bool *is_bool);

/* ---- backend and devices (trn_backend.c, trn_device.c) ------------------------------------- */

/* Which signatures the out-of-NEFF collectives have in the loaded runtime. */
typedef enum trn_cc_api {
    TRN_CC_NONE, /* no native collectives (host-staged) */
    TRN_CC_V2,   /* libnrt 2.30.x (SDK 2.28): error trackers; no in-place */
    TRN_CC_V3,   /* libnrt 2.31 and later (SDK 2.29+): status pointers; in place */
} trn_cc_api_t;

struct trn_cc_job;

HAL_BACKEND_EXPORT hal_status_t hal_backend_get_ops(uint32_t host_api_version,
                                                    const hal_backend_ops_t **ops);

typedef struct trn_backend {
    const hal_host_services_t *host;
    trn_nrt_t nrt;
    uint32_t device_count; /* visible logical NeuronCores */
    uint32_t total_vnc;    /* logical NeuronCores of the instance (0 if unknown) */
    /* Where the visible cores sit among the instance's (hal_device_properties_t.node_index):
     * the first one's instance index, and the instance's count; node_count 0 when the runtime
     * chose the cores and does not say which (NEURON_RT_NUM_CORES). */
    uint32_t node_first;
    uint32_t node_count;
    nrt_instance_info_t instance;
    bool have_instance;
    /* Native collectives (trn_comm.c): which async API the runtime's version calls for, or
     * none (cc_reason says why); cc_enabled unless HAL_NEURON_NATIVE_COLLECTIVES=0. */
    trn_cc_api_t cc_api;
    bool cc_enabled;
    char cc_reason[160];
    pthread_mutex_t cc_lock;      /* the cores' global communicator ids, the environment */
    struct trn_cc_job *graveyard; /* requests given up while the runtime had them */
    /* Which path the backend takes for each thing a runtime may lack, in one line (the "path
     * line"), written to stderr at open where the runtime forced a fallback or
     * NEURON_RT_LOG_LEVEL asks for INFO. */
    char path_line[2 * TRN_MSG_MAX];
    trn_compiler_t compiler; /* StableHLO programs on hardware (trn_compile.c) */
    /* The runtime is started (nrt_init, which takes the process's NeuronCores) by the first
     * call that needs it, not at backend open: a process that imports a framework but uses no
     * device (a launcher, a spawned worker) claims no core (trn_runtime_require). */
    pthread_mutex_t runtime_lock;
    atomic_bool runtime_up;
} trn_backend_t;

/* A core's place in the runtime's global communicator (token 0: none). */
typedef struct trn_cc_world {
    uint64_t token; /* names the global communicator, the same on every member */
    uint32_t g_id, g_count;
} trn_cc_world_t;

typedef struct trn_device {
    hq_device_t hq; /* first: the engine's ops slots take the device object */
    trn_backend_t *backend;
    trn_cc_world_t world;   /* guarded by backend->cc_lock */
    atomic_bool cc_claimed; /* a native communicator runs on this core */
    uint32_t index;         /* logical NeuronCore, relative to the visible set (the vnc) */
    uint64_t total_memory;  /* bytes of device memory of the core */
} trn_device_t;

_Static_assert(offsetof(trn_device_t, hq) == 0, "the engine's device comes first");

/* Starts the runtime if it is not running yet: nrt_init takes the NeuronCores this process was
 * given (NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES, all of them without either). Called by
 * every slot that needs the runtime (device memory, programs, communicators); a failure (the
 * cores held by another process, for one) is that call's error, and the next call tries again.
 * Returns HAL_OK or the runtime's status, with the message set. Thread safety: safe. */
hal_status_t trn_runtime_require(trn_backend_t *backend);

/* Whether the runtime is running (trn_runtime_require succeeded). Thread safety: safe. */
static inline bool trn_runtime_up(const trn_backend_t *backend)
{
    return atomic_load_explicit(&((trn_backend_t *)backend)->runtime_up, memory_order_acquire);
}

/* Records a failure detail for the calling thread through the host services. */
#define trn_set_error(backend, ...) hq_set_error((backend)->host, __VA_ARGS__)

hal_status_t trn_device_open(void *backend, uint32_t index, void **device);
void trn_device_close(void *device);
hal_status_t trn_device_get_properties(void *device, hal_device_properties_t *props);
hal_status_t trn_device_get_native_handle(void *device, uintptr_t *native);
hal_status_t trn_device_get_free_memory(void *device, uint64_t *free_bytes);
/* Marks the core lost (once; later calls keep the first reason) and latches
 * HAL_ERROR_DEVICE_LOST on each of its streams ("NeuronCore <i> is lost: <why>"). */
void trn_device_mark_lost(trn_device_t *device, const char *why);
/* HAL_ERROR_DEVICE_LOST with the reason reported to the caller if the core was lost, else
 * HAL_OK. */
static inline hal_status_t trn_device_check_lost(trn_device_t *device)
{
    return hq_device_check_lost(&device->hq);
}

/* ---- memory and data movement (trn_memory.c) --------------------------------------------- */

/* One side of a copy: host memory (tensor NULL, use ptr) or a range of a device tensor. */
typedef struct trn_endpoint {
    void *ptr;            /* the HAL address (a device address is only used in messages) */
    nrt_tensor_t *tensor; /* the allocation's tensor, NULL for host memory */
    size_t offset;        /* of ptr inside the tensor */
    trn_device_t *device; /* the core that owns the tensor, NULL for host memory */
} trn_endpoint_t;

/* What a queued copy carries (the engine copies it into the task). */
typedef struct trn_copy {
    trn_endpoint_t dst, src;
    size_t n;
} trn_copy_t;

/* What a queued memset carries. */
typedef struct trn_fill {
    trn_endpoint_t dst;
    int value;
    size_t n;
} trn_fill_t;

/* Per-stream state of the backend (the engine's stream extension). */
typedef struct trn_stream_ext {
    void *stage; /* host bounce buffer for cross-core copies (allocated on first use) */
} trn_stream_ext_t;

/* Frees a stream's extension (hq_device_config_t.stream_ext_fini). */
void trn_stream_ext_fini(hq_stream_t *stream, void *ext);

hal_status_t trn_mem_alloc(void *device, hal_mem_kind_t kind, size_t size, size_t alignment,
                           void **ptr, void **cookie);
hal_status_t trn_mem_free(void *device, hal_mem_kind_t kind, void *ptr, void *cookie);
hal_status_t trn_memcpy_async(void *stream, const hal_backend_ptr_t *dst,
                              const hal_backend_ptr_t *src, size_t n);
hal_status_t trn_memset_async(void *stream, const hal_backend_ptr_t *dst, int value, size_t n);

/* ---- native collectives (trn_comm.c, trn_comm_ops.c, trn_reduce.c) ------------------------- */

/* Decides at backend init which async API the runtime calls for (cc_api, cc_reason). */
void trn_cc_setup(trn_backend_t *backend);
/* Frees the requests given up while the runtime still had them; after nrt_close, or whenever
 * they completed (then `completed_only`). */
void trn_cc_reap(trn_backend_t *backend, bool completed_only);

hal_status_t trn_comm_init(void *device, const hal_backend_comm_args_t *args, void **comm);
hal_status_t trn_comm_destroy(void *comm);
hal_status_t trn_comm_abort(void *comm);
hal_status_t trn_comm_get_async_error(void *comm);
hal_status_t trn_comm_get_native_handle(void *comm, uintptr_t *native);
hal_status_t trn_allreduce(void *comm, void *stream, const hal_backend_ptr_t *send,
                           const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype,
                           hal_redop_t op);
hal_status_t trn_allgather(void *comm, void *stream, const hal_backend_ptr_t *send,
                           const hal_backend_ptr_t *recv, size_t sendcount, hal_dtype_t dtype);
hal_status_t trn_reduce_scatter(void *comm, void *stream, const hal_backend_ptr_t *send,
                                const hal_backend_ptr_t *recv, size_t recvcount, hal_dtype_t dtype,
                                hal_redop_t op);

/* Size of an element (0 for an unknown type); the program-only types (bool, i16, u16) too. */
size_t trn_dtype_size(hal_dtype_t dtype);
/* dst = srcs[0] op srcs[1] op ... op srcs[nsrc - 1] for `count` elements, in that order, as the
 * HAL defines the operations (integers wrap; f16 and bf16 are widened, combined and rounded to
 * nearest even at each step; AVG divides the sum by nranks, integers truncating toward zero).
 * dst may be srcs[0] but no other source. */
void trn_reduce(hal_dtype_t dtype, hal_redop_t op, void *dst, const void *const *srcs, int nsrc,
                size_t count, int nranks);
/* buf[i] /= divisor (AVG's last step, as trn_reduce does it). */
void trn_divide(hal_dtype_t dtype, void *buf, size_t count, int divisor);

/* ---- programs (trn_program.c) -------------------------------------------------------------- */

hal_status_t trn_program_create(void *device, hal_program_format_t format, const void *image,
                                size_t size, void **program);
void trn_program_destroy(void *program);
hal_status_t trn_kernel_get_tensor_info(void *program, void *kernel,
                                        hal_kernel_tensor_info_t *info);
hal_status_t trn_program_get_kernel(void *program, const char *name, void **kernel,
                                    hal_kernel_info_t *info);
hal_status_t trn_kernel_launch(void *stream, void *program, void *kernel,
                               const hal_backend_launch_t *launch);

#endif /* HAL_BACKENDS_TRAINIUM_TRN_INTERNAL_H */
