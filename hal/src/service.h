/* SPDX-License-Identifier: Apache-2.0 */
/* Internal to the HAL: what the core offers the services built on the public API (the caching
 * allocator under hal/services/, the bootstrap): error reporting, handle headers and checks,
 * handle memory, and the stream listeners, without the layouts of the core's objects. Where a
 * service needs a field of a device or stream, it asks an accessor below (service.c).
 * core.h includes this header, so each of these has one declaration. */
#ifndef HAL_SRC_SERVICE_H
#define HAL_SRC_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/hal.h"

/* Every handle starts with a magic number naming its type. A destroyed handle's magic is set to
 * HAL_MAGIC_DEAD before its memory goes to the quarantine (see handle_pool.c). */
enum {
    HAL_MAGIC_BACKEND = 0x48424b31, /* "HBK1" */
    HAL_MAGIC_DEVICE = 0x48445631,  /* "HDV1" */
    HAL_MAGIC_STREAM = 0x48535431,  /* "HST1" */
    HAL_MAGIC_EVENT = 0x48455631,   /* "HEV1" */
    HAL_MAGIC_ALLOCATOR = 0x48414c31,
    HAL_MAGIC_COMM = 0x48434d31,    /* "HCM1" */
    HAL_MAGIC_PROGRAM = 0x48505231, /* "HPR1" */
    HAL_MAGIC_KERNEL = 0x484b4e31,  /* "HKN1" */
    HAL_MAGIC_DEAD = 0x44454144,    /* "DEAD" */
    HAL_MAGIC_FORKED = 0x464f524b,  /* "FORK": the parent's object, in a forked child */
};

typedef struct hal_object {
    uint32_t magic;
    uint32_t dead_type; /* the magic it had before it was destroyed (for messages) */
} hal_object_t;

/* ---- errors (status.c) ---- */

/* Records "<backend>: <call>: <formatted detail>" as the calling thread's last error and returns
 * status. backend may be NULL ("hal"). */
hal_status_t hal_error(hal_status_t status, const char *backend, const char *call, const char *fmt,
                       ...) __attribute__((format(printf, 4, 5)));

/* ---- handle checks ---- */

/* Explains why `h` is not a live object of type `magic`. Cold path. */
hal_status_t hal_bad_handle(const void *h, uint32_t magic, const char *type, const char *call);

#define HAL_LIKELY(x)   __builtin_expect(!!(x), 1)
#define HAL_UNLIKELY(x) __builtin_expect(!!(x), 0)

#define HAL_CHECK_HANDLE(h, MAGIC, type, call)                                          \
    do {                                                                                \
        if (HAL_UNLIKELY((h) == NULL || ((const hal_object_t *)(h))->magic != (MAGIC))) \
            return hal_bad_handle((h), (MAGIC), (type), (call));                        \
    } while (0)

#define HAL_CHECK_BACKEND(h, call) HAL_CHECK_HANDLE(h, HAL_MAGIC_BACKEND, "hal_backend_t", call)
#define HAL_CHECK_DEVICE(h, call)  HAL_CHECK_HANDLE(h, HAL_MAGIC_DEVICE, "hal_device_t", call)
#define HAL_CHECK_STREAM(h, call)  HAL_CHECK_HANDLE(h, HAL_MAGIC_STREAM, "hal_stream_t", call)
#define HAL_CHECK_EVENT(h, call)   HAL_CHECK_HANDLE(h, HAL_MAGIC_EVENT, "hal_event_t", call)

/* Whether h is a live object of type `magic`. Reads only the object header, which stays
 * readable after the object was destroyed (its memory is quarantined, see handle_pool.c), so it
 * also answers for a handle whose backend was closed. Thread safety: safe. */
static inline bool hal_handle_is_live(const void *h, uint32_t magic)
{
    return h != NULL && ((const hal_object_t *)h)->magic == magic;
}

/* Propagates a non-OK status. */
#define HAL_CHECK(expr)                          \
    do {                                         \
        hal_status_t hal_check_status_ = (expr); \
        if (hal_check_status_ != HAL_OK)         \
            return hal_check_status_;            \
    } while (0)

/* Returns HAL_ERROR_INVALID_ARGUMENT ("<arg> is NULL", naming the backend and the call) when a
 * pointer argument is NULL. */
#define HAL_CHECK_NOT_NULL(arg, backend_name, call)                                                \
    do {                                                                                           \
        if (HAL_UNLIKELY((arg) == NULL))                                                           \
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, (backend_name), (call), #arg " is NULL"); \
    } while (0)

/* Stores a non-OK status in `st` and jumps to `label`. */
#define HAL_CHECK_GOTO(expr, st, label) \
    do {                                \
        (st) = (expr);                  \
        if ((st) != HAL_OK)             \
            goto label;                 \
    } while (0)

#define HAL_CONTAINER_OF(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* ---- handle memory (handle_pool.c) ---- */

/* Allocates zeroed memory for a handle of `size` bytes (<= HAL_HANDLE_MAX_SIZE). */
void *hal_handle_alloc(size_t size);
/* Marks a handle dead and quarantines its memory; with keep_forever it is never reused. */
void hal_handle_release(void *handle, bool keep_forever);
#define HAL_HANDLE_MAX_SIZE 1024

/* ---- stream listeners (device.c) ---- */

/* A service that keeps stream handles of its own (the caching allocator's pools) registers one
 * of these with the device: hal_stream_destroy calls `retired` after the stream finished its work
 * and before the backend stream goes, while no other listener call is in progress. Afterwards
 * the service must not use the handle. */
typedef struct hal_stream_listener {
    void (*retired)(struct hal_stream_listener *listener, hal_stream_t stream);
    struct hal_stream_listener *next;
} hal_stream_listener_t;

/* Adds or removes a stream listener (see hal_stream_listener_t). Removal waits for a call in
 * progress. Thread safety: safe. */
void hal_device_add_stream_listener(hal_device_t device, hal_stream_listener_t *listener);
void hal_device_remove_stream_listener(hal_device_t device, hal_stream_listener_t *listener);

/* ---- accessors (service.c) ---- */

/* The device a live stream belongs to. [in] stream: a live stream handle (not checked).
 * Thread safety: safe. */
hal_device_t hal_stream_device(hal_stream_t stream);

/* Whether the device's backend runs with the validation layer (HAL_LAYERS=validation), whose
 * released handles the core never reuses; a service releases its own handles the same way.
 * [in] device: a live device handle (not checked). Thread safety: safe. */
bool hal_device_validates(hal_device_t device);

#endif /* HAL_SRC_SERVICE_H */
