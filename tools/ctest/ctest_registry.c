/* SPDX-License-Identifier: Apache-2.0 */
/* The registry CTEST constructors fill before main runs. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "tools/ctest/ctest_registry.h"

char ctest_skip_reason[256];

ctest_entry_t *ctest_entries;
size_t ctest_entry_count;
static size_t capacity;

void ctest_register(const char *suite, const char *name, ctest_fn fn, const char *file, int line)
{
    if (ctest_entry_count == capacity) {
        size_t grown = capacity ? capacity * 2 : 64;
        ctest_entry_t *p = realloc(ctest_entries, grown * sizeof(*p));
        if (!p)
            abort(); /* test harness only: cannot run without the registry */
        ctest_entries = p;
        capacity = grown;
    }
    ctest_entries[ctest_entry_count++] = (ctest_entry_t){ suite, name, fn, file, line };
}

static atomic_int recorded_failures;

void ctest_record_failure(void)
{
    atomic_fetch_add(&recorded_failures, 1);
}

int ctest_take_failures(void)
{
    return atomic_exchange(&recorded_failures, 0);
}

int ctest_failures_so_far(void)
{
    return atomic_load(&recorded_failures);
}

int ctest_expect(int holds, const char *file, int line, const char *text)
{
    if (holds)
        return 1;
    fprintf(stderr, "%s:%d: expectation failed: %s\n", file, line, text);
    ctest_record_failure();
    return 0;
}
