/* SPDX-License-Identifier: Apache-2.0 */
/* The loader: search path, names and paths, reference counts, version and ABI checks, and the
 * refusal of world-writable locations. Uses the template backend and variants of it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hal/hal.h"
#include "hal/src/slots.h"
#include "tools/ctest/ctest.h"
#include "tools/ctest/ctest_status.h"

/* Copies a file, keeping it readable and executable. */
static int copy_file(const char *from, const char *to, mode_t mode)
{
    int in = open(from, O_RDONLY);
    if (in < 0)
        return -1;
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0700);
    if (out < 0) {
        close(in);
        return -1;
    }
    char buf[65536];
    ssize_t n;
    int rc = 0;
    while ((n = read(in, buf, sizeof(buf))) > 0) {
        if (write(out, buf, (size_t)n) != n) {
            rc = -1;
            break;
        }
    }
    close(in);
    close(out);
    return rc == 0 ? chmod(to, mode) : -1;
}

static const char *template_path(char *buf, size_t size)
{
    snprintf(buf, size, "hal_backends/template/libhal_backend_template.so");
    return buf;
}

/* A fresh directory under the test's temporary area. */
static int make_dir(char *out, size_t size, mode_t mode)
{
    const char *tmp = getenv("TEST_TMPDIR");
    snprintf(out, size, "%s/loaderXXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(out))
        return -1;
    return chmod(out, mode);
}

CTEST(loader, version_reported)
{
    uint32_t v = 0;
    CHECK_STATUS(hal_get_api_version(&v), HAL_OK);
    CTEST_CHECK(HAL_VERSION_MAJOR(v) == HAL_API_VERSION_MAJOR);
    CTEST_CHECK(HAL_VERSION_MINOR(v) == HAL_API_VERSION_MINOR);
    CHECK_STATUS(hal_get_api_version(NULL), HAL_ERROR_INVALID_ARGUMENT);
    return CTEST_PASS;
}

CTEST(loader, open_by_name_and_path_share_one_instance)
{
    hal_backend_t a = NULL, b = NULL;
    char path[PATH_MAX];
    CHECK_STATUS(hal_backend_open("template", &a), HAL_OK);
    CHECK_STATUS(hal_backend_open(template_path(path, sizeof(path)), &b), HAL_OK);
    CTEST_CHECK(a == b);
    const char *name = NULL, *device_name = NULL;
    uint32_t version = 0;
    CHECK_STATUS(hal_backend_get_info(a, &name, &device_name, &version), HAL_OK);
    CTEST_CHECK(strcmp(name, "template") == 0);
    CTEST_CHECK(strcmp(device_name, "template") == 0);
    CTEST_CHECK(HAL_VERSION_MAJOR(version) == HAL_API_VERSION_MAJOR);
    CHECK_STATUS(hal_backend_get_info(a, NULL, NULL, NULL), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(hal_backend_close(a), HAL_OK);
    /* Still open: one reference left. */
    uint32_t count = 0;
    CHECK_STATUS(hal_device_count(b, &count), HAL_OK);
    CTEST_CHECK(count == 1);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    CHECK_STATUS(hal_device_count(b, &count), HAL_ERROR_INVALID_HANDLE);
    CHECK_MESSAGE("after it was destroyed");
    CHECK_STATUS(hal_backend_close(b), HAL_ERROR_INVALID_HANDLE);
    return CTEST_PASS;
}

CTEST(loader, bad_names_and_missing_backends)
{
    hal_backend_t b = NULL;
    CHECK_STATUS(hal_backend_open(NULL, &b), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(hal_backend_open("", &b), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(hal_backend_open("template", NULL), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(hal_backend_open("te mplate", &b), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_MESSAGE("invalid backend name");
    char longname[200];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    CHECK_STATUS(hal_backend_open(longname, &b), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(hal_backend_open("nosuchbackend", &b), HAL_ERROR_NOT_FOUND);
    CHECK_MESSAGE("nosuchbackend");
    CHECK_STATUS(hal_backend_open("./no/such/file.so", &b), HAL_ERROR_NOT_FOUND);
    return CTEST_PASS;
}

CTEST(loader, other_major_version_is_rejected)
{
    hal_backend_t b = NULL;
    CHECK_STATUS(hal_backend_open("badmajor", &b), HAL_ERROR_VERSION_MISMATCH);
    CHECK_MESSAGE("implements HAL API 2.0");
    return CTEST_PASS;
}

CTEST(loader, library_without_entry_symbol_is_rejected)
{
    hal_backend_t b = NULL;
    CHECK_STATUS(hal_backend_open("noentry", &b), HAL_ERROR_NOT_FOUND);
    CHECK_MESSAGE("hal_backend_get_ops");
    return CTEST_PASS;
}

CTEST(loader, a_backend_built_against_1_0_still_loads)
{
    hal_backend_t b = NULL;
    hal_device_t d = NULL;
    hal_stream_t s = NULL;
    const char *name = NULL;
    uint32_t version = 0;
    CHECK_STATUS(hal_backend_open("short", &b), HAL_OK);
    CHECK_STATUS(hal_backend_get_info(b, &name, NULL, &version), HAL_OK);
    CTEST_CHECK(version == HAL_MAKE_VERSION(1, 0));
    CHECK_STATUS(hal_device_get(b, 0, &d), HAL_OK);
    CHECK_STATUS(hal_device_get_default_stream(d, &s), HAL_OK);
    CHECK_STATUS(hal_stream_synchronize(s), HAL_OK);
    void *p = NULL;
    hal_ipc_handle_t handle;
    CHECK_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 4096, 0, &p), HAL_OK);
    CHECK_STATUS(hal_mem_ipc_get_handle(p, &handle), HAL_ERROR_UNSUPPORTED);
    CHECK_MESSAGE("HAL_DEVICE_CAP_IPC");
    CHECK_STATUS(hal_mem_free(p), HAL_OK);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    /* The 1.1 slots are beyond its table and read as NULL: the faults layer's stream failures
     * need stream_launch_host_fn, which the template has in its 1.1 table. */
    setenv("HAL_LAYERS", "faults", 1);
    setenv("HAL_FAULTS", "stream_fail:p=0.5", 1);
    hal_status_t st = hal_backend_open("short", &b);
    unsetenv("HAL_LAYERS");
    unsetenv("HAL_FAULTS");
    CHECK_STATUS(st, HAL_ERROR_UNSUPPORTED);
    CHECK_MESSAGE("stream_launch_host_fn");
    return CTEST_PASS;
}

CTEST(loader, a_table_shorter_than_its_version_is_rejected)
{
    hal_backend_t b = NULL;
    CHECK_STATUS(hal_backend_open("truncated", &b), HAL_ERROR_VERSION_MISMATCH);
    /* It claims the HAL's own minor version, whichever that is. */
    CHECK_MESSAGE("claims HAL API 1.");
    CHECK_MESSAGE(", but its ops table is 256 bytes");
    return CTEST_PASS;
}

/* Every slot, one at a time, set to NULL in an otherwise complete table: a required one is named
 * when the loader refuses the backend; an optional one is accepted unless the device advertises
 * the capability tied to it. */
CTEST(loader, every_required_slot_is_checked_and_named)
{
    hal_backend_t b = NULL;
    hal_device_t d = NULL;
    hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
    CHECK_STATUS(hal_backend_open("template", &b), HAL_OK);
    CHECK_STATUS(hal_device_get(b, 0, &d), HAL_OK);
    CHECK_STATUS(hal_device_get_properties(d, &props), HAL_OK);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    int required = 0;
#define TRY_SLOT(name, minor, is_required, flags, cap)                                           \
    do {                                                                                         \
        char expect[160];                                                                        \
        setenv("HAL_TEST_NULL_SLOT", #name, 1);                                                  \
        hal_status_t st = hal_backend_open("nullslot", &b);                                      \
        bool advertised = (uint64_t)(cap) != 0 && (props.capabilities & (uint64_t)(cap)) != 0;   \
        if (is_required) {                                                                       \
            required++;                                                                          \
            snprintf(expect, sizeof(expect), "leaves the required slot %s (since", #name);       \
        } else if (advertised) {                                                                 \
            snprintf(expect, sizeof(expect), "advertises %s but the backend leaves the slot %s", \
                     #cap, #name);                                                               \
        }                                                                                        \
        if (is_required || advertised) {                                                         \
            CHECK_STATUS(st, HAL_ERROR_VERSION_MISMATCH);                                        \
            CHECK_MESSAGE(expect);                                                               \
        } else {                                                                                 \
            CHECK_STATUS(st, HAL_OK);                                                            \
            CHECK_STATUS(hal_backend_close(b), HAL_OK);                                          \
        }                                                                                        \
    } while (0);
    HAL_SLOTS(TRY_SLOT)
#undef TRY_SLOT
    unsetenv("HAL_TEST_NULL_SLOT");
    CTEST_CHECK(required > 20);
    return CTEST_PASS;
}

/* A backend that gives no node position gets its own numbering; one that gives a position
 * outside the node's devices is refused, naming the device. */
CTEST(loader, node_position_is_defaulted_and_checked)
{
    hal_backend_t b = NULL;
    hal_device_t d = NULL;
    hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
    uint32_t count = 0;
    unsetenv("HAL_TEST_NULL_SLOT");
    CHECK_STATUS(hal_backend_open("nullslot", &b), HAL_OK);
    CHECK_STATUS(hal_device_count(b, &count), HAL_OK);
    CHECK_STATUS(hal_device_get(b, 0, &d), HAL_OK);
    CHECK_STATUS(hal_device_get_properties(d, &props), HAL_OK);
    CTEST_CHECK(props.node_index == 0 && props.node_device_count == count);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);

    setenv("HAL_TEST_NODE_POSITION", "3,8", 1);
    CHECK_STATUS(hal_backend_open("nullslot", &b), HAL_OK);
    CHECK_STATUS(hal_device_get(b, 0, &d), HAL_OK);
    CHECK_STATUS(hal_device_get_properties(d, &props), HAL_OK);
    CTEST_CHECK(props.index == 0 && props.node_index == 3 && props.node_device_count == 8);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);

    setenv("HAL_TEST_NODE_POSITION", "8,8", 1);
    CHECK_STATUS(hal_backend_open("nullslot", &b), HAL_ERROR_BACKEND_SPECIFIC);
    CHECK_MESSAGE("device 0 reports node position 8 of 8 devices");
    unsetenv("HAL_TEST_NODE_POSITION");
    return CTEST_PASS;
}

CTEST(loader, probe_reads_the_table_without_initialising)
{
    hal_backend_info_t info = HAL_BACKEND_INFO_INIT;
    CHECK_STATUS(hal_backend_probe("template", &info), HAL_OK);
    CTEST_CHECK(strcmp(info.name, "template") == 0);
    CTEST_CHECK(strcmp(info.device_type_name, "template") == 0);
    CTEST_CHECK(info.api_version == HAL_API_VERSION && info.flags == 0);
    CHECK_STATUS(hal_backend_probe("short", &info), HAL_OK);
    CTEST_CHECK(info.api_version == HAL_MAKE_VERSION(1, 0));
    /* The same checks as an open, named after the probe. */
    CHECK_STATUS(hal_backend_probe("truncated", &info), HAL_ERROR_VERSION_MISMATCH);
    CHECK_MESSAGE("hal_backend_probe: backend 'template'");
    CHECK_STATUS(hal_backend_probe("badmajor", &info), HAL_ERROR_VERSION_MISMATCH);
    CHECK_STATUS(hal_backend_probe("noentry", &info), HAL_ERROR_NOT_FOUND);
    CHECK_STATUS(hal_backend_probe("no such", &info), HAL_ERROR_INVALID_ARGUMENT);
    char dir[PATH_MAX], lib[PATH_MAX + 64], src[PATH_MAX];
    CTEST_CHECK(make_dir(dir, sizeof(dir), 0777) == 0);
    snprintf(lib, sizeof(lib), "%s/libhal_backend_template.so", dir);
    CTEST_CHECK(copy_file(template_path(src, sizeof(src)), lib, 0755) == 0);
    CHECK_STATUS(hal_backend_probe(lib, &info), HAL_ERROR_PERMISSION_DENIED);
    info.struct_size = 8;
    CHECK_STATUS(hal_backend_probe("template", &info), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_MESSAGE("struct_size");
    CHECK_STATUS(hal_backend_probe(NULL, &info), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(hal_backend_probe("template", NULL), HAL_ERROR_INVALID_ARGUMENT);
    return CTEST_PASS;
}

CTEST(loader, list_available_finds_every_backend_once)
{
    size_t count = 0;
    CHECK_STATUS(hal_backend_list_available(NULL, 0, &count), HAL_OK);
    CTEST_CHECK(count >= 4);
    hal_backend_name_t names[16];
    size_t n = 0;
    CHECK_STATUS(hal_backend_list_available(names, 16, &n), HAL_OK);
    CTEST_CHECK(n == count);
    int template_seen = 0;
    for (size_t i = 0; i < n && i < 16; i++)
        template_seen += strcmp(names[i].name, "template") == 0;
    CTEST_CHECK(template_seen == 1);
    CHECK_STATUS(hal_backend_list_available(NULL, 1, &n), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(hal_backend_list_available(names, 16, NULL), HAL_ERROR_INVALID_ARGUMENT);
    return CTEST_PASS;
}

CTEST(loader, world_writable_directory_is_refused)
{
    char dir[PATH_MAX], lib[PATH_MAX + 64], src[PATH_MAX];
    CTEST_CHECK(make_dir(dir, sizeof(dir), 0777) == 0);
    snprintf(lib, sizeof(lib), "%s/libhal_backend_template.so", dir);
    CTEST_CHECK(copy_file(template_path(src, sizeof(src)), lib, 0755) == 0);
    hal_backend_t b = NULL;
    CHECK_STATUS(hal_backend_open(lib, &b), HAL_ERROR_PERMISSION_DENIED);
    CHECK_MESSAGE("world-writable");
    /* The same file is accepted once the directory is private. */
    CTEST_CHECK(chmod(dir, 0755) == 0);
    CHECK_STATUS(hal_backend_open(lib, &b), HAL_OK);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    return CTEST_PASS;
}

CTEST(loader, world_writable_file_is_refused)
{
    char dir[PATH_MAX], lib[PATH_MAX + 64], src[PATH_MAX];
    CTEST_CHECK(make_dir(dir, sizeof(dir), 0755) == 0);
    snprintf(lib, sizeof(lib), "%s/libhal_backend_template.so", dir);
    CTEST_CHECK(copy_file(template_path(src, sizeof(src)), lib, 0777) == 0);
    hal_backend_t b = NULL;
    CHECK_STATUS(hal_backend_open(lib, &b), HAL_ERROR_PERMISSION_DENIED);
    return CTEST_PASS;
}

CTEST(loader, symlink_in_world_writable_directory_is_refused)
{
    char dir[PATH_MAX], link[PATH_MAX + 64], src[PATH_MAX], real[PATH_MAX];
    CTEST_CHECK(make_dir(dir, sizeof(dir), 0777) == 0);
    snprintf(link, sizeof(link), "%s/libhal_backend_template.so", dir);
    CTEST_CHECK(realpath(template_path(src, sizeof(src)), real) != NULL);
    CTEST_CHECK(symlink(real, link) == 0);
    hal_backend_t b = NULL;
    CHECK_STATUS(hal_backend_open(link, &b), HAL_ERROR_PERMISSION_DENIED);
    return CTEST_PASS;
}

CTEST(loader, unknown_layer_is_rejected)
{
    hal_backend_t b = NULL;
    setenv("HAL_LAYERS", "validation,bogus", 1);
    hal_status_t st = hal_backend_open("template", &b);
    unsetenv("HAL_LAYERS");
    CHECK_STATUS(st, HAL_ERROR_INVALID_ARGUMENT);
    CHECK_MESSAGE("unknown layer 'bogus'");
    return CTEST_PASS;
}

CTEST(loader, devices_of_a_closed_backend_are_stale)
{
    hal_backend_t b = NULL;
    hal_device_t d = NULL, current = NULL;
    CHECK_STATUS(hal_backend_open("template", &b), HAL_OK);
    CHECK_STATUS(hal_device_get(b, 0, &d), HAL_OK);
    CHECK_STATUS(hal_set_current_device(d), HAL_OK);
    CHECK_STATUS(hal_backend_close(b), HAL_OK);
    hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
    CHECK_STATUS(hal_device_get_properties(d, &props), HAL_ERROR_INVALID_HANDLE);
    CHECK_STATUS(hal_get_current_device(&current), HAL_OK);
    CTEST_CHECK(current == NULL);
    CHECK_STATUS(hal_set_current_device(d), HAL_ERROR_INVALID_HANDLE);
    return CTEST_PASS;
}
