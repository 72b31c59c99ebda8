/* SPDX-License-Identifier: Apache-2.0 */
/* The host collective engine's failure semantics: ranks that disagree on a collective all get
 * HAL_ERROR_INVALID_ARGUMENT naming who disagreed and on what; a killed peer turns into
 * HAL_ERROR_REMOTE (or HAL_ERROR_TIMEOUT) well within the timeout; a silent peer into
 * HAL_ERROR_TIMEOUT after it; hal_engine_abort from another thread releases a blocked call at
 * once with HAL_ERROR_ABORTED and peers see HAL_ERROR_REMOTE; every failure is sticky; and no
 * shared-memory segment survives (et_run checks /dev/shm after every job). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hal/tests/comm/engine_test_util.h"
#include "tools/ctest/ctest.h"

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static hal_status_t allreduce(et_rank_t *r, void *buf, size_t count)
{
    hal_engine_op_t op = { .kind = HAL_ENGINE_ALLREDUCE,
                           .sendbuf = buf,
                           .recvbuf = buf,
                           .count = count,
                           .dtype = HAL_DTYPE_F32,
                           .op = HAL_REDOP_SUM };
    et_attach_ipc(r, &op);
    return hal_engine_run(r->comm, &op, 1);
}

/* ---- ranks that disagree ---- */

typedef struct mismatch_case {
    const char *field;         /* what rank 2 changes */
    const char *mine, *theirs; /* how rank 0's message shows both values */
} mismatch_case_t;

static int body_mismatch(et_rank_t *r)
{
    const mismatch_case_t *mc = r->arg;
    float *buf = et_alloc(r, 1 << 22);
    ET_CHECK(r, buf);
    hal_engine_op_t op = { .kind = HAL_ENGINE_REDUCE,
                           .sendbuf = buf,
                           .recvbuf = buf,
                           .count = 8,
                           .dtype = HAL_DTYPE_F32,
                           .op = HAL_REDOP_SUM,
                           .root = 0 };
    if (!strcmp(mc->field, "large"))
        op.count = 1 << 20; /* the direct/staged path checks descriptors the same way */
    if (r->rank == 2) {
        if (!strcmp(mc->field, "count") || !strcmp(mc->field, "large"))
            op.count = op.count - 1;
        else if (!strcmp(mc->field, "dtype"))
            op.dtype = HAL_DTYPE_I32;
        else if (!strcmp(mc->field, "op"))
            op.op = HAL_REDOP_MAX;
        else if (!strcmp(mc->field, "root"))
            op.root = 1;
        else if (!strcmp(mc->field, "kind"))
            op.kind = HAL_ENGINE_ALLREDUCE;
    }
    if (op.root != r->rank && op.kind == HAL_ENGINE_REDUCE)
        op.recvbuf = NULL;
    et_attach_ipc(r, &op);
    hal_status_t st = hal_engine_run(r->comm, &op, 1);
    if (st != HAL_ERROR_INVALID_ARGUMENT)
        return ET_FAIL(r, "%s: expected HAL_ERROR_INVALID_ARGUMENT, got %s: %s", mc->field,
                       hal_status_string(st), hal_last_error_message());
    const char *msg = hal_last_error_message();
    if (r->rank == 0 &&
        (!strstr(msg, "rank 2") || !strstr(msg, mc->mine) || !strstr(msg, mc->theirs)))
        return ET_FAIL(r, "%s: the message does not say who disagreed on what: %s", mc->field, msg);
    /* Sticky: the same status again, without talking to anyone. */
    hal_engine_op_t barrier = { .kind = HAL_ENGINE_BARRIER };
    st = hal_engine_run(r->comm, &barrier, 1);
    if (st != HAL_ERROR_INVALID_ARGUMENT)
        return ET_FAIL(r, "not sticky: %s", hal_status_string(st));
    return 0;
}

static const mismatch_case_t mismatch_cases[] = {
    { "count", "count 8", "count 7" },     { "large", "count 1048576", "count 1048575" },
    { "dtype", "dtype f32", "dtype i32" }, { "op", "op sum", "op max" },
    { "root", "root 0", "root 1" },        { "kind", "reduce", "allreduce" },
};

static int run_mismatches(et_mode_t mode, bool ipc, bool no_shm)
{
    for (size_t i = 0; i < sizeof(mismatch_cases) / sizeof(mismatch_cases[0]); i++) {
        et_opts_t o = { .mode = mode, .nranks = 3, .ipc = ipc, .no_shm = no_shm };
        if (et_run(&o, body_mismatch, (void *)&mismatch_cases[i], NULL) != 0) {
            fprintf(stderr, "mismatch case %s failed\n", mismatch_cases[i].field);
            return CTEST_FAIL;
        }
    }
    return CTEST_PASS;
}

CTEST(engine_fault, mismatch_threads)
{
    return run_mismatches(ET_THREADS, false, false);
}

CTEST(engine_fault, mismatch_processes)
{
    CTEST_CHECK(run_mismatches(ET_PROCESSES, false, false) == CTEST_PASS);
    return run_mismatches(ET_PROCESSES, true, false);
}

CTEST(engine_fault, mismatch_tcp)
{
    return run_mismatches(ET_PROCESSES, false, true);
}

/* ---- a killed peer ---- */

typedef struct kill_case {
    size_t count;     /* elements of the allreduce */
    int kill_after;   /* ms after rank 2 entered its own allreduce (-1: it never calls) */
    uint32_t timeout; /* engine timeout */
} kill_case_t;

static void *killer(void *arg)
{
    sleep_ms(*(int *)arg);
    raise(SIGKILL);
    return NULL;
}

static int body_killed(et_rank_t *r)
{
    const kill_case_t *kc = r->arg;
    float *buf = et_alloc(r, kc->count * 4);
    ET_CHECK(r, buf);
    memset(buf, 0, kc->count * 4);
    /* One good collective first: everything is set up. */
    ET_CHECK(r, allreduce(r, buf, 1) == HAL_OK);
    if (r->rank == 2) {
        if (kc->kill_after < 0) {
            sleep_ms(100);
            raise(SIGKILL);
        }
        pthread_t t;
        int after = kc->kill_after;
        pthread_create(&t, NULL, killer, &after);
        allreduce(r, buf, kc->count);
        pthread_join(t, NULL); /* not reached if the kill came first */
        return 0;
    }
    hal_status_t st = allreduce(r, buf, kc->count);
    if (st == HAL_OK && kc->kill_after >= 0)
        return 0; /* rank 2 finished its part before it died: nothing to detect */
    if (st != HAL_ERROR_REMOTE && st != HAL_ERROR_TIMEOUT)
        return ET_FAIL(r, "expected HAL_ERROR_REMOTE or HAL_ERROR_TIMEOUT, got %s: %s",
                       hal_status_string(st), hal_last_error_message());
    /* Sticky. */
    ET_CHECK(r, allreduce(r, buf, 1) == st);
    return 0;
}

static int run_killed(const kill_case_t *kc, bool ipc, bool no_shm)
{
    et_opts_t o = {
        .mode = ET_PROCESSES, .nranks = 3, .ipc = ipc, .no_shm = no_shm, .timeout_ms = kc->timeout
    };
    int results[3];
    int ret = et_run(&o, body_killed, (void *)kc, results);
    /* Rank 2's death counts as a failed rank; what matters is the survivors and /dev/shm. */
    bool ok =
        results[0] == 0 && results[1] == 0 && results[2] == 128 + SIGKILL && !(ret & ET_SHM_LEFT);
    if (!ok)
        fprintf(stderr, "results: %d %d %d, run %d\n", results[0], results[1], results[2], ret);
    return ok ? CTEST_PASS : CTEST_FAIL;
}

CTEST(engine_fault, killed_peer_is_noticed_promptly)
{
    /* An engine timeout longer than this test's own (Bazel's moderate, 300 s): detection must
     * come from liveness checks, or the test times out. No bound on how soon. */
    kill_case_t before = { 1, -1, 600000 };
    CTEST_CHECK(run_killed(&before, false, false) == CTEST_PASS);
    kill_case_t during = { 8u << 20, 2, 600000 };
    CTEST_CHECK(run_killed(&during, false, false) == CTEST_PASS);
    CTEST_CHECK(run_killed(&during, true, false) == CTEST_PASS);
    return CTEST_PASS;
}

CTEST(engine_fault, killed_peer_tcp)
{
    kill_case_t before = { 1, -1, 3000 };
    return run_killed(&before, false, true);
}

/* ---- a silent peer ---- */

static int body_silent(et_rank_t *r)
{
    float buf[4] = { 0 };
    if (r->rank == 1) {
        sleep_ms(1200);
        hal_status_t st = allreduce(r, buf, 4);
        /* Rank 0 gave up and said so: this rank learns it at once. */
        if (st != HAL_ERROR_REMOTE && st != HAL_ERROR_TIMEOUT)
            return ET_FAIL(r, "late rank got %s", hal_status_string(st));
        return 0;
    }
    double t0 = et_now_ms();
    hal_status_t st = allreduce(r, buf, 4);
    double ms = et_now_ms() - t0;
    if (st != HAL_ERROR_TIMEOUT)
        return ET_FAIL(r, "expected HAL_ERROR_TIMEOUT, got %s: %s", hal_status_string(st),
                       hal_last_error_message());
    if (ms < 300) /* never before the timeout; how much later is the machine's business */
        return ET_FAIL(r, "timed out after %.0f ms (timeout 300 ms)", ms);
    if (!strstr(hal_last_error_message(), "rank 1"))
        return ET_FAIL(r, "message does not name the silent rank: %s", hal_last_error_message());
    return 0;
}

CTEST(engine_fault, silent_peer_times_out)
{
    et_opts_t o = { .mode = ET_THREADS, .nranks = 2, .timeout_ms = 300 };
    CTEST_CHECK(et_run(&o, body_silent, NULL, NULL) == 0);
    o.mode = ET_PROCESSES;
    CTEST_CHECK(et_run(&o, body_silent, NULL, NULL) == 0);
    return CTEST_PASS;
}

/* ---- abort ---- */

typedef struct abort_arg {
    hal_engine_comm_t *comm;
    int after_ms;
} abort_arg_t;

static void *aborter(void *p)
{
    abort_arg_t *a = p;
    sleep_ms(a->after_ms);
    hal_engine_abort(a->comm);
    return NULL;
}

static int body_abort(et_rank_t *r)
{
    float *buf = et_alloc(r, 1 << 22);
    ET_CHECK(r, buf);
    memset(buf, 0, 1 << 22);
    ET_CHECK(r, allreduce(r, buf, 1 << 20) == HAL_OK);
    if (r->rank == 1) {
        sleep_ms(600);
        hal_status_t st = allreduce(r, buf, 1 << 20);
        if (st != HAL_ERROR_REMOTE)
            return ET_FAIL(r, "peer of the aborted rank got %s: %s", hal_status_string(st),
                           hal_last_error_message());
        return 0;
    }
    abort_arg_t a = { r->comm, 100 };
    pthread_t t;
    pthread_create(&t, NULL, aborter, &a);
    hal_status_t st = allreduce(r, buf, 1 << 20);
    pthread_join(t, NULL);
    /* Not HAL_OK (the peer joins at 600 ms) and not a timeout: the abort released the call. */
    if (st != HAL_ERROR_ABORTED)
        return ET_FAIL(r, "expected HAL_ERROR_ABORTED, got %s: %s", hal_status_string(st),
                       hal_last_error_message());
    ET_CHECK(r, allreduce(r, buf, 1) == HAL_ERROR_ABORTED);
    hal_engine_abort(r->comm); /* idempotent */
    return 0;
}

CTEST(engine_fault, abort_releases_a_blocked_call)
{
    et_opts_t o = { .mode = ET_THREADS, .nranks = 2 };
    CTEST_CHECK(et_run(&o, body_abort, NULL, NULL) == 0);
    o.mode = ET_PROCESSES;
    CTEST_CHECK(et_run(&o, body_abort, NULL, NULL) == 0);
    o.ipc = true;
    CTEST_CHECK(et_run(&o, body_abort, NULL, NULL) == 0);
    o.ipc = false;
    o.no_shm = true;
    CTEST_CHECK(et_run(&o, body_abort, NULL, NULL) == 0);
    return CTEST_PASS;
}

static int body_abort_idle(et_rank_t *r)
{
    hal_engine_abort(r->comm);
    float x = 0;
    ET_CHECK(r, allreduce(r, &x, 1) == HAL_ERROR_ABORTED);
    return 0;
}

CTEST(engine_fault, abort_before_use_leaves_nothing)
{
    et_opts_t o = { .mode = ET_PROCESSES, .nranks = 3 };
    CTEST_CHECK(et_run(&o, body_abort_idle, NULL, NULL) == 0);
    return CTEST_PASS;
}

/* ---- a peer that left ---- */

static int body_left(et_rank_t *r)
{
    float x = 1;
    if (r->rank == 1) {
        sleep_ms(50);
        hal_engine_destroy(r->comm);
        r->comm = NULL;
        return 0;
    }
    /* HAL_ERROR_REMOTE, not the timeout's (20 s) HAL_ERROR_TIMEOUT: the peer was told. */
    hal_status_t st = allreduce(r, &x, 1);
    if (st != HAL_ERROR_REMOTE)
        return ET_FAIL(r, "expected HAL_ERROR_REMOTE, got %s: %s", hal_status_string(st),
                       hal_last_error_message());
    return 0;
}

CTEST(engine_fault, destroyed_peer_is_remote)
{
    et_opts_t o = { .mode = ET_THREADS, .nranks = 2, .timeout_ms = 20000 };
    CTEST_CHECK(et_run(&o, body_left, NULL, NULL) == 0);
    o.mode = ET_PROCESSES;
    CTEST_CHECK(et_run(&o, body_left, NULL, NULL) == 0);
    return CTEST_PASS;
}

/* ---- init without peers ---- */

static int body_bad_config(et_rank_t *r)
{
    hal_engine_comm_t *comm = NULL;
    ET_CHECK(r, hal_engine_init(NULL, &comm) == HAL_ERROR_INVALID_ARGUMENT);
    hal_engine_config_t cfg = r->config;
    ET_CHECK(r, hal_engine_init(&cfg, NULL) == HAL_ERROR_INVALID_ARGUMENT);
    hal_engine_ipc_t half = { NULL, NULL, NULL };
    cfg.ipc = &half;
    ET_CHECK(r, hal_engine_init(&cfg, &comm) == HAL_ERROR_INVALID_ARGUMENT);
    ET_CHECK(r, comm == NULL);
    hal_engine_destroy(NULL);
    hal_engine_abort(NULL);
    ET_CHECK(r, hal_engine_run(NULL, NULL, 0) == HAL_ERROR_INVALID_ARGUMENT);
    ET_CHECK(r, hal_engine_supports(HAL_DTYPE_F8_E4M3, HAL_REDOP_AVG));
    ET_CHECK(r, !hal_engine_supports(HAL_DTYPE_COUNT, HAL_REDOP_SUM));
    ET_CHECK(r, !hal_engine_supports(HAL_DTYPE_F32, HAL_REDOP_COUNT));
    return 0;
}

CTEST(engine_fault, bad_arguments)
{
    et_opts_t o = { .mode = ET_THREADS, .nranks = 1, .no_engine = true };
    CTEST_CHECK(et_run(&o, body_bad_config, NULL, NULL) == 0);
    return CTEST_PASS;
}
