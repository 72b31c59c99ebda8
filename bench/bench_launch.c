/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench part "launch": the cost of a kernel launch through the HAL's program API, on
 * devices that load host shared objects (HAL_PROGRAM_FORMAT_HOST_ELF) or PTX. An empty kernel
 * of libbench_kernels.so (bench_kernels.c, found next to hal_bench or at HAL_BENCH_KERNELS), or
 * of bench_kernels.ptx (bench_kernels.cu, next to hal_bench or at HAL_BENCH_KERNELS_PTX):
 *   1. enqueue cost: the time hal_kernel_launch takes to return, averaged over bursts of
 *      launches (the worker drains the stream meanwhile), against hal_memset_async of 1 byte
 *      measured the same way in the same run;
 *   2. enqueue-to-completion: hal_kernel_launch + hal_stream_synchronize round trips, against
 *      1-byte memset round trips.
 * Targets: enqueue <= 1 us, round trip p50 <= 5 us. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_parts.h"
#include "bench/bench_results.h"
#include "bench/bench_util.h"

#define ENQUEUE_TARGET_US    1.0
#define ROUND_TRIP_TARGET_US 5.0
#define BURST                256

typedef struct launch_env {
    hal_device_t device;
    hal_stream_t stream;
    hal_kernel_t kernel;
    void *buf;
} launch_env_t;

/* Reads the kernels in a format (libbench_kernels.so or bench_kernels.ptx, or the file its
 * environment variable names) into a malloc'd buffer. */
static void *read_kernels(hal_program_format_t format, size_t *size)
{
    bool ptx = format == HAL_PROGRAM_FORMAT_PTX;
    const char *file = ptx ? "bench_kernels.ptx" : "libbench_kernels.so";
    const char *var = ptx ? "HAL_BENCH_KERNELS_PTX" : "HAL_BENCH_KERNELS";
    char path[PATH_MAX];
    const char *env = getenv(var);
    if (env && *env) {
        snprintf(path, sizeof(path), "%s", env);
    } else {
        ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
        if (n <= 0)
            return NULL;
        path[n] = '\0';
        char *slash = strrchr(path, '/');
        snprintf(slash ? slash + 1 : path, sizeof(path) - (size_t)(slash ? slash + 1 - path : 0),
                 "%s", file);
    }
    FILE *f = fopen(path, "rb");
    void *image = NULL;
    long len = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
        image = malloc((size_t)len);
        if (image && fread(image, 1, (size_t)len, f) != (size_t)len) {
            free(image);
            image = NULL;
        }
    }
    if (f)
        fclose(f);
    if (!image)
        fprintf(stderr, "hal-bench: cannot read the benchmark kernels at %s (%s)\n", path, var);
    *size = (size_t)len;
    return image;
}

static hal_status_t enqueue(const launch_env_t *e, bool kernel)
{
    static const hal_launch_config_t one = HAL_LAUNCH_CONFIG_INIT(1, 1, 1);
    return kernel ? hal_kernel_launch(e->stream, e->kernel, &one, NULL, 0)
                  : hal_memset_async(e->buf, 0, 1, e->stream);
}

/* Mean enqueue time in microseconds over `bursts` bursts of BURST calls (the median burst). */
static int enqueue_cost(const launch_env_t *e, bool kernel, int bursts, double *us)
{
    double *per = calloc((size_t)bursts, sizeof(double));
    if (!per)
        return -1;
    int rc = 0;
    for (int b = 0; b < bursts && rc == 0; b++) {
        uint64_t t0 = bench_now_ns();
        for (int i = 0; i < BURST && rc == 0; i++)
            if (enqueue(e, kernel) != HAL_OK)
                rc = -1;
        per[b] = (double)(bench_now_ns() - t0) / 1e3 / BURST;
        if (rc == 0 && hal_stream_synchronize(e->stream) != HAL_OK)
            rc = -1;
    }
    if (rc == 0)
        *us = bench_median(per, (size_t)bursts);
    else
        bench_hal_error(hal_stream_query(e->stream), kernel ? "hal_kernel_launch" : "memset");
    free(per);
    return rc;
}

/* Round trips (enqueue + synchronize) in microseconds. */
static int round_trips(const launch_env_t *e, bool kernel, int n, bench_stats_t *s)
{
    double *us = calloc((size_t)n, sizeof(double));
    if (!us)
        return -1;
    int rc = 0;
    for (int i = 0; i < n / 10 && rc == 0; i++) /* warm-up */
        if (enqueue(e, kernel) != HAL_OK || hal_stream_synchronize(e->stream) != HAL_OK)
            rc = -1;
    for (int i = 0; i < n && rc == 0; i++) {
        uint64_t t0 = bench_now_ns();
        hal_status_t st = enqueue(e, kernel);
        if (st == HAL_OK)
            st = hal_stream_synchronize(e->stream);
        us[i] = (double)(bench_now_ns() - t0) / 1e3;
        if (st != HAL_OK) {
            bench_hal_error(st, kernel ? "hal_kernel_launch + sync" : "memset + sync");
            rc = -1;
        }
    }
    if (rc == 0)
        bench_stats_compute(us, (size_t)n, s);
    free(us);
    return rc;
}

static int run_backend(const char *name, const bench_options_t *opts, bench_targets_t *targets)
{
    hal_backend_t backend = NULL;
    hal_program_t program = NULL;
    launch_env_t e = { 0 };
    void *image = NULL;
    int rc = -1;
    int bursts = opts->quick ? 20 : 400, trips = opts->quick ? 200 : 20000;
    BENCH_HAL_CHECK_GOTO(hal_backend_open(name, &backend), out);
    BENCH_HAL_CHECK_GOTO(hal_device_get(backend, 0, &e.device), out);
    hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
    BENCH_HAL_CHECK_GOTO(hal_device_get_properties(e.device, &props), out);
    printf("== hal-bench launch: backend %s, device 0 \"%s\", %s run\n", name, props.name,
           opts->quick ? "quick (indicative figures only)" : "full");
    hal_program_format_t format =
        props.program_formats & (1u << HAL_PROGRAM_FORMAT_HOST_ELF) ? HAL_PROGRAM_FORMAT_HOST_ELF
        : props.program_formats & (1u << HAL_PROGRAM_FORMAT_PTX)    ? HAL_PROGRAM_FORMAT_PTX
                                                                    : HAL_PROGRAM_FORMAT_NONE;
    if (format == HAL_PROGRAM_FORMAT_NONE) {
        printf("   the device loads neither host shared objects nor PTX: nothing to measure\n");
        bench_target_add(targets, BENCH_NA, "no host_elf or ptx programs",
                         "%s: launch enqueue <= %.0f us", name, ENQUEUE_TARGET_US);
        bench_target_add(targets, BENCH_NA, "no host_elf or ptx programs",
                         "%s: launch round trip p50 <= %.0f us", name, ROUND_TRIP_TARGET_US);
        rc = 0;
        goto out;
    }
    size_t size = 0;
    image = read_kernels(format, &size);
    if (!image)
        goto out;
    printf("   kernel bench_empty from a %s program\n", hal_program_format_name(format));
    BENCH_HAL_CHECK_GOTO(hal_program_create(e.device, format, image, size, &program), out);
    BENCH_HAL_CHECK_GOTO(hal_program_get_kernel(program, "bench_empty", &e.kernel), out);
    BENCH_HAL_CHECK_GOTO(hal_stream_create(e.device, 0, &e.stream), out);
    BENCH_HAL_CHECK_GOTO(hal_mem_alloc(e.device, HAL_MEM_KIND_DEVICE, 4096, 0, &e.buf), out);

    bench_progress("[%s] launch: enqueue cost (%d bursts of %d)", name, bursts, BURST);
    double k_enq = 0, m_enq = 0;
    if (enqueue_cost(&e, true, bursts, &k_enq) != 0 || enqueue_cost(&e, false, bursts, &m_enq))
        goto out;
    bench_progress("[%s] launch: round trips (%d)", name, trips);
    bench_stats_t k, m;
    if (round_trips(&e, true, trips, &k) != 0 || round_trips(&e, false, trips, &m) != 0)
        goto out;

    printf("\n[1] Enqueue cost of an empty kernel (grid 1), median of %d bursts of %d calls (us)\n",
           bursts, BURST);
    bench_table_t t;
    bench_table_init(&t, "call", "us per call", "vs memset", NULL);
    int row = bench_table_row(&t);
    bench_table_cell(&t, row, 0, "hal_kernel_launch");
    bench_table_cell(&t, row, 1, "%.3f", k_enq);
    bench_table_cell(&t, row, 2, "%.2fx", m_enq > 0 ? k_enq / m_enq : 0.0);
    row = bench_table_row(&t);
    bench_table_cell(&t, row, 0, "hal_memset_async 1 B");
    bench_table_cell(&t, row, 1, "%.3f", m_enq);
    bench_table_cell(&t, row, 2, "1.00x");
    bench_table_print(&t);

    printf(
        "\n[2] Enqueue-to-completion: the call, then hal_stream_synchronize; %d round trips (us)\n",
        trips);
    bench_table_init(&t, "round trip", "min", "p50", "p90", "p99", "max", "p50 vs memset", NULL);
    const struct {
        const char *what;
        const bench_stats_t *s;
    } rows[] = { { "empty kernel + sync", &k }, { "memset 1 B + sync", &m } };
    for (int i = 0; i < 2; i++) {
        row = bench_table_row(&t);
        bench_table_cell(&t, row, 0, "%s", rows[i].what);
        bench_table_cell(&t, row, 1, "%.2f", rows[i].s->min);
        bench_table_cell(&t, row, 2, "%.2f", rows[i].s->p50);
        bench_table_cell(&t, row, 3, "%.2f", rows[i].s->p90);
        bench_table_cell(&t, row, 4, "%.2f", rows[i].s->p99);
        bench_table_cell(&t, row, 5, "%.2f", rows[i].s->max);
        bench_table_cell(&t, row, 6, "%.2fx", m.p50 > 0 ? rows[i].s->p50 / m.p50 : 0.0);
    }
    bench_table_print(&t);
    printf("\n");
    bench_figure_simple(name, "enqueue empty kernel", 0, "hal", k_enq, "us", "median");
    bench_figure_simple(name, "enqueue memset 1 B", 0, "hal", m_enq, "us", "median");
    for (int i = 0; i < 2; i++) {
        char measurement[48];
        snprintf(measurement, sizeof(measurement), "round trip %s", rows[i].what);
        const struct {
            const char *statistic;
            double value;
        } stats[] = { { "min", rows[i].s->min },
                      { "p50", rows[i].s->p50 },
                      { "p90", rows[i].s->p90 },
                      { "p99", rows[i].s->p99 },
                      { "max", rows[i].s->max } };
        for (size_t k = 0; k < sizeof(stats) / sizeof(stats[0]); k++)
            bench_figure_simple(name, measurement, 0, "hal", stats[k].value, "us",
                                stats[k].statistic);
    }
    char detail[64];
    snprintf(detail, sizeof(detail), "%.3f us, memset %.3f us", k_enq, m_enq);
    bench_target_add(targets, k_enq <= ENQUEUE_TARGET_US ? BENCH_MET : BENCH_MISSED, detail,
                     "%s: launch enqueue <= %.0f us", name, ENQUEUE_TARGET_US);
    bench_target_values(targets, k_enq, "<=", ENQUEUE_TARGET_US, "us");
    snprintf(detail, sizeof(detail), "p50 %.2f us, memset %.2f us", k.p50, m.p50);
    bench_target_add(targets, k.p50 <= ROUND_TRIP_TARGET_US ? BENCH_MET : BENCH_MISSED, detail,
                     "%s: launch round trip p50 <= %.0f us", name, ROUND_TRIP_TARGET_US);
    bench_target_values(targets, k.p50, "<=", ROUND_TRIP_TARGET_US, "us");
    rc = 0;
out:
    if (rc != 0) {
        bench_target_add(targets, BENCH_FAILED, NULL, "%s: launch enqueue <= %.0f us", name,
                         ENQUEUE_TARGET_US);
        bench_target_add(targets, BENCH_FAILED, NULL, "%s: launch round trip p50 <= %.0f us", name,
                         ROUND_TRIP_TARGET_US);
    }
    if (e.buf)
        hal_mem_free(e.buf);
    if (e.stream)
        hal_stream_destroy(e.stream);
    if (program)
        hal_program_destroy(program);
    if (backend)
        hal_backend_close(backend);
    free(image);
    return rc;
}

int bench_launch_run(const bench_options_t *opts, const char *const *backends, int nbackends,
                     bench_targets_t *targets)
{
    int rc = 0;
    for (int i = 0; i < nbackends; i++)
        if (run_backend(backends[i], opts, targets) != 0)
            rc = 1;
    return rc;
}
