/* SPDX-License-Identifier: Apache-2.0 */
/* Bootstrap jobs whose ranks are threads of this process: rendezvous through the root and through
 * a store, the collective helpers, point to point, and every failure the bootstrap must turn into
 * a status instead of a hang. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hal/tests/comm/bootstrap_test_util.h"

static uint8_t pattern(int rank, size_t i)
{
    return (uint8_t)(rank * 31 + i * 7 + (i >> 11));
}

/* ---- collectives over 1..4 ranks ---- */

static int collectives_body(test_rank_t *r, hal_bootstrap_t *b)
{
    int n = hal_bootstrap_nranks(b), me = hal_bootstrap_rank(b);
    CTEST_CHECK(n == r->nranks && me == r->rank);
    for (int q = 0; q < n; q++) {
        const hal_bootstrap_peer_t *p = hal_bootstrap_peer(b, q);
        CTEST_CHECK(p != NULL && p->rank == q && p->pid == getpid());
        CTEST_CHECK(p->host_hash == hal_bootstrap_peer(b, 0)->host_hash);
    }

    int mine = me * 10 + 1, all[4] = { 0 };
    CTEST_CHECK(hal_bootstrap_allgather(b, &mine, sizeof(mine), all) == HAL_OK);
    for (int q = 0; q < n; q++)
        CTEST_CHECK(all[q] == q * 10 + 1);

    /* Blocks larger than socket buffers: the ring must send and receive at once. */
    const size_t big = 768 << 10;
    uint8_t *out = malloc(big * (size_t)n), *src = malloc(big);
    CTEST_CHECK(out != NULL && src != NULL);
    for (size_t i = 0; i < big; i++)
        src[i] = pattern(me, i);
    CTEST_CHECK(hal_bootstrap_allgather(b, src, big, out) == HAL_OK);
    for (int q = 0; q < n; q++)
        for (size_t i = 0; i < big; i += 4099)
            CTEST_CHECK(out[(size_t)q * big + i] == pattern(q, i));
    /* In place: this rank's block already sits in out. */
    memset(out, 0, big * (size_t)n);
    memcpy(out + (size_t)me * big, src, big);
    CTEST_CHECK(hal_bootstrap_allgather(b, out + (size_t)me * big, big, out) == HAL_OK);
    for (int q = 0; q < n; q++)
        CTEST_CHECK(out[(size_t)q * big + big - 1] == pattern(q, big - 1));

    for (int root = 0; root < n; root++) {
        uint64_t v = me == root ? 0xabc000u + (unsigned)root : 0;
        CTEST_CHECK(hal_bootstrap_broadcast(b, &v, sizeof(v), root) == HAL_OK);
        CTEST_CHECK(v == 0xabc000u + (unsigned)root);
    }
    memset(src, 0, big);
    if (me == n - 1)
        for (size_t i = 0; i < big; i++)
            src[i] = pattern(99, i);
    CTEST_CHECK(hal_bootstrap_broadcast(b, src, big, n - 1) == HAL_OK);
    for (size_t i = 0; i < big; i += 997)
        CTEST_CHECK(src[i] == pattern(99, i));
    free(out);
    free(src);

    for (int i = 0; i < 3; i++)
        CTEST_CHECK(hal_bootstrap_barrier(b) == HAL_OK);
    CTEST_CHECK(hal_bootstrap_allgather(b, NULL, 0, NULL) == HAL_OK);
    CTEST_CHECK(hal_bootstrap_broadcast(b, &mine, sizeof(mine), n) == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(hal_bootstrap_allgather(b, NULL, 4, all) == HAL_ERROR_INVALID_ARGUMENT);
    return CTEST_PASS;
}

static int run_collectives(int n, const hal_comm_store_t *store, uint32_t flags)
{
    hal_unique_id_t id;
    test_rank_t ranks[4];
    CTEST_CHECK(hal_bootstrap_new_id(flags, TEST_TIMEOUT_MS, &id) == HAL_OK);
    test_run_job(ranks, n, &id, collectives_body, NULL, store);
    for (int r = 0; r < n; r++)
        CTEST_CHECK(ranks[r].status == HAL_OK && ranks[r].result == CTEST_PASS);
    return CTEST_PASS;
}

CTEST(bootstrap, collectives_1_rank)
{
    return run_collectives(1, NULL, 0);
}

CTEST(bootstrap, collectives_2_ranks)
{
    return run_collectives(2, NULL, 0);
}

CTEST(bootstrap, collectives_3_ranks)
{
    return run_collectives(3, NULL, 0);
}

CTEST(bootstrap, collectives_4_ranks)
{
    return run_collectives(4, NULL, 0);
}

/* ---- point to point ---- */

static int p2p_body(test_rank_t *r, hal_bootstrap_t *b)
{
    const size_t big = 4 << 20;
    char small[16];
    if (r->rank == 0) {
        uint8_t *data = malloc(big);
        CTEST_CHECK(data != NULL);
        for (size_t i = 0; i < big; i++)
            data[i] = pattern(5, i);
        CTEST_CHECK(hal_bootstrap_send(b, 1, 1, "a1", 3) == HAL_OK);
        CTEST_CHECK(hal_bootstrap_send(b, 1, 1, "a2", 3) == HAL_OK);
        CTEST_CHECK(hal_bootstrap_send(b, 1, 2, "b1", 3) == HAL_OK);
        CTEST_CHECK(hal_bootstrap_send(b, 1, 3, data, big) == HAL_OK);
        free(data);
        CTEST_CHECK(hal_bootstrap_send(b, 1, 4, "12345678", 8) == HAL_OK);
        CTEST_CHECK(hal_bootstrap_send(b, 1, 4, "ok", 3) == HAL_OK);
        CTEST_CHECK(hal_bootstrap_send(b, 1, 6, "0123456789", 10) == HAL_OK);
        CTEST_CHECK(hal_bootstrap_send(b, 1, 7, "x", 1) == HAL_OK);
        CTEST_CHECK(hal_bootstrap_send(b, 1, 8, NULL, 0) == HAL_OK);
        /* To itself, through the queue. */
        CTEST_CHECK(hal_bootstrap_send(b, 0, 9, "self", 5) == HAL_OK);
        CTEST_CHECK(hal_bootstrap_recv(b, 0, 9, small, 5) == HAL_OK);
        CTEST_CHECK(strcmp(small, "self") == 0);
        CTEST_CHECK(hal_bootstrap_recv(b, 1, 5, small, 6) == HAL_OK);
        CTEST_CHECK(strcmp(small, "reply") == 0);
        /* Argument checks. */
        CTEST_CHECK(hal_bootstrap_send(b, 2, 0, "x", 1) == HAL_ERROR_INVALID_ARGUMENT);
        CTEST_CHECK(hal_bootstrap_send(b, -1, 0, "x", 1) == HAL_ERROR_INVALID_ARGUMENT);
        CTEST_CHECK(hal_bootstrap_recv(b, 1, 0, NULL, 1) == HAL_ERROR_INVALID_ARGUMENT);
        CTEST_CHECK(hal_bootstrap_send(b, 1, 0, small, HAL_BOOTSTRAP_MAX_MESSAGE + 1ull) ==
                    HAL_ERROR_INVALID_ARGUMENT);
        return CTEST_PASS;
    }
    uint8_t *data = malloc(big);
    CTEST_CHECK(data != NULL);
    /* Tag 2 first: the two tag-1 messages before it wait in the queue. */
    CTEST_CHECK(hal_bootstrap_recv(b, 0, 2, small, 3) == HAL_OK && strcmp(small, "b1") == 0);
    CTEST_CHECK(hal_bootstrap_recv(b, 0, 3, data, big) == HAL_OK);
    for (size_t i = 0; i < big; i += 1021)
        CTEST_CHECK(data[i] == pattern(5, i));
    free(data);
    CTEST_CHECK(hal_bootstrap_recv(b, 0, 1, small, 3) == HAL_OK && strcmp(small, "a1") == 0);
    CTEST_CHECK(hal_bootstrap_recv(b, 0, 1, small, 3) == HAL_OK && strcmp(small, "a2") == 0);
    /* A size mismatch consumes the message and leaves the connection usable. */
    CTEST_CHECK(hal_bootstrap_recv(b, 0, 4, small, 4) == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(strstr(hal_last_error_message(), "sent 8 bytes with tag 4") != NULL);
    CTEST_CHECK(hal_bootstrap_recv(b, 0, 4, small, 3) == HAL_OK && strcmp(small, "ok") == 0);
    /* The same for a message that was queued. */
    CTEST_CHECK(hal_bootstrap_recv(b, 0, 7, small, 1) == HAL_OK && small[0] == 'x');
    CTEST_CHECK(hal_bootstrap_recv(b, 0, 6, small, 5) == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(hal_bootstrap_recv(b, 0, 8, NULL, 0) == HAL_OK);
    CTEST_CHECK(hal_bootstrap_send(b, 0, 5, "reply", 6) == HAL_OK);
    return CTEST_PASS;
}

CTEST(bootstrap, send_recv_tags_in_order)
{
    hal_unique_id_t id;
    test_rank_t ranks[2];
    CTEST_CHECK(hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, &id) == HAL_OK);
    test_run_job(ranks, 2, &id, p2p_body, NULL, NULL);
    for (int r = 0; r < 2; r++)
        CTEST_CHECK(ranks[r].status == HAL_OK && ranks[r].result == CTEST_PASS);
    return CTEST_PASS;
}

/* Both ranks send 4 MiB to each other at once, each on one thread: more than the socket buffers
 * hold, so a send that waited for its own completion before receiving would never finish. */
static int sendrecv_body(test_rank_t *r, hal_bootstrap_t *b)
{
    const size_t big = 4 << 20;
    int peer = 1 - r->rank;
    uint8_t *out = malloc(big), *in = malloc(big);
    CTEST_CHECK(out != NULL && in != NULL);
    for (size_t i = 0; i < big; i++)
        out[i] = pattern(r->rank, i);
    CTEST_CHECK(hal_bootstrap_sendrecv(b, peer, 3, out, big, peer, in, big) == HAL_OK);
    for (size_t i = 0; i < big; i += 1021)
        CTEST_CHECK(in[i] == pattern(peer, i));
    /* Different sizes each way, and a zero-byte message. */
    CTEST_CHECK(hal_bootstrap_sendrecv(b, peer, 4, out, r->rank ? 0 : 5, peer, in,
                                       r->rank ? 5 : 0) == HAL_OK);
    /* A receive of the wrong size consumes the message and fails; the send still went. */
    CTEST_CHECK(hal_bootstrap_sendrecv(b, peer, 5, out, 8, peer, in, 4) ==
                HAL_ERROR_INVALID_ARGUMENT);
    /* Argument checks: this rank, out of range, NULL with a size. */
    CTEST_CHECK(hal_bootstrap_sendrecv(b, r->rank, 6, out, 1, peer, in, 1) ==
                HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(strstr(hal_last_error_message(), "is this rank") != NULL);
    CTEST_CHECK(hal_bootstrap_sendrecv(b, peer, 6, out, 1, 2, in, 1) == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(hal_bootstrap_sendrecv(b, peer, 6, NULL, 1, peer, in, 1) ==
                HAL_ERROR_INVALID_ARGUMENT);
    /* The connection is still in step: one more exchange goes through. */
    CTEST_CHECK(hal_bootstrap_sendrecv(b, peer, 7, out, 3, peer, in, 3) == HAL_OK);
    CTEST_CHECK(
        memcmp(in, (uint8_t[]){ pattern(peer, 0), pattern(peer, 1), pattern(peer, 2) }, 3) == 0);
    free(out);
    free(in);
    return CTEST_PASS;
}

CTEST(bootstrap, sendrecv_both_ways_on_one_thread)
{
    hal_unique_id_t id;
    test_rank_t ranks[2];
    CTEST_CHECK(hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, &id) == HAL_OK);
    test_run_job(ranks, 2, &id, sendrecv_body, NULL, NULL);
    for (int r = 0; r < 2; r++)
        CTEST_CHECK(ranks[r].status == HAL_OK && ranks[r].result == CTEST_PASS);
    return CTEST_PASS;
}

/* The higher rank sends first: it must wait for the lower rank to connect, which happens only
 * when the lower rank gets around to receiving. */
static int higher_first_body(test_rank_t *r, hal_bootstrap_t *b)
{
    int v = 0;
    if (r->rank == 1) {
        v = 77;
        CTEST_CHECK(hal_bootstrap_send(b, 0, 1, &v, sizeof(v)) == HAL_OK);
        return CTEST_PASS;
    }
    test_sleep_ms(200);
    CTEST_CHECK(hal_bootstrap_recv(b, 1, 1, &v, sizeof(v)) == HAL_OK && v == 77);
    return CTEST_PASS;
}

CTEST(bootstrap, higher_rank_sends_first)
{
    hal_unique_id_t id;
    test_rank_t ranks[2];
    CTEST_CHECK(hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, &id) == HAL_OK);
    test_run_job(ranks, 2, &id, higher_first_body, NULL, NULL);
    for (int r = 0; r < 2; r++)
        CTEST_CHECK(ranks[r].status == HAL_OK && ranks[r].result == CTEST_PASS);
    return CTEST_PASS;
}

/* ---- several threads per rank ---- */

#define THREAD_MSGS 200

typedef struct p2p_thread {
    hal_bootstrap_t *b;
    int peer;
    int role; /* 0: rank 0's per-peer worker; 1, 2, 3: a peer's tag-1 reader, tag-3 reader, sender
               */
    int ok;
    pthread_t thread;
} p2p_thread_t;

static void *p2p_thread_main(void *arg)
{
    p2p_thread_t *t = arg;
    t->ok = 1;
    for (int i = 0; i < THREAD_MSGS && t->ok; i++) {
        int v = -1;
        switch (t->role) {
        case 0: {
            int a = i, c = 1000 + i;
            t->ok = hal_bootstrap_send(t->b, t->peer, 1, &a, sizeof(a)) == HAL_OK &&
                    hal_bootstrap_send(t->b, t->peer, 3, &c, sizeof(c)) == HAL_OK;
            break;
        }
        case 1:
            t->ok = hal_bootstrap_recv(t->b, t->peer, 1, &v, sizeof(v)) == HAL_OK && v == i;
            break;
        case 2:
            t->ok = hal_bootstrap_recv(t->b, t->peer, 3, &v, sizeof(v)) == HAL_OK && v == 1000 + i;
            break;
        case 3:
            v = 2000 + i;
            t->ok = hal_bootstrap_send(t->b, t->peer, 2, &v, sizeof(v)) == HAL_OK;
            break;
        }
    }
    if (t->role == 0)
        for (int i = 0; i < THREAD_MSGS && t->ok; i++) {
            int v = -1;
            t->ok = hal_bootstrap_recv(t->b, t->peer, 2, &v, sizeof(v)) == HAL_OK && v == 2000 + i;
        }
    if (!t->ok)
        fprintf(stderr, "thread role %d peer %d: %s\n", t->role, t->peer, hal_last_error_message());
    return NULL;
}

static int threads_body(test_rank_t *r, hal_bootstrap_t *b)
{
    p2p_thread_t t[3];
    int nt = 0;
    if (r->rank == 0) {
        for (int p = 1; p <= 2; p++)
            t[nt++] = (p2p_thread_t){ .b = b, .peer = p, .role = 0 };
    } else {
        for (int role = 1; role <= 3; role++)
            t[nt++] = (p2p_thread_t){ .b = b, .peer = 0, .role = role };
    }
    for (int i = 0; i < nt; i++)
        pthread_create(&t[i].thread, NULL, p2p_thread_main, &t[i]);
    int ok = 1;
    for (int i = 0; i < nt; i++) {
        pthread_join(t[i].thread, NULL);
        ok &= t[i].ok;
    }
    CTEST_CHECK(ok);
    CTEST_CHECK(hal_bootstrap_barrier(b) == HAL_OK);
    return CTEST_PASS;
}

CTEST(bootstrap, concurrent_threads_per_rank)
{
    hal_unique_id_t id;
    test_rank_t ranks[3];
    CTEST_CHECK(hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, &id) == HAL_OK);
    test_run_job(ranks, 3, &id, threads_body, NULL, NULL);
    for (int r = 0; r < 3; r++)
        CTEST_CHECK(ranks[r].status == HAL_OK && ranks[r].result == CTEST_PASS);
    return CTEST_PASS;
}

/* ---- rendezvous failures ---- */

CTEST(bootstrap, wrong_secret_denied)
{
    hal_unique_id_t id, tampered;
    test_rank_t ranks[2];
    CTEST_CHECK(hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, &id) == HAL_OK);
    tampered = id;
    tampered.internal[40] ^= 0x5a; /* inside the job secret */
    test_rank_init(&ranks[0], &id, 2, 0, NULL);
    test_rank_init(&ranks[1], &tampered, 2, 1, NULL);
    test_rank_start(&ranks[0]);
    test_rank_start(&ranks[1]);
    test_rank_join(&ranks[0]);
    test_rank_join(&ranks[1]);
    CTEST_CHECK(ranks[1].status == HAL_ERROR_PERMISSION_DENIED);
    CTEST_CHECK(strstr(ranks[1].message, "authentication failed: wrong job secret") != NULL);
    CTEST_CHECK(ranks[0].status == HAL_ERROR_TIMEOUT || ranks[0].status == HAL_ERROR_REMOTE);
    return CTEST_PASS;
}

CTEST(bootstrap, duplicate_rank_rejected)
{
    hal_unique_id_t id;
    test_rank_t ranks[4]; /* ranks 0, 1, 1 again, 2 of a 3-rank job */
    CTEST_CHECK(hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, &id) == HAL_OK);
    test_rank_init(&ranks[0], &id, 3, 0, collectives_body);
    test_rank_init(&ranks[1], &id, 3, 1, collectives_body);
    test_rank_init(&ranks[2], &id, 3, 1, collectives_body);
    test_rank_init(&ranks[3], &id, 3, 2, collectives_body);
    for (int i = 0; i < 3; i++)
        test_rank_start(&ranks[i]);
    /* Rank 2 joins only once one of the two rank 1s has been turned away, so the job cannot
     * complete before the second claim reaches the root. */
    int64_t until = test_now_ms() + TEST_TIMEOUT_MS;
    while (!atomic_load(&ranks[1].finished) && !atomic_load(&ranks[2].finished) &&
           test_now_ms() < until)
        test_sleep_ms(5);
    test_rank_start(&ranks[3]);
    for (int i = 0; i < 4; i++)
        test_rank_join(&ranks[i]);
    test_rank_t *loser = ranks[1].status == HAL_OK ? &ranks[2] : &ranks[1];
    test_rank_t *winner = loser == &ranks[1] ? &ranks[2] : &ranks[1];
    CTEST_CHECK(loser->status == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(strstr(loser->message, "already taken") != NULL);
    CTEST_CHECK(winner->status == HAL_OK && winner->result == CTEST_PASS);
    CTEST_CHECK(ranks[0].status == HAL_OK && ranks[0].result == CTEST_PASS);
    CTEST_CHECK(ranks[3].status == HAL_OK && ranks[3].result == CTEST_PASS);
    return CTEST_PASS;
}

CTEST(bootstrap, nranks_mismatch_rejected)
{
    hal_unique_id_t id;
    test_rank_t ranks[2];
    CTEST_CHECK(hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, &id) == HAL_OK);
    test_rank_init(&ranks[0], &id, 2, 0, NULL);
    test_rank_init(&ranks[1], &id, 3, 1, NULL);
    test_rank_start(&ranks[0]);
    test_rank_start(&ranks[1]);
    test_rank_join(&ranks[0]);
    test_rank_join(&ranks[1]);
    /* Whichever joined second disagrees with the first and is turned away; the other waits for
     * ranks that never come. */
    hal_status_t a = ranks[0].status, b = ranks[1].status;
    CTEST_CHECK((a == HAL_ERROR_INVALID_ARGUMENT && b == HAL_ERROR_TIMEOUT) ||
                (a == HAL_ERROR_TIMEOUT && b == HAL_ERROR_INVALID_ARGUMENT));
    test_rank_t *bad = a == HAL_ERROR_INVALID_ARGUMENT ? &ranks[0] : &ranks[1];
    CTEST_CHECK(strstr(bad->message, "nranks") != NULL);
    return CTEST_PASS;
}

CTEST(bootstrap, missing_rank_times_out)
{
    hal_unique_id_t id;
    test_rank_t ranks[2];
    CTEST_CHECK(hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, &id) == HAL_OK);
    for (int i = 0; i < 2; i++) {
        test_rank_init(&ranks[i], &id, 3, i, NULL);
        test_rank_start(&ranks[i]);
    }
    for (int i = 0; i < 2; i++) {
        test_rank_join(&ranks[i]);
        CTEST_CHECK(ranks[i].status == HAL_ERROR_TIMEOUT);
        CTEST_CHECK(strstr(ranks[i].message, "waiting for 1 of 3 ranks to join") != NULL);
        CTEST_CHECK(ranks[i].elapsed_ms >= TEST_TIMEOUT_MS / 2); /* never before the timeout */
    }
    return CTEST_PASS;
}

CTEST(bootstrap, root_gone_is_remote)
{
    hal_unique_id_t id;
    hal_bootstrap_t *b = NULL;
    /* A root that gave up at once: its port refuses the connection. */
    CTEST_CHECK(hal_bootstrap_new_id(0, 0, &id) == HAL_OK);
    test_sleep_ms(100);
    hal_status_t st = hal_bootstrap_connect(&id, 2, 0, NULL, TEST_TIMEOUT_MS, &b);
    CTEST_CHECK(st == HAL_ERROR_REMOTE || st == HAL_ERROR_TIMEOUT);
    CTEST_CHECK(strstr(hal_last_error_message(), "bootstrap root") != NULL);
    CTEST_CHECK(b == NULL);
    return CTEST_PASS;
}

/* Strangers at the root's port: garbage, a forged handshake, a silent connection. None of them
 * may disturb the job. */
CTEST(bootstrap, strangers_at_the_root)
{
    hal_unique_id_t id;
    CTEST_CHECK(hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, &id) == HAL_OK);
    CTEST_CHECK(id.internal[8] == 4);
    struct sockaddr_in sa = { .sin_family = AF_INET };
    memcpy(&sa.sin_addr, id.internal + 16, 4);
    sa.sin_port = htons((uint16_t)(id.internal[10] << 8 | id.internal[11]));
    int fds[3];
    for (int i = 0; i < 3; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        CTEST_CHECK(fds[i] >= 0 && connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)) == 0);
    }
    uint8_t junk[4096];
    memset(junk, 0xff, sizeof(junk));
    CTEST_CHECK(send(fds[0], junk, sizeof(junk), MSG_NOSIGNAL) > 0);

    /* A forged answer to the challenge: right magic, wrong MAC, must be denied. */
    uint8_t a1[40], a2[112], a3[40];
    struct pollfd p = { fds[1], POLLIN, 0 };
    CTEST_CHECK(poll(&p, 1, TEST_TIMEOUT_MS) == 1);
    CTEST_CHECK(recv(fds[1], a1, sizeof(a1), MSG_WAITALL) == (ssize_t)sizeof(a1));
    CTEST_CHECK(memcmp(a1, "HALW", 4) == 0);
    memset(a2, 0x11, sizeof(a2));
    memcpy(a2, a1, 8);        /* magic, version, kind */
    memset(a2 + 44, 0xff, 4); /* "the root" */
    CTEST_CHECK(send(fds[1], a2, sizeof(a2), MSG_NOSIGNAL) == (ssize_t)sizeof(a2));
    p.revents = 0;
    CTEST_CHECK(poll(&p, 1, TEST_TIMEOUT_MS) == 1);
    CTEST_CHECK(recv(fds[1], a3, sizeof(a3), MSG_WAITALL) == (ssize_t)sizeof(a3));
    CTEST_CHECK(a3[3] == 1); /* DENIED */
    p.revents = 0;
    CTEST_CHECK(poll(&p, 1, TEST_TIMEOUT_MS) == 1);
    CTEST_CHECK(recv(fds[1], a3, 1, 0) == 0); /* then closed */

    test_rank_t ranks[2];
    test_run_job(ranks, 2, &id, collectives_body, NULL, NULL);
    for (int r = 0; r < 2; r++)
        CTEST_CHECK(ranks[r].status == HAL_OK && ranks[r].result == CTEST_PASS);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
    return CTEST_PASS;
}

/* ---- failures after the rendezvous ---- */

typedef struct abort_ctx {
    _Atomic(hal_bootstrap_t *) b0;
    atomic_bool aborted;
    _Atomic int64_t abort_at;
    _Atomic int64_t returned_after_ms;
} abort_ctx_t;

static int abort_body(test_rank_t *r, hal_bootstrap_t *b)
{
    abort_ctx_t *ctx = r->ctx;
    if (r->rank == 0) {
        atomic_store(&ctx->b0, b);
        hal_status_t st = hal_bootstrap_barrier(b); /* rank 1 is not there yet */
        atomic_store(&ctx->returned_after_ms, test_now_ms() - atomic_load(&ctx->abort_at));
        /* hal_bootstrap_abort may still be running on the main thread; destroy (when this body
         * returns) must not overlap it. */
        int64_t until = test_now_ms() + 3 * TEST_TIMEOUT_MS;
        while (!atomic_load(&ctx->aborted) && test_now_ms() < until)
            test_sleep_ms(1);
        CTEST_CHECK(st == HAL_ERROR_ABORTED);
        CTEST_CHECK(atomic_load(&ctx->aborted));
        int v = 1;
        CTEST_CHECK(hal_bootstrap_send(b, 1, 1, &v, sizeof(v)) == HAL_ERROR_ABORTED);
        CTEST_CHECK(hal_bootstrap_recv(b, 0, 1, &v, sizeof(v)) == HAL_ERROR_ABORTED);
        CTEST_CHECK(hal_bootstrap_barrier(b) == HAL_ERROR_ABORTED);
        return CTEST_PASS;
    }
    int64_t until = test_now_ms() + 3 * TEST_TIMEOUT_MS;
    while (!atomic_load(&ctx->aborted) && test_now_ms() < until)
        test_sleep_ms(5);
    /* Rank 0 entered the first barrier before it was aborted, so that one may still complete;
     * the next cannot. */
    hal_status_t st = hal_bootstrap_barrier(b);
    if (st == HAL_OK)
        st = hal_bootstrap_barrier(b);
    CTEST_CHECK(st == HAL_ERROR_REMOTE || st == HAL_ERROR_TIMEOUT);
    return CTEST_PASS;
}

CTEST(bootstrap, abort_unblocks_barrier)
{
    hal_unique_id_t id;
    test_rank_t ranks[2];
    abort_ctx_t ctx;
    atomic_init(&ctx.b0, NULL);
    atomic_init(&ctx.aborted, false);
    atomic_init(&ctx.abort_at, 0);
    atomic_init(&ctx.returned_after_ms, -1);
    CTEST_CHECK(hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, &id) == HAL_OK);
    for (int i = 0; i < 2; i++) {
        test_rank_init(&ranks[i], &id, 2, i, abort_body);
        ranks[i].ctx = &ctx;
        /* Long enough that only the abort can end rank 0's barrier in time. */
        ranks[i].timeout_ms = 3 * TEST_TIMEOUT_MS;
        test_rank_start(&ranks[i]);
    }
    int64_t until = test_now_ms() + TEST_TIMEOUT_MS;
    while (atomic_load(&ctx.b0) == NULL && test_now_ms() < until)
        test_sleep_ms(5);
    hal_bootstrap_t *b0 = atomic_load(&ctx.b0);
    if (b0 != NULL) {
        test_sleep_ms(200); /* let rank 0 block in the barrier */
        atomic_store(&ctx.abort_at, test_now_ms());
        hal_bootstrap_abort(b0);
        atomic_store(&ctx.aborted, true);
    }
    test_rank_join(&ranks[0]);
    test_rank_join(&ranks[1]);
    CTEST_CHECK(b0 != NULL);
    CTEST_CHECK(ranks[0].status == HAL_OK && ranks[0].result == CTEST_PASS);
    CTEST_CHECK(ranks[1].status == HAL_OK && ranks[1].result == CTEST_PASS);
    int64_t took = atomic_load(&ctx.returned_after_ms);
    fprintf(stderr, "barrier returned %lld ms after the abort\n", (long long)took);
    /* It returned after the abort, with HAL_ERROR_ABORTED (checked by rank 0): the abort ended
     * it, not its timeout. How soon is not checked (a loaded machine decides that). */
    CTEST_CHECK(took >= 0);
    return CTEST_PASS;
}

typedef struct join_ctx {
    hal_bootstrap_t *b;
    hal_status_t status;
    char message[512];
    _Atomic int64_t returned_at;
} join_ctx_t;

static void *join_main(void *arg)
{
    join_ctx_t *ctx = arg;
    ctx->status = hal_bootstrap_join(ctx->b);
    snprintf(ctx->message, sizeof(ctx->message), "%s", hal_last_error_message());
    atomic_store(&ctx->returned_at, test_now_ms());
    return NULL;
}

/* hal_bootstrap_create + hal_bootstrap_join let another thread abort a rendezvous in progress
 * (the first of two ranks waits for the second, which never comes). */
static int abort_rendezvous(uint32_t flags, const hal_comm_store_t *store)
{
    hal_unique_id_t id;
    join_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    atomic_init(&ctx.returned_at, 0);
    CTEST_CHECK(hal_bootstrap_new_id(flags, 3 * TEST_TIMEOUT_MS, &id) == HAL_OK);
    CTEST_CHECK(hal_bootstrap_create(&id, 2, 0, store, 3 * TEST_TIMEOUT_MS, &ctx.b) == HAL_OK);
    CTEST_CHECK(hal_bootstrap_nranks(ctx.b) == 2 && hal_bootstrap_rank(ctx.b) == 0);
    pthread_t thread;
    pthread_create(&thread, NULL, join_main, &ctx);
    test_sleep_ms(200);
    int64_t aborted_at = test_now_ms();
    hal_bootstrap_abort(ctx.b);
    pthread_join(thread, NULL);
    int64_t took = atomic_load(&ctx.returned_at) - aborted_at;
    fprintf(stderr, "join returned %lld ms after the abort: %s\n", (long long)took, ctx.message);
    CTEST_CHECK(ctx.status == HAL_ERROR_ABORTED); /* the abort ended it, not the timeout */
    CTEST_CHECK(took >= 0);
    CTEST_CHECK(hal_bootstrap_join(ctx.b) == HAL_ERROR_INVALID_ARGUMENT); /* only once */
    hal_bootstrap_destroy(ctx.b);

    /* Aborted before it started. */
    hal_bootstrap_t *b = NULL;
    CTEST_CHECK(hal_bootstrap_new_id(flags, TEST_TIMEOUT_MS, &id) == HAL_OK);
    CTEST_CHECK(hal_bootstrap_create(&id, 2, 1, store, TEST_TIMEOUT_MS, &b) == HAL_OK);
    hal_bootstrap_abort(b);
    CTEST_CHECK(hal_bootstrap_join(b) == HAL_ERROR_ABORTED);
    hal_bootstrap_destroy(b);
    return CTEST_PASS;
}

CTEST(bootstrap, abort_unblocks_rendezvous)
{
    return abort_rendezvous(0, NULL);
}

CTEST(bootstrap_store, abort_unblocks_rendezvous)
{
    test_store_t store;
    test_store_init(&store);
    int rc = abort_rendezvous(HAL_COMM_ID_FLAG_STORE, &store.api);
    test_store_destroy(&store);
    return rc;
}

static int oversized_body(test_rank_t *r, hal_bootstrap_t *b)
{
    uint8_t buf[16];
    if (r->rank == 0) {
        CTEST_CHECK(hal_bootstrap_test_send_header(b, 1, 7, HAL_BOOTSTRAP_MAX_MESSAGE + 1ull) ==
                    HAL_OK);
        /* Rank 1 drops the connection: this rank sees it go. */
        hal_status_t st = hal_bootstrap_recv(b, 1, 8, buf, 1);
        CTEST_CHECK(st == HAL_ERROR_REMOTE);
        return CTEST_PASS;
    }
    CTEST_CHECK(hal_bootstrap_recv(b, 0, 7, buf, sizeof(buf)) == HAL_ERROR_REMOTE);
    CTEST_CHECK(strstr(hal_last_error_message(), "over the limit") != NULL);
    /* The connection stays failed. */
    CTEST_CHECK(hal_bootstrap_recv(b, 0, 7, buf, sizeof(buf)) == HAL_ERROR_REMOTE);
    CTEST_CHECK(hal_bootstrap_send(b, 0, 8, buf, 1) == HAL_ERROR_REMOTE);
    return CTEST_PASS;
}

CTEST(bootstrap, oversized_header_rejected)
{
    hal_unique_id_t id;
    test_rank_t ranks[2];
    CTEST_CHECK(hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, &id) == HAL_OK);
    test_run_job(ranks, 2, &id, oversized_body, NULL, NULL);
    for (int r = 0; r < 2; r++)
        CTEST_CHECK(ranks[r].status == HAL_OK && ranks[r].result == CTEST_PASS);
    return CTEST_PASS;
}

static int silent_peer_body(test_rank_t *r, hal_bootstrap_t *b)
{
    int v = 0;
    if (r->rank == 1) {
        int64_t t0 = test_now_ms();
        CTEST_CHECK(hal_bootstrap_recv(b, 0, 1, &v, sizeof(v)) == HAL_ERROR_TIMEOUT);
        CTEST_CHECK(strstr(hal_last_error_message(), "rank 0") != NULL);
        int64_t took = test_now_ms() - t0;
        CTEST_CHECK(took >= TEST_TIMEOUT_MS / 2); /* never before the timeout */
    }
    return CTEST_PASS;
}

CTEST(bootstrap, silent_peer_times_out)
{
    hal_unique_id_t id;
    test_rank_t ranks[2];
    CTEST_CHECK(hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, &id) == HAL_OK);
    test_run_job(ranks, 2, &id, silent_peer_body, NULL, NULL);
    for (int r = 0; r < 2; r++)
        CTEST_CHECK(ranks[r].status == HAL_OK && ranks[r].result == CTEST_PASS);
    return CTEST_PASS;
}

/* ---- through a store ---- */

CTEST(bootstrap_store, collectives_3_ranks)
{
    test_store_t store;
    test_store_init(&store);
    int rc = run_collectives(3, &store.api, HAL_COMM_ID_FLAG_STORE);
    /* Every rank published under hal/<nonce>/rank/<r>. */
    int keys = 0;
    for (test_kv_t *kv = store.head; kv != NULL; kv = kv->next)
        keys += strncmp(kv->key, "hal/", 4) == 0 && strstr(kv->key, "/rank/") != NULL &&
                strlen(kv->key) == 4 + 32 + 6 + 1;
    test_store_destroy(&store);
    CTEST_CHECK(rc == CTEST_PASS);
    CTEST_CHECK(keys == 3);
    return CTEST_PASS;
}

CTEST(bootstrap_store, single_rank)
{
    test_store_t store;
    test_store_init(&store);
    int rc = run_collectives(1, &store.api, HAL_COMM_ID_FLAG_STORE);
    test_store_destroy(&store);
    CTEST_CHECK(rc == CTEST_PASS);
    return CTEST_PASS;
}

CTEST(bootstrap_store, missing_rank_times_out)
{
    hal_unique_id_t id;
    test_rank_t ranks[2];
    test_store_t store;
    test_store_init(&store);
    CTEST_CHECK(hal_bootstrap_new_id(HAL_COMM_ID_FLAG_STORE, 0, &id) == HAL_OK);
    for (int i = 0; i < 2; i++) {
        test_rank_init(&ranks[i], &id, 3, i, NULL);
        ranks[i].store = &store.api;
        test_rank_start(&ranks[i]);
    }
    for (int i = 0; i < 2; i++)
        test_rank_join(&ranks[i]);
    test_store_destroy(&store);
    for (int i = 0; i < 2; i++) {
        CTEST_CHECK(ranks[i].status == HAL_ERROR_TIMEOUT);
        CTEST_CHECK(strstr(ranks[i].message, "waiting for 1 of 3 ranks") != NULL);
    }
    return CTEST_PASS;
}

CTEST(bootstrap_store, wrong_secret_denied)
{
    hal_unique_id_t id, tampered;
    test_rank_t ranks[2];
    test_store_t store;
    test_store_init(&store);
    CTEST_CHECK(hal_bootstrap_new_id(HAL_COMM_ID_FLAG_STORE, 0, &id) == HAL_OK);
    tampered = id;
    tampered.internal[50] ^= 0x01;
    test_rank_init(&ranks[0], &id, 2, 0, NULL);
    test_rank_init(&ranks[1], &tampered, 2, 1, NULL);
    for (int i = 0; i < 2; i++) {
        ranks[i].store = &store.api;
        test_rank_start(&ranks[i]);
    }
    for (int i = 0; i < 2; i++)
        test_rank_join(&ranks[i]);
    test_store_destroy(&store);
    /* Each sees an entry the other made with a different secret. */
    for (int i = 0; i < 2; i++) {
        CTEST_CHECK(ranks[i].status == HAL_ERROR_PERMISSION_DENIED);
        CTEST_CHECK(strstr(ranks[i].message, "wrong job secret") != NULL);
    }
    return CTEST_PASS;
}

CTEST(bootstrap_store, duplicate_rank_never_both_succeed)
{
    hal_unique_id_t id;
    test_rank_t ranks[3]; /* ranks 0, 1 and 1 again of a 2-rank job */
    test_store_t store;
    test_store_init(&store);
    CTEST_CHECK(hal_bootstrap_new_id(HAL_COMM_ID_FLAG_STORE, 0, &id) == HAL_OK);
    test_rank_init(&ranks[0], &id, 2, 0, NULL);
    test_rank_init(&ranks[1], &id, 2, 1, NULL);
    test_rank_init(&ranks[2], &id, 2, 1, NULL);
    for (int i = 0; i < 3; i++) {
        ranks[i].store = &store.api;
        test_rank_start(&ranks[i]);
    }
    for (int i = 0; i < 3; i++)
        test_rank_join(&ranks[i]);
    test_store_destroy(&store);
    /* A store has no atomic claim, so who wins is a race; but two processes can never both
     * become rank 1 (and every rank returned: none waits past its timeout). */
    CTEST_CHECK(!(ranks[1].status == HAL_OK && ranks[2].status == HAL_OK));
    return CTEST_PASS;
}
