/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench part "coll": the processes of every job (spawned with their stdout into a pipe,
 * read until they exit or time out), the jobs of each implementation (the HAL's rank
 * processes, Open MPI's peer under mpirun, Gloo's peer processes) and which peers can run. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_coll.h"
#include "bench/bench_util.h"
#include "bench/coll_common.h"
#include "hal/hal.h"

extern char **environ;

/* ==== the driver: processes and their output ================================================ */

/* Starts `path` (searched in PATH when `search`) with stdout into a pipe. */
static int spawn_proc(job_t *job, const char *path, char *const argv[], char *const envp[],
                      bool search)
{
    proc_t *p = &job->procs[job->nprocs];
    memset(p, 0, sizeof(*p));
    p->fd = -1;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        fprintf(stderr, "hal-bench: pipe: %s\n", strerror(errno));
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    int err = search ? posix_spawnp(&p->pid, path, &fa, NULL, argv, envp)
                     : posix_spawn(&p->pid, path, &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (err != 0) {
        close(fds[0]);
        fprintf(stderr, "hal-bench: cannot start %s: %s\n", argv[0], strerror(err));
        return -1;
    }
    p->fd = fds[0];
    job->nprocs++;
    return 0;
}

static void kill_job(job_t *job, int sig)
{
    for (int i = 0; i < job->nprocs; i++)
        if (job->procs[i].pid > 0)
            kill(job->procs[i].pid, sig);
}

/* Reads every process's output until all closed it (or the deadline passed: then they are
 * killed), and reaps them. Returns 0 when all exited with status 0. */
static int wait_job(job_t *job, uint64_t timeout_ns)
{
    uint64_t deadline = bench_now_ns() + timeout_ns;
    bool timed_out = false;
    for (;;) {
        struct pollfd pfd[MAX_JOB_PROCS];
        int map[MAX_JOB_PROCS], n = 0;
        for (int i = 0; i < job->nprocs; i++) {
            if (job->procs[i].fd >= 0) {
                pfd[n] = (struct pollfd){ .fd = job->procs[i].fd, .events = POLLIN };
                map[n++] = i;
            }
        }
        if (n == 0)
            break;
        uint64_t now = bench_now_ns();
        if (now >= deadline) {
            if (!timed_out) {
                fprintf(stderr, "hal-bench: %s: no end after %.0f s; killing it\n", job->label,
                        (double)timeout_ns / 1e9);
                kill_job(job, SIGTERM);
                timed_out = true;
                deadline = now + 3000000000ull;
                continue;
            }
            kill_job(job, SIGKILL);
            for (int i = 0; i < n; i++) {
                close(job->procs[map[i]].fd);
                job->procs[map[i]].fd = -1;
            }
            break;
        }
        int ms = (int)((deadline - now) / 1000000u) + 1;
        int r = poll(pfd, (nfds_t)n, ms > 1000 ? 1000 : ms);
        if (r < 0 && errno != EINTR)
            break;
        for (int i = 0; i < n && r > 0; i++) {
            if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            proc_t *p = &job->procs[map[i]];
            if (p->cap - p->len < 4096) {
                size_t cap = p->cap ? p->cap * 2 : 16384;
                char *grown = realloc(p->out, cap);
                if (!grown) {
                    close(p->fd);
                    p->fd = -1;
                    continue;
                }
                p->out = grown;
                p->cap = cap;
            }
            ssize_t got = read(p->fd, p->out + p->len, p->cap - p->len - 1);
            if (got > 0) {
                p->len += (size_t)got;
                p->out[p->len] = '\0';
            } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
                close(p->fd);
                p->fd = -1;
            }
        }
    }
    int rc = timed_out ? 1 : 0;
    for (int i = 0; i < job->nprocs; i++) {
        proc_t *p = &job->procs[i];
        while (waitpid(p->pid, &p->status, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(p->status) || WEXITSTATUS(p->status) != 0)
            rc = 1;
    }
    return rc;
}

static void free_job(job_t *job)
{
    for (int i = 0; i < job->nprocs; i++)
        free(job->procs[i].out);
    job->nprocs = 0;
}

/* Describes how the job's processes ended, for a failure message. */
static void describe_exits(const job_t *job, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < job->nprocs && used < size; i++) {
        int s = job->procs[i].status;
        if (WIFEXITED(s) && WEXITSTATUS(s) == 0)
            continue;
        if (WIFEXITED(s))
            used += (size_t)snprintf(buf + used, size - used, "%sprocess %d exited with %d",
                                     used ? ", " : "", i, WEXITSTATUS(s));
        else if (WIFSIGNALED(s))
            used += (size_t)snprintf(buf + used, size - used, "%sprocess %d killed by signal %d",
                                     used ? ", " : "", i, WTERMSIG(s));
    }
}

/* ==== the driver: running the implementations =============================================== */

/* A copy of the environment plus `extra` (NULL-terminated "NAME=value" strings). */
static char **env_with(const char *const *extra)
{
    size_t n = 0, m = 0;
    while (environ[n])
        n++;
    while (extra[m])
        m++;
    char **env = calloc(n + m + 1, sizeof(*env));
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < m; i++)
        env[k++] = (char *)extra[i];
    for (size_t i = 0; i < n; i++) {
        bool overridden = false;
        for (size_t j = 0; j < m && !overridden; j++) {
            const char *eq = strchr(extra[j], '=');
            size_t len = eq ? (size_t)(eq - extra[j]) + 1 : strlen(extra[j]);
            overridden = strncmp(environ[i], extra[j], len) == 0;
        }
        if (!overridden)
            env[k++] = environ[i];
    }
    env[k] = NULL;
    return env;
}

int run_hal(driver_t *d, const hal_side_t *side, int bidx, int n)
{
    const char *backend = side->backend;
    hal_unique_id_t id;
    hal_status_t st = hal_comm_get_unique_id(0, &id);
    if (st != HAL_OK) {
        bench_hal_error(st, "hal_comm_get_unique_id");
        return 1;
    }
    char id_env[sizeof(ID_ENV) + 2 * HAL_UNIQUE_ID_BYTES + 2];
    snprintf(id_env, sizeof(id_env), "%s=", ID_ENV);
    id_to_hex(&id, id_env + strlen(id_env));
    const char *extra[] = { id_env, side->env, NULL };
    char **env = env_with(extra);
    if (!env)
        return 1;

    char label[128];
    snprintf(label, sizeof(label), "hal (%s%s%s), %d processes", backend,
             side->label[0] ? ", " : "", side->label, n);
    job_t *job = calloc(1, sizeof(*job));
    if (!job) {
        free(env);
        return 1;
    }
    job->label = label;
    char backend_arg[128], nranks_arg[32], rank_arg[MAX_JOB_PROCS][32];
    snprintf(backend_arg, sizeof(backend_arg), "--backend=%s", backend);
    snprintf(nranks_arg, sizeof(nranks_arg), "--nranks=%d", n);
    int rc = 0;
    for (int r = 0; r < n && rc == 0; r++) {
        snprintf(rank_arg[r], sizeof(rank_arg[r]), "--rank=%d", r);
        char *argv[] = { d->self,     "--coll-rank", backend_arg,  nranks_arg,
                         rank_arg[r], d->plan_arg,   d->colls_arg, NULL };
        /* This very executable, even if its file was replaced since it started. */
        rc = spawn_proc(job, "/proc/self/exe", argv, env, false);
    }
    if (rc != 0)
        kill_job(job, SIGKILL);
    int wrc = wait_job(job, d->timeout_ns);
    if (rc == 0 && wrc != 0) {
        char why[256];
        describe_exits(job, why, sizeof(why));
        fprintf(stderr, "hal-bench: %s failed (%s)\n", label, why[0] ? why : "timed out");
        rc = 1;
    }
    parse_job(job, SRC_HAL + bidx, n);
    free_job(job);
    free(job);
    free(env);
    return rc;
}

int run_mpi(driver_t *d, int n)
{
    static const char *const extra[] = { "OMPI_ALLOW_RUN_AS_ROOT=1",
                                         "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", NULL };
    char **env = env_with(extra);
    job_t *job = calloc(1, sizeof(*job));
    if (!env || !job) {
        free(env);
        free(job);
        return 1;
    }
    char label[64], np[16], peer[PATH_MAX + 32];
    snprintf(label, sizeof(label), "Open MPI, %d processes", n);
    snprintf(np, sizeof(np), "%d", n);
    snprintf(peer, sizeof(peer), "%s/coll_peer_mpi", d->peer_dir);
    job->label = label;
    char *argv[] = {
        "mpirun", "--oversubscribe", "-np", np, peer, d->plan_arg, d->colls_arg, NULL
    };
    int rc = spawn_proc(job, "mpirun", argv, env, true);
    if (rc == 0 && wait_job(job, d->timeout_ns) != 0) {
        char why[256];
        describe_exits(job, why, sizeof(why));
        fprintf(stderr, "hal-bench: %s failed (%s)\n", label, why[0] ? why : "timed out");
        rc = 1;
    }
    parse_job(job, SRC_MPI, n);
    free_job(job);
    free(job);
    free(env);
    return rc;
}

/* Removes the rendezvous files of a Gloo job and their directory. */
static void remove_store(const char *dir)
{
    DIR *dh = opendir(dir);
    if (dh) {
        struct dirent *ent;
        while ((ent = readdir(dh)) != NULL) {
            if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
                continue;
            char path[PATH_MAX + 256];
            snprintf(path, sizeof(path), "%s/%s", dir, ent->d_name);
            unlink(path);
        }
        closedir(dh);
    }
    rmdir(dir);
}

int run_gloo(driver_t *d, int n)
{
    const char *tmp = getenv("TMPDIR");
    char store[PATH_MAX];
    snprintf(store, sizeof(store), "%s/hal-bench-gloo-XXXXXX", tmp && *tmp ? tmp : P_tmpdir);
    if (!mkdtemp(store)) {
        fprintf(stderr, "hal-bench: cannot create the Gloo rendezvous directory %s: %s\n", store,
                strerror(errno));
        return 1;
    }
    job_t *job = calloc(1, sizeof(*job));
    if (!job) {
        remove_store(store);
        return 1;
    }
    char label[64], peer[PATH_MAX + 32], size_arg[32], store_arg[PATH_MAX + 16];
    char rank_arg[MAX_JOB_PROCS][32];
    snprintf(label, sizeof(label), "Gloo, %d processes", n);
    snprintf(peer, sizeof(peer), "%s/coll_peer_gloo", d->peer_dir);
    snprintf(size_arg, sizeof(size_arg), "--size=%d", n);
    snprintf(store_arg, sizeof(store_arg), "--store=%s", store);
    job->label = label;
    int rc = 0;
    for (int r = 0; r < n && rc == 0; r++) {
        snprintf(rank_arg[r], sizeof(rank_arg[r]), "--rank=%d", r);
        char *argv[] = { peer,         rank_arg[r], size_arg, store_arg, d->gloo_plan_arg,
                         d->colls_arg, NULL };
        rc = spawn_proc(job, peer, argv, environ, false);
    }
    if (rc != 0)
        kill_job(job, SIGKILL);
    int wrc = wait_job(job, d->timeout_ns);
    if (rc == 0 && wrc != 0) {
        char why[256];
        describe_exits(job, why, sizeof(why));
        fprintf(stderr, "hal-bench: %s failed (%s)%s\n", label, why[0] ? why : "timed out",
                strstr(why, "exited with 127")
                    ? "; is Gloo's library installed? apt-get install libgloo-dev"
                    : "");
        rc = 1;
    }
    parse_job(job, SRC_GLOO, n);
    free_job(job);
    free(job);
    remove_store(store);
    return rc;
}

static bool executable(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && access(path, X_OK) == 0;
}

static bool in_path(const char *name)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        return false;
    char *copy = strdup(path), *save = NULL;
    bool found = false;
    for (char *dir = strtok_r(copy, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
        char full[PATH_MAX + 64];
        snprintf(full, sizeof(full), "%s/%s", *dir ? dir : ".", name);
        found = executable(full);
    }
    free(copy);
    return found;
}

/* Which peers can run, and why not. */
void find_peers(driver_t *d)
{
    char path[PATH_MAX + 32];
    if (opt_no_peers) {
        snprintf(d->mpi_skip, sizeof(d->mpi_skip), "--no-peers");
        snprintf(d->gloo_skip, sizeof(d->gloo_skip), "--no-peers");
        return;
    }
    snprintf(path, sizeof(path), "%s/coll_peer_mpi", d->peer_dir);
    if (!in_path("mpirun"))
        snprintf(d->mpi_skip, sizeof(d->mpi_skip),
                 "Open MPI is not installed (no mpirun in PATH); install it with: "
                 "apt-get install openmpi-bin libopenmpi-dev (make bench does)");
    else if (!executable(path))
        snprintf(d->mpi_skip, sizeof(d->mpi_skip),
                 "%s is not built; build it with: bazel build //bench:coll_peers", path);
    else
        d->mpi_ok = true;
    snprintf(path, sizeof(path), "%s/coll_peer_gloo", d->peer_dir);
    if (!executable(path)) {
        snprintf(d->gloo_skip, sizeof(d->gloo_skip),
                 "%s is not built; build it with: bazel build //bench:coll_peers (it needs Gloo: "
                 "apt-get install libgloo-dev; make bench does both)",
                 path);
    } else {
        d->gloo_ok = true;
    }
}
