/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: devices. A device is one visible logical NeuronCore; its index is the
 * runtime's vnc, relative to the set the process owns (NEURON_RT_VISIBLE_CORES=4-5 gives
 * devices 0 and 1). Properties come from nrt_get_instance_info and nrt_get_vnc_memory_stats
 * where the runtime has them (both are optional: without them the name carries only the core
 * number, and the memory size is the instance's HBM share, or 0 when the instance is unknown).
 *
 * Device loss is sticky: after a hardware error the core reports HAL_ERROR_DEVICE_LOST from
 * allocations and from every one of its streams until the backend is closed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/trainium/trn_internal.h"

/* ---- naming -------------------------------------------------------------------------------- */

/* Instance family prefix ("trn1") and the NeuronCore generation of its chips. */
static void family_names(uint32_t family, const char **prefix, const char **core)
{
    *prefix = NULL;
    *core = "NeuronCore";
    switch (family) {
    case NRT_INSTANCE_INF1:
        *prefix = "inf1";
        *core = "NeuronCore-v1";
        break;
    case NRT_INSTANCE_TRN1:
        *prefix = "trn1";
        *core = "NeuronCore-v2";
        break;
    case NRT_INSTANCE_TRN1N:
        *prefix = "trn1n";
        *core = "NeuronCore-v2";
        break;
    case NRT_INSTANCE_INF2:
        *prefix = "inf2";
        *core = "NeuronCore-v2";
        break;
    case NRT_INSTANCE_INF2E:
        *prefix = "inf2e";
        *core = "NeuronCore-v2";
        break;
    case NRT_INSTANCE_TRN2:
        *prefix = "trn2";
        *core = "NeuronCore-v3";
        break;
    case NRT_INSTANCE_TRN2N:
        *prefix = "trn2n";
        *core = "NeuronCore-v3";
        break;
    case NRT_INSTANCE_TRN2P:
        *prefix = "trn2p";
        *core = "NeuronCore-v3";
        break;
    case NRT_INSTANCE_TRN2U:
        *prefix = "trn2u";
        *core = "NeuronCore-v3";
        break;
    case NRT_INSTANCE_TRN2E:
        *prefix = "trn2e";
        *core = "NeuronCore-v3";
        break;
    case NRT_INSTANCE_TRN2EU:
        *prefix = "trn2eu";
        *core = "NeuronCore-v3";
        break;
    case NRT_INSTANCE_TRN2AC:
        *prefix = "trn2ac";
        *core = "NeuronCore-v3";
        break;
    case NRT_INSTANCE_TRN2UAC:
        *prefix = "trn2uac";
        *core = "NeuronCore-v3";
        break;
    case NRT_INSTANCE_TRN3:
    case NRT_INSTANCE_TRN3PDS98:
        *prefix = "trn3";
        *core = "NeuronCore-v4";
        break;
    default:
        break;
    }
}

static const char *size_name(uint32_t size)
{
    static const char *const names[] = {
        [NRT_INSTANCE_SIZE_1XL] = "xlarge",    [NRT_INSTANCE_SIZE_2XL] = "2xlarge",
        [NRT_INSTANCE_SIZE_4XL] = "4xlarge",   [NRT_INSTANCE_SIZE_6XL] = "6xlarge",
        [NRT_INSTANCE_SIZE_8XL] = "8xlarge",   [NRT_INSTANCE_SIZE_24XL] = "24xlarge",
        [NRT_INSTANCE_SIZE_32XL] = "32xlarge", [NRT_INSTANCE_SIZE_48XL] = "48xlarge",
        [NRT_INSTANCE_SIZE_3XL] = "3xlarge",
    };
    return size < sizeof(names) / sizeof(names[0]) ? names[size] : NULL;
}

/* "NeuronCore-v2 (trn1.32xlarge) 0". */
/* The name numbers the core on the instance where the process knows it (node_index), so that
 * two processes name their cores apart. */
static void device_name(const trn_device_t *device, char *out, size_t size)
{
    const trn_backend_t *b = device->backend;
    const char *prefix = NULL, *core = "NeuronCore", *sz = NULL;
    unsigned number = b->node_count != 0 ? b->node_first + device->index : device->index;
    if (b->have_instance) {
        family_names(b->instance.family, &prefix, &core);
        sz = size_name(b->instance.size);
        if (prefix == NULL && b->instance.arch_name[0] != '\0')
            prefix = b->instance.arch_name; /* a family newer than these declarations */
    }
    if (prefix != NULL && sz != NULL)
        snprintf(out, size, "%s (%.16s.%s) %u", core, prefix, sz, number);
    else if (prefix != NULL)
        snprintf(out, size, "%s (%.16s) %u", core, prefix, number);
    else
        snprintf(out, size, "%s %u", core, number);
}

/* Device memory per logical core when the runtime does not report it: the instance's HBM
 * (chips x HBM per chip) shared equally by its logical cores. 0 if unknown. */
static uint64_t fallback_memory(const trn_backend_t *b)
{
    if (!b->have_instance || b->total_vnc == 0)
        return 0;
    const uint64_t gib = UINT64_C(1) << 30;
    uint64_t per_chip = 0, chips = 0;
    const char *prefix, *core;
    family_names(b->instance.family, &prefix, &core);
    if (strcmp(core, "NeuronCore-v2") == 0)
        per_chip = 32 * gib;
    else if (strcmp(core, "NeuronCore-v3") == 0)
        per_chip = 96 * gib;
    else if (strcmp(core, "NeuronCore-v4") == 0)
        per_chip = 144 * gib;
    switch (b->instance.size) {
    case NRT_INSTANCE_SIZE_1XL:
    case NRT_INSTANCE_SIZE_2XL:
    case NRT_INSTANCE_SIZE_3XL:
    case NRT_INSTANCE_SIZE_8XL:
        chips = 1;
        break;
    case NRT_INSTANCE_SIZE_24XL:
        chips = 6;
        break;
    case NRT_INSTANCE_SIZE_32XL:
    case NRT_INSTANCE_SIZE_48XL:
        chips = b->instance.family == NRT_INSTANCE_INF2 ? 12 : 16;
        break;
    default:
        break;
    }
    return per_chip * chips / b->total_vnc;
}

/* ---- open / close -------------------------------------------------------------------------- */

hal_status_t trn_device_open(void *backend_, uint32_t index, void **out)
{
    trn_backend_t *backend = backend_;
    trn_device_t *device = calloc(1, sizeof(*device));
    if (device == NULL) {
        trn_set_error(backend, "calloc(%zu) failed for NeuronCore %u", sizeof(*device), index);
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    device->backend = backend;
    device->index = index;

    /* Before the runtime started (the usual case: devices open with the backend) the memory is
     * the instance's share; the runtime is not asked before nrt_init. */
    nrt_vnc_memory_stats_t stats = { 0, 0 };
    size_t got = 0;
    NRT_STATUS rc = backend->nrt.get_vnc_memory_stats != NULL && trn_runtime_up(backend)
                        ? backend->nrt.get_vnc_memory_stats(index, &stats, sizeof(stats), &got)
                        : NRT_FAILURE;
    if (rc == NRT_SUCCESS &&
        got >= offsetof(nrt_vnc_memory_stats_t, bytes_limit) + sizeof(stats.bytes_limit) &&
        stats.bytes_limit > 0)
        device->total_memory = stats.bytes_limit;
    else
        device->total_memory = fallback_memory(backend);

    /* Waiters (the stream's worker between tasks, synchronize callers, slot waiters) spin
     * TRN_SPIN_US before they sleep: a futex sleep and wake-up costs 5 to 20 us on each side of
     * a short runtime call, and spinning briefly is cheap next to the calls that take longer.
     * Callbacks and host functions hold none of the core's two slots, so that a blocked stream
     * never starves it. */
    hq_device_config_t streams = {
        .host = backend->host,
        .index = index,
        .thread_prefix = "hal-trn",
        .slots = TRN_DEVICE_SLOTS,
        .spin_us = TRN_SPIN_US,
        .callbacks_take_slot = false,
        .stream_ext_size = sizeof(trn_stream_ext_t),
        .stream_ext_fini = trn_stream_ext_fini,
    };
    hal_status_t st = hq_device_init(&device->hq, &streams);
    if (st != HAL_OK) {
        free(device);
        return st;
    }
    *out = device;
    return HAL_OK;
}

void trn_device_close(void *device_)
{
    trn_device_t *device = device_;
    hq_device_fini(&device->hq);
    free(device);
}

/* ---- queries ------------------------------------------------------------------------------- */

/* Writes a field only if it lies inside the caller's struct_size. */
#define TRN_PROPS_HAS(props, field) \
    HAL_STRUCT_HAS(hal_device_properties_t, field, (props)->struct_size)

hal_status_t trn_device_get_properties(void *device_, hal_device_properties_t *props)
{
    trn_device_t *device = device_;
    if (TRN_PROPS_HAS(props, name))
        device_name(device, props->name, sizeof(props->name));
    if (TRN_PROPS_HAS(props, vendor))
        snprintf(props->vendor, sizeof(props->vendor), "AWS");
    if (TRN_PROPS_HAS(props, index))
        props->index = device->index;
    if (TRN_PROPS_HAS(props, host_addressable))
        props->host_addressable = 0;
    if (TRN_PROPS_HAS(props, total_memory))
        props->total_memory = device->total_memory;
    /* PEER_COPY: device-to-device copies across cores are staged through host memory (the
     * runtime's nrt_tensor_copy only copies within one core). */
    const trn_nrt_t *nrt = &device->backend->nrt;
    if (TRN_PROPS_HAS(props, capabilities))
        props->capabilities = HAL_DEVICE_CAP_TIMING_EVENTS | HAL_DEVICE_CAP_HOST_CALLBACKS |
                              HAL_DEVICE_CAP_PEER_COPY |
                              (nrt->have_programs ? HAL_DEVICE_CAP_PROGRAMS : 0) |
                              (device->backend->cc_api != TRN_CC_NONE && device->backend->cc_enabled
                                   ? HAL_DEVICE_CAP_NATIVE_COLLECTIVES
                                   : 0);
    if (TRN_PROPS_HAS(props, stream_priority_least))
        props->stream_priority_least = TRN_PRIORITY_LEAST;
    if (TRN_PROPS_HAS(props, stream_priority_greatest))
        props->stream_priority_greatest = TRN_PRIORITY_GREATEST;
    if (TRN_PROPS_HAS(props, alignment))
        props->alignment = TRN_MIN_ALIGNMENT;
    /* StableHLO: compiled to NEFF where the Neuron compiler is installed, executed in place of
     * NEFF by the libnrt emulator (trn_program.c). */
    bool stablehlo = device->backend->compiler.found || nrt->emu_stablehlo_status != NULL;
    if (TRN_PROPS_HAS(props, program_formats))
        props->program_formats = !nrt->have_programs
                                     ? 0
                                     : (1u << HAL_PROGRAM_FORMAT_NEFF) |
                                           (stablehlo ? 1u << HAL_PROGRAM_FORMAT_STABLEHLO : 0);
    if (TRN_PROPS_HAS(props, node_device_count) && device->backend->node_count != 0) {
        props->node_index = device->backend->node_first + device->index;
        props->node_device_count = device->backend->node_count;
    }
    return HAL_OK;
}

/* The native handle is the runtime's core index (the vnc argument of nrt_tensor_allocate). */
hal_status_t trn_device_get_native_handle(void *device, uintptr_t *native)
{
    *native = ((trn_device_t *)device)->index;
    return HAL_OK;
}

hal_status_t trn_device_get_free_memory(void *device_, uint64_t *free_bytes)
{
    trn_device_t *device = device_;
    trn_backend_t *backend = device->backend;
    if (backend->nrt.get_vnc_memory_stats == NULL) {
        trn_set_error(backend, "the runtime has no nrt_get_vnc_memory_stats: free device memory "
                               "is not known");
        return HAL_ERROR_UNSUPPORTED;
    }
    if (!trn_runtime_up(backend)) { /* nothing allocated yet; asking does not take the core */
        *free_bytes = device->total_memory;
        return HAL_OK;
    }
    nrt_vnc_memory_stats_t stats = { 0, 0 };
    size_t got = 0;
    NRT_STATUS rc = backend->nrt.get_vnc_memory_stats(device->index, &stats, sizeof(stats), &got);
    if (rc != NRT_SUCCESS) {
        char msg[TRN_MSG_MAX];
        hal_status_t st = trn_status_format(&backend->nrt, rc, TRN_OP_OTHER, msg, sizeof(msg),
                                            "nrt_get_vnc_memory_stats(vnc %u)", device->index);
        trn_set_error(backend, "%s", msg);
        return st;
    }
    uint64_t limit = stats.bytes_limit > 0 ? stats.bytes_limit : device->total_memory;
    *free_bytes = stats.bytes_used < limit ? limit - stats.bytes_used : 0;
    return HAL_OK;
}

/* ---- loss ---------------------------------------------------------------------------------- */

void trn_device_mark_lost(trn_device_t *device, const char *why)
{
    hq_device_mark_lost(&device->hq, "NeuronCore %u is lost: %s", device->index, why);
}
