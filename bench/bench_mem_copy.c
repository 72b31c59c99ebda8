/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench part "mem", measurement 3: copy bandwidth, device-to-device copies enqueued back to
 * back vs memcpy of the same buffers in the calling thread; where the host cannot address
 * device memory, the staged copies vs memcpy between pinned host buffers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_mem.h"
#include "bench/bench_results.h"
#include "bench/bench_util.h"
#include "hal/hal.h"

static const size_t copy_sizes[] = { 4 * KIB, 64 * KIB, MIB, 16 * MIB, 256 * MIB };

#define BENCH_COPY_MAX_REPEATS 64

/* ==== 3. copy bandwidth ====================================================================== */

typedef struct copy_ctx {
    void *dst; /* the HAL's copy */
    const void *src;
    void *plain_dst; /* the memcpy baseline's */
    const void *plain_src;
    size_t n;
    hal_stream_t stream;
    hal_status_t status;
} copy_ctx_t;

/* K copies enqueued back to back, then one synchronize. */
static uint64_t loop_copy_hal(void *arg, uint64_t k)
{
    copy_ctx_t *c = arg;
    hal_status_t st = HAL_OK;
    uint64_t t0 = bench_now_ns();
    for (uint64_t i = 0; i < k && st == HAL_OK; i++)
        st = hal_memcpy_async(c->dst, c->src, c->n, c->stream);
    hal_status_t sync = hal_stream_synchronize(c->stream);
    uint64_t t1 = bench_now_ns();
    if (c->status == HAL_OK)
        c->status = st != HAL_OK ? st : sync;
    return t1 - t0;
}

/* K memcpy calls in the calling thread. */
static uint64_t loop_copy_plain(void *arg, uint64_t k)
{
    copy_ctx_t *c = arg;
    uint64_t t0 = bench_now_ns();
    for (uint64_t i = 0; i < k; i++) {
        memcpy(c->plain_dst, c->plain_src, c->n);
        BENCH_CLOBBER();
    }
    return bench_now_ns() - t0;
}

/* One size: the HAL copy and the memcpy baseline in alternating repeats. */
typedef struct copy_figures {
    uint64_t k;
    int reps;
    double hal_gbps, plain_gbps; /* medians */
    double ratio, rmin, rmax;    /* median and range of the per-repeat ratios */
} copy_figures_t;

static int measure_copy(mem_env_t *env, copy_ctx_t *c, copy_figures_t *f)
{
    const mem_plan_t *plan = env->plan;
    int reps = c->n >= 64 * MIB ? plan->copy_repeats_large : plan->copy_repeats;
    if (reps > BENCH_COPY_MAX_REPEATS)
        reps = BENCH_COPY_MAX_REPEATS;
    /* Warm up, then size K on memcpy. */
    loop_copy_hal(c, 1);
    if (c->status != HAL_OK) {
        bench_hal_error(c->status, "hal_memcpy_async / hal_stream_synchronize");
        return -1;
    }
    uint64_t k = bench_calibrate(loop_copy_plain, c, plan->copy_sample_ns, 1, 1u << 22);
    double hal_gbps[BENCH_COPY_MAX_REPEATS], plain_gbps[BENCH_COPY_MAX_REPEATS];
    double bytes = (double)c->n * (double)k;
    for (int r = 0; r < reps; r++) {
        if (r % 2 == 0) {
            hal_gbps[r] = bytes / (double)loop_copy_hal(c, k);
            plain_gbps[r] = bytes / (double)loop_copy_plain(c, k);
        } else {
            plain_gbps[r] = bytes / (double)loop_copy_plain(c, k);
            hal_gbps[r] = bytes / (double)loop_copy_hal(c, k);
        }
    }
    if (c->status != HAL_OK) {
        bench_hal_error(c->status, "hal_memcpy_async / hal_stream_synchronize");
        return -1;
    }
    /* The ratio is the median of the per-repeat ratios: each pairs two adjacent samples, which
     * share the machine's state (memory traffic of neighbours, frequency), so slow drift
     * cancels. Their range shows how noisy the machine was. */
    double ratios[BENCH_COPY_MAX_REPEATS];
    for (int r = 0; r < reps; r++)
        ratios[r] = hal_gbps[r] / plain_gbps[r];
    f->k = k;
    f->reps = reps;
    f->ratio = bench_median(ratios, (size_t)reps);
    f->rmin = ratios[0]; /* sorted by bench_median */
    f->rmax = ratios[reps - 1];
    f->hal_gbps = bench_median(hal_gbps, (size_t)reps);
    f->plain_gbps = bench_median(plain_gbps, (size_t)reps);
    return 0;
}

/* A row of the table, and its figures for the results file. */
static void copy_row(mem_env_t *env, bench_table_t *t, const char *what, size_t n,
                     const copy_figures_t *f)
{
    char measurement[48];
    snprintf(measurement, sizeof(measurement), "copy %s", what);
    bench_figure_simple(env->name, measurement, n, "hal", f->hal_gbps, "GB/s", "median");
    bench_figure_simple(env->name, measurement, n, "memcpy", f->plain_gbps, "GB/s", "median");
    bench_figure_simple(env->name, measurement, n, "hal", f->ratio, "x", "median ratio");
    bench_figure_simple(env->name, measurement, n, "hal", f->rmin, "x", "min ratio");
    bench_figure_simple(env->name, measurement, n, "hal", f->rmax, "x", "max ratio");
    int row = bench_table_row(t);
    bench_table_cell(t, row, 0, "%s", size_str(n));
    bench_table_cell(t, row, 1, "%s", what);
    bench_table_cell(t, row, 2, "%llu", (unsigned long long)f->k);
    bench_table_cell(t, row, 3, "%d", f->reps);
    bench_table_cell(t, row, 4, "%.2f", f->hal_gbps);
    bench_table_cell(t, row, 5, "%.2f", f->plain_gbps);
    bench_table_cell(t, row, 6, "%.3f", f->ratio);
    bench_table_cell(t, row, 7, "%.2f-%.2f", f->rmin, f->rmax);
}

void copy_targets_failed(mem_env_t *env, size_t from_index, bench_verdict_t verdict)
{
    for (size_t i = from_index; i < COUNT_OF(copy_sizes); i++) {
        if (copy_sizes[i] >= COPY_TARGET_FROM)
            bench_target_add(env->targets, verdict, NULL, "%s: copy %s HAL/memcpy >= %.2fx",
                             env->name, size_str(copy_sizes[i]), COPY_TARGET_RATIO);
    }
}

/* Device memory the host can address: device-to-device copies against memcpy of the same
 * buffers, with the target. */
static int copy_host_addressable(mem_env_t *env, bench_table_t *t, size_t *done)
{
    size_t max = copy_sizes[COUNT_OF(copy_sizes) - 1];
    void *src = NULL, *dst = NULL;
    hal_status_t st;
    int rc = -1;
    BENCH_HAL_CHECK_GOTO(hal_mem_alloc(env->device, HAL_MEM_KIND_DEVICE, max, 0, &src), out);
    BENCH_HAL_CHECK_GOTO(hal_mem_alloc(env->device, HAL_MEM_KIND_DEVICE, max, 0, &dst), out);
    /* Fault every page in before timing anything. */
    BENCH_HAL_CHECK_GOTO(hal_memset_async(src, 0x5a, max, env->stream), out);
    BENCH_HAL_CHECK_GOTO(hal_memset_async(dst, 0, max, env->stream), out);
    BENCH_HAL_CHECK_GOTO(hal_stream_synchronize(env->stream), out);
    for (*done = 0; *done < COUNT_OF(copy_sizes); (*done)++) {
        size_t n = copy_sizes[*done];
        copy_ctx_t c = { .dst = dst,
                         .src = src,
                         .plain_dst = dst,
                         .plain_src = src,
                         .n = n,
                         .stream = env->stream };
        copy_figures_t f;
        bench_progress("[%s]     copy %s", env->name, size_str(n));
        if (measure_copy(env, &c, &f) != 0)
            goto out;
        if (((const unsigned char *)dst)[n - 1] != 0x5a) {
            fprintf(stderr, "hal-bench: error: hal_memcpy_async of %s did not copy the data\n",
                    size_str(n));
            goto out;
        }
        copy_row(env, t, "device to device", n, &f);
        int row = t->nrows - 1;
        if (n >= COPY_TARGET_FROM) {
            bool met = f.ratio >= COPY_TARGET_RATIO;
            bench_table_cell(t, row, 8, ">= %.2fx: %s", COPY_TARGET_RATIO, met ? "met" : "MISSED");
            char detail[64];
            snprintf(detail, sizeof(detail), "%.3fx: %.2f vs %.2f GB/s", f.ratio, f.hal_gbps,
                     f.plain_gbps);
            bench_target_add(env->targets, met ? BENCH_MET : BENCH_MISSED, detail,
                             "%s: copy %s HAL/memcpy >= %.2fx", env->name, size_str(n),
                             COPY_TARGET_RATIO);
            bench_target_values(env->targets, f.ratio, ">=", COPY_TARGET_RATIO, "x");
        } else {
            bench_table_cell(t, row, 8, "(none)");
        }
    }
    rc = 0;
out:
    if (dst && (st = hal_mem_free(dst)) != HAL_OK) {
        bench_hal_error(st, "hal_mem_free");
        rc = -1;
    }
    if (src && (st = hal_mem_free(src)) != HAL_OK) {
        bench_hal_error(st, "hal_mem_free");
        rc = -1;
    }
    return rc;
}

/* Device memory the host cannot address (the runtime copies through its own calls): copies in
 * and out of pinned host memory and within the device, each against a memcpy between two pinned
 * buffers of the same size, the copy a host-addressable device would make. The ratio is the cost
 * of the runtime path (the backend's worker thread, its address map, the runtime's calls); there
 * is no target for it. */
static int copy_staged(mem_env_t *env, bench_table_t *t, size_t *done)
{
    size_t max = copy_sizes[COUNT_OF(copy_sizes) - 1];
    void *dev_a = NULL, *dev_b = NULL, *host_a = NULL, *host_b = NULL;
    void **bufs[] = { &host_b, &host_a, &dev_b, &dev_a }; /* freed in this order */
    int rc = -1;
    BENCH_HAL_CHECK_GOTO(hal_mem_alloc(env->device, HAL_MEM_KIND_DEVICE, max, 0, &dev_a), out);
    BENCH_HAL_CHECK_GOTO(hal_mem_alloc(env->device, HAL_MEM_KIND_DEVICE, max, 0, &dev_b), out);
    BENCH_HAL_CHECK_GOTO(hal_mem_alloc(env->device, HAL_MEM_KIND_HOST_PINNED, max, 0, &host_a),
                         out);
    BENCH_HAL_CHECK_GOTO(hal_mem_alloc(env->device, HAL_MEM_KIND_HOST_PINNED, max, 0, &host_b),
                         out);
    memset(host_a, 0x5a, max);
    memset(host_b, 0, max);
    BENCH_HAL_CHECK_GOTO(hal_memset_async(dev_a, 0x5a, max, env->stream), out);
    BENCH_HAL_CHECK_GOTO(hal_memset_async(dev_b, 0, max, env->stream), out);
    BENCH_HAL_CHECK_GOTO(hal_stream_synchronize(env->stream), out);
    static const char *const what[] = { "host to device", "device to host", "device to device" };
    for (*done = 0; *done < COUNT_OF(copy_sizes); (*done)++) {
        size_t n = copy_sizes[*done];
        void *dsts[] = { dev_a, host_b, dev_b };
        const void *srcs[] = { host_a, dev_a, dev_a };
        for (size_t d = 0; d < COUNT_OF(what); d++) {
            copy_ctx_t c = { .dst = dsts[d],
                             .src = srcs[d],
                             .plain_dst = host_b,
                             .plain_src = host_a,
                             .n = n,
                             .stream = env->stream };
            copy_figures_t f;
            bench_progress("[%s]     copy %s %s", env->name, size_str(n), what[d]);
            if (measure_copy(env, &c, &f) != 0)
                goto out;
            copy_row(env, t, what[d], n, &f);
            bench_table_cell(t, t->nrows - 1, 8, "(none)");
        }
    }
    rc = 0;
out:
    for (size_t i = 0; i < COUNT_OF(bufs); i++) {
        hal_status_t st;
        if (*bufs[i] && (st = hal_mem_free(*bufs[i])) != HAL_OK) {
            bench_hal_error(st, "hal_mem_free");
            rc = -1;
        }
    }
    return rc;
}

int bench_copy(mem_env_t *env)
{
    size_t done = 0;
    size_t max = copy_sizes[COUNT_OF(copy_sizes) - 1];
    bool direct = env->props.host_addressable;
    bench_table_t t;
    bench_table_init(&t, "size", "copy", "copies (K)", "repeats", "HAL GB/s", "memcpy GB/s",
                     "HAL/memcpy", "range", "target", NULL);

    bench_progress("[%s] 3/4 copy bandwidth, %s .. %s", env->name, size_str(copy_sizes[0]),
                   size_str(max));
    if (direct)
        printf("\n[3] Device-to-device copy bandwidth on device 0 (GB/s, 1 GB = 1e9 bytes "
               "copied)\n"
               "    HAL: K hal_memcpy_async back to back, then one hal_stream_synchronize;\n"
               "    memcpy: the same buffers, K copies in the calling thread. Repeats alternate "
               "the two;\n");
    else
        printf("\n[3] Copy bandwidth on device 0, whose memory the host cannot address (GB/s, "
               "1 GB = 1e9 bytes)\n"
               "    HAL: K hal_memcpy_async back to back (pinned host <-> device, device <-> "
               "device),\n"
               "    then one hal_stream_synchronize; memcpy: K copies between two pinned host "
               "buffers,\n"
               "    what a host-addressable device would do; HAL/memcpy is the runtime path's "
               "cost (no target).\n"
               "    Repeats alternate the two;\n");
    printf("    GB/s are medians, HAL/memcpy is the median (range: min-max) of the per-repeat "
           "ratios\n");
    int rc = direct ? copy_host_addressable(env, &t, &done) : copy_staged(env, &t, &done);
    if (t.nrows)
        bench_table_print(&t);
    if (!direct)
        copy_targets_failed(env, 0, BENCH_NA); /* the targets are about host-addressable memory */
    else if (rc != 0)
        copy_targets_failed(env, done, BENCH_FAILED);
    return rc;
}
