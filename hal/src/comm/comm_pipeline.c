/* SPDX-License-Identifier: Apache-2.0 */
/* Collectives front end, the staging pipeline: a host-staged collective on device memory the
 * host cannot address, cut by element ranges into chunks that flow through PIPE_SLOTS pinned
 * staging slots, three chunks at a time on three threads:
 *
 *   copy-in stream   (the backend's)  device-to-host copy of chunk k+1 into its slot
 *   caller's stream  (host function) the engine's exchange and reduction of chunk k, in its slot
 *   copy-out stream  (the backend's)  host-to-device copy of chunk k-1 out of its slot
 *
 * The copy streams, an event and the slots belong to the communicator and are made by its first
 * pipelined collective. Chunks are numbered across all of its collectives in enqueue order (one
 * collective's tasks are queued at a time), and chunk g uses slot g % PIPE_SLOTS. Host functions
 * on the copy streams hold each copy back until it may run: a "gate" before the copy-in of chunk
 * g waits until the copy-out of chunk g - PIPE_SLOTS left its slot, a gate before the copy-out
 * of chunk g until the engine finished chunk g; a "done" function behind each chunk's copies
 * counts it and notes a failure. The engine runs chunks in number order, one at a time.
 *
 * Stream order: the collective is one operation of the caller's stream. The copy-in stream waits
 * for an event recorded on the caller's stream where the collective was enqueued, and the host
 * function returns only after the copy-out of its last chunk, so later work on the caller's
 * stream sees every result.
 *
 * Results: chunk k is the same collective on elements [k * per_chunk, ...) of every rank's block
 * (the whole buffer, or each rank's part for allgather, reduce_scatter and alltoall), staged in
 * place. The engine reduces every element over the ranks in rank order whatever the count, so
 * the results are bit for bit those of the collective in one piece.
 *
 * Failures: the first failure of a copy, of the engine or of the collective's start (the
 * stream's or the communicator's earlier error, a layer's injected fault) stops the pipeline for
 * good: it is latched on the communicator and the engine is aborted (peers see
 * HAL_ERROR_REMOTE), the gates then fail their streams so queued copies are skipped, and the host
 * function waits for the copies of its chunks to drain before it fails the caller's stream. A
 * collective enqueued after that is refused with the failure. A wait lasts at most as long as the
 * engine's (bounded by the communicator's timeout) and the copies in flight, provided the
 * communicator's collectives reach their streams in the order they were enqueued (hal_comm.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/src/comm/comm_internal.h"

/* Slots: one chunk copied in, one in the engine, one copied out. */
#define PIPE_SLOTS 3
/* Staged bytes of one chunk (every rank's part together for the blocked kinds). Small enough
 * that a chunk is still in the caches between its copy-in, the engine and its copy-out. */
#define PIPE_DEFAULT_CHUNK ((size_t)1 << 20)
#define PIPE_MIN_CHUNK     ((size_t)4 << 10)
#define PIPE_MAX_CHUNK     ((size_t)1 << 30)
/* Chunk boundaries inside a rank's block are multiples of this many bytes. */
#define PIPE_ALIGN 64

struct comm_pipe {
    const hal_backend_ops_t *ops;
    void *device;             /* the backend's device object */
    void *copy_in, *copy_out; /* the backend's streams */
    void *start;              /* event: the caller's stream reached the collective */
    hal_backend_ptr_t slot[PIPE_SLOTS];
    size_t slot_bytes;

    pthread_mutex_t enqueue; /* one collective's tasks at a time: numbers follow queue order */
    uint64_t queued;         /* chunks numbered so far (under enqueue) */
    uint64_t in_opened;      /* copy-in gates passed (the copy-in stream's worker only) */
    uint64_t out_opened;     /* copy-out gates passed (the copy-out stream's worker only) */

    pthread_mutex_t lock; /* guards what follows */
    pthread_cond_t cond;
    uint64_t in_done;      /* chunks copied in */
    uint64_t ran;          /* chunks the engine finished */
    uint64_t out_done;     /* chunks copied out */
    hal_status_t failed;   /* the first failure; HAL_OK while the pipeline works */
    void *failed_stream;   /* the copy stream whose work failed first, if one did */
    uint64_t failed_chunk; /* its chunk */
};

/* How a collective is cut: `chunks` chunks of `per_chunk` elements of each of `blocks` blocks
 * (the last one shorter), out of `count` elements per block. */
typedef struct pipe_geom {
    size_t esize, count, per_chunk, chunks;
    int blocks;
} pipe_geom_t;

/* A pipelined collective, for its host function. */
typedef struct pipe_job {
    struct hal_comm_s *comm;
    hal_engine_op_t op; /* as the caller gave it (buffers NULL where unused) */
    hal_backend_ptr_t send, recv;
    bool stage_send, stage_recv; /* copied through the slots, else used where they are */
    pipe_geom_t geom;
    uint64_t first; /* number of its first chunk (staged jobs) */
} pipe_job_t;

hal_status_t hal_comm_pipeline_chunk(const char *call, size_t *chunk)
{
    const char *env = getenv("HAL_COMM_STAGING_CHUNK");
    *chunk = PIPE_DEFAULT_CHUNK;
    if (!env || !*env)
        return HAL_OK;
    unsigned long long v = 0;
    if (!hal_comm_parse_env_count(env, &v) ||
        (v != 0 && (v < PIPE_MIN_CHUNK || v > PIPE_MAX_CHUNK)))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "HAL_COMM_STAGING_CHUNK=\"%s\" is invalid: expected bytes, 0 (no "
                         "pipeline) or %zu to %zu",
                         env, PIPE_MIN_CHUNK, PIPE_MAX_CHUNK);
    *chunk = (size_t)v;
    return HAL_OK;
}

/* ---- geometry ---- */

static bool blocked(hal_engine_kind_t kind)
{
    return kind == HAL_ENGINE_ALLGATHER || kind == HAL_ENGINE_REDUCE_SCATTER ||
           kind == HAL_ENGINE_ALLTOALL;
}

/* Cuts op into chunks of at most chunk_bytes staged bytes; chunks == 0 when no chunk holds an
 * element of every block. */
static void geometry(const hal_engine_op_t *op, int nranks, size_t chunk_bytes, pipe_geom_t *g)
{
    hal_dtype_get_size(op->dtype, &g->esize);
    g->blocks = blocked(op->kind) ? nranks : 1;
    g->count = op->count;
    size_t per = chunk_bytes / ((size_t)g->blocks * g->esize);
    size_t align = PIPE_ALIGN / g->esize;
    per = per >= align ? per / align * align : per;
    g->per_chunk = per;
    g->chunks = per ? (g->count + per - 1) / per : 0;
}

/* Elements of chunk k in each block. */
static size_t chunk_len(const pipe_geom_t *g, size_t k)
{
    size_t first = k * g->per_chunk;
    return g->count - first < g->per_chunk ? g->count - first : g->per_chunk;
}

bool hal_comm_pipeline_takes(const comm_call_t *c)
{
    struct hal_comm_s *comm = c->comm;
    /* Not the memory kinds of the buffers, which peers do not know: every rank must cut the
     * collective alike (see run_pipeline for host memory). */
    if (comm->host_addressable || !comm->pipe_chunk || !comm->ops->stream_launch_host_fn ||
        (c->send_bytes > c->recv_bytes ? c->send_bytes : c->recv_bytes) <= comm->pipe_chunk)
        return false;
    switch (c->op.kind) {
    case HAL_ENGINE_ALLREDUCE:
    case HAL_ENGINE_BROADCAST:
    case HAL_ENGINE_REDUCE:
    case HAL_ENGINE_ALLGATHER:
    case HAL_ENGINE_REDUCE_SCATTER:
    case HAL_ENGINE_ALLTOALL:
        break;
    default:
        return false;
    }
    pipe_geom_t g;
    geometry(&c->op, comm->nranks, comm->pipe_chunk, &g);
    return g.chunks > 1;
}

/* The engine's operation on chunk k: a staged buffer is the slot (in place, one block per rank
 * for the blocked kinds, this rank's at rank * len), another one the chunk's elements where the
 * caller has them. */
static void chunk_op(const pipe_job_t *j, size_t k, unsigned char *slot, hal_engine_op_t *out)
{
    const hal_engine_op_t *op = &j->op;
    size_t len = chunk_len(&j->geom, k), off = k * j->geom.per_chunk * j->geom.esize;
    *out = (hal_engine_op_t){
        .kind = op->kind, .count = len, .dtype = op->dtype, .op = op->op, .root = op->root
    };
    unsigned char *send = slot, *recv = slot;
    unsigned char *mine = slot + (size_t)j->comm->rank * len * j->geom.esize;
    if (op->kind == HAL_ENGINE_ALLGATHER)
        send = mine;
    else if (op->kind == HAL_ENGINE_REDUCE_SCATTER)
        recv = mine;
    if (op->sendbuf)
        out->sendbuf = j->stage_send ? send : (const unsigned char *)op->sendbuf + off;
    if (op->recvbuf)
        out->recvbuf = j->stage_recv ? recv : (unsigned char *)op->recvbuf + off;
}

/* One copy of chunk k: `bytes` between the caller's buffer at user_off and the slot at
 * slot_off. */
typedef struct pipe_piece {
    size_t user_off, slot_off, bytes;
} pipe_piece_t;

/* The copies of chunk k into the slot (in) or out of it; returns how many (at most one per
 * block), filling piece i when i is given (i < count). */
static int chunk_pieces(const pipe_job_t *j, size_t k, bool in, int i, pipe_piece_t *piece)
{
    const pipe_geom_t *g = &j->geom;
    const hal_engine_op_t *op = &j->op;
    size_t len = chunk_len(g, k), es = g->esize, off = k * g->per_chunk;
    int me = j->comm->rank;
    if (in ? !j->stage_send || !j->op.sendbuf : !j->stage_recv || !j->op.recvbuf)
        return 0;
    /* Data the engine leaves where the caller's buffer already has it is not copied back. */
    bool in_place =
        j->send.ptr == j->recv.ptr ||
        (op->kind == HAL_ENGINE_ALLGATHER &&
         (const char *)j->send.ptr == (const char *)j->recv.ptr + (size_t)me * g->count * es);
    int n = 1, block = -1; /* -1: the whole chunk, else one block of it */
    switch (op->kind) {
    case HAL_ENGINE_BROADCAST:
        if (!in && in_place)
            return 0; /* the root's result is its input */
        break;
    case HAL_ENGINE_ALLGATHER:
        if (in)
            block = me;
        else
            n = g->blocks;
        break;
    case HAL_ENGINE_REDUCE_SCATTER:
        if (in)
            n = g->blocks;
        else
            block = me;
        break;
    case HAL_ENGINE_ALLTOALL:
        n = g->blocks;
        break;
    default:
        break;
    }
    if (i < 0 || i >= n)
        return n;
    int b = n > 1 ? i : block;
    if (n > 1 && !in && in_place && op->kind == HAL_ENGINE_ALLGATHER && b == me) {
        piece->bytes = 0; /* this rank's own block */
        return n;
    }
    /* A chunk's part of block b sits at b * count + off in the caller's buffer (the other side
     * of the staged op: the recv side of reduce_scatter, the send side of allgather, has one
     * block) and at b * len in the slot. */
    bool user_blocked = (op->kind == HAL_ENGINE_ALLGATHER && !in) ||
                        (op->kind == HAL_ENGINE_REDUCE_SCATTER && in) ||
                        op->kind == HAL_ENGINE_ALLTOALL;
    size_t ub = b >= 0 && user_blocked ? (size_t)b : 0, sb = b >= 0 ? (size_t)b : 0;
    piece->user_off = (ub * g->count + off) * es;
    piece->slot_off = sb * len * es;
    piece->bytes = len * es;
    return n;
}

/* ---- the pipeline's state ---- */

static void pipe_lock(comm_pipe_t *p)
{
    pthread_mutex_lock(&p->lock);
}

static void pipe_unlock_wake(comm_pipe_t *p)
{
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

/* Stops the pipeline for good with st (the first failure wins). */
static void pipe_stop(comm_pipe_t *p, hal_status_t st)
{
    pipe_lock(p);
    if (p->failed == HAL_OK)
        p->failed = st;
    pipe_unlock_wake(p);
}

/* What a gate returns once the pipeline stopped: the failure, which the copy stream latches so
 * that its queued copies are skipped. */
static hal_status_t gate_result(hal_status_t failed)
{
    if (failed != HAL_OK)
        hal_host_set_error("the staging pipeline stopped (%s)", hal_status_string(failed));
    return failed;
}

/* Copy-in gate of the next chunk: its slot is free once the copy-out of the chunk PIPE_SLOTS
 * earlier finished. */
static hal_status_t gate_in(void *arg, hal_status_t stream_status)
{
    comm_pipe_t *p = arg;
    uint64_t g = p->in_opened++;
    pipe_lock(p);
    while (p->failed == HAL_OK && p->out_done + PIPE_SLOTS <= g)
        pthread_cond_wait(&p->cond, &p->lock);
    hal_status_t failed = p->failed;
    pthread_mutex_unlock(&p->lock);
    return stream_status != HAL_OK ? stream_status : gate_result(failed);
}

/* Copy-out gate of the next chunk: its results are in the slot once the engine finished it. */
static hal_status_t gate_out(void *arg, hal_status_t stream_status)
{
    comm_pipe_t *p = arg;
    uint64_t g = p->out_opened++;
    pipe_lock(p);
    while (p->failed == HAL_OK && p->ran <= g)
        pthread_cond_wait(&p->cond, &p->lock);
    hal_status_t failed = p->failed;
    pthread_mutex_unlock(&p->lock);
    return stream_status != HAL_OK ? stream_status : gate_result(failed);
}

/* Behind a chunk's copies: counts it; a failed copy (or a gate that found the pipeline stopped)
 * has latched on the stream, and the first such failure stops the pipeline. */
static void chunk_done(comm_pipe_t *p, void *stream, uint64_t *counter, hal_status_t status)
{
    pipe_lock(p);
    if (status != HAL_OK && p->failed == HAL_OK) {
        p->failed = status;
        p->failed_stream = stream;
        p->failed_chunk = *counter;
    }
    (*counter)++;
    pipe_unlock_wake(p);
}

static hal_status_t done_in(void *arg, hal_status_t stream_status)
{
    comm_pipe_t *p = arg;
    chunk_done(p, p->copy_in, &p->in_done, stream_status);
    return HAL_OK;
}

static hal_status_t done_out(void *arg, hal_status_t stream_status)
{
    comm_pipe_t *p = arg;
    chunk_done(p, p->copy_out, &p->out_done, stream_status);
    return HAL_OK;
}

/* ---- the host function ---- */

/* Reports the pipeline's failure as this collective's: a copy's, with the detail its stream
 * latched, or the one that stopped it. */
static hal_status_t report_stop(comm_pipe_t *p, const pipe_job_t *j, const char *call)
{
    pipe_lock(p);
    hal_status_t failed = p->failed;
    void *stream = p->failed_stream;
    uint64_t chunk = p->failed_chunk;
    pthread_mutex_unlock(&p->lock);
    if (!stream)
        return hal_error(failed, j->comm->ops->name, call,
                         "the staging pipeline of the communicator stopped earlier (%s)",
                         hal_status_string(failed));
    hal_backend_error(p->ops->stream_query(stream), p->ops, "memcpy_async");
    char detail[HAL_COMM_MESSAGE_MAX];
    snprintf(detail, sizeof(detail), "%s", hal_last_error_message());
    bool own = chunk >= j->first && chunk < j->first + j->geom.chunks;
    return hal_error(failed, j->comm->ops->name, call,
                     "the %s copy of %s chunk %llu of %zu failed (%s); aborting the communicator",
                     stream == p->copy_in ? "device-to-host" : "host-to-device",
                     own ? "staged" : "an earlier collective's",
                     (unsigned long long)(own ? chunk - j->first : chunk), j->geom.chunks, detail);
}

/* Waits until chunk g is copied in and the engine finished every chunk before it; returns the
 * pipeline's failure if it stopped meanwhile. */
static hal_status_t wait_turn(comm_pipe_t *p, uint64_t g)
{
    pipe_lock(p);
    while (p->failed == HAL_OK && (p->in_done <= g || p->ran < g))
        pthread_cond_wait(&p->cond, &p->lock);
    hal_status_t failed = p->failed;
    pthread_mutex_unlock(&p->lock);
    return failed;
}

/* The engine on chunk g (k of the job) once it is in its slot. */
static hal_status_t run_chunk(comm_pipe_t *p, const pipe_job_t *j, uint64_t g, const char *call)
{
    struct hal_comm_s *comm = j->comm;
    hal_status_t st = HAL_OK;
    if (p && wait_turn(p, g) != HAL_OK) {
        st = report_stop(p, j, call);
        hal_comm_latch(comm, st);
        hal_engine_abort(comm->engine);
        return st;
    }
    hal_engine_op_t chunk;
    chunk_op(j, (size_t)(g - j->first), p ? p->slot[g % PIPE_SLOTS].ptr : NULL, &chunk);
    st = hal_engine_run(comm->engine, &chunk, 1);
    if (st != HAL_OK) {
        hal_comm_latch(comm, st); /* the engine failed its peers itself */
        return st;
    }
    if (p) {
        pipe_lock(p);
        p->ran = g + 1;
        pipe_unlock_wake(p);
    }
    return HAL_OK;
}

/* Runs on the caller's stream (host function): the engine on each chunk as it arrives. A job
 * that stages nothing (host memory: the other ranks cut the collective alike all the same) runs
 * its chunks where the buffers are. */
static hal_status_t run_pipeline(void *arg, hal_status_t stream_status)
{
    pipe_job_t *j = arg;
    struct hal_comm_s *comm = j->comm;
    comm_pipe_t *p = j->stage_send || j->stage_recv ? comm->pipe : NULL;
    const char *call = hal_comm_call_name(j->op.kind);
    uint64_t end = j->first + j->geom.chunks;
    hal_host_collective_t info;
    hal_status_t st = hal_comm_job_begin(comm, &j->op, 1, stream_status, &info);
    for (uint64_t g = j->first; st == HAL_OK && g < end; g++)
        st = run_chunk(p, j, g, call);
    if (p) {
        if (st != HAL_OK)
            pipe_stop(p, st);
        /* The copies out of this collective's chunks (or their skipping) end before it does. */
        pipe_lock(p);
        while (p->out_done < end)
            pthread_cond_wait(&p->cond, &p->lock);
        bool stopped = p->failed != HAL_OK;
        pthread_mutex_unlock(&p->lock);
        if (st == HAL_OK && stopped) {
            st = report_stop(p, j, call);
            hal_comm_latch(comm, st);
            hal_engine_abort(comm->engine); /* this rank's next collectives would fail */
        }
    }
    free(j);
    hal_comm_job_end(comm, &info, st);
    return st;
}

/* ---- setup and teardown ---- */

static void pipe_free(comm_pipe_t *p)
{
    const hal_backend_ops_t *ops = p->ops;
    /* Streams first: they drain, and their host functions use the rest. */
    if (p->copy_in)
        ops->stream_destroy(p->copy_in);
    if (p->copy_out)
        ops->stream_destroy(p->copy_out);
    if (p->start)
        ops->event_destroy(p->start);
    for (int s = 0; s < PIPE_SLOTS; s++)
        if (p->slot[s].ptr)
            ops->mem_free(p->device, HAL_MEM_KIND_HOST_PINNED, p->slot[s].ptr, p->slot[s].cookie);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->enqueue);
    free(p);
    hal_host_take_error(); /* the streams' latched errors were reported already */
}

static hal_status_t pipe_create(struct hal_comm_s *comm, const char *call, comm_pipe_t **out)
{
    const hal_backend_ops_t *ops = comm->ops;
    comm_pipe_t *p = calloc(1, sizeof(*p));
    if (!p)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, ops->name, call, "out of host memory");
    pthread_mutex_init(&p->enqueue, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->ops = ops;
    p->device = comm->device->impl;
    p->slot_bytes = comm->pipe_chunk;
    hal_status_t st = ops->stream_create(p->device, 0, &p->copy_in);
    if (st == HAL_OK)
        st = ops->stream_create(p->device, 0, &p->copy_out);
    if (st == HAL_OK)
        st = ops->event_create(p->device, HAL_EVENT_FLAG_NONE, &p->start);
    for (int s = 0; s < PIPE_SLOTS && st == HAL_OK; s++) {
        void *ptr = NULL, *cookie = NULL;
        st = ops->mem_alloc(p->device, HAL_MEM_KIND_HOST_PINNED, p->slot_bytes, 0, &ptr, &cookie);
        if (st == HAL_OK)
            p->slot[s] = (hal_backend_ptr_t){ .ptr = ptr,
                                              .kind = HAL_MEM_KIND_HOST_PINNED,
                                              .device = p->device,
                                              .base = ptr,
                                              .size = p->slot_bytes,
                                              .cookie = cookie };
    }
    if (st != HAL_OK) {
        st = hal_backend_error(st, ops, call);
        pipe_free(p);
        return st;
    }
    *out = p;
    return HAL_OK;
}

/* The communicator's pipeline, made on first use. */
static hal_status_t pipe_get(struct hal_comm_s *comm, const char *call, comm_pipe_t **out)
{
    comm_pipe_t *p = __atomic_load_n(&comm->pipe, __ATOMIC_ACQUIRE);
    hal_status_t st = HAL_OK;
    if (!p) {
        pthread_mutex_lock(&comm->lock);
        p = comm->pipe;
        if (!p) {
            st = pipe_create(comm, call, &p);
            if (st == HAL_OK)
                __atomic_store_n(&comm->pipe, p, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&comm->lock);
    }
    *out = p;
    return st;
}

void hal_comm_pipeline_destroy(struct hal_comm_s *comm)
{
    if (comm->pipe)
        pipe_free(comm->pipe);
    comm->pipe = NULL;
}

/* ---- enqueue ---- */

/* Queues one chunk's copies between its gate and its done function on a copy stream. */
static hal_status_t queue_chunk(comm_pipe_t *p, const pipe_job_t *j, size_t k, bool in)
{
    const hal_backend_ops_t *ops = p->ops;
    void *stream = in ? p->copy_in : p->copy_out;
    const hal_backend_ptr_t *user = in ? &j->send : &j->recv;
    const hal_backend_ptr_t *slot = &p->slot[(j->first + k) % PIPE_SLOTS];
    HAL_CHECK(ops->stream_launch_host_fn(stream, in ? gate_in : gate_out, p));
    pipe_piece_t piece;
    int n = chunk_pieces(j, k, in, -1, &piece);
    for (int i = 0; i < n; i++) {
        chunk_pieces(j, k, in, i, &piece);
        if (!piece.bytes)
            continue;
        hal_backend_ptr_t u = *user, s = *slot;
        u.ptr = (char *)u.ptr + piece.user_off;
        u.offset += piece.user_off;
        s.ptr = (char *)s.ptr + piece.slot_off;
        s.offset += piece.slot_off;
        HAL_CHECK(ops->memcpy_async(stream, in ? &s : &u, in ? &u : &s, piece.bytes));
    }
    return ops->stream_launch_host_fn(stream, in ? done_in : done_out, p);
}

/* Queues the copies of every chunk of a staged collective, gated, on the copy streams; the
 * copy-in stream first waits for the caller's stream to reach the collective. *queued_any says
 * whether anything was queued on the copy streams when it fails. */
static hal_status_t queue_copies(comm_pipe_t *p, pipe_job_t *j, void *stream, bool *queued_any)
{
    const hal_backend_ops_t *ops = p->ops;
    *queued_any = false;
    HAL_CHECK(ops->event_record(p->start, stream));
    HAL_CHECK(ops->stream_wait_event(p->copy_in, p->start));
    *queued_any = true;
    for (size_t k = 0; k < j->geom.chunks; k++)
        HAL_CHECK(queue_chunk(p, j, k, true));
    for (size_t k = 0; k < j->geom.chunks; k++)
        HAL_CHECK(queue_chunk(p, j, k, false));
    return HAL_OK;
}

/* Queues the host function, after the copies of a staged job (under the pipeline's enqueue
 * lock, which numbers its chunks). A failure once copies are queued stops the pipeline and fails
 * the communicator: the copies queued so far drain through failing gates, and peers cannot be
 * told which part of the collective this rank took. */
static hal_status_t queue_job(comm_pipe_t *p, pipe_job_t *j, void *stream)
{
    struct hal_comm_s *comm = j->comm;
    const hal_backend_ops_t *ops = comm->ops;
    const char *call = hal_comm_call_name(j->op.kind);
    bool queued_any = false;
    hal_status_t st = HAL_OK;
    size_t chunks = j->geom.chunks; /* j is the host function's once it is queued */
    if (p) {
        j->first = p->queued;
        st = queue_copies(p, j, stream, &queued_any);
    }
    if (st == HAL_OK) {
        hal_comm_job_started(comm);
        st = ops->stream_launch_host_fn(stream, run_pipeline, j);
        if (st != HAL_OK)
            hal_comm_job_finished(comm);
    }
    if (st == HAL_OK) {
        if (p)
            p->queued += chunks;
        return HAL_OK;
    }
    st = hal_backend_error(st, ops, call);
    if (queued_any) {
        pipe_stop(p, st);
        hal_comm_latch(comm, st);
        hal_engine_abort(__atomic_load_n(&comm->engine, __ATOMIC_ACQUIRE));
    }
    return st;
}

hal_status_t hal_comm_pipeline_enqueue(const comm_call_t *c)
{
    struct hal_comm_s *comm = c->comm;
    const char *call = hal_comm_call_name(c->op.kind);
    pipe_job_t *j = malloc(sizeof(*j));
    if (!j)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, comm->ops->name, call, "out of host memory");
    /* Device memory is staged; host memory too for the blocked kinds, whose chunks the engine
     * needs contiguous. */
    bool all = blocked(c->op.kind);
    *j = (pipe_job_t){ .comm = comm,
                       .op = c->op,
                       .send = c->send,
                       .recv = c->recv,
                       .stage_send = c->send.ptr && (all || c->send.kind == HAL_MEM_KIND_DEVICE),
                       .stage_recv = c->recv.ptr && (all || c->recv.kind == HAL_MEM_KIND_DEVICE) };
    geometry(&c->op, comm->nranks, comm->pipe_chunk, &j->geom);
    comm_pipe_t *p = NULL;
    hal_status_t st = HAL_OK;
    if (j->stage_send || j->stage_recv)
        st = pipe_get(comm, call, &p);
    if (st == HAL_OK && p) {
        pthread_mutex_lock(&p->enqueue);
        pipe_lock(p);
        hal_status_t failed = p->failed;
        pthread_mutex_unlock(&p->lock);
        /* Stopped by a failure not latched on the communicator yet: refused, no side effect. */
        if (failed != HAL_OK)
            st = hal_error(failed, comm->ops->name, call,
                           "the staging pipeline of the communicator failed earlier (%s)",
                           hal_status_string(failed));
        else
            st = queue_job(p, j, c->stream->impl);
        pthread_mutex_unlock(&p->enqueue);
    } else if (st == HAL_OK) {
        st = queue_job(NULL, j, c->stream->impl);
    }
    if (st != HAL_OK)
        free(j);
    return st;
}
