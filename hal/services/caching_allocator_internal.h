/* SPDX-License-Identifier: Apache-2.0 */
/* Internal to the caching allocator (caching_allocator*.c): its object layout, its lock, and what
 * one of its files offers the others. The design is described in caching_allocator.c; the
 * operations every cache hit runs are inline in caching_allocator_bins.h. */
#ifndef HAL_SERVICES_CACHING_ALLOCATOR_INTERNAL_H
#define HAL_SERVICES_CACHING_ALLOCATOR_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/hal.h"
#include "hal/src/service.h"

#define MIN_BLOCK       ((size_t)512)
#define SMALL_SIZE      ((size_t)1 << 20) /* largest request served from small segments */
#define DEFAULT_SEGMENT ((size_t)2 << 20)
#define OVERSIZE_SLACK  ((size_t)20 << 20) /* PyTorch's kLargeBuffer */
#define MAX_REQUEST     (SIZE_MAX / 2)     /* keeps every rounding free of overflow */

#define SL_BITS  4
#define SL_COUNT (1u << SL_BITS)
#define FL_COUNT 52 /* sizes up to 2^63 bytes in 512-byte units */

/* A parked block is a pool's most recently freed one, kept whole and out of the bins so that
 * the next request of its size on the stream takes it back without splitting or merging. A
 * front block belongs to a thread's front cache (caching_allocator_front.h): cached in one of
 * its slots or handed out from it, which only that cache's ring tells; its state stays the same
 * either way, so that the owner thread never writes it. */
enum {
    BLOCK_ALLOCATED = 1,
    BLOCK_FREE = 2,
    BLOCK_HELD = 3,
    BLOCK_PARKED = 4,
    BLOCK_UNUSED = 5,
    BLOCK_FRONT = 6
};

struct pool;
struct segment;
struct front;

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
    hal_device_t device;
    hal_stream_listener_t listener; /* told when a stream is destroyed (ca_stream_retired) */
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

    struct front *fronts;      /* the threads' front caches of this allocator */
    unsigned front_generation; /* ca_front_generation() at creation: differs in a child */

    hal_event_t *events; /* idle events */
    size_t nevents, cap_events;

    segment_t **segs; /* sorted by base */
    size_t nsegs, cap_segs;

    /* The statistics of the blocks outside front caches; ca_front_totals counts the rest.
     * front_bytes: bytes in front caches (cached or handed out). The peak never falls below
     * allocated + front_bytes (see caching_allocator_front.c). */
    uint64_t allocated, requested, reserved, peak_allocated, peak_reserved, front_bytes;
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

/* Slow paths hold the lock across HAL calls that may block, so waiters give up the CPU
 * (caching_allocator.c). */
void ca_spin_lock_slow(hal_spinlock_t *l);

static inline void spin_lock(hal_spinlock_t *l)
{
    if (HAL_LIKELY(!atomic_exchange_explicit(&l->locked, 1, memory_order_acquire)))
        return;
    ca_spin_lock_slow(l);
}

static inline void spin_unlock(hal_spinlock_t *l)
{
    atomic_store_explicit(&l->locked, 0, memory_order_release);
}

/* ---- handles --------------------------------------------------------------------------------- */

static inline bool device_live(const struct hal_allocator_s *a)
{
    return hal_handle_is_live(a->device, HAL_MAGIC_DEVICE);
}

/* Reports that the allocator's device was closed (caching_allocator.c). */
hal_status_t ca_device_closed(const struct hal_allocator_s *a, const char *call);

/* ---- block structs, bins and pools (caching_allocator_bins.c) -------------------------------- */

/* Adds a slab of block structs to the freelist; false when the host is out of memory. */
bool ca_spare_refill(struct hal_allocator_s *a);
/* Allocates an empty live table of 2^log2cap slots; false when the host is out of memory. */
bool ca_live_init(struct hal_allocator_s *a, unsigned log2cap);
/* A new, empty pool for stream (NULL: the neutral pool); NULL when the host is out of memory. */
pool_t *ca_pool_new(hal_stream_t stream);
/* Caches a block that no longer holds live data in pool p's bins, merging it with free
 * neighbours; seq: when its memory was last used on p's stream. */
void ca_pool_put(struct hal_allocator_s *a, pool_t *p, block_t *b, uint64_t seq);
/* Takes a block for `size` rounded bytes from pool p, else from the neutral pool; NULL on a
 * miss. */
block_t *ca_take(struct hal_allocator_s *a, pool_t *p, size_t size);
/* Drops the pools of destroyed streams that hold nothing any more. */
void ca_pools_prune(struct hal_allocator_s *a);

/* ---- streams and fences (caching_allocator_streams.c) ---------------------------------------- */

/* Polls (or, blocking, waits for) every other pool's fence and migrates what they cover. */
hal_status_t ca_fences_poll(struct hal_allocator_s *a, pool_t *self, bool blocking);
/* Releases held blocks whose events completed (with blocking, waits for all of them). */
hal_status_t ca_held_poll(struct hal_allocator_s *a, bool blocking);
/* Frees a block used on other streams (record_stream): holds it back until they are done. */
void ca_hold(struct hal_allocator_s *a, block_t *b);
/* Waits for every pending cross-stream free and moves all free blocks to the neutral pool. */
hal_status_t ca_sync_all(struct hal_allocator_s *a);
/* The device's stream listener: a stream of this device is being destroyed. */
void ca_stream_retired(hal_stream_listener_t *listener, hal_stream_t stream);

/* ---- segments (caching_allocator_segments.c) ------------------------------------------------- */

/* Finds the live block whose requested range contains ptr, or NULL. */
block_t *ca_find_containing(const struct hal_allocator_s *a, const void *ptr);
/* Returns every wholly free segment to the device. */
hal_status_t ca_release_free_segments(struct hal_allocator_s *a);
/* A cache miss of hal_allocator_alloc: polls pending frees, else allocates a segment, else
 * releases the cache and retries once. req: bytes asked for; size: rounded. */
hal_status_t ca_alloc_slow(struct hal_allocator_s *a, pool_t *p, size_t req, size_t size,
                           block_t **out);
/* ---- front caches (caching_allocator_front.c) ------------------------------------------------ */

/* What the front caches add to the allocator's own statistics. */
typedef struct front_totals {
    uint64_t hits, frees;                       /* without the lock */
    uint64_t live_blocks, allocated, requested; /* handed out */
    uint64_t cached_blocks, cached_bytes, largest_cached;
} front_totals_t;

/* Bumped in a forked child, where the parent's front caches must not be touched. */
unsigned ca_front_generation(void);
/* Makes sure the calling thread has a front cache for stream (pool p), which becomes its
 * current one; NULL without one (out of host memory). */
struct front *ca_front_prepare(struct hal_allocator_s *a, hal_stream_t stream, pool_t *p);
/* Caches a freed block b (already out of the allocator's books, without uses) in the calling
 * thread's front cache for its pool; false when it has none or no room. */
bool ca_front_enter(struct hal_allocator_s *a, block_t *b);
/* The block at ptr handed out from a front cache, or NULL. With claim, it leaves the front cache
 * for the allocator's books (state BLOCK_ALLOCATED, counted live, in no table). */
block_t *ca_front_find(struct hal_allocator_s *a, const void *ptr, bool claim);
/* Whether a BLOCK_FRONT block is handed out rather than cached (then with its requested size
 * filled in). */
bool ca_front_block_live(const struct hal_allocator_s *a, block_t *b);
/* Returns every block cached in front caches to its pool. */
void ca_front_drain_all(struct hal_allocator_s *a);
/* Drains the front caches bound to stream (being destroyed) and unbinds them. */
void ca_front_retire_stream(struct hal_allocator_s *a, hal_stream_t stream);
/* Adds up what the front caches hold and did. */
front_totals_t ca_front_totals(const struct hal_allocator_s *a);
/* Raises the peak when allocated + front_bytes exceeds it (see caching_allocator_front.c). */
void ca_front_raise_peak(struct hal_allocator_s *a);
/* Detaches every front cache from the allocator, which is being destroyed; takes the lock. */
void ca_front_detach_all(struct hal_allocator_s *a);

/* Counts and reports a failed allocation (caching_allocator.c). */
hal_status_t ca_out_of_memory(struct hal_allocator_s *a, size_t size, size_t segment,
                              const char *detail);

#endif /* HAL_SERVICES_CACHING_ALLOCATOR_INTERNAL_H */
