/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance, collectives: point to point (hal_send, hal_recv), groups and barriers, on 1 to 4
 * ranks as threads and as processes. Sends and receives are matched in order per (sender,
 * receiver) pair; within a group they run concurrently, so ranks can exchange with a peer (or
 * themselves) without deadlock; groups nest and only the outermost end enqueues. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cts_comm.h"

/* ---- Point to point -------------------------------------------------------------------------- */

/* One message on this rank: a send to or a receive from peer, at a byte offset of the send or
 * receive buffer. The data is the sender's values for the message's seed. */
typedef struct p2p_msg {
    bool send;
    int peer;
    size_t off;
    uint32_t seed;
} p2p_msg_t;

/* A message's seed: the same on both sides. */
static uint32_t msg_seed(uint32_t base, int from, int to, int k)
{
    return cc_seed(base, (uint32_t)from, (uint32_t)to, (uint32_t)k);
}

/* Runs this rank's messages (grouped or one call at a time) and checks what arrived, that
 * nothing else of the receive buffer changed and that the send buffer is intact. */
static bool p2p_round(cc_rank_t *r, cc_bufs_t *b, hal_dtype_t dt, size_t count,
                      const p2p_msg_t *msgs, int n, bool grouped, const char *what)
{
    if (r->broken)
        return false;
    const size_t es = cc_dtype_size(dt), bytes = count * es;
    size_t used = 0;
    for (int i = 0; i < n; i++)
        if (msgs[i].off + bytes + CC_GUARD > used)
            used = msgs[i].off + bytes + CC_GUARD;
    if (used > b->bytes) {
        CC_FAILF(r, "test defect: %s needs %zu bytes", what, used);
        cc_break(r);
        return false;
    }
    uint32_t pat_a = msg_seed(msgs[0].seed, 1, 2, 3), pat_b = pat_a ^ 0x5a5a5au;
    unsigned char *ha = b->host_a, *hb = b->host_b, *da = b->dev_a, *db = b->dev_b;
    cc_pattern_fill(ha, used, pat_a);
    cc_pattern_fill(hb, used, pat_b);
    for (int i = 0; i < n; i++)
        if (msgs[i].send)
            cc_fill(dt, CC_CLASS_BITS, r->rank, 0, count, msgs[i].seed, ha + msgs[i].off);
    hal_status_t st = hal_memcpy_async(da, ha, used, r->stream);
    if (st == HAL_OK)
        st = hal_memcpy_async(db, hb, used, r->stream);
    if (st == HAL_OK && grouped)
        st = hal_group_begin();
    for (int i = 0; i < n && st == HAL_OK; i++) {
        const p2p_msg_t *m = &msgs[i];
        st = m->send ? hal_send(da + m->off, count, dt, m->peer, r->comm, r->stream)
                     : hal_recv(db + m->off, count, dt, m->peer, r->comm, r->stream);
        if (st != HAL_OK)
            CC_FAILF(r, "%s: %s %s peer %d: %s: %s", what,
                     m->send ? "hal_send to" : "hal_recv from", cc_dtype_name(dt), m->peer,
                     hal_status_string(st), hal_last_error_message());
    }
    if (grouped) {
        hal_status_t end = hal_group_end();
        if (st == HAL_OK && end != HAL_OK) {
            st = end;
            CC_FAILF(r, "%s: hal_group_end: %s: %s", what, hal_status_string(st),
                     hal_last_error_message());
        }
    }
    if (st == HAL_OK)
        st = hal_memcpy_async(ha, da, used, r->stream);
    if (st == HAL_OK)
        st = hal_memcpy_async(hb, db, used, r->stream);
    if (st == HAL_OK) {
        st = hal_stream_synchronize(r->stream);
        if (st != HAL_OK)
            CC_FAILF(r, "%s (%s, count %zu): the stream failed: %s: %s", what, cc_dtype_name(dt),
                     count, hal_status_string(st), hal_last_error_message());
    }
    if (st != HAL_OK) {
        cc_break(r);
        return false;
    }
    /* Each received message, then every byte outside them; sent data and the rest of the send
     * buffer unchanged. */
    for (int i = 0; i < n; i++) {
        const p2p_msg_t *m = &msgs[i];
        const unsigned char *buf = m->send ? ha : hb;
        int owner = m->send ? r->rank : m->peer;
        for (size_t j = 0; j < count; j++) {
            uint64_t got = cc_get(dt, buf + m->off, j);
            uint64_t want = cc_value(dt, CC_CLASS_BITS, owner, j, m->seed);
            if (got != want) {
                CC_FAILF(r,
                         "%s (%s, count %zu): %s peer %d: element %zu is 0x%llx, expected 0x%llx",
                         what, cc_dtype_name(dt), count,
                         m->send ? "the send buffer changed, to" : "received from", m->peer, j,
                         (unsigned long long)got, (unsigned long long)want);
                break;
            }
        }
    }
    for (int side = 0; side < 2; side++) {
        const unsigned char *buf = side == 0 ? ha : hb;
        uint32_t pat = side == 0 ? pat_a : pat_b;
        for (size_t k = 0; k < used; k++) {
            bool inside = false;
            for (int i = 0; i < n && !inside; i++)
                inside = msgs[i].send == (side == 0) && k >= msgs[i].off && k < msgs[i].off + bytes;
            if (!inside && buf[k] != cc_pattern_byte(k, pat)) {
                CC_FAILF(r,
                         "%s (%s, count %zu): byte %zu of the %s buffer, outside every message, "
                         "was written",
                         what, cc_dtype_name(dt), count, k, side == 0 ? "send" : "receive");
                break;
            }
        }
    }
    return true;
}

static const size_t p2p_counts[] = { 0, 1, 7, 1023, CC_LARGE_COUNT };

static void p2p_rank(cc_rank_t *r)
{
    const int n = r->nranks, me = r->rank;
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    const bool fp8 = (r->props.capabilities & HAL_DEVICE_CAP_FP8_COLLECTIVES) != 0;
    /* Two messages of 1023 8-byte elements, or one large message of 4-byte elements. */
    size_t big = CC_LARGE_COUNT * 4 + CC_GUARD, two = 2 * (1023 * 8 + CC_GUARD);
    cc_bufs_t b;
    if (!cc_bufs_alloc(r, &b, big > two ? big : two))
        return;
    for (int d = 0; d < CC_NUM_DTYPES && !r->broken; d++) {
        hal_dtype_t dt = cc_all_dtypes[d];
        if (cc_is_fp8(dt) && !fp8)
            continue;
        for (size_t k = 0; k < sizeof(p2p_counts) / sizeof(p2p_counts[0]) && !r->broken; k++) {
            size_t count = p2p_counts[k];
            if (count == CC_LARGE_COUNT && dt != HAL_DTYPE_F32 && dt != HAL_DTYPE_I32)
                continue;
            uint32_t base = cc_seed(0x9292u, (uint32_t)dt, (uint32_t)k, 0);
            size_t slot = count * cc_dtype_size(dt) + CC_GUARD;
            /* A ring in one group: send to the next rank, receive from the previous (with one
             * rank: to and from itself). */
            p2p_msg_t ring[2] = {
                { true, next, 0, msg_seed(base, me, next, 0) },
                { false, prev, 0, msg_seed(base, prev, me, 0) },
            };
            p2p_round(r, &b, dt, count, ring, 2, true, "ring in a group");
            /* An exchange with one peer in a group, the receive issued first (ranks without a
             * partner exchange with themselves). */
            int partner = (me ^ 1) < n ? me ^ 1 : me;
            p2p_msg_t swap[2] = {
                { false, partner, 0, msg_seed(base ^ 1u, partner, me, 0) },
                { true, partner, 0, msg_seed(base ^ 1u, me, partner, 0) },
            };
            p2p_round(r, &b, dt, count, swap, 2, true, "exchange in a group");
            if (count == CC_LARGE_COUNT)
                continue;
            /* Two messages to the same peer are received in the order they were sent. */
            p2p_msg_t order[4] = {
                { true, next, 0, msg_seed(base ^ 2u, me, next, 0) },
                { true, next, slot, msg_seed(base ^ 2u, me, next, 1) },
                { false, prev, 0, msg_seed(base ^ 2u, prev, me, 0) },
                { false, prev, slot, msg_seed(base ^ 2u, prev, me, 1) },
            };
            p2p_round(r, &b, dt, count, order, 4, true, "two messages in order, grouped");
            /* Outside groups, pair by pair: a sends two messages to b, b receives them. */
            if (count != 7 && count != 1023)
                continue;
            for (int from = 0; from < n; from++) {
                for (int to = 0; to < n; to++) {
                    if (from == to || (me != from && me != to))
                        continue;
                    bool sending = me == from;
                    int peer = sending ? to : from;
                    p2p_msg_t pair[2] = {
                        { sending, peer, 0, msg_seed(base ^ 3u, from, to, 0) },
                        { sending, peer, slot, msg_seed(base ^ 3u, from, to, 1) },
                    };
                    p2p_round(r, &b, dt, count, pair, 2, false, "pairwise, not grouped");
                }
            }
        }
    }
    cc_bufs_free(r, &b);
}

/* Collectives in groups: they run in order; nested groups enqueue at the outermost end. */
static void group_rank(cc_rank_t *r)
{
    const size_t count = 1023;
    cc_case_t ar = { .kind = CC_ALLREDUCE,
                     .dtype = HAL_DTYPE_F32,
                     .op = HAL_REDOP_SUM,
                     .count = count,
                     .seed = 71 };
    cc_case_t bc = { .kind = CC_BROADCAST,
                     .dtype = HAL_DTYPE_I32,
                     .count = count,
                     .root = r->nranks - 1,
                     .seed = 72 };
    const size_t bytes = count * 4;
    cc_bufs_t b;
    if (r->broken || !cc_bufs_alloc(r, &b, 2 * (bytes + CC_GUARD)))
        return;
    unsigned char *ha = b.host_a, *db = b.dev_b;
    void *x = db, *y = db + bytes + CC_GUARD;
    cc_fill(ar.dtype, CC_CLASS_ADD, r->rank, 0, count, ar.seed, ha);
    cc_fill(bc.dtype, CC_CLASS_BITS, r->rank, 0, count, bc.seed, ha + bytes + CC_GUARD);
    hal_status_t st = hal_memcpy_async(db, ha, 2 * (bytes + CC_GUARD), r->stream);
    for (int depth = 1; depth <= 3 && st == HAL_OK; depth++) {
        /* The in-place allreduce of x and the broadcast of y, grouped at nesting depth. */
        for (int i = 0; i < depth && st == HAL_OK; i++)
            st = hal_group_begin();
        if (st == HAL_OK)
            st = hal_allreduce(x, x, count, ar.dtype, ar.op, r->comm, r->stream);
        if (st == HAL_OK)
            st = hal_broadcast(y, y, count, bc.dtype, bc.root, r->comm, r->stream);
        for (int i = 0; i < depth; i++) {
            hal_status_t end = hal_group_end();
            if (st == HAL_OK)
                st = end;
        }
        if (st != HAL_OK)
            break;
        /* Check both, then restore the inputs for the next depth. */
        st = hal_memcpy_async(b.host_b, db, 2 * (bytes + CC_GUARD), r->stream);
        if (st == HAL_OK)
            st = hal_stream_synchronize(r->stream);
        if (st != HAL_OK)
            break;
        const unsigned char *got = b.host_b;
        for (size_t j = 0; j < count; j++) {
            char detail[256];
            if (!cc_check_reduced(ar.dtype, ar.op, r->nranks, j, ar.seed, cc_get(ar.dtype, got, j),
                                  detail, sizeof(detail))) {
                CC_FAILF(r, "allreduce in a group nested %d deep: element %zu: %s", depth, j,
                         detail);
                break;
            }
        }
        for (size_t j = 0; j < count; j++) {
            uint64_t g = cc_get(bc.dtype, got + bytes + CC_GUARD, j);
            uint64_t want = cc_value(bc.dtype, CC_CLASS_BITS, bc.root, j, bc.seed);
            if (g != want) {
                CC_FAILF(r,
                         "broadcast in a group nested %d deep: element %zu is 0x%llx, expected "
                         "0x%llx",
                         depth, j, (unsigned long long)g, (unsigned long long)want);
                break;
            }
        }
        st = hal_memcpy_async(db, ha, 2 * (bytes + CC_GUARD), r->stream);
    }
    if (st != HAL_OK) {
        CC_FAILF(r, "grouped collectives: %s: %s", hal_status_string(st), hal_last_error_message());
        cc_break(r);
    }
    cc_bufs_free(r, &b);
}

static void p2p_and_groups_rank(cc_rank_t *r)
{
    p2p_rank(r);
    group_rank(r);
}

const cc_scenario_t cc_scenario_p2p = { "p2p", p2p_and_groups_rank, 0 };

/* ---- Barriers -------------------------------------------------------------------------------- */

static void barrier_rank(cc_rank_t *r)
{
    for (int i = 0; i < 50; i++)
        if (!CC_EXPECT_OK(r, hal_barrier(r->comm, r->stream))) {
            cc_break(r);
            return;
        }
    if (!CC_EXPECT_OK(r, hal_stream_synchronize(r->stream))) {
        cc_break(r);
        return;
    }
    if (r->nranks < 2 || (r->props.capabilities & HAL_DEVICE_CAP_HOST_CALLBACKS) == 0)
        return;
    /* Rank 0 reaches its barrier 600 ms late (a host callback holds its stream): nobody's
     * barrier may complete before. The barrier before lines the ranks up. */
    enum { LATE_MS = 600 };
    if (!CC_EXPECT_OK(r, hal_barrier(r->comm, r->stream)) ||
        !CC_EXPECT_OK(r, hal_stream_synchronize(r->stream))) {
        cc_break(r);
        return;
    }
    double t0 = cts_now_ms();
    if (r->rank == 0 && !CC_EXPECT_OK(r, cc_enqueue_delay(r->stream, LATE_MS))) {
        cc_break(r);
        return;
    }
    if (!CC_EXPECT_OK(r, hal_barrier(r->comm, r->stream))) {
        cc_break(r);
        return;
    }
    if (r->rank != 0) {
        cts_sleep_ms(150);
        CC_EXPECT_STATUS(r, hal_stream_query(r->stream), HAL_NOT_READY);
    }
    if (!CC_EXPECT_OK(r, hal_stream_synchronize(r->stream))) {
        cc_break(r);
        return;
    }
    double ms = cts_now_ms() - t0;
    if (ms < LATE_MS / 2)
        CC_FAILF(r,
                 "a barrier completed %.0f ms after it was enqueued, although rank 0 reached "
                 "it only after %d ms",
                 ms, LATE_MS);
}

const cc_scenario_t cc_scenario_barrier = { "barrier", barrier_rank, 0 };

/* ---- Bodies ---------------------------------------------------------------------------------- */

#define CC_RANK_BODY(name, scenario, mode, MODE, n)             \
    int cts_comm_##name##_##mode##_##n(cts_ctx_t *ctx)          \
    {                                                           \
        return cc_run_simple(ctx, &(scenario), 0, (MODE), (n)); \
    }
#define CC_RANK_BODIES(name, scenario)                       \
    CC_RANK_BODY(name, scenario, threads, CC_THREADS, 1)     \
    CC_RANK_BODY(name, scenario, threads, CC_THREADS, 2)     \
    CC_RANK_BODY(name, scenario, threads, CC_THREADS, 3)     \
    CC_RANK_BODY(name, scenario, threads, CC_THREADS, 4)     \
    CC_RANK_BODY(name, scenario, processes, CC_PROCESSES, 1) \
    CC_RANK_BODY(name, scenario, processes, CC_PROCESSES, 2) \
    CC_RANK_BODY(name, scenario, processes, CC_PROCESSES, 3) \
    CC_RANK_BODY(name, scenario, processes, CC_PROCESSES, 4)

CC_RANK_BODIES(sendrecv, cc_scenario_p2p)
CC_RANK_BODIES(barrier, cc_scenario_barrier)

static void *group_end_thread(void *p)
{
    hal_status_t *out = p;
    out[0] = hal_group_end();
    out[1] = hal_group_begin();
    out[2] = hal_group_end();
    out[3] = hal_group_end();
    return NULL;
}

/* hal_group_end without a matching begin; groups are per thread. */
int cts_comm_group_end_without_begin(cts_ctx_t *ctx)
{
    (void)ctx;
    CTS_CHECK_STATUS(hal_group_end(), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_OK(hal_group_begin());
    hal_status_t other[4];
    pthread_t t;
    CTS_CHECK(pthread_create(&t, NULL, group_end_thread, other) == 0);
    pthread_join(t, NULL);
    CTS_CHECK_OK(hal_group_end());
    CTS_CHECK_STATUS(hal_group_end(), HAL_ERROR_INVALID_ARGUMENT);
    /* This thread's open group was invisible to the other thread. */
    CTS_CHECK_STATUS(other[0], HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_OK(other[1]);
    CTS_CHECK_OK(other[2]);
    CTS_CHECK_STATUS(other[3], HAL_ERROR_INVALID_ARGUMENT);
    return CTS_PASS;
}
