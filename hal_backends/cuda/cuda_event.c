/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA backend: events.
 *
 * CUDA events already have the HAL's versioned semantics for work issued to CUDA: a record
 * replaces the previous one, cudaStreamWaitEvent binds to the record current at the call, and a
 * never-recorded event is complete. What CUDA cannot express is a record that is still queued
 * on a stream in deferred mode (cuda_stream.c): until the worker issues it, the cudaEvent_t
 * still holds the previous record. So each version is a mark (cuda_mark_t: a cudaEvent_t and
 * whether its record has been issued):
 *
 * - record takes the event's primary mark when nothing queued relies on it, else a spare (a
 *   second cudaEvent_t), records it (now, or queued) and makes it the current version;
 * - query reports NOT_READY while the current mark's record is queued, else cudaEventQuery;
 * - synchronize pins the current mark, waits until its record was issued, then
 *   cudaEventSynchronize;
 * - a wait on a stream issues cudaStreamWaitEvent on the current mark at once when its record
 *   was issued (and the waiting stream is direct), else queues the wait on the waiting stream,
 *   whose worker issues it once the record was issued.
 *
 * A mark pinned by a queued record, a queued wait or a synchronizer is never re-recorded, so
 * every wait binds to exactly the version that was current at its call. The primary mark's
 * cudaEvent_t is the native handle: it is the current version whenever no queued call needed
 * another. Marks, the event's reference count and the issue flags are guarded by the device's
 * ev_lock; ev_cv announces issued marks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/cuda/cuda_internal.h"

/* ---- marks --------------------------------------------------------------------------------- */

static hal_status_t mark_new(cuda_device_t *d, unsigned int cuda_flags, cuda_mark_t **out)
{
    const cuda_backend_t *b = d->backend;
    cuda_mark_t *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        cuda_set_error(b, "calloc(%zu) failed for an event", sizeof(*m));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    int prev;
    cudaError_t err = cuda_guard_enter(d, &prev);
    if (err == cudaSuccess)
        err = b->rt.EventCreateWithFlags(&m->h, cuda_flags);
    cuda_guard_leave(d, prev);
    if (err != cudaSuccess) {
        free(m);
        return cuda_fail(b, err, CUDA_OP_OTHER, "cudaEventCreateWithFlags(0x%x) (device %d)",
                         cuda_flags, d->ordinal);
    }
    *out = m;
    return HAL_OK;
}

void cuda_mark_destroy(cuda_device_t *d, cuda_mark_t *m)
{
    if (m == NULL)
        return;
    /* CUDA releases an event's resources once a pending record completes. */
    d->backend->rt.EventDestroy(m->h);
    free(m);
}

bool cuda_mark_reached(cuda_device_t *d, cuda_mark_t *m, bool wait)
{
    pthread_mutex_lock(&d->ev_lock);
    while (wait && (!m->issued || m->refs > 0))
        pthread_cond_wait(&d->ev_cv, &d->ev_lock);
    bool issued = m->issued && m->refs == 0;
    pthread_mutex_unlock(&d->ev_lock);
    if (!issued)
        return false;
    const cuda_rt_t *rt = &d->backend->rt;
    return (wait ? rt->EventSynchronize(m->h) : rt->EventQuery(m->h)) != cudaErrorNotReady;
}

/* Frees the event once its last reference went. Caller holds ev_lock. */
static void event_free(cuda_event_t *e)
{
    cuda_device_t *d = e->device;
    if (e->cur != NULL && e->cur != e->primary)
        cuda_mark_destroy(d, e->cur);
    cuda_mark_destroy(d, e->primary);
    cuda_mark_t *m = e->spares;
    while (m != NULL) {
        cuda_mark_t *next = m->next;
        cuda_mark_destroy(d, m);
        m = next;
    }
    free(e);
}

/* Drops a reference a queued call or synchronizer held on a mark and its event. A spare that
 * nothing holds any more and that is not the current version goes back to the spare list.
 * Caller holds ev_lock. */
static void mark_unref(cuda_event_t *e, cuda_mark_t *m)
{
    m->refs--;
    if (m->refs == 0 && m != e->cur && m != e->primary) {
        m->next = e->spares;
        e->spares = m;
    }
    if (--e->refs == 0)
        event_free(e);
}

/* Makes m the current version. Caller holds ev_lock. */
static void set_current(cuda_event_t *e, cuda_mark_t *m)
{
    cuda_mark_t *old = e->cur;
    e->cur = m;
    if (old != NULL && old != m && old != e->primary && old->refs == 0) {
        old->next = e->spares;
        e->spares = old;
    }
}

/* A mark the new version may use: the primary when nothing relies on it, else a spare. Caller
 * holds ev_lock. */
static hal_status_t pick_mark(cuda_event_t *e, cuda_mark_t **out)
{
    if (e->primary->refs == 0) {
        *out = e->primary;
        return HAL_OK;
    }
    if (e->spares != NULL) {
        *out = e->spares;
        e->spares = e->spares->next;
        (*out)->next = NULL;
        return HAL_OK;
    }
    return mark_new(e->device, e->cuda_flags, out);
}

/* ---- the worker's side ----------------------------------------------------------------------- */

void cuda_mark_run_record(cuda_stream_t *s, cuda_node_t *node)
{
    cuda_device_t *d = s->device;
    const cuda_backend_t *b = d->backend;
    cuda_mark_t *m = node->u.mark.mark;
    cudaError_t err = b->rt.EventRecord(m->h, s->h);
    char msg[CUDA_MSG_MAX] = "";
    hal_status_t st = HAL_OK;
    if (err != cudaSuccess)
        st = cuda_fail_msg(b, err, CUDA_OP_OTHER, msg, sizeof(msg), "cudaEventRecord (queued)");
    /* The worker is the only thread latching on this stream while it is deferred. */
    pthread_mutex_lock(&s->lock);
    hal_status_t latched = s->latched;
    if (latched != HAL_OK)
        snprintf(msg, sizeof(msg), "%s", s->latched_msg);
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_lock(&d->ev_lock);
    m->issued = true;
    m->status = latched != HAL_OK ? latched : st;
    snprintf(m->msg, sizeof(m->msg), "%s", msg);
    pthread_cond_broadcast(&d->ev_cv);
    if (node->u.mark.event != NULL)
        mark_unref(node->u.mark.event, m);
    else
        m->refs--;
    pthread_mutex_unlock(&d->ev_lock);
}

void cuda_mark_run_wait(cuda_stream_t *s, cuda_node_t *node)
{
    cuda_device_t *d = node->u.mark.event->device; /* the event may be of another device */
    const cuda_backend_t *b = s->device->backend;
    cuda_mark_t *m = node->u.mark.mark;
    pthread_mutex_lock(&d->ev_lock);
    while (!m->issued)
        pthread_cond_wait(&d->ev_cv, &d->ev_lock);
    pthread_mutex_unlock(&d->ev_lock);
    /* The mark is pinned: nothing re-records it until the reference below goes. */
    cudaError_t err = b->rt.StreamWaitEvent(s->h, m->h, 0);
    pthread_mutex_lock(&d->ev_lock);
    mark_unref(node->u.mark.event, m);
    pthread_mutex_unlock(&d->ev_lock);
    if (err != cudaSuccess) {
        char msg[CUDA_MSG_MAX];
        hal_status_t st =
            cuda_fail_msg(b, err, CUDA_OP_OTHER, msg, sizeof(msg), "cudaStreamWaitEvent (queued)");
        pthread_mutex_lock(&s->lock);
        if (s->latched == HAL_OK) {
            s->latched = st;
            snprintf(s->latched_msg, sizeof(s->latched_msg), "%s", msg);
            atomic_fetch_or_explicit(&s->state, CUDA_STREAM_LATCHED, memory_order_release);
        }
        pthread_mutex_unlock(&s->lock);
    }
}

/* ---- the HAL slots --------------------------------------------------------------------------- */

hal_status_t cuda_event_create(void *device, uint32_t flags, void **out)
{
    cuda_device_t *d = device;
    cuda_event_t *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        cuda_set_error(d->backend, "calloc(%zu) failed for an event", sizeof(*e));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    e->device = d;
    e->flags = flags;
    /* Timing costs a timestamp per record; events without it are cheaper to record. */
    e->cuda_flags = (flags & HAL_EVENT_FLAG_TIMING) ? 0u : cudaEventDisableTiming;
    hal_status_t st = mark_new(d, e->cuda_flags, &e->primary);
    if (st != HAL_OK) {
        free(e);
        return st;
    }
    e->refs = 1;
    *out = e;
    return HAL_OK;
}

/* Queued records and waits keep what they need alive (the event's references). */
void cuda_event_destroy(void *event)
{
    cuda_event_t *e = event;
    cuda_device_t *d = e->device;
    pthread_mutex_lock(&d->ev_lock);
    if (--e->refs == 0)
        event_free(e);
    pthread_mutex_unlock(&d->ev_lock);
}

hal_status_t cuda_event_record(void *event, void *stream)
{
    cuda_event_t *e = event;
    cuda_stream_t *s = stream;
    cuda_device_t *d = e->device;
    const cuda_backend_t *b = d->backend;
    uint32_t state = atomic_load_explicit(&s->state, memory_order_acquire);
    pthread_mutex_lock(&d->ev_lock);
    cuda_mark_t *m = NULL;
    hal_status_t st = pick_mark(e, &m);
    if (st != HAL_OK) {
        pthread_mutex_unlock(&d->ev_lock);
        return st;
    }
    if ((state & CUDA_STREAM_DEFERRED) == 0) {
        int prev;
        cudaError_t err = cuda_guard_enter(d, &prev);
        if (err == cudaSuccess)
            err = b->rt.EventRecord(m->h, s->h);
        cuda_guard_leave(d, prev);
        if (err != cudaSuccess) {
            if (m != e->primary) {
                m->next = e->spares;
                e->spares = m;
            }
            pthread_mutex_unlock(&d->ev_lock);
            return cuda_fail(b, err, CUDA_OP_OTHER, "cudaEventRecord");
        }
        m->issued = true;
        m->status = HAL_OK;
        m->msg[0] = '\0';
        if (state & CUDA_STREAM_LATCHED) {
            /* The stream failed before this record: the version completes with the error. */
            pthread_mutex_lock(&s->lock);
            m->status = s->latched;
            snprintf(m->msg, sizeof(m->msg), "%s", s->latched_msg);
            pthread_mutex_unlock(&s->lock);
        }
        set_current(e, m);
        pthread_mutex_unlock(&d->ev_lock);
        return HAL_OK;
    }
    /* Deferred: the worker records it when the stream's queue gets there. */
    cuda_node_t *node = calloc(1, sizeof(*node));
    if (node == NULL) {
        if (m != e->primary) {
            m->next = e->spares;
            e->spares = m;
        }
        pthread_mutex_unlock(&d->ev_lock);
        cuda_set_error(b, "calloc(%zu) failed for a queued event record", sizeof(*node));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    m->issued = false;
    m->refs++;
    e->refs++;
    set_current(e, m);
    node->kind = CUDA_NODE_RECORD;
    node->u.mark.event = e;
    node->u.mark.mark = m;
    pthread_mutex_unlock(&d->ev_lock);
    st = cuda_stream_push(s, node);
    if (st != HAL_OK) {
        /* Not queued (node freed): the version completes at once, with the failure. */
        pthread_mutex_lock(&d->ev_lock);
        m->issued = true;
        m->status = st;
        snprintf(m->msg, sizeof(m->msg), "the record could not be queued");
        mark_unref(e, m);
        pthread_cond_broadcast(&d->ev_cv);
        pthread_mutex_unlock(&d->ev_lock);
    }
    return st;
}

hal_status_t cuda_event_query(void *event)
{
    cuda_event_t *e = event;
    cuda_device_t *d = e->device;
    pthread_mutex_lock(&d->ev_lock);
    cuda_mark_t *m = e->cur;
    if (m == NULL) {
        pthread_mutex_unlock(&d->ev_lock);
        return HAL_OK; /* never recorded */
    }
    if (!m->issued) {
        pthread_mutex_unlock(&d->ev_lock);
        return HAL_NOT_READY;
    }
    cudaEvent_t h = m->h;
    hal_status_t status = m->status;
    char msg[CUDA_MSG_MAX];
    if (status != HAL_OK)
        snprintf(msg, sizeof(msg), "%s", m->msg);
    pthread_mutex_unlock(&d->ev_lock);
    cudaError_t err = d->backend->rt.EventQuery(h);
    if (err == cudaErrorNotReady)
        return HAL_NOT_READY;
    if (err != cudaSuccess)
        return cuda_fail(d->backend, err, CUDA_OP_OTHER, "cudaEventQuery");
    if (status != HAL_OK)
        cuda_set_error(d->backend, "the recording stream failed before the event: %s", msg);
    return status;
}

hal_status_t cuda_event_synchronize(void *event)
{
    cuda_event_t *e = event;
    cuda_device_t *d = e->device;
    pthread_mutex_lock(&d->ev_lock);
    cuda_mark_t *m = e->cur;
    if (m == NULL) {
        pthread_mutex_unlock(&d->ev_lock);
        return HAL_OK;
    }
    /* Pinned: a record issued meanwhile takes another mark, so this waits for the version
     * current at the call. */
    m->refs++;
    e->refs++;
    while (!m->issued)
        pthread_cond_wait(&d->ev_cv, &d->ev_lock);
    cudaEvent_t h = m->h;
    pthread_mutex_unlock(&d->ev_lock);
    cudaError_t err = d->backend->rt.EventSynchronize(h);
    pthread_mutex_lock(&d->ev_lock);
    hal_status_t status = m->status;
    char msg[CUDA_MSG_MAX];
    if (status != HAL_OK)
        snprintf(msg, sizeof(msg), "%s", m->msg);
    mark_unref(e, m);
    pthread_mutex_unlock(&d->ev_lock);
    if (err != cudaSuccess)
        return cuda_fail(d->backend, err, CUDA_OP_OTHER, "cudaEventSynchronize");
    if (status != HAL_OK)
        cuda_set_error(d->backend, "the recording stream failed before the event: %s", msg);
    return status;
}

hal_status_t cuda_event_elapsed_ms(void *start, void *end, float *ms)
{
    cuda_event_t *a = start, *z = end;
    cuda_device_t *d = a->device; /* the core checked that both are of one device */
    pthread_mutex_lock(&d->ev_lock);
    cuda_mark_t *ma = a->cur, *mz = z->cur;
    if (ma == NULL || mz == NULL) {
        pthread_mutex_unlock(&d->ev_lock);
        cuda_set_error(d->backend, "the %s event was never recorded", ma == NULL ? "start" : "end");
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    if (!ma->issued || !mz->issued) {
        pthread_mutex_unlock(&d->ev_lock);
        return HAL_NOT_READY;
    }
    cudaEvent_t ha = ma->h, hz = mz->h;
    pthread_mutex_unlock(&d->ev_lock);
    cudaError_t err = d->backend->rt.EventElapsedTime(ms, ha, hz);
    if (err == cudaErrorNotReady)
        return HAL_NOT_READY;
    if (err != cudaSuccess)
        return cuda_fail(d->backend, err, CUDA_OP_OTHER, "cudaEventElapsedTime");
    return HAL_OK;
}

hal_status_t cuda_event_get_native_handle(void *event, uintptr_t *native)
{
    *native = (uintptr_t)((cuda_event_t *)event)->primary->h;
    return HAL_OK;
}

/* ---- waits ----------------------------------------------------------------------------------- */

hal_status_t cuda_stream_wait_event(void *stream, void *event)
{
    cuda_stream_t *s = stream;
    cuda_event_t *e = event;
    cuda_device_t *ed = e->device;
    const cuda_backend_t *b = s->device->backend;
    uint32_t state = atomic_load_explicit(&s->state, memory_order_acquire);
    pthread_mutex_lock(&ed->ev_lock);
    cuda_mark_t *m = e->cur;
    if (m == NULL) {
        pthread_mutex_unlock(&ed->ev_lock);
        return HAL_OK; /* never recorded: nothing to wait for */
    }
    if (m->issued && (state & CUDA_STREAM_DEFERRED) == 0) {
        /* Under ev_lock, so no other thread re-records the mark before the wait binds. */
        cudaError_t err = b->rt.StreamWaitEvent(s->h, m->h, 0);
        pthread_mutex_unlock(&ed->ev_lock);
        if (err != cudaSuccess)
            return cuda_fail(b, err, CUDA_OP_OTHER, "cudaStreamWaitEvent");
        return HAL_OK;
    }
    cuda_node_t *node = calloc(1, sizeof(*node));
    if (node == NULL) {
        pthread_mutex_unlock(&ed->ev_lock);
        cuda_set_error(b, "calloc(%zu) failed for a queued event wait", sizeof(*node));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    m->refs++;
    e->refs++;
    node->kind = CUDA_NODE_WAIT;
    node->u.mark.event = e;
    node->u.mark.mark = m;
    pthread_mutex_unlock(&ed->ev_lock);
    hal_status_t st = cuda_stream_push(s, node);
    if (st != HAL_OK) {
        pthread_mutex_lock(&ed->ev_lock);
        mark_unref(e, m);
        pthread_mutex_unlock(&ed->ev_lock);
    }
    return st;
}

/* ---- marks of stream-ordered frees ----------------------------------------------------------- */

hal_status_t cuda_mark_record_free(cuda_stream_t *s, cuda_mark_t **out)
{
    cuda_device_t *d = s->device;
    const cuda_backend_t *b = d->backend;
    cuda_mark_t *m = NULL;
    hal_status_t st = mark_new(d, cudaEventDisableTiming, &m);
    if (st != HAL_OK)
        return st;
    uint32_t state = atomic_load_explicit(&s->state, memory_order_acquire);
    if ((state & CUDA_STREAM_DEFERRED) == 0) {
        int prev;
        cudaError_t err = cuda_guard_enter(d, &prev);
        if (err == cudaSuccess)
            err = b->rt.EventRecord(m->h, s->h);
        cuda_guard_leave(d, prev);
        if (err != cudaSuccess) {
            cuda_mark_destroy(d, m);
            return cuda_fail(b, err, CUDA_OP_OTHER, "cudaEventRecord (stream-ordered free)");
        }
        m->issued = true;
        *out = m;
        return HAL_OK;
    }
    cuda_node_t *node = calloc(1, sizeof(*node));
    if (node == NULL) {
        cuda_mark_destroy(d, m);
        cuda_set_error(b, "calloc(%zu) failed for a queued free", sizeof(*node));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    m->refs = 1;
    node->kind = CUDA_NODE_RECORD;
    node->u.mark.event = NULL;
    node->u.mark.mark = m;
    st = cuda_stream_push(s, node);
    if (st != HAL_OK) {
        cuda_mark_destroy(d, m);
        return st;
    }
    *out = m;
    return HAL_OK;
}
