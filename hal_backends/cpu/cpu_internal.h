/* SPDX-License-Identifier: Apache-2.0 */
/* cpu reference backend: internal types and functions shared by its source files.
 *
 * Object model: one cpu_backend_t per init and one cpu_device_t per opened virtual device.
 * Streams and events are the backend toolkit's (hal_backends/common/hq.h): a worker thread per
 * stream draining a FIFO, versioned events, execution slots; this backend adds its copies and
 * memsets as work tasks. A device's device and shared memory come from its arena (a memfd other
 * processes can map, cpu_arena.c); the backend keeps the arenas of other processes it mapped
 * (cpu_ipc.c). */
#ifndef HAL_BACKENDS_CPU_CPU_INTERNAL_H
#define HAL_BACKENDS_CPU_CPU_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/hal_backend_abi.h"
#include "hal_backends/common/hq.h"

/* ---- configuration (cpu_env.c) ------------------------------------------------------------- */

#define CPU_ENV_DEVICES        "HAL_CPU_DEVICES"
#define CPU_ENV_MEMORY         "HAL_CPU_DEVICE_MEMORY"
#define CPU_ENV_CONCURRENCY    "HAL_CPU_DEVICE_CONCURRENCY"
#define CPU_ENV_SPIN_US        "HAL_CPU_SPIN_US"
#define CPU_ENV_KERNEL_THREADS "HAL_CPU_KERNEL_THREADS"

#define CPU_DEFAULT_DEVICES    2u
#define CPU_MAX_DEVICES        64u
#define CPU_DEFAULT_MEMORY     (UINT64_C(16) << 30)
#define CPU_MAX_CONCURRENCY    4096u
#define CPU_DEFAULT_SPIN_US    20u
#define CPU_MAX_SPIN_US        1000000u
#define CPU_MAX_KERNEL_THREADS 256u
#define CPU_MIN_ALIGNMENT      256u
#define CPU_PRIORITY_LEAST     0
#define CPU_PRIORITY_GREATEST  (-2)

typedef struct cpu_config {
    uint32_t devices;        /* HAL_CPU_DEVICES */
    uint64_t capacity;       /* HAL_CPU_DEVICE_MEMORY, bytes per device */
    uint32_t concurrency;    /* HAL_CPU_DEVICE_CONCURRENCY, execution slots per device */
    uint32_t spin_us;        /* HAL_CPU_SPIN_US */
    uint32_t kernel_threads; /* HAL_CPU_KERNEL_THREADS: block-pool threads per device */
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

/* ---- block pool (cpu_blocks.c) ------------------------------------------------------------- */

#define CPU_BLOCK_MSG_MAX 512

/* The blocks of one launch. The caller sets total, scratch_bytes, run and arg; the rest is the
 * pool's. */
typedef struct cpu_job {
    uint64_t total;       /* blocks */
    size_t scratch_bytes; /* per-block scratch each running thread gets (0: none) */
    hal_status_t (*run)(void *arg, uint64_t block, void *scratch);
    void *arg;
    _Atomic uint64_t next; /* the next block to claim */
    _Atomic uint64_t done; /* blocks claimed and finished (or skipped after a failure) */
    atomic_bool failed;    /* a block failed: the rest are skipped */
    uint32_t runners;      /* pool threads inside the job; guarded by the pool's lock */
    hal_status_t status;   /* the first failure and its detail; guarded by the pool's lock */
    char msg[CPU_BLOCK_MSG_MAX];
    struct cpu_job *next_job;
} cpu_job_t;

typedef struct cpu_pool {
    pthread_mutex_t lock;
    pthread_cond_t work_cv; /* a job with blocks to claim was added, or stop */
    pthread_cond_t done_cv; /* a job's last block finished, or a runner left */
    cpu_job_t *jobs;
    bool stop;
    int pid; /* the process that started the threads */
    uint32_t nthreads;
    pthread_t threads[];
} cpu_pool_t;

/* Starts `threads` pool threads (fewer if the system refuses some); NULL when out of memory. */
cpu_pool_t *cpu_pool_create(uint32_t threads, uint32_t device_index);
/* Stops and joins the threads; in a forked child only forgets the pool. */
void cpu_pool_destroy(cpu_pool_t *pool);
/* Runs every block of job, on the calling thread and the pool's, and returns when all have
 * finished: HAL_OK or the first failure (detail in job->msg). Thread safety: safe. */
hal_status_t cpu_pool_run(cpu_pool_t *pool, cpu_job_t *job);
/* hal_host_kernel_ctx_t.set_error: the detail of the calling block's failure. */
void cpu_block_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- devices ------------------------------------------------------------------------------- */

typedef struct cpu_device {
    hq_device_t hq; /* first: the engine's ops slots take the device object */
    cpu_backend_t *backend;
    uint32_t index;
    uint64_t capacity;
    _Atomic uint64_t used;      /* device and shared bytes allocated */
    cpu_arena_t *arena;         /* where device and shared memory come from; NULL: posix_memalign */
    pthread_mutex_t pool_lock;  /* serialises starting the block pool */
    _Atomic(cpu_pool_t *) pool; /* the block pool, started by the first launch */
} cpu_device_t;

_Static_assert(offsetof(cpu_device_t, hq) == 0, "the engine's device comes first");

/* Records a failure detail for the calling thread through the host services. */
#define cpu_set_error(backend, ...) hq_set_error((backend)->host, __VA_ARGS__)

/* ---- ops slots, by file -------------------------------------------------------------------- */

hal_status_t cpu_mem_alloc(void *device, hal_mem_kind_t kind, size_t size, size_t alignment,
                           void **ptr, void **cookie);
hal_status_t cpu_mem_free(void *device, hal_mem_kind_t kind, void *ptr, void *cookie);
hal_status_t cpu_memcpy_async(void *stream, const hal_backend_ptr_t *dst,
                              const hal_backend_ptr_t *src, size_t n);
hal_status_t cpu_memset_async(void *stream, const hal_backend_ptr_t *dst, int value, size_t n);
hal_status_t cpu_program_create(void *device, hal_program_format_t format, const void *image,
                                size_t size, void **program);
void cpu_program_destroy(void *program);
hal_status_t cpu_program_get_kernel(void *program, const char *name, void **kernel,
                                    hal_kernel_info_t *info);
hal_status_t cpu_kernel_launch(void *stream, void *program, void *kernel,
                               const hal_backend_launch_t *launch);

#endif /* HAL_BACKENDS_CPU_CPU_INTERNAL_H */
