/* SPDX-License-Identifier: Apache-2.0 */
/* libnrt emulator: what the files of the out-of-NEFF collectives share. Nothing here is exported.
 *
 * The collectives (nrt_cc_global_comm_init, nrta_cc_prepare, nrta_cc_schedule) and the completion
 * side of the async API (nrta_is_completed, error trackers) run among the processes of one host
 * (the transport is TCP, so hosts could differ too). The files, one concern each:
 *   emu_cc_comm.c    the state, the global communicator, prepare and schedule
 *   emu_cc_async.c   completion: nrta_is_completed and the error trackers of async API 2
 *   emu_cc_net.c     sockets with deadlines, and the rendezvous that builds the communicator
 *   emu_cc_reduce.c  element sizes, f16/bf16 conversions and the host reduction
 *   emu_cc_worker.c  the per-core queue threads that run collectives, nrt_close and fork
 *
 * Global communicator. nrt_cc_global_comm_init(vnc, g_device_id, g_device_count) makes core vnc
 * global device g_device_id of g_device_count. Global device 0 listens on NEURON_RT_ROOT_COMM_ID
 * (ip:port); every other one connects to it, says who it is and where it listens itself, and gets
 * back the table of everyone's listeners; then every pair of members connects (the higher id to
 * the lower). The call returns once all members are connected, or fails with NRT_TIMEOUT after
 * NEURON_EMU_CC_TIMEOUT_MS (default 30 s).
 *
 * Collectives. nrta_cc_prepare checks the communicator (a replica group of global device ids) and
 * the tensors (device tensors of the core) and makes a context; nrta_cc_schedule queues it on the
 * core's collectives queue (queue 0) and returns its sequence number at once; one thread per core
 * runs that queue in order. A collective sends every other member of the replica group a header
 * (which collective, type, operation, sizes, group) and this rank's contribution, receives
 * theirs, reduces on the host in rank order (every rank gets the same bits) and writes the
 * outputs. Ranks whose headers disagree all fail with NRT_INVALID and write nothing; a peer that
 * closed its connection fails the collective with NRT_FAILURE, one that does not take part within
 * the timeout with NRT_TIMEOUT; nrt_close fails what is queued with NRT_CLOSED.
 *
 * Completion. nrta_is_completed(seq). Async API 2 (libnrt 2.30, the default): a failure is
 * recorded in the error tracker given to nrta_cc_schedule. Async API 3 (emulating libnrt 2.31 or
 * later, NEURON_EMU_RUNTIME_VERSION): the third argument of nrta_cc_schedule is an NRT_STATUS *,
 * which holds NRT_COLL_PENDING from the schedule until the final status is written, before the
 * request is reported complete. Before 2.31 an output that overlaps an input is refused.
 *
 * Locking: cc.lock guards the state below (but `done` and cc_stopping, which are atomic); a
 * tracker's own lock guards its error list. cc.lock is taken inside emu_rt.lock. */
#ifndef HAL_BACKENDS_TRAINIUM_EMULATOR_EMU_CC_INTERNAL_H
#define HAL_BACKENDS_TRAINIUM_EMULATOR_EMU_CC_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal_backends/trainium/emulator/emu_internal.h"

/* ---- State (emu_cc_comm.c) ----------------------------------------------------------------- */

struct nrt_cc_context {
    uint32_t magic;
    struct nrt_cc_context *next; /* in cc.prepared, then in its member's queue */
    uint32_t vnc;
    nrt_cc_op_type_t cc_op;
    nrt_dtype_t dtype;
    nrt_op_type_t op;
    size_t esize;
    uint32_t rank, rank_n;
    uint32_t *group; /* rank_n global device ids */
    uint32_t group_hash;
    size_t n; /* tensors in each list */
    emu_view_t *in, *out;
    /* Set by nrta_cc_schedule. */
    uint64_t seqnum;
    nrta_error_tracker_t *tracker; /* async API 2 */
    NRT_STATUS *ret;               /* async API 3 */
};

struct nrta_error_tracker {
    uint32_t magic;
    struct nrta_error_tracker *next; /* in cc.trackers */
    uint32_t lnc;
    pthread_mutex_t lock;
    nrta_error_t *errors;
    size_t count, capacity;
};

/* One core's membership of the global communicator and its collectives queue. */
typedef struct cc_member {
    bool joined;  /* a member of the global communicator */
    bool joining; /* nrt_cc_global_comm_init in progress */
    uint32_t g_id, g_count;
    int *fds; /* g_count connections; -1 for itself and for connections that failed */
    uint64_t timeout_ns;
    bool worker_started;
    pthread_t worker;
    struct nrt_cc_context *head, *tail;
    uint32_t queued;
    uint64_t issued;       /* last sequence number given out */
    _Atomic uint64_t done; /* last sequence number completed (in order) */
} cc_member_t;

typedef struct cc_state {
    pthread_mutex_t lock; /* everything here but `done` and `stopping` */
    pthread_cond_t cond;  /* work queued; a join finished */
    int wake[2];          /* readable once nrt_close cancels */
    cc_member_t m[EMU_MAX_VNC];
    struct nrt_cc_context *prepared;
    struct nrta_error_tracker *trackers;
} cc_state_t;

extern cc_state_t cc;
/* Set by nrt_close while it cancels (every wait ends with NRT_CLOSED). */
extern atomic_bool cc_stopping;

/* ---- emu_cc_comm.c: helpers shared with the other files ------------------------------------ */

/* "all-reduce", "all-gather", "reduce-scatter", for messages. */
const char *cc_op_name(nrt_cc_op_type_t cc_op);
/* The sequence id of request `num` of core vnc's collectives queue 0. */
nrta_seq_t cc_make_seq(uint32_t vnc, uint64_t num);
/* NRT_SUCCESS when the emulated libnrt has the out-of-NEFF collectives (2.30 and later), else
 * NRT_FAILURE, logged as api. Caller holds emu_rt.lock. */
NRT_STATUS cc_available(const char *api);
/* Frees a context and releases its tensor views. */
void cc_context_free(struct nrt_cc_context *ctx);
/* Closes a member's connections and frees their table. */
void cc_close_fds(cc_member_t *m);

/* ---- emu_cc_async.c: error trackers -------------------------------------------------------- */

/* Whether t is a live tracker. Caller holds cc.lock. */
bool cc_tracker_live(const struct nrta_error_tracker *t);
/* Appends a failed request to t (dropped if out of memory). */
void cc_tracker_record(struct nrta_error_tracker *t, nrta_seq_t seq, NRT_STATUS status);
/* Frees a tracker unlinked from cc.trackers. */
void cc_tracker_free(struct nrta_error_tracker *t);

/* ---- emu_cc_net.c: rendezvous -------------------------------------------------------------- */

/* "ip:port" or "host:port" (IPv4). */
bool cc_parse_root(const char *text, struct sockaddr_in *out);
/* Global device 0: accepts the other count-1 devices at root and sends them the table of
 * everyone's listeners. fds[i] gets device i's connection. */
NRT_STATUS cc_rendezvous_root(const char *api, const struct sockaddr_in *root, uint32_t count,
                              uint64_t deadline, int *fds);
/* Global device id > 0: joins through the root, then connects to the devices below it and
 * accepts the ones above. fds[i] gets device i's connection. */
NRT_STATUS cc_rendezvous_member(const char *api, const struct sockaddr_in *root, uint32_t id,
                                uint32_t count, uint64_t deadline, int *fds);

/* ---- emu_cc_reduce.c: element types and the reduction -------------------------------------- */

/* Bytes per element of a collective's dtype; 0 for the types not emulated. */
size_t cc_dtype_size(nrt_dtype_t dtype);
/* dst[i] = dst[i] op src[i] for n elements. */
void cc_accumulate(void *dst, const void *src, size_t n, nrt_dtype_t dtype, nrt_op_type_t op);

/* ---- emu_cc_worker.c: the queue threads ---------------------------------------------------- */

/* Starts core vnc's queue thread. Caller holds cc.lock. */
bool cc_start_worker(uint32_t vnc);

#endif /* HAL_BACKENDS_TRAINIUM_EMULATOR_EMU_CC_INTERNAL_H */
