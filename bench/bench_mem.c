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
 * alternating order, repeat after repeat, so drift on a busy machine biases neither. */
#include <dlfcn.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_parts.h"
#include "bench/bench_util.h"
#include "hal/hal.h"
#include "hal/hal_backend_abi.h"

#define KIB ((size_t)1024)
#define MIB (KIB * 1024)

/* Targets. */
#define DISPATCH_TARGET_NS 2.0
#define LATENCY_TARGET_US  5.0
#define COPY_TARGET_RATIO  0.95
#define COPY_TARGET_FROM   MIB
#define ALLOC_TARGET_NS    50.0

static const size_t copy_sizes[] = { 4 * KIB, 64 * KIB, MIB, 16 * MIB, 256 * MIB };
static const size_t alloc_sizes[] = { 512, 4 * KIB, 64 * KIB, MIB, 16 * MIB };
#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

#define BENCH_COPY_MAX_REPEATS 64

/* Iteration plan of one run (full or --quick). */
typedef struct mem_plan {
    int dispatch_repeats;
    uint64_t dispatch_sample_ns; /* length of one timed loop */
    int latency_warmup, latency_samples;
    int copy_repeats, copy_repeats_large; /* large: >= 64 MiB */
    uint64_t copy_sample_ns;
    int alloc_repeats;
    uint64_t alloc_sample_ns;
} mem_plan_t;

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

/* The backend and device every section uses. */
typedef struct mem_env {
    const char *name;
    const mem_plan_t *plan;
    hal_backend_t backend;
    hal_device_t device;
    hal_device_properties_t props;
    hal_stream_t stream;
    bench_targets_t *targets;
} mem_env_t;

static const char *size_str(size_t bytes)
{
    static char buf[8][32];
    static int next;
    char *b = buf[next++ % 8];
    return bench_fmt_size(b, 32, bytes);
}

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

static int bench_dispatch(mem_env_t *env)
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
    bool met = overhead <= DISPATCH_TARGET_NS;
    printf("  overhead (from the minima) %.2f ns/call; target <= %.0f ns: %s\n", overhead,
           DISPATCH_TARGET_NS, met ? "met" : "MISSED");
    char detail[64];
    snprintf(detail, sizeof(detail), "%.2f ns", overhead);
    bench_target_add(env->targets, met ? BENCH_MET : BENCH_MISSED, detail,
                     "%s: dispatch overhead <= %.0f ns", env->name, DISPATCH_TARGET_NS);
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

/* ==== 2. enqueue-to-completion latency ======================================================= */

static int bench_latency(mem_env_t *env)
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
    bool met = s.p50 <= LATENCY_TARGET_US;
    printf("  p50 %.2f us, p99 %.2f us; target p50 <= %.0f us: %s\n", s.p50, s.p99,
           LATENCY_TARGET_US, met ? "met" : "MISSED");
    char detail[64];
    snprintf(detail, sizeof(detail), "p50 %.2f us, p99 %.2f us", s.p50, s.p99);
    bench_target_add(env->targets, met ? BENCH_MET : BENCH_MISSED, detail,
                     "%s: stream enqueue-to-completion p50 <= %.0f us", env->name,
                     LATENCY_TARGET_US);
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

static void copy_row(bench_table_t *t, const char *what, size_t n, const copy_figures_t *f)
{
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

static void copy_targets_failed(mem_env_t *env, size_t from_index, bench_verdict_t verdict)
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
        copy_row(t, "device to device", n, &f);
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
            copy_row(t, what[d], n, &f);
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

static int bench_copy(mem_env_t *env)
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

static void alloc_targets_failed(mem_env_t *env, size_t from_index)
{
    for (size_t i = from_index; i < COUNT_OF(alloc_sizes); i++) {
        bench_target_add(env->targets, BENCH_FAILED, NULL, "%s: allocator %s pair <= %.0f ns",
                         env->name, size_str(alloc_sizes[i]), ALLOC_TARGET_NS);
        bench_target_add(env->targets, BENCH_FAILED, NULL,
                         "%s: allocator %s pair faster than malloc+free", env->name,
                         size_str(alloc_sizes[i]));
    }
}

static int bench_allocator(mem_env_t *env)
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
        char detail[64];
        snprintf(detail, sizeof(detail), "%.1f ns", hal);
        bench_target_add(env->targets, met_abs ? BENCH_MET : BENCH_MISSED, detail,
                         "%s: allocator %s pair <= %.0f ns", env->name, size_str(n),
                         ALLOC_TARGET_NS);
        snprintf(detail, sizeof(detail), "%.1f vs %.1f ns", hal, mal);
        bench_target_add(env->targets, met_rel ? BENCH_MET : BENCH_MISSED, detail,
                         "%s: allocator %s pair faster than malloc+free", env->name, size_str(n));
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
    bench_load_begin(&load);

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
