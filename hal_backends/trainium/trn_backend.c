/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: entry point, ops table, and the runtime's lifetime (nrt_init when the
 * process first needs the runtime, nrt_close at fini). The runtime is process-wide state: one
 * initialised backend instance per process owns it. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hal_backends/trainium/trn_internal.h"

/* Under torchrun (LOCAL_RANK and WORLD_SIZE set) a process that chose no NeuronCores takes the
 * core of its local rank, as Neuron users do by hand: the runtime takes every visible core
 * exclusively at nrt_init, so ranks on one host must each ask for their own. The choice is made
 * through the runtime's own variable, before nrt_init reads it. */
static void claim_local_rank_core(void)
{
    const char *visible = getenv("NEURON_RT_VISIBLE_CORES");
    const char *num = getenv("NEURON_RT_NUM_CORES");
    const char *local_rank = getenv("LOCAL_RANK");
    const char *world = getenv("WORLD_SIZE");
    if ((visible != NULL && visible[0] != '\0') || (num != NULL && num[0] != '\0') ||
        local_rank == NULL || local_rank[0] == '\0' || world == NULL || world[0] == '\0')
        return;
    for (const char *c = local_rank; *c; c++)
        if (*c < '0' || *c > '9')
            return;
    /* The backend is initialised once per process, before any device work exists. */
    setenv("NEURON_RT_VISIBLE_CORES", local_rank, 0);
}

/* Where this process's cores sit among the instance's, so that device indices can mean the
 * same on every process of a node (hal_device_properties_t.node_index). NEURON_RT_VISIBLE_CORES
 * is one increasing range (nrt_init has checked it): the visible cores start at its smallest
 * index. Without either variable the process has every core. With NEURON_RT_NUM_CORES the
 * runtime picked free cores and does not say which: the position stays unknown. */
static void find_node_position(trn_backend_t *backend)
{
    const char *visible = getenv("NEURON_RT_VISIBLE_CORES");
    const char *num = getenv("NEURON_RT_NUM_CORES");
    uint32_t total = backend->total_vnc, count = backend->device_count;
    if (total == 0 || count == 0 || count > total)
        return;
    if (visible != NULL && visible[0] != '\0') {
        unsigned long first = ULONG_MAX;
        for (const char *c = visible; *c != '\0';) {
            if (*c < '0' || *c > '9') {
                c++;
                continue;
            }
            char *end = NULL;
            unsigned long v = strtoul(c, &end, 10);
            first = v < first ? v : first;
            c = end;
        }
        if (first == ULONG_MAX || first > total - count)
            return;
        backend->node_first = (uint32_t)first;
        backend->node_count = total;
    } else if ((num == NULL || num[0] == '\0') && count == total) {
        backend->node_first = 0;
        backend->node_count = total;
    }
}

/* Appends "; <fmt>" to the path line. */
static void path_append(trn_backend_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void path_append(trn_backend_t *b, const char *fmt, ...)
{
    size_t used = strlen(b->path_line);
    if (used >= sizeof(b->path_line))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->path_line + used, sizeof(b->path_line) - used, fmt, ap);
    va_end(ap);
}

/* Composes the path line: which runtime was loaded and, for each thing a runtime may lack, the
 * path taken. Returns whether the runtime forced a fallback (an optional function missing, or no
 * native collectives). */
static bool compose_path_line(trn_backend_t *b)
{
    const trn_nrt_t *nrt = &b->nrt;
    b->path_line[0] = '\0';
    if (nrt->have_version)
        path_append(b, "trainium: libnrt %llu.%llu.%llu.%llu at %s",
                    (unsigned long long)nrt->version[0], (unsigned long long)nrt->version[1],
                    (unsigned long long)nrt->version[2], (unsigned long long)nrt->version[3],
                    nrt->path);
    else
        path_append(b, "trainium: libnrt of unknown version (%s) at %s",
                    nrt->get_version == NULL ? "no nrt_get_version" : "nrt_get_version failed",
                    nrt->path);
    if (b->cc_api != TRN_CC_NONE && b->cc_enabled)
        path_append(b,
                    "; collectives: native all-reduce, all-gather, reduce-scatter (out-of-NEFF, "
                    "async API %d%s), the others host-staged",
                    b->cc_api == TRN_CC_V3 ? 3 : 2,
                    b->cc_api == TRN_CC_V2 ? ", in place through a copy" : "");
    else if (b->cc_api != TRN_CC_NONE)
        path_append(b, "; collectives: host-staged (HAL_NEURON_NATIVE_COLLECTIVES=0)");
    else
        path_append(b, "; collectives: host-staged (%s)", b->cc_reason);
    if (nrt->has_cc_create_stream || nrt->has_cc_prepare_coalesced)
        path_append(b, "; not used (no published signature):%s%s",
                    nrt->has_cc_create_stream ? " nrt_cc_create_stream" : "",
                    nrt->has_cc_prepare_coalesced ? " nrta_cc_prepare_coalesced" : "");
    if (nrt->get_vnc_memory_stats != NULL)
        path_append(b, "; memory: from the runtime");
    else
        path_append(b, "; memory: %s (no nrt_get_vnc_memory_stats), free memory unknown",
                    b->have_instance ? "the instance's HBM share" : "unknown");
    if (nrt->get_instance_info == NULL)
        path_append(b, "; device names: core numbers only (no nrt_get_instance_info)");
    if (nrt->get_total_vnc_count == NULL)
        path_append(b, "; node position: unknown (no nrt_get_total_vnc_count)");
    if (!nrt->have_programs)
        path_append(b, "; programs: none (the runtime lacks part of nrt_load ... "
                       "nrt_get_model_tensor_info)");
    else if (b->compiler.found)
        path_append(b, "; StableHLO programs: compiled by %s", b->compiler.path);
    else if (nrt->emu_stablehlo_status != NULL)
        path_append(b, "; StableHLO programs: executed by the libnrt emulator (no Neuron "
                       "compiler)");
    else if (b->compiler.named)
        path_append(b, "; StableHLO programs: none (%s=%s is not an executable)", TRN_ENV_NEURON_CC,
                    b->compiler.path);
    if (nrt->missing[0] != '\0')
        path_append(b, "; missing: %s", nrt->missing);
    return nrt->missing[0] != '\0' || b->cc_api == TRN_CC_NONE;
}

/* NEURON_RT_LOG_LEVEL asks for INFO or more (the runtime's own verbosity variable). */
static bool log_level_info(void)
{
    const char *level = getenv("NEURON_RT_LOG_LEVEL");
    return level != NULL && (strcasecmp(level, "INFO") == 0 || strcasecmp(level, "DEBUG") == 0 ||
                             strcasecmp(level, "TRACE") == 0);
}

/* The path line goes to stderr when the backend is opened, if the runtime forced a fallback
 * (which a user should learn of) or NEURON_RT_LOG_LEVEL asks for INFO. */
static void log_path_line(trn_backend_t *b)
{
    bool forced = compose_path_line(b);
    if (forced || log_level_info())
        fprintf(stderr, "%s\n", b->path_line);
}

/* nrt_init, as trn_runtime_require calls it (runtime_lock held). */
static hal_status_t runtime_start(trn_backend_t *backend)
{
    trn_nrt_t *nrt = &backend->nrt;
    char msg[TRN_MSG_MAX + 128];
    NRT_STATUS rc = nrt->init(NRT_FRAMEWORK_TYPE_PYTORCH, "", "");
    if (rc != NRT_SUCCESS) {
        hal_status_t st =
            trn_status_format(nrt, rc, TRN_OP_OTHER, msg, sizeof(msg),
                              "nrt_init(NRT_FRAMEWORK_TYPE_PYTORCH) of %s", nrt->path);
        if (rc == NRT_FAILURE)
            trn_set_error(backend,
                          "%s (NeuronCores are owned exclusively by one process: another process, "
                          "such as the parent of this one, may hold them; "
                          "NEURON_RT_VISIBLE_CORES or NEURON_RT_NUM_CORES choose which cores this "
                          "process takes)",
                          msg);
        else
            trn_set_error(backend, "%s", msg);
        return st;
    }
    /* The cores the runtime took are the ones counted at open (the same variables). */
    uint32_t count = 0;
    rc = nrt->get_visible_vnc_count(&count);
    if (rc != NRT_SUCCESS || count != backend->device_count) {
        if (rc != NRT_SUCCESS)
            trn_status_format(nrt, rc, TRN_OP_OTHER, msg, sizeof(msg),
                              "nrt_get_visible_vnc_count after nrt_init");
        else
            snprintf(msg, sizeof(msg),
                     "nrt_init took %u NeuronCores where %u were counted when the backend "
                     "opened (NEURON_RT_VISIBLE_CORES or NEURON_RT_NUM_CORES changed between)",
                     count, backend->device_count);
        trn_set_error(backend, "%s", msg);
        nrt->close();
        return HAL_ERROR_BACKEND_SPECIFIC;
    }
    atomic_store_explicit(&backend->runtime_up, true, memory_order_release);
    return HAL_OK;
}

hal_status_t trn_runtime_require(trn_backend_t *backend)
{
    if (trn_runtime_up(backend))
        return HAL_OK;
    pthread_mutex_lock(&backend->runtime_lock);
    hal_status_t st = trn_runtime_up(backend) ? HAL_OK : runtime_start(backend);
    pthread_mutex_unlock(&backend->runtime_lock);
    return st;
}

/* Opens the backend without starting the runtime: the counts the runtime documents as callable
 * before nrt_init say how many cores this process will take and where they sit. */
static hal_status_t trn_init(const hal_host_services_t *host, void **out)
{
    trn_backend_t *backend = calloc(1, sizeof(*backend));
    if (backend == NULL) {
        trn_backend_t tmp = { .host = host };
        trn_set_error(&tmp, "calloc(%zu) failed for the backend object", sizeof(*backend));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    backend->host = host;
    char msg[TRN_MSG_MAX + 128];
    hal_status_t st = trn_nrt_load(&backend->nrt, msg, sizeof(msg));
    if (st != HAL_OK) {
        trn_set_error(backend, "%s", msg);
        free(backend);
        return st;
    }
    trn_nrt_t *nrt = &backend->nrt;

    claim_local_rank_core();
    uint32_t count = 0;
    NRT_STATUS rc = nrt->get_visible_vnc_count(&count);
    if (rc != NRT_SUCCESS) {
        st = trn_status_format(nrt, rc, TRN_OP_OTHER, msg, sizeof(msg),
                               "nrt_get_visible_vnc_count of %s", nrt->path);
        trn_set_error(backend,
                      "%s (NEURON_RT_VISIBLE_CORES or NEURON_RT_NUM_CORES choose the cores this "
                      "process takes: a range or a count the instance has)",
                      msg);
        trn_nrt_unload(&backend->nrt);
        free(backend);
        return st;
    }
    backend->device_count = count;

    /* Instance facts only name devices and size a fallback; their absence is not an error. */
    memset(&backend->instance, 0, sizeof(backend->instance));
    backend->have_instance =
        nrt->get_instance_info != NULL &&
        nrt->get_instance_info(&backend->instance, sizeof(backend->instance)) == NRT_SUCCESS;
    uint32_t total = 0;
    if (nrt->get_total_vnc_count != NULL && nrt->get_total_vnc_count(&total) == NRT_SUCCESS)
        backend->total_vnc = total;
    find_node_position(backend);
    pthread_mutex_init(&backend->runtime_lock, NULL);
    atomic_init(&backend->runtime_up, false);
    trn_cc_setup(backend);
    trn_compiler_find(&backend->compiler);
    log_path_line(backend);
    *out = backend;
    return HAL_OK;
}

/* Called after the core closed every device (so every stream worker has been joined and every
 * tensor freed). */
static void trn_fini(void *backend_)
{
    trn_backend_t *backend = backend_;
    if (trn_runtime_up(backend)) {
        if (backend->nrt.have_cc)
            trn_cc_reap(backend, true);
        backend->nrt.close();
    }
    /* Requests the runtime had when they were given up: nrt_close ended them. */
    trn_cc_reap(backend, false);
    pthread_mutex_destroy(&backend->runtime_lock);
    pthread_mutex_destroy(&backend->cc_lock);
    trn_compiler_fini(&backend->compiler);
    trn_nrt_unload(&backend->nrt);
    free(backend);
}

static hal_status_t trn_device_count(void *backend, uint32_t *count)
{
    *count = ((trn_backend_t *)backend)->device_count;
    return HAL_OK;
}

/* libnrt has no stream object: its calls are synchronous, and the ordering lives in the
 * engine's worker threads. */
static hal_status_t trn_stream_get_native_handle(void *stream, uintptr_t *native)
{
    trn_device_t *device = (trn_device_t *)hq_stream_device(stream);
    trn_set_error(device->backend,
                  "libnrt has no stream object (its calls are synchronous; the backend orders "
                  "them on a worker thread per stream)");
    return HAL_ERROR_UNSUPPORTED;
}

/* libnrt 2.30's synchronous API has no event object (the experimental async API's sequence
 * numbers are per execution unit, not per stream). */
static hal_status_t trn_event_get_native_handle(void *event, uintptr_t *native)
{
    trn_device_t *device = (trn_device_t *)hq_event_device(event);
    trn_set_error(device->backend,
                  "libnrt has no event object; events are kept by the backend's stream workers");
    return HAL_ERROR_UNSUPPORTED;
}

static const hal_backend_ops_t trn_ops = {
    .struct_size = sizeof(hal_backend_ops_t),
    .api_version = HAL_API_VERSION,
    /* nrt_init (at the process's first use of a device) takes its NeuronCores exclusively. */
    .flags = HAL_BACKEND_FLAG_EXCLUSIVE_DEVICES,
    .name = TRN_BACKEND_NAME,
    .device_type_name = TRN_DEVICE_TYPE,
    .init = trn_init,
    .fini = trn_fini,
    .device_count = trn_device_count,
    .device_open = trn_device_open,
    .device_close = trn_device_close,
    .device_get_properties = trn_device_get_properties,
    /* Streams and events: the engine's slots, as they are. */
    HQ_REQUIRED_SLOTS,
    .device_get_native_handle = trn_device_get_native_handle,
    .device_get_free_memory = trn_device_get_free_memory,
    .mem_alloc = trn_mem_alloc,
    .mem_free = trn_mem_free,
    .memcpy_async = trn_memcpy_async,
    .memset_async = trn_memset_async,
    .stream_add_callback = hq_stream_add_callback,
    .stream_get_native_handle = trn_stream_get_native_handle,
    .event_elapsed_ms = hq_event_elapsed_ms,
    .event_get_native_handle = trn_event_get_native_handle,
    /* NULL: the core frees from a host callback in stream order, which is all this backend
     * could do too (nrt_tensor_free is synchronous). */
    .mem_free_async = NULL,

    /* ---- 1.1 ---- */
    /* No HAL_DEVICE_CAP_IPC: libnrt 2.30 has no way to map one process's tensor into another
     * (nrt_get_dmabuf_fd exports for NICs, not for other runtime instances). */
    .mem_ipc_export = NULL,
    .mem_ipc_open = NULL,
    .mem_ipc_close = NULL,

    /* Native collectives over libnrt's out-of-NEFF collectives (trn_comm.c, trn_comm_ops.c):
     * all-reduce, all-gather and reduce-scatter. comm_init decides per communicator, with its
     * ranks, whether the runtime runs them (it returns no communicator where it does not: the
     * HAL's host-staged collectives then serve that communicator). Broadcast, reduce,
     * all-to-all and send/recv have no host-driven call in the runtime: NULL, the HAL runs them
     * on the host, in stream order with the native ones. */
    .comm_init = trn_comm_init,
    .comm_destroy = trn_comm_destroy,
    .comm_abort = trn_comm_abort,
    .comm_get_async_error = trn_comm_get_async_error,
    .comm_get_native_handle = trn_comm_get_native_handle,
    .allreduce = trn_allreduce,
    .broadcast = NULL,
    .reduce = NULL,
    .allgather = trn_allgather,
    .reduce_scatter = trn_reduce_scatter,
    .alltoall = NULL,
    .send = NULL,
    .recv = NULL,
    .group_begin = NULL,
    .group_end = NULL,
    /* ---- 1.2 ---- */
    .program_create = trn_program_create,
    .program_destroy = trn_program_destroy,
    .program_get_kernel = trn_program_get_kernel,
    .kernel_get_tensor_info = trn_kernel_get_tensor_info,
    .kernel_launch = trn_kernel_launch,
};

/* The one exported symbol. */
HAL_BACKEND_DEFINE_ENTRY(trn_ops)
