/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the layer tests: opening a backend under given layers, a
 * private temporary directory, and jobs of two ranks driven by one thread. */
#ifndef HAL_LAYERS_TESTS_LAYER_TEST_UTIL_H
#define HAL_LAYERS_TESTS_LAYER_TEST_UTIL_H

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hal/hal.h"
#include "tools/ctest/ctest.h"
#include "tools/ctest/ctest_status.h"

/* Opens `backend` with HAL_LAYERS=layers and HAL_FAULTS=faults (NULL: unset); the variables are
 * restored to unset afterwards. */
static inline hal_status_t lt_open(const char *backend, const char *layers, const char *faults,
                                   hal_backend_t *b)
{
    if (layers)
        setenv("HAL_LAYERS", layers, 1);
    if (faults)
        setenv("HAL_FAULTS", faults, 1);
    hal_status_t st = hal_backend_open(backend, b);
    unsetenv("HAL_LAYERS");
    unsetenv("HAL_FAULTS");
    return st;
}

/* A fresh directory under TEST_TMPDIR (or /tmp). */
static inline const char *lt_temp_dir(char *buf, size_t size)
{
    const char *base = getenv("TEST_TMPDIR");
    snprintf(buf, size, "%s/hal-layers-XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(buf);
}

static inline double lt_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Two (or more) ranks on devices 0..n-1 of one backend, initialised without blocking from the
 * calling thread; collectives only enqueue, so one thread drives all ranks. */
#define LT_MAX_RANKS 4
typedef struct lt_job {
    int n;
    hal_device_t dev[LT_MAX_RANKS];
    hal_comm_t comm[LT_MAX_RANKS];
    hal_stream_t stream[LT_MAX_RANKS];
} lt_job_t;

static inline hal_status_t lt_job_open(hal_backend_t b, int n, uint32_t timeout_ms, lt_job_t *job)
{
    memset(job, 0, sizeof(*job));
    job->n = n;
    hal_unique_id_t id;
    hal_status_t st = hal_comm_get_unique_id(0, &id);
    if (st != HAL_OK)
        return st;
    hal_comm_config_t cfg = HAL_COMM_CONFIG_INIT;
    cfg.blocking = 0;
    cfg.timeout_ms = timeout_ms;
    for (int r = 0; r < n; r++) {
        if ((st = hal_device_get(b, (uint32_t)r, &job->dev[r])) != HAL_OK ||
            (st = hal_stream_create(job->dev[r], 0, &job->stream[r])) != HAL_OK)
            return st;
        st = hal_comm_init(&id, n, r, job->dev[r], &cfg, &job->comm[r]);
        if (st != HAL_IN_PROGRESS && st != HAL_OK)
            return st;
    }
    for (int r = 0; r < n; r++) {
        hal_status_t async = HAL_IN_PROGRESS;
        double deadline = lt_now_ms() + timeout_ms;
        while (async == HAL_IN_PROGRESS && lt_now_ms() < deadline) {
            if ((st = hal_comm_get_async_error(job->comm[r], &async)) != HAL_OK)
                return st;
            if (async == HAL_IN_PROGRESS)
                usleep(1000);
        }
        if (async != HAL_OK)
            return async == HAL_IN_PROGRESS ? HAL_ERROR_TIMEOUT : async;
    }
    return HAL_OK;
}

/* Destroys what lt_job_open made (streams first, then aborted communicators). */
static inline void lt_job_close(lt_job_t *job)
{
    for (int r = 0; r < job->n; r++)
        if (job->comm[r])
            hal_comm_abort(job->comm[r]);
    for (int r = 0; r < job->n; r++) {
        if (job->stream[r])
            hal_stream_destroy(job->stream[r]);
        if (job->comm[r])
            hal_comm_destroy(job->comm[r]);
    }
    memset(job, 0, sizeof(*job));
}

#endif /* HAL_LAYERS_TESTS_LAYER_TEST_UTIL_H */
