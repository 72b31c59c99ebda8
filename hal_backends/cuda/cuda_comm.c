/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA backend: native collectives through NCCL.
 *
 * comm_init: the ranks exchange (through the HAL's bootstrap, which has already brought every
 * rank together) their GPU's UUID and their NCCL version. When every rank has NCCL, all the same
 * version, and no two ranks share a GPU, rank 0 makes an ncclUniqueId, broadcasts it, and every
 * rank calls ncclCommInitRankConfig. Otherwise comm_init returns no native communicator and the
 * HAL runs this communicator's collectives itself, host-staged: NCCL refuses two ranks on one
 * GPU, and a mix of NCCL and host ranks would never meet. All ranks see the same exchange, so
 * they all decide alike.
 *
 * The communicator is blocking (NCCL's default): a collective returns once it is enqueued on
 * the stream. NCCL's init has no timeout of its own; the HAL's bootstrap, which precedes it,
 * enforces the communicator's timeout on the rendezvous. Failures of peers afterwards surface as
 * NCCL's asynchronous errors (comm_get_async_error). hal_group_begin/end bracket the native
 * calls with ncclGroupStart/End. */
#if HAL_CUDA_WITH_NCCL

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/cuda/cuda_internal.h"

/* hal_dtype_t and hal_redop_t were chosen to equal NCCL's enums. */
_Static_assert((int)HAL_DTYPE_I8 == (int)ncclInt8 && (int)HAL_DTYPE_U8 == (int)ncclUint8 &&
                   (int)HAL_DTYPE_I32 == (int)ncclInt32 && (int)HAL_DTYPE_U32 == (int)ncclUint32 &&
                   (int)HAL_DTYPE_I64 == (int)ncclInt64 && (int)HAL_DTYPE_U64 == (int)ncclUint64 &&
                   (int)HAL_DTYPE_F16 == (int)ncclFloat16 &&
                   (int)HAL_DTYPE_F32 == (int)ncclFloat32 &&
                   (int)HAL_DTYPE_F64 == (int)ncclFloat64 &&
                   (int)HAL_DTYPE_BF16 == (int)ncclBfloat16,
               "hal_dtype_t differs from ncclDataType_t");
#if NCCL_VERSION_CODE >= 22400
_Static_assert((int)HAL_DTYPE_F8_E4M3 == (int)ncclFloat8e4m3 &&
                   (int)HAL_DTYPE_F8_E5M2 == (int)ncclFloat8e5m2,
               "hal_dtype_t differs from ncclDataType_t (fp8)");
#endif
_Static_assert((int)HAL_REDOP_SUM == (int)ncclSum && (int)HAL_REDOP_PROD == (int)ncclProd &&
                   (int)HAL_REDOP_MAX == (int)ncclMax && (int)HAL_REDOP_MIN == (int)ncclMin &&
                   (int)HAL_REDOP_AVG == (int)ncclAvg,
               "hal_redop_t differs from ncclRedOp_t");

typedef struct cuda_comm {
    cuda_device_t *device;
    const cuda_nccl_t *nccl;
    ncclComm_t nc;
    int nranks, rank;
    pthread_mutex_t lock; /* aborted */
    bool aborted;
} cuda_comm_t;

/* Depth of hal_group_begin on this thread (the HAL brackets native calls of one group). */
static _Thread_local int group_depth;

/* What ranks exchange at init. */
typedef struct rank_info {
    unsigned char uuid[16];
    int32_t nccl_version; /* 0: no NCCL */
    int32_t reserved;
} rank_info_t;

static size_t dtype_size(hal_dtype_t dtype)
{
    switch (dtype) {
    case HAL_DTYPE_I8:
    case HAL_DTYPE_U8:
    case HAL_DTYPE_F8_E4M3:
    case HAL_DTYPE_F8_E5M2:
        return 1;
    case HAL_DTYPE_F16:
    case HAL_DTYPE_BF16:
        return 2;
    case HAL_DTYPE_I32:
    case HAL_DTYPE_U32:
    case HAL_DTYPE_F32:
        return 4;
    default:
        return 8;
    }
}

/* Reports a failed NCCL call with NCCL's own last message. */
static hal_status_t nccl_fail(const cuda_backend_t *b, const cuda_nccl_t *n, ncclComm_t nc,
                              ncclResult_t r, const char *call)
{
    const char *last = n->GetLastError(nc);
    cuda_set_error(b, "%s returned %s (%d)%s%s", call, n->GetErrorString(r), (int)r,
                   last != NULL && last[0] != '\0' ? ": " : "", last != NULL ? last : "");
    return cuda_nccl_status_of((int)r);
}

/* Whether NCCL can serve these ranks: all have it, one version, one GPU each. */
static bool ranks_fit_nccl(const rank_info_t *all, int nranks)
{
    for (int i = 0; i < nranks; i++) {
        if (all[i].nccl_version == 0 || all[i].nccl_version != all[0].nccl_version)
            return false;
        for (int j = 0; j < i; j++)
            if (memcmp(all[i].uuid, all[j].uuid, sizeof(all[i].uuid)) == 0)
                return false;
    }
    return true;
}

hal_status_t cuda_comm_init(void *device, const hal_backend_comm_args_t *args, void **out)
{
    cuda_device_t *d = device;
    const cuda_backend_t *b = d->backend;
    const cuda_nccl_t *n = b->nccl;
    *out = NULL;
    if (args->nranks > 1) {
        rank_info_t mine;
        memset(&mine, 0, sizeof(mine));
        memcpy(mine.uuid, &d->prop.uuid, sizeof(mine.uuid));
        mine.nccl_version = n != NULL ? n->version : 0;
        rank_info_t *all = calloc((size_t)args->nranks, sizeof(*all));
        if (all == NULL) {
            cuda_set_error(b, "calloc failed for the ranks' GPU list");
            return HAL_ERROR_OUT_OF_HOST_MEMORY;
        }
        hal_status_t st = args->allgather(args->bootstrap, &mine, sizeof(mine), all);
        bool fits = st == HAL_OK && ranks_fit_nccl(all, args->nranks);
        free(all);
        if (st != HAL_OK)
            return st;
        if (!fits)
            return HAL_OK; /* host-staged collectives */
    } else if (n == NULL) {
        return HAL_OK;
    }

    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (args->rank == 0) {
        ncclResult_t r = n->GetUniqueId(&id);
        if (r != ncclSuccess)
            return nccl_fail(b, n, NULL, r, "ncclGetUniqueId");
    }
    if (args->nranks > 1) {
        hal_status_t st = args->broadcast(args->bootstrap, &id, sizeof(id), 0);
        if (st != HAL_OK)
            return st;
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1;
    ncclComm_t nc = NULL;
    int prev;
    cudaError_t err = cuda_guard_enter(d, &prev);
    if (err != cudaSuccess) {
        cuda_guard_leave(d, prev);
        return cuda_fail(b, err, CUDA_OP_OTHER, "cudaSetDevice(%d)", d->ordinal);
    }
    ncclResult_t r = n->CommInitRankConfig(&nc, args->nranks, id, args->rank, &config);
    cuda_guard_leave(d, prev);
    if (r != ncclSuccess) {
        char call[128];
        snprintf(call, sizeof(call), "ncclCommInitRankConfig(nranks %d, rank %d, device %d)",
                 args->nranks, args->rank, d->ordinal);
        return nccl_fail(b, n, NULL, r, call);
    }
    cuda_comm_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        n->CommAbort(nc);
        cuda_set_error(b, "calloc(%zu) failed for a communicator", sizeof(*c));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    c->device = d;
    c->nccl = n;
    c->nc = nc;
    c->nranks = args->nranks;
    c->rank = args->rank;
    pthread_mutex_init(&c->lock, NULL);
    *out = c;
    return HAL_OK;
}

static bool is_aborted(cuda_comm_t *c)
{
    pthread_mutex_lock(&c->lock);
    bool a = c->aborted;
    pthread_mutex_unlock(&c->lock);
    return a;
}

hal_status_t cuda_comm_destroy(void *comm)
{
    cuda_comm_t *c = comm;
    const cuda_backend_t *b = c->device->backend;
    hal_status_t st = HAL_OK;
    if (!is_aborted(c)) {
        int prev;
        cuda_guard_enter(c->device, &prev);
        /* Blocking communicator: finalize waits for its queued operations. */
        ncclResult_t r = c->nccl->CommFinalize(c->nc);
        if (r != ncclSuccess)
            st = nccl_fail(b, c->nccl, c->nc, r, "ncclCommFinalize");
        r = c->nccl->CommDestroy(c->nc);
        if (r != ncclSuccess && st == HAL_OK)
            st = nccl_fail(b, c->nccl, NULL, r, "ncclCommDestroy");
        cuda_guard_leave(c->device, prev);
    }
    /* An aborted communicator was freed by ncclCommAbort. */
    pthread_mutex_destroy(&c->lock);
    free(c);
    return st;
}

hal_status_t cuda_comm_abort(void *comm)
{
    cuda_comm_t *c = comm;
    pthread_mutex_lock(&c->lock);
    bool first = !c->aborted;
    c->aborted = true;
    pthread_mutex_unlock(&c->lock);
    if (first)
        c->nccl->CommAbort(c->nc);
    return HAL_OK;
}

hal_status_t cuda_comm_get_async_error(void *comm)
{
    cuda_comm_t *c = comm;
    const cuda_backend_t *b = c->device->backend;
    if (is_aborted(c)) {
        cuda_set_error(b, "the NCCL communicator was aborted");
        return HAL_ERROR_ABORTED;
    }
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = c->nccl->CommGetAsyncError(c->nc, &async);
    if (r != ncclSuccess)
        return nccl_fail(b, c->nccl, c->nc, r, "ncclCommGetAsyncError");
    if (async == ncclSuccess)
        return HAL_OK;
    if (async == ncclInProgress)
        return HAL_IN_PROGRESS;
    return nccl_fail(b, c->nccl, c->nc, async, "the NCCL communicator (asynchronous error)");
}

hal_status_t cuda_comm_get_native_handle(void *comm, uintptr_t *native)
{
    *native = (uintptr_t)((cuda_comm_t *)comm)->nc;
    return HAL_OK;
}

/* ---- collectives ---------------------------------------------------------------------------- */

/* What every collective checks before NCCL sees it. NCCL enqueues straight onto the CUDA
 * stream, so a stream with queued host work is drained first (the call then blocks until that
 * work ran); a stream that failed refuses, like every other data call. */
static hal_status_t prologue(cuda_comm_t *c, cuda_stream_t *s, int *prev)
{
    const cuda_backend_t *b = c->device->backend;
    if (is_aborted(c)) {
        cuda_set_error(b, "the NCCL communicator was aborted");
        return HAL_ERROR_ABORTED;
    }
    hal_status_t st = cuda_stream_latched(s);
    if (st != HAL_OK)
        return st;
    cuda_stream_drain(s);
    cudaError_t err = cuda_guard_enter(c->device, prev);
    if (err != cudaSuccess) {
        cuda_guard_leave(c->device, *prev);
        return cuda_fail(b, err, CUDA_OP_OTHER, "cudaSetDevice(%d)", c->device->ordinal);
    }
    return HAL_OK;
}

static hal_status_t epilogue(cuda_comm_t *c, int prev, ncclResult_t r, const char *call)
{
    cuda_guard_leave(c->device, prev);
    if (r == ncclSuccess)
        return HAL_OK;
    return nccl_fail(c->device->backend, c->nccl, c->nc, r, call);
}

/* A HAL call with no elements moves nothing on any rank: NCCL is not involved. */
#define COLL_BEGIN(count)                     \
    cuda_comm_t *c = comm;                    \
    cuda_stream_t *s = stream;                \
    if ((count) == 0)                         \
        return HAL_OK;                        \
    int prev;                                 \
    hal_status_t st_ = prologue(c, s, &prev); \
    if (st_ != HAL_OK)                        \
    return st_

hal_status_t cuda_allreduce(void *comm, void *stream, const hal_backend_ptr_t *send,
                            const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype,
                            hal_redop_t op)
{
    COLL_BEGIN(count);
    ncclResult_t r = c->nccl->AllReduce(send->ptr, recv->ptr, count, (ncclDataType_t)dtype,
                                        (ncclRedOp_t)op, c->nc, s->h);
    return epilogue(c, prev, r, "ncclAllReduce");
}

hal_status_t cuda_broadcast(void *comm, void *stream, const hal_backend_ptr_t *send,
                            const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype,
                            int root)
{
    COLL_BEGIN(count);
    ncclResult_t r =
        c->nccl->Broadcast(send->ptr, recv->ptr, count, (ncclDataType_t)dtype, root, c->nc, s->h);
    return epilogue(c, prev, r, "ncclBroadcast");
}

hal_status_t cuda_reduce(void *comm, void *stream, const hal_backend_ptr_t *send,
                         const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype,
                         hal_redop_t op, int root)
{
    COLL_BEGIN(count);
    ncclResult_t r = c->nccl->Reduce(send->ptr, recv->ptr, count, (ncclDataType_t)dtype,
                                     (ncclRedOp_t)op, root, c->nc, s->h);
    return epilogue(c, prev, r, "ncclReduce");
}

hal_status_t cuda_allgather(void *comm, void *stream, const hal_backend_ptr_t *send,
                            const hal_backend_ptr_t *recv, size_t sendcount, hal_dtype_t dtype)
{
    COLL_BEGIN(sendcount);
    ncclResult_t r =
        c->nccl->AllGather(send->ptr, recv->ptr, sendcount, (ncclDataType_t)dtype, c->nc, s->h);
    return epilogue(c, prev, r, "ncclAllGather");
}

hal_status_t cuda_reduce_scatter(void *comm, void *stream, const hal_backend_ptr_t *send,
                                 const hal_backend_ptr_t *recv, size_t recvcount, hal_dtype_t dtype,
                                 hal_redop_t op)
{
    COLL_BEGIN(recvcount);
    ncclResult_t r = c->nccl->ReduceScatter(send->ptr, recv->ptr, recvcount, (ncclDataType_t)dtype,
                                            (ncclRedOp_t)op, c->nc, s->h);
    return epilogue(c, prev, r, "ncclReduceScatter");
}

hal_status_t cuda_alltoall(void *comm, void *stream, const hal_backend_ptr_t *send,
                           const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype)
{
    COLL_BEGIN(count);
    ncclResult_t r;
    if (c->nccl->AlltoAll != NULL) {
        r = c->nccl->AlltoAll(send->ptr, recv->ptr, count, (ncclDataType_t)dtype, c->nc, s->h);
        return epilogue(c, prev, r, "ncclAlltoAll");
    }
    /* NCCL before 2.28: one send and one receive per peer, in a group. */
    size_t chunk = count * dtype_size(dtype);
    r = c->nccl->GroupStart();
    for (int p = 0; p < c->nranks && r == ncclSuccess; p++) {
        r = c->nccl->Send((const char *)send->ptr + (size_t)p * chunk, count, (ncclDataType_t)dtype,
                          p, c->nc, s->h);
        if (r == ncclSuccess)
            r = c->nccl->Recv((char *)recv->ptr + (size_t)p * chunk, count, (ncclDataType_t)dtype,
                              p, c->nc, s->h);
    }
    ncclResult_t end = c->nccl->GroupEnd();
    return epilogue(c, prev, r != ncclSuccess ? r : end, "ncclSend/ncclRecv (all-to-all)");
}

hal_status_t cuda_send(void *comm, void *stream, const hal_backend_ptr_t *send, size_t count,
                       hal_dtype_t dtype, int peer)
{
    COLL_BEGIN(count);
    ncclResult_t r = c->nccl->Send(send->ptr, count, (ncclDataType_t)dtype, peer, c->nc, s->h);
    return epilogue(c, prev, r, "ncclSend");
}

hal_status_t cuda_recv(void *comm, void *stream, const hal_backend_ptr_t *recv, size_t count,
                       hal_dtype_t dtype, int peer)
{
    COLL_BEGIN(count);
    ncclResult_t r = c->nccl->Recv(recv->ptr, count, (ncclDataType_t)dtype, peer, c->nc, s->h);
    return epilogue(c, prev, r, "ncclRecv");
}

hal_status_t cuda_group_begin(void *backend)
{
    const cuda_backend_t *b = backend;
    if (b->nccl == NULL)
        return HAL_OK;
    ncclResult_t r = b->nccl->GroupStart();
    if (r != ncclSuccess)
        return nccl_fail(b, b->nccl, NULL, r, "ncclGroupStart");
    group_depth++;
    return HAL_OK;
}

hal_status_t cuda_group_end(void *backend)
{
    const cuda_backend_t *b = backend;
    if (b->nccl == NULL || group_depth == 0)
        return HAL_OK;
    group_depth--;
    ncclResult_t r = b->nccl->GroupEnd();
    if (r != ncclSuccess)
        return nccl_fail(b, b->nccl, NULL, r, "ncclGroupEnd");
    return HAL_OK;
}

#endif /* HAL_CUDA_WITH_NCCL */
