/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA backend: streams.
 *
 * A HAL stream is a non-blocking cudaStream_t (it never synchronises with the legacy default
 * stream) created with the requested priority, plus a worker thread started the first time the
 * stream needs one.
 *
 * Direct mode (the normal case): copies, memsets, event records and waits are issued to CUDA
 * by the calling thread. The fast path reads one atomic word (the state) and calls CUDA.
 *
 * Deferred mode: host work in stream order (a host callback, a HAL host function, a memset of
 * pinned memory) cannot be expressed to CUDA without running it on CUDA's single callback
 * thread (see cuda_internal.h), so it is queued as a node and the stream switches to deferred
 * mode: every later call on the stream is queued behind it too. The worker takes nodes in
 * order; for host work it records its marker event on the stream, waits for it (the stream has
 * reached that point), runs the work; for CUDA work it issues the call. Once the queue is empty
 * it clears the deferred bit and the stream is direct again. Work that others launch directly
 * on the native cudaStream_t meanwhile is not ordered after the queued host work; the README
 * says so.
 *
 * Errors latch: a host function that fails, or a queued CUDA call that fails, stores its status
 * and message. From then on query and synchronize return it, copies and memsets are refused
 * (queued ones are skipped, which is what keeps the HAL's staged collectives from copying stale
 * staging data back after a failed collective), event records carry it, callbacks are told.
 *
 * Ordering: calls on one stream are externally ordered (the HAL's rule), so only the caller
 * sets the deferred bit and only the worker clears it, after the last queued call was issued.
 * A caller that reads the state as 0 therefore issues after everything the worker issued. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/cuda/cuda_internal.h"

/* ---- latching ------------------------------------------------------------------------------ */

/* Latches an error (the first one wins). Caller is the worker, or holds no stream lock. */
static void latch(cuda_stream_t *s, hal_status_t st, const char *msg)
{
    pthread_mutex_lock(&s->lock);
    if (s->latched == HAL_OK) {
        s->latched = st;
        snprintf(s->latched_msg, sizeof(s->latched_msg), "%s", msg != NULL ? msg : "");
        atomic_fetch_or_explicit(&s->state, CUDA_STREAM_LATCHED, memory_order_release);
    }
    pthread_mutex_unlock(&s->lock);
}

void cuda_stream_latch(cuda_stream_t *s, hal_status_t st, const char *msg)
{
    latch(s, st, msg);
}

hal_status_t cuda_stream_latched(cuda_stream_t *s)
{
    if ((atomic_load_explicit(&s->state, memory_order_acquire) & CUDA_STREAM_LATCHED) == 0)
        return HAL_OK;
    pthread_mutex_lock(&s->lock);
    hal_status_t st = s->latched;
    char msg[CUDA_MSG_MAX];
    snprintf(msg, sizeof(msg), "%s", s->latched_msg);
    pthread_mutex_unlock(&s->lock);
    cuda_set_error(s->device->backend, "the stream failed earlier: %s", msg);
    return st;
}

/* ---- the worker ---------------------------------------------------------------------------- */

/* Waits until the stream reached the point where the current host node sits (every call queued
 * before it has been issued by now). Returns the status a callback is told. */
static hal_status_t reach_point(cuda_stream_t *s)
{
    const cuda_backend_t *b = s->device->backend;
    char msg[CUDA_MSG_MAX];
    cudaError_t err = b->rt.EventRecord(s->point, s->h);
    if (err == cudaSuccess)
        err = b->rt.EventSynchronize(s->point);
    if (err != cudaSuccess) {
        hal_status_t st =
            cuda_fail_msg(b, err, CUDA_OP_OTHER, msg, sizeof(msg),
                          "waiting for the stream to reach a host function (cudaEventRecord + "
                          "cudaEventSynchronize)");
        latch(s, st, msg);
    }
    pthread_mutex_lock(&s->lock);
    hal_status_t st = s->latched;
    pthread_mutex_unlock(&s->lock);
    return st;
}

static void run_node(cuda_stream_t *s, cuda_node_t *node)
{
    const cuda_backend_t *b = s->device->backend;
    const cuda_rt_t *rt = &b->rt;
    const hal_host_services_t *host = b->host;
    char msg[CUDA_MSG_MAX];
    hal_status_t latched;
    cudaError_t err;
    switch (node->kind) {
    case CUDA_NODE_CALLBACK:
        node->u.cb.fn(reach_point(s), node->u.cb.user);
        break;
    case CUDA_NODE_HOST_FN: {
        hal_status_t rc = node->u.hf.fn(node->u.hf.arg, reach_point(s));
        if (rc != HAL_OK) {
            const char *detail = NULL;
            if (HAL_STRUCT_HAS(hal_host_services_t, take_error, host->struct_size) &&
                host->take_error != NULL)
                detail = host->take_error();
            snprintf(msg, sizeof(msg), "%s",
                     detail != NULL && detail[0] != '\0' ? detail : "a host function failed");
            latch(s, rc, msg);
        }
        break;
    }
    case CUDA_NODE_HOST_MEMSET:
        if (reach_point(s) == HAL_OK)
            memset(node->u.set.dst, node->u.set.value, node->u.set.n);
        break;
    case CUDA_NODE_COPY:
    case CUDA_NODE_MEMSET:
        pthread_mutex_lock(&s->lock);
        latched = s->latched;
        pthread_mutex_unlock(&s->lock);
        if (latched != HAL_OK)
            break; /* skipped: the stream failed before it */
        if (node->kind == CUDA_NODE_COPY)
            err = rt->MemcpyAsync(node->u.copy.dst, node->u.copy.src, node->u.copy.n,
                                  cudaMemcpyDefault, s->h);
        else
            err = rt->MemsetAsync(node->u.set.dst, node->u.set.value, node->u.set.n, s->h);
        if (err != cudaSuccess) {
            hal_status_t st =
                node->kind == CUDA_NODE_COPY
                    ? cuda_fail_msg(b, err, CUDA_OP_OTHER, msg, sizeof(msg),
                                    "cudaMemcpyAsync(%p, %p, %zu) (queued)", node->u.copy.dst,
                                    node->u.copy.src, node->u.copy.n)
                    : cuda_fail_msg(b, err, CUDA_OP_OTHER, msg, sizeof(msg),
                                    "cudaMemsetAsync(%p, %d, %zu) (queued)", node->u.set.dst,
                                    node->u.set.value, node->u.set.n);
            latch(s, st, msg);
        }
        break;
    case CUDA_NODE_RECORD:
        cuda_mark_run_record(s, node);
        break;
    case CUDA_NODE_WAIT:
        cuda_mark_run_wait(s, node);
        break;
    case CUDA_NODE_LAUNCH:
        cuda_launch_run(s, node->u.launch);
        break;
    }
}

static void *worker_main(void *arg)
{
    cuda_stream_t *s = arg;
    /* The worker issues CUDA calls for this device only. */
    s->device->backend->rt.SetDevice(s->device->ordinal);
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->head == NULL && !s->stopping)
            pthread_cond_wait(&s->work_cv, &s->lock);
        if (s->head == NULL)
            break;
        cuda_node_t *node = s->head;
        s->head = node->next;
        if (s->head == NULL)
            s->tail = NULL;
        pthread_mutex_unlock(&s->lock);
        run_node(s, node);
        free(node);
        pthread_mutex_lock(&s->lock);
        s->completed++;
        if (s->head == NULL)
            atomic_fetch_and_explicit(&s->state, ~CUDA_STREAM_DEFERRED, memory_order_release);
        pthread_cond_broadcast(&s->done_cv);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

hal_status_t cuda_stream_push(cuda_stream_t *s, cuda_node_t *node)
{
    const cuda_backend_t *b = s->device->backend;
    pthread_mutex_lock(&s->lock);
    if (!s->worker_started) {
        if (s->point == NULL) {
            /* Blocking sync: the worker sleeps while the device works instead of spinning. */
            int prev;
            cudaError_t err = cuda_guard_enter(s->device, &prev);
            if (err == cudaSuccess)
                err = b->rt.EventCreateWithFlags(&s->point,
                                                 cudaEventDisableTiming | cudaEventBlockingSync);
            cuda_guard_leave(s->device, prev);
            if (err != cudaSuccess) {
                s->point = NULL;
                pthread_mutex_unlock(&s->lock);
                free(node);
                return cuda_fail(b, err, CUDA_OP_OTHER,
                                 "cudaEventCreateWithFlags (the stream's host-work marker)");
            }
        }
        if (pthread_create(&s->worker, NULL, worker_main, s) != 0) {
            pthread_mutex_unlock(&s->lock);
            free(node);
            cuda_set_error(b, "pthread_create failed for the stream's worker thread");
            return HAL_ERROR_OUT_OF_HOST_MEMORY;
        }
        s->worker_started = true;
    }
    node->next = NULL;
    if (s->tail != NULL)
        s->tail->next = node;
    else
        s->head = node;
    s->tail = node;
    s->enqueued++;
    atomic_fetch_or_explicit(&s->state, CUDA_STREAM_DEFERRED, memory_order_release);
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->lock);
    return HAL_OK;
}

void cuda_stream_drain(cuda_stream_t *s)
{
    if ((atomic_load_explicit(&s->state, memory_order_acquire) & CUDA_STREAM_DEFERRED) == 0)
        return;
    pthread_mutex_lock(&s->lock);
    while (atomic_load_explicit(&s->state, memory_order_acquire) & CUDA_STREAM_DEFERRED)
        pthread_cond_wait(&s->done_cv, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

hal_status_t cuda_stream_wait_nodes(cuda_stream_t *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t target = s->enqueued;
    while (s->completed < target)
        pthread_cond_wait(&s->done_cv, &s->lock);
    pthread_mutex_unlock(&s->lock);
    return cuda_stream_latched(s);
}

/* ---- lifetime ------------------------------------------------------------------------------ */

hal_status_t cuda_stream_create(void *device, int32_t priority, void **out)
{
    cuda_device_t *d = device;
    const cuda_backend_t *b = d->backend;
    cuda_stream_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        cuda_set_error(b, "calloc(%zu) failed for a stream", sizeof(*s));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    int prev;
    cudaError_t err = cuda_guard_enter(d, &prev);
    if (err == cudaSuccess)
        err = b->rt.StreamCreateWithPriority(&s->h, cudaStreamNonBlocking, (int)priority);
    cuda_guard_leave(d, prev);
    if (err != cudaSuccess) {
        free(s);
        return cuda_fail(b, err, CUDA_OP_OTHER,
                         "cudaStreamCreateWithPriority(cudaStreamNonBlocking, %d) (device %d)",
                         (int)priority, d->ordinal);
    }
    s->device = d;
    s->priority = priority;
    atomic_init(&s->state, 0u);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_cond_init(&s->done_cv, NULL);
    s->refs = 1;
    /* Appended: device_synchronize reports latched errors in creation order. */
    pthread_mutex_lock(&d->lock);
    cuda_stream_t **pos = &d->streams, *last = NULL;
    while (*pos != NULL) {
        last = *pos;
        pos = &(*pos)->next;
    }
    s->prev = last;
    *pos = s;
    pthread_mutex_unlock(&d->lock);
    *out = s;
    return HAL_OK;
}

/* Frees the stream's memory (its worker has been joined and its CUDA objects destroyed). */
static void stream_free(cuda_stream_t *s)
{
    pthread_cond_destroy(&s->done_cv);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void cuda_stream_unref(cuda_stream_t *s)
{
    if (--s->refs == 0)
        stream_free(s);
}

hal_status_t cuda_stream_destroy(void *stream)
{
    cuda_stream_t *s = stream;
    cuda_device_t *d = s->device;
    const cuda_backend_t *b = d->backend;
    /* Pending work first: queued nodes, then what CUDA holds. */
    cuda_stream_wait_nodes(s);
    cudaError_t err = b->rt.StreamSynchronize(s->h);
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    pthread_cond_signal(&s->work_cv);
    bool joined = s->worker_started;
    pthread_mutex_unlock(&s->lock);
    if (joined)
        pthread_join(s->worker, NULL);
    int prev;
    cuda_guard_enter(d, &prev);
    if (s->point != NULL)
        b->rt.EventDestroy(s->point);
    /* Resources are released once queued work completes, which it has. */
    b->rt.StreamDestroy(s->h);
    cuda_guard_leave(d, prev);

    pthread_mutex_lock(&d->lock);
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        d->streams = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    pthread_mutex_unlock(&d->lock);

    hal_status_t st = cuda_stream_latched(s);
    if (st == HAL_OK && err != cudaSuccess)
        st = cuda_fail(b, err, CUDA_OP_OTHER, "cudaStreamSynchronize (destroying the stream)");
    b->rt.GetLastError();
    pthread_mutex_lock(&d->lock);
    cuda_stream_unref(s);
    pthread_mutex_unlock(&d->lock);
    return st;
}

/* ---- queries ------------------------------------------------------------------------------- */

hal_status_t cuda_stream_query(void *stream)
{
    cuda_stream_t *s = stream;
    uint32_t state = atomic_load_explicit(&s->state, memory_order_acquire);
    if (state & CUDA_STREAM_LATCHED)
        return cuda_stream_latched(s);
    if (state & CUDA_STREAM_DEFERRED)
        return HAL_NOT_READY;
    cudaError_t err = s->device->backend->rt.StreamQuery(s->h);
    if (err == cudaSuccess)
        return HAL_OK;
    if (err == cudaErrorNotReady)
        return HAL_NOT_READY;
    return cuda_fail(s->device->backend, err, CUDA_OP_OTHER, "cudaStreamQuery");
}

hal_status_t cuda_stream_synchronize(void *stream)
{
    cuda_stream_t *s = stream;
    hal_status_t st = cuda_stream_wait_nodes(s);
    if (st != HAL_OK)
        return st;
    cudaError_t err = s->device->backend->rt.StreamSynchronize(s->h);
    if (err != cudaSuccess)
        return cuda_fail(s->device->backend, err, CUDA_OP_OTHER, "cudaStreamSynchronize");
    return cuda_stream_latched(s);
}

hal_status_t cuda_stream_get_native_handle(void *stream, uintptr_t *native)
{
    *native = (uintptr_t)((cuda_stream_t *)stream)->h;
    return HAL_OK;
}

/* ---- host work ----------------------------------------------------------------------------- */

static cuda_node_t *node_new(const cuda_stream_t *s, cuda_node_kind_t kind)
{
    cuda_node_t *node = calloc(1, sizeof(*node));
    if (node == NULL)
        cuda_set_error(s->device->backend, "calloc(%zu) failed for a queued stream call",
                       sizeof(*node));
    else
        node->kind = kind;
    return node;
}

hal_status_t cuda_stream_add_callback(void *stream, hal_host_fn_t fn, void *user_data)
{
    cuda_stream_t *s = stream;
    cuda_node_t *node = node_new(s, CUDA_NODE_CALLBACK);
    if (node == NULL)
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    node->u.cb.fn = fn;
    node->u.cb.user = user_data;
    return cuda_stream_push(s, node);
}

/* Runs even after the stream failed (the function decides what that means, e.g. a collective
 * tells its peers it gives up); a non-OK return latches with the detail it left. */
hal_status_t cuda_stream_launch_host_fn(void *stream, hal_stream_host_fn_t fn, void *arg)
{
    cuda_stream_t *s = stream;
    cuda_node_t *node = node_new(s, CUDA_NODE_HOST_FN);
    if (node == NULL)
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    node->u.hf.fn = fn;
    node->u.hf.arg = arg;
    return cuda_stream_push(s, node);
}
