/* SPDX-License-Identifier: Apache-2.0 */
/* The caching allocator's snapshot: hal_allocator_snapshot lists every segment's blocks. */

#include <stdlib.h>

#include "hal/hal.h"
#include "hal/services/caching_allocator_bins.h"
#include "hal/services/caching_allocator_front.h"
#include "hal/services/caching_allocator_internal.h"
#include "hal/src/service.h"

static hal_allocator_block_state_t snapshot_state(const struct hal_allocator_s *a, block_t *b)
{
    switch (b->state) {
    case BLOCK_ALLOCATED:
        return HAL_ALLOCATOR_BLOCK_ALLOCATED;
    case BLOCK_HELD:
        return HAL_ALLOCATOR_BLOCK_PENDING_FREE;
    case BLOCK_FRONT: /* handed out from a front cache, or cached there */
        return ca_front_block_live(a, b) ? HAL_ALLOCATOR_BLOCK_ALLOCATED
                                         : HAL_ALLOCATOR_BLOCK_CACHED;
    default: /* free in the bins, or parked */
        return HAL_ALLOCATOR_BLOCK_CACHED;
    }
}

static size_t count_blocks(const struct hal_allocator_s *a)
{
    size_t n = 0;
    for (size_t i = 0; i < a->nsegs; i++) {
        for (const block_t *b = a->segs[i]->first; b != NULL; b = b->next)
            n++;
    }
    return n;
}

/* Lists the blocks (see hal_allocator.h). */
hal_status_t hal_allocator_snapshot(hal_allocator_t a, hal_allocator_block_visitor_t visitor,
                                    void *user)
{
    static const char call[] = "hal_allocator_snapshot";
    HAL_CHECK_HANDLE(a, HAL_MAGIC_ALLOCATOR, "hal_allocator_t", call);
    if (HAL_UNLIKELY(!device_live(a)))
        return ca_device_closed(a, call);
    if (visitor == NULL)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, a->backend, call, "visitor is NULL");
    spin_lock(&a->lock);
    ca_front_drain_all(a); /* report the cache coalesced, as hal_allocator_get_stats does */
    for (size_t i = 0; i < a->npools; i++)
        unpark(a, a->pools[i]);
    size_t n = count_blocks(a);
    /* Copied under the lock, visited without it: the visitor may call the allocator. */
    hal_allocator_block_info_t *infos = n ? calloc(n, sizeof(*infos)) : NULL;
    if (n != 0 && infos == NULL) {
        spin_unlock(&a->lock);
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, a->backend, call,
                         "no host memory to list %zu blocks", n);
    }
    size_t k = 0;
    for (size_t i = 0; i < a->nsegs; i++) {
        const segment_t *seg = a->segs[i];
        for (block_t *b = seg->first; b != NULL; b = b->next, k++) {
            hal_allocator_block_info_t *info = &infos[k];
            info->struct_size = sizeof(*info);
            info->segment_address = seg->base;
            info->segment_size = seg->size;
            info->address = b->ptr;
            info->size = b->size;
            info->state = snapshot_state(a, b);
            info->requested = info->state == HAL_ALLOCATOR_BLOCK_ALLOCATED ? b->requested : 0;
            info->stream = b->pool != NULL ? b->pool->stream : NULL;
            info->small_segment = seg->small ? 1u : 0u;
        }
    }
    spin_unlock(&a->lock);
    for (size_t i = 0; i < n; i++)
        visitor(&infos[i], user);
    free(infos);
    return HAL_OK;
}
