/* SPDX-License-Identifier: Apache-2.0 */
/* torch-hal public API: handles, enumerations and descriptors shared by all areas. */
#ifndef HAL_TYPES_H
#define HAL_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/hal_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Handles --------------------------------------------------------------------------------
 * Opaque, typed pointers. A handle passed after it was destroyed, or a handle of the wrong type,
 * yields HAL_ERROR_INVALID_HANDLE. With HAL_LAYERS=validation that is guaranteed for every stale
 * handle; without it, for handles destroyed recently (destroyed handles are quarantined before
 * their memory is reused). */
typedef struct hal_backend_s *hal_backend_t;
typedef struct hal_device_s *hal_device_t;
typedef struct hal_stream_s *hal_stream_t;
typedef struct hal_event_s *hal_event_t;
typedef struct hal_program_s *hal_program_t; /* since 1.2 (hal_program.h) */
typedef struct hal_kernel_s *hal_kernel_t;   /* since 1.2; owned by its program */

/* Every extensible descriptor starts with this header: the size the caller was compiled with
 * (fields beyond it are neither read nor written) and `next`, an optional chain of extensions. */
typedef struct hal_ext_header {
    size_t struct_size;
    const void *next;
} hal_ext_header_t;

/* What an extension in a `next` chain is (hal_extension_t.type). Values are never reused. */
typedef enum hal_extension_type {
    HAL_EXTENSION_TYPE_NONE = 0, /* ignored wherever it appears */
    HAL_EXTENSION_TYPE_FORCE_U32 = 0x7fffffff
} hal_extension_type_t;

/* The header of every extension struct, as PJRT's PJRT_Extension_Base: its size, a type tag
 * that says which struct it is, and the next extension. A reader walks the chain and uses the
 * extensions whose type it knows (hal_extension_find); unknown types are skipped. */
typedef struct hal_extension {
    size_t struct_size;
    hal_extension_type_t type;
    uint32_t reserved;
    const struct hal_extension *next;
} hal_extension_t;

/* True when a struct of `size` bytes (its struct_size as its writer was compiled) contains
 * `field` of `type`: how a reader of a struct that grows by minor versions tests for a field,
 * e.g. HAL_STRUCT_HAS(hal_device_properties_t, alignment, props->struct_size). */
#define HAL_STRUCT_HAS(type, field, size) \
    ((size_t)(size) >= offsetof(type, field) + sizeof(((type *)0)->field))

/* The first extension of `type` in the chain starting at `next` (a descriptor's `next`), or
 * NULL. The walk stops at an extension whose struct_size does not cover the header (a malformed
 * chain: its `next` is not read). Thread safety: safe (reads only). */
static inline const hal_extension_t *hal_extension_find(const void *next, hal_extension_type_t type)
{
    for (const hal_extension_t *e = (const hal_extension_t *)next; e; e = e->next) {
        if (!HAL_STRUCT_HAS(hal_extension_t, next, e->struct_size))
            return NULL;
        if (e->type == type)
            return e;
    }
    return NULL;
}

/* ---- Memory kinds -------------------------------------------------------------------------- */
typedef enum hal_mem_kind {
    HAL_MEM_KIND_UNREGISTERED = 0, /* not allocated through the HAL (pageable host memory) */
    HAL_MEM_KIND_DEVICE = 1,       /* device memory; host-dereferenceable only if the device
                                      property host_addressable is set */
    HAL_MEM_KIND_HOST_PINNED = 2,  /* page-locked host memory usable for async copies */
    HAL_MEM_KIND_SHARED = 3,       /* optional: memory addressable by host and device
                                      (HAL_DEVICE_CAP_SHARED_MEMORY) */
    HAL_MEM_KIND_FORCE_U32 = 0x7fffffff
} hal_mem_kind_t;

/* ---- Device capabilities (bits of hal_device_properties_t.capabilities) -------------------- */
#define HAL_DEVICE_CAP_SHARED_MEMORY      (UINT64_C(1) << 0) /* hal_mem_alloc(HAL_MEM_KIND_SHARED) */
#define HAL_DEVICE_CAP_TIMING_EVENTS      (UINT64_C(1) << 1) /* HAL_EVENT_FLAG_TIMING */
#define HAL_DEVICE_CAP_HOST_CALLBACKS     (UINT64_C(1) << 2) /* hal_stream_add_callback */
#define HAL_DEVICE_CAP_PEER_COPY          (UINT64_C(1) << 3) /* device-to-device copies across devices */
#define HAL_DEVICE_CAP_STREAM_FREE        (UINT64_C(1) << 4) /* native stream-ordered free */
#define HAL_DEVICE_CAP_IPC                (UINT64_C(1) << 5) /* hal_mem_ipc_* across processes */
#define HAL_DEVICE_CAP_FP8_COLLECTIVES    (UINT64_C(1) << 6) /* fp8 dtypes in collectives */
#define HAL_DEVICE_CAP_NATIVE_COLLECTIVES (UINT64_C(1) << 7) /* the backend runs collectives */
/* Since 1.2: hal_program_* and hal_kernel_* (the formats are in program_formats). */
#define HAL_DEVICE_CAP_PROGRAMS (UINT64_C(1) << 8)

/* ---- Backend flags (hal_backend_info_t.flags, hal_backend_ops_t.flags) ----------------------
 * What a backend says of itself before it is initialised (hal_backend_probe). */
/* Each device belongs to one process at a time (as the Neuron runtime takes its NeuronCores
 * when it starts). The trainium backend claims them at the process's first use of a device
 * (device memory, a program, a communicator), not at open; a backend that claims at open makes
 * a process that will not use them (a launcher of worker processes) unable to leave them to
 * others, which is why frameworks read this flag with hal_backend_probe before opening. */
#define HAL_BACKEND_FLAG_EXCLUSIVE_DEVICES (1u << 0)

#define HAL_DEVICE_NAME_MAX   256
#define HAL_DEVICE_VENDOR_MAX 64
#define HAL_BACKEND_NAME_MAX  64

/* Device properties. Set struct_size = sizeof(hal_device_properties_t) (or use
 * HAL_DEVICE_PROPERTIES_INIT); fields past struct_size are not written. */
typedef struct hal_device_properties {
    size_t struct_size;
    const void *next;
    char name[HAL_DEVICE_NAME_MAX];     /* e.g. "cpu virtual device 0", "NeuronCore-v2 (trn1)" */
    char vendor[HAL_DEVICE_VENDOR_MAX]; /* e.g. "torch-hal", "AWS", "NVIDIA" */
    uint32_t index;                     /* ordinal within its backend */
    uint32_t host_addressable;          /* 1: the host may dereference device pointers */
    uint64_t total_memory;              /* bytes of device memory */
    uint64_t capabilities;              /* HAL_DEVICE_CAP_* bits */
    /* Stream priorities follow CUDA: a numerically lower value is a higher priority. Valid
     * priorities are greatest <= p <= least; 0 is the default and always valid. */
    int32_t stream_priority_least;
    int32_t stream_priority_greatest;
    uint32_t alignment; /* guaranteed minimum alignment of allocations, bytes */
    /* Since 1.2 (0 before): the program formats the device loads, bit (1u << f) for each
     * hal_program_format_t f (hal_program.h). Nonzero only with HAL_DEVICE_CAP_PROGRAMS. */
    uint32_t program_formats;
    /* Since 1.2 (absent from a struct of HAL_DEVICE_PROPERTIES_SIZE_1_0 bytes): where the
     * device sits among its backend's devices on this host, whichever process owns them. A
     * backend whose devices each belong to one process (HAL_BACKEND_FLAG_EXCLUSIVE_DEVICES) may
     * open only some of the host's devices: node_index is then this device's index among all
     * of them (as CUDA numbers a node's GPUs) and node_device_count their number, so that a
     * framework can keep node-local device indices under a launcher that starts one process
     * per device. A backend that says nothing (node_device_count 0) is given node_index ==
     * index and node_device_count == its device count by the core. */
    uint32_t node_index;
    uint32_t node_device_count;
} hal_device_properties_t;

/* The size of a struct up to and including `last_field`: what a caller compiled against an
 * older version of the struct passes as struct_size. */
#define HAL_STRUCT_SIZE(type, last_field) \
    (offsetof(type, last_field) + sizeof(((type *)0)->last_field))

/* hal_device_properties_t as HAL 1.0 and 1.1 defined it (1.2 reused its last field, formerly
 * reserved, for program_formats). */
#define HAL_DEVICE_PROPERTIES_SIZE_1_0 HAL_STRUCT_SIZE(hal_device_properties_t, program_formats)

#define HAL_DEVICE_PROPERTIES_INIT                     \
    {                                                  \
        .struct_size = sizeof(hal_device_properties_t) \
    }

/* What the HAL knows about a pointer (hal_mem_get_info). */
typedef struct hal_mem_info {
    size_t struct_size;
    const void *next;
    hal_mem_kind_t kind; /* HAL_MEM_KIND_UNREGISTERED if the pointer is not in any allocation */
    uint32_t reserved;
    hal_device_t device; /* owning device; NULL when unregistered */
    void *base;          /* start of the allocation containing the pointer */
    size_t size;         /* size of that allocation as requested */
} hal_mem_info_t;

#define HAL_MEM_INFO_INIT                     \
    {                                         \
        .struct_size = sizeof(hal_mem_info_t) \
    }

/* Per-device memory statistics (hal_device_get_mem_stats): raw allocations made through
 * hal_mem_alloc on this device, all kinds counted separately. */
typedef struct hal_mem_stats {
    size_t struct_size;
    const void *next;
    uint64_t device_bytes_in_use;
    uint64_t device_peak_bytes_in_use;
    uint64_t device_allocations; /* live device allocations */
    uint64_t host_pinned_bytes_in_use;
    uint64_t shared_bytes_in_use;
    uint64_t total_alloc_calls;  /* successful hal_mem_alloc calls, all kinds */
    uint64_t total_free_calls;   /* successful hal_mem_free / hal_mem_free_async calls */
    uint64_t device_bytes_limit; /* capacity of device memory */
    uint64_t device_bytes_free;  /* capacity minus what the backend holds, as it reports */
} hal_mem_stats_t;

#define HAL_MEM_STATS_INIT                     \
    {                                          \
        .struct_size = sizeof(hal_mem_stats_t) \
    }

/* An inter-process memory handle (hal_mem_ipc_get_handle): plain bytes, safe to send to another
 * process on the same host. */
#define HAL_IPC_HANDLE_BYTES 64
typedef struct hal_ipc_handle {
    uint8_t bytes[HAL_IPC_HANDLE_BYTES];
} hal_ipc_handle_t;

/* ---- Events -------------------------------------------------------------------------------- */
#define HAL_EVENT_FLAG_NONE   0u
#define HAL_EVENT_FLAG_TIMING (1u << 0) /* record timestamps for hal_event_elapsed_ms */

/* Host callback run by a stream (hal_stream_add_callback). `stream_status` is HAL_OK, or the
 * error latched on the stream before the callback's turn came. */
typedef void (*hal_host_fn_t)(hal_status_t stream_status, void *user_data);

#ifdef __cplusplus
}
#endif

#endif /* HAL_TYPES_H */
