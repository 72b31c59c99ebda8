/* SPDX-License-Identifier: Apache-2.0 */
/* The caching allocator's block structs, bins and pools beyond the inline fast path
 * (caching_allocator_bins.h): refills, merging a freed block into a pool, taking a block from
 * the bins, and pruning the pools of destroyed streams. */
#include <stdlib.h>

#include "hal/hal.h"
#include "hal/services/caching_allocator_bins.h"
#include "hal/services/caching_allocator_internal.h"
#include "hal/src/service.h"

/* ---- block structs --------------------------------------------------------------------------- */

bool ca_spare_refill(struct hal_allocator_s *a)
{
    slab_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return false;
    s->next = a->slabs;
    a->slabs = s;
    for (size_t i = 0; i < sizeof(s->blocks) / sizeof(s->blocks[0]); i++) {
        s->blocks[i].state = BLOCK_UNUSED;
        s->blocks[i].fnext = a->spare;
        a->spare = &s->blocks[i];
    }
    return true;
}

/* ---- live table ------------------------------------------------------------------------------ */

bool ca_live_init(struct hal_allocator_s *a, unsigned log2cap)
{
    live_slot_t *slots = calloc((size_t)1 << log2cap, sizeof(*slots));
    if (slots == NULL)
        return false;
    a->live = slots;
    a->live_mask = ((size_t)1 << log2cap) - 1;
    a->live_shift = 64 - log2cap;
    a->live_count = 0;
    return true;
}

/* ---- pools ----------------------------------------------------------------------------------- */

pool_t *ca_pool_new(hal_stream_t stream)
{
    pool_t *p = calloc(1, sizeof(*p));
    if (p != NULL)
        p->stream = stream;
    return p;
}

/* Caches a block that no longer holds live data in pool p's bins, merging it with free
 * neighbours cached in p or in the neutral pool. seq: when its memory was last used on p's
 * stream; a merged block keeps the latest of its parts. */
void ca_pool_put(struct hal_allocator_s *a, pool_t *p, block_t *b, uint64_t seq)
{
    pool_t *neutral = a->neutral;
    block_t *n = b->prev;
    if (n != NULL && n->state == BLOCK_FREE && (n->pool == p || n->pool == neutral)) {
        if (n->pool == p && n->free_seq > seq)
            seq = n->free_seq;
        bins_remove(a, n);
        b->ptr = n->ptr;
        b->size += n->size;
        b->prev = n->prev;
        if (b->prev != NULL)
            b->prev->next = b;
        else
            b->seg->first = b;
        block_put(a, n);
    }
    n = b->next;
    if (n != NULL && n->state == BLOCK_FREE && (n->pool == p || n->pool == neutral)) {
        if (n->pool == p && n->free_seq > seq)
            seq = n->free_seq;
        bins_remove(a, n);
        b->size += n->size;
        b->next = n->next;
        if (b->next != NULL)
            b->next->prev = b;
        block_put(a, n);
    }
    b->state = BLOCK_FREE;
    b->free_seq = seq;
    bins_insert(a, p, b);
}

/* Takes a block for `size` bytes from pool p, else from the neutral pool; splits off and
 * re-caches the remainder where the block was found. */
block_t *ca_take(struct hal_allocator_s *a, pool_t *p, size_t size)
{
    bool small = size <= SMALL_SIZE;
    size_t mss = small ? 0 : a->max_split_size;
    block_t *b = bins_find(small ? &p->small : &p->large, size, mss, a->large_round);
    if (b == NULL) {
        p = a->neutral;
        b = bins_find(small ? &p->small : &p->large, size, mss, a->large_round);
        if (b == NULL)
            return NULL;
    }
    bins_remove(a, b);
    carve(a, p, b, size);
    return b;
}

/* Drops the pools of destroyed streams that hold nothing any more. */
void ca_pools_prune(struct hal_allocator_s *a)
{
    for (size_t i = a->npools; i-- > 0;) {
        pool_t *p = a->pools[i];
        if (!p->retired || p->users != 0 || p->nfree != 0 || p->parked != NULL || p->fence != NULL)
            continue;
        if (a->last_pool == p) {
            a->last_stream = a->default_stream;
            a->last_pool = NULL;
        }
        a->pools[i] = a->pools[--a->npools];
        free(p);
    }
    if (a->last_pool == NULL) {
        for (size_t i = 0; i < a->npools; i++) {
            if (a->pools[i]->stream == a->default_stream)
                a->last_pool = a->pools[i];
        }
    }
}
