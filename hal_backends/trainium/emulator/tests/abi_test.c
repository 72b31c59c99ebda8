/* SPDX-License-Identifier: Apache-2.0 */
/* The documented ABI: numeric values, struct layout, exported symbols, version and status
 * names (libnrt 2.30.50 / Neuron SDK 2.28 headers). */
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

#include "hal_backends/trainium/emulator/tests/nrt_test_util.h"
#include "tools/ctest/ctest.h"

CTEST(nrt_abi, status_codes_have_documented_values)
{
    CTEST_CHECK(NRT_SUCCESS == 0);
    CTEST_CHECK(NRT_FAILURE == 1);
    CTEST_CHECK(NRT_INVALID == 2);
    CTEST_CHECK(NRT_INVALID_HANDLE == 3);
    CTEST_CHECK(NRT_RESOURCE == 4);
    CTEST_CHECK(NRT_TIMEOUT == 5);
    CTEST_CHECK(NRT_HW_ERROR == 6);
    CTEST_CHECK(NRT_QUEUE_FULL == 7);
    CTEST_CHECK(NRT_LOAD_NOT_ENOUGH_NC == 9);
    CTEST_CHECK(NRT_UNSUPPORTED_NEFF_VERSION == 10);
    CTEST_CHECK(NRT_FAIL_HOST_MEM_ALLOC == 11);
    CTEST_CHECK(NRT_UNINITIALIZED == 13);
    CTEST_CHECK(NRT_CLOSED == 14);
    CTEST_CHECK(NRT_QUEUE_EMPTY == 15);
    CTEST_CHECK(NRT_EXEC_UNIT_UNRECOVERABLE == 101);
    CTEST_CHECK(NRT_EXEC_BAD_INPUT == 1002);
    CTEST_CHECK(NRT_EXEC_COMPLETED_WITH_NUM_ERR == 1003);
    CTEST_CHECK(NRT_EXEC_COMPLETED_WITH_ERR == 1004);
    CTEST_CHECK(NRT_EXEC_NC_BUSY == 1005);
    CTEST_CHECK(NRT_EXEC_OOB == 1006);
    CTEST_CHECK(NRT_COLL_PENDING == 1100);
    CTEST_CHECK(NRT_EXEC_HW_ERR_COLLECTIVES == 1200);
    CTEST_CHECK(NRT_EXEC_HW_ERR_HBM_UE == 1201);
    CTEST_CHECK(NRT_EXEC_HW_ERR_NC_UE == 1202);
    CTEST_CHECK(NRT_EXEC_HW_ERR_DMA_ABORT == 1203);
    CTEST_CHECK(NRT_EXEC_SW_NQ_OVERFLOW == 1204);
    CTEST_CHECK(NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE == 1205);
    CTEST_CHECK(NRT_NETWORK_PROXY_FAILURE == 1206);
    return CTEST_PASS;
}

CTEST(nrt_abi, enums_have_documented_values)
{
    CTEST_CHECK(NRT_TENSOR_PLACEMENT_DEVICE == 0);
    CTEST_CHECK(NRT_TENSOR_PLACEMENT_HOST == 1);
    CTEST_CHECK(NRT_TENSOR_PLACEMENT_VIRTUAL == 2);
    CTEST_CHECK(NRT_FRAMEWORK_TYPE_INVALID == 0);
    CTEST_CHECK(NRT_FRAMEWORK_TYPE_NO_FW == 1);
    CTEST_CHECK(NRT_FRAMEWORK_TYPE_TENSORFLOW == 2);
    CTEST_CHECK(NRT_FRAMEWORK_TYPE_PYTORCH == 3);
    CTEST_CHECK(NRT_FRAMEWORK_TYPE_MXNET == 4);
    CTEST_CHECK(NRT_FRAMEWORK_TYPE_PRECHECK == 5);
    CTEST_CHECK(NRT_INSTANCE_TRN1 == 2 && NRT_INSTANCE_TRN1N == 3 && NRT_INSTANCE_INF2 == 4);
    CTEST_CHECK(NRT_INSTANCE_TRN2 == 5 && NRT_INSTANCE_TRN2U == 9 && NRT_INSTANCE_TRN3 == 14);
    CTEST_CHECK(NRT_INSTANCE_TRN3PDS98 == 15);
    CTEST_CHECK(NRT_INSTANCE_SIZE_1XL == 0 && NRT_INSTANCE_SIZE_2XL == 1);
    CTEST_CHECK(NRT_INSTANCE_SIZE_8XL == 4 && NRT_INSTANCE_SIZE_24XL == 5);
    CTEST_CHECK(NRT_INSTANCE_SIZE_32XL == 6 && NRT_INSTANCE_SIZE_48XL == 7);
    CTEST_CHECK(NRT_INSTANCE_SIZE_3XL == 8 && NRT_INSTANCE_SIZE_UNKNOWN == 9);
    CTEST_CHECK(NRT_DTYPE_UINT64 == 0x1 && NRT_DTYPE_BFLOAT16 == 0x6);
    CTEST_CHECK(NRT_DTYPE_FLOAT32 == 0xA && NRT_DTYPE_FP8_E5 == 0xF);
    CTEST_CHECK(NRT_OP_INVALID == 0xF && NRT_CC_REDUCESCATTER == 2);
    return CTEST_PASS;
}

CTEST(nrt_abi, structs_have_documented_layout)
{
    CTEST_CHECK(sizeof(NRT_STATUS) == 4);
    CTEST_CHECK(sizeof(nrt_instance_info_t) == 32);
    CTEST_CHECK(offsetof(nrt_instance_info_t, arch_name) == 8);
    CTEST_CHECK(offsetof(nrt_instance_info_t, device_revision) == 24);
    CTEST_CHECK(sizeof(nrt_version_t) == 224);
    CTEST_CHECK(offsetof(nrt_version_t, rt_detail) == 32);
    CTEST_CHECK(offsetof(nrt_version_t, git_hash) == 160);
    CTEST_CHECK(sizeof(nrt_vnc_memory_stats_t) == 16);
    CTEST_CHECK(offsetof(nrt_vnc_memory_stats_t, bytes_limit) == 8);
    CTEST_CHECK(sizeof(nrt_tensor_device_allocation_info_t) == 24);
    CTEST_CHECK(offsetof(nrt_tensor_device_allocation_info_t, hbm_index) == 16);
    CTEST_CHECK(sizeof(nrt_tensor_batch_op_t) == 24);
    CTEST_CHECK(sizeof(nrt_tensor_batch_t) == 24);
    CTEST_CHECK(offsetof(nrt_tensor_batch_t, num_ops) == 16);
    CTEST_CHECK(sizeof(nrt_tensor_info_t) == 296);
    CTEST_CHECK(offsetof(nrt_tensor_info_t, size) == 264);
    CTEST_CHECK(offsetof(nrt_tensor_info_t, dtype) == 272);
    CTEST_CHECK(offsetof(nrt_tensor_info_t, shape) == 280);
    CTEST_CHECK(offsetof(nrt_tensor_info_t, ndim) == 288);
    CTEST_CHECK(offsetof(nrt_tensor_info_array_t, tensor_array) == 8);
    return CTEST_PASS;
}

CTEST(nrt_abi, exports_the_subset_and_hides_internals)
{
    nrt_api_t api;
    CTEST_CHECK(nrt_test_open(&api)); /* resolves every libnrt symbol of the subset */
    if (nrt_test_is_emulator(&api)) {
        CTEST_CHECK(dlsym(api.handle, "emu_log") == NULL);
        CTEST_CHECK(dlsym(api.handle, "emu_rt") == NULL);
        CTEST_CHECK(dlsym(api.handle, "nrt_load") != NULL);           /* the test container only */
        CTEST_CHECK(dlsym(api.handle, "nrt_execute_repeat") == NULL); /* not emulated */
    }
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_abi, version_is_callable_before_init_and_names_the_emulator)
{
    nrt_api_t api;
    CTEST_CHECK(nrt_test_open(&api));
    nrt_version_t v;
    memset(&v, 0xff, sizeof(v));
    CTEST_CHECK(api.get_version(&v, sizeof(v)) == NRT_SUCCESS);
    CTEST_CHECK(v.rt_major == 2);
    CTEST_CHECK(v.rt_detail[sizeof(v.rt_detail) - 1] == '\0');
    if (nrt_test_is_emulator(&api)) {
        CTEST_CHECK(v.rt_minor == 30 && v.rt_patch == 50 && v.rt_maintenance == 0);
        CTEST_CHECK(strstr(v.rt_detail, "EMULATOR") != NULL);
        CTEST_CHECK(strcmp(v.git_hash, "emulator") == 0);
        /* An older, smaller struct: only its bytes are written. */
        unsigned char small[40];
        memset(small, 0xab, sizeof(small));
        CTEST_CHECK(api.get_version((nrt_version_t *)(void *)small, 16) == NRT_SUCCESS);
        CTEST_CHECK(small[16] == 0xab && small[0] == 2);
        CTEST_CHECK(api.get_version(NULL, sizeof(v)) == NRT_INVALID);
        CTEST_CHECK(api.get_version(&v, 0) == NRT_INVALID);
    }
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_abi, status_names)
{
    nrt_api_t api;
    CTEST_CHECK(nrt_test_open(&api));
    CTEST_CHECK(strcmp(api.get_status_as_str(NRT_SUCCESS), "NRT_SUCCESS") == 0);
    CTEST_CHECK(strcmp(api.get_status_as_str(NRT_UNINITIALIZED), "NRT_UNINITIALIZED") == 0);
    CTEST_CHECK(strcmp(api.get_status_as_str(NRT_CLOSED), "NRT_CLOSED") == 0);
    CTEST_CHECK(strcmp(api.get_status_as_str(NRT_EXEC_OOB), "NRT_EXEC_OOB") == 0);
    CTEST_CHECK(
        strcmp(api.get_status_as_str(NRT_NETWORK_PROXY_FAILURE), "NRT_NETWORK_PROXY_FAILURE") == 0);
    CTEST_CHECK(api.get_status_as_str((NRT_STATUS)8) != NULL);
    nrt_test_close(&api);
    return CTEST_PASS;
}
