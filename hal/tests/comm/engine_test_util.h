/* SPDX-License-Identifier: Apache-2.0 */
/* Test fixture of the host collective engine: runs a test body on every rank of a job whose
 * ranks are threads of this process, forked processes, or a mix (two processes of several
 * threads each); rendezvous goes through a key-value store in shared memory, so no thread
 * exists before a fork. Optionally gives the engine an IPC table over memfd-backed test buffers
 * (what the cpu backend's IPC slots provide), so the in-place path between processes runs
 * without a backend. After a job, no shared-memory segment named after its nonce may remain. */
#ifndef HAL_TESTS_COMM_ENGINE_TEST_UTIL_H
#define HAL_TESTS_COMM_ENGINE_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/src/comm/bootstrap.h"
#include "hal/src/comm/engine.h"

typedef enum et_mode {
    ET_THREADS,   /* every rank a thread of this process */
    ET_PROCESSES, /* every rank a forked process */
    ET_MIXED,     /* two forked processes, ranks alternating between them, threads inside */
} et_mode_t;

typedef struct et_opts {
    et_mode_t mode;
    int nranks;
    bool ipc;            /* give the engine an IPC table; et_alloc buffers can be mapped */
    bool no_shm;         /* HAL_COMM_SHM_DISABLE: every rank talks TCP */
    uint32_t timeout_ms; /* engine timeout (0: 20000) */
    bool no_engine;      /* the body creates the engine itself (init tests) */
} et_opts_t;

typedef struct et_ipc et_ipc_t;

typedef struct et_rank {
    int rank, nranks;
    const et_opts_t *opts;
    hal_bootstrap_t *boot;
    hal_engine_comm_t *comm;
    hal_engine_config_t config;
    et_ipc_t *ipc;
    void *arg;
} et_rank_t;

/* A test body: runs on every rank; returns 0 for success. */
typedef int (*et_body_fn)(et_rank_t *r);

/* Runs body on every rank of a new job. results (optional, nranks entries) receives each
 * rank's outcome: its return value, or 128 + signal for a process killed by a signal, or -1
 * if it did not finish within the deadline. Returns 0 if every rank returned 0 and the job
 * left no shared memory behind, else ET_RANK_FAILED and/or ET_SHM_LEFT. */
#define ET_RANK_FAILED 1
#define ET_SHM_LEFT    2
int et_run(const et_opts_t *opts, et_body_fn body, void *arg, int *results);

/* Test buffers: memfd-backed when the job has IPC, so peers in other processes can map them. */
void *et_alloc(et_rank_t *r, size_t bytes);
void et_free(et_rank_t *r, void *ptr);

/* Fills op->has_ipc and the handles of op's buffers when the job has IPC. */
void et_attach_ipc(et_rank_t *r, hal_engine_op_t *op);

/* Mappings currently open through the fixture's IPC table on this rank. */
int et_ipc_open_count(const et_rank_t *r);

/* Elapsed milliseconds of a monotonic clock. */
double et_now_ms(void);

/* Element codecs for the tests' exact-arithmetic inputs: value <-> bits of dtype (small
 * integers and halves, exactly representable), and the distance in units in the last place. */
size_t et_dtype_size(hal_dtype_t dtype);
void et_encode(hal_dtype_t dtype, double v, void *dst);
double et_decode(hal_dtype_t dtype, const void *src);
double et_ulp(hal_dtype_t dtype, double v);

/* Prints a failure with the rank and returns 1 (use as: return ET_FAIL(r, "...", ...)). */
#define ET_FAIL(r, ...) et_fail_impl((r), __FILE__, __LINE__, __VA_ARGS__)
int et_fail_impl(const et_rank_t *r, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define ET_CHECK(r, cond)                                   \
    do {                                                    \
        if (!(cond))                                        \
            return ET_FAIL((r), "check failed: %s", #cond); \
    } while (0)

#endif /* HAL_TESTS_COMM_ENGINE_TEST_UTIL_H */
