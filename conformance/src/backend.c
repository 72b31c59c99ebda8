/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance: loading backends (hal_backend_open/close/list_available/get_info) and the
 * validation layer's leak count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cts.h"

/* The name the backend reports, copied (the HAL may reuse its buffers). */
static int reported_name(cts_ctx_t *ctx, char *out, size_t size)
{
    const char *name = NULL;
    if (!CTS_EXPECT_OK(hal_backend_get_info(ctx->backend, &name, NULL, NULL)) || name == NULL)
        return -1;
    snprintf(out, size, "%s", name);
    return 0;
}

int cts_backend_open_same_name_counts_references(cts_ctx_t *ctx)
{
    hal_backend_t b1 = NULL, b2 = NULL;
    uint32_t count = 0;
    CTS_CHECK_OK(hal_backend_open(ctx->backend_name, &b1));
    CTS_CHECK_OK(hal_backend_open(ctx->backend_name, &b2));
    CTS_CHECKF(b1 == ctx->backend && b2 == ctx->backend,
               "opening an open backend returned another handle (%p, %p, expected %p)", (void *)b1,
               (void *)b2, (void *)ctx->backend);
    CTS_CHECK_OK(hal_backend_close(b1));
    CTS_CHECK_OK(hal_backend_close(b2));
    /* The harness's reference keeps it open: its objects still work. */
    CTS_CHECK_OK(hal_device_count(ctx->backend, &count));
    CTS_CHECK(count == ctx->device_count);
    hal_stream_t s = NULL;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_stream_destroy(s));
    return CTS_PASS;
}

int cts_backend_close_and_reopen(cts_ctx_t *ctx)
{
    hal_backend_t old = ctx->backend;
    uint32_t count = 0;
    char name[HAL_DEVICE_NAME_MAX];
    snprintf(name, sizeof(name), "%s", ctx->props.name);
    CTS_CHECK_OK(cts_backend_close_fully(ctx));
    CTS_CHECK_STATUS(hal_device_count(old, &count), HAL_ERROR_INVALID_HANDLE);
    CTS_CHECK_OK(cts_backend_reopen(ctx));
    CTS_CHECK_OK(hal_device_count(ctx->backend, &count));
    CTS_CHECK(count == ctx->device_count);
    hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
    CTS_CHECK_OK(hal_device_get_properties(ctx->device, &props));
    CTS_CHECKF(strcmp(props.name, name) == 0, "device %u was \"%s\", after reopening \"%s\"",
               ctx->device_index, name, props.name);
    return CTS_PASS;
}

int cts_backend_open_by_path(cts_ctx_t *ctx)
{
    char name[HAL_BACKEND_NAME_MAX];
    if (ctx->backend_lib_path == NULL)
        CTS_SKIP("the path of the backend's library is unknown");
    CTS_CHECK(reported_name(ctx, name, sizeof(name)) == 0);
    hal_backend_t b = NULL;
    const char *got = NULL;
    CTS_CHECK_OK(hal_backend_open(ctx->backend_lib_path, &b));
    hal_status_t st = hal_backend_get_info(b, &got, NULL, NULL);
    int same = st == HAL_OK && got != NULL && strcmp(got, name) == 0;
    CTS_CHECK_OK(hal_backend_close(b));
    CTS_CHECK_OK(st);
    CTS_CHECKF(same, "opened by path, the backend is not \"%s\"", name);
    return CTS_PASS;
}

int cts_backend_open_invalid_arguments(cts_ctx_t *ctx)
{
    hal_backend_t b = NULL;
    char long_name[512];
    memset(long_name, 'x', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    CTS_CHECK_STATUS(hal_backend_open(NULL, &b), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_backend_open("", &b), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_backend_open(ctx->backend_name, NULL), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_backend_open(NULL, NULL), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_backend_open(long_name, &b), HAL_ERROR_INVALID_ARGUMENT);
    /* No side effect: the harness's reference is still the only one. */
    return CTS_PASS;
}

int cts_backend_open_unknown_name(cts_ctx_t *ctx)
{
    hal_backend_t b = NULL;
    char msg[1024];
    CTS_CHECK_STATUS(hal_backend_open("cts_no_such_backend", &b), HAL_ERROR_NOT_FOUND);
    snprintf(msg, sizeof(msg), "%s", hal_last_error_message());
    CTS_CHECKF(strstr(msg, "hal_backend_open") != NULL,
               "the message \"%s\" does not name hal_backend_open", msg);
    return CTS_PASS;
}

int cts_backend_open_missing_path(cts_ctx_t *ctx)
{
    hal_backend_t b = NULL;
    char dir[1024], path[1200];
    CTS_CHECK_STATUS(hal_backend_open("./cts-no-such-dir/libhal_backend_none.so", &b),
                     HAL_ERROR_NOT_FOUND);
    CTS_CHECK(cts_make_temp_dir(dir, sizeof(dir)) == 0);
    snprintf(path, sizeof(path), "%s/libhal_backend_missing.so", dir);
    hal_status_t st = hal_backend_open(path, &b);
    cts_remove_temp_dir(dir);
    CTS_CHECK_STATUS(st, HAL_ERROR_NOT_FOUND);
    return CTS_PASS;
}

/* A file that is not a shared library is "no such library". */
int cts_backend_open_not_a_library(cts_ctx_t *ctx)
{
    hal_backend_t b = NULL;
    char dir[1024], path[1200];
    CTS_CHECK(cts_make_temp_dir(dir, sizeof(dir)) == 0);
    snprintf(path, sizeof(path), "%s/libhal_backend_text.so", dir);
    FILE *f = fopen(path, "w");
    if (f != NULL) {
        fputs("this is not a shared library\n", f);
        fclose(f);
    }
    hal_status_t st = f ? hal_backend_open(path, &b) : HAL_ERROR_INTERNAL;
    cts_remove_temp_dir(dir);
    CTS_CHECK(f != NULL);
    CTS_CHECK_STATUS(st, HAL_ERROR_NOT_FOUND);
    return CTS_PASS;
}

/* Opens a fixture library (conformance/fixtures) by path and expects a status. */
static int open_fixture(cts_ctx_t *ctx, const char *file, hal_status_t expected, int *result)
{
    char path[2048];
    if (ctx->fixture_dir == NULL) {
        *result = cts_skip(ctx, "the fixture libraries were not found (HAL_CTS_FIXTURE_DIR)");
        return -1;
    }
    snprintf(path, sizeof(path), "%s/%s", ctx->fixture_dir, file);
    hal_backend_t b = NULL;
    hal_status_t st = hal_backend_open(path, &b);
    if (st == HAL_OK)
        hal_backend_close(b);
    if (!CTS_EXPECT_STATUS(st, expected)) {
        *result = CTS_FAIL;
        return -1;
    }
    return 0;
}

int cts_backend_open_no_entry_symbol(cts_ctx_t *ctx)
{
    int r;
    if (open_fixture(ctx, "libcts_noentry.so", HAL_ERROR_NOT_FOUND, &r) != 0)
        return r;
    return CTS_PASS;
}

int cts_backend_open_major_version_mismatch(cts_ctx_t *ctx)
{
    int r;
    if (open_fixture(ctx, "libcts_badmajor.so", HAL_ERROR_VERSION_MISMATCH, &r) != 0)
        return r;
    return CTS_PASS;
}

int cts_backend_open_entry_refuses_version(cts_ctx_t *ctx)
{
    int r;
    if (open_fixture(ctx, "libcts_entryfail.so", HAL_ERROR_VERSION_MISMATCH, &r) != 0)
        return r;
    return CTS_PASS;
}

/* The status of the backend's initialisation comes back, and nothing stays half open: a second
 * attempt runs the initialisation again. */
int cts_backend_open_init_failure(cts_ctx_t *ctx)
{
    int r;
    char msg[1024];
    if (open_fixture(ctx, "libcts_initfail.so", HAL_ERROR_DEVICE_LOST, &r) != 0)
        return r;
    snprintf(msg, sizeof(msg), "%s", hal_last_error_message());
    CTS_CHECKF(strstr(msg, "simulated") != NULL,
               "the backend's detail is missing from the message \"%s\"", msg);
    if (open_fixture(ctx, "libcts_initfail.so", HAL_ERROR_DEVICE_LOST, &r) != 0)
        return r;
    return CTS_PASS;
}

/* A library in a world-writable directory could be replaced by anyone: refuse it. */
int cts_backend_open_world_writable_directory(cts_ctx_t *ctx)
{
    char dir[1024], path[1200];
    if (ctx->backend_lib_path == NULL)
        CTS_SKIP("the path of the backend's library is unknown");
    CTS_CHECK(cts_make_temp_dir(dir, sizeof(dir)) == 0);
    snprintf(path, sizeof(path), "%s/libhal_backend_cts_ww.so", dir);
    int ok = chmod(dir, 0777) == 0 && cts_copy_file(ctx->backend_lib_path, path, 0755) == 0;
    hal_backend_t b = NULL;
    hal_status_t st = ok ? hal_backend_open(path, &b) : HAL_ERROR_INTERNAL;
    if (st == HAL_OK)
        hal_backend_close(b);
    cts_remove_temp_dir(dir);
    CTS_CHECK(ok);
    CTS_CHECK_STATUS(st, HAL_ERROR_PERMISSION_DENIED);
    return CTS_PASS;
}

int cts_backend_open_world_writable_file(cts_ctx_t *ctx)
{
    char dir[1024], path[1200];
    if (ctx->backend_lib_path == NULL)
        CTS_SKIP("the path of the backend's library is unknown");
    CTS_CHECK(cts_make_temp_dir(dir, sizeof(dir)) == 0);
    snprintf(path, sizeof(path), "%s/libhal_backend_cts_ww.so", dir);
    int ok = cts_copy_file(ctx->backend_lib_path, path, 0777) == 0;
    hal_backend_t b = NULL;
    hal_status_t st = ok ? hal_backend_open(path, &b) : HAL_ERROR_INTERNAL;
    if (st == HAL_OK)
        hal_backend_close(b);
    cts_remove_temp_dir(dir);
    CTS_CHECK(ok);
    CTS_CHECK_STATUS(st, HAL_ERROR_PERMISSION_DENIED);
    return CTS_PASS;
}

/* HAL_LAYERS is read when a backend is first opened, so this runs in a child process. */
int cts_backend_open_bad_layers(cts_ctx_t *ctx)
{
    hal_status_t st = HAL_ERROR_INTERNAL;
    if (cts_probe_open(ctx, "validation", ctx->backend_name, &st) != 0)
        return CTS_SKIP;
    CTS_CHECK_OK(st); /* the probe itself works */
    if (cts_probe_open(ctx, "cts_no_such_layer", ctx->backend_name, &st) != 0)
        return CTS_SKIP;
    CTS_CHECK_STATUS(st, HAL_ERROR_INVALID_ARGUMENT);
    return CTS_PASS;
}

int cts_backend_close_invalid(cts_ctx_t *ctx)
{
    hal_backend_t old = ctx->backend;
    CTS_CHECK_STATUS(hal_backend_close(NULL), HAL_ERROR_INVALID_HANDLE);
    CTS_CHECK_OK(cts_backend_close_fully(ctx));
    hal_status_t st = hal_backend_close(old); /* closing twice */
    CTS_CHECK_OK(cts_backend_reopen(ctx));
    CTS_CHECK_STATUS(st, HAL_ERROR_INVALID_HANDLE);
    return CTS_PASS;
}

/* The last close drains the streams and destroys and frees what the application left. */
int cts_backend_close_releases_leftovers(cts_ctx_t *ctx)
{
    enum { N = 65536 };
    hal_stream_t s = NULL;
    hal_event_t e = NULL;
    void *d = NULL, *pinned = NULL;
    uint8_t *src = cts_calloc(ctx, N), *dst = cts_calloc(ctx, N);
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    CTS_CHECK(src != NULL && dst != NULL);
    cts_pattern_fill(src, N, 7);
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &e));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, N, 0, &d));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_HOST_PINNED, N, 0, &pinned));
    CTS_CHECK_OK(cts_copy_sync(d, src, N, s));
    cts_gate_t *gate = cts_gate_new(ctx);
    CTS_CHECK_OK(cts_gate_enqueue(gate, s));
    CTS_CHECK_OK(hal_memcpy_async(dst, d, N, s));
    CTS_CHECK_OK(hal_event_record(e, s));
    CTS_CHECK(cts_gate_open_later(ctx, gate, 100) == 0);

    uint64_t leaks_before = cts_leak_count();
    CTS_CHECK_OK(cts_backend_close_fully(ctx));
    uint64_t leaks = cts_leak_count() - leaks_before;
    ctx->expected_leaks = ctx->validation ? 4 : 0; /* stream, event, two allocations */
    CTS_CHECKF(cts_gate_done(gate), "hal_backend_close returned before the queued work ran");
    size_t bad = cts_pattern_find_mismatch(dst, N, 7);
    CTS_CHECKF(bad == N, "the copy queued before hal_backend_close is wrong at byte %zu", bad);
    hal_mem_info_t info = HAL_MEM_INFO_INIT;
    CTS_CHECK_OK(hal_mem_get_info(d, &info));
    CTS_CHECKF(info.kind == HAL_MEM_KIND_UNREGISTERED,
               "device memory left behind is still registered after close (kind %d)",
               (int)info.kind);
    CTS_CHECK_OK(hal_mem_get_info(pinned, &info));
    CTS_CHECK(info.kind == HAL_MEM_KIND_UNREGISTERED);
    CTS_CHECKF(leaks == ctx->expected_leaks,
               "the validation layer counted %llu leaks, expected %llu", (unsigned long long)leaks,
               (unsigned long long)ctx->expected_leaks);
    CTS_CHECK_OK(cts_backend_reopen(ctx));
    return CTS_PASS;
}

int cts_backend_list_available(cts_ctx_t *ctx)
{
    size_t count = 0;
    CTS_CHECK_OK(hal_backend_list_available(NULL, 0, &count));
    CTS_CHECKF(count >= 1, "no backends listed, but \"%s\" was opened", ctx->backend_name);
    hal_backend_name_t *names = cts_calloc(ctx, (count + 4) * sizeof(*names));
    CTS_CHECK(names != NULL);
    size_t count2 = 0;
    CTS_CHECK_OK(hal_backend_list_available(names, count + 4, &count2));
    CTS_CHECK(count2 == count);
    int found = 0;
    for (size_t i = 0; i < count; i++) {
        CTS_CHECKF(memchr(names[i].name, '\0', sizeof(names[i].name)) != NULL,
                   "entry %zu is not NUL-terminated", i);
        CTS_CHECKF(names[i].name[0] != '\0', "entry %zu is empty", i);
        if (strcmp(names[i].name, ctx->backend_name) == 0)
            found = 1;
    }
    /* A backend opened by name was found in the search locations, so it is listed. */
    if (strchr(ctx->backend_name, '/') == NULL)
        CTS_CHECKF(found, "\"%s\" is missing from the list of %zu backends", ctx->backend_name,
                   count);
    return CTS_PASS;
}

int cts_backend_list_available_truncated(cts_ctx_t *ctx)
{
    size_t count = 0, count2 = 0;
    hal_backend_name_t one[2];
    memset(one, 0x7f, sizeof(one));
    CTS_CHECK_OK(hal_backend_list_available(NULL, 0, &count));
    CTS_CHECK(count >= 1);
    CTS_CHECK_OK(hal_backend_list_available(one, 1, &count2));
    CTS_CHECKF(count2 == count, "with capacity 1 the count is %zu, not the full %zu", count2,
               count);
    CTS_CHECK(memchr(one[0].name, '\0', sizeof(one[0].name)) != NULL);
    CTS_CHECK(cts_bytes_find_other(&one[1], sizeof(one[1]), 0x7f) == sizeof(one[1]));
    return CTS_PASS;
}

int cts_backend_list_available_invalid(cts_ctx_t *ctx)
{
    hal_backend_name_t names[1];
    CTS_CHECK_STATUS(hal_backend_list_available(names, 1, NULL), HAL_ERROR_INVALID_ARGUMENT);
    size_t count = 0;
    CTS_CHECK_STATUS(hal_backend_list_available(NULL, 1, &count), HAL_ERROR_INVALID_ARGUMENT);
    return CTS_PASS;
}

int cts_backend_get_info(cts_ctx_t *ctx)
{
    const char *name = NULL, *device_name = NULL;
    uint32_t version = 0;
    CTS_CHECK_OK(hal_backend_get_info(ctx->backend, &name, &device_name, &version));
    CTS_CHECK(name != NULL && name[0] != '\0' && strlen(name) < HAL_BACKEND_NAME_MAX);
    CTS_CHECK(device_name != NULL && device_name[0] != '\0');
    CTS_CHECKF(HAL_VERSION_MAJOR(version) == HAL_API_VERSION_MAJOR,
               "the backend implements major version %u, the HAL %u",
               (unsigned)HAL_VERSION_MAJOR(version), (unsigned)HAL_API_VERSION_MAJOR);
    if (strchr(ctx->backend_name, '/') == NULL)
        CTS_CHECKF(strcmp(name, ctx->backend_name) == 0, "opened as \"%s\", reports \"%s\"",
                   ctx->backend_name, name);
    /* Optional outputs may be NULL; the name stays the same for the backend's lifetime. */
    const char *again = NULL;
    CTS_CHECK_OK(hal_backend_get_info(ctx->backend, &again, NULL, NULL));
    CTS_CHECK(again != NULL && strcmp(again, name) == 0);
    return CTS_PASS;
}

int cts_backend_get_info_invalid(cts_ctx_t *ctx)
{
    const char *device_name = NULL;
    uint32_t version = 0;
    CTS_CHECK_STATUS(hal_backend_get_info(ctx->backend, NULL, &device_name, &version),
                     HAL_ERROR_INVALID_ARGUMENT);
    const char *name = NULL;
    CTS_CHECK_STATUS(hal_backend_get_info(NULL, &name, NULL, NULL), HAL_ERROR_INVALID_HANDLE);
    return CTS_PASS;
}

/* The probe reports what the open backend reports, without initialising another instance. */
int cts_backend_probe(cts_ctx_t *ctx)
{
    const char *name = NULL, *device_name = NULL;
    uint32_t version = 0;
    CTS_CHECK_OK(hal_backend_get_info(ctx->backend, &name, &device_name, &version));
    hal_backend_info_t info = HAL_BACKEND_INFO_INIT;
    CTS_CHECK_OK(hal_backend_probe(ctx->backend_name, &info));
    CTS_CHECKF(strcmp(info.name, name) == 0, "probe says \"%s\", the open backend \"%s\"",
               info.name, name);
    CTS_CHECKF(strcmp(info.device_type_name, device_name) == 0,
               "probe says device type \"%s\", the open backend \"%s\"", info.device_type_name,
               device_name);
    CTS_CHECK(info.api_version == version);
    CTS_CHECKF((info.flags & ~HAL_BACKEND_FLAG_EXCLUSIVE_DEVICES) == 0,
               "unknown backend flags 0x%x", (unsigned)info.flags);
    /* What framework users type: a lowercase identifier (hal_backends/template/README.md). */
    bool identifier = info.device_type_name[0] >= 'a' && info.device_type_name[0] <= 'z';
    for (const char *c = info.device_type_name; *c && identifier; c++)
        identifier = (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_';
    CTS_CHECKF(identifier, "device type name \"%s\" is not a lowercase identifier",
               info.device_type_name);
    return CTS_PASS;
}

int cts_backend_probe_invalid(cts_ctx_t *ctx)
{
    hal_backend_info_t info = HAL_BACKEND_INFO_INIT;
    CTS_CHECK_STATUS(hal_backend_probe(NULL, &info), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_backend_probe("", &info), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_backend_probe(ctx->backend_name, NULL), HAL_ERROR_INVALID_ARGUMENT);
    info.struct_size = offsetof(hal_backend_info_t, flags);
    CTS_CHECK_STATUS(hal_backend_probe(ctx->backend_name, &info), HAL_ERROR_INVALID_ARGUMENT);
    info.struct_size = sizeof(info);
    CTS_CHECK_STATUS(hal_backend_probe("no_such_backend_xyz", &info), HAL_ERROR_NOT_FOUND);
    CTS_CHECK_STATUS(hal_backend_probe("/nonexistent/libhal_backend_x.so", &info),
                     HAL_ERROR_NOT_FOUND);
    if (ctx->fixture_dir != NULL) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/libcts_badmajor.so", ctx->fixture_dir);
        CTS_CHECK_STATUS(hal_backend_probe(path, &info), HAL_ERROR_VERSION_MISMATCH);
        snprintf(path, sizeof(path), "%s/libcts_noentry.so", ctx->fixture_dir);
        CTS_CHECK_STATUS(hal_backend_probe(path, &info), HAL_ERROR_NOT_FOUND);
    }
    return CTS_PASS;
}

int cts_backend_validation_leak_count(cts_ctx_t *ctx)
{
    uint64_t count = 12345;
    CTS_CHECK_OK(hal_validation_get_leak_count(&count));
    if (!ctx->validation)
        CTS_CHECKF(count == 0, "the validation layer is off, yet the leak count is %llu",
                   (unsigned long long)count);
    CTS_CHECK_STATUS(hal_validation_get_leak_count(NULL), HAL_ERROR_INVALID_ARGUMENT);
    return CTS_PASS;
}
