/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers for the host-queue engine's tests (see hq_test_util.h). */
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

#include "hal_backends/common/tests/hq_test_util.h"

static _Thread_local char last_error[1024];
static _Thread_local bool pending;
static atomic_int take_calls;

static void th_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    pending = true;
}

static const char *th_take_error(void)
{
    atomic_fetch_add(&take_calls, 1);
    if (!pending)
        return NULL;
    pending = false;
    return last_error;
}

const hal_host_services_t th_host = {
    .struct_size = sizeof(hal_host_services_t),
    .api_version = HAL_API_VERSION,
    .set_error = th_set_error,
    .take_error = th_take_error,
};

const hal_host_services_t th_host_1_0 = {
    .struct_size = offsetof(hal_host_services_t, take_error),
    .api_version = HAL_MAKE_VERSION(1, 0),
    .set_error = th_set_error,
    .take_error = th_take_error,
};

/* The detail last reported on this thread (taken or not). */
const char *th_last_error(void)
{
    return last_error;
}

/* Forgets this thread's detail, so that a test can tell whether a call reported one. */
void th_clear_error(void)
{
    last_error[0] = '\0';
    pending = false;
}

/* How often take_error was called, by any thread. */
int th_take_error_calls(void)
{
    return atomic_load(&take_calls);
}

/* Leaves a detail for the calling thread through the services. */
void th_leave_detail(const char *detail)
{
    th_set_error("%s", detail);
}

/* A device configuration for the tests. */
hq_device_config_t th_config(uint32_t index, uint32_t slots, uint32_t spin_us)
{
    const char *spin = getenv("HQ_TEST_SPIN_US");
    ctest_set_error_source(th_last_error); /* the engine's details land in th_host */
    hq_device_config_t c = {
        .host = &th_host,
        .index = index,
        .thread_prefix = "hq-test",
        .slots = slots,
        .spin_us = spin != NULL ? (uint32_t)strtoul(spin, NULL, 10) : spin_us,
    };
    return c;
}

/* Prepares a closed gate. */
void th_gate_init(th_gate_t *gate)
{
    pthread_mutex_init(&gate->lock, NULL);
    pthread_cond_init(&gate->cv, NULL);
    gate->open = false;
    atomic_init(&gate->entered, 0);
    atomic_init(&gate->status, HAL_OK);
}

/* Lets everything blocked on the gate return. */
void th_gate_open(th_gate_t *gate)
{
    pthread_mutex_lock(&gate->lock);
    gate->open = true;
    pthread_cond_broadcast(&gate->cv);
    pthread_mutex_unlock(&gate->lock);
}

/* Frees the gate's primitives; nothing may still use it. */
void th_gate_destroy(th_gate_t *gate)
{
    pthread_cond_destroy(&gate->cv);
    pthread_mutex_destroy(&gate->lock);
}

/* Host function: blocks until the gate opens (HAL_ERROR_TIMEOUT after 10 s). */
hal_status_t th_gate_fn(void *gate_, hal_status_t status)
{
    th_gate_t *gate = gate_;
    atomic_store(&gate->status, status);
    atomic_fetch_add(&gate->entered, 1);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    pthread_mutex_lock(&gate->lock);
    int rc = 0;
    while (!gate->open && rc == 0)
        rc = pthread_cond_timedwait(&gate->cv, &gate->lock, &deadline);
    bool opened = gate->open;
    pthread_mutex_unlock(&gate->lock);
    return opened ? HAL_OK : HAL_ERROR_TIMEOUT;
}

/* Callback: as th_gate_fn. */
void th_gate_cb(hal_status_t status, void *gate)
{
    (void)th_gate_fn(gate, status);
}

/* Whether something blocked on the gate has started. */
bool th_gate_entered(void *gate)
{
    return atomic_load(&((th_gate_t *)gate)->entered) > 0;
}

/* Sleeps for a few milliseconds. */
void th_sleep_ms(int ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Polls a predicate with a deadline, so a broken engine fails a test instead of hanging it. */
bool th_wait_until(bool (*pred)(void *arg), void *arg, int ms)
{
    for (int i = 0; i < ms * 10; i++) {
        if (pred(arg))
            return true;
        struct timespec ts = { .tv_sec = 0, .tv_nsec = 100000 };
        nanosleep(&ts, NULL);
    }
    return pred(arg);
}

/* Callback: bumps the atomic_int it is given. */
void th_count_cb(hal_status_t status, void *counter)
{
    atomic_fetch_add((atomic_int *)counter, 1);
}

/* Work task whose payload is an atomic_int *: bumps it. */
hal_status_t th_count_work(hq_stream_t *stream, void *payload, hal_status_t status)
{
    atomic_int *counter = *(atomic_int **)payload;
    atomic_fetch_add(counter, 1);
    return HAL_OK;
}
