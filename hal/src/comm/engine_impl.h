/* SPDX-License-Identifier: Apache-2.0 */
/* Internal to the host collective engine: the communicator object, the layout of the per-rank
 * shared area, and the functions its files share (placement and lifecycle in engine.c, areas
 * and the in-process registry in engine_shm.c, waiting and failures in engine_wait.c,
 * collectives on one host in engine_algo.c, point to point on one host in engine_p2p.c, IPC
 * mappings in engine_ipc.c, everything across hosts in engine_tcp.c, kernels in
 * engine_reduce.c).
 *
 * Ranks on one host each own an "area": a control block of cache-line-separated words that
 * only its owner writes (sequence numbers, counters, descriptors, a failure word) followed by
 * staging memory. Peers read it: ranks of one process through the process's registry, ranks of
 * other processes through a POSIX shared-memory mapping. Every word is monotonic (counters only
 * grow, a descriptor is valid once its sequence number is published), so a waiter never needs
 * a reset: one store per step, read by busy-polling peers, is the whole protocol. */
#ifndef HAL_SRC_COMM_ENGINE_IMPL_H
#define HAL_SRC_COMM_ENGINE_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/src/comm/bootstrap.h"
#include "hal/src/comm/engine.h"
#include "hal/src/comm/engine_reduce.h"

/* Words written by different ranks sit 128 bytes apart: the spatial prefetcher of current
 * x86 cores pairs 64-byte lines, so 64 would still share. */
#define ENG_LINE 128

/* Payload of a small collective carried in the descriptor slot itself (bytes). */
#define ENG_SLOT_BYTES (64u << 10)
/* Depth of the staging pipeline: rounds in flight before a buffer is reused. */
#define ENG_STAGE_DEPTH 4
/* Chunks of a point-to-point ring between two ranks of different processes. */
#define ENG_RING_DEPTH 4

#define ENG_MESSAGE_MAX 512

/* Descriptor flags. */
#define ENG_F_IPC      (1u << 0) /* the rank's buffers come with IPC handles it can use */
#define ENG_F_SEND_SET (1u << 1) /* sendbuf is not NULL */
#define ENG_F_RECV_SET (1u << 2) /* recvbuf is not NULL */
#define ENG_F_SMALL    (1u << 3) /* the rank wants the small path (its payload is in the slot) */

/* A rank's failure word (ctrl->state): 0 while usable, else the status it failed with, or
 * ENG_STATE_GONE once it destroyed its communicator. */
#define ENG_STATE_GONE 0x7fff0000u

typedef struct eng_counter {
    _Alignas(ENG_LINE) uint64_t v;
} eng_counter_t;

/* A rank's failure word and the collective it concerns: the one the rank was in when it
 * failed, or the next one it would have entered (so peers finishing an earlier collective
 * with it are not disturbed). seq is stored before v. */
typedef struct eng_state {
    _Alignas(ENG_LINE) uint64_t v;
    uint64_t seq;
} eng_state_t;

/* What a rank is about to do, published before it touches any data; ranks compare them. Fields
 * an operation does not use are zero, so a plain comparison finds disagreements. 24 bytes, so
 * that the first 40 bytes of a small payload share its cache line. */
typedef struct eng_desc {
    uint64_t seq; /* collective number on this communicator; stored last (release) */
    uint64_t count;
    int32_t root;
    uint8_t kind, dtype, op; /* hal_engine_kind_t, hal_dtype_t, hal_redop_t */
    uint8_t flags;
} eng_desc_t;

/* Where a rank's buffers are, for peers that work on them directly. */
typedef struct eng_bufinfo {
    uint64_t sendptr, recvptr; /* valid in the owner's process */
    hal_ipc_handle_t send_ipc, recv_ipc;
} eng_bufinfo_t;

/* One collective's slot; two per rank, used by sequence parity. A rank can only be one
 * collective ahead of the slowest peer (every collective waits for every rank's arrival), so
 * two slots are never overwritten while read. The payload follows the descriptor directly: a
 * small collective of up to 40 bytes per rank moves one cache line per rank, the one its peers
 * poll for the sequence number anyway. */
typedef struct eng_slot {
    _Alignas(ENG_LINE) eng_desc_t desc;
    unsigned char payload[ENG_SLOT_BYTES];
    _Alignas(ENG_LINE) eng_bufinfo_t buf; /* written only for the direct path */
} eng_slot_t;

_Static_assert(sizeof(eng_desc_t) == 24, "40 payload bytes share the descriptor's 64-byte line");

/* One point-to-point message's descriptor (by message parity, as slots). */
typedef struct eng_p2p_desc {
    _Alignas(ENG_LINE) uint64_t seq; /* message number for this pair; stored last */
    uint64_t count;
    uint64_t bytes;
    uint32_t dtype;
    uint32_t flags;
    uint64_t ptr; /* sender's buffer, valid in its process */
    hal_ipc_handle_t ipc;
} eng_p2p_desc_t;

/* A rank's point-to-point words toward one peer. */
typedef struct eng_p2p {
    eng_p2p_desc_t out[2]; /* messages this rank sends to the peer */
    eng_p2p_desc_t in[2];  /* messages this rank expects from the peer */
    eng_counter_t sent;    /* chunks this rank put into its ring toward the peer */
    eng_counter_t taken;   /* chunks this rank took from the peer's ring */
    eng_counter_t pulled;  /* last message from the peer this rank copied directly */
} eng_p2p_t;

#define ENG_MAGIC UINT64_C(0x48414c454e474132) /* "HALENGA2" */

/* The control block at the start of every area. */
typedef struct eng_ctrl {
    _Alignas(ENG_LINE) uint64_t magic; /* stored last when the owner created the area */
    uint64_t area_bytes;
    int32_t rank, pid, nranks, reserved;
    eng_state_t state;      /* failure word, see ENG_STATE_GONE */
    eng_counter_t cpu;      /* the CPU the owner last ran on, + 1 (0: unknown); see eng_note_cpu */
    eng_counter_t sync;     /* synchronisation points passed */
    eng_counter_t stage[3]; /* staging rounds: scattered in, combined, gathered */
    eng_slot_t slot[2];
    /* eng_p2p_t p2p[nranks] follows at layout.p2p_off */
} eng_ctrl_t;

enum { ENG_STAGE_IN = 0, ENG_STAGE_COMBINED = 1, ENG_STAGE_OUT = 2 };

/* Offsets inside an area; equal on every rank (computed from nranks only). */
typedef struct eng_layout {
    size_t p2p_off;    /* eng_p2p_t[nranks] */
    size_t stage_off;  /* ENG_STAGE_DEPTH x nranks pieces */
    size_t piece;      /* bytes of one staging piece */
    size_t ring_off;   /* nranks x ENG_RING_DEPTH ring chunks */
    size_t ring_chunk; /* bytes of one ring chunk */
    size_t total;      /* area size, page multiple */
} eng_layout_t;

/* A local peer as this rank sees it. */
typedef struct eng_peer {
    eng_ctrl_t *ctrl; /* its area */
    int32_t pid;
    bool same_process;
    bool ipc_table; /* it can map IPC handles */
    bool watch;     /* another process of this pid namespace: its liveness can be checked */
    int pidfd;      /* readable once it exited; -1 if unavailable */
} eng_peer_t;

typedef struct eng_ipc_entry {
    hal_ipc_handle_t handle;
    uint64_t hash;
    void *ptr;
    uint64_t used; /* op number of the last use (eviction spares the current op's) */
} eng_ipc_entry_t;

typedef struct eng_job eng_job_t;

struct hal_engine_comm {
    hal_bootstrap_t *bootstrap;
    int nranks, rank;
    uint32_t timeout_ms;
    bool cpu_each;      /* the local ranks can have a CPU each (eng_choose_spin) */
    uint64_t moved_ns;  /* when a wait last moved this rank off its CPU (eng_backoff) */
    bool latency_bound; /* the current waits are the small path's (eng_backoff, leave_cpu) */
    bool has_ipc;
    hal_engine_ipc_t ipc;
    bool tcp; /* ranks on several hosts: everything goes through the bootstrap */

    /* Failure state: status is HAL_OK until the first error latches; aborted is set by
     * hal_engine_abort. Both are read without the lock. */
    uint32_t status;
    uint32_t aborted;
    pthread_mutex_t message_lock;
    char message[ENG_MESSAGE_MAX];

    /* One host. */
    eng_layout_t layout;
    eng_job_t *job;
    eng_peer_t *peers; /* [nranks] */
    eng_ctrl_t *me;
    bool multi_process; /* some peer is another process */
    char shm_name[64];
    uint32_t shm_linked;           /* own segment's name still exists (atomic: abort may unlink) */
    uint64_t seq;                  /* collectives started */
    uint64_t seq_done;             /* collectives completed (atomic: abort reads it) */
    uint64_t syncs;                /* synchronisation points passed */
    uint64_t round;                /* staging rounds passed */
    uint64_t *send_seq, *recv_seq; /* [nranks] messages per peer */
    uint64_t *ring_sent, *ring_took; /* [nranks] ring chunks per peer */
    void *scratch;                   /* ENG_BLOCK bytes for reductions */
    const void **srcs;               /* [nranks] */
    void **send_at, **recv_at;       /* [nranks] peers' buffers in this address space */
    eng_ipc_entry_t *ipc_cache;
    size_t ipc_count;
    uint64_t ops_run;

    /* Across hosts. */
    uint64_t tcp_seq;
    uint64_t *tcp_send_seq, *tcp_recv_seq; /* [nranks] */
    void *tcp_buf;
    size_t tcp_buf_size;
};

/* Bytes reduced per step through comm->scratch: small enough to stay in L1/L2 between the
 * reduction and the copies that follow. */
#define ENG_BLOCK (32u << 10)

/* Names used in messages. */
const char *eng_kind_name(hal_engine_kind_t kind);
const char *eng_dtype_name(hal_dtype_t dtype);
const char *eng_op_name(hal_redop_t op);

/* ---- failures and waiting (engine_wait.c) ---- */

/* Monotonic clock in nanoseconds. Thread safety: safe. */
uint64_t eng_now_ns(void);

/* Records the failure: formats "<call>: <detail>" as the thread's last error, latches the
 * first failure on the communicator (sticky) and publishes it in this rank's failure word so
 * peers stop waiting. Returns the latched status (the first failure's).
 * Thread safety: safe (hal_engine_abort may race with it). */
hal_status_t eng_fail(hal_engine_comm_t *c, hal_status_t st, const char *call, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* HAL_OK while the communicator is usable; else re-raises the latched failure for `call`.
 * Thread safety: safe. */
hal_status_t eng_sticky(hal_engine_comm_t *c, const char *call);

/* Backoff state of one wait: spin with a pause instruction (for a budget that depends on the
 * wait, unless the awaited peer waits for this rank's own CPU), then yield, then sleep briefly;
 * the timeout counts from the wait's first look at the clock. */
typedef struct eng_backoff {
    uint32_t spins; /* pauses since the clock was last read */
    bool spun;      /* spinning is over: the wait yields or sleeps, and watches processes */
    bool crowded;   /* the peer waits for this rank's CPU, and this rank could not move */
    uint64_t start_ns, next_check_ns;
    int failed_peer; /* set when eng_check_peer found a peer gone */
    bool peer_died;
    uint64_t peer_state;
} eng_backoff_t;

/* One backoff step while waiting for `peer` (-1: none in particular) on `what`: checks the
 * abort flag and the deadline (their failures are latched and returned) and the peer
 * (ENG_PEER_STOPPED, see eng_check_peer); returns HAL_OK after pausing.
 * Thread safety: the communicator's running thread. */
hal_status_t eng_backoff(hal_engine_comm_t *c, eng_backoff_t *b, int peer, const char *call,
                         const char *what);

/* Internal status (never returned to callers): a peer stopped, see eng_check_peer. */
#define ENG_PEER_STOPPED ((hal_status_t)0x7ffffffe)

/* Checks one local peer without waiting: its failure word and, when due, its process. Returns
 * HAL_OK, or ENG_PEER_STOPPED, latching nothing: the peer may have done what this rank waits
 * for just before it stopped, so the caller checks its condition again, then calls
 * eng_fail_peer. Thread safety: the communicator's running thread. */
hal_status_t eng_check_peer(hal_engine_comm_t *c, eng_backoff_t *b, int peer);

/* Latches HAL_ERROR_REMOTE for the peer eng_check_peer found gone. Thread safety: running
 * thread. */
hal_status_t eng_fail_peer(hal_engine_comm_t *c, const eng_backoff_t *b, const char *call,
                           const char *what);

/* Waits until the 64-bit word (in peer's area) is >= target. Returns HAL_OK, or the failure.
 * Thread safety: the communicator's running thread. */
hal_status_t eng_wait_slow(hal_engine_comm_t *c, const uint64_t *word, uint64_t target, int peer,
                           const char *call, const char *what);

static inline uint64_t eng_load(const uint64_t *word)
{
    return __atomic_load_n(word, __ATOMIC_ACQUIRE);
}

static inline void eng_store(uint64_t *word, uint64_t v)
{
    __atomic_store_n(word, v, __ATOMIC_RELEASE);
}

static inline hal_status_t eng_wait(hal_engine_comm_t *c, const uint64_t *word, uint64_t target,
                                    int peer, const char *call, const char *what)
{
    if (eng_load(word) >= target)
        return HAL_OK;
    return eng_wait_slow(c, word, target, peer, call, what);
}

/* Chooses how this rank's waits spin: as engine_wait.c describes while the CPUs the process
 * may use are at least as many as the local ranks, briefly otherwise. Thread safety: init
 * only. */
void eng_choose_spin(hal_engine_comm_t *c);

/* Publishes the CPU the calling thread runs on in this rank's area, so that a peer waiting for
 * it can tell whether spinning is futile (both on one CPU). Costs a load when nothing changed.
 * Thread safety: the communicator's running thread. */
void eng_note_cpu(hal_engine_comm_t *c);

/* Passes a synchronisation point: publishes it and, with wait_all, waits until every local
 * peer passed it too. Returns HAL_OK or the failure.
 * Thread safety: the communicator's running thread. */
hal_status_t eng_sync(hal_engine_comm_t *c, bool wait_all, const char *call, const char *what);

/* Publishes this rank's failure word (first failure only). Thread safety: safe. */
void eng_publish_state(hal_engine_comm_t *c, uint64_t state);

/* Peer p's failure word if it concerns collective `seq` or an earlier one, else 0. Thread
 * safety: safe. */
uint64_t eng_peer_failed_in(const hal_engine_comm_t *c, int p, uint64_t seq);

/* Whether a process is gone (pidfd readable, or kill/proc say so). Thread safety: safe. */
bool eng_process_gone(int pid, int pidfd);

/* ---- areas and the in-process registry (engine_shm.c) ---- */

/* The area layout for nranks local ranks. Thread safety: safe (pure). */
void eng_layout_compute(int nranks, eng_layout_t *out);

/* Joins (creating it if first) this process's record of the job named by nonce. Returns
 * HAL_OK, HAL_ERROR_OUT_OF_HOST_MEMORY, or HAL_ERROR_INVALID_ARGUMENT (rank already joined in
 * this process). Thread safety: safe (the registry has a lock). */
hal_status_t eng_job_join(const uint8_t *nonce, int nranks, int rank, size_t area_bytes,
                          eng_job_t **out);

/* Leaves the job; the last rank of the process unmaps every area. Thread safety: safe. */
void eng_job_leave(eng_job_t *job, int rank);

/* Creates this rank's area: a POSIX shared-memory segment `name` (O_EXCL, 0600) when peers in
 * other processes must map it, else process memory. Returns the area or NULL with the error
 * set. Thread safety: safe. */
hal_status_t eng_area_create(eng_job_t *job, int rank, int pid, const char *name, eng_ctrl_t **out);

/* Returns the area of local rank `rank`: registered by a thread of this process, or mapped
 * from its segment (once per process). Thread safety: safe. */
hal_status_t eng_area_get(eng_job_t *job, int rank, bool other_process, const char *name,
                          eng_ctrl_t **out);

/* "/hal-<nonce hex>-<rank>". Thread safety: safe. */
void eng_shm_name(char *buf, size_t size, const uint8_t *nonce, int rank);

/* The peer table's point-to-point block and staging memory of an area. */
static inline eng_p2p_t *eng_p2p(const hal_engine_comm_t *c, eng_ctrl_t *area, int peer)
{
    return (eng_p2p_t *)((unsigned char *)area + c->layout.p2p_off) + peer;
}

static inline unsigned char *eng_piece(const hal_engine_comm_t *c, eng_ctrl_t *area, uint64_t round,
                                       int index)
{
    size_t slot = (size_t)(round % ENG_STAGE_DEPTH) * (size_t)c->nranks + (size_t)index;
    return (unsigned char *)area + c->layout.stage_off + slot * c->layout.piece;
}

static inline unsigned char *eng_ring(const hal_engine_comm_t *c, eng_ctrl_t *area, int peer,
                                      uint64_t chunk)
{
    size_t slot = (size_t)peer * ENG_RING_DEPTH + (size_t)(chunk % ENG_RING_DEPTH);
    return (unsigned char *)area + c->layout.ring_off + slot * c->layout.ring_chunk;
}

/* ---- IPC mappings (engine_ipc.c) ---- */

/* Maps a buffer of local rank `peer` (cached by handle bytes). Returns HAL_OK or the failure
 * (latched; HAL_ERROR_REMOTE when the peer is gone). Thread safety: the communicator's running
 * thread. */
hal_status_t eng_ipc_map(hal_engine_comm_t *c, int peer, const hal_ipc_handle_t *handle,
                         const char *call, void **ptr);

/* Closes every cached mapping. Thread safety: destroy only. */
void eng_ipc_close_all(hal_engine_comm_t *c);

/* ---- one host (engine_algo.c, engine_p2p.c) ---- */

/* The descriptor of op as ranks compare it (fields the kind does not use are zero; flags say
 * what this rank can offer). Thread safety: safe. */
void eng_fill_desc(const hal_engine_comm_t *c, const hal_engine_op_t *op, eng_desc_t *d);

/* Whether two descriptors describe the same collective (flags aside). Thread safety: safe. */
bool eng_desc_equal(const eng_desc_t *a, const eng_desc_t *b);

/* Latches HAL_ERROR_INVALID_ARGUMENT naming peer p and the fields it disagrees on ("rank 2
 * called allreduce with count 7, this rank with count 8"). Thread safety: running thread. */
hal_status_t eng_desc_mismatch(hal_engine_comm_t *c, const char *call, int p,
                               const eng_desc_t *theirs, const eng_desc_t *mine);

/* Runs one collective among ranks of this host. Thread safety: the running thread. */
hal_status_t eng_local_collective(hal_engine_comm_t *c, const hal_engine_op_t *op);

/* Runs the sends and receives of a group concurrently. Thread safety: the running thread. */
hal_status_t eng_local_p2p(hal_engine_comm_t *c, const hal_engine_op_t *ops, size_t n);

/* ---- across hosts (engine_tcp.c) ---- */

/* Runs one collective over the bootstrap's connections. Thread safety: the running thread. */
hal_status_t eng_tcp_collective(hal_engine_comm_t *c, const hal_engine_op_t *op);

/* Runs the sends and receives of a group over the bootstrap. Thread safety: the running
 * thread. */
hal_status_t eng_tcp_p2p(hal_engine_comm_t *c, const hal_engine_op_t *ops, size_t n);

/* Frees what the TCP path allocated. Thread safety: destroy only. */
void eng_tcp_release(hal_engine_comm_t *c);

/* Pairs the sends and receives a rank addresses to itself within a group, in order, and
 * copies them. Returns HAL_OK or the failure (latched). Thread safety: the running thread. */
hal_status_t eng_self_p2p(hal_engine_comm_t *c, const hal_engine_op_t *ops, size_t n);

#endif /* HAL_SRC_COMM_ENGINE_IMPL_H */
