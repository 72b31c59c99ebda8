/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the bootstrap wire protocol (hal/src/comm/bootstrap_*.c, included here for
 * their static functions): the input plays a peer on a connection, through a socket pair,
 * against the real code. The first byte picks what is attacked:
 *   0  the bootstrap root: up to four connections that send AUTH2 and HELLO (the harness can
 *      authenticate properly, so the fuzzer reaches the HELLO and table logic; everything else
 *      is raw input), then hang up;
 *   1  a rank reading the root's reply to its HELLO (TABLE or ERROR frames; bs_read_root_reply);
 *   2  a rank connecting: the acceptor's AUTH1 and AUTH3 (bs_handshake_connect);
 *   3  a rank's peer listener checking AUTH2 (bs_accept_verify), with a valid MAC or not;
 *   4  an established rank-to-rank connection: frames for the receives, sends and broadcasts a
 *      rank makes (sizes, tags, types, queueing), ending in a hang-up.
 * Checks, besides memory safety and the absence of hangs: a connection that did not prove the
 * secret never joins, never gets the table and is never accepted; a receive returns only what a
 * complete frame of the right tag and size carried. */
#include "hal/src/comm/bootstrap_auth.c"
#include "hal/src/comm/bootstrap_coll.c"
#include "hal/src/comm/bootstrap_id.c"
#include "hal/src/comm/bootstrap_msg.c"
#include "hal/src/comm/bootstrap_rank.c"
#include "hal/src/comm/bootstrap_rendezvous.c"
#include "hal/src/comm/bootstrap_root.c"
#include "hal/src/comm/bootstrap_socket.c"

#define CHECK(cond)           \
    do {                      \
        if (!(cond))          \
            __builtin_trap(); \
    } while (0)

static const uint8_t secret[HAL_BOOTSTRAP_SECRET_BYTES] = "torch-hal fuzzing secret 0123456";

typedef struct input {
    const uint8_t *p;
    size_t n;
} input_t;

static uint8_t byte_of(input_t *in)
{
    if (in->n == 0)
        return 0;
    in->n--;
    return *in->p++;
}

/* Up to `max` bytes of the input, for one connection. */
static input_t chunk_of(input_t *in, size_t max)
{
    size_t want = (size_t)byte_of(in) * 8;
    if (want > max)
        want = max;
    if (want > in->n)
        want = in->n;
    input_t c = { in->p, want };
    in->p += want;
    in->n -= want;
    return c;
}

static bool socket_pair(int sv[2])
{
    return socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0;
}

/* Writes what fits without blocking (the inputs are far smaller than a socket's buffer). */
static void peer_write(int fd, const void *data, size_t n)
{
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

/* Reads whatever the code under test wrote; returns how much. */
static size_t peer_drain(int fd, uint8_t *keep, size_t keep_size)
{
    uint8_t buf[4096];
    size_t total = 0;
    for (;;) {
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r <= 0)
            return total;
        if (keep && total < keep_size)
            memcpy(keep + total, buf,
                   (size_t)r < keep_size - total ? (size_t)r : keep_size - total);
        total += (size_t)r;
    }
}

/* ---- mode 0: the root ---- */

static void make_auth2(const uint8_t a1[BS_AUTH1_BYTES], uint16_t kind, uint32_t c_rank,
                       uint32_t a_rank, uint8_t seed, uint8_t a2[BS_AUTH2_BYTES])
{
    memset(a2, 0, BS_AUTH2_BYTES);
    put32(a2, BS_WIRE_MAGIC);
    put16(a2 + 4, BS_WIRE_VERSION);
    put16(a2 + 6, kind);
    memset(a2 + 8, seed, BS_CHALLENGE_BYTES);
    put32(a2 + 40, c_rank);
    put32(a2 + 44, a_rank);
    memset(a2 + 48, seed ^ 0x5a, BS_INSTANCE_BYTES);
    bs_auth_mac(secret, bs_label_connector, a1, a2, BS_AUTH2_MAC_AT, NULL, 0, a2 + BS_AUTH2_MAC_AT);
}

static void make_hello(input_t *in, uint32_t rank, uint8_t out[BS_HEADER_BYTES + BS_ENTRY_BYTES])
{
    bs_entry_t e;
    memset(&e, 0, sizeof(e));
    e.peer.rank = (int32_t)rank;
    e.nranks = 1 + byte_of(in) % 4;
    e.peer.pid = byte_of(in);
    e.peer.host_hash = byte_of(in);
    bs_addr_loopback(&e.addr, byte_of(in) & 1 ? AF_INET6 : AF_INET);
    bs_addr_set_port(&e.addr, (uint16_t)(byte_of(in) | 1));
    memset(e.instance, (int)rank, sizeof(e.instance));
    put32(out, BS_FRAME_HELLO);
    put32(out + 4, 0);
    put64(out + 8, BS_ENTRY_BYTES);
    bs_entry_encode(&e, out + BS_HEADER_BYTES);
}

static bool root_conn_live(const bs_root_t *r, size_t i)
{
    return i < r->nconns && r->conns[i].state != RS_CLOSED;
}

static void root_session(input_t *in)
{
    bs_root_t *r = calloc(1, sizeof(*r));
    int peers[4] = { -1, -1, -1, -1 };
    bool authenticated[4] = { false };
    if (!r)
        return;
    r->listen_fd = -1;
    memcpy(r->secret, secret, sizeof(secret));
    r->timeout_ms = 1000;
    r->deadline = bs_now_ms() + 60000;
    int nconn = 1 + byte_of(in) % 4;
    for (int k = 0; k < nconn && !r->finished; k++) {
        int sv[2];
        if (!socket_pair(sv))
            break;
        if (r->nconns == r->cap) {
            size_t cap = r->cap ? r->cap * 2 : 4;
            bs_root_conn_t *conns = realloc(r->conns, cap * sizeof(*conns));
            if (!conns) {
                close(sv[0]);
                close(sv[1]);
                break;
            }
            r->conns = conns;
            r->cap = cap;
        }
        size_t idx = r->nconns++;
        bs_root_conn_t *c = &r->conns[idx];
        memset(c, 0, sizeof(*c));
        c->fd = sv[0];
        c->rank = -1;
        c->deadline = r->deadline;
        put32(c->a1, BS_WIRE_MAGIC);
        put16(c->a1 + 4, BS_WIRE_VERSION);
        put16(c->a1 + 6, BS_KIND_ROOT);
        memset(c->a1 + 8, 0x30 + k, BS_CHALLENGE_BYTES);
        memcpy(c->obuf, c->a1, BS_AUTH1_BYTES);
        c->out_len = BS_AUTH1_BYTES;
        c->state = RS_SEND_AUTH1;
        peers[k] = sv[1];
        bs_root_step(r, c);
        uint8_t a1[BS_AUTH1_BYTES];
        CHECK(peer_drain(sv[1], a1, sizeof(a1)) == BS_AUTH1_BYTES);
        CHECK(memcmp(a1, r->conns[idx].a1, sizeof(a1)) == 0);
        uint8_t flags = byte_of(in);
        if (flags & 1) {
            uint8_t a2[BS_AUTH2_BYTES];
            uint32_t claimed = byte_of(in) % 6;
            make_auth2(a1, flags & 2 ? BS_KIND_PEER : BS_KIND_ROOT, claimed,
                       flags & 4 ? claimed : BS_ROOT_RANK, (uint8_t)k, a2);
            peer_write(sv[1], a2, sizeof(a2));
            authenticated[k] = !(flags & 6);
            if (flags & 8) {
                uint8_t hello[BS_HEADER_BYTES + BS_ENTRY_BYTES];
                make_hello(in, flags & 16 ? claimed + 1 : claimed, hello);
                peer_write(sv[1], hello, sizeof(hello));
            }
        }
        input_t raw = chunk_of(in, 1024);
        peer_write(sv[1], raw.p, raw.n);
        if (flags & 32)
            shutdown(sv[1], SHUT_WR);
        for (int i = 0; i < 8 && root_conn_live(r, idx) && !r->finished; i++)
            bs_root_step(r, &r->conns[idx]);
        uint8_t reply[BS_AUTH3_BYTES];
        size_t got = peer_drain(sv[1], reply, sizeof(reply));
        /* Only a connection that proved the secret for the root hears AUTH3 status OK. */
        if (got >= BS_AUTH3_BYTES && get32(reply) == BS_AUTH_OK)
            CHECK(authenticated[k]);
    }
    /* Everyone hangs up; the root notices. */
    for (int k = 0; k < 4; k++)
        if (peers[k] >= 0)
            shutdown(peers[k], SHUT_RDWR);
    for (size_t i = 0; i < r->nconns && !r->finished; i++)
        if (root_conn_live(r, i))
            bs_root_step(r, &r->conns[i]);
    for (size_t i = 0; i < r->nconns; i++) {
        /* Nobody who did not authenticate joined. */
        if (r->conns[i].rank >= 0)
            CHECK(authenticated[i]);
        bs_root_close(&r->conns[i]);
    }
    for (int k = 0; k < 4; k++)
        if (peers[k] >= 0)
            close(peers[k]);
    free(r->conns);
    free(r->taken);
    free(r->table);
    free(r);
}

/* ---- a bootstrap object without sockets of its own ---- */

static hal_bootstrap_t *fake_bootstrap(int nranks, int rank)
{
    hal_bootstrap_t *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->nranks = nranks;
    b->rank = rank;
    b->timeout_ms = 20;
    b->wake_fd = -1;
    b->listen_fd = -1;
    atomic_init(&b->aborted, false);
    memcpy(b->secret, secret, sizeof(secret));
    memset(b->instance, 0x11 * (rank + 1), sizeof(b->instance));
    b->entries = calloc((size_t)nranks, sizeof(*b->entries));
    b->conns = calloc((size_t)nranks, sizeof(*b->conns));
    if (!b->entries || !b->conns) {
        hal_bootstrap_destroy(b);
        return NULL;
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    for (int i = 0; i < nranks; i++) {
        b->conns[i].fd = -1;
        pthread_mutex_init(&b->conns[i].mu, NULL);
        pthread_cond_init(&b->conns[i].cv, &attr);
        b->conns_ready++;
        b->entries[i].peer.rank = i;
        b->entries[i].nranks = nranks;
        memset(b->entries[i].instance, 0x11 * (i + 1), sizeof(b->entries[i].instance));
        bs_addr_loopback(&b->entries[i].addr, AF_INET);
        bs_addr_set_port(&b->entries[i].addr, (uint16_t)(40000 + i));
    }
    pthread_condattr_destroy(&attr);
    return b;
}

/* ---- mode 1: the root's reply, read by a rank ---- */

static void reply_session(input_t *in)
{
    int nranks = 1 + byte_of(in) % 4;
    int rank = byte_of(in) % nranks;
    uint8_t flags = byte_of(in);
    hal_bootstrap_t *b = fake_bootstrap(nranks, rank);
    int sv[2];
    if (!b || !socket_pair(sv)) {
        hal_bootstrap_destroy(b);
        return;
    }
    if (flags & 1) {
        /* A well-formed TABLE header; entries from the input, or well-formed ones. */
        uint8_t hdr[BS_HEADER_BYTES];
        put32(hdr, BS_FRAME_TABLE);
        put32(hdr + 4, 0);
        put64(hdr + 8, (uint64_t)(flags & 2 ? nranks + 1 : nranks) * BS_ENTRY_BYTES);
        peer_write(sv[1], hdr, sizeof(hdr));
        for (int r = 0; (flags & 4) && r < nranks; r++) {
            uint8_t raw[BS_ENTRY_BYTES];
            bs_entry_t e = b->entries[r];
            if (r == rank && (flags & 8))
                e.instance[0] ^= 1;
            if (flags & 16)
                e.nranks = nranks + 1;
            bs_entry_encode(&e, raw);
            peer_write(sv[1], raw, sizeof(raw));
        }
    } else if (flags & 2) {
        uint8_t hdr[BS_HEADER_BYTES];
        put32(hdr, BS_FRAME_ERROR);
        put32(hdr + 4, byte_of(in));
        put64(hdr + 8, byte_of(in));
        peer_write(sv[1], hdr, sizeof(hdr));
    }
    peer_write(sv[1], in->p, in->n);
    shutdown(sv[1], SHUT_WR);
    hal_status_t st = bs_read_root_reply(b, sv[0], bs_now_ms() + 50, "the root", "fuzz");
    if (st == HAL_OK) {
        for (int r = 0; r < nranks; r++)
            CHECK(b->entries[r].peer.rank == r && b->entries[r].nranks == nranks);
        CHECK(memcmp(b->entries[rank].instance, b->instance, BS_INSTANCE_BYTES) == 0);
    }
    close(sv[0]);
    close(sv[1]);
    hal_bootstrap_destroy(b);
}

/* ---- mode 2: the connecting side of the handshake ---- */

static void connect_session(input_t *in)
{
    uint8_t flags = byte_of(in);
    uint8_t inst[BS_INSTANCE_BYTES] = { 0 };
    int sv[2];
    if (!socket_pair(sv))
        return;
    if (flags & 1) {
        uint8_t a1[BS_AUTH1_BYTES];
        put32(a1, BS_WIRE_MAGIC);
        put16(a1 + 4, BS_WIRE_VERSION);
        put16(a1 + 6, flags & 2 ? BS_KIND_PEER : BS_KIND_ROOT);
        memset(a1 + 8, byte_of(in), BS_CHALLENGE_BYTES);
        peer_write(sv[1], a1, sizeof(a1));
    }
    peer_write(sv[1], in->p, in->n);
    shutdown(sv[1], SHUT_WR);
    hal_status_t st =
        bs_handshake_connect(-1, secret, sv[0], flags & 4 ? BS_KIND_PEER : BS_KIND_ROOT, 1,
                             BS_ROOT_RANK, inst, inst, bs_now_ms() + 50, 50, "fuzz", "the peer");
    /* The acceptor's proof covers a nonce drawn here: the input cannot forge it. */
    CHECK(st != HAL_OK);
    close(sv[0]);
    close(sv[1]);
}

/* ---- mode 3: a peer listener checking AUTH2 ---- */

static void accept_session(input_t *in)
{
    int nranks = 1 + byte_of(in) % 4;
    int rank = byte_of(in) % nranks;
    uint8_t flags = byte_of(in);
    hal_bootstrap_t *b = fake_bootstrap(nranks, rank);
    if (!b)
        return;
    uint8_t a1[BS_AUTH1_BYTES], a2[BS_AUTH2_BYTES];
    put32(a1, BS_WIRE_MAGIC);
    put16(a1 + 4, BS_WIRE_VERSION);
    put16(a1 + 6, BS_KIND_PEER);
    memset(a1 + 8, 0x77, BS_CHALLENGE_BYTES);
    memset(a2, 0, sizeof(a2));
    size_t n = in->n < sizeof(a2) ? in->n : sizeof(a2);
    memcpy(a2, in->p, n);
    bool proved = false;
    if (flags & 1) {
        /* Well formed and proving the secret, with claims from the input. */
        uint32_t c_rank = get32(a2 + 40), a_rank = get32(a2 + 44);
        uint8_t seed = a2[8];
        make_auth2(a1, BS_KIND_PEER, flags & 2 ? c_rank % 5 : c_rank,
                   flags & 4 ? (uint32_t)rank : a_rank, seed, a2);
        if (flags & 8) /* the instance of the process the table names */
            memcpy(a2 + 48, b->entries[get32(a2 + 40) % nranks].instance, BS_INSTANCE_BYTES);
        if (flags & 16)
            memcpy(a2 + 64, b->instance, BS_INSTANCE_BYTES);
        bs_auth_mac(secret, bs_label_connector, a1, a2, BS_AUTH2_MAC_AT, NULL, 0,
                    a2 + BS_AUTH2_MAC_AT);
        proved = true;
    }
    uint32_t c_rank = UINT32_MAX;
    uint32_t status = bs_accept_verify(b, a1, a2, &c_rank);
    CHECK(status == BS_AUTH_OK || status == BS_AUTH_DENIED || status == BS_AUTH_CONFLICT);
    if (status != BS_AUTH_DENIED)
        CHECK(proved);
    if (status == BS_AUTH_OK) {
        CHECK(c_rank < (uint32_t)rank);
        CHECK(memcmp(a2 + 64, b->instance, BS_INSTANCE_BYTES) == 0);
        uint8_t a3[BS_AUTH3_BYTES], mac[BS_MAC_BYTES];
        bs_auth3_make(secret, a1, a2, status, a3);
        bs_auth_mac(secret, bs_label_acceptor, a1, a2, BS_AUTH2_BYTES, a3, 8, mac);
        CHECK(memcmp(mac, a3 + 8, BS_MAC_BYTES) == 0);
    }
    hal_bootstrap_destroy(b);
}

/* ---- mode 4: frames on an established connection ---- */

static void frames_session(input_t *in)
{
    int rank = byte_of(in) & 1, peer = 1 - rank;
    hal_bootstrap_t *b = fake_bootstrap(2, rank);
    int sv[2];
    if (!b || !socket_pair(sv)) {
        hal_bootstrap_destroy(b);
        return;
    }
    b->conns[peer].fd = sv[0]; /* closed by hal_bootstrap_destroy */
    int ops = 1 + byte_of(in) % 4;
    uint8_t plan[4][3];
    for (int i = 0; i < ops; i++)
        for (int j = 0; j < 3; j++)
            plan[i][j] = byte_of(in);
    /* Optionally, well-formed frames first, so deliveries and queueing are reached. */
    uint8_t lead = byte_of(in);
    for (int i = 0; i < (lead & 3); i++) {
        uint8_t hdr[BS_HEADER_BYTES];
        uint32_t size = plan[i % ops][1] % 64;
        put32(hdr, lead & 4 ? BS_FRAME_COLL : BS_FRAME_DATA);
        put32(hdr + 4, lead & 8 ? (uint32_t)(plan[i % ops][0] % 4) : (uint32_t)i);
        put64(hdr + 8, size);
        peer_write(sv[1], hdr, sizeof(hdr));
        uint8_t payload[64];
        memset(payload, 0x40 + i, sizeof(payload));
        peer_write(sv[1], payload, size);
    }
    peer_write(sv[1], in->p, in->n);
    shutdown(sv[1], SHUT_WR);
    uint8_t buf[512], out[512];
    memset(out, 0x3c, sizeof(out));
    for (int i = 0; i < ops; i++) {
        uint32_t tag = plan[i][0] % 4;
        size_t size = plan[i][1] % 64;
        memset(buf, 0xee, sizeof(buf));
        hal_status_t st;
        switch (plan[i][2] % 4) {
        case 0:
        case 1:
            st = hal_bootstrap_recv(b, peer, tag, buf, size);
            CHECK(buf[size] == 0xee); /* never past the buffer */
            break;
        case 2:
            st = hal_bootstrap_send(b, peer, tag, out, size);
            break;
        default:
            st = hal_bootstrap_broadcast(b, buf, size, peer);
            CHECK(buf[size] == 0xee);
            break;
        }
        CHECK(st == HAL_OK || st == HAL_ERROR_REMOTE || st == HAL_ERROR_INVALID_ARGUMENT ||
              st == HAL_ERROR_TIMEOUT || st == HAL_ERROR_OUT_OF_HOST_MEMORY);
        peer_drain(sv[1], NULL, 0);
    }
    close(sv[1]);
    hal_bootstrap_destroy(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    input_t in = { data + 1, size - 1 };
    switch (data[0] % 5) {
    case 0:
        root_session(&in);
        break;
    case 1:
        reply_session(&in);
        break;
    case 2:
        connect_session(&in);
        break;
    case 3:
        accept_session(&in);
        break;
    default:
        frames_session(&in);
        break;
    }
    return 0;
}
