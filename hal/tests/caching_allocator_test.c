/* SPDX-License-Identifier: Apache-2.0 */
/* The caching allocator over the cpu backend, through the public API only: rounding, pools,
 * split and coalesce, stream-ordered and cross-stream reuse, record_stream, empty_cache,
 * statistics, argument and handle checks, and a multithreaded stress test. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hal/tests/allocator_test_util.h"

typedef struct fixture {
    hal_backend_t backend;
    hal_device_t dev, dev1;
    hal_allocator_t alloc;
} fixture_t;

/* Opens the cpu backend and creates an allocator on its device 0 (config may be NULL). */
static hal_status_t fixture_open(fixture_t *f, const hal_allocator_config_t *config)
{
    memset(f, 0, sizeof(*f));
    hal_status_t st = hal_backend_open("cpu", &f->backend);
    if (st != HAL_OK) {
        fprintf(stderr, "hal_backend_open: %s\n", hal_last_error_message());
        return st;
    }
    uint32_t n = 0;
    if ((st = hal_device_count(f->backend, &n)) != HAL_OK || n < 2)
        return st != HAL_OK ? st : HAL_ERROR_NOT_FOUND;
    if ((st = hal_device_get(f->backend, 0, &f->dev)) != HAL_OK ||
        (st = hal_device_get(f->backend, 1, &f->dev1)) != HAL_OK)
        return st;
    return hal_allocator_create(f->dev, config, &f->alloc);
}

/* Destroys the allocator (after the backend if blocks are still live) and closes the backend. */
static void fixture_close(fixture_t *f)
{
    if (f->alloc != NULL && hal_allocator_destroy(f->alloc) != HAL_OK && f->backend != NULL) {
        hal_backend_close(f->backend);
        f->backend = NULL;
        hal_allocator_destroy(f->alloc);
    }
    if (f->backend != NULL)
        hal_backend_close(f->backend);
    memset(f, 0, sizeof(*f));
}

CTEST(caching_allocator, create_checks_arguments)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    hal_allocator_t a = NULL;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);

    CHECK_STATUS_GOTO(hal_allocator_create(NULL, NULL, &a), HAL_ERROR_INVALID_HANDLE, out);
    CHECK_STATUS_GOTO(hal_allocator_create(f.dev, NULL, NULL), HAL_ERROR_INVALID_ARGUMENT, out);
    CHECK_MESSAGE_GOTO("cpu: hal_allocator_create:", out);
    hal_allocator_config_t cfg = HAL_ALLOCATOR_CONFIG_INIT;
    cfg.struct_size = sizeof(hal_ext_header_t);
    CHECK_STATUS_GOTO(hal_allocator_create(f.dev, &cfg, &a), HAL_ERROR_INVALID_ARGUMENT, out);
    cfg = (hal_allocator_config_t)HAL_ALLOCATOR_CONFIG_INIT;
    cfg.kind = HAL_MEM_KIND_UNREGISTERED;
    CHECK_STATUS_GOTO(hal_allocator_create(f.dev, &cfg, &a), HAL_ERROR_INVALID_ARGUMENT, out);
    cfg = (hal_allocator_config_t)HAL_ALLOCATOR_CONFIG_INIT;
    cfg.small_segment = 512 * KiB;
    CHECK_STATUS_GOTO(hal_allocator_create(f.dev, &cfg, &a), HAL_ERROR_INVALID_ARGUMENT, out);
    CHECK_MESSAGE_GOTO("small_segment", out);
    cfg = (hal_allocator_config_t)HAL_ALLOCATOR_CONFIG_INIT;
    cfg.large_round = 1000;
    CHECK_STATUS_GOTO(hal_allocator_create(f.dev, &cfg, &a), HAL_ERROR_INVALID_ARGUMENT, out);
    T_CHECK(a == NULL);

    /* The cpu backend has shared memory, so a shared-kind allocator works. */
    cfg = (hal_allocator_config_t)HAL_ALLOCATOR_CONFIG_INIT;
    cfg.kind = HAL_MEM_KIND_SHARED;
    CHECK_OK_GOTO(hal_allocator_create(f.dev, &cfg, &a), out);
    void *p = NULL;
    CHECK_OK_GOTO(hal_allocator_alloc(a, 100, NULL, &p), out);
    hal_mem_info_t info = HAL_MEM_INFO_INIT;
    CHECK_OK_GOTO(hal_mem_get_info(p, &info), out);
    T_CHECK(info.kind == HAL_MEM_KIND_SHARED);
    CHECK_OK_GOTO(hal_allocator_free(a, p), out);
    CHECK_OK_GOTO(hal_allocator_destroy(a), out);

    /* A destroyed allocator is a stale handle. */
    CHECK_STATUS_GOTO(hal_allocator_destroy(a), HAL_ERROR_INVALID_HANDLE, out);
    CHECK_STATUS_GOTO(hal_allocator_alloc(a, 1, NULL, &p), HAL_ERROR_INVALID_HANDLE, out);
    CHECK_STATUS_GOTO(hal_allocator_destroy(NULL), HAL_ERROR_INVALID_HANDLE, out);
    rc = CTEST_PASS;
out:
    fixture_close(&f);
    return rc;
}

CTEST(caching_allocator, rounds_requests_to_512_bytes)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    void *p = NULL, *q = NULL, *z = (void *)1, *base = NULL;
    size_t size = 0;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);

    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 1, NULL, &p), out);
    T_CHECK(((uintptr_t)p & 511) == 0);
    hal_allocator_stats_t s = stats_of(f.alloc);
    T_CHECK(s.allocated_bytes == 512 && s.requested_bytes == 1);
    CHECK_OK_GOTO(hal_allocator_get_block(f.alloc, p, &base, &size), out);
    T_CHECK(base == p && size == 1);

    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 513, NULL, &q), out);
    T_CHECK(((uintptr_t)q & 511) == 0);
    s = stats_of(f.alloc);
    T_CHECK(s.allocated_bytes == 512 + 1024 && s.requested_bytes == 514);
    /* Both come from one small segment, back to back. */
    T_CHECK((char *)q == (char *)p + 512);
    T_CHECK(s.segment_alloc_count == 1 && s.reserved_bytes == 2 * MiB);

    /* Size 0 yields NULL and counts nothing. */
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 0, NULL, &z), out);
    T_CHECK(z == NULL);
    T_CHECK(stats_of(f.alloc).alloc_count == 2);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, NULL), out);

    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    p = NULL;
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, q), out);
    q = NULL;
    s = stats_of(f.alloc);
    T_CHECK(s.allocated_bytes == 0 && s.requested_bytes == 0 && s.active_blocks == 0);
    T_CHECK(s.alloc_count == 2 && s.free_count == 2);
    rc = CTEST_PASS;
out:
    hal_allocator_free(f.alloc, p);
    hal_allocator_free(f.alloc, q);
    fixture_close(&f);
    return rc;
}

CTEST(caching_allocator, small_and_large_pools)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    void *small = NULL, *mid = NULL, *large = NULL, *tiny = NULL;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);

    /* 1 MiB is still small: a 2 MiB small segment, split. */
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 1 * MiB, NULL, &small), out);
    hal_allocator_stats_t s = stats_of(f.alloc);
    T_CHECK(s.reserved_bytes == 2 * MiB && s.allocated_bytes == 1 * MiB);
    T_CHECK(s.cached_blocks == 1 && s.cached_bytes == 1 * MiB);

    /* Just above 1 MiB is large: its own 2 MiB segment; the remainder (< 1 MiB) is not split off
     * and the small pool's free megabyte is not used. */
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 1 * MiB + 1, NULL, &mid), out);
    s = stats_of(f.alloc);
    T_CHECK(s.segment_alloc_count == 2 && s.reserved_bytes == 4 * MiB);
    T_CHECK(s.allocated_bytes == 3 * MiB && s.requested_bytes == 2 * MiB + 1);

    /* 3 MiB rounds to a 4 MiB segment; a 1 MiB remainder is not split off either. */
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 3 * MiB, NULL, &large), out);
    s = stats_of(f.alloc);
    T_CHECK(s.reserved_bytes == 8 * MiB && s.allocated_bytes == 7 * MiB);

    /* A small request does not take the free large block. */
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, large), out);
    char *freed_large = large;
    large = NULL;
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 512, NULL, &tiny), out);
    T_CHECK(!((char *)tiny >= freed_large && (char *)tiny < freed_large + 4 * MiB));
    T_CHECK((char *)tiny == (char *)small + 1 * MiB);
    s = stats_of(f.alloc);
    T_CHECK(s.segment_alloc_count == 3 && s.cache_hits == 1);

    /* A large request takes it back. */
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 3 * MiB + 512, NULL, &large), out);
    T_CHECK((char *)large == freed_large);
    T_CHECK(stats_of(f.alloc).segment_alloc_count == 3);
    rc = CTEST_PASS;
out:
    hal_allocator_free(f.alloc, small);
    hal_allocator_free(f.alloc, mid);
    hal_allocator_free(f.alloc, large);
    hal_allocator_free(f.alloc, tiny);
    fixture_close(&f);
    return rc;
}

CTEST(caching_allocator, splits_and_coalesces)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    void *a = NULL, *b = NULL, *c = NULL, *whole = NULL, *base = NULL;
    size_t size = 0;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);

    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 256 * KiB, NULL, &a), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 256 * KiB, NULL, &b), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 256 * KiB, NULL, &c), out);
    T_CHECK((char *)b == (char *)a + 256 * KiB && (char *)c == (char *)b + 256 * KiB);
    hal_allocator_stats_t s = stats_of(f.alloc);
    T_CHECK(s.segment_alloc_count == 1 && s.cached_blocks == 1);
    T_CHECK(s.largest_cached_block == 2 * MiB - 768 * KiB && s.fragmentation == 0.0);

    /* b alone is a hole: two free blocks, fragmentation 1 - largest / cached. */
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, b), out);
    b = NULL;
    s = stats_of(f.alloc);
    T_CHECK(s.cached_blocks == 2 && s.cached_bytes == 2 * MiB - 512 * KiB);
    T_CHECK(s.largest_cached_block == 2 * MiB - 768 * KiB);
    double expected = 1.0 - (double)(2 * MiB - 768 * KiB) / (double)(2 * MiB - 512 * KiB);
    T_CHECK(s.fragmentation > expected - 1e-9 && s.fragmentation < expected + 1e-9);

    /* a merges with b; c then merges everything back into one 2 MiB block. */
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, a), out);
    a = NULL;
    s = stats_of(f.alloc);
    T_CHECK(s.cached_blocks == 2 && s.largest_cached_block == 2 * MiB - 768 * KiB);
    char *seg = NULL;
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, c), out);
    c = NULL;
    s = stats_of(f.alloc);
    T_CHECK(s.cached_blocks == 1 && s.cached_bytes == 2 * MiB);
    T_CHECK(s.largest_cached_block == 2 * MiB && s.fragmentation == 0.0);

    /* The merged block serves 1 MiB from the segment start without a new segment. */
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 1 * MiB, NULL, &whole), out);
    seg = whole;
    CHECK_OK_GOTO(hal_allocator_get_block(f.alloc, seg + 4096, &base, &size), out);
    T_CHECK(base == whole && size == 1 * MiB);
    s = stats_of(f.alloc);
    T_CHECK(s.segment_alloc_count == 1 && s.cache_hits == 3);
    rc = CTEST_PASS;
out:
    hal_allocator_free(f.alloc, a);
    hal_allocator_free(f.alloc, b);
    hal_allocator_free(f.alloc, c);
    hal_allocator_free(f.alloc, whole);
    fixture_close(&f);
    return rc;
}

CTEST(caching_allocator, max_split_size)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    void *big = NULL, *p = NULL, *q = NULL;
    hal_allocator_config_t cfg = HAL_ALLOCATOR_CONFIG_INIT;
    cfg.max_split_size = 4 * MiB;
    CHECK_OK_GOTO(fixture_open(&f, &cfg), out);

    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 8 * MiB, NULL, &big), out);
    char *freed = big;
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, big), out);
    big = NULL;
    /* Below max_split_size: the 8 MiB block is not split, a new segment is made. */
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 2 * MiB, NULL, &p), out);
    T_CHECK((char *)p != freed);
    T_CHECK(stats_of(f.alloc).segment_alloc_count == 2);
    /* Above it: the whole block is handed out unsplit. */
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 5 * MiB, NULL, &q), out);
    T_CHECK((char *)q == freed);
    hal_allocator_stats_t s = stats_of(f.alloc);
    T_CHECK(s.allocated_bytes == 10 * MiB && s.requested_bytes == 7 * MiB);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, q), out);
    q = NULL;
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    p = NULL;
    CHECK_OK_GOTO(hal_allocator_destroy(f.alloc), out);
    f.alloc = NULL;

    /* Without the limit the large block is split. */
    CHECK_OK_GOTO(hal_allocator_create(f.dev, NULL, &f.alloc), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 8 * MiB, NULL, &big), out);
    freed = big;
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, big), out);
    big = NULL;
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 3 * MiB, NULL, &q), out);
    T_CHECK((char *)q == freed);
    s = stats_of(f.alloc);
    T_CHECK(s.allocated_bytes == 3 * MiB && s.cached_bytes == 5 * MiB);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, q), out);
    q = NULL;
    CHECK_OK_GOTO(hal_allocator_destroy(f.alloc), out);
    f.alloc = NULL;

    /* A fresh segment above the limit serving a smaller request is handed out whole, and
     * serves the same request again (it wastes no more than a new segment would). */
    cfg.max_split_size = 3 * MiB;
    CHECK_OK_GOTO(hal_allocator_create(f.dev, &cfg, &f.alloc), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 2 * MiB + 512 * KiB, NULL, &p), out);
    freed = p;
    T_CHECK(stats_of(f.alloc).allocated_bytes == 4 * MiB);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    p = NULL;
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 2 * MiB + 512 * KiB, NULL, &p), out);
    T_CHECK((char *)p == freed);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 2 * MiB + 512 * KiB, NULL, &q), out);
    T_CHECK(stats_of(f.alloc).segment_alloc_count == 2);
    rc = CTEST_PASS;
out:
    hal_allocator_free(f.alloc, big);
    hal_allocator_free(f.alloc, p);
    hal_allocator_free(f.alloc, q);
    fixture_close(&f);
    return rc;
}

CTEST(caching_allocator, reuses_on_the_same_stream_without_hal_calls)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    hal_stream_t s1 = NULL;
    void *p = NULL, *q = NULL;
    gate_t gate;
    gate_init(&gate);
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &s1), out);

    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 4096, s1, &p), out);
    char *first = p;
    /* Pending work on the stream does not matter: stream order protects the reuse. */
    CHECK_OK_GOTO(hal_stream_add_callback(s1, gate_wait, &gate), out);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    p = NULL;
    hal_allocator_stats_t before = stats_of(f.alloc);
    hal_mem_stats_t dev_before = HAL_MEM_STATS_INIT;
    CHECK_OK_GOTO(hal_device_get_mem_stats(f.dev, &dev_before), out);
    for (int i = 0; i < 100; i++) {
        CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 4096, s1, &q), out);
        T_CHECK((char *)q == first);
        CHECK_OK_GOTO(hal_allocator_free(f.alloc, q), out);
        q = NULL;
    }
    hal_allocator_stats_t after = stats_of(f.alloc);
    hal_mem_stats_t dev_after = HAL_MEM_STATS_INIT;
    CHECK_OK_GOTO(hal_device_get_mem_stats(f.dev, &dev_after), out);
    T_CHECK(after.segment_alloc_count == before.segment_alloc_count);
    T_CHECK(after.cache_hits == before.cache_hits + 100);
    T_CHECK(dev_after.total_alloc_calls == dev_before.total_alloc_calls);
    rc = CTEST_PASS;
out:
    gate_open(&gate);
    hal_allocator_free(f.alloc, p);
    hal_allocator_free(f.alloc, q);
    if (s1 != NULL)
        hal_stream_destroy(s1);
    fixture_close(&f);
    gate_destroy(&gate);
    return rc;
}

CTEST(caching_allocator, reuses_across_streams_only_after_the_fence)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    hal_stream_t sa = NULL, sb = NULL;
    void *x = NULL, *y = NULL, *z = NULL;
    gate_t gate;
    gate_init(&gate);
    int gated = 0;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &sa), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &sb), out);

    /* 2 MiB blocks fill their segments exactly, so no remainder can serve the requests. */
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 2 * MiB, sa, &x), out);
    char *freed = x;
    CHECK_OK_GOTO(hal_stream_add_callback(sa, gate_wait, &gate), out);
    gated = 1;
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, x), out);
    x = NULL;

    /* Stream A's work is stuck behind the gate: B must not get the block. */
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 2 * MiB, sb, &y), out);
    T_CHECK((char *)y != freed);
    hal_allocator_stats_t s = stats_of(f.alloc);
    T_CHECK(s.segment_alloc_count == 2 && s.cached_blocks == 1);

    /* Once A's work is done, B reuses it without a new segment. */
    gate_open(&gate);
    gated = 0;
    CHECK_OK_GOTO(hal_stream_synchronize(sa), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 2 * MiB, sb, &z), out);
    T_CHECK((char *)z == freed);
    hal_allocator_stats_t s2 = stats_of(f.alloc);
    T_CHECK(s2.segment_alloc_count == 2 && s2.cache_hits == s.cache_hits + 1);
    rc = CTEST_PASS;
out:
    if (gated)
        gate_open(&gate);
    hal_allocator_free(f.alloc, x);
    hal_allocator_free(f.alloc, y);
    hal_allocator_free(f.alloc, z);
    if (sa != NULL)
        hal_stream_destroy(sa);
    if (sb != NULL)
        hal_stream_destroy(sb);
    fixture_close(&f);
    gate_destroy(&gate);
    return rc;
}

CTEST(caching_allocator, reuses_blocks_of_destroyed_streams)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    hal_stream_t s1 = NULL;
    void *x = NULL, *y = NULL;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &s1), out);

    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 2 * MiB, s1, &x), out);
    char *freed = x;
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, x), out);
    x = NULL;
    /* Destroying the stream drained its work: its cached block serves another stream. */
    CHECK_OK_GOTO(hal_stream_destroy(s1), out);
    s1 = NULL;
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 2 * MiB, NULL, &y), out);
    T_CHECK((char *)y == freed);
    T_CHECK(stats_of(f.alloc).segment_alloc_count == 1);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, y), out);
    y = NULL;
    CHECK_OK_GOTO(hal_allocator_empty_cache(f.alloc), out);
    T_CHECK(stats_of(f.alloc).reserved_bytes == 0);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 2 * MiB, NULL, &y), out);
    rc = CTEST_PASS;
out:
    hal_allocator_free(f.alloc, x);
    hal_allocator_free(f.alloc, y);
    if (s1 != NULL)
        hal_stream_destroy(s1);
    fixture_close(&f);
    return rc;
}

CTEST(caching_allocator, record_stream_holds_the_block_back)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    hal_stream_t sa = NULL, sb = NULL, other = NULL;
    void *x = NULL, *y = NULL, *z = NULL;
    gate_t gate;
    gate_init(&gate);
    int gated = 0;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &sa), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &sb), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev1, 0, &other), out);

    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 2 * MiB, sa, &x), out);
    char *freed = x;
    /* Argument checks first: none of them changes anything. */
    CHECK_STATUS_GOTO(hal_allocator_record_stream(f.alloc, freed + 512, sb),
                      HAL_ERROR_INVALID_ARGUMENT, out);
    CHECK_MESSAGE_GOTO("interior", out);
    CHECK_STATUS_GOTO(hal_allocator_record_stream(f.alloc, &rc, sb), HAL_ERROR_INVALID_ARGUMENT,
                      out);
    CHECK_STATUS_GOTO(hal_allocator_record_stream(f.alloc, x, other), HAL_ERROR_INVALID_ARGUMENT,
                      out);
    CHECK_MESSAGE_GOTO("another device", out);
    CHECK_STATUS_GOTO(hal_allocator_record_stream(NULL, x, sb), HAL_ERROR_INVALID_HANDLE, out);
    /* Recording the allocation stream is a no-op; recording B twice counts once. */
    CHECK_OK_GOTO(hal_allocator_record_stream(f.alloc, x, sa), out);
    CHECK_OK_GOTO(hal_allocator_record_stream(f.alloc, x, sb), out);
    CHECK_OK_GOTO(hal_allocator_record_stream(f.alloc, x, sb), out);

    CHECK_OK_GOTO(hal_stream_add_callback(sb, gate_wait, &gate), out);
    gated = 1;
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, x), out);
    x = NULL;
    hal_allocator_stats_t s = stats_of(f.alloc);
    T_CHECK(s.cached_blocks == 1 && s.cached_bytes == 2 * MiB && s.allocated_bytes == 0);

    /* Held back even on its own stream while B's work is pending. */
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 2 * MiB, sa, &y), out);
    T_CHECK((char *)y != freed);
    T_CHECK(stats_of(f.alloc).segment_alloc_count == 2);

    gate_open(&gate);
    gated = 0;
    CHECK_OK_GOTO(hal_stream_synchronize(sb), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 2 * MiB, sa, &z), out);
    T_CHECK((char *)z == freed);
    T_CHECK(stats_of(f.alloc).segment_alloc_count == 2);
    rc = CTEST_PASS;
out:
    if (gated)
        gate_open(&gate);
    hal_allocator_free(f.alloc, x);
    hal_allocator_free(f.alloc, y);
    hal_allocator_free(f.alloc, z);
    if (sa != NULL)
        hal_stream_destroy(sa);
    if (sb != NULL)
        hal_stream_destroy(sb);
    if (other != NULL)
        hal_stream_destroy(other);
    fixture_close(&f);
    gate_destroy(&gate);
    return rc;
}

/* What a snapshot visitor collects (the first 64 blocks) and, optionally, does to the
 * allocator from inside the visit. */
typedef struct snapshot_log {
    hal_allocator_block_info_t blocks[64];
    size_t count;
    hal_allocator_t reenter; /* allocate and free a block on it from the visitor */
    hal_status_t reenter_status;
} snapshot_log_t;

static void collect_block(const hal_allocator_block_info_t *info, void *user)
{
    snapshot_log_t *log = user;
    if (log->count < 64)
        log->blocks[log->count] = *info;
    log->count++;
    if (log->reenter != NULL) {
        void *p = NULL;
        log->reenter_status = hal_allocator_alloc(log->reenter, 4 * KiB, NULL, &p);
        if (log->reenter_status == HAL_OK)
            log->reenter_status = hal_allocator_free(log->reenter, p);
    }
}

static const hal_allocator_block_info_t *snapshot_find(const snapshot_log_t *log, const void *p)
{
    for (size_t i = 0; i < log->count && i < 64; i++) {
        if (log->blocks[i].address == p)
            return &log->blocks[i];
    }
    return NULL;
}

/* Every segment's blocks start at its base, follow each other without gaps and end at its end;
 * segments come in address order. Returns the bytes of the segments. */
static int snapshot_tiles(const snapshot_log_t *log, size_t *segment_bytes)
{
    const char *expected = NULL, *segment = NULL, *previous_segment = NULL;
    size_t bytes = 0;
    for (size_t i = 0; i < log->count; i++) {
        const hal_allocator_block_info_t *b = &log->blocks[i];
        if (b->struct_size != sizeof(*b))
            return 0;
        if (b->segment_address != segment) { /* a new segment: the last one must be complete */
            if (expected != segment + (segment ? log->blocks[i - 1].segment_size : 0))
                return 0;
            if (previous_segment != NULL && (const char *)b->segment_address <= previous_segment)
                return 0;
            previous_segment = segment = b->segment_address;
            expected = segment;
            bytes += b->segment_size;
        }
        if (b->address != expected)
            return 0;
        expected += b->size;
    }
    if (log->count && expected != segment + log->blocks[log->count - 1].segment_size)
        return 0;
    *segment_bytes = bytes;
    return 1;
}

CTEST(caching_allocator, snapshot_lists_every_segment_s_blocks)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    hal_stream_t sa = NULL, sb = NULL;
    void *small = NULL, *freed = NULL, *large = NULL, *held = NULL;
    gate_t gate;
    gate_init(&gate);
    int gated = 0;
    snapshot_log_t *log = NULL;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    log = calloc(1, sizeof(*log));
    T_CHECK(log != NULL);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &sa), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &sb), out);

    /* Argument and handle checks: nothing is visited. */
    CHECK_STATUS_GOTO(hal_allocator_snapshot(f.alloc, NULL, log), HAL_ERROR_INVALID_ARGUMENT, out);
    CHECK_MESSAGE_GOTO("cpu: hal_allocator_snapshot:", out);
    CHECK_STATUS_GOTO(hal_allocator_snapshot(NULL, collect_block, log), HAL_ERROR_INVALID_HANDLE,
                      out);
    T_CHECK(log->count == 0);
    /* An allocator without segments lists nothing. */
    CHECK_OK_GOTO(hal_allocator_snapshot(f.alloc, collect_block, log), out);
    T_CHECK(log->count == 0);

    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 1000, NULL, &small), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 5000, NULL, &freed), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 3 * MiB, sa, &large), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 2 * MiB, sa, &held), out);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, freed), out);
    /* A block freed while another stream's work on it is pending is held back. */
    CHECK_OK_GOTO(hal_allocator_record_stream(f.alloc, held, sb), out);
    CHECK_OK_GOTO(hal_stream_add_callback(sb, gate_wait, &gate), out);
    gated = 1;
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, held), out);

    CHECK_OK_GOTO(hal_allocator_snapshot(f.alloc, collect_block, log), out);
    T_CHECK(log->count <= 64);
    size_t segment_bytes = 0, allocated = 0, requested = 0;
    T_CHECK(snapshot_tiles(log, &segment_bytes));
    for (size_t i = 0; i < log->count; i++) {
        if (log->blocks[i].state == HAL_ALLOCATOR_BLOCK_ALLOCATED) {
            allocated += log->blocks[i].size;
            requested += log->blocks[i].requested;
        } else {
            T_CHECK(log->blocks[i].requested == 0);
        }
    }
    hal_allocator_stats_t s = stats_of(f.alloc);
    T_CHECK(segment_bytes == s.reserved_bytes);
    T_CHECK(allocated == s.allocated_bytes && requested == s.requested_bytes);
    T_CHECK(requested == 1000 + 3 * MiB);

    const hal_allocator_block_info_t *b = snapshot_find(log, small);
    T_CHECK(b != NULL && b->state == HAL_ALLOCATOR_BLOCK_ALLOCATED && b->requested == 1000 &&
            b->size == 1024 && b->small_segment == 1);
    T_CHECK(b->stream != NULL && b->stream != sa); /* the default stream's pool */
    b = snapshot_find(log, large);
    T_CHECK(b != NULL && b->state == HAL_ALLOCATOR_BLOCK_ALLOCATED && b->requested == 3 * MiB &&
            b->small_segment == 0 && b->stream == sa);
    b = snapshot_find(log, held);
    T_CHECK(b != NULL && b->state == HAL_ALLOCATOR_BLOCK_PENDING_FREE && b->size == 2 * MiB);
    b = snapshot_find(log, freed); /* cached, possibly coalesced with its free neighbour */
    T_CHECK(b != NULL && b->state == HAL_ALLOCATOR_BLOCK_CACHED && b->size >= 5120);

    /* Once the other stream is done, the held block is cached. */
    gate_open(&gate);
    gated = 0;
    CHECK_OK_GOTO(hal_stream_synchronize(sb), out);
    CHECK_OK_GOTO(hal_allocator_empty_cache(f.alloc), out); /* polls the held blocks */
    memset(log, 0, sizeof(*log));
    log->reenter = f.alloc; /* the visitor may call the allocator: no deadlock */
    CHECK_OK_GOTO(hal_allocator_snapshot(f.alloc, collect_block, log), out);
    CHECK_OK_GOTO(log->reenter_status, out);
    T_CHECK(snapshot_tiles(log, &segment_bytes));
    for (size_t i = 0; i < log->count; i++)
        T_CHECK(log->blocks[i].state != HAL_ALLOCATOR_BLOCK_PENDING_FREE);
    T_CHECK(segment_bytes == stats_of(f.alloc).reserved_bytes);
    rc = CTEST_PASS;
out:
    if (gated)
        gate_open(&gate);
    if (sb != NULL)
        hal_stream_synchronize(sb);
    hal_allocator_free(f.alloc, small);
    hal_allocator_free(f.alloc, large);
    if (sa != NULL)
        hal_stream_destroy(sa);
    if (sb != NULL)
        hal_stream_destroy(sb);
    fixture_close(&f);
    gate_destroy(&gate);
    free(log);
    return rc;
}

CTEST(caching_allocator, empty_cache_returns_free_segments)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    hal_stream_t s1 = NULL;
    void *p[6] = { NULL };
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &s1), out);

    for (int i = 0; i < 6; i++)
        CHECK_OK_GOTO(
            hal_allocator_alloc(f.alloc, (i % 2) ? 3 * MiB : 100 * KiB, (i % 3) ? s1 : NULL, &p[i]),
            out);
    /* record_stream on one block, so that empty_cache also waits for a held block. */
    CHECK_OK_GOTO(hal_allocator_record_stream(f.alloc, p[0], s1), out);
    hal_allocator_stats_t s = stats_of(f.alloc);
    T_CHECK(s.reserved_bytes > 0);
    uint64_t peak = s.peak_reserved_bytes;

    /* With a live block, that block's segment stays. */
    for (int i = 1; i < 6; i++) {
        CHECK_OK_GOTO(hal_allocator_free(f.alloc, p[i]), out);
        p[i] = NULL;
    }
    CHECK_OK_GOTO(hal_allocator_empty_cache(f.alloc), out);
    s = stats_of(f.alloc);
    T_CHECK(s.reserved_bytes == 2 * MiB && s.active_blocks == 1);

    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p[0]), out);
    p[0] = NULL;
    CHECK_OK_GOTO(hal_allocator_empty_cache(f.alloc), out);
    s = stats_of(f.alloc);
    T_CHECK(s.reserved_bytes == 0 && s.cached_blocks == 0 && s.cached_bytes == 0);
    T_CHECK(s.segment_free_count == s.segment_alloc_count);
    T_CHECK(s.peak_reserved_bytes == peak && s.largest_cached_block == 0);
    T_CHECK(s.fragmentation == 0.0);
    hal_mem_stats_t ms = HAL_MEM_STATS_INIT;
    CHECK_OK_GOTO(hal_device_get_mem_stats(f.dev, &ms), out);
    T_CHECK(ms.device_allocations == 0);
    rc = CTEST_PASS;
out:
    for (int i = 0; i < 6; i++)
        hal_allocator_free(f.alloc, p[i]);
    if (s1 != NULL)
        hal_stream_destroy(s1);
    fixture_close(&f);
    return rc;
}

CTEST(caching_allocator, stats_and_peaks)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    void *p = NULL, *q = NULL;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);

    CHECK_STATUS_GOTO(hal_allocator_get_stats(f.alloc, NULL), HAL_ERROR_INVALID_ARGUMENT, out);
    hal_allocator_stats_t small = HAL_ALLOCATOR_STATS_INIT;
    small.struct_size = sizeof(hal_ext_header_t);
    CHECK_STATUS_GOTO(hal_allocator_get_stats(f.alloc, &small), HAL_ERROR_INVALID_ARGUMENT, out);
    CHECK_STATUS_GOTO(hal_allocator_get_stats(NULL, &small), HAL_ERROR_INVALID_HANDLE, out);
    CHECK_STATUS_GOTO(hal_allocator_reset_peak_stats(NULL), HAL_ERROR_INVALID_HANDLE, out);

    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 5 * MiB, NULL, &p), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 1000, NULL, &q), out);
    hal_allocator_stats_t s = stats_of(f.alloc);
    T_CHECK(s.struct_size == sizeof(s));
    T_CHECK(s.allocated_bytes == 6 * MiB + 1024 && s.requested_bytes == 5 * MiB + 1000);
    T_CHECK(s.reserved_bytes == 8 * MiB);
    T_CHECK(s.peak_allocated_bytes == s.allocated_bytes && s.peak_reserved_bytes == 8 * MiB);
    T_CHECK(s.alloc_count == 2 && s.active_blocks == 2 && s.segment_alloc_count == 2);
    T_CHECK(s.cache_hits == 0 && s.oom_count == 0);

    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    p = NULL;
    s = stats_of(f.alloc);
    T_CHECK(s.allocated_bytes == 1024 && s.peak_allocated_bytes == 6 * MiB + 1024);
    T_CHECK(s.free_count == 1 && s.active_blocks == 1);
    T_CHECK(s.cached_bytes == 8 * MiB - 1024 && s.largest_cached_block == 6 * MiB);

    CHECK_OK_GOTO(hal_allocator_reset_peak_stats(f.alloc), out);
    s = stats_of(f.alloc);
    T_CHECK(s.peak_allocated_bytes == 1024 && s.peak_reserved_bytes == 8 * MiB);
    CHECK_OK_GOTO(hal_allocator_empty_cache(f.alloc), out);
    CHECK_OK_GOTO(hal_allocator_reset_peak_stats(f.alloc), out);
    s = stats_of(f.alloc);
    T_CHECK(s.peak_reserved_bytes == 2 * MiB && s.reserved_bytes == 2 * MiB);
    rc = CTEST_PASS;
out:
    hal_allocator_free(f.alloc, p);
    hal_allocator_free(f.alloc, q);
    fixture_close(&f);
    return rc;
}

CTEST(caching_allocator, rejects_bad_pointers_without_side_effects)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    void *p = NULL, *q = NULL, *base = NULL;
    size_t size = 0;
    int on_stack = 0;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);

    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 3000, NULL, &p), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 3000, NULL, &q), out);
    char *freed = q;
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, q), out);
    q = NULL;
    hal_allocator_stats_t before = stats_of(f.alloc);

    CHECK_STATUS_GOTO(hal_allocator_free(f.alloc, freed), HAL_ERROR_INVALID_ARGUMENT, out);
    CHECK_MESSAGE_GOTO("cpu: hal_allocator_free: ", out);
    CHECK_MESSAGE_GOTO("is not a live block of this allocator (double free or foreign pointer)",
                       out);
    CHECK_STATUS_GOTO(hal_allocator_free(f.alloc, (char *)p + 1024), HAL_ERROR_INVALID_ARGUMENT,
                      out);
    CHECK_MESSAGE_GOTO("interior pointer", out);
    CHECK_STATUS_GOTO(hal_allocator_free(f.alloc, &on_stack), HAL_ERROR_INVALID_ARGUMENT, out);
    CHECK_STATUS_GOTO(hal_allocator_free(NULL, p), HAL_ERROR_INVALID_HANDLE, out);
    hal_allocator_stats_t after = stats_of(f.alloc);
    T_CHECK(memcmp(&before, &after, sizeof(before)) == 0);

    /* get_block: base, interior, past the requested bytes, freed, foreign. */
    CHECK_OK_GOTO(hal_allocator_get_block(f.alloc, p, &base, &size), out);
    T_CHECK(base == p && size == 3000);
    base = NULL;
    CHECK_OK_GOTO(hal_allocator_get_block(f.alloc, (char *)p + 2999, &base, NULL), out);
    T_CHECK(base == p);
    CHECK_OK_GOTO(hal_allocator_get_block(f.alloc, (char *)p + 1, NULL, NULL), out);
    CHECK_STATUS_GOTO(hal_allocator_get_block(f.alloc, (char *)p + 3000, &base, &size),
                      HAL_ERROR_NOT_FOUND, out);
    CHECK_STATUS_GOTO(hal_allocator_get_block(f.alloc, freed, &base, &size), HAL_ERROR_NOT_FOUND,
                      out);
    CHECK_STATUS_GOTO(hal_allocator_get_block(f.alloc, &on_stack, &base, &size),
                      HAL_ERROR_NOT_FOUND, out);
    CHECK_STATUS_GOTO(hal_allocator_get_block(f.alloc, NULL, &base, &size), HAL_ERROR_NOT_FOUND,
                      out);
    CHECK_STATUS_GOTO(hal_allocator_get_block(NULL, p, &base, &size), HAL_ERROR_INVALID_HANDLE,
                      out);
    after = stats_of(f.alloc);
    T_CHECK(memcmp(&before, &after, sizeof(before)) == 0);

    /* The live block is intact and still frees once. */
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    p = NULL;
    rc = CTEST_PASS;
out:
    hal_allocator_free(f.alloc, p);
    fixture_close(&f);
    return rc;
}

CTEST(caching_allocator, checks_handles_and_streams)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    hal_stream_t other = NULL, dead = NULL;
    void *p = (void *)1;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev1, 0, &other), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &dead), out);
    CHECK_OK_GOTO(hal_stream_destroy(dead), out);

    CHECK_STATUS_GOTO(hal_allocator_alloc(NULL, 16, NULL, &p), HAL_ERROR_INVALID_HANDLE, out);
    CHECK_STATUS_GOTO(hal_allocator_alloc(f.alloc, 16, NULL, NULL), HAL_ERROR_INVALID_ARGUMENT,
                      out);
    CHECK_MESSAGE_GOTO("cpu: hal_allocator_alloc:", out);
    CHECK_STATUS_GOTO(hal_allocator_alloc(f.alloc, 16, other, &p), HAL_ERROR_INVALID_ARGUMENT, out);
    CHECK_MESSAGE_GOTO("another device", out);
    CHECK_STATUS_GOTO(hal_allocator_alloc(f.alloc, 16, dead, &p), HAL_ERROR_INVALID_HANDLE, out);
    CHECK_STATUS_GOTO(hal_allocator_alloc(f.alloc, 16, (hal_stream_t)(void *)f.dev, &p),
                      HAL_ERROR_INVALID_HANDLE, out);
    T_CHECK(p == (void *)1);
    CHECK_STATUS_GOTO(hal_allocator_empty_cache(NULL), HAL_ERROR_INVALID_HANDLE, out);
    CHECK_STATUS_GOTO(hal_allocator_record_stream(f.alloc, NULL, NULL), HAL_ERROR_INVALID_HANDLE,
                      out);
    hal_stream_t default_stream;
    CHECK_OK_GOTO(hal_device_get_default_stream(f.dev, &default_stream), out);
    CHECK_STATUS_GOTO(hal_allocator_record_stream(f.alloc, NULL, default_stream),
                      HAL_ERROR_INVALID_ARGUMENT, out);
    hal_allocator_stats_t s = stats_of(f.alloc);
    T_CHECK(s.alloc_count == 0 && s.reserved_bytes == 0 && s.oom_count == 0);

    /* An allocator on device 1 with its own stream. */
    hal_allocator_t a1 = NULL;
    CHECK_OK_GOTO(hal_allocator_create(f.dev1, NULL, &a1), out);
    CHECK_OK_GOTO(hal_allocator_alloc(a1, 16, other, &p), out);
    CHECK_STATUS_GOTO(hal_allocator_free(f.alloc, p), HAL_ERROR_INVALID_ARGUMENT, out);
    CHECK_OK_GOTO(hal_allocator_free(a1, p), out);
    CHECK_OK_GOTO(hal_allocator_destroy(a1), out);
    rc = CTEST_PASS;
out:
    if (other != NULL)
        hal_stream_destroy(other);
    fixture_close(&f);
    return rc;
}

CTEST(caching_allocator, destroy_with_live_blocks_is_busy)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    void *p = NULL, *q = NULL;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);

    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 64 * KiB, NULL, &p), out);
    CHECK_STATUS_GOTO(hal_allocator_destroy(f.alloc), HAL_ERROR_BUSY, out);
    CHECK_MESSAGE_GOTO("cpu: hal_allocator_destroy: 1 blocks", out);
    /* Nothing was destroyed. */
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 64 * KiB, NULL, &q), out);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, q), out);
    q = NULL;
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    p = NULL;
    CHECK_OK_GOTO(hal_allocator_destroy(f.alloc), out);
    hal_allocator_t dead = f.alloc;
    f.alloc = NULL;
    CHECK_STATUS_GOTO(
        hal_allocator_get_stats(dead, &(hal_allocator_stats_t)HAL_ALLOCATOR_STATS_INIT),
        HAL_ERROR_INVALID_HANDLE, out);
    hal_mem_stats_t ms = HAL_MEM_STATS_INIT;
    CHECK_OK_GOTO(hal_device_get_mem_stats(f.dev, &ms), out);
    T_CHECK(ms.device_allocations == 0 && ms.device_bytes_in_use == 0);
    rc = CTEST_PASS;
out:
    hal_allocator_free(f.alloc, p);
    hal_allocator_free(f.alloc, q);
    fixture_close(&f);
    return rc;
}

CTEST(caching_allocator, device_closed_invalidates_the_allocator)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    void *p = NULL;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 4096, NULL, &p), out);
    CHECK_OK_GOTO(hal_backend_close(f.backend), out);
    f.backend = NULL;

    void *q = NULL;
    CHECK_STATUS_GOTO(hal_allocator_alloc(f.alloc, 4096, NULL, &q), HAL_ERROR_INVALID_HANDLE, out);
    CHECK_MESSAGE_GOTO("closed", out);
    CHECK_STATUS_GOTO(hal_allocator_free(f.alloc, p), HAL_ERROR_INVALID_HANDLE, out);
    CHECK_STATUS_GOTO(hal_allocator_empty_cache(f.alloc), HAL_ERROR_INVALID_HANDLE, out);
    /* destroy still releases the allocator's own memory. */
    CHECK_OK_GOTO(hal_allocator_destroy(f.alloc), out);
    f.alloc = NULL;
    rc = CTEST_PASS;
out:
    fixture_close(&f);
    return rc;
}

CTEST(caching_allocator, pinned_host_memory)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    hal_allocator_t pinned = NULL;
    hal_stream_t s1 = NULL;
    void *p = NULL, *d = NULL;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &s1), out);
    hal_allocator_config_t cfg = HAL_ALLOCATOR_CONFIG_INIT;
    cfg.kind = HAL_MEM_KIND_HOST_PINNED;
    CHECK_OK_GOTO(hal_allocator_create(f.dev, &cfg, &pinned), out);

    CHECK_OK_GOTO(hal_allocator_alloc(pinned, 10000, s1, &p), out);
    hal_mem_info_t info = HAL_MEM_INFO_INIT;
    CHECK_OK_GOTO(hal_mem_get_info(p, &info), out);
    T_CHECK(info.kind == HAL_MEM_KIND_HOST_PINNED && info.device == f.dev);
    T_CHECK(info.size == 2 * MiB);
    memset(p, 0x5a, 10000);
    /* A stream-ordered copy from the pinned block into a device block. */
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 10000, s1, &d), out);
    CHECK_OK_GOTO(hal_memcpy_async(d, p, 10000, s1), out);
    CHECK_OK_GOTO(hal_stream_synchronize(s1), out);
    T_CHECK(((unsigned char *)d)[9999] == 0x5a);
    hal_stream_t default_stream;
    CHECK_OK_GOTO(hal_device_get_default_stream(f.dev, &default_stream), out);
    CHECK_OK_GOTO(hal_allocator_record_stream(pinned, p, default_stream), out);
    CHECK_OK_GOTO(hal_allocator_free(pinned, p), out);
    p = NULL;
    hal_allocator_stats_t s = stats_of(pinned);
    T_CHECK(s.reserved_bytes == 2 * MiB && s.cached_bytes == 2 * MiB);
    CHECK_OK_GOTO(hal_allocator_empty_cache(pinned), out);
    T_CHECK(stats_of(pinned).reserved_bytes == 0);
    rc = CTEST_PASS;
out:
    hal_allocator_free(pinned, p);
    hal_allocator_free(f.alloc, d);
    if (pinned != NULL)
        hal_allocator_destroy(pinned);
    if (s1 != NULL)
        hal_stream_destroy(s1);
    fixture_close(&f);
    return rc;
}

CTEST(caching_allocator, works_over_another_backend)
{
    int rc = CTEST_FAIL;
    hal_backend_t backend = NULL;
    hal_device_t dev = NULL;
    hal_allocator_t a = NULL;
    hal_stream_t s1 = NULL;
    void *p = NULL, *q = NULL;
    CHECK_OK_GOTO(hal_backend_open("template", &backend), out);
    CHECK_OK_GOTO(hal_device_get(backend, 0, &dev), out);
    CHECK_OK_GOTO(hal_stream_create(dev, 0, &s1), out);

    /* No shared memory on this backend. */
    hal_allocator_config_t cfg = HAL_ALLOCATOR_CONFIG_INIT;
    cfg.kind = HAL_MEM_KIND_SHARED;
    CHECK_STATUS_GOTO(hal_allocator_create(dev, &cfg, &a), HAL_ERROR_UNSUPPORTED, out);
    CHECK_MESSAGE_GOTO("template: hal_allocator_create:", out);
    T_CHECK(a == NULL);

    CHECK_OK_GOTO(hal_allocator_create(dev, NULL, &a), out);
    CHECK_OK_GOTO(hal_allocator_alloc(a, 2 * MiB, s1, &p), out);
    char *freed = p;
    CHECK_OK_GOTO(hal_allocator_free(a, p), out);
    p = NULL;
    CHECK_OK_GOTO(hal_allocator_alloc(a, 2 * MiB, s1, &q), out);
    T_CHECK((char *)q == freed); /* freed on s1: reused on s1 at once, without a fence */
    CHECK_OK_GOTO(hal_allocator_free(a, q), out);
    q = NULL;
    CHECK_STATUS_GOTO(hal_allocator_free(a, freed), HAL_ERROR_INVALID_ARGUMENT, out);
    CHECK_MESSAGE_GOTO("template: hal_allocator_free:", out);
    CHECK_OK_GOTO(hal_allocator_empty_cache(a), out);
    T_CHECK(stats_of(a).reserved_bytes == 0);
    rc = CTEST_PASS;
out:
    hal_allocator_free(a, p);
    hal_allocator_free(a, q);
    if (a != NULL)
        hal_allocator_destroy(a);
    if (s1 != NULL)
        hal_stream_destroy(s1);
    if (backend != NULL)
        hal_backend_close(backend);
    return rc;
}

/* ---- multithreaded stress ---------------------------------------------------------------- */

#define STRESS_THREADS 4
#define STRESS_LIVE    16

typedef struct stress_block {
    unsigned char *ptr;
    size_t size;
    unsigned char tag;
} stress_block_t;

typedef struct stress_ctx {
    hal_allocator_t alloc;
    hal_stream_t stream; /* NULL: the default stream, shared by two threads */
    unsigned id;
    int iterations;
    _Atomic(stress_block_t *) *mailbox; /* hands blocks to another thread to free */
    atomic_int *failed;
} stress_ctx_t;

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static size_t stress_size(uint64_t *rng)
{
    uint64_t r = xorshift(rng);
    if (r % 32 == 0)
        return 1 * MiB + (size_t)(xorshift(rng) % (3 * MiB)); /* large pool */
    if (r % 8 == 0)
        return 1 + (size_t)(xorshift(rng) % (512 * KiB));
    return 1 + (size_t)(xorshift(rng) % 8192);
}

/* The pattern: one 64-bit word per 8 bytes (fewer accesses for the sanitizers to track), then
 * the tail bytes. */
static uint64_t stress_word(const stress_block_t *b, size_t i)
{
    return (UINT64_C(0x9E3779B97F4A7C15) * (i + 1)) ^ ((uint64_t)b->tag << 56);
}

static bool stress_verify(const stress_block_t *b)
{
    size_t words = b->size / 8;
    const uint64_t *w = (const uint64_t *)b->ptr;
    for (size_t i = 0; i < words; i++) {
        if (w[i] != stress_word(b, i))
            return false;
    }
    for (size_t i = words * 8; i < b->size; i++) {
        if (b->ptr[i] != b->tag)
            return false;
    }
    return true;
}

static void stress_fill(stress_block_t *b)
{
    size_t words = b->size / 8;
    uint64_t *w = (uint64_t *)b->ptr;
    for (size_t i = 0; i < words; i++)
        w[i] = stress_word(b, i);
    for (size_t i = words * 8; i < b->size; i++)
        b->ptr[i] = b->tag;
}

/* Frees a block after checking that nothing else wrote into it. */
static void stress_release(stress_ctx_t *c, stress_block_t *b)
{
    if (!stress_verify(b)) {
        fprintf(stderr, "stress: block %p (%zu bytes) was overwritten\n", (void *)b->ptr, b->size);
        atomic_store(c->failed, 1);
    }
    if (hal_allocator_free(c->alloc, b->ptr) != HAL_OK) {
        fprintf(stderr, "stress: free: %s\n", hal_last_error_message());
        atomic_store(c->failed, 1);
    }
    free(b);
}

static void *stress_thread(void *arg)
{
    stress_ctx_t *c = arg;
    stress_block_t *live[STRESS_LIVE] = { NULL };
    uint64_t rng = 0x9E3779B97F4A7C15ull * (c->id + 1);
    for (int it = 0; it < c->iterations && !atomic_load(c->failed); it++) {
        unsigned slot = (unsigned)(xorshift(&rng) % STRESS_LIVE);
        if (live[slot] != NULL) {
            /* Now and then another thread frees it. */
            if (xorshift(&rng) % 4 == 0) {
                stress_block_t *prev = atomic_exchange(&c->mailbox[c->id], live[slot]);
                if (prev != NULL)
                    stress_release(c, prev);
            } else {
                stress_release(c, live[slot]);
            }
            live[slot] = NULL;
        }
        stress_block_t *theirs =
            atomic_exchange(&c->mailbox[(c->id + 1) % STRESS_THREADS], (stress_block_t *)NULL);
        if (theirs != NULL)
            stress_release(c, theirs);

        stress_block_t *b = malloc(sizeof(*b));
        if (b == NULL) {
            atomic_store(c->failed, 1);
            break;
        }
        b->size = stress_size(&rng);
        b->tag = (unsigned char)(c->id * 61 + (unsigned)it);
        void *p = NULL;
        if (hal_allocator_alloc(c->alloc, b->size, c->stream, &p) != HAL_OK) {
            fprintf(stderr, "stress: alloc: %s\n", hal_last_error_message());
            atomic_store(c->failed, 1);
            free(b);
            break;
        }
        b->ptr = p;
        stress_fill(b);
        live[slot] = b;
        if (it % 512 == 0) {
            hal_allocator_stats_t s = HAL_ALLOCATOR_STATS_INIT;
            if (hal_allocator_get_stats(c->alloc, &s) != HAL_OK ||
                s.allocated_bytes > s.reserved_bytes)
                atomic_store(c->failed, 1);
            if (c->id == 0 && hal_allocator_empty_cache(c->alloc) != HAL_OK)
                atomic_store(c->failed, 1);
        }
    }
    for (unsigned i = 0; i < STRESS_LIVE; i++) {
        if (live[i] != NULL)
            stress_release(c, live[i]);
    }
    return NULL;
}

CTEST(caching_allocator, multithreaded_stress)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    hal_stream_t streams[2] = { NULL, NULL };
    _Atomic(stress_block_t *) mailbox[STRESS_THREADS];
    atomic_int failed = 0;
    stress_ctx_t ctx[STRESS_THREADS];
    pthread_t threads[STRESS_THREADS];
    int started = 0;
    for (int i = 0; i < STRESS_THREADS; i++)
        atomic_init(&mailbox[i], NULL);
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
    CHECK_OK_GOTO(hal_device_get_properties(f.dev, &props), out);
    T_CHECK(props.host_addressable);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &streams[0]), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &streams[1]), out);

    for (int i = 0; i < STRESS_THREADS; i++) {
        ctx[i] = (stress_ctx_t){ .alloc = f.alloc,
                                 .stream = i < 2 ? streams[i] : NULL,
                                 .id = (unsigned)i,
                                 .iterations = 3000,
                                 .mailbox = mailbox,
                                 .failed = &failed };
        T_CHECK(pthread_create(&threads[i], NULL, stress_thread, &ctx[i]) == 0);
        started++;
    }
    for (; started > 0; started--)
        pthread_join(threads[started - 1], NULL);
    for (int i = 0; i < STRESS_THREADS; i++) {
        stress_block_t *b = atomic_exchange(&mailbox[i], (stress_block_t *)NULL);
        if (b != NULL)
            stress_release(&ctx[0], b);
    }
    T_CHECK(atomic_load(&failed) == 0);
    hal_allocator_stats_t s = stats_of(f.alloc);
    T_CHECK(s.active_blocks == 0 && s.allocated_bytes == 0 && s.requested_bytes == 0);
    T_CHECK(s.alloc_count == s.free_count && s.alloc_count > 0);
    CHECK_OK_GOTO(hal_allocator_empty_cache(f.alloc), out);
    s = stats_of(f.alloc);
    T_CHECK(s.reserved_bytes == 0 && s.cached_blocks == 0);
    rc = CTEST_PASS;
out:
    for (; started > 0; started--)
        pthread_join(threads[started - 1], NULL);
    for (int i = 0; i < 2; i++) {
        if (streams[i] != NULL)
            hal_stream_destroy(streams[i]);
    }
    fixture_close(&f);
    return rc;
}

/* Streams really running work: each block is freed while a memset of it is still queued
 * (often behind a delay), so a block handed to another stream too early gets overwritten by
 * the old stream's memset after the new owner's own memset, which the new owner notices when it
 * checks the block later. */
typedef struct ordered_ctx {
    hal_allocator_t alloc;
    hal_stream_t stream;
    unsigned id;
    atomic_int *failed;
} ordered_ctx_t;

typedef struct ordered_block {
    unsigned char *ptr;
    size_t size;
    unsigned char tag;
} ordered_block_t;

static void delay_fn(hal_status_t status, void *user)
{
    (void)status;
    (void)user;
    struct timespec ts = { 0, 50000 };
    nanosleep(&ts, NULL);
}

/* Waits for the stream, checks the block, re-writes it in stream order and frees it at once. */
static bool ordered_retire(ordered_ctx_t *c, ordered_block_t *b, uint64_t *rng)
{
    if (hal_stream_synchronize(c->stream) != HAL_OK)
        return false;
    for (size_t i = 0; i < b->size; i += 509) {
        if (b->ptr[i] != b->tag) {
            fprintf(stderr, "ordered: block %p byte %zu is %u, expected %u\n", (void *)b->ptr, i,
                    b->ptr[i], b->tag);
            return false;
        }
    }
    if (xorshift(rng) % 2 == 0 && hal_stream_add_callback(c->stream, delay_fn, NULL) != HAL_OK)
        return false;
    return hal_memset_async(b->ptr, b->tag, b->size, c->stream) == HAL_OK &&
           hal_allocator_free(c->alloc, b->ptr) == HAL_OK;
}

#define ORDERED_RING       4
#define ORDERED_ITERATIONS 1500

static void *ordered_thread(void *arg)
{
    static const size_t sizes[] = { 4 * KiB, 16 * KiB, 64 * KiB, 200 * KiB };
    ordered_ctx_t *c = arg;
    ordered_block_t ring[ORDERED_RING];
    unsigned head = 0, count = 0;
    uint64_t rng = 0x2545F4914F6CDD1Dull * (c->id + 1);
    for (int it = 0; it < ORDERED_ITERATIONS && !atomic_load(c->failed); it++) {
        if (count == ORDERED_RING) {
            if (!ordered_retire(c, &ring[head], &rng)) {
                atomic_store(c->failed, 1);
                break;
            }
            head = (head + 1) % ORDERED_RING;
            count--;
        }
        ordered_block_t *b = &ring[(head + count) % ORDERED_RING];
        b->size = sizes[xorshift(&rng) % 4];
        b->tag = (unsigned char)(c->id * 64 + (unsigned)it % 64 + 1);
        void *p = NULL;
        if (hal_allocator_alloc(c->alloc, b->size, c->stream, &p) != HAL_OK ||
            hal_memset_async(p, b->tag, b->size, c->stream) != HAL_OK) {
            fprintf(stderr, "ordered: %s\n", hal_last_error_message());
            atomic_store(c->failed, 1);
            break;
        }
        b->ptr = p;
        count++;
    }
    for (; count > 0; count--, head = (head + 1) % ORDERED_RING) {
        if (!ordered_retire(c, &ring[head], &rng))
            atomic_store(c->failed, 1);
    }
    return NULL;
}

CTEST(caching_allocator, stream_ordered_stress)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    enum { N = 3 };
    hal_stream_t streams[N] = { NULL };
    ordered_ctx_t ctx[N];
    pthread_t threads[N];
    atomic_int failed = 0;
    int started = 0;
    /* Small segments, so that blocks change hands between streams often. */
    hal_allocator_config_t cfg = HAL_ALLOCATOR_CONFIG_INIT;
    cfg.small_segment = 1 * MiB;
    CHECK_OK_GOTO(fixture_open(&f, &cfg), out);
    for (int i = 0; i < N; i++)
        CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &streams[i]), out);
    for (int i = 0; i < N; i++) {
        ctx[i] = (ordered_ctx_t){ f.alloc, streams[i], (unsigned)i, &failed };
        T_CHECK(pthread_create(&threads[i], NULL, ordered_thread, &ctx[i]) == 0);
        started++;
    }
    for (; started > 0; started--)
        pthread_join(threads[started - 1], NULL);
    T_CHECK(atomic_load(&failed) == 0);
    hal_allocator_stats_t s = stats_of(f.alloc);
    T_CHECK(s.active_blocks == 0 && s.alloc_count == N * ORDERED_ITERATIONS);
    rc = CTEST_PASS;
out:
    for (; started > 0; started--)
        pthread_join(threads[started - 1], NULL);
    for (int i = 0; i < N; i++) {
        if (streams[i] != NULL)
            hal_stream_destroy(streams[i]);
    }
    fixture_close(&f);
    return rc;
}

/* ---- front caches ------------------------------------------------------------------------- */

/* Blocks a thread frees come back to it from its front cache (caching_allocator_front.c): the
 * same address, counted as cache hits, with no HAL call, and statistics as exact as for the
 * blocks the lock hands out. */
CTEST(caching_allocator, front_cache_hits_keep_exact_statistics)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    hal_stream_t s1 = NULL;
    void *p = NULL, *q = NULL, *big = NULL;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &s1), out);

    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 300, s1, &p), out);
    char *first = p;
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    p = NULL;
    hal_mem_stats_t dev_before = HAL_MEM_STATS_INIT;
    CHECK_OK_GOTO(hal_device_get_mem_stats(f.dev, &dev_before), out);
    for (int i = 0; i < 1000; i++) {
        CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 300, s1, &p), out);
        T_CHECK((char *)p == first);
        CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
        p = NULL;
    }
    hal_mem_stats_t dev_after = HAL_MEM_STATS_INIT;
    CHECK_OK_GOTO(hal_device_get_mem_stats(f.dev, &dev_after), out);
    T_CHECK(dev_after.total_alloc_calls == dev_before.total_alloc_calls);
    hal_allocator_stats_t s = stats_of(f.alloc);
    T_CHECK(s.alloc_count == 1001 && s.free_count == 1001 && s.cache_hits == 1000);
    T_CHECK(s.active_blocks == 0 && s.allocated_bytes == 0 && s.requested_bytes == 0);
    T_CHECK(s.cached_blocks == 1 && s.cached_bytes == 2 * MiB && s.segment_alloc_count == 1);

    /* A block handed out by the front cache counts as allocated, with its requested size. */
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 300, s1, &p), out);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 200, s1, &p), out);
    T_CHECK((char *)p == first);
    s = stats_of(f.alloc);
    T_CHECK(s.allocated_bytes == 512 && s.requested_bytes == 200 && s.active_blocks == 1);
    T_CHECK(s.cached_blocks == 1 && s.cached_bytes == 2 * MiB - 512);
    T_CHECK(s.alloc_count == 1003 && s.free_count == 1002);

    /* The peak is what was allocated at once, not counting what front caches held: 8 KiB
     * allocated while the 512-byte block sat in the front cache gives 8 KiB, not 8.5. */
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    p = NULL;
    CHECK_OK_GOTO(hal_allocator_reset_peak_stats(f.alloc), out);
    T_CHECK(stats_of(f.alloc).peak_allocated_bytes == 0);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 512, s1, &p), out);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    p = NULL;
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 8 * KiB, s1, &q), out);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, q), out);
    q = NULL;
    for (int i = 0; i < 3; i++) { /* now from the front cache */
        CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 512, s1, &p), out);
        CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 8 * KiB, s1, &q), out);
        CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
        CHECK_OK_GOTO(hal_allocator_free(f.alloc, q), out);
        p = q = NULL;
    }
    T_CHECK(stats_of(f.alloc).peak_allocated_bytes == 8 * KiB + 512);
    CHECK_OK_GOTO(hal_allocator_reset_peak_stats(f.alloc), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 8 * KiB, s1, &q), out);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, q), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 512, s1, &p), out);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 3 * MiB, s1, &big), out);
    s = stats_of(f.alloc);
    T_CHECK(s.peak_allocated_bytes == 4 * MiB); /* rounded to a 4 MiB segment, not split */
    p = q = NULL;

    /* A large block serves the request it served before, whole, from the front cache. */
    char *large = big;
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, big), out);
    big = NULL;
    CHECK_OK_GOTO(hal_device_get_mem_stats(f.dev, &dev_before), out);
    for (int i = 0; i < 3; i++) {
        CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 3 * MiB - 100, s1, &big), out);
        T_CHECK((char *)big == large);
        CHECK_OK_GOTO(hal_allocator_free(f.alloc, big), out);
        big = NULL;
    }
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 3 * MiB, s1, &big), out);
    s = stats_of(f.alloc);
    T_CHECK((char *)big == large && s.allocated_bytes == 4 * MiB && s.requested_bytes == 3 * MiB);
    CHECK_OK_GOTO(hal_device_get_mem_stats(f.dev, &dev_after), out);
    T_CHECK(dev_after.total_alloc_calls == dev_before.total_alloc_calls);
    rc = CTEST_PASS;
out:
    hal_allocator_free(f.alloc, p);
    hal_allocator_free(f.alloc, q);
    hal_allocator_free(f.alloc, big);
    if (s1 != NULL)
        hal_stream_destroy(s1);
    fixture_close(&f);
    return rc;
}

/* The argument checks and error statuses are the same whether or not a front cache could serve
 * the call, and failed calls change nothing. */
CTEST(caching_allocator, front_cache_keeps_the_checks)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    hal_stream_t other = NULL;
    void *p = NULL, *q = (void *)1, *base = NULL;
    size_t size = 0;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev1, 0, &other), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 1000, NULL, &p), out);
    char *cached = p;
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out); /* now in the front cache */
    p = NULL;
    hal_allocator_stats_t before = stats_of(f.alloc);

    CHECK_STATUS_GOTO(hal_allocator_alloc(f.alloc, 1000, NULL, NULL), HAL_ERROR_INVALID_ARGUMENT,
                      out);
    CHECK_STATUS_GOTO(hal_allocator_alloc(NULL, 1000, NULL, &q), HAL_ERROR_INVALID_HANDLE, out);
    CHECK_STATUS_GOTO(hal_allocator_alloc(f.alloc, 1000, other, &q), HAL_ERROR_INVALID_ARGUMENT,
                      out);
    CHECK_MESSAGE_GOTO("another device", out);
    T_CHECK(q == (void *)1);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 0, NULL, &q), out);
    T_CHECK(q == NULL);
    CHECK_STATUS_GOTO(hal_allocator_free(f.alloc, cached), HAL_ERROR_INVALID_ARGUMENT, out);
    CHECK_MESSAGE_GOTO("is not a live block", out);
    CHECK_STATUS_GOTO(hal_allocator_free(NULL, cached), HAL_ERROR_INVALID_HANDLE, out);
    CHECK_STATUS_GOTO(hal_allocator_get_block(f.alloc, cached, NULL, NULL), HAL_ERROR_NOT_FOUND,
                      out);
    hal_allocator_stats_t after = stats_of(f.alloc);
    T_CHECK(memcmp(&before, &after, sizeof(before)) == 0);

    /* A block handed out by the front cache: found by get_block, interior pointers refused. */
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 1000, NULL, &p), out);
    T_CHECK((char *)p == cached);
    CHECK_OK_GOTO(hal_allocator_get_block(f.alloc, (char *)p + 999, &base, &size), out);
    T_CHECK(base == p && size == 1000);
    CHECK_STATUS_GOTO(hal_allocator_get_block(f.alloc, (char *)p + 1000, NULL, NULL),
                      HAL_ERROR_NOT_FOUND, out);
    CHECK_STATUS_GOTO(hal_allocator_free(f.alloc, (char *)p + 512), HAL_ERROR_INVALID_ARGUMENT,
                      out);
    CHECK_MESSAGE_GOTO("interior pointer", out);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    CHECK_STATUS_GOTO(hal_allocator_free(f.alloc, p), HAL_ERROR_INVALID_ARGUMENT, out);
    p = NULL;
    rc = CTEST_PASS;
out:
    hal_allocator_free(f.alloc, p);
    if (other != NULL)
        hal_stream_destroy(other);
    fixture_close(&f);
    return rc;
}

/* A block in a front cache follows the rules of stream order: another stream does not get it
 * while its stream may still use it, and record_stream holds it back. */
CTEST(caching_allocator, front_cache_keeps_stream_order)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    hal_stream_t s1 = NULL, s2 = NULL;
    void *p = NULL, *q = NULL, *r = NULL;
    gate_t gate1, gate2;
    gate_init(&gate1);
    gate_init(&gate2);
    int gated1 = 0, gated2 = 0;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &s1), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &s2), out);
    CHECK_OK_GOTO(hal_stream_add_callback(s1, gate_wait, &gate1), out);
    gated1 = 1;

    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 4 * KiB, s1, &p), out);
    char *first = p;
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    p = NULL;
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 4 * KiB, s2, &q), out); /* s1 is still busy */
    T_CHECK((char *)q != first);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 4 * KiB, s1, &p), out);
    T_CHECK((char *)p == first); /* stream order protects the reuse on s1 */

    CHECK_OK_GOTO(hal_stream_add_callback(s2, gate_wait, &gate2), out);
    gated2 = 1;
    CHECK_OK_GOTO(hal_allocator_record_stream(f.alloc, p, s2), out);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    p = NULL;
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 4 * KiB, s1, &r), out);
    T_CHECK((char *)r != first); /* held back for s2 */
    gate_open(&gate1);
    gate_open(&gate2);
    gated1 = gated2 = 0;
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, r), out);
    r = NULL;
    hal_allocator_stats_t s = stats_of(f.alloc);
    /* The held block and the rest of the segment, r merged into it. */
    T_CHECK(s.active_blocks == 1 && s.allocated_bytes == 4 * KiB && s.cached_blocks == 2);
    T_CHECK(s.cached_bytes == 2 * MiB - 4 * KiB);
    CHECK_OK_GOTO(hal_allocator_empty_cache(f.alloc), out); /* waits for s2 */
    s = stats_of(f.alloc);
    T_CHECK(s.active_blocks == 1 && s.cached_blocks == 2 && s.reserved_bytes == 2 * MiB);
    rc = CTEST_PASS;
out:
    if (gated1)
        gate_open(&gate1);
    if (gated2)
        gate_open(&gate2);
    hal_allocator_free(f.alloc, p);
    hal_allocator_free(f.alloc, q);
    hal_allocator_free(f.alloc, r);
    if (s1 != NULL)
        hal_stream_destroy(s1);
    if (s2 != NULL)
        hal_stream_destroy(s2);
    fixture_close(&f);
    gate_destroy(&gate1);
    gate_destroy(&gate2);
    return rc;
}

/* Destroying a stream empties the front caches bound to it; a block it handed out can still be
 * freed, and then serves any stream. */
CTEST(caching_allocator, front_cache_of_a_destroyed_stream)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    hal_stream_t s1 = NULL;
    void *p = NULL, *q = NULL;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &s1), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 2 * KiB, s1, &p), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 4 * KiB, s1, &q), out);
    char *cached = p, *live = q;
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, q), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 4 * KiB, s1, &q), out); /* from the front cache */
    T_CHECK((char *)q == live);
    p = NULL;
    CHECK_OK_GOTO(hal_stream_destroy(s1), out);
    s1 = NULL;
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 2 * KiB, NULL, &p), out);
    T_CHECK((char *)p == cached);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, q), out);
    q = NULL;
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 4 * KiB, NULL, &q), out);
    T_CHECK((char *)q == live);
    hal_allocator_stats_t s = stats_of(f.alloc);
    T_CHECK(s.segment_alloc_count == 1 && s.active_blocks == 2 && s.allocated_bytes == 6 * KiB);
    rc = CTEST_PASS;
out:
    hal_allocator_free(f.alloc, p);
    hal_allocator_free(f.alloc, q);
    if (s1 != NULL)
        hal_stream_destroy(s1);
    fixture_close(&f);
    return rc;
}

/* A worker thread that waits at steps the test sets, running one action per step. */
typedef struct worker {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int step, done; /* step: set by the test (-1: exit); done: the last step finished */
    hal_allocator_t alloc;
    int hand_step; /* the step at which it leaves a block allocated for the test */
    void *handed;  /* that block */
    int failed;
    void (*action)(struct worker *w, int step);
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    for (int step = 1;; step++) {
        pthread_mutex_lock(&w->lock);
        while (w->step >= 0 && w->step < step)
            pthread_cond_wait(&w->cond, &w->lock);
        int stop = w->step < 0;
        pthread_mutex_unlock(&w->lock);
        if (stop)
            return NULL;
        w->action(w, step);
        pthread_mutex_lock(&w->lock);
        w->done = step;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
    }
}

static bool worker_start(worker_t *w, hal_allocator_t alloc, void (*action)(worker_t *, int))
{
    memset(w, 0, sizeof(*w));
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    w->alloc = alloc;
    w->action = action;
    return pthread_create(&w->thread, NULL, worker_main, w) == 0;
}

/* Runs the worker's next step and waits for it; false if the step failed. */
static bool worker_run(worker_t *w)
{
    pthread_mutex_lock(&w->lock);
    int step = ++w->step;
    pthread_cond_broadcast(&w->cond);
    while (w->done < step)
        pthread_cond_wait(&w->cond, &w->lock);
    pthread_mutex_unlock(&w->lock);
    return !w->failed;
}

/* Ends the worker's thread (it exits without any further call) and joins it. */
static void worker_stop(worker_t *w)
{
    pthread_mutex_lock(&w->lock);
    w->step = -1;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
}

/* Two 64 KiB allocate+free pairs per step (the first fills the front cache); step hand_step
 * also leaves a block allocated from the front cache for the test. */
static void cycle_action(worker_t *w, int step)
{
    void *p = NULL;
    for (int i = 0; i < 2; i++) {
        if (hal_allocator_alloc(w->alloc, 64 * KiB, NULL, &p) != HAL_OK ||
            hal_allocator_free(w->alloc, p) != HAL_OK)
            w->failed = 1;
    }
    if (step == w->hand_step && hal_allocator_alloc(w->alloc, 64 * KiB, NULL, &w->handed) != HAL_OK)
        w->failed = 1;
}

/* empty_cache and the out-of-memory retry take back the blocks other threads' front caches
 * hold, while those threads live; a thread's exit returns its front cache to the allocator. */
CTEST(caching_allocator, front_caches_of_other_threads)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    worker_t w;
    int started = 0;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    T_CHECK(worker_start(&w, f.alloc, cycle_action));
    started = 1;
    w.hand_step = 3;

    T_CHECK(worker_run(&w)); /* its 64 KiB block is now in its front cache */
    hal_allocator_stats_t s = stats_of(f.alloc);
    T_CHECK(s.reserved_bytes == 2 * MiB && s.alloc_count == 2 && s.free_count == 2);
    CHECK_OK_GOTO(hal_allocator_empty_cache(f.alloc), out);
    s = stats_of(f.alloc);
    T_CHECK(s.reserved_bytes == 0 && s.cached_blocks == 0 && s.segment_free_count == 1);

    /* Its front cache no longer has the block: it allocates anew. */
    T_CHECK(worker_run(&w));
    s = stats_of(f.alloc);
    T_CHECK(s.segment_alloc_count == 2 && s.alloc_count == 4 && s.active_blocks == 0);

    /* The thread exits with a block from its front cache still allocated: the block stays
     * allocated and frees from here; the cached ones go back to the pool. */
    T_CHECK(worker_run(&w));
    worker_stop(&w);
    started = 0;
    s = stats_of(f.alloc);
    T_CHECK(s.active_blocks == 1 && s.allocated_bytes == 64 * KiB && s.alloc_count == 7);
    T_CHECK(s.cache_hits == 5 && s.free_count == 6);
    void *base = NULL;
    CHECK_OK_GOTO(hal_allocator_get_block(f.alloc, w.handed, &base, NULL), out);
    T_CHECK(base == w.handed);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, w.handed), out);
    w.handed = NULL;
    CHECK_OK_GOTO(hal_allocator_empty_cache(f.alloc), out);
    s = stats_of(f.alloc);
    T_CHECK(s.reserved_bytes == 0 && s.active_blocks == 0 && s.alloc_count == s.free_count);
    rc = CTEST_PASS;
out:
    if (started)
        worker_stop(&w);
    if (f.alloc != NULL && w.handed != NULL)
        hal_allocator_free(f.alloc, w.handed);
    fixture_close(&f);
    return rc;
}

/* Destroying an allocator detaches the front caches of threads that are still running; they
 * then use other allocators (one may get the destroyed one's address) and exit cleanly. */
CTEST(caching_allocator, destroy_detaches_front_caches)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    worker_t w;
    int started = 0;
    hal_allocator_t second = NULL;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    T_CHECK(worker_start(&w, f.alloc, cycle_action));
    started = 1;
    T_CHECK(worker_run(&w));
    CHECK_OK_GOTO(hal_allocator_destroy(f.alloc), out);
    f.alloc = NULL;
    hal_mem_stats_t ms = HAL_MEM_STATS_INIT;
    CHECK_OK_GOTO(hal_device_get_mem_stats(f.dev, &ms), out);
    T_CHECK(ms.device_allocations == 0);

    for (int i = 0; i < 3; i++) {
        CHECK_OK_GOTO(hal_allocator_create(f.dev, NULL, &second), out);
        w.alloc = second;
        T_CHECK(worker_run(&w));
        CHECK_OK_GOTO(hal_allocator_destroy(second), out);
        second = NULL;
    }
    rc = CTEST_PASS;
out:
    if (started)
        worker_stop(&w);
    if (second != NULL)
        hal_allocator_destroy(second);
    fixture_close(&f);
    return rc;
}

/* ---- many threads through front caches ---------------------------------------------------- */

#define FRONT_THREADS    8
#define FRONT_ITERATIONS 2000

typedef struct front_ctx {
    hal_allocator_t alloc;
    hal_stream_t stream; /* NULL: the default stream, shared */
    unsigned id;
    _Atomic(uint64_t *) *mailbox; /* blocks another thread frees */
    atomic_int *failed;
    atomic_int *running; /* threads not finished yet */
} front_ctx_t;

/* Frees a block after checking the words its owner wrote at its ends. */
static void front_release(front_ctx_t *c, uint64_t *p, size_t words)
{
    if (p[0] != (uint64_t)(uintptr_t)p || p[words - 1] != ~(uint64_t)(uintptr_t)p) {
        fprintf(stderr, "front: block %p was overwritten\n", (void *)p);
        atomic_store(c->failed, 1);
    }
    if (hal_allocator_free(c->alloc, p) != HAL_OK) {
        fprintf(stderr, "front: free: %s\n", hal_last_error_message());
        atomic_store(c->failed, 1);
    }
}

static void *front_thread(void *arg)
{
    static const size_t sizes[] = { 512, 4 * KiB, 64 * KiB };
    front_ctx_t *c = arg;
    uint64_t rng = 0x9E3779B97F4A7C15ull * (c->id + 1);
    for (int it = 0; it < FRONT_ITERATIONS && !atomic_load(c->failed); it++) {
        size_t words = sizes[xorshift(&rng) % 3] / 8;
        uint64_t *p = NULL;
        if (hal_allocator_alloc(c->alloc, words * 8, c->stream, (void **)&p) != HAL_OK) {
            fprintf(stderr, "front: alloc: %s\n", hal_last_error_message());
            atomic_store(c->failed, 1);
            break;
        }
        p[0] = (uint64_t)(uintptr_t)p;
        p[words - 1] = ~(uint64_t)(uintptr_t)p;
        /* Now and then the next thread frees it (all 512-byte blocks: words is then 64). */
        if (words == 64 && xorshift(&rng) % 8 == 0) {
            uint64_t *prev = atomic_exchange(&c->mailbox[(c->id + 1) % FRONT_THREADS], p);
            if (prev != NULL)
                front_release(c, prev, 64);
        } else {
            front_release(c, p, words);
        }
        uint64_t *theirs = atomic_exchange(&c->mailbox[c->id], (uint64_t *)NULL);
        if (theirs != NULL)
            front_release(c, theirs, 64);
    }
    atomic_fetch_sub(c->running, 1);
    return NULL;
}

/* Threads allocating and freeing through their front caches, some blocks freed by another
 * thread, while the test reads statistics, resets the peak and empties the cache. */
CTEST(caching_allocator, many_threads_through_front_caches)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    hal_stream_t streams[2] = { NULL, NULL };
    _Atomic(uint64_t *) mailbox[FRONT_THREADS];
    atomic_int failed = 0, running = FRONT_THREADS;
    front_ctx_t ctx[FRONT_THREADS];
    pthread_t threads[FRONT_THREADS];
    int started = 0;
    for (int i = 0; i < FRONT_THREADS; i++)
        atomic_init(&mailbox[i], NULL);
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &streams[0]), out);
    CHECK_OK_GOTO(hal_stream_create(f.dev, 0, &streams[1]), out);
    for (int i = 0; i < FRONT_THREADS; i++) {
        ctx[i] =
            (front_ctx_t){ f.alloc, i < 4 ? streams[i % 2] : NULL, (unsigned)i, mailbox, &failed,
                           &running };
        T_CHECK(pthread_create(&threads[i], NULL, front_thread, &ctx[i]) == 0);
        started++;
    }
    for (int i = 0; i < 20 || atomic_load(&running) > 0; i++) {
        hal_allocator_stats_t s = stats_of(f.alloc);
        T_CHECK(s.allocated_bytes <= s.reserved_bytes && s.cached_bytes <= s.reserved_bytes);
        T_CHECK(s.peak_allocated_bytes <= s.peak_reserved_bytes);
        CHECK_OK_GOTO(i % 2 ? hal_allocator_empty_cache(f.alloc)
                            : hal_allocator_reset_peak_stats(f.alloc),
                      out);
    }
    for (; started > 0; started--)
        pthread_join(threads[started - 1], NULL);
    for (int i = 0; i < FRONT_THREADS; i++) {
        uint64_t *p = atomic_exchange(&mailbox[i], (uint64_t *)NULL);
        if (p != NULL)
            front_release(&ctx[0], p, 64);
    }
    T_CHECK(atomic_load(&failed) == 0);
    hal_allocator_stats_t s = stats_of(f.alloc);
    T_CHECK(s.active_blocks == 0 && s.allocated_bytes == 0 && s.requested_bytes == 0);
    T_CHECK(s.alloc_count == FRONT_THREADS * FRONT_ITERATIONS && s.free_count == s.alloc_count);
    CHECK_OK_GOTO(hal_allocator_empty_cache(f.alloc), out);
    s = stats_of(f.alloc);
    T_CHECK(s.reserved_bytes == 0 && s.cached_blocks == 0 && s.cached_bytes == 0);
    rc = CTEST_PASS;
out:
    for (; started > 0; started--)
        pthread_join(threads[started - 1], NULL);
    for (int i = 0; i < 2; i++) {
        if (streams[i] != NULL)
            hal_stream_destroy(streams[i]);
    }
    fixture_close(&f);
    return rc;
}

/* In a forked child the parent's allocator refuses every call, its front cache included, and
 * the parent goes on using it. */
CTEST(caching_allocator, fork_child_refuses_the_front_cache)
{
    int rc = CTEST_FAIL;
    fixture_t f;
    void *p = NULL, *q = NULL;
    CHECK_OK_GOTO(fixture_open(&f, NULL), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 4 * KiB, NULL, &p), out);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 4 * KiB, NULL, &p), out); /* from the front */
    fflush(NULL);
    pid_t pid = fork();
    T_CHECK(pid >= 0);
    if (pid == 0) {
        int code = 0;
        if (hal_allocator_free(f.alloc, p) != HAL_ERROR_INVALID_HANDLE)
            code = 1;
        else if (hal_allocator_alloc(f.alloc, 4 * KiB, NULL, &q) != HAL_ERROR_INVALID_HANDLE)
            code = 2;
        else if (hal_allocator_destroy(f.alloc) != HAL_OK)
            code = 3;
        _exit(code);
    }
    int wstatus = 0;
    T_CHECK(waitpid(pid, &wstatus, 0) == pid);
    T_CHECK(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
    CHECK_OK_GOTO(hal_allocator_free(f.alloc, p), out);
    CHECK_OK_GOTO(hal_allocator_alloc(f.alloc, 4 * KiB, NULL, &q), out);
    T_CHECK(q == p);
    p = NULL;
    rc = CTEST_PASS;
out:
    hal_allocator_free(f.alloc, p);
    hal_allocator_free(f.alloc, q);
    fixture_close(&f);
    return rc;
}
