/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench part "mem", measurement 2: enqueue-to-completion latency of a stream, 1-byte
 * hal_memset_async + hal_stream_synchronize round trips. */
#include <stdio.h>
#include <stdlib.h>

#include "bench/bench_mem.h"
#include "bench/bench_results.h"
#include "bench/bench_util.h"
#include "hal/hal.h"

/* ==== 2. enqueue-to-completion latency ======================================================= */

int bench_latency(mem_env_t *env)
{
    const mem_plan_t *plan = env->plan;
    int rc = -1;
    void *buf = NULL;
    double *us = NULL;
    int n = plan->latency_samples;

    bench_progress("[%s] 2/4 stream latency (%d round trips)", env->name, n);
    BENCH_HAL_CHECK_GOTO(hal_mem_alloc(env->device, HAL_MEM_KIND_DEVICE, 4096, 0, &buf), out);
    us = calloc((size_t)n, sizeof(double));
    if (!us)
        goto out;
    for (int i = 0; i < plan->latency_warmup; i++) {
        BENCH_HAL_CHECK_GOTO(hal_memset_async(buf, i & 0xff, 1, env->stream), out);
        BENCH_HAL_CHECK_GOTO(hal_stream_synchronize(env->stream), out);
    }
    for (int i = 0; i < n; i++) {
        uint64_t t0 = bench_now_ns();
        hal_status_t st = hal_memset_async(buf, i & 0xff, 1, env->stream);
        if (st == HAL_OK)
            st = hal_stream_synchronize(env->stream);
        uint64_t t1 = bench_now_ns();
        if (st != HAL_OK) {
            bench_hal_error(st, "hal_memset_async + hal_stream_synchronize");
            goto out;
        }
        us[i] = (double)(t1 - t0) / 1e3;
    }
    bench_stats_t s;
    bench_stats_compute(us, (size_t)n, &s);

    printf("\n[2] Stream enqueue-to-completion latency: hal_memset_async of 1 byte of device "
           "memory,\n"
           "    then hal_stream_synchronize; %d round trips after %d warm-up (us)\n",
           n, plan->latency_warmup);
    bench_table_t t;
    bench_table_init(&t, "round trip", "min", "p50", "p90", "p99", "p99.9", "max", "mean", NULL);
    int row = bench_table_row(&t);
    bench_table_cell(&t, row, 0, "memset 1 B + sync");
    bench_table_cell(&t, row, 1, "%.2f", s.min);
    bench_table_cell(&t, row, 2, "%.2f", s.p50);
    bench_table_cell(&t, row, 3, "%.2f", s.p90);
    bench_table_cell(&t, row, 4, "%.2f", s.p99);
    bench_table_cell(&t, row, 5, "%.2f", s.p999);
    bench_table_cell(&t, row, 6, "%.2f", s.max);
    bench_table_cell(&t, row, 7, "%.2f", s.mean);
    bench_table_print(&t);
    const struct {
        const char *statistic;
        double value;
    } stats[] = { { "min", s.min },    { "p50", s.p50 }, { "p90", s.p90 },  { "p99", s.p99 },
                  { "p99.9", s.p999 }, { "max", s.max }, { "mean", s.mean } };
    for (size_t i = 0; i < COUNT_OF(stats); i++)
        bench_figure_simple(env->name, "stream round trip (memset 1 B + sync)", 0, "hal",
                            stats[i].value, "us", stats[i].statistic);
    bool met = s.p50 <= LATENCY_TARGET_US;
    printf("  p50 %.2f us, p99 %.2f us; target p50 <= %.0f us: %s\n", s.p50, s.p99,
           LATENCY_TARGET_US, met ? "met" : "MISSED");
    char detail[64];
    snprintf(detail, sizeof(detail), "p50 %.2f us, p99 %.2f us", s.p50, s.p99);
    bench_target_add(env->targets, met ? BENCH_MET : BENCH_MISSED, detail,
                     "%s: stream enqueue-to-completion p50 <= %.0f us", env->name,
                     LATENCY_TARGET_US);
    bench_target_values(env->targets, s.p50, "<=", LATENCY_TARGET_US, "us");
    rc = 0;
out:
    if (rc != 0)
        bench_target_add(env->targets, BENCH_FAILED, NULL,
                         "%s: stream enqueue-to-completion p50 <= %.0f us", env->name,
                         LATENCY_TARGET_US);
    free(us);
    if (buf) {
        hal_status_t st = hal_mem_free(buf);
        if (st != HAL_OK) {
            bench_hal_error(st, "hal_mem_free");
            rc = -1;
        }
    }
    return rc;
}
