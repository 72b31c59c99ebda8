/* SPDX-License-Identifier: Apache-2.0 */
/* Host collective engine, placement and lifecycle: at init every rank publishes where it runs
 * (host, process) and the engine picks the transport. Ranks of one host share memory: threads
 * of one process through the process's registry, other processes through POSIX shared-memory
 * segments that are unlinked as soon as every peer mapped them (a crash later leaks nothing).
 * When the ranks span several hosts everything goes through the bootstrap's TCP connections
 * (correct rather than fast). Then: argument checks, dispatch, abort and destroy. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hal/src/comm/engine_impl.h"
#include "hal/src/core.h"

#define ENG_HELLO_MAGIC        UINT64_C(0x48414c454e474832) /* "HALENGH2" */
#define ENG_HELLO_IPC          (1u << 0)                    /* the rank can map IPC handles */
#define ENG_HELLO_NO_SHM       (1u << 1) /* HAL_COMM_SHM_DISABLE: use TCP even on one host */
#define ENG_DEFAULT_TIMEOUT_MS 300000u

/* What each rank publishes at init. */
typedef struct eng_hello {
    uint64_t magic;
    uint64_t host_hash;
    uint64_t process_token; /* random per process: tells processes apart where pids collide */
    int32_t pid;
    uint32_t flags;
    uint32_t slot_bytes; /* build constants that must agree for the areas to match */
    uint32_t line;
    uint64_t pidns; /* pid namespace (inode of /proc/self/ns/pid; 0: unknown) */
} eng_hello_t;

static uint64_t process_token;
static pthread_once_t token_once = PTHREAD_ONCE_INIT;

static void token_child(void)
{
    process_token = 0; /* a forked child is another process: draw again */
}

static void token_init(void)
{
    pthread_atfork(NULL, NULL, token_child);
}

static uint64_t get_process_token(void)
{
    pthread_once(&token_once, token_init);
    uint64_t t = __atomic_load_n(&process_token, __ATOMIC_ACQUIRE);
    if (t)
        return t;
    uint64_t fresh = 0;
    if (getrandom(&fresh, sizeof(fresh), 0) != (ssize_t)sizeof(fresh))
        fresh = eng_now_ns() ^ ((uint64_t)getpid() << 32);
    fresh |= 1; /* never 0 */
    uint64_t expected = 0;
    if (!__atomic_compare_exchange_n(&process_token, &expected, fresh, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return expected;
    return fresh;
}

static const char *const kind_names[] = {
    [HAL_ENGINE_ALLREDUCE] = "allreduce",
    [HAL_ENGINE_BROADCAST] = "broadcast",
    [HAL_ENGINE_REDUCE] = "reduce",
    [HAL_ENGINE_ALLGATHER] = "allgather",
    [HAL_ENGINE_REDUCE_SCATTER] = "reduce_scatter",
    [HAL_ENGINE_ALLTOALL] = "alltoall",
    [HAL_ENGINE_SEND] = "send",
    [HAL_ENGINE_RECV] = "recv",
    [HAL_ENGINE_BARRIER] = "barrier",
};

static const char *const dtype_names[HAL_DTYPE_COUNT] = {
    "i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16", "f8_e4m3", "f8_e5m2",
};

static const char *const op_names[HAL_REDOP_COUNT] = { "sum", "prod", "max", "min", "avg" };

const char *eng_kind_name(hal_engine_kind_t kind)
{
    return (unsigned)kind <= HAL_ENGINE_BARRIER ? kind_names[kind] : "collective";
}

const char *eng_dtype_name(hal_dtype_t dtype)
{
    return (unsigned)dtype < HAL_DTYPE_COUNT ? dtype_names[dtype] : "unknown";
}

const char *eng_op_name(hal_redop_t op)
{
    return (unsigned)op < HAL_REDOP_COUNT ? op_names[op] : "unknown";
}

bool hal_engine_supports(hal_dtype_t dtype, hal_redop_t op)
{
    return eng_reducer(dtype, op) != NULL;
}

static uint64_t pid_namespace(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static int open_pidfd(int pid)
{
#ifdef SYS_pidfd_open
    long fd = syscall(SYS_pidfd_open, pid, 0);
    return fd < 0 ? -1 : (int)fd;
#else
    (void)pid;
    return -1;
#endif
}

/* Every rank contributes its status of a setup step. Returns the bootstrap's failure, else
 * HAL_OK with *failed set to the first rank whose step failed (-1: none) and *why to its
 * status, the same on every rank. */
static hal_status_t agree(hal_engine_comm_t *c, hal_status_t mine, int *failed, hal_status_t *why)
{
    int32_t *all = calloc((size_t)c->nranks, sizeof(*all));
    if (!all)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, "hal", "comm init", "out of host memory");
    int32_t v = (int32_t)mine;
    hal_status_t st = hal_bootstrap_allgather(c->bootstrap, &v, sizeof(v), all);
    *failed = -1;
    *why = HAL_OK;
    for (int i = 0; i < c->nranks && st == HAL_OK && *failed < 0; i++) {
        if (all[i] != HAL_OK) {
            *failed = i;
            *why = (hal_status_t)all[i];
        }
    }
    free(all);
    return st;
}

static void unlink_own(hal_engine_comm_t *c)
{
    if (__atomic_exchange_n(&c->shm_linked, 0, __ATOMIC_ACQ_REL))
        shm_unlink(c->shm_name);
}

/* Internal result of local_setup: the segments cannot be shared (ranks in separate containers
 * that share a host name, say); every rank falls back to TCP. */
#define ENG_FALL_BACK ((hal_status_t)0x7ffffffd)

/* Sets up the areas of a job whose ranks all run on this host. */
static hal_status_t local_setup(hal_engine_comm_t *c, const eng_hello_t *hellos)
{
    const uint8_t *nonce = hal_bootstrap_nonce(c->bootstrap);
    const eng_hello_t *mine = &hellos[c->rank];
    for (int p = 0; p < c->nranks; p++) {
        eng_peer_t *peer = &c->peers[p];
        peer->pid = hellos[p].pid;
        peer->same_process =
            hellos[p].pid == mine->pid && hellos[p].process_token == mine->process_token;
        peer->ipc_table = (hellos[p].flags & ENG_HELLO_IPC) != 0;
        /* A pid means the same process only inside one pid namespace. */
        peer->watch = !peer->same_process && mine->pidns && hellos[p].pidns == mine->pidns;
        peer->pidfd = -1;
        if (!peer->same_process)
            c->multi_process = true;
    }
    eng_layout_compute(c->nranks, &c->layout);

    /* Step 1: everyone creates its area. */
    eng_shm_name(c->shm_name, sizeof(c->shm_name), nonce, c->rank);
    hal_status_t mine_st = eng_job_join(nonce, c->nranks, c->rank, c->layout.total, &c->job);
    if (mine_st == HAL_OK)
        mine_st = eng_area_create(c->job, c->rank, mine->pid, c->multi_process ? c->shm_name : NULL,
                                  &c->me);
    if (mine_st == HAL_OK && c->multi_process)
        __atomic_store_n(&c->shm_linked, 1, __ATOMIC_RELEASE);
    int failed;
    hal_status_t why;
    HAL_CHECK(agree(c, mine_st, &failed, &why));
    if (failed == c->rank)
        return mine_st;
    if (failed >= 0)
        return hal_error(HAL_ERROR_REMOTE, "hal", "comm init",
                         "rank %d failed to create its shared memory (%s)", failed,
                         hal_status_string(why));

    /* Step 2: everyone maps the others'. */
    mine_st = HAL_OK;
    for (int p = 0; p < c->nranks && mine_st == HAL_OK; p++) {
        eng_peer_t *peer = &c->peers[p];
        if (p == c->rank) {
            peer->ctrl = c->me;
            continue;
        }
        char name[64];
        eng_shm_name(name, sizeof(name), nonce, p);
        mine_st = eng_area_get(c->job, p, !peer->same_process, name, &peer->ctrl);
        if (mine_st == HAL_OK && peer->watch)
            peer->pidfd = open_pidfd(peer->pid);
    }
    hal_status_t st = agree(c, mine_st, &failed, &why);
    /* Step 3: every peer holds a mapping (or failed): the names are no longer needed. */
    unlink_own(c);
    if (st != HAL_OK || failed < 0)
        return st;
    if (c->multi_process)
        return ENG_FALL_BACK;
    return failed == c->rank ? mine_st
                             : hal_error(HAL_ERROR_REMOTE, "hal", "comm init",
                                         "rank %d failed to find its peers' areas (%s)", failed,
                                         hal_status_string(why));
}

/* Undoes local_setup for the TCP fallback. */
static void local_teardown(hal_engine_comm_t *c)
{
    for (int p = 0; p < c->nranks; p++) {
        if (c->peers[p].pidfd >= 0)
            close(c->peers[p].pidfd);
        c->peers[p] = (eng_peer_t){ .pidfd = -1 };
    }
    if (c->job)
        eng_job_leave(c->job, c->rank);
    c->job = NULL;
    c->me = NULL;
    c->multi_process = false;
}

static hal_status_t alloc_arrays(hal_engine_comm_t *c)
{
    size_t n = (size_t)c->nranks;
    c->peers = calloc(n, sizeof(*c->peers));
    c->send_seq = calloc(n, sizeof(uint64_t));
    c->recv_seq = calloc(n, sizeof(uint64_t));
    c->ring_sent = calloc(n, sizeof(uint64_t));
    c->ring_took = calloc(n, sizeof(uint64_t));
    c->srcs = calloc(n, sizeof(*c->srcs));
    c->send_at = calloc(n, sizeof(*c->send_at));
    c->recv_at = calloc(n, sizeof(*c->recv_at));
    c->tcp_send_seq = calloc(n, sizeof(uint64_t));
    c->tcp_recv_seq = calloc(n, sizeof(uint64_t));
    c->scratch = aligned_alloc(64, ENG_BLOCK);
    if (!c->peers || !c->send_seq || !c->recv_seq || !c->ring_sent || !c->ring_took || !c->srcs ||
        !c->send_at || !c->recv_at || !c->tcp_send_seq || !c->tcp_recv_seq || !c->scratch)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, "hal", "comm init", "out of host memory");
    for (size_t i = 0; i < n; i++)
        c->peers[i].pidfd = -1;
    return HAL_OK;
}

static void free_comm(hal_engine_comm_t *c)
{
    if (c->peers) {
        for (int p = 0; p < c->nranks; p++)
            if (c->peers[p].pidfd >= 0)
                close(c->peers[p].pidfd);
    }
    eng_ipc_close_all(c);
    if (c->job)
        eng_job_leave(c->job, c->rank);
    eng_tcp_release(c);
    free(c->peers);
    free(c->send_seq);
    free(c->recv_seq);
    free(c->ring_sent);
    free(c->ring_took);
    free(c->srcs);
    free(c->send_at);
    free(c->recv_at);
    free(c->tcp_send_seq);
    free(c->tcp_recv_seq);
    free(c->scratch);
    pthread_mutex_destroy(&c->message_lock);
    free(c);
}

hal_status_t hal_engine_init(const hal_engine_config_t *config, hal_engine_comm_t **out)
{
    static const char call[] = "comm init";
    if (!config || !config->bootstrap || !out)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, "hal", call,
                         "config, its bootstrap and out must not be NULL");
    if (config->ipc && (!config->ipc->open || !config->ipc->close))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, "hal", call,
                         "the IPC table needs both open and close");
    hal_engine_comm_t *c = calloc(1, sizeof(*c));
    if (!c)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, "hal", call, "out of host memory");
    pthread_mutex_init(&c->message_lock, NULL);
    c->bootstrap = config->bootstrap;
    c->nranks = hal_bootstrap_nranks(config->bootstrap);
    c->rank = hal_bootstrap_rank(config->bootstrap);
    c->timeout_ms = config->timeout_ms ? config->timeout_ms : ENG_DEFAULT_TIMEOUT_MS;
    eng_choose_spin(c);
    if (config->ipc) {
        c->has_ipc = true;
        c->ipc = *config->ipc;
    }
    hal_status_t st = alloc_arrays(c);
    eng_hello_t *hellos = calloc((size_t)c->nranks, sizeof(*hellos));
    if (st == HAL_OK && !hellos)
        st = hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, "hal", call, "out of host memory");
    if (st != HAL_OK)
        goto out_free;

    const hal_bootstrap_peer_t *self = hal_bootstrap_peer(config->bootstrap, c->rank);
    const char *no_shm = getenv("HAL_COMM_SHM_DISABLE");
    eng_hello_t mine = {
        .magic = ENG_HELLO_MAGIC,
        .host_hash = self ? self->host_hash : 0,
        .process_token = get_process_token(),
        .pid = (int32_t)getpid(),
        .flags = (c->has_ipc ? ENG_HELLO_IPC : 0u) |
                 (no_shm && *no_shm && strcmp(no_shm, "0") != 0 ? ENG_HELLO_NO_SHM : 0u),
        .slot_bytes = ENG_SLOT_BYTES,
        .line = ENG_LINE,
        .pidns = pid_namespace(),
    };
    HAL_CHECK_GOTO(hal_bootstrap_allgather(c->bootstrap, &mine, sizeof(mine), hellos), st,
                   out_free);
    for (int p = 0; p < c->nranks; p++) {
        const eng_hello_t *h = &hellos[p];
        if (h->magic != ENG_HELLO_MAGIC || h->slot_bytes != mine.slot_bytes ||
            h->line != mine.line) {
            st = hal_error(HAL_ERROR_INVALID_ARGUMENT, "hal", call,
                           "rank %d runs an incompatible collective engine", p);
            goto out_free;
        }
        if (h->host_hash != mine.host_hash || (h->flags & ENG_HELLO_NO_SHM))
            c->tcp = true;
    }
    if (!c->tcp) {
        st = local_setup(c, hellos);
        if (st == ENG_FALL_BACK) {
            local_teardown(c);
            c->tcp = true;
            st = HAL_OK;
        }
        if (st != HAL_OK)
            goto out_unlink;
    }
    free(hellos);
    *out = c;
    return HAL_OK;

out_unlink:
    /* A rank that died during setup cannot unlink its own segment: every name of the job is
     * derived from its nonce, so the survivors remove all of them. */
    unlink_own(c);
    if (c->multi_process) {
        for (int p = 0; p < c->nranks; p++) {
            if (p == c->rank || c->peers[p].same_process)
                continue;
            char name[64];
            eng_shm_name(name, sizeof(name), hal_bootstrap_nonce(c->bootstrap), p);
            shm_unlink(name);
        }
    }
out_free:
    free(hellos);
    free_comm(c);
    return st;
}

/* Checks one operation on its own (the front end did too; the engine must not trust a
 * corrupt request with shared memory). */
static hal_status_t check_op(hal_engine_comm_t *c, const hal_engine_op_t *op)
{
    const char *call = eng_kind_name(op->kind);
    if ((unsigned)op->kind > HAL_ENGINE_BARRIER)
        return eng_fail(c, HAL_ERROR_INVALID_ARGUMENT, "engine run", "unknown operation kind %d",
                        (int)op->kind);
    if (op->kind == HAL_ENGINE_BARRIER)
        return HAL_OK;
    size_t esize = eng_dtype_size(op->dtype);
    if (!esize)
        return eng_fail(c, HAL_ERROR_INVALID_ARGUMENT, call, "unknown dtype %d", (int)op->dtype);
    bool reduces = op->kind == HAL_ENGINE_ALLREDUCE || op->kind == HAL_ENGINE_REDUCE ||
                   op->kind == HAL_ENGINE_REDUCE_SCATTER;
    if (reduces && !eng_reducer(op->dtype, op->op))
        return eng_fail(c, HAL_ERROR_INVALID_ARGUMENT, call, "unknown reduction operation %d",
                        (int)op->op);
    bool rooted = op->kind == HAL_ENGINE_BROADCAST || op->kind == HAL_ENGINE_REDUCE ||
                  op->kind == HAL_ENGINE_SEND || op->kind == HAL_ENGINE_RECV;
    if (rooted && (op->root < 0 || op->root >= c->nranks))
        return eng_fail(c, HAL_ERROR_INVALID_ARGUMENT, call, "%s %d is out of range [0, %d)",
                        op->kind == HAL_ENGINE_SEND || op->kind == HAL_ENGINE_RECV ? "peer"
                                                                                   : "root",
                        op->root, c->nranks);
    if (op->count > SIZE_MAX / esize / (size_t)c->nranks)
        return eng_fail(c, HAL_ERROR_INVALID_ARGUMENT, call, "count %zu is too large", op->count);
    if (op->count == 0)
        return HAL_OK;
    bool is_root = op->root == c->rank;
    bool need_send, need_recv;
    switch (op->kind) {
    case HAL_ENGINE_BROADCAST:
        need_send = is_root;
        need_recv = true;
        break;
    case HAL_ENGINE_REDUCE:
        need_send = true;
        need_recv = is_root;
        break;
    case HAL_ENGINE_SEND:
        need_send = true;
        need_recv = false;
        break;
    case HAL_ENGINE_RECV:
        need_send = false;
        need_recv = true;
        break;
    default:
        need_send = need_recv = true;
        break;
    }
    if ((need_send && !op->sendbuf) || (need_recv && !op->recvbuf))
        return eng_fail(c, HAL_ERROR_INVALID_ARGUMENT, call, "%s is NULL with count %zu",
                        need_send && !op->sendbuf ? "sendbuf" : "recvbuf", op->count);
    return HAL_OK;
}

hal_status_t hal_engine_run(hal_engine_comm_t *c, const hal_engine_op_t *ops, size_t n)
{
    if (!c || (n && !ops))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, "hal", "engine run",
                         "the communicator and the operations must not be NULL");
    const char *call = n ? eng_kind_name(ops[0].kind) : "group";
    HAL_CHECK(eng_sticky(c, call));
    if (__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE))
        return eng_fail(c, HAL_ERROR_ABORTED, call, "aborted on this rank");
    bool p2p = false;
    for (size_t i = 0; i < n; i++) {
        HAL_CHECK(check_op(c, &ops[i]));
        p2p |= ops[i].kind == HAL_ENGINE_SEND || ops[i].kind == HAL_ENGINE_RECV;
    }
    c->ops_run++;
    if (!c->tcp)
        eng_note_cpu(c);
    /* Collectives of a group run in order, then its sends and receives together: the same
     * order on every rank whatever the order of the calls inside the group. */
    for (size_t i = 0; i < n; i++) {
        if (ops[i].kind == HAL_ENGINE_SEND || ops[i].kind == HAL_ENGINE_RECV)
            continue;
        HAL_CHECK(c->tcp ? eng_tcp_collective(c, &ops[i]) : eng_local_collective(c, &ops[i]));
    }
    if (!p2p)
        return HAL_OK;
    HAL_CHECK(eng_self_p2p(c, ops, n));
    return c->tcp ? eng_tcp_p2p(c, ops, n) : eng_local_p2p(c, ops, n);
}

void hal_engine_abort(hal_engine_comm_t *c)
{
    if (!c)
        return;
    __atomic_store_n(&c->aborted, 1, __ATOMIC_RELEASE);
    uint32_t expected = HAL_OK;
    if (__atomic_compare_exchange_n(&c->status, &expected, (uint32_t)HAL_ERROR_ABORTED, false,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&c->message_lock);
        snprintf(c->message, sizeof(c->message), "aborted on this rank");
        pthread_mutex_unlock(&c->message_lock);
    }
    eng_publish_state(c, (uint64_t)HAL_ERROR_ABORTED);
    unlink_own(c);
    if (c->tcp)
        hal_bootstrap_abort(c->bootstrap);
}

void hal_engine_destroy(hal_engine_comm_t *c)
{
    if (!c)
        return;
    /* Peers still waiting for this rank learn it is gone instead of timing out. */
    eng_publish_state(c, ENG_STATE_GONE);
    unlink_own(c);
    free_comm(c);
}
