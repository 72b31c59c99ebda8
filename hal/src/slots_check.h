/* SPDX-License-Identifier: Apache-2.0 */
/* Internal to the HAL core: a backend's ops table checked against the slot spec (slots.c). */
#ifndef HAL_SRC_SLOTS_CHECK_H
#define HAL_SRC_SLOTS_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "hal/hal_backend_abi.h"

/* The smallest size of a table of minor version `minor`: the end of its last slot. */
size_t hal_slots_table_size(uint32_t minor);

/* The first slot that the spec requires of a table of version 1.`minor` and that `table` leaves
 * NULL, or NULL when there is none; *since receives the minor version the slot appeared in.
 * `table` must span at least hal_slots_table_size(minor) bytes. */
const char *hal_slots_missing_required(const hal_backend_ops_t *table, uint32_t minor,
                                       uint32_t *since);

/* The first slot that a device advertising `capabilities` must have and `table` leaves NULL, or
 * NULL when there is none; *capability receives the name of the capability bit. */
const char *hal_slots_missing_for_capability(const hal_backend_ops_t *table, uint64_t capabilities,
                                             const char **capability);

#endif /* HAL_SRC_SLOTS_CHECK_H */
