/* SPDX-License-Identifier: Apache-2.0 */
/* Shared-memory transport of the host collective engine: the layout of a rank's area, the
 * areas themselves (POSIX shared memory when other processes must map them, process memory
 * otherwise) and the in-process registry through which ranks that are threads of one process
 * find each other's areas. The registry is keyed by the job nonce; the first rank of the
 * process to arrive creates the job's record, the last to leave unmaps every area. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hal/src/comm/engine_impl.h"
#include "hal/src/core.h"

/* Staging and ring budgets per area; pieces shrink as ranks grow, within bounds. */
#define ENG_STAGE_PIECE  (128u << 10)
#define ENG_STAGE_BUDGET (8u << 20)
#define ENG_RING_CHUNK   (64u << 10)
#define ENG_RING_BUDGET  (4u << 20)
#define ENG_MIN_CHUNK    (4u << 10)

struct eng_job {
    eng_job_t *next;
    uint8_t nonce[HAL_BOOTSTRAP_NONCE_BYTES];
    int nranks;
    int refs;
    size_t area_bytes;
    eng_ctrl_t **area; /* [nranks]: created here or mapped from another process */
    bool *joined;      /* [nranks]: ranks of this process that joined */
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static eng_job_t *registry;
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;

/* fork(): the lock is held across it, so no record is half-updated; the child keeps none of
 * the parent's threads, so their jobs are not its own: it forgets them (leaking the records is
 * the only safe choice) and releases the lock (held by its only thread, the forking one). */
static void registry_prepare(void)
{
    pthread_mutex_lock(&registry_lock);
}

static void registry_parent(void)
{
    pthread_mutex_unlock(&registry_lock);
}

static void registry_child(void)
{
    registry = NULL;
    pthread_mutex_unlock(&registry_lock);
}

static void registry_init(void)
{
    pthread_atfork(registry_prepare, registry_parent, registry_child);
}

static size_t round_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

static size_t chunk_for(size_t preferred, size_t budget, size_t slots)
{
    size_t c = budget / slots;
    c = c > preferred ? preferred : c;
    c = c < ENG_MIN_CHUNK ? ENG_MIN_CHUNK : c;
    return c / ENG_MIN_CHUNK * ENG_MIN_CHUNK;
}

void eng_layout_compute(int nranks, eng_layout_t *out)
{
    size_t n = (size_t)nranks;
    out->p2p_off = round_up(sizeof(eng_ctrl_t), ENG_LINE);
    out->stage_off = round_up(out->p2p_off + n * sizeof(eng_p2p_t), 4096);
    out->piece = chunk_for(ENG_STAGE_PIECE, ENG_STAGE_BUDGET, ENG_STAGE_DEPTH * n);
    out->ring_off = out->stage_off + ENG_STAGE_DEPTH * n * out->piece;
    out->ring_chunk = chunk_for(ENG_RING_CHUNK, ENG_RING_BUDGET, ENG_RING_DEPTH * n);
    out->total = round_up(out->ring_off + n * ENG_RING_DEPTH * out->ring_chunk, 4096);
}

void eng_shm_name(char *buf, size_t size, const uint8_t *nonce, int rank)
{
    char hex[2 * HAL_BOOTSTRAP_NONCE_BYTES + 1];
    for (int i = 0; i < HAL_BOOTSTRAP_NONCE_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", nonce[i]);
    snprintf(buf, size, "/hal-%s-%d", hex, rank);
}

hal_status_t eng_job_join(const uint8_t *nonce, int nranks, int rank, size_t area_bytes,
                          eng_job_t **out)
{
    pthread_once(&registry_once, registry_init);
    pthread_mutex_lock(&registry_lock);
    eng_job_t *job = registry;
    while (job && memcmp(job->nonce, nonce, HAL_BOOTSTRAP_NONCE_BYTES) != 0)
        job = job->next;
    if (job && (job->nranks != nranks || job->area_bytes != area_bytes || job->joined[rank])) {
        pthread_mutex_unlock(&registry_lock);
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, "hal", "comm init",
                         "rank %d of this job already joined in this process, or the job's ranks "
                         "disagree on its size",
                         rank);
    }
    if (!job) {
        job = calloc(1, sizeof(*job));
        if (job) {
            job->area = calloc((size_t)nranks, sizeof(*job->area));
            job->joined = calloc((size_t)nranks, sizeof(*job->joined));
        }
        if (!job || !job->area || !job->joined) {
            if (job) {
                free(job->area);
                free(job->joined);
            }
            free(job);
            pthread_mutex_unlock(&registry_lock);
            return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, "hal", "comm init",
                             "out of host memory");
        }
        memcpy(job->nonce, nonce, HAL_BOOTSTRAP_NONCE_BYTES);
        job->nranks = nranks;
        job->area_bytes = area_bytes;
        job->next = registry;
        registry = job;
    }
    job->joined[rank] = true;
    job->refs++;
    pthread_mutex_unlock(&registry_lock);
    *out = job;
    return HAL_OK;
}

void eng_job_leave(eng_job_t *job, int rank)
{
    pthread_mutex_lock(&registry_lock);
    job->joined[rank] = false;
    if (--job->refs > 0) {
        pthread_mutex_unlock(&registry_lock);
        return;
    }
    eng_job_t **link = &registry;
    while (*link && *link != job)
        link = &(*link)->next;
    if (*link)
        *link = job->next;
    pthread_mutex_unlock(&registry_lock);
    for (int i = 0; i < job->nranks; i++)
        if (job->area[i])
            munmap(job->area[i], job->area_bytes);
    free(job->area);
    free(job->joined);
    free(job);
}

hal_status_t eng_area_create(eng_job_t *job, int rank, int pid, const char *name, eng_ctrl_t **out)
{
    size_t bytes = job->area_bytes;
    void *mem;
    if (name) {
        /* O_EXCL: a segment that already exists is someone else's; never adopt it. */
        int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0)
            return hal_error(HAL_ERROR_BACKEND_SPECIFIC, "hal", "comm init",
                             "shm_open(%s) failed: %s", name, strerror(errno));
        if (ftruncate(fd, (off_t)bytes) != 0) {
            int e = errno;
            close(fd);
            shm_unlink(name);
            return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, "hal", "comm init",
                             "ftruncate of shared memory %s to %zu bytes failed: %s", name, bytes,
                             strerror(e));
        }
        mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        int e = errno;
        close(fd);
        if (mem == MAP_FAILED) {
            shm_unlink(name);
            return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, "hal", "comm init",
                             "mmap of shared memory %s (%zu bytes) failed: %s", name, bytes,
                             strerror(e));
        }
    } else {
        mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED)
            return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, "hal", "comm init",
                             "mmap of %zu bytes failed: %s", bytes, strerror(errno));
    }
    eng_ctrl_t *ctrl = mem;
    ctrl->area_bytes = bytes;
    ctrl->rank = rank;
    ctrl->pid = pid;
    ctrl->nranks = job->nranks;
    __atomic_store_n(&ctrl->magic, ENG_MAGIC, __ATOMIC_RELEASE);
    pthread_mutex_lock(&registry_lock);
    job->area[rank] = ctrl;
    pthread_mutex_unlock(&registry_lock);
    *out = ctrl;
    return HAL_OK;
}

/* Maps another process's segment and checks it is what its owner created for this job. */
static hal_status_t map_segment(eng_job_t *job, int rank, const char *name, eng_ctrl_t **out)
{
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return hal_error(HAL_ERROR_REMOTE, "hal", "comm init",
                         "cannot open rank %d's shared memory %s: %s", rank, name, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 077) != 0 ||
        (size_t)st.st_size != job->area_bytes) {
        close(fd);
        return hal_error(HAL_ERROR_PERMISSION_DENIED, "hal", "comm init",
                         "rank %d's shared memory %s has an unexpected owner, mode or size", rank,
                         name);
    }
    void *mem = mmap(NULL, job->area_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (mem == MAP_FAILED)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, "hal", "comm init",
                         "mmap of rank %d's shared memory %s failed: %s", rank, name, strerror(e));
    eng_ctrl_t *ctrl = mem;
    if (__atomic_load_n(&ctrl->magic, __ATOMIC_ACQUIRE) != ENG_MAGIC ||
        ctrl->area_bytes != job->area_bytes || ctrl->rank != rank || ctrl->nranks != job->nranks) {
        munmap(mem, job->area_bytes);
        return hal_error(HAL_ERROR_PERMISSION_DENIED, "hal", "comm init",
                         "rank %d's shared memory %s does not hold its control block", rank, name);
    }
    *out = ctrl;
    return HAL_OK;
}

hal_status_t eng_area_get(eng_job_t *job, int rank, bool other_process, const char *name,
                          eng_ctrl_t **out)
{
    pthread_mutex_lock(&registry_lock);
    eng_ctrl_t *ctrl = job->area[rank];
    hal_status_t st = HAL_OK;
    if (!ctrl && other_process) {
        st = map_segment(job, rank, name, &ctrl);
        if (st == HAL_OK)
            job->area[rank] = ctrl;
    } else if (!ctrl) {
        st = hal_error(HAL_ERROR_INTERNAL, "hal", "comm init",
                       "rank %d of this process has not registered its area", rank);
    }
    pthread_mutex_unlock(&registry_lock);
    *out = ctrl;
    return st;
}
