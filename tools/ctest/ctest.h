/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests written in C, run by GoogleTest. A test is
 *
 *     CTEST(suite, name) { CTEST_CHECK(1 + 1 == 2); }
 *
 * Each CTEST registers itself at load time; ctest_gtest_main.cc turns the registry into
 * GoogleTest cases, so C bodies get GoogleTest's runner, filters and XML output. */
#ifndef TOOLS_CTEST_CTEST_H
#define TOOLS_CTEST_CTEST_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { CTEST_PASS = 0, CTEST_FAIL = 1, CTEST_SKIP = 2 };

typedef int (*ctest_fn)(void);

/* Adds a test to the registry (called by CTEST's constructor). */
void ctest_register(const char *suite, const char *name, ctest_fn fn, const char *file, int line);

/* Reason of the last CTEST_SKIP, for the runner. */
extern char ctest_skip_reason[256];

/* Marks the running test failed without leaving it (the EXPECT_* macros of ctest_status.h): it
 * fails even if its body returns CTEST_PASS. Thread safety: safe. */
void ctest_record_failure(void);
/* For the runner: the failures recorded since the last call, which resets the count. */
int ctest_take_failures(void);
/* Failures the running test recorded so far (for a test that stops early once one failed). */
int ctest_failures_so_far(void);

/* An expectation on a condition: prints it and records a failure when it is false, and returns
 * whether it held; the test goes on. */
int ctest_expect(int holds, const char *file, int line, const char *text);
#define CTEST_EXPECT(cond) ctest_expect(!!(cond), __FILE__, __LINE__, #cond)

#define CTEST(suite, name)                                                         \
    static int ctest_##suite##_##name(void);                                       \
    __attribute__((constructor)) static void ctest_register_##suite##_##name(void) \
    {                                                                              \
        ctest_register(#suite, #name, ctest_##suite##_##name, __FILE__, __LINE__); \
    }                                                                              \
    static int ctest_##suite##_##name(void)

#define CTEST_CHECK(cond)                                                            \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            return CTEST_FAIL;                                                       \
        }                                                                            \
    } while (0)

#define CTEST_SKIP(...)                                                      \
    do {                                                                     \
        snprintf(ctest_skip_reason, sizeof(ctest_skip_reason), __VA_ARGS__); \
        return CTEST_SKIP;                                                   \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif /* TOOLS_CTEST_CTEST_H */
