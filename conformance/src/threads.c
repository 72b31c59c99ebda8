/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance: thread safety of everything the headers document as safe. Calls on different
 * handles are free-threaded; allocation, queries and event query/synchronize are always safe.
 * Helper threads record failures with CTS_EXPECT* and never return early. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"

enum { NTHREADS = 8 };

typedef struct worker {
    cts_ctx_t *ctx;
    int id;
    void *shared;      /* test-specific */
    hal_stream_t s;    /* test-specific */
    atomic_int *stop;  /* test-specific */
    unsigned failures; /* counted by the thread, checked after the join */
} worker_t;

static void workers_init(worker_t *w, unsigned n, cts_ctx_t *ctx)
{
    memset(w, 0, n * sizeof(*w));
    for (unsigned i = 0; i < n; i++) {
        w[i].ctx = ctx;
        w[i].id = (int)i;
    }
}

static unsigned workers_failures(const worker_t *w, unsigned n)
{
    unsigned f = 0;
    for (unsigned i = 0; i < n; i++)
        f += w[i].failures;
    return f;
}

#define W_EXPECT(w, expr)    \
    do {                     \
        if (!(expr))         \
            (w)->failures++; \
    } while (0)

/* ---- Allocation ---------------------------------------------------------------------------- */

static void *alloc_free_main(void *p)
{
    worker_t *w = p;
    void *live[16] = { 0 };
    size_t sizes[16] = { 0 };
    for (int i = 0; i < 300; i++) {
        int slot = (i * 7 + w->id) % 16;
        if (live[slot] != NULL) {
            W_EXPECT(w, CTS_EXPECT_OK(hal_mem_free(live[slot])));
            live[slot] = NULL;
        }
        hal_mem_kind_t kind = (i + w->id) % 3 == 0 ? HAL_MEM_KIND_HOST_PINNED : HAL_MEM_KIND_DEVICE;
        sizes[slot] = 1 + (size_t)((i * 2654435761u + (unsigned)w->id) % 65536u);
        if (!CTS_EXPECT_OK(hal_mem_alloc(w->ctx->device, kind, sizes[slot], 0, &live[slot]))) {
            w->failures++;
            live[slot] = NULL;
            continue;
        }
        hal_mem_info_t info = HAL_MEM_INFO_INIT;
        const char *mid = (const char *)live[slot] + sizes[slot] / 2;
        W_EXPECT(w, CTS_EXPECT_OK(hal_mem_get_info(mid, &info)));
        W_EXPECT(w, CTS_EXPECT(info.base == live[slot] && info.size == sizes[slot] &&
                               info.kind == kind));
    }
    for (int i = 0; i < 16; i++)
        if (live[i] != NULL)
            W_EXPECT(w, CTS_EXPECT_OK(hal_mem_free(live[i])));
    return NULL;
}

int cts_threads_alloc_free(cts_ctx_t *ctx)
{
    worker_t w[NTHREADS];
    hal_mem_stats_t a = HAL_MEM_STATS_INIT, b = HAL_MEM_STATS_INIT;
    CTS_CHECK_OK(hal_device_get_mem_stats(ctx->device, &a));
    workers_init(w, NTHREADS, ctx);
    CTS_CHECK(cts_run_threads(NTHREADS, alloc_free_main, w, sizeof(w[0])) == 0);
    CTS_CHECK(workers_failures(w, NTHREADS) == 0);
    CTS_CHECK_OK(hal_device_get_mem_stats(ctx->device, &b));
    CTS_CHECKF(b.device_allocations == a.device_allocations &&
                   b.device_bytes_in_use == a.device_bytes_in_use &&
                   b.host_pinned_bytes_in_use == a.host_pinned_bytes_in_use,
               "after balanced concurrent allocations the statistics moved");
    CTS_CHECK(b.total_alloc_calls == a.total_alloc_calls + NTHREADS * 300);
    CTS_CHECK(b.total_free_calls == a.total_free_calls + NTHREADS * 300);
    return CTS_PASS;
}

/* ---- Copies on per-thread streams ----------------------------------------------------------- */

static void *stream_life_main(void *p)
{
    worker_t *w = p;
    enum { SIZE = 65536 };
    uint8_t *src = malloc(SIZE), *dst = malloc(SIZE);
    if (!CTS_EXPECT(src != NULL && dst != NULL)) {
        w->failures++;
        free(src);
        free(dst);
        return NULL;
    }
    for (int round = 0; round < 10; round++) {
        hal_stream_t s = NULL;
        void *d = NULL;
        uint32_t seed = (uint32_t)(w->id * 100 + round);
        cts_pattern_fill(src, SIZE, seed);
        memset(dst, 0, SIZE);
        if (!CTS_EXPECT_OK(hal_stream_create(w->ctx->device, 0, &s))) {
            w->failures++;
            break;
        }
        if (CTS_EXPECT_OK(hal_mem_alloc(w->ctx->device, HAL_MEM_KIND_DEVICE, SIZE, 0, &d))) {
            W_EXPECT(w, CTS_EXPECT_OK(hal_memcpy_async(d, src, SIZE, s)));
            W_EXPECT(w, CTS_EXPECT_OK(hal_memset_async(d, 0xee, 16, s)));
            W_EXPECT(w, CTS_EXPECT_OK(hal_memcpy_async(dst, d, SIZE, s)));
            W_EXPECT(w, CTS_EXPECT_OK(hal_stream_synchronize(s)));
            W_EXPECT(w, CTS_EXPECT(cts_bytes_find_other(dst, 16, 0xee) == 16));
            W_EXPECT(w, CTS_EXPECT(memcmp(dst + 16, src + 16, SIZE - 16) == 0));
            W_EXPECT(w, CTS_EXPECT_OK(hal_mem_free_async(d, s)));
        } else {
            w->failures++;
        }
        /* Destroy waits for the queued free. */
        W_EXPECT(w, CTS_EXPECT_OK(hal_stream_destroy(s)));
    }
    free(src);
    free(dst);
    return NULL;
}

int cts_threads_stream_create_destroy(cts_ctx_t *ctx)
{
    worker_t w[NTHREADS];
    workers_init(w, NTHREADS, ctx);
    CTS_CHECK(cts_run_threads(NTHREADS, stream_life_main, w, sizeof(w[0])) == 0);
    CTS_CHECK(workers_failures(w, NTHREADS) == 0);
    return CTS_PASS;
}

/* ---- Queries ------------------------------------------------------------------------------- */

typedef struct query_shared {
    hal_stream_t s;
    hal_event_t e;
    void *d;
} query_shared_t;

static void *queries_main(void *p)
{
    worker_t *w = p;
    cts_ctx_t *ctx = w->ctx;
    query_shared_t *q = w->shared;
    for (int i = 0; i < 300; i++) {
        hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
        hal_mem_stats_t stats = HAL_MEM_STATS_INIT;
        hal_mem_info_t info = HAL_MEM_INFO_INIT;
        uint32_t count = 0, version = 0;
        hal_device_t dev = NULL;
        hal_backend_t b = NULL;
        hal_stream_t def = NULL;
        const char *name = NULL;
        int32_t prio = 0;
        W_EXPECT(w, CTS_EXPECT_OK(hal_device_get_properties(ctx->device, &props)));
        W_EXPECT(w, CTS_EXPECT(strcmp(props.name, ctx->props.name) == 0));
        W_EXPECT(w, CTS_EXPECT_OK(hal_device_count(ctx->backend, &count)));
        W_EXPECT(w, CTS_EXPECT_OK(hal_device_get(ctx->backend, ctx->device_index, &dev)));
        W_EXPECT(w, CTS_EXPECT(dev == ctx->device));
        W_EXPECT(w, CTS_EXPECT_OK(hal_device_get_backend(ctx->device, &b)));
        W_EXPECT(w, CTS_EXPECT_OK(hal_device_get_mem_stats(ctx->device, &stats)));
        W_EXPECT(w, CTS_EXPECT_OK(hal_get_api_version(&version)));
        W_EXPECT(w, CTS_EXPECT_OK(hal_backend_get_info(ctx->backend, &name, NULL, NULL)));
        W_EXPECT(w, CTS_EXPECT_OK(hal_device_get_default_stream(ctx->device, &def)));
        W_EXPECT(w, CTS_EXPECT_OK(hal_stream_get_info(q->s, NULL, &prio)));
        W_EXPECT(w, CTS_EXPECT_OK(hal_mem_get_info((char *)q->d + 1, &info)));
        W_EXPECT(w, CTS_EXPECT(info.base == q->d));
        hal_status_t st = hal_stream_query(q->s);
        W_EXPECT(w, CTS_EXPECT(st == HAL_OK || st == HAL_NOT_READY));
        st = hal_event_query(q->e);
        W_EXPECT(w, CTS_EXPECT(st == HAL_OK || st == HAL_NOT_READY));
        W_EXPECT(w, CTS_EXPECT(strcmp(hal_status_string(HAL_ERROR_BUSY), "HAL_ERROR_BUSY") == 0));
        size_t n = 0;
        W_EXPECT(w, CTS_EXPECT_OK(hal_backend_list_available(NULL, 0, &n)));
    }
    return NULL;
}

int cts_threads_queries(cts_ctx_t *ctx)
{
    worker_t w[NTHREADS];
    query_shared_t q = { 0 };
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &q.s));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &q.e));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 4096, 0, &q.d));
    workers_init(w, NTHREADS, ctx);
    for (int i = 0; i < NTHREADS; i++)
        w[i].shared = &q;
    CTS_CHECK(cts_run_threads(NTHREADS, queries_main, w, sizeof(w[0])) == 0);
    CTS_CHECK(workers_failures(w, NTHREADS) == 0);
    CTS_CHECK_OK(hal_mem_free(q.d));
    CTS_CHECK_OK(hal_event_destroy(q.e));
    CTS_CHECK_OK(hal_stream_destroy(q.s));
    return CTS_PASS;
}

/* ---- Event query/synchronize from many threads while one thread records -----------------------
 */

typedef struct event_shared {
    hal_event_t e;
    hal_stream_t s;
} event_shared_t;

static void *event_waiter_main(void *p)
{
    worker_t *w = p;
    event_shared_t *es = w->shared;
    while (!atomic_load(w->stop)) {
        hal_status_t st = hal_event_query(es->e);
        W_EXPECT(w, CTS_EXPECT(st == HAL_OK || st == HAL_NOT_READY));
        W_EXPECT(w, CTS_EXPECT_OK(hal_event_synchronize(es->e)));
        st = hal_stream_query(es->s);
        W_EXPECT(w, CTS_EXPECT(st == HAL_OK || st == HAL_NOT_READY));
    }
    W_EXPECT(w, CTS_EXPECT_OK(hal_event_synchronize(es->e)));
    return NULL;
}

int cts_threads_event_query_synchronize(cts_ctx_t *ctx)
{
    enum { N = 6, ROUNDS = 300 };
    worker_t w[N];
    event_shared_t es = { 0 };
    atomic_int stop = 0;
    void *d = NULL;
    pthread_t threads[N];
    int started = 0;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &es.s));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &es.e));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 1 << 16, 0, &d));
    workers_init(w, N, ctx);
    for (int i = 0; i < N; i++) {
        w[i].shared = &es;
        w[i].stop = &stop;
        if (pthread_create(&threads[i], NULL, event_waiter_main, &w[i]) == 0)
            started++;
        else
            break;
    }
    /* Records on one thread only: record is not safe with other records of the same event. */
    unsigned failures = 0;
    for (int i = 0; i < ROUNDS && started == N; i++) {
        if (!CTS_EXPECT_OK(hal_memset_async(d, i, 1 << 16, es.s)) ||
            !CTS_EXPECT_OK(hal_event_record(es.e, es.s)))
            failures++;
        if (i % 50 == 0)
            cts_sleep_ms(1);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    CTS_CHECK(started == N);
    CTS_CHECK(failures == 0 && workers_failures(w, N) == 0);
    CTS_CHECK_OK(hal_stream_synchronize(es.s));
    CTS_CHECK_OK(hal_event_query(es.e));
    CTS_CHECK_OK(hal_mem_free(d));
    CTS_CHECK_OK(hal_event_destroy(es.e));
    CTS_CHECK_OK(hal_stream_destroy(es.s));
    return CTS_PASS;
}

/* ---- Stream query/synchronize from many threads while one thread enqueues ---------------- */

static void *stream_waiter_main(void *p)
{
    worker_t *w = p;
    while (!atomic_load(w->stop)) {
        hal_status_t st = hal_stream_query(w->s);
        W_EXPECT(w, CTS_EXPECT(st == HAL_OK || st == HAL_NOT_READY));
        W_EXPECT(w, CTS_EXPECT_OK(hal_stream_synchronize(w->s)));
    }
    return NULL;
}

int cts_threads_stream_query_synchronize(cts_ctx_t *ctx)
{
    enum { N = 4 };
    worker_t w[N];
    atomic_int stop = 0;
    hal_stream_t s = NULL;
    void *d = NULL;
    pthread_t threads[N];
    int started = 0;
    unsigned failures = 0;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 1 << 16, 0, &d));
    workers_init(w, N, ctx);
    for (int i = 0; i < N; i++) {
        w[i].s = s;
        w[i].stop = &stop;
        if (pthread_create(&threads[i], NULL, stream_waiter_main, &w[i]) != 0)
            break;
        started++;
    }
    for (int i = 0; i < 300 && started == N; i++)
        if (!CTS_EXPECT_OK(hal_memset_async(d, i, 1 << 16, s)))
            failures++;
    atomic_store(&stop, 1);
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    CTS_CHECK(started == N && failures == 0 && workers_failures(w, N) == 0);
    CTS_CHECK_OK(hal_stream_synchronize(s));
    CTS_CHECK_OK(hal_mem_free(d));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

/* ---- Device synchronize while other threads enqueue -------------------------------------------
 */

static void *device_sync_main(void *p)
{
    worker_t *w = p;
    hal_stream_t s = NULL;
    void *d = NULL;
    if (!CTS_EXPECT_OK(hal_stream_create(w->ctx->device, 0, &s))) {
        w->failures++;
        return NULL;
    }
    if (CTS_EXPECT_OK(hal_mem_alloc(w->ctx->device, HAL_MEM_KIND_DEVICE, 1 << 16, 0, &d))) {
        for (int i = 0; i < 50; i++) {
            W_EXPECT(w, CTS_EXPECT_OK(hal_memset_async(d, i, 1 << 16, s)));
            if (i % 5 == 0)
                W_EXPECT(w, CTS_EXPECT_OK(hal_device_synchronize(w->ctx->device)));
        }
        W_EXPECT(w, CTS_EXPECT_OK(hal_device_synchronize(w->ctx->device)));
        W_EXPECT(w, CTS_EXPECT_OK(hal_stream_query(s)));
        W_EXPECT(w, CTS_EXPECT_OK(hal_mem_free(d)));
    } else {
        w->failures++;
    }
    W_EXPECT(w, CTS_EXPECT_OK(hal_stream_destroy(s)));
    return NULL;
}

int cts_threads_device_synchronize(cts_ctx_t *ctx)
{
    enum { N = 4 };
    worker_t w[N];
    workers_init(w, N, ctx);
    CTS_CHECK(cts_run_threads(N, device_sync_main, w, sizeof(w[0])) == 0);
    CTS_CHECK(workers_failures(w, N) == 0);
    return CTS_PASS;
}

/* ---- Backend open/close -----------------------------------------------------------------------
 */

static void *open_close_main(void *p)
{
    worker_t *w = p;
    for (int i = 0; i < 20; i++) {
        hal_backend_t b = NULL;
        uint32_t count = 0;
        if (!CTS_EXPECT_OK(hal_backend_open(w->ctx->backend_name, &b))) {
            w->failures++;
            continue;
        }
        W_EXPECT(w, CTS_EXPECT(b == w->ctx->backend));
        W_EXPECT(w, CTS_EXPECT_OK(hal_device_count(b, &count)));
        W_EXPECT(w, CTS_EXPECT_OK(hal_backend_close(b)));
    }
    return NULL;
}

/* Open and close are safe from any thread; the reference count keeps the backend alive. */
int cts_threads_backend_open_close(cts_ctx_t *ctx)
{
    worker_t w[NTHREADS];
    uint32_t count = 0;
    workers_init(w, NTHREADS, ctx);
    CTS_CHECK(cts_run_threads(NTHREADS, open_close_main, w, sizeof(w[0])) == 0);
    CTS_CHECK(workers_failures(w, NTHREADS) == 0);
    CTS_CHECK_OK(hal_device_count(ctx->backend, &count));
    CTS_CHECK(count == ctx->device_count);
    hal_stream_t s = NULL;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

/* ---- Callbacks on several streams -------------------------------------------------------------
 */

static void *callbacks_main(void *p)
{
    worker_t *w = p;
    cts_log_t *log = w->shared;
    hal_stream_t s = NULL;
    if (!CTS_EXPECT_OK(hal_stream_create(w->ctx->device, 0, &s))) {
        w->failures++;
        return NULL;
    }
    for (int i = 0; i < 100; i++)
        W_EXPECT(w, CTS_EXPECT_OK(cts_log_enqueue(w->ctx, log, s, i)));
    W_EXPECT(w, CTS_EXPECT_OK(hal_stream_synchronize(s)));
    W_EXPECT(w, CTS_EXPECT(cts_log_count(log) == 100));
    for (size_t i = 0; i < 100; i++)
        W_EXPECT(w, CTS_EXPECT(cts_log_value(log, i) == (int)i));
    W_EXPECT(w, CTS_EXPECT_OK(hal_stream_destroy(s)));
    return NULL;
}

int cts_threads_callbacks(cts_ctx_t *ctx)
{
    enum { N = 4 };
    worker_t w[N];
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    workers_init(w, N, ctx);
    for (int i = 0; i < N; i++) {
        w[i].shared = cts_log_new(ctx, 100);
        CTS_CHECK(w[i].shared != NULL);
    }
    CTS_CHECK(cts_run_threads(N, callbacks_main, w, sizeof(w[0])) == 0);
    CTS_CHECK(workers_failures(w, N) == 0);
    return CTS_PASS;
}

/* ---- Events recorded and waited on per thread -------------------------------------------------
 */

static void *event_pairs_main(void *p)
{
    worker_t *w = p;
    enum { SIZE = 4096 };
    hal_stream_t a = NULL, b = NULL;
    hal_event_t e = NULL;
    void *d = NULL;
    uint8_t *out = malloc(SIZE);
    if (!CTS_EXPECT(out != NULL) || !CTS_EXPECT_OK(hal_stream_create(w->ctx->device, 0, &a)) ||
        !CTS_EXPECT_OK(hal_stream_create(w->ctx->device, 0, &b)) ||
        !CTS_EXPECT_OK(hal_event_create(w->ctx->device, HAL_EVENT_FLAG_NONE, &e)) ||
        !CTS_EXPECT_OK(hal_mem_alloc(w->ctx->device, HAL_MEM_KIND_DEVICE, SIZE, 0, &d))) {
        w->failures++;
    } else {
        for (int i = 0; i < 50; i++) {
            /* a writes, b waits for it and reads: the read must see this round's value. */
            W_EXPECT(w, CTS_EXPECT_OK(hal_memset_async(d, i + 1, SIZE, a)));
            W_EXPECT(w, CTS_EXPECT_OK(hal_event_record(e, a)));
            W_EXPECT(w, CTS_EXPECT_OK(hal_stream_wait_event(b, e)));
            W_EXPECT(w, CTS_EXPECT_OK(hal_memcpy_async(out, d, SIZE, b)));
            W_EXPECT(w, CTS_EXPECT_OK(hal_stream_synchronize(b)));
            W_EXPECT(w, CTS_EXPECT(cts_bytes_find_other(out, SIZE, (uint8_t)(i + 1)) == SIZE));
        }
    }
    if (d != NULL)
        W_EXPECT(w, CTS_EXPECT_OK(hal_mem_free(d)));
    if (e != NULL)
        W_EXPECT(w, CTS_EXPECT_OK(hal_event_destroy(e)));
    if (a != NULL)
        W_EXPECT(w, CTS_EXPECT_OK(hal_stream_destroy(a)));
    if (b != NULL)
        W_EXPECT(w, CTS_EXPECT_OK(hal_stream_destroy(b)));
    free(out);
    return NULL;
}

int cts_threads_event_record_wait(cts_ctx_t *ctx)
{
    worker_t w[NTHREADS];
    workers_init(w, NTHREADS, ctx);
    CTS_CHECK(cts_run_threads(NTHREADS, event_pairs_main, w, sizeof(w[0])) == 0);
    CTS_CHECK(workers_failures(w, NTHREADS) == 0);
    return CTS_PASS;
}

/* ---- Caching allocator shared by threads ------------------------------------------------------
 */

static void *allocator_main(void *p)
{
    worker_t *w = p;
    hal_allocator_t a = w->shared;
    hal_stream_t s = NULL;
    void *live[8] = { 0 };
    if (!CTS_EXPECT_OK(hal_stream_create(w->ctx->device, 0, &s))) {
        w->failures++;
        return NULL;
    }
    for (int i = 0; i < 200; i++) {
        int slot = (i * 3 + w->id) % 8;
        if (live[slot] != NULL) {
            W_EXPECT(w, CTS_EXPECT_OK(hal_allocator_free(a, live[slot])));
            live[slot] = NULL;
        }
        size_t size = 512 + (size_t)((i * 7919u + (unsigned)w->id * 31u) % (3u << 20));
        if (CTS_EXPECT_OK(hal_allocator_alloc(a, size, s, &live[slot]))) {
            void *base = NULL;
            size_t got = 0;
            W_EXPECT(w, CTS_EXPECT_OK(hal_allocator_get_block(a, (char *)live[slot] + size - 1,
                                                              &base, &got)));
            W_EXPECT(w, CTS_EXPECT(base == live[slot] && got == size));
            W_EXPECT(w, CTS_EXPECT_OK(hal_memset_async(live[slot], w->id, size, s)));
        } else {
            w->failures++;
            live[slot] = NULL;
        }
    }
    W_EXPECT(w, CTS_EXPECT_OK(hal_stream_synchronize(s)));
    for (int i = 0; i < 8; i++)
        if (live[i] != NULL)
            W_EXPECT(w, CTS_EXPECT_OK(hal_allocator_free(a, live[i])));
    W_EXPECT(w, CTS_EXPECT_OK(hal_stream_destroy(s)));
    return NULL;
}

int cts_threads_allocator(cts_ctx_t *ctx)
{
    enum { N = 4 };
    worker_t w[N];
    hal_allocator_t a = NULL;
    hal_allocator_stats_t st = HAL_ALLOCATOR_STATS_INIT;
    CTS_CHECK_OK(hal_allocator_create(ctx->device, NULL, &a));
    workers_init(w, N, ctx);
    for (int i = 0; i < N; i++)
        w[i].shared = a;
    int rc = cts_run_threads(N, allocator_main, w, sizeof(w[0]));
    /* The workers free what they hold even when a call failed: destroy the allocator anyway. */
    bool ok = CTS_EXPECT(rc == 0 && workers_failures(w, N) == 0);
    ok = CTS_EXPECT_OK(hal_allocator_get_stats(a, &st)) && ok;
    ok = CTS_EXPECT(st.alloc_count == st.free_count && st.active_blocks == 0) && ok;
    ok = CTS_EXPECT(st.allocated_bytes == 0 && st.requested_bytes == 0) && ok;
    CTS_CHECK_OK(hal_allocator_destroy(a));
    return ok ? CTS_PASS : CTS_FAIL;
}
