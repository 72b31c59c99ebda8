/* SPDX-License-Identifier: Apache-2.0 */
/* Joining the job (hal_bootstrap_join, hal_bootstrap_connect): through the root (HELLO, then the
 * table of every rank, or the root's reason for failing the job) or through an external store
 * (authenticated entries, then a comparison of table digests among the ranks). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hal/src/comm/bootstrap.h"
#include "hal/src/comm/bootstrap_internal.h"
#include "hal/src/service.h"

static const char bs_label_store[] = "torch-hal bootstrap 1 store entry";

static hal_status_t bs_check_table_entry(hal_bootstrap_t *b, int r, const bs_entry_t *e,
                                         const char *call)
{
    if (e->peer.rank != r || e->nranks != b->nranks)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "rank %d joined as rank %d of %d, but this rank (%d) expects %d ranks", r,
                         e->peer.rank, e->nranks, b->rank, b->nranks);
    return HAL_OK;
}

/* Reads the root's answer to this rank's HELLO on fd: the table of every rank's entry (checked,
 * and stored in b->entries), or the root's reason for failing the job. Waits until the deadline,
 * then a little longer for the root's own report of a timeout. Reads only fd (the fuzzing target
 * drives it over a socket pair). Returns HAL_OK or an error (message set). */
static hal_status_t bs_read_root_reply(hal_bootstrap_t *b, int fd, int64_t deadline,
                                       const char *who, const char *call)
{
    char what[96];
    uint8_t hdr[BS_HEADER_BYTES];
    int err = 0;
    hal_status_t st;
    snprintf(what, sizeof(what), "waiting for all %d ranks to join", b->nranks);
    /* The root reports a failed rendezvous (saying how many ranks are missing) when its own
     * deadline passes, which is at or just before ours: give that report a moment to arrive. */
    int64_t table_deadline = deadline + BS_ROOT_GRACE_MS;
    st = bs_wait(b->wake_fd, fd, POLLIN, deadline);
    if (st == HAL_ERROR_TIMEOUT)
        st = bs_wait(b->wake_fd, fd, POLLIN, table_deadline);
    if (st == HAL_OK)
        st = bs_io(b->wake_fd, fd, hdr, sizeof(hdr), false, table_deadline, &err);
    if (st != HAL_OK)
        return bs_io_error(st, err, call, b->timeout_ms, what, who);
    uint32_t type = get32(hdr), tag = get32(hdr + 4);
    uint64_t size = get64(hdr + 8);
    if (type == BS_FRAME_ERROR && size <= BS_ERROR_TEXT_MAX) {
        char text[BS_ERROR_TEXT_MAX + 1];
        st = bs_io(b->wake_fd, fd, text, (size_t)size, false, table_deadline, &err);
        if (st != HAL_OK)
            return bs_io_error(st, err, call, b->timeout_ms, "reading the root's error", who);
        text[size] = '\0';
        st = (hal_status_t)tag;
        if (st != HAL_ERROR_INVALID_ARGUMENT && st != HAL_ERROR_TIMEOUT &&
            st != HAL_ERROR_OUT_OF_HOST_MEMORY)
            st = HAL_ERROR_REMOTE;
        return hal_error(st, NULL, call, "%s: %s", who, text);
    }
    if (type != BS_FRAME_TABLE || size != (uint64_t)b->nranks * BS_ENTRY_BYTES)
        return hal_error(
            HAL_ERROR_REMOTE, NULL, call,
            "%s sent an unexpected frame (type %u, %llu bytes) instead of the table of %d ranks",
            who, type, (unsigned long long)size, b->nranks);
    for (int r = 0; r < b->nranks; r++) {
        uint8_t raw[BS_ENTRY_BYTES];
        bs_entry_t e;
        st = bs_io(b->wake_fd, fd, raw, sizeof(raw), false, table_deadline, &err);
        if (st != HAL_OK)
            return bs_io_error(st, err, call, b->timeout_ms, "reading the table of ranks", who);
        const char *why = bs_entry_decode(raw, &e);
        if (why != NULL)
            return hal_error(HAL_ERROR_REMOTE, NULL, call,
                             "%s sent a malformed entry for rank %d: %s", who, r, why);
        st = bs_check_table_entry(b, r, &e, call);
        if (st != HAL_OK)
            return st;
        if (r == b->rank && !hal_bootstrap_equal_ct(e.instance, b->instance, BS_INSTANCE_BYTES))
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                             "the table gives rank %d to another process (was it claimed twice?)",
                             r);
        b->entries[r] = e;
    }
    return HAL_OK;
}

/* Rendezvous through the root: hello, then the table (or the root's reason for failing). */
static hal_status_t bs_rendezvous_root(hal_bootstrap_t *b, int64_t deadline, const char *call)
{
    char where[80], who[120];
    uint8_t zero[BS_INSTANCE_BYTES] = { 0 };
    uint8_t hello[BS_HEADER_BYTES + BS_ENTRY_BYTES];
    bs_entry_t *me = &b->entries[b->rank];
    int fd, err;
    bs_addr_str(&b->root, where, sizeof(where));
    snprintf(who, sizeof(who), "the bootstrap root at %s", where);
    HAL_CHECK(bs_connect(b->wake_fd, &b->root, deadline, b->timeout_ms, call, who, &fd));
    hal_status_t st =
        bs_handshake_connect(b->wake_fd, b->secret, fd, BS_KIND_ROOT, (uint32_t)b->rank,
                             BS_ROOT_RANK, b->instance, zero, deadline, b->timeout_ms, call, who);
    if (st != HAL_OK)
        goto out;
    if (bs_addr_is_any(&me->addr)) {
        /* Listening on every interface: publish the one that reaches the root. */
        bs_addr_t local;
        uint16_t port = bs_addr_port(&me->addr);
        memset(&local, 0, sizeof(local));
        local.len = sizeof(local.u);
        if (getsockname(fd, &local.u.sa, &local.len) == 0 &&
            local.u.sa.sa_family == me->addr.u.sa.sa_family) {
            me->addr = local;
            bs_addr_set_port(&me->addr, port);
        } else {
            bs_addr_reachable(&me->addr);
        }
    }
    put32(hello, BS_FRAME_HELLO);
    put32(hello + 4, 0);
    put64(hello + 8, BS_ENTRY_BYTES);
    bs_entry_encode(me, hello + BS_HEADER_BYTES);
    st = bs_io(b->wake_fd, fd, hello, sizeof(hello), true, deadline, &err);
    if (st != HAL_OK) {
        st = bs_io_error(st, err, call, b->timeout_ms, "sending this rank's details", who);
        goto out;
    }
    st = bs_read_root_reply(b, fd, deadline, who, call);
out:
    close(fd);
    return st;
}

static void bs_store_key(const hal_bootstrap_t *b, int rank, char *key, size_t size)
{
    char hex[2 * HAL_BOOTSTRAP_NONCE_BYTES + 1];
    for (int i = 0; i < HAL_BOOTSTRAP_NONCE_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", b->nonce[i]);
    snprintf(key, size, "hal/%s/rank/%d", hex, rank);
}

/* Entry plus HMAC(secret, label | key | entry): a store writer without the secret cannot plant an
 * entry, and an entry cannot be replayed under another key. */
static void bs_store_mac(const hal_bootstrap_t *b, const char *key,
                         const uint8_t entry[BS_ENTRY_BYTES], uint8_t mac[BS_MAC_BYTES])
{
    uint8_t buf[sizeof(bs_label_store) + 96 + BS_ENTRY_BYTES];
    size_t n = sizeof(bs_label_store), k = strlen(key) + 1;
    memcpy(buf, bs_label_store, n);
    memcpy(buf + n, key, k);
    memcpy(buf + n + k, entry, BS_ENTRY_BYTES);
    hal_bootstrap_hmac_sha256(b->secret, sizeof(b->secret), buf, n + k + BS_ENTRY_BYTES, mac);
}

/* Looks a key up, waiting in short slices until the deadline so an abort is noticed. Returns HAL_OK
 * with *found, or an error (message set). */
static hal_status_t bs_store_get(hal_bootstrap_t *b, const hal_comm_store_t *store, const char *key,
                                 uint8_t value[BS_STORE_VALUE], int64_t deadline, const char *call,
                                 bool *found)
{
    *found = false;
    for (;;) {
        if (bs_aborted(b))
            return hal_error(HAL_ERROR_ABORTED, NULL, call,
                             "aborted while waiting for \"%s\" in the store", key);
        int64_t left = deadline - bs_now_ms();
        uint32_t slice = left <= 0                  ? 0
                         : left < BS_STORE_SLICE_MS ? (uint32_t)left
                                                    : BS_STORE_SLICE_MS;
        size_t size = 0;
        hal_status_t st = store->get(store->user_data, key, value, BS_STORE_VALUE, &size, slice);
        if (st == HAL_OK) {
            if (size != BS_STORE_VALUE)
                return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                                 "the store holds %zu bytes under \"%s\", not a rank entry", size,
                                 key);
            *found = true;
            return HAL_OK;
        }
        if (st != HAL_ERROR_TIMEOUT)
            return hal_error(st, NULL, call, "the store's get(\"%s\") failed: %s", key,
                             hal_status_string(st));
        if (bs_now_ms() >= deadline)
            return HAL_OK;
    }
}

/* Rendezvous through an external store: publish this rank's entry, read everyone else's, then check
 * that nobody overwrote ours (a rank claimed twice). */
static hal_status_t bs_rendezvous_store(hal_bootstrap_t *b, const hal_comm_store_t *store,
                                        int64_t deadline, const char *call)
{
    char key[96];
    uint8_t mine[BS_STORE_VALUE], value[BS_STORE_VALUE], mac[BS_MAC_BYTES];
    bs_entry_t *me = &b->entries[b->rank];
    bool found;
    if (bs_addr_is_any(&me->addr))
        bs_addr_reachable(&me->addr);
    bs_store_key(b, b->rank, key, sizeof(key));
    bs_entry_encode(me, mine);
    bs_store_mac(b, key, mine, mine + BS_ENTRY_BYTES);
    hal_status_t st = store->set(store->user_data, key, mine, sizeof(mine));
    if (st != HAL_OK)
        return hal_error(st, NULL, call, "the store's set(\"%s\") failed: %s", key,
                         hal_status_string(st));
    for (int r = 0; r < b->nranks; r++) {
        if (r == b->rank)
            continue;
        bs_store_key(b, r, key, sizeof(key));
        HAL_CHECK(bs_store_get(b, store, key, value, deadline, call, &found));
        if (!found) {
            /* Count who else is missing, for the message. */
            int missing = 1;
            for (int q = r + 1; q < b->nranks; q++) {
                char k2[96];
                size_t size = 0;
                if (q == b->rank)
                    continue;
                bs_store_key(b, q, k2, sizeof(k2));
                if (store->get(store->user_data, k2, value, sizeof(value), &size, 0) != HAL_OK)
                    missing++;
            }
            return hal_error(HAL_ERROR_TIMEOUT, NULL, call,
                             "timed out after %u ms waiting for %d of %d ranks to join through the "
                             "store (rank %d is missing)",
                             b->timeout_ms, missing, b->nranks, r);
        }
        bs_store_mac(b, key, value, mac);
        if (!hal_bootstrap_equal_ct(mac, value + BS_ENTRY_BYTES, BS_MAC_BYTES))
            return hal_error(HAL_ERROR_PERMISSION_DENIED, NULL, call,
                             "authentication failed: wrong job secret (the store entry of rank %d "
                             "was not made with this job's secret)",
                             r);
        bs_entry_t e;
        const char *why = bs_entry_decode(value, &e);
        if (why != NULL)
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                             "malformed store entry for rank %d: %s", r, why);
        HAL_CHECK(bs_check_table_entry(b, r, &e, call));
        b->entries[r] = e;
    }
    bs_store_key(b, b->rank, key, sizeof(key));
    HAL_CHECK(bs_store_get(b, store, key, value, bs_now_ms() + BS_STORE_SLICE_MS, call, &found));
    if (!found || memcmp(value, mine, sizeof(mine)) != 0) {
        bs_entry_t e;
        int pid = bs_entry_decode(value, &e) == NULL ? e.peer.pid : -1;
        return hal_error(
            HAL_ERROR_INVALID_ARGUMENT, NULL, call,
            "rank %d was claimed by another process too (pid %d); each rank must join once",
            b->rank, found ? pid : -1);
    }
    return HAL_OK;
}

/* Store mode has no root to vouch for one consistent table, so the ranks compare digests of
 * theirs; the peer handshakes check instance ids on the way. */
static hal_status_t bs_verify_table(hal_bootstrap_t *b, const char *call)
{
    size_t n = (size_t)b->nranks;
    uint8_t *raw = malloc(n * BS_ENTRY_BYTES);
    uint8_t *digests = malloc(n * 32);
    hal_status_t st = HAL_OK;
    if (raw == NULL || digests == NULL) {
        st = hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, NULL, call, "out of host memory");
        goto out;
    }
    for (size_t r = 0; r < n; r++)
        bs_entry_encode(&b->entries[r], raw + r * BS_ENTRY_BYTES);
    uint8_t digest[32];
    hal_bootstrap_sha256(raw, n * BS_ENTRY_BYTES, digest);
    st = bs_allgather(b, digest, sizeof(digest), digests, call);
    if (st != HAL_OK)
        goto out;
    for (size_t r = 0; r < n; r++) {
        if (memcmp(digests + r * 32, digest, 32) != 0) {
            st = hal_error(
                HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                "rank %zu saw other members of the job than rank %d (was a rank claimed twice?)", r,
                b->rank);
            break;
        }
    }
out:
    free(raw);
    free(digests);
    return st;
}

/* Second half of hal_bootstrap_connect: the rendezvous, bounded by the timeout given to create
 * (counted from now); hal_bootstrap_abort from another thread ends it with HAL_ERROR_ABORTED.
 * Returns the statuses of hal_bootstrap_connect; on failure b is still to be destroyed (and
 * other ranks see the failure as HAL_ERROR_REMOTE or a timeout). Call it once. Thread safety:
 * not with other calls on b, except hal_bootstrap_abort. */
hal_status_t hal_bootstrap_join(hal_bootstrap_t *b)
{
    const char *call = "hal_comm_init";
    if (b == NULL)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "bootstrap is NULL");
    if (b->join_started)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "this bootstrap already joined its job");
    b->join_started = true;
    if (bs_aborted(b))
        return hal_error(HAL_ERROR_ABORTED, NULL, call, "aborted before the rendezvous");
    int64_t deadline = bs_now_ms() + b->timeout_ms;
    HAL_CHECK(b->store_mode ? bs_rendezvous_store(b, &b->store, deadline, call)
                            : bs_rendezvous_root(b, deadline, call));
    int rc = bs_start_thread(&b->accept_thread, bs_accept_main, b, false);
    if (rc != 0) {
        char eb[96];
        return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call,
                         "cannot start the bootstrap accept thread: %s",
                         bs_strerror(rc, eb, sizeof(eb)));
    }
    b->accept_started = true;
    if (b->store_mode && b->nranks > 1)
        HAL_CHECK(bs_verify_table(b, call));
    return HAL_OK;
}

/* Joins the job (see bootstrap.h): hal_bootstrap_create, then hal_bootstrap_join. Blocks until
 * every rank joined or timeout_ms passed. Returns HAL_OK with *out, or
 * HAL_ERROR_INVALID_ARGUMENT, HAL_ERROR_PERMISSION_DENIED, HAL_ERROR_TIMEOUT, HAL_ERROR_REMOTE,
 * HAL_ERROR_OUT_OF_HOST_MEMORY, HAL_ERROR_BACKEND_SPECIFIC (local socket failures); *out is NULL
 * on failure. Thread safety: safe; ranks of one process call it from different threads. */
hal_status_t hal_bootstrap_connect(const hal_unique_id_t *id, int nranks, int rank,
                                   const hal_comm_store_t *store, uint32_t timeout_ms,
                                   hal_bootstrap_t **out)
{
    HAL_CHECK_NOT_NULL(out, NULL, "hal_comm_init");
    *out = NULL;
    hal_bootstrap_t *b;
    HAL_CHECK(hal_bootstrap_create(id, nranks, rank, store, timeout_ms, &b));
    hal_status_t st = hal_bootstrap_join(b);
    if (st != HAL_OK) {
        hal_bootstrap_destroy(b);
        return st;
    }
    *out = b;
    return HAL_OK;
}
