/* SPDX-License-Identifier: Apache-2.0 */
#include "tools/ctest/ctest_fdio.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int ctest_read_full(int fd, void *buf, size_t n, int timeout_ms)
{
    uint8_t *p = buf;
    int64_t deadline = now_ms() + timeout_ms;
    while (n > 0) {
        struct pollfd pf = { fd, POLLIN, 0 };
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return -1;
        int ready = poll(&pf, 1, (int)left);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0)
            return -1;
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int ctest_write_full(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}
