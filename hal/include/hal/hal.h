/* SPDX-License-Identifier: Apache-2.0 */
/* torch-hal: a vendor-neutral hardware-abstraction layer for accelerators. Umbrella header.
 *
 * Threading rules for the whole API: calls on different handles are free-threaded; calls on the
 * same stream need external ordering; allocation, queries and event query/synchronize are always
 * thread-safe. Each function's comment repeats its rule on a "Thread safety:" line.
 * Library code never aborts, exits, or prints to stdout; failures are statuses, with detail in
 * hal_last_error_message(). */
#ifndef HAL_HAL_H
#define HAL_HAL_H

/* Fixed order: version, status codes, handles and descriptors, then the functions by area. */
/* clang-format off */
#include "hal/hal_version.h"
#include "hal/hal_status.h"
#include "hal/hal_types.h"
#include "hal/hal_backend.h"
#include "hal/hal_device.h"
#include "hal/hal_memory.h"
#include "hal/hal_stream.h"
#include "hal/hal_allocator.h"
#include "hal/hal_comm.h"
#include "hal/hal_program.h"
#include "hal/hal_activity.h"
/* clang-format on */

#endif /* HAL_HAL_H */
