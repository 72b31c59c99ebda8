/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench part "mem", measurement 1: the dispatch overhead of the HAL's front end,
 * hal_event_query on a never-recorded event through the HAL vs the same backend slot called
 * directly (the library opened again with dlopen, its table initialised with minimal host
 * services). */
#include <dlfcn.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_mem.h"
#include "bench/bench_results.h"
#include "bench/bench_util.h"
#include "hal/hal.h"
#include "hal/hal_backend_abi.h"

/* ==== 1. dispatch overhead =================================================================== */

/* Host services for the directly initialised backend: a per-thread error buffer, printed when a
 * slot fails. */
static _Thread_local char direct_error[512];
static _Thread_local char direct_taken[512];

static void direct_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(direct_error, sizeof(direct_error), fmt, ap);
    va_end(ap);
}

static const char *direct_take_error(void)
{
    if (!direct_error[0])
        return NULL;
    memcpy(direct_taken, direct_error, sizeof(direct_taken));
    direct_error[0] = '\0';
    return direct_taken;
}

static const hal_host_services_t direct_host = {
    .struct_size = sizeof(hal_host_services_t),
    .api_version = HAL_API_VERSION,
    .set_error = direct_set_error,
    .take_error = direct_take_error,
};

typedef struct find_lib {
    char want[128]; /* "libhal_backend_<name>.so" */
    char path[4096];
} find_lib_t;

static int find_lib_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    find_lib_t *f = arg;
    const char *name = info->dlpi_name;
    if (!name || !*name)
        return 0;
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    if (strcmp(base, f->want) != 0)
        return 0;
    snprintf(f->path, sizeof(f->path), "%s", name);
    return 1;
}

typedef struct dispatch_ctx {
    hal_event_t event;                   /* the HAL's handle */
    hal_status_t (*const *slot)(void *); /* &ops->event_query of the direct instance */
    void *impl;                          /* the direct instance's event */
    unsigned bad;                        /* sum of statuses: must stay 0 (HAL_OK) */
} dispatch_ctx_t;

static __attribute__((noinline)) uint64_t loop_dispatch_hal(void *arg, uint64_t iters)
{
    dispatch_ctx_t *c = arg;
    hal_event_t event = c->event;
    unsigned acc = 0;
    uint64_t t0 = bench_now_ns();
    for (uint64_t i = 0; i < iters; i++)
        acc += (unsigned)hal_event_query(event);
    uint64_t t1 = bench_now_ns();
    c->bad += acc;
    return t1 - t0;
}

/* What a caller holding the backend's table does: load the slot, call it with the object. */
static __attribute__((noinline)) uint64_t loop_dispatch_direct(void *arg, uint64_t iters)
{
    dispatch_ctx_t *c = arg;
    hal_status_t (*const *slot)(void *) = c->slot;
    void *impl = c->impl;
    unsigned acc = 0;
    uint64_t t0 = bench_now_ns();
    for (uint64_t i = 0; i < iters; i++)
        acc += (unsigned)(*slot)(impl);
    uint64_t t1 = bench_now_ns();
    c->bad += acc;
    return t1 - t0;
}

int bench_dispatch(mem_env_t *env)
{
    const mem_plan_t *plan = env->plan;
    int rc = -1;
    hal_event_t event = NULL;
    void *dl = NULL, *be = NULL, *dev = NULL, *ev = NULL;
    const hal_backend_ops_t *ops = NULL;
    double *hal_ns = NULL, *direct_ns = NULL;

    bench_progress("[%s] 1/4 dispatch overhead", env->name);
    BENCH_HAL_CHECK_GOTO(hal_event_create(env->device, HAL_EVENT_FLAG_NONE, &event), out);

    /* Open exactly the library the HAL loaded and initialise a second, private instance. */
    find_lib_t f;
    memset(&f, 0, sizeof(f));
    snprintf(f.want, sizeof(f.want), "libhal_backend_%s.so", env->name);
    if (!dl_iterate_phdr(find_lib_cb, &f)) {
        fprintf(stderr, "hal-bench: error: %s is not among the loaded libraries\n", f.want);
        goto out;
    }
    dl = dlopen(f.path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        fprintf(stderr, "hal-bench: error: dlopen(%s): %s\n", f.path, dlerror());
        goto out;
    }
    hal_backend_entry_fn entry = (hal_backend_entry_fn)dlsym(dl, HAL_BACKEND_ENTRY_SYMBOL);
    if (!entry) {
        fprintf(stderr, "hal-bench: error: %s exports no %s\n", f.path, HAL_BACKEND_ENTRY_SYMBOL);
        goto out;
    }
    BENCH_HAL_CHECK_GOTO(entry(HAL_API_VERSION, &ops), out);
    if (!ops || ops->struct_size < offsetof(hal_backend_ops_t, event_elapsed_ms) || !ops->init ||
        !ops->device_open || !ops->event_create || !ops->event_query) {
        fprintf(stderr,
                "hal-bench: error: %s: its ops table lacks init, device_open, "
                "event_create or event_query\n",
                f.path);
        goto out;
    }
    hal_status_t st;
    if ((st = ops->init(&direct_host, &be)) != HAL_OK) {
        /* A backend over a process-wide runtime (the Neuron runtime is initialised once per
         * process) has no second instance to call directly. What is measured here is the HAL's
         * front end, the same for every backend: the other backends' figure stands for it. */
        printf("\n[1] HAL call dispatch: n/a: a second, private instance of the %s backend "
               "cannot be initialised\n    beside the HAL's (%s: %s);\n    the front end "
               "measured here is the same for every backend\n",
               env->name, hal_status_string(st), direct_error);
        bench_target_add(env->targets, BENCH_NA, NULL, "%s: dispatch overhead <= %.0f ns",
                         env->name, DISPATCH_TARGET_NS);
        be = NULL;
        rc = 0;
        goto out_release;
    }
    if ((st = ops->device_open(be, 0, &dev)) != HAL_OK) {
        fprintf(stderr, "hal-bench: error: direct %s device_open(0): %s: %s\n", env->name,
                hal_status_string(st), direct_error);
        dev = NULL;
        goto out;
    }
    if ((st = ops->event_create(dev, HAL_EVENT_FLAG_NONE, &ev)) != HAL_OK) {
        fprintf(stderr, "hal-bench: error: direct %s event_create: %s: %s\n", env->name,
                hal_status_string(st), direct_error);
        ev = NULL;
        goto out;
    }

    dispatch_ctx_t ctx = { .event = event, .slot = &ops->event_query, .impl = ev };
    int reps = plan->dispatch_repeats;
    hal_ns = calloc((size_t)reps, sizeof(double));
    direct_ns = calloc((size_t)reps, sizeof(double));
    if (!hal_ns || !direct_ns)
        goto out;
    /* Warm both paths, then size the loops on the direct one. */
    loop_dispatch_hal(&ctx, 100000);
    uint64_t iters = bench_calibrate(loop_dispatch_direct, &ctx, plan->dispatch_sample_ns, 100000,
                                     UINT64_C(1) << 32);
    for (int r = 0; r < reps; r++) {
        if (r % 2 == 0) {
            hal_ns[r] = (double)loop_dispatch_hal(&ctx, iters) / (double)iters;
            direct_ns[r] = (double)loop_dispatch_direct(&ctx, iters) / (double)iters;
        } else {
            direct_ns[r] = (double)loop_dispatch_direct(&ctx, iters) / (double)iters;
            hal_ns[r] = (double)loop_dispatch_hal(&ctx, iters) / (double)iters;
        }
    }
    if (ctx.bad != 0) {
        fprintf(stderr, "hal-bench: error: event query on a never-recorded event did not return "
                        "HAL_OK\n");
        goto out;
    }
    double hal_min = bench_min(hal_ns, (size_t)reps),
           direct_min = bench_min(direct_ns, (size_t)reps);
    double hal_med = bench_median(hal_ns, (size_t)reps);
    double direct_med = bench_median(direct_ns, (size_t)reps);
    double overhead = hal_min - direct_min;

    printf("\n[1] HAL call dispatch: hal_event_query on a never-recorded event vs the backend's "
           "event_query slot\n"
           "    called directly; %d interleaved repeats of %llu calls each\n",
           reps, (unsigned long long)iters);
    bench_table_t t;
    bench_table_init(&t, "path", "ns/call (min)", "ns/call (median)", NULL);
    int row = bench_table_row(&t);
    bench_table_cell(&t, row, 0, "direct ops->event_query");
    bench_table_cell(&t, row, 1, "%.2f", direct_min);
    bench_table_cell(&t, row, 2, "%.2f", direct_med);
    row = bench_table_row(&t);
    bench_table_cell(&t, row, 0, "hal_event_query");
    bench_table_cell(&t, row, 1, "%.2f", hal_min);
    bench_table_cell(&t, row, 2, "%.2f", hal_med);
    row = bench_table_row(&t);
    bench_table_cell(&t, row, 0, "HAL overhead");
    bench_table_cell(&t, row, 1, "%.2f", overhead);
    bench_table_cell(&t, row, 2, "%.2f", hal_med - direct_med);
    bench_table_print(&t);
    static const char *const what = "dispatch (event query)";
    bench_figure_simple(env->name, what, 0, "direct call", direct_min, "ns", "min");
    bench_figure_simple(env->name, what, 0, "direct call", direct_med, "ns", "median");
    bench_figure_simple(env->name, what, 0, "hal", hal_min, "ns", "min");
    bench_figure_simple(env->name, what, 0, "hal", hal_med, "ns", "median");
    bench_figure_simple(env->name, "dispatch overhead", 0, "hal", overhead, "ns", "min");
    bench_figure_simple(env->name, "dispatch overhead", 0, "hal", hal_med - direct_med, "ns",
                        "median");
    bool met = overhead <= DISPATCH_TARGET_NS;
    printf("  overhead (from the minima) %.2f ns/call; target <= %.0f ns: %s\n", overhead,
           DISPATCH_TARGET_NS, met ? "met" : "MISSED");
    char detail[64];
    snprintf(detail, sizeof(detail), "%.2f ns", overhead);
    bench_target_add(env->targets, met ? BENCH_MET : BENCH_MISSED, detail,
                     "%s: dispatch overhead <= %.0f ns", env->name, DISPATCH_TARGET_NS);
    bench_target_values(env->targets, overhead, "<=", DISPATCH_TARGET_NS, "ns");
    rc = 0;
out:
    if (rc != 0)
        bench_target_add(env->targets, BENCH_FAILED, NULL, "%s: dispatch overhead <= %.0f ns",
                         env->name, DISPATCH_TARGET_NS);
out_release:
    free(hal_ns);
    free(direct_ns);
    if (ev && ops->event_destroy)
        ops->event_destroy(ev);
    if (dev && ops->device_close)
        ops->device_close(dev);
    if (be && ops->fini)
        ops->fini(be);
    if (dl)
        dlclose(dl);
    if (event)
        hal_event_destroy(event);
    return rc;
}
