/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the unique-id parser (hal_bootstrap_parse_id, hal/src/comm/bootstrap_id.c),
 * the first thing a rank does with the 128 bytes it was handed out of band. Input: the id's bytes
 * (shorter inputs are zero-padded). Checks, besides memory safety: an accepted id has the
 * documented layout (tag, version, flags, zero reserved bytes, a root address unless made for a
 * store, a secret that is not all zero) and the nonce returned is the id's; a rejected one gives
 * INVALID_ARGUMENT with a "malformed unique id" message. */
#include <string.h>

#include "hal/hal.h"
#include "hal/src/comm/bootstrap.h"

#define CHECK(cond)           \
    do {                      \
        if (!(cond))          \
            __builtin_trap(); \
    } while (0)

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    hal_unique_id_t id;
    memset(&id, 0, sizeof(id));
    memcpy(id.internal, data, size < sizeof(id.internal) ? size : sizeof(id.internal));
    uint8_t nonce[HAL_BOOTSTRAP_NONCE_BYTES];
    memset(nonce, 0xa5, sizeof(nonce));
    hal_status_t st = hal_bootstrap_parse_id(&id, nonce);
    const uint8_t *b = id.internal;
    if (st == HAL_OK) {
        CHECK(memcmp(b, "HALB", 4) == 0 && b[4] == 0 && b[5] == 1);
        CHECK(b[6] == 0 && (b[7] & ~1u) == 0);
        CHECK(all_zero(b + 80, 48));
        CHECK(!all_zero(b + 32, 32));
        CHECK(memcmp(nonce, b + 64, sizeof(nonce)) == 0);
        int store = b[7] & 1;
        CHECK(store ? all_zero(b + 8, 24) : (b[8] == 4 || b[8] == 6));
        if (!store)
            CHECK(b[10] || b[11]); /* a port */
        CHECK(hal_bootstrap_parse_id(&id, NULL) == HAL_OK);
    } else {
        CHECK(st == HAL_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(hal_last_error_message(), "malformed unique id") != NULL);
        uint8_t untouched[HAL_BOOTSTRAP_NONCE_BYTES];
        memset(untouched, 0xa5, sizeof(untouched));
        CHECK(memcmp(nonce, untouched, sizeof(nonce)) == 0);
    }
    return 0;
}
