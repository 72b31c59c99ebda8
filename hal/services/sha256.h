/* SPDX-License-Identifier: Apache-2.0 */
/* SHA-256 (FIPS 180-4), incremental, for the HAL's services and for backends (linked in
 * statically; not part of the public API). Every function is safe to call from any thread on
 * its own context; none fails. */
#ifndef HAL_SERVICES_SHA256_H
#define HAL_SERVICES_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define HAL_SHA256_BYTES 32

typedef struct hal_sha256_ctx {
    uint32_t h[8];
    uint64_t bytes; /* message length so far */
    uint8_t block[64];
    size_t used; /* bytes waiting in block */
} hal_sha256_ctx_t;

/* Starts a digest in *ctx. */
void hal_sha256_init(hal_sha256_ctx_t *ctx);
/* Adds data[0, size) to the digest. */
void hal_sha256_update(hal_sha256_ctx_t *ctx, const void *data, size_t size);
/* Ends the digest into digest; *ctx must be initialised again before reuse. */
void hal_sha256_final(hal_sha256_ctx_t *ctx, uint8_t digest[HAL_SHA256_BYTES]);
/* The digest of data[0, size) in one call. */
void hal_sha256(const void *data, size_t size, uint8_t digest[HAL_SHA256_BYTES]);
/* digest as 64 lowercase hexadecimal digits and a NUL. */
void hal_sha256_hex(const uint8_t digest[HAL_SHA256_BYTES], char hex[2 * HAL_SHA256_BYTES + 1]);

#endif /* HAL_SERVICES_SHA256_H */
