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

/* What the DMA bandwidth model (NEURON_EMU_DMA_GBPS) did since the last nrt_init. Transfers that
 * do not touch device memory, and every transfer while the bandwidth is unlimited, are not
 * counted. */
typedef struct nrt_emu_dma_stats {
    uint64_t transfers; /* transfers given a slot on a device's DMA timeline */
    uint64_t bytes;     /* the bytes of those transfers */
    uint64_t model_ns;  /* the sum of their slots' lengths: bytes / bandwidth, rounded up */
    uint64_t waits;     /* calls that returned only once their slot had ended */
} nrt_emu_dma_stats_t;

/* Copies the DMA model's counters into *stats, min(size, sizeof(*stats)) bytes of them (an older
 * caller passes a smaller size). The counters restart at every nrt_init. Callable at any time,
 * from any thread; a copy taken while transfers run on other threads may be between updates.
 * Returns NRT_SUCCESS, or NRT_INVALID for a NULL stats or a size below 8 (nothing written). */
typedef NRT_STATUS nrt_emu_get_dma_stats_fn(nrt_emu_dma_stats_t *stats, size_t size);
nrt_emu_get_dma_stats_fn nrt_emu_get_dma_stats;

/* Extension "nrt_emu_executes_stablehlo": nrt_load takes a StableHLO module (MLIR text or
 * bytecode) in place of a NEFF, and nrt_execute runs it, compiled by XLA's CPU backend in an
 * executor process ($NEURON_EMU_PYTHON running stablehlo_executor.py, which needs jax and
 * jaxlib). Whether that works in this process: NRT_SUCCESS when the executor runs (this may start
 * it, which takes seconds: it imports jax), else NRT_FAILURE. why (if not NULL) gets
 * min(size, its length + 1) bytes of text, NUL-terminated: on failure the reason (e.g.
 * "NEURON_EMU_PYTHON=python3 cannot import jaxlib: ..."), on success which executor runs ("...
 * pid N (python X, jax Y, jaxlib Z)"). Callable at any time, from any thread; the executor it
 * starts stops at nrt_close or when the library is unloaded. Look the symbol up with dlsym
 * (NRT_EMU_STABLEHLO_STATUS_SYMBOL): absent means a runtime that does not execute StableHLO. */
#define NRT_EMU_STABLEHLO_STATUS_SYMBOL "nrt_emu_stablehlo_status"
typedef NRT_STATUS nrt_emu_stablehlo_status_fn(char *why, size_t size);
nrt_emu_stablehlo_status_fn nrt_emu_stablehlo_status;

#ifdef __cplusplus
}
#endif

#endif /* HAL_BACKENDS_TRAINIUM_EMULATOR_NRT_EMU_H */
