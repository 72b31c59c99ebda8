/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: device memory shared between processes on one host (HAL_DEVICE_CAP_IPC).
 *
 * A device's memory is one memfd (cpu_arena.c). A handle names the exporting process, its
 * descriptor of that file and the file's identity, and a range in it. The importer opens
 * /proc/<pid>/fd/<fd>, which reaches the very file the exporter holds (not a copy), checks that
 * it is the same file (a descriptor number may have been reused), and maps it MAP_SHARED: both
 * processes then address the same pages. Opening another process's descriptor through /proc
 * needs the kernel's ptrace read-access check to pass: same user, exporter dumpable (or the
 * importer has CAP_SYS_PTRACE), same PID namespace, /proc mounted.
 *
 * Each exporter's arena is mapped once per importing backend, however many handles point into
 * it, and unmapped when the last of them closes: handles into one arena then cost one mapping,
 * and pointers into different allocations of one exporter keep their relative layout.
 *
 * A handle refers to arena memory, not to the allocation's lifetime: after the exporter frees
 * the allocation, the mapping still works but may show someone else's data. As with cudaIpc, the
 * application must keep the allocation alive while peers use it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hal_backends/cpu/cpu_internal.h"

/* Fills the handle for ptr->ptr: the bytes from there to the end of its allocation. */
hal_status_t cpu_mem_ipc_export(void *device_, const hal_backend_ptr_t *ptr,
                                hal_ipc_handle_t *handle)
{
    cpu_device_t *device = device_;
    cpu_arena_t *arena = device->arena;
    if (arena == NULL) {
        cpu_set_error(device->backend,
                      "device %u has no shareable memory arena (memfd_create or mmap failed when "
                      "it was opened)",
                      device->index);
        return HAL_ERROR_UNSUPPORTED;
    }
    /* Only device and shared allocations of this device have an arena block as their cookie;
     * the range check comes before the cookie is looked at. */
    const cpu_block_t *block = ptr->cookie;
    const char *p = ptr->ptr;
    bool arena_kind = ptr->kind == HAL_MEM_KIND_DEVICE || ptr->kind == HAL_MEM_KIND_SHARED;
    if (!arena_kind || block == NULL || p < arena->base || p >= arena->base + arena->size ||
        block->is_free) {
        cpu_set_error(device->backend, "%p is not memory of device %u's arena", ptr->ptr,
                      device->index);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    uint64_t offset = (uint64_t)(p - arena->base);
    uint64_t end = block->offset + block->requested;
    if (offset < block->offset || offset >= end) {
        cpu_set_error(device->backend, "%p lies outside its allocation", ptr->ptr);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    cpu_ipc_record_t rec = {
        .magic = CPU_IPC_MAGIC,
        .version = CPU_IPC_VERSION,
        .pid = (int32_t)getpid(),
        .fd = arena->fd,
        .ino = arena->ino,
        .dev = arena->dev,
        .arena_size = arena->size,
        .offset = offset,
        .bytes = end - offset,
        .device_index = device->index,
    };
    memset(handle, 0, sizeof(*handle));
    memcpy(handle->bytes, &rec, sizeof(rec));
    return HAL_OK;
}

/* Checks what can be checked without the exporter: format, version, sane ranges, origin. */
static hal_status_t check_record(cpu_backend_t *backend, const cpu_ipc_record_t *rec)
{
    if (rec->magic != CPU_IPC_MAGIC) {
        cpu_set_error(backend,
                      "not an IPC handle of the cpu backend (magic 0x%08x, expected "
                      "0x%08x)",
                      rec->magic, CPU_IPC_MAGIC);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    if (rec->version != CPU_IPC_VERSION) {
        cpu_set_error(backend, "IPC handle version %u is not supported (this backend reads %u)",
                      rec->version, CPU_IPC_VERSION);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    if (rec->pid <= 0 || rec->fd < 0 || rec->arena_size == 0 || rec->arena_size > SIZE_MAX ||
        rec->offset >= rec->arena_size || rec->bytes == 0 ||
        rec->bytes > rec->arena_size - rec->offset) {
        cpu_set_error(backend,
                      "malformed IPC handle (pid %d, fd %d, arena %llu bytes, offset %llu, %llu "
                      "bytes)",
                      rec->pid, rec->fd, (unsigned long long)rec->arena_size,
                      (unsigned long long)rec->offset, (unsigned long long)rec->bytes);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    if (rec->pid == (int32_t)getpid()) {
        cpu_set_error(backend, "handle was exported by this process; use the exported pointer");
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    return HAL_OK;
}

/* Opens the exporter's arena through /proc and checks that it is the file the handle names. */
static hal_status_t open_exporter_file(cpu_backend_t *backend, const cpu_ipc_record_t *rec,
                                       int *out)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", rec->pid, rec->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        switch (err) {
        case ENOENT:
        case ESRCH:
        case ENOTDIR:
            cpu_set_error(backend, "exporting process or its memory is gone (open %s: %s)", path,
                          strerror(err));
            return HAL_ERROR_NOT_FOUND;
        case EACCES:
        case EPERM:
            cpu_set_error(backend,
                          "open %s: %s (the exporter must run as the same user and be dumpable, "
                          "or this process needs CAP_SYS_PTRACE)",
                          path, strerror(err));
            return HAL_ERROR_PERMISSION_DENIED;
        case EMFILE:
        case ENFILE:
        case ENOMEM:
            cpu_set_error(backend, "open %s: %s", path, strerror(err));
            return HAL_ERROR_OUT_OF_HOST_MEMORY;
        default:
            cpu_set_error(backend, "open %s: %s", path, strerror(err));
            return HAL_ERROR_INTERNAL;
        }
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        cpu_set_error(backend, "fstat %s: %s", path, strerror(err));
        return HAL_ERROR_INTERNAL;
    }
    if ((uint64_t)st.st_ino != rec->ino || (uint64_t)st.st_dev != rec->dev ||
        (uint64_t)st.st_size != rec->arena_size) {
        /* The process exited and its pid or descriptor number went to something else. */
        close(fd);
        cpu_set_error(backend,
                      "exporting process or its memory is gone (%s is not the exported arena)",
                      path);
        return HAL_ERROR_NOT_FOUND;
    }
    *out = fd;
    return HAL_OK;
}

/* Finds this backend's mapping of an exporter's arena. Caller holds ipc_lock. */
static cpu_ipc_mapping_t *find_mapping(cpu_backend_t *backend, const cpu_ipc_record_t *rec)
{
    cpu_ipc_mapping_t *m = backend->ipc_mappings;
    while (m != NULL && !(m->pid == rec->pid && m->ino == rec->ino && m->dev == rec->dev &&
                          m->size == rec->arena_size))
        m = m->next;
    return m;
}

/* Opens the exporter's file and maps it, unless another thread mapped it meanwhile; returns the
 * mapping with a reference taken. */
static hal_status_t map_arena(cpu_backend_t *backend, const cpu_ipc_record_t *rec,
                              cpu_ipc_mapping_t **out)
{
    /* Opened without the lock: another thread's open must not wait for /proc. */
    int fd = -1;
    hal_status_t st = open_exporter_file(backend, rec, &fd);
    if (st != HAL_OK)
        return st;
    pthread_mutex_lock(&backend->ipc_lock);
    cpu_ipc_mapping_t *m = find_mapping(backend, rec);
    if (m == NULL) {
        m = calloc(1, sizeof(*m));
        if (m == NULL) {
            cpu_set_error(backend, "calloc(%zu) failed for an IPC mapping", sizeof(*m));
            st = HAL_ERROR_OUT_OF_HOST_MEMORY;
            goto out_unlock;
        }
        void *base = mmap(NULL, (size_t)rec->arena_size, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_NORESERVE, fd, 0);
        if (base == MAP_FAILED) {
            cpu_set_error(backend, "mmap of %llu bytes of process %d's device memory failed: %s",
                          (unsigned long long)rec->arena_size, rec->pid, strerror(errno));
            free(m);
            st = HAL_ERROR_OUT_OF_HOST_MEMORY;
            goto out_unlock;
        }
        (void)madvise(base, (size_t)rec->arena_size, MADV_DONTDUMP); /* as the exporter's */
        m->pid = rec->pid;
        m->ino = rec->ino;
        m->dev = rec->dev;
        m->base = base;
        m->size = rec->arena_size;
        m->next = backend->ipc_mappings;
        backend->ipc_mappings = m;
    }
    m->refs++;
    *out = m;
out_unlock:
    pthread_mutex_unlock(&backend->ipc_lock);
    close(fd); /* a mapping keeps the file alive */
    return st;
}

/* Maps the arena the handle names (or reuses this backend's mapping of it) and returns the
 * exported pointer's counterpart here. While a mapping of the arena is open, further handles
 * into it open without asking the exporter again: the collectives open a handle per operation,
 * and the mapping itself keeps the memory valid. */
hal_status_t cpu_mem_ipc_open(void *device_, const hal_ipc_handle_t *handle, void **ptr,
                              size_t *size, void **cookie)
{
    cpu_device_t *device = device_;
    cpu_backend_t *backend = device->backend;
    cpu_ipc_record_t rec;
    memcpy(&rec, handle->bytes, sizeof(rec));
    hal_status_t st = check_record(backend, &rec);
    if (st != HAL_OK)
        return st;

    pthread_mutex_lock(&backend->ipc_lock);
    cpu_ipc_mapping_t *m = find_mapping(backend, &rec);
    if (m != NULL)
        m->refs++;
    pthread_mutex_unlock(&backend->ipc_lock);
    if (m == NULL) {
        st = map_arena(backend, &rec, &m);
        if (st != HAL_OK)
            return st;
    }
    *ptr = m->base + rec.offset;
    *size = (size_t)rec.bytes;
    *cookie = m;
    return HAL_OK;
}

/* Drops one handle's reference to its mapping; the last one unmaps the exporter's arena. */
hal_status_t cpu_mem_ipc_close(void *device_, void *ptr, void *cookie)
{
    cpu_device_t *device = device_;
    cpu_backend_t *backend = device->backend;
    cpu_ipc_mapping_t *m = cookie;
    pthread_mutex_lock(&backend->ipc_lock);
    if (--m->refs > 0) {
        pthread_mutex_unlock(&backend->ipc_lock);
        return HAL_OK;
    }
    cpu_ipc_mapping_t **pos = &backend->ipc_mappings;
    while (*pos != m)
        pos = &(*pos)->next;
    *pos = m->next;
    pthread_mutex_unlock(&backend->ipc_lock);
    munmap(m->base, (size_t)m->size);
    free(m);
    return HAL_OK;
}

/* Unmaps what handles left open (the backend is going away). */
void cpu_ipc_unmap_all(cpu_backend_t *backend)
{
    cpu_ipc_mapping_t *m = backend->ipc_mappings;
    while (m != NULL) {
        cpu_ipc_mapping_t *next = m->next;
        munmap(m->base, (size_t)m->size);
        free(m);
        m = next;
    }
    backend->ipc_mappings = NULL;
}
