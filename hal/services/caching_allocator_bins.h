/* SPDX-License-Identifier: Apache-2.0 */
/* The caching allocator's fast path: block structs, the TLSF-style bins, the live table and the
 * pools' parked blocks. Inline, so that a cache hit of hal_allocator_alloc and
 * hal_allocator_free makes no call; every function needs the allocator's lock held. */
#ifndef HAL_SERVICES_CACHING_ALLOCATOR_BINS_H
#define HAL_SERVICES_CACHING_ALLOCATOR_BINS_H

#include <stdlib.h>

#include "hal/services/caching_allocator_internal.h"

/* ---- block structs --------------------------------------------------------------------------- */

/* Returns a block struct, or NULL when the host is out of memory. */
static inline block_t *block_get(struct hal_allocator_s *a)
{
    if (HAL_UNLIKELY(a->spare == NULL) && !ca_spare_refill(a))
        return NULL;
    block_t *b = a->spare;
    a->spare = b->fnext;
    return b;
}

/* The struct keeps its uses array for reuse. */
static inline void block_put(struct hal_allocator_s *a, block_t *b)
{
    b->state = BLOCK_UNUSED;
    b->nuses = 0;
    b->fnext = a->spare;
    a->spare = b;
}

/* ---- bins ------------------------------------------------------------------------------------ */

static inline void bin_of(size_t size, unsigned *fl, unsigned *sl)
{
    uint64_t units = (uint64_t)size >> 9;
    if (units < SL_COUNT) {
        *fl = 0;
        *sl = (unsigned)units;
        return;
    }
    unsigned m = 63u - (unsigned)__builtin_clzll(units);
    *fl = m - SL_BITS + 1;
    *sl = (unsigned)(units >> (m - SL_BITS)) & (SL_COUNT - 1);
}

static inline bins_t *bins_for(pool_t *p, const block_t *b)
{
    return b->small ? &p->small : &p->large;
}

static inline void bins_insert(struct hal_allocator_s *a, pool_t *p, block_t *b)
{
    bins_t *bs = bins_for(p, b);
    unsigned fl, sl;
    bin_of(b->size, &fl, &sl);
    b->bin = (uint16_t)(fl * SL_COUNT + sl);
    b->fprev = NULL;
    b->fnext = bs->head[fl][sl];
    if (b->fnext != NULL)
        b->fnext->fprev = b;
    bs->head[fl][sl] = b;
    bs->sl_map[fl] |= 1u << sl;
    bs->fl_map |= UINT64_C(1) << fl;
    b->pool = p;
    p->nfree++;
    a->cached_blocks++;
    a->cached_bytes += b->size;
}

static inline void bins_remove(struct hal_allocator_s *a, block_t *b)
{
    pool_t *p = b->pool;
    bins_t *bs = bins_for(p, b);
    unsigned fl = b->bin / SL_COUNT, sl = b->bin % SL_COUNT;
    if (b->fprev != NULL)
        b->fprev->fnext = b->fnext;
    else
        bs->head[fl][sl] = b->fnext;
    if (b->fnext != NULL)
        b->fnext->fprev = b->fprev;
    if (bs->head[fl][sl] == NULL) {
        bs->sl_map[fl] &= ~(1u << sl);
        if (bs->sl_map[fl] == 0)
            bs->fl_map &= ~(UINT64_C(1) << fl);
    }
    p->nfree--;
    a->cached_blocks--;
    a->cached_bytes -= b->size;
}

/* Whether a cached block may serve a request. Blocks above max_split_size (mss; 0 for the small
 * pool) are never split, so they only take requests that waste little of them: PyTorch's 20 MiB
 * slack for requests of at least mss, and for smaller ones less than a fresh segment's
 * rounding (round) would. */
static inline bool fits(const block_t *b, size_t size, size_t mss, size_t round)
{
    if (b->size < size)
        return false;
    if (mss == 0 || b->size <= mss)
        return true;
    return b->size - size < (size >= mss ? OVERSIZE_SLACK : round);
}

/* Good fit: a few blocks of the request's own bin, else the head of the next non-empty bin
 * (all of whose blocks are large enough). */
static inline block_t *bins_find(bins_t *bs, size_t size, size_t mss, size_t round)
{
    unsigned fl, sl;
    bin_of(size, &fl, &sl);
    if (bs->sl_map[fl] & (1u << sl)) {
        unsigned n = 0;
        for (block_t *b = bs->head[fl][sl]; b != NULL && n < 8; b = b->fnext, n++) {
            if (fits(b, size, mss, round))
                return b;
        }
    }
    uint32_t slm = bs->sl_map[fl] & ((~0u << sl) << 1);
    if (slm == 0) {
        uint64_t flm = bs->fl_map & (~UINT64_C(0) << (fl + 1));
        if (flm == 0)
            return NULL;
        fl = (unsigned)__builtin_ctzll(flm);
        slm = bs->sl_map[fl];
    }
    sl = (unsigned)__builtin_ctz(slm);
    block_t *b = bs->head[fl][sl];
    return fits(b, size, mss, round) ? b : NULL;
}

/* ---- live table ------------------------------------------------------------------------------ */

static inline size_t live_hash(const struct hal_allocator_s *a, uintptr_t key)
{
    return (size_t)(((uint64_t)(key >> 9) * UINT64_C(0x9E3779B97F4A7C15)) >> a->live_shift);
}

static inline void live_put(struct hal_allocator_s *a, block_t *b)
{
    uintptr_t key = (uintptr_t)b->ptr;
    size_t i = live_hash(a, key);
    while (a->live[i].key != 0)
        i = (i + 1) & a->live_mask;
    a->live[i].key = key;
    a->live[i].block = b;
    a->live_count++;
}

/* Makes room for one more entry; false when the host is out of memory. */
static inline bool live_reserve(struct hal_allocator_s *a)
{
    if (HAL_LIKELY((a->live_count + 1) * 2 <= a->live_mask + 1))
        return true;
    live_slot_t *old = a->live;
    size_t old_cap = a->live_mask + 1;
    unsigned log2cap = 64 - a->live_shift + 1;
    if (!ca_live_init(a, log2cap)) {
        a->live = old;
        return false;
    }
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i].key != 0)
            live_put(a, old[i].block);
    }
    free(old);
    return true;
}

static inline size_t live_find(const struct hal_allocator_s *a, uintptr_t key)
{
    size_t i = live_hash(a, key);
    for (;;) {
        if (a->live[i].key == key)
            return i;
        if (a->live[i].key == 0)
            return SIZE_MAX;
        i = (i + 1) & a->live_mask;
    }
}

/* Removes slot i, shifting later members of its probe run back (no tombstones). */
static inline void live_remove_at(struct hal_allocator_s *a, size_t i)
{
    size_t j = i;
    for (;;) {
        j = (j + 1) & a->live_mask;
        if (a->live[j].key == 0)
            break;
        size_t k = live_hash(a, a->live[j].key);
        if (((j - k) & a->live_mask) >= ((j - i) & a->live_mask)) {
            a->live[i] = a->live[j];
            i = j;
        }
    }
    a->live[i].key = 0;
    a->live[i].block = NULL;
    a->live_count--;
}

/* ---- pools ----------------------------------------------------------------------------------- */

/* The pool of a stream, created on first use; NULL when the host is out of memory. */
static inline pool_t *pool_for(struct hal_allocator_s *a, hal_stream_t stream)
{
    if (HAL_LIKELY(a->last_stream == stream))
        return a->last_pool;
    pool_t *p = NULL;
    for (size_t i = 0; i < a->npools; i++) {
        if (a->pools[i]->stream == stream && !a->pools[i]->retired) {
            p = a->pools[i];
            break;
        }
    }
    if (p == NULL) {
        if (a->npools == a->cap_pools) {
            size_t cap = a->cap_pools ? a->cap_pools * 2 : 8;
            pool_t **np = realloc(a->pools, cap * sizeof(*np));
            if (np == NULL)
                return NULL;
            a->pools = np;
            a->cap_pools = cap;
        }
        p = ca_pool_new(stream);
        if (p == NULL)
            return NULL;
        a->pools[a->npools++] = p;
    }
    a->last_stream = stream;
    a->last_pool = p;
    return p;
}

/* Moves p's parked block into its bins. */
static inline void unpark(struct hal_allocator_s *a, pool_t *p)
{
    block_t *b = p->parked;
    if (b == NULL)
        return;
    p->parked = NULL;
    a->cached_blocks--;
    a->cached_bytes -= b->size;
    ca_pool_put(a, p, b, b->free_seq);
}

/* Frees a block into p: it becomes p's parked block, and the previous one goes to the bins. */
static inline void park(struct hal_allocator_s *a, pool_t *p, block_t *b)
{
    if (HAL_UNLIKELY(p->retired)) { /* its stream is gone: nothing can still use the block */
        p->users--;
        ca_pool_put(a, a->neutral, b, 0);
        return;
    }
    if (p->parked != NULL)
        unpark(a, p);
    b->state = BLOCK_PARKED;
    b->free_seq = ++p->seq;
    p->parked = b;
    p->users--;
    a->cached_blocks++;
    a->cached_bytes += b->size;
}

/* Whether ca_take() would hand out the parked block b whole for a request of `size` bytes. */
static inline bool parked_fits(const struct hal_allocator_s *a, const block_t *b, size_t size)
{
    if (b->small != (size <= SMALL_SIZE))
        return false;
    if (b->size == size)
        return true;
    if (b->small || !fits(b, size, a->max_split_size, a->large_round))
        return false;
    size_t mss = a->max_split_size;
    return b->size - size <= SMALL_SIZE || (mss != 0 && b->size > mss);
}

/* Splits the first `size` bytes off block b (which is in no bin) if the rules allow, caching
 * the remainder in pool p. Without a spare block struct, b is handed out whole. */
static inline void carve(struct hal_allocator_s *a, pool_t *p, block_t *b, size_t size)
{
    size_t rest = b->size - size;
    size_t mss = a->max_split_size;
    bool split = b->small ? rest >= MIN_BLOCK : (rest > SMALL_SIZE && (mss == 0 || b->size <= mss));
    if (!split)
        return;
    block_t *r = block_get(a);
    if (HAL_UNLIKELY(r == NULL))
        return;
    r->ptr = b->ptr + size;
    r->size = rest;
    r->seg = b->seg;
    r->small = b->small;
    r->prev = b;
    r->next = b->next;
    if (r->next != NULL)
        r->next->prev = r;
    b->next = r;
    b->size = size;
    r->state = BLOCK_FREE;
    r->free_seq = b->free_seq; /* its memory was last used when b was freed */
    bins_insert(a, p, r);
}

#endif /* HAL_SERVICES_CACHING_ALLOCATOR_BINS_H */
