/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench part "cuda": the cuda backend against raw CUDA and raw NCCL, in the same run, on
 * the same buffers (the HAL's device and pinned allocations are plain CUDA allocations, so the
 * raw side uses them as they are).
 *
 * The raw side calls the CUDA runtime the backend uses: it loads libcudart the way the backend
 * does ($HAL_CUDA_LIBCUDART, else libcudart.so.<major>, else the toolkit location), which the
 * dynamic loader resolves to the same, already loaded library, and calls it through pointers
 * from dlsym, as a program linked to the runtime calls it through its PLT. NCCL likewise
 * ($HAL_NCCL_LIBRARY, else libnccl.so.2).
 *
 * Measurements (device 0, one HAL stream and one raw non-blocking stream of the same priority):
 *   1. memcpy bandwidth H2D (pinned), D2H (pinned), D2D at 64 KiB .. 256 MiB: K copies back to
 *      back, one synchronize, wall-clock time (which includes what enqueueing costs); the two
 *      sides alternate repeat by repeat; the ratio is the median of per-repeat ratios.
 *      Target: HAL >= 0.97x raw at 1 MiB and above (below, one call's cost dominates).
 *   2. event record + query on an idle stream, per pair. Target: <= 1 us more than raw.
 *   3. stream synchronize: of an idle stream, and a 1-byte memset + synchronize round trip.
 *      Target: <= 1 us more than raw (minima of the repeats).
 *   4. allreduce (f32, sum, out of place) through the HAL's native NCCL communicator against
 *      ncclAllReduce on a communicator of NCCL's own: one GPU, so one rank (NCCL's one-rank
 *      allreduce is a device-local copy: this measures what the HAL adds per call, not the
 *      interconnect). Targets: >= 0.97x at 1 MiB and 64 MiB; <= 1 us more at 8 B. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#if HAL_BENCH_WITH_NCCL
#include <nccl.h>
#endif

#include "bench/bench_parts.h"
#include "bench/bench_results.h"

/* ---- the raw runtime ------------------------------------------------------------------------- */

typedef struct raw_cuda {
    cudaError_t (*SetDevice)(int);
    cudaError_t (*DriverGetVersion)(int *);
    cudaError_t (*RuntimeGetVersion)(int *);
    cudaError_t (*StreamCreateWithPriority)(cudaStream_t *, unsigned int, int);
    cudaError_t (*StreamDestroy)(cudaStream_t);
    cudaError_t (*StreamSynchronize)(cudaStream_t);
    cudaError_t (*EventCreateWithFlags)(cudaEvent_t *, unsigned int);
    cudaError_t (*EventDestroy)(cudaEvent_t);
    cudaError_t (*EventRecord)(cudaEvent_t, cudaStream_t);
    cudaError_t (*EventQuery)(cudaEvent_t);
    cudaError_t (*MemcpyAsync)(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
    cudaError_t (*MemsetAsync)(void *, int, size_t, cudaStream_t);
    const char *(*GetErrorName)(cudaError_t);
} raw_cuda_t;

static const char *const raw_names[] = {
    "cudaSetDevice",
    "cudaDriverGetVersion",
    "cudaRuntimeGetVersion",
    "cudaStreamCreateWithPriority",
    "cudaStreamDestroy",
    "cudaStreamSynchronize",
    "cudaEventCreateWithFlags",
    "cudaEventDestroy",
    "cudaEventRecord",
    "cudaEventQuery",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
    "cudaGetErrorName",
};

#define RAW_COUNT (sizeof(raw_names) / sizeof(raw_names[0]))
_Static_assert(sizeof(raw_cuda_t) == RAW_COUNT * sizeof(void (*)(void)), "raw_cuda_t layout");

static void *open_first(const char *env, const char *const *names, size_t n, char *path,
                        size_t size)
{
    const char *chosen = getenv(env);
    if (chosen != NULL && chosen[0] != '\0') {
        snprintf(path, size, "%s", chosen);
        return dlopen(chosen, RTLD_NOW | RTLD_LOCAL);
    }
    for (size_t i = 0; i < n; i++) {
        void *dl = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (dl != NULL) {
            snprintf(path, size, "%s", names[i]);
            return dl;
        }
    }
    return NULL;
}

static bool resolve_all(void *dl, const char *const *names, size_t n, void (**out)(void))
{
    for (size_t i = 0; i < n; i++) {
        void *p = dlsym(dl, names[i]);
        if (p == NULL) {
            fprintf(stderr, "hal-bench: cuda: %s is missing\n", names[i]);
            return false;
        }
        memcpy(&out[i], &p, sizeof(p));
    }
    return true;
}

static bool raw_load(raw_cuda_t *cu)
{
    char soname[32], lib64[64];
    snprintf(soname, sizeof(soname), "libcudart.so.%d", CUDART_VERSION / 1000);
    snprintf(lib64, sizeof(lib64), "/usr/local/cuda/lib64/%s", soname);
    const char *const names[] = { soname, lib64 };
    char path[4096] = "";
    void *dl = open_first("HAL_CUDA_LIBCUDART", names, 2, path, sizeof(path));
    if (dl == NULL) {
        fprintf(stderr, "hal-bench: cuda: cannot load the CUDA runtime (%s): %s\n", path,
                dlerror());
        return false;
    }
    return resolve_all(dl, raw_names, RAW_COUNT, (void (**)(void))cu);
}

static bool hal_ok(hal_status_t st, const char *what)
{
    if (st == HAL_OK)
        return true;
    bench_hal_error(st, what);
    return false;
}

static bool cu_ok(const raw_cuda_t *cu, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return true;
    fprintf(stderr, "hal-bench: cuda: %s returned %s (%d)\n", what, cu->GetErrorName(e), (int)e);
    return false;
}

/* ---- the NVIDIA driver's version (NVML), when the machine has it ----------------------------- */

static void driver_version(char *out, size_t size)
{
    snprintf(out, size, "unknown (no NVML)");
    void *dl = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL)
        return;
    int (*init)(void), (*shutdown)(void), (*version)(char *, unsigned int);
    void *a = dlsym(dl, "nvmlInit_v2"), *b = dlsym(dl, "nvmlShutdown"),
         *c = dlsym(dl, "nvmlSystemGetDriverVersion");
    memcpy(&init, &a, sizeof(a));
    memcpy(&shutdown, &b, sizeof(b));
    memcpy(&version, &c, sizeof(c));
    char buf[96];
    if (init != NULL && version != NULL && init() == 0) {
        if (version(buf, sizeof(buf)) == 0)
            snprintf(out, size, "%s", buf);
        if (shutdown != NULL)
            shutdown();
    }
    dlclose(dl);
}

/* ---- state of the part ----------------------------------------------------------------------- */

typedef struct cuda_bench {
    const bench_options_t *opts;
    raw_cuda_t cu;
    hal_backend_t backend;
    hal_device_t dev;
    hal_stream_t s;   /* the HAL's stream */
    cudaStream_t rs;  /* raw stream, same priority */
    size_t max_bytes; /* largest copy */
    void *d_a, *d_b;  /* device buffers of max_bytes */
    void *h_a;        /* pinned buffer of max_bytes */
    int repeats;
    bench_targets_t *targets;
} cuda_bench_t;

/* ---- 1. copy bandwidth ------------------------------------------------------------------------
 */

typedef struct copy_case {
    const char *name;
    const char *measurement; /* in the results file, as part mem names its copies */
    void *dst;
    const void *src;
} copy_case_t;

static bool time_copies(cuda_bench_t *b, bool hal, void *dst, const void *src, size_t n, int k,
                        uint64_t *ns)
{
    uint64_t t0 = bench_now_ns();
    if (hal) {
        for (int i = 0; i < k; i++) {
            if (!hal_ok(hal_memcpy_async(dst, src, n, b->s), "hal_memcpy_async"))
                return false;
        }
        if (!hal_ok(hal_stream_synchronize(b->s), "hal_stream_synchronize"))
            return false;
    } else {
        for (int i = 0; i < k; i++)
            if (!cu_ok(&b->cu, b->cu.MemcpyAsync(dst, src, n, cudaMemcpyDefault, b->rs),
                       "cudaMemcpyAsync"))
                return false;
        if (!cu_ok(&b->cu, b->cu.StreamSynchronize(b->rs), "cudaStreamSynchronize"))
            return false;
    }
    *ns = bench_now_ns() - t0;
    return true;
}

static int bench_copies(cuda_bench_t *b)
{
    const copy_case_t cases[] = {
        { "H2D", "copy host to device", b->d_a, b->h_a },
        { "D2H", "copy device to host", b->h_a, b->d_a },
        { "D2D", "copy device to device", b->d_b, b->d_a },
    };
    const size_t sizes[] = { (size_t)64 << 10, (size_t)1 << 20, (size_t)16 << 20,
                             (size_t)256 << 20 };
    const uint64_t sample_ns = b->opts->quick ? 2000000u : 10000000u;
    int rc = 0;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        bench_table_t t;
        bench_table_init(&t, "size", "HAL GB/s", "CUDA GB/s", "HAL/CUDA", "range", "copies", NULL);
        printf("\nmemcpy %s (%s), %d repeats, K copies back to back + one synchronize:\n",
               cases[c].name,
               c == 0   ? "pinned host to device"
               : c == 1 ? "device to pinned host"
                        : "device to device",
               b->repeats);
        for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
            size_t n = sizes[z];
            if (n > b->max_bytes)
                continue;
            char sz[32];
            bench_fmt_size(sz, sizeof(sz), n);
            bench_progress("cuda: memcpy %s %s", cases[c].name, sz);
            /* Warm up both paths, then size K on the raw side. */
            uint64_t ns = 0;
            if (!time_copies(b, true, cases[c].dst, cases[c].src, n, 2, &ns) ||
                !time_copies(b, false, cases[c].dst, cases[c].src, n, 2, &ns)) {
                rc = 1;
                break;
            }
            int k = (int)(sample_ns / (ns / 2 + 1));
            k = k < 1 ? 1 : k > 20000 ? 20000 : k;
            double ratio[64], gh[64], gr[64];
            int reps = b->repeats;
            bool ok = true;
            for (int r = 0; r < reps && ok; r++) {
                uint64_t th = 0, tr = 0;
                if (r % 2 == 0)
                    ok = time_copies(b, true, cases[c].dst, cases[c].src, n, k, &th) &&
                         time_copies(b, false, cases[c].dst, cases[c].src, n, k, &tr);
                else
                    ok = time_copies(b, false, cases[c].dst, cases[c].src, n, k, &tr) &&
                         time_copies(b, true, cases[c].dst, cases[c].src, n, k, &th);
                gh[r] = (double)n * k / (double)th;
                gr[r] = (double)n * k / (double)tr;
                ratio[r] = (double)tr / (double)th;
            }
            int row = bench_table_row(&t);
            if (!ok) {
                rc = 1;
                bench_table_cell(&t, row, 0, "%s", sz);
                bench_table_cell(&t, row, 1, "failed");
                if (n >= ((size_t)1 << 20))
                    bench_target_add(b->targets, BENCH_FAILED, "no result",
                                     "cuda: memcpy %s %s >= 0.97x raw CUDA", cases[c].name, sz);
                continue;
            }
            double lo = bench_min(ratio, (size_t)reps), hi = ratio[0];
            for (int r = 1; r < reps; r++)
                hi = ratio[r] > hi ? ratio[r] : hi;
            double med = bench_median(ratio, (size_t)reps);
            double mh = bench_median(gh, (size_t)reps), mr = bench_median(gr, (size_t)reps);
            bench_table_cell(&t, row, 0, "%s", sz);
            bench_table_cell(&t, row, 1, "%.2f", mh);
            bench_table_cell(&t, row, 2, "%.2f", mr);
            bench_table_cell(&t, row, 3, "%.3f", med);
            bench_table_cell(&t, row, 4, "%.3f-%.3f", lo, hi);
            bench_table_cell(&t, row, 5, "%d", k);
            const char *what = cases[c].measurement;
            bench_figure_simple("cuda", what, n, "hal", mh, "GB/s", "median");
            bench_figure_simple("cuda", what, n, "CUDA", mr, "GB/s", "median");
            bench_figure_simple("cuda", what, n, "hal", med, "x", "median ratio");
            bench_figure_simple("cuda", what, n, "hal", lo, "x", "min ratio");
            bench_figure_simple("cuda", what, n, "hal", hi, "x", "max ratio");
            if (n >= ((size_t)1 << 20)) {
                char detail[BENCH_TARGET_DETAIL_MAX];
                snprintf(detail, sizeof(detail), "%.3fx: %.2f vs %.2f GB/s", med, mh, mr);
                bench_target_add(b->targets, med >= 0.97 ? BENCH_MET : BENCH_MISSED, detail,
                                 "cuda: memcpy %s %s >= 0.97x raw CUDA", cases[c].name, sz);
                bench_target_values(b->targets, med, ">=", 0.97, "x");
            }
        }
        bench_table_print(&t);
    }
    return rc;
}

/* ---- 2, 3. latencies ---------------------------------------------------------------------------
 */

typedef enum lat_kind { LAT_EVENT, LAT_SYNC_IDLE, LAT_ROUND_TRIP } lat_kind_t;

typedef struct lat_ctx {
    cuda_bench_t *b;
    lat_kind_t kind;
    bool hal;
    hal_event_t he;
    cudaEvent_t re;
    bool failed;
} lat_ctx_t;

static uint64_t lat_loop(void *p, uint64_t iters)
{
    lat_ctx_t *c = p;
    cuda_bench_t *b = c->b;
    const raw_cuda_t *cu = &b->cu;
    unsigned sum = 0;
    uint64_t t0 = bench_now_ns();
    for (uint64_t i = 0; i < iters; i++) {
        switch (c->kind) {
        case LAT_EVENT:
            if (c->hal) {
                sum += (unsigned)hal_event_record(c->he, b->s);
                hal_status_t q = hal_event_query(c->he);
                sum += q == HAL_OK || q == HAL_NOT_READY ? 0u : 1u;
            } else {
                sum += (unsigned)cu->EventRecord(c->re, b->rs);
                cudaError_t q = cu->EventQuery(c->re);
                sum += q == cudaSuccess || q == cudaErrorNotReady ? 0u : 1u;
            }
            break;
        case LAT_SYNC_IDLE:
            sum += c->hal ? (unsigned)hal_stream_synchronize(b->s)
                          : (unsigned)cu->StreamSynchronize(b->rs);
            break;
        case LAT_ROUND_TRIP:
            if (c->hal) {
                sum += (unsigned)hal_memset_async(b->d_b, 0, 1, b->s);
                sum += (unsigned)hal_stream_synchronize(b->s);
            } else {
                sum += (unsigned)cu->MemsetAsync(b->d_b, 0, 1, b->rs);
                sum += (unsigned)cu->StreamSynchronize(b->rs);
            }
            break;
        }
    }
    uint64_t ns = bench_now_ns() - t0;
    BENCH_KEEP(sum);
    if (sum != 0)
        c->failed = true;
    return ns;
}

static int bench_latencies(cuda_bench_t *b)
{
    static const struct {
        lat_kind_t kind;
        const char *name, *what;
    } kinds[] = {
        { LAT_EVENT, "event record + query", "hal_event_record + hal_event_query" },
        { LAT_SYNC_IDLE, "stream synchronize (idle)", "hal_stream_synchronize, nothing queued" },
        { LAT_ROUND_TRIP, "memset 1 B + synchronize", "enqueue-to-completion round trip" },
    };
    const raw_cuda_t *cu = &b->cu;
    lat_ctx_t hal = { .b = b, .hal = true }, raw = { .b = b, .hal = false };
    int rc = 0;
    if (!hal_ok(hal_event_create(b->dev, HAL_EVENT_FLAG_NONE, &hal.he), "hal_event_create") ||
        !cu_ok(cu, cu->EventCreateWithFlags(&raw.re, cudaEventDisableTiming),
               "cudaEventCreateWithFlags"))
        return 1;
    bench_table_t t;
    bench_table_init(&t, "call", "HAL min us", "CUDA min us", "HAL p50 us", "CUDA p50 us",
                     "extra us", NULL);
    const uint64_t target_ns = b->opts->quick ? 2000000u : 20000000u;
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        bench_progress("cuda: %s", kinds[k].name);
        hal.kind = raw.kind = kinds[k].kind;
        lat_loop(&hal, 200);
        lat_loop(&raw, 200);
        uint64_t iters = bench_calibrate(lat_loop, &raw, target_ns, 100, 10000000);
        double sh[64], sr[64];
        int reps = b->repeats;
        for (int r = 0; r < reps; r++) {
            uint64_t th, tr;
            if (r % 2 == 0) {
                th = lat_loop(&hal, iters);
                tr = lat_loop(&raw, iters);
            } else {
                tr = lat_loop(&raw, iters);
                th = lat_loop(&hal, iters);
            }
            sh[r] = (double)th / (double)iters / 1000.0;
            sr[r] = (double)tr / (double)iters / 1000.0;
        }
        double hmin = bench_min(sh, (size_t)reps), rmin = bench_min(sr, (size_t)reps);
        double hmed = bench_median(sh, (size_t)reps), rmed = bench_median(sr, (size_t)reps);
        double extra = hmin - rmin;
        int row = bench_table_row(&t);
        bench_table_cell(&t, row, 0, "%s", kinds[k].name);
        bench_table_cell(&t, row, 1, "%.3f", hmin);
        bench_table_cell(&t, row, 2, "%.3f", rmin);
        bench_table_cell(&t, row, 3, "%.3f", hmed);
        bench_table_cell(&t, row, 4, "%.3f", rmed);
        bench_table_cell(&t, row, 5, "%+.3f", extra);
        bench_figure_simple("cuda", kinds[k].name, 0, "hal", hmin, "us", "min");
        bench_figure_simple("cuda", kinds[k].name, 0, "CUDA", rmin, "us", "min");
        bench_figure_simple("cuda", kinds[k].name, 0, "hal", hmed, "us", "median");
        bench_figure_simple("cuda", kinds[k].name, 0, "CUDA", rmed, "us", "median");
        char detail[BENCH_TARGET_DETAIL_MAX];
        snprintf(detail, sizeof(detail), "%+.3f us: %.3f vs %.3f us", extra, hmin, rmin);
        bench_verdict_t v = hal.failed || raw.failed ? BENCH_FAILED
                            : extra <= 1.0           ? BENCH_MET
                                                     : BENCH_MISSED;
        if (v == BENCH_FAILED) {
            fprintf(stderr, "hal-bench: cuda: %s: a call failed during the timed loop\n",
                    kinds[k].what);
            rc = 1;
        }
        bench_target_add(b->targets, v, detail, "cuda: %s <= 1 us over raw CUDA", kinds[k].name);
        if (v != BENCH_FAILED)
            bench_target_values(b->targets, extra, "<=", 1.0, "us");
        hal.failed = raw.failed = false;
    }
    printf("\nlatency per call (%s), %d repeats, minima and medians of the repeats' means:\n",
           "same stream priority, the stream otherwise idle", b->repeats);
    bench_table_print(&t);
    hal_event_destroy(hal.he);
    cu->EventDestroy(raw.re);
    return rc;
}

/* ---- 4. allreduce ------------------------------------------------------------------------------
 */

#if HAL_BENCH_WITH_NCCL
typedef struct raw_nccl {
    ncclResult_t (*GetVersion)(int *);
    ncclResult_t (*GetUniqueId)(ncclUniqueId *);
    ncclResult_t (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*CommDestroy)(ncclComm_t);
    ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                              cudaStream_t);
    const char *(*GetErrorString)(ncclResult_t);
} raw_nccl_t;

static const char *const nccl_names[] = {
    "ncclGetVersion",  "ncclGetUniqueId", "ncclCommInitRank",
    "ncclCommDestroy", "ncclAllReduce",   "ncclGetErrorString"
};
_Static_assert(sizeof(raw_nccl_t) ==
                   sizeof(nccl_names) / sizeof(nccl_names[0]) * sizeof(void (*)(void)),
               "raw_nccl_t layout");

static bool time_allreduce(cuda_bench_t *b, const raw_nccl_t *nc, ncclComm_t raw, hal_comm_t hc,
                           bool hal, size_t count, int k, uint64_t *ns)
{
    uint64_t t0 = bench_now_ns();
    for (int i = 0; i < k; i++) {
        if (hal) {
            if (!hal_ok(
                    hal_allreduce(b->d_a, b->d_b, count, HAL_DTYPE_F32, HAL_REDOP_SUM, hc, b->s),
                    "hal_allreduce"))
                return false;
        } else {
            ncclResult_t r = nc->AllReduce(b->d_a, b->d_b, count, ncclFloat32, ncclSum, raw, b->rs);
            if (r != ncclSuccess) {
                fprintf(stderr, "hal-bench: cuda: ncclAllReduce: %s\n", nc->GetErrorString(r));
                return false;
            }
        }
    }
    if (hal) {
        if (!hal_ok(hal_stream_synchronize(b->s), "hal_stream_synchronize"))
            return false;
    } else if (!cu_ok(&b->cu, b->cu.StreamSynchronize(b->rs), "cudaStreamSynchronize")) {
        return false;
    }
    *ns = bench_now_ns() - t0;
    return true;
}
#endif

static void allreduce_na(cuda_bench_t *b, const char *why)
{
    printf("\nallreduce: not measured: %s\n", why);
    const char *names[] = { "8 B <= 1 us over", "1 MiB >= 0.97x", "64 MiB >= 0.97x" };
    for (int i = 0; i < 3; i++)
        bench_target_add(b->targets, BENCH_NA, why, "cuda: allreduce %s raw NCCL", names[i]);
}

static int bench_allreduce(cuda_bench_t *b)
{
#if !HAL_BENCH_WITH_NCCL
    allreduce_na(b, "hal_bench was built without NCCL headers");
    return 0;
#else
    hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
    hal_device_get_properties(b->dev, &props);
    if (!(props.capabilities & HAL_DEVICE_CAP_NATIVE_COLLECTIVES)) {
        allreduce_na(b, "the backend has no native collectives (no NCCL loaded)");
        return 0;
    }
    raw_nccl_t nc;
    const char *const names[] = { "libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2" };
    char path[4096] = "";
    void *dl = open_first("HAL_NCCL_LIBRARY", names, 2, path, sizeof(path));
    if (dl == NULL || !resolve_all(dl, nccl_names, sizeof(nccl_names) / sizeof(nccl_names[0]),
                                   (void (**)(void)) & nc)) {
        allreduce_na(b, "cannot load NCCL for the raw side");
        return 1;
    }
    int version = 0;
    nc.GetVersion(&version);
    hal_unique_id_t id;
    hal_comm_t hc = NULL;
    ncclComm_t raw = NULL;
    ncclUniqueId rid;
    int rc = 0;
    if (!hal_ok(hal_comm_get_unique_id(0, &id), "hal_comm_get_unique_id") ||
        !hal_ok(hal_comm_init(&id, 1, 0, b->dev, NULL, &hc), "hal_comm_init")) {
        allreduce_na(b, "hal_comm_init failed");
        return 1;
    }
    uintptr_t native = 0;
    if (hal_comm_get_native_handle(hc, &native) != HAL_OK) {
        allreduce_na(b, "the HAL did not get a native NCCL communicator");
        hal_comm_destroy(hc);
        return 1;
    }
    b->cu.SetDevice(0);
    ncclResult_t r = nc.GetUniqueId(&rid);
    if (r == ncclSuccess)
        r = nc.CommInitRank(&raw, 1, rid, 0);
    if (r != ncclSuccess) {
        fprintf(stderr, "hal-bench: cuda: ncclCommInitRank: %s\n", nc.GetErrorString(r));
        allreduce_na(b, "ncclCommInitRank failed");
        hal_comm_destroy(hc);
        return 1;
    }
    printf("\nallreduce, f32 sum, out of place, 1 rank (one GPU: NCCL's one-rank allreduce is a "
           "device-local copy,\nso this is what the HAL adds per call), NCCL %d.%d.%d, %d "
           "repeats:\n",
           version / 10000, (version / 100) % 100, version % 100, b->repeats);
    bench_table_t t;
    bench_table_init(&t, "size", "HAL us/op", "NCCL us/op", "HAL/NCCL speed", "ops", NULL);
    const size_t sizes[] = { 8, (size_t)1 << 20, (size_t)64 << 20 };
    const uint64_t sample_ns = b->opts->quick ? 2000000u : 10000000u;
    for (size_t z = 0; z < 3; z++) {
        const char *tname = z == 0   ? "8 B <= 1 us over"
                            : z == 1 ? "1 MiB >= 0.97x"
                                     : "64 MiB >= 0.97x";
        if (sizes[z] > b->max_bytes) {
            bench_target_add(b->targets, BENCH_NA, "not in a --quick run",
                             "cuda: allreduce %s raw NCCL", tname);
            continue;
        }
        size_t count = sizes[z] / 4;
        char sz[32];
        bench_fmt_size(sz, sizeof(sz), sizes[z]);
        bench_progress("cuda: allreduce %s", sz);
        uint64_t ns = 0;
        bool ok = time_allreduce(b, &nc, raw, hc, true, count, 4, &ns) &&
                  time_allreduce(b, &nc, raw, hc, false, count, 4, &ns);
        int k = ok ? (int)(sample_ns / (ns / 4 + 1)) : 1;
        k = k < 1 ? 1 : k > 20000 ? 20000 : k;
        double th[64], tr[64], ratio[64];
        int reps = b->repeats;
        for (int i = 0; i < reps && ok; i++) {
            uint64_t a = 0, c = 0;
            if (i % 2 == 0)
                ok = time_allreduce(b, &nc, raw, hc, true, count, k, &a) &&
                     time_allreduce(b, &nc, raw, hc, false, count, k, &c);
            else
                ok = time_allreduce(b, &nc, raw, hc, false, count, k, &c) &&
                     time_allreduce(b, &nc, raw, hc, true, count, k, &a);
            th[i] = (double)a / k / 1000.0;
            tr[i] = (double)c / k / 1000.0;
            ratio[i] = (double)c / (double)a;
        }
        int row = bench_table_row(&t);
        bench_table_cell(&t, row, 0, "%s", sz);
        if (!ok) {
            rc = 1;
            bench_table_cell(&t, row, 1, "failed");
            bench_target_add(b->targets, BENCH_FAILED, "no result", "cuda: allreduce %s raw NCCL",
                             tname);
            continue;
        }
        double mh = bench_median(th, (size_t)reps), mr = bench_median(tr, (size_t)reps);
        double med = bench_median(ratio, (size_t)reps);
        bench_table_cell(&t, row, 1, "%.3f", mh);
        bench_table_cell(&t, row, 2, "%.3f", mr);
        bench_table_cell(&t, row, 3, "%.3f", med);
        bench_table_cell(&t, row, 4, "%d", k);
        bench_figure_t f = { .ranks = 1, .hosts = 1, .bytes = sizes[z] };
        snprintf(f.backend, sizeof(f.backend), "cuda");
        snprintf(f.measurement, sizeof(f.measurement), "time");
        snprintf(f.collective, sizeof(f.collective), "allreduce");
        snprintf(f.unit, sizeof(f.unit), "us");
        snprintf(f.statistic, sizeof(f.statistic), "median");
        snprintf(f.implementation, sizeof(f.implementation), "hal");
        f.value = mh;
        bench_figure_add(&f);
        snprintf(f.implementation, sizeof(f.implementation), "NCCL");
        f.value = mr;
        bench_figure_add(&f);
        char detail[BENCH_TARGET_DETAIL_MAX];
        if (z == 0) {
            double hmin = bench_min(th, (size_t)reps), rmin = bench_min(tr, (size_t)reps);
            snprintf(detail, sizeof(detail), "%+.3f us: %.3f vs %.3f us", hmin - rmin, hmin, rmin);
            bench_target_add(b->targets, hmin - rmin <= 1.0 ? BENCH_MET : BENCH_MISSED, detail,
                             "cuda: allreduce %s raw NCCL", tname);
            bench_target_values(b->targets, hmin - rmin, "<=", 1.0, "us");
        } else {
            snprintf(detail, sizeof(detail), "%.3fx: %.3f vs %.3f us/op", med, mh, mr);
            bench_target_add(b->targets, med >= 0.97 ? BENCH_MET : BENCH_MISSED, detail,
                             "cuda: allreduce %s raw NCCL", tname);
            bench_target_values(b->targets, med, ">=", 0.97, "x");
        }
    }
    bench_table_print(&t);
    nc.CommDestroy(raw);
    hal_comm_destroy(hc);
    return rc;
#endif
}

/* ---- the part ----------------------------------------------------------------------------------
 */

int bench_cuda_run(const bench_options_t *opts, const char *const *backends, int nbackends,
                   bench_targets_t *targets)
{
    (void)backends;
    (void)nbackends;
    cuda_bench_t b = { .opts = opts, .targets = targets };
    b.repeats = opts->quick ? 3 : 11;
    b.max_bytes = opts->quick ? (size_t)16 << 20 : (size_t)256 << 20;
    bench_load_t load;
    bench_load_begin_for(&load, "cuda", false);
    int rc = 1;
    printf("== part cuda: the cuda backend against raw CUDA and NCCL\n");
    if (!raw_load(&b.cu))
        goto out;
    hal_status_t st = hal_backend_open("cuda", &b.backend);
    if (st != HAL_OK) {
        bench_hal_error(st, "hal_backend_open(\"cuda\")");
        goto out;
    }
    BENCH_HAL_CHECK_GOTO(hal_device_get(b.backend, 0, &b.dev), out_close);
    hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
    BENCH_HAL_CHECK_GOTO(hal_device_get_properties(b.dev, &props), out_close);
    int drv = 0, rt = 0;
    b.cu.DriverGetVersion(&drv);
    b.cu.RuntimeGetVersion(&rt);
    char nvidia[96];
    driver_version(nvidia, sizeof(nvidia));
    printf("GPU: %s (device 0 of the cuda backend), %.1f GiB\n", props.name,
           (double)props.total_memory / (1u << 30));
    printf("driver: NVIDIA %s, CUDA driver API %d.%d; CUDA runtime %d.%d\n", nvidia, drv / 1000,
           (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
    printf("capabilities: 0x%llx (shared %s, IPC %s, native collectives %s, fp8 collectives %s)\n",
           (unsigned long long)props.capabilities,
           props.capabilities & HAL_DEVICE_CAP_SHARED_MEMORY ? "yes" : "no",
           props.capabilities & HAL_DEVICE_CAP_IPC ? "yes" : "no",
           props.capabilities & HAL_DEVICE_CAP_NATIVE_COLLECTIVES ? "yes" : "no",
           props.capabilities & HAL_DEVICE_CAP_FP8_COLLECTIVES ? "yes" : "no");
    BENCH_HAL_CHECK_GOTO(hal_stream_create(b.dev, 0, &b.s), out_close);
    b.cu.SetDevice(0);
    if (!cu_ok(&b.cu, b.cu.StreamCreateWithPriority(&b.rs, cudaStreamNonBlocking, 0),
               "cudaStreamCreateWithPriority"))
        goto out_close;
    BENCH_HAL_CHECK_GOTO(hal_mem_alloc(b.dev, HAL_MEM_KIND_DEVICE, b.max_bytes, 0, &b.d_a),
                         out_stream);
    BENCH_HAL_CHECK_GOTO(hal_mem_alloc(b.dev, HAL_MEM_KIND_DEVICE, b.max_bytes, 0, &b.d_b),
                         out_stream);
    BENCH_HAL_CHECK_GOTO(hal_mem_alloc(b.dev, HAL_MEM_KIND_HOST_PINNED, b.max_bytes, 0, &b.h_a),
                         out_stream);
    memset(b.h_a, 1, b.max_bytes);
    BENCH_HAL_CHECK_GOTO(hal_memset_async(b.d_a, 2, b.max_bytes, b.s), out_stream);
    BENCH_HAL_CHECK_GOTO(hal_memset_async(b.d_b, 3, b.max_bytes, b.s), out_stream);
    BENCH_HAL_CHECK_GOTO(hal_stream_synchronize(b.s), out_stream);
    rc = 0;
    rc |= bench_copies(&b);
    rc |= bench_latencies(&b);
    rc |= bench_allreduce(&b);
    printf("\n");
    bench_load_report(&load);
out_stream:
    hal_mem_free(b.h_a);
    hal_mem_free(b.d_b);
    hal_mem_free(b.d_a);
    if (b.rs != NULL)
        b.cu.StreamDestroy(b.rs);
    hal_stream_destroy(b.s);
out_close:
    hal_backend_close(b.backend);
out:
    if (rc != 0 && targets->count == 0)
        bench_target_add(targets, BENCH_FAILED, "no result", "cuda: the part ran");
    return rc;
}
