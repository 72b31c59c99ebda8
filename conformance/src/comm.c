/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance: collectives (hal_comm.h). Every collective over every dtype, operation, count,
 * root and placement with exact-arithmetic inputs, on 1 to 4 ranks that are threads of this
 * process or processes of their own; the communicator's life cycle (unique ids, blocking and
 * non-blocking init, rendezvous through a store, info, finalize, destroy) and its argument
 * checks. Point to point, groups and barriers are in comm_p2p.c, failures in comm_fail.c, the
 * ranks, jobs and data in comm_rank.c and comm_data.c. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cts_comm.h"

/* ---- Sweeps of every collective -------------------------------------------------------------- */

static void sweep_rank(cc_rank_t *r)
{
    cc_sweep(r, (cc_kind_t)r->param);
}

const cc_scenario_t cc_scenario_sweep = { "sweep", sweep_rank, 0 };

/* Bodies <kind>_threads_<n> and <kind>_processes_<n> for n = 1..4. */
#define CC_SWEEP_BODY(kind, KIND, mode, MODE, n)                                 \
    int cts_comm_##kind##_##mode##_##n(cts_ctx_t *ctx)                           \
    {                                                                            \
        return cc_run_simple(ctx, &cc_scenario_sweep, (int)(KIND), (MODE), (n)); \
    }
#define CC_SWEEP_BODIES(kind, KIND)                       \
    CC_SWEEP_BODY(kind, KIND, threads, CC_THREADS, 1)     \
    CC_SWEEP_BODY(kind, KIND, threads, CC_THREADS, 2)     \
    CC_SWEEP_BODY(kind, KIND, threads, CC_THREADS, 3)     \
    CC_SWEEP_BODY(kind, KIND, threads, CC_THREADS, 4)     \
    CC_SWEEP_BODY(kind, KIND, processes, CC_PROCESSES, 1) \
    CC_SWEEP_BODY(kind, KIND, processes, CC_PROCESSES, 2) \
    CC_SWEEP_BODY(kind, KIND, processes, CC_PROCESSES, 3) \
    CC_SWEEP_BODY(kind, KIND, processes, CC_PROCESSES, 4)

CC_SWEEP_BODIES(allreduce, CC_ALLREDUCE)
CC_SWEEP_BODIES(broadcast, CC_BROADCAST)
CC_SWEEP_BODIES(reduce, CC_REDUCE)
CC_SWEEP_BODIES(allgather, CC_ALLGATHER)
CC_SWEEP_BODIES(reduce_scatter, CC_REDUCE_SCATTER)
CC_SWEEP_BODIES(alltoall, CC_ALLTOALL)

/* ---- Types and ids --------------------------------------------------------------------------- */

/* Element sizes, and the enum values that must match NCCL's (backends map them 1:1). */
int cts_comm_dtype_get_size(cts_ctx_t *ctx)
{
    static const struct {
        hal_dtype_t dtype;
        int nccl;
        size_t size;
    } table[] = {
        { HAL_DTYPE_I8, 0, 1 },   { HAL_DTYPE_U8, 1, 1 },       { HAL_DTYPE_I32, 2, 4 },
        { HAL_DTYPE_U32, 3, 4 },  { HAL_DTYPE_I64, 4, 8 },      { HAL_DTYPE_U64, 5, 8 },
        { HAL_DTYPE_F16, 6, 2 },  { HAL_DTYPE_F32, 7, 4 },      { HAL_DTYPE_F64, 8, 8 },
        { HAL_DTYPE_BF16, 9, 2 }, { HAL_DTYPE_F8_E4M3, 10, 1 }, { HAL_DTYPE_F8_E5M2, 11, 1 },
    };
    (void)ctx;
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        size_t size = 0;
        CTS_CHECKF((int)table[i].dtype == table[i].nccl, "dtype %s has value %d, NCCL's is %d",
                   cc_dtype_name(table[i].dtype), (int)table[i].dtype, table[i].nccl);
        CTS_CHECK_OK(hal_dtype_get_size(table[i].dtype, &size));
        CTS_CHECKF(size == table[i].size, "hal_dtype_get_size(%s) = %zu, expected %zu",
                   cc_dtype_name(table[i].dtype), size, table[i].size);
    }
    CTS_CHECK(HAL_DTYPE_COUNT == 12);
    CTS_CHECK(HAL_REDOP_SUM == 0 && HAL_REDOP_PROD == 1 && HAL_REDOP_MAX == 2 &&
              HAL_REDOP_MIN == 3 && HAL_REDOP_AVG == 4 && HAL_REDOP_COUNT == 5);
    CTS_CHECK(sizeof(hal_unique_id_t) == HAL_UNIQUE_ID_BYTES && HAL_UNIQUE_ID_BYTES == 128);
    size_t size = 77;
    CTS_CHECK_STATUS(hal_dtype_get_size(HAL_DTYPE_COUNT, &size), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_dtype_get_size((hal_dtype_t)-1, &size), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_dtype_get_size(HAL_DTYPE_FORCE_U32, &size), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECKF(size == 77, "a rejected hal_dtype_get_size wrote its output");
    CTS_CHECK_STATUS(hal_dtype_get_size(HAL_DTYPE_F32, NULL), HAL_ERROR_INVALID_ARGUMENT);
    return CTS_PASS;
}

/* Ids carry a random secret: two are never equal. Bad arguments leave the output alone. */
int cts_comm_get_unique_id(cts_ctx_t *ctx)
{
    hal_unique_id_t a, b, c;
    (void)ctx;
    CTS_CHECK_OK(hal_comm_get_unique_id(HAL_COMM_ID_FLAG_STORE, &a));
    CTS_CHECK_OK(hal_comm_get_unique_id(HAL_COMM_ID_FLAG_STORE, &b));
    CTS_CHECKF(memcmp(&a, &b, sizeof(a)) != 0, "two unique ids are equal");
    CTS_CHECK_STATUS(hal_comm_get_unique_id(0, NULL), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_comm_get_unique_id(HAL_COMM_ID_FLAG_STORE, NULL),
                     HAL_ERROR_INVALID_ARGUMENT);
    memset(&c, 0x77, sizeof(c));
    CTS_CHECK_STATUS(hal_comm_get_unique_id(HAL_COMM_ID_FLAG_STORE << 1, &c),
                     HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_comm_get_unique_id(0xffffffffu, &c), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECKF(cts_bytes_find_other(&c, sizeof(c), 0x77) == sizeof(c),
               "a rejected hal_comm_get_unique_id wrote the id");
    return CTS_PASS;
}

/* ---- Init ------------------------------------------------------------------------------------ */

/* Bytes that differ between two fresh ids are the job's random material (secret, nonce); the
 * others are the id's fixed format. */
static void id_random_bytes(const hal_unique_id_t *a, const hal_unique_id_t *b, bool random[128])
{
    for (size_t i = 0; i < HAL_UNIQUE_ID_BYTES; i++)
        random[i] = a->internal[i] != b->internal[i];
}

/* Every argument error is reported synchronously, without a rendezvous and without output. */
int cts_comm_init_invalid(cts_ctx_t *ctx)
{
    hal_unique_id_t id, other;
    CTS_CHECK_OK(hal_comm_get_unique_id(HAL_COMM_ID_FLAG_STORE, &id));
    CTS_CHECK_OK(hal_comm_get_unique_id(HAL_COMM_ID_FLAG_STORE, &other));
    hal_comm_config_t cfg = HAL_COMM_CONFIG_INIT;
    /* A bad call that started a rendezvous after all would end in HAL_ERROR_TIMEOUT, which the
     * expected statuses rule out. */
    cfg.timeout_ms = 1000;
    hal_comm_t comm = NULL;
#define BAD_INIT(id_, n_, r_, dev_, cfg_, out_, status)                                       \
    do {                                                                                      \
        CTS_CHECK_STATUS(hal_comm_init((id_), (n_), (r_), (dev_), (cfg_), (out_)), (status)); \
        CTS_CHECKF(comm == NULL, "a rejected hal_comm_init wrote a communicator");            \
    } while (0)
    BAD_INIT(NULL, 1, 0, ctx->device, &cfg, &comm, HAL_ERROR_INVALID_ARGUMENT);
    BAD_INIT(&id, 1, 0, ctx->device, &cfg, NULL, HAL_ERROR_INVALID_ARGUMENT);
    BAD_INIT(&id, 0, 0, ctx->device, &cfg, &comm, HAL_ERROR_INVALID_ARGUMENT);
    BAD_INIT(&id, -1, 0, ctx->device, &cfg, &comm, HAL_ERROR_INVALID_ARGUMENT);
    BAD_INIT(&id, 4097, 0, ctx->device, &cfg, &comm, HAL_ERROR_INVALID_ARGUMENT);
    BAD_INIT(&id, 2, -1, ctx->device, &cfg, &comm, HAL_ERROR_INVALID_ARGUMENT);
    BAD_INIT(&id, 2, 2, ctx->device, &cfg, &comm, HAL_ERROR_INVALID_ARGUMENT);
    BAD_INIT(&id, 1, 7, ctx->device, &cfg, &comm, HAL_ERROR_INVALID_ARGUMENT);
    BAD_INIT(&id, 1, 0, NULL, &cfg, &comm, HAL_ERROR_INVALID_HANDLE);
    /* Bad configs: too small, blocking not 0 or 1, an incomplete store. */
    hal_comm_config_t small = cfg;
    small.struct_size = sizeof(hal_comm_config_t) - 1;
    BAD_INIT(&id, 1, 0, ctx->device, &small, &comm, HAL_ERROR_INVALID_ARGUMENT);
    small.struct_size = 0;
    BAD_INIT(&id, 1, 0, ctx->device, &small, &comm, HAL_ERROR_INVALID_ARGUMENT);
    hal_comm_config_t two = cfg;
    two.blocking = 2;
    BAD_INIT(&id, 1, 0, ctx->device, &two, &comm, HAL_ERROR_INVALID_ARGUMENT);
    hal_comm_store_t store = { .struct_size = sizeof(hal_comm_store_t) };
    hal_comm_config_t with_store = cfg;
    with_store.store = &store;
    BAD_INIT(&id, 1, 0, ctx->device, &with_store, &comm, HAL_ERROR_INVALID_ARGUMENT);
    /* Malformed ids: zeros, ones, noise, and a valid id with its fixed part changed. */
    hal_unique_id_t bad;
    memset(&bad, 0, sizeof(bad));
    BAD_INIT(&bad, 1, 0, ctx->device, &cfg, &comm, HAL_ERROR_INVALID_ARGUMENT);
    memset(&bad, 0xff, sizeof(bad));
    BAD_INIT(&bad, 1, 0, ctx->device, &cfg, &comm, HAL_ERROR_INVALID_ARGUMENT);
    cts_pattern_fill(&bad, sizeof(bad), 12345);
    BAD_INIT(&bad, 1, 0, ctx->device, &cfg, &comm, HAL_ERROR_INVALID_ARGUMENT);
    bool random[HAL_UNIQUE_ID_BYTES];
    id_random_bytes(&id, &other, random);
    bad = id;
    for (size_t i = 0; i < HAL_UNIQUE_ID_BYTES; i++)
        if (!random[i])
            bad.internal[i] ^= 0x5a;
    BAD_INIT(&bad, 1, 0, ctx->device, &cfg, &comm, HAL_ERROR_INVALID_ARGUMENT);
#undef BAD_INIT
    return CTS_PASS;
}

/* A one-rank communicator from a TCP id: init, info, async error, native handle, finalize,
 * destroy, and the handle is invalid afterwards. */
int cts_comm_init_single_rank(cts_ctx_t *ctx)
{
    hal_unique_id_t id;
    hal_comm_t comm = NULL;
    CTS_CHECK_OK(hal_comm_get_unique_id(0, &id));
    CTS_CHECK_OK(hal_comm_init(&id, 1, 0, ctx->device, NULL, &comm));
    CTS_CHECK(comm != NULL);
    int nranks = -1, rank = -1;
    hal_device_t dev = NULL;
    int rc = CTS_PASS;
    if (!CTS_EXPECT_OK(hal_comm_get_info(comm, &nranks, &rank, &dev)) ||
        !CTS_EXPECT(nranks == 1 && rank == 0 && dev == ctx->device) ||
        !CTS_EXPECT_OK(hal_comm_get_info(comm, NULL, NULL, NULL)))
        rc = CTS_FAIL;
    hal_status_t async = HAL_ERROR_INTERNAL;
    if (!CTS_EXPECT_OK(hal_comm_get_async_error(comm, &async)) || !CTS_EXPECT_STATUS(async, HAL_OK))
        rc = CTS_FAIL;
    uintptr_t native = 0;
    hal_status_t st = hal_comm_get_native_handle(comm, &native);
    if ((ctx->props.capabilities & HAL_DEVICE_CAP_NATIVE_COLLECTIVES) == 0) {
        /* The HAL runs this communicator's collectives itself. */
        if (!CTS_EXPECT_STATUS(st, HAL_ERROR_UNSUPPORTED) || !CTS_EXPECT(native == 0))
            rc = CTS_FAIL;
    } else if (!CTS_EXPECT_STATUS2(st, HAL_OK, HAL_ERROR_UNSUPPORTED)) {
        rc = CTS_FAIL;
    }
    if (!CTS_EXPECT_STATUS(hal_comm_get_native_handle(comm, NULL), HAL_ERROR_INVALID_ARGUMENT) ||
        !CTS_EXPECT_STATUS(hal_comm_get_async_error(comm, NULL), HAL_ERROR_INVALID_ARGUMENT) ||
        !CTS_EXPECT_OK(hal_comm_finalize(comm)))
        rc = CTS_FAIL;
    CTS_CHECK_OK(hal_comm_destroy(comm));
    CTS_CHECK(rc == CTS_PASS);
    /* Every function rejects the destroyed handle. */
    CTS_CHECK_STATUS(hal_comm_get_info(comm, &nranks, &rank, &dev), HAL_ERROR_INVALID_HANDLE);
    CTS_CHECK_STATUS(hal_comm_get_async_error(comm, &async), HAL_ERROR_INVALID_HANDLE);
    CTS_CHECK_STATUS(hal_comm_get_native_handle(comm, &native), HAL_ERROR_INVALID_HANDLE);
    CTS_CHECK_STATUS(hal_comm_finalize(comm), HAL_ERROR_INVALID_HANDLE);
    CTS_CHECK_STATUS(hal_comm_abort(comm), HAL_ERROR_INVALID_HANDLE);
    CTS_CHECK_STATUS(hal_comm_destroy(comm), HAL_ERROR_INVALID_HANDLE);
    /* ... and so does every collective, without side effect. */
    hal_stream_t s = NULL;
    void *buf = NULL;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    const hal_status_t BAD = HAL_ERROR_INVALID_HANDLE;
    const hal_dtype_t f32 = HAL_DTYPE_F32;
    if (!CTS_EXPECT_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 64, 0, &buf)) ||
        !CTS_EXPECT_STATUS(hal_allreduce(buf, buf, 4, f32, HAL_REDOP_SUM, comm, s), BAD) ||
        !CTS_EXPECT_STATUS(hal_broadcast(buf, buf, 4, f32, 0, comm, s), BAD) ||
        !CTS_EXPECT_STATUS(hal_reduce(buf, buf, 4, f32, HAL_REDOP_SUM, 0, comm, s), BAD) ||
        !CTS_EXPECT_STATUS(hal_allgather(buf, buf, 4, f32, comm, s), BAD) ||
        !CTS_EXPECT_STATUS(hal_reduce_scatter(buf, buf, 4, f32, HAL_REDOP_SUM, comm, s), BAD) ||
        !CTS_EXPECT_STATUS(hal_alltoall(buf, buf, 4, f32, comm, s), BAD) ||
        !CTS_EXPECT_STATUS(hal_send(buf, 4, f32, 0, comm, s), BAD) ||
        !CTS_EXPECT_STATUS(hal_recv(buf, 4, f32, 0, comm, s), BAD) ||
        !CTS_EXPECT_STATUS(hal_barrier(comm, s), BAD) || !CTS_EXPECT_OK(hal_stream_query(s)))
        rc = CTS_FAIL;
    if (buf != NULL && !CTS_EXPECT_OK(hal_mem_free(buf)))
        rc = CTS_FAIL;
    CTS_CHECK_OK(hal_stream_destroy(s));
    return rc;
}

/* NULL and wrong-type communicators, for every function that takes one. */
int cts_comm_invalid_handles(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    void *buf = NULL;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    int rc = CTS_PASS;
    if (!CTS_EXPECT_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 64, 0, &buf)))
        rc = CTS_FAIL;
    hal_comm_t bads[] = { NULL, (hal_comm_t)(void *)s, (hal_comm_t)(void *)ctx->device };
    for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]) && rc == CTS_PASS; i++) {
        hal_comm_t c = bads[i];
        int n = -1;
        hal_status_t async;
        uintptr_t native;
        const hal_status_t BAD = HAL_ERROR_INVALID_HANDLE;
        if (!CTS_EXPECT_STATUS(hal_comm_get_info(c, &n, NULL, NULL), BAD) ||
            !CTS_EXPECT_STATUS(hal_comm_get_async_error(c, &async), BAD) ||
            !CTS_EXPECT_STATUS(hal_comm_get_native_handle(c, &native), BAD) ||
            !CTS_EXPECT_STATUS(hal_comm_finalize(c), BAD) ||
            !CTS_EXPECT_STATUS(hal_comm_abort(c), BAD) ||
            !CTS_EXPECT_STATUS(hal_comm_destroy(c), BAD) ||
            !CTS_EXPECT_STATUS(hal_allreduce(buf, buf, 4, HAL_DTYPE_F32, HAL_REDOP_SUM, c, s),
                               BAD) ||
            !CTS_EXPECT_STATUS(hal_broadcast(buf, buf, 4, HAL_DTYPE_F32, 0, c, s), BAD) ||
            !CTS_EXPECT_STATUS(hal_reduce(buf, buf, 4, HAL_DTYPE_F32, HAL_REDOP_SUM, 0, c, s),
                               BAD) ||
            !CTS_EXPECT_STATUS(hal_allgather(buf, buf, 4, HAL_DTYPE_F32, c, s), BAD) ||
            !CTS_EXPECT_STATUS(hal_reduce_scatter(buf, buf, 4, HAL_DTYPE_F32, HAL_REDOP_SUM, c, s),
                               BAD) ||
            !CTS_EXPECT_STATUS(hal_alltoall(buf, buf, 4, HAL_DTYPE_F32, c, s), BAD) ||
            !CTS_EXPECT_STATUS(hal_send(buf, 4, HAL_DTYPE_F32, 0, c, s), BAD) ||
            !CTS_EXPECT_STATUS(hal_recv(buf, 4, HAL_DTYPE_F32, 0, c, s), BAD) ||
            !CTS_EXPECT_STATUS(hal_barrier(c, s), BAD) || !CTS_EXPECT(n == -1))
            rc = CTS_FAIL;
    }
    /* No side effect: the stream is idle and usable. */
    if (rc == CTS_PASS && !CTS_EXPECT_OK(hal_stream_query(s)))
        rc = CTS_FAIL;
    if (buf != NULL && !CTS_EXPECT_OK(hal_mem_free(buf)))
        rc = CTS_FAIL;
    CTS_CHECK_OK(hal_stream_destroy(s));
    return rc;
}

/* ---- Init of several ranks from threads ------------------------------------------------------ */

typedef struct init_call {
    const hal_unique_id_t *id;
    int nranks, rank;
    hal_device_t device;
    hal_comm_config_t cfg;
    unsigned delay_ms;
    hal_status_t status;
    hal_comm_t comm;
    double ms; /* how long hal_comm_init took */
    char message[512];
} init_call_t;

static void *init_main(void *p)
{
    init_call_t *c = p;
    cts_sleep_ms(c->delay_ms);
    double t0 = cts_now_ms();
    c->status = hal_comm_init(c->id, c->nranks, c->rank, c->device, &c->cfg, &c->comm);
    c->ms = cts_now_ms() - t0;
    snprintf(c->message, sizeof(c->message), "%s",
             c->status == HAL_OK ? "" : hal_last_error_message());
    return NULL;
}

static void init_calls_prepare(cts_ctx_t *ctx, init_call_t *calls, int n, const hal_unique_id_t *id,
                               int nranks, uint32_t timeout_ms)
{
    memset(calls, 0, (size_t)n * sizeof(*calls));
    for (int i = 0; i < n; i++) {
        calls[i].id = id;
        calls[i].nranks = nranks;
        calls[i].rank = i;
        calls[i].cfg = (hal_comm_config_t)HAL_COMM_CONFIG_INIT;
        calls[i].cfg.timeout_ms = timeout_ms;
        calls[i].status = HAL_ERROR_INTERNAL;
        hal_device_get(ctx->backend, (ctx->device_index + (uint32_t)i) % ctx->device_count,
                       &calls[i].device);
    }
}

static void init_calls_destroy(init_call_t *calls, int n)
{
    for (int i = 0; i < n; i++)
        if (calls[i].comm != NULL)
            hal_comm_destroy(calls[i].comm);
}

static int expect_init(const init_call_t *c, hal_status_t expected, const char *who)
{
    if (c->status == expected)
        return 1;
    cts_failf(__FILE__, __LINE__, "%s: hal_comm_init returned %s after %.0f ms, expected %s: %s",
              who, hal_status_string(c->status), c->ms, hal_status_string(expected), c->message);
    return 0;
}

/* A rank whose peer never comes fails with HAL_ERROR_TIMEOUT once the timeout passed, not
 * before. */
int cts_comm_init_missing_rank_times_out(cts_ctx_t *ctx)
{
    hal_unique_id_t id;
    init_call_t c;
    CTS_CHECK_OK(hal_comm_get_unique_id(0, &id));
    init_calls_prepare(ctx, &c, 1, &id, 2, CC_FAIL_TIMEOUT_MS);
    init_main(&c);
    init_calls_destroy(&c, 1);
    CTS_CHECK(expect_init(&c, HAL_ERROR_TIMEOUT, "rank 0 of 2, alone"));
    CTS_CHECK(c.comm == NULL);
    CTS_CHECKF(c.ms >= 0.9 * CC_FAIL_TIMEOUT_MS, "the timeout of %u ms struck after %.0f ms",
               CC_FAIL_TIMEOUT_MS, c.ms);
    return CTS_PASS;
}

/* Ranks that disagree on nranks are detected during the rendezvous. */
int cts_comm_init_nranks_mismatch(cts_ctx_t *ctx)
{
    hal_unique_id_t id;
    init_call_t calls[2];
    pthread_t t[2];
    CTS_CHECK_OK(hal_comm_get_unique_id(0, &id));
    init_calls_prepare(ctx, calls, 2, &id, 2, CC_FAIL_TIMEOUT_MS);
    calls[1].nranks = 3;
    calls[1].delay_ms = 100;
    for (int i = 0; i < 2; i++)
        CTS_CHECK(pthread_create(&t[i], NULL, init_main, &calls[i]) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    init_calls_destroy(calls, 2);
    CTS_CHECK(expect_init(&calls[1], HAL_ERROR_INVALID_ARGUMENT, "rank 1 with nranks 3"));
    CTS_CHECKF(calls[0].status != HAL_OK, "rank 0 with nranks 2 joined a job with a rank that "
                                          "says nranks 3");
    return CTS_PASS;
}

/* A rank claimed twice: the second claim is refused, the job completes with the first. */
int cts_comm_init_rank_taken(cts_ctx_t *ctx)
{
    hal_unique_id_t id;
    init_call_t calls[3];
    pthread_t t[3];
    CTS_CHECK_OK(hal_comm_get_unique_id(0, &id));
    init_calls_prepare(ctx, calls, 3, &id, 2, CC_TIMEOUT_MS);
    calls[1].rank = 0; /* the duplicate, after rank 0 joined */
    calls[1].delay_ms = 300;
    calls[2].rank = 1; /* rank 1 completes the job once the duplicate was refused */
    calls[2].delay_ms = 1500;
    for (int i = 0; i < 3; i++)
        CTS_CHECK(pthread_create(&t[i], NULL, init_main, &calls[i]) == 0);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    int refused = (calls[0].status == HAL_ERROR_INVALID_ARGUMENT) +
                  (calls[1].status == HAL_ERROR_INVALID_ARGUMENT);
    int joined = (calls[0].status == HAL_OK) + (calls[1].status == HAL_OK);
    int rc = CTS_PASS;
    if (refused != 1 || joined != 1) {
        cts_failf(__FILE__, __LINE__,
                  "two claims of rank 0: %s (%s) and %s (%s); expected one HAL_OK and one "
                  "HAL_ERROR_INVALID_ARGUMENT",
                  hal_status_string(calls[0].status), calls[0].message,
                  hal_status_string(calls[1].status), calls[1].message);
        rc = CTS_FAIL;
    }
    if (!expect_init(&calls[2], HAL_OK, "rank 1"))
        rc = CTS_FAIL;
    init_calls_destroy(calls, 3);
    return rc;
}

/* An id with another job's secret cannot join: the impostor is refused with
 * HAL_ERROR_PERMISSION_DENIED and the job still completes with the real rank. */
int cts_comm_init_impostor_refused(cts_ctx_t *ctx)
{
    hal_unique_id_t id, s1, s2, forged;
    init_call_t calls[3];
    pthread_t t[3];
    CTS_CHECK_OK(hal_comm_get_unique_id(0, &id));
    CTS_CHECK_OK(hal_comm_get_unique_id(HAL_COMM_ID_FLAG_STORE, &s1));
    CTS_CHECK_OK(hal_comm_get_unique_id(HAL_COMM_ID_FLAG_STORE, &s2));
    bool random[HAL_UNIQUE_ID_BYTES];
    id_random_bytes(&s1, &s2, random);
    forged = id;
    for (size_t i = 0; i < HAL_UNIQUE_ID_BYTES; i++)
        if (random[i])
            forged.internal[i] ^= 0xa5;
    init_calls_prepare(ctx, calls, 3, &id, 2, CC_TIMEOUT_MS);
    calls[1].id = &forged; /* claims rank 1 with the forged id */
    calls[1].rank = 1;
    calls[1].delay_ms = 100;
    calls[1].cfg.timeout_ms = CC_FAIL_TIMEOUT_MS;
    calls[2].rank = 1; /* the real rank 1, after the impostor */
    calls[2].delay_ms = 600;
    for (int i = 0; i < 3; i++)
        CTS_CHECK(pthread_create(&t[i], NULL, init_main, &calls[i]) == 0);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    int rc = CTS_PASS;
    if (!expect_init(&calls[1], HAL_ERROR_PERMISSION_DENIED, "the impostor") ||
        !expect_init(&calls[0], HAL_OK, "rank 0") || !expect_init(&calls[2], HAL_OK, "rank 1"))
        rc = CTS_FAIL;
    init_calls_destroy(calls, 3);
    return rc;
}

/* blocking = 0: init returns HAL_IN_PROGRESS with a handle; the async error reads
 * HAL_IN_PROGRESS until the last rank joined, then HAL_OK; the communicator then works. */
int cts_comm_init_nonblocking(cts_ctx_t *ctx)
{
    hal_unique_id_t id;
    init_call_t late;
    CTS_CHECK_OK(hal_comm_get_unique_id(0, &id));
    init_calls_prepare(ctx, &late, 1, &id, 2, CC_TIMEOUT_MS);
    late.rank = 1;
    late.device = cts_other_device(ctx) ? cts_other_device(ctx) : ctx->device;
    hal_comm_config_t cfg = HAL_COMM_CONFIG_INIT;
    cfg.timeout_ms = CC_TIMEOUT_MS;
    cfg.blocking = 0;
    cc_local_t job;
    memset(&job, 0, sizeof(job));
    job.nranks = 2;
    job.devices[0] = ctx->device;
    job.devices[1] = late.device;
    CTS_CHECK_STATUS(hal_comm_init(&id, 2, 0, ctx->device, &cfg, &job.comms[0]), HAL_IN_PROGRESS);
    CTS_CHECK(job.comms[0] != NULL);
    int rc = CTS_PASS;
    hal_status_t async = HAL_ERROR_INTERNAL;
    int nranks = 0, rank = -1;
    /* Rank 1 has not started: the rendezvous cannot have completed. */
    if (!CTS_EXPECT_OK(hal_comm_get_async_error(job.comms[0], &async)) ||
        !CTS_EXPECT_STATUS(async, HAL_IN_PROGRESS) ||
        !CTS_EXPECT_OK(hal_comm_get_info(job.comms[0], &nranks, &rank, NULL)) ||
        !CTS_EXPECT(nranks == 2 && rank == 0))
        rc = CTS_FAIL;
    pthread_t t;
    bool started = rc == CTS_PASS && pthread_create(&t, NULL, init_main, &late) == 0;
    if (started) {
        double deadline = cts_now_ms() + CC_TIMEOUT_MS + CC_SLACK_MS;
        do {
            if (!CTS_EXPECT_OK(hal_comm_get_async_error(job.comms[0], &async)))
                break;
            cts_sleep_ms(1);
        } while (async == HAL_IN_PROGRESS && cts_now_ms() < deadline);
        pthread_join(t, NULL);
        job.comms[1] = late.comm;
        if (!CTS_EXPECT_STATUS(async, HAL_OK) || !expect_init(&late, HAL_OK, "rank 1"))
            rc = CTS_FAIL;
    } else {
        rc = CTS_FAIL;
    }
    for (int i = 0; i < 2 && rc == CTS_PASS; i++)
        if (!CTS_EXPECT_OK(hal_stream_create(job.devices[i], 0, &job.streams[i])))
            rc = CTS_FAIL;
    if (rc == CTS_PASS)
        rc = cc_local_allreduce(&job, 1023, 11);
    for (int i = 0; i < 2 && rc == CTS_PASS; i++) {
        hal_status_t st = hal_stream_destroy(job.streams[i]);
        job.streams[i] = NULL;
        if (!CTS_EXPECT_OK(st))
            rc = CTS_FAIL;
        st = hal_comm_destroy(job.comms[i]);
        job.comms[i] = NULL;
        if (!CTS_EXPECT_OK(st))
            rc = CTS_FAIL;
    }
    if (rc != CTS_PASS && job.comms[0] != NULL)
        hal_comm_abort(job.comms[0]);
    cc_local_close(&job);
    return rc;
}

/* ---- A key-value store for rendezvous (torch.distributed's store, in miniature) -------------- */

typedef struct kv_entry {
    struct kv_entry *next;
    char *key;
    void *value;
    size_t size;
} kv_entry_t;

typedef struct kv_store {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    kv_entry_t *head;
    unsigned sets, gets;
    hal_status_t fail_with; /* HAL_OK, or what every call returns */
} kv_store_t;

static void kv_init(kv_store_t *kv)
{
    memset(kv, 0, sizeof(*kv));
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&kv->cv, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&kv->mu, NULL);
}

static void kv_destroy(kv_store_t *kv)
{
    while (kv->head != NULL) {
        kv_entry_t *e = kv->head;
        kv->head = e->next;
        free(e->key);
        free(e->value);
        free(e);
    }
    pthread_cond_destroy(&kv->cv);
    pthread_mutex_destroy(&kv->mu);
}

static kv_entry_t *kv_find(kv_store_t *kv, const char *key)
{
    for (kv_entry_t *e = kv->head; e != NULL; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

static hal_status_t kv_set(void *user_data, const char *key, const void *value, size_t size)
{
    kv_store_t *kv = user_data;
    pthread_mutex_lock(&kv->mu);
    kv->sets++;
    hal_status_t st = kv->fail_with;
    if (st == HAL_OK) {
        kv_entry_t *e = kv_find(kv, key);
        void *copy = malloc(size ? size : 1);
        if (copy == NULL) {
            st = HAL_ERROR_OUT_OF_HOST_MEMORY;
        } else {
            if (size)
                memcpy(copy, value, size);
            if (e == NULL) {
                e = calloc(1, sizeof(*e));
                if (e != NULL)
                    e->key = strdup(key);
                if (e == NULL || e->key == NULL) {
                    free(e);
                    free(copy);
                    st = HAL_ERROR_OUT_OF_HOST_MEMORY;
                    e = NULL;
                } else {
                    e->next = kv->head;
                    kv->head = e;
                }
            } else {
                free(e->value);
            }
            if (e != NULL) {
                e->value = copy;
                e->size = size;
            }
        }
        pthread_cond_broadcast(&kv->cv);
    }
    pthread_mutex_unlock(&kv->mu);
    return st;
}

static hal_status_t kv_get(void *user_data, const char *key, void *value, size_t capacity,
                           size_t *size, uint32_t timeout_ms)
{
    kv_store_t *kv = user_data;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += (time_t)(timeout_ms / 1000);
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&kv->mu);
    kv->gets++;
    hal_status_t st = kv->fail_with;
    kv_entry_t *e = NULL;
    while (st == HAL_OK && (e = kv_find(kv, key)) == NULL) {
        if (pthread_cond_timedwait(&kv->cv, &kv->mu, &deadline) != 0 &&
            (e = kv_find(kv, key)) == NULL) {
            st = HAL_ERROR_TIMEOUT;
            break;
        }
    }
    if (st == HAL_OK && e != NULL) {
        memcpy(value, e->value, e->size < capacity ? e->size : capacity);
        *size = e->size;
    }
    pthread_mutex_unlock(&kv->mu);
    return st;
}

static void kv_as_store(kv_store_t *kv, hal_comm_store_t *store)
{
    *store = (hal_comm_store_t){
        .struct_size = sizeof(*store), .user_data = kv, .set = kv_set, .get = kv_get
    };
}

static void store_rank(cc_rank_t *r)
{
    cc_bufs_t b;
    cc_case_t c = {
        .kind = CC_ALLGATHER, .dtype = HAL_DTYPE_F32, .op = HAL_REDOP_SUM, .count = 1023, .seed = 5
    };
    if (!cc_bufs_alloc(r, &b, cc_case_bytes(&c, r->nranks)))
        return;
    c.kind = CC_ALLREDUCE;
    cc_run_case(r, &b, &c);
    c.kind = CC_ALLGATHER;
    c.in_place = true;
    cc_run_case(r, &b, &c);
    cc_bufs_free(r, &b);
}

static const cc_scenario_t store_scenario = { "store", store_rank, 0 };

static int store_job(cts_ctx_t *ctx, int nranks)
{
    kv_store_t kv;
    hal_comm_store_t store;
    kv_init(&kv);
    kv_as_store(&kv, &store);
    cc_job_t job = CC_JOB_INIT;
    job.scenario = &store_scenario;
    job.mode = CC_THREADS;
    job.nranks = nranks;
    job.store = &store;
    int rc = cc_run(ctx, &job);
    if (rc == CTS_PASS && (kv.sets < (unsigned)nranks)) {
        cts_failf(__FILE__, __LINE__, "%d ranks joined through a store with %u set calls", nranks,
                  kv.sets);
        rc = CTS_FAIL;
    }
    kv_destroy(&kv);
    return rc;
}

/* Rendezvous through config.store with an id made by HAL_COMM_ID_FLAG_STORE. */
int cts_comm_store_rendezvous_1(cts_ctx_t *ctx)
{
    return store_job(ctx, 1);
}

int cts_comm_store_rendezvous_3(cts_ctx_t *ctx)
{
    return store_job(ctx, 3);
}

/* A store whose callbacks fail fails the init with the store's status (not with the timeout's,
 * HAL_ERROR_TIMEOUT, after 20 s). */
int cts_comm_store_failure(cts_ctx_t *ctx)
{
    kv_store_t kv;
    hal_comm_store_t store;
    hal_unique_id_t id;
    CTS_CHECK_OK(hal_comm_get_unique_id(HAL_COMM_ID_FLAG_STORE, &id));
    kv_init(&kv);
    kv.fail_with = HAL_ERROR_REMOTE;
    kv_as_store(&kv, &store);
    init_call_t c;
    init_calls_prepare(ctx, &c, 1, &id, 2, CC_TIMEOUT_MS);
    c.cfg.store = &store;
    init_main(&c);
    init_calls_destroy(&c, 1);
    unsigned calls = kv.sets + kv.gets;
    kv_destroy(&kv);
    CTS_CHECK(expect_init(&c, HAL_ERROR_REMOTE, "rank 0 with a failing store"));
    CTS_CHECK(calls > 0);
    return CTS_PASS;
}

/* A missing rank in a non-blocking init through a store: the async error turns into
 * HAL_ERROR_TIMEOUT, which finalize and destroy then return. */
int cts_comm_init_nonblocking_times_out(cts_ctx_t *ctx)
{
    kv_store_t kv;
    hal_comm_store_t store;
    hal_unique_id_t id;
    hal_comm_t comm = NULL;
    CTS_CHECK_OK(hal_comm_get_unique_id(HAL_COMM_ID_FLAG_STORE, &id));
    kv_init(&kv);
    kv_as_store(&kv, &store);
    hal_comm_config_t cfg = HAL_COMM_CONFIG_INIT;
    cfg.timeout_ms = CC_FAIL_TIMEOUT_MS;
    cfg.blocking = 0;
    cfg.store = &store;
    int rc = CTS_PASS;
    double t0 = cts_now_ms();
    if (!CTS_EXPECT_STATUS(hal_comm_init(&id, 2, 0, ctx->device, &cfg, &comm), HAL_IN_PROGRESS)) {
        kv_destroy(&kv);
        return CTS_FAIL;
    }
    hal_status_t async = HAL_IN_PROGRESS;
    while (CTS_EXPECT_OK(hal_comm_get_async_error(comm, &async)) && async == HAL_IN_PROGRESS &&
           cts_now_ms() - t0 < CC_HANG_MS)
        cts_sleep_ms(1);
    double ms = cts_now_ms() - t0;
    if (!CTS_EXPECT_STATUS(async, HAL_ERROR_TIMEOUT) ||
        !CTS_EXPECT(ms >= 0.9 * CC_FAIL_TIMEOUT_MS) || /* not before the timeout */
        !CTS_EXPECT_STATUS(hal_comm_finalize(comm), HAL_ERROR_TIMEOUT))
        rc = CTS_FAIL;
    if (async == HAL_IN_PROGRESS)
        hal_comm_abort(comm);
    if (!CTS_EXPECT_STATUS(hal_comm_destroy(comm), HAL_ERROR_TIMEOUT))
        rc = CTS_FAIL;
    kv_destroy(&kv);
    return rc;
}

/* hal_comm_abort during a non-blocking init: the rendezvous stops with HAL_ERROR_ABORTED (its
 * timeout, 20 s, would say HAL_ERROR_TIMEOUT). */
int cts_comm_init_nonblocking_abort(cts_ctx_t *ctx)
{
    kv_store_t kv;
    hal_comm_store_t store;
    hal_unique_id_t id;
    hal_comm_t comm = NULL;
    CTS_CHECK_OK(hal_comm_get_unique_id(HAL_COMM_ID_FLAG_STORE, &id));
    kv_init(&kv);
    kv_as_store(&kv, &store);
    hal_comm_config_t cfg = HAL_COMM_CONFIG_INIT;
    cfg.timeout_ms = CC_TIMEOUT_MS;
    cfg.blocking = 0;
    cfg.store = &store;
    if (!CTS_EXPECT_STATUS(hal_comm_init(&id, 2, 0, ctx->device, &cfg, &comm), HAL_IN_PROGRESS)) {
        kv_destroy(&kv);
        return CTS_FAIL;
    }
    int rc = CTS_PASS;
    cts_sleep_ms(100);
    double t0 = cts_now_ms();
    if (!CTS_EXPECT_OK(hal_comm_abort(comm)))
        rc = CTS_FAIL;
    hal_status_t async = HAL_IN_PROGRESS;
    while (CTS_EXPECT_OK(hal_comm_get_async_error(comm, &async)) && async == HAL_IN_PROGRESS &&
           cts_now_ms() - t0 < CC_HANG_MS)
        cts_sleep_ms(1);
    if (!CTS_EXPECT_STATUS(async, HAL_ERROR_ABORTED))
        rc = CTS_FAIL;
    /* An abort the application asked for: destroy may report it or not. */
    if (!CTS_EXPECT_STATUS2(hal_comm_destroy(comm), HAL_OK, HAL_ERROR_ABORTED))
        rc = CTS_FAIL;
    kv_destroy(&kv);
    return rc;
}

/* ---- Finalize, destroy, several communicators, one thread for all ranks ---------------------- */

/* Rank 0's allreduce is held back by a gate on its stream; `wait_fn` (finalize or destroy) on
 * rank 0's communicator must not return before the allreduce ran. */
static int waits_for_queued(cts_ctx_t *ctx, bool destroy)
{
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    cc_local_t job;
    cc_local_bufs_t b;
    CTS_CHECK(cc_local_open(ctx, &job, 2, CC_TIMEOUT_MS) == CTS_PASS);
    if (cc_local_bufs_alloc(&job, &b, 1023, 21) != CTS_PASS) {
        cc_local_close(&job);
        return CTS_FAIL;
    }
    int rc = CTS_PASS;
    cts_gate_t *gate = cts_gate_new(ctx);
    if (!CTS_EXPECT_OK(cts_gate_enqueue(gate, job.streams[0])) ||
        !CTS_EXPECT_OK(cc_local_enqueue(&job, &b, 0, NULL, NULL)) ||
        !CTS_EXPECT_OK(cc_local_enqueue(&job, &b, 1, NULL, NULL)) ||
        cts_gate_open_later(ctx, gate, 300) != 0)
        rc = CTS_FAIL;
    if (rc == CTS_PASS) {
        hal_status_t st =
            destroy ? hal_comm_destroy(job.comms[0]) : hal_comm_finalize(job.comms[0]);
        /* Read before anything else can open the gate: the allreduce runs only after it. */
        bool gate_done = cts_gate_done(gate);
        if (destroy)
            job.comms[0] = NULL;
        if (!CTS_EXPECT_OK(st))
            rc = CTS_FAIL;
        else if (!gate_done) {
            cts_failf(__FILE__, __LINE__,
                      "%s returned before the allreduce queued behind a gate (opened after "
                      "300 ms) ran",
                      destroy ? "hal_comm_destroy" : "hal_comm_finalize");
            rc = CTS_FAIL;
        }
    }
    cts_gate_open(gate);
    for (int r = 0; r < 2; r++)
        if (!CTS_EXPECT_OK(cts_poll_stream(job.streams[r], CC_TIMEOUT_MS)))
            rc = CTS_FAIL;
    if (rc == CTS_PASS)
        rc = cc_local_check(&job, &b);
    if (rc == CTS_PASS && !destroy && !CTS_EXPECT_OK(hal_comm_finalize(job.comms[1])))
        rc = CTS_FAIL;
    cc_local_bufs_free(&job, &b);
    for (int r = 0; r < 2 && rc == CTS_PASS; r++) {
        if (!CTS_EXPECT_OK(hal_stream_destroy(job.streams[r])))
            rc = CTS_FAIL;
        job.streams[r] = NULL;
        if (job.comms[r] != NULL && !CTS_EXPECT_OK(hal_comm_destroy(job.comms[r])))
            rc = CTS_FAIL;
        job.comms[r] = NULL;
    }
    cc_local_close(&job);
    return rc;
}

/* Finalize waits until the operations enqueued on the communicator completed on this rank. */
int cts_comm_finalize_waits(cts_ctx_t *ctx)
{
    return waits_for_queued(ctx, false);
}

/* Destroy waits for the operations queued on the communicator, then returns HAL_OK. */
int cts_comm_destroy_waits(cts_ctx_t *ctx)
{
    return waits_for_queued(ctx, true);
}

/* Two communicators over the same ranks, used alternately: on separate streams (where ranks may
 * even issue them in different orders) and on one stream (in the same order everywhere). */
int cts_comm_concurrent_communicators(cts_ctx_t *ctx)
{
    enum { RANKS = 3, ROUNDS = 10 };
    cc_local_t a, b;
    CTS_CHECK(cc_local_open(ctx, &a, RANKS, CC_TIMEOUT_MS) == CTS_PASS);
    if (cc_local_open(ctx, &b, RANKS, CC_TIMEOUT_MS) != CTS_PASS) {
        cc_local_close(&a);
        return CTS_FAIL;
    }
    int rc = CTS_PASS;
    for (int round = 0; round < ROUNDS && rc == CTS_PASS; round++) {
        bool same_stream = round % 2 == 1;
        cc_local_bufs_t ba, bb;
        if (cc_local_bufs_alloc(&a, &ba, 1023, (uint32_t)round) != CTS_PASS)
            rc = CTS_FAIL;
        else if (cc_local_bufs_alloc(&b, &bb, 7 + (size_t)round, 100u + (uint32_t)round) !=
                 CTS_PASS) {
            cc_local_bufs_free(&a, &ba);
            rc = CTS_FAIL;
        }
        if (rc != CTS_PASS)
            break;
        for (int r = 0; r < RANKS && rc == CTS_PASS; r++) {
            hal_stream_t sb = same_stream ? a.streams[r] : b.streams[r];
            bool a_first = same_stream || r % 2 == 0;
            hal_status_t st1 = a_first ? cc_local_enqueue(&a, &ba, r, NULL, NULL)
                                       : cc_local_enqueue(&b, &bb, r, NULL, sb);
            hal_status_t st2 = a_first ? cc_local_enqueue(&b, &bb, r, NULL, sb)
                                       : cc_local_enqueue(&a, &ba, r, NULL, NULL);
            if (!CTS_EXPECT_OK(st1) || !CTS_EXPECT_OK(st2))
                rc = CTS_FAIL;
        }
        if (rc != CTS_PASS)
            for (int r = 0; r < RANKS; r++) {
                hal_comm_abort(a.comms[r]);
                hal_comm_abort(b.comms[r]);
            }
        for (int r = 0; r < RANKS; r++) {
            hal_status_t s1 = cts_poll_stream(a.streams[r], CC_TIMEOUT_MS + CC_SLACK_MS);
            hal_status_t s2 = cts_poll_stream(b.streams[r], CC_TIMEOUT_MS + CC_SLACK_MS);
            if (rc == CTS_PASS && (!CTS_EXPECT_OK(s1) || !CTS_EXPECT_OK(s2)))
                rc = CTS_FAIL;
        }
        if (rc == CTS_PASS &&
            (cc_local_check(&a, &ba) != CTS_PASS || cc_local_check(&b, &bb) != CTS_PASS)) {
            cts_failf(__FILE__, __LINE__, "round %d (%s)", round,
                      same_stream ? "one stream" : "two streams");
            rc = CTS_FAIL;
        }
        cc_local_bufs_free(&a, &ba);
        cc_local_bufs_free(&b, &bb);
    }
    cc_local_close(&a);
    cc_local_close(&b);
    return rc;
}

/* One thread drives every rank (NCCL's single-process, multi-device pattern): non-blocking init
 * of all ranks, then their collectives in one group. */
int cts_comm_single_thread_all_ranks(cts_ctx_t *ctx)
{
    enum { RANKS = 4, COUNT = 1023 };
    cc_local_t job;
    cc_local_bufs_t b;
    CTS_CHECK(cc_local_open(ctx, &job, RANKS, CC_TIMEOUT_MS) == CTS_PASS);
    if (cc_local_bufs_alloc(&job, &b, COUNT, 31) != CTS_PASS) {
        cc_local_close(&job);
        return CTS_FAIL;
    }
    int rc = CTS_PASS;
    /* Uploads first: a copy issued inside the group would run before the grouped calls. */
    for (int r = 0; r < RANKS && rc == CTS_PASS; r++)
        if (!CTS_EXPECT_OK(
                hal_memcpy_async(b.send[r], b.host[r], COUNT * sizeof(float), job.streams[r])))
            rc = CTS_FAIL;
    if (rc == CTS_PASS && CTS_EXPECT_OK(hal_group_begin())) {
        for (int r = 0; r < RANKS; r++)
            if (!CTS_EXPECT_OK(hal_allreduce(b.send[r], b.recv[r], COUNT, HAL_DTYPE_F32,
                                             HAL_REDOP_SUM, job.comms[r], job.streams[r])))
                rc = CTS_FAIL;
        if (!CTS_EXPECT_OK(hal_group_end()))
            rc = CTS_FAIL;
    }
    for (int r = 0; r < RANKS && rc == CTS_PASS; r++)
        if (!CTS_EXPECT_OK(
                hal_memcpy_async(b.host[r], b.recv[r], COUNT * sizeof(float), job.streams[r])))
            rc = CTS_FAIL;
    if (rc != CTS_PASS)
        for (int r = 0; r < RANKS; r++)
            hal_comm_abort(job.comms[r]);
    for (int r = 0; r < RANKS; r++) {
        hal_status_t st = cts_poll_stream(job.streams[r], CC_TIMEOUT_MS + CC_SLACK_MS);
        if (rc == CTS_PASS && !CTS_EXPECT_OK(st))
            rc = CTS_FAIL;
    }
    if (rc == CTS_PASS)
        rc = cc_local_check(&job, &b);
    /* And without a group: enqueueing never blocks, whatever the other ranks do. */
    if (rc == CTS_PASS)
        rc = cc_local_allreduce(&job, COUNT, 32);
    cc_local_bufs_free(&job, &b);
    cc_local_close(&job);
    return rc;
}

/* Opens the gate that holds a local job's streams (NULL: none was made), aborts the job's
 * communicators if the test failed before, and waits for every stream; returns rc, or CTS_FAIL
 * if a stream ended in an error. */
static int release_gated(cc_local_t *job, cts_gate_t *gate, int rc)
{
    if (gate)
        cts_gate_open(gate);
    return cc_local_drain(job, rc);
}

/* More small collectives than a stream usually holds, all queued behind a closed gate so that
 * none runs before every one is enqueued (the host path keeps a pool of 256 job records per
 * communicator and takes memory beyond it): each feeds the next, so every result must land, in
 * stream order. f64 sums of 1 and 2, then doublings: exact to the end. */
int cts_comm_queued_burst(cts_ctx_t *ctx)
{
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    enum { OPS = 300 };
    const size_t bytes = (OPS + 1) * sizeof(double);
    cc_local_t job;
    CTS_CHECK(cc_local_open(ctx, &job, 2, CC_TIMEOUT_MS) == CTS_PASS);
    void *dev[2] = { 0 }, *host[2] = { 0 };
    cts_gate_t *gate = cts_gate_new(ctx);
    int rc = gate ? CTS_PASS : CTS_FAIL;
    for (int r = 0; r < 2 && rc == CTS_PASS; r++) {
        if (!CTS_EXPECT_OK(hal_mem_alloc(job.devices[r], HAL_MEM_KIND_DEVICE, bytes, 0, &dev[r])) ||
            !CTS_EXPECT_OK(
                hal_mem_alloc(job.devices[r], HAL_MEM_KIND_HOST_PINNED, bytes, 0, &host[r]))) {
            rc = CTS_FAIL;
            break;
        }
        double *h = host[r];
        h[0] = r + 1;
        if (!CTS_EXPECT_OK(cts_copy_sync(dev[r], host[r], sizeof(double), job.streams[r])) ||
            !CTS_EXPECT_OK(cts_gate_enqueue(gate, job.streams[r])))
            rc = CTS_FAIL;
        double *d = dev[r];
        for (int i = 0; i < OPS && rc == CTS_PASS; i++)
            if (!CTS_EXPECT_OK(hal_allreduce(d + i, d + i + 1, 1, HAL_DTYPE_F64, HAL_REDOP_SUM,
                                             job.comms[r], job.streams[r])))
                rc = CTS_FAIL;
        if (rc == CTS_PASS &&
            !CTS_EXPECT_OK(hal_memcpy_async(host[r], dev[r], bytes, job.streams[r])))
            rc = CTS_FAIL;
    }
    rc = release_gated(&job, gate, rc);
    for (int r = 0; r < 2 && rc == CTS_PASS; r++) {
        const double *h = host[r];
        double want = 3;
        for (int i = 1; i <= OPS && rc == CTS_PASS; i++, want *= 2)
            if (h[i] != want) {
                cts_failf(__FILE__, __LINE__, "rank %d: result %d of %d is %g, expected %g", r, i,
                          OPS, h[i], want);
                rc = CTS_FAIL;
            }
    }
    for (int r = 0; r < 2; r++) {
        if (dev[r] != NULL)
            hal_mem_free(dev[r]);
        if (host[r] != NULL)
            hal_mem_free(host[r]);
    }
    cc_local_close(&job);
    return rc;
}

/* Collective buffers may be device, pinned or shared memory of the backend, and the stream may
 * be the device's default stream. */
int cts_comm_memory_kinds(cts_ctx_t *ctx)
{
    enum { COUNT = 1023 };
    const size_t bytes = COUNT * sizeof(float);
    cc_local_t job;
    CTS_CHECK(cc_local_open(ctx, &job, 2, CC_TIMEOUT_MS) == CTS_PASS);
    static const hal_mem_kind_t kinds[][2] = {
        { HAL_MEM_KIND_HOST_PINNED, HAL_MEM_KIND_DEVICE },
        { HAL_MEM_KIND_DEVICE, HAL_MEM_KIND_HOST_PINNED },
        { HAL_MEM_KIND_HOST_PINNED, HAL_MEM_KIND_HOST_PINNED },
        { HAL_MEM_KIND_SHARED, HAL_MEM_KIND_DEVICE },
        { HAL_MEM_KIND_DEVICE, HAL_MEM_KIND_SHARED },
    };
    int rc = CTS_PASS;
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]) && rc == CTS_PASS; k++) {
        bool shared = kinds[k][0] == HAL_MEM_KIND_SHARED || kinds[k][1] == HAL_MEM_KIND_SHARED;
        if (shared && (ctx->props.capabilities & HAL_DEVICE_CAP_SHARED_MEMORY) == 0)
            continue;
        void *send[2] = { 0 }, *recv[2] = { 0 }, *host[2] = { 0 };
        hal_stream_t streams[2] = { 0 };
        uint32_t seed = 40u + (uint32_t)k;
        for (int r = 0; r < 2 && rc == CTS_PASS; r++) {
            hal_device_t d = job.devices[r];
            if (!CTS_EXPECT_OK(hal_mem_alloc(d, kinds[k][0], bytes, 0, &send[r])) ||
                !CTS_EXPECT_OK(hal_mem_alloc(d, kinds[k][1], bytes, 0, &recv[r])) ||
                !CTS_EXPECT_OK(hal_mem_alloc(d, HAL_MEM_KIND_HOST_PINNED, bytes, 0, &host[r])))
                rc = CTS_FAIL;
            /* A stream of each rank's own: with one device, the ranks share it, and one default
             * stream would queue the second rank's collective behind the first's. */
            streams[r] = job.streams[r];
        }
        for (int r = 0; r < 2 && rc == CTS_PASS; r++) {
            cc_fill(HAL_DTYPE_F32, CC_CLASS_ADD, r, 0, COUNT, seed, host[r]);
            if (!CTS_EXPECT_OK(hal_memcpy_async(send[r], host[r], bytes, streams[r])) ||
                !CTS_EXPECT_OK(hal_allreduce(send[r], recv[r], COUNT, HAL_DTYPE_F32, HAL_REDOP_SUM,
                                             job.comms[r], streams[r])) ||
                !CTS_EXPECT_OK(hal_memcpy_async(host[r], recv[r], bytes, streams[r])))
                rc = CTS_FAIL;
        }
        if (rc != CTS_PASS)
            for (int r = 0; r < 2; r++)
                hal_comm_abort(job.comms[r]);
        for (int r = 0; r < 2; r++) {
            hal_status_t st = streams[r] ? cts_poll_stream(streams[r], CC_TIMEOUT_MS) : HAL_OK;
            if (rc == CTS_PASS && !CTS_EXPECT_OK(st))
                rc = CTS_FAIL;
        }
        for (int r = 0; r < 2 && rc == CTS_PASS; r++) {
            for (size_t i = 0; i < COUNT; i++) {
                char detail[256];
                if (!cc_check_reduced(HAL_DTYPE_F32, HAL_REDOP_SUM, 2, i, seed,
                                      cc_get(HAL_DTYPE_F32, host[r], i), detail, sizeof(detail))) {
                    cts_failf(__FILE__, __LINE__,
                              "allreduce from %s into %s memory, rank %d: element %zu: %s",
                              cts_kind_name(kinds[k][0]), cts_kind_name(kinds[k][1]), r, i, detail);
                    rc = CTS_FAIL;
                    break;
                }
            }
        }
        for (int r = 0; r < 2; r++) {
            hal_mem_free(send[r]);
            hal_mem_free(recv[r]);
            hal_mem_free(host[r]);
        }
    }
    cc_local_close(&job);
    return rc;
}

/* Collectives are stream-ordered: one waits for the work before it on its stream, including
 * an event wait on input produced by another stream that is held back by a gate. */
int cts_comm_stream_order(cts_ctx_t *ctx)
{
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    enum { COUNT = 1023 };
    const size_t bytes = COUNT * sizeof(float);
    cc_local_t job;
    cc_local_bufs_t b;
    CTS_CHECK(cc_local_open(ctx, &job, 2, CC_TIMEOUT_MS) == CTS_PASS);
    if (cc_local_bufs_alloc(&job, &b, COUNT, 51) != CTS_PASS) {
        cc_local_close(&job);
        return CTS_FAIL;
    }
    hal_stream_t producer[2] = { 0 };
    hal_event_t ready[2] = { 0 };
    cts_gate_t *gate = cts_gate_new(ctx);
    int rc = CTS_PASS;
    for (int r = 0; r < 2 && rc == CTS_PASS; r++) {
        /* Stale input first, so a collective that ran early would give a wrong sum. */
        if (!CTS_EXPECT_OK(hal_stream_create(job.devices[r], 0, &producer[r])) ||
            !CTS_EXPECT_OK(hal_event_create(job.devices[r], HAL_EVENT_FLAG_NONE, &ready[r])) ||
            !CTS_EXPECT_OK(cts_memset_sync(b.send[r], 0x7f, bytes, job.streams[r])) ||
            !CTS_EXPECT_OK(cts_gate_enqueue(gate, producer[r])) ||
            !CTS_EXPECT_OK(hal_memcpy_async(b.send[r], b.host[r], bytes, producer[r])) ||
            !CTS_EXPECT_OK(hal_event_record(ready[r], producer[r])) ||
            !CTS_EXPECT_OK(hal_stream_wait_event(job.streams[r], ready[r])) ||
            !CTS_EXPECT_OK(hal_allreduce(b.send[r], b.recv[r], COUNT, HAL_DTYPE_F32, HAL_REDOP_SUM,
                                         job.comms[r], job.streams[r])) ||
            !CTS_EXPECT_OK(hal_memcpy_async(b.host[r], b.recv[r], bytes, job.streams[r])))
            rc = CTS_FAIL;
    }
    if (rc == CTS_PASS) {
        cts_sleep_ms(100);
        for (int r = 0; r < 2; r++)
            if (!CTS_EXPECT_STATUS(hal_stream_query(job.streams[r]), HAL_NOT_READY))
                rc = CTS_FAIL;
    }
    rc = release_gated(&job, gate, rc);
    if (rc == CTS_PASS)
        rc = cc_local_check(&job, &b);
    for (int r = 0; r < 2; r++) {
        if (producer[r] != NULL)
            hal_stream_destroy(producer[r]);
        if (ready[r] != NULL)
            hal_event_destroy(ready[r]);
    }
    cc_local_bufs_free(&job, &b);
    cc_local_close(&job);
    return rc;
}
