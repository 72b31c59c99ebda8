/* SPDX-License-Identifier: Apache-2.0 */
/* Internal to the HAL core: object layouts, the allocation map, backend errors and the core's
 * own helpers. What the services may use as well is in service.h (included here). */
#ifndef HAL_SRC_CORE_H
#define HAL_SRC_CORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "hal/hal.h"
#include "hal/hal_backend_abi.h"
#include "hal/src/service.h"

struct hal_layer_inst;

struct hal_backend_s {
    hal_object_t obj;
    const hal_backend_ops_t *ops; /* full-size copy of the backend's table, or the outermost
                                     layer's (hal/layers/layer.h) */
    void *impl;
    bool validate;                 /* a layer that keeps destroyed handles (validation) is on */
    struct hal_layer_inst *layers; /* the outermost layer of the chain, or NULL */
    int refcount;                  /* guarded by the loader's lock */
    void *dl;
    char *path; /* resolved library path, identifies the instance */
    hal_backend_ops_t ops_storage;
    uint32_t device_count;
    struct hal_device_s **devices;
    struct hal_backend_s *next_open;
};

typedef struct hal_live_list {
    struct hal_live_link *head;
} hal_live_list_t;

typedef struct hal_live_link {
    struct hal_live_link *prev, *next;
    hal_object_t *owner; /* the object the link is in (NULL in a sentinel) */
} hal_live_link_t;

struct hal_device_s {
    hal_object_t obj;
    const hal_backend_ops_t *ops;
    void *impl;
    struct hal_backend_s *backend;
    uint32_t index;
    struct hal_stream_s *default_stream;
    hal_device_properties_t props; /* cached at open */
    pthread_mutex_t lock;          /* guards the live lists */
    hal_live_link_t streams;       /* circular list sentinel */
    hal_live_link_t events;
    hal_live_link_t comms;
    hal_live_link_t programs;
    /* Never taken under a listener's own lock: listeners take theirs inside it. */
    pthread_mutex_t listeners_lock;
    hal_stream_listener_t *listeners;
    /* raw allocation statistics */
    _Atomic uint64_t device_bytes, device_peak, device_allocs, pinned_bytes, shared_bytes;
    _Atomic uint64_t alloc_calls, free_calls;
};

struct hal_stream_s {
    hal_object_t obj;
    const hal_backend_ops_t *ops;
    void *impl;
    struct hal_device_s *device;
    int32_t priority;
    bool is_default;
    hal_live_link_t link;
};

struct hal_event_s {
    hal_object_t obj;
    const hal_backend_ops_t *ops;
    void *impl;
    struct hal_device_s *device;
    uint32_t flags;
    hal_live_link_t link;
};

struct hal_kernel_s {
    hal_object_t obj;
    struct hal_program_s *program;
    void *impl; /* the backend's cookie */
    hal_kernel_info_t info;
    hal_kernel_tensor_info_t *tensors; /* tensor arguments (StableHLO), else NULL */
    struct hal_kernel_s *next;         /* the program's kernels, guarded by its lock */
};

struct hal_program_s {
    hal_object_t obj;
    const hal_backend_ops_t *ops;
    void *impl;
    struct hal_device_s *device;
    hal_program_format_t format;
    hal_live_link_t link;
    pthread_mutex_t lock; /* guards kernels */
    struct hal_kernel_s *kernels;
};

/* ---- errors (status.c) ---- */

/* After a backend slot returned `status`, prefixes the detail the backend left through
 * host->set_error (or the status name) with backend and call names. */
hal_status_t hal_backend_error(hal_status_t status, const hal_backend_ops_t *ops, const char *call);

/* host->set_error and host->take_error for backends. */
void hal_host_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *hal_host_take_error(void);

/* ---- backend calls ---- */

/* Leaves "the backend does not implement <slot>" as the backend's detail; returns
 * HAL_ERROR_UNSUPPORTED. */
hal_status_t hal_slot_missing(const char *slot);

/* Calls a slot, or reports HAL_ERROR_UNSUPPORTED if the backend left it empty. The result must
 * go through hal_finish (or hal_backend_error), which names the backend and the call. */
#define HAL_SLOT_CALL(ops, slot, ...) \
    (HAL_LIKELY((ops)->slot != NULL) ? (ops)->slot(__VA_ARGS__) : hal_slot_missing(#slot))

/* Passes HAL_OK and HAL_NOT_READY through; names the backend and call in any error. */
static inline hal_status_t hal_finish(hal_status_t st, const hal_backend_ops_t *ops,
                                      const char *call)
{
    if (HAL_LIKELY(st == HAL_OK || st == HAL_NOT_READY))
        return st;
    return hal_backend_error(st, ops, call);
}

/* ---- live lists ---- */
void hal_live_init(hal_live_link_t *sentinel);
void hal_live_insert(hal_live_link_t *sentinel, hal_live_link_t *link, hal_object_t *owner);
void hal_live_remove(hal_live_link_t *link);

/* ---- allocation map (mem_map.c) ---- */
typedef struct hal_alloc_record {
    char *base;
    size_t size;
    hal_mem_kind_t kind;
    struct hal_device_s *device;
    void *cookie;
    bool free_pending; /* a stream-ordered free is queued */
    bool ipc_mapped;   /* opened with hal_mem_ipc_open_handle, not allocated here */
} hal_alloc_record_t;

/* Inserts a record (copied). Returns HAL_ERROR_OUT_OF_HOST_MEMORY or HAL_ERROR_INTERNAL if the
 * range overlaps a live one. */
hal_status_t hal_mem_map_insert(const hal_alloc_record_t *record);
/* Finds the record whose range contains ptr; copies it out. Returns false if none. */
bool hal_mem_map_lookup(const void *ptr, hal_alloc_record_t *out);
/* Removes the record with exactly this base if it is live and not pending; copies it out. With
 * mark_pending, the record stays and is flagged free_pending instead. */
bool hal_mem_map_take(const void *base, bool mark_pending, hal_alloc_record_t *out);
/* Removes the record with this base even if a deferred free flagged it. */
bool hal_mem_map_remove(const void *base);
/* Removes and returns (via callback) every record belonging to `device`. */
void hal_mem_map_drain_device(struct hal_device_s *device,
                              void (*fn)(const hal_alloc_record_t *record, void *ctx), void *ctx);

/* Resolves [ptr, ptr + n) for a backend slot called on stream s (memory.c): fills *out (kind
 * HAL_MEM_KIND_UNREGISTERED and *owner NULL for memory the HAL did not allocate); rejects a NULL
 * ptr, a range that leaves its allocation and memory of another backend, naming `what` and
 * `call`. Thread safety: safe. */
hal_status_t hal_mem_resolve(const void *ptr, size_t n, struct hal_stream_s *s, const char *what,
                             const char *call, hal_backend_ptr_t *out, struct hal_device_s **owner);

/* Frees a record's memory through its backend and updates statistics. */
hal_status_t hal_mem_release_record(const hal_alloc_record_t *record, const char *call);

/* ---- layers (hal/layers) ---- */

/* Explains a free of a pointer that is not a live allocation: a double free or a foreign pointer
 * as far as the validation layer can tell (validation.c). Sets the message; the caller returns
 * HAL_ERROR_INVALID_ARGUMENT. */
void hal_validation_on_free_failure(const void *ptr, const char *call);

/* Tells every layer of b's chain about an object or allocation the application left behind
 * (hal_layer_t.leak); called by the core when the backend closes, before it cleans it up. */
void hal_layers_report_leak(struct hal_backend_s *b, const char *what, const void *handle,
                            size_t bytes);

/* Forgets every open backend and allocation in a forked child, where the parent's backend
 * threads do not exist: the child starts from a clean loader (loader.c, mem_map.c), and every
 * object of the backends in the list (linked by next_open) is marked HAL_MAGIC_FORKED, so that
 * using it is HAL_ERROR_INVALID_HANDLE instead of work queued to threads that are gone
 * (fork.c). */
void hal_forget_objects_after_fork(struct hal_backend_s *open_backends);
void hal_mem_map_reset_after_fork(void);
void hal_handle_pool_reset_after_fork(void);

/* Set by the collectives front end: aborts and destroys the communicators still alive on a
 * device that is being closed (they use its streams). NULL until a communicator exists; accessed
 * with __atomic builtins. */
extern void (*hal_comm_close_device_hook)(struct hal_device_s *device);

/* ---- devices (device.c) ---- */

hal_status_t hal_device_open_all(struct hal_backend_s *backend);
void hal_device_close_all(struct hal_backend_s *backend);

/* ---- streams and events (stream.c / event.c) ---- */
hal_status_t hal_stream_create_internal(struct hal_device_s *device, int32_t priority,
                                        bool is_default, hal_stream_t *out);
void hal_stream_destroy_internal(struct hal_stream_s *stream);
void hal_event_destroy_internal(struct hal_event_s *event);

/* ---- programs (program.c) ---- */
/* Destroys a program and its kernels (the caller removed it from its device's list). */
void hal_program_destroy_internal(struct hal_program_s *program);

/* ---- dtypes (dtype.c) ---- */

/* Bytes of one element of dtype (program-only types included), 0 for an unknown one.
 * Thread safety: safe. */
size_t hal_dtype_bytes(hal_dtype_t dtype);

#endif /* HAL_SRC_CORE_H */
