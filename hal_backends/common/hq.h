/* SPDX-License-Identifier: Apache-2.0 */
/* Backend toolkit: the host-queue stream engine ("hq").
 *
 * For a runtime whose calls block (or that has no streams at all), the engine provides the
 * HAL's whole asynchronous model on the host: every stream is a worker thread draining a FIFO of
 * tasks, events are versioned exactly as hal_stream.h specifies, errors latch on the stream, a
 * device can be marked lost, and device_synchronize waits for every stream of a device. A backend
 * adds only what moves data: its copies and memsets are work tasks (a function and a small
 * payload copied into the queue) run by the worker in stream order.
 *
 * Using it (hal_backends/template/template_backend.c is the smallest complete example):
 *   - embed hq_device_t as the FIRST member of the backend's device object and call
 *     hq_device_init in device_open, hq_device_fini in device_close;
 *   - put the slot-shaped functions below (hq_stream_create ... hq_event_elapsed_ms,
 *     hq_device_synchronize) straight into the ops table: they take the backend's device
 *     object and return engine streams and events, which the core hands back to the other
 *     slots;
 *   - implement memcpy_async / memset_async with hq_stream_enqueue.
 *
 * Task kinds and what they do on a stream whose error has latched:
 *   work (hq_stream_enqueue)       skipped, unless HQ_TASK_RUN_ON_ERROR; holds an execution slot
 *                                  unless HQ_TASK_NO_SLOT
 *   host function (launch_host_fn) runs and is told the error; no slot
 *   callback (add_callback)        runs and is told the error; a slot if the device says so
 *   event record                   completes the version, carrying the error; no slot
 *   event wait                     still waits; no slot
 *
 * Errors latch: the first failing task stores its status and message, readable with every
 * later query, synchronize, destroy and enqueue; a later failure never replaces the first.
 *
 * fork(): the engine keeps nothing process-wide but a generation counter that a fork handler
 * bumps in the child. In a child, every object created before the fork is dead (its worker
 * threads do not exist and its locks may be held by threads that do not exist): each function
 * given such an object returns HAL_ERROR_DEVICE_LOST ("... created before fork()") without
 * blocking or touching its locks, and destroy/fini functions abandon it instead of freeing it.
 * A child may create new devices, streams and events and use them normally; it must not expect
 * work queued in the parent to run. (The HAL core forgets every backend in a child, so through
 * the public API a child simply opens a fresh backend.)
 *
 * Thread safety: every function is safe to call from any thread unless its comment says
 * otherwise; work functions and callbacks run on the stream's worker thread. */
#ifndef HAL_BACKENDS_COMMON_HQ_H
#define HAL_BACKENDS_COMMON_HQ_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/hal_backend_abi.h"
#include "hal_backends/common/hq_host.h"
#include "hal_backends/common/hq_sched.h"
#include "hal_backends/common/hq_time.h"

typedef struct hq_stream hq_stream_t;
typedef struct hq_event hq_event_t;

/* Size of the engine's message buffers (latched errors, the lost-device reason). */
#define HQ_MSG_MAX 512

/* Bytes of payload a work task carries inline (copied into the queue node). */
#define HQ_PAYLOAD_MAX 80

/* Longest worker thread-name prefix: the name is the prefix and the device index, and Linux
 * keeps 15 characters. */
#define HQ_THREAD_PREFIX_MAX 11

/* Releases what a backend keeps in a stream's extension area (hq_stream_ext); called once, when
 * the stream is freed, after its worker exited. */
typedef void (*hq_stream_ext_fini_t)(hq_stream_t *stream, void *ext);

/* How a device's streams behave. Zero-initialise it and set what you need. */
typedef struct hq_device_config {
    const hal_host_services_t *host; /* the services given to init: errors and take_error */
    uint32_t index;                  /* device index, for worker thread names */
    const char *thread_prefix;       /* workers are named "<prefix><index>" ("hal-cpu0");
                                      * NULL: "hal-hq" */
    uint32_t slots;                  /* execution slots (tasks of the device running at once);
                                      * 0: no limit */
    uint32_t spin_us;                /* microseconds a waiter spins before sleeping; 0 sleeps at
                                      * once (right for runtimes whose calls take microseconds
                                      * or more) */
    bool callbacks_take_slot;        /* host callbacks hold an execution slot while they run */
    size_t stream_ext_size;          /* bytes of backend state per stream (hq_stream_ext),
                                      * zeroed at creation */
    hq_stream_ext_fini_t stream_ext_fini; /* NULL if the extension holds nothing to release */
} hq_device_config_t;

/* The engine's part of a device. Embed it as the first member of the backend's device object;
 * its fields are private to the engine. */
typedef struct hq_device {
    const hal_host_services_t *host;
    uint32_t index;
    char thread_prefix[HQ_THREAD_PREFIX_MAX + 1];
    uint32_t spin_us;
    bool callbacks_take_slot;
    size_t stream_ext_size;
    hq_stream_ext_fini_t stream_ext_fini;
    uint64_t generation; /* fork generation the device was created in */
    hq_sched_t sched;
    pthread_mutex_t streams_lock;
    hq_stream_t *streams; /* live streams in creation order, guarded by streams_lock */
    uint32_t stream_count;
    atomic_bool lost;          /* hq_device_mark_lost was called: sticky HAL_ERROR_DEVICE_LOST */
    char lost_msg[HQ_MSG_MAX]; /* why, written once under streams_lock before `lost` is set */
} hq_device_t;

/* ---- devices ------------------------------------------------------------------------------- */

/* Initialises the engine's part of a device.
 * [out] device  the hq_device_t embedded in the backend's device object.
 * [in]  config  how its streams behave (copied; thread_prefix is truncated to
 *               HQ_THREAD_PREFIX_MAX characters).
 * Returns HAL_OK, or HAL_ERROR_OUT_OF_HOST_MEMORY (no mutex) with the detail reported through
 * config->host; on failure nothing needs to be released.
 * Thread safety: not safe for the same device. */
hal_status_t hq_device_init(hq_device_t *device, const hq_device_config_t *config);

/* Releases the engine's part of a device whose streams are all destroyed (events may outlive
 * it only while no queued work references them; the core destroys both first). In a forked
 * child, a device created before the fork is abandoned, not released.
 * Thread safety: not safe for the same device. */
void hq_device_fini(hq_device_t *device);

/* Slot device_synchronize: waits for the work enqueued so far on every stream of the device,
 * then returns the first latched error among them (streams in creation order), else
 * HAL_ERROR_DEVICE_LOST if the device was marked lost, else HAL_OK. Streams created or
 * destroyed concurrently are safe: each stream is pinned while it is waited for, and the list
 * lock is not held while waiting (so a callback may create streams).
 * [in] device  the backend's device object (its first member is the hq_device_t).
 * Returns HAL_OK, a latched error, HAL_ERROR_DEVICE_LOST, or HAL_ERROR_OUT_OF_HOST_MEMORY
 * (listing more than 16 streams needs memory).
 * Thread safety: safe. */
hal_status_t hq_device_synchronize(void *device);

/* Marks the device lost: HAL_ERROR_DEVICE_LOST latches on each of its streams (with the
 * message as detail), streams created later are born failed, and hq_device_check_lost and
 * hq_device_synchronize report it. Only the first call's message is kept; later calls still
 * latch on every stream (a no-op where an error latched already).
 * [in] device  the device.
 * [in] fmt     printf-style message, naming the device and the reason ("NeuronCore 0 is lost:
 *              nrt_tensor_read returned NRT_HW_ERROR").
 * Thread safety: safe, including from a worker of one of the device's streams. */
void hq_device_mark_lost(hq_device_t *device, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Returns HAL_ERROR_DEVICE_LOST, with the message reported to the calling thread, if the device
 * was marked lost (or was created before a fork of this process), else HAL_OK.
 * Thread safety: safe. */
hal_status_t hq_device_check_lost(hq_device_t *device);

/* ---- streams ------------------------------------------------------------------------------- */

/* A work task: runs on the stream's worker with a pointer to its copy of the payload.
 * [in] stream         the stream running it.
 * [in] payload        the task's copy of what hq_stream_enqueue was given (aligned for any
 *                     type); the function may modify it.
 * [in] stream_status  HAL_OK, or the error latched before the task's turn (only seen by tasks
 *                     enqueued with HQ_TASK_RUN_ON_ERROR).
 * Returns HAL_OK, or an error that latches on the stream; call hq_task_error first to say why
 * (otherwise the message names the status). */
typedef hal_status_t (*hq_work_fn_t)(hq_stream_t *stream, void *payload,
                                     hal_status_t stream_status);

/* Flags of hq_stream_enqueue. */
#define HQ_TASK_RUN_ON_ERROR (1u << 0) /* run even after an error latched (else skipped) */
#define HQ_TASK_NO_SLOT      (1u << 1) /* run without an execution slot (for tasks that block) */
#define HQ_TASK_HOST_FN      (1u << 2) /* runs HAL code: a failure's detail is host->take_error() */
#define HQ_TASK_INLINE       (1u << 3) /* may run on the calling thread: see hq_stream_enqueue */

/* Slot stream_create: creates a stream and starts its worker thread (all signals blocked, so
 * that the application's handlers run on its own threads). On a lost device the stream is born
 * with HAL_ERROR_DEVICE_LOST latched.
 * [in]  device    the backend's device object (its first member is the hq_device_t).
 * [in]  priority  the stream's priority for execution slots (numerically lower first).
 * [out] stream    receives the hq_stream_t *.
 * Returns HAL_OK, HAL_ERROR_OUT_OF_HOST_MEMORY (no memory, mutex or thread; detail reported),
 * or HAL_ERROR_DEVICE_LOST for a device created before a fork of this process.
 * Thread safety: safe. */
hal_status_t hq_stream_create(void *device, int32_t priority, void **stream);

/* Slot stream_destroy: lets the worker drain the queue, joins it, and frees the stream once no
 * hq_device_synchronize still looks at it. Returns the latched error (with its detail) or
 * HAL_OK. In a forked child, a stream created before the fork is abandoned and
 * HAL_ERROR_DEVICE_LOST returned.
 * Thread safety: safe, but no other call may use the stream concurrently or afterwards. */
hal_status_t hq_stream_destroy(void *stream);

/* Slot stream_query: HAL_OK when everything enqueued before the call has run, HAL_NOT_READY if
 * not, or the latched error (with its detail).
 * Thread safety: safe. */
hal_status_t hq_stream_query(void *stream);

/* Slot stream_synchronize: blocks until the work enqueued before the call has run; returns the
 * latched error (with its detail) or HAL_OK.
 * Thread safety: safe. */
hal_status_t hq_stream_synchronize(void *stream);

/* Slot stream_wait_event: makes later work of the stream wait until the event reaches the
 * version current now; nothing is queued if that version completed already or the event was
 * never recorded. The event may belong to another device. Accepted on a failed stream.
 * Returns HAL_OK or HAL_ERROR_OUT_OF_HOST_MEMORY (nothing queued).
 * Thread safety: safe. */
hal_status_t hq_stream_wait_event(void *stream, void *event);

/* Slot stream_add_callback: queues fn(stream_status, user_data) in stream order. It runs even on
 * a failed stream and is told the error; a detail it leaves through the host is dropped after
 * it. Returns HAL_OK or HAL_ERROR_OUT_OF_HOST_MEMORY (nothing queued).
 * Thread safety: safe. */
hal_status_t hq_stream_add_callback(void *stream, hal_host_fn_t fn, void *user_data);

/* Slot stream_launch_host_fn: queues fn(arg, stream_status) in stream order, with
 * HQ_TASK_RUN_ON_ERROR | HQ_TASK_NO_SLOT | HQ_TASK_HOST_FN: it runs even after an error latched
 * and is told it (the function decides what a failed stream means for it: a collective must
 * still meet its peers), holds no execution slot (it may block until peers on the same device
 * arrive), and a non-OK return latches with the detail the function left through the core.
 * Returns HAL_OK or HAL_ERROR_OUT_OF_HOST_MEMORY (nothing queued).
 * Thread safety: safe. */
hal_status_t hq_stream_launch_host_fn(void *stream, hal_stream_host_fn_t fn, void *arg);

/* Queues a work task: fn(stream, copy of payload, stream_status) in stream order.
 * [in] stream   the stream.
 * [in] fn       the work function.
 * [in] payload  `size` bytes copied into the queue node (NULL if size is 0).
 * [in] size     at most HQ_PAYLOAD_MAX.
 * [in] flags    HQ_TASK_* bits.
 * With HQ_TASK_INLINE (and none of the other bits) the task runs at once on the calling thread,
 * before the call returns, when the stream has nothing queued or running and a slot is free
 * without waiting; otherwise it is queued as usual. It then holds a slot and latches its error
 * as on the worker (its message through hq_stream_task_error), and the stream's other
 * producers queue behind it. For short tasks of a blocking runtime (a small copy), where
 * handing the task to a worker that went to sleep costs more than the task itself.
 * Returns HAL_OK; the latched error (with its detail; nothing queued) unless flags has
 * HQ_TASK_RUN_ON_ERROR; HAL_ERROR_INVALID_ARGUMENT if size exceeds HQ_PAYLOAD_MAX;
 * HAL_ERROR_OUT_OF_HOST_MEMORY (nothing queued).
 * Thread safety: safe; concurrent producers are serialised. */
hal_status_t hq_stream_enqueue(hq_stream_t *stream, hq_work_fn_t fn, const void *payload,
                               size_t size, uint32_t flags);

/* Queues a task that fails the stream with `status` when reached, as a device fault would (for
 * tests and fault injection).
 * [in] status  the error to latch (not HAL_OK).
 * [in] detail  its message; must stay valid until the task ran (a string literal).
 * Returns HAL_OK or HAL_ERROR_OUT_OF_HOST_MEMORY (nothing queued).
 * Thread safety: safe. */
hal_status_t hq_stream_inject_error(hq_stream_t *stream, hal_status_t status, const char *detail);

/* Returns the stream's latched error with "the stream failed earlier: <message>" reported to
 * the calling thread, or HAL_OK (HAL_ERROR_DEVICE_LOST for a stream created before a fork).
 * Thread safety: safe. */
hal_status_t hq_stream_latched(hq_stream_t *stream);

/* The device the stream was created on (the backend's device object starts with it).
 * Thread safety: safe. */
hq_device_t *hq_stream_device(const hq_stream_t *stream);

/* The stream's extension area: config.stream_ext_size bytes, zeroed at creation, aligned for
 * any type; NULL if the size is 0. Typically used by work functions on the worker thread.
 * Thread safety: safe (the pointer); the contents are the backend's to guard. */
void *hq_stream_ext(hq_stream_t *stream);

/* Called by a running work function to explain the error it is about to return; the message
 * is latched with the status. Outside a work function it does nothing. A task enqueued with
 * HQ_TASK_INLINE uses hq_stream_task_error instead: it may run on a thread of the caller's,
 * where this function cannot find its stream.
 * Thread safety: safe (it writes the calling worker's own stream). */
void hq_task_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* hq_task_error for the stream a work function was given, wherever it runs (the worker or, for
 * HQ_TASK_INLINE, the thread that enqueued it). It keeps the engine's threads-of-their-own state
 * off the caller's thread: a backend's thread-local variables on an application thread outlive
 * the backend's library when the HAL unloads it, which LeakSanitizer cannot walk.
 * [in] stream  the stream passed to the running work function.
 * Thread safety: only from that work function while it runs. */
void hq_stream_task_error(hq_stream_t *stream, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- events -------------------------------------------------------------------------------- */

/* Slot event_create: an event with one reference, owned by the caller. flags: HAL_EVENT_FLAG_*
 * (HAL_EVENT_FLAG_TIMING makes hq_event_elapsed_ms work).
 * Returns HAL_OK, HAL_ERROR_OUT_OF_HOST_MEMORY (detail reported), or HAL_ERROR_DEVICE_LOST for
 * a device created before a fork.
 * Thread safety: safe. */
hal_status_t hq_event_create(void *device, uint32_t flags, void **event);

/* Slot event_destroy: drops the owner's reference; queued records and waits keep the event
 * alive until they ran.
 * Thread safety: safe, but no other call may use the event concurrently or afterwards. */
void hq_event_destroy(void *event);

/* Slot event_record: bumps the event's version and queues its completion on the stream, which
 * stamps CLOCK_MONOTONIC time and the stream's status when the worker reaches it; on a stream
 * with nothing queued or running that happens at once, in the call. The version is published
 * only once the task is queued (or the version completed), so a failed record leaves the event
 * as it was.
 * Accepted on a failed stream (the version then completes with its error).
 * Returns HAL_OK or HAL_ERROR_OUT_OF_HOST_MEMORY.
 * Thread safety: safe. */
hal_status_t hq_event_record(void *event, void *stream);

/* Slot event_query: HAL_OK if the version current at the call completed (or the event was never
 * recorded), HAL_NOT_READY if not, or the error its stream had latched by then.
 * Thread safety: safe. */
hal_status_t hq_event_query(void *event);

/* Slot event_synchronize: blocks until the version current at the call completed; returns its
 * status as hq_event_query does (HAL_OK for a never-recorded event).
 * Thread safety: safe. */
hal_status_t hq_event_synchronize(void *event);

/* The device the event was created on (the backend's device object starts with it).
 * Thread safety: safe. */
hq_device_t *hq_event_device(const hq_event_t *event);

/* Slot event_elapsed_ms: milliseconds from start's to end's current version (negative if end
 * completed first). HAL_ERROR_INVALID_ARGUMENT if either was created without
 * HAL_EVENT_FLAG_TIMING or never recorded (checked before completion, so the answer does not
 * depend on timing); HAL_NOT_READY if either has not completed.
 * Thread safety: safe. */
hal_status_t hq_event_elapsed_ms(void *start, void *end, float *ms);

/* The engine's slot functions that a backend's ops table takes as they are, as designated
 * initializers: `static const hal_backend_ops_t ops = { ..., HQ_REQUIRED_SLOTS, ... };`. These
 * are the slots the loader requires; the engine also serves two optional ones, which a backend
 * sets only with the capability they go with: stream_add_callback = hq_stream_add_callback
 * (HAL_DEVICE_CAP_HOST_CALLBACKS) and event_elapsed_ms = hq_event_elapsed_ms
 * (HAL_DEVICE_CAP_TIMING_EVENTS). */
#define HQ_REQUIRED_SLOTS                                                                   \
    .device_synchronize = hq_device_synchronize, .stream_create = hq_stream_create,         \
    .stream_destroy = hq_stream_destroy, .stream_query = hq_stream_query,                   \
    .stream_synchronize = hq_stream_synchronize, .stream_wait_event = hq_stream_wait_event, \
    .stream_launch_host_fn = hq_stream_launch_host_fn, .event_create = hq_event_create,     \
    .event_destroy = hq_event_destroy, .event_record = hq_event_record,                     \
    .event_query = hq_event_query, .event_synchronize = hq_event_synchronize

#endif /* HAL_BACKENDS_COMMON_HQ_H */
