/* SPDX-License-Identifier: Apache-2.0 */
/* libnrt emulator, out-of-NEFF collectives (emu_cc_internal.h has the overview): sockets whose
 * every wait has a deadline and ends when nrt_close cancels, and the rendezvous that connects the
 * members of the global communicator. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hal_backends/trainium/emulator/emu_cc_internal.h"

#define CC_HELLO_MAGIC  0x4e434831u /* a member to the root */
#define CC_PEER_MAGIC   0x4e435031u /* a member to another */
#define CC_TABLE_MAGIC  0x4e435431u /* the root's answer */
#define CC_REJECT_MAGIC 0x4e435231u /* the root refuses a member */

/* ---- Sockets: every wait has a deadline and ends when nrt_close cancels -------------------- */

/* Waits until fd is ready for `events`. NRT_SUCCESS, NRT_TIMEOUT, NRT_CLOSED (cancelled) or
 * NRT_FAILURE. */
static NRT_STATUS wait_fd(int fd, short events, uint64_t deadline)
{
    for (;;) {
        if (atomic_load(&cc_stopping))
            return NRT_CLOSED;
        uint64_t now = emu_now_ns();
        if (now >= deadline)
            return NRT_TIMEOUT;
        uint64_t left_ms = (deadline - now + 999999u) / 1000000u;
        struct pollfd p[2] = { { .fd = fd, .events = events },
                               { .fd = cc.wake[0], .events = POLLIN } };
        int n = poll(p, p[1].fd >= 0 ? 2 : 1, left_ms > 100 ? 100 : (int)left_ms);
        if (n < 0 && errno != EINTR)
            return NRT_FAILURE;
        if (n > 0 && p[1].fd >= 0 && (p[1].revents & POLLIN))
            return NRT_CLOSED;
        if (n > 0 && p[0].revents != 0)
            return NRT_SUCCESS;
    }
}

/* Sends all of buf on a non-blocking socket before the deadline. */
static NRT_STATUS send_all(int fd, const void *buf, size_t len, uint64_t deadline)
{
    const unsigned char *p = buf;
    while (len > 0) {
        ssize_t k = send(fd, p, len, MSG_NOSIGNAL);
        if (k > 0) {
            p += k;
            len -= (size_t)k;
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            NRT_STATUS st = wait_fd(fd, POLLOUT, deadline);
            if (st != NRT_SUCCESS)
                return st;
        } else if (k < 0 && errno == EINTR) {
            continue;
        } else {
            return NRT_FAILURE;
        }
    }
    return NRT_SUCCESS;
}

/* Receives exactly len bytes before the deadline; NRT_FAILURE when the peer closed. */
static NRT_STATUS recv_all(int fd, void *buf, size_t len, uint64_t deadline)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t k = recv(fd, p, len, 0);
        if (k > 0) {
            p += k;
            len -= (size_t)k;
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            NRT_STATUS st = wait_fd(fd, POLLIN, deadline);
            if (st != NRT_SUCCESS)
                return st;
        } else if (k < 0 && errno == EINTR) {
            continue;
        } else {
            return NRT_FAILURE; /* closed by the peer, or reset */
        }
    }
    return NRT_SUCCESS;
}

/* Small headers go out at once. */
static void tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Connects to addr, retrying while nobody listens there yet. Returns the socket or -1 with *st. */
static int connect_to(const struct sockaddr_in *addr, uint64_t deadline, NRT_STATUS *st)
{
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            *st = NRT_FAILURE;
            return -1;
        }
        int rc = connect(fd, (const struct sockaddr *)addr, sizeof(*addr));
        int err = rc == 0 ? 0 : errno;
        if (err == EINPROGRESS) {
            *st = wait_fd(fd, POLLOUT, deadline);
            if (*st != NRT_SUCCESS) {
                close(fd);
                return -1;
            }
            socklen_t len = sizeof(err);
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
                err = errno;
        }
        if (err == 0) {
            tune(fd);
            *st = NRT_SUCCESS;
            return fd;
        }
        close(fd);
        if (err != ECONNREFUSED && err != ETIMEDOUT && err != EAGAIN) {
            *st = NRT_FAILURE;
            return -1;
        }
        /* Nobody listens yet: try again shortly. */
        int pipe_fd = cc.wake[0];
        *st = pipe_fd >= 0 ? wait_fd(pipe_fd, POLLIN, emu_now_ns() + 10000000u) : NRT_TIMEOUT;
        if (*st == NRT_SUCCESS || *st == NRT_CLOSED || atomic_load(&cc_stopping)) {
            *st = NRT_CLOSED;
            return -1;
        }
        if (emu_now_ns() >= deadline) {
            *st = NRT_TIMEOUT;
            return -1;
        }
    }
}

/* Accepts one connection before the deadline. Returns the socket or -1 with *st. */
static int accept_one(int lfd, uint64_t deadline, NRT_STATUS *st)
{
    for (;;) {
        *st = wait_fd(lfd, POLLIN, deadline);
        if (*st != NRT_SUCCESS)
            return -1;
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            tune(fd);
            return fd;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
            *st = NRT_FAILURE;
            return -1;
        }
    }
}

/* A non-blocking listening socket bound to addr, or -1. */
static int listen_on(const struct sockaddr_in *addr, bool reuse, int backlog)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    if (reuse)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)addr, sizeof(*addr)) != 0 || listen(fd, backlog) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* "ip:port" or "host:port" (IPv4). */
bool cc_parse_root(const char *text, struct sockaddr_in *out)
{
    const char *colon = strrchr(text, ':');
    uint64_t port = 0;
    if (colon == NULL || colon == text || !emu_parse_u64(colon + 1, &port) || port == 0 ||
        port > 65535)
        return false;
    char host[256];
    size_t len = (size_t)(colon - text);
    if (len >= sizeof(host))
        return false;
    memcpy(host, text, len);
    host[len] = '\0';
    memset(out, 0, sizeof(*out));
    out->sin_family = AF_INET;
    out->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &out->sin_addr) == 1)
        return true;
    struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || res == NULL)
        return false;
    out->sin_addr = ((const struct sockaddr_in *)(const void *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return true;
}

/* "ip:port" of an address, for messages. */
static const char *addr_text(const struct sockaddr_in *a, char *buf, size_t size)
{
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
    snprintf(buf, size, "%s:%u", ip, ntohs(a->sin_port));
    return buf;
}

/* ---- Rendezvous ---------------------------------------------------------------------------- */

typedef struct cc_hello {
    uint32_t magic; /* CC_HELLO_MAGIC or CC_PEER_MAGIC */
    uint32_t g_id, g_count;
    uint32_t ip;   /* where this member listens, network order */
    uint32_t port; /* host order */
    uint32_t pid;
} cc_hello_t;

typedef struct cc_endpoint {
    uint32_t ip, port;
} cc_endpoint_t;

NRT_STATUS cc_rendezvous_root(const char *api, const struct sockaddr_in *root, uint32_t count,
                              uint64_t deadline, int *fds)
{
    int lfd = listen_on(root, true, (int)count);
    if (lfd < 0) {
        char text[64];
        EMU_ERR(api, "global device 0 cannot listen on NEURON_RT_ROOT_COMM_ID (%s): %s",
                addr_text(root, text, sizeof(text)), strerror(errno));
        return NRT_FAILURE;
    }
    cc_endpoint_t *table = calloc(count, sizeof(*table));
    NRT_STATUS st = table != NULL ? NRT_SUCCESS : NRT_RESOURCE;
    uint32_t joined = 1;
    while (st == NRT_SUCCESS && joined < count) {
        int fd = accept_one(lfd, deadline, &st);
        if (fd < 0)
            break;
        cc_hello_t h;
        NRT_STATUS rs = recv_all(fd, &h, sizeof(h), deadline);
        if (rs != NRT_SUCCESS || h.magic != CC_HELLO_MAGIC || h.g_count != count || h.g_id == 0 ||
            h.g_id >= count || fds[h.g_id] >= 0) {
            if (rs == NRT_SUCCESS && h.magic == CC_HELLO_MAGIC) {
                EMU_WARN(api,
                         "refusing global device %u of %u (pid %u): this communicator has %u "
                         "devices%s",
                         h.g_id, h.g_count, h.pid, count,
                         h.g_id < count && fds[h.g_id] >= 0 ? " and that one joined already" : "");
                uint32_t reject[2] = { CC_REJECT_MAGIC, count };
                send_all(fd, reject, sizeof(reject), deadline);
            }
            close(fd);
            if (rs == NRT_TIMEOUT || rs == NRT_CLOSED)
                st = rs;
            continue;
        }
        fds[h.g_id] = fd;
        table[h.g_id].ip = h.ip;
        table[h.g_id].port = h.port;
        joined++;
    }
    close(lfd);
    uint32_t head[2] = { CC_TABLE_MAGIC, count };
    for (uint32_t i = 1; i < count && st == NRT_SUCCESS; i++) {
        st = send_all(fds[i], head, sizeof(head), deadline);
        if (st == NRT_SUCCESS)
            st = send_all(fds[i], table, count * sizeof(*table), deadline);
    }
    free(table);
    if (st == NRT_TIMEOUT)
        EMU_ERR(api,
                "global device 0: %u of %u devices joined through NEURON_RT_ROOT_COMM_ID before "
                "the timeout",
                joined, count);
    return st;
}

NRT_STATUS cc_rendezvous_member(const char *api, const struct sockaddr_in *root, uint32_t id,
                                uint32_t count, uint64_t deadline, int *fds)
{
    NRT_STATUS st;
    int rfd = connect_to(root, deadline, &st);
    if (rfd < 0) {
        char text[64];
        if (st == NRT_TIMEOUT)
            EMU_ERR(api,
                    "global device %u: nobody listens on NEURON_RT_ROOT_COMM_ID (%s) for global "
                    "device 0",
                    id, addr_text(root, text, sizeof(text)));
        return st;
    }
    fds[0] = rfd;
    /* Listen where the root sees this member (its address on the way to the root). */
    struct sockaddr_in mine;
    socklen_t len = sizeof(mine);
    int lfd = -1;
    if (getsockname(rfd, (struct sockaddr *)&mine, &len) == 0) {
        mine.sin_port = 0;
        lfd = listen_on(&mine, false, (int)count);
    }
    if (lfd < 0 || getsockname(lfd, (struct sockaddr *)&mine, &len) != 0) {
        EMU_ERR(api, "global device %u cannot listen for its peers: %s", id, strerror(errno));
        if (lfd >= 0)
            close(lfd);
        return NRT_FAILURE;
    }
    cc_hello_t h = { .magic = CC_HELLO_MAGIC,
                     .g_id = id,
                     .g_count = count,
                     .ip = mine.sin_addr.s_addr,
                     .port = ntohs(mine.sin_port),
                     .pid = (uint32_t)getpid() };
    uint32_t head[2] = { 0, 0 };
    cc_endpoint_t *table = calloc(count, sizeof(*table));
    st = table != NULL ? send_all(rfd, &h, sizeof(h), deadline) : NRT_RESOURCE;
    if (st == NRT_SUCCESS)
        st = recv_all(rfd, head, sizeof(head), deadline);
    if (st == NRT_SUCCESS && head[0] != CC_TABLE_MAGIC) {
        EMU_ERR(api,
                "global device %u of %u: the root refused it (global device count %u there, or "
                "another process joined as device %u)",
                id, count, head[1], id);
        st = NRT_INVALID;
    }
    if (st == NRT_SUCCESS)
        st = recv_all(rfd, table, count * sizeof(*table), deadline);
    /* Connect to the members below, accept the ones above. */
    for (uint32_t k = 1; k < id && st == NRT_SUCCESS; k++) {
        struct sockaddr_in to = { .sin_family = AF_INET,
                                  .sin_port = htons((uint16_t)table[k].port) };
        to.sin_addr.s_addr = table[k].ip;
        fds[k] = connect_to(&to, deadline, &st);
        cc_hello_t p = { .magic = CC_PEER_MAGIC, .g_id = id, .g_count = count };
        if (st == NRT_SUCCESS)
            st = send_all(fds[k], &p, sizeof(p), deadline);
    }
    for (uint32_t left = count - 1 - id; left > 0 && st == NRT_SUCCESS;) {
        int fd = accept_one(lfd, deadline, &st);
        if (fd < 0)
            break;
        cc_hello_t p;
        NRT_STATUS rs = recv_all(fd, &p, sizeof(p), deadline);
        if (rs != NRT_SUCCESS || p.magic != CC_PEER_MAGIC || p.g_count != count || p.g_id <= id ||
            p.g_id >= count || fds[p.g_id] >= 0) {
            close(fd);
            if (rs == NRT_TIMEOUT || rs == NRT_CLOSED)
                st = rs;
            continue;
        }
        fds[p.g_id] = fd;
        left--;
    }
    close(lfd);
    free(table);
    if (st == NRT_TIMEOUT)
        EMU_ERR(api, "global device %u of %u: its peers did not all connect before the timeout", id,
                count);
    return st;
}
