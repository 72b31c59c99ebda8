/* SPDX-License-Identifier: Apache-2.0 */
/* torch-hal public API: the vendor-neutral caching allocator.
 *
 * One allocator serves one device and one memory kind. It carves blocks out of segments it
 * obtains with hal_mem_alloc, keeps freed blocks cached per stream, splits and coalesces them,
 * and reuses a block freed on stream A for stream B only after an event recorded on A proves
 * that A's earlier work is done. A few blocks that a thread frees (up to 32 per thread and
 * stream) wait in a cache of that thread's for its next request of the same size on the same
 * stream; statistics count them as cached, and an allocation the rest of the cache cannot
 * serve, empty_cache, get_stats and reset_peak_stats take them back. Works over every backend.
 */
#ifndef HAL_ALLOCATOR_H
#define HAL_ALLOCATOR_H

#include "hal/hal_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hal_allocator_s *hal_allocator_t;

typedef struct hal_allocator_config {
    size_t struct_size;
    const void *next;
    hal_mem_kind_t kind; /* HAL_MEM_KIND_DEVICE (default), _HOST_PINNED or _SHARED */
    uint32_t reserved;
    size_t max_split_size; /* blocks above this are never split; 0 = no limit */
    size_t small_segment;  /* segment size serving requests <= 1 MiB; 0 = 2 MiB */
    size_t large_round;    /* larger segments are rounded up to this; 0 = 2 MiB */
} hal_allocator_config_t;

#define HAL_ALLOCATOR_CONFIG_INIT                                                  \
    {                                                                              \
        .struct_size = sizeof(hal_allocator_config_t), .kind = HAL_MEM_KIND_DEVICE \
    }

typedef struct hal_allocator_stats {
    size_t struct_size;
    const void *next;
    uint64_t allocated_bytes;      /* bytes in blocks handed out (rounded sizes) */
    uint64_t requested_bytes;      /* bytes asked for by live allocations */
    uint64_t reserved_bytes;       /* bytes in segments obtained from the device */
    uint64_t peak_allocated_bytes; /* since creation or the last reset */
    uint64_t peak_reserved_bytes;
    uint64_t alloc_count; /* successful hal_allocator_alloc calls */
    uint64_t free_count;
    uint64_t segment_alloc_count; /* hal_mem_alloc calls made */
    uint64_t segment_free_count;
    uint64_t cache_hits; /* allocations served without hal_mem_alloc */
    uint64_t oom_count;  /* allocations that failed for lack of memory */
    uint64_t active_blocks;
    uint64_t cached_blocks; /* free blocks held in the cache */
    uint64_t cached_bytes;
    uint64_t largest_cached_block;
    double fragmentation; /* 1 - largest_cached_block / cached_bytes (0 if none) */
} hal_allocator_stats_t;

#define HAL_ALLOCATOR_STATS_INIT                     \
    {                                                \
        .struct_size = sizeof(hal_allocator_stats_t) \
    }

/* Creates an allocator.
 * [in]  device  the device whose memory is cached.
 * [in]  config  optional (NULL = defaults); struct_size must be set.
 * [out] out     receives the handle.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (out NULL, bad config);
 * HAL_ERROR_UNSUPPORTED (kind not supported by the device); HAL_ERROR_OUT_OF_HOST_MEMORY.
 * Thread safety: safe. */
HAL_API hal_status_t hal_allocator_create(hal_device_t device, const hal_allocator_config_t *config,
                                          hal_allocator_t *out);

/* Releases every cached segment and destroys the allocator.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_BUSY (blocks are still allocated; nothing
 * is destroyed).
 * Thread safety: not with other calls on the same allocator. */
HAL_API hal_status_t hal_allocator_destroy(hal_allocator_t allocator);

/* Allocates a block usable on `stream` in stream order. When the device is out of memory, the
 * allocator waits for pending cross-stream frees, releases cached segments and retries once.
 * [in]  size    bytes; 0 yields *ptr = NULL.
 * [in]  stream  the stream that will use the block (NULL = the device's default stream).
 * [out] ptr     receives the address (alignment at least 512 bytes).
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (ptr NULL, stream of
 * another device); HAL_ERROR_OUT_OF_DEVICE_MEMORY (device kinds) or
 * HAL_ERROR_OUT_OF_HOST_MEMORY (host kinds).
 * Thread safety: safe. */
HAL_API hal_status_t hal_allocator_alloc(hal_allocator_t allocator, size_t size,
                                         hal_stream_t stream, void **ptr);

/* Returns a block to the cache. It can be reused at once on its allocation stream; on other
 * streams only after events prove the streams that used it are done (see record_stream). A
 * stream may be destroyed while blocks allocated or recorded on it are live or cached: its work
 * is then done, so those blocks need no wait for it, and the allocator never uses it again.
 * [in] ptr  an address returned by hal_allocator_alloc on this allocator (NULL is a no-op).
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (not a live block of
 * this allocator: double free, interior or foreign pointer).
 * Thread safety: safe. */
HAL_API hal_status_t hal_allocator_free(hal_allocator_t allocator, void *ptr);

/* Marks a block as used on another stream, so that it is not reused until that stream's work
 * enqueued before the block's free has completed (PyTorch's recordStream).
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE (allocator or stream, NULL included);
 * HAL_ERROR_INVALID_ARGUMENT (not a live block, stream of another device).
 * Thread safety: safe. */
HAL_API hal_status_t hal_allocator_record_stream(hal_allocator_t allocator, void *ptr,
                                                 hal_stream_t stream);

/* Returns all free cached segments to the device (waiting for pending cross-stream frees).
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; errors of the streams waited on.
 * Thread safety: safe. */
HAL_API hal_status_t hal_allocator_empty_cache(hal_allocator_t allocator);

/* Reports statistics. [in,out] stats: struct_size must be set.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (stats NULL or small).
 * Thread safety: safe. */
HAL_API hal_status_t hal_allocator_get_stats(hal_allocator_t allocator,
                                             hal_allocator_stats_t *stats);

/* Resets the peak figures to the current values.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE.
 * Thread safety: safe. */
HAL_API hal_status_t hal_allocator_reset_peak_stats(hal_allocator_t allocator);

/* Finds the live block containing ptr.
 * [out] base, size  optional; the block's address and requested size.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_NOT_FOUND.
 * Thread safety: safe. */
HAL_API hal_status_t hal_allocator_get_block(hal_allocator_t allocator, const void *ptr,
                                             void **base, size_t *size);

/* What a block of a snapshot holds. */
typedef enum hal_allocator_block_state {
    HAL_ALLOCATOR_BLOCK_ALLOCATED = 1,    /* handed out by hal_allocator_alloc, not freed */
    HAL_ALLOCATOR_BLOCK_CACHED = 2,       /* free, cached for reuse */
    HAL_ALLOCATOR_BLOCK_PENDING_FREE = 3, /* freed, held until the streams recorded on it are
                                           * done (hal_allocator_record_stream) */
} hal_allocator_block_state_t;

/* One block of a snapshot, with the segment (one hal_mem_alloc) it was carved from. */
typedef struct hal_allocator_block_info {
    size_t struct_size;
    const void *next;
    void *segment_address; /* the segment's base address */
    size_t segment_size;
    void *address;
    size_t size;         /* bytes the block spans (rounded) */
    size_t requested;    /* bytes asked for (allocated blocks); 0 for the others */
    hal_stream_t stream; /* the stream whose pool holds it (the device's default stream for
                          * blocks allocated with NULL); NULL: the pool of no stream */
    hal_allocator_block_state_t state;
    uint32_t small_segment; /* 1: the segment serves requests up to 1 MiB */
} hal_allocator_block_info_t;

/* Receives one block of a snapshot; `info` lives until the call returns. */
typedef void (*hal_allocator_block_visitor_t)(const hal_allocator_block_info_t *info, void *user);

/* Lists every block of every segment the allocator holds, segments in address order and the
 * blocks of a segment in address order, so that each segment's blocks tile it exactly (what
 * torch.cuda.memory._snapshot() reports of CUDA's allocator). The blocks are copied under the
 * allocator's lock and then passed to `visitor` without it, so the visitor may call the
 * allocator; the listing is the state at one instant. Free blocks are reported coalesced.
 * [in] visitor  called once per block, in order.
 * [in] user     passed to visitor.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (visitor NULL);
 * HAL_ERROR_OUT_OF_HOST_MEMORY (nothing was visited).
 * Thread safety: safe. */
HAL_API hal_status_t hal_allocator_snapshot(hal_allocator_t allocator,
                                            hal_allocator_block_visitor_t visitor, void *user);

#ifdef __cplusplus
}
#endif

#endif /* HAL_ALLOCATOR_H */
