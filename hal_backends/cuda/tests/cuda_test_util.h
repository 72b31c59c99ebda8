/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers for the CUDA backend's tests: a gate, a host callback that holds its stream until
 * opened. */
#ifndef HAL_BACKENDS_CUDA_TESTS_CUDA_TEST_UTIL_H
#define HAL_BACKENDS_CUDA_TESTS_CUDA_TEST_UTIL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "hal/hal.h"
#include "tools/ctest/ctest.h"
#include "tools/ctest/ctest_status.h"

/* Tests record failures and go on (EXPECT_* of tools/ctest/ctest_status.h, CTEST_EXPECT), so
 * that a test can always open its gates and clean up; the runner fails a test that recorded
 * one. */

/* ---- gates ----------------------------------------------------------------------------------- */

typedef struct ct_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open;
    bool ran;          /* the callback was reached */
    hal_status_t seen; /* the stream status it was told */
} ct_gate_t;

static inline void ct_gate_init(ct_gate_t *g)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->open = g->ran = false;
    g->seen = HAL_ERROR_INTERNAL;
}

static inline void ct_gate_fn(hal_status_t status, void *user)
{
    ct_gate_t *g = user;
    pthread_mutex_lock(&g->mu);
    g->ran = true;
    g->seen = status;
    pthread_cond_broadcast(&g->cv);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static inline void ct_gate_open(ct_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* Waits up to ms for the stream to reach the gate. */
static inline bool ct_gate_reached(ct_gate_t *g, int ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += ms / 1000;
    deadline.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&g->mu);
    while (!g->ran)
        if (pthread_cond_timedwait(&g->cv, &g->mu, &deadline) != 0)
            break;
    bool ran = g->ran;
    pthread_mutex_unlock(&g->mu);
    return ran;
}

static inline void ct_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

#endif /* HAL_BACKENDS_CUDA_TESTS_CUDA_TEST_UTIL_H */
