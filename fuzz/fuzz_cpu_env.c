/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the cpu backend's environment variables (hal_backends/cpu/cpu_env.c). The
 * input holds up to four values separated by newlines, for HAL_CPU_DEVICES,
 * HAL_CPU_DEVICE_MEMORY, HAL_CPU_DEVICE_CONCURRENCY and HAL_CPU_SPIN_US, which the backend reads
 * with getenv (the variables point into buffers of this harness, so no exec leaks environment
 * strings). Checks, besides memory safety: an accepted configuration respects every documented
 * bound; cpu_parse_uint and cpu_parse_size agree with independent reference parsers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/cpu/cpu_internal.h"

#define CHECK(cond)           \
    do {                      \
        if (!(cond))          \
            __builtin_trap(); \
    } while (0)

#define VALUE_MAX 512

static const char *const names[4] = { CPU_ENV_DEVICES, CPU_ENV_MEMORY, CPU_ENV_CONCURRENCY,
                                      CPU_ENV_SPIN_US };
static char vars[4][64 + VALUE_MAX];
static char *values[4];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    for (int i = 0; i < 4; i++) {
        size_t n = (size_t)snprintf(vars[i], sizeof(vars[i]), "%s=", names[i]);
        values[i] = vars[i] + n;
        putenv(vars[i]);
    }
    return 0;
}

/* Reference: strict decimal in [min, max], by a different method (__int128). */
static int ref_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    size_t n = strlen(s);
    if (n == 0 || strspn(s, "0123456789") != n)
        return 0;
    unsigned __int128 v = 0;
    for (size_t i = 0; i < n; i++) {
        v = v * 10 + (unsigned)(s[i] - '0');
        if (v > UINT64_MAX)
            return 0;
    }
    if (v < min || v > max)
        return 0;
    *out = (uint64_t)v;
    return 1;
}

static int ref_size(const char *s, uint64_t *out)
{
    size_t digits = strspn(s, "0123456789");
    if (digits == 0 || digits > 31) /* cpu_env.c keeps at most 31 digits */
        return 0;
    char num[32];
    memcpy(num, s, digits);
    num[digits] = '\0';
    const char *suffix = s + digits;
    unsigned shift = 0;
    if (*suffix) {
        const char *units = "kKmMgGtT";
        const char *u = strchr(units, *suffix);
        if (!u)
            return 0;
        shift = 10u * (unsigned)(1 + (u - units) / 2);
        const char *rest = suffix + 1;
        if (strcmp(rest, "") != 0 && strcmp(rest, "B") != 0 && strcmp(rest, "iB") != 0)
            return 0;
    }
    uint64_t v;
    if (!ref_uint(num, 1, UINT64_MAX >> shift, &v))
        return 0;
    *out = v << shift;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Split into up to four values. */
    size_t pos = 0;
    for (int i = 0; i < 4; i++) {
        size_t n = 0;
        while (pos < size && data[pos] != '\n' && n < VALUE_MAX - 1)
            values[i][n++] = (char)data[pos++];
        values[i][n] = '\0';
        while (pos < size && data[pos] != '\n')
            pos++;
        if (pos < size)
            pos++;
    }
    for (int i = 0; i < 4; i++) {
        uint64_t a = 0, b = 0;
        int ok = cpu_parse_uint(values[i], 0, UINT64_MAX, &a) == HAL_OK;
        CHECK(ok == ref_uint(values[i], 0, UINT64_MAX, &b) && (!ok || a == b));
        ok = cpu_parse_uint(values[i], 3, 4096, &a) == HAL_OK;
        CHECK(ok == ref_uint(values[i], 3, 4096, &b) && (!ok || a == b));
        ok = cpu_parse_size(values[i], &a) == HAL_OK;
        CHECK(ok == ref_size(values[i], &b) && (!ok || a == b));
    }
    cpu_config_t config;
    char msg[CPU_ENV_MSG_MAX];
    hal_status_t st = cpu_config_load(&config, msg, sizeof(msg));
    if (st == HAL_OK) {
        CHECK(config.devices >= 1 && config.devices <= CPU_MAX_DEVICES);
        CHECK(config.capacity >= 1);
        CHECK(config.concurrency >= 1 && config.concurrency <= CPU_MAX_CONCURRENCY);
        CHECK(config.spin_us <= CPU_MAX_SPIN_US);
    } else {
        CHECK(st == HAL_ERROR_INVALID_ARGUMENT);
        CHECK(strncmp(msg, "HAL_CPU_", 8) == 0);
    }
    return 0;
}
