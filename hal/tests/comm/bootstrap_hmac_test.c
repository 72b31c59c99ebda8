/* SPDX-License-Identifier: Apache-2.0 */
/* The bootstrap's SHA-256 and HMAC-SHA-256 against published vectors (FIPS 180-2 examples,
 * RFC 4231), and its constant-time comparison. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/tests/comm/bootstrap_test_util.h"

static void to_hex(const uint8_t *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", p[i]);
}

static int sha_is(const void *data, size_t size, const char *hex)
{
    uint8_t d[32];
    char got[65];
    hal_bootstrap_sha256(data, size, d);
    to_hex(d, 32, got);
    if (strcmp(got, hex) != 0) {
        fprintf(stderr, "sha256 of %zu bytes: got %s, want %s\n", size, got, hex);
        return 0;
    }
    return 1;
}

static int hmac_is(const void *key, size_t key_size, const void *data, size_t size, const char *hex)
{
    uint8_t mac[32];
    char got[65];
    hal_bootstrap_hmac_sha256(key, key_size, data, size, mac);
    to_hex(mac, 32, got);
    /* Test case 5 compares a truncated MAC: compare as many digits as given. */
    if (strncmp(got, hex, strlen(hex)) != 0) {
        fprintf(stderr, "hmac: got %s, want %s\n", got, hex);
        return 0;
    }
    return 1;
}

CTEST(bootstrap_hmac, sha256_fips_examples)
{
    CTEST_CHECK(sha_is("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    CTEST_CHECK(
        sha_is("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    CTEST_CHECK(sha_is(two, strlen(two),
                       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
    char *million = malloc(1000000);
    CTEST_CHECK(million != NULL);
    memset(million, 'a', 1000000);
    int ok = sha_is(million, 1000000,
                    "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);
    CTEST_CHECK(ok);
    return CTEST_PASS;
}

/* Lengths around the 56-byte padding boundary and the 64-byte block. */
CTEST(bootstrap_hmac, sha256_padding_boundaries)
{
    static const struct {
        size_t n;
        const char *hex;
    } cases[] = {
        { 55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b" },
        { 56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27" },
        { 63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055" },
        { 64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241" },
        { 65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e" },
        { 119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e" },
        { 120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5" },
    };
    uint8_t buf[128];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 7 + 3);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        CTEST_CHECK(sha_is(buf, cases[i].n, cases[i].hex));
    return CTEST_PASS;
}

CTEST(bootstrap_hmac, rfc4231_vectors)
{
    uint8_t k1[20], k3[20], d3[50], k4[25], d4[50], k5[20], k6[131];
    memset(k1, 0x0b, sizeof(k1));
    memset(k3, 0xaa, sizeof(k3));
    memset(d3, 0xdd, sizeof(d3));
    for (size_t i = 0; i < sizeof(k4); i++)
        k4[i] = (uint8_t)(i + 1);
    memset(d4, 0xcd, sizeof(d4));
    memset(k5, 0x0c, sizeof(k5));
    memset(k6, 0xaa, sizeof(k6));
    const char *d6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    const char *d7 = "This is a test using a larger than block-size key and a larger than "
                     "block-size data. The key needs to be hashed before being used by the HMAC "
                     "algorithm.";

    CTEST_CHECK(hmac_is(k1, sizeof(k1), "Hi There", 8,
                        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"));
    CTEST_CHECK(hmac_is("Jefe", 4, "what do ya want for nothing?", 28,
                        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
    CTEST_CHECK(hmac_is(k3, sizeof(k3), d3, sizeof(d3),
                        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"));
    CTEST_CHECK(hmac_is(k4, sizeof(k4), d4, sizeof(d4),
                        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"));
    CTEST_CHECK(
        hmac_is(k5, sizeof(k5), "Test With Truncation", 20, "a3b6167473100ee06e0c796c2955552b"));
    CTEST_CHECK(hmac_is(k6, sizeof(k6), d6, strlen(d6),
                        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"));
    CTEST_CHECK(hmac_is(k6, sizeof(k6), d7, strlen(d7),
                        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"));
    return CTEST_PASS;
}

CTEST(bootstrap_hmac, equal_ct)
{
    uint8_t a[32], b[32];
    for (int i = 0; i < 32; i++)
        a[i] = b[i] = (uint8_t)i;
    CTEST_CHECK(hal_bootstrap_equal_ct(a, b, 32));
    CTEST_CHECK(hal_bootstrap_equal_ct(a, b, 0));
    for (int i = 0; i < 32; i++) {
        b[i] ^= 0x80;
        CTEST_CHECK(!hal_bootstrap_equal_ct(a, b, 32));
        b[i] ^= 0x80;
    }
    return CTEST_PASS;
}
