/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance: allocation, pointer queries, copies and memset over every memory kind.
 * Device memory is only dereferenced when the device is host_addressable; otherwise it is
 * staged through host memory with copies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"

#define GUARD 64 /* bytes after a copy's destination range that must stay untouched */

static bool has_shared(const cts_ctx_t *ctx)
{
    return (ctx->props.capabilities & HAL_DEVICE_CAP_SHARED_MEMORY) != 0;
}

/* Allocates n bytes of a kind; pageable host memory comes from malloc. */
static hal_status_t kind_alloc(cts_ctx_t *ctx, hal_mem_kind_t kind, size_t n, void **p)
{
    if (kind == HAL_MEM_KIND_UNREGISTERED) {
        *p = malloc(n ? n : 1);
        return *p ? HAL_OK : HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    return hal_mem_alloc(ctx->device, kind, n, 0, p);
}

static void kind_free(hal_mem_kind_t kind, void *p)
{
    if (kind == HAL_MEM_KIND_UNREGISTERED)
        free(p);
    else
        hal_mem_free(p);
}

static size_t first_difference(const uint8_t *a, const uint8_t *b, size_t n)
{
    if (n == 0 || memcmp(a, b, n) == 0)
        return n;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return i;
    return n;
}

/* One direction: pre-fill dst (and a guard after it) with 0x5a, copy n bytes src -> dst on s,
 * read dst back and compare with ref. The stream is idle when it returns. */
static int copy_to_kind(cts_ctx_t *ctx, hal_stream_t s, hal_mem_kind_t sk, const void *src,
                        hal_mem_kind_t dk, size_t n, const uint8_t *ref, uint8_t *stage)
{
    void *dst = NULL;
    int result = CTS_FAIL;
    if (!CTS_EXPECT_OK(kind_alloc(ctx, dk, n + GUARD, &dst)))
        goto out;
    if (dk == HAL_MEM_KIND_UNREGISTERED)
        memset(dst, 0x5a, n + GUARD);
    else if (!CTS_EXPECT_OK(cts_memset_sync(dst, 0x5a, n + GUARD, s)))
        goto out;

    if (!CTS_EXPECT_OK(cts_copy_sync(dst, src, n, s)))
        goto out;

    const uint8_t *view = dst;
    if (!cts_host_accessible(ctx, dk)) {
        if (!CTS_EXPECT_OK(cts_copy_sync(stage, dst, n + GUARD, s)))
            goto out;
        view = stage;
    }
    size_t bad = first_difference(view, ref, n);
    if (bad != n) {
        cts_failf(__FILE__, __LINE__, "%zu-byte copy %s -> %s: byte %zu is %#x, expected %#x", n,
                  cts_kind_name(sk), cts_kind_name(dk), bad, view[bad], ref[bad]);
        goto out;
    }
    bad = cts_bytes_find_other(view + n, GUARD, 0x5a);
    if (bad != GUARD) {
        cts_failf(__FILE__, __LINE__, "%zu-byte copy %s -> %s wrote past its end (byte n+%zu)", n,
                  cts_kind_name(sk), cts_kind_name(dk), bad);
        goto out;
    }
    result = CTS_PASS;
out:
    hal_stream_synchronize(s);
    kind_free(dk, dst);
    return result;
}

/* All directions out of one source kind: the source is filled with ref once. */
static int copy_from_kind(cts_ctx_t *ctx, hal_stream_t s, hal_mem_kind_t sk,
                          const hal_mem_kind_t *kinds, size_t nkinds, size_t n, const uint8_t *ref,
                          uint8_t *stage)
{
    void *src = NULL;
    int result = CTS_FAIL;
    if (!CTS_EXPECT_OK(kind_alloc(ctx, sk, n, &src)))
        goto out;
    if (n > 0 && cts_host_accessible(ctx, sk))
        memcpy(src, ref, n);
    else if (!CTS_EXPECT_OK(cts_copy_sync(src, ref, n, s)))
        goto out;
    result = CTS_PASS;
    for (size_t j = 0; j < nkinds && result == CTS_PASS; j++)
        result = copy_to_kind(ctx, s, sk, src, kinds[j], n, ref, stage);
out:
    hal_stream_synchronize(s);
    kind_free(sk, src);
    return result;
}

/* Every direction between device, pinned, shared (if supported) and pageable host memory. */
static int roundtrip(cts_ctx_t *ctx, size_t n)
{
    hal_mem_kind_t kinds[4] = { HAL_MEM_KIND_DEVICE, HAL_MEM_KIND_HOST_PINNED,
                                HAL_MEM_KIND_UNREGISTERED, HAL_MEM_KIND_SHARED };
    size_t nkinds = has_shared(ctx) ? 4 : 3;
    if (ctx->props.total_memory < 4 * (uint64_t)(n + GUARD))
        CTS_SKIP("the device has %llu bytes, too few for %zu-byte copies",
                 (unsigned long long)ctx->props.total_memory, n);
    uint8_t *ref = malloc(n + GUARD), *stage = malloc(n + GUARD);
    hal_stream_t s = NULL;
    int result = CTS_FAIL;
    if (!CTS_EXPECT(ref != NULL && stage != NULL) ||
        !CTS_EXPECT_OK(hal_stream_create(ctx->device, 0, &s)))
        goto out;
    cts_pattern_fill(ref, n + GUARD, (uint32_t)n);
    result = CTS_PASS;
    for (size_t i = 0; i < nkinds && result == CTS_PASS; i++)
        result = copy_from_kind(ctx, s, kinds[i], kinds, nkinds, n, ref, stage);
out:
    if (s != NULL && !CTS_EXPECT_OK(hal_stream_destroy(s)))
        result = CTS_FAIL;
    free(ref);
    free(stage);
    return result;
}

int cts_memory_roundtrip_size_0(cts_ctx_t *ctx)
{
    return roundtrip(ctx, 0);
}

int cts_memory_roundtrip_size_1(cts_ctx_t *ctx)
{
    return roundtrip(ctx, 1);
}

int cts_memory_roundtrip_size_odd(cts_ctx_t *ctx)
{
    return roundtrip(ctx, 4099);
}

int cts_memory_roundtrip_size_1mib(cts_ctx_t *ctx)
{
    return roundtrip(ctx, 1 << 20);
}

int cts_memory_roundtrip_size_64mib(cts_ctx_t *ctx)
{
    return roundtrip(ctx, (size_t)64 << 20);
}

/* ---- Allocation -------------------------------------------------------------------------- */

static int check_alloc(cts_ctx_t *ctx, hal_mem_kind_t kind)
{
    const size_t sizes[] = { 1, 255, 4099, 1 << 20 };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        void *p = NULL;
        hal_mem_info_t info = HAL_MEM_INFO_INIT;
        CTS_CHECK_OK(hal_mem_alloc(ctx->device, kind, sizes[i], 0, &p));
        CTS_CHECK(p != NULL);
        CTS_CHECKF((uintptr_t)p % ctx->props.alignment == 0,
                   "%s allocation %p is not aligned to the device's %u bytes", cts_kind_name(kind),
                   p, ctx->props.alignment);
        CTS_CHECK_OK(hal_mem_get_info(p, &info));
        CTS_CHECK(info.kind == kind && info.base == p && info.size == sizes[i]);
        CTS_CHECK(info.device == ctx->device);
        if (cts_host_accessible(ctx, kind)) {
            memset(p, 0x3c, sizes[i]); /* the host may touch every byte */
            CTS_CHECK(((uint8_t *)p)[sizes[i] - 1] == 0x3c);
        }
        CTS_CHECK_OK(hal_mem_free(p));
    }
    return CTS_PASS;
}

int cts_memory_alloc_device(cts_ctx_t *ctx)
{
    return check_alloc(ctx, HAL_MEM_KIND_DEVICE);
}

int cts_memory_alloc_pinned(cts_ctx_t *ctx)
{
    return check_alloc(ctx, HAL_MEM_KIND_HOST_PINNED);
}

/* Shared memory is optional: supported, it works like the others; unsupported, the call says
 * HAL_ERROR_UNSUPPORTED without a side effect. */
int cts_memory_alloc_shared(cts_ctx_t *ctx)
{
    if (has_shared(ctx))
        return check_alloc(ctx, HAL_MEM_KIND_SHARED);
    void *p = (void *)(uintptr_t)0x1;
    CTS_CHECK_STATUS(hal_mem_alloc(ctx->device, HAL_MEM_KIND_SHARED, 4096, 0, &p),
                     HAL_ERROR_UNSUPPORTED);
    return CTS_PASS;
}

int cts_memory_alloc_zero_size(cts_ctx_t *ctx)
{
    hal_mem_kind_t kinds[] = { HAL_MEM_KIND_DEVICE, HAL_MEM_KIND_HOST_PINNED, HAL_MEM_KIND_SHARED };
    size_t n = has_shared(ctx) ? 3 : 2;
    for (size_t i = 0; i < n; i++) {
        void *p = (void *)(uintptr_t)0x1;
        CTS_CHECK_OK(hal_mem_alloc(ctx->device, kinds[i], 0, 0, &p));
        CTS_CHECKF(p == NULL, "a 0-byte %s allocation returned %p, not NULL",
                   cts_kind_name(kinds[i]), p);
    }
    CTS_CHECK_OK(hal_mem_free(NULL));
    return CTS_PASS;
}

int cts_memory_alloc_alignment(cts_ctx_t *ctx)
{
    const size_t aligns[] = { 1, 2, 64, 512, 4096, 65536, 1 << 20 };
    hal_mem_kind_t kinds[] = { HAL_MEM_KIND_DEVICE, HAL_MEM_KIND_HOST_PINNED, HAL_MEM_KIND_SHARED };
    size_t nk = has_shared(ctx) ? 3 : 2;
    for (size_t k = 0; k < nk; k++) {
        for (size_t i = 0; i < sizeof(aligns) / sizeof(aligns[0]); i++) {
            void *p = NULL;
            CTS_CHECK_OK(hal_mem_alloc(ctx->device, kinds[k], 100, aligns[i], &p));
            CTS_CHECKF((uintptr_t)p % aligns[i] == 0 && (uintptr_t)p % ctx->props.alignment == 0,
                       "%s allocation with alignment %zu returned %p", cts_kind_name(kinds[k]),
                       aligns[i], p);
            CTS_CHECK_OK(hal_mem_free(p));
        }
    }
    return CTS_PASS;
}

static int stats_now(cts_ctx_t *ctx, hal_mem_stats_t *s)
{
    memset(s, 0, sizeof(*s));
    s->struct_size = sizeof(*s);
    return CTS_EXPECT_OK(hal_device_get_mem_stats(ctx->device, s)) ? 0 : -1;
}

int cts_memory_alloc_invalid_arguments(cts_ctx_t *ctx)
{
    const size_t bad_aligns[] = { 3, 6, 100, 4097, (size_t)2 << 20, SIZE_MAX };
    hal_mem_stats_t a, b;
    void *p = (void *)(uintptr_t)0x1;
    CTS_CHECK(stats_now(ctx, &a) == 0);
    for (size_t i = 0; i < sizeof(bad_aligns) / sizeof(bad_aligns[0]); i++)
        CTS_CHECKF(cts_expect_status(
                       hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 64, bad_aligns[i], &p),
                       HAL_ERROR_INVALID_ARGUMENT, __FILE__, __LINE__, "hal_mem_alloc"),
                   "alignment %zu was not rejected", bad_aligns[i]);
    CTS_CHECK_STATUS(hal_mem_alloc(ctx->device, HAL_MEM_KIND_UNREGISTERED, 64, 0, &p),
                     HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_mem_alloc(ctx->device, (hal_mem_kind_t)4, 64, 0, &p),
                     HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_mem_alloc(ctx->device, (hal_mem_kind_t)99, 64, 0, &p),
                     HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 64, 0, NULL),
                     HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK(stats_now(ctx, &b) == 0);
    CTS_CHECK(b.total_alloc_calls == a.total_alloc_calls);
    CTS_CHECK(b.device_allocations == a.device_allocations);
    CTS_CHECK(b.device_bytes_in_use == a.device_bytes_in_use);
    return CTS_PASS;
}

int cts_memory_alloc_out_of_device_memory(cts_ctx_t *ctx)
{
    hal_mem_stats_t a, b;
    void *p = NULL;
    char msg[1024];
    if (ctx->props.total_memory >= SIZE_MAX / 2)
        CTS_SKIP("total_memory %llu cannot be exceeded with a size_t",
                 (unsigned long long)ctx->props.total_memory);
    CTS_CHECK(stats_now(ctx, &a) == 0);
    CTS_CHECK_STATUS(
        hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, (size_t)ctx->props.total_memory + 1, 0, &p),
        HAL_ERROR_OUT_OF_DEVICE_MEMORY);
    snprintf(msg, sizeof(msg), "%s", hal_last_error_message());
    CTS_CHECKF(strstr(msg, "hal_mem_alloc") != NULL, "message \"%s\" lacks hal_mem_alloc", msg);
    CTS_CHECK_STATUS(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, SIZE_MAX / 2, 0, &p),
                     HAL_ERROR_OUT_OF_DEVICE_MEMORY);
    CTS_CHECK(stats_now(ctx, &b) == 0);
    CTS_CHECK(b.total_alloc_calls == a.total_alloc_calls);
    CTS_CHECK(b.device_bytes_in_use == a.device_bytes_in_use);
    /* The device is still usable. */
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 4096, 0, &p));
    CTS_CHECK_OK(hal_mem_free(p));
    return CTS_PASS;
}

int cts_memory_alloc_out_of_host_memory(cts_ctx_t *ctx)
{
    void *p = NULL;
    CTS_CHECK_STATUS(hal_mem_alloc(ctx->device, HAL_MEM_KIND_HOST_PINNED, (size_t)1 << 62, 0, &p),
                     HAL_ERROR_OUT_OF_HOST_MEMORY);
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_HOST_PINNED, 4096, 0, &p));
    CTS_CHECK_OK(hal_mem_free(p));
    return CTS_PASS;
}

/* ---- Pointer queries ------------------------------------------------------------------------ */

static int check_info(cts_ctx_t *ctx, const void *ptr, hal_mem_kind_t kind, hal_device_t device,
                      void *base, size_t size)
{
    hal_mem_info_t info;
    memset(&info, 0xee, sizeof(info));
    info.struct_size = sizeof(info);
    info.next = NULL;
    CTS_CHECK_OK(hal_mem_get_info(ptr, &info));
    CTS_CHECKF(info.kind == kind && info.device == device && info.base == base && info.size == size,
               "hal_mem_get_info(%p): kind %d device %p base %p size %zu; expected %d %p %p %zu",
               ptr, (int)info.kind, (void *)info.device, info.base, info.size, (int)kind,
               (void *)device, base, size);
    return CTS_PASS;
}

int cts_memory_get_info(cts_ctx_t *ctx)
{
    hal_mem_kind_t kinds[] = { HAL_MEM_KIND_DEVICE, HAL_MEM_KIND_HOST_PINNED, HAL_MEM_KIND_SHARED };
    size_t nk = has_shared(ctx) ? 3 : 2;
    enum { SIZE = 4099 };
    for (size_t k = 0; k < nk; k++) {
        uint8_t *p = NULL;
        CTS_CHECK_OK(hal_mem_alloc(ctx->device, kinds[k], SIZE, 0, (void **)&p));
        int r = CTS_PASS;
        const size_t offsets[] = { 0, 1, SIZE / 2, SIZE - 1 };
        for (size_t i = 0; i < 4 && r == CTS_PASS; i++)
            r = check_info(ctx, p + offsets[i], kinds[k], ctx->device, p, SIZE);
        /* One past the end is not inside this allocation. */
        hal_mem_info_t info = HAL_MEM_INFO_INIT;
        if (r == CTS_PASS && CTS_EXPECT_OK(hal_mem_get_info(p + SIZE, &info)) &&
            !(info.kind == HAL_MEM_KIND_UNREGISTERED || info.base != p)) {
            cts_failf(__FILE__, __LINE__, "the end of a %d-byte allocation is reported inside it",
                      SIZE);
            r = CTS_FAIL;
        }
        CTS_CHECK_OK(hal_mem_free(p));
        if (r != CTS_PASS)
            return r;
        /* A freed allocation is unknown again. */
        r = check_info(ctx, p, HAL_MEM_KIND_UNREGISTERED, NULL, NULL, 0);
        if (r != CTS_PASS)
            return r;
    }
    return CTS_PASS;
}

int cts_memory_get_info_unregistered(cts_ctx_t *ctx)
{
    int on_stack = 0;
    void *heap = malloc(64);
    CTS_CHECK(heap != NULL);
    int r = check_info(ctx, heap, HAL_MEM_KIND_UNREGISTERED, NULL, NULL, 0);
    free(heap);
    if (r != CTS_PASS)
        return r;
    r = check_info(ctx, &on_stack, HAL_MEM_KIND_UNREGISTERED, NULL, NULL, 0);
    if (r != CTS_PASS)
        return r;
    return check_info(ctx, NULL, HAL_MEM_KIND_UNREGISTERED, NULL, NULL, 0);
}

int cts_memory_get_info_invalid(cts_ctx_t *ctx)
{
    void *p = NULL;
    hal_mem_info_t info = HAL_MEM_INFO_INIT;
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 64, 0, &p));
    hal_status_t st1 = hal_mem_get_info(p, NULL);
    info.struct_size = 0;
    hal_status_t st2 = hal_mem_get_info(p, &info);
    info.struct_size = offsetof(hal_mem_info_t, size);
    hal_status_t st3 = hal_mem_get_info(p, &info);
    CTS_CHECK_OK(hal_mem_free(p));
    CTS_CHECK_STATUS(st1, HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(st2, HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(st3, HAL_ERROR_INVALID_ARGUMENT);
    return CTS_PASS;
}

/* ---- Interior pointers ---------------------------------------------------------------------- */

/* Copies and memsets through pointers inside an allocation touch exactly their ranges. */
int cts_memory_interior_pointers(cts_ctx_t *ctx)
{
    enum { SIZE = 8192, OFF = 100, LEN = 1000, SET_OFF = 2000, SET_LEN = 50, D2D_OFF = 4096 };
    hal_mem_kind_t kinds[] = { HAL_MEM_KIND_DEVICE, HAL_MEM_KIND_HOST_PINNED, HAL_MEM_KIND_SHARED };
    size_t nk = has_shared(ctx) ? 3 : 2;
    hal_stream_t s = NULL;
    uint8_t *host = cts_calloc(ctx, SIZE), *back = cts_calloc(ctx, SIZE);
    uint8_t *expect = cts_calloc(ctx, SIZE);
    CTS_CHECK(host != NULL && back != NULL && expect != NULL);
    cts_pattern_fill(host, LEN, 99);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    for (size_t k = 0; k < nk; k++) {
        uint8_t *d = NULL;
        CTS_CHECK_OK(hal_mem_alloc(ctx->device, kinds[k], SIZE, 0, (void **)&d));
        CTS_CHECK_OK(hal_memset_async(d, 0, SIZE, s));
        CTS_CHECK_OK(hal_memcpy_async(d + OFF, host, LEN, s));
        CTS_CHECK_OK(hal_memset_async(d + SET_OFF, 0xab, SET_LEN, s));
        /* Within one allocation, disjoint ranges may be copied. */
        CTS_CHECK_OK(hal_memcpy_async(d + D2D_OFF, d + OFF, LEN, s));
        CTS_CHECK_OK(hal_memcpy_async(back, d, SIZE, s));
        CTS_CHECK_OK(hal_stream_synchronize(s));
        memset(expect, 0, SIZE);
        memcpy(expect + OFF, host, LEN);
        memset(expect + SET_OFF, 0xab, SET_LEN);
        memcpy(expect + D2D_OFF, host, LEN);
        size_t bad = first_difference(back, expect, SIZE);
        CTS_CHECKF(bad == SIZE, "%s memory: byte %zu is %#x, expected %#x", cts_kind_name(kinds[k]),
                   bad, back[bad], expect[bad]);
        /* Reading from an interior pointer. */
        memset(back, 0, SIZE);
        CTS_CHECK_OK(cts_copy_sync(back, d + OFF + 10, LEN - 10, s));
        CTS_CHECK(memcmp(back, host + 10, LEN - 10) == 0);
        hal_mem_info_t info = HAL_MEM_INFO_INIT;
        CTS_CHECK_OK(hal_mem_get_info(d + OFF, &info));
        CTS_CHECK(info.base == d && info.size == SIZE && info.kind == kinds[k]);
        CTS_CHECK_OK(hal_mem_free(d));
    }
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

/* ---- Copies: invalid ranges ------------------------------------------------------------------ */

/* Reads a device allocation back and checks it still holds `value` everywhere. */
static int check_unchanged(cts_ctx_t *ctx, hal_stream_t s, const void *d, size_t n, uint8_t value,
                           const char *what)
{
    uint8_t *back = cts_calloc(ctx, n);
    CTS_CHECK(back != NULL);
    CTS_CHECK_OK(cts_copy_sync(back, d, n, s));
    size_t bad = cts_bytes_find_other(back, n, value);
    CTS_CHECKF(bad == n, "%s: a rejected call changed byte %zu to %#x", what, bad, back[bad]);
    return CTS_PASS;
}

int cts_memory_copy_out_of_range(cts_ctx_t *ctx)
{
    enum { SIZE = 4096 };
    hal_stream_t s = NULL;
    uint8_t *d = NULL, *p = NULL;
    uint8_t *host = cts_calloc(ctx, 2 * SIZE), *copy = cts_calloc(ctx, 2 * SIZE);
    CTS_CHECK(host != NULL && copy != NULL);
    cts_pattern_fill(host, 2 * SIZE, 5);
    memcpy(copy, host, 2 * SIZE);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, SIZE, 0, (void **)&d));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_HOST_PINNED, SIZE, 0, (void **)&p));
    CTS_CHECK_OK(cts_memset_sync(d, 0x11, SIZE, s));
    memset(p, 0x22, SIZE);

    const hal_status_t bad = HAL_ERROR_INVALID_ARGUMENT;
    CTS_CHECK_STATUS(hal_memcpy_async(d, host, SIZE + 1, s), bad);
    CTS_CHECK_STATUS(hal_memcpy_async(d + 1, host, SIZE, s), bad);
    CTS_CHECK_STATUS(hal_memcpy_async(d + SIZE - 1, host, 2, s), bad);
    CTS_CHECK_STATUS(hal_memcpy_async(host, d + 100, SIZE - 99, s), bad);
    CTS_CHECK_STATUS(hal_memcpy_async(p, host, SIZE + 1, s), bad);
    CTS_CHECK_STATUS(hal_memcpy_async(host, p + 1, SIZE, s), bad);
    CTS_CHECK_STATUS(hal_memcpy_async(d, p, SIZE + 1, s), bad);
    /* Sizes that overflow an address computation. */
    CTS_CHECK_STATUS(hal_memcpy_async(d + 100, host, SIZE_MAX - 50, s), bad);
    CTS_CHECK_STATUS(hal_memcpy_async(host, d, SIZE_MAX, s), bad);
    CTS_CHECK_STATUS(hal_memset_async(d + SIZE - 96, 0, 97, s), bad);
    CTS_CHECK_STATUS(hal_memset_async(p, 0, SIZE + 1, s), bad);
    CTS_CHECK_STATUS(hal_memset_async(d + 1, 0, SIZE_MAX, s), bad);

    /* Nothing happened, and nothing latched on the stream. */
    CTS_CHECK_OK(hal_stream_synchronize(s));
    int r = check_unchanged(ctx, s, d, SIZE, 0x11, "device memory");
    if (r != CTS_PASS)
        return r;
    CTS_CHECK(cts_bytes_find_other(p, SIZE, 0x22) == SIZE);
    CTS_CHECK(memcmp(host, copy, 2 * SIZE) == 0);
    CTS_CHECK_OK(hal_mem_free(d));
    CTS_CHECK_OK(hal_mem_free(p));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_memory_copy_overlapping(cts_ctx_t *ctx)
{
    enum { SIZE = 4096 };
    hal_stream_t s = NULL;
    uint8_t *d = NULL, *p = NULL;
    uint8_t *host = cts_calloc(ctx, SIZE);
    CTS_CHECK(host != NULL);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, SIZE, 0, (void **)&d));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_HOST_PINNED, SIZE, 0, (void **)&p));
    CTS_CHECK_OK(cts_memset_sync(d, 0x33, SIZE, s));
    memset(p, 0x44, SIZE);
    memset(host, 0x55, SIZE);
    const hal_status_t bad = HAL_ERROR_INVALID_ARGUMENT;
    CTS_CHECK_STATUS(hal_memcpy_async(d + 10, d, 100, s), bad);
    CTS_CHECK_STATUS(hal_memcpy_async(d, d + 10, 100, s), bad);
    CTS_CHECK_STATUS(hal_memcpy_async(d, d, 16, s), bad);
    CTS_CHECK_STATUS(hal_memcpy_async(p + 1, p, 2, s), bad);
    CTS_CHECK_STATUS(hal_memcpy_async(host + 8, host, 64, s), bad);
    /* Adjacent ranges do not overlap. */
    CTS_CHECK_OK(hal_memcpy_async(d + 100, d, 100, s));
    CTS_CHECK_OK(hal_memcpy_async(p + 100, p, 100, s));
    CTS_CHECK_OK(hal_stream_synchronize(s));
    int r = check_unchanged(ctx, s, d, SIZE, 0x33, "device memory");
    if (r != CTS_PASS)
        return r;
    CTS_CHECK(cts_bytes_find_other(p, SIZE, 0x44) == SIZE);
    CTS_CHECK(cts_bytes_find_other(host, SIZE, 0x55) == SIZE);
    CTS_CHECK_OK(hal_mem_free(d));
    CTS_CHECK_OK(hal_mem_free(p));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_memory_copy_null_and_empty(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    uint8_t *d = NULL;
    uint8_t *host = cts_calloc(ctx, 64);
    CTS_CHECK(host != NULL);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 64, 0, (void **)&d));
    CTS_CHECK_OK(cts_memset_sync(d, 0x66, 64, s));
    CTS_CHECK_STATUS(hal_memcpy_async(NULL, host, 16, s), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_memcpy_async(d, NULL, 16, s), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_memset_async(NULL, 0, 16, s), HAL_ERROR_INVALID_ARGUMENT);
    /* n == 0 is a no-op, NULL pointers included. */
    CTS_CHECK_OK(hal_memcpy_async(NULL, NULL, 0, s));
    CTS_CHECK_OK(hal_memcpy_async(d, host, 0, s));
    CTS_CHECK_OK(hal_memcpy_async(host, d, 0, s));
    CTS_CHECK_OK(hal_memset_async(d, 0, 0, s));
    CTS_CHECK_OK(hal_memset_async(NULL, 0, 0, s));
    CTS_CHECK_OK(hal_stream_synchronize(s));
    int r = check_unchanged(ctx, s, d, 64, 0x66, "device memory");
    if (r != CTS_PASS)
        return r;
    CTS_CHECK_OK(hal_mem_free(d));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

/* ---- Memset ------------------------------------------------------------------------------- */

int cts_memory_memset(cts_ctx_t *ctx)
{
    const size_t sizes[] = { 1, 4099, 1 << 20 };
    const int values[] = { 0, 0xff, 0x1ab, -1, 0x7f };
    hal_mem_kind_t kinds[] = { HAL_MEM_KIND_DEVICE, HAL_MEM_KIND_HOST_PINNED, HAL_MEM_KIND_SHARED };
    size_t nk = has_shared(ctx) ? 3 : 2;
    hal_stream_t s = NULL;
    uint8_t *back = cts_calloc(ctx, (1 << 20) + GUARD);
    CTS_CHECK(back != NULL);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    for (size_t k = 0; k < nk; k++) {
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            uint8_t *d = NULL;
            size_t n = sizes[i];
            CTS_CHECK_OK(hal_mem_alloc(ctx->device, kinds[k], n + GUARD, 0, (void **)&d));
            for (size_t v = 0; v < sizeof(values) / sizeof(values[0]); v++) {
                uint8_t want = (uint8_t)values[v];
                CTS_CHECK_OK(hal_memset_async(d, 0x5a, n + GUARD, s));
                CTS_CHECK_OK(hal_memset_async(d, values[v], n, s));
                CTS_CHECK_OK(hal_memcpy_async(back, d, n + GUARD, s));
                CTS_CHECK_OK(hal_stream_synchronize(s));
                size_t bad = cts_bytes_find_other(back, n, want);
                CTS_CHECKF(bad == n, "memset(%s, %#x, %zu): byte %zu is %#x, expected %#x",
                           cts_kind_name(kinds[k]), values[v], n, bad, back[bad], want);
                CTS_CHECKF(cts_bytes_find_other(back + n, GUARD, 0x5a) == GUARD,
                           "memset(%s, %#x, %zu) wrote past its end", cts_kind_name(kinds[k]),
                           values[v], n);
            }
            CTS_CHECK_OK(hal_mem_free(d));
        }
    }
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_memory_memset_invalid(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    uint8_t stack_buf[64];
    uint8_t *host = cts_calloc(ctx, 64);
    CTS_CHECK(host != NULL);
    memset(host, 0x12, 64);
    memset(stack_buf, 0x34, sizeof(stack_buf));
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_STATUS(hal_memset_async(host, 0, 64, s), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_memset_async(stack_buf, 0, sizeof(stack_buf), s),
                     HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_memset_async(NULL, 0, 1, s), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_OK(hal_stream_synchronize(s));
    CTS_CHECK(cts_bytes_find_other(host, 64, 0x12) == 64);
    CTS_CHECK(cts_bytes_find_other(stack_buf, sizeof(stack_buf), 0x34) == sizeof(stack_buf));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

/* ---- Free ----------------------------------------------------------------------------------- */

int cts_memory_free_invalid(cts_ctx_t *ctx)
{
    uint8_t *d = NULL, *p = NULL;
    int on_stack = 0;
    hal_mem_stats_t a, b;
    void *heap = malloc(64);
    CTS_CHECK(heap != NULL);
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 4096, 0, (void **)&d));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_HOST_PINNED, 4096, 0, (void **)&p));
    CTS_CHECK(stats_now(ctx, &a) == 0);
    hal_status_t st[5];
    st[0] = hal_mem_free(d + 1);
    st[1] = hal_mem_free(d + 4095);
    st[2] = hal_mem_free(p + 64);
    st[3] = hal_mem_free(heap);
    st[4] = hal_mem_free(&on_stack);
    free(heap);
    for (int i = 0; i < 5; i++)
        CTS_CHECKF(cts_expect_status(st[i], HAL_ERROR_INVALID_ARGUMENT, __FILE__, __LINE__,
                                     "hal_mem_free(not a base)"),
                   "case %d", i);
    /* No side effect: both allocations are live. */
    CTS_CHECK(stats_now(ctx, &b) == 0);
    CTS_CHECK(b.total_free_calls == a.total_free_calls);
    CTS_CHECK(b.device_allocations == a.device_allocations);
    CTS_CHECK(check_info(ctx, d + 1, HAL_MEM_KIND_DEVICE, ctx->device, d, 4096) == CTS_PASS);
    memset(p, 1, 4096);
    CTS_CHECK_OK(hal_mem_free(d));
    CTS_CHECK_OK(hal_mem_free(p));
    /* Double free. */
    CTS_CHECK_STATUS(hal_mem_free(d), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_mem_free(p), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_OK(hal_mem_free(NULL));
    return CTS_PASS;
}

/* hal_mem_free first waits for the device's queued work, like cudaFree. */
int cts_memory_free_waits_for_queued_work(cts_ctx_t *ctx)
{
    enum { SIZE = 1 << 20 };
    hal_stream_t s = NULL;
    uint8_t *d = NULL;
    uint8_t *src = cts_calloc(ctx, SIZE), *dst = cts_calloc(ctx, SIZE);
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    CTS_CHECK(src != NULL && dst != NULL);
    cts_pattern_fill(src, SIZE, 11);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, SIZE, 0, (void **)&d));
    CTS_CHECK_OK(cts_copy_sync(d, src, SIZE, s));
    cts_gate_t *gate = cts_gate_new(ctx);
    CTS_CHECK_OK(cts_gate_enqueue(gate, s));
    CTS_CHECK_OK(hal_memcpy_async(dst, d, SIZE, s));
    CTS_CHECK(cts_gate_open_later(ctx, gate, 100) == 0);
    CTS_CHECK_OK(hal_mem_free(d));
    CTS_CHECKF(cts_gate_done(gate), "hal_mem_free returned while work was queued before it");
    size_t bad = cts_pattern_find_mismatch(dst, SIZE, 11);
    CTS_CHECKF(bad == SIZE, "the copy queued before hal_mem_free is wrong at byte %zu", bad);
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_memory_free_async(cts_ctx_t *ctx)
{
    enum { SIZE = 1 << 20 };
    hal_stream_t s = NULL;
    uint8_t *d = NULL;
    hal_mem_stats_t a, b, c;
    uint8_t *src = cts_calloc(ctx, SIZE), *dst = cts_calloc(ctx, SIZE);
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    CTS_CHECK(src != NULL && dst != NULL);
    cts_pattern_fill(src, SIZE, 12);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK(stats_now(ctx, &a) == 0);
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, SIZE, 0, (void **)&d));
    CTS_CHECK_OK(cts_copy_sync(d, src, SIZE, s));
    /* Queue work behind a gate, then the free: the work must still see valid memory. */
    cts_gate_t *gate = cts_gate_new(ctx);
    CTS_CHECK_OK(cts_gate_enqueue(gate, s));
    CTS_CHECK_OK(hal_memcpy_async(dst, d, SIZE, s));
    CTS_CHECK_OK(hal_mem_free_async(d, s));
    CTS_CHECK(stats_now(ctx, &b) == 0);
    CTS_CHECK(b.total_free_calls == a.total_free_calls + 1);
    /* The pointer is no longer the caller's to free. */
    CTS_CHECK_STATUS(hal_mem_free(d), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_mem_free_async(d, s), HAL_ERROR_INVALID_ARGUMENT);
    cts_gate_open(gate);
    CTS_CHECK_OK(hal_stream_synchronize(s));
    size_t bad = cts_pattern_find_mismatch(dst, SIZE, 12);
    CTS_CHECKF(bad == SIZE, "the copy queued before hal_mem_free_async is wrong at byte %zu", bad);
    CTS_CHECK(stats_now(ctx, &c) == 0);
    CTS_CHECKF(c.device_bytes_in_use == a.device_bytes_in_use &&
                   c.device_allocations == a.device_allocations,
               "after the stream reached the free, %llu bytes in %llu allocations remain (%llu, "
               "%llu before)",
               (unsigned long long)c.device_bytes_in_use, (unsigned long long)c.device_allocations,
               (unsigned long long)a.device_bytes_in_use, (unsigned long long)a.device_allocations);
    CTS_CHECK_OK(hal_mem_free_async(NULL, s));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_memory_free_async_invalid(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL, dead = NULL;
    uint8_t *d = NULL;
    int on_stack = 0;
    void *heap = malloc(64);
    CTS_CHECK(heap != NULL);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &dead));
    CTS_CHECK_OK(hal_stream_destroy(dead));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 4096, 0, (void **)&d));
    hal_status_t st[4];
    st[0] = hal_mem_free_async(d + 1, s);
    st[1] = hal_mem_free_async(heap, s);
    st[2] = hal_mem_free_async(&on_stack, s);
    st[3] = hal_mem_free_async(d + 4095, s);
    free(heap);
    for (int i = 0; i < 4; i++)
        CTS_CHECKF(cts_expect_status(st[i], HAL_ERROR_INVALID_ARGUMENT, __FILE__, __LINE__,
                                     "hal_mem_free_async(not a base)"),
                   "case %d", i);
    CTS_CHECK_STATUS(hal_mem_free_async(d, NULL), HAL_ERROR_INVALID_HANDLE);
    CTS_CHECK_STATUS(hal_mem_free_async(d, dead), HAL_ERROR_INVALID_HANDLE);
    CTS_CHECK_OK(hal_stream_synchronize(s));
    /* Still live after all of these. */
    CTS_CHECK(check_info(ctx, d, HAL_MEM_KIND_DEVICE, ctx->device, d, 4096) == CTS_PASS);
    CTS_CHECK_OK(hal_mem_free_async(d, s));
    CTS_CHECK_OK(hal_stream_synchronize(s));
    CTS_CHECK_STATUS(hal_mem_free_async(d, s), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

/* ---- Several devices and backends ------------------------------------------------------------ */

/* Device-to-device copies across devices need HAL_DEVICE_CAP_PEER_COPY; without it they are
 * refused with no side effect. */
int cts_memory_copy_between_devices(cts_ctx_t *ctx)
{
    enum { SIZE = 65536 };
    hal_device_properties_t op = HAL_DEVICE_PROPERTIES_INIT;
    hal_stream_t s = NULL, so = NULL;
    uint8_t *d = NULL, *o = NULL;
    CTS_SKIP_UNLESS_DEVICES(ctx, 2);
    hal_device_t other = cts_other_device(ctx);
    CTS_CHECK(other != NULL);
    CTS_CHECK_OK(hal_device_get_properties(other, &op));
    const bool peer_here = (ctx->props.capabilities & HAL_DEVICE_CAP_PEER_COPY) != 0;
    const bool peer_there = (op.capabilities & HAL_DEVICE_CAP_PEER_COPY) != 0;
    if (peer_here != peer_there)
        CTS_SKIP("only one of the two devices has HAL_DEVICE_CAP_PEER_COPY");
    uint8_t *host = cts_calloc(ctx, SIZE), *back = cts_calloc(ctx, SIZE);
    CTS_CHECK(host != NULL && back != NULL);
    cts_pattern_fill(host, SIZE, 21);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_stream_create(other, 0, &so));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, SIZE, 0, (void **)&d));
    CTS_CHECK_OK(hal_mem_alloc(other, HAL_MEM_KIND_DEVICE, SIZE, 0, (void **)&o));
    CTS_CHECK_OK(cts_copy_sync(d, host, SIZE, s));
    CTS_CHECK_OK(cts_memset_sync(o, 0x77, SIZE, so));
    if (peer_here) {
        CTS_CHECK_OK(cts_copy_sync(o, d, SIZE, s));
        CTS_CHECK_OK(cts_copy_sync(back, o, SIZE, so));
        CTS_CHECK(cts_pattern_find_mismatch(back, SIZE, 21) == SIZE);
    } else {
        CTS_CHECK_STATUS(hal_memcpy_async(o, d, SIZE, s), HAL_ERROR_UNSUPPORTED);
        CTS_CHECK_STATUS(hal_memcpy_async(o, d, SIZE, so), HAL_ERROR_UNSUPPORTED);
        CTS_CHECK_OK(hal_stream_synchronize(s));
        CTS_CHECK_OK(cts_copy_sync(back, o, SIZE, so));
        CTS_CHECK(cts_bytes_find_other(back, SIZE, 0x77) == SIZE);
    }
    CTS_CHECK_OK(hal_mem_free(d));
    CTS_CHECK_OK(hal_mem_free(o));
    CTS_CHECK_OK(hal_stream_destroy(s));
    CTS_CHECK_OK(hal_stream_destroy(so));
    return CTS_PASS;
}

/* A stream may copy between host memory and device memory of another device of its backend,
 * and memset it; only device-to-device copies need the peer capability. */
int cts_memory_other_device_through_host(cts_ctx_t *ctx)
{
    enum { SIZE = 65536 };
    hal_stream_t s = NULL;
    uint8_t *o = NULL;
    CTS_SKIP_UNLESS_DEVICES(ctx, 2);
    hal_device_t other = cts_other_device(ctx);
    CTS_CHECK(other != NULL);
    uint8_t *host = cts_calloc(ctx, SIZE), *back = cts_calloc(ctx, SIZE);
    CTS_CHECK(host != NULL && back != NULL);
    cts_pattern_fill(host, SIZE, 22);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_mem_alloc(other, HAL_MEM_KIND_DEVICE, SIZE, 0, (void **)&o));
    CTS_CHECK_OK(cts_copy_sync(o, host, SIZE, s));
    CTS_CHECK_OK(cts_copy_sync(back, o, SIZE, s));
    CTS_CHECK(cts_pattern_find_mismatch(back, SIZE, 22) == SIZE);
    CTS_CHECK_OK(cts_memset_sync(o, 0x3d, SIZE, s));
    CTS_CHECK_OK(cts_copy_sync(back, o, SIZE, s));
    CTS_CHECK(cts_bytes_find_other(back, SIZE, 0x3d) == SIZE);
    hal_mem_info_t info = HAL_MEM_INFO_INIT;
    CTS_CHECK_OK(hal_mem_get_info(o + 5, &info));
    CTS_CHECK(info.device == other && info.base == o);
    /* A stream of the allocation's backend may free it in its order. */
    CTS_CHECK_OK(hal_mem_free_async(o, s));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

/* Memory of another backend instance is refused by copies, memset and stream-ordered free. */
int cts_memory_other_backend_rejected(cts_ctx_t *ctx)
{
    enum { SIZE = 4096 };
    hal_backend_t b2 = NULL;
    hal_device_t d2 = NULL;
    hal_stream_t s = NULL, s2 = NULL;
    uint8_t *mine = NULL, *theirs = NULL;
    if (cts_open_second_instance(ctx, &b2) != HAL_OK)
        return CTS_SKIP;
    uint8_t *host = cts_calloc(ctx, SIZE), *back = cts_calloc(ctx, SIZE);
    int r = CTS_FAIL;
    if (!CTS_EXPECT(host != NULL && back != NULL) || !CTS_EXPECT_OK(hal_device_get(b2, 0, &d2)) ||
        !CTS_EXPECT_OK(hal_stream_create(ctx->device, 0, &s)) ||
        !CTS_EXPECT_OK(hal_stream_create(d2, 0, &s2)) ||
        !CTS_EXPECT_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, SIZE, 0, (void **)&mine)) ||
        !CTS_EXPECT_OK(hal_mem_alloc(d2, HAL_MEM_KIND_DEVICE, SIZE, 0, (void **)&theirs)) ||
        !CTS_EXPECT_OK(cts_memset_sync(theirs, 0x4e, SIZE, s2)) ||
        !CTS_EXPECT_OK(cts_memset_sync(mine, 0x4d, SIZE, s)))
        goto out;
    const hal_status_t bad = HAL_ERROR_INVALID_ARGUMENT;
    if (!CTS_EXPECT_STATUS(hal_memcpy_async(mine, theirs, SIZE, s), bad) ||
        !CTS_EXPECT_STATUS(hal_memcpy_async(theirs, mine, SIZE, s), bad) ||
        !CTS_EXPECT_STATUS(hal_memcpy_async(theirs, host, SIZE, s), bad) ||
        !CTS_EXPECT_STATUS(hal_memcpy_async(host, theirs, SIZE, s), bad) ||
        !CTS_EXPECT_STATUS(hal_memset_async(theirs, 0, SIZE, s), bad) ||
        !CTS_EXPECT_STATUS(hal_mem_free_async(theirs, s), bad) ||
        !CTS_EXPECT_STATUS(hal_mem_free_async(mine, s2), bad))
        goto out;
    if (!CTS_EXPECT_OK(hal_stream_synchronize(s)) ||
        !CTS_EXPECT_OK(cts_copy_sync(back, theirs, SIZE, s2)) ||
        !CTS_EXPECT(cts_bytes_find_other(back, SIZE, 0x4e) == SIZE) ||
        !CTS_EXPECT_OK(cts_copy_sync(back, mine, SIZE, s)) ||
        !CTS_EXPECT(cts_bytes_find_other(back, SIZE, 0x4d) == SIZE))
        goto out;
    r = CTS_PASS;
out:
    if (theirs != NULL && !CTS_EXPECT_OK(hal_mem_free(theirs)))
        r = CTS_FAIL;
    if (mine != NULL && !CTS_EXPECT_OK(hal_mem_free(mine)))
        r = CTS_FAIL;
    if (s != NULL)
        hal_stream_destroy(s);
    if (s2 != NULL)
        hal_stream_destroy(s2);
    if (!CTS_EXPECT_OK(hal_backend_close(b2)))
        r = CTS_FAIL;
    return r;
}
