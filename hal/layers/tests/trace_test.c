/* SPDX-License-Identifier: Apache-2.0 */
/* The trace layer (HAL_LAYERS=trace) on the cpu and template backends: the file is valid Chrome
 * trace JSON once the backend closed, with an event per call (arguments, status, duration,
 * thread) and device-side spans of enqueued work on stream tracks inside the host-side window;
 * collectives on the host engine are named; memory stays bounded over many events; reopening
 * continues the file; HAL_TRACE_FILE is expanded and refuses links, foreign and odd files. */
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>

#include "hal/layers/tests/json_mini.h"
#include "hal/layers/tests/layer_test_util.h"
#include "hal/layers/trace.h"

#define STREAM_TID_BASE ((double)HAL_TRACE_STREAM_TID_BASE)

static char trace_path[PATH_MAX];

/* Opens `backend` traced into a fresh file <tmp>/<name>. */
static hal_status_t open_traced(const char *backend, const char *layers, const char *name,
                                hal_backend_t *b)
{
    char dir[1024];
    if (!lt_temp_dir(dir, sizeof(dir)))
        return HAL_ERROR_INTERNAL;
    snprintf(trace_path, sizeof(trace_path), "%s/%s", dir, name);
    setenv("HAL_TRACE_FILE", trace_path, 1);
    hal_status_t st = lt_open(backend, layers, NULL, b);
    unsetenv("HAL_TRACE_FILE");
    return st;
}

static json_t *load_trace(const char *path)
{
    char err[256];
    json_t *doc = json_parse_file(path, err, sizeof(err));
    if (!doc)
        fprintf(stderr, "%s: not valid JSON: %s\n", path, err);
    return doc;
}

static const json_t *events_of(const json_t *doc)
{
    const json_t *ev = json_get(doc, "traceEvents");
    return ev && ev->type == JSON_ARRAY ? ev : NULL;
}

/* The first complete event named `name` on a host thread (stream == false) or a stream track. */
static const json_t *find_event(const json_t *events, const char *name, bool stream)
{
    for (const json_t *e = events->first; e; e = e->next) {
        const char *n = json_get_string(e, "name"), *ph = json_get_string(e, "ph");
        double tid = json_get_number(e, "tid", -1);
        if (n && ph && !strcmp(n, name) && !strcmp(ph, "X") && (tid >= STREAM_TID_BASE) == stream)
            return e;
    }
    return NULL;
}

static size_t count_events(const json_t *events, const char *name, bool stream)
{
    size_t n = 0;
    for (const json_t *e = events->first; e; e = e->next) {
        const char *en = json_get_string(e, "name");
        double tid = json_get_number(e, "tid", -1);
        if (en && !strcmp(en, name) && (tid >= STREAM_TID_BASE) == stream)
            n++;
    }
    return n;
}

static void count_callback(hal_status_t status, void *user)
{
    __atomic_add_fetch((int *)user, 1, __ATOMIC_RELAXED);
}

CTEST(trace, calls_and_device_spans_are_written_at_close)
{
    hal_backend_t b;
    hal_device_t d;
    hal_stream_t s, s2;
    hal_event_t e;
    void *dev = NULL, *pinned = NULL;
    enum { N = 1 << 20 };
    CHECK_STATUS(open_traced("cpu", "trace", "calls.json", &b), HAL_OK);
    CHECK_STATUS(hal_device_get(b, 0, &d), HAL_OK);
    CHECK_STATUS(hal_stream_create(d, -1, &s), HAL_OK);
    CHECK_STATUS(hal_stream_create(d, 0, &s2), HAL_OK);
    CHECK_STATUS(hal_event_create(d, 0, &e), HAL_OK);
    CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, N, 0, &dev), HAL_OK);
    CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_HOST_PINNED, N, 0, &pinned), HAL_OK);
    double before_enqueue = 0;
    {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        before_enqueue = (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
    }
    CHECK_STATUS(hal_memset_async(pinned, 7, N, s), HAL_OK);
    CHECK_STATUS(hal_memcpy_async(dev, pinned, N, s), HAL_OK);
    CHECK_STATUS(hal_event_record(e, s), HAL_OK);
    CHECK_STATUS(hal_stream_wait_event(s2, e), HAL_OK);
    int callbacks = 0;
    CHECK_STATUS(hal_stream_add_callback(s2, count_callback, &callbacks), HAL_OK);
    CHECK_STATUS(hal_stream_synchronize(s2), HAL_OK);
    double after_sync;
    {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        after_sync = (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
    }
    CTEST_CHECK(callbacks == 1);
    CHECK_STATUS(hal_event_query(e), HAL_OK);
    CHECK_STATUS(hal_mem_free(dev), HAL_OK);
    CHECK_STATUS(hal_mem_free(pinned), HAL_OK);
    CHECK_STATUS(hal_event_destroy(e), HAL_OK);
    CHECK_STATUS(hal_stream_destroy(s2), HAL_OK);
    CHECK_STATUS(hal_stream_destroy(s), HAL_OK);
    /* An error is traced with its status. */
    CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, (size_t)1 << 62, 0, &dev),
                 HAL_ERROR_OUT_OF_DEVICE_MEMORY);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);

    json_t *doc = load_trace(trace_path);
    CTEST_CHECK(doc != NULL);
    const json_t *other = json_get(doc, "otherData");
    CTEST_CHECK(other && !strcmp(json_get_string(other, "clock"), "CLOCK_MONOTONIC"));
    CTEST_CHECK(json_get_number(other, "monotonic_to_unix_epoch_us", 0) > 1e15);
    CTEST_CHECK(json_get_number(other, "pid", 0) == (double)getpid());
    const json_t *events = events_of(doc);
    CTEST_CHECK(events && events->count > 20);
    /* Every complete event has the fields Perfetto needs. */
    for (const json_t *ev = events->first; ev; ev = ev->next) {
        const char *ph = json_get_string(ev, "ph");
        CTEST_CHECK(ph && json_get_string(ev, "name"));
        CTEST_CHECK(json_get_number(ev, "pid", -1) == (double)getpid());
        CTEST_CHECK(json_get_number(ev, "tid", -1) > 0);
        if (!strcmp(ph, "X")) {
            CTEST_CHECK(json_get_number(ev, "ts", -1) > 0 && json_get_number(ev, "dur", -1) >= 0);
            CTEST_CHECK(json_get_string(json_get(ev, "args"), "status") != NULL);
        }
    }
    const char *host_calls[] = {
        "device_count",      "device_open",         "stream_create",      "event_create",
        "mem_alloc",         "memset_async",        "memcpy_async",       "event_record",
        "stream_wait_event", "stream_add_callback", "stream_synchronize", "event_query",
        "mem_free",          "event_destroy",       "stream_destroy",     "device_close"
    };
    for (size_t i = 0; i < sizeof(host_calls) / sizeof(host_calls[0]); i++) {
        if (!find_event(events, host_calls[i], false)) {
            fprintf(stderr, "no host event for %s\n", host_calls[i]);
            json_free(doc);
            return CTEST_FAIL;
        }
    }
    /* The host call: arguments, thread. */
    const json_t *copy = find_event(events, "memcpy_async", false);
    const json_t *args = json_get(copy, "args");
    CTEST_CHECK(json_get_number(args, "bytes", 0) == N);
    CTEST_CHECK(!strcmp(json_get_string(args, "dst_kind"), "device"));
    CTEST_CHECK(!strcmp(json_get_string(args, "src_kind"), "pinned"));
    CTEST_CHECK(!strcmp(json_get_string(args, "direction"), "HtoD"));
    CTEST_CHECK(!strcmp(json_get_string(args, "backend"), "cpu"));
    CTEST_CHECK(json_get_number(copy, "tid", 0) == (double)hal_trace_tid());
    double stream_id = json_get_number(args, "stream", 0);
    CTEST_CHECK(stream_id > 0);
    /* The device-side span: on the stream's track, after the enqueue, before the sync returned;
     * named, classified and described as hal_activity.h says (as profilers name their rows). */
    const json_t *span = find_event(events, "Memcpy HtoD", true);
    CTEST_CHECK(span != NULL);
    CTEST_CHECK(!strcmp(json_get_string(span, "cat"), "gpu_memcpy"));
    CTEST_CHECK(json_get_number(json_get(span, "args"), "bytes", 0) == N);
    CTEST_CHECK(!strcmp(json_get_string(json_get(span, "args"), "direction"), "HtoD"));
    CTEST_CHECK(json_get_number(span, "tid", 0) == STREAM_TID_BASE + stream_id);
    double ts = json_get_number(span, "ts", 0), dur = json_get_number(span, "dur", -1);
    CTEST_CHECK(ts >= json_get_number(copy, "ts", 0) - 1 && ts >= before_enqueue - 1);
    CTEST_CHECK(ts + dur <= after_sync + 1);
    CTEST_CHECK(dur > 0);
    const json_t *fill = find_event(events, "Memset (Device)", true);
    CTEST_CHECK(fill && !strcmp(json_get_string(fill, "cat"), "gpu_memset"));
    const json_t *record = find_event(events, "event_record", true);
    CTEST_CHECK(record && !strcmp(json_get_string(record, "cat"), "hal.stream"));
    CTEST_CHECK(find_event(events, "stream_wait_event", true));
    CTEST_CHECK(find_event(events, "callback", true));
    CTEST_CHECK(!find_event(events, "memcpy_async", true) &&
                !find_event(events, "memset_async", true));
    /* The failed allocation. */
    bool failed_alloc = false;
    for (const json_t *ev = events->first; ev; ev = ev->next) {
        const char *n = json_get_string(ev, "name");
        const char *st = json_get_string(json_get(ev, "args"), "status");
        if (n && st && !strcmp(n, "mem_alloc") && !strcmp(st, "HAL_ERROR_OUT_OF_DEVICE_MEMORY"))
            failed_alloc = true;
    }
    CTEST_CHECK(failed_alloc);
    /* The stream track is named. */
    bool named = false;
    for (const json_t *ev = events->first; ev; ev = ev->next) {
        const char *n = json_get_string(ev, "name");
        if (n && !strcmp(n, "thread_name") &&
            json_get_number(ev, "tid", 0) == STREAM_TID_BASE + stream_id &&
            strstr(json_get_string(json_get(ev, "args"), "name"), "device 0 stream"))
            named = true;
    }
    CTEST_CHECK(named);
    json_free(doc);
    return CTEST_PASS;
}

CTEST(trace, file_is_valid_json_while_open_and_continues_after_reopen)
{
    hal_backend_t b;
    hal_device_t d;
    void *p;
    CHECK_STATUS(open_traced("cpu", "validation,trace", "reopen.json", &b), HAL_OK);
    /* Valid (if not yet complete) from the moment it exists. */
    json_t *doc = load_trace(trace_path);
    CTEST_CHECK(doc != NULL && events_of(doc) != NULL);
    json_free(doc);
    CHECK_STATUS(hal_device_get(b, 1, &d), HAL_OK);
    CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 256, 0, &p), HAL_OK);
    CHECK_STATUS(hal_mem_free(p), HAL_OK);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    /* The same path again: the events of both runs. */
    setenv("HAL_TRACE_FILE", trace_path, 1);
    hal_status_t st = lt_open("cpu", "trace", NULL, &b);
    unsetenv("HAL_TRACE_FILE");
    CHECK_STATUS(st, HAL_OK);
    CHECK_STATUS(hal_device_get(b, 1, &d), HAL_OK);
    CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 256, 0, &p), HAL_OK);
    CHECK_STATUS(hal_mem_free(p), HAL_OK);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    doc = load_trace(trace_path);
    CTEST_CHECK(doc != NULL);
    size_t allocs = count_events(events_of(doc), "mem_alloc", false);
    size_t opens = count_events(events_of(doc), "device_count", false);
    json_free(doc);
    CTEST_CHECK(allocs == 2 && opens == 2);
    return CTEST_PASS;
}

CTEST(trace, memory_is_bounded_and_nothing_is_lost)
{
    hal_backend_t b;
    hal_device_t d;
    hal_stream_t s;
    void *p;
    enum { CALLS = 20000 }; /* about 10 MiB of events: the 1 MiB buffer is written out often */
    CHECK_STATUS(open_traced("cpu", "trace", "bounded.json", &b), HAL_OK);
    uint64_t dropped = hal_trace_file_dropped();
    CHECK_STATUS(hal_device_get(b, 0, &d), HAL_OK);
    CHECK_STATUS(hal_stream_create(d, 0, &s), HAL_OK);
    CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 4096, 0, &p), HAL_OK);
    for (int i = 0; i < CALLS; i++)
        CHECK_STATUS(hal_memset_async(p, i & 0xff, 4096, s), HAL_OK);
    CHECK_STATUS(hal_stream_synchronize(s), HAL_OK);
    CHECK_STATUS(hal_mem_free(p), HAL_OK);
    CHECK_STATUS(hal_stream_destroy(s), HAL_OK);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    CTEST_CHECK(hal_trace_file_dropped() == dropped);
    struct stat st;
    CTEST_CHECK(stat(trace_path, &st) == 0 && st.st_size > (4 << 20));
    CTEST_CHECK((st.st_mode & 0777) == 0600);
    json_t *doc = load_trace(trace_path);
    CTEST_CHECK(doc != NULL);
    size_t host = count_events(events_of(doc), "memset_async", false);
    size_t device = count_events(events_of(doc), "Memset (Device)", true);
    json_free(doc);
    CTEST_CHECK(host == CALLS && device == CALLS);
    return CTEST_PASS;
}

/* Host-engine collectives appear on the stream named after the operation. */
CTEST(trace, host_collectives_are_named_on_their_stream)
{
    hal_backend_t b;
    lt_job_t job;
    float *buf[2];
    CHECK_STATUS(open_traced("cpu", "trace", "coll.json", &b), HAL_OK);
    CHECK_STATUS(lt_job_open(b, 2, 20000, &job), HAL_OK);
    for (int r = 0; r < 2; r++) {
        CHECK_STATUS(
            hal_mem_alloc(job.dev[r], HAL_MEM_KIND_DEVICE, 64 * sizeof(float), 0, (void **)&buf[r]),
            HAL_OK);
        for (int i = 0; i < 64; i++)
            buf[r][i] = (float)(r + 1);
    }
    for (int r = 0; r < 2; r++)
        CHECK_STATUS(hal_allreduce(buf[r], buf[r], 64, HAL_DTYPE_F32, HAL_REDOP_SUM, job.comm[r],
                                   job.stream[r]),
                     HAL_OK);
    for (int r = 0; r < 2; r++)
        CHECK_STATUS(hal_stream_synchronize(job.stream[r]), HAL_OK);
    CTEST_CHECK(buf[0][5] == 3.0f && buf[1][63] == 3.0f);
    for (int r = 0; r < 2; r++)
        CHECK_STATUS(hal_mem_free(buf[r]), HAL_OK);
    lt_job_close(&job);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    json_t *doc = load_trace(trace_path);
    CTEST_CHECK(doc != NULL);
    CTEST_CHECK(count_events(events_of(doc), "hal_allreduce", true) == 2);
    const json_t *e = find_event(events_of(doc), "hal_allreduce", true);
    CTEST_CHECK(!strcmp(json_get_string(e, "cat"), "kernel"));
    const json_t *args = json_get(e, "args");
    CTEST_CHECK(json_get_number(args, "nranks", 0) == 2 && json_get_number(args, "count", 0) == 64);
    CTEST_CHECK(!strcmp(json_get_string(args, "status"), "HAL_OK"));
    CTEST_CHECK(!strcmp(json_get_string(args, "dtype"), "f32"));
    json_free(doc);
    return CTEST_PASS;
}

/* A backend without stream_launch_host_fn (the template built as an API 1.0 backend): the
 * layer keeps that slot empty and marks spans with callbacks. */
CTEST(trace, backend_without_host_functions)
{
    hal_backend_t b;
    hal_device_t d;
    hal_stream_t s;
    void *p, *q;
    CHECK_STATUS(open_traced("short", "trace", "template.json", &b), HAL_OK);
    CHECK_STATUS(hal_device_get(b, 0, &d), HAL_OK);
    CHECK_STATUS(hal_stream_create(d, 0, &s), HAL_OK);
    CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 4096, 0, &p), HAL_OK);
    CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 4096, 0, &q), HAL_OK);
    CHECK_STATUS(hal_memcpy_async(q, p, 4096, s), HAL_OK);
    CHECK_STATUS(hal_stream_synchronize(s), HAL_OK);
    CHECK_STATUS(hal_mem_free(p), HAL_OK);
    CHECK_STATUS(hal_mem_free(q), HAL_OK);
    CHECK_STATUS(hal_stream_destroy(s), HAL_OK);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    json_t *doc = load_trace(trace_path);
    CTEST_CHECK(doc != NULL);
    CTEST_CHECK(find_event(events_of(doc), "memcpy_async", false) != NULL);
    const json_t *span = find_event(events_of(doc), "Memcpy DtoD", true);
    CTEST_CHECK(span && !strcmp(json_get_string(span, "cat"), "gpu_memcpy"));
    CTEST_CHECK(find_event(events_of(doc), "stream_launch_host_fn", false) == NULL);
    json_free(doc);
    return CTEST_PASS;
}

CTEST(trace, file_name_expands_the_pid)
{
    char dir[1024], pattern[PATH_MAX], expect[PATH_MAX];
    hal_backend_t b;
    CTEST_CHECK(lt_temp_dir(dir, sizeof(dir)) != NULL);
    snprintf(pattern, sizeof(pattern), "%s/t-%%p-100%%%%.json", dir);
    snprintf(expect, sizeof(expect), "%s/t-%d-100%%.json", dir, (int)getpid());
    setenv("HAL_TRACE_FILE", pattern, 1);
    hal_status_t st = lt_open("cpu", "trace", NULL, &b);
    unsetenv("HAL_TRACE_FILE");
    CHECK_STATUS(st, HAL_OK);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    CTEST_CHECK(access(expect, F_OK) == 0);
    char current[PATH_MAX];
    hal_trace_file_path(current, sizeof(current));
    CTEST_CHECK(!strcmp(current, expect));
    return CTEST_PASS;
}

static hal_status_t open_with_trace_file(const char *path)
{
    hal_backend_t b;
    setenv("HAL_TRACE_FILE", path, 1);
    hal_status_t st = lt_open("cpu", "trace", NULL, &b);
    unsetenv("HAL_TRACE_FILE");
    if (st == HAL_OK)
        hal_backend_close(b);
    return st;
}

CTEST(trace, refuses_links_foreign_and_odd_files)
{
    char dir[1024], target[PATH_MAX], lnk[PATH_MAX], path[PATH_MAX];
    CTEST_CHECK(lt_temp_dir(dir, sizeof(dir)) != NULL);
    /* A symbolic link, even to a file of our own: the victim stays untouched. */
    snprintf(target, sizeof(target), "%s/victim", dir);
    snprintf(lnk, sizeof(lnk), "%s/link.json", dir);
    int fd = open(target, O_WRONLY | O_CREAT, 0600);
    CTEST_CHECK(fd >= 0 && write(fd, "keep", 4) == 4);
    close(fd);
    CTEST_CHECK(symlink(target, lnk) == 0);
    CHECK_STATUS(open_with_trace_file(lnk), HAL_ERROR_PERMISSION_DENIED);
    CHECK_MESSAGE("symbolic link");
    struct stat st;
    CTEST_CHECK(stat(target, &st) == 0 && st.st_size == 4);
    /* A second hard link. */
    snprintf(path, sizeof(path), "%s/hard.json", dir);
    CTEST_CHECK(link(target, path) == 0);
    CHECK_STATUS(open_with_trace_file(path), HAL_ERROR_PERMISSION_DENIED);
    CHECK_MESSAGE("hard links");
    CTEST_CHECK(stat(target, &st) == 0 && st.st_size == 4);
    /* Not a regular file. */
    CHECK_STATUS(open_with_trace_file(dir), HAL_ERROR_PERMISSION_DENIED);
    CHECK_MESSAGE("not a regular file");
    snprintf(path, sizeof(path), "%s/fifo.json", dir);
    CTEST_CHECK(mkfifo(path, 0600) == 0);
    CHECK_STATUS(open_with_trace_file(path), HAL_ERROR_PERMISSION_DENIED);
    CHECK_MESSAGE("not a regular file");
    /* Another user's file (only where this process may give a file away: root outside a user
     * namespace). */
    snprintf(path, sizeof(path), "%s/foreign.json", dir);
    fd = open(path, O_WRONLY | O_CREAT, 0666);
    CTEST_CHECK(fd >= 0 && write(fd, "theirs", 6) == 6);
    bool given_away = fchown(fd, 65534, 65534) == 0;
    close(fd);
    if (given_away) {
        CHECK_STATUS(open_with_trace_file(path), HAL_ERROR_PERMISSION_DENIED);
        CHECK_MESSAGE("another user");
        CTEST_CHECK(stat(path, &st) == 0 && st.st_size == 6);
    }
    /* A directory that does not exist; a bad template. */
    snprintf(path, sizeof(path), "%s/missing/t.json", dir);
    CHECK_STATUS(open_with_trace_file(path), HAL_ERROR_NOT_FOUND);
    snprintf(path, sizeof(path), "%s/t-%%d.json", dir);
    CHECK_STATUS(open_with_trace_file(path), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_MESSAGE("HAL_TRACE_FILE");
    return CTEST_PASS;
}

/* Traced calls from many threads at once (the writer is shared): every event arrives. */
typedef struct worker_arg {
    hal_device_t device;
    int calls;
    hal_status_t st;
} worker_arg_t;

static void *worker(void *arg)
{
    worker_arg_t *w = arg;
    for (int i = 0; i < w->calls && w->st == HAL_OK; i++) {
        void *p;
        w->st = hal_mem_alloc(w->device, HAL_MEM_KIND_DEVICE, 512, 0, &p);
        if (w->st == HAL_OK)
            w->st = hal_mem_free(p);
    }
    return NULL;
}

CTEST(trace, concurrent_threads)
{
    hal_backend_t b;
    enum { THREADS = 4, CALLS = 500 };
    pthread_t t[THREADS];
    worker_arg_t w[THREADS];
    CHECK_STATUS(open_traced("cpu", "trace", "threads.json", &b), HAL_OK);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker_arg_t){ .calls = CALLS };
        CHECK_STATUS(hal_device_get(b, (uint32_t)(i % 2), &w[i].device), HAL_OK);
        CTEST_CHECK(pthread_create(&t[i], NULL, worker, &w[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        CHECK_STATUS(w[i].st, HAL_OK);
    }
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    json_t *doc = load_trace(trace_path);
    CTEST_CHECK(doc != NULL);
    CTEST_CHECK(count_events(events_of(doc), "mem_alloc", false) == THREADS * CALLS);
    json_free(doc);
    return CTEST_PASS;
}
