/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench: helpers shared by the benchmark parts: timing, sample statistics, a table printer,
 * target bookkeeping and HAL error reporting. */
#ifndef BENCH_BENCH_UTIL_H
#define BENCH_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/hal.h"

/* ---- options common to every part ---------------------------------------------------------- */

typedef struct bench_options {
    bool quick; /* --quick: short smoke run, figures are indicative only */
} bench_options_t;

/* ---- timing -------------------------------------------------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);

/* Keeps `value` alive and opaque to the optimiser (the loop computing it cannot be removed). */
#define BENCH_KEEP(value) __asm__ __volatile__("" : : "r"(value) : "memory")

/* Compiler barrier: memory written before it counts as read (stops dead-store elimination). */
#define BENCH_CLOBBER() __asm__ __volatile__("" : : : "memory")

/* A timed loop: runs `iters` iterations of something and returns the elapsed nanoseconds. */
typedef uint64_t (*bench_loop_fn)(void *ctx, uint64_t iters);

/* Finds an iteration count for which loop() takes about target_ns (at least min_iters, at most
 * max_iters), by doubling from min_iters. */
uint64_t bench_calibrate(bench_loop_fn loop, void *ctx, uint64_t target_ns, uint64_t min_iters,
                         uint64_t max_iters);

/* ---- machine load -------------------------------------------------------------------------
 * On a shared machine other processes (and the hypervisor's steal time) distort the figures;
 * a part measures how much CPU time they took during its run and prints it with the results. */

typedef struct bench_load {
    bool ok;            /* /proc/stat was readable */
    bool with_children; /* the processes this one started count as its own */
    char backend[32];   /* what the figures measured ("" for several backends) */
    uint64_t wall_ns;   /* bench_now_ns() at the start */
    double busy_s;      /* CPU time of all processes (user, system, irq) at the start */
    double steal_s;     /* time the hypervisor took from this machine's CPUs at the start */
    double self_s;      /* CPU time of this process (and children) at the start */
} bench_load_t;

/* Above this share of the machine taken by others (other processes and steal), a machine line
 * carries a warning and the run is not "quiet". */
#define BENCH_LOAD_QUIET_SHARE 0.05

/* Takes the starting snapshot for one backend's figures, this process's CPU time alone. */
void bench_load_begin(bench_load_t *load);

/* The same for `backend` (NULL: several) and, with with_children, counting the processes this
 * one starts and reaps meanwhile (rank and peer processes) as this benchmark's own CPU time. */
void bench_load_begin_for(bench_load_t *load, const char *backend, bool with_children);

/* Prints "  machine: ..." lines: CPUs, and the share of them that other processes and the
 * hypervisor used since bench_load_begin, with a warning when it is high enough to matter; and
 * records them for the results file (bench_results.h). */
void bench_load_report(const bench_load_t *load);

/* ---- statistics ---------------------------------------------------------------------------- */

typedef struct bench_stats {
    size_t n;
    double min, max, mean;
    double p50, p90, p99, p999;
} bench_stats_t;

/* Sorts samples[0..n) in place and summarises them (percentiles interpolate linearly between
 * the closest ranks). n may be 0 (all figures 0). */
void bench_stats_compute(double *samples, size_t n, bench_stats_t *out);

/* The p-th percentile (0..100) of n sorted samples. */
double bench_percentile_sorted(const double *sorted, size_t n, double p);

/* Median of n samples; sorts them in place. */
double bench_median(double *samples, size_t n);

/* Minimum of n samples. */
double bench_min(const double *samples, size_t n);

/* ---- formatting ---------------------------------------------------------------------------- */

/* "4 KiB", "256 MiB", "512 B". */
const char *bench_fmt_size(char *buf, size_t size, uint64_t bytes);

/* Columns and rows of a printed table; cells are copied. */
#define BENCH_TABLE_MAX_COLS 10
#define BENCH_TABLE_MAX_ROWS 32
#define BENCH_TABLE_CELL_MAX 48

typedef struct bench_table {
    int ncols, nrows;
    char head[BENCH_TABLE_MAX_COLS][BENCH_TABLE_CELL_MAX];
    char cell[BENCH_TABLE_MAX_ROWS][BENCH_TABLE_MAX_COLS][BENCH_TABLE_CELL_MAX];
} bench_table_t;

/* Starts a table with ncols column headers (NULL-terminated list of strings). */
void bench_table_init(bench_table_t *t, const char *first_header, ...);

/* Adds a row: one printf-style cell per call, in column order. Returns the row index. */
int bench_table_row(bench_table_t *t);
void bench_table_cell(bench_table_t *t, int row, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Prints the table to stdout, indented by two spaces: the first column left-aligned, the others
 * right-aligned. */
void bench_table_print(const bench_table_t *t);

/* ---- targets ------------------------------------------------------------------------------- */

typedef enum bench_verdict {
    BENCH_MET,
    BENCH_MISSED,
    BENCH_FAILED, /* the measurement did not complete (counts as missed) */
    BENCH_NA,     /* does not apply to this backend (not counted) */
} bench_verdict_t;

#define BENCH_MAX_TARGETS       64
#define BENCH_TARGET_NAME_MAX   96
#define BENCH_TARGET_DETAIL_MAX 96

typedef struct bench_target {
    char name[BENCH_TARGET_NAME_MAX];     /* "cpu: dispatch overhead <= 2 ns": the backend, ": ",
                                             what is compared with what */
    char detail[BENCH_TARGET_DETAIL_MAX]; /* "0.84 ns" */
    bench_verdict_t verdict;
    bool has_values;  /* measured and threshold were given (bench_target_values) */
    double measured;  /* the figure the verdict was taken on */
    double threshold; /* the bound it was compared with */
    char unit[16];    /* of both: "ns", "us", "x" (a ratio), ... */
    char relation[4]; /* measured <relation> threshold is met: "<=", "<", ">=" */
} bench_target_t;

typedef struct bench_targets {
    int count;
    bench_target_t t[BENCH_MAX_TARGETS];
    bool last_dropped; /* the list was full when the last target came (bench_target_values) */
} bench_targets_t;

/* Records a target's outcome. name is printf-style. */
void bench_target_add(bench_targets_t *list, bench_verdict_t verdict, const char *detail,
                      const char *name_fmt, ...) __attribute__((format(printf, 4, 5)));

/* Attaches the numbers behind the verdict to the target added last: `measured` is met when
 * `measured <relation> threshold` ("<=", "<", ">="), both in `unit`. */
void bench_target_values(bench_targets_t *list, double measured, const char *relation,
                         double threshold, const char *unit);

/* "met" / "MISSED" / "MISSED (no result)" / "n/a". */
const char *bench_verdict_string(bench_verdict_t verdict);

/* Prints one "target: <name> (<detail>) ... met|MISSED" line per target, then
 * "bench <part>: N/M targets met". Returns the number met. */
int bench_targets_print(const bench_targets_t *list, const char *part);

/* ---- progress and errors ------------------------------------------------------------------- */

/* A progress line on stderr ("hal-bench: ..."). */
void bench_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Reports a failed call on stderr with the HAL's status name and last error message. Returns
 * the status. */
hal_status_t bench_hal_error(hal_status_t status, const char *what);

/* Evaluates a HAL call; on failure reports it and jumps to `label`. */
#define BENCH_HAL_CHECK_GOTO(expr, label)      \
    do {                                       \
        hal_status_t bench_st_ = (expr);       \
        if (bench_st_ != HAL_OK) {             \
            bench_hal_error(bench_st_, #expr); \
            goto label;                        \
        }                                      \
    } while (0)

#endif /* BENCH_BENCH_UTIL_H */
