/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the caching allocator tests: a check that jumps to a cleanup label (so that a
 * failing test still opens its gates and frees what it holds; statuses: CHECK_*_GOTO of
 * tools/ctest/ctest_status.h), a host-callback gate that keeps
 * a stream busy, and statistics snapshots. */
#ifndef HAL_TESTS_ALLOCATOR_TEST_UTIL_H
#define HAL_TESTS_ALLOCATOR_TEST_UTIL_H

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "hal/hal.h"
#include "tools/ctest/ctest.h"
#include "tools/ctest/ctest_status.h"

/* Each test body declares `int rc = CTEST_FAIL;` and ends with an `out:` cleanup label, where
 * T_CHECK (conditions) and CHECK_*_GOTO(..., out) (statuses) jump on a failure. */
#define T_CHECK(cond)            \
    do {                         \
        if (!CTEST_EXPECT(cond)) \
            goto out;            \
    } while (0)

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* Blocks a stream's worker in a host callback until opened. */
typedef struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int open;
} gate_t;

static inline void gate_init(gate_t *g)
{
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    g->open = 0;
}

static inline void gate_wait(hal_status_t status, void *user)
{
    gate_t *g = user;
    (void)status;
    pthread_mutex_lock(&g->lock);
    while (!g->open)
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

static inline void gate_open(gate_t *g)
{
    pthread_mutex_lock(&g->lock);
    g->open = 1;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

static inline void gate_destroy(gate_t *g)
{
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
}

/* Returns the allocator's statistics (zeroed if the call fails). */
static inline hal_allocator_stats_t stats_of(hal_allocator_t a)
{
    hal_allocator_stats_t s = HAL_ALLOCATOR_STATS_INIT;
    if (hal_allocator_get_stats(a, &s) != HAL_OK)
        memset(&s, 0, sizeof(s));
    return s;
}

#endif /* HAL_TESTS_ALLOCATOR_TEST_UTIL_H */
