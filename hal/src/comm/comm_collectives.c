/* SPDX-License-Identifier: Apache-2.0 */
/* Collectives front end, operations: argument checks (no side effect on failure), groups, and
 * dispatch — to the backend's native slot when it has one, else to the host engine, run in
 * stream order from a host function (on the device pointers themselves when the host can
 * address them, else on pinned staging copies). */
#include <stdlib.h>
#include <string.h>

#include "hal/layers/layer.h"
#include "hal/src/comm/comm_internal.h"

static const char *const kind_names[] = {
    [HAL_ENGINE_ALLREDUCE] = "hal_allreduce",
    [HAL_ENGINE_BROADCAST] = "hal_broadcast",
    [HAL_ENGINE_REDUCE] = "hal_reduce",
    [HAL_ENGINE_ALLGATHER] = "hal_allgather",
    [HAL_ENGINE_REDUCE_SCATTER] = "hal_reduce_scatter",
    [HAL_ENGINE_ALLTOALL] = "hal_alltoall",
    [HAL_ENGINE_SEND] = "hal_send",
    [HAL_ENGINE_RECV] = "hal_recv",
    [HAL_ENGINE_BARRIER] = "hal_barrier",
};

const char *hal_comm_call_name(hal_engine_kind_t kind)
{
    return kind_names[kind];
}

/* ---- argument checks ---- */

/* Checks that [ptr, ptr + bytes) is memory of the communicator's device or host memory of its
 * backend allocated through the HAL, and resolves it. */
static hal_status_t resolve_buffer(struct hal_comm_s *comm, const void *ptr, size_t bytes,
                                   const char *what, const char *call, hal_backend_ptr_t *out)
{
    memset(out, 0, sizeof(*out));
    if (bytes == 0)
        return HAL_OK;
    const char *name = comm->ops->name;
    if (!ptr)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, name, call, "%s is NULL", what);
    hal_alloc_record_t r;
    if (!hal_mem_map_lookup(ptr, &r))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, name, call,
                         "%s %p is not memory allocated through the HAL", what, ptr);
    if (r.device->backend != comm->device->backend ||
        (r.kind == HAL_MEM_KIND_DEVICE && r.device != comm->device))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, name, call,
                         "%s %p belongs to device %u, the communicator to device %u", what, ptr,
                         r.device->index, comm->device->index);
    size_t offset = (size_t)((const char *)ptr - r.base);
    if (bytes > r.size - offset)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, name, call,
                         "%s [%p, +%zu) runs past the end of its allocation (%p, %zu bytes)", what,
                         ptr, bytes, (void *)r.base, r.size);
    *out = (hal_backend_ptr_t){ .ptr = (void *)ptr,
                                .kind = r.kind,
                                .device = r.device->impl,
                                .base = r.base,
                                .size = r.size,
                                .cookie = r.cookie,
                                .offset = offset };
    return HAL_OK;
}

/* Byte sizes of the send and receive buffers of an operation on this rank. */
static void buffer_sizes(const hal_engine_op_t *op, size_t esize, int nranks, int rank,
                         comm_call_t *c)
{
    size_t n = op->count * esize, all = n * (size_t)nranks;
    c->reads_send = c->writes_recv = true;
    switch (op->kind) {
    case HAL_ENGINE_ALLREDUCE:
        c->send_bytes = c->recv_bytes = n;
        break;
    case HAL_ENGINE_BROADCAST:
        c->reads_send = op->root == rank;
        c->send_bytes = c->reads_send ? n : 0;
        c->recv_bytes = n;
        break;
    case HAL_ENGINE_REDUCE:
        c->writes_recv = op->root == rank;
        c->send_bytes = n;
        c->recv_bytes = c->writes_recv ? n : 0;
        break;
    case HAL_ENGINE_ALLGATHER:
        c->send_bytes = n;
        c->recv_bytes = all;
        break;
    case HAL_ENGINE_REDUCE_SCATTER:
        c->send_bytes = all;
        c->recv_bytes = n;
        break;
    case HAL_ENGINE_ALLTOALL:
        c->send_bytes = c->recv_bytes = all;
        break;
    case HAL_ENGINE_SEND:
        c->send_bytes = n;
        c->recv_bytes = 0;
        c->writes_recv = false;
        break;
    case HAL_ENGINE_RECV:
        c->send_bytes = 0;
        c->reads_send = false;
        c->recv_bytes = n;
        break;
    case HAL_ENGINE_BARRIER:
        c->send_bytes = c->recv_bytes = 0;
        c->reads_send = c->writes_recv = false;
        break;
    }
}

/* NCCL's in-place rules; any other overlap of the two buffers is invalid. */
static hal_status_t check_overlap(const comm_call_t *c, int rank, const char *call)
{
    const char *s = c->send.ptr, *r = c->recv.ptr;
    if (!s || !r || !c->send_bytes || !c->recv_bytes)
        return HAL_OK;
    if (s + c->send_bytes <= r || r + c->recv_bytes <= s)
        return HAL_OK;
    bool in_place;
    switch (c->op.kind) {
    case HAL_ENGINE_ALLGATHER:
        in_place = s == r + (size_t)rank * c->send_bytes;
        break;
    case HAL_ENGINE_REDUCE_SCATTER:
        in_place = r == s + (size_t)rank * c->recv_bytes;
        break;
    default:
        in_place = s == r;
        break;
    }
    if (in_place)
        return HAL_OK;
    return hal_error(HAL_ERROR_INVALID_ARGUMENT, c->comm->ops->name, call,
                     "sendbuf [%p, +%zu) and recvbuf [%p, +%zu) overlap without being in place",
                     (const void *)s, c->send_bytes, (const void *)r, c->recv_bytes);
}

/* Checks everything about a call before anything is enqueued. */
static hal_status_t prepare(hal_comm_t comm, hal_stream_t stream, const hal_engine_op_t *op,
                            comm_call_t *c)
{
    const char *call = kind_names[op->kind];
    HAL_CHECK_COMM(comm, call);
    HAL_CHECK_STREAM(stream, call);
    const char *name = comm->ops->name;
    if (stream->device != comm->device)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, name, call,
                         "the stream is on device %u, the communicator on device %u",
                         stream->device->index, comm->device->index);
    HAL_CHECK(hal_comm_sticky(comm, call));
    size_t esize = 1;
    bool reduces = op->kind == HAL_ENGINE_ALLREDUCE || op->kind == HAL_ENGINE_REDUCE ||
                   op->kind == HAL_ENGINE_REDUCE_SCATTER;
    if (op->kind != HAL_ENGINE_BARRIER) {
        if ((unsigned)op->dtype >= HAL_DTYPE_COUNT)
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, name, call, "unknown dtype %d",
                             (int)op->dtype);
        hal_dtype_get_size(op->dtype, &esize);
        if ((op->dtype == HAL_DTYPE_F8_E4M3 || op->dtype == HAL_DTYPE_F8_E5M2) &&
            !(comm->device->props.capabilities & HAL_DEVICE_CAP_FP8_COLLECTIVES))
            return hal_error(HAL_ERROR_UNSUPPORTED, name, call,
                             "fp8 collectives are not supported (HAL_DEVICE_CAP_FP8_COLLECTIVES)");
    }
    if (reduces) {
        if ((unsigned)op->op >= HAL_REDOP_COUNT)
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, name, call, "unknown operation %d",
                             (int)op->op);
        if (!hal_engine_supports(op->dtype, op->op))
            return hal_error(HAL_ERROR_UNSUPPORTED, name, call,
                             "operation %d is not supported on dtype %d", (int)op->op,
                             (int)op->dtype);
    }
    bool rooted = op->kind == HAL_ENGINE_BROADCAST || op->kind == HAL_ENGINE_REDUCE ||
                  op->kind == HAL_ENGINE_SEND || op->kind == HAL_ENGINE_RECV;
    if (rooted && (op->root < 0 || op->root >= comm->nranks))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, name, call, "%s %d is out of range [0, %d)",
                         op->kind == HAL_ENGINE_SEND || op->kind == HAL_ENGINE_RECV ? "peer"
                                                                                    : "root",
                         op->root, comm->nranks);
    /* An overflow check without the two divisions (tens of cycles on every enqueue); esize *
     * nranks cannot overflow. */
    size_t total_bytes;
    if (__builtin_mul_overflow(op->count, esize * (size_t)comm->nranks, &total_bytes))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, name, call, "count %zu is too large",
                         op->count);
    /* Every field is set below (buffer_sizes sets all four sizes and flags for every kind). */
    c->comm = comm;
    c->stream = stream;
    c->op = *op;
    buffer_sizes(op, esize, comm->nranks, comm->rank, c);
    HAL_CHECK(resolve_buffer(comm, op->sendbuf, c->send_bytes, "sendbuf", call, &c->send));
    HAL_CHECK(resolve_buffer(comm, op->recvbuf, c->recv_bytes, "recvbuf", call, &c->recv));
    HAL_CHECK(check_overlap(c, comm->rank, call));
    /* What the engine sees: unused buffers are NULL. */
    c->op.sendbuf = c->send.ptr;
    c->op.recvbuf = c->recv.ptr;
    return HAL_OK;
}

/* ---- host path ---- */

hal_status_t hal_comm_job_begin(struct hal_comm_s *comm, const hal_engine_op_t *first, size_t n,
                                hal_status_t stream_status, hal_host_collective_t *info)
{
    const char *call = kind_names[first->kind];
    hal_status_t st = hal_comm_wait_init(comm);
    if (st == HAL_OK)
        st = hal_comm_sticky(comm, call);
    if (st == HAL_OK && stream_status != HAL_OK) {
        /* Earlier work on this stream failed, so the inputs are suspect: give up on the
         * communicator rather than feed peers bad data; they see HAL_ERROR_REMOTE. */
        st = hal_error(stream_status, comm->ops->name, call,
                       "the stream failed before the collective (%s); aborting the communicator",
                       hal_status_string(stream_status));
        hal_comm_latch(comm, st);
        hal_engine_abort(comm->engine);
    }
    /* Layers (HAL_LAYERS) see the collective here, where it runs; one that fails it (an injected
     * fault) fails it for this rank, and its peers learn it from the abort. */
    struct hal_backend_s *backend = comm->device->backend;
    *info = (hal_host_collective_t){ .name = call,
                                     .ops = n,
                                     .rank = comm->rank,
                                     .nranks = comm->nranks,
                                     .device_index = comm->device->index,
                                     .device = comm->device->impl,
                                     .count = first->count,
                                     .dtype = first->dtype,
                                     .op = first->op,
                                     .root = first->root };
    if (st == HAL_OK && backend->layers) {
        st = hal_layers_collective_begin(backend, info);
        if (st != HAL_OK) {
            hal_comm_latch(comm, st);
            hal_engine_abort(comm->engine);
        }
    }
    return st;
}

void hal_comm_job_end(struct hal_comm_s *comm, const hal_host_collective_t *info, hal_status_t st)
{
    struct hal_backend_s *backend = comm->device->backend;
    if (backend->layers)
        hal_layers_collective_end(backend, info, st);
    if (st != HAL_OK)
        hal_host_set_error("%s", hal_last_error_message()); /* kept with the stream's error */
    hal_comm_job_finished(comm);
}

/* Runs on the stream (host function): the collective itself. */
static hal_status_t run_job(void *arg, hal_status_t stream_status)
{
    comm_job_t *job = arg;
    struct hal_comm_s *comm = job->comm;
    hal_host_collective_t layer_info;
    hal_status_t st = hal_comm_job_begin(comm, &job->ops[0], job->n, stream_status, &layer_info);
    if (st == HAL_OK) {
        st = hal_engine_run(comm->engine, job->ops, job->n);
        if (st != HAL_OK)
            hal_comm_latch(comm, st);
    }
    hal_comm_job_free(job);
    hal_comm_job_end(comm, &layer_info, st);
    return st;
}

static void run_job_callback(hal_status_t stream_status, void *arg)
{
    run_job(arg, stream_status);
}

/* Staging of one operation for a device the host cannot address: where the engine's view of
 * the buffers lives in pinned memory. */
typedef struct staging {
    void *block;     /* from the comm's staging allocator */
    void *recv_view; /* where the engine leaves the result inside block */
} staging_t;

/* Enqueues the copies into staging before the host function. Only device memory is staged:
 * the engine works on host memory (pinned or shared) where it is. In-place operations stage one
 * region covering both buffers, so the engine sees the same aliasing as the caller. */
static hal_status_t stage_in(comm_call_t *c, hal_engine_op_t *op, staging_t *stage)
{
    struct hal_comm_s *comm = c->comm;
    const char *s = c->send.kind == HAL_MEM_KIND_DEVICE ? c->send.ptr : NULL;
    const char *r = c->recv.kind == HAL_MEM_KIND_DEVICE ? c->recv.ptr : NULL;
    const char *lo = s && r ? (s < r ? s : r) : (s ? s : r);
    if (!lo)
        return HAL_OK;
    const char *s_end = s ? s + c->send_bytes : lo, *r_end = r ? r + c->recv_bytes : lo;
    const char *hi = s_end > r_end ? s_end : r_end;
    bool overlap = s && r && !(s_end <= r || r_end <= s);
    size_t bytes = overlap || !s || !r ? (size_t)(hi - lo) : c->send_bytes + c->recv_bytes;
    HAL_CHECK(hal_allocator_alloc(comm->staging, bytes, c->stream, &stage->block));
    char *block = stage->block;
    if (overlap || !s || !r) {
        if (s)
            op->sendbuf = block + (s - lo);
        if (r)
            op->recvbuf = block + (r - lo);
    } else { /* two separate regions: send first, then receive */
        op->sendbuf = block;
        op->recvbuf = block + c->send_bytes;
    }
    stage->recv_view = r ? op->recvbuf : NULL;
    hal_status_t st = HAL_OK;
    if (s && c->reads_send)
        st = hal_memcpy_async((void *)op->sendbuf, s, c->send_bytes, c->stream);
    if (st != HAL_OK)
        hal_allocator_free(comm->staging, stage->block);
    return st;
}

static hal_status_t stage_out(comm_call_t *c, staging_t *stage)
{
    hal_status_t st = HAL_OK;
    if (stage->recv_view && c->writes_recv && c->recv_bytes)
        st = hal_memcpy_async(c->recv.ptr, stage->recv_view, c->recv_bytes, c->stream);
    /* Stream-ordered: the block is reused only by work enqueued after these copies. */
    if (stage->block)
        hal_allocator_free(c->comm->staging, stage->block);
    return st;
}

/* Attaches IPC handles of the buffers so ranks in other processes can work in place; without
 * them (an export failed) the engine stages through shared memory instead. */
static void export_ipc(struct hal_comm_s *comm, const comm_call_t *c, hal_engine_op_t *op)
{
    void *dev = comm->device->impl;
    bool ok = c->send.ptr || c->recv.ptr;
    if (c->send.ptr)
        ok = ok && comm->ops->mem_ipc_export(dev, &c->send, &op->send_ipc) == HAL_OK;
    if (c->recv.ptr)
        ok = ok && comm->ops->mem_ipc_export(dev, &c->recv, &op->recv_ipc) == HAL_OK;
    op->has_ipc = ok;
}

/* Enqueues calls[0..n) (same communicator and stream) as one host job. */
static hal_status_t enqueue_host(comm_call_t *calls, size_t n)
{
    if (n == 1 && hal_comm_pipeline_takes(&calls[0]))
        return hal_comm_pipeline_enqueue(&calls[0]);
    struct hal_comm_s *comm = calls[0].comm;
    struct hal_stream_s *stream = calls[0].stream;
    const char *call = kind_names[calls[0].op.kind];
    comm_job_t *job = hal_comm_job_alloc(comm, n);
    staging_t *stages = comm->staging ? calloc(n, sizeof(*stages)) : NULL;
    if (!job || (comm->staging && !stages)) {
        if (job)
            hal_comm_job_free(job);
        free(stages);
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, comm->ops->name, call, "out of host memory");
    }
    hal_status_t st = HAL_OK;
    for (size_t i = 0; i < n; i++) {
        job->ops[i] = calls[i].op;
        /* The engine may still be starting (non-blocking init): then export to be safe. */
        hal_engine_comm_t *engine = __atomic_load_n(&comm->engine, __ATOMIC_ACQUIRE);
        if (comm->use_ipc && (!engine || hal_engine_wants_ipc(engine, &job->ops[i])))
            export_ipc(comm, &calls[i], &job->ops[i]);
        if (stages) {
            st = stage_in(&calls[i], &job->ops[i], &stages[i]);
            if (st != HAL_OK)
                break;
        }
    }
    if (st == HAL_OK) {
        hal_comm_job_started(comm);
        if (comm->ops->stream_launch_host_fn)
            st = comm->ops->stream_launch_host_fn(stream->impl, run_job, job);
        else
            st = HAL_SLOT_CALL(comm->ops, stream_add_callback, stream->impl, run_job_callback, job);
        if (st != HAL_OK) {
            hal_comm_job_finished(comm);
            st = hal_finish(st, comm->ops, call);
            hal_comm_job_free(job);
        }
    } else {
        hal_comm_job_free(job);
    }
    /* Copies back (or, after a failure, just the staging blocks). */
    for (size_t i = 0; stages && i < n; i++) {
        if (!stages[i].block)
            continue;
        if (st == HAL_OK) {
            hal_status_t out = stage_out(&calls[i], &stages[i]);
            /* The job may already have run and failed the stream (a peer disagreed, an abort):
             * the collective was enqueued, and the stream reports that error; only a copy that
             * could not be enqueued on a healthy stream fails the call. */
            if (out != HAL_OK && HAL_SLOT_CALL(comm->ops, stream_query, stream->impl) != out)
                st = out;
        } else {
            hal_allocator_free(comm->staging, stages[i].block);
        }
    }
    free(stages);
    return st;
}

/* ---- native path ---- */

static bool has_native(const comm_call_t *c)
{
    const hal_backend_ops_t *ops = c->comm->ops;
    if (!ops->comm_init)
        return false;
    /* Whether the backend runs this communicator's collectives is known once its init finished:
     * a collective issued during a non-blocking init waits for it here, so that every rank
     * takes the same path. */
    hal_comm_wait_init(c->comm);
    if (!hal_comm_native(c->comm))
        return false;
    switch (c->op.kind) {
    case HAL_ENGINE_ALLREDUCE:
        return ops->allreduce;
    case HAL_ENGINE_BROADCAST:
        return ops->broadcast;
    case HAL_ENGINE_REDUCE:
        return ops->reduce;
    case HAL_ENGINE_ALLGATHER:
        return ops->allgather;
    case HAL_ENGINE_REDUCE_SCATTER:
        return ops->reduce_scatter;
    case HAL_ENGINE_ALLTOALL:
        return ops->alltoall;
    case HAL_ENGINE_SEND:
        return ops->send;
    case HAL_ENGINE_RECV:
        return ops->recv;
    case HAL_ENGINE_BARRIER:
        return false; /* an allreduce of nothing would do, but the engine's barrier is exact */
    }
    return false;
}

static hal_status_t call_native(const comm_call_t *c)
{
    const hal_backend_ops_t *ops = c->comm->ops;
    void *nc = hal_comm_native(c->comm), *s = c->stream->impl;
    const hal_engine_op_t *op = &c->op;
    hal_status_t st = HAL_ERROR_INTERNAL;
    switch (op->kind) {
    case HAL_ENGINE_ALLREDUCE:
        st = ops->allreduce(nc, s, &c->send, &c->recv, op->count, op->dtype, op->op);
        break;
    case HAL_ENGINE_BROADCAST:
        st = ops->broadcast(nc, s, &c->send, &c->recv, op->count, op->dtype, op->root);
        break;
    case HAL_ENGINE_REDUCE:
        st = ops->reduce(nc, s, &c->send, &c->recv, op->count, op->dtype, op->op, op->root);
        break;
    case HAL_ENGINE_ALLGATHER:
        st = ops->allgather(nc, s, &c->send, &c->recv, op->count, op->dtype);
        break;
    case HAL_ENGINE_REDUCE_SCATTER:
        st = ops->reduce_scatter(nc, s, &c->send, &c->recv, op->count, op->dtype, op->op);
        break;
    case HAL_ENGINE_ALLTOALL:
        st = ops->alltoall(nc, s, &c->send, &c->recv, op->count, op->dtype);
        break;
    case HAL_ENGINE_SEND:
        st = ops->send(nc, s, &c->send, op->count, op->dtype, op->root);
        break;
    case HAL_ENGINE_RECV:
        st = ops->recv(nc, s, &c->recv, op->count, op->dtype, op->root);
        break;
    case HAL_ENGINE_BARRIER:
        break;
    }
    if (st == HAL_OK)
        hal_comm_note_native(c->comm, c->stream);
    return hal_finish(st, ops, kind_names[op->kind]);
}

/* ---- groups ---- */

static _Thread_local int group_depth;
static _Thread_local comm_call_t *group_calls;
static _Thread_local size_t group_count, group_capacity;

hal_status_t hal_group_begin(void)
{
    group_depth++;
    return HAL_OK;
}

/* Enqueues every grouped call: native ones between the backends' group brackets, host ones
 * batched per (communicator, stream) in order of first appearance. */
static hal_status_t flush_group(comm_call_t *calls, size_t n)
{
    hal_status_t first = HAL_OK;
    bool *done = calloc(n ? n : 1, sizeof(*done));
    comm_call_t *batch = malloc((n ? n : 1) * sizeof(*batch));
    if (!done || !batch) {
        free(done);
        free(batch);
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, NULL, "hal_group_end", "out of host memory");
    }
    for (size_t i = 0; i < n; i++) {
        if (done[i] || !has_native(&calls[i]))
            continue;
        const hal_backend_ops_t *ops = calls[i].comm->ops;
        void *backend_impl = calls[i].comm->device->backend->impl;
        if (ops->group_begin)
            ops->group_begin(backend_impl);
        for (size_t j = i; j < n; j++) {
            if (!done[j] && has_native(&calls[j]) && calls[j].comm->ops == ops) {
                hal_status_t st = call_native(&calls[j]);
                if (st != HAL_OK && first == HAL_OK)
                    first = st;
                done[j] = true;
            }
        }
        if (ops->group_end) {
            hal_status_t st = ops->group_end(backend_impl);
            if (st != HAL_OK && first == HAL_OK)
                first = hal_finish(st, ops, "hal_group_end");
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (done[i])
            continue;
        size_t m = 0;
        for (size_t j = i; j < n; j++) {
            if (!done[j] && calls[j].comm == calls[i].comm && calls[j].stream == calls[i].stream) {
                batch[m++] = calls[j];
                done[j] = true;
            }
        }
        hal_status_t st = enqueue_host(batch, m);
        if (st != HAL_OK && first == HAL_OK)
            first = st;
    }
    free(done);
    free(batch);
    return first;
}

hal_status_t hal_group_end(void)
{
    if (group_depth == 0)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, "hal_group_end",
                         "hal_group_end without a matching hal_group_begin");
    if (--group_depth > 0)
        return HAL_OK;
    comm_call_t *calls = group_calls;
    size_t n = group_count;
    group_calls = NULL;
    group_count = group_capacity = 0;
    hal_status_t st = n ? flush_group(calls, n) : HAL_OK;
    free(calls);
    return st;
}

/* Checks one call and enqueues it, or adds it to the thread's open group. */
static hal_status_t submit(hal_comm_t comm, hal_stream_t stream, const hal_engine_op_t *op)
{
    comm_call_t c;
    HAL_CHECK(prepare(comm, stream, op, &c));
    if (group_depth > 0) {
        if (group_count == group_capacity) {
            size_t cap = group_capacity ? group_capacity * 2 : 16;
            comm_call_t *grown = realloc(group_calls, cap * sizeof(*grown));
            if (!grown)
                return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, comm->ops->name,
                                 kind_names[op->kind], "out of host memory");
            group_calls = grown;
            group_capacity = cap;
        }
        group_calls[group_count++] = c;
        return HAL_OK;
    }
    if (has_native(&c))
        return call_native(&c);
    return enqueue_host(&c, 1);
}

/* ---- the public calls ---- */

hal_status_t hal_allreduce(const void *sendbuf, void *recvbuf, size_t count, hal_dtype_t dtype,
                           hal_redop_t op, hal_comm_t comm, hal_stream_t stream)
{
    hal_engine_op_t o = { .kind = HAL_ENGINE_ALLREDUCE,
                          .sendbuf = sendbuf,
                          .recvbuf = recvbuf,
                          .count = count,
                          .dtype = dtype,
                          .op = op };
    return submit(comm, stream, &o);
}

hal_status_t hal_broadcast(const void *sendbuf, void *recvbuf, size_t count, hal_dtype_t dtype,
                           int root, hal_comm_t comm, hal_stream_t stream)
{
    hal_engine_op_t o = { .kind = HAL_ENGINE_BROADCAST,
                          .sendbuf = sendbuf,
                          .recvbuf = recvbuf,
                          .count = count,
                          .dtype = dtype,
                          .root = root };
    return submit(comm, stream, &o);
}

hal_status_t hal_reduce(const void *sendbuf, void *recvbuf, size_t count, hal_dtype_t dtype,
                        hal_redop_t op, int root, hal_comm_t comm, hal_stream_t stream)
{
    hal_engine_op_t o = { .kind = HAL_ENGINE_REDUCE,
                          .sendbuf = sendbuf,
                          .recvbuf = recvbuf,
                          .count = count,
                          .dtype = dtype,
                          .op = op,
                          .root = root };
    return submit(comm, stream, &o);
}

hal_status_t hal_allgather(const void *sendbuf, void *recvbuf, size_t sendcount, hal_dtype_t dtype,
                           hal_comm_t comm, hal_stream_t stream)
{
    hal_engine_op_t o = { .kind = HAL_ENGINE_ALLGATHER,
                          .sendbuf = sendbuf,
                          .recvbuf = recvbuf,
                          .count = sendcount,
                          .dtype = dtype };
    return submit(comm, stream, &o);
}

hal_status_t hal_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                hal_dtype_t dtype, hal_redop_t op, hal_comm_t comm,
                                hal_stream_t stream)
{
    hal_engine_op_t o = { .kind = HAL_ENGINE_REDUCE_SCATTER,
                          .sendbuf = sendbuf,
                          .recvbuf = recvbuf,
                          .count = recvcount,
                          .dtype = dtype,
                          .op = op };
    return submit(comm, stream, &o);
}

hal_status_t hal_alltoall(const void *sendbuf, void *recvbuf, size_t count, hal_dtype_t dtype,
                          hal_comm_t comm, hal_stream_t stream)
{
    hal_engine_op_t o = { .kind = HAL_ENGINE_ALLTOALL,
                          .sendbuf = sendbuf,
                          .recvbuf = recvbuf,
                          .count = count,
                          .dtype = dtype };
    return submit(comm, stream, &o);
}

hal_status_t hal_send(const void *sendbuf, size_t count, hal_dtype_t dtype, int peer,
                      hal_comm_t comm, hal_stream_t stream)
{
    hal_engine_op_t o = {
        .kind = HAL_ENGINE_SEND, .sendbuf = sendbuf, .count = count, .dtype = dtype, .root = peer
    };
    return submit(comm, stream, &o);
}

hal_status_t hal_recv(void *recvbuf, size_t count, hal_dtype_t dtype, int peer, hal_comm_t comm,
                      hal_stream_t stream)
{
    hal_engine_op_t o = {
        .kind = HAL_ENGINE_RECV, .recvbuf = recvbuf, .count = count, .dtype = dtype, .root = peer
    };
    return submit(comm, stream, &o);
}

hal_status_t hal_barrier(hal_comm_t comm, hal_stream_t stream)
{
    hal_engine_op_t o = { .kind = HAL_ENGINE_BARRIER, .dtype = HAL_DTYPE_U8 };
    return submit(comm, stream, &o);
}
