/* SPDX-License-Identifier: Apache-2.0 */
/* A rank's bootstrap object: its creation (hal_bootstrap_create), its connections to the other
 * ranks (the lower rank of a pair connects, lazily, on first use; the accept thread takes the
 * connections lower ranks open to this one), what it knows of its peers, abort and
 * destruction. Joining the job is in bootstrap_rendezvous.c, messages in bootstrap_msg.c. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hal/src/comm/bootstrap.h"
#include "hal/src/comm/bootstrap_internal.h"
#include "hal/src/service.h"

/* ---- peer connections ---- */

static void bs_wake(hal_bootstrap_t *b)
{
    uint64_t one = 1;
    ssize_t n;
    do
        n = write(b->wake_fd, &one, sizeof(one));
    while (n < 0 && errno == EINTR);
}

void bs_cond_wait(bs_conn_t *c, int64_t deadline)
{
    struct timespec ts = { .tv_sec = (time_t)(deadline / 1000),
                           .tv_nsec = (long)(deadline % 1000) * 1000000L };
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
}

void bs_peer_name(const hal_bootstrap_t *b, int peer, char *buf, size_t size)
{
    char where[80];
    bs_addr_str(&b->entries[peer].addr, where, sizeof(where));
    snprintf(buf, size, "rank %d (pid %d at %s)", peer, b->entries[peer].peer.pid, where);
}

/* With c->mu held: the sticky failure, reported again for this call. */
hal_status_t bs_conn_failed_locked(bs_conn_t *c, const char *call)
{
    char why[sizeof(c->why)];
    hal_status_t st = c->failed;
    memcpy(why, c->why, sizeof(why));
    pthread_mutex_unlock(&c->mu);
    return hal_error(st, NULL, call, "%s", why);
}

/* Connects to a higher rank and authenticates (both ways, and checks it is the process the table
 * names). Returns HAL_OK with *out, or an error (message set). */
static hal_status_t bs_connect_peer(hal_bootstrap_t *b, int peer, int64_t deadline,
                                    const char *call, int *out)
{
    char who[160];
    bs_peer_name(b, peer, who, sizeof(who));
    int fd;
    HAL_CHECK(
        bs_connect(b->wake_fd, &b->entries[peer].addr, deadline, b->timeout_ms, call, who, &fd));
    hal_status_t st = bs_handshake_connect(
        b->wake_fd, b->secret, fd, BS_KIND_PEER, (uint32_t)b->rank, (uint32_t)peer, b->instance,
        b->entries[peer].instance, deadline, b->timeout_ms, call, who);
    if (st != HAL_OK) {
        close(fd);
        return st;
    }
    *out = fd;
    return HAL_OK;
}

/* Returns the connection to peer, opening it if this rank is the lower one, or waiting for the peer
 * (through the accept thread) otherwise. */
hal_status_t bs_get_conn(hal_bootstrap_t *b, int peer, int64_t deadline, const char *call,
                         int *fd_out)
{
    bs_conn_t *c = &b->conns[peer];
    char who[160];
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (bs_aborted(b)) {
            pthread_mutex_unlock(&c->mu);
            bs_peer_name(b, peer, who, sizeof(who));
            return hal_error(HAL_ERROR_ABORTED, NULL, call, "aborted while connecting to %s", who);
        }
        if (c->failed != HAL_OK)
            return bs_conn_failed_locked(c, call);
        if (c->fd >= 0) {
            *fd_out = c->fd;
            pthread_mutex_unlock(&c->mu);
            return HAL_OK;
        }
        if (b->rank < peer && !c->connecting) {
            c->connecting = true;
            pthread_mutex_unlock(&c->mu);
            int fd = -1;
            hal_status_t st = bs_connect_peer(b, peer, deadline, call, &fd);
            pthread_mutex_lock(&c->mu);
            c->connecting = false;
            if (st == HAL_OK) {
                c->fd = fd;
                if (bs_aborted(b)) /* abort ran before the fd was visible to it */
                    shutdown(fd, SHUT_RDWR);
            }
            pthread_cond_broadcast(&c->cv);
            if (st != HAL_OK) {
                pthread_mutex_unlock(&c->mu);
                return st;
            }
            continue;
        }
        if (bs_now_ms() >= deadline) {
            pthread_mutex_unlock(&c->mu);
            bs_peer_name(b, peer, who, sizeof(who));
            return hal_error(
                HAL_ERROR_TIMEOUT, NULL, call,
                b->rank < peer ? "timed out after %u ms waiting for another thread to connect to %s"
                               : "timed out after %u ms waiting for %s to connect",
                b->timeout_ms, who);
        }
        bs_cond_wait(c, deadline);
    }
}

/* The peer listener's verdict on AUTH2, given the AUTH1 it sent: BS_AUTH_DENIED unless the
 * connector proved the secret; BS_AUTH_CONFLICT unless it is the process this rank's table names
 * for a lower rank whose connection is not set up yet; else BS_AUTH_OK with *c_rank. Reads only
 * its arguments, the table and the connection's state (the fuzzing target drives it directly). */
static uint32_t bs_accept_verify(hal_bootstrap_t *b, const uint8_t a1[BS_AUTH1_BYTES],
                                 const uint8_t a2[BS_AUTH2_BYTES], uint32_t *c_rank)
{
    uint8_t c_inst[BS_INSTANCE_BYTES], a_inst[BS_INSTANCE_BYTES];
    uint32_t a_rank = 0, status = BS_AUTH_OK;
    if (!bs_auth2_verify(b->secret, a1, a2, BS_KIND_PEER, c_rank, &a_rank, c_inst, a_inst)) {
        status = BS_AUTH_DENIED;
    } else if (a_rank != (uint32_t)b->rank ||
               !hal_bootstrap_equal_ct(a_inst, b->instance, BS_INSTANCE_BYTES) ||
               *c_rank >= (uint32_t)b->rank ||
               !hal_bootstrap_equal_ct(c_inst, b->entries[*c_rank].instance, BS_INSTANCE_BYTES)) {
        /* Knows the secret, but is not the process our table names for that rank (a rank claimed
         * twice), or breaks the rule that the lower rank connects. */
        status = BS_AUTH_CONFLICT;
    } else {
        bs_conn_t *c = &b->conns[*c_rank];
        pthread_mutex_lock(&c->mu);
        if (c->fd >= 0 || c->failed != HAL_OK)
            status = BS_AUTH_CONFLICT;
        pthread_mutex_unlock(&c->mu);
    }
    return status;
}

/* Accept thread: authenticates one incoming connection and installs it for its rank. Failures only
 * close the socket: a stranger must not be able to fail this rank. */
static void bs_accept_peer(hal_bootstrap_t *b, int fd)
{
    uint32_t limit = b->timeout_ms < BS_HANDSHAKE_MS ? b->timeout_ms : BS_HANDSHAKE_MS;
    int64_t deadline = bs_now_ms() + limit;
    uint8_t a1[BS_AUTH1_BYTES], a2[BS_AUTH2_BYTES], a3[BS_AUTH3_BYTES];
    uint32_t c_rank = 0, status;
    int err, one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (bs_auth1_make(BS_KIND_PEER, a1) != 0 ||
        bs_io(b->wake_fd, fd, a1, sizeof(a1), true, deadline, &err) != HAL_OK ||
        bs_io(b->wake_fd, fd, a2, sizeof(a2), false, deadline, &err) != HAL_OK)
        goto out_close;
    status = bs_accept_verify(b, a1, a2, &c_rank);
    bs_auth3_make(b->secret, a1, a2, status, a3);
    if (bs_io(b->wake_fd, fd, a3, sizeof(a3), true, deadline, &err) != HAL_OK ||
        status != BS_AUTH_OK)
        goto out_close;
    /* Only this thread installs connections from lower ranks, so the slot is still free. */
    bs_conn_t *c = &b->conns[c_rank];
    pthread_mutex_lock(&c->mu);
    if (c->fd < 0 && c->failed == HAL_OK && !bs_aborted(b)) {
        c->fd = fd;
        fd = -1;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
out_close:
    if (fd >= 0)
        close(fd);
}

void *bs_accept_main(void *arg)
{
    hal_bootstrap_t *b = arg;
    for (;;) {
        struct pollfd p[2] = { { b->listen_fd, POLLIN, 0 }, { b->wake_fd, POLLIN, 0 } };
        /* The timeout only bounds each wait; the wake fd ends the thread. */
        int rc = poll(p, 2, 1000);
        if (rc < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        if (rc <= 0 || !p[0].revents)
            continue;
        int fd = accept4(b->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) {
            bs_accept_peer(b, fd);
        } else if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            struct pollfd w = { b->wake_fd, POLLIN, 0 };
            poll(&w, 1, 100); /* the listener stays readable: do not spin */
        }
    }
    /* Peers that try to connect from now on are refused at once instead of waiting for a handshake
     * nobody would answer. */
    shutdown(b->listen_fd, SHUT_RDWR);
    return NULL;
}

/* ---- creation ---- */

/* Equal for ranks on one host: the kernel's boot id plus the host name (two containers sharing a
 * kernel but not a host name count as different hosts, which only costs them shared memory). */
static uint64_t bs_host_hash(void)
{
    char buf[384];
    size_t n = 0;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t r;
        do
            r = read(fd, buf, 64);
        while (r < 0 && errno == EINTR);
        if (r > 0)
            n = (size_t)r;
        close(fd);
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        n--;
    buf[n++] = '|';
    if (gethostname(buf + n, sizeof(buf) - n - 1) == 0) {
        buf[sizeof(buf) - 1] = '\0';
        n += strlen(buf + n);
    }
    uint8_t digest[32];
    hal_bootstrap_sha256(buf, n, digest);
    return get64(digest);
}

static hal_status_t bs_create(const bs_id_t *id, int nranks, int rank, uint32_t timeout_ms,
                              const char *call, hal_bootstrap_t **out)
{
    char eb[96];
    hal_bootstrap_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, NULL, call, "out of host memory");
    b->wake_fd = -1;
    b->listen_fd = -1;
    atomic_init(&b->aborted, false);
    b->rank = rank;
    b->nranks = nranks;
    b->timeout_ms = timeout_ms;
    memcpy(b->secret, id->secret, sizeof(b->secret));
    memcpy(b->nonce, id->nonce, sizeof(b->nonce));
    *out = b;
    b->entries = calloc((size_t)nranks, sizeof(*b->entries));
    b->conns = calloc((size_t)nranks, sizeof(*b->conns));
    if (b->entries == NULL || b->conns == NULL)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, NULL, call, "out of host memory");
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    for (int i = 0; i < nranks; i++) {
        bs_conn_t *c = &b->conns[i];
        c->fd = -1;
        if (pthread_mutex_init(&c->mu, NULL) != 0)
            break;
        if (pthread_cond_init(&c->cv, &attr) != 0) {
            pthread_mutex_destroy(&c->mu);
            break;
        }
        b->conns_ready++;
    }
    pthread_condattr_destroy(&attr);
    if (b->conns_ready != nranks)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, NULL, call,
                         "cannot initialize connection locks");
    b->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (b->wake_fd < 0)
        return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call, "eventfd failed: %s",
                         bs_strerror(errno, eb, sizeof(eb)));
    if (bs_random(b->instance, sizeof(b->instance)) != 0)
        return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call, "getrandom failed: %s",
                         bs_strerror(errno, eb, sizeof(eb)));

    bs_addr_t bind_addr;
    bs_entry_t *me = &b->entries[rank];
    HAL_CHECK(bs_parse_bind(call, &bind_addr));
    bs_addr_set_port(&bind_addr, 0); /* a fixed HAL_COMM_BIND port belongs to the root */
    HAL_CHECK(bs_listen(&bind_addr, false, call, &b->listen_fd, &me->addr));
    me->peer.rank = rank;
    me->peer.pid = (int32_t)getpid();
    me->peer.host_hash = bs_host_hash();
    me->nranks = nranks;
    memcpy(me->instance, b->instance, sizeof(me->instance));
    return HAL_OK;
}

/* First half of hal_bootstrap_connect: checks the arguments and makes the object (its peer
 * listener bound) without sending or waiting for anything. Returns HAL_OK with *out, or
 * HAL_ERROR_INVALID_ARGUMENT, HAL_ERROR_OUT_OF_HOST_MEMORY, HAL_ERROR_BACKEND_SPECIFIC; *out is
 * NULL on failure. Thread safety: safe. */
hal_status_t hal_bootstrap_create(const hal_unique_id_t *id, int nranks, int rank,
                                  const hal_comm_store_t *store, uint32_t timeout_ms,
                                  hal_bootstrap_t **out)
{
    const char *call = "hal_comm_init";
    HAL_CHECK_NOT_NULL(out, NULL, call);
    *out = NULL;
    HAL_CHECK_NOT_NULL(id, NULL, call);
    bs_id_t d;
    const char *why = bs_id_decode(id->internal, &d);
    if (why != NULL)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "malformed unique id: %s", why);
    if (nranks < 1 || nranks > BS_MAX_RANKS)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "nranks %d is not in 1..%d",
                         nranks, BS_MAX_RANKS);
    if (rank < 0 || rank >= nranks)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "rank %d is not in 0..%d", rank,
                         nranks - 1);
    bool store_mode = (d.flags & HAL_COMM_ID_FLAG_STORE) != 0;
    if (store_mode && store == NULL)
        return hal_error(
            HAL_ERROR_INVALID_ARGUMENT, NULL, call,
            "the unique id was made with HAL_COMM_ID_FLAG_STORE, but no store was given");
    if (!store_mode && store != NULL)
        return hal_error(
            HAL_ERROR_INVALID_ARGUMENT, NULL, call,
            "a store was given, but the unique id was not made with HAL_COMM_ID_FLAG_STORE");
    if (store != NULL &&
        (store->struct_size < sizeof(hal_comm_store_t) || store->set == NULL || store->get == NULL))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "the store has a bad struct_size or NULL callbacks");

    hal_bootstrap_t *b = NULL;
    hal_status_t st = bs_create(&d, nranks, rank, timeout_ms, call, &b);
    memset(d.secret, 0, sizeof(d.secret));
    if (st != HAL_OK) {
        hal_bootstrap_destroy(b);
        return st;
    }
    b->store_mode = store_mode;
    if (store_mode)
        b->store = *store;
    else
        b->root = d.root;
    *out = b;
    return HAL_OK;
}

/* Number of ranks. Thread safety: safe. */
int hal_bootstrap_nranks(const hal_bootstrap_t *b)
{
    return b->nranks;
}

/* This rank. Thread safety: safe. */
int hal_bootstrap_rank(const hal_bootstrap_t *b)
{
    return b->rank;
}

/* What rank `rank` announced (host hash, pid), or NULL if out of range. Thread safety: safe; the
 * table is fixed once connected. */
const hal_bootstrap_peer_t *hal_bootstrap_peer(const hal_bootstrap_t *b, int rank)
{
    if (b == NULL || rank < 0 || rank >= b->nranks)
        return NULL;
    return &b->entries[rank].peer;
}

/* The job nonce (HAL_BOOTSTRAP_NONCE_BYTES). Thread safety: safe. */
const uint8_t *hal_bootstrap_nonce(const hal_bootstrap_t *b)
{
    return b->nonce;
}

/* ---- abort and destruction ---- */

/* Makes every blocked and later call fail with HAL_ERROR_ABORTED within milliseconds, and shuts the
 * connections down so peers see HAL_ERROR_REMOTE at once. Thread safety: safe from any thread, also
 * while others are blocked in this bootstrap (not concurrently with destroy). */
void hal_bootstrap_abort(hal_bootstrap_t *b)
{
    if (b == NULL)
        return;
    atomic_store_explicit(&b->aborted, true, memory_order_release);
    bs_wake(b);
    for (int i = 0; i < b->conns_ready; i++) {
        bs_conn_t *c = &b->conns[i];
        pthread_mutex_lock(&c->mu);
        if (c->fd >= 0)
            shutdown(c->fd, SHUT_RDWR);
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
}

/* Stops the accept thread, closes every socket and frees. b may be NULL. Thread safety: no other
 * call on b may be running or follow. */
void hal_bootstrap_destroy(hal_bootstrap_t *b)
{
    if (b == NULL)
        return;
    if (b->accept_started) {
        bs_wake(b);
        pthread_join(b->accept_thread, NULL);
    }
    for (int i = 0; i < b->conns_ready; i++) {
        bs_conn_t *c = &b->conns[i];
        if (c->fd >= 0)
            close(c->fd);
        for (bs_msg_t *m = c->head, *next; m != NULL; m = next) {
            next = m->next;
            free(m);
        }
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
    }
    if (b->listen_fd >= 0)
        close(b->listen_fd);
    if (b->wake_fd >= 0)
        close(b->wake_fd);
    memset(b->secret, 0, sizeof(b->secret));
    free(b->entries);
    free(b->conns);
    free(b);
}
