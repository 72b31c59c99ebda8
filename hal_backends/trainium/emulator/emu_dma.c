/* SPDX-License-Identifier: Apache-2.0 */
/* libnrt emulator: how long a transfer takes.
 *
 * libnrt's tensor calls are synchronous: they return when the data has moved. By default the
 * emulator moves data at memcpy speed. NEURON_EMU_DMA_GBPS slows every transfer that touches
 * device memory to a given bandwidth, in GB/s (1e9 bytes/s): a positive decimal such as "25"
 * or "12.5", "instance" for the documented DMA bandwidth of the emulated device (1000 for
 * Trn1/Inf2, 3500 for Trn2), or "0" for unlimited. The bandwidth belongs to a device and is
 * shared by its cores: transfers on one device are serialised on a timeline, each occupying it
 * for bytes / bandwidth, and a call returns when its slot ends. The model counts what it did
 * (nrt_emu_get_dma_stats), so tests check it without measuring time. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hal_backends/trainium/emulator/emu_internal.h"
#include "hal_backends/trainium/emulator/nrt_emu.h"

static struct {
    _Atomic double bytes_per_ns; /* 0 = unlimited */
    pthread_mutex_t lock[EMU_MAX_CHIPS];
    uint64_t busy_until[EMU_MAX_CHIPS];
    _Atomic uint64_t transfers, bytes, model_ns, waits; /* nrt_emu_get_dma_stats */
} dma = { .lock = { [0 ... EMU_MAX_CHIPS - 1] = PTHREAD_MUTEX_INITIALIZER } };

NRT_STATUS emu_dma_parse(const char *api, const emu_platform_t *p, double *bytes_per_ns)
{
    const char *value = emu_getenv("NEURON_EMU_DMA_GBPS");
    *bytes_per_ns = 0.0;
    if (value == NULL)
        return NRT_SUCCESS;
    if (strcmp(value, "instance") == 0) {
        *bytes_per_ns = p->inst->dma_gbps_per_chip; /* GB/s == bytes/ns */
        return NRT_SUCCESS;
    }
    char *end;
    errno = 0;
    double gbps = strtod(value, &end);
    if (errno != 0 || end == value || *end != '\0' || !isfinite(gbps) || gbps < 0.0 ||
        (value[0] != '.' && (value[0] < '0' || value[0] > '9')) || strpbrk(value, "xXpP") != NULL) {
        EMU_ERR(api,
                "NEURON_EMU_DMA_GBPS=%s: expected a bandwidth in GB/s (e.g. 25 or 12.5), "
                "\"instance\", or 0 for unlimited",
                value);
        return NRT_INVALID;
    }
    *bytes_per_ns = gbps;
    return NRT_SUCCESS;
}

static void reset_counters(void)
{
    atomic_store(&dma.transfers, 0);
    atomic_store(&dma.bytes, 0);
    atomic_store(&dma.model_ns, 0);
    atomic_store(&dma.waits, 0);
}

void emu_dma_commit(double bytes_per_ns)
{
    atomic_store(&dma.bytes_per_ns, bytes_per_ns);
    reset_counters();
    for (int i = 0; i < EMU_MAX_CHIPS; i++) {
        pthread_mutex_lock(&dma.lock[i]);
        dma.busy_until[i] = 0;
        pthread_mutex_unlock(&dma.lock[i]);
    }
}

uint64_t emu_dma_begin(uint32_t chip, uint64_t bytes)
{
    double rate = atomic_load(&dma.bytes_per_ns);
    if (rate <= 0.0 || bytes == 0)
        return 0;
    double ns = (double)bytes / rate;
    uint64_t duration = (uint64_t)ns + ((double)(uint64_t)ns < ns ? 1 : 0);
    uint32_t c = chip % EMU_MAX_CHIPS;
    uint64_t now = emu_now_ns();
    pthread_mutex_lock(&dma.lock[c]);
    uint64_t start = dma.busy_until[c] > now ? dma.busy_until[c] : now;
    uint64_t end = start + duration;
    dma.busy_until[c] = end;
    pthread_mutex_unlock(&dma.lock[c]);
    atomic_fetch_add(&dma.transfers, 1);
    atomic_fetch_add(&dma.bytes, bytes);
    atomic_fetch_add(&dma.model_ns, duration);
    return end;
}

void emu_dma_end(uint64_t deadline_ns)
{
    if (deadline_ns == 0)
        return;
    struct timespec ts = { .tv_sec = (time_t)(deadline_ns / 1000000000u),
                           .tv_nsec = (long)(deadline_ns % 1000000000u) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
    atomic_fetch_add(&dma.waits, 1);
}

void emu_dma_reset_after_fork(void)
{
    for (int i = 0; i < EMU_MAX_CHIPS; i++) {
        pthread_mutex_init(&dma.lock[i], NULL);
        dma.busy_until[i] = 0;
    }
    reset_counters();
}

NRT_EMU_EXPORT NRT_STATUS nrt_emu_get_dma_stats(nrt_emu_dma_stats_t *stats, size_t size)
{
    if (stats == NULL || size < sizeof(uint64_t)) {
        EMU_ERR("nrt_emu_get_dma_stats", "stats is NULL or size %zu is below 8", size);
        return NRT_INVALID;
    }
    nrt_emu_dma_stats_t now = {
        .transfers = atomic_load(&dma.transfers),
        .bytes = atomic_load(&dma.bytes),
        .model_ns = atomic_load(&dma.model_ns),
        .waits = atomic_load(&dma.waits),
    };
    memcpy(stats, &now, size < sizeof(now) ? size : sizeof(now));
    return NRT_SUCCESS;
}
