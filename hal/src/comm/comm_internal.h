/* SPDX-License-Identifier: Apache-2.0 */
/* Internal to the collectives front end: the communicator object shared by comm.c (lifecycle)
 * and comm_collectives.c (argument checks, groups, dispatch). */
#ifndef HAL_SRC_COMM_COMM_INTERNAL_H
#define HAL_SRC_COMM_COMM_INTERNAL_H

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "hal/layers/layer.h"
#include "hal/src/comm/bootstrap.h"
#include "hal/src/comm/engine.h"
#include "hal/src/core.h"

#define HAL_COMM_MAX_RANKS          4096
#define HAL_COMM_DEFAULT_TIMEOUT_MS 300000u
#define HAL_COMM_MESSAGE_MAX        512

/* A stream that ran native collectives of the communicator, and an event recorded on it after the
 * last one: finalize and destroy wait for these events (the backend's work is not a host job). */
typedef struct comm_native_mark {
    void *stream; /* the backend's stream object */
    void *event;  /* the backend's event object, owned by the communicator */
} comm_native_mark_t;

/* An IPC mapping the engine opened through the backend, with what closing it needs. */
typedef struct comm_ipc_mapping {
    void *ptr;
    void *cookie;
} comm_ipc_mapping_t;

/* The staging pipeline of a communicator (comm_pipeline.c). */
typedef struct comm_pipe comm_pipe_t;

struct hal_comm_s {
    hal_object_t obj;
    const hal_backend_ops_t *ops;
    struct hal_device_s *device;
    hal_live_link_t link; /* in device->comms */
    int nranks, rank;
    uint32_t timeout_ms;
    bool host_addressable; /* the engine may work on device pointers directly */
    bool use_ipc;          /* export IPC handles with each operation */
    hal_unique_id_t id;
    hal_comm_store_t store; /* copied: a non-blocking init outlives the caller's struct */
    bool has_store;

    hal_bootstrap_t *bootstrap;
    hal_engine_comm_t *engine;
    hal_engine_ipc_t ipc;
    void *native;            /* the backend's communicator, when it has comm_init */
    hal_allocator_t staging; /* pinned staging for devices the host cannot address */
    size_t pipe_chunk;       /* staged bytes per pipelined chunk (HAL_COMM_STAGING_CHUNK); 0: off */
    comm_pipe_t *pipe;       /* made by the first pipelined collective (under lock) */

    pthread_mutex_t lock; /* guards everything below (some fields also read atomically) */
    pthread_cond_t cond;
    hal_status_t async_error; /* HAL_IN_PROGRESS while a non-blocking init runs */
    char message[HAL_COMM_MESSAGE_MAX];
    bool init_done;
    bool has_init_thread;
    pthread_t init_thread;
    uint64_t pending;        /* host jobs enqueued and not finished (atomic) */
    uint32_t idle_waiters;   /* threads in wait_idle (atomic) */
    uint32_t job_next;       /* next record of job_pool to try (atomic) */
    unsigned char *job_pool; /* records of one-operation host jobs (atomic; made on first use) */
    comm_ipc_mapping_t *mappings;
    size_t mapping_count, mapping_capacity;
    comm_native_mark_t *marks;
    size_t mark_count, mark_capacity;
};

#define HAL_CHECK_COMM(h, call) HAL_CHECK_HANDLE(h, HAL_MAGIC_COMM, "hal_comm_t", call)

/* A checked operation, ready to enqueue (comm_collectives.c's prepare). */
typedef struct comm_call {
    struct hal_comm_s *comm;
    struct hal_stream_s *stream;
    hal_engine_op_t op;
    hal_backend_ptr_t send, recv; /* resolved buffers (ptr NULL when not used) */
    size_t send_bytes, recv_bytes;
    bool reads_send, writes_recv; /* on this rank */
} comm_call_t;

/* Latches the first error on the communicator (with the current last-error message). */
void hal_comm_latch(struct hal_comm_s *comm, hal_status_t st);
/* Returns the latched status, re-raising its message as this thread's last error. */
hal_status_t hal_comm_sticky(struct hal_comm_s *comm, const char *call);
/* Blocks until a non-blocking init finished; returns its result. */
hal_status_t hal_comm_wait_init(struct hal_comm_s *comm);
/* The backend's communicator once the init finished (NULL while it runs, after it failed, or
 * when the HAL runs the collectives). Reads init_done first, so it never races the init. */
void *hal_comm_native(struct hal_comm_s *comm);
/* Records, after a native collective enqueued on `stream`, an event that finalize and destroy
 * wait for. */
void hal_comm_note_native(struct hal_comm_s *comm, struct hal_stream_s *stream);
/* Bookkeeping of host jobs, for finalize and destroy. */
void hal_comm_job_started(struct hal_comm_s *comm);
void hal_comm_job_finished(struct hal_comm_s *comm);

/* The public function's name of an operation kind ("hal_allreduce"). */
const char *hal_comm_call_name(hal_engine_kind_t kind);

/* Opens a host job when its stream reaches it (n operations, the first one `first`): waits for
 * the init, checks the communicator's sticky error and the stream's, and reports the job to the
 * layers (filling *info for hal_comm_job_end). A failure of the stream or of a layer is latched
 * on the communicator and aborts the engine, so peers stop; the status is returned. */
hal_status_t hal_comm_job_begin(struct hal_comm_s *comm, const hal_engine_op_t *first, size_t n,
                                hal_status_t stream_status, hal_host_collective_t *info);
/* Closes it: reports the outcome to the layers, keeps a failure's message with the stream's
 * error, and counts the job finished (the caller must not touch the communicator afterwards). */
void hal_comm_job_end(struct hal_comm_s *comm, const hal_host_collective_t *info, hal_status_t st);

/* ---- the staging pipeline (comm_pipeline.c) ---- */

/* HAL_COMM_STAGING_CHUNK, or the default chunk size: staged bytes per chunk, 0 to turn the
 * pipeline off. Returns HAL_OK or HAL_ERROR_INVALID_ARGUMENT (message set, naming `call`). */
hal_status_t hal_comm_pipeline_chunk(const char *call, size_t *chunk);
/* Whether the pipeline runs this call: a collective on a device the host cannot address that
 * spans more than one chunk, on a backend with host functions. The answer depends only on the
 * call's kind, count and type and the communicator's chunk size (not on the memory kinds of its
 * buffers, which peers do not know), so every rank decides alike. */
bool hal_comm_pipeline_takes(const comm_call_t *c);
/* Enqueues the call through the pipeline. Returns HAL_OK, HAL_ERROR_OUT_OF_HOST_MEMORY or the
 * status of an enqueue the backend refused (the communicator is then failed and its engine
 * aborted, as a partial enqueue cannot be taken back). Thread safety: as any collective. */
hal_status_t hal_comm_pipeline_enqueue(const comm_call_t *c);
/* Releases the pipeline (its streams drain first). Destroy only, after the last host job. */
void hal_comm_pipeline_destroy(struct hal_comm_s *comm);

/* A host job: the operations of one enqueue, run in stream order by a host function. */
typedef struct comm_job {
    uint32_t busy; /* a pooled record is taken (atomic) */
    int32_t slot;  /* its index in the communicator's pool; -1: from malloc */
    struct hal_comm_s *comm;
    size_t n;
    hal_engine_op_t ops[];
} comm_job_t;

/* Returns room for a job of n operations, comm and n set. A job of one operation (every call
 * outside a group) takes a record of the communicator's pool when the next one is free, so the
 * small collectives' hot path neither calls malloc nor has the stream worker free what another
 * thread allocated; otherwise, and when the pool is exhausted, it comes from malloc. Returns
 * NULL when out of host memory. Thread safety: safe. */
comm_job_t *hal_comm_job_alloc(struct hal_comm_s *comm, size_t n);

/* Gives back a job's room (after its host function ran, or when it could not be enqueued).
 * Thread safety: safe. */
void hal_comm_job_free(comm_job_t *job);

/* Parses the unsigned decimal value of an environment variable: optional leading blanks, then
 * digits only, nothing after them. Signs are refused wherever they stand: strtoull alone takes
 * " -18446744073709551615" for 1. Returns false for anything else or an overflow.
 * Thread safety: safe. */
static inline bool hal_comm_parse_env_count(const char *text, unsigned long long *out)
{
    const char *digits = text;
    while (isspace((unsigned char)*digits))
        digits++;
    if (*digits < '0' || *digits > '9')
        return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(digits, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = v;
    return true;
}

#endif /* HAL_SRC_COMM_COMM_INTERNAL_H */
