/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench part "coll": collectives among ranks that are separate processes on this host,
 * measured as nccl-tests measures them, next to Open MPI and Gloo measured in the same run.
 *
 * The driver (this process) creates the job's unique id, starts N rank processes (this very
 * binary, re-executed with --coll-rank as its first argument; the id travels in the
 * environment as hex), reads their result lines from pipes (format in coll_common.h), then runs
 * the peers the same way: `mpirun -np N coll_peer_mpi` and N processes of coll_peer_gloo. Each
 * rank owns one device of the backend (rank % device count), one stream and device buffers;
 * float32 sum, out of place.
 *
 * Per collective and size, every implementation runs warm-up ops, then `reps` repeats of: a
 * barrier, N ops enqueued (or called) back to back, a stream synchronize; time per op = wall
 * time / N. The time reported is, per repeat, the maximum over ranks, then the median over
 * repeats. The result is checked exactly after the timed loop.
 *
 * Targets, with 2 processes:
 *   - allreduce busbw >= 1.5x the best peer's, at each size from 1 MiB to 256 MiB;
 *   - 8-byte allreduce latency no worse than Open MPI's;
 *   - allreduce busbw at the largest size (256 MiB) >= 0.5x single-thread memcpy bandwidth of
 *     that size, measured here, in the driver, before the collectives. */
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
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_parts.h"
#include "bench/bench_util.h"
#include "bench/coll_common.h"
#include "hal/hal.h"

extern char **environ;

#define KIB ((uint64_t)1024)
#define MIB (KIB * 1024)

/* Targets. */
#define TARGET_PEER_RATIO   1.5
#define TARGET_PEER_FROM    MIB
#define TARGET_MEMCPY_RATIO 0.5
#define TARGET_NRANKS       2

#define ID_ENV "HAL_BENCH_COLL_ID"

#define MAX_RANK_COUNTS 4
#define MAX_JOB_PROCS   64
#define MAX_RESULTS     512
#define MAX_INFOS       8
#define MAX_ROUNDS      3
#define RESULT_MAX_REPS (MAX_ROUNDS * COLL_MAX_REPS)

/* ---- options (see bench_coll_option) ------------------------------------------------------ */

static bool opt_no_peers;
static char opt_peer_dir[PATH_MAX];
static int opt_ranks[MAX_RANK_COUNTS] = { 2, 4 };
static int opt_nranks_counts = 2;

int bench_coll_option(const char *arg)
{
    if (strcmp(arg, "--no-peers") == 0) {
        opt_no_peers = true;
        return 1;
    }
    if (strncmp(arg, "--peer-dir=", 11) == 0) {
        if (strlen(arg + 11) == 0 || strlen(arg + 11) >= sizeof(opt_peer_dir)) {
            fprintf(stderr, "hal-bench: --peer-dir needs a directory\n");
            return -1;
        }
        snprintf(opt_peer_dir, sizeof(opt_peer_dir), "%s", arg + 11);
        return 1;
    }
    if (strncmp(arg, "--ranks=", 8) == 0) {
        int counts[MAX_RANK_COUNTS], n = 0;
        const char *p = arg + 8;
        while (*p) {
            char *end = NULL;
            long v = strtol(p, &end, 10);
            if (end == p || v < 1 || v > MAX_JOB_PROCS || n == MAX_RANK_COUNTS ||
                (*end && *end != ',')) {
                fprintf(stderr,
                        "hal-bench: --ranks expects up to %d counts from 1 to %d, "
                        "e.g. --ranks=2,4\n",
                        MAX_RANK_COUNTS, MAX_JOB_PROCS);
                return -1;
            }
            counts[n++] = (int)v;
            p = *end ? end + 1 : end;
        }
        if (n == 0) {
            fprintf(stderr, "hal-bench: --ranks needs at least one count\n");
            return -1;
        }
        memcpy(opt_ranks, counts, sizeof(counts));
        opt_nranks_counts = n;
        return 1;
    }
    return 0;
}

/* ---- the plan ------------------------------------------------------------------------------ */

static const uint64_t full_sizes[] = { 8, KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB, 256 * MIB };
static const uint64_t quick_sizes[] = { 8, 64 * KIB, MIB, 16 * MIB };
#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

static uint32_t clamp_u32(uint64_t v, uint32_t lo, uint32_t hi)
{
    return v < lo ? lo : v > hi ? hi : (uint32_t)v;
}

/* Iterations shrink with size so that every step takes a comparable time: a fixed number of
 * bytes per timed loop, within bounds. */
static void make_plan(bool quick, coll_plan_t *plan)
{
    memset(plan, 0, sizeof(*plan));
    const uint64_t *sizes = quick ? quick_sizes : full_sizes;
    int n = quick ? (int)COUNT_OF(quick_sizes) : (int)COUNT_OF(full_sizes);
    for (int i = 0; i < n; i++) {
        coll_step_t *s = &plan->step[plan->nsteps++];
        s->bytes = sizes[i];
        if (quick) {
            s->iters = clamp_u32(4 * MIB / sizes[i], 2, 20);
            s->warmup = 1;
            s->reps = 1;
        } else {
            s->iters = clamp_u32(64 * MIB / sizes[i], 2, 200);
            s->warmup = sizes[i] >= 64 * MIB ? 1 : (s->iters < 5 ? s->iters : 5);
            s->reps = sizes[i] <= MIB ? 2 : 1; /* per round: 6 or 3 in all */
        }
    }
    for (int k = 0; k < COLL_KIND_COUNT; k++)
        plan->coll[plan->ncolls++] = (coll_kind_t)k;
}

/* Gloo's plan: below 1 MiB a tenth of the timed ops (at least 5) and at most 2 warm-up ops; the
 * same otherwise. */
static void gloo_plan(const coll_plan_t *plan, coll_plan_t *out)
{
    *out = *plan;
    for (int s = 0; s < out->nsteps; s++) {
        coll_step_t *st = &out->step[s];
        if (st->bytes >= MIB)
            continue;
        st->iters = st->iters / 10 < 5 ? (st->iters < 5 ? st->iters : 5) : st->iters / 10;
        st->warmup = st->warmup < 2 ? st->warmup : 2;
    }
}

static void plan_args(const coll_plan_t *plan, char *plan_arg, size_t plan_size, char *colls_arg,
                      size_t colls_size)
{
    size_t used = (size_t)snprintf(plan_arg, plan_size, "--plan=");
    for (int s = 0; s < plan->nsteps && used < plan_size; s++) {
        const coll_step_t *st = &plan->step[s];
        used += (size_t)snprintf(plan_arg + used, plan_size - used, "%s%llu:%u:%u:%u", s ? "," : "",
                                 (unsigned long long)st->bytes, st->iters, st->warmup, st->reps);
    }
    used = (size_t)snprintf(colls_arg, colls_size, "--colls=");
    for (int c = 0; c < plan->ncolls && used < colls_size; c++)
        used += (size_t)snprintf(colls_arg + used, colls_size - used, "%s%s", c ? "," : "",
                                 coll_kind_names[plan->coll[c]]);
}

/* ==== rank mode: one rank of the HAL's side ================================================== */

static int hex_value(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

static bool id_from_hex(const char *hex, hal_unique_id_t *id)
{
    if (!hex || strlen(hex) != 2 * sizeof(id->internal))
        return false;
    for (size_t i = 0; i < sizeof(id->internal); i++) {
        int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        id->internal[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

static void id_to_hex(const hal_unique_id_t *id, char *hex)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof(id->internal); i++) {
        hex[2 * i] = digits[id->internal[i] >> 4];
        hex[2 * i + 1] = digits[id->internal[i] & 15];
    }
    hex[2 * sizeof(id->internal)] = '\0';
}

typedef struct rank_env {
    int rank, nranks;
    hal_comm_t comm;
    hal_stream_t stream;
    void *send, *recv; /* device memory */
    float *host;       /* pinned host memory, for inputs and checks */
} rank_env_t;

static hal_status_t rank_op(rank_env_t *e, coll_kind_t kind, const coll_shape_t *sh)
{
    switch (kind) {
    case COLL_ALLREDUCE:
        return hal_allreduce(e->send, e->recv, sh->count, HAL_DTYPE_F32, HAL_REDOP_SUM, e->comm,
                             e->stream);
    case COLL_ALLGATHER:
        return hal_allgather(e->send, e->recv, sh->count, HAL_DTYPE_F32, e->comm, e->stream);
    case COLL_REDUCE_SCATTER:
        return hal_reduce_scatter(e->send, e->recv, sh->count, HAL_DTYPE_F32, HAL_REDOP_SUM,
                                  e->comm, e->stream);
    case COLL_BROADCAST:
        return hal_broadcast(e->send, e->recv, sh->count, HAL_DTYPE_F32, 0, e->comm, e->stream);
    case COLL_ALLTOALL:
        return hal_alltoall(e->send, e->recv, sh->count, HAL_DTYPE_F32, e->comm, e->stream);
    default:
        return HAL_ERROR_INVALID_ARGUMENT;
    }
}

/* Every rank enqueues a barrier and waits for it: all leave within a wake-up of each other. */
static hal_status_t rank_barrier(rank_env_t *e)
{
    hal_status_t st = hal_barrier(e->comm, e->stream);
    return st == HAL_OK ? hal_stream_synchronize(e->stream) : st;
}

static int rank_step(rank_env_t *e, coll_kind_t kind, const coll_step_t *step)
{
    coll_shape_t sh = coll_shape_of(kind, step->bytes, e->nranks);
    double ns[COLL_MAX_REPS];
    const char *what = coll_kind_names[kind];

    coll_fill_send(e->rank, e->host, sh.send_elems);
    BENCH_HAL_CHECK_GOTO(
        hal_memcpy_async(e->send, e->host, sh.send_elems * sizeof(float), e->stream), fail);
    BENCH_HAL_CHECK_GOTO(hal_memset_async(e->recv, 0xff, sh.recv_elems * sizeof(float), e->stream),
                         fail);
    BENCH_HAL_CHECK_GOTO(rank_barrier(e), fail);
    for (uint32_t w = 0; w < step->warmup; w++)
        BENCH_HAL_CHECK_GOTO(rank_op(e, kind, &sh), fail);
    BENCH_HAL_CHECK_GOTO(hal_stream_synchronize(e->stream), fail);
    for (uint32_t r = 0; r < step->reps; r++) {
        BENCH_HAL_CHECK_GOTO(rank_barrier(e), fail);
        uint64_t t0 = bench_now_ns();
        for (uint32_t it = 0; it < step->iters; it++)
            BENCH_HAL_CHECK_GOTO(rank_op(e, kind, &sh), fail);
        BENCH_HAL_CHECK_GOTO(hal_stream_synchronize(e->stream), fail);
        ns[r] = (double)(bench_now_ns() - t0) / (double)step->iters;
    }
    BENCH_HAL_CHECK_GOTO(
        hal_memcpy_async(e->host, e->recv, sh.recv_elems * sizeof(float), e->stream), fail);
    BENCH_HAL_CHECK_GOTO(hal_stream_synchronize(e->stream), fail);
    uint64_t wrong = coll_count_wrong(kind, e->rank, e->nranks, &sh, e->host);
    coll_print_result("hal", kind, "-", &sh, step->iters, wrong, ns, step->reps);
    return 0;
fail:
    fprintf(stderr, "hal-bench: rank %d of %d: %s of %llu bytes failed\n", e->rank, e->nranks, what,
            (unsigned long long)sh.bytes);
    return 1;
}

int bench_coll_rank_main(int argc, char **argv)
{
    coll_plan_t plan;
    memset(&plan, 0, sizeof(plan));
    const char *backend_name = "cpu";
    rank_env_t e = { .rank = -1, .nranks = 0 };
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int r = coll_plan_arg(&plan, a);
        if (r == 1)
            continue;
        if (r == 0 && strncmp(a, "--backend=", 10) == 0)
            backend_name = a + 10;
        else if (r == 0 && strncmp(a, "--rank=", 7) == 0)
            e.rank = atoi(a + 7);
        else if (r == 0 && strncmp(a, "--nranks=", 9) == 0)
            e.nranks = atoi(a + 9);
        else {
            fprintf(stderr, "hal-bench: rank mode: bad argument '%s'\n", a);
            return 2;
        }
    }
    hal_unique_id_t id;
    if (e.nranks < 1 || e.rank < 0 || e.rank >= e.nranks || plan.nsteps == 0 || plan.ncolls == 0 ||
        !id_from_hex(getenv(ID_ENV), &id)) {
        fprintf(stderr, "hal-bench: rank mode needs --rank, --nranks, --plan, --colls and %s\n",
                ID_ENV);
        return 2;
    }

    int rc = 1;
    hal_backend_t backend = NULL;
    hal_device_t device = NULL;
    uint32_t ndev = 0;
    size_t max_send, max_recv;
    coll_plan_max_elems(&plan, e.nranks, &max_send, &max_recv);
    size_t host_elems = max_send > max_recv ? max_send : max_recv;

    BENCH_HAL_CHECK_GOTO(hal_backend_open(backend_name, &backend), out);
    BENCH_HAL_CHECK_GOTO(hal_device_count(backend, &ndev), out_backend);
    if (ndev == 0) {
        fprintf(stderr, "hal-bench: backend %s has no device\n", backend_name);
        goto out_backend;
    }
    BENCH_HAL_CHECK_GOTO(hal_device_get(backend, (uint32_t)e.rank % ndev, &device), out_backend);
    BENCH_HAL_CHECK_GOTO(hal_set_current_device(device), out_backend);
    hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
    BENCH_HAL_CHECK_GOTO(hal_comm_init(&id, e.nranks, e.rank, device, &config, &e.comm),
                         out_backend);
    BENCH_HAL_CHECK_GOTO(hal_stream_create(device, 0, &e.stream), out_comm);
    BENCH_HAL_CHECK_GOTO(
        hal_mem_alloc(device, HAL_MEM_KIND_DEVICE, max_send * sizeof(float), 0, &e.send), out_mem);
    BENCH_HAL_CHECK_GOTO(
        hal_mem_alloc(device, HAL_MEM_KIND_DEVICE, max_recv * sizeof(float), 0, &e.recv), out_mem);
    void *host = NULL;
    BENCH_HAL_CHECK_GOTO(
        hal_mem_alloc(device, HAL_MEM_KIND_HOST_PINNED, host_elems * sizeof(float), 0, &host),
        out_mem);
    e.host = host;
    /* Fault every page in before any timing. */
    memset(e.host, 0, host_elems * sizeof(float));
    BENCH_HAL_CHECK_GOTO(hal_memset_async(e.send, 0, max_send * sizeof(float), e.stream), out_mem);
    BENCH_HAL_CHECK_GOTO(hal_memset_async(e.recv, 0, max_recv * sizeof(float), e.stream), out_mem);
    BENCH_HAL_CHECK_GOTO(hal_stream_synchronize(e.stream), out_mem);

    rc = 0;
    for (int c = 0; c < plan.ncolls && rc == 0; c++)
        for (int s = 0; s < plan.nsteps && rc == 0; s++)
            rc = rank_step(&e, plan.coll[c], &plan.step[s]);
    if (rc == 0)
        BENCH_HAL_CHECK_GOTO(hal_comm_finalize(e.comm), out_fail);

out_mem:
    if (e.stream)
        hal_stream_synchronize(e.stream);
    hal_mem_free(e.host);
    hal_mem_free(e.recv);
    hal_mem_free(e.send);
    if (e.stream)
        hal_stream_destroy(e.stream);
out_comm:
    if (rc != 0)
        hal_comm_abort(e.comm);
    hal_comm_destroy(e.comm);
out_backend:
    hal_backend_close(backend);
out:
    return rc;
out_fail:
    rc = 1;
    goto out_mem;
}

/* ==== the driver: processes and their output ================================================ */

typedef struct proc {
    pid_t pid;
    int fd; /* read end of its stdout, -1 once closed */
    char *out;
    size_t len, cap;
    int status;
} proc_t;

typedef struct job {
    const char *label;
    proc_t procs[MAX_JOB_PROCS];
    int nprocs;
} job_t;

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

/* ==== results ================================================================================ */

typedef enum source {
    SRC_HAL = 0, /* one per backend: SRC_HAL + backend index */
    SRC_MPI = 32,
    SRC_GLOO = 33,
} source_t;

typedef struct result {
    int source; /* source_t, SRC_HAL + backend */
    int nranks;
    char algo[24];
    coll_kind_t kind;
    uint64_t bytes, total;
    uint32_t iters;
    uint32_t reps; /* pooled over the rounds */
    uint64_t wrong;
    int job;       /* the job whose lines are being merged */
    uint32_t base; /* where that job's repeats start in rep_max */
    double rep_max[RESULT_MAX_REPS];
    double time_us; /* median over repeats of the maximum over processes */
} result_t;

static result_t results[MAX_RESULTS];
static int nresults;
static int current_job; /* numbers the jobs, to tell their lines apart */
static char infos[MAX_INFOS][128];
static int ninfos;

static result_t *find_result(int source, int nranks, const char *algo, coll_kind_t kind,
                             uint64_t bytes)
{
    for (int i = 0; i < nresults; i++) {
        result_t *r = &results[i];
        if (r->source == source && r->nranks == nranks && r->kind == kind && r->bytes == bytes &&
            (!algo || strcmp(r->algo, algo) == 0))
            return r;
    }
    return NULL;
}

/* Parses one line of a job's output into the table: the lines of one job are merged repeat by
 * repeat (maximum over processes), the repeats of different jobs (rounds) are pooled. */
static void parse_line(int source, int nranks, const char *line)
{
    if (strncmp(line, "info ", 5) == 0) {
        for (int i = 0; i < ninfos; i++)
            if (strcmp(infos[i], line + 5) == 0)
                return;
        if (ninfos < MAX_INFOS)
            snprintf(infos[ninfos++], sizeof(infos[0]), "%s", line + 5);
        return;
    }
    if (strncmp(line, "res ", 4) != 0)
        return;
    char impl[32], kind_name[32], algo[24];
    unsigned long long bytes, total, wrong;
    unsigned iters;
    int used = 0;
    if (sscanf(line, "res %31s %31s %23s %llu %llu %u %llu%n", impl, kind_name, algo, &bytes,
               &total, &iters, &wrong, &used) != 7)
        return;
    coll_kind_t kind;
    if (coll_kind_parse(kind_name, strlen(kind_name), &kind) != 0)
        return;
    double t[COLL_MAX_REPS];
    uint32_t reps = 0;
    const char *p = line + used;
    while (reps < COLL_MAX_REPS) {
        char *end = NULL;
        double v = strtod(p, &end);
        if (end == p)
            break;
        t[reps++] = v;
        p = end;
    }
    if (reps == 0)
        return;
    result_t *r = find_result(source, nranks, algo, kind, bytes);
    if (!r) {
        if (nresults == MAX_RESULTS)
            return;
        r = &results[nresults++];
        memset(r, 0, sizeof(*r));
        r->source = source;
        r->nranks = nranks;
        snprintf(r->algo, sizeof(r->algo), "%s", algo);
        r->kind = kind;
        r->bytes = bytes;
        r->total = total;
        r->iters = iters;
        r->job = -1;
    }
    if (r->job != current_job) {
        if (r->reps + reps > RESULT_MAX_REPS)
            return;
        r->job = current_job;
        r->base = r->reps;
        r->reps += reps;
    }
    for (uint32_t i = 0; i < reps && r->base + i < r->reps; i++)
        if (t[i] > r->rep_max[r->base + i])
            r->rep_max[r->base + i] = t[i];
    r->wrong += wrong;
    double sorted[RESULT_MAX_REPS];
    memcpy(sorted, r->rep_max, sizeof(double) * r->reps);
    r->time_us = bench_median(sorted, r->reps) / 1000.0;
}

static void parse_job(const job_t *job, int source, int nranks)
{
    current_job++;
    for (int i = 0; i < job->nprocs; i++) {
        char *out = job->procs[i].out;
        if (!out)
            continue;
        char *save = NULL;
        for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
            parse_line(source, nranks, line);
    }
}

static double algbw_of(const result_t *r)
{
    return r && r->time_us > 0.0 ? (double)r->bytes / (r->time_us * 1e-6) / 1e9 : 0.0;
}

static double busbw_of(const result_t *r)
{
    return r ? algbw_of(r) * coll_bus_factor(r->kind, r->nranks) : 0.0;
}

/* ==== the driver: running the implementations =============================================== */

typedef struct driver {
    const bench_options_t *opts;
    coll_plan_t plan;
    char plan_arg[1024], colls_arg[128];
    char gloo_plan_arg[1024]; /* fewer ops below 1 MiB: each Gloo op costs 90 us or more */
    char self[PATH_MAX];      /* this executable */
    char peer_dir[PATH_MAX];  /* where coll_peer_mpi and coll_peer_gloo are */
    uint64_t timeout_ns;      /* per job */
    bool mpi_ok, gloo_ok;
    char mpi_skip[PATH_MAX + 256], gloo_skip[PATH_MAX + 256];
} driver_t;

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

static int run_hal(driver_t *d, const char *backend, int bidx, int n)
{
    hal_unique_id_t id;
    hal_status_t st = hal_comm_get_unique_id(0, &id);
    if (st != HAL_OK) {
        bench_hal_error(st, "hal_comm_get_unique_id");
        return 1;
    }
    char id_env[sizeof(ID_ENV) + 2 * HAL_UNIQUE_ID_BYTES + 2];
    snprintf(id_env, sizeof(id_env), "%s=", ID_ENV);
    id_to_hex(&id, id_env + strlen(id_env));
    const char *extra[] = { id_env, NULL };
    char **env = env_with(extra);
    if (!env)
        return 1;

    char label[64];
    snprintf(label, sizeof(label), "hal (%s), %d processes", backend, n);
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

static int run_mpi(driver_t *d, int n)
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

static int run_gloo(driver_t *d, int n)
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
static void find_peers(driver_t *d)
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

/* ==== the driver: memcpy baseline ============================================================ */

/* Appends `reps` samples of single-thread memcpy bandwidth (GB/s, each byte copied counted
 * once) of `bytes` to samples[*n]. */
static void measure_memcpy(size_t bytes, int reps, double *samples, int *n)
{
    char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) {
        free(a);
        free(b);
        return;
    }
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    memcpy(b, a, bytes); /* warm-up */
    BENCH_CLOBBER();
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = bench_now_ns();
        memcpy(r & 1 ? a : b, r & 1 ? b : a, bytes);
        BENCH_CLOBBER();
        uint64_t t1 = bench_now_ns();
        samples[(*n)++] = (double)bytes / (double)(t1 - t0);
    }
    free(a);
    free(b);
}

/* ==== the driver: output ===================================================================== */

static const char *size_str(uint64_t bytes)
{
    static char buf[8][32];
    static int next;
    char *b = buf[next++ % 8];
    return bench_fmt_size(b, 32, bytes);
}

static const char *gloo_algo_label(const char *algo)
{
    if (strcmp(algo, "ring") == 0)
        return "Gloo ring";
    if (strcmp(algo, "ring_chunked") == 0)
        return "Gloo ring-chunked";
    if (strcmp(algo, "halving_doubling") == 0)
        return "Gloo halving-doubling";
    if (strcmp(algo, "one_to_all") == 0)
        return "Gloo one-to-all";
    return "Gloo";
}

/* nccl-tests' table (out-of-place columns) of one source, collective and rank count. */
static void print_nccl_table(int source, int n, coll_kind_t kind, const coll_plan_t *plan)
{
    printf("#\n#       size         count      type   redop    root     time   algbw   busbw  "
           "#wrong\n"
           "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)\n");
    double sum_busbw = 0.0;
    int rows = 0;
    for (int s = 0; s < plan->nsteps; s++) {
        coll_shape_t sh = coll_shape_of(kind, plan->step[s].bytes, n);
        const result_t *r = find_result(source, n, NULL, kind, sh.bytes);
        const char *op = kind == COLL_ALLREDUCE || kind == COLL_REDUCE_SCATTER ? "sum" : "none";
        int root = kind == COLL_BROADCAST ? 0 : -1;
        printf("%12llu  %12llu  %8s  %6s  %6d", (unsigned long long)sh.bytes,
               (unsigned long long)sh.total, "float", op, root);
        if (!r) {
            printf("  %7s  %6s  %6s  %6s\n", "-", "-", "-", "failed");
            continue;
        }
        char t[32];
        if (r->time_us >= 10000.0)
            snprintf(t, sizeof(t), "%7.0f", r->time_us);
        else if (r->time_us >= 100.0)
            snprintf(t, sizeof(t), "%7.1f", r->time_us);
        else
            snprintf(t, sizeof(t), "%7.2f", r->time_us);
        printf("  %7s  %6.2f  %6.2f  %6llu\n", t, algbw_of(r), busbw_of(r),
               (unsigned long long)r->wrong);
        sum_busbw += busbw_of(r);
        rows++;
    }
    printf("# Avg bus bandwidth    : %g\n", rows ? sum_busbw / rows : 0.0);
}

/* The best peer result for (n, kind, bytes); NULL if none. A peer with wrong results does not
 * count. */
static const result_t *best_peer(int n, coll_kind_t kind, uint64_t bytes)
{
    const result_t *best = NULL;
    for (int i = 0; i < nresults; i++) {
        const result_t *r = &results[i];
        if (r->source < SRC_MPI || r->nranks != n || r->kind != kind || r->bytes != bytes ||
            r->wrong)
            continue;
        if (!best || busbw_of(r) > busbw_of(best))
            best = r;
    }
    return best;
}

static const char *source_label(const result_t *r, char *buf, size_t size)
{
    if (r->source == SRC_MPI)
        snprintf(buf, size, "Open MPI");
    else if (r->source == SRC_GLOO)
        snprintf(buf, size, "%s", gloo_algo_label(r->algo));
    else
        snprintf(buf, size, "hal");
    return buf;
}

/* Our busbw next to every peer's, per size. */
static void print_comparison(int bidx, int n, coll_kind_t kind, const coll_plan_t *plan)
{
    /* Peer columns: every (source, algo) seen for this n and kind. */
    struct {
        int source;
        char algo[24];
    } cols[6];
    int ncols = 0;
    for (int i = 0; i < nresults && ncols < 6; i++) {
        const result_t *r = &results[i];
        if (r->source < SRC_MPI || r->nranks != n || r->kind != kind)
            continue;
        bool seen = false;
        for (int c = 0; c < ncols; c++)
            seen |= cols[c].source == r->source && strcmp(cols[c].algo, r->algo) == 0;
        if (!seen) {
            cols[ncols].source = r->source;
            snprintf(cols[ncols].algo, sizeof(cols[ncols].algo), "%s", r->algo);
            ncols++;
        }
    }
    if (ncols == 0) {
        printf("  (no peer measured %s)\n", coll_kind_names[kind]);
        return;
    }
    bench_table_t t;
    bench_table_init(&t, "busbw GB/s", "hal", NULL);
    for (int c = 0; c < ncols; c++) {
        result_t probe = { .source = cols[c].source };
        snprintf(probe.algo, sizeof(probe.algo), "%s", cols[c].algo);
        char label[48];
        snprintf(t.head[t.ncols++], BENCH_TABLE_CELL_MAX, "%s",
                 source_label(&probe, label, sizeof(label)));
    }
    snprintf(t.head[t.ncols++], BENCH_TABLE_CELL_MAX, "hal / best peer");
    for (int s = 0; s < plan->nsteps; s++) {
        coll_shape_t sh = coll_shape_of(kind, plan->step[s].bytes, n);
        int row = bench_table_row(&t);
        const result_t *ours = find_result(SRC_HAL + bidx, n, NULL, kind, sh.bytes);
        bench_table_cell(&t, row, 0, "%s", size_str(sh.bytes));
        if (ours)
            bench_table_cell(&t, row, 1, "%.3f%s", busbw_of(ours), ours->wrong ? " WRONG" : "");
        else
            bench_table_cell(&t, row, 1, "failed");
        for (int c = 0; c < ncols; c++) {
            const result_t *r = find_result(cols[c].source, n, cols[c].algo, kind, sh.bytes);
            if (r)
                bench_table_cell(&t, row, 2 + c, "%.3f%s", busbw_of(r), r->wrong ? " WRONG" : "");
            else
                bench_table_cell(&t, row, 2 + c, "-");
        }
        const result_t *best = best_peer(n, kind, sh.bytes);
        if (ours && best && busbw_of(best) > 0.0)
            bench_table_cell(&t, row, 2 + ncols, "%.2fx", busbw_of(ours) / busbw_of(best));
        else
            bench_table_cell(&t, row, 2 + ncols, "-");
    }
    bench_table_print(&t);
}

/* Our 8-byte-class latency next to every peer's (the first size of the plan). */
static void print_latency(int bidx, int n, const coll_plan_t *plan)
{
    coll_shape_t sh = coll_shape_of(COLL_ALLREDUCE, plan->step[0].bytes, n);
    const result_t *ours = find_result(SRC_HAL + bidx, n, NULL, COLL_ALLREDUCE, sh.bytes);
    printf("  allreduce %s latency (us):", size_str(sh.bytes));
    if (ours)
        printf(" hal %.2f", ours->time_us);
    for (int i = 0; i < nresults; i++) {
        const result_t *r = &results[i];
        if (r->source < SRC_MPI || r->nranks != n || r->kind != COLL_ALLREDUCE ||
            r->bytes != sh.bytes)
            continue;
        char label[48];
        printf(", %s %.2f", source_label(r, label, sizeof(label)), r->time_us);
    }
    printf("\n");
}

/* ==== targets ================================================================================ */

static void add_targets(const driver_t *d, const char *backend, int bidx, double memcpy_gbs,
                        bench_targets_t *targets)
{
    const int n = TARGET_NRANKS;
    char detail[BENCH_TARGET_DETAIL_MAX];
    bool ran = false;
    for (int i = 0; i < opt_nranks_counts; i++)
        ran |= opt_ranks[i] == n;
    if (!ran) {
        bench_target_add(targets, BENCH_NA, "--ranks without 2", "%s: %d procs: allreduce targets",
                         backend, n);
        return;
    }

    for (int s = 0; s < d->plan.nsteps; s++) {
        uint64_t bytes = d->plan.step[s].bytes;
        if (bytes < TARGET_PEER_FROM)
            continue;
        const result_t *ours = find_result(SRC_HAL + bidx, n, NULL, COLL_ALLREDUCE, bytes);
        const result_t *best = best_peer(n, COLL_ALLREDUCE, bytes);
        bench_verdict_t v;
        detail[0] = '\0';
        if (!ours) {
            v = BENCH_FAILED; /* the HAL's side failed */
        } else if (!best) {
            v = BENCH_NA;
            snprintf(detail, sizeof(detail), "%.3f GB/s, no peer measured", busbw_of(ours));
        } else {
            char label[48];
            double ratio = busbw_of(ours) / busbw_of(best);
            v = ratio >= TARGET_PEER_RATIO && !ours->wrong ? BENCH_MET : BENCH_MISSED;
            snprintf(detail, sizeof(detail), "%.3f vs %.3f GB/s %s = %.2fx%s", busbw_of(ours),
                     busbw_of(best), source_label(best, label, sizeof(label)), ratio,
                     ours->wrong ? ", WRONG results" : "");
        }
        bench_target_add(targets, v, detail,
                         "%s: %d procs: allreduce busbw at %s >= %.1fx best peer", backend, n,
                         size_str(bytes), TARGET_PEER_RATIO);
    }

    {
        uint64_t bytes = coll_shape_of(COLL_ALLREDUCE, d->plan.step[0].bytes, n).bytes;
        const result_t *ours = find_result(SRC_HAL + bidx, n, NULL, COLL_ALLREDUCE, bytes);
        const result_t *mpi = find_result(SRC_MPI, n, NULL, COLL_ALLREDUCE, bytes);
        bench_verdict_t v;
        detail[0] = '\0';
        if (!ours) {
            v = BENCH_FAILED; /* the HAL's side failed */
        } else if (!mpi || mpi->wrong) {
            v = BENCH_NA;
            snprintf(detail, sizeof(detail), "%.2f us, Open MPI not measured", ours->time_us);
        } else {
            v = ours->time_us <= mpi->time_us && !ours->wrong ? BENCH_MET : BENCH_MISSED;
            snprintf(detail, sizeof(detail), "%.2f vs %.2f us%s", ours->time_us, mpi->time_us,
                     ours->wrong ? ", WRONG results" : "");
        }
        bench_target_add(targets, v, detail, "%s: %d procs: allreduce %s latency <= Open MPI's",
                         backend, n, size_str(bytes));
    }

    {
        uint64_t bytes = d->plan.step[d->plan.nsteps - 1].bytes;
        const result_t *ours = find_result(SRC_HAL + bidx, n, NULL, COLL_ALLREDUCE, bytes);
        bench_verdict_t v;
        detail[0] = '\0';
        if (!ours || memcpy_gbs <= 0.0) {
            v = BENCH_FAILED;
        } else {
            double ratio = busbw_of(ours) / memcpy_gbs;
            v = ratio >= TARGET_MEMCPY_RATIO && !ours->wrong ? BENCH_MET : BENCH_MISSED;
            snprintf(detail, sizeof(detail), "%.3f vs memcpy %.3f GB/s = %.2fx%s", busbw_of(ours),
                     memcpy_gbs, ratio, ours->wrong ? ", WRONG results" : "");
        }
        bench_target_add(targets, v, detail,
                         "%s: %d procs: allreduce busbw at %s >= %.1fx memcpy (1 thread)", backend,
                         n, size_str(bytes), TARGET_MEMCPY_RATIO);
    }
}

/* ==== machine load (children included) ======================================================= */

typedef struct coll_load {
    bool ok;
    uint64_t wall_ns;
    double busy_s, steal_s, ours_s;
} coll_load_t;

static bool read_stat(double *busy_s, double *steal_s)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return false;
    unsigned long long v[8] = { 0 };
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    if (n < 8 || hz <= 0)
        return false;
    *busy_s = (double)(v[0] + v[1] + v[2] + v[5] + v[6]) / (double)hz;
    *steal_s = (double)v[7] / (double)hz;
    return true;
}

/* CPU time of this process and of every process it started and reaped. */
static double ours_cpu_s(void)
{
    double s = 0.0;
    int who[2] = { RUSAGE_SELF, RUSAGE_CHILDREN };
    for (int i = 0; i < 2; i++) {
        struct rusage ru;
        if (getrusage(who[i], &ru) == 0)
            s += (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                 (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    }
    return s;
}

static void load_begin(coll_load_t *l)
{
    l->wall_ns = bench_now_ns();
    l->ours_s = ours_cpu_s();
    l->ok = read_stat(&l->busy_s, &l->steal_s);
}

static void load_report(const coll_load_t *l)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    double busy, steal;
    if (!l->ok || cpus <= 0 || !read_stat(&busy, &steal)) {
        printf("  machine: load not measurable (no /proc/stat)\n");
        return;
    }
    double wall = (double)(bench_now_ns() - l->wall_ns) / 1e9;
    double ours = ours_cpu_s() - l->ours_s;
    double other = busy - l->busy_s - ours;
    if (other < 0.0)
        other = 0.0;
    double stolen = steal - l->steal_s;
    double share = wall > 0.0 ? (other + stolen) / (wall * (double)cpus) : 0.0;
    printf("  machine: %ld CPUs; during these %.1f s this benchmark and its processes used %.1f "
           "CPU-s, other processes %.1f and the hypervisor (steal) %.1f",
           cpus, wall, ours, other, stolen);
    if (share > 0.05)
        printf("\n  WARNING: %.0f%% of the machine went elsewhere; the figures are likely low and "
               "noisy: rerun on a quiet machine\n",
               share * 100.0);
    else
        printf(" (quiet)\n");
}

/* ==== the part =============================================================================== */

static void print_plan(const coll_plan_t *plan)
{
    printf("   plan (per size: timed ops per repeat x repeats per round + warm-up ops):");
    for (int s = 0; s < plan->nsteps; s++) {
        const coll_step_t *st = &plan->step[s];
        printf("%s %s %ux%u+%u", s ? "," : "", size_str(st->bytes), st->iters, st->reps,
               st->warmup);
    }
    printf("\n");
}

int bench_coll_run(const bench_options_t *opts, const char *const *backends, int nbackends,
                   bench_targets_t *targets)
{
    static driver_t d;
    memset(&d, 0, sizeof(d));
    d.opts = opts;
    uint64_t t_start = bench_now_ns();
    make_plan(opts->quick, &d.plan);
    plan_args(&d.plan, d.plan_arg, sizeof(d.plan_arg), d.colls_arg, sizeof(d.colls_arg));
    {
        coll_plan_t gp;
        char unused[128];
        gloo_plan(&d.plan, &gp);
        plan_args(&gp, d.gloo_plan_arg, sizeof(d.gloo_plan_arg), unused, sizeof(unused));
    }
    d.timeout_ns = (opts->quick ? 120ull : 900ull) * 1000000000ull;
    nresults = 0;
    ninfos = 0;

    ssize_t len = readlink("/proc/self/exe", d.self, sizeof(d.self) - 1);
    if (len <= 0) {
        fprintf(stderr, "hal-bench: cannot find this executable (/proc/self/exe): %s\n",
                strerror(errno));
        return 1;
    }
    d.self[len] = '\0';
    if (opt_peer_dir[0]) {
        snprintf(d.peer_dir, sizeof(d.peer_dir), "%s", opt_peer_dir);
    } else {
        snprintf(d.peer_dir, sizeof(d.peer_dir), "%s", d.self);
        char *slash = strrchr(d.peer_dir, '/');
        if (slash)
            *slash = '\0';
    }
    find_peers(&d);

    coll_load_t load;
    load_begin(&load);
    printf("== hal-bench coll: float32 sum, out of place, ranks as processes on this host, one "
           "device and stream per rank; %s run\n",
           opts->quick ? "quick (indicative figures only)" : "full");
    print_plan(&d.plan);
    printf("   time = per repeat the slowest rank's wall time of N back-to-back ops + stream "
           "synchronize, / N; median over the repeats of %s\n",
           opts->quick
               ? "1 round"
               : "3 rounds at 2 processes (implementations interleaved), 1 round otherwise");
    printf("   peers: Open MPI %s; Gloo %s\n", d.mpi_ok ? "measured" : "skipped",
           d.gloo_ok ? "measured" : "skipped");
    if (!d.mpi_ok)
        printf("   Open MPI skipped: %s\n", d.mpi_skip);
    if (!d.gloo_ok)
        printf("   Gloo skipped: %s\n", d.gloo_skip);

    /* memcpy is sampled before and after the collectives; the target uses the median. */
    uint64_t big = d.plan.step[d.plan.nsteps - 1].bytes;
    int memcpy_reps = opts->quick ? 2 : 5, nmemcpy = 0;
    double memcpy_samples[16];
    bench_progress("coll: memcpy baseline, %s", size_str(big));
    measure_memcpy((size_t)big, memcpy_reps, memcpy_samples, &nmemcpy);
    fflush(stdout);

    /* Rounds: every implementation runs once per round, in alternating order (HAL, Open MPI,
     * Gloo; then Gloo, Open MPI, HAL; ...), so that drift of the machine's load during the part
     * biases none of them; the repeats of all rounds are pooled. Only the process count with
     * targets gets several rounds: the others are informative and slow (oversubscribed). */
    int rc = 0;
    bool mpi_failed = false, gloo_failed = false;
    for (int i = 0; i < opt_nranks_counts; i++) {
        int n = opt_ranks[i];
        int rounds = opts->quick || n != TARGET_NRANKS ? 1 : MAX_ROUNDS;
        for (int round = 0; round < rounds; round++) {
            for (int k = 0; k < 3; k++) {
                int which = round % 2 == 0 ? k : 2 - k; /* 0 hal, 1 Open MPI, 2 Gloo */
                uint64_t t0 = bench_now_ns();
                if (which == 0) {
                    for (int b = 0; b < nbackends && b < 8; b++) {
                        t0 = bench_now_ns();
                        if (run_hal(&d, backends[b], b, n) != 0)
                            rc = 1;
                        bench_progress("coll: %d processes, round %d/%d: hal (%s) %.1f s", n,
                                       round + 1, rounds, backends[b],
                                       (double)(bench_now_ns() - t0) / 1e9);
                    }
                } else if (which == 1 && d.mpi_ok) {
                    if (run_mpi(&d, n) != 0)
                        mpi_failed = true;
                    bench_progress("coll: %d processes, round %d/%d: Open MPI %.1f s", n, round + 1,
                                   rounds, (double)(bench_now_ns() - t0) / 1e9);
                } else if (which == 2 && d.gloo_ok) {
                    if (run_gloo(&d, n) != 0)
                        gloo_failed = true;
                    bench_progress("coll: %d processes, round %d/%d: Gloo %.1f s", n, round + 1,
                                   rounds, (double)(bench_now_ns() - t0) / 1e9);
                }
            }
        }
    }
    if (mpi_failed)
        printf("   Open MPI: some runs failed (see stderr); their figures are missing\n");
    if (gloo_failed)
        printf("   Gloo: some runs failed (see stderr); their figures are missing\n");
    bench_progress("coll: memcpy baseline, %s", size_str(big));
    measure_memcpy((size_t)big, memcpy_reps, memcpy_samples, &nmemcpy);
    double memcpy_lo = bench_min(memcpy_samples, (size_t)nmemcpy);
    double memcpy_gbs = bench_median(memcpy_samples, (size_t)nmemcpy);
    double memcpy_hi = nmemcpy ? memcpy_samples[nmemcpy - 1] : 0.0; /* bench_median sorted */
    printf(
        "   memcpy (1 thread, in the driver, before and after the collectives): median %.3f GB/s "
        "at %s (%d samples, %.3f to %.3f)\n",
        memcpy_gbs, size_str(big), nmemcpy, memcpy_lo, memcpy_hi);
    for (int i = 0; i < ninfos; i++)
        printf("   peer: %s\n", infos[i]);

    for (int b = 0; b < nbackends && b < 8; b++) {
        for (int i = 0; i < opt_nranks_counts; i++) {
            int n = opt_ranks[i];
            for (int c = 0; c < d.plan.ncolls; c++) {
                coll_kind_t kind = d.plan.coll[c];
                printf("\n# %s, hal (backend %s), %d processes\n", coll_kind_names[kind],
                       backends[b], n);
                print_nccl_table(SRC_HAL + b, n, kind, &d.plan);
                printf("\n");
                print_comparison(b, n, kind, &d.plan);
            }
            printf("\n");
            print_latency(b, n, &d.plan);
        }
        add_targets(&d, backends[b], b, memcpy_gbs, targets);
    }
    printf("\n");
    load_report(&load);
    fflush(stdout);
    bench_progress("coll part took %.1f s", (double)(bench_now_ns() - t_start) / 1e9);
    return rc;
}
