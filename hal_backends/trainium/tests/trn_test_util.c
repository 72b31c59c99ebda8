/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers for the Trainium backend's tests (see trn_test_util.h). */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "hal_backends/trainium/tests/trn_test_util.h"

/* HAL_NEURON_LIBNRT as the test target set it, before any test changed it. */
static char default_libnrt[1024];
static bool captured;

void tt_setenv(const char *name, const char *value)
{
    if (value != NULL)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

void tt_tmp_path(char *out, size_t size, const char *name)
{
    const char *tmp = getenv("TEST_TMPDIR");
    if (tmp == NULL || tmp[0] == '\0')
        tmp = getenv("TMPDIR");
    snprintf(out, size, "%s/%s", tmp != NULL && tmp[0] != '\0' ? tmp : P_tmpdir, name);
}

/* Remembers HAL_NEURON_LIBNRT as the test target set it, before a test changes it. */
static void capture_defaults(void)
{
    if (captured)
        return;
    const char *lib = getenv("HAL_NEURON_LIBNRT");
    snprintf(default_libnrt, sizeof(default_libnrt), "%s", lib != NULL ? lib : "");
    captured = true;
}

bool tt_on_emulator(void)
{
    static int cached = -1;
    if (cached < 0) {
        capture_defaults();
        void *dl = default_libnrt[0] != '\0' ? dlopen(default_libnrt, RTLD_NOW | RTLD_LOCAL) : NULL;
        cached = dl != NULL && dlsym(dl, "nrt_emu_set_fault") != NULL;
        if (dl != NULL)
            dlclose(dl);
    }
    return cached == 1;
}

void tt_env_reset(void)
{
    capture_defaults();
    char locks[1024];
    tt_tmp_path(locks, sizeof(locks), "neuron-emu-locks");
    tt_setenv("NEURON_EMU_LOCK_DIR", locks);
    tt_setenv("HAL_NEURON_LIBNRT", default_libnrt[0] != '\0' ? default_libnrt : NULL);
    static const char *const cleared[] = {
        "NEURON_RT_VISIBLE_CORES",
        "NEURON_RT_NUM_CORES",
        "NEURON_LOGICAL_NC_CONFIG",
        "NEURON_RT_VIRTUAL_CORE_SIZE",
        "NEURON_EMU_INSTANCE",
        "NEURON_EMU_HBM_BYTES",
        "NEURON_EMU_DMA_GBPS",
        "NEURON_EMU_FAULTS",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "HAL_NEURON_BUNDLED_LIBNRT",
        "NEURON_RT_LOG_LEVEL",
        "HAL_NEURON_NATIVE_COLLECTIVES",
        "NEURON_EMU_RUNTIME_VERSION",
        "NEURON_EMU_CC_TIMEOUT_MS",
        "NEURON_RT_ROOT_COMM_ID",
        "HAL_COMM_STAGING_CHUNK",
    };
    for (size_t i = 0; i < sizeof(cleared) / sizeof(cleared[0]); i++)
        tt_setenv(cleared[i], NULL);
}

const char *tt_default_libnrt(void)
{
    capture_defaults();
    return default_libnrt;
}

hal_status_t tt_open(hal_backend_t *backend)
{
    hal_status_t st = hal_backend_open("trainium", backend);
    if (st != HAL_OK)
        fprintf(stderr, "hal_backend_open(\"trainium\") returned %s: %s\n", hal_status_string(st),
                hal_last_error_message());
    return st;
}

hal_device_t tt_device(hal_backend_t backend, uint32_t index)
{
    hal_device_t device = NULL;
    if (hal_device_get(backend, index, &device) != HAL_OK)
        return NULL;
    return device;
}

/* ---- gates --------------------------------------------------------------------------------- */

void tt_gate_init(tt_gate_t *gate)
{
    pthread_mutex_init(&gate->lock, NULL);
    pthread_cond_init(&gate->cv, NULL);
    gate->open = false;
    atomic_init(&gate->entered, 0);
    atomic_init(&gate->status, HAL_OK);
}

void tt_gate_open(tt_gate_t *gate)
{
    pthread_mutex_lock(&gate->lock);
    gate->open = true;
    pthread_cond_broadcast(&gate->cv);
    pthread_mutex_unlock(&gate->lock);
}

void tt_gate_destroy(tt_gate_t *gate)
{
    pthread_cond_destroy(&gate->cv);
    pthread_mutex_destroy(&gate->lock);
}

void tt_gate_cb(hal_status_t status, void *arg)
{
    tt_gate_t *gate = arg;
    atomic_store(&gate->status, (int)status);
    atomic_store(&gate->entered, 1);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    pthread_mutex_lock(&gate->lock);
    while (!gate->open) {
        if (pthread_cond_timedwait(&gate->cv, &gate->lock, &deadline) == ETIMEDOUT) {
            fprintf(stderr, "tt_gate_cb: the gate was not opened within 10 s\n");
            break;
        }
    }
    pthread_mutex_unlock(&gate->lock);
}

typedef struct opener {
    tt_gate_t *gate;
    unsigned ms;
} opener_t;

static void *open_later(void *arg)
{
    opener_t *o = arg;
    struct timespec ts = { (time_t)(o->ms / 1000u), (long)(o->ms % 1000u) * 1000000L };
    nanosleep(&ts, NULL);
    tt_gate_open(o->gate);
    free(o);
    return NULL;
}

bool tt_gate_open_after(tt_gate_t *gate, unsigned ms, pthread_t *thread)
{
    opener_t *o = malloc(sizeof(*o));
    if (o == NULL)
        return false;
    o->gate = gate;
    o->ms = ms;
    if (pthread_create(thread, NULL, open_later, o) != 0) {
        free(o);
        return false;
    }
    return true;
}

bool tt_gate_wait_entered(tt_gate_t *gate)
{
    for (int i = 0; i < 100000; i++) {
        if (atomic_load(&gate->entered))
            return true;
        struct timespec ts = { 0, 100000 };
        nanosleep(&ts, NULL);
    }
    return false;
}

/* ---- logs ---------------------------------------------------------------------------------- */

void tt_log_init(tt_log_t *log)
{
    pthread_mutex_init(&log->lock, NULL);
    log->len = 0;
    log->text[0] = '\0';
}

void tt_log_destroy(tt_log_t *log)
{
    pthread_mutex_destroy(&log->lock);
}

void tt_log_cb(hal_status_t status, void *arg)
{
    tt_log_entry_t *e = arg;
    pthread_mutex_lock(&e->log->lock);
    if (e->log->len + 1 < sizeof(e->log->text)) {
        e->log->status[e->log->len] = status;
        e->log->text[e->log->len++] = e->c;
        e->log->text[e->log->len] = '\0';
    }
    pthread_mutex_unlock(&e->log->lock);
}

void tt_log_text(tt_log_t *log, char *out, size_t size)
{
    pthread_mutex_lock(&log->lock);
    snprintf(out, size, "%s", log->text);
    pthread_mutex_unlock(&log->lock);
}

/* ---- patterns ------------------------------------------------------------------------------ */

/* Eight pattern bytes for the block of bytes [8 * block, 8 * block + 8). Generated a word at a
 * time so that filling and checking 64 MiB stays fast under the sanitizers. */
static uint64_t pattern_word(size_t block, uint32_t seed)
{
    uint64_t x = (uint64_t)block * 0x9e3779b97f4a7c15u + (uint64_t)seed * 0xbf58476d1ce4e5b9u + 1;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebu;
    x ^= x >> 29;
    return x;
}

void tt_fill(void *buf, size_t n, uint32_t seed)
{
    uint8_t *p = buf;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = pattern_word(i / 8, seed);
        memcpy(p + i, &w, 8);
    }
    if (i < n) {
        uint64_t w = pattern_word(i / 8, seed);
        memcpy(p + i, &w, n - i);
    }
}

size_t tt_mismatch(const void *buf, size_t n, uint32_t seed)
{
    const uint8_t *p = buf;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = pattern_word(i / 8, seed);
        size_t len = n - i < 8 ? n - i : 8;
        if (memcmp(p + i, &w, len) != 0) {
            const uint8_t *want = (const uint8_t *)&w;
            for (size_t k = 0; k < len; k++) {
                if (p[i + k] != want[k])
                    return i + k;
            }
        }
    }
    return n;
}

size_t tt_find_other(const void *buf, size_t n, uint8_t value)
{
    const uint8_t *p = buf;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != value)
            return i;
    }
    return n;
}
