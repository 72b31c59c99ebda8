/* SPDX-License-Identifier: Apache-2.0 */
/* Collectives across forked processes under HAL_LAYERS=faults: a rank whose process dies
 * (peer_death, SIGKILL at its Nth collective) leaves its peers with HAL_ERROR_REMOTE or
 * HAL_ERROR_TIMEOUT, promptly; an injected timeout (coll_timeout) gives HAL_ERROR_TIMEOUT on its
 * rank and a failure on the others; and no shared-memory segment of the job survives in
 * /dev/shm once the survivors destroyed their communicators.
 *
 * The parent never opens a backend and never creates a thread: rank 0 makes the unique id (its
 * process runs the bootstrap root) and hands it out through pipes. Children leave with _exit. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include "hal/layers/tests/layer_test_util.h"
#include "tools/ctest/ctest_fdio.h"

#define NRANKS     3
#define STEPS      5
#define TIMEOUT_MS 5000u

typedef struct result {
    int rank;
    int completed;        /* collectives that succeeded */
    hal_status_t failure; /* the first failure (HAL_OK: none) */
    hal_status_t async;   /* hal_comm_get_async_error afterwards */
    uint8_t nonce[16];    /* rank 0: the job nonce, to look for its segments */
} result_t;

typedef struct job {
    pid_t pid[NRANKS];
    int id_pipe[NRANKS][2];
    int result_pipe[NRANKS][2];
    char log_path[NRANKS][PATH_MAX];
} job_t;

#define CHILD_CHECK(cond)                                                                        \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s (%s)\n", rank, __FILE__, __LINE__, \
                    #cond, hal_last_error_message());                                            \
            _exit(100 + __LINE__ % 100);                                                         \
        }                                                                                        \
    } while (0)

static void child(job_t *job, int rank, const char *spec)
{
    alarm(60); /* a hung child dies rather than hanging the test */
    int log = open(job->log_path[rank], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (log >= 0) {
        dup2(log, STDERR_FILENO);
        close(log);
    }
    setenv("HAL_CPU_DEVICES", "3", 1);
    hal_backend_t b;
    hal_device_t d;
    hal_stream_t s;
    hal_comm_t comm;
    hal_unique_id_t id;
    result_t res = { .rank = rank };
    CHILD_CHECK(lt_open("cpu", "faults", spec, &b) == HAL_OK);
    if (rank == 0) {
        CHILD_CHECK(hal_comm_get_unique_id(0, &id) == HAL_OK);
        for (int r = 1; r < NRANKS; r++)
            CHILD_CHECK(ctest_write_full(job->id_pipe[r][1], &id, sizeof(id)) == 0);
        memcpy(res.nonce, id.internal + 64, sizeof(res.nonce)); /* see bootstrap_internal.h */
    } else {
        CHILD_CHECK(ctest_read_full(job->id_pipe[rank][0], &id, sizeof(id), 10000) == 0);
    }
    CHILD_CHECK(hal_device_get(b, (uint32_t)rank, &d) == HAL_OK);
    CHILD_CHECK(hal_stream_create(d, 0, &s) == HAL_OK);
    hal_comm_config_t cfg = HAL_COMM_CONFIG_INIT;
    cfg.timeout_ms = TIMEOUT_MS;
    CHILD_CHECK(hal_comm_init(&id, NRANKS, rank, d, &cfg, &comm) == HAL_OK);
    float *buf;
    CHILD_CHECK(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 1024 * sizeof(float), 0, (void **)&buf) ==
                HAL_OK);
    for (int step = 0; step < STEPS; step++) {
        for (int i = 0; i < 1024; i++)
            buf[i] = (float)(rank + 1);
        hal_status_t st = hal_allreduce(buf, buf, 1024, HAL_DTYPE_F32, HAL_REDOP_SUM, comm, s);
        if (st == HAL_OK)
            st = hal_stream_synchronize(s);
        if (st != HAL_OK) {
            res.failure = st;
            break;
        }
        CHILD_CHECK(buf[0] == 6.0f && buf[1023] == 6.0f);
        res.completed++;
    }
    CHILD_CHECK(hal_comm_get_async_error(comm, &res.async) == HAL_OK);
    if (res.failure != HAL_OK)
        hal_comm_abort(comm);
    hal_stream_destroy(s);
    hal_comm_destroy(comm);
    hal_mem_free(buf);
    CHILD_CHECK(hal_backend_close(b) == HAL_OK);
    CHILD_CHECK(ctest_write_full(job->result_pipe[rank][1], &res, sizeof(res)) == 0);
    _exit(0);
}

/* Runs the job under spec; fills results[r] (rank r's report; .rank = -1 if it sent none) and
 * signals[r] (the signal that ended it, 0 if it exited). Returns 0, or -1 if a child failed a
 * check or hung. */
static int run_job(const char *spec, result_t results[NRANKS], int signals[NRANKS],
                   char logs[NRANKS][PATH_MAX])
{
    job_t job;
    char dir[1024];
    memset(&job, 0, sizeof(job));
    if (!lt_temp_dir(dir, sizeof(dir)))
        return -1;
    for (int r = 0; r < NRANKS; r++) {
        snprintf(job.log_path[r], sizeof(job.log_path[r]), "%s/rank%d.log", dir, r);
        snprintf(logs[r], PATH_MAX, "%s", job.log_path[r]);
        if (pipe(job.id_pipe[r]) != 0 || pipe(job.result_pipe[r]) != 0)
            return -1;
    }
    fflush(stderr);
    for (int r = 0; r < NRANKS; r++) {
        job.pid[r] = fork();
        if (job.pid[r] < 0)
            return -1;
        if (job.pid[r] == 0)
            child(&job, r, spec);
    }
    int rc = 0;
    for (int r = 0; r < NRANKS; r++) {
        close(job.result_pipe[r][1]);
        results[r] = (result_t){ .rank = -1 };
        ctest_read_full(job.result_pipe[r][0], &results[r], sizeof(results[r]), 40000);
        int status = 0;
        double deadline = lt_now_ms() + 40000;
        pid_t w;
        while ((w = waitpid(job.pid[r], &status, WNOHANG)) == 0 && lt_now_ms() < deadline)
            usleep(10000);
        if (w != job.pid[r]) {
            kill(job.pid[r], SIGKILL);
            waitpid(job.pid[r], &status, 0);
            fprintf(stderr, "rank %d hung\n", r);
            rc = -1;
        }
        signals[r] = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
            fprintf(stderr, "rank %d exited with %d (see %s)\n", r, WEXITSTATUS(status),
                    job.log_path[r]);
            rc = -1;
        }
        close(job.result_pipe[r][0]);
        close(job.id_pipe[r][0]);
        close(job.id_pipe[r][1]);
    }
    return rc;
}

/* Segments of the job (named /hal-<nonce hex>-<rank>) still in /dev/shm. */
static int segments_left(const uint8_t nonce[16])
{
    char prefix[64] = "hal-";
    for (int i = 0; i < 16; i++)
        snprintf(prefix + 4 + 2 * i, 3, "%02x", nonce[i]);
    DIR *d = opendir("/dev/shm");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
            fprintf(stderr, "left behind: /dev/shm/%s\n", e->d_name);
            n++;
        }
    closedir(d);
    return n;
}

static bool log_contains(const char *path, const char *text)
{
    char buf[8192];
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, text) != NULL;
}

CTEST(faults_fork, peer_death_is_seen_by_the_survivors)
{
    result_t res[NRANKS];
    int sig[NRANKS];
    char logs[NRANKS][PATH_MAX];
    CTEST_CHECK(run_job("peer_death:after=2,rank=2;log=1", res, sig, logs) == 0);
    /* Rank 2 died by SIGKILL at its third collective, saying so first. */
    CTEST_CHECK(sig[2] == SIGKILL && res[2].rank == -1);
    CTEST_CHECK(log_contains(logs[2], "kind=peer_death"));
    CTEST_CHECK(log_contains(logs[2], "outcome=SIGKILL"));
    CTEST_CHECK(log_contains(logs[2], "rank=2 call=3"));
    for (int r = 0; r < 2; r++) {
        CTEST_CHECK(sig[r] == 0 && res[r].rank == r);
        CTEST_CHECK(res[r].completed == 2);
        if (res[r].failure != HAL_ERROR_REMOTE && res[r].failure != HAL_ERROR_TIMEOUT) {
            fprintf(stderr, "rank %d: %s\n", r, hal_status_string(res[r].failure));
            return CTEST_FAIL;
        }
        CTEST_CHECK(res[r].async == res[r].failure);
    }
    /* The survivors destroyed their communicators: nothing of the job is left in /dev/shm. */
    CTEST_CHECK(segments_left(res[0].nonce) == 0);
    return CTEST_PASS;
}

CTEST(faults_fork, collective_timeout_across_processes)
{
    result_t res[NRANKS];
    int sig[NRANKS];
    char logs[NRANKS][PATH_MAX];
    CTEST_CHECK(run_job("coll_timeout:after=1,rank=1;log=1", res, sig, logs) == 0);
    for (int r = 0; r < NRANKS; r++)
        CTEST_CHECK(sig[r] == 0 && res[r].rank == r && res[r].completed == 1);
    CTEST_CHECK(res[1].failure == HAL_ERROR_TIMEOUT && res[1].async == HAL_ERROR_TIMEOUT);
    CTEST_CHECK(log_contains(logs[1], "kind=coll_timeout"));
    for (int r = 0; r < NRANKS; r += 2) {
        CTEST_CHECK(res[r].failure == HAL_ERROR_REMOTE || res[r].failure == HAL_ERROR_TIMEOUT);
    }
    CTEST_CHECK(segments_left(res[0].nonce) == 0);
    return CTEST_PASS;
}

/* The control: the same job without faults completes. */
CTEST(faults_fork, no_faults_no_failures)
{
    result_t res[NRANKS];
    int sig[NRANKS];
    char logs[NRANKS][PATH_MAX];
    CTEST_CHECK(run_job("seed=3;peer_death:p=0;coll_timeout:p=0", res, sig, logs) == 0);
    for (int r = 0; r < NRANKS; r++)
        CTEST_CHECK(sig[r] == 0 && res[r].completed == STEPS && res[r].failure == HAL_OK);
    CTEST_CHECK(segments_left(res[0].nonce) == 0);
    return CTEST_PASS;
}
