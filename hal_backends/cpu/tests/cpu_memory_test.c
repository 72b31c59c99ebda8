/* SPDX-License-Identifier: Apache-2.0 */
/* Memory of the cpu backend: alignment, capacity accounting and out-of-memory, copies and
 * memset in every direction, including peer copies across devices. */
#include <stdlib.h>

#include "hal_backends/cpu/tests/cpu_test_util.h"

static uint64_t free_of(t_fixture_t *fx, uint32_t dev)
{
    uint64_t free_bytes = 0;
    fx->ops->device_get_free_memory(fx->dev[dev], &free_bytes);
    return free_bytes;
}

CTEST(CpuMemory, Alignment)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", NULL, NULL, NULL), HAL_OK);
    static const size_t aligns[] = { 0, 1, 8, 256, 4096, 1u << 20 };
    static const hal_mem_kind_t kinds[] = { HAL_MEM_KIND_DEVICE, HAL_MEM_KIND_HOST_PINNED,
                                            HAL_MEM_KIND_SHARED };
    for (size_t k = 0; k < 3; k++) {
        for (size_t a = 0; a < sizeof(aligns) / sizeof(aligns[0]); a++) {
            void *p = NULL, *cookie = NULL;
            EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[0], kinds[k], 1000, aligns[a], &p, &cookie),
                          HAL_OK);
            size_t want = aligns[a] > 256 ? aligns[a] : 256;
            CTEST_EXPECT(p != NULL && (uintptr_t)p % want == 0);
            if (p != NULL) {
                memset(p, 0x5a, 1000); /* host-addressable, every kind */
                EXPECT_STATUS(fx.ops->mem_free(fx.dev[0], kinds[k], p, cookie), HAL_OK);
            }
        }
    }
    CTEST_EXPECT(free_of(&fx, 0) == (UINT64_C(16) << 30));
    t_close(&fx);
    return CTEST_PASS;
}

CTEST(CpuMemory, CapacityAndOutOfMemory)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "2", "1M", NULL, NULL), HAL_OK);
    const uint64_t cap = UINT64_C(1) << 20;
    void *a = NULL, *ca = NULL, *b = NULL, *cb = NULL, *c = NULL, *cc = NULL;
    EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, 600 * 1024, 0, &a, &ca),
                  HAL_OK);
    CTEST_EXPECT(free_of(&fx, 0) == cap - 600 * 1024);
    CTEST_EXPECT(free_of(&fx, 1) == cap); /* devices are accounted separately */

    /* Shared memory counts too. */
    EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[0], HAL_MEM_KIND_SHARED, 300 * 1024, 0, &b, &cb),
                  HAL_OK);
    CTEST_EXPECT(free_of(&fx, 0) == cap - 900 * 1024);

    /* Over by one byte. */
    t_clear_error();
    EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, 124 * 1024 + 1, 0, &c, &cc),
                  HAL_ERROR_OUT_OF_DEVICE_MEMORY);
    EXPECT_MESSAGE("device 0 capacity exceeded: requested 126977 bytes, 126976 of 1048576 free");
    EXPECT_MESSAGE("HAL_CPU_DEVICE_MEMORY");
    EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[0], HAL_MEM_KIND_SHARED, SIZE_MAX, 0, &c, &cc),
                  HAL_ERROR_OUT_OF_DEVICE_MEMORY);
    CTEST_EXPECT(free_of(&fx, 0) == cap - 900 * 1024);

    /* Exactly what is left fits. */
    EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, 124 * 1024, 0, &c, &cc),
                  HAL_OK);
    CTEST_EXPECT(free_of(&fx, 0) == 0);

    /* Pinned host memory is not device memory. */
    void *h = NULL, *ch = NULL;
    EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[0], HAL_MEM_KIND_HOST_PINNED, 4 << 20, 0, &h, &ch),
                  HAL_OK);
    CTEST_EXPECT(free_of(&fx, 0) == 0);
    EXPECT_STATUS(fx.ops->mem_free(fx.dev[0], HAL_MEM_KIND_HOST_PINNED, h, ch), HAL_OK);

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* A host allocation that cannot succeed maps to out of host memory. (The sanitizers' own
     * allocators report impossible sizes as errors instead of returning NULL.) */
    t_clear_error();
    EXPECT_STATUS(
        fx.ops->mem_alloc(fx.dev[0], HAL_MEM_KIND_HOST_PINNED, SIZE_MAX - 4096, 0, &h, &ch),
        HAL_ERROR_OUT_OF_HOST_MEMORY);
    EXPECT_MESSAGE("posix_memalign");
#endif

    /* Freeing gives the bytes back. */
    EXPECT_STATUS(fx.ops->mem_free(fx.dev[0], HAL_MEM_KIND_DEVICE, a, ca), HAL_OK);
    EXPECT_STATUS(fx.ops->mem_free(fx.dev[0], HAL_MEM_KIND_SHARED, b, cb), HAL_OK);
    EXPECT_STATUS(fx.ops->mem_free(fx.dev[0], HAL_MEM_KIND_DEVICE, c, cc), HAL_OK);
    CTEST_EXPECT(free_of(&fx, 0) == cap);
    t_close(&fx);
    return CTEST_PASS;
}

typedef struct alloc_worker {
    t_fixture_t *fx;
    int failures;
} alloc_worker_t;

static void *alloc_loop(void *arg)
{
    alloc_worker_t *w = arg;
    for (int i = 0; i < 2000; i++) {
        void *p = NULL, *cookie = NULL;
        size_t size = 4096u * (size_t)(1 + i % 7);
        hal_status_t st =
            w->fx->ops->mem_alloc(w->fx->dev[0], HAL_MEM_KIND_DEVICE, size, 0, &p, &cookie);
        if (st == HAL_OK)
            w->fx->ops->mem_free(w->fx->dev[0], HAL_MEM_KIND_DEVICE, p, cookie);
        else if (st != HAL_ERROR_OUT_OF_DEVICE_MEMORY)
            w->failures++;
    }
    return NULL;
}

CTEST(CpuMemory, ConcurrentAccountingIsExact)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", "64K", NULL, NULL), HAL_OK);
    enum { N = 4 };
    pthread_t th[N];
    alloc_worker_t w[N];
    for (int i = 0; i < N; i++) {
        w[i] = (alloc_worker_t){ &fx, 0 };
        pthread_create(&th[i], NULL, alloc_loop, &w[i]);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        CTEST_EXPECT(w[i].failures == 0);
    }
    CTEST_EXPECT(free_of(&fx, 0) == 64 * 1024);
    t_close(&fx);
    return CTEST_PASS;
}

CTEST(CpuMemory, CopiesAndMemsetInEveryDirection)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "2", NULL, NULL, NULL), HAL_OK);
    enum { N = 3 << 20 };
    void *s0 = NULL, *s1 = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &s0), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[1], 0, &s1), HAL_OK);
    void *d0, *cd0, *d1, *cd1, *pin, *cpin, *sh, *csh;
    EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, N, 0, &d0, &cd0), HAL_OK);
    EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[1], HAL_MEM_KIND_DEVICE, N, 0, &d1, &cd1), HAL_OK);
    EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[0], HAL_MEM_KIND_HOST_PINNED, N, 0, &pin, &cpin),
                  HAL_OK);
    EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[1], HAL_MEM_KIND_SHARED, N, 0, &sh, &csh), HAL_OK);
    unsigned char *pageable = malloc(N);
    unsigned char *back = malloc(N);
    for (size_t i = 0; i < N; i++)
        pageable[i] = (unsigned char)(i * 131u + 7u);

    hal_backend_ptr_t p_page = t_ptr(pageable, HAL_MEM_KIND_UNREGISTERED);
    hal_backend_ptr_t p_back = t_ptr(back, HAL_MEM_KIND_UNREGISTERED);
    hal_backend_ptr_t p_d0 = t_ptr(d0, HAL_MEM_KIND_DEVICE);
    hal_backend_ptr_t p_d1 = t_ptr(d1, HAL_MEM_KIND_DEVICE);
    hal_backend_ptr_t p_pin = t_ptr(pin, HAL_MEM_KIND_HOST_PINNED);
    hal_backend_ptr_t p_sh = t_ptr(sh, HAL_MEM_KIND_SHARED);

    /* pageable -> device 0 -> device 1 (peer, on device 1's stream) -> shared -> pinned ->
     * pageable, each step ordered by its stream or by synchronisation. */
    EXPECT_STATUS(fx.ops->memcpy_async(s0, &p_d0, &p_page, N), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_synchronize(s0), HAL_OK);
    EXPECT_STATUS(fx.ops->memcpy_async(s1, &p_d1, &p_d0, N), HAL_OK);
    EXPECT_STATUS(fx.ops->memcpy_async(s1, &p_sh, &p_d1, N), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_synchronize(s1), HAL_OK);
    EXPECT_STATUS(fx.ops->memcpy_async(s0, &p_pin, &p_sh, N), HAL_OK);
    EXPECT_STATUS(fx.ops->memcpy_async(s0, &p_back, &p_pin, N), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_synchronize(s0), HAL_OK);
    CTEST_EXPECT(memcmp(back, pageable, N) == 0);

    /* memset of an interior range, then copy out. */
    hal_backend_ptr_t p_mid = t_ptr((char *)d0 + 1000, HAL_MEM_KIND_DEVICE);
    EXPECT_STATUS(fx.ops->memset_async(s0, &p_mid, 0x1ff, 5000), HAL_OK);
    EXPECT_STATUS(fx.ops->memcpy_async(s0, &p_back, &p_d0, N), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_synchronize(s0), HAL_OK);
    int ok = 1;
    for (size_t i = 0; i < N; i++) {
        unsigned char want = (i >= 1000 && i < 6000) ? 0xff : pageable[i];
        if (back[i] != want)
            ok = 0;
    }
    CTEST_EXPECT(ok);

    EXPECT_STATUS(fx.ops->stream_destroy(s0), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_destroy(s1), HAL_OK);
    fx.ops->mem_free(fx.dev[0], HAL_MEM_KIND_DEVICE, d0, cd0);
    fx.ops->mem_free(fx.dev[1], HAL_MEM_KIND_DEVICE, d1, cd1);
    fx.ops->mem_free(fx.dev[0], HAL_MEM_KIND_HOST_PINNED, pin, cpin);
    fx.ops->mem_free(fx.dev[1], HAL_MEM_KIND_SHARED, sh, csh);
    free(pageable);
    free(back);
    t_close(&fx);
    return CTEST_PASS;
}
