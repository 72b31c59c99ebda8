/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers for the cpu backend's internal tests: they drive the ops table directly (no core, no
 * dlopen) with a minimal host-services struct that keeps the last error message per thread.
 * Gates that hold a stream (th_gate_*), polling (th_wait_until) and th_sleep_ms are the engine
 * tests' (hq_test_util.h). */
#ifndef HAL_BACKENDS_CPU_TESTS_CPU_TEST_UTIL_H
#define HAL_BACKENDS_CPU_TESTS_CPU_TEST_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "hal_backends/common/tests/hq_test_util.h" /* gates, polling, sleeping */
#include "hal_backends/cpu/cpu_internal.h"
#include "tools/ctest/ctest.h"
#include "tools/ctest/ctest_status.h"

/* Host services handed to init; set_error stores into t_last_error(). */
extern const hal_host_services_t t_host;
const char *t_last_error(void);
void t_clear_error(void);

/* Checks record a failure and go on (EXPECT_*, CTEST_EXPECT: tools/ctest), so that a test can
 * always open its gates and clean up; the last error they show is t_last_error() (t_open makes it
 * the source). */

/* An initialised backend with all its devices open. */
#define T_MAX_DEVICES 4
typedef struct t_fixture {
    const hal_backend_ops_t *ops;
    void *backend;
    uint32_t count;
    void *dev[T_MAX_DEVICES];
} t_fixture_t;

/* Sets (or, for NULL, unsets) the four HAL_CPU_* variables. */
void t_set_env(const char *devices, const char *memory, const char *concurrency,
               const char *spin_us);
/* Sets the environment as t_set_env, initialises the backend and opens up to T_MAX_DEVICES
 * devices. Returns init's status. A NULL spin_us takes CPU_TEST_SPIN_US if that is set. */
hal_status_t t_open(t_fixture_t *fx, const char *devices, const char *memory,
                    const char *concurrency, const char *spin_us);
/* As t_open, but a NULL spin_us really leaves HAL_CPU_SPIN_US unset. */
hal_status_t t_open_exact(t_fixture_t *fx, const char *devices, const char *memory,
                          const char *concurrency, const char *spin_us);
/* As t_open, with `host` handed to init instead of t_host. */
hal_status_t t_open_with_host(t_fixture_t *fx, const hal_host_services_t *host, const char *devices,
                              const char *memory, const char *concurrency, const char *spin_us);
/* Closes the devices and finalises the backend. */
void t_close(t_fixture_t *fx);

/* Appends a character to a log from a callback (the log is shared by several streams). */
typedef struct t_log {
    pthread_mutex_t lock;
    char text[256];
    size_t len;
} t_log_t;

typedef struct t_log_entry {
    t_log_t *log;
    char c;
} t_log_entry_t;

void t_log_init(t_log_t *log);
void t_log_cb(hal_status_t status, void *entry);

/* Wraps a host pointer as a resolved pointer of the given kind. */
hal_backend_ptr_t t_ptr(void *p, hal_mem_kind_t kind);

/* A resolved pointer into an allocation of the given kind, as the core passes it. */
hal_backend_ptr_t t_alloc_ptr(void *base, void *cookie, size_t size, size_t offset,
                              hal_mem_kind_t kind);

/* Queues fn(arg, stream_status) as an engine work task with HQ_TASK_* flags (the building
 * block of the toolkit's host functions, with a plain function and argument). */
hal_status_t t_enqueue_fn(void *stream, hal_stream_host_fn_t fn, void *arg, uint32_t flags);

#endif /* HAL_BACKENDS_CPU_TESTS_CPU_TEST_UTIL_H */
