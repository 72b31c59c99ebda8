/* SPDX-License-Identifier: Apache-2.0 */
/* Backend toolkit: per-device execution slots (see hq_sched.h).
 *
 * Fast path: while nobody waits, a slot is one compare-and-swap on free_slots. Once a thread
 * waits, every acquirer queues under the lock so that a freed slot goes to the best waiter and
 * cannot be stolen by a newcomer. A releaser increments free_slots and then looks at `waiting`;
 * a waiter increments `waiting` and then looks at free_slots (both sequentially consistent), so
 * at least one of them sees the other and no slot is stranded. */
#include "hal_backends/common/hq_sched.h"
#include "hal_backends/common/hq_time.h"

hal_status_t hq_sched_init(hq_sched_t *sched, uint32_t slots, uint32_t spin_us)
{
    if (pthread_mutex_init(&sched->lock, NULL) != 0)
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    sched->slots = slots;
    atomic_init(&sched->free_slots, (int)slots);
    atomic_init(&sched->waiting, 0);
    sched->waiters = NULL;
    sched->spin_us = spin_us;
    return HAL_OK;
}

void hq_sched_destroy(hq_sched_t *sched)
{
    pthread_mutex_destroy(&sched->lock);
}

static bool take_slot(hq_sched_t *sched)
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
static void dispatch_locked(hq_sched_t *sched)
{
    while (sched->waiters != NULL && take_slot(sched)) {
        hq_sched_waiter_t *w = sched->waiters;
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
    return atomic_load_explicit(&((const hq_sched_waiter_t *)w)->granted, memory_order_acquire);
}

bool hq_sched_try_acquire(hq_sched_t *sched)
{
    if (sched->slots == 0)
        return true;
    return atomic_load(&sched->waiting) == 0 && take_slot(sched);
}

void hq_sched_acquire(hq_sched_t *sched, int32_t priority, pthread_cond_t *cv)
{
    if (hq_sched_try_acquire(sched))
        return;

    hq_sched_waiter_t w = { .next = NULL, .priority = priority, .sleeping = false, .cv = cv };
    atomic_init(&w.granted, false);
    pthread_mutex_lock(&sched->lock);
    hq_sched_waiter_t **pos = &sched->waiters;
    while (*pos != NULL && (*pos)->priority <= priority)
        pos = &(*pos)->next;
    w.next = *pos;
    *pos = &w;
    atomic_fetch_add(&sched->waiting, 1);
    dispatch_locked(sched);
    pthread_mutex_unlock(&sched->lock);

    if (hq_spin_until(waiter_granted, &w, sched->spin_us))
        return;
    pthread_mutex_lock(&sched->lock);
    while (!atomic_load(&w.granted)) {
        w.sleeping = true;
        pthread_cond_wait(cv, &sched->lock);
        w.sleeping = false;
    }
    pthread_mutex_unlock(&sched->lock);
}

void hq_sched_release(hq_sched_t *sched)
{
    if (sched->slots == 0)
        return;
    atomic_fetch_add(&sched->free_slots, 1);
    if (atomic_load(&sched->waiting) == 0)
        return;
    pthread_mutex_lock(&sched->lock);
    dispatch_locked(sched);
    pthread_mutex_unlock(&sched->lock);
}

uint32_t hq_sched_waiting(hq_sched_t *sched)
{
    return atomic_load(&sched->waiting);
}
