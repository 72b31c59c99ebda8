/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers for the cpu backend's internal tests (see cpu_test_util.h). */
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

#include "hal_backends/cpu/tests/cpu_test_util.h"

static _Thread_local char last_error[512];

static void t_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
}

const hal_host_services_t t_host = {
    .struct_size = sizeof(hal_host_services_t),
    .api_version = HAL_API_VERSION,
    .set_error = t_set_error,
};

/* The detail the backend last reported on this thread. */
const char *t_last_error(void)
{
    return last_error;
}

/* Forgets the last error, so a test can tell whether a call reported one. */
void t_clear_error(void)
{
    last_error[0] = '\0';
}

static void set_or_unset(const char *name, const char *value)
{
    if (value != NULL)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

/* Sets or unsets the backend's environment variables. */
void t_set_env(const char *devices, const char *memory, const char *concurrency,
               const char *spin_us)
{
    set_or_unset(CPU_ENV_DEVICES, devices);
    set_or_unset(CPU_ENV_MEMORY, memory);
    set_or_unset(CPU_ENV_CONCURRENCY, concurrency);
    set_or_unset(CPU_ENV_SPIN_US, spin_us);
}

/* Initialises the backend under the given environment and opens its devices. */
hal_status_t t_open(t_fixture_t *fx, const char *devices, const char *memory,
                    const char *concurrency, const char *spin_us)
{
    /* CPU_TEST_SPIN_US reruns the suite with another spin budget (0: every wait sleeps). */
    if (spin_us == NULL)
        spin_us = getenv("CPU_TEST_SPIN_US");
    return t_open_exact(fx, devices, memory, concurrency, spin_us);
}

static hal_status_t open_fixture(t_fixture_t *fx, const hal_host_services_t *host,
                                 const char *devices, const char *memory, const char *concurrency,
                                 const char *spin_us)
{
    memset(fx, 0, sizeof(*fx));
    ctest_set_error_source(t_last_error); /* the backend's details land in t_host */
    t_set_env(devices, memory, concurrency, spin_us);
    hal_status_t st = hal_backend_get_ops(HAL_API_VERSION, &fx->ops);
    if (st != HAL_OK)
        return st;
    st = fx->ops->init(host, &fx->backend);
    t_set_env(NULL, NULL, NULL, NULL);
    if (st != HAL_OK)
        return st;
    fx->ops->device_count(fx->backend, &fx->count);
    for (uint32_t i = 0; i < fx->count && i < T_MAX_DEVICES; i++) {
        st = fx->ops->device_open(fx->backend, i, &fx->dev[i]);
        if (st != HAL_OK)
            return st;
    }
    return HAL_OK;
}

/* As t_open, without the CPU_TEST_SPIN_US override. */
hal_status_t t_open_exact(t_fixture_t *fx, const char *devices, const char *memory,
                          const char *concurrency, const char *spin_us)
{
    return open_fixture(fx, &t_host, devices, memory, concurrency, spin_us);
}

/* As t_open, with other host services (e.g. one that has take_error). */
hal_status_t t_open_with_host(t_fixture_t *fx, const hal_host_services_t *host, const char *devices,
                              const char *memory, const char *concurrency, const char *spin_us)
{
    if (spin_us == NULL)
        spin_us = getenv("CPU_TEST_SPIN_US");
    return open_fixture(fx, host, devices, memory, concurrency, spin_us);
}

/* Releases what t_open created. */
void t_close(t_fixture_t *fx)
{
    for (uint32_t i = 0; i < T_MAX_DEVICES; i++) {
        if (fx->dev[i] != NULL)
            fx->ops->device_close(fx->dev[i]);
    }
    if (fx->backend != NULL)
        fx->ops->fini(fx->backend);
    memset(fx, 0, sizeof(*fx));
    ctest_set_error_source(NULL);
}

/* Prepares an empty log. */
void t_log_init(t_log_t *log)
{
    pthread_mutex_init(&log->lock, NULL);
    log->len = 0;
    log->text[0] = '\0';
}

/* Stream callback: appends its entry's character to the log. */
void t_log_cb(hal_status_t status, void *entry_)
{
    t_log_entry_t *entry = entry_;
    pthread_mutex_lock(&entry->log->lock);
    if (entry->log->len + 1 < sizeof(entry->log->text)) {
        entry->log->text[entry->log->len++] = entry->c;
        entry->log->text[entry->log->len] = '\0';
    }
    pthread_mutex_unlock(&entry->log->lock);
}

/* A resolved pointer as the core would pass it (only ptr and kind matter to this backend). */
hal_backend_ptr_t t_ptr(void *p, hal_mem_kind_t kind)
{
    hal_backend_ptr_t r;
    memset(&r, 0, sizeof(r));
    r.ptr = p;
    r.kind = kind;
    r.base = p;
    return r;
}

/* A resolved pointer with every field the core fills (the IPC slots use them). */
hal_backend_ptr_t t_alloc_ptr(void *base, void *cookie, size_t size, size_t offset,
                              hal_mem_kind_t kind)
{
    hal_backend_ptr_t r;
    memset(&r, 0, sizeof(r));
    r.ptr = (char *)base + offset;
    r.kind = kind;
    r.base = base;
    r.size = size;
    r.cookie = cookie;
    r.offset = offset;
    return r;
}

typedef struct t_fn_task {
    hal_stream_host_fn_t fn;
    void *arg;
} t_fn_task_t;

static hal_status_t run_fn_task(hq_stream_t *stream, void *payload, hal_status_t stream_status)
{
    const t_fn_task_t *t = payload;
    return t->fn(t->arg, stream_status);
}

/* Runs a plain function as an engine work task. */
hal_status_t t_enqueue_fn(void *stream, hal_stream_host_fn_t fn, void *arg, uint32_t flags)
{
    t_fn_task_t t = { fn, arg };
    return hq_stream_enqueue(stream, run_fn_task, &t, sizeof(t), flags);
}
