/* SPDX-License-Identifier: Apache-2.0 */
/* Resource failures in the host-queue engine: every allocation, mutex, condition variable and
 * thread creation of device, stream and event creation fails in turn, and so do the growth of
 * a stream's task nodes and the list device_synchronize makes. Each failure must return
 * HAL_ERROR_OUT_OF_HOST_MEMORY with a detail, leave nothing behind (ASan checks) and leave
 * the objects that exist working. The binary is linked with -Wl,--wrap for the calls below, so
 * that the test can make the Nth call of one kind on the calling thread fail. */
#include <errno.h>
#include <stdlib.h>

#include "hal_backends/common/tests/hq_test_util.h"

/* ---- failure injection --------------------------------------------------------------------- */

typedef enum fail_call {
    FAIL_MALLOC,
    FAIL_CALLOC,
    FAIL_MUTEX_INIT,
    FAIL_COND_INIT,
    FAIL_THREAD_CREATE,
    FAIL_CALLS,
} fail_call_t;

static const char *const fail_names[FAIL_CALLS] = {
    "malloc", "calloc", "pthread_mutex_init", "pthread_cond_init", "pthread_create",
};

/* Per call kind, on this thread: 0 disarmed; n > 0: the nth call from now fails. */
static _Thread_local int countdown[FAIL_CALLS];

static void fail_nth(fail_call_t call, int n)
{
    countdown[call] = n;
}

static void fail_none(void)
{
    memset(countdown, 0, sizeof(countdown));
}

static bool should_fail(fail_call_t call)
{
    if (countdown[call] == 0)
        return false;
    return --countdown[call] == 0;
}

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
int __real_pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a);
int __real_pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a);
int __real_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg);

void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
int __wrap_pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a);
int __wrap_pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg);

void *__wrap_malloc(size_t size)
{
    return should_fail(FAIL_MALLOC) ? NULL : __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return should_fail(FAIL_CALLOC) ? NULL : __real_calloc(n, size);
}

int __wrap_pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a)
{
    return should_fail(FAIL_MUTEX_INIT) ? ENOMEM : __real_pthread_mutex_init(m, a);
}

int __wrap_pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a)
{
    return should_fail(FAIL_COND_INIT) ? ENOMEM : __real_pthread_cond_init(c, a);
}

int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
    return should_fail(FAIL_THREAD_CREATE) ? EAGAIN : __real_pthread_create(t, a, fn, arg);
}

/* ---- creation ------------------------------------------------------------------------------ */

/* Fails the nth call of every kind during device, stream and event creation, for n = 1, 2, ...
 * until creation no longer reaches an nth call; each failure must be clean. */
CTEST(HqAlloc, EveryCreationFailureIsClean)
{
    int failures_seen = 0;
    for (int call = 0; call < FAIL_CALLS; call++) {
        for (int n = 1; n < 10; n++) {
            int reached = 0;
            for (int what = 0; what < 3; what++) {
                hq_device_t dev;
                hq_device_config_t cfg = th_config(0, 1, 0);
                cfg.stream_ext_size = 24;
                void *obj = NULL;
                hal_status_t st;
                th_clear_error();
                if (what == 0) {
                    fail_nth((fail_call_t)call, n);
                    st = hq_device_init(&dev, &cfg);
                    fail_none();
                } else {
                    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
                    fail_nth((fail_call_t)call, n);
                    st = what == 1 ? hq_stream_create(&dev, 0, &obj)
                                   : hq_event_create(&dev, 0, &obj);
                    fail_none();
                }
                if (st != HAL_OK) {
                    reached++;
                    failures_seen++;
                    if (st != HAL_ERROR_OUT_OF_HOST_MEMORY || th_last_error()[0] == '\0') {
                        fprintf(stderr, "%s failure %d of %s: %s, detail \"%s\"\n",
                                fail_names[call], n,
                                what == 0   ? "hq_device_init"
                                : what == 1 ? "hq_stream_create"
                                            : "hq_event_create",
                                hq_status_name(st), th_last_error());
                        ctest_record_failure();
                    }
                    if (what > 0)
                        hq_device_fini(&dev);
                    continue;
                }
                /* The object works. */
                if (what == 1) {
                    EXPECT_STATUS(hq_stream_synchronize(obj), HAL_OK);
                    EXPECT_STATUS(hq_stream_destroy(obj), HAL_OK);
                } else if (what == 2) {
                    EXPECT_STATUS(hq_event_query(obj), HAL_OK);
                    hq_event_destroy(obj);
                }
                EXPECT_STATUS(hq_device_synchronize(&dev), HAL_OK);
                hq_device_fini(&dev);
            }
            if (reached == 0)
                break; /* no creation makes an nth call of this kind */
        }
    }
    /* Every kind of call the engine makes failed at least once. */
    CTEST_EXPECT(failures_seen >= 10);
    return CTEST_PASS;
}

CTEST(HqAlloc, MessagesNameTheFailedCall)
{
    hq_device_t dev;
    hq_device_config_t cfg = th_config(0, 0, 0);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    void *s = NULL;
    th_clear_error();
    fail_nth(FAIL_THREAD_CREATE, 1);
    EXPECT_STATUS(hq_stream_create(&dev, 0, &s), HAL_ERROR_OUT_OF_HOST_MEMORY);
    fail_none();
    EXPECT_MESSAGE("pthread_create failed for a stream worker");
    th_clear_error();
    fail_nth(FAIL_CALLOC, 1);
    EXPECT_STATUS(hq_stream_create(&dev, 0, &s), HAL_ERROR_OUT_OF_HOST_MEMORY);
    fail_none();
    EXPECT_MESSAGE("failed for a stream");
    th_clear_error();
    fail_nth(FAIL_CALLOC, 1);
    EXPECT_STATUS(hq_event_create(&dev, 0, &s), HAL_ERROR_OUT_OF_HOST_MEMORY);
    fail_none();
    EXPECT_MESSAGE("failed for an event");
    EXPECT_STATUS(hq_device_synchronize(&dev), HAL_OK); /* no stream was left behind */
    CTEST_EXPECT(dev.stream_count == 0);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

/* ---- growth -------------------------------------------------------------------------------- */

/* With the first chunk of task nodes in use, the next enqueue must grow; when that fails,
 * nothing is queued and nothing changes (an event record keeps its version), and the stream
 * goes on working. */
CTEST(HqAlloc, TaskNodeGrowthFailureQueuesNothing)
{
    hq_device_t dev;
    hq_device_config_t cfg = th_config(0, 0, 0);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    void *s = NULL, *other = NULL, *ev = NULL;
    EXPECT_STATUS(hq_stream_create(&dev, 0, &s), HAL_OK);
    EXPECT_STATUS(hq_stream_create(&dev, 0, &other), HAL_OK);
    EXPECT_STATUS(hq_event_create(&dev, 0, &ev), HAL_OK);
    th_gate_t gate, other_gate;
    th_gate_init(&gate);
    th_gate_init(&other_gate);
    atomic_int count;
    atomic_init(&count, 0);
    atomic_int *counter = &count;
    /* A pending version on `other`, so that a wait for it would need a node. */
    EXPECT_STATUS(hq_stream_add_callback(other, th_gate_cb, &other_gate), HAL_OK);
    EXPECT_STATUS(hq_event_record(ev, other), HAL_OK);
    EXPECT_STATUS(hq_stream_add_callback(s, th_gate_cb, &gate), HAL_OK);
    for (int i = 1; i < HQ_TASK_CHUNK; i++)
        EXPECT_STATUS(hq_stream_enqueue(s, th_count_work, &counter, sizeof(counter), 0), HAL_OK);
    hq_stream_t *raw = s;
    hq_event_t *raw_ev = ev;
    uint64_t submitted = atomic_load(&raw->submitted);

    fail_nth(FAIL_MALLOC, 1);
    EXPECT_STATUS(hq_stream_enqueue(s, th_count_work, &counter, sizeof(counter), 0),
                  HAL_ERROR_OUT_OF_HOST_MEMORY);
    EXPECT_MESSAGE("failed for stream task nodes");
    fail_nth(FAIL_MALLOC, 1);
    EXPECT_STATUS(hq_stream_add_callback(s, th_count_cb, &count), HAL_ERROR_OUT_OF_HOST_MEMORY);
    fail_nth(FAIL_MALLOC, 1);
    EXPECT_STATUS(hq_stream_launch_host_fn(s, th_gate_fn, &gate), HAL_ERROR_OUT_OF_HOST_MEMORY);
    fail_nth(FAIL_MALLOC, 1);
    EXPECT_STATUS(hq_stream_wait_event(s, ev), HAL_ERROR_OUT_OF_HOST_MEMORY);
    fail_nth(FAIL_MALLOC, 1);
    EXPECT_STATUS(hq_event_record(ev, s), HAL_ERROR_OUT_OF_HOST_MEMORY);
    fail_nth(FAIL_MALLOC, 1);
    EXPECT_STATUS(hq_stream_inject_error(s, HAL_ERROR_ABORTED, "never queued"),
                  HAL_ERROR_OUT_OF_HOST_MEMORY);
    fail_none();
    CTEST_EXPECT(atomic_load(&raw->submitted) == submitted);
    CTEST_EXPECT(atomic_load(&raw_ev->recorded) == 1); /* the failed record published nothing */
    CTEST_EXPECT(atomic_load(&raw_ev->refcount) == 2); /* the owner and the queued record */

    /* Growth works again; everything queued runs. */
    EXPECT_STATUS(hq_stream_enqueue(s, th_count_work, &counter, sizeof(counter), 0), HAL_OK);
    th_gate_open(&gate);
    th_gate_open(&other_gate);
    EXPECT_STATUS(hq_stream_synchronize(s), HAL_OK);
    CTEST_EXPECT(atomic_load(&count) == HQ_TASK_CHUNK);
    EXPECT_STATUS(hq_event_synchronize(ev), HAL_OK);
    hq_event_destroy(ev);
    EXPECT_STATUS(hq_stream_destroy(s), HAL_OK);
    EXPECT_STATUS(hq_stream_destroy(other), HAL_OK);
    th_gate_destroy(&gate);
    th_gate_destroy(&other_gate);
    hq_device_fini(&dev);
    return CTEST_PASS;
}

/* device_synchronize keeps 16 streams inline; past that it allocates its list, and a failure
 * returns HAL_ERROR_OUT_OF_HOST_MEMORY without waiting for or pinning any stream. */
CTEST(HqAlloc, DeviceSynchronizeListFailure)
{
    hq_device_t dev;
    hq_device_config_t cfg = th_config(0, 0, 0);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    enum { NS = 17 };
    void *s[NS];
    for (int i = 0; i < NS; i++)
        EXPECT_STATUS(hq_stream_create(&dev, 0, &s[i]), HAL_OK);
    for (int second = 1; second <= 2; second++) {
        th_clear_error();
        fail_nth(FAIL_MALLOC, second);
        EXPECT_STATUS(hq_device_synchronize(&dev), HAL_ERROR_OUT_OF_HOST_MEMORY);
        fail_none();
        EXPECT_MESSAGE("listing 17 streams");
    }
    for (int i = 0; i < NS; i++)
        CTEST_EXPECT(atomic_load(&((hq_stream_t *)s[i])->refcount) == 1);
    EXPECT_STATUS(hq_device_synchronize(&dev), HAL_OK);
    for (int i = 0; i < NS; i++)
        EXPECT_STATUS(hq_stream_destroy(s[i]), HAL_OK);
    hq_device_fini(&dev);
    return CTEST_PASS;
}
