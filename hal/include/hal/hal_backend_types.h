/* SPDX-License-Identifier: Apache-2.0 */
/* torch-hal backend ABI: the types a backend's slots receive (resolved pointers, the core's host
 * services, host functions, native-collective arguments) and the backend flags. Included by
 * hal_backend_abi.h, which is what a backend includes. */
#ifndef HAL_BACKEND_TYPES_H
#define HAL_BACKEND_TYPES_H

#include "hal/hal_comm.h"
#include "hal/hal_program.h"
#include "hal/hal_types.h"
#include "hal/hal_version.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* Since 1.2: a kernel argument as kernel_launch receives it. */
typedef struct hal_backend_kernel_arg {
    hal_kernel_arg_kind_t kind;
    uint32_t size;         /* as the application gave it */
    hal_backend_ptr_t ptr; /* POINTER: resolved by the core (ptr.ptr NULL for a NULL pointer) */
    uint8_t bytes[HAL_KERNEL_SCALAR_MAX]; /* SCALAR: the value, `size` bytes */
} hal_backend_kernel_arg_t;

/* Since 1.2: one launch (kernel_launch). Valid during the call only. */
typedef struct hal_backend_launch {
    uint32_t grid[3];  /* every entry >= 1 */
    uint32_t block[3]; /* every entry >= 1 */
    uint32_t shared_bytes;
    uint32_t nargs; /* <= HAL_KERNEL_ARGS_MAX */
    const hal_backend_kernel_arg_t *args;
    const char *kernel_name; /* for messages */
} hal_backend_launch_t;

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

#ifdef __cplusplus
}
#endif

#endif /* HAL_BACKEND_TYPES_H */
