/* SPDX-License-Identifier: Apache-2.0 */
/* libnrt emulator: the instance types it can pretend to be, and nrt_get_instance_info.
 *
 * Numbers come from AWS's published hardware descriptions:
 *   Trainium (Trn1) and Inferentia2: 2 NeuronCore-v2 per device, 32 GiB HBM per device,
 *     1 TB/s DMA per device. trn1.2xlarge has 1 device, trn1.32xlarge and trn1n.32xlarge 16;
 *     inf2.xlarge and inf2.8xlarge 1, inf2.24xlarge 6, inf2.48xlarge 12.
 *   Trainium2 (Trn2): 8 NeuronCore-v3 per device, 96 GiB HBM per device in 4 stacks of 24 GiB,
 *     each shared by 2 physical cores, 3.5 TB/s DMA per device; trn2.48xlarge and
 *     trn2u.48xlarge have 16 devices. A logical core groups NEURON_LOGICAL_NC_CONFIG physical
 *     cores (1 or 2, default 2): 64 logical cores of 24 GiB, or 128 of 12 GiB.
 * The emulator gives each logical core an equal, private share of its device's HBM. */
#include <string.h>

#include "hal_backends/trainium/emulator/emu_internal.h"

#define GIB (UINT64_C(1) << 30)

static const emu_instance_t instances[] = {
    { "trn1.2xlarge", NRT_INSTANCE_TRN1, NRT_INSTANCE_SIZE_2XL, "trn1", 1, 2, 1, 32 * GIB, 1, false,
      1000.0 },
    { "trn1.32xlarge", NRT_INSTANCE_TRN1, NRT_INSTANCE_SIZE_32XL, "trn1", 16, 2, 1, 32 * GIB, 1,
      false, 1000.0 },
    { "trn1n.32xlarge", NRT_INSTANCE_TRN1N, NRT_INSTANCE_SIZE_32XL, "trn1", 16, 2, 1, 32 * GIB, 1,
      false, 1000.0 },
    { "trn2.48xlarge", NRT_INSTANCE_TRN2, NRT_INSTANCE_SIZE_48XL, "trn2", 16, 8, 4, 96 * GIB, 2,
      true, 3500.0 },
    { "trn2u.48xlarge", NRT_INSTANCE_TRN2U, NRT_INSTANCE_SIZE_48XL, "trn2", 16, 8, 4, 96 * GIB, 2,
      true, 3500.0 },
    { "inf2.xlarge", NRT_INSTANCE_INF2, NRT_INSTANCE_SIZE_1XL, "inf2", 1, 2, 1, 32 * GIB, 1, false,
      1000.0 },
    { "inf2.8xlarge", NRT_INSTANCE_INF2, NRT_INSTANCE_SIZE_8XL, "inf2", 1, 2, 1, 32 * GIB, 1, false,
      1000.0 },
    { "inf2.24xlarge", NRT_INSTANCE_INF2, NRT_INSTANCE_SIZE_24XL, "inf2", 6, 2, 1, 32 * GIB, 1,
      false, 1000.0 },
    { "inf2.48xlarge", NRT_INSTANCE_INF2, NRT_INSTANCE_SIZE_48XL, "inf2", 12, 2, 1, 32 * GIB, 1,
      false, 1000.0 },
};

#define DEFAULT_INSTANCE "trn1.32xlarge"

static NRT_STATUS parse_lnc(const char *api, const char *var, uint32_t *lnc)
{
    const char *value = emu_getenv(var);
    if (value == NULL)
        return NRT_SUCCESS;
    if (strcmp(value, "1") == 0 || strcmp(value, "2") == 0) {
        *lnc = (uint32_t)(value[0] - '0');
        return NRT_SUCCESS;
    }
    EMU_ERR(api, "%s=%s: the logical NeuronCore size must be 1 or 2", var, value);
    return NRT_INVALID;
}

NRT_STATUS emu_platform_from_env(const char *api, emu_platform_t *out)
{
    const char *name = emu_getenv("NEURON_EMU_INSTANCE");
    if (name == NULL)
        name = DEFAULT_INSTANCE;
    const emu_instance_t *inst = NULL;
    for (size_t i = 0; i < sizeof(instances) / sizeof(instances[0]); i++) {
        if (strcmp(instances[i].name, name) == 0)
            inst = &instances[i];
    }
    if (inst == NULL) {
        EMU_ERR(api,
                "NEURON_EMU_INSTANCE=%s is not an emulated instance type (known: trn1.2xlarge, "
                "trn1.32xlarge, trn1n.32xlarge, trn2.48xlarge, trn2u.48xlarge, inf2.xlarge, "
                "inf2.8xlarge, inf2.24xlarge, inf2.48xlarge)",
                name);
        return NRT_INVALID;
    }

    uint32_t lnc_config = 0, lnc_core_size = 0;
    NRT_STATUS status = parse_lnc(api, "NEURON_LOGICAL_NC_CONFIG", &lnc_config);
    if (status == NRT_SUCCESS)
        status = parse_lnc(api, "NEURON_RT_VIRTUAL_CORE_SIZE", &lnc_core_size);
    if (status != NRT_SUCCESS)
        return status;
    if (lnc_config != 0 && lnc_core_size != 0 && lnc_config != lnc_core_size) {
        EMU_ERR(api, "NEURON_LOGICAL_NC_CONFIG=%u and NEURON_RT_VIRTUAL_CORE_SIZE=%u disagree",
                lnc_config, lnc_core_size);
        return NRT_INVALID;
    }
    uint32_t lnc = lnc_config != 0 ? lnc_config : lnc_core_size;
    if (lnc == 0)
        lnc = inst->default_lnc;
    if (lnc != 1 && !inst->lnc_configurable) {
        EMU_ERR(api, "a logical NeuronCore size of %u applies to Trn2 only, not to %s", lnc,
                inst->name);
        return NRT_INVALID;
    }

    out->inst = inst;
    out->lnc = lnc;
    out->vnc_per_chip = inst->cores_per_chip / lnc;
    out->total_vnc = inst->chips * out->vnc_per_chip;
    out->hbm_per_vnc = inst->hbm_bytes_per_chip / out->vnc_per_chip;

    const char *hbm = emu_getenv("NEURON_EMU_HBM_BYTES");
    if (hbm != NULL) {
        uint64_t bytes;
        if (!emu_parse_bytes(hbm, &bytes)) {
            EMU_ERR(api,
                    "NEURON_EMU_HBM_BYTES=%s: expected a positive byte count, optionally with "
                    "a K, M, G or T suffix (e.g. 64M)",
                    hbm);
            return NRT_INVALID;
        }
        out->hbm_per_vnc = bytes;
    }
    return NRT_SUCCESS;
}

int emu_platform_hbm_index(const emu_platform_t *p, uint32_t abs_vnc)
{
    uint32_t first_phys = (abs_vnc % p->vnc_per_chip) * p->lnc;
    uint32_t phys_per_hbm = p->inst->cores_per_chip / p->inst->hbm_per_chip;
    return (int)(first_phys / phys_per_hbm);
}

NRT_EMU_EXPORT_RECENT NRT_STATUS nrt_get_instance_info(nrt_instance_info_t *info,
                                                       size_t instance_info_len)
{
    static const char *const api = "nrt_get_instance_info";
    if (info == NULL) {
        EMU_ERR(api, "info is NULL");
        return NRT_INVALID;
    }
    if (instance_info_len < offsetof(nrt_instance_info_t, arch_name)) {
        EMU_ERR(api, "instance_info_len %zu is smaller than the family and size fields",
                instance_info_len);
        return NRT_INVALID;
    }
    emu_platform_t platform;
    pthread_rwlock_rdlock(&emu_rt.lock);
    bool ready = emu_rt.phase == EMU_PHASE_READY;
    if (ready)
        platform = emu_rt.platform;
    pthread_rwlock_unlock(&emu_rt.lock);
    if (!ready) {
        NRT_STATUS status = emu_platform_from_env(api, &platform);
        if (status != NRT_SUCCESS)
            return status;
    }

    nrt_instance_info_t full;
    memset(&full, 0, sizeof(full));
    full.family = platform.inst->family;
    full.size = platform.inst->size;
    strncpy(full.arch_name, platform.inst->arch_name, sizeof(full.arch_name) - 1);
    strncpy(full.device_revision, "emu", sizeof(full.device_revision) - 1);
    size_t n = instance_info_len < sizeof(full) ? instance_info_len : sizeof(full);
    memcpy(info, &full, n);
    return NRT_SUCCESS;
}
