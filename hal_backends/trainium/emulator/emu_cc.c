/* SPDX-License-Identifier: Apache-2.0 */
/* libnrt emulator: out-of-NEFF collectives (nrt_cc_global_comm_init, nrta_cc_prepare,
 * nrta_cc_schedule) and the completion side of the async API (nrta_is_completed, error trackers),
 * among the processes of one host (the transport is TCP, so hosts could differ too).
 *
 * Global communicator. nrt_cc_global_comm_init(vnc, g_device_id, g_device_count) makes core vnc
 * global device g_device_id of g_device_count. Global device 0 listens on NEURON_RT_ROOT_COMM_ID
 * (ip:port); every other one connects to it, says who it is and where it listens itself, and gets
 * back the table of everyone's listeners; then every pair of members connects (the higher id to
 * the lower). The call returns once all members are connected, or fails with NRT_TIMEOUT after
 * NEURON_EMU_CC_TIMEOUT_MS (default 30 s).
 *
 * Collectives. nrta_cc_prepare checks the communicator (a replica group of global device ids) and
 * the tensors (device tensors of the core) and makes a context; nrta_cc_schedule queues it on the
 * core's collectives queue (queue 0) and returns its sequence number at once; one thread per core
 * runs that queue in order. A collective sends every other member of the replica group a header
 * (which collective, type, operation, sizes, group) and this rank's contribution, receives
 * theirs, reduces on the host in rank order (every rank gets the same bits) and writes the
 * outputs. Ranks whose headers disagree all fail with NRT_INVALID and write nothing; a peer that
 * closed its connection fails the collective with NRT_FAILURE, one that does not take part within
 * the timeout with NRT_TIMEOUT; nrt_close fails what is queued with NRT_CLOSED.
 *
 * Completion. nrta_is_completed(seq). Async API 2 (libnrt 2.30, the default): a failure is
 * recorded in the error tracker given to nrta_cc_schedule. Async API 3 (emulating libnrt 2.31 or
 * later, NEURON_EMU_RUNTIME_VERSION): the third argument of nrta_cc_schedule is an NRT_STATUS *,
 * which holds NRT_COLL_PENDING from the schedule until the final status is written, before the
 * request is reported complete. Before 2.31 an output that overlaps an input is refused. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hal_backends/trainium/emulator/emu_internal.h"

#define CC_CTX_MAGIC          0x4e434358u /* "NCCX" */
#define CC_TRACKER_MAGIC      0x4e434554u /* "NCET" */
#define CC_HELLO_MAGIC        0x4e434831u /* a member to the root */
#define CC_PEER_MAGIC         0x4e435031u /* a member to another */
#define CC_TABLE_MAGIC        0x4e435431u /* the root's answer */
#define CC_REJECT_MAGIC       0x4e435231u /* the root refuses a member */
#define CC_WIRE_MAGIC         0x4e434331u /* a collective's header */
#define CC_QUEUE_DEPTH        64u         /* requests queued per core before NRT_QUEUE_FULL */
#define CC_MAX_TENSORS        64u         /* tensors per list */
#define CC_DEFAULT_TIMEOUT_MS 30000u      /* the runtime's collective timeout from SDK 2.29 on */

/* ---- State ------------------------------------------------------------------------------- */

struct nrt_cc_context {
    uint32_t magic;
    struct nrt_cc_context *next; /* in cc.prepared, then in its member's queue */
    uint32_t vnc;
    nrt_cc_op_type_t cc_op;
    nrt_dtype_t dtype;
    nrt_op_type_t op;
    size_t esize;
    uint32_t rank, rank_n;
    uint32_t *group; /* rank_n global device ids */
    uint32_t group_hash;
    size_t n; /* tensors in each list */
    emu_view_t *in, *out;
    /* Set by nrta_cc_schedule. */
    uint64_t seqnum;
    nrta_error_tracker_t *tracker; /* async API 2 */
    NRT_STATUS *ret;               /* async API 3 */
};

struct nrta_error_tracker {
    uint32_t magic;
    struct nrta_error_tracker *next; /* in cc.trackers */
    uint32_t lnc;
    pthread_mutex_t lock;
    nrta_error_t *errors;
    size_t count, capacity;
};

/* One core's membership of the global communicator and its collectives queue. */
typedef struct cc_member {
    bool joined;  /* a member of the global communicator */
    bool joining; /* nrt_cc_global_comm_init in progress */
    uint32_t g_id, g_count;
    int *fds; /* g_count connections; -1 for itself and for connections that failed */
    uint64_t timeout_ns;
    bool worker_started;
    pthread_t worker;
    struct nrt_cc_context *head, *tail;
    uint32_t queued;
    uint64_t issued;       /* last sequence number given out */
    _Atomic uint64_t done; /* last sequence number completed (in order) */
} cc_member_t;

static struct {
    pthread_mutex_t lock; /* everything here but `done` and `stopping` */
    pthread_cond_t cond;  /* work queued; a join finished */
    int wake[2];          /* readable once nrt_close cancels */
    cc_member_t m[EMU_MAX_VNC];
    struct nrt_cc_context *prepared;
    struct nrta_error_tracker *trackers;
} cc = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .wake = { -1, -1 } };

static atomic_bool cc_stopping;

/* ---- Small helpers ------------------------------------------------------------------------- */

static size_t dtype_size(nrt_dtype_t dtype)
{
    switch (dtype) {
    case NRT_DTYPE_INT8:
    case NRT_DTYPE_UINT8:
        return 1;
    case NRT_DTYPE_INT16:
    case NRT_DTYPE_UINT16:
    case NRT_DTYPE_BFLOAT16:
    case NRT_DTYPE_FLOAT16:
        return 2;
    case NRT_DTYPE_INT32:
    case NRT_DTYPE_UINT32:
    case NRT_DTYPE_FLOAT32:
        return 4;
    case NRT_DTYPE_INT64:
    case NRT_DTYPE_UINT64:
        return 8;
    default:
        return 0; /* FP32R and the fp8 types are not emulated */
    }
}

static const char *cc_op_name(nrt_cc_op_type_t cc_op)
{
    switch (cc_op) {
    case NRT_CC_ALLGATHER:
        return "all-gather";
    case NRT_CC_ALLREDUCE:
        return "all-reduce";
    case NRT_CC_REDUCESCATTER:
        return "reduce-scatter";
    }
    return "?";
}

static uint32_t hash_group(const uint32_t *group, uint32_t n)
{
    uint32_t h = 2166136261u;
    for (uint32_t i = 0; i < n; i++) {
        h ^= group[i];
        h *= 16777619u;
    }
    return h ^ n;
}

/* The sequence id of request `num` of core vnc's collectives queue 0: the execution unit id
 * (core, unit type, queue) in the top 16 bits. */
static nrta_seq_t make_seq(uint32_t vnc, uint64_t num)
{
    uint64_t xu = ((uint64_t)vnc << 8) | ((uint64_t)NRTA_XU_COLLECTIVES << 4);
    return (xu << 48) | (num & NRTA_SEQ_NUM_MASK);
}

/* Out-of-NEFF collectives came with libnrt 2.30 (SDK 2.28). Caller holds emu_rt.lock. */
static NRT_STATUS cc_available(const char *api)
{
    if (emu_version_at_least(2, 30))
        return NRT_SUCCESS;
    EMU_ERR(api,
            "not in libnrt %llu.%llu (emulated, NEURON_EMU_RUNTIME_VERSION): out-of-NEFF "
            "collectives and the async API came with libnrt 2.30 (Neuron SDK 2.28)",
            (unsigned long long)emu_rt.version[0], (unsigned long long)emu_rt.version[1]);
    return NRT_FAILURE;
}

static NRT_STATUS timeout_from_env(const char *api, uint64_t *ns)
{
    uint64_t ms = CC_DEFAULT_TIMEOUT_MS;
    const char *env = emu_getenv("NEURON_EMU_CC_TIMEOUT_MS");
    if (env != NULL && (!emu_parse_u64(env, &ms) || ms == 0 || ms > 86400000u)) {
        EMU_ERR(api, "NEURON_EMU_CC_TIMEOUT_MS=%s is not a number of milliseconds (1 to 86400000)",
                env);
        return NRT_INVALID;
    }
    *ns = ms * 1000000u;
    return NRT_SUCCESS;
}

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
static bool parse_root(const char *text, struct sockaddr_in *out)
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

static NRT_STATUS rendezvous_root(const char *api, const struct sockaddr_in *root, uint32_t count,
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

static NRT_STATUS rendezvous_member(const char *api, const struct sockaddr_in *root, uint32_t id,
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

/* Starts a core's queue thread with every signal blocked (the application's handlers run on its
 * own threads). Caller holds cc.lock. */
static void *worker_main(void *arg);
static bool start_worker(uint32_t vnc)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&cc.m[vnc].worker, NULL, worker_main, (void *)(uintptr_t)vnc);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    cc.m[vnc].worker_started = rc == 0;
    return rc == 0;
}

static void close_fds(cc_member_t *m)
{
    for (uint32_t i = 0; m->fds != NULL && i < m->g_count; i++)
        if (m->fds[i] >= 0)
            close(m->fds[i]);
    free(m->fds);
    m->fds = NULL;
}

NRT_EMU_EXPORT_RECENT NRT_STATUS nrt_cc_global_comm_init(uint32_t vnc, uint32_t g_device_id,
                                                         uint32_t g_device_count)
{
    static const char api[] = "nrt_cc_global_comm_init";
    NRT_STATUS st = emu_enter(api);
    if (st != NRT_SUCCESS)
        return st;
    st = cc_available(api);
    uint64_t timeout_ns = 0;
    if (st == NRT_SUCCESS)
        st = timeout_from_env(api, &timeout_ns);
    if (st == NRT_SUCCESS && vnc >= emu_rt.vnc_count) {
        EMU_ERR(api, "vnc %u is not visible (this process has %u NeuronCores)", vnc,
                emu_rt.vnc_count);
        st = NRT_INVALID;
    }
    if (st == NRT_SUCCESS &&
        (g_device_count == 0 || g_device_id >= g_device_count || g_device_count > 65536)) {
        EMU_ERR(api, "global device %u of %u is not valid", g_device_id, g_device_count);
        st = NRT_INVALID;
    }
    struct sockaddr_in root;
    const char *root_text = emu_getenv("NEURON_RT_ROOT_COMM_ID");
    if (st == NRT_SUCCESS && g_device_count > 1 &&
        (root_text == NULL || !parse_root(root_text, &root))) {
        EMU_ERR(api,
                "NEURON_RT_ROOT_COMM_ID=%s: the root of the global communicator must be set as "
                "ip:port (where global device 0 listens)",
                root_text != NULL ? root_text : "(unset)");
        st = NRT_INVALID;
    }
    if (st == NRT_SUCCESS) {
        pthread_mutex_lock(&cc.lock);
        cc_member_t *m = &cc.m[vnc];
        if (m->joined || m->joining) {
            EMU_ERR(api, "NeuronCore %u already belongs to a global communicator%s", vnc,
                    m->joining ? " (being built)" : "");
            st = NRT_INVALID;
        } else {
            m->joining = true;
        }
        pthread_mutex_unlock(&cc.lock);
    }
    emu_leave(); /* peers may take a while: nrt_close cancels through cc.wake instead */
    if (st != NRT_SUCCESS)
        return st;

    int *fds = malloc(g_device_count * sizeof(*fds));
    if (fds == NULL)
        st = NRT_RESOURCE;
    for (uint32_t i = 0; fds != NULL && i < g_device_count; i++)
        fds[i] = -1;
    uint64_t deadline = emu_now_ns() + timeout_ns;
    if (st == NRT_SUCCESS && g_device_count > 1)
        st = g_device_id == 0
                 ? rendezvous_root(api, &root, g_device_count, deadline, fds)
                 : rendezvous_member(api, &root, g_device_id, g_device_count, deadline, fds);

    pthread_mutex_lock(&cc.lock);
    cc_member_t *m = &cc.m[vnc];
    m->joining = false;
    if (st == NRT_SUCCESS && atomic_load(&cc_stopping))
        st = NRT_CLOSED;
    m->g_id = g_device_id;
    m->g_count = g_device_count;
    m->fds = fds;
    if (st == NRT_SUCCESS) {
        m->timeout_ns = timeout_ns;
        m->issued = 0;
        atomic_store(&m->done, 0);
        if (start_worker(vnc))
            m->joined = true;
        else
            st = NRT_RESOURCE;
    }
    if (st != NRT_SUCCESS)
        close_fds(m);
    pthread_cond_broadcast(&cc.cond);
    pthread_mutex_unlock(&cc.lock);
    if (st == NRT_SUCCESS)
        EMU_INFO(api, "NeuronCore %u is global device %u of %u", vnc, g_device_id, g_device_count);
    else if (st == NRT_CLOSED)
        EMU_ERR(api, "nrt_close was called while the global communicator was being built");
    return st;
}

/* ---- Prepare and schedule ------------------------------------------------------------------ */

static void context_free(struct nrt_cc_context *ctx)
{
    for (size_t i = 0; ctx->in != NULL && i < ctx->n; i++)
        emu_view_put(&ctx->in[i]);
    for (size_t i = 0; ctx->out != NULL && i < ctx->n; i++)
        emu_view_put(&ctx->out[i]);
    free(ctx->in);
    free(ctx->out);
    free(ctx->group);
    ctx->magic = 0;
    free(ctx);
}

/* Checks the replica group against the core's global communicator. Caller holds cc.lock. */
static NRT_STATUS check_comm(const char *api, const nrt_cc_comm_t *comm)
{
    if (comm->vnc >= emu_rt.vnc_count) {
        EMU_ERR(api, "comm->vnc %u is not visible", comm->vnc);
        return NRT_INVALID;
    }
    const cc_member_t *m = &cc.m[comm->vnc];
    if (!m->joined) {
        EMU_ERR(api, "NeuronCore %u has no global communicator (nrt_cc_global_comm_init)",
                comm->vnc);
        return NRT_INVALID;
    }
    if (comm->ctx_device_id != m->g_id || comm->ctx_device_count != m->g_count) {
        EMU_ERR(api, "comm names global device %u of %u; NeuronCore %u is global device %u of %u",
                comm->ctx_device_id, comm->ctx_device_count, comm->vnc, m->g_id, m->g_count);
        return NRT_INVALID;
    }
    if (comm->replica_group == NULL || comm->rank_n == 0 || comm->rank >= comm->rank_n ||
        comm->rank_n > m->g_count) {
        EMU_ERR(api, "rank %u of a replica group of %u (%s) is not valid", comm->rank, comm->rank_n,
                comm->replica_group == NULL ? "NULL" : "listed");
        return NRT_INVALID;
    }
    if (comm->replica_group[comm->rank] != m->g_id) {
        EMU_ERR(api, "replica_group[rank %u] is global device %u, not this worker's %u", comm->rank,
                comm->replica_group[comm->rank], m->g_id);
        return NRT_INVALID;
    }
    for (uint32_t i = 0; i < comm->rank_n; i++) {
        if (comm->replica_group[i] >= m->g_count) {
            EMU_ERR(api, "replica_group[%u] = %u is not a global device (0 to %u)", i,
                    comm->replica_group[i], m->g_count - 1);
            return NRT_INVALID;
        }
        for (uint32_t j = 0; j < i; j++) {
            if (comm->replica_group[i] == comm->replica_group[j]) {
                EMU_ERR(api, "global device %u is twice in the replica group",
                        comm->replica_group[i]);
                return NRT_INVALID;
            }
        }
    }
    return NRT_SUCCESS;
}

/* Takes views of a tensor list: device tensors of core vnc, sizes a multiple of esize. */
static NRT_STATUS take_list(const char *api, const char *what, const nrt_tensor_list_t *list,
                            size_t n, uint32_t vnc, size_t esize, emu_view_t *views)
{
    for (size_t i = 0; i < n; i++) {
        char name[48];
        snprintf(name, sizeof(name), "%s->tensors[%zu]", what, i);
        NRT_STATUS st = emu_view_take(api, name, list->tensors[i], &views[i]);
        if (st != NRT_SUCCESS)
            return st;
        if (emu_view_placement(&views[i]) != NRT_TENSOR_PLACEMENT_DEVICE ||
            emu_view_vnc(&views[i]) != (int)vnc) {
            EMU_ERR(api, "%s is not device memory of NeuronCore %u", name, vnc);
            return NRT_INVALID;
        }
        if (views[i].size % esize != 0) {
            EMU_ERR(api, "%s: %zu bytes is not a whole number of %zu-byte elements", name,
                    views[i].size, esize);
            return NRT_INVALID;
        }
    }
    return NRT_SUCCESS;
}

NRT_EMU_EXPORT_RECENT NRT_STATUS nrta_cc_prepare(nrt_cc_comm_t *comm, nrt_tensor_list_t *input,
                                                 nrt_tensor_list_t *output, nrt_dtype_t dtype,
                                                 nrt_op_type_t op, nrt_cc_op_type_t cc_op,
                                                 nrt_cc_context_t **cc_ctx)
{
    static const char api[] = "nrta_cc_prepare";
    NRT_STATUS st = emu_enter(api);
    if (st != NRT_SUCCESS)
        return st;
    st = cc_available(api);
    if (st != NRT_SUCCESS)
        goto out_leave;
    if (comm == NULL || input == NULL || output == NULL || cc_ctx == NULL ||
        input->tensors == NULL || output->tensors == NULL) {
        EMU_ERR(api, "comm, input, output, their tensors and cc_ctx must not be NULL");
        st = NRT_INVALID;
        goto out_leave;
    }
    size_t esize = dtype_size(dtype);
    if (cc_op != NRT_CC_ALLGATHER && cc_op != NRT_CC_ALLREDUCE && cc_op != NRT_CC_REDUCESCATTER) {
        EMU_ERR(api, "cc_op %d is not a collective (ALLGATHER, ALLREDUCE, REDUCESCATTER)",
                (int)cc_op);
        st = NRT_INVALID;
    } else if (esize == 0) {
        EMU_ERR(api,
                "dtype 0x%x is not emulated (integers of 8 to 64 bits, FLOAT16, BFLOAT16, "
                "FLOAT32)",
                (unsigned)dtype);
        st = NRT_INVALID;
    } else if (cc_op != NRT_CC_ALLGATHER && op != NRT_OP_ADD && op != NRT_OP_MAX &&
               op != NRT_OP_MIN) {
        EMU_ERR(api, "op %d: the emulator reduces with ADD, MAX and MIN (not FMA)", (int)op);
        st = NRT_INVALID;
    } else if (input->num_tensors == 0 || input->num_tensors != output->num_tensors ||
               input->num_tensors > CC_MAX_TENSORS) {
        EMU_ERR(api, "%zu input and %zu output tensors (1 to %u, as many of each)",
                input->num_tensors, output->num_tensors, CC_MAX_TENSORS);
        st = NRT_INVALID;
    }
    if (st != NRT_SUCCESS)
        goto out_leave;
    pthread_mutex_lock(&cc.lock);
    st = check_comm(api, comm);
    pthread_mutex_unlock(&cc.lock);
    if (st != NRT_SUCCESS)
        goto out_leave;

    size_t n = input->num_tensors;
    struct nrt_cc_context *ctx = calloc(1, sizeof(*ctx));
    if (ctx != NULL) {
        ctx->in = calloc(n, sizeof(*ctx->in));
        ctx->out = calloc(n, sizeof(*ctx->out));
        ctx->group = malloc(comm->rank_n * sizeof(*ctx->group));
    }
    if (ctx == NULL || ctx->in == NULL || ctx->out == NULL || ctx->group == NULL) {
        EMU_ERR(api, "out of host memory");
        if (ctx != NULL)
            context_free(ctx);
        st = NRT_RESOURCE;
        goto out_leave;
    }
    ctx->magic = CC_CTX_MAGIC;
    ctx->vnc = comm->vnc;
    ctx->cc_op = cc_op;
    ctx->dtype = dtype;
    ctx->op = op;
    ctx->esize = esize;
    ctx->rank = comm->rank;
    ctx->rank_n = comm->rank_n;
    ctx->n = n;
    memcpy(ctx->group, comm->replica_group, comm->rank_n * sizeof(*ctx->group));
    ctx->group_hash = hash_group(ctx->group, ctx->rank_n);
    st = take_list(api, "input", input, n, comm->vnc, esize, ctx->in);
    if (st == NRT_SUCCESS)
        st = take_list(api, "output", output, n, comm->vnc, esize, ctx->out);
    for (size_t i = 0; i < n && st == NRT_SUCCESS; i++) {
        size_t in = ctx->in[i].size, out = ctx->out[i].size, k = ctx->rank_n;
        bool fits = cc_op == NRT_CC_ALLREDUCE   ? in == out
                    : cc_op == NRT_CC_ALLGATHER ? out / k == in && out % k == 0
                                                : in / k == out && in % k == 0;
        if (!fits) {
            EMU_ERR(api, "%s over %u ranks: input %zu has %zu bytes, output %zu has %zu",
                    cc_op_name(cc_op), ctx->rank_n, i, in, i, out);
            st = NRT_INVALID;
        }
        for (size_t j = 0; j < n && st == NRT_SUCCESS && !emu_version_at_least(2, 31); j++) {
            if (emu_views_overlap(&ctx->out[i], &ctx->in[j])) {
                EMU_ERR(api,
                        "output %zu overlaps input %zu: in-place collectives need libnrt 2.31 "
                        "(Neuron SDK 2.29); this is libnrt %llu.%llu",
                        i, j, (unsigned long long)emu_rt.version[0],
                        (unsigned long long)emu_rt.version[1]);
                st = NRT_INVALID;
            }
        }
    }
    if (st != NRT_SUCCESS) {
        context_free(ctx);
        goto out_leave;
    }
    pthread_mutex_lock(&cc.lock);
    ctx->next = cc.prepared;
    cc.prepared = ctx;
    pthread_mutex_unlock(&cc.lock);
    *cc_ctx = ctx;

out_leave:
    emu_leave();
    return st;
}

/* Finds and unlinks a prepared context. Caller holds cc.lock. */
static bool take_prepared(struct nrt_cc_context *ctx)
{
    for (struct nrt_cc_context **p = &cc.prepared; *p != NULL; p = &(*p)->next) {
        if (*p == ctx) {
            *p = ctx->next;
            ctx->next = NULL;
            return true;
        }
    }
    return false;
}

static bool tracker_live(const struct nrta_error_tracker *t)
{
    for (const struct nrta_error_tracker *p = cc.trackers; p != NULL; p = p->next)
        if (p == t)
            return true;
    return false;
}

NRT_EMU_EXPORT_RECENT NRT_STATUS nrta_cc_schedule(nrt_cc_context_t **cc_ctx, int queue,
                                                  nrta_error_tracker_t *err,
                                                  nrta_seq_t *req_sequence)
{
    static const char api[] = "nrta_cc_schedule";
    NRT_STATUS st = emu_enter(api);
    if (st != NRT_SUCCESS)
        return st;
    st = cc_available(api);
    bool v3 = emu_version_at_least(2, 31);
    if (st == NRT_SUCCESS && (cc_ctx == NULL || *cc_ctx == NULL || req_sequence == NULL)) {
        EMU_ERR(api, "cc_ctx, *cc_ctx and req_sequence must not be NULL");
        st = NRT_INVALID;
    }
    if (st == NRT_SUCCESS && queue != 0) {
        EMU_ERR(api, "queue %d: collectives are scheduled on queue 0", queue);
        st = NRT_INVALID;
    }
    if (st != NRT_SUCCESS) {
        emu_leave();
        return st;
    }
    pthread_mutex_lock(&cc.lock);
    struct nrt_cc_context *ctx = *cc_ctx;
    cc_member_t *m = NULL;
    bool taken = take_prepared(ctx);
    if (!taken) {
        EMU_ERR(api,
                "*cc_ctx %p is not a prepared collective (scheduled already, or not from "
                "nrta_cc_prepare)",
                (void *)ctx);
        st = NRT_INVALID;
    } else if (!v3 && err != NULL && !tracker_live(err)) {
        EMU_ERR(api, "err %p is not a live error tracker", (void *)err);
        st = NRT_INVALID;
    } else if ((m = &cc.m[ctx->vnc])->queued >= CC_QUEUE_DEPTH) {
        EMU_WARN(api, "NeuronCore %u's collectives queue holds %u requests", ctx->vnc, m->queued);
        st = NRT_QUEUE_FULL;
    }
    if (st != NRT_SUCCESS) {
        if (taken) {
            ctx->next = cc.prepared; /* changes nothing: still prepared */
            cc.prepared = ctx;
        }
        pthread_mutex_unlock(&cc.lock);
        emu_leave();
        return st;
    }
    ctx->seqnum = ++m->issued;
    ctx->tracker = v3 ? NULL : err;
    ctx->ret = v3 ? (NRT_STATUS *)(void *)err : NULL; /* async API 3: a status pointer */
    if (ctx->ret != NULL)
        *ctx->ret = NRT_COLL_PENDING;
    if (m->tail != NULL)
        m->tail->next = ctx;
    else
        m->head = ctx;
    m->tail = ctx;
    m->queued++;
    pthread_cond_broadcast(&cc.cond);
    *req_sequence = make_seq(ctx->vnc, ctx->seqnum);
    *cc_ctx = NULL; /* the runtime frees it once the collective ran */
    pthread_mutex_unlock(&cc.lock);
    emu_leave();
    return NRT_SUCCESS;
}

NRT_EMU_EXPORT_RECENT NRT_STATUS nrta_is_completed(nrta_seq_t seq, bool *is_completed)
{
    static const char api[] = "nrta_is_completed";
    NRT_STATUS st = emu_enter(api);
    if (st != NRT_SUCCESS)
        return st;
    st = cc_available(api);
    uint64_t xu = NRTA_SEQ_GET_XU_ID(seq), num = NRTA_SEQ_GET_SEQ_NUM(seq);
    uint32_t vnc = (uint32_t)(xu >> 8);
    if (st == NRT_SUCCESS && is_completed == NULL) {
        EMU_ERR(api, "is_completed is NULL");
        st = NRT_INVALID;
    }
    if (st == NRT_SUCCESS) {
        pthread_mutex_lock(&cc.lock);
        bool known = ((xu >> 4) & 0xf) == NRTA_XU_COLLECTIVES && (xu & 0xf) == 0 &&
                     vnc < emu_rt.vnc_count && num != 0 && num <= cc.m[vnc].issued;
        pthread_mutex_unlock(&cc.lock);
        if (!known) {
            EMU_ERR(api, "0x%llx is not a sequence number this runtime issued",
                    (unsigned long long)seq);
            st = NRT_INVALID;
        } else {
            *is_completed = atomic_load_explicit(&cc.m[vnc].done, memory_order_acquire) >= num;
        }
    }
    emu_leave();
    return st;
}

/* ---- Error trackers (async API 2) ---------------------------------------------------------- */

NRT_EMU_EXPORT_RECENT NRT_STATUS nrta_error_tracker_create(uint32_t lnc_idx,
                                                           nrta_error_tracker_t **error_tracker)
{
    static const char api[] = "nrta_error_tracker_create";
    NRT_STATUS st = emu_enter(api);
    if (st != NRT_SUCCESS)
        return st;
    st = cc_available(api);
    if (st == NRT_SUCCESS && emu_version_at_least(2, 31)) {
        EMU_ERR(api, "error trackers were removed in async API 3.0 (libnrt 2.31): pass an "
                     "NRT_STATUS * to the scheduling calls");
        st = NRT_FAILURE;
    }
    if (st == NRT_SUCCESS && (error_tracker == NULL || lnc_idx >= emu_rt.vnc_count)) {
        EMU_ERR(api, "error_tracker is NULL or lnc_idx %u is not visible", lnc_idx);
        st = NRT_INVALID;
    }
    struct nrta_error_tracker *t = st == NRT_SUCCESS ? calloc(1, sizeof(*t)) : NULL;
    if (st == NRT_SUCCESS && t == NULL)
        st = NRT_RESOURCE;
    if (st == NRT_SUCCESS) {
        t->magic = CC_TRACKER_MAGIC;
        t->lnc = lnc_idx;
        pthread_mutex_init(&t->lock, NULL);
        pthread_mutex_lock(&cc.lock);
        t->next = cc.trackers;
        cc.trackers = t;
        pthread_mutex_unlock(&cc.lock);
        *error_tracker = t;
    }
    emu_leave();
    return st;
}

static void tracker_free(struct nrta_error_tracker *t)
{
    pthread_mutex_destroy(&t->lock);
    free(t->errors);
    t->magic = 0;
    free(t);
}

NRT_EMU_EXPORT_RECENT void nrta_error_tracker_destroy(nrta_error_tracker_t *error_tracker)
{
    if (error_tracker == NULL)
        return;
    pthread_mutex_lock(&cc.lock);
    bool found = false;
    for (struct nrta_error_tracker **p = &cc.trackers; *p != NULL; p = &(*p)->next) {
        if (*p == error_tracker) {
            *p = error_tracker->next;
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&cc.lock);
    if (found)
        tracker_free(error_tracker);
    else
        EMU_ERR("nrta_error_tracker_destroy",
                "%p is not a live error tracker (destroyed already, or freed by nrt_close)",
                (void *)error_tracker);
}

NRT_EMU_EXPORT_RECENT NRT_STATUS nrta_error_tracker_get_list(nrta_error_tracker_t *error_tracker,
                                                             const nrta_error_t **list,
                                                             size_t *error_count)
{
    static const char api[] = "nrta_error_tracker_get_list";
    NRT_STATUS st = emu_enter(api);
    if (st != NRT_SUCCESS)
        return st;
    pthread_mutex_lock(&cc.lock);
    bool live = error_tracker != NULL && tracker_live(error_tracker);
    pthread_mutex_unlock(&cc.lock);
    if (!live || list == NULL || error_count == NULL) {
        EMU_ERR(api, "not a live error tracker, or list / error_count NULL");
        st = NRT_INVALID;
    } else {
        /* The list stays valid until the next failure is recorded on the tracker. */
        pthread_mutex_lock(&error_tracker->lock);
        *list = error_tracker->errors;
        *error_count = error_tracker->count;
        pthread_mutex_unlock(&error_tracker->lock);
    }
    emu_leave();
    return st;
}

static void tracker_record(struct nrta_error_tracker *t, nrta_seq_t seq, NRT_STATUS status)
{
    pthread_mutex_lock(&t->lock);
    if (t->count == t->capacity) {
        size_t cap = t->capacity ? t->capacity * 2 : 16;
        nrta_error_t *grown = realloc(t->errors, cap * sizeof(*grown));
        if (grown == NULL) {
            pthread_mutex_unlock(&t->lock);
            return;
        }
        t->errors = grown;
        t->capacity = cap;
    }
    t->errors[t->count++] = (nrta_error_t){ .seq_id = seq, .error_code = (uint64_t)status };
    pthread_mutex_unlock(&t->lock);
}

/* ---- Running a collective ------------------------------------------------------------------ */

/* The header every rank sends every other one before its contribution. */
typedef struct cc_wire {
    uint32_t magic;
    uint32_t cc_op, dtype, op, rank_n, group_hash;
    uint64_t in_bytes;     /* the rank's inputs, all tensors */
    uint64_t contribution; /* bytes that follow */
} cc_wire_t;

/* f16 and bf16 widened to float and rounded back to nearest even. */
static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (mant << 13);
    } else {
        float f = (float)mant * 0x1p-24f;
        memcpy(&u, &f, sizeof(u));
        u |= sign;
    }
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint16_t f32_to_f16(float x)
{
    uint32_t f;
    memcpy(&f, &x, sizeof(f));
    uint32_t sign = f & 0x80000000u;
    f ^= sign;
    uint16_t o;
    if (f >= (127u + 16) << 23) { /* too large: infinity, or NaN */
        o = f > 255u << 23 ? 0x7e00u : 0x7c00u;
    } else if (f < 113u << 23) { /* subnormal: adding 0.5 leaves it rounded at 2^-24 */
        float v, magic = 0.5f;
        memcpy(&v, &f, sizeof(v));
        v += magic;
        uint32_t u, m;
        memcpy(&u, &v, sizeof(u));
        memcpy(&m, &magic, sizeof(m));
        o = (uint16_t)(u - m);
    } else {
        uint32_t odd = (f >> 13) & 1u;
        f += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
        o = (uint16_t)(f >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint16_t f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#define CC_INT_ACC(T, U)                                             \
    do {                                                             \
        T *d = dst;                                                  \
        const T *s = src;                                            \
        for (size_t i = 0; i < n; i++)                               \
            d[i] = op == NRT_OP_ADD   ? (T)((U)d[i] + (U)s[i])       \
                   : op == NRT_OP_MAX ? (d[i] > s[i] ? d[i] : s[i])  \
                                      : (d[i] < s[i] ? d[i] : s[i]); \
    } while (0)

#define CC_NARROW_ACC(LOAD, STORE)                             \
    do {                                                       \
        uint16_t *d = dst;                                     \
        const uint16_t *s = src;                               \
        for (size_t i = 0; i < n; i++) {                       \
            float x = LOAD(d[i]), y = LOAD(s[i]);              \
            d[i] = op == NRT_OP_ADD   ? STORE(x + y)           \
                   : op == NRT_OP_MAX ? (x > y ? d[i] : s[i])  \
                                      : (x < y ? d[i] : s[i]); \
        }                                                      \
    } while (0)

/* dst[i] = dst[i] op src[i] for n elements. */
static void accumulate(void *dst, const void *src, size_t n, nrt_dtype_t dtype, nrt_op_type_t op)
{
    switch (dtype) {
    case NRT_DTYPE_INT8:
        CC_INT_ACC(int8_t, uint8_t);
        break;
    case NRT_DTYPE_UINT8:
        CC_INT_ACC(uint8_t, uint8_t);
        break;
    case NRT_DTYPE_INT16:
        CC_INT_ACC(int16_t, uint16_t);
        break;
    case NRT_DTYPE_UINT16:
        CC_INT_ACC(uint16_t, uint16_t);
        break;
    case NRT_DTYPE_INT32:
        CC_INT_ACC(int32_t, uint32_t);
        break;
    case NRT_DTYPE_UINT32:
        CC_INT_ACC(uint32_t, uint32_t);
        break;
    case NRT_DTYPE_INT64:
        CC_INT_ACC(int64_t, uint64_t);
        break;
    case NRT_DTYPE_UINT64:
        CC_INT_ACC(uint64_t, uint64_t);
        break;
    case NRT_DTYPE_FLOAT32: {
        float *d = dst;
        const float *s = src;
        for (size_t i = 0; i < n; i++)
            d[i] = op == NRT_OP_ADD   ? d[i] + s[i]
                   : op == NRT_OP_MAX ? (d[i] > s[i] ? d[i] : s[i])
                                      : (d[i] < s[i] ? d[i] : s[i]);
        break;
    }
    case NRT_DTYPE_FLOAT16:
        CC_NARROW_ACC(f16_to_f32, f32_to_f16);
        break;
    case NRT_DTYPE_BFLOAT16:
        CC_NARROW_ACC(bf16_to_f32, f32_to_bf16);
        break;
    default:
        break;
    }
}

/* One peer's side of the exchange. */
typedef struct cc_peer {
    int fd;
    uint32_t g_id;
    /* sending: the header, then `nseg` segments */
    cc_wire_t header;
    size_t sent; /* of header + segments */
    const unsigned char **seg;
    size_t *seg_len;
    size_t total;
    /* receiving: its header, then its contribution */
    cc_wire_t theirs;
    size_t got;
    unsigned char *data;
} cc_peer_t;

/* Writes as much of p's outgoing bytes as the socket takes. false on an error. */
static bool progress_send(cc_peer_t *p, size_t nseg)
{
    while (p->sent < p->total) {
        const unsigned char *buf;
        size_t len;
        if (p->sent < sizeof(p->header)) {
            buf = (const unsigned char *)&p->header + p->sent;
            len = sizeof(p->header) - p->sent;
        } else {
            size_t off = p->sent - sizeof(p->header), s = 0;
            while (s < nseg && off >= p->seg_len[s])
                off -= p->seg_len[s++];
            buf = p->seg[s] + off;
            len = p->seg_len[s] - off;
        }
        ssize_t k = send(p->fd, buf, len, MSG_NOSIGNAL);
        if (k > 0)
            p->sent += (size_t)k;
        else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        else if (!(k < 0 && errno == EINTR))
            return false;
    }
    return true;
}

/* Reads what has arrived of p's header and contribution. false on an error or end of stream. */
static bool progress_recv(cc_peer_t *p, size_t limit)
{
    for (;;) {
        size_t want, have = p->got;
        unsigned char *buf;
        if (have < sizeof(p->theirs)) {
            buf = (unsigned char *)&p->theirs + have;
            want = sizeof(p->theirs) - have;
        } else {
            if (p->theirs.magic != CC_WIRE_MAGIC || p->theirs.contribution > limit)
                return false; /* not a collective's stream, or far too much */
            if (p->data == NULL && p->theirs.contribution > 0) {
                p->data = malloc(p->theirs.contribution);
                if (p->data == NULL)
                    return false;
            }
            size_t off = have - sizeof(p->theirs);
            if (off >= p->theirs.contribution)
                return true;
            buf = p->data + off;
            want = p->theirs.contribution - off;
        }
        ssize_t k = recv(p->fd, buf, want, 0);
        if (k > 0)
            p->got += (size_t)k;
        else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        else if (!(k < 0 && errno == EINTR))
            return false;
    }
}

static bool recv_done(const cc_peer_t *p)
{
    return p->got >= sizeof(p->theirs) && p->theirs.magic == CC_WIRE_MAGIC &&
           p->got - sizeof(p->theirs) >= p->theirs.contribution;
}

/* Exchanges headers and contributions with every peer of the replica group. */
static NRT_STATUS exchange(const char *api, cc_member_t *m, const struct nrt_cc_context *ctx,
                           cc_peer_t *peers, uint32_t npeers, size_t nseg, size_t limit)
{
    uint64_t deadline = emu_now_ns() + m->timeout_ns;
    struct pollfd *fds = calloc(npeers + 1, sizeof(*fds));
    if (fds == NULL)
        return NRT_RESOURCE;
    NRT_STATUS st = NRT_SUCCESS;
    for (;;) {
        uint32_t active = 0;
        for (uint32_t i = 0; i < npeers && st == NRT_SUCCESS; i++) {
            cc_peer_t *p = &peers[i];
            if (!progress_send(p, nseg) || !progress_recv(p, limit)) {
                EMU_ERR(api,
                        "%s on NeuronCore %u: global device %u closed its connection (or sent "
                        "something else)",
                        cc_op_name(ctx->cc_op), ctx->vnc, p->g_id);
                close(p->fd);
                m->fds[p->g_id] = -1;
                st = NRT_FAILURE;
                break;
            }
            short events =
                (short)((p->sent < p->total ? POLLOUT : 0) | (!recv_done(p) ? POLLIN : 0));
            if (events != 0)
                fds[active++] = (struct pollfd){ .fd = p->fd, .events = events };
        }
        if (st != NRT_SUCCESS || active == 0)
            break;
        if (atomic_load(&cc_stopping)) {
            st = NRT_CLOSED;
            break;
        }
        uint64_t now = emu_now_ns();
        if (now >= deadline) {
            EMU_ERR(api,
                    "%s on NeuronCore %u: not every rank of the replica group took part within "
                    "%llu ms",
                    cc_op_name(ctx->cc_op), ctx->vnc,
                    (unsigned long long)(m->timeout_ns / 1000000u));
            st = NRT_TIMEOUT;
            break;
        }
        fds[active] = (struct pollfd){ .fd = cc.wake[0], .events = POLLIN };
        uint64_t left = (deadline - now + 999999u) / 1000000u;
        int n = poll(fds, active + (cc.wake[0] >= 0 ? 1 : 0), left > 100 ? 100 : (int)left);
        if (n < 0 && errno != EINTR) {
            st = NRT_FAILURE;
            break;
        }
    }
    free(fds);
    /* After a failure the streams to the peers are out of step: later collectives fail fast. */
    if (st == NRT_TIMEOUT || st == NRT_CLOSED)
        for (uint32_t i = 0; i < npeers; i++)
            if (!recv_done(&peers[i]) || peers[i].sent < peers[i].total) {
                close(peers[i].fd);
                m->fds[peers[i].g_id] = -1;
            }
    return st;
}

/* Bytes of tensor i's input that rank `to` receives from this rank: all of it, or its chunk
 * (reduce-scatter). */
static size_t part_size(const struct nrt_cc_context *ctx, size_t i)
{
    return ctx->cc_op == NRT_CC_REDUCESCATTER ? ctx->in[i].size / ctx->rank_n : ctx->in[i].size;
}

/* This rank's contribution of tensor i for rank `to`. */
static const unsigned char *part_of(const struct nrt_cc_context *ctx, size_t i, uint32_t to)
{
    size_t off = ctx->cc_op == NRT_CC_REDUCESCATTER ? (size_t)to * part_size(ctx, i) : 0;
    return emu_view_bytes(&ctx->in[i], off);
}

static NRT_STATUS run_collective(cc_member_t *m, const struct nrt_cc_context *ctx)
{
    static const char api[] = "nrta_cc_schedule (collective)";
    uint32_t npeers = ctx->rank_n - 1;
    uint64_t in_bytes = 0, contribution = 0;
    for (size_t i = 0; i < ctx->n; i++) {
        in_bytes += ctx->in[i].size;
        contribution += part_size(ctx, i);
    }
    cc_peer_t *peers = calloc(npeers ? npeers : 1, sizeof(*peers));
    const unsigned char **seg = calloc(npeers * ctx->n + 1, sizeof(*seg));
    size_t *seg_len = calloc(npeers * ctx->n + 1, sizeof(*seg_len));
    NRT_STATUS st = peers && seg && seg_len ? NRT_SUCCESS : NRT_RESOURCE;
    for (uint32_t r = 0, k = 0; r < ctx->rank_n && st == NRT_SUCCESS; r++) {
        if (r == ctx->rank)
            continue;
        cc_peer_t *p = &peers[k];
        p->g_id = ctx->group[r];
        p->fd = m->fds[p->g_id];
        if (p->fd < 0) {
            EMU_ERR(api, "the connection to global device %u failed earlier", p->g_id);
            st = NRT_FAILURE;
            break;
        }
        p->header = (cc_wire_t){ .magic = CC_WIRE_MAGIC,
                                 .cc_op = (uint32_t)ctx->cc_op,
                                 .dtype = (uint32_t)ctx->dtype,
                                 .op = ctx->cc_op == NRT_CC_ALLGATHER ? 0u : (uint32_t)ctx->op,
                                 .rank_n = ctx->rank_n,
                                 .group_hash = ctx->group_hash,
                                 .in_bytes = in_bytes,
                                 .contribution = contribution };
        p->seg = seg + (size_t)k * ctx->n;
        p->seg_len = seg_len + (size_t)k * ctx->n;
        for (size_t i = 0; i < ctx->n; i++) {
            p->seg[i] = part_of(ctx, i, r);
            p->seg_len[i] = part_size(ctx, i);
        }
        p->total = sizeof(p->header) + contribution;
        k++;
    }
    /* A peer's declared contribution is read whatever it is (up to a bound), so that a
     * disagreement is reported as one rather than as a broken connection. */
    size_t limit = contribution > ((size_t)16 << 20) ? 4 * contribution : (size_t)64 << 20;
    if (st == NRT_SUCCESS && npeers > 0)
        st = exchange(api, m, ctx, peers, npeers, ctx->n, limit);
    /* Every rank compares every header with its own, so all of them see a disagreement. */
    for (uint32_t k = 0; k < npeers && st == NRT_SUCCESS; k++) {
        const cc_wire_t *a = &peers[k].header, *b = &peers[k].theirs;
        if (a->cc_op != b->cc_op || a->dtype != b->dtype || a->op != b->op ||
            a->rank_n != b->rank_n || a->group_hash != b->group_hash ||
            a->in_bytes != b->in_bytes || a->contribution != b->contribution) {
            EMU_ERR(api,
                    "global device %u runs %s (dtype 0x%x, op %u, %llu input bytes, group of %u) "
                    "where this one runs %s (dtype 0x%x, op %u, %llu input bytes, group of %u)",
                    peers[k].g_id, cc_op_name((nrt_cc_op_type_t)b->cc_op), b->dtype, b->op,
                    (unsigned long long)b->in_bytes, b->rank_n, cc_op_name(ctx->cc_op), a->dtype,
                    a->op, (unsigned long long)a->in_bytes, a->rank_n);
            st = NRT_INVALID;
        }
    }
    /* The contributions by rank of the group. */
    const unsigned char **from = calloc(ctx->rank_n, sizeof(*from));
    if (st == NRT_SUCCESS && from == NULL)
        st = NRT_RESOURCE;
    unsigned char *tmp = NULL;
    for (size_t i = 0, base = 0; i < ctx->n && st == NRT_SUCCESS; i++) {
        size_t part = part_size(ctx, i), out = ctx->out[i].size;
        for (uint32_t r = 0, k = 0; r < ctx->rank_n; r++)
            from[r] = r == ctx->rank ? part_of(ctx, i, r) : peers[k++].data + base;
        unsigned char *dst = emu_view_bytes(&ctx->out[i], 0);
        if (ctx->cc_op == NRT_CC_ALLGATHER) {
            /* This rank's own part may be its place in the output already (in place). */
            memmove(dst + (size_t)ctx->rank * part, from[ctx->rank], part);
            for (uint32_t r = 0; r < ctx->rank_n; r++)
                if (r != ctx->rank)
                    memcpy(dst + (size_t)r * part, from[r], part);
        } else {
            tmp = malloc(out ? out : 1);
            if (tmp == NULL) {
                st = NRT_RESOURCE;
                break;
            }
            memcpy(tmp, from[0], out);
            for (uint32_t r = 1; r < ctx->rank_n; r++)
                accumulate(tmp, from[r], out / ctx->esize, ctx->dtype, ctx->op);
            memcpy(dst, tmp, out);
            free(tmp);
            tmp = NULL;
        }
        base += part;
    }
    free(from);
    for (uint32_t k = 0; peers != NULL && k < npeers; k++)
        free(peers[k].data);
    free(peers);
    free(seg);
    free(seg_len);
    return st;
}

/* Records a request's final status, then reports it complete. */
static void complete(cc_member_t *m, struct nrt_cc_context *ctx, NRT_STATUS status)
{
    if (ctx->ret != NULL)
        *ctx->ret = status;
    if (status != NRT_SUCCESS && ctx->tracker != NULL) {
        pthread_mutex_lock(&cc.lock); /* so that the tracker is not destroyed meanwhile */
        if (tracker_live(ctx->tracker))
            tracker_record(ctx->tracker, make_seq(ctx->vnc, ctx->seqnum), status);
        pthread_mutex_unlock(&cc.lock);
    }
    atomic_store_explicit(&m->done, ctx->seqnum, memory_order_release);
    context_free(ctx);
}

static void *worker_main(void *arg)
{
    uint32_t vnc = (uint32_t)(uintptr_t)arg;
    cc_member_t *m = &cc.m[vnc];
    pthread_mutex_lock(&cc.lock);
    for (;;) {
        while (!atomic_load(&cc_stopping) && m->head == NULL)
            pthread_cond_wait(&cc.cond, &cc.lock);
        struct nrt_cc_context *ctx = m->head;
        if (ctx == NULL)
            break;
        m->head = ctx->next;
        if (m->head == NULL)
            m->tail = NULL;
        m->queued--;
        pthread_mutex_unlock(&cc.lock);
        NRT_STATUS st = atomic_load(&cc_stopping) ? NRT_CLOSED : run_collective(m, ctx);
        complete(m, ctx, st);
        pthread_mutex_lock(&cc.lock);
    }
    pthread_mutex_unlock(&cc.lock);
    return NULL;
}

/* ---- nrt_close and fork -------------------------------------------------------------------- */

static void forget_all(bool child)
{
    for (uint32_t v = 0; v < EMU_MAX_VNC; v++) {
        cc_member_t *m = &cc.m[v];
        close_fds(m);
        struct nrt_cc_context *ctx = m->head;
        while (!child && ctx != NULL) { /* drained by the worker; nothing left normally */
            struct nrt_cc_context *next = ctx->next;
            context_free(ctx);
            ctx = next;
        }
        memset(m, 0, sizeof(*m));
    }
    while (!child && cc.prepared != NULL) {
        struct nrt_cc_context *next = cc.prepared->next;
        context_free(cc.prepared);
        cc.prepared = next;
    }
    while (!child && cc.trackers != NULL) {
        struct nrta_error_tracker *next = cc.trackers->next;
        tracker_free(cc.trackers);
        cc.trackers = next;
    }
    cc.prepared = NULL;
    cc.trackers = NULL;
}

void emu_cc_shutdown(void)
{
    pthread_mutex_lock(&cc.lock);
    atomic_store(&cc_stopping, true);
    if (cc.wake[1] >= 0) {
        ssize_t ignored = write(cc.wake[1], "x", 1);
        (void)ignored;
    }
    pthread_cond_broadcast(&cc.cond);
    for (;;) {
        bool joining = false;
        for (uint32_t v = 0; v < EMU_MAX_VNC; v++)
            joining = joining || cc.m[v].joining;
        if (!joining)
            break;
        pthread_cond_wait(&cc.cond, &cc.lock);
    }
    pthread_mutex_unlock(&cc.lock);
    for (uint32_t v = 0; v < EMU_MAX_VNC; v++)
        if (cc.m[v].worker_started)
            pthread_join(cc.m[v].worker, NULL);
    pthread_mutex_lock(&cc.lock);
    forget_all(false);
    char drain[64];
    while (cc.wake[0] >= 0 && read(cc.wake[0], drain, sizeof(drain)) > 0)
        ;
    atomic_store(&cc_stopping, false);
    pthread_mutex_unlock(&cc.lock);
}

/* The cancel pipe exists for the library's whole life (and is made anew in a forked child), so
 * that the threads polling it never see it change. */
__attribute__((constructor)) static void emu_cc_load(void)
{
    if (pipe2(cc.wake, O_CLOEXEC | O_NONBLOCK) != 0)
        cc.wake[0] = cc.wake[1] = -1;
}

void emu_cc_lock_for_fork(void)
{
    pthread_mutex_lock(&cc.lock);
}

void emu_cc_unlock_after_fork(void)
{
    pthread_mutex_unlock(&cc.lock);
}

void emu_cc_reset_after_fork(void)
{
    /* The parent's threads do not exist here and its connections are not the child's: close the
     * child's copies (the parent's stay open) and forget the rest without touching it. */
    forget_all(true);
    if (cc.wake[0] >= 0) {
        close(cc.wake[0]);
        close(cc.wake[1]);
    }
    if (pipe2(cc.wake, O_CLOEXEC | O_NONBLOCK) != 0)
        cc.wake[0] = cc.wake[1] = -1;
    pthread_cond_init(&cc.cond, NULL);
    atomic_store(&cc_stopping, false);
}
