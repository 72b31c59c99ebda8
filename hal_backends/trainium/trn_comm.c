/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: native communicators over libnrt's out-of-NEFF collectives.
 *
 * Which runtimes: the out-of-NEFF collectives came with libnrt 2.30 (Neuron SDK 2.28), whose
 * headers are the last published in full: nrt_cc_global_comm_init, nrta_cc_prepare,
 * nrta_cc_schedule with an error tracker (async API 2), nrta_is_completed. libnrt 2.31 (SDK 2.29)
 * moved to async API 3, where nrta_cc_schedule takes a status pointer instead. The backend reads
 * the version at open and calls the form that version has; a runtime whose version it cannot
 * read, or an older one, gets the HAL's host-staged collectives (trn_cc_setup).
 *
 * comm_init (every rank, after the HAL's bootstrap brought them together):
 *   1. Each rank says, through the bootstrap's allgather, whether it can run native collectives
 *      (runtime, HAL_NEURON_NATIVE_COLLECTIVES, a core no other native communicator uses), who
 *      it is (host, process, core), the global communicator its core belongs to, and where it
 *      listens for the others' control connections. Every rank sees the same table and decides
 *      alike: native only if all can, no two share a core (the runtime has one rank per core),
 *      and either no core is in a global communicator yet (a new one is built) or all are in the
 *      same one (the communicator is a replica group of it). Otherwise the HAL runs this
 *      communicator's collectives on the host, as on any backend without native ones.
 *   2. Rank 0 chooses the runtime's rendezvous address (NEURON_RT_ROOT_COMM_ID: an ip:port free
 *      on the address of HAL_COMM_BIND, default 127.0.0.1) and the control connections'
 *      secret, and broadcasts them; every rank sets NEURON_RT_ROOT_COMM_ID and calls
 *      nrt_cc_global_comm_init(core, rank, nranks): its global device id is its rank.
 *   3. The ranks connect to each other (control connections, authenticated by the secret).
 *   4. A last allgather says whether every rank got this far; if one did not, all fall back to
 *      the host (and say so on stderr).
 * The control connections carry, before each collective, what every rank is about to run, so
 * that ranks that disagree fail alike (HAL_ERROR_INVALID_ARGUMENT) before the runtime sees
 * anything, and a rank that fails, aborts or leaves is noticed by the others
 * (HAL_ERROR_REMOTE) instead of running into the timeout (trn_comm_ops.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hal_backends/trainium/trn_comm.h"

/* "0" turns native collectives off (every communicator uses the HAL's host-staged ones). */
#define TRN_ENV_NATIVE "HAL_NEURON_NATIVE_COLLECTIVES"

#define TRN_INFO_MAGIC  0x54524e31u /* the rank table's version */
#define TRN_HELLO_MAGIC 0x54524e48u

/* ---- what the runtime offers ---------------------------------------------------------------- */

void trn_cc_setup(trn_backend_t *b)
{
    const trn_nrt_t *nrt = &b->nrt;
    pthread_mutex_init(&b->cc_lock, NULL);
    const char *env = getenv(TRN_ENV_NATIVE);
    b->cc_enabled = env == NULL || strcmp(env, "0") != 0;
    b->cc_api = TRN_CC_NONE;
    if (!nrt->have_version)
        snprintf(b->cc_reason, sizeof(b->cc_reason),
                 "the runtime's version is unknown, and with it the signatures of its "
                 "out-of-NEFF collectives");
    else if (!trn_nrt_version_at_least(nrt, 2, 30))
        snprintf(b->cc_reason, sizeof(b->cc_reason),
                 "libnrt %llu.%llu has no out-of-NEFF collectives (they came with libnrt 2.30, "
                 "Neuron SDK 2.28)",
                 (unsigned long long)nrt->version[0], (unsigned long long)nrt->version[1]);
    else if (!nrt->have_cc)
        snprintf(b->cc_reason, sizeof(b->cc_reason),
                 "the runtime lacks nrt_cc_global_comm_init, nrta_cc_prepare, nrta_cc_schedule "
                 "or nrta_is_completed");
    else if (!trn_nrt_version_at_least(nrt, 2, 31) && !nrt->have_trackers)
        snprintf(b->cc_reason, sizeof(b->cc_reason),
                 "libnrt 2.30 without the error trackers of async API 2");
    else
        b->cc_api = trn_nrt_version_at_least(nrt, 2, 31) ? TRN_CC_V3 : TRN_CC_V2;
}

void trn_cc_reap(trn_backend_t *b, bool completed_only)
{
    pthread_mutex_lock(&b->cc_lock);
    trn_cc_job_t **p = &b->graveyard;
    while (*p != NULL) {
        trn_cc_job_t *job = *p;
        bool done = false;
        if (completed_only && (b->nrt.is_completed(job->seq, &done) != NRT_SUCCESS || !done)) {
            p = &job->next;
            continue;
        }
        *p = job->next;
        /* After nrt_close the runtime freed the tensors itself. */
        for (unsigned i = 0; completed_only && i < job->ntensors; i++)
            b->nrt.tensor_free(&job->tensors[i]);
        free(job);
    }
    pthread_mutex_unlock(&b->cc_lock);
}

/* ---- sockets -------------------------------------------------------------------------------- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Waits for events on fd until the deadline: 1 ready, 0 timed out, -1 failed. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
    for (;;) {
        uint64_t now = now_ns();
        if (now >= deadline)
            return 0;
        uint64_t ms = (deadline - now + 999999u) / 1000000u;
        struct pollfd p = { .fd = fd, .events = events };
        int n = poll(&p, 1, ms > 100 ? 100 : (int)ms);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

static bool io_all(int fd, void *buf, size_t len, bool sending, uint64_t deadline)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t k = sending ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (k > 0) {
            p += k;
            len -= (size_t)k;
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(fd, sending ? POLLOUT : POLLIN, deadline) != 1)
                return false;
        } else if (!(k < 0 && errno == EINTR)) {
            return false;
        }
    }
    return true;
}

/* The IPv4 address of HAL_COMM_BIND's host ("ip", "ip:port" or a host name; default 127.0.0.1),
 * which the backend's own listeners use as the HAL's bootstrap does. */
static bool bind_address(struct in_addr *out)
{
    const char *env = getenv("HAL_COMM_BIND");
    out->s_addr = htonl(INADDR_LOOPBACK);
    if (env == NULL || env[0] == '\0')
        return true;
    char host[256];
    snprintf(host, sizeof(host), "%s", env);
    char *colon = strchr(host, ':');
    if (colon != NULL && strchr(colon + 1, ':') == NULL)
        *colon = '\0'; /* "host:port" (more colons would be IPv6, which this does not do) */
    if (inet_pton(AF_INET, host, out) == 1)
        return true;
    struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || res == NULL)
        return false;
    *out = ((const struct sockaddr_in *)(const void *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return true;
}

/* Where peers reach an address bound to `bound` (the host's own address for 0.0.0.0). */
static struct in_addr advertised(struct in_addr bound)
{
    if (bound.s_addr != htonl(INADDR_ANY))
        return bound;
    char name[256];
    struct in_addr a = { htonl(INADDR_LOOPBACK) };
    struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res = NULL;
    if (gethostname(name, sizeof(name)) == 0 && getaddrinfo(name, NULL, &hints, &res) == 0 &&
        res != NULL) {
        a = ((const struct sockaddr_in *)(const void *)res->ai_addr)->sin_addr;
        freeaddrinfo(res);
    }
    return a;
}

/* A listener on the bind address, port chosen by the system; *where receives the address peers
 * reach it at. */
static int listen_any(struct sockaddr_in *where, int backlog)
{
    struct in_addr bound;
    if (!bind_address(&bound))
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr = bound };
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, backlog) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    a.sin_addr = advertised(bound);
    *where = a;
    return fd;
}

static void tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int connect_to(const struct sockaddr_in *to, uint64_t deadline)
{
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        int err = connect(fd, (const struct sockaddr *)to, sizeof(*to)) == 0 ? 0 : errno;
        if (err == EINPROGRESS) {
            err = ETIMEDOUT;
            if (wait_fd(fd, POLLOUT, deadline) == 1) {
                socklen_t len = sizeof(err);
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
                    err = errno;
            }
        }
        if (err == 0) {
            tune(fd);
            return fd;
        }
        close(fd);
        if (err != ECONNREFUSED || now_ns() >= deadline)
            return -1;
        struct timespec ts = { 0, 10000000 }; /* nobody listens yet */
        nanosleep(&ts, NULL);
    }
}

/* ---- the rank table ------------------------------------------------------------------------ */

typedef struct trn_rank_info {
    uint32_t magic;
    uint32_t eligible; /* this rank can run native collectives */
    uint64_t host;     /* which host (a hash of its name and boot id) */
    uint32_t pid;
    uint32_t core;  /* the device's index in its process */
    uint64_t token; /* its core's global communicator, 0 if none */
    uint32_t g_id, g_count;
    uint32_t ctl_ip; /* its control listener, network order */
    uint32_t ctl_port;
} trn_rank_info_t;

/* What rank 0 tells everyone. */
typedef struct trn_setup_blob {
    uint64_t token;     /* a new global communicator's name */
    uint8_t secret[16]; /* authenticates the control connections */
    char root[64];      /* NEURON_RT_ROOT_COMM_ID for a new global communicator */
} trn_setup_blob_t;

typedef enum { MODE_HOST, MODE_NEW_WORLD, MODE_SAME_WORLD } trn_mode_t;

static uint64_t host_id(void)
{
    char buf[320] = "";
    if (gethostname(buf, 256) != 0)
        buf[0] = '\0';
    size_t len = strlen(buf);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
        if (fgets(buf + len, (int)(sizeof(buf) - len), f) == NULL)
            buf[len] = '\0';
        fclose(f);
    }
    uint64_t h = 1469598103934665603u;
    for (const char *c = buf; *c; c++) {
        h ^= (unsigned char)*c;
        h *= 1099511628211u;
    }
    return h;
}

/* Every rank computes the same answer from the same table. */
static trn_mode_t decide(const trn_rank_info_t *all, int n, char *why, size_t size)
{
    bool none = true, same = true;
    for (int i = 0; i < n; i++) {
        if (all[i].magic != TRN_INFO_MAGIC || !all[i].eligible) {
            snprintf(why, size, "rank %d cannot run them", i);
            return MODE_HOST;
        }
        for (int j = 0; j < i; j++) {
            if (all[i].host == all[j].host && all[i].pid == all[j].pid &&
                all[i].core == all[j].core) {
                snprintf(why, size, "ranks %d and %d share a NeuronCore", j, i);
                return MODE_HOST;
            }
            if (all[i].token != 0 && all[i].g_id == all[j].g_id)
                same = false;
        }
        none = none && all[i].token == 0;
        same = same && all[i].token != 0 && all[i].token == all[0].token &&
               all[i].g_count == all[0].g_count;
    }
    if (none)
        return MODE_NEW_WORLD;
    if (same)
        return MODE_SAME_WORLD;
    snprintf(why, size,
             "the ranks' NeuronCores belong to different global communicators of the runtime");
    return MODE_HOST;
}

/* ---- the runtime's global communicator ------------------------------------------------------ */

/* One global communicator is built at a time in a process: NEURON_RT_ROOT_COMM_ID is read by the
 * runtime and there is one environment. Cores of one communicator build it together. */
static pthread_mutex_t forming_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t forming_cond = PTHREAD_COND_INITIALIZER;
static char forming_root[64];
static int forming_users;

static NRT_STATUS join_world(trn_device_t *d, const char *root, int rank, int nranks)
{
    trn_backend_t *b = d->backend;
    pthread_mutex_lock(&forming_lock);
    while (forming_root[0] != '\0' && strcmp(forming_root, root) != 0)
        pthread_cond_wait(&forming_cond, &forming_lock);
    if (forming_root[0] == '\0') {
        snprintf(forming_root, sizeof(forming_root), "%s", root);
        const char *current = getenv("NEURON_RT_ROOT_COMM_ID");
        if (current == NULL || strcmp(current, root) != 0)
            setenv("NEURON_RT_ROOT_COMM_ID", root, 1);
    }
    forming_users++;
    pthread_mutex_unlock(&forming_lock);
    NRT_STATUS rc = b->nrt.cc_global_comm_init(d->index, (uint32_t)rank, (uint32_t)nranks);
    pthread_mutex_lock(&forming_lock);
    if (--forming_users == 0) {
        forming_root[0] = '\0';
        pthread_cond_broadcast(&forming_cond);
    }
    pthread_mutex_unlock(&forming_lock);
    return rc;
}

/* ---- control connections -------------------------------------------------------------------- */

typedef struct trn_hello {
    uint32_t magic;
    uint32_t rank;
    uint8_t secret[16];
} trn_hello_t;

/* Connects to the ranks below, accepts the ranks above. */
static bool connect_mesh(trn_comm_t *c, int lfd, const trn_rank_info_t *all, const uint8_t *secret,
                         uint64_t deadline, char *why, size_t size)
{
    for (int j = 0; j < c->rank; j++) {
        struct sockaddr_in to = { .sin_family = AF_INET,
                                  .sin_port = htons((uint16_t)all[j].ctl_port) };
        to.sin_addr.s_addr = all[j].ctl_ip;
        int fd = connect_to(&to, deadline);
        trn_hello_t h = { .magic = TRN_HELLO_MAGIC, .rank = (uint32_t)c->rank };
        memcpy(h.secret, secret, sizeof(h.secret));
        if (fd < 0 || !io_all(fd, &h, sizeof(h), true, deadline)) {
            snprintf(why, size, "cannot connect to rank %d's control listener: %s", j,
                     strerror(errno));
            if (fd >= 0)
                close(fd);
            return false;
        }
        c->fds[j] = fd;
    }
    for (int left = c->nranks - 1 - c->rank; left > 0;) {
        if (wait_fd(lfd, POLLIN, deadline) != 1) {
            snprintf(why, size, "%d higher ranks did not connect in time", left);
            return false;
        }
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        trn_hello_t h;
        if (!io_all(fd, &h, sizeof(h), false, deadline) || h.magic != TRN_HELLO_MAGIC ||
            memcmp(h.secret, secret, sizeof(h.secret)) != 0 || (int)h.rank <= c->rank ||
            (int)h.rank >= c->nranks || c->fds[h.rank] >= 0) {
            close(fd); /* not one of this communicator's ranks */
            continue;
        }
        tune(fd);
        c->fds[h.rank] = fd;
        left--;
    }
    return true;
}

/* ---- the communicator ----------------------------------------------------------------------- */

static void comm_free(trn_comm_t *c)
{
    for (int i = 0; c->fds != NULL && i < c->nranks; i++)
        if (c->fds[i] >= 0)
            close(c->fds[i]);
    if (c->wake[0] >= 0)
        close(c->wake[0]);
    if (c->wake[1] >= 0)
        close(c->wake[1]);
    /* A tracker a request the runtime still has may write to stays (nrt_close frees it). */
    if (c->tracker != NULL && c->abandoned == 0)
        c->backend->nrt.error_tracker_destroy(c->tracker);
    pthread_mutex_destroy(&c->io_lock);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    free(c->fds);
    free(c->group);
    free(c);
}

static trn_comm_t *comm_new(trn_device_t *d, const hal_backend_comm_args_t *args)
{
    trn_comm_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->device = d;
    c->backend = d->backend;
    c->nranks = args->nranks;
    c->rank = args->rank;
    c->timeout_ms = args->timeout_ms;
    c->wake[0] = c->wake[1] = -1;
    pthread_mutex_init(&c->io_lock, NULL);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    c->fds = malloc((size_t)args->nranks * sizeof(*c->fds));
    c->group = calloc((size_t)args->nranks, sizeof(*c->group));
    if (c->fds == NULL || c->group == NULL || pipe2(c->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        comm_free(c);
        return NULL;
    }
    for (int i = 0; i < args->nranks; i++)
        c->fds[i] = -1;
    return c;
}

/* Says on stderr why a communicator that could have been native is not. */
static void log_fallback(trn_device_t *d, int nranks, const char *why)
{
    fprintf(stderr,
            "trainium: NeuronCore %u: native collectives not used for a communicator of %d "
            "ranks (%s); the HAL's host-staged collectives serve it\n",
            d->index, nranks, why);
}

hal_status_t trn_comm_init(void *device_, const hal_backend_comm_args_t *args, void **out)
{
    trn_device_t *d = device_;
    trn_backend_t *b = d->backend;
    *out = NULL;
    hal_status_t started = trn_runtime_require(b); /* a communicator uses the core */
    if (started != HAL_OK)
        return started;
    /* One native communicator per core at a time: the runtime runs a core's collectives one
     * after another, in the order they were scheduled, so two communicators whose ranks issue
     * them in different orders would wait for each other. Others use the host. */
    bool claimed = false;
    if (b->cc_api != TRN_CC_NONE && b->cc_enabled && args->nranks >= 2) {
        bool expected = false;
        claimed = atomic_compare_exchange_strong(&d->cc_claimed, &expected, true);
    }
    struct sockaddr_in ctl = { 0 };
    int lfd = claimed ? listen_any(&ctl, args->nranks) : -1;
    bool eligible = claimed && lfd >= 0;

    trn_rank_info_t mine = { .magic = TRN_INFO_MAGIC,
                             .eligible = eligible,
                             .host = host_id(),
                             .pid = (uint32_t)getpid(),
                             .core = d->index,
                             .ctl_ip = ctl.sin_addr.s_addr,
                             .ctl_port = ntohs(ctl.sin_port) };
    pthread_mutex_lock(&b->cc_lock);
    mine.token = d->world.token;
    mine.g_id = d->world.g_id;
    mine.g_count = d->world.g_count;
    pthread_mutex_unlock(&b->cc_lock);

    trn_rank_info_t *all = calloc((size_t)args->nranks, sizeof(*all));
    trn_comm_t *c = NULL;
    char why[TRN_MSG_MAX] = "";
    hal_status_t st = all != NULL ? HAL_OK : HAL_ERROR_OUT_OF_HOST_MEMORY;
    if (st == HAL_OK)
        st = args->allgather(args->bootstrap, &mine, sizeof(mine), all);
    trn_mode_t mode = st == HAL_OK ? decide(all, args->nranks, why, sizeof(why)) : MODE_HOST;
    if (st != HAL_OK || mode == MODE_HOST)
        goto out_release; /* a failed bootstrap fails the init; else the host runs it */

    /* Rank 0's choices, for everyone. */
    trn_setup_blob_t blob;
    memset(&blob, 0, sizeof(blob));
    if (args->rank == 0) {
        while (blob.token == 0)
            if (getrandom(&blob.token, sizeof(blob.token), 0) != (ssize_t)sizeof(blob.token))
                blob.token = now_ns() ^ ((uint64_t)getpid() << 32);
        if (getrandom(blob.secret, sizeof(blob.secret), 0) != (ssize_t)sizeof(blob.secret))
            memcpy(blob.secret, &blob.token, sizeof(blob.token));
        struct sockaddr_in probe;
        int pfd = listen_any(&probe, 1); /* a port free now, for the runtime's root */
        if (pfd >= 0) {
            char ip[INET_ADDRSTRLEN] = "127.0.0.1";
            inet_ntop(AF_INET, &probe.sin_addr, ip, sizeof(ip));
            snprintf(blob.root, sizeof(blob.root), "%s:%u", ip, ntohs(probe.sin_port));
            close(pfd);
        }
    }
    st = args->broadcast(args->bootstrap, &blob, sizeof(blob), 0);
    if (st != HAL_OK)
        goto out_release;

    bool ok = true;
    c = comm_new(d, args);
    if (c == NULL) {
        snprintf(why, sizeof(why), "out of host memory");
        ok = false;
    }
    uint64_t deadline = now_ns() + (uint64_t)args->timeout_ms * 1000000u;
    if (ok && mode == MODE_NEW_WORLD) {
        if (blob.root[0] == '\0') {
            snprintf(why, sizeof(why), "rank 0 found no free port for the runtime's root");
            ok = false;
        } else {
            NRT_STATUS rc = join_world(d, blob.root, args->rank, args->nranks);
            if (rc == NRT_SUCCESS) {
                pthread_mutex_lock(&b->cc_lock);
                d->world = (trn_cc_world_t){ .token = blob.token,
                                             .g_id = (uint32_t)args->rank,
                                             .g_count = (uint32_t)args->nranks };
                pthread_mutex_unlock(&b->cc_lock);
            } else {
                trn_status_format(&b->nrt, rc, TRN_OP_OTHER, why, sizeof(why),
                                  "nrt_cc_global_comm_init(vnc %u, %d, %d) with "
                                  "NEURON_RT_ROOT_COMM_ID=%s",
                                  d->index, args->rank, args->nranks, blob.root);
                ok = false;
            }
        }
    }
    if (ok) {
        for (int r = 0; r < args->nranks; r++)
            c->group[r] = mode == MODE_NEW_WORLD ? (uint32_t)r : all[r].g_id;
        pthread_mutex_lock(&b->cc_lock);
        uint32_t g_count = d->world.g_count;
        pthread_mutex_unlock(&b->cc_lock);
        c->cc = (nrt_cc_comm_t){ .replica_group = c->group,
                                 .rank = (uint32_t)args->rank,
                                 .rank_n = (uint32_t)args->nranks,
                                 .ctx_device_id = c->group[args->rank],
                                 .ctx_device_count = g_count,
                                 .vnc = d->index };
    }
    if (ok && b->cc_api == TRN_CC_V2) {
        NRT_STATUS rc = b->nrt.error_tracker_create(d->index, &c->tracker);
        if (rc != NRT_SUCCESS) {
            trn_status_format(&b->nrt, rc, TRN_OP_OTHER, why, sizeof(why),
                              "nrta_error_tracker_create(%u)", d->index);
            c->tracker = NULL;
            ok = false;
        }
    }
    if (ok)
        ok = connect_mesh(c, lfd, all, blob.secret, deadline, why, sizeof(why));

    /* Native only if every rank got here. */
    uint8_t flag = ok, *flags = malloc((size_t)args->nranks);
    st = flags != NULL ? args->allgather(args->bootstrap, &flag, 1, flags)
                       : HAL_ERROR_OUT_OF_HOST_MEMORY;
    for (int r = 0; st == HAL_OK && r < args->nranks && ok; r++) {
        if (!flags[r]) {
            snprintf(why, sizeof(why), "rank %d could not set them up", r);
            ok = false;
        }
    }
    free(flags);
    if (st != HAL_OK || !ok) {
        if (st == HAL_OK)
            log_fallback(d, args->nranks, why);
        goto out_release;
    }
    close(lfd);
    free(all);
    *out = c;
    return HAL_OK;

out_release:
    if (c != NULL)
        comm_free(c);
    if (lfd >= 0)
        close(lfd);
    if (claimed)
        atomic_store(&d->cc_claimed, false);
    free(all);
    if (st == HAL_ERROR_OUT_OF_HOST_MEMORY)
        trn_set_error(b, "out of host memory while setting up a communicator");
    return st;
}

hal_status_t trn_comm_destroy(void *comm)
{
    trn_comm_t *c = comm;
    trn_device_t *d = c->device;
    trn_backend_t *b = c->backend;
    /* The core waited for the collectives queued on the communicator before calling this. */
    comm_free(c);
    atomic_store(&d->cc_claimed, false);
    trn_cc_reap(b, true);
    return HAL_OK;
}

hal_status_t trn_comm_abort(void *comm)
{
    trn_comm_t *c = comm;
    pthread_mutex_lock(&c->lock);
    bool first = !c->aborted;
    c->aborted = true;
    if (c->status == HAL_OK) {
        c->status = HAL_ERROR_ABORTED;
        snprintf(c->message, sizeof(c->message), "hal_comm_abort was called");
    }
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    if (!first)
        return HAL_OK;
    ssize_t ignored = write(c->wake[1], "a", 1); /* ends every wait of the collectives */
    (void)ignored;
    trn_ctl_msg_t msg = { .magic = TRN_CTL_MAGIC,
                          .type = TRN_CTL_FAIL,
                          .status = (uint32_t)HAL_ERROR_ABORTED };
    trn_comm_tell_all(c, &msg);
    return HAL_OK;
}

hal_status_t trn_comm_get_async_error(void *comm)
{
    return trn_comm_latched(comm);
}

/* The runtime's description of the communicator (nrt_cc_comm_t *: replica group, rank, core),
 * valid until the communicator is destroyed. */
hal_status_t trn_comm_get_native_handle(void *comm, uintptr_t *native)
{
    *native = (uintptr_t) & ((trn_comm_t *)comm)->cc;
    return HAL_OK;
}

/* ---- shared with trn_comm_ops.c -------------------------------------------------------------- */

hal_status_t trn_comm_latched(trn_comm_t *c)
{
    pthread_mutex_lock(&c->lock);
    hal_status_t st = c->status;
    char message[TRN_MSG_MAX];
    snprintf(message, sizeof(message), "%s", c->message);
    pthread_mutex_unlock(&c->lock);
    if (st != HAL_OK)
        trn_set_error(c->backend, "the communicator failed earlier: %s", message);
    return st;
}

bool trn_comm_is_aborted(trn_comm_t *c)
{
    pthread_mutex_lock(&c->lock);
    bool aborted = c->aborted;
    pthread_mutex_unlock(&c->lock);
    return aborted;
}

void trn_comm_tell_all(trn_comm_t *c, const trn_ctl_msg_t *msg)
{
    /* A short deadline: a peer that does not read (it is gone or stuck) is not waited for. */
    uint64_t deadline = now_ns() + 200000000u;
    pthread_mutex_lock(&c->io_lock);
    for (int r = 0; r < c->nranks; r++) {
        if (c->fds[r] < 0)
            continue;
        trn_ctl_msg_t copy = *msg;
        io_all(c->fds[r], &copy, sizeof(copy), true, deadline);
    }
    pthread_mutex_unlock(&c->io_lock);
}

void trn_comm_fail(trn_comm_t *c, hal_status_t st, bool tell_peers, const char *fmt, ...)
{
    pthread_mutex_lock(&c->lock);
    bool first = c->status == HAL_OK;
    if (first) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->message, sizeof(c->message), fmt, ap);
        va_end(ap);
        c->status = st;
    }
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    if (first && tell_peers) {
        trn_ctl_msg_t msg = { .magic = TRN_CTL_MAGIC,
                              .type = TRN_CTL_FAIL,
                              .status = (uint32_t)st };
        trn_comm_tell_all(c, &msg);
    }
}
