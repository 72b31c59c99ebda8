/* SPDX-License-Identifier: Apache-2.0 */
/* The host collective engine's point to point: ring exchanges and exchanges with one peer in
 * one group (deadlock-free only if a group's operations progress together), several messages
 * to one peer in one group (matched in order), sends to self, a group mixing a collective with
 * messages, and mismatched sizes failing both ends; over threads, processes (staged and IPC),
 * a mix of both, and TCP. */
#include <string.h>

#include "hal/tests/comm/engine_test_util.h"
#include "tools/ctest/ctest.h"

#define MSGS 3

/* Byte j of message m from rank src: distinct per sender, message and position. */
static unsigned char pattern(int src, int m, size_t j)
{
    return (unsigned char)(src * 37 + m * 11 + (int)(j % 251));
}

static const size_t counts[] = { 0, 1, 7, 1023, (1u << 20) + 3 };

static int body_ring(et_rank_t *r)
{
    const int n = r->nranks, me = r->rank, next = (me + 1) % n, prev = (me + n - 1) % n;
    size_t maxb = ((1u << 20) + 3) * 4;
    unsigned char *send[MSGS], *recv[MSGS];
    for (int m = 0; m < MSGS; m++) {
        send[m] = et_alloc(r, maxb);
        recv[m] = et_alloc(r, maxb);
        ET_CHECK(r, send[m] && recv[m]);
    }
    unsigned char *self_send = et_alloc(r, 4096), *self_recv = et_alloc(r, 4096);
    unsigned char *coll = et_alloc(r, 64);
    ET_CHECK(r, self_send && self_recv && coll);
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
        /* Message m has count counts[ci] - m (at least 0) elements of 4 bytes. */
        hal_engine_op_t ops[2 * MSGS + 3];
        size_t k = 0;
        for (int m = 0; m < MSGS; m++) {
            size_t count = counts[ci] > (size_t)m ? counts[ci] - (size_t)m : 0;
            for (size_t j = 0; j < count * 4; j++)
                send[m][j] = pattern(me, m, j);
            memset(recv[m], 0xee, count * 4);
            /* Receives first on odd ranks: order inside a group must not matter. */
            hal_engine_op_t s = { .kind = HAL_ENGINE_SEND,
                                  .sendbuf = send[m],
                                  .count = count,
                                  .dtype = HAL_DTYPE_F32,
                                  .root = next };
            hal_engine_op_t v = { .kind = HAL_ENGINE_RECV,
                                  .recvbuf = recv[m],
                                  .count = count,
                                  .dtype = HAL_DTYPE_F32,
                                  .root = prev };
            et_attach_ipc(r, &s);
            et_attach_ipc(r, &v);
            ops[k++] = me & 1 ? v : s;
            ops[k++] = me & 1 ? s : v;
        }
        for (size_t j = 0; j < 4096; j++)
            self_send[j] = pattern(me, 9, j);
        ops[k++] = (hal_engine_op_t){ .kind = HAL_ENGINE_RECV,
                                      .recvbuf = self_recv,
                                      .count = 1024,
                                      .dtype = HAL_DTYPE_U32,
                                      .root = me };
        ops[k++] = (hal_engine_op_t){ .kind = HAL_ENGINE_SEND,
                                      .sendbuf = self_send,
                                      .count = 1024,
                                      .dtype = HAL_DTYPE_U32,
                                      .root = me };
        /* A collective in the group runs before the messages, on every rank alike. */
        memset(coll, 1, 8);
        ops[k++] = (hal_engine_op_t){ .kind = HAL_ENGINE_ALLREDUCE,
                                      .sendbuf = coll,
                                      .recvbuf = coll + 8,
                                      .count = 8,
                                      .dtype = HAL_DTYPE_U8,
                                      .op = HAL_REDOP_SUM };
        hal_status_t st = hal_engine_run(r->comm, ops, k);
        if (st != HAL_OK)
            return ET_FAIL(r, "group with count %zu: %s: %s", counts[ci], hal_status_string(st),
                           hal_last_error_message());
        for (int m = 0; m < MSGS; m++) {
            size_t count = counts[ci] > (size_t)m ? counts[ci] - (size_t)m : 0;
            for (size_t j = 0; j < count * 4; j++)
                if (recv[m][j] != pattern(prev, m, j))
                    return ET_FAIL(r, "message %d (count %zu) from rank %d: byte %zu is %u", m,
                                   count, prev, j, recv[m][j]);
        }
        ET_CHECK(r, memcmp(self_send, self_recv, 4096) == 0);
        for (int j = 0; j < 8; j++)
            ET_CHECK(r, coll[8 + j] == n);
    }
    return 0;
}

static int run_ring(et_mode_t mode, int n, bool ipc, bool no_shm)
{
    et_opts_t o = { .mode = mode, .nranks = n, .ipc = ipc, .no_shm = no_shm };
    return et_run(&o, body_ring, NULL, NULL) == 0 ? CTEST_PASS : CTEST_FAIL;
}

CTEST(engine_p2p, threads_1_to_3)
{
    for (int n = 1; n <= 3; n++)
        CTEST_CHECK(run_ring(ET_THREADS, n, false, false) == CTEST_PASS);
    return CTEST_PASS;
}

CTEST(engine_p2p, processes_staged_2_3)
{
    CTEST_CHECK(run_ring(ET_PROCESSES, 2, false, false) == CTEST_PASS);
    CTEST_CHECK(run_ring(ET_PROCESSES, 3, false, false) == CTEST_PASS);
    return CTEST_PASS;
}

CTEST(engine_p2p, processes_ipc_2)
{
    CTEST_CHECK(run_ring(ET_PROCESSES, 2, true, false) == CTEST_PASS);
    return CTEST_PASS;
}

CTEST(engine_p2p, mixed_4)
{
    CTEST_CHECK(run_ring(ET_MIXED, 4, false, false) == CTEST_PASS);
    CTEST_CHECK(run_ring(ET_MIXED, 4, true, false) == CTEST_PASS);
    return CTEST_PASS;
}

CTEST(engine_p2p, tcp_2_3)
{
    CTEST_CHECK(run_ring(ET_THREADS, 2, false, true) == CTEST_PASS);
    CTEST_CHECK(run_ring(ET_PROCESSES, 3, false, true) == CTEST_PASS);
    return CTEST_PASS;
}

/* ---- mismatches ---- */

static int body_size_mismatch(et_rank_t *r)
{
    unsigned char *buf = et_alloc(r, 4096);
    ET_CHECK(r, buf);
    hal_engine_op_t op;
    if (r->rank == 0)
        op = (hal_engine_op_t){
            .kind = HAL_ENGINE_SEND, .sendbuf = buf, .count = 10, .dtype = HAL_DTYPE_F32, .root = 1
        };
    else
        op = (hal_engine_op_t){
            .kind = HAL_ENGINE_RECV, .recvbuf = buf, .count = 11, .dtype = HAL_DTYPE_F32, .root = 0
        };
    et_attach_ipc(r, &op);
    hal_status_t st = hal_engine_run(r->comm, &op, 1);
    if (st != HAL_ERROR_INVALID_ARGUMENT)
        return ET_FAIL(r, "expected HAL_ERROR_INVALID_ARGUMENT, got %s: %s", hal_status_string(st),
                       hal_last_error_message());
    const char *msg = hal_last_error_message();
    if (!strstr(msg, r->rank == 0 ? "rank 1" : "rank 0") || !strstr(msg, "count 10") ||
        !strstr(msg, "count 11"))
        return ET_FAIL(r, "message does not name the peer and both counts: %s", msg);
    /* Sticky. */
    hal_engine_op_t barrier = { .kind = HAL_ENGINE_BARRIER };
    ET_CHECK(r, hal_engine_run(r->comm, &barrier, 1) == HAL_ERROR_INVALID_ARGUMENT);
    return 0;
}

static int body_self_unmatched(et_rank_t *r)
{
    unsigned char buf[16];
    hal_engine_op_t op = {
        .kind = HAL_ENGINE_SEND, .sendbuf = buf, .count = 4, .dtype = HAL_DTYPE_U32, .root = r->rank
    };
    ET_CHECK(r, hal_engine_run(r->comm, &op, 1) == HAL_ERROR_INVALID_ARGUMENT);
    return 0;
}

CTEST(engine_p2p, size_mismatch_fails_both_ends)
{
    et_opts_t o = { .mode = ET_THREADS, .nranks = 2 };
    CTEST_CHECK(et_run(&o, body_size_mismatch, NULL, NULL) == 0);
    o.mode = ET_PROCESSES;
    CTEST_CHECK(et_run(&o, body_size_mismatch, NULL, NULL) == 0);
    o.ipc = true;
    CTEST_CHECK(et_run(&o, body_size_mismatch, NULL, NULL) == 0);
    o.ipc = false;
    o.no_shm = true;
    CTEST_CHECK(et_run(&o, body_size_mismatch, NULL, NULL) == 0);
    return CTEST_PASS;
}

CTEST(engine_p2p, send_to_self_needs_a_receive)
{
    et_opts_t o = { .mode = ET_THREADS, .nranks = 1 };
    CTEST_CHECK(et_run(&o, body_self_unmatched, NULL, NULL) == 0);
    return CTEST_PASS;
}
