/* SPDX-License-Identifier: Apache-2.0 */
/* libnrt emulator: runtime state, nrt_init / nrt_close, version and status names.
 *
 * The runtime moves uninitialised -> ready (nrt_init) -> closed (nrt_close) -> ready (nrt_init
 * again). Calls that need the runtime return NRT_UNINITIALIZED before the first nrt_init and
 * NRT_CLOSED after nrt_close, the dedicated codes of nrt_status.h. nrt_init on a ready runtime
 * fails with NRT_FAILURE and changes nothing; nrt_close when not ready does nothing. The
 * environment (instance, cores, limits, faults, DMA bandwidth) is read once by nrt_init.
 *
 * A child created with fork() starts uninitialised: it owns none of its parent's cores or
 * tensors (the parent's lock files are closed in the child, which leaves the parent's locks in
 * place) and may call nrt_init for cores of its own; it does not share its parent's StableHLO
 * executor either (it starts its own on next use). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hal_backends/trainium/emulator/emu_internal.h"

/* Writer preference: nrt_close must not starve behind a stream of calls (none of which takes
 * the lock twice, so the non-recursive kind is safe). */
emu_runtime_t emu_rt = {
    .lock = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP,
    .phase = EMU_PHASE_UNINIT,
};

NRT_STATUS emu_phase_check(const char *api)
{
    switch (emu_rt.phase) {
    case EMU_PHASE_READY:
        return NRT_SUCCESS;
    case EMU_PHASE_UNINIT:
        EMU_ERR(api, "called before nrt_init()");
        return NRT_UNINITIALIZED;
    case EMU_PHASE_CLOSED:
    default:
        EMU_ERR(api, "called after nrt_close()");
        return NRT_CLOSED;
    }
}

NRT_STATUS emu_enter(const char *api)
{
    pthread_rwlock_rdlock(&emu_rt.lock);
    NRT_STATUS status = emu_phase_check(api);
    if (status != NRT_SUCCESS)
        pthread_rwlock_unlock(&emu_rt.lock);
    return status;
}

void emu_leave(void)
{
    pthread_rwlock_unlock(&emu_rt.lock);
}

NRT_EMU_EXPORT NRT_STATUS nrt_init(nrt_framework_type_t framework, const char *fw_version,
                                   const char *fal_version)
{
    static const char *const api = "nrt_init";
    emu_log_configure();
    if (framework < NRT_FRAMEWORK_TYPE_NO_FW || framework > NRT_FRAMEWORK_TYPE_PRECHECK) {
        EMU_ERR(api,
                "framework %d is not a valid nrt_framework_type_t (use NO_FW=1 .. "
                "PRECHECK=5)",
                (int)framework);
        return NRT_INVALID;
    }
    if (fw_version == NULL || fal_version == NULL) {
        EMU_ERR(api, "fw_version and fal_version must be strings (\"\" with NO_FW)");
        return NRT_INVALID;
    }

    pthread_rwlock_wrlock(&emu_rt.lock);
    NRT_STATUS status = NRT_SUCCESS;
    if (emu_rt.phase == EMU_PHASE_READY) {
        EMU_ERR(api, "the runtime is already initialized; call nrt_close() first");
        status = NRT_FAILURE;
        goto out_unlock;
    }

    emu_platform_t platform;
    emu_fault_plan_t plan;
    uint64_t version[4];
    double dma_rate;
    emu_core_request_t request;
    const char *fault_spec = emu_getenv("NEURON_EMU_FAULTS");
    status = emu_version_from_env(api, version) ? NRT_SUCCESS : NRT_INVALID;
    if (status == NRT_SUCCESS)
        status = emu_platform_from_env(api, &platform);
    if (status == NRT_SUCCESS && fault_spec != NULL)
        status = emu_faults_parse("nrt_init (NEURON_EMU_FAULTS)", fault_spec, &plan);
    if (status == NRT_SUCCESS)
        status = emu_dma_parse(api, &platform, &dma_rate);
    if (status == NRT_SUCCESS)
        status = emu_cores_parse(api, &platform, &request);
    uint32_t first = 0;
    if (status == NRT_SUCCESS)
        status = emu_cores_acquire(api, &platform, &request, &first, &emu_rt.locks);
    if (status != NRT_SUCCESS)
        goto out_unlock;

    emu_rt.platform = platform;
    memcpy(emu_rt.version, version, sizeof(emu_rt.version));
    emu_rt.first_vnc = first;
    emu_rt.vnc_count = request.count;
    for (uint32_t i = 0; i < EMU_MAX_VNC; i++) {
        atomic_store(&emu_rt.vnc[i].used, 0);
        emu_rt.vnc[i].limit = i < request.count ? platform.hbm_per_vnc : 0;
    }
    emu_faults_commit(fault_spec != NULL ? &plan : NULL);
    emu_dma_commit(dma_rate);
    emu_rt.phase = EMU_PHASE_READY;
    EMU_INFO(api,
             "emulating %s: NeuronCores nc%u-nc%u (visible as 0-%u), logical core size %u, "
             "%llu bytes of device memory per core",
             platform.inst->name, first, first + request.count - 1, request.count - 1, platform.lnc,
             (unsigned long long)platform.hbm_per_vnc);

out_unlock:
    pthread_rwlock_unlock(&emu_rt.lock);
    return status;
}

NRT_EMU_EXPORT void nrt_close(void)
{
    pthread_rwlock_wrlock(&emu_rt.lock);
    if (emu_rt.phase != EMU_PHASE_READY) {
        EMU_WARN("nrt_close", "the runtime is not initialized; nothing to close");
        pthread_rwlock_unlock(&emu_rt.lock);
        return;
    }
    emu_cc_shutdown();
    emu_models_release_all();
    emu_executor_stop();
    emu_tensors_release_all();
    emu_cores_release(&emu_rt.locks);
    emu_faults_clear_latch();
    emu_rt.vnc_count = 0;
    emu_rt.phase = EMU_PHASE_CLOSED;
    pthread_rwlock_unlock(&emu_rt.lock);
}

/* The Neuron SDK release of a libnrt minor version (release notes), for the version detail. */
static const char *sdk_of(uint64_t major, uint64_t minor)
{
    static const char *const sdks[] = { "2.28.0", "2.29.0", "2.30.0", "2.31.0", "2.32.0" };
    if (major == 2 && minor >= 30 && minor - 30 < sizeof(sdks) / sizeof(sdks[0]))
        return sdks[minor - 30];
    return NULL;
}

bool emu_version_from_env(const char *api, uint64_t v[4])
{
    v[0] = EMU_NRT_MAJOR;
    v[1] = EMU_NRT_MINOR;
    v[2] = EMU_NRT_PATCH;
    v[3] = EMU_NRT_MAINTENANCE;
    const char *env = emu_getenv("NEURON_EMU_RUNTIME_VERSION");
    if (env == NULL)
        return true;
    uint64_t parsed[4] = { 0, 0, 0, 0 };
    const char *p = env;
    int n = 0;
    for (; n < 4; n++) {
        const char *end = NULL;
        if (!emu_parse_u64_prefix(p, &end, &parsed[n]))
            break;
        p = end;
        if (*p != '.')
            break;
        p++;
    }
    if (*p != '\0' || n < 1 || parsed[0] != 2 || parsed[1] > 0xffff) {
        EMU_ERR(api,
                "NEURON_EMU_RUNTIME_VERSION=%s is not a libnrt 2.x version (major.minor[.patch"
                "[.maintenance]], e.g. 2.31.24.0)",
                env);
        return false;
    }
    memcpy(v, parsed, sizeof(parsed));
    return true;
}

bool emu_version_at_least(uint64_t major, uint64_t minor)
{
    return emu_rt.version[0] > major || (emu_rt.version[0] == major && emu_rt.version[1] >= minor);
}

NRT_EMU_EXPORT_RECENT NRT_STATUS nrt_get_version(nrt_version_t *ver, size_t size)
{
    if (ver == NULL || size == 0) {
        EMU_ERR("nrt_get_version", "ver is NULL or size is 0");
        return NRT_INVALID;
    }
    uint64_t v[4];
    if (!emu_version_from_env("nrt_get_version", v))
        return NRT_INVALID;
    nrt_version_t full;
    memset(&full, 0, sizeof(full));
    full.rt_major = v[0];
    full.rt_minor = v[1];
    full.rt_patch = v[2];
    full.rt_maintenance = v[3];
    const char *sdk = sdk_of(v[0], v[1]);
    snprintf(full.rt_detail, sizeof(full.rt_detail),
             "libnrt EMULATOR (torch-hal), emulating libnrt %llu.%llu.%llu.%llu%s%s; no Neuron "
             "device is used",
             (unsigned long long)v[0], (unsigned long long)v[1], (unsigned long long)v[2],
             (unsigned long long)v[3], sdk != NULL ? " of Neuron SDK " : "",
             sdk != NULL ? sdk : "");
    strncpy(full.git_hash, "emulator", sizeof(full.git_hash) - 1);
    memcpy(ver, &full, size < sizeof(full) ? size : sizeof(full));
    return NRT_SUCCESS;
}

NRT_EMU_EXPORT_RECENT const char *nrt_get_status_as_str(NRT_STATUS status)
{
    switch (status) {
#define EMU_STATUS_NAME(x) \
    case x:                \
        return #x
        EMU_STATUS_NAME(NRT_SUCCESS);
        EMU_STATUS_NAME(NRT_FAILURE);
        EMU_STATUS_NAME(NRT_INVALID);
        EMU_STATUS_NAME(NRT_INVALID_HANDLE);
        EMU_STATUS_NAME(NRT_RESOURCE);
        EMU_STATUS_NAME(NRT_TIMEOUT);
        EMU_STATUS_NAME(NRT_HW_ERROR);
        EMU_STATUS_NAME(NRT_QUEUE_FULL);
        EMU_STATUS_NAME(NRT_LOAD_NOT_ENOUGH_NC);
        EMU_STATUS_NAME(NRT_UNSUPPORTED_NEFF_VERSION);
        EMU_STATUS_NAME(NRT_FAIL_HOST_MEM_ALLOC);
        EMU_STATUS_NAME(NRT_UNINITIALIZED);
        EMU_STATUS_NAME(NRT_CLOSED);
        EMU_STATUS_NAME(NRT_QUEUE_EMPTY);
        EMU_STATUS_NAME(NRT_EXEC_UNIT_UNRECOVERABLE);
        EMU_STATUS_NAME(NRT_EXEC_BAD_INPUT);
        EMU_STATUS_NAME(NRT_EXEC_COMPLETED_WITH_NUM_ERR);
        EMU_STATUS_NAME(NRT_EXEC_COMPLETED_WITH_ERR);
        EMU_STATUS_NAME(NRT_EXEC_NC_BUSY);
        EMU_STATUS_NAME(NRT_EXEC_OOB);
        EMU_STATUS_NAME(NRT_COLL_PENDING);
        EMU_STATUS_NAME(NRT_EXEC_HW_ERR_COLLECTIVES);
        EMU_STATUS_NAME(NRT_EXEC_HW_ERR_HBM_UE);
        EMU_STATUS_NAME(NRT_EXEC_HW_ERR_NC_UE);
        EMU_STATUS_NAME(NRT_EXEC_HW_ERR_DMA_ABORT);
        EMU_STATUS_NAME(NRT_EXEC_SW_NQ_OVERFLOW);
        EMU_STATUS_NAME(NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE);
        EMU_STATUS_NAME(NRT_NETWORK_PROXY_FAILURE);
#undef EMU_STATUS_NAME
    }
    return "UNKNOWN STATUS";
}

/* ---- fork ---- */

static void fork_prepare(void)
{
    pthread_rwlock_wrlock(&emu_rt.lock); /* waits for calls in flight */
    emu_cc_lock_for_fork();
    emu_executor_lock_for_fork();
    emu_tensors_lock_for_fork();
    emu_faults_lock_for_fork();
}

static void fork_parent(void)
{
    emu_faults_unlock_after_fork();
    emu_tensors_unlock_after_fork();
    emu_executor_unlock_after_fork();
    emu_cc_unlock_after_fork();
    pthread_rwlock_unlock(&emu_rt.lock);
}

static void fork_child(void)
{
    emu_faults_unlock_after_fork();
    emu_tensors_unlock_after_fork();
    emu_executor_unlock_after_fork();
    emu_executor_reset_after_fork();
    emu_cc_unlock_after_fork();
    emu_cc_reset_after_fork();
    if (emu_rt.phase == EMU_PHASE_READY) {
        emu_models_release_all();
        emu_tensors_release_all();
        emu_cores_release(&emu_rt.locks);
        emu_rt.vnc_count = 0;
    }
    emu_rt.phase = EMU_PHASE_UNINIT;
    emu_faults_clear_latch();
    emu_dma_reset_after_fork();
    /* glibc records the writer by thread id, which changed in the child, so an unlock here does
     * not release the lock properly: it is made anew. The unlock before that is for race
     * detectors (ThreadSanitizer), which would otherwise still see it held. */
    pthread_rwlock_unlock(&emu_rt.lock);
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&emu_rt.lock, &attr);
    pthread_rwlockattr_destroy(&attr);
}

__attribute__((constructor)) static void emu_state_load(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}
