/* SPDX-License-Identifier: Apache-2.0 */
/* The address -> allocation map of every live HAL allocation, all backends together. It lets
 * any interior pointer be resolved to its allocation (kind, device, base, size and the
 * backend's cookie), which is what makes device memory an address with offset arithmetic even
 * for backends whose native memory is an object. A sorted array under a reader-writer lock:
 * lookups (every copy) are O(log n) and read-only; inserts and removals (raw allocations,
 * which the caching allocator keeps rare) move the tail. */
#include <stdlib.h>
#include <string.h>

#include "hal/src/core.h"

static pthread_rwlock_t map_lock = PTHREAD_RWLOCK_INITIALIZER;
static hal_alloc_record_t *records;
static size_t record_count, record_capacity;

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
    pthread_rwlock_rdlock(&map_lock);
    size_t i = find_containing(ptr);
    bool found = i != SIZE_MAX;
    if (found)
        *out = records[i];
    pthread_rwlock_unlock(&map_lock);
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
}
