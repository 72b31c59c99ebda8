/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance suite, collectives (the comm area): ranks, jobs and exact-arithmetic data.
 *
 * A job runs one rank function on every rank of a communicator. Ranks are threads of the test
 * process (each on device (test device + rank) % device count of the test's backend) or
 * processes: the harness executable started again in rank mode (cts_comm_rank_main), which
 * opens a fresh instance of the backend and reports back over a socket. The same rank function
 * runs in both, so every collective is checked the same way whether its peers share the
 * process or not.
 *
 * Rank functions check with the CC_EXPECT* macros: a failure is reported with the rank, file and
 * line (to the test from a thread; over the socket from a process) and counted; rank functions
 * never return early in a way that leaves their peers waiting in a collective (a rank that gives
 * up aborts its communicator first, so its peers fail promptly instead of timing out). */
#ifndef CTS_COMM_H
#define CTS_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cts.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Communicator timeout of the functional tests (a stuck collective fails the test well before
 * the harness's per-test timeout). */
#define CC_TIMEOUT_MS 20000u
/* Communicator timeout of the failure tests, and the slack allowed on top of it for a failure to
 * be reported (thread wake-ups, sanitizers, a loaded machine). */
#define CC_FAIL_TIMEOUT_MS 2000u
#define CC_SLACK_MS        4000u
/* A wait for a failure to be reported that lasts this long is a hang and fails the test (well
 * past every communicator timeout of the tests, before the harness's per-test timeout). No test
 * asserts how soon an error comes, which a loaded machine decides: the status says which
 * mechanism reported it (HAL_ERROR_TIMEOUT only from a timeout). Only lower bounds are checked
 * (a timeout never strikes early), which load cannot break. */
#define CC_HANG_MS 45000u
/* A process job that has not finished after this long is killed and fails. */
#define CC_JOB_DEADLINE_MS 50000u
/* The largest count of the sweeps: past a power of two, so chunked algorithms see a remainder.
 * ThreadSanitizer makes every access of the engine and of the checks an order of magnitude
 * slower; there the large count is 64Ki + 3 (still many chunks, staging rounds and slots).
 * The plain and AddressSanitizer builds run the full count. */
#if defined(__SANITIZE_THREAD__)
#define CC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CC_TSAN 1
#endif
#endif
#if defined(CC_TSAN)
#define CC_LARGE_COUNT ((size_t)(1u << 16) + 3u)
#else
#define CC_LARGE_COUNT ((size_t)(1u << 20) + 3u)
#endif

typedef enum cc_mode { CC_THREADS, CC_PROCESSES } cc_mode_t;

typedef struct cc_rank cc_rank_t;
typedef void (*cc_rank_fn)(cc_rank_t *r);

/* Flags of a scenario. */
#define CC_NO_COMM (1u << 0) /* the rank function creates its communicators itself */

/* A rank function with the name a rank process finds it by. */
typedef struct cc_scenario {
    const char *name;
    cc_rank_fn fn;
    unsigned flags;
} cc_scenario_t;

/* The scenarios a rank process can run (it finds them by name). */
extern const cc_scenario_t cc_scenario_sweep;    /* param: cc_kind_t */
extern const cc_scenario_t cc_scenario_p2p;      /* point to point and groups */
extern const cc_scenario_t cc_scenario_barrier;  /* barriers */
extern const cc_scenario_t cc_scenario_kill;     /* param: the rank that is killed */
extern const cc_scenario_t cc_scenario_mismatch; /* param: what the ranks disagree on */
extern const cc_scenario_t cc_scenario_departed; /* param: the rank that aborts */

typedef struct cc_job {
    const cc_scenario_t *scenario;
    cc_mode_t mode;
    int nranks;
    int param;           /* scenario-specific */
    uint32_t timeout_ms; /* config.timeout_ms of the communicator (0: CC_TIMEOUT_MS) */
    /* Threads only. */
    void *shared;                  /* state the ranks of the scenario share */
    const hal_comm_store_t *store; /* rendezvous through this store (id made for a store) */
    /* Processes only: once every rank reported ready (cc_ready), wait kill_delay_ms and SIGKILL
     * rank kill_rank (-1: none). */
    int kill_rank;
    unsigned kill_delay_ms;
} cc_job_t;

#define CC_JOB_INIT     \
    {                   \
        .kill_rank = -1 \
    }

struct cc_rank {
    int rank, nranks;
    cc_mode_t mode;
    int param;
    uint32_t timeout_ms;
    hal_backend_t backend;
    hal_device_t device; /* this rank's device */
    uint32_t device_index, device_count;
    uint32_t base_device; /* the test's device: rank r runs on (base + r) % count */
    hal_device_properties_t props;
    hal_unique_id_t id;
    const hal_comm_store_t *store;
    const cc_scenario_t *scenario;
    void *shared;
    /* Set up by the runner unless the scenario has CC_NO_COMM; the runner destroys what is left
     * (the stream first, then the communicator, which must return expect_destroy). */
    hal_comm_t comm;
    hal_stream_t stream;
    hal_status_t expect_destroy;
    /* Failures of this rank; broken: a collective failed, so the rank stops (and aborted its
     * communicator so that its peers stop too). */
    unsigned failures, reported;
    bool broken;
    int channel; /* rank processes: the socket to the test, else -1 */
};

/* Runs a job; returns CTS_PASS, CTS_FAIL or CTS_SKIP (ctx->skip_reason says why). A process
 * job also fails when it leaves a "hal-" entry in /dev/shm behind. */
int cc_run(cts_ctx_t *ctx, const cc_job_t *job);

/* cc_run of a scenario with default settings. */
int cc_run_simple(cts_ctx_t *ctx, const cc_scenario_t *scenario, int param, cc_mode_t mode,
                  int nranks);

/* ---- Jobs driven by one thread ---------------------------------------------------------------
 * Every rank is initialised without blocking (config.blocking = 0) from the calling thread, then
 * polled until the rendezvous completed; rank r runs on device (test device + r) % count with a
 * stream of its own. Collectives only enqueue, so one thread can drive all ranks. */
#define CC_LOCAL_MAX 4
typedef struct cc_local {
    int nranks;
    hal_device_t devices[CC_LOCAL_MAX];
    hal_comm_t comms[CC_LOCAL_MAX];
    hal_stream_t streams[CC_LOCAL_MAX];
} cc_local_t;

/* Returns CTS_PASS, or CTS_FAIL after reporting (what was created is closed again). */
int cc_local_open(cts_ctx_t *ctx, cc_local_t *job, int nranks, uint32_t timeout_ms);
/* Destroys the streams, then the communicators left (NULL entries are skipped), ignoring their
 * statuses: tests check the statuses they care about first and clear those entries. */
void cc_local_close(cc_local_t *job);
/* Buffers of an f32 sum allreduce of `count` elements on every rank of a local job: device send
 * and receive buffers and pinned host memory to stage through (a copy from pageable memory may
 * wait for its stream, and one thread must enqueue every rank's part before any completes). */
typedef struct cc_local_bufs {
    size_t count;
    uint32_t seed;
    void *send[CC_LOCAL_MAX], *recv[CC_LOCAL_MAX], *host[CC_LOCAL_MAX];
} cc_local_bufs_t;

int cc_local_bufs_alloc(cc_local_t *job, cc_local_bufs_t *b, size_t count, uint32_t seed);
void cc_local_bufs_free(cc_local_t *job, cc_local_bufs_t *b);
/* Enqueues rank's part on comm and stream (NULL: the job's): upload, allreduce, download. */
hal_status_t cc_local_enqueue(cc_local_t *job, cc_local_bufs_t *b, int rank, hal_comm_t comm,
                              hal_stream_t stream);
/* Checks every rank's result once the streams are synchronised. Returns CTS_PASS or CTS_FAIL. */
int cc_local_check(cc_local_t *job, cc_local_bufs_t *b);
/* Waits for every rank's stream of a local job, after aborting its communicators when rc is not
 * CTS_PASS (ranks that enqueued must not wait for ranks that did not); returns rc, or CTS_FAIL
 * when rc was CTS_PASS and a stream ended in an error. */
int cc_local_drain(cc_local_t *job, int rc);
/* All of it: every rank's allreduce, the streams synchronised, the results checked. */
int cc_local_allreduce(cc_local_t *job, size_t count, uint32_t seed);

/* ---- Reporting from ranks -------------------------------------------------------------------- */
void cc_failf(cc_rank_t *r, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
int cc_expect_true(cc_rank_t *r, int cond, const char *file, int line, const char *text);
int cc_expect_status(cc_rank_t *r, hal_status_t got, hal_status_t expected, const char *file,
                     int line, const char *call);
int cc_expect_status2(cc_rank_t *r, hal_status_t got, hal_status_t expected1,
                      hal_status_t expected2, const char *file, int line, const char *call);

#define CC_FAILF(r, ...)   cc_failf((r), __FILE__, __LINE__, __VA_ARGS__)
#define CC_EXPECT(r, cond) cc_expect_true((r), !!(cond), __FILE__, __LINE__, #cond)
#define CC_EXPECT_STATUS(r, call, expected) \
    cc_expect_status((r), (call), (expected), __FILE__, __LINE__, #call)
#define CC_EXPECT_STATUS2(r, call, e1, e2) \
    cc_expect_status2((r), (call), (e1), (e2), __FILE__, __LINE__, #call)
#define CC_EXPECT_OK(r, call) CC_EXPECT_STATUS(r, call, HAL_OK)

/* Gives up on the rank: aborts its communicator (peers fail promptly) and marks it broken. */
void cc_break(cc_rank_t *r);

/* Tells the test this rank reached its ready point (process jobs with kill_rank). */
void cc_ready(cc_rank_t *r);

/* Polls the stream until it stops returning HAL_NOT_READY or timeout_ms passes. */
hal_status_t cc_poll_stream(hal_stream_t stream, unsigned timeout_ms);
/* Polls hal_comm_get_async_error until it stops returning HAL_IN_PROGRESS (and, with
 * until_error, HAL_OK) or timeout_ms passes; returns the last async error. */
hal_status_t cc_poll_async(cc_rank_t *r, hal_comm_t comm, bool until_error, unsigned timeout_ms);

/* A host callback that sleeps ms when its stream reaches it (holds later work back). */
hal_status_t cc_enqueue_delay(hal_stream_t stream, unsigned ms);

/* ---- Exact-arithmetic data ------------------------------------------------------------------
 * Values are chosen so that every order of reduction gives the same bits (nccl-tests'
 * "verifiable" idea): sums of small integers and halves that stay exactly representable (narrow
 * floats included), products of factors whose products stay exact, any values for max and min,
 * any bits for data movement. */

typedef enum cc_class {
    CC_CLASS_ADD,   /* sum, avg */
    CC_CLASS_MUL,   /* prod */
    CC_CLASS_ORDER, /* max, min */
    CC_CLASS_BITS,  /* copies: any bits */
} cc_class_t;

#define CC_NUM_DTYPES 12
extern const hal_dtype_t cc_all_dtypes[CC_NUM_DTYPES];
extern const hal_redop_t cc_all_ops[HAL_REDOP_COUNT];

size_t cc_dtype_size(hal_dtype_t dtype);
const char *cc_dtype_name(hal_dtype_t dtype);
const char *cc_op_name(hal_redop_t op);
bool cc_is_fp8(hal_dtype_t dtype);
cc_class_t cc_op_class(hal_redop_t op);

/* Element i of rank's data, as the dtype's bits (little-endian in the low bytes). */
uint64_t cc_value(hal_dtype_t dtype, cc_class_t cls, int rank, size_t i, uint32_t seed);
void cc_put(hal_dtype_t dtype, void *buf, size_t i, uint64_t bits);
uint64_t cc_get(hal_dtype_t dtype, const void *buf, size_t i);

/* Fills n elements of rank's data (index base .. base + n) into buf. */
void cc_fill(hal_dtype_t dtype, cc_class_t cls, int rank, size_t base, size_t n, uint32_t seed,
             void *buf);

/* Whether got is element i of op over ranks 0..nranks-1 (bit-exactly; avg of floating-point
 * types within 2 units in the last place). detail (optional) receives "got ..., expected ...". */
bool cc_check_reduced(hal_dtype_t dtype, hal_redop_t op, int nranks, size_t i, uint32_t seed,
                      uint64_t got, char *detail, size_t detail_size);

/* A position-dependent byte pattern that is cheap to make (one multiplication per 8 bytes), for
 * filling what a collective must overwrite or leave alone: misplaced or unwritten data shows. */
void cc_pattern_fill(void *buf, size_t n, uint32_t seed);
uint8_t cc_pattern_byte(size_t k, uint32_t seed);
/* The first k in [off, off + n) where buf differs from the pattern, or SIZE_MAX. */
size_t cc_pattern_mismatch(const void *buf, size_t off, size_t n, uint32_t seed);

/* A seed for a case: a hash of its parameters (the same on every rank). */
uint32_t cc_seed(uint32_t a, uint32_t b, uint32_t c, uint32_t d);

/* ---- Collective cases ------------------------------------------------------------------------ */

typedef enum cc_kind {
    CC_ALLREDUCE,
    CC_BROADCAST,
    CC_REDUCE,
    CC_ALLGATHER,
    CC_REDUCE_SCATTER,
    CC_ALLTOALL,
    CC_KIND_COUNT
} cc_kind_t;

const char *cc_kind_name(cc_kind_t kind);

/* A rank's device and pinned host buffers, allocated once for a sweep (freeing in the middle
 * of a sweep would wait for the device's work, including other ranks' pending collectives). */
typedef struct cc_bufs {
    size_t bytes; /* of each buffer */
    void *dev_a, *dev_b;
    void *host_a, *host_b;
} cc_bufs_t;

/* Bytes after every receive region that no collective may touch. */
#define CC_GUARD 64

bool cc_bufs_alloc(cc_rank_t *r, cc_bufs_t *b, size_t bytes);
/* Frees in stream order on the rank's stream (hal_mem_free would wait for other streams of the
 * backend, which may hold other ranks' collectives waiting for this rank). */
void cc_bufs_free(cc_rank_t *r, cc_bufs_t *b);
/* The same without checking the statuses (after failures the test caused). */
void cc_bufs_release(cc_rank_t *r, cc_bufs_t *b);

typedef struct cc_case {
    cc_kind_t kind;
    hal_dtype_t dtype;
    hal_redop_t op; /* reducing kinds */
    size_t count;   /* per rank, as the HAL counts it */
    int root;       /* rooted kinds */
    bool in_place;
    uint32_t seed;
} cc_case_t;

/* Runs one collective case on this rank through b (which must hold it) and checks the results
 * bit-exactly: the receive region, the guard after it, the send buffer left unchanged
 * (out of place), and what must stay untouched (reduce's non-roots). Returns false if the rank
 * is broken (the collective failed). */
bool cc_run_case(cc_rank_t *r, cc_bufs_t *b, const cc_case_t *c);

/* Bytes a case needs in each of the two buffers (guard included). */
size_t cc_case_bytes(const cc_case_t *c, int nranks);

/* Issues a case's collective with explicit buffers (no checks). */
hal_status_t cc_issue(const cc_case_t *c, const void *send, void *recv, hal_comm_t comm,
                      hal_stream_t stream);

/* Sweeps every dtype (fp8 only with HAL_DEVICE_CAP_FP8_COLLECTIVES), every op of the reducing
 * kinds, counts {0, 1, 7, 1023} and CC_LARGE_COUNT (f32 and i32, sum for the reducing kinds),
 * every root and both placements. */
void cc_sweep(cc_rank_t *r, cc_kind_t kind);

#ifdef __cplusplus
}
#endif

#endif /* CTS_COMM_H */
