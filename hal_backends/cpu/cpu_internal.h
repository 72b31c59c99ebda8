/* SPDX-License-Identifier: Apache-2.0 */
/* cpu reference backend: internal types and functions shared by its source files.
 *
 * Object model: one cpu_backend_t per init, one cpu_device_t per opened virtual device, one
 * cpu_stream_t per stream (a worker thread draining a FIFO of task nodes) and one cpu_event_t per
 * event (reference-counted, because queued records and waits outlive event_destroy). A device's
 * device and shared memory come from its arena (a memfd other processes can map, cpu_arena.c);
 * the backend keeps the arenas of other processes it mapped (cpu_ipc.c). */
#ifndef HAL_BACKENDS_CPU_CPU_INTERNAL_H
#define HAL_BACKENDS_CPU_CPU_INTERNAL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "hal/hal_backend_abi.h"

/* ---- configuration (cpu_env.c) ------------------------------------------------------------- */

#define CPU_ENV_DEVICES     "HAL_CPU_DEVICES"
#define CPU_ENV_MEMORY      "HAL_CPU_DEVICE_MEMORY"
#define CPU_ENV_CONCURRENCY "HAL_CPU_DEVICE_CONCURRENCY"
#define CPU_ENV_SPIN_US     "HAL_CPU_SPIN_US"

#define CPU_DEFAULT_DEVICES   2u
#define CPU_MAX_DEVICES       64u
#define CPU_DEFAULT_MEMORY    (UINT64_C(16) << 30)
#define CPU_MAX_CONCURRENCY   4096u
#define CPU_DEFAULT_SPIN_US   20u
#define CPU_MAX_SPIN_US       1000000u
#define CPU_MIN_ALIGNMENT     256u
#define CPU_PRIORITY_LEAST    0
#define CPU_PRIORITY_GREATEST (-2)

typedef struct cpu_config {
    uint32_t devices;     /* HAL_CPU_DEVICES */
    uint64_t capacity;    /* HAL_CPU_DEVICE_MEMORY, bytes per device */
    uint32_t concurrency; /* HAL_CPU_DEVICE_CONCURRENCY, execution slots per device */
    uint32_t spin_us;     /* HAL_CPU_SPIN_US */
} cpu_config_t;

/* Size of the buffer that receives a parse error message. */
#define CPU_ENV_MSG_MAX 256

hal_status_t cpu_parse_uint(const char *text, uint64_t min, uint64_t max, uint64_t *out);
hal_status_t cpu_parse_size(const char *text, uint64_t *out);
hal_status_t cpu_config_load(cpu_config_t *config, char *msg, size_t msg_size);

/* ---- backend and devices (cpu_backend.c) --------------------------------------------------- */

/* The exported entry point (declared here for the backend's own tests). */
HAL_BACKEND_EXPORT hal_status_t hal_backend_get_ops(uint32_t host_api_version,
                                                    const hal_backend_ops_t **ops);

typedef struct cpu_ipc_mapping cpu_ipc_mapping_t;

typedef struct cpu_backend {
    const hal_host_services_t *host;
    cpu_config_t config;
    pthread_mutex_t ipc_lock;        /* guards ipc_mappings */
    cpu_ipc_mapping_t *ipc_mappings; /* arenas of other processes mapped by mem_ipc_open */
} cpu_backend_t;

typedef struct cpu_stream cpu_stream_t;
typedef struct cpu_event cpu_event_t;

/* A thread waiting for an execution slot. Lives on the waiter's stack; guarded by the
 * scheduler's lock except `granted`, which the waiter may poll without it. */
typedef struct cpu_sched_waiter {
    struct cpu_sched_waiter *next;
    int32_t priority;
    bool sleeping;
    atomic_bool granted;
    pthread_cond_t *cv;
} cpu_sched_waiter_t;

/* Per-device execution slots (cpu_sched.c). */
typedef struct cpu_sched {
    pthread_mutex_t lock;
    atomic_int free_slots;
    atomic_uint waiting;         /* entries in `waiters`; nonzero disables the fast path */
    cpu_sched_waiter_t *waiters; /* by priority (numerically lower first), FIFO within one */
    uint32_t spin_us;
} cpu_sched_t;

/* ---- device memory arena (cpu_arena.c) ------------------------------------------------------ */

/* Free ranges with at least this many bytes of whole pages are punched out of the arena's file
 * when they form, so that freed device memory does not stay resident. */
#define CPU_ARENA_PUNCH_MIN (UINT64_C(1) << 20)

/* A range of an arena, free or allocated; the cookie of an arena allocation. */
typedef struct cpu_block {
    struct cpu_block *prev, *next;           /* every block, in address order */
    struct cpu_block *free_prev, *free_next; /* the free list (free blocks only) */
    uint64_t offset;                         /* from the arena's base */
    uint64_t size;                           /* bytes the block spans (a multiple of 256) */
    size_t requested;                        /* bytes asked for (what the capacity is charged) */
    bool is_free;
} cpu_block_t;

/* A memfd of twice the device's capacity, mapped MAP_SHARED and sparse. */
typedef struct cpu_arena {
    int fd;
    char *base;
    uint64_t size;
    uint64_t page;
    uint64_t ino, dev;    /* identity of the file, for importers to verify */
    pthread_mutex_t lock; /* guards the fields below */
    cpu_block_t *blocks;  /* first block; the blocks tile [0, size) */
    cpu_block_t *free_list;
    uint32_t free_count;
    cpu_block_t *spare;  /* retired nodes, reused before malloc */
    uint64_t high_water; /* end of the highest block ever handed out; pages above are clean */
} cpu_arena_t;

/* NULL when the arena cannot be created (no memfd, no address space): the device then falls
 * back to posix_memalign and does not offer HAL_DEVICE_CAP_IPC. */
cpu_arena_t *cpu_arena_create(uint64_t capacity, uint32_t index);
void cpu_arena_destroy(cpu_arena_t *arena);
hal_status_t cpu_arena_alloc(cpu_arena_t *arena, size_t size, size_t alignment, cpu_block_t **out);
void cpu_arena_free(cpu_arena_t *arena, cpu_block_t *block);
void cpu_arena_stats(cpu_arena_t *arena, uint32_t *free_ranges, uint64_t *largest_free);

static inline void *cpu_block_ptr(const cpu_arena_t *arena, const cpu_block_t *block)
{
    return arena->base + block->offset;
}

/* ---- inter-process memory (cpu_ipc.c) ------------------------------------------------------ */

/* What an IPC handle holds (native byte order: importer and exporter share the host). */
#define CPU_IPC_MAGIC   UINT32_C(0x55504348) /* "HCPU" in memory on little-endian hosts */
#define CPU_IPC_VERSION UINT32_C(1)

typedef struct cpu_ipc_record {
    uint32_t magic;
    uint32_t version;
    int32_t pid;           /* the exporting process */
    int32_t fd;            /* its descriptor of the arena, opened as /proc/<pid>/fd/<fd> */
    uint64_t ino, dev;     /* identity of the arena's file, verified after opening */
    uint64_t arena_size;   /* bytes the importer maps */
    uint64_t offset;       /* of the exported pointer in the arena */
    uint64_t bytes;        /* from the exported pointer to the end of its allocation */
    uint32_t device_index; /* the exporter's device (informational) */
    uint32_t reserved;
} cpu_ipc_record_t;

_Static_assert(sizeof(cpu_ipc_record_t) <= HAL_IPC_HANDLE_BYTES, "IPC record fits a handle");

/* An arena of another process mapped here, shared by every handle opened into it. */
struct cpu_ipc_mapping {
    cpu_ipc_mapping_t *next;
    int32_t pid;
    uint64_t ino, dev;
    char *base;
    uint64_t size;
    uint32_t refs; /* open handles; guarded by the backend's ipc_lock */
};

void cpu_ipc_unmap_all(cpu_backend_t *backend);
hal_status_t cpu_mem_ipc_export(void *device, const hal_backend_ptr_t *ptr,
                                hal_ipc_handle_t *handle);
hal_status_t cpu_mem_ipc_open(void *device, const hal_ipc_handle_t *handle, void **ptr,
                              size_t *size, void **cookie);
hal_status_t cpu_mem_ipc_close(void *device, void *ptr, void *cookie);

/* ---- devices ------------------------------------------------------------------------------- */

typedef struct cpu_device {
    cpu_backend_t *backend;
    uint32_t index;
    uint64_t capacity;
    _Atomic uint64_t used; /* device and shared bytes allocated */
    cpu_arena_t *arena;    /* where device and shared memory come from; NULL: posix_memalign */
    cpu_sched_t sched;
    pthread_mutex_t streams_lock;
    cpu_stream_t *streams; /* live streams, guarded by streams_lock */
    uint32_t stream_count;
} cpu_device_t;

/* Records a failure detail for the calling thread through the host services. */
void cpu_set_error(const cpu_backend_t *backend, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *cpu_take_host_error(const cpu_backend_t *backend);

/* ---- scheduler (cpu_sched.c) --------------------------------------------------------------- */

hal_status_t cpu_sched_init(cpu_sched_t *sched, uint32_t slots, uint32_t spin_us);
void cpu_sched_destroy(cpu_sched_t *sched);
void cpu_sched_acquire(cpu_sched_t *sched, int32_t priority, pthread_cond_t *cv);
void cpu_sched_release(cpu_sched_t *sched);
uint32_t cpu_sched_waiting(cpu_sched_t *sched);

/* ---- tasks and streams (cpu_stream.c) ------------------------------------------------------ */

/* A task run by cpu_stream_enqueue_fn. `stream_status` is HAL_OK or the error latched on the
 * stream before the task's turn. A non-OK return latches on the stream; call cpu_task_error()
 * first to say why. */
typedef hal_status_t (*cpu_task_fn_t)(void *arg, hal_status_t stream_status);

/* Flags of cpu_stream_enqueue_fn. */
#define CPU_TASK_RUN_ON_ERROR (1u << 0) /* run even after an error latched (else skipped) */
#define CPU_TASK_NO_SLOT      (1u << 1) /* run without an execution slot (for tasks that block) */
#define CPU_TASK_HOST_FN      (1u << 2) /* a HAL host function: its detail is host->take_error() */

typedef enum cpu_task_kind {
    CPU_TASK_MEMCPY,
    CPU_TASK_MEMSET,
    CPU_TASK_RECORD,
    CPU_TASK_WAIT,
    CPU_TASK_CALLBACK,
    CPU_TASK_FN,
    CPU_TASK_FAIL,
} cpu_task_kind_t;

typedef struct cpu_task {
    struct cpu_task *next;
    cpu_task_kind_t kind;
    uint32_t flags;
    union {
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
            cpu_event_t *event;
            uint64_t version;
        } event;
        struct {
            hal_host_fn_t fn;
            void *user_data;
        } callback;
        struct {
            cpu_task_fn_t fn;
            void *arg;
        } run;
        struct {
            hal_status_t status;
            const char *detail;
        } fail;
    } u;
} cpu_task_t;

#define CPU_TASK_CHUNK    64
#define CPU_ERROR_MSG_MAX 512

typedef struct cpu_task_chunk {
    struct cpu_task_chunk *next;
    cpu_task_t tasks[CPU_TASK_CHUNK];
} cpu_task_chunk_t;

struct cpu_stream {
    cpu_device_t *device;
    int32_t priority;
    uint32_t spin_us;
    atomic_int refcount; /* the owner plus device_synchronize calls in flight */

    pthread_mutex_t lock;   /* guards the fields down to `stop` */
    pthread_cond_t work_cv; /* the worker sleeps here when the queue is empty */
    pthread_cond_t idle_cv; /* synchronize callers sleep here */
    cpu_task_t *head, *tail;
    cpu_task_t *free_tasks;
    cpu_task_chunk_t *chunks;
    bool worker_sleeping;
    uint64_t wake_at; /* smallest `completed` a sleeping synchronize caller waits for */
    bool stop;

    _Atomic uint64_t submitted;        /* tasks enqueued; written under `lock` */
    _Atomic uint64_t completed;        /* tasks finished; written by the worker */
    atomic_int status;                 /* latched error (hal_status_t), HAL_OK until one occurs */
    atomic_bool stopping;              /* mirrors `stop` for the spinning worker */
    char error_msg[CPU_ERROR_MSG_MAX]; /* written once, before `status` is published */
    char task_msg[CPU_ERROR_MSG_MAX];  /* worker scratch for cpu_task_error */

    pthread_cond_t sched_cv; /* the worker sleeps here waiting for an execution slot */
    pthread_t thread;
    cpu_stream_t *dev_prev, *dev_next; /* device list, guarded by device->streams_lock */
};

hal_status_t cpu_stream_submit(cpu_stream_t *stream, const cpu_task_t *task);
hal_status_t cpu_stream_enqueue_fn(cpu_stream_t *stream, cpu_task_fn_t fn, void *arg,
                                   uint32_t flags);
hal_status_t cpu_stream_inject_error(cpu_stream_t *stream, hal_status_t status, const char *detail);
void cpu_task_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
hal_status_t cpu_stream_latched(cpu_stream_t *stream);
hal_status_t cpu_stream_wait_idle(cpu_stream_t *stream, uint64_t target);
void cpu_stream_unref(cpu_stream_t *stream);

/* ---- events (cpu_event.c) ------------------------------------------------------------------ */

struct cpu_event {
    cpu_device_t *device;
    uint32_t flags;
    uint32_t spin_us;
    atomic_int refcount; /* the owner plus every queued record and wait */
    pthread_mutex_t lock;
    pthread_cond_t cv;
    uint32_t waiters;           /* guarded by lock */
    _Atomic uint64_t recorded;  /* version of the latest record call (0: never recorded) */
    _Atomic uint64_t completed; /* highest version the streams reached */
    hal_status_t status;        /* status of version `completed`; guarded by lock */
    uint64_t time_ns;           /* CLOCK_MONOTONIC stamp of version `completed`; guarded by lock */
};

void cpu_event_ref(cpu_event_t *event);
void cpu_event_unref(cpu_event_t *event);
void cpu_event_complete(cpu_event_t *event, uint64_t version, hal_status_t status);
void cpu_event_wait_version(cpu_event_t *event, uint64_t version);

/* ---- ops slots, by file -------------------------------------------------------------------- */

hal_status_t cpu_mem_alloc(void *device, hal_mem_kind_t kind, size_t size, size_t alignment,
                           void **ptr, void **cookie);
hal_status_t cpu_mem_free(void *device, hal_mem_kind_t kind, void *ptr, void *cookie);
hal_status_t cpu_memcpy_async(void *stream, const hal_backend_ptr_t *dst,
                              const hal_backend_ptr_t *src, size_t n);
hal_status_t cpu_memset_async(void *stream, const hal_backend_ptr_t *dst, int value, size_t n);

hal_status_t cpu_stream_create(void *device, int32_t priority, void **stream);
hal_status_t cpu_stream_destroy(void *stream);
hal_status_t cpu_stream_query(void *stream);
hal_status_t cpu_stream_synchronize(void *stream);
hal_status_t cpu_stream_wait_event(void *stream, void *event);
hal_status_t cpu_stream_add_callback(void *stream, hal_host_fn_t fn, void *user_data);
hal_status_t cpu_stream_launch_host_fn(void *stream, hal_stream_host_fn_t fn, void *arg);
hal_status_t cpu_stream_get_native_handle(void *stream, uintptr_t *native);
hal_status_t cpu_device_synchronize(void *device);

hal_status_t cpu_event_create(void *device, uint32_t flags, void **event);
void cpu_event_destroy(void *event);
hal_status_t cpu_event_record(void *event, void *stream);
hal_status_t cpu_event_query(void *event);
hal_status_t cpu_event_synchronize(void *event);
hal_status_t cpu_event_elapsed_ms(void *start, void *end, float *ms);
hal_status_t cpu_event_get_native_handle(void *event, uintptr_t *native);

/* ---- small helpers ------------------------------------------------------------------------- */

static inline uint64_t cpu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* Tells the core a spin-wait is in progress (lets a sibling hyperthread run). */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spins up to spin_us microseconds until done(arg) holds; returns whether it did. Waiters spin
 * first because a futex sleep and wake-up costs tens of microseconds, far more than most stream
 * tasks take. After the first microsecond the spin yields the CPU between polls, so that when
 * threads outnumber cores the thread being waited for gets to run instead of being starved by
 * the spinner. */
static inline bool cpu_spin_until(bool (*done)(const void *arg), const void *arg, uint32_t spin_us)
{
    if (done(arg))
        return true;
    if (spin_us == 0)
        return false;
    uint64_t start = cpu_now_ns();
    uint64_t deadline = start + (uint64_t)spin_us * 1000u;
    uint64_t yield_after = start + 1000u;
    for (;;) {
        for (int i = 0; i < 32; i++) {
            cpu_relax();
            if (done(arg))
                return true;
        }
        uint64_t now = cpu_now_ns();
        if (now >= deadline)
            return false;
        if (now >= yield_after)
            sched_yield();
    }
}

const char *cpu_status_name(hal_status_t status);

#endif /* HAL_BACKENDS_CPU_CPU_INTERNAL_H */
