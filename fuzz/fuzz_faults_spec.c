/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the HAL_FAULTS parser (hal/layers/faults_spec.c). Input: the variable's
 * value. Checks, besides memory safety: a spec either parses into rules that respect every
 * documented bound, or is rejected with INVALID_ARGUMENT and a message that points at an offset
 * inside the input; the seeded draw is a pure function. */
#include <stdlib.h>
#include <string.h>

#include "hal/layers/faults.h"

#define CHECK(cond)           \
    do {                      \
        if (!(cond))          \
            __builtin_trap(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    size_t len = strlen(text); /* the variable ends at the first NUL */
    hal_faults_spec_t spec;
    char msg[512];
    hal_status_t st = hal_faults_parse(text, &spec, msg, sizeof(msg));
    if (st == HAL_OK) {
        CHECK(len <= HAL_FAULTS_MAX_SPEC);
        CHECK(spec.nrules <= HAL_FAULTS_MAX_RULES);
        for (uint32_t i = 0; i < spec.nrules; i++) {
            const hal_fault_rule_t *r = &spec.rules[i];
            CHECK((unsigned)r->kind < HAL_FAULT_KINDS);
            CHECK(r->count >= 1);
            CHECK(r->device >= -1 && r->device <= 65535);
            CHECK(r->rank >= -1 && r->rank <= 4095);
            CHECK(r->rank == -1 || r->kind == HAL_FAULT_COLL_TIMEOUT ||
                  r->kind == HAL_FAULT_PEER_DEATH);
            CHECK(r->offset < len);
            CHECK(!r->always || r->threshold == UINT64_MAX);
            CHECK(r->after != UINT64_MAX);
            bool a = hal_faults_draw(&spec, i, 3, r->after + 1);
            CHECK(a == hal_faults_draw(&spec, i, 3, r->after + 1));
            CHECK(!hal_faults_draw(&spec, i, 3, r->after)); /* never before `after` */
            if (r->always)
                CHECK(a);
        }
    } else {
        CHECK(st == HAL_ERROR_INVALID_ARGUMENT);
        CHECK(strncmp(msg, "HAL_FAULTS: at offset ", 22) == 0);
        size_t offset = strtoul(msg + 22, NULL, 10);
        CHECK(offset <= len);
    }
    free(text);
    return 0;
}
