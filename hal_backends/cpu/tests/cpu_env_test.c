/* SPDX-License-Identifier: Apache-2.0 */
/* The entry point, environment parsing and device properties of the cpu backend. */
#include <stdlib.h>
#include <unistd.h>

#include "hal_backends/cpu/tests/cpu_test_util.h"

CTEST(CpuEntry, VersionCheck)
{
    const hal_backend_ops_t *ops = NULL;
    EXPECT_STATUS(hal_backend_get_ops(HAL_MAKE_VERSION(2, 0), &ops), HAL_ERROR_VERSION_MISMATCH);
    EXPECT_STATUS(hal_backend_get_ops(HAL_MAKE_VERSION(0, 9), &ops), HAL_ERROR_VERSION_MISMATCH);
    CTEST_EXPECT(ops == NULL);
    /* Another minor version of the same major is served. */
    EXPECT_STATUS(hal_backend_get_ops(HAL_MAKE_VERSION(HAL_API_VERSION_MAJOR, 7), &ops), HAL_OK);
    EXPECT_STATUS(hal_backend_get_ops(HAL_API_VERSION, &ops), HAL_OK);
    CTEST_EXPECT(ops != NULL);
    if (ops != NULL) {
        CTEST_EXPECT(ops->struct_size == sizeof(hal_backend_ops_t));
        CTEST_EXPECT(ops->api_version == HAL_API_VERSION);
        CTEST_EXPECT(strcmp(ops->name, "cpu") == 0);
        CTEST_EXPECT(strcmp(ops->device_type_name, "hal") == 0);
        CTEST_EXPECT(ops->init != NULL && ops->event_get_native_handle != NULL);
    }
    return CTEST_PASS;
}

CTEST(CpuEnv, ParseUint)
{
    uint64_t v = 0;
    EXPECT_STATUS(cpu_parse_uint("0", 0, 10, &v), HAL_OK);
    CTEST_EXPECT(v == 0);
    EXPECT_STATUS(cpu_parse_uint("64", 1, 64, &v), HAL_OK);
    CTEST_EXPECT(v == 64);
    EXPECT_STATUS(cpu_parse_uint("18446744073709551615", 0, UINT64_MAX, &v), HAL_OK);
    CTEST_EXPECT(v == UINT64_MAX);
    static const char *const bad[] = { "",   "65",   "-1",  "+1",  " 1",
                                       "1 ", "0x10", "1e3", "abc", "18446744073709551616" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = 12345;
        EXPECT_STATUS(cpu_parse_uint(bad[i], 1, 64, &v), HAL_ERROR_INVALID_ARGUMENT);
        CTEST_EXPECT(v == 12345);
    }
    EXPECT_STATUS(cpu_parse_uint("0", 1, 64, &v), HAL_ERROR_INVALID_ARGUMENT);
    return CTEST_PASS;
}

CTEST(CpuEnv, ParseSize)
{
    static const struct {
        const char *text;
        uint64_t value;
    } good[] = {
        { "1", 1 },
        { "4096", 4096 },
        { "3k", 3072 },
        { "3K", 3072 },
        { "2M", UINT64_C(2) << 20 },
        { "16G", UINT64_C(16) << 30 },
        { "16GiB", UINT64_C(16) << 30 },
        { "16GB", UINT64_C(16) << 30 },
        { "1T", UINT64_C(1) << 40 },
        { "16777215T", UINT64_C(16777215) << 40 },
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        uint64_t v = 0;
        EXPECT_STATUS(cpu_parse_size(good[i].text, &v), HAL_OK);
        if (v != good[i].value) {
            fprintf(stderr, "cpu_parse_size(\"%s\") = %llu, expected %llu\n", good[i].text,
                    (unsigned long long)v, (unsigned long long)good[i].value);
            ctest_record_failure();
        }
    }
    static const char *const bad[] = {
        "",    "0",   "0G",   "G",    "1Q",   "1KK",       "1Gi",
        "1 G", "-1G", "1.5G", "16iB", "1GBx", "16777216T", "99999999999999999999"
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 7;
        hal_status_t st = cpu_parse_size(bad[i], &v);
        if (st != HAL_ERROR_INVALID_ARGUMENT || v != 7) {
            fprintf(stderr, "cpu_parse_size(\"%s\") accepted a bad value\n", bad[i]);
            ctest_record_failure();
        }
    }
    return CTEST_PASS;
}

CTEST(CpuEnv, Defaults)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open_exact(&fx, NULL, NULL, NULL, NULL), HAL_OK);
    cpu_backend_t *be = fx.backend;
    if (be != NULL) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        CTEST_EXPECT(fx.count == 2);
        CTEST_EXPECT(be->config.capacity == (UINT64_C(16) << 30));
        CTEST_EXPECT(be->config.concurrency == (uint32_t)(cpus > 2 ? cpus : 2));
        CTEST_EXPECT(be->config.spin_us == 20);
    }
    t_close(&fx);

    /* Empty means unset. */
    EXPECT_STATUS(t_open_exact(&fx, "", "", "", ""), HAL_OK);
    CTEST_EXPECT(fx.count == 2);
    t_close(&fx);
    return CTEST_PASS;
}

CTEST(CpuEnv, GoodValues)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "3", "1M", "1", "0"), HAL_OK);
    cpu_backend_t *be = fx.backend;
    if (be != NULL) {
        CTEST_EXPECT(fx.count == 3);
        CTEST_EXPECT(be->config.capacity == (UINT64_C(1) << 20));
        CTEST_EXPECT(be->config.concurrency == 1);
        CTEST_EXPECT(be->config.spin_us == 0);
        uint64_t free_bytes = 0;
        EXPECT_STATUS(fx.ops->device_get_free_memory(fx.dev[2], &free_bytes), HAL_OK);
        CTEST_EXPECT(free_bytes == (UINT64_C(1) << 20));
    }
    t_close(&fx);
    EXPECT_STATUS(t_open(&fx, "64", "5000", "4096", "1000000"), HAL_OK);
    CTEST_EXPECT(fx.count == 64);
    t_close(&fx);
    return CTEST_PASS;
}

CTEST(CpuEnv, BadValuesFailInit)
{
    static const struct {
        const char *devices, *memory, *concurrency, *spin, *name;
    } cases[] = {
        { "0", NULL, NULL, NULL, "HAL_CPU_DEVICES" },
        { "65", NULL, NULL, NULL, "HAL_CPU_DEVICES" },
        { "two", NULL, NULL, NULL, "HAL_CPU_DEVICES" },
        { "-1", NULL, NULL, NULL, "HAL_CPU_DEVICES" },
        { NULL, "1Q", NULL, NULL, "HAL_CPU_DEVICE_MEMORY" },
        { NULL, "0", NULL, NULL, "HAL_CPU_DEVICE_MEMORY" },
        { NULL, "99999999999T", NULL, NULL, "HAL_CPU_DEVICE_MEMORY" },
        { NULL, NULL, "0", NULL, "HAL_CPU_DEVICE_CONCURRENCY" },
        { NULL, NULL, "lots", NULL, "HAL_CPU_DEVICE_CONCURRENCY" },
        { NULL, NULL, NULL, "-5", "HAL_CPU_SPIN_US" },
        { NULL, NULL, NULL, "20us", "HAL_CPU_SPIN_US" },
        { NULL, NULL, NULL, "1000001", "HAL_CPU_SPIN_US" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        t_fixture_t fx;
        t_clear_error();
        EXPECT_STATUS(
            t_open(&fx, cases[i].devices, cases[i].memory, cases[i].concurrency, cases[i].spin),
            HAL_ERROR_INVALID_ARGUMENT);
        CTEST_EXPECT(fx.backend == NULL);
        EXPECT_MESSAGE(cases[i].name);
        t_close(&fx);
    }
    return CTEST_PASS;
}

CTEST(CpuDevice, Properties)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "2", "3G", NULL, NULL), HAL_OK);
    for (uint32_t i = 0; i < fx.count; i++) {
        hal_device_properties_t props;
        memset(&props, 0xab, sizeof(props));
        props.struct_size = sizeof(props);
        props.next = NULL;
        EXPECT_STATUS(fx.ops->device_get_properties(fx.dev[i], &props), HAL_OK);
        char name[64];
        snprintf(name, sizeof(name), "cpu virtual device %u", i);
        CTEST_EXPECT(strcmp(props.name, name) == 0);
        CTEST_EXPECT(strcmp(props.vendor, "torch-hal") == 0);
        CTEST_EXPECT(props.index == i);
        CTEST_EXPECT(props.host_addressable == 1);
        CTEST_EXPECT(props.total_memory == (UINT64_C(3) << 30));
        /* IPC comes with the device's memfd arena, which every supported kernel offers. */
        CTEST_EXPECT(props.capabilities ==
                     (HAL_DEVICE_CAP_SHARED_MEMORY | HAL_DEVICE_CAP_TIMING_EVENTS |
                      HAL_DEVICE_CAP_HOST_CALLBACKS | HAL_DEVICE_CAP_PEER_COPY |
                      HAL_DEVICE_CAP_IPC | HAL_DEVICE_CAP_PROGRAMS));
        CTEST_EXPECT(props.program_formats == (1u << HAL_PROGRAM_FORMAT_HOST_ELF));
        CTEST_EXPECT(props.stream_priority_least == 0);
        CTEST_EXPECT(props.stream_priority_greatest == -2);
        CTEST_EXPECT(props.alignment == 256);
        uintptr_t native = 99;
        EXPECT_STATUS(fx.ops->device_get_native_handle(fx.dev[i], &native), HAL_OK);
        CTEST_EXPECT(native == i);
    }
    CTEST_EXPECT(fx.ops->device_open(fx.backend, 2, &(void *){ NULL }) ==
                 HAL_ERROR_INVALID_ARGUMENT);
    t_close(&fx);
    return CTEST_PASS;
}

CTEST(CpuDevice, PropertiesRespectStructSize)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", NULL, NULL, NULL), HAL_OK);
    hal_device_properties_t props;
    memset(&props, 0xab, sizeof(props));
    props.struct_size = offsetof(hal_device_properties_t, total_memory);
    EXPECT_STATUS(fx.ops->device_get_properties(fx.dev[0], &props), HAL_OK);
    CTEST_EXPECT(props.host_addressable == 1);
    unsigned char *tail = (unsigned char *)&props + props.struct_size;
    size_t untouched = 0;
    for (size_t i = 0; i < sizeof(props) - props.struct_size; i++)
        untouched += tail[i] == 0xab;
    CTEST_EXPECT(untouched == sizeof(props) - props.struct_size);
    t_close(&fx);
    return CTEST_PASS;
}
