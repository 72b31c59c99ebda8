/* SPDX-License-Identifier: Apache-2.0 */
/* Inter-process device memory of the cpu backend through the public API (hal_mem_ipc_*), with
 * the backend loaded by the core: a forked child opens a backend of its own, maps the parent's
 * memory from a handle sent through a pipe, checks and overwrites it, and leaves with _exit.
 *
 * The child is forked either before the parent opens its backend or after (then the core has
 * to forget the parent's backend in the child). The second order cannot run under
 * ThreadSanitizer: the core gives each device a default stream, whose worker is a thread, so
 * the parent is multi-threaded when it forks and the child starts threads, which
 * ThreadSanitizer does not support. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hal/hal.h"
#include "tools/ctest/ctest.h"
#include "tools/ctest/ctest_status.h"

#define CHECK(cond)              \
    do {                         \
        if (!CTEST_EXPECT(cond)) \
            goto out;            \
    } while (0)

enum { SIZE = 3 << 20, OFFSET = 12345 };

static unsigned char pattern(size_t i)
{
    return (unsigned char)(i * 13u + 1u);
}

/* The child: waits for the handle, then maps it with a backend of its own. */
static int child(int handle_fd)
{
    int rc = 1;
    hal_backend_t backend = NULL;
    hal_device_t dev = NULL;
    hal_ipc_handle_t h;
    CHECK(read(handle_fd, &h, sizeof(h)) == (ssize_t)sizeof(h));
    CHECK_STATUS_GOTO(hal_backend_open("cpu", &backend), HAL_OK, out);
    CHECK_STATUS_GOTO(hal_device_get(backend, 1, &dev), HAL_OK,
                      out); /* any device of the backend */
    void *q = NULL;
    CHECK_STATUS_GOTO(hal_mem_ipc_open_handle(dev, &h, &q), HAL_OK, out);
    hal_mem_info_t info = HAL_MEM_INFO_INIT;
    CHECK_STATUS_GOTO(hal_mem_get_info((char *)q + 100, &info), HAL_OK, out);
    CHECK(info.kind == HAL_MEM_KIND_DEVICE && info.device == dev);
    CHECK(info.base == q && info.size == SIZE - OFFSET);
    const unsigned char *b = q;
    for (size_t i = 0; i < SIZE - OFFSET; i++)
        CHECK(b[i] == pattern(i + OFFSET));
    memset(q, 0xa7, SIZE - OFFSET);
    /* Mapped memory is closed, not freed. */
    CHECK_STATUS_GOTO(hal_mem_free(q), HAL_ERROR_INVALID_ARGUMENT, out);
    CHECK_STATUS_GOTO(hal_mem_ipc_close_handle(q), HAL_OK, out);
    CHECK_STATUS_GOTO(hal_mem_ipc_close_handle(q), HAL_ERROR_INVALID_ARGUMENT, out);
    rc = 0;
out:
    if (backend != NULL && hal_backend_close(backend) != HAL_OK)
        rc = 1;
    return rc;
}

/* Forks the child; returns its pid (or -1) and the pipe end that sends it the handle. */
static pid_t start_child(int *handle_fd)
{
    int p[2];
    if (pipe(p) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[1]);
        _exit(child(p[0]));
    }
    close(p[0]);
    if (pid < 0)
        close(p[1]);
    else
        *handle_fd = p[1];
    return pid;
}

static int run(bool fork_after_open)
{
    int rc = CTEST_FAIL;
    int handle_fd = -1;
    pid_t pid = -1;
    hal_backend_t backend = NULL;
    hal_device_t dev = NULL;
    void *p = NULL;
    if (!fork_after_open)
        CHECK((pid = start_child(&handle_fd)) > 0);
    CHECK_STATUS_GOTO(hal_backend_open("cpu", &backend), HAL_OK, out);
    CHECK_STATUS_GOTO(hal_device_get(backend, 0, &dev), HAL_OK, out);
    hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
    CHECK_STATUS_GOTO(hal_device_get_properties(dev, &props), HAL_OK, out);
    CHECK((props.capabilities & HAL_DEVICE_CAP_IPC) != 0);

    CHECK_STATUS_GOTO(hal_mem_alloc(dev, HAL_MEM_KIND_DEVICE, SIZE, 0, &p), HAL_OK, out);
    unsigned char *b = p;
    for (size_t i = 0; i < SIZE; i++)
        b[i] = pattern(i);
    hal_ipc_handle_t h;
    CHECK_STATUS_GOTO(hal_mem_ipc_get_handle(b + OFFSET, &h), HAL_OK, out);
    void *self = NULL;
    CHECK_STATUS_GOTO(hal_mem_ipc_open_handle(dev, &h, &self), HAL_ERROR_INVALID_ARGUMENT, out);
    CHECK_MESSAGE_GOTO("handle was exported by this process", out);

    if (fork_after_open)
        CHECK((pid = start_child(&handle_fd)) > 0);
    CHECK(write(handle_fd, &h, sizeof(h)) == (ssize_t)sizeof(h));
    close(handle_fd);
    handle_fd = -1;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
    }
    pid = -1;
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* The child's writes landed here. */
    size_t wrong = 0;
    for (size_t i = 0; i < SIZE; i++)
        wrong += b[i] != (i < OFFSET ? pattern(i) : 0xa7);
    CHECK(wrong == 0);
    rc = CTEST_PASS;
out:
    if (handle_fd >= 0)
        close(handle_fd); /* a waiting child reads end-of-file and gives up */
    if (pid > 0)
        waitpid(pid, NULL, 0);
    if (p != NULL && hal_mem_free(p) != HAL_OK)
        rc = CTEST_FAIL;
    if (backend != NULL && hal_backend_close(backend) != HAL_OK)
        rc = CTEST_FAIL;
    return rc;
}

CTEST(CpuIpcApi, ChildForkedBeforeOpenMapsParentMemory)
{
    return run(false);
}

CTEST(CpuIpcApi, ChildForkedAfterOpenMapsParentMemory)
{
#if defined(__SANITIZE_THREAD__)
    CTEST_SKIP("ThreadSanitizer does not support threads started after a multi-threaded fork");
#else
    return run(true);
#endif
}
