/* SPDX-License-Identifier: Apache-2.0 */
/* Emulator-only features: deterministic fault injection (NEURON_EMU_FAULTS and
 * nrt_emu_set_fault) and the DMA bandwidth model (NEURON_EMU_DMA_GBPS). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/trainium/emulator/tests/nrt_test_util.h"
#include "tools/ctest/ctest.h"

static nrt_api_t api;

#define DEV NRT_TENSOR_PLACEMENT_DEVICE

/* Opens the emulator with one core and the given fault spec; false means "skip". */
static bool open_faulty(const char *spec)
{
    if (!nrt_test_open(&api))
        return false;
    if (!nrt_test_is_emulator(&api))
        return false;
    setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
    if (spec != NULL)
        setenv("NEURON_EMU_FAULTS", spec, 1);
    return nrt_test_init(&api) == NRT_SUCCESS;
}

#define OPEN_FAULTY(spec)                                             \
    do {                                                              \
        if (!open_faulty(spec)) {                                     \
            bool emulator = nrt_test_is_emulator(&api);               \
            nrt_test_close(&api);                                     \
            if (!emulator)                                            \
                CTEST_SKIP("fault injection is an emulator feature"); \
            fprintf(stderr, "nrt_init with faults failed\n");         \
            CTEST_CHECK(false);                                       \
        }                                                             \
    } while (0)

CTEST(nrt_faults, alloc_fail_after)
{
    OPEN_FAULTY("alloc_fail_after=2");
    nrt_tensor_t *t[4] = { 0 };
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 64, "0", &t[0]) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 64, "1", &t[1]) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 64, "2", &t[2]) == NRT_RESOURCE);
    CTEST_CHECK(api.tensor_allocate(NRT_TENSOR_PLACEMENT_VIRTUAL, -1, 64, "3", &t[3]) ==
                NRT_RESOURCE); /* sticky without ":M" */
    CTEST_CHECK(t[2] == NULL && t[3] == NULL);
    CTEST_CHECK(nrt_test_used(&api, 0) == 8192);
    /* Invalid calls are refused before the fault counter and keep their own status. */
    CTEST_CHECK(api.tensor_allocate(DEV, 5, 64, "bad", &t[2]) == NRT_INVALID);
    api.tensor_free(&t[0]);
    api.tensor_free(&t[1]);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_faults, transfer_faults_with_counts)
{
    OPEN_FAULTY("read_fail_after=1:2,write_fail_after=0:1,copy_fail_after=1,memset_fail_after=0");
    nrt_tensor_t *a = NULL, *b = NULL;
    unsigned char buf[64], out[64];
    memset(buf, 0x33, sizeof(buf));
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 64, "a", &a) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 64, "b", &b) == NRT_SUCCESS);
    /* write: the first call fails (and writes nothing), then all succeed. */
    CTEST_CHECK(api.tensor_write(a, buf, 0, 64) == NRT_FAILURE);
    CTEST_CHECK(api.tensor_write(a, buf, 0, 64) == NRT_SUCCESS);
    /* read: one success, two failures, then successes. */
    CTEST_CHECK(api.tensor_read(a, out, 0, 64) == NRT_SUCCESS);
    memset(out, 0, sizeof(out));
    CTEST_CHECK(api.tensor_read(a, out, 0, 64) == NRT_FAILURE);
    CTEST_CHECK(api.tensor_read(a, out, 0, 64) == NRT_FAILURE);
    CTEST_CHECK(out[0] == 0); /* a failed read delivers nothing */
    CTEST_CHECK(api.tensor_read(a, out, 0, 64) == NRT_SUCCESS && out[0] == 0x33);
    /* copy: one success, then every call fails. */
    CTEST_CHECK(api.tensor_copy(a, 0, b, 0, 64) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_copy(a, 0, b, 0, 64) == NRT_FAILURE);
    CTEST_CHECK(api.tensor_copy(a, 0, b, 0, 64) == NRT_FAILURE);
    CTEST_CHECK(api.tensor_memset(a, 0, 0, 64) == NRT_FAILURE);
    /* Out-of-range calls are not counted and still say NRT_INVALID. */
    CTEST_CHECK(api.tensor_read(a, out, 60, 10) == NRT_INVALID);
    api.tensor_free(&a);
    api.tensor_free(&b);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_faults, hardware_error_latches_until_close)
{
    OPEN_FAULTY("hw_error_after=3");
    nrt_tensor_t *a = NULL, *b = NULL;
    unsigned char buf[16] = { 0 };
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 16, "a", &a) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_write(a, buf, 0, 16) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(a, buf, 0, 16) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_memset(a, 0, 1, 16) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(a, buf, 0, 16) == NRT_HW_ERROR);
    CTEST_CHECK(api.tensor_write(a, buf, 0, 16) == NRT_HW_ERROR);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 16, "b", &b) == NRT_HW_ERROR);
    CTEST_CHECK(b == NULL);
    api.tensor_free(&a); /* freeing still works */
    api.close();
    /* A new runtime works again; the plan (from the environment) restarts its count. */
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 16, "a", &a) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(a, buf, 0, 16) == NRT_SUCCESS);
    api.tensor_free(&a);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_faults, programmatic_hook)
{
    OPEN_FAULTY(NULL);
    nrt_tensor_t *a = NULL;
    unsigned char buf[16] = { 0 };
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 16, "a", &a) == NRT_SUCCESS);
    CTEST_CHECK(api.emu_set_fault("write_fail_after=1:1") == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_write(a, buf, 0, 16) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_write(a, buf, 0, 16) == NRT_FAILURE);
    CTEST_CHECK(api.tensor_write(a, buf, 0, 16) == NRT_SUCCESS);
    /* A malformed spec is refused and leaves the current plan alone. */
    CTEST_CHECK(api.emu_set_fault("write_fail_after=1:0") == NRT_INVALID);
    CTEST_CHECK(api.emu_set_fault("hw_error_after=0") == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(a, buf, 0, 16) == NRT_HW_ERROR);
    /* Clearing the plan also clears the latched error. */
    CTEST_CHECK(api.emu_set_fault("") == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(a, buf, 0, 16) == NRT_SUCCESS);
    CTEST_CHECK(api.emu_set_fault("alloc_fail_after=0:1") == NRT_SUCCESS);
    nrt_tensor_t *b = NULL;
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 16, "b", &b) == NRT_RESOURCE);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 16, "b", &b) == NRT_SUCCESS);
    CTEST_CHECK(api.emu_set_fault(NULL) == NRT_SUCCESS);
    api.tensor_free(&a);
    api.tensor_free(&b);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_faults, batches_count_each_entry)
{
    OPEN_FAULTY("read_fail_after=1");
    nrt_tensor_t *a = NULL;
    unsigned char x[8], y[8];
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 64, "a", &a) == NRT_SUCCESS);
    nrt_tensor_batch_op_t ops[2] = { { 0, 8, x }, { 8, 8, y } };
    nrt_tensor_batch_t batch[1] = { { a, ops, 2 } };
    CTEST_CHECK(api.tensor_read_batch(batch, 1, false) == NRT_FAILURE);
    api.tensor_free(&a);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_faults, malformed_specs_are_rejected_loudly)
{
    static const char *const bad[] = {
        "alloc_fail_after",     /* no value */
        "alloc_fail_after=",    /* empty value */
        "alloc_fail_after=x",   /* not a number */
        "alloc_fail_after=-1",  /* negative */
        "alloc_fail_after=1:0", /* zero count */
        "alloc_fail_after=1:",  /* missing count */
        "alloc_fail_after=1,",  /* empty rule */
        ",alloc_fail_after=1",  /* empty rule */
        "alloc_fail_after=1 ",  /* trailing space */
        "allocs_fail_after=1",  /* unknown key */
        "hw_error_after=1:2",   /* hw errors latch */
        "read_fail_after=1,read_fail_after=2",
        "read_fail_after=99999999999999999999999", /* overflow */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CTEST_CHECK(nrt_test_open(&api));
        if (!nrt_test_is_emulator(&api)) {
            nrt_test_close(&api);
            CTEST_SKIP("fault injection is an emulator feature");
        }
        setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
        setenv("NEURON_EMU_FAULTS", bad[i], 1);
        nrt_test_stderr_begin();
        NRT_STATUS status = nrt_test_init(&api);
        const char *err = nrt_test_stderr_end();
        if (status != NRT_INVALID)
            fprintf(stderr, "NEURON_EMU_FAULTS=\"%s\" was accepted\n", bad[i]);
        CTEST_CHECK(status == NRT_INVALID);
        CTEST_CHECK(strstr(err, "fault spec") != NULL);
        nrt_test_stderr_begin();
        status = api.emu_set_fault(bad[i]);
        err = nrt_test_stderr_end();
        CTEST_CHECK(status == NRT_INVALID && strstr(err, "nrt_emu_set_fault") != NULL);
        nrt_test_close(&api);
    }
    /* Every key, at once, is accepted. */
    CTEST_CHECK(nrt_test_open(&api));
    setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
    setenv("NEURON_EMU_FAULTS",
           "alloc_fail_after=5,read_fail_after=0:3,write_fail_after=7,"
           "copy_fail_after=2:1,memset_fail_after=4,hw_error_after=100",
           1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    nrt_test_close(&api);
    return CTEST_PASS;
}

static nrt_emu_dma_stats_t dma_stats(void)
{
    nrt_emu_dma_stats_t stats;
    memset(&stats, 0xff, sizeof(stats));
    if (api.emu_get_dma_stats(&stats, sizeof(stats)) != NRT_SUCCESS)
        memset(&stats, 0xff, sizeof(stats));
    return stats;
}

/* The bandwidth model is checked through its counters, never with a clock: every transfer
 * touching device memory gets a slot of bytes / bandwidth on the device's timeline and its call
 * waits for the slot's end; host-only transfers and an unlimited bandwidth get no slot. */
CTEST(nrt_faults, dma_bandwidth_model)
{
    CTEST_CHECK(nrt_test_open(&api));
    if (!nrt_test_is_emulator(&api)) {
        nrt_test_close(&api);
        CTEST_SKIP("NEURON_EMU_DMA_GBPS is an emulator setting");
    }
    CTEST_CHECK(api.emu_get_dma_stats != NULL);
    setenv("NEURON_RT_VISIBLE_CORES", "0-2", 1);
    setenv("NEURON_EMU_DMA_GBPS", "0.125", 1); /* 0.125 bytes/ns: 4 MB take 32 ms exactly */
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    const size_t size = 4000000;
    const uint64_t slot_ns = 32000000;
    nrt_emu_dma_stats_t stats = dma_stats();
    CTEST_CHECK(stats.transfers == 0 && stats.bytes == 0 && stats.model_ns == 0 &&
                stats.waits == 0);
    nrt_tensor_t *d = NULL, *d2 = NULL, *h = NULL, *h2 = NULL;
    CTEST_CHECK(api.tensor_allocate(DEV, 0, size, "d", &d) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, size, "d2", &d2) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(NRT_TENSOR_PLACEMENT_VIRTUAL, -1, size, "h", &h) ==
                NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(NRT_TENSOR_PLACEMENT_VIRTUAL, -1, size, "h2", &h2) ==
                NRT_SUCCESS);
    unsigned char *buf = calloc(1, size);
    CTEST_CHECK(buf != NULL);
    CTEST_CHECK(api.tensor_write(d, buf, 0, size) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(d, buf, 0, size) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_copy(d, 0, d2, 0, size) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_memset(d2, 0, 1, size) == NRT_SUCCESS);
    /* Synchronous: each of the four calls had a slot and returned after it ended. */
    stats = dma_stats();
    CTEST_CHECK(stats.transfers == 4 && stats.waits == 4);
    CTEST_CHECK(stats.bytes == 4 * (uint64_t)size && stats.model_ns == 4 * slot_ns);
    /* Host-only transfers are not throttled. */
    for (int i = 0; i < 8; i++)
        CTEST_CHECK(api.tensor_copy(h, 0, h2, 0, size) == NRT_SUCCESS);
    stats = dma_stats();
    CTEST_CHECK(stats.transfers == 4 && stats.waits == 4 && stats.bytes == 4 * (uint64_t)size);
    /* A host tensor copied to device memory is. */
    CTEST_CHECK(api.tensor_copy(h, 0, d, 0, size) == NRT_SUCCESS);
    stats = dma_stats();
    CTEST_CHECK(stats.transfers == 5 && stats.waits == 5 && stats.model_ns == 5 * slot_ns);
    /* Bad arguments: nothing written. */
    nrt_emu_dma_stats_t untouched;
    memset(&untouched, 0x5a, sizeof(untouched));
    CTEST_CHECK(api.emu_get_dma_stats(NULL, sizeof(untouched)) == NRT_INVALID);
    CTEST_CHECK(api.emu_get_dma_stats(&untouched, 7) == NRT_INVALID);
    CTEST_CHECK(untouched.transfers == UINT64_C(0x5a5a5a5a5a5a5a5a));
    /* An older caller's smaller struct gets only the fields it knows. */
    CTEST_CHECK(api.emu_get_dma_stats(&untouched, sizeof(uint64_t)) == NRT_SUCCESS);
    CTEST_CHECK(untouched.transfers == 5 && untouched.bytes == UINT64_C(0x5a5a5a5a5a5a5a5a));
    free(buf);
    api.tensor_free(&d);
    api.tensor_free(&d2);
    api.tensor_free(&h);
    api.tensor_free(&h2);
    api.close();
    /* Unlimited (the default): no slots. The counters restart at nrt_init. */
    unsetenv("NEURON_EMU_DMA_GBPS");
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 4096, "d", &d) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_memset(d, 0, 1, 4096) == NRT_SUCCESS);
    stats = dma_stats();
    CTEST_CHECK(stats.transfers == 0 && stats.bytes == 0 && stats.model_ns == 0 &&
                stats.waits == 0);
    api.tensor_free(&d);
    api.close();
    /* "instance" selects the documented device bandwidth and is accepted. */
    setenv("NEURON_EMU_DMA_GBPS", "instance", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    nrt_test_close(&api);
    return CTEST_PASS;
}
