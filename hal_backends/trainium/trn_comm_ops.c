/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: the native collectives themselves (all-reduce, all-gather, reduce-scatter),
 * each a work task of the stream it was called on, so stream order holds both ways: the task
 * starts once the work before it on the stream ran, and the work after it waits for the task,
 * which returns once the runtime reported the collective complete. On the stream's worker:
 *
 *   1. the communicator's control connections: every rank sends the others what it runs (which
 *      collective, count, type, operation, and the collective's number on the communicator) and
 *      waits for theirs. Disagreement: HAL_ERROR_INVALID_ARGUMENT on every rank, nothing run.
 *      A rank that failed, aborted or left: HAL_ERROR_REMOTE. None within the communicator's
 *      timeout: HAL_ERROR_TIMEOUT. hal_comm_abort: HAL_ERROR_ABORTED.
 *   2. the runtime: nrta_cc_prepare over a slice of each buffer's allocation (pinned host buffers
 *      are staged through a device tensor of the core; before async API 3 an input that overlaps
 *      the output is copied first, as the runtime then has no in-place collectives), then
 *      nrta_cc_schedule on queue 0 (retried while the queue is full), then nrta_is_completed
 *      until done; the request's status comes from the error tracker (async API 2) or the
 *      status pointer (async API 3).
 *   3. what the runtime does not do: AVG is the runtime's sum divided on the host; the product
 *      and the types the runtime does not reduce (f64, i64, u64) are an all-gather by the runtime
 *      and the reduction on the host, in rank order (trn_reduce.c), bit for bit what the HAL's
 *      host engine computes.
 * A failure latches on the communicator (every later call reports it) and on the stream, and the
 * other ranks are told. Requests the backend stops waiting for (abort, timeout) keep their
 * tensors until the runtime is done with them (the backend's graveyard). */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hal_backends/trainium/trn_comm.h"

#define TRN_CC_TENSOR_NAME "torch-hal-cc"

static const char *const kind_names[] = {
    [TRN_CC_ALLREDUCE] = "all-reduce",
    [TRN_CC_ALLGATHER] = "all-gather",
    [TRN_CC_REDUCE_SCATTER] = "reduce-scatter",
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The runtime's element type for a HAL type it reduces (the 64-bit and fp8 ones it does not). */
static bool nrt_dtype_of(hal_dtype_t dtype, nrt_dtype_t *out)
{
    switch (dtype) {
    case HAL_DTYPE_I8:
        *out = NRT_DTYPE_INT8;
        return true;
    case HAL_DTYPE_U8:
        *out = NRT_DTYPE_UINT8;
        return true;
    case HAL_DTYPE_I32:
        *out = NRT_DTYPE_INT32;
        return true;
    case HAL_DTYPE_U32:
        *out = NRT_DTYPE_UINT32;
        return true;
    case HAL_DTYPE_F16:
        *out = NRT_DTYPE_FLOAT16;
        return true;
    case HAL_DTYPE_BF16:
        *out = NRT_DTYPE_BFLOAT16;
        return true;
    case HAL_DTYPE_F32:
        *out = NRT_DTYPE_FLOAT32;
        return true;
    default:
        return false;
    }
}

/* A HAL status's name (the backend does not link the HAL's own table). */
static const char *status_name(hal_status_t st)
{
    switch (st) {
    case HAL_OK:
        return "HAL_OK";
    case HAL_ERROR_INVALID_ARGUMENT:
        return "HAL_ERROR_INVALID_ARGUMENT";
    case HAL_ERROR_OUT_OF_DEVICE_MEMORY:
        return "HAL_ERROR_OUT_OF_DEVICE_MEMORY";
    case HAL_ERROR_OUT_OF_HOST_MEMORY:
        return "HAL_ERROR_OUT_OF_HOST_MEMORY";
    case HAL_ERROR_TIMEOUT:
        return "HAL_ERROR_TIMEOUT";
    case HAL_ERROR_DEVICE_LOST:
        return "HAL_ERROR_DEVICE_LOST";
    case HAL_ERROR_REMOTE:
        return "HAL_ERROR_REMOTE";
    case HAL_ERROR_ABORTED:
        return "HAL_ERROR_ABORTED";
    case HAL_ERROR_BACKEND_SPECIFIC:
        return "HAL_ERROR_BACKEND_SPECIFIC";
    default:
        return "an error";
    }
}

/* ---- taking turns on the communicator ------------------------------------------------------ */

/* Waits until no other collective of the communicator runs (they run one at a time, as they
 * must meet their peers in one order). The latched status if the communicator failed. */
static hal_status_t acquire(trn_comm_t *c, uint64_t *seq)
{
    pthread_mutex_lock(&c->lock);
    while (c->busy && c->status == HAL_OK)
        pthread_cond_wait(&c->cond, &c->lock);
    hal_status_t st = c->status;
    if (st == HAL_OK) {
        c->busy = true;
        *seq = ++c->seq;
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

static void release(trn_comm_t *c)
{
    pthread_mutex_lock(&c->lock);
    c->busy = false;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

/* ---- step 1: the ranks agree ---------------------------------------------------------------- */

static const char *dtype_name(uint32_t dtype)
{
    static const char *const names[] = { "i8",  "u8",  "i32", "u32",  "i64",     "u64",
                                         "f16", "f32", "f64", "bf16", "f8_e4m3", "f8_e5m2" };
    return dtype < sizeof(names) / sizeof(names[0]) ? names[dtype] : "?";
}

static const char *op_name(uint32_t op)
{
    static const char *const names[] = { "sum", "prod", "max", "min", "avg" };
    return op < sizeof(names) / sizeof(names[0]) ? names[op] : "?";
}

static void describe(const trn_ctl_msg_t *m, char *buf, size_t size)
{
    if (m->kind == TRN_CC_ALLGATHER)
        snprintf(buf, size, "collective #%llu, %s of %llu %s", (unsigned long long)m->seq,
                 kind_names[m->kind], (unsigned long long)m->count, dtype_name(m->dtype));
    else
        snprintf(buf, size, "collective #%llu, %s of %llu %s with %s", (unsigned long long)m->seq,
                 m->kind <= TRN_CC_REDUCE_SCATTER ? kind_names[m->kind] : "?",
                 (unsigned long long)m->count, dtype_name(m->dtype), op_name(m->op));
}

/* Sends `mine` to every other rank and receives one message from each into theirs[]. An abort
 * ends the wait only when `abortable` (a rank that said GO waits for the others' answers: it is
 * committed to the collective unless one of them fails). */
static hal_status_t exchange_round(trn_comm_t *c, const trn_cc_job_t *job,
                                   const trn_ctl_msg_t *mine, trn_ctl_msg_t *theirs, bool abortable)
{
    const int n = c->nranks;
    trn_comm_tell_all(c, mine);
    size_t *got = calloc((size_t)n, sizeof(*got));
    struct pollfd *fds = calloc((size_t)n + 1, sizeof(*fds));
    int *rank_of = calloc((size_t)n + 1, sizeof(*rank_of));
    hal_status_t st = got && fds && rank_of ? HAL_OK : HAL_ERROR_OUT_OF_HOST_MEMORY;
    if (st != HAL_OK)
        trn_comm_fail(c, st, true, "out of host memory");
    uint64_t deadline = now_ns() + (uint64_t)c->timeout_ms * 1000000u;
    while (st == HAL_OK) {
        int waiting = 0;
        for (int r = 0; r < n; r++) {
            if (r == c->rank || got[r] == sizeof(trn_ctl_msg_t))
                continue;
            fds[waiting] = (struct pollfd){ .fd = c->fds[r], .events = POLLIN };
            rank_of[waiting++] = r;
        }
        if (waiting == 0)
            break;
        if (abortable && trn_comm_is_aborted(c)) {
            st = trn_comm_latched(c);
            break;
        }
        uint64_t now = now_ns();
        if (now >= deadline) {
            char missing[128] = "";
            for (int i = 0; i < waiting; i++) {
                size_t used = strlen(missing);
                snprintf(missing + used, sizeof(missing) - used, "%s%d", i ? ", " : "", rank_of[i]);
            }
            st = HAL_ERROR_TIMEOUT;
            trn_comm_fail(c, st, true, "rank(s) %s did not enter %s within %u ms", missing,
                          kind_names[job->kind], c->timeout_ms);
            break;
        }
        fds[waiting] = (struct pollfd){ .fd = c->wake[0], .events = POLLIN };
        uint64_t ms = (deadline - now + 999999u) / 1000000u;
        if (poll(fds, (nfds_t)waiting + (abortable ? 1 : 0), ms > 100 ? 100 : (int)ms) <= 0)
            continue;
        for (int i = 0; i < waiting && st == HAL_OK; i++) {
            if (fds[i].revents == 0)
                continue;
            int r = rank_of[i];
            ssize_t k =
                recv(c->fds[r], (char *)&theirs[r] + got[r], sizeof(trn_ctl_msg_t) - got[r], 0);
            if (k > 0) {
                got[r] += (size_t)k;
            } else if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                st = HAL_ERROR_REMOTE;
                trn_comm_fail(c, st, true,
                              "rank %d closed its connection (its process ended, or it destroyed "
                              "the communicator)",
                              r);
            }
            if (st != HAL_OK || got[r] != sizeof(trn_ctl_msg_t))
                continue;
            if (theirs[r].magic != TRN_CTL_MAGIC) {
                st = HAL_ERROR_REMOTE;
                trn_comm_fail(c, st, true,
                              "rank %d sent something else than the backend's control messages", r);
            } else if (theirs[r].type == TRN_CTL_FAIL) {
                st = HAL_ERROR_REMOTE;
                trn_comm_fail(c, st, true, "rank %d failed (%s)", r,
                              status_name((hal_status_t)theirs[r].status));
            }
        }
    }
    free(got);
    free(fds);
    free(rank_of);
    return st;
}

static hal_status_t handshake(trn_comm_t *c, const trn_cc_job_t *job, uint64_t seq)
{
    const int n = c->nranks;
    trn_ctl_msg_t mine = { .magic = TRN_CTL_MAGIC,
                           .type = TRN_CTL_DESC,
                           .seq = seq,
                           .kind = (uint32_t)job->kind,
                           .dtype = (uint32_t)job->dtype,
                           .op = job->kind == TRN_CC_ALLGATHER ? 0u : (uint32_t)job->op,
                           .count = job->count };
    trn_ctl_msg_t *theirs = calloc((size_t)n, sizeof(*theirs));
    if (theirs == NULL) {
        trn_comm_fail(c, HAL_ERROR_OUT_OF_HOST_MEMORY, true, "out of host memory");
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    hal_status_t st = exchange_round(c, job, &mine, theirs, true);
    /* Every rank compares every description with its own: all of them see a disagreement. */
    for (int r = 0; r < n && st == HAL_OK; r++) {
        const trn_ctl_msg_t *t = &theirs[r];
        if (r == c->rank ||
            (t->type == TRN_CTL_DESC && t->seq == mine.seq && t->kind == mine.kind &&
             t->dtype == mine.dtype && t->op == mine.op && t->count == mine.count))
            continue;
        char a[160], b[160];
        describe(t, a, sizeof(a));
        describe(&mine, b, sizeof(b));
        st = HAL_ERROR_INVALID_ARGUMENT;
        trn_comm_fail(c, st, false, "the ranks disagree: rank %d runs %s, rank %d %s", r, a,
                      c->rank, b);
    }
    /* Go ahead together: a rank aborted meanwhile says FAIL instead, and no one schedules. */
    if (st == HAL_OK && trn_comm_is_aborted(c))
        st = trn_comm_latched(c);
    if (st == HAL_OK) {
        trn_ctl_msg_t go = mine;
        go.type = TRN_CTL_GO;
        memset(theirs, 0, (size_t)n * sizeof(*theirs));
        st = exchange_round(c, job, &go, theirs, false);
        for (int r = 0; r < n && st == HAL_OK; r++) {
            if (r == c->rank || (theirs[r].type == TRN_CTL_GO && theirs[r].seq == seq))
                continue;
            st = HAL_ERROR_REMOTE;
            trn_comm_fail(c, st, true, "rank %d sent an unexpected control message", r);
        }
    }
    free(theirs);
    return st;
}

/* ---- step 2: the runtime -------------------------------------------------------------------- */

static bool keep(trn_cc_job_t *job, nrt_tensor_t *t)
{
    if (job->ntensors >= sizeof(job->tensors) / sizeof(job->tensors[0]))
        return false;
    job->tensors[job->ntensors++] = t;
    return true;
}

static void free_tensors(trn_backend_t *b, trn_cc_job_t *job)
{
    for (unsigned i = 0; i < job->ntensors; i++)
        b->nrt.tensor_free(&job->tensors[i]);
    job->ntensors = 0;
}

/* A failed runtime call: latched with its message, the peers told. */
static hal_status_t runtime_failed(trn_comm_t *c, NRT_STATUS rc, trn_nrt_op_t op, const char *fmt,
                                   const char *what)
{
    char msg[TRN_MSG_MAX];
    hal_status_t st = trn_status_format(&c->backend->nrt, rc, op, msg, sizeof(msg), fmt, what);
    if (trn_status_is_device_loss(rc))
        trn_device_mark_lost(c->device, msg);
    trn_comm_fail(c, st, true, "%s", msg);
    return st;
}

/* A device tensor of the core, `bytes` long. */
static hal_status_t scratch(trn_comm_t *c, trn_cc_job_t *job, size_t bytes, nrt_tensor_t **out)
{
    trn_backend_t *b = c->backend;
    nrt_tensor_t *t = NULL;
    NRT_STATUS rc = b->nrt.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, (int)c->device->index,
                                           bytes, TRN_CC_TENSOR_NAME, &t);
    if (rc != NRT_SUCCESS)
        return runtime_failed(c, rc, TRN_OP_ALLOC, "nrt_tensor_allocate(DEVICE, %s)",
                              "staging for a collective");
    if (!keep(job, t)) {
        b->nrt.tensor_free(&t);
        trn_comm_fail(c, HAL_ERROR_INTERNAL, true, "too many tensors for one collective");
        return HAL_ERROR_INTERNAL;
    }
    *out = t;
    return HAL_OK;
}

/* The bytes [offset, offset + bytes) of a buffer as a tensor of its own: a slice of its device
 * allocation, or, for pinned host memory, a scratch tensor (written now if it is an input). */
static hal_status_t buffer_tensor(trn_comm_t *c, trn_cc_job_t *job, const hal_backend_ptr_t *p,
                                  size_t offset, size_t bytes, bool input, nrt_tensor_t **out)
{
    trn_backend_t *b = c->backend;
    if (p->kind != HAL_MEM_KIND_DEVICE) {
        hal_status_t st = scratch(c, job, bytes, out);
        if (st != HAL_OK || !input)
            return st;
        NRT_STATUS rc = b->nrt.tensor_write(*out, (const char *)p->ptr + offset, 0, bytes);
        return rc == NRT_SUCCESS ? HAL_OK
                                 : runtime_failed(c, rc, TRN_OP_OTHER, "nrt_tensor_write(%s)",
                                                  "a pinned buffer staged for a collective");
    }
    nrt_tensor_t *t = NULL;
    NRT_STATUS rc = b->nrt.tensor_allocate_slice((nrt_tensor_t *)p->cookie, p->offset + offset,
                                                 bytes, TRN_CC_TENSOR_NAME, &t);
    if (rc != NRT_SUCCESS)
        return runtime_failed(c, rc, TRN_OP_OTHER, "nrt_tensor_allocate_slice(%s)",
                              "a collective's buffer");
    if (!keep(job, t)) {
        b->nrt.tensor_free(&t);
        trn_comm_fail(c, HAL_ERROR_INTERNAL, true, "too many tensors for one collective");
        return HAL_ERROR_INTERNAL;
    }
    *out = t;
    return HAL_OK;
}

/* The request's final status (after nrta_is_completed said it completed). */
static NRT_STATUS final_status(trn_comm_t *c, const trn_cc_job_t *job)
{
    if (c->backend->cc_api == TRN_CC_V3)
        return job->ret;
    const nrta_error_t *list = NULL;
    size_t count = 0;
    if (c->tracker != NULL &&
        c->backend->nrt.error_tracker_get_list(c->tracker, &list, &count) == NRT_SUCCESS)
        for (size_t i = count; i > 0; i--)
            if (list[i - 1].seq_id == job->seq)
                return (NRT_STATUS)list[i - 1].error_code;
    return NRT_SUCCESS;
}

static hal_status_t completion_status(NRT_STATUS rc)
{
    if (trn_status_is_device_loss(rc))
        return HAL_ERROR_DEVICE_LOST;
    switch (rc) {
    case NRT_SUCCESS:
        return HAL_OK;
    case NRT_TIMEOUT:
        return HAL_ERROR_TIMEOUT;
    case NRT_INVALID:
        return HAL_ERROR_INVALID_ARGUMENT;
    case NRT_CLOSED:
    case NRT_UNINITIALIZED:
        return HAL_ERROR_BACKEND_SPECIFIC;
    default:
        return HAL_ERROR_REMOTE; /* the collective's peers or their links failed */
    }
}

/* Gives up on a request the runtime still has: its tensors stay until it completed. */
static void abandon(trn_comm_t *c, trn_cc_job_t *job, bool *abandoned)
{
    trn_backend_t *b = c->backend;
    pthread_mutex_lock(&c->lock);
    c->abandoned++;
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_lock(&b->cc_lock);
    job->next = b->graveyard;
    b->graveyard = job;
    pthread_mutex_unlock(&b->cc_lock);
    *abandoned = true;
}

/* One request: prepare, schedule, wait. */
static hal_status_t run_request(trn_comm_t *c, trn_cc_job_t *job, nrt_tensor_t *in,
                                nrt_tensor_t *out, nrt_dtype_t dtype, nrt_op_type_t op,
                                nrt_cc_op_type_t cc_op, const char *what, bool *abandoned)
{
    trn_backend_t *b = c->backend;
    const trn_nrt_t *nrt = &b->nrt;
    nrt_tensor_list_t in_list = { .tensors = &in, .num_tensors = 1 };
    nrt_tensor_list_t out_list = { .tensors = &out, .num_tensors = 1 };
    nrt_cc_comm_t cc = c->cc;
    nrt_cc_context_t *ctx = NULL;
    NRT_STATUS rc = nrt->cc_prepare(&cc, &in_list, &out_list, dtype, op, cc_op, &ctx);
    if (rc != NRT_SUCCESS)
        return runtime_failed(c, rc, TRN_OP_OTHER, "nrta_cc_prepare(%s)", what);
    uint64_t deadline = now_ns() + (uint64_t)c->timeout_ms * 1000000u;
    for (;;) {
        rc = b->cc_api == TRN_CC_V3 ? nrt->cc_schedule_v3(&ctx, 0, &job->ret, &job->seq)
                                    : nrt->cc_schedule(&ctx, 0, c->tracker, &job->seq);
        if (rc != NRT_QUEUE_FULL || now_ns() >= deadline || trn_comm_is_aborted(c))
            break;
        struct timespec ts = { 0, 1000000 }; /* back pressure: the queue drains */
        nanosleep(&ts, NULL);
    }
    if (rc != NRT_SUCCESS) /* the prepared context cannot be freed by any call: it stays */
        return runtime_failed(c, rc, TRN_OP_OTHER, "nrta_cc_schedule(%s)", what);
    /* Poll for completion: yielding the processor for the first 50 us, then sleeping longer and
     * longer (20 us to 1 ms), waking at once for an abort. No peer is watched here: every rank
     * scheduled its part, so the runtime either completes or fails the request; a runtime that
     * hangs meets the timeout. */
    long sleep_ns = 20000;
    uint64_t spin_until = now_ns() + 50000;
    for (;;) {
        bool done = false;
        rc = nrt->is_completed(job->seq, &done);
        if (rc != NRT_SUCCESS) {
            abandon(c, job, abandoned);
            return runtime_failed(c, rc, TRN_OP_OTHER, "nrta_is_completed(%s)", what);
        }
        if (done)
            break;
        if (trn_comm_is_aborted(c)) {
            abandon(c, job, abandoned);
            return trn_comm_latched(c);
        }
        if (now_ns() >= deadline) {
            abandon(c, job, abandoned);
            trn_comm_fail(c, HAL_ERROR_TIMEOUT, true,
                          "the runtime did not complete %s within %u ms (nrta_is_completed)", what,
                          c->timeout_ms);
            return HAL_ERROR_TIMEOUT;
        }
        if (now_ns() < spin_until) {
            sched_yield();
            continue;
        }
        struct pollfd p = { .fd = c->wake[0], .events = POLLIN };
        struct timespec ts = { 0, sleep_ns };
        ppoll(&p, 1, &ts, NULL);
        if (sleep_ns < 1000000)
            sleep_ns *= 2;
    }
    rc = final_status(c, job);
    if (rc == NRT_SUCCESS)
        return HAL_OK;
    char msg[TRN_MSG_MAX];
    trn_status_format(nrt, rc, TRN_OP_OTHER, msg, sizeof(msg), "the runtime's %s", what);
    hal_status_t st = completion_status(rc);
    if (st == HAL_ERROR_DEVICE_LOST)
        trn_device_mark_lost(c->device, msg);
    trn_comm_fail(c, st, true, "%s", msg);
    return st;
}

/* Reads `bytes` of a buffer (device or pinned) at `offset` into host memory. */
static hal_status_t read_buffer(trn_comm_t *c, const hal_backend_ptr_t *p, size_t offset, void *dst,
                                size_t bytes)
{
    if (p->kind != HAL_MEM_KIND_DEVICE) {
        memcpy(dst, (const char *)p->ptr + offset, bytes);
        return HAL_OK;
    }
    NRT_STATUS rc =
        c->backend->nrt.tensor_read((nrt_tensor_t *)p->cookie, dst, p->offset + offset, bytes);
    return rc == NRT_SUCCESS ? HAL_OK
                             : runtime_failed(c, rc, TRN_OP_OTHER, "nrt_tensor_read(%s)",
                                              "a collective's result");
}

static hal_status_t write_buffer(trn_comm_t *c, const hal_backend_ptr_t *p, size_t offset,
                                 const void *src, size_t bytes)
{
    if (p->kind != HAL_MEM_KIND_DEVICE) {
        memcpy((char *)p->ptr + offset, src, bytes);
        return HAL_OK;
    }
    NRT_STATUS rc =
        c->backend->nrt.tensor_write((nrt_tensor_t *)p->cookie, src, p->offset + offset, bytes);
    return rc == NRT_SUCCESS ? HAL_OK
                             : runtime_failed(c, rc, TRN_OP_OTHER, "nrt_tensor_write(%s)",
                                              "a collective's result");
}

static bool overlaps(const hal_backend_ptr_t *a, size_t a_bytes, const hal_backend_ptr_t *b,
                     size_t b_bytes)
{
    return a->kind == HAL_MEM_KIND_DEVICE && b->kind == HAL_MEM_KIND_DEVICE &&
           a->cookie == b->cookie && a->offset < b->offset + b_bytes &&
           b->offset < a->offset + a_bytes;
}

/* ---- step 3: the whole collective ----------------------------------------------------------- */

static hal_status_t execute(trn_comm_t *c, trn_cc_job_t *job, bool *abandoned)
{
    trn_backend_t *b = c->backend;
    const size_t es = trn_dtype_size(job->dtype), n = (size_t)c->nranks;
    size_t send_bytes = job->count * es, recv_bytes = send_bytes;
    if (job->kind == TRN_CC_ALLGATHER)
        recv_bytes = send_bytes * n;
    else if (job->kind == TRN_CC_REDUCE_SCATTER)
        send_bytes = recv_bytes * n;
    nrt_dtype_t ndt = NRT_DTYPE_UINT8;
    bool typed = nrt_dtype_of(job->dtype, &ndt);
    /* The runtime reduces sum, max and min (AVG: its sum, divided here) of the types it has. */
    bool runtime_reduces = typed && job->op != HAL_REDOP_PROD;
    bool gathered = job->kind != TRN_CC_ALLGATHER && !runtime_reduces;
    char what[128];
    snprintf(what, sizeof(what), "%s of %zu bytes, rank %d of %d%s", kind_names[job->kind],
             send_bytes, c->rank, c->nranks, gathered ? ", gathered for a host reduction" : "");

    /* The input. */
    nrt_tensor_t *in = NULL, *out = NULL;
    hal_status_t st = buffer_tensor(c, job, &job->send, 0, send_bytes, true, &in);
    if (st == HAL_OK && !gathered && b->cc_api == TRN_CC_V2 &&
        overlaps(&job->send, send_bytes, &job->recv, recv_bytes)) {
        /* libnrt 2.30 has no in-place collectives: the input is copied aside first. */
        nrt_tensor_t *copy = NULL;
        st = scratch(c, job, send_bytes, &copy);
        NRT_STATUS rc = st == HAL_OK ? b->nrt.tensor_copy(in, 0, copy, 0, send_bytes) : NRT_SUCCESS;
        if (rc != NRT_SUCCESS)
            st = runtime_failed(c, rc, TRN_OP_OTHER, "nrt_tensor_copy(%s)",
                                "an in-place collective's input");
        in = copy;
    }
    /* The output: the receive buffer, or what the gathered inputs go to. */
    size_t gathered_bytes = send_bytes * n;
    if (st == HAL_OK)
        st = gathered ? scratch(c, job, gathered_bytes, &out)
                      : buffer_tensor(c, job, &job->recv, 0, recv_bytes, false, &out);
    if (st == HAL_OK) {
        nrt_op_type_t op = job->op == HAL_REDOP_MAX   ? NRT_OP_MAX
                           : job->op == HAL_REDOP_MIN ? NRT_OP_MIN
                                                      : NRT_OP_ADD;
        nrt_cc_op_type_t cc_op = gathered || job->kind == TRN_CC_ALLGATHER ? NRT_CC_ALLGATHER
                                 : job->kind == TRN_CC_ALLREDUCE           ? NRT_CC_ALLREDUCE
                                                                           : NRT_CC_REDUCESCATTER;
        st = run_request(c, job, in, out, gathered || !typed ? NRT_DTYPE_UINT8 : ndt, op, cc_op,
                         what, abandoned);
    }
    if (st != HAL_OK)
        return st;

    /* What the runtime left to do. */
    unsigned char *host = NULL;
    if (gathered) {
        host = malloc(gathered_bytes + recv_bytes);
        if (host == NULL)
            goto out_of_memory;
        NRT_STATUS rc = b->nrt.tensor_read(out, host, 0, gathered_bytes);
        if (rc != NRT_SUCCESS) {
            free(host);
            return runtime_failed(c, rc, TRN_OP_OTHER, "nrt_tensor_read(%s)", what);
        }
        const void **srcs = malloc(n * sizeof(*srcs));
        if (srcs == NULL) {
            free(host);
            goto out_of_memory;
        }
        /* Rank k's input is at k * send_bytes; reduce-scatter takes this rank's chunk of each. */
        size_t chunk = job->kind == TRN_CC_REDUCE_SCATTER ? (size_t)c->rank * recv_bytes : 0;
        for (size_t k = 0; k < n; k++)
            srcs[k] = host + k * send_bytes + chunk;
        unsigned char *result = host + gathered_bytes;
        trn_reduce(job->dtype, job->op, result, srcs, c->nranks, recv_bytes / es, c->nranks);
        free(srcs);
        st = write_buffer(c, &job->recv, 0, result, recv_bytes);
    } else if (job->recv.kind != HAL_MEM_KIND_DEVICE) {
        /* A pinned receive buffer: its scratch tensor back to it. */
        NRT_STATUS rc = b->nrt.tensor_read(out, job->recv.ptr, 0, recv_bytes);
        if (rc != NRT_SUCCESS)
            return runtime_failed(c, rc, TRN_OP_OTHER, "nrt_tensor_read(%s)", what);
        if (job->op == HAL_REDOP_AVG && job->kind != TRN_CC_ALLGATHER)
            trn_divide(job->dtype, job->recv.ptr, recv_bytes / es, c->nranks);
    } else if (job->op == HAL_REDOP_AVG && job->kind != TRN_CC_ALLGATHER) {
        host = malloc(recv_bytes);
        if (host == NULL)
            goto out_of_memory;
        st = read_buffer(c, &job->recv, 0, host, recv_bytes);
        if (st == HAL_OK) {
            trn_divide(job->dtype, host, recv_bytes / es, c->nranks);
            st = write_buffer(c, &job->recv, 0, host, recv_bytes);
        }
    }
    free(host);
    return st;

out_of_memory:
    trn_comm_fail(c, HAL_ERROR_OUT_OF_HOST_MEMORY, true, "out of host memory after %s", what);
    return HAL_ERROR_OUT_OF_HOST_MEMORY;
}

/* The work task. */
static hal_status_t run_task(hq_stream_t *stream, void *payload, hal_status_t stream_status)
{
    (void)stream;
    trn_cc_job_t *job;
    memcpy(&job, payload, sizeof(job));
    trn_comm_t *c = job->comm;
    trn_backend_t *b = c->backend;
    bool abandoned = false;
    uint64_t seq = 0;
    hal_status_t st = acquire(c, &seq);
    bool held = st == HAL_OK;
    if (st == HAL_OK && stream_status != HAL_OK) {
        /* Earlier work on this stream failed, so the inputs are suspect: give up on the
         * communicator rather than feed the peers bad data; they see HAL_ERROR_REMOTE. */
        st = stream_status;
        trn_comm_fail(c, st, true,
                      "the stream failed before the collective (%s); the communicator is given up",
                      status_name(stream_status));
    }
    if (st == HAL_OK)
        st = handshake(c, job, seq);
    if (st == HAL_OK)
        st = execute(c, job, &abandoned);
    if (held)
        release(c);
    if (!abandoned) {
        free_tensors(b, job);
        free(job);
    }
    if (st != HAL_OK) {
        st = trn_comm_latched(c);
        pthread_mutex_lock(&c->lock);
        hq_task_error("%s", c->message);
        pthread_mutex_unlock(&c->lock);
    }
    return st;
}

/* Queues a collective on the stream (nothing for count 0, on any rank). */
static hal_status_t enqueue(void *comm, void *stream, trn_cc_kind_t kind,
                            const hal_backend_ptr_t *send, const hal_backend_ptr_t *recv,
                            size_t count, hal_dtype_t dtype, hal_redop_t op)
{
    trn_comm_t *c = comm;
    if (count == 0)
        return HAL_OK;
    hal_status_t st = trn_comm_latched(c);
    if (st != HAL_OK)
        return st;
    trn_cc_job_t *job = calloc(1, sizeof(*job));
    if (job == NULL) {
        trn_set_error(c->backend, "calloc(%zu) failed for a collective", sizeof(*job));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    *job = (trn_cc_job_t){ .comm = c,
                           .kind = kind,
                           .send = *send,
                           .recv = *recv,
                           .count = count,
                           .dtype = dtype,
                           .op = op };
    /* Without a slot: it waits for peers. On a failed stream it still runs, to tell them. */
    st = hq_stream_enqueue(stream, run_task, &job, sizeof(job),
                           HQ_TASK_RUN_ON_ERROR | HQ_TASK_NO_SLOT);
    if (st != HAL_OK)
        free(job);
    return st;
}

hal_status_t trn_allreduce(void *comm, void *stream, const hal_backend_ptr_t *send,
                           const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype,
                           hal_redop_t op)
{
    return enqueue(comm, stream, TRN_CC_ALLREDUCE, send, recv, count, dtype, op);
}

hal_status_t trn_allgather(void *comm, void *stream, const hal_backend_ptr_t *send,
                           const hal_backend_ptr_t *recv, size_t sendcount, hal_dtype_t dtype)
{
    return enqueue(comm, stream, TRN_CC_ALLGATHER, send, recv, sendcount, dtype, HAL_REDOP_SUM);
}

hal_status_t trn_reduce_scatter(void *comm, void *stream, const hal_backend_ptr_t *send,
                                const hal_backend_ptr_t *recv, size_t recvcount, hal_dtype_t dtype,
                                hal_redop_t op)
{
    return enqueue(comm, stream, TRN_CC_REDUCE_SCATTER, send, recv, recvcount, dtype, op);
}
