/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend, native collectives: what trn_comm.c (the communicator: rendezvous, the
 * runtime's global communicator, the control connections, abort) and trn_comm_ops.c (the
 * collectives on the streams) share. */
#ifndef HAL_BACKENDS_TRAINIUM_TRN_COMM_H
#define HAL_BACKENDS_TRAINIUM_TRN_COMM_H

#include "hal_backends/trainium/trn_internal.h"

/* A control message between the ranks of a native communicator. Before each native collective
 * every rank sends every other one what it is about to run (DESC) and waits for theirs, so that
 * ranks that disagree fail alike before the runtime sees anything; then each says it goes ahead
 * (GO) and waits for everyone's, after which all of them schedule the collective. A rank that
 * failed or aborted sends FAIL instead, and the others fail with HAL_ERROR_REMOTE instead of
 * waiting for it. */
#define TRN_CTL_MAGIC 0x54524e43u /* "TRNC" */
enum { TRN_CTL_DESC = 1, TRN_CTL_FAIL = 2, TRN_CTL_GO = 3 };
typedef struct trn_ctl_msg {
    uint32_t magic;
    uint32_t type;
    uint64_t seq; /* the communicator's native collectives so far, this one included */
    uint32_t kind, dtype, op, status;
    uint64_t count;
} trn_ctl_msg_t;

/* The collectives the runtime runs. */
typedef enum trn_cc_kind {
    TRN_CC_ALLREDUCE,
    TRN_CC_ALLGATHER,
    TRN_CC_REDUCE_SCATTER,
} trn_cc_kind_t;

typedef struct trn_comm {
    trn_device_t *device;
    trn_backend_t *backend;
    int nranks, rank;
    uint32_t timeout_ms;
    uint32_t *group;               /* the ranks' global device ids (the runtime's replica group) */
    nrt_cc_comm_t cc;              /* the runtime's communicator: group, rank, this core */
    int *fds;                      /* control connections by rank (-1 for this rank) */
    int wake[2];                   /* made readable by abort, to end every wait at once */
    nrta_error_tracker_t *tracker; /* async API 2 */
    pthread_mutex_t io_lock;       /* writes on the control connections */

    pthread_mutex_t lock; /* everything below */
    pthread_cond_t cond;  /* `busy` cleared */
    bool busy;            /* a collective holds the control connections */
    uint64_t seq;         /* native collectives started */
    bool aborted;
    hal_status_t status; /* latched: the communicator is unusable */
    char message[TRN_MSG_MAX];
    uint32_t abandoned; /* requests given up while the runtime had them */
} trn_comm_t;

/* One native collective, from its enqueue until the runtime is done with it. */
typedef struct trn_cc_job {
    struct trn_cc_job *next; /* in the backend's graveyard */
    trn_comm_t *comm;
    trn_cc_kind_t kind;
    hal_backend_ptr_t send, recv;
    size_t count; /* elements: the send buffer's (all-reduce, all-gather), the receive's (r-s) */
    hal_dtype_t dtype;
    hal_redop_t op;
    /* The runtime's request. */
    nrta_seq_t seq;
    NRT_STATUS ret;           /* async API 3 */
    nrt_tensor_t *tensors[4]; /* slices and scratch tensors, freed after the request */
    unsigned ntensors;
} trn_cc_job_t;

/* Latches `st` with the message on the communicator (the first failure stays) and tells the
 * other ranks (unless it came from one of them). */
void trn_comm_fail(trn_comm_t *comm, hal_status_t st, bool tell_peers, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The latched status, with its message reported to the caller; HAL_OK if none. */
hal_status_t trn_comm_latched(trn_comm_t *comm);
/* Sends msg to every other rank (best effort, serialised with other writers). */
void trn_comm_tell_all(trn_comm_t *comm, const trn_ctl_msg_t *msg);
/* Whether abort was called. */
bool trn_comm_is_aborted(trn_comm_t *comm);

#endif /* HAL_BACKENDS_TRAINIUM_TRN_COMM_H */
