/* SPDX-License-Identifier: Apache-2.0 */
/* The caching allocator's front caches beyond the inline fast paths (caching_allocator_front.h):
 * creating and binding them, draining them, what the locked paths ask of them, statistics, and
 * their end (thread exit, allocator destroy, fork).
 *
 * Design
 * ------
 * A thread that allocates through the lock gets a front cache for the allocator and stream (at
 * most FRONTS_PER_THREAD per allocator; then one is rebound). When it frees a block of that
 * stream's pool through the lock, the block goes to a slot of its front cache (chosen by the
 * rounded size it was requested with; state BLOCK_FRONT) instead of the pool, if that slot is
 * free. From then on a request of that rounded size on that stream takes the block without the
 * lock (front_alloc) and freeing it puts it back (front_free): the block served that request
 * before, so it fits it by the pools' rules too (a large block may be larger than the request,
 * never split). A block reused on the stream it was freed on needs no event, as in the pools.
 * Front blocks count as users of their pool, so the pool outlives them; a cache whose stream
 * is destroyed is drained and unbound, and hits no more.
 *
 * What front caches hold stays cached memory of the allocator: every allocation that misses
 * the pools drains them before it looks further (ca_alloc_slow), so they never make the
 * allocator obtain a segment; and they hold 32 blocks per thread and stream at most.
 *
 * The locked paths find front blocks by scanning the caches: a free or record_stream of a block
 * handed out from another thread's cache takes it out of the slot into the allocator's books
 * (ca_front_find); a drain parks cached blocks in their pools (empty_cache, out of memory,
 * reset_peak_stats, a new peak, a destroyed stream, destroy, thread exit).
 *
 * Statistics: the allocator counts what is outside front caches; get_stats adds what the slots
 * hold (handed out or cached) and the hits and frees each cache counted (one writer, no
 * read-modify-write). The peak needs the allocated total at every allocation, which a front hit
 * cannot know. So the allocator keeps the invariant peak >= allocated + front_bytes (the bytes
 * in front caches, which change only under the lock): a front hit, which moves bytes from cached
 * to allocated within front_bytes, then never exceeds the peak. When an allocation through the
 * lock raises allocated + front_bytes above the peak, all front caches are drained first, so that
 * the sum is the allocated total when it becomes the new peak.
 *
 * Lifetime: a thread's front caches are in its own list and in their allocator's list. A
 * pthread key's destructor folds them into their allocators when the thread exits (blocks
 * handed out and not yet freed go to the allocator's live table). hal_allocator_destroy
 * detaches the allocator's caches (allocator = DETACHED); their thread frees them later. A mutex
 * (registry_lock) orders the two, so that an exiting thread never touches a destroyed
 * allocator. In a forked child the parent's front caches are forgotten (only the forking thread
 * exists and its caches belong to the parent's allocators, which cannot work there). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hal/hal.h"
#include "hal/services/caching_allocator_bins.h"
#include "hal/services/caching_allocator_front.h"
#include "hal/services/caching_allocator_internal.h"
#include "hal/src/service.h"

__attribute__((tls_model("local-dynamic"))) _Thread_local front_t *ca_front_current;
static _Thread_local front_t *thread_fronts;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;
static bool exit_key_ok;
static atomic_uint generation;

/* The allocator of a detached front cache: no allocator handle (not even NULL) matches it. */
static char detached_marker;
#define DETACHED ((struct hal_allocator_s *)(void *)&detached_marker)

static void thread_exit(void *unused);

static void after_fork_in_child(void)
{
    pthread_mutex_init(&registry_lock, NULL);
    atomic_fetch_add(&generation, 1);
    thread_fronts = NULL;
    ca_front_current = NULL;
    if (exit_key_ok)
        (void)pthread_setspecific(exit_key, NULL);
}

static void init(void)
{
    exit_key_ok = pthread_key_create(&exit_key, thread_exit) == 0;
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

unsigned ca_front_generation(void)
{
    pthread_once(&init_once, init);
    return atomic_load(&generation);
}

static inline block_t *slot_block(uintptr_t word)
{
    return (block_t *)(word & ~FRONT_LIVE);
}

/* ---- draining and taking out ----------------------------------------------------------------- */

/* Parks every block cached in f in its pool. */
static void drain(struct hal_allocator_s *a, front_t *f)
{
    for (unsigned i = 0; i < FRONT_SLOTS; i++) {
        uintptr_t w = atomic_load_explicit(&f->slot[i], memory_order_relaxed);
        if (w == 0 || (w & FRONT_LIVE) ||
            !atomic_compare_exchange_strong_explicit(&f->slot[i], &w, 0, memory_order_acquire,
                                                     memory_order_relaxed))
            continue; /* empty, handed out, or handed out just now */
        block_t *b = slot_block(w);
        a->front_bytes -= b->size;
        park(a, b->pool, b);
    }
}

/* The block handed out from slot i of f (slot word w), with its requested size filled in (only
 * the locked paths read a front block's). */
static block_t *live_block(front_t *f, unsigned i, uintptr_t w)
{
    block_t *b = slot_block(w);
    b->requested = atomic_load_explicit(&f->requested[i], memory_order_relaxed);
    return b;
}

/* Moves a block handed out from slot i of f (slot word w) into the allocator's books: counted
 * live and allocated through the lock, in no table. False when the owner took it back
 * meanwhile. */
static bool take_out(struct hal_allocator_s *a, front_t *f, unsigned i, uintptr_t w)
{
    if (!atomic_compare_exchange_strong_explicit(&f->slot[i], &w, 0, memory_order_acquire,
                                                 memory_order_relaxed))
        return false;
    block_t *b = live_block(f, i, w);
    b->state = BLOCK_ALLOCATED;
    a->front_bytes -= b->size;
    a->allocated += b->size;
    a->requested += b->requested;
    a->active_blocks++;
    a->alloc_count++; /* its hit, no longer seen in the slot */
    a->cache_hits++;
    return true;
}

/* Moves every block f handed out to the allocator's live table. False when the table cannot
 * grow (out of host memory): what is left stays in f, where the locked paths still find it. */
static bool take_out_all(struct hal_allocator_s *a, front_t *f)
{
    for (unsigned i = 0; i < FRONT_SLOTS; i++) {
        uintptr_t w = atomic_load_explicit(&f->slot[i], memory_order_acquire);
        if (!(w & FRONT_LIVE))
            continue;
        if (!live_reserve(a))
            return false;
        if (take_out(a, f, i, w))
            live_put(a, slot_block(w));
    }
    return true;
}

void ca_front_drain_all(struct hal_allocator_s *a)
{
    for (front_t *f = a->fronts; f != NULL; f = f->next)
        drain(a, f);
}

void ca_front_raise_peak(struct hal_allocator_s *a)
{
    ca_front_drain_all(a);
    uint64_t total = a->allocated + a->front_bytes; /* only handed-out blocks are left */
    if (total > a->peak_allocated)
        a->peak_allocated = total;
}

void ca_front_retire_stream(struct hal_allocator_s *a, hal_stream_t stream)
{
    for (front_t *f = a->fronts; f != NULL; f = f->next) {
        if (atomic_load_explicit(&f->stream, memory_order_relaxed) != stream)
            continue;
        drain(a, f);
        atomic_store_explicit(&f->stream, NULL, memory_order_relaxed);
        f->pool = NULL;
    }
}

block_t *ca_front_find(struct hal_allocator_s *a, const void *ptr, bool claim)
{
    for (front_t *f = a->fronts; f != NULL; f = f->next) {
        for (unsigned i = 0; i < FRONT_SLOTS; i++) {
            uintptr_t w = atomic_load_explicit(&f->slot[i], memory_order_acquire);
            if (!(w & FRONT_LIVE) || slot_block(w)->ptr != ptr)
                continue;
            /* Losing the race to the owner means the block was freed twice at once. */
            if (claim && !take_out(a, f, i, w))
                return NULL;
            return live_block(f, i, w);
        }
    }
    return NULL;
}

bool ca_front_block_live(const struct hal_allocator_s *a, block_t *b)
{
    for (front_t *f = a->fronts; f != NULL; f = f->next) {
        for (unsigned i = 0; i < FRONT_SLOTS; i++) {
            uintptr_t w = atomic_load_explicit(&f->slot[i], memory_order_acquire);
            if (w == ((uintptr_t)b | FRONT_LIVE)) {
                live_block(f, i, w);
                return true;
            }
        }
    }
    return false;
}

/* ---- the owner, under the lock --------------------------------------------------------------- */

static void unlink_front(struct hal_allocator_s *a, front_t *f)
{
    if (f->prev != NULL)
        f->prev->next = f->next;
    else
        a->fronts = f->next;
    if (f->next != NULL)
        f->next->prev = f->prev;
    f->prev = f->next = NULL;
}

/* Binds f to stream (pool p). */
static void bind(front_t *f, hal_stream_t stream, pool_t *p)
{
    f->pool = p;
    atomic_store_explicit(&f->stream, stream, memory_order_relaxed);
}

/* A new front cache for stream, in the allocator's and the thread's lists; NULL when out of host
 * memory or when thread exit could not clean it up. */
static front_t *front_new(struct hal_allocator_s *a, hal_stream_t stream, pool_t *p)
{
    if (!exit_key_ok)
        return NULL;
    front_t *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return NULL;
    if (pthread_setspecific(exit_key, f) != 0) { /* any non-NULL value runs thread_exit */
        free(f);
        return NULL;
    }
    atomic_init(&f->allocator, a);
    bind(f, stream, p);
    f->next = a->fronts;
    if (f->next != NULL)
        f->next->prev = f;
    a->fronts = f;
    f->thread_next = thread_fronts;
    thread_fronts = f;
    return f;
}

/* Rebinds the thread's front cache f to stream, emptying it first; false when a block it
 * handed out could not move to the live table. */
static bool rebind(struct hal_allocator_s *a, front_t *f, hal_stream_t stream, pool_t *p)
{
    drain(a, f);
    if (!take_out_all(a, f))
        return false;
    memset(f->view, 0, sizeof(f->view));
    f->live_mask = 0;
    bind(f, stream, p);
    return true;
}

front_t *ca_front_prepare(struct hal_allocator_s *a, hal_stream_t stream, pool_t *p)
{
    front_t *f = ca_front_current;
    if (f != NULL && atomic_load_explicit(&f->allocator, memory_order_relaxed) == a &&
        atomic_load_explicit(&f->stream, memory_order_relaxed) == stream)
        return f;
    front_t *spare = NULL;
    unsigned mine = 0;
    f = NULL;
    ca_front_current = NULL; /* the loop may free it */
    for (front_t **link = &thread_fronts; *link != NULL;) {
        front_t *g = *link;
        struct hal_allocator_s *owner = atomic_load_explicit(&g->allocator, memory_order_acquire);
        if (owner == DETACHED) { /* its allocator was destroyed */
            *link = g->thread_next;
            free(g);
            continue;
        }
        link = &g->thread_next;
        if (owner != a)
            continue;
        mine++;
        hal_stream_t bound = atomic_load_explicit(&g->stream, memory_order_relaxed);
        if (bound == stream)
            f = g;
        else if (bound == NULL || spare == NULL)
            spare = g; /* an unbound one, else the oldest bound one */
    }
    if (f == NULL && spare != NULL &&
        (mine >= FRONTS_PER_THREAD ||
         atomic_load_explicit(&spare->stream, memory_order_relaxed) == NULL)) {
        if (!rebind(a, spare, stream, p))
            return NULL;
        f = spare;
    }
    if (f == NULL)
        f = front_new(a, stream, p);
    ca_front_current = f;
    return f;
}

bool ca_front_enter(struct hal_allocator_s *a, block_t *b)
{
    front_t *f = ca_front_current;
    if (f == NULL || atomic_load_explicit(&f->allocator, memory_order_relaxed) != a ||
        f->pool != b->pool) {
        for (f = thread_fronts; f != NULL; f = f->thread_next) {
            if (atomic_load_explicit(&f->allocator, memory_order_relaxed) == a &&
                f->pool == b->pool)
                break;
        }
        if (f == NULL)
            return false;
    }
    size_t request = (b->requested + MIN_BLOCK - 1) & ~(MIN_BLOCK - 1);
    unsigned i = front_slot_of(request);
    front_view_t *v = &f->view[i];
    if (v->block != NULL && atomic_load_explicit(&f->slot[i], memory_order_relaxed) != 0)
        return false;
    f->live_mask &= ~(1u << i); /* in case another thread emptied it */
    b->state = BLOCK_FRONT;
    a->front_bytes += b->size;
    *v = (front_view_t){ b, b->ptr, request, request };
    atomic_store_explicit(&f->slot[i], (uintptr_t)b, memory_order_release);
    return true;
}

/* ---- statistics ------------------------------------------------------------------------------ */

front_totals_t ca_front_totals(const struct hal_allocator_s *a)
{
    front_totals_t t = { 0 };
    for (front_t *f = a->fronts; f != NULL; f = f->next) {
        uint64_t frees = atomic_load_explicit(&f->frees, memory_order_relaxed);
        t.frees += frees;
        t.hits += frees;
        for (unsigned i = 0; i < FRONT_SLOTS; i++) {
            uintptr_t w = atomic_load_explicit(&f->slot[i], memory_order_acquire);
            if (w == 0)
                continue;
            size_t size = slot_block(w)->size; /* fixed while in the front cache */
            if (w & FRONT_LIVE) {
                t.hits++;
                t.live_blocks++;
                t.allocated += size;
                t.requested += atomic_load_explicit(&f->requested[i], memory_order_relaxed);
            } else {
                t.cached_blocks++;
                t.cached_bytes += size;
                if (size > t.largest_cached)
                    t.largest_cached = size;
            }
        }
    }
    return t;
}

/* ---- the end of a front cache ---------------------------------------------------------------- */

/* Folds the exiting owner's front cache into its allocator: cached blocks to their pools,
 * handed-out ones to the live table, counts to the allocator's. Returns false when some
 * handed-out block could not move (out of host memory): the cache must stay in the allocator's
 * list, where frees still find the block. */
static bool fold(struct hal_allocator_s *a, front_t *f)
{
    drain(a, f);
    bool moved = take_out_all(a, f); /* counts their hits */
    uint64_t frees = atomic_load_explicit(&f->frees, memory_order_relaxed);
    a->alloc_count += frees;
    a->cache_hits += frees;
    a->free_count += frees;
    /* Readers hold the lock too, so nobody counts them twice. */
    atomic_store_explicit(&f->frees, 0, memory_order_relaxed);
    return moved;
}

/* The pthread key's destructor: the thread is exiting. */
static void thread_exit(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&registry_lock);
    front_t *f = thread_fronts;
    thread_fronts = NULL;
    ca_front_current = NULL;
    for (front_t *next; f != NULL; f = next) {
        next = f->thread_next;
        struct hal_allocator_s *a = atomic_load_explicit(&f->allocator, memory_order_relaxed);
        if (a != DETACHED) {
            spin_lock(&a->lock);
            bool orphan = device_live(a) && !fold(a, f);
            if (orphan)
                f->orphan = true; /* freed by ca_front_detach_all */
            else
                unlink_front(a, f);
            spin_unlock(&a->lock);
            if (orphan)
                continue;
        }
        free(f);
    }
    pthread_mutex_unlock(&registry_lock);
}

void ca_front_detach_all(struct hal_allocator_s *a)
{
    if (a->front_generation != ca_front_generation())
        return; /* a forked child: the list belongs to the parent's threads */
    pthread_mutex_lock(&registry_lock);
    spin_lock(&a->lock);
    for (front_t *f = a->fronts, *next; f != NULL; f = next) {
        next = f->next;
        if (f->orphan) { /* its thread is gone */
            free(f);
            continue;
        }
        if (device_live(a))
            drain(a, f);
        f->prev = f->next = NULL;
        f->pool = NULL;
        atomic_store_explicit(&f->stream, NULL, memory_order_relaxed);
        atomic_store_explicit(&f->allocator, DETACHED, memory_order_release);
    }
    a->fronts = NULL;
    spin_unlock(&a->lock);
    pthread_mutex_unlock(&registry_lock);
}
