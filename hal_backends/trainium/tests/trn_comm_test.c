/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend under the HAL's host-staged collectives: the backend has no native
 * collectives, so the HAL copies buffers through pinned memory on the stream and runs the
 * exchange in a stream host function (stream_launch_host_fn). Two ranks, threads of this
 * process, on NeuronCores 0 and 1; exact integer-valued inputs. */
#include <stdlib.h>

#include "hal_backends/trainium/tests/trn_test_util.h"

enum { RANKS = 2 };

typedef struct rank_ctx {
    hal_device_t device;
    const hal_unique_id_t *id;
    int rank;
    size_t count;
    int failed;
} rank_ctx_t;

/* Expectations of a rank thread: recorded for the test (tools/ctest) and in the rank's own flag,
 * which stops its loop. */
#define R_EXPECT(r, cond)        \
    do {                         \
        if (!CTEST_EXPECT(cond)) \
            (r)->failed = 1;     \
    } while (0)

#define R_EXPECT_OK(r, call)  \
    do {                      \
        if (!EXPECT_OK(call)) \
            (r)->failed = 1;  \
    } while (0)

static void *run_rank(void *arg)
{
    rank_ctx_t *r = arg;
    size_t n = r->count;
    hal_comm_t comm = NULL;
    hal_stream_t s = NULL;
    float *send = NULL, *recv = NULL, *gathered = NULL;
    float *host = calloc(n * RANKS + 1, sizeof(float));
    R_EXPECT(r, host != NULL);
    R_EXPECT_OK(r, hal_comm_init(r->id, RANKS, r->rank, r->device, NULL, &comm));
    R_EXPECT_OK(r, hal_stream_create(r->device, 0, &s));
    R_EXPECT_OK(
        r, hal_mem_alloc(r->device, HAL_MEM_KIND_DEVICE, n * sizeof(float) + 1, 0, (void **)&send));
    R_EXPECT_OK(
        r, hal_mem_alloc(r->device, HAL_MEM_KIND_DEVICE, n * sizeof(float) + 1, 0, (void **)&recv));
    R_EXPECT_OK(r, hal_mem_alloc(r->device, HAL_MEM_KIND_DEVICE, RANKS * n * sizeof(float) + 1, 0,
                                 (void **)&gathered));
    if (r->failed || host == NULL)
        goto out;
    for (size_t i = 0; i < n; i++)
        host[i] = (float)((r->rank + 1) * 1000 + (int)(i % 977));
    R_EXPECT_OK(r, hal_memcpy_async(send, host, n * sizeof(float), s));
    /* Sum: sum over ranks of (rank + 1) * 1000 + i % 977. */
    R_EXPECT_OK(r, hal_allreduce(send, recv, n, HAL_DTYPE_F32, HAL_REDOP_SUM, comm, s));
    R_EXPECT_OK(r, hal_memcpy_async(host, recv, n * sizeof(float), s));
    R_EXPECT_OK(r, hal_stream_synchronize(s));
    for (size_t i = 0; i < n; i++) {
        float want = (float)(3000 + 2 * (int)(i % 977));
        if (host[i] != want) {
            fprintf(stderr, "rank %d: allreduce[%zu] = %g, expected %g\n", r->rank, i,
                    (double)host[i], (double)want);
            r->failed = 1;
            break;
        }
    }
    /* Allgather into a buffer of the same device, then check every rank's block. */
    R_EXPECT_OK(r, hal_allgather(send, gathered, n, HAL_DTYPE_F32, comm, s));
    R_EXPECT_OK(r, hal_memcpy_async(host, gathered, RANKS * n * sizeof(float), s));
    R_EXPECT_OK(r, hal_stream_synchronize(s));
    for (int q = 0; q < RANKS && !r->failed; q++) {
        for (size_t i = 0; i < n; i++) {
            float want = (float)((q + 1) * 1000 + (int)(i % 977));
            if (host[(size_t)q * n + i] != want) {
                fprintf(stderr, "rank %d: allgather block %d [%zu] = %g, expected %g\n", r->rank, q,
                        i, (double)host[(size_t)q * n + i], (double)want);
                r->failed = 1;
                break;
            }
        }
    }
    /* Broadcast from rank 1, in place. */
    R_EXPECT_OK(r, hal_broadcast(send, send, n, HAL_DTYPE_F32, 1, comm, s));
    R_EXPECT_OK(r, hal_memcpy_async(host, send, n * sizeof(float), s));
    R_EXPECT_OK(r, hal_stream_synchronize(s));
    for (size_t i = 0; i < n; i++) {
        if (host[i] != (float)(2000 + (int)(i % 977))) {
            fprintf(stderr, "rank %d: broadcast[%zu] = %g\n", r->rank, i, (double)host[i]);
            r->failed = 1;
            break;
        }
    }
    R_EXPECT_OK(r, hal_comm_finalize(comm));
out:
    if (comm != NULL)
        R_EXPECT_OK(r, hal_comm_destroy(comm));
    hal_mem_free(send);
    hal_mem_free(recv);
    hal_mem_free(gathered);
    if (s != NULL)
        R_EXPECT_OK(r, hal_stream_destroy(s));
    free(host);
    return NULL;
}

static int run_job(size_t count)
{
    tt_env_reset();
    tt_setenv("NEURON_RT_VISIBLE_CORES", "0-1");
    hal_backend_t b = NULL;
    EXPECT_OK(tt_open(&b));
    if (b == NULL)
        return CTEST_FAIL;
    hal_unique_id_t id;
    EXPECT_OK(hal_comm_get_unique_id(0, &id));
    rank_ctx_t ranks[RANKS];
    pthread_t threads[RANKS];
    for (int i = 0; i < RANKS; i++) {
        ranks[i] = (rank_ctx_t){
            .device = tt_device(b, (uint32_t)i), .id = &id, .rank = i, .count = count
        };
        pthread_create(&threads[i], NULL, run_rank, &ranks[i]);
    }
    for (int i = 0; i < RANKS; i++) {
        pthread_join(threads[i], NULL);
        CTEST_EXPECT(ranks[i].failed == 0);
    }
    EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}

CTEST(TrnComm, HostStagedCollectivesOne)
{
    return run_job(1);
}

CTEST(TrnComm, HostStagedCollectivesOdd)
{
    return run_job(1023);
}

CTEST(TrnComm, HostStagedCollectivesLarge)
{
    return run_job((size_t)1 << 20);
}
