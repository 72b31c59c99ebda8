/* SPDX-License-Identifier: Apache-2.0 */
/* The fault-injection layer (HAL_LAYERS=faults, HAL_FAULTS=<spec>): deterministic, seeded
 * failures for reliability tests. What each fault does, and which calls count toward a rule, is
 * documented in hal/layers/README.md; the spec parser is faults_spec.c.
 *
 * Determinism: a rule counts its eligible calls per key (the device index, or the rank for the
 * collective kinds), and whether the k-th one fails is a pure function of (seed, rule, key, k).
 * A program that makes the same calls on each device in the same order fails at the same
 * places on every run, whatever the threads' interleaving across devices. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hal/layers/faults.h"
#include "hal/layers/layer.h"
#include "hal/src/core.h"

/* Eligible calls are counted in this many buckets per rule, by key. */
#define KEY_BUCKETS 64

/* The layer's bit in a wrapper's state word: the device is lost. */
#define STATE_LOST 1u

typedef struct rule_state {
    _Atomic uint64_t calls[KEY_BUCKETS];
    _Atomic uint64_t fired;
} rule_state_t;

typedef struct faults_ctx {
    hal_layer_inst_t *inst;
    hal_faults_spec_t spec;
    rule_state_t state[HAL_FAULTS_MAX_RULES];
} faults_ctx_t;

static _Atomic uint64_t injected[HAL_FAULT_KINDS];

/* What each kind does, as the log says it. */
static const char *const outcomes[HAL_FAULT_KINDS] = {
    [HAL_FAULT_ALLOC] = "HAL_ERROR_OUT_OF_DEVICE_MEMORY",
    [HAL_FAULT_DEVICE_LOST] = "HAL_ERROR_DEVICE_LOST",
    [HAL_FAULT_STREAM_FAIL] = "HAL_ERROR_BACKEND_SPECIFIC",
    [HAL_FAULT_COLL_TIMEOUT] = "HAL_ERROR_TIMEOUT",
    [HAL_FAULT_PEER_DEATH] = "SIGKILL",
};

uint64_t hal_faults_injected(hal_fault_kind_t kind)
{
    return (unsigned)kind < HAL_FAULT_KINDS ? atomic_load(&injected[kind]) : 0;
}

/* Takes one of the rule's firings if it has any left. */
static bool take_firing(faults_ctx_t *ctx, uint32_t i)
{
    uint64_t limit = ctx->spec.rules[i].count;
    uint64_t n = atomic_load(&ctx->state[i].fired);
    while (n < limit)
        if (atomic_compare_exchange_weak(&ctx->state[i].fired, &n, n + 1))
            return true;
    return false;
}

/* One line per injected fault on stderr (log=1), key=value, for drivers that classify runs. */
static void log_fault(const faults_ctx_t *ctx, uint32_t rule, uint64_t key, uint64_t k,
                      const char *where, const char *outcome)
{
    if (!ctx->spec.log)
        return;
    const hal_fault_rule_t *r = &ctx->spec.rules[rule];
    char line[256];
    int n = snprintf(
        line, sizeof(line),
        "hal-faults: pid=%d kind=%s rule=%u %s=%llu call=%llu at=%s outcome=%s\n", (int)getpid(),
        hal_fault_kind_name(r->kind), rule,
        r->kind == HAL_FAULT_COLL_TIMEOUT || r->kind == HAL_FAULT_PEER_DEATH ? "rank" : "device",
        (unsigned long long)key, (unsigned long long)k, where, outcome);
    if (n > 0) {
        ssize_t ignored =
            write(STDERR_FILENO, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
        (void)ignored;
    }
}

/* Counts an eligible call of `kind` with `key` against every matching rule; returns the index of
 * the rule that fires, or -1. `device` is the device index (-1: none), `rank` the rank (-1). */
static int decide(faults_ctx_t *ctx, hal_fault_kind_t kind, int64_t device, int64_t rank,
                  uint64_t key, const char *where)
{
    int fired = -1;
    for (uint32_t i = 0; i < ctx->spec.nrules; i++) {
        const hal_fault_rule_t *r = &ctx->spec.rules[i];
        if (r->kind != kind || (r->device >= 0 && r->device != device) ||
            (r->rank >= 0 && r->rank != rank))
            continue;
        uint64_t k = atomic_fetch_add(&ctx->state[i].calls[key % KEY_BUCKETS], 1) + 1;
        if (fired < 0 && hal_faults_draw(&ctx->spec, i, key, k) && take_firing(ctx, i)) {
            fired = (int)i;
            atomic_fetch_add(&injected[kind], 1);
            log_fault(ctx, i, key, k, where, outcomes[kind]);
        }
    }
    return fired;
}

/* A wait on a lost device that the layer let through (faults_before to faults_after). */
static char lost_wait;

static bool device_lost(const hal_layer_obj_t *d)
{
    return d && (atomic_load(&((hal_layer_obj_t *)d)->state) & STATE_LOST);
}

/* The host function that fails a stream. */
static hal_status_t fail_stream(void *arg, hal_status_t stream_status)
{
    hal_host_set_error("injected stream failure (HAL_FAULTS stream_fail)");
    return HAL_ERROR_BACKEND_SPECIFIC;
}

static hal_status_t fail_stream_timeout(void *arg, hal_status_t stream_status)
{
    hal_host_set_error("injected collective timeout (HAL_FAULTS coll_timeout)");
    return HAL_ERROR_TIMEOUT;
}

/* Enqueues fn on the next level's stream, as a call of the layer's own. */
static void enqueue_failure(hal_layer_obj_t *s, hal_stream_host_fn_t fn)
{
    hal_layer_internal_begin();
    hal_status_t st = s->next->stream_launch_host_fn(s->obj, fn, NULL);
    hal_layer_internal_end();
    if (st != HAL_OK)
        hal_host_take_error();
}

static hal_status_t faults_before(void *arg, hal_layer_call_t *c)
{
    faults_ctx_t *ctx = arg;
    uint32_t flags = hal_slot_flags(c->slot);
    const char *slot = hal_slot_name(c->slot);
    if (device_lost(c->device)) {
        /* Sticky. Releases still happen (the status says the device is gone), and waits still
         * wait for what the backend had been given, so that the memory a caller frees after a
         * wait is no longer in use below this layer; both report the loss. */
        if (flags & HAL_SLOT_FLAG_BLOCKING) {
            c->scratch = &lost_wait;
            return HAL_OK;
        }
        ctx->inst->host->set_error("device %u is lost (injected by HAL_FAULTS device_lost)",
                                   c->device->id);
        return HAL_ERROR_DEVICE_LOST;
    }
    if (!c->device)
        return HAL_OK;
    int64_t dev = c->device->id;
    if (!(flags & HAL_SLOT_FLAG_RELEASES) &&
        decide(ctx, HAL_FAULT_DEVICE_LOST, dev, -1, (uint64_t)dev, slot) >= 0) {
        atomic_fetch_or(&c->device->state, STATE_LOST);
        if (flags & HAL_SLOT_FLAG_BLOCKING) {
            c->scratch = &lost_wait;
            return HAL_OK;
        }
        ctx->inst->host->set_error("device %u was lost (injected by HAL_FAULTS device_lost)",
                                   c->device->id);
        return HAL_ERROR_DEVICE_LOST;
    }
    if ((flags & HAL_SLOT_FLAG_ALLOCATES) && c->kind == HAL_MEM_KIND_DEVICE &&
        decide(ctx, HAL_FAULT_ALLOC, dev, -1, (uint64_t)dev, slot) >= 0) {
        ctx->inst->host->set_error("out of device memory: injected by HAL_FAULTS alloc (%llu "
                                   "bytes requested on device %u)",
                                   (unsigned long long)c->size, c->device->id);
        return HAL_ERROR_OUT_OF_DEVICE_MEMORY;
    }
    if ((flags & HAL_SLOT_FLAG_COLLECTIVE) && c->comm) {
        int64_t rank = c->comm->rank;
        if (decide(ctx, HAL_FAULT_PEER_DEATH, dev, rank, (uint64_t)rank, slot) >= 0)
            raise(SIGKILL);
        if (decide(ctx, HAL_FAULT_COLL_TIMEOUT, dev, rank, (uint64_t)rank, slot) >= 0) {
            /* As if the native collective had timed out: the stream and the communicator latch
             * the timeout, and the native communicator is aborted so that its peers stop. */
            atomic_store(&c->comm->state, (uint64_t)HAL_ERROR_TIMEOUT);
            if (c->stream && c->stream->next->stream_launch_host_fn)
                enqueue_failure(c->stream, fail_stream_timeout);
            hal_layer_internal_begin();
            c->comm->next->comm_abort(c->comm->obj);
            hal_layer_internal_end();
            return HAL_LAYER_HANDLED;
        }
    }
    if (c->slot == HAL_SLOT_comm_get_async_error && c->comm) {
        uint64_t latched = atomic_load(&c->comm->state);
        if (latched) {
            ctx->inst->host->set_error("injected collective timeout (HAL_FAULTS coll_timeout)");
            return (hal_status_t)latched;
        }
    }
    return HAL_OK;
}

static hal_status_t faults_after(void *arg, hal_layer_call_t *c, hal_status_t st)
{
    faults_ctx_t *ctx = arg;
    if (c->scratch == &lost_wait) {
        ctx->inst->host->set_error("device %u is lost (injected by HAL_FAULTS device_lost)",
                                   c->device->id);
        return HAL_ERROR_DEVICE_LOST;
    }
    if (st == HAL_OK && c->stream && (hal_slot_flags(c->slot) & HAL_SLOT_FLAG_COPIES)) {
        int64_t dev = c->device->id;
        if (decide(ctx, HAL_FAULT_STREAM_FAIL, dev, -1, (uint64_t)dev, hal_slot_name(c->slot)) >= 0)
            enqueue_failure(c->stream, fail_stream);
    }
    return st;
}

static hal_status_t faults_collective_begin(void *arg, const hal_host_collective_t *c)
{
    faults_ctx_t *ctx = arg;
    hal_layer_obj_t *d = hal_layer_find(ctx->inst, c->device);
    const char *name = ctx->inst->next->name;
    if (device_lost(d))
        return hal_error(HAL_ERROR_DEVICE_LOST, name, c->name,
                         "device %u is lost (injected by HAL_FAULTS device_lost)", c->device_index);
    int64_t dev = c->device_index, rank = c->rank;
    if (decide(ctx, HAL_FAULT_PEER_DEATH, dev, rank, (uint64_t)rank, c->name) >= 0)
        raise(SIGKILL);
    if (decide(ctx, HAL_FAULT_COLL_TIMEOUT, dev, rank, (uint64_t)rank, c->name) >= 0)
        return hal_error(HAL_ERROR_TIMEOUT, name, c->name,
                         "injected collective timeout on rank %d of %d (HAL_FAULTS coll_timeout)",
                         c->rank, c->nranks);
    return HAL_OK;
}

static hal_status_t faults_create(hal_layer_inst_t *inst, void **out)
{
    static const char call[] = "hal_backend_open";
    faults_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, inst->next->name, call,
                         "out of host memory for the faults layer");
    char msg[512];
    if (hal_faults_parse(getenv("HAL_FAULTS"), &ctx->spec, msg, sizeof(msg)) != HAL_OK) {
        free(ctx);
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, inst->next->name, call, "%s", msg);
    }
    for (uint32_t i = 0; i < ctx->spec.nrules; i++) {
        if (ctx->spec.rules[i].kind == HAL_FAULT_STREAM_FAIL &&
            !inst->next->stream_launch_host_fn) {
            free(ctx);
            return hal_error(HAL_ERROR_UNSUPPORTED, inst->next->name, call,
                             "HAL_FAULTS stream_fail needs a backend with stream_launch_host_fn");
        }
    }
    ctx->inst = inst;
    *out = ctx;
    return HAL_OK;
}

static void faults_destroy(void *ctx)
{
    free(ctx);
}

const hal_layer_t hal_faults_layer = {
    .name = "faults",
    .create = faults_create,
    .destroy = faults_destroy,
    .before = faults_before,
    .after = faults_after,
    .collective_begin = faults_collective_begin,
};
