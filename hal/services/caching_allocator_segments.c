/* SPDX-License-Identifier: Apache-2.0 */
/* The caching allocator's segments: the device memory it obtains with hal_mem_alloc and carves
 * into blocks, kept sorted by address; the allocation slow path that polls pending frees, adds
 * a segment or, out of memory, releases the cache and retries once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/hal.h"
#include "hal/services/caching_allocator_bins.h"
#include "hal/services/caching_allocator_internal.h"
#include "hal/src/service.h"

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
block_t *ca_find_containing(const struct hal_allocator_s *a, const void *ptr)
{
    size_t i = seg_find(a, ptr);
    if (i == SIZE_MAX)
        return NULL;
    const char *p = ptr;
    for (block_t *b = a->segs[i]->first; b != NULL; b = b->next) {
        if (p >= b->ptr && p < b->ptr + b->size) {
            bool live = b->state == BLOCK_ALLOCATED ||
                        (b->state == BLOCK_FRONT && ca_front_block_live(a, b));
            return (live && p < b->ptr + b->requested) ? b : NULL;
        }
    }
    return NULL;
}

/* Returns every wholly free segment to the device. */
hal_status_t ca_release_free_segments(struct hal_allocator_s *a)
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

hal_status_t ca_alloc_slow(struct hal_allocator_s *a, pool_t *p, size_t req, size_t size,
                           block_t **out)
{
    block_t *b = NULL;
    if (p->parked != NULL || a->fronts != NULL) {
        /* What front caches and parking keep unmerged may make up the block. */
        ca_front_drain_all(a);
        unpark(a, p);
        b = ca_take(a, p, size);
    }
    if (b == NULL && a->held_head != NULL) {
        (void)ca_held_poll(a, false);
        b = ca_take(a, p, size);
    }
    if (b == NULL) {
        (void)ca_fences_poll(a, p, false);
        b = ca_take(a, p, size);
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

    /* Out of memory: take back what the threads' front caches hold (again: their owners return
     * blocks to them without the lock), wait for pending frees (which may free a fitting
     * block), else give the cache back and retry once. */
    ca_front_drain_all(a);
    (void)ca_sync_all(a);
    b = ca_take(a, p, size);
    if (b != NULL) {
        a->cache_hits++;
        *out = b;
        return HAL_OK;
    }
    (void)ca_release_free_segments(a);
    ca_pools_prune(a);
    detail[0] = '\0';
    st = segment_alloc(a, size, segsize, out, detail, sizeof(detail));
    if (st == HAL_OK)
        return HAL_OK;
    if (st == HAL_ERROR_OUT_OF_DEVICE_MEMORY || st == HAL_ERROR_OUT_OF_HOST_MEMORY) {
        if (detail[0] == '\0')
            return st;
        return ca_out_of_memory(a, req, segsize, detail);
    }
    return hal_error(st, a->backend, "hal_allocator_alloc",
                     "allocating a segment of %zu bytes failed: %s", segsize, detail);
}
