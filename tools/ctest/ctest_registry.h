/* SPDX-License-Identifier: Apache-2.0 */
/* The CTEST registry, read by the GoogleTest main. */
#ifndef TOOLS_CTEST_CTEST_REGISTRY_H
#define TOOLS_CTEST_CTEST_REGISTRY_H

#include <stddef.h>

#include "tools/ctest/ctest.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctest_entry {
    const char *suite;
    const char *name;
    ctest_fn fn;
    const char *file;
    int line;
} ctest_entry_t;

extern ctest_entry_t *ctest_entries;
extern size_t ctest_entry_count;

#ifdef __cplusplus
}
#endif

#endif /* TOOLS_CTEST_CTEST_REGISTRY_H */
