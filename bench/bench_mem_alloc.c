/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench part "mem", measurement 4: the caching allocator, hal_allocator_alloc +
 * hal_allocator_free of one size on one stream (cache hits) vs malloc + free. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_mem.h"
#include "bench/bench_results.h"
#include "bench/bench_util.h"
#include "hal/hal.h"

static const size_t alloc_sizes[] = { 512, 4 * KIB, 64 * KIB, MIB, 16 * MIB };

/* ==== 4. caching allocator =================================================================== */

typedef struct alloc_ctx {
    hal_allocator_t allocator;
    hal_stream_t stream;
    size_t n;
    hal_status_t status;
    int malloc_failed;
} alloc_ctx_t;

static uint64_t loop_alloc_hal(void *arg, uint64_t iters)
{
    alloc_ctx_t *c = arg;
    hal_allocator_t a = c->allocator;
    hal_stream_t s = c->stream;
    size_t n = c->n;
    hal_status_t st = HAL_OK;
    uint64_t t0 = bench_now_ns();
    for (uint64_t i = 0; i < iters; i++) {
        void *p;
        st = hal_allocator_alloc(a, n, s, &p);
        if (st != HAL_OK)
            break;
        st = hal_allocator_free(a, p);
        if (st != HAL_OK)
            break;
    }
    uint64_t t1 = bench_now_ns();
    if (c->status == HAL_OK)
        c->status = st;
    return t1 - t0;
}

static uint64_t loop_alloc_malloc(void *arg, uint64_t iters)
{
    alloc_ctx_t *c = arg;
    size_t n = c->n;
    int failed = 0;
    uint64_t t0 = bench_now_ns();
    for (uint64_t i = 0; i < iters; i++) {
        void *p = malloc(n);
        BENCH_KEEP(p); /* the pair must not be optimised away */
        failed |= p == NULL;
        free(p);
    }
    uint64_t t1 = bench_now_ns();
    c->malloc_failed |= failed;
    return t1 - t0;
}

void alloc_targets_failed(mem_env_t *env, size_t from_index)
{
    for (size_t i = from_index; i < COUNT_OF(alloc_sizes); i++) {
        bench_target_add(env->targets, BENCH_FAILED, NULL, "%s: allocator %s pair <= %.0f ns",
                         env->name, size_str(alloc_sizes[i]), ALLOC_TARGET_NS);
        bench_target_add(env->targets, BENCH_FAILED, NULL,
                         "%s: allocator %s pair faster than malloc+free", env->name,
                         size_str(alloc_sizes[i]));
    }
}

int bench_allocator(mem_env_t *env)
{
    const mem_plan_t *plan = env->plan;
    int rc = -1;
    hal_allocator_t allocator = NULL;
    size_t done = 0;
    bench_table_t t;
    bench_table_init(&t, "size", "hal_allocator", "malloc", "HAL/malloc", "cache hits",
                     "target <= 50 ns", "target < malloc", NULL);

    bench_progress("[%s] 4/4 caching allocator", env->name);
    printf("\n[4] Caching allocator: hal_allocator_alloc + hal_allocator_free on one stream (cache "
           "hits after\n"
           "    warm-up) vs malloc + free of the same size, neither touched; ns per pair, median "
           "of interleaved repeats\n");
    BENCH_HAL_CHECK_GOTO(hal_allocator_create(env->device, NULL, &allocator), out);

    for (done = 0; done < COUNT_OF(alloc_sizes); done++) {
        size_t n = alloc_sizes[done];
        alloc_ctx_t c = { .allocator = allocator, .stream = env->stream, .n = n };
        int reps = plan->alloc_repeats;
        double hal_ns[32], malloc_ns[32];
        if (reps > 32)
            reps = 32;
        bench_progress("[%s]     allocator %s", env->name, size_str(n));

        /* Warm up: the first allocation makes the segment, the rest should be cache hits. */
        loop_alloc_hal(&c, 1000);
        loop_alloc_malloc(&c, 1000);
        uint64_t hal_iters =
            bench_calibrate(loop_alloc_hal, &c, plan->alloc_sample_ns, 1000, UINT64_C(1) << 30);
        uint64_t malloc_iters =
            bench_calibrate(loop_alloc_malloc, &c, plan->alloc_sample_ns, 1000, UINT64_C(1) << 30);
        if (c.status != HAL_OK) {
            bench_hal_error(c.status, "hal_allocator_alloc / hal_allocator_free");
            goto out;
        }
        hal_allocator_stats_t before = HAL_ALLOCATOR_STATS_INIT;
        hal_allocator_stats_t after = HAL_ALLOCATOR_STATS_INIT;
        BENCH_HAL_CHECK_GOTO(hal_allocator_get_stats(allocator, &before), out);
        for (int r = 0; r < reps; r++) {
            if (r % 2 == 0) {
                hal_ns[r] = (double)loop_alloc_hal(&c, hal_iters) / (double)hal_iters;
                malloc_ns[r] = (double)loop_alloc_malloc(&c, malloc_iters) / (double)malloc_iters;
            } else {
                malloc_ns[r] = (double)loop_alloc_malloc(&c, malloc_iters) / (double)malloc_iters;
                hal_ns[r] = (double)loop_alloc_hal(&c, hal_iters) / (double)hal_iters;
            }
        }
        if (c.status != HAL_OK) {
            bench_hal_error(c.status, "hal_allocator_alloc / hal_allocator_free");
            goto out;
        }
        if (c.malloc_failed) {
            fprintf(stderr, "hal-bench: error: malloc(%zu) failed\n", n);
            goto out;
        }
        BENCH_HAL_CHECK_GOTO(hal_allocator_get_stats(allocator, &after), out);
        uint64_t allocs = after.alloc_count - before.alloc_count;
        uint64_t hits = after.cache_hits - before.cache_hits;
        uint64_t segments = after.segment_alloc_count - before.segment_alloc_count;

        double hal = bench_median(hal_ns, (size_t)reps);
        double mal = bench_median(malloc_ns, (size_t)reps);
        bool met_abs = hal <= ALLOC_TARGET_NS, met_rel = hal < mal;
        int row = bench_table_row(&t);
        bench_table_cell(&t, row, 0, "%s", size_str(n));
        bench_table_cell(&t, row, 1, "%.1f", hal);
        bench_table_cell(&t, row, 2, "%.1f", mal);
        bench_table_cell(&t, row, 3, "%.2f", hal / mal);
        if (allocs)
            bench_table_cell(&t, row, 4, "%.1f%%", 100.0 * (double)hits / (double)allocs);
        else
            bench_table_cell(&t, row, 4, "?");
        bench_table_cell(&t, row, 5, "%s", met_abs ? "met" : "MISSED");
        bench_table_cell(&t, row, 6, "%s", met_rel ? "met" : "MISSED");
        if (segments)
            bench_progress("[%s]     note: %llu segment allocations during the timed %s loops "
                           "(not all cache hits)",
                           env->name, (unsigned long long)segments, size_str(n));
        bench_figure_simple(env->name, "allocator pair", n, "hal", hal, "ns", "median");
        bench_figure_simple(env->name, "allocator pair", n, "malloc", mal, "ns", "median");
        if (allocs)
            bench_figure_simple(env->name, "allocator cache hits", n, "hal",
                                100.0 * (double)hits / (double)allocs, "%", "total");
        char detail[64];
        snprintf(detail, sizeof(detail), "%.1f ns", hal);
        bench_target_add(env->targets, met_abs ? BENCH_MET : BENCH_MISSED, detail,
                         "%s: allocator %s pair <= %.0f ns", env->name, size_str(n),
                         ALLOC_TARGET_NS);
        bench_target_values(env->targets, hal, "<=", ALLOC_TARGET_NS, "ns");
        snprintf(detail, sizeof(detail), "%.1f vs %.1f ns", hal, mal);
        bench_target_add(env->targets, met_rel ? BENCH_MET : BENCH_MISSED, detail,
                         "%s: allocator %s pair faster than malloc+free", env->name, size_str(n));
        bench_target_values(env->targets, hal, "<", mal, "ns");
    }
    bench_table_print(&t);
    rc = 0;
out:
    if (rc != 0) {
        if (t.nrows)
            bench_table_print(&t);
        alloc_targets_failed(env, done);
    }
    if (allocator) {
        hal_status_t st = hal_allocator_destroy(allocator);
        if (st != HAL_OK) {
            bench_hal_error(st, "hal_allocator_destroy");
            rc = -1;
        }
    }
    return rc;
}
