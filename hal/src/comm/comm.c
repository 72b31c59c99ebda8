/* SPDX-License-Identifier: Apache-2.0 */
/* Collectives front end, lifecycle: unique ids, communicator init (blocking or not), finalize,
 * abort, destroy, async errors. Rendezvous is the bootstrap's; the collectives run on the
 * backend's native slots or on the host engine (comm_collectives.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/src/comm/comm_internal.h"

_Static_assert(sizeof(struct hal_comm_s) <= HAL_HANDLE_MAX_SIZE, "handle size");

hal_status_t hal_dtype_get_size(hal_dtype_t dtype, size_t *size)
{
    size_t bytes = hal_dtype_bytes(dtype);
    if (!size || bytes == 0)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, "hal_dtype_get_size",
                         size ? "unknown dtype %d" : "size is NULL", (int)dtype);
    *size = bytes;
    return HAL_OK;
}

/* HAL_COMM_TIMEOUT_MS, or the default. */
static hal_status_t default_timeout(uint32_t *out, const char *call)
{
    const char *env = getenv("HAL_COMM_TIMEOUT_MS");
    *out = HAL_COMM_DEFAULT_TIMEOUT_MS;
    if (!env || !*env)
        return HAL_OK;
    unsigned long long v = 0;
    if (!hal_comm_parse_env_count(env, &v) || v == 0 || v > UINT32_MAX)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "HAL_COMM_TIMEOUT_MS=\"%s\" is invalid: expected milliseconds, 1 to %u",
                         env, UINT32_MAX);
    *out = (uint32_t)v;
    return HAL_OK;
}

hal_status_t hal_comm_get_unique_id(uint32_t flags, hal_unique_id_t *id)
{
    static const char call[] = "hal_comm_get_unique_id";
    HAL_CHECK_NOT_NULL(id, NULL, call);
    if (flags & ~HAL_COMM_ID_FLAG_STORE)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "unknown flags 0x%x",
                         flags & ~HAL_COMM_ID_FLAG_STORE);
    uint32_t timeout;
    HAL_CHECK(default_timeout(&timeout, call));
    return hal_bootstrap_new_id(flags, timeout, id);
}

/* async_error and init_done are written under the lock but read without it on the hot path
 * (hal_comm_sticky, hal_comm_wait_init), hence the atomic accesses. */
static void set_async_error(struct hal_comm_s *comm, hal_status_t st)
{
    __atomic_store_n(&comm->async_error, st, __ATOMIC_RELEASE);
}

static hal_status_t get_async_error(struct hal_comm_s *comm)
{
    return __atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE);
}

void hal_comm_latch(struct hal_comm_s *comm, hal_status_t st)
{
    pthread_mutex_lock(&comm->lock);
    if (comm->async_error == HAL_OK || comm->async_error == HAL_IN_PROGRESS) {
        snprintf(comm->message, sizeof(comm->message), "%s", hal_last_error_message());
        set_async_error(comm, st);
    }
    pthread_cond_broadcast(&comm->cond);
    pthread_mutex_unlock(&comm->lock);
}

void *hal_comm_native(struct hal_comm_s *comm)
{
    if (!__atomic_load_n(&comm->init_done, __ATOMIC_ACQUIRE))
        return NULL;
    return comm->native;
}

/* A failure the backend's communicator latched (a native collective failed, a peer left) becomes
 * the communicator's: every later call, on the native path or the host one, reports it. */
static void take_native_error(struct hal_comm_s *comm)
{
    void *native = hal_comm_native(comm);
    if (!native || !comm->ops->comm_get_async_error)
        return;
    hal_status_t st = comm->ops->comm_get_async_error(native);
    if (st == HAL_OK || st == HAL_IN_PROGRESS)
        return;
    hal_backend_error(st, comm->ops, "the backend's communicator");
    hal_comm_latch(comm, st);
}

hal_status_t hal_comm_sticky(struct hal_comm_s *comm, const char *call)
{
    hal_status_t fast = get_async_error(comm);
    if (HAL_LIKELY(fast == HAL_OK || fast == HAL_IN_PROGRESS)) {
        take_native_error(comm);
        fast = get_async_error(comm);
    }
    if (HAL_LIKELY(fast == HAL_OK || fast == HAL_IN_PROGRESS))
        return HAL_OK;
    pthread_mutex_lock(&comm->lock);
    hal_status_t st = comm->async_error;
    char message[HAL_COMM_MESSAGE_MAX];
    if (st != HAL_OK && st != HAL_IN_PROGRESS)
        snprintf(message, sizeof(message), "%s", comm->message);
    pthread_mutex_unlock(&comm->lock);
    if (st == HAL_OK || st == HAL_IN_PROGRESS)
        return HAL_OK;
    return hal_error(st, comm->ops->name, call, "the communicator failed earlier: %s", message);
}

hal_status_t hal_comm_wait_init(struct hal_comm_s *comm)
{
    if (HAL_LIKELY(__atomic_load_n(&comm->init_done, __ATOMIC_ACQUIRE)))
        return get_async_error(comm);
    pthread_mutex_lock(&comm->lock);
    while (!comm->init_done)
        pthread_cond_wait(&comm->cond, &comm->lock);
    hal_status_t st = comm->async_error;
    pthread_mutex_unlock(&comm->lock);
    return st;
}

void hal_comm_job_started(struct hal_comm_s *comm)
{
    __atomic_fetch_add(&comm->pending, 1, __ATOMIC_SEQ_CST);
}

/* Records of one-operation jobs in a communicator's pool. 256 covers the operations a stream
 * usually has queued; each record is cache-line aligned, so the stream worker releasing one
 * does not disturb the enqueuing thread filling the next. */
#define COMM_JOB_POOL  256u
#define COMM_JOB_ALIGN 64u
#define COMM_JOB_RECORD                                                                     \
    ((sizeof(comm_job_t) + sizeof(hal_engine_op_t) + COMM_JOB_ALIGN - 1) / COMM_JOB_ALIGN * \
     COMM_JOB_ALIGN)

static unsigned char *job_pool(struct hal_comm_s *comm)
{
    unsigned char *pool = __atomic_load_n(&comm->job_pool, __ATOMIC_ACQUIRE);
    if (pool)
        return pool;
    pool = aligned_alloc(COMM_JOB_ALIGN, COMM_JOB_POOL * COMM_JOB_RECORD);
    if (!pool)
        return NULL;
    memset(pool, 0, COMM_JOB_POOL * COMM_JOB_RECORD);
    unsigned char *expected = NULL;
    if (!__atomic_compare_exchange_n(&comm->job_pool, &expected, pool, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        free(pool); /* another thread made it first */
        return expected;
    }
    return pool;
}

comm_job_t *hal_comm_job_alloc(struct hal_comm_s *comm, size_t n)
{
    comm_job_t *job = NULL;
    unsigned char *pool = n == 1 ? job_pool(comm) : NULL;
    if (pool) {
        uint32_t i = __atomic_fetch_add(&comm->job_next, 1, __ATOMIC_RELAXED) % COMM_JOB_POOL;
        comm_job_t *record = (comm_job_t *)(pool + (size_t)i * COMM_JOB_RECORD);
        /* Records are released in stream order: if this one is still taken, so are most. */
        if (!__atomic_load_n(&record->busy, __ATOMIC_RELAXED) &&
            !__atomic_exchange_n(&record->busy, 1, __ATOMIC_ACQUIRE)) {
            job = record;
            job->slot = (int32_t)i;
        }
    }
    if (!job) {
        job = malloc(sizeof(*job) + n * sizeof(hal_engine_op_t));
        if (!job)
            return NULL;
        job->busy = 1;
        job->slot = -1;
    }
    job->comm = comm;
    job->n = n;
    return job;
}

void hal_comm_job_free(comm_job_t *job)
{
    if (job->slot < 0)
        free(job);
    else
        __atomic_store_n(&job->busy, 0, __ATOMIC_RELEASE);
}

/* Wakes wait_idle only when it waits: the pending count and the waiter count are each written
 * before the other is read (sequentially consistent), so one side always sees the other. */
void hal_comm_job_finished(struct hal_comm_s *comm)
{
    if (__atomic_sub_fetch(&comm->pending, 1, __ATOMIC_SEQ_CST) == 0 &&
        __atomic_load_n(&comm->idle_waiters, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&comm->lock);
        pthread_cond_broadcast(&comm->cond);
        pthread_mutex_unlock(&comm->lock);
    }
}

/* ---- native collectives: what finalize and destroy wait for ---- */

void hal_comm_note_native(struct hal_comm_s *comm, struct hal_stream_s *stream)
{
    const hal_backend_ops_t *ops = comm->ops;
    pthread_mutex_lock(&comm->lock);
    comm_native_mark_t *mark = NULL;
    for (size_t i = 0; i < comm->mark_count && !mark; i++)
        if (comm->marks[i].stream == stream->impl)
            mark = &comm->marks[i];
    if (!mark) {
        void *event = NULL;
        if (comm->mark_count == comm->mark_capacity) {
            size_t cap = comm->mark_capacity ? comm->mark_capacity * 2 : 4;
            comm_native_mark_t *grown = realloc(comm->marks, cap * sizeof(*grown));
            if (grown) {
                comm->marks = grown;
                comm->mark_capacity = cap;
            }
        }
        /* Without memory for the mark, finalize does not wait for this stream's collectives
         * (destroy still waits for the backend's communicator). */
        if (comm->mark_count < comm->mark_capacity &&
            ops->event_create(comm->device->impl, HAL_EVENT_FLAG_NONE, &event) == HAL_OK) {
            mark = &comm->marks[comm->mark_count++];
            *mark = (comm_native_mark_t){ stream->impl, event };
        }
    }
    if (mark && ops->event_record(mark->event, stream->impl) != HAL_OK)
        hal_host_take_error(); /* a failed record leaves the event as it was */
    pthread_mutex_unlock(&comm->lock);
}

/* Waits for the events recorded after the native collectives (never-recorded ones are done). */
static void wait_native(struct hal_comm_s *comm)
{
    pthread_mutex_lock(&comm->lock);
    size_t n = comm->mark_count;
    void **events = n ? malloc(n * sizeof(*events)) : NULL;
    for (size_t i = 0; events && i < n; i++)
        events[i] = comm->marks[i].event;
    pthread_mutex_unlock(&comm->lock);
    /* The events stay alive: only destroy frees them, after this. */
    for (size_t i = 0; events && i < n; i++)
        comm->ops->event_synchronize(events[i]);
    free(events);
}

/* ---- IPC for the engine: maps peers' buffers through the backend ---- */

static hal_status_t comm_ipc_open(void *ctx, const hal_ipc_handle_t *handle, void **ptr)
{
    struct hal_comm_s *comm = ctx;
    void *p = NULL, *cookie = NULL;
    size_t size = 0;
    pthread_mutex_lock(&comm->lock);
    if (comm->mapping_count == comm->mapping_capacity) {
        size_t cap = comm->mapping_capacity ? comm->mapping_capacity * 2 : 16;
        comm_ipc_mapping_t *grown = realloc(comm->mappings, cap * sizeof(*grown));
        if (!grown) {
            pthread_mutex_unlock(&comm->lock);
            return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, comm->ops->name, "ipc open",
                             "out of host memory");
        }
        comm->mappings = grown;
        comm->mapping_capacity = cap;
    }
    pthread_mutex_unlock(&comm->lock);
    hal_status_t st = comm->ops->mem_ipc_open(comm->device->impl, handle, &p, &size, &cookie);
    if (st != HAL_OK)
        return hal_backend_error(st, comm->ops, "mem_ipc_open");
    pthread_mutex_lock(&comm->lock);
    comm->mappings[comm->mapping_count++] = (comm_ipc_mapping_t){ p, cookie };
    pthread_mutex_unlock(&comm->lock);
    *ptr = p;
    return HAL_OK;
}

static void comm_ipc_close(void *ctx, void *ptr)
{
    struct hal_comm_s *comm = ctx;
    pthread_mutex_lock(&comm->lock);
    for (size_t i = 0; i < comm->mapping_count; i++) {
        if (comm->mappings[i].ptr == ptr) {
            void *cookie = comm->mappings[i].cookie;
            comm->mappings[i] = comm->mappings[--comm->mapping_count];
            pthread_mutex_unlock(&comm->lock);
            comm->ops->mem_ipc_close(comm->device->impl, ptr, cookie);
            return;
        }
    }
    pthread_mutex_unlock(&comm->lock);
}

/* ---- init ---- */

static hal_status_t bootstrap_allgather(void *b, const void *mine, size_t size, void *out)
{
    return hal_bootstrap_allgather(b, mine, size, out);
}

static hal_status_t bootstrap_broadcast(void *b, void *data, size_t size, int root)
{
    return hal_bootstrap_broadcast(b, data, size, root);
}

/* Sets one of the objects hal_comm_abort reaches from other threads. Under the lock, so that an
 * abort never touches an object being destroyed. */
#define PUBLISH(comm, field, value)          \
    do {                                     \
        pthread_mutex_lock(&(comm)->lock);   \
        (comm)->field = (value);             \
        pthread_mutex_unlock(&(comm)->lock); \
    } while (0)

/* Connects, then sets up the engine, the native communicator and staging. On failure
 * everything made here is released and the status returned (message set). */
static hal_status_t comm_setup(struct hal_comm_s *comm)
{
    static const char call[] = "hal_comm_init";
    const hal_backend_ops_t *ops = comm->ops;
    hal_status_t st;
    hal_bootstrap_t *bootstrap = NULL;
    hal_engine_comm_t *engine = NULL;
    HAL_CHECK(hal_bootstrap_create(&comm->id, comm->nranks, comm->rank,
                                   comm->has_store ? &comm->store : NULL, comm->timeout_ms,
                                   &bootstrap));
    /* Published before the rendezvous, so hal_comm_abort can cut it short. */
    PUBLISH(comm, bootstrap, bootstrap);
    HAL_CHECK_GOTO(hal_bootstrap_join(bootstrap), st, out_bootstrap);
    comm->ipc = (hal_engine_ipc_t){ comm, comm_ipc_open, comm_ipc_close };
    hal_engine_config_t engine_config = {
        .bootstrap = bootstrap,
        .timeout_ms = comm->timeout_ms,
        .ipc = comm->use_ipc ? &comm->ipc : NULL,
    };
    HAL_CHECK_GOTO(hal_engine_init(&engine_config, &engine), st, out_bootstrap);
    PUBLISH(comm, engine, engine);
    if (ops->comm_init) {
        hal_backend_comm_args_t args = {
            .struct_size = sizeof(args),
            .nranks = comm->nranks,
            .rank = comm->rank,
            .timeout_ms = comm->timeout_ms,
            .bootstrap = comm->bootstrap,
            .allgather = bootstrap_allgather,
            .broadcast = bootstrap_broadcast,
        };
        st = ops->comm_init(comm->device->impl, &args, &comm->native);
        if (st != HAL_OK) {
            hal_backend_error(st, ops, call);
            goto out_engine;
        }
    }
    if (!comm->host_addressable) {
        hal_allocator_config_t cfg = HAL_ALLOCATOR_CONFIG_INIT;
        cfg.kind = HAL_MEM_KIND_HOST_PINNED;
        HAL_CHECK_GOTO(hal_allocator_create(comm->device, &cfg, &comm->staging), st, out_native);
    }
    return HAL_OK;

out_native:
    if (comm->native && ops->comm_destroy)
        ops->comm_destroy(comm->native);
    comm->native = NULL;
out_engine:
    PUBLISH(comm, engine, NULL);
    hal_engine_destroy(engine);
out_bootstrap:
    PUBLISH(comm, bootstrap, NULL);
    hal_bootstrap_destroy(bootstrap);
    return st;
}

static void finish_init(struct hal_comm_s *comm, hal_status_t st)
{
    pthread_mutex_lock(&comm->lock);
    if (comm->async_error == HAL_IN_PROGRESS || comm->async_error == HAL_OK) {
        if (st != HAL_OK)
            snprintf(comm->message, sizeof(comm->message), "%s", hal_last_error_message());
        set_async_error(comm, st);
    }
    __atomic_store_n(&comm->init_done, true, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&comm->cond);
    pthread_mutex_unlock(&comm->lock);
}

static void *init_thread_main(void *arg)
{
    struct hal_comm_s *comm = arg;
    finish_init(comm, comm_setup(comm));
    return NULL;
}

static void release_comm(struct hal_comm_s *comm)
{
    for (size_t i = 0; i < comm->mark_count; i++)
        comm->ops->event_destroy(comm->marks[i].event);
    free(comm->marks);
    free(comm->mappings);
    free(comm->job_pool);
    pthread_cond_destroy(&comm->cond);
    pthread_mutex_destroy(&comm->lock);
    hal_handle_release(comm, comm->device->backend->validate);
}

static void comm_close_device(struct hal_device_s *device);

hal_status_t hal_comm_init(const hal_unique_id_t *id, int nranks, int rank, hal_device_t device,
                           const hal_comm_config_t *config, hal_comm_t *out)
{
    static const char call[] = "hal_comm_init";
    HAL_CHECK_DEVICE(device, call);
    const hal_backend_ops_t *ops = device->ops;
    if (!id || !out)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call, "%s is NULL",
                         id ? "comm" : "id");
    if (nranks < 1 || nranks > HAL_COMM_MAX_RANKS || rank < 0 || rank >= nranks)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
                         "rank %d of %d is invalid (1 <= nranks <= %d, 0 <= rank < nranks)", rank,
                         nranks, HAL_COMM_MAX_RANKS);
    if (config && config->struct_size < sizeof(hal_comm_config_t))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
                         "config->struct_size %zu is smaller than the 1.1 struct (%zu)",
                         config->struct_size, sizeof(hal_comm_config_t));
    if (config && config->blocking > 1)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
                         "config->blocking must be 0 or 1");
    if (config && config->store &&
        (config->store->struct_size < sizeof(hal_comm_store_t) || !config->store->set ||
         !config->store->get))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
                         "config->store is incomplete (struct_size, set and get are required)");
    uint8_t nonce[HAL_BOOTSTRAP_NONCE_BYTES];
    HAL_CHECK(hal_bootstrap_parse_id(id, nonce));
    uint32_t timeout = config && config->timeout_ms ? config->timeout_ms : 0;
    if (!timeout)
        HAL_CHECK(default_timeout(&timeout, call));
    size_t pipe_chunk;
    HAL_CHECK(hal_comm_pipeline_chunk(call, &pipe_chunk));

    struct hal_comm_s *comm = hal_handle_alloc(sizeof(*comm));
    if (!comm)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, ops->name, call, "out of host memory");
    comm->ops = ops;
    comm->device = device;
    comm->nranks = nranks;
    comm->rank = rank;
    comm->timeout_ms = timeout;
    comm->pipe_chunk = pipe_chunk;
    comm->host_addressable = device->props.host_addressable != 0;
    comm->use_ipc = comm->host_addressable && (device->props.capabilities & HAL_DEVICE_CAP_IPC) &&
                    ops->mem_ipc_export && ops->mem_ipc_open && ops->mem_ipc_close;
    comm->id = *id;
    if (config && config->store) {
        comm->store = *config->store;
        comm->has_store = true;
    }
    pthread_mutex_init(&comm->lock, NULL);
    pthread_cond_init(&comm->cond, NULL);
    hal_live_init(&comm->link);
    bool blocking = !config || config->blocking;

    hal_status_t st;
    if (blocking) {
        st = comm_setup(comm);
        if (st != HAL_OK) {
            release_comm(comm);
            return st;
        }
        comm->init_done = true;
    } else {
        comm->async_error = HAL_IN_PROGRESS; /* nobody else sees the object yet */
        if (pthread_create(&comm->init_thread, NULL, init_thread_main, comm) != 0) {
            release_comm(comm);
            return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, ops->name, call,
                             "cannot start the init thread");
        }
        comm->has_init_thread = true;
    }
    comm->obj.magic = HAL_MAGIC_COMM;
    /* Every init stores the same value; atomic, because inits run concurrently. */
    __atomic_store_n(&hal_comm_close_device_hook, comm_close_device, __ATOMIC_RELEASE);
    pthread_mutex_lock(&device->lock);
    hal_live_insert(&device->comms, &comm->link, &comm->obj);
    pthread_mutex_unlock(&device->lock);
    *out = comm;
    return blocking ? HAL_OK : HAL_IN_PROGRESS;
}

hal_status_t hal_comm_get_info(hal_comm_t comm, int *nranks, int *rank, hal_device_t *device)
{
    HAL_CHECK_COMM(comm, "hal_comm_get_info");
    if (nranks)
        *nranks = comm->nranks;
    if (rank)
        *rank = comm->rank;
    if (device)
        *device = comm->device;
    return HAL_OK;
}

hal_status_t hal_comm_get_async_error(hal_comm_t comm, hal_status_t *async_error)
{
    static const char call[] = "hal_comm_get_async_error";
    HAL_CHECK_COMM(comm, call);
    HAL_CHECK_NOT_NULL(async_error, comm->ops->name, call);
    pthread_mutex_lock(&comm->lock);
    hal_status_t st = comm->async_error;
    pthread_mutex_unlock(&comm->lock);
    if (st == HAL_OK && comm->native && comm->ops->comm_get_async_error)
        st = comm->ops->comm_get_async_error(comm->native);
    *async_error = st;
    return HAL_OK;
}

hal_status_t hal_comm_get_native_handle(hal_comm_t comm, uintptr_t *native)
{
    static const char call[] = "hal_comm_get_native_handle";
    HAL_CHECK_COMM(comm, call);
    HAL_CHECK_NOT_NULL(native, comm->ops->name, call);
    if (!comm->native || !comm->ops->comm_get_native_handle)
        return hal_error(HAL_ERROR_UNSUPPORTED, comm->ops->name, call,
                         "the HAL runs this communicator's collectives itself; there is no native "
                         "communicator");
    return hal_finish(comm->ops->comm_get_native_handle(comm->native, native), comm->ops, call);
}

/* Waits until no host job of the communicator is queued or running. */
static void wait_idle(struct hal_comm_s *comm)
{
    pthread_mutex_lock(&comm->lock);
    __atomic_fetch_add(&comm->idle_waiters, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&comm->pending, __ATOMIC_SEQ_CST) > 0)
        pthread_cond_wait(&comm->cond, &comm->lock);
    __atomic_fetch_sub(&comm->idle_waiters, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&comm->lock);
}

hal_status_t hal_comm_finalize(hal_comm_t comm)
{
    static const char call[] = "hal_comm_finalize";
    HAL_CHECK_COMM(comm, call);
    hal_comm_wait_init(comm);
    wait_idle(comm);
    wait_native(comm);
    return hal_comm_sticky(comm, call);
}

static void abort_comm(struct hal_comm_s *comm)
{
    pthread_mutex_lock(&comm->lock);
    if (comm->async_error == HAL_OK || comm->async_error == HAL_IN_PROGRESS) {
        snprintf(comm->message, sizeof(comm->message), "%s: hal_comm_abort was called",
                 comm->ops->name);
        set_async_error(comm, HAL_ERROR_ABORTED);
    }
    /* The bootstrap and engine are set by the init (possibly still running on its thread);
     * aborting the bootstrap unblocks a rendezvous in progress. Under the lock: see PUBLISH. */
    if (comm->bootstrap)
        hal_bootstrap_abort(comm->bootstrap);
    if (comm->engine)
        hal_engine_abort(comm->engine);
    pthread_mutex_unlock(&comm->lock);
    if (comm->native && comm->ops->comm_abort)
        comm->ops->comm_abort(comm->native);
}

hal_status_t hal_comm_abort(hal_comm_t comm)
{
    HAL_CHECK_COMM(comm, "hal_comm_abort");
    abort_comm(comm);
    return HAL_OK;
}

/* Tears down a communicator already unlinked from its device. */
static hal_status_t destroy_comm(struct hal_comm_s *comm, const char *call)
{
    if (comm->has_init_thread)
        pthread_join(comm->init_thread, NULL);
    wait_idle(comm);
    wait_native(comm);
    hal_status_t st = hal_comm_sticky(comm, call);
    if (st == HAL_ERROR_ABORTED)
        st = HAL_OK; /* an abort the application asked for is not a failure of destroy */
    hal_comm_pipeline_destroy(comm);
    if (comm->staging)
        hal_allocator_destroy(comm->staging);
    if (comm->native && comm->ops->comm_destroy)
        comm->ops->comm_destroy(comm->native);
    if (comm->engine)
        hal_engine_destroy(comm->engine);
    if (comm->bootstrap)
        hal_bootstrap_destroy(comm->bootstrap);
    release_comm(comm);
    return st;
}

hal_status_t hal_comm_destroy(hal_comm_t comm)
{
    static const char call[] = "hal_comm_destroy";
    HAL_CHECK_COMM(comm, call);
    struct hal_device_s *d = comm->device;
    pthread_mutex_lock(&d->lock);
    hal_live_remove(&comm->link);
    pthread_mutex_unlock(&d->lock);
    return destroy_comm(comm, call);
}

static void comm_close_device(struct hal_device_s *d)
{
    for (;;) {
        pthread_mutex_lock(&d->lock);
        if (d->comms.next == &d->comms) {
            pthread_mutex_unlock(&d->lock);
            return;
        }
        struct hal_comm_s *comm = HAL_CONTAINER_OF(d->comms.next, struct hal_comm_s, link);
        hal_live_remove(&comm->link);
        pthread_mutex_unlock(&d->lock);
        hal_layers_report_leak(d->backend, "hal_comm_t", comm, 0);
        abort_comm(comm);
        destroy_comm(comm, "hal_backend_close");
    }
}
