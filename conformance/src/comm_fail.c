/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance, collectives: failures. Argument errors of every collective are reported at
 * enqueue time without side effect (nothing enqueued, no buffer written, the communicator still
 * in step with its peers); fp8 without the capability is HAL_ERROR_UNSUPPORTED; ranks that
 * disagree get HAL_ERROR_INVALID_ARGUMENT latched instead of data; an abort unblocks the rank
 * at once (HAL_ERROR_ABORTED) and its peers see HAL_ERROR_REMOTE; a silent peer turns into
 * HAL_ERROR_TIMEOUT and a killed one into HAL_ERROR_REMOTE or HAL_ERROR_TIMEOUT on every
 * survivor within the communicator's timeout; errors are sticky. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cts_comm.h"

/* ---- Argument errors ------------------------------------------------------------------------- */

enum { ARG_COUNT = 64 };

/* Buffers of rank 0 of a 2-rank local job for the argument checks. */
typedef struct arg_bufs {
    void *send, *recv, *small, *big, *pinned, *other;
    void *pageable;
    hal_stream_t other_stream;
    size_t elem_bytes; /* ARG_COUNT f32 */
} arg_bufs_t;

static int arg_bufs_alloc(cts_ctx_t *ctx, hal_device_t d, arg_bufs_t *a)
{
    memset(a, 0, sizeof(*a));
    a->elem_bytes = ARG_COUNT * sizeof(float);
    a->pageable = cts_calloc(ctx, 4 * a->elem_bytes);
    CTS_CHECK(a->pageable != NULL);
    CTS_CHECK_OK(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, a->elem_bytes, 0, &a->send));
    CTS_CHECK_OK(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, a->elem_bytes, 0, &a->recv));
    CTS_CHECK_OK(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, a->elem_bytes - 1, 0, &a->small));
    CTS_CHECK_OK(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 4 * a->elem_bytes, 0, &a->big));
    CTS_CHECK_OK(hal_mem_alloc(d, HAL_MEM_KIND_HOST_PINNED, 4 * a->elem_bytes, 0, &a->pinned));
    hal_device_t od = cts_other_device(ctx);
    if (od != NULL) {
        CTS_CHECK_OK(hal_mem_alloc(od, HAL_MEM_KIND_DEVICE, 4 * a->elem_bytes, 0, &a->other));
        CTS_CHECK_OK(hal_stream_create(od, 0, &a->other_stream));
    }
    return CTS_PASS;
}

static void arg_bufs_free(arg_bufs_t *a)
{
    if (a->other_stream != NULL)
        hal_stream_destroy(a->other_stream);
    void *all[] = { a->send, a->recv, a->small, a->big, a->pinned, a->other };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        hal_mem_free(all[i]);
}

/* Fills the device buffers with patterns (through the pinned buffer). */
static int arg_bufs_fill(arg_bufs_t *a, hal_stream_t s)
{
    void *dev[] = { a->send, a->recv, a->small, a->big };
    size_t sizes[] = { a->elem_bytes, a->elem_bytes, a->elem_bytes - 1, 4 * a->elem_bytes };
    for (size_t i = 0; i < 4; i++) {
        cts_pattern_fill(a->pinned, sizes[i], 900u + (uint32_t)i);
        CTS_CHECK_OK(cts_copy_sync(dev[i], a->pinned, sizes[i], s));
    }
    return CTS_PASS;
}

/* The device buffers still hold their patterns. */
static int arg_bufs_unchanged(arg_bufs_t *a, hal_stream_t s)
{
    void *dev[] = { a->send, a->recv, a->small, a->big };
    size_t sizes[] = { a->elem_bytes, a->elem_bytes, a->elem_bytes - 1, 4 * a->elem_bytes };
    static const char *const names[] = { "sendbuf", "recvbuf", "small buffer", "large buffer" };
    for (size_t i = 0; i < 4; i++) {
        CTS_CHECK_OK(cts_copy_sync(a->pinned, dev[i], sizes[i], s));
        size_t at = cts_pattern_find_mismatch(a->pinned, sizes[i], 900u + (uint32_t)i);
        CTS_CHECKF(at == sizes[i], "a rejected collective wrote the %s (byte %zu)", names[i], at);
    }
    return CTS_PASS;
}

/* Every argument error of every collective on rank 0 (rank 1 issues nothing), then checks that
 * none had an effect. */
static int bad_calls(cts_ctx_t *ctx, hal_comm_t c, hal_stream_t s, arg_bufs_t *a)
{
    const size_t n = ARG_COUNT, eb = a->elem_bytes;
    const hal_dtype_t f32 = HAL_DTYPE_F32;
    const hal_redop_t sum = HAL_REDOP_SUM;
    char *send = a->send, *recv = a->recv, *small = a->small, *big = a->big;
    char *page = a->pageable;
    const hal_status_t BAD = HAL_ERROR_INVALID_ARGUMENT;
    hal_stream_t dead = NULL;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &dead));
    CTS_CHECK_OK(hal_stream_destroy(dead));
#define EXPECT_BAD(call) CTS_CHECK_STATUS((call), BAD)
    /* allreduce: NULL buffers, too small (also through an interior pointer), memory that is not
     * the HAL's, another device's memory and stream, partial overlap, unknown dtype and op. */
    EXPECT_BAD(hal_allreduce(NULL, recv, n, f32, sum, c, s));
    EXPECT_BAD(hal_allreduce(send, NULL, n, f32, sum, c, s));
    EXPECT_BAD(hal_allreduce(small, recv, n, f32, sum, c, s));
    EXPECT_BAD(hal_allreduce(send, small, n, f32, sum, c, s));
    EXPECT_BAD(hal_allreduce(send + 4, recv, n, f32, sum, c, s));
    EXPECT_BAD(hal_allreduce(send, recv + 4, n, f32, sum, c, s));
    EXPECT_BAD(hal_allreduce(page, recv, n, f32, sum, c, s));
    EXPECT_BAD(hal_allreduce(send, page, n, f32, sum, c, s));
    EXPECT_BAD(hal_allreduce(big, big + 4, n, f32, sum, c, s));
    EXPECT_BAD(hal_allreduce(big + 4, big, n, f32, sum, c, s));
    EXPECT_BAD(hal_allreduce(send, recv, n, HAL_DTYPE_COUNT, sum, c, s));
    EXPECT_BAD(hal_allreduce(send, recv, n, (hal_dtype_t)-1, sum, c, s));
    EXPECT_BAD(hal_allreduce(send, recv, n, f32, HAL_REDOP_COUNT, c, s));
    EXPECT_BAD(hal_allreduce(send, recv, n, f32, (hal_redop_t)-1, c, s));
    /* Counts whose byte sizes overflow (allgather's receive size is count x nranks). */
    EXPECT_BAD(hal_allreduce(send, recv, SIZE_MAX / 4 + 1, f32, sum, c, s));
    EXPECT_BAD(hal_allgather(send, big, SIZE_MAX / 8 + 1, f32, c, s));
    EXPECT_BAD(hal_alltoall(big, big + 2 * eb, SIZE_MAX, f32, c, s));
    if (a->other != NULL) {
        EXPECT_BAD(hal_allreduce(a->other, recv, n, f32, sum, c, s));
        EXPECT_BAD(hal_allreduce(send, a->other, n, f32, sum, c, s));
        EXPECT_BAD(hal_allreduce(send, recv, n, f32, sum, c, a->other_stream));
        EXPECT_BAD(hal_broadcast(send, recv, n, f32, 0, c, a->other_stream));
        EXPECT_BAD(hal_reduce(send, recv, n, f32, sum, 0, c, a->other_stream));
        EXPECT_BAD(hal_allgather(send, big, n, f32, c, a->other_stream));
        EXPECT_BAD(hal_reduce_scatter(big, recv, n, f32, sum, c, a->other_stream));
        EXPECT_BAD(hal_alltoall(big, big + 2 * eb, n, f32, c, a->other_stream));
        EXPECT_BAD(hal_send(send, n, f32, 1, c, a->other_stream));
        EXPECT_BAD(hal_recv(recv, n, f32, 1, c, a->other_stream));
        EXPECT_BAD(hal_barrier(c, a->other_stream));
        EXPECT_BAD(hal_send(a->other, n, f32, 1, c, s));
        EXPECT_BAD(hal_recv(a->other, n, f32, 1, c, s));
    }
    /* broadcast (this rank is the root where it matters) and reduce: roots out of range, NULL
     * or small buffers, overlaps. */
    EXPECT_BAD(hal_broadcast(send, recv, n, f32, -1, c, s));
    EXPECT_BAD(hal_broadcast(send, recv, n, f32, 2, c, s));
    EXPECT_BAD(hal_broadcast(NULL, recv, n, f32, 0, c, s));
    EXPECT_BAD(hal_broadcast(send, NULL, n, f32, 0, c, s));
    EXPECT_BAD(hal_broadcast(send, small, n, f32, 0, c, s));
    EXPECT_BAD(hal_broadcast(big, big + 4, n, f32, 0, c, s));
    EXPECT_BAD(hal_broadcast(send, recv, n, HAL_DTYPE_COUNT, 0, c, s));
    EXPECT_BAD(hal_reduce(send, recv, n, f32, sum, -1, c, s));
    EXPECT_BAD(hal_reduce(send, recv, n, f32, sum, 2, c, s));
    EXPECT_BAD(hal_reduce(NULL, recv, n, f32, sum, 0, c, s));
    EXPECT_BAD(hal_reduce(send, NULL, n, f32, sum, 0, c, s));
    EXPECT_BAD(hal_reduce(small, recv, n, f32, sum, 0, c, s));
    EXPECT_BAD(hal_reduce(big, big + 4, n, f32, sum, 0, c, s));
    EXPECT_BAD(hal_reduce(send, recv, n, f32, HAL_REDOP_COUNT, 0, c, s));
    /* allgather (2 ranks: recvbuf holds 2n): too small, NULL, in place at another rank's slot
     * or off by an element. */
    EXPECT_BAD(hal_allgather(send, recv, n, f32, c, s));
    EXPECT_BAD(hal_allgather(NULL, big, n, f32, c, s));
    EXPECT_BAD(hal_allgather(send, NULL, n, f32, c, s));
    EXPECT_BAD(hal_allgather(big + eb, big, n, f32, c, s));
    EXPECT_BAD(hal_allgather(big + 4, big, n, f32, c, s));
    /* reduce_scatter (sendbuf holds 2n): too small, NULL, in place at another rank's slot. */
    EXPECT_BAD(hal_reduce_scatter(send, recv, n, f32, sum, c, s));
    EXPECT_BAD(hal_reduce_scatter(NULL, recv, n, f32, sum, c, s));
    EXPECT_BAD(hal_reduce_scatter(big, NULL, n, f32, sum, c, s));
    EXPECT_BAD(hal_reduce_scatter(big, big + eb, n, f32, sum, c, s));
    EXPECT_BAD(hal_reduce_scatter(big, big + 4, n, f32, sum, c, s));
    EXPECT_BAD(hal_reduce_scatter(big, recv, n, f32, HAL_REDOP_COUNT, c, s));
    /* alltoall (2n each way): too small, NULL, partial overlap. */
    EXPECT_BAD(hal_alltoall(send, big, n, f32, c, s));
    EXPECT_BAD(hal_alltoall(big, recv, n, f32, c, s));
    EXPECT_BAD(hal_alltoall(NULL, big, n, f32, c, s));
    EXPECT_BAD(hal_alltoall(big, NULL, n, f32, c, s));
    EXPECT_BAD(hal_alltoall(big, big + 4, n, f32, c, s));
    /* send and recv: peers out of range, NULL, small and pageable buffers, unknown dtype. */
    EXPECT_BAD(hal_send(send, n, f32, -1, c, s));
    EXPECT_BAD(hal_send(send, n, f32, 2, c, s));
    EXPECT_BAD(hal_send(NULL, n, f32, 1, c, s));
    EXPECT_BAD(hal_send(small, n, f32, 1, c, s));
    EXPECT_BAD(hal_send(page, n, f32, 1, c, s));
    EXPECT_BAD(hal_send(send, n, HAL_DTYPE_COUNT, 1, c, s));
    EXPECT_BAD(hal_recv(recv, n, f32, -1, c, s));
    EXPECT_BAD(hal_recv(recv, n, f32, 2, c, s));
    EXPECT_BAD(hal_recv(NULL, n, f32, 1, c, s));
    EXPECT_BAD(hal_recv(small, n, f32, 1, c, s));
    EXPECT_BAD(hal_recv(page, n, f32, 1, c, s));
    EXPECT_BAD(hal_recv(recv, n, HAL_DTYPE_COUNT, 1, c, s));
#undef EXPECT_BAD
    /* NULL and destroyed streams. */
    hal_stream_t streams[] = { NULL, dead };
    for (size_t i = 0; i < 2; i++) {
        hal_stream_t x = streams[i];
        const hal_status_t H = HAL_ERROR_INVALID_HANDLE;
        CTS_CHECK_STATUS(hal_allreduce(send, recv, n, f32, sum, c, x), H);
        CTS_CHECK_STATUS(hal_broadcast(send, recv, n, f32, 0, c, x), H);
        CTS_CHECK_STATUS(hal_reduce(send, recv, n, f32, sum, 0, c, x), H);
        CTS_CHECK_STATUS(hal_allgather(send, big, n, f32, c, x), H);
        CTS_CHECK_STATUS(hal_reduce_scatter(big, recv, n, f32, sum, c, x), H);
        CTS_CHECK_STATUS(hal_alltoall(big, big + 2 * eb, n, f32, c, x), H);
        CTS_CHECK_STATUS(hal_send(send, n, f32, 1, c, x), H);
        CTS_CHECK_STATUS(hal_recv(recv, n, f32, 1, c, x), H);
        CTS_CHECK_STATUS(hal_barrier(c, x), H);
    }
    return CTS_PASS;
}

/* Count 0 needs no buffers: every collective with NULL buffers is valid (on every rank). */
static hal_status_t empty_calls(hal_comm_t c, hal_stream_t s, int peer)
{
    const hal_dtype_t f32 = HAL_DTYPE_F32;
    hal_status_t st = hal_allreduce(NULL, NULL, 0, f32, HAL_REDOP_SUM, c, s);
    if (st == HAL_OK)
        st = hal_broadcast(NULL, NULL, 0, f32, 1, c, s);
    if (st == HAL_OK)
        st = hal_reduce(NULL, NULL, 0, f32, HAL_REDOP_MAX, 0, c, s);
    if (st == HAL_OK)
        st = hal_allgather(NULL, NULL, 0, f32, c, s);
    if (st == HAL_OK)
        st = hal_reduce_scatter(NULL, NULL, 0, f32, HAL_REDOP_MIN, c, s);
    if (st == HAL_OK)
        st = hal_alltoall(NULL, NULL, 0, f32, c, s);
    if (st == HAL_OK)
        st = hal_group_begin();
    if (st == HAL_OK) {
        st = hal_send(NULL, 0, f32, peer, c, s);
        if (st == HAL_OK)
            st = hal_recv(NULL, 0, f32, peer, c, s);
        hal_status_t end = hal_group_end();
        if (st == HAL_OK)
            st = end;
    }
    return st;
}

int cts_comm_invalid_arguments(cts_ctx_t *ctx)
{
    cc_local_t job;
    arg_bufs_t a;
    CTS_CHECK(cc_local_open(ctx, &job, 2, CC_TIMEOUT_MS) == CTS_PASS);
    int rc = arg_bufs_alloc(ctx, job.devices[0], &a);
    if (rc == CTS_PASS)
        rc = arg_bufs_fill(&a, job.streams[0]);
    if (rc == CTS_PASS)
        rc = bad_calls(ctx, job.comms[0], job.streams[0], &a);
    /* No side effect: nothing queued, nothing latched, nothing written, and the ranks are still
     * in step (a rejected call that had counted as a collective would make the next one
     * disagree or hang). */
    hal_status_t async = HAL_ERROR_INTERNAL;
    if (rc == CTS_PASS &&
        (!CTS_EXPECT_OK(hal_stream_query(job.streams[0])) ||
         !CTS_EXPECT_OK(hal_comm_get_async_error(job.comms[0], &async)) ||
         !CTS_EXPECT_STATUS(async, HAL_OK) || arg_bufs_unchanged(&a, job.streams[0]) != CTS_PASS))
        rc = CTS_FAIL;
    if (rc == CTS_PASS)
        rc = cc_local_allreduce(&job, ARG_COUNT, 3);
    for (int r = 0; r < 2 && rc == CTS_PASS; r++)
        if (!CTS_EXPECT_OK(empty_calls(job.comms[r], job.streams[r], 1 - r)))
            rc = CTS_FAIL;
    for (int r = 0; r < 2; r++) {
        if (rc != CTS_PASS)
            hal_comm_abort(job.comms[r]);
        hal_status_t st = cts_poll_stream(job.streams[r], CC_TIMEOUT_MS);
        if (rc == CTS_PASS && !CTS_EXPECT_OK(st))
            rc = CTS_FAIL;
    }
    if (rc == CTS_PASS)
        rc = cc_local_allreduce(&job, 7, 4);
    arg_bufs_free(&a);
    cc_local_close(&job);
    return rc;
}

/* fp8 without HAL_DEVICE_CAP_FP8_COLLECTIVES: every collective returns HAL_ERROR_UNSUPPORTED
 * synchronously, without side effect. With the capability: an fp8 allreduce works. */
int cts_comm_fp8(cts_ctx_t *ctx)
{
    cc_local_t job;
    arg_bufs_t a;
    CTS_CHECK(cc_local_open(ctx, &job, 2, CC_TIMEOUT_MS) == CTS_PASS);
    int rc = arg_bufs_alloc(ctx, job.devices[0], &a);
    if (rc == CTS_PASS)
        rc = arg_bufs_fill(&a, job.streams[0]);
    const bool cap = (ctx->props.capabilities & HAL_DEVICE_CAP_FP8_COLLECTIVES) != 0;
    const hal_dtype_t fp8[] = { HAL_DTYPE_F8_E4M3, HAL_DTYPE_F8_E5M2 };
    const size_t n = ARG_COUNT;
    hal_comm_t c = job.comms[0];
    hal_stream_t s = job.streams[0];
    char *send = a.send, *recv = a.recv, *big = a.big;
    for (size_t i = 0; i < 2 && rc == CTS_PASS && !cap; i++) {
        const hal_status_t U = HAL_ERROR_UNSUPPORTED;
        hal_dtype_t t = fp8[i];
        for (int o = 0; o < HAL_REDOP_COUNT && rc == CTS_PASS; o++) {
            hal_redop_t op = cc_all_ops[o];
            if (!CTS_EXPECT_STATUS(hal_allreduce(send, recv, n, t, op, c, s), U) ||
                !CTS_EXPECT_STATUS(hal_reduce(send, recv, n, t, op, 0, c, s), U) ||
                !CTS_EXPECT_STATUS(hal_reduce_scatter(big, recv, n, t, op, c, s), U))
                rc = CTS_FAIL;
        }
        if (rc == CTS_PASS && (!CTS_EXPECT_STATUS(hal_broadcast(send, recv, n, t, 0, c, s), U) ||
                               !CTS_EXPECT_STATUS(hal_allgather(send, big, n, t, c, s), U) ||
                               !CTS_EXPECT_STATUS(hal_alltoall(big, big + 2 * n, n, t, c, s), U) ||
                               !CTS_EXPECT_STATUS(hal_send(send, n, t, 1, c, s), U) ||
                               !CTS_EXPECT_STATUS(hal_recv(recv, n, t, 1, c, s), U)))
            rc = CTS_FAIL;
    }
    hal_status_t async = HAL_ERROR_INTERNAL;
    if (rc == CTS_PASS && !cap &&
        (!CTS_EXPECT_OK(hal_stream_query(s)) ||
         !CTS_EXPECT_OK(hal_comm_get_async_error(c, &async)) || !CTS_EXPECT_STATUS(async, HAL_OK) ||
         arg_bufs_unchanged(&a, s) != CTS_PASS))
        rc = CTS_FAIL;
    if (rc == CTS_PASS && cap) {
        /* Both ranks: an e4m3 and an e5m2 sum of exact small integers. */
        for (size_t i = 0; i < 2 && rc == CTS_PASS; i++) {
            void *host[2] = { 0 }, *dev[2] = { 0 };
            for (int r = 0; r < 2 && rc == CTS_PASS; r++) {
                if (!CTS_EXPECT_OK(
                        hal_mem_alloc(job.devices[r], HAL_MEM_KIND_HOST_PINNED, n, 0, &host[r])) ||
                    !CTS_EXPECT_OK(
                        hal_mem_alloc(job.devices[r], HAL_MEM_KIND_DEVICE, n, 0, &dev[r])))
                    rc = CTS_FAIL;
                else
                    cc_fill(fp8[i], CC_CLASS_ADD, r, 0, n, 81, host[r]);
            }
            for (int r = 0; r < 2 && rc == CTS_PASS; r++)
                if (!CTS_EXPECT_OK(hal_memcpy_async(dev[r], host[r], n, job.streams[r])) ||
                    !CTS_EXPECT_OK(hal_allreduce(dev[r], dev[r], n, fp8[i], HAL_REDOP_SUM,
                                                 job.comms[r], job.streams[r])) ||
                    !CTS_EXPECT_OK(hal_memcpy_async(host[r], dev[r], n, job.streams[r])))
                    rc = CTS_FAIL;
            for (int r = 0; r < 2; r++) {
                if (rc != CTS_PASS)
                    hal_comm_abort(job.comms[r]);
                hal_status_t st = cts_poll_stream(job.streams[r], CC_TIMEOUT_MS);
                if (rc == CTS_PASS && !CTS_EXPECT_OK(st))
                    rc = CTS_FAIL;
            }
            for (int r = 0; r < 2 && rc == CTS_PASS; r++)
                for (size_t j = 0; j < n; j++) {
                    char detail[256];
                    if (!cc_check_reduced(fp8[i], HAL_REDOP_SUM, 2, j, 81,
                                          cc_get(fp8[i], host[r], j), detail, sizeof(detail))) {
                        cts_failf(__FILE__, __LINE__, "%s allreduce, rank %d, element %zu: %s",
                                  cc_dtype_name(fp8[i]), r, j, detail);
                        rc = CTS_FAIL;
                        break;
                    }
                }
            for (int r = 0; r < 2; r++) {
                hal_mem_free(host[r]);
                hal_mem_free(dev[r]);
            }
        }
    }
    if (rc == CTS_PASS)
        rc = cc_local_allreduce(&job, ARG_COUNT, 5);
    arg_bufs_free(&a);
    cc_local_close(&job);
    return rc;
}

/* ---- Ranks that disagree --------------------------------------------------------------------- */

enum { MISMATCH_COUNT, MISMATCH_DTYPE, MISMATCH_OP, MISMATCH_ROOT };

static void mismatch_rank(cc_rank_t *r)
{
    static const char *const names[] = { "count", "dtype", "operation", "root" };
    const bool deviant = r->rank == r->nranks - 1;
    cc_case_t c = {
        .kind = CC_ALLREDUCE, .dtype = HAL_DTYPE_F32, .op = HAL_REDOP_SUM, .count = 7, .seed = 61
    };
    cc_bufs_t b;
    hal_stream_t spare = NULL;
    if (!cc_bufs_alloc(r, &b, 64 * 8 + CC_GUARD))
        return;
    /* In step first. */
    if (!cc_run_case(r, &b, &c) || !CC_EXPECT_OK(r, hal_stream_create(r->device, 0, &spare))) {
        cc_break(r);
        cc_bufs_release(r, &b);
        return;
    }
    switch (r->param) {
    case MISMATCH_COUNT:
        c.count = deviant ? 8 : 7;
        break;
    case MISMATCH_DTYPE:
        c.dtype = deviant ? HAL_DTYPE_I32 : HAL_DTYPE_F32; /* the same size */
        break;
    case MISMATCH_OP:
        c.op = deviant ? HAL_REDOP_MAX : HAL_REDOP_SUM;
        break;
    default:
        c.kind = CC_BROADCAST;
        c.root = deviant ? 1 : 0;
        break;
    }
    const size_t bytes = 64 * 8 + CC_GUARD;
    cc_fill(c.dtype, CC_CLASS_ADD, r->rank, 0, c.count, c.seed, b.host_a);
    cts_pattern_fill(b.host_b, bytes, 62);
    hal_status_t st = hal_memcpy_async(b.dev_a, b.host_a, bytes, r->stream);
    if (st == HAL_OK)
        st = hal_memcpy_async(b.dev_b, b.host_b, bytes, r->stream);
    if (!CC_EXPECT_OK(r, st) ||
        !CC_EXPECT_OK(r, cc_issue(&c, b.dev_a, b.dev_b, r->comm, r->stream))) {
        cc_break(r);
        hal_stream_destroy(spare);
        cc_bufs_release(r, &b);
        return;
    }
    /* Latched on the stream and the communicator. */
    st = cc_poll_stream(r->stream, CC_HANG_MS);
    if (st != HAL_ERROR_INVALID_ARGUMENT)
        CC_FAILF(r,
                 "ranks disagreeing on the %s: the stream reported %s (%s), expected "
                 "HAL_ERROR_INVALID_ARGUMENT",
                 names[r->param], hal_status_string(st),
                 st == HAL_OK ? "the collective ran" : hal_last_error_message());
    hal_status_t async = HAL_ERROR_INTERNAL;
    CC_EXPECT_OK(r, hal_comm_get_async_error(r->comm, &async));
    CC_EXPECT_STATUS(r, async, HAL_ERROR_INVALID_ARGUMENT);
    /* No data written: read back through another stream (this one failed). */
    if (CC_EXPECT_OK(r, hal_memcpy_async(b.host_b, b.dev_b, bytes, spare)) &&
        CC_EXPECT_OK(r, hal_stream_synchronize(spare))) {
        size_t at = cts_pattern_find_mismatch(b.host_b, bytes, 62);
        if (at != bytes)
            CC_FAILF(r, "ranks disagreeing on the %s: the receive buffer was written (byte %zu)",
                     names[r->param], at);
    }
    /* Sticky: every later call returns the latched error at once. */
    CC_EXPECT_STATUS(
        r, hal_allreduce(b.dev_a, b.dev_b, 7, HAL_DTYPE_F32, HAL_REDOP_SUM, r->comm, spare),
        HAL_ERROR_INVALID_ARGUMENT);
    CC_EXPECT_STATUS(r, hal_barrier(r->comm, spare), HAL_ERROR_INVALID_ARGUMENT);
    CC_EXPECT_STATUS(r, hal_send(b.dev_a, 7, HAL_DTYPE_F32, 0, r->comm, spare),
                     HAL_ERROR_INVALID_ARGUMENT);
    CC_EXPECT_STATUS(r, hal_comm_finalize(r->comm), HAL_ERROR_INVALID_ARGUMENT);
    /* A stream-ordered free on the failed stream is either enqueued (callbacks still run there)
     * or refused with the stream's error and done at once: the memory is never lost with it. */
    st = hal_mem_free_async(b.dev_b, r->stream);
    if (st != HAL_OK)
        CC_EXPECT_STATUS(r, st, HAL_ERROR_INVALID_ARGUMENT);
    CC_EXPECT_STATUS(r, hal_stream_synchronize(r->stream), HAL_ERROR_INVALID_ARGUMENT);
    hal_mem_info_t info = HAL_MEM_INFO_INIT;
    if (CC_EXPECT_OK(r, hal_mem_get_info(b.dev_b, &info)))
        CC_EXPECT(r, info.kind == HAL_MEM_KIND_UNREGISTERED);
    b.dev_b = NULL;
    CC_EXPECT_OK(r, hal_stream_query(spare));
    CC_EXPECT_OK(r, hal_stream_destroy(spare));
    CC_EXPECT_STATUS(r, hal_stream_destroy(r->stream), HAL_ERROR_INVALID_ARGUMENT);
    r->stream = NULL;
    r->expect_destroy = HAL_ERROR_INVALID_ARGUMENT;
    cc_bufs_release(r, &b);
}

const cc_scenario_t cc_scenario_mismatch = { "mismatch", mismatch_rank, 0 };

int cts_comm_mismatch_count(cts_ctx_t *ctx)
{
    return cc_run_simple(ctx, &cc_scenario_mismatch, MISMATCH_COUNT, CC_THREADS, 2);
}

int cts_comm_mismatch_dtype(cts_ctx_t *ctx)
{
    return cc_run_simple(ctx, &cc_scenario_mismatch, MISMATCH_DTYPE, CC_THREADS, 3);
}

int cts_comm_mismatch_op(cts_ctx_t *ctx)
{
    return cc_run_simple(ctx, &cc_scenario_mismatch, MISMATCH_OP, CC_THREADS, 2);
}

int cts_comm_mismatch_root(cts_ctx_t *ctx)
{
    return cc_run_simple(ctx, &cc_scenario_mismatch, MISMATCH_ROOT, CC_THREADS, 3);
}

int cts_comm_mismatch_count_processes(cts_ctx_t *ctx)
{
    return cc_run_simple(ctx, &cc_scenario_mismatch, MISMATCH_COUNT, CC_PROCESSES, 3);
}

int cts_comm_mismatch_root_processes(cts_ctx_t *ctx)
{
    return cc_run_simple(ctx, &cc_scenario_mismatch, MISMATCH_ROOT, CC_PROCESSES, 2);
}

/* ---- Abort ----------------------------------------------------------------------------------- */

typedef struct aborter {
    hal_comm_t comm;
    unsigned delay_ms;
    hal_status_t status;
} aborter_t;

static void *aborter_main(void *p)
{
    aborter_t *a = p;
    cts_sleep_ms(a->delay_ms);
    a->status = hal_comm_abort(a->comm);
    return NULL;
}

/* Rank 1 joins the allreduce late, when its peer has failed already: only the collective is
 * enqueued. It may fail as soon as it is enqueued, so the call may already return the error it
 * latched (the communicator's sticky error); either way the stream reports it. */
static bool late_allreduce(cc_local_t *job, cc_local_bufs_t *b)
{
    hal_status_t st = hal_allreduce(b->send[1], b->recv[1], b->count, HAL_DTYPE_F32, HAL_REDOP_SUM,
                                    job->comms[1], job->streams[1]);
    if (st == HAL_OK)
        return true;
    hal_status_t async = HAL_ERROR_INTERNAL;
    hal_comm_get_async_error(job->comms[1], &async);
    return CTS_EXPECT_STATUS(st, async);
}

/* How the aborted rank waits: stream synchronize, hal_comm_finalize, or nothing (the work is
 * queued behind a gate when the abort comes). */
enum { WAIT_SYNCHRONIZE, WAIT_FINALIZE, WAIT_QUEUED };

static int abort_test(cts_ctx_t *ctx, int how)
{
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    cc_local_t job;
    cc_local_bufs_t b;
    CTS_CHECK(cc_local_open(ctx, &job, 2, CC_TIMEOUT_MS) == CTS_PASS);
    if (cc_local_bufs_alloc(&job, &b, 1023, 91) != CTS_PASS) {
        cc_local_close(&job);
        return CTS_FAIL;
    }
    int rc = CTS_PASS;
    cts_gate_t *gate = NULL;
    if (how == WAIT_QUEUED) {
        gate = cts_gate_new(ctx);
        if (!CTS_EXPECT_OK(cts_gate_enqueue(gate, job.streams[0])))
            rc = CTS_FAIL;
    }
    /* Rank 0 enters an allreduce that rank 1 does not join (yet). */
    if (rc == CTS_PASS && !CTS_EXPECT_OK(cc_local_enqueue(&job, &b, 0, NULL, NULL)))
        rc = CTS_FAIL;
    aborter_t ab = { .comm = job.comms[0], .delay_ms = 300, .status = HAL_ERROR_INTERNAL };
    pthread_t t;
    bool started = false;
    hal_status_t st = HAL_ERROR_INTERNAL;
    if (rc == CTS_PASS) {
        cts_sleep_ms(100);
        if (!CTS_EXPECT_STATUS(hal_stream_query(job.streams[0]), HAL_NOT_READY))
            rc = CTS_FAIL;
    }
    if (rc == CTS_PASS && how != WAIT_QUEUED) {
        started = pthread_create(&t, NULL, aborter_main, &ab) == 0;
        CTS_EXPECT(started);
        if (started)
            st = how == WAIT_FINALIZE ? hal_comm_finalize(job.comms[0])
                                      : hal_stream_synchronize(job.streams[0]);
        if (started)
            pthread_join(t, NULL);
        /* HAL_ERROR_ABORTED, not the timeout's status (after 20 s): the abort ended the wait. */
        if (!CTS_EXPECT_OK(ab.status) || !CTS_EXPECT_STATUS(st, HAL_ERROR_ABORTED))
            rc = CTS_FAIL;
        if (how == WAIT_FINALIZE &&
            !CTS_EXPECT_STATUS(cts_poll_stream(job.streams[0], CC_HANG_MS), HAL_ERROR_ABORTED))
            rc = CTS_FAIL;
    } else if (rc == CTS_PASS) {
        /* Queued behind the gate: fails without running once the gate opens. */
        if (!CTS_EXPECT_OK(hal_comm_abort(job.comms[0])))
            rc = CTS_FAIL;
        cts_gate_open(gate);
        st = cts_poll_stream(job.streams[0], CC_HANG_MS);
        if (!CTS_EXPECT_STATUS(st, HAL_ERROR_ABORTED))
            rc = CTS_FAIL;
    }
    if (gate != NULL)
        cts_gate_open(gate);
    hal_status_t async = HAL_ERROR_INTERNAL;
    if (rc == CTS_PASS &&
        (!CTS_EXPECT_OK(hal_comm_get_async_error(job.comms[0], &async)) ||
         !CTS_EXPECT_STATUS(async, HAL_ERROR_ABORTED) ||
         !CTS_EXPECT_STATUS(hal_allreduce(b.send[0], b.recv[0], 1, HAL_DTYPE_F32, HAL_REDOP_SUM,
                                          job.comms[0], job.streams[0]),
                            HAL_ERROR_ABORTED)))
        rc = CTS_FAIL;
    /* The peer joins later and learns of the abort: HAL_ERROR_REMOTE, not its timeout's
     * HAL_ERROR_TIMEOUT. */
    if (rc == CTS_PASS) {
        if (!late_allreduce(&job, &b) ||
            !CTS_EXPECT_STATUS(cts_poll_stream(job.streams[1], CC_HANG_MS), HAL_ERROR_REMOTE) ||
            !CTS_EXPECT_OK(hal_comm_get_async_error(job.comms[1], &async)) ||
            !CTS_EXPECT_STATUS(async, HAL_ERROR_REMOTE))
            rc = CTS_FAIL;
    }
    if (rc != CTS_PASS)
        for (int r = 0; r < 2; r++)
            hal_comm_abort(job.comms[r]);
    /* Both streams and communicators report their latched errors when destroyed (an abort
     * the application asked for may also count as a clean destroy). */
    if (rc == CTS_PASS) {
        hal_status_t s0 = hal_stream_destroy(job.streams[0]);
        hal_status_t s1 = hal_stream_destroy(job.streams[1]);
        hal_status_t c0 = hal_comm_destroy(job.comms[0]);
        hal_status_t c1 = hal_comm_destroy(job.comms[1]);
        memset(job.streams, 0, sizeof(job.streams));
        memset(job.comms, 0, sizeof(job.comms));
        if (!CTS_EXPECT_STATUS(s0, HAL_ERROR_ABORTED) || !CTS_EXPECT_STATUS(s1, HAL_ERROR_REMOTE) ||
            !CTS_EXPECT_STATUS2(c0, HAL_OK, HAL_ERROR_ABORTED) ||
            !CTS_EXPECT_STATUS(c1, HAL_ERROR_REMOTE))
            rc = CTS_FAIL;
    }
    cc_local_close(&job);
    cc_local_bufs_free(&job, &b);
    return rc;
}

/* hal_comm_abort from another thread unblocks a rank waiting for its stream. */
int cts_comm_abort_unblocks_synchronize(cts_ctx_t *ctx)
{
    return abort_test(ctx, WAIT_SYNCHRONIZE);
}

/* ... and a rank blocked in hal_comm_finalize. */
int cts_comm_abort_unblocks_finalize(cts_ctx_t *ctx)
{
    return abort_test(ctx, WAIT_FINALIZE);
}

/* Work queued on the communicator when it is aborted fails with HAL_ERROR_ABORTED. */
int cts_comm_abort_fails_queued_work(cts_ctx_t *ctx)
{
    return abort_test(ctx, WAIT_QUEUED);
}

/* ---- Peers that stop answering, leave, or die ------------------------------------------------ */

/* A peer that never enters the collective: HAL_ERROR_TIMEOUT once the timeout passed. */
int cts_comm_silent_peer_times_out(cts_ctx_t *ctx)
{
    cc_local_t job;
    cc_local_bufs_t b;
    CTS_CHECK(cc_local_open(ctx, &job, 2, CC_FAIL_TIMEOUT_MS) == CTS_PASS);
    if (cc_local_bufs_alloc(&job, &b, 1023, 93) != CTS_PASS) {
        cc_local_close(&job);
        return CTS_FAIL;
    }
    int rc = CTS_PASS;
    double t0 = cts_now_ms();
    hal_status_t st = cc_local_enqueue(&job, &b, 0, NULL, NULL);
    if (CTS_EXPECT_OK(st))
        st = cts_poll_stream(job.streams[0], CC_HANG_MS);
    double ms = cts_now_ms() - t0;
    hal_status_t async = HAL_ERROR_INTERNAL;
    if (!CTS_EXPECT_STATUS(st, HAL_ERROR_TIMEOUT) ||
        !CTS_EXPECT_OK(hal_comm_get_async_error(job.comms[0], &async)) ||
        !CTS_EXPECT_STATUS(async, HAL_ERROR_TIMEOUT))
        rc = CTS_FAIL;
    else if (ms < 0.9 * CC_FAIL_TIMEOUT_MS) { /* not before the timeout */
        cts_failf(__FILE__, __LINE__, "a timeout of %u ms struck after %.0f ms", CC_FAIL_TIMEOUT_MS,
                  ms);
        rc = CTS_FAIL;
    }
    /* The silent rank, arriving late, fails too (its peer gave up). */
    if (rc == CTS_PASS) {
        if (!late_allreduce(&job, &b) ||
            !CTS_EXPECT_STATUS2(cts_poll_stream(job.streams[1], CC_HANG_MS), HAL_ERROR_REMOTE,
                                HAL_ERROR_TIMEOUT))
            rc = CTS_FAIL;
    }
    if (rc != CTS_PASS)
        for (int r = 0; r < 2; r++)
            hal_comm_abort(job.comms[r]);
    cc_local_close(&job);
    cc_local_bufs_free(&job, &b);
    return rc;
}

/* Rank `param` aborts its communicator while the others wait in an allreduce: they see
 * HAL_ERROR_REMOTE (not their timeout's HAL_ERROR_TIMEOUT). */
static void departed_rank(cc_rank_t *r)
{
    cc_case_t c = {
        .kind = CC_ALLREDUCE, .dtype = HAL_DTYPE_F32, .op = HAL_REDOP_SUM, .count = 1023, .seed = 95
    };
    cc_bufs_t b;
    if (!cc_bufs_alloc(r, &b, cc_case_bytes(&c, r->nranks)))
        return;
    if (!cc_run_case(r, &b, &c)) { /* in step first */
        cc_bufs_release(r, &b);
        return;
    }
    if (r->rank == r->param) {
        cts_sleep_ms(300);
        CC_EXPECT_OK(r, hal_comm_abort(r->comm));
        hal_status_t async = HAL_ERROR_INTERNAL;
        CC_EXPECT_OK(r, hal_comm_get_async_error(r->comm, &async));
        CC_EXPECT_STATUS(r, async, HAL_ERROR_ABORTED);
        CC_EXPECT_STATUS2(r, hal_comm_destroy(r->comm), HAL_OK, HAL_ERROR_ABORTED);
        r->comm = NULL;
        cc_bufs_release(r, &b);
        return;
    }
    hal_status_t st = cc_issue(&c, b.dev_a, b.dev_b, r->comm, r->stream);
    /* A rank delayed past the departure may get the latched error at enqueue already. */
    if (CC_EXPECT_STATUS2(r, st, HAL_OK, HAL_ERROR_REMOTE))
        st = cc_poll_stream(r->stream, CC_HANG_MS);
    CC_EXPECT_STATUS(r, st, HAL_ERROR_REMOTE);
    hal_status_t async = HAL_ERROR_INTERNAL;
    CC_EXPECT_OK(r, hal_comm_get_async_error(r->comm, &async));
    CC_EXPECT_STATUS(r, async, HAL_ERROR_REMOTE);
    CC_EXPECT_STATUS(r, cc_issue(&c, b.dev_a, b.dev_b, r->comm, r->stream), HAL_ERROR_REMOTE);
    CC_EXPECT_STATUS(r, hal_stream_destroy(r->stream), HAL_ERROR_REMOTE);
    r->stream = NULL;
    r->expect_destroy = HAL_ERROR_REMOTE;
    cc_bufs_release(r, &b);
}

const cc_scenario_t cc_scenario_departed = { "departed", departed_rank, 0 };

int cts_comm_departed_peer_threads(cts_ctx_t *ctx)
{
    return cc_run_simple(ctx, &cc_scenario_departed, 1, CC_THREADS, 3);
}

int cts_comm_departed_peer_processes(cts_ctx_t *ctx)
{
    return cc_run_simple(ctx, &cc_scenario_departed, 0, CC_PROCESSES, 3);
}

/* Rank `param` is SIGKILLed (by the test) while every other rank is in an allreduce: the
 * victim's stream holds its own allreduce back with a host callback (without host callbacks the
 * victim issues none), the others wait in theirs. */
static void kill_rank(cc_rank_t *r)
{
    cc_case_t c = {
        .kind = CC_ALLREDUCE, .dtype = HAL_DTYPE_F32, .op = HAL_REDOP_SUM, .count = 1023, .seed = 97
    };
    cc_bufs_t b;
    if (!cc_bufs_alloc(r, &b, cc_case_bytes(&c, r->nranks)))
        return;
    if (!cc_run_case(r, &b, &c)) { /* in step first */
        cc_bufs_release(r, &b);
        return;
    }
    if (r->rank == r->param) {
        bool callbacks = (r->props.capabilities & HAL_DEVICE_CAP_HOST_CALLBACKS) != 0;
        if (!callbacks || (CC_EXPECT_OK(r, cc_enqueue_delay(r->stream, 60000)) &&
                           CC_EXPECT_OK(r, cc_issue(&c, b.dev_a, b.dev_b, r->comm, r->stream)))) {
            cc_ready(r);
            cts_sleep_ms(60000); /* killed meanwhile */
        }
        CC_FAILF(r, "this rank was to be killed");
        cc_break(r);
        cc_bufs_release(r, &b);
        return;
    }
    hal_status_t st = cc_issue(&c, b.dev_a, b.dev_b, r->comm, r->stream);
    if (!CC_EXPECT_OK(r, st)) {
        cc_break(r);
        cc_bufs_release(r, &b);
        return;
    }
    cc_ready(r);
    st = cc_poll_stream(r->stream, CC_JOB_DEADLINE_MS);
    if (!CC_EXPECT_STATUS2(r, st, HAL_ERROR_REMOTE, HAL_ERROR_TIMEOUT)) {
        cc_break(r);
        cc_bufs_release(r, &b);
        return;
    }
    hal_status_t async = HAL_ERROR_INTERNAL;
    CC_EXPECT_OK(r, hal_comm_get_async_error(r->comm, &async));
    CC_EXPECT_STATUS2(r, async, HAL_ERROR_REMOTE, HAL_ERROR_TIMEOUT);
    CC_EXPECT_STATUS(r, cc_issue(&c, b.dev_a, b.dev_b, r->comm, r->stream), async);
    CC_EXPECT_STATUS(r, hal_stream_destroy(r->stream), st);
    r->stream = NULL;
    r->expect_destroy = async;
    cc_bufs_release(r, &b);
}

const cc_scenario_t cc_scenario_kill = { "kill", kill_rank, 0 };

static int killed_peer(cts_ctx_t *ctx, int nranks, int victim)
{
    cc_job_t job = CC_JOB_INIT;
    job.scenario = &cc_scenario_kill;
    job.mode = CC_PROCESSES;
    job.nranks = nranks;
    job.param = victim;
    job.timeout_ms = CC_FAIL_TIMEOUT_MS;
    job.kill_rank = victim;
    job.kill_delay_ms = 300;
    return cc_run(ctx, &job);
}

/* One rank of a 4-rank allreduce is killed; the other three fail with HAL_ERROR_REMOTE or
 * HAL_ERROR_TIMEOUT instead of hanging. */
int cts_comm_killed_peer_processes_4(cts_ctx_t *ctx)
{
    return killed_peer(ctx, 4, 3);
}

int cts_comm_killed_peer_processes_3(cts_ctx_t *ctx)
{
    return killed_peer(ctx, 3, 0);
}

int cts_comm_killed_peer_processes_2(cts_ctx_t *ctx)
{
    return killed_peer(ctx, 2, 1);
}
