/* SPDX-License-Identifier: Apache-2.0 */
/* The bootstrap's records: the unique id (encoding, checks, hal_bootstrap_parse_id) and the rank
 * entries every rank announces (formats in bootstrap_internal.h). Pure functions of their
 * bytes, apart from the thread-local error message. */
#include <string.h>

#include "hal/src/comm/bootstrap.h"
#include "hal/src/comm/bootstrap_internal.h"
#include "hal/src/service.h"

void bs_id_encode(const bs_id_t *d, uint8_t out[HAL_UNIQUE_ID_BYTES])
{
    memset(out, 0, HAL_UNIQUE_ID_BYTES);
    put32(out, BS_ID_TAG);
    put16(out + 4, BS_ID_VERSION);
    put16(out + 6, (uint16_t)d->flags);
    bs_addr_encode(&d->root, out + 8);
    memcpy(out + 32, d->secret, HAL_BOOTSTRAP_SECRET_BYTES);
    memcpy(out + 64, d->nonce, HAL_BOOTSTRAP_NONCE_BYTES);
}

/* Pure function of the 128 bytes (the fuzzing target): returns NULL and fills *d, or says what is
 * wrong. */
const char *bs_id_decode(const uint8_t in[HAL_UNIQUE_ID_BYTES], bs_id_t *d)
{
    memset(d, 0, sizeof(*d));
    if (get32(in) != BS_ID_TAG)
        return "wrong format tag (not a torch-hal unique id)";
    if (get16(in + 4) != BS_ID_VERSION)
        return "unsupported format version";
    uint16_t flags = get16(in + 6);
    if (flags & ~HAL_COMM_ID_FLAG_STORE)
        return "unknown flags";
    if (!all_zero(in + 80, HAL_UNIQUE_ID_BYTES - 80))
        return "reserved bytes are not zero";
    const char *why = bs_addr_decode(in + 8, &d->root);
    if (why != NULL)
        return why;
    if (flags & HAL_COMM_ID_FLAG_STORE) {
        if (d->root.u.sa.sa_family != AF_UNSPEC)
            return "an id for a store carries a root address";
    } else {
        if (d->root.u.sa.sa_family == AF_UNSPEC)
            return "no root address (and not made for a store)";
        if (bs_addr_port(&d->root) == 0)
            return "root port is zero";
    }
    if (all_zero(in + 32, HAL_BOOTSTRAP_SECRET_BYTES))
        return "job secret is all zero";
    d->flags = flags;
    memcpy(d->secret, in + 32, HAL_BOOTSTRAP_SECRET_BYTES);
    memcpy(d->nonce, in + 64, HAL_BOOTSTRAP_NONCE_BYTES);
    return NULL;
}

/* Validates an id and copies out its nonce (nonce may be NULL to only validate). Pure apart from
 * the thread-local error message. Returns HAL_OK or HAL_ERROR_INVALID_ARGUMENT. Thread safety:
 * safe. */
hal_status_t hal_bootstrap_parse_id(const hal_unique_id_t *id,
                                    uint8_t nonce[HAL_BOOTSTRAP_NONCE_BYTES])
{
    HAL_CHECK_NOT_NULL(id, NULL, "hal_comm_init");
    bs_id_t d;
    const char *why = bs_id_decode(id->internal, &d);
    if (why != NULL)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, "hal_comm_init",
                         "malformed unique id: %s", why);
    if (nonce != NULL)
        memcpy(nonce, d.nonce, HAL_BOOTSTRAP_NONCE_BYTES);
    memset(d.secret, 0, sizeof(d.secret));
    return HAL_OK;
}

/* ---- rank entries ---- */

void bs_entry_encode(const bs_entry_t *e, uint8_t out[BS_ENTRY_BYTES])
{
    memset(out, 0, BS_ENTRY_BYTES);
    put32(out, (uint32_t)e->peer.rank);
    put32(out + 4, (uint32_t)e->nranks);
    put64(out + 8, e->peer.host_hash);
    put32(out + 16, (uint32_t)e->peer.pid);
    bs_addr_encode(&e->addr, out + 24);
    memcpy(out + 48, e->instance, BS_INSTANCE_BYTES);
}

const char *bs_entry_decode(const uint8_t in[BS_ENTRY_BYTES], bs_entry_t *e)
{
    memset(e, 0, sizeof(*e));
    uint32_t rank = get32(in), nranks = get32(in + 4);
    if (nranks < 1 || nranks > BS_MAX_RANKS)
        return "nranks out of range";
    if (rank >= nranks)
        return "rank out of range";
    if (get32(in + 20) != 0)
        return "reserved bytes are not zero";
    const char *why = bs_addr_decode(in + 24, &e->addr);
    if (why != NULL)
        return why;
    if (e->addr.u.sa.sa_family == AF_UNSPEC || bs_addr_port(&e->addr) == 0)
        return "no listening address";
    e->peer.rank = (int32_t)rank;
    e->nranks = (int32_t)nranks;
    e->peer.host_hash = get64(in + 8);
    e->peer.pid = (int32_t)get32(in + 16);
    memcpy(e->instance, in + 48, BS_INSTANCE_BYTES);
    return NULL;
}
