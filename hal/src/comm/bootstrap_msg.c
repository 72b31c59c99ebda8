/* SPDX-License-Identifier: Apache-2.0 */
/* Framed messages between ranks over their authenticated connections: hal_bootstrap_send and
 * hal_bootstrap_recv, and the transfers the collective helpers run. Per connection, one thread
 * at a time owns the send direction and one the receive direction; frames that arrive for
 * another (type, tag) wait in a bounded per-connection queue. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "hal/src/comm/bootstrap.h"
#include "hal/src/comm/bootstrap_internal.h"
#include "hal/src/service.h"

/* The detail of the last error this thread reported for `call` (without "hal: <call>: "). */
static const char *bs_last_detail(const char *call)
{
    const char *m = hal_last_error_message();
    size_t n = strlen(call);
    if (strncmp(m, "hal: ", 5) == 0 && strncmp(m + 5, call, n) == 0 &&
        strncmp(m + 5 + n, ": ", 2) == 0)
        return m + 7 + n;
    return m;
}

/* Records that a connection is unusable (first reason wins), shuts its socket down so the peer
 * notices at once, and reports. */
static hal_status_t bs_conn_fail(bs_conn_t *c, const char *call, hal_status_t st,
                                 const char *detail)
{
    pthread_mutex_lock(&c->mu);
    if (c->failed == HAL_OK) {
        c->failed = st;
        snprintf(c->why, sizeof(c->why), "%s", detail);
        if (c->fd >= 0)
            shutdown(c->fd, SHUT_RDWR);
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return call != NULL ? hal_error(st, NULL, call, "%s", detail) : st;
}

static bs_msg_t *bs_queue_take(bs_conn_t *c, uint32_t type, uint32_t tag)
{
    bs_msg_t *prev = NULL;
    for (bs_msg_t *m = c->head; m != NULL; prev = m, m = m->next) {
        if (m->type != type || m->tag != tag)
            continue;
        if (prev != NULL)
            prev->next = m->next;
        else
            c->head = m->next;
        if (c->tail == m)
            c->tail = prev;
        c->queued -= m->size;
        return m;
    }
    return NULL;
}

static void bs_queue_push(bs_conn_t *c, bs_msg_t *m)
{
    m->next = NULL;
    if (c->tail != NULL)
        c->tail->next = m;
    else
        c->head = m;
    c->tail = m;
}

void bs_xfer_init(bs_xfer_t *x, int peer, bool send, uint32_t type, uint32_t tag, const void *sbuf,
                  void *rbuf, size_t size)
{
    memset(x, 0, sizeof(*x));
    x->peer = peer;
    x->send = send;
    x->type = type;
    x->tag = tag;
    x->sbuf = sbuf;
    x->rbuf = rbuf;
    x->size = size;
    x->fd = -1;
    put32(x->hdr, type);
    put32(x->hdr + 4, tag);
    put64(x->hdr + 8, size);
}

static hal_status_t bs_size_mismatch(hal_bootstrap_t *b, const bs_xfer_t *x, uint64_t sent,
                                     const char *call)
{
    char who[160];
    bs_peer_name(b, x->peer, who, sizeof(who));
    if (x->type == BS_FRAME_COLL)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "%s contributed %llu bytes to the collective step, this rank %zu", who,
                         (unsigned long long)sent, x->size);
    return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                     "%s sent %llu bytes with tag %u, but the receive expects %zu", who,
                     (unsigned long long)sent, x->tag, x->size);
}

/* Completes a receive from a queued frame. */
static hal_status_t bs_deliver(hal_bootstrap_t *b, bs_xfer_t *x, bs_msg_t *m, const char *call)
{
    hal_status_t st = HAL_OK;
    if (m->size != x->size)
        st = bs_size_mismatch(b, x, m->size, call);
    else if (m->size > 0)
        memcpy(x->rbuf, m->data, m->size);
    free(m);
    x->done = true;
    return st;
}

/* Takes the direction of the connection x needs (or, for a receive, finds its frame already
 * queued). Waits while another thread owns it. */
static hal_status_t bs_acquire(hal_bootstrap_t *b, bs_xfer_t *x, int64_t deadline, const char *call)
{
    bs_conn_t *c = &b->conns[x->peer];
    char who[160];
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (bs_aborted(b)) {
            pthread_mutex_unlock(&c->mu);
            bs_peer_name(b, x->peer, who, sizeof(who));
            return hal_error(HAL_ERROR_ABORTED, NULL, call, "aborted while waiting for %s", who);
        }
        if (!x->send) {
            bs_msg_t *m = bs_queue_take(c, x->type, x->tag);
            if (m != NULL) {
                pthread_mutex_unlock(&c->mu);
                return bs_deliver(b, x, m, call);
            }
        }
        if (c->failed != HAL_OK)
            return bs_conn_failed_locked(c, call);
        bool *role = x->send ? &c->sending : &c->reading;
        if (!*role) {
            *role = true;
            x->owns_role = true;
            pthread_mutex_unlock(&c->mu);
            return HAL_OK;
        }
        if (bs_now_ms() >= deadline) {
            pthread_mutex_unlock(&c->mu);
            bs_peer_name(b, x->peer, who, sizeof(who));
            return hal_error(HAL_ERROR_TIMEOUT, NULL, call,
                             "timed out after %u ms waiting for another thread %s %s",
                             b->timeout_ms, x->send ? "sending to" : "receiving from", who);
        }
        bs_cond_wait(c, deadline);
    }
}

static void bs_release(hal_bootstrap_t *b, bs_xfer_t *x)
{
    if (!x->owns_role)
        return;
    bs_conn_t *c = &b->conns[x->peer];
    pthread_mutex_lock(&c->mu);
    if (x->send)
        c->sending = false;
    else
        c->reading = false;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    x->owns_role = false;
}

static hal_status_t bs_xfer_io_fail(hal_bootstrap_t *b, bs_xfer_t *x, ssize_t n, const char *call)
{
    char who[160], detail[320], eb[96];
    bs_peer_name(b, x->peer, who, sizeof(who));
    /* abort shuts the sockets down: report the abort, not its echo. */
    if (bs_aborted(b))
        return hal_error(HAL_ERROR_ABORTED, NULL, call, "aborted while exchanging with %s", who);
    if (n == 0 || errno == EPIPE || errno == ECONNRESET)
        snprintf(detail, sizeof(detail), "%s closed the connection", who);
    else
        snprintf(detail, sizeof(detail), "connection to %s failed: %s", who,
                 bs_strerror(errno, eb, sizeof(eb)));
    return bs_conn_fail(&b->conns[x->peer], call, HAL_ERROR_REMOTE, detail);
}

static hal_status_t bs_send_progress(hal_bootstrap_t *b, bs_xfer_t *x, const char *call)
{
    uint64_t total = BS_HEADER_BYTES + (uint64_t)x->size;
    while (x->off < total) {
        struct iovec iov[2];
        struct msghdr msg;
        memset(&msg, 0, sizeof(msg));
        msg.msg_iov = iov;
        if (x->off < BS_HEADER_BYTES) {
            iov[0].iov_base = x->hdr + x->off;
            iov[0].iov_len = BS_HEADER_BYTES - (size_t)x->off;
            iov[1].iov_base = (void *)x->sbuf;
            iov[1].iov_len = x->size;
            msg.msg_iovlen = x->size > 0 ? 2 : 1;
        } else {
            iov[0].iov_base = (void *)(x->sbuf + (x->off - BS_HEADER_BYTES));
            iov[0].iov_len = (size_t)(total - x->off);
            msg.msg_iovlen = 1;
        }
        ssize_t n = sendmsg(x->fd, &msg, MSG_NOSIGNAL);
        if (n > 0) {
            x->off += (uint64_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return HAL_OK;
        return bs_xfer_io_fail(b, x, n < 0 ? -1 : 0, call);
    }
    x->done = true;
    return HAL_OK;
}

/* A frame header arrived: check it before allocating anything, and pick where the payload goes (the
 * caller's buffer, the queue, or nowhere when the size is wrong). */
static hal_status_t bs_recv_header(hal_bootstrap_t *b, bs_xfer_t *x, const char *call)
{
    bs_conn_t *c = &b->conns[x->peer];
    char who[160], detail[320];
    x->ftype = get32(x->hdr);
    x->ftag = get32(x->hdr + 4);
    x->fsize = get64(x->hdr + 8);
    bs_peer_name(b, x->peer, who, sizeof(who));
    if (x->ftype != BS_FRAME_DATA && x->ftype != BS_FRAME_COLL) {
        snprintf(detail, sizeof(detail), "%s sent a frame of unknown type %u (protocol error)", who,
                 x->ftype);
        return bs_conn_fail(c, call, HAL_ERROR_REMOTE, detail);
    }
    if (x->fsize > HAL_BOOTSTRAP_MAX_MESSAGE) {
        snprintf(detail, sizeof(detail),
                 "%s announced a message of %llu bytes, over the limit of %u "
                 "(HAL_BOOTSTRAP_MAX_MESSAGE); connection closed",
                 who, (unsigned long long)x->fsize, HAL_BOOTSTRAP_MAX_MESSAGE);
        return bs_conn_fail(c, call, HAL_ERROR_REMOTE, detail);
    }
    if (x->ftype == x->type && x->ftag == x->tag) {
        x->sink = x->fsize == x->size ? BS_SINK_USER : BS_SINK_DISCARD;
        return HAL_OK;
    }
    pthread_mutex_lock(&c->mu);
    bool over = c->queued + x->fsize > BS_QUEUE_LIMIT;
    if (!over)
        c->queued += (size_t)x->fsize;
    pthread_mutex_unlock(&c->mu);
    if (!over)
        x->spill = malloc(sizeof(bs_msg_t) + (size_t)x->fsize);
    if (over || x->spill == NULL) {
        if (!over) {
            pthread_mutex_lock(&c->mu);
            c->queued -= (size_t)x->fsize;
            pthread_mutex_unlock(&c->mu);
        }
        snprintf(detail, sizeof(detail),
                 "%s sent more than %zu MiB of messages no receive has asked for yet", who,
                 BS_QUEUE_LIMIT >> 20);
        return bs_conn_fail(c, call, HAL_ERROR_OUT_OF_HOST_MEMORY, detail);
    }
    x->spill->type = x->ftype;
    x->spill->tag = x->ftag;
    x->spill->size = (size_t)x->fsize;
    x->sink = BS_SINK_SPILL;
    return HAL_OK;
}

static hal_status_t bs_recv_progress(hal_bootstrap_t *b, bs_xfer_t *x, const char *call)
{
    bs_conn_t *c = &b->conns[x->peer];
    uint8_t scratch[16384];
    while (!x->done) {
        void *dst;
        size_t want;
        if (x->off < BS_HEADER_BYTES) {
            dst = x->hdr + x->off;
            want = BS_HEADER_BYTES - (size_t)x->off;
        } else {
            uint64_t got = x->off - BS_HEADER_BYTES;
            if (got == x->fsize) {
                /* A whole frame is in. */
                if (x->sink == BS_SINK_SPILL) {
                    pthread_mutex_lock(&c->mu);
                    bs_queue_push(c, x->spill);
                    pthread_cond_broadcast(&c->cv);
                    pthread_mutex_unlock(&c->mu);
                    x->spill = NULL;
                    x->off = 0;
                    continue;
                }
                x->done = true;
                if (x->sink == BS_SINK_DISCARD)
                    return bs_size_mismatch(b, x, x->fsize, call);
                return HAL_OK;
            }
            want = (size_t)(x->fsize - got);
            if (x->sink == BS_SINK_USER) {
                dst = x->rbuf + got;
            } else if (x->sink == BS_SINK_SPILL) {
                dst = x->spill->data + got;
            } else {
                dst = scratch;
                if (want > sizeof(scratch))
                    want = sizeof(scratch);
            }
        }
        ssize_t n = recv(x->fd, dst, want, 0);
        if (n > 0) {
            x->off += (uint64_t)n;
            if (x->off == BS_HEADER_BYTES)
                HAL_CHECK(bs_recv_header(b, x, call));
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return HAL_OK;
        return bs_xfer_io_fail(b, x, n, call);
    }
    return HAL_OK;
}

/* Drives the transfers (one, or a send and a receive at once so that rings of large messages cannot
 * deadlock on full socket buffers) until done, the deadline or an abort. */
static hal_status_t bs_drive(hal_bootstrap_t *b, bs_xfer_t *xs, int n, int64_t deadline,
                             const char *call)
{
    hal_status_t st = HAL_OK;
    for (;;) {
        const bs_xfer_t *waiting = NULL;
        if (bs_aborted(b)) {
            st = hal_error(HAL_ERROR_ABORTED, NULL, call, "aborted while exchanging with rank %d",
                           xs[0].peer);
            goto out;
        }
        for (int i = 0; i < n; i++) {
            bs_xfer_t *x = &xs[i];
            if (x->done)
                continue;
            st = x->send ? bs_send_progress(b, x, call) : bs_recv_progress(b, x, call);
            if (st != HAL_OK)
                goto out;
            if (!x->done && waiting == NULL)
                waiting = x;
        }
        if (waiting == NULL)
            return HAL_OK;
        char who[160];
        bs_peer_name(b, waiting->peer, who, sizeof(who));
        if (bs_aborted(b)) {
            st = hal_error(HAL_ERROR_ABORTED, NULL, call, "aborted while %s %s",
                           waiting->send ? "sending to" : "waiting for a message from", who);
            goto out;
        }
        if (bs_now_ms() >= deadline) {
            st = hal_error(HAL_ERROR_TIMEOUT, NULL, call,
                           waiting->send
                               ? "timed out after %u ms sending to %s (it is not receiving)"
                               : "timed out after %u ms waiting for a message from %s",
                           b->timeout_ms, who);
            goto out;
        }
        struct pollfd p[3];
        int np = 0;
        for (int i = 0; i < n; i++)
            if (!xs[i].done)
                p[np++] = (struct pollfd){ xs[i].fd, xs[i].send ? POLLOUT : POLLIN, 0 };
        p[np++] = (struct pollfd){ b->wake_fd, POLLIN, 0 };
        if (poll(p, (nfds_t)np, bs_poll_timeout(deadline)) < 0 && errno != EINTR) {
            st = hal_error(HAL_ERROR_INTERNAL, NULL, call, "poll failed: %s", strerror(errno));
            goto out;
        }
    }
out:
    for (int i = 0; i < n; i++) {
        bs_xfer_t *x = &xs[i];
        if (x->spill != NULL) {
            bs_conn_t *c = &b->conns[x->peer];
            pthread_mutex_lock(&c->mu);
            c->queued -= x->spill->size;
            pthread_mutex_unlock(&c->mu);
            free(x->spill);
            x->spill = NULL;
        }
        /* Stopped inside a frame: the stream lost its framing. */
        if (!x->done && x->off > 0)
            bs_conn_fail(&b->conns[x->peer], NULL, st, bs_last_detail(call));
    }
    return st;
}

/* Connects, takes the directions it needs, drives, releases. */
hal_status_t bs_xfer_run(hal_bootstrap_t *b, bs_xfer_t *xs, int n, int64_t deadline,
                         const char *call)
{
    hal_status_t st = HAL_OK;
    int acquired = 0;
    for (int i = 0; i < n; i++)
        HAL_CHECK(bs_get_conn(b, xs[i].peer, deadline, call, &xs[i].fd));
    for (; acquired < n; acquired++) {
        st = bs_acquire(b, &xs[acquired], deadline, call);
        if (st != HAL_OK)
            goto out;
    }
    st = bs_drive(b, xs, n, deadline, call);
out:
    for (int i = 0; i < n; i++)
        bs_release(b, &xs[i]);
    return st;
}

static hal_status_t bs_self_send(hal_bootstrap_t *b, uint32_t tag, const void *data, size_t size,
                                 const char *call)
{
    bs_conn_t *c = &b->conns[b->rank];
    bs_msg_t *m = malloc(sizeof(*m) + size);
    if (m == NULL)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, NULL, call, "out of host memory");
    m->type = BS_FRAME_DATA;
    m->tag = tag;
    m->size = size;
    if (size > 0)
        memcpy(m->data, data, size);
    pthread_mutex_lock(&c->mu);
    if (c->queued + size > BS_QUEUE_LIMIT) {
        pthread_mutex_unlock(&c->mu);
        free(m);
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, NULL, call,
                         "more than %zu MiB of messages to this rank itself wait for a receive",
                         BS_QUEUE_LIMIT >> 20);
    }
    c->queued += size;
    bs_queue_push(c, m);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return HAL_OK;
}

static hal_status_t bs_self_recv(hal_bootstrap_t *b, uint32_t tag, void *data, size_t size,
                                 int64_t deadline, const char *call)
{
    bs_conn_t *c = &b->conns[b->rank];
    bs_xfer_t x;
    bs_xfer_init(&x, b->rank, false, BS_FRAME_DATA, tag, NULL, data, size);
    pthread_mutex_lock(&c->mu);
    for (;;) {
        bs_msg_t *m = bs_queue_take(c, BS_FRAME_DATA, tag);
        if (m != NULL) {
            pthread_mutex_unlock(&c->mu);
            return bs_deliver(b, &x, m, call);
        }
        if (bs_aborted(b)) {
            pthread_mutex_unlock(&c->mu);
            return hal_error(HAL_ERROR_ABORTED, NULL, call,
                             "aborted while waiting for a message from this rank to itself");
        }
        if (bs_now_ms() >= deadline) {
            pthread_mutex_unlock(&c->mu);
            return hal_error(
                HAL_ERROR_TIMEOUT, NULL, call,
                "timed out after %u ms waiting for a message from this rank to itself (tag %u)",
                b->timeout_ms, tag);
        }
        bs_cond_wait(c, deadline);
    }
}

hal_status_t bs_check_message(hal_bootstrap_t *b, const void *buf, size_t size, const char *call)
{
    if (b == NULL)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "bootstrap is NULL");
    if (buf == NULL && size > 0)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "buffer is NULL");
    if (size > HAL_BOOTSTRAP_MAX_MESSAGE)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "%zu bytes exceed HAL_BOOTSTRAP_MAX_MESSAGE (%u)", size,
                         HAL_BOOTSTRAP_MAX_MESSAGE);
    if (bs_aborted(b))
        return hal_error(HAL_ERROR_ABORTED, NULL, call, "the bootstrap was aborted");
    return HAL_OK;
}

static hal_status_t bs_check_p2p(hal_bootstrap_t *b, int peer, const void *data, size_t size,
                                 const char *call)
{
    if (b != NULL && (peer < 0 || peer >= b->nranks))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "peer %d is not in 0..%d", peer,
                         b->nranks - 1);
    return bs_check_message(b, data, size, call);
}

/* Sends size bytes to peer under tag; returns once they are in the kernel's socket buffer (or the
 * queue, for peer == own rank). Returns HAL_OK, HAL_ERROR_INVALID_ARGUMENT,
 * HAL_ERROR_PERMISSION_DENIED, HAL_ERROR_TIMEOUT, HAL_ERROR_REMOTE, HAL_ERROR_ABORTED,
 * HAL_ERROR_OUT_OF_HOST_MEMORY. Thread safety: safe; sends to one peer are serialized. */
hal_status_t hal_bootstrap_send(hal_bootstrap_t *b, int peer, uint32_t tag, const void *data,
                                size_t size)
{
    const char *call = "bootstrap send";
    HAL_CHECK(bs_check_p2p(b, peer, data, size, call));
    if (peer == b->rank)
        return bs_self_send(b, tag, data, size, call);
    bs_xfer_t x;
    bs_xfer_init(&x, peer, true, BS_FRAME_DATA, tag, data, NULL, size);
    return bs_xfer_run(b, &x, 1, bs_now_ms() + b->timeout_ms, call);
}

/* Receives the next message peer sent under tag into data; it must be exactly size bytes (else
 * HAL_ERROR_INVALID_ARGUMENT, and the message is consumed). Other statuses as hal_bootstrap_send.
 * Thread safety: safe; receives from one peer take turns reading, and a message for another tag is
 * queued for its receiver. */
hal_status_t hal_bootstrap_recv(hal_bootstrap_t *b, int peer, uint32_t tag, void *data, size_t size)
{
    const char *call = "bootstrap recv";
    HAL_CHECK(bs_check_p2p(b, peer, data, size, call));
    int64_t deadline = bs_now_ms() + b->timeout_ms;
    if (peer == b->rank)
        return bs_self_recv(b, tag, data, size, deadline, call);
    bs_xfer_t x;
    bs_xfer_init(&x, peer, false, BS_FRAME_DATA, tag, NULL, data, size);
    return bs_xfer_run(b, &x, 1, deadline, call);
}

/* Sends ssize bytes of sdata to `to` under tag while receiving the next message `from` sent under
 * tag into rdata (exactly rsize bytes), both driven on the calling thread, so that two ranks
 * sending each other large messages cannot block on full socket buffers and no second thread is
 * needed. Neither peer may be this rank. Returns as hal_bootstrap_send and hal_bootstrap_recv (also
 * HAL_ERROR_INVALID_ARGUMENT for a peer that is this rank). Thread safety: as they. */
hal_status_t hal_bootstrap_sendrecv(hal_bootstrap_t *b, int to, uint32_t tag, const void *sdata,
                                    size_t ssize, int from, void *rdata, size_t rsize)
{
    const char *call = "bootstrap sendrecv";
    HAL_CHECK(bs_check_p2p(b, to, sdata, ssize, call));
    HAL_CHECK(bs_check_p2p(b, from, rdata, rsize, call));
    if (to == b->rank || from == b->rank)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "peer %d is this rank",
                         to == b->rank ? to : from);
    bs_xfer_t x[2];
    bs_xfer_init(&x[0], to, true, BS_FRAME_DATA, tag, sdata, NULL, ssize);
    bs_xfer_init(&x[1], from, false, BS_FRAME_DATA, tag, NULL, rdata, rsize);
    return bs_xfer_run(b, x, 2, bs_now_ms() + b->timeout_ms, call);
}

/* Sends a bare frame header announcing `size` payload bytes, without the payload: lets the tests
 * play a peer that announces an oversized message. Returns as hal_bootstrap_send. Thread safety: as
 * hal_bootstrap_send. */
hal_status_t hal_bootstrap_test_send_header(hal_bootstrap_t *b, int peer, uint32_t tag,
                                            uint64_t size)
{
    const char *call = "bootstrap test header";
    HAL_CHECK(bs_check_p2p(b, peer, NULL, 0, call));
    if (peer == b->rank)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "peer is this rank");
    bs_xfer_t x;
    bs_xfer_init(&x, peer, true, BS_FRAME_DATA, tag, NULL, NULL, 0);
    put64(x.hdr + 8, size);
    return bs_xfer_run(b, &x, 1, bs_now_ms() + b->timeout_ms, call);
}
