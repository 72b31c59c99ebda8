/* SPDX-License-Identifier: Apache-2.0 */
/* Backend toolkit: per-device execution slots. A device runs at most `slots` stream tasks at
 * once; this is what gives stream priorities a meaning. When slots run short, waiting workers
 * are served in priority order (numerically lower first), FIFO within one priority. A
 * scheduler of 0 slots never limits anything (acquire and release do nothing). */
#ifndef HAL_BACKENDS_COMMON_HQ_SCHED_H
#define HAL_BACKENDS_COMMON_HQ_SCHED_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "hal/hal_types.h"

/* A thread waiting for a slot. Lives on the waiter's stack; guarded by the scheduler's lock
 * except `granted`, which the waiter may poll without it. */
typedef struct hq_sched_waiter {
    struct hq_sched_waiter *next;
    int32_t priority;
    bool sleeping;
    atomic_bool granted;
    pthread_cond_t *cv;
} hq_sched_waiter_t;

/* The slots of one device. Fields are private to hq_sched.c. */
typedef struct hq_sched {
    pthread_mutex_t lock;
    uint32_t slots;             /* 0: unlimited */
    atomic_int free_slots;      /* slots not held */
    atomic_uint waiting;        /* entries in `waiters`; nonzero disables the fast path */
    hq_sched_waiter_t *waiters; /* by priority (numerically lower first), FIFO within one */
    uint32_t spin_us;           /* how long a waiter spins before it sleeps */
} hq_sched_t;

/* Sets up a scheduler.
 * [out] sched    the scheduler to initialise.
 * [in]  slots    tasks that may hold a slot at once; 0 for no limit.
 * [in]  spin_us  microseconds a waiter spins before sleeping (0: sleep at once).
 * Returns HAL_OK or HAL_ERROR_OUT_OF_HOST_MEMORY (no mutex).
 * Thread safety: not safe; sched must not be in use. */
hal_status_t hq_sched_init(hq_sched_t *sched, uint32_t slots, uint32_t spin_us);

/* Releases a scheduler that no thread holds or waits for.
 * Thread safety: not safe. */
void hq_sched_destroy(hq_sched_t *sched);

/* Blocks until the caller owns a slot (returns at once for an unlimited scheduler).
 * [in] sched     the device's scheduler.
 * [in] priority  the caller's priority (numerically lower is served first).
 * [in] cv        a condition variable private to the calling thread, used only with the
 *                scheduler's lock.
 * Thread safety: safe. */
void hq_sched_acquire(hq_sched_t *sched, int32_t priority, pthread_cond_t *cv);

/* Takes a slot if one is free and nobody waits for one; never blocks (always succeeds for an
 * unlimited scheduler).
 * [in] sched  the device's scheduler.
 * Returns true when the caller now owns a slot (release it with hq_sched_release).
 * Thread safety: safe. */
bool hq_sched_try_acquire(hq_sched_t *sched);

/* Returns a slot taken with hq_sched_acquire or hq_sched_try_acquire; the best waiter, if any,
 * gets it.
 * Thread safety: safe. */
void hq_sched_release(hq_sched_t *sched);

/* Number of threads queued for a slot (lets tests wait until contention is set up).
 * Thread safety: safe. */
uint32_t hq_sched_waiting(hq_sched_t *sched);

#endif /* HAL_BACKENDS_COMMON_HQ_SCHED_H */
