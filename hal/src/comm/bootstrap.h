/* SPDX-License-Identifier: Apache-2.0 */
/* Bootstrap: how the ranks of a communicator find and authenticate each other, and a small
 * authenticated message layer between them. Internal to the HAL.
 *
 * The unique id (hal_unique_id_t, 128 bytes) carries a format tag and version, the root's
 * address and port, a random 32-byte job secret and a random 16-byte job nonce (which also
 * names the job's shared-memory segments). Rendezvous runs either through the root started by
 * hal_bootstrap_new_id (TCP, bound to HAL_COMM_BIND, loopback by default) or through an external
 * store (hal_comm_store_t). Every TCP connection is authenticated with the job secret (compared
 * in constant time), every message has a bounded size, and every blocking step honours the
 * timeout and hal_bootstrap_abort. */
#ifndef HAL_SRC_COMM_BOOTSTRAP_H
#define HAL_SRC_COMM_BOOTSTRAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/hal_comm.h"

typedef struct hal_bootstrap hal_bootstrap_t;

#define HAL_BOOTSTRAP_SECRET_BYTES 32
#define HAL_BOOTSTRAP_NONCE_BYTES  16
/* Largest payload of one bootstrap message (allgather contribution, send/recv). */
#define HAL_BOOTSTRAP_MAX_MESSAGE (64u << 20)

/* What every rank tells the others at connect time (and what hal_bootstrap_peer returns). */
typedef struct hal_bootstrap_peer {
    uint64_t host_hash; /* equal for ranks on the same host (boot id + hostname) */
    int32_t pid;
    int32_t rank;
} hal_bootstrap_peer_t;

/* Fills a new id; unless flags has HAL_COMM_ID_FLAG_STORE, starts the root listener thread in
 * this process (it serves one rendezvous, then exits; it also exits after timeout_ms).
 * Returns HAL_OK, HAL_ERROR_INVALID_ARGUMENT (bad flags or HAL_COMM_BIND) or a socket error. */
hal_status_t hal_bootstrap_new_id(uint32_t flags, uint32_t timeout_ms, hal_unique_id_t *id);

/* Checks an id's format; copies out its nonce (for naming shared resources). */
hal_status_t hal_bootstrap_parse_id(const hal_unique_id_t *id,
                                    uint8_t nonce[HAL_BOOTSTRAP_NONCE_BYTES]);

/* Joins the job as `rank` of `nranks` and returns once every rank has joined and each knows
 * every peer's hal_bootstrap_peer_t and address. With a store, rendezvous goes through it.
 * Returns HAL_OK, HAL_ERROR_INVALID_ARGUMENT (malformed id, rank taken twice, nranks
 * disagreeing), HAL_ERROR_PERMISSION_DENIED (authentication failed), HAL_ERROR_TIMEOUT,
 * HAL_ERROR_REMOTE, HAL_ERROR_ABORTED. */
hal_status_t hal_bootstrap_connect(const hal_unique_id_t *id, int nranks, int rank,
                                   const hal_comm_store_t *store, uint32_t timeout_ms,
                                   hal_bootstrap_t **out);

/* The two halves of hal_bootstrap_connect, so that a rendezvous in progress can be aborted:
 * create checks the arguments and allocates without blocking; join runs the rendezvous and
 * fails with HAL_ERROR_ABORTED if hal_bootstrap_abort is called meanwhile. After a failed join
 * the object must still be destroyed. */
hal_status_t hal_bootstrap_create(const hal_unique_id_t *id, int nranks, int rank,
                                  const hal_comm_store_t *store, uint32_t timeout_ms,
                                  hal_bootstrap_t **out);
hal_status_t hal_bootstrap_join(hal_bootstrap_t *b);

int hal_bootstrap_nranks(const hal_bootstrap_t *b);
int hal_bootstrap_rank(const hal_bootstrap_t *b);
const hal_bootstrap_peer_t *hal_bootstrap_peer(const hal_bootstrap_t *b, int rank);
/* The job nonce, for naming shared-memory segments. */
const uint8_t *hal_bootstrap_nonce(const hal_bootstrap_t *b);

/* Collective helpers over the bootstrap's connections (all ranks must call them in the same
 * order). size <= HAL_BOOTSTRAP_MAX_MESSAGE. */
hal_status_t hal_bootstrap_allgather(hal_bootstrap_t *b, const void *mine, size_t size, void *out);
hal_status_t hal_bootstrap_broadcast(hal_bootstrap_t *b, void *data, size_t size, int root);
hal_status_t hal_bootstrap_barrier(hal_bootstrap_t *b);

/* Point to point between two ranks over authenticated TCP, in order per (sender, receiver,
 * tag); recv fails with HAL_ERROR_INVALID_ARGUMENT if the size differs from what was sent.
 * Used by the host engine across hosts. */
hal_status_t hal_bootstrap_send(hal_bootstrap_t *b, int peer, uint32_t tag, const void *data,
                                size_t size);
hal_status_t hal_bootstrap_recv(hal_bootstrap_t *b, int peer, uint32_t tag, void *data,
                                size_t size);
/* A send to `to` and a receive from `from` driven together on one thread (neither may be this
 * rank). Statuses as hal_bootstrap_send and hal_bootstrap_recv (a wrong receive size, a peer
 * gone, a timeout, an abort); the same one-sender, one-receiver rule per connection applies. */
hal_status_t hal_bootstrap_sendrecv(hal_bootstrap_t *b, int to, uint32_t tag, const void *sdata,
                                    size_t ssize, int from, void *rdata, size_t rsize);

/* Makes every blocked or later call fail with HAL_ERROR_ABORTED. Safe from any thread, but not
 * concurrently with hal_bootstrap_destroy of the same object. */
void hal_bootstrap_abort(hal_bootstrap_t *b);

/* Closes connections and frees. */
void hal_bootstrap_destroy(hal_bootstrap_t *b);

#endif /* HAL_SRC_COMM_BOOTSTRAP_H */
