/* SPDX-License-Identifier: Apache-2.0 */
/* torch-hal public API: collectives (since 1.1).
 *
 * NCCL's shape. One process (or thread) per rank; every rank owns one device. A unique id,
 * created once and distributed out of band, names the job: it carries the bootstrap root's
 * address and a random job secret that authenticates every connection. Collectives are
 * stream-ordered and enqueue-only: they return once the operation is queued on the stream and
 * run when the stream reaches them. Counts are in elements.
 *
 * In-place rules (as NCCL): allreduce, broadcast, reduce and alltoall are in place when
 * sendbuf == recvbuf; allgather is in place when sendbuf == recvbuf + rank * count * size;
 * reduce_scatter is in place when recvbuf == sendbuf + rank * recvcount * size. Other overlaps
 * of send and receive buffers are invalid.
 *
 * Failures: a peer that dies or stops answering turns into HAL_ERROR_REMOTE or HAL_ERROR_TIMEOUT
 * on every surviving rank within the communicator's timeout; the error latches on the
 * communicator (hal_comm_get_async_error) and on the stream. Ranks that call the same collective
 * with different counts, types, operations or roots get HAL_ERROR_INVALID_ARGUMENT latched
 * instead of corrupted data. Invalid arguments detected at enqueue time have no side effect.
 *
 * Backends may implement collectives natively, call by call; what a backend leaves out the HAL
 * runs itself on the host: over shared memory between ranks on one host (in place for
 * host-addressable devices and host memory, staged through pinned host memory otherwise) and TCP
 * across hosts. A staged collective larger than one staging chunk is pipelined: cut by element
 * ranges into chunks whose device-to-host copies, exchange and reduction, and host-to-device
 * copies overlap, with bit-identical results (every element is reduced over the ranks in rank
 * order either way). It stays one operation of its stream; it also waits for the pipelined
 * collectives enqueued before it on the same communicator, so a stream must not wait (through an
 * event) for a collective enqueued later on that communicator. Every rank of a communicator must
 * cut alike: its ranks run on devices that are all host-addressable or all not, with the same
 * HAL_COMM_STAGING_CHUNK (a rank that cuts differently fails the collective with
 * HAL_ERROR_INVALID_ARGUMENT, as for a count mismatch).
 *
 * On a backend with native collectives, a collective issued while its communicator's
 * non-blocking init still runs waits for the init to finish: only then is it known which of
 * the two runs it.
 *
 * Environment: HAL_COMM_BIND (address the bootstrap listens on; default 127.0.0.1),
 * HAL_COMM_TIMEOUT_MS (default timeout when the config gives none; default 300000),
 * HAL_COMM_SHM_DISABLE=1 (ranks on one host talk TCP as if on different hosts; for tests),
 * HAL_COMM_STAGING_CHUNK (bytes staged per pipelined chunk, 4096 to 2^30, default 1048576; 0
 * turns the pipeline off; read by hal_comm_init, which rejects another value with
 * HAL_ERROR_INVALID_ARGUMENT). */
#ifndef HAL_COMM_H
#define HAL_COMM_H

#include "hal/hal_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hal_comm_s *hal_comm_t;

#define HAL_UNIQUE_ID_BYTES 128

/* Opaque job identifier; copy it bytewise to every rank. */
typedef struct hal_unique_id {
    uint8_t internal[HAL_UNIQUE_ID_BYTES];
} hal_unique_id_t;

/* Element types; values match NCCL's ncclDataType_t. */
typedef enum hal_dtype {
    HAL_DTYPE_I8 = 0,
    HAL_DTYPE_U8 = 1,
    HAL_DTYPE_I32 = 2,
    HAL_DTYPE_U32 = 3,
    HAL_DTYPE_I64 = 4,
    HAL_DTYPE_U64 = 5,
    HAL_DTYPE_F16 = 6,
    HAL_DTYPE_F32 = 7,
    HAL_DTYPE_F64 = 8,
    HAL_DTYPE_BF16 = 9,
    HAL_DTYPE_F8_E4M3 = 10, /* only with HAL_DEVICE_CAP_FP8_COLLECTIVES */
    HAL_DTYPE_F8_E5M2 = 11, /* only with HAL_DEVICE_CAP_FP8_COLLECTIVES */
    HAL_DTYPE_COUNT,        /* one past the collectives' types */
    /* Since 1.3: element types of program tensors only (hal_tensor_desc_t); collectives refuse
     * them. */
    HAL_DTYPE_BOOL = 32, /* one byte, 0 or 1 */
    HAL_DTYPE_I16 = 33,
    HAL_DTYPE_U16 = 34,
    HAL_DTYPE_FORCE_U32 = 0x7fffffff
} hal_dtype_t;

/* Reduction operations; values match NCCL's ncclRedOp_t. AVG is SUM divided by nranks;
 * for integer types it truncates toward zero. */
typedef enum hal_redop {
    HAL_REDOP_SUM = 0,
    HAL_REDOP_PROD = 1,
    HAL_REDOP_MAX = 2,
    HAL_REDOP_MIN = 3,
    HAL_REDOP_AVG = 4,
    HAL_REDOP_COUNT,
    HAL_REDOP_FORCE_U32 = 0x7fffffff
} hal_redop_t;

/* An external key-value store for rendezvous (e.g. torch.distributed's store), used instead
 * of the TCP bootstrap when given in the config. Keys are NUL-terminated; values are bytes.
 * Callbacks return HAL_OK, HAL_ERROR_TIMEOUT (get: key absent after timeout_ms), or another
 * error, which fails the init. */
typedef struct hal_comm_store {
    size_t struct_size;
    void *user_data;
    hal_status_t (*set)(void *user_data, const char *key, const void *value, size_t size);
    /* Waits up to timeout_ms for the key; copies at most capacity bytes; *size = value size. */
    hal_status_t (*get)(void *user_data, const char *key, void *value, size_t capacity,
                        size_t *size, uint32_t timeout_ms);
} hal_comm_store_t;

typedef struct hal_comm_config {
    size_t struct_size;
    const void *next;
    uint32_t timeout_ms;           /* 0: HAL_COMM_TIMEOUT_MS, else 300000 */
    uint32_t blocking;             /* 1: init blocks until every rank joined; 0: init returns
                                      HAL_IN_PROGRESS and hal_comm_get_async_error reports progress */
    const hal_comm_store_t *store; /* optional rendezvous through a store */
} hal_comm_config_t;

#define HAL_COMM_CONFIG_INIT                                    \
    {                                                           \
        .struct_size = sizeof(hal_comm_config_t), .blocking = 1 \
    }

/* Size in bytes of one element (the program-only types BOOL, I16 and U16 included, since 1.3).
 * Returns: HAL_OK; HAL_ERROR_INVALID_ARGUMENT (unknown dtype, size NULL).
 * Thread safety: safe. */
HAL_API hal_status_t hal_dtype_get_size(hal_dtype_t dtype, size_t *size);

/* Creates a unique id and, unless HAL_COMM_ID_FLAG_STORE is given, starts the bootstrap root in
 * this process (a listener on HAL_COMM_BIND that serves the rendezvous of the communicator
 * created from this id, then exits; it also exits after the default timeout).
 * [in]  flags  0 or HAL_COMM_ID_FLAG_STORE (the id will be used with a store in the config).
 * [out] id     receives the id; its job secret comes from the system's random source.
 * Returns: HAL_OK; HAL_ERROR_INVALID_ARGUMENT (id NULL, unknown flags, bad HAL_COMM_BIND);
 * HAL_ERROR_BACKEND_SPECIFIC (socket errors, named in the message).
 * Thread safety: safe. */
#define HAL_COMM_ID_FLAG_STORE (1u << 0)
HAL_API hal_status_t hal_comm_get_unique_id(uint32_t flags, hal_unique_id_t *id);

/* Creates this rank's communicator. Blocks until all nranks ranks joined (blocking config) or
 * the timeout passed.
 * [in]  id      the job's unique id.
 * [in]  nranks  ranks in the job (1..4096).
 * [in]  rank    this rank, 0 <= rank < nranks.
 * [in]  device  this rank's device.
 * [in]  config  optional (NULL = defaults).
 * [out] comm    receives the communicator.
 * Returns: HAL_OK; HAL_IN_PROGRESS (non-blocking config); HAL_ERROR_INVALID_HANDLE;
 * HAL_ERROR_INVALID_ARGUMENT (NULL id or comm, bad ranks, malformed id, bad config, a rank
 * already taken, a bad HAL_COMM_TIMEOUT_MS or HAL_COMM_STAGING_CHUNK);
 * HAL_ERROR_PERMISSION_DENIED (a peer failed authentication); HAL_ERROR_TIMEOUT;
 * HAL_ERROR_REMOTE (a peer failed during the rendezvous); HAL_ERROR_OUT_OF_HOST_MEMORY.
 * Thread safety: safe; ranks of one process call it from different threads. */
HAL_API hal_status_t hal_comm_init(const hal_unique_id_t *id, int nranks, int rank,
                                   hal_device_t device, const hal_comm_config_t *config,
                                   hal_comm_t *comm);

/* Reports a communicator's shape.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE. Any out-parameter may be NULL.
 * Thread safety: safe. */
HAL_API hal_status_t hal_comm_get_info(hal_comm_t comm, int *nranks, int *rank,
                                       hal_device_t *device);

/* Flushes: waits until every operation enqueued on the communicator has completed on this rank.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; the latched error.
 * Thread safety: not with collectives on the same communicator. */
HAL_API hal_status_t hal_comm_finalize(hal_comm_t comm);

/* Aborts: operations blocked or queued on this rank fail with HAL_ERROR_ABORTED, peers see
 * HAL_ERROR_REMOTE; shared resources are released. The handle stays valid for
 * hal_comm_get_async_error and hal_comm_destroy.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE.
 * Thread safety: safe, from any thread, also while another thread is blocked in the
 * communicator. */
HAL_API hal_status_t hal_comm_abort(hal_comm_t comm);

/* Destroys the communicator after waiting for its queued operations (use hal_comm_abort first
 * to give up on them). The handle is invalid afterwards.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; the latched error (it is destroyed anyway).
 * Thread safety: not with other calls on the same communicator except hal_comm_abort. */
HAL_API hal_status_t hal_comm_destroy(hal_comm_t comm);

/* Reads the communicator's latched asynchronous error without clearing it.
 * [out] async_error  HAL_OK, HAL_IN_PROGRESS (non-blocking init still running) or the error.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (async_error NULL).
 * Thread safety: safe. */
HAL_API hal_status_t hal_comm_get_async_error(hal_comm_t comm, hal_status_t *async_error);

/* Returns the backend's native communicator (e.g. an ncclComm_t) when it has one.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (native NULL);
 * HAL_ERROR_UNSUPPORTED (the HAL runs this communicator's collectives itself).
 * Thread safety: safe. */
HAL_API hal_status_t hal_comm_get_native_handle(hal_comm_t comm, uintptr_t *native);

/* The collectives. Common parameters: buffers are device memory of the communicator's device
 * (or pinned/shared memory of its backend), `stream` is a stream of that device. Common
 * statuses: HAL_OK; HAL_ERROR_INVALID_HANDLE (comm or stream); HAL_ERROR_INVALID_ARGUMENT (NULL
 * buffer with count > 0, buffer of another device or too small, stream of another device,
 * root or peer out of range, invalid overlap); HAL_ERROR_UNSUPPORTED (dtype/op combination the
 * communicator does not support, e.g. fp8 without the capability) — all without side effect;
 * the latched error of the communicator (sticky).
 * Thread safety: one thread at a time per communicator (as NCCL). */

/* recvbuf[i] = op over ranks of sendbuf[i], on every rank. */
HAL_API hal_status_t hal_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                   hal_dtype_t dtype, hal_redop_t op, hal_comm_t comm,
                                   hal_stream_t stream);

/* recvbuf = root's sendbuf on every rank (sendbuf is read only on the root). */
HAL_API hal_status_t hal_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                   hal_dtype_t dtype, int root, hal_comm_t comm,
                                   hal_stream_t stream);

/* root's recvbuf[i] = op over ranks of sendbuf[i] (recvbuf is written only on the root). */
HAL_API hal_status_t hal_reduce(const void *sendbuf, void *recvbuf, size_t count, hal_dtype_t dtype,
                                hal_redop_t op, int root, hal_comm_t comm, hal_stream_t stream);

/* recvbuf[r * sendcount ... ] = rank r's sendbuf, on every rank. */
HAL_API hal_status_t hal_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                   hal_dtype_t dtype, hal_comm_t comm, hal_stream_t stream);

/* recvbuf[i] = op over ranks of sendbuf[rank * recvcount + i]. */
HAL_API hal_status_t hal_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                        hal_dtype_t dtype, hal_redop_t op, hal_comm_t comm,
                                        hal_stream_t stream);

/* recvbuf[r * count ...] = rank r's sendbuf[rank * count ...]: count elements per peer. */
HAL_API hal_status_t hal_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                                  hal_dtype_t dtype, hal_comm_t comm, hal_stream_t stream);

/* Point to point: matched in order per (sender, receiver) pair; count and dtype must match.
 * Within hal_group_begin/end, sends and receives of one group run concurrently (so a rank can
 * exchange with a peer without deadlock). peer == rank is allowed. */
HAL_API hal_status_t hal_send(const void *sendbuf, size_t count, hal_dtype_t dtype, int peer,
                              hal_comm_t comm, hal_stream_t stream);
HAL_API hal_status_t hal_recv(void *recvbuf, size_t count, hal_dtype_t dtype, int peer,
                              hal_comm_t comm, hal_stream_t stream);

/* Completes on the stream once every rank enqueued and reached its barrier. */
HAL_API hal_status_t hal_barrier(hal_comm_t comm, hal_stream_t stream);

/* Groups the collectives and point-to-point calls issued by this thread until the matching
 * hal_group_end: they are enqueued together (point-to-point calls of a group run
 * concurrently). Groups nest; only the outermost end enqueues.
 * Returns: HAL_OK; hal_group_end: HAL_ERROR_INVALID_ARGUMENT without a matching begin, or the
 * first error of the grouped calls (none of them is enqueued then).
 * Thread safety: safe; groups are per thread. */
HAL_API hal_status_t hal_group_begin(void);
HAL_API hal_status_t hal_group_end(void);

#ifdef __cplusplus
}
#endif

#endif /* HAL_COMM_H */
