/* SPDX-License-Identifier: Apache-2.0 */
/* Backend toolkit: the engine's private types and functions, shared by its source files (and
 * readable by white-box tests). Backends use hq.h only. */
#ifndef HAL_BACKENDS_COMMON_HQ_INTERNAL_H
#define HAL_BACKENDS_COMMON_HQ_INTERNAL_H

#include "hal_backends/common/hq.h"

/* ---- fork generations (hq_device.c) -------------------------------------------------------- */

/* The current fork generation: 0 in the process that loaded the engine, bumped in every forked
 * child (hq_device.c). An object whose generation differs was created before a fork and is dead
 * here. Read inline: every entry point checks it. */
extern _Atomic uint64_t hq_fork_generation;

static inline uint64_t hq_generation_now(void)
{
    return atomic_load_explicit(&hq_fork_generation, memory_order_relaxed);
}

/* Whether an object of `generation` was created before a fork of this process. */
static inline bool hq_is_stale(uint64_t generation)
{
    return __builtin_expect(generation != hq_generation_now(), 0);
}

/* Reports (to the calling thread) that `what` was created before fork() and returns
 * HAL_ERROR_DEVICE_LOST. */
hal_status_t hq_stale_error(const hq_device_t *device, const char *what);

/* ---- tasks --------------------------------------------------------------------------------- */

typedef enum hq_task_kind {
    HQ_TASK_WORK,
    HQ_TASK_RECORD,
    HQ_TASK_WAIT,
    HQ_TASK_CALLBACK,
    HQ_TASK_FAIL,
} hq_task_kind_t;

/* What a task is, apart from its payload. */
typedef struct hq_task_head {
    hq_task_kind_t kind;
    uint32_t flags; /* HQ_TASK_* of a work task */
    union {
        hq_work_fn_t work;
        struct {
            hq_event_t *event;
            uint64_t version;
        } event;
        struct {
            hal_host_fn_t fn;
            void *user_data;
        } callback;
        struct {
            hal_status_t status;
            const char *detail;
        } fail;
    } u;
} hq_task_head_t;

/* A queue node. */
typedef struct hq_task {
    struct hq_task *next;
    hq_task_head_t head;
    union {
        max_align_t align;
        unsigned char bytes[HQ_PAYLOAD_MAX];
    } payload; /* of a work task */
} hq_task_t;

/* Task nodes come in chunks that live as long as the stream: no allocation per task. */
#define HQ_TASK_CHUNK 64

typedef struct hq_task_chunk {
    struct hq_task_chunk *next;
    hq_task_t tasks[HQ_TASK_CHUNK];
} hq_task_chunk_t;

/* ---- streams (hq_stream.c) ----------------------------------------------------------------- */

struct hq_stream {
    hq_device_t *device;
    int32_t priority;
    uint32_t spin_us;
    uint64_t generation;
    atomic_int refcount; /* the owner plus hq_device_synchronize calls in flight */

    pthread_mutex_t lock;   /* guards the fields down to `stop` */
    pthread_cond_t work_cv; /* the worker sleeps here when the queue is empty */
    pthread_cond_t idle_cv; /* synchronize callers sleep here */
    hq_task_t *head, *tail;
    hq_task_t *free_tasks;
    hq_task_chunk_t *chunks;
    bool worker_sleeping;
    bool inline_running; /* a producer runs an HQ_TASK_INLINE task: the worker must not pop */
    uint64_t wake_at;    /* smallest `completed` a sleeping synchronize caller waits for */
    bool stop;

    _Atomic uint64_t submitted; /* tasks enqueued; written under `lock` */
    _Atomic uint64_t completed; /* tasks finished; written by the worker */
    atomic_int status;          /* latched error (hal_status_t), HAL_OK until one occurs */
    atomic_bool latching;       /* claimed by the one thread that writes error_msg */
    atomic_bool stopping;       /* mirrors `stop` for the spinning worker */
    char error_msg[HQ_MSG_MAX]; /* written once, before `status` is published */
    char task_msg[HQ_MSG_MAX];  /* worker scratch for hq_task_error */

    pthread_cond_t sched_cv; /* the worker sleeps here waiting for an execution slot */
    pthread_t thread;
    hq_stream_t *dev_prev, *dev_next; /* device list, guarded by device->streams_lock */
    void *ext;                        /* config.stream_ext_size bytes after the struct, or NULL */
};

/* Appends a task (`head` and `size` bytes of `payload`) to the queue. An event record on a
 * stream with nothing queued or running completes at once instead, and the reference taken for
 * the queue is dropped. Returns HAL_OK, HAL_ERROR_OUT_OF_HOST_MEMORY (nothing queued), or
 * HAL_ERROR_DEVICE_LOST for a stream created before a fork. Thread safety: safe. */
hal_status_t hq_stream_submit(hq_stream_t *stream, const hq_task_head_t *head, const void *payload,
                              size_t size);

/* Latches the stream's first error (later calls are ignored). Thread safety: safe. */
void hq_stream_latch(hq_stream_t *stream, hal_status_t status, const char *msg);

/* Drops a reference; the last one frees the stream (its worker has exited by then). */
void hq_stream_unref(hq_stream_t *stream);

/* Blocks until the stream completed `target` tasks (a value `submitted` had); returns the
 * latched status without reporting it. */
hal_status_t hq_stream_wait_idle(hq_stream_t *stream, uint64_t target);

/* ---- events (hq_event.c) ------------------------------------------------------------------- */

struct hq_event {
    hq_device_t *device;
    uint32_t flags;
    uint32_t spin_us;
    uint64_t generation;
    atomic_int refcount; /* the owner plus every queued record and wait */
    pthread_mutex_t lock;
    pthread_cond_t cv;
    uint32_t waiters;           /* guarded by lock */
    _Atomic uint64_t recorded;  /* version of the latest record call (0: never recorded) */
    _Atomic uint64_t completed; /* highest version the streams reached */
    hal_status_t status;        /* status of version `completed`; guarded by lock */
    uint64_t time_ns;           /* CLOCK_MONOTONIC stamp of version `completed`; guarded by lock */
};

/* Takes a reference for a queued task. */
void hq_event_ref(hq_event_t *event);
/* Drops a reference; the last one frees the event. */
void hq_event_unref(hq_event_t *event);
/* Marks `version` reached, with the recording stream's status then (called by its worker). */
void hq_event_complete(hq_event_t *event, uint64_t version, hal_status_t status);
/* Blocks until the event reached `version` (spinning the device's spin_us first). */
void hq_event_wait_version(hq_event_t *event, uint64_t version);

#endif /* HAL_BACKENDS_COMMON_HQ_INTERNAL_H */
