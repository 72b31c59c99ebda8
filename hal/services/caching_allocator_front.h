/* SPDX-License-Identifier: Apache-2.0 */
/* The caching allocator's front caches: per thread, per allocator and per stream, a few blocks
 * that the thread hands out and takes back without the allocator's lock, the way glibc's tcache
 * serves malloc. This header holds the layout and the two inline fast paths;
 * caching_allocator_front.c the rest (the design is described there).
 *
 * A slot holds one block (state BLOCK_FRONT) from the time it enters the front cache until it
 * is drained: cached, or handed out (FRONT_LIVE set in the slot word). Who touches what: the
 * owner thread alone reads and writes `view` and `live_mask`, without the lock. Other threads
 * reach a front cache only under the allocator's lock, and only through its atomics: they empty
 * a slot (compare-exchange: a cached block to drain it, a handed-out one that they free or
 * record), read the counters, and clear `stream` and `allocator`. Only the owner fills an empty
 * slot or marks a block handed out, so a cache hit costs one compare-exchange and a return to
 * the cache a plain store. */
#ifndef HAL_SERVICES_CACHING_ALLOCATOR_FRONT_H
#define HAL_SERVICES_CACHING_ALLOCATOR_FRONT_H

#include <stdatomic.h>

#include "hal/services/caching_allocator_internal.h"

#define FRONT_SLOTS_LOG2  5
#define FRONT_SLOTS       (1u << FRONT_SLOTS_LOG2) /* direct-mapped by request size */
#define FRONT_LIVE        ((uintptr_t)1)           /* slot word: the block is handed out */
#define FRONTS_PER_THREAD 4 /* streams of one allocator a thread caches for at once */

/* What the owner believes a slot holds. A slot it believes empty is empty; one it believes full
 * may have been emptied by another thread since. */
typedef struct front_view {
    block_t *block;  /* or NULL */
    const char *ptr; /* its address */
    size_t request;  /* the rounded request it serves (its size, or less for a large block) */
    size_t cached;   /* request while cached (a hit may take it), 0 while handed out */
} front_view_t;

typedef struct front {
    /* The allocator and stream served; changed under the allocator's lock (allocator also under
     * the registry lock, caching_allocator_front.c) when it is destroyed (to a marker no handle
     * matches) or the stream is (to NULL). */
    _Atomic(struct hal_allocator_s *) allocator;
    _Atomic(hal_stream_t) stream;
    uint32_t live_mask; /* owner: slots whose block it handed out */
    /* Blocks taken back without the lock (one writer: the owner). Those handed out without it
     * are as many plus the ones handed out now; a block taken out of a slot by another thread
     * (ca_front_find) counts as handed out through the lock. */
    _Atomic uint64_t frees;
    front_view_t view[FRONT_SLOTS];        /* owner */
    _Atomic uintptr_t slot[FRONT_SLOTS];   /* block_t * | FRONT_LIVE, or 0 */
    _Atomic size_t requested[FRONT_SLOTS]; /* of a handed-out block (its block_t's is not kept) */

    pool_t *pool;              /* under the lock: the stream's pool, NULL once unbound */
    bool orphan;               /* under the lock: its thread exited, leaving a block handed out */
    struct front *prev, *next; /* under the lock: the allocator's list */
    struct front *thread_next; /* owner: the thread's list */
} front_t;

/* The calling thread's front cache used last, or NULL. Hidden and local-dynamic (the definition
 * repeats the model): otherwise libhal.so would list it in its dynamic symbol table and reach it
 * through it. */
extern __attribute__((visibility("hidden"),
                      tls_model("local-dynamic"))) _Thread_local front_t *ca_front_current;

static inline unsigned front_slot_of(size_t rounded_size)
{
    return (unsigned)(((uint64_t)(rounded_size >> 9) * UINT64_C(0x9E3779B97F4A7C15)) >>
                      (64 - FRONT_SLOTS_LOG2));
}

/* A single writer's increment: no read-modify-write instruction needed. */
static inline void front_count(_Atomic uint64_t *counter)
{
    atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* Whether f is a front cache of allocator a, whose device is open. Checks the handle a as well:
 * a destroyed allocator's front caches are detached. */
static inline bool front_of(const front_t *f, struct hal_allocator_s *a)
{
    return f != NULL &&
           atomic_load_explicit(&((front_t *)f)->allocator, memory_order_relaxed) == a &&
           device_live(a);
}

/* Hands out the block the calling thread's front cache f holds for `size` bytes on `stream`
 * (NULL: the default stream), if it caches one that served a request of the same rounded size.
 * Returns false when it does not, or when any argument would need a closer look: the caller
 * takes the slow path, which checks them all. */
static inline bool front_alloc(struct hal_allocator_s *a, front_t *f, size_t size,
                               hal_stream_t stream, void **ptr)
{
    if (!front_of(f, a) || ptr == NULL)
        return false;
    if (stream == NULL)
        stream = a->default_stream;
    /* A bound stream was checked when it was bound, and is unbound before it is destroyed. */
    if (atomic_load_explicit(&f->stream, memory_order_relaxed) != stream || size - 1 >= MAX_REQUEST)
        return false;
    size_t rsize = (size + MIN_BLOCK - 1) & ~(MIN_BLOCK - 1);
    unsigned i = front_slot_of(rsize);
    front_view_t *v = &f->view[i];
    if (v->cached != rsize)
        return false;
    uintptr_t cached = (uintptr_t)v->block;
    v->cached = 0;
    if (HAL_UNLIKELY(
            !atomic_compare_exchange_strong_explicit(&f->slot[i], &cached, cached | FRONT_LIVE,
                                                     memory_order_acquire, memory_order_relaxed))) {
        v->block = NULL; /* another thread drained it */
        return false;
    }
    f->live_mask |= 1u << i;
    atomic_store_explicit(&f->requested[i], size, memory_order_relaxed);
    *ptr = (void *)v->ptr;
    return true;
}

/* Takes back a block the calling thread's front cache f handed out. Returns false when ptr is
 * not one (or f is not a front cache of a): the caller takes the slow path. */
static inline bool front_free(struct hal_allocator_s *a, front_t *f, const void *ptr)
{
    if (!front_of(f, a))
        return false;
    unsigned i;
    for (uint32_t m = f->live_mask;; m &= m - 1) {
        if (m == 0)
            return false;
        i = (unsigned)__builtin_ctz(m);
        if (f->view[i].ptr == ptr)
            break;
    }
    front_view_t *v = &f->view[i];
    uintptr_t cached = (uintptr_t)v->block;
    f->live_mask &= ~(1u << i);
    if (HAL_UNLIKELY(atomic_load_explicit(&f->slot[i], memory_order_relaxed) !=
                     (cached | FRONT_LIVE))) {
        v->block = NULL; /* another thread took it out (record_stream) */
        return false;
    }
    front_count(&f->frees);
    v->cached = v->request;
    atomic_store_explicit(&f->slot[i], cached, memory_order_release);
    return true;
}

#endif /* HAL_SERVICES_CACHING_ALLOCATOR_FRONT_H */
