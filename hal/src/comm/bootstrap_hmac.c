/* SPDX-License-Identifier: Apache-2.0 */
/* HMAC-SHA-256 (RFC 2104) over the HAL's SHA-256 (hal/services/sha256.c), for the bootstrap's
 * challenge-response authentication and the integrity of store entries. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hal/services/sha256.h"
#include "hal/src/comm/bootstrap_internal.h"

/* SHA-256 of data[0, size) into digest. Returns nothing. Thread safety: safe (no shared state). */
void hal_bootstrap_sha256(const void *data, size_t size, uint8_t digest[32])
{
    hal_sha256(data, size, digest);
}

/* HMAC-SHA-256 (RFC 2104) of data under key into mac; keys longer than the 64-byte block are
 * hashed first, as the RFC says. Returns nothing. Thread safety: safe (no shared state). */
void hal_bootstrap_hmac_sha256(const void *key, size_t key_size, const void *data, size_t size,
                               uint8_t mac[32])
{
    uint8_t k[64] = { 0 };
    if (key_size > sizeof(k))
        hal_bootstrap_sha256(key, key_size, k);
    else if (key_size > 0)
        memcpy(k, key, key_size);

    uint8_t pad[64], inner[32];
    hal_sha256_ctx_t ctx;
    for (size_t i = 0; i < sizeof(pad); i++)
        pad[i] = k[i] ^ 0x36;
    hal_sha256_init(&ctx);
    hal_sha256_update(&ctx, pad, sizeof(pad));
    hal_sha256_update(&ctx, data, size);
    hal_sha256_final(&ctx, inner);

    for (size_t i = 0; i < sizeof(pad); i++)
        pad[i] = k[i] ^ 0x5c;
    hal_sha256_init(&ctx);
    hal_sha256_update(&ctx, pad, sizeof(pad));
    hal_sha256_update(&ctx, inner, sizeof(inner));
    hal_sha256_final(&ctx, mac);
}

/* Compares two byte strings in time that depends only on size, so a peer probing MACs learns
 * nothing from how long a rejection takes. Returns true if equal. Thread safety: safe. */
bool hal_bootstrap_equal_ct(const void *a, const void *b, size_t size)
{
    const volatile uint8_t *x = a;
    const volatile uint8_t *y = b;
    uint8_t diff = 0;
    for (size_t i = 0; i < size; i++)
        diff |= (uint8_t)(x[i] ^ y[i]);
    return diff == 0;
}
