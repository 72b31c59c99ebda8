/* SPDX-License-Identifier: Apache-2.0 */
/* Point to point among the ranks of one host. Messages between two ranks are numbered in
 * order; both sides publish a descriptor of message k (count, dtype, and where the sender's
 * data is) and compare them before any data moves, so a size mismatch fails both sides. The
 * receiver then copies straight from the sender's buffer when it can address it (same process,
 * or an IPC handle it can map) and tells the sender when it is done; otherwise the sender
 * streams chunks through a ring in its area and the receiver drains it.
 *
 * A group's operations are state machines advanced round-robin by one loop, so a rank can send
 * to and receive from the same peer in one group without deadlock. Messages to one peer are
 * processed in order: only the oldest unfinished one per (peer, direction) is active. */
#include <stdlib.h>
#include <string.h>

#include "hal/src/comm/engine_impl.h"
#include "hal/src/core.h"

enum { P2P_POST, P2P_MATCH, P2P_STREAM, P2P_PULL, P2P_WAIT_PULL, P2P_DONE };

/* Bytes a receiver copies from a sender's buffer between two looks at the sender. */
#define ENG_PULL_STEP ((size_t)1 << 20)

typedef struct p2p_state {
    const hal_engine_op_t *op;
    bool send;
    int peer;
    int state;
    uint64_t msg;             /* message number for this pair and direction */
    size_t bytes;             /* payload */
    size_t chunks;            /* ring chunks of the message (staged) */
    size_t moved;             /* chunks (staged) or bytes (pulled) moved so far */
    const unsigned char *src; /* the sender's buffer (pulled) */
} p2p_state_t;

static bool is_p2p(const hal_engine_op_t *op)
{
    return op->kind == HAL_ENGINE_SEND || op->kind == HAL_ENGINE_RECV;
}

hal_status_t eng_self_p2p(hal_engine_comm_t *c, const hal_engine_op_t *ops, size_t n)
{
    /* The k-th send to self pairs with the k-th receive from self. */
    size_t s = 0, r = 0;
    for (;;) {
        while (s < n && !(ops[s].kind == HAL_ENGINE_SEND && ops[s].root == c->rank))
            s++;
        while (r < n && !(ops[r].kind == HAL_ENGINE_RECV && ops[r].root == c->rank))
            r++;
        if (s == n && r == n)
            return HAL_OK;
        if (s == n || r == n)
            return eng_fail(c, HAL_ERROR_INVALID_ARGUMENT, s == n ? "recv" : "send",
                            "a %s addressed to this rank itself needs a matching %s in the same "
                            "group",
                            s == n ? "receive" : "send", s == n ? "send" : "receive");
        const hal_engine_op_t *so = &ops[s], *ro = &ops[r];
        if (so->count != ro->count || so->dtype != ro->dtype)
            return eng_fail(c, HAL_ERROR_INVALID_ARGUMENT, "send",
                            "this rank sends itself count %zu of %s but receives count %zu of %s",
                            so->count, eng_dtype_name(so->dtype), ro->count,
                            eng_dtype_name(ro->dtype));
        size_t bytes = so->count * eng_dtype_size(so->dtype);
        if (bytes && so->sendbuf != ro->recvbuf)
            memmove(ro->recvbuf, so->sendbuf, bytes);
        s++;
        r++;
    }
}

/* Whether message data from `sender` to `receiver` is copied directly by the receiver. */
static bool pulls(const hal_engine_comm_t *c, int peer, uint32_t sender_flags, bool receiver_is_me)
{
    if (c->peers[peer].same_process)
        return true;
    bool receiver_maps = receiver_is_me ? c->has_ipc : c->peers[peer].ipc_table;
    return (sender_flags & ENG_F_IPC) && receiver_maps;
}

static hal_status_t size_mismatch(hal_engine_comm_t *c, const p2p_state_t *s,
                                  const eng_p2p_desc_t *theirs)
{
    const hal_engine_op_t *op = s->op;
    if (s->send)
        return eng_fail(c, HAL_ERROR_INVALID_ARGUMENT, "send",
                        "rank %d receives count %llu of %s from this rank, this rank sends count "
                        "%zu of %s",
                        s->peer, (unsigned long long)theirs->count,
                        eng_dtype_name((hal_dtype_t)theirs->dtype), op->count,
                        eng_dtype_name(op->dtype));
    return eng_fail(c, HAL_ERROR_INVALID_ARGUMENT, "recv",
                    "rank %d sends count %llu of %s to this rank, this rank receives count %zu of "
                    "%s",
                    s->peer, (unsigned long long)theirs->count,
                    eng_dtype_name((hal_dtype_t)theirs->dtype), op->count,
                    eng_dtype_name(op->dtype));
}

/* Advances one operation as far as it can without waiting. Sets *progress when it moved. */
static hal_status_t step(hal_engine_comm_t *c, p2p_state_t *s, bool *progress)
{
    const hal_engine_op_t *op = s->op;
    const int me = c->rank, peer = s->peer;
    eng_p2p_t *mine = eng_p2p(c, c->me, peer);
    eng_p2p_t *theirs = eng_p2p(c, c->peers[peer].ctrl, me);
    const char *call = s->send ? "send" : "recv";
    const size_t chunk = c->layout.ring_chunk;
    switch (s->state) {
    case P2P_POST: {
        eng_p2p_desc_t *d = s->send ? &mine->out[s->msg & 1] : &mine->in[s->msg & 1];
        d->count = op->count;
        d->dtype = (uint32_t)op->dtype;
        d->bytes = s->bytes;
        d->flags = s->send && op->has_ipc && c->has_ipc ? ENG_F_IPC : 0u;
        d->ptr = (uint64_t)(uintptr_t)(s->send ? op->sendbuf : op->recvbuf);
        if (d->flags & ENG_F_IPC)
            d->ipc = op->send_ipc;
        /* Sequentially consistent: pairs with the failure-word checks (see drain()). */
        __atomic_store_n(&d->seq, s->msg, __ATOMIC_SEQ_CST);
        s->state = P2P_MATCH;
        *progress = true;
    }
    /* fall through */
    case P2P_MATCH: {
        const eng_p2p_desc_t *t = s->send ? &theirs->in[s->msg & 1] : &theirs->out[s->msg & 1];
        if (eng_load(&t->seq) < s->msg)
            return HAL_OK;
        if (t->count != op->count || t->dtype != (uint32_t)op->dtype)
            return size_mismatch(c, s, t);
        uint32_t sender_flags = s->send ? (op->has_ipc && c->has_ipc ? ENG_F_IPC : 0u) : t->flags;
        *progress = true;
        if (pulls(c, peer, sender_flags, !s->send)) {
            if (s->send) {
                s->state = P2P_WAIT_PULL;
                return HAL_OK;
            }
            /* The sender may have given up after publishing its message: it must still be
             * committed (its failure word is clear) before its buffer is read. */
            uint64_t state = __atomic_load_n(&c->peers[peer].ctrl->state.v, __ATOMIC_SEQ_CST);
            if (state)
                return eng_fail(
                    c, HAL_ERROR_REMOTE, call, "rank %d failed (%s) before its message", peer,
                    state == ENG_STATE_GONE ? "destroyed" : hal_status_string((hal_status_t)state));
            void *src = NULL;
            if (s->bytes && c->peers[peer].same_process)
                src = (void *)(uintptr_t)t->ptr;
            else if (s->bytes)
                HAL_CHECK(eng_ipc_map(c, peer, &t->ipc, call, &src));
            s->src = src;
            s->moved = 0;
            s->state = P2P_PULL;
            return HAL_OK;
        }
        s->chunks = (s->bytes + chunk - 1) / chunk;
        s->moved = 0;
        s->state = s->chunks ? P2P_STREAM : P2P_DONE;
        return HAL_OK;
    }
    case P2P_STREAM:
        while (s->moved < s->chunks) {
            size_t off = s->moved * chunk;
            size_t len = s->bytes - off < chunk ? s->bytes - off : chunk;
            if (s->send) {
                uint64_t k = c->ring_sent[peer];
                if (k >= ENG_RING_DEPTH && eng_load(&theirs->taken.v) < k - ENG_RING_DEPTH + 1)
                    return HAL_OK;
                memcpy(eng_ring(c, c->me, peer, k), (const unsigned char *)op->sendbuf + off, len);
                c->ring_sent[peer] = k + 1;
                eng_store(&mine->sent.v, k + 1);
            } else {
                uint64_t k = c->ring_took[peer];
                if (eng_load(&theirs->sent.v) < k + 1)
                    return HAL_OK;
                memcpy((unsigned char *)op->recvbuf + off, eng_ring(c, c->peers[peer].ctrl, me, k),
                       len);
                c->ring_took[peer] = k + 1;
                eng_store(&mine->taken.v, k + 1);
            }
            s->moved++;
            *progress = true;
        }
        s->state = P2P_DONE;
        return HAL_OK;
    case P2P_PULL:
        if (s->moved < s->bytes) {
            uint64_t state = __atomic_load_n(&c->peers[peer].ctrl->state.v, __ATOMIC_SEQ_CST);
            if (state)
                return eng_fail(
                    c, HAL_ERROR_REMOTE, call, "rank %d failed (%s) during its message", peer,
                    state == ENG_STATE_GONE ? "destroyed" : hal_status_string((hal_status_t)state));
            size_t len = s->bytes - s->moved < ENG_PULL_STEP ? s->bytes - s->moved : ENG_PULL_STEP;
            memcpy((unsigned char *)op->recvbuf + s->moved, s->src + s->moved, len);
            s->moved += len;
            *progress = true;
            if (s->moved < s->bytes)
                return HAL_OK;
        }
        eng_store(&mine->pulled.v, s->msg);
        s->state = P2P_DONE;
        *progress = true;
        return HAL_OK;
    case P2P_WAIT_PULL:
        if (eng_load(&theirs->pulled.v) < s->msg)
            return HAL_OK;
        s->state = P2P_DONE;
        *progress = true;
        return HAL_OK;
    default:
        return HAL_OK;
    }
}

/* After a failure: a receiver may be copying straight from a send buffer of this rank. Wait
 * (bounded) until each such receiver finished or noticed this rank's failure word, which it
 * checks before and while it copies, so the buffer is not read after this call returns. */
static void drain(hal_engine_comm_t *c, const p2p_state_t *states, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const p2p_state_t *s = &states[i];
        if (!s->send || (s->state != P2P_MATCH && s->state != P2P_WAIT_PULL) ||
            !pulls(c, s->peer, s->op->has_ipc && c->has_ipc ? ENG_F_IPC : 0u, false))
            continue;
        eng_p2p_t *theirs = eng_p2p(c, c->peers[s->peer].ctrl, c->rank);
        if (__atomic_load_n(&theirs->in[s->msg & 1].seq, __ATOMIC_SEQ_CST) < s->msg)
            continue; /* not matched yet: the receiver will see the failure word first */
        eng_backoff_t b = { 0 };
        while (eng_load(&theirs->pulled.v) < s->msg)
            if (eng_backoff(c, &b, s->peer, "send", "a receiver to leave this rank's buffer") !=
                HAL_OK)
                break;
    }
}

hal_status_t eng_local_p2p(hal_engine_comm_t *c, const hal_engine_op_t *ops, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += is_p2p(&ops[i]) && ops[i].root != c->rank;
    if (!count)
        return HAL_OK;
    p2p_state_t *states = calloc(count, sizeof(*states));
    if (!states)
        return eng_fail(c, HAL_ERROR_OUT_OF_HOST_MEMORY, "send", "out of host memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_p2p(&ops[i]) || ops[i].root == c->rank)
            continue;
        p2p_state_t *s = &states[k++];
        s->op = &ops[i];
        s->send = ops[i].kind == HAL_ENGINE_SEND;
        s->peer = ops[i].root;
        s->bytes = ops[i].count * eng_dtype_size(ops[i].dtype);
        s->msg = s->send ? ++c->send_seq[s->peer] : ++c->recv_seq[s->peer];
        s->state = P2P_POST;
    }
    hal_status_t st = HAL_OK;
    eng_backoff_t b = { 0 };
    bool suspect = false; /* a peer stopped: one more pass, then fail if still stuck */
    for (;;) {
        bool progress = false, pending = false;
        int waiting_on = -1;
        for (size_t i = 0; i < count && st == HAL_OK; i++) {
            p2p_state_t *s = &states[i];
            if (s->state == P2P_DONE)
                continue;
            /* An older message in the same direction to the same peer goes first. */
            bool blocked = false;
            for (size_t j = 0; j < i && !blocked; j++)
                blocked = states[j].state != P2P_DONE && states[j].peer == s->peer &&
                          states[j].send == s->send;
            if (!blocked)
                st = step(c, s, &progress);
            if (s->state != P2P_DONE && waiting_on < 0)
                waiting_on = (int)i;
            pending |= s->state != P2P_DONE;
        }
        if (st != HAL_OK || !pending)
            break;
        const char *call = states[waiting_on].send ? "send" : "recv";
        if (progress) {
            b = (eng_backoff_t){ 0 };
            suspect = false;
            continue;
        }
        if (suspect) {
            st = eng_fail_peer(c, &b, call, "a message");
            break;
        }
        for (size_t i = 0; i < count && !suspect; i++)
            if (states[i].state != P2P_DONE && eng_check_peer(c, &b, states[i].peer) != HAL_OK)
                suspect = true;
        if (suspect)
            continue;
        st = eng_backoff(c, &b, states[waiting_on].peer, call, "a matching send or receive");
        if (st == ENG_PEER_STOPPED) {
            suspect = true;
            st = HAL_OK;
        }
        if (st != HAL_OK)
            break;
    }
    if (st != HAL_OK)
        drain(c, states, count);
    free(states);
    return st;
}
