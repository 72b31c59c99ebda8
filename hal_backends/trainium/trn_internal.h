/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: internal types and functions shared by its source files.
 *
 * Object model: one trn_backend_t per init (it owns the loaded libnrt and the runtime between
 * nrt_init and nrt_close), one trn_device_t per visible logical NeuronCore, one trn_stream_t per
 * stream (a worker thread draining a FIFO of task nodes, because every libnrt call blocks) and
 * one trn_event_t per event (reference-counted, because queued records and waits outlive
 * event_destroy).
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
#include <time.h>

#include "hal/hal_backend_abi.h"
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

/* Cross-core device-to-device copies are staged through a host buffer of this many bytes per
 * stream, one chunk at a time. */
#define TRN_STAGE_CHUNK ((size_t)4 << 20)

/* Size of the message buffers (latched errors, formatted runtime failures). */
#define TRN_MSG_MAX 512

/* ---- libnrt, loaded at run time (trn_nrt.c) ------------------------------------------------ */

typedef struct trn_nrt {
    void *dl;
    char path[PATH_MAX]; /* where the library was found, for messages */
    nrt_get_status_as_str_fn *get_status_as_str;
    nrt_init_fn *init;
    nrt_close_fn *close;
    nrt_get_instance_info_fn *get_instance_info;
    nrt_get_visible_vnc_count_fn *get_visible_vnc_count;
    nrt_get_total_vnc_count_fn *get_total_vnc_count;
    nrt_get_vnc_memory_stats_fn *get_vnc_memory_stats;
    nrt_tensor_allocate_fn *tensor_allocate;
    nrt_tensor_allocate_slice_fn *tensor_allocate_slice;
    nrt_tensor_free_fn *tensor_free;
    nrt_tensor_get_va_fn *tensor_get_va;
    nrt_tensor_read_fn *tensor_read;
    nrt_tensor_write_fn *tensor_write;
    nrt_tensor_copy_fn *tensor_copy;
    nrt_tensor_memset_fn *tensor_memset;
} trn_nrt_t;

/* Finds and loads libnrt.so.1 (HAL_NEURON_LIBNRT, then the installed runtime, then the loader's
 * search path) and resolves every function above. Returns HAL_OK, or HAL_ERROR_NOT_FOUND with
 * the reason in msg (no library, or one that lacks functions, which are named). */
hal_status_t trn_nrt_load(trn_nrt_t *nrt, char *msg, size_t msg_size);
/* Unloads what trn_nrt_load loaded. */
void trn_nrt_unload(trn_nrt_t *nrt);

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
/* Names a HAL status for messages (the core's hal_status_string is not available here). */
const char *trn_status_hal_name(hal_status_t status);

/* ---- backend and devices (trn_backend.c, trn_device.c) ------------------------------------- */

HAL_BACKEND_EXPORT hal_status_t hal_backend_get_ops(uint32_t host_api_version,
                                                    const hal_backend_ops_t **ops);

typedef struct trn_backend {
    const hal_host_services_t *host;
    trn_nrt_t nrt;
    uint32_t device_count; /* visible logical NeuronCores */
    uint32_t total_vnc;    /* logical NeuronCores of the instance (0 if unknown) */
    nrt_instance_info_t instance;
    bool have_instance;
} trn_backend_t;

typedef struct trn_stream trn_stream_t;
typedef struct trn_event trn_event_t;

/* A worker waiting for an execution slot; lives on the waiter's stack, guarded by the
 * scheduler's lock. */
typedef struct trn_sched_waiter {
    struct trn_sched_waiter *next;
    int32_t priority;
    bool granted;
    pthread_cond_t *cv;
} trn_sched_waiter_t;

/* Per-core execution slots (trn_sched.c). */
typedef struct trn_sched {
    pthread_mutex_t lock;
    uint32_t free_slots;         /* guarded by lock */
    trn_sched_waiter_t *waiters; /* by priority (numerically lower first), FIFO within one */
    _Atomic uint32_t waiting;    /* entries in `waiters`, readable without the lock */
} trn_sched_t;

typedef struct trn_device {
    trn_backend_t *backend;
    uint32_t index;        /* logical NeuronCore, relative to the visible set (the vnc) */
    uint64_t total_memory; /* bytes of device memory of the core */
    trn_sched_t sched;
    pthread_mutex_t streams_lock;
    trn_stream_t *streams; /* live streams, guarded by streams_lock */
    uint32_t stream_count;
    atomic_bool lost;           /* a hardware error was reported: sticky HAL_ERROR_DEVICE_LOST */
    char lost_msg[TRN_MSG_MAX]; /* why, written once under streams_lock before `lost` is set */
} trn_device_t;

/* Records a failure detail for the calling thread through the host services. */
void trn_set_error(const trn_backend_t *backend, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

hal_status_t trn_device_open(void *backend, uint32_t index, void **device);
void trn_device_close(void *device);
hal_status_t trn_device_get_properties(void *device, hal_device_properties_t *props);
hal_status_t trn_device_get_native_handle(void *device, uintptr_t *native);
hal_status_t trn_device_get_free_memory(void *device, uint64_t *free_bytes);
/* Marks the core lost (once; later calls keep the first reason) and latches
 * HAL_ERROR_DEVICE_LOST on each of its streams. */
void trn_device_mark_lost(trn_device_t *device, const char *why);
/* HAL_ERROR_DEVICE_LOST with the reason reported to the caller if the core was lost, else
 * HAL_OK. */
hal_status_t trn_device_check_lost(trn_device_t *device);

/* ---- scheduler (trn_sched.c) --------------------------------------------------------------- */

hal_status_t trn_sched_init(trn_sched_t *sched, uint32_t slots);
void trn_sched_destroy(trn_sched_t *sched);
/* Blocks until the caller owns a slot. cv is private to the caller. */
void trn_sched_acquire(trn_sched_t *sched, int32_t priority, pthread_cond_t *cv);
void trn_sched_release(trn_sched_t *sched);
/* Workers queued for a slot. */
uint32_t trn_sched_waiting(trn_sched_t *sched);

/* ---- tasks and streams (trn_stream.c) ------------------------------------------------------ */

/* One side of a copy: host memory (tensor NULL, use ptr) or a range of a device tensor. */
typedef struct trn_endpoint {
    void *ptr;            /* the HAL address (a device address is only used in messages) */
    nrt_tensor_t *tensor; /* the allocation's tensor, NULL for host memory */
    size_t offset;        /* of ptr inside the tensor */
    trn_device_t *device; /* the core that owns the tensor, NULL for host memory */
} trn_endpoint_t;

typedef enum trn_task_kind {
    TRN_TASK_COPY,
    TRN_TASK_MEMSET,
    TRN_TASK_RECORD,
    TRN_TASK_WAIT,
    TRN_TASK_CALLBACK,
    TRN_TASK_HOST_FN,
} trn_task_kind_t;

typedef struct trn_task {
    struct trn_task *next;
    trn_task_kind_t kind;
    union {
        struct {
            trn_endpoint_t dst, src;
            size_t n;
        } copy;
        struct {
            trn_endpoint_t dst;
            int value;
            size_t n;
        } set;
        struct {
            trn_event_t *event;
            uint64_t version;
        } event;
        struct {
            hal_host_fn_t fn;
            void *user_data;
        } callback;
        struct {
            hal_stream_host_fn_t fn;
            void *arg;
        } host_fn;
    } u;
} trn_task_t;

/* Task nodes come in chunks that live as long as the stream: no allocation per task. */
#define TRN_TASK_CHUNK 64

typedef struct trn_task_chunk {
    struct trn_task_chunk *next;
    trn_task_t tasks[TRN_TASK_CHUNK];
} trn_task_chunk_t;

struct trn_stream {
    trn_device_t *device;
    int32_t priority;
    atomic_int refcount; /* the owner plus device_synchronize calls in flight */

    pthread_mutex_t lock;   /* guards the fields down to `stop` */
    pthread_cond_t work_cv; /* the worker sleeps here while the queue is empty */
    pthread_cond_t idle_cv; /* synchronize callers sleep here */
    trn_task_t *head, *tail;
    trn_task_t *free_tasks;
    trn_task_chunk_t *chunks;
    uint32_t sync_waiters; /* synchronize callers asleep on idle_cv */
    bool stop;

    _Atomic uint64_t submitted;  /* tasks enqueued; written under `lock` */
    _Atomic uint64_t completed;  /* tasks finished; written by the worker under `lock` */
    atomic_int status;           /* latched error (hal_status_t), HAL_OK until one occurs */
    atomic_bool latching;        /* claimed by the one thread that writes error_msg */
    char error_msg[TRN_MSG_MAX]; /* written once, before `status` is published */

    /* Worker-only state. */
    char task_msg[TRN_MSG_MAX]; /* detail of the failure of the task being run */
    void *stage;                /* host bounce buffer for cross-core copies (lazily) */
    pthread_cond_t sched_cv;    /* the worker sleeps here waiting for an execution slot */
    pthread_t thread;
    trn_stream_t *dev_prev, *dev_next; /* device list, guarded by device->streams_lock */
};

hal_status_t trn_stream_submit(trn_stream_t *stream, const trn_task_t *task);
/* Latches the first error of the stream (later calls are ignored); any thread. */
void trn_stream_latch(trn_stream_t *stream, hal_status_t status, const char *msg);
/* The stream's latched error with its detail reported to the caller, or HAL_OK. */
hal_status_t trn_stream_latched(trn_stream_t *stream);
void trn_stream_unref(trn_stream_t *stream);

hal_status_t trn_stream_create(void *device, int32_t priority, void **stream);
hal_status_t trn_stream_destroy(void *stream);
hal_status_t trn_stream_query(void *stream);
hal_status_t trn_stream_synchronize(void *stream);
hal_status_t trn_stream_wait_event(void *stream, void *event);
hal_status_t trn_stream_add_callback(void *stream, hal_host_fn_t fn, void *user_data);
hal_status_t trn_stream_launch_host_fn(void *stream, hal_stream_host_fn_t fn, void *arg);
hal_status_t trn_stream_get_native_handle(void *stream, uintptr_t *native);
hal_status_t trn_device_synchronize(void *device);

/* ---- memory (trn_memory.c) ----------------------------------------------------------------- */

hal_status_t trn_mem_alloc(void *device, hal_mem_kind_t kind, size_t size, size_t alignment,
                           void **ptr, void **cookie);
hal_status_t trn_mem_free(void *device, hal_mem_kind_t kind, void *ptr, void *cookie);
hal_status_t trn_memcpy_async(void *stream, const hal_backend_ptr_t *dst,
                              const hal_backend_ptr_t *src, size_t n);
hal_status_t trn_memset_async(void *stream, const hal_backend_ptr_t *dst, int value, size_t n);
/* Run by the stream worker: performs a queued copy or memset. On failure returns the HAL
 * status and leaves the detail in msg (and marks a core lost on a hardware error). */
hal_status_t trn_run_copy(trn_stream_t *stream, const trn_task_t *task, char *msg, size_t size);
hal_status_t trn_run_memset(trn_stream_t *stream, const trn_task_t *task, char *msg, size_t size);

/* ---- events (trn_event.c) ------------------------------------------------------------------ */

struct trn_event {
    trn_device_t *device;
    uint32_t flags;
    atomic_int refcount; /* the owner plus every queued record and wait */
    pthread_mutex_t lock;
    pthread_cond_t cv;
    uint32_t waiters;           /* guarded by lock */
    _Atomic uint64_t recorded;  /* version of the latest record call (0: never recorded) */
    _Atomic uint64_t completed; /* highest version the streams reached */
    hal_status_t status;        /* status of version `completed`; guarded by lock */
    uint64_t time_ns;           /* CLOCK_MONOTONIC stamp of version `completed`; guarded by lock */
};

void trn_event_ref(trn_event_t *event);
void trn_event_unref(trn_event_t *event);
/* Called by the recording stream's worker when it reaches `version`. */
void trn_event_complete(trn_event_t *event, uint64_t version, hal_status_t status);
/* Blocks until the event reached `version`. */
void trn_event_wait_version(trn_event_t *event, uint64_t version);

hal_status_t trn_event_create(void *device, uint32_t flags, void **event);
void trn_event_destroy(void *event);
hal_status_t trn_event_record(void *event, void *stream);
hal_status_t trn_event_query(void *event);
hal_status_t trn_event_synchronize(void *event);
hal_status_t trn_event_elapsed_ms(void *start, void *end, float *ms);
hal_status_t trn_event_get_native_handle(void *event, uintptr_t *native);

/* ---- helpers ------------------------------------------------------------------------------- */

static inline uint64_t trn_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

#endif /* HAL_BACKENDS_TRAINIUM_TRN_INTERNAL_H */
