/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance: devices, their properties, the current device, synchronisation and memory
 * statistics. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cts.h"

int cts_device_count(cts_ctx_t *ctx)
{
    uint32_t count = 0;
    CTS_CHECK_OK(hal_device_count(ctx->backend, &count));
    CTS_CHECK(count >= 1);
    CTS_CHECK(ctx->device_index < count);
    CTS_CHECK_STATUS(hal_device_count(ctx->backend, NULL), HAL_ERROR_INVALID_ARGUMENT);
    return CTS_PASS;
}

int cts_device_get(cts_ctx_t *ctx)
{
    hal_device_t d = NULL, again = NULL;
    CTS_CHECK_OK(hal_device_get(ctx->backend, ctx->device_index, &d));
    CTS_CHECK_OK(hal_device_get(ctx->backend, ctx->device_index, &again));
    CTS_CHECKF(d == ctx->device && again == d, "device %u is not one stable handle",
               ctx->device_index);
    /* Every ordinal is a different device with that index. */
    for (uint32_t i = 0; i < ctx->device_count; i++) {
        hal_device_t di = NULL;
        hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
        CTS_CHECK_OK(hal_device_get(ctx->backend, i, &di));
        CTS_CHECK(di != NULL);
        CTS_CHECK(i == ctx->device_index ? di == d : di != d);
        CTS_CHECK_OK(hal_device_get_properties(di, &props));
        CTS_CHECKF(props.index == i, "device %u reports index %u", i, props.index);
    }
    return CTS_PASS;
}

int cts_device_get_invalid(cts_ctx_t *ctx)
{
    hal_device_t d = NULL;
    CTS_CHECK_STATUS(hal_device_get(ctx->backend, ctx->device_count, &d),
                     HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_device_get(ctx->backend, UINT32_MAX, &d), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_device_get(ctx->backend, ctx->device_index, NULL),
                     HAL_ERROR_INVALID_ARGUMENT);
    return CTS_PASS;
}

static int is_pow2(uint64_t v)
{
    return v != 0 && (v & (v - 1)) == 0;
}

int cts_device_properties(cts_ctx_t *ctx)
{
    hal_device_properties_t p = HAL_DEVICE_PROPERTIES_INIT, q = HAL_DEVICE_PROPERTIES_INIT;
    CTS_CHECK_OK(hal_device_get_properties(ctx->device, &p));
    CTS_CHECK(p.struct_size == sizeof(p));
    CTS_CHECK(memchr(p.name, '\0', sizeof(p.name)) != NULL && p.name[0] != '\0');
    CTS_CHECK(memchr(p.vendor, '\0', sizeof(p.vendor)) != NULL && p.vendor[0] != '\0');
    CTS_CHECK(p.index == ctx->device_index);
    CTS_CHECK(p.host_addressable == 0 || p.host_addressable == 1);
    CTS_CHECKF(p.total_memory > 0, "total_memory is 0");
    CTS_CHECKF(is_pow2(p.alignment), "alignment %u is not a power of two", p.alignment);
    CTS_CHECKF(p.stream_priority_greatest <= 0 && 0 <= p.stream_priority_least,
               "priorities [%d, %d] do not include the default 0", p.stream_priority_greatest,
               p.stream_priority_least);
    /* Properties are constant. */
    CTS_CHECK_OK(hal_device_get_properties(ctx->device, &q));
    CTS_CHECK(strcmp(p.name, q.name) == 0 && strcmp(p.vendor, q.vendor) == 0);
    CTS_CHECK(p.total_memory == q.total_memory && p.capabilities == q.capabilities);
    CTS_CHECK(p.alignment == q.alignment && p.host_addressable == q.host_addressable);
    CTS_CHECK(p.node_index == q.node_index && p.node_device_count == q.node_device_count);
    return CTS_PASS;
}

/* The node position: inside the node's devices, at least as many as the backend opened, and
 * increasing with the ordinal (distinct devices are distinct devices of the node). */
int cts_device_node_position(cts_ctx_t *ctx)
{
    uint32_t previous = 0;
    for (uint32_t i = 0; i < ctx->device_count; i++) {
        hal_device_t d = NULL;
        hal_device_properties_t p = HAL_DEVICE_PROPERTIES_INIT;
        CTS_CHECK_OK(hal_device_get(ctx->backend, i, &d));
        CTS_CHECK_OK(hal_device_get_properties(d, &p));
        CTS_CHECKF(p.node_index < p.node_device_count,
                   "device %u: node_index %u is not below node_device_count %u", i, p.node_index,
                   p.node_device_count);
        CTS_CHECKF(p.node_device_count >= ctx->device_count,
                   "device %u: node_device_count %u is below the backend's %u devices", i,
                   p.node_device_count, ctx->device_count);
        CTS_CHECKF(i == 0 || p.node_index > previous,
                   "device %u: node_index %u does not follow device %u's %u", i, p.node_index,
                   i - 1, previous);
        previous = p.node_index;
    }
    return CTS_PASS;
}

int cts_device_properties_invalid(cts_ctx_t *ctx)
{
    hal_device_properties_t p;
    const size_t sizes[] = { 0, 1, sizeof(size_t), offsetof(hal_device_properties_t, capabilities),
                             HAL_DEVICE_PROPERTIES_SIZE_1_0 - 1 };
    CTS_CHECK_STATUS(hal_device_get_properties(ctx->device, NULL), HAL_ERROR_INVALID_ARGUMENT);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        memset(&p, 0xa5, sizeof(p));
        p.struct_size = sizes[i];
        CTS_CHECK_STATUS(hal_device_get_properties(ctx->device, &p), HAL_ERROR_INVALID_ARGUMENT);
        /* No side effect: nothing after struct_size was written. */
        CTS_CHECKF(cts_bytes_find_other((char *)&p + sizeof(size_t), sizeof(p) - sizeof(size_t),
                                        0xa5) == sizeof(p) - sizeof(size_t),
                   "a rejected call (struct_size %zu) wrote the struct", sizes[i]);
    }
    return CTS_PASS;
}

/* Fields past struct_size are not written: what an older application's struct ends with. */
int cts_device_properties_struct_size_respected(cts_ctx_t *ctx)
{
    struct {
        hal_device_properties_t props;
        uint8_t tail[64];
    } s;
    memset(&s, 0x5c, sizeof(s));
    s.props.struct_size = sizeof(s.props);
    s.props.next = NULL;
    CTS_CHECK_OK(hal_device_get_properties(ctx->device, &s.props));
    CTS_CHECKF(cts_bytes_find_other(s.tail, sizeof(s.tail), 0x5c) == sizeof(s.tail),
               "bytes past struct_size were written");
    CTS_CHECK(s.props.index == ctx->device_index);
    return CTS_PASS;
}

/* A caller compiled against the 1.0 struct gets its fields and nothing past them. */
int cts_device_properties_older_struct(cts_ctx_t *ctx)
{
    hal_device_properties_t full = HAL_DEVICE_PROPERTIES_INIT, old;
    CTS_CHECK_OK(hal_device_get_properties(ctx->device, &full));
    memset(&old, 0x5c, sizeof(old));
    old.struct_size = HAL_DEVICE_PROPERTIES_SIZE_1_0;
    old.next = NULL;
    CTS_CHECK_OK(hal_device_get_properties(ctx->device, &old));
    CTS_CHECK(old.struct_size == HAL_DEVICE_PROPERTIES_SIZE_1_0);
    CTS_CHECK(strcmp(old.name, full.name) == 0 && old.index == full.index);
    CTS_CHECK(old.capabilities == full.capabilities && old.alignment == full.alignment);
    CTS_CHECK(old.program_formats == full.program_formats);
    size_t tail = sizeof(old) - HAL_DEVICE_PROPERTIES_SIZE_1_0;
    CTS_CHECKF(
        cts_bytes_find_other((char *)&old + HAL_DEVICE_PROPERTIES_SIZE_1_0, tail, 0x5c) == tail,
        "fields past a 1.0 struct_size (%zu) were written", (size_t)HAL_DEVICE_PROPERTIES_SIZE_1_0);
    return CTS_PASS;
}

int cts_device_get_backend(cts_ctx_t *ctx)
{
    hal_backend_t b = NULL;
    CTS_CHECK_OK(hal_device_get_backend(ctx->device, &b));
    CTS_CHECK(b == ctx->backend);
    CTS_CHECK_STATUS(hal_device_get_backend(ctx->device, NULL), HAL_ERROR_INVALID_ARGUMENT);
    return CTS_PASS;
}

int cts_device_current_device(cts_ctx_t *ctx)
{
    hal_device_t cur = (hal_device_t)(uintptr_t)1;
    CTS_CHECK_OK(hal_get_current_device(&cur));
    CTS_CHECK(cur == NULL); /* the harness cleared it */
    CTS_CHECK_OK(hal_set_current_device(ctx->device));
    CTS_CHECK_OK(hal_get_current_device(&cur));
    CTS_CHECK(cur == ctx->device);
    hal_device_t other = cts_other_device(ctx);
    if (other != NULL) {
        CTS_CHECK_OK(hal_set_current_device(other));
        CTS_CHECK_OK(hal_get_current_device(&cur));
        CTS_CHECK(cur == other);
    }
    CTS_CHECK_OK(hal_set_current_device(NULL));
    CTS_CHECK_OK(hal_get_current_device(&cur));
    CTS_CHECK(cur == NULL);
    CTS_CHECK_STATUS(hal_get_current_device(NULL), HAL_ERROR_INVALID_ARGUMENT);
    return CTS_PASS;
}

int cts_device_current_device_invalid(cts_ctx_t *ctx)
{
    uint64_t zeros[32] = { 0 };
    hal_stream_t s = NULL;
    hal_device_t cur = NULL;
    CTS_CHECK_OK(hal_set_current_device(ctx->device));
    CTS_CHECK_STATUS(hal_set_current_device((hal_device_t)(void *)zeros), HAL_ERROR_INVALID_HANDLE);
    CTS_CHECK_OK(hal_device_get_default_stream(ctx->device, &s));
    CTS_CHECK_STATUS(hal_set_current_device((hal_device_t)(void *)s), HAL_ERROR_INVALID_HANDLE);
    /* No side effect: the current device is unchanged. */
    CTS_CHECK_OK(hal_get_current_device(&cur));
    CTS_CHECK(cur == ctx->device);
    return CTS_PASS;
}

typedef struct cur_arg {
    hal_device_t set;
    hal_device_t seen_before, seen_after;
    pthread_barrier_t *barrier;
} cur_arg_t;

static void *current_device_main(void *p)
{
    cur_arg_t *a = p;
    a->seen_before = (hal_device_t)(uintptr_t)1;
    CTS_EXPECT_OK(hal_get_current_device(&a->seen_before));
    CTS_EXPECT_OK(hal_set_current_device(a->set));
    pthread_barrier_wait(a->barrier); /* every thread has set its own */
    CTS_EXPECT_OK(hal_get_current_device(&a->seen_after));
    return NULL;
}

int cts_device_current_device_per_thread(cts_ctx_t *ctx)
{
    enum { N = 4 };
    cur_arg_t args[N];
    pthread_barrier_t barrier;
    hal_device_t other = cts_other_device(ctx), cur = NULL;
    CTS_CHECK_OK(hal_set_current_device(ctx->device));
    pthread_barrier_init(&barrier, NULL, N);
    for (int i = 0; i < N; i++) {
        args[i].set = i % 2 == 0 ? other : ctx->device; /* NULL with one device: cleared */
        args[i].barrier = &barrier;
    }
    int rc = cts_run_threads(N, current_device_main, args, sizeof(args[0]));
    pthread_barrier_destroy(&barrier);
    CTS_CHECK(rc == 0);
    for (int i = 0; i < N; i++) {
        CTS_CHECKF(args[i].seen_before == NULL, "a new thread starts with current device %p",
                   (void *)args[i].seen_before);
        CTS_CHECKF(args[i].seen_after == args[i].set,
                   "thread %d set %p and then saw %p: the setting is not thread-local", i,
                   (void *)args[i].set, (void *)args[i].seen_after);
    }
    CTS_CHECK_OK(hal_get_current_device(&cur));
    CTS_CHECK(cur == ctx->device);
    return CTS_PASS;
}

int cts_device_current_device_cleared_by_close(cts_ctx_t *ctx)
{
    hal_device_t old = ctx->device, cur = (hal_device_t)(uintptr_t)1;
    CTS_CHECK_OK(hal_set_current_device(ctx->device));
    CTS_CHECK_OK(cts_backend_close_fully(ctx));
    hal_status_t get = hal_get_current_device(&cur);
    hal_status_t set = hal_set_current_device(old);
    CTS_CHECK_OK(cts_backend_reopen(ctx));
    CTS_CHECK_OK(get);
    CTS_CHECKF(cur == NULL, "the current device is %p after its backend was closed", (void *)cur);
    CTS_CHECK_STATUS(set, HAL_ERROR_INVALID_HANDLE);
    return CTS_PASS;
}

int cts_device_synchronize_idle(cts_ctx_t *ctx)
{
    CTS_CHECK_OK(hal_device_synchronize(ctx->device));
    CTS_CHECK_OK(hal_device_synchronize(ctx->device));
    return CTS_PASS;
}

/* Waits for the work of every stream of the device, the default stream included. */
int cts_device_synchronize_waits_all_streams(cts_ctx_t *ctx)
{
    hal_stream_t s1 = NULL, s2 = NULL, def = NULL;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s1));
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s2));
    CTS_CHECK_OK(hal_device_get_default_stream(ctx->device, &def));
    cts_gate_t *g1 = cts_gate_new(ctx), *g2 = cts_gate_new(ctx), *g3 = cts_gate_new(ctx);
    cts_log_t *log = cts_log_new(ctx, 8);
    CTS_CHECK_OK(cts_gate_enqueue(g1, s1));
    CTS_CHECK_OK(cts_gate_enqueue(g2, s2));
    CTS_CHECK_OK(cts_gate_enqueue(g3, def));
    CTS_CHECK_OK(cts_log_enqueue(ctx, log, s1, 1));
    CTS_CHECK_OK(cts_log_enqueue(ctx, log, s2, 2));
    CTS_CHECK_OK(cts_log_enqueue(ctx, log, def, 3));
    CTS_CHECK(cts_gate_open_later(ctx, g1, 30) == 0);
    CTS_CHECK(cts_gate_open_later(ctx, g2, 60) == 0);
    CTS_CHECK(cts_gate_open_later(ctx, g3, 90) == 0);
    CTS_CHECK_OK(hal_device_synchronize(ctx->device));
    CTS_CHECKF(cts_log_count(log) == 3, "hal_device_synchronize returned with %zu of 3 done",
               cts_log_count(log));
    CTS_CHECK_OK(hal_stream_query(s1));
    CTS_CHECK_OK(hal_stream_query(s2));
    CTS_CHECK_OK(hal_stream_query(def));
    CTS_CHECK_OK(hal_stream_destroy(s1));
    CTS_CHECK_OK(hal_stream_destroy(s2));
    return CTS_PASS;
}

static int get_stats(cts_ctx_t *ctx, hal_device_t d, hal_mem_stats_t *s)
{
    memset(s, 0, sizeof(*s));
    s->struct_size = sizeof(*s);
    return CTS_EXPECT_OK(hal_device_get_mem_stats(d, s)) ? 0 : -1;
}

int cts_device_mem_stats_device_kind(cts_ctx_t *ctx)
{
    enum { SIZE = 3 << 20 };
    hal_mem_stats_t a, b, c;
    void *p = NULL;
    CTS_CHECK(get_stats(ctx, ctx->device, &a) == 0);
    CTS_CHECKF(a.device_bytes_limit == ctx->props.total_memory,
               "device_bytes_limit %llu != total_memory %llu",
               (unsigned long long)a.device_bytes_limit,
               (unsigned long long)ctx->props.total_memory);
    CTS_CHECK(a.device_bytes_free <= a.device_bytes_limit);
    CTS_CHECK(a.device_peak_bytes_in_use >= a.device_bytes_in_use);
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, SIZE, 0, &p));
    CTS_CHECK(get_stats(ctx, ctx->device, &b) == 0);
    CTS_CHECKF(b.device_bytes_in_use >= a.device_bytes_in_use + SIZE,
               "device_bytes_in_use %llu -> %llu after a %d-byte allocation",
               (unsigned long long)a.device_bytes_in_use, (unsigned long long)b.device_bytes_in_use,
               SIZE);
    CTS_CHECK(b.device_allocations == a.device_allocations + 1);
    CTS_CHECK(b.total_alloc_calls == a.total_alloc_calls + 1);
    CTS_CHECK(b.total_free_calls == a.total_free_calls);
    CTS_CHECK(b.device_peak_bytes_in_use >= b.device_bytes_in_use);
    CTS_CHECKF(b.device_bytes_free < a.device_bytes_free,
               "device_bytes_free did not drop (%llu -> %llu)",
               (unsigned long long)a.device_bytes_free, (unsigned long long)b.device_bytes_free);
    CTS_CHECK(b.host_pinned_bytes_in_use == a.host_pinned_bytes_in_use);
    CTS_CHECK_OK(hal_mem_free(p));
    CTS_CHECK(get_stats(ctx, ctx->device, &c) == 0);
    CTS_CHECK(c.device_bytes_in_use == a.device_bytes_in_use);
    CTS_CHECK(c.device_allocations == a.device_allocations);
    CTS_CHECK(c.total_free_calls == a.total_free_calls + 1);
    CTS_CHECK(c.device_peak_bytes_in_use >= b.device_bytes_in_use);
    return CTS_PASS;
}

int cts_device_mem_stats_host_kinds(cts_ctx_t *ctx)
{
    enum { SIZE = 1 << 20 };
    hal_mem_stats_t a, b, c;
    void *pinned = NULL, *shared = NULL;
    const int has_shared = (ctx->props.capabilities & HAL_DEVICE_CAP_SHARED_MEMORY) != 0;
    CTS_CHECK(get_stats(ctx, ctx->device, &a) == 0);
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_HOST_PINNED, SIZE, 0, &pinned));
    if (has_shared)
        CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_SHARED, SIZE, 0, &shared));
    CTS_CHECK(get_stats(ctx, ctx->device, &b) == 0);
    CTS_CHECK(b.host_pinned_bytes_in_use >= a.host_pinned_bytes_in_use + SIZE);
    if (has_shared)
        CTS_CHECK(b.shared_bytes_in_use >= a.shared_bytes_in_use + SIZE);
    /* Kinds are counted separately: no device bytes, no device allocations. */
    CTS_CHECK(b.device_bytes_in_use == a.device_bytes_in_use);
    CTS_CHECK(b.device_allocations == a.device_allocations);
    CTS_CHECK(b.total_alloc_calls == a.total_alloc_calls + 1 + (has_shared ? 1 : 0));
    CTS_CHECK_OK(hal_mem_free(pinned));
    if (has_shared)
        CTS_CHECK_OK(hal_mem_free(shared));
    CTS_CHECK(get_stats(ctx, ctx->device, &c) == 0);
    CTS_CHECK(c.host_pinned_bytes_in_use == a.host_pinned_bytes_in_use);
    CTS_CHECK(c.shared_bytes_in_use == a.shared_bytes_in_use);
    CTS_CHECK(c.total_free_calls == a.total_free_calls + 1 + (has_shared ? 1 : 0));
    return CTS_PASS;
}

/* Statistics are per device: another device's allocations do not show. */
int cts_device_mem_stats_per_device(cts_ctx_t *ctx)
{
    hal_mem_stats_t a, b;
    void *p = NULL;
    CTS_SKIP_UNLESS_DEVICES(ctx, 2);
    hal_device_t other = cts_other_device(ctx);
    CTS_CHECK(other != NULL);
    CTS_CHECK(get_stats(ctx, ctx->device, &a) == 0);
    CTS_CHECK_OK(hal_mem_alloc(other, HAL_MEM_KIND_DEVICE, 1 << 20, 0, &p));
    CTS_CHECK(get_stats(ctx, ctx->device, &b) == 0);
    CTS_CHECK_OK(hal_mem_free(p));
    CTS_CHECK(b.device_bytes_in_use == a.device_bytes_in_use);
    CTS_CHECK(b.device_allocations == a.device_allocations);
    CTS_CHECK(b.total_alloc_calls == a.total_alloc_calls);
    return CTS_PASS;
}

int cts_device_mem_stats_invalid(cts_ctx_t *ctx)
{
    hal_mem_stats_t s;
    CTS_CHECK_STATUS(hal_device_get_mem_stats(ctx->device, NULL), HAL_ERROR_INVALID_ARGUMENT);
    memset(&s, 0, sizeof(s));
    s.struct_size = 0;
    CTS_CHECK_STATUS(hal_device_get_mem_stats(ctx->device, &s), HAL_ERROR_INVALID_ARGUMENT);
    s.struct_size = offsetof(hal_mem_stats_t, device_bytes_in_use);
    CTS_CHECK_STATUS(hal_device_get_mem_stats(ctx->device, &s), HAL_ERROR_INVALID_ARGUMENT);
    s.struct_size = sizeof(s) - 1;
    CTS_CHECK_STATUS(hal_device_get_mem_stats(ctx->device, &s), HAL_ERROR_INVALID_ARGUMENT);
    return CTS_PASS;
}

int cts_device_reset_peak_mem_stats(cts_ctx_t *ctx)
{
    enum { SIZE = 4 << 20 };
    hal_mem_stats_t a, b;
    void *p = NULL, *q = NULL;
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 4096, 0, &q));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, SIZE, 0, &p));
    CTS_CHECK_OK(hal_mem_free(p));
    CTS_CHECK(get_stats(ctx, ctx->device, &a) == 0);
    CTS_CHECK(a.device_peak_bytes_in_use >= a.device_bytes_in_use + SIZE);
    CTS_CHECK_OK(hal_device_reset_peak_mem_stats(ctx->device));
    CTS_CHECK(get_stats(ctx, ctx->device, &b) == 0);
    CTS_CHECKF(b.device_peak_bytes_in_use == b.device_bytes_in_use,
               "after a reset the peak is %llu, in use %llu",
               (unsigned long long)b.device_peak_bytes_in_use,
               (unsigned long long)b.device_bytes_in_use);
    CTS_CHECK(b.device_bytes_in_use >= 4096);
    CTS_CHECK_OK(hal_mem_free(q));
    return CTS_PASS;
}

int cts_device_native_handle(cts_ctx_t *ctx)
{
    uintptr_t a = 0, b = 0;
    hal_status_t st = hal_device_get_native_handle(ctx->device, &a);
    CTS_CHECK_STATUS2(st, HAL_OK, HAL_ERROR_UNSUPPORTED);
    if (st == HAL_OK) {
        CTS_CHECK_OK(hal_device_get_native_handle(ctx->device, &b));
        CTS_CHECK(a == b);
    }
    CTS_CHECK_STATUS(hal_device_get_native_handle(ctx->device, NULL), HAL_ERROR_INVALID_ARGUMENT);
    return CTS_PASS;
}
