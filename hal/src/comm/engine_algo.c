/* SPDX-License-Identifier: Apache-2.0 */
/* Collectives among the ranks of one host. Every collective starts the same way: each rank
 * writes its descriptor (and, for small operations, its data) into its slot, publishes the
 * slot's sequence number, waits for every peer's, and compares descriptors before touching any
 * data. Then, by size and placement:
 *
 *  - small (payload summed over ranks at most ENG_SMALL_TOTAL, or ENG_SMALL_DIRECT_TOTAL when
 *    the direct path is possible): the data rode along with the descriptors; every rank reads
 *    every peer's slot and computes its result itself, in rank order (bit-identical
 *    everywhere). One synchronisation: the latency path.
 *  - direct (ranks are threads of one process, or every rank gave IPC handles the others can
 *    map): ranks work on each other's buffers. Each rank owns one share of the elements,
 *    reduces it from every rank's input in rank order and writes the result into every rank's
 *    output: each byte is read once and written once, which is what the memory-bandwidth
 *    ceiling allows. A closing synchronisation keeps buffers alive until peers are done.
 *  - staged (other processes without IPC): a pipelined reduce-scatter + allgather through the
 *    ranks' staging memory, ENG_STAGE_DEPTH rounds in flight, each rank reducing its own piece
 *    of every round.
 *
 * In-place operations are safe on every path because each element of a rank's output is
 * written by exactly one rank, after the inputs that alias it were read (see each kind). */
#include <stdio.h>
#include <string.h>

#include "hal/src/comm/engine_impl.h"
#include "hal/src/core.h"

/* Small-path limits: payload bytes summed over ranks (each rank reads all of them). Through
 * staging the small path wins up to ENG_SMALL_TOTAL; when ranks can work on each other's
 * buffers, the direct path (which reads every byte once) wins from ENG_SMALL_DIRECT_TOTAL. */
#define ENG_SMALL_TOTAL        (64u << 10)
#define ENG_SMALL_DIRECT_TOTAL (4u << 10)
/* Direct-path results at least this large bypass the caches (non-temporal stores): the
 * outputs are not read again soon and write-allocate would double their traffic. */
#define ENG_NT_BYTES (16u << 20)

typedef struct eng_coll {
    const hal_engine_op_t *op;
    const char *call;
    size_t esize;
    size_t bytes; /* count * esize */
    const eng_reducer_t *red;
    uint64_t seq;
    uint64_t done; /* direct path: the synchronisation point that ends it */
    int n, me;
    eng_slot_t *slot; /* this rank's slot for seq */
} eng_coll_t;

static inline eng_slot_t *peer_slot(const hal_engine_comm_t *c, const eng_coll_t *x, int p)
{
    return &c->peers[p].ctrl->slot[x->seq & 1];
}

static size_t small_payload(const eng_coll_t *x)
{
    switch (x->op->kind) {
    case HAL_ENGINE_REDUCE_SCATTER:
    case HAL_ENGINE_ALLTOALL:
        return x->bytes * (size_t)x->n;
    case HAL_ENGINE_BARRIER:
        return 0;
    default:
        return x->bytes;
    }
}

/* Whether this rank would rather run the small path: it only can if every rank wants it (each
 * says so in its descriptor), since only then every payload is in its slot. Ranks that could
 * work directly prefer it earlier; ranks disagree only when some lack IPC handles, and then
 * nobody can work directly: the staged path runs. */
static bool wants_small(const hal_engine_comm_t *c, const eng_coll_t *x)
{
    if (x->op->kind == HAL_ENGINE_BARRIER)
        return true;
    size_t total = small_payload(x) * (size_t)x->n;
    bool direct_here = !c->multi_process || (x->op->has_ipc && c->has_ipc);
    return small_payload(x) <= ENG_SLOT_BYTES &&
           total <= (direct_here ? ENG_SMALL_DIRECT_TOTAL : ENG_SMALL_TOTAL);
}

void eng_fill_desc(const hal_engine_comm_t *c, const hal_engine_op_t *op, eng_desc_t *d)
{
    memset(d, 0, sizeof(*d));
    d->kind = (uint8_t)op->kind;
    if (op->kind != HAL_ENGINE_BARRIER) {
        d->count = op->count;
        d->dtype = (uint8_t)op->dtype;
    }
    if (op->kind == HAL_ENGINE_ALLREDUCE || op->kind == HAL_ENGINE_REDUCE ||
        op->kind == HAL_ENGINE_REDUCE_SCATTER)
        d->op = (uint8_t)op->op;
    if (op->kind == HAL_ENGINE_BROADCAST || op->kind == HAL_ENGINE_REDUCE)
        d->root = op->root;
    d->flags = (uint8_t)((op->has_ipc && c->has_ipc ? ENG_F_IPC : 0u) |
                         (op->sendbuf ? ENG_F_SEND_SET : 0u) | (op->recvbuf ? ENG_F_RECV_SET : 0u));
}

bool eng_desc_equal(const eng_desc_t *a, const eng_desc_t *b)
{
    return a->kind == b->kind && a->count == b->count && a->dtype == b->dtype && a->op == b->op &&
           a->root == b->root;
}

hal_status_t eng_desc_mismatch(hal_engine_comm_t *c, const char *call, int p,
                               const eng_desc_t *theirs, const eng_desc_t *mine)
{
    if (theirs->kind != mine->kind)
        return eng_fail(c, HAL_ERROR_INVALID_ARGUMENT, call, "rank %d called %s, this rank %s", p,
                        eng_kind_name((hal_engine_kind_t)theirs->kind),
                        eng_kind_name((hal_engine_kind_t)mine->kind));
    char a[192] = "", b[192] = "";
    size_t la = 0, lb = 0;
    const char *sep = " with";
#define ENG_DIFF(cond, fmt, tv, mv)                                             \
    do {                                                                        \
        if (cond) {                                                             \
            la += (size_t)snprintf(a + la, sizeof(a) - la, "%s " fmt, sep, tv); \
            lb += (size_t)snprintf(b + lb, sizeof(b) - lb, "%s " fmt, sep, mv); \
            sep = " and";                                                       \
            la = la < sizeof(a) ? la : sizeof(a) - 1;                           \
            lb = lb < sizeof(b) ? lb : sizeof(b) - 1;                           \
        }                                                                       \
    } while (0)
    ENG_DIFF(theirs->count != mine->count, "count %llu", (unsigned long long)theirs->count,
             (unsigned long long)mine->count);
    ENG_DIFF(theirs->dtype != mine->dtype, "dtype %s", eng_dtype_name((hal_dtype_t)theirs->dtype),
             eng_dtype_name((hal_dtype_t)mine->dtype));
    ENG_DIFF(theirs->op != mine->op, "op %s", eng_op_name((hal_redop_t)theirs->op),
             eng_op_name((hal_redop_t)mine->op));
    ENG_DIFF(theirs->root != mine->root, "root %d", theirs->root, mine->root);
#undef ENG_DIFF
    return eng_fail(c, HAL_ERROR_INVALID_ARGUMENT, call, "rank %d called %s%s, this rank%s", p,
                    call, a, b);
}

/* Publishes this rank's descriptor (with the small payload, or the buffer addresses for the
 * direct path) and waits until every peer published the same. A rank that wants the small path
 * writes nothing else: the direct path never runs unless every rank wants it alike. */
static hal_status_t arrive(hal_engine_comm_t *c, eng_coll_t *x, const void *payload, size_t bytes,
                           bool small)
{
    const hal_engine_op_t *op = x->op;
    eng_slot_t *s = x->slot;
    if (bytes)
        memcpy(s->payload, payload, bytes);
    if (!small) {
        s->buf.sendptr = (uint64_t)(uintptr_t)op->sendbuf;
        s->buf.recvptr = (uint64_t)(uintptr_t)op->recvbuf;
        if (op->has_ipc && c->has_ipc && c->multi_process) {
            s->buf.send_ipc = op->send_ipc;
            s->buf.recv_ipc = op->recv_ipc;
        }
    }
    eng_desc_t d;
    eng_fill_desc(c, op, &d);
    if (small)
        d.flags |= ENG_F_SMALL;
    s->desc.count = d.count;
    s->desc.kind = d.kind;
    s->desc.dtype = d.dtype;
    s->desc.op = d.op;
    s->desc.root = d.root;
    s->desc.flags = d.flags;
    eng_store(&s->desc.seq, x->seq);
    for (int p = 0; p < x->n; p++) {
        if (p == x->me)
            continue;
        HAL_CHECK(eng_wait(c, &peer_slot(c, x, p)->desc.seq, x->seq, p, x->call,
                           "its arrival at the collective"));
    }
    for (int p = 0; p < x->n; p++) {
        if (p == x->me)
            continue;
        const eng_desc_t *t = &peer_slot(c, x, p)->desc;
        if (!eng_desc_equal(t, &d))
            return eng_desc_mismatch(c, x->call, p, t, &d);
    }
    /* A peer that published its arrival and then failed (it gave up waiting for this rank,
     * say) must not be counted in: its result is already an error. */
    for (int p = 0; p < x->n; p++) {
        if (p == x->me)
            continue;
        uint64_t state = eng_peer_failed_in(c, p, x->seq);
        if (state)
            return eng_fail(
                c, HAL_ERROR_REMOTE, x->call, "rank %d failed (%s) before this rank arrived", p,
                state == ENG_STATE_GONE ? "destroyed" : hal_status_string((hal_status_t)state));
    }
    return HAL_OK;
}

/* ---- small: everything through the slots ---- */

static hal_status_t run_small(hal_engine_comm_t *c, eng_coll_t *x)
{
    const hal_engine_op_t *op = x->op;
    const int n = x->n, me = x->me;
    size_t bytes = x->bytes;
    bool root = op->root == me;
    unsigned char *recv = op->recvbuf;
    switch (op->kind) {
    case HAL_ENGINE_ALLREDUCE:
    case HAL_ENGINE_REDUCE:
        if (op->kind == HAL_ENGINE_REDUCE && !root)
            break;
        for (int p = 0; p < n; p++)
            c->srcs[p] = peer_slot(c, x, p)->payload;
        eng_reduce_n(x->red, recv, c->srcs, n, op->count, x->esize, n);
        break;
    case HAL_ENGINE_BROADCAST:
        if (!root)
            memcpy(recv, peer_slot(c, x, op->root)->payload, bytes);
        else if (recv != op->sendbuf)
            memcpy(recv, op->sendbuf, bytes);
        break;
    case HAL_ENGINE_ALLGATHER:
        for (int p = 0; p < n; p++) {
            unsigned char *dst = recv + (size_t)p * bytes;
            if (dst != op->sendbuf)
                memcpy(dst, peer_slot(c, x, p)->payload, bytes);
        }
        break;
    case HAL_ENGINE_REDUCE_SCATTER:
        for (int p = 0; p < n; p++)
            c->srcs[p] = peer_slot(c, x, p)->payload + (size_t)me * bytes;
        eng_reduce_n(x->red, recv, c->srcs, n, op->count, x->esize, n);
        break;
    case HAL_ENGINE_ALLTOALL:
        for (int p = 0; p < n; p++)
            memcpy(recv + (size_t)p * bytes, peer_slot(c, x, p)->payload + (size_t)me * bytes,
                   bytes);
        break;
    default:
        break;
    }
    return HAL_OK;
}

/* ---- direct: in place on each other's buffers ----
 *
 * A rank touches a peer's buffers only while that peer is committed to the operation and
 * cannot return: after a "ready" synchronisation that every rank passed (a rank that failed
 * or timed out earlier never posts it) and a check that no rank failed in the meantime. A rank
 * that fails after posting ready publishes its failure first, then drains: it waits (bounded)
 * until every peer that may have committed finished or noticed, so no peer is still writing
 * into its buffers when it returns. Workers look at their peers between blocks, so a failure
 * anywhere stops everyone within one block. */

/* Bytes copied between two looks at the peers. */
#define ENG_COPY_STEP ((size_t)1 << 20)

/* Peer p's send or receive buffer in this address space. */
static hal_status_t peer_buffer(hal_engine_comm_t *c, eng_coll_t *x, int p, bool recv, void **out)
{
    if (p == x->me) {
        *out = recv ? x->op->recvbuf : (void *)(uintptr_t)x->op->sendbuf;
        return HAL_OK;
    }
    const eng_bufinfo_t *b = &peer_slot(c, x, p)->buf;
    if (c->peers[p].same_process) {
        *out = (void *)(uintptr_t)(recv ? b->recvptr : b->sendptr);
        return HAL_OK;
    }
    return eng_ipc_map(c, p, recv ? &b->recv_ipc : &b->send_ipc, x->call, out);
}

static hal_status_t resolve(hal_engine_comm_t *c, eng_coll_t *x, bool all_send, bool all_recv)
{
    const hal_engine_op_t *op = x->op;
    for (int p = 0; p < x->n; p++) {
        c->send_at[p] = c->recv_at[p] = NULL;
        bool send = all_send || p == x->me || (op->kind == HAL_ENGINE_BROADCAST && p == op->root);
        bool recv = all_recv || p == x->me || (op->kind == HAL_ENGINE_REDUCE && p == op->root);
        if (send && (p == x->me || (peer_slot(c, x, p)->desc.flags & ENG_F_SEND_SET)))
            HAL_CHECK(peer_buffer(c, x, p, false, &c->send_at[p]));
        if (recv && (p == x->me || (peer_slot(c, x, p)->desc.flags & ENG_F_RECV_SET)))
            HAL_CHECK(peer_buffer(c, x, p, true, &c->recv_at[p]));
    }
    return HAL_OK;
}

/* Between blocks: this rank aborted, or a peer failed before it finished its part? */
static hal_status_t poll_peers(hal_engine_comm_t *c, eng_coll_t *x)
{
    if (__atomic_load_n(&c->aborted, __ATOMIC_RELAXED))
        return eng_fail(c, HAL_ERROR_ABORTED, x->call, "aborted on this rank");
    for (int p = 0; p < x->n; p++) {
        if (p == x->me)
            continue;
        uint64_t state = eng_peer_failed_in(c, p, x->seq);
        if (state && eng_load(&c->peers[p].ctrl->sync.v) < x->done)
            return eng_fail(c, HAL_ERROR_REMOTE, x->call, "rank %d failed (%s) during the %s", p,
                            state == ENG_STATE_GONE ? "destroyed"
                                                    : hal_status_string((hal_status_t)state),
                            x->call);
    }
    return HAL_OK;
}

/* After a failure past "ready": waits until each peer that may be working on this rank's
 * buffers is done (reached `done`) or gave up, within the timeout. */
static void drain(hal_engine_comm_t *c, eng_coll_t *x, uint64_t ready, uint64_t done)
{
    /* This rank's failure word was stored (sequentially consistent) before this load, and a
     * peer stores its ready (sequentially consistent) before it loads the failure words: a
     * peer whose ready this rank does not see will see the failure. */
    for (int p = 0; p < x->n; p++) {
        if (p == x->me)
            continue;
        const uint64_t *sync = &c->peers[p].ctrl->sync.v;
        if (__atomic_load_n(sync, __ATOMIC_SEQ_CST) < ready)
            continue;
        eng_backoff_t b = { 0 };
        while (eng_load(sync) < done) {
            /* Any failure (the peer's, the deadline, an abort) ends the wait: the peer stops
             * within a block once it sees this rank's failure word. */
            if (eng_backoff(c, &b, p, x->call, "a peer to leave this rank's buffers") != HAL_OK)
                break;
        }
    }
}

typedef hal_status_t (*direct_work_fn)(hal_engine_comm_t *c, eng_coll_t *x);

/* The frame of every direct operation: map, ready, commit check, work, done. Only ranks whose
 * buffers others write wait at the end (wait_done); the others just publish it. */
static hal_status_t run_direct(hal_engine_comm_t *c, eng_coll_t *x, bool all_send, bool all_recv,
                               bool wait_done, direct_work_fn work)
{
    HAL_CHECK(resolve(c, x, all_send, all_recv));
    uint64_t ready = c->syncs + 1;
    x->done = ready + 1;
    hal_status_t st = eng_sync(c, true, x->call, "its readiness");
    if (st == HAL_OK)
        st = poll_peers(c, x); /* see drain() */
    if (st == HAL_OK)
        st = work(c, x);
    if (st == HAL_OK) {
        eng_copy_fence();
        st = eng_sync(c, wait_done, x->call, "the end of its part");
    }
    if (st != HAL_OK)
        drain(c, x, ready, ready + 1);
    return st;
}

/* dst = src in steps, looking at the peers between steps. */
static hal_status_t copy_checked(hal_engine_comm_t *c, eng_coll_t *x, void *dst, const void *src,
                                 size_t bytes, bool nt)
{
    for (size_t off = 0; off < bytes; off += ENG_COPY_STEP) {
        HAL_CHECK(poll_peers(c, x));
        size_t len = bytes - off < ENG_COPY_STEP ? bytes - off : ENG_COPY_STEP;
        eng_copy((unsigned char *)dst + off, (const unsigned char *)src + off, len, nt);
    }
    return HAL_OK;
}

/* Rank `me`'s share [lo, hi) of n elements, aligned to 64 bytes. */
static void share_of(size_t count, size_t esize, int n, int me, size_t *lo, size_t *hi)
{
    size_t align = 64 / esize;
    size_t share = (count + (size_t)n - 1) / (size_t)n;
    share = (share + align - 1) / align * align;
    size_t l = share * (size_t)me;
    *lo = l < count ? l : count;
    *hi = l + share < count ? l + share : count;
}

/* allreduce and reduce: this rank reduces its share from every input, in rank order, and
 * writes it to every output (the root's only, for reduce). */
static hal_status_t work_reduce(hal_engine_comm_t *c, eng_coll_t *x)
{
    const hal_engine_op_t *op = x->op;
    const int n = x->n;
    const size_t es = x->esize;
    bool all = op->kind == HAL_ENGINE_ALLREDUCE;
    size_t lo, hi;
    share_of(op->count, es, n, x->me, &lo, &hi);
    bool nt = x->bytes >= ENG_NT_BYTES;
    size_t block = ENG_BLOCK / es;
    for (size_t off = lo; off < hi; off += block) {
        HAL_CHECK(poll_peers(c, x));
        size_t m = hi - off < block ? hi - off : block;
        for (int p = 0; p < n; p++)
            c->srcs[p] = (const unsigned char *)c->send_at[p] + off * es;
        eng_reduce_n(x->red, c->scratch, c->srcs, n, m, es, n);
        /* Inputs of this block were all read: writing outputs that alias them is safe. */
        if (all) {
            for (int i = 0; i < n; i++) {
                int q = (x->me + i) % n;
                eng_copy((unsigned char *)c->recv_at[q] + off * es, c->scratch, m * es, nt);
            }
        } else {
            eng_copy((unsigned char *)c->recv_at[op->root] + off * es, c->scratch, m * es, nt);
        }
    }
    return HAL_OK;
}

static hal_status_t work_broadcast(hal_engine_comm_t *c, eng_coll_t *x)
{
    const hal_engine_op_t *op = x->op;
    const void *src = c->send_at[op->root];
    if (op->root == x->me && src == op->recvbuf)
        return HAL_OK;
    return copy_checked(c, x, op->recvbuf, src, x->bytes, false);
}

static hal_status_t work_allgather(hal_engine_comm_t *c, eng_coll_t *x)
{
    unsigned char *recv = x->op->recvbuf;
    for (int i = 0; i < x->n; i++) {
        int p = (x->me + i) % x->n;
        unsigned char *dst = recv + (size_t)p * x->bytes;
        if (dst != c->send_at[p])
            HAL_CHECK(copy_checked(c, x, dst, c->send_at[p], x->bytes, false));
    }
    return HAL_OK;
}

static hal_status_t work_reduce_scatter(hal_engine_comm_t *c, eng_coll_t *x)
{
    const hal_engine_op_t *op = x->op;
    const size_t es = x->esize;
    size_t block = ENG_BLOCK / es;
    for (size_t off = 0; off < op->count; off += block) {
        HAL_CHECK(poll_peers(c, x));
        size_t m = op->count - off < block ? op->count - off : block;
        for (int p = 0; p < x->n; p++)
            c->srcs[p] =
                (const unsigned char *)c->send_at[p] + ((size_t)x->me * op->count + off) * es;
        eng_reduce_n(x->red, c->scratch, c->srcs, x->n, m, es, x->n);
        memcpy((unsigned char *)op->recvbuf + off * es, c->scratch, m * es);
    }
    return HAL_OK;
}

/* Exchanges blocks a->b and b->a in place: reads both sources before writing either
 * destination (each may alias its own rank's source when in place). */
static hal_status_t swap_blocks(hal_engine_comm_t *c, eng_coll_t *x, int a, int b)
{
    size_t bytes = x->bytes;
    const unsigned char *a_src = (const unsigned char *)c->send_at[a] + (size_t)b * bytes;
    const unsigned char *b_src = (const unsigned char *)c->send_at[b] + (size_t)a * bytes;
    unsigned char *a_dst = (unsigned char *)c->recv_at[a] + (size_t)b * bytes;
    unsigned char *b_dst = (unsigned char *)c->recv_at[b] + (size_t)a * bytes;
    for (size_t off = 0; off < bytes; off += ENG_BLOCK) {
        HAL_CHECK(poll_peers(c, x));
        size_t m = bytes - off < ENG_BLOCK ? bytes - off : ENG_BLOCK;
        memcpy(c->scratch, a_src + off, m);
        memcpy(a_dst + off, b_src + off, m);
        memcpy(b_dst + off, c->scratch, m);
    }
    return HAL_OK;
}

static hal_status_t work_alltoall(hal_engine_comm_t *c, eng_coll_t *x)
{
    const int n = x->n, me = x->me;
    unsigned char *self_dst = (unsigned char *)c->recv_at[me] + (size_t)me * x->bytes;
    const unsigned char *self_src = (const unsigned char *)c->send_at[me] + (size_t)me * x->bytes;
    if (self_dst != self_src)
        HAL_CHECK(copy_checked(c, x, self_dst, self_src, x->bytes, false));
    /* Each pair is swapped by one of its two ranks (alternating, to share the work). */
    for (int a = 0; a < n; a++) {
        for (int b = a + 1; b < n; b++) {
            int owner = ((a + b) & 1) ? a : b;
            if (owner == me)
                HAL_CHECK(swap_blocks(c, x, a, b));
        }
    }
    return HAL_OK;
}

/* ---- staged: pipelined through the staging memory of each rank ---- */

/* Before this rank overwrites its staging buffer of `round`: every peer finished the round
 * that last used it (a rank publishes OUT after its last read of a round, so OUT covers both
 * the owners reading pieces and the ranks copying results out). */
static hal_status_t stage_free(hal_engine_comm_t *c, eng_coll_t *x, uint64_t round)
{
    if (round < ENG_STAGE_DEPTH)
        return HAL_OK;
    uint64_t done = round - ENG_STAGE_DEPTH + 1;
    for (int p = 0; p < x->n; p++) {
        if (p == x->me)
            continue;
        HAL_CHECK(eng_wait(c, &c->peers[p].ctrl->stage[ENG_STAGE_OUT].v, done, p, x->call,
                           "it to release a staging buffer"));
    }
    return HAL_OK;
}

static hal_status_t stage_wait(hal_engine_comm_t *c, eng_coll_t *x, int p, int which,
                               uint64_t round)
{
    return eng_wait(c, &c->peers[p].ctrl->stage[which].v, round + 1, p, x->call,
                    which == ENG_STAGE_IN ? "its staged input" : "its staged result");
}

static void stage_post(hal_engine_comm_t *c, int which, uint64_t round)
{
    eng_store(&c->me->stage[which].v, round + 1);
}

/* allreduce and reduce: round r covers n pieces of `piece` bytes; rank i owns piece i. */
static hal_status_t staged_reduce(hal_engine_comm_t *c, eng_coll_t *x)
{
    const hal_engine_op_t *op = x->op;
    const int n = x->n, me = x->me;
    const size_t piece = c->layout.piece, es = x->esize;
    const size_t width = piece * (size_t)n;
    const unsigned char *send = op->sendbuf;
    unsigned char *recv = op->recvbuf;
    bool gathers = op->kind == HAL_ENGINE_ALLREDUCE || op->root == me;
    size_t rounds = (x->bytes + width - 1) / width;
    for (size_t k = 0; k < rounds; k++) {
        uint64_t r = c->round++;
        size_t base = k * width;
#define ENG_PIECE_OFF(i) (base + (size_t)(i)*piece)
#define ENG_PIECE_LEN(i)                                                 \
    (ENG_PIECE_OFF(i) >= x->bytes          ? 0                           \
     : x->bytes - ENG_PIECE_OFF(i) < piece ? x->bytes - ENG_PIECE_OFF(i) \
                                           : piece)
        HAL_CHECK(stage_free(c, x, r));
        for (int i = 0; i < n; i++)
            if (i != me && ENG_PIECE_LEN(i))
                memcpy(eng_piece(c, c->me, r, i), send + ENG_PIECE_OFF(i), ENG_PIECE_LEN(i));
        stage_post(c, ENG_STAGE_IN, r);

        size_t len = ENG_PIECE_LEN(me);
        if (len) {
            for (int p = 0; p < n; p++) {
                if (p == me) {
                    c->srcs[p] = send + ENG_PIECE_OFF(me);
                    continue;
                }
                HAL_CHECK(stage_wait(c, x, p, ENG_STAGE_IN, r));
                c->srcs[p] = eng_piece(c, c->peers[p].ctrl, r, me);
            }
            unsigned char *result = eng_piece(c, c->me, r, me);
            eng_reduce_n(x->red, result, c->srcs, n, len / es, es, n);
            if (gathers)
                memcpy(recv + ENG_PIECE_OFF(me), result, len);
        }
        stage_post(c, ENG_STAGE_COMBINED, r);

        if (gathers) {
            for (int i = 0; i < n; i++) {
                if (i == me || !ENG_PIECE_LEN(i))
                    continue;
                HAL_CHECK(stage_wait(c, x, i, ENG_STAGE_COMBINED, r));
                memcpy(recv + ENG_PIECE_OFF(i), eng_piece(c, c->peers[i].ctrl, r, i),
                       ENG_PIECE_LEN(i));
            }
        }
        stage_post(c, ENG_STAGE_OUT, r);
#undef ENG_PIECE_OFF
#undef ENG_PIECE_LEN
    }
    return HAL_OK;
}

/* reduce_scatter and alltoall: round r covers bytes [r * piece, ...) of every block; the piece
 * of block i goes to rank i. */
static hal_status_t staged_scatter(hal_engine_comm_t *c, eng_coll_t *x)
{
    const hal_engine_op_t *op = x->op;
    const int n = x->n, me = x->me;
    const size_t piece = c->layout.piece, es = x->esize, bytes = x->bytes;
    const unsigned char *send = op->sendbuf;
    unsigned char *recv = op->recvbuf;
    bool reduces = op->kind == HAL_ENGINE_REDUCE_SCATTER;
    size_t rounds = (bytes + piece - 1) / piece;
    for (size_t k = 0; k < rounds; k++) {
        uint64_t r = c->round++;
        size_t off = k * piece;
        size_t len = bytes - off < piece ? bytes - off : piece;
        HAL_CHECK(stage_free(c, x, r));
        for (int i = 0; i < n; i++)
            if (i != me)
                memcpy(eng_piece(c, c->me, r, i), send + (size_t)i * bytes + off, len);
        stage_post(c, ENG_STAGE_IN, r);

        if (reduces) {
            for (int p = 0; p < n; p++) {
                if (p == me) {
                    c->srcs[p] = send + (size_t)me * bytes + off;
                    continue;
                }
                HAL_CHECK(stage_wait(c, x, p, ENG_STAGE_IN, r));
                c->srcs[p] = eng_piece(c, c->peers[p].ctrl, r, me);
            }
            unsigned char *result = eng_piece(c, c->me, r, me);
            eng_reduce_n(x->red, result, c->srcs, n, len / es, es, n);
            memcpy(recv + off, result, len);
        } else {
            unsigned char *self_dst = recv + (size_t)me * bytes + off;
            const unsigned char *self_src = send + (size_t)me * bytes + off;
            if (self_dst != self_src)
                memcpy(self_dst, self_src, len);
            for (int p = 0; p < n; p++) {
                if (p == me)
                    continue;
                HAL_CHECK(stage_wait(c, x, p, ENG_STAGE_IN, r));
                memcpy(recv + (size_t)p * bytes + off, eng_piece(c, c->peers[p].ctrl, r, me), len);
            }
        }
        stage_post(c, ENG_STAGE_COMBINED, r);
        stage_post(c, ENG_STAGE_OUT, r);
    }
    return HAL_OK;
}

/* broadcast and allgather: a producer fills its whole staging buffer of the round (n pieces
 * wide), the others copy it out. */
static hal_status_t staged_gather(hal_engine_comm_t *c, eng_coll_t *x)
{
    const hal_engine_op_t *op = x->op;
    const int n = x->n, me = x->me;
    const size_t width = c->layout.piece * (size_t)n, bytes = x->bytes;
    const unsigned char *send = op->sendbuf;
    unsigned char *recv = op->recvbuf;
    bool bcast = op->kind == HAL_ENGINE_BROADCAST;
    bool produces = !bcast || op->root == me;
    size_t rounds = (bytes + width - 1) / width;
    for (size_t k = 0; k < rounds; k++) {
        uint64_t r = c->round++;
        size_t off = k * width;
        size_t len = bytes - off < width ? bytes - off : width;
        stage_post(c, ENG_STAGE_IN, r);
        if (produces) {
            HAL_CHECK(stage_free(c, x, r));
            memcpy(eng_piece(c, c->me, r, 0), send + off, len);
            unsigned char *own = bcast ? recv + off : recv + (size_t)me * bytes + off;
            if (own != send + off)
                memcpy(own, send + off, len);
        }
        stage_post(c, ENG_STAGE_COMBINED, r);
        for (int p = 0; p < n; p++) {
            if (p == me || (bcast && p != op->root))
                continue;
            HAL_CHECK(stage_wait(c, x, p, ENG_STAGE_COMBINED, r));
            unsigned char *dst = bcast ? recv + off : recv + (size_t)p * bytes + off;
            memcpy(dst, eng_piece(c, c->peers[p].ctrl, r, 0), len);
        }
        stage_post(c, ENG_STAGE_OUT, r);
    }
    return HAL_OK;
}

/* ---- dispatch ---- */

/* Whether every rank's descriptor has the flag (the same answer on every rank). Between
 * processes, the direct path needs every rank to have published handles the others can open
 * (ENG_F_IPC). */
static bool all_flag(const hal_engine_comm_t *c, const eng_coll_t *x, uint32_t flag)
{
    for (int p = 0; p < x->n; p++) {
        const eng_desc_t *d = p == x->me ? &x->slot->desc : &peer_slot(c, x, p)->desc;
        if (!(d->flags & flag))
            return false;
    }
    return true;
}

static hal_status_t local_collective(hal_engine_comm_t *c, const hal_engine_op_t *op);

hal_status_t eng_local_collective(hal_engine_comm_t *c, const hal_engine_op_t *op)
{
    hal_status_t st = local_collective(c, op);
    if (st == HAL_OK)
        __atomic_store_n(&c->seq_done, c->seq, __ATOMIC_RELEASE);
    return st;
}

bool hal_engine_wants_ipc(const hal_engine_comm_t *c, const hal_engine_op_t *op)
{
    if (!c->has_ipc || !c->multi_process || c->tcp)
        return false;
    if (op->kind == HAL_ENGINE_SEND || op->kind == HAL_ENGINE_RECV)
        return true;
    if (op->kind == HAL_ENGINE_BARRIER)
        return false;
    eng_coll_t x = { .op = op, .esize = eng_dtype_size(op->dtype), .n = c->nranks };
    x.bytes = op->count * x.esize;
    /* Without handles such an operation takes the small path on every rank (see wants_small). */
    size_t payload = small_payload(&x);
    return payload > ENG_SLOT_BYTES || payload * (size_t)x.n > ENG_SMALL_TOTAL;
}

static hal_status_t local_collective(hal_engine_comm_t *c, const hal_engine_op_t *op)
{
    eng_coll_t x = {
        .op = op,
        .call = eng_kind_name(op->kind),
        .esize = op->kind == HAL_ENGINE_BARRIER ? 1 : eng_dtype_size(op->dtype),
        .n = c->nranks,
        .me = c->rank,
        .seq = ++c->seq,
    };
    x.bytes = op->kind == HAL_ENGINE_BARRIER ? 0 : op->count * x.esize;
    x.slot = &c->me->slot[x.seq & 1];
    if (op->kind == HAL_ENGINE_ALLREDUCE || op->kind == HAL_ENGINE_REDUCE ||
        op->kind == HAL_ENGINE_REDUCE_SCATTER)
        x.red = eng_reducer(op->dtype, op->op);
    bool small = wants_small(c, &x);
    size_t payload = small ? small_payload(&x) : 0;
    if (op->kind == HAL_ENGINE_BROADCAST && op->root != c->rank)
        payload = 0;
    c->latency_bound = small; /* see leave_cpu in engine_wait.c */
    hal_status_t st = arrive(c, &x, op->sendbuf, payload, small);
    c->latency_bound = false;
    HAL_CHECK(st);
    /* Every rank arrived with the same count: an empty collective is complete (its buffers may
     * be NULL, and nobody reads this rank's slot beyond the descriptor). */
    if (x.bytes == 0)
        return HAL_OK;
    if (all_flag(c, &x, ENG_F_SMALL))
        return run_small(c, &x);
    bool direct = all_flag(c, &x, ENG_F_IPC) || !c->multi_process;
    switch (op->kind) {
    case HAL_ENGINE_ALLREDUCE:
    case HAL_ENGINE_REDUCE:
        /* Outputs are written by every rank: all wait (reduce: the root's only, but the
         * inputs are read by all, so everyone waits too). */
        return direct ? run_direct(c, &x, true, op->kind == HAL_ENGINE_ALLREDUCE, true, work_reduce)
                      : staged_reduce(c, &x);
    case HAL_ENGINE_BROADCAST:
        /* Only the root's buffer is read by others: only it waits for them. */
        return direct ? run_direct(c, &x, false, false, op->root == c->rank, work_broadcast)
                      : staged_gather(c, &x);
    case HAL_ENGINE_ALLGATHER:
        return direct ? run_direct(c, &x, true, false, true, work_allgather) : staged_gather(c, &x);
    case HAL_ENGINE_REDUCE_SCATTER:
        return direct ? run_direct(c, &x, true, false, true, work_reduce_scatter)
                      : staged_scatter(c, &x);
    case HAL_ENGINE_ALLTOALL:
        return direct ? run_direct(c, &x, true, true, true, work_alltoall) : staged_scatter(c, &x);
    default:
        return eng_fail(c, HAL_ERROR_INTERNAL, x.call, "not a collective");
    }
}
