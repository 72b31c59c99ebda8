/* SPDX-License-Identifier: Apache-2.0 */
/* torch-hal backend ABI: what a backend library implements.
 *
 * A backend is a shared library exporting one symbol, HAL_BACKEND_ENTRY_SYMBOL, of type
 * hal_backend_entry_fn. It returns a static ops table. The table starts with struct_size and
 * api_version and only ever grows at the end: a slot beyond struct_size, or a NULL slot, reads
 * as HAL_ERROR_UNSUPPORTED. The loader rejects a table whose major version differs from its own.
 *
 * The HAL core owns every handle the application sees and does all argument and handle
 * checking; backend slots receive their own objects (the void * they returned) and resolved
 * pointers, and may assume valid arguments. A slot that fails calls host->set_error() with a
 * message naming the native call, then returns the status; the core prefixes the backend and
 * HAL function names. Backends must not print to stdout, abort or exit. */
#ifndef HAL_BACKEND_ABI_H
#define HAL_BACKEND_ABI_H

#include "hal/hal_comm.h"
#include "hal/hal_types.h"
#include "hal/hal_version.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HAL_BACKEND_ENTRY_SYMBOL "hal_backend_get_ops"

/* A pointer resolved by the core for a backend slot. For memory the HAL did not allocate
 * (pageable host memory) kind is HAL_MEM_KIND_UNREGISTERED and device/base/cookie are NULL. */
typedef struct hal_backend_ptr {
    void *ptr;           /* the address the application passed */
    hal_mem_kind_t kind; /* kind of the containing allocation */
    uint32_t reserved;
    void *device;  /* backend device object that allocated it */
    void *base;    /* start of the allocation */
    size_t size;   /* size of the allocation */
    void *cookie;  /* what mem_alloc returned for the allocation (e.g. a native buffer object) */
    size_t offset; /* ptr - base */
} hal_backend_ptr_t;

/* Services the core offers a backend (passed to init; valid until fini returns). */
typedef struct hal_host_services {
    size_t struct_size;
    uint32_t api_version;
    uint32_t reserved;
    /* Records the detail of the error the backend is about to return, printf-style, for the
     * calling thread. Example: set_error("nrt_tensor_allocate returned NRT_RESOURCE (4)"). */
    void (*set_error)(const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 1, 2)))
#endif
        ;
    /* Since 1.1. Returns and clears the detail left by set_error on the calling thread, or NULL.
     * A backend that runs HAL code on its own threads (stream_launch_host_fn) uses it to keep
     * the message of a failed function with the stream's latched error. */
    const char *(*take_error)(void);
} hal_host_services_t;

/* A host function run in stream order (stream_launch_host_fn). stream_status is HAL_OK or the
 * error already latched on the stream; a non-OK return latches on the stream. */
typedef hal_status_t (*hal_stream_host_fn_t)(void *arg, hal_status_t stream_status);

/* What a backend's native comm_init gets (since 1.1). The bootstrap functions exchange small
 * blobs among the ranks (e.g. a native unique id); they block and honour the timeout. */
typedef struct hal_backend_comm_args {
    size_t struct_size;
    int nranks;
    int rank;
    uint32_t timeout_ms;
    void *bootstrap; /* pass to the functions below */
    /* Gathers `size` bytes from every rank into out (nranks * size bytes, by rank). */
    hal_status_t (*allgather)(void *bootstrap, const void *mine, size_t size, void *out);
    /* Copies root's `size` bytes into data on every rank. */
    hal_status_t (*broadcast)(void *bootstrap, void *data, size_t size, int root);
} hal_backend_comm_args_t;

typedef struct hal_backend_ops {
    size_t struct_size;   /* sizeof(hal_backend_ops_t) as the backend was compiled */
    uint32_t api_version; /* HAL_API_VERSION the backend was compiled against */
    uint32_t reserved;
    const char *name;             /* backend name, e.g. "cpu" */
    const char *device_type_name; /* name frameworks should give its devices, e.g. "neuron" */

    /* Version 1.0 slots. Statuses are as documented for the public function of the same name. */

    /* Initialises the backend; *backend is passed back to device_count/device_open/fini. */
    hal_status_t (*init)(const hal_host_services_t *host, void **backend);
    /* Releases the backend after the core closed every device. */
    void (*fini)(void *backend);

    hal_status_t (*device_count)(void *backend, uint32_t *count);
    hal_status_t (*device_open)(void *backend, uint32_t index, void **device);
    /* Called after every stream and event of the device was destroyed and its memory freed. */
    void (*device_close)(void *device);
    /* Fills props up to props->struct_size (the core passes a full-size struct). */
    hal_status_t (*device_get_properties)(void *device, hal_device_properties_t *props);
    hal_status_t (*device_synchronize)(void *device);
    hal_status_t (*device_get_native_handle)(void *device, uintptr_t *native);
    /* Bytes of device memory still available to mem_alloc. */
    hal_status_t (*device_get_free_memory)(void *device, uint64_t *free_bytes);

    /* size > 0, alignment a power of two (0 = default), kind supported per capabilities.
     * *cookie is stored with the allocation and handed back in hal_backend_ptr_t. */
    hal_status_t (*mem_alloc)(void *device, hal_mem_kind_t kind, size_t size, size_t alignment,
                              void **ptr, void **cookie);
    /* Frees immediately; the core has already waited for pending work where required. */
    hal_status_t (*mem_free)(void *device, hal_mem_kind_t kind, void *ptr, void *cookie);
    /* Ranges are validated: inside their allocations, not overlapping, n > 0. Pointers to
     * device memory belong to this backend (possibly another device of it). */
    hal_status_t (*memcpy_async)(void *stream, const hal_backend_ptr_t *dst,
                                 const hal_backend_ptr_t *src, size_t n);
    hal_status_t (*memset_async)(void *stream, const hal_backend_ptr_t *dst, int value, size_t n);

    hal_status_t (*stream_create)(void *device, int32_t priority, void **stream);
    /* Waits for pending work, then frees the stream; returns its latched error, if any. */
    hal_status_t (*stream_destroy)(void *stream);
    hal_status_t (*stream_query)(void *stream);
    hal_status_t (*stream_synchronize)(void *stream);
    /* The event may belong to another device of this backend. */
    hal_status_t (*stream_wait_event)(void *stream, void *event);
    hal_status_t (*stream_add_callback)(void *stream, hal_host_fn_t fn, void *user_data);
    hal_status_t (*stream_get_native_handle)(void *stream, uintptr_t *native);

    hal_status_t (*event_create)(void *device, uint32_t flags, void **event);
    /* Must be safe while streams still hold pending waits or records of the event. */
    void (*event_destroy)(void *event);
    /* The stream is on the event's device. */
    hal_status_t (*event_record)(void *event, void *stream);
    hal_status_t (*event_query)(void *event);
    hal_status_t (*event_synchronize)(void *event);
    hal_status_t (*event_elapsed_ms)(void *start, void *end, float *ms);
    hal_status_t (*event_get_native_handle)(void *event, uintptr_t *native);

    /* Optional: stream-ordered free. Without it the core frees from a host callback. */
    hal_status_t (*mem_free_async)(void *stream, void *device, hal_mem_kind_t kind, void *ptr,
                                   void *cookie);

    /* ---- Version 1.1 slots ---- */

    /* Optional: runs fn in stream order; a non-OK return latches on the stream (keep the detail
     * from host->take_error()). fn may block (e.g. waiting for peers): do not let it hold
     * resources other streams of the device need. Without it the HAL uses stream_add_callback
     * and latches failures on the communicator only. */
    hal_status_t (*stream_launch_host_fn)(void *stream, hal_stream_host_fn_t fn, void *arg);

    /* Optional (HAL_DEVICE_CAP_IPC): another process on the same host maps device memory.
     * export fills the handle for the allocation containing ptr->ptr (the handle names ptr->ptr
     * itself, offset included, and the bytes from there to the allocation's end); open maps it
     * into this process: *ptr is usable like the exporter's pointer, *size the bytes from it to
     * the allocation's end, *cookie is handed back to close and in hal_backend_ptr_t; close
     * unmaps what open returned. */
    hal_status_t (*mem_ipc_export)(void *device, const hal_backend_ptr_t *ptr,
                                   hal_ipc_handle_t *handle);
    hal_status_t (*mem_ipc_open)(void *device, const hal_ipc_handle_t *handle, void **ptr,
                                 size_t *size, void **cookie);
    hal_status_t (*mem_ipc_close)(void *device, void *ptr, void *cookie);

    /* Optional native collectives. comm_init creates the backend's communicator; each collective
     * slot then overrides the HAL's host implementation for that call (slot by slot). Buffers
     * are resolved and checked by the core; they are memory of the communicator's device. */
    hal_status_t (*comm_init)(void *device, const hal_backend_comm_args_t *args, void **comm);
    hal_status_t (*comm_destroy)(void *comm);
    hal_status_t (*comm_abort)(void *comm);
    hal_status_t (*comm_get_async_error)(void *comm);
    hal_status_t (*comm_get_native_handle)(void *comm, uintptr_t *native);
    hal_status_t (*allreduce)(void *comm, void *stream, const hal_backend_ptr_t *send,
                              const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype,
                              hal_redop_t op);
    hal_status_t (*broadcast)(void *comm, void *stream, const hal_backend_ptr_t *send,
                              const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype,
                              int root);
    hal_status_t (*reduce)(void *comm, void *stream, const hal_backend_ptr_t *send,
                           const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype,
                           hal_redop_t op, int root);
    hal_status_t (*allgather)(void *comm, void *stream, const hal_backend_ptr_t *send,
                              const hal_backend_ptr_t *recv, size_t sendcount, hal_dtype_t dtype);
    hal_status_t (*reduce_scatter)(void *comm, void *stream, const hal_backend_ptr_t *send,
                                   const hal_backend_ptr_t *recv, size_t recvcount,
                                   hal_dtype_t dtype, hal_redop_t op);
    hal_status_t (*alltoall)(void *comm, void *stream, const hal_backend_ptr_t *send,
                             const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype);
    hal_status_t (*send)(void *comm, void *stream, const hal_backend_ptr_t *send, size_t count,
                         hal_dtype_t dtype, int peer);
    hal_status_t (*recv)(void *comm, void *stream, const hal_backend_ptr_t *recv, size_t count,
                         hal_dtype_t dtype, int peer);
    /* Brackets the native calls of one HAL group (hal_group_begin/end). */
    hal_status_t (*group_begin)(void *backend);
    hal_status_t (*group_end)(void *backend);
} hal_backend_ops_t;

/* The one symbol a backend exports.
 * [in]  host_api_version  HAL_API_VERSION of the loading core.
 * [out] ops               receives the backend's static table.
 * Returns HAL_OK, or HAL_ERROR_VERSION_MISMATCH if the backend cannot serve that version. */
typedef hal_status_t (*hal_backend_entry_fn)(uint32_t host_api_version,
                                             const hal_backend_ops_t **ops);

#if defined(__GNUC__)
#define HAL_BACKEND_EXPORT __attribute__((visibility("default")))
#else
#define HAL_BACKEND_EXPORT
#endif

#ifdef __cplusplus
}
#endif

#endif /* HAL_BACKEND_ABI_H */
