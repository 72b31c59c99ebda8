/* SPDX-License-Identifier: Apache-2.0 */
/* libnrt emulator, out-of-NEFF collectives (emu_cc_internal.h has the overview): the shared
 * state, the global communicator (nrt_cc_global_comm_init), nrta_cc_prepare and nrta_cc_schedule.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hal_backends/trainium/emulator/emu_cc_internal.h"

#define CC_CTX_MAGIC          0x4e434358u /* "NCCX" */
#define CC_QUEUE_DEPTH        64u         /* requests queued per core before NRT_QUEUE_FULL */
#define CC_MAX_TENSORS        64u         /* tensors per list */
#define CC_DEFAULT_TIMEOUT_MS 30000u      /* the runtime's collective timeout from SDK 2.29 on */

/* ---- State ------------------------------------------------------------------------------- */

cc_state_t cc = { .lock = PTHREAD_MUTEX_INITIALIZER,
                  .cond = PTHREAD_COND_INITIALIZER,
                  .wake = { -1, -1 } };

atomic_bool cc_stopping;

/* ---- Small helpers ------------------------------------------------------------------------- */

/* The collective's name, for messages. */
const char *cc_op_name(nrt_cc_op_type_t cc_op)
{
    switch (cc_op) {
    case NRT_CC_ALLGATHER:
        return "all-gather";
    case NRT_CC_ALLREDUCE:
        return "all-reduce";
    case NRT_CC_REDUCESCATTER:
        return "reduce-scatter";
    }
    return "?";
}

/* FNV-1a of a replica group, so that ranks compare their groups through the wire header. */
static uint32_t hash_group(const uint32_t *group, uint32_t n)
{
    uint32_t h = 2166136261u;
    for (uint32_t i = 0; i < n; i++) {
        h ^= group[i];
        h *= 16777619u;
    }
    return h ^ n;
}

/* The sequence id of request `num` of core vnc's collectives queue 0: the execution unit id
 * (core, unit type, queue) in the top 16 bits. */
nrta_seq_t cc_make_seq(uint32_t vnc, uint64_t num)
{
    uint64_t xu = ((uint64_t)vnc << 8) | ((uint64_t)NRTA_XU_COLLECTIVES << 4);
    return (xu << 48) | (num & NRTA_SEQ_NUM_MASK);
}

/* Out-of-NEFF collectives came with libnrt 2.30 (SDK 2.28). Caller holds emu_rt.lock. */
NRT_STATUS cc_available(const char *api)
{
    if (emu_version_at_least(2, 30))
        return NRT_SUCCESS;
    EMU_ERR(api,
            "not in libnrt %llu.%llu (emulated, NEURON_EMU_RUNTIME_VERSION): out-of-NEFF "
            "collectives and the async API came with libnrt 2.30 (Neuron SDK 2.28)",
            (unsigned long long)emu_rt.version[0], (unsigned long long)emu_rt.version[1]);
    return NRT_FAILURE;
}

/* NEURON_EMU_CC_TIMEOUT_MS in nanoseconds (default 30 s); NRT_INVALID when malformed. */
static NRT_STATUS timeout_from_env(const char *api, uint64_t *ns)
{
    uint64_t ms = CC_DEFAULT_TIMEOUT_MS;
    const char *env = emu_getenv("NEURON_EMU_CC_TIMEOUT_MS");
    if (env != NULL && (!emu_parse_u64(env, &ms) || ms == 0 || ms > 86400000u)) {
        EMU_ERR(api, "NEURON_EMU_CC_TIMEOUT_MS=%s is not a number of milliseconds (1 to 86400000)",
                env);
        return NRT_INVALID;
    }
    *ns = ms * 1000000u;
    return NRT_SUCCESS;
}

/* Closes a member's connections to its peers and forgets them. */
void cc_close_fds(cc_member_t *m)
{
    for (uint32_t i = 0; m->fds != NULL && i < m->g_count; i++)
        if (m->fds[i] >= 0)
            close(m->fds[i]);
    free(m->fds);
    m->fds = NULL;
}

/* Makes core vnc global device g_device_id of g_device_count: rendezvous through
 * NEURON_RT_ROOT_COMM_ID, then a connection to every other member and a queue thread. */
NRT_EMU_EXPORT_RECENT NRT_STATUS nrt_cc_global_comm_init(uint32_t vnc, uint32_t g_device_id,
                                                         uint32_t g_device_count)
{
    static const char api[] = "nrt_cc_global_comm_init";
    NRT_STATUS st = emu_enter(api);
    if (st != NRT_SUCCESS)
        return st;
    st = cc_available(api);
    uint64_t timeout_ns = 0;
    if (st == NRT_SUCCESS)
        st = timeout_from_env(api, &timeout_ns);
    if (st == NRT_SUCCESS && vnc >= emu_rt.vnc_count) {
        EMU_ERR(api, "vnc %u is not visible (this process has %u NeuronCores)", vnc,
                emu_rt.vnc_count);
        st = NRT_INVALID;
    }
    if (st == NRT_SUCCESS &&
        (g_device_count == 0 || g_device_id >= g_device_count || g_device_count > 65536)) {
        EMU_ERR(api, "global device %u of %u is not valid", g_device_id, g_device_count);
        st = NRT_INVALID;
    }
    struct sockaddr_in root;
    const char *root_text = emu_getenv("NEURON_RT_ROOT_COMM_ID");
    if (st == NRT_SUCCESS && g_device_count > 1 &&
        (root_text == NULL || !cc_parse_root(root_text, &root))) {
        EMU_ERR(api,
                "NEURON_RT_ROOT_COMM_ID=%s: the root of the global communicator must be set as "
                "ip:port (where global device 0 listens)",
                root_text != NULL ? root_text : "(unset)");
        st = NRT_INVALID;
    }
    if (st == NRT_SUCCESS) {
        pthread_mutex_lock(&cc.lock);
        cc_member_t *m = &cc.m[vnc];
        if (m->joined || m->joining) {
            EMU_ERR(api, "NeuronCore %u already belongs to a global communicator%s", vnc,
                    m->joining ? " (being built)" : "");
            st = NRT_INVALID;
        } else {
            m->joining = true;
        }
        pthread_mutex_unlock(&cc.lock);
    }
    emu_leave(); /* peers may take a while: nrt_close cancels through cc.wake instead */
    if (st != NRT_SUCCESS)
        return st;

    int *fds = malloc(g_device_count * sizeof(*fds));
    if (fds == NULL)
        st = NRT_RESOURCE;
    for (uint32_t i = 0; fds != NULL && i < g_device_count; i++)
        fds[i] = -1;
    uint64_t deadline = emu_now_ns() + timeout_ns;
    if (st == NRT_SUCCESS && g_device_count > 1)
        st = g_device_id == 0
                 ? cc_rendezvous_root(api, &root, g_device_count, deadline, fds)
                 : cc_rendezvous_member(api, &root, g_device_id, g_device_count, deadline, fds);

    pthread_mutex_lock(&cc.lock);
    cc_member_t *m = &cc.m[vnc];
    m->joining = false;
    if (st == NRT_SUCCESS && atomic_load(&cc_stopping))
        st = NRT_CLOSED;
    m->g_id = g_device_id;
    m->g_count = g_device_count;
    m->fds = fds;
    if (st == NRT_SUCCESS) {
        m->timeout_ns = timeout_ns;
        m->issued = 0;
        atomic_store(&m->done, 0);
        if (cc_start_worker(vnc))
            m->joined = true;
        else
            st = NRT_RESOURCE;
    }
    if (st != NRT_SUCCESS)
        cc_close_fds(m);
    pthread_cond_broadcast(&cc.cond);
    pthread_mutex_unlock(&cc.lock);
    if (st == NRT_SUCCESS)
        EMU_INFO(api, "NeuronCore %u is global device %u of %u", vnc, g_device_id, g_device_count);
    else if (st == NRT_CLOSED)
        EMU_ERR(api, "nrt_close was called while the global communicator was being built");
    return st;
}

/* ---- Prepare and schedule ------------------------------------------------------------------ */

/* Releases a context's tensor views and frees it. */
void cc_context_free(struct nrt_cc_context *ctx)
{
    for (size_t i = 0; ctx->in != NULL && i < ctx->n; i++)
        emu_view_put(&ctx->in[i]);
    for (size_t i = 0; ctx->out != NULL && i < ctx->n; i++)
        emu_view_put(&ctx->out[i]);
    free(ctx->in);
    free(ctx->out);
    free(ctx->group);
    ctx->magic = 0;
    free(ctx);
}

/* Checks the replica group against the core's global communicator. Caller holds cc.lock. */
static NRT_STATUS check_comm(const char *api, const nrt_cc_comm_t *comm)
{
    if (comm->vnc >= emu_rt.vnc_count) {
        EMU_ERR(api, "comm->vnc %u is not visible", comm->vnc);
        return NRT_INVALID;
    }
    const cc_member_t *m = &cc.m[comm->vnc];
    if (!m->joined) {
        EMU_ERR(api, "NeuronCore %u has no global communicator (nrt_cc_global_comm_init)",
                comm->vnc);
        return NRT_INVALID;
    }
    if (comm->ctx_device_id != m->g_id || comm->ctx_device_count != m->g_count) {
        EMU_ERR(api, "comm names global device %u of %u; NeuronCore %u is global device %u of %u",
                comm->ctx_device_id, comm->ctx_device_count, comm->vnc, m->g_id, m->g_count);
        return NRT_INVALID;
    }
    if (comm->replica_group == NULL || comm->rank_n == 0 || comm->rank >= comm->rank_n ||
        comm->rank_n > m->g_count) {
        EMU_ERR(api, "rank %u of a replica group of %u (%s) is not valid", comm->rank, comm->rank_n,
                comm->replica_group == NULL ? "NULL" : "listed");
        return NRT_INVALID;
    }
    if (comm->replica_group[comm->rank] != m->g_id) {
        EMU_ERR(api, "replica_group[rank %u] is global device %u, not this worker's %u", comm->rank,
                comm->replica_group[comm->rank], m->g_id);
        return NRT_INVALID;
    }
    for (uint32_t i = 0; i < comm->rank_n; i++) {
        if (comm->replica_group[i] >= m->g_count) {
            EMU_ERR(api, "replica_group[%u] = %u is not a global device (0 to %u)", i,
                    comm->replica_group[i], m->g_count - 1);
            return NRT_INVALID;
        }
        for (uint32_t j = 0; j < i; j++) {
            if (comm->replica_group[i] == comm->replica_group[j]) {
                EMU_ERR(api, "global device %u is twice in the replica group",
                        comm->replica_group[i]);
                return NRT_INVALID;
            }
        }
    }
    return NRT_SUCCESS;
}

/* Takes views of a tensor list: device tensors of core vnc, sizes a multiple of esize. */
static NRT_STATUS take_list(const char *api, const char *what, const nrt_tensor_list_t *list,
                            size_t n, uint32_t vnc, size_t esize, emu_view_t *views)
{
    for (size_t i = 0; i < n; i++) {
        char name[48];
        snprintf(name, sizeof(name), "%s->tensors[%zu]", what, i);
        NRT_STATUS st = emu_view_take(api, name, list->tensors[i], &views[i]);
        if (st != NRT_SUCCESS)
            return st;
        if (emu_view_placement(&views[i]) != NRT_TENSOR_PLACEMENT_DEVICE ||
            emu_view_vnc(&views[i]) != (int)vnc) {
            EMU_ERR(api, "%s is not device memory of NeuronCore %u", name, vnc);
            return NRT_INVALID;
        }
        if (views[i].size % esize != 0) {
            EMU_ERR(api, "%s: %zu bytes is not a whole number of %zu-byte elements", name,
                    views[i].size, esize);
            return NRT_INVALID;
        }
    }
    return NRT_SUCCESS;
}

/* Checks a collective (communicator, tensors, type, operation) and makes its context. */
NRT_EMU_EXPORT_RECENT NRT_STATUS nrta_cc_prepare(nrt_cc_comm_t *comm, nrt_tensor_list_t *input,
                                                 nrt_tensor_list_t *output, nrt_dtype_t dtype,
                                                 nrt_op_type_t op, nrt_cc_op_type_t cc_op,
                                                 nrt_cc_context_t **cc_ctx)
{
    static const char api[] = "nrta_cc_prepare";
    NRT_STATUS st = emu_enter(api);
    if (st != NRT_SUCCESS)
        return st;
    st = cc_available(api);
    if (st != NRT_SUCCESS)
        goto out_leave;
    if (comm == NULL || input == NULL || output == NULL || cc_ctx == NULL ||
        input->tensors == NULL || output->tensors == NULL) {
        EMU_ERR(api, "comm, input, output, their tensors and cc_ctx must not be NULL");
        st = NRT_INVALID;
        goto out_leave;
    }
    size_t esize = cc_dtype_size(dtype);
    if (cc_op != NRT_CC_ALLGATHER && cc_op != NRT_CC_ALLREDUCE && cc_op != NRT_CC_REDUCESCATTER) {
        EMU_ERR(api, "cc_op %d is not a collective (ALLGATHER, ALLREDUCE, REDUCESCATTER)",
                (int)cc_op);
        st = NRT_INVALID;
    } else if (esize == 0) {
        EMU_ERR(api,
                "dtype 0x%x is not emulated (integers of 8 to 64 bits, FLOAT16, BFLOAT16, "
                "FLOAT32)",
                (unsigned)dtype);
        st = NRT_INVALID;
    } else if (cc_op != NRT_CC_ALLGATHER && op != NRT_OP_ADD && op != NRT_OP_MAX &&
               op != NRT_OP_MIN) {
        EMU_ERR(api, "op %d: the emulator reduces with ADD, MAX and MIN (not FMA)", (int)op);
        st = NRT_INVALID;
    } else if (input->num_tensors == 0 || input->num_tensors != output->num_tensors ||
               input->num_tensors > CC_MAX_TENSORS) {
        EMU_ERR(api, "%zu input and %zu output tensors (1 to %u, as many of each)",
                input->num_tensors, output->num_tensors, CC_MAX_TENSORS);
        st = NRT_INVALID;
    }
    if (st != NRT_SUCCESS)
        goto out_leave;
    pthread_mutex_lock(&cc.lock);
    st = check_comm(api, comm);
    pthread_mutex_unlock(&cc.lock);
    if (st != NRT_SUCCESS)
        goto out_leave;

    size_t n = input->num_tensors;
    struct nrt_cc_context *ctx = calloc(1, sizeof(*ctx));
    if (ctx != NULL) {
        ctx->in = calloc(n, sizeof(*ctx->in));
        ctx->out = calloc(n, sizeof(*ctx->out));
        ctx->group = malloc(comm->rank_n * sizeof(*ctx->group));
    }
    if (ctx == NULL || ctx->in == NULL || ctx->out == NULL || ctx->group == NULL) {
        EMU_ERR(api, "out of host memory");
        if (ctx != NULL)
            cc_context_free(ctx);
        st = NRT_RESOURCE;
        goto out_leave;
    }
    ctx->magic = CC_CTX_MAGIC;
    ctx->vnc = comm->vnc;
    ctx->cc_op = cc_op;
    ctx->dtype = dtype;
    ctx->op = op;
    ctx->esize = esize;
    ctx->rank = comm->rank;
    ctx->rank_n = comm->rank_n;
    ctx->n = n;
    memcpy(ctx->group, comm->replica_group, comm->rank_n * sizeof(*ctx->group));
    ctx->group_hash = hash_group(ctx->group, ctx->rank_n);
    st = take_list(api, "input", input, n, comm->vnc, esize, ctx->in);
    if (st == NRT_SUCCESS)
        st = take_list(api, "output", output, n, comm->vnc, esize, ctx->out);
    for (size_t i = 0; i < n && st == NRT_SUCCESS; i++) {
        size_t in = ctx->in[i].size, out = ctx->out[i].size, k = ctx->rank_n;
        bool fits = cc_op == NRT_CC_ALLREDUCE   ? in == out
                    : cc_op == NRT_CC_ALLGATHER ? out / k == in && out % k == 0
                                                : in / k == out && in % k == 0;
        if (!fits) {
            EMU_ERR(api, "%s over %u ranks: input %zu has %zu bytes, output %zu has %zu",
                    cc_op_name(cc_op), ctx->rank_n, i, in, i, out);
            st = NRT_INVALID;
        }
        for (size_t j = 0; j < n && st == NRT_SUCCESS && !emu_version_at_least(2, 31); j++) {
            if (emu_views_overlap(&ctx->out[i], &ctx->in[j])) {
                EMU_ERR(api,
                        "output %zu overlaps input %zu: in-place collectives need libnrt 2.31 "
                        "(Neuron SDK 2.29); this is libnrt %llu.%llu",
                        i, j, (unsigned long long)emu_rt.version[0],
                        (unsigned long long)emu_rt.version[1]);
                st = NRT_INVALID;
            }
        }
    }
    if (st != NRT_SUCCESS) {
        cc_context_free(ctx);
        goto out_leave;
    }
    pthread_mutex_lock(&cc.lock);
    ctx->next = cc.prepared;
    cc.prepared = ctx;
    pthread_mutex_unlock(&cc.lock);
    *cc_ctx = ctx;

out_leave:
    emu_leave();
    return st;
}

/* Finds and unlinks a prepared context. Caller holds cc.lock. */
static bool take_prepared(struct nrt_cc_context *ctx)
{
    for (struct nrt_cc_context **p = &cc.prepared; *p != NULL; p = &(*p)->next) {
        if (*p == ctx) {
            *p = ctx->next;
            ctx->next = NULL;
            return true;
        }
    }
    return false;
}

/* Queues a prepared context on its core's queue 0 and returns its sequence number at once. */
NRT_EMU_EXPORT_RECENT NRT_STATUS nrta_cc_schedule(nrt_cc_context_t **cc_ctx, int queue,
                                                  nrta_error_tracker_t *err,
                                                  nrta_seq_t *req_sequence)
{
    static const char api[] = "nrta_cc_schedule";
    NRT_STATUS st = emu_enter(api);
    if (st != NRT_SUCCESS)
        return st;
    st = cc_available(api);
    bool v3 = emu_version_at_least(2, 31);
    if (st == NRT_SUCCESS && (cc_ctx == NULL || *cc_ctx == NULL || req_sequence == NULL)) {
        EMU_ERR(api, "cc_ctx, *cc_ctx and req_sequence must not be NULL");
        st = NRT_INVALID;
    }
    if (st == NRT_SUCCESS && queue != 0) {
        EMU_ERR(api, "queue %d: collectives are scheduled on queue 0", queue);
        st = NRT_INVALID;
    }
    if (st != NRT_SUCCESS) {
        emu_leave();
        return st;
    }
    pthread_mutex_lock(&cc.lock);
    struct nrt_cc_context *ctx = *cc_ctx;
    cc_member_t *m = NULL;
    bool taken = take_prepared(ctx);
    if (!taken) {
        EMU_ERR(api,
                "*cc_ctx %p is not a prepared collective (scheduled already, or not from "
                "nrta_cc_prepare)",
                (void *)ctx);
        st = NRT_INVALID;
    } else if (!v3 && err != NULL && !cc_tracker_live(err)) {
        EMU_ERR(api, "err %p is not a live error tracker", (void *)err);
        st = NRT_INVALID;
    } else if ((m = &cc.m[ctx->vnc])->queued >= CC_QUEUE_DEPTH) {
        EMU_WARN(api, "NeuronCore %u's collectives queue holds %u requests", ctx->vnc, m->queued);
        st = NRT_QUEUE_FULL;
    }
    if (st != NRT_SUCCESS) {
        if (taken) {
            ctx->next = cc.prepared; /* changes nothing: still prepared */
            cc.prepared = ctx;
        }
        pthread_mutex_unlock(&cc.lock);
        emu_leave();
        return st;
    }
    ctx->seqnum = ++m->issued;
    ctx->tracker = v3 ? NULL : err;
    ctx->ret = v3 ? (NRT_STATUS *)(void *)err : NULL; /* async API 3: a status pointer */
    if (ctx->ret != NULL)
        *ctx->ret = NRT_COLL_PENDING;
    if (m->tail != NULL)
        m->tail->next = ctx;
    else
        m->head = ctx;
    m->tail = ctx;
    m->queued++;
    pthread_cond_broadcast(&cc.cond);
    *req_sequence = cc_make_seq(ctx->vnc, ctx->seqnum);
    *cc_ctx = NULL; /* the runtime frees it once the collective ran */
    pthread_mutex_unlock(&cc.lock);
    emu_leave();
    return NRT_SUCCESS;
}
