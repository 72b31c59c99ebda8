/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: configuration from environment variables (documented in README.md). Parsing is
 * strict: a typo must fail backend initialisation loudly instead of silently running with a
 * default the user did not ask for. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "hal_backends/cpu/cpu_internal.h"

/* Parses a decimal integer in [min, max]: digits only, no sign, no blanks, no base prefix.
 * Returns HAL_OK or HAL_ERROR_INVALID_ARGUMENT. */
hal_status_t cpu_parse_uint(const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
    uint64_t value = 0;
    const char *p = text;
    if (p == NULL || *p == '\0')
        return HAL_ERROR_INVALID_ARGUMENT;
    for (; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return HAL_ERROR_INVALID_ARGUMENT;
        unsigned digit = (unsigned)(*p - '0');
        if (value > (UINT64_MAX - digit) / 10u)
            return HAL_ERROR_INVALID_ARGUMENT;
        value = value * 10u + digit;
    }
    if (value < min || value > max)
        return HAL_ERROR_INVALID_ARGUMENT;
    *out = value;
    return HAL_OK;
}

/* Parses a byte count: a positive decimal integer with an optional binary-unit suffix K, M, G or
 * T (either case, optionally followed by "iB" or "B"): "16G" = 16 * 2^30. Returns HAL_OK or
 * HAL_ERROR_INVALID_ARGUMENT (also on overflow or zero). */
hal_status_t cpu_parse_size(const char *text, uint64_t *out)
{
    char digits[32];
    size_t n = 0;
    unsigned shift = 0;
    if (text == NULL)
        return HAL_ERROR_INVALID_ARGUMENT;
    while (text[n] >= '0' && text[n] <= '9') {
        if (n + 1 >= sizeof(digits))
            return HAL_ERROR_INVALID_ARGUMENT;
        digits[n] = text[n];
        n++;
    }
    digits[n] = '\0';
    const char *suffix = text + n;
    switch (*suffix) {
    case '\0':
        break;
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    case 't':
    case 'T':
        shift = 40;
        break;
    default:
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    if (shift != 0) {
        const char *rest = suffix + 1;
        if (rest[0] == 'i' && rest[1] == 'B')
            rest += 2;
        else if (rest[0] == 'B')
            rest += 1;
        if (*rest != '\0')
            return HAL_ERROR_INVALID_ARGUMENT;
    }
    uint64_t value;
    if (cpu_parse_uint(digits, 1, UINT64_MAX >> shift, &value) != HAL_OK)
        return HAL_ERROR_INVALID_ARGUMENT;
    *out = value << shift;
    return HAL_OK;
}

/* An unset or empty variable means "use the default". */
static const char *env_value(const char *name)
{
    const char *value = getenv(name);
    return (value != NULL && value[0] != '\0') ? value : NULL;
}

static hal_status_t load_uint(const char *name, uint64_t min, uint64_t max, uint32_t *inout,
                              char *msg, size_t msg_size)
{
    const char *text = env_value(name);
    uint64_t value;
    if (text == NULL)
        return HAL_OK;
    if (cpu_parse_uint(text, min, max, &value) != HAL_OK) {
        snprintf(msg, msg_size,
                 "%s=\"%.64s\" is invalid: expected a decimal integer from %llu to %llu", name,
                 text, (unsigned long long)min, (unsigned long long)max);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    *inout = (uint32_t)value;
    return HAL_OK;
}

/* Fills `config` from the defaults and the HAL_CPU_* environment variables. On an invalid value
 * returns HAL_ERROR_INVALID_ARGUMENT with a message naming the variable in msg.
 * Thread safety: reads the environment; callers must not run it concurrently with setenv. */
hal_status_t cpu_config_load(cpu_config_t *config, char *msg, size_t msg_size)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    config->devices = CPU_DEFAULT_DEVICES;
    config->capacity = CPU_DEFAULT_MEMORY;
    /* Default: one slot per online CPU, but at least 2 so that two streams always overlap. */
    config->concurrency = 2u;
    if (cpus > (long)CPU_MAX_CONCURRENCY)
        config->concurrency = CPU_MAX_CONCURRENCY;
    else if (cpus > 2)
        config->concurrency = (uint32_t)cpus;
    config->spin_us = CPU_DEFAULT_SPIN_US;
    /* Default: the launching worker and one pool thread per further online CPU. */
    config->kernel_threads = cpus > 1 ? (uint32_t)(cpus - 1) : 0u;
    if (config->kernel_threads > CPU_MAX_KERNEL_THREADS)
        config->kernel_threads = CPU_MAX_KERNEL_THREADS;
    if (msg_size > 0)
        msg[0] = '\0';

    hal_status_t st =
        load_uint(CPU_ENV_DEVICES, 1, CPU_MAX_DEVICES, &config->devices, msg, msg_size);
    if (st != HAL_OK)
        return st;
    const char *text = env_value(CPU_ENV_MEMORY);
    if (text != NULL && cpu_parse_size(text, &config->capacity) != HAL_OK) {
        snprintf(msg, msg_size,
                 "%s=\"%.64s\" is invalid: expected a positive byte count with an optional "
                 "K, M, G or T suffix (binary units), e.g. 16G",
                 CPU_ENV_MEMORY, text);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    st =
        load_uint(CPU_ENV_CONCURRENCY, 1, CPU_MAX_CONCURRENCY, &config->concurrency, msg, msg_size);
    if (st != HAL_OK)
        return st;
    st = load_uint(CPU_ENV_SPIN_US, 0, CPU_MAX_SPIN_US, &config->spin_us, msg, msg_size);
    if (st != HAL_OK)
        return st;
    return load_uint(CPU_ENV_KERNEL_THREADS, 0, CPU_MAX_KERNEL_THREADS, &config->kernel_threads,
                     msg, msg_size);
}
