/* SPDX-License-Identifier: Apache-2.0 */
/* The bootstrap root: hal_bootstrap_new_id, and the detached thread it starts that serves one
 * rendezvous. The thread polls non-blocking sockets, so that one slow or hostile connection
 * cannot stall the others; it authenticates each connection, collects every rank's HELLO,
 * sends the table to all of them (or tells them why the job failed) and exits. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hal/src/comm/bootstrap.h"
#include "hal/src/comm/bootstrap_internal.h"
#include "hal/src/service.h"

enum {
    RS_SEND_AUTH1,
    RS_RECV_AUTH2,
    RS_SEND_AUTH3,
    RS_RECV_HELLO,
    RS_JOINED,
    RS_SEND_TABLE,
    RS_SEND_REJECT,
    RS_CLOSED,
};

typedef struct bs_root_conn {
    int fd;
    int state;
    uint32_t claimed; /* the rank AUTH2 claimed */
    int rank;         /* once joined */
    int64_t deadline; /* until it must have joined (or its rejection is out) */
    uint8_t a1[BS_AUTH1_BYTES];
    uint8_t in[BS_AUTH2_BYTES]; /* AUTH2, then HELLO (header + entry) */
    size_t in_len, in_need;
    bool out_table; /* sending the shared TABLE frame rather than obuf */
    uint8_t obuf[BS_HEADER_BYTES + BS_ERROR_TEXT_MAX];
    size_t out_len, out_off;
} bs_root_conn_t;

typedef struct bs_root {
    int listen_fd;
    uint8_t secret[HAL_BOOTSTRAP_SECRET_BYTES];
    uint32_t timeout_ms;
    int64_t deadline;
    bs_root_conn_t *conns;
    size_t nconns, cap;
    int nranks; /* 0 until the first rank joined */
    int joined;
    bool *taken;
    uint8_t *table; /* TABLE frame: header, then nranks entries */
    size_t table_len;
    bool complete; /* every rank joined; the table is going out */
    bool finished; /* failed; leaving */
} bs_root_t;

static bool bs_root_pending(const bs_root_conn_t *c)
{
    return c->state != RS_JOINED && c->state != RS_SEND_TABLE && c->state != RS_CLOSED;
}

static void bs_root_close(bs_root_conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->state = RS_CLOSED;
}

static size_t bs_error_frame(uint8_t *out, hal_status_t st, const char *fmt, va_list ap)
{
    char text[BS_ERROR_TEXT_MAX + 1];
    int n = vsnprintf(text, sizeof(text), fmt, ap);
    size_t len = n < 0 ? 0 : (size_t)n > BS_ERROR_TEXT_MAX ? BS_ERROR_TEXT_MAX : (size_t)n;
    put32(out, BS_FRAME_ERROR);
    put32(out + 4, (uint32_t)st);
    put64(out + 8, len);
    memcpy(out + BS_HEADER_BYTES, text, len);
    return BS_HEADER_BYTES + len;
}

/* Tells one connection why it cannot join, then closes it once that is written. */
__attribute__((format(printf, 4, 5))) static void
bs_root_reject(bs_root_t *r, bs_root_conn_t *c, hal_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    c->out_len = bs_error_frame(c->obuf, st, fmt, ap);
    va_end(ap);
    c->out_off = 0;
    c->out_table = false;
    c->state = RS_SEND_REJECT;
    int64_t limit = bs_now_ms() + BS_HANDSHAKE_MS;
    c->deadline = limit < r->deadline ? limit : r->deadline;
}

/* The job cannot complete: tells every joined rank why (best effort, without blocking) and closes
 * everything. */
__attribute__((format(printf, 3, 4))) static void bs_root_fail(bs_root_t *r, hal_status_t st,
                                                               const char *fmt, ...)
{
    uint8_t frame[BS_HEADER_BYTES + BS_ERROR_TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    size_t len = bs_error_frame(frame, st, fmt, ap);
    va_end(ap);
    for (size_t i = 0; i < r->nconns; i++) {
        bs_root_conn_t *c = &r->conns[i];
        if (c->state == RS_JOINED) {
            ssize_t n;
            do
                n = send(c->fd, frame, len, MSG_NOSIGNAL | MSG_DONTWAIT);
            while (n < 0 && errno == EINTR);
        }
        bs_root_close(c);
    }
    r->finished = true;
}

/* Moves bytes between fd and buf[*off..len) without blocking: 1 when all have moved, 0 when the
 * socket would block, -1 on EOF or error. */
static int bs_root_io(int fd, uint8_t *buf, size_t *off, size_t len, bool writing)
{
    while (*off < len) {
        ssize_t n = writing ? send(fd, buf + *off, len - *off, MSG_NOSIGNAL)
                            : recv(fd, buf + *off, len - *off, 0);
        if (n > 0) {
            *off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        return -1;
    }
    return 1;
}

/* Writes what is pending: 1 when all is out, 0 when the socket is full, -1 on error. */
static int bs_root_flush(bs_root_t *r, bs_root_conn_t *c)
{
    return bs_root_io(c->fd, c->out_table ? r->table : c->obuf, &c->out_off, c->out_len, true);
}

/* Reads toward in_need (always a fixed size): 1 when complete, 0 for later, -1 on EOF/error. */
static int bs_root_fill(bs_root_conn_t *c)
{
    return bs_root_io(c->fd, c->in, &c->in_len, c->in_need, false);
}

static void bs_root_on_auth2(bs_root_t *r, bs_root_conn_t *c)
{
    uint32_t a_rank;
    uint8_t c_inst[BS_INSTANCE_BYTES], a_inst[BS_INSTANCE_BYTES];
    bool ok = bs_auth2_verify(r->secret, c->a1, c->in, BS_KIND_ROOT, &c->claimed, &a_rank, c_inst,
                              a_inst);
    uint32_t status = ok && a_rank == BS_ROOT_RANK ? BS_AUTH_OK : BS_AUTH_DENIED;
    bs_auth3_make(r->secret, c->a1, c->in, status, c->obuf);
    c->out_len = BS_AUTH3_BYTES;
    c->out_off = 0;
    c->out_table = false;
    c->state = status == BS_AUTH_OK ? RS_SEND_AUTH3 : RS_SEND_REJECT;
}

static void bs_root_on_hello(bs_root_t *r, bs_root_conn_t *c)
{
    const uint8_t *h = c->in;
    if (get32(h) != BS_FRAME_HELLO || get32(h + 4) != 0 || get64(h + 8) != BS_ENTRY_BYTES) {
        bs_root_reject(r, c, HAL_ERROR_INVALID_ARGUMENT, "malformed hello");
        return;
    }
    bs_entry_t e;
    const char *why = bs_entry_decode(h + BS_HEADER_BYTES, &e);
    if (why != NULL) {
        bs_root_reject(r, c, HAL_ERROR_INVALID_ARGUMENT, "malformed hello: %s", why);
        return;
    }
    int rank = e.peer.rank;
    if ((uint32_t)rank != c->claimed) {
        bs_root_reject(r, c, HAL_ERROR_INVALID_ARGUMENT, "hello for rank %d after claiming %u",
                       rank, c->claimed);
        return;
    }
    if (r->nranks == 0) {
        size_t n = (size_t)e.nranks;
        r->taken = calloc(n, sizeof(bool));
        r->table_len = BS_HEADER_BYTES + n * BS_ENTRY_BYTES;
        r->table = calloc(1, r->table_len);
        if (r->taken == NULL || r->table == NULL) {
            free(r->taken);
            free(r->table);
            r->taken = NULL;
            r->table = NULL;
            bs_root_reject(r, c, HAL_ERROR_OUT_OF_HOST_MEMORY,
                           "the bootstrap root is out of memory");
            return;
        }
        r->nranks = e.nranks;
    } else if (e.nranks != r->nranks) {
        bs_root_reject(r, c, HAL_ERROR_INVALID_ARGUMENT,
                       "rank %d joined with nranks %d, but the ranks that joined first said %d",
                       rank, e.nranks, r->nranks);
        return;
    }
    uint8_t *slot = r->table + BS_HEADER_BYTES + (size_t)rank * BS_ENTRY_BYTES;
    if (r->taken[rank]) {
        bs_root_reject(r, c, HAL_ERROR_INVALID_ARGUMENT,
                       "rank %d is already taken (by pid %d); each rank must join once", rank,
                       (int32_t)get32(slot + 16));
        return;
    }
    memcpy(slot, h + BS_HEADER_BYTES, BS_ENTRY_BYTES);
    r->taken[rank] = true;
    r->joined++;
    c->rank = rank;
    c->state = RS_JOINED;
    if (r->joined < r->nranks)
        return;

    /* Everyone is here: the table goes to every rank; nobody else may join. */
    put32(r->table, BS_FRAME_TABLE);
    put32(r->table + 4, 0);
    put64(r->table + 8, (uint64_t)r->nranks * BS_ENTRY_BYTES);
    r->complete = true;
    for (size_t i = 0; i < r->nconns; i++) {
        bs_root_conn_t *o = &r->conns[i];
        if (o->state == RS_JOINED) {
            o->state = RS_SEND_TABLE;
            o->out_table = true;
            o->out_len = r->table_len;
            o->out_off = 0;
        } else if (o->state != RS_CLOSED) {
            bs_root_close(o);
        }
    }
    close(r->listen_fd);
    r->listen_fd = -1;
    /* Leave the ranks time to read the table even if the job used up most of its timeout. */
    int64_t linger = bs_now_ms() + BS_HANDSHAKE_MS;
    if (r->deadline < linger)
        r->deadline = linger;
}

/* Advances one connection as far as its socket allows. */
static void bs_root_step(bs_root_t *r, bs_root_conn_t *c)
{
    while (!r->finished && c->state != RS_CLOSED) {
        int rc;
        switch (c->state) {
        case RS_SEND_AUTH1:
        case RS_SEND_AUTH3:
        case RS_SEND_TABLE:
        case RS_SEND_REJECT:
            rc = bs_root_flush(r, c);
            if (rc == 0)
                return;
            if (rc < 0 || c->state == RS_SEND_TABLE || c->state == RS_SEND_REJECT) {
                /* Everything we had to say is in the kernel's buffer (and we read everything the
                 * rank sent), so close() delivers it before the FIN. A rank whose table write
                 * failed sees the connection drop. */
                bs_root_close(c);
                return;
            }
            c->in_len = 0;
            if (c->state == RS_SEND_AUTH1) {
                c->state = RS_RECV_AUTH2;
                c->in_need = BS_AUTH2_BYTES;
            } else {
                c->state = RS_RECV_HELLO;
                c->in_need = BS_HEADER_BYTES + BS_ENTRY_BYTES;
            }
            break;
        case RS_RECV_AUTH2:
        case RS_RECV_HELLO:
            rc = bs_root_fill(c);
            if (rc == 0)
                return;
            if (rc < 0) {
                bs_root_close(c); /* had not joined: nothing to undo */
                return;
            }
            if (c->state == RS_RECV_AUTH2)
                bs_root_on_auth2(r, c);
            else
                bs_root_on_hello(r, c);
            break;
        case RS_JOINED: {
            uint8_t byte;
            ssize_t n = recv(c->fd, &byte, 1, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return;
            if (n > 0)
                bs_root_fail(r, HAL_ERROR_REMOTE, "rank %d broke the bootstrap protocol", c->rank);
            else
                bs_root_fail(r, HAL_ERROR_REMOTE, "rank %d left before all %d ranks joined",
                             c->rank, r->nranks);
            return;
        }
        default:
            return;
        }
    }
}

static void bs_root_accept(bs_root_t *r, size_t *pending, int64_t *listen_pause)
{
    while (*pending < BS_ROOT_MAX_PENDING && !r->finished && !r->complete) {
        int fd = accept4(r->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            /* Out of descriptors or memory: the listener stays readable, so look away for a moment
             * instead of spinning. */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                *listen_pause = bs_now_ms() + 100;
            return;
        }
        if (r->nconns == r->cap) {
            size_t cap = r->cap ? r->cap * 2 : 16;
            bs_root_conn_t *conns = realloc(r->conns, cap * sizeof(*conns));
            if (conns == NULL) {
                close(fd);
                return;
            }
            r->conns = conns;
            r->cap = cap;
        }
        bs_root_conn_t *c = &r->conns[r->nconns];
        memset(c, 0, sizeof(*c));
        c->fd = fd;
        c->rank = -1;
        int64_t limit = bs_now_ms() + BS_HANDSHAKE_MS;
        c->deadline = limit < r->deadline ? limit : r->deadline;
        if (bs_auth1_make(BS_KIND_ROOT, c->a1) != 0) {
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        memcpy(c->obuf, c->a1, BS_AUTH1_BYTES);
        c->out_len = BS_AUTH1_BYTES;
        c->state = RS_SEND_AUTH1;
        r->nconns++;
        (*pending)++;
        bs_root_step(r, c);
    }
}

static void *bs_root_main(void *arg)
{
    bs_root_t *r = arg;
    struct pollfd *pfds = NULL;
    size_t pfds_cap = 0;
    int64_t listen_pause = 0;
    while (!r->finished) {
        int64_t now = bs_now_ms();
        /* Drop connections that overstayed their handshake; compact the array. */
        size_t live = 0, pending = 0;
        int64_t wake_at = r->deadline;
        for (size_t i = 0; i < r->nconns; i++) {
            bs_root_conn_t *c = &r->conns[i];
            if (bs_root_pending(c) && now >= c->deadline)
                bs_root_close(c);
            if (c->state == RS_CLOSED)
                continue;
            if (bs_root_pending(c)) {
                pending++;
                if (c->deadline < wake_at)
                    wake_at = c->deadline;
            }
            r->conns[live++] = *c;
        }
        r->nconns = live;
        if (now >= r->deadline) {
            if (!r->complete) {
                if (r->nranks > 0)
                    bs_root_fail(r, HAL_ERROR_TIMEOUT,
                                 "timed out after %u ms waiting for %d of %d ranks to join",
                                 r->timeout_ms, r->nranks - r->joined, r->nranks);
                else
                    bs_root_fail(r, HAL_ERROR_TIMEOUT, "timed out waiting for ranks to join");
            }
            break;
        }
        if (r->complete && r->nconns == 0)
            break;
        if (pfds_cap < r->nconns + 1) {
            size_t cap = (r->nconns + 1) * 2;
            struct pollfd *p = realloc(pfds, cap * sizeof(*p));
            if (p == NULL) {
                bs_root_fail(r, HAL_ERROR_OUT_OF_HOST_MEMORY,
                             "the bootstrap root ran out of memory");
                break;
            }
            pfds = p;
            pfds_cap = cap;
        }
        bool listening = !r->complete && r->listen_fd >= 0 && pending < BS_ROOT_MAX_PENDING &&
                         now >= listen_pause;
        if (listen_pause > now && listen_pause < wake_at)
            wake_at = listen_pause;
        pfds[0] = (struct pollfd){ listening ? r->listen_fd : -1, POLLIN, 0 };
        for (size_t i = 0; i < r->nconns; i++) {
            int s = r->conns[i].state;
            bool out = s == RS_SEND_AUTH1 || s == RS_SEND_AUTH3 || s == RS_SEND_TABLE ||
                       s == RS_SEND_REJECT;
            pfds[i + 1] = (struct pollfd){ r->conns[i].fd, out ? POLLOUT : POLLIN, 0 };
        }
        size_t polled = r->nconns;
        int rc = poll(pfds, polled + 1, bs_poll_timeout(wake_at));
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            bs_root_fail(r, HAL_ERROR_INTERNAL, "the bootstrap root's poll failed");
            break;
        }
        for (size_t i = 0; i < polled && !r->finished; i++)
            if (pfds[i + 1].revents && r->conns[i].state != RS_CLOSED)
                bs_root_step(r, &r->conns[i]);
        if (listening && pfds[0].revents && !r->finished)
            bs_root_accept(r, &pending, &listen_pause);
    }
    for (size_t i = 0; i < r->nconns; i++)
        bs_root_close(&r->conns[i]);
    if (r->listen_fd >= 0)
        close(r->listen_fd);
    free(pfds);
    free(r->conns);
    free(r->taken);
    free(r->table);
    memset(r->secret, 0, sizeof(r->secret));
    free(r);
    return NULL;
}

/* Makes a new id (random secret and nonce) and, without HAL_COMM_ID_FLAG_STORE, starts the root
 * thread listening on HAL_COMM_BIND; it serves one rendezvous and exits after timeout_ms at the
 * latest. Returns HAL_OK, HAL_ERROR_INVALID_ARGUMENT (id NULL, unknown flags, bad HAL_COMM_BIND),
 * HAL_ERROR_OUT_OF_HOST_MEMORY or HAL_ERROR_BACKEND_SPECIFIC (socket, thread or random source
 * failure). Thread safety: safe. */
hal_status_t hal_bootstrap_new_id(uint32_t flags, uint32_t timeout_ms, hal_unique_id_t *id)
{
    const char *call = "hal_comm_get_unique_id";
    char eb[96];
    HAL_CHECK_NOT_NULL(id, NULL, call);
    if (flags & ~HAL_COMM_ID_FLAG_STORE)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "unknown flags 0x%x", flags);
    bs_id_t d;
    memset(&d, 0, sizeof(d));
    d.flags = flags;
    if (bs_random(d.secret, sizeof(d.secret)) != 0 || bs_random(d.nonce, sizeof(d.nonce)) != 0)
        return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call, "getrandom failed: %s",
                         bs_strerror(errno, eb, sizeof(eb)));
    if (!(flags & HAL_COMM_ID_FLAG_STORE)) {
        bs_addr_t bind_addr;
        int fd;
        HAL_CHECK(bs_parse_bind(call, &bind_addr));
        HAL_CHECK(bs_listen(&bind_addr, bs_addr_port(&bind_addr) != 0, call, &fd, &d.root));
        if (bs_addr_is_any(&d.root))
            bs_addr_reachable(&d.root);
        bs_root_t *r = calloc(1, sizeof(*r));
        if (r == NULL) {
            close(fd);
            return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, NULL, call, "out of host memory");
        }
        r->listen_fd = fd;
        memcpy(r->secret, d.secret, sizeof(r->secret));
        r->timeout_ms = timeout_ms;
        r->deadline = bs_now_ms() + timeout_ms;
        pthread_t thread;
        int rc = bs_start_thread(&thread, bs_root_main, r, true);
        if (rc != 0) {
            close(fd);
            memset(r->secret, 0, sizeof(r->secret));
            free(r);
            memset(d.secret, 0, sizeof(d.secret));
            return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call,
                             "cannot start the bootstrap root thread: %s",
                             bs_strerror(rc, eb, sizeof(eb)));
        }
    }
    bs_id_encode(&d, id->internal);
    memset(d.secret, 0, sizeof(d.secret));
    return HAL_OK;
}
