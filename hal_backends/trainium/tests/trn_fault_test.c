/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: hardware errors. NRT_HW_ERROR from the runtime (injected with the emulator's
 * NEURON_EMU_FAULTS=hw_error_after=N) is HAL_ERROR_DEVICE_LOST, and it is sticky: the stream
 * that saw it, every other stream of the core, new streams, allocations and device
 * synchronisation keep reporting it until the backend is closed. */
#include <stdlib.h>

#include "hal_backends/trainium/tests/trn_test_util.h"

CTEST(TrnFault, HardwareErrorIsStickyDeviceLoss)
{
    TT_REQUIRE_EMULATOR();
    tt_env_reset();
    tt_setenv("NEURON_RT_VISIBLE_CORES", "0-1");
    tt_setenv("NEURON_EMU_FAULTS", "hw_error_after=2");
    hal_backend_t b = NULL;
    EXPECT_OK(tt_open(&b));
    if (b == NULL)
        return CTEST_FAIL;
    hal_device_t dev = tt_device(b, 0), dev1 = tt_device(b, 1);
    hal_stream_t s = NULL, sibling = NULL, late = NULL;
    hal_event_t e = NULL;
    uint8_t *d = NULL, *d1 = NULL, host[256] = { 0 };
    EXPECT_OK(hal_stream_create(dev, 0, &s));
    EXPECT_OK(hal_stream_create(dev, -1, &sibling));
    EXPECT_OK(hal_event_create(dev, 0, &e));
    EXPECT_OK(hal_mem_alloc(dev, HAL_MEM_KIND_DEVICE, 4096, 0, (void **)&d));
    EXPECT_OK(hal_mem_alloc(dev1, HAL_MEM_KIND_DEVICE, 4096, 0, (void **)&d1));
    tt_gate_t gate;
    tt_gate_init(&gate);
    if (!ctest_failures_so_far()) {
        EXPECT_OK(hal_memcpy_async(d, host, sizeof(host), s)); /* transfer 1 */
        EXPECT_OK(hal_memset_async(d, 1, 64, s));              /* transfer 2 */
        EXPECT_OK(hal_memcpy_async(host, d, sizeof(host), s)); /* transfer 3: NRT_HW_ERROR */
        EXPECT_OK(hal_event_record(e, s));
        EXPECT_STATUS(hal_stream_synchronize(s), HAL_ERROR_DEVICE_LOST);
        EXPECT_MESSAGE("nrt_tensor_read(tensor of NeuronCore 0, offset 0, 256 bytes) returned "
                       "NRT_HW_ERROR (6)");
        EXPECT_STATUS(hal_event_synchronize(e), HAL_ERROR_DEVICE_LOST);
        /* Sticky on the stream... */
        EXPECT_STATUS(hal_stream_query(s), HAL_ERROR_DEVICE_LOST);
        EXPECT_STATUS(hal_memcpy_async(d, host, 16, s), HAL_ERROR_DEVICE_LOST);
        EXPECT_STATUS(hal_memset_async(d, 0, 16, s), HAL_ERROR_DEVICE_LOST);
        /* ...on the core's other streams, old and new... */
        EXPECT_STATUS(hal_stream_query(sibling), HAL_ERROR_DEVICE_LOST);
        EXPECT_MESSAGE("NeuronCore 0 is lost");
        EXPECT_STATUS(hal_memcpy_async(host, d, 16, sibling), HAL_ERROR_DEVICE_LOST);
        EXPECT_OK(hal_stream_create(dev, 0, &late));
        EXPECT_STATUS(hal_stream_synchronize(late), HAL_ERROR_DEVICE_LOST);
        hal_stream_t def = NULL;
        EXPECT_OK(hal_device_get_default_stream(dev, &def));
        EXPECT_STATUS(hal_stream_query(def), HAL_ERROR_DEVICE_LOST);
        /* ...for allocations and device synchronisation, and for copies that involve the core's
         * memory from a stream of another core. */
        void *p = NULL;
        EXPECT_STATUS(hal_mem_alloc(dev, HAL_MEM_KIND_DEVICE, 4096, 0, &p), HAL_ERROR_DEVICE_LOST);
        EXPECT_MESSAGE("NeuronCore 0 is lost: nrt_tensor_read(");
        CTEST_EXPECT(p == NULL);
        EXPECT_STATUS(hal_device_synchronize(dev), HAL_ERROR_DEVICE_LOST);
        hal_stream_t s1 = NULL;
        EXPECT_OK(hal_device_get_default_stream(dev1, &s1));
        EXPECT_STATUS(hal_memcpy_async(d1, d, 64, s1), HAL_ERROR_DEVICE_LOST);
        /* Callbacks still run and are told; host memory still works. */
        EXPECT_OK(hal_stream_add_callback(sibling, tt_gate_cb, &gate));
        tt_gate_open(&gate);
        EXPECT_STATUS(hal_stream_synchronize(sibling), HAL_ERROR_DEVICE_LOST);
        CTEST_EXPECT(atomic_load(&gate.status) == HAL_ERROR_DEVICE_LOST);
        void *pin = NULL;
        EXPECT_OK(hal_mem_alloc(dev, HAL_MEM_KIND_HOST_PINNED, 64, 0, &pin));
        /* (freed, reporting the loss that hal_mem_free waited through) */
        EXPECT_STATUS(hal_mem_free(pin), HAL_ERROR_DEVICE_LOST);
        /* The emulator fails every later transfer: core 1 is lost as soon as it tries one. */
        EXPECT_OK(hal_memset_async(d1, 0, 64, s1));
        EXPECT_STATUS(hal_stream_synchronize(s1), HAL_ERROR_DEVICE_LOST);
        EXPECT_MESSAGE("NRT_HW_ERROR (6)");
        /* Freeing still works (it reports the loss it waited through). */
        EXPECT_STATUS(hal_mem_free(d), HAL_ERROR_DEVICE_LOST);
        d = NULL;
    }
    hal_mem_free(d);
    hal_mem_free(d1);
    hal_event_destroy(e);
    EXPECT_STATUS(hal_stream_destroy(s), HAL_ERROR_DEVICE_LOST);
    EXPECT_STATUS(hal_stream_destroy(sibling), HAL_ERROR_DEVICE_LOST);
    if (late != NULL)
        EXPECT_STATUS(hal_stream_destroy(late), HAL_ERROR_DEVICE_LOST);
    tt_gate_destroy(&gate);
    EXPECT_OK(hal_backend_close(b));

    /* Closing the backend closed the runtime; a new one starts healthy. */
    tt_env_reset();
    tt_setenv("NEURON_RT_VISIBLE_CORES", "0");
    EXPECT_OK(tt_open(&b));
    if (b != NULL) {
        dev = tt_device(b, 0);
        EXPECT_OK(hal_device_get_default_stream(dev, &s));
        EXPECT_OK(hal_mem_alloc(dev, HAL_MEM_KIND_DEVICE, 4096, 0, (void **)&d));
        EXPECT_OK(hal_memcpy_async(d, host, sizeof(host), s));
        EXPECT_OK(hal_memcpy_async(host, d, sizeof(host), s));
        EXPECT_OK(hal_stream_synchronize(s));
        EXPECT_OK(hal_mem_free(d));
        EXPECT_OK(hal_backend_close(b));
    }
    return CTEST_PASS;
}

/* A hardware error reported by an allocation loses the core too. The emulator's device loss is
 * process-wide: after core 0 failed a transfer, core 1's next allocation gets NRT_HW_ERROR. */
CTEST(TrnFault, HardwareErrorDuringAllocation)
{
    TT_REQUIRE_EMULATOR();
    tt_env_reset();
    tt_setenv("NEURON_RT_VISIBLE_CORES", "4-5");
    tt_setenv("NEURON_EMU_FAULTS", "hw_error_after=0");
    hal_backend_t b = NULL;
    EXPECT_OK(tt_open(&b));
    if (b == NULL)
        return CTEST_FAIL;
    hal_device_t dev = tt_device(b, 0), dev1 = tt_device(b, 1);
    hal_stream_t s = NULL, s1 = NULL;
    uint8_t *d = NULL, host[16] = { 0 };
    EXPECT_OK(hal_device_get_default_stream(dev, &s));
    EXPECT_OK(hal_device_get_default_stream(dev1, &s1));
    EXPECT_OK(hal_mem_alloc(dev, HAL_MEM_KIND_DEVICE, 4096, 0, (void **)&d));
    EXPECT_OK(hal_memcpy_async(d, host, sizeof(host), s)); /* the first transfer fails */
    EXPECT_STATUS(hal_stream_synchronize(s), HAL_ERROR_DEVICE_LOST);
    EXPECT_OK(hal_stream_query(s1)); /* core 1 has not noticed yet */
    void *p = NULL;
    EXPECT_STATUS(hal_mem_alloc(dev1, HAL_MEM_KIND_DEVICE, 64, 0, &p), HAL_ERROR_DEVICE_LOST);
    EXPECT_MESSAGE("nrt_tensor_allocate(DEVICE, vnc 1, 64) returned NRT_HW_ERROR (6)");
    EXPECT_STATUS(hal_stream_query(s1), HAL_ERROR_DEVICE_LOST);
    EXPECT_MESSAGE("NeuronCore 1 is lost");
    EXPECT_STATUS(hal_mem_free(d), HAL_ERROR_DEVICE_LOST);
    EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}
