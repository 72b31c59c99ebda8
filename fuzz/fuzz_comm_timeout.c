/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: HAL_COMM_TIMEOUT_MS (default_timeout in hal/src/comm/comm.c, included here
 * for that static function; the rest of the HAL is linked as usual). Input: the value. The
 * variable points into a buffer of this harness, so no exec leaks environment strings. Checks,
 * besides memory safety: an accepted value is the number the text spells (decimal, 1 to
 * 2^32 - 1), and unset or empty means the default. */
#include "hal/src/comm/comm.c"

#include <ctype.h>

/* comm.c's init and destroy call the staging pipeline (comm_pipeline.c, which needs the rest of
 * the collectives' front end); this harness calls neither, so they only need to link. */
hal_status_t hal_comm_pipeline_chunk(const char *call, size_t *chunk)
{
    (void)call;
    *chunk = 0;
    return HAL_OK;
}

void hal_comm_pipeline_destroy(struct hal_comm_s *comm)
{
    (void)comm;
}

#define CHECK(cond)           \
    do {                      \
        if (!(cond))          \
            __builtin_trap(); \
    } while (0)

#define VALUE_MAX 256
static char var[32 + VALUE_MAX] = "HAL_COMM_TIMEOUT_MS=";
static char *value;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    value = var + strlen(var);
    putenv(var);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t n = size < VALUE_MAX - 1 ? size : VALUE_MAX - 1;
    memcpy(value, data, n);
    value[n] = '\0';
    uint32_t timeout = 0;
    hal_status_t st = default_timeout(&timeout, "fuzz");
    if (value[0] == '\0') {
        CHECK(st == HAL_OK && timeout == HAL_COMM_DEFAULT_TIMEOUT_MS);
        return 0;
    }
    if (st != HAL_OK) {
        CHECK(st == HAL_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(hal_last_error_message(), "HAL_COMM_TIMEOUT_MS") != NULL);
        return 0;
    }
    /* Accepted: the digits (after the blanks strtoull skips) spell the value. */
    const char *p = value;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '+')
        p++;
    CHECK(*p >= '0' && *p <= '9');
    uint64_t v = 0;
    for (; *p; p++) {
        CHECK(*p >= '0' && *p <= '9');
        v = v * 10 + (uint64_t)(*p - '0');
        CHECK(v <= UINT32_MAX);
    }
    CHECK(v >= 1 && v == timeout);
    return 0;
}
