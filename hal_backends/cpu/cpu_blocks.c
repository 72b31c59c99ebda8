/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: the device's block pool, the threads that run the blocks of a kernel launch
 * beside the stream worker that reached it. The pool starts with the device's first launch;
 * several launches (from different streams) share it, each claiming its blocks one by one, and
 * the worker that owns a launch runs blocks too, so a launch finishes even with no pool threads. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hal_backends/cpu/cpu_internal.h"

/* The detail a block leaves through hal_host_kernel_ctx_t.set_error, per thread. */
static _Thread_local char block_error[CPU_BLOCK_MSG_MAX];

void cpu_block_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(block_error, sizeof(block_error), fmt, ap);
    va_end(ap);
}

/* Claims and runs blocks of `job` until none is left (or one failed). */
static void run_blocks(cpu_pool_t *pool, cpu_job_t *job)
{
    void *scratch = NULL;
    if (job->scratch_bytes) {
        scratch = malloc(job->scratch_bytes);
        if (!scratch) {
            pthread_mutex_lock(&pool->lock);
            if (job->status == HAL_OK) {
                job->status = HAL_ERROR_OUT_OF_HOST_MEMORY;
                snprintf(job->msg, sizeof(job->msg), "malloc(%zu) failed for a block's scratch",
                         job->scratch_bytes);
            }
            pthread_mutex_unlock(&pool->lock);
            atomic_store(&job->failed, true);
        }
    }
    for (;;) {
        uint64_t block = atomic_fetch_add(&job->next, 1);
        if (block >= job->total)
            break;
        hal_status_t st = HAL_OK;
        if (!atomic_load(&job->failed)) {
            block_error[0] = '\0';
            st = job->run(job->arg, block, scratch);
        }
        if (st != HAL_OK) {
            atomic_store(&job->failed, true);
            pthread_mutex_lock(&pool->lock);
            if (job->status == HAL_OK) {
                job->status = st;
                if (block_error[0])
                    snprintf(job->msg, sizeof(job->msg), "block %llu: %.400s",
                             (unsigned long long)block, block_error);
                else
                    snprintf(job->msg, sizeof(job->msg),
                             "block %llu returned status %d without a detail",
                             (unsigned long long)block, (int)st);
            }
            pthread_mutex_unlock(&pool->lock);
        }
        if (atomic_fetch_add(&job->done, 1) + 1 == job->total) {
            pthread_mutex_lock(&pool->lock);
            pthread_cond_broadcast(&pool->done_cv);
            pthread_mutex_unlock(&pool->lock);
        }
    }
    free(scratch);
}

/* A job of the list with blocks left to claim, or NULL. Called with the lock held. */
static cpu_job_t *job_with_blocks(cpu_pool_t *pool)
{
    for (cpu_job_t *j = pool->jobs; j; j = j->next_job)
        if (atomic_load(&j->next) < j->total)
            return j;
    return NULL;
}

static void *pool_main(void *arg)
{
    cpu_pool_t *pool = arg;
    pthread_mutex_lock(&pool->lock);
    while (!pool->stop) {
        cpu_job_t *job = job_with_blocks(pool);
        if (!job) {
            pthread_cond_wait(&pool->work_cv, &pool->lock);
            continue;
        }
        job->runners++; /* keeps the job alive while this thread may touch it */
        pthread_mutex_unlock(&pool->lock);
        run_blocks(pool, job);
        pthread_mutex_lock(&pool->lock);
        if (--job->runners == 0)
            pthread_cond_broadcast(&pool->done_cv);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

cpu_pool_t *cpu_pool_create(uint32_t threads, uint32_t device_index)
{
    cpu_pool_t *pool = calloc(1, sizeof(*pool) + threads * sizeof(pthread_t));
    if (!pool)
        return NULL;
    pool->pid = getpid();
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->work_cv, NULL);
    pthread_cond_init(&pool->done_cv, NULL);
    for (uint32_t i = 0; i < threads; i++) {
        if (pthread_create(&pool->threads[i], NULL, pool_main, pool) != 0)
            break; /* fewer threads: the launching worker still runs every block */
        char name[16];
        snprintf(name, sizeof(name), "hal-blk%u.%u", device_index % 100, i % 100);
        pthread_setname_np(pool->threads[i], name);
        pool->nthreads++;
    }
    return pool;
}

void cpu_pool_destroy(cpu_pool_t *pool)
{
    if (!pool)
        return;
    if (pool->pid != getpid())
        return; /* a forked child: the threads do not exist here, and the locks may be held */
    pthread_mutex_lock(&pool->lock);
    pool->stop = true;
    pthread_cond_broadcast(&pool->work_cv);
    pthread_mutex_unlock(&pool->lock);
    for (uint32_t i = 0; i < pool->nthreads; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->done_cv);
    pthread_cond_destroy(&pool->work_cv);
    pthread_mutex_destroy(&pool->lock);
    free(pool);
}

hal_status_t cpu_pool_run(cpu_pool_t *pool, cpu_job_t *job)
{
    atomic_init(&job->next, 0);
    atomic_init(&job->done, 0);
    atomic_init(&job->failed, false);
    job->status = HAL_OK;
    job->msg[0] = '\0';
    job->runners = 0;
    pthread_mutex_lock(&pool->lock);
    job->next_job = pool->jobs;
    pool->jobs = job;
    if (job->total > 1)
        pthread_cond_broadcast(&pool->work_cv);
    pthread_mutex_unlock(&pool->lock);
    run_blocks(pool, job);
    pthread_mutex_lock(&pool->lock);
    while (atomic_load(&job->done) < job->total || job->runners > 0)
        pthread_cond_wait(&pool->done_cv, &pool->lock);
    for (cpu_job_t **j = &pool->jobs; *j; j = &(*j)->next_job)
        if (*j == job) {
            *j = job->next_job;
            break;
        }
    pthread_mutex_unlock(&pool->lock);
    return job->status;
}
