/* SPDX-License-Identifier: Apache-2.0 */
/* The caching allocator's statistics and queries: hal_allocator_get_stats (with the cache
 * reported coalesced), hal_allocator_reset_peak_stats and hal_allocator_get_block. */

#include "hal/hal.h"
#include "hal/services/caching_allocator_bins.h"
#include "hal/services/caching_allocator_front.h"
#include "hal/services/caching_allocator_internal.h"
#include "hal/src/service.h"

static void unpark_all(struct hal_allocator_s *a)
{
    for (size_t i = 0; i < a->npools; i++)
        unpark(a, a->pools[i]);
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
        return ca_device_closed(a, call);
    if (stats == NULL || stats->struct_size < sizeof(hal_allocator_stats_t))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, a->backend, call,
                         "stats is NULL or its struct_size is below %zu",
                         sizeof(hal_allocator_stats_t));
    hal_allocator_stats_t s = HAL_ALLOCATOR_STATS_INIT;
    spin_lock(&a->lock);
    ca_front_drain_all(a); /* report the cache as coalesced */
    unpark_all(a);
    front_totals_t ft = ca_front_totals(a);
    s.allocated_bytes = a->allocated + ft.allocated;
    s.requested_bytes = a->requested + ft.requested;
    s.reserved_bytes = a->reserved;
    s.peak_allocated_bytes = a->peak_allocated;
    s.peak_reserved_bytes = a->peak_reserved;
    s.alloc_count = a->alloc_count + ft.hits;
    s.free_count = a->free_count + ft.frees;
    s.segment_alloc_count = a->segment_allocs;
    s.segment_free_count = a->segment_frees;
    s.cache_hits = a->cache_hits + ft.hits;
    s.oom_count = a->ooms;
    s.active_blocks = a->active_blocks + ft.live_blocks;
    s.cached_blocks = a->cached_blocks + ft.cached_blocks;
    s.cached_bytes = a->cached_bytes + ft.cached_bytes;
    size_t largest = ft.largest_cached;
    size_t neutral_largest = pool_largest(a->neutral);
    if (neutral_largest > largest)
        largest = neutral_largest;
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
        return ca_device_closed(a, call);
    spin_lock(&a->lock);
    ca_front_drain_all(a); /* front_bytes is then what they handed out */
    a->peak_allocated = a->allocated + a->front_bytes;
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
        return ca_device_closed(a, call);
    spin_lock(&a->lock);
    const block_t *b = NULL;
    if (ptr != NULL) {
        size_t i = live_find(a, (uintptr_t)ptr);
        b = i != SIZE_MAX ? a->live[i].block : ca_front_find(a, ptr, false);
        if (b == NULL)
            b = ca_find_containing(a, ptr);
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
