/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: per-core execution slots. At most TRN_DEVICE_SLOTS stream tasks that move
 * data run at once on a NeuronCore; when more streams have such work, the waiting workers are
 * served in priority order (numerically lower first), FIFO within one priority. This is what
 * gives stream priorities a meaning. Tasks that only wait or run host code take no slot.
 *
 * Runtime calls take microseconds to milliseconds, so a plain mutex is cheap enough here: a
 * waiter sleeps on its own condition variable and is handed the slot directly by the releaser,
 * so a newcomer can never overtake a better-placed waiter. */
#include "hal_backends/trainium/trn_internal.h"

hal_status_t trn_sched_init(trn_sched_t *sched, uint32_t slots)
{
    if (pthread_mutex_init(&sched->lock, NULL) != 0)
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    sched->free_slots = slots;
    sched->waiters = NULL;
    atomic_init(&sched->waiting, 0);
    return HAL_OK;
}

/* No worker may be using the scheduler any more. */
void trn_sched_destroy(trn_sched_t *sched)
{
    pthread_mutex_destroy(&sched->lock);
}

/* Hands free slots to the queued waiters, best first. Caller holds the lock; a waiter cannot
 * leave pthread_cond_wait (and its stack frame cannot vanish) before the lock is released. */
static void dispatch_locked(trn_sched_t *sched)
{
    while (sched->waiters != NULL && sched->free_slots > 0) {
        trn_sched_waiter_t *w = sched->waiters;
        sched->waiters = w->next;
        sched->free_slots--;
        atomic_fetch_sub(&sched->waiting, 1);
        w->granted = true;
        pthread_cond_signal(w->cv);
    }
}

void trn_sched_acquire(trn_sched_t *sched, int32_t priority, pthread_cond_t *cv)
{
    pthread_mutex_lock(&sched->lock);
    if (sched->waiters == NULL && sched->free_slots > 0) {
        sched->free_slots--;
        pthread_mutex_unlock(&sched->lock);
        return;
    }
    trn_sched_waiter_t w = { .next = NULL, .priority = priority, .granted = false, .cv = cv };
    trn_sched_waiter_t **pos = &sched->waiters;
    while (*pos != NULL && (*pos)->priority <= priority)
        pos = &(*pos)->next;
    w.next = *pos;
    *pos = &w;
    atomic_fetch_add(&sched->waiting, 1);
    dispatch_locked(sched);
    while (!w.granted)
        pthread_cond_wait(cv, &sched->lock);
    pthread_mutex_unlock(&sched->lock);
}

void trn_sched_release(trn_sched_t *sched)
{
    pthread_mutex_lock(&sched->lock);
    sched->free_slots++;
    dispatch_locked(sched);
    pthread_mutex_unlock(&sched->lock);
}

uint32_t trn_sched_waiting(trn_sched_t *sched)
{
    return atomic_load(&sched->waiting);
}
