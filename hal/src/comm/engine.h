/* SPDX-License-Identifier: Apache-2.0 */
/* The host collective engine: runs collectives on buffers the host can read and write, among
 * ranks that are threads of one process, processes on one host (POSIX shared memory, and in
 * place through IPC mappings when the backend offers them) or processes on different hosts
 * (TCP through the bootstrap). Internal to the HAL.
 *
 * The core calls hal_engine_run from a stream's host function, so a call blocks until the
 * collective completed on this rank (or failed). It is given host pointers: the device buffers
 * themselves on host-addressable devices, pinned staging copies otherwise.
 *
 * Failure semantics every function honours: no wait is unbounded (timeout_ms); a peer that
 * died or stopped answering yields HAL_ERROR_REMOTE or HAL_ERROR_TIMEOUT; after
 * hal_engine_abort every blocked or later call returns HAL_ERROR_ABORTED promptly; ranks calling
 * the same collective with different kinds, counts, types, operations or roots get
 * HAL_ERROR_INVALID_ARGUMENT with a message saying who disagreed, never wrong data. After any
 * error the engine communicator is unusable (sticky) and returns the same status. */
#ifndef HAL_SRC_COMM_ENGINE_H
#define HAL_SRC_COMM_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/hal_comm.h"
#include "hal/src/comm/bootstrap.h"

typedef struct hal_engine_comm hal_engine_comm_t;

typedef enum hal_engine_kind {
    HAL_ENGINE_ALLREDUCE,
    HAL_ENGINE_BROADCAST,
    HAL_ENGINE_REDUCE,
    HAL_ENGINE_ALLGATHER,
    HAL_ENGINE_REDUCE_SCATTER,
    HAL_ENGINE_ALLTOALL,
    HAL_ENGINE_SEND,
    HAL_ENGINE_RECV,
    HAL_ENGINE_BARRIER,
} hal_engine_kind_t;

/* One operation, in NCCL's terms (see hal_comm.h for buffer layouts and in-place rules).
 * count: elements (per rank for ALLGATHER's send and REDUCE_SCATTER's receive; per peer for
 * ALLTOALL). root is the root for BROADCAST/REDUCE and the peer for SEND/RECV. */
typedef struct hal_engine_op {
    hal_engine_kind_t kind;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    hal_dtype_t dtype;
    hal_redop_t op;
    int root;
    /* Optional: the same buffers as IPC handles, so ranks in other processes on this host can
     * map them and work in place (valid only when has_ipc). */
    bool has_ipc;
    hal_ipc_handle_t send_ipc, recv_ipc;
} hal_engine_op_t;

/* Maps a peer's IPC handle (from hal_engine_op_t) into this process; provided by the core over
 * the backend's mem_ipc_* slots. The mapping stays valid until close. */
typedef struct hal_engine_ipc {
    void *ctx;
    hal_status_t (*open)(void *ctx, const hal_ipc_handle_t *handle, void **ptr);
    void (*close)(void *ctx, void *ptr);
} hal_engine_ipc_t;

typedef struct hal_engine_config {
    hal_bootstrap_t *bootstrap; /* connected; the engine uses, does not own it */
    uint32_t timeout_ms;
    const hal_engine_ipc_t *ipc; /* NULL when the backend offers no IPC */
} hal_engine_config_t;

/* Creates this rank's engine communicator (collective over the bootstrap: every rank calls it).
 * Sets up shared-memory segments (named from the job nonce, created 0600 and unlinked once all
 * peers mapped them) and whatever else the ranks' placement needs. */
hal_status_t hal_engine_init(const hal_engine_config_t *config, hal_engine_comm_t **out);

/* Runs a group of operations on this rank (n == 1 for a plain collective). SEND/RECV within one
 * group progress concurrently; collectives in a group run in order. Blocks until done. */
hal_status_t hal_engine_run(hal_engine_comm_t *comm, const hal_engine_op_t *ops, size_t n);

/* Unblocks and fails every current and later call; peers see HAL_ERROR_REMOTE. Safe from any
 * thread at any time. */
void hal_engine_abort(hal_engine_comm_t *comm);

/* Frees everything (segments unlinked). The caller made sure no hal_engine_run is in flight. */
void hal_engine_destroy(hal_engine_comm_t *comm);

/* Whether the engine would map peers' buffers through IPC handles for this operation (ranks in
 * other processes on this host, and too large for the small path). The caller exports handles
 * only then: exporting costs more than a small collective. The answer depends only on the
 * communicator and the operation's kind, count and type, so every rank decides alike. */
bool hal_engine_wants_ipc(const hal_engine_comm_t *comm, const hal_engine_op_t *op);

/* Whether (dtype, op) can be reduced by the engine; fp8 types need the caller's capability
 * check. Pure function, used by the front end to reject calls synchronously. */
bool hal_engine_supports(hal_dtype_t dtype, hal_redop_t op);

#endif /* HAL_SRC_COMM_ENGINE_H */
