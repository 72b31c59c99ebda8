/* SPDX-License-Identifier: Apache-2.0 */
/* libnrt emulator, out-of-NEFF collectives (emu_cc_internal.h has the overview): the progress
 * engine. One thread per core runs its collectives queue in order: each collective exchanges
 * headers and contributions with every peer of its replica group, then reduces or gathers and
 * writes the outputs. Also nrt_close's cancellation and the fork handlers. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hal_backends/trainium/emulator/emu_cc_internal.h"

#define CC_WIRE_MAGIC 0x4e434331u /* a collective's header */

/* ---- Running a collective ------------------------------------------------------------------ */

/* The header every rank sends every other one before its contribution. */
typedef struct cc_wire {
    uint32_t magic;
    uint32_t cc_op, dtype, op, rank_n, group_hash;
    uint64_t in_bytes;     /* the rank's inputs, all tensors */
    uint64_t contribution; /* bytes that follow */
} cc_wire_t;

/* Starts a core's queue thread with every signal blocked (the application's handlers run on its
 * own threads). Caller holds cc.lock. */
static void *worker_main(void *arg);
bool cc_start_worker(uint32_t vnc)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&cc.m[vnc].worker, NULL, worker_main, (void *)(uintptr_t)vnc);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    cc.m[vnc].worker_started = rc == 0;
    return rc == 0;
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

/* Whether p's header and whole contribution arrived. */
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

/* Runs one collective on member m: exchanges contributions with the replica group, checks
 * that every header agrees with this rank's, then gathers or reduces into the outputs. */
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
                cc_accumulate(tmp, from[r], out / ctx->esize, ctx->dtype, ctx->op);
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
        if (cc_tracker_live(ctx->tracker))
            cc_tracker_record(ctx->tracker, cc_make_seq(ctx->vnc, ctx->seqnum), status);
        pthread_mutex_unlock(&cc.lock);
    }
    atomic_store_explicit(&m->done, ctx->seqnum, memory_order_release);
    cc_context_free(ctx);
}

/* A core's queue thread: runs the queued collectives in order until nrt_close. */
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

/* Forgets every member, context and tracker. A forked child (child) frees nothing its
 * parent's threads may own and only drops its references. Caller holds cc.lock. */
static void forget_all(bool child)
{
    for (uint32_t v = 0; v < EMU_MAX_VNC; v++) {
        cc_member_t *m = &cc.m[v];
        cc_close_fds(m);
        struct nrt_cc_context *ctx = m->head;
        while (!child && ctx != NULL) { /* drained by the worker; nothing left normally */
            struct nrt_cc_context *next = ctx->next;
            cc_context_free(ctx);
            ctx = next;
        }
        memset(m, 0, sizeof(*m));
    }
    while (!child && cc.prepared != NULL) {
        struct nrt_cc_context *next = cc.prepared->next;
        cc_context_free(cc.prepared);
        cc.prepared = next;
    }
    while (!child && cc.trackers != NULL) {
        struct nrta_error_tracker *next = cc.trackers->next;
        cc_tracker_free(cc.trackers);
        cc.trackers = next;
    }
    cc.prepared = NULL;
    cc.trackers = NULL;
}

/* nrt_close: cancels what runs, waits for joins in progress, joins the queue threads, then
 * forgets everything. */
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

/* Fork: held across fork() so that the child gets a consistent state. */
void emu_cc_lock_for_fork(void)
{
    pthread_mutex_lock(&cc.lock);
}

/* Fork: the parent (and the child, before it resets) releases cc.lock. */
void emu_cc_unlock_after_fork(void)
{
    pthread_mutex_unlock(&cc.lock);
}

/* Fork, child side: a fresh state and a cancel pipe of its own. */
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
