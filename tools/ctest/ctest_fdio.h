/* SPDX-License-Identifier: Apache-2.0 */
/* Whole-buffer reads and writes on pipes and sockets for tests that talk to forked children. */
#ifndef TOOLS_CTEST_CTEST_FDIO_H
#define TOOLS_CTEST_CTEST_FDIO_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Reads exactly n bytes from fd, waiting at most timeout_ms in all (a child that died or hangs
 * must fail the test, not stall it). Retries on EINTR.
 * Returns 0, or -1 on timeout, end of file or an error.
 * Thread safety: safe for different descriptors. */
int ctest_read_full(int fd, void *buf, size_t n, int timeout_ms);

/* Writes exactly n bytes to fd. Retries on EINTR.
 * Returns 0, or -1 on an error.
 * Thread safety: safe for different descriptors. */
int ctest_write_full(int fd, const void *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
