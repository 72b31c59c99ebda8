/* SPDX-License-Identifier: Apache-2.0 */
/* The caching allocator's cross-stream reuse: the event pool, fences that prove a pool's freed
 * blocks idle (migrated to the neutral pool), blocks held back for the streams passed to
 * record_stream, and the stream listener that retires the pool of a destroyed stream. */
#include <stdlib.h>

#include "hal/hal.h"
#include "hal/services/caching_allocator_bins.h"
#include "hal/services/caching_allocator_internal.h"
#include "hal/src/service.h"

/* ---- pools ----------------------------------------------------------------------------------- */

/* Moves p's blocks freed at or before sequence `upto` to the neutral pool. */
static void migrate(struct hal_allocator_s *a, pool_t *p, uint64_t upto)
{
    unpark(a, p);
    bins_t *sets[2] = { &p->small, &p->large };
    for (int k = 0; k < 2; k++) {
        bins_t *bs = sets[k];
        uint64_t flm = bs->fl_map;
        while (flm != 0) {
            unsigned fl = (unsigned)__builtin_ctzll(flm);
            flm &= flm - 1;
            uint32_t slm = bs->sl_map[fl];
            while (slm != 0) {
                unsigned sl = (unsigned)__builtin_ctz(slm);
                slm &= slm - 1;
                block_t *next;
                for (block_t *b = bs->head[fl][sl]; b != NULL; b = next) {
                    next = b->fnext; /* ca_pool_put below only touches neutral blocks */
                    if (b->free_seq <= upto) {
                        bins_remove(a, b);
                        ca_pool_put(a, a->neutral, b, 0);
                    }
                }
            }
        }
    }
}

/* ---- events ---------------------------------------------------------------------------------- */

static hal_event_t event_get(struct hal_allocator_s *a)
{
    if (a->nevents > 0)
        return a->events[--a->nevents];
    hal_event_t ev = NULL;
    if (hal_event_create((hal_device_t)a->device, HAL_EVENT_FLAG_NONE, &ev) != HAL_OK)
        return NULL;
    return ev;
}

static void event_put(struct hal_allocator_s *a, hal_event_t ev)
{
    if (a->nevents == a->cap_events) {
        size_t cap = a->cap_events ? a->cap_events * 2 : 16;
        hal_event_t *ne = realloc(a->events, cap * sizeof(*ne));
        if (ne == NULL) {
            hal_event_destroy(ev);
            return;
        }
        a->events = ne;
        a->cap_events = cap;
    }
    a->events[a->nevents++] = ev;
}

/* Records a fence on p's stream covering every block p holds now. Returns true if it already
 * completed (or cannot be recorded because the stream is gone: a destroyed stream drained its
 * work first), in which case the blocks are migrated. */
static bool fence_start(struct hal_allocator_s *a, pool_t *p)
{
    if (p->retired) { /* what was freed on it is idle */
        migrate(a, p, p->seq);
        return true;
    }
    hal_event_t ev = event_get(a);
    if (ev == NULL)
        return false;
    if (hal_event_record(ev, p->stream) != HAL_OK) {
        event_put(a, ev);
        migrate(a, p, p->seq);
        return true;
    }
    p->fence = ev;
    p->fence_seq = p->seq;
    if (hal_event_query(ev) == HAL_NOT_READY)
        return false;
    p->fence = NULL;
    event_put(a, ev);
    migrate(a, p, p->fence_seq);
    return true;
}

/* Polls (or, blocking, waits for) every other pool's fence and migrates what they cover. */
hal_status_t ca_fences_poll(struct hal_allocator_s *a, pool_t *self, bool blocking)
{
    hal_status_t err = HAL_OK;
    for (size_t i = 0; i < a->npools; i++) {
        pool_t *p = a->pools[i];
        if (p == self || (p->nfree == 0 && p->parked == NULL && p->fence == NULL))
            continue;
        if (p->fence != NULL) {
            hal_status_t st =
                blocking ? hal_event_synchronize(p->fence) : hal_event_query(p->fence);
            if (st == HAL_NOT_READY)
                continue;
            if (st != HAL_OK && err == HAL_OK)
                err = st; /* the stream failed: its work will not run any further */
            event_put(a, p->fence);
            p->fence = NULL;
            migrate(a, p, p->fence_seq);
        }
        if (p->nfree == 0 && p->parked == NULL)
            continue;
        if (fence_start(a, p) || !blocking)
            continue;
        hal_status_t st;
        if (p->fence != NULL) {
            st = hal_event_synchronize(p->fence);
            event_put(a, p->fence);
            p->fence = NULL;
            migrate(a, p, p->fence_seq);
        } else {
            /* No event to spare: wait for the whole stream (a destroyed one has no work). */
            st = hal_stream_synchronize(p->stream);
            if (st == HAL_ERROR_INVALID_HANDLE)
                st = HAL_OK;
            migrate(a, p, p->seq);
        }
        if (st != HAL_OK && err == HAL_OK)
            err = st;
    }
    return err;
}

/* Releases held blocks whose events completed (with blocking, waits for all of them). */
hal_status_t ca_held_poll(struct hal_allocator_s *a, bool blocking)
{
    hal_status_t err = HAL_OK;
    block_t *next;
    for (block_t *b = a->held_head; b != NULL; b = next) {
        next = b->fnext;
        bool done = true;
        for (uint32_t i = 0; i < b->nuses; i++) {
            hal_event_t ev = b->uses[i].event;
            if (ev == NULL)
                continue;
            hal_status_t st = blocking ? hal_event_synchronize(ev) : hal_event_query(ev);
            if (st == HAL_NOT_READY) {
                done = false;
                break;
            }
            if (st != HAL_OK && err == HAL_OK)
                err = st;
            event_put(a, ev);
            b->uses[i].event = NULL;
        }
        if (!done)
            continue;
        if (b->fprev != NULL)
            b->fprev->fnext = b->fnext;
        else
            a->held_head = b->fnext;
        if (b->fnext != NULL)
            b->fnext->fprev = b->fprev;
        a->cached_blocks--;
        a->cached_bytes -= b->size;
        b->nuses = 0;
        b->pool->users--;
        ca_pool_put(a, b->pool, b, ++b->pool->seq);
    }
    return err;
}

/* Frees a block used on other streams: records an event on each and holds the block back
 * until they complete. */
void ca_hold(struct hal_allocator_s *a, block_t *b)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < b->nuses; i++) {
        hal_stream_t s = b->uses[i].stream;
        hal_event_t ev = event_get(a);
        if (ev == NULL) {
            (void)hal_stream_synchronize(s); /* no event to wait with: wait now */
            continue;
        }
        if (hal_event_record(ev, s) != HAL_OK) {
            event_put(a, ev); /* the stream is gone, and its work with it */
            continue;
        }
        b->uses[n].stream = s;
        b->uses[n].event = ev;
        n++;
    }
    b->nuses = n;
    if (n == 0) {
        park(a, b->pool, b);
        return;
    }
    b->state = BLOCK_HELD;
    b->fprev = NULL;
    b->fnext = a->held_head;
    if (b->fnext != NULL)
        b->fnext->fprev = b;
    a->held_head = b;
    a->cached_blocks++;
    a->cached_bytes += b->size;
}

/* Waits for every pending cross-stream free and moves all free blocks to the neutral pool, so
 * that wholly free segments become single blocks. */
hal_status_t ca_sync_all(struct hal_allocator_s *a)
{
    hal_status_t err = ca_held_poll(a, true);
    hal_status_t st = ca_fences_poll(a, NULL, true);
    return err != HAL_OK ? err : st;
}

/* A stream of this device is being destroyed and has finished its work (the core calls this,
 * from hal_stream_destroy, before the backend stream goes): what was freed on it is idle, its
 * pool is retired and the handle is never used again. Blocks still live keep their uses of
 * other streams; a use of this one needs no wait any more. */
void ca_stream_retired(hal_stream_listener_t *listener, hal_stream_t stream)
{
    struct hal_allocator_s *a = HAL_CONTAINER_OF(listener, struct hal_allocator_s, listener);
    spin_lock(&a->lock);
    ca_front_retire_stream(a, stream); /* parks their blocks in the pool retired below */
    for (size_t i = 0; i < a->npools; i++) {
        pool_t *p = a->pools[i];
        if (p->stream != stream || p->retired)
            continue;
        if (p->fence != NULL) { /* recorded by another thread after the core's synchronize */
            (void)hal_event_synchronize(p->fence);
            event_put(a, p->fence);
            p->fence = NULL;
        }
        if (p->parked != NULL)
            unpark(a, p);
        migrate(a, p, p->seq);
        p->retired = true;
        p->stream = NULL;
    }
    if (a->last_stream == stream) {
        a->last_stream = a->default_stream;
        a->last_pool = NULL;
        for (size_t i = 0; i < a->npools; i++) {
            if (a->pools[i]->stream == a->default_stream)
                a->last_pool = a->pools[i];
        }
    }
    for (size_t i = 0; i <= a->live_mask; i++) {
        block_t *b = a->live[i].block;
        if (b == NULL)
            continue;
        uint32_t n = 0;
        for (uint32_t k = 0; k < b->nuses; k++) {
            if (b->uses[k].stream != stream)
                b->uses[n++] = b->uses[k];
        }
        b->nuses = n;
    }
    spin_unlock(&a->lock);
}
