/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance, collectives: running a job's ranks as threads of the test or as processes, and
 * reporting from them.
 *
 * Rank processes are the harness executable started again (posix_spawn, so nothing of the
 * multi-threaded test process is inherited but the environment and one socket) in rank mode:
 * they open their own instance of the backend, join the communicator through the unique id the
 * test made (sent over the socket, never on the command line: it carries the job's secret), run
 * the scenario and send their failures back. A job that outlives its deadline is killed. */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cts_comm.h"

extern char **environ;

/* The socket of a rank process is this descriptor. */
#define CC_CHANNEL_FD 3
/* Reported failures per rank; the rest are counted. */
#define CC_MAX_REPORTS 20
/* Exit statuses of a rank process. */
enum { CC_EXIT_PASS = 0, CC_EXIT_FAIL = 1, CC_EXIT_USAGE = 2, CC_EXIT_NO_BACKEND = 3 };
/* Record types on the socket. */
#define CC_REC_FAIL       'F'
#define CC_REC_NO_BACKEND 'S'
#define CC_REC_READY      'R'
#define CC_REC_END        '\x1e'
#define CC_REC_SEP        '\x1f'

static const cc_scenario_t *const process_scenarios[] = {
    &cc_scenario_sweep, &cc_scenario_p2p,      &cc_scenario_barrier,
    &cc_scenario_kill,  &cc_scenario_mismatch, &cc_scenario_departed,
};

/* ---- Reporting ------------------------------------------------------------------------------- */

static void channel_write(int fd, const char *data, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, data, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* the test is gone; nothing to report to */
        data += w;
        n -= (size_t)w;
    }
}

/* One record: type, file, line and text, the separators kept out of the text. */
static void channel_record(int fd, char type, const char *file, int line, const char *text)
{
    char buf[4096];
    int n = snprintf(buf, sizeof(buf), "%c%s%c%d%c", type, file ? file : "", CC_REC_SEP, line,
                     CC_REC_SEP);
    if (n < 0 || (size_t)n >= sizeof(buf) - 2)
        return;
    size_t len = (size_t)n;
    for (const char *p = text; *p != '\0' && len < sizeof(buf) - 2; p++)
        buf[len++] = *p == CC_REC_END || *p == CC_REC_SEP ? '?' : *p;
    buf[len++] = CC_REC_END;
    channel_write(fd, buf, len);
}

static void rank_report(cc_rank_t *r, const char *file, int line, const char *msg)
{
    char full[3072];
    snprintf(full, sizeof(full), "rank %d of %d (%s, device %u): %s", r->rank, r->nranks,
             r->mode == CC_PROCESSES ? "process" : "thread", r->device_index, msg);
    if (r->channel >= 0)
        channel_record(r->channel, CC_REC_FAIL, file, line, full);
    else
        cts_failf(file, line, "%s", full);
}

void cc_failf(cc_rank_t *r, const char *file, int line, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    r->failures++;
    if (r->reported >= CC_MAX_REPORTS)
        return;
    r->reported++;
    rank_report(r, file, line, msg);
}

int cc_expect_true(cc_rank_t *r, int cond, const char *file, int line, const char *text)
{
    if (cond)
        return 1;
    cc_failf(r, file, line, "expected: %s", text);
    return 0;
}

int cc_expect_status(cc_rank_t *r, hal_status_t got, hal_status_t expected, const char *file,
                     int line, const char *call)
{
    return cc_expect_status2(r, got, expected, expected, file, line, call);
}

int cc_expect_status2(cc_rank_t *r, hal_status_t got, hal_status_t expected1,
                      hal_status_t expected2, const char *file, int line, const char *call)
{
    if (got == expected1 || got == expected2)
        return 1;
    char msg[2048];
    cts_status_mismatch(msg, sizeof(msg), call, got, expected1, expected2);
    cc_failf(r, file, line, "%s", msg);
    return 0;
}

void cc_break(cc_rank_t *r)
{
    if (r->comm != NULL && !r->broken)
        hal_comm_abort(r->comm);
    r->broken = true;
}

void cc_ready(cc_rank_t *r)
{
    if (r->channel >= 0)
        channel_record(r->channel, CC_REC_READY, "", 0, "");
}

hal_status_t cc_poll_stream(hal_stream_t stream, unsigned timeout_ms)
{
    return cts_poll_stream(stream, timeout_ms);
}

hal_status_t cc_poll_async(cc_rank_t *r, hal_comm_t comm, bool until_error, unsigned timeout_ms)
{
    double deadline = cts_now_ms() + timeout_ms;
    hal_status_t async = HAL_ERROR_INTERNAL;
    for (;;) {
        if (!CC_EXPECT_OK(r, hal_comm_get_async_error(comm, &async)))
            return HAL_ERROR_INTERNAL;
        bool waiting = async == HAL_IN_PROGRESS || (until_error && async == HAL_OK);
        if (!waiting || cts_now_ms() > deadline)
            return async;
        cts_sleep_ms(1);
    }
}

static void delay_fn(hal_status_t status, void *user_data)
{
    (void)status;
    cts_sleep_ms((unsigned)(uintptr_t)user_data);
}

hal_status_t cc_enqueue_delay(hal_stream_t stream, unsigned ms)
{
    return hal_stream_add_callback(stream, delay_fn, (void *)(uintptr_t)ms);
}

/* ---- A rank's life, in a thread or a process ------------------------------------------------- */

static void run_rank(cc_rank_t *r, const cc_scenario_t *s)
{
    r->expect_destroy = HAL_OK;
    if ((s->flags & CC_NO_COMM) == 0) {
        hal_comm_config_t cfg = HAL_COMM_CONFIG_INIT;
        cfg.timeout_ms = r->timeout_ms;
        cfg.store = r->store;
        if (!CC_EXPECT_OK(r,
                          hal_comm_init(&r->id, r->nranks, r->rank, r->device, &cfg, &r->comm))) {
            r->comm = NULL;
            r->broken = true;
            goto out;
        }
        if (!CC_EXPECT_OK(r, hal_stream_create(r->device, 0, &r->stream))) {
            r->stream = NULL;
            cc_break(r);
            goto out;
        }
    }
    s->fn(r);
out:
    if (r->stream != NULL) {
        hal_status_t st = hal_stream_destroy(r->stream);
        if (!r->broken)
            CC_EXPECT_STATUS(r, st, HAL_OK);
        r->stream = NULL;
    }
    if (r->comm != NULL) {
        hal_status_t st = hal_comm_destroy(r->comm);
        if (!r->broken)
            CC_EXPECT_STATUS(r, st, r->expect_destroy);
        r->comm = NULL;
    }
    if (r->failures > r->reported) {
        char msg[128];
        snprintf(msg, sizeof(msg), "... and %u more failures on this rank",
                 r->failures - r->reported);
        rank_report(r, __FILE__, __LINE__, msg);
    }
}

static void *thread_main(void *p)
{
    cc_rank_t *r = p;
    run_rank(r, r->scenario);
    return NULL;
}

/* ---- Threads --------------------------------------------------------------------------------- */

static int run_threads(cts_ctx_t *ctx, const cc_job_t *job)
{
    int n = job->nranks;
    hal_unique_id_t id;
    CTS_CHECK_OK(hal_comm_get_unique_id(job->store != NULL ? HAL_COMM_ID_FLAG_STORE : 0, &id));
    cc_rank_t *ranks = calloc((size_t)n, sizeof(*ranks));
    CTS_CHECK(ranks != NULL);
    int rc = CTS_PASS;
    for (int i = 0; i < n && rc == CTS_PASS; i++) {
        cc_rank_t *r = &ranks[i];
        r->rank = i;
        r->nranks = n;
        r->mode = CC_THREADS;
        r->param = job->param;
        r->timeout_ms = job->timeout_ms ? job->timeout_ms : CC_TIMEOUT_MS;
        r->backend = ctx->backend;
        r->device_count = ctx->device_count;
        r->base_device = ctx->device_index;
        r->device_index = (ctx->device_index + (uint32_t)i) % ctx->device_count;
        r->id = id;
        r->store = job->store;
        r->shared = job->shared;
        r->scenario = job->scenario;
        r->channel = -1;
        r->props.struct_size = sizeof(r->props);
        if (!CTS_EXPECT_OK(hal_device_get(ctx->backend, r->device_index, &r->device)) ||
            !CTS_EXPECT_OK(hal_device_get_properties(r->device, &r->props)))
            rc = CTS_FAIL;
    }
    if (rc == CTS_PASS && cts_run_threads((unsigned)n, thread_main, ranks, sizeof(ranks[0])) != 0)
        rc = CTS_FAIL; /* the ranks that started timed out without their peers (reported) */
    for (int i = 0; i < n; i++)
        if (ranks[i].failures > 0)
            rc = CTS_FAIL;
    free(ranks);
    return rc;
}

/* ---- Processes: the test's side -------------------------------------------------------------- */

typedef struct child {
    pid_t pid;
    int fd; /* our end of the socket, -1 after EOF */
    char *buf;
    size_t len, cap;
    bool exited, timed_out;
    int wstatus;
    bool ready, no_backend;
} child_t;

typedef struct pending_failure {
    char file[256];
    int line;
    char *text;
} pending_failure_t;

typedef struct proc_job {
    cts_ctx_t *ctx;
    const cc_job_t *job;
    child_t *children;
    pending_failure_t *failures;
    size_t nfailures, cap_failures;
    char no_backend_reason[CTS_REASON_MAX];
    bool no_backend; /* a rank could not open the backend */
} proc_job_t;

static void add_failure(proc_job_t *pj, const char *file, int line, const char *text)
{
    if (pj->nfailures == pj->cap_failures) {
        size_t cap = pj->cap_failures ? pj->cap_failures * 2 : 16;
        pending_failure_t *grown = realloc(pj->failures, cap * sizeof(*grown));
        if (grown == NULL)
            return;
        pj->failures = grown;
        pj->cap_failures = cap;
    }
    pending_failure_t *f = &pj->failures[pj->nfailures];
    snprintf(f->file, sizeof(f->file), "%s", file);
    f->line = line;
    f->text = strdup(text);
    if (f->text != NULL)
        pj->nfailures++;
}

static void parse_records(proc_job_t *pj, int rank)
{
    child_t *c = &pj->children[rank];
    size_t start = 0;
    for (size_t i = 0; i < c->len; i++) {
        if (c->buf[i] != CC_REC_END)
            continue;
        c->buf[i] = '\0';
        char *rec = c->buf + start;
        start = i + 1;
        char type = rec[0];
        char *file = rec + 1;
        char *sep1 = strchr(file, CC_REC_SEP);
        char *sep2 = sep1 ? strchr(sep1 + 1, CC_REC_SEP) : NULL;
        if (sep1 == NULL || sep2 == NULL)
            continue;
        *sep1 = '\0';
        *sep2 = '\0';
        int line = atoi(sep1 + 1);
        const char *text = sep2 + 1;
        if (type == CC_REC_READY) {
            c->ready = true;
        } else if (type == CC_REC_NO_BACKEND) {
            c->no_backend = true;
            if (!pj->no_backend) {
                pj->no_backend = true;
                snprintf(pj->no_backend_reason, sizeof(pj->no_backend_reason), "%s", text);
            }
        } else {
            add_failure(pj, file, line, text);
        }
    }
    memmove(c->buf, c->buf + start, c->len - start);
    c->len -= start;
}

static void read_child(proc_job_t *pj, int rank)
{
    child_t *c = &pj->children[rank];
    for (;;) {
        if (c->cap - c->len < 4096) {
            size_t cap = c->cap ? c->cap * 2 : 8192;
            char *grown = realloc(c->buf, cap);
            if (grown == NULL)
                return;
            c->buf = grown;
            c->cap = cap;
        }
        ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, MSG_DONTWAIT);
        if (n > 0) {
            c->len += (size_t)n;
            parse_records(pj, rank);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        close(c->fd); /* EOF or error */
        c->fd = -1;
        return;
    }
}

static int spawn_child(proc_job_t *pj, int rank)
{
    cts_ctx_t *ctx = pj->ctx;
    const cc_job_t *job = pj->job;
    child_t *c = &pj->children[rank];
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        cts_failf(__FILE__, __LINE__, "socketpair: %s", strerror(errno));
        return -1;
    }
    char a_scenario[160], a_backend[1200], a_job[256];
    snprintf(a_scenario, sizeof(a_scenario), "--cts-comm-rank=%s", job->scenario->name);
    snprintf(a_backend, sizeof(a_backend), "--cts-comm-backend=%s", ctx->backend_name);
    snprintf(a_job, sizeof(a_job), "--cts-comm-job=%d,%d,%u,%d,%u,%ld,%d", job->nranks, rank,
             ctx->device_index, job->param, job->timeout_ms ? job->timeout_ms : CC_TIMEOUT_MS,
             (long)getpid(), ctx->validation ? 1 : 0);
    char *argv[] = { (char *)ctx->self_exe, a_scenario, a_backend, a_job, NULL };
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawn_file_actions_init(&fa);
    /* dup2 onto the same number also clears close-on-exec (glibc 2.29 and later). */
    posix_spawn_file_actions_adddup2(&fa, sv[1], CC_CHANNEL_FD);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    int rc = posix_spawn(&c->pid, ctx->self_exe, &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(sv[1]);
    if (rc != 0) {
        close(sv[0]);
        cts_failf(__FILE__, __LINE__, "cannot start rank process %d (%s): %s", rank, ctx->self_exe,
                  strerror(rc));
        return -1;
    }
    c->fd = sv[0];
    return 0;
}

/* Entries of /dev/shm whose names start with "hal-" (the prefix of the HAL's segments). */
typedef struct shm_list {
    char **names;
    size_t n;
} shm_list_t;

static void shm_list_free(shm_list_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
    l->names = NULL;
    l->n = 0;
}

static bool shm_snapshot(shm_list_t *l)
{
    l->names = NULL;
    l->n = 0;
    DIR *d = opendir("/dev/shm");
    if (d == NULL)
        return false;
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "hal-", 4) != 0)
            continue;
        if (l->n == cap) {
            cap = cap ? cap * 2 : 16;
            char **grown = realloc(l->names, cap * sizeof(char *));
            if (grown == NULL)
                break;
            l->names = grown;
        }
        l->names[l->n] = strdup(e->d_name);
        if (l->names[l->n] != NULL)
            l->n++;
    }
    closedir(d);
    return true;
}

static bool shm_contains(const shm_list_t *l, const char *name)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->names[i], name) == 0)
            return true;
    return false;
}

/* Fails for entries that appeared during the job and are still there 2 s later (segments of
 * jobs running beside this test come and go within that time). */
static bool shm_check_no_growth(const shm_list_t *before)
{
    double deadline = cts_now_ms() + 2000;
    for (;;) {
        shm_list_t after;
        if (!shm_snapshot(&after))
            return true;
        size_t grown = 0;
        char first[300] = "";
        for (size_t i = 0; i < after.n; i++) {
            if (!shm_contains(before, after.names[i])) {
                if (grown++ == 0)
                    snprintf(first, sizeof(first), "%s", after.names[i]);
            }
        }
        shm_list_free(&after);
        if (grown == 0)
            return true;
        if (cts_now_ms() > deadline) {
            cts_failf(__FILE__, __LINE__,
                      "the job left %zu shared-memory entr%s behind, e.g. /dev/shm/%s", grown,
                      grown == 1 ? "y" : "ies", first);
            return false;
        }
        cts_sleep_ms(50);
    }
}

static void kill_all(proc_job_t *pj)
{
    for (int i = 0; i < pj->job->nranks; i++) {
        child_t *c = &pj->children[i];
        if (c->pid > 0 && !c->exited)
            kill(c->pid, SIGKILL);
    }
}

static int run_processes(cts_ctx_t *ctx, const cc_job_t *job)
{
    int n = job->nranks;
    CTS_CHECK(n >= 1 && n <= 8);
    if (ctx->self_exe == NULL)
        CTS_SKIP("the harness executable is unknown; cannot start rank processes");
    shm_list_t before;
    bool have_shm = shm_snapshot(&before);
    hal_unique_id_t id;
    CTS_CHECK_OK(hal_comm_get_unique_id(0, &id));
    proc_job_t pj;
    memset(&pj, 0, sizeof(pj));
    pj.ctx = ctx;
    pj.job = job;
    pj.children = calloc((size_t)n, sizeof(child_t));
    if (pj.children == NULL) {
        shm_list_free(&before);
        CTS_CHECK(pj.children != NULL);
    }
    int rc = CTS_PASS;
    for (int i = 0; i < n; i++)
        pj.children[i].fd = -1;
    for (int i = 0; i < n && rc == CTS_PASS; i++) {
        if (spawn_child(&pj, i) != 0) {
            rc = CTS_FAIL;
            break;
        }
        channel_write(pj.children[i].fd, (const char *)id.internal, sizeof(id.internal));
    }
    if (rc != CTS_PASS)
        kill_all(&pj);

    double start = cts_now_ms(), deadline = start + CC_JOB_DEADLINE_MS, kill_at = 0;
    bool victim_killed = false;
    for (;;) {
        int alive = 0;
        struct pollfd pfds[8];
        int map[8], np = 0;
        for (int i = 0; i < n; i++) {
            child_t *c = &pj.children[i];
            if (c->fd >= 0 && np < 8) {
                pfds[np] = (struct pollfd){ c->fd, POLLIN, 0 };
                map[np++] = i;
            }
            if (c->pid > 0 && !c->exited)
                alive++;
        }
        if (alive == 0 && np == 0)
            break;
        poll(pfds, (nfds_t)np, 20);
        for (int k = 0; k < np; k++)
            if (pfds[k].revents != 0)
                read_child(&pj, map[k]);
        for (int i = 0; i < n; i++) {
            child_t *c = &pj.children[i];
            if (c->pid <= 0 || c->exited)
                continue;
            pid_t w = waitpid(c->pid, &c->wstatus, WNOHANG);
            if (w == c->pid)
                c->exited = true;
        }
        double now = cts_now_ms();
        if (pj.no_backend) /* a rank cannot run here: do not let the others wait for it */
            kill_all(&pj);
        if (job->kill_rank >= 0 && !victim_killed) {
            bool all_ready = true, one_left = false;
            for (int i = 0; i < n; i++) {
                all_ready = all_ready && pj.children[i].ready;
                one_left = one_left || (pj.children[i].exited && !pj.children[i].ready);
            }
            /* A rank that ended before its ready point (it failed earlier) never reports it, and
             * the victim waits to be killed: stop the job now rather than at its deadline. */
            if (one_left && kill_at == 0)
                kill_all(&pj);
            if (all_ready && kill_at == 0)
                kill_at = now + job->kill_delay_ms;
            if (kill_at != 0 && now >= kill_at) {
                child_t *v = &pj.children[job->kill_rank];
                if (v->pid > 0 && !v->exited)
                    kill(v->pid, SIGKILL);
                victim_killed = true;
            }
        }
        if (now > deadline) {
            for (int i = 0; i < n; i++) {
                child_t *c = &pj.children[i];
                if (c->pid > 0 && !c->exited) {
                    c->timed_out = true;
                    kill(c->pid, SIGKILL);
                }
            }
            for (int i = 0; i < n; i++) {
                child_t *c = &pj.children[i];
                if (c->pid > 0 && !c->exited) {
                    waitpid(c->pid, &c->wstatus, 0);
                    c->exited = true;
                }
                if (c->fd >= 0) {
                    read_child(&pj, i);
                    if (c->fd >= 0) {
                        close(c->fd);
                        c->fd = -1;
                    }
                }
            }
            break;
        }
    }

    if (pj.no_backend) {
        /* The test asked for rank processes on this backend: one that cannot open it fails. */
        cts_failf(__FILE__, __LINE__, "%s", pj.no_backend_reason);
        rc = CTS_FAIL;
    } else {
        for (size_t i = 0; i < pj.nfailures; i++)
            cts_harness_report(pj.failures[i].file, pj.failures[i].line, pj.failures[i].text);
        if (pj.nfailures > 0)
            rc = CTS_FAIL;
        if (job->kill_rank >= 0 && !victim_killed) {
            cts_failf(__FILE__, __LINE__, "rank %d was never killed: not every rank got ready",
                      job->kill_rank);
            rc = CTS_FAIL;
        }
        for (int i = 0; i < n; i++) {
            child_t *c = &pj.children[i];
            if (c->pid <= 0)
                continue;
            bool victim = i == job->kill_rank && victim_killed;
            if (c->timed_out) {
                cts_failf(__FILE__, __LINE__,
                          "rank %d (process %ld) did not finish within %u ms and was killed", i,
                          (long)c->pid, CC_JOB_DEADLINE_MS);
                rc = CTS_FAIL;
            } else if (victim) {
                if (!WIFSIGNALED(c->wstatus) || WTERMSIG(c->wstatus) != SIGKILL) {
                    cts_failf(__FILE__, __LINE__,
                              "rank %d was to be killed but ended otherwise (wait status %#x)", i,
                              (unsigned)c->wstatus);
                    rc = CTS_FAIL;
                }
            } else if (WIFSIGNALED(c->wstatus)) {
                cts_failf(__FILE__, __LINE__, "rank %d (process %ld) was killed by signal %d (%s)",
                          i, (long)c->pid, WTERMSIG(c->wstatus), strsignal(WTERMSIG(c->wstatus)));
                rc = CTS_FAIL;
            } else if (WIFEXITED(c->wstatus) && WEXITSTATUS(c->wstatus) != CC_EXIT_PASS) {
                if (WEXITSTATUS(c->wstatus) != CC_EXIT_FAIL || pj.nfailures == 0)
                    cts_failf(__FILE__, __LINE__, "rank %d (process %ld) exited with status %d", i,
                              (long)c->pid, WEXITSTATUS(c->wstatus));
                rc = CTS_FAIL;
            }
            /* Survivors of a killed rank report their status; a survivor that hangs instead is
             * killed at the job's deadline and fails above. How soon they exit is not checked:
             * a loaded machine decides that. */
        }
    }
    for (size_t i = 0; i < pj.nfailures; i++)
        free(pj.failures[i].text);
    free(pj.failures);
    for (int i = 0; i < n; i++)
        free(pj.children[i].buf);
    free(pj.children);
    if (have_shm) {
        if (!pj.no_backend && !shm_check_no_growth(&before))
            rc = CTS_FAIL;
        shm_list_free(&before);
    }
    return rc;
}

int cc_run(cts_ctx_t *ctx, const cc_job_t *job)
{
    return job->mode == CC_PROCESSES ? run_processes(ctx, job) : run_threads(ctx, job);
}

int cc_run_simple(cts_ctx_t *ctx, const cc_scenario_t *scenario, int param, cc_mode_t mode,
                  int nranks)
{
    cc_job_t job = CC_JOB_INIT;
    job.scenario = scenario;
    job.mode = mode;
    job.nranks = nranks;
    job.param = param;
    return cc_run(ctx, &job);
}

/* ---- Processes: the rank's side -------------------------------------------------------------- */

static bool read_exact(int fd, void *buf, size_t n, unsigned timeout_ms)
{
    double deadline = cts_now_ms() + timeout_ms;
    char *p = buf;
    while (n > 0) {
        struct pollfd pfd = { fd, POLLIN, 0 };
        double left = deadline - cts_now_ms();
        if (left <= 0)
            return false;
        int rc = poll(&pfd, 1, (int)left + 1);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            return false;
        ssize_t got = read(fd, p, n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return false;
        p += got;
        n -= (size_t)got;
    }
    return true;
}

int cts_comm_rank_main(int argc, char **argv)
{
    const char *scenario_name = NULL, *backend_name = NULL, *job_args = NULL;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--cts-comm-rank=", 16) == 0)
            scenario_name = argv[i] + 16;
        else if (strncmp(argv[i], "--cts-comm-backend=", 19) == 0)
            backend_name = argv[i] + 19;
        else if (strncmp(argv[i], "--cts-comm-job=", 15) == 0)
            job_args = argv[i] + 15;
    }
    int nranks = 0, rank = 0, param = 0, validation = 0;
    unsigned base = 0, timeout = 0;
    long parent = 0;
    if (scenario_name == NULL || backend_name == NULL || job_args == NULL ||
        sscanf(job_args, "%d,%d,%u,%d,%u,%ld,%d", &nranks, &rank, &base, &param, &timeout, &parent,
               &validation) != 7)
        return CC_EXIT_USAGE;
    /* Die with the test rather than linger if it is killed (e.g. by its own timeout). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if ((long)getppid() != parent)
        return CC_EXIT_USAGE;
    const cc_scenario_t *s = NULL;
    for (size_t i = 0; i < sizeof(process_scenarios) / sizeof(process_scenarios[0]); i++)
        if (strcmp(process_scenarios[i]->name, scenario_name) == 0)
            s = process_scenarios[i];
    if (s == NULL)
        return CC_EXIT_USAGE;

    cc_rank_t r;
    memset(&r, 0, sizeof(r));
    r.rank = rank;
    r.nranks = nranks;
    r.mode = CC_PROCESSES;
    r.param = param;
    r.timeout_ms = timeout;
    r.base_device = base;
    r.channel = CC_CHANNEL_FD;
    r.props.struct_size = sizeof(r.props);
    if (!read_exact(CC_CHANNEL_FD, r.id.internal, sizeof(r.id.internal), 30000))
        return CC_EXIT_USAGE;
    hal_status_t st = hal_backend_open(backend_name, &r.backend);
    if (st != HAL_OK) {
        char msg[1024];
        snprintf(msg, sizeof(msg),
                 "a rank process cannot open backend \"%s\" beside the test: %s: %s (backends "
                 "whose devices belong to one process at a time need devices left free for the "
                 "rank processes; see conformance/README.md)",
                 backend_name, hal_status_string(st), hal_last_error_message());
        channel_record(CC_CHANNEL_FD, CC_REC_NO_BACKEND, "", 0, msg);
        return CC_EXIT_NO_BACKEND;
    }
    if (CC_EXPECT_OK(&r, hal_device_count(r.backend, &r.device_count)) && r.device_count > 0) {
        r.device_index = (base + (uint32_t)rank) % r.device_count;
        if (CC_EXPECT_OK(&r, hal_device_get(r.backend, r.device_index, &r.device)) &&
            CC_EXPECT_OK(&r, hal_device_get_properties(r.device, &r.props)))
            run_rank(&r, s);
    }
    CC_EXPECT_OK(&r, hal_backend_close(r.backend));
    if (validation) {
        uint64_t leaks = cts_leak_count();
        if (leaks != 0)
            CC_FAILF(&r, "the validation layer counted %llu leaked objects in the rank process",
                     (unsigned long long)leaks);
    }
    return r.failures > 0 ? CC_EXIT_FAIL : CC_EXIT_PASS;
}

/* ---- Jobs driven by one thread --------------------------------------------------------------- */

void cc_local_close(cc_local_t *job)
{
    for (int i = 0; i < job->nranks; i++) {
        if (job->streams[i] != NULL)
            hal_stream_destroy(job->streams[i]);
        job->streams[i] = NULL;
    }
    for (int i = 0; i < job->nranks; i++) {
        if (job->comms[i] != NULL)
            hal_comm_destroy(job->comms[i]);
        job->comms[i] = NULL;
    }
}

int cc_local_open(cts_ctx_t *ctx, cc_local_t *job, int nranks, uint32_t timeout_ms)
{
    memset(job, 0, sizeof(*job));
    job->nranks = nranks;
    CTS_CHECK(nranks >= 1 && nranks <= CC_LOCAL_MAX);
    hal_unique_id_t id;
    CTS_CHECK_OK(hal_comm_get_unique_id(0, &id));
    hal_comm_config_t cfg = HAL_COMM_CONFIG_INIT;
    cfg.timeout_ms = timeout_ms;
    cfg.blocking = 0;
    int rc = CTS_PASS;
    for (int r = 0; r < nranks && rc == CTS_PASS; r++) {
        uint32_t index = (ctx->device_index + (uint32_t)r) % ctx->device_count;
        if (!CTS_EXPECT_OK(hal_device_get(ctx->backend, index, &job->devices[r])) ||
            !CTS_EXPECT_STATUS(hal_comm_init(&id, nranks, r, job->devices[r], &cfg, &job->comms[r]),
                               HAL_IN_PROGRESS) ||
            !CTS_EXPECT_OK(hal_stream_create(job->devices[r], 0, &job->streams[r])))
            rc = CTS_FAIL;
    }
    double deadline = cts_now_ms() + timeout_ms + CC_SLACK_MS;
    for (int r = 0; r < nranks && rc == CTS_PASS; r++) {
        hal_status_t async = HAL_IN_PROGRESS;
        for (;;) {
            if (!CTS_EXPECT_OK(hal_comm_get_async_error(job->comms[r], &async)))
                break;
            if (async != HAL_IN_PROGRESS || cts_now_ms() > deadline)
                break;
            cts_sleep_ms(1);
        }
        if (!CTS_EXPECT_STATUS(async, HAL_OK))
            rc = CTS_FAIL;
    }
    if (rc != CTS_PASS) {
        for (int r = 0; r < nranks; r++)
            if (job->comms[r] != NULL)
                hal_comm_abort(job->comms[r]);
        cc_local_close(job);
    }
    return rc;
}

int cc_local_bufs_alloc(cc_local_t *job, cc_local_bufs_t *b, size_t count, uint32_t seed)
{
    memset(b, 0, sizeof(*b));
    b->count = count;
    b->seed = seed;
    size_t bytes = count * sizeof(float) + 1;
    for (int r = 0; r < job->nranks; r++) {
        hal_device_t d = job->devices[r];
        if (!CTS_EXPECT_OK(hal_mem_alloc(d, HAL_MEM_KIND_HOST_PINNED, bytes, 0, &b->host[r])) ||
            !CTS_EXPECT_OK(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, bytes, 0, &b->send[r])) ||
            !CTS_EXPECT_OK(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, bytes, 0, &b->recv[r]))) {
            cc_local_bufs_free(job, b);
            return CTS_FAIL;
        }
        cc_fill(HAL_DTYPE_F32, CC_CLASS_ADD, r, 0, count, seed, b->host[r]);
    }
    return CTS_PASS;
}

void cc_local_bufs_free(cc_local_t *job, cc_local_bufs_t *b)
{
    for (int r = 0; r < job->nranks; r++) {
        hal_mem_free(b->send[r]);
        hal_mem_free(b->recv[r]);
        hal_mem_free(b->host[r]);
        b->send[r] = b->recv[r] = b->host[r] = NULL;
    }
}

hal_status_t cc_local_enqueue(cc_local_t *job, cc_local_bufs_t *b, int rank, hal_comm_t comm,
                              hal_stream_t stream)
{
    hal_stream_t s = stream != NULL ? stream : job->streams[rank];
    size_t bytes = b->count * sizeof(float);
    hal_status_t st = hal_memcpy_async(b->send[rank], b->host[rank], bytes, s);
    if (st == HAL_OK)
        st = hal_allreduce(b->send[rank], b->recv[rank], b->count, HAL_DTYPE_F32, HAL_REDOP_SUM,
                           comm != NULL ? comm : job->comms[rank], s);
    if (st == HAL_OK)
        st = hal_memcpy_async(b->host[rank], b->recv[rank], bytes, s);
    return st;
}

int cc_local_check(cc_local_t *job, cc_local_bufs_t *b)
{
    for (int r = 0; r < job->nranks; r++) {
        for (size_t i = 0; i < b->count; i++) {
            char detail[256];
            uint64_t got = cc_get(HAL_DTYPE_F32, b->host[r], i);
            if (!cc_check_reduced(HAL_DTYPE_F32, HAL_REDOP_SUM, job->nranks, i, b->seed, got,
                                  detail, sizeof(detail))) {
                cts_failf(__FILE__, __LINE__,
                          "allreduce f32 sum of %zu elements, rank %d of %d: element %zu: %s",
                          b->count, r, job->nranks, i, detail);
                return CTS_FAIL;
            }
        }
    }
    return CTS_PASS;
}

int cc_local_drain(cc_local_t *job, int rc)
{
    if (rc != CTS_PASS) /* ranks that enqueued must not wait for the others */
        for (int r = 0; r < job->nranks; r++)
            hal_comm_abort(job->comms[r]);
    for (int r = 0; r < job->nranks; r++) {
        hal_status_t st = cts_poll_stream(job->streams[r], CC_TIMEOUT_MS + CC_SLACK_MS);
        if (rc == CTS_PASS && !CTS_EXPECT_OK(st))
            rc = CTS_FAIL;
    }
    return rc;
}

int cc_local_allreduce(cc_local_t *job, size_t count, uint32_t seed)
{
    cc_local_bufs_t b;
    if (cc_local_bufs_alloc(job, &b, count, seed) != CTS_PASS)
        return CTS_FAIL;
    int rc = CTS_PASS;
    for (int r = 0; r < job->nranks && rc == CTS_PASS; r++)
        if (!CTS_EXPECT_OK(cc_local_enqueue(job, &b, r, NULL, NULL)))
            rc = CTS_FAIL;
    rc = cc_local_drain(job, rc);
    if (rc == CTS_PASS)
        rc = cc_local_check(job, &b);
    cc_local_bufs_free(job, &b);
    return rc;
}
