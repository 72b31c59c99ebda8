/* SPDX-License-Identifier: Apache-2.0 */
/* Extensions of the libnrt emulator. These symbols are NOT part of libnrt: a program must look
 * them up with dlsym and treat their absence as "running on the real runtime". */
#ifndef HAL_BACKENDS_TRAINIUM_EMULATOR_NRT_EMU_H
#define HAL_BACKENDS_TRAINIUM_EMULATOR_NRT_EMU_H

#include "hal_backends/trainium/nrt/nrt_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Replace the fault-injection plan with spec (same syntax as NEURON_EMU_FAULTS, see README.md)
 * and restart its counters. NULL or "" removes every fault and clears a latched hardware error.
 * Callable at any time, from any thread.
 * Returns NRT_SUCCESS, or NRT_INVALID for a malformed spec (which changes nothing and is
 * reported on stderr). */
typedef NRT_STATUS nrt_emu_set_fault_fn(const char *spec);
nrt_emu_set_fault_fn nrt_emu_set_fault;

#ifdef __cplusplus
}
#endif

#endif /* HAL_BACKENDS_TRAINIUM_EMULATOR_NRT_EMU_H */
