/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: per-device execution slots. A device runs at most HAL_CPU_DEVICE_CONCURRENCY
 * stream tasks at once; this is what gives stream priorities a meaning. When slots run short,
 * waiting workers are served in priority order (numerically lower first), FIFO within one
 * priority.
 *
 * Fast path: while nobody waits, a slot is one compare-and-swap on free_slots. Once a worker
 * waits, every acquirer queues under the lock so that a freed slot goes to the best waiter and
 * cannot be stolen by a newcomer. A releaser increments free_slots and then looks at `waiting`;
 * a waiter increments `waiting` and then looks at free_slots (both sequentially consistent), so
 * at least one of them sees the other and no slot is stranded. */
#include "hal_backends/cpu/cpu_internal.h"

/* Sets up `slots` execution slots. Returns HAL_OK or HAL_ERROR_OUT_OF_HOST_MEMORY. */
hal_status_t cpu_sched_init(cpu_sched_t *sched, uint32_t slots, uint32_t spin_us)
{
    if (pthread_mutex_init(&sched->lock, NULL) != 0)
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    atomic_init(&sched->free_slots, (int)slots);
    atomic_init(&sched->waiting, 0);
    sched->waiters = NULL;
    sched->spin_us = spin_us;
    return HAL_OK;
}

/* Releases the scheduler; no worker may be using it. */
void cpu_sched_destroy(cpu_sched_t *sched)
{
    pthread_mutex_destroy(&sched->lock);
}

static bool take_slot(cpu_sched_t *sched)
{
    int n = atomic_load(&sched->free_slots);
    while (n > 0) {
        if (atomic_compare_exchange_weak(&sched->free_slots, &n, n - 1))
            return true;
    }
    return false;
}

/* Hands free slots to the queued waiters, best first. Caller holds the lock. A granted waiter
 * may return (and its stack frame vanish) as soon as it sees `granted`, so nothing of it is
 * touched after that store; a sleeping one cannot leave cond_wait before we unlock. */
static void dispatch_locked(cpu_sched_t *sched)
{
    while (sched->waiters != NULL && take_slot(sched)) {
        cpu_sched_waiter_t *w = sched->waiters;
        sched->waiters = w->next;
        atomic_fetch_sub(&sched->waiting, 1);
        bool sleeping = w->sleeping;
        pthread_cond_t *cv = w->cv;
        atomic_store(&w->granted, true);
        if (sleeping)
            pthread_cond_signal(cv);
    }
}

static bool waiter_granted(const void *w)
{
    return atomic_load_explicit(&((const cpu_sched_waiter_t *)w)->granted, memory_order_acquire);
}

/* Blocks until the caller owns an execution slot. `cv` is a condition variable private to the
 * caller, used only with the scheduler's lock. */
void cpu_sched_acquire(cpu_sched_t *sched, int32_t priority, pthread_cond_t *cv)
{
    if (atomic_load(&sched->waiting) == 0 && take_slot(sched))
        return;

    cpu_sched_waiter_t w = { .next = NULL, .priority = priority, .sleeping = false, .cv = cv };
    atomic_init(&w.granted, false);
    pthread_mutex_lock(&sched->lock);
    cpu_sched_waiter_t **pos = &sched->waiters;
    while (*pos != NULL && (*pos)->priority <= priority)
        pos = &(*pos)->next;
    w.next = *pos;
    *pos = &w;
    atomic_fetch_add(&sched->waiting, 1);
    dispatch_locked(sched);
    pthread_mutex_unlock(&sched->lock);

    if (cpu_spin_until(waiter_granted, &w, sched->spin_us))
        return;
    pthread_mutex_lock(&sched->lock);
    while (!atomic_load(&w.granted)) {
        w.sleeping = true;
        pthread_cond_wait(cv, &sched->lock);
        w.sleeping = false;
    }
    pthread_mutex_unlock(&sched->lock);
}

/* Returns a slot; the best waiter, if any, gets it. */
void cpu_sched_release(cpu_sched_t *sched)
{
    atomic_fetch_add(&sched->free_slots, 1);
    if (atomic_load(&sched->waiting) == 0)
        return;
    pthread_mutex_lock(&sched->lock);
    dispatch_locked(sched);
    pthread_mutex_unlock(&sched->lock);
}

/* Number of workers queued for a slot (lets tests wait until contention is set up). */
uint32_t cpu_sched_waiting(cpu_sched_t *sched)
{
    return atomic_load(&sched->waiting);
}
