/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance suite: helpers for the bodies that close, reopen or duplicate the backend under
 * test, and the temporary files they need (a private copy of the backend's library). */
#include "cts.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- Backend instances ----------------------------------------------------------------------- */

hal_status_t cts_backend_close_fully(cts_ctx_t *ctx)
{
    hal_status_t st = hal_backend_close(ctx->backend);
    if (st == HAL_OK) {
        ctx->backend = NULL;
        ctx->device = NULL;
    }
    return st;
}

hal_status_t cts_backend_reopen(cts_ctx_t *ctx)
{
    hal_backend_t backend = NULL;
    hal_device_t device = NULL;
    hal_status_t st = hal_backend_open(ctx->backend_name, &backend);
    if (st != HAL_OK)
        return st;
    st = hal_device_get(backend, ctx->device_index, &device);
    if (st != HAL_OK) {
        hal_backend_close(backend);
        return st;
    }
    ctx->backend = backend;
    ctx->device = device;
    return HAL_OK;
}

hal_status_t cts_open_second_instance(cts_ctx_t *ctx, hal_backend_t *out)
{
    char dir[1024], path[1200];
    *out = NULL;
    if (ctx->backend_lib_path == NULL) {
        cts_skip(ctx, "the path of the backend's library is unknown");
        return HAL_ERROR_UNSUPPORTED;
    }
    if (cts_make_temp_dir(dir, sizeof(dir)) != 0) {
        cts_skip(ctx, "cannot create a temporary directory");
        return HAL_ERROR_UNSUPPORTED;
    }
    snprintf(path, sizeof(path), "%s/libhal_backend_cts_copy.so", dir);
    if (cts_copy_file(ctx->backend_lib_path, path, 0755) != 0) {
        cts_remove_temp_dir(dir);
        cts_skip(ctx, "cannot copy %s", ctx->backend_lib_path);
        return HAL_ERROR_UNSUPPORTED;
    }
    /* The open instance uses its device first, so that a backend that takes its devices at first
     * use (HAL_BACKEND_FLAG_EXCLUSIVE_DEVICES) has them before the copy is tried. */
    void *first = NULL;
    if (hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 64, 0, &first) == HAL_OK)
        hal_mem_free(first);
    hal_backend_t b = NULL;
    hal_status_t st = hal_backend_open(path, &b);
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", st == HAL_OK ? "" : hal_last_error_message());
    /* The loaded library stays mapped after its file is gone. */
    cts_remove_temp_dir(dir);
    if (st != HAL_OK) {
        cts_skip(ctx, "cannot open a second instance from a private copy: %s (%s)",
                 hal_status_string(st), msg);
        return HAL_ERROR_UNSUPPORTED;
    }
    if (b == ctx->backend) {
        hal_backend_close(b);
        cts_skip(ctx, "the loader returned the open instance for a copy of the library");
        return HAL_ERROR_UNSUPPORTED;
    }
    /* A backend whose devices belong to one process (HAL_BACKEND_FLAG_EXCLUSIVE_DEVICES) may
     * open a second instance and refuse it the devices at first use: try one allocation. */
    hal_device_t d = NULL;
    void *probe = NULL;
    st = hal_device_get(b, 0, &d);
    if (st == HAL_OK)
        st = hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 64, 0, &probe);
    if (st != HAL_OK) {
        snprintf(msg, sizeof(msg), "%s", hal_last_error_message());
        hal_backend_close(b);
        cts_skip(ctx, "a second instance from a private copy cannot use its devices: %s (%s)",
                 hal_status_string(st), msg);
        return HAL_ERROR_UNSUPPORTED;
    }
    hal_mem_free(probe);
    *out = b;
    return HAL_OK;
}

/* ---- Files ----------------------------------------------------------------------------------- */

int cts_make_temp_dir(char *path, size_t size)
{
    const char *base = getenv("TEST_TMPDIR");
    if (base == NULL || base[0] == '\0')
        base = getenv("TMPDIR");
    if (base == NULL || base[0] == '\0')
        base = P_tmpdir;
    if ((size_t)snprintf(path, size, "%s/cts.XXXXXX", base) >= size)
        return -1;
    return mkdtemp(path) != NULL ? 0 : -1;
}

void cts_remove_temp_dir(const char *path)
{
    DIR *d = opendir(path);
    if (d != NULL) {
        struct dirent *e;
        char file[2048];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
            unlink(file);
        }
        closedir(d);
    }
    rmdir(path);
}

int cts_copy_file(const char *from, const char *to, unsigned mode)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0) {
        close(in);
        return -1;
    }
    int rc = 0;
    char buf[65536];
    for (;;) {
        ssize_t n = read(in, buf, sizeof(buf));
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -1;
            break;
        }
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                rc = -1;
                break;
            }
            off += w;
        }
        if (rc != 0)
            break;
    }
    /* An explicit chmod, so that the umask cannot change what the test means. */
    if (fchmod(out, (mode_t)mode) != 0)
        rc = -1;
    close(in);
    if (close(out) != 0)
        rc = -1;
    return rc;
}
