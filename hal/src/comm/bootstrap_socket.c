/* SPDX-License-Identifier: Apache-2.0 */
/* The bootstrap's addresses (HAL_COMM_BIND, the address block of the wire formats), sockets
 * whose every wait honours a deadline and the abort fd, and the small clock, random and thread
 * helpers its other parts share. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hal/src/comm/bootstrap.h"
#include "hal/src/comm/bootstrap_internal.h"
#include "hal/src/service.h"

/* ---- small helpers ---- */

int64_t bs_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int bs_poll_timeout(int64_t deadline)
{
    int64_t left = deadline - bs_now_ms();
    if (left < 0)
        return 0;
    return left > INT_MAX ? INT_MAX : (int)left;
}

int bs_random(void *buf, size_t size)
{
    uint8_t *p = buf;
    while (size > 0) {
        ssize_t n = getrandom(p, size, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        size -= (size_t)n;
    }
    return 0;
}

const char *bs_strerror(int err, char *buf, size_t size)
{
    return strerror_r(err, buf, size); /* GNU variant: returns the message */
}

/* Runs fn on a new thread with every signal blocked, so the application's signal handlers keep
 * running on its own threads and ours never see EINTR storms. */
int bs_start_thread(pthread_t *thread, void *(*fn)(void *), void *arg, bool detached)
{
    sigset_t all, old;
    pthread_attr_t attr;
    sigfillset(&all);
    pthread_attr_init(&attr);
    if (detached)
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(thread, &attr, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return rc;
}

/* ---- addresses ---- */

static void bs_addr_loopback(bs_addr_t *a, int family)
{
    memset(a, 0, sizeof(*a));
    if (family == AF_INET6) {
        a->u.in6.sin6_family = AF_INET6;
        a->u.in6.sin6_addr = in6addr_loopback;
        a->len = sizeof(a->u.in6);
    } else {
        a->u.in4.sin_family = AF_INET;
        a->u.in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a->len = sizeof(a->u.in4);
    }
}

/* Copies a kernel- or resolver-made address of length len (at most sizeof(a->u)). */
static void bs_addr_set(bs_addr_t *a, const void *sa, socklen_t len)
{
    memset(a, 0, sizeof(*a));
    memcpy(&a->u, sa, len);
    a->len = len;
}

uint16_t bs_addr_port(const bs_addr_t *a)
{
    if (a->u.sa.sa_family == AF_INET)
        return ntohs(a->u.in4.sin_port);
    if (a->u.sa.sa_family == AF_INET6)
        return ntohs(a->u.in6.sin6_port);
    return 0;
}

void bs_addr_set_port(bs_addr_t *a, uint16_t port)
{
    if (a->u.sa.sa_family == AF_INET)
        a->u.in4.sin_port = htons(port);
    else if (a->u.sa.sa_family == AF_INET6)
        a->u.in6.sin6_port = htons(port);
}

bool bs_addr_is_any(const bs_addr_t *a)
{
    if (a->u.sa.sa_family == AF_INET)
        return a->u.in4.sin_addr.s_addr == htonl(INADDR_ANY);
    if (a->u.sa.sa_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&a->u.in6.sin6_addr);
    return false;
}

static bool bs_addr_is_loopback(const bs_addr_t *a)
{
    if (a->u.sa.sa_family == AF_INET)
        return (ntohl(a->u.in4.sin_addr.s_addr) >> 24) == 127;
    if (a->u.sa.sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&a->u.in6.sin6_addr);
    return false;
}

void bs_addr_str(const bs_addr_t *a, char *buf, size_t size)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (a->u.sa.sa_family == AF_INET) {
        inet_ntop(AF_INET, &a->u.in4.sin_addr, host, sizeof(host));
        snprintf(buf, size, "%s:%u", host, bs_addr_port(a));
    } else if (a->u.sa.sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &a->u.in6.sin6_addr, host, sizeof(host));
        snprintf(buf, size, "[%s]:%u", host, bs_addr_port(a));
    } else {
        snprintf(buf, size, "(no address)");
    }
}

void bs_addr_encode(const bs_addr_t *a, uint8_t out[BS_ADDR_BYTES])
{
    memset(out, 0, BS_ADDR_BYTES);
    if (a->u.sa.sa_family == AF_INET) {
        out[0] = 4;
        memcpy(out + 8, &a->u.in4.sin_addr, 4);
    } else if (a->u.sa.sa_family == AF_INET6) {
        out[0] = 6;
        put32(out + 4, a->u.in6.sin6_scope_id);
        memcpy(out + 8, &a->u.in6.sin6_addr, 16);
    } else {
        return;
    }
    put16(out + 2, bs_addr_port(a));
}

/* Pure: decodes an address block; returns NULL or what is wrong with it. */
const char *bs_addr_decode(const uint8_t in[BS_ADDR_BYTES], bs_addr_t *a)
{
    memset(a, 0, sizeof(*a));
    if (in[1] != 0)
        return "reserved address byte is not zero";
    switch (in[0]) {
    case 0:
        if (!all_zero(in, BS_ADDR_BYTES))
            return "address of family 'none' is not empty";
        a->u.sa.sa_family = AF_UNSPEC;
        return NULL;
    case 4:
        if (get32(in + 4) != 0 || !all_zero(in + 12, 12))
            return "IPv4 address block has stray bytes";
        a->u.in4.sin_family = AF_INET;
        memcpy(&a->u.in4.sin_addr, in + 8, 4);
        a->u.in4.sin_port = htons(get16(in + 2));
        a->len = sizeof(a->u.in4);
        return NULL;
    case 6:
        a->u.in6.sin6_family = AF_INET6;
        memcpy(&a->u.in6.sin6_addr, in + 8, 16);
        a->u.in6.sin6_scope_id = get32(in + 4);
        a->u.in6.sin6_port = htons(get16(in + 2));
        a->len = sizeof(a->u.in6);
        return NULL;
    default:
        return "unknown address family";
    }
}

/* RFC 1123 host name syntax, and not all digits and dots (that is a malformed IPv4 literal, which
 * must not turn into a DNS query). */
static bool bs_valid_hostname(const char *s)
{
    size_t n = strlen(s), label = 0;
    bool alpha = false;
    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '.') {
            if (label == 0 || s[i - 1] == '-')
                return false;
            label = 0;
            continue;
        }
        bool letter = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        bool digit = ch >= '0' && ch <= '9';
        if (!letter && !digit && ch != '-')
            return false;
        if (ch == '-' && label == 0)
            return false;
        if (++label > 63)
            return false;
        alpha |= letter || ch == '-';
    }
    return alpha && s[n - 1] != '-';
}

/* Resolves HAL_COMM_BIND: unset or empty means 127.0.0.1 with an ephemeral port; otherwise an IPv4
 * literal, an IPv6 literal (bracketed when followed by ":port"), or a host name, each with an
 * optional ":port". */
hal_status_t bs_parse_bind(const char *call, bs_addr_t *out)
{
    const char *env = getenv("HAL_COMM_BIND");
    char value[300];
    if (env == NULL || env[0] == '\0') {
        bs_addr_loopback(out, AF_INET);
        return HAL_OK;
    }
    if (strlen(env) >= sizeof(value))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "HAL_COMM_BIND is too long");
    strcpy(value, env);

    char *host = value, *port = NULL;
    bool bracketed = false;
    if (value[0] == '[') {
        char *close = strchr(value, ']');
        if (close == NULL)
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                             "HAL_COMM_BIND=\"%s\": '[' without ']'", env);
        *close = '\0';
        host = value + 1;
        bracketed = true;
        if (close[1] == ':')
            port = close + 2;
        else if (close[1] != '\0')
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                             "HAL_COMM_BIND=\"%s\": unexpected text after ']'", env);
    } else {
        /* One colon separates a port; more than one make an IPv6 literal without a port. */
        char *colon = strchr(value, ':');
        if (colon != NULL && strchr(colon + 1, ':') == NULL) {
            *colon = '\0';
            port = colon + 1;
        }
    }
    if (host[0] == '\0')
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "HAL_COMM_BIND=\"%s\": empty address", env);
    unsigned long portnum = 0;
    if (port != NULL) {
        if (port[0] == '\0' || strspn(port, "0123456789") != strlen(port) || strlen(port) > 5 ||
            (portnum = strtoul(port, NULL, 10)) > 65535)
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                             "HAL_COMM_BIND=\"%s\": port must be a number from 0 to 65535", env);
    }

    struct addrinfo hints = { 0 }, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_family = bracketed ? AF_INET6 : AF_UNSPEC;
    hints.ai_flags = AI_NUMERICHOST;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0) {
        if (bracketed || !bs_valid_hostname(host))
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                             "HAL_COMM_BIND=\"%s\": not an IPv4 or IPv6 address or a host name",
                             env);
        hints.ai_flags = 0;
        rc = getaddrinfo(host, NULL, &hints, &res);
        if (rc != 0)
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                             "HAL_COMM_BIND=\"%s\": cannot resolve \"%s\": %s", env, host,
                             gai_strerror(rc));
    }
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *ai = res; ai != NULL && pick == NULL; ai = ai->ai_next)
        if (ai->ai_family == AF_INET || ai->ai_family == AF_INET6)
            pick = ai;
    if (pick == NULL || pick->ai_addrlen > sizeof(out->u)) {
        freeaddrinfo(res);
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "HAL_COMM_BIND=\"%s\": no IPv4 or IPv6 address", env);
    }
    bs_addr_set(out, pick->ai_addr, pick->ai_addrlen);
    freeaddrinfo(res);
    bs_addr_set_port(out, (uint16_t)portnum);
    return HAL_OK;
}

/* Replaces a wildcard address with one this host can be reached at (the first non-loopback address
 * of the host name, else loopback), keeping the port. */
void bs_addr_reachable(bs_addr_t *a)
{
    uint16_t port = bs_addr_port(a);
    int family = a->u.sa.sa_family;
    char host[256];
    if (gethostname(host, sizeof(host)) == 0) {
        host[sizeof(host) - 1] = '\0';
        struct addrinfo hints = { 0 }, *res = NULL;
        hints.ai_family = family;
        hints.ai_socktype = SOCK_STREAM;
        if (getaddrinfo(host, NULL, &hints, &res) == 0) {
            for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
                bs_addr_t cand;
                if (ai->ai_family != family || ai->ai_addrlen > sizeof(cand.u))
                    continue;
                bs_addr_set(&cand, ai->ai_addr, ai->ai_addrlen);
                if (bs_addr_is_loopback(&cand))
                    continue;
                *a = cand;
                bs_addr_set_port(a, port);
                freeaddrinfo(res);
                return;
            }
            freeaddrinfo(res);
        }
    }
    bs_addr_loopback(a, family);
    bs_addr_set_port(a, port);
}

/* ---- sockets with deadlines ---- */

/* Waits for events on fd, the deadline, or the wake fd (abort). Returns HAL_OK (ready; errors
 * surface in the next I/O call), HAL_ERROR_TIMEOUT, HAL_ERROR_ABORTED or HAL_ERROR_INTERNAL (poll
 * failed). Sets no message: callers know what they waited for. */
hal_status_t bs_wait(int wake_fd, int fd, short events, int64_t deadline)
{
    for (;;) {
        struct pollfd p[2] = { { fd, events, 0 }, { wake_fd, POLLIN, 0 } };
        int rc = poll(p, wake_fd >= 0 ? 2 : 1, bs_poll_timeout(deadline));
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            return HAL_ERROR_INTERNAL;
        }
        if (wake_fd >= 0 && p[1].revents)
            return HAL_ERROR_ABORTED;
        if (p[0].revents)
            return HAL_OK;
        if (bs_now_ms() >= deadline)
            return HAL_ERROR_TIMEOUT;
    }
}

/* Reads or writes all of buf before the deadline. Returns HAL_OK, HAL_ERROR_TIMEOUT,
 * HAL_ERROR_ABORTED, HAL_ERROR_INTERNAL, or HAL_ERROR_REMOTE with *err = errno (0: the peer closed
 * the connection). Sets no message. */
hal_status_t bs_io(int wake_fd, int fd, void *buf, size_t len, bool writing, int64_t deadline,
                   int *err)
{
    uint8_t *p = buf;
    size_t done = 0;
    *err = 0;
    while (done < len) {
        ssize_t n = writing ? send(fd, p + done, len - done, MSG_NOSIGNAL)
                            : recv(fd, p + done, len - done, 0);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == 0)
            return HAL_ERROR_REMOTE;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            hal_status_t st = bs_wait(wake_fd, fd, writing ? POLLOUT : POLLIN, deadline);
            if (st != HAL_OK)
                return st;
            continue;
        }
        *err = errno;
        return HAL_ERROR_REMOTE;
    }
    return HAL_OK;
}

/* Turns how a wait ended into a message detail: what we were doing, and with whom. */
static void bs_io_detail(char *buf, size_t size, hal_status_t st, int err, uint32_t timeout_ms,
                         const char *what, const char *peer)
{
    char eb[96];
    switch (st) {
    case HAL_ERROR_TIMEOUT:
        snprintf(buf, size, "timed out after %u ms %s (%s)", timeout_ms, what, peer);
        break;
    case HAL_ERROR_ABORTED:
        snprintf(buf, size, "aborted while %s (%s)", what, peer);
        break;
    case HAL_ERROR_REMOTE:
        if (err == 0)
            snprintf(buf, size, "%s closed the connection while %s", peer, what);
        else
            snprintf(buf, size, "connection to %s failed while %s: %s", peer, what,
                     bs_strerror(err, eb, sizeof(eb)));
        break;
    default:
        snprintf(buf, size, "poll failed while %s (%s)", what, peer);
        break;
    }
}

hal_status_t bs_io_error(hal_status_t st, int err, const char *call, uint32_t timeout_ms,
                         const char *what, const char *peer)
{
    char detail[512];
    bs_io_detail(detail, sizeof(detail), st, err, timeout_ms, what, peer);
    return hal_error(st, NULL, call, "%s", detail);
}

/* Errors after which connecting again may work (the path, not the peer, failed). */
static bool bs_connect_transient(int err)
{
    return err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH || err == EAGAIN ||
           err == EADDRNOTAVAIL || err == ENETDOWN;
}

/* Connects to addr before the deadline, retrying errors of the path (not a refusal: every listener
 * exists before its address is published, so a refusal means the peer is gone). Returns HAL_OK with
 * *out a non-blocking CLOEXEC socket, or an error (message set). */
hal_status_t bs_connect(int wake_fd, const bs_addr_t *addr, int64_t deadline, uint32_t timeout_ms,
                        const char *call, const char *peer, int *out)
{
    char eb[96];
    int delay_ms = 10, last_err = 0;
    for (;;) {
        int fd = socket(addr->u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call,
                             "socket() to connect to %s failed: %s", peer,
                             bs_strerror(errno, eb, sizeof(eb)));
        int err = 0;
        if (connect(fd, &addr->u.sa, addr->len) < 0) {
            err = errno;
            if (err == EINPROGRESS || err == EINTR) {
                hal_status_t st = bs_wait(wake_fd, fd, POLLOUT, deadline);
                if (st != HAL_OK) {
                    close(fd);
                    if (st == HAL_ERROR_TIMEOUT && last_err != 0)
                        return hal_error(st, NULL, call,
                                         "timed out after %u ms connecting to %s (last error: %s)",
                                         timeout_ms, peer, bs_strerror(last_err, eb, sizeof(eb)));
                    return bs_io_error(st, 0, call, timeout_ms, "connecting", peer);
                }
                socklen_t len = sizeof(err);
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                    err = errno;
            }
        }
        if (err == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            *out = fd;
            return HAL_OK;
        }
        close(fd);
        if (!bs_connect_transient(err))
            return hal_error(HAL_ERROR_REMOTE, NULL, call, "connect to %s failed: %s", peer,
                             bs_strerror(err, eb, sizeof(eb)));
        last_err = err;
        if (bs_now_ms() + delay_ms >= deadline)
            return hal_error(HAL_ERROR_TIMEOUT, NULL, call,
                             "timed out after %u ms connecting to %s (last error: %s)", timeout_ms,
                             peer, bs_strerror(err, eb, sizeof(eb)));
        struct pollfd w = { wake_fd, POLLIN, 0 };
        if (poll(&w, 1, delay_ms) > 0)
            return bs_io_error(HAL_ERROR_ABORTED, 0, call, timeout_ms, "connecting", peer);
        delay_ms = delay_ms >= 100 ? 200 : delay_ms * 2;
    }
}

/* Creates a listening socket bound to addr (port 0: ephemeral); *bound receives the address with
 * the port the kernel chose. */
hal_status_t bs_listen(const bs_addr_t *addr, bool reuse, const char *call, int *out,
                       bs_addr_t *bound)
{
    char eb[96], where[80];
    bs_addr_str(addr, where, sizeof(where));
    int fd = socket(addr->u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call, "socket() for %s failed: %s",
                         where, bs_strerror(errno, eb, sizeof(eb)));
    int one = 1;
    /* A fixed HAL_COMM_BIND port must be reusable right after the previous job's root exits. */
    if (reuse)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, &addr->u.sa, addr->len) < 0) {
        int err = errno;
        close(fd);
        return hal_error(
            err == EADDRNOTAVAIL ? HAL_ERROR_INVALID_ARGUMENT : HAL_ERROR_BACKEND_SPECIFIC, NULL,
            call, "bind to %s (HAL_COMM_BIND) failed: %s", where, bs_strerror(err, eb, sizeof(eb)));
    }
    if (listen(fd, SOMAXCONN) < 0) {
        int err = errno;
        close(fd);
        return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call, "listen on %s failed: %s", where,
                         bs_strerror(err, eb, sizeof(eb)));
    }
    memset(bound, 0, sizeof(*bound));
    bound->len = sizeof(bound->u);
    if (getsockname(fd, &bound->u.sa, &bound->len) < 0) {
        int err = errno;
        close(fd);
        return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call, "getsockname on %s failed: %s",
                         where, bs_strerror(err, eb, sizeof(eb)));
    }
    *out = fd;
    return HAL_OK;
}
