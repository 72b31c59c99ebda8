/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: HAL_COMM_BIND (bs_parse_bind in hal/src/comm/bootstrap_socket.c, included
 * here so that its getaddrinfo can be replaced). Input: the value. Name resolution is replaced by
 * an offline stand-in: numeric addresses go to the system's getaddrinfo with AI_NUMERICHOST,
 * "localhost" resolves to 127.0.0.1 and every other name fails (so no exec waits for DNS).
 * Checks, besides memory safety: unset or empty gives 127.0.0.1 with an ephemeral port; an
 * accepted value yields an IPv4 or IPv6 address whose port is the one the text gives (0 without
 * one); a rejected one gives INVALID_ARGUMENT naming the variable. */
#include <netdb.h>

static int fuzz_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                            struct addrinfo **res);
#define getaddrinfo fuzz_getaddrinfo
#include "hal/src/comm/bootstrap_socket.c"
#undef getaddrinfo

#define CHECK(cond)           \
    do {                      \
        if (!(cond))          \
            __builtin_trap(); \
    } while (0)

static int fuzz_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                            struct addrinfo **res)
{
    struct addrinfo h = *hints;
    h.ai_flags |= AI_NUMERICHOST;
    if (!(hints->ai_flags & AI_NUMERICHOST) && strcmp(node, "localhost") == 0)
        node = "127.0.0.1";
    int rc = getaddrinfo(node, service, &h, res);
    if (rc != 0 && !(hints->ai_flags & AI_NUMERICHOST))
        return EAI_NONAME; /* a name: offline */
    return rc;
}

#define VALUE_MAX 400
static char var[32 + VALUE_MAX] = "HAL_COMM_BIND=";
static char *value;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    value = var + strlen(var);
    putenv(var);
    return 0;
}

/* The port the text gives, or 0: after "]:" when bracketed, else after the only ':'. */
static long expected_port(const char *v)
{
    const char *colon = NULL;
    if (v[0] == '[') {
        const char *close = strchr(v, ']');
        if (close && close[1] == ':')
            colon = close + 1;
    } else {
        colon = strchr(v, ':');
        if (colon && strchr(colon + 1, ':'))
            colon = NULL;
    }
    return colon ? strtol(colon + 1, NULL, 10) : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t n = size < VALUE_MAX - 1 ? size : VALUE_MAX - 1;
    memcpy(value, data, n);
    value[n] = '\0';
    bs_addr_t addr;
    memset(&addr, 0x5a, sizeof(addr));
    hal_status_t st = bs_parse_bind("fuzz", &addr);
    if (value[0] == '\0') {
        CHECK(st == HAL_OK && addr.u.sa.sa_family == AF_INET && bs_addr_is_loopback(&addr));
        CHECK(bs_addr_port(&addr) == 0);
        return 0;
    }
    if (st != HAL_OK) {
        CHECK(st == HAL_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(hal_last_error_message(), "HAL_COMM_BIND") != NULL);
        return 0;
    }
    CHECK(addr.u.sa.sa_family == AF_INET || addr.u.sa.sa_family == AF_INET6);
    CHECK(addr.len == (addr.u.sa.sa_family == AF_INET ? sizeof(addr.u.in4) : sizeof(addr.u.in6)));
    long port = expected_port(value);
    CHECK(port >= 0 && port <= 65535 && bs_addr_port(&addr) == (uint16_t)port);
    /* What the id would carry decodes to the same address. */
    uint8_t block[BS_ADDR_BYTES];
    bs_addr_t back;
    bs_addr_encode(&addr, block);
    CHECK(bs_addr_decode(block, &back) == NULL);
    CHECK(back.u.sa.sa_family == addr.u.sa.sa_family && bs_addr_port(&back) == bs_addr_port(&addr));
    char text[96];
    bs_addr_str(&addr, text, sizeof(text));
    return 0;
}
