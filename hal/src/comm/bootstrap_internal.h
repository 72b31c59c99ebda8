/* SPDX-License-Identifier: Apache-2.0 */
/* Internal to the bootstrap and its tests: the keyed hash that authenticates connections, and a
 * hook the tests use to send a malformed frame. */
#ifndef HAL_SRC_COMM_BOOTSTRAP_INTERNAL_H
#define HAL_SRC_COMM_BOOTSTRAP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/src/comm/bootstrap.h"

/* SHA-256 of data (FIPS 180-4). */
void hal_bootstrap_sha256(const void *data, size_t size, uint8_t digest[32]);
/* HMAC-SHA-256 (RFC 2104) of data under key. */
void hal_bootstrap_hmac_sha256(const void *key, size_t key_size, const void *data, size_t size,
                               uint8_t mac[32]);
/* Compares in time independent of where the buffers differ. */
bool hal_bootstrap_equal_ct(const void *a, const void *b, size_t size);
/* Tests only: sends a frame header announcing `size` bytes without a payload. */
hal_status_t hal_bootstrap_test_send_header(hal_bootstrap_t *b, int peer, uint32_t tag,
                                            uint64_t size);

#endif /* HAL_SRC_COMM_BOOTSTRAP_INTERNAL_H */
