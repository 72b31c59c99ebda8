/* SPDX-License-Identifier: Apache-2.0 */
/* The trace layer's file (trace_file.c): one Chrome trace JSON file per process, shared by every
 * backend traced in it. Internal to the HAL and its tests.
 *
 * The file is HAL_TRACE_FILE ("%p" in it becomes the process id, "%%" a '%'), or
 * hal-trace-<pid>.json in the current directory. It is created 0600; the layer refuses a path
 * whose last component is a symbolic link, that is not a regular file, that belongs to another
 * user or that has other hard links (HAL_ERROR_PERMISSION_DENIED), so the variable can only ever
 * make the library write a file of the calling user's own, at the path given.
 *
 * Events are appended to a fixed 1 MiB buffer and written out when it fills, when a traced
 * backend closes and at exit, so memory stays bounded however long the process runs. After
 * every write the file ends with the JSON trailer, so it is complete, valid JSON whenever no
 * write is in progress (a process killed mid-run leaves every event written so far). Timestamps
 * are CLOCK_MONOTONIC microseconds; "otherData" records the offset to the Unix epoch. */
#ifndef HAL_LAYERS_TRACE_H
#define HAL_LAYERS_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "hal/hal_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Base of the thread ids that stand for streams in the trace (device-side spans): stream track
 * n has tid HAL_TRACE_STREAM_TID_BASE + n, far above any Linux thread id. */
#define HAL_TRACE_STREAM_TID_BASE 1000000000u

/* Takes a reference to the file, opening (or reopening) it if no instance holds one. Returns
 * HAL_OK, or HAL_ERROR_INVALID_ARGUMENT (bad HAL_TRACE_FILE), HAL_ERROR_PERMISSION_DENIED or
 * HAL_ERROR_NOT_FOUND with the message set (call names the HAL function). */
hal_status_t hal_trace_file_acquire(const char *call);
/* Writes out what is buffered; the last reference also closes the file. Reopening the same
 * path later in this process continues the same file if nobody touched it meanwhile. */
void hal_trace_file_release(void);
/* Appends one event (a complete JSON object, len bytes); dropped (and counted) when no file is
 * open, or when event is NULL. */
void hal_trace_file_emit(const char *event, size_t len);
/* Writes out what is buffered. */
void hal_trace_file_flush(void);
/* Events dropped so far (no file open, or a write failed). */
uint64_t hal_trace_file_dropped(void);
/* Copies the path of the open (or last) file; "" if none. */
void hal_trace_file_path(char *buf, size_t size);

/* CLOCK_MONOTONIC in nanoseconds, the clock of every timestamp. */
uint64_t hal_trace_now_ns(void);
/* The calling thread's id (gettid). */
uint32_t hal_trace_tid(void);
/* The process id the events carry. */
int hal_trace_pid(void);

#ifdef __cplusplus
}
#endif

#endif /* HAL_LAYERS_TRACE_H */
