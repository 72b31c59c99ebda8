/* SPDX-License-Identifier: Apache-2.0 */
/* The validation layer (HAL_LAYERS=validation). The core always checks NULL and magic numbers;
 * with this layer on, it also never reuses the memory of destroyed handles (so every
 * use-after-destroy is caught, not only recent ones), tells a double free from a foreign
 * pointer, and reports every object and allocation still alive when a backend closes. */
#include <stdio.h>

#include "hal/src/core.h"

/* Recently freed base addresses, to tell a double free from a foreign pointer. */
#define FREED_RING 16384

static pthread_mutex_t freed_lock = PTHREAD_MUTEX_INITIALIZER;
static const void *freed_ring[FREED_RING];
static size_t freed_next;
static bool freed_any;
static _Atomic uint64_t leak_count;

void hal_validation_note_freed(const void *ptr)
{
    pthread_mutex_lock(&freed_lock);
    freed_ring[freed_next] = ptr;
    freed_next = (freed_next + 1) % FREED_RING;
    freed_any = true;
    pthread_mutex_unlock(&freed_lock);
}

void hal_validation_on_free_failure(const void *ptr, const char *call)
{
    bool was_freed = false, tracking;
    pthread_mutex_lock(&freed_lock);
    tracking = freed_any;
    for (size_t i = 0; i < FREED_RING && !was_freed; i++)
        was_freed = freed_ring[i] == ptr;
    pthread_mutex_unlock(&freed_lock);
    if (was_freed)
        hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "double free of %p", ptr);
    else if (tracking)
        hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                  "%p was never allocated through the HAL (foreign pointer)", ptr);
    else
        hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                  "%p is not a live HAL allocation (a double free or a foreign pointer; "
                  "HAL_LAYERS=validation tells which)",
                  ptr);
}

void hal_validation_report_leak(const char *backend, const char *what, const void *handle,
                                size_t bytes)
{
    atomic_fetch_add(&leak_count, 1);
    if (bytes)
        fprintf(stderr, "hal validation: %s: leaked %s %p (%zu bytes) at backend close\n", backend,
                what, handle, bytes);
    else
        fprintf(stderr, "hal validation: %s: leaked %s %p at backend close\n", backend, what,
                handle);
}

hal_status_t hal_validation_get_leak_count(uint64_t *count)
{
    if (!count)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, "hal_validation_get_leak_count",
                         "count is NULL");
    *count = atomic_load(&leak_count);
    return HAL_OK;
}
