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

/* Checks that do not return, so that a test can open its gates and clean up; the test declares
 * `int th_failed = 0;` and ends with TH_RESULT(). */
#define TH_EXPECT(cond)                                                                    \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: expectation failed: %s\n", __FILE__, __LINE__, #cond); \
            th_failed = 1;                                                                 \
        }                                                                                  \
    } while (0)

#define TH_EXPECT_STATUS(call, expected)                                                           \
    do {                                                                                           \
        hal_status_t th_st_ = (call);                                                              \
        if (th_st_ != (expected)) {                                                                \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (last error: \"%s\")\n", __FILE__, \
                    __LINE__, #call, hq_status_name(th_st_), hq_status_name(expected),             \
                    th_last_error());                                                              \
            th_failed = 1;                                                                         \
        }                                                                                          \
    } while (0)

#define TH_EXPECT_MESSAGE(fragment)                                                         \
    do {                                                                                    \
        if (strstr(th_last_error(), (fragment)) == NULL) {                                  \
            fprintf(stderr, "%s:%d: last error \"%s\" does not mention \"%s\"\n", __FILE__, \
                    __LINE__, th_last_error(), (fragment));                                 \
            th_failed = 1;                                                                  \
        }                                                                                   \
    } while (0)

#define TH_RESULT() return th_failed ? CTEST_FAIL : CTEST_PASS

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
