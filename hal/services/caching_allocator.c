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
 * lock, that a stream is going away: hal_stream_destroy calls ca_stream_retired (a device stream
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
 * allocator does; waiters back off to sched_yield.
 *
 * In front of all this, each thread has a small front cache per allocator and stream
 * (caching_allocator_front.c): the blocks it frees on the stream wait there, and the same
 * thread's next request of their size on that stream takes them back without the lock (one
 * compare-exchange), as glibc's tcache does for malloc. The public alloc and free try it first,
 * inline, and leave everything else (the checks included) to alloc_slow and free_slow. The
 * locked paths find front blocks by scanning the front caches, and drain them where the cache
 * must show or give back everything: a miss in the pools, get_stats, empty_cache, a new peak,
 * reset_peak_stats, a destroyed stream, destroy.
 *
 * Files: this one is the front end (the public calls other than the statistics, the lock's slow
 * path, error reports); caching_allocator_bins.h/.c the block structs, bins, live table, pools;
 * caching_allocator_streams.c events, fences, held blocks and retired streams;
 * caching_allocator_segments.c segments and the allocation slow path;
 * caching_allocator_stats.c statistics and block queries; caching_allocator_front.h/.c the
 * threads' front caches; caching_allocator_internal.h the layout and what the files share. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hal/hal.h"
#include "hal/services/caching_allocator_bins.h"
#include "hal/services/caching_allocator_front.h"
#include "hal/services/caching_allocator_internal.h"
#include "hal/src/service.h"

/* ---- lock ------------------------------------------------------------------------------------ */

/* Slow paths hold the lock across HAL calls that may block, so waiters give up the CPU. */
void __attribute__((noinline)) ca_spin_lock_slow(hal_spinlock_t *l)
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

/* ---- errors ---------------------------------------------------------------------------------- */

hal_status_t ca_device_closed(const struct hal_allocator_s *a, const char *call)
{
    return hal_error(HAL_ERROR_INVALID_HANDLE, a->backend, call,
                     "the allocator's device was closed (its backend was closed)");
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
    if (HAL_UNLIKELY(!hal_handle_is_live(s, HAL_MAGIC_STREAM)))
        return hal_bad_handle(s, HAL_MAGIC_STREAM, "hal_stream_t", call);
    if (HAL_UNLIKELY(hal_stream_device(s) != a->device))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, a->backend, call,
                         "stream %p belongs to another device than the allocator's", (void *)s);
    return HAL_OK;
}

static hal_status_t not_live(const struct hal_allocator_s *a, const void *ptr, const char *call)
{
    const block_t *b = ca_find_containing(a, ptr);
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
hal_status_t ca_out_of_memory(struct hal_allocator_s *a, size_t size, size_t segment,
                              const char *detail)
{
    a->ooms++;
    bool host = a->kind == HAL_MEM_KIND_HOST_PINNED;
    uint64_t allocated = a->allocated + ca_front_totals(a).allocated;
    char seg[64] = "";
    if (segment != 0)
        snprintf(seg, sizeof(seg), " (segment of %zu)", segment);
    return hal_error(host ? HAL_ERROR_OUT_OF_HOST_MEMORY : HAL_ERROR_OUT_OF_DEVICE_MEMORY,
                     a->backend, "hal_allocator_alloc",
                     "out of %s memory: requested %zu bytes%s with %llu bytes allocated and %llu "
                     "reserved by this allocator%s; %s",
                     host ? "pinned host" : "device", size, seg, (unsigned long long)allocated,
                     (unsigned long long)a->reserved,
                     segment != 0 ? " after releasing its cache" : "", detail);
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

    HAL_CHECK_NOT_NULL(out, name, call);
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
    a->front_generation = ca_front_generation();
    a->neutral = ca_pool_new(NULL);
    if (a->neutral == NULL)
        goto out_release_handle;
    if (!ca_live_init(a, 10))
        goto out_free_neutral;
    if (pool_for(a, default_stream) == NULL)
        goto out_free_pools;
    a->listener.retired = ca_stream_retired;
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
        ca_front_detach_all(a);
        free_bookkeeping(a);
        hal_handle_release(a, false);
        return HAL_OK;
    }
    spin_lock(&a->lock);
    front_totals_t ft = ca_front_totals(a);
    uint64_t n = a->active_blocks + ft.live_blocks;
    if (n != 0) {
        uint64_t bytes = a->allocated + ft.allocated;
        spin_unlock(&a->lock);
        return hal_error(HAL_ERROR_BUSY, a->backend, call,
                         "%llu blocks (%llu bytes) are still allocated", (unsigned long long)n,
                         (unsigned long long)bytes);
    }
    spin_unlock(&a->lock);
    /* Outside the lock: removal waits for a retire call in progress, which takes it. */
    hal_device_remove_stream_listener(a->device, &a->listener);
    ca_front_detach_all(a); /* parks what they cache */
    spin_lock(&a->lock);
    (void)ca_sync_all(a);
    (void)ca_release_free_segments(a);
    /* Nothing is allocated, so every segment should be free by now; free any rest anyway. */
    for (size_t i = 0; i < a->nsegs; i++)
        (void)hal_mem_free(a->segs[i]->base);
    for (size_t i = 0; i < a->nevents; i++)
        (void)hal_event_destroy(a->events[i]);
    a->nevents = 0;
    spin_unlock(&a->lock);
    bool keep_forever = hal_device_validates(a->device); /* as the core does for its handles */
    free_bookkeeping(a);
    hal_handle_release(a, keep_forever);
    return HAL_OK;
}

/* hal_allocator_alloc but for a hit in the calling thread's front cache. Out of line, so that
 * the hit pays for no stack frame. */
static hal_status_t __attribute__((noinline))
alloc_slow(struct hal_allocator_s *a, size_t size, hal_stream_t stream, void **ptr)
{
    static const char call[] = "hal_allocator_alloc";
    HAL_CHECK_HANDLE(a, HAL_MAGIC_ALLOCATOR, "hal_allocator_t", call);
    if (HAL_UNLIKELY(!device_live(a)))
        return ca_device_closed(a, call);
    HAL_CHECK_NOT_NULL(ptr, a->backend, call);
    HAL_CHECK(resolve_stream(a, &stream, call));
    if (HAL_UNLIKELY(size == 0)) {
        *ptr = NULL;
        return HAL_OK;
    }

    spin_lock(&a->lock);
    if (HAL_UNLIKELY(size > MAX_REQUEST)) {
        hal_status_t st = ca_out_of_memory(a, size, 0, "the request is too large for any segment");
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
    /* The block may come back to this thread's front cache for the stream; or be there now. */
    front_t *f = ca_front_prepare(a, stream, p);
    if (f != NULL && front_alloc(a, f, size, stream, ptr)) {
        spin_unlock(&a->lock);
        return HAL_OK;
    }
    block_t *b = p->parked;
    if (HAL_LIKELY(b != NULL && parked_fits(a, b, rsize))) {
        p->parked = NULL;
        a->cached_blocks--;
        a->cached_bytes -= b->size;
        a->cache_hits++;
    } else if (HAL_LIKELY((b = ca_take(a, p, rsize)) != NULL)) {
        a->cache_hits++;
    } else {
        hal_status_t st = ca_alloc_slow(a, p, size, rsize, &b);
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
    if (a->allocated + a->front_bytes > a->peak_allocated)
        ca_front_raise_peak(a);
    a->alloc_count++;
    a->active_blocks++;
    void *result = b->ptr;
    spin_unlock(&a->lock);
    *ptr = result;
    return HAL_OK;
}

/* Allocates a block usable on `stream` (see hal_allocator.h). */
hal_status_t hal_allocator_alloc(hal_allocator_t a, size_t size, hal_stream_t stream, void **ptr)
{
    if (HAL_LIKELY(front_alloc(a, ca_front_current, size, stream, ptr)))
        return HAL_OK;
    return alloc_slow(a, size, stream, ptr);
}

/* hal_allocator_free but for a block going back to the calling thread's front cache. */
static hal_status_t __attribute__((noinline)) free_slow(struct hal_allocator_s *a, void *ptr)
{
    static const char call[] = "hal_allocator_free";
    HAL_CHECK_HANDLE(a, HAL_MAGIC_ALLOCATOR, "hal_allocator_t", call);
    if (HAL_UNLIKELY(!device_live(a)))
        return ca_device_closed(a, call);
    if (ptr == NULL)
        return HAL_OK;
    spin_lock(&a->lock);
    block_t *b;
    size_t i = live_find(a, (uintptr_t)ptr);
    if (HAL_LIKELY(i != SIZE_MAX)) {
        b = a->live[i].block;
        live_remove_at(a, i);
    } else if ((b = ca_front_find(a, ptr, true)) == NULL) {
        hal_status_t st = not_live(a, ptr, call);
        spin_unlock(&a->lock);
        return st;
    }
    a->allocated -= b->size;
    a->requested -= b->requested;
    a->free_count++;
    a->active_blocks--;
    if (HAL_UNLIKELY(b->nuses != 0))
        ca_hold(a, b);
    else if (!ca_front_enter(a, b))
        park(a, b->pool, b);
    spin_unlock(&a->lock);
    return HAL_OK;
}

/* Returns a block to the cache (see hal_allocator.h). */
hal_status_t hal_allocator_free(hal_allocator_t a, void *ptr)
{
    if (HAL_LIKELY(front_free(a, ca_front_current, ptr)))
        return HAL_OK;
    return free_slow(a, ptr);
}

/* Adds a stream that uses a live block (see hal_allocator.h). */
hal_status_t hal_allocator_record_stream(hal_allocator_t a, void *ptr, hal_stream_t stream)
{
    static const char call[] = "hal_allocator_record_stream";
    HAL_CHECK_HANDLE(a, HAL_MAGIC_ALLOCATOR, "hal_allocator_t", call);
    if (HAL_UNLIKELY(!device_live(a)))
        return ca_device_closed(a, call);
    /* Unlike alloc, NULL is not "the default stream" here: recording a use needs a stream. */
    if (!stream)
        return hal_bad_handle(stream, HAL_MAGIC_STREAM, "hal_stream_t", call);
    HAL_CHECK(resolve_stream(a, &stream, call));

    hal_status_t st = HAL_OK;
    spin_lock(&a->lock);
    size_t i = ptr != NULL ? live_find(a, (uintptr_t)ptr) : SIZE_MAX;
    block_t *b = i != SIZE_MAX ? a->live[i].block : NULL;
    if (b == NULL && (ptr == NULL || (b = ca_front_find(a, ptr, false)) == NULL)) {
        st = not_live(a, ptr, call);
        goto out_unlock;
    }
    if (b->pool->stream == stream)
        goto out_unlock; /* stream order already protects it */
    for (uint32_t k = 0; k < b->nuses; k++) {
        if (b->uses[k].stream == stream)
            goto out_unlock;
    }
    if (b->state == BLOCK_FRONT) { /* a block with uses is freed through the lock */
        if (!live_reserve(a)) {
            st = hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, a->backend, call, "out of host memory");
            goto out_unlock;
        }
        if (ca_front_find(a, ptr, true) == NULL) { /* its owner freed it meanwhile */
            st = not_live(a, ptr, call);
            goto out_unlock;
        }
        live_put(a, b);
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
        return ca_device_closed(a, call);
    spin_lock(&a->lock);
    ca_front_drain_all(a);
    hal_status_t err = ca_sync_all(a);
    hal_status_t st = ca_release_free_segments(a);
    ca_pools_prune(a);
    spin_unlock(&a->lock);
    return err != HAL_OK ? err : st;
}
