/* SPDX-License-Identifier: Apache-2.0 */
/* Backend toolkit: devices of the host-queue engine: initialisation, the list of streams that
 * device_synchronize waits for, the sticky lost-device latch, and fork generations. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/common/hq_internal.h"

/* ---- fork generations ---------------------------------------------------------------------- */

/* Bumped in each forked child, so objects of the parent are recognised as dead there. The
 * handler only increments an atomic: whatever locks the parent's threads held at the fork stay
 * untouched, which is why every object checks its generation before taking any of them. */
_Atomic uint64_t hq_fork_generation;
static pthread_once_t hq_atfork_once = PTHREAD_ONCE_INIT;

static void hq_after_fork_in_child(void)
{
    atomic_fetch_add_explicit(&hq_fork_generation, 1, memory_order_relaxed);
}

static void hq_install_atfork(void)
{
    pthread_atfork(NULL, NULL, hq_after_fork_in_child);
}

hal_status_t hq_stale_error(const hq_device_t *device, const char *what)
{
    hq_set_error(device->host,
                 "%s was created before fork() in the parent process; its worker threads do "
                 "not exist in this process (open a new device here)",
                 what);
    return HAL_ERROR_DEVICE_LOST;
}

/* ---- lifetime ------------------------------------------------------------------------------ */

hal_status_t hq_device_init(hq_device_t *device, const hq_device_config_t *config)
{
    pthread_once(&hq_atfork_once, hq_install_atfork);
    memset(device, 0, sizeof(*device));
    device->host = config->host;
    device->index = config->index;
    snprintf(device->thread_prefix, sizeof(device->thread_prefix), "%s",
             config->thread_prefix != NULL ? config->thread_prefix : "hal-hq");
    device->spin_us = config->spin_us;
    device->callbacks_take_slot = config->callbacks_take_slot;
    device->stream_ext_size = config->stream_ext_size;
    device->stream_ext_fini = config->stream_ext_fini;
    device->generation = hq_generation_now();
    atomic_init(&device->lost, false);
    if (hq_sched_init(&device->sched, config->slots, config->spin_us) != HAL_OK) {
        hq_set_error(device->host, "pthread_mutex_init failed for the scheduler of device %u",
                     device->index);
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    if (pthread_mutex_init(&device->streams_lock, NULL) != 0) {
        hq_set_error(device->host, "pthread_mutex_init failed for device %u", device->index);
        goto out_destroy_sched;
    }
    return HAL_OK;

out_destroy_sched:
    hq_sched_destroy(&device->sched);
    return HAL_ERROR_OUT_OF_HOST_MEMORY;
}

void hq_device_fini(hq_device_t *device)
{
    if (hq_is_stale(device->generation))
        return; /* its locks may be held by threads that do not exist here */
    pthread_mutex_destroy(&device->streams_lock);
    hq_sched_destroy(&device->sched);
}

/* ---- synchronisation ----------------------------------------------------------------------- */

hal_status_t hq_device_synchronize(void *device_)
{
    hq_device_t *device = device_;
    if (hq_is_stale(device->generation))
        return hq_stale_error(device, "the device");
    enum { INLINE = 16 };
    hq_stream_t *inline_streams[INLINE];
    uint64_t inline_targets[INLINE];
    hq_stream_t **streams = inline_streams;
    uint64_t *targets = inline_targets;

    pthread_mutex_lock(&device->streams_lock);
    uint32_t n = device->stream_count;
    if (n > INLINE) {
        streams = malloc(n * sizeof(*streams));
        targets = malloc(n * sizeof(*targets));
        if (streams == NULL || targets == NULL) {
            pthread_mutex_unlock(&device->streams_lock);
            free(streams);
            free(targets);
            hq_set_error(device->host, "malloc failed listing %u streams of device %u", n,
                         device->index);
            return HAL_ERROR_OUT_OF_HOST_MEMORY;
        }
    }
    uint32_t i = 0;
    for (hq_stream_t *s = device->streams; s != NULL; s = s->dev_next, i++) {
        atomic_fetch_add(&s->refcount, 1);
        streams[i] = s;
        targets[i] = atomic_load_explicit(&s->submitted, memory_order_acquire);
    }
    pthread_mutex_unlock(&device->streams_lock);

    hal_status_t first = HAL_OK;
    for (i = 0; i < n; i++) {
        hal_status_t st = hq_stream_wait_idle(streams[i], targets[i]);
        if (first == HAL_OK && st != HAL_OK)
            first = hq_stream_latched(streams[i]);
        hq_stream_unref(streams[i]);
    }
    if (streams != inline_streams) {
        free(streams);
        free(targets);
    }
    if (first == HAL_OK)
        first = hq_device_check_lost(device);
    return first;
}

/* ---- loss ---------------------------------------------------------------------------------- */

void hq_device_mark_lost(hq_device_t *device, const char *fmt, ...)
{
    if (hq_is_stale(device->generation))
        return;
    pthread_mutex_lock(&device->streams_lock);
    if (!atomic_load_explicit(&device->lost, memory_order_relaxed)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(device->lost_msg, sizeof(device->lost_msg), fmt, ap);
        va_end(ap);
        atomic_store_explicit(&device->lost, true, memory_order_release);
    }
    for (hq_stream_t *s = device->streams; s != NULL; s = s->dev_next)
        hq_stream_latch(s, HAL_ERROR_DEVICE_LOST, device->lost_msg);
    pthread_mutex_unlock(&device->streams_lock);
}

hal_status_t hq_device_check_lost(hq_device_t *device)
{
    if (hq_is_stale(device->generation))
        return hq_stale_error(device, "the device");
    if (!atomic_load_explicit(&device->lost, memory_order_acquire))
        return HAL_OK;
    hq_set_error(device->host, "%s", device->lost_msg);
    return HAL_ERROR_DEVICE_LOST;
}
