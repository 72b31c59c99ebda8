/* SPDX-License-Identifier: Apache-2.0 */
/* Thread-safety smoke test: many threads allocate, write, read, copy, slice and free tensors
 * (each its own, or disjoint slices of a shared one) while another reads memory statistics.
 * Run it under ThreadSanitizer to check the emulator's locking. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hal_backends/trainium/emulator/tests/nrt_test_util.h"
#include "tools/ctest/ctest.h"

#define THREADS    8
#define ITERATIONS 150
#define CORES      4
#define SHARED     (THREADS * 4096)

static nrt_api_t api;
static nrt_tensor_t *shared;
static atomic_int failures;
static atomic_bool stop;

static void fail(const char *what)
{
    fprintf(stderr, "worker: %s\n", what);
    atomic_fetch_add(&failures, 1);
}

static void *worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    unsigned char *in = malloc(65536), *out = malloc(65536);
    if (in == NULL || out == NULL) {
        fail("malloc");
        goto out;
    }
    for (unsigned i = 0; i < ITERATIONS; i++) {
        int core = (int)((id + i) % CORES);
        size_t size = 1 + (size_t)((id * 7919u + i * 104729u) % 65536u);
        nrt_tensor_t *a = NULL, *b = NULL, *s = NULL;
        if (api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, core, size, "a", &a) != NRT_SUCCESS ||
            api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, core, size, "b", &b) != NRT_SUCCESS) {
            fail("allocate");
            api.tensor_free(&a);
            break;
        }
        nrt_test_pattern(in, size, id * 1000 + i);
        if (api.tensor_write(a, in, 0, size) != NRT_SUCCESS ||
            api.tensor_copy(a, 0, b, 0, size) != NRT_SUCCESS ||
            api.tensor_read(b, out, 0, size) != NRT_SUCCESS || memcmp(in, out, size) != 0)
            fail("write/copy/read round trip");
        if (api.tensor_memset(b, 0, (int)id, size) != NRT_SUCCESS ||
            api.tensor_read(b, out, size - 1, 1) != NRT_SUCCESS || out[0] != (unsigned char)id)
            fail("memset");
        /* This thread's own page of the shared tensor, through a slice. */
        if (api.tensor_allocate_slice(shared, id * 4096u, 4096, "s", &s) != NRT_SUCCESS ||
            api.tensor_write(s, in, 0, 4096 < size ? 4096 : size) != NRT_SUCCESS ||
            api.tensor_read(shared, out, id * 4096u, 4096 < size ? 4096 : size) != NRT_SUCCESS ||
            memcmp(in, out, 4096 < size ? 4096 : size) != 0)
            fail("slice");
        api.tensor_free(&s);
        api.tensor_free(&a);
        api.tensor_free(&b);
    }
out:
    free(in);
    free(out);
    return NULL;
}

static void *stats_reader(void *arg)
{
    while (!atomic_load(&stop)) {
        for (uint32_t c = 0; c < CORES; c++) {
            nrt_vnc_memory_stats_t stats;
            size_t written;
            if (api.get_vnc_memory_stats(c, &stats, sizeof(stats), &written) != NRT_SUCCESS ||
                stats.bytes_used > stats.bytes_limit)
                fail("stats");
        }
        uint32_t count;
        if (api.get_visible_vnc_count(&count) != NRT_SUCCESS || count != CORES)
            fail("count");
    }
    return NULL;
}

CTEST(nrt_threads, concurrent_tensor_traffic)
{
    CTEST_CHECK(nrt_test_open(&api));
    setenv("NEURON_RT_VISIBLE_CORES", "0-3", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, SHARED, "shared", &shared) ==
                NRT_SUCCESS);
    atomic_store(&failures, 0);
    atomic_store(&stop, false);
    pthread_t threads[THREADS], reader;
    CTEST_CHECK(pthread_create(&reader, NULL, stats_reader, NULL) == 0);
    for (unsigned t = 0; t < THREADS; t++)
        CTEST_CHECK(pthread_create(&threads[t], NULL, worker, (void *)(uintptr_t)t) == 0);
    for (unsigned t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
    atomic_store(&stop, true);
    pthread_join(reader, NULL);
    CTEST_CHECK(atomic_load(&failures) == 0);
    api.tensor_free(&shared);
    for (uint32_t c = 0; c < CORES; c++)
        CTEST_CHECK(nrt_test_used(&api, c) == 0);
    nrt_test_close(&api);
    return CTEST_PASS;
}

static void *allocate_until_close(void *arg)
{
    (void)arg;
    for (;;) {
        nrt_tensor_t *t = NULL;
        NRT_STATUS s = api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 4096, "t", &t);
        if (s == NRT_CLOSED)
            return NULL;
        if (s != NRT_SUCCESS) {
            fail("allocate before close");
            return NULL;
        }
        unsigned char b[16] = { 0 };
        s = api.tensor_write(t, b, 0, sizeof(b));
        if (s != NRT_SUCCESS && s != NRT_CLOSED && s != NRT_INVALID_HANDLE)
            fail("write around close");
        api.tensor_free(&t);
    }
}

CTEST(nrt_threads, close_while_other_threads_allocate)
{
    CTEST_CHECK(nrt_test_open(&api));
    setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    atomic_store(&failures, 0);
    pthread_t threads[4];
    for (int t = 0; t < 4; t++)
        CTEST_CHECK(pthread_create(&threads[t], NULL, allocate_until_close, NULL) == 0);
    struct timespec pause = { 0, 20 * 1000 * 1000 };
    nanosleep(&pause, NULL);
    setenv("NEURON_RT_LOG_LEVEL", "ERROR", 1);
    api.close(); /* waits for calls in flight; later calls fail with NRT_CLOSED */
    for (int t = 0; t < 4; t++)
        pthread_join(threads[t], NULL);
    CTEST_CHECK(atomic_load(&failures) == 0);
    nrt_test_close(&api);
    return CTEST_PASS;
}
