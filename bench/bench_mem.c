/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench part "mem": the cost of the HAL's front end and of its memory services.
 *
 *   1. dispatch  hal_event_query on a never-recorded event through the HAL vs the same backend
 *                slot called directly (the library opened with dlopen, its table initialised
 *                with minimal host services).                       target: overhead <= 2 ns
 *   2. latency   1-byte hal_memset_async + hal_stream_synchronize round trips.
 *                                                                    target: p50 <= 5 us
 *   3. copy      device-to-device copies, K enqueued back to back then one synchronize, vs
 *                memcpy of the same buffers K times in the calling thread.
 *                                                                    target: >= 0.95x at >= 1 MiB
 *                Where the host cannot address device memory: host-to-device, device-to-host
 *                and device-to-device copies vs memcpy between pinned host buffers (the cost of
 *                the runtime path; no target).
 *   4. allocator hal_allocator_alloc + hal_allocator_free (cache hits) vs malloc + free.
 *                                                                    target: <= 50 ns, < malloc
 *
 * Each figure is compared with its baseline in the same run; the two sides are measured in
 * alternating order, repeat after repeat, so drift on a busy machine biases neither.
 *
 * Files: this one runs the measurements on each backend; each measurement has its own file
 * (bench_mem_dispatch.c, bench_mem_latency.c, bench_mem_copy.c, bench_mem_alloc.c), and
 * bench_mem.h holds what they share. */
#include <stdio.h>
#include <stdlib.h>

#include "bench/bench_mem.h"
#include "bench/bench_parts.h"
#include "bench/bench_util.h"
#include "hal/hal.h"

static const mem_plan_t full_plan = {
    .dispatch_repeats = 15,
    .dispatch_sample_ns = 20000000,
    .latency_warmup = 2000,
    .latency_samples = 20000,
    .copy_repeats = 25,
    .copy_repeats_large = 15,
    .copy_sample_ns = 15000000,
    .alloc_repeats = 11,
    .alloc_sample_ns = 10000000,
};

static const mem_plan_t quick_plan = {
    .dispatch_repeats = 3,
    .dispatch_sample_ns = 2000000,
    .latency_warmup = 200,
    .latency_samples = 2000,
    .copy_repeats = 3,
    .copy_repeats_large = 1,
    .copy_sample_ns = 2000000,
    .alloc_repeats = 3,
    .alloc_sample_ns = 1000000,
};

/* ==== the part =============================================================================== */

static int run_backend(const char *name, const bench_options_t *opts, bench_targets_t *targets)
{
    mem_env_t env = {
        .name = name,
        .plan = opts->quick ? &quick_plan : &full_plan,
        .targets = targets,
    };
    int rc = 0;
    uint64_t t0 = bench_now_ns();
    int first_target = targets->count;
    bench_load_t load;
    bench_load_begin_for(&load, name, false);

    BENCH_HAL_CHECK_GOTO(hal_backend_open(name, &env.backend), out_fail);
    BENCH_HAL_CHECK_GOTO(hal_device_get(env.backend, 0, &env.device), out_close);
    env.props = (hal_device_properties_t)HAL_DEVICE_PROPERTIES_INIT;
    BENCH_HAL_CHECK_GOTO(hal_device_get_properties(env.device, &env.props), out_close);
    BENCH_HAL_CHECK_GOTO(hal_stream_create(env.device, 0, &env.stream), out_close);

    uint32_t version = 0;
    hal_get_api_version(&version);
    const char *layers = getenv("HAL_LAYERS");
    printf("== hal-bench mem: backend %s, device 0 \"%s\" (%shost-addressable), HAL %u.%u, %s "
           "run\n",
           name, env.props.name, env.props.host_addressable ? "" : "not ",
           HAL_VERSION_MAJOR(version), HAL_VERSION_MINOR(version),
           opts->quick ? "quick (indicative figures only)" : "full");
    if (layers && *layers)
        printf("   note: HAL_LAYERS=%s is set; the HAL figures include the layers' cost\n", layers);
    fflush(stdout);

    rc |= bench_dispatch(&env);
    fflush(stdout);
    rc |= bench_latency(&env);
    fflush(stdout);
    rc |= bench_copy(&env);
    fflush(stdout);
    rc |= bench_allocator(&env);
    printf("\n");
    bench_load_report(&load);
    fflush(stdout);

    hal_status_t st = hal_stream_destroy(env.stream);
    if (st != HAL_OK) {
        bench_hal_error(st, "hal_stream_destroy");
        rc = -1;
    }
    st = hal_backend_close(env.backend);
    if (st != HAL_OK) {
        bench_hal_error(st, "hal_backend_close");
        rc = -1;
    }
    bench_progress("[%s] mem part took %.1f s", name, (double)(bench_now_ns() - t0) / 1e9);
    return rc;

out_close:
    hal_backend_close(env.backend);
out_fail:
    /* Nothing was measured: every target of this backend is missed. */
    targets->count = first_target;
    bench_target_add(targets, BENCH_FAILED, NULL, "%s: dispatch overhead <= %.0f ns", name,
                     DISPATCH_TARGET_NS);
    bench_target_add(targets, BENCH_FAILED, NULL, "%s: stream enqueue-to-completion p50 <= %.0f us",
                     name, LATENCY_TARGET_US);
    env.targets = targets;
    copy_targets_failed(&env, 0, BENCH_FAILED);
    alloc_targets_failed(&env, 0);
    return -1;
}

int bench_mem_run(const bench_options_t *opts, const char *const *backends, int nbackends,
                  bench_targets_t *targets)
{
    int rc = 0;
    for (int i = 0; i < nbackends; i++) {
        if (run_backend(backends[i], opts, targets) != 0)
            rc = 1;
        if (i + 1 < nbackends)
            printf("\n");
    }
    return rc;
}
