/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu backend's device memory arena, through the ops table: placement and alignment, reuse
 * after free, coalescing, capacity and fragmentation, pages given back to the system, many
 * threads at once, and the fallback to posix_memalign when no arena can be made. */
#include <stdlib.h>
#include <sys/stat.h>

#include "hal_backends/cpu/tests/cpu_test_util.h"

static cpu_arena_t *arena_of(t_fixture_t *fx, uint32_t dev)
{
    return ((cpu_device_t *)fx->dev[dev])->arena;
}

static uint32_t free_ranges(t_fixture_t *fx)
{
    uint32_t ranges = 0;
    uint64_t largest = 0;
    cpu_arena_stats(arena_of(fx, 0), &ranges, &largest);
    return ranges;
}

/* Bytes of the arena's file that hold pages. */
static uint64_t resident(t_fixture_t *fx)
{
    struct stat st;
    if (fstat(arena_of(fx, 0)->fd, &st) != 0)
        return UINT64_MAX;
    return (uint64_t)st.st_blocks * 512u;
}

static bool in_arena(t_fixture_t *fx, const void *p, size_t size)
{
    const cpu_arena_t *a = arena_of(fx, 0);
    return (const char *)p >= a->base && (const char *)p + size <= a->base + a->size;
}

static hal_status_t alloc_dev(t_fixture_t *fx, size_t size, size_t alignment, void **p,
                              void **cookie)
{
    return fx->ops->mem_alloc(fx->dev[0], HAL_MEM_KIND_DEVICE, size, alignment, p, cookie);
}

static void free_dev(t_fixture_t *fx, void *p, void *cookie)
{
    fx->ops->mem_free(fx->dev[0], HAL_MEM_KIND_DEVICE, p, cookie);
}

static uint64_t free_of(t_fixture_t *fx)
{
    uint64_t free_bytes = 0;
    fx->ops->device_get_free_memory(fx->dev[0], &free_bytes);
    return free_bytes;
}

CTEST(CpuArena, AlignmentAndPlacement)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", "256M", NULL, NULL), HAL_OK);
    CTEST_EXPECT(arena_of(&fx, 0) != NULL);
    static const size_t aligns[] = { 0, 1, 64, 256, 512, 4096, 65536, 1u << 20, 16u << 20 };
    static const size_t sizes[] = { 1, 255, 256, 257, 4095, 4097, 100000, 3u << 20 };
    enum { NA = sizeof(aligns) / sizeof(aligns[0]), NS = sizeof(sizes) / sizeof(sizes[0]) };
    void *p[NA * NS], *c[NA * NS];
    size_t n = 0;
    for (size_t a = 0; a < NA; a++) {
        for (size_t s = 0; s < NS; s++, n++) {
            p[n] = c[n] = NULL;
            EXPECT_STATUS(alloc_dev(&fx, sizes[s], aligns[a], &p[n], &c[n]), HAL_OK);
            size_t want = aligns[a] > 256 ? aligns[a] : 256;
            CTEST_EXPECT(p[n] != NULL && (uintptr_t)p[n] % want == 0);
            CTEST_EXPECT(in_arena(&fx, p[n], sizes[s]));
            if (p[n] != NULL)
                memset(p[n], (int)n, sizes[s]);
        }
    }
    /* No two live allocations overlap: each still holds its own byte. */
    int overlap = 0;
    n = 0;
    for (size_t a = 0; a < NA; a++) {
        for (size_t s = 0; s < NS; s++, n++) {
            const unsigned char *b = p[n];
            if (b != NULL && (b[0] != (unsigned char)n || b[sizes[s] - 1] != (unsigned char)n))
                overlap++;
        }
    }
    CTEST_EXPECT(overlap == 0);
    for (size_t i = 0; i < n; i++) {
        if (p[i] != NULL)
            free_dev(&fx, p[i], c[i]);
    }
    CTEST_EXPECT(free_ranges(&fx) == 1); /* everything merged back into one range */
    CTEST_EXPECT(free_of(&fx) == (UINT64_C(256) << 20));

    /* Shared memory comes from the same arena. */
    void *sh = NULL, *csh = NULL;
    EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[0], HAL_MEM_KIND_SHARED, 5000, 4096, &sh, &csh), HAL_OK);
    CTEST_EXPECT(in_arena(&fx, sh, 5000) && (uintptr_t)sh % 4096 == 0);
    EXPECT_STATUS(fx.ops->mem_free(fx.dev[0], HAL_MEM_KIND_SHARED, sh, csh), HAL_OK);
    /* Pinned memory does not. */
    void *pin = NULL, *cpin = NULL;
    EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[0], HAL_MEM_KIND_HOST_PINNED, 5000, 0, &pin, &cpin),
                  HAL_OK);
    CTEST_EXPECT(!in_arena(&fx, pin, 1));
    EXPECT_STATUS(fx.ops->mem_free(fx.dev[0], HAL_MEM_KIND_HOST_PINNED, pin, cpin), HAL_OK);
    t_close(&fx);
    return CTEST_PASS;
}

CTEST(CpuArena, ReuseAfterFreeAndCoalescing)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", "16M", NULL, NULL), HAL_OK);
    enum { Q = 256 * 1024 };
    void *p[4] = { 0 }, *c[4] = { 0 };
    for (int i = 0; i < 4; i++)
        EXPECT_STATUS(alloc_dev(&fx, Q, 0, &p[i], &c[i]), HAL_OK);
    for (int i = 1; i < 4; i++)
        CTEST_EXPECT((char *)p[i] == (char *)p[0] + (size_t)i * Q); /* packed, in address order */

    /* The freed range is the best fit for the same size again. */
    void *again = NULL, *cagain = NULL;
    free_dev(&fx, p[1], c[1]);
    EXPECT_STATUS(alloc_dev(&fx, Q, 0, &again, &cagain), HAL_OK);
    CTEST_EXPECT(again == p[1]);
    p[1] = again;
    c[1] = cagain;

    /* Two neighbours freed (in either order) merge: twice the size fits where they were, not
     * in the free tail behind p[3]. */
    free_dev(&fx, p[2], c[2]);
    free_dev(&fx, p[1], c[1]);
    void *two = NULL, *ctwo = NULL;
    EXPECT_STATUS(alloc_dev(&fx, 2 * Q, 0, &two, &ctwo), HAL_OK);
    CTEST_EXPECT(two == p[1]);

    /* A range freed between two free ranges merges with both. */
    free_dev(&fx, p[0], c[0]);
    uint32_t before = free_ranges(&fx);
    free_dev(&fx, two, ctwo); /* joins p[0]'s range; p[3] still separates it from the tail */
    CTEST_EXPECT(free_ranges(&fx) == before);
    void *three = NULL, *cthree = NULL;
    EXPECT_STATUS(alloc_dev(&fx, 3 * Q, 0, &three, &cthree), HAL_OK);
    CTEST_EXPECT(three == p[0]);
    free_dev(&fx, p[3], c[3]); /* merges with the tail */
    free_dev(&fx, three, cthree);
    CTEST_EXPECT(free_ranges(&fx) == 1);
    CTEST_EXPECT(free_of(&fx) == (UINT64_C(16) << 20));
    t_close(&fx);
    return CTEST_PASS;
}

CTEST(CpuArena, CapacityAndFragmentation)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", "1M", NULL, NULL), HAL_OK);
    const uint64_t cap = UINT64_C(1) << 20;

    /* The capacity is what is accounted, as without an arena: sizes that are not multiples of
     * 256 still fill it exactly. */
    void *a = NULL, *ca = NULL, *b = NULL, *cb = NULL, *x = NULL, *cx = NULL;
    EXPECT_STATUS(alloc_dev(&fx, 1000, 0, &a, &ca), HAL_OK);
    EXPECT_STATUS(alloc_dev(&fx, cap - 1000, 0, &b, &cb), HAL_OK);
    CTEST_EXPECT(free_of(&fx) == 0);
    t_clear_error();
    EXPECT_STATUS(alloc_dev(&fx, 1, 0, &x, &cx), HAL_ERROR_OUT_OF_DEVICE_MEMORY);
    EXPECT_MESSAGE("device 0 capacity exceeded: requested 1 bytes, 0 of 1048576 free");
    EXPECT_MESSAGE("HAL_CPU_DEVICE_MEMORY");
    free_dev(&fx, a, ca);
    free_dev(&fx, b, cb);
    CTEST_EXPECT(free_of(&fx) == cap);

    /* One-byte allocations take 256 bytes of arena each: the arena (twice the capacity) runs
     * out long before the capacity does, and says it is fragmented. */
    enum { MAX = 8192 + 16 };
    void **p = calloc(MAX, sizeof(void *)), **c = calloc(MAX, sizeof(void *));
    size_t n = 0;
    hal_status_t st = HAL_OK;
    t_clear_error();
    while (n < MAX && (st = alloc_dev(&fx, 1, 0, &p[n], &c[n])) == HAL_OK)
        n++;
    CTEST_EXPECT(st == HAL_ERROR_OUT_OF_DEVICE_MEMORY);
    CTEST_EXPECT(n == 2 * cap / 256);
    EXPECT_MESSAGE("device 0 memory is too fragmented: no free range holds 1 bytes");
    CTEST_EXPECT(free_of(&fx) == cap - n);

    /* Every other one freed: plenty of capacity, but no 512-byte range. */
    for (size_t i = 0; i < n; i += 2) {
        free_dev(&fx, p[i], c[i]);
        p[i] = NULL;
    }
    t_clear_error();
    EXPECT_STATUS(alloc_dev(&fx, 512, 0, &x, &cx), HAL_ERROR_OUT_OF_DEVICE_MEMORY);
    EXPECT_MESSAGE("no free range holds 512 bytes aligned to 256");
    CTEST_EXPECT(free_of(&fx) == cap - n / 2); /* the failure charged nothing */
    EXPECT_STATUS(alloc_dev(&fx, 256, 0, &x, &cx), HAL_OK);
    free_dev(&fx, x, cx);
    for (size_t i = 1; i < n; i += 2)
        free_dev(&fx, p[i], c[i]);
    CTEST_EXPECT(free_ranges(&fx) == 1);
    CTEST_EXPECT(free_of(&fx) == cap);
    free(p);
    free(c);
    t_close(&fx);
    return CTEST_PASS;
}

CTEST(CpuArena, FreedPagesAreGivenBack)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", "256M", NULL, NULL), HAL_OK);
    enum { MB = 1 << 20 };
    void *a = NULL, *ca = NULL, *b = NULL, *cb = NULL, *s = NULL, *cs = NULL;
    CTEST_EXPECT(resident(&fx) == 0); /* nothing is committed up front */
    EXPECT_STATUS(alloc_dev(&fx, 8 * MB, 0, &a, &ca), HAL_OK);
    EXPECT_STATUS(alloc_dev(&fx, 4 * MB, 0, &b, &cb), HAL_OK);
    CTEST_EXPECT(resident(&fx) == 0); /* pages appear when touched */
    memset(a, 1, 8 * MB);
    memset(b, 2, 4 * MB);
    CTEST_EXPECT(resident(&fx) >= 12u * MB);

    /* A large block in the middle goes back at once. */
    free_dev(&fx, a, ca);
    CTEST_EXPECT(resident(&fx) >= 4u * MB && resident(&fx) < 5u * MB);
    CTEST_EXPECT(((unsigned char *)b)[0] == 2 && ((unsigned char *)b)[4 * MB - 1] == 2);

    /* A small block stays resident for reuse, until its free range grows large. */
    EXPECT_STATUS(alloc_dev(&fx, 64 * 1024, 0, &s, &cs), HAL_OK);
    memset(s, 3, 64 * 1024);
    uint64_t with_small = resident(&fx);
    free_dev(&fx, b, cb);
    CTEST_EXPECT(((unsigned char *)s)[0] == 3);
    free_dev(&fx, s, cs);
    CTEST_EXPECT(resident(&fx) < with_small);
    CTEST_EXPECT(resident(&fx) == 0);
    t_close(&fx);
    return CTEST_PASS;
}

/* ---- many threads -------------------------------------------------------------------------- */

typedef struct churn {
    t_fixture_t *fx;
    unsigned seed;
    int id;
    int failures;
    int ooms;
} churn_t;

static unsigned next_rand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 8) & 0xffffffu;
}

static void *churn_thread(void *arg)
{
    churn_t *w = arg;
    enum { LIVE = 8 };
    void *p[LIVE] = { 0 }, *c[LIVE] = { 0 };
    size_t sz[LIVE] = { 0 };
    unsigned char tag[LIVE] = { 0 };
    static const size_t aligns[] = { 0, 512, 4096, 65536, 1u << 20 };
    for (int i = 0; i < 3000; i++) {
        int k = (int)(next_rand(&w->seed) % LIVE);
        if (p[k] != NULL) {
            const unsigned char *b = p[k];
            if (b[0] != tag[k] || b[sz[k] / 2] != tag[k] || b[sz[k] - 1] != tag[k])
                w->failures++; /* someone else wrote into this allocation */
            free_dev(w->fx, p[k], c[k]);
            p[k] = NULL;
            continue;
        }
        size_t size = 1 + next_rand(&w->seed) % (256 * 1024);
        size_t align = aligns[next_rand(&w->seed) % 5];
        hal_status_t st = alloc_dev(w->fx, size, align, &p[k], &c[k]);
        if (st == HAL_ERROR_OUT_OF_DEVICE_MEMORY) { /* the capacity is shared by the threads */
            w->ooms++;
            p[k] = NULL;
            continue;
        }
        if (st != HAL_OK || (align > 0 && (uintptr_t)p[k] % align != 0)) {
            w->failures++;
            p[k] = NULL;
            continue;
        }
        sz[k] = size;
        tag[k] = (unsigned char)(w->id * 31 + i);
        memset(p[k], tag[k], size);
    }
    for (int k = 0; k < LIVE; k++) {
        if (p[k] != NULL)
            free_dev(w->fx, p[k], c[k]);
    }
    return NULL;
}

CTEST(CpuArena, ManyThreads)
{
    t_fixture_t fx;
    /* Small enough that the threads run into the capacity now and then. */
    EXPECT_STATUS(t_open(&fx, "1", "12M", NULL, NULL), HAL_OK);
    enum { N = 8 };
    pthread_t th[N];
    churn_t w[N];
    for (int i = 0; i < N; i++) {
        w[i] = (churn_t){ .fx = &fx, .seed = 7u + (unsigned)i * 7919u, .id = i };
        pthread_create(&th[i], NULL, churn_thread, &w[i]);
    }
    int failures = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        failures += w[i].failures;
    }
    CTEST_EXPECT(failures == 0);
    CTEST_EXPECT(free_of(&fx) == (UINT64_C(12) << 20));
    CTEST_EXPECT(free_ranges(&fx) == 1);
    CTEST_EXPECT(resident(&fx) == 0); /* the last free gave every page back */
    t_close(&fx);
    return CTEST_PASS;
}

/* ---- fallback ------------------------------------------------------------------------------ */

CTEST(CpuArena, FallsBackWithoutAnArena)
{
    t_fixture_t fx;
    /* 100 TiB of capacity needs a 200 TiB arena: more address space than the process has. The
     * device still works, from posix_memalign, but cannot share its memory. */
    EXPECT_STATUS(t_open(&fx, "1", "100T", NULL, NULL), HAL_OK);
    CTEST_EXPECT(arena_of(&fx, 0) == NULL);
    hal_device_properties_t props;
    memset(&props, 0, sizeof(props));
    props.struct_size = sizeof(props);
    EXPECT_STATUS(fx.ops->device_get_properties(fx.dev[0], &props), HAL_OK);
    CTEST_EXPECT((props.capabilities & HAL_DEVICE_CAP_IPC) == 0);
    CTEST_EXPECT((props.capabilities & HAL_DEVICE_CAP_SHARED_MEMORY) != 0);
    void *p = NULL, *c = NULL;
    EXPECT_STATUS(alloc_dev(&fx, 12345, 4096, &p, &c), HAL_OK);
    CTEST_EXPECT(p != NULL && (uintptr_t)p % 4096 == 0);
    CTEST_EXPECT(free_of(&fx) == (UINT64_C(100) << 40) - 12345);
    if (p != NULL) {
        memset(p, 0x11, 12345);
        hal_backend_ptr_t bp = t_alloc_ptr(p, c, 12345, 0, HAL_MEM_KIND_DEVICE);
        hal_ipc_handle_t h;
        t_clear_error();
        EXPECT_STATUS(fx.ops->mem_ipc_export(fx.dev[0], &bp, &h), HAL_ERROR_UNSUPPORTED);
        EXPECT_MESSAGE("no shareable memory arena");
        free_dev(&fx, p, c);
    }
    CTEST_EXPECT(free_of(&fx) == (UINT64_C(100) << 40));
    t_close(&fx);
    return CTEST_PASS;
}
