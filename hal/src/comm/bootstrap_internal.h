/* SPDX-License-Identifier: Apache-2.0 */
/* Internal to the bootstrap (bootstrap_*.c), its tests and its fuzz targets: the formats and the
 * objects its parts share, and what one part offers the others. The bootstrap is the rendezvous
 * of a communicator's ranks and an authenticated message layer between them (the contract is
 * in bootstrap.h). Its parts:
 *     bootstrap_socket.c      addresses, HAL_COMM_BIND, sockets with deadlines, small helpers
 *     bootstrap_id.c          the unique id and the rank entries (encoding, checks)
 *     bootstrap_auth.c        the challenge-response authentication of a connection
 *     bootstrap_hmac.c        SHA-256 and HMAC-SHA-256
 *     bootstrap_root.c        the root: hal_bootstrap_new_id and the thread serving a rendezvous
 *     bootstrap_rank.c        a rank's object: creation, peer connections, accept thread, abort
 *     bootstrap_rendezvous.c  joining the job through the root or a store
 *     bootstrap_msg.c         framed messages between ranks (hal_bootstrap_send/recv)
 *     bootstrap_coll.c        the collective helpers (allgather, broadcast, barrier)
 *
 * Unique id (128 bytes; multi-byte fields are big-endian):
 *     0   4  format tag "HALB"
 *     4   2  format version (1)
 *     6   2  flags: bit 0 = store mode (HAL_COMM_ID_FLAG_STORE); the other bits are zero
 *     8  24  root address block (below); all zero in store mode
 *    32  32  job secret (getrandom)
 *    64  16  job nonce (getrandom): names the job's store keys and shared-memory segments
 *    80  48  reserved, zero
 * Address block (24 bytes; the id and the rank entries use it):
 *     0   1  family: 0 none, 4 IPv4, 6 IPv6
 *     1   1  reserved, zero
 *     2   2  TCP port (non-zero whenever the family is not 0)
 *     4   4  IPv6 scope id (zero for IPv4)
 *     8  16  address (IPv4: the first 4 bytes, the rest zero)
 * hal_bootstrap_parse_id rejects every other content with HAL_ERROR_INVALID_ARGUMENT. The secret
 * and the nonce may hold any bytes, except that an all-zero secret is rejected (so a zeroed or
 * never-filled id is never accepted).
 *
 * Rank entry (64 bytes): rank u32, nranks u32, host hash u64, pid u32, reserved u32 (zero), the
 * address block of the rank's peer listener, and a 16-byte instance id (random per bootstrap
 * object, so that two processes claiming one rank are told apart).
 *
 * Wire protocol, on every TCP connection (rank to root and rank to rank):
 *   1. Authentication (challenge-response; the secret never crosses the wire). The accepting
 *      side sends AUTH1 {magic "HALW", version, kind (root or peer), 32-byte nonce}. The
 *      connecting side answers AUTH2 {magic, version, kind, its own 32-byte nonce, its rank, the
 *      rank it wants (all ones for the root), its instance id, the instance id it expects, and
 *      HMAC-SHA-256(secret, connector label | AUTH1 | AUTH2 up to the MAC)}. The acceptor
 *      checks the MAC in constant time and answers AUTH3 {status, reserved, HMAC(secret,
 *      acceptor label | AUTH1 | AUTH2 | status, reserved)}, which the connector checks in turn.
 *      Fresh nonces on both sides defeat replay; the two labels defeat reflection. Status DENIED
 *      (wrong MAC) or CONFLICT (the acceptor does not expect that rank there) ends the
 *      connection. Until authentication completes every read has a fixed size, so a stranger
 *      cannot make a rank or the root allocate anything.
 *   2. Frames {type u32, tag u32, size u64} followed by size payload bytes; a size above
 *      HAL_BOOTSTRAP_MAX_MESSAGE is rejected before anything is allocated.
 *      Rank to root: HELLO (its entry). Root to rank: TABLE (every rank's entry, by rank) or
 *      ERROR (tag = status, payload = text), then the root closes the connection.
 *      Rank to rank: DATA (hal_bootstrap_send/recv) and COLL (the collective helpers).
 *
 * Threads. hal_bootstrap_new_id starts a detached root thread; it serves one rendezvous with a
 * poll() loop over non-blocking sockets (so one slow or hostile connection cannot stall the
 * others) and exits once the table is delivered or its deadline passed. Each bootstrap object
 * runs an accept thread for the peer connections lower ranks open to it: the lower rank of a pair
 * always connects, lazily, on first use, and because accepting needs no call in progress on the
 * higher rank, lazy connection cannot deadlock. Per connection, one thread at a time owns the
 * send direction and one the receive direction; frames that arrive for another (type, tag) wait
 * in a bounded per-connection queue.
 *
 * Not a goal: confidentiality or integrity of frames after authentication against an attacker
 * on the network path. Like NCCL's and Gloo's, the bootstrap trusts the path once both ends
 * proved they hold the secret; use a private network or a tunnel across untrusted ones. */
#ifndef HAL_SRC_COMM_BOOTSTRAP_INTERNAL_H
#define HAL_SRC_COMM_BOOTSTRAP_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "hal/src/comm/bootstrap.h"

#define BS_ID_TAG          0x48414c42u /* "HALB" */
#define BS_ID_VERSION      1u
#define BS_WIRE_MAGIC      0x48414c57u /* "HALW" */
#define BS_WIRE_VERSION    1u
#define BS_MAX_RANKS       4096
#define BS_ADDR_BYTES      24
#define BS_ENTRY_BYTES     64
#define BS_HEADER_BYTES    16
#define BS_INSTANCE_BYTES  16
#define BS_CHALLENGE_BYTES 32
#define BS_MAC_BYTES       32
#define BS_AUTH1_BYTES     40
#define BS_AUTH2_MAC_AT    80
#define BS_AUTH2_BYTES     (BS_AUTH2_MAC_AT + BS_MAC_BYTES)
#define BS_AUTH3_BYTES     (8 + BS_MAC_BYTES)
#define BS_ERROR_TEXT_MAX  240
#define BS_STORE_VALUE     (BS_ENTRY_BYTES + BS_MAC_BYTES)
#define BS_ROOT_RANK       UINT32_MAX /* "the rank I want" when connecting to the root */
/* A connection must finish authenticating within this (or the job's timeout, if shorter), so a
 * silent stranger holds a slot only briefly. */
#define BS_HANDSHAKE_MS 5000
/* Connections the root holds before they joined; more wait in the kernel's listen backlog. */
#define BS_ROOT_MAX_PENDING 64
/* Bytes of frames that may wait, per connection, for a receive with their tag. */
#define BS_QUEUE_LIMIT ((size_t)256 << 20)
/* How long a rank waits past its deadline for the root's report of a failed rendezvous. */
#define BS_ROOT_GRACE_MS 250
/* Store lookups wait in slices this long so that hal_bootstrap_abort is noticed promptly. */
#define BS_STORE_SLICE_MS 20

enum { BS_KIND_ROOT = 1, BS_KIND_PEER = 2 };
enum { BS_AUTH_OK = 0, BS_AUTH_DENIED = 1, BS_AUTH_CONFLICT = 2 };
enum {
    BS_FRAME_HELLO = 1,
    BS_FRAME_TABLE = 2,
    BS_FRAME_ERROR = 3,
    BS_FRAME_DATA = 4,
    BS_FRAME_COLL = 5,
};
enum { BS_TAG_ALLGATHER = 1, BS_TAG_BROADCAST = 2, BS_TAG_BARRIER = 3 };

/* ---- small helpers ---- */

static inline void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

static inline uint16_t get16(const uint8_t *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static inline uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

static inline bool all_zero(const uint8_t *p, size_t n)
{
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= p[i];
    return acc == 0;
}

/* Monotonic milliseconds. */
int64_t bs_now_ms(void);
/* Milliseconds from now to the deadline, for poll() (0 once it passed). */
int bs_poll_timeout(int64_t deadline);
/* Fills buf from getrandom(); 0, or -1 with errno set. */
int bs_random(void *buf, size_t size);
/* strerror_r's message for err. */
const char *bs_strerror(int err, char *buf, size_t size);
/* Runs fn on a new thread with every signal blocked (bootstrap_socket.c says why); returns
 * pthread_create's result. */
int bs_start_thread(pthread_t *thread, void *(*fn)(void *), void *arg, bool detached);

/* ---- addresses (bootstrap_socket.c) ---- */

/* A socket address. Every access goes through the union, never through a cast pointer: the compiler
 * may assume differently typed structs do not alias (and GCC does, at -O2). */
typedef struct bs_addr {
    union {
        struct sockaddr sa;
        struct sockaddr_in in4;
        struct sockaddr_in6 in6;
        struct sockaddr_storage ss;
    } u;
    socklen_t len;
} bs_addr_t;

uint16_t bs_addr_port(const bs_addr_t *a);
void bs_addr_set_port(bs_addr_t *a, uint16_t port);
/* Whether a is the wildcard address of its family. */
bool bs_addr_is_any(const bs_addr_t *a);
/* "host:port" or "[host]:port", for messages. */
void bs_addr_str(const bs_addr_t *a, char *buf, size_t size);
/* The address block of the wire formats (BS_ADDR_BYTES; layout above). decode is pure: it
 * returns NULL or what is wrong with the block. */
void bs_addr_encode(const bs_addr_t *a, uint8_t out[BS_ADDR_BYTES]);
const char *bs_addr_decode(const uint8_t in[BS_ADDR_BYTES], bs_addr_t *a);
/* Resolves HAL_COMM_BIND (unset or empty: 127.0.0.1, ephemeral port). Returns HAL_OK or
 * HAL_ERROR_INVALID_ARGUMENT naming `call` (message set). */
hal_status_t bs_parse_bind(const char *call, bs_addr_t *out);
/* Replaces a wildcard address with one this host can be reached at, keeping the port. */
void bs_addr_reachable(bs_addr_t *a);

/* ---- sockets with deadlines (bootstrap_socket.c) ---- */

/* Waits for events on fd, the deadline, or the wake fd (abort; -1 for none). Returns HAL_OK,
 * HAL_ERROR_TIMEOUT, HAL_ERROR_ABORTED or HAL_ERROR_INTERNAL; sets no message. */
hal_status_t bs_wait(int wake_fd, int fd, short events, int64_t deadline);
/* Reads or writes all of buf before the deadline. Returns HAL_OK, HAL_ERROR_TIMEOUT,
 * HAL_ERROR_ABORTED, HAL_ERROR_INTERNAL, or HAL_ERROR_REMOTE with *err = errno (0: the peer closed
 * the connection); sets no message. */
hal_status_t bs_io(int wake_fd, int fd, void *buf, size_t len, bool writing, int64_t deadline,
                   int *err);
/* Reports how bs_io or bs_wait ended (what we were doing, with whom) as `call`'s error. */
hal_status_t bs_io_error(hal_status_t st, int err, const char *call, uint32_t timeout_ms,
                         const char *what, const char *peer);
/* Connects to addr before the deadline, retrying errors of the path. Returns HAL_OK with *out a
 * non-blocking CLOEXEC socket, or an error (message set). */
hal_status_t bs_connect(int wake_fd, const bs_addr_t *addr, int64_t deadline, uint32_t timeout_ms,
                        const char *call, const char *peer, int *out);
/* Creates a listening socket bound to addr (port 0: ephemeral); *bound receives the address with
 * the port the kernel chose. Returns HAL_OK or an error (message set). */
hal_status_t bs_listen(const bs_addr_t *addr, bool reuse, const char *call, int *out,
                       bs_addr_t *bound);

/* ---- the unique id and rank entries (bootstrap_id.c) ---- */

typedef struct bs_id {
    uint32_t flags;
    bs_addr_t root; /* AF_UNSPEC in store mode */
    uint8_t secret[HAL_BOOTSTRAP_SECRET_BYTES];
    uint8_t nonce[HAL_BOOTSTRAP_NONCE_BYTES];
} bs_id_t;

/* Encodes an id (layout above). */
void bs_id_encode(const bs_id_t *d, uint8_t out[HAL_UNIQUE_ID_BYTES]);
/* Pure function of the 128 bytes (the fuzzing target): returns NULL and fills *d, or says what is
 * wrong. */
const char *bs_id_decode(const uint8_t in[HAL_UNIQUE_ID_BYTES], bs_id_t *d);

typedef struct bs_entry {
    hal_bootstrap_peer_t peer;
    int32_t nranks;
    uint8_t instance[BS_INSTANCE_BYTES];
    bs_addr_t addr; /* peer listener */
} bs_entry_t;

/* Encodes and decodes a rank entry (BS_ENTRY_BYTES; layout above). decode is pure: it returns
 * NULL or what is wrong with the entry. */
void bs_entry_encode(const bs_entry_t *e, uint8_t out[BS_ENTRY_BYTES]);
const char *bs_entry_decode(const uint8_t in[BS_ENTRY_BYTES], bs_entry_t *e);

/* ---- authentication (bootstrap_auth.c) ---- */

/* AUTH1 of the accepting side, with a fresh challenge; 0, or -1 if getrandom failed. */
int bs_auth1_make(uint16_t kind, uint8_t a1[BS_AUTH1_BYTES]);
/* Acceptor side: true if AUTH2 is well formed and proves the secret; fills the claims. */
bool bs_auth2_verify(const uint8_t secret[HAL_BOOTSTRAP_SECRET_BYTES],
                     const uint8_t a1[BS_AUTH1_BYTES], const uint8_t a2[BS_AUTH2_BYTES],
                     uint16_t kind, uint32_t *c_rank, uint32_t *a_rank,
                     uint8_t c_inst[BS_INSTANCE_BYTES], uint8_t a_inst[BS_INSTANCE_BYTES]);
/* The acceptor's verdict (AUTH3), with proof of the secret when it is BS_AUTH_OK. */
void bs_auth3_make(const uint8_t secret[HAL_BOOTSTRAP_SECRET_BYTES],
                   const uint8_t a1[BS_AUTH1_BYTES], const uint8_t a2[BS_AUTH2_BYTES],
                   uint32_t status, uint8_t a3[BS_AUTH3_BYTES]);
/* Runs the connecting side of the handshake on fd. Returns HAL_OK, or HAL_ERROR_PERMISSION_DENIED
 * (secrets differ, or the other end is no bootstrap endpoint), HAL_ERROR_INVALID_ARGUMENT (the
 * acceptor does not expect this rank), or an I/O status; the message is set. */
hal_status_t bs_handshake_connect(int wake_fd, const uint8_t *secret, int fd, uint16_t kind,
                                  uint32_t c_rank, uint32_t a_rank, const uint8_t *c_inst,
                                  const uint8_t *a_inst, int64_t deadline, uint32_t timeout_ms,
                                  const char *call, const char *peer);

/* ---- a rank's object (bootstrap_rank.c) ---- */

/* A frame that arrived for a (type, tag) no receive was waiting for. */
typedef struct bs_msg {
    struct bs_msg *next;
    uint32_t type, tag;
    size_t size;
    uint8_t data[];
} bs_msg_t;

typedef struct bs_conn {
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* connection installed, role released, frame queued, failure, abort */
    int fd;              /* -1 until connected; then fixed until destroy closes it */
    bool connecting;     /* a thread of this rank is connecting (this rank is the lower) */
    bool sending;        /* a thread owns the send direction */
    bool reading;        /* a thread owns the receive direction */
    hal_status_t failed; /* sticky: the byte stream lost its framing or the peer is gone */
    char why[320];
    bs_msg_t *head, *tail;
    size_t queued; /* payload bytes in the queue or being read into it */
} bs_conn_t;

struct hal_bootstrap {
    int rank, nranks;
    uint32_t timeout_ms;
    uint8_t secret[HAL_BOOTSTRAP_SECRET_BYTES];
    uint8_t nonce[HAL_BOOTSTRAP_NONCE_BYTES];
    uint8_t instance[BS_INSTANCE_BYTES];
    int wake_fd; /* eventfd, readable forever once aborted or destroyed: in every poll set */
    int listen_fd;
    atomic_bool aborted;
    bool store_mode;
    hal_comm_store_t store; /* store mode: the caller's callbacks */
    bs_addr_t root;         /* TCP mode: the root's address */
    bool join_started;
    bool accept_started;
    pthread_t accept_thread;
    bs_entry_t *entries; /* by rank; fixed once connected */
    bs_conn_t *conns;    /* by rank; conns[rank] holds messages to self */
    int conns_ready;     /* conns whose mutex and condition are initialized */
};

typedef struct bs_xfer {
    int peer;
    bool send;
    uint32_t type, tag;
    const uint8_t *sbuf; /* send */
    uint8_t *rbuf;       /* recv */
    size_t size;
    int fd;
    bool owns_role;
    bool done;
    uint8_t hdr[BS_HEADER_BYTES];
    uint64_t off;   /* bytes of the current frame (header included) moved so far */
    uint64_t fsize; /* recv: payload size the current frame announced */
    uint32_t ftype, ftag;
    int sink;
    bs_msg_t *spill;
} bs_xfer_t;

enum { BS_SINK_USER, BS_SINK_SPILL, BS_SINK_DISCARD };

static inline bool bs_aborted(hal_bootstrap_t *b)
{
    return atomic_load_explicit(&b->aborted, memory_order_acquire);
}

/* Waits on c->cv (c->mu held) until woken or the deadline. */
void bs_cond_wait(bs_conn_t *c, int64_t deadline);
/* "rank N (pid P at ADDRESS)", for messages. */
void bs_peer_name(const hal_bootstrap_t *b, int peer, char *buf, size_t size);
/* With c->mu held: the sticky failure, reported again for this call (unlocks c->mu). */
hal_status_t bs_conn_failed_locked(bs_conn_t *c, const char *call);
/* Returns the connection to peer, opening it if this rank is the lower one, or waiting for the
 * peer (through the accept thread) otherwise. Returns HAL_OK with *fd_out, or an error (message
 * set). */
hal_status_t bs_get_conn(hal_bootstrap_t *b, int peer, int64_t deadline, const char *call,
                         int *fd_out);
/* The accept thread (arg: the hal_bootstrap_t), started by hal_bootstrap_join. */
void *bs_accept_main(void *arg);

/* ---- messages and collectives (bootstrap_msg.c, bootstrap_coll.c) ---- */

/* Checks what every message call takes: b, a buffer of size bytes (NULL only when size is 0) no
 * larger than HAL_BOOTSTRAP_MAX_MESSAGE, and a bootstrap not aborted. Returns HAL_OK,
 * HAL_ERROR_INVALID_ARGUMENT or HAL_ERROR_ABORTED (message set, naming `call`). */
hal_status_t bs_check_message(hal_bootstrap_t *b, const void *buf, size_t size, const char *call);
/* Prepares a transfer of one frame (type, tag, size) to or from peer. */
void bs_xfer_init(bs_xfer_t *x, int peer, bool send, uint32_t type, uint32_t tag, const void *sbuf,
                  void *rbuf, size_t size);
/* Connects, takes the directions the transfers need, drives them until done, the deadline or an
 * abort, and releases. Returns HAL_OK or an error (message set). */
hal_status_t bs_xfer_run(hal_bootstrap_t *b, bs_xfer_t *xs, int n, int64_t deadline,
                         const char *call);
/* Ring allgather of size bytes per rank into out (no argument checks; the store rendezvous
 * compares table digests with it). Returns as hal_bootstrap_allgather. */
hal_status_t bs_allgather(hal_bootstrap_t *b, const void *mine, size_t size, void *out,
                          const char *call);
/* Tests only: sends a frame header announcing `size` bytes without a payload. */
hal_status_t hal_bootstrap_test_send_header(hal_bootstrap_t *b, int peer, uint32_t tag,
                                            uint64_t size);

/* ---- SHA-256 and HMAC (bootstrap_hmac.c) ---- */

/* SHA-256 of data (FIPS 180-4). */
void hal_bootstrap_sha256(const void *data, size_t size, uint8_t digest[32]);
/* HMAC-SHA-256 (RFC 2104) of data under key. */
void hal_bootstrap_hmac_sha256(const void *key, size_t key_size, const void *data, size_t size,
                               uint8_t mac[32]);
/* Compares in time independent of where the buffers differ. */
bool hal_bootstrap_equal_ct(const void *a, const void *b, size_t size);

#endif /* HAL_SRC_COMM_BOOTSTRAP_INTERNAL_H */
