/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: streams (worker threads over blocking runtime calls) and versioned events:
 * FIFO order, callbacks, cross-stream and cross-core waits, version binding, timing, device
 * synchronisation, priorities and latched errors. */
#include <stdlib.h>
#include <time.h>

#include "hal_backends/trainium/tests/trn_test_util.h"

typedef struct fixture {
    hal_backend_t b;
    hal_device_t dev[2];
} fixture_t;

static hal_status_t fx_open(fixture_t *fx)
{
    memset(fx, 0, sizeof(*fx));
    tt_setenv("NEURON_RT_VISIBLE_CORES", "0-1");
    hal_status_t st = tt_open(&fx->b);
    if (st != HAL_OK)
        return st;
    fx->dev[0] = tt_device(fx->b, 0);
    fx->dev[1] = tt_device(fx->b, 1);
    return fx->dev[0] != NULL && fx->dev[1] != NULL ? HAL_OK : HAL_ERROR_INTERNAL;
}

static void fx_close(fixture_t *fx)
{
    if (fx->b != NULL)
        hal_backend_close(fx->b);
    fx->b = NULL;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { (time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Work runs in enqueue order: the last of many memsets of one location wins, and callbacks
 * interleaved with copies see the copies before them. */
CTEST(TrnStream, FifoOrder)
{
    fixture_t fx;
    tt_env_reset();
    EXPECT_OK(fx_open(&fx));
    hal_stream_t s = NULL;
    uint8_t *d = NULL;
    enum { N = 256, ROUNDS = 200 };
    static uint8_t seen[ROUNDS][N];
    EXPECT_OK(hal_stream_create(fx.dev[0], 0, &s));
    EXPECT_OK(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, N, 0, (void **)&d));
    if (!ctest_failures_so_far()) {
        for (int i = 0; i < ROUNDS; i++) {
            EXPECT_OK(hal_memset_async(d, i, N, s));
            EXPECT_OK(hal_memcpy_async(seen[i], d, N, s));
        }
        EXPECT_OK(hal_stream_synchronize(s));
        for (int i = 0; i < ROUNDS; i++)
            CTEST_EXPECT(tt_find_other(seen[i], N, (uint8_t)i) == N);
    }
    hal_mem_free(d);
    EXPECT_OK(hal_stream_destroy(s));
    fx_close(&fx);
    return CTEST_PASS;
}

typedef struct thread_probe {
    pthread_t caller;
    atomic_int on_caller;
    atomic_int runs;
    atomic_int status;
} thread_probe_t;

static void probe_cb(hal_status_t status, void *arg)
{
    thread_probe_t *p = arg;
    if (pthread_equal(pthread_self(), p->caller))
        atomic_store(&p->on_caller, 1);
    atomic_store(&p->status, (int)status);
    atomic_fetch_add(&p->runs, 1);
}

/* Callbacks run in stream order, on a backend thread, with the stream's status. */
CTEST(TrnStream, Callbacks)
{
    fixture_t fx;
    tt_env_reset();
    EXPECT_OK(fx_open(&fx));
    hal_stream_t s[2] = { NULL, NULL };
    tt_log_t log;
    tt_log_init(&log);
    tt_log_entry_t entries[20];
    EXPECT_OK(hal_stream_create(fx.dev[0], 0, &s[0]));
    EXPECT_OK(hal_stream_create(fx.dev[1], -1, &s[1]));
    for (int i = 0; i < 10; i++) {
        entries[i] = (tt_log_entry_t){ &log, (char)('a' + i) };
        EXPECT_OK(hal_stream_add_callback(s[0], tt_log_cb, &entries[i]));
    }
    EXPECT_OK(hal_stream_synchronize(s[0]));
    char text[64];
    tt_log_text(&log, text, sizeof(text));
    CTEST_EXPECT(strcmp(text, "abcdefghij") == 0);
    for (int i = 0; i < 10; i++)
        CTEST_EXPECT(log.status[i] == HAL_OK);

    thread_probe_t probe = { .caller = pthread_self() };
    atomic_init(&probe.on_caller, 0);
    atomic_init(&probe.runs, 0);
    atomic_init(&probe.status, -1);
    EXPECT_OK(hal_stream_add_callback(s[1], probe_cb, &probe));
    EXPECT_OK(hal_stream_synchronize(s[1]));
    CTEST_EXPECT(atomic_load(&probe.runs) == 1);
    CTEST_EXPECT(atomic_load(&probe.on_caller) == 0);
    CTEST_EXPECT(atomic_load(&probe.status) == HAL_OK);
    EXPECT_STATUS(hal_stream_add_callback(s[1], NULL, NULL), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_OK(hal_stream_destroy(s[0]));
    EXPECT_OK(hal_stream_destroy(s[1]));
    tt_log_destroy(&log);
    fx_close(&fx);
    return CTEST_PASS;
}

/* A never-recorded event is complete; a recorded one completes when its stream reaches it. */
CTEST(TrnEvent, RecordQuerySynchronize)
{
    fixture_t fx;
    tt_env_reset();
    EXPECT_OK(fx_open(&fx));
    hal_stream_t s = NULL, other = NULL;
    hal_event_t e = NULL;
    EXPECT_OK(hal_stream_create(fx.dev[0], 0, &s));
    EXPECT_OK(hal_stream_create(fx.dev[0], 0, &other));
    EXPECT_OK(hal_event_create(fx.dev[0], HAL_EVENT_FLAG_NONE, &e));
    EXPECT_OK(hal_event_query(e));
    EXPECT_OK(hal_event_synchronize(e));
    EXPECT_OK(hal_stream_wait_event(other, e)); /* no-op */
    EXPECT_OK(hal_stream_synchronize(other));

    tt_gate_t gate;
    tt_gate_init(&gate);
    EXPECT_OK(hal_stream_add_callback(s, tt_gate_cb, &gate));
    EXPECT_OK(hal_event_record(e, s));
    CTEST_EXPECT(hal_event_query(e) == HAL_NOT_READY);
    CTEST_EXPECT(hal_stream_query(s) == HAL_NOT_READY);
    pthread_t opener;
    bool started = tt_gate_open_after(&gate, 30, &opener);
    CTEST_EXPECT(started);
    if (!started)
        tt_gate_open(&gate);
    EXPECT_OK(hal_event_synchronize(e));
    EXPECT_OK(hal_event_query(e));
    CTEST_EXPECT(atomic_load(&gate.entered) == 1);
    if (started)
        pthread_join(opener, NULL);
    EXPECT_OK(hal_stream_synchronize(s));
    tt_gate_destroy(&gate);
    EXPECT_OK(hal_event_destroy(e));
    EXPECT_OK(hal_stream_destroy(s));
    EXPECT_OK(hal_stream_destroy(other));
    fx_close(&fx);
    return CTEST_PASS;
}

/* A wait binds to the version current at the call: re-recording afterwards does not make the
 * waiter wait longer; synchronize binds the same way; a new wait sees the new version. The
 * waiting stream is on the other core (waits work across devices of the backend). */
CTEST(TrnEvent, WaitBindsToVersionAtCall)
{
    fixture_t fx;
    tt_env_reset();
    EXPECT_OK(fx_open(&fx));
    hal_stream_t rec = NULL, waiter = NULL;
    hal_event_t e = NULL;
    tt_gate_t g1, g2;
    tt_gate_init(&g1);
    tt_gate_init(&g2);
    tt_log_t log;
    tt_log_init(&log);
    tt_log_entry_t first = { &log, '1' }, second = { &log, '2' };
    EXPECT_OK(hal_stream_create(fx.dev[0], 0, &rec));
    EXPECT_OK(hal_stream_create(fx.dev[1], 0, &waiter));
    EXPECT_OK(hal_event_create(fx.dev[0], 0, &e));

    EXPECT_OK(hal_stream_add_callback(rec, tt_gate_cb, &g1));
    EXPECT_OK(hal_event_record(e, rec)); /* version 1, behind g1 */
    EXPECT_OK(hal_stream_wait_event(waiter, e));
    EXPECT_OK(hal_stream_add_callback(waiter, tt_log_cb, &first));
    EXPECT_OK(hal_stream_add_callback(rec, tt_gate_cb, &g2));
    EXPECT_OK(hal_event_record(e, rec)); /* version 2, behind g2 as well */

    char text[16];
    CTEST_EXPECT(tt_gate_wait_entered(&g1));
    sleep_ms(20);
    tt_log_text(&log, text, sizeof(text));
    CTEST_EXPECT(text[0] == '\0'); /* still waiting for version 1 */
    tt_gate_open(&g1);
    /* Version 1 completes; the waiter goes on although version 2 is pending. */
    CTEST_EXPECT(tt_gate_wait_entered(&g2));
    EXPECT_OK(hal_stream_synchronize(waiter));
    tt_log_text(&log, text, sizeof(text));
    CTEST_EXPECT(strcmp(text, "1") == 0);
    CTEST_EXPECT(hal_event_query(e) == HAL_NOT_READY);
    /* A new wait binds to version 2. */
    EXPECT_OK(hal_stream_wait_event(waiter, e));
    EXPECT_OK(hal_stream_add_callback(waiter, tt_log_cb, &second));
    sleep_ms(20);
    CTEST_EXPECT(hal_stream_query(waiter) == HAL_NOT_READY);
    tt_gate_open(&g2);
    EXPECT_OK(hal_stream_synchronize(waiter));
    tt_log_text(&log, text, sizeof(text));
    CTEST_EXPECT(strcmp(text, "12") == 0);
    EXPECT_OK(hal_event_query(e));

    EXPECT_OK(hal_stream_destroy(rec));
    EXPECT_OK(hal_stream_destroy(waiter));
    EXPECT_OK(hal_event_destroy(e));
    tt_gate_destroy(&g1);
    tt_gate_destroy(&g2);
    tt_log_destroy(&log);
    fx_close(&fx);
    return CTEST_PASS;
}

/* Destroying an event with a pending record and wait is safe; the waiter is not affected. */
CTEST(TrnEvent, DestroyWhilePending)
{
    fixture_t fx;
    tt_env_reset();
    EXPECT_OK(fx_open(&fx));
    hal_stream_t rec = NULL, waiter = NULL;
    hal_event_t e = NULL;
    tt_gate_t gate;
    tt_gate_init(&gate);
    EXPECT_OK(hal_stream_create(fx.dev[1], 0, &rec));
    EXPECT_OK(hal_stream_create(fx.dev[1], 0, &waiter));
    EXPECT_OK(hal_event_create(fx.dev[1], HAL_EVENT_FLAG_TIMING, &e));
    EXPECT_OK(hal_stream_add_callback(rec, tt_gate_cb, &gate));
    EXPECT_OK(hal_event_record(e, rec));
    EXPECT_OK(hal_stream_wait_event(waiter, e));
    EXPECT_OK(hal_event_destroy(e));
    CTEST_EXPECT(hal_stream_query(waiter) == HAL_NOT_READY);
    tt_gate_open(&gate);
    EXPECT_OK(hal_stream_synchronize(waiter));
    EXPECT_OK(hal_stream_synchronize(rec));
    EXPECT_OK(hal_stream_destroy(rec));
    EXPECT_OK(hal_stream_destroy(waiter));
    tt_gate_destroy(&gate);
    fx_close(&fx);
    return CTEST_PASS;
}

/* Elapsed time between two timing events around a slow transfer (the emulator's bandwidth
 * model makes 16 MiB at 0.25 GB/s take about 67 ms). */
CTEST(TrnEvent, ElapsedTime)
{
    TT_REQUIRE_EMULATOR();
    fixture_t fx;
    tt_env_reset();
    tt_setenv("NEURON_EMU_DMA_GBPS", "0.25");
    EXPECT_OK(fx_open(&fx));
    hal_stream_t s = NULL;
    hal_event_t start = NULL, end = NULL, plain = NULL;
    uint8_t *d = NULL;
    const size_t n = 16u << 20;
    uint8_t *host = calloc(1, n);
    CTEST_EXPECT(host != NULL);
    EXPECT_OK(hal_stream_create(fx.dev[0], 0, &s));
    EXPECT_OK(hal_event_create(fx.dev[0], HAL_EVENT_FLAG_TIMING, &start));
    EXPECT_OK(hal_event_create(fx.dev[0], HAL_EVENT_FLAG_TIMING, &end));
    EXPECT_OK(hal_event_create(fx.dev[0], 0, &plain));
    EXPECT_OK(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, n, 0, (void **)&d));
    float ms = -1;
    EXPECT_STATUS(hal_event_elapsed_ms(start, end, &ms), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("never recorded");
    if (!ctest_failures_so_far()) {
        tt_gate_t gate;
        tt_gate_init(&gate);
        struct timespec host_before, host_after;
        clock_gettime(CLOCK_MONOTONIC, &host_before);
        EXPECT_OK(hal_event_record(start, s));
        EXPECT_OK(hal_stream_add_callback(s, tt_gate_cb, &gate));
        EXPECT_OK(hal_memcpy_async(d, host, n, s));
        EXPECT_OK(hal_event_record(end, s));
        EXPECT_OK(hal_event_synchronize(start));
        EXPECT_STATUS(hal_event_elapsed_ms(start, end, &ms), HAL_NOT_READY);
        tt_gate_open(&gate);
        EXPECT_OK(hal_event_synchronize(end));
        clock_gettime(CLOCK_MONOTONIC, &host_after);
        double host_span_ms = (double)(host_after.tv_sec - host_before.tv_sec) * 1e3 +
                              (double)(host_after.tv_nsec - host_before.tv_nsec) / 1e6;
        EXPECT_OK(hal_event_elapsed_ms(start, end, &ms));
        /* At least the throttled copy (16 MiB at 0.25 GB/s); at most the host's span around
         * both events (+1 ms of resolution). */
        CTEST_EXPECT(ms >= 50.0f && ms <= host_span_ms + 1.0);
        float back = 0;
        EXPECT_OK(hal_event_elapsed_ms(end, start, &back));
        CTEST_EXPECT(back == -ms);
        EXPECT_OK(hal_event_record(plain, s));
        EXPECT_STATUS(hal_event_elapsed_ms(start, plain, &ms), HAL_ERROR_INVALID_ARGUMENT);
        EXPECT_OK(hal_stream_synchronize(s));
        tt_gate_destroy(&gate);
    }
    hal_mem_free(d);
    free(host);
    hal_event_destroy(start);
    hal_event_destroy(end);
    hal_event_destroy(plain);
    EXPECT_OK(hal_stream_destroy(s));
    fx_close(&fx);
    return CTEST_PASS;
}

/* device_synchronize waits for every stream of the core (and only of that core); stream
 * destruction waits for the stream's work. */
CTEST(TrnStream, DeviceSynchronizeAndDestroyWait)
{
    fixture_t fx;
    tt_env_reset();
    EXPECT_OK(fx_open(&fx));
    hal_stream_t a = NULL, b = NULL, other = NULL;
    tt_gate_t ga, gb, go;
    tt_gate_init(&ga);
    tt_gate_init(&gb);
    tt_gate_init(&go);
    thread_probe_t pa = { .caller = pthread_self() }, pb = { .caller = pthread_self() };
    atomic_init(&pa.runs, 0);
    atomic_init(&pb.runs, 0);
    atomic_init(&pa.on_caller, 0);
    atomic_init(&pb.on_caller, 0);
    atomic_init(&pa.status, -1);
    atomic_init(&pb.status, -1);
    EXPECT_OK(hal_stream_create(fx.dev[0], 0, &a));
    EXPECT_OK(hal_stream_create(fx.dev[0], -2, &b));
    EXPECT_OK(hal_stream_create(fx.dev[1], 0, &other));
    EXPECT_OK(hal_stream_add_callback(a, tt_gate_cb, &ga));
    EXPECT_OK(hal_stream_add_callback(a, probe_cb, &pa));
    EXPECT_OK(hal_stream_add_callback(b, tt_gate_cb, &gb));
    EXPECT_OK(hal_stream_add_callback(b, probe_cb, &pb));
    EXPECT_OK(hal_stream_add_callback(other, tt_gate_cb, &go)); /* stays closed */
    pthread_t t1, t2;
    bool s1 = tt_gate_open_after(&ga, 20, &t1), s2 = tt_gate_open_after(&gb, 40, &t2);
    CTEST_EXPECT(s1 && s2);
    EXPECT_OK(hal_device_synchronize(fx.dev[0]));
    CTEST_EXPECT(atomic_load(&pa.runs) == 1 && atomic_load(&pb.runs) == 1);
    CTEST_EXPECT(hal_stream_query(other) == HAL_NOT_READY);
    if (s1)
        pthread_join(t1, NULL);
    if (s2)
        pthread_join(t2, NULL);

    /* Destroy waits: the callback behind the gate has run when destroy returns. */
    thread_probe_t po = { .caller = pthread_self() };
    atomic_init(&po.runs, 0);
    atomic_init(&po.on_caller, 0);
    atomic_init(&po.status, -1);
    EXPECT_OK(hal_stream_add_callback(other, probe_cb, &po));
    pthread_t t3;
    bool s3 = tt_gate_open_after(&go, 20, &t3);
    if (!s3)
        tt_gate_open(&go);
    EXPECT_OK(hal_stream_destroy(other));
    CTEST_EXPECT(atomic_load(&po.runs) == 1);
    if (s3)
        pthread_join(t3, NULL);
    EXPECT_OK(hal_stream_destroy(a));
    EXPECT_OK(hal_stream_destroy(b));
    tt_gate_destroy(&ga);
    tt_gate_destroy(&gb);
    tt_gate_destroy(&go);
    fx_close(&fx);
    return CTEST_PASS;
}

/* When more streams have transfers than the core runs at once, the higher-priority stream goes
 * first. Two slow device copies occupy both of the core's slots (the emulator at 62.5 MB/s
 * takes about 270 ms for the first and 540 ms for the second, twice as large, one after the
 * other: the core's DMA is shared); a low-priority stream then queues a copy, and 40 ms later a
 * high-priority one, both into the same host buffer: the high-priority copy runs as soon as the
 * first slot comes free, the low-priority one after it, so the buffer ends up holding the
 * low-priority stream's bytes. (Host-to-host copies need a slot but no DMA, so they finish the
 * moment they run.) The second copy is the larger one so that the slots come free far apart
 * even where the emulator's own memcpy outlasts its DMA model (under ThreadSanitizer both
 * copies would otherwise end together, and both waiting streams would run at once.) */
CTEST(TrnStream, PriorityOrdersWaitingTransfers)
{
    TT_REQUIRE_EMULATOR();
    fixture_t fx;
    tt_env_reset();
    tt_setenv("NEURON_EMU_DMA_GBPS", "0.0625");
    EXPECT_OK(fx_open(&fx));
    const size_t big = 16u << 20, size[2] = { big, 2 * big };
    hal_stream_t busy[2] = { NULL, NULL }, low = NULL, high = NULL;
    uint8_t *d[2] = { NULL, NULL }, *host = calloc(1, 2 * big);
    uint8_t from_low[64], from_high[64], shared[64];
    memset(from_low, 'L', sizeof(from_low));
    memset(from_high, 'H', sizeof(from_high));
    memset(shared, 0, sizeof(shared));
    CTEST_EXPECT(host != NULL);
    for (int i = 0; i < 2; i++) {
        EXPECT_OK(hal_stream_create(fx.dev[0], 0, &busy[i]));
        EXPECT_OK(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, size[i], 0, (void **)&d[i]));
    }
    EXPECT_OK(hal_stream_create(fx.dev[0], 0, &low));
    EXPECT_OK(hal_stream_create(fx.dev[0], -2, &high));
    if (!ctest_failures_so_far()) {
        for (int i = 0; i < 2; i++)
            EXPECT_OK(hal_memcpy_async(d[i], host, size[i], busy[i]));
        sleep_ms(40);
        EXPECT_OK(hal_memcpy_async(shared, from_low, sizeof(shared), low));
        sleep_ms(40);
        EXPECT_OK(hal_memcpy_async(shared, from_high, sizeof(shared), high));
        CTEST_EXPECT(hal_stream_query(low) == HAL_NOT_READY); /* both slots are still busy */
        EXPECT_OK(hal_stream_synchronize(low));
        EXPECT_OK(hal_stream_synchronize(high));
        if (shared[0] != 'L')
            fprintf(stderr, "the %s-priority copy ran last\n", shared[0] == 'H' ? "high" : "?");
        CTEST_EXPECT(tt_find_other(shared, sizeof(shared), 'L') == sizeof(shared));
    }
    for (int i = 0; i < 2; i++) {
        hal_stream_destroy(busy[i]);
        hal_mem_free(d[i]);
    }
    hal_stream_destroy(low);
    hal_stream_destroy(high);
    free(host);
    fx_close(&fx);
    return CTEST_PASS;
}

/* A runtime failure latches on its stream with the call, the code and its name: later data
 * work is refused or skipped, callbacks and events are told, other streams go on. */
/* A small transfer on an idle stream runs on the caller: done when the call returns, no
 * synchronize needed, even with a failure injected (it latches as on the worker). A large one
 * (the emulator's DMA slowed to 62.5 MB/s: 4 MiB take about 64 ms) is left to the worker, so the
 * caller gets on while it runs, and a small one behind it waits its turn. */
CTEST(TrnStream, SmallTransfersOnAnIdleStreamRunOnTheCaller)
{
    TT_REQUIRE_EMULATOR();
    fixture_t fx;
    tt_env_reset();
    tt_setenv("NEURON_EMU_DMA_GBPS", "0.0625");
    tt_setenv("NEURON_EMU_FAULTS", "write_fail_after=2:1");
    EXPECT_OK(fx_open(&fx));
    const size_t big = 4u << 20;
    hal_stream_t s = NULL;
    uint8_t *d = NULL, *host = calloc(1, big), small[64], back[64];
    memset(small, 'S', sizeof(small));
    memset(back, 0, sizeof(back));
    CTEST_EXPECT(host != NULL);
    EXPECT_OK(hal_stream_create(fx.dev[0], 0, &s));
    EXPECT_OK(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, big, 0, (void **)&d));
    if (!ctest_failures_so_far()) {
        EXPECT_OK(hal_memcpy_async(d, small, sizeof(small), s)); /* write 1 */
        EXPECT_OK(hal_memcpy_async(back, d, sizeof(back), s));
        CTEST_EXPECT(tt_find_other(back, sizeof(back), 'S') == sizeof(back));
        EXPECT_OK(hal_stream_query(s));

        EXPECT_OK(hal_memcpy_async(d, host, big, s)); /* write 2, on the worker */
        EXPECT_OK(hal_memcpy_async(back, d + big - sizeof(back), sizeof(back), s));
        CTEST_EXPECT(hal_stream_query(s) == HAL_NOT_READY);
        CTEST_EXPECT(tt_find_other(back, sizeof(back), 'S') == sizeof(back));
        EXPECT_OK(hal_stream_synchronize(s));
        CTEST_EXPECT(tt_find_other(back, sizeof(back), 0) == sizeof(back));

        EXPECT_OK(hal_memcpy_async(d, small, sizeof(small), s)); /* write 3 fails, inline */
        EXPECT_STATUS(hal_stream_query(s), HAL_ERROR_BACKEND_SPECIFIC);
        EXPECT_MESSAGE("nrt_tensor_write(tensor of NeuronCore 0, offset 0, 64 bytes) "
                       "returned NRT_FAILURE (1)");
        EXPECT_STATUS(hal_memcpy_async(back, d, sizeof(back), s), HAL_ERROR_BACKEND_SPECIFIC);
    }
    hal_stream_destroy(s);
    hal_mem_free(d);
    free(host);
    fx_close(&fx);
    return CTEST_PASS;
}

CTEST(TrnStream, LatchedRuntimeError)
{
    TT_REQUIRE_EMULATOR();
    fixture_t fx;
    tt_env_reset();
    tt_setenv("NEURON_EMU_FAULTS", "write_fail_after=1:1");
    EXPECT_OK(fx_open(&fx));
    hal_stream_t s = NULL, other = NULL;
    hal_event_t e = NULL;
    uint8_t *d = NULL, host[64] = { 0 }, back[64];
    EXPECT_OK(hal_stream_create(fx.dev[0], 0, &s));
    EXPECT_OK(hal_stream_create(fx.dev[0], 0, &other));
    EXPECT_OK(hal_event_create(fx.dev[0], 0, &e));
    EXPECT_OK(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, 4096, 0, (void **)&d));
    thread_probe_t probe = { .caller = pthread_self() };
    atomic_init(&probe.runs, 0);
    atomic_init(&probe.on_caller, 0);
    atomic_init(&probe.status, -1);
    tt_gate_t gate;
    tt_gate_init(&gate);
    if (!ctest_failures_so_far()) {
        /* Everything is queued before any of it runs. */
        EXPECT_OK(hal_stream_add_callback(s, tt_gate_cb, &gate));
        EXPECT_OK(hal_memcpy_async(d, host, 64, s));             /* write 1: fine */
        EXPECT_OK(hal_memcpy_async(d + 100, host, 64, s));       /* write 2: fails */
        EXPECT_OK(hal_memset_async(d, 7, 64, s));                /* skipped */
        EXPECT_OK(hal_stream_add_callback(s, probe_cb, &probe)); /* runs, told */
        EXPECT_OK(hal_event_record(e, s));
        tt_gate_open(&gate);
        EXPECT_STATUS(hal_stream_synchronize(s), HAL_ERROR_BACKEND_SPECIFIC);
        EXPECT_MESSAGE("nrt_tensor_write(tensor of NeuronCore 0, offset 100, 64 bytes) "
                       "returned NRT_FAILURE (1)");
        CTEST_EXPECT(atomic_load(&probe.runs) == 1);
        CTEST_EXPECT(atomic_load(&probe.status) == HAL_ERROR_BACKEND_SPECIFIC);
        EXPECT_STATUS(hal_event_query(e), HAL_ERROR_BACKEND_SPECIFIC);
        EXPECT_STATUS(hal_event_synchronize(e), HAL_ERROR_BACKEND_SPECIFIC);
        /* Sticky on the stream. */
        EXPECT_STATUS(hal_stream_query(s), HAL_ERROR_BACKEND_SPECIFIC);
        EXPECT_STATUS(hal_memcpy_async(back, d, 64, s), HAL_ERROR_BACKEND_SPECIFIC);
        EXPECT_MESSAGE("the stream failed earlier: nrt_tensor_write(");
        /* Not a device loss: another stream works, and the memset above never ran. */
        EXPECT_OK(hal_memcpy_async(back, d, 64, other));
        EXPECT_OK(hal_stream_synchronize(other));
        CTEST_EXPECT(tt_find_other(back, 64, 0) == 64);
        EXPECT_STATUS(hal_device_synchronize(fx.dev[0]), HAL_ERROR_BACKEND_SPECIFIC);
        EXPECT_OK(hal_device_synchronize(fx.dev[1]));
    }
    tt_gate_open(&gate);
    hal_mem_free(d);
    hal_event_destroy(e);
    EXPECT_STATUS(hal_stream_destroy(s), HAL_ERROR_BACKEND_SPECIFIC);
    tt_gate_destroy(&gate);
    EXPECT_OK(hal_stream_destroy(other));
    fx_close(&fx);
    return CTEST_PASS;
}
