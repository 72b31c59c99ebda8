/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: loading libnrt (and the errors when it is missing, incomplete or fails to
 * initialise), devices as visible NeuronCores, and their properties. */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hal_backends/trainium/tests/trn_test_util.h"

CTEST(TrnBackend, LoadsTheRuntimeAndNamesItself)
{
    tt_env_reset();
    tt_setenv("NEURON_RT_VISIBLE_CORES", "0-1");
    hal_backend_t b = NULL;
    EXPECT_OK(tt_open(&b));
    if (b == NULL)
        return CTEST_FAIL;
    const char *name = NULL, *device_name = NULL;
    uint32_t api = 0, count = 0;
    EXPECT_OK(hal_backend_get_info(b, &name, &device_name, &api));
    CTEST_EXPECT(name != NULL && strcmp(name, "trainium") == 0);
    CTEST_EXPECT(device_name != NULL && strcmp(device_name, "neuron") == 0);
    CTEST_EXPECT(HAL_VERSION_MAJOR(api) == HAL_API_VERSION_MAJOR);
    CTEST_EXPECT(HAL_VERSION_MINOR(api) >= 1);
    EXPECT_OK(hal_device_count(b, &count));
    CTEST_EXPECT(count == 2);
    /* A second open shares the instance (and the runtime, which nrt_init took once). */
    hal_backend_t again = NULL;
    EXPECT_OK(tt_open(&again));
    CTEST_EXPECT(again == b);
    EXPECT_OK(hal_backend_close(again));
    EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}

/* Devices are the visible logical cores, numbered relative to the visible set; their node
 * position is the instance's core index where the process knows it. */
CTEST(TrnBackend, DevicesAreTheVisibleCores)
{
    TT_REQUIRE_EMULATOR();
    static const struct {
        const char *visible, *num;
        uint32_t count, node_first, node_count;
    } cases[] = {
        { "4-6", NULL, 3, 4, 32 },    /* VISIBLE_CORES: a range */
        { "7", NULL, 1, 7, 32 },      /* a single core */
        { NULL, "5", 5, 0, 5 },       /* NUM_CORES: a count; which cores is not known */
        { "2-3", "9", 2, 2, 32 },     /* VISIBLE_CORES wins over NUM_CORES */
        { NULL, NULL, 32, 0, 32 },    /* neither: every core of a trn1.32xlarge */
        { "30-31", NULL, 2, 30, 32 }, /* the last cores */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tt_env_reset();
        tt_setenv("NEURON_RT_VISIBLE_CORES", cases[i].visible);
        tt_setenv("NEURON_RT_NUM_CORES", cases[i].num);
        hal_backend_t b = NULL;
        uint32_t count = 0;
        EXPECT_OK(tt_open(&b));
        if (b == NULL)
            continue;
        EXPECT_OK(hal_device_count(b, &count));
        if (count != cases[i].count)
            fprintf(stderr, "case %zu: %u devices, expected %u\n", i, count, cases[i].count);
        CTEST_EXPECT(count == cases[i].count);
        for (uint32_t d = 0; d < count; d++) {
            uintptr_t native = 99;
            hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
            EXPECT_OK(hal_device_get_native_handle(tt_device(b, d), &native));
            CTEST_EXPECT(native == d); /* the runtime's relative vnc */
            EXPECT_OK(hal_device_get_properties(tt_device(b, d), &props));
            CTEST_EXPECT(props.index == d);
            if (props.node_index != cases[i].node_first + d ||
                props.node_device_count != cases[i].node_count)
                fprintf(stderr, "case %zu device %u: node position %u of %u, expected %u of %u\n",
                        i, d, props.node_index, props.node_device_count, cases[i].node_first + d,
                        cases[i].node_count);
            CTEST_EXPECT(props.node_index == cases[i].node_first + d);
            CTEST_EXPECT(props.node_device_count == cases[i].node_count);
        }
        EXPECT_OK(hal_backend_close(b));
    }
    return CTEST_PASS;
}

CTEST(TrnBackend, Properties)
{
    TT_REQUIRE_EMULATOR();
    tt_env_reset();
    tt_setenv("NEURON_RT_VISIBLE_CORES", "0-1");
    hal_backend_t b = NULL;
    EXPECT_OK(tt_open(&b));
    if (b == NULL)
        return CTEST_FAIL;
    for (uint32_t d = 0; d < 2; d++) {
        hal_device_properties_t p = HAL_DEVICE_PROPERTIES_INIT;
        EXPECT_OK(hal_device_get_properties(tt_device(b, d), &p));
        char want[64];
        snprintf(want, sizeof(want), "NeuronCore-v2 (trn1.32xlarge) %u", d);
        if (strcmp(p.name, want) != 0)
            fprintf(stderr, "name \"%s\", expected \"%s\"\n", p.name, want);
        CTEST_EXPECT(strcmp(p.name, want) == 0);
        CTEST_EXPECT(strcmp(p.vendor, "AWS") == 0);
        CTEST_EXPECT(p.host_addressable == 0);
        CTEST_EXPECT(p.total_memory == (UINT64_C(16) << 30)); /* 32 GiB per chip, 2 cores */
        CTEST_EXPECT(p.capabilities ==
                     (HAL_DEVICE_CAP_TIMING_EVENTS | HAL_DEVICE_CAP_HOST_CALLBACKS |
                      HAL_DEVICE_CAP_PEER_COPY | HAL_DEVICE_CAP_PROGRAMS |
                      HAL_DEVICE_CAP_NATIVE_COLLECTIVES));
        CTEST_EXPECT(p.stream_priority_least == 0 && p.stream_priority_greatest == -2);
        CTEST_EXPECT(p.alignment == 4096);
        hal_mem_stats_t stats = HAL_MEM_STATS_INIT;
        EXPECT_OK(hal_device_get_mem_stats(tt_device(b, d), &stats));
        CTEST_EXPECT(stats.device_bytes_limit == p.total_memory);
        CTEST_EXPECT(stats.device_bytes_free == p.total_memory);
    }
    EXPECT_OK(hal_backend_close(b));

    /* Another instance type, and a smaller memory for out-of-memory tests. */
    tt_env_reset();
    tt_setenv("NEURON_EMU_INSTANCE", "trn2.48xlarge");
    tt_setenv("NEURON_RT_VISIBLE_CORES", "1");
    EXPECT_OK(tt_open(&b));
    if (b != NULL) {
        hal_device_properties_t p = HAL_DEVICE_PROPERTIES_INIT;
        EXPECT_OK(hal_device_get_properties(tt_device(b, 0), &p));
        /* Core 1 of the instance, the process's device 0. */
        CTEST_EXPECT(strcmp(p.name, "NeuronCore-v3 (trn2.48xlarge) 1") == 0);
        CTEST_EXPECT(p.total_memory == (UINT64_C(24) << 30));
        EXPECT_OK(hal_backend_close(b));
    }
    tt_env_reset();
    tt_setenv("NEURON_EMU_INSTANCE", "inf2.24xlarge");
    tt_setenv("NEURON_EMU_HBM_BYTES", "64M");
    tt_setenv("NEURON_RT_NUM_CORES", "1");
    EXPECT_OK(tt_open(&b));
    if (b != NULL) {
        hal_device_properties_t p = HAL_DEVICE_PROPERTIES_INIT;
        EXPECT_OK(hal_device_get_properties(tt_device(b, 0), &p));
        CTEST_EXPECT(strcmp(p.name, "NeuronCore-v2 (inf2.24xlarge) 0") == 0);
        /* Devices open before the runtime starts: their memory is the instance's share (6 chips
         * of 32 GiB, 12 cores); what is free is the runtime's once the process uses the core. */
        CTEST_EXPECT(p.total_memory == (UINT64_C(16) << 30));
        hal_mem_stats_t stats = HAL_MEM_STATS_INIT;
        EXPECT_OK(hal_device_get_mem_stats(tt_device(b, 0), &stats));
        CTEST_EXPECT(stats.device_bytes_free == p.total_memory); /* nothing used, no runtime */
        void *d = NULL;
        EXPECT_OK(hal_mem_alloc(tt_device(b, 0), HAL_MEM_KIND_DEVICE, 1u << 20, 0, &d));
        EXPECT_OK(hal_device_get_mem_stats(tt_device(b, 0), &stats));
        CTEST_EXPECT(stats.device_bytes_free == (UINT64_C(63) << 20));
        EXPECT_OK(hal_mem_free(d));
        EXPECT_OK(hal_backend_close(b));
    }
    return CTEST_PASS;
}

/* HAL_NEURON_LIBNRT naming a missing file: HAL_ERROR_NOT_FOUND naming the variable and path, and
 * nothing else is tried in its place. */
CTEST(TrnBackend, MissingRuntimeIsNotFound)
{
    tt_env_reset();
    char path[1024];
    tt_tmp_path(path, sizeof(path), "no-such-dir/libnrt.so.1");
    tt_setenv("HAL_NEURON_LIBNRT", path);
    hal_backend_t b = NULL;
    EXPECT_STATUS(hal_backend_open("trainium", &b), HAL_ERROR_NOT_FOUND);
    EXPECT_MESSAGE("trainium: hal_backend_open: ");
    EXPECT_MESSAGE("HAL_NEURON_LIBNRT");
    EXPECT_MESSAGE(path);
    CTEST_EXPECT(b == NULL);
    /* A file that is not a library. */
    tt_tmp_path(path, sizeof(path), "not-a-library.so.1");
    FILE *f = fopen(path, "w");
    CTEST_EXPECT(f != NULL);
    if (f != NULL) {
        fputs("not an ELF file\n", f);
        fclose(f);
    }
    tt_setenv("HAL_NEURON_LIBNRT", path);
    EXPECT_STATUS(hal_backend_open("trainium", &b), HAL_ERROR_NOT_FOUND);
    EXPECT_MESSAGE("not-a-library.so.1");
    /* Unset: the installed runtime, then the loader's search path. Where neither exists (any
     * machine without the Neuron SDK) that is HAL_ERROR_NOT_FOUND naming both and the variable. */
    tt_setenv("HAL_NEURON_LIBNRT", NULL);
    if (access("/opt/aws/neuron/lib/libnrt.so.1", F_OK) != 0) {
        hal_status_t st = hal_backend_open("trainium", &b);
        if (st == HAL_OK) {
            fprintf(stderr, "note: a libnrt.so.1 on the loader path was used\n");
            EXPECT_OK(hal_backend_close(b));
        } else {
            CTEST_EXPECT(st == HAL_ERROR_NOT_FOUND);
            EXPECT_MESSAGE("the Neuron runtime libnrt.so.1 was not found");
            EXPECT_MESSAGE("/opt/aws/neuron/lib/libnrt.so.1");
            EXPECT_MESSAGE("aws-neuronx-runtime-lib");
            EXPECT_MESSAGE("HAL_NEURON_LIBNRT");
        }
    }
    /* The backend opens again once the runtime is there. */
    tt_env_reset();
    tt_setenv("NEURON_RT_NUM_CORES", "1");
    EXPECT_OK(tt_open(&b));
    if (b != NULL)
        EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}

/* A libnrt without the functions the backend needs is refused, naming them all. */
CTEST(TrnBackend, MissingFunctionsAreNamed)
{
    tt_env_reset();
    tt_setenv("HAL_NEURON_LIBNRT", TT_STUB_LIBNRT);
    hal_backend_t b = NULL;
    EXPECT_STATUS(hal_backend_open("trainium", &b), HAL_ERROR_NOT_FOUND);
    EXPECT_MESSAGE("libnrt.so.1 at " TT_STUB_LIBNRT " lacks ");
    EXPECT_MESSAGE("nrt_tensor_copy");
    EXPECT_MESSAGE("nrt_tensor_allocate,");
    EXPECT_MESSAGE("nrt_close");
    EXPECT_MESSAGE("libnrt 2.30");
    /* The stub does have nrt_init. */
    CTEST_EXPECT(strstr(hal_last_error_message(), "nrt_init,") == NULL);
    CTEST_EXPECT(strstr(hal_last_error_message(), "lacks nrt_init") == NULL);
    return CTEST_PASS;
}

/* Runs fn with stderr redirected into `out` (NUL-terminated, truncated to size). */
static void capture_stderr(void (*fn)(void *), void *arg, char *out, size_t size)
{
    char path[1024];
    tt_tmp_path(path, sizeof(path), "stderr.txt");
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(path, "w+");
    out[0] = '\0';
    if (saved < 0 || f == NULL) {
        if (f != NULL)
            fclose(f);
        if (saved >= 0)
            close(saved);
        fn(arg);
        return;
    }
    dup2(fileno(f), 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    size_t n = fread(out, 1, size - 1, f);
    out[n] = '\0';
    fclose(f);
}

typedef struct open_result {
    hal_backend_t backend;
    hal_status_t status;
} open_result_t;

static void open_backend(void *arg)
{
    open_result_t *r = arg;
    r->status = tt_open(&r->backend);
}

/* A runtime older than the one the backend follows (the emulator built without the functions
 * the backend loads as optional) still opens: devices, memory and copies work, device names
 * carry only the core number, the memory size is unknown without the instance, programs are
 * not offered, and one line on stderr says which paths the backend took and why. */
CTEST(TrnBackend, OlderRuntimeFallsBackAndSaysSo)
{
    TT_REQUIRE_EMULATOR();
    tt_env_reset();
    tt_setenv("HAL_NEURON_LIBNRT", TT_LEGACY_LIBNRT);
    tt_setenv("NEURON_RT_VISIBLE_CORES", "2-3");
    open_result_t r = { NULL, HAL_ERROR_INTERNAL };
    char err[4096];
    capture_stderr(open_backend, &r, err, sizeof(err));
    EXPECT_OK(r.status);
    if (r.backend == NULL)
        return CTEST_FAIL;
    if (strstr(err, "trainium: libnrt of unknown version (no nrt_get_version) at ") == NULL)
        fprintf(stderr, "stderr was: %s\n", err);
    CTEST_EXPECT(strstr(err, "trainium: libnrt of unknown version (no nrt_get_version) at ") !=
                 NULL);
    CTEST_EXPECT(strstr(err, TT_LEGACY_LIBNRT) != NULL);
    CTEST_EXPECT(strstr(err, "memory: unknown (no nrt_get_vnc_memory_stats)") != NULL);
    CTEST_EXPECT(strstr(err, "device names: core numbers only (no nrt_get_instance_info)") != NULL);
    CTEST_EXPECT(strstr(err, "programs: none") != NULL);
    CTEST_EXPECT(strstr(err, "collectives: host-staged (the runtime's version is unknown") != NULL);
    CTEST_EXPECT(strstr(err, "missing: nrt_get_status_as_str, nrt_get_version") != NULL);
    CTEST_EXPECT(strstr(err, "nrta_cc_schedule, nrta_is_completed") != NULL);
    /* One line. */
    char *nl = strchr(err, '\n');
    CTEST_EXPECT(nl != NULL && nl[1] == '\0');
    uint32_t count = 0;
    EXPECT_OK(hal_device_count(r.backend, &count));
    CTEST_EXPECT(count == 2);
    hal_device_t dev = tt_device(r.backend, 1);
    hal_device_properties_t p = HAL_DEVICE_PROPERTIES_INIT;
    EXPECT_OK(hal_device_get_properties(dev, &p));
    CTEST_EXPECT(strcmp(p.name, "NeuronCore 1") == 0);
    CTEST_EXPECT(p.total_memory == 0);
    CTEST_EXPECT((p.capabilities & HAL_DEVICE_CAP_PROGRAMS) == 0 && p.program_formats == 0);
    CTEST_EXPECT((p.capabilities & HAL_DEVICE_CAP_NATIVE_COLLECTIVES) == 0);
    CTEST_EXPECT((p.capabilities & HAL_DEVICE_CAP_HOST_CALLBACKS) != 0);
    /* No node position without the instance's core count: the core numbers the devices. */
    CTEST_EXPECT(p.node_index == 1 && p.node_device_count == 2);
    static const uint8_t image[16] = { 0 };
    hal_program_t prog = NULL;
    EXPECT_STATUS(hal_program_create(dev, HAL_PROGRAM_FORMAT_NEFF, image, sizeof(image), &prog),
                  HAL_ERROR_UNSUPPORTED);
    hal_mem_stats_t stats = HAL_MEM_STATS_INIT;
    EXPECT_OK(hal_device_get_mem_stats(dev, &stats));
    CTEST_EXPECT(stats.device_bytes_free == 0);
    /* Memory and copies work as on any runtime. */
    hal_stream_t s = NULL;
    uint8_t *d = NULL;
    uint8_t host[4096], back[4096];
    tt_fill(host, sizeof(host), 7);
    EXPECT_OK(hal_stream_create(dev, 0, &s));
    EXPECT_OK(hal_mem_alloc(dev, HAL_MEM_KIND_DEVICE, sizeof(host), 0, (void **)&d));
    EXPECT_OK(hal_memcpy_async(d, host, sizeof(host), s));
    EXPECT_OK(hal_memcpy_async(back, d, sizeof(back), s));
    EXPECT_OK(hal_stream_synchronize(s));
    CTEST_EXPECT(tt_mismatch(back, sizeof(back), 7) == sizeof(back));
    EXPECT_OK(hal_mem_free(d));
    EXPECT_OK(hal_stream_destroy(s));
    EXPECT_OK(hal_backend_close(r.backend));
    tt_env_reset();
    return CTEST_PASS;
}

/* On a runtime with everything the backend uses, the line is written only when
 * NEURON_RT_LOG_LEVEL asks for INFO (or more). */
CTEST(TrnBackend, PathLineAtInfoLevel)
{
    TT_REQUIRE_EMULATOR();
    tt_env_reset();
    tt_setenv("NEURON_RT_NUM_CORES", "1");
    open_result_t r = { NULL, HAL_ERROR_INTERNAL };
    char err[4096];
    capture_stderr(open_backend, &r, err, sizeof(err));
    EXPECT_OK(r.status);
    CTEST_EXPECT(strstr(err, "trainium: libnrt") == NULL);
    if (r.backend != NULL)
        EXPECT_OK(hal_backend_close(r.backend));
    tt_setenv("NEURON_RT_LOG_LEVEL", "info");
    capture_stderr(open_backend, &r, err, sizeof(err));
    EXPECT_OK(r.status);
    if (strstr(err, "trainium: libnrt 2.30.50.0 at ") == NULL)
        fprintf(stderr, "stderr was: %s\n", err);
    CTEST_EXPECT(strstr(err, "trainium: libnrt 2.30.50.0 at ") != NULL);
    CTEST_EXPECT(strstr(err, "memory: from the runtime") != NULL);
    CTEST_EXPECT(strstr(err, "collectives: native all-reduce, all-gather, reduce-scatter "
                             "(out-of-NEFF, async API 2, in place through a copy)") != NULL);
    CTEST_EXPECT(strstr(err, "missing:") == NULL);
    if (r.backend != NULL)
        EXPECT_OK(hal_backend_close(r.backend));
    tt_env_reset();
    return CTEST_PASS;
}

/* Core choices the instance cannot give fail the open, naming the count call; the runtime
 * itself starts at the first call that needs it, whose error names nrt_init. */
CTEST(TrnBackend, InitFailureNamesTheCall)
{
    TT_REQUIRE_EMULATOR();
    hal_backend_t b = NULL;
    /* Cores a trn1.32xlarge does not have: NRT_FAILURE. */
    tt_env_reset();
    tt_setenv("NEURON_RT_VISIBLE_CORES", "40-41");
    EXPECT_STATUS(hal_backend_open("trainium", &b), HAL_ERROR_BACKEND_SPECIFIC);
    EXPECT_MESSAGE("nrt_get_visible_vnc_count");
    EXPECT_MESSAGE("returned NRT_FAILURE (1)");
    EXPECT_MESSAGE("NEURON_RT_VISIBLE_CORES");
    /* A malformed core list: NRT_INVALID. */
    tt_setenv("NEURON_RT_VISIBLE_CORES", "1,3");
    EXPECT_STATUS(hal_backend_open("trainium", &b), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("returned NRT_INVALID (2)");
    /* A malformed fault plan is nrt_init's NRT_INVALID: the open succeeds, the first device
     * memory fails, and so does the next try. */
    tt_env_reset();
    tt_setenv("NEURON_EMU_FAULTS", "bogus");
    if (EXPECT_OK(hal_backend_open("trainium", &b))) {
        void *d = NULL;
        for (int attempt = 0; attempt < 2; attempt++) {
            EXPECT_STATUS(hal_mem_alloc(tt_device(b, 0), HAL_MEM_KIND_DEVICE, 4096, 0, &d),
                          HAL_ERROR_INVALID_ARGUMENT);
            EXPECT_MESSAGE("nrt_init(NRT_FRAMEWORK_TYPE_PYTORCH)");
            EXPECT_MESSAGE("NRT_INVALID (2)");
            CTEST_EXPECT(d == NULL);
        }
        EXPECT_OK(hal_backend_close(b));
    }
    tt_env_reset();
    return CTEST_PASS;
}

/* Opening the backend takes no NeuronCore; the first device memory does (nrt_init). While
 * another process holds the cores, the open succeeds, that first call fails naming nrt_init and
 * why, and a later call succeeds once they are free: a process that imports a framework and
 * spawns workers can leave the cores to them. The child is forked before this process opens
 * anything (no threads to fork), and each side closes the pipe ends it does not use, so that a
 * child that dies is seen at once. */
CTEST(TrnBackend, CoresAreTakenAtFirstUse)
{
    TT_REQUIRE_EMULATOR();
    tt_env_reset();
    tt_setenv("NEURON_RT_VISIBLE_CORES", "6");
    int to_child[2], to_parent[2];
    if (pipe(to_child) != 0 || pipe(to_parent) != 0)
        return CTEST_FAIL;
    pid_t child = fork();
    if (child == 0) {
        /* The child: takes core 6, says so, and holds it until told (or the parent is gone). */
        close(to_child[1]);
        close(to_parent[0]);
        hal_backend_t cb = NULL;
        void *d = NULL;
        char c = 'x';
        int ok = hal_backend_open("trainium", &cb) == HAL_OK &&
                 hal_mem_alloc(tt_device(cb, 0), HAL_MEM_KIND_DEVICE, 4096, 0, &d) == HAL_OK;
        if (ok)
            c = 'y';
        if (write(to_parent[1], &c, 1) != 1 || read(to_child[0], &c, 1) != 1)
            ok = 0;
        if (cb != NULL)
            hal_backend_close(cb);
        _exit(ok ? 0 : 1);
    }
    close(to_child[0]);
    close(to_parent[1]);
    char c = 0;
    CTEST_EXPECT(child > 0 && read(to_parent[0], &c, 1) == 1 && c == 'y');
    /* The core is held: the open still succeeds, the first device memory does not. */
    hal_backend_t b = NULL;
    if (EXPECT_OK(tt_open(&b))) {
        void *d = NULL;
        EXPECT_STATUS(hal_mem_alloc(tt_device(b, 0), HAL_MEM_KIND_DEVICE, 4096, 0, &d),
                      HAL_ERROR_BACKEND_SPECIFIC);
        EXPECT_MESSAGE("nrt_init(NRT_FRAMEWORK_TYPE_PYTORCH)");
        EXPECT_MESSAGE("owned exclusively by one process");
        /* Free memory is asked without taking the core. */
        hal_mem_stats_t stats = HAL_MEM_STATS_INIT;
        EXPECT_OK(hal_device_get_mem_stats(tt_device(b, 0), &stats));
        CTEST_EXPECT(stats.device_bytes_free == stats.device_bytes_limit);
    }
    c = 'q';
    CTEST_EXPECT(write(to_child[1], &c, 1) == 1);
    close(to_child[1]);
    close(to_parent[0]);
    int status = -1;
    CTEST_EXPECT(child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
                 WEXITSTATUS(status) == 0);
    if (b != NULL) {
        void *d = NULL;
        EXPECT_OK(hal_mem_alloc(tt_device(b, 0), HAL_MEM_KIND_DEVICE, 4096, 0, &d));
        if (d != NULL)
            EXPECT_OK(hal_mem_free(d));
        EXPECT_OK(hal_backend_close(b));
    }
    tt_env_reset();
    return CTEST_PASS;
}

/* nrt_close at backend close, nrt_init at the next open: the runtime starts clean each time. */
CTEST(TrnBackend, CloseAndReopen)
{
    tt_env_reset();
    tt_setenv("NEURON_RT_VISIBLE_CORES", "3");
    for (int round = 0; round < 3; round++) {
        hal_backend_t b = NULL;
        EXPECT_OK(tt_open(&b));
        if (b == NULL)
            break;
        hal_device_t dev = tt_device(b, 0);
        hal_stream_t s = NULL;
        uint8_t *d = NULL;
        uint8_t host[512];
        EXPECT_OK(hal_device_get_default_stream(dev, &s));
        EXPECT_OK(hal_mem_alloc(dev, HAL_MEM_KIND_DEVICE, sizeof(host), 0, (void **)&d));
        /* New device memory reads as zeros on the emulator; write a value per round. */
        EXPECT_OK(hal_memset_async(d, 0x40 + round, sizeof(host), s));
        EXPECT_OK(hal_memcpy_async(host, d, sizeof(host), s));
        EXPECT_OK(hal_stream_synchronize(s));
        CTEST_EXPECT(tt_find_other(host, sizeof(host), (uint8_t)(0x40 + round)) == sizeof(host));
        /* Left allocated on purpose: closing the backend frees it before nrt_close. */
        EXPECT_OK(hal_backend_close(b));
    }
    return CTEST_PASS;
}

/* Under torchrun a process that chose no cores takes its local rank's core; a process that chose
 * some keeps them. The variable the runtime reads is what tells. */
CTEST(TrnBackend, TorchrunRankTakesItsLocalCore)
{
    TT_REQUIRE_EMULATOR();
    tt_env_reset();
    tt_setenv("LOCAL_RANK", "1");
    tt_setenv("WORLD_SIZE", "2");
    hal_backend_t b = NULL;
    uint32_t count = 0;
    if (EXPECT_OK(tt_open(&b))) {
        const char *visible = getenv("NEURON_RT_VISIBLE_CORES");
        CTEST_EXPECT(visible != NULL && strcmp(visible, "1") == 0);
        EXPECT_OK(hal_device_count(b, &count));
        CTEST_EXPECT(count == 1);
        /* Its one device is the node's core 1, as cuda:1 is the second GPU of a node. */
        hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
        EXPECT_OK(hal_device_get_properties(tt_device(b, 0), &props));
        CTEST_EXPECT(props.index == 0);
        CTEST_EXPECT(props.node_index == 1 && props.node_device_count == 32);
        EXPECT_OK(hal_backend_close(b));
    }
    /* A choice of the process's own is kept. */
    tt_env_reset();
    tt_setenv("LOCAL_RANK", "1");
    tt_setenv("WORLD_SIZE", "2");
    tt_setenv("NEURON_RT_NUM_CORES", "2");
    if (EXPECT_OK(tt_open(&b))) {
        CTEST_EXPECT(getenv("NEURON_RT_VISIBLE_CORES") == NULL);
        EXPECT_OK(hal_device_count(b, &count));
        CTEST_EXPECT(count == 2);
        EXPECT_OK(hal_backend_close(b));
    }
    /* Not under torchrun (no WORLD_SIZE), or a LOCAL_RANK that is not a number: nothing set. */
    tt_env_reset();
    tt_setenv("LOCAL_RANK", "1");
    if (EXPECT_OK(tt_open(&b))) {
        CTEST_EXPECT(getenv("NEURON_RT_VISIBLE_CORES") == NULL);
        EXPECT_OK(hal_backend_close(b));
    }
    tt_env_reset();
    tt_setenv("LOCAL_RANK", "x1");
    tt_setenv("WORLD_SIZE", "2");
    if (EXPECT_OK(tt_open(&b))) {
        CTEST_EXPECT(getenv("NEURON_RT_VISIBLE_CORES") == NULL);
        EXPECT_OK(hal_backend_close(b));
    }
    tt_env_reset();
    return CTEST_PASS;
}

static int copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    int rc = in && out ? 0 : -1;
    char buf[65536];
    size_t n;
    while (rc == 0 && (n = fread(buf, 1, sizeof(buf), in)) > 0)
        rc = fwrite(buf, 1, n, out) == n ? 0 : -1;
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        rc = -1;
    return rc == 0 ? chmod(to, 0755) : -1;
}

/* With no runtime installed, a libnrt.so.1 next to the backend library (as a package bundles
 * the emulator) is the last place the backend looks; HAL_NEURON_BUNDLED_LIBNRT=0 turns it off. */
CTEST(TrnBackend, BundledRuntimeIsTheLastResort)
{
    TT_REQUIRE_EMULATOR();
    if (access("/opt/aws/neuron/lib/libnrt.so.1", F_OK) == 0)
        CTEST_SKIP("a Neuron runtime is installed: it is found before a bundled one");
    char dir[1024], lib[1100], nrt[1100];
    tt_tmp_path(dir, sizeof(dir), "bundled");
    CTEST_CHECK(mkdir(dir, 0755) == 0 || errno == EEXIST);
    snprintf(lib, sizeof(lib), "%s/libhal_backend_trainium.so", dir);
    snprintf(nrt, sizeof(nrt), "%s/libnrt.so.1", dir);
    CTEST_CHECK(copy_file("hal_backends/trainium/libhal_backend_trainium.so", lib) == 0);
    CTEST_CHECK(copy_file(tt_default_libnrt(), nrt) == 0);
    tt_env_reset();
    tt_setenv("HAL_NEURON_LIBNRT", NULL);
    tt_setenv("NEURON_RT_NUM_CORES", "1");
    hal_backend_t b = NULL;
    hal_status_t st = hal_backend_open(lib, &b);
    if (st == HAL_OK) {
        EXPECT_OK(hal_backend_close(b));
    } else {
        EXPECT_STATUS(st, HAL_OK);
    }
    tt_setenv("HAL_NEURON_BUNDLED_LIBNRT", "0");
    st = hal_backend_open(lib, &b);
    if (st == HAL_OK) { /* a libnrt.so.1 on the loader path */
        fprintf(stderr, "note: a libnrt.so.1 on the loader path was used\n");
        EXPECT_OK(hal_backend_close(b));
    } else {
        EXPECT_STATUS(st, HAL_ERROR_NOT_FOUND);
        EXPECT_MESSAGE("the Neuron runtime libnrt.so.1 was not found");
    }
    tt_env_reset();
    return CTEST_PASS;
}
