/* SPDX-License-Identifier: Apache-2.0 */
#include "hal_backends/trainium/emulator/tests/nrt_test_util.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEFAULT_LIBRARY "hal_backends/trainium/emulator/libnrt.so.1"

static const char *const runtime_env[] = {
    "NEURON_RT_VISIBLE_CORES",     "NEURON_RT_NUM_CORES",        "NEURON_LOGICAL_NC_CONFIG",
    "NEURON_RT_VIRTUAL_CORE_SIZE", "NEURON_RT_LOG_LEVEL",        "NEURON_RT_LOG_LOCATION",
    "NEURON_EMU_INSTANCE",         "NEURON_EMU_HBM_BYTES",       "NEURON_EMU_FAULTS",
    "NEURON_EMU_DMA_GBPS",         "NEURON_EMU_LOCK_DIR",        "NEURON_EMU_INSTANCE_ID",
    "NEURON_RT_ROOT_COMM_ID",      "NEURON_EMU_RUNTIME_VERSION", "NEURON_EMU_CC_TIMEOUT_MS",
    "NEURON_EMU_PYTHON",           "NEURON_EMU_EXECUTOR",
};

/* The copy a test left loaded (it returned early); unloaded by the next open. */
static void *loaded;

static const char *library_path(void)
{
    const char *path = getenv("NRT_CONTRACT_LIBRARY");
    return path != NULL && path[0] != '\0' ? path : DEFAULT_LIBRARY;
}

void nrt_test_env_reset(void)
{
    for (size_t i = 0; i < sizeof(runtime_env) / sizeof(runtime_env[0]); i++)
        unsetenv(runtime_env[i]);
    const char *tmp = getenv("TEST_TMPDIR");
    if (tmp != NULL) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s/nrt-core-locks", tmp);
        setenv("NEURON_EMU_LOCK_DIR", dir, 1);
    }
}

static void unload(void *handle)
{
    void (*close_fn)(void) = (void (*)(void))dlsym(handle, "nrt_close");
    unsetenv("NEURON_RT_LOG_LEVEL");
    if (close_fn != NULL)
        close_fn();
    dlclose(handle);
}

#define RESOLVE(field, name)                                        \
    do {                                                            \
        void *sym = dlsym(api->handle, name);                       \
        if (sym == NULL) {                                          \
            fprintf(stderr, "%s does not export %s\n", path, name); \
            return false;                                           \
        }                                                           \
        memcpy(&api->field, &sym, sizeof(sym));                     \
    } while (0)

bool nrt_test_open(nrt_api_t *api)
{
    if (loaded != NULL) {
        unload(loaded);
        loaded = NULL;
    }
    nrt_test_env_reset();
    memset(api, 0, sizeof(*api));
    const char *path = library_path();
    void *stale = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (stale != NULL) {
        fprintf(stderr, "%s is still loaded; a test did not unload it\n", path);
        dlclose(stale);
        return false;
    }
    api->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (api->handle == NULL) {
        fprintf(stderr, "dlopen(%s): %s\n", path, dlerror());
        return false;
    }
    loaded = api->handle;
    RESOLVE(init, "nrt_init");
    RESOLVE(close, "nrt_close");
    RESOLVE(get_version, "nrt_get_version");
    RESOLVE(get_status_as_str, "nrt_get_status_as_str");
    RESOLVE(get_instance_info, "nrt_get_instance_info");
    RESOLVE(get_total_nc_count, "nrt_get_total_nc_count");
    RESOLVE(get_total_vnc_count, "nrt_get_total_vnc_count");
    RESOLVE(get_visible_nc_count, "nrt_get_visible_nc_count");
    RESOLVE(get_visible_vnc_count, "nrt_get_visible_vnc_count");
    RESOLVE(tensor_allocate, "nrt_tensor_allocate");
    RESOLVE(tensor_free, "nrt_tensor_free");
    RESOLVE(tensor_read, "nrt_tensor_read");
    RESOLVE(tensor_write, "nrt_tensor_write");
    RESOLVE(tensor_read_batch, "nrt_tensor_read_batch");
    RESOLVE(tensor_write_batch, "nrt_tensor_write_batch");
    RESOLVE(tensor_copy, "nrt_tensor_copy");
    RESOLVE(tensor_get_size, "nrt_tensor_get_size");
    RESOLVE(tensor_memset, "nrt_tensor_memset");
    RESOLVE(tensor_allocate_empty, "nrt_tensor_allocate_empty");
    RESOLVE(tensor_attach_buffer, "nrt_tensor_attach_buffer");
    RESOLVE(tensor_allocate_slice, "nrt_tensor_allocate_slice");
    RESOLVE(tensor_get_va, "nrt_tensor_get_va");
    RESOLVE(tensor_get_device_allocation_info, "nrt_tensor_get_device_allocation_info");
    RESOLVE(get_vnc_memory_stats, "nrt_get_vnc_memory_stats");
    RESOLVE(allocate_tensor_set, "nrt_allocate_tensor_set");
    RESOLVE(destroy_tensor_set, "nrt_destroy_tensor_set");
    RESOLVE(add_tensor_to_tensor_set, "nrt_add_tensor_to_tensor_set");
    RESOLVE(load, "nrt_load");
    RESOLVE(unload, "nrt_unload");
    RESOLVE(execute, "nrt_execute");
    RESOLVE(get_model_tensor_info, "nrt_get_model_tensor_info");
    RESOLVE(free_model_tensor_info, "nrt_free_model_tensor_info");
#define OPTIONAL(field, name)                   \
    do {                                        \
        void *opt = dlsym(api->handle, name);   \
        memcpy(&api->field, &opt, sizeof(opt)); \
    } while (0)
    OPTIONAL(cc_global_comm_init, "nrt_cc_global_comm_init");
    OPTIONAL(cc_prepare, "nrta_cc_prepare");
    OPTIONAL(cc_schedule, "nrta_cc_schedule");
    OPTIONAL(cc_schedule_v3, "nrta_cc_schedule");
    OPTIONAL(is_completed, "nrta_is_completed");
    OPTIONAL(error_tracker_create, "nrta_error_tracker_create");
    OPTIONAL(error_tracker_destroy, "nrta_error_tracker_destroy");
    OPTIONAL(error_tracker_get_list, "nrta_error_tracker_get_list");
#undef OPTIONAL
    void *sym = dlsym(api->handle, "nrt_emu_set_fault");
    memcpy(&api->emu_set_fault, &sym, sizeof(sym));
    sym = dlsym(api->handle, "nrt_emu_get_dma_stats");
    memcpy(&api->emu_get_dma_stats, &sym, sizeof(sym));
    sym = dlsym(api->handle, NRT_EMU_STABLEHLO_STATUS_SYMBOL);
    memcpy(&api->emu_stablehlo_status, &sym, sizeof(sym));
    return true;
}

void nrt_test_close(nrt_api_t *api)
{
    if (api->handle == NULL)
        return;
    unload(api->handle);
    if (loaded == api->handle)
        loaded = NULL;
    api->handle = NULL;
    void *still = dlopen(library_path(), RTLD_NOW | RTLD_NOLOAD);
    if (still != NULL) {
        fprintf(stderr, "warning: the library stayed loaded after dlclose\n");
        dlclose(still);
    }
}

bool nrt_test_is_emulator(const nrt_api_t *api)
{
    return api->emu_set_fault != NULL;
}

NRT_STATUS nrt_test_init(const nrt_api_t *api)
{
    return api->init(NRT_FRAMEWORK_TYPE_NO_FW, "", "");
}

static bool stats(const nrt_api_t *api, uint32_t vnc, nrt_vnc_memory_stats_t *out)
{
    size_t written = 0;
    return api->get_vnc_memory_stats(vnc, out, sizeof(*out), &written) == NRT_SUCCESS &&
           written == sizeof(*out);
}

uint64_t nrt_test_used(const nrt_api_t *api, uint32_t vnc)
{
    nrt_vnc_memory_stats_t s;
    return stats(api, vnc, &s) ? s.bytes_used : UINT64_MAX;
}

uint64_t nrt_test_limit(const nrt_api_t *api, uint32_t vnc)
{
    nrt_vnc_memory_stats_t s;
    return stats(api, vnc, &s) ? s.bytes_limit : UINT64_MAX;
}

int nrt_test_in_child(int (*fn)(void *arg), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0)
        _exit(fn(arg));
    int status;
    while (waitpid(pid, &status, 0) < 0) {
    }
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}

static int saved_stderr = -1;
static FILE *capture;
static char captured[8192];

void nrt_test_stderr_begin(void)
{
    fflush(stderr);
    capture = tmpfile();
    saved_stderr = dup(STDERR_FILENO);
    if (capture != NULL)
        dup2(fileno(capture), STDERR_FILENO);
}

const char *nrt_test_stderr_end(void)
{
    captured[0] = '\0';
    if (saved_stderr < 0)
        return captured;
    fflush(stderr);
    dup2(saved_stderr, STDERR_FILENO);
    close(saved_stderr);
    saved_stderr = -1;
    if (capture != NULL) {
        rewind(capture);
        size_t n = fread(captured, 1, sizeof(captured) - 1, capture);
        captured[n] = '\0';
        fclose(capture);
        capture = NULL;
    }
    /* Echo it, so a failing test still shows what the library said. */
    fputs(captured, stderr);
    return captured;
}

void nrt_test_pattern(void *buf, size_t size, unsigned seed)
{
    unsigned char *p = buf;
    uint32_t x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < size; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (unsigned char)(x >> 24);
    }
}
