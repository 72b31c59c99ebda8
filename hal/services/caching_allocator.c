/* SPDX-License-Identifier: Apache-2.0 */
/* The vendor-neutral caching allocator (hal/hal_allocator.h).
 *
 * Design
 * ------
 * Segments come from hal_mem_alloc: requests up to 1 MiB (after rounding to 512 B) are carved
 * from small segments (config small_segment), larger ones from segments rounded up to
 * large_round. A segment is a doubly linked list of blocks in address order; a block is split
 * on allocation (the remainder must be >= 512 B in small segments, > 1 MiB in large ones, and
 * blocks above max_split_size are never split) and merged with its free neighbours on free.
 *
 * Free blocks live in pools. There is one pool per stream (the stream given at allocation,
 * NULL meaning the device's default stream) plus a neutral pool of blocks that no stream has
 * pending work on (the unused remainder of new segments, and blocks proven idle by an event).
 * A block freed on stream A goes to A's pool and may be reused by A at once, since A's queue
 * orders the old and the new work. Another stream B looks in its own pool, then the neutral
 * one; on a miss it records a fence event on every other pool's stream that has free blocks
 * (at most one outstanding per pool) and, once hal_event_query reports a fence complete,
 * moves the blocks freed before it (sequence number <= the fence's) to the neutral pool. Out
 * of memory synchronizes everything, releases wholly free segments and retries once.
 * record_stream() adds streams to a live block; its free then records an event on each, and
 * the block stays held back until all of them complete (PyTorch's recordStream semantics).
 * Fences and waits are made on other threads' streams, so the allocator must learn, under its
 * lock, that a stream is going away: hal_stream_destroy calls stream_retired (a device stream
 * listener) once the stream finished its work; its pool is retired, what it cached becomes
 * neutral, and neither the pool nor any block's uses refer to the stream afterwards.
 * Events come from a per-allocator pool and are reused.
 *
 * Each pool keeps two TLSF-style bin sets (small and large segments): 52 first-level classes
 * by power of two, 16 linear second-level classes each, with bitmaps, so a good fit is found
 * in O(1). The block a stream freed last stays parked beside the bins, unmerged, until the
 * next free on that stream (or any slow path, get_stats, empty_cache) puts it in the bins: a
 * steady alloc/free of one size then neither splits nor merges. Live blocks are found by
 * address in an open-addressing hash table (linear probing, backward-shift deletion). Block
 * structs come from a freelist refilled in slabs. One spinlock guards the allocator: a cache
 * hit makes no HAL call and no malloc. Slow paths call the HAL under the lock, as PyTorch's
 * allocator does; waiters back off to sched_yield. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hal/hal.h"
#include "hal/src/core.h"

#define MIN_BLOCK       ((size_t)512)
#define SMALL_SIZE      ((size_t)1 << 20) /* largest request served from small segments */
#define DEFAULT_SEGMENT ((size_t)2 << 20)
#define OVERSIZE_SLACK  ((size_t)20 << 20) /* PyTorch's kLargeBuffer */
#define MAX_REQUEST     (SIZE_MAX / 2)     /* keeps every rounding free of overflow */

#define SL_BITS  4
#define SL_COUNT (1u << SL_BITS)
#define FL_COUNT 52 /* sizes up to 2^63 bytes in 512-byte units */

/* A parked block is a pool's most recently freed one, kept whole and out of the bins so that
 * the next request of its size on the stream takes it back without splitting or merging. */
enum { BLOCK_ALLOCATED = 1, BLOCK_FREE = 2, BLOCK_HELD = 3, BLOCK_PARKED = 4, BLOCK_UNUSED = 5 };

struct pool;
struct segment;

typedef struct block_use {
    hal_stream_t stream; /* a stream passed to record_stream */
    hal_event_t event;   /* recorded on it at free time; NULL once complete */
} block_use_t;

typedef struct block {
    char *ptr;
    size_t size;                 /* rounded size */
    size_t requested;            /* bytes asked for (live blocks) */
    struct block *prev, *next;   /* physical neighbours in the segment */
    struct block *fprev, *fnext; /* bin list, held list or struct freelist */
    struct pool *pool; /* live or held: the allocation stream's pool; free: where it is cached */
    struct segment *seg;
    uint64_t free_seq; /* pool sequence number when it became free */
    uint32_t state;
    uint16_t bin;
    uint8_t small;
    block_use_t *uses; /* recorded streams (live) or their events (held) */
    uint32_t nuses, cap_uses;
} block_t;

typedef struct bins {
    uint64_t fl_map;
    uint32_t sl_map[FL_COUNT];
    block_t *head[FL_COUNT][SL_COUNT];
} bins_t;

typedef struct pool {
    hal_stream_t stream; /* NULL for the neutral pool and retired ones */
    bool retired;        /* its stream was destroyed after finishing its work */
    uint64_t seq;        /* bumped by every block put into the pool */
    uint64_t nfree;      /* free blocks in the bins */
    block_t *parked;     /* or NULL */
    uint64_t users;      /* live and held blocks allocated on the stream */
    hal_event_t fence;   /* outstanding fence, or NULL */
    uint64_t fence_seq;  /* blocks with free_seq <= this were freed before the fence */
    bins_t small, large;
} pool_t;

typedef struct segment {
    char *base;
    size_t size;
    block_t *first;
    bool small;
} segment_t;

typedef struct live_slot {
    uintptr_t key;
    block_t *block;
} live_slot_t;

typedef struct slab {
    struct slab *next;
    block_t blocks[63];
} slab_t;

typedef struct hal_spinlock {
    atomic_int locked;
} hal_spinlock_t;

struct hal_allocator_s {
    hal_object_t obj;
    hal_spinlock_t lock;
    struct hal_device_s *device;
    hal_stream_listener_t listener; /* told when a stream is destroyed (stream_retired) */
    hal_stream_t default_stream;
    hal_mem_kind_t kind;
    size_t max_split_size; /* 0 = no limit */
    size_t small_segment;
    size_t large_round;

    /* everything below is guarded by lock */
    hal_stream_t last_stream; /* one-entry cache of the stream -> pool lookup */
    pool_t *last_pool;
    pool_t *neutral;
    pool_t **pools; /* stream pools */
    size_t npools, cap_pools;

    live_slot_t *live; /* live blocks by address */
    size_t live_mask, live_count;
    unsigned live_shift;

    block_t *spare; /* freelist of block structs */
    slab_t *slabs;

    block_t *held_head; /* freed blocks waiting for record_stream events */

    hal_event_t *events; /* idle events */
    size_t nevents, cap_events;

    segment_t **segs; /* sorted by base */
    size_t nsegs, cap_segs;

    uint64_t allocated, requested, reserved, peak_allocated, peak_reserved;
    uint64_t alloc_count, free_count, segment_allocs, segment_frees, cache_hits, ooms;
    uint64_t active_blocks, cached_blocks, cached_bytes;

    char backend[HAL_BACKEND_NAME_MAX];
};

_Static_assert(sizeof(struct hal_allocator_s) <= HAL_HANDLE_MAX_SIZE, "handle size");

/* ---- lock ------------------------------------------------------------------------------------ */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Slow paths hold the lock across HAL calls that may block, so waiters give up the CPU. */
static void __attribute__((noinline)) spin_lock_slow(hal_spinlock_t *l)
{
    for (unsigned n = 0;; n++) {
        while (atomic_load_explicit(&l->locked, memory_order_relaxed)) {
            if (n < 64) {
                cpu_relax();
            } else if (n < 1024) {
                sched_yield();
            } else {
                struct timespec ts = { 0, 20000 };
                nanosleep(&ts, NULL);
            }
            n++;
        }
        if (!atomic_exchange_explicit(&l->locked, 1, memory_order_acquire))
            return;
    }
}

static inline void spin_lock(hal_spinlock_t *l)
{
    if (HAL_LIKELY(!atomic_exchange_explicit(&l->locked, 1, memory_order_acquire)))
        return;
    spin_lock_slow(l);
}

static inline void spin_unlock(hal_spinlock_t *l)
{
    atomic_store_explicit(&l->locked, 0, memory_order_release);
}

/* ---- block structs --------------------------------------------------------------------------- */

static bool spare_refill(struct hal_allocator_s *a)
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

/* Returns a block struct, or NULL when the host is out of memory. */
static inline block_t *block_get(struct hal_allocator_s *a)
{
    if (HAL_UNLIKELY(a->spare == NULL) && !spare_refill(a))
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

static bool live_init(struct hal_allocator_s *a, unsigned log2cap)
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
static bool live_reserve(struct hal_allocator_s *a)
{
    if (HAL_LIKELY((a->live_count + 1) * 2 <= a->live_mask + 1))
        return true;
    live_slot_t *old = a->live;
    size_t old_cap = a->live_mask + 1;
    unsigned log2cap = 64 - a->live_shift + 1;
    if (!live_init(a, log2cap)) {
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

/* ---- segments -------------------------------------------------------------------------------- */

/* Index of the segment containing ptr, or SIZE_MAX. */
static size_t seg_find(const struct hal_allocator_s *a, const void *ptr)
{
    const char *p = ptr;
    size_t lo = 0, hi = a->nsegs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a->segs[mid]->base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return SIZE_MAX;
    const segment_t *s = a->segs[lo - 1];
    return (p < s->base + s->size) ? lo - 1 : SIZE_MAX;
}

static void seg_insert(struct hal_allocator_s *a, segment_t *s)
{
    size_t i = a->nsegs;
    while (i > 0 && a->segs[i - 1]->base > s->base) {
        a->segs[i] = a->segs[i - 1];
        i--;
    }
    a->segs[i] = s;
    a->nsegs++;
}

static void seg_remove_at(struct hal_allocator_s *a, size_t i)
{
    memmove(&a->segs[i], &a->segs[i + 1], (a->nsegs - i - 1) * sizeof(a->segs[0]));
    a->nsegs--;
}

/* Finds the live block whose requested range contains ptr. */
static block_t *find_containing(const struct hal_allocator_s *a, const void *ptr)
{
    size_t i = seg_find(a, ptr);
    if (i == SIZE_MAX)
        return NULL;
    const char *p = ptr;
    for (block_t *b = a->segs[i]->first; b != NULL; b = b->next) {
        if (p >= b->ptr && p < b->ptr + b->size)
            return (b->state == BLOCK_ALLOCATED && p < b->ptr + b->requested) ? b : NULL;
    }
    return NULL;
}

/* ---- pools ----------------------------------------------------------------------------------- */

static pool_t *pool_new(hal_stream_t stream)
{
    pool_t *p = calloc(1, sizeof(*p));
    if (p != NULL)
        p->stream = stream;
    return p;
}

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
        p = pool_new(stream);
        if (p == NULL)
            return NULL;
        a->pools[a->npools++] = p;
    }
    a->last_stream = stream;
    a->last_pool = p;
    return p;
}

/* Caches a block that no longer holds live data in pool p's bins, merging it with free
 * neighbours cached in p or in the neutral pool. seq: when its memory was last used on p's
 * stream; a merged block keeps the latest of its parts. */
static void pool_put(struct hal_allocator_s *a, pool_t *p, block_t *b, uint64_t seq)
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

/* Moves p's parked block into its bins. */
static inline void unpark(struct hal_allocator_s *a, pool_t *p)
{
    block_t *b = p->parked;
    if (b == NULL)
        return;
    p->parked = NULL;
    a->cached_blocks--;
    a->cached_bytes -= b->size;
    pool_put(a, p, b, b->free_seq);
}

/* Frees a block into p: it becomes p's parked block, and the previous one goes to the bins. */
static inline void park(struct hal_allocator_s *a, pool_t *p, block_t *b)
{
    if (HAL_UNLIKELY(p->retired)) { /* its stream is gone: nothing can still use the block */
        p->users--;
        pool_put(a, a->neutral, b, 0);
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

static void unpark_all(struct hal_allocator_s *a)
{
    for (size_t i = 0; i < a->npools; i++)
        unpark(a, a->pools[i]);
}

/* Whether take() would hand out the parked block b whole for a request of `size` bytes. */
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

/* Takes a block for `size` bytes from pool p, else from the neutral pool; splits off and
 * re-caches the remainder where the block was found. */
static inline block_t *take(struct hal_allocator_s *a, pool_t *p, size_t size)
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
                    next = b->fnext; /* pool_put below only touches neutral blocks */
                    if (b->free_seq <= upto) {
                        bins_remove(a, b);
                        pool_put(a, a->neutral, b, 0);
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
static hal_status_t fences_poll(struct hal_allocator_s *a, pool_t *self, bool blocking)
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
static hal_status_t held_poll(struct hal_allocator_s *a, bool blocking)
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
        pool_put(a, b->pool, b, ++b->pool->seq);
    }
    return err;
}

/* Frees a block used on other streams: records an event on each and holds the block back
 * until they complete. */
static void hold(struct hal_allocator_s *a, block_t *b)
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
static hal_status_t sync_all(struct hal_allocator_s *a)
{
    hal_status_t err = held_poll(a, true);
    hal_status_t st = fences_poll(a, NULL, true);
    return err != HAL_OK ? err : st;
}

/* Returns every wholly free segment to the device. */
static hal_status_t release_free_segments(struct hal_allocator_s *a)
{
    hal_status_t err = HAL_OK;
    for (size_t i = a->nsegs; i-- > 0;) {
        segment_t *s = a->segs[i];
        block_t *b = s->first;
        if (b->state != BLOCK_FREE || b->size != s->size)
            continue;
        bins_remove(a, b);
        /* hal_mem_free waits for the device's work; the memory is freed even if it reports a
         * stream's latched error. */
        hal_status_t st = hal_mem_free(s->base);
        if (st != HAL_OK && err == HAL_OK)
            err = st;
        block_put(a, b);
        seg_remove_at(a, i);
        a->reserved -= s->size;
        a->segment_frees++;
        free(s);
    }
    return err;
}

/* Drops the pools of destroyed streams that hold nothing any more. */
static void pools_prune(struct hal_allocator_s *a)
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

/* A stream of this device is being destroyed and has finished its work (the core calls this,
 * from hal_stream_destroy, before the backend stream goes): what was freed on it is idle, its
 * pool is retired and the handle is never used again. Blocks still live keep their uses of
 * other streams; a use of this one needs no wait any more. */
static void stream_retired(hal_stream_listener_t *listener, struct hal_stream_s *stream)
{
    struct hal_allocator_s *a = HAL_CONTAINER_OF(listener, struct hal_allocator_s, listener);
    spin_lock(&a->lock);
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

/* ---- errors ---------------------------------------------------------------------------------- */

static hal_status_t device_closed(const struct hal_allocator_s *a, const char *call)
{
    return hal_error(HAL_ERROR_INVALID_HANDLE, a->backend, call,
                     "the allocator's device was closed (its backend was closed)");
}

static inline bool device_live(const struct hal_allocator_s *a)
{
    return a->device->obj.magic == HAL_MAGIC_DEVICE;
}

/* Resolves a stream argument (NULL = the default stream) or reports why it is unusable. */
static inline hal_status_t resolve_stream(const struct hal_allocator_s *a, hal_stream_t *stream,
                                          const char *call)
{
    hal_stream_t s = *stream;
    if (s == NULL) {
        *stream = a->default_stream;
        return HAL_OK;
    }
    if (HAL_UNLIKELY(s->obj.magic != HAL_MAGIC_STREAM))
        return hal_bad_handle(s, HAL_MAGIC_STREAM, "hal_stream_t", call);
    if (HAL_UNLIKELY(s->device != a->device))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, a->backend, call,
                         "stream %p belongs to another device than the allocator's", (void *)s);
    return HAL_OK;
}

static hal_status_t not_live(const struct hal_allocator_s *a, const void *ptr, const char *call)
{
    const block_t *b = find_containing(a, ptr);
    if (b != NULL)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, a->backend, call,
                         "%p is an interior pointer of the live block %p (pass the block's base)",
                         ptr, (void *)b->ptr);
    return hal_error(HAL_ERROR_INVALID_ARGUMENT, a->backend, call,
                     "%p is not a live block of this allocator (double free or foreign pointer)",
                     ptr);
}

/* Counts and reports a failed allocation. segment: the segment size that could not be
 * obtained (0 when the request itself is beyond any segment); detail: the device's message. */
static hal_status_t out_of_memory(struct hal_allocator_s *a, size_t size, size_t segment,
                                  const char *detail)
{
    a->ooms++;
    bool host = a->kind == HAL_MEM_KIND_HOST_PINNED;
    char seg[64] = "";
    if (segment != 0)
        snprintf(seg, sizeof(seg), " (segment of %zu)", segment);
    return hal_error(host ? HAL_ERROR_OUT_OF_HOST_MEMORY : HAL_ERROR_OUT_OF_DEVICE_MEMORY,
                     a->backend, "hal_allocator_alloc",
                     "out of %s memory: requested %zu bytes%s with %llu bytes allocated and %llu "
                     "reserved by this allocator%s; %s",
                     host ? "pinned host" : "device", size, seg, (unsigned long long)a->allocated,
                     (unsigned long long)a->reserved,
                     segment != 0 ? " after releasing its cache" : "", detail);
}

/* ---- allocation slow path -------------------------------------------------------------------- */

/* Obtains a new segment for a request of `size` rounded bytes and returns its first block
 * (the remainder is cached in the neutral pool). */
static hal_status_t segment_alloc(struct hal_allocator_s *a, size_t size, size_t segsize,
                                  block_t **out, char *detail, size_t detail_len)
{
    segment_t *s = malloc(sizeof(*s));
    block_t *b = block_get(a);
    if (a->nsegs == a->cap_segs && s != NULL && b != NULL) {
        size_t cap = a->cap_segs ? a->cap_segs * 2 : 16;
        segment_t **ns = realloc(a->segs, cap * sizeof(*ns));
        if (ns != NULL) {
            a->segs = ns;
            a->cap_segs = cap;
        }
    }
    if (s == NULL || b == NULL || a->nsegs == a->cap_segs) {
        free(s);
        if (b != NULL)
            block_put(a, b);
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, a->backend, "hal_allocator_alloc",
                         "out of host memory for the allocator's bookkeeping");
    }
    void *p = NULL;
    hal_status_t st = hal_mem_alloc((hal_device_t)a->device, a->kind, segsize, MIN_BLOCK, &p);
    if (st != HAL_OK) {
        snprintf(detail, detail_len, "%s", hal_last_error_message());
        free(s);
        block_put(a, b);
        return st;
    }
    s->base = p;
    s->size = segsize;
    s->small = size <= SMALL_SIZE;
    s->first = b;
    seg_insert(a, s);
    a->reserved += segsize;
    a->segment_allocs++;
    if (a->reserved > a->peak_reserved)
        a->peak_reserved = a->reserved;

    b->ptr = p;
    b->size = segsize;
    b->seg = s;
    b->small = s->small;
    b->prev = b->next = NULL;
    b->free_seq = 0;
    carve(a, a->neutral, b, size); /* the remainder was never used by any stream */
    *out = b;
    return HAL_OK;
}

static hal_status_t alloc_slow(struct hal_allocator_s *a, pool_t *p, size_t req, size_t size,
                               block_t **out)
{
    block_t *b = NULL;
    if (p->parked != NULL) {
        unpark(a, p);
        b = take(a, p, size);
    }
    if (b == NULL && a->held_head != NULL) {
        (void)held_poll(a, false);
        b = take(a, p, size);
    }
    if (b == NULL) {
        (void)fences_poll(a, p, false);
        b = take(a, p, size);
    }
    if (b != NULL) {
        a->cache_hits++;
        *out = b;
        return HAL_OK;
    }

    size_t segsize = a->small_segment;
    if (size > SMALL_SIZE)
        segsize = (size + a->large_round - 1) / a->large_round * a->large_round;
    char detail[512] = "";
    hal_status_t st = segment_alloc(a, size, segsize, out, detail, sizeof(detail));
    if (st != HAL_ERROR_OUT_OF_DEVICE_MEMORY && st != HAL_ERROR_OUT_OF_HOST_MEMORY) {
        if (st != HAL_OK)
            return hal_error(st, a->backend, "hal_allocator_alloc",
                             "allocating a segment of %zu bytes failed: %s", segsize, detail);
        return HAL_OK;
    }
    if (detail[0] == '\0')
        return st; /* the allocator's own bookkeeping ran out of host memory */

    /* Out of memory: wait for pending frees (which may free a fitting block), else give the
     * cache back and retry once. */
    (void)sync_all(a);
    b = take(a, p, size);
    if (b != NULL) {
        a->cache_hits++;
        *out = b;
        return HAL_OK;
    }
    (void)release_free_segments(a);
    pools_prune(a);
    detail[0] = '\0';
    st = segment_alloc(a, size, segsize, out, detail, sizeof(detail));
    if (st == HAL_OK)
        return HAL_OK;
    if (st == HAL_ERROR_OUT_OF_DEVICE_MEMORY || st == HAL_ERROR_OUT_OF_HOST_MEMORY) {
        if (detail[0] == '\0')
            return st;
        return out_of_memory(a, req, segsize, detail);
    }
    return hal_error(st, a->backend, "hal_allocator_alloc",
                     "allocating a segment of %zu bytes failed: %s", segsize, detail);
}

/* ---- public API ------------------------------------------------------------------------------ */

/* Creates an allocator for one device and memory kind (see hal_allocator.h). */
hal_status_t hal_allocator_create(hal_device_t device, const hal_allocator_config_t *config,
                                  hal_allocator_t *out)
{
    static const char call[] = "hal_allocator_create";
    HAL_CHECK_DEVICE(device, call);

    hal_backend_t backend = NULL;
    const char *name = NULL;
    HAL_CHECK(hal_device_get_backend(device, &backend));
    HAL_CHECK(hal_backend_get_info(backend, &name, NULL, NULL));

    if (out == NULL)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, name, call, "out is NULL");
    hal_allocator_config_t cfg = HAL_ALLOCATOR_CONFIG_INIT;
    if (config != NULL) {
        if (config->struct_size < sizeof(hal_allocator_config_t))
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, name, call,
                             "config->struct_size is %zu, expected at least %zu",
                             config->struct_size, sizeof(hal_allocator_config_t));
        cfg = *config;
    }
    if (cfg.kind != HAL_MEM_KIND_DEVICE && cfg.kind != HAL_MEM_KIND_HOST_PINNED &&
        cfg.kind != HAL_MEM_KIND_SHARED)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, name, call, "unknown memory kind %d",
                         (int)cfg.kind);
    if (cfg.small_segment == 0)
        cfg.small_segment = DEFAULT_SEGMENT;
    if (cfg.large_round == 0)
        cfg.large_round = DEFAULT_SEGMENT;
    if (cfg.small_segment < SMALL_SIZE || cfg.small_segment % MIN_BLOCK != 0 ||
        cfg.small_segment > MAX_REQUEST)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, name, call,
                         "small_segment %zu must be a multiple of 512 of at least 1 MiB",
                         cfg.small_segment);
    if (cfg.large_round % MIN_BLOCK != 0 || cfg.large_round > MAX_REQUEST)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, name, call,
                         "large_round %zu must be a multiple of 512", cfg.large_round);

    hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
    HAL_CHECK(hal_device_get_properties(device, &props));
    if (cfg.kind == HAL_MEM_KIND_SHARED && !(props.capabilities & HAL_DEVICE_CAP_SHARED_MEMORY))
        return hal_error(HAL_ERROR_UNSUPPORTED, name, call,
                         "the device has no shared memory (HAL_DEVICE_CAP_SHARED_MEMORY)");
    hal_stream_t default_stream = NULL;
    HAL_CHECK(hal_device_get_default_stream(device, &default_stream));

    struct hal_allocator_s *a = hal_handle_alloc(sizeof(*a));
    if (a == NULL)
        goto out_of_memory;
    a->device = device;
    a->default_stream = default_stream;
    a->kind = cfg.kind;
    a->max_split_size = cfg.max_split_size;
    a->small_segment = cfg.small_segment;
    a->large_round = cfg.large_round;
    snprintf(a->backend, sizeof(a->backend), "%s", name);
    atomic_init(&a->lock.locked, 0);
    a->neutral = pool_new(NULL);
    if (a->neutral == NULL)
        goto out_release_handle;
    if (!live_init(a, 10))
        goto out_free_neutral;
    if (pool_for(a, default_stream) == NULL)
        goto out_free_pools;
    a->listener.retired = stream_retired;
    hal_device_add_stream_listener(a->device, &a->listener);
    a->obj.magic = HAL_MAGIC_ALLOCATOR;
    *out = a;
    return HAL_OK;

out_free_pools:
    free(a->pools);
    free(a->live);
out_free_neutral:
    free(a->neutral);
out_release_handle:
    hal_handle_release(a, false);
out_of_memory:
    return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, name, call, "out of host memory");
}

/* Frees the allocator's host-side structures. */
static void free_bookkeeping(struct hal_allocator_s *a)
{
    for (slab_t *s = a->slabs, *next; s != NULL; s = next) {
        next = s->next;
        for (size_t i = 0; i < sizeof(s->blocks) / sizeof(s->blocks[0]); i++)
            free(s->blocks[i].uses);
        free(s);
    }
    for (size_t i = 0; i < a->nsegs; i++)
        free(a->segs[i]);
    for (size_t i = 0; i < a->npools; i++)
        free(a->pools[i]);
    free(a->pools);
    free(a->neutral);
    free(a->segs);
    free(a->live);
    free(a->events);
}

/* Destroys an allocator (see hal_allocator.h). After its backend was closed, only the host
 * memory is freed: hal_backend_close already reclaimed the segments and events. */
hal_status_t hal_allocator_destroy(hal_allocator_t a)
{
    static const char call[] = "hal_allocator_destroy";
    HAL_CHECK_HANDLE(a, HAL_MAGIC_ALLOCATOR, "hal_allocator_t", call);
    if (!device_live(a)) {
        free_bookkeeping(a);
        hal_handle_release(a, false);
        return HAL_OK;
    }
    spin_lock(&a->lock);
    if (a->active_blocks != 0) {
        uint64_t n = a->active_blocks, bytes = a->allocated;
        spin_unlock(&a->lock);
        return hal_error(HAL_ERROR_BUSY, a->backend, call,
                         "%llu blocks (%llu bytes) are still allocated", (unsigned long long)n,
                         (unsigned long long)bytes);
    }
    spin_unlock(&a->lock);
    /* Outside the lock: removal waits for a retire call in progress, which takes it. */
    hal_device_remove_stream_listener(a->device, &a->listener);
    spin_lock(&a->lock);
    (void)sync_all(a);
    (void)release_free_segments(a);
    /* Nothing is allocated, so every segment should be free by now; free any rest anyway. */
    for (size_t i = 0; i < a->nsegs; i++)
        (void)hal_mem_free(a->segs[i]->base);
    for (size_t i = 0; i < a->nevents; i++)
        (void)hal_event_destroy(a->events[i]);
    a->nevents = 0;
    spin_unlock(&a->lock);
    bool keep_forever = a->device->backend->validate; /* as the core does for its handles */
    free_bookkeeping(a);
    hal_handle_release(a, keep_forever);
    return HAL_OK;
}

/* Allocates a block usable on `stream` (see hal_allocator.h). */
hal_status_t hal_allocator_alloc(hal_allocator_t a, size_t size, hal_stream_t stream, void **ptr)
{
    static const char call[] = "hal_allocator_alloc";
    HAL_CHECK_HANDLE(a, HAL_MAGIC_ALLOCATOR, "hal_allocator_t", call);
    if (HAL_UNLIKELY(!device_live(a)))
        return device_closed(a, call);
    if (HAL_UNLIKELY(ptr == NULL))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, a->backend, call, "ptr is NULL");
    HAL_CHECK(resolve_stream(a, &stream, call));
    if (HAL_UNLIKELY(size == 0)) {
        *ptr = NULL;
        return HAL_OK;
    }

    spin_lock(&a->lock);
    if (HAL_UNLIKELY(size > MAX_REQUEST)) {
        hal_status_t st = out_of_memory(a, size, 0, "the request is too large for any segment");
        spin_unlock(&a->lock);
        *ptr = NULL;
        return st;
    }
    size_t rsize = (size + MIN_BLOCK - 1) & ~(MIN_BLOCK - 1);
    pool_t *p = pool_for(a, stream);
    if (HAL_UNLIKELY(p == NULL || !live_reserve(a))) {
        spin_unlock(&a->lock);
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, a->backend, call,
                         "out of host memory for the allocator's bookkeeping");
    }
    block_t *b = p->parked;
    if (HAL_LIKELY(b != NULL && parked_fits(a, b, rsize))) {
        p->parked = NULL;
        a->cached_blocks--;
        a->cached_bytes -= b->size;
        a->cache_hits++;
    } else if (HAL_LIKELY((b = take(a, p, rsize)) != NULL)) {
        a->cache_hits++;
    } else {
        hal_status_t st = alloc_slow(a, p, size, rsize, &b);
        if (st != HAL_OK) {
            spin_unlock(&a->lock);
            *ptr = NULL;
            return st;
        }
    }
    b->state = BLOCK_ALLOCATED;
    b->pool = p;
    p->users++;
    b->requested = size;
    live_put(a, b);
    a->allocated += b->size;
    a->requested += size;
    if (a->allocated > a->peak_allocated)
        a->peak_allocated = a->allocated;
    a->alloc_count++;
    a->active_blocks++;
    void *result = b->ptr;
    spin_unlock(&a->lock);
    *ptr = result;
    return HAL_OK;
}

/* Returns a block to the cache (see hal_allocator.h). */
hal_status_t hal_allocator_free(hal_allocator_t a, void *ptr)
{
    static const char call[] = "hal_allocator_free";
    HAL_CHECK_HANDLE(a, HAL_MAGIC_ALLOCATOR, "hal_allocator_t", call);
    if (HAL_UNLIKELY(!device_live(a)))
        return device_closed(a, call);
    if (ptr == NULL)
        return HAL_OK;

    spin_lock(&a->lock);
    size_t i = live_find(a, (uintptr_t)ptr);
    if (HAL_UNLIKELY(i == SIZE_MAX)) {
        hal_status_t st = not_live(a, ptr, call);
        spin_unlock(&a->lock);
        return st;
    }
    block_t *b = a->live[i].block;
    live_remove_at(a, i);
    a->allocated -= b->size;
    a->requested -= b->requested;
    a->free_count++;
    a->active_blocks--;
    if (HAL_LIKELY(b->nuses == 0))
        park(a, b->pool, b);
    else
        hold(a, b);
    spin_unlock(&a->lock);
    return HAL_OK;
}

/* Adds a stream that uses a live block (see hal_allocator.h). */
hal_status_t hal_allocator_record_stream(hal_allocator_t a, void *ptr, hal_stream_t stream)
{
    static const char call[] = "hal_allocator_record_stream";
    HAL_CHECK_HANDLE(a, HAL_MAGIC_ALLOCATOR, "hal_allocator_t", call);
    if (HAL_UNLIKELY(!device_live(a)))
        return device_closed(a, call);
    /* Unlike alloc, NULL is not "the default stream" here: recording a use needs a stream. */
    if (!stream)
        return hal_bad_handle(stream, HAL_MAGIC_STREAM, "hal_stream_t", call);
    HAL_CHECK(resolve_stream(a, &stream, call));

    hal_status_t st = HAL_OK;
    spin_lock(&a->lock);
    size_t i = ptr != NULL ? live_find(a, (uintptr_t)ptr) : SIZE_MAX;
    if (i == SIZE_MAX) {
        st = not_live(a, ptr, call);
        goto out_unlock;
    }
    block_t *b = a->live[i].block;
    if (b->pool->stream == stream)
        goto out_unlock; /* stream order already protects it */
    for (uint32_t k = 0; k < b->nuses; k++) {
        if (b->uses[k].stream == stream)
            goto out_unlock;
    }
    if (b->nuses == b->cap_uses) {
        uint32_t cap = b->cap_uses ? b->cap_uses * 2 : 4;
        block_use_t *nu = realloc(b->uses, cap * sizeof(*nu));
        if (nu == NULL) {
            st = hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, a->backend, call, "out of host memory");
            goto out_unlock;
        }
        b->uses = nu;
        b->cap_uses = cap;
    }
    b->uses[b->nuses].stream = stream;
    b->uses[b->nuses].event = NULL;
    b->nuses++;
out_unlock:
    spin_unlock(&a->lock);
    return st;
}

/* Returns all wholly free segments to the device (see hal_allocator.h). */
hal_status_t hal_allocator_empty_cache(hal_allocator_t a)
{
    static const char call[] = "hal_allocator_empty_cache";
    HAL_CHECK_HANDLE(a, HAL_MAGIC_ALLOCATOR, "hal_allocator_t", call);
    if (HAL_UNLIKELY(!device_live(a)))
        return device_closed(a, call);
    spin_lock(&a->lock);
    hal_status_t err = sync_all(a);
    hal_status_t st = release_free_segments(a);
    pools_prune(a);
    spin_unlock(&a->lock);
    return err != HAL_OK ? err : st;
}

/* Largest free block of a bin set: the biggest one in its highest non-empty bin. */
static size_t bins_largest(const bins_t *bs)
{
    if (bs->fl_map == 0)
        return 0;
    unsigned fl = 63u - (unsigned)__builtin_clzll(bs->fl_map);
    unsigned sl = 31u - (unsigned)__builtin_clz(bs->sl_map[fl]);
    size_t best = 0;
    for (const block_t *b = bs->head[fl][sl]; b != NULL; b = b->fnext) {
        if (b->size > best)
            best = b->size;
    }
    return best;
}

static size_t pool_largest(const pool_t *p)
{
    size_t s = bins_largest(&p->small), l = bins_largest(&p->large);
    return s > l ? s : l;
}

/* Reports statistics (see hal_allocator.h). */
hal_status_t hal_allocator_get_stats(hal_allocator_t a, hal_allocator_stats_t *stats)
{
    static const char call[] = "hal_allocator_get_stats";
    HAL_CHECK_HANDLE(a, HAL_MAGIC_ALLOCATOR, "hal_allocator_t", call);
    if (HAL_UNLIKELY(!device_live(a)))
        return device_closed(a, call);
    if (stats == NULL || stats->struct_size < sizeof(hal_allocator_stats_t))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, a->backend, call,
                         "stats is NULL or its struct_size is below %zu",
                         sizeof(hal_allocator_stats_t));
    hal_allocator_stats_t s = HAL_ALLOCATOR_STATS_INIT;
    spin_lock(&a->lock);
    unpark_all(a); /* report the cache as coalesced */
    s.allocated_bytes = a->allocated;
    s.requested_bytes = a->requested;
    s.reserved_bytes = a->reserved;
    s.peak_allocated_bytes = a->peak_allocated;
    s.peak_reserved_bytes = a->peak_reserved;
    s.alloc_count = a->alloc_count;
    s.free_count = a->free_count;
    s.segment_alloc_count = a->segment_allocs;
    s.segment_free_count = a->segment_frees;
    s.cache_hits = a->cache_hits;
    s.oom_count = a->ooms;
    s.active_blocks = a->active_blocks;
    s.cached_blocks = a->cached_blocks;
    s.cached_bytes = a->cached_bytes;
    size_t largest = pool_largest(a->neutral);
    for (size_t i = 0; i < a->npools; i++) {
        size_t l = pool_largest(a->pools[i]);
        if (l > largest)
            largest = l;
    }
    for (const block_t *b = a->held_head; b != NULL; b = b->fnext) {
        if (b->size > largest)
            largest = b->size;
    }
    spin_unlock(&a->lock);
    s.largest_cached_block = largest;
    s.fragmentation = s.cached_bytes ? 1.0 - (double)largest / (double)s.cached_bytes : 0.0;
    s.struct_size = stats->struct_size;
    s.next = stats->next;
    *stats = s;
    return HAL_OK;
}

/* Resets the peaks to the current values (see hal_allocator.h). */
hal_status_t hal_allocator_reset_peak_stats(hal_allocator_t a)
{
    static const char call[] = "hal_allocator_reset_peak_stats";
    HAL_CHECK_HANDLE(a, HAL_MAGIC_ALLOCATOR, "hal_allocator_t", call);
    if (HAL_UNLIKELY(!device_live(a)))
        return device_closed(a, call);
    spin_lock(&a->lock);
    a->peak_allocated = a->allocated;
    a->peak_reserved = a->reserved;
    spin_unlock(&a->lock);
    return HAL_OK;
}

/* Finds the live block containing ptr (see hal_allocator.h). */
hal_status_t hal_allocator_get_block(hal_allocator_t a, const void *ptr, void **base, size_t *size)
{
    static const char call[] = "hal_allocator_get_block";
    HAL_CHECK_HANDLE(a, HAL_MAGIC_ALLOCATOR, "hal_allocator_t", call);
    if (HAL_UNLIKELY(!device_live(a)))
        return device_closed(a, call);
    spin_lock(&a->lock);
    const block_t *b = NULL;
    if (ptr != NULL) {
        size_t i = live_find(a, (uintptr_t)ptr);
        b = i != SIZE_MAX ? a->live[i].block : find_containing(a, ptr);
    }
    void *found = b != NULL ? b->ptr : NULL;
    size_t requested = b != NULL ? b->requested : 0;
    spin_unlock(&a->lock);
    if (found == NULL)
        return hal_error(HAL_ERROR_NOT_FOUND, a->backend, call,
                         "%p is not inside a live block of this allocator", ptr);
    if (base != NULL)
        *base = found;
    if (size != NULL)
        *size = requested;
    return HAL_OK;
}
