/* SPDX-License-Identifier: Apache-2.0 */
/* Bootstrap jobs whose ranks are forked processes, including one killed mid-job.
 *
 * The parent never creates a thread (the root runs in rank 0's process and hands the id to the
 * other ranks through pipes): a child of a multi-threaded parent may not start threads under
 * ThreadSanitizer, and every rank starts its accept thread. Children leave with _exit so they
 * run none of the parent's exit handlers. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hal/tests/comm/bootstrap_test_util.h"
#include "tools/ctest/ctest_fdio.h"

#define MAX_CHILDREN 4

typedef struct job {
    int n;
    pid_t pid[MAX_CHILDREN];
    int id_pipe[MAX_CHILDREN][2]; /* rank 0 -> rank i: the unique id */
    int ready_pipe[2];            /* any rank -> parent */
    int go_pipe[MAX_CHILDREN][2]; /* parent -> rank i */
} job_t;

/* In a child: fails the child with the line number as exit status. */
#define CHILD_CHECK(cond)                                                                         \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "rank %d (pid %d): %s:%d: check failed: %s (last error: %s)\n", rank, \
                    (int)getpid(), __FILE__, __LINE__, #cond, hal_last_error_message());          \
            _exit(__LINE__ % 250 + 1);                                                            \
        }                                                                                         \
    } while (0)

/* Rank 0 makes the id and hands it out; the others wait for it. */
static hal_unique_id_t child_get_id(job_t *job, int rank)
{
    hal_unique_id_t id;
    if (rank == 0) {
        CHILD_CHECK(hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, &id) == HAL_OK);
        for (int i = 1; i < job->n; i++)
            CHILD_CHECK(ctest_write_full(job->id_pipe[i][1], &id, sizeof(id)) == 0);
    } else {
        CHILD_CHECK(ctest_read_full(job->id_pipe[rank][0], &id, sizeof(id), 5000) == 0);
    }
    return id;
}

static int job_start(job_t *job, int n, void (*child)(job_t *job, int rank))
{
    memset(job, 0, sizeof(*job));
    job->n = n;
    if (pipe(job->ready_pipe) != 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (pipe(job->id_pipe[i]) != 0 || pipe(job->go_pipe[i]) != 0)
            return -1;
    fflush(stderr);
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0)
            return -1;
        if (pid == 0) {
            alarm(30); /* a hung child dies instead of hanging the test */
            child(job, i);
            _exit(0);
        }
        job->pid[i] = pid;
    }
    return 0;
}

/* Waits for child i; returns its exit status, or -1 (killed by a signal or still running after
 * timeout_ms, in which case it is killed). */
static int job_wait(job_t *job, int i, int timeout_ms)
{
    int64_t deadline = test_now_ms() + timeout_ms;
    for (;;) {
        int status;
        pid_t r = waitpid(job->pid[i], &status, WNOHANG);
        if (r == job->pid[i]) {
            job->pid[i] = 0;
            if (WIFEXITED(status))
                return WEXITSTATUS(status);
            fprintf(stderr, "rank %d died of signal %d\n", i, WTERMSIG(status));
            return -1;
        }
        if (r < 0 && errno != EINTR)
            return -1;
        if (test_now_ms() >= deadline) {
            fprintf(stderr, "rank %d still running after %d ms: killing it\n", i, timeout_ms);
            kill(job->pid[i], SIGKILL);
            waitpid(job->pid[i], &status, 0);
            job->pid[i] = 0;
            return -1;
        }
        test_sleep_ms(10);
    }
}

static void job_close(job_t *job)
{
    for (int i = 0; i < job->n; i++) {
        if (job->pid[i] > 0) {
            kill(job->pid[i], SIGKILL);
            waitpid(job->pid[i], NULL, 0);
        }
        close(job->id_pipe[i][0]);
        close(job->id_pipe[i][1]);
        close(job->go_pipe[i][0]);
        close(job->go_pipe[i][1]);
    }
    close(job->ready_pipe[0]);
    close(job->ready_pipe[1]);
}

/* ---- a healthy job ---- */

static void collectives_child(job_t *job, int rank)
{
    int n = job->n;
    hal_unique_id_t id = child_get_id(job, rank);
    hal_bootstrap_t *b = NULL;
    CHILD_CHECK(hal_bootstrap_connect(&id, n, rank, NULL, TEST_TIMEOUT_MS, &b) == HAL_OK);

    int32_t pids[MAX_CHILDREN] = { 0 }, mine = (int32_t)getpid();
    CHILD_CHECK(hal_bootstrap_allgather(b, &mine, sizeof(mine), pids) == HAL_OK);
    for (int q = 0; q < n; q++) {
        const hal_bootstrap_peer_t *p = hal_bootstrap_peer(b, q);
        CHILD_CHECK(p->rank == q && p->pid == pids[q]);
        CHILD_CHECK(p->host_hash == hal_bootstrap_peer(b, 0)->host_hash);
        for (int o = 0; o < q; o++)
            CHILD_CHECK(pids[o] != pids[q]);
    }
    uint64_t v = rank == 1 ? 0x5eed : 0;
    CHILD_CHECK(hal_bootstrap_broadcast(b, &v, sizeof(v), 1) == HAL_OK && v == 0x5eed);
    CHILD_CHECK(hal_bootstrap_barrier(b) == HAL_OK);

    /* A ring of 1 MiB messages; even ranks send first so the blocking sends cannot cycle. */
    const size_t size = 1 << 20;
    uint8_t *out = malloc(size), *in = malloc(size);
    CHILD_CHECK(out != NULL && in != NULL);
    for (size_t i = 0; i < size; i++)
        out[i] = (uint8_t)(rank + i);
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    if (rank % 2 == 0) {
        CHILD_CHECK(hal_bootstrap_send(b, next, 3, out, size) == HAL_OK);
        CHILD_CHECK(hal_bootstrap_recv(b, prev, 3, in, size) == HAL_OK);
    } else {
        CHILD_CHECK(hal_bootstrap_recv(b, prev, 3, in, size) == HAL_OK);
        CHILD_CHECK(hal_bootstrap_send(b, next, 3, out, size) == HAL_OK);
    }
    for (size_t i = 0; i < size; i += 4093)
        CHILD_CHECK(in[i] == (uint8_t)(prev + i));
    free(out);
    free(in);
    CHILD_CHECK(hal_bootstrap_barrier(b) == HAL_OK);
    hal_bootstrap_destroy(b);
}

CTEST(bootstrap_fork, four_processes)
{
    job_t job;
    CTEST_CHECK(job_start(&job, 4, collectives_child) == 0);
    int ok = 1;
    for (int i = 0; i < 4; i++) {
        int code = job_wait(&job, i, 4 * TEST_TIMEOUT_MS);
        if (code != 0)
            fprintf(stderr, "rank %d exited with %d\n", i, code);
        ok &= code == 0;
    }
    job_close(&job);
    CTEST_CHECK(ok);
    return CTEST_PASS;
}

/* ---- a peer killed mid-job ---- */

static void killed_peer_child(job_t *job, int rank)
{
    hal_unique_id_t id = child_get_id(job, rank);
    hal_bootstrap_t *b = NULL;
    CHILD_CHECK(hal_bootstrap_connect(&id, job->n, rank, NULL, TEST_TIMEOUT_MS, &b) == HAL_OK);
    /* Two barriers connect every pair this test uses. */
    CHILD_CHECK(hal_bootstrap_barrier(b) == HAL_OK);
    CHILD_CHECK(hal_bootstrap_barrier(b) == HAL_OK);
    char byte = (char)rank;
    CHILD_CHECK(ctest_write_full(job->ready_pipe[1], &byte, 1) == 0);
    if (rank == job->n - 1) {
        for (;;)
            pause(); /* the parent kills this one */
    }
    CHILD_CHECK(ctest_read_full(job->go_pipe[rank][0], &byte, 1, 10000) == 0);
    int64_t t0 = test_now_ms();
    hal_status_t st = hal_bootstrap_barrier(b);
    if (st == HAL_OK)
        st = hal_bootstrap_barrier(b);
    int64_t took = test_now_ms() - t0;
    fprintf(stderr, "rank %d: %s after %lld ms: %s\n", rank, hal_status_string(st), (long long)took,
            hal_last_error_message());
    CHILD_CHECK(st == HAL_ERROR_REMOTE || st == HAL_ERROR_TIMEOUT);
    hal_bootstrap_destroy(b);
}

CTEST(bootstrap_fork, killed_peer_turns_into_remote_or_timeout)
{
    job_t job;
    const int n = 3;
    CTEST_CHECK(job_start(&job, n, killed_peer_child) == 0);
    int ready = 0;
    char byte;
    while (ready < n && ctest_read_full(job.ready_pipe[0], &byte, 1, 4 * TEST_TIMEOUT_MS) == 0)
        ready++;
    int ok = ready == n;
    if (ok) {
        kill(job.pid[n - 1], SIGKILL);
        job_wait(&job, n - 1, TEST_TIMEOUT_MS);
        for (int i = 0; i < n - 1; i++)
            ok &= ctest_write_full(job.go_pipe[i][1], "g", 1) == 0;
    }
    for (int i = 0; i < n - 1; i++) {
        int code = job_wait(&job, i, 3 * TEST_TIMEOUT_MS);
        if (code != 0)
            fprintf(stderr, "rank %d exited with %d\n", i, code);
        ok &= code == 0;
    }
    job_close(&job);
    CTEST_CHECK(ok);
    return CTEST_PASS;
}
