/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers for the Trainium backend's tests. They use the public HAL API only: the backend is
 * loaded by name from HAL_BACKEND_PATH and drives the libnrt emulator named by
 * HAL_NEURON_LIBNRT (both set by the test targets). Each test starts from tt_env_reset(), which
 * gives the process a private core-lock directory under TEST_TMPDIR (so test targets running in
 * parallel never wait for each other's NeuronCores) and clears every knob a test may turn. */
#ifndef HAL_BACKENDS_TRAINIUM_TESTS_TRN_TEST_UTIL_H
#define HAL_BACKENDS_TRAINIUM_TESTS_TRN_TEST_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "hal/hal.h"
#include "tools/ctest/ctest.h"
#include "tools/ctest/ctest_status.h"

/* Checks record a failure and go on (EXPECT_*, CTEST_EXPECT: tools/ctest), so that a test can
 * always open its gates and clean up. */

/* The last error message (of the calling thread) mentions `fragment`. */

/* Where the test targets put the fixture that exports nrt_init only (runfiles-relative). */
#define TT_STUB_LIBNRT "hal_backends/trainium/tests/libnrt_stub.so"

/* Where the test targets put the emulator built as an older runtime: without the functions the
 * backend loads as optional (nrt_get_version, nrt_get_instance_info, nrt_get_vnc_memory_stats,
 * ...). */
#define TT_LEGACY_LIBNRT "hal_backends/trainium/emulator/legacy/libnrt.so.1"

/* True when HAL_NEURON_LIBNRT names the libnrt emulator (it exports nrt_emu_set_fault), false
 * on a real runtime. */
bool tt_on_emulator(void);

/* Skips a test that needs emulator features (NEURON_EMU_* variables, the emulated instance). */
#define TT_REQUIRE_EMULATOR()                                                                  \
    do {                                                                                       \
        if (!tt_on_emulator())                                                                 \
            CTEST_SKIP("needs the libnrt emulator (NEURON_EMU_* settings); HAL_NEURON_LIBNRT " \
                       "names another runtime");                                               \
    } while (0)

/* Resets the environment the backend and the emulator read at backend open: a private lock
 * directory, the emulator as libnrt, and no NEURON_RT_* core selection, NEURON_EMU_* instance,
 * memory, bandwidth or fault setting. */
void tt_env_reset(void);
/* Sets an environment variable, or unsets it for NULL. */
void tt_setenv(const char *name, const char *value);
/* HAL_NEURON_LIBNRT as the test target set it ("" if unset). */
const char *tt_default_libnrt(void);
/* Opens the backend "trainium"; on failure prints the message. */
hal_status_t tt_open(hal_backend_t *backend);
/* Device `index` of the backend, NULL if there is none. */
hal_device_t tt_device(hal_backend_t backend, uint32_t index);
/* A path under TEST_TMPDIR. */
void tt_tmp_path(char *out, size_t size, const char *name);

/* A host callback that blocks its stream until opened (or until 10 s passed, so that a broken
 * test fails instead of hanging). */
typedef struct tt_gate {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    bool open;
    atomic_int entered;
    atomic_int status; /* the stream status the callback was given */
} tt_gate_t;

void tt_gate_init(tt_gate_t *gate);
void tt_gate_open(tt_gate_t *gate);
void tt_gate_destroy(tt_gate_t *gate);
void tt_gate_cb(hal_status_t status, void *gate);
/* Opens the gate from a helper thread after ms milliseconds; join *thread afterwards. Returns
 * false if the thread could not be started. */
bool tt_gate_open_after(tt_gate_t *gate, unsigned ms, pthread_t *thread);
/* Waits up to 10 s for the gate's callback to start; returns whether it did. */
bool tt_gate_wait_entered(tt_gate_t *gate);

/* A log of host callbacks shared by several streams. */
typedef struct tt_log {
    pthread_mutex_t lock;
    char text[256];
    size_t len;
    hal_status_t status[256];
} tt_log_t;

typedef struct tt_log_entry {
    tt_log_t *log;
    char c;
} tt_log_entry_t;

void tt_log_init(tt_log_t *log);
void tt_log_destroy(tt_log_t *log);
/* Callback: appends entry->c (and the status) to entry->log. */
void tt_log_cb(hal_status_t status, void *entry);
/* A copy of the log's text. */
void tt_log_text(tt_log_t *log, char *out, size_t size);

/* Byte patterns that do not repeat with a short period, so offset errors show. */
void tt_fill(void *buf, size_t n, uint32_t seed);
/* n if buf holds the pattern, else the index of the first wrong byte. */
size_t tt_mismatch(const void *buf, size_t n, uint32_t seed);
/* n if every byte is value, else the index of the first other byte. */
size_t tt_find_other(const void *buf, size_t n, uint8_t value);

#endif /* HAL_BACKENDS_TRAINIUM_TESTS_TRN_TEST_UTIL_H */
