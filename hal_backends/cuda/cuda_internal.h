/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA backend: internal types and functions shared by its source files.
 *
 * Object model: one cuda_backend_t per init (it holds the CUDA runtime, libcudart, and NCCL,
 * both loaded with dlopen), one cuda_device_t per CUDA device ordinal, one cuda_stream_t per
 * stream (a non-blocking cudaStream_t plus a lazily started worker thread), one cuda_event_t per
 * event (a primary cudaEvent_t plus spares, see cuda_event.c) and one cuda_comm_t per NCCL
 * communicator.
 *
 * Streams have two modes (cuda_stream.c). Normally every call is issued to CUDA directly. Work
 * that has to run on the host in stream order (host callbacks, host functions, memset of pinned
 * memory) switches the stream to deferred mode: from then on the stream's calls queue up and
 * the stream's worker thread issues them, in order, once the host work before them finished. The
 * stream returns to direct mode when its queue is empty. CUDA's own host functions
 * (cudaLaunchHostFunc) are not used: the driver runs them all on one thread, so a callback that
 * blocks (waiting for a collective's peers, a test gate) would hold back the callbacks of every
 * other stream, and it skips them after a device fault, which the HAL's callbacks must survive.
 *
 * Memory: device memory is cudaMalloc, pinned memory cudaHostAlloc (portable), shared memory
 * cudaMallocManaged (only where the device reports concurrentManagedAccess). The HAL address is
 * the CUDA address; the allocation cookie is the address CUDA returned when it differs (a
 * larger alignment than CUDA's was asked for). */
#ifndef HAL_BACKENDS_CUDA_CUDA_INTERNAL_H
#define HAL_BACKENDS_CUDA_CUDA_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#if HAL_CUDA_WITH_NCCL
#include <nccl.h>
#endif

#include "hal/hal_backend_abi.h"

/* ---- constants ----------------------------------------------------------------------------- */

#define CUDA_BACKEND_NAME "cuda"
#define CUDA_DEVICE_TYPE  "cuda"

/* libcudart to load: a file path; when set, nothing else is tried. */
#define CUDA_ENV_LIBCUDART "HAL_CUDA_LIBCUDART"
/* libnccl to load: a file path, or "none" to run without native collectives. */
#define CUDA_ENV_LIBNCCL "HAL_NCCL_LIBRARY"
/* The libnccl.so.2 beside the nccl.h of the build (//third_party:cuda_configure.bzl's
 * NCCL_LIBRARY), tried after CUDA_ENV_LIBNCCL; "": none recorded (e.g. headers only). */
#ifndef HAL_CUDA_NCCL_BUILD_LIBRARY
#define HAL_CUDA_NCCL_BUILD_LIBRARY ""
#endif
/* The conventional toolkit location, tried after the dynamic loader's search path. */
#define CUDA_DEFAULT_ROOT "/usr/local/cuda"

/* The runtime's major version must be the headers': cudaDeviceProp's layout and several
 * signatures change between majors, and libcudart's SONAME carries the major. */
#define CUDA_RT_MAJOR (CUDART_VERSION / 1000)

/* cudaMalloc returns at least 256-byte aligned addresses (CUDA programming guide). */
#define CUDA_MIN_ALIGNMENT 256u

/* Size of message buffers (latched errors, formatted failures). */
#define CUDA_MSG_MAX 512

/* NCCL release from which fp8 (e4m3, e5m2) reductions exist (and need compute capability 9). */
#define CUDA_NCCL_FP8_VERSION 22400

/* ---- libcudart and libnccl, loaded at run time (cuda_loader.c) ------------------------------
 * X(return type, name without the "cuda"/"nccl" prefix, parameters). Fields are named without
 * the prefix so that header macros (the per-thread default stream variants) never rename them. */

#define CUDA_RT_FUNCS(X)                                                                          \
    X(cudaError_t, GetDeviceCount, (int *count))                                                  \
    X(cudaError_t, GetDeviceProperties, (struct cudaDeviceProp * prop, int device))               \
    X(cudaError_t, SetDevice, (int device))                                                       \
    X(cudaError_t, GetDevice, (int *device))                                                      \
    X(cudaError_t, DeviceGetStreamPriorityRange, (int *least, int *greatest))                     \
    X(cudaError_t, DeviceSynchronize, (void))                                                     \
    X(cudaError_t, DriverGetVersion, (int *version))                                              \
    X(cudaError_t, RuntimeGetVersion, (int *version))                                             \
    X(const char *, GetErrorName, (cudaError_t error))                                            \
    X(const char *, GetErrorString, (cudaError_t error))                                          \
    X(cudaError_t, GetLastError, (void))                                                          \
    X(cudaError_t, Malloc, (void **ptr, size_t size))                                             \
    X(cudaError_t, Free, (void *ptr))                                                             \
    X(cudaError_t, HostAlloc, (void **ptr, size_t size, unsigned int flags))                      \
    X(cudaError_t, FreeHost, (void *ptr))                                                         \
    X(cudaError_t, MallocManaged, (void **ptr, size_t size, unsigned int flags))                  \
    X(cudaError_t, MemGetInfo, (size_t * free_bytes, size_t * total_bytes))                       \
    X(cudaError_t, StreamCreateWithPriority,                                                      \
      (cudaStream_t * stream, unsigned int flags, int priority))                                  \
    X(cudaError_t, StreamDestroy, (cudaStream_t stream))                                          \
    X(cudaError_t, StreamQuery, (cudaStream_t stream))                                            \
    X(cudaError_t, StreamSynchronize, (cudaStream_t stream))                                      \
    X(cudaError_t, StreamWaitEvent, (cudaStream_t stream, cudaEvent_t event, unsigned int flags)) \
    X(cudaError_t, EventCreateWithFlags, (cudaEvent_t * event, unsigned int flags))               \
    X(cudaError_t, EventDestroy, (cudaEvent_t event))                                             \
    X(cudaError_t, EventRecord, (cudaEvent_t event, cudaStream_t stream))                         \
    X(cudaError_t, EventQuery, (cudaEvent_t event))                                               \
    X(cudaError_t, EventSynchronize, (cudaEvent_t event))                                         \
    X(cudaError_t, EventElapsedTime, (float *ms, cudaEvent_t start, cudaEvent_t end))             \
    X(cudaError_t, MemcpyAsync,                                                                   \
      (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream))  \
    X(cudaError_t, MemsetAsync, (void *dst, int value, size_t count, cudaStream_t stream))        \
    X(cudaError_t, IpcGetMemHandle, (cudaIpcMemHandle_t * handle, void *ptr))                     \
    X(cudaError_t, IpcOpenMemHandle, (void **ptr, cudaIpcMemHandle_t handle, unsigned int flags)) \
    X(cudaError_t, IpcCloseMemHandle, (void *ptr))                                                \
    X(cudaError_t, Memcpy, (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind))  \
    X(cudaError_t, LibraryLoadData,                                                               \
      (cudaLibrary_t * library, const void *code, enum cudaJitOption *jit_options,                \
       void **jit_values, unsigned int jit_count, enum cudaLibraryOption *library_options,        \
       void **library_values, unsigned int library_count))                                        \
    X(cudaError_t, LibraryUnload, (cudaLibrary_t library))                                        \
    X(cudaError_t, LibraryGetKernel,                                                              \
      (cudaKernel_t * kernel, cudaLibrary_t library, const char *name))                           \
    X(cudaError_t, LibraryGetKernelCount, (unsigned int *count, cudaLibrary_t library))           \
    X(cudaError_t, LibraryEnumerateKernels,                                                       \
      (cudaKernel_t * kernels, unsigned int count, cudaLibrary_t library))                        \
    X(cudaError_t, LibraryGetGlobal,                                                              \
      (void **ptr, size_t *bytes, cudaLibrary_t library, const char *name))                       \
    X(cudaError_t, FuncGetAttributes, (struct cudaFuncAttributes * attr, const void *func))       \
    X(cudaError_t, FuncSetAttribute, (const void *func, enum cudaFuncAttribute attr, int value))  \
    X(cudaError_t, FuncGetParamInfo,                                                              \
      (const void *func, size_t index, size_t *offset, size_t *size))                             \
    X(cudaError_t, LaunchKernelExC,                                                               \
      (const cudaLaunchConfig_t *config, const void *func, void **args))

#define CUDA_RT_FIELD(ret, name, params) ret(*name) params;

typedef struct cuda_rt {
    void *dl;
    char path[PATH_MAX]; /* where libcudart was found, for messages */
    int runtime_version; /* cudaRuntimeGetVersion, e.g. 13000 */
    int driver_version;  /* cudaDriverGetVersion; 0 without a driver */
    CUDA_RT_FUNCS(CUDA_RT_FIELD)
} cuda_rt_t;

#if HAL_CUDA_WITH_NCCL
#define CUDA_NCCL_FUNCS(X)                                                                         \
    X(ncclResult_t, GetVersion, (int *version))                                                    \
    X(ncclResult_t, GetUniqueId, (ncclUniqueId * id))                                              \
    X(ncclResult_t, CommInitRankConfig,                                                            \
      (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config))            \
    X(ncclResult_t, CommFinalize, (ncclComm_t comm))                                               \
    X(ncclResult_t, CommDestroy, (ncclComm_t comm))                                                \
    X(ncclResult_t, CommAbort, (ncclComm_t comm))                                                  \
    X(ncclResult_t, CommGetAsyncError, (ncclComm_t comm, ncclResult_t * result))                   \
    X(const char *, GetErrorString, (ncclResult_t result))                                         \
    X(const char *, GetLastError, (ncclComm_t comm))                                               \
    X(ncclResult_t, AllReduce,                                                                     \
      (const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,            \
       ncclComm_t comm, cudaStream_t stream))                                                      \
    X(ncclResult_t, Broadcast,                                                                     \
      (const void *send, void *recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm, \
       cudaStream_t stream))                                                                       \
    X(ncclResult_t, Reduce,                                                                        \
      (const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,  \
       ncclComm_t comm, cudaStream_t stream))                                                      \
    X(ncclResult_t, AllGather,                                                                     \
      (const void *send, void *recv, size_t count, ncclDataType_t type, ncclComm_t comm,           \
       cudaStream_t stream))                                                                       \
    X(ncclResult_t, ReduceScatter,                                                                 \
      (const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,            \
       ncclComm_t comm, cudaStream_t stream))                                                      \
    X(ncclResult_t, Send,                                                                          \
      (const void *send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,             \
       cudaStream_t stream))                                                                       \
    X(ncclResult_t, Recv,                                                                          \
      (void *recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,                   \
       cudaStream_t stream))                                                                       \
    X(ncclResult_t, GroupStart, (void))                                                            \
    X(ncclResult_t, GroupEnd, (void))

typedef ncclResult_t (*cuda_nccl_alltoall_fn)(const void *send, void *recv, size_t count,
                                              ncclDataType_t type, ncclComm_t comm,
                                              cudaStream_t stream);

typedef struct cuda_nccl {
    void *dl;
    char path[PATH_MAX];
    int version; /* ncclGetVersion, e.g. 22803 */
    CUDA_NCCL_FUNCS(CUDA_RT_FIELD)
    /* Optional: ncclAlltoAll appeared in NCCL 2.28; older libraries get grouped send/recv. */
    cuda_nccl_alltoall_fn AlltoAll;
} cuda_nccl_t;
#endif

/* Loads libcudart (cuda_loader.c). On failure writes why to msg and returns
 * HAL_ERROR_NOT_FOUND. The library stays loaded for the life of the process (see the file). */
hal_status_t cuda_rt_load(cuda_rt_t *rt, char *msg, size_t size);

#if HAL_CUDA_WITH_NCCL
/* Loads libnccl once per process. Returns the table, or NULL with the reason in msg. */
const cuda_nccl_t *cuda_nccl_load(char *msg, size_t size);
#endif

/* ---- status mapping (cuda_status.c) --------------------------------------------------------- */

/* What a failed call was doing; decides ambiguous mappings (out of memory: device or host). */
typedef enum cuda_op {
    CUDA_OP_OTHER,
    CUDA_OP_INIT,         /* loading, counting devices: no device / no driver is NOT_FOUND */
    CUDA_OP_ALLOC_DEVICE, /* cudaMalloc, cudaMallocManaged */
    CUDA_OP_ALLOC_HOST,   /* cudaHostAlloc */
} cuda_op_t;

/* The HAL status for a CUDA runtime error. Pure: no CUDA call. */
hal_status_t cuda_status_of(cudaError_t err, cuda_op_t op);

/* Whether the error leaves the CUDA context unusable (a device fault): every later call of the
 * process on that device fails with it, so the device is lost. Pure. */
bool cuda_error_is_sticky(cudaError_t err);

/* The HAL status for an ncclResult_t (passed as int so the table exists without nccl.h). */
hal_status_t cuda_nccl_status_of(int result);

/* "cudaErrorMemoryAllocation (2): out of memory", from the runtime when it is loaded, else the
 * number alone. */
void cuda_error_text(const cuda_rt_t *rt, cudaError_t err, char *buf, size_t size);

/* ---- objects -------------------------------------------------------------------------------- */

typedef struct cuda_backend cuda_backend_t;
typedef struct cuda_device cuda_device_t;
typedef struct cuda_stream cuda_stream_t;
typedef struct cuda_event cuda_event_t;

struct cuda_backend {
    const hal_host_services_t *host;
    cuda_rt_t rt;
    int device_count;
#if HAL_CUDA_WITH_NCCL
    const cuda_nccl_t *nccl; /* NULL: native collectives are off (nccl_why says why) */
#endif
    char nccl_why[CUDA_MSG_MAX];
};

/* What the CUDA runtime does not say about a device and properties are made from (kept apart
 * from cudaDeviceProp so that the translation is a pure function, tested without a GPU). */
typedef struct cuda_device_facts {
    uint32_t index;
    int priority_least, priority_greatest; /* cudaDeviceGetStreamPriorityRange */
    bool ipc;                              /* cudaIpcGetMemHandle works and the handle fits */
    int nccl_version;                      /* 0: no NCCL */
} cuda_device_facts_t;

/* Fills props from a device's CUDA properties and facts (cuda_device.c). Pure. */
void cuda_props_from_cuda(const struct cudaDeviceProp *prop, const cuda_device_facts_t *facts,
                          hal_device_properties_t *props);

/* A recorded point in a stream: one cudaEvent_t and whether its record was issued to CUDA yet
 * (a record queued on a stream in deferred mode is not). Guarded by the device's ev_lock. */
typedef struct cuda_mark {
    cudaEvent_t h;
    int refs;            /* queued records/waits and synchronizers that rely on this mark */
    bool issued;         /* the record reached CUDA */
    hal_status_t status; /* error latched on the recording stream before the record */
    char msg[CUDA_MSG_MAX];
    struct cuda_mark *next; /* in the event's spare list, or the device's free list */
} cuda_mark_t;

/* A stream-ordered free waiting for its mark (mem_free_async). */
typedef struct cuda_pending_free {
    void *ptr; /* what CUDA returned */
    hal_mem_kind_t kind;
    cuda_mark_t *mark;
    struct cuda_pending_free *next;
} cuda_pending_free_t;

struct cuda_device {
    cuda_backend_t *backend;
    int ordinal;
    struct cudaDeviceProp prop;
    cuda_device_facts_t facts;
    bool managed_ok; /* cudaMallocManaged for HAL_MEM_KIND_SHARED */

    pthread_mutex_t lock; /* the stream list */
    cuda_stream_t *streams;

    pthread_mutex_t ev_lock; /* every cuda_mark_t and cuda_event_t of the device */
    pthread_cond_t ev_cv;    /* a mark was issued */

    pthread_mutex_t free_lock;
    cuda_pending_free_t *frees;          /* newest first */
    struct cuda_pending_unload *unloads; /* destroyed programs, under free_lock (cuda_program.c) */
};

/* Stream state bits (cuda_stream_t.state). */
#define CUDA_STREAM_DEFERRED 1u /* the worker issues this stream's calls */
#define CUDA_STREAM_LATCHED  2u /* an error latched */

typedef enum cuda_node_kind {
    CUDA_NODE_CALLBACK,    /* hal_host_fn_t */
    CUDA_NODE_HOST_FN,     /* hal_stream_host_fn_t; a failure latches */
    CUDA_NODE_COPY,        /* cudaMemcpyAsync */
    CUDA_NODE_MEMSET,      /* cudaMemsetAsync */
    CUDA_NODE_HOST_MEMSET, /* memset of pinned memory on the host */
    CUDA_NODE_RECORD,      /* cudaEventRecord of a mark */
    CUDA_NODE_WAIT,        /* cudaStreamWaitEvent on a mark, once it is issued */
    CUDA_NODE_LAUNCH,      /* cudaLaunchKernelExC (cuda_program.c) */
} cuda_node_kind_t;

typedef struct cuda_launch cuda_launch_t; /* a queued kernel launch (cuda_program.c) */

typedef struct cuda_node {
    struct cuda_node *next;
    cuda_node_kind_t kind;
    union {
        struct {
            hal_host_fn_t fn;
            void *user;
        } cb;
        struct {
            hal_stream_host_fn_t fn;
            void *arg;
        } hf;
        struct {
            void *dst;
            const void *src;
            size_t n;
        } copy;
        struct {
            void *dst;
            int value;
            size_t n;
        } set;
        struct {
            cuda_event_t *event; /* NULL for marks of stream-ordered frees */
            cuda_mark_t *mark;
        } mark;
        cuda_launch_t *launch; /* owned by the node */
    } u;
} cuda_node_t;

struct cuda_stream {
    cuda_device_t *device;
    cudaStream_t h;
    int32_t priority;
    _Atomic uint32_t state; /* CUDA_STREAM_* bits; read without the lock on the fast path */

    pthread_mutex_t lock;   /* the queue, the counters, the worker, the latched error */
    pthread_cond_t work_cv; /* work for the worker, or stop */
    pthread_cond_t done_cv; /* a node completed */
    cuda_node_t *head, *tail;
    uint64_t enqueued, completed; /* nodes */
    bool worker_started, stopping;
    pthread_t worker;
    cudaEvent_t point; /* the worker's marker: where the stream reached a host node */

    hal_status_t latched;
    char latched_msg[CUDA_MSG_MAX];

    int refs; /* guarded by device->lock: the HAL's handle, device_synchronize */
    struct cuda_stream *prev, *next;
};

struct cuda_event {
    cuda_device_t *device;
    uint32_t flags;          /* HAL_EVENT_FLAG_* */
    unsigned int cuda_flags; /* for cudaEventCreateWithFlags */
    cuda_mark_t *primary;    /* the native handle; used whenever no queued call holds it */
    cuda_mark_t *cur;        /* the current version; NULL: never recorded */
    cuda_mark_t *spares;     /* idle extra marks */
    int refs;                /* the handle + every mark reference */
};

/* ---- shared helpers ------------------------------------------------------------------------- */

/* host->set_error, formatted here (the services take a format). */
void cuda_set_error(const cuda_backend_t *backend, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Reports a failed CUDA call: "<what> returned cudaErrorX (N): <string>", through set_error,
 * and returns the mapped status (sticky faults become HAL_ERROR_DEVICE_LOST). */
hal_status_t cuda_fail(const cuda_backend_t *backend, cudaError_t err, cuda_op_t op,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The same, written to buf instead (for errors that latch). */
hal_status_t cuda_fail_msg(const cuda_backend_t *backend, cudaError_t err, cuda_op_t op, char *buf,
                           size_t size, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Makes the device current on the calling thread; *prev receives the device that was current,
 * for cuda_guard_leave. Cheap when it already is (one cudaGetDevice). */
cudaError_t cuda_guard_enter(const cuda_device_t *device, int *prev);
void cuda_guard_leave(const cuda_device_t *device, int prev);

/* ---- devices (cuda_device.c) ---------------------------------------------------------------- */
hal_status_t cuda_device_open(void *backend, uint32_t index, void **device);
void cuda_device_close(void *device);
hal_status_t cuda_device_get_properties(void *device, hal_device_properties_t *props);
hal_status_t cuda_device_synchronize(void *device);
hal_status_t cuda_device_get_native_handle(void *device, uintptr_t *native);
hal_status_t cuda_device_get_free_memory(void *device, uint64_t *free_bytes);
/* Takes a reference on every stream of the device (so that none is freed while the caller uses
 * it without the device's lock): *pinned (malloc'd, NULL when there is none) and *n.
 * HAL_ERROR_OUT_OF_HOST_MEMORY: nothing is pinned. */
hal_status_t cuda_device_pin_streams(cuda_device_t *device, cuda_stream_t ***pinned, size_t *n);
/* Drops what cuda_device_pin_streams took and frees the list. */
void cuda_device_unpin_streams(cuda_device_t *device, cuda_stream_t **pinned, size_t n);

/* ---- memory (cuda_memory.c) ----------------------------------------------------------------- */
hal_status_t cuda_mem_alloc(void *device, hal_mem_kind_t kind, size_t size, size_t alignment,
                            void **ptr, void **cookie);
hal_status_t cuda_mem_free(void *device, hal_mem_kind_t kind, void *ptr, void *cookie);
hal_status_t cuda_mem_free_async(void *stream, void *device, hal_mem_kind_t kind, void *ptr,
                                 void *cookie);
hal_status_t cuda_memcpy_async(void *stream, const hal_backend_ptr_t *dst,
                               const hal_backend_ptr_t *src, size_t n);
hal_status_t cuda_memset_async(void *stream, const hal_backend_ptr_t *dst, int value, size_t n);
hal_status_t cuda_mem_ipc_export(void *device, const hal_backend_ptr_t *ptr,
                                 hal_ipc_handle_t *handle);
hal_status_t cuda_mem_ipc_open(void *device, const hal_ipc_handle_t *handle, void **ptr,
                               size_t *size, void **cookie);
hal_status_t cuda_mem_ipc_close(void *device, void *ptr, void *cookie);
/* Frees what stream-ordered frees left once their marks completed; with wait, waits for them. */
void cuda_reap_frees(cuda_device_t *device, bool wait);
/* Whether an IPC handle of this CUDA runtime has room for the HAL's offset and size. */
bool cuda_ipc_handle_fits(const cudaIpcMemHandle_t *handle);

/* ---- streams (cuda_stream.c) ---------------------------------------------------------------- */
hal_status_t cuda_stream_create(void *device, int32_t priority, void **stream);
hal_status_t cuda_stream_destroy(void *stream);
hal_status_t cuda_stream_query(void *stream);
hal_status_t cuda_stream_synchronize(void *stream);
hal_status_t cuda_stream_wait_event(void *stream, void *event);
hal_status_t cuda_stream_add_callback(void *stream, hal_host_fn_t fn, void *user_data);
hal_status_t cuda_stream_launch_host_fn(void *stream, hal_stream_host_fn_t fn, void *arg);
hal_status_t cuda_stream_get_native_handle(void *stream, uintptr_t *native);

/* Queues a node on the stream (switching it to deferred mode) and starts its worker if needed.
 * Takes ownership of node. */
hal_status_t cuda_stream_push(cuda_stream_t *stream, cuda_node_t *node);
/* Latches an error on the stream (the first one wins). Caller holds no stream lock. */
void cuda_stream_latch(cuda_stream_t *stream, hal_status_t status, const char *msg);
/* Returns the latched error (reporting its message), or HAL_OK. */
hal_status_t cuda_stream_latched(cuda_stream_t *stream);
/* Blocks until the stream is back in direct mode (its queue drained). */
void cuda_stream_drain(cuda_stream_t *stream);
/* Waits for every node queued so far; returns the latched error or HAL_OK. */
hal_status_t cuda_stream_wait_nodes(cuda_stream_t *stream);
void cuda_stream_unref(cuda_stream_t *stream); /* caller holds device->lock */

/* ---- events (cuda_event.c) ------------------------------------------------------------------ */
hal_status_t cuda_event_create(void *device, uint32_t flags, void **event);
void cuda_event_destroy(void *event);
hal_status_t cuda_event_record(void *event, void *stream);
hal_status_t cuda_event_query(void *event);
hal_status_t cuda_event_synchronize(void *event);
hal_status_t cuda_event_elapsed_ms(void *start, void *end, float *ms);
hal_status_t cuda_event_get_native_handle(void *event, uintptr_t *native);

/* Worker side of CUDA_NODE_RECORD / CUDA_NODE_WAIT (the stream's worker thread). */
void cuda_mark_run_record(cuda_stream_t *stream, cuda_node_t *node);
void cuda_mark_run_wait(cuda_stream_t *stream, cuda_node_t *node);
/* Issues (or queues, in deferred mode) a record of a new mark owned by no event; for
 * stream-ordered frees. */
hal_status_t cuda_mark_record_free(cuda_stream_t *stream, cuda_mark_t **out);
/* Destroys a mark of a stream-ordered free. */
void cuda_mark_destroy(cuda_device_t *device, cuda_mark_t *mark);
/* Whether the point a mark of cuda_mark_record_free records has been reached (or the device
 * failed, which ends the wait too); with wait, blocks until then. device is the mark's. */
bool cuda_mark_reached(cuda_device_t *device, cuda_mark_t *mark, bool wait);

/* ---- programs (cuda_program.c) -------------------------------------------------------------- */
hal_status_t cuda_program_create(void *device, hal_program_format_t format, const void *image,
                                 size_t size, void **program);
void cuda_program_destroy(void *program);
hal_status_t cuda_program_get_kernel(void *program, const char *name, void **kernel,
                                     hal_kernel_info_t *info);
hal_status_t cuda_kernel_launch(void *stream, void *program, void *kernel,
                                const hal_backend_launch_t *launch);
/* Worker side of CUDA_NODE_LAUNCH (the stream's worker thread); frees the launch. */
void cuda_launch_run(cuda_stream_t *stream, cuda_launch_t *launch);
/* Unloads the destroyed programs whose launches completed; with wait, waits for them all. */
void cuda_reap_unloads(cuda_device_t *device, bool wait);
/* Checks that an image of a format is whole before the runtime parses it: a cubin's ELF header
 * and a fatbin's header declare their size, which must fit in size (the runtime would read past
 * a truncated image). PTX needs no check here (it is copied with a terminating NUL). Writes why
 * to msg and returns HAL_ERROR_INVALID_ARGUMENT when it is not. Pure. */
hal_status_t cuda_image_check(hal_program_format_t format, const void *image, size_t size,
                              char *msg, size_t msg_size);
/* The formats a device loads (hal_device_properties_t.program_formats). */
#define CUDA_PROGRAM_FORMATS                                             \
    ((1u << HAL_PROGRAM_FORMAT_PTX) | (1u << HAL_PROGRAM_FORMAT_CUBIN) | \
     (1u << HAL_PROGRAM_FORMAT_FATBIN))

/* ---- collectives (cuda_comm.c, with NCCL) --------------------------------------------------- */
#if HAL_CUDA_WITH_NCCL
hal_status_t cuda_comm_init(void *device, const hal_backend_comm_args_t *args, void **comm);
hal_status_t cuda_comm_destroy(void *comm);
hal_status_t cuda_comm_abort(void *comm);
hal_status_t cuda_comm_get_async_error(void *comm);
hal_status_t cuda_comm_get_native_handle(void *comm, uintptr_t *native);
hal_status_t cuda_allreduce(void *comm, void *stream, const hal_backend_ptr_t *send,
                            const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype,
                            hal_redop_t op);
hal_status_t cuda_broadcast(void *comm, void *stream, const hal_backend_ptr_t *send,
                            const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype,
                            int root);
hal_status_t cuda_reduce(void *comm, void *stream, const hal_backend_ptr_t *send,
                         const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype,
                         hal_redop_t op, int root);
hal_status_t cuda_allgather(void *comm, void *stream, const hal_backend_ptr_t *send,
                            const hal_backend_ptr_t *recv, size_t sendcount, hal_dtype_t dtype);
hal_status_t cuda_reduce_scatter(void *comm, void *stream, const hal_backend_ptr_t *send,
                                 const hal_backend_ptr_t *recv, size_t recvcount, hal_dtype_t dtype,
                                 hal_redop_t op);
hal_status_t cuda_alltoall(void *comm, void *stream, const hal_backend_ptr_t *send,
                           const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype);
hal_status_t cuda_send(void *comm, void *stream, const hal_backend_ptr_t *send, size_t count,
                       hal_dtype_t dtype, int peer);
hal_status_t cuda_recv(void *comm, void *stream, const hal_backend_ptr_t *recv, size_t count,
                       hal_dtype_t dtype, int peer);
hal_status_t cuda_group_begin(void *backend);
hal_status_t cuda_group_end(void *backend);
#endif

#endif /* HAL_BACKENDS_CUDA_CUDA_INTERNAL_H */
