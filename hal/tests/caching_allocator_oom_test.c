/* SPDX-License-Identifier: Apache-2.0 */
/* The caching allocator out of memory, on a cpu device limited to 8 MiB: it waits for pending
 * frees, releases its cached segments (those other threads' front caches hold too) and retries
 * once before it fails, also while other threads destroy the streams it waits on. */
#include <stdint.h>
#include <stdlib.h>

#include "hal/tests/allocator_test_util.h"

/* Opens the cpu backend with 8 MiB of device memory per device. */
static hal_status_t open_small_device(hal_backend_t *backend, hal_device_t *dev)
{
    *backend = NULL;
    if (setenv("HAL_CPU_DEVICE_MEMORY", "8M", 1) != 0)
        return HAL_ERROR_INTERNAL;
    hal_status_t st = hal_backend_open("cpu", backend);
    if (st != HAL_OK)
        return st;
    hal_mem_stats_t ms = HAL_MEM_STATS_INIT;
    if ((st = hal_device_get(*backend, 0, dev)) != HAL_OK ||
        (st = hal_device_get_mem_stats(*dev, &ms)) != HAL_OK)
        return st;
    return ms.device_bytes_limit == 8 * MiB ? HAL_OK : HAL_ERROR_INTERNAL;
}

CTEST(caching_allocator_oom, releases_the_cache_and_retries)
{
    int rc = CTEST_FAIL;
    hal_backend_t backend = NULL;
    hal_device_t dev = NULL;
    hal_allocator_t a = NULL;
    hal_stream_t s1 = NULL;
    void *small = NULL, *mid = NULL, *big = NULL, *extra = (void *)1, *again = NULL;
    CHECK_OK_GOTO(open_small_device(&backend, &dev), out);
    CHECK_OK_GOTO(hal_stream_create(dev, 0, &s1), out);
    CHECK_OK_GOTO(hal_allocator_create(dev, NULL, &a), out);

    /* Cache a small segment on the default stream and a large one freed on s1 but still used
     * by the default stream (record_stream), then ask for all of the device. */
    CHECK_OK_GOTO(hal_allocator_alloc(a, 512 * KiB, NULL, &small), out);
    CHECK_OK_GOTO(hal_allocator_free(a, small), out);
    small = NULL;
    CHECK_OK_GOTO(hal_allocator_alloc(a, 3 * MiB, s1, &mid), out);
    hal_stream_t default_stream;
    CHECK_OK_GOTO(hal_device_get_default_stream(dev, &default_stream), out);
    CHECK_OK_GOTO(hal_allocator_record_stream(a, mid, default_stream), out);
    CHECK_OK_GOTO(hal_allocator_free(a, mid), out);
    mid = NULL;
    hal_allocator_stats_t s = stats_of(a);
    T_CHECK(s.reserved_bytes == 6 * MiB && s.cached_bytes == 6 * MiB);

    CHECK_OK_GOTO(hal_allocator_alloc(a, 7 * MiB, NULL, &big), out);
    s = stats_of(a);
    T_CHECK(s.reserved_bytes == 8 * MiB && s.segment_free_count == 2 && s.oom_count == 0);
    T_CHECK(s.segment_alloc_count == 3 && s.cached_bytes == 0);

    /* Nothing left to release: a clean failure with the figures in the message. */
    CHECK_STATUS_GOTO(hal_allocator_alloc(a, 1 * MiB, s1, &extra), HAL_ERROR_OUT_OF_DEVICE_MEMORY,
                      out);
    T_CHECK(extra == NULL);
    CHECK_MESSAGE_GOTO("cpu: hal_allocator_alloc: out of device memory", out);
    CHECK_MESSAGE_GOTO("requested 1048576 bytes", out);
    CHECK_MESSAGE_GOTO("8388608 bytes allocated and 8388608 reserved", out);
    CHECK_MESSAGE_GOTO("capacity exceeded", out); /* the backend's own detail */
    s = stats_of(a);
    T_CHECK(s.oom_count == 1 && s.alloc_count == 3 && s.active_blocks == 1);
    T_CHECK(s.reserved_bytes == 8 * MiB);

    /* A block freed on the default stream serves s1 once its fence completes: at the latest
     * the out-of-memory path waits for it, instead of failing. */
    char *freed = big;
    CHECK_OK_GOTO(hal_allocator_free(a, big), out);
    big = NULL;
    CHECK_OK_GOTO(hal_allocator_alloc(a, 7 * MiB, s1, &again), out);
    T_CHECK((char *)again == freed);
    s = stats_of(a);
    T_CHECK(s.segment_alloc_count == 3 && s.oom_count == 1);
    CHECK_OK_GOTO(hal_allocator_free(a, again), out);
    again = NULL;

    CHECK_OK_GOTO(hal_allocator_empty_cache(a), out);
    s = stats_of(a);
    T_CHECK(s.reserved_bytes == 0 && s.peak_reserved_bytes == 8 * MiB);
    rc = CTEST_PASS;
out:
    hal_allocator_free(a, small);
    hal_allocator_free(a, mid);
    hal_allocator_free(a, big);
    hal_allocator_free(a, again);
    if (a != NULL)
        hal_allocator_destroy(a);
    if (s1 != NULL)
        hal_stream_destroy(s1);
    if (backend != NULL)
        hal_backend_close(backend);
    return rc;
}

/* A thread that caches a freed 1 MiB block in its front cache, then waits until told to
 * allocate again. */
typedef struct front_holder {
    hal_allocator_t alloc;
    gate_t cached, again; /* opened by the holder, by the test */
    hal_status_t first, second;
} front_holder_t;

static void *front_holder(void *arg)
{
    front_holder_t *h = arg;
    void *p = NULL;
    h->first = hal_allocator_alloc(h->alloc, 1 * MiB, NULL, &p);
    if (h->first == HAL_OK)
        h->first = hal_allocator_free(h->alloc, p);
    gate_open(&h->cached);
    gate_wait(HAL_OK, &h->again);
    h->second = hal_allocator_alloc(h->alloc, 1 * MiB, NULL, &p);
    if (h->second == HAL_OK)
        h->second = hal_allocator_free(h->alloc, p);
    return NULL;
}

/* Out of memory, the allocator takes back what the front caches of other (living) threads
 * hold, and releases it. */
CTEST(caching_allocator_oom, takes_back_what_front_caches_hold)
{
    int rc = CTEST_FAIL;
    hal_backend_t backend = NULL;
    hal_device_t dev = NULL;
    front_holder_t h = { 0 };
    pthread_t thread;
    int started = 0;
    void *big = NULL;
    gate_init(&h.cached);
    gate_init(&h.again);
    CHECK_OK_GOTO(open_small_device(&backend, &dev), out);
    CHECK_OK_GOTO(hal_allocator_create(dev, NULL, &h.alloc), out);
    T_CHECK(pthread_create(&thread, NULL, front_holder, &h) == 0);
    started = 1;
    gate_wait(HAL_OK, &h.cached);
    CHECK_OK_GOTO(h.first, out);

    /* All 8 MiB: only if the holder's 2 MiB segment is released. */
    CHECK_OK_GOTO(hal_allocator_alloc(h.alloc, 7 * MiB, NULL, &big), out);
    hal_allocator_stats_t s = stats_of(h.alloc);
    T_CHECK(s.reserved_bytes == 8 * MiB && s.segment_free_count == 1 && s.oom_count == 0);
    CHECK_OK_GOTO(hal_allocator_free(h.alloc, big), out);
    big = NULL;
    /* The holder's front cache no longer has its block; it gets one anew. */
    gate_open(&h.again);
    pthread_join(thread, NULL);
    started = 0;
    CHECK_OK_GOTO(h.second, out);
    s = stats_of(h.alloc);
    T_CHECK(s.oom_count == 0 && s.active_blocks == 0 && s.alloc_count == 3);
    T_CHECK(s.reserved_bytes == 2 * MiB && s.segment_alloc_count == 3);
    rc = CTEST_PASS;
out:
    if (started) {
        gate_open(&h.again);
        pthread_join(thread, NULL);
    }
    if (h.alloc != NULL) {
        hal_allocator_free(h.alloc, big);
        hal_allocator_destroy(h.alloc);
    }
    if (backend != NULL)
        hal_backend_close(backend);
    gate_destroy(&h.cached);
    gate_destroy(&h.again);
    return rc;
}

CTEST(caching_allocator_oom, reports_the_kind_of_memory)
{
    int rc = CTEST_FAIL;
    hal_backend_t backend = NULL;
    hal_device_t dev = NULL;
    hal_allocator_t a = NULL, pinned = NULL;
    void *p = (void *)1;
    CHECK_OK_GOTO(open_small_device(&backend, &dev), out);
    CHECK_OK_GOTO(hal_allocator_create(dev, NULL, &a), out);
    hal_allocator_config_t cfg = HAL_ALLOCATOR_CONFIG_INIT;
    cfg.kind = HAL_MEM_KIND_HOST_PINNED;
    CHECK_OK_GOTO(hal_allocator_create(dev, &cfg, &pinned), out);

    CHECK_STATUS_GOTO(hal_allocator_alloc(a, 64 * MiB, NULL, &p), HAL_ERROR_OUT_OF_DEVICE_MEMORY,
                      out);
    T_CHECK(p == NULL);
    CHECK_STATUS_GOTO(hal_allocator_alloc(a, SIZE_MAX, NULL, &p), HAL_ERROR_OUT_OF_DEVICE_MEMORY,
                      out);
    CHECK_STATUS_GOTO(hal_allocator_alloc(pinned, SIZE_MAX, NULL, &p), HAL_ERROR_OUT_OF_HOST_MEMORY,
                      out);
    CHECK_MESSAGE_GOTO("out of pinned host memory", out);
    T_CHECK(stats_of(a).oom_count == 2 && stats_of(pinned).oom_count == 1);
    T_CHECK(stats_of(a).reserved_bytes == 0);

    /* Pinned memory does not count against the device's 8 MiB. */
    CHECK_OK_GOTO(hal_allocator_alloc(pinned, 16 * MiB, NULL, &p), out);
    CHECK_OK_GOTO(hal_allocator_free(pinned, p), out);
    rc = CTEST_PASS;
out:
    if (pinned != NULL)
        hal_allocator_destroy(pinned);
    if (a != NULL)
        hal_allocator_destroy(a);
    if (backend != NULL)
        hal_backend_close(backend);
    return rc;
}

/* Threads that each create a stream, allocate and free on it and destroy it, on a device too
 * small for all of them: every thread's misses fence the other threads' pools and every OOM
 * synchronizes them, while those threads destroy their streams. The allocator must never use a
 * stream that is being destroyed (a fence recorded on it then never completes: a hang). */
enum { CHURN_THREADS = 4, CHURN_ROUNDS = 40 };

typedef struct churn {
    hal_device_t dev;
    hal_allocator_t alloc;
    int id;
    int failures; /* other than out of memory */
} churn_t;

static void *churn_thread(void *arg)
{
    churn_t *c = arg;
    for (int round = 0; round < CHURN_ROUNDS && c->failures == 0; round++) {
        hal_stream_t s = NULL;
        void *held[3] = { 0 };
        if (hal_stream_create(c->dev, 0, &s) != HAL_OK) {
            c->failures++;
            break;
        }
        for (int i = 0; i < 3; i++) {
            size_t size = (size_t)(512 + ((round * 7 + c->id * 13 + i) % 5) * 384) * KiB;
            hal_status_t st = hal_allocator_alloc(c->alloc, size, s, &held[i]);
            if (st == HAL_OK)
                st = hal_memset_async(held[i], c->id, size, s);
            if (st != HAL_OK && st != HAL_ERROR_OUT_OF_DEVICE_MEMORY) {
                fprintf(stderr, "thread %d: %s\n", c->id, hal_last_error_message());
                c->failures++;
            }
        }
        for (int i = 0; i < 3; i++)
            if (held[i] != NULL && hal_allocator_free(c->alloc, held[i]) != HAL_OK)
                c->failures++;
        if (hal_stream_destroy(s) != HAL_OK)
            c->failures++;
    }
    return NULL;
}

CTEST(caching_allocator_oom, streams_destroyed_while_other_threads_fence_them)
{
    int rc = CTEST_FAIL;
    hal_backend_t backend = NULL;
    hal_device_t dev = NULL;
    hal_allocator_t a = NULL;
    churn_t c[CHURN_THREADS];
    pthread_t t[CHURN_THREADS];
    int started = 0;
    CHECK_OK_GOTO(open_small_device(&backend, &dev), out);
    CHECK_OK_GOTO(hal_allocator_create(dev, NULL, &a), out);
    for (; started < CHURN_THREADS; started++) {
        c[started] = (churn_t){ .dev = dev, .alloc = a, .id = started };
        T_CHECK(pthread_create(&t[started], NULL, churn_thread, &c[started]) == 0);
    }
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    started = 0;
    for (int i = 0; i < CHURN_THREADS; i++)
        T_CHECK(c[i].failures == 0);
    hal_allocator_stats_t s = stats_of(a);
    T_CHECK(s.active_blocks == 0 && s.allocated_bytes == 0);
    /* Every pool of a destroyed stream gave its blocks back: all of it can be released. */
    CHECK_OK_GOTO(hal_allocator_empty_cache(a), out);
    T_CHECK(stats_of(a).reserved_bytes == 0);
    CHECK_OK_GOTO(hal_allocator_destroy(a), out);
    a = NULL;
    rc = CTEST_PASS;
out:
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    if (a != NULL)
        hal_allocator_destroy(a);
    if (backend != NULL)
        hal_backend_close(backend);
    return rc;
}
