/* SPDX-License-Identifier: Apache-2.0 */
/* Collectives and point to point when the ranks span several hosts: everything goes through
 * the bootstrap's authenticated TCP connections. Correct rather than fast: ring algorithms
 * (reduce-scatter then allgather for allreduce), whole-buffer staging, one descriptor
 * allgather per collective to find ranks that disagree (a reduction of up to ENG_TCP_INLINE
 * bytes travels inside it and needs nothing else), a header/acknowledgement per message
 * so both ends of a mismatched send/receive fail.
 *
 * The bootstrap's calls block, and a send returns once its bytes are in the socket buffer, so
 * two ranks sending large messages to each other would wait forever for the other to read.
 * Every step therefore sends and receives together: a small step on the calling thread
 * (hal_bootstrap_sendrecv drives both), a large step and point-to-point groups with one thread
 * per (peer, direction), the first on the calling thread. The bootstrap allows one sender and
 * one receiver per connection at a time. Timeouts and aborts are the bootstrap's (it was connected
 * with the job's timeout, and hal_engine_abort aborts it). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/src/comm/engine_impl.h"
#include "hal/src/core.h"

/* Largest message the engine sends (the bootstrap allows up to HAL_BOOTSTRAP_MAX_MESSAGE). */
#define ENG_TCP_CHUNK ((size_t)16 << 20)

#define ENG_TAG_DATA 0x454e4701u /* collective data */
#define ENG_TAG_HDR  0x454e4702u /* point-to-point header, sender to receiver */
#define ENG_TAG_ACK  0x454e4703u /* its acknowledgement, receiver to sender */
#define ENG_TAG_P2P  0x454e4704u /* point-to-point data */

/* One sequence of transfers with one peer in one direction, run by one thread. */
typedef struct tcp_task {
    hal_engine_comm_t *c;
    int peer;
    bool send;
    /* Either a buffer moved as chunks (collectives)... */
    void *buf;
    size_t bytes;
    /* ...or point-to-point operations, in order. */
    const hal_engine_op_t **ops;
    size_t nops;
    hal_status_t st;
    char message[ENG_MESSAGE_MAX];
} tcp_task_t;

typedef struct tcp_hdr {
    uint64_t count;
    uint32_t dtype;
    uint32_t magic;
} tcp_hdr_t;

#define ENG_HDR_MAGIC 0x48445231u

static hal_status_t task_error(tcp_task_t *t, hal_status_t st)
{
    t->st = st;
    snprintf(t->message, sizeof(t->message), "%s", hal_last_error_message());
    return st;
}

static hal_status_t move_chunks(hal_engine_comm_t *c, int peer, bool send, uint32_t tag, void *buf,
                                size_t bytes)
{
    unsigned char *p = buf;
    for (size_t off = 0; off < bytes; off += ENG_TCP_CHUNK) {
        size_t len = bytes - off < ENG_TCP_CHUNK ? bytes - off : ENG_TCP_CHUNK;
        HAL_CHECK(send ? hal_bootstrap_send(c->bootstrap, peer, tag, p + off, len)
                       : hal_bootstrap_recv(c->bootstrap, peer, tag, p + off, len));
    }
    return HAL_OK;
}

static hal_status_t p2p_one(tcp_task_t *t, const hal_engine_op_t *op)
{
    hal_engine_comm_t *c = t->c;
    tcp_hdr_t mine = { op->count, (uint32_t)op->dtype, ENG_HDR_MAGIC }, theirs;
    hal_status_t st;
    if (t->send) {
        st = hal_bootstrap_send(c->bootstrap, t->peer, ENG_TAG_HDR, &mine, sizeof(mine));
        if (st == HAL_OK)
            st = hal_bootstrap_recv(c->bootstrap, t->peer, ENG_TAG_ACK, &theirs, sizeof(theirs));
    } else {
        st = hal_bootstrap_recv(c->bootstrap, t->peer, ENG_TAG_HDR, &theirs, sizeof(theirs));
        if (st == HAL_OK)
            st = hal_bootstrap_send(c->bootstrap, t->peer, ENG_TAG_ACK, &mine, sizeof(mine));
    }
    if (st != HAL_OK)
        return task_error(t, st);
    if (theirs.magic != ENG_HDR_MAGIC || theirs.count != mine.count || theirs.dtype != mine.dtype) {
        t->st = HAL_ERROR_INVALID_ARGUMENT;
        snprintf(t->message, sizeof(t->message),
                 "rank %d %s count %llu of %s %s this rank, this rank %s count %llu of %s", t->peer,
                 t->send ? "receives" : "sends", (unsigned long long)theirs.count,
                 eng_dtype_name((hal_dtype_t)theirs.dtype), t->send ? "from" : "to",
                 t->send ? "sends" : "receives", (unsigned long long)mine.count,
                 eng_dtype_name(op->dtype));
        return t->st;
    }
    size_t bytes = op->count * eng_dtype_size(op->dtype);
    st = move_chunks(c, t->peer, t->send, ENG_TAG_P2P,
                     t->send ? (void *)(uintptr_t)op->sendbuf : op->recvbuf, bytes);
    return st == HAL_OK ? HAL_OK : task_error(t, st);
}

static void *task_main(void *arg)
{
    tcp_task_t *t = arg;
    t->st = HAL_OK;
    if (t->ops) {
        for (size_t i = 0; i < t->nops && t->st == HAL_OK; i++)
            p2p_one(t, t->ops[i]);
    } else {
        hal_status_t st = move_chunks(t->c, t->peer, t->send, ENG_TAG_DATA, t->buf, t->bytes);
        if (st != HAL_OK)
            task_error(t, st);
    }
    return NULL;
}

/* Runs the tasks concurrently and latches the first failure. */
static hal_status_t run_tasks(hal_engine_comm_t *c, tcp_task_t *tasks, size_t n, const char *call)
{
    pthread_t *threads = n > 1 ? calloc(n - 1, sizeof(*threads)) : NULL;
    if (n > 1 && !threads)
        return eng_fail(c, HAL_ERROR_OUT_OF_HOST_MEMORY, call, "out of host memory");
    size_t started = 0;
    hal_status_t st = HAL_OK;
    for (size_t i = 1; i < n; i++, started++) {
        if (pthread_create(&threads[i - 1], NULL, task_main, &tasks[i]) != 0) {
            st = eng_fail(c, HAL_ERROR_OUT_OF_HOST_MEMORY, call, "cannot start a thread");
            /* The threads already started still need their partners: abort to release them. */
            hal_bootstrap_abort(c->bootstrap);
            break;
        }
    }
    if (n > 0 && st == HAL_OK)
        task_main(&tasks[0]);
    for (size_t i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    free(threads);
    if (st != HAL_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        if (tasks[i].st == HAL_OK)
            continue;
        hal_status_t failed = tasks[i].st;
        if (__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE))
            failed = HAL_ERROR_ABORTED;
        return eng_fail(c, failed, call, "%s", tasks[i].message);
    }
    return HAL_OK;
}

/* Up to this many bytes each way, a step's send and receive run on the calling thread: starting
 * a thread and handing off to it cost more than the transfer. Larger steps give each direction
 * a thread, so the kernel's copies into and out of the sockets run on two CPUs at once. */
#define ENG_TCP_ONE_THREAD ((size_t)256 << 10)

/* Sends `sbytes` of sbuf to `to` while receiving `rbytes` into rbuf from `from`. */
static hal_status_t exchange(hal_engine_comm_t *c, int to, const void *sbuf, size_t sbytes,
                             int from, void *rbuf, size_t rbytes, const char *call)
{
    if (sbytes > ENG_TCP_ONE_THREAD || rbytes > ENG_TCP_ONE_THREAD) {
        tcp_task_t t[2] = {
            { .c = c, .peer = from, .send = false, .buf = rbuf, .bytes = rbytes },
            { .c = c, .peer = to, .send = true, .buf = (void *)(uintptr_t)sbuf, .bytes = sbytes },
        };
        return run_tasks(c, t, 2, call);
    }
    hal_status_t st;
    if (sbytes > 0 && rbytes > 0)
        st = hal_bootstrap_sendrecv(c->bootstrap, to, ENG_TAG_DATA, sbuf, sbytes, from, rbuf,
                                    rbytes);
    else if (sbytes > 0)
        st = hal_bootstrap_send(c->bootstrap, to, ENG_TAG_DATA, sbuf, sbytes);
    else if (rbytes > 0)
        st = hal_bootstrap_recv(c->bootstrap, from, ENG_TAG_DATA, rbuf, rbytes);
    else
        return HAL_OK;
    if (st == HAL_OK)
        return HAL_OK;
    return eng_fail(c, __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE) ? HAL_ERROR_ABORTED : st,
                    call, "%s", hal_last_error_message());
}

static hal_status_t grow(hal_engine_comm_t *c, size_t bytes, const char *call)
{
    if (bytes <= c->tcp_buf_size)
        return HAL_OK;
    void *p = realloc(c->tcp_buf, bytes);
    if (!p)
        return eng_fail(c, HAL_ERROR_OUT_OF_HOST_MEMORY, call, "out of host memory (%zu bytes)",
                        bytes);
    c->tcp_buf = p;
    c->tcp_buf_size = bytes;
    return HAL_OK;
}

/* Element range of segment i when count elements are split into n. */
static void segment(size_t count, int n, int i, size_t *lo, size_t *len)
{
    size_t seg = (count + (size_t)n - 1) / (size_t)n;
    size_t l = seg * (size_t)i;
    *lo = l < count ? l : count;
    *len = l + seg < count ? seg : count - *lo;
}

/* Ring allreduce in place on buf (count elements). */
static hal_status_t ring_allreduce(hal_engine_comm_t *c, const eng_reducer_t *red, void *buf,
                                   size_t count, size_t es, const char *call)
{
    const int n = c->nranks, me = c->rank, next = (me + 1) % n, prev = (me + n - 1) % n;
    unsigned char *b = buf;
    size_t seg = (count + (size_t)n - 1) / (size_t)n;
    HAL_CHECK(grow(c, seg * es, call));
    for (int s = 0; s < n - 1; s++) {
        size_t slo, slen, rlo, rlen;
        segment(count, n, (me - s + n) % n, &slo, &slen);
        segment(count, n, (me - s - 1 + 2 * n) % n, &rlo, &rlen);
        HAL_CHECK(exchange(c, next, b + slo * es, slen * es, prev, c->tcp_buf, rlen * es, call));
        red->accum(b + rlo * es, c->tcp_buf, rlen);
    }
    size_t olo, olen;
    segment(count, n, (me + 1) % n, &olo, &olen);
    if (red->divide)
        red->divide(b + olo * es, olen, n);
    for (int s = 0; s < n - 1; s++) {
        size_t slo, slen, rlo, rlen;
        segment(count, n, (me + 1 - s + n) % n, &slo, &slen);
        segment(count, n, (me - s + n) % n, &rlo, &rlen);
        HAL_CHECK(exchange(c, next, b + slo * es, slen * es, prev, b + rlo * es, rlen * es, call));
    }
    return HAL_OK;
}

static hal_status_t tcp_allreduce(hal_engine_comm_t *c, const hal_engine_op_t *op, const char *call)
{
    size_t es = eng_dtype_size(op->dtype), bytes = op->count * es;
    const eng_reducer_t *red = eng_reducer(op->dtype, op->op);
    bool root = op->kind == HAL_ENGINE_ALLREDUCE || op->root == c->rank;
    void *work = root ? op->recvbuf : malloc(bytes ? bytes : 1);
    if (!work)
        return eng_fail(c, HAL_ERROR_OUT_OF_HOST_MEMORY, call, "out of host memory");
    if (bytes && work != op->sendbuf)
        memcpy(work, op->sendbuf, bytes);
    hal_status_t st = c->nranks > 1 ? ring_allreduce(c, red, work, op->count, es, call) : HAL_OK;
    if (!root)
        free(work);
    return st;
}

static hal_status_t tcp_broadcast(hal_engine_comm_t *c, const hal_engine_op_t *op, const char *call)
{
    size_t bytes = op->count * eng_dtype_size(op->dtype);
    if (op->root != c->rank) {
        tcp_task_t t = {
            .c = c, .peer = op->root, .send = false, .buf = op->recvbuf, .bytes = bytes
        };
        return run_tasks(c, &t, 1, call);
    }
    if (bytes && op->recvbuf != op->sendbuf)
        memcpy(op->recvbuf, op->sendbuf, bytes);
    /* Only the root sends and every other rank only receives: no cycle can block. */
    for (int p = 0; p < c->nranks; p++) {
        if (p == c->rank)
            continue;
        tcp_task_t t = { .c = c, .peer = p, .send = true, .buf = op->recvbuf, .bytes = bytes };
        HAL_CHECK(run_tasks(c, &t, 1, call));
    }
    return HAL_OK;
}

static hal_status_t tcp_allgather(hal_engine_comm_t *c, const hal_engine_op_t *op, const char *call)
{
    const int n = c->nranks, me = c->rank;
    size_t bytes = op->count * eng_dtype_size(op->dtype);
    unsigned char *recv = op->recvbuf;
    if (bytes && recv + (size_t)me * bytes != op->sendbuf)
        memcpy(recv + (size_t)me * bytes, op->sendbuf, bytes);
    for (int s = 0; s < n - 1; s++) {
        int sb = (me - s + n) % n, rb = (me - s - 1 + n) % n;
        HAL_CHECK(exchange(c, (me + 1) % n, recv + (size_t)sb * bytes, bytes, (me + n - 1) % n,
                           recv + (size_t)rb * bytes, bytes, call));
    }
    return HAL_OK;
}

/* Ring reduce-scatter: at step s a rank passes on the partial sum of block me - s - 1 and
 * receives block me - s - 2; after n - 1 steps its own block is complete. */
static hal_status_t tcp_reduce_scatter(hal_engine_comm_t *c, const hal_engine_op_t *op,
                                       const char *call)
{
    const int n = c->nranks, me = c->rank, next = (me + 1) % n, prev = (me + n - 1) % n;
    size_t es = eng_dtype_size(op->dtype), bytes = op->count * es;
    const eng_reducer_t *red = eng_reducer(op->dtype, op->op);
    const unsigned char *send = op->sendbuf;
    if (n == 1) {
        if (bytes && op->recvbuf != op->sendbuf)
            memcpy(op->recvbuf, op->sendbuf, bytes);
        return HAL_OK;
    }
    HAL_CHECK(grow(c, 3 * bytes + 1, call));
    unsigned char *in = c->tcp_buf, *acc = in + bytes, *next_acc = acc + bytes;
    for (int s = 0; s < n - 1; s++) {
        int sb = (me - s - 1 + 2 * n) % n, rb = (me - s - 2 + 2 * n) % n;
        const void *out = s == 0 ? send + (size_t)sb * bytes : acc;
        HAL_CHECK(exchange(c, next, out, bytes, prev, in, bytes, call));
        red->reduce2(next_acc, send + (size_t)rb * bytes, in, op->count);
        unsigned char *t = acc;
        acc = next_acc;
        next_acc = t;
    }
    if (red->divide)
        red->divide(acc, op->count, n);
    if (bytes)
        memcpy(op->recvbuf, acc, bytes);
    return HAL_OK;
}

static hal_status_t tcp_alltoall(hal_engine_comm_t *c, const hal_engine_op_t *op, const char *call)
{
    const int n = c->nranks, me = c->rank;
    size_t bytes = op->count * eng_dtype_size(op->dtype);
    const unsigned char *send = op->sendbuf;
    unsigned char *recv = op->recvbuf;
    if (bytes && send == recv) {
        /* In place: blocks still to send would be overwritten by blocks received. */
        HAL_CHECK(grow(c, bytes * (size_t)n, call));
        memcpy(c->tcp_buf, send, bytes * (size_t)n);
        send = c->tcp_buf;
    }
    if (bytes && recv + (size_t)me * bytes != send + (size_t)me * bytes)
        memcpy(recv + (size_t)me * bytes, send + (size_t)me * bytes, bytes);
    for (int s = 1; s < n; s++) {
        int to = (me + s) % n, from = (me - s + n) % n;
        HAL_CHECK(exchange(c, to, send + (size_t)to * bytes, bytes, from,
                           recv + (size_t)from * bytes, bytes, call));
    }
    return HAL_OK;
}

/* What every rank contributes to the descriptor allgather that starts each collective: its
 * descriptor and, for a reduction small enough, its whole input, so that such a collective is
 * that one exchange (the ring would add two round trips per peer). The record has one size
 * whatever the operation, so ranks that disagree about it still exchange descriptors and fail
 * with the mismatch. */
#define ENG_TCP_INLINE 1024

typedef struct tcp_record {
    eng_desc_t desc;
    _Alignas(16) unsigned char data[ENG_TCP_INLINE];
} tcp_record_t;

/* Whether op's input travels in its record. */
static bool inline_reduction(const hal_engine_op_t *op)
{
    return (op->kind == HAL_ENGINE_ALLREDUCE || op->kind == HAL_ENGINE_REDUCE) &&
           op->count * eng_dtype_size(op->dtype) <= ENG_TCP_INLINE;
}

/* Reduces the inputs gathered in the records in rank order, so every rank computes the same
 * bits; a reduce's other ranks have nothing left to do. */
static hal_status_t inline_allreduce(hal_engine_comm_t *c, const hal_engine_op_t *op,
                                     const tcp_record_t *all)
{
    if (op->count == 0 || (op->kind == HAL_ENGINE_REDUCE && op->root != c->rank))
        return HAL_OK;
    const eng_reducer_t *red = eng_reducer(op->dtype, op->op);
    memcpy(op->recvbuf, all[0].data, op->count * eng_dtype_size(op->dtype));
    for (int p = 1; p < c->nranks; p++)
        red->accum(op->recvbuf, all[p].data, op->count);
    if (red->divide)
        red->divide(op->recvbuf, op->count, c->nranks);
    return HAL_OK;
}

hal_status_t eng_tcp_collective(hal_engine_comm_t *c, const hal_engine_op_t *op)
{
    const char *call = eng_kind_name(op->kind);
    bool inline_data = inline_reduction(op);
    tcp_record_t *mine = calloc((size_t)c->nranks + 1, sizeof(*mine));
    if (!mine)
        return eng_fail(c, HAL_ERROR_OUT_OF_HOST_MEMORY, call, "out of host memory");
    tcp_record_t *all = mine + 1;
    eng_fill_desc(c, op, &mine->desc);
    mine->desc.seq = ++c->tcp_seq;
    if (inline_data && op->count > 0)
        memcpy(mine->data, op->sendbuf, op->count * eng_dtype_size(op->dtype));
    hal_status_t st = hal_bootstrap_allgather(c->bootstrap, mine, sizeof(*mine), all);
    if (st != HAL_OK) {
        free(mine);
        return eng_fail(c, __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE) ? HAL_ERROR_ABORTED : st,
                        call, "%s", hal_last_error_message());
    }
    for (int p = 0; p < c->nranks && st == HAL_OK; p++)
        if (!eng_desc_equal(&all[p].desc, &mine->desc))
            st = eng_desc_mismatch(c, call, p, &all[p].desc, &mine->desc);
    if (st == HAL_OK && inline_data)
        st = inline_allreduce(c, op, all);
    free(mine);
    if (st != HAL_OK || inline_data)
        return st;
    switch (op->kind) {
    case HAL_ENGINE_ALLREDUCE:
    case HAL_ENGINE_REDUCE:
        return tcp_allreduce(c, op, call);
    case HAL_ENGINE_BROADCAST:
        return tcp_broadcast(c, op, call);
    case HAL_ENGINE_ALLGATHER:
        return tcp_allgather(c, op, call);
    case HAL_ENGINE_REDUCE_SCATTER:
        return tcp_reduce_scatter(c, op, call);
    case HAL_ENGINE_ALLTOALL:
        return tcp_alltoall(c, op, call);
    default:
        return HAL_OK; /* barrier: the allgather above was it */
    }
}

hal_status_t eng_tcp_p2p(hal_engine_comm_t *c, const hal_engine_op_t *ops, size_t n)
{
    /* One task per (peer, direction), holding that pair's operations in order. */
    tcp_task_t *tasks = calloc(n, sizeof(*tasks));
    const hal_engine_op_t **lists = calloc(n, sizeof(*lists));
    if (!tasks || !lists) {
        free(tasks);
        free(lists);
        return eng_fail(c, HAL_ERROR_OUT_OF_HOST_MEMORY, "send", "out of host memory");
    }
    size_t ntasks = 0, used = 0;
    for (size_t i = 0; i < n; i++) {
        const hal_engine_op_t *op = &ops[i];
        if ((op->kind != HAL_ENGINE_SEND && op->kind != HAL_ENGINE_RECV) || op->root == c->rank)
            continue;
        bool send = op->kind == HAL_ENGINE_SEND;
        size_t t = 0;
        while (t < ntasks && !(tasks[t].peer == op->root && tasks[t].send == send))
            t++;
        if (t == ntasks) {
            /* Reserve room for every later operation of this pair right after this one. */
            size_t k = 0;
            for (size_t j = i; j < n; j++)
                k += ops[j].kind == op->kind && ops[j].root == op->root;
            tasks[ntasks++] =
                (tcp_task_t){ .c = c, .peer = op->root, .send = send, .ops = lists + used };
            used += k;
        }
        tasks[t].ops[tasks[t].nops++] = op;
    }
    hal_status_t st = run_tasks(c, tasks, ntasks, ops[0].kind == HAL_ENGINE_SEND ? "send" : "recv");
    free(tasks);
    free(lists);
    return st;
}

void eng_tcp_release(hal_engine_comm_t *c)
{
    free(c->tcp_buf);
    c->tcp_buf = NULL;
    c->tcp_buf_size = 0;
}
