/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend internals that the public API cannot isolate: the NRT status mapping and
 * messages, the priority order of the per-core execution slots, and stream host functions
 * (the 1.1 slot stream_launch_host_fn), driven directly with a minimal host-services struct
 * and a runtime table that has only what the code under test calls. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "hal_backends/trainium/trn_internal.h"
#include "tools/ctest/ctest.h"
#include "tools/ctest/ctest_host.h"

/* ---- status mapping ------------------------------------------------------------------------ */

CTEST(TrnUnit, StatusMapping)
{
    static const struct {
        NRT_STATUS rc;
        trn_nrt_op_t op;
        hal_status_t want;
    } cases[] = {
        { NRT_SUCCESS, TRN_OP_OTHER, HAL_OK },
        { NRT_RESOURCE, TRN_OP_ALLOC, HAL_ERROR_OUT_OF_DEVICE_MEMORY },
        { NRT_RESOURCE, TRN_OP_OTHER, HAL_ERROR_BACKEND_SPECIFIC },
        { NRT_INVALID, TRN_OP_OTHER, HAL_ERROR_INVALID_ARGUMENT },
        { NRT_INVALID, TRN_OP_ALLOC, HAL_ERROR_INVALID_ARGUMENT },
        { NRT_HW_ERROR, TRN_OP_OTHER, HAL_ERROR_DEVICE_LOST },
        { NRT_HW_ERROR, TRN_OP_ALLOC, HAL_ERROR_DEVICE_LOST },
        { NRT_EXEC_UNIT_UNRECOVERABLE, TRN_OP_OTHER, HAL_ERROR_DEVICE_LOST },
        { NRT_EXEC_HW_ERR_HBM_UE, TRN_OP_OTHER, HAL_ERROR_DEVICE_LOST },
        { NRT_EXEC_HW_ERR_DMA_ABORT, TRN_OP_OTHER, HAL_ERROR_DEVICE_LOST },
        { NRT_TIMEOUT, TRN_OP_OTHER, HAL_ERROR_TIMEOUT },
        { NRT_FAILURE, TRN_OP_OTHER, HAL_ERROR_BACKEND_SPECIFIC },
        { NRT_INVALID_HANDLE, TRN_OP_OTHER, HAL_ERROR_BACKEND_SPECIFIC },
        { NRT_UNINITIALIZED, TRN_OP_OTHER, HAL_ERROR_BACKEND_SPECIFIC },
        { NRT_CLOSED, TRN_OP_ALLOC, HAL_ERROR_BACKEND_SPECIFIC },
        { NRT_QUEUE_FULL, TRN_OP_OTHER, HAL_ERROR_BACKEND_SPECIFIC },
        { (NRT_STATUS)12345, TRN_OP_OTHER, HAL_ERROR_BACKEND_SPECIFIC },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hal_status_t got = trn_status_from_nrt(cases[i].rc, cases[i].op);
        if (got != cases[i].want)
            fprintf(stderr, "NRT status %d: %s, expected %s\n", (int)cases[i].rc,
                    hq_status_name(got), hq_status_name(cases[i].want));
        CTEST_CHECK(got == cases[i].want);
    }
    CTEST_CHECK(strcmp(trn_status_nrt_name(NULL, NRT_RESOURCE), "NRT_RESOURCE") == 0);
    CTEST_CHECK(strcmp(trn_status_nrt_name(NULL, NRT_NETWORK_PROXY_FAILURE),
                       "NRT_NETWORK_PROXY_FAILURE") == 0);
    CTEST_CHECK(strcmp(trn_status_nrt_name(NULL, (NRT_STATUS)8), "UNKNOWN STATUS") == 0);
    CTEST_CHECK(strcmp(hq_status_name(HAL_ERROR_DEVICE_LOST), "HAL_ERROR_DEVICE_LOST") == 0);
    return CTEST_PASS;
}

static const char *runtime_name(NRT_STATUS status)
{
    return status == NRT_RESOURCE ? "NRT_RESOURCE" : NULL;
}

CTEST(TrnUnit, StatusMessages)
{
    char buf[TRN_MSG_MAX];
    hal_status_t st =
        trn_status_format(NULL, NRT_RESOURCE, TRN_OP_ALLOC, buf, sizeof(buf),
                          "nrt_tensor_allocate(DEVICE, vnc %u, %zu)", 0u, (size_t)4096);
    CTEST_CHECK(st == HAL_ERROR_OUT_OF_DEVICE_MEMORY);
    CTEST_CHECK(strcmp(buf, "nrt_tensor_allocate(DEVICE, vnc 0, 4096) returned NRT_RESOURCE (4): "
                            "out of device memory") == 0);
    st = trn_status_format(NULL, NRT_HW_ERROR, TRN_OP_OTHER, buf, sizeof(buf), "%s", "nrt_x");
    CTEST_CHECK(st == HAL_ERROR_DEVICE_LOST);
    CTEST_CHECK(strcmp(buf, "nrt_x returned NRT_HW_ERROR (6): hardware error, the device is "
                            "lost") == 0);
    /* The runtime's own names win; where it has none, the backend's table answers. */
    trn_nrt_t nrt;
    memset(&nrt, 0, sizeof(nrt));
    nrt.get_status_as_str = runtime_name;
    CTEST_CHECK(strcmp(trn_status_nrt_name(&nrt, NRT_RESOURCE), "NRT_RESOURCE") == 0);
    CTEST_CHECK(strcmp(trn_status_nrt_name(&nrt, NRT_TIMEOUT), "NRT_TIMEOUT") == 0);
    /* Truncation is safe. */
    char tiny[8];
    trn_status_format(NULL, NRT_INVALID, TRN_OP_OTHER, tiny, sizeof(tiny), "%s",
                      "a_very_long_call_name");
    CTEST_CHECK(strlen(tiny) == sizeof(tiny) - 1);
    return CTEST_PASS;
}

/* ---- scheduler ----------------------------------------------------------------------------- */

typedef struct contender {
    hq_sched_t *sched;
    int32_t priority;
    char name;
    pthread_mutex_t *lock;
    char *order;
} contender_t;

static void *contend(void *arg)
{
    contender_t *c = arg;
    pthread_cond_t cv;
    pthread_cond_init(&cv, NULL);
    hq_sched_acquire(c->sched, c->priority, &cv);
    pthread_mutex_lock(c->lock);
    size_t n = strlen(c->order);
    c->order[n] = c->name;
    c->order[n + 1] = '\0';
    pthread_mutex_unlock(c->lock);
    hq_sched_release(c->sched);
    pthread_cond_destroy(&cv);
    return NULL;
}

static bool wait_waiting(hq_sched_t *sched, uint32_t n)
{
    for (int i = 0; i < 20000; i++) {
        if (hq_sched_waiting(sched) == n)
            return true;
        struct timespec ts = { 0, 100000 };
        nanosleep(&ts, NULL);
    }
    return false;
}

/* Waiters get a freed slot by priority (numerically lower first), FIFO within a priority. */
CTEST(TrnUnit, SchedulerPriorityOrder)
{
    hq_sched_t sched;
    CTEST_CHECK(hq_sched_init(&sched, 1, 0) == HAL_OK);
    pthread_cond_t cv;
    pthread_cond_init(&cv, NULL);
    hq_sched_acquire(&sched, 0, &cv); /* the only slot */
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    char order[8] = "";
    contender_t c[4] = {
        { &sched, 0, 'a', &lock, order },
        { &sched, -2, 'H', &lock, order },
        { &sched, 0, 'b', &lock, order },
        { &sched, -1, 'M', &lock, order },
    };
    pthread_t t[4];
    bool ok = true;
    for (int i = 0; i < 4; i++) {
        pthread_create(&t[i], NULL, contend, &c[i]);
        ok = ok && wait_waiting(&sched, (uint32_t)i + 1);
    }
    hq_sched_release(&sched);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    pthread_cond_destroy(&cv);
    hq_sched_destroy(&sched);
    if (strcmp(order, "HMab") != 0)
        fprintf(stderr, "slot order \"%s\", expected \"HMab\"\n", order);
    CTEST_CHECK(ok);
    CTEST_CHECK(strcmp(order, "HMab") == 0);
    return CTEST_PASS;
}

/* ---- host functions ------------------------------------------------------------------------ */

static NRT_STATUS fake_stats(uint32_t vnc, nrt_vnc_memory_stats_t *stats, size_t in, size_t *out)
{
    stats->bytes_used = 0;
    stats->bytes_limit = (size_t)1 << 30;
    *out = sizeof(*stats);
    return NRT_SUCCESS;
}

typedef struct fn_probe {
    atomic_int runs;
    atomic_int seen_status;
    hal_status_t result;
    const char *message; /* left through set_error before failing */
} fn_probe_t;

static hal_status_t host_fn(void *arg, hal_status_t stream_status)
{
    fn_probe_t *p = arg;
    atomic_fetch_add(&p->runs, 1);
    atomic_store(&p->seen_status, (int)stream_status);
    if (p->message != NULL)
        ctest_host_services.set_error("%s", p->message);
    return p->result;
}

static void leave_stale_detail(hal_status_t status, void *arg)
{
    ctest_host_services.set_error("a stale detail that must not be latched");
}

/* Host functions run in stream order without an execution slot (the HAL's collectives block
 * in them); a failure latches with the detail the function left; later ones are told. */
CTEST(TrnUnit, LaunchHostFn)
{
    trn_backend_t backend;
    memset(&backend, 0, sizeof(backend));
    backend.host = &ctest_host_services;
    backend.nrt.get_vnc_memory_stats = fake_stats;
    backend.device_count = 1;
    atomic_init(&backend.runtime_up, true); /* a started runtime reports the core's memory */
    void *dev_ = NULL, *stream_ = NULL;
    CTEST_CHECK(trn_device_open(&backend, 0, &dev_) == HAL_OK);
    trn_device_t *dev = dev_;
    CTEST_CHECK(dev->total_memory == ((uint64_t)1 << 30));
    CTEST_CHECK(hq_stream_create(dev, 0, &stream_) == HAL_OK);

    /* Hold every slot of the core: host functions and callbacks must still run. */
    pthread_cond_t cv;
    pthread_cond_init(&cv, NULL);
    for (unsigned i = 0; i < TRN_DEVICE_SLOTS; i++)
        hq_sched_acquire(&dev->hq.sched, 0, &cv);

    fn_probe_t ok = { .result = HAL_OK },
               bad = { .result = HAL_ERROR_REMOTE, .message = "peer 3 vanished" },
               after = { .result = HAL_OK }, quiet = { .result = HAL_ERROR_TIMEOUT };
    atomic_init(&ok.runs, 0);
    atomic_init(&bad.runs, 0);
    atomic_init(&after.runs, 0);
    atomic_init(&quiet.runs, 0);
    CTEST_CHECK(hq_stream_launch_host_fn(stream_, host_fn, &ok) == HAL_OK);
    CTEST_CHECK(hq_stream_synchronize(stream_) == HAL_OK);
    CTEST_CHECK(atomic_load(&ok.runs) == 1 && atomic_load(&ok.seen_status) == HAL_OK);

    CTEST_CHECK(hq_stream_add_callback(stream_, leave_stale_detail, NULL) == HAL_OK);
    CTEST_CHECK(hq_stream_launch_host_fn(stream_, host_fn, &bad) == HAL_OK);
    CTEST_CHECK(hq_stream_launch_host_fn(stream_, host_fn, &after) == HAL_OK);
    CTEST_CHECK(hq_stream_synchronize(stream_) == HAL_ERROR_REMOTE);
    const char *msg = ctest_host_services.take_error();
    CTEST_CHECK(msg != NULL && strstr(msg, "the stream failed earlier: peer 3 vanished") != NULL);
    CTEST_CHECK(atomic_load(&after.runs) == 1);
    CTEST_CHECK(atomic_load(&after.seen_status) == HAL_ERROR_REMOTE);
    CTEST_CHECK(hq_stream_destroy(stream_) == HAL_ERROR_REMOTE);

    /* A failure without a detail is named by its status, not by a stale detail. */
    CTEST_CHECK(hq_stream_create(dev, 0, &stream_) == HAL_OK);
    CTEST_CHECK(hq_stream_add_callback(stream_, leave_stale_detail, NULL) == HAL_OK);
    CTEST_CHECK(hq_stream_launch_host_fn(stream_, host_fn, &quiet) == HAL_OK);
    CTEST_CHECK(hq_stream_synchronize(stream_) == HAL_ERROR_TIMEOUT);
    msg = ctest_host_services.take_error();
    CTEST_CHECK(msg != NULL &&
                strstr(msg, "a stream host function failed with HAL_ERROR_TIMEOUT") != NULL);
    CTEST_CHECK(hq_device_synchronize(dev) == HAL_ERROR_TIMEOUT);
    CTEST_CHECK(hq_stream_destroy(stream_) == HAL_ERROR_TIMEOUT);

    for (unsigned i = 0; i < TRN_DEVICE_SLOTS; i++)
        hq_sched_release(&dev->hq.sched);
    pthread_cond_destroy(&cv);
    trn_device_close(dev);
    return CTEST_PASS;
}
