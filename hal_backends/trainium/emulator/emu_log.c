/* SPDX-License-Identifier: Apache-2.0 */
/* libnrt emulator: diagnostics and environment parsing.
 *
 * Like libnrt, the emulator logs its errors (every failed call says why) at the level chosen
 * with NEURON_RT_LOG_LEVEL (ERROR, the default, WARN, INFO, DEBUG, TRACE) to the console
 * (stderr) or, with NEURON_RT_LOG_LOCATION=SYSLOG, to syslog. Lines start with "nrt-emu" so
 * they cannot be mistaken for the real runtime's. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "hal_backends/trainium/emulator/emu_internal.h"

static atomic_int log_level = EMU_LOG_ERROR;
static atomic_bool log_syslog = false;

static const char *const level_names[] = { "ERROR", "WARN", "INFO", "DEBUG", "TRACE" };

void emu_log_configure(void)
{
    const char *level = emu_getenv("NEURON_RT_LOG_LEVEL");
    int parsed = EMU_LOG_ERROR;
    if (level != NULL) {
        for (int i = 0; i <= EMU_LOG_TRACE; i++) {
            if (strcasecmp(level, level_names[i]) == 0)
                parsed = i;
        }
        if (strcasecmp(level, "WARNING") == 0)
            parsed = EMU_LOG_WARN;
    }
    atomic_store(&log_level, parsed);
    const char *location = emu_getenv("NEURON_RT_LOG_LOCATION");
    atomic_store(&log_syslog, location != NULL && strcasecmp(location, "SYSLOG") == 0);
}

__attribute__((constructor)) static void emu_log_load(void)
{
    emu_log_configure();
}

void emu_log(int level, const char *api, const char *fmt, ...)
{
    if (level > atomic_load(&log_level))
        return;
    char message[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    if (atomic_load(&log_syslog)) {
        static const int priorities[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG, LOG_DEBUG };
        syslog(priorities[level], "nrt-emu %s %s: %s", level_names[level], api, message);
        return;
    }
    char line[1024];
    int n = snprintf(line, sizeof(line), "nrt-emu[%ld] %-5s %s: %s\n", (long)getpid(),
                     level_names[level], api, message);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
    if (len > 0 && line[len - 1] != '\n')
        line[len - 1] = '\n';
    /* One write per line keeps lines of concurrent threads and processes whole. */
    ssize_t ignored = write(STDERR_FILENO, line, len);
    (void)ignored;
}

const char *emu_getenv(const char *name)
{
    const char *value = getenv(name);
    return value != NULL && value[0] != '\0' ? value : NULL;
}

bool emu_parse_u64_prefix(const char *s, const char **end, uint64_t *out)
{
    if (s == NULL || !isdigit((unsigned char)*s))
        return false;
    uint64_t value = 0;
    while (isdigit((unsigned char)*s)) {
        uint64_t digit = (uint64_t)(*s - '0');
        if (value > (UINT64_MAX - digit) / 10)
            return false;
        value = value * 10 + digit;
        s++;
    }
    if (end != NULL)
        *end = s;
    *out = value;
    return true;
}

bool emu_parse_u64(const char *s, uint64_t *out)
{
    const char *end;
    return emu_parse_u64_prefix(s, &end, out) && *end == '\0';
}

bool emu_parse_bytes(const char *s, uint64_t *out)
{
    const char *end;
    uint64_t value;
    if (!emu_parse_u64_prefix(s, &end, &value) || value == 0)
        return false;
    unsigned shift = 0;
    if (*end != '\0') {
        switch (toupper((unsigned char)*end)) {
        case 'K':
            shift = 10;
            break;
        case 'M':
            shift = 20;
            break;
        case 'G':
            shift = 30;
            break;
        case 'T':
            shift = 40;
            break;
        default:
            return false;
        }
        end++;
        if (*end == 'i')
            end++;
        if (*end == 'B')
            end++;
        if (*end != '\0')
            return false;
    }
    if (shift != 0 && value > (UINT64_MAX >> shift))
        return false;
    *out = value << shift;
    return true;
}

uint64_t emu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
