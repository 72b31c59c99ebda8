/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench: every figure, target and machine line of a run, kept as the parts print them, and
 * written out as one JSON document (hal_bench --json=FILE; the schema is in README.md). The
 * store belongs to the driver process: the parts run one after another on its thread. */
#ifndef BENCH_BENCH_RESULTS_H
#define BENCH_BENCH_RESULTS_H

#include <stdbool.h>
#include <stdint.h>

#include "bench/bench_util.h"

/* One number of a printed table. Strings left empty (and ranks, hosts, bytes left 0) mean "does
 * not apply" and are written as null. */
typedef struct bench_figure {
    char part[16];           /* set by bench_figure_add: the current part */
    char backend[32];        /* the HAL backend measured; "" for a peer or a baseline alone */
    char measurement[48];    /* "copy device to device", "allocator pair", "busbw", ... */
    char collective[16];     /* part coll: "allreduce", ... */
    int ranks;               /* part coll: processes */
    int hosts;               /* part coll: 1, or 2 when two hosts were simulated */
    char transport[32];      /* part coll, simulated hosts: "tcp" */
    uint64_t bytes;          /* the message or buffer size */
    char implementation[32]; /* "hal", "hal native", "hal host-staged", "Open MPI", "Gloo",
                                "memcpy", "malloc", "direct call" */
    char algorithm[24];      /* an implementation's algorithm when it has several (Gloo's) */
    double value;
    char unit[12];      /* "ns", "us", "GB/s", "x", "%", "elements" */
    char statistic[24]; /* "median", "min", "p99", ... */
} bench_figure_t;

/* The part whose figures and machine lines follow ("mem", "coll", ...). */
void bench_results_begin_part(const char *part);

/* Records a figure of the current part. Thread safety: the driver's thread only. */
void bench_figure_add(const bench_figure_t *figure);

/* Records a figure without the collective's fields. */
void bench_figure_simple(const char *backend, const char *measurement, uint64_t bytes,
                         const char *implementation, double value, const char *unit,
                         const char *statistic);

/* Records a machine line of the current part (bench_load_report calls it). */
void bench_results_machine(const char *backend, long cpus, double wall_s, double self_cpu_s,
                           double other_cpu_s, double steal_s, bool with_children);

/* Records the targets of a finished part. */
void bench_results_targets(const bench_targets_t *targets, const char *part);

/* What the run was, for the document's head. */
typedef struct bench_run_info {
    const char *commit;   /* given with --commit, or NULL */
    const char *command;  /* the command line */
    const char *backends; /* comma-separated, as given */
    bool quick;
    int exit_status;
} bench_run_info_t;

/* Writes the document to `path` (replacing it). Returns 0, or -1 when the file could not be
 * written (reported on stderr). */
int bench_results_write_json(const char *path, const bench_run_info_t *info);

#endif /* BENCH_BENCH_RESULTS_H */
