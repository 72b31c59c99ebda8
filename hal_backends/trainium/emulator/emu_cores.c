/* SPDX-License-Identifier: Apache-2.0 */
/* libnrt emulator: which NeuronCores a process sees, and their exclusive ownership.
 *
 * As documented for libnrt: NEURON_RT_VISIBLE_CORES ("3", "3-6", "3-5,6"; the cores must form
 * one contiguous, increasing range) takes precedence over NEURON_RT_NUM_CORES (a count, 0 =
 * all); with neither, the process takes every core of the instance. nrt_init takes the cores
 * exclusively: a core owned by a live process makes nrt_init fail, and the cores come free when
 * the owner calls nrt_close or exits. Core indices seen by the process are relative to its set.
 *
 * Ownership is one lock file per physical core, "<instance type>.nc<N>.lock", held with
 * flock(2) in the directory of the emulated machine: NEURON_EMU_LOCK_DIR (default:
 * "neuron-emu-<uid>" in $TMPDIR or the system temporary directory, created with mode 0700), or,
 * when NEURON_EMU_INSTANCE_ID names a machine, its subdirectory of that name. Processes with the
 * same lock directory and instance id share one machine's cores and exclude each other, as the
 * processes of one Trainium instance do; other ids are other machines, so independent jobs (test
 * runs, each with an id of its own) never take each other's cores. The kernel drops a flock when
 * its last descriptor closes, so a process that dies releases its cores without any clean-up. A
 * logical core of two physical cores (Trn2, LNC=2) locks both, so processes using different
 * logical core sizes still exclude each other correctly. The owner writes its pid into the file
 * for diagnostics. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hal_backends/trainium/emulator/emu_internal.h"

/* ---- NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES ---- */

static NRT_STATUS parse_visible(const char *api, const char *value, uint32_t total,
                                emu_core_request_t *req)
{
    const char *s = value;
    uint64_t first = 0, next = 0;
    bool any = false;
    for (;;) {
        uint64_t lo, hi;
        if (!emu_parse_u64_prefix(s, &s, &lo))
            goto malformed;
        hi = lo;
        if (*s == '-') {
            if (!emu_parse_u64_prefix(s + 1, &s, &hi) || hi < lo)
                goto malformed;
        }
        if (!any) {
            first = lo;
            any = true;
        } else if (lo != next) {
            EMU_ERR(api,
                    "NEURON_RT_VISIBLE_CORES=%s: the cores must be one contiguous range in "
                    "increasing order (expected %llu next, got %llu)",
                    value, (unsigned long long)next, (unsigned long long)lo);
            return NRT_INVALID;
        }
        next = hi + 1;
        if (*s == '\0')
            break;
        if (*s != ',')
            goto malformed;
        s++;
    }
    if (next > total) {
        EMU_ERR(api,
                "NeuronCore(s) not available - Requested:nc%llu-nc%llu, the instance has "
                "NeuronCores nc0-nc%u (NEURON_RT_VISIBLE_CORES=%s)",
                (unsigned long long)first, (unsigned long long)(next - 1), total - 1, value);
        return NRT_FAILURE;
    }
    req->kind = EMU_CORES_RANGE;
    req->first = (uint32_t)first;
    req->count = (uint32_t)(next - first);
    return NRT_SUCCESS;

malformed:
    EMU_ERR(api,
            "NEURON_RT_VISIBLE_CORES=%s is malformed: expected core indices and ranges such as "
            "\"3\", \"3-6\" or \"3-5,6\"",
            value);
    return NRT_INVALID;
}

NRT_STATUS emu_cores_parse(const char *api, const emu_platform_t *p, emu_core_request_t *req)
{
    const char *visible = emu_getenv("NEURON_RT_VISIBLE_CORES");
    if (visible != NULL)
        return parse_visible(api, visible, p->total_vnc, req);

    const char *num = emu_getenv("NEURON_RT_NUM_CORES");
    if (num != NULL) {
        uint64_t n;
        if (!emu_parse_u64(num, &n)) {
            EMU_ERR(api, "NEURON_RT_NUM_CORES=%s is not a core count", num);
            return NRT_INVALID;
        }
        if (n > p->total_vnc) {
            EMU_ERR(api,
                    "NeuronCore(s) not available - Requested:%llu, the instance has %u "
                    "(NEURON_RT_NUM_CORES)",
                    (unsigned long long)n, p->total_vnc);
            return NRT_FAILURE;
        }
        if (n != 0) {
            req->kind = EMU_CORES_COUNT;
            req->first = 0;
            req->count = (uint32_t)n;
            return NRT_SUCCESS;
        }
    }
    req->kind = EMU_CORES_ALL;
    req->first = 0;
    req->count = p->total_vnc;
    return NRT_SUCCESS;
}

/* ---- Lock files ---- */

/* The directory holding one emulated machine's lock files, and how to name it in messages. */
typedef struct lock_scope {
    int dirfd;
    char where[PATH_MAX + 128];
} lock_scope_t;

#define INSTANCE_ID_MAX 64

/* NEURON_EMU_INSTANCE_ID becomes a directory name: letters, digits, '.', '_', '-', not starting
 * with '.', at most INSTANCE_ID_MAX characters. */
static bool instance_id_valid(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > INSTANCE_ID_MAX || id[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

static int open_lock_dir(const char *api, char *dir_out, size_t dir_size)
{
    char path[PATH_MAX];
    const char *dir = emu_getenv("NEURON_EMU_LOCK_DIR");
    bool shared_default = dir == NULL;
    if (shared_default) {
        const char *tmp = emu_getenv("TMPDIR");
        int n = snprintf(path, sizeof(path), "%s/neuron-emu-%lu", tmp != NULL ? tmp : P_tmpdir,
                         (unsigned long)geteuid());
        if (n < 0 || (size_t)n >= sizeof(path)) {
            EMU_ERR(api, "the default lock directory path is too long");
            return -1;
        }
        dir = path;
    }
    snprintf(dir_out, dir_size, "%s", dir);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        EMU_ERR(api, "cannot create the core lock directory %s: %s", dir, strerror(errno));
        return -1;
    }
    /* The shared default must be our own private directory, not something planted there. */
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (shared_default ? O_NOFOLLOW : 0));
    if (fd < 0) {
        EMU_ERR(api, "cannot open the core lock directory %s: %s", dir, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)) {
        EMU_ERR(api, "the core lock directory %s is not a directory", dir);
        close(fd);
        return -1;
    }
    if (shared_default && (st.st_uid != geteuid() || (st.st_mode & 077) != 0)) {
        EMU_ERR(api,
                "the core lock directory %s must be owned by uid %lu with mode 0700 (set "
                "NEURON_EMU_LOCK_DIR to use another one)",
                dir, (unsigned long)geteuid());
        close(fd);
        return -1;
    }
    return fd;
}

/* Opens the lock directory of this process's emulated machine. NRT_INVALID for a malformed
 * NEURON_EMU_INSTANCE_ID, NRT_FAILURE when a directory cannot be made or opened. */
static NRT_STATUS open_scope(const char *api, lock_scope_t *scope)
{
    const char *id = emu_getenv("NEURON_EMU_INSTANCE_ID");
    if (id != NULL && !instance_id_valid(id)) {
        EMU_ERR(api,
                "NEURON_EMU_INSTANCE_ID=%s is malformed: expected 1 to %d letters, digits, '.', "
                "'_' or '-', not starting with '.'",
                id, INSTANCE_ID_MAX);
        return NRT_INVALID;
    }
    char dir[PATH_MAX];
    int base = open_lock_dir(api, dir, sizeof(dir));
    if (base < 0)
        return NRT_FAILURE;
    if (id == NULL) {
        scope->dirfd = base;
        snprintf(scope->where, sizeof(scope->where),
                 "the default emulated instance (no NEURON_EMU_INSTANCE_ID), lock directory %s",
                 dir);
        return NRT_SUCCESS;
    }
    if (mkdirat(base, id, 0700) != 0 && errno != EEXIST) {
        EMU_ERR(api, "cannot create the lock directory %s/%s of NEURON_EMU_INSTANCE_ID=%s: %s", dir,
                id, id, strerror(errno));
        close(base);
        return NRT_FAILURE;
    }
    int fd = openat(base, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    int err = errno;
    close(base);
    if (fd < 0) {
        EMU_ERR(api, "cannot open the lock directory %s/%s of NEURON_EMU_INSTANCE_ID=%s: %s", dir,
                id, id, strerror(err));
        return NRT_FAILURE;
    }
    scope->dirfd = fd;
    snprintf(scope->where, sizeof(scope->where),
             "emulated instance NEURON_EMU_INSTANCE_ID=%s, lock directory %s/%s", id, dir, id);
    return NRT_SUCCESS;
}

static void lock_name(char *buf, size_t len, const emu_platform_t *p, uint32_t phys)
{
    snprintf(buf, len, "%s.nc%u.lock", p->inst->name, phys);
}

static long lock_owner(int fd)
{
    char text[32];
    ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
    if (n <= 0)
        return -1;
    text[n] = '\0';
    uint64_t pid;
    const char *end;
    return emu_parse_u64_prefix(text, &end, &pid) ? (long)pid : -1;
}

/* Locks the physical cores of logical cores [first, first + count). On failure nothing stays
 * locked and *busy_vnc / *busy_pid name the first core that is owned by someone else. */
static NRT_STATUS lock_range(const char *api, int dirfd, const emu_platform_t *p, uint32_t first,
                             uint32_t count, emu_core_locks_t *locks, uint32_t *busy_vnc,
                             long *busy_pid)
{
    locks->n = 0;
    for (uint32_t phys = first * p->lnc; phys < (first + count) * p->lnc; phys++) {
        char name[96];
        lock_name(name, sizeof(name), p, phys);
        int fd = openat(dirfd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            EMU_ERR(api, "cannot open the lock file %s: %s", name, strerror(errno));
            emu_cores_release(locks);
            *busy_pid = 0;
            return NRT_FAILURE;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int err = errno;
            *busy_vnc = phys / p->lnc;
            *busy_pid = err == EWOULDBLOCK ? lock_owner(fd) : 0;
            if (err != EWOULDBLOCK)
                EMU_ERR(api, "cannot lock %s: %s", name, strerror(err));
            close(fd);
            emu_cores_release(locks);
            return err == EWOULDBLOCK ? NRT_EXEC_NC_BUSY : NRT_FAILURE;
        }
        char pid[32];
        int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n)
            EMU_WARN(api, "cannot record the owner in %s: %s", name, strerror(errno));
        locks->fd[locks->n++] = fd;
    }
    return NRT_SUCCESS;
}

NRT_STATUS emu_cores_acquire(const char *api, const emu_platform_t *p,
                             const emu_core_request_t *req, uint32_t *first,
                             emu_core_locks_t *locks)
{
    lock_scope_t scope;
    NRT_STATUS status = open_scope(api, &scope);
    if (status != NRT_SUCCESS)
        return status;
    int dirfd = scope.dirfd;
    uint32_t busy_vnc = 0;
    long busy_pid = 0;
    status = NRT_FAILURE;
    if (req->kind == EMU_CORES_COUNT) {
        /* The first contiguous run of free cores, as many as requested. */
        for (uint32_t start = 0; start + req->count <= p->total_vnc; start++) {
            status = lock_range(api, dirfd, p, start, req->count, locks, &busy_vnc, &busy_pid);
            if (status == NRT_SUCCESS)
                *first = start;
            if (status != NRT_EXEC_NC_BUSY)
                break;
            start = busy_vnc; /* no run can include the busy core */
        }
        if (status == NRT_EXEC_NC_BUSY)
            EMU_ERR(api,
                    "NeuronCore(s) not available - Requested:%u contiguous NeuronCores, other "
                    "processes own the rest (NEURON_RT_NUM_CORES=%u; %s)",
                    req->count, req->count, scope.where);
    } else {
        status = lock_range(api, dirfd, p, req->first, req->count, locks, &busy_vnc, &busy_pid);
        if (status == NRT_SUCCESS)
            *first = req->first;
        if (status == NRT_EXEC_NC_BUSY)
            EMU_ERR(api,
                    "NeuronCore(s) not available - Requested:nc%u-nc%u, nc%u is owned by process "
                    "%ld (%s)",
                    req->first, req->first + req->count - 1, busy_vnc, busy_pid, scope.where);
    }
    close(dirfd);
    if (status == NRT_EXEC_NC_BUSY)
        return NRT_FAILURE; /* libnrt's nrt_init reports busy cores as NRT_FAILURE */
    return status;
}

void emu_cores_release(emu_core_locks_t *locks)
{
    /* Only close: an explicit LOCK_UN would also drop a lock still shared with a parent. */
    for (uint32_t i = 0; i < locks->n; i++)
        close(locks->fd[i]);
    locks->n = 0;
}

/* ---- Core counts ---- */

static NRT_STATUS count_cores(const char *api, uint32_t *vnc_count, bool visible)
{
    if (vnc_count == NULL) {
        EMU_ERR(api, "vnc_count is NULL");
        return NRT_INVALID;
    }
    pthread_rwlock_rdlock(&emu_rt.lock);
    if (emu_rt.phase == EMU_PHASE_READY) {
        *vnc_count = visible ? emu_rt.vnc_count : emu_rt.platform.total_vnc;
        pthread_rwlock_unlock(&emu_rt.lock);
        return NRT_SUCCESS;
    }
    pthread_rwlock_unlock(&emu_rt.lock);

    /* Before nrt_init (documented as allowed) and after nrt_close: from the environment. */
    emu_platform_t p;
    NRT_STATUS status = emu_platform_from_env(api, &p);
    if (status != NRT_SUCCESS)
        return status;
    if (!visible) {
        *vnc_count = p.total_vnc;
        return NRT_SUCCESS;
    }
    emu_core_request_t req;
    status = emu_cores_parse(api, &p, &req);
    if (status == NRT_SUCCESS)
        *vnc_count = req.count;
    return status;
}

NRT_EMU_EXPORT_RECENT NRT_STATUS nrt_get_total_nc_count(uint32_t *vnc_count)
{
    return count_cores("nrt_get_total_nc_count", vnc_count, false);
}

NRT_EMU_EXPORT_RECENT NRT_STATUS nrt_get_total_vnc_count(uint32_t *vnc_count)
{
    return count_cores("nrt_get_total_vnc_count", vnc_count, false);
}

NRT_EMU_EXPORT NRT_STATUS nrt_get_visible_nc_count(uint32_t *vnc_count)
{
    return count_cores("nrt_get_visible_nc_count", vnc_count, true);
}

NRT_EMU_EXPORT NRT_STATUS nrt_get_visible_vnc_count(uint32_t *vnc_count)
{
    return count_cores("nrt_get_visible_vnc_count", vnc_count, true);
}
