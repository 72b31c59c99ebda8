/* SPDX-License-Identifier: Apache-2.0 */
/* torch-hal public API: status codes and error messages. */
#ifndef HAL_STATUS_H
#define HAL_STATUS_H

#include <stdint.h>

#include "hal/hal_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every HAL function returns a status. The numeric values are part of the ABI.
 *
 * INVALID_ARGUMENT, INVALID_HANDLE and UNSUPPORTED guarantee that the call had no side effect.
 * DEVICE_LOST, REMOTE and ABORTED are sticky: the object that reported them keeps reporting them.
 * Asynchronous failures latch on the stream (or communicator) and are returned by its query and
 * synchronize calls. */
typedef enum hal_status {
    HAL_OK = 0,
    HAL_NOT_READY = 1,   /* asynchronous work has not completed yet (query calls) */
    HAL_IN_PROGRESS = 2, /* a non-blocking operation is still in progress */
    HAL_ERROR_INVALID_ARGUMENT = 3,
    HAL_ERROR_INVALID_HANDLE = 4, /* NULL, destroyed, or wrong-type handle */
    HAL_ERROR_UNSUPPORTED = 5,    /* the backend does not implement the call or option */
    HAL_ERROR_OUT_OF_DEVICE_MEMORY = 6,
    HAL_ERROR_OUT_OF_HOST_MEMORY = 7,
    HAL_ERROR_NOT_FOUND = 8, /* a named backend, file or pointer is unknown */
    HAL_ERROR_VERSION_MISMATCH = 9,
    HAL_ERROR_PERMISSION_DENIED = 10, /* e.g. a backend library in a world-writable location */
    HAL_ERROR_TIMEOUT = 11,
    HAL_ERROR_DEVICE_LOST = 12,
    HAL_ERROR_REMOTE = 13, /* a peer failed or disconnected */
    HAL_ERROR_ABORTED = 14,
    HAL_ERROR_BUSY = 15, /* the object is still in use (e.g. closing a backend with live handles) */
    HAL_ERROR_INTERNAL = 16,
    HAL_ERROR_BACKEND_SPECIFIC = 17, /* a native error without a better mapping; see the message */
    HAL_STATUS_FORCE_U32 = 0x7fffffff
} hal_status_t;

/* Returns the enumerator's name ("HAL_ERROR_TIMEOUT") as a static string; never NULL. Unknown
 * values give "HAL_STATUS_UNKNOWN".
 * Thread safety: safe. */
HAL_API const char *hal_status_string(hal_status_t status);

/* Returns the message of the last failed HAL call on the calling thread: it names the backend,
 * the HAL function and the native call that failed, e.g.
 * "cpu: hal_mem_alloc: out of device memory (requested 4096 bytes, 0 free of 1048576)".
 * Empty string if no call has failed on this thread. The pointer stays valid until the next HAL
 * call on the same thread.
 * Thread safety: safe; the message is thread-local. */
HAL_API const char *hal_last_error_message(void);

#ifdef __cplusplus
}
#endif

#endif /* HAL_STATUS_H */
