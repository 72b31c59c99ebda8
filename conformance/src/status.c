/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance: status codes, version numbers and the thread-local last-error message. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cts.h"

static const struct {
    hal_status_t status;
    int value;
    const char *name;
} statuses[] = {
    { HAL_OK, 0, "HAL_OK" },
    { HAL_NOT_READY, 1, "HAL_NOT_READY" },
    { HAL_IN_PROGRESS, 2, "HAL_IN_PROGRESS" },
    { HAL_ERROR_INVALID_ARGUMENT, 3, "HAL_ERROR_INVALID_ARGUMENT" },
    { HAL_ERROR_INVALID_HANDLE, 4, "HAL_ERROR_INVALID_HANDLE" },
    { HAL_ERROR_UNSUPPORTED, 5, "HAL_ERROR_UNSUPPORTED" },
    { HAL_ERROR_OUT_OF_DEVICE_MEMORY, 6, "HAL_ERROR_OUT_OF_DEVICE_MEMORY" },
    { HAL_ERROR_OUT_OF_HOST_MEMORY, 7, "HAL_ERROR_OUT_OF_HOST_MEMORY" },
    { HAL_ERROR_NOT_FOUND, 8, "HAL_ERROR_NOT_FOUND" },
    { HAL_ERROR_VERSION_MISMATCH, 9, "HAL_ERROR_VERSION_MISMATCH" },
    { HAL_ERROR_PERMISSION_DENIED, 10, "HAL_ERROR_PERMISSION_DENIED" },
    { HAL_ERROR_TIMEOUT, 11, "HAL_ERROR_TIMEOUT" },
    { HAL_ERROR_DEVICE_LOST, 12, "HAL_ERROR_DEVICE_LOST" },
    { HAL_ERROR_REMOTE, 13, "HAL_ERROR_REMOTE" },
    { HAL_ERROR_ABORTED, 14, "HAL_ERROR_ABORTED" },
    { HAL_ERROR_BUSY, 15, "HAL_ERROR_BUSY" },
    { HAL_ERROR_INTERNAL, 16, "HAL_ERROR_INTERNAL" },
    { HAL_ERROR_BACKEND_SPECIFIC, 17, "HAL_ERROR_BACKEND_SPECIFIC" },
};

#define N_STATUSES (sizeof(statuses) / sizeof(statuses[0]))

/* The numeric values are ABI: a backend compiled against another header must agree. */
int cts_status_values(cts_ctx_t *ctx)
{
    for (size_t i = 0; i < N_STATUSES; i++)
        CTS_CHECKF((int)statuses[i].status == statuses[i].value, "%s is %d, the ABI says %d",
                   statuses[i].name, (int)statuses[i].status, statuses[i].value);
    CTS_CHECK(sizeof(hal_status_t) == 4);
    CTS_CHECK(sizeof(hal_mem_kind_t) == 4);
    CTS_CHECK((int)HAL_MEM_KIND_UNREGISTERED == 0 && (int)HAL_MEM_KIND_DEVICE == 1 &&
              (int)HAL_MEM_KIND_HOST_PINNED == 2 && (int)HAL_MEM_KIND_SHARED == 3);
    return CTS_PASS;
}

int cts_status_strings(cts_ctx_t *ctx)
{
    for (size_t i = 0; i < N_STATUSES; i++) {
        const char *s = hal_status_string(statuses[i].status);
        CTS_CHECKF(s != NULL, "hal_status_string(%s) returned NULL", statuses[i].name);
        CTS_CHECKF(strcmp(s, statuses[i].name) == 0, "hal_status_string(%d) = \"%s\", expected %s",
                   statuses[i].value, s, statuses[i].name);
    }
    return CTS_PASS;
}

int cts_status_string_unknown(cts_ctx_t *ctx)
{
    const hal_status_t unknown[] = { (hal_status_t)18, (hal_status_t)1000, (hal_status_t)0x12345,
                                     HAL_STATUS_FORCE_U32 };
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        const char *s = hal_status_string(unknown[i]);
        CTS_CHECKF(s != NULL && strcmp(s, "HAL_STATUS_UNKNOWN") == 0,
                   "hal_status_string(%d) = \"%s\", expected HAL_STATUS_UNKNOWN", (int)unknown[i],
                   s ? s : "(NULL)");
    }
    return CTS_PASS;
}

int cts_status_version_macros(cts_ctx_t *ctx)
{
    CTS_CHECK(HAL_MAKE_VERSION(1, 2) == 0x00010002u);
    CTS_CHECK(HAL_MAKE_VERSION(3, 0x12345) == 0x00032345u); /* the minor is masked to 16 bits */
    CTS_CHECK(HAL_VERSION_MAJOR(HAL_MAKE_VERSION(7, 9)) == 7);
    CTS_CHECK(HAL_VERSION_MINOR(HAL_MAKE_VERSION(7, 9)) == 9);
    CTS_CHECK(HAL_API_VERSION == HAL_MAKE_VERSION(HAL_API_VERSION_MAJOR, HAL_API_VERSION_MINOR));
    CTS_CHECK(HAL_MAKE_VERSION(1, 0xffff) < HAL_MAKE_VERSION(2, 0));
    return CTS_PASS;
}

int cts_status_api_version(cts_ctx_t *ctx)
{
    uint32_t v = 0;
    CTS_CHECK_OK(hal_get_api_version(&v));
    CTS_CHECKF(HAL_VERSION_MAJOR(v) == HAL_API_VERSION_MAJOR, "library major %u, header major %u",
               (unsigned)HAL_VERSION_MAJOR(v), (unsigned)HAL_API_VERSION_MAJOR);
    /* Same major: the library may be a newer minor than the header, not an older one. */
    CTS_CHECKF(v >= HAL_API_VERSION, "library version %#x is older than the header's %#x",
               (unsigned)v, (unsigned)HAL_API_VERSION);
    CTS_CHECK_STATUS(hal_get_api_version(NULL), HAL_ERROR_INVALID_ARGUMENT);
    return CTS_PASS;
}

/* Copies the message at once: it is only valid until the next HAL call. */
static void copy_last_error(char *buf, size_t size)
{
    const char *m = hal_last_error_message();
    snprintf(buf, size, "%s", m ? m : "");
}

/* The message names the backend and the HAL function, for errors found by the core (argument
 * checks) and for errors the backend reports (out of memory). */
int cts_status_last_error_names_function(cts_ctx_t *ctx)
{
    const char *backend = NULL;
    char msg[1024];
    CTS_CHECK_OK(hal_backend_get_info(ctx->backend, &backend, NULL, NULL));
    char name[HAL_BACKEND_NAME_MAX];
    snprintf(name, sizeof(name), "%s", backend);

    CTS_CHECK_STATUS(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 16, 0, NULL),
                     HAL_ERROR_INVALID_ARGUMENT);
    copy_last_error(msg, sizeof(msg));
    CTS_CHECKF(strstr(msg, "hal_mem_alloc") != NULL && strstr(msg, name) != NULL,
               "message \"%s\" does not name \"%s\" and hal_mem_alloc", msg, name);

    hal_event_t ev = NULL;
    CTS_CHECK_STATUS(hal_event_create(ctx->device, 0x40000000u, &ev), HAL_ERROR_INVALID_ARGUMENT);
    copy_last_error(msg, sizeof(msg));
    CTS_CHECKF(strstr(msg, "hal_event_create") != NULL && strstr(msg, name) != NULL,
               "message \"%s\" does not name \"%s\" and hal_event_create", msg, name);

    if (ctx->props.total_memory > 0 && ctx->props.total_memory < SIZE_MAX / 2) {
        void *p = NULL;
        CTS_CHECK_STATUS(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE,
                                       (size_t)ctx->props.total_memory + 1, 0, &p),
                         HAL_ERROR_OUT_OF_DEVICE_MEMORY);
        copy_last_error(msg, sizeof(msg));
        CTS_CHECKF(strstr(msg, "hal_mem_alloc") != NULL && strstr(msg, name) != NULL,
                   "out-of-memory message \"%s\" does not name \"%s\" and hal_mem_alloc", msg,
                   name);
    }
    return CTS_PASS;
}

static void *fresh_thread_message(void *arg)
{
    char *out = arg;
    const char *m = hal_last_error_message();
    snprintf(out, 256, "%s", m ? m : "(NULL)");
    return NULL;
}

int cts_status_last_error_empty_on_new_thread(cts_ctx_t *ctx)
{
    char seen[256] = "unset";
    /* Fail on this thread first, so that a message shared between threads would show. */
    CTS_CHECK_STATUS(hal_device_count(ctx->backend, NULL), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK(cts_run_threads(1, fresh_thread_message, seen, sizeof(seen)) == 0);
    CTS_CHECKF(seen[0] == '\0', "a new thread's hal_last_error_message() is \"%s\", expected \"\"",
               seen);
    return CTS_PASS;
}

typedef struct tl_arg {
    cts_ctx_t *ctx;
    pthread_barrier_t *barrier;
    int which;
    char msg[512];
} tl_arg_t;

static void *thread_local_main(void *p)
{
    tl_arg_t *a = p;
    for (int round = 0; round < 50; round++) {
        if (a->which % 2 == 0)
            CTS_EXPECT_STATUS(hal_stream_create(a->ctx->device, 0, NULL),
                              HAL_ERROR_INVALID_ARGUMENT);
        else
            CTS_EXPECT_STATUS(hal_event_create(a->ctx->device, 0, NULL),
                              HAL_ERROR_INVALID_ARGUMENT);
        /* All threads have failed before anyone reads: a shared buffer would be overwritten. */
        pthread_barrier_wait(a->barrier);
        const char *m = hal_last_error_message();
        snprintf(a->msg, sizeof(a->msg), "%s", m ? m : "");
        const char *want = a->which % 2 == 0 ? "hal_stream_create" : "hal_event_create";
        if (!CTS_EXPECT(strstr(a->msg, want) != NULL))
            cts_failf(__FILE__, __LINE__, "thread %d saw \"%s\", expected a %s message", a->which,
                      a->msg, want);
        pthread_barrier_wait(a->barrier);
    }
    return NULL;
}

int cts_status_last_error_thread_local(cts_ctx_t *ctx)
{
    enum { N = 4 };
    tl_arg_t args[N];
    pthread_barrier_t barrier;
    char main_msg[512];
    CTS_CHECK_STATUS(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 1, 0, NULL),
                     HAL_ERROR_INVALID_ARGUMENT);
    pthread_barrier_init(&barrier, NULL, N);
    for (int i = 0; i < N; i++) {
        args[i].ctx = ctx;
        args[i].barrier = &barrier;
        args[i].which = i;
    }
    int rc = cts_run_threads(N, thread_local_main, args, sizeof(args[0]));
    pthread_barrier_destroy(&barrier);
    CTS_CHECK(rc == 0);
    copy_last_error(main_msg, sizeof(main_msg));
    CTS_CHECKF(strstr(main_msg, "hal_mem_alloc") != NULL,
               "the main thread's message changed to \"%s\" while other threads failed", main_msg);
    return CTS_PASS;
}

/* Library code never prints to stdout: output of an application (or of this harness) stays its
 * own. Runs successful and failing calls with stdout redirected to a file. */
int cts_status_no_stdout_output(cts_ctx_t *ctx)
{
    char dir[1024], path[1100];
    CTS_CHECK(cts_make_temp_dir(dir, sizeof(dir)) == 0);
    snprintf(path, sizeof(path), "%s/stdout", dir);
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (saved < 0 || fd < 0) {
        cts_remove_temp_dir(dir);
        CTS_CHECK(!"cannot redirect stdout");
    }
    dup2(fd, STDOUT_FILENO);
    close(fd);

    hal_status_t st[8];
    hal_stream_t s = NULL;
    hal_event_t e = NULL;
    void *d = NULL;
    st[0] = hal_stream_create(ctx->device, 0, &s);
    st[1] = hal_event_create(ctx->device, 0, &e);
    st[2] = hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 4096, 0, &d);
    st[3] = hal_memset_async(d, 1, 4096, s);
    st[4] = hal_memcpy_async(d, d, 4096, s);                                   /* overlap */
    st[5] = hal_mem_free((char *)d + 1);                                       /* interior */
    st[6] = hal_backend_open("cts_no_such_backend", &(hal_backend_t){ NULL }); /* not found */
    st[7] = hal_stream_synchronize(s);
    hal_event_record(e, s);
    hal_event_synchronize(e);
    hal_event_destroy(e);
    hal_stream_destroy(s);
    hal_mem_free(d);
    hal_stream_destroy(NULL);

    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    struct stat sb;
    int stat_rc = stat(path, &sb);
    cts_remove_temp_dir(dir);

    CTS_CHECK(st[0] == HAL_OK && st[1] == HAL_OK && st[2] == HAL_OK && st[3] == HAL_OK);
    CTS_CHECK(st[4] == HAL_ERROR_INVALID_ARGUMENT && st[5] == HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK(st[6] == HAL_ERROR_NOT_FOUND && st[7] == HAL_OK);
    CTS_CHECK(stat_rc == 0);
    CTS_CHECKF(sb.st_size == 0, "the HAL wrote %lld bytes to stdout", (long long)sb.st_size);
    return CTS_PASS;
}
