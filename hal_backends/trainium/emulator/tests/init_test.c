/* SPDX-License-Identifier: Apache-2.0 */
/* nrt_init / nrt_close rules: NRT_UNINITIALIZED before the first nrt_init, NRT_CLOSED after
 * nrt_close, calls documented as callable before nrt_init, double init, re-init, and the
 * argument checks of nrt_init. */
#include <stdlib.h>
#include <string.h>

#include "hal_backends/trainium/emulator/tests/nrt_test_util.h"
#include "tools/ctest/ctest.h"

/* Every runtime call that needs nrt_init returns expected (13 or 14). */
static int all_calls_return(const nrt_api_t *api, NRT_STATUS expected)
{
    nrt_tensor_t *t = NULL;
    char buf[16] = { 0 };
    nrt_vnc_memory_stats_t stats;
    size_t written = 0;
    nrt_tensor_device_allocation_info_t info;
    nrt_tensor_t *bogus = (nrt_tensor_t *)(void *)buf;
    CTEST_CHECK(api->tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "t", &t) == expected);
    CTEST_CHECK(t == NULL);
    CTEST_CHECK(api->tensor_allocate(NRT_TENSOR_PLACEMENT_VIRTUAL, -1, 64, "t", &t) == expected);
    CTEST_CHECK(api->tensor_allocate_empty("e", &t) == expected);
    CTEST_CHECK(api->tensor_read(bogus, buf, 0, 1) == expected);
    CTEST_CHECK(api->tensor_write(bogus, buf, 0, 1) == expected);
    CTEST_CHECK(api->tensor_copy(bogus, 0, bogus, 0, 1) == expected);
    CTEST_CHECK(api->tensor_memset(bogus, 0, 0, 1) == expected);
    CTEST_CHECK(api->tensor_attach_buffer(bogus, buf, sizeof(buf)) == expected);
    CTEST_CHECK(api->tensor_allocate_slice(bogus, 0, 1, "s", &t) == expected);
    CTEST_CHECK(api->tensor_get_device_allocation_info(bogus, &info) == expected);
    CTEST_CHECK(api->tensor_read_batch(NULL, 0, false) == expected);
    CTEST_CHECK(api->tensor_write_batch(NULL, 0, false) == expected);
    CTEST_CHECK(api->get_vnc_memory_stats(0, &stats, sizeof(stats), &written) == expected);
    /* The runtime state is checked before the arguments. */
    CTEST_CHECK(api->tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "t", NULL) == expected);
    CTEST_CHECK(api->tensor_copy(NULL, 0, NULL, 0, 1) == expected);
    CTEST_CHECK(api->tensor_read(NULL, NULL, 0, 1) == expected);
    CTEST_CHECK(api->get_vnc_memory_stats(0, NULL, 0, NULL) == expected);
    CTEST_CHECK(api->tensor_get_size(bogus) == 0);
    CTEST_CHECK(api->tensor_get_va(bogus) == NULL);
    t = bogus;
    api->tensor_free(&t); /* void: must not touch the bogus handle, and clears it */
    CTEST_CHECK(t == NULL);
    return CTEST_PASS;
}

CTEST(nrt_init, calls_before_init_return_uninitialized)
{
    nrt_api_t api;
    CTEST_CHECK(nrt_test_open(&api));
    CTEST_CHECK(all_calls_return(&api, NRT_UNINITIALIZED) == CTEST_PASS);
    api.close(); /* closing an uninitialised runtime is harmless */
    CTEST_CHECK(all_calls_return(&api, NRT_UNINITIALIZED) == CTEST_PASS);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_init, calls_after_close_return_closed)
{
    nrt_api_t api;
    CTEST_CHECK(nrt_test_open(&api));
    setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    nrt_tensor_t *t = NULL;
    CTEST_CHECK(api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "t", &t) == NRT_SUCCESS);
    api.close();
    /* The tensor died with the runtime; its handle is now refused with NRT_CLOSED. */
    char buf[8];
    CTEST_CHECK(api.tensor_read(t, buf, 0, sizeof(buf)) == NRT_CLOSED);
    CTEST_CHECK(all_calls_return(&api, NRT_CLOSED) == CTEST_PASS);
    api.close(); /* a second close is harmless */
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_init, counts_version_and_instance_work_before_init)
{
    nrt_api_t api;
    CTEST_CHECK(nrt_test_open(&api));
    uint32_t total = 0, total_nc = 0, visible = 0, visible_nc = 0;
    CTEST_CHECK(api.get_total_vnc_count(&total) == NRT_SUCCESS);
    CTEST_CHECK(api.get_total_nc_count(&total_nc) == NRT_SUCCESS);
    CTEST_CHECK(api.get_visible_vnc_count(&visible) == NRT_SUCCESS);
    CTEST_CHECK(api.get_visible_nc_count(&visible_nc) == NRT_SUCCESS);
    CTEST_CHECK(total > 0 && total == total_nc && visible == total && visible_nc == visible);
    CTEST_CHECK(api.get_total_vnc_count(NULL) == NRT_INVALID);
    CTEST_CHECK(api.get_visible_vnc_count(NULL) == NRT_INVALID);
    nrt_instance_info_t info;
    CTEST_CHECK(api.get_instance_info(&info, sizeof(info)) == NRT_SUCCESS);
    nrt_version_t v;
    CTEST_CHECK(api.get_version(&v, sizeof(v)) == NRT_SUCCESS);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_init, double_init_fails_and_keeps_the_runtime)
{
    nrt_api_t api;
    CTEST_CHECK(nrt_test_open(&api));
    setenv("NEURON_RT_VISIBLE_CORES", "0-1", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    nrt_tensor_t *t = NULL;
    CTEST_CHECK(api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 1, 4096, "t", &t) == NRT_SUCCESS);
    CTEST_CHECK(nrt_test_init(&api) == NRT_FAILURE);
    uint32_t visible = 0;
    CTEST_CHECK(api.get_visible_vnc_count(&visible) == NRT_SUCCESS && visible == 2);
    CTEST_CHECK(nrt_test_used(&api, 1) == 4096); /* the tensor survived */
    api.tensor_free(&t);
    CTEST_CHECK(t == NULL);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_init, reinit_after_close_starts_clean)
{
    nrt_api_t api;
    CTEST_CHECK(nrt_test_open(&api));
    setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    nrt_tensor_t *t = NULL;
    CTEST_CHECK(api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 10000, "t", &t) == NRT_SUCCESS);
    CTEST_CHECK(nrt_test_used(&api, 0) == 12288);
    api.close();
    setenv("NEURON_RT_VISIBLE_CORES", "0-2", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    uint32_t visible = 0;
    CTEST_CHECK(api.get_visible_vnc_count(&visible) == NRT_SUCCESS && visible == 3);
    CTEST_CHECK(nrt_test_used(&api, 0) == 0);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_init, framework_and_version_arguments)
{
    nrt_api_t api;
    CTEST_CHECK(nrt_test_open(&api));
    setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
    if (nrt_test_is_emulator(&api)) {
        CTEST_CHECK(api.init(NRT_FRAMEWORK_TYPE_NO_FW, NULL, "") == NRT_INVALID);
        CTEST_CHECK(api.init(NRT_FRAMEWORK_TYPE_NO_FW, "", NULL) == NRT_INVALID);
        CTEST_CHECK(api.init((nrt_framework_type_t)42, "", "") == NRT_INVALID);
        CTEST_CHECK(api.init(NRT_FRAMEWORK_TYPE_INVALID, "", "") == NRT_INVALID);
        nrt_tensor_t *t = NULL;
        CTEST_CHECK(api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 1, "t", &t) ==
                    NRT_UNINITIALIZED); /* the failed inits changed nothing */
    }
    CTEST_CHECK(api.init(NRT_FRAMEWORK_TYPE_PYTORCH, "2.13.0", "0.1") == NRT_SUCCESS);
    api.close();
    CTEST_CHECK(api.init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") == NRT_SUCCESS);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_init, malformed_environment_fails_init_loudly)
{
    static const struct {
        const char *var, *value;
        NRT_STATUS expected;
        const char *says;
    } cases[] = {
        { "NEURON_EMU_INSTANCE", "trn9.huge", NRT_INVALID, "NEURON_EMU_INSTANCE" },
        { "NEURON_EMU_HBM_BYTES", "lots", NRT_INVALID, "NEURON_EMU_HBM_BYTES" },
        { "NEURON_EMU_HBM_BYTES", "0", NRT_INVALID, "NEURON_EMU_HBM_BYTES" },
        { "NEURON_EMU_DMA_GBPS", "fast", NRT_INVALID, "NEURON_EMU_DMA_GBPS" },
        { "NEURON_EMU_DMA_GBPS", "-3", NRT_INVALID, "NEURON_EMU_DMA_GBPS" },
        { "NEURON_EMU_FAULTS", "alloc_fail_after", NRT_INVALID, "fault spec" },
        { "NEURON_LOGICAL_NC_CONFIG", "2", NRT_INVALID, "Trn2" }, /* default trn1.32xlarge */
        { "NEURON_RT_VISIBLE_CORES", "0-x", NRT_INVALID, "NEURON_RT_VISIBLE_CORES" },
        { "NEURON_RT_NUM_CORES", "two", NRT_INVALID, "NEURON_RT_NUM_CORES" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        nrt_api_t api;
        CTEST_CHECK(nrt_test_open(&api));
        if (!nrt_test_is_emulator(&api) && strncmp(cases[i].var, "NEURON_EMU", 10) == 0) {
            nrt_test_close(&api);
            continue;
        }
        setenv(cases[i].var, cases[i].value, 1);
        nrt_test_stderr_begin();
        NRT_STATUS status = nrt_test_init(&api);
        const char *err = nrt_test_stderr_end();
        if (status != cases[i].expected)
            fprintf(stderr, "%s=%s: nrt_init returned %d\n", cases[i].var, cases[i].value,
                    (int)status);
        CTEST_CHECK(status == cases[i].expected);
        if (nrt_test_is_emulator(&api))
            CTEST_CHECK(strstr(err, cases[i].says) != NULL);
        nrt_tensor_t *t = NULL;
        CTEST_CHECK(api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 1, "t", &t) ==
                    NRT_UNINITIALIZED);
        nrt_test_close(&api);
    }
    return CTEST_PASS;
}
