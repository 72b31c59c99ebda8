/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance suite: checks, skips and helpers shared by the test bodies. */
#include "cts.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---- Checks ---------------------------------------------------------------------------------- */

void cts_failf(const char *file, int line, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    cts_harness_report(file, line, buf);
}

int cts_expect_true(int cond, const char *file, int line, const char *text)
{
    if (cond)
        return 1;
    cts_failf(file, line, "expected: %s", text);
    return 0;
}

void cts_status_mismatch(char *buf, size_t size, const char *call, hal_status_t got,
                         hal_status_t expected1, hal_status_t expected2)
{
    /* The thread's last error, copied before any other HAL call can replace it. */
    const char *last = got == HAL_OK ? "(the call succeeded)" : hal_last_error_message();
    char expected[160];
    if (expected1 == expected2)
        snprintf(expected, sizeof(expected), "%s (%d)", hal_status_string(expected1),
                 (int)expected1);
    else
        snprintf(expected, sizeof(expected), "%s or %s", hal_status_string(expected1),
                 hal_status_string(expected2));
    snprintf(buf, size, "%s\n  returned %s (%d), expected %s\n  last error: \"%.1024s\"", call,
             hal_status_string(got), (int)got, expected, last ? last : "(NULL message)");
}

int cts_expect_status(hal_status_t got, hal_status_t expected, const char *file, int line,
                      const char *call)
{
    return cts_expect_status2(got, expected, expected, file, line, call);
}

int cts_expect_status2(hal_status_t got, hal_status_t expected1, hal_status_t expected2,
                       const char *file, int line, const char *call)
{
    if (got == expected1 || got == expected2)
        return 1;
    char msg[2048];
    cts_status_mismatch(msg, sizeof(msg), call, got, expected1, expected2);
    cts_failf(file, line, "%s", msg);
    return 0;
}

/* ---- Skips ----------------------------------------------------------------------------------- */

int cts_skip(cts_ctx_t *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->skip_reason, sizeof(ctx->skip_reason), fmt, ap);
    va_end(ap);
    return CTS_SKIP;
}

int cts_known_failure(cts_ctx_t *ctx, const char *backend, ...)
{
    va_list ap;
    va_start(ap, backend);
    const char *first = va_arg(ap, const char *);
    const char *second = first ? va_arg(ap, const char *) : NULL;
    va_end(ap);
    const char *device = second ? first : NULL;
    const char *reason = second ? second : first;

    /* Match the name the backend reports, so that opening it by path still matches. */
    const char *name = NULL;
    if (ctx->backend == NULL || hal_backend_get_info(ctx->backend, &name, NULL, NULL) != HAL_OK)
        name = ctx->backend_name;
    if (backend == NULL || name == NULL || strcmp(backend, name) != 0)
        return 0;
    if (device != NULL && strstr(ctx->props.name, device) == NULL)
        return 0;

    ctx->known_failure = true;
    if (device != NULL)
        snprintf(ctx->skip_reason, sizeof(ctx->skip_reason), "Known failure on %s (%s): %s",
                 backend, device, reason ? reason : "");
    else
        snprintf(ctx->skip_reason, sizeof(ctx->skip_reason), "Known failure on %s: %s", backend,
                 reason ? reason : "");
    return ctx->run_known_failures ? 0 : 1;
}

/* ---- Resources owned by a test --------------------------------------------------------------- */

typedef struct cts_resource {
    struct cts_resource *next;
    void *ptr;
    void (*release)(void *ptr);
} cts_resource_t;

static pthread_mutex_t resources_lock = PTHREAD_MUTEX_INITIALIZER;

static int resource_add(cts_ctx_t *ctx, void *ptr, void (*release)(void *))
{
    cts_resource_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -1;
    r->ptr = ptr;
    r->release = release;
    pthread_mutex_lock(&resources_lock);
    r->next = ctx->resources;
    ctx->resources = r;
    pthread_mutex_unlock(&resources_lock);
    return 0;
}

void *cts_calloc(cts_ctx_t *ctx, size_t size)
{
    void *p = calloc(1, size ? size : 1);
    if (p != NULL && resource_add(ctx, p, free) != 0) {
        free(p);
        p = NULL;
    }
    return p;
}

void *cts_read_file(cts_ctx_t *ctx, const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    void *data = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
        data = cts_calloc(ctx, (size_t)n);
        if (data && fread(data, 1, (size_t)n, f) != (size_t)n)
            data = NULL;
    }
    if (f)
        fclose(f);
    if (!data) {
        fprintf(stderr, "cannot read %s\n", path);
        return NULL;
    }
    *size = (size_t)n;
    return data;
}

/* ---- Time ------------------------------------------------------------------------------------ */

double cts_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void cts_sleep_ms(unsigned ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

hal_status_t cts_poll_stream(hal_stream_t stream, unsigned timeout_ms)
{
    double deadline = cts_now_ms() + timeout_ms;
    for (;;) {
        hal_status_t st = hal_stream_query(stream);
        if (st != HAL_NOT_READY || cts_now_ms() > deadline)
            return st;
        cts_sleep_ms(1);
    }
}

hal_status_t cts_poll_event(hal_event_t event, unsigned timeout_ms)
{
    double deadline = cts_now_ms() + timeout_ms;
    for (;;) {
        hal_status_t st = hal_event_query(event);
        if (st != HAL_NOT_READY || cts_now_ms() > deadline)
            return st;
        cts_sleep_ms(1);
    }
}

/* ---- Gates ----------------------------------------------------------------------------------- */

struct cts_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open, entered, done;
    hal_status_t status;
    int refs; /* the test, each queued callback, each opener thread */
};

static void gate_unref(cts_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    int refs = --g->refs;
    pthread_mutex_unlock(&g->mu);
    if (refs == 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
    }
}

static void gate_release(void *p)
{
    cts_gate_open(p);
    gate_unref(p);
}

static void deadline_after(struct timespec *ts, unsigned ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void gate_fn(hal_status_t status, void *user_data)
{
    cts_gate_t *g = user_data;
    bool timed_out = false;
    struct timespec deadline;
    deadline_after(&deadline, CTS_GATE_TIMEOUT_MS);
    pthread_mutex_lock(&g->mu);
    g->entered = true;
    g->status = status;
    pthread_cond_broadcast(&g->cv);
    while (!g->open) {
        if (pthread_cond_timedwait(&g->cv, &g->mu, &deadline) == ETIMEDOUT) {
            g->open = true;
            timed_out = true;
        }
    }
    g->done = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (timed_out)
        cts_harness_report(__FILE__, __LINE__,
                           "a gate callback stayed closed for CTS_GATE_TIMEOUT_MS and opened "
                           "itself: the test waited for work queued behind it (deadlock?)");
    gate_unref(g);
}

cts_gate_t *cts_gate_new(cts_ctx_t *ctx)
{
    cts_gate_t *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return NULL;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&g->mu, NULL);
    g->refs = 1;
    g->status = HAL_ERROR_INTERNAL;
    if (resource_add(ctx, g, gate_release) != 0) {
        gate_unref(g);
        return NULL;
    }
    return g;
}

hal_status_t cts_gate_enqueue(cts_gate_t *g, hal_stream_t stream)
{
    if (g == NULL)
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    pthread_mutex_lock(&g->mu);
    g->refs++;
    pthread_mutex_unlock(&g->mu);
    hal_status_t st = hal_stream_add_callback(stream, gate_fn, g);
    if (st != HAL_OK)
        gate_unref(g);
    return st;
}

void cts_gate_open(cts_gate_t *g)
{
    if (g == NULL)
        return;
    pthread_mutex_lock(&g->mu);
    g->open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

typedef struct gate_opener {
    pthread_t thread;
    cts_gate_t *gate;
    unsigned delay_ms;
} gate_opener_t;

static void *gate_opener_main(void *p)
{
    gate_opener_t *o = p;
    cts_sleep_ms(o->delay_ms);
    cts_gate_open(o->gate);
    return NULL;
}

static void gate_opener_release(void *p)
{
    gate_opener_t *o = p;
    pthread_join(o->thread, NULL);
    gate_unref(o->gate);
    free(o);
}

int cts_gate_open_later(cts_ctx_t *ctx, cts_gate_t *g, unsigned delay_ms)
{
    if (g == NULL)
        return -1;
    gate_opener_t *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return -1;
    o->gate = g;
    o->delay_ms = delay_ms;
    pthread_mutex_lock(&g->mu);
    g->refs++;
    pthread_mutex_unlock(&g->mu);
    if (pthread_create(&o->thread, NULL, gate_opener_main, o) != 0) {
        gate_unref(g);
        free(o);
        return -1;
    }
    if (resource_add(ctx, o, gate_opener_release) != 0) {
        gate_opener_release(o);
        return -1;
    }
    return 0;
}

bool cts_gate_entered(cts_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    bool v = g->entered;
    pthread_mutex_unlock(&g->mu);
    return v;
}

bool cts_gate_done(cts_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    bool v = g->done;
    pthread_mutex_unlock(&g->mu);
    return v;
}

hal_status_t cts_gate_status(cts_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    hal_status_t v = g->status;
    pthread_mutex_unlock(&g->mu);
    return v;
}

void cts_ctx_open_gates(cts_ctx_t *ctx)
{
    pthread_mutex_lock(&resources_lock);
    for (cts_resource_t *r = ctx->resources; r != NULL; r = r->next)
        if (r->release == gate_release)
            cts_gate_open(r->ptr);
    pthread_mutex_unlock(&resources_lock);
}

void cts_ctx_release(cts_ctx_t *ctx)
{
    pthread_mutex_lock(&resources_lock);
    cts_resource_t *r = ctx->resources;
    ctx->resources = NULL;
    pthread_mutex_unlock(&resources_lock);
    /* Newest first: an opener thread is joined before its gate's last reference goes. */
    while (r != NULL) {
        cts_resource_t *next = r->next;
        r->release(r->ptr);
        free(r);
        r = next;
    }
}

/* ---- Callback logs --------------------------------------------------------------------------- */

struct cts_log {
    pthread_mutex_t mu;
    size_t capacity, count;
    int *values;
    hal_status_t *statuses;
    bool *on_caller;
};

typedef struct cts_log_marker {
    cts_log_t *log;
    int value;
    pthread_t caller;
} cts_log_marker_t;

static void log_release(void *p)
{
    cts_log_t *log = p;
    pthread_mutex_destroy(&log->mu);
    free(log->values);
    free(log->statuses);
    free(log->on_caller);
    free(log);
}

cts_log_t *cts_log_new(cts_ctx_t *ctx, size_t capacity)
{
    cts_log_t *log = calloc(1, sizeof(*log));
    if (log == NULL)
        return NULL;
    pthread_mutex_init(&log->mu, NULL);
    log->capacity = capacity;
    log->values = calloc(capacity + 1, sizeof(int));
    log->statuses = calloc(capacity + 1, sizeof(hal_status_t));
    log->on_caller = calloc(capacity + 1, sizeof(bool));
    if (log->values == NULL || log->statuses == NULL || log->on_caller == NULL ||
        resource_add(ctx, log, log_release) != 0) {
        log_release(log);
        return NULL;
    }
    return log;
}

static void log_fn(hal_status_t status, void *user_data)
{
    cts_log_marker_t *m = user_data;
    cts_log_t *log = m->log;
    pthread_mutex_lock(&log->mu);
    if (log->count < log->capacity) {
        log->values[log->count] = m->value;
        log->statuses[log->count] = status;
        log->on_caller[log->count] = pthread_equal(pthread_self(), m->caller) != 0;
    }
    log->count++;
    pthread_mutex_unlock(&log->mu);
}

hal_status_t cts_log_enqueue(cts_ctx_t *ctx, cts_log_t *log, hal_stream_t stream, int value)
{
    if (log == NULL)
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    cts_log_marker_t *m = cts_calloc(ctx, sizeof(*m));
    if (m == NULL)
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    m->log = log;
    m->value = value;
    m->caller = pthread_self();
    return hal_stream_add_callback(stream, log_fn, m);
}

size_t cts_log_count(cts_log_t *log)
{
    pthread_mutex_lock(&log->mu);
    size_t n = log->count;
    pthread_mutex_unlock(&log->mu);
    return n;
}

int cts_log_value(cts_log_t *log, size_t i)
{
    pthread_mutex_lock(&log->mu);
    int v = i < log->capacity ? log->values[i] : -1;
    pthread_mutex_unlock(&log->mu);
    return v;
}

hal_status_t cts_log_status(cts_log_t *log, size_t i)
{
    pthread_mutex_lock(&log->mu);
    hal_status_t v = i < log->capacity ? log->statuses[i] : HAL_ERROR_INTERNAL;
    pthread_mutex_unlock(&log->mu);
    return v;
}

bool cts_log_ran_on_caller(cts_log_t *log, size_t i)
{
    pthread_mutex_lock(&log->mu);
    bool v = i < log->capacity ? log->on_caller[i] : false;
    pthread_mutex_unlock(&log->mu);
    return v;
}

/* ---- Patterns -------------------------------------------------------------------------------- */

/* Word k of the pattern; bytes are taken little-endian, so the pattern can be generated and
 * checked a word at a time (sanitizers instrument every access, and 64 MiB is a lot of bytes). */
static uint64_t pattern_word(uint64_t k, uint32_t seed)
{
    uint64_t x = k * 0x9e3779b97f4a7c15ull + (uint64_t)seed * 0xbf58476d1ce4e5b9ull + 1;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 29;
    return x;
}

uint8_t cts_pattern_byte(size_t i, uint32_t seed)
{
    return (uint8_t)(pattern_word(i / 8, seed) >> (8 * (i % 8)));
}

void cts_pattern_fill(void *buf, size_t n, uint32_t seed)
{
    uint8_t *p = buf;
    size_t words = n / 8;
    for (size_t k = 0; k < words; k++) {
        uint64_t w = pattern_word(k, seed);
        uint8_t b[8];
        for (int j = 0; j < 8; j++)
            b[j] = (uint8_t)(w >> (8 * j));
        memcpy(p + 8 * k, b, 8);
    }
    for (size_t i = words * 8; i < n; i++)
        p[i] = cts_pattern_byte(i, seed);
}

size_t cts_pattern_find_mismatch(const void *buf, size_t n, uint32_t seed)
{
    const uint8_t *p = buf;
    size_t words = n / 8;
    for (size_t k = 0; k < words; k++) {
        uint64_t w = pattern_word(k, seed);
        uint8_t b[8];
        for (int j = 0; j < 8; j++)
            b[j] = (uint8_t)(w >> (8 * j));
        if (memcmp(p + 8 * k, b, 8) != 0)
            for (size_t i = 8 * k;; i++)
                if (p[i] != cts_pattern_byte(i, seed))
                    return i;
    }
    for (size_t i = words * 8; i < n; i++)
        if (p[i] != cts_pattern_byte(i, seed))
            return i;
    return n;
}

size_t cts_bytes_find_other(const void *buf, size_t n, uint8_t value)
{
    const uint8_t *p = buf;
    uint8_t chunk[4096];
    memset(chunk, value, sizeof(chunk));
    size_t i = 0;
    /* Compare in chunks first: memcmp is one instrumented range, not n accesses. */
    while (i + sizeof(chunk) <= n && memcmp(p + i, chunk, sizeof(chunk)) == 0)
        i += sizeof(chunk);
    for (; i < n; i++)
        if (p[i] != value)
            return i;
    return n;
}

/* ---- Memory ---------------------------------------------------------------------------------- */

bool cts_host_accessible(const cts_ctx_t *ctx, hal_mem_kind_t kind)
{
    return kind != HAL_MEM_KIND_DEVICE || ctx->props.host_addressable != 0;
}

hal_status_t cts_copy_sync(void *dst, const void *src, size_t n, hal_stream_t stream)
{
    hal_status_t st = hal_memcpy_async(dst, src, n, stream);
    return st != HAL_OK ? st : hal_stream_synchronize(stream);
}

hal_status_t cts_memset_sync(void *dst, int value, size_t n, hal_stream_t stream)
{
    hal_status_t st = hal_memset_async(dst, value, n, stream);
    return st != HAL_OK ? st : hal_stream_synchronize(stream);
}

const char *cts_kind_name(hal_mem_kind_t kind)
{
    switch (kind) {
    case HAL_MEM_KIND_UNREGISTERED:
        return "pageable";
    case HAL_MEM_KIND_DEVICE:
        return "device";
    case HAL_MEM_KIND_HOST_PINNED:
        return "pinned";
    case HAL_MEM_KIND_SHARED:
        return "shared";
    default:
        return "unknown";
    }
}

hal_device_t cts_other_device(const cts_ctx_t *ctx)
{
    hal_device_t other = NULL;
    if (ctx->device_count < 2)
        return NULL;
    if (hal_device_get(ctx->backend, (ctx->device_index + 1) % ctx->device_count, &other) != HAL_OK)
        return NULL;
    return other;
}

/* ---- Probes ---------------------------------------------------------------------------------- */

int cts_probe_open(cts_ctx_t *ctx, const char *layers, const char *name_or_path,
                   hal_status_t *status)
{
    if (ctx->self_exe == NULL) {
        cts_skip(ctx, "the harness executable is unknown; cannot run a probe");
        return -1;
    }
    size_t n = 0;
    while (environ[n] != NULL)
        n++;
    char **envp = calloc(n + 2, sizeof(char *));
    char layers_var[512], arg[1200];
    if (envp == NULL)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "HAL_LAYERS=", 11) != 0)
            envp[k++] = environ[i];
    if (layers != NULL) {
        snprintf(layers_var, sizeof(layers_var), "HAL_LAYERS=%s", layers);
        envp[k++] = layers_var;
    }
    envp[k] = NULL;
    snprintf(arg, sizeof(arg), "--cts-probe-open=%s", name_or_path);
    char *argv[] = { (char *)ctx->self_exe, arg, NULL };
    pid_t pid;
    int rc = posix_spawn(&pid, ctx->self_exe, NULL, NULL, argv, envp);
    free(envp);
    if (rc != 0) {
        cts_skip(ctx, "cannot start a probe: %s", strerror(rc));
        return -1;
    }
    int wstatus = 0;
    double deadline = cts_now_ms() + 30000;
    for (;;) {
        pid_t w = waitpid(pid, &wstatus, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR) {
            cts_skip(ctx, "waitpid failed: %s", strerror(errno));
            return -1;
        }
        if (cts_now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &wstatus, 0);
            cts_failf(__FILE__, __LINE__, "the probe opening %s hung for 30 s", name_or_path);
            *status = HAL_ERROR_TIMEOUT;
            return 0;
        }
        cts_sleep_ms(2);
    }
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) > HAL_ERROR_BACKEND_SPECIFIC) {
        cts_failf(__FILE__, __LINE__, "the probe opening %s crashed or failed (wait status %#x)",
                  name_or_path, (unsigned)wstatus);
        *status = HAL_ERROR_INTERNAL;
        return 0;
    }
    *status = (hal_status_t)WEXITSTATUS(wstatus);
    return 0;
}

/* ---- Misc ------------------------------------------------------------------------------------ */

uint64_t cts_leak_count(void)
{
    uint64_t n = 0;
    if (hal_validation_get_leak_count(&n) != HAL_OK)
        return 0;
    return n;
}

int cts_run_threads(unsigned n, void *(*fn)(void *), void *args, size_t arg_size)
{
    pthread_t *threads = calloc(n ? n : 1, sizeof(pthread_t));
    bool *started = calloc(n ? n : 1, sizeof(bool));
    int rc = 0;
    if (threads == NULL || started == NULL) {
        free(threads);
        free(started);
        return -1;
    }
    for (unsigned i = 0; i < n; i++) {
        started[i] = pthread_create(&threads[i], NULL, fn, (char *)args + i * arg_size) == 0;
        if (!started[i])
            rc = -1;
    }
    for (unsigned i = 0; i < n; i++)
        if (started[i])
            pthread_join(threads[i], NULL);
    free(threads);
    free(started);
    return rc;
}
