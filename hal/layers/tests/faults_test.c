/* SPDX-License-Identifier: Apache-2.0 */
/* The fault-injection layer (HAL_LAYERS=faults) on the cpu backend, in one process: each fault
 * kind yields exactly its documented status, device loss is sticky, a failed stream latches and
 * reports through query, synchronize and event query, a collective timeout yields
 * HAL_ERROR_TIMEOUT (and HAL_ERROR_REMOTE on the peer), the same seed fails the same calls, a
 * malformed spec fails hal_backend_open naming the token, and a workload under several specs
 * neither crashes nor leaks (the sanitizer builds check the latter). Peer death kills a process:
 * faults_fork_test.c. */
#include "hal/layers/faults.h"
#include "hal/layers/tests/layer_test_util.h"

CTEST(faults, alloc_fails_with_out_of_device_memory_once)
{
    hal_backend_t b;
    hal_device_t d;
    void *p[4], *pinned;
    uint64_t before = hal_faults_injected(HAL_FAULT_ALLOC);
    CHECK_STATUS(lt_open("cpu", "faults", "alloc:after=2", &b), HAL_OK);
    CHECK_STATUS(hal_device_get(b, 0, &d), HAL_OK);
    CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 4096, 0, &p[0]), HAL_OK);
    /* Pinned host memory does not count. */
    CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_HOST_PINNED, 4096, 0, &pinned), HAL_OK);
    CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 4096, 0, &p[1]), HAL_OK);
    CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 4096, 0, &p[2]),
                 HAL_ERROR_OUT_OF_DEVICE_MEMORY);
    CHECK_MESSAGE("injected by HAL_FAULTS alloc");
    CHECK_MESSAGE("cpu: hal_mem_alloc:");
    /* count defaults to 1 without p=: the next allocation works. */
    CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 4096, 0, &p[3]), HAL_OK);
    CTEST_CHECK(hal_faults_injected(HAL_FAULT_ALLOC) == before + 1);
    CHECK_STATUS(hal_mem_free(p[0]), HAL_OK);
    CHECK_STATUS(hal_mem_free(p[1]), HAL_OK);
    CHECK_STATUS(hal_mem_free(p[3]), HAL_OK);
    CHECK_STATUS(hal_mem_free(pinned), HAL_OK);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    return CTEST_PASS;
}

/* Allocations on both devices under `spec`; writes one status letter per call into out. */
static int alloc_pattern(const char *spec, char *out, size_t n)
{
    hal_backend_t b;
    hal_device_t d[2];
    CHECK_STATUS(lt_open("cpu", "faults", spec, &b), HAL_OK);
    CHECK_STATUS(hal_device_get(b, 0, &d[0]), HAL_OK);
    CHECK_STATUS(hal_device_get(b, 1, &d[1]), HAL_OK);
    for (size_t i = 0; i + 1 < n; i++) {
        void *p = NULL;
        hal_status_t st = hal_mem_alloc(d[i % 2], HAL_MEM_KIND_DEVICE, 256, 0, &p);
        out[i] = st == HAL_OK ? '.' : st == HAL_ERROR_OUT_OF_DEVICE_MEMORY ? 'x' : '?';
        if (p)
            CHECK_STATUS(hal_mem_free(p), HAL_OK);
    }
    out[n - 1] = '\0';
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    return CTEST_PASS;
}

CTEST(faults, same_seed_same_failures)
{
    char a[401], b[401], c[401], e[401];
    CTEST_CHECK(alloc_pattern("seed=42;alloc:p=0.2", a, sizeof(a)) == CTEST_PASS);
    CTEST_CHECK(alloc_pattern("seed=42;alloc:p=0.2", b, sizeof(b)) == CTEST_PASS);
    CTEST_CHECK(alloc_pattern("seed=43;alloc:p=0.2", c, sizeof(c)) == CTEST_PASS);
    CTEST_CHECK(alloc_pattern("seed=42;alloc:p=0.2,device=1", e, sizeof(e)) == CTEST_PASS);
    CTEST_CHECK(strcmp(a, b) == 0);
    CTEST_CHECK(strcmp(a, c) != 0);
    CTEST_CHECK(!strchr(a, '?'));
    size_t failures = 0;
    for (size_t i = 0; a[i]; i++)
        failures += a[i] == 'x';
    CTEST_CHECK(failures > 40 && failures < 120); /* about 20% of 400 */
    /* device=1: device 0 (even calls) never fails. */
    for (size_t i = 0; e[i]; i += 2)
        CTEST_CHECK(e[i] == '.');
    return CTEST_PASS;
}

CTEST(faults, device_loss_is_sticky)
{
    hal_backend_t b;
    hal_device_t d0, d1;
    hal_stream_t s0, s1, s;
    hal_event_t e1, e;
    void *p0, *p1, *p2, *q;
    CHECK_STATUS(lt_open("cpu", "faults", "device_lost:after=30,device=1", &b), HAL_OK);
    CHECK_STATUS(hal_device_get(b, 0, &d0), HAL_OK);
    CHECK_STATUS(hal_device_get(b, 1, &d1), HAL_OK);
    CHECK_STATUS(hal_stream_create(d0, 0, &s0), HAL_OK);
    CHECK_STATUS(hal_stream_create(d1, 0, &s1), HAL_OK);
    CHECK_STATUS(hal_event_create(d1, 0, &e1), HAL_OK);
    CHECK_STATUS(hal_mem_alloc(d0, HAL_MEM_KIND_DEVICE, 4096, 0, &p0), HAL_OK);
    CHECK_STATUS(hal_mem_alloc(d1, HAL_MEM_KIND_DEVICE, 4096, 0, &p1), HAL_OK);
    CHECK_STATUS(hal_mem_alloc(d1, HAL_MEM_KIND_DEVICE, 4096, 0, &p2), HAL_OK);
    int calls = 0;
    hal_status_t st = HAL_OK;
    while (st == HAL_OK && calls < 100) {
        st = hal_device_synchronize(d1);
        calls++;
    }
    CHECK_STATUS(st, HAL_ERROR_DEVICE_LOST);
    CHECK_MESSAGE("injected by HAL_FAULTS device_lost");
    CTEST_CHECK(calls < 30);
    /* Everything on device 1 fails from now on, whatever the call. */
    CHECK_STATUS(hal_device_synchronize(d1), HAL_ERROR_DEVICE_LOST);
    CHECK_STATUS(hal_mem_alloc(d1, HAL_MEM_KIND_DEVICE, 4096, 0, &q), HAL_ERROR_DEVICE_LOST);
    CHECK_STATUS(hal_mem_alloc(d1, HAL_MEM_KIND_HOST_PINNED, 4096, 0, &q), HAL_ERROR_DEVICE_LOST);
    CHECK_STATUS(hal_stream_create(d1, 0, &s), HAL_ERROR_DEVICE_LOST);
    CHECK_STATUS(hal_event_create(d1, 0, &e), HAL_ERROR_DEVICE_LOST);
    CHECK_STATUS(hal_stream_query(s1), HAL_ERROR_DEVICE_LOST);
    CHECK_STATUS(hal_stream_synchronize(s1), HAL_ERROR_DEVICE_LOST);
    CHECK_STATUS(hal_memset_async(p1, 0, 4096, s1), HAL_ERROR_DEVICE_LOST);
    CHECK_STATUS(hal_event_record(e1, s1), HAL_ERROR_DEVICE_LOST);
    CHECK_STATUS(hal_event_query(e1), HAL_ERROR_DEVICE_LOST);
    CHECK_STATUS(hal_event_synchronize(e1), HAL_ERROR_DEVICE_LOST);
    /* A stream-ordered free can no longer be enqueued: it is done at once, not lost. */
    hal_mem_info_t info = HAL_MEM_INFO_INIT;
    CHECK_STATUS(hal_mem_free_async(p2, s1), HAL_ERROR_DEVICE_LOST);
    CHECK_MESSAGE("the memory was freed at once");
    CHECK_STATUS(hal_mem_get_info(p2, &info), HAL_OK);
    CTEST_CHECK(info.kind == HAL_MEM_KIND_UNREGISTERED);
    /* Releases still release (and say the device is gone); the handles are gone too. */
    CHECK_STATUS(hal_stream_destroy(s1), HAL_ERROR_DEVICE_LOST);
    CHECK_STATUS(hal_stream_query(s1), HAL_ERROR_INVALID_HANDLE);
    CHECK_STATUS(hal_event_destroy(e1), HAL_OK);
    /* hal_mem_free waits for every device of the backend, so it reports the loss. */
    CHECK_STATUS(hal_mem_free(p1), HAL_ERROR_DEVICE_LOST);
    CHECK_STATUS(hal_mem_get_info(p1, &info), HAL_OK);
    CTEST_CHECK(info.kind == HAL_MEM_KIND_UNREGISTERED);
    /* Device 0 is fine. */
    CHECK_STATUS(hal_memset_async(p0, 1, 4096, s0), HAL_OK);
    CHECK_STATUS(hal_stream_synchronize(s0), HAL_OK);
    CHECK_STATUS(hal_stream_destroy(s0), HAL_OK);
    /* The backend still closes cleanly, releasing what is left. */
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    return CTEST_PASS;
}

CTEST(faults, stream_failure_latches_asynchronously)
{
    hal_backend_t b;
    hal_device_t d;
    hal_stream_t s, other;
    hal_event_t before, after;
    void *p;
    uint64_t injected = hal_faults_injected(HAL_FAULT_STREAM_FAIL);
    CHECK_STATUS(lt_open("cpu", "faults", "stream_fail:after=1,device=0", &b), HAL_OK);
    CHECK_STATUS(hal_device_get(b, 0, &d), HAL_OK);
    CHECK_STATUS(hal_stream_create(d, 0, &s), HAL_OK);
    CHECK_STATUS(hal_stream_create(d, 0, &other), HAL_OK);
    CHECK_STATUS(hal_event_create(d, 0, &before), HAL_OK);
    CHECK_STATUS(hal_event_create(d, 0, &after), HAL_OK);
    CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 4096, 0, &p), HAL_OK);
    CHECK_STATUS(hal_memset_async(p, 1, 4096, s), HAL_OK);
    CHECK_STATUS(hal_event_record(before, s), HAL_OK);
    /* The second copy is the one: the call itself succeeds, the stream fails behind it. */
    CHECK_STATUS(hal_memset_async(p, 2, 4096, s), HAL_OK);
    CTEST_CHECK(hal_faults_injected(HAL_FAULT_STREAM_FAIL) == injected + 1);
    hal_status_t st = hal_event_record(after, s);
    CTEST_CHECK(st == HAL_OK || st == HAL_ERROR_BACKEND_SPECIFIC);
    CHECK_STATUS(hal_stream_synchronize(s), HAL_ERROR_BACKEND_SPECIFIC);
    CHECK_MESSAGE("injected stream failure");
    CHECK_STATUS(hal_stream_query(s), HAL_ERROR_BACKEND_SPECIFIC);
    CHECK_STATUS(hal_event_query(before), HAL_OK);
    if (st == HAL_OK) {
        CHECK_STATUS(hal_event_query(after), HAL_ERROR_BACKEND_SPECIFIC);
        CHECK_STATUS(hal_event_synchronize(after), HAL_ERROR_BACKEND_SPECIFIC);
    }
    /* Sticky, and only this stream. */
    CHECK_STATUS(hal_stream_synchronize(s), HAL_ERROR_BACKEND_SPECIFIC);
    CHECK_STATUS(hal_memset_async(p, 3, 4096, other), HAL_OK);
    CHECK_STATUS(hal_stream_synchronize(other), HAL_OK);
    CHECK_STATUS(hal_stream_destroy(s), HAL_ERROR_BACKEND_SPECIFIC);
    CHECK_STATUS(hal_stream_destroy(other), HAL_OK);
    CHECK_STATUS(hal_event_destroy(before), HAL_OK);
    CHECK_STATUS(hal_event_destroy(after), HAL_OK);
    CHECK_STATUS(hal_mem_free(p), HAL_OK);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    return CTEST_PASS;
}

/* Two ranks (threads' worth of work driven by this thread): rank 1 times out at its second
 * collective; it reports HAL_ERROR_TIMEOUT, its peer learns of it as HAL_ERROR_REMOTE. */
CTEST(faults, collective_timeout)
{
    hal_backend_t b;
    lt_job_t job;
    float *buf[2];
    CHECK_STATUS(lt_open("cpu", "faults", "coll_timeout:after=1,rank=1", &b), HAL_OK);
    /* A timeout longer than this test's own (Bazel's moderate, 300 s): rank 0 fails in time only
     * if it is told of rank 1's failure instead of waiting it out. */
    CHECK_STATUS(lt_job_open(b, 2, 600000, &job), HAL_OK);
    for (int r = 0; r < 2; r++)
        CHECK_STATUS(hal_mem_alloc(job.dev[r], HAL_MEM_KIND_DEVICE, 256, 0, (void **)&buf[r]),
                     HAL_OK);
    for (int round = 0; round < 2; round++)
        for (int r = 0; r < 2; r++)
            CHECK_STATUS(hal_allreduce(buf[r], buf[r], 16, HAL_DTYPE_F32, HAL_REDOP_SUM,
                                       job.comm[r], job.stream[r]),
                         HAL_OK);
    CHECK_STATUS(hal_stream_synchronize(job.stream[1]), HAL_ERROR_TIMEOUT);
    CHECK_MESSAGE("injected collective timeout on rank 1 of 2");
    hal_status_t st0 = hal_stream_synchronize(job.stream[0]);
    CTEST_CHECK(st0 == HAL_ERROR_REMOTE || st0 == HAL_ERROR_TIMEOUT);
    hal_status_t async;
    CHECK_STATUS(hal_comm_get_async_error(job.comm[1], &async), HAL_OK);
    CTEST_CHECK(async == HAL_ERROR_TIMEOUT);
    CHECK_STATUS(hal_comm_get_async_error(job.comm[0], &async), HAL_OK);
    CTEST_CHECK(async == st0);
    /* Sticky on the communicator. */
    CHECK_STATUS(
        hal_allreduce(buf[1], buf[1], 16, HAL_DTYPE_F32, HAL_REDOP_SUM, job.comm[1], job.stream[0]),
        HAL_ERROR_INVALID_ARGUMENT); /* wrong stream: checked before the sticky error */
    CHECK_STATUS(hal_barrier(job.comm[1], job.stream[1]), HAL_ERROR_TIMEOUT);
    /* Once the failed streams are gone, nothing is left failing. */
    lt_job_close(&job);
    for (int r = 0; r < 2; r++)
        CHECK_STATUS(hal_mem_free(buf[r]), HAL_OK);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    return CTEST_PASS;
}

CTEST(faults, malformed_spec_fails_the_open)
{
    hal_backend_t b;
    CHECK_STATUS(lt_open("cpu", "faults", "seed=1;alloc:p=2", &b), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_MESSAGE("HAL_FAULTS: at offset 13 ('p=2')");
    CHECK_STATUS(lt_open("cpu", "trace,faults", "device_lots", &b), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_MESSAGE("'device_lots'");
    /* stream_fail needs host functions in stream order, which a backend built against HAL 1.0
     * lacks. */
    CHECK_STATUS(lt_open("short", "faults", "stream_fail:p=0.5", &b), HAL_ERROR_UNSUPPORTED);
    CHECK_MESSAGE("stream_launch_host_fn");
    /* No spec: the layer injects nothing. */
    CHECK_STATUS(lt_open("cpu", "faults", NULL, &b), HAL_OK);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    return CTEST_PASS;
}

/* A mixed workload that keeps going through failures and releases everything it made. Every
 * status must be OK or one a fault of the spec can cause. Writes one letter per call. */
static int workload(const char *layers, const char *spec, int iters, char *log, size_t size)
{
    hal_backend_t b;
    hal_device_t d[2];
    hal_stream_t s[2] = { NULL, NULL };
    size_t n = 0;
    CHECK_STATUS(lt_open("cpu", layers, spec, &b), HAL_OK);
#define NOTE(st)                                                                 \
    do {                                                                         \
        hal_status_t st_ = (st);                                                 \
        if (st_ != HAL_OK && st_ != HAL_ERROR_OUT_OF_DEVICE_MEMORY &&            \
            st_ != HAL_ERROR_DEVICE_LOST && st_ != HAL_ERROR_BACKEND_SPECIFIC) { \
            fprintf(stderr, "%s:%d: unexpected %s: %s\n", __FILE__, __LINE__,    \
                    hal_status_string(st_), hal_last_error_message());           \
            return CTEST_FAIL;                                                   \
        }                                                                        \
        if (n + 1 < size)                                                        \
            log[n++] = (char)('A' + st_);                                        \
    } while (0)
    /* Whether work enqueued behind an injected stream failure is refused at once or skipped
     * later depends on when the stream reaches the failure: the log does not tell them apart. */
#define NOTE_ASYNC(st)                                                         \
    do {                                                                       \
        hal_status_t sa_ = (st);                                               \
        if (sa_ == HAL_ERROR_BACKEND_SPECIFIC && !strstr(spec, "stream_fail")) \
            return CTEST_FAIL; /* only stream_fail fails streams */            \
        NOTE(sa_ == HAL_ERROR_BACKEND_SPECIFIC ? HAL_OK : sa_);                \
    } while (0)
    for (int i = 0; i < 2; i++) {
        CHECK_STATUS(hal_device_get(b, (uint32_t)i, &d[i]), HAL_OK);
        hal_status_t st = hal_stream_create(d[i], 0, &s[i]);
        NOTE(st);
        if (st != HAL_OK)
            s[i] = NULL;
    }
    for (int i = 0; i < iters; i++) {
        int k = i % 2;
        void *p = NULL, *h = NULL;
        hal_event_t e = NULL;
        hal_status_t st = hal_mem_alloc(d[k], HAL_MEM_KIND_DEVICE, 4096, 0, &p);
        NOTE(st);
        if (st != HAL_OK)
            p = NULL;
        st = hal_mem_alloc(d[k], HAL_MEM_KIND_HOST_PINNED, 4096, 0, &h);
        NOTE(st);
        if (st != HAL_OK)
            h = NULL;
        st = hal_event_create(d[k], 0, &e);
        NOTE(st);
        if (st != HAL_OK)
            e = NULL;
        if (s[k] && p && h) {
            NOTE_ASYNC(hal_memset_async(p, i & 0xff, 4096, s[k]));
            /* Wait for the memset (and a failure injected behind it): whether the next enqueue
             * is accepted, and so counted by the faults layer, must not depend on how far the
             * stream got. */
            NOTE(hal_stream_synchronize(s[k]));
            NOTE_ASYNC(hal_memcpy_async(h, p, 4096, s[k]));
            if (e)
                NOTE_ASYNC(hal_event_record(e, s[k]));
            NOTE(hal_stream_synchronize(s[k]));
            if (e) /* an event whose record was refused is complete: either status is right */
                NOTE_ASYNC(hal_event_query(e));
        }
        if (e)
            NOTE(hal_event_destroy(e));
        if (p)
            NOTE(hal_mem_free(p));
        if (h)
            NOTE(hal_mem_free(h));
        if (s[k] && hal_stream_query(s[k]) == HAL_ERROR_BACKEND_SPECIFIC) {
            /* A failed stream stays failed: replace it, as an application would. */
            NOTE(hal_stream_destroy(s[k]));
            st = hal_stream_create(d[k], 0, &s[k]);
            NOTE(st);
            if (st != HAL_OK)
                s[k] = NULL;
        }
    }
    for (int i = 0; i < 2; i++)
        if (s[i])
            NOTE(hal_stream_destroy(s[i]));
#undef NOTE_ASYNC
#undef NOTE
    log[n] = '\0';
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    return CTEST_PASS;
}

CTEST(faults, workloads_under_several_specs)
{
    static const char *const specs[] = {
        "seed=1;alloc:p=0.2",
        "seed=2;device_lost:p=0.01",
        "seed=3;stream_fail:p=0.1",
        "seed=4;alloc:p=0.1;device_lost:after=150,device=0;stream_fail:p=0.05;log=0",
        "seed=5;alloc:after=3,count=5;stream_fail:after=10,count=2,device=1",
    };
    static char a[8192], b[8192];
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        if (workload("faults", specs[i], 60, a, sizeof(a)) != CTEST_PASS ||
            workload("validation,trace,faults", specs[i], 60, b, sizeof(b)) != CTEST_PASS) {
            fprintf(stderr, "spec '%s' failed\n", specs[i]);
            return CTEST_FAIL;
        }
        /* The same failures with and without the trace layer above (whose own calls the faults
         * layer does not count); synchronous after every step, so every status logged is
         * deterministic. */
        if (strcmp(a, b) != 0) {
            fprintf(stderr, "spec '%s': not deterministic:\n%s\n%s\n", specs[i], a, b);
            return CTEST_FAIL;
        }
        CTEST_CHECK(strchr(a, 'A' + HAL_ERROR_OUT_OF_DEVICE_MEMORY) ||
                    strchr(a, 'A' + HAL_ERROR_DEVICE_LOST) ||
                    strchr(a, 'A' + HAL_ERROR_BACKEND_SPECIFIC));
    }
    return CTEST_PASS;
}
