/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers for the host-queue engine's tests: host services that keep the last detail per thread
 * (and hand it back once through take_error, as the core does), devices with a chosen
 * configuration, gates that hold a stream, and polling with a deadline. */
#ifndef HAL_BACKENDS_COMMON_TESTS_HQ_TEST_UTIL_H
#define HAL_BACKENDS_COMMON_TESTS_HQ_TEST_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "hal_backends/common/hq_internal.h"
#include "tools/ctest/ctest.h"
#include "tools/ctest/ctest_status.h"

/* Host services: set_error keeps the detail for the calling thread (th_last_error), take_error
 * returns it once and counts its calls. */
extern const hal_host_services_t th_host;
/* A 1.0 host: take_error lies past its struct_size and must never be called. */
extern const hal_host_services_t th_host_1_0;
const char *th_last_error(void);
void th_clear_error(void);
int th_take_error_calls(void);
/* Leaves a detail for the calling thread, as a HAL function failing inside a host function
 * does. */
void th_leave_detail(const char *detail);

/* Checks record a failure and go on (EXPECT_*, CTEST_EXPECT: tools/ctest), so that a test can
 * open its gates and clean up; the last error they show is th_last_error() (th_config makes it
 * the source). */

/* A device configuration with th_host and the given slots and spin budget (HQ_TEST_SPIN_US, if
 * set, replaces spin_us: the suite runs again with every waiter sleeping). */
hq_device_config_t th_config(uint32_t index, uint32_t slots, uint32_t spin_us);

/* A host callback (or host function) that blocks its stream until the gate opens, or 10 s pass
 * so that a broken engine fails a test instead of hanging it. */
typedef struct th_gate {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    bool open;
    atomic_int entered;
    atomic_int status; /* stream status it was given */
} th_gate_t;

void th_gate_init(th_gate_t *gate);
void th_gate_open(th_gate_t *gate);
void th_gate_destroy(th_gate_t *gate);
void th_gate_cb(hal_status_t status, void *gate);
hal_status_t th_gate_fn(void *gate, hal_status_t status);
bool th_gate_entered(void *gate);

/* Polls pred(arg) every 100 us for up to `ms` milliseconds. */
bool th_wait_until(bool (*pred)(void *arg), void *arg, int ms);
void th_sleep_ms(int ms);

/* A counter bumped by callbacks and work tasks. */
void th_count_cb(hal_status_t status, void *counter);
hal_status_t th_count_work(hq_stream_t *stream, void *payload, hal_status_t status);

#endif /* HAL_BACKENDS_COMMON_TESTS_HQ_TEST_UTIL_H */
