/* SPDX-License-Identifier: Apache-2.0 */
/* stream_launch_host_fn of the cpu backend: stream order, latching with the detail the core
 * hands back through take_error, running after an error, and running without an execution slot
 * (so that host functions that wait for each other, as collectives do, cannot starve the
 * device). */
#include <stdarg.h>
#include <stdlib.h>

#include "hal_backends/cpu/tests/cpu_test_util.h"

/* ---- a host that keeps details the way the core does: per thread, taken once ---------------- */

#define FAKE_DETAIL "hal_allreduce: rank 3 stopped answering (fake host)"

static _Thread_local bool fake_armed;
static atomic_int fake_take_calls;

/* What a HAL function failing inside a host function does: leave a detail for this thread. */
static void fake_leave_detail(void)
{
    fake_armed = true;
}

static const char *fake_take_error(void)
{
    atomic_fetch_add(&fake_take_calls, 1);
    if (!fake_armed)
        return NULL;
    fake_armed = false;
    return FAKE_DETAIL;
}

/* Keeps the backend's details where t_last_error() reads them. */
static void fake_set_error(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    t_host.set_error("%s", buf);
}

static const hal_host_services_t fake_host = {
    .struct_size = sizeof(hal_host_services_t),
    .api_version = HAL_API_VERSION,
    .set_error = fake_set_error,
    .take_error = fake_take_error,
};

/* A 1.0 host: take_error lies past its struct_size and must not be called. */
static const hal_host_services_t old_host = {
    .struct_size = offsetof(hal_host_services_t, take_error),
    .api_version = HAL_MAKE_VERSION(1, 0),
    .set_error = fake_set_error,
    .take_error = fake_take_error,
};

/* ---- host functions ------------------------------------------------------------------------ */

typedef struct step {
    atomic_int *next;    /* shared sequence counter */
    int seq;             /* this step's place in the sequence */
    hal_status_t ret;    /* what to return */
    bool leave_detail;   /* leave a detail through the (fake) core first */
    atomic_int calls;    /* times run */
    atomic_int status;   /* stream status it was given */
    atomic_int bad_turn; /* ran out of order */
} step_t;

static void step_init(step_t *st, atomic_int *next, int seq, hal_status_t ret, bool detail)
{
    st->next = next;
    st->seq = seq;
    st->ret = ret;
    st->leave_detail = detail;
    atomic_init(&st->calls, 0);
    atomic_init(&st->status, -1);
    atomic_init(&st->bad_turn, 0);
}

static hal_status_t step_fn(void *arg, hal_status_t stream_status)
{
    step_t *st = arg;
    if (atomic_fetch_add(st->next, 1) != st->seq)
        atomic_store(&st->bad_turn, 1);
    atomic_fetch_add(&st->calls, 1);
    atomic_store(&st->status, stream_status);
    if (st->leave_detail)
        fake_leave_detail();
    return st->ret;
}

static void step_cb(hal_status_t stream_status, void *arg)
{
    (void)step_fn(arg, stream_status);
}

CTEST(CpuHostFn, RunsInOrderAndLatchesTheDetailFromTheCore)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open_with_host(&fx, &fake_host, "1", NULL, NULL, NULL), HAL_OK);
    void *s = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &s), HAL_OK);
    atomic_int next;
    atomic_init(&next, 0);
    enum { N = 200 }; /* more than one node chunk */
    static step_t steps[N];
    unsigned char buf[256], src[256];
    memset(buf, 0, sizeof(buf));
    memset(src, 7, sizeof(src));
    hal_backend_ptr_t pb = t_ptr(buf, HAL_MEM_KIND_UNREGISTERED);
    hal_backend_ptr_t ps = t_ptr(src, HAL_MEM_KIND_UNREGISTERED);

    /* Host functions interleaved with callbacks and copies keep stream order. */
    for (int i = 0; i < N; i++) {
        step_init(&steps[i], &next, i, HAL_OK, false);
        if (i % 2 == 0)
            EXPECT_STATUS(fx.ops->stream_launch_host_fn(s, step_fn, &steps[i]), HAL_OK);
        else
            EXPECT_STATUS(fx.ops->stream_add_callback(s, step_cb, &steps[i]), HAL_OK);
        if (i % 10 == 0)
            EXPECT_STATUS(fx.ops->memcpy_async(s, &pb, &ps, sizeof(buf)), HAL_OK);
    }
    EXPECT_STATUS(fx.ops->stream_synchronize(s), HAL_OK);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += atomic_load(&steps[i].bad_turn) + (atomic_load(&steps[i].calls) != 1) +
               (atomic_load(&steps[i].status) != HAL_OK);
    CTEST_EXPECT(bad == 0);
    CTEST_EXPECT(buf[0] == 7);

    /* A failing host function latches its status with the detail it left through the core;
     * later host functions still run and are told; data work is skipped. */
    static step_t fail, after, cb;
    atomic_store(&next, 0);
    step_init(&fail, &next, 0, HAL_ERROR_REMOTE, true);
    step_init(&cb, &next, 1, HAL_OK, false);
    step_init(&after, &next, 2, HAL_ERROR_TIMEOUT, false);
    memset(src, 9, sizeof(src));
    th_gate_t gate; /* holds the stream until everything below is queued */
    th_gate_init(&gate);
    EXPECT_STATUS(fx.ops->stream_add_callback(s, th_gate_cb, &gate), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_launch_host_fn(s, step_fn, &fail), HAL_OK);
    EXPECT_STATUS(fx.ops->memcpy_async(s, &pb, &ps, sizeof(buf)), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_add_callback(s, step_cb, &cb), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_launch_host_fn(s, step_fn, &after), HAL_OK);
    th_gate_open(&gate);
    t_clear_error();
    EXPECT_STATUS(fx.ops->stream_synchronize(s), HAL_ERROR_REMOTE);
    EXPECT_MESSAGE(FAKE_DETAIL);
    CTEST_EXPECT(buf[0] == 7); /* the copy after the failure was skipped */
    CTEST_EXPECT(atomic_load(&cb.status) == HAL_ERROR_REMOTE);
    CTEST_EXPECT(atomic_load(&after.calls) == 1);
    CTEST_EXPECT(atomic_load(&after.status) == HAL_ERROR_REMOTE);
    CTEST_EXPECT(atomic_load(&fail.bad_turn) + atomic_load(&cb.bad_turn) +
                     atomic_load(&after.bad_turn) ==
                 0);

    /* Launching on a failed stream is accepted (the function decides), unlike data work. */
    static step_t late;
    step_init(&late, &next, 3, HAL_OK, false);
    EXPECT_STATUS(fx.ops->stream_launch_host_fn(s, step_fn, &late), HAL_OK);
    EXPECT_STATUS(fx.ops->memcpy_async(s, &pb, &ps, sizeof(buf)), HAL_ERROR_REMOTE);
    EXPECT_STATUS(fx.ops->stream_synchronize(s), HAL_ERROR_REMOTE);
    CTEST_EXPECT(atomic_load(&late.calls) == 1 && atomic_load(&late.status) == HAL_ERROR_REMOTE);

    t_clear_error();
    EXPECT_STATUS(fx.ops->stream_destroy(s), HAL_ERROR_REMOTE);
    EXPECT_MESSAGE(FAKE_DETAIL);
    th_gate_destroy(&gate);
    t_close(&fx);
    return CTEST_PASS;
}

CTEST(CpuHostFn, FailureWithoutADetailNamesTheStatus)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open_with_host(&fx, &fake_host, "1", NULL, NULL, NULL), HAL_OK);
    void *s = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &s), HAL_OK);
    atomic_int next;
    atomic_init(&next, 0);
    /* A detail left by a function that then succeeded is not blamed on a later failure. */
    step_t ok_with_detail, silent;
    step_init(&ok_with_detail, &next, 0, HAL_OK, true);
    step_init(&silent, &next, 1, HAL_ERROR_TIMEOUT, false);
    int calls_before = atomic_load(&fake_take_calls);
    EXPECT_STATUS(fx.ops->stream_launch_host_fn(s, step_fn, &ok_with_detail), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_launch_host_fn(s, step_fn, &silent), HAL_OK);
    t_clear_error();
    EXPECT_STATUS(fx.ops->stream_synchronize(s), HAL_ERROR_TIMEOUT);
    EXPECT_MESSAGE("stream host function failed with HAL_ERROR_TIMEOUT");
    CTEST_EXPECT(strstr(t_last_error(), FAKE_DETAIL) == NULL);
    CTEST_EXPECT(atomic_load(&fake_take_calls) - calls_before == 2); /* after every host function */
    EXPECT_STATUS(fx.ops->stream_destroy(s), HAL_ERROR_TIMEOUT);
    t_close(&fx);

    /* A 1.0 host has no take_error: the status alone is latched, nothing is called. */
    EXPECT_STATUS(t_open_with_host(&fx, &old_host, "1", NULL, NULL, NULL), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &s), HAL_OK);
    step_t old_fail;
    atomic_store(&next, 0);
    step_init(&old_fail, &next, 0, HAL_ERROR_REMOTE, true);
    calls_before = atomic_load(&fake_take_calls);
    EXPECT_STATUS(fx.ops->stream_launch_host_fn(s, step_fn, &old_fail), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_synchronize(s), HAL_ERROR_REMOTE);
    CTEST_EXPECT(atomic_load(&fake_take_calls) == calls_before);
    EXPECT_STATUS(fx.ops->stream_destroy(s), HAL_ERROR_REMOTE);
    t_close(&fx);
    return CTEST_PASS;
}

CTEST(CpuHostFn, RunsAfterAnErrorWithThatError)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open_with_host(&fx, &fake_host, "1", NULL, NULL, NULL), HAL_OK);
    void *s = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &s), HAL_OK);
    atomic_int next;
    atomic_init(&next, 0);
    step_t ok, second_failure;
    step_init(&ok, &next, 0, HAL_OK, false);
    step_init(&second_failure, &next, 1, HAL_ERROR_ABORTED, true);
    EXPECT_STATUS(hq_stream_inject_error(s, HAL_ERROR_DEVICE_LOST, "injected device loss"), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_launch_host_fn(s, step_fn, &ok), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_launch_host_fn(s, step_fn, &second_failure), HAL_OK);
    t_clear_error();
    EXPECT_STATUS(fx.ops->stream_synchronize(s), HAL_ERROR_DEVICE_LOST);
    /* The first error stays; the host functions ran and were told about it. */
    EXPECT_MESSAGE("injected device loss");
    CTEST_EXPECT(atomic_load(&ok.calls) == 1 && atomic_load(&ok.status) == HAL_ERROR_DEVICE_LOST);
    CTEST_EXPECT(atomic_load(&second_failure.calls) == 1 &&
                 atomic_load(&second_failure.status) == HAL_ERROR_DEVICE_LOST);
    EXPECT_STATUS(fx.ops->stream_destroy(s), HAL_ERROR_DEVICE_LOST);
    t_close(&fx);
    return CTEST_PASS;
}

/* ---- no execution slot --------------------------------------------------------------------- */

static bool flag_set(void *arg)
{
    return atomic_load((atomic_int *)arg) != 0;
}

static void set_flag_cb(hal_status_t status, void *arg)
{
    atomic_store((atomic_int *)arg, status == HAL_OK ? 1 : 2);
}

/* Ranks of one collective as host functions on streams of one device: each waits for all. */
typedef struct rendezvous {
    atomic_int arrived;
    int expected;
} rendezvous_t;

static hal_status_t rendezvous_fn(void *arg, hal_status_t stream_status)
{
    rendezvous_t *r = arg;
    atomic_fetch_add(&r->arrived, 1);
    uint64_t deadline = hq_now_ns() + UINT64_C(10000000000);
    while (atomic_load(&r->arrived) < r->expected) {
        if (hq_now_ns() > deadline)
            return HAL_ERROR_TIMEOUT;
        th_sleep_ms(1);
    }
    return HAL_OK;
}

CTEST(CpuHostFn, HoldsNoExecutionSlot)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open_with_host(&fx, &fake_host, "1", NULL, "1", NULL), HAL_OK);
    void *a = NULL, *b = NULL, *c = NULL;
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &a), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &b), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_create(fx.dev[0], 0, &c), HAL_OK);

    /* A blocked host function on `a`; `b`'s copy and callback (which need the device's only
     * slot) still run. */
    th_gate_t gate;
    th_gate_init(&gate);
    EXPECT_STATUS(fx.ops->stream_launch_host_fn(a, th_gate_fn, &gate), HAL_OK);
    CTEST_EXPECT(th_wait_until(th_gate_entered, &gate, 10000));
    enum { SIZE = 1 << 20 };
    unsigned char *src = malloc(SIZE), *dst = calloc(1, SIZE);
    memset(src, 0x6b, SIZE);
    hal_backend_ptr_t ps = t_ptr(src, HAL_MEM_KIND_UNREGISTERED);
    hal_backend_ptr_t pd = t_ptr(dst, HAL_MEM_KIND_UNREGISTERED);
    atomic_int copied;
    atomic_init(&copied, 0);
    EXPECT_STATUS(fx.ops->memcpy_async(b, &pd, &ps, SIZE), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_add_callback(b, set_flag_cb, &copied), HAL_OK);
    CTEST_EXPECT(th_wait_until(flag_set, &copied, 10000));
    CTEST_EXPECT(atomic_load(&copied) == 1);
    CTEST_EXPECT(atomic_load(&gate.entered) == 1 && !gate.open); /* still blocked meanwhile */
    CTEST_EXPECT(memcmp(src, dst, SIZE) == 0);
    th_gate_open(&gate);
    EXPECT_STATUS(fx.ops->stream_synchronize(a), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_synchronize(b), HAL_OK);

    /* Three "ranks" on one device with one slot meet in host functions. */
    rendezvous_t r = { .expected = 3 };
    atomic_init(&r.arrived, 0);
    EXPECT_STATUS(fx.ops->stream_launch_host_fn(a, rendezvous_fn, &r), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_launch_host_fn(b, rendezvous_fn, &r), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_launch_host_fn(c, rendezvous_fn, &r), HAL_OK);
    EXPECT_STATUS(fx.ops->device_synchronize(fx.dev[0]), HAL_OK);

    EXPECT_STATUS(fx.ops->stream_destroy(a), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_destroy(b), HAL_OK);
    EXPECT_STATUS(fx.ops->stream_destroy(c), HAL_OK);
    free(src);
    free(dst);
    th_gate_destroy(&gate);
    t_close(&fx);
    return CTEST_PASS;
}
