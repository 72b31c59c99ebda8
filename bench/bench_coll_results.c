/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench part "coll": the results. Result lines of every job are merged into one table
 * (per repeat the maximum over the processes of a job, the repeats of the rounds pooled, the
 * median reported); from it come nccl-tests' tables, the comparison with the peers and the
 * targets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_coll.h"
#include "bench/bench_results.h"
#include "bench/bench_util.h"
#include "bench/coll_common.h"

/* ==== results ================================================================================ */

result_t results[MAX_RESULTS];
int nresults;
static int current_job; /* numbers the jobs, to tell their lines apart */
char infos[MAX_INFOS][128];
int ninfos;

result_t *find_result(int source, int nranks, const char *algo, coll_kind_t kind, uint64_t bytes)
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
int path_native[MAX_SIDES], path_host[MAX_SIDES];

static void parse_line(int source, int nranks, const char *line)
{
    if (strncmp(line, "path ", 5) == 0) {
        if (source >= SRC_HAL && source < SRC_HAL + MAX_SIDES) {
            if (strcmp(line + 5, "native") == 0)
                path_native[source - SRC_HAL]++;
            else
                path_host[source - SRC_HAL]++;
        }
        return;
    }
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

void parse_job(const job_t *job, int source, int nranks)
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

double algbw_of(const result_t *r)
{
    return r && r->time_us > 0.0 ? (double)r->bytes / (r->time_us * 1e-6) / 1e9 : 0.0;
}

double busbw_of(const result_t *r)
{
    return r ? algbw_of(r) * coll_bus_factor(r->kind, r->nranks) : 0.0;
}

/* ==== the driver: output ===================================================================== */

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
void print_nccl_table(int source, int n, coll_kind_t kind, const coll_plan_t *plan)
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
void print_comparison(int bidx, int n, coll_kind_t kind, const coll_plan_t *plan)
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

void print_sides(const hal_side_t *sides, int a, int b, int n, coll_kind_t kind,
                 const coll_plan_t *plan)
{
    bench_table_t t;
    char head_a[64], head_b[64];
    snprintf(head_a, sizeof(head_a), "%s", sides[a].label[0] ? sides[a].label : "one host");
    snprintf(head_b, sizeof(head_b), "%s", sides[b].label[0] ? sides[b].label : "one host");
    bench_table_init(&t, "busbw GB/s", head_a, head_b, NULL);
    snprintf(t.head[t.ncols++], BENCH_TABLE_CELL_MAX, "ratio");
    for (int s = 0; s < plan->nsteps; s++) {
        coll_shape_t sh = coll_shape_of(kind, plan->step[s].bytes, n);
        int row = bench_table_row(&t);
        const result_t *ra = find_result(SRC_HAL + a, n, NULL, kind, sh.bytes);
        const result_t *rb = find_result(SRC_HAL + b, n, NULL, kind, sh.bytes);
        bench_table_cell(&t, row, 0, "%s", size_str(sh.bytes));
        for (int k = 0; k < 2; k++) {
            const result_t *r = k ? rb : ra;
            if (r)
                bench_table_cell(&t, row, 1 + k, "%.3f%s", busbw_of(r), r->wrong ? " WRONG" : "");
            else
                bench_table_cell(&t, row, 1 + k, "failed");
        }
        if (ra && rb && busbw_of(rb) > 0.0)
            bench_table_cell(&t, row, 3, "%.2fx", busbw_of(ra) / busbw_of(rb));
        else
            bench_table_cell(&t, row, 3, "-");
    }
    bench_table_print(&t);
}

/* Our 8-byte-class latency next to every peer's (the first size of the plan). */
void print_latency(int bidx, int n, const coll_plan_t *plan)
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

/* ==== the results file ======================================================================= */

void record_figures(const hal_side_t *sides, int nsides)
{
    for (int i = 0; i < nresults; i++) {
        const result_t *r = &results[i];
        bench_figure_t f = { .ranks = r->nranks, .bytes = r->bytes };
        snprintf(f.collective, sizeof(f.collective), "%s", coll_kind_names[r->kind]);
        const hal_side_t *side = NULL;
        if (r->source == SRC_MPI) {
            snprintf(f.implementation, sizeof(f.implementation), "Open MPI");
        } else if (r->source == SRC_GLOO) {
            snprintf(f.implementation, sizeof(f.implementation), "Gloo");
            snprintf(f.algorithm, sizeof(f.algorithm), "%s", r->algo);
        } else if (r->source - SRC_HAL < nsides) {
            side = &sides[r->source - SRC_HAL];
            snprintf(f.backend, sizeof(f.backend), "%s", side->backend);
            snprintf(f.implementation, sizeof(f.implementation), "%s", side->implementation);
            snprintf(f.transport, sizeof(f.transport), "%s",
                     side->transport ? side->transport : "");
            f.hosts = side->hosts;
        } else {
            continue;
        }
        const struct {
            const char *measurement;
            double value;
            const char *unit, *statistic;
        } values[] = {
            { "time", r->time_us, "us", "median" },
            { "algbw", algbw_of(r), "GB/s", "median" },
            { "busbw", busbw_of(r), "GB/s", "median" },
            { "wrong elements", (double)r->wrong, "elements", "sum" },
        };
        for (size_t v = 0; v < sizeof(values) / sizeof(values[0]); v++) {
            snprintf(f.measurement, sizeof(f.measurement), "%s", values[v].measurement);
            f.value = values[v].value;
            snprintf(f.unit, sizeof(f.unit), "%s", values[v].unit);
            snprintf(f.statistic, sizeof(f.statistic), "%s", values[v].statistic);
            bench_figure_add(&f);
        }
        const result_t *best = side ? best_peer(r->nranks, r->kind, r->bytes) : NULL;
        if (best && busbw_of(best) > 0.0) {
            snprintf(f.measurement, sizeof(f.measurement), "busbw / best peer's");
            f.value = busbw_of(r) / busbw_of(best);
            snprintf(f.unit, sizeof(f.unit), "x");
            snprintf(f.statistic, sizeof(f.statistic), "median");
            bench_figure_add(&f);
        }
    }
}

/* ==== targets ================================================================================ */

void add_targets(const driver_t *d, const char *backend, int bidx, double memcpy_gbs,
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
        if (ours && best)
            bench_target_values(targets, busbw_of(ours) / busbw_of(best), ">=", TARGET_PEER_RATIO,
                                "x");
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
        if (ours && mpi && !mpi->wrong)
            bench_target_values(targets, ours->time_us, "<=", mpi->time_us, "us");
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
        if (ours && memcpy_gbs > 0.0)
            bench_target_values(targets, busbw_of(ours) / memcpy_gbs, ">=", TARGET_MEMCPY_RATIO,
                                "x");
    }
}
