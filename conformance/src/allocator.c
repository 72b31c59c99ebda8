/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance: the caching allocator seen through its public API, over the backend under test
 * (its internals have their own unit tests). */
#include <stdlib.h>
#include <string.h>

#include "cts.h"

static int stats_of(hal_allocator_t a, hal_allocator_stats_t *s)
{
    memset(s, 0, sizeof(*s));
    s->struct_size = sizeof(*s);
    return CTS_EXPECT_OK(hal_allocator_get_stats(a, s)) ? 0 : -1;
}

int cts_allocator_create_destroy(cts_ctx_t *ctx)
{
    hal_allocator_t a = NULL, b = NULL;
    hal_allocator_config_t cfg = HAL_ALLOCATOR_CONFIG_INIT;
    hal_allocator_stats_t s;
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    CTS_CHECK_OK(hal_allocator_create(ctx->device, &cfg, &b));
    CTS_CHECK(a != NULL && b != NULL && a != b);
    CTS_CHECK(stats_of(a, &s) == 0);
    CTS_CHECK(s.allocated_bytes == 0 && s.reserved_bytes == 0 && s.alloc_count == 0);
    CTS_CHECK(s.active_blocks == 0 && s.fragmentation == 0.0);
    CTS_CHECK_OK(hal_allocator_destroy(a));
    CTS_CHECK_OK(hal_allocator_destroy(b));
    return CTS_PASS;
}

int cts_allocator_create_invalid(cts_ctx_t *ctx)
{
    hal_allocator_t a = NULL;
    hal_allocator_config_t cfg = HAL_ALLOCATOR_CONFIG_INIT;
    CTS_CHECK_STATUS(hal_allocator_create(ctx->device, NULL, NULL), HAL_ERROR_INVALID_ARGUMENT);
    cfg.struct_size = 0;
    CTS_CHECK_STATUS(hal_allocator_create(ctx->device, &cfg, &a), HAL_ERROR_INVALID_ARGUMENT);
    cfg.struct_size = sizeof(cfg);
    cfg.kind = HAL_MEM_KIND_UNREGISTERED;
    CTS_CHECK_STATUS(hal_allocator_create(ctx->device, &cfg, &a), HAL_ERROR_INVALID_ARGUMENT);
    cfg.kind = (hal_mem_kind_t)77;
    CTS_CHECK_STATUS(hal_allocator_create(ctx->device, &cfg, &a), HAL_ERROR_INVALID_ARGUMENT);
    /* Shared memory is optional. */
    cfg.kind = HAL_MEM_KIND_SHARED;
    if ((ctx->props.capabilities & HAL_DEVICE_CAP_SHARED_MEMORY) == 0) {
        CTS_CHECK_STATUS(hal_allocator_create(ctx->device, &cfg, &a), HAL_ERROR_UNSUPPORTED);
    } else {
        CTS_CHECK_OK(hal_allocator_create(ctx->device, &cfg, &a));
        CTS_CHECK_OK(hal_allocator_destroy(a));
    }
    return CTS_PASS;
}

int cts_allocator_alloc_free(cts_ctx_t *ctx)
{
    enum { SIZE = 1000 };
    hal_allocator_t a = NULL;
    hal_stream_t s = NULL;
    uint8_t *p = NULL, *q = NULL;
    void *base = NULL;
    size_t size = 0;
    uint8_t *back = cts_calloc(ctx, SIZE);
    CTS_CHECK(back != NULL);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    CTS_CHECK_OK(hal_allocator_alloc(a, SIZE, NULL, (void **)&p)); /* the default stream */
    CTS_CHECK_OK(hal_allocator_alloc(a, SIZE, s, (void **)&q));
    CTS_CHECK(p != NULL && q != NULL && p != q);
    CTS_CHECK((uintptr_t)p % 512 == 0 && (uintptr_t)q % 512 == 0);
    CTS_CHECK(q + SIZE <= p || p + SIZE <= q);
    CTS_CHECK_OK(hal_allocator_get_block(a, p + 10, &base, &size));
    CTS_CHECK(base == p && size == SIZE);
    CTS_CHECK_OK(hal_allocator_get_block(a, q, NULL, NULL));
    /* Blocks are ordinary device memory for the HAL. */
    hal_mem_info_t info = HAL_MEM_INFO_INIT;
    CTS_CHECK_OK(hal_mem_get_info(q, &info));
    CTS_CHECK(info.kind == HAL_MEM_KIND_DEVICE && info.device == ctx->device);
    CTS_CHECK_OK(hal_memset_async(q, 0x29, SIZE, s));
    CTS_CHECK_OK(cts_copy_sync(back, q, SIZE, s));
    CTS_CHECK(cts_bytes_find_other(back, SIZE, 0x29) == SIZE);
    CTS_CHECK_OK(hal_allocator_free(a, p));
    CTS_CHECK_OK(hal_allocator_free(a, q));
    CTS_CHECK_STATUS(hal_allocator_get_block(a, p, &base, &size), HAL_ERROR_NOT_FOUND);
    void *z = (void *)(uintptr_t)1;
    CTS_CHECK_OK(hal_allocator_alloc(a, 0, s, &z));
    CTS_CHECK(z == NULL);
    CTS_CHECK_OK(hal_allocator_free(a, NULL));
    CTS_CHECK_OK(hal_allocator_destroy(a));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_allocator_alloc_invalid(cts_ctx_t *ctx)
{
    hal_allocator_t a = NULL;
    hal_allocator_stats_t st;
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    CTS_CHECK_STATUS(hal_allocator_alloc(a, 64, NULL, NULL), HAL_ERROR_INVALID_ARGUMENT);
    hal_device_t other = cts_other_device(ctx);
    if (other != NULL) {
        hal_stream_t so = NULL;
        void *p = NULL;
        CTS_CHECK_OK(hal_stream_create(other, 0, &so));
        CTS_CHECK_STATUS(hal_allocator_alloc(a, 64, so, &p), HAL_ERROR_INVALID_ARGUMENT);
        CTS_CHECK_OK(hal_stream_destroy(so));
    }
    CTS_CHECK(stats_of(a, &st) == 0);
    CTS_CHECK(st.alloc_count == 0 && st.active_blocks == 0);
    CTS_CHECK_OK(hal_allocator_destroy(a));
    return CTS_PASS;
}

int cts_allocator_free_invalid(cts_ctx_t *ctx)
{
    hal_allocator_t a = NULL, b = NULL;
    uint8_t *p = NULL, *other_block = NULL;
    void *raw = NULL;
    void *heap = malloc(64);
    CTS_CHECK(heap != NULL);
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &b));
    CTS_CHECK_OK(hal_allocator_alloc(a, 4096, NULL, (void **)&p));
    CTS_CHECK_OK(hal_allocator_alloc(b, 4096, NULL, (void **)&other_block));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 4096, 0, &raw));
    hal_status_t st[4];
    st[0] = hal_allocator_free(a, p + 1);
    st[1] = hal_allocator_free(a, heap);
    st[2] = hal_allocator_free(a, raw);
    st[3] = hal_allocator_free(a, other_block);
    free(heap);
    for (int i = 0; i < 4; i++)
        CTS_CHECKF(cts_expect_status(st[i], HAL_ERROR_INVALID_ARGUMENT, __FILE__, __LINE__,
                                     "hal_allocator_free(not a live block)"),
                   "case %d", i);
    CTS_CHECK_OK(hal_allocator_get_block(a, p, NULL, NULL)); /* still live */
    CTS_CHECK_OK(hal_allocator_free(a, p));
    CTS_CHECK_STATUS(hal_allocator_free(a, p), HAL_ERROR_INVALID_ARGUMENT); /* double free */
    CTS_CHECK_OK(hal_allocator_free(b, other_block));
    CTS_CHECK_OK(hal_mem_free(raw));
    CTS_CHECK_OK(hal_allocator_destroy(a));
    CTS_CHECK_OK(hal_allocator_destroy(b));
    return CTS_PASS;
}

int cts_allocator_get_block_not_found(cts_ctx_t *ctx)
{
    hal_allocator_t a = NULL;
    void *base = NULL, *raw = NULL;
    size_t size = 0;
    int on_stack = 0;
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 4096, 0, &raw));
    CTS_CHECK_STATUS(hal_allocator_get_block(a, &on_stack, &base, &size), HAL_ERROR_NOT_FOUND);
    CTS_CHECK_STATUS(hal_allocator_get_block(a, NULL, &base, &size), HAL_ERROR_NOT_FOUND);
    CTS_CHECK_STATUS(hal_allocator_get_block(a, raw, &base, &size), HAL_ERROR_NOT_FOUND);
    CTS_CHECK_OK(hal_mem_free(raw));
    CTS_CHECK_OK(hal_allocator_destroy(a));
    return CTS_PASS;
}

/* A block freed on its stream is reused for the same stream from the cache. */
int cts_allocator_cache_reuse(cts_ctx_t *ctx)
{
    hal_allocator_t a = NULL;
    hal_stream_t s = NULL;
    void *p = NULL, *q = NULL;
    hal_allocator_stats_t before, after;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    CTS_CHECK_OK(hal_allocator_alloc(a, 4096, s, &p));
    CTS_CHECK_OK(hal_allocator_free(a, p));
    CTS_CHECK(stats_of(a, &before) == 0);
    CTS_CHECK(before.cached_blocks >= 1 && before.cached_bytes >= 4096);
    CTS_CHECK_OK(hal_allocator_alloc(a, 4096, s, &q));
    CTS_CHECK(stats_of(a, &after) == 0);
    CTS_CHECKF(after.cache_hits == before.cache_hits + 1 &&
                   after.segment_alloc_count == before.segment_alloc_count,
               "a same-size allocation on the same stream was not served from the cache");
    CTS_CHECK_OK(hal_allocator_free(a, q));
    CTS_CHECK_OK(hal_allocator_destroy(a));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

/* record_stream: a block used on stream B is not handed out again while B's work enqueued
 * before the free is pending. */
int cts_allocator_record_stream_delays_reuse(cts_ctx_t *ctx)
{
    enum { SIZE = 1 << 20 };
    hal_allocator_t a = NULL;
    hal_stream_t sa = NULL, sb = NULL;
    uint8_t *x = NULL, *y = NULL, *z = NULL;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &sa));
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &sb));
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    CTS_CHECK_OK(hal_allocator_alloc(a, SIZE, sa, (void **)&x));
    CTS_CHECK_OK(hal_allocator_record_stream(a, x, sb));
    cts_gate_t *g = cts_gate_new(ctx);
    CTS_CHECK_OK(cts_gate_enqueue(g, sb));
    CTS_CHECK_OK(hal_memset_async(x, 0x31, SIZE, sb)); /* B still uses x */
    CTS_CHECK_OK(hal_allocator_free(a, x));
    CTS_CHECK_OK(hal_allocator_alloc(a, SIZE, sa, (void **)&y));
    CTS_CHECKF(y + SIZE <= x || x + SIZE <= y,
               "a block still in use on another stream was handed out again (%p overlaps %p)",
               (void *)y, (void *)x);
    cts_gate_open(g);
    CTS_CHECK_OK(hal_stream_synchronize(sb));
    CTS_CHECK_OK(hal_allocator_alloc(a, SIZE, sa, (void **)&z));
    CTS_CHECK_OK(hal_allocator_free(a, y));
    CTS_CHECK_OK(hal_allocator_free(a, z));
    CTS_CHECK_OK(hal_allocator_destroy(a));
    CTS_CHECK_OK(hal_stream_destroy(sa));
    CTS_CHECK_OK(hal_stream_destroy(sb));
    return CTS_PASS;
}

int cts_allocator_record_stream_invalid(cts_ctx_t *ctx)
{
    hal_allocator_t a = NULL;
    hal_stream_t s = NULL;
    uint8_t *p = NULL;
    int on_stack = 0;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    CTS_CHECK_OK(hal_allocator_alloc(a, 4096, s, (void **)&p));
    CTS_CHECK_OK(hal_allocator_record_stream(a, p, s));
    CTS_CHECK_STATUS(hal_allocator_record_stream(a, &on_stack, s), HAL_ERROR_INVALID_ARGUMENT);
    hal_device_t other = cts_other_device(ctx);
    if (other != NULL) {
        hal_stream_t so = NULL;
        CTS_CHECK_OK(hal_stream_create(other, 0, &so));
        CTS_CHECK_STATUS(hal_allocator_record_stream(a, p, so), HAL_ERROR_INVALID_ARGUMENT);
        CTS_CHECK_OK(hal_stream_destroy(so));
    }
    CTS_CHECK_OK(hal_allocator_free(a, p));
    CTS_CHECK_STATUS(hal_allocator_record_stream(a, p, s), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_OK(hal_allocator_destroy(a));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_allocator_destroy_busy(cts_ctx_t *ctx)
{
    hal_allocator_t a = NULL;
    void *p = NULL, *q = NULL;
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    CTS_CHECK_OK(hal_allocator_alloc(a, 4096, NULL, &p));
    CTS_CHECK_STATUS(hal_allocator_destroy(a), HAL_ERROR_BUSY);
    /* Nothing was destroyed. */
    CTS_CHECK_OK(hal_allocator_get_block(a, p, NULL, NULL));
    CTS_CHECK_OK(hal_allocator_alloc(a, 4096, NULL, &q));
    CTS_CHECK_OK(hal_allocator_free(a, q));
    CTS_CHECK_OK(hal_allocator_free(a, p));
    CTS_CHECK_OK(hal_allocator_destroy(a));
    return CTS_PASS;
}

int cts_allocator_empty_cache(cts_ctx_t *ctx)
{
    hal_allocator_t a = NULL;
    hal_allocator_stats_t s;
    hal_mem_stats_t before = HAL_MEM_STATS_INIT, mid = HAL_MEM_STATS_INIT;
    hal_mem_stats_t after = HAL_MEM_STATS_INIT;
    void *p[4] = { 0 };
    CTS_CHECK_OK(hal_device_get_mem_stats(ctx->device, &before));
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    for (int i = 0; i < 4; i++)
        CTS_CHECK_OK(hal_allocator_alloc(a, (size_t)(i + 1) << 20, NULL, &p[i]));
    for (int i = 0; i < 4; i++)
        CTS_CHECK_OK(hal_allocator_free(a, p[i]));
    CTS_CHECK_OK(hal_device_get_mem_stats(ctx->device, &mid));
    CTS_CHECK(stats_of(a, &s) == 0);
    CTS_CHECK(s.reserved_bytes > 0 && s.allocated_bytes == 0);
    CTS_CHECK(mid.device_bytes_in_use >= before.device_bytes_in_use + s.reserved_bytes);
    CTS_CHECK_OK(hal_allocator_empty_cache(a));
    CTS_CHECK(stats_of(a, &s) == 0);
    CTS_CHECKF(s.reserved_bytes == 0 && s.cached_bytes == 0 && s.cached_blocks == 0,
               "after empty_cache %llu bytes are reserved", (unsigned long long)s.reserved_bytes);
    CTS_CHECK(s.segment_free_count == s.segment_alloc_count);
    CTS_CHECK_OK(hal_device_get_mem_stats(ctx->device, &after));
    CTS_CHECK(after.device_bytes_in_use == before.device_bytes_in_use);
    CTS_CHECK_OK(hal_allocator_destroy(a));
    return CTS_PASS;
}

int cts_allocator_stats(cts_ctx_t *ctx)
{
    hal_allocator_t a = NULL;
    hal_allocator_stats_t s;
    void *p = NULL, *q = NULL;
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    CTS_CHECK_OK(hal_allocator_alloc(a, 1000, NULL, &p));
    CTS_CHECK_OK(hal_allocator_alloc(a, 3 << 20, NULL, &q));
    CTS_CHECK(stats_of(a, &s) == 0);
    CTS_CHECK(s.requested_bytes == 1000 + (3 << 20));
    CTS_CHECK(s.allocated_bytes >= s.requested_bytes);
    CTS_CHECK(s.reserved_bytes >= s.allocated_bytes);
    CTS_CHECK(s.alloc_count == 2 && s.free_count == 0 && s.active_blocks == 2);
    CTS_CHECK(s.peak_allocated_bytes >= s.allocated_bytes);
    CTS_CHECK(s.peak_reserved_bytes >= s.reserved_bytes);
    CTS_CHECK(s.segment_alloc_count >= 1);
    CTS_CHECK(s.fragmentation >= 0.0 && s.fragmentation <= 1.0);
    CTS_CHECK_OK(hal_allocator_free(a, q));
    CTS_CHECK(stats_of(a, &s) == 0);
    CTS_CHECK(s.requested_bytes == 1000 && s.free_count == 1 && s.active_blocks == 1);
    CTS_CHECK(s.peak_allocated_bytes >= (uint64_t)(3 << 20));
    CTS_CHECK_OK(hal_allocator_reset_peak_stats(a));
    CTS_CHECK(stats_of(a, &s) == 0);
    CTS_CHECK(s.peak_allocated_bytes == s.allocated_bytes);
    CTS_CHECK(s.peak_reserved_bytes == s.reserved_bytes);
    CTS_CHECK_OK(hal_allocator_free(a, p));
    CTS_CHECK_OK(hal_allocator_destroy(a));
    return CTS_PASS;
}

int cts_allocator_stats_invalid(cts_ctx_t *ctx)
{
    hal_allocator_t a = NULL;
    hal_allocator_stats_t s;
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    CTS_CHECK_STATUS(hal_allocator_get_stats(a, NULL), HAL_ERROR_INVALID_ARGUMENT);
    memset(&s, 0, sizeof(s));
    CTS_CHECK_STATUS(hal_allocator_get_stats(a, &s), HAL_ERROR_INVALID_ARGUMENT);
    s.struct_size = offsetof(hal_allocator_stats_t, allocated_bytes);
    CTS_CHECK_STATUS(hal_allocator_get_stats(a, &s), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_OK(hal_allocator_destroy(a));
    return CTS_PASS;
}

/* What hal_allocator_snapshot's visitor saw: the first 32 blocks and the count. */
typedef struct snapshot_seen {
    hal_allocator_block_info_t blocks[32];
    size_t count;
} snapshot_seen_t;

static void snapshot_collect(const hal_allocator_block_info_t *info, void *user)
{
    snapshot_seen_t *seen = user;
    if (seen->count < 32)
        seen->blocks[seen->count] = *info;
    seen->count++;
}

/* The blocks tile each segment, in address order, and agree with the statistics. */
int cts_allocator_snapshot(cts_ctx_t *ctx)
{
    hal_allocator_t a = NULL;
    void *kept = NULL, *freed = NULL;
    hal_allocator_stats_t s;
    snapshot_seen_t *seen = cts_calloc(ctx, sizeof(*seen));
    CTS_CHECK(seen != NULL);
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    CTS_CHECK_OK(hal_allocator_snapshot(a, snapshot_collect, seen));
    CTS_CHECK(seen->count == 0); /* nothing allocated: no segment */
    CTS_CHECK_OK(hal_allocator_alloc(a, 3000, NULL, &kept));
    CTS_CHECK_OK(hal_allocator_alloc(a, 5000, NULL, &freed));
    CTS_CHECK_OK(hal_allocator_free(a, freed));
    CTS_CHECK_OK(hal_allocator_snapshot(a, snapshot_collect, seen));
    CTS_CHECK(seen->count >= 2 && seen->count <= 32);
    size_t reserved = 0, allocated = 0, found = 0;
    const char *expected = NULL;
    for (size_t i = 0; i < seen->count; i++) {
        const hal_allocator_block_info_t *b = &seen->blocks[i];
        if (i == 0 || b->segment_address != seen->blocks[i - 1].segment_address) {
            CTS_CHECK(i == 0 || expected == (const char *)seen->blocks[i - 1].segment_address +
                                                seen->blocks[i - 1].segment_size);
            CTS_CHECK(i == 0 || b->segment_address > seen->blocks[i - 1].segment_address);
            expected = b->segment_address;
            reserved += b->segment_size;
        }
        CTS_CHECK(b->address == expected); /* no gap, no overlap */
        expected += b->size;
        if (b->state == HAL_ALLOCATOR_BLOCK_ALLOCATED)
            allocated += b->size;
        if (b->address == kept) {
            CTS_CHECK(b->state == HAL_ALLOCATOR_BLOCK_ALLOCATED && b->requested == 3000);
            found++;
        }
    }
    CTS_CHECK(found == 1);
    CTS_CHECK(stats_of(a, &s) == 0);
    CTS_CHECK(reserved == s.reserved_bytes && allocated == s.allocated_bytes);
    CTS_CHECK_OK(hal_allocator_free(a, kept));
    CTS_CHECK_OK(hal_allocator_destroy(a));
    return CTS_PASS;
}

int cts_allocator_snapshot_invalid(cts_ctx_t *ctx)
{
    hal_allocator_t a = NULL;
    void *p = NULL;
    snapshot_seen_t *seen = cts_calloc(ctx, sizeof(*seen));
    CTS_CHECK(seen != NULL);
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    CTS_CHECK_OK(hal_allocator_alloc(a, 4096, NULL, &p));
    CTS_CHECK_STATUS(hal_allocator_snapshot(a, NULL, seen), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK(strstr(hal_last_error_message(), "hal_allocator_snapshot") != NULL);
    CTS_CHECK_STATUS(hal_allocator_snapshot(NULL, snapshot_collect, seen),
                     HAL_ERROR_INVALID_HANDLE);
    CTS_CHECK(seen->count == 0);                             /* nothing visited */
    CTS_CHECK_OK(hal_allocator_get_block(a, p, NULL, NULL)); /* nothing changed */
    CTS_CHECK_OK(hal_allocator_free(a, p));
    CTS_CHECK_OK(hal_allocator_destroy(a));
    return CTS_PASS;
}

int cts_allocator_out_of_memory(cts_ctx_t *ctx)
{
    hal_allocator_t a = NULL;
    hal_allocator_stats_t s;
    void *p = NULL;
    if (ctx->props.total_memory >= SIZE_MAX / 2)
        CTS_SKIP("total_memory cannot be exceeded with a size_t");
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    CTS_CHECK_STATUS(hal_allocator_alloc(a, (size_t)ctx->props.total_memory + 1, NULL, &p),
                     HAL_ERROR_OUT_OF_DEVICE_MEMORY);
    CTS_CHECK(stats_of(a, &s) == 0);
    CTS_CHECK(s.oom_count == 1 && s.alloc_count == 0 && s.active_blocks == 0);
    CTS_CHECK_OK(hal_allocator_alloc(a, 4096, NULL, &p));
    CTS_CHECK_OK(hal_allocator_free(a, p));
    CTS_CHECK_OK(hal_allocator_destroy(a));
    return CTS_PASS;
}

int cts_allocator_pinned_kind(cts_ctx_t *ctx)
{
    hal_allocator_t a = NULL;
    hal_allocator_config_t cfg = HAL_ALLOCATOR_CONFIG_INIT;
    uint8_t *p = NULL;
    void *huge = NULL;
    cfg.kind = HAL_MEM_KIND_HOST_PINNED;
    CTS_CHECK_OK(hal_allocator_create(ctx->device, &cfg, &a));
    CTS_CHECK_OK(hal_allocator_alloc(a, 5000, NULL, (void **)&p));
    hal_mem_info_t info = HAL_MEM_INFO_INIT;
    CTS_CHECK_OK(hal_mem_get_info(p, &info));
    CTS_CHECK(info.kind == HAL_MEM_KIND_HOST_PINNED);
    memset(p, 0x5e, 5000); /* host memory */
    CTS_CHECK_STATUS(hal_allocator_alloc(a, (size_t)1 << 62, NULL, &huge),
                     HAL_ERROR_OUT_OF_HOST_MEMORY);
    CTS_CHECK_OK(hal_allocator_free(a, p));
    CTS_CHECK_OK(hal_allocator_destroy(a));
    return CTS_PASS;
}
