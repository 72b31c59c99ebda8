/* SPDX-License-Identifier: Apache-2.0 */
/* The trace layer's output: a Chrome trace JSON file written in bounded memory (see trace.h for
 * the contract and the safety rules of HAL_TRACE_FILE).
 *
 * Layout: a header that opens the object and its "traceEvents" array, the events, one per line,
 * and the trailer "\n]}\n". `end` is the offset where the trailer starts; every write of buffered
 * events goes there and is followed by a fresh trailer, so the file is valid JSON between
 * writes. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "hal/layers/trace.h"
#include "hal/src/core.h"

#define TRACE_BUFFER_BYTES (1u << 20)

static const char trailer[] = "\n]}\n";
#define TRAILER_LEN (sizeof(trailer) - 1)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int fd = -1;
static unsigned users;
static char buffer[TRACE_BUFFER_BYTES];
static size_t buffered_bytes, buffered_events;
static uint64_t end;    /* where the trailer starts */
static bool has_events; /* the array is not empty (in the file or the buffer) */
static char path[PATH_MAX];
/* The file last closed, so that reopening the same path continues it. */
static bool last_valid, last_has_events;
static dev_t last_dev;
static ino_t last_ino;
static uint64_t last_end;
static _Atomic uint64_t dropped;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int cached_pid;
static _Thread_local uint32_t cached_tid;

uint64_t hal_trace_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint32_t hal_trace_tid(void)
{
    if (!cached_tid)
        cached_tid = (uint32_t)syscall(SYS_gettid);
    return cached_tid;
}

int hal_trace_pid(void)
{
    int pid = __atomic_load_n(&cached_pid, __ATOMIC_RELAXED);
    if (!pid) {
        pid = (int)getpid();
        __atomic_store_n(&cached_pid, pid, __ATOMIC_RELAXED);
    }
    return pid;
}

/* Unix epoch minus CLOCK_MONOTONIC, in microseconds: the sample with the tightest bracket of
 * three. */
static int64_t epoch_offset_us(void)
{
    int64_t best_gap = INT64_MAX, offset = 0;
    for (int i = 0; i < 3; i++) {
        struct timespec a, r, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        clock_gettime(CLOCK_REALTIME, &r);
        clock_gettime(CLOCK_MONOTONIC, &b);
        int64_t ma = (int64_t)a.tv_sec * 1000000000 + a.tv_nsec;
        int64_t mb = (int64_t)b.tv_sec * 1000000000 + b.tv_nsec;
        int64_t rr = (int64_t)r.tv_sec * 1000000000 + r.tv_nsec;
        if (mb - ma < best_gap) {
            best_gap = mb - ma;
            offset = rr - (ma + (mb - ma) / 2);
        }
    }
    return offset / 1000;
}

static bool write_at(const void *data, size_t n, uint64_t offset)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, (off_t)offset);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
        offset += (uint64_t)w;
    }
    return true;
}

/* Writes the buffer at `end`, then the trailer. A failed write is undone (the file is cut back
 * to `end`) and its events are counted as dropped. */
static void flush_locked(void)
{
    if (fd < 0)
        return;
    if (buffered_bytes > 0) {
        if (write_at(buffer, buffered_bytes, end)) {
            end += buffered_bytes;
        } else {
            atomic_fetch_add(&dropped, buffered_events);
            if (ftruncate(fd, (off_t)end) != 0) {
                /* nothing better to do: the trailer below still makes it parse */
            }
        }
        buffered_bytes = buffered_events = 0;
    }
    if (!write_at(trailer, TRAILER_LEN, end) && ftruncate(fd, (off_t)end) != 0) {
        /* out of space: the next flush tries again */
    }
}

static void at_exit(void)
{
    pthread_mutex_lock(&lock);
    flush_locked();
    if (fd >= 0)
        close(fd);
    fd = -1;
    users = 0;
    pthread_mutex_unlock(&lock);
}

static void before_fork(void)
{
    pthread_mutex_lock(&lock);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&lock);
}

/* The child is another process: the parent's file and buffered events stay the parent's. */
static void after_fork_child(void)
{
    if (fd >= 0)
        close(fd);
    fd = -1;
    users = 0;
    buffered_bytes = buffered_events = 0;
    has_events = last_valid = false;
    path[0] = '\0';
    cached_pid = 0;
    cached_tid = 0;
    pthread_mutex_unlock(&lock);
}

static void register_handlers(void)
{
    atexit(at_exit);
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* Expands the template: "%p" is the process id, "%%" a '%'. */
static hal_status_t expand(const char *tmpl, char *out, size_t size, const char *call)
{
    size_t n = 0;
    for (const char *p = tmpl; *p; p++) {
        char piece[24];
        const char *add = piece;
        if (*p != '%') {
            piece[0] = *p;
            piece[1] = '\0';
        } else if (p[1] == 'p') {
            snprintf(piece, sizeof(piece), "%d", hal_trace_pid());
            p++;
        } else if (p[1] == '%') {
            add = "%";
            p++;
        } else {
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                             "HAL_TRACE_FILE: unknown '%%%c' (%%p is the process id, %%%% a '%%')",
                             p[1] ? p[1] : ' ');
        }
        size_t k = strlen(add);
        if (n + k >= size)
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "HAL_TRACE_FILE is too long");
        memcpy(out + n, add, k);
        n += k;
    }
    out[n] = '\0';
    if (n == 0)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "HAL_TRACE_FILE is empty");
    return HAL_OK;
}

/* Opens `where` for the trace under the rules of trace.h; *st_out receives its status. */
static hal_status_t open_checked(const char *where, struct stat *st_out, int *fd_out,
                                 const char *call)
{
    int f = open(where, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    if (f < 0) {
        int e = errno;
        if (e == ELOOP)
            return hal_error(HAL_ERROR_PERMISSION_DENIED, NULL, call,
                             "refusing to write the trace to '%s': it is a symbolic link "
                             "(HAL_TRACE_FILE)",
                             where);
        if (e == EISDIR || e == ENXIO || e == ENODEV || e == ETXTBSY)
            return hal_error(HAL_ERROR_PERMISSION_DENIED, NULL, call,
                             "refusing to write the trace to '%s': it is not a regular file (%s) "
                             "(HAL_TRACE_FILE)",
                             where, strerror(e));
        return hal_error(e == EACCES || e == EPERM || e == EROFS ? HAL_ERROR_PERMISSION_DENIED
                                                                 : HAL_ERROR_NOT_FOUND,
                         NULL, call, "cannot open the trace file '%s': %s (HAL_TRACE_FILE)", where,
                         strerror(e));
    }
    const char *why = NULL;
    struct stat st;
    if (fstat(f, &st) != 0)
        why = "cannot stat it";
    else if (!S_ISREG(st.st_mode))
        why = "it is not a regular file";
    else if (st.st_uid != geteuid())
        why = "it belongs to another user";
    else if (st.st_nlink != 1)
        why = "it has other hard links";
    if (why) {
        close(f);
        return hal_error(HAL_ERROR_PERMISSION_DENIED, NULL, call,
                         "refusing to write the trace to '%s': %s (HAL_TRACE_FILE)", where, why);
    }
    int flags = fcntl(f, F_GETFL);
    if (flags >= 0)
        fcntl(f, F_SETFL, flags & ~O_NONBLOCK);
    *st_out = st;
    *fd_out = f;
    return HAL_OK;
}

hal_status_t hal_trace_file_acquire(const char *call)
{
    pthread_once(&once, register_handlers);
    pthread_mutex_lock(&lock);
    if (users > 0) {
        users++;
        pthread_mutex_unlock(&lock);
        return HAL_OK;
    }
    const char *env = getenv("HAL_TRACE_FILE");
    char where[PATH_MAX];
    hal_status_t rc = expand(env && *env ? env : "hal-trace-%p.json", where, sizeof(where), call);
    struct stat st = { 0 };
    int f = -1;
    if (rc == HAL_OK)
        rc = open_checked(where, &st, &f, call);
    if (rc != HAL_OK) {
        pthread_mutex_unlock(&lock);
        return rc;
    }
    fd = f;
    bool same = last_valid && strcmp(where, path) == 0 && st.st_dev == last_dev &&
                st.st_ino == last_ino && (uint64_t)st.st_size == last_end + TRAILER_LEN;
    if (same) {
        end = last_end;
        has_events = last_has_events;
    } else {
        char header[512];
        int n =
            snprintf(header, sizeof(header),
                     "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"torch-hal trace "
                     "layer\",\"format_version\":1,\"clock\":\"CLOCK_MONOTONIC\",\"ts_unit\":"
                     "\"us\",\"monotonic_to_unix_epoch_us\":%lld,\"pid\":%d},\"traceEvents\":[",
                     (long long)epoch_offset_us(), hal_trace_pid());
        has_events = false;
        end = 0;
        if (ftruncate(fd, 0) != 0 || !write_at(header, (size_t)n, 0)) {
            int e = errno;
            close(fd);
            fd = -1;
            pthread_mutex_unlock(&lock);
            return hal_error(HAL_ERROR_PERMISSION_DENIED, NULL, call,
                             "cannot write the trace file '%s': %s (HAL_TRACE_FILE)", where,
                             strerror(e));
        }
        end = (uint64_t)n;
        flush_locked(); /* the trailer: valid from the start */
    }
    snprintf(path, sizeof(path), "%s", where);
    last_valid = false;
    last_dev = st.st_dev;
    last_ino = st.st_ino;
    users = 1;
    pthread_mutex_unlock(&lock);
    return HAL_OK;
}

void hal_trace_file_release(void)
{
    pthread_mutex_lock(&lock);
    flush_locked();
    if (users > 0 && --users == 0 && fd >= 0) {
        close(fd);
        fd = -1;
        last_valid = true;
        last_end = end;
        last_has_events = has_events;
    }
    pthread_mutex_unlock(&lock);
}

void hal_trace_file_emit(const char *event, size_t n)
{
    if (!event) { /* an event that could not be formatted */
        atomic_fetch_add(&dropped, 1);
        return;
    }
    pthread_mutex_lock(&lock);
    if (fd < 0 || n + 2 > TRACE_BUFFER_BYTES) {
        pthread_mutex_unlock(&lock);
        atomic_fetch_add(&dropped, 1);
        return;
    }
    if (buffered_bytes + n + 2 > TRACE_BUFFER_BYTES)
        flush_locked();
    buffer[buffered_bytes++] = has_events ? ',' : ' ';
    buffer[buffered_bytes++] = '\n';
    memcpy(buffer + buffered_bytes, event, n);
    buffered_bytes += n;
    buffered_events++;
    has_events = true;
    pthread_mutex_unlock(&lock);
}

void hal_trace_file_flush(void)
{
    pthread_mutex_lock(&lock);
    flush_locked();
    pthread_mutex_unlock(&lock);
}

uint64_t hal_trace_file_dropped(void)
{
    return atomic_load(&dropped);
}

void hal_trace_file_path(char *buf, size_t size)
{
    pthread_mutex_lock(&lock);
    snprintf(buf, size, "%s", path);
    pthread_mutex_unlock(&lock);
}
