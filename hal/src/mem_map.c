/* SPDX-License-Identifier: Apache-2.0 */
/* The address -> allocation map of every live HAL allocation, all backends together. It lets
 * any interior pointer be resolved to its allocation (kind, device, base, size and the
 * backend's cookie), which is what makes device memory an address with offset arithmetic even
 * for backends whose native memory is an object. A sorted array under a reader-writer lock:
 * lookups (every copy) are O(log n) and read-only; inserts and removals (raw allocations,
 * which the caching allocator keeps rare) move the tail.
 *
 * Every enqueued collective and copy resolves its pointers here, so a thread keeps copies of the
 * records it found last and answers from them without the lock while the map's generation is
 * the one they were copied at. Writers bump the generation whenever a record leaves the map or
 * changes (inserts change no existing record), so a lookup that follows a free, in any thread
 * ordered after it, misses the copy and finds the record gone, as it would under the lock. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "hal/src/core.h"

static pthread_rwlock_t map_lock = PTHREAD_RWLOCK_INITIALIZER;
static hal_alloc_record_t *records;
static size_t record_count, record_capacity;

/* Written under the write lock only; 0 marks an empty cache slot, so it starts at 1. */
static _Atomic uint64_t map_generation = 1;

/* A collective's send and receive buffers, and a copy's source and destination, are two
 * allocations: a few slots keep both (and a stream's scratch) without evicting each other. */
#define LOOKUP_CACHE_SLOTS 4

typedef struct cached_record {
    uint64_t generation; /* map_generation when copied; 0: empty */
    hal_alloc_record_t record;
} cached_record_t;

static _Thread_local struct {
    cached_record_t slots[LOOKUP_CACHE_SLOTS];
    unsigned next; /* the slot the next miss replaces */
} lookup_cache;

/* Invalidates every thread's cached copies. Caller holds the write lock. */
static void bump_generation(void)
{
    atomic_fetch_add_explicit(&map_generation, 1, memory_order_release);
}

/* Index of the first record whose base is > ptr. Caller holds the lock. */
static size_t upper_bound(const char *ptr)
{
    size_t lo = 0, hi = record_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (records[mid].base <= ptr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Index of the record containing ptr, or SIZE_MAX. Caller holds the lock. */
static size_t find_containing(const void *ptr)
{
    const char *p = ptr;
    size_t i = upper_bound(p);
    if (i == 0)
        return SIZE_MAX;
    const hal_alloc_record_t *r = &records[i - 1];
    if (p < r->base + r->size)
        return i - 1;
    return SIZE_MAX;
}

hal_status_t hal_mem_map_insert(const hal_alloc_record_t *record)
{
    hal_status_t st = HAL_OK;
    pthread_rwlock_wrlock(&map_lock);
    if (record_count == record_capacity) {
        size_t cap = record_capacity ? record_capacity * 2 : 256;
        hal_alloc_record_t *grown = realloc(records, cap * sizeof(*records));
        if (!grown) {
            st = HAL_ERROR_OUT_OF_HOST_MEMORY;
            goto out_unlock;
        }
        records = grown;
        record_capacity = cap;
    }
    size_t i = upper_bound(record->base);
    /* A backend handing out overlapping ranges is a bug in the backend, not in the caller. */
    if ((i > 0 && records[i - 1].base + records[i - 1].size > record->base) ||
        (i < record_count && record->base + record->size > records[i].base)) {
        st = HAL_ERROR_INTERNAL;
        goto out_unlock;
    }
    memmove(&records[i + 1], &records[i], (record_count - i) * sizeof(*records));
    records[i] = *record;
    record_count++;
out_unlock:
    pthread_rwlock_unlock(&map_lock);
    return st;
}

bool hal_mem_map_lookup(const void *ptr, hal_alloc_record_t *out)
{
    const char *p = ptr;
    uint64_t generation = atomic_load_explicit(&map_generation, memory_order_acquire);
    for (unsigned k = 0; k < LOOKUP_CACHE_SLOTS; k++) {
        const cached_record_t *c = &lookup_cache.slots[k];
        if (c->generation == generation && p >= c->record.base &&
            p < c->record.base + c->record.size) {
            *out = c->record;
            return true;
        }
    }
    pthread_rwlock_rdlock(&map_lock);
    /* Stable while the read lock is held: writers bump it under the write lock. */
    generation = atomic_load_explicit(&map_generation, memory_order_relaxed);
    size_t i = find_containing(ptr);
    bool found = i != SIZE_MAX;
    if (found)
        *out = records[i];
    pthread_rwlock_unlock(&map_lock);
    if (found) {
        cached_record_t *c = &lookup_cache.slots[lookup_cache.next++ % LOOKUP_CACHE_SLOTS];
        c->generation = generation;
        c->record = *out;
    }
    return found;
}

bool hal_mem_map_take(const void *base, bool mark_pending, hal_alloc_record_t *out)
{
    pthread_rwlock_wrlock(&map_lock);
    size_t i = find_containing(base);
    bool found = i != SIZE_MAX && records[i].base == base && !records[i].free_pending;
    if (found) {
        *out = records[i];
        if (mark_pending) {
            records[i].free_pending = true;
        } else {
            memmove(&records[i], &records[i + 1], (record_count - i - 1) * sizeof(*records));
            record_count--;
        }
        bump_generation();
    }
    pthread_rwlock_unlock(&map_lock);
    return found;
}

/* Removes the record with this base regardless of its pending flag (the deferred free). */
bool hal_mem_map_remove(const void *base)
{
    pthread_rwlock_wrlock(&map_lock);
    size_t i = find_containing(base);
    bool found = i != SIZE_MAX && records[i].base == base;
    if (found) {
        memmove(&records[i], &records[i + 1], (record_count - i - 1) * sizeof(*records));
        record_count--;
        bump_generation();
    }
    pthread_rwlock_unlock(&map_lock);
    return found;
}

void hal_mem_map_drain_device(struct hal_device_s *device,
                              void (*fn)(const hal_alloc_record_t *record, void *ctx), void *ctx)
{
    for (;;) {
        hal_alloc_record_t victim;
        bool found = false;
        pthread_rwlock_wrlock(&map_lock);
        for (size_t i = 0; i < record_count; i++) {
            if (records[i].device == device) {
                victim = records[i];
                memmove(&records[i], &records[i + 1], (record_count - i - 1) * sizeof(*records));
                record_count--;
                bump_generation();
                found = true;
                break;
            }
        }
        pthread_rwlock_unlock(&map_lock);
        if (!found)
            return;
        /* Called without the lock: it frees through the backend. */
        fn(&victim, ctx);
    }
}

void hal_mem_map_reset_after_fork(void)
{
    /* Only the forking thread exists in the child; the lock may have been held by another. */
    pthread_rwlock_init(&map_lock, NULL);
    record_count = 0;
    bump_generation();
}
