/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance: events. Events are versioned: each record bumps the version, a wait or a
 * synchronize binds to the version current at its call, a never-recorded event is complete.
 * The version tests hold work behind gates (blocking host callbacks) to make the order exact. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cts.h"

static bool has_timing(const cts_ctx_t *ctx)
{
    return (ctx->props.capabilities & HAL_DEVICE_CAP_TIMING_EVENTS) != 0;
}

int cts_event_create_destroy(cts_ctx_t *ctx)
{
    hal_event_t e = NULL, f = NULL;
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &f));
    CTS_CHECK(e != NULL && f != NULL && e != f);
    CTS_CHECK_OK(hal_event_destroy(e));
    CTS_CHECK_OK(hal_event_destroy(f));
    return CTS_PASS;
}

int cts_event_create_invalid(cts_ctx_t *ctx)
{
    hal_event_t e = NULL;
    CTS_CHECK_STATUS(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, NULL),
                     HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_event_create(ctx->device, 1u << 1, &e), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_event_create(ctx->device, 1u << 31, &e), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_event_create(ctx->device, 0xffffffffu, &e), HAL_ERROR_INVALID_ARGUMENT);
    return CTS_PASS;
}

/* Timing is optional: supported, the event is created; unsupported, the call is refused. */
int cts_event_create_timing(cts_ctx_t *ctx)
{
    hal_event_t e = NULL;
    if (!has_timing(ctx)) {
        CTS_CHECK_STATUS(hal_event_create(ctx->device, HAL_EVENT_FLAG_TIMING, &e),
                         HAL_ERROR_UNSUPPORTED);
        return CTS_PASS;
    }
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_TIMING, &e));
    CTS_CHECK_OK(hal_event_query(e));
    CTS_CHECK_OK(hal_event_destroy(e));
    return CTS_PASS;
}

int cts_event_never_recorded_is_complete(cts_ctx_t *ctx)
{
    hal_event_t e = NULL;
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    CTS_CHECK_OK(hal_event_query(e));
    CTS_CHECK_OK(hal_event_synchronize(e));
    CTS_CHECK_OK(hal_event_destroy(e));
    return CTS_PASS;
}

int cts_event_record_query_synchronize(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL, def = NULL;
    hal_event_t e = NULL;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_device_get_default_stream(ctx->device, &def));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    CTS_CHECK_OK(hal_event_record(e, s));
    CTS_CHECK_OK(hal_event_synchronize(e));
    CTS_CHECK_OK(hal_event_query(e));
    /* Any stream of the event's device may record it, the default one included. */
    CTS_CHECK_OK(hal_event_record(e, def));
    CTS_CHECK_OK(cts_poll_event(e, 5000));
    CTS_CHECK_OK(hal_event_synchronize(e));
    CTS_CHECK_OK(hal_event_destroy(e));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_event_query_pending(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    hal_event_t e = NULL;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    cts_gate_t *g = cts_gate_new(ctx);
    CTS_CHECK_OK(cts_gate_enqueue(g, s));
    CTS_CHECK_OK(hal_event_record(e, s));
    CTS_CHECK_STATUS(hal_event_query(e), HAL_NOT_READY);
    cts_sleep_ms(20);
    CTS_CHECK_STATUS(hal_event_query(e), HAL_NOT_READY);
    cts_gate_open(g);
    CTS_CHECK_OK(hal_event_synchronize(e));
    CTS_CHECK_OK(hal_event_query(e));
    CTS_CHECK_OK(hal_event_destroy(e));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_event_synchronize_blocks(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    hal_event_t e = NULL;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    cts_gate_t *g = cts_gate_new(ctx);
    CTS_CHECK_OK(cts_gate_enqueue(g, s));
    CTS_CHECK_OK(hal_event_record(e, s));
    CTS_CHECK(cts_gate_open_later(ctx, g, 50) == 0);
    CTS_CHECK_OK(hal_event_synchronize(e));
    CTS_CHECKF(cts_gate_done(g), "hal_event_synchronize returned before the event was reached");
    CTS_CHECK_OK(hal_event_destroy(e));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

/* A completed event that is recorded again is pending until the stream reaches the new record. */
int cts_event_rerecord_bumps_version(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    hal_event_t e = NULL;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    CTS_CHECK_OK(hal_event_record(e, s));
    CTS_CHECK_OK(hal_event_synchronize(e));
    CTS_CHECK_OK(hal_event_query(e));
    cts_gate_t *g = cts_gate_new(ctx);
    CTS_CHECK_OK(cts_gate_enqueue(g, s));
    CTS_CHECK_OK(hal_event_record(e, s));
    CTS_CHECKF(hal_event_query(e) == HAL_NOT_READY,
               "after a re-record behind held work the event still reports the old version");
    cts_gate_open(g);
    CTS_CHECK_OK(cts_poll_event(e, 5000));
    CTS_CHECK_OK(hal_event_destroy(e));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

/* A wait binds to the version current at the call: re-recording the event afterwards (behind
 * more held work) does not extend the wait.
 *   A: [gate1] [record e: v1] [gate2] [record e: v2]
 *   B:             [wait e (v1)] [memset] [record eb]
 * Opening gate1 must let B finish while gate2 still holds v2. */
int cts_event_wait_binds_to_version_at_call(cts_ctx_t *ctx)
{
    hal_stream_t a = NULL, b = NULL;
    hal_event_t e = NULL, eb = NULL;
    uint8_t *d = NULL;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &a));
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &b));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &eb));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 4096, 0, (void **)&d));
    cts_gate_t *g1 = cts_gate_new(ctx), *g2 = cts_gate_new(ctx);
    CTS_CHECK_OK(cts_gate_enqueue(g1, a));
    CTS_CHECK_OK(hal_event_record(e, a));
    CTS_CHECK_OK(hal_stream_wait_event(b, e));
    CTS_CHECK_OK(hal_memset_async(d, 1, 4096, b));
    CTS_CHECK_OK(hal_event_record(eb, b));
    CTS_CHECK_OK(cts_gate_enqueue(g2, a));
    CTS_CHECK_OK(hal_event_record(e, a));
    cts_sleep_ms(30);
    CTS_CHECKF(hal_event_query(eb) == HAL_NOT_READY,
               "the waiting stream did not wait for the event's first version");
    cts_gate_open(g1);
    CTS_CHECKF(cts_poll_event(eb, 5000) == HAL_OK,
               "the waiting stream is still blocked after the version it waited for completed: "
               "the wait followed the later re-record");
    CTS_CHECK_STATUS(hal_event_query(e), HAL_NOT_READY); /* v2 is held by gate2 */
    cts_gate_open(g2);
    CTS_CHECK_OK(hal_event_synchronize(e));
    CTS_CHECK_OK(hal_stream_synchronize(b));
    CTS_CHECK_OK(hal_mem_free(d));
    CTS_CHECK_OK(hal_event_destroy(e));
    CTS_CHECK_OK(hal_event_destroy(eb));
    CTS_CHECK_OK(hal_stream_destroy(a));
    CTS_CHECK_OK(hal_stream_destroy(b));
    return CTS_PASS;
}

/* A wait issued after a re-record binds to the new version, even though an older version has
 * already completed.
 *   A: [record e: v1, completes] [gate] [record e: v2]
 *   B:                                    [wait e (v2)] [record eb] */
int cts_event_wait_sees_new_version(cts_ctx_t *ctx)
{
    hal_stream_t a = NULL, b = NULL;
    hal_event_t e = NULL, eb = NULL;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &a));
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &b));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &eb));
    CTS_CHECK_OK(hal_event_record(e, a));
    CTS_CHECK_OK(hal_event_synchronize(e));
    cts_gate_t *g = cts_gate_new(ctx);
    CTS_CHECK_OK(cts_gate_enqueue(g, a));
    CTS_CHECK_OK(hal_event_record(e, a));
    CTS_CHECK_OK(hal_stream_wait_event(b, e));
    CTS_CHECK_OK(hal_event_record(eb, b));
    cts_sleep_ms(50);
    CTS_CHECKF(hal_event_query(eb) == HAL_NOT_READY,
               "the wait was satisfied by the event's completed older version");
    CTS_CHECK_STATUS(hal_stream_query(b), HAL_NOT_READY);
    cts_gate_open(g);
    CTS_CHECK_OK(cts_poll_event(eb, 5000));
    CTS_CHECK_OK(hal_event_query(e));
    CTS_CHECK_OK(hal_event_destroy(e));
    CTS_CHECK_OK(hal_event_destroy(eb));
    CTS_CHECK_OK(hal_stream_destroy(a));
    CTS_CHECK_OK(hal_stream_destroy(b));
    return CTS_PASS;
}

typedef struct sync_arg {
    hal_event_t e;
    int started; /* guarded by lock */
    int returned;
    hal_status_t status;
    pthread_mutex_t lock;
} sync_arg_t;

static void *sync_main(void *p)
{
    sync_arg_t *a = p;
    pthread_mutex_lock(&a->lock);
    a->started = 1;
    pthread_mutex_unlock(&a->lock);
    hal_status_t st = hal_event_synchronize(a->e);
    pthread_mutex_lock(&a->lock);
    a->status = st;
    a->returned = 1;
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

static int sync_returned(sync_arg_t *a)
{
    pthread_mutex_lock(&a->lock);
    int r = a->returned;
    pthread_mutex_unlock(&a->lock);
    return r;
}

/* hal_event_synchronize also binds to the version current at its call: a record issued while a
 * thread is waiting (allowed: record is safe with synchronize) does not extend that wait. */
int cts_event_synchronize_binds_to_version_at_call(cts_ctx_t *ctx)
{
    hal_stream_t a = NULL;
    pthread_t t;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    sync_arg_t *arg = cts_calloc(ctx, sizeof(*arg));
    CTS_CHECK(arg != NULL);
    pthread_mutex_init(&arg->lock, NULL);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &a));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &arg->e));
    cts_gate_t *g1 = cts_gate_new(ctx), *g2 = cts_gate_new(ctx);
    CTS_CHECK_OK(cts_gate_enqueue(g1, a));
    CTS_CHECK_OK(hal_event_record(arg->e, a));
    CTS_CHECK(pthread_create(&t, NULL, sync_main, arg) == 0);
    /* Give the thread time to enter hal_event_synchronize before the re-record. */
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&arg->lock);
        int started = arg->started;
        pthread_mutex_unlock(&arg->lock);
        if (started)
            break;
        cts_sleep_ms(1);
    }
    cts_sleep_ms(200);
    hal_status_t rec1 = cts_gate_enqueue(g2, a);
    hal_status_t rec2 = hal_event_record(arg->e, a);
    cts_gate_open(g1);
    double deadline = cts_now_ms() + 5000;
    while (!sync_returned(arg) && cts_now_ms() < deadline)
        cts_sleep_ms(1);
    int returned_early = sync_returned(arg);
    cts_gate_open(g2);
    pthread_join(t, NULL);
    CTS_CHECK_OK(rec1);
    CTS_CHECK_OK(rec2);
    CTS_CHECKF(returned_early, "hal_event_synchronize waited for a version recorded after the "
                               "call instead of the one current at the call");
    CTS_CHECK_OK(arg->status);
    CTS_CHECK_OK(hal_event_synchronize(arg->e));
    CTS_CHECK_OK(hal_event_destroy(arg->e));
    CTS_CHECK_OK(hal_stream_destroy(a));
    pthread_mutex_destroy(&arg->lock);
    return CTS_PASS;
}

/* Destroying an event does not affect streams already waiting on it, nor pending records. */
int cts_event_destroy_while_pending(cts_ctx_t *ctx)
{
    hal_stream_t a = NULL, b = NULL;
    hal_event_t e = NULL, eb = NULL;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &a));
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &b));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &eb));
    cts_gate_t *g = cts_gate_new(ctx);
    CTS_CHECK_OK(cts_gate_enqueue(g, a));
    CTS_CHECK_OK(hal_event_record(e, a));
    CTS_CHECK_OK(hal_stream_wait_event(b, e));
    CTS_CHECK_OK(hal_event_record(eb, b));
    CTS_CHECK_OK(hal_event_destroy(e));
    cts_sleep_ms(30);
    CTS_CHECKF(hal_event_query(eb) == HAL_NOT_READY,
               "destroying the event released a stream waiting on it");
    cts_gate_open(g);
    CTS_CHECK_OK(cts_poll_event(eb, 5000));
    CTS_CHECK_OK(hal_stream_synchronize(a));
    CTS_CHECK_OK(hal_event_destroy(eb));
    CTS_CHECK_OK(hal_stream_destroy(a));
    CTS_CHECK_OK(hal_stream_destroy(b));
    return CTS_PASS;
}

int cts_event_record_other_device_stream(cts_ctx_t *ctx)
{
    hal_stream_t so = NULL;
    hal_event_t e = NULL;
    CTS_SKIP_UNLESS_DEVICES(ctx, 2);
    hal_device_t other = cts_other_device(ctx);
    CTS_CHECK(other != NULL);
    CTS_CHECK_OK(hal_stream_create(other, 0, &so));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    CTS_CHECK_STATUS(hal_event_record(e, so), HAL_ERROR_INVALID_ARGUMENT);
    /* No side effect: the event was never recorded. */
    CTS_CHECK_OK(hal_event_query(e));
    CTS_CHECK_OK(hal_event_destroy(e));
    CTS_CHECK_OK(hal_stream_destroy(so));
    return CTS_PASS;
}

static void sleep_fn(hal_status_t status, void *user_data)
{
    (void)status;
    cts_sleep_ms((unsigned)(uintptr_t)user_data);
}

int cts_event_elapsed_ms(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    hal_event_t start = NULL, end = NULL;
    float ms = -1.0f, back = 1.0f, zero = 1.0f;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_TIMING_EVENTS, "timing events");
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_TIMING, &start));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_TIMING, &end));
    double host_before = cts_now_ms();
    CTS_CHECK_OK(hal_event_record(start, s));
    CTS_CHECK_OK(hal_stream_add_callback(s, sleep_fn, (void *)(uintptr_t)40));
    CTS_CHECK_OK(hal_event_record(end, s));
    CTS_CHECK_OK(hal_event_synchronize(end));
    double host_span = cts_now_ms() - host_before;
    CTS_CHECK_OK(hal_event_elapsed_ms(start, end, &ms));
    /* At least the work; at most the host's span around both events (+1 ms of resolution),
     * however long a loaded machine made that. */
    CTS_CHECKF(ms >= 30.0f && ms <= host_span + 1.0,
               "40 ms of work measured as %.3f ms (%.3f ms on the host)", (double)ms, host_span);
    CTS_CHECK_OK(hal_event_elapsed_ms(end, start, &back));
    CTS_CHECKF(back <= 0.0f, "end to start measured %.3f ms, expected <= 0", (double)back);
    CTS_CHECK_OK(hal_event_elapsed_ms(start, start, &zero));
    CTS_CHECK(zero == 0.0f);
    CTS_CHECK_OK(hal_event_destroy(start));
    CTS_CHECK_OK(hal_event_destroy(end));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_event_elapsed_not_ready(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    hal_event_t start = NULL, end = NULL;
    float ms = 0.0f;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_TIMING_EVENTS, "timing events");
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_TIMING, &start));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_TIMING, &end));
    CTS_CHECK_OK(hal_event_record(start, s));
    CTS_CHECK_OK(hal_event_synchronize(start));
    cts_gate_t *g = cts_gate_new(ctx);
    CTS_CHECK_OK(cts_gate_enqueue(g, s));
    CTS_CHECK_OK(hal_event_record(end, s));
    CTS_CHECK_STATUS(hal_event_elapsed_ms(start, end, &ms), HAL_NOT_READY);
    CTS_CHECK_STATUS(hal_event_elapsed_ms(end, start, &ms), HAL_NOT_READY);
    cts_gate_open(g);
    CTS_CHECK_OK(hal_event_synchronize(end));
    CTS_CHECK_OK(hal_event_elapsed_ms(start, end, &ms));
    CTS_CHECK(ms >= 0.0f);
    CTS_CHECK_OK(hal_event_destroy(start));
    CTS_CHECK_OK(hal_event_destroy(end));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_event_elapsed_invalid(cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    hal_event_t t1 = NULL, t2 = NULL, plain = NULL, never = NULL;
    float ms = 0.0f;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_TIMING_EVENTS, "timing events");
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_TIMING, &t1));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_TIMING, &t2));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_TIMING, &never));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &plain));
    CTS_CHECK_OK(hal_event_record(t1, s));
    CTS_CHECK_OK(hal_event_record(plain, s));
    CTS_CHECK_OK(hal_event_record(t2, s));
    CTS_CHECK_OK(hal_stream_synchronize(s));
    CTS_CHECK_OK(hal_event_elapsed_ms(t1, t2, &ms));
    CTS_CHECK_STATUS(hal_event_elapsed_ms(t1, t2, NULL), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_event_elapsed_ms(t1, plain, &ms), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_event_elapsed_ms(plain, t2, &ms), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_event_elapsed_ms(t1, never, &ms), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_event_elapsed_ms(never, t1, &ms), HAL_ERROR_INVALID_ARGUMENT);
    /* Events of different devices. */
    hal_device_t other = cts_other_device(ctx);
    if (other != NULL) {
        hal_stream_t so = NULL;
        hal_event_t to = NULL;
        CTS_CHECK_OK(hal_stream_create(other, 0, &so));
        hal_status_t st = hal_event_create(other, HAL_EVENT_FLAG_TIMING, &to);
        if (st == HAL_OK) {
            CTS_CHECK_OK(hal_event_record(to, so));
            CTS_CHECK_OK(hal_stream_synchronize(so));
            CTS_CHECK_STATUS(hal_event_elapsed_ms(t1, to, &ms), HAL_ERROR_INVALID_ARGUMENT);
            CTS_CHECK_STATUS(hal_event_elapsed_ms(to, t1, &ms), HAL_ERROR_INVALID_ARGUMENT);
            CTS_CHECK_OK(hal_event_destroy(to));
        }
        CTS_CHECK_OK(hal_stream_destroy(so));
    }
    CTS_CHECK_OK(hal_event_destroy(t1));
    CTS_CHECK_OK(hal_event_destroy(t2));
    CTS_CHECK_OK(hal_event_destroy(never));
    CTS_CHECK_OK(hal_event_destroy(plain));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_event_native_handle(cts_ctx_t *ctx)
{
    hal_event_t e = NULL;
    uintptr_t a = 0, b = 0;
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    hal_status_t st = hal_event_get_native_handle(e, &a);
    CTS_CHECK_STATUS2(st, HAL_OK, HAL_ERROR_UNSUPPORTED);
    if (st == HAL_OK) {
        CTS_CHECK_OK(hal_event_get_native_handle(e, &b));
        CTS_CHECK(a == b);
    }
    CTS_CHECK_STATUS(hal_event_get_native_handle(e, NULL), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_OK(hal_event_destroy(e));
    return CTS_PASS;
}

/* An event may be recorded on several streams of its device in turn; each record is the new
 * version. */
int cts_event_record_on_several_streams(cts_ctx_t *ctx)
{
    hal_stream_t a = NULL, b = NULL;
    hal_event_t e = NULL;
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &a));
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &b));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    cts_gate_t *ga = cts_gate_new(ctx);
    CTS_CHECK_OK(cts_gate_enqueue(ga, a));
    CTS_CHECK_OK(hal_event_record(e, a)); /* v1, held */
    CTS_CHECK_OK(hal_event_record(e, b)); /* v2 on an idle stream */
    /* The current version (v2) completes although v1 is still held. */
    CTS_CHECKF(cts_poll_event(e, 5000) == HAL_OK,
               "the event follows its older record instead of the latest one");
    cts_gate_open(ga);
    CTS_CHECK_OK(hal_stream_synchronize(a));
    CTS_CHECK_OK(hal_event_query(e));
    CTS_CHECK_OK(hal_event_destroy(e));
    CTS_CHECK_OK(hal_stream_destroy(a));
    CTS_CHECK_OK(hal_stream_destroy(b));
    return CTS_PASS;
}
