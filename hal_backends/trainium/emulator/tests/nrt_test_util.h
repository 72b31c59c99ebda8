/* SPDX-License-Identifier: Apache-2.0 */
/* Contract tests of libnrt: the library is loaded with dlopen and called through function
 * pointers, the way the Trainium backend uses it. Each test opens a fresh copy of the library
 * (so it starts uninitialised), sets the environment it needs, and closes it again.
 *
 * By default the library is the emulator from runfiles; NRT_CONTRACT_LIBRARY=<path> runs the
 * same tests against another libnrt.so.1 (tests of emulator-only features then skip). */
#ifndef HAL_BACKENDS_TRAINIUM_EMULATOR_TESTS_NRT_TEST_UTIL_H
#define HAL_BACKENDS_TRAINIUM_EMULATOR_TESTS_NRT_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal_backends/trainium/emulator/nrt_emu.h"
#include "hal_backends/trainium/nrt/nrt_abi.h"

/* The library's functions, with the types nrt_abi.h gives them (as the backend uses them). */
typedef struct nrt_api {
    void *handle;
    nrt_init_fn *init;
    nrt_close_fn *close;
    nrt_get_version_fn *get_version;
    nrt_get_status_as_str_fn *get_status_as_str;
    nrt_get_instance_info_fn *get_instance_info;
    nrt_get_total_nc_count_fn *get_total_nc_count;
    nrt_get_total_vnc_count_fn *get_total_vnc_count;
    nrt_get_visible_nc_count_fn *get_visible_nc_count;
    nrt_get_visible_vnc_count_fn *get_visible_vnc_count;
    nrt_tensor_allocate_fn *tensor_allocate;
    nrt_tensor_free_fn *tensor_free;
    nrt_tensor_read_fn *tensor_read;
    nrt_tensor_write_fn *tensor_write;
    nrt_tensor_read_batch_fn *tensor_read_batch;
    nrt_tensor_write_batch_fn *tensor_write_batch;
    nrt_tensor_copy_fn *tensor_copy;
    nrt_tensor_get_size_fn *tensor_get_size;
    nrt_tensor_memset_fn *tensor_memset;
    nrt_tensor_allocate_empty_fn *tensor_allocate_empty;
    nrt_tensor_attach_buffer_fn *tensor_attach_buffer;
    nrt_tensor_allocate_slice_fn *tensor_allocate_slice;
    nrt_tensor_get_va_fn *tensor_get_va;
    nrt_tensor_get_device_allocation_info_fn *tensor_get_device_allocation_info;
    nrt_get_vnc_memory_stats_fn *get_vnc_memory_stats;
    nrt_allocate_tensor_set_fn *allocate_tensor_set;
    nrt_destroy_tensor_set_fn *destroy_tensor_set;
    nrt_add_tensor_to_tensor_set_fn *add_tensor_to_tensor_set;
    nrt_load_fn *load;
    nrt_unload_fn *unload;
    nrt_execute_fn *execute;
    nrt_get_model_tensor_info_fn *get_model_tensor_info;
    nrt_free_model_tensor_info_fn *free_model_tensor_info;
    /* Out-of-NEFF collectives and the async API: NULL where the library lacks them. */
    nrt_cc_global_comm_init_fn *cc_global_comm_init;
    nrta_cc_prepare_fn *cc_prepare;
    nrta_cc_schedule_fn *cc_schedule;       /* async API 2 */
    nrta_cc_schedule_v3_fn *cc_schedule_v3; /* the same symbol, async API 3 */
    nrta_is_completed_fn *is_completed;
    nrta_error_tracker_create_fn *error_tracker_create;
    nrta_error_tracker_destroy_fn *error_tracker_destroy;
    nrta_error_tracker_get_list_fn *error_tracker_get_list;
    nrt_emu_set_fault_fn *emu_set_fault; /* emulator extensions; NULL on the real runtime */
    nrt_emu_get_dma_stats_fn *emu_get_dma_stats;
    nrt_emu_stablehlo_status_fn *emu_stablehlo_status;
} nrt_api_t;

/* Unsets every NEURON_* variable the runtime reads, then points NEURON_EMU_LOCK_DIR at the
 * test's private temporary directory. */
void nrt_test_env_reset(void);

/* Resets the environment, loads a fresh copy of the library and resolves every symbol.
 * Returns false (with a message) if the library or a symbol is missing. */
bool nrt_test_open(nrt_api_t *api);

/* nrt_close (a no-op if not initialised) and unloads the library. */
void nrt_test_close(nrt_api_t *api);

/* Whether the loaded library is the emulator. */
bool nrt_test_is_emulator(const nrt_api_t *api);

/* nrt_init(NO_FW, "", ""). */
NRT_STATUS nrt_test_init(const nrt_api_t *api);

/* bytes_used of visible core vnc (UINT64_MAX if the call fails). */
uint64_t nrt_test_used(const nrt_api_t *api, uint32_t vnc);
uint64_t nrt_test_limit(const nrt_api_t *api, uint32_t vnc);

/* Runs fn(arg) in a forked child and returns its exit code, or 128 + signal if a signal
 * killed it, or -1 if fork failed. */
int nrt_test_in_child(int (*fn)(void *arg), void *arg);

/* Captures what is written to file descriptor 2 between begin and end. end returns the text
 * (static buffer, truncated to its size). */
void nrt_test_stderr_begin(void);
const char *nrt_test_stderr_end(void);

/* Fills buf with a byte pattern that depends on seed and position. */
void nrt_test_pattern(void *buf, size_t size, unsigned seed);

#endif /* HAL_BACKENDS_TRAINIUM_EMULATOR_TESTS_NRT_TEST_UTIL_H */
