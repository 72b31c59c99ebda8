/* SPDX-License-Identifier: Apache-2.0 */
/* IPC mappings of peers' buffers (ranks in other processes on this host). Opening a handle
 * costs a mapping and, on first touch, page faults, while training loops pass the same
 * buffers again and again: mappings are cached by the handle's bytes and closed at destroy.
 * The cache is bounded; the least recently used entry not needed by the current operation is
 * closed to make room. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hal/src/comm/engine_impl.h"
#include "hal/src/core.h"

#define ENG_IPC_CACHE_MAX 256
/* Looks (2 ms apart) at a peer whose buffer could not be mapped before blaming the mapping. */
#define ENG_IPC_GONE_CHECKS 50

static uint64_t hash_handle(const hal_ipc_handle_t *h)
{
    uint64_t x = UINT64_C(1469598103934665603); /* FNV-1a */
    for (size_t i = 0; i < sizeof(h->bytes); i++) {
        x ^= h->bytes[i];
        x *= UINT64_C(1099511628211);
    }
    return x;
}

hal_status_t eng_ipc_map(hal_engine_comm_t *c, int peer, const hal_ipc_handle_t *handle,
                         const char *call, void **ptr)
{
    if (!c->has_ipc)
        return eng_fail(c, HAL_ERROR_INTERNAL, call, "a peer's buffer needs IPC, which is absent");
    uint64_t hash = hash_handle(handle);
    for (size_t i = 0; i < c->ipc_count; i++) {
        eng_ipc_entry_t *e = &c->ipc_cache[i];
        if (e->hash == hash && memcmp(&e->handle, handle, sizeof(*handle)) == 0) {
            e->used = c->ops_run;
            *ptr = e->ptr;
            return HAL_OK;
        }
    }
    if (!c->ipc_cache) {
        c->ipc_cache = calloc(ENG_IPC_CACHE_MAX, sizeof(*c->ipc_cache));
        if (!c->ipc_cache)
            return eng_fail(c, HAL_ERROR_OUT_OF_HOST_MEMORY, call, "out of host memory");
    }
    size_t slot = c->ipc_count;
    if (slot == ENG_IPC_CACHE_MAX) {
        size_t victim = SIZE_MAX;
        for (size_t i = 0; i < c->ipc_count; i++) {
            const eng_ipc_entry_t *e = &c->ipc_cache[i];
            if (e->used != c->ops_run &&
                (victim == SIZE_MAX || e->used < c->ipc_cache[victim].used))
                victim = i;
        }
        if (victim == SIZE_MAX)
            return eng_fail(c, HAL_ERROR_INTERNAL, call,
                            "more than %d peer buffers in one operation", ENG_IPC_CACHE_MAX);
        c->ipc.close(c->ipc.ctx, c->ipc_cache[victim].ptr);
        slot = victim;
    } else {
        c->ipc_count++;
    }
    void *p = NULL;
    hal_status_t st = c->ipc.open(c->ipc.ctx, handle, &p);
    if (st != HAL_OK) {
        /* Drop the slot: move the last entry into it. */
        c->ipc_cache[slot] = c->ipc_cache[--c->ipc_count];
        /* The usual reason: the peer (and with it its memory) is going away. A dying process
         * loses its files before it is reported as exited: give it a moment to be. */
        const eng_peer_t *p = &c->peers[peer];
        for (int i = 0; i < ENG_IPC_GONE_CHECKS; i++) {
            if (__atomic_load_n(&p->ctrl->state.v, __ATOMIC_ACQUIRE) ||
                (p->watch && eng_process_gone(p->pid, p->pidfd)))
                return eng_fail(c, HAL_ERROR_REMOTE, call,
                                "rank %d (pid %d) is gone: its buffer cannot be mapped", peer,
                                p->pid);
            struct timespec ts = { 0, 2000000 };
            nanosleep(&ts, NULL);
        }
        return eng_fail(c, st, call, "cannot map rank %d's buffer (%s): %s", peer,
                        hal_status_string(st), hal_last_error_message());
    }
    c->ipc_cache[slot] =
        (eng_ipc_entry_t){ .handle = *handle, .hash = hash, .ptr = p, .used = c->ops_run };
    *ptr = p;
    return HAL_OK;
}

void eng_ipc_close_all(hal_engine_comm_t *c)
{
    for (size_t i = 0; i < c->ipc_count; i++)
        c->ipc.close(c->ipc.ctx, c->ipc_cache[i].ptr);
    free(c->ipc_cache);
    c->ipc_cache = NULL;
    c->ipc_count = 0;
}
