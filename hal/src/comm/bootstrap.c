/* SPDX-License-Identifier: Apache-2.0 */
/* Bootstrap: rendezvous of a communicator's ranks and an authenticated message layer between
 * them (the contract is in bootstrap.h).
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
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "hal/src/comm/bootstrap.h"
#include "hal/src/comm/bootstrap_internal.h"
#include "hal/src/core.h"

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

static const char bs_label_connector[] = "torch-hal bootstrap 1 connector";
static const char bs_label_acceptor[] = "torch-hal bootstrap 1 acceptor";
static const char bs_label_store[] = "torch-hal bootstrap 1 store entry";

/* ---- small helpers ---- */

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

static bool all_zero(const uint8_t *p, size_t n)
{
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= p[i];
    return acc == 0;
}

static int64_t bs_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int bs_poll_timeout(int64_t deadline)
{
    int64_t left = deadline - bs_now_ms();
    if (left < 0)
        return 0;
    return left > INT_MAX ? INT_MAX : (int)left;
}

static int bs_random(void *buf, size_t size)
{
    uint8_t *p = buf;
    while (size > 0) {
        ssize_t n = getrandom(p, size, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        size -= (size_t)n;
    }
    return 0;
}

static const char *bs_strerror(int err, char *buf, size_t size)
{
    return strerror_r(err, buf, size); /* GNU variant: returns the message */
}

/* Runs fn on a new thread with every signal blocked, so the application's signal handlers keep
 * running on its own threads and ours never see EINTR storms. */
static int bs_start_thread(pthread_t *thread, void *(*fn)(void *), void *arg, bool detached)
{
    sigset_t all, old;
    pthread_attr_t attr;
    sigfillset(&all);
    pthread_attr_init(&attr);
    if (detached)
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(thread, &attr, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return rc;
}

/* ---- addresses ---- */

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

static void bs_addr_loopback(bs_addr_t *a, int family)
{
    memset(a, 0, sizeof(*a));
    if (family == AF_INET6) {
        a->u.in6.sin6_family = AF_INET6;
        a->u.in6.sin6_addr = in6addr_loopback;
        a->len = sizeof(a->u.in6);
    } else {
        a->u.in4.sin_family = AF_INET;
        a->u.in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a->len = sizeof(a->u.in4);
    }
}

/* Copies a kernel- or resolver-made address of length len (at most sizeof(a->u)). */
static void bs_addr_set(bs_addr_t *a, const void *sa, socklen_t len)
{
    memset(a, 0, sizeof(*a));
    memcpy(&a->u, sa, len);
    a->len = len;
}

static uint16_t bs_addr_port(const bs_addr_t *a)
{
    if (a->u.sa.sa_family == AF_INET)
        return ntohs(a->u.in4.sin_port);
    if (a->u.sa.sa_family == AF_INET6)
        return ntohs(a->u.in6.sin6_port);
    return 0;
}

static void bs_addr_set_port(bs_addr_t *a, uint16_t port)
{
    if (a->u.sa.sa_family == AF_INET)
        a->u.in4.sin_port = htons(port);
    else if (a->u.sa.sa_family == AF_INET6)
        a->u.in6.sin6_port = htons(port);
}

static bool bs_addr_is_any(const bs_addr_t *a)
{
    if (a->u.sa.sa_family == AF_INET)
        return a->u.in4.sin_addr.s_addr == htonl(INADDR_ANY);
    if (a->u.sa.sa_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&a->u.in6.sin6_addr);
    return false;
}

static bool bs_addr_is_loopback(const bs_addr_t *a)
{
    if (a->u.sa.sa_family == AF_INET)
        return (ntohl(a->u.in4.sin_addr.s_addr) >> 24) == 127;
    if (a->u.sa.sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&a->u.in6.sin6_addr);
    return false;
}

static void bs_addr_str(const bs_addr_t *a, char *buf, size_t size)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (a->u.sa.sa_family == AF_INET) {
        inet_ntop(AF_INET, &a->u.in4.sin_addr, host, sizeof(host));
        snprintf(buf, size, "%s:%u", host, bs_addr_port(a));
    } else if (a->u.sa.sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &a->u.in6.sin6_addr, host, sizeof(host));
        snprintf(buf, size, "[%s]:%u", host, bs_addr_port(a));
    } else {
        snprintf(buf, size, "(no address)");
    }
}

static void bs_addr_encode(const bs_addr_t *a, uint8_t out[BS_ADDR_BYTES])
{
    memset(out, 0, BS_ADDR_BYTES);
    if (a->u.sa.sa_family == AF_INET) {
        out[0] = 4;
        memcpy(out + 8, &a->u.in4.sin_addr, 4);
    } else if (a->u.sa.sa_family == AF_INET6) {
        out[0] = 6;
        put32(out + 4, a->u.in6.sin6_scope_id);
        memcpy(out + 8, &a->u.in6.sin6_addr, 16);
    } else {
        return;
    }
    put16(out + 2, bs_addr_port(a));
}

/* Pure: decodes an address block; returns NULL or what is wrong with it. */
static const char *bs_addr_decode(const uint8_t in[BS_ADDR_BYTES], bs_addr_t *a)
{
    memset(a, 0, sizeof(*a));
    if (in[1] != 0)
        return "reserved address byte is not zero";
    switch (in[0]) {
    case 0:
        if (!all_zero(in, BS_ADDR_BYTES))
            return "address of family 'none' is not empty";
        a->u.sa.sa_family = AF_UNSPEC;
        return NULL;
    case 4:
        if (get32(in + 4) != 0 || !all_zero(in + 12, 12))
            return "IPv4 address block has stray bytes";
        a->u.in4.sin_family = AF_INET;
        memcpy(&a->u.in4.sin_addr, in + 8, 4);
        a->u.in4.sin_port = htons(get16(in + 2));
        a->len = sizeof(a->u.in4);
        return NULL;
    case 6:
        a->u.in6.sin6_family = AF_INET6;
        memcpy(&a->u.in6.sin6_addr, in + 8, 16);
        a->u.in6.sin6_scope_id = get32(in + 4);
        a->u.in6.sin6_port = htons(get16(in + 2));
        a->len = sizeof(a->u.in6);
        return NULL;
    default:
        return "unknown address family";
    }
}

/* RFC 1123 host name syntax, and not all digits and dots (that is a malformed IPv4 literal, which
 * must not turn into a DNS query). */
static bool bs_valid_hostname(const char *s)
{
    size_t n = strlen(s), label = 0;
    bool alpha = false;
    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '.') {
            if (label == 0 || s[i - 1] == '-')
                return false;
            label = 0;
            continue;
        }
        bool letter = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        bool digit = ch >= '0' && ch <= '9';
        if (!letter && !digit && ch != '-')
            return false;
        if (ch == '-' && label == 0)
            return false;
        if (++label > 63)
            return false;
        alpha |= letter || ch == '-';
    }
    return alpha && s[n - 1] != '-';
}

/* Resolves HAL_COMM_BIND: unset or empty means 127.0.0.1 with an ephemeral port; otherwise an IPv4
 * literal, an IPv6 literal (bracketed when followed by ":port"), or a host name, each with an
 * optional ":port". */
static hal_status_t bs_parse_bind(const char *call, bs_addr_t *out)
{
    const char *env = getenv("HAL_COMM_BIND");
    char value[300];
    if (env == NULL || env[0] == '\0') {
        bs_addr_loopback(out, AF_INET);
        return HAL_OK;
    }
    if (strlen(env) >= sizeof(value))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "HAL_COMM_BIND is too long");
    strcpy(value, env);

    char *host = value, *port = NULL;
    bool bracketed = false;
    if (value[0] == '[') {
        char *close = strchr(value, ']');
        if (close == NULL)
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                             "HAL_COMM_BIND=\"%s\": '[' without ']'", env);
        *close = '\0';
        host = value + 1;
        bracketed = true;
        if (close[1] == ':')
            port = close + 2;
        else if (close[1] != '\0')
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                             "HAL_COMM_BIND=\"%s\": unexpected text after ']'", env);
    } else {
        /* One colon separates a port; more than one make an IPv6 literal without a port. */
        char *colon = strchr(value, ':');
        if (colon != NULL && strchr(colon + 1, ':') == NULL) {
            *colon = '\0';
            port = colon + 1;
        }
    }
    if (host[0] == '\0')
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "HAL_COMM_BIND=\"%s\": empty address", env);
    unsigned long portnum = 0;
    if (port != NULL) {
        if (port[0] == '\0' || strspn(port, "0123456789") != strlen(port) || strlen(port) > 5 ||
            (portnum = strtoul(port, NULL, 10)) > 65535)
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                             "HAL_COMM_BIND=\"%s\": port must be a number from 0 to 65535", env);
    }

    struct addrinfo hints = { 0 }, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_family = bracketed ? AF_INET6 : AF_UNSPEC;
    hints.ai_flags = AI_NUMERICHOST;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0) {
        if (bracketed || !bs_valid_hostname(host))
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                             "HAL_COMM_BIND=\"%s\": not an IPv4 or IPv6 address or a host name",
                             env);
        hints.ai_flags = 0;
        rc = getaddrinfo(host, NULL, &hints, &res);
        if (rc != 0)
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                             "HAL_COMM_BIND=\"%s\": cannot resolve \"%s\": %s", env, host,
                             gai_strerror(rc));
    }
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *ai = res; ai != NULL && pick == NULL; ai = ai->ai_next)
        if (ai->ai_family == AF_INET || ai->ai_family == AF_INET6)
            pick = ai;
    if (pick == NULL || pick->ai_addrlen > sizeof(out->u)) {
        freeaddrinfo(res);
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "HAL_COMM_BIND=\"%s\": no IPv4 or IPv6 address", env);
    }
    bs_addr_set(out, pick->ai_addr, pick->ai_addrlen);
    freeaddrinfo(res);
    bs_addr_set_port(out, (uint16_t)portnum);
    return HAL_OK;
}

/* Replaces a wildcard address with one this host can be reached at (the first non-loopback address
 * of the host name, else loopback), keeping the port. */
static void bs_addr_reachable(bs_addr_t *a)
{
    uint16_t port = bs_addr_port(a);
    int family = a->u.sa.sa_family;
    char host[256];
    if (gethostname(host, sizeof(host)) == 0) {
        host[sizeof(host) - 1] = '\0';
        struct addrinfo hints = { 0 }, *res = NULL;
        hints.ai_family = family;
        hints.ai_socktype = SOCK_STREAM;
        if (getaddrinfo(host, NULL, &hints, &res) == 0) {
            for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
                bs_addr_t cand;
                if (ai->ai_family != family || ai->ai_addrlen > sizeof(cand.u))
                    continue;
                bs_addr_set(&cand, ai->ai_addr, ai->ai_addrlen);
                if (bs_addr_is_loopback(&cand))
                    continue;
                *a = cand;
                bs_addr_set_port(a, port);
                freeaddrinfo(res);
                return;
            }
            freeaddrinfo(res);
        }
    }
    bs_addr_loopback(a, family);
    bs_addr_set_port(a, port);
}

/* ---- unique id ---- */

typedef struct bs_id {
    uint32_t flags;
    bs_addr_t root; /* AF_UNSPEC in store mode */
    uint8_t secret[HAL_BOOTSTRAP_SECRET_BYTES];
    uint8_t nonce[HAL_BOOTSTRAP_NONCE_BYTES];
} bs_id_t;

static void bs_id_encode(const bs_id_t *d, uint8_t out[HAL_UNIQUE_ID_BYTES])
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
static const char *bs_id_decode(const uint8_t in[HAL_UNIQUE_ID_BYTES], bs_id_t *d)
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
    if (id == NULL)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, "hal_comm_init", "id is NULL");
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

typedef struct bs_entry {
    hal_bootstrap_peer_t peer;
    int32_t nranks;
    uint8_t instance[BS_INSTANCE_BYTES];
    bs_addr_t addr; /* peer listener */
} bs_entry_t;

static void bs_entry_encode(const bs_entry_t *e, uint8_t out[BS_ENTRY_BYTES])
{
    memset(out, 0, BS_ENTRY_BYTES);
    put32(out, (uint32_t)e->peer.rank);
    put32(out + 4, (uint32_t)e->nranks);
    put64(out + 8, e->peer.host_hash);
    put32(out + 16, (uint32_t)e->peer.pid);
    bs_addr_encode(&e->addr, out + 24);
    memcpy(out + 48, e->instance, BS_INSTANCE_BYTES);
}

static const char *bs_entry_decode(const uint8_t in[BS_ENTRY_BYTES], bs_entry_t *e)
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

/* Equal for ranks on one host: the kernel's boot id plus the host name (two containers sharing a
 * kernel but not a host name count as different hosts, which only costs them shared memory). */
static uint64_t bs_host_hash(void)
{
    char buf[384];
    size_t n = 0;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t r;
        do
            r = read(fd, buf, 64);
        while (r < 0 && errno == EINTR);
        if (r > 0)
            n = (size_t)r;
        close(fd);
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        n--;
    buf[n++] = '|';
    if (gethostname(buf + n, sizeof(buf) - n - 1) == 0) {
        buf[sizeof(buf) - 1] = '\0';
        n += strlen(buf + n);
    }
    uint8_t digest[32];
    hal_bootstrap_sha256(buf, n, digest);
    return get64(digest);
}

/* ---- sockets with deadlines ---- */

/* Waits for events on fd, the deadline, or the wake fd (abort). Returns HAL_OK (ready; errors
 * surface in the next I/O call), HAL_ERROR_TIMEOUT, HAL_ERROR_ABORTED or HAL_ERROR_INTERNAL (poll
 * failed). Sets no message: callers know what they waited for. */
static hal_status_t bs_wait(int wake_fd, int fd, short events, int64_t deadline)
{
    for (;;) {
        struct pollfd p[2] = { { fd, events, 0 }, { wake_fd, POLLIN, 0 } };
        int rc = poll(p, wake_fd >= 0 ? 2 : 1, bs_poll_timeout(deadline));
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            return HAL_ERROR_INTERNAL;
        }
        if (wake_fd >= 0 && p[1].revents)
            return HAL_ERROR_ABORTED;
        if (p[0].revents)
            return HAL_OK;
        if (bs_now_ms() >= deadline)
            return HAL_ERROR_TIMEOUT;
    }
}

/* Reads or writes all of buf before the deadline. Returns HAL_OK, HAL_ERROR_TIMEOUT,
 * HAL_ERROR_ABORTED, HAL_ERROR_INTERNAL, or HAL_ERROR_REMOTE with *err = errno (0: the peer closed
 * the connection). Sets no message. */
static hal_status_t bs_io(int wake_fd, int fd, void *buf, size_t len, bool writing,
                          int64_t deadline, int *err)
{
    uint8_t *p = buf;
    size_t done = 0;
    *err = 0;
    while (done < len) {
        ssize_t n = writing ? send(fd, p + done, len - done, MSG_NOSIGNAL)
                            : recv(fd, p + done, len - done, 0);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == 0)
            return HAL_ERROR_REMOTE;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            hal_status_t st = bs_wait(wake_fd, fd, writing ? POLLOUT : POLLIN, deadline);
            if (st != HAL_OK)
                return st;
            continue;
        }
        *err = errno;
        return HAL_ERROR_REMOTE;
    }
    return HAL_OK;
}

/* Turns how a wait ended into a message detail: what we were doing, and with whom. */
static void bs_io_detail(char *buf, size_t size, hal_status_t st, int err, uint32_t timeout_ms,
                         const char *what, const char *peer)
{
    char eb[96];
    switch (st) {
    case HAL_ERROR_TIMEOUT:
        snprintf(buf, size, "timed out after %u ms %s (%s)", timeout_ms, what, peer);
        break;
    case HAL_ERROR_ABORTED:
        snprintf(buf, size, "aborted while %s (%s)", what, peer);
        break;
    case HAL_ERROR_REMOTE:
        if (err == 0)
            snprintf(buf, size, "%s closed the connection while %s", peer, what);
        else
            snprintf(buf, size, "connection to %s failed while %s: %s", peer, what,
                     bs_strerror(err, eb, sizeof(eb)));
        break;
    default:
        snprintf(buf, size, "poll failed while %s (%s)", what, peer);
        break;
    }
}

static hal_status_t bs_io_error(hal_status_t st, int err, const char *call, uint32_t timeout_ms,
                                const char *what, const char *peer)
{
    char detail[512];
    bs_io_detail(detail, sizeof(detail), st, err, timeout_ms, what, peer);
    return hal_error(st, NULL, call, "%s", detail);
}

/* Errors after which connecting again may work (the path, not the peer, failed). */
static bool bs_connect_transient(int err)
{
    return err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH || err == EAGAIN ||
           err == EADDRNOTAVAIL || err == ENETDOWN;
}

/* Connects to addr before the deadline, retrying errors of the path (not a refusal: every listener
 * exists before its address is published, so a refusal means the peer is gone). Returns HAL_OK with
 * *out a non-blocking CLOEXEC socket, or an error (message set). */
static hal_status_t bs_connect(int wake_fd, const bs_addr_t *addr, int64_t deadline,
                               uint32_t timeout_ms, const char *call, const char *peer, int *out)
{
    char eb[96];
    int delay_ms = 10, last_err = 0;
    for (;;) {
        int fd = socket(addr->u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call,
                             "socket() to connect to %s failed: %s", peer,
                             bs_strerror(errno, eb, sizeof(eb)));
        int err = 0;
        if (connect(fd, &addr->u.sa, addr->len) < 0) {
            err = errno;
            if (err == EINPROGRESS || err == EINTR) {
                hal_status_t st = bs_wait(wake_fd, fd, POLLOUT, deadline);
                if (st != HAL_OK) {
                    close(fd);
                    if (st == HAL_ERROR_TIMEOUT && last_err != 0)
                        return hal_error(st, NULL, call,
                                         "timed out after %u ms connecting to %s (last error: %s)",
                                         timeout_ms, peer, bs_strerror(last_err, eb, sizeof(eb)));
                    return bs_io_error(st, 0, call, timeout_ms, "connecting", peer);
                }
                socklen_t len = sizeof(err);
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                    err = errno;
            }
        }
        if (err == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            *out = fd;
            return HAL_OK;
        }
        close(fd);
        if (!bs_connect_transient(err))
            return hal_error(HAL_ERROR_REMOTE, NULL, call, "connect to %s failed: %s", peer,
                             bs_strerror(err, eb, sizeof(eb)));
        last_err = err;
        if (bs_now_ms() + delay_ms >= deadline)
            return hal_error(HAL_ERROR_TIMEOUT, NULL, call,
                             "timed out after %u ms connecting to %s (last error: %s)", timeout_ms,
                             peer, bs_strerror(err, eb, sizeof(eb)));
        struct pollfd w = { wake_fd, POLLIN, 0 };
        if (poll(&w, 1, delay_ms) > 0)
            return bs_io_error(HAL_ERROR_ABORTED, 0, call, timeout_ms, "connecting", peer);
        delay_ms = delay_ms >= 100 ? 200 : delay_ms * 2;
    }
}

/* Creates a listening socket bound to addr (port 0: ephemeral); *bound receives the address with
 * the port the kernel chose. */
static hal_status_t bs_listen(const bs_addr_t *addr, bool reuse, const char *call, int *out,
                              bs_addr_t *bound)
{
    char eb[96], where[80];
    bs_addr_str(addr, where, sizeof(where));
    int fd = socket(addr->u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call, "socket() for %s failed: %s",
                         where, bs_strerror(errno, eb, sizeof(eb)));
    int one = 1;
    /* A fixed HAL_COMM_BIND port must be reusable right after the previous job's root exits. */
    if (reuse)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, &addr->u.sa, addr->len) < 0) {
        int err = errno;
        close(fd);
        return hal_error(
            err == EADDRNOTAVAIL ? HAL_ERROR_INVALID_ARGUMENT : HAL_ERROR_BACKEND_SPECIFIC, NULL,
            call, "bind to %s (HAL_COMM_BIND) failed: %s", where, bs_strerror(err, eb, sizeof(eb)));
    }
    if (listen(fd, SOMAXCONN) < 0) {
        int err = errno;
        close(fd);
        return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call, "listen on %s failed: %s", where,
                         bs_strerror(err, eb, sizeof(eb)));
    }
    memset(bound, 0, sizeof(*bound));
    bound->len = sizeof(bound->u);
    if (getsockname(fd, &bound->u.sa, &bound->len) < 0) {
        int err = errno;
        close(fd);
        return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call, "getsockname on %s failed: %s",
                         where, bs_strerror(err, eb, sizeof(eb)));
    }
    *out = fd;
    return HAL_OK;
}

/* ---- authentication messages (pure except for the nonces) ---- */

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

static int bs_auth1_make(uint16_t kind, uint8_t a1[BS_AUTH1_BYTES])
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
static bool bs_auth2_verify(const uint8_t secret[HAL_BOOTSTRAP_SECRET_BYTES],
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

static void bs_auth3_make(const uint8_t secret[HAL_BOOTSTRAP_SECRET_BYTES],
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
static hal_status_t bs_handshake_connect(int wake_fd, const uint8_t *secret, int fd, uint16_t kind,
                                         uint32_t c_rank, uint32_t a_rank, const uint8_t *c_inst,
                                         const uint8_t *a_inst, int64_t deadline,
                                         uint32_t timeout_ms, const char *call, const char *peer)
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

/* ---- the root: one rendezvous, served by a detached thread ---- */

enum {
    RS_SEND_AUTH1,
    RS_RECV_AUTH2,
    RS_SEND_AUTH3,
    RS_RECV_HELLO,
    RS_JOINED,
    RS_SEND_TABLE,
    RS_SEND_REJECT,
    RS_CLOSED,
};

typedef struct bs_root_conn {
    int fd;
    int state;
    uint32_t claimed; /* the rank AUTH2 claimed */
    int rank;         /* once joined */
    int64_t deadline; /* until it must have joined (or its rejection is out) */
    uint8_t a1[BS_AUTH1_BYTES];
    uint8_t in[BS_AUTH2_BYTES]; /* AUTH2, then HELLO (header + entry) */
    size_t in_len, in_need;
    bool out_table; /* sending the shared TABLE frame rather than obuf */
    uint8_t obuf[BS_HEADER_BYTES + BS_ERROR_TEXT_MAX];
    size_t out_len, out_off;
} bs_root_conn_t;

typedef struct bs_root {
    int listen_fd;
    uint8_t secret[HAL_BOOTSTRAP_SECRET_BYTES];
    uint32_t timeout_ms;
    int64_t deadline;
    bs_root_conn_t *conns;
    size_t nconns, cap;
    int nranks; /* 0 until the first rank joined */
    int joined;
    bool *taken;
    uint8_t *table; /* TABLE frame: header, then nranks entries */
    size_t table_len;
    bool complete; /* every rank joined; the table is going out */
    bool finished; /* failed; leaving */
} bs_root_t;

static bool bs_root_pending(const bs_root_conn_t *c)
{
    return c->state != RS_JOINED && c->state != RS_SEND_TABLE && c->state != RS_CLOSED;
}

static void bs_root_close(bs_root_conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->state = RS_CLOSED;
}

static size_t bs_error_frame(uint8_t *out, hal_status_t st, const char *fmt, va_list ap)
{
    char text[BS_ERROR_TEXT_MAX + 1];
    int n = vsnprintf(text, sizeof(text), fmt, ap);
    size_t len = n < 0 ? 0 : (size_t)n > BS_ERROR_TEXT_MAX ? BS_ERROR_TEXT_MAX : (size_t)n;
    put32(out, BS_FRAME_ERROR);
    put32(out + 4, (uint32_t)st);
    put64(out + 8, len);
    memcpy(out + BS_HEADER_BYTES, text, len);
    return BS_HEADER_BYTES + len;
}

/* Tells one connection why it cannot join, then closes it once that is written. */
__attribute__((format(printf, 4, 5))) static void
bs_root_reject(bs_root_t *r, bs_root_conn_t *c, hal_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    c->out_len = bs_error_frame(c->obuf, st, fmt, ap);
    va_end(ap);
    c->out_off = 0;
    c->out_table = false;
    c->state = RS_SEND_REJECT;
    int64_t limit = bs_now_ms() + BS_HANDSHAKE_MS;
    c->deadline = limit < r->deadline ? limit : r->deadline;
}

/* The job cannot complete: tells every joined rank why (best effort, without blocking) and closes
 * everything. */
__attribute__((format(printf, 3, 4))) static void bs_root_fail(bs_root_t *r, hal_status_t st,
                                                               const char *fmt, ...)
{
    uint8_t frame[BS_HEADER_BYTES + BS_ERROR_TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    size_t len = bs_error_frame(frame, st, fmt, ap);
    va_end(ap);
    for (size_t i = 0; i < r->nconns; i++) {
        bs_root_conn_t *c = &r->conns[i];
        if (c->state == RS_JOINED) {
            ssize_t n;
            do
                n = send(c->fd, frame, len, MSG_NOSIGNAL | MSG_DONTWAIT);
            while (n < 0 && errno == EINTR);
        }
        bs_root_close(c);
    }
    r->finished = true;
}

/* Writes what is pending: 1 when all is out, 0 when the socket is full, -1 on error. */
static int bs_root_flush(bs_root_t *r, bs_root_conn_t *c)
{
    const uint8_t *p = c->out_table ? r->table : c->obuf;
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, p + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        return -1;
    }
    return 1;
}

/* Reads toward in_need (always a fixed size): 1 when complete, 0 for later, -1 on EOF/error. */
static int bs_root_fill(bs_root_conn_t *c)
{
    while (c->in_len < c->in_need) {
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_need - c->in_len, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        return -1;
    }
    return 1;
}

static void bs_root_on_auth2(bs_root_t *r, bs_root_conn_t *c)
{
    uint32_t a_rank;
    uint8_t c_inst[BS_INSTANCE_BYTES], a_inst[BS_INSTANCE_BYTES];
    bool ok = bs_auth2_verify(r->secret, c->a1, c->in, BS_KIND_ROOT, &c->claimed, &a_rank, c_inst,
                              a_inst);
    uint32_t status = ok && a_rank == BS_ROOT_RANK ? BS_AUTH_OK : BS_AUTH_DENIED;
    bs_auth3_make(r->secret, c->a1, c->in, status, c->obuf);
    c->out_len = BS_AUTH3_BYTES;
    c->out_off = 0;
    c->out_table = false;
    c->state = status == BS_AUTH_OK ? RS_SEND_AUTH3 : RS_SEND_REJECT;
}

static void bs_root_on_hello(bs_root_t *r, bs_root_conn_t *c)
{
    const uint8_t *h = c->in;
    if (get32(h) != BS_FRAME_HELLO || get32(h + 4) != 0 || get64(h + 8) != BS_ENTRY_BYTES) {
        bs_root_reject(r, c, HAL_ERROR_INVALID_ARGUMENT, "malformed hello");
        return;
    }
    bs_entry_t e;
    const char *why = bs_entry_decode(h + BS_HEADER_BYTES, &e);
    if (why != NULL) {
        bs_root_reject(r, c, HAL_ERROR_INVALID_ARGUMENT, "malformed hello: %s", why);
        return;
    }
    int rank = e.peer.rank;
    if ((uint32_t)rank != c->claimed) {
        bs_root_reject(r, c, HAL_ERROR_INVALID_ARGUMENT, "hello for rank %d after claiming %u",
                       rank, c->claimed);
        return;
    }
    if (r->nranks == 0) {
        size_t n = (size_t)e.nranks;
        r->taken = calloc(n, sizeof(bool));
        r->table_len = BS_HEADER_BYTES + n * BS_ENTRY_BYTES;
        r->table = calloc(1, r->table_len);
        if (r->taken == NULL || r->table == NULL) {
            free(r->taken);
            free(r->table);
            r->taken = NULL;
            r->table = NULL;
            bs_root_reject(r, c, HAL_ERROR_OUT_OF_HOST_MEMORY,
                           "the bootstrap root is out of memory");
            return;
        }
        r->nranks = e.nranks;
    } else if (e.nranks != r->nranks) {
        bs_root_reject(r, c, HAL_ERROR_INVALID_ARGUMENT,
                       "rank %d joined with nranks %d, but the ranks that joined first said %d",
                       rank, e.nranks, r->nranks);
        return;
    }
    uint8_t *slot = r->table + BS_HEADER_BYTES + (size_t)rank * BS_ENTRY_BYTES;
    if (r->taken[rank]) {
        bs_root_reject(r, c, HAL_ERROR_INVALID_ARGUMENT,
                       "rank %d is already taken (by pid %d); each rank must join once", rank,
                       (int32_t)get32(slot + 16));
        return;
    }
    memcpy(slot, h + BS_HEADER_BYTES, BS_ENTRY_BYTES);
    r->taken[rank] = true;
    r->joined++;
    c->rank = rank;
    c->state = RS_JOINED;
    if (r->joined < r->nranks)
        return;

    /* Everyone is here: the table goes to every rank; nobody else may join. */
    put32(r->table, BS_FRAME_TABLE);
    put32(r->table + 4, 0);
    put64(r->table + 8, (uint64_t)r->nranks * BS_ENTRY_BYTES);
    r->complete = true;
    for (size_t i = 0; i < r->nconns; i++) {
        bs_root_conn_t *o = &r->conns[i];
        if (o->state == RS_JOINED) {
            o->state = RS_SEND_TABLE;
            o->out_table = true;
            o->out_len = r->table_len;
            o->out_off = 0;
        } else if (o->state != RS_CLOSED) {
            bs_root_close(o);
        }
    }
    close(r->listen_fd);
    r->listen_fd = -1;
    /* Leave the ranks time to read the table even if the job used up most of its timeout. */
    int64_t linger = bs_now_ms() + BS_HANDSHAKE_MS;
    if (r->deadline < linger)
        r->deadline = linger;
}

/* Advances one connection as far as its socket allows. */
static void bs_root_step(bs_root_t *r, bs_root_conn_t *c)
{
    while (!r->finished && c->state != RS_CLOSED) {
        int rc;
        switch (c->state) {
        case RS_SEND_AUTH1:
        case RS_SEND_AUTH3:
        case RS_SEND_TABLE:
        case RS_SEND_REJECT:
            rc = bs_root_flush(r, c);
            if (rc == 0)
                return;
            if (rc < 0 || c->state == RS_SEND_TABLE || c->state == RS_SEND_REJECT) {
                /* Everything we had to say is in the kernel's buffer (and we read everything the
                 * rank sent), so close() delivers it before the FIN. A rank whose table write
                 * failed sees the connection drop. */
                bs_root_close(c);
                return;
            }
            c->in_len = 0;
            if (c->state == RS_SEND_AUTH1) {
                c->state = RS_RECV_AUTH2;
                c->in_need = BS_AUTH2_BYTES;
            } else {
                c->state = RS_RECV_HELLO;
                c->in_need = BS_HEADER_BYTES + BS_ENTRY_BYTES;
            }
            break;
        case RS_RECV_AUTH2:
        case RS_RECV_HELLO:
            rc = bs_root_fill(c);
            if (rc == 0)
                return;
            if (rc < 0) {
                bs_root_close(c); /* had not joined: nothing to undo */
                return;
            }
            if (c->state == RS_RECV_AUTH2)
                bs_root_on_auth2(r, c);
            else
                bs_root_on_hello(r, c);
            break;
        case RS_JOINED: {
            uint8_t byte;
            ssize_t n = recv(c->fd, &byte, 1, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return;
            if (n > 0)
                bs_root_fail(r, HAL_ERROR_REMOTE, "rank %d broke the bootstrap protocol", c->rank);
            else
                bs_root_fail(r, HAL_ERROR_REMOTE, "rank %d left before all %d ranks joined",
                             c->rank, r->nranks);
            return;
        }
        default:
            return;
        }
    }
}

static void bs_root_accept(bs_root_t *r, size_t *pending, int64_t *listen_pause)
{
    while (*pending < BS_ROOT_MAX_PENDING && !r->finished && !r->complete) {
        int fd = accept4(r->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            /* Out of descriptors or memory: the listener stays readable, so look away for a moment
             * instead of spinning. */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                *listen_pause = bs_now_ms() + 100;
            return;
        }
        if (r->nconns == r->cap) {
            size_t cap = r->cap ? r->cap * 2 : 16;
            bs_root_conn_t *conns = realloc(r->conns, cap * sizeof(*conns));
            if (conns == NULL) {
                close(fd);
                return;
            }
            r->conns = conns;
            r->cap = cap;
        }
        bs_root_conn_t *c = &r->conns[r->nconns];
        memset(c, 0, sizeof(*c));
        c->fd = fd;
        c->rank = -1;
        int64_t limit = bs_now_ms() + BS_HANDSHAKE_MS;
        c->deadline = limit < r->deadline ? limit : r->deadline;
        if (bs_auth1_make(BS_KIND_ROOT, c->a1) != 0) {
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        memcpy(c->obuf, c->a1, BS_AUTH1_BYTES);
        c->out_len = BS_AUTH1_BYTES;
        c->state = RS_SEND_AUTH1;
        r->nconns++;
        (*pending)++;
        bs_root_step(r, c);
    }
}

static void *bs_root_main(void *arg)
{
    bs_root_t *r = arg;
    struct pollfd *pfds = NULL;
    size_t pfds_cap = 0;
    int64_t listen_pause = 0;
    while (!r->finished) {
        int64_t now = bs_now_ms();
        /* Drop connections that overstayed their handshake; compact the array. */
        size_t live = 0, pending = 0;
        int64_t wake_at = r->deadline;
        for (size_t i = 0; i < r->nconns; i++) {
            bs_root_conn_t *c = &r->conns[i];
            if (bs_root_pending(c) && now >= c->deadline)
                bs_root_close(c);
            if (c->state == RS_CLOSED)
                continue;
            if (bs_root_pending(c)) {
                pending++;
                if (c->deadline < wake_at)
                    wake_at = c->deadline;
            }
            r->conns[live++] = *c;
        }
        r->nconns = live;
        if (now >= r->deadline) {
            if (!r->complete) {
                if (r->nranks > 0)
                    bs_root_fail(r, HAL_ERROR_TIMEOUT,
                                 "timed out after %u ms waiting for %d of %d ranks to join",
                                 r->timeout_ms, r->nranks - r->joined, r->nranks);
                else
                    bs_root_fail(r, HAL_ERROR_TIMEOUT, "timed out waiting for ranks to join");
            }
            break;
        }
        if (r->complete && r->nconns == 0)
            break;
        if (pfds_cap < r->nconns + 1) {
            size_t cap = (r->nconns + 1) * 2;
            struct pollfd *p = realloc(pfds, cap * sizeof(*p));
            if (p == NULL) {
                bs_root_fail(r, HAL_ERROR_OUT_OF_HOST_MEMORY,
                             "the bootstrap root ran out of memory");
                break;
            }
            pfds = p;
            pfds_cap = cap;
        }
        bool listening = !r->complete && r->listen_fd >= 0 && pending < BS_ROOT_MAX_PENDING &&
                         now >= listen_pause;
        if (listen_pause > now && listen_pause < wake_at)
            wake_at = listen_pause;
        pfds[0] = (struct pollfd){ listening ? r->listen_fd : -1, POLLIN, 0 };
        for (size_t i = 0; i < r->nconns; i++) {
            int s = r->conns[i].state;
            bool out = s == RS_SEND_AUTH1 || s == RS_SEND_AUTH3 || s == RS_SEND_TABLE ||
                       s == RS_SEND_REJECT;
            pfds[i + 1] = (struct pollfd){ r->conns[i].fd, out ? POLLOUT : POLLIN, 0 };
        }
        size_t polled = r->nconns;
        int rc = poll(pfds, polled + 1, bs_poll_timeout(wake_at));
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            bs_root_fail(r, HAL_ERROR_INTERNAL, "the bootstrap root's poll failed");
            break;
        }
        for (size_t i = 0; i < polled && !r->finished; i++)
            if (pfds[i + 1].revents && r->conns[i].state != RS_CLOSED)
                bs_root_step(r, &r->conns[i]);
        if (listening && pfds[0].revents && !r->finished)
            bs_root_accept(r, &pending, &listen_pause);
    }
    for (size_t i = 0; i < r->nconns; i++)
        bs_root_close(&r->conns[i]);
    if (r->listen_fd >= 0)
        close(r->listen_fd);
    free(pfds);
    free(r->conns);
    free(r->taken);
    free(r->table);
    memset(r->secret, 0, sizeof(r->secret));
    free(r);
    return NULL;
}

/* Makes a new id (random secret and nonce) and, without HAL_COMM_ID_FLAG_STORE, starts the root
 * thread listening on HAL_COMM_BIND; it serves one rendezvous and exits after timeout_ms at the
 * latest. Returns HAL_OK, HAL_ERROR_INVALID_ARGUMENT (id NULL, unknown flags, bad HAL_COMM_BIND),
 * HAL_ERROR_OUT_OF_HOST_MEMORY or HAL_ERROR_BACKEND_SPECIFIC (socket, thread or random source
 * failure). Thread safety: safe. */
hal_status_t hal_bootstrap_new_id(uint32_t flags, uint32_t timeout_ms, hal_unique_id_t *id)
{
    const char *call = "hal_comm_get_unique_id";
    char eb[96];
    if (id == NULL)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "id is NULL");
    if (flags & ~HAL_COMM_ID_FLAG_STORE)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "unknown flags 0x%x", flags);
    bs_id_t d;
    memset(&d, 0, sizeof(d));
    d.flags = flags;
    if (bs_random(d.secret, sizeof(d.secret)) != 0 || bs_random(d.nonce, sizeof(d.nonce)) != 0)
        return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call, "getrandom failed: %s",
                         bs_strerror(errno, eb, sizeof(eb)));
    if (!(flags & HAL_COMM_ID_FLAG_STORE)) {
        bs_addr_t bind_addr;
        int fd;
        HAL_CHECK(bs_parse_bind(call, &bind_addr));
        HAL_CHECK(bs_listen(&bind_addr, bs_addr_port(&bind_addr) != 0, call, &fd, &d.root));
        if (bs_addr_is_any(&d.root))
            bs_addr_reachable(&d.root);
        bs_root_t *r = calloc(1, sizeof(*r));
        if (r == NULL) {
            close(fd);
            return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, NULL, call, "out of host memory");
        }
        r->listen_fd = fd;
        memcpy(r->secret, d.secret, sizeof(r->secret));
        r->timeout_ms = timeout_ms;
        r->deadline = bs_now_ms() + timeout_ms;
        pthread_t thread;
        int rc = bs_start_thread(&thread, bs_root_main, r, true);
        if (rc != 0) {
            close(fd);
            memset(r->secret, 0, sizeof(r->secret));
            free(r);
            memset(d.secret, 0, sizeof(d.secret));
            return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call,
                             "cannot start the bootstrap root thread: %s",
                             bs_strerror(rc, eb, sizeof(eb)));
        }
    }
    bs_id_encode(&d, id->internal);
    memset(d.secret, 0, sizeof(d.secret));
    return HAL_OK;
}

/* ---- the rank side ---- */

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

static bool bs_aborted(hal_bootstrap_t *b)
{
    return atomic_load_explicit(&b->aborted, memory_order_acquire);
}

static void bs_wake(hal_bootstrap_t *b)
{
    uint64_t one = 1;
    ssize_t n;
    do
        n = write(b->wake_fd, &one, sizeof(one));
    while (n < 0 && errno == EINTR);
}

static void bs_cond_wait(bs_conn_t *c, int64_t deadline)
{
    struct timespec ts = { .tv_sec = (time_t)(deadline / 1000),
                           .tv_nsec = (long)(deadline % 1000) * 1000000L };
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
}

static void bs_peer_name(const hal_bootstrap_t *b, int peer, char *buf, size_t size)
{
    char where[80];
    bs_addr_str(&b->entries[peer].addr, where, sizeof(where));
    snprintf(buf, size, "rank %d (pid %d at %s)", peer, b->entries[peer].peer.pid, where);
}

/* The detail of the last error this thread reported for `call` (without "hal: <call>: "). */
static const char *bs_last_detail(const char *call)
{
    const char *m = hal_last_error_message();
    size_t n = strlen(call);
    if (strncmp(m, "hal: ", 5) == 0 && strncmp(m + 5, call, n) == 0 &&
        strncmp(m + 5 + n, ": ", 2) == 0)
        return m + 7 + n;
    return m;
}

/* Records that a connection is unusable (first reason wins), shuts its socket down so the peer
 * notices at once, and reports. */
static hal_status_t bs_conn_fail(bs_conn_t *c, const char *call, hal_status_t st,
                                 const char *detail)
{
    pthread_mutex_lock(&c->mu);
    if (c->failed == HAL_OK) {
        c->failed = st;
        snprintf(c->why, sizeof(c->why), "%s", detail);
        if (c->fd >= 0)
            shutdown(c->fd, SHUT_RDWR);
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return call != NULL ? hal_error(st, NULL, call, "%s", detail) : st;
}

/* With c->mu held: the sticky failure, reported again for this call. */
static hal_status_t bs_conn_failed_locked(bs_conn_t *c, const char *call)
{
    char why[sizeof(c->why)];
    hal_status_t st = c->failed;
    memcpy(why, c->why, sizeof(why));
    pthread_mutex_unlock(&c->mu);
    return hal_error(st, NULL, call, "%s", why);
}

/* Connects to a higher rank and authenticates (both ways, and checks it is the process the table
 * names). Returns HAL_OK with *out, or an error (message set). */
static hal_status_t bs_connect_peer(hal_bootstrap_t *b, int peer, int64_t deadline,
                                    const char *call, int *out)
{
    char who[160];
    bs_peer_name(b, peer, who, sizeof(who));
    int fd;
    HAL_CHECK(
        bs_connect(b->wake_fd, &b->entries[peer].addr, deadline, b->timeout_ms, call, who, &fd));
    hal_status_t st = bs_handshake_connect(
        b->wake_fd, b->secret, fd, BS_KIND_PEER, (uint32_t)b->rank, (uint32_t)peer, b->instance,
        b->entries[peer].instance, deadline, b->timeout_ms, call, who);
    if (st != HAL_OK) {
        close(fd);
        return st;
    }
    *out = fd;
    return HAL_OK;
}

/* Returns the connection to peer, opening it if this rank is the lower one, or waiting for the peer
 * (through the accept thread) otherwise. */
static hal_status_t bs_get_conn(hal_bootstrap_t *b, int peer, int64_t deadline, const char *call,
                                int *fd_out)
{
    bs_conn_t *c = &b->conns[peer];
    char who[160];
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (bs_aborted(b)) {
            pthread_mutex_unlock(&c->mu);
            bs_peer_name(b, peer, who, sizeof(who));
            return hal_error(HAL_ERROR_ABORTED, NULL, call, "aborted while connecting to %s", who);
        }
        if (c->failed != HAL_OK)
            return bs_conn_failed_locked(c, call);
        if (c->fd >= 0) {
            *fd_out = c->fd;
            pthread_mutex_unlock(&c->mu);
            return HAL_OK;
        }
        if (b->rank < peer && !c->connecting) {
            c->connecting = true;
            pthread_mutex_unlock(&c->mu);
            int fd = -1;
            hal_status_t st = bs_connect_peer(b, peer, deadline, call, &fd);
            pthread_mutex_lock(&c->mu);
            c->connecting = false;
            if (st == HAL_OK) {
                c->fd = fd;
                if (bs_aborted(b)) /* abort ran before the fd was visible to it */
                    shutdown(fd, SHUT_RDWR);
            }
            pthread_cond_broadcast(&c->cv);
            if (st != HAL_OK) {
                pthread_mutex_unlock(&c->mu);
                return st;
            }
            continue;
        }
        if (bs_now_ms() >= deadline) {
            pthread_mutex_unlock(&c->mu);
            bs_peer_name(b, peer, who, sizeof(who));
            return hal_error(
                HAL_ERROR_TIMEOUT, NULL, call,
                b->rank < peer ? "timed out after %u ms waiting for another thread to connect to %s"
                               : "timed out after %u ms waiting for %s to connect",
                b->timeout_ms, who);
        }
        bs_cond_wait(c, deadline);
    }
}

/* The peer listener's verdict on AUTH2, given the AUTH1 it sent: BS_AUTH_DENIED unless the
 * connector proved the secret; BS_AUTH_CONFLICT unless it is the process this rank's table names
 * for a lower rank whose connection is not set up yet; else BS_AUTH_OK with *c_rank. Reads only
 * its arguments, the table and the connection's state (the fuzzing target drives it directly). */
static uint32_t bs_accept_verify(hal_bootstrap_t *b, const uint8_t a1[BS_AUTH1_BYTES],
                                 const uint8_t a2[BS_AUTH2_BYTES], uint32_t *c_rank)
{
    uint8_t c_inst[BS_INSTANCE_BYTES], a_inst[BS_INSTANCE_BYTES];
    uint32_t a_rank = 0, status = BS_AUTH_OK;
    if (!bs_auth2_verify(b->secret, a1, a2, BS_KIND_PEER, c_rank, &a_rank, c_inst, a_inst)) {
        status = BS_AUTH_DENIED;
    } else if (a_rank != (uint32_t)b->rank ||
               !hal_bootstrap_equal_ct(a_inst, b->instance, BS_INSTANCE_BYTES) ||
               *c_rank >= (uint32_t)b->rank ||
               !hal_bootstrap_equal_ct(c_inst, b->entries[*c_rank].instance, BS_INSTANCE_BYTES)) {
        /* Knows the secret, but is not the process our table names for that rank (a rank claimed
         * twice), or breaks the rule that the lower rank connects. */
        status = BS_AUTH_CONFLICT;
    } else {
        bs_conn_t *c = &b->conns[*c_rank];
        pthread_mutex_lock(&c->mu);
        if (c->fd >= 0 || c->failed != HAL_OK)
            status = BS_AUTH_CONFLICT;
        pthread_mutex_unlock(&c->mu);
    }
    return status;
}

/* Accept thread: authenticates one incoming connection and installs it for its rank. Failures only
 * close the socket: a stranger must not be able to fail this rank. */
static void bs_accept_peer(hal_bootstrap_t *b, int fd)
{
    uint32_t limit = b->timeout_ms < BS_HANDSHAKE_MS ? b->timeout_ms : BS_HANDSHAKE_MS;
    int64_t deadline = bs_now_ms() + limit;
    uint8_t a1[BS_AUTH1_BYTES], a2[BS_AUTH2_BYTES], a3[BS_AUTH3_BYTES];
    uint32_t c_rank = 0, status;
    int err, one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (bs_auth1_make(BS_KIND_PEER, a1) != 0 ||
        bs_io(b->wake_fd, fd, a1, sizeof(a1), true, deadline, &err) != HAL_OK ||
        bs_io(b->wake_fd, fd, a2, sizeof(a2), false, deadline, &err) != HAL_OK)
        goto out_close;
    status = bs_accept_verify(b, a1, a2, &c_rank);
    bs_auth3_make(b->secret, a1, a2, status, a3);
    if (bs_io(b->wake_fd, fd, a3, sizeof(a3), true, deadline, &err) != HAL_OK ||
        status != BS_AUTH_OK)
        goto out_close;
    /* Only this thread installs connections from lower ranks, so the slot is still free. */
    bs_conn_t *c = &b->conns[c_rank];
    pthread_mutex_lock(&c->mu);
    if (c->fd < 0 && c->failed == HAL_OK && !bs_aborted(b)) {
        c->fd = fd;
        fd = -1;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
out_close:
    if (fd >= 0)
        close(fd);
}

static void *bs_accept_main(void *arg)
{
    hal_bootstrap_t *b = arg;
    for (;;) {
        struct pollfd p[2] = { { b->listen_fd, POLLIN, 0 }, { b->wake_fd, POLLIN, 0 } };
        /* The timeout only bounds each wait; the wake fd ends the thread. */
        int rc = poll(p, 2, 1000);
        if (rc < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        if (rc <= 0 || !p[0].revents)
            continue;
        int fd = accept4(b->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) {
            bs_accept_peer(b, fd);
        } else if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            struct pollfd w = { b->wake_fd, POLLIN, 0 };
            poll(&w, 1, 100); /* the listener stays readable: do not spin */
        }
    }
    /* Peers that try to connect from now on are refused at once instead of waiting for a handshake
     * nobody would answer. */
    shutdown(b->listen_fd, SHUT_RDWR);
    return NULL;
}

/* ---- creation, rendezvous ---- */

static hal_status_t bs_create(const bs_id_t *id, int nranks, int rank, uint32_t timeout_ms,
                              const char *call, hal_bootstrap_t **out)
{
    char eb[96];
    hal_bootstrap_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, NULL, call, "out of host memory");
    b->wake_fd = -1;
    b->listen_fd = -1;
    atomic_init(&b->aborted, false);
    b->rank = rank;
    b->nranks = nranks;
    b->timeout_ms = timeout_ms;
    memcpy(b->secret, id->secret, sizeof(b->secret));
    memcpy(b->nonce, id->nonce, sizeof(b->nonce));
    *out = b;
    b->entries = calloc((size_t)nranks, sizeof(*b->entries));
    b->conns = calloc((size_t)nranks, sizeof(*b->conns));
    if (b->entries == NULL || b->conns == NULL)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, NULL, call, "out of host memory");
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    for (int i = 0; i < nranks; i++) {
        bs_conn_t *c = &b->conns[i];
        c->fd = -1;
        if (pthread_mutex_init(&c->mu, NULL) != 0)
            break;
        if (pthread_cond_init(&c->cv, &attr) != 0) {
            pthread_mutex_destroy(&c->mu);
            break;
        }
        b->conns_ready++;
    }
    pthread_condattr_destroy(&attr);
    if (b->conns_ready != nranks)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, NULL, call,
                         "cannot initialize connection locks");
    b->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (b->wake_fd < 0)
        return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call, "eventfd failed: %s",
                         bs_strerror(errno, eb, sizeof(eb)));
    if (bs_random(b->instance, sizeof(b->instance)) != 0)
        return hal_error(HAL_ERROR_BACKEND_SPECIFIC, NULL, call, "getrandom failed: %s",
                         bs_strerror(errno, eb, sizeof(eb)));

    bs_addr_t bind_addr;
    bs_entry_t *me = &b->entries[rank];
    HAL_CHECK(bs_parse_bind(call, &bind_addr));
    bs_addr_set_port(&bind_addr, 0); /* a fixed HAL_COMM_BIND port belongs to the root */
    HAL_CHECK(bs_listen(&bind_addr, false, call, &b->listen_fd, &me->addr));
    me->peer.rank = rank;
    me->peer.pid = (int32_t)getpid();
    me->peer.host_hash = bs_host_hash();
    me->nranks = nranks;
    memcpy(me->instance, b->instance, sizeof(me->instance));
    return HAL_OK;
}

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

static hal_status_t bs_allgather(hal_bootstrap_t *b, const void *mine, size_t size, void *out,
                                 const char *call);

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

/* First half of hal_bootstrap_connect: checks the arguments and makes the object (its peer
 * listener bound) without sending or waiting for anything. Returns HAL_OK with *out, or
 * HAL_ERROR_INVALID_ARGUMENT, HAL_ERROR_OUT_OF_HOST_MEMORY, HAL_ERROR_BACKEND_SPECIFIC; *out is
 * NULL on failure. Thread safety: safe. */
hal_status_t hal_bootstrap_create(const hal_unique_id_t *id, int nranks, int rank,
                                  const hal_comm_store_t *store, uint32_t timeout_ms,
                                  hal_bootstrap_t **out)
{
    const char *call = "hal_comm_init";
    if (out == NULL)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "out is NULL");
    *out = NULL;
    if (id == NULL)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "id is NULL");
    bs_id_t d;
    const char *why = bs_id_decode(id->internal, &d);
    if (why != NULL)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "malformed unique id: %s", why);
    if (nranks < 1 || nranks > BS_MAX_RANKS)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "nranks %d is not in 1..%d",
                         nranks, BS_MAX_RANKS);
    if (rank < 0 || rank >= nranks)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "rank %d is not in 0..%d", rank,
                         nranks - 1);
    bool store_mode = (d.flags & HAL_COMM_ID_FLAG_STORE) != 0;
    if (store_mode && store == NULL)
        return hal_error(
            HAL_ERROR_INVALID_ARGUMENT, NULL, call,
            "the unique id was made with HAL_COMM_ID_FLAG_STORE, but no store was given");
    if (!store_mode && store != NULL)
        return hal_error(
            HAL_ERROR_INVALID_ARGUMENT, NULL, call,
            "a store was given, but the unique id was not made with HAL_COMM_ID_FLAG_STORE");
    if (store != NULL &&
        (store->struct_size < sizeof(hal_comm_store_t) || store->set == NULL || store->get == NULL))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "the store has a bad struct_size or NULL callbacks");

    hal_bootstrap_t *b = NULL;
    hal_status_t st = bs_create(&d, nranks, rank, timeout_ms, call, &b);
    memset(d.secret, 0, sizeof(d.secret));
    if (st != HAL_OK) {
        hal_bootstrap_destroy(b);
        return st;
    }
    b->store_mode = store_mode;
    if (store_mode)
        b->store = *store;
    else
        b->root = d.root;
    *out = b;
    return HAL_OK;
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
    if (out == NULL)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, "hal_comm_init", "out is NULL");
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

/* Number of ranks. Thread safety: safe. */
int hal_bootstrap_nranks(const hal_bootstrap_t *b)
{
    return b->nranks;
}

/* This rank. Thread safety: safe. */
int hal_bootstrap_rank(const hal_bootstrap_t *b)
{
    return b->rank;
}

/* What rank `rank` announced (host hash, pid), or NULL if out of range. Thread safety: safe; the
 * table is fixed once connected. */
const hal_bootstrap_peer_t *hal_bootstrap_peer(const hal_bootstrap_t *b, int rank)
{
    if (b == NULL || rank < 0 || rank >= b->nranks)
        return NULL;
    return &b->entries[rank].peer;
}

/* The job nonce (HAL_BOOTSTRAP_NONCE_BYTES). Thread safety: safe. */
const uint8_t *hal_bootstrap_nonce(const hal_bootstrap_t *b)
{
    return b->nonce;
}

/* ---- messages ---- */

static bs_msg_t *bs_queue_take(bs_conn_t *c, uint32_t type, uint32_t tag)
{
    bs_msg_t *prev = NULL;
    for (bs_msg_t *m = c->head; m != NULL; prev = m, m = m->next) {
        if (m->type != type || m->tag != tag)
            continue;
        if (prev != NULL)
            prev->next = m->next;
        else
            c->head = m->next;
        if (c->tail == m)
            c->tail = prev;
        c->queued -= m->size;
        return m;
    }
    return NULL;
}

static void bs_queue_push(bs_conn_t *c, bs_msg_t *m)
{
    m->next = NULL;
    if (c->tail != NULL)
        c->tail->next = m;
    else
        c->head = m;
    c->tail = m;
}

static void bs_xfer_init(bs_xfer_t *x, int peer, bool send, uint32_t type, uint32_t tag,
                         const void *sbuf, void *rbuf, size_t size)
{
    memset(x, 0, sizeof(*x));
    x->peer = peer;
    x->send = send;
    x->type = type;
    x->tag = tag;
    x->sbuf = sbuf;
    x->rbuf = rbuf;
    x->size = size;
    x->fd = -1;
    put32(x->hdr, type);
    put32(x->hdr + 4, tag);
    put64(x->hdr + 8, size);
}

static hal_status_t bs_size_mismatch(hal_bootstrap_t *b, const bs_xfer_t *x, uint64_t sent,
                                     const char *call)
{
    char who[160];
    bs_peer_name(b, x->peer, who, sizeof(who));
    if (x->type == BS_FRAME_COLL)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "%s contributed %llu bytes to the collective step, this rank %zu", who,
                         (unsigned long long)sent, x->size);
    return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                     "%s sent %llu bytes with tag %u, but the receive expects %zu", who,
                     (unsigned long long)sent, x->tag, x->size);
}

/* Completes a receive from a queued frame. */
static hal_status_t bs_deliver(hal_bootstrap_t *b, bs_xfer_t *x, bs_msg_t *m, const char *call)
{
    hal_status_t st = HAL_OK;
    if (m->size != x->size)
        st = bs_size_mismatch(b, x, m->size, call);
    else if (m->size > 0)
        memcpy(x->rbuf, m->data, m->size);
    free(m);
    x->done = true;
    return st;
}

/* Takes the direction of the connection x needs (or, for a receive, finds its frame already
 * queued). Waits while another thread owns it. */
static hal_status_t bs_acquire(hal_bootstrap_t *b, bs_xfer_t *x, int64_t deadline, const char *call)
{
    bs_conn_t *c = &b->conns[x->peer];
    char who[160];
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (bs_aborted(b)) {
            pthread_mutex_unlock(&c->mu);
            bs_peer_name(b, x->peer, who, sizeof(who));
            return hal_error(HAL_ERROR_ABORTED, NULL, call, "aborted while waiting for %s", who);
        }
        if (!x->send) {
            bs_msg_t *m = bs_queue_take(c, x->type, x->tag);
            if (m != NULL) {
                pthread_mutex_unlock(&c->mu);
                return bs_deliver(b, x, m, call);
            }
        }
        if (c->failed != HAL_OK)
            return bs_conn_failed_locked(c, call);
        bool *role = x->send ? &c->sending : &c->reading;
        if (!*role) {
            *role = true;
            x->owns_role = true;
            pthread_mutex_unlock(&c->mu);
            return HAL_OK;
        }
        if (bs_now_ms() >= deadline) {
            pthread_mutex_unlock(&c->mu);
            bs_peer_name(b, x->peer, who, sizeof(who));
            return hal_error(HAL_ERROR_TIMEOUT, NULL, call,
                             "timed out after %u ms waiting for another thread %s %s",
                             b->timeout_ms, x->send ? "sending to" : "receiving from", who);
        }
        bs_cond_wait(c, deadline);
    }
}

static void bs_release(hal_bootstrap_t *b, bs_xfer_t *x)
{
    if (!x->owns_role)
        return;
    bs_conn_t *c = &b->conns[x->peer];
    pthread_mutex_lock(&c->mu);
    if (x->send)
        c->sending = false;
    else
        c->reading = false;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    x->owns_role = false;
}

static hal_status_t bs_xfer_io_fail(hal_bootstrap_t *b, bs_xfer_t *x, ssize_t n, const char *call)
{
    char who[160], detail[320], eb[96];
    bs_peer_name(b, x->peer, who, sizeof(who));
    /* abort shuts the sockets down: report the abort, not its echo. */
    if (bs_aborted(b))
        return hal_error(HAL_ERROR_ABORTED, NULL, call, "aborted while exchanging with %s", who);
    if (n == 0 || errno == EPIPE || errno == ECONNRESET)
        snprintf(detail, sizeof(detail), "%s closed the connection", who);
    else
        snprintf(detail, sizeof(detail), "connection to %s failed: %s", who,
                 bs_strerror(errno, eb, sizeof(eb)));
    return bs_conn_fail(&b->conns[x->peer], call, HAL_ERROR_REMOTE, detail);
}

static hal_status_t bs_send_progress(hal_bootstrap_t *b, bs_xfer_t *x, const char *call)
{
    uint64_t total = BS_HEADER_BYTES + (uint64_t)x->size;
    while (x->off < total) {
        struct iovec iov[2];
        struct msghdr msg;
        memset(&msg, 0, sizeof(msg));
        msg.msg_iov = iov;
        if (x->off < BS_HEADER_BYTES) {
            iov[0].iov_base = x->hdr + x->off;
            iov[0].iov_len = BS_HEADER_BYTES - (size_t)x->off;
            iov[1].iov_base = (void *)x->sbuf;
            iov[1].iov_len = x->size;
            msg.msg_iovlen = x->size > 0 ? 2 : 1;
        } else {
            iov[0].iov_base = (void *)(x->sbuf + (x->off - BS_HEADER_BYTES));
            iov[0].iov_len = (size_t)(total - x->off);
            msg.msg_iovlen = 1;
        }
        ssize_t n = sendmsg(x->fd, &msg, MSG_NOSIGNAL);
        if (n > 0) {
            x->off += (uint64_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return HAL_OK;
        return bs_xfer_io_fail(b, x, n < 0 ? -1 : 0, call);
    }
    x->done = true;
    return HAL_OK;
}

/* A frame header arrived: check it before allocating anything, and pick where the payload goes (the
 * caller's buffer, the queue, or nowhere when the size is wrong). */
static hal_status_t bs_recv_header(hal_bootstrap_t *b, bs_xfer_t *x, const char *call)
{
    bs_conn_t *c = &b->conns[x->peer];
    char who[160], detail[320];
    x->ftype = get32(x->hdr);
    x->ftag = get32(x->hdr + 4);
    x->fsize = get64(x->hdr + 8);
    bs_peer_name(b, x->peer, who, sizeof(who));
    if (x->ftype != BS_FRAME_DATA && x->ftype != BS_FRAME_COLL) {
        snprintf(detail, sizeof(detail), "%s sent a frame of unknown type %u (protocol error)", who,
                 x->ftype);
        return bs_conn_fail(c, call, HAL_ERROR_REMOTE, detail);
    }
    if (x->fsize > HAL_BOOTSTRAP_MAX_MESSAGE) {
        snprintf(detail, sizeof(detail),
                 "%s announced a message of %llu bytes, over the limit of %u "
                 "(HAL_BOOTSTRAP_MAX_MESSAGE); connection closed",
                 who, (unsigned long long)x->fsize, HAL_BOOTSTRAP_MAX_MESSAGE);
        return bs_conn_fail(c, call, HAL_ERROR_REMOTE, detail);
    }
    if (x->ftype == x->type && x->ftag == x->tag) {
        x->sink = x->fsize == x->size ? BS_SINK_USER : BS_SINK_DISCARD;
        return HAL_OK;
    }
    pthread_mutex_lock(&c->mu);
    bool over = c->queued + x->fsize > BS_QUEUE_LIMIT;
    if (!over)
        c->queued += (size_t)x->fsize;
    pthread_mutex_unlock(&c->mu);
    if (!over)
        x->spill = malloc(sizeof(bs_msg_t) + (size_t)x->fsize);
    if (over || x->spill == NULL) {
        if (!over) {
            pthread_mutex_lock(&c->mu);
            c->queued -= (size_t)x->fsize;
            pthread_mutex_unlock(&c->mu);
        }
        snprintf(detail, sizeof(detail),
                 "%s sent more than %zu MiB of messages no receive has asked for yet", who,
                 BS_QUEUE_LIMIT >> 20);
        return bs_conn_fail(c, call, HAL_ERROR_OUT_OF_HOST_MEMORY, detail);
    }
    x->spill->type = x->ftype;
    x->spill->tag = x->ftag;
    x->spill->size = (size_t)x->fsize;
    x->sink = BS_SINK_SPILL;
    return HAL_OK;
}

static hal_status_t bs_recv_progress(hal_bootstrap_t *b, bs_xfer_t *x, const char *call)
{
    bs_conn_t *c = &b->conns[x->peer];
    uint8_t scratch[16384];
    while (!x->done) {
        void *dst;
        size_t want;
        if (x->off < BS_HEADER_BYTES) {
            dst = x->hdr + x->off;
            want = BS_HEADER_BYTES - (size_t)x->off;
        } else {
            uint64_t got = x->off - BS_HEADER_BYTES;
            if (got == x->fsize) {
                /* A whole frame is in. */
                if (x->sink == BS_SINK_SPILL) {
                    pthread_mutex_lock(&c->mu);
                    bs_queue_push(c, x->spill);
                    pthread_cond_broadcast(&c->cv);
                    pthread_mutex_unlock(&c->mu);
                    x->spill = NULL;
                    x->off = 0;
                    continue;
                }
                x->done = true;
                if (x->sink == BS_SINK_DISCARD)
                    return bs_size_mismatch(b, x, x->fsize, call);
                return HAL_OK;
            }
            want = (size_t)(x->fsize - got);
            if (x->sink == BS_SINK_USER) {
                dst = x->rbuf + got;
            } else if (x->sink == BS_SINK_SPILL) {
                dst = x->spill->data + got;
            } else {
                dst = scratch;
                if (want > sizeof(scratch))
                    want = sizeof(scratch);
            }
        }
        ssize_t n = recv(x->fd, dst, want, 0);
        if (n > 0) {
            x->off += (uint64_t)n;
            if (x->off == BS_HEADER_BYTES)
                HAL_CHECK(bs_recv_header(b, x, call));
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return HAL_OK;
        return bs_xfer_io_fail(b, x, n, call);
    }
    return HAL_OK;
}

/* Drives the transfers (one, or a send and a receive at once so that rings of large messages cannot
 * deadlock on full socket buffers) until done, the deadline or an abort. */
static hal_status_t bs_drive(hal_bootstrap_t *b, bs_xfer_t *xs, int n, int64_t deadline,
                             const char *call)
{
    hal_status_t st = HAL_OK;
    for (;;) {
        const bs_xfer_t *waiting = NULL;
        if (bs_aborted(b)) {
            st = hal_error(HAL_ERROR_ABORTED, NULL, call, "aborted while exchanging with rank %d",
                           xs[0].peer);
            goto out;
        }
        for (int i = 0; i < n; i++) {
            bs_xfer_t *x = &xs[i];
            if (x->done)
                continue;
            st = x->send ? bs_send_progress(b, x, call) : bs_recv_progress(b, x, call);
            if (st != HAL_OK)
                goto out;
            if (!x->done && waiting == NULL)
                waiting = x;
        }
        if (waiting == NULL)
            return HAL_OK;
        char who[160];
        bs_peer_name(b, waiting->peer, who, sizeof(who));
        if (bs_aborted(b)) {
            st = hal_error(HAL_ERROR_ABORTED, NULL, call, "aborted while %s %s",
                           waiting->send ? "sending to" : "waiting for a message from", who);
            goto out;
        }
        if (bs_now_ms() >= deadline) {
            st = hal_error(HAL_ERROR_TIMEOUT, NULL, call,
                           waiting->send
                               ? "timed out after %u ms sending to %s (it is not receiving)"
                               : "timed out after %u ms waiting for a message from %s",
                           b->timeout_ms, who);
            goto out;
        }
        struct pollfd p[3];
        int np = 0;
        for (int i = 0; i < n; i++)
            if (!xs[i].done)
                p[np++] = (struct pollfd){ xs[i].fd, xs[i].send ? POLLOUT : POLLIN, 0 };
        p[np++] = (struct pollfd){ b->wake_fd, POLLIN, 0 };
        if (poll(p, (nfds_t)np, bs_poll_timeout(deadline)) < 0 && errno != EINTR) {
            st = hal_error(HAL_ERROR_INTERNAL, NULL, call, "poll failed: %s", strerror(errno));
            goto out;
        }
    }
out:
    for (int i = 0; i < n; i++) {
        bs_xfer_t *x = &xs[i];
        if (x->spill != NULL) {
            bs_conn_t *c = &b->conns[x->peer];
            pthread_mutex_lock(&c->mu);
            c->queued -= x->spill->size;
            pthread_mutex_unlock(&c->mu);
            free(x->spill);
            x->spill = NULL;
        }
        /* Stopped inside a frame: the stream lost its framing. */
        if (!x->done && x->off > 0)
            bs_conn_fail(&b->conns[x->peer], NULL, st, bs_last_detail(call));
    }
    return st;
}

/* Connects, takes the directions it needs, drives, releases. */
static hal_status_t bs_xfer_run(hal_bootstrap_t *b, bs_xfer_t *xs, int n, int64_t deadline,
                                const char *call)
{
    hal_status_t st = HAL_OK;
    int acquired = 0;
    for (int i = 0; i < n; i++)
        HAL_CHECK(bs_get_conn(b, xs[i].peer, deadline, call, &xs[i].fd));
    for (; acquired < n; acquired++) {
        st = bs_acquire(b, &xs[acquired], deadline, call);
        if (st != HAL_OK)
            goto out;
    }
    st = bs_drive(b, xs, n, deadline, call);
out:
    for (int i = 0; i < n; i++)
        bs_release(b, &xs[i]);
    return st;
}

static hal_status_t bs_self_send(hal_bootstrap_t *b, uint32_t tag, const void *data, size_t size,
                                 const char *call)
{
    bs_conn_t *c = &b->conns[b->rank];
    bs_msg_t *m = malloc(sizeof(*m) + size);
    if (m == NULL)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, NULL, call, "out of host memory");
    m->type = BS_FRAME_DATA;
    m->tag = tag;
    m->size = size;
    if (size > 0)
        memcpy(m->data, data, size);
    pthread_mutex_lock(&c->mu);
    if (c->queued + size > BS_QUEUE_LIMIT) {
        pthread_mutex_unlock(&c->mu);
        free(m);
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, NULL, call,
                         "more than %zu MiB of messages to this rank itself wait for a receive",
                         BS_QUEUE_LIMIT >> 20);
    }
    c->queued += size;
    bs_queue_push(c, m);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return HAL_OK;
}

static hal_status_t bs_self_recv(hal_bootstrap_t *b, uint32_t tag, void *data, size_t size,
                                 int64_t deadline, const char *call)
{
    bs_conn_t *c = &b->conns[b->rank];
    bs_xfer_t x;
    bs_xfer_init(&x, b->rank, false, BS_FRAME_DATA, tag, NULL, data, size);
    pthread_mutex_lock(&c->mu);
    for (;;) {
        bs_msg_t *m = bs_queue_take(c, BS_FRAME_DATA, tag);
        if (m != NULL) {
            pthread_mutex_unlock(&c->mu);
            return bs_deliver(b, &x, m, call);
        }
        if (bs_aborted(b)) {
            pthread_mutex_unlock(&c->mu);
            return hal_error(HAL_ERROR_ABORTED, NULL, call,
                             "aborted while waiting for a message from this rank to itself");
        }
        if (bs_now_ms() >= deadline) {
            pthread_mutex_unlock(&c->mu);
            return hal_error(
                HAL_ERROR_TIMEOUT, NULL, call,
                "timed out after %u ms waiting for a message from this rank to itself (tag %u)",
                b->timeout_ms, tag);
        }
        bs_cond_wait(c, deadline);
    }
}

static hal_status_t bs_check_p2p(hal_bootstrap_t *b, int peer, const void *data, size_t size,
                                 const char *call)
{
    if (b == NULL)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "bootstrap is NULL");
    if (peer < 0 || peer >= b->nranks)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "peer %d is not in 0..%d", peer,
                         b->nranks - 1);
    if (data == NULL && size > 0)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "data is NULL");
    if (size > HAL_BOOTSTRAP_MAX_MESSAGE)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "%zu bytes exceed HAL_BOOTSTRAP_MAX_MESSAGE (%u)", size,
                         HAL_BOOTSTRAP_MAX_MESSAGE);
    if (bs_aborted(b))
        return hal_error(HAL_ERROR_ABORTED, NULL, call, "the bootstrap was aborted");
    return HAL_OK;
}

/* Sends size bytes to peer under tag; returns once they are in the kernel's socket buffer (or the
 * queue, for peer == own rank). Returns HAL_OK, HAL_ERROR_INVALID_ARGUMENT,
 * HAL_ERROR_PERMISSION_DENIED, HAL_ERROR_TIMEOUT, HAL_ERROR_REMOTE, HAL_ERROR_ABORTED,
 * HAL_ERROR_OUT_OF_HOST_MEMORY. Thread safety: safe; sends to one peer are serialized. */
hal_status_t hal_bootstrap_send(hal_bootstrap_t *b, int peer, uint32_t tag, const void *data,
                                size_t size)
{
    const char *call = "bootstrap send";
    HAL_CHECK(bs_check_p2p(b, peer, data, size, call));
    if (peer == b->rank)
        return bs_self_send(b, tag, data, size, call);
    bs_xfer_t x;
    bs_xfer_init(&x, peer, true, BS_FRAME_DATA, tag, data, NULL, size);
    return bs_xfer_run(b, &x, 1, bs_now_ms() + b->timeout_ms, call);
}

/* Receives the next message peer sent under tag into data; it must be exactly size bytes (else
 * HAL_ERROR_INVALID_ARGUMENT, and the message is consumed). Other statuses as hal_bootstrap_send.
 * Thread safety: safe; receives from one peer take turns reading, and a message for another tag is
 * queued for its receiver. */
hal_status_t hal_bootstrap_recv(hal_bootstrap_t *b, int peer, uint32_t tag, void *data, size_t size)
{
    const char *call = "bootstrap recv";
    HAL_CHECK(bs_check_p2p(b, peer, data, size, call));
    int64_t deadline = bs_now_ms() + b->timeout_ms;
    if (peer == b->rank)
        return bs_self_recv(b, tag, data, size, deadline, call);
    bs_xfer_t x;
    bs_xfer_init(&x, peer, false, BS_FRAME_DATA, tag, NULL, data, size);
    return bs_xfer_run(b, &x, 1, deadline, call);
}

/* ---- collective helpers ---- */

static hal_status_t bs_exchange(hal_bootstrap_t *b, int to, const void *sbuf, int from, void *rbuf,
                                size_t size, uint32_t tag, int64_t deadline, const char *call)
{
    bs_xfer_t x[2];
    bs_xfer_init(&x[0], to, true, BS_FRAME_COLL, tag, sbuf, NULL, size);
    bs_xfer_init(&x[1], from, false, BS_FRAME_COLL, tag, NULL, rbuf, size);
    return bs_xfer_run(b, x, 2, deadline, call);
}

/* Ring allgather: n - 1 steps, each sending one block to the next rank while receiving one from the
 * previous; every rank keeps only two connections. */
static hal_status_t bs_allgather(hal_bootstrap_t *b, const void *mine, size_t size, void *out,
                                 const char *call)
{
    int n = b->nranks, me = b->rank;
    uint8_t *o = out;
    if (size > 0 && (const uint8_t *)mine != o + (size_t)me * size)
        memmove(o + (size_t)me * size, mine, size);
    int64_t deadline = bs_now_ms() + b->timeout_ms;
    for (int s = 0; s < n - 1; s++) {
        int sb = (me - s + n) % n, rb = (me - s - 1 + n) % n;
        HAL_CHECK(bs_exchange(b, (me + 1) % n, o + (size_t)sb * size, (me - 1 + n) % n,
                              o + (size_t)rb * size, size, BS_TAG_ALLGATHER, deadline, call));
    }
    return HAL_OK;
}

static hal_status_t bs_check_coll(hal_bootstrap_t *b, const void *p, size_t size, const char *call)
{
    if (b == NULL)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "bootstrap is NULL");
    if (p == NULL && size > 0)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "buffer is NULL");
    if (size > HAL_BOOTSTRAP_MAX_MESSAGE)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "%zu bytes exceed HAL_BOOTSTRAP_MAX_MESSAGE (%u)", size,
                         HAL_BOOTSTRAP_MAX_MESSAGE);
    if (bs_aborted(b))
        return hal_error(HAL_ERROR_ABORTED, NULL, call, "the bootstrap was aborted");
    return HAL_OK;
}

/* out[r * size ...] = rank r's `mine`, on every rank (mine may alias out's own block). Returns
 * HAL_OK or an error as hal_bootstrap_send (INVALID_ARGUMENT also when ranks pass different sizes).
 * Thread safety: one collective helper at a time per bootstrap. */
hal_status_t hal_bootstrap_allgather(hal_bootstrap_t *b, const void *mine, size_t size, void *out)
{
    const char *call = "bootstrap allgather";
    HAL_CHECK(bs_check_coll(b, mine, size, call));
    HAL_CHECK(bs_check_coll(b, out, size, call));
    return bs_allgather(b, mine, size, out, call);
}

/* Binomial tree from root: log2(nranks) rounds; a rank receives before it sends, so no cycle of
 * blocked sends can form. Returns as hal_bootstrap_allgather (INVALID_ARGUMENT also for a root out
 * of range). Thread safety: one collective helper at a time per bootstrap. */
hal_status_t hal_bootstrap_broadcast(hal_bootstrap_t *b, void *data, size_t size, int root)
{
    const char *call = "bootstrap broadcast";
    HAL_CHECK(bs_check_coll(b, data, size, call));
    if (root < 0 || root >= b->nranks)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "root %d is not in 0..%d", root,
                         b->nranks - 1);
    int n = b->nranks, vr = (b->rank - root + n) % n, mask = 1;
    int64_t deadline = bs_now_ms() + b->timeout_ms;
    bs_xfer_t x;
    while (mask < n) {
        if (vr & mask) {
            bs_xfer_init(&x, (vr - mask + root) % n, false, BS_FRAME_COLL, BS_TAG_BROADCAST, NULL,
                         data, size);
            HAL_CHECK(bs_xfer_run(b, &x, 1, deadline, call));
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (vr + mask < n) {
            bs_xfer_init(&x, (vr + mask + root) % n, true, BS_FRAME_COLL, BS_TAG_BROADCAST, data,
                         NULL, size);
            HAL_CHECK(bs_xfer_run(b, &x, 1, deadline, call));
        }
    }
    return HAL_OK;
}

/* Dissemination barrier: ceil(log2(nranks)) rounds of empty messages to rank + 2^k. Returns as
 * hal_bootstrap_allgather. Thread safety: one collective helper at a time per bootstrap. */
hal_status_t hal_bootstrap_barrier(hal_bootstrap_t *b)
{
    const char *call = "bootstrap barrier";
    HAL_CHECK(bs_check_coll(b, NULL, 0, call));
    int n = b->nranks, me = b->rank;
    int64_t deadline = bs_now_ms() + b->timeout_ms;
    for (int k = 1; k < n; k <<= 1)
        HAL_CHECK(bs_exchange(b, (me + k) % n, NULL, (me - k + n) % n, NULL, 0, BS_TAG_BARRIER,
                              deadline, call));
    return HAL_OK;
}

/* Makes every blocked and later call fail with HAL_ERROR_ABORTED within milliseconds, and shuts the
 * connections down so peers see HAL_ERROR_REMOTE at once. Thread safety: safe from any thread, also
 * while others are blocked in this bootstrap (not concurrently with destroy). */
void hal_bootstrap_abort(hal_bootstrap_t *b)
{
    if (b == NULL)
        return;
    atomic_store_explicit(&b->aborted, true, memory_order_release);
    bs_wake(b);
    for (int i = 0; i < b->conns_ready; i++) {
        bs_conn_t *c = &b->conns[i];
        pthread_mutex_lock(&c->mu);
        if (c->fd >= 0)
            shutdown(c->fd, SHUT_RDWR);
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
}

/* Stops the accept thread, closes every socket and frees. b may be NULL. Thread safety: no other
 * call on b may be running or follow. */
void hal_bootstrap_destroy(hal_bootstrap_t *b)
{
    if (b == NULL)
        return;
    if (b->accept_started) {
        bs_wake(b);
        pthread_join(b->accept_thread, NULL);
    }
    for (int i = 0; i < b->conns_ready; i++) {
        bs_conn_t *c = &b->conns[i];
        if (c->fd >= 0)
            close(c->fd);
        for (bs_msg_t *m = c->head, *next; m != NULL; m = next) {
            next = m->next;
            free(m);
        }
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
    }
    if (b->listen_fd >= 0)
        close(b->listen_fd);
    if (b->wake_fd >= 0)
        close(b->wake_fd);
    memset(b->secret, 0, sizeof(b->secret));
    free(b->entries);
    free(b->conns);
    free(b);
}

/* Sends a bare frame header announcing `size` payload bytes, without the payload: lets the tests
 * play a peer that announces an oversized message. Returns as hal_bootstrap_send. Thread safety: as
 * hal_bootstrap_send. */
hal_status_t hal_bootstrap_test_send_header(hal_bootstrap_t *b, int peer, uint32_t tag,
                                            uint64_t size)
{
    const char *call = "bootstrap test header";
    HAL_CHECK(bs_check_p2p(b, peer, NULL, 0, call));
    if (peer == b->rank)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "peer is this rank");
    bs_xfer_t x;
    bs_xfer_init(&x, peer, true, BS_FRAME_DATA, tag, NULL, NULL, 0);
    put64(x.hdr + 8, size);
    return bs_xfer_run(b, &x, 1, bs_now_ms() + b->timeout_ms, call);
}
