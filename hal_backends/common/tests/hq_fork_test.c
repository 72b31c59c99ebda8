/* SPDX-License-Identifier: Apache-2.0 */
/* The host-queue engine in a forked child: objects created before the fork (whose worker
 * threads do not exist in the child, and whose locks may be held by threads that do not exist)
 * answer HAL_ERROR_DEVICE_LOST without blocking, their destroy functions abandon them, and new
 * objects created in the child work. Its own binary: the parent forks while its workers run. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hal_backends/common/tests/hq_test_util.h"

/* Exit codes of the child: 0, or the line of the first failed check. */
#define CHILD_CHECK(cond)              \
    do {                               \
        if (!(cond))                   \
            _exit(__LINE__ % 250 + 1); \
    } while (0)

static void child(hq_device_t *dev, void *stream, void *busy, void *event, bool start_threads)
{
    atomic_int count;
    atomic_init(&count, 0);
    atomic_int *counter = &count;
    /* The parent's objects are dead here, whatever state they were in. */
    CHILD_CHECK(hq_stream_query(stream) == HAL_ERROR_DEVICE_LOST);
    CHILD_CHECK(strstr(th_last_error(), "created before fork()") != NULL);
    CHILD_CHECK(hq_stream_synchronize(busy) == HAL_ERROR_DEVICE_LOST);
    CHILD_CHECK(hq_stream_enqueue(stream, th_count_work, &counter, sizeof(counter), 0) ==
                HAL_ERROR_DEVICE_LOST);
    CHILD_CHECK(hq_stream_add_callback(stream, th_count_cb, &count) == HAL_ERROR_DEVICE_LOST);
    CHILD_CHECK(hq_stream_inject_error(stream, HAL_ERROR_ABORTED, "x") == HAL_ERROR_DEVICE_LOST);
    CHILD_CHECK(hq_stream_wait_event(stream, event) == HAL_ERROR_DEVICE_LOST);
    CHILD_CHECK(hq_event_record(event, stream) == HAL_ERROR_DEVICE_LOST);
    CHILD_CHECK(hq_event_query(event) == HAL_ERROR_DEVICE_LOST);
    CHILD_CHECK(hq_event_synchronize(event) == HAL_ERROR_DEVICE_LOST);
    float ms;
    CHILD_CHECK(hq_event_elapsed_ms(event, event, &ms) == HAL_ERROR_DEVICE_LOST);
    CHILD_CHECK(hq_device_synchronize(dev) == HAL_ERROR_DEVICE_LOST);
    CHILD_CHECK(hq_device_check_lost(dev) == HAL_ERROR_DEVICE_LOST);
    void *obj = NULL;
    CHILD_CHECK(hq_stream_create(dev, 0, &obj) == HAL_ERROR_DEVICE_LOST && obj == NULL);
    CHILD_CHECK(hq_event_create(dev, 0, &obj) == HAL_ERROR_DEVICE_LOST && obj == NULL);
    hq_device_mark_lost(dev, "ignored in a child");
    CHILD_CHECK(hq_stream_destroy(busy) == HAL_ERROR_DEVICE_LOST); /* abandoned, not joined */
    CHILD_CHECK(hq_stream_destroy(stream) == HAL_ERROR_DEVICE_LOST);
    hq_event_destroy(event);
    hq_device_fini(dev);
    CHILD_CHECK(atomic_load(&count) == 0);

    /* A device of the child's own works. */
    hq_device_t mine;
    hq_device_config_t cfg = th_config(1, 1, 0);
    CHILD_CHECK(hq_device_init(&mine, &cfg) == HAL_OK);
    if (start_threads) {
        void *s = NULL, *ev = NULL;
        CHILD_CHECK(hq_stream_create(&mine, 0, &s) == HAL_OK);
        CHILD_CHECK(hq_event_create(&mine, 0, &ev) == HAL_OK);
        for (int i = 0; i < 10; i++)
            CHILD_CHECK(hq_stream_enqueue(s, th_count_work, &counter, sizeof(counter), 0) ==
                        HAL_OK);
        CHILD_CHECK(hq_event_record(ev, s) == HAL_OK);
        CHILD_CHECK(hq_event_synchronize(ev) == HAL_OK);
        CHILD_CHECK(atomic_load(&count) == 10);
        CHILD_CHECK(hq_device_synchronize(&mine) == HAL_OK);
        hq_event_destroy(ev);
        CHILD_CHECK(hq_stream_destroy(s) == HAL_OK);
    }
    hq_device_fini(&mine);
    _exit(0);
}

CTEST(HqFork, ObjectsOfTheParentAreDeadInAChild)
{
    hq_device_t dev;
    hq_device_config_t cfg = th_config(0, 1, 20);
    EXPECT_STATUS(hq_device_init(&dev, &cfg), HAL_OK);
    void *idle = NULL, *busy = NULL, *ev = NULL;
    EXPECT_STATUS(hq_stream_create(&dev, 0, &idle), HAL_OK);
    EXPECT_STATUS(hq_stream_create(&dev, 0, &busy), HAL_OK);
    EXPECT_STATUS(hq_event_create(&dev, 0, &ev), HAL_OK);
    /* At the fork, one worker is blocked in a callback with work and a record queued behind it,
     * so the event's version is pending in the child for good. */
    th_gate_t gate;
    th_gate_init(&gate);
    /* Every worker of the parent runs before the fork. A thread still starting up allocates in
     * the sanitizer runtime, whose allocator (gcc 12's ASan) has no fork handler: the child
     * would deadlock on the lock that thread held. */
    atomic_int idle_count;
    atomic_init(&idle_count, 0);
    atomic_int *idle_counter = &idle_count;
    EXPECT_STATUS(hq_stream_enqueue(idle, th_count_work, &idle_counter, sizeof(idle_counter), 0),
                  HAL_OK);
    EXPECT_STATUS(hq_stream_synchronize(idle), HAL_OK);
    CTEST_EXPECT(atomic_load(&idle_count) == 1);
    EXPECT_STATUS(hq_stream_add_callback(busy, th_gate_cb, &gate), HAL_OK);
    EXPECT_STATUS(hq_event_record(ev, busy), HAL_OK);
    CTEST_EXPECT(th_wait_until(th_gate_entered, &gate, 10000));

#if defined(__SANITIZE_THREAD__)
    bool start_threads = false; /* TSan does not support threads started after such a fork */
#else
    bool start_threads = true;
#endif
    pid_t pid = fork();
    if (pid == 0)
        child(&dev, idle, busy, ev, start_threads);
    CTEST_EXPECT(pid > 0);
    int status = 0;
    if (pid > 0) {
        /* The child must finish on its own; a hang fails the test after 20 s. */
        int waited = 0;
        pid_t got = 0;
        while ((got = waitpid(pid, &status, WNOHANG)) == 0 && waited < 20000) {
            th_sleep_ms(10);
            waited += 10;
        }
        if (got == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fprintf(stderr, "the child hung\n");
            ctest_record_failure();
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "the child failed: status %d (exit code = failed line %% 250 + 1)\n",
                    status);
            ctest_record_failure();
        }
    }

    /* The parent's objects are unaffected. */
    EXPECT_STATUS(hq_stream_query(busy), HAL_NOT_READY);
    th_gate_open(&gate);
    EXPECT_STATUS(hq_event_synchronize(ev), HAL_OK);
    EXPECT_STATUS(hq_device_synchronize(&dev), HAL_OK);
    hq_event_destroy(ev);
    EXPECT_STATUS(hq_stream_destroy(idle), HAL_OK);
    EXPECT_STATUS(hq_stream_destroy(busy), HAL_OK);
    th_gate_destroy(&gate);
    hq_device_fini(&dev);
    return CTEST_PASS;
}
