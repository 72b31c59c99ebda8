/* SPDX-License-Identifier: Apache-2.0 */
/* torch-hal conformance suite: the interface of the test bodies.
 *
 * A body is a plain C function `int cts_<area>_<name>(cts_ctx_t *ctx)` listed once in
 * conformance/cts_tests.inc. The harness runs it once per (backend, device) with a freshly opened
 * backend and returns CTS_PASS, CTS_FAIL or CTS_SKIP. Bodies reach the backend only through the
 * public API (hal/hal.h). Check macros report file:line, the call, the status names and
 * hal_last_error_message(); the CTS_CHECK* forms return CTS_FAIL from the body, the CTS_EXPECT*
 * forms only record the failure (use them in helper threads, which must not return early). */
#ifndef CTS_H
#define CTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/hal.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { CTS_PASS = 0, CTS_FAIL = 1, CTS_SKIP = 2 };

#define CTS_REASON_MAX 512

/* Milliseconds after which a gate opens by itself (and reports a failure), so that a broken
 * backend or test turns into a failure rather than a hang. Below the harness's test timeout. */
#define CTS_GATE_TIMEOUT_MS 10000

struct cts_resource;

typedef struct cts_ctx {
    /* Prepared by the harness before each body. */
    hal_backend_t backend; /* opened for this test; the harness holds exactly one reference */
    hal_device_t device;   /* the device under test */
    uint32_t device_index;
    uint32_t device_count;
    hal_device_properties_t props;
    const char *backend_name;     /* as given to hal_backend_open */
    const char *backend_lib_path; /* the backend's library file, NULL if unknown */
    const char *fixture_dir;      /* directory of the fixture libraries, NULL if unknown */
    const char *self_exe;         /* the harness executable (for probes), NULL if unknown */
    bool validation;              /* HAL_LAYERS enables the validation layer */
    bool run_known_failures;      /* HAL_CTS_RUN_KNOWN_FAILURES=1 */

    /* Set by the body. */
    uint64_t expected_leaks; /* objects deliberately left to hal_backend_close (validation) */
    bool known_failure;      /* a CTS_KNOWN_FAILURE_ON matched and the body ran anyway */
    char skip_reason[CTS_REASON_MAX];

    /* Private to the helpers: memory and gates released after the test's backend is closed. */
    struct cts_resource *resources;
} cts_ctx_t;

/* Every body, declared from the X-macro list. */
#define CTS_TEST(area, name) int cts_##area##_##name(cts_ctx_t *ctx);
#include "conformance/cts_tests.inc"
#undef CTS_TEST

/* Child mode of the collectives tests: runs one rank of a job started by the comm area and
 * returns the process's exit status (conformance/src/comm_rank.c). */
int cts_comm_rank_main(int argc, char **argv);

/* ---- Implemented by the harness --------------------------------------------------------------
 * Records a failure of the running test; callable from any thread. */
void cts_harness_report(const char *file, int line, const char *message);

/* ---- Checks ---------------------------------------------------------------------------------- */
void cts_failf(const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
int cts_expect_true(int cond, const char *file, int line, const char *text);
/* "<call> returned X (n), expected Y (m)" (or "Y or Z"), with the thread's last error: the one
 * wording of a status mismatch, for CTS_* and the comm area's CC_*. */
void cts_status_mismatch(char *buf, size_t size, const char *call, hal_status_t got,
                         hal_status_t expected1, hal_status_t expected2);
int cts_expect_status(hal_status_t got, hal_status_t expected, const char *file, int line,
                      const char *call);
int cts_expect_status2(hal_status_t got, hal_status_t expected1, hal_status_t expected2,
                       const char *file, int line, const char *call);

/* Expressions: 1 if the expectation holds, else 0 after recording a failure. */
#define CTS_EXPECT(cond) cts_expect_true(!!(cond), __FILE__, __LINE__, #cond)
#define CTS_EXPECT_STATUS(call, expected) \
    cts_expect_status((call), (expected), __FILE__, __LINE__, #call)
#define CTS_EXPECT_OK(call) CTS_EXPECT_STATUS(call, HAL_OK)
#define CTS_EXPECT_STATUS2(call, expected1, expected2) \
    cts_expect_status2((call), (expected1), (expected2), __FILE__, __LINE__, #call)

#define CTS_CHECK(cond)        \
    do {                       \
        if (!CTS_EXPECT(cond)) \
            return CTS_FAIL;   \
    } while (0)
#define CTS_CHECK_STATUS(call, expected)        \
    do {                                        \
        if (!CTS_EXPECT_STATUS(call, expected)) \
            return CTS_FAIL;                    \
    } while (0)
#define CTS_CHECK_OK(call) CTS_CHECK_STATUS(call, HAL_OK)
/* Either of two statuses is conforming (e.g. HAL_OK or HAL_ERROR_UNSUPPORTED). */
#define CTS_CHECK_STATUS2(call, expected1, expected2)                                         \
    do {                                                                                      \
        if (!cts_expect_status2((call), (expected1), (expected2), __FILE__, __LINE__, #call)) \
            return CTS_FAIL;                                                                  \
    } while (0)
/* A condition with a printf-style explanation. */
#define CTS_CHECKF(cond, ...)                           \
    do {                                                \
        if (!(cond)) {                                  \
            cts_failf(__FILE__, __LINE__, __VA_ARGS__); \
            return CTS_FAIL;                            \
        }                                               \
    } while (0)

/* ---- Skips ----------------------------------------------------------------------------------- */
int cts_skip(cts_ctx_t *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Returns 1 (skip) when the backend (and device name, if given) matches, unless
 * HAL_CTS_RUN_KNOWN_FAILURES=1. Arguments: backend, [device substring,] reason, NULL. */
int cts_known_failure(cts_ctx_t *ctx, const char *backend, ...);

/* Skips the body (the parameter must be named ctx). */
#define CTS_SKIP(...) return cts_skip(ctx, __VA_ARGS__)
/* Optional features skip with the capability's name. */
#define CTS_SKIP_UNLESS_CAP(ctx, cap, name)                                                    \
    do {                                                                                       \
        if (((ctx)->props.capabilities & (cap)) == 0)                                          \
            return cts_skip((ctx), "optional capability %s (%s) not supported", #cap, (name)); \
    } while (0)
/* Bodies that need a second device of the backend. */
#define CTS_SKIP_UNLESS_DEVICES(ctx, n)                                                   \
    do {                                                                                  \
        if ((ctx)->device_count < (n))                                                    \
            return cts_skip((ctx), "needs %u devices, the backend has %u", (unsigned)(n), \
                            (unsigned)(ctx)->device_count);                               \
    } while (0)
/* Marks a known failure: CTS_KNOWN_FAILURE_ON(ctx, "neuron", "reason") or
 * CTS_KNOWN_FAILURE_ON(ctx, "cuda", "A100", "reason"). Skips with "Known failure on <backend>:
 * <reason>" unless HAL_CTS_RUN_KNOWN_FAILURES=1, which runs the body and reports it if it passes.
 */
#define CTS_KNOWN_FAILURE_ON(ctx, ...)                                 \
    do {                                                               \
        if (cts_known_failure((ctx), __VA_ARGS__, (const char *)NULL)) \
            return CTS_SKIP;                                           \
    } while (0)

/* ---- Harness-side life cycle of a context (cts.c) -------------------------------------------- */
/* Opens every gate the body left closed (before the backend is closed). */
void cts_ctx_open_gates(cts_ctx_t *ctx);
/* Frees what the helpers allocated (after the backend is closed, so no callback still runs). */
void cts_ctx_release(cts_ctx_t *ctx);

/* ---- Helpers --------------------------------------------------------------------------------- */

/* Zeroed host memory owned by the test, freed after its backend is closed: use it for buffers
 * and callback data that queued work may still touch when a check fails. NULL on failure. */
void *cts_calloc(cts_ctx_t *ctx, size_t size);

/* The whole of the file at path in memory owned by the test (as cts_calloc), *size set; NULL
 * with a line on stderr naming the file if it cannot be read or is empty. */
void *cts_read_file(cts_ctx_t *ctx, const char *path, size_t *size);

double cts_now_ms(void);
void cts_sleep_ms(unsigned ms);

/* Polls hal_stream_query / hal_event_query until it stops returning HAL_NOT_READY or timeout_ms
 * passes; returns the last status. Unlike synchronize, a broken dependency cannot hang the test. */
hal_status_t cts_poll_stream(hal_stream_t stream, unsigned timeout_ms);
hal_status_t cts_poll_event(hal_event_t event, unsigned timeout_ms);

/* A gate is a host callback that blocks its stream until the test opens it. */
typedef struct cts_gate cts_gate_t;
cts_gate_t *cts_gate_new(cts_ctx_t *ctx);
hal_status_t cts_gate_enqueue(cts_gate_t *gate, hal_stream_t stream);
void cts_gate_open(cts_gate_t *gate);
/* Opens the gate from a helper thread after delay_ms (the thread is joined by cts_ctx_release). */
int cts_gate_open_later(cts_ctx_t *ctx, cts_gate_t *gate, unsigned delay_ms);
/* True once the callback started / returned. */
bool cts_gate_entered(cts_gate_t *gate);
bool cts_gate_done(cts_gate_t *gate);
/* The stream status the callback received. */
hal_status_t cts_gate_status(cts_gate_t *gate);

/* A log of host callbacks: each enqueued marker appends its value when it runs. */
typedef struct cts_log cts_log_t;
cts_log_t *cts_log_new(cts_ctx_t *ctx, size_t capacity);
hal_status_t cts_log_enqueue(cts_ctx_t *ctx, cts_log_t *log, hal_stream_t stream, int value);
size_t cts_log_count(cts_log_t *log);
int cts_log_value(cts_log_t *log, size_t i);
hal_status_t cts_log_status(cts_log_t *log, size_t i);
/* True if entry i ran on the thread that called cts_log_enqueue. */
bool cts_log_ran_on_caller(cts_log_t *log, size_t i);

/* Byte patterns that do not repeat with a short period, so offset errors show. */
void cts_pattern_fill(void *buf, size_t n, uint32_t seed);
/* Returns n if buf holds the pattern, else the index of the first wrong byte. */
size_t cts_pattern_find_mismatch(const void *buf, size_t n, uint32_t seed);
uint8_t cts_pattern_byte(size_t i, uint32_t seed);
/* Returns n if every byte is value, else the index of the first other byte. */
size_t cts_bytes_find_other(const void *buf, size_t n, uint8_t value);

/* True if the host may dereference memory of this kind on ctx's device. */
bool cts_host_accessible(const cts_ctx_t *ctx, hal_mem_kind_t kind);
/* Synchronous copies through a stream (enqueue + hal_stream_synchronize). */
hal_status_t cts_copy_sync(void *dst, const void *src, size_t n, hal_stream_t stream);
hal_status_t cts_memset_sync(void *dst, int value, size_t n, hal_stream_t stream);
/* Returns the name of a memory kind, for messages. */
const char *cts_kind_name(hal_mem_kind_t kind);

/* Another device of the backend ((index + 1) % count), or NULL with fewer than two. */
hal_device_t cts_other_device(const cts_ctx_t *ctx);

/* Closes the harness's reference so that the backend is really closed (ctx->backend and
 * ctx->device become stale), and reopens it. Bodies that close must reopen before returning
 * CTS_PASS; the harness tolerates a body that fails in between. */
hal_status_t cts_backend_close_fully(cts_ctx_t *ctx);
hal_status_t cts_backend_reopen(cts_ctx_t *ctx);

/* Opens a second, independent instance of the backend from a private copy of its library.
 * Returns HAL_OK; HAL_ERROR_UNSUPPORTED with ctx->skip_reason set when that is impossible (no
 * library path, the loader returned the already-open instance, or the instance's device 0 refuses
 * an allocation, as one process's second runtime does; the instance is then closed). */
hal_status_t cts_open_second_instance(cts_ctx_t *ctx, hal_backend_t *out);

/* A private temporary directory (mode 0700) and its removal (files in it, then itself). */
int cts_make_temp_dir(char *path, size_t size);
void cts_remove_temp_dir(const char *path);
/* Copies a file; returns 0 on success. */
int cts_copy_file(const char *from, const char *to, unsigned mode);

/* Runs the harness in a child process that only calls hal_backend_open(name_or_path) with
 * HAL_LAYERS set to `layers` (NULL: unset) and reports the status. Returns 0 and *status, or -1
 * if no child could be run (ctx->skip_reason says why). */
int cts_probe_open(cts_ctx_t *ctx, const char *layers, const char *name_or_path,
                   hal_status_t *status);

/* Leak count of the validation layer (0 if the call fails). */
uint64_t cts_leak_count(void);

/* Runs fn(arg_i) on n threads, arg_i = (char *)args + i * arg_size, and joins them all. Returns
 * 0, or -1 if a thread could not be created (the others are still joined). */
int cts_run_threads(unsigned n, void *(*fn)(void *), void *args, size_t arg_size);

#ifdef __cplusplus
}
#endif

#endif /* CTS_H */
