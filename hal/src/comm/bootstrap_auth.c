/* SPDX-License-Identifier: Apache-2.0 */
/* The bootstrap's challenge-response authentication of a connection (AUTH1, AUTH2, AUTH3; the
 * protocol is described in bootstrap_internal.h): the messages, pure except for their nonces,
 * and the connecting side's handshake. The accepting sides (root and peer listener) run their
 * half in bootstrap_root.c and bootstrap_rank.c. */
#include <errno.h>
#include <string.h>

#include "hal/src/comm/bootstrap.h"
#include "hal/src/comm/bootstrap_internal.h"
#include "hal/src/service.h"

static const char bs_label_connector[] = "torch-hal bootstrap 1 connector";
static const char bs_label_acceptor[] = "torch-hal bootstrap 1 acceptor";

static void bs_auth_mac(const uint8_t secret[HAL_BOOTSTRAP_SECRET_BYTES], const char *label,
                        const uint8_t *a1, const uint8_t *a2, size_t a2_len, const uint8_t *a3,
                        size_t a3_len, uint8_t mac[BS_MAC_BYTES])
{
    uint8_t buf[64 + BS_AUTH1_BYTES + BS_AUTH2_BYTES + 8];
    size_t n = strlen(label) + 1;
    memcpy(buf, label, n);
    memcpy(buf + n, a1, BS_AUTH1_BYTES);
    n += BS_AUTH1_BYTES;
    memcpy(buf + n, a2, a2_len);
    n += a2_len;
    if (a3_len > 0)
        memcpy(buf + n, a3, a3_len);
    n += a3_len;
    hal_bootstrap_hmac_sha256(secret, HAL_BOOTSTRAP_SECRET_BYTES, buf, n, mac);
}

int bs_auth1_make(uint16_t kind, uint8_t a1[BS_AUTH1_BYTES])
{
    put32(a1, BS_WIRE_MAGIC);
    put16(a1 + 4, BS_WIRE_VERSION);
    put16(a1 + 6, kind);
    return bs_random(a1 + 8, BS_CHALLENGE_BYTES);
}

static const char *bs_auth1_check(const uint8_t a1[BS_AUTH1_BYTES], uint16_t kind)
{
    if (get32(a1) != BS_WIRE_MAGIC)
        return "it does not speak the bootstrap protocol";
    if (get16(a1 + 4) != BS_WIRE_VERSION)
        return "it speaks another version of the bootstrap protocol";
    if (get16(a1 + 6) != kind)
        return kind == BS_KIND_ROOT ? "it is a rank, not the bootstrap root"
                                    : "it is not a rank's peer listener";
    return NULL;
}

static int bs_auth2_make(const uint8_t secret[HAL_BOOTSTRAP_SECRET_BYTES],
                         const uint8_t a1[BS_AUTH1_BYTES], uint16_t kind, uint32_t c_rank,
                         uint32_t a_rank, const uint8_t c_inst[BS_INSTANCE_BYTES],
                         const uint8_t a_inst[BS_INSTANCE_BYTES], uint8_t a2[BS_AUTH2_BYTES])
{
    put32(a2, BS_WIRE_MAGIC);
    put16(a2 + 4, BS_WIRE_VERSION);
    put16(a2 + 6, kind);
    if (bs_random(a2 + 8, BS_CHALLENGE_BYTES) != 0)
        return -1;
    put32(a2 + 40, c_rank);
    put32(a2 + 44, a_rank);
    memcpy(a2 + 48, c_inst, BS_INSTANCE_BYTES);
    memcpy(a2 + 64, a_inst, BS_INSTANCE_BYTES);
    bs_auth_mac(secret, bs_label_connector, a1, a2, BS_AUTH2_MAC_AT, NULL, 0, a2 + BS_AUTH2_MAC_AT);
    return 0;
}

/* Acceptor side: true if AUTH2 is well formed and proves the secret; fills the claims. */
bool bs_auth2_verify(const uint8_t secret[HAL_BOOTSTRAP_SECRET_BYTES],
                     const uint8_t a1[BS_AUTH1_BYTES], const uint8_t a2[BS_AUTH2_BYTES],
                     uint16_t kind, uint32_t *c_rank, uint32_t *a_rank,
                     uint8_t c_inst[BS_INSTANCE_BYTES], uint8_t a_inst[BS_INSTANCE_BYTES])
{
    uint8_t mac[BS_MAC_BYTES];
    bs_auth_mac(secret, bs_label_connector, a1, a2, BS_AUTH2_MAC_AT, NULL, 0, mac);
    bool ok = hal_bootstrap_equal_ct(mac, a2 + BS_AUTH2_MAC_AT, BS_MAC_BYTES);
    if (get32(a2) != BS_WIRE_MAGIC || get16(a2 + 4) != BS_WIRE_VERSION || get16(a2 + 6) != kind)
        ok = false;
    *c_rank = get32(a2 + 40);
    *a_rank = get32(a2 + 44);
    memcpy(c_inst, a2 + 48, BS_INSTANCE_BYTES);
    memcpy(a_inst, a2 + 64, BS_INSTANCE_BYTES);
    return ok;
}

void bs_auth3_make(const uint8_t secret[HAL_BOOTSTRAP_SECRET_BYTES],
                   const uint8_t a1[BS_AUTH1_BYTES], const uint8_t a2[BS_AUTH2_BYTES],
                   uint32_t status, uint8_t a3[BS_AUTH3_BYTES])
{
    memset(a3, 0, BS_AUTH3_BYTES);
    put32(a3, status);
    /* Only a success needs proof: a forged refusal gains a stranger nothing it could not get by
     * closing the connection. */
    if (status == BS_AUTH_OK)
        bs_auth_mac(secret, bs_label_acceptor, a1, a2, BS_AUTH2_BYTES, a3, 8, a3 + 8);
}

/* Runs the connecting side of the handshake on fd. Returns HAL_OK, or HAL_ERROR_PERMISSION_DENIED
 * (secrets differ, or the other end is no bootstrap endpoint), HAL_ERROR_INVALID_ARGUMENT (the
 * acceptor does not expect this rank), or an I/O status; the message is set. */
hal_status_t bs_handshake_connect(int wake_fd, const uint8_t *secret, int fd, uint16_t kind,
                                  uint32_t c_rank, uint32_t a_rank, const uint8_t *c_inst,
                                  const uint8_t *a_inst, int64_t deadline, uint32_t timeout_ms,
                                  const char *call, const char *peer)
{
    uint8_t a1[BS_AUTH1_BYTES], a2[BS_AUTH2_BYTES], a3[BS_AUTH3_BYTES], mac[BS_MAC_BYTES];
    int err;
    hal_status_t st = bs_io(wake_fd, fd, a1, sizeof(a1), false, deadline, &err);
    if (st != HAL_OK)
        return bs_io_error(st, err, call, timeout_ms, "waiting for the authentication challenge",
                           peer);
    const char *why = bs_auth1_check(a1, kind);
    if (why != NULL)
        return hal_error(HAL_ERROR_PERMISSION_DENIED, NULL, call, "authentication failed: %s: %s",
                         peer, why);
    if (bs_auth2_make(secret, a1, kind, c_rank, a_rank, c_inst, a_inst, a2) != 0)
        return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call, "getrandom failed: %s",
                         strerror(errno));
    st = bs_io(wake_fd, fd, a2, sizeof(a2), true, deadline, &err);
    if (st == HAL_OK)
        st = bs_io(wake_fd, fd, a3, sizeof(a3), false, deadline, &err);
    if (st != HAL_OK)
        return bs_io_error(st, err, call, timeout_ms, "authenticating", peer);
    switch (get32(a3)) {
    case BS_AUTH_OK:
        bs_auth_mac(secret, bs_label_acceptor, a1, a2, BS_AUTH2_BYTES, a3, 8, mac);
        if (hal_bootstrap_equal_ct(mac, a3 + 8, BS_MAC_BYTES))
            return HAL_OK;
        return hal_error(HAL_ERROR_PERMISSION_DENIED, NULL, call,
                         "authentication failed: wrong job secret (%s could not prove it holds "
                         "this job's secret)",
                         peer);
    case BS_AUTH_DENIED:
        return hal_error(HAL_ERROR_PERMISSION_DENIED, NULL, call,
                         "authentication failed: wrong job secret (%s rejected this rank's proof)",
                         peer);
    case BS_AUTH_CONFLICT:
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "%s refused the connection: it does not expect this process as rank %u "
                         "(was a rank claimed twice?)",
                         peer, c_rank);
    default:
        return hal_error(HAL_ERROR_REMOTE, NULL, call,
                         "%s answered the authentication with unknown status %u", peer, get32(a3));
    }
}
