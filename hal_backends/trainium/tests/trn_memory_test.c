/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: device memory as nrt tensors, copies in every direction (host, pinned,
 * same-core device, cross-core device staged through host), memset, interior pointers, bad
 * input, out-of-device-memory and alignment. */
#include <stdlib.h>

#include "hal_backends/trainium/tests/trn_test_util.h"

typedef struct fixture {
    hal_backend_t b;
    hal_device_t dev[2];
    hal_stream_t s[2]; /* default streams */
} fixture_t;

/* Opens the backend on two cores (with whatever else the test put in the environment). */
static hal_status_t fx_open(fixture_t *fx)
{
    memset(fx, 0, sizeof(*fx));
    if (getenv("NEURON_RT_VISIBLE_CORES") == NULL && getenv("NEURON_RT_NUM_CORES") == NULL)
        tt_setenv("NEURON_RT_VISIBLE_CORES", "0-1");
    hal_status_t st = tt_open(&fx->b);
    if (st != HAL_OK)
        return st;
    for (uint32_t i = 0; i < 2; i++) {
        fx->dev[i] = tt_device(fx->b, i);
        if (fx->dev[i] == NULL || hal_device_get_default_stream(fx->dev[i], &fx->s[i]) != HAL_OK)
            return HAL_ERROR_INTERNAL;
    }
    return HAL_OK;
}

static void fx_close(fixture_t *fx)
{
    if (fx->b != NULL)
        hal_backend_close(fx->b);
    fx->b = NULL;
}

/* ---- round trips --------------------------------------------------------------------------- */

/* Guard bytes around every buffer; the data sits at an odd offset. */
enum { GUARD = 17, SLACK = 64 };

/* Sends a pattern of n bytes through every kind of copy, on one stream, and checks the result
 * and that no byte outside the copied ranges changed:
 *   pageable -> core0 -> core0 (nrt_tensor_copy) -> core1 (staged) -> pinned -> core1
 *   -> pageable -> pinned (host to host) -> pageable. */
static int roundtrip(fixture_t *fx, size_t n, hal_stream_t s, bool read_back_all)
{
    size_t total = n + SLACK;
    uint8_t *src = malloc(total), *out = malloc(total), *check = malloc(total);
    uint8_t *a0 = NULL, *b0 = NULL, *a1 = NULL, *b1 = NULL, *pin = NULL, *pin2 = NULL;
    CTEST_EXPECT(src != NULL && out != NULL && check != NULL);
    if (src == NULL || out == NULL || check == NULL)
        goto out;
    EXPECT_OK(hal_mem_alloc(fx->dev[0], HAL_MEM_KIND_DEVICE, total, 0, (void **)&a0));
    EXPECT_OK(hal_mem_alloc(fx->dev[0], HAL_MEM_KIND_DEVICE, total, 0, (void **)&b0));
    EXPECT_OK(hal_mem_alloc(fx->dev[1], HAL_MEM_KIND_DEVICE, total, 0, (void **)&a1));
    EXPECT_OK(hal_mem_alloc(fx->dev[1], HAL_MEM_KIND_DEVICE, total, 0, (void **)&b1));
    EXPECT_OK(hal_mem_alloc(fx->dev[0], HAL_MEM_KIND_HOST_PINNED, total, 0, (void **)&pin));
    EXPECT_OK(hal_mem_alloc(fx->dev[1], HAL_MEM_KIND_HOST_PINNED, total, 0, (void **)&pin2));
    if (ctest_failures_so_far())
        goto out;
    tt_fill(src, total, (uint32_t)n);
    memset(out, 0xEE, total);
    memset(pin, 0xEE, total);
    memset(pin2, 0xEE, total);
    uint8_t *dev[] = { a0, b0, a1, b1 };
    for (int i = 0; i < 4; i++)
        EXPECT_OK(hal_memset_async(dev[i], 0xEE, total, s));

    EXPECT_OK(hal_memcpy_async(a0 + GUARD, src + GUARD, n, s));   /* pageable -> device */
    EXPECT_OK(hal_memcpy_async(b0 + GUARD, a0 + GUARD, n, s));    /* same core */
    EXPECT_OK(hal_memcpy_async(a1 + GUARD, b0 + GUARD, n, s));    /* across cores */
    EXPECT_OK(hal_memcpy_async(pin + GUARD, a1 + GUARD, n, s));   /* device -> pinned */
    EXPECT_OK(hal_memcpy_async(b1 + GUARD, pin + GUARD, n, s));   /* pinned -> device */
    EXPECT_OK(hal_memcpy_async(out + GUARD, b1 + GUARD, n, s));   /* device -> pageable */
    EXPECT_OK(hal_memcpy_async(pin2 + GUARD, out + GUARD, n, s)); /* host -> host */
    EXPECT_OK(hal_stream_synchronize(s));

    memcpy(check, src, total);
    memset(check, 0xEE, GUARD);
    memset(check + GUARD + n, 0xEE, total - GUARD - n);
    CTEST_EXPECT(memcmp(out, check, total) == 0);
    CTEST_EXPECT(memcmp(pin, check, total) == 0);
    CTEST_EXPECT(memcmp(pin2, check, total) == 0);
    /* Every device buffer (or the last one only), guards included. */
    for (int i = read_back_all ? 0 : 3; i < 4; i++) {
        memset(out, 0, total);
        EXPECT_OK(hal_memcpy_async(out, dev[i], total, s));
        EXPECT_OK(hal_stream_synchronize(s));
        if (memcmp(out, check, total) != 0) {
            fprintf(stderr, "size %zu: device buffer %d differs\n", n, i);
            ctest_record_failure();
        }
    }
out:
    hal_mem_free(a0);
    hal_mem_free(b0);
    hal_mem_free(a1);
    hal_mem_free(b1);
    hal_mem_free(pin);
    hal_mem_free(pin2);
    free(src);
    free(out);
    free(check);
    return ctest_failures_so_far();
}

/* On a stream of either core (the copies touch memory of both), unless `quick`. */
static int roundtrip_test(size_t n, bool quick)
{
    fixture_t fx;
    tt_env_reset();
    EXPECT_OK(fx_open(&fx));
    if (!ctest_failures_so_far()) {
        if (!quick)
            (void)roundtrip(&fx, n, fx.s[0], true);
        (void)roundtrip(&fx, n, fx.s[1], !quick);
    }
    fx_close(&fx);
    return CTEST_PASS;
}

CTEST(TrnMemory, RoundTrip1)
{
    return roundtrip_test(1, false);
}

CTEST(TrnMemory, RoundTripOdd)
{
    return roundtrip_test(12345, false);
}

CTEST(TrnMemory, RoundTrip1MiB)
{
    return roundtrip_test(1u << 20, false);
}

/* Larger than the staging chunk many times over, and not a multiple of it; on one stream and
 * checking the final copies only, to keep the sanitizer runs short. */
CTEST(TrnMemory, RoundTrip64MiB)
{
    return roundtrip_test((64u << 20) + 3, true);
}

/* Size 0: allocation gives NULL, and copies and memsets of 0 bytes are no-ops whatever the
 * pointers. */
CTEST(TrnMemory, RoundTrip0)
{
    fixture_t fx;
    tt_env_reset();
    EXPECT_OK(fx_open(&fx));
    void *p = (void *)1;
    EXPECT_OK(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, 0, 0, &p));
    CTEST_EXPECT(p == NULL);
    p = (void *)1;
    EXPECT_OK(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_HOST_PINNED, 0, 0, &p));
    CTEST_EXPECT(p == NULL);
    uint8_t *d = NULL, host[8];
    EXPECT_OK(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, 64, 0, (void **)&d));
    EXPECT_OK(hal_memcpy_async(NULL, NULL, 0, fx.s[0]));
    EXPECT_OK(hal_memcpy_async(d, host, 0, fx.s[0]));
    EXPECT_OK(hal_memcpy_async(host, d, 0, fx.s[0]));
    EXPECT_OK(hal_memcpy_async(d + 64, d, 0, fx.s[0]));
    EXPECT_OK(hal_memset_async(d, 1, 0, fx.s[0]));
    EXPECT_OK(hal_memset_async(NULL, 1, 0, fx.s[0]));
    EXPECT_OK(hal_stream_synchronize(fx.s[0]));
    EXPECT_OK(hal_mem_free(d));
    fx_close(&fx);
    return CTEST_PASS;
}

/* ---- same core vs. across cores ------------------------------------------------------------ */

/* A same-core device copy is one nrt_tensor_copy; a cross-core one is staged through host with
 * reads and writes. The emulator's fault plan tells them apart: with every nrt_tensor_copy
 * failing, only the same-core copy fails (naming the call); with reads failing, only the
 * cross-core one does. */
CTEST(TrnMemory, SameCoreUsesTensorCopyCrossCoreIsStaged)
{
    TT_REQUIRE_EMULATOR();
    static const struct {
        const char *faults;
        bool same_core_fails, cross_core_fails;
        const char *call;
    } cases[] = {
        { "copy_fail_after=0", true, false,
          "nrt_tensor_copy(NeuronCore 0, src offset 8, dst "
          "offset 16, 1000 bytes) returned NRT_FAILURE (1)" },
        { "read_fail_after=1", false, true,
          "nrt_tensor_read(tensor of NeuronCore 0, offset 8, "
          "1000 bytes) returned NRT_FAILURE (1)" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fixture_t fx;
        tt_env_reset();
        tt_setenv("NEURON_EMU_FAULTS", cases[i].faults);
        EXPECT_OK(fx_open(&fx));
        if (ctest_failures_so_far()) {
            fx_close(&fx);
            break;
        }
        uint8_t *a0 = NULL, *b0 = NULL, *a1 = NULL, host[1000];
        EXPECT_OK(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, 4096, 0, (void **)&a0));
        EXPECT_OK(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, 4096, 0, (void **)&b0));
        EXPECT_OK(hal_mem_alloc(fx.dev[1], HAL_MEM_KIND_DEVICE, 4096, 0, (void **)&a1));
        /* One read is spent here, so the read plan fails the next one. */
        EXPECT_OK(hal_memcpy_async(host, a0, sizeof(host), fx.s[0]));
        EXPECT_OK(hal_stream_synchronize(fx.s[0]));

        hal_stream_t same = NULL, cross = NULL;
        EXPECT_OK(hal_stream_create(fx.dev[0], 0, &same));
        EXPECT_OK(hal_stream_create(fx.dev[1], 0, &cross));
        EXPECT_OK(hal_memcpy_async(b0 + 16, a0 + 8, 1000, same));
        hal_status_t st = hal_stream_synchronize(same);
        CTEST_EXPECT(st == (cases[i].same_core_fails ? HAL_ERROR_BACKEND_SPECIFIC : HAL_OK));
        if (cases[i].same_core_fails)
            EXPECT_MESSAGE(cases[i].call);
        EXPECT_OK(hal_memcpy_async(a1 + 16, a0 + 8, 1000, cross));
        st = hal_stream_synchronize(cross);
        CTEST_EXPECT(st == (cases[i].cross_core_fails ? HAL_ERROR_BACKEND_SPECIFIC : HAL_OK));
        if (cases[i].cross_core_fails) {
            EXPECT_MESSAGE(cases[i].call);
            EXPECT_MESSAGE("staging a copy from NeuronCore 0 to NeuronCore 1");
        }
        hal_stream_destroy(same);
        hal_stream_destroy(cross);
        fx_close(&fx);
    }
    return CTEST_PASS;
}

/* Copies in both directions between cores, from streams of either core, at interior offsets. */
CTEST(TrnMemory, CrossCoreCopiesBothWays)
{
    fixture_t fx;
    tt_env_reset();
    EXPECT_OK(fx_open(&fx));
    enum { N = 100000 };
    uint8_t *a = NULL, *b = NULL;
    uint8_t *host = malloc(N), *back = malloc(N);
    CTEST_EXPECT(host != NULL && back != NULL);
    EXPECT_OK(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, N + 100, 0, (void **)&a));
    EXPECT_OK(hal_mem_alloc(fx.dev[1], HAL_MEM_KIND_DEVICE, N + 100, 0, (void **)&b));
    if (!ctest_failures_so_far()) {
        tt_fill(host, N, 7);
        for (int dir = 0; dir < 2; dir++) {
            uint8_t *from = dir == 0 ? a : b, *to = dir == 0 ? b : a;
            hal_stream_t s = fx.s[1 - dir]; /* 0 -> 1 on core 1's stream, 1 -> 0 on core 0's */
            memset(back, 0, N);
            EXPECT_OK(hal_memcpy_async(from + 33, host, N, s));
            EXPECT_OK(hal_memcpy_async(to + 99, from + 33, N, s));
            EXPECT_OK(hal_memcpy_async(back, to + 99, N, s));
            EXPECT_OK(hal_stream_synchronize(s));
            CTEST_EXPECT(tt_mismatch(back, N, 7) == N);
        }
    }
    hal_mem_free(a);
    hal_mem_free(b);
    free(host);
    free(back);
    fx_close(&fx);
    return CTEST_PASS;
}

/* ---- memset -------------------------------------------------------------------------------- */

CTEST(TrnMemory, Memset)
{
    fixture_t fx;
    tt_env_reset();
    EXPECT_OK(fx_open(&fx));
    enum { N = 3 * 4096 + 5 };
    uint8_t *d = NULL, *pin = NULL, host[N];
    EXPECT_OK(hal_mem_alloc(fx.dev[1], HAL_MEM_KIND_DEVICE, N, 0, (void **)&d));
    EXPECT_OK(hal_mem_alloc(fx.dev[1], HAL_MEM_KIND_HOST_PINNED, N, 0, (void **)&pin));
    if (!ctest_failures_so_far()) {
        EXPECT_OK(hal_memset_async(d, 0x11, N, fx.s[0]));
        EXPECT_OK(hal_memset_async(d + 4097, 0x1ff, 100, fx.s[0])); /* (uint8_t)value */
        EXPECT_OK(hal_memset_async(pin, 0x22, N, fx.s[0]));
        EXPECT_OK(hal_memcpy_async(host, d, N, fx.s[0]));
        EXPECT_OK(hal_stream_synchronize(fx.s[0]));
        CTEST_EXPECT(tt_find_other(host, 4097, 0x11) == 4097);
        CTEST_EXPECT(tt_find_other(host + 4097, 100, 0xff) == 100);
        CTEST_EXPECT(tt_find_other(host + 4197, N - 4197, 0x11) == N - 4197);
        CTEST_EXPECT(tt_find_other(pin, N, 0x22) == N);
    }
    hal_mem_free(d);
    hal_mem_free(pin);
    fx_close(&fx);
    return CTEST_PASS;
}

/* ---- pointers ------------------------------------------------------------------------------ */

static int check_info(const void *p, hal_mem_kind_t kind, hal_device_t dev, const void *base,
                      size_t size)
{
    hal_mem_info_t info = HAL_MEM_INFO_INIT;
    EXPECT_OK(hal_mem_get_info(p, &info));
    CTEST_EXPECT(info.kind == kind);
    CTEST_EXPECT(info.device == dev);
    CTEST_EXPECT(info.base == base);
    CTEST_EXPECT(info.size == size);
    if (ctest_failures_so_far())
        fprintf(stderr, "check_info(%p): kind %d device %p base %p size %zu\n", p, (int)info.kind,
                (void *)info.device, info.base, info.size);
    return ctest_failures_so_far();
}

/* hal_mem_get_info on interior pointers of device and pinned memory; the addresses are the
 * runtime's device addresses (nrt_tensor_get_va) and work with offset arithmetic. */
CTEST(TrnMemory, InteriorPointers)
{
    fixture_t fx;
    tt_env_reset();
    EXPECT_OK(fx_open(&fx));
    enum { N = 10000 };
    uint8_t *d = NULL, *pin = NULL, host[N], back[N];
    EXPECT_OK(hal_mem_alloc(fx.dev[1], HAL_MEM_KIND_DEVICE, N, 0, (void **)&d));
    EXPECT_OK(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_HOST_PINNED, N, 0, (void **)&pin));
    if (!ctest_failures_so_far()) {
        static const size_t offsets[] = { 0, 1, 4095, 4096, N - 1 };
        for (size_t i = 0; i < sizeof(offsets) / sizeof(offsets[0]); i++) {
            (void)check_info(d + offsets[i], HAL_MEM_KIND_DEVICE, fx.dev[1], d, N);
            (void)check_info(pin + offsets[i], HAL_MEM_KIND_HOST_PINNED, fx.dev[0], pin, N);
        }
        /* One past the end is not in the allocation. */
        hal_mem_info_t info = HAL_MEM_INFO_INIT;
        EXPECT_OK(hal_mem_get_info(d + N, &info));
        CTEST_EXPECT(info.base != d);
        EXPECT_OK(hal_mem_get_info(host, &info));
        CTEST_EXPECT(info.kind == HAL_MEM_KIND_UNREGISTERED && info.device == NULL);

        /* Offsets are honoured by every call that takes the pointer. */
        tt_fill(host, N, 3);
        EXPECT_OK(hal_memset_async(d, 0, N, fx.s[1]));
        EXPECT_OK(hal_memcpy_async(d + 4321, host, 1000, fx.s[1]));
        EXPECT_OK(hal_memcpy_async(d + 1, d + 4321, 1000, fx.s[1]));
        EXPECT_OK(hal_memcpy_async(back, d + 1, 1000, fx.s[1]));
        EXPECT_OK(hal_memcpy_async(back + 1000, d, 1, fx.s[1]));
        EXPECT_OK(hal_stream_synchronize(fx.s[1]));
        CTEST_EXPECT(tt_mismatch(back, 1000, 3) == 1000);
        CTEST_EXPECT(back[1000] == 0);
    }
    hal_mem_free(d);
    hal_mem_free(pin);
    fx_close(&fx);
    return CTEST_PASS;
}

/* Bad input gives clear errors and does nothing. */
CTEST(TrnMemory, BadInput)
{
    fixture_t fx;
    tt_env_reset();
    EXPECT_OK(fx_open(&fx));
    enum { N = 4096 };
    uint8_t *d = NULL, *d1 = NULL, host[N];
    EXPECT_OK(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, N, 0, (void **)&d));
    EXPECT_OK(hal_mem_alloc(fx.dev[1], HAL_MEM_KIND_DEVICE, N, 0, (void **)&d1));
    hal_stream_t s = fx.s[0];

    EXPECT_STATUS(hal_memcpy_async(NULL, host, 16, s), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("dst is NULL");
    EXPECT_STATUS(hal_memcpy_async(d, NULL, 16, s), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("src is NULL");
    /* Interior pointers whose range runs past the end. */
    EXPECT_STATUS(hal_memcpy_async(d + N - 10, host, 11, s), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("runs past the end of its allocation");
    EXPECT_STATUS(hal_memcpy_async(host, d1 + 1, N, s), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("runs past the end of its allocation");
    EXPECT_STATUS(hal_memcpy_async(d1 + N / 2, d + N / 2, N / 2 + 1, s),
                  HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(hal_memset_async(d + 1, 0, N, s), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("runs past the end of its allocation");
    EXPECT_STATUS(hal_memcpy_async(d + 8, d, 16, s), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("overlap");
    EXPECT_STATUS(hal_memset_async(host, 0, 16, s), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("not memory allocated through the HAL");
    /* Cross-core misuse: recording an event of core 1 on a stream of core 0. */
    hal_event_t e1 = NULL;
    EXPECT_OK(hal_event_create(fx.dev[1], 0, &e1));
    EXPECT_STATUS(hal_event_record(e1, s), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("the event belongs to device 1, the stream to device 0");
    EXPECT_OK(hal_event_destroy(e1));
    /* None of that broke the stream. */
    EXPECT_OK(hal_memset_async(d, 5, N, s));
    EXPECT_OK(hal_memcpy_async(host, d, N, s));
    EXPECT_OK(hal_stream_synchronize(s));
    CTEST_EXPECT(tt_find_other(host, N, 5) == N);

    /* Frees: interior pointer, double free, never allocated. */
    EXPECT_STATUS(hal_mem_free(d + 1), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("interior pointer");
    EXPECT_OK(hal_mem_free(d));
    EXPECT_STATUS(hal_mem_free(d), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(hal_mem_free(host), HAL_ERROR_INVALID_ARGUMENT);
    /* A freed device address is no longer device memory. */
    hal_mem_info_t info = HAL_MEM_INFO_INIT;
    EXPECT_OK(hal_mem_get_info(d, &info));
    CTEST_EXPECT(info.base != d || info.kind != HAL_MEM_KIND_DEVICE);
    EXPECT_OK(hal_mem_free(d1));
    EXPECT_STATUS(hal_mem_free(d1), HAL_ERROR_INVALID_ARGUMENT);
    fx_close(&fx);
    return CTEST_PASS;
}

/* hal_mem_free first waits for queued work that still uses the memory. */
CTEST(TrnMemory, FreeWaitsForQueuedWork)
{
    fixture_t fx;
    tt_env_reset();
    EXPECT_OK(fx_open(&fx));
    enum { N = 1 << 16 };
    uint8_t *d = NULL, *host = malloc(N), *back = malloc(N);
    CTEST_EXPECT(host != NULL && back != NULL);
    EXPECT_OK(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, N, 0, (void **)&d));
    if (!ctest_failures_so_far()) {
        tt_gate_t gate;
        tt_gate_init(&gate);
        tt_fill(host, N, 9);
        EXPECT_OK(hal_memcpy_async(d, host, N, fx.s[0]));
        EXPECT_OK(hal_stream_add_callback(fx.s[0], tt_gate_cb, &gate));
        EXPECT_OK(hal_memcpy_async(back, d, N, fx.s[0]));
        CTEST_EXPECT(tt_gate_wait_entered(&gate));
        CTEST_EXPECT(hal_stream_query(fx.s[0]) == HAL_NOT_READY);
        /* The free blocks until the gate opens and the copy out of d has run. */
        pthread_t opener;
        bool started = tt_gate_open_after(&gate, 50, &opener);
        CTEST_EXPECT(started);
        if (!started)
            tt_gate_open(&gate);
        EXPECT_OK(hal_mem_free(d));
        CTEST_EXPECT(tt_mismatch(back, N, 9) == N);
        EXPECT_OK(hal_stream_query(fx.s[0]));
        if (started)
            pthread_join(opener, NULL);
        tt_gate_destroy(&gate);
    }
    free(host);
    free(back);
    fx_close(&fx);
    return CTEST_PASS;
}

/* ---- out of memory ------------------------------------------------------------------------- */

CTEST(TrnMemory, OutOfDeviceMemoryNamesTheCall)
{
    TT_REQUIRE_EMULATOR();
    fixture_t fx;
    tt_env_reset();
    tt_setenv("NEURON_EMU_HBM_BYTES", "1M");
    EXPECT_OK(fx_open(&fx));
    void *a = NULL, *b = NULL, *c = NULL;
    EXPECT_STATUS(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, 2u << 20, 0, &a),
                  HAL_ERROR_OUT_OF_DEVICE_MEMORY);
    EXPECT_MESSAGE("trainium: hal_mem_alloc: nrt_tensor_allocate(DEVICE, vnc 0, 2097152) "
                   "returned NRT_RESOURCE (4): out of device memory (NeuronCore 0: 0 of "
                   "1048576 bytes in use)");
    CTEST_EXPECT(a == NULL);
    EXPECT_OK(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, 768u << 10, 0, &a));
    EXPECT_STATUS(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, 512u << 10, 0, &b),
                  HAL_ERROR_OUT_OF_DEVICE_MEMORY);
    EXPECT_MESSAGE("786432 of 1048576 bytes in use");
    /* Free memory is the runtime's (the emulator's 1 MiB); the limit stays the instance's share
     * the backend knew before the runtime started (NEURON_EMU_HBM_BYTES is the emulator's). */
    hal_mem_stats_t stats = HAL_MEM_STATS_INIT;
    hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
    EXPECT_OK(hal_device_get_mem_stats(fx.dev[0], &stats));
    EXPECT_OK(hal_device_get_properties(fx.dev[0], &props));
    CTEST_EXPECT(stats.device_bytes_limit == props.total_memory);
    CTEST_EXPECT(stats.device_bytes_free == (256u << 10));
    /* The other core has its own memory. */
    EXPECT_OK(hal_mem_alloc(fx.dev[1], HAL_MEM_KIND_DEVICE, 768u << 10, 0, &c));
    /* Pinned memory is host memory: not limited by the cores'. */
    void *pin = NULL;
    EXPECT_OK(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_HOST_PINNED, 4u << 20, 0, &pin));
    EXPECT_OK(hal_mem_free(pin));
    /* Freed memory can be allocated again. */
    EXPECT_OK(hal_mem_free(a));
    EXPECT_OK(hal_mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, 1u << 20, 0, &b));
    EXPECT_OK(hal_mem_free(b));
    EXPECT_OK(hal_mem_free(c));
    fx_close(&fx);

    /* An injected allocation failure is out of memory too. */
    tt_env_reset();
    tt_setenv("NEURON_EMU_FAULTS", "alloc_fail_after=1");
    EXPECT_OK(fx_open(&fx));
    EXPECT_OK(hal_mem_alloc(fx.dev[1], HAL_MEM_KIND_DEVICE, 4096, 0, &a));
    EXPECT_STATUS(hal_mem_alloc(fx.dev[1], HAL_MEM_KIND_DEVICE, 4096, 0, &b),
                  HAL_ERROR_OUT_OF_DEVICE_MEMORY);
    EXPECT_MESSAGE("nrt_tensor_allocate(DEVICE, vnc 1, 4096) returned NRT_RESOURCE (4)");
    EXPECT_OK(hal_mem_free(a));
    fx_close(&fx);
    return CTEST_PASS;
}

/* ---- alignment ----------------------------------------------------------------------------- */

/* Allocations are aligned to max(4096, requested); a larger alignment than the runtime gives is
 * obtained by slicing a bigger tensor, and the result behaves like any allocation. */
CTEST(TrnMemory, Alignment)
{
    fixture_t fx;
    tt_env_reset();
    EXPECT_OK(fx_open(&fx));
    static const size_t aligns[] = { 0, 1, 64, 4096, 8192, 65536, 1u << 20 };
    enum { N = 5000 };
    uint8_t host[N], back[N];
    tt_fill(host, N, 21);
    for (size_t i = 0; i < sizeof(aligns) / sizeof(aligns[0]); i++) {
        size_t want = aligns[i] > 4096 ? aligns[i] : 4096;
        static const hal_mem_kind_t kinds[] = { HAL_MEM_KIND_DEVICE, HAL_MEM_KIND_HOST_PINNED };
        for (int k = 0; k < 2; k++) {
            uint8_t *p = NULL;
            EXPECT_OK(hal_mem_alloc(fx.dev[1], kinds[k], N, aligns[i], (void **)&p));
            if (p == NULL)
                continue;
            if ((uintptr_t)p % want != 0)
                fprintf(stderr, "alignment %zu: %p\n", aligns[i], (void *)p);
            CTEST_EXPECT((uintptr_t)p % want == 0);
            (void)check_info(p + N - 1, kinds[k], fx.dev[1], p, N);
            memset(back, 0, N);
            EXPECT_OK(hal_memcpy_async(p, host, N, fx.s[1]));
            EXPECT_OK(hal_memcpy_async(back, p, N, fx.s[1]));
            EXPECT_OK(hal_stream_synchronize(fx.s[1]));
            CTEST_EXPECT(tt_mismatch(back, N, 21) == N);
            EXPECT_OK(hal_mem_free(p));
        }
    }
    /* Everything was given back to the core. */
    hal_mem_stats_t stats = HAL_MEM_STATS_INIT;
    EXPECT_OK(hal_device_get_mem_stats(fx.dev[1], &stats));
    CTEST_EXPECT(stats.device_bytes_free == stats.device_bytes_limit);
    fx_close(&fx);
    return CTEST_PASS;
}
