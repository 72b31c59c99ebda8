/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench: timing, statistics, tables and targets. */
#include "bench/bench_util.h"

#include "bench/bench_results.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

uint64_t bench_calibrate(bench_loop_fn loop, void *ctx, uint64_t target_ns, uint64_t min_iters,
                         uint64_t max_iters)
{
    uint64_t iters = min_iters ? min_iters : 1;
    for (;;) {
        uint64_t ns = loop(ctx, iters);
        if (ns >= target_ns || iters >= max_iters)
            break;
        /* Jump close to the target once a run is long enough to be measured reliably. */
        if (ns > target_ns / 16) {
            double scaled = (double)iters * (double)target_ns / (double)ns;
            iters = scaled > (double)max_iters ? max_iters : (uint64_t)scaled + 1;
            break;
        }
        iters = iters * 2 > max_iters ? max_iters : iters * 2;
    }
    return iters < min_iters ? min_iters : iters;
}

/* Sums of the first line of /proc/stat, in seconds. */
static bool read_proc_stat(double *busy_s, double *steal_s)
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
    /* user nice system idle iowait irq softirq steal */
    *busy_s = (double)(v[0] + v[1] + v[2] + v[5] + v[6]) / (double)hz;
    *steal_s = (double)v[7] / (double)hz;
    return true;
}

/* CPU time of this process and, with_children, of every process it started and reaped. */
static double own_cpu_s(bool with_children)
{
    double s = 0.0;
    int who[2] = { RUSAGE_SELF, RUSAGE_CHILDREN };
    for (int i = 0; i < (with_children ? 2 : 1); i++) {
        struct rusage ru;
        if (getrusage(who[i], &ru) == 0)
            s += (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                 (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    }
    return s;
}

void bench_load_begin_for(bench_load_t *load, const char *backend, bool with_children)
{
    memset(load, 0, sizeof(*load));
    load->with_children = with_children;
    snprintf(load->backend, sizeof(load->backend), "%s", backend ? backend : "");
    load->wall_ns = bench_now_ns();
    load->self_s = own_cpu_s(with_children);
    load->ok = read_proc_stat(&load->busy_s, &load->steal_s);
}

void bench_load_begin(bench_load_t *load)
{
    bench_load_begin_for(load, NULL, false);
}

void bench_load_report(const bench_load_t *load)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    double busy, steal;
    if (!load->ok || cpus <= 0 || !read_proc_stat(&busy, &steal)) {
        printf("  machine: load not measurable (no /proc/stat)\n");
        return;
    }
    double wall = (double)(bench_now_ns() - load->wall_ns) / 1e9;
    double capacity = wall * (double)cpus;
    double self = own_cpu_s(load->with_children) - load->self_s;
    double other = (busy - load->busy_s) - self;
    if (other < 0.0)
        other = 0.0;
    double stolen = steal - load->steal_s;
    double share = capacity > 0.0 ? (other + stolen) / capacity : 0.0;
    printf("  machine: %ld CPUs; during these %.1f s %s %.1f CPU-s, other processes "
           "%.1f and the hypervisor (steal) %.1f",
           cpus, wall,
           load->with_children ? "this benchmark and its processes used" : "this process used",
           self, other, stolen);
    if (share > BENCH_LOAD_QUIET_SHARE)
        printf("\n  WARNING: %.0f%% of the machine went elsewhere; the figures are likely low and "
               "noisy: rerun on a quiet machine\n",
               share * 100.0);
    else
        printf(" (quiet)\n");
    bench_results_machine(load->backend, cpus, wall, self, other, stolen, load->with_children);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_percentile_sorted(const double *sorted, size_t n, double p)
{
    if (n == 0)
        return 0.0;
    if (p <= 0.0)
        return sorted[0];
    if (p >= 100.0)
        return sorted[n - 1];
    double rank = p / 100.0 * (double)(n - 1);
    size_t lo = (size_t)rank;
    double frac = rank - (double)lo;
    if (lo + 1 >= n)
        return sorted[n - 1];
    return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

void bench_stats_compute(double *samples, size_t n, bench_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    out->n = n;
    if (n == 0)
        return;
    qsort(samples, n, sizeof(double), cmp_double);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += samples[i];
    out->min = samples[0];
    out->max = samples[n - 1];
    out->mean = sum / (double)n;
    out->p50 = bench_percentile_sorted(samples, n, 50.0);
    out->p90 = bench_percentile_sorted(samples, n, 90.0);
    out->p99 = bench_percentile_sorted(samples, n, 99.0);
    out->p999 = bench_percentile_sorted(samples, n, 99.9);
}

double bench_median(double *samples, size_t n)
{
    if (n == 0)
        return 0.0;
    qsort(samples, n, sizeof(double), cmp_double);
    return bench_percentile_sorted(samples, n, 50.0);
}

double bench_min(const double *samples, size_t n)
{
    double m = n ? samples[0] : 0.0;
    for (size_t i = 1; i < n; i++) {
        if (samples[i] < m)
            m = samples[i];
    }
    return m;
}

const char *bench_fmt_size(char *buf, size_t size, uint64_t bytes)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int u = 0;
    while (u < 4 && bytes >= 1024 && bytes % 1024 == 0) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, size, "%llu %s", (unsigned long long)bytes, units[u]);
    return buf;
}

void bench_table_init(bench_table_t *t, const char *first_header, ...)
{
    memset(t, 0, sizeof(*t));
    va_list ap;
    va_start(ap, first_header);
    for (const char *h = first_header; h && t->ncols < BENCH_TABLE_MAX_COLS;
         h = va_arg(ap, const char *)) {
        snprintf(t->head[t->ncols], BENCH_TABLE_CELL_MAX, "%s", h);
        t->ncols++;
    }
    va_end(ap);
}

int bench_table_row(bench_table_t *t)
{
    if (t->nrows >= BENCH_TABLE_MAX_ROWS)
        return BENCH_TABLE_MAX_ROWS - 1; /* overwrite the last row rather than overflow */
    return t->nrows++;
}

void bench_table_cell(bench_table_t *t, int row, int col, const char *fmt, ...)
{
    if (row < 0 || row >= BENCH_TABLE_MAX_ROWS || col < 0 || col >= t->ncols)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->cell[row][col], BENCH_TABLE_CELL_MAX, fmt, ap);
    va_end(ap);
}

void bench_table_print(const bench_table_t *t)
{
    int width[BENCH_TABLE_MAX_COLS];
    for (int c = 0; c < t->ncols; c++) {
        width[c] = (int)strlen(t->head[c]);
        for (int r = 0; r < t->nrows; r++) {
            int w = (int)strlen(t->cell[r][c]);
            if (w > width[c])
                width[c] = w;
        }
    }
    for (int r = -1; r < t->nrows; r++) {
        fputs(" ", stdout);
        for (int c = 0; c < t->ncols; c++) {
            const char *s = r < 0 ? t->head[c] : t->cell[r][c];
            if (c == 0)
                printf(" %-*s", width[c], s);
            else
                printf("  %*s", width[c], s);
        }
        fputc('\n', stdout);
    }
}

void bench_target_add(bench_targets_t *list, bench_verdict_t verdict, const char *detail,
                      const char *name_fmt, ...)
{
    list->last_dropped = list->count >= BENCH_MAX_TARGETS;
    if (list->last_dropped)
        return;
    bench_target_t *t = &list->t[list->count++];
    va_list ap;
    va_start(ap, name_fmt);
    vsnprintf(t->name, sizeof(t->name), name_fmt, ap);
    va_end(ap);
    snprintf(t->detail, sizeof(t->detail), "%s", detail ? detail : "");
    t->verdict = verdict;
    t->has_values = false;
}

void bench_target_values(bench_targets_t *list, double measured, const char *relation,
                         double threshold, const char *unit)
{
    if (list->count == 0 || list->last_dropped)
        return;
    bench_target_t *t = &list->t[list->count - 1];
    t->has_values = true;
    t->measured = measured;
    t->threshold = threshold;
    snprintf(t->relation, sizeof(t->relation), "%s", relation);
    snprintf(t->unit, sizeof(t->unit), "%s", unit);
}

const char *bench_verdict_string(bench_verdict_t verdict)
{
    switch (verdict) {
    case BENCH_MET:
        return "met";
    case BENCH_MISSED:
        return "MISSED";
    case BENCH_FAILED:
        return "MISSED (no result)";
    case BENCH_NA:
        return "n/a";
    }
    return "?";
}

int bench_targets_print(const bench_targets_t *list, const char *part)
{
    int met = 0, counted = 0;
    for (int i = 0; i < list->count; i++) {
        const bench_target_t *t = &list->t[i];
        if (t->detail[0])
            printf("target: %s (%s) ... %s\n", t->name, t->detail,
                   bench_verdict_string(t->verdict));
        else
            printf("target: %s ... %s\n", t->name, bench_verdict_string(t->verdict));
        if (t->verdict != BENCH_NA)
            counted++;
        if (t->verdict == BENCH_MET)
            met++;
    }
    printf("bench %s: %d/%d targets met\n", part, met, counted);
    fflush(stdout);
    return met;
}

void bench_progress(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout); /* keep the two streams in order when both go to one terminal or file */
    va_start(ap, fmt);
    fputs("hal-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

hal_status_t bench_hal_error(hal_status_t status, const char *what)
{
    const char *msg = hal_last_error_message();
    fprintf(stderr, "hal-bench: error: %s returned %s%s%s\n", what, hal_status_string(status),
            msg && *msg ? ": " : "", msg ? msg : "");
    return status;
}
