/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench part "coll", internal to its files: the constants, options and objects that the
 * driver (bench_coll.c), the rank mode (bench_coll_rank.c), the processes it runs
 * (bench_coll_peers.c) and its results (bench_coll_results.c) share. What every implementation
 * under test shares, the peers included, is in coll_common.h. */
#ifndef BENCH_BENCH_COLL_H
#define BENCH_BENCH_COLL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bench/bench_util.h"
#include "bench/coll_common.h"
#include "hal/hal.h"

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

/* ---- options (bench_coll.c, see bench_coll_option) ----------------------------------------- */

extern bool opt_no_peers;
extern bool opt_no_cross_host;
extern int opt_ranks[MAX_RANK_COUNTS];
extern int opt_nranks_counts;

/* ---- output --------------------------------------------------------------------------------- */

/* A byte count for people ("64 KiB"), in one of 8 rotating buffers (a set per file). */
static inline const char *size_str(uint64_t bytes)
{
    static char buf[8][32];
    static int next;
    char *b = buf[next++ % 8];
    return bench_fmt_size(b, 32, bytes);
}

/* ---- the rank mode (bench_coll_rank.c) ------------------------------------------------------ */

/* Writes the id as 2 * HAL_UNIQUE_ID_BYTES hex digits and a NUL into hex, for ID_ENV. */
void id_to_hex(const hal_unique_id_t *id, char *hex);

/* ---- processes (bench_coll_peers.c) --------------------------------------------------------- */

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

/* One side of the HAL measured: a backend, and what its rank processes get in their
 * environment besides (the trainium backend is measured twice: with its native collectives, and
 * host-staged with HAL_NEURON_NATIVE_COLLECTIVES=0; the cpu backend once more with its ranks on
 * two simulated hosts: HAL_COMM_SHM_DISABLE=1, TCP on loopback). */
#define MAX_SIDES 8
typedef struct hal_side {
    const char *backend;
    const char *env;            /* "NAME=value" for the ranks, or NULL */
    const char *label;          /* "" for a backend as it is, else what the side changes */
    const char *implementation; /* in the results file: "hal", "hal native", "hal host-staged" */
    int hosts;                  /* hosts the ranks are on: 1, or 2 simulated */
    const char *transport;      /* with 2 simulated hosts: "tcp" */
    bool targets;               /* the part's targets are evaluated on this side */
    int twin;                   /* the side of the same backend measured the other way, or -1 */
} hal_side_t;

/* Run one job of the HAL's rank processes (side sides[bidx]), of Open MPI's peer or of
 * Gloo's, with n processes, and record its results. Return 0, or 1 if the job failed (reported
 * on stderr). */
int run_hal(driver_t *d, const hal_side_t *side, int bidx, int n);
int run_mpi(driver_t *d, int n);
int run_gloo(driver_t *d, int n);
/* Which peers can run, and why not (d->mpi_ok, d->gloo_ok, d->mpi_skip, d->gloo_skip). */
void find_peers(driver_t *d);

/* ---- results (bench_coll_results.c) -------------------------------------------------------- */

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

extern result_t results[MAX_RESULTS];
extern int nresults;
extern char infos[MAX_INFOS][128];
extern int ninfos;
/* How many rank processes of each side reported its collectives native, and host-staged. */
extern int path_native[MAX_SIDES], path_host[MAX_SIDES];

/* The result of (source, nranks, algo (NULL: any), kind, bytes), or NULL. */
result_t *find_result(int source, int nranks, const char *algo, coll_kind_t kind, uint64_t bytes);
/* Records every result line of a finished job. */
void parse_job(const job_t *job, int source, int nranks);
/* Algorithm and bus bandwidth in GB/s (0 for NULL). */
double algbw_of(const result_t *r);
double busbw_of(const result_t *r);
/* nccl-tests' table of one source, collective and rank count; our busbw next to the peers';
 * our small-allreduce latency next to theirs. */
void print_nccl_table(int source, int n, coll_kind_t kind, const coll_plan_t *plan);
void print_comparison(int bidx, int n, coll_kind_t kind, const coll_plan_t *plan);
void print_latency(int bidx, int n, const coll_plan_t *plan);
/* busbw of side `a` next to side `b` (the same backend measured both ways), per size. */
void print_sides(const hal_side_t *sides, int a, int b, int n, coll_kind_t kind,
                 const coll_plan_t *plan);
/* Records every merged result (time, algbw, busbw, wrong elements) for the results file. */
void record_figures(const hal_side_t *sides, int nsides);
/* Records the part's targets for backend backends[bidx]. */
void add_targets(const driver_t *d, const char *backend, int bidx, double memcpy_gbs,
                 bench_targets_t *targets);

#endif /* BENCH_BENCH_COLL_H */
