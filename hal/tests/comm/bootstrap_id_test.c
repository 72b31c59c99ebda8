/* SPDX-License-Identifier: Apache-2.0 */
/* The unique id (layout, round trip, rejection of corrupted ids, a fuzz-style sweep),
 * hal_bootstrap_connect's argument checks, HAL_COMM_BIND and HAL_COMM_TIMEOUT_MS. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hal/tests/comm/bootstrap_test_util.h"

/* Offsets of the documented id layout (bootstrap_internal.h). */
enum {
    ID_TAG = 0,
    ID_VERSION = 4,
    ID_FLAGS = 6,
    ID_FAMILY = 8,
    ID_ADDR_RESERVED = 9,
    ID_PORT = 10,
    ID_SCOPE = 12,
    ID_ADDR = 16,
    ID_SECRET = 32,
    ID_NONCE = 64,
    ID_RESERVED = 80,
};

static uint16_t id_port(const hal_unique_id_t *id)
{
    return (uint16_t)(id->internal[ID_PORT] << 8 | id->internal[ID_PORT + 1]);
}

CTEST(bootstrap_id, store_id_round_trip)
{
    hal_unique_id_t id;
    uint8_t nonce[HAL_BOOTSTRAP_NONCE_BYTES];
    CTEST_CHECK(hal_bootstrap_new_id(HAL_COMM_ID_FLAG_STORE, TEST_TIMEOUT_MS, &id) == HAL_OK);
    CTEST_CHECK(memcmp(id.internal, "HALB", 4) == 0);
    CTEST_CHECK(id.internal[ID_FAMILY] == 0);
    CTEST_CHECK(hal_bootstrap_parse_id(&id, nonce) == HAL_OK);
    CTEST_CHECK(memcmp(nonce, id.internal + ID_NONCE, sizeof(nonce)) == 0);
    CTEST_CHECK(hal_bootstrap_parse_id(&id, NULL) == HAL_OK);

    hal_unique_id_t other;
    CTEST_CHECK(hal_bootstrap_new_id(HAL_COMM_ID_FLAG_STORE, TEST_TIMEOUT_MS, &other) == HAL_OK);
    CTEST_CHECK(memcmp(id.internal + ID_SECRET, other.internal + ID_SECRET, 32) != 0);
    CTEST_CHECK(memcmp(id.internal + ID_NONCE, other.internal + ID_NONCE, 16) != 0);
    return CTEST_PASS;
}

CTEST(bootstrap_id, tcp_id_layout)
{
    hal_unique_id_t id;
    unsetenv("HAL_COMM_BIND");
    /* The root thread this starts gives up after 300 ms. */
    CTEST_CHECK(hal_bootstrap_new_id(0, 300, &id) == HAL_OK);
    CTEST_CHECK(hal_bootstrap_parse_id(&id, NULL) == HAL_OK);
    CTEST_CHECK(id.internal[ID_FAMILY] == 4);
    CTEST_CHECK(id_port(&id) != 0);
    static const uint8_t loopback[4] = { 127, 0, 0, 1 };
    CTEST_CHECK(memcmp(id.internal + ID_ADDR, loopback, 4) == 0);
    return CTEST_PASS;
}

CTEST(bootstrap_id, new_id_rejects_bad_arguments)
{
    hal_unique_id_t id;
    CTEST_CHECK(hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, NULL) == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(hal_bootstrap_new_id(0x10, TEST_TIMEOUT_MS, &id) == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(strstr(hal_last_error_message(), "flags") != NULL);
    return CTEST_PASS;
}

/* HAL_COMM_TIMEOUT_MS, read by hal_comm_get_unique_id: digits after optional blanks, 1 to
 * 2^32 - 1; a sign is refused wherever it stands (strtoull wraps " -18446744073709551615" to 1:
 * found by fuzz/fuzz_comm_timeout.c). */
CTEST(bootstrap_id, comm_timeout_variable_is_checked)
{
    static const char *const bad[] = { "0",    "-5",         "+5",   " -18446744073709551615",
                                       "\v+7", "4294967296", "12ms", " ",
                                       "1 " };
    hal_unique_id_t id;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("HAL_COMM_TIMEOUT_MS", bad[i], 1);
        if (hal_comm_get_unique_id(HAL_COMM_ID_FLAG_STORE, &id) != HAL_ERROR_INVALID_ARGUMENT) {
            fprintf(stderr, "HAL_COMM_TIMEOUT_MS=\"%s\" was accepted\n", bad[i]);
            unsetenv("HAL_COMM_TIMEOUT_MS");
            return CTEST_FAIL;
        }
        CTEST_CHECK(strstr(hal_last_error_message(), "HAL_COMM_TIMEOUT_MS") != NULL);
    }
    setenv("HAL_COMM_TIMEOUT_MS", " 4294967295", 1);
    hal_status_t st = hal_comm_get_unique_id(HAL_COMM_ID_FLAG_STORE, &id);
    unsetenv("HAL_COMM_TIMEOUT_MS");
    CTEST_CHECK(st == HAL_OK);
    return CTEST_PASS;
}

CTEST(bootstrap_id, parse_rejects_malformed)
{
    hal_unique_id_t id;
    memset(&id, 0, sizeof(id));
    CTEST_CHECK(hal_bootstrap_parse_id(NULL, NULL) == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(hal_bootstrap_parse_id(&id, NULL) == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(strstr(hal_last_error_message(), "malformed unique id") != NULL);

    hal_unique_id_t good;
    CTEST_CHECK(hal_bootstrap_new_id(0, 300, &good) == HAL_OK);
    id = good;
    id.internal[ID_PORT] = id.internal[ID_PORT + 1] = 0;
    CTEST_CHECK(hal_bootstrap_parse_id(&id, NULL) == HAL_ERROR_INVALID_ARGUMENT);
    id = good;
    memset(id.internal + ID_SECRET, 0, 32);
    CTEST_CHECK(hal_bootstrap_parse_id(&id, NULL) == HAL_ERROR_INVALID_ARGUMENT);
    id = good;
    id.internal[ID_VERSION + 1] = 2;
    CTEST_CHECK(hal_bootstrap_parse_id(&id, NULL) == HAL_ERROR_INVALID_ARGUMENT);
    return CTEST_PASS;
}

/* Which single-byte corruptions of a TCP (IPv4) id must be rejected: everything but the port,
 * the address, the secret and the nonce. */
static int tcp_byte_must_reject(int i)
{
    if (i >= ID_PORT && i < ID_PORT + 2)
        return -1; /* any non-zero port is well formed; zero is checked separately */
    if (i >= ID_ADDR && i < ID_ADDR + 4)
        return 0;
    if (i >= ID_SECRET && i < ID_RESERVED)
        return 0;
    return 1;
}

/* For a store id, the whole address block must stay zero. */
static int store_byte_must_reject(int i)
{
    return !(i >= ID_SECRET && i < ID_RESERVED);
}

static int sweep(const hal_unique_id_t *good, int (*must_reject)(int))
{
    /* Masks that never turn family 4 into 6 (a valid IPv6 block). */
    static const uint8_t masks[] = { 0x01, 0x80, 0xff, 0x10 };
    for (int i = 0; i < HAL_UNIQUE_ID_BYTES; i++) {
        for (size_t m = 0; m < sizeof(masks); m++) {
            hal_unique_id_t id = *good;
            uint8_t nonce[HAL_BOOTSTRAP_NONCE_BYTES];
            id.internal[i] ^= masks[m];
            hal_status_t st = hal_bootstrap_parse_id(&id, nonce);
            int expect = must_reject(i);
            if (st != HAL_OK && st != HAL_ERROR_INVALID_ARGUMENT) {
                fprintf(stderr, "byte %d mask %#x: status %s\n", i, masks[m],
                        hal_status_string(st));
                return 0;
            }
            if ((expect == 1 && st == HAL_OK) || (expect == 0 && st != HAL_OK)) {
                fprintf(stderr, "byte %d mask %#x: got %s\n", i, masks[m], hal_status_string(st));
                return 0;
            }
            if (st == HAL_OK && memcmp(nonce, id.internal + ID_NONCE, sizeof(nonce)) != 0)
                return 0;
        }
    }
    return 1;
}

CTEST(bootstrap_id, every_byte_flipped)
{
    hal_unique_id_t tcp, store;
    unsetenv("HAL_COMM_BIND");
    CTEST_CHECK(hal_bootstrap_new_id(0, 300, &tcp) == HAL_OK);
    CTEST_CHECK(hal_bootstrap_new_id(HAL_COMM_ID_FLAG_STORE, 0, &store) == HAL_OK);
    CTEST_CHECK(sweep(&tcp, tcp_byte_must_reject));
    CTEST_CHECK(sweep(&store, store_byte_must_reject));
    return CTEST_PASS;
}

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random ids, random ids behind a valid header, and valid ids with random multi-byte damage:
 * the parser only ever answers OK or INVALID_ARGUMENT (ASan checks it reads nothing else). */
CTEST(bootstrap_id, fuzz_sweep)
{
    hal_unique_id_t good;
    CTEST_CHECK(hal_bootstrap_new_id(0, 300, &good) == HAL_OK);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    int accepted = 0;
    for (int iter = 0; iter < 60000; iter++) {
        hal_unique_id_t id;
        int mode = iter % 3;
        if (mode == 2)
            id = good;
        for (int i = 0; i < HAL_UNIQUE_ID_BYTES; i += 8) {
            uint64_t r = xorshift(&seed);
            if (mode == 2) {
                if ((r & 31) == 0)
                    id.internal[(r >> 8) % HAL_UNIQUE_ID_BYTES] = (uint8_t)(r >> 24);
            } else {
                memcpy(id.internal + i, &r, 8);
            }
        }
        if (mode == 1)
            memcpy(id.internal, good.internal, 8);
        hal_status_t st = hal_bootstrap_parse_id(&id, NULL);
        CTEST_CHECK(st == HAL_OK || st == HAL_ERROR_INVALID_ARGUMENT);
        accepted += st == HAL_OK;
    }
    CTEST_CHECK(accepted > 0); /* the undamaged and harmlessly damaged ones */
    return CTEST_PASS;
}

CTEST(bootstrap_id, connect_rejects_bad_arguments)
{
    hal_unique_id_t id, bad;
    hal_bootstrap_t *b = (hal_bootstrap_t *)&b;
    test_store_t store;
    test_store_init(&store);
    CTEST_CHECK(hal_bootstrap_new_id(HAL_COMM_ID_FLAG_STORE, 0, &id) == HAL_OK);
    const hal_comm_store_t *s = &store.api;
    CTEST_CHECK(hal_bootstrap_connect(&id, 1, 0, s, 100, NULL) == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(hal_bootstrap_connect(NULL, 1, 0, s, 100, &b) == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(b == NULL);
    CTEST_CHECK(hal_bootstrap_connect(&id, 0, 0, s, 100, &b) == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(hal_bootstrap_connect(&id, 4097, 0, s, 100, &b) == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(hal_bootstrap_connect(&id, 2, 2, s, 100, &b) == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(hal_bootstrap_connect(&id, 2, -1, s, 100, &b) == HAL_ERROR_INVALID_ARGUMENT);
    bad = id;
    bad.internal[0] ^= 1;
    CTEST_CHECK(hal_bootstrap_connect(&bad, 1, 0, s, 100, &b) == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(strstr(hal_last_error_message(), "malformed unique id") != NULL);
    /* A store id needs a store, a TCP id must not get one. */
    CTEST_CHECK(hal_bootstrap_connect(&id, 1, 0, NULL, 100, &b) == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(strstr(hal_last_error_message(), "HAL_COMM_ID_FLAG_STORE") != NULL);
    hal_unique_id_t tcp;
    CTEST_CHECK(hal_bootstrap_new_id(0, 300, &tcp) == HAL_OK);
    CTEST_CHECK(hal_bootstrap_connect(&tcp, 1, 0, s, 100, &b) == HAL_ERROR_INVALID_ARGUMENT);
    hal_comm_store_t broken = store.api;
    broken.struct_size = 8;
    CTEST_CHECK(hal_bootstrap_connect(&id, 1, 0, &broken, 100, &b) == HAL_ERROR_INVALID_ARGUMENT);
    broken = store.api;
    broken.get = NULL;
    CTEST_CHECK(hal_bootstrap_connect(&id, 1, 0, &broken, 100, &b) == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(b == NULL);
    /* And the well-formed call works: one rank alone. */
    CTEST_CHECK(hal_bootstrap_connect(&id, 1, 0, s, TEST_TIMEOUT_MS, &b) == HAL_OK);
    CTEST_CHECK(hal_bootstrap_nranks(b) == 1 && hal_bootstrap_rank(b) == 0);
    CTEST_CHECK(hal_bootstrap_peer(b, 0)->pid == getpid());
    CTEST_CHECK(hal_bootstrap_peer(b, 1) == NULL && hal_bootstrap_peer(b, -1) == NULL);
    CTEST_CHECK(memcmp(hal_bootstrap_nonce(b), id.internal + ID_NONCE, 16) == 0);
    hal_bootstrap_destroy(b);
    hal_bootstrap_destroy(NULL);
    test_store_destroy(&store);
    return CTEST_PASS;
}

/* ---- HAL_COMM_BIND ---- */

static int run_single_rank_job(void)
{
    hal_unique_id_t id;
    hal_bootstrap_t *b = NULL;
    if (hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, &id) != HAL_OK) {
        fprintf(stderr, "new_id: %s\n", hal_last_error_message());
        return 0;
    }
    if (hal_bootstrap_connect(&id, 1, 0, NULL, TEST_TIMEOUT_MS, &b) != HAL_OK) {
        fprintf(stderr, "connect: %s\n", hal_last_error_message());
        return 0;
    }
    int value = 42, out = 0;
    int ok = hal_bootstrap_allgather(b, &value, sizeof(value), &out) == HAL_OK && out == 42 &&
             hal_bootstrap_barrier(b) == HAL_OK;
    hal_bootstrap_destroy(b);
    return ok;
}

CTEST(bootstrap_bind, invalid_values_rejected)
{
    static const char *bad[] = {
        "not a host!",  "127.0.0.1:99999", "127.0.0.1:", "127.0.0.1:12ab", "[::1",     "[::1]x",
        "300.1.2.3",    "1.2.3.4.5",       ":80",        "[]:80",          "-leading", "a..b",
        "127.0.0.1:-1", "[127.0.0.1]",
    };
    hal_unique_id_t id, store_id;
    test_store_t store;
    test_store_init(&store);
    CTEST_CHECK(hal_bootstrap_new_id(HAL_COMM_ID_FLAG_STORE, 0, &store_id) == HAL_OK);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("HAL_COMM_BIND", bad[i], 1);
        hal_status_t st = hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, &id);
        if (st != HAL_ERROR_INVALID_ARGUMENT ||
            strstr(hal_last_error_message(), "HAL_COMM_BIND") == NULL) {
            fprintf(stderr, "HAL_COMM_BIND=\"%s\": %s: %s\n", bad[i], hal_status_string(st),
                    hal_last_error_message());
            unsetenv("HAL_COMM_BIND");
            return CTEST_FAIL;
        }
        /* Ranks read it too, for their own listeners. */
        hal_bootstrap_t *b = NULL;
        st = hal_bootstrap_connect(&store_id, 1, 0, &store.api, TEST_TIMEOUT_MS, &b);
        CTEST_CHECK(st == HAL_ERROR_INVALID_ARGUMENT && b == NULL);
        CTEST_CHECK(strstr(hal_last_error_message(), "HAL_COMM_BIND") != NULL);
    }
    unsetenv("HAL_COMM_BIND");
    test_store_destroy(&store);
    return CTEST_PASS;
}

CTEST(bootstrap_bind, valid_values_work)
{
    static const char *good[] = { "", "127.0.0.1", "127.0.0.1:0", "localhost", "localhost:0" };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        setenv("HAL_COMM_BIND", good[i], 1);
        int ok = run_single_rank_job();
        if (!ok)
            fprintf(stderr, "HAL_COMM_BIND=\"%s\" failed\n", good[i]);
        CTEST_CHECK(ok);
    }
    unsetenv("HAL_COMM_BIND");
    return CTEST_PASS;
}

CTEST(bootstrap_bind, fixed_port)
{
    /* Find a free port (the kernel's pick), release it, and ask for it. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof(sa);
    CTEST_CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    CTEST_CHECK(getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
    close(fd);
    char value[64];
    snprintf(value, sizeof(value), "127.0.0.1:%u", ntohs(sa.sin_port));
    setenv("HAL_COMM_BIND", value, 1);
    hal_unique_id_t id;
    hal_status_t st = hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, &id);
    hal_bootstrap_t *b = NULL;
    if (st == HAL_OK)
        st = hal_bootstrap_connect(&id, 1, 0, NULL, TEST_TIMEOUT_MS, &b);
    unsetenv("HAL_COMM_BIND");
    if (st != HAL_OK)
        fprintf(stderr, "%s\n", hal_last_error_message());
    CTEST_CHECK(st == HAL_OK);
    CTEST_CHECK(id_port(&id) == ntohs(sa.sin_port));
    hal_bootstrap_destroy(b);
    return CTEST_PASS;
}

static int ipv6_loopback_available(char *why, size_t size)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0) {
        snprintf(why, size, "no IPv6 sockets: %s", strerror(errno));
        return 0;
    }
    struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
    int ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (!ok)
        snprintf(why, size, "cannot bind ::1: %s", strerror(errno));
    close(fd);
    return ok;
}

static int ipv6_body(test_rank_t *r, hal_bootstrap_t *b)
{
    int mine = 100 + r->rank, all[2] = { 0, 0 };
    CTEST_CHECK(hal_bootstrap_allgather(b, &mine, sizeof(mine), all) == HAL_OK);
    CTEST_CHECK(all[0] == 100 && all[1] == 101);
    CTEST_CHECK(hal_bootstrap_barrier(b) == HAL_OK);
    return CTEST_PASS;
}

CTEST(bootstrap_bind, ipv6_loopback)
{
    char why[128];
    if (!ipv6_loopback_available(why, sizeof(why)))
        CTEST_SKIP("IPv6 loopback is not available: %s", why);
    static const char *values[] = { "::1", "[::1]:0", "[::1]" };
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        setenv("HAL_COMM_BIND", values[i], 1);
        hal_unique_id_t id;
        hal_status_t st = hal_bootstrap_new_id(0, TEST_TIMEOUT_MS, &id);
        if (st != HAL_OK) {
            fprintf(stderr, "%s: %s\n", values[i], hal_last_error_message());
            unsetenv("HAL_COMM_BIND");
            return CTEST_FAIL;
        }
        CTEST_CHECK(id.internal[ID_FAMILY] == 6);
        test_rank_t ranks[2];
        test_run_job(ranks, 2, &id, ipv6_body, NULL, NULL);
        unsetenv("HAL_COMM_BIND");
        for (int r = 0; r < 2; r++)
            CTEST_CHECK(ranks[r].status == HAL_OK && ranks[r].result == CTEST_PASS);
    }
    return CTEST_PASS;
}
